"""CUDA runtime/driver calls -> CUDA call events and CPU states; builds the correlation index
that kernels, copies and synchronisation records are matched against."""

from __future__ import annotations

import re

import polars as pl

from ...report.report import Report
from ...sources import cuda_api as source
from .. import records as R
from .. import registry as reg
from .base import Context, NameClassifier, Translator, fix_times, intervals, name_value, push, \
    start_end

CORRELATIONS = "correlation_index"


def translate(report: Report, ctx: Context) -> None:
    state_of = NameClassifier(ctx.names, "cuda_api", call_state, pl.Int8,
                              reg.STATE_OTHERS)
    parts = []
    for chunk in source.read(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, "CUDA API calls")
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"))
        df = name_value(df, ctx, "cuda_api", "name_id", "CUDA API calls")
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("cuda_api", df.height)
        ret = pl.when(pl.col("return_value").is_not_null() & (pl.col("return_value") != 0))\
            .then(pl.col("return_value"))
        push(ctx, start_end(df, R.SRC_API, reg.CUDA_CALL, pl.col("value_name_id"),
                            start_text=R.pairs((reg.CORRELATION_ID, pl.col("correlation"))),
                            end_text=R.pairs((reg.CUDA_RETURN_VALUE, ret))))
        ctx.intervals(intervals(df.with_columns(state_of(df["name_id"]).alias("state")),
                                pl.col("state"), R.SRC_API))
        parts.append(df.filter(pl.col("correlation").is_not_null()).select(
            "pid", "correlation", pl.col("row").alias("api_row"),
            pl.col("start").alias("api_start")))
    index = correlation_index(parts)
    duplicates = sum(p.height for p in parts) - index.height
    if duplicates:
        ctx.warn("CUDA API calls: duplicate correlation ids (the first call is used)",
                 duplicates)
    ctx.shared[CORRELATIONS] = index


# What a call does, for the CPU state (Extrae's CUDA states). Checked in this order.
_CLASSES = (
    (reg.STATE_SYNC, re.compile(r"Synchronize|WaitEvent|StreamWaitValue|StreamWait_")),
    (reg.STATE_MEMORY_TRANSFER, re.compile(r"^(?:cuda|cu)Mem(?:cpy|set|Prefetch)")),
    (reg.STATE_FREE, re.compile(r"^(?:cudaFree|cuMemFree|cuMemRelease|cuMemHostFree)")),
    (reg.STATE_ALLOC, re.compile(r"^(?:cudaMalloc|cudaHostAlloc|cuMemAlloc|cuMemHostAlloc|"
                                 r"cuMemCreate)")),
    (reg.STATE_CONFIG_ACCEL, re.compile(r"Launch|ConfigureCall|SetupArgument")),
)


def call_state(name: str) -> int:
    """Paraver state of a CPU thread inside the CUDA call `name`."""
    base = source.normalise_name(name)
    for state, pattern in _CLASSES:
        if pattern.search(base):
            return state
    return reg.STATE_OTHERS


def correlation_index(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """(pid, correlation) -> calling row and call start; duplicates keep the first call."""
    if not parts:
        return empty_index()
    return pl.concat(parts, how="vertical").unique(["pid", "correlation"], keep="first",
                                                   maintain_order=True)


def empty_index() -> pl.DataFrame:
    return pl.DataFrame(schema={"pid": pl.Int64, "correlation": pl.Int64, "api_row": pl.Int32,
                                "api_start": pl.Int64})


def index(ctx: Context) -> pl.DataFrame:
    """The correlation index (empty when CUDA API calls are not translated)."""
    return ctx.shared.get(CORRELATIONS, empty_index())


TRANSLATORS = (Translator("cuda_api", 10, "CUDA runtime/driver API calls", source.available,
                          translate,
                          (source.TABLE,)),)
