"""CPU samples -> Extrae's sampled functions: at each sample, on its thread's row at its
time, one event record with the leaf function (30000000), its callers (30000000 + depth),
the leaf's module, the stack's depth and the CPU; and the Python backtrace samples.

Samples never change states: they add no state interval, and a thread known only by its
samples (most of a PyTorch job's, which have no ThreadNames row) gets a row that lives from
its first to its last sample, idle as a thread known only by its OS runtime calls is. A
thread with other records keeps the lifetime they give it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ...report.report import Report
from ...sources import samples as source
from .. import records as R
from ..registry import sampling as reg
from . import _stacks
from .base import Context, Translator, point_events, push


def translate(report: Report, ctx: Context) -> None:
    locations = _stacks.CodeLocations(ctx, report)
    alive = ctx.spans.table()["row"].to_numpy()  # rows the other kinds gave a lifetime
    for chunk in source.read(report, ctx.chunk_rows):
        df = chunk.samples
        df = df.with_columns(ctx.rows.cpu_rows(df, runtime_only=True).alias("row"))
        _lifetimes(ctx, df, alive)
        _push_samples(ctx, locations, df, chunk)
    for marks in source.python_marks(report, ctx.chunk_rows):
        marks = marks.with_columns(ctx.rows.cpu_rows(marks, runtime_only=True).alias("row"))
        _lifetimes(ctx, marks, alive)
        ctx.count("python_samples", marks.height)
        push(ctx, [point_events(marks, R.SRC_PYTHON_SAMPLES, reg.PYTHON_SAMPLE,
                                pl.lit(1, pl.Int64))])


def _lifetimes(ctx: Context, df: pl.DataFrame, alive: np.ndarray) -> None:
    """Rows that only samples show exist from their first sample to their last; the others
    keep their lifetimes, and the trace lasts from the first sample to 1 ns after the last
    (a sample is a burst to the next record of its row: the last one must not be empty)."""
    new = df.filter(pl.Series(~np.isin(df["row"].to_numpy(), alive)))
    if new.height:
        ctx.spans.add(new["row"], new["start"])
    if df.height:  # 1 ns past the last: Paraver's histograms count no burst of length 0
        ctx.reach(df["start"].min(), df["start"].max() + 1)


def _push_samples(ctx: Context, locations: _stacks.CodeLocations, df: pl.DataFrame,
                  chunk: source.Chunk) -> None:
    """One event record per sample of the chunk: leaf, leaf module, callers, depth, CPU."""
    c = pl.col
    ids = df["id"].to_numpy()
    st = _stacks.stacks(locations, chunk.frames, ids, chunk.chains)
    n = ids.size
    depth = np.bincount(st.owner, minlength=n)  # frames kept, before the cut at 100
    cut = np.maximum(depth - reg.SAMPLED_FUNCTION_LEVELS, 0)
    depth = np.minimum(depth, reg.SAMPLED_FUNCTION_LEVELS)
    is_leaf = st.level == 0
    leaf = np.full(n, -1, np.int64)
    leaf[st.owner[is_leaf]] = st.loc[is_leaf]
    module_value = np.full(n, -1, np.int64)
    module_value[st.owner[is_leaf]] = locations.module_values(st.symbol[is_leaf],
                                                              st.module[is_leaf])
    if (depth == 0).any():  # no frame recorded, or markers only
        leaf[depth == 0] = locations.no_frames()
        module_value[depth == 0] = locations.unknown_module()
    ctx.count("cpu_samples", n)
    with_stack = int(np.count_nonzero(depth > 1))
    ctx.count("cpu_samples_with_stack", with_stack)
    if st.markers.any():
        ctx.count("cpu_sample_marker_frames_dropped", int(st.markers.sum()))
    if cut.any():
        ctx.warn(f"CPU samples: frames deeper than {reg.SAMPLED_FUNCTION_LEVELS - 1} callers "
                 "(cut)", int(cut.sum()))
    if (depth == 0).any():
        ctx.warn("CPU samples without a frame", int(np.count_nonzero(depth == 0)))
    df = df.with_columns(
        pl.Series("leaf", leaf), pl.Series("module_value", module_value),
        pl.Series("depth", depth).replace(0, None),
        (c("cpu") + 1).alias("cpu1"),
        pl.Series("markers", st.markers).replace(0, None))
    own = R.numeric_pairs((reg.SAMPLE_DEPTH, c("depth")), (reg.SAMPLED_CPU, c("cpu1")),
                          (reg.SAMPLE_MARKERS, c("markers")))
    flat = depth <= 1  # the leaf only: no callers (three samples in four, DWARF)
    if flat.any():
        ctx.records(R.conform(_records(df.filter(pl.Series(flat)), own)))
    if not flat.all():  # the callers: each record's own pairs, as deep as its stack
        rows = np.flatnonzero(~flat)
        lists = _stacks.pair_lists(ctx, reg.SAMPLED_DEPTH, st.owner, st.level, st.loc, rows,
                                   1, _stacks.MAX_LEVEL)
        ctx.records(R.conform(_records(df.filter(pl.Series(~flat)), own)), lists)


def _records(df: pl.DataFrame, pairs: R.NumericPairs) -> pl.DataFrame:
    c = pl.col
    return df.select(R.events(c("start"), c("row"), R.PHASE_START, R.SRC_SAMPLES, c("id"),
                              reg.SAMPLED_FUNCTION, c("leaf"), pairs,
                              type2=reg.SAMPLED_MODULE, value2=c("module_value")))


TRANSLATORS = (Translator("samples", 80, "CPU samples with call stacks, Python samples",
                          source.available, translate, (source.TABLE,)),)
