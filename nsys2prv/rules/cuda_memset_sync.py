"""cuda_memset_sync: memory sets made with a synchronous cudaMemset* call on pinned host
memory or managed (Unified) memory.

A set counts when the call that issued it is named `cudaMemset%` without `async` (SQLite
LIKE, so case-insensitive) and its memory kind is pinned (1) or managed (4).
"""

from __future__ import annotations

import polars as pl

from .base import Column, Rule, RuleInput
from .cuda_calls import (MEMSET_TABLE, OPERATION_COLUMNS, RUNTIME_TABLE, by_duration,
                         copy_columns, label, memory_kind_labels, names_like, need_tables,
                         operations_with_calls)

PINNED, MANAGED = 1, 4  # CUPTI memory kinds

COLUMNS = (
    Column("Duration (ns)", pl.Int64, "ns"),
    Column("Start (ns)", pl.Int64, "ns"),
    Column("Memory Kind", pl.Utf8),
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
                (MEMSET_TABLE, "CUDA memset trace"))


def find(inp: RuleInput, options: dict) -> pl.DataFrame:
    table = inp.table(MEMSET_TABLE)
    assert table is not None
    labels = memory_kind_labels(inp)
    rows = operations_with_calls(
        inp, table, f'"memKind" = {PINNED} OR "memKind" = {MANAGED}',
        {**OPERATION_COLUMNS, "memKind": pl.Int64},
        names_like(inp, ("cudaMemset%",), ("%async%",)))
    return by_duration(rows, int(options["rows"])).select(
        "Duration (ns)", pl.col("start").alias("Start (ns)"),
        label("memKind", labels).alias("Memory Kind"), *copy_columns())


def _advice(options: dict) -> str:
    return ("These memory sets on pinned host or managed memory were made with synchronous "
            "cudaMemset calls, which block the CPU thread until they are done.\n\n"
            "What to try:\n"
            "   1. Synchronise less: use cudaMemsetAsync() on a stream.\n"
            "   2. Order work with CUDA events (cudaStreamWaitEvent(), cudaEventSynchronize()) "
            "rather than blocking the host.")


def _no_result(options: dict) -> str:
    return "No synchronous memory sets on pinned or managed memory found: no problem to report."


RULE = Rule(
    name="cuda_memset_sync",
    old_name="cuda-sync-memset",
    title="CUDA Synchronous Memset",
    summary="synchronous cudaMemset calls on pinned host or managed memory",
    options=(),
    columns=COLUMNS,
    check=check,
    find=find,
    advice=_advice,
    no_result=_no_result,
)
