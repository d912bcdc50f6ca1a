"""Why the GPUs wait: every interval in which a device runs nothing between its first and its
last activity (a gap), the host thread that queued the work ending it, and what that thread
was doing meanwhile; and HTA's kernel launch statistics.

The answer is on the host almost always (a synchronisation call, a synchronous or pageable
copy, MPI or NCCL, I/O, a launch-bound loop, host compute, a descheduled thread), so each gap
is attributed to the thread whose CUDA call launched the first activity after it - the
launch arrow that reaches the device at the gap's end - and its time is split by what that
thread was doing, one cause at each instant (`CAUSES`, in priority order: the outermost
call a thread is in explains it best: MPI and NCCL calls run CUDA calls, CUDA calls run OS
calls).

Two passes, window by window (memory: one window, and pass 1's table of the gaps, 5 numbers
a gap); the trace is read once: pass 1 keeps what pass 2 reads (the CPU rows' states and
the calls' events: `WindowSpill`, lz4-compressed Arrow files in a temporary directory,
about a tenth of the trace's text), as reading it again cost as much as pass 1's reading:

1. `GapFinder` takes each window's active runs of every device from the efficiency model's
   sweep: gaps are the holes between them; arrows are kept until the activity they
   reach has started, and the one reaching a gap's end names its host thread.
   `LaunchStats` completes CUDA calls and kernels across windows (`IntervalStream`) and
   times every launch.
2. `CauseSums` partitions the host threads' time into causes (`cause_of`) and sums each
   cause between both ends of every gap piece of the window, in one compiled walk of each
   host row's states and calls (`timeline.between`: no join of gaps with states), and
   names the NVTX push/pop range open on the thread at the gap's middle (`NvtxStacks`, whose open ranges are carried from window to window). A gap is folded
   (`GapFold`: sums per device and per NVTX range, the top N gaps) in the window where it
   ends; only the gaps that cross a window's end wait for the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl

from ..paraver.read import Trace, TraceInfo
from ..paraver.registry import cuda, nccl, nvtx, osrt
from ..paraver.registry import mpi as mpi_reg
from ..paraver.registry.core import (STATE_ALLOC, STATE_BLOCKED, STATE_CONFIG_ACCEL,
                                     STATE_FORK_JOIN, STATE_FREE, STATE_IO,
                                     STATE_MEMORY_TRANSFER, STATE_RUNNING, STATE_SYNC)
from .sums import GroupSums
from .timeline import NST, ST_ENDED, ST_NONE, Gaps, GroupSweep, RowTimeKey, between

# what the host thread was doing, in priority order: (key, label)
CAUSES: tuple[tuple[str, str], ...] = (
    ("mpi", "in MPI"),
    ("nccl", "in an NCCL call"),
    ("cuda_sync", "in a CUDA synchronisation call"),
    ("cuda_memcpy", "in a CUDA memcpy/memset call (synchronous or pageable)"),
    ("cuda_alloc", "allocating or freeing CUDA memory"),
    ("cuda_launch", "launching (kernel or graph launch calls)"),
    ("cuda_other", "in another CUDA call"),
    ("io", "in I/O (OS runtime)"),
    ("wait", "waiting on a lock, condition or child (OS runtime)"),
    ("sleep", "sleeping or polling (OS runtime)"),
    ("osrt_other", "in another OS runtime call"),
    ("descheduled", "not running (descheduled)"),
    ("host_compute", "running, in no traced call (host compute)"),
    ("no_data", "no record of the thread (not alive, or not traced)"),
)
CAUSE_KEYS = tuple(k for k, _ in CAUSES)
CAUSE_LABELS = dict(CAUSES)
UNKNOWN_HOST = "unknown_host"  # a gap whose next activity has no launch record
MPI_CALLS = tuple(mpi_reg.CALL_TYPES)
PUSHPOP = tuple(range(nvtx.NVTX_PUSHPOP_BASE, nvtx.NVTX_PUSHPOP_BASE + nvtx.NVTX_DOMAIN_MAX))
# event types of the second pass: the calls that decide a cause, and NVTX push/pop ranges
CAUSE_TYPES = frozenset({*MPI_CALLS, nccl.NCCL_RANGE, cuda.CUDA_CALL, osrt.OSRT_CALL,
                         *PUSHPOP})
LAUNCH_TAGS = (cuda.TAG_KERNEL_LAUNCH, cuda.TAG_NCCL_LAUNCH, cuda.TAG_MEMORY_OPERATION)
KERNEL_TAGS = (cuda.TAG_KERNEL_LAUNCH, cuda.TAG_NCCL_LAUNCH)
KERNEL_TYPES = (cuda.CUDA_KERNEL, cuda.NCCL_KERNEL)


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


# buckets the idle time is also summed into: the steps of a run (instance, start, end), or
# named sets of them ({"steps": ..., "layers": (instance, g, start, end)})
Buckets = pl.DataFrame | dict[str, pl.DataFrame | None] | None


def bucket_sets(buckets: Buckets) -> dict[str, pl.DataFrame]:
    """The named non-empty bucket sets of `buckets` (a frame alone is the steps)."""
    if buckets is None:
        return {}
    if isinstance(buckets, pl.DataFrame):
        buckets = {"steps": buckets}
    return {k: v for k, v in buckets.items() if v is not None and v.height}


# ------------------------------------------------------------------ pass 1: the gaps --


class GapFinder:
    """Gaps of every device and the host row of the launch arrow at each gap's end (compiled:
    `timeline.Gaps`), over the windows of the model's device sweep `sweep`. With `keep`,
    every gap is kept for `gaps()` (the second pass needs them all)."""

    def __init__(self, sweep: GroupSweep, rows: pl.DataFrame, keep: bool = True) -> None:
        self._finder = Gaps(sweep, rows, LAUNCH_TAGS)
        self.keys = self._finder.keys
        self._keep = keep
        self._gaps: list[np.ndarray] = []

    def add(self, window: Trace, runs: pl.DataFrame) -> np.ndarray:
        """A window and the runs in which each device is active in it (the model's sweep
        gives them); returns the gaps that ended in it, [n, 4] (g index, start, end, host
        row or -1: no launch record)."""
        found = self._finder.add(runs, window.comms, window.end)
        if len(found) and self._keep:
            self._gaps.append(found)
        return found

    def idle(self, end: int) -> np.ndarray:
        """[n, 2] (g index, since) of the devices idle at `end`."""
        return self._finder.idle(end)

    def spans(self) -> pl.DataFrame:
        """(g, first, last): start of each device's first activity, end of its last."""
        return self._finder.spans()

    def gaps(self) -> pl.DataFrame:
        """(gid, g, start, end, host_row) of every gap, by start time."""
        found = np.concatenate(self._gaps) if self._gaps else np.empty((0, 4), np.int64)
        return _gap_frame(self.keys, found).sort("start", "g").with_row_index("gid") \
            .with_columns(pl.col("gid").cast(pl.Int64))


