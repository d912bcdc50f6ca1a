"""Inside the kernels: what each kernel does with the GPU, from the GPU metrics samples.

nsys samples a GPU's hardware metrics (SM Active, SM Issue, Tensor Active, DRAM bandwidth,
warps in flight, ...) every 100-125 µs, each sample the average of its sampling period; most
kernels of an AI workload are shorter than that. The sample-mixing model (`rate_model.py`)
separates each kernel name's *rate* (the metric while it runs) from the samples, per GPU;
this module reads what it needs from a trace (the samples on the "GPU d metrics" rows, the
kernels and memory operations of the streams beside them, from `activities.Activities`),
fits the model per GPU and returns tables:

* `fits`: per GPU and metric, the cross-validated R^2 of the model and of the direct
  attribution (each kernel given the samples of the periods it overlaps), the held-out RMSE;
* `rates`: per GPU, kernel name and metric, the rate, its standard error, the direct
  attribution's value and how it was found (measured directly, separated by the model, or
  shared by a group of kernels that never run apart); GPU "job" rows are the time-weighted
  mean over the GPUs;
* `kernels`: per GPU (and for the job) and kernel name: time, launches, mean duration,
  duration / sampling interval, method and a *bound* label from its rates (`bound`);
* `spread`: the seed's table, per compute kernel and metric, the rates across GPUs (Avg, Max,
  Min, StDev, Avg/Max), and `outliers`: GPUs well below their peers, with the kernels'
  durations there;
* `interference`: kernels that run sometimes alone and sometimes beside an NCCL kernel or a
  memory copy on another stream, with their duration and rates in both cases;
* `folding`: for kernels longer than a few sampling periods launched many times, each
  metric along the kernel's normalised duration (BSC's folding), over its launches;
* `steps` (given the steps of `iterations.py`): each step's measured metric against what the
  model predicts from the step's kernels, and the step that differs most.

The same fit runs in the translation (`paraver/kinds/gpu_metrics.py`) on the same data, so
the rates printed here are those the trace carries for Paraver's views.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..paraver.read import Source, companion, read_layout, source_path
from ..paraver.registry import gpu_metrics as greg
from . import occupancy
from . import rate_model as rm
from .activities import Activities, _type_labels
from .labels import distinct_labels

# bound labels (docs/kernel_metrics.md): thresholds on the rates, in percent of peak
MEMORY_BOUND_DRAM = 60.0  # DRAM read + write bandwidth
TENSOR_BOUND = 40.0  # Tensor Active (or Tensor/FP16 Active)
COMPUTE_BOUND_ISSUE = 50.0  # SM Issue
UNDERFILLED_SM = 50.0  # SM Active below: the kernel leaves SMs without work
LATENCY_ISSUE = 25.0  # SM Issue below, with SMs active and few warps: latency-bound
LATENCY_WARPS = 30.0  # Compute Warps in Flight below (percent of the maximum)
# a metric whose cross-validated R^2 is below this is not explained by the kernels: its rates
# are listed but no bound is read from them
TRUSTED_R2 = 0.8
# outliers: a GPU's rate below this fraction of its peers' median, for this many kernels
OUTLIER_RATIO = 0.9
# folding: kernels at least this many sampling intervals long, launched this many times
FOLD_PERIODS = 3.0
FOLD_LAUNCHES = 5
FOLD_BINS = 10
# steps: a step's rates differ when its measured - predicted departs from the other steps'
# by STEP_Z robust standard deviations (at least STEP_FLOOR points) and STEP_POINTS points
STEP_Z = 3.0
STEP_FLOOR = 0.5
STEP_POINTS = 2.0
# interference: at least this many launches in each case
INTERFERENCE_LAUNCHES = 3

KEY_METRICS = ("SM Active", "SM Issue", "Tensor Active", "Tensor Active / FP16 Active",
               "DRAM Read Bandwidth", "DRAM Write Bandwidth", "Compute Warps in Flight")
NO_METRICS = ("no GPU metrics in this export: record with `nsys profile "
              "--gpu-metrics-devices=all`")


class SampleCollector:
    """Collects the GPU metrics samples of a trace's metrics rows window by window (an
    observer of the analysis' pass, like `activities.ActivityCollector`): per row, the
    sample times and a (samples x metrics) matrix of values (NaN where a sample lacks a
    metric)."""

    def __init__(self, path: Source) -> None:
        self.path = source_path(path)
        labels = _type_labels(companion(self.path, ".pcf"))
        prefix = greg.SAMPLES.label.split("{")[0]
        base = greg.SAMPLES.base
        self.metric_types = sorted(t for t, lab in labels.items()
                                   if base <= t < base + greg.SAMPLES.size
                                   and lab.startswith(prefix))
        self.keys = [labels[t][len(prefix):] for t in self.metric_types]
        self.types = frozenset(self.metric_types)
        layout = read_layout(path)
        self.rows = layout.rows.filter(pl.col("kind") == "metrics")
        self._col = np.full(max(self.metric_types, default=base) - base + 1, -1, dtype=np.int64)
        for i, t in enumerate(self.metric_types):
            self._col[t - base] = i
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, w) -> None:
        if not self.metric_types:
            return
        ev = w.events.slice(w.carried)
        ev = ev.filter(pl.col("type").is_in(self.metric_types))
        if ev.height == 0:
            return
        row = ev["row"].to_numpy().astype(np.int64)
        time = ev["time"].to_numpy()
        col = self._col[ev["type"].to_numpy() - greg.SAMPLES.base]
        value = ev["value"].to_numpy()
        order = np.lexsort((time, row))
        row, time, col, value = row[order], time[order], col[order], value[order]
        new = np.ones(row.size, dtype=bool)
        new[1:] = (row[1:] != row[:-1]) | (time[1:] != time[:-1])
        sample = np.cumsum(new) - 1
        mat = np.full((int(new.sum()), len(self.metric_types)), np.nan)
        mat[sample, col] = value / greg.SCALE
        self._parts.append((row[new].astype(np.int32), time[new], mat))

    def result(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """row -> (sorted sample times, values as float64, periods x metrics)."""
        if not self._parts:
            return {}
        row = np.concatenate([p[0] for p in self._parts])
        time = np.concatenate([p[1] for p in self._parts])
        mat = np.concatenate([p[2] for p in self._parts])
        self._parts = []
        order = np.lexsort((time, row))
        row, time, mat = row[order], time[order], mat[order]
        out = {}
        for r in np.unique(row):
            sel = row == r
            out[int(r)] = (time[sel], mat[sel])
        return out


@dataclass
class KernelMetrics:
    """The tables of the module docstring (empty when the trace has no GPU metrics, with
    `note` saying why)."""

    fits: pl.DataFrame = field(default_factory=pl.DataFrame)
    rates: pl.DataFrame = field(default_factory=pl.DataFrame)
    kernels: pl.DataFrame = field(default_factory=pl.DataFrame)
    spread: pl.DataFrame = field(default_factory=pl.DataFrame)
    outliers: pl.DataFrame = field(default_factory=pl.DataFrame)
    interference: pl.DataFrame = field(default_factory=pl.DataFrame)
    folding: pl.DataFrame = field(default_factory=pl.DataFrame)
    steps: pl.DataFrame = field(default_factory=pl.DataFrame)
    note: str = ""
    dropped: dict = field(default_factory=dict)
    # code, dur, overlapped: every launch of the kernels that ran beside an NCCL kernel or
    # a memory operation at least once, and the codes' names (code, key): for
    # `slow_launches_overlapped`; not printed (a few numbers a launch, no name)
    launch_overlap: pl.DataFrame = field(default_factory=pl.DataFrame)
    launch_names: pl.DataFrame = field(default_factory=pl.DataFrame)
    # what each kernel's launch allows (launch.Launches: configurations, per kernel,
    # findings); there also without GPU metrics
    launch: object = None
    # the rates of each launch class (occupancy.grid_class) of the kernels launched with
    # grids of several classes: the model's own columns, which `rates` averages per name
    rates_by_launch: pl.DataFrame = field(default_factory=pl.DataFrame)

    @property
    def empty(self) -> bool:
        return self.rates.height == 0

    def to_dict(self) -> dict:
        from .launch import json_rows as rows

        return {"note": self.note, "fits": rows(self.fits), "kernels": rows(self.kernels),
                "rates": rows(self.rates), "spread": rows(self.spread),
                "outliers": rows(self.outliers), "interference": rows(self.interference),
                "folding": rows(self.folding), "steps": rows(self.steps),
                "dropped": self.dropped,
                "rates_by_launch": rows(self.rates_by_launch),
                "launch": self.launch.to_dict() if self.launch is not None else None}


# -- the devices ----------------------------------------------------------------------------

@dataclass
class _Device:
    """One sampled GPU: its name, metrics row, stream rows, and what was fitted."""

    name: str
    row: int
    streams: list[int]
    keys: list[str]
    names: pl.DataFrame  # code, key, short, kind ('kernel', 'nccl', 'memop')
    periods: rm.Periods | None = None
    values: np.ndarray | None = None
    acts: pl.DataFrame | None = None  # row, start, end, code
    labels: list[str] = field(default_factory=list)
    col: np.ndarray | None = None
    fit: rm.DeviceFit | None = None
    busy: np.ndarray | None = None  # per period: the share of it in which anything ran
    activity: np.ndarray | None = None  # per period: the activities' shares summed
    predicted: np.ndarray | None = None  # (periods x metrics), when the steps need it
    # the launches of its kernels by configuration (`launch.LaunchCollector` rows of its
    # stream rows): what bounds their rates
    launches: pl.DataFrame | None = None
    classes: pl.DataFrame | None = None  # row, start, class: each kernel's launch class

    def with_names(self, df: pl.DataFrame) -> pl.DataFrame:
        """`df` (with a `code` column) with each code's key, short name and kind."""
        return df.join(self.names, on="code", how="left")

    def label_maps(self) -> tuple[dict, dict]:
        return (dict(zip(self.names["code"].to_list(), self.names["key"].to_list())),
                dict(zip(self.names["code"].to_list(),
                         (self.names["kind"] == "memop").to_list())))


