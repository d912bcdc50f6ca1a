"""CUDA memcpy and memset -> memory-operation events and Memory transfer states on GPU
stream rows, and arrows (size = bytes) from the CUDA call that issued them."""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import memory as source
from .. import records as R
from .. import registry as reg
from . import cuda_api
from .base import Context, Translator, fix_times, intervals, keep_for_metrics, push, \
    start_end
from .kernels import launched


def _translate(report: Report, ctx: Context, memset: bool) -> None:
    what = "memsets" if memset else "memcpys"
    index = cuda_api.index(ctx)
    c = pl.col
    reader = source.read_memset if memset else source.read_memcpy
    src = R.SRC_MEMSET if memset else R.SRC_MEMCPY
    for chunk in reader(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, what)
        df = df.with_columns(ctx.rows.gpu_rows(df).alias("row"))
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("memset" if memset else "memcpy", df.height)
        keep_for_metrics(ctx, report, what, df.select(
            "start", "end", "pid", "device", "row", "row_id", "copy_kind"))
        if memset:
            value = pl.lit(reg.MEMSET_OPERATION_VALUE, pl.Int64)
            text = R.numeric_pairs((reg.MEMORY_BYTES, c("bytes")), (reg.MEMSET_VALUE, c("value")),
                           (reg.MEMORY_DST_KIND, c("dst_kind") + 1),
                           (reg.CORRELATION_ID, c("correlation")))
        else:
            value = c("copy_kind").fill_null(0) + 1
            text = R.numeric_pairs((reg.MEMORY_BYTES, c("bytes")),
                           (reg.MEMORY_SRC_KIND, c("src_kind") + 1),
                           (reg.MEMORY_DST_KIND, c("dst_kind") + 1),
                           (reg.CORRELATION_ID, c("correlation")))
        push(ctx, start_end(df, src, reg.MEMORY_OPERATION, value, start_text=text))
        ctx.intervals(intervals(df, reg.STATE_MEMORY_TRANSFER, src))
        launched(df, ctx, index, what, src, c("bytes").fill_null(0), reg.TAG_MEMORY_OPERATION)


TRANSLATORS = (
    Translator("memcpy", 30, "CUDA memcpy", source.memcpy_available,
               lambda report, ctx: _translate(report, ctx, memset=False),
               (source.MEMCPY_TABLE,)),
    Translator("memset", 31, "CUDA memset", source.memset_available,
               lambda report, ctx: _translate(report, ctx, memset=True),
               (source.MEMSET_TABLE,)),
)