def _gap_frame(keys: np.ndarray, found: np.ndarray) -> pl.DataFrame:
    """(g, start, end, host_row) of gaps as `GapFinder.add` gives them."""
    host = pl.Series("host_row", found[:, 3].astype(np.int32))
    return (pl.DataFrame({"g": keys[found[:, 0]].astype(np.int64), "start": found[:, 1],
                          "end": found[:, 2]})
            .with_columns(host.set(host < 0, None)))  # -1: no launch record


class IntervalStream:
    """Last Evt Val intervals of a set of types, completed across windows: `add` returns the
    intervals (row, start, end, value[, tag]) that ended in the window; those still open are
    carried. `finish(end)` closes them at the trace end. With `tag`, each interval also
    carries the value of that event type at its start on its row (a kernel's full name:
    its short name alone merges the instantiations of a template), or 0."""

    def __init__(self, types: Iterable[int], tag: int | None = None) -> None:
        self.types = list(types)
        self.tag = tag
        self._cols = ["row", "start", "value"] + (["tag"] if tag is not None else [])
        self._open = _empty({"row": pl.Int32, "start": pl.Int64, "value": pl.Int64,
                             **({"tag": pl.Int64} if tag is not None else {})})
        self._key: RowTimeKey | None = None

    def add(self, window: Trace) -> pl.DataFrame:
        own = window.events.slice(window.carried)
        ev = own.filter(pl.col("type").is_in(self.types)).select("row", "time", "value")
        if self.tag is not None:  # the tag event sits at the same (row, time)
            key = self._key = self._key or RowTimeKey.of_trace(window.rows)
            key.see(window.end)
            tags = (own.filter(pl.col("type") == self.tag)
                    .select("row", "time", pl.col("value").alias("tag"))
                    .filter(key.of("row", "time").is_first_distinct()))
            ev = (key.join(ev, tags, time="time")
                  .with_columns(pl.col("tag").fill_null(0).cast(pl.Int64)))
        ev = ev.with_columns(pl.col("time").shift(-1).over("row").alias("next"))
        first = ev.group_by("row").agg(pl.col("time").min().alias("end"))
        ended = self._open.join(first, on="row", how="inner")
        still = self._open.join(first, on="row", how="anti")
        live = ev.filter(pl.col("value") != 0)
        extra = ["tag"] if self.tag is not None else []
        done = live.filter(pl.col("next").is_not_null()).select(
            "row", pl.col("time").alias("start"), pl.col("next").alias("end"), "value", *extra)
        opened = live.filter(pl.col("next").is_null()).select(
            "row", pl.col("time").alias("start"), "value", *extra)
        self._open = pl.concat([still, opened.cast(self._open.schema)])
        out = pl.concat([ended.select("row", "start", "end", "value", *extra),
                         done.cast(ended.select("row", "start", "end", "value", *extra).schema)])
        return out.filter(pl.col("end") > pl.col("start"))

    def finish(self, end: int) -> pl.DataFrame:
        extra = ["tag"] if self.tag is not None else []
        out = self._open.with_columns(pl.lit(end, pl.Int64).alias("end")).select(
            "row", "start", "end", "value", *extra)
        self._open = self._open.clear()
        return out.filter(pl.col("end") > pl.col("start"))


@dataclass
class KernelLaunches:
    """HTA's launch statistics of one kernel (its demangled name; times in ns): launch
    delay = kernel start - end of the CUDA call that launched it; a short kernel runs for
    less time than its launch call took."""

    name: str  # the short name
    count: int
    call_time: int  # summed duration of the launch calls
    kernel_time: int
    delay_mean: float
    delay_max: int
    short: int  # kernels shorter than their launch call
    short_time: int
    full: str = ""  # the demangled name (the short one where the trace has none)
    label: str = ""  # tells it apart from kernels of the same short name (labels.py)


class LaunchStats:
    """Every kernel launch timed: the arrow from the launch call to the kernel, the call's
    end (`IntervalStream` of CUDA calls), the kernel's end and name (of kernels); arrows wait
    until both have ended."""

    def __init__(self) -> None:
        self.calls = IntervalStream([cuda.CUDA_CALL])
        self.kernels = IntervalStream(KERNEL_TYPES, tag=cuda.KERNEL_FULL_NAME)
        self._pending = _empty({"send_row": pl.Int32, "send": pl.Int64, "recv_row": pl.Int32,
                                "recv": pl.Int64, "call_end": pl.Int64, "kernel_end": pl.Int64,
                                "kernel": pl.Int64, "full": pl.Int64})
        self._sums = GroupSums(("kernel", "full"), (
            pl.col("count", "call_time", "kernel_time", "delay_sum", "short",
                   "short_time").sum(), pl.col("delay_max").max()))
        self._key: RowTimeKey | None = None  # (row, time) of calls and kernels as one key

    def add(self, window: Trace) -> None:
        key = self._key = self._key or RowTimeKey.of_trace(window.rows)
        key.see(window.end)
        if window.comms is not None and window.comms.height:
            arrows = window.comms.filter(pl.col("tag").is_in(KERNEL_TAGS)).select(
                "send_row", "send", "recv_row", "recv",
                *(pl.lit(None, pl.Int64).alias(c) for c in ("call_end", "kernel_end",
                                                             "kernel", "full")))
            if arrows.height:
                key.see(arrows["send"].min(), arrows["send"].max(), arrows["recv"].min(),
                        arrows["recv"].max())
            self._pending = pl.concat([self._pending, arrows])
        self._match(self.calls.add(window), self.kernels.add(window))

    def _match(self, calls: pl.DataFrame, kernels: pl.DataFrame) -> None:
        p = self._pending
        key = self._key or RowTimeKey(1)  # none: no window came (nothing to match)
        if calls.height:
            p = (key.join(p, calls.select(pl.col("row").alias("send_row"),
                                          pl.col("start").alias("send"),
                                          pl.col("end").alias("_ce")),
                          row="send_row", time="send")
                 .with_columns(pl.coalesce("call_end", "_ce").alias("call_end")).drop("_ce"))
        if kernels.height:
            p = (key.join(p, kernels.select(pl.col("row").alias("recv_row"),
                                            pl.col("start").alias("recv"),
                                            pl.col("end").alias("_ke"),
                                            pl.col("value").alias("_kv"),
                                            pl.col("tag").alias("_kf")),
                          row="recv_row", time="recv")
                 .with_columns(pl.coalesce("kernel_end", "_ke").alias("kernel_end"),
                               pl.coalesce("kernel", "_kv").alias("kernel"),
                               pl.coalesce("full", "_kf").alias("full"))
                 .drop("_ke", "_kv", "_kf"))
        done = pl.col("call_end").is_not_null() & pl.col("kernel_end").is_not_null()
        finished = p.filter(done)
        if finished.height:
            call = pl.col("call_end") - pl.col("send")
            dur = pl.col("kernel_end") - pl.col("recv")
            delay = pl.col("recv") - pl.col("call_end")
            short = dur < call
            self._sums.add(finished.group_by("kernel", "full").agg(
                pl.len().cast(pl.Int64).alias("count"), call.sum().alias("call_time"),
                dur.sum().alias("kernel_time"), delay.sum().alias("delay_sum"),
                delay.max().alias("delay_max"), short.sum().cast(pl.Int64).alias("short"),
                dur.filter(short).sum().alias("short_time")))
        self._pending = p.filter(~done)

    def result(self, end: int, names: dict[int, str],
               full_names: dict[int, str] | None = None) -> list[KernelLaunches]:
        """Per kernel (demangled name, `full_names`; the short name, `names`, where a trace
        has none), largest kernel time first, each with a label that tells it apart from
        the kernels of its short name."""
        from .labels import distinct_labels

        self._match(self.calls.finish(end), self.kernels.finish(end))
        per = self._sums.result()
        if per is None:
            return []
        per = per.sort("kernel_time", "kernel", "full", descending=[True, False, False])
        full_names = full_names or {}
        rows = list(per.iter_rows(named=True))
        short = [names.get(r["kernel"], str(r["kernel"])) for r in rows]
        # 0: no full-name event at the kernel's start (a trace read without that type, or
        # written without it): the short name, never the label of value 0 ('End')
        full = [(full_names.get(r["full"]) if r["full"] else None) or s
                for r, s in zip(rows, short)]
        labels = distinct_labels(full, short)
        return [KernelLaunches(s, r["count"], r["call_time"], r["kernel_time"],
                               r["delay_sum"] / r["count"], r["delay_max"], r["short"],
                               r["short_time"] or 0, f, labels[f])
                for r, s, f in zip(rows, short, full)]


