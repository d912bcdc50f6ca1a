"""The `.prv`: header line and record lines, formatted column-wise from sorted blocks.

Blocks arrive sorted by (time, Paraver row, kind, phase, ...). Consecutive events of one row
at one time become a single multi-event line, with "end" pairs before "start" pairs so the
value that lasts is the new one.
"""

from __future__ import annotations

from datetime import datetime, timezone

import polars as pl

from ..model.resources import ResourceModel
from . import records as R


def header(model: ResourceModel, end_time: int, start_epoch_ns: int | None) -> str:
    if start_epoch_ns is not None:
        when = datetime.fromtimestamp(start_epoch_ns / 1e9, tz=timezone.utc)
        date = when.strftime("%d/%m/%Y at %H:%M")
    else:
        date = "01/01/1970 at 00:00"
    cpus = ",".join(str(c) for c in model.cpus_per_node())
    apps = model.application_tasks()
    tasks = ":".join(f"{len(ts)}(" + ",".join(f"{len(t.rows)}:{t.node}" for t in ts) + ")"
                     for ts in apps)
    return f"#Paraver ({date}):{end_time}_ns:{len(model.nodes)}({cpus}):{len(apps)}:{tasks}\n"


def format_block(df: pl.DataFrame) -> pl.Series:
    """The text of a sorted block (columns time, order, kind, cpu, task, thread, a..f, text,
    rcpu, rtask, rthread) as a one-element Series: its lines, newline-separated.

    Every record is one concat_str over the same pieces (pieces a kind does not have are
    null and skipped). An event that follows an event of the same row and time becomes only
    its ":type:value" pairs, appended to the previous line: that is the multi-event line
    Paraver expects, without any grouping or re-sorting.
    """
    if df.height == 0:
        return pl.Series("text", [], dtype=pl.Utf8)
    c = pl.col
    ev = c("kind") == R.EVENT
    comm = c("kind") == R.COMM
    cont = ev & ev.shift(1, fill_value=False) & (c("time") == c("time").shift(1)) & (
        c("order") == c("order").shift(1))
    head = pl.format("{}:{}:1:{}:{}:{}", c("kind"), c("cpu"), c("task"), c("thread"), c("time"))
    receiver = pl.when(comm).then(pl.format(":{}:1:{}:{}", c("rcpu"), c("rtask"), c("rthread")))
    tail = pl.concat_str([
        pl.lit(":"), c("a").cast(pl.Utf8), receiver,
        pl.when(~comm).then(pl.format(":{}", c("b"))),
        pl.format(":{}:{}", c("c"), c("d")),
        pl.when(comm).then(pl.format(":{}:{}", c("e"), c("f"))),
        pl.when(ev).then(c("text"))], ignore_nulls=True)
    piece = pl.when(cont).then(tail).otherwise(
        pl.concat_str([pl.when(pl.int_range(pl.len()) > 0).then(pl.lit("\n")), head, tail],
                      ignore_nulls=True))
    return df.select(piece.str.join("").alias("text"))["text"]
