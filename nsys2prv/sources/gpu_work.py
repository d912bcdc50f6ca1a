"""Where every piece of GPU work sits on its stream: kernels, memcpys, memsets and whole-graph
executions, with only their times, stream keys and correlation ids (no names, no payload).

The dependency lines (cudaStreamWaitEvent, host synchronisation) look for "the last work of a
stream before t" and "the first work of a stream after t"; they need the work of every table
in one shape, and nothing else of it, so reading these few columns again costs less than
keeping the translated tables.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from . import graphs, kernels, memory
from .base import GPU_ACTIVITY, DEFAULT_CHUNK_ROWS, has_rows, read_chunks

# table code -> (logical table, the translator kind that draws its rows)
KERNEL, MEMCPY, MEMSET, GRAPH = 0, 1, 2, 3
TABLES: dict[int, tuple[str, str]] = {
    KERNEL: (kernels.TABLE, "kernels"),
    MEMCPY: (memory.MEMCPY_TABLE, "memcpy"),
    MEMSET: (memory.MEMSET_TABLE, "memset"),
    GRAPH: (graphs.GRAPH_TRACE, "graphs"),
}


def available(report: Report) -> bool:
    return any(has_rows(report, t) for t, _ in TABLES.values())


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS,
         kinds: set[str] | None = None) -> Iterator[pl.DataFrame]:
    """Chunks of (row_id, start, end, pid, device, context, stream, correlation, table) of
    every table whose kind is in `kinds` (None: all), table by table in rowid order."""
    for code, (table, kind) in TABLES.items():
        if kinds is not None and kind not in kinds:
            continue
        if not has_rows(report, table):
            continue
        for df in read_chunks(report, table, GPU_ACTIVITY, chunk_rows, windowed=True):
            yield df.with_columns(pl.lit(code, pl.Int8).alias("table"))