# ----------------------------------------------------------- pass 2: the host's causes --


CALL_SETS = {"mpi": MPI_CALLS, "nccl": (nccl.NCCL_RANGE,), "cuda": (cuda.CUDA_CALL,),
             "osrt": (osrt.OSRT_CALL,)}
_CUDA_STATE_CAUSES = {STATE_SYNC: "cuda_sync", STATE_MEMORY_TRANSFER: "cuda_memcpy",
                      STATE_ALLOC: "cuda_alloc", STATE_FREE: "cuda_alloc",
                      STATE_CONFIG_ACCEL: "cuda_launch"}
_OSRT_STATE_CAUSES = {STATE_IO: "io", STATE_SYNC: "wait", STATE_FORK_JOIN: "wait",
                      STATE_BLOCKED: "sleep"}


def cause_of(open_calls: set[str], state: int | None) -> str:
    """The cause of an instant of a host thread from the call sets open on it (`CALL_SETS`
    keys) and its state (None: in no state), in CAUSES' priority order: the outermost call
    explains it best (MPI and NCCL calls run CUDA calls, CUDA calls run OS calls)."""
    if "mpi" in open_calls:
        return "mpi"
    if "nccl" in open_calls:
        return "nccl"
    if "cuda" in open_calls:
        return _CUDA_STATE_CAUSES.get(state, "cuda_other")
    if "osrt" in open_calls:
        return _OSRT_STATE_CAUSES.get(state, "osrt_other")
    if state == STATE_BLOCKED:
        return "descheduled"
    if state == STATE_RUNNING:
        return "host_compute"
    return "no_data"


def _cause_columns() -> np.ndarray:
    """The cause (index into CAUSE_KEYS) of every bin of `timeline.between`: (state index,
    open call sets in CALL_SETS' order)."""
    sets = list(CALL_SETS)
    table = np.empty((NST + 3) << len(sets), dtype=np.int8)
    for index in range(NST + 3):
        state = None if index in (ST_NONE, ST_ENDED) else \
            (index - 2 if index < NST + 2 else -1)  # -1: a state with no bin of its own
        for flags in range(1 << len(sets)):
            opened = {k for i, k in enumerate(sets) if flags & (1 << i)}
            table[(index << len(sets)) | flags] = CAUSE_KEYS.index(cause_of(opened, state))
    return table


CAUSE_COLUMNS = _cause_columns()


def cause_times(window: Trace, rows: Sequence[int], pieces: pl.DataFrame) -> pl.DataFrame:
    """(qid, *CAUSE_KEYS): per piece (qid, row, a, b) of a host row among `rows`, the time of
    each cause on its row from a to b, as the window's states and calls give it."""
    times = between(window, rows, window.rows.height, list(CALL_SETS.values()),
                    CAUSE_COLUMNS, len(CAUSE_KEYS), pieces)
    return pl.DataFrame({"qid": pieces["qid"],
                         **{k: times[:, i] for i, k in enumerate(CAUSE_KEYS)}})


