"""OS runtime calls (`OSRT_API`): libc/pthread functions traced by `nsys -t osrt`."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "osrt"
TABLE = "OSRT_API"

COLUMNS = CPU_CALL + (
    Column("name_id", ("nameId",)),
    Column("return_value", ("returnValue",)),
    Column("nesting_level", ("nestingLevel",), fallback="0"),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    yield from read_chunks(report, TABLE, COLUMNS, chunk_rows, windowed=True)

