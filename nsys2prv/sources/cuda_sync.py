"""CUDA synchronisation records (`CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`).

A record covers the time a host thread blocked in a stream/event/context synchronisation;
it carries the correlation id of the API call that blocked, not the thread itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import GPU_ACTIVITY, DEFAULT_CHUNK_ROWS, Column, has_rows, read_chunks

KIND = "cuda_sync"
TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"

COLUMNS = GPU_ACTIVITY + (
    Column("sync_type", ("syncType",)),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    yield from read_chunks(report, TABLE, COLUMNS, chunk_rows, windowed=True)
