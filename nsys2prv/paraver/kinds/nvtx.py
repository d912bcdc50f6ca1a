"""NVTX -> push/pop ranges (one event type per domain), start/end ranges (on lanes when they
overlap), marks and categories, on the CPU thread that opened them; and every range projected
onto the GPU stream rows that ran its work, one type per nesting level (`_projected.py`)."""

from __future__ import annotations

import heapq

import numpy as np
import polars as pl

from ...report.report import Report
from ...sources import nvtx as source
from .. import records as R
from .. import registry as reg
from ..values import STRING_ID_OFFSET
from . import _projected
from .base import REPORT_END, Context, Translator, fix_times, point_events, push, start_end

DEFAULT_DOMAIN = ""


def translate(report: Report, ctx: Context) -> None:
    c = pl.col
    domains = source.domains(report).rename({"name": "domain_name"})
    categories = source.categories(report).rename({"name": "category_name"})
    kinds = source.event_type_ids(report)
    is_mark = c("event_type").is_in(sorted(kinds["mark"]))
    is_se = c("event_type").is_in(sorted(kinds["startend"]))
    is_pp = c("event_type").is_in(sorted(kinds["pushpop"]))
    ctx.local_type(reg.PUSHPOP.name, DEFAULT_DOMAIN)
    start_end_ranges = []
    project = _projected.wanted(ctx)  # GPU work was kept: every range is projected onto it
    to_project: list[pl.DataFrame] = []
    for chunk in source.read(report, ctx.chunk_rows):
        df = chunk.join(domains, on=["pid", "domain_id"], how="left", maintain_order="left")
        df = df.with_columns(
            pl.when(c("domain_id").fill_null(0) == 0).then(pl.lit(DEFAULT_DOMAIN))
            .otherwise(c("domain_name").fill_null(pl.format("domain {}", c("domain_id"))))
            .alias("domain"))
        python = df["domain"] == source.PYTHON_DOMAIN  # nsys' Python samples: not user
        if python.any():  # NVTX, the samples kind writes them
            df = df.filter(~python)
        # Range text: its StringIds id, else an interned id for the inline text.
        inline = df.select(pl.when(c("text_id").is_null()).then(c("text").fill_null(""))
                           .alias("t"))["t"]
        df = df.with_columns(pl.coalesce(c("text_id") + STRING_ID_OFFSET,
                                         ctx.names.intern("nvtx_names", inline)).alias("value"))
        ctx.names.use("nvtx_names", df["text_id"])
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"))
        ranges = fix_times(df.filter(~is_mark), ctx, "NVTX ranges", open_end=REPORT_END)
        marks = df.filter(is_mark)
        _sync_points(report, ctx, pl.concat([marks, ranges], how="diagonal_relaxed"))
        frames = []
        if marks.height:
            ctx.count("nvtx_marks", marks.height)
            ctx.spans.add(marks["row"], marks["start"])
            frames.append(point_events(marks, R.SRC_NVTX, reg.NVTX_MARK, c("value")))
        pushpop = ranges.filter(is_pp)
        if pushpop.height:
            ctx.count("nvtx_pushpop", pushpop.height)
            ctx.spans.add(pushpop["row"], pushpop["start"], pushpop["end"])
            types = {d: ctx.local_type(reg.PUSHPOP.name, d)
                     for d in pushpop["domain"].unique().to_list()}
            pushpop = pushpop.with_columns(c("domain").replace_strict(types, return_dtype=pl.Int64)
                                           .alias("ptype"))
            frames += start_end(pushpop, R.SRC_NVTX, c("ptype"), c("value"))
        startend = ranges.filter(is_se)
        if startend.height:
            ctx.count("nvtx_startend", startend.height)
            ctx.spans.add(startend["row"], startend["start"], startend["end"])
            start_end_ranges.append(startend.select("row", "start", "end", "value", "row_id"))
        frames += _categories(pl.concat([marks, ranges], how="diagonal_relaxed"), ctx,
                              categories, is_mark)
        push(ctx, frames)
        if project:
            to_project.append(_projectable(ctx, ranges.filter(is_pp | is_se)))
    _emit_start_end(ctx, start_end_ranges)
    both = pl.concat(to_project, how="vertical") if to_project else \
        pl.DataFrame(schema=_PROJECTABLE)
    del to_project
    _projected.emit(ctx, both["row"].to_numpy(), both["start"].to_numpy(),
                    both["end"].to_numpy(), both["value"].to_numpy(), both["row_id"].to_numpy())


_PROJECTABLE = {"row": pl.Int32, "start": pl.Int64, "end": pl.Int64, "value": pl.Int64,
                "row_id": pl.Int64}


def _projectable(ctx: Context, ranges: pl.DataFrame) -> pl.DataFrame:
    """The ranges nsys projects onto the GPU (push/pop and start/end of every domain, the
    start/end ranges ended on another thread left out as nsys leaves them out), compact."""
    other = ranges["end_tid"].is_not_null()
    if other.any():
        ctx.count("nvtx ranges ended on another thread: not projected", int(other.sum()))
        ranges = ranges.filter(~other)
    return ranges.select([pl.col(k).cast(t) for k, t in _PROJECTABLE.items()])


