"""GPU metrics samples -> one "GPU d metrics" row per sampled GPU, and on the stream rows of
the kernels of that GPU each kernel's rates (tensor-core use per kernel, ...) separated from
the samples by the sample-mixing model (analysis/rate_model.py), with the model's prediction
of every sample beside the measured one. Types, units and the Paraver semantics are
described in registry/gpu_metrics.py.

Which task holds a GPU's metrics row. Samples are device-wide and carry the nsys GPU id; the
row goes to the process that used that GPU most (kernels + memcpy + memset on it; a CUDA
context counts as a use with no activity), ties to the lowest pid, and is labelled with that
process's CUDA ordinal of the GPU, so it sits next to the process's own stream rows. nsys GPU
id -> (pid, CUDA ordinal) comes from TARGET_INFO_CUDA_DEVICE when the export has it (nsys
2025.1+); older exports have no per-process mapping, so the GPU id is taken as the CUDA
ordinal (as the rest of nsys2prv does with TARGET_INFO_GPU.id), with a warning when the
report has several GPUs, where CUDA_VISIBLE_DEVICES could make that wrong. A GPU used by no
process of the report is shown under the process with the most GPU activity overall (else
the first process with a row), with a warning. Sharing is reported as a count.

Samples are kept as nsys times them, also slightly before the session start (nsys starts
sampling a little before time 0; the merge rebases every trace), except those more than
`EARLIEST_NS` before the session start, which are dropped with a warning: they would stretch
the trace with an empty head and only appear with broken clocks. Negative values (seen for
clocks: 32-bit overflow in nsys) are dropped with a warning, so the previous sample's value
holds, as nsys2prv's Paraver checker also rejects negative values.

The model (see `_model`) is fitted on what the trace shows of each GPU: the samples as
written and the kernels and memory operations of the GPU's owner. Kernels of other processes
on a shared GPU are not in its model and get no rates (their samples still show them).

Memory: samples stream through once in rowid chunks (records on the metrics row), filed by
GPU in a spill sorted by time (`_spill.SortedSpill`); the kinds file the GPU activities in
another as they translate them; the model reads both back in time order, a bucket and a
block of sampling periods at a time (see `_model`): a few numbers per period and per kernel
name, not per kernel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from ...report.report import Report
from ...sources import gpu_metrics as source
from ...sources import kernels as kernel_source
from .. import records as R
from ..registry import gpu_metrics as greg
from ...analysis import occupancy as occ
from . import _launch
from ._spill import SortedSpill
from .base import LAUNCH_BOUNDS, METRICS_ACTIVITIES, UNNAMED_CODE, Context, Translator, \
    activity_spill, keep_activities

SRC_GPU_METRICS = R.SRC_GPU_METRICS
EARLIEST_NS = -1_000_000_000


def translate(report: Report, ctx: Context) -> None:
    metrics = source.metric_table(report)
    if metrics.height == 0:
        return
    metrics = _with_types(metrics, ctx)
    gpus = sorted(set((metrics["type_id"] & source.GPU_ID_MASK).to_list()))
    owners, users = placement(report, ctx, gpus)
    c = pl.col
    # each GPU's sampling times (one array a chunk): polars' unique of (gpu, time) pairs
    # took 450 MB for 2.1M samples, numpy's sort-based one a few times their 8 bytes
    times: dict[int, list[np.ndarray]] = {}
    n_in, n_out = 0, 0
    # each GPU's samples as the trace has them, for the model to read in time order
    samples = ({g: SortedSpill(Path(ctx.side_file(f"gpu_metrics_samples{g}")),
                               ("time", "row_id")) for g in gpus}
               if _translated(report, ctx, "kernels") else None)
    for chunk in source.read(report, ctx.chunk_rows, metrics):
        n_in += chunk.height
        df = _clean(chunk, ctx).join(metrics.select("metric", "factor", "sample_type"),
                                     on="metric", how="left", maintain_order="left")
        df = df.join(owners, on="gpu", how="left", maintain_order="left")
        df = df.with_columns(ctx.rows.metric_rows(df).alias("row"),
                             (c("value") * c("factor") * greg.SCALE).round().cast(pl.Int64)
                             .alias("pv"))
        if df.height == 0:
            continue
        n_out += df.height
        ctx.spans.add(df["row"], df["time"])
        # one line per sample, metrics in type order within it whatever the chunking: the
        # type is the `sub` tie-breaker (metrics rows hold nothing else)
        ctx.records(R.conform(df.select(R.events(
            c("time"), c("row"), R.PHASE_START, SRC_GPU_METRICS, c("row_id"), c("sample_type"),
            c("pv"), sub=c("sample_type") - greg.SAMPLES.base))))
        for (g,), part in df.select("gpu", "time", "row_id", "metric", "pv").partition_by(
                "gpu", as_dict=True).items():
            times.setdefault(g, []).append(np.unique(part["time"].to_numpy()))
            if samples is not None:
                samples[g].add(part.drop("gpu"))
    ctx.count("gpu_metrics_values", n_out)
    missing = source.row_count(report) - n_in
    if missing > 0:
        ctx.warn("GPU metrics: values of metrics without a name (dropped)", missing)
    try:
        if times:
            by_gpu = {g: np.unique(np.concatenate(times.pop(g))) for g in sorted(times)}
            ctx.count("gpu_metrics_samples", sum(t.size for t in by_gpu.values()))
            if samples is not None:
                _model(report, ctx, metrics, owners, by_gpu, samples)
    finally:
        for spill in (samples or {}).values():
            spill.close()
        kept = ctx.shared.pop(METRICS_ACTIVITIES, None)
        if kept is not None:
            kept.close()


def _with_types(metrics: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Local types of both ranges per metric; a second name folding to a key that another
    metric of the same GPU already has keeps its own exported name as key (never two metrics
    on one type)."""
    dup = metrics.select(pl.col("key").cum_count().over("type_id", "key") > 1)["key"]
    if dup.any():
        ctx.warn("GPU metrics: names folding to a key already used on the GPU (kept apart "
                 "under their exported names)", int(dup.sum()))
        metrics = metrics.with_columns(pl.when(dup).then(pl.col("name")).otherwise(
            pl.col("key")).alias("key"))
    keys = sorted(set(metrics["key"].to_list()))
    sample = {k: ctx.local_type(greg.SAMPLES.name, k) for k in keys}
    rate = {k: ctx.local_type(greg.RATE.name, k) for k in keys}
    predicted = {k: ctx.local_type(greg.PREDICTED.name, k) for k in keys}
    key = pl.col("key")
    return metrics.with_columns(
        key.replace_strict(sample, return_dtype=pl.Int64).alias("sample_type"),
        key.replace_strict(rate, return_dtype=pl.Int64).alias("rate_type"),
        key.replace_strict(predicted, return_dtype=pl.Int64).alias("predicted_type"))


