"""Thread scheduling (`SCHED_EVENTS`, `nsys --cpuctxsw`): when each thread ran on which CPU.

The table has one row per switch (in or out); :func:`read` pairs them into intervals per
thread: `running` = between a switch-in and the next switch-out, else descheduled.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import has_rows

TABLE = "SCHED_EVENTS"


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def read(report: Report, chunk_rows: int = 0) -> Iterator[pl.DataFrame]:
    """Intervals (pid, tid, start, end, running, cpu, row_id); the last switch of a thread has
    end null. Sorted by SQLite (one pass over a table that is small next to GPU activity)."""
    table = report.table(TABLE)
    if table is None:
        return
    df = report.db.frame(
        f'SELECT rowid AS row_id, "start", cpu, isSchedIn AS sched_in, '
        f'(globalTid >> 24) & 16777215 AS pid, globalTid & 16777215 AS tid FROM "{table}" '
        f'ORDER BY globalTid, "start", rowid',
        {"row_id": pl.Int64, "start": pl.Int64, "cpu": pl.Int64, "sched_in": pl.Int64,
         "pid": pl.Int64, "tid": pl.Int64})
    c = pl.col
    df = df.with_columns(c("start").shift(-1).over("pid", "tid").alias("end"),
                         (c("sched_in") != 0).alias("running"))
    yield df.select("row_id", "pid", "tid", "start", "end", "running", "cpu")
