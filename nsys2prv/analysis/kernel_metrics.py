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

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..paraver.read import Source, TraceInfo, open_trace
from ..paraver.registry import gpu_metrics as greg
from . import occupancy
from . import rate_model as rm
from .activities import Activities
from .labels import distinct_labels
from .store import WindowStore
from .timeline import first_of_each

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

    def __init__(self, path: Source | TraceInfo, store: WindowStore | None = None) -> None:
        info = open_trace(path)
        self.path = info.path
        # with `store`: the samples written there window by window (read back by
        # `series`), and per row what the model needs of all of them before it reads them
        self.store = store
        self._stats: dict[int, _RowStats] = {}
        labels = info.type_labels
        prefix = greg.SAMPLES.label.split("{")[0]
        base = greg.SAMPLES.base
        self.metric_types = sorted(t for t, lab in labels.items()
                                   if base <= t < base + greg.SAMPLES.size
                                   and lab.startswith(prefix))
        self.keys = [labels[t][len(prefix):] for t in self.metric_types]
        self.types = frozenset(self.metric_types)
        self.rows = info.rows.filter(pl.col("kind") == "metrics")
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
        if self.store is None:
            self._parts.append((row[new].astype(np.int32), time[new], mat))
            return
        srow, stime = row[new].astype(np.int32), time[new]
        bounds = np.flatnonzero(np.append(True, srow[1:] != srow[:-1]))
        for a, z in zip(bounds, np.append(bounds[1:], srow.size)):
            r = int(srow[a])
            # a table per row: each GPU's sweeps read its own samples alone
            self.store.add(f"samples{r}", pl.DataFrame(
                {"time": stime[a:z], **{f"v{i}": mat[a:z, i] for i in range(mat.shape[1])}}))
            st = self._stats.get(r)
            if st is None:
                st = self._stats[r] = _RowStats(len(self.metric_types))
            st.add(stime[a:z], mat[a:z])

    def series(self) -> dict[int, "_Series"]:
        """row -> its samples (`_Series`), read back from the store, or held (then once:
        `result`)."""
        if self.store is not None:
            return {r: _Series(st, (lambda r=r: self._chunks(r)))
                    for r, st in sorted(self._stats.items())}
        out = {}
        for r, (t, mat) in self.result().items():
            st = _RowStats(mat.shape[1])
            st.add(t, mat)
            out[r] = _Series(st, (lambda t=t, mat=mat: iter([(t, mat)])))
        return out

    def _chunks(self, row: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        cols = [f"v{i}" for i in range(len(self.metric_types))]
        for p in self.store.parts(f"samples{row}"):
            yield (p["time"].to_numpy(),
                   np.ascontiguousarray(p.select(cols).to_numpy(), dtype=np.float64))

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


class _RowStats:
    """What the model needs to know of all the samples of one metrics row before it reads
    them again (`SampleCollector` with a store): how many, the intervals between them (as
    counts of each distinct interval: their median), each metric's largest value and its
    invalid values."""

    def __init__(self, metrics: int) -> None:
        self.n = 0
        self.last: int | None = None
        self.gaps: dict[int, int] = {}
        self.top = np.zeros(metrics)  # nanmax with initial 0 (`rate_model.bounds`)
        self.nan = np.zeros(metrics, dtype=np.int64)

    def add(self, times: np.ndarray, mat: np.ndarray) -> None:
        t = np.asarray(times, dtype=np.int64)
        if self.last is not None:
            t = np.concatenate([[self.last], t])
        d, c = np.unique(np.diff(t), return_counts=True)
        for x, k in zip(d.tolist(), c.tolist()):
            self.gaps[x] = self.gaps.get(x, 0) + k
        self.last = int(times[-1])
        self.n += int(len(times))
        self.top = np.fmax(self.top, np.nanmax(mat, axis=0, initial=0.0))
        self.nan += np.isnan(mat).sum(0)

    def cut(self, interval: int) -> int:
        """The periods cut at a gap in the sampling (`rate_model.periods_of`)."""
        if interval <= 0:
            return 0
        return sum(k for g, k in self.gaps.items() if g > rm.GAP_FACTOR * interval)

    def interval(self) -> int:
        from .rate_model import median_interval

        if not self.gaps:
            return 0
        return median_interval(np.array(list(self.gaps), dtype=np.int64),
                               np.array(list(self.gaps.values()), dtype=np.int64))


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
#
# Every GPU's activities and samples are read as a stream, as often as the model needs them
# (`_Device.activities`, `_Device.samples`), never held whole: per kernel name and class its
# time and launches (`_scan`), then the model's sums over blocks of sampling periods, each
# with the activities that overlap it (`_sweep`); the folding, the steps and the
# interference's second fit on such sweeps too. The arithmetic is that of the whole arrays
# (`rate_model.SumsStream`, `block_entries`): the same numbers.

PERIOD_BLOCK = 65_536  # sampling periods a sweep handles at a time


@dataclass
class _Series:
    """One metrics row's samples: what is known of all of them (`_RowStats`) and their
    values, read again as chunks of (times, values) in time order."""

    stats: "_RowStats"
    chunks: object  # () -> Iterator[tuple[np.ndarray, np.ndarray]]


@dataclass
class _PeriodInfo:
    """What the tables need of a GPU's sampling periods (`rate_model.Periods` without
    them)."""

    n: int
    interval: int
    cut: int


@dataclass
class _Device:
    """One sampled GPU: its name, metrics row, stream rows, and what was fitted."""

    name: str
    row: int
    streams: list[int]
    keys: list[str]
    names: pl.DataFrame  # code, key, short, kind ('kernel', 'nccl', 'memop')
    series: _Series | None = None
    periods: _PeriodInfo | None = None
    # per (code, class): time (ns), launches; and per code of a compute kernel the
    # launches that ran beside an NCCL kernel or a copy and those that ran alone
    per_code: pl.DataFrame | None = None
    overlap: pl.DataFrame | None = None  # code, overlapped, launches, time
    labels: list[str] = field(default_factory=list)
    col_of: dict = field(default_factory=dict)  # model code -> column
    fit: rm.DeviceFit | None = None
    # the launches of its kernels by configuration (`launch.LaunchCollector` rows of its
    # stream rows): what bounds their rates
    launches: pl.DataFrame | None = None
    source: object = None  # the trace's activities (`Activities` or `StoredActivities`)
    classes: object = None  # held classes frame (row, start, class), or None
    scratch: WindowStore | None = None  # this analysis' own store (overlapped launches)
    launch_time: np.ndarray | None = None  # per model column, its activities' time
    split: "_Split | None" = None  # the interference's design (`_split_design`)

    @property
    def n_acts(self) -> int:
        return 0 if self.per_code is None else int(self.per_code["launches"].sum())

    def with_names(self, df: pl.DataFrame) -> pl.DataFrame:
        """`df` (with a `code` column) with each code's key, short name and kind."""
        return df.join(self.names, on="code", how="left")

    def label_maps(self) -> tuple[dict, dict]:
        return (dict(zip(self.names["code"].to_list(), self.names["key"].to_list())),
                dict(zip(self.names["code"].to_list(),
                         (self.names["kind"] == "memop").to_list())))

    def activities(self, overlapped: bool = False) -> Iterator[pl.DataFrame]:
        """Its activities (row, start, end, code, cls[, overlapped]) longer than 0 ns, in
        chunks in start order: code, a kernel's name id (its full name's) or -1 - the
        operation of a copy; cls, a kernel's launch class; overlapped, a compute kernel
        that ran beside an NCCL kernel or a copy (`_scan` found them, and filed the
        device's activities in the scratch store as it read them: read from there)."""
        table = f"acts{self.row}"
        for b in self.scratch.bucket_ids(table):
            a = self.scratch.bucket(table, b, ["start", "row"])
            if overlapped:
                hit = (self.scratch.bucket(f"overlapped{self.row}", b, ["start"])
                       .filter(first_of_each("row", "start"))
                       .with_columns(pl.lit(True).alias("overlapped")))
                a = a.join(hit, on=["row", "start"], how="left", maintain_order="left") \
                    .with_columns(pl.col("overlapped").fill_null(False))
            yield a

    def samples(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(times, values) of its samples in time order, in chunks of PERIOD_BLOCK at
        most."""
        for times, mat in self.series.chunks():
            for a in range(0, len(times), PERIOD_BLOCK):
                yield times[a:a + PERIOD_BLOCK], mat[a:a + PERIOD_BLOCK]


def _with_classes(items: pl.DataFrame, table: pl.DataFrame | None) -> pl.DataFrame:
    """`items` with each activity's launch class (`cls`; 0 where none is known): the first
    class written for its (row, start) in the trace's order (`launch.LaunchCollector`:
    held, or filed in the store beside the activities)."""
    if table is None or table.height == 0 or items.height == 0:
        return items.with_columns(pl.lit(0, pl.Int64).alias("cls"))
    first = (table.select(pl.col("row").cast(pl.Int32), "start",
                          pl.col("class").cast(pl.Int64).alias("cls"))
             .filter(first_of_each("row", "start")))
    return (items.join(first, on=["row", "start"], how="left", maintain_order="left")
            .with_columns(pl.col("cls").fill_null(0)))


def _device_name(rows: pl.DataFrame, row: int) -> str:
    r = rows.filter(pl.col("row") == row).row(0, named=True)
    return f"{r['task_label']} / GPU {r['device']}"


class _Overlaps:
    """Which compute kernels of a GPU ran beside an NCCL kernel or a memory operation
    (another stream: a stream runs one thing at a time), from its activities in start
    order: a kernel is decided once every activity that starts before its end has been
    seen; the union of the others is kept only as far back as an undecided kernel needs.
    Memory: the kernels running at once, not all of them."""

    def __init__(self) -> None:
        self._k = {n: np.zeros(0, np.int64) for n in ("row", "start", "end", "code")}
        self._us = np.zeros(0, np.int64)  # the union of the others, so far
        self._ue = np.zeros(0, np.int64)

    def add(self, kernel: np.ndarray, cols: dict[str, np.ndarray], last: bool = False
            ) -> dict[str, np.ndarray]:
        """The next activities (`kernel`: a compute kernel, else one of the others; `cols`:
        row, start, end, code); returns the kernels decided (all of them with `last`):
        row, start, end, code, overlapped."""
        start, end = cols["start"], cols["end"]
        other = ~kernel
        if other.any():
            self._us, self._ue = rm._union(np.concatenate([self._us, start[other]]),
                                           np.concatenate([self._ue, end[other]]))
        k = {n: np.concatenate([self._k[n], np.asarray(cols[n], np.int64)[kernel]])
             for n in self._k}
        seen = int(start.max()) if start.size else None
        done = np.ones(k["start"].size, bool) if last or seen is None else k["end"] <= seen
        out = {n: v[done] for n, v in k.items()}
        self._k = {n: v[~done] for n, v in k.items()}
        ks, ke = out["start"], out["end"]
        over = np.zeros(ks.size, dtype=bool)
        if ks.size and self._us.size:
            i = np.searchsorted(self._us, ke, side="left") - 1
            over = (i >= 0) & (self._ue[np.maximum(i, 0)] > ks)
        out["overlapped"] = over
        # the union no kernel to decide can reach: they start at `seen` or after, or are
        # among the undecided
        if seen is not None and self._us.size:
            floor = min(seen, int(self._k["start"].min())) if self._k["start"].size else seen
            keep = self._ue > floor
            if not keep.all():
                first = int(np.argmax(keep)) if keep.any() else self._us.size
                self._us, self._ue = self._us[first:], self._ue[first:]
        return out


def _scan(acts, devices: list["_Device"], classes: pl.DataFrame | None,
          overlap_launches: bool) -> pl.DataFrame | None:
    """One pass over the trace's activities: the names of their codes (`_Device.names`),
    and per sampled GPU its activities filed in the scratch store (row, start, end, code,
    cls: what the model's sweeps read), per (code, class) their time and launches, and
    which compute kernels ran beside an NCCL kernel or a copy (their (row, start) filed in
    the scratch store; per code their launches and time in both cases). With
    `overlap_launches`, every launch of the kernels that ran beside others at least once
    (code, dur, overlapped) is returned too (`slow_launches_overlapped`; a few numbers a
    launch)."""
    c = pl.col
    firsts: list[pl.DataFrame] = []
    ops: set[int] = set()
    store = getattr(acts, "store", None)
    state = []
    for d in devices:
        st = {"streams": pl.Series(d.streams, dtype=pl.Int32).implode(), "sums": [],
              "over": [], "touched": [], "flags": _Overlaps()}
        state.append(st)

    def settle(d: "_Device", st: dict, done: dict[str, np.ndarray]) -> None:
        if done["start"].size == 0:
            return
        f = pl.DataFrame({"row": done["row"].astype(np.int32), "start": done["start"],
                          "dur": done["end"] - done["start"], "code": done["code"],
                          "overlapped": done["overlapped"]})
        st["over"].append(f.group_by("code", "overlapped").agg(
            pl.len().cast(pl.Int64).alias("launches"), c("dur").sum().alias("time")))
        hit = f.filter(c("overlapped")).select("row", "start")
        if hit.height:
            d.scratch.add_timed(f"overlapped{d.row}", hit, "start")
        if overlap_launches:
            st["touched"].append(f.select("code", "dur", "overlapped"))

    for b, items in acts.gpu_buckets(["row", "start", "end", "kernel", "nccl", "name",
                                      "full", "op"]):
        k = items.filter(c("kernel"))
        if k.height:
            firsts.append(k.group_by("full", maintain_order=True).agg(
                c("name").first(), c("nccl").any()))
        ops.update(items.filter(~c("kernel"))["op"].unique().to_list())
        live = items.filter(c("end") > c("start"))
        if not live.height:
            continue
        live = _with_classes(live.select(
            "row", "start", "end", pl.when(c("kernel")).then(c("full").cast(pl.Int64))
            .otherwise(-1 - c("op").cast(pl.Int64)).alias("code"),
            (c("kernel") & ~c("nccl")).alias("compute")),
            classes if classes is not None and classes.height
            else (store.bucket("classes", b, ["start"]) if store is not None else None))
        for d, st in zip(devices, state):
            a = live.filter(c("row").is_in(st["streams"]))
            if not a.height:
                continue
            d.scratch.add_timed(f"acts{d.row}", a.select("row", "start", "end", "code",
                                                         "cls"), "start",
                                sorted_by=("start", "row"))
            st["sums"].append(a.group_by("code", "cls").agg(
                (c("end") - c("start")).sum().alias("time"),
                pl.len().cast(pl.Int64).alias("launches")))
            settle(d, st, st["flags"].add(a["compute"].to_numpy(),
                                          {n: a[n].to_numpy() for n in ("row", "start",
                                                                        "end", "code")}))
            for key, by in (("sums", ["code", "cls"]), ("over", ["code", "overlapped"])):
                if len(st[key]) > 64:  # the partial sums summed: a few rows per code
                    cols = st[key][0].columns
                    st[key] = [pl.concat(st[key]).group_by(by).agg(
                        c(x).sum() for x in cols if x not in by).select(cols)]
    z = np.zeros(0, np.int64)
    listed = []
    for d, st in zip(devices, state):
        settle(d, st, st["flags"].add(np.zeros(0, bool),
                                      {"row": z, "start": z, "end": z, "code": z}, last=True))
        d.per_code = (pl.concat(st["sums"]).group_by("code", "cls")
                      .agg(c("time").sum(), c("launches").sum()) if st["sums"] else
                      pl.DataFrame(schema={"code": pl.Int64, "cls": pl.Int64,
                                           "time": pl.Int64, "launches": pl.Int64}))
        d.overlap = (pl.concat(st["over"]).group_by("code", "overlapped")
                     .agg(c("launches").sum(), c("time").sum()) if st["over"] else
                     pl.DataFrame(schema={"code": pl.Int64, "overlapped": pl.Boolean,
                                          "launches": pl.Int64, "time": pl.Int64}))
        if overlap_launches and st["touched"]:
            all_ = pl.concat(st["touched"])
            hit = all_.filter(c("overlapped"))["code"].unique()
            if hit.len():
                listed.append(all_.filter(c("code").is_in(hit.implode())))
    names = _names_table(acts, firsts, ops)
    for d in devices:
        d.names = names
    return pl.concat(listed) if listed else None


def _names_table(acts, firsts: list[pl.DataFrame], ops: set[int]) -> pl.DataFrame:
    """(code, key, short, kind) of every code of the trace's activities: a kernel's code is
    its full name's value id, a memory operation's -1 - its operation's value (key
    'memop:<value>'); from the first (name, nccl) of each full name in the activities'
    order (`firsts`, per chunk) and the operations (`ops`)."""
    c = pl.col
    per = (pl.concat(firsts).group_by("full", maintain_order=True)
           .agg(c("name").first(), c("nccl").any()) if firsts
           else pl.DataFrame(schema={"full": pl.Int32, "name": pl.Int32, "nccl": pl.Boolean}))
    names = acts.kernel_names
    kn = (per.with_columns(c("full").cast(pl.Int64), c("name").cast(pl.Int64))
          .join(names.rename({"id": "full", "name": "key"}), on="full", how="left")
          .join(names.rename({"id": "name", "name": "short"}), on="name", how="left")
          .select(c("full").alias("code"),
                  c("key").fill_null(c("short")).fill_null("(unnamed)"),
                  c("short").fill_null("(unnamed)"),
                  pl.when(c("nccl")).then(pl.lit("nccl")).otherwise(pl.lit("kernel"))
                  .alias("kind")))
    mn = (pl.DataFrame({"op": sorted(ops)}, schema={"op": pl.Int64})
          .join(acts.memop_names.rename({"id": "op", "name": "short"}), on="op", how="left")
          .select((-1 - c("op")).alias("code"),
                  pl.format("memop:{}", c("op")).alias("key"),
                  c("short").fill_null(pl.format("memory operation {}", c("op"))),
                  pl.lit("memop").alias("kind")))
    return pl.concat([kn, mn])


def _devices(acts, series: dict[int, _Series], keys: list[str], classes,
             scratch: WindowStore) -> list[_Device]:
    rows = acts.rows
    metrics = rows.filter(pl.col("kind") == "metrics").sort("row")
    names = pl.DataFrame(schema={"code": pl.Int64, "key": pl.Utf8, "short": pl.Utf8,
                                 "kind": pl.Utf8})  # `_scan` finds them
    out = []
    for r in metrics.iter_rows(named=True):
        if r["row"] not in series:
            continue
        streams = rows.filter((pl.col("kind") == "gpu") & (pl.col("task_index") == r["task_index"])
                              & (pl.col("device") == r["device"]))["row"].to_list()
        d = _Device(_device_name(rows, r["row"]), r["row"], streams, keys, names,
                    series[r["row"]], source=acts, classes=classes, scratch=scratch)
        st = d.series.stats
        interval = st.interval()
        d.periods = _PeriodInfo(st.n, interval, st.cut(interval))
        out.append(d)
    return out


def _model_columns(d: _Device) -> None:
    """The model's columns: one per kernel name and launch class, per kind of copy (as
    `rate_model.design_codes` makes them from every interval, here from their sums)."""
    c = pl.col
    pc = d.per_code
    mcode = np.where(pc["code"].to_numpy() >= 0,
                     occupancy.model_code(pc["code"].to_numpy(), pc["cls"].to_numpy()),
                     pc["code"].to_numpy())
    per = (pl.DataFrame({"mcode": mcode, "time": pc["time"].to_numpy()})
           .group_by("mcode").agg(c("time").sum()).sort("mcode"))
    label_of, memop_of = d.label_maps()
    mlabels, mmemop = occupancy.model_labels(label_of, memop_of, per["mcode"].to_numpy())
    col, d.labels = rm.design_codes(per["mcode"].to_numpy(), mlabels, mmemop,
                                    per["time"].to_numpy())
    d.col_of = dict(zip(per["mcode"].to_list(), col.tolist()))
    d.launch_time = np.bincount(col, weights=per["time"].to_numpy().astype(np.float64),
                                minlength=len(d.labels) + 1)


def _model_codes(a: pl.DataFrame) -> np.ndarray:
    code = a["code"].to_numpy()
    return np.where(code >= 0, occupancy.model_code(code, a["cls"].to_numpy()), code)


def _period_blocks(chunks, interval: int):
    """(times, values, the next sample's time or None) of consecutive chunks of samples:
    the period ends of each chunk need the sample after it."""
    prev = None
    for times, mat in chunks:
        if len(times) == 0:
            continue
        if prev is not None:
            yield prev[0], prev[1], int(times[0])
        prev = (times, mat)
    if prev is not None:
        yield prev[0], prev[1], None


def _sweep(d: _Device, columns, n_cols: int, on_block, activities=None) -> None:
    """The sampling periods of the device in blocks, each with the entries of the model
    from the activities that overlap it (`rate_model.sweep`: `on_block(ent, times, ends,
    values, acts, p0)`, `columns(acts)` giving each activity's column; `activities`: the
    device's as `_Device.activities` gives them, with columns of their own added)."""
    def blocks():
        for times, mat, following in _period_blocks(d.samples(), d.periods.interval):
            ends, _ = rm.periods_block(times, following, d.periods.interval)
            yield times, ends, mat

    rm.sweep(blocks(), d.activities() if activities is None else activities,
             n_cols, columns, on_block)


def _fit(d: _Device, long_codes: np.ndarray | None) -> pl.DataFrame | None:
    """The device's model (`rate_model.fit` of its streamed sums), and, for the compute
    kernels `long_codes`, the folding's samples: (start, row, period, code, bin, metric
    values) of every period that lies inside one of their launches while nothing else ran.
    The interference's sums (`_split_design`) are made on the same sweep: the same
    periods and activities, each with its column of the other design."""
    _model_columns(d)
    n_cols = len(d.labels)
    split = d.split = _split_design(d)
    pairs = pl.DataFrame({"code": np.fromiter(d.col_of.keys(), np.int64, len(d.col_of)),
                          "col": np.fromiter(d.col_of.values(), np.int64, len(d.col_of))})
    lo, hi = _bounds(d, pairs, classes=True)
    M = len(d.keys)
    sums = rm.SumsStream(n_cols, M, [m for m in range(M) if d.series.stats.nan[m] > 0])
    folded: list[pl.DataFrame] = []

    def on_block(ent, times, ends, mat, near, p0) -> None:
        length = (ends - times).astype(np.float64)
        sums.add(ent, mat, length)
        if split is not None:
            live = near is not None and near.height
            z = np.zeros(0, np.int64)
            split.sums.add(rm.block_entries(
                times, ends, near["start"].to_numpy() if live else z,
                near["end"].to_numpy() if live else z,
                near["split_col"].to_numpy() if live else z, len(split.labels), p0=p0),
                mat, length)
        if long_codes is None or near is None or not near.height:
            return
        k = near.filter(pl.col("code").is_in(pl.Series(long_codes).implode()))
        if not k.height:
            return
        # per period, the shares of what ran (`rate_model` entries but the idle one)
        activity = np.bincount(ent.period - p0, weights=np.where(ent.col < ent.n_cols,
                                                                 ent.share, 0.0),
                               minlength=times.size)
        s, e = k["start"].to_numpy(), k["end"].to_numpy()
        first = np.searchsorted(times, s, side="left")
        last = np.searchsorted(ends, e, side="right") - 1
        counts = np.maximum(last - first + 1, 0)
        idx = np.repeat(np.arange(s.size), counts)
        per = first[idx] + (np.arange(idx.size) - np.repeat(np.cumsum(counts) - counts,
                                                            counts))
        alone = activity[per] <= 1.0 + 1e-9
        idx, per = idx[alone], per[alone]
        if idx.size == 0:
            return
        mid = (times[per] + ends[per]) / 2.0
        x = (mid - s[idx]) / np.maximum(e[idx] - s[idx], 1)
        b = np.clip((x * FOLD_BINS).astype(np.int64), 0, FOLD_BINS - 1)
        folded.append(pl.DataFrame({
            "start": s[idx], "row": k["row"].to_numpy()[idx], "period": per + p0,
            "code": k["code"].to_numpy()[idx], "bin": b,
            **{f"v{m}": mat[per, m] for m in range(M)}}))

    acts = None
    if split is not None:  # each activity's column of the interference's design too
        acts = (a.with_columns(pl.Series("split_col", split.columns(a), dtype=pl.Int64))
                for a in d.activities(overlapped=True))
    _sweep(d, lambda a: rm.lookup(d.col_of, _model_codes(a)), n_cols, on_block,
           activities=acts)
    d.fit = rm.fit(sums.result(), lo, hi)
    d.fit.time = sums.time
    d.fit.periods = d.periods.n
    d.fit.interval = d.periods.interval
    return pl.concat(folded) if folded else None


def _bounds(d: _Device, pairs: pl.DataFrame, n_cols: int | None = None,
            classes: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The bounds of the device's rates per column and metric: the metric's range, and for
    the kernels what their grids allow (`occupancy.rate_bounds`, on the launches' ceilings
    as the trace holds them: the translation's bounds). `pairs`: (code, col) of the
    columns' codes, a model code (name and launch class) with `classes`, else the
    name's."""
    lo, hi = rm.bounds_from_top([greg.is_percent(k) for k in d.keys], d.series.stats.top)
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
    pairs = pairs.filter(pl.col("code") >= 0).unique(["code", "col"])
    k = L.join(pairs, on="code", how="inner")
    if k.height == 0:
        return lo, hi

    def f64(name: str) -> np.ndarray:
        return k[name].cast(pl.Float64).fill_null(np.nan).to_numpy()

    return occupancy.rate_bounds(d.keys, lo, hi, k["col"].to_numpy(), f64("time"),
                                 f64("sms"), f64("sm_ceiling"), f64("warps_ceiling"),
                                 len(d.labels) if n_cols is None else n_cols)


@dataclass
class _Split:
    """The interference's design on one GPU: the model's columns with the launches of the
    kernels `codes` that ran beside an NCCL kernel or a copy apart (code + `at`), their
    bounds, and its sums, made on the model's sweep (`_fit`)."""

    codes: np.ndarray  # sorted: the kernels that ran both alone and beside others
    at: int
    col_of: dict
    labels: list[str]
    lo: np.ndarray
    hi: np.ndarray
    sums: rm.SumsStream

    def columns(self, a: pl.DataFrame) -> np.ndarray:
        """Each activity's column (`a` with its `overlapped` flag)."""
        code = a["code"].to_numpy()
        split = np.isin(code, self.codes) & a["overlapped"].to_numpy()
        return rm.lookup(self.col_of, np.where(split, code + self.at, code))


def _split_design(d: _Device) -> _Split | None:
    """The interference's design of the device (None: no kernel ran both alone and beside
    others at least INTERFERENCE_LAUNCHES times each)."""
    c = pl.col
    ov = d.overlap
    if ov is None or not ov.filter(c("overlapped")).height:
        return None
    counts = ov.group_by("code").agg(
        c("launches").filter(c("overlapped")).sum().alias("n_over"),
        c("launches").filter(~c("overlapped")).sum().alias("n_alone"))
    both = counts.filter((c("n_over") >= INTERFERENCE_LAUNCHES)
                         & (c("n_alone") >= INTERFERENCE_LAUNCHES))["code"]
    if both.len() == 0:
        return None
    # the overlapped launches of those kernels get codes of their own, past every code
    split_at = int(d.names["code"].max()) + 1
    both_np = np.sort(both.to_numpy().astype(np.int64))
    label_of, memop_of = d.label_maps()
    for code in both_np.tolist():
        label_of[code + split_at] = label_of[code] + "\x00overlapped"
    # per code of the split design, its time (the overlapped launches of `both` apart)
    per = d.per_code.group_by("code").agg(c("time").sum())
    split_time = ov.filter(c("code").is_in(both.implode()) & c("overlapped")).select(
        (c("code") + split_at).alias("code"), "time")
    per = (per.join(split_time.select(c("code") - split_at, c("time").alias("_o")),
                    on="code", how="left")
           .with_columns(c("time") - c("_o").fill_null(0)).drop("_o"))
    per = pl.concat([per, split_time]).filter(c("time").is_not_null()).sort("code")
    codes = per["code"].to_numpy()
    col, labels = rm.design_codes(codes, label_of, memop_of, per["time"].to_numpy())
    pairs = pl.DataFrame({"code": np.where(codes >= split_at, codes - split_at, codes),
                          "col": col})
    lo, hi = _bounds(d, pairs, len(labels))
    M = len(d.keys)
    sums = rm.SumsStream(len(labels), M, [m for m in range(M) if d.series.stats.nan[m] > 0])
    return _Split(both_np, split_at, dict(zip(codes.tolist(), col.tolist())), labels, lo,
                  hi, sums)


def _interference(devices: list[_Device], keys: list[str]) -> pl.DataFrame:
    """Kernels that run both alone and beside an NCCL kernel or a memory operation on
    another stream of their GPU: launches, mean duration and rates in each case (the model
    fitted again with the two cases as two columns: `_Split`, summed on the model's
    sweep)."""
    c = pl.col
    out = []
    for d in devices:
        sp = d.split
        if sp is None:
            continue
        # the two cases' rates alone (of the metrics reported): their ranges are not
        fit = rm.fit(sp.sums.result(), sp.lo, sp.hi, rates_only=True,
                     metrics=[m for m, key in enumerate(keys) if key in KEY_METRICS])
        index = {lab: i for i, lab in enumerate(sp.labels)}
        stats = d.with_names(d.overlap.filter(c("code").is_in(pl.Series(sp.codes).implode()))
                             .select("code", "overlapped", "launches",
                                     (c("time") / c("launches")).alias("mean_dur")))
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


def _folding(devices: list[_Device], keys: list[str], folded: dict) -> pl.DataFrame:
    """Per long kernel name (at least FOLD_PERIODS sampling intervals on average, launched at
    least FOLD_LAUNCHES times): each metric along its normalised duration, FOLD_BINS bins,
    the mean of the samples whose whole period lies inside one of its launches while
    nothing else ran (`folded`: per device, those samples, found on the model's sweep)."""
    c = pl.col
    out = []
    for d in devices:
        rows = folded.get(d.name)
        if rows is None or not rows.height:
            continue
        rows = rows.sort("start", "row", "period", maintain_order=True)
        for m, key in enumerate(keys):
            if key not in KEY_METRICS:
                continue
            df = rows.select("code", "bin", c(f"v{m}").alias("value")).filter(
                c("value").is_not_nan())
            if not df.height:
                continue
            folded_m = df.group_by("code", "bin").agg(c("value").mean().alias("mean"),
                                                      pl.len().alias("samples"))
            out.append(d.with_names(folded_m).select(
                pl.lit(d.name).alias("device"), c("key").alias("kernel"), "short",
                pl.lit(key).alias("metric"), "bin", "mean", "samples"))
    if not out:
        return pl.DataFrame()
    return (pl.concat(out).select("device", "kernel", "short", "metric", "bin", "mean",
                                  "samples").sort(["device", "kernel", "metric", "bin"]))


def _long_codes(d: _Device) -> np.ndarray | None:
    """The compute kernels the folding looks at (FOLD_LAUNCHES launches at least, FOLD_PERIODS
    sampling intervals long on average)."""
    c = pl.col
    kinds = d.names.select("code", "kind")
    per = (d.per_code.group_by("code").agg(c("time").sum(), c("launches").sum())
           .join(kinds, on="code", how="left").filter(c("kind") == "kernel")
           .with_columns((c("time") / c("launches")).alias("mean")))
    long = per.filter((c("launches") >= FOLD_LAUNCHES)
                      & (c("mean") >= FOLD_PERIODS * max(d.periods.interval, 1)))["code"]
    return long.to_numpy().astype(np.int64) if long.len() else None


def _steps(devices: list[_Device], keys: list[str], steps: pl.DataFrame) -> pl.DataFrame:
    """Per step and metric: the mean of the samples of the step's periods against the
    model's prediction for them (from the run's rates and the step's own mix of kernels);
    `z` is the step's difference in units of the differences' spread over the steps. One
    more sweep of each device's periods, a step's periods held until it ends."""
    c = pl.col
    out = []
    todo = steps.select("instance", "start", "end").rows()
    for d in devices:
        rates = np.nan_to_num(np.stack([m.rates for m in d.fit.metrics], axis=1))
        held: dict[int, list] = {}  # step -> (values, predicted) of its busy periods so far

        def close(i: int) -> None:
            """A step whose periods have all been seen: its means."""
            parts = held.pop(i, None)
            if not parts:
                return
            v_all = np.concatenate([p[0] for p in parts])
            q_all = np.concatenate([p[1] for p in parts])
            if v_all.shape[0] == 0:  # no busy period in it
                return
            for m, key in enumerate(keys):
                if key not in KEY_METRICS:
                    continue
                v, q = v_all[:, m], q_all[:, m]
                ok = ~np.isnan(v)
                if not ok.any():
                    continue
                out.append({"device": d.name, "instance": todo[i][0], "metric": key,
                            "measured": float(v[ok].mean()), "predicted": float(q[ok].mean()),
                            "samples": int(ok.sum())})

        def on_block(ent, times, ends, mat, near, p0) -> None:
            for i in [i for i in held if todo[i][2] <= times[0]]:
                close(i)
            pred = np.zeros((times.size, rates.shape[1]))
            for m in range(rates.shape[1]):
                pred[:, m] = np.bincount(ent.period - p0,
                                         weights=ent.share * rates[ent.col, m],
                                         minlength=times.size)
            busy = ent.busy > 0
            for i, (_, s, e) in enumerate(todo):
                a = int(np.searchsorted(times, s, side="left"))
                z = int(np.searchsorted(times, e, side="left"))
                if z > a:
                    sel = np.flatnonzero(busy[a:z]) + a
                    held.setdefault(i, []).append((mat[sel], pred[sel]))

        _sweep(d, lambda a: rm.lookup(d.col_of, _model_codes(a)), len(d.labels), on_block)
        for i in list(held):
            close(i)
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
                   classes: pl.DataFrame | None = None,
                   info: TraceInfo | None = None,
                   overlap_launches: bool = True) -> KernelMetrics:
    """The tables of the module docstring from a trace's activities and samples (both
    collected on the analysis' pass: held, or in its store); `steps` (instance, start,
    end) adds the per-step table; `launches` (a `launch.LaunchCollector` result, same
    pass) the launch statistics and the bounds they set on the rates, `classes` (its
    `kernel_classes`, where they are not in the store) each kernel's launch class
    (`info`: the trace as `open_trace` read it, else read from `acts.path`);
    `overlap_launches`: every launch of the kernels that ran beside others at least once
    (`launch_overlap`, for `slow_launches_overlapped`: a few numbers a launch). Without
    samples, the launch statistics alone. Memory: the activities and samples are read as
    streams (`_Device`), a block of periods at a time."""
    from .launch import Launches, launch_tables

    launch = Launches()
    if launches is not None and acts is not None:
        launch = launch_tables(launches, info if info is not None else acts.path, acts.rows)
    keys = samples.keys if samples is not None else []
    series = samples.series() if samples is not None else {}
    empty = KernelMetrics(launch=launch)
    if not keys or not series or acts is None:
        empty.note = NO_METRICS
        return empty
    from ..lifeline import signals_held

    scratch = None
    try:
        with signals_held():  # made and held here at once: a Ctrl-C finds it to remove
            scratch = WindowStore("nsys2prv-metrics-")
        store = getattr(acts, "store", None)
        if store is not None:  # its own tables filed in the activities' buckets
            scratch.starts = list(store.starts)
        else:
            scratch.window(-(2 ** 62))
        devices = _devices(acts, series, keys, classes, scratch)
        overlap = _scan(acts, devices, classes, overlap_launches)
        devices = [d for d in devices if d.n_acts and d.periods.n]
        if not devices:
            empty.note = "GPU metrics, but no kernel ran on a sampled GPU"
            return empty
        folded = {}
        for d in devices:
            if launches is not None:
                d.launches = launches.filter(pl.col("row").is_in(d.streams))
            folded[d.name] = _fit(d, _long_codes(d))
        tables = [_rates_table(d) for d in devices]
        rates = pl.concat([t[0] for t in tables])
        by_launch = pl.concat([t[1] for t in tables], how="diagonal_relaxed")
        job = _job_rates(rates) if len(devices) > 1 else rates.clear()
        rates = pl.concat([rates, job])
        fits = pl.concat([_fits_table(d) for d in devices])
        kernels = _kernels_table(devices, rates, fits, launch)
        spread, outliers = _spread(rates, kernels)
        result = KernelMetrics(fits, rates, kernels, spread, outliers,
                               _interference(devices, keys), _folding(devices, keys, folded),
                               launch=launch, rates_by_launch=by_launch)
        if overlap is not None:
            result.launch_overlap = overlap
            result.launch_names = devices[0].names.select("code", "key")
        if steps is not None and steps.height:
            result.steps = _steps(devices, keys, steps)
    finally:
        if scratch is not None:
            scratch.close()
    _label(result)
    missing = {d.name: int(d.series.stats.nan.sum()) for d in devices
               if d.series.stats.nan.any()}
    if missing:
        result.dropped["values missing or invalid, by GPU"] = missing
    cut = {d.name: d.periods.cut for d in devices if d.periods.cut}
    if cut:
        result.dropped["samples before a gap in the sampling (period cut), by GPU"] = cut
    return result


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
    launch_time = d.launch_time  # per column, its activities' time
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
        per_code = d.per_code.group_by("code").agg(c("time").sum(), c("launches").sum())
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

    info = open_trace(path)
    acts = ActivityCollector(info)
    samples = SampleCollector(info)
    launches = LaunchCollector(info, per_kernel=True)
    for w in windows(info, acts.types | samples.types | launches.types, state_rows="cpu"):
        acts.add(w)
        samples.add(w)
        launches.add(w)
    return kernel_metrics(acts.result(), samples, launches=launches.result(),
                          classes=launches.kernel_classes(), info=info)