def asof(left: pl.DataFrame, right: pl.DataFrame, left_on: str, right_on: str,
         by: str | list[str]) -> pl.DataFrame:
    """For each row of `left`, the last row of `right` of the same `by` keys at or before
    it (`join_asof`, backward): both are sorted on their time here. polars cannot check the
    order within groups and says so; the sort makes it true."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sortedness of columns cannot be checked")
        return left.sort(left_on).join_asof(right.sort(right_on), left_on=left_on,
                                            right_on=right_on, by=by, strategy="backward")


class NvtxStacks:
    """The innermost NVTX push/pop range open on a row at given times. Push/pop ranges
    nest (Paraver's Stacked Val): a value starts a range, 0 ends the innermost; the ranges
    open at a window's end are carried into the next as pushes at its start."""

    def __init__(self) -> None:
        self._carry = _empty({"row": pl.Int32, "type": pl.Int64, "level": pl.Int64,
                              "value": pl.Int64, "time": pl.Int64})

    def add(self, window: Trace, rows: pl.Series, queries: pl.DataFrame) -> pl.DataFrame:
        """queries (qid, row, t) -> (qid, type, value) of those with a range open."""
        ev = (window.events.slice(window.carried)
              .filter(pl.col("type").is_in(PUSHPOP) & pl.col("row").is_in(rows.implode()))
              .select("row", "type", "time", "value", "seq"))
        carried = self._carry.sort("row", "type", "level").select(
            "row", "type", "time", "value",
            (pl.col("level") - 2**62).alias("seq"))  # before every real event
        allev = (pl.concat([carried, ev]).sort("row", "type", "seq")
                 .with_columns(pl.when(pl.col("value") != 0).then(1).otherwise(-1)
                               .alias("d")))
        allev = allev.with_columns(pl.col("d").cum_sum().over("row", "type").alias("depth"))
        pushes = allev.filter(pl.col("d") == 1).rename({"depth": "level"})
        # ranges still open at the window's end: no later depth below their level
        after = pl.col("depth").reverse().cum_min().reverse().over("row", "type")
        opened = allev.with_columns(after.alias("min_after")).filter(
            (pl.col("d") == 1) & (pl.col("min_after") >= pl.col("depth")))
        self._carry = opened.select("row", "type", pl.col("depth").alias("level"), "value",
                                    "time")
        if queries.height == 0 or allev.height == 0:
            return _empty({"qid": pl.Int64, "type": pl.Int64, "value": pl.Int64})
        types = allev.select("row", "type").unique()
        q = queries.join(types, on="row", how="inner")
        depth = asof(q, allev.select("row", "type", "time", "depth"), "t", "time",
                     ["row", "type"])
        depth = depth.filter(pl.col("depth") > 0).rename({"depth": "level"})
        hit = asof(depth, pushes.select("row", "type", "level", pl.col("time").alias("pt"),
                                        "value"), "t", "pt", ["row", "type", "level"])
        return (hit.filter(pl.col("value").is_not_null())
                .sort("qid", "pt").group_by("qid", maintain_order=True).last()
                .select("qid", "type", "value"))


SUM_COLS = (*CAUSE_KEYS, UNKNOWN_HOST)


class GapFold:
    """What the report needs of the gaps, folded as they complete (memory independent of
    their number): per device (g) the gap count, idle time and time per cause; per (g, NVTX
    push/pop type, value) the idle time; and the `top` longest gaps, whole."""

    COMPACT = 64  # partial sums kept before they are summed together

    def __init__(self, top: int, buckets: Buckets = None) -> None:
        self.top = top
        self._sums: list[pl.DataFrame] = []
        self._nvtx: list[pl.DataFrame] = []
        self._best: pl.DataFrame | None = None
        # named sets of (instance, start, end[, g]) buckets: the steps of a run, the
        # layers' instances on each device (g); each gap also summed into the bucket of
        # each set its middle lies in (`instance_sums`)
        self._buckets = {name: b.select(
            "instance", *(["g"] if "g" in b.columns else []),
            pl.col("start").alias("b_start"), pl.col("end").alias("b_end")).sort("b_start")
            for name, b in bucket_sets(buckets).items()}
        self._inst: dict[str, list[pl.DataFrame]] = {name: [] for name in self._buckets}

    def add(self, done: pl.DataFrame) -> None:
        """Completed gaps: (gid, g, start, end, host_row, *SUM_COLS, type, value)."""
        if not done.height:
            return
        dur = pl.col("end") - pl.col("start")
        self._sums.append(done.group_by("g").agg(
            pl.len().cast(pl.Int64).alias("gaps"), dur.sum().alias("idle"),
            *(pl.col(k).sum() for k in SUM_COLS)))
        self._nvtx.append(done.filter(pl.col("type").is_not_null())
                          .group_by("g", "type", "value").agg(dur.sum().alias("t")))
        best = done if self._best is None else pl.concat([self._best, done])
        # ties: the earlier, then the device first (the order of the gaps' ids)
        self._best = best.sort(dur, "start", "g", descending=[True, False, False]).head(self.top)
        if self._buckets:
            mid = ((pl.col("start") + pl.col("end")) // 2).alias("mid")
            by_mid = done.with_columns(mid).sort("mid")
            for name, b in self._buckets.items():
                by = ["g"] if "g" in b.columns else None
                tagged = (by_mid.join_asof(b, left_on="mid", right_on="b_start", by=by,
                                           strategy="backward", check_sortedness=False)
                          .filter(pl.col("mid") < pl.col("b_end")))
                self._inst[name].append(tagged.group_by("instance").agg(
                    pl.len().cast(pl.Int64).alias("gaps"), dur.sum().alias("idle"),
                    *(pl.col(k).sum() for k in SUM_COLS)))
        if len(self._sums) > self.COMPACT:
            self._sums = [self.sums()]
            self._nvtx = [self.nvtx()]
            for name in self._inst:
                if self._inst[name]:
                    self._inst[name] = [self.instance_sums(name)]

    def sums(self) -> pl.DataFrame:
        """(g, gaps, idle, *SUM_COLS)."""
        if not self._sums:
            return _empty({"g": pl.Int64, "gaps": pl.Int64, "idle": pl.Int64,
                           **{k: pl.Int64 for k in SUM_COLS}})
        return pl.concat(self._sums).group_by("g").agg(
            pl.col("gaps").sum(), pl.col("idle").sum(),
            *(pl.col(k).sum() for k in SUM_COLS))

    def instance_sums(self, name: str = "steps") -> pl.DataFrame:
        """(instance, gaps, idle, *SUM_COLS): the gaps whose middle lies in each bucket of
        the set `name` (a gap that straddles two buckets counts whole in one; with a device
        column, in a bucket of its device)."""
        schema = {"instance": pl.Int64, "gaps": pl.Int64, "idle": pl.Int64,
                  **{k: pl.Int64 for k in SUM_COLS}}
        if not self._inst.get(name):
            return _empty(schema)
        return (pl.concat(self._inst[name]).group_by("instance")
                .agg(pl.col("gaps").sum(), pl.col("idle").sum(),
                     *(pl.col(k).sum() for k in SUM_COLS)).cast(schema).sort("instance"))

    def nvtx(self) -> pl.DataFrame:
        """(g, type, value, t): idle time per NVTX range open on the launching thread."""
        if not self._nvtx:
            return _empty({"g": pl.Int64, "type": pl.Int64, "value": pl.Int64, "t": pl.Int64})
        return pl.concat(self._nvtx).group_by("g", "type", "value").agg(pl.col("t").sum())

    def best(self) -> pl.DataFrame:
        """The `top` longest gaps, longest first (ties: earlier first)."""
        return self._best if self._best is not None else _empty({})


class CauseSums:
    """Pass 2: for every gap with a host row, the time of each cause on that row during the
    gap, summed window by window, and the NVTX range at the gap's middle; each gap is folded
    into `fold` in the window where it ends (only gaps that cross a window's end are
    carried), so that memory grows with a window, not with the number of gaps."""

    def __init__(self, gaps: pl.DataFrame, top: int = 10,
                 buckets: Buckets = None, nvtx: bool = True) -> None:
        self.nvtx = nvtx  # False: no NVTX range is looked up (the gaps' ranges stay null)
        self.all_gaps = gaps
        self.gaps = gaps.filter(pl.col("host_row").is_not_null())
        self.rows = self.gaps["host_row"].unique()
        self.host_rows = self.rows.to_list()
        self._start = self.gaps["start"].to_numpy()
        self._end = self.gaps["end"].to_numpy()
        self._open = _empty({"qid": pl.Int64, **{k: pl.Int64 for k in CAUSE_KEYS}})
        self._open_nvtx = _empty({"qid": pl.Int64, "type": pl.Int64, "value": pl.Int64})
        self._done_until = -(2**63)  # gaps ending at or before this are folded
        self.stacks = NvtxStacks()
        self.fold = GapFold(top, buckets)

    def add(self, window: Trace) -> None:
        lo, hi = window.start, window.end
        inside = (self._start < hi) & (self._end > lo)
        mid = (self._start + self._end) // 2
        pieces = self.gaps.filter(pl.Series(inside)).select(
            pl.col("gid").alias("qid"), pl.col("host_row").alias("row"),
            pl.max_horizontal("start", pl.lit(lo)).alias("a"),
            pl.min_horizontal("end", pl.lit(hi)).alias("b"))
        if pieces.height:
            diff = cause_times(window, self.host_rows, pieces)
            self._open = (pl.concat([self._open, diff]).group_by("qid")
                          .agg(pl.all().sum()) if self._open.height else diff)
        if self.nvtx:
            in_window = (mid >= lo) & (mid < hi)
            queries = self.gaps.filter(pl.Series(in_window)).select(
                pl.col("gid").alias("qid"), pl.col("host_row").alias("row"),
                pl.Series("t", mid[in_window]))
            hits = self.stacks.add(window, self.rows, queries)
            if hits.height:
                self._open_nvtx = pl.concat([self._open_nvtx, hits])
        ended = (self._end > self._done_until) & (self._end <= hi)
        self._finish(self.gaps.filter(pl.Series(ended)))
        self._done_until = max(self._done_until, hi)

    def _finish(self, done: pl.DataFrame) -> None:
        """Fold gaps with a host row whose every window has been seen."""
        if not done.height:
            return
        table = _with_no_data(done.join(self._open, left_on="gid", right_on="qid", how="left")
                              .with_columns(pl.col(k).fill_null(0) for k in CAUSE_KEYS))
        table = table.join(self._open_nvtx, left_on="gid", right_on="qid", how="left")
        self.fold.add(table.select("gid", "g", "start", "end", "host_row", *SUM_COLS,
                                   "type", "value"))
        ids = done.select(pl.col("gid").alias("qid"))
        self._open = self._open.join(ids, on="qid", how="anti")
        self._open_nvtx = self._open_nvtx.join(ids, on="qid", how="anti")

    def result(self) -> GapFold:
        """The fold, with the gaps no window ended and those without a host row (all
        'unknown host') added."""
        self._finish(self.gaps.filter(pl.Series(self._end > self._done_until)))
        unknown = self.all_gaps.filter(pl.col("host_row").is_null())
        if unknown.height:
            self.fold.add(_unknown_host(unknown))
        return self.fold


class StreamedCauseSums(CauseSums):
    """`CauseSums` over the gaps pass 1 filed beside each window (`WindowSpill.add_gaps`)
    instead of all of them held: a window's pieces are its own gaps and the few that
    began before it (`WindowSpill.long_gaps`), folded in the window where they ended.
    Memory: a window's gaps."""

    def __init__(self, spill: "WindowSpill", keys: np.ndarray, top: int = 10,
                 buckets: Buckets = None, nvtx: bool = True) -> None:
        self.keys = keys
        long = np.concatenate(spill.long_gaps) if spill.long_gaps \
            else np.empty((0, 5), np.int64)
        super().__init__(self._frame(long), top, buckets, nvtx)
        self.spill = spill
        self.rows = pl.Series(sorted(spill.host_rows), dtype=pl.Int32)
        self.host_rows = self.rows.to_list()
        self._index = 0

    def _frame(self, a: np.ndarray) -> pl.DataFrame:
        """(gid, g, start, end, host_row) of [n, 5] gaps with their ids."""
        host = pl.Series("host_row", a[:, 4].astype(np.int32))
        return (pl.DataFrame({"gid": a[:, 0].astype(np.int64),
                              "g": self.keys[a[:, 1]].astype(np.int64),
                              "start": a[:, 2], "end": a[:, 3]})
                .with_columns(host.set(host < 0, None)))

    def add(self, window: Trace) -> None:
        part = self._frame(self.spill.gaps_of(self._index))
        self._index += 1
        long = self.all_gaps.filter((pl.col("start") < window.end)
                                    & (pl.col("end") > window.start)
                                    & pl.col("host_row").is_not_null())
        known = part.filter(pl.col("host_row").is_not_null())
        here = pl.concat([known, long.join(known.select("gid"), on="gid", how="anti")])
        self.gaps = here
        self._start = here["start"].to_numpy()
        self._end = here["end"].to_numpy()
        self._done_until = -(2**63)  # every gap of `here` is to be summed in this window
        super().add(window)
        unknown = part.filter(pl.col("host_row").is_null())
        if unknown.height:
            self.fold.add(_unknown_host(unknown))

    def _finish(self, done: pl.DataFrame) -> None:
        # the gaps that ended in this window are folded here (`add` calls this with those
        # of its pieces that end by its end, the gaps of later windows wait)
        ended = done.filter(pl.col("gid").is_in(self._ended_ids().implode()))
        super()._finish(ended)

    def _ended_ids(self) -> pl.Series:
        part = self.spill.gaps_of(self._index - 1) if self._index else \
            np.empty((0, 5), np.int64)
        return pl.Series(part[:, 0].astype(np.int64))

    def result(self) -> GapFold:
        return self.fold


def _with_no_data(gaps: pl.DataFrame) -> pl.DataFrame:
    """Gaps with a host row and their cause times: the time no cause explains (no state or
    call record on the row) is 'no data'; none of it is 'unknown host'."""
    explained = pl.sum_horizontal(*(pl.col(k) for k in CAUSE_KEYS if k != "no_data"))
    return gaps.with_columns((pl.col("end") - pl.col("start") - explained).alias("no_data"),
                             pl.lit(0, pl.Int64).alias(UNKNOWN_HOST))


def _unknown_host(gaps: pl.DataFrame) -> pl.DataFrame:
    """Gaps with no launch record at their end, as `GapFold.add` takes them: all their time
    is 'unknown host', in no NVTX range."""
    return gaps.select("gid", "g", "start", "end", "host_row",
                       *(pl.lit(0, pl.Int64).alias(k) for k in CAUSE_KEYS),
                       (pl.col("end") - pl.col("start")).alias(UNKNOWN_HOST),
                       pl.lit(None, pl.Int64).alias("type"),
                       pl.lit(None, pl.Int64).alias("value"))


class OnePassCauses:
    """The causes of the gaps on the first pass itself, when neither the NVTX range at a
    gap's middle nor the steps' sums are asked for (what a comparison of two runs reads):
    nothing is kept for a second pass. A gap that ends in a window is attributed there to
    its host row (the launch arrow at its end); the part of it before the window was summed,
    window by window while it was open, on every CPU row of its device's process (the host
    row is not known before the gap ends; a device has at most one gap open). The same
    cause times (`cause_times`) and fold (`GapFold`) as the second pass."""

    def __init__(self, finder: GapFinder, rows: pl.DataFrame, top: int = 10) -> None:
        self.finder = finder
        self.fold = GapFold(top)
        cpu = rows.filter(pl.col("kind") == "cpu")
        by_task = dict(cpu.group_by("task_index").agg(pl.col("row").sort()).iter_rows())
        # the CPU rows of each device group's process
        self._candidates = {gi: np.asarray(by_task.get(int(g) // 1_000_000, []), np.int32)
                            for gi, g in enumerate(finder.keys)}
        # per device with a gap open: (since, candidate rows, their cause times so far)
        self._open: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        self._ids = 0

    def add(self, window: Trace, ended: np.ndarray) -> None:
        """A window and the gaps that ended in it (`GapFinder.add`)."""
        lo, hi = window.start, window.end
        idle = self.finder.idle(hi)
        # pieces: ended gaps on their host row; the gaps still open on every candidate row
        host = ended[:, 3]
        known = host >= 0
        rows = [host[known].astype(np.int32)]
        a = [np.maximum(ended[known, 1], lo)]
        b = [ended[known, 2]]
        for gi, since in idle:
            cand = self._candidates[int(gi)]
            rows.append(cand)
            a.append(np.full(len(cand), max(since, lo), np.int64))
            b.append(np.full(len(cand), hi, np.int64))
        pieces = pl.DataFrame({"row": pl.Series(np.concatenate(rows), dtype=pl.Int32),
                               "a": np.concatenate(a), "b": np.concatenate(b)})
        pieces = pieces.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("qid"))
        times = np.zeros((pieces.height, len(CAUSE_KEYS)), np.int64)
        if pieces.height:
            walked = np.unique(pieces["row"].to_numpy()).tolist()
            times = cause_times(window, walked, pieces).select(CAUSE_KEYS).to_numpy()
        n = int(known.sum())
        done = times[:n].copy()
        attributed = ended[known]
        # the gaps that began before this window (one a device at most): their earlier part
        for i in np.flatnonzero(attributed[:, 1] < lo):
            gi, start, _, row = attributed[i]
            held = self._open.get(int(gi))
            if held is not None and held[0] == start:
                hit = np.flatnonzero(held[1] == row)
                if len(hit):
                    done[i] += held[2][hit[0]]
        self._fold(attributed, done)
        self._fold(ended[~known], None)
        at = n
        still: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        for gi, since in idle:
            cand = self._candidates[int(gi)]
            part = times[at:at + len(cand)]
            at += len(cand)
            held = self._open.get(int(gi))
            if held is not None and held[0] == since:
                part = part + held[2]
            still[int(gi)] = (int(since), cand, part)
        self._open = still

    def _fold(self, gaps: np.ndarray, times: np.ndarray | None) -> None:
        """Fold completed gaps with their causes (None: no host row, all unknown)."""
        if not len(gaps):
            return
        frame = _gap_frame(self.finder.keys, gaps).with_columns(
            pl.int_range(self._ids, self._ids + len(gaps), dtype=pl.Int64).alias("gid"))
        self._ids += len(gaps)
        if times is None:
            self.fold.add(_unknown_host(frame))
            return
        frame = _with_no_data(frame.with_columns(
            pl.Series(k, times[:, i]) for i, k in enumerate(CAUSE_KEYS)))
        self.fold.add(frame.select(
            "gid", "g", "start", "end", "host_row", *SUM_COLS,
            pl.lit(None, pl.Int64).alias("type"), pl.lit(None, pl.Int64).alias("value")))

    def result(self) -> GapFold:
        """The fold of every gap (a device idle at the end has no gap: nothing ran after)."""
        return self.fold


class WindowSpill:
    """Pass 2's input kept from pass 1: each window's events of `types` and its CPU rows'
    states, written to a temporary directory as they are read and given back as the same
    windows (filtered as pass 2 asks). Reading the trace again for pass 2 cost as much as
    pass 1's own reading (merging or scanning the whole text: 10 CPU-s on 10M activities);
    the spill is about a sixth of the text. It is not compressed: lz4 made it a third of
    that size for 2.8 CPU-s of the 10M benchmark's analysis, and a spill that finds no room
    is not an error (pass 2 reads the trace again). Memory: one window."""

    def __init__(self, types: frozenset[int]) -> None:
        import tempfile

        from ..supervise import register_temp

        self.types = types
        self._keep = list(types)
        self.dir = Path(tempfile.mkdtemp(prefix="nsys2prv-idle-"))
        register_temp(self.dir)
        self._windows: list[tuple[Trace, Path]] = []
        # the gaps found in each window (pass 1), filed beside it with an id each; those
        # that began in an earlier window (a device has at most one open at a time) held
        self._gap_ids = 0
        self.long_gaps: list[np.ndarray] = []  # [n, 5]: gid, g index, start, end, host row
        self.host_rows: set[int] = set()

    def add_gaps(self, found: np.ndarray) -> None:
        """The gaps that ended in the last window added ([n, 4]: g index, start, end, host
        row or -1, as `GapFinder.add` gives them)."""
        shell, base = self._windows[-1]
        n = len(found)
        gid = np.arange(self._gap_ids, self._gap_ids + n, dtype=np.int64)
        self._gap_ids += n
        if n:
            with_id = np.column_stack([gid, found]).astype(np.int64)
            np.save(base.with_suffix(".gaps.npy"), with_id)
            early = found[:, 1] < shell.start
            if early.any():
                self.long_gaps.append(with_id[early])
            self.host_rows.update(int(r) for r in np.unique(found[:, 3]) if r >= 0)

    def gaps_of(self, index: int) -> np.ndarray:
        """[n, 5] (gid, g index, start, end, host row) of the gaps that ended in window
        `index`."""
        path = self._windows[index][1].with_suffix(".gaps.npy")
        return np.load(path) if path.exists() else np.empty((0, 5), np.int64)

    def all_gaps(self, keys: np.ndarray) -> pl.DataFrame:
        """Every gap filed, as `GapFinder.gaps` gives them (gid, g, start, end, host_row, by
        start): for a reader that needs them all at once (`samples.GapCode`)."""
        parts = [self.gaps_of(i)[:, 1:] for i in range(len(self._windows))]
        found = np.concatenate(parts) if parts else np.empty((0, 4), np.int64)
        return _gap_frame(keys, found).sort("start", "g").with_row_index("gid") \
            .with_columns(pl.col("gid").cast(pl.Int64))

    def add(self, window: Trace) -> None:
        keep = window.events["type"].is_in(self._keep)
        base = self.dir / f"w{len(self._windows):06d}"
        window.events.filter(keep).write_ipc(base.with_suffix(".ev"), compression="uncompressed")
        window.states.write_ipc(base.with_suffix(".st"), compression="uncompressed")
        shell = replace(window, events=window.events.clear(), states=window.states.clear(),
                        comms=None, carried=int(keep.head(window.carried).sum()))
        self._windows.append((shell, base))

    def windows(self, types: Iterable[int], state_rows: Iterable[int]) -> Iterator[Trace]:
        """The windows again, with the events of `types` (a subset of the spill's) and the
        states of the rows `state_rows`, as `paraver.read.windows` would read them."""
        types = list(types)
        rows = pl.Series(list(state_rows), dtype=pl.Int32).implode()
        for shell, base in self._windows:
            events = pl.read_ipc(base.with_suffix(".ev"))
            keep = events["type"].is_in(types)
            states = pl.read_ipc(base.with_suffix(".st"))
            yield replace(shell, events=events.filter(keep),
                          states=states.filter(pl.col("row").is_in(rows)),
                          carried=int(keep.head(shell.carried).sum()))

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


# ------------------------------------------------------------------------- the report --


@dataclass
class GapFinding:
    """One gap: where (device, times in the trace's time base, ns), which host thread queued
    the work after it, and what that thread was doing (ns per cause)."""

    device: str
    task: int
    start: int
    end: int
    host_thread: str | None
    causes: dict[str, int]
    nvtx: str | None
    host_row: int | None = None
    gpu_rows: list[int] = field(default_factory=list)

    @property
    def duration(self) -> int:
        return self.end - self.start

    @property
    def main_cause(self) -> str:
        return max(self.causes.items(), key=lambda kv: kv[1])[0] if self.causes else \
            UNKNOWN_HOST


@dataclass
class IdleGroup:
    """Idle time between the first and the last activity of a device (or summed over a
    process, or the job) and its causes (ns)."""

    name: str
    task: int | None
    gaps: int
    idle: int
    span: int  # from the first activity's start to the last one's end
    causes: dict[str, int]
    nvtx: dict[str, int]  # idle time per NVTX range open on the host thread (top 5)


@dataclass
class IdleReport:
    devices: list[IdleGroup]
    processes: list[IdleGroup]
    job: IdleGroup
    top: list[GapFinding]
    launches: list[KernelLaunches]
    short_kernel_share: float | None  # of kernel time, in kernels shorter than their launch
    notes: list[str] = field(default_factory=list)
    # with steps given (`explain(buckets=...)`): per step, the gaps whose middle lies in it:
    # {"instance", "gaps", "idle", "causes": {cause: ns}}
    instances: list[dict] = field(default_factory=list)
    # with the layers' buckets (`explain(buckets={"layers": ...})`): the same per layer
    # instance (the gaps of its devices whose middle lies in its projected span)
    layer_instances: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _causes_of(row: dict) -> dict[str, int]:
    return {k: int(row[k]) for k in (*CAUSE_KEYS, UNKNOWN_HOST) if row.get(k)}


def _groups(sums: pl.DataFrame, ranges: pl.DataFrame, names: pl.DataFrame,
            spans: pl.DataFrame, key: str) -> list[IdleGroup]:
    """Per `key`: gap count, idle time, causes and the top NVTX ranges, from `sums` (key,
    gaps, idle, *SUM_COLS) and `ranges` (key, nvtx, t). `names` has (key, name, task_value),
    `spans` (key, span)."""
    top5 = (ranges.group_by(key, "nvtx").agg(pl.col("t").sum())
            .sort(key, "t", "nvtx", descending=[False, True, False])
            .group_by(key, maintain_order=True).head(5)
            .group_by(key, maintain_order=True).agg("nvtx", "t"))
    full = (names.join(sums, on=key, how="left").join(spans, on=key, how="left")
            .join(top5, on=key, how="left").sort(key))
    return [IdleGroup(r["name"], r["task_value"], int(r["gaps"] or 0), int(r["idle"] or 0),
                      int(r["span"] or 0), _causes_of(r),
                      dict(zip(r["nvtx"] or [], r["t"] or [])))
            for r in full.iter_rows(named=True)]


def build_report(fold: GapFold, spans: pl.DataFrame, device_names: pl.DataFrame,
                 row_labels: dict[int, str], gpu_rows_of: dict[int, list[int]],
                 nvtx_label: Callable[[int, int], str], launches: list[KernelLaunches],
                 top: int = 10) -> IdleReport:
    """The report from the folded gaps (pass 2). `spans` (g, first, last) bound each
    device's activity; `device_names` (g, name, task, process)."""
    sums = fold.sums()
    nv = fold.nvtx()
    labels = pl.DataFrame(
        [(t, v, nvtx_label(t, v)) for t, v in nv.select("type", "value").unique().iter_rows()],
        schema={"type": pl.Int64, "value": pl.Int64, "nvtx": pl.Utf8}, orient="row")
    nv = nv.join(labels, on=["type", "value"]).select("g", "nvtx", "t")
    spans = spans.join(device_names.select("g", "task"), on="g", how="inner").select(
        "g", "task", (pl.col("last") - pl.col("first")).alias("span"))
    tasks = device_names.select("g", "task")
    summed = [pl.col("gaps").sum(), pl.col("idle").sum(), *(pl.col(k).sum() for k in SUM_COLS)]
    devices = _groups(sums, nv, device_names.select("g", "name", pl.col("task")
                                                    .alias("task_value")), spans, "g")
    processes = _groups(
        sums.join(tasks, on="g", how="inner").group_by("task").agg(*summed),
        nv.join(tasks, on="g", how="inner").select("task", "nvtx", "t"),
        device_names.group_by("task").agg(pl.col("process").first().alias("name"))
        .with_columns(pl.col("task").alias("task_value")),
        spans.group_by("task").agg(pl.col("span").sum()), "task")
    whole = pl.lit(0, pl.Int32).alias("job")
    job = _groups(sums.select(whole, *summed), nv.select(whole, "nvtx", "t"),
                  pl.DataFrame({"job": [0], "name": ["job"], "task_value": [None]},
                               schema={"job": pl.Int32, "name": pl.Utf8,
                                       "task_value": pl.Int64}),
                  spans.select(whole, pl.col("span").sum()), "job")[0]
    best = fold.best()
    findings = []
    if best.height:
        best = best.join(device_names.select("g", "name", "task"), on="g", how="left",
                         maintain_order="left")
        for r in best.iter_rows(named=True):
            nvtx_name = nvtx_label(r["type"], r["value"]) if r["type"] is not None else None
            findings.append(GapFinding(
                r["name"], r["task"], r["start"], r["end"],
                row_labels.get(r["host_row"]) if r["host_row"] is not None else None,
                _causes_of(r), nvtx_name, r["host_row"], gpu_rows_of.get(r["g"], [])))
    kernel_time = sum(k.kernel_time for k in launches)
    short = sum(k.short_time for k in launches)
    return IdleReport(devices, processes, job, findings, launches,
                      short / kernel_time if kernel_time else None)


def explain(finder: GapFinder, launches: LaunchStats | None,
            source: Callable[..., Iterable[Trace]] | None, end: int, rows: pl.DataFrame,
            devices: pl.DataFrame, info: TraceInfo | None, top: int = 10,
            buckets: Buckets = None, nvtx: bool = True,
            fold: GapFold | None = None, spill: "WindowSpill | None" = None,
            code=None) -> IdleReport:
    """Pass 2 over `source` (windows with the host rows' states and `CAUSE_TYPES`) and the
    report; or, with the gaps already folded on the first pass (`OnePassCauses`), the
    report of `fold`. Names come from the trace's .pcf (`info`) when there is one. `buckets`
    (instance, start, end: the steps of the run) adds the idle time and causes of each
    step. Without `launches` (None) or `nvtx`, the report has no launch statistics or NVTX
    ranges (what a comparison of two runs leaves out: the causes are the same). `spill`:
    pass 1's windows and gaps, kept on disk (`WindowSpill`). `code`
    (`samples.GapCode`) sees the second pass too, its types read with the causes', once the
    gaps are known: the code the host ran during them."""
    if isinstance(info, Path):  # a .pcf (what the trace's companion files hold)
        from ..paraver.read import pcf_names

        values, type_labels = pcf_names(info)
    else:
        values = info.names if info is not None else {}
        type_labels = info.type_labels if info is not None else {}
    kernel_names = {**values.get(cuda.NCCL_KERNEL, {}), **values.get(cuda.CUDA_KERNEL, {})}
    launch_list = []
    if launches is not None:  # demangled names hold spaces: read whole
        full = values.get(cuda.KERNEL_FULL_NAME)
        launch_list = launches.result(end, kernel_names, full)
    if fold is None:
        # the gaps filed beside pass 1's windows (`spill`: `source` gives those windows
        # again), else all of them, held
        held = finder.gaps() if spill is None else None
        sums = StreamedCauseSums(spill, finder.keys, top, buckets, nvtx) \
            if spill is not None else CauseSums(held, top, buckets, nvtx)
        types = CAUSE_TYPES if nvtx else CAUSE_TYPES - frozenset(PUSHPOP)
        if code is not None:  # it sees every gap at once (its index of them)
            gaps = held if held is not None else spill.all_gaps(finder.keys)
            if gaps.height:
                code.begin(gaps, rows, end, bucket_sets(buckets).get("steps"))
                types = types | code.types
            else:
                code = None
        if sums.rows.len() or code is not None:
            for window in source(types=types, state_rows=sums.host_rows):
                sums.add(window)
                if code is not None:
                    code.add(window)
            if code is not None:
                code.finish()
        fold = sums.result()

    def nvtx_label(t: int, v: int) -> str:
        domain = type_labels.get(t, "").split(": ", 1)[-1] or str(t - nvtx.NVTX_PUSHPOP_BASE)
        name = values.get(t, {}).get(v, str(v))
        return name if domain in ("default domain", "default", "0") else f"{domain}: {name}"

    labels = dict(rows.select("row", "label").iter_rows())
    gpu = rows.filter(pl.col("kind") == "gpu").with_columns(
        (pl.col("task_index") * 1_000_000 + pl.col("device")).alias("g"))
    gpu_rows_of = {g: sorted(rs) for g, rs in gpu.group_by("g").agg(pl.col("row"))
                   .iter_rows()}
    report = build_report(fold, finder.spans(), devices, labels, gpu_rows_of, nvtx_label,
                          launch_list, top)
    report.notes = _notes(report, timed_launches=launches is not None)
    sets = bucket_sets(buckets)
    for name, attr in (("steps", "instances"), ("layers", "layer_instances")):
        if name in sets:
            setattr(report, attr, [{"instance": r["instance"], "gaps": r["gaps"],
                                    "idle": r["idle"], "causes": _causes_of(r)}
                                   for r in fold.instance_sums(name).iter_rows(named=True)])
    return report


def _notes(report: IdleReport, timed_launches: bool = True) -> list[str]:
    """What the data cannot tell, one line each."""
    notes = []
    job = report.job
    if job.gaps == 0:
        notes.append("no gap: every device ran something from its first to its last "
                     "activity")
    unknown = job.causes.get(UNKNOWN_HOST, 0)
    if unknown:
        notes.append(f"{unknown / 1e6:.3f} ms of idle time ends with work that has no launch "
                     "record (CUDA API not traced, or work launched before the capture): "
                     "its host cause is unknown")
    no_data = job.causes.get("no_data", 0)
    if no_data:
        notes.append(f"{no_data / 1e6:.3f} ms of idle time falls where the launching thread "
                     "has no record (not alive, or not traced)")
    if timed_launches and report.launches == [] and job.gaps:
        notes.append("no kernel launch could be timed (no launch arrows to kernels)")
    return notes
