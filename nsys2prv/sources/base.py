"""What every data-kind module shares: column resolution and chunked reading.

A source module turns one kind of nsys data into a *normalised table*: the same column names
and dtypes whatever the export version, ids instead of strings (names are resolved through
the report's string table), times in the report's own nanoseconds. Missing columns become
nulls; a missing table means the kind is absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from ..report.report import Report

DEFAULT_CHUNK_ROWS = 100_000


@dataclass(frozen=True)
class Column:
    """A normalised column: the first existing of `candidates`, else `fallback`.

    `transform` is applied in polars when it is a function (fast: the raw column goes through
    connectorx with its declared type) or in SQL when it is a template with {c}. `fallback`
    is a literal (NULL or a number) filled in polars when no candidate exists. An
    `attribute` (a kernel's local memory sizes: numbers the trace's views show, no analysis
    reads) is read only when the attributes are kept (`read_chunks`), else it is null.
    """

    name: str
    candidates: tuple[str, ...]
    dtype: pl.DataType = pl.Int64
    fallback: str = "NULL"
    transform: str | Callable[[pl.Expr], pl.Expr] | None = None
    attribute: bool = False


def _literal(text: str) -> int | float | None:
    if text.upper() == "NULL":
        return None
    return float(text) if "." in text else int(text)


def select_list(report: Report, table: str, columns: tuple[Column, ...]
                ) -> tuple[str, dict, list[pl.Expr]]:
    """SQL select list of raw columns, their dtypes, and the polars expressions that build the
    normalised columns from them. Only plain columns are selected where possible: connectorx
    types result columns from the table declaration, and an expression whose first value is
    NULL would make it fall back to the slow row-by-row reader."""
    real_cols = set(report.db.columns(table))
    parts: list[str] = []
    schema: dict[str, pl.DataType] = {}
    exprs: list[pl.Expr] = []
    raw: dict[str, str] = {}
    for col in columns:
        chosen = next((c for c in col.candidates if c in real_cols), None)
        if chosen is None:
            exprs.append(pl.lit(_literal(col.fallback), col.dtype).alias(col.name))
        elif isinstance(col.transform, str):
            alias = f"_sql_{col.name}"
            parts.append(f"{col.transform.format(c=chr(34) + chosen + chr(34))} AS {alias}")
            schema[alias] = col.dtype
            exprs.append(pl.col(alias).cast(col.dtype).alias(col.name))
        else:
            if chosen not in raw:
                raw[chosen] = f"_raw{len(raw)}"
                parts.append(f'"{chosen}" AS {raw[chosen]}')
                schema[raw[chosen]] = pl.Utf8 if col.dtype == pl.Utf8 else (
                    pl.Float64 if col.dtype == pl.Float64 else pl.Int64)
            e = pl.col(raw[chosen])
            if col.transform is not None:
                e = col.transform(e)
            exprs.append(e.cast(col.dtype).alias(col.name))
    return ", ".join(parts) if parts else "1 AS _none", schema, exprs


# the columns that name a Paraver row: a CPU thread, or a GPU stream of a process
ROW_KEYS = ("globalTid", "globalPid", "deviceId", "contextId", "streamId")


WINDOW_SCAN_ROWS = 1_000_000  # rows of (rowid, keys, start, end) scanned at a time
WINDOW_ROWID_SHARE = 0.25  # a window holding more of a table is read by a range scan


def window_rows(report: Report, table: str) -> tuple[str, np.ndarray | None]:
    """What a window needs of `table`: the rows that overlap it (a row without an end lasts
    to the report's end) and the first and the last row of every thread or stream - so that
    every row of the whole trace exists, with its whole lifetime, in the windowed one.
    Returns (SQL condition, None), or ("", sorted rowids) when they are few enough to be
    looked up. One scan of the key and time columns, in chunks (bounded memory), through
    the Arrow path (SQLite's GROUP BY would sort the whole table). ("", None): read all."""
    if report.window is None:
        return "", None
    cols = set(report.db.columns(table))
    if not {"start", "end"} <= cols:
        return "", None
    cache = report.__dict__.setdefault("_window_rows", {})
    if table in cache:
        return cache[table]
    lo, hi = report.window
    overlap_sql = f'(("end" >= {lo} OR "end" IS NULL) AND "start" < {hi})'
    keys = [k for k in ROW_KEYS if k in cols]
    names = [f"k{i}" for i in range(len(keys))]
    select = ", ".join(["rowid AS row_id", *(f'"{k}" AS {n}' for k, n in zip(keys, names)),
                        '"start" AS start', '"end" AS stop'])
    schema = {"row_id": pl.Int64, **{n: pl.Int64 for n in names}, "start": pl.Int64,
              "stop": pl.Int64}
    inside, parts, total = [], [], 0
    for df in report.db.chunks(table, select, schema, WINDOW_SCAN_ROWS):
        total += df.height
        inside.append(df.filter((pl.col("stop").is_null() | (pl.col("stop") >= lo))
                                & (pl.col("start") < hi))["row_id"])
        if names:  # one key column: the group_by of four is the scan's main cost
            key = pl.struct(names).hash() if len(names) > 1 else pl.col(names[0])
            df = df.select("row_id", "start", pl.col("stop").fill_null(pl.col("start")),
                           key.alias("key"))
            parts.append(df.group_by("key").agg(
                pl.col("row_id").get(pl.col("start").arg_min()).alias("a"),
                pl.col("start").min().alias("ta"),
                pl.col("row_id").get(pl.col("stop").arg_max()).alias("b"),
                pl.col("stop").max().alias("tb")))
    edges: list[int] = []
    if parts:  # the earliest (latest) of the chunks' own; ties to the first chunk's
        both = pl.concat(parts)
        edges += both.sort("ta", "a").unique("key", keep="first")["a"].to_list()
        edges += both.sort("tb", "b", descending=[True, False]).unique(
            "key", keep="first")["b"].to_list()
    inside_ids = pl.concat(inside) if inside else pl.Series([], dtype=pl.Int64)
    wanted = np.unique(np.concatenate([inside_ids.to_numpy(), np.asarray(edges, np.int64)]))
    if total and len(wanted) > WINDOW_ROWID_SHARE * total:
        edge_sql = f" OR rowid IN ({','.join(map(str, sorted(set(edges))))})" if edges else ""
        result = (f"({overlap_sql}{edge_sql})", None)
    else:
        result = ("", wanted)
    cache[table] = result
    return result


def read_chunks(report: Report, logical_table: str, columns: tuple[Column, ...],
                chunk_rows: int = DEFAULT_CHUNK_ROWS, where: str = "",
                windowed: bool = False, attributes: bool = True) -> Iterator[pl.DataFrame]:
    """Normalised chunks of a table. `windowed`: only the rows a report's window needs
    (`window_rows`), for tables whose rows stand on their own (no running totals, no
    pairing by order). Without `attributes`, the attribute columns are nulls, not read (on
    a kernel table, half the columns and 60 % of the time connectorx takes)."""
    table = report.table(logical_table)
    if table is None:
        return
    if not attributes:
        columns = tuple(replace(c, candidates=()) if c.attribute else c for c in columns)
    rowids = None
    if windowed:
        clause, rowids = window_rows(report, table)
        if clause:
            where = f"({where}) AND {clause}" if where else clause
    select, schema, exprs = select_list(report, table, columns)
    for df in report.db.chunks(table, "rowid AS row_id, " + select,
                               {"row_id": pl.Int64, **schema}, chunk_rows, where=where,
                               rowids=rowids):
        yield df.select(pl.col("row_id"), *exprs)


def has_rows(report: Report, logical_table: str) -> bool:
    return report.nonempty(logical_table) is not None


# Shared column transforms: nsys' serialised ids carry the PID in bits 24-47, the TID in 0-23.
def PID_FROM_GLOBAL(c: pl.Expr) -> pl.Expr:  # noqa: N802 - used like a constant
    return (c // (1 << 24)) % (1 << 24)


def TID_FROM_GLOBAL(c: pl.Expr) -> pl.Expr:  # noqa: N802 - used like a constant
    return c % (1 << 24)


# Column groups shared by many tables -----------------------------------------------------
# A GPU activity on a stream (kernel, memcpy, memset, graph execution, sync record).
GPU_ACTIVITY = (
    Column("start", ("start",)),
    Column("end", ("end",)),
    Column("pid", ("globalPid",), transform=PID_FROM_GLOBAL),
    Column("device", ("deviceId",)),
    Column("context", ("contextId",), fallback="0"),
    Column("stream", ("streamId",)),
    Column("correlation", ("correlationId",)),
)
# A call on a CPU thread (CUDA API, OS runtime, NVTX range, cuDNN, OpenACC, ...).
CPU_CALL = (
    Column("start", ("start",)),
    Column("end", ("end",)),
    Column("pid", ("globalTid",), transform=PID_FROM_GLOBAL),
    Column("tid", ("globalTid",), transform=TID_FROM_GLOBAL),
)


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