def _device_name(rows: pl.DataFrame, row: int) -> str:
    r = rows.filter(pl.col("row") == row).row(0, named=True)
    return f"{r['task_label']} / GPU {r['device']}"


def _activities_table(acts: Activities) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Kernels and memory operations as model intervals (row, start, end, code) and the
    table of their codes (code, key, short, kind): a kernel's code is its full name's value
    id, a memory operation's -1 - its operation's value (key 'memop:<value>'). A few numbers
    an activity; the names are looked at once per code."""
    c = pl.col
    k = acts.kernels.select(c("row").cast(pl.Int32), "start",
                            (c("start") + c("dur")).alias("end"),
                            c("full").cast(pl.Int64).alias("code"))
    m = acts.memops.select(c("row").cast(pl.Int32), "start",
                           (c("start") + c("dur")).alias("end"),
                           (-1 - c("op").cast(pl.Int64)).alias("code"))
    names = acts.kernel_names
    kn = (acts.kernels.group_by("full").agg(c("name").first(), c("nccl").any())
          .join(names.rename({"id": "full", "name": "key"}), on="full", how="left")
          .join(names.rename({"id": "name", "name": "short"}), on="name", how="left")
          .select(c("full").cast(pl.Int64).alias("code"),
                  c("key").fill_null(c("short")).fill_null("(unnamed)"),
                  c("short").fill_null("(unnamed)"),
                  pl.when(c("nccl")).then(pl.lit("nccl")).otherwise(pl.lit("kernel"))
                  .alias("kind")))
    mn = (acts.memops.select("op").unique()
          .join(acts.memop_names.rename({"id": "op", "name": "short"}), on="op", how="left")
          .select((-1 - c("op").cast(pl.Int64)).alias("code"),
                  pl.format("memop:{}", c("op")).alias("key"),
                  c("short").fill_null(pl.format("memory operation {}", c("op"))),
                  pl.lit("memop").alias("kind")))
    return pl.concat([k, m]), pl.concat([kn, mn])


def _devices(acts: Activities, samples: dict, keys: list[str]) -> list[_Device]:
    rows = acts.rows
    metrics = rows.filter(pl.col("kind") == "metrics").sort("row")
    table, names = _activities_table(acts)
    out = []
    for r in metrics.iter_rows(named=True):
        if r["row"] not in samples:
            continue
        streams = rows.filter((pl.col("kind") == "gpu") & (pl.col("task_index") == r["task_index"])
                              & (pl.col("device") == r["device"]))["row"].to_list()
        d = _Device(_device_name(rows, r["row"]), r["row"], streams, keys, names)
        times, values = samples[r["row"]]
        d.periods = rm.periods_of(times)
        d.values = values
        d.acts = table.filter(pl.col("row").is_in(streams) & (pl.col("end") > pl.col("start")))
        out.append(d)
    del table
    return out


def _fit(d: _Device, predict: bool = False) -> None:
    """The device's model, and what the folding (and, with `predict`, the steps) need of
    its (period, column) shares: those are dropped after, they are the fit's largest part."""
    a = d.acts
    start, end = a["start"].to_numpy(), a["end"].to_numpy()
    label_of, memop_of = d.label_maps()
    # a kernel's column: its name and its launch class (occupancy.grid_class), as the
    # translation's model has it
    code = a["code"].to_numpy()
    classes = _classes_of(a, d.classes)
    d.classes = None  # done with
    mcode = np.where(code >= 0, occupancy.model_code(code, classes), code)
    mlabels, mmemop = occupancy.model_labels(label_of, memop_of, mcode)
    d.col, d.labels = rm.design_codes(mcode, mlabels, mmemop, end - start)
    lo, hi = _bounds(d, mcode, d.col, classes=True)
    d.fit, ent = rm.fit_device(d.periods, d.values, start, end, d.col, len(d.labels), lo, hi)
    d.busy = ent.busy
    d.activity = np.bincount(ent.period, weights=np.where(ent.col < ent.n_cols, ent.share,
                                                          0.0), minlength=d.periods.n)
    if predict:
        rates = np.stack([m.rates for m in d.fit.metrics], axis=1)
        d.predicted = rm.predict(ent, rates, d.periods.n)


