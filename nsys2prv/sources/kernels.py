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
    Column("grid_x", ("gridX",), attribute=True),
    Column("grid_y", ("gridY",), attribute=True),
    Column("grid_z", ("gridZ",), attribute=True),
    Column("block_x", ("blockX",), attribute=True),
    Column("block_y", ("blockY",), attribute=True),
    Column("block_z", ("blockZ",), attribute=True),
    Column("registers", ("registersPerThread",), attribute=True),
    Column("static_smem", ("staticSharedMemory",), attribute=True),
    Column("dynamic_smem", ("dynamicSharedMemory",), attribute=True),
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
    without `attributes`, the launch geometry is null."""
    yield from read_chunks(report, TABLE, COLUMNS, chunk_rows, windowed=True,
                           attributes=attributes)
