"""CUDA memory operations: memcpy (`CUPTI_ACTIVITY_KIND_MEMCPY`) and memset (`..._MEMSET`).

Both normalise to one layout; `copy_kind` is CUPTI's memcpy kind (null for memsets) and
`src_kind`/`dst_kind` are CUPTI memory kinds (a memset's memory is its destination).
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import GPU_ACTIVITY, DEFAULT_CHUNK_ROWS, Column, has_rows, read_chunks

MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"

_COMMON = GPU_ACTIVITY + (
    Column("bytes", ("bytes",)),
)

MEMCPY_COLUMNS = _COMMON + (
    Column("copy_kind", ("copyKind",)),
    Column("src_kind", ("srcKind",)),
    Column("dst_kind", ("dstKind",)),
    Column("value", (), fallback="NULL"),
    Column("graph_node_id", ("graphNodeId",)),
)

MEMSET_COLUMNS = _COMMON + (
    Column("copy_kind", (), fallback="NULL"),
    Column("src_kind", (), fallback="NULL"),
    Column("dst_kind", ("memKind",)),
    Column("value", ("value",)),
    Column("graph_node_id", ("graphNodeId",)),
)


def memcpy_available(report: Report) -> bool:
    return has_rows(report, MEMCPY_TABLE)


def memset_available(report: Report) -> bool:
    return has_rows(report, MEMSET_TABLE)


def read_memcpy(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    yield from read_chunks(report, MEMCPY_TABLE, MEMCPY_COLUMNS, chunk_rows, windowed=True)


def read_memset(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    yield from read_chunks(report, MEMSET_TABLE, MEMSET_COLUMNS, chunk_rows, windowed=True)
