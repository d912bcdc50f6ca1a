"""CUDA kernels (`CUPTI_ACTIVITY_KIND_KERNEL`): one row per kernel execution on a stream."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import GPU_ACTIVITY, DEFAULT_CHUNK_ROWS, Column, has_rows, read_chunks

KIND = "kernels"
TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"

COLUMNS = GPU_ACTIVITY + (
    Column("short_name_id", ("shortName",)),
    Column("name_id", ("demangledName", "shortName")),
    # the launch configuration: read even for a stream that is only analysed (the launch
    # statistics and the GPU metric rates' bounds come from it)
    Column("grid_x", ("gridX",)),
    Column("grid_y", ("gridY",)),
    Column("grid_z", ("gridZ",)),
    Column("block_x", ("blockX",)),
    Column("block_y", ("blockY",)),
    Column("block_z", ("blockZ",)),
    Column("registers", ("registersPerThread",)),
    Column("static_smem", ("staticSharedMemory",)),
    Column("dynamic_smem", ("dynamicSharedMemory",)),
    Column("carveout", ("sharedMemoryExecuted",)),
    Column("cluster_x", ("clusterX",)),
    Column("cluster_y", ("clusterY",)),
    Column("cluster_z", ("clusterZ",)),
    Column("max_active_clusters", ("maxActiveClusters",)),
    Column("local_mem_thread", ("localMemoryPerThread",), attribute=True),
    Column("local_mem_total", ("localMemoryTotal",), attribute=True),
    Column("graph_node_id", ("graphNodeId",)),
    Column("graph_id", ("graphId",)),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS, attributes: bool = True
         ) -> Iterator[pl.DataFrame]:
    """Normalised kernel rows; names are StringIds ids (`short_name_id`, `name_id`);
    without `attributes`, the local memory sizes are null (the launch configuration is
    always read: the launch statistics need it)."""
    yield from read_chunks(report, TABLE, COLUMNS, chunk_rows, windowed=True,
                           attributes=attributes)
