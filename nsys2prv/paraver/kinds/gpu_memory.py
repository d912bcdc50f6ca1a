"""CUDA memory usage -> bytes held per process and device over time, on the GPU's metrics row.

Each allocation adds its size and each free subtracts it; the running sums (all kinds, and
per memory kind) are written at every change, with the bytes allocated and freed then. A free
whose row has no size takes the size of the allocation it releases (the latest allocation at
that address before it); frees of memory allocated before the capture started have nothing
to release and are left out (counted in the warnings), so the sums never go negative from
them.

Why the metrics row: the table has no thread, and the memory belongs to a (process, device)
pair, which is exactly what the metrics row of a GPU in a task stands for.
"""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import gpu_memory as source
from .. import records as R
from ..registry import gpu_memory as mreg
from ..registry.cuda import MEMORY_KINDS
from .base import Context, Translator

SRC_GPU_MEMORY = R.SRC_GPU_MEMORY


def running_totals(df: pl.DataFrame) -> tuple[pl.DataFrame, int, int]:
    """(rows with `delta`, `total`, `kind_total`), unknown operations, unmatched frees.

    `df` is every allocation/free of the report; the sums need them all in time order."""
    c = pl.col
    unknown = df["is_free"].null_count()
    df = df.filter(c("is_free").is_not_null()).sort(["start", "row_id"])
    allocs = df.filter(~c("is_free")).select(
        "pid", "device", "address", c("start").alias("a_start"),
        c("bytes").alias("a_bytes"), c("mem_kind").alias("a_kind"))
    frees = df.filter(c("is_free")).sort("start").join_asof(
        allocs.sort("a_start"), left_on="start", right_on="a_start",
        by=["pid", "device", "address"], strategy="backward", check_sortedness=False)
    unmatched = frees.filter(c("a_start").is_null() & (c("bytes").fill_null(0) == 0)).height
    frees = frees.filter(c("a_start").is_not_null() | (c("bytes").fill_null(0) > 0))
    frees = frees.with_columns(
        pl.when(c("bytes").fill_null(0) > 0).then(c("bytes")).otherwise(c("a_bytes"))
        .alias("bytes"), pl.coalesce("mem_kind", "a_kind").alias("mem_kind"))
    # a free that releases nothing traced (no allocation at that address) is left out too
    orphan = frees.filter(c("a_start").is_null()).height
    frees = frees.filter(c("a_start").is_not_null()).drop("a_start", "a_bytes", "a_kind")
    df = pl.concat([df.filter(~c("is_free")), frees], how="vertical").sort(
        ["pid", "device", "start", "row_id"])
    df = df.with_columns(pl.when(c("is_free")).then(-c("bytes")).otherwise(c("bytes"))
                         .fill_null(0).alias("delta"))
    df = df.with_columns(c("delta").cum_sum().over(["pid", "device"]).alias("total"),
                         c("delta").cum_sum().over(["pid", "device", "mem_kind"])
                         .alias("kind_total"))
    return df, unknown, unmatched + orphan


def translate(report: Report, ctx: Context) -> None:
    c = pl.col
    parts = list(source.read(report, ctx.chunk_rows))
    if not parts:
        return
    df, unknown, unmatched = running_totals(pl.concat(parts, how="vertical"))
    if unknown:
        ctx.warn("CUDA memory usage: rows neither allocation nor free (dropped)", unknown)
    if unmatched:
        ctx.warn("CUDA memory usage: frees of memory allocated before the trace (not counted)",
                 unmatched)
    if df.height == 0:
        return
    df = df.with_columns(ctx.rows.metric_rows(df).alias("row"))
    ctx.spans.add(df["row"], df["start"])
    ctx.count("cuda_memory_allocations", df.filter(~c("is_free")).height)
    ctx.count("cuda_memory_frees", df.filter(c("is_free")).height)
    known = c("mem_kind").is_in(list(MEMORY_KINDS))
    n_odd = df.filter(~known.fill_null(False)).height
    if n_odd:
        ctx.warn("CUDA memory usage: unknown memory kind (counted in the total only)", n_odd)
    # One event line per (row, time): the sums after the last change at that time.
    kinds = (df.filter(known).group_by(["row", "start", "mem_kind"], maintain_order=True)
             .agg(c("kind_total").last())
             .with_columns(pl.format(":{}:{}", c("mem_kind") + mreg.GPU_MEMORY_KIND_BASE,
                                     c("kind_total")).alias("piece"))
             .group_by(["row", "start"], maintain_order=True).agg(c("piece").str.join("")))
    points = (df.group_by(["row", "start"], maintain_order=True)
              .agg(c("total").last(), c("row_id").min(),
                   c("delta").filter(c("delta") > 0).sum().alias("allocated"),
                   (-c("delta").filter(c("delta") < 0)).sum().alias("freed"))
              .join(kinds, on=["row", "start"], how="left", maintain_order="left"))
    text = pl.concat_str([c("piece").fill_null(""), R.pairs(
        (mreg.GPU_MEMORY_ALLOCATION, pl.when(c("allocated") > 0).then(c("allocated"))),
        (mreg.GPU_MEMORY_FREE, pl.when(c("freed") > 0).then(c("freed"))))])
    records = points.select(R.events(c("start"), c("row"), R.PHASE_START, SRC_GPU_MEMORY,
                                     c("row_id"), mreg.GPU_MEMORY_ALLOCATED, c("total"), text))
    ctx.records(R.conform(records))


TRANSLATORS = (Translator("gpu_memory", 70, "CUDA memory in use per process and GPU",
                          source.available, translate, (source.TABLE,)),)
