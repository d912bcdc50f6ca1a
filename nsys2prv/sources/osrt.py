"""OS runtime calls (`OSRT_API`): libc/pthread functions traced by `nsys -t osrt`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import polars as pl

from ..report.report import Report
from . import callchains
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "osrt"
TABLE = "OSRT_API"

COLUMNS = CPU_CALL + (
    Column("name_id", ("nameId",)),
    Column("return_value", ("returnValue",)),
    Column("nesting_level", ("nestingLevel",), fallback="0"),
    # OSRT_CALLCHAINS.id of the call's stack (callchains.osrt_chain: 0 = none)
    Column("chain", ("callchainId",), transform=callchains.osrt_chain),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def has_stacks(report: Report) -> bool:
    """Whether the export kept call stacks of OS runtime calls."""
    return callchains.available(report, callchains.OSRT)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    """Normalised calls; `chain` is null everywhere when the export has no stacks (the
    column is then not read)."""
    columns = COLUMNS if has_stacks(report) else tuple(
        replace(c, candidates=()) if c.name == "chain" else c for c in COLUMNS)
    yield from read_chunks(report, TABLE, columns, chunk_rows, windowed=True)

