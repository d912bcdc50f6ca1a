"""cuda_memcpy_sync: memory copies made with a synchronous cudaMemcpy* call.

A copy counts when the call that issued it is named `cudaMemcpy%` without `Async` (SQLite
LIKE), unless it is a host-to-device copy (copy kind 1) of at most 64000 bytes (CUDA returns
from those early) or a copy within one device (source and destination device ids equal and
known; exports leave them unknown for most copies, so most device-to-device copies count).
"""

from __future__ import annotations

import polars as pl

from .base import Column, Rule, RuleInput
from .cuda_calls import (MEMCPY_TABLE, OPERATION_COLUMNS, RUNTIME_TABLE, by_duration,
                         copy_columns, label, memory_kind_labels, names_like, need_tables,
                         operations_with_calls)

SMALL_HOST_TO_DEVICE = 64000  # bytes
HOST_TO_DEVICE = 1  # CUPTI memcpy kind

COLUMNS = (
    Column("Duration (ns)", pl.Int64, "ns"),
    Column("Start (ns)", pl.Int64, "ns"),
    Column("Src Kind", pl.Utf8),
    Column("Dst Kind", pl.Utf8),
    Column("Bytes (B)", pl.Int64, "B"),
    Column("PID", pl.Int64),
    Column("Device ID", pl.Int64),
    Column("Context ID", pl.Int64),
    Column("Green Context ID", pl.Int64),
    Column("Stream ID", pl.Int64),
    Column("API Name", pl.Utf8),
)


def check(inp: RuleInput) -> None:
    need_tables(inp, ("StringIds", "string table"), (RUNTIME_TABLE, "CUDA API trace"),
                (MEMCPY_TABLE, "CUDA memcpy trace"))


def copies(inp: RuleInput, condition: str, include: tuple[str, ...],
           exclude: tuple[str, ...], limit: int) -> pl.DataFrame:
    """Copies meeting `condition` issued by calls named like `include` and not `exclude`,
    in this rule family's columns, longest first."""
    table = inp.table(MEMCPY_TABLE)
    assert table is not None
    labels = memory_kind_labels(inp)
    rows = operations_with_calls(
        inp, table, condition, {**OPERATION_COLUMNS, "srcKind": pl.Int64,
                                "dstKind": pl.Int64}, names_like(inp, include, exclude))
    return by_duration(rows, limit).select(
        "Duration (ns)", pl.col("start").alias("Start (ns)"),
        label("srcKind", labels).alias("Src Kind"), label("dstKind", labels).alias("Dst Kind"),
        *copy_columns())


def find(inp: RuleInput, options: dict) -> pl.DataFrame:
    table = inp.table(MEMCPY_TABLE)
    assert table is not None
    conditions = [f'NOT ("bytes" <= {SMALL_HOST_TO_DEVICE} AND "copyKind" = {HOST_TO_DEVICE})']
    if {"srcDeviceId", "dstDeviceId"} <= set(inp.columns(table)):
        conditions.append('NOT ("srcDeviceId" IS NOT NULL AND "srcDeviceId" = "dstDeviceId")')
    return copies(inp, " AND ".join(f"({c})" for c in conditions), ("cudaMemcpy%",),
                  ("%Async%",), int(options["rows"]))


def _advice(options: dict) -> str:
    return ("These copies were made with synchronous cudaMemcpy calls, which block the CPU "
            "thread until the copy is done (host-to-device copies of 64 KB or less, which "
            "return early, are left out).\n\n"
            "What to try: copy with cudaMemcpy*Async() on a stream, from pinned host memory.")


def _no_result(options: dict) -> str:
    return "No synchronous memory copies found: no problem to report."


RULE = Rule(
    name="cuda_memcpy_sync",
    old_name="cuda-sync-memcpy",
    title="CUDA Synchronous Memcpy",
    summary="memory copies made by synchronous cudaMemcpy calls",
    options=(),
    columns=COLUMNS,
    check=check,
    find=find,
    advice=_advice,
    no_result=_no_result,
)
