"""cuda_api_sync: CUDA calls that block the host until the device or a stream is idle.

The calls are `cudaDeviceSynchronize*` and `cudaStreamSynchronize*` (names matched with
SQLite's LIKE, so with any ABI suffix such as `_v3020`), longest first.
"""

from __future__ import annotations

import polars as pl

from .base import Column, Option, Rule, RuleInput, pid_of, tid_of
from .cuda_calls import RUNTIME_TABLE, by_duration, calls_named, names_like, need_tables

SYNC_CALLS = ("cudaDeviceSynchronize%", "cudaStreamSynchronize%")

COLUMNS = (
    Column("Duration (ns)", pl.Int64, "ns"),
    Column("Start (ns)", pl.Int64, "ns"),
    Column("PID", pl.Int64),
    Column("TID", pl.Int64),
    Column("API Name", pl.Utf8),
)


def check(inp: RuleInput) -> None:
    need_tables(inp, ("StringIds", "string table"), (RUNTIME_TABLE, "CUDA API trace"))


def find(inp: RuleInput, options: dict) -> pl.DataFrame:
    calls = calls_named(inp, names_like(inp, SYNC_CALLS),
                        {"start": pl.Int64, "end": pl.Int64, "globalTid": pl.Int64})
    return by_duration(calls, int(options["rows"])).select(
        "Duration (ns)", pl.col("start").alias("Start (ns)"),
        pid_of(pl.col("globalTid")).alias("PID"), tid_of(pl.col("globalTid")).alias("TID"),
        "API Name")


def _advice(options: dict) -> str:
    return ("These calls block the calling CPU thread until all the work issued before "
            "them has finished on the device or stream.\n\n"
            "What to try:\n"
            "   1. Synchronise less often.\n"
            "   2. Order work with CUDA events instead (cudaStreamWaitEvent(), or "
            "cudaEventSynchronize() on just the work needed), so the host does not wait.")


def _no_result(options: dict) -> str:
    return "No device or stream synchronisation calls found: no problem to report."


RULE = Rule(
    name="cuda_api_sync",
    old_name="cuda-sync-api",
    title="CUDA Synchronization APIs",
    summary="cudaDeviceSynchronize/cudaStreamSynchronize calls that block the host",
    options=(Option("process", -1, "only this process id (default: all)"),
             Option("thread", -1, "only this thread id (default: all)")),
    columns=COLUMNS,
    check=check,
    find=find,
    advice=_advice,
    no_result=_no_result,
)
