"""What the CUDA API rules share: finding calls by name and matching GPU copies/sets to the
calls that issued them.

Names are matched with SQLite's LIKE on the export's string table (ASCII case-insensitive,
`%` for any text), so `cudaMemcpy%` also takes `cudaMemcpy_v3020` and `cudaMemcpy2D`. A
memory operation belongs to every call with its correlation id, as in nsys (which matches on
the id alone, so ids reused by two processes pair across them). Rows are ordered as nsys'
join yields them (by call, then by operation) before the stable sort by duration.
"""

from __future__ import annotations

import polars as pl

from .base import RuleInput, Skip, limit_rows, pid_of, sql_text

RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
MEM_KIND_ENUM = "ENUM_CUDA_MEM_KIND"
# CUPTI memory kinds, for exports without ENUM_CUDA_MEM_KIND (labels as nsys writes them)
MEM_KIND_LABELS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
                   5: "Device Static", 6: "Managed Static", 7: "Unknown"}


def need_tables(inp: RuleInput, *tables: tuple[str, str]) -> dict[str, str]:
    """Real names of (logical table, what it holds) pairs; Skip naming the first missing."""
    found = {}
    for logical, what in tables:
        real = inp.table(logical)
        if real is None:
            raise Skip(f"{inp.name} has no {what} ({logical})")
        found[logical] = real
    return found


def names_like(inp: RuleInput, include: tuple[str, ...], exclude: tuple[str, ...] = ()
               ) -> pl.DataFrame:
    """(id, value) of the strings LIKE any of `include` and none of `exclude`."""
    wanted = " OR ".join(f"value LIKE {sql_text(p)}" for p in include)
    unwanted = "".join(f" AND value NOT LIKE {sql_text(p)}" for p in exclude)
    return inp.string_ids(f"({wanted}){unwanted}")


def calls_named(inp: RuleInput, names: pl.DataFrame, columns: dict[str, pl.DataType],
                windowed: bool = True) -> pl.DataFrame:
    """The CUDA API calls whose name is one of `names`, in row order, with `API Name`."""
    table = inp.table(RUNTIME_TABLE)
    assert table is not None
    if names.height == 0:
        return pl.DataFrame(schema={"_row": pl.Int64, **columns, "API Name": pl.Utf8})
    ids = ", ".join(str(i) for i in names["id"].to_list())
    calls = inp.read(table, {**columns, "nameId": pl.Int64}, f'"nameId" IN ({ids})',
                     windowed=windowed)
    return calls.join(names.rename({"id": "nameId", "value": "API Name"}), on="nameId",
                      how="inner", maintain_order="left").drop("nameId")


def memory_kind_labels(inp: RuleInput) -> dict[int, str]:
    """id -> label of CUDA memory kinds (the built-in list when the export has none)."""
    if inp.table(MEM_KIND_ENUM) is None:
        return dict(MEM_KIND_LABELS)
    return inp.report.enums.labels(MEM_KIND_ENUM)


def label(column: str, labels: dict[int, str]) -> pl.Expr:
    return pl.col(column).replace_strict(labels, default=None, return_dtype=pl.Utf8)


def operations_with_calls(inp: RuleInput, table: str, condition: str,
                          columns: dict[str, pl.DataType], names: pl.DataFrame
                          ) -> pl.DataFrame:
    """Rows of a memcpy/memset `table` meeting SQL `condition` (within the window), each
    with the API call(s) of the same correlation id named in `names` (any time: nsys does
    not window the calls), ordered by call then by operation."""
    ops = inp.read(table, {**columns, "correlationId": pl.Int64}, condition)
    calls = calls_named(inp, names, {"correlationId": pl.Int64}, windowed=False)
    return calls.rename({"_row": "_call"}).join(
        ops, on="correlationId", how="inner", maintain_order="left_right")


def by_duration(rows: pl.DataFrame, limit: int) -> pl.DataFrame:
    """Longest first (ties keep their order), at most `limit` rows (-1: all)."""
    ranked = rows.with_columns((pl.col("end") - pl.col("start")).alias("Duration (ns)")).sort(
        "Duration (ns)", descending=True, maintain_order=True)
    return limit_rows(ranked, limit)


def copy_columns() -> list[pl.Expr]:
    """The columns memcpy and memset rows share after their kinds."""
    green = pl.col("greenContextId")
    return [pl.col("bytes").alias("Bytes (B)"),
            pid_of(pl.col("globalPid")).alias("PID"),
            pl.col("deviceId").alias("Device ID"), pl.col("contextId").alias("Context ID"),
            pl.when(green != 0).then(green).alias("Green Context ID"),
            pl.col("streamId").alias("Stream ID"), pl.col("API Name")]


OPERATION_COLUMNS = {"start": pl.Int64, "end": pl.Int64, "bytes": pl.Int64,
                     "globalPid": pl.Int64, "deviceId": pl.Int64, "contextId": pl.Int64,
                     "greenContextId": pl.Int64, "streamId": pl.Int64}
