"""Where in the code: the CPU samples and call stacks a trace holds, as profiles, and the
GPU's idle gaps traced to the code the host ran during them.

nsys samples every thread's instruction pointer with a call stack and keeps the call stack
of long OS runtime calls and (with --cudabacktrace) of CUDA calls; the translation writes
them as Extrae writes samples and callers (docs/samples.md): at a sample, on its thread's
row, the leaf function (type 30000000) and the caller at depth k (30000000+k); at the entry
of a call with a stack, the caller at level k (70000000+k). Values share one numbering,
labelled `FUNCTION (MODULE)`.

Two parts, on the passes every analysis shares (`passes.py`):

* `SampleCollector` sees the first pass: the samples of each window counted per (row,
  stack) - memory grows with the distinct stacks of each thread, not with the samples.
  Everything a profiler shows comes from that table (`profiles`): the threads' share
  (nsys' thread summary), self (leaf) and inclusive (anywhere on the stack, once per
  sample) counts by function and by module, job-wide, per process and per thread, the
  callers of the top functions, a top-down tree, folded stacks.
* `GapCode` sees the idle analysis' second pass (`idle.CauseSums`), once every gap and the
  thread that launched the work after it are known: the launching thread's samples inside
  the gaps (by function), the samples of every thread of the device's node inside them
  (what ran meanwhile), and the OS runtime and CUDA calls of the launching thread that
  overlap them, by call site (the API and its first callers) - one sweep of sorted times
  against each device's sorted gaps, never a join of intervals with intervals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from ..paraver.registry import cuda, osrt
from ..paraver.registry import sampling as reg
from .sums import GroupSums
from .timeline import Spans

if TYPE_CHECKING:
    from ..paraver.read import TraceInfo

SAMPLED = reg.SAMPLED_FUNCTION
MAX_DEPTH = reg.SAMPLED_FUNCTION_LEVELS  # 0..99: 30000100 is Extrae's source line, not ours
SAMPLE_TYPES = frozenset(range(SAMPLED, SAMPLED + MAX_DEPTH))
CALLER = reg.CALLER_BASE
CALLER_TYPES = frozenset(range(CALLER + 1, CALLER + reg.CALLER_LEVELS))
MARKERS = reg.SAMPLE_MARKERS
CALL_TYPES = (osrt.OSRT_CALL, cuda.CUDA_CALL)
SITE_CALLERS = 3  # a call site: the API and this many callers from its stack
LEAF_ONLY = "[no backtrace: leaf only]"  # the root of a folded stack of a leaf-only sample
PROFILER_MODULES = ("libToolsInjection",)  # nsys' own code, sampled like the program's

_STACKS = {"row": pl.Int32, "stack": pl.List(pl.Int64), "samples": pl.Int64}


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def split_label(label: str) -> tuple[str, str]:
    """(function, module) of a code location's label `FUNCTION (MODULE)`: the module is
    the text after the last ' (' (a module's name never holds one; a C++ function's may)."""
    if label.endswith(")") and " (" in label:
        function, _, module = label[:-1].rpartition(" (")
        return function, module
    return label, ""


# ------------------------------------------------------------------------ the samples --


def sample_stacks(events: pl.DataFrame) -> pl.DataFrame:
    """(row, time, stack) of the samples among a window's own events (row, time, type,
    value): every event of one sample shares its row and time; the stack lists the code
    location values from the leaf (depth 0) outwards."""
    ev = events.filter(pl.col("type").is_between(SAMPLED, SAMPLED + MAX_DEPTH - 1)
                       & (pl.col("value") != 0))
    if ev.height == 0:
        return _empty({"row": pl.Int32, "time": pl.Int64, "stack": pl.List(pl.Int64)})
    fast = _consecutive_stacks(ev)
    if fast is not None:
        return fast
    return (ev.sort("row", "time", "type")
            .group_by("row", "time", maintain_order=True)
            .agg(pl.col("value").alias("stack"))
            .with_columns(pl.col("row").cast(pl.Int32)))


def _consecutive_stacks(ev: pl.DataFrame) -> pl.DataFrame | None:
    """`sample_stacks` without a sort or a hash, where the trace wrote each sample on one
    line (its events consecutive, depth rising) and the samples in (time, row) order, as
    our writer does: the stacks cut at each change of (row, time), grouped on that sorted
    sample number. None where the events are not so laid out (the caller sorts)."""
    row = ev["row"].to_numpy()
    time = ev["time"].to_numpy()
    depth = ev["type"].to_numpy()
    new = np.ones(row.size, dtype=bool)
    new[1:] = (row[1:] != row[:-1]) | (time[1:] != time[:-1])
    inner = ~new[1:]
    if not np.all(depth[1:][inner] > depth[:-1][inner]):
        return None
    starts = np.flatnonzero(new)
    t0, r0 = time[starts], row[starts]
    if not np.all((t0[1:] > t0[:-1]) | ((t0[1:] == t0[:-1]) & (r0[1:] > r0[:-1]))):
        return None  # a (row, time) seen twice, or out of order
    sample = pl.Series("sample", np.cumsum(new) - 1).set_sorted()  # sorted: no hashing
    stacks = (pl.DataFrame([sample, ev["value"].cast(pl.Int64)])
              .group_by("sample", maintain_order=True).agg(pl.col("value").alias("stack")))
    return pl.DataFrame({"row": pl.Series(r0).cast(pl.Int32), "time": pl.Series(t0),
                         "stack": stacks["stack"]})


class StackCounts:
    """Samples counted per (keys..., stack), summed as they come (`sums.GroupSums`): memory
    follows the distinct stacks."""

    def __init__(self, keys: tuple[str, ...] = ("row",)) -> None:
        self.keys = keys
        self._sums = GroupSums((*keys, "stack"), (pl.col("samples").sum(),))

    def add(self, frame: pl.DataFrame) -> None:
        """`frame`: keys and stack (one line a sample), or with `samples` (counts)."""
        if frame.height == 0:
            return
        count = pl.col("samples").sum() if "samples" in frame.columns else \
            pl.len().cast(pl.Int64).alias("samples")
        self._sums.add(frame.group_by(*self.keys, "stack").agg(count))

    def result(self) -> pl.DataFrame:
        found = self._sums.result()
        if found is None:
            return _empty({**{k: pl.Int64 for k in self.keys}, "stack": pl.List(pl.Int64),
                           "samples": pl.Int64})
        return found


class SampleCollector:
    """The first pass's observer: every sample of the trace counted per (row, stack), and
    the marker frames the translation dropped (nsys' '[Max depth]', '[Broken
    backtraces]')."""

    types = SAMPLE_TYPES | {MARKERS}

    def __init__(self) -> None:
        self.counts = StackCounts(("row",))
        self.markers = 0
        self.rows: pl.DataFrame | None = None  # the trace's rows (from its first window)

    def add(self, window) -> None:
        if self.rows is None:
            self.rows = window.rows
        ev = window.events.slice(window.carried)  # the values carried in are no samples
        self.counts.add(sample_stacks(ev).select("row", "stack"))
        markers = ev.filter(pl.col("type") == MARKERS)
        if markers.height:
            self.markers += int(markers["value"].sum())


# ------------------------------------------------------------------ the GPU's gaps --


@dataclass
class _GapIndex:
    """Every gap of every device, sorted per device, for searches by time: a sample or a
    call is inside device g's gap i when gap_start[i] <= t < gap_end[i] (gaps of one device
    never overlap). Keys are g's index times the trace's end plus the time, so that one
    `searchsorted` answers for every device at once."""

    keys: np.ndarray  # sorted: gi * span + start
    ends: np.ndarray  # gi * span + end, in the same order
    host: np.ndarray  # host row of each gap (-1: none)
    cum: np.ndarray  # gap time before each gap, within its device
    g: np.ndarray  # device key of each device index
    span: int

    @classmethod
    def of(cls, gaps: pl.DataFrame, end: int) -> "_GapIndex":
        g = np.unique(gaps["g"].to_numpy()) if gaps.height else np.zeros(0, np.int64)
        gi = np.searchsorted(g, gaps["g"].to_numpy())
        span = int(end) + 1
        start, stop = gaps["start"].to_numpy(), gaps["end"].to_numpy()
        order = np.lexsort((start, gi))
        gi, start, stop = gi[order], start[order], stop[order]
        host = gaps["host_row"].fill_null(-1).to_numpy()[order]
        length = stop - start
        cum = np.cumsum(length) - length
        if len(gi):  # restart the running sum at each device
            first = np.r_[0, np.flatnonzero(np.diff(gi)) + 1]
            cum = cum - np.repeat(cum[first], np.diff(np.r_[first, len(gi)]))
        return cls(gi * span + start, gi * span + stop, host, cum, g, span)

    def inside(self, gi: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index of the gap of device gi holding time t, -1 where none."""
        key = gi * self.span + t
        i = np.searchsorted(self.keys, key, side="right") - 1
        ok = i >= 0
        ok[ok] = key[ok] < self.ends[i[ok]]
        return np.where(ok, i, -1)

    def covered(self, gi: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Gap time of device gi before time t (0 <= t <= the trace's end)."""
        key = gi * self.span + t
        i = np.searchsorted(self.keys, key, side="right") - 1
        base = gi * self.span
        ok = (i >= 0)
        ok[ok] = self.keys[i[ok]] >= base[ok]  # a gap of this device, not the previous one
        j = np.where(ok, i, 0)
        inside = np.minimum(key, self.ends[j]) - self.keys[j]
        return np.where(ok, self.cum[j] + np.maximum(inside, 0), 0)


class GapCode:
    """The second pass's observer of the idle analysis: with every gap known (`gaps`: gid,
    g, start, end, host_row), per device the launching thread's samples inside its gaps,
    the samples of the device's node inside them (per thread, and as stacks for a flame
    graph), and the overlap of the launching thread's OS runtime and CUDA calls with them,
    by call site. `rows` is the trace's row table (row, node, kind, ...); `end` its end."""

    types = SAMPLE_TYPES | CALLER_TYPES | frozenset(CALL_TYPES)

    def begin(self, gaps: pl.DataFrame, rows: pl.DataFrame, end: int,
              steps: pl.DataFrame | None = None) -> "GapCode":
        """Start the pass: every gap (gid, g, start, end, host_row), the trace's rows and
        end, the steps (instance, start, end) if any."""
        self.end = int(end)
        self.index = _GapIndex.of(gaps, end)
        self.idle = (gaps.group_by("g").agg((pl.col("end") - pl.col("start")).sum()
                                            .alias("idle"), pl.len().alias("gaps"))
                     if gaps.height else _empty({"g": pl.Int64, "idle": pl.Int64,
                                                 "gaps": pl.UInt32}))
        # the devices of each node: a sample is compared with the gaps of its node's devices
        node_of_task = dict(rows.select("task_index", "node").unique().iter_rows())
        dev = pl.DataFrame({"gi": np.arange(len(self.index.g), dtype=np.int64),
                            "g": self.index.g})
        dev = dev.with_columns((pl.col("g") // 1_000_000).alias("task_index"))
        dev = dev.with_columns(pl.col("task_index").replace_strict(
            node_of_task, default=-1, return_dtype=pl.Int64).alias("node"))
        self._node_devices = dev.select("node", "gi")
        self._row_node = rows.select(pl.col("row").cast(pl.Int32),
                                     pl.col("node").cast(pl.Int64))
        self.host_rows = sorted({int(r) for r in self.index.host[self.index.host >= 0]})
        self.in_gaps = StackCounts(("g", "row"))  # samples of the node inside device g's gaps
        self.launching = StackCounts(("g",))  # of them, the launching thread's
        self.steps = None if steps is None or steps.height == 0 else \
            steps.select("start", "end").sort("start")
        self.in_steps = StackCounts(("row",))
        self.in_layers = StackCounts(("layer",))
        spans = getattr(self, "layer_spans", None)
        self._layers = None
        if spans is not None and spans.height:
            # (row, start, end, layer) of the layers' instances on their CPU threads: those
            # of one row never overlap (the outermost of their level), so one search each
            sp = spans.sort("row", "start")
            span = self.end + 1
            self._layers = (sp["row"].to_numpy().astype(np.int64) * span
                            + sp["start"].to_numpy(),
                            sp["row"].to_numpy().astype(np.int64) * span
                            + np.minimum(sp["end"].to_numpy(), self.end),
                            sp["layer"], span)
        nrows = int(rows["row"].max()) + 1 if rows.height else 0
        self._spans = Spans([], [], list(CALL_TYPES), None, nrows)
        self._open_sites = _empty({"row": pl.Int32, "type": pl.Int64, "start": pl.Int64,
                                   "site": pl.List(pl.Int64)})
        self._calls = GroupSums(("g", "site"), (pl.col("time").sum(), pl.col("calls").sum()))
        # (row, gi): the devices each launching row launched work after a gap of
        self._hosts = (pl.DataFrame({"row": self.index.host,
                                     "gi": self.index.keys // self.index.span})
                       .filter(pl.col("row") >= 0).unique()
                       .with_columns(pl.col("row").cast(pl.Int32)))
        self._own: dict[int, _GapIndex] = {}
        return self

    # ---- samples

    def _samples(self, stacks: pl.DataFrame) -> None:
        if stacks.height == 0 or len(self.index.g) == 0:
            return
        pairs = (stacks.with_row_index("sid")
                 .join(self._row_node, on="row", how="left")
                 .join(self._node_devices, on="node", how="inner"))
        if pairs.height == 0:
            return
        gi = pairs["gi"].to_numpy()
        at = self.index.inside(gi, pairs["time"].to_numpy())
        hit = at >= 0
        if not hit.any():
            return
        found = pairs.filter(pl.Series(hit)).with_columns(
            pl.Series("g", self.index.g[gi[hit]]),
            pl.Series("host", self.index.host[at[hit]]).cast(pl.Int32))
        self.in_gaps.add(found.select("g", "row", "stack"))
        self.launching.add(found.filter(pl.col("row") == pl.col("host")).select("g", "stack"))

    def _step_samples(self, stacks: pl.DataFrame) -> None:
        if self.steps is None or stacks.height == 0:
            return
        starts = self.steps["start"].to_numpy()
        ends = self.steps["end"].to_numpy()
        t = stacks["time"].to_numpy()
        i = np.searchsorted(starts, t, side="right") - 1
        ok = i >= 0
        ok[ok] = t[ok] < ends[i[ok]]
        self.in_steps.add(stacks.filter(pl.Series(ok)).select("row", "stack"))

    def _layer_samples(self, stacks: pl.DataFrame) -> None:
        if self._layers is None or stacks.height == 0:
            return
        starts, ends, layer, span = self._layers
        key = stacks["row"].to_numpy().astype(np.int64) * span + stacks["time"].to_numpy()
        i = np.searchsorted(starts, key, side="right") - 1
        ok = i >= 0
        ok[ok] = key[ok] < ends[i[ok]]
        if ok.any():
            self.in_layers.add(stacks.filter(pl.Series(ok)).select(
                pl.Series("layer", layer.gather(i[ok])), "stack"))

    # ---- calls

    def _sites(self, ev: pl.DataFrame) -> pl.DataFrame:
        """(row, type, start, site) of the call entries among `ev` on the launching
        threads: site = [call type, API value, caller 1, ... caller SITE_CALLERS] (0: no
        caller at that level). A caller event belongs to the call entry written on the same
        line: the last entry before it in file order on its row."""
        entries = ev.filter(pl.col("type").is_in(CALL_TYPES) & (pl.col("value") != 0))
        callers = ev.filter(pl.col("type").is_between(CALLER + 1, CALLER + SITE_CALLERS)
                            & (pl.col("value") != 0))  # 0: a call's exit ends its callers
        if entries.height == 0:
            return _empty({"row": pl.Int32, "type": pl.Int64, "start": pl.Int64,
                           "site": pl.List(pl.Int64)})
        entries = entries.select("row", "type", pl.col("time").alias("start"), "value",
                                 "seq").sort("seq")
        levels = {k: pl.lit(0, pl.Int64).alias(f"c{k}") for k in range(1, SITE_CALLERS + 1)}
        if callers.height:
            owner = (callers.select("row", pl.col("seq").alias("cseq"),
                                    (pl.col("type") - CALLER).alias("level"), "value")
                     .sort("cseq")
                     .join_asof(entries.select("row", "seq"), left_on="cseq", right_on="seq",
                                by="row", strategy="backward", check_sortedness=False))
            wide = (owner.filter(pl.col("seq").is_not_null())
                    .pivot(on="level", index="seq", values="value", aggregate_function="first"))
            for k in range(1, SITE_CALLERS + 1):
                if str(k) in wide.columns:
                    levels[k] = pl.col(str(k)).fill_null(0).alias(f"c{k}")
            entries = entries.join(wide, on="seq", how="left")
        return entries.select(
            pl.col("row").cast(pl.Int32), "type", "start",
            pl.concat_list(pl.col("type"), pl.col("value"), *levels.values()).alias("site"))

    def _calls_of(self, ev: pl.DataFrame) -> None:
        """Pair the launching threads' call events of a window (a value enters a call, 0
        leaves the innermost: calls nest) and measure what the closed ones overlap."""
        self._open_sites = pl.concat([self._open_sites, self._sites(ev)])
        calls = ev.filter(pl.col("type").is_in(CALL_TYPES))
        _, closed = self._spans.add(calls.select("row", "time", "type", "value"))
        if len(closed):
            self._close(pl.DataFrame({"row": closed[:, 0].astype(np.int32),
                                      "type": closed[:, 1], "start": closed[:, 3],
                                      "dur": closed[:, 4]}))

    def _close(self, spans: pl.DataFrame) -> None:
        """Calls that ended: their overlap with the gaps their row launched after."""
        spans = spans.unique(["row", "type", "start", "dur"], maintain_order=True)
        sites = (self._open_sites.sort(pl.col("site").list.slice(2).list.sum() > 0)
                 .unique(["row", "type", "start"], keep="last"))  # the twin with a stack
        keyed = spans.join(sites, on=["row", "type", "start"], how="left")
        self._open_sites = self._open_sites.join(spans.select("row", "type", "start"),
                                                 on=["row", "type", "start"], how="anti")
        # one line per (call, device with a gap launched from the call's row)
        pairs = keyed.join(self._hosts, on="row", how="inner")
        if pairs.height == 0:
            return
        gi = pairs["gi"].to_numpy()
        s = pairs["start"].to_numpy()
        e = np.minimum(s + pairs["dur"].to_numpy(), self.end)
        # only the gaps this row launched after count: the device's gaps of other rows
        # are not this thread's to explain
        over = self._overlap_own(gi, pairs["row"].to_numpy(), s, e)
        self._calls.add(pairs.with_columns(pl.Series("g", self.index.g[gi]),
                                           pl.Series("time", over))
                        .filter(pl.col("time") > 0)
                        .group_by("g", "site").agg(pl.col("time").sum(),
                                                   pl.len().cast(pl.Int64).alias("calls")))

    def _overlap_own(self, gi: np.ndarray, row: np.ndarray, s: np.ndarray,
                     e: np.ndarray) -> np.ndarray:
        """Time of [s, e) inside gaps of device gi that row `row` launched after."""
        if gi.size == 0:
            return np.zeros(0, np.int64)
        out = np.zeros(gi.size, np.int64)
        for r in np.unique(row):
            idx = self._own.get(int(r))
            if idx is None:
                keep = self.index.host == r
                idx = _GapIndex(self.index.keys[keep], self.index.ends[keep],
                                self.index.host[keep], np.zeros(0), self.index.g,
                                self.index.span)
                length = idx.ends - idx.keys
                cum = np.cumsum(length) - length
                dev = idx.keys // idx.span
                if dev.size:
                    first = np.r_[0, np.flatnonzero(np.diff(dev)) + 1]
                    cum = cum - np.repeat(cum[first], np.diff(np.r_[first, dev.size]))
                idx.cum = cum
                self._own[int(r)] = idx
            sel = row == r
            out[sel] = idx.covered(gi[sel], e[sel]) - idx.covered(gi[sel], s[sel])
        return out

    def _call_sums(self) -> pl.DataFrame:
        found = self._calls.result()
        if found is None:
            return _empty({"g": pl.Int64, "site": pl.List(pl.Int64), "time": pl.Int64,
                           "calls": pl.Int64})
        return found

    # ---- the pass

    def add(self, window) -> None:
        ev = window.events.slice(window.carried)
        stacks = sample_stacks(ev)
        self._samples(stacks)
        self._step_samples(stacks)
        self._layer_samples(stacks)
        if self.host_rows:
            own = ev.filter(pl.col("row").is_in(self.host_rows)
                            & (pl.col("type").is_in(CALL_TYPES)
                               | pl.col("type").is_between(CALLER + 1,
                                                           CALLER + SITE_CALLERS)))
            self._calls_of(own)

    def finish(self) -> None:
        """Close the calls still open at the trace's end (they last to it)."""
        if self._open_sites.height:
            left = self._open_sites.unique(["row", "type", "start"], keep="last")
            self._close(left.select("row", "type", "start",
                                    (pl.lit(self.end) - pl.col("start")).alias("dur")))

    def calls(self) -> pl.DataFrame:
        """(g, site, time, calls): the launching threads' calls overlapping their gaps."""
        return self._call_sums()


class OnePassGapSamples:
    """The launching threads' samples inside the GPU's gaps on the first pass itself (what
    a comparison of two runs reads, `idle.OnePassCauses`'s way): a gap that ends in a
    window is attributed there to its host row; while it was open, the samples of every
    CPU row of its device's process were counted (the host row is not known before the gap
    ends; a device has at most one gap open), and the host row's are kept. Counts per
    (device g, leaf value)."""

    types = SAMPLE_TYPES

    def __init__(self, keys: np.ndarray, rows: pl.DataFrame) -> None:
        self.keys = keys  # device key of each device index (`GapFinder.keys`)
        cpu = rows.filter(pl.col("kind") == "cpu")
        self._task_rows = cpu.select(pl.col("row").cast(pl.Int32),
                                     pl.col("task_index").cast(pl.Int64).alias("task"))
        # per device index with a gap open: (since, (row, value, samples) counted so far)
        self._open: dict[int, tuple[int, pl.DataFrame]] = {}
        self._counts = GroupSums(("gi", "value"), (pl.col("samples").sum(),))

    def add(self, window, ended: np.ndarray, idle: np.ndarray) -> None:
        """A window, the gaps that ended in it [n, 4] (g index, start, end, host row or -1)
        and the devices idle at its end [m, 2] (g index, since)."""
        lo = window.start
        leaves = sample_stacks(window.events.slice(window.carried)).select(
            "row", "time", pl.col("stack").list.first().alias("value"))
        known = ended[ended[:, 3] >= 0]
        if len(known):
            gaps = pl.DataFrame({"gi": known[:, 0], "a": np.maximum(known[:, 1], lo),
                                 "b": known[:, 2], "row": known[:, 3].astype(np.int32),
                                 "start": known[:, 1]})
            parts = [self._inside(leaves, gaps)]
            for gi, start, _, row in known[known[:, 1] < lo]:
                held = self._open.get(int(gi))
                if held is not None and held[0] == start:
                    parts.append(held[1].filter(pl.col("row") == int(row)).select(
                        pl.lit(int(gi), pl.Int64).alias("gi"), "value", "samples"))
            self._counts.add(pl.concat([p.cast({"gi": pl.Int64}) for p in parts]))
        still: dict[int, tuple[int, pl.DataFrame]] = {}
        for gi, since in idle:
            task = int(self.keys[int(gi)]) // 1_000_000
            rows = self._task_rows.filter(pl.col("task") == task).select("row")
            part = (leaves.filter(pl.col("time") >= max(int(since), lo))
                    .join(rows, on="row", how="inner")
                    .group_by("row", "value").agg(pl.len().cast(pl.Int64).alias("samples")))
            held = self._open.get(int(gi))
            if held is not None and held[0] == since:
                part = pl.concat([held[1], part]).group_by("row", "value").agg(
                    pl.col("samples").sum())
            still[int(gi)] = (int(since), part)
        self._open = still

    @staticmethod
    def _inside(leaves: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
        """(gi, value, samples) of the samples inside gaps [a, b) on the gaps' host rows: one
        as-of sweep per device (a device's gaps never overlap), never samples x gaps."""
        on_rows = leaves.filter(pl.col("row").is_in(gaps["row"].unique().implode())) \
            .sort("time")
        out = [_empty({"gi": pl.Int64, "value": pl.Int64, "samples": pl.Int64})]
        if on_rows.height == 0:
            return out[0]
        for (gi,), dev in gaps.sort("a").group_by("gi", maintain_order=True):
            hit = (on_rows.join_asof(dev.select("a", "b", pl.col("row").alias("host")),
                                     left_on="time", right_on="a", strategy="backward")
                   .filter((pl.col("time") < pl.col("b")) & (pl.col("row") == pl.col("host"))))
            out.append(hit.group_by("value").agg(pl.len().cast(pl.Int64).alias("samples"))
                       .select(pl.lit(int(gi), pl.Int64).alias("gi"), "value", "samples"))
        return pl.concat(out)

    def _sums(self) -> pl.DataFrame:
        found = self._counts.result()
        if found is None:
            return _empty({"gi": pl.Int64, "value": pl.Int64, "samples": pl.Int64})
        return found

    def result(self) -> pl.DataFrame:
        """(g, value, samples): the launching threads' leaf functions inside the gaps."""
        s = self._sums()
        return s.select(pl.Series("g", self.keys[s["gi"].to_numpy()]).cast(pl.Int64)
                        if s.height else pl.lit(None, pl.Int64).alias("g"), "value", "samples")


# ------------------------------------------------------------------------ the tables --


@dataclass
class Samples:
    """Where in the code (docs/samples.md). Tables are polars frames; functions and modules
    as text, counts in samples, times in ns.

    threads: task, pid, tid, thread, samples, share (of the run's samples), with_stack
    self / inclusive: function, module, samples, share (job-wide); self_by_thread,
        inclusive_by_thread (task, pid, tid, thread, function, module, samples, share of
        the thread's); self_by_process (task, pid, process, function, module, samples)
    modules: module, self, inclusive (samples)
    callers: function, module (of a top self function), caller, caller_module, samples
    tree: the top-down tree of the samples with a stack: node, parent, depth, function,
        module, total, self (nodes below `TREE_MIN` of those samples folded away)
    folded: stack (root;...;leaf), samples - every sample, leaf-only ones under LEAF_ONLY
    quality: one row of counts (samples, with_stack, leaf_only, unresolved leaves,
        markers dropped, profiler samples)
    gaps: per device (and 'job'): idle, gaps, samples in gaps, launching samples
    gap_launching: device, function, module, samples, share (of the launching threads'
        samples inside the device's gaps)
    gap_running: device, task, pid, tid, thread, process, samples, share (of the node's
        samples inside the gaps)
    gap_blocking: device, api, kind (OS runtime/CUDA), cause, callers, time, calls, share
        (of the device's idle time)
    gap_folded: device, stack, samples (the node's samples inside the gaps)
    gap_code: per device the code behind its idle time, as `lines` say it (`gap_summary`)
    in_steps: function, module, samples, share (samples inside the steps, any thread)
    in_layers: layer, function, module, samples, share (of the layer's samples): the
        samples of the thread that ran each layer's NVTX range, while it was open
    notes: what the data cannot tell, one line each
    """

    threads: pl.DataFrame
    self_: pl.DataFrame
    inclusive: pl.DataFrame
    self_by_thread: pl.DataFrame
    inclusive_by_thread: pl.DataFrame
    self_by_process: pl.DataFrame
    modules: pl.DataFrame
    callers: pl.DataFrame
    tree: pl.DataFrame
    folded: pl.DataFrame
    quality: pl.DataFrame
    gaps: pl.DataFrame | None = None
    gap_launching: pl.DataFrame | None = None
    gap_running: pl.DataFrame | None = None
    gap_blocking: pl.DataFrame | None = None
    gap_folded: pl.DataFrame | None = None
    gap_code: pl.DataFrame | None = None
    in_steps: pl.DataFrame | None = None
    in_layers: pl.DataFrame | None = None
    lines: list[str] = field(default_factory=list)  # the GPU's waits named in the code
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.threads.height == 0

    def tables(self) -> dict[str, pl.DataFrame]:
        """Every non-empty table by name (`self_` as 'self')."""
        out = {}
        for name, value in vars(self).items():
            if isinstance(value, pl.DataFrame):
                out["self" if name == "self_" else name] = value
        return out

    def to_dict(self) -> dict:
        """What `analyze --json` carries under `samples`."""
        def rows(df: pl.DataFrame | None) -> list[dict]:
            return [] if df is None else df.to_dicts()

        gaps = None
        if self.gaps is not None:
            gaps = {"devices": rows(self.gaps),
                    "blocking": rows(self.gap_blocking),
                    "launching": rows(self.gap_launching),
                    "running": rows(self.gap_running), "code": rows(self.gap_code),
                    "lines": list(self.lines)}
        return {"threads": rows(self.threads),
                "self": rows(self.self_), "inclusive": rows(self.inclusive),
                "self_by_thread": rows(self.self_by_thread),
                "inclusive_by_thread": rows(self.inclusive_by_thread),
                "self_by_process": rows(self.self_by_process),
                "modules": rows(self.modules), "callers": rows(self.callers),
                "quality": rows(self.quality)[0] if self.quality.height else {},
                "in_steps": rows(self.in_steps), "in_layers": rows(self.in_layers),
                "gaps": gaps, "notes": list(self.notes)}


TOP_CALLERS = 10  # top self functions whose callers are listed
TREE_MIN = 0.005  # tree nodes holding less than this share of the samples with a stack


class Locations:
    """The text of code location values (`FUNCTION (MODULE)` labels of the .pcf)."""

    def __init__(self, labels: dict[int, str]) -> None:
        values = sorted(labels)
        parts = [split_label(labels[v]) for v in values]
        self.frame = pl.DataFrame({
            "value": pl.Series(values, dtype=pl.Int64),
            "function": [p[0] for p in parts], "module": [p[1] for p in parts]},
            schema={"value": pl.Int64, "function": pl.Utf8, "module": pl.Utf8})

    def name(self, df: pl.DataFrame, column: str = "value", prefix: str = "") -> pl.DataFrame:
        """`df` with `column`'s function and module (a value without label: its number)."""
        f = self.frame.rename({"value": column, "function": f"{prefix}function",
                               "module": f"{prefix}module"})
        out = df.join(f, on=column, how="left")
        return out.with_columns(
            pl.col(f"{prefix}function").fill_null(pl.col(column).cast(pl.Utf8)),
            pl.col(f"{prefix}module").fill_null(""))


def _threads(rows: pl.DataFrame) -> pl.DataFrame:
    """(row, task, pid, tid, thread, process) of the CPU rows, from their labels."""
    cpu = rows.filter(pl.col("kind") == "cpu")
    name = (pl.col("label").str.replace(r"^(?:rank|pid) -?\d+: ", "")
            .str.replace(r"\s*\(tid -?\d+\)$", ""))
    # a task is 'rank R NAME (pid P)' with a rank, else 'pid P NAME'
    process = pl.col("task_label").str.replace(r"\s*\(pid -?\d+\)$", "") \
        .str.replace(r"^pid -?\d+ ", "")
    pid = pl.coalesce(pl.col("task_label").str.extract(r"\(pid (-?\d+)\)$", 1),
                      pl.col("task_label").str.extract(r"^pid (-?\d+)\b", 1))
    return cpu.select(pl.col("row").cast(pl.Int32), (pl.col("task_index") + 1).alias("task"),
                      pid.cast(pl.Int64).alias("pid"),
                      pl.col("label").str.extract(r"\(tid (-?\d+)\)", 1)
                      .cast(pl.Int64).alias("tid"),
                      name.alias("thread"), process.alias("process"))


def _share(col: str, total: int) -> pl.Expr:
    return (pl.col(col) / total if total else pl.lit(None, pl.Float64)).alias("share")


def _self(counts: pl.DataFrame, by: Iterable[str] = ()) -> pl.DataFrame:
    """Samples per (by..., leaf value)."""
    return (counts.group_by(*by, pl.col("stack").list.first().alias("value"))
            .agg(pl.col("samples").sum()))


def _inclusive(counts: pl.DataFrame, by: Iterable[str] = ()) -> pl.DataFrame:
    """Samples per (by..., value anywhere on the stack), once per sample (recursion)."""
    by = list(by)
    return (counts.with_columns(pl.col("stack").list.unique().alias("value"))
            .explode("value").group_by(*by, "value").agg(pl.col("samples").sum()))


def _order(df: pl.DataFrame, *by: str) -> pl.DataFrame:
    """Largest first; ties by name, for a deterministic output; the counts last."""
    counts = [c for c in ("samples", "share") if c in df.columns]
    keys = [*by, "samples", "function", "module"]
    rest = [c for c in df.columns if c not in keys and c not in counts]  # the callers', ...
    return df.sort([*keys, *rest],
                   descending=[False] * len(by) + [True] + [False] * (2 + len(rest))).select(
        *(c for c in df.columns if c not in counts), *counts)


def _tree(counts: pl.DataFrame, loc: Locations, total: int) -> pl.DataFrame:
    """The top-down tree of the stacks (root first): node ids per (parent, value), depth by
    depth (one join per depth, never the prefixes of every stack at once)."""
    schema = {"node": pl.Int64, "parent": pl.Int64, "depth": pl.Int64, "value": pl.Int64,
              "total": pl.Int64, "self": pl.Int64}
    if counts.height == 0 or total == 0:
        return _empty({**schema, "function": pl.Utf8, "module": pl.Utf8})
    stacks = counts.select(pl.col("stack").list.reverse().alias("path"), "samples") \
        .with_columns(pl.col("path").list.len().alias("n")).with_row_index("sid") \
        .with_columns(pl.lit(-1, pl.Int64).alias("parent"))
    nodes = []
    next_id = 0
    depth = 0
    while stacks.height:
        here = stacks.with_columns(pl.col("path").list.get(depth).alias("value"))
        agg = (here.group_by("parent", "value")
               .agg(pl.col("samples").sum().alias("total"),
                    pl.col("samples").filter(pl.col("n") == depth + 1).sum().alias("self"))
               .sort("parent", "value")
               .with_row_index("node", offset=next_id)
               .with_columns(pl.col("node").cast(pl.Int64), pl.lit(depth, pl.Int64)
                             .alias("depth")))
        next_id += agg.height
        nodes.append(agg.select(*schema))
        stacks = (here.join(agg.select("parent", "value", "node"), on=["parent", "value"])
                  .filter(pl.col("n") > depth + 1)
                  .select("sid", "path", "samples", "n", pl.col("node").alias("parent")))
        depth += 1
    tree = pl.concat(nodes)
    keep = tree.filter(pl.col("total") >= max(1, TREE_MIN * total))
    keep = keep.filter(pl.col("parent").is_in(keep["node"].implode()) | (pl.col("parent") < 0))
    # a node whose parent was folded away cannot be kept either (totals shrink downwards)
    return loc.name(keep).sort("node").select("node", "parent", "depth", "function",
                                              "module", "total", "self")


def _folded(counts: pl.DataFrame, loc: Locations, leaf_only_root: bool = True
            ) -> pl.DataFrame:
    """(stack 'root;...;leaf', samples) of every distinct stack; a leaf-only sample's stack
    is `LEAF_ONLY;leaf` (a flame graph must not draw it as a root)."""
    if counts.height == 0:
        return _empty({"stack": pl.Utf8, "samples": pl.Int64})
    names = loc.frame.select("value", pl.col("function").str.replace_all(";", ":")
                             .alias("name"))
    ex = (counts.select("stack", "samples").with_row_index("sid")
          .with_columns(pl.col("stack").list.reverse())
          .explode("stack").rename({"stack": "value"})
          .join(names, on="value", how="left", maintain_order="left")
          .with_columns(pl.col("name").fill_null(pl.col("value").cast(pl.Utf8))))
    text = ex.group_by("sid", maintain_order=True).agg(
        pl.col("name").str.join(";").alias("stack"), pl.col("samples").first(),
        pl.len().alias("n"))
    if leaf_only_root:
        text = text.with_columns(pl.when(pl.col("n") == 1)
                                 .then(pl.lit(LEAF_ONLY + ";") + pl.col("stack"))
                                 .otherwise(pl.col("stack")).alias("stack"))
    if "root" in counts.columns:  # a root frame of its own: the process, say
        roots = counts.select(pl.col("root").str.replace_all(";", ":")).with_row_index("sid")
        text = text.join(roots, on="sid", how="left").with_columns(
            (pl.col("root") + pl.lit(";") + pl.col("stack")).alias("stack"))
    return (text.group_by("stack").agg(pl.col("samples").sum())
            .sort("samples", "stack", descending=[True, False]))


def profiles(counts: pl.DataFrame, rows: pl.DataFrame, labels: dict[int, str],
             markers: int = 0) -> Samples:
    """Every profile of the samples counted per (row, stack) (`SampleCollector`)."""
    loc = Locations(labels)
    threads = _threads(rows)
    counts = counts.with_columns(pl.col("row").cast(pl.Int32))
    total = int(counts["samples"].sum()) if counts.height else 0
    stacked = counts.filter(pl.col("stack").list.len() > 1)
    with_stack = int(stacked["samples"].sum()) if stacked.height else 0

    per_row = counts.group_by("row").agg(
        pl.col("samples").sum(),
        pl.col("samples").filter(pl.col("stack").list.len() > 1).sum().alias("with_stack"))
    thread_table = (threads.join(per_row, on="row", how="inner")
                    .with_columns(_share("samples", total))
                    .sort(["samples", "task", "tid"], descending=[True, False, False])
                    .select("task", "pid", "tid", "thread", "process", "samples", "share",
                            "with_stack"))

    def named(df: pl.DataFrame) -> pl.DataFrame:
        return loc.name(df).drop("value")

    self_job = _order(named(_self(counts)).with_columns(_share("samples", total)))
    incl_job = _order(named(_inclusive(counts)).with_columns(_share("samples", total)))
    by_row = counts.join(threads.select("row", "task", "pid", "tid", "thread"), on="row",
                         how="left")
    thread_total = pl.col("samples").sum().over("row")
    self_thread = _order(named(_self(by_row, ["row"])).with_columns(
        (pl.col("samples") / thread_total).alias("share")), "row")
    incl_thread = named(_inclusive(by_row, ["row"]))
    per_row_total = per_row.select("row", pl.col("samples").alias("_t"))
    incl_thread = _order(incl_thread.join(per_row_total, on="row").with_columns(
        (pl.col("samples") / pl.col("_t")).alias("share")).drop("_t"), "row")
    ids = threads.select("row", "task", "pid", "tid", "thread")
    self_thread = ids.join(self_thread, on="row", how="inner").drop("row")
    incl_thread = ids.join(incl_thread, on="row", how="inner").drop("row")
    self_thread = _order(self_thread, "task", "tid")
    incl_thread = _order(incl_thread, "task", "tid")
    by_task = counts.join(threads.select("row", "task", "pid", "process"), on="row",
                          how="left")
    self_proc = _order(named(_self(by_task, ["task", "pid", "process"])), "task")

    mods_self = self_job.group_by("module").agg(pl.col("samples").sum().alias("self"))
    mods_incl = (counts.with_columns(pl.col("stack").list.unique().alias("value"))
                 .explode("value").join(loc.frame.select("value", "module"), on="value",
                                        how="left")
                 .with_columns(pl.col("module").fill_null(""))
                 .group_by("stack", "row", "module").agg(pl.col("samples").first())
                 .group_by("module").agg(pl.col("samples").sum().alias("inclusive")))
    modules = (mods_incl.join(mods_self, on="module", how="left")
               .with_columns(pl.col("self").fill_null(0))
               .select("module", "self", "inclusive")
               .sort(["self", "inclusive", "module"], descending=[True, True, False]))

    top = _self(counts).sort(["samples", "value"], descending=[True, False]).head(TOP_CALLERS)
    callers = (stacked.filter(pl.col("stack").list.first().is_in(top["value"].implode()))
               .group_by(pl.col("stack").list.first().alias("value"),
                         pl.col("stack").list.get(1).alias("caller"))
               .agg(pl.col("samples").sum()))
    callers = loc.name(loc.name(callers), "caller", "caller_").drop("value", "caller")
    callers = _order(callers.select("function", "module", "caller_function",
                                    "caller_module", "samples"))

    profiler = 0
    if counts.height:
        prof_values = loc.frame.filter(pl.any_horizontal(
            pl.col("module").str.starts_with(m) for m in PROFILER_MODULES))["value"]
        if prof_values.len():
            hit = (counts.with_row_index("_i").explode("stack")
                   .filter(pl.col("stack").is_in(prof_values.implode()))
                   .unique("_i"))
            profiler = int(hit["samples"].sum())
    unresolved = int(self_job.filter(pl.col("function").str.starts_with("0x"))["samples"]
                     .sum()) if self_job.height else 0
    quality = pl.DataFrame([{"samples": total, "with_stack": with_stack,
                             "leaf_only": total - with_stack,
                             "unresolved_leaves": unresolved, "markers_dropped": markers,
                             "profiler": profiler}])
    notes = _quality_notes(total, with_stack, unresolved, markers, profiler)
    return Samples(thread_table, self_job, incl_job, self_thread, incl_thread, self_proc,
                   modules, callers, _tree(stacked, loc, with_stack),
                   _folded(counts, loc), quality, notes=notes)


UNRESOLVED = "[unresolved]"


def collapse_unresolved(df: pl.DataFrame, by: Iterable[str] = ()) -> pl.DataFrame:
    """A profile (by..., function, module, samples[, share]) with the unresolved frames of
    each module (their function is an address) summed as one '[unresolved]' function (nsys'
    "Collapse unresolved lines"), largest first."""
    by = list(by)
    f = pl.when(pl.col("function").str.contains(r"^0x[0-9a-fA-F]+$")).then(pl.lit(UNRESOLVED))\
        .otherwise(pl.col("function")).alias("function")
    sums = [pl.col("samples").sum()] + ([pl.col("share").sum()] if "share" in df.columns
                                         else [])
    return _order(df.with_columns(f).group_by(*by, "function", "module").agg(*sums), *by)


def _quality_notes(total: int, with_stack: int, unresolved: int, markers: int,
                   profiler: int) -> list[str]:
    if total == 0:
        return ["no CPU sample in the trace (nsys profile --sample=process-tree, the default "
                "where the system allows it; --backtrace=dwarf|lbr|fp for call stacks)"]
    notes = []
    leaf_only = total - with_stack
    if leaf_only:
        notes.append(f"{leaf_only} of {total} samples ({leaf_only / total:.0%}) have their "
                     "leaf function only (nsys keeps a backtrace for one sample in "
                     "--samples-per-backtrace, 4 with DWARF unwinding): they count in the "
                     "self profiles; callers, the tree and inclusive counts of callers come "
                     "from the samples with a stack")
    if unresolved:
        notes.append(f"{unresolved / total:.0%} of the samples' leaves are unresolved "
                     "(an address: no symbols for its module)")
    if markers:
        notes.append(f"{markers} frames that name no code ('[Max depth]', '[Broken "
                     "backtraces]', address 0) were dropped from the stacks, which end there")
    if profiler:
        notes.append(f"{profiler / total:.1%} of the samples are in nsys' own code "
                     "(libToolsInjection*)")
    return notes


# -------------------------------------------------------------------------- the waits --


def add_gaps(s: Samples, code: GapCode, rows: pl.DataFrame, labels: dict[int, str],
             call_labels: dict[int, dict[int, str]], device_names: pl.DataFrame,
             causes: dict[int, dict[str, int]] | None = None) -> None:
    """The GPU's waits traced to the code (`GapCode`'s sums) added to `s`: per device and
    for the job, the launching threads' functions, what ran meanwhile, the call sites that
    blocked, their folded stacks, and one line per device naming the code. `device_names`
    is (g, name); `causes` the idle analysis' time per cause of each device (g)."""
    loc = Locations(labels)
    threads = _threads(rows)
    names = dict(device_names.select("g", "name").iter_rows())
    job = "job"

    def per_device(df: pl.DataFrame) -> pl.DataFrame:
        """`df` per device name and summed for the job (when there are several devices)."""
        named_ = df.with_columns(pl.col("g").replace_strict(names, default=None,
                                                            return_dtype=pl.Utf8)
                                 .fill_null(pl.col("g").cast(pl.Utf8)).alias("device"))
        if df.select("g").n_unique() > 1:
            keys = [c for c in df.columns if c not in ("g", "samples", "time", "calls",
                                                       "idle", "gaps")]
            sums = [pl.col(c).sum() for c in ("samples", "time", "calls", "idle", "gaps")
                    if c in df.columns]
            whole = (df.group_by(keys).agg(*sums) if keys else df.select(*sums)).with_columns(
                pl.lit(-1, pl.Int64).alias("g"), pl.lit(job).alias("device"))
            named_ = pl.concat([named_, whole.select(named_.columns)])
        return named_

    launching = code.launching.result()
    in_gaps = code.in_gaps.result()
    calls = code.calls()
    idle = per_device(code.idle.with_columns(pl.col("idle").cast(pl.Int64),
                                             pl.col("gaps").cast(pl.Int64)))
    # launching threads: self per device
    launch_self = per_device(_self(launching, ["g"]))
    launch_self = loc.name(launch_self).drop("value")
    launch_self = launch_self.with_columns(
        (pl.col("samples") / pl.col("samples").sum().over("device")).alias("share"))
    launch_self = _order(launch_self.with_columns((pl.col("g") < 0).alias("_job")), "_job",
                         "g").select("device", "function", "module", "samples", "share")
    # what ran meanwhile: per thread
    running = in_gaps.group_by("g", "row").agg(pl.col("samples").sum())
    running = per_device(running).join(threads, on="row", how="left")
    running = running.with_columns(
        (pl.col("samples") / pl.col("samples").sum().over("device")).alias("share"))
    running = running.sort([pl.col("g") < 0, "g", "samples", "task", "tid"],
                           descending=[False, False, True, False, False]).select(
        "device", "task", "pid", "tid", "thread", "process", "samples", "share")
    # blocking call sites
    blocking = _sites(per_device(calls), call_labels, loc)
    idle_of = dict(idle.select("device", "idle").iter_rows())
    blocking = blocking.with_columns(
        (pl.col("time") / pl.col("device").replace_strict(idle_of, default=None,
                                                          return_dtype=pl.Int64))
        .alias("share"))
    # the node's samples inside the gaps, as stacks under their process (which process ran
    # while the GPU waited shows as the widest roots)
    procs = threads.select("row", (pl.col("process") + " (pid " + pl.col("pid").cast(pl.Utf8)
                                   + ")").alias("root"))
    rooted = in_gaps.join(procs, on="row", how="left").with_columns(
        pl.col("root").fill_null("(no process)"))
    folded = []
    for g, part in rooted.sort("g").group_by("g", maintain_order=True):
        f = _folded(part.select("stack", "samples", "root"), loc)
        folded.append(f.with_columns(pl.lit(names.get(g[0], str(g[0]))).alias("device")))
    if in_gaps.select("g").n_unique() > 1:
        folded.append(_folded(rooted.select("stack", "samples", "root"), loc)
                      .with_columns(pl.lit(job).alias("device")))
    gap_folded = pl.concat(folded).select("device", "stack", "samples") if folded else \
        _empty({"device": pl.Utf8, "stack": pl.Utf8, "samples": pl.Int64})
    summary = idle.join(
        per_device(in_gaps.group_by("g").agg(pl.col("samples").sum())).select(
            "device", pl.col("samples").alias("samples_in_gaps")), on="device", how="left"
    ).join(per_device(launching.group_by("g").agg(pl.col("samples").sum())).select(
        "device", pl.col("samples").alias("launching_samples")), on="device", how="left"
    ).with_columns(pl.col("samples_in_gaps").fill_null(0),
                   pl.col("launching_samples").fill_null(0)).sort(pl.col("g") < 0, "g").select(
        "device", "gaps", "idle", "samples_in_gaps", "launching_samples")
    s.gaps = summary
    s.gap_launching = launch_self
    s.gap_running = running
    s.gap_blocking = blocking
    s.gap_folded = gap_folded
    steps = code.in_steps.result()
    if code.steps is not None:
        total = int(steps["samples"].sum()) if steps.height else 0
        s.in_steps = _order(loc.name(_self(steps)).drop("value")
                            .with_columns(_share("samples", total)))
    lay = code.in_layers.result()
    if code._layers is not None:
        named_ = loc.name(_self(lay, ["layer"])).drop("value")
        s.in_layers = _order(named_.with_columns(
            (pl.col("samples") / pl.col("samples").sum().over("layer")).alias("share")),
            "layer")
    s.gap_code = gap_summary(s, causes or {}, names)
    s.lines = wait_lines(s.gap_code)


def _sites(calls: pl.DataFrame, call_labels: dict[int, dict[int, str]],
           loc: Locations) -> pl.DataFrame:
    """(device, api, kind, cause, callers, time, calls) of the call sites."""
    schema = {"device": pl.Utf8, "api": pl.Utf8, "kind": pl.Utf8, "cause": pl.Utf8,
              "callers": pl.Utf8, "time": pl.Int64, "calls": pl.Int64}
    if calls.height == 0:
        return _empty(schema)
    parts = calls.with_columns(
        pl.col("site").list.get(0).alias("ctype"), pl.col("site").list.get(1).alias("api_v"),
        *(pl.col("site").list.get(1 + k).alias(f"c{k}") for k in range(1, SITE_CALLERS + 1)))
    api_rows = parts.select("ctype", "api_v").unique()
    api_text = [call_labels.get(t, {}).get(v, str(v)) for t, v in api_rows.iter_rows()]
    api_rows = api_rows.with_columns(pl.Series("api", api_text, dtype=pl.Utf8))
    parts = parts.join(api_rows, on=["ctype", "api_v"], how="left")
    fn = loc.frame.select("value", "function")
    for k in range(1, SITE_CALLERS + 1):
        parts = parts.join(fn.rename({"value": f"c{k}", "function": f"f{k}"}), on=f"c{k}",
                           how="left").with_columns(
            pl.when(pl.col(f"c{k}") == 0).then(None)
            .otherwise(pl.col(f"f{k}").fill_null(pl.col(f"c{k}").cast(pl.Utf8)))
            .alias(f"f{k}"))
    callers = pl.concat_str([pl.col(f"f{k}") for k in range(1, SITE_CALLERS + 1)],
                            separator=" < ", ignore_nulls=True)
    kinds = pl.when(pl.col("ctype") == osrt.OSRT_CALL).then(pl.lit("OS runtime")) \
        .otherwise(pl.lit("CUDA"))
    api_cause = {a: _call_cause(t, a) for t, a in
                 parts.select("ctype", "api").unique().iter_rows()}
    out = parts.with_columns(callers.alias("callers"), kinds.alias("kind"),
                             pl.col("api").replace_strict(api_cause, default="osrt_other",
                                                          return_dtype=pl.Utf8)
                             .alias("cause"))
    return (out.sort([pl.col("g") < 0, "g", "time", "api", "callers"],
                     descending=[False, False, True, False, False])
            .select(*schema).cast(schema))


def _call_cause(call_type: int, api: str) -> str:
    """The idle analysis' cause of a thread inside a call of `api` (its state's cause)."""
    from ..paraver.kinds.cuda_api import call_state as cuda_state
    from ..paraver.kinds.osrt import call_state as osrt_state
    from .idle import _CUDA_STATE_CAUSES, _OSRT_STATE_CAUSES

    if call_type == osrt.OSRT_CALL:
        return _OSRT_STATE_CAUSES.get(osrt_state(api), "osrt_other")
    return _CUDA_STATE_CAUSES.get(cuda_state(api), "cuda_other")


_WAITS = ("cuda_sync", "cuda_memcpy", "io", "wait", "sleep")  # a thread blocked in these
_UNKNOWN_WORDS = "work with no launch record after the gap (host unknown)"
_BLOCKING_CAUSES = ("cuda_sync", "cuda_memcpy", "cuda_alloc", "cuda_launch", "cuda_other",
                    "io", "wait", "sleep", "osrt_other")


def gap_summary(s: Samples, causes: dict[int, dict[str, int]],
                names: dict[int, str]) -> pl.DataFrame:
    """Per device (and the job): the code behind its idle time, what `lines` and the page's
    findings say. device, idle (ns), cause (the idle analysis' main cause), code (the call
    site that blocked the launching thread most in that cause: 'sem_timedwait from
    PyThread_acquire_lock_timed < ...'; or, computing, its top functions; else the cause in
    words), verb ('blocked in', 'was in', 'computed:', ''), code_share (of the idle time the
    call site overlapped, or of the launching thread's samples its top function holds),
    others (the node's other processes that ran meanwhile, top three: 'pid P (44%), ...'),
    others_share (their share of the node's samples inside the gaps), others_n."""
    from .idle import CAUSE_LABELS

    rows = []
    for r in s.gaps.iter_rows(named=True):
        device, idle_t = r["device"], r["idle"]
        if not idle_t:
            continue
        g = next((k for k, v in names.items() if v == device), None)
        dev_causes = causes.get(g, {}) if g is not None else \
            {k: sum(c.get(k, 0) for c in causes.values()) for k in
             {k for c in causes.values() for k in c}}
        main = max(dev_causes.items(), key=lambda kv: (kv[1], kv[0]))[0] if dev_causes \
            else None
        sites = s.gap_blocking.filter(pl.col("device") == device)
        launching = s.gap_launching.filter(pl.col("device") == device)
        code, verb, share = CAUSE_LABELS.get(main, _UNKNOWN_WORDS) if main else "", "", None
        if main in _BLOCKING_CAUSES and sites.height:
            mine = sites.filter(pl.col("cause") == main)
            top = (mine if mine.height else sites).row(0, named=True)
            code = top["api"] + (f" from {top['callers']}" if top["callers"] else
                                 " (no call stack recorded for it)")
            verb = "blocked in" if top["cause"] in _WAITS else "was in"
            share = top["time"] / idle_t
        elif main == "host_compute" and launching.height:
            top3 = launching.head(3)
            code = ", ".join(f"{f} ({x:.0%})" for f, x in
                             top3.select("function", "share").iter_rows())
            verb, share = "computed:", float(top3["share"][0])
        run = s.gap_running.filter(pl.col("device") == device)
        total = int(run["samples"].sum()) if run.height else 0
        others, others_share, others_n = "", None, 0
        if total:
            own = {int(g) // 1_000_000 + 1} if g is not None and g >= 0 else set()
            by_proc = (run.filter(~pl.col("task").is_in(list(own)))
                       .group_by("task", "pid", "process").agg(pl.col("samples").sum())
                       .sort(["samples", "task"], descending=[True, False]))
            if by_proc.height:
                others = ", ".join(f"pid {p} ({n / total:.0%})" for p, n in
                                   by_proc.head(3).select("pid", "samples").iter_rows())
                others_share = int(by_proc["samples"].sum()) / total
                others_n = by_proc.height
        rows.append({"device": device, "idle": idle_t, "cause": main, "code": code,
                     "verb": verb, "code_share": share, "others": others,
                     "others_share": others_share, "others_n": others_n,
                     "samples_in_gaps": total})
    schema = {"device": pl.Utf8, "idle": pl.Int64, "cause": pl.Utf8, "code": pl.Utf8,
              "verb": pl.Utf8, "code_share": pl.Float64, "others": pl.Utf8,
              "others_share": pl.Float64, "others_n": pl.Int64, "samples_in_gaps": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def wait_lines(summary: pl.DataFrame) -> list[str]:
    """One line per device (and the job) naming the code behind its idle time: the call
    site that blocked the launching thread most, or its functions when it computed, and
    what the node's other processes ran meanwhile (`gap_summary`)."""
    out = []
    for r in summary.iter_rows(named=True):
        parts = [f"{r['device']}: GPU idle {r['idle'] / 1e6:.2f} ms"]
        if r["verb"] in ("blocked in", "was in"):
            parts.append(f"the launching thread {r['verb']} {r['code']} "
                         f"({r['code_share']:.0%} of the idle time)")
        elif r["verb"] == "computed:":
            parts.append(f"the launching thread computed: {r['code']} of its samples in the "
                         "gaps")
        elif r["code"]:
            parts.append(f"mostly {r['code']}")
        if r["others_n"]:
            n = r["others_n"]
            parts.append(f"meanwhile {n} other process{'es' if n != 1 else ''} ran "
                         f"{r['others_share']:.0%} of the {r['samples_in_gaps']} samples "
                         f"taken in the gaps: {r['others']}")
        out.append("; ".join(parts))
    return out


def read_labels(pcf: "Path | TraceInfo | None"
                ) -> tuple[dict[int, str], dict[int, dict[int, str]]]:
    """The code locations' labels and the call APIs' (OS runtime, CUDA) labels of a trace's
    .pcf (its path, or the names an opened trace read from it)."""
    from ..paraver.check import parse_pcf
    from ..paraver.read import TraceInfo

    if isinstance(pcf, TraceInfo):
        values = pcf.names
    elif pcf is None or not Path(pcf).exists():
        return {}, {}
    else:
        values = parse_pcf(Path(pcf).read_text(errors="replace"))[0]
    labels: dict[int, str] = {}
    for t in (*range(SAMPLED, SAMPLED + MAX_DEPTH), *range(CALLER + 1, CALLER + MAX_DEPTH)):
        labels.update(values.get(t, {}))
    labels.pop(0, None)
    return labels, {t: values.get(t, {}) for t in CALL_TYPES}


def has_samples(types: Iterable[int]) -> bool:
    """Whether a trace whose .pcf lists `types` holds CPU samples."""
    return SAMPLED in set(types)


def flame(folded: pl.DataFrame, min_share: float = 0.002) -> pl.DataFrame:
    """The rectangles of a flame graph of folded stacks (stack 'root;...;leaf', samples):
    (depth, start, width, name, samples), start and width in samples from the left, siblings
    in name order under their parent (FlameGraph's layout); frames narrower than
    `min_share` of the total are left out, with what they hold. Built depth by depth (one
    group-by each), never stack by stack."""
    schema = {"depth": pl.Int64, "start": pl.Int64, "width": pl.Int64, "name": pl.Utf8,
              "samples": pl.Int64}
    if folded.height == 0:
        return _empty(schema)
    total = int(folded["samples"].sum())
    paths = folded.select(pl.col("stack").str.split(";").alias("path"), "samples") \
        .with_columns(pl.col("path").list.len().alias("n"),
                      pl.lit(-1, pl.Int64).alias("parent"))
    parent_x = pl.DataFrame({"parent": [-1], "x": [0]}, schema={"parent": pl.Int64,
                                                               "x": pl.Int64})
    out = []
    next_id, depth = 0, 0
    floor = max(1, int(min_share * total))
    while paths.height:
        here = paths.with_columns(pl.col("path").list.get(depth).alias("name"))
        nodes = (here.group_by("parent", "name").agg(pl.col("samples").sum().alias("width"))
                 .filter(pl.col("width") >= floor)
                 .sort("parent", "name")
                 .with_row_index("node", offset=next_id)
                 .with_columns(pl.col("node").cast(pl.Int64))
                 .join(parent_x, on="parent", how="inner")
                 .with_columns((pl.col("x") + pl.col("width").cum_sum().over("parent")
                                - pl.col("width")).alias("start")))
        if nodes.height == 0:
            break
        next_id += nodes.height
        out.append(nodes.select(pl.lit(depth, pl.Int64).alias("depth"), "start", "width",
                                "name", pl.col("width").alias("samples")))
        parent_x = nodes.select(pl.col("node").alias("parent"), pl.col("start").alias("x"))
        paths = (here.join(nodes.select("parent", "name", "node"), on=["parent", "name"])
                 .filter(pl.col("n") > depth + 1)
                 .select("path", "samples", "n", pl.col("node").alias("parent")))
        depth += 1
    return pl.concat(out).cast(schema) if out else _empty(schema)


# ------------------------------------------------------------- for the comparison --


@dataclass
class Shares:
    """One run's samples as the comparison reads them: per (function, module) the samples
    whose leaf it is (a module's unresolved leaves as one '[unresolved]' function), in the whole run (`run`) and, of the launching threads, inside the
    GPU's idle gaps (`gaps`; None without gaps or a second look at them)."""

    run: pl.DataFrame
    gaps: pl.DataFrame | None = None


def shares(collector: SampleCollector, gap_samples: OnePassGapSamples | None,
           labels: dict[int, str]) -> Shares:
    loc = Locations(labels)

    def by_name(df: pl.DataFrame) -> pl.DataFrame:
        # an unresolved leaf's address means nothing in another run (another process,
        # another load address): its module's unresolved samples are compared as one
        named = collapse_unresolved(loc.name(df).select("function", "module", "samples"))
        return named.sort("function", "module")

    gaps = None
    if gap_samples is not None:
        gaps = by_name(gap_samples.result().select("value", "samples"))
    return Shares(by_name(_self(collector.counts.result())), gaps)
