"""What NCCL and MPI collectives share: lines from the participant of an instance that
arrived last to every other participant, in the trace-wide record layout of the merge stage.

An instance is one operation of one communicator, matched across participants (reports,
processes, devices or ranks) by the kinds; a collective cannot complete on any participant
before the last one has arrived, so the line goes from that arrival (the start of its
kernel or call) to the end of each other participant's.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .. import records as R


def match(df: pl.DataFrame, part: list[str], what: str, counts: dict[str, int]
          ) -> tuple[pl.DataFrame, dict[str, int]]:
    """Instances: the k-th item (kernel or call, by start) of each participant (`part`
    columns) on one communicator (`comm`) is one instance. Kept, with its number `inst`: the
    instances with two participants or more, as many as the communicator's `size` where it
    is known, all running one operation (`op`); the others are counted by reason."""
    c = pl.col
    df = df.sort("start", "rep", "ord").with_columns(
        pl.int_range(pl.len()).over([*part, "comm"]).alias("seq"))
    inst = df.group_by("comm", "seq").agg(
        pl.len().alias("n"), c("size").max().alias("size"),
        c("op").drop_nulls().n_unique().alias("n_ops"))
    bad = [("with a single participant in the inputs", c("n") < 2),
           ("missing participants (fewer than the communicator's ranks)",
            c("size").is_not_null() & (c("n") < c("size"))),
           ("whose participants ran different operations", c("n_ops") > 1)]
    counts[what] = inst.height
    for why, expr in bad:
        n = inst.select(expr.fill_null(False).sum()).item()
        if n:
            counts[f"{what} not matched: {why}"] = n
        inst = inst.filter(~expr.fill_null(False))
    counts[f"{what} matched"] = inst.height
    inst = inst.sort("comm", "seq").with_row_index("inst")
    return df.join(inst.select("comm", "seq", "inst"), on=["comm", "seq"], how="inner"), counts


def collective_lines(items: pl.DataFrame, counts: dict[str, int], what: str
                     ) -> pl.DataFrame:
    """From the participant that arrived (started) last in each instance (`inst`) to each
    other participant's end: (inst, s_* and r_* of rep, row, ord, start/end). A
    participant that ended before the last one arrived gets none (counted)."""
    c = pl.col
    ranked = items.sort("inst", "start", "rep", "ord", descending=[False, True, False, False])
    last = ranked.unique("inst", keep="first", maintain_order=True)
    others = ranked.join(last.select("inst", "rep", "ord"), on=["inst", "rep", "ord"],
                         how="anti")
    pairs = others.join(last.select("inst", *[c(n).alias(f"s_{n}") for n in (
        "rep", "row", "ord", "start")]), on="inst", how="inner")
    early = pairs.filter(c("end") < c("s_start"))
    if early.height:
        counts[f"{what}: participants that ended before the last one arrived (no line)"] = (
            early.height)
    pairs = pairs.filter(c("end") >= c("s_start"))
    counts[f"{what} lines"] = pairs.height
    return pairs.select("inst", "s_rep", "s_row", "s_ord", "s_start",
                        c("rep").alias("r_rep"), c("row").alias("r_row"),
                        c("ord").alias("r_ord"), c("end").alias("r_end"))


def lines_to_records(mctx: Any, pairs: pl.DataFrame, src: int, tag: int,
                     lane_src: int | None = None) -> pl.DataFrame:
    """Lines (s_rep, s_row, s_ord, s_start -> r_rep, r_row, r_ord, r_end) in the trace-wide
    record layout, sorted; with `lane_src` (the source id of the activities the lines join),
    each end follows its activity to the overlap lane it was moved to. Size 0: a line is a
    dependency, not a message, so that byte statistics of communications (Paraver's "Bytes
    sent") stay those of the messages; the bytes are on the kernel's or the call's events."""
    c = pl.col
    if lane_src is not None:
        pairs = _follow_lanes(mctx, _follow_lanes(mctx, pairs, "s", lane_src), "r", lane_src)
    ends = [endpoint_rows(mctx, pairs, "s", ("order", "cpu", "task", "thread")),
            endpoint_rows(mctx, pairs, "r", ("r_order", "rcpu", "rtask", "rthread"))]
    out = pairs.join(ends[0], on=["s_rep", "s_row"], how="left").join(
        ends[1], on=["r_rep", "r_row"], how="left")
    out = out.select(
        c("s_start").alias("time"), "order", pl.lit(R.COMM).alias("kind"),
        pl.lit(0).alias("phase"), c("r_rep").cast(pl.Int64).alias("sub"),
        pl.lit(src).alias("src"), c("s_rep").alias("rep"), c("r_ord").alias("ord"),
        c("s_start").alias("a"), c("r_order").alias("b"), c("r_end").alias("c"),
        c("r_end").alias("d"), pl.lit(0, pl.Int64).alias("e"),
        pl.lit(tag).alias("f"), "cpu", "task", "thread", "rcpu", "rtask", "rthread")
    return mctx.final(out)


def endpoint_rows(mctx: Any, pairs: pl.DataFrame, side: str,
                  names: tuple[str, str, str, str]) -> pl.DataFrame:
    """({side}_rep, {side}_row, and the trace-wide order, cpu, task, thread named `names`) of
    every row the `side` ends of `pairs` ("s" or "r") touch: each report's rows grouped in
    one pass (a filter per report would read every pair once per report: quadratic in a job
    of 1,000 ranks)."""
    used = pairs.select(f"{side}_rep", f"{side}_row").unique()
    by_rep = used.partition_by(f"{side}_rep", as_dict=True)
    looked = []
    for (rep,) in sorted(by_rep):
        rows = by_rep[(rep,)][f"{side}_row"].sort()
        found = mctx.rows(rep, rows).rename(dict(zip(("order", "cpu", "task", "thread"),
                                                     names)))
        looked.append(found.rename({"row": f"{side}_row"}).with_columns(
            pl.lit(rep, used.schema[f"{side}_rep"]).alias(f"{side}_rep")))
    return pl.concat(looked, how="vertical")


def _follow_lanes(mctx: Any, pairs: pl.DataFrame, side: str, src: int) -> pl.DataFrame:
    """`{side}_row` replaced by the overlap lane row its activity was moved to, if any."""
    c = pl.col
    parts = []
    by_rep = pairs.partition_by(f"{side}_rep", maintain_order=True, as_dict=True)
    for (rep,) in sorted(by_rep):  # one pass over the lines, not one per report
        part = by_rep[(rep,)]
        moves = mctx.views[rep].moves
        if moves is not None and moves.height:
            lanes = moves.filter(c("src") == src).select(
                c("ord").alias(f"{side}_ord"), c("row").alias("_lane"))
            part = part.join(lanes, on=f"{side}_ord", how="left", maintain_order="left")\
                .with_columns(pl.coalesce("_lane", f"{side}_row").cast(pl.Int32)
                              .alias(f"{side}_row")).drop("_lane")
        parts.append(part)
    return pl.concat(parts, how="vertical") if parts else pairs
