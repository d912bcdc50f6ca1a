"""Thread scheduling -> Blocked state while a thread is descheduled, and the CPU it runs on.

Descheduled time becomes an interval with state Blocked; like every state interval it loses
to an enclosing one (a thread descheduled inside a CUDA or OS call keeps that call's state),
which is right: a descheduled thread cannot start a call, so the Blocked state shows exactly
where the thread was off the CPU outside any traced call.
"""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import sched as source
from .. import records as R
from .. import registry as reg
from .base import Context, Translator, intervals, push, start_end


def translate(report: Report, ctx: Context) -> None:
    c = pl.col
    for df in source.read(report):
        df = df.filter(c("end").is_not_null() & (c("end") > c("start")))
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"))
        ctx.spans.add(df["row"], df["start"], df["end"])
        out = df.filter(~c("running"))
        ran = df.filter(c("running"))
        ctx.count("sched_descheduled", out.height)
        ctx.intervals(intervals(out, reg.STATE_BLOCKED, R.SRC_SCHED))
        push(ctx, start_end(ran, R.SRC_SCHED, reg.THREAD_CPU, c("cpu") + 1))


TRANSLATORS = (Translator("sched", 65, "thread scheduling (CPU context switches)",
                          source.available, translate, (source.TABLE,)),)
