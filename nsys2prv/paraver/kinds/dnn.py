"""cuDNN and cuBLAS calls -> their own call types on the calling CPU thread (no CPU state:
the CUDA calls they make set it)."""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import dnn as source
from .. import records as R
from ..registry import dnn as dreg
from .base import Context, Translator, fix_times, name_value, push, start_end

SRC_DNN = R.SRC_DNN
TYPES = {"cudnn": dreg.CUDNN_CALL, "cublas": dreg.CUBLAS_CALL}


def translate(report: Report, ctx: Context) -> None:
    for library, type_ in TYPES.items():
        for chunk in source.read(report, library, ctx.chunk_rows):
            df = fix_times(chunk, ctx, f"{library} calls")
            df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"),
                                 (pl.col("row_id") * 2 + int(library == "cublas"))
                                 .alias("row_id"))  # distinct tie-breakers across tables
            df = name_value(df, ctx, "cuda_library_calls", "name_id", f"{library} calls")
            ctx.spans.add(df["row"], df["start"], df["end"])
            ctx.count(f"{library}_calls", df.height)
            push(ctx, start_end(df, SRC_DNN, type_, pl.col("value_name_id")))


TRANSLATORS = (Translator("dnn", 55, "cuDNN and cuBLAS calls", source.available, translate,
                          tuple(source.TABLES.values())),)
