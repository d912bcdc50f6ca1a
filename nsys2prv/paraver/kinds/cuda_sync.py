"""CUDA synchronisation records -> sync-kind events on the calling thread (matched through
the CUDA call's correlation id) and the stream waited for (Extrae's 63000008).

The kind (the event's value: CUPTI's synchronisation type + 1) is read from which ids the
record has (`source.dependency_class`), not from its `syncType`, which most nsys versions
number otherwise than CUPTI's enum (2022.x stores 3 for stream waits, 1 for context syncs)."""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import cuda_sync as source
from .. import records as R
from .. import registry as reg
from . import cuda_api
from .base import Context, Translator, fix_times, push, start_end


# dependency class -> CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_* (registry.cuda.SYNC_TYPES)
CUPTI_SYNC_TYPE = {source.EVENT_SYNC: 1, source.STREAM_WAIT: 2, source.STREAM_SYNC: 3,
                   source.CONTEXT_SYNC: 4}


def sync_kind(stream: pl.Expr, event: pl.Expr) -> pl.Expr:
    """The CUPTI synchronisation type of records with these stream and event ids."""
    return source.dependency_class(stream, event).replace_strict(
        CUPTI_SYNC_TYPE, return_dtype=pl.Int64)


def translate(report: Report, ctx: Context) -> None:
    index = cuda_api.index(ctx)
    c = pl.col
    for chunk in source.read(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, "CUDA synchronization records")
        joined = index.join(df, how="inner")
        if df.height > joined.height:
            ctx.count("CUDA synchronization records without a CUDA call",
                      df.height - joined.height)
        if joined.height == 0:
            continue
        df = joined.with_columns(c("api_row").alias("row"),
                                 ctx.rows.lookup_gpu(joined).alias("stream_row"))
        ctx.count("cuda_sync", df.height)
        frames = start_end(df, R.SRC_SYNC, reg.CUDA_SYNC_TYPE,
                           sync_kind(c("stream"), c("event")) + 1)
        dest = df.filter(c("stream_row").is_not_null())
        frames.append(dest.select(R.events(c("start"), c("row"), R.PHASE_START, R.SRC_SYNC,
                                           c("row_id"), reg.CUDA_STREAM_DEST,
                                           c("stream_row").cast(pl.Int64))))
        push(ctx, frames)


TRANSLATORS = (Translator("cuda_sync", 40, "CUDA synchronization records", source.available,
                          translate,
                          (source.TABLE,)),)