MPI_INIT = ("MPI_Init", "MPI_Init_thread")


def _sync_points(report: Report, ctx: Context, df: pl.DataFrame) -> None:
    """End of MPI_Init (MPI traced as NVTX domain "MPI") and of the range or mark the user
    named with --sync-nvtx: moments shared by every rank, for clock alignment."""
    c = pl.col
    wanted = ctx.options.sync_nvtx if ctx.options is not None else None
    cand = df.filter((c("domain") == "MPI") | pl.lit(wanted is not None))
    if cand.height == 0:
        return
    strings = report.strings.rename({"id": "text_id", "value": "text_string"})
    cand = cand.join(strings, on="text_id", how="left", maintain_order="left").with_columns(
        pl.coalesce("text_string", "text").alias("label"), c("end").fill_null(c("start")))
    init = cand.filter((c("domain") == "MPI") & c("label").is_in(MPI_INIT))
    if init.height:
        ctx.sync_point("MPI_Init", init.sort("start")["end"][0])
    if wanted is not None:
        hit = cand.filter(c("label") == wanted)
        if hit.height:
            ctx.sync_point(f"nvtx:{wanted}", hit.sort("start")["end"][0])


def _categories(df: pl.DataFrame, ctx: Context, categories: pl.DataFrame, is_mark: pl.Expr
                ) -> list[pl.DataFrame]:
    """Category events ('domain: name') alongside the ranges and marks that have one."""
    c = pl.col
    cats = df.filter(c("category").fill_null(0) != 0)
    if cats.height == 0:
        return []
    cats = cats.join(categories, on=["pid", "domain_id", "category"], how="left",
                     maintain_order="left")
    label = pl.format("{}: {}", pl.when(c("domain") == DEFAULT_DOMAIN).then(pl.lit("default"))
                      .otherwise(c("domain")),
                      c("category_name").fill_null(pl.format("category {}", c("category"))))
    cats = cats.with_columns(label.alias("cat_label"))
    cats = cats.with_columns(ctx.names.intern("nvtx_categories", cats["cat_label"])
                             .alias("cat_value"))
    out = []
    marks = cats.filter(is_mark)
    if marks.height:
        out.append(point_events(marks, R.SRC_NVTX, reg.NVTX_CATEGORY, c("cat_value")))
    ranges = cats.filter(~is_mark)
    if ranges.height:
        out += start_end(ranges, R.SRC_NVTX, reg.NVTX_CATEGORY, c("cat_value"))
    return out


def assign_lanes(row: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lowest free lane of each range (inputs sorted by row, start): first-fit by start.

    Ranges that overlap nothing before them (the usual case) get lane 0 without any loop;
    only clusters of mutually overlapping ranges are walked, with a heap of lane end times.
    """
    n = len(row)
    lanes = np.zeros(n, dtype=np.int64)
    if n == 0:
        return lanes
    prev_max = (pl.DataFrame({"row": row, "end": end})
                .select(pl.col("end").cum_max().shift(1).over("row"))["end"]
                .fill_null(np.iinfo(np.int64).min).to_numpy())
    cluster_start = start >= prev_max  # also true for the first range of each row
    cluster_id = np.cumsum(cluster_start)
    busy = np.flatnonzero(np.bincount(cluster_id)[cluster_id] > 1)
    if busy.size == 0:
        return lanes
    cuts = np.flatnonzero(np.diff(cluster_id[busy])) + 1
    for idx in np.split(busy, cuts):  # one pass per overlapping cluster
        active: list[tuple[int, int]] = []  # (end, lane) of ranges still open
        free: list[int] = []
        n_lanes = 0
        for i in idx:
            while active and active[0][0] <= start[i]:
                heapq.heappush(free, heapq.heappop(active)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, n_lanes = n_lanes, n_lanes + 1
            lanes[i] = lane
            heapq.heappush(active, (int(end[i]), lane))
    return lanes


def _emit_start_end(ctx: Context, parts: list[pl.DataFrame]) -> None:
    """Start/end ranges may overlap on a thread: each goes to the first free lane type.

    They are held until the end of the table (start/end ranges are few next to GPU
    activities) because a lane depends on every earlier range of the thread.
    """
    if not parts:
        return
    df = pl.concat(parts, how="vertical").sort(["row", "start", "row_id"])
    lanes = assign_lanes(df["row"].to_numpy(), df["start"].to_numpy(), df["end"].to_numpy())
    if (lanes > 0).any():
        ctx.count("nvtx_startend_on_extra_lanes", int((lanes > 0).sum()))
    types = {lane: ctx.local_type(reg.STARTEND.name, str(lane)) for lane in np.unique(lanes)}
    df = df.with_columns(pl.Series("lane", lanes).replace_strict(types, return_dtype=pl.Int64)
                         .alias("ltype"))
    push(ctx, start_end(df, R.SRC_NVTX_SE, pl.col("ltype"), pl.col("value")))


TRANSLATORS = (Translator("nvtx", 50, "NVTX ranges and marks", source.available, translate,
                          (source.TABLE,)),)
