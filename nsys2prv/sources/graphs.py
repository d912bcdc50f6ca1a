"""CUDA graphs: graph executions, the GPU activities graph nodes ran, and CPU-side graph events.

* `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` (`--cuda-graph-trace=graph`): one row per graph launch on
  a stream, with `graphId`, `graphExecId` and the correlation id of the cudaGraphLaunch call.
* With `--cuda-graph-trace=node`, kernels, memcpys and memsets carry `graphNodeId` (and, in
  recent exports, kernels carry `graphId`); their correlation id is the cudaGraphLaunch's.
* `CUDA_GRAPH_NODE_EVENTS` (node creation/clone) and `CUDA_GRAPH_EVENTS` (graph creation,
  clone, instantiation) on CPU threads. nsys 2022.4 had only `CUDA_GRAPH_EVENTS`, with the
  node columns; it is read by its columns, whatever its name.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from . import kernels, memory
from .base import (GPU_ACTIVITY, CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "graphs"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_EVENTS = "CUDA_GRAPH_EVENTS"
NODE_EVENTS = "CUDA_GRAPH_NODE_EVENTS"
NODE_TABLES = {"kernel": kernels.TABLE, "memcpy": memory.MEMCPY_TABLE,
               "memset": memory.MEMSET_TABLE}

EXECUTION_COLUMNS = GPU_ACTIVITY + (
    Column("graph_id", ("graphId",)),
    Column("graph_exec_id", ("graphExecId",)),
)

EVENT_COLUMNS = CPU_CALL + (
    Column("event_class", ("eventClass",)),
    Column("name_id", ("nameId",)),
    Column("graph_id", ("graphId",)),
    Column("original_graph_id", ("originalGraphId",)),
    Column("graph_exec_id", ("graphExecId",)),
    Column("node_id", ("graphNodeId",)),
    Column("original_node_id", ("originalGraphNodeId",)),
)

NODE_COLUMNS = GPU_ACTIVITY + (
    Column("node_id", ("graphNodeId",)),
    Column("graph_id", ("graphId",)),
)


def executions_available(report: Report) -> bool:
    return has_rows(report, GRAPH_TRACE)


def events_available(report: Report) -> bool:
    return has_rows(report, GRAPH_EVENTS) or has_rows(report, NODE_EVENTS)


def _node_where(report: Report, table: str) -> str | None:
    return "graphNodeId IS NOT NULL" if "graphNodeId" in report.columns(table) else None


def nodes_available(report: Report) -> bool:
    """True when some kernel, memcpy or memset was run by a graph node (SQL, stops early)."""
    for table in NODE_TABLES.values():
        real = report.table(table)
        where = _node_where(report, table) if real else None
        if where and report.db.scalar(f'SELECT 1 FROM "{real}" WHERE {where} LIMIT 1'):
            return True
    return False


def available(report: Report) -> bool:
    return executions_available(report) or events_available(report) or nodes_available(report)


def read_executions(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS
                    ) -> Iterator[pl.DataFrame]:
    """Graph executions: start, end, stream keys, correlation, graph_id, graph_exec_id."""
    yield from read_chunks(report, GRAPH_TRACE, EXECUTION_COLUMNS, chunk_rows)


def read_events(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS
                ) -> Iterator[pl.DataFrame]:
    """CPU-side graph events of both tables in one layout (absent ids are null), with a
    `source` column (the table) so that row ids stay distinct per table."""
    for i, table in enumerate((NODE_EVENTS, GRAPH_EVENTS)):
        for chunk in read_chunks(report, table, EVENT_COLUMNS, chunk_rows):
            yield chunk.with_columns(pl.lit(i, pl.Int8).alias("source"))


def read_nodes(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS
               ) -> Iterator[tuple[str, pl.DataFrame]]:
    """(activity, chunk) of the kernels/memcpys/memsets a graph node ran (graphNodeId set);
    `row_id` is the activity's rowid in its own table."""
    for activity, table in NODE_TABLES.items():
        if report.table(table) is None:
            continue
        where = _node_where(report, table)
        if where is None:
            continue
        for chunk in read_chunks(report, table, NODE_COLUMNS, chunk_rows, where=where):
            yield activity, chunk