def _clean(df: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    c = pl.col
    for what, bad in (("without a time", c("time").is_null()),
                      (f"more than {-EARLIEST_NS // 10**9} s before the session start",
                       c("time") < EARLIEST_NS),
                      ("without a value", c("value").is_null() | c("value").is_nan()),
                      ("negative (counter overflow)", c("value") < 0)):
        n = df.select(bad.fill_null(False).sum()).item()
        if n:
            ctx.warn(f"GPU metrics: values {what} (dropped)", n)
            df = df.filter(~bad.fill_null(False))
    return df


# -- GPU <-> process ---------------------------------------------------------------------

def placement(report: Report, ctx: Context, gpus: list[int]
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(owners: gpu -> pid, device of its metrics row; users: (pid, device) -> gpu of every
    process's CUDA devices), as described in the module docstring."""
    activity = source.device_activity(report)
    cuda = source.cuda_devices(report)
    if cuda.height:
        users = (activity.join(cuda, on=["pid", "device"], how="full", coalesce=True)
                 .with_columns(pl.col("activities").fill_null(0)))
        unmapped = users.filter(pl.col("gpu").is_null())
        if unmapped.height:
            ctx.warn("GPU metrics: CUDA devices missing from TARGET_INFO_CUDA_DEVICE (GPU id "
                     "taken as the CUDA ordinal)", unmapped.height)
        users = users.with_columns(pl.coalesce("gpu", "device").alias("gpu"))
    else:
        users = activity.with_columns(pl.col("device").alias("gpu"))
        if report.gpus.height > 1 or users["device"].n_unique() > 1:
            ctx.warn("GPU metrics: no TARGET_INFO_CUDA_DEVICE; nsys GPU ids taken as CUDA "
                     "device ordinals (wrong if CUDA_VISIBLE_DEVICES renumbered the GPUs)", 1)
    users = users.select("pid", "device", "gpu", "activities")
    ranked = users.sort(["gpu", "activities", "pid"], descending=[False, True, False])
    owners = ranked.unique("gpu", keep="first", maintain_order=True).select("gpu", "pid",
                                                                            "device")
    for g in gpus:
        pids = sorted(set(users.filter(pl.col("gpu") == g)["pid"].to_list()))
        if len(pids) > 1:
            owner = owners.filter(pl.col("gpu") == g)["pid"].item()
            ctx.count(f"GPU metrics: GPU {g} used by processes {', '.join(map(str, pids))}; "
                      f"its metrics row is on pid {owner} (most GPU activities)", 1)
    orphans = [g for g in gpus if g not in set(owners["gpu"].to_list())]
    if orphans:
        pid = _fallback_pid(users, ctx)
        ctx.warn(f"GPU metrics: GPU {', '.join(map(str, orphans))} used by no process of the "
                 f"report; metrics shown under pid {pid}", len(orphans))
        owners = pl.concat([owners, pl.DataFrame(
            {"gpu": orphans, "pid": [pid] * len(orphans), "device": orphans},
            schema=owners.schema)])
    return owners.filter(pl.col("gpu").is_in(gpus)), users.select("pid", "device", "gpu")


def _fallback_pid(users: pl.DataFrame, ctx: Context) -> int:
    if users.height:
        top = users.group_by("pid").agg(pl.col("activities").sum()).sort(
            ["activities", "pid"], descending=[True, False])
        return int(top["pid"][0])
    rows = ctx.rows.table().filter(pl.col("pid").is_not_null())
    return int(rows["pid"][0]) if rows.height else 0


# -- the kernels' rates (the sample-mixing model) --------------------------------------------
#
# Streamed: the activities of the GPUs' owners and each GPU's samples are read in time order
# from spills on disk (`_spill.SortedSpill`), never held whole: once for the model's columns
# and bounds (per code and launch configuration), once per GPU for the model's sums
# (`rate_model.SumsStream` over blocks of periods, `rate_model.sweep`), once more per GPU for
# each kernel's rates and each sample's prediction. `SumsStream` and `block_entries` give
# the numbers `fit_device` gives on whole arrays, to the last bit.

HELD_VALUES = 1 << 22  # (periods x metrics) values of a GPU kept in memory, else on disk


def _model(report: Report, ctx: Context, metrics: pl.DataFrame, owners: pl.DataFrame,
           by_gpu: dict[int, np.ndarray], samples: dict) -> None:
    """Fit the sample-mixing model on each sampled GPU (`analysis/rate_model.py`) and write
    its results: each kernel's rates on its stream row (and how they were found), the
    predicted value of each sample on the metrics row.

    The model sees what the trace shows of the GPU, so that the analysis of the trace finds
    the same rates: the samples as written (value x 100, rounded), and the kernels and
    memory operations of the process whose stream rows sit beside the metrics row (the GPU's
    owner, see `placement`)."""
    from ...analysis import rate_model as rm

    c = pl.col
    acts = _activities(report, ctx)
    acts.finish()
    own = owners.select(c("gpu").cast(pl.Int32), c("pid").cast(pl.Int32),
                        c("device").cast(pl.Int32))
    per_code, launches = _activity_sums(acts, own)
    if per_code.height == 0:
        return
    labels = _labels(report, per_code["code"].unique().to_list())
    memop_of = {code: code < 0 for code in labels}
    gpus = sorted(set(per_code["gpu"].unique().to_list()) & set(by_gpu))
    fitted = 0
    for g in gpus:
        cols = metrics.filter((c("type_id") & source.GPU_ID_MASK) == g).sort("metric")
        keys = cols["key"].to_list()
        periods = rm.periods_of(by_gpu.pop(g))
        values = _Values(samples[g], periods, cols, Path(ctx.side_file(f"gpu_metrics_values{g}")))
        # the model's columns: one per kernel name and launch class, per kind of copy
        mine = per_code.filter(c("gpu") == g).group_by("mcode").agg(c("time").sum()).sort(
            "mcode")
        code_labels, code_memop = occ.model_labels(labels, memop_of, mine["mcode"].to_numpy())
        col, names = rm.design_codes(mine["mcode"].to_numpy(), code_labels, code_memop,
                                     mine["time"].to_numpy())
        col_of = dict(zip(mine["mcode"].to_list(), col.tolist()))
        lo, hi = _launch_bounds(launches.filter(c("gpu") == g), col_of, keys, len(names),
                                values.top)

        def columns(a: pl.DataFrame) -> np.ndarray:
            return a["col"].to_numpy()

        sums = rm.SumsStream(len(names), len(keys), [m for m in range(len(keys))
                                                     if values.nan[m] > 0])
        rm.sweep(values.blocks(), _on_gpu(acts, own, g, col_of), len(names), columns,
                 lambda ent, t, e, mat, near, p0: sums.add(ent, mat,
                                                           (e - t).astype(np.float64)))
        # the trace holds the rates alone: their ranges are analyze's (the same fit)
        result = rm.fit(sums.result(), lo, hi, rates_only=True)
        if periods.cut:
            ctx.warn("GPU metrics: samples followed by a gap in the sampling (their period "
                     "cut to one sampling interval)", periods.cut)
        fitted += 1
        rates = np.stack([f.rates for f in result.metrics], axis=1)  # (K1, M)
        writer = _RateWriter(ctx, rates, result.method, keys)
        # the prediction of the metrics a kernel drives, that were ever nonzero
        live = [m for m, key in enumerate(keys) if key in greg.KERNEL_METRICS
                and values.top[m] > 0]
        owner = owners.filter(c("gpu") == g)

        def predicted(ent, t, e, mat, near, p0) -> None:
            local = rm.Entries(ent.period - p0, ent.col, ent.share, ent.busy, ent.n_cols)
            _predicted_events(ctx, owner, t, rm.predict(local, rates[:, live], t.size),
                              cols[live], p0)

        def tapped():  # each kernel's rates written as the sweep reads it
            for a in _on_gpu(acts, own, g, col_of):
                writer.add(a.filter(c("code") >= 0))
                yield a

        stream = tapped()
        if live:
            rm.sweep(values.blocks(), stream, len(names), columns, predicted)
        for _ in stream:  # the activities after the last period (or all, without a sweep)
            pass
        writer.finish()
        values.close()
    ctx.count("gpu_metrics_gpus_modelled", fitted)


def _activities(report: Report, ctx: Context):
    """The spill of the GPU activities (`keep_activities`): the one the kinds filled as they
    translated, else made here from the tables (kinds translated another way)."""
    from ...sources import memory as memory_source

    kept = ctx.shared.pop(METRICS_ACTIVITIES, None)
    if kept is not None:
        return kept
    sources = [("kernel", kernel_source.read(report, ctx.chunk_rows, attributes=False))]
    if _translated(report, ctx, "memcpy"):
        sources.append(("memcpys", memory_source.read_memcpy(report, ctx.chunk_rows)))
    if _translated(report, ctx, "memset"):
        sources.append(("memsets", memory_source.read_memset(report, ctx.chunk_rows)))
    for what, chunks in sources:
        for chunk in chunks:
            df = chunk.with_columns(ctx.rows.lookup_gpu(chunk).alias("row"))
            if what == "kernel" and "sm_ceiling_pv" not in df.columns:  # the launch's ceilings
                df = _launch.statistics(df, report, ctx, warn=False)
            keep_activities(ctx, what, df)
    spill = activity_spill(ctx)  # an empty one where no table had a row
    ctx.shared.pop(METRICS_ACTIVITIES)
    return spill


def _owned(acts, own: pl.DataFrame):
    """The activities on the streams of the GPUs' owners (`own`: gpu, pid, device) in start
    order, a bucket at a time, with their GPU and their model code (`mcode`: a kernel's
    name and launch class)."""
    c = pl.col
    for b in acts.buckets():
        a = b.join(own, on=["pid", "device"], how="inner", maintain_order="left").filter(
            c("row").is_not_null())
        if a.height:
            yield a.with_columns(pl.Series("mcode", _model_code(a)))


def _on_gpu(acts, own: pl.DataFrame, g: int, col_of: dict):
    """`_owned` of GPU `g` alone, with each activity's model column."""
    from ...analysis import rate_model as rm

    for a in _owned(acts, own.filter(pl.col("gpu") == g)):
        yield a.with_columns(pl.Series("col", rm.lookup(col_of, a["mcode"].to_numpy()),
                                       dtype=pl.Int64))


def _model_code(a: pl.DataFrame) -> np.ndarray:
    """The model's code of each activity: a kernel's its name and its launch class
    (`analysis.occupancy.grid_class` of its SM Active ceiling as written), a memory
    operation's as it is."""
    code = a["code"].to_numpy()
    ceiling = a["sm_ceiling_pv"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    return np.where(code >= 0, occ.model_code(code, occ.grid_class(ceiling)), code)


def _activity_sums(acts, own: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One pass over the owners' activities: per (gpu, code, model code) their time, and
    per (gpu, model code, launch bounds) of the kernels their time (what bounds the rates:
    `analysis.occupancy.rate_bounds` weighs launches by time)."""
    c = pl.col
    sums: list[pl.DataFrame] = []
    launches: list[pl.DataFrame] = []
    for a in _owned(acts, own):
        a = a.with_columns((c("end") - c("start")).alias("time"))
        sums.append(a.group_by("gpu", "code", "mcode").agg(c("time").sum()))
        launches.append(a.filter(c("code") >= 0).group_by("gpu", "mcode", *LAUNCH_BOUNDS)
                        .agg(c("time").sum()))
        for parts, by in ((sums, ["gpu", "code", "mcode"]),
                          (launches, ["gpu", "mcode", *LAUNCH_BOUNDS])):
            if len(parts) > 64:  # the partial sums summed: a few rows per code
                parts[:] = [pl.concat(parts).group_by(by).agg(c("time").sum())]
    if not sums:
        return pl.DataFrame(), pl.DataFrame()
    return (pl.concat(sums).group_by("gpu", "code", "mcode").agg(c("time").sum()),
            pl.concat(launches).group_by("gpu", "mcode", *LAUNCH_BOUNDS).agg(c("time").sum()))


def _labels(report: Report, codes: list[int]) -> dict[int, str]:
    """The label of each activity code: a kernel's as the trace labels it, a memory
    operation's 'memop:<value>'."""
    from ..values import NORMALISERS, clean_label

    demangle = NORMALISERS["kernel_names"]
    ids = [x for x in codes if x >= 0]
    text = dict(report.strings.filter(pl.col("id").is_in(ids)).iter_rows()) if ids else {}
    return {x: (clean_label(demangle(text[x])) if x in text else "(unnamed)") if x >= 0
            else ("(unnamed)" if x == UNNAMED_CODE else f"memop:{-1 - x}") for x in codes}


def _launch_bounds(launches: pl.DataFrame, col_of: dict, keys: list[str], n_cols: int,
                   top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bounds of the model's rates per column and metric: the metric's range (`top`:
    each metric's largest value), and for the kernels what their grids allow
    (`analysis.occupancy.rate_bounds`, on the ceilings as the trace writes them, so that
    the analysis finds the same bounds)."""
    from ...analysis import rate_model as rm

    lo, hi = rm.bounds_from_top([greg.is_percent(k) for k in keys], top)

    def f64(name: str) -> np.ndarray:
        return launches[name].cast(pl.Float64).fill_null(np.nan).to_numpy()

    col = rm.lookup(col_of, launches["mcode"].to_numpy()) if launches.height else \
        np.zeros(0, np.int64)
    return occ.rate_bounds(keys, lo, hi, col, f64("time"), f64("sms"),
                           f64("sm_ceiling_pv") / occ.SCALE,
                           f64("warps_ceiling_pv") / occ.SCALE, n_cols)


class _Values:
    """A GPU's samples as the model reads them: (periods x metrics) values as the trace has
    them (value x factor, rounded to the types' precision; NaN where a sample has no valid
    value of a metric; of two values of one metric at one time the later row's), in blocks
    of consecutive periods, read from the samples' spill once (each metric's largest value
    and invalid values counted on the way) and kept for the model's sweeps (on disk past
    HELD_VALUES values)."""

    def __init__(self, spill: SortedSpill, periods, cols: pl.DataFrame, directory: Path
                 ) -> None:
        self.periods = periods
        M = cols.height
        self.top = np.zeros(M)  # nanmax with initial 0 (`rate_model.bounds`)
        self.nan = np.zeros(M, dtype=np.int64)
        self._dir = directory
        on_disk = periods.n * M > HELD_VALUES
        self._blocks: list = []  # (first period, values or the file holding them)
        index = dict(zip(cols["metric"].to_list(), range(M)))
        n, nxt = periods.n, 0
        spill.finish()
        for part in spill.buckets():
            rows = np.searchsorted(periods.start, part["time"].to_numpy())
            where = part["metric"].replace_strict(index, default=-1,
                                                  return_dtype=pl.Int64).to_numpy()
            ok = (rows < n) & (where >= 0)
            if not ok.any():
                continue
            last = int(rows[ok].max())
            if last < nxt:
                continue
            mat = np.full((last + 1 - nxt, M), np.nan)
            keep = ok & (rows >= nxt)
            mat[rows[keep] - nxt, where[keep]] = part["pv"].to_numpy()[keep] / greg.SCALE
            self._add(nxt, mat, on_disk)
            nxt = last + 1
        spill.close()
        if nxt < n:  # periods without a value left (none: every period has one)
            self._add(nxt, np.full((n - nxt, M), np.nan), on_disk)

    def _add(self, first: int, mat: np.ndarray, on_disk: bool) -> None:
        self.top = np.fmax(self.top, np.nanmax(mat, axis=0, initial=0.0))
        self.nan += np.isnan(mat).sum(0)
        if on_disk:
            self._dir.mkdir(parents=True, exist_ok=True)
            path = self._dir / f"values{len(self._blocks):05d}.npy"
            np.save(path, mat)
            self._blocks.append((first, path))
        else:
            self._blocks.append((first, mat))

    def blocks(self):
        """(times, ends, values) of consecutive blocks of periods, in order."""
        p = self.periods
        for first, held in self._blocks:
            mat = np.load(held) if isinstance(held, Path) else held
            last = first + mat.shape[0]
            yield p.start[first:last], p.end[first:last], mat

    def close(self) -> None:
        import shutil

        self._blocks = []
        shutil.rmtree(self._dir, ignore_errors=True)


def _fixed_types(range_: greg.TypeRange, keys: list[str]) -> list[int | None]:
    """The trace type of each metric key whose offset is fixed in the registry (known
    metrics: the merge numbers them at that offset), None for the others. Their values can
    go as numeric pairs of one record (no renumbering); the others need a record each."""
    return [range_.type_of(greg.KNOWN_METRICS[k]) if k in greg.KNOWN_METRICS else None
            for k in keys]


class _RateWriter:
    """Each kernel's rates and how they were found, at its start on its stream row (moving
    with it to an overlap lane), as values that hold until the next kernel of the row sets
    them (Paraver's Last Evt Val; no value at the kernel's end: the views and the analysis
    read a rate only while a kernel runs). A value is written only where it differs from the
    one the previous kernel of the stream left, except around kernels that overlap on the
    stream (the tiler may move them to other rows): there every value is written. The
    metrics a kernel drives (`registry.gpu_metrics.KERNEL_METRICS`, fixed types) go as
    numeric pairs of one record per kernel.

    Fed the kernels in start order, a bucket at a time (`add`), each stream's kernels in
    (start, row_id) order: the last kernel of each stream waits for the next bucket (its
    neighbour decides whether they overlap), with what its stream's earlier kernels left
    (how far they reach, whether the one before it overlapped)."""

    HELD = ("row", "row_id", "start", "end", "col", "reach", "op", "pcl", "first", "pcol")

    def __init__(self, ctx: Context, rates: np.ndarray, method: np.ndarray, keys: list[str]
                 ) -> None:
        self.ctx = ctx
        M = rates.shape[1]
        self.pv = np.round(np.nan_to_num(rates) * greg.SCALE).astype(np.int64)
        self.codes = np.array([greg.METHODS.get(x, 0) for x in method], dtype=np.int64)
        self.fixed = _fixed_types(greg.RATE, keys)
        # the metrics a kernel drives have fixed types: one record per kernel carries them
        self.pair_metrics = [m for m in range(M) if (self.pv[:, m] != 0).any()
                             and self.fixed[m] is not None and keys[m] in greg.KERNEL_METRICS]
        self.held: dict[str, np.ndarray] | None = None  # each stream's last kernel
        self.kernels = 0
        self.with_rates = 0

    def add(self, k: pl.DataFrame) -> None:
        if k.height == 0:
            return
        k = k.sort(["row", "start", "row_id"])
        new = {n: k[n].to_numpy() for n in ("row", "row_id", "start", "end", "col")}
        n = k.height
        new.update(reach=new["end"], op=np.zeros(n, bool), pcl=np.zeros(n, bool),
                   first=np.zeros(n, bool), pcol=np.zeros(n, np.int64))
        carried = np.zeros(n, bool)
        if self.held is not None and self.held["row"].size:
            h = self.held
            carried = np.concatenate([np.ones(h["row"].size, bool), carried])
            new = {x: np.concatenate([h[x], new[x]]) for x in self.HELD}
            # the held kernel goes first in its stream: a stable sort by row keeps it there
            order = np.argsort(new["row"], kind="stable")
            new = {x: v[order] for x, v in new.items()}
            carried = carried[order]
        self._emit(new, carried, final=False)

    def finish(self) -> None:
        if self.held is not None and self.held["row"].size:
            self._emit(self.held, np.ones(self.held["row"].size, bool), final=True)
        self.held = None
        if self.kernels:
            self.ctx.count("gpu_metrics_kernels_with_rates", self.with_rates)

    def _emit(self, k: dict, carried: np.ndarray, final: bool) -> None:
        row, start, col = k["row"], k["start"], k["col"]
        n = row.size
        first_of_row = np.ones(n, bool)
        first_of_row[1:] = row[1:] != row[:-1]
        first = np.where(carried, k["first"], first_of_row)
        # how far the stream's kernels reach: a held kernel stands for those before it
        ends = np.where(carried, k["reach"], k["end"])
        reach = pl.DataFrame({"e": ends, "row": row}).select(
            pl.col("e").cum_max().over("row"))["e"].to_numpy()
        prev_reach = np.where(first_of_row, np.iinfo(np.int64).min, np.roll(reach, 1))
        op = np.where(carried, k["op"], start < prev_reach)
        last_of_row = np.ones(n, bool)
        last_of_row[:-1] = first_of_row[1:]
        over_next = np.zeros(n, bool)
        over_next[:-1] = ~first_of_row[1:] & op[1:]
        cluster = op | over_next
        pcl = np.where(carried, k["pcl"], np.roll(cluster, 1))
        pcol = np.where(carried, k["pcol"], np.roll(col, 1))
        # safe: this kernel and the previous one of its stream stay on the stream's own row
        safe = ~first & ~cluster & ~pcl
        out = np.ones(n, bool) if final else ~last_of_row
        if not final:
            keep = last_of_row
            self.held = {"row": row[keep], "row_id": k["row_id"][keep], "start": start[keep],
                         "end": k["end"][keep], "col": col[keep], "reach": reach[keep],
                         "op": op[keep], "pcl": pcl[keep], "first": first[keep],
                         "pcol": pcol[keep]}
        self._write(row[out], k["row_id"][out], start[out], k["end"][out], col[out],
                    pcol[out], safe[out])

    def _write(self, row, row_id, start, end, col, prev, safe) -> None:
        """The records of kernels whose neighbours are known; the record's own pair is how
        the rates were found, written again where it did not change (the same value:
        harmless) when a rate did."""
        c = pl.col
        if row.size == 0:
            return
        codes, pv = self.codes, self.pv
        self.kernels += row.size
        self.with_rates += int((codes[col] > 0).sum())
        order = 1  # after the kernel's own start record (sub = -end)
        write = ~safe | (codes[col] != codes[prev])
        pair_v = {}
        for m in self.pair_metrics:
            v = pv[col, m]
            changed = ~safe | (v != pv[prev, m])
            write |= changed
            pair_v[m] = np.where(changed, v, NUL_VALUE)
        idx = np.flatnonzero(write)
        if idx.size == 0:
            return
        df = pl.DataFrame({"row": row[idx], "row_id": row_id[idx], "start": start[idx],
                           "end": end[idx], "method": codes[col[idx]],
                           **{f"r{m}": _nullable(pair_v[m][idx]) for m in self.pair_metrics}})
        self.ctx.records(R.conform(df.select(R.events(
            c("start"), c("row"), R.PHASE_START, R.SRC_KERNEL, c("row_id"),
            greg.GPU_METRICS_METHOD, c("method"),
            R.numeric_pairs(*[(self.fixed[m], c(f"r{m}")) for m in self.pair_metrics]),
            sub=-c("end") + order))))


NUL_VALUE = np.iinfo(np.int64).min  # no value to write


def _nullable(values: np.ndarray) -> pl.Series:
    return pl.Series(values).set(pl.Series(values == NUL_VALUE), None) \
        if (values == NUL_VALUE).any() else pl.Series(values)


def _predicted_events(ctx: Context, owner: pl.DataFrame, start: np.ndarray,
                      pred: np.ndarray, cols: pl.DataFrame, first: int = 0) -> None:
    """The model's value of samples `first`.. (`pred`: samples x the metrics of `cols`, the
    metrics a kernel drives, fixed types), at the sample's time on the metrics row: one
    record per sample, after the sample's own values."""
    c = pl.col
    if pred.shape[1] == 0 or start.size == 0:
        return
    fixed = _fixed_types(greg.PREDICTED, cols["key"].to_list())
    local = cols["predicted_type"].to_list()
    pv = np.round(pred * greg.SCALE).astype(np.int64)
    n = start.size
    df = pl.DataFrame({"time": start, "row_id": np.arange(first, first + n, dtype=np.int64),
                       **{f"p{m}": pv[:, m] for m in range(pv.shape[1])}}).with_columns(
        pid=pl.lit(owner["pid"][0], pl.Int64), device=pl.lit(owner["device"][0], pl.Int64))
    df = df.with_columns(ctx.rows.metric_rows(df).alias("row")).drop("pid", "device")
    ctx.records(R.conform(df.select(R.events(
        c("time"), c("row"), R.PHASE_START, SRC_GPU_METRICS, c("row_id"), local[0], c("p0"),
        R.numeric_pairs(*[(fixed[m], c(f"p{m}")) for m in range(1, pv.shape[1])]),
        sub=pl.lit(greg.PREDICTED.size, pl.Int64)))))


def _translated(report: Report, ctx: Context, kind: str) -> bool:
    """Whether `kind` is translated for this report (present and selected)."""
    from . import KINDS, available  # the package lists this module: import at call time
    kinds = getattr(ctx.options, "kinds", None)
    return kind in KINDS and available(kind, report) and (kinds is None or kind in kinds)


TRANSLATORS = (Translator("gpu_metrics", 70, "GPU metrics samples (device-wide, per-kernel)",
                          source.available, translate),)
