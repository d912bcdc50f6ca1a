"""What every data-kind module shares: column resolution and chunked reading.

A source module turns one kind of nsys data into a *normalised table*: the same column names
and dtypes whatever the export version, ids instead of strings (names are resolved through
the report's string table), times in the report's own nanoseconds. Missing columns become
nulls; a missing table means the kind is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from ..report.report import Report

DEFAULT_CHUNK_ROWS = 1_000_000


@dataclass(frozen=True)
class Column:
    """A normalised column: the first existing of `candidates`, else `fallback` SQL."""

    name: str
    candidates: tuple[str, ...]
    dtype: pl.DataType = pl.Int64
    fallback: str = "NULL"
    transform: str | None = None  # SQL template with {c} for the chosen column


def select_list(report: Report, table: str, columns: tuple[Column, ...]) -> tuple[str, dict]:
    real_cols = set(report.db.columns(table))
    parts, schema = [], {}
    for col in columns:
        chosen = next((c for c in col.candidates if c in real_cols), None)
        if chosen is None:
            expr = col.fallback
        else:
            expr = f'"{chosen}"'
            if col.transform:
                expr = col.transform.format(c=expr)
        parts.append(f"{expr} AS {col.name}")
        schema[col.name] = col.dtype
    return ", ".join(parts), schema


def read_chunks(report: Report, logical_table: str, columns: tuple[Column, ...],
                chunk_rows: int = DEFAULT_CHUNK_ROWS, where: str = "") -> Iterator[pl.DataFrame]:
    table = report.table(logical_table)
    if table is None:
        return
    select, schema = select_list(report, table, columns)
    yield from report.db.chunks(table, "rowid AS row_id, " + select,
                                {"row_id": pl.Int64, **schema}, chunk_rows, where=where)


def has_rows(report: Report, logical_table: str) -> bool:
    return report.nonempty(logical_table) is not None


# Shared column transforms -----------------------------------------------------------------
PID_FROM_GLOBAL = "(({c} >> 24) & 16777215)"
TID_FROM_GLOBAL = "({c} & 16777215)"


def span(report: Report, logical_table: str) -> tuple[int | None, int | None, int]:
    """(min start, max end, rows) of a table, computed by SQLite in one scan."""
    table = report.table(logical_table)
    if table is None:
        return None, None, 0
    cols = report.db.columns(table)
    end = 'coalesce("end", "start")' if "end" in cols else '"start"'
    lo, hi, n = report.db.rows(
        f'SELECT min("start"), max(max({end}), max("start")), count(*) FROM "{table}"')[0]
    return lo, hi, int(n or 0)
