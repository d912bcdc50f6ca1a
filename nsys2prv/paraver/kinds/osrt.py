"""OS runtime calls -> call events (with return values) on CPU threads."""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import osrt as source
from .. import records as R
from .. import registry as reg
from .base import Context, Translator, fix_times, name_value, push, start_end


def translate(report: Report, ctx: Context) -> None:
    for chunk in source.read(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, "OS runtime calls")
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"))
        df = name_value(df, ctx, "osrt_names", "name_id", "OS runtime calls")
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("osrt", df.height)
        push(ctx, start_end(df, R.SRC_OSRT, reg.OSRT_CALL, pl.col("value_name_id"),
                            end_text=R.pairs((reg.OSRT_RETURN_VALUE, pl.col("return_value")))))


TRANSLATORS = (Translator("osrt", 60, "OS runtime calls", source.available, translate,
                          (source.TABLE,)),)
