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
    tasks = ",".join(f"{len(t.rows)}:{t.node}" for t in model.tasks)
    return (f"#Paraver ({date}):{end_time}_ns:{len(model.nodes)}({cpus}):1:"
            f"{len(model.tasks)}({tasks})\n")


def format_block(df: pl.DataFrame) -> str:
    """Lines for a sorted block with columns time, order, kind, cpu, task, thread, a..f, text,
    rcpu, rtask, rthread (receiver of communications)."""
    if df.height == 0:
        return ""
    c = pl.col
    ev = c("kind") == R.EVENT
    new = (~ev | ~ev.shift(1, fill_value=False) | (c("time") != c("time").shift(1))
           | (c("order") != c("order").shift(1)))
    df = df.with_columns(new.cum_sum().alias("gid"))
    obj = pl.format("{}:1:{}:{}", c("cpu"), c("task"), c("thread"))
    states = df.filter(c("kind") == R.STATE).select(
        "gid", pl.format("1:{}:{}:{}:{}", obj, c("time"), c("a"), c("b")).alias("line"))
    comms = df.filter(c("kind") == R.COMM).select(
        "gid", pl.format("3:{}:{}:{}:{}:1:{}:{}:{}:{}:{}:{}", obj, c("time"), c("a"), c("rcpu"),
                         c("rtask"), c("rthread"), c("c"), c("d"), c("e"), c("f")).alias("line"))
    events = df.filter(ev)
    if events.height:
        events = events.with_columns(
            pl.concat_str([pl.format(":{}:{}", c("a"), c("b")), c("text").fill_null("")])
            .alias("pairs"))
        multi = events.select(c("gid").is_duplicated()).to_series()
        single = events.filter(~multi)
        grouped = events.filter(multi).group_by("gid", maintain_order=True).agg(
            c("cpu").first(), c("task").first(), c("thread").first(), c("time").first(),
            c("pairs").str.join(""))
        parts = []
        for part in (single, grouped):
            if part.height:
                parts.append(part.select("gid", pl.format(
                    "2:{}:1:{}:{}:{}{}", c("cpu"), c("task"), c("thread"), c("time"),
                    c("pairs")).alias("line")))
        events = pl.concat(parts, how="vertical") if parts else None
    frames = [f for f in (states, comms, events) if f is not None and f.height]
    lines = pl.concat(frames, how="vertical").sort("gid")["line"]
    return lines.str.join("\n").item() + "\n"