def _classes_of(acts: pl.DataFrame, classes: pl.DataFrame | None) -> np.ndarray:
    """Each activity's launch class (0 where `classes`, the kernels' (row, start, class)
    other than 0, has none), found stream by stream with a binary search (a hash join of
    the millions of kernels of a large trace took half a GB)."""
    out = np.zeros(acts.height, dtype=np.int64)
    if classes is None or classes.height == 0:
        return out
    rows, starts = acts["row"].to_numpy(), acts["start"].to_numpy()
    c_rows, c_starts = classes["row"].to_numpy(), classes["start"].to_numpy()
    c_class = classes["class"].to_numpy()
    for r in np.unique(c_rows).tolist():  # the GPU's streams
        mine = c_rows == r
        order = np.argsort(c_starts[mine], kind="stable")  # the first of equal starts
        s, k = c_starts[mine][order], c_class[mine][order]
        at = np.flatnonzero(rows == r)
        i = np.minimum(np.searchsorted(s, starts[at]), s.size - 1)
        hit = s[i] == starts[at]
        out[at[hit]] = k[i[hit]]
    return out


def _bounds(d: _Device, code: np.ndarray, col: np.ndarray, n_cols: int | None = None,
            classes: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The bounds of the device's rates per column and metric: the metric's range, and for
    the kernels what their grids allow (`occupancy.rate_bounds`, on the launches' ceilings
    as the trace holds them: the translation's bounds). `code`: each interval's code, a
    model code (name and launch class) with `classes`, else the name's."""
    lo, hi = rm.bounds([greg.is_percent(k) for k in d.keys], d.values)
    L = d.launches
    if L is None or L.height == 0:
        return lo, hi
    from .launch import _derived

    L = _derived(L)
    key = (pl.col("full") * (1 << occupancy.CLASS_SHIFT) + pl.col("grid_class")) if classes \
        else pl.col("full")
    L = L.with_columns(key.alias("code"))
    # the column(s) of each kernel code (memory operations have none; the interference
    # fit splits a kernel in two columns, each bounded by all of its launches)
    pairs = (pl.DataFrame({"code": code, "col": col}).filter(pl.col("code") >= 0)
             .unique(["code", "col"]))
    k = L.join(pairs, on="code", how="inner")
    if k.height == 0:
        return lo, hi

    def f64(name: str) -> np.ndarray:
        return k[name].cast(pl.Float64).fill_null(np.nan).to_numpy()

    return occupancy.rate_bounds(d.keys, lo, hi, k["col"].to_numpy(), f64("time"),
                                 f64("sms"), f64("sm_ceiling"), f64("warps_ceiling"),
                                 len(d.labels) if n_cols is None else n_cols)


# -- the tables -----------------------------------------------------------------------------

def _rates_table(d: _Device) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per kernel name and metric, per kernel name, launch class and metric): the rates of
    the model's columns, and of each name the mean of its classes' weighted by their launch
    time (what Paraver's per-kernel tables average over the launches)."""
    f = d.fit
    K1 = f.n_cols + 1
    split = [occupancy.split_label(x) for x in d.labels] + [("(idle)", 0)]
    labels = [x for x, _ in split]
    kinds = d.names.group_by("key").agg(pl.col("kind").first(), pl.col("short").first())
    kind_of = dict(zip(kinds["key"].to_list(), kinds["kind"].to_list()))
    short_of = dict(zip(kinds["key"].to_list(), kinds["short"].to_list()))
    group_label = [labels[g] if g >= 0 else None for g in f.group]
    launch_time = np.bincount(d.col, weights=(d.acts["end"] - d.acts["start"]).to_numpy()
                              .astype(np.float64), minlength=K1)
    frames = []
    for m, key in enumerate(d.keys):
        mf = f.metrics[m]
        frames.append(pl.DataFrame({
            "device": [d.name] * K1, "kernel": labels,
            "grid_class": [k for _, k in split],
            "short": [short_of.get(x, rm.OTHER if x == rm.OTHER else x) for x in labels],
            "kind": [kind_of.get(x, "other" if x == rm.OTHER else "idle") for x in labels],
            "metric": [key] * K1, "rate": mf.rates, "se": mf.se, "direct": mf.direct,
            "method": list(f.method), "group": group_label, "time": f.time,
            "range_lo": mf.range_lo, "range_hi": mf.range_hi, "determined": mf.determined,
            "lo": mf.lo, "hi": mf.hi, "launch_time": launch_time,
            "wide": [rm.UNDETERMINED * mf.span] * K1},
            schema={"device": pl.Utf8, "kernel": pl.Utf8, "grid_class": pl.Int64,
                    "short": pl.Utf8, "kind": pl.Utf8,
                    "metric": pl.Utf8, "rate": pl.Float64, "se": pl.Float64,
                    "direct": pl.Float64, "method": pl.Utf8, "group": pl.Utf8,
                    "time": pl.Float64, "range_lo": pl.Float64, "range_hi": pl.Float64,
                    "determined": pl.Boolean, "lo": pl.Float64, "hi": pl.Float64,
                    "launch_time": pl.Float64, "wide": pl.Float64}))
    per_class = pl.concat(frames)
    c = pl.col
    several = per_class.filter(c("grid_class") > 0)["kernel"].unique()
    if several.len() == 0:
        return per_class.drop("grid_class", "launch_time", "wide"), per_class.clear()
    one = per_class.filter(~c("kernel").is_in(several.implode()))
    live = per_class.filter(c("kernel").is_in(several.implode()))
    ok = c("rate").is_not_nan() & c("rate").is_not_null()
    w = pl.when(ok).then(c("launch_time")).otherwise(0.0)

    def mean(name: str) -> pl.Expr:
        return (pl.when(ok).then(c(name) * w).otherwise(0.0).sum() / w.sum()).alias(name)

    merged = (live.group_by("device", "kernel", "metric", maintain_order=True)
              .agg(c("short").first(), c("kind").first(),
                   pl.when(w.sum() > 0).then(mean("rate")).otherwise(float("nan"))
                   .alias("rate"),
                   ((pl.when(ok).then(c("se") * w).otherwise(0.0) ** 2).sum().sqrt()
                    / w.sum()).alias("se"), mean("direct"),
                   c("method").sort_by(c("launch_time"), descending=True,
                                       maintain_order=True).first(),
                   c("group").drop_nulls().first(), c("time").sum(),
                   mean("range_lo"), mean("range_hi"), c("wide").first(), mean("lo"),
                   mean("hi"))
              # the name's range: its classes' weighted by time; undetermined as a column's
              .with_columns((~(c("range_hi") - c("range_lo") > c("wide")))
                            .alias("determined")))
    cols = [x for x in one.columns if x not in ("grid_class", "launch_time", "wide")]
    return (pl.concat([one.select(cols), merged.select(cols)]),
            live.filter(c("kind") != "idle").drop("wide").with_columns(
                c("grid_class").replace_strict(
                    {k: occupancy.class_label(k) for k in range(occupancy.MAX_CLASS + 1)},
                    return_dtype=pl.Utf8).alias("grid")))


def _fits_table(d: _Device) -> pl.DataFrame:
    f = d.fit
    return pl.DataFrame({
        "device": [d.name] * len(d.keys), "metric": d.keys,
        "r2_cv": [m.r2_cv for m in f.metrics], "r2_direct": [m.r2_direct for m in f.metrics],
        "rmse": [m.rmse for m in f.metrics], "samples": [m.samples for m in f.metrics],
        "busy_samples": [m.busy_samples for m in f.metrics],
        "interval": [f.interval] * len(d.keys), "periods_cut": [d.periods.cut] * len(d.keys)},
        schema={"device": pl.Utf8, "metric": pl.Utf8, "r2_cv": pl.Float64,
                "r2_direct": pl.Float64, "rmse": pl.Float64, "samples": pl.Int64,
                "busy_samples": pl.Int64, "interval": pl.Int64, "periods_cut": pl.Int64})


def _job_rates(rates: pl.DataFrame) -> pl.DataFrame:
    """The job's rate of each kernel and metric: the mean of the GPUs' rates weighted by the
    kernel's sampled time on each (standard errors combined the same way)."""
    c = pl.col
    live = rates.filter(c("rate").is_not_null() & c("rate").is_not_nan() & (c("time") > 0)
                        & (c("kind") != "idle"))
    w = c("time") / c("time").sum()
    return (live.group_by("kernel", "metric", maintain_order=True)
            .agg(c("short").first(), c("kind").first(),
                 (c("rate") * w).sum().alias("rate"),
                 ((c("se") * w) ** 2).sum().sqrt().alias("se"),
                 (c("direct") * w).sum().alias("direct"),
                 # the method of the GPU with most of its time (the mode of two GPUs that
                 # differ came in either order: the printed method changed run to run)
                 c("method").sort_by(c("time"), descending=True, maintain_order=True)
                 .first().alias("method"),
                 c("group").drop_nulls().first().alias("group"), c("time").sum(),
                 (c("range_lo") * w).sum().alias("range_lo"),
                 (c("range_hi") * w).sum().alias("range_hi"),
                 c("determined").all().alias("determined"),
                 (c("lo") * w).sum().alias("lo"), (c("hi") * w).sum().alias("hi"))
            .with_columns(pl.lit("job").alias("device"))
            .select(rates.columns))


def bound(rates: dict[str, float], ranges: dict[str, tuple[float, float]] | None = None,
          launch: dict | None = None) -> str:
    """A kernel's bound from its rates (percent of peak; thresholds in docs/kernel_metrics.md):
    memory-bound (DRAM read + write bandwidth near its peak), tensor-bound, compute-bound
    (issue slots busy), under-filled (SMs idle while it runs: too few blocks), latency-bound
    (SMs active but issuing little, few warps), else mixed; '' without the metrics.

    `ranges` gives, for the rates the samples do not pin down, the range of values
    consistent with them: a rule is taken only when it holds over the whole range, and a
    kernel whose label depends on where in its range a rate lies is 'undetermined', unless
    its launch decides (`launch`: the grid's SM Active and warps ceilings in %, its
    theoretical occupancy and limiter): a grid that cannot keep half the SMs busy is
    under-filled whatever the rates. The label says the cause when it is the launch:
    'under-filled (grid)', 'latency-bound (registers)'."""
    ranges = ranges or {}

    def span(*names):
        """(lo, hi) of the first rate present: its range, or its value twice."""
        for n in names:
            v = rates.get(n)
            if v is not None and v == v:
                lo_hi = ranges.get(n)
                return lo_hi if lo_hi is not None else (v, v)
        return None

    reads = [span(n) for n in ("DRAM Read Bandwidth", "DRAM Write Bandwidth")]
    reads = [r for r in reads if r is not None]
    dram = (sum(r[0] for r in reads), sum(r[1] for r in reads)) if reads else None
    tensor = span("Tensor Active", "Tensor Active / FP16 Active")
    issue = span("SM Issue")
    sm = span("SM Active")
    warps = span("Compute Warps in Flight")
    if dram is None and tensor is None and issue is None and sm is None:
        return ""

    def at_least(x, t):  # True, False, or None (depends on where in its range)
        if x is None:
            return False
        return True if x[0] >= t else (False if x[1] < t else None)

    def below(x, t):
        r = at_least(x, t)
        return None if r is None else (x is not None and not r)

    latency_warps = True if warps is None else below(warps, LATENCY_WARPS)
    latency_issue = below(issue, LATENCY_ISSUE)
    latency = (False if latency_issue is False or latency_warps is False else
               (True if latency_issue and latency_warps else None))
    label = "mixed"
    for name, holds in (("memory-bound", at_least(dram, MEMORY_BOUND_DRAM)),
                        ("tensor-bound", at_least(tensor, TENSOR_BOUND)),
                        ("compute-bound", at_least(issue, COMPUTE_BOUND_ISSUE)),
                        ("under-filled", below(sm, UNDERFILLED_SM)),
                        ("latency-bound", latency)):
        if holds is None:
            label = "undetermined"
            break
        if holds:
            label = name
            break
    launch = launch or {}
    sm_cap, warps_cap = launch.get("sm_ceiling"), launch.get("warps_ceiling")
    grid_starves = sm_cap is not None and sm_cap == sm_cap and sm_cap < UNDERFILLED_SM
    if label == "undetermined" and grid_starves:
        label = "under-filled"
    if label == "under-filled" and grid_starves:
        return "under-filled (grid)"
    if label == "latency-bound" and warps_cap is not None and warps_cap == warps_cap \
            and warps_cap < LATENCY_WARPS:
        occ_ = launch.get("occupancy")
        if occ_ is not None and occ_ == occ_ and occ_ < LATENCY_WARPS:
            limiter = launch.get("limiter")
            cause = {"warps": "block size", "blocks": "block size"}.get(limiter, limiter)
            return f"latency-bound ({cause})" if cause else label
        return "latency-bound (grid)"
    return label


def _kernels_table(devices: list[_Device], rates: pl.DataFrame,
                   fits: pl.DataFrame | None = None, launches=None) -> pl.DataFrame:
    """Per GPU and for the job, per kernel name: time, launches, mean duration, duration /
    sampling interval, method, group and bound (kernels and NCCL kernels; memory
    operations too, for their time)."""
    c = pl.col
    parts = []
    for d in devices:
        a = d.acts.with_columns((c("end") - c("start")).alias("dur"))
        per_code = a.group_by("code").agg(c("dur").sum().alias("time"),
                                          pl.len().cast(pl.Int64).alias("launches"))
        parts.append(d.with_names(per_code).group_by("key").agg(
            c("short").first(), c("kind").first(), c("time").sum(), c("launches").sum())
            .with_columns((c("time") / c("launches")).alias("mean_dur"),
                          pl.lit(d.name).alias("device"))
            .with_columns((c("mean_dur") / max(d.periods.interval, 1)).alias("periods")))
    if not parts:
        return pl.DataFrame()
    per = pl.concat(parts)
    if len(devices) == 1:
        table = per.rename({"key": "kernel"})
        return _kernel_columns(table, rates, fits, launches)
    interval = float(np.median([d.periods.interval for d in devices]))
    job = (per.group_by("key").agg(c("short").first(), c("kind").first(), c("time").sum(),
                                   c("launches").sum())
           .with_columns((c("time") / c("launches")).alias("mean_dur"),
                         pl.lit("job").alias("device"))
           .with_columns((c("mean_dur") / max(interval, 1.0)).alias("periods")))
    table = pl.concat([per.select(job.columns), job]).rename({"key": "kernel"})
    return _kernel_columns(table, rates, fits, launches)


def _kernel_columns(table: pl.DataFrame, rates: pl.DataFrame,
                    fits: pl.DataFrame | None = None, launches=None) -> pl.DataFrame:
    """The kernels table with each kernel's method, group, bound and share of its GPU's
    (or the job's) activity time, and its launch (`launches`: `launch.Launches`): the
    blocks, occupancy and waves of its main configuration."""
    c = pl.col
    meta = rates.filter(c("metric") == rates["metric"][0]).select(
        "device", "kernel", "method", "group")
    table = table.join(meta, on=["device", "kernel"], how="left")
    trusted = rates
    if fits is not None and fits.height:
        # the bound reads only the metrics the kernels explain (on the job: on every GPU)
        r2 = c("r2_cv").fill_nan(None)  # NaN (a constant metric) compares above numbers
        ok = fits.group_by("metric").agg((r2.min() >= TRUSTED_R2).fill_null(False)
                                         .alias("ok"))
        good = ok.filter(c("ok"))["metric"]
        per_dev = fits.filter((r2 >= TRUSTED_R2).fill_null(False)).select("device", "metric")
        trusted = pl.concat([
            rates.filter(c("device") != "job").join(per_dev, on=["device", "metric"]),
            rates.filter((c("device") == "job") & c("metric").is_in(good.implode()))])
    key = trusted.filter(c("metric").is_in(KEY_METRICS))
    wide = key.select("device", "kernel", "metric", "rate").pivot(
        on="metric", index=["device", "kernel"], values="rate")
    # the ranges of the rates the samples do not pin down, and the grid's ceilings (the
    # bounds the fit took), per (device, kernel); a few rows per kernel name
    ranges: dict[tuple, dict] = {}
    for r in key.filter(~c("determined").fill_null(True)).iter_rows(named=True):
        ranges.setdefault((r["device"], r["kernel"]), {})[r["metric"]] = (r["range_lo"],
                                                                          r["range_hi"])
    caps: dict[tuple, dict] = {}
    for r in rates.filter(c("metric").is_in(["SM Active", "Compute Warps in Flight"])
                          ).iter_rows(named=True):
        name = "sm_ceiling" if r["metric"] == "SM Active" else "warps_ceiling"
        caps.setdefault((r["device"], r["kernel"]), {})[name] = r["hi"]
    occ_of = {}
    if launches is not None and launches.kernels.height:
        occ_of = {r["kernel"]: r for r in launches.kernels.select(
            "kernel", "occupancy", "limiter").iter_rows(named=True)}
    kinds = dict(zip(zip(table["device"].to_list(), table["kernel"].to_list()),
                     table["kind"].to_list()))
    labels = [bound({k: r.get(k) for k in KEY_METRICS}, ranges.get((r["device"], r["kernel"])),
                    {**caps.get((r["device"], r["kernel"]), {}),
                     **occ_of.get(r["kernel"], {})})
              if kinds.get((r["device"], r["kernel"])) in ("kernel", "nccl") else ""
              for r in wide.iter_rows(named=True)]
    wide = wide.with_columns(pl.Series("bound", labels, dtype=pl.Utf8))
    table = table.join(wide.select("device", "kernel", "bound"), on=["device", "kernel"],
                       how="left")
    total = c("time").sum().over("device")
    if launches is not None and launches.kernels.height:
        table = table.join(launches.kernels.select(
            "kernel", "configs", "blocks", "occupancy", "limiter", "waves"), on="kernel",
            how="left")
    return (table.with_columns((c("time") / total).alias("share"))
            .sort(["device", "time", "kernel"], descending=[False, True, False]))


def _spread(rates: pl.DataFrame, kernels: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The seed's table (per compute kernel and metric, the GPUs' rates: mean, max, min,
    standard deviation, mean / max) and the GPUs below OUTLIER_RATIO of their peers' median
    for a kernel, with the kernel's mean duration there against the peers'."""
    c = pl.col
    dev = rates.filter((c("device") != "job") & (c("kind") == "kernel")
                       & c("metric").is_in(["Tensor Active", "Tensor Active / FP16 Active",
                                            "SM Issue", "SM Active"])
                       & c("rate").is_not_null() & c("rate").is_not_nan())
    if dev.height == 0 or dev["device"].n_unique() < 2:
        return pl.DataFrame(), pl.DataFrame()
    spread = (dev.group_by("kernel", "metric")
              .agg(c("short").first(), pl.len().alias("devices"), c("rate").mean().alias("avg"),
                   c("rate").max().alias("max"), c("rate").min().alias("min"),
                   c("rate").std(ddof=1).fill_null(0.0).alias("std"))
              .with_columns(pl.when(c("max") > 0).then(c("avg") / c("max"))
                            .otherwise(None).alias("avg_over_max"))
              .filter(c("devices") >= 2))
    time = kernels.filter(c("device") == "job").select("kernel", "time")
    spread = spread.join(time, on="kernel", how="left").sort(
        ["time", "kernel", "metric"], descending=[True, False, False], nulls_last=True)
    med = dev.group_by("kernel", "metric").agg(c("rate").median().alias("peers"),
                                                pl.len().alias("devices"))
    durs = kernels.filter(c("device") != "job").select("device", "kernel", "mean_dur")
    dmed = durs.group_by("kernel").agg(c("mean_dur").median().alias("peers_dur"))
    out = (dev.join(med, on=["kernel", "metric"]).filter(c("devices") >= 3)
           .filter(c("rate") < OUTLIER_RATIO * c("peers"))
           .join(durs, on=["device", "kernel"], how="left")
           .join(dmed, on="kernel", how="left")
           .select("device", "kernel", "short", "metric", "rate", "peers",
                   (c("rate") / c("peers")).alias("ratio"), "mean_dur", "peers_dur",
                   (c("mean_dur") / c("peers_dur")).alias("dur_ratio"))
           .sort(["device", "ratio"]))
    return spread, out


def _kinds(d: _Device) -> pl.DataFrame:
    """The device's activities with their kind (row, start, end, code, kind)."""
    return d.acts.join(d.names.select("code", "kind"), on="code", how="left")


def _overlap_flags(d: _Device) -> pl.DataFrame:
    """The compute kernels of a GPU (row, start, end, code) with whether each overlaps an
    NCCL kernel or a memory operation (on another stream: a stream runs one thing at a
    time)."""
    c = pl.col
    a = _kinds(d)
    busy = a.filter(c("kind") != "kernel")
    k = a.filter(c("kind") == "kernel").drop("kind")
    if busy.height == 0 or k.height == 0:
        return k.with_columns(pl.lit(False).alias("overlapped"))
    us, ue = rm._union(busy["start"].to_numpy(), busy["end"].to_numpy())
    ks, ke = k["start"].to_numpy(), k["end"].to_numpy()
    # a kernel overlaps the union of the others when the last union interval starting
    # before its end ends after its start
    i = np.searchsorted(us, ke, side="left") - 1
    over = (i >= 0) & (ue[np.maximum(i, 0)] > ks)
    return k.with_columns(pl.Series("overlapped", over))


def slow_launches_overlapped(modality: pl.DataFrame, km: "KernelMetrics") -> pl.DataFrame:
    """For the kernels `--modality` finds two modes or a heavy tail in: the share of their
    slow launches (longer than the geometric mean of the two modes' medians) and of their
    fast ones that ran beside an NCCL kernel or a copy; `overlap_explains` when the slow
    launches are mostly the overlapped ones (at least twice the fast ones' share and more
    than half)."""
    c = pl.col
    lo = km.launch_overlap
    if modality is None or modality.height == 0 or lo.height == 0:
        return pl.DataFrame()
    flagged = modality.filter(c("verdict") != "").select(
        "kernel", ((c("fast_median") * c("slow_median")).sqrt()).alias("cut"))
    codes = km.launch_names.join(flagged, left_on="key", right_on="kernel", how="inner")
    j = lo.join(codes.select("code", c("key").alias("kernel"), "cut"), on="code",
                how="inner")
    if j.height == 0:
        return pl.DataFrame()
    out = (j.with_columns((c("dur") > c("cut")).alias("slow"))
           .group_by("kernel")
           .agg(c("overlapped").filter(c("slow")).mean().alias("slow_overlapped"),
                c("overlapped").filter(~c("slow")).mean().alias("fast_overlapped"),
                c("slow").sum().alias("slow_launches")))
    return out.with_columns(
        ((c("slow_overlapped") > 0.5)
         & (c("slow_overlapped") >= 2 * c("fast_overlapped").fill_null(0)))
        .alias("overlap_explains")).sort("kernel")


def _interference(devices: list[_Device], keys: list[str]) -> pl.DataFrame:
    """Kernels that run both alone and beside an NCCL kernel or a memory operation on
    another stream of their GPU: launches, mean duration and rates in each case (the model
    fitted again with the two cases as two columns)."""
    c = pl.col
    out = []
    for d in devices:
        k = _overlap_flags(d)
        if not k["overlapped"].any():
            continue
        counts = k.group_by("code").agg(c("overlapped").sum().alias("n_over"),
                                        (~c("overlapped")).sum().alias("n_alone"))
        both = counts.filter((c("n_over") >= INTERFERENCE_LAUNCHES)
                             & (c("n_alone") >= INTERFERENCE_LAUNCHES))["code"]
        if both.len() == 0:
            continue
        # the overlapped launches of those kernels get codes of their own, past every code
        split_at = int(d.names["code"].max()) + 1
        split = k.with_columns(pl.when(c("code").is_in(both.implode()) & c("overlapped"))
                               .then(c("code") + split_at).otherwise(c("code")).alias("code"))
        others = _kinds(d).filter(c("kind") != "kernel").drop("kind")
        a2 = pl.concat([split.drop("overlapped"), others])
        label_of, memop_of = d.label_maps()
        for code in both.to_list():
            label_of[code + split_at] = label_of[code] + "\x00overlapped"
        start, end = a2["start"].to_numpy(), a2["end"].to_numpy()
        codes = a2["code"].to_numpy()
        col, labels = rm.design_codes(codes, label_of, memop_of, end - start)
        lo, hi = _bounds(d, np.where(codes >= split_at, codes - split_at, codes), col,
                         len(labels))
        # the two cases' rates alone: their ranges are not reported
        fit, _ = rm.fit_device(d.periods, d.values, start, end, col, len(labels), lo, hi,
                               with_ranges=False)
        index = {lab: i for i, lab in enumerate(labels)}
        stats = d.with_names(
            k.filter(c("code").is_in(both.implode()))
            .group_by("code", "overlapped")
            .agg(pl.len().alias("launches"), (c("end") - c("start")).mean().alias("mean_dur")))
        for r in stats.iter_rows(named=True):
            lab = r["key"] + ("\x00overlapped" if r["overlapped"] else "")
            j = index.get(lab)
            row = {"device": d.name, "kernel": r["key"], "short": r["short"],
                   "case": "overlapped" if r["overlapped"] else "alone",
                   "launches": r["launches"], "mean_dur": r["mean_dur"]}
            for m, key in enumerate(keys):
                if key in KEY_METRICS:
                    row[key] = float(fit.metrics[m].rates[j]) if j is not None else None
            out.append(row)
    if not out:
        return pl.DataFrame()
    return pl.DataFrame(out).sort(["device", "kernel", "case"])


def _folding(devices: list[_Device], keys: list[str]) -> pl.DataFrame:
    """Per long kernel name (at least FOLD_PERIODS sampling intervals on average, launched at
    least FOLD_LAUNCHES times): each metric along its normalised duration, FOLD_BINS bins,
    the mean of the samples whose whole period lies inside one of its launches while
    nothing else ran."""
    c = pl.col
    out = []
    for d in devices:
        p = d.periods
        k = _kinds(d).filter(c("kind") == "kernel").with_columns(
            (c("end") - c("start")).alias("dur"))
        per = k.group_by("code").agg(pl.len().alias("n"), c("dur").mean().alias("mean"))
        long = per.filter((c("n") >= FOLD_LAUNCHES)
                          & (c("mean") >= FOLD_PERIODS * max(p.interval, 1)))["code"]
        if long.len() == 0:
            continue
        inst = k.filter(c("code").is_in(long.implode()))
        s, e = inst["start"].to_numpy(), inst["end"].to_numpy()
        first = np.searchsorted(p.start, s, side="left")
        last = np.searchsorted(p.end, e, side="right") - 1
        counts = np.maximum(last - first + 1, 0)
        idx = np.repeat(np.arange(s.size), counts)
        per_idx = first[idx] + (np.arange(idx.size) - np.repeat(np.cumsum(counts) - counts,
                                                                 counts))
        # alone: the period's shares add up to (nearly) one column only
        alone = d.activity[per_idx] <= 1.0 + 1e-9
        idx, per_idx = idx[alone], per_idx[alone]
        if idx.size == 0:
            continue
        mid = (p.start[per_idx] + p.end[per_idx]) / 2.0
        x = (mid - s[idx]) / np.maximum(e[idx] - s[idx], 1)
        b = np.clip((x * FOLD_BINS).astype(np.int64), 0, FOLD_BINS - 1)
        codes = inst["code"].to_numpy()
        for m, key in enumerate(keys):
            if key not in KEY_METRICS:
                continue
            v = d.values[per_idx, m]
            ok = ~np.isnan(v)
            if not ok.any():
                continue
            df = pl.DataFrame({"code": codes[idx[ok]], "bin": b[ok], "value": v[ok]})
            folded = df.group_by("code", "bin").agg(c("value").mean().alias("mean"),
                                                    pl.len().alias("samples"))
            out.append(d.with_names(folded).select(
                pl.lit(d.name).alias("device"), c("key").alias("kernel"), "short",
                pl.lit(key).alias("metric"), "bin", "mean", "samples"))
    if not out:
        return pl.DataFrame()
    return (pl.concat(out).select("device", "kernel", "short", "metric", "bin", "mean",
                                  "samples").sort(["device", "kernel", "metric", "bin"]))


def _steps(devices: list[_Device], keys: list[str], steps: pl.DataFrame) -> pl.DataFrame:
    """Per step and metric: the mean of the samples of the step's periods against the
    model's prediction for them (from the run's rates and the step's own mix of kernels);
    `z` is the step's difference in units of the differences' spread over the steps."""
    c = pl.col
    out = []
    for d in devices:
        pred = d.predicted
        p = d.periods
        for r in steps.iter_rows(named=True):
            a = np.searchsorted(p.start, r["start"], side="left")
            z = np.searchsorted(p.start, r["end"], side="left")
            if z <= a:
                continue
            busy = d.busy[a:z] > 0
            if not busy.any():
                continue
            for m, key in enumerate(keys):
                if key not in KEY_METRICS:
                    continue
                v = d.values[a:z, m][busy]
                q = pred[a:z, m][busy]
                ok = ~np.isnan(v)
                if not ok.any():
                    continue
                out.append({"device": d.name, "instance": r["instance"], "metric": key,
                            "measured": float(v[ok].mean()), "predicted": float(q[ok].mean()),
                            "samples": int(ok.sum())})
    if not out:
        return pl.DataFrame()
    df = pl.DataFrame(out).with_columns((c("measured") - c("predicted")).alias("diff"))
    med = c("diff").median().over("device", "metric")
    spread = pl.max_horizontal(1.4826 * (c("diff") - med).abs().median().over(
        "device", "metric"), pl.lit(STEP_FLOOR))
    df = df.with_columns(((c("diff") - med) / spread).alias("z"))
    return df.with_columns(((c("z").abs() >= STEP_Z) & ((c("diff") - med).abs() >= STEP_POINTS))
                           .alias("differs")).sort(["device", "instance", "metric"])


def kernel_metrics(acts: Activities | None, samples: SampleCollector | None,
                   steps: pl.DataFrame | None = None,
                   launches: pl.DataFrame | None = None,
                   classes: pl.DataFrame | None = None) -> KernelMetrics:
    """The tables of the module docstring from a trace's activities and samples (both
    collected on the analysis' pass); `steps` (instance, start, end) adds the per-step
    table; `launches` (a `launch.LaunchCollector` result, same pass) the launch statistics
    and the bounds they set on the rates, `classes` (its `kernel_classes`) each kernel's
    launch class. Without samples, the launch statistics alone."""
    from .launch import Launches, launch_tables

    launch = Launches()
    if launches is not None and acts is not None:
        launch = launch_tables(launches, acts.path, acts.rows)
    keys = samples.keys if samples is not None else []
    data = samples.result() if samples is not None else {}
    empty = KernelMetrics(launch=launch)
    if not keys or not data or acts is None:
        empty.note = NO_METRICS
        return empty
    devices = _devices(acts, data, keys)
    devices = [d for d in devices if d.acts.height and d.periods.n]
    if not devices:
        empty.note = "GPU metrics, but no kernel ran on a sampled GPU"
        return empty
    for d in devices:
        if launches is not None:
            d.launches = launches.filter(pl.col("row").is_in(d.streams))
        if classes is not None:
            d.classes = classes.filter(pl.col("row").is_in(d.streams))
        _fit(d, predict=steps is not None and steps.height > 0)
    tables = [_rates_table(d) for d in devices]
    rates = pl.concat([t[0] for t in tables])
    by_launch = pl.concat([t[1] for t in tables], how="diagonal_relaxed")
    job = _job_rates(rates) if len(devices) > 1 else rates.clear()
    rates = pl.concat([rates, job])
    fits = pl.concat([_fits_table(d) for d in devices])
    kernels = _kernels_table(devices, rates, fits, launch)
    spread, outliers = _spread(rates, kernels)
    result = KernelMetrics(fits, rates, kernels, spread, outliers,
                           _interference(devices, keys), _folding(devices, keys),
                           launch=launch, rates_by_launch=by_launch)
    parts = []
    for d in devices:  # every launch of the kernels that ran beside others at least once
        f = _overlap_flags(d)
        touched = f.filter(pl.col("overlapped"))["code"].unique()
        if touched.len():
            parts.append(f.filter(pl.col("code").is_in(touched.implode())).select(
                "code", (pl.col("end") - pl.col("start")).alias("dur"), "overlapped"))
    if parts:
        result.launch_overlap = pl.concat(parts)
        result.launch_names = devices[0].names.select("code", "key")
    if steps is not None and steps.height:
        result.steps = _steps(devices, keys, steps)
    _label(result)
    missing = {d.name: int(np.isnan(d.values).sum()) for d in devices if np.isnan(d.values).any()}
    if missing:
        result.dropped["values missing or invalid, by GPU"] = missing
    cut = {d.name: d.periods.cut for d in devices if d.periods.cut}
    if cut:
        result.dropped["samples before a gap in the sampling (period cut), by GPU"] = cut
    return result


def _label(result: KernelMetrics) -> None:
    """A `label` column beside `kernel` in every table: the kernel's short name, or what
    tells it apart from kernels of the same short name (`labels.distinct_labels`)."""
    k = result.kernels.filter(pl.col("kind").is_in(["kernel", "nccl"])).unique("kernel")
    names = distinct_labels(k["kernel"].to_list(), k["short"].to_list())
    for attr in ("rates", "kernels", "spread", "outliers", "interference", "folding",
                 "rates_by_launch"):
        df = getattr(result, attr)
        if df.height and "kernel" in df.columns:
            label = pl.col("kernel").replace_strict(names, default=pl.col("short"),
                                                    return_dtype=pl.Utf8)
            df = df.with_columns(label.alias("label"))
            cols = df.columns
            at = cols.index("kernel") + 1
            setattr(result, attr, df.select(cols[:at] + ["label"] + [
                c for c in cols[at:] if c != "label"]))


def read_kernel_metrics(path: Source | Path) -> KernelMetrics:
    """The tables of a trace file, on one pass of its own."""
    from ..paraver.read import windows
    from .activities import ActivityCollector
    from .launch import LaunchCollector

    acts = ActivityCollector(path)
    samples = SampleCollector(path)
    launches = LaunchCollector(path, per_kernel=True)
    for w in windows(path, acts.types | samples.types | launches.types, state_rows="cpu"):
        acts.add(w)
        samples.add(w)
        launches.add(w)
    return kernel_metrics(acts.result(), samples, launches=launches.result(),
                          classes=launches.kernel_classes())
