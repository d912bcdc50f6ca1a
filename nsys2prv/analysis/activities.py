"""Every GPU activity and NVTX range of a trace as one row each, with its duration.

The comparison of two runs (`diff.py`) and the per-instance tables need durations of single
activities (a kernel's median, a range's spread), not only sums over time. On a Paraver row an
activity is a value event at its start and the next event of the same type at its end
(kernels, memory operations, NVTX start/end lanes: `next` pairing), or a push and its pop
(NVTX push/pop types nest: `stacked` pairing). The trace is read window by window
(`paraver.read.windows`): only the events of the window proper are paired, and what is still
open at a window's end is handed to the next, so memory is that of one window plus the
result (a few numbers per activity).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..paraver.read import Source, Trace, companion, read_layout, source_path, windows
from ..paraver.registry import cuda
from ..paraver.registry import nvtx as nvtx_reg

KERNEL = cuda.CUDA_KERNEL
NCCL_KERNEL = cuda.NCCL_KERNEL
FULL_NAME = 67_000_001  # demangled full kernel name, at the start of compute and NCCL kernels
MEMOP = cuda.MEMORY_OPERATION
SYNC_STATE = 5
PUSHPOP = range(nvtx_reg.NVTX_PUSHPOP_BASE, nvtx_reg.NVTX_PUSHPOP_BASE + nvtx_reg.NVTX_DOMAIN_MAX)
STARTEND = range(nvtx_reg.NVTX_STARTEND_BASE,
                 nvtx_reg.NVTX_STARTEND_BASE + nvtx_reg.NVTX_LANE_MAX)

_EVENTS = {"row": pl.Int32, "time": pl.Int64, "type": pl.Int64, "value": pl.Int64,
           "seq": pl.Int64}
_KERNELS = {"row": pl.Int32, "start": pl.Int64, "dur": pl.Int64, "name": pl.Int32,
            "nccl": pl.Boolean}
_KERNEL_COLUMNS = ("row", "start", "dur", "name", "full", "nccl")
_SPANS = {"row": pl.Int32, "type": pl.Int64, "value": pl.Int64, "start": pl.Int64,
          "dur": pl.Int64}


@dataclass
class Activities:
    """One trace's activities (times in the trace's ns, rows as in `rows`). Names are the
    trace's value ids (a few bytes an activity, whatever the length of a kernel signature);
    the `*_names` tables give their text.

    kernels: row, start, dur, name (short name id), full (demangled name id), nccl (bool)
    memops: row, start, dur, op (id: 'memcpy Host-to-Device', 'memset', ...)
    ranges: row, start, dur, name (text id), type (event type: its domain or lane), level
        (nesting depth in its domain), top (inside no other range of its thread)
    sync: row, dur (time in the Synchronization state of CPU threads, one line per row)
    kernel_names / memop_names / range_names: id, name; domains: type, domain (null: the
    default domain, or a start/end range, whose domain the trace does not keep)
    """

    path: Path
    end: int
    rows: pl.DataFrame
    kernels: pl.DataFrame
    memops: pl.DataFrame
    ranges: pl.DataFrame
    sync: pl.DataFrame
    kernel_names: pl.DataFrame
    memop_names: pl.DataFrame
    range_names: pl.DataFrame
    domains: pl.DataFrame

    def named_ranges(self) -> pl.DataFrame:
        """`ranges` with the text of their name and their domain (row, start, dur, name,
        domain, level, top)."""
        return (self.ranges.join(self.range_names.rename({"id": "name", "name": "text"}),
                                 on="name", how="left")
                .join(self.domains, on="type", how="left")
                .select("row", "start", "dur", pl.col("text").alias("name"), "domain",
                        "level", "top"))

    def window(self, lo: int, hi: int) -> "Activities":
        """The activities that start in [lo, hi), times moved so that lo is 0 (a step of
        the run as a run of its own, to compare two steps). The synchronisation time is
        per row, not per instant: a window has none."""
        inside = (pl.col("start") >= lo) & (pl.col("start") < hi)
        moved = pl.col("start") - lo
        return Activities(self.path, hi - lo, self.rows,
                          self.kernels.filter(inside).with_columns(moved),
                          self.memops.filter(inside).with_columns(moved),
                          self.ranges.filter(inside).with_columns(moved),
                          self.sync.clear(), self.kernel_names, self.memop_names,
                          self.range_names, self.domains)

    def named_kernels(self) -> pl.DataFrame:
        """`kernels` with the text of their short and full names."""
        names = self.kernel_names
        return (self.kernels
                .join(names.rename({"id": "name", "name": "short"}), on="name", how="left")
                .join(names.rename({"id": "full", "name": "full_name"}), on="full",
                      how="left")
                .select("row", "start", "dur", pl.col("short").alias("name"),
                        pl.col("full_name").fill_null(pl.col("short")).alias("full"), "nccl"))


def _table(names: dict[int, str]) -> pl.DataFrame:
    return pl.DataFrame({"id": list(names), "name": list(names.values())},
                        schema={"id": pl.Int64, "name": pl.Utf8})


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def pair_next(events: pl.DataFrame, pending: pl.DataFrame
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Spans of types where an event closes the one before it on the row (value != 0 opens
    a span, the next event of the type ends it). Returns the closed spans and the events
    still open (to prepend to the next window's). `events` come in file order (a window's
    order), after `pending`: the next event of a (row, type) is the next one of its group,
    no sort needed (5x faster than sorting)."""
    ev = pl.concat([pending, events])
    nxt = pl.col("time").shift(-1).over("row", "type")
    ev = ev.with_columns(nxt.alias("next"))
    opened = pl.col("value") != 0
    closed = (ev.filter(opened & pl.col("next").is_not_null())
              .select("row", "type", "value", pl.col("time").alias("start"),
                      (pl.col("next") - pl.col("time")).alias("dur")))
    still = ev.filter(opened & pl.col("next").is_null()).select(list(_EVENTS))
    return closed, still


def pair_stacked(events: pl.DataFrame, pending: pl.DataFrame
                 ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Spans of nesting types (push = value != 0, pop = 0): a pop closes the latest open
    push of its row and type. Levels come from a running depth per (row, type), so pairs are
    consecutive once sorted by (row, type, level, seq); `pending` holds the open pushes with
    their level in `value`'s companion column `level`. Unbalanced pops are dropped."""
    base = pending.group_by("row", "type").agg(pl.len().cast(pl.Int64).alias("base"))
    delta = pl.when(pl.col("value") != 0).then(1).otherwise(-1)
    ev = (events.join(base, on=["row", "type"], how="left")
          .sort("row", "type", "seq")
          .with_columns((delta.cum_sum().over("row", "type") + pl.col("base").fill_null(0))
                        .alias("depth"))
          .with_columns(pl.when(pl.col("value") != 0).then(pl.col("depth"))
                        .otherwise(pl.col("depth") + 1).alias("level"))
          .drop("base", "depth"))
    ev = pl.concat([pending, ev]).filter(pl.col("level") > 0).sort("row", "type", "level",
                                                                    "seq")
    nxt_value = pl.col("value").shift(-1).over("row", "type", "level")
    nxt_time = pl.col("time").shift(-1).over("row", "type", "level")
    ev = ev.with_columns(nxt_value.alias("nv"), nxt_time.alias("nt"))
    push = pl.col("value") != 0
    closed = (ev.filter(push & (pl.col("nv") == 0))
              .select("row", "type", "value", pl.col("time").alias("start"),
                      (pl.col("nt") - pl.col("time")).alias("dur"), "level"))
    # an open push is one not followed by its pop; a later push at the same level means its
    # pop was lost: it is not open any more
    still = ev.filter(push & pl.col("nv").is_null()).select(*_EVENTS, "level")
    return closed, still


def _names(pcf: Path) -> dict[int, dict[int, str]]:
    """type -> {value: label} of a .pcf, labels whole (they hold spaces: kernel signatures,
    NVTX texts, 'memcpy Host-to-Device')."""
    if not pcf.exists():
        return {}
    types: dict[int, dict[int, str]] = {}
    group: list[int] = []
    section = ""
    for raw in pcf.read_text(errors="replace").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.isupper() and " " not in line:
            section = line
            if section == "EVENT_TYPE":
                group = []
            continue
        parts = line.split(None, 2)
        if section == "EVENT_TYPE" and len(parts) >= 2 and parts[0].lstrip("-").isdigit() \
                and parts[1].isdigit():
            group.append(int(parts[1]))
            types.setdefault(int(parts[1]), {})
        elif section == "VALUES":
            value, _, label = line.partition(" ") if " " in line else \
                line.partition("\t")
            if value.lstrip("-").isdigit():
                for t in group:
                    types[t][int(value)] = label.strip()
    return types


def _type_labels(pcf: Path) -> dict[int, str]:
    labels: dict[int, str] = {}
    if not pcf.exists():
        return labels
    in_types = False
    for line in pcf.read_text(errors="replace").splitlines():
        s = line.strip()
        if s == "EVENT_TYPE":
            in_types = True
            continue
        if in_types:
            parts = s.split(None, 2)
            if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                labels[int(parts[1])] = parts[2]
            else:
                in_types = False
    return labels


def _domain_of(label: str) -> str | None:
    """The NVTX domain of a push/pop type label ('NVTX push/pop: NAME'); None for the
    default domain."""
    name = label.split(": ", 1)[1] if ": " in label else label
    return None if name == "default domain" else name


class ActivityCollector:
    """Collects a trace's activities window by window: give it every window of
    `windows(path, collector.types, state_rows="cpu")` in order (`add`), then `result`.
    The analysis' own pass can feed it (`model.analyze_path(observers=...)`), so that the
    comparison reads each trace once for both."""

    def __init__(self, path: Source) -> None:
        self.path = source_path(path)
        pcf = companion(self.path, ".pcf")
        self.names = _names(pcf)
        self.labels = _type_labels(pcf)
        self.layout = read_layout(path)
        self.nvtx_types = [t for t in self.labels if t in PUSHPOP or t in STARTEND]
        self.pushpop = [t for t in self.nvtx_types if t in PUSHPOP]
        self.flat = [KERNEL, NCCL_KERNEL, MEMOP] + [t for t in self.nvtx_types
                                                     if t in STARTEND]
        self.types = frozenset(set(self.flat) | set(self.pushpop) | {FULL_NAME})
        self._pend_flat = _empty(_EVENTS)
        self._pend_stack = _empty({**_EVENTS, "level": pl.Int64})
        self._spans: list[pl.DataFrame] = []
        self._stacked: list[pl.DataFrame] = []
        self._kernels: list[pl.DataFrame] = []
        self._has_full = FULL_NAME in self.labels
        self._pend_kernels = _empty(_KERNELS)
        self._pend_full = _empty({"row": pl.Int32, "start": pl.Int64, "full": pl.Int64})
        self._sync: list[pl.DataFrame] = []
        self._end = self.layout.end
        self._cpu_rows = self.layout.rows.filter(pl.col("kind") == "cpu")["row"]

    def add(self, w: Trace) -> None:
        self._end = max(self._end, w.end)
        ev = w.events.slice(w.carried).filter(pl.col("type").is_in(list(self.types)))
        if ev.height:
            done, self._pend_flat = pair_next(ev.filter(pl.col("type").is_in(self.flat)),
                                              self._pend_flat)
            kinds = pl.col("type").is_in([KERNEL, NCCL_KERNEL])
            self._add_kernels(done.filter(kinds), ev)
            self._spans.append(done.filter(~kinds))
            if self.pushpop:
                done, self._pend_stack = pair_stacked(
                    ev.filter(pl.col("type").is_in(self.pushpop)), self._pend_stack)
                self._stacked.append(done)
        self._sync.append(_sync(w, self._cpu_rows))

    def _add_kernels(self, done: pl.DataFrame, ev: pl.DataFrame) -> None:
        """Closed kernels with their demangled name, kept compact (the full-name event is at
        the kernel's start: it is held until the kernel closes; a start and its full name
        that a window edge separates meet in the next window)."""
        spans = pl.concat([self._pend_kernels, done.select(
            "row", "start", "dur", pl.col("value").cast(pl.Int32).alias("name"),
            (pl.col("type") == NCCL_KERNEL).alias("nccl"))])
        if not self._has_full:
            self._kernels.append(spans.with_columns(pl.col("name").alias("full"))
                                 .select(list(_KERNEL_COLUMNS)))
            return
        fulls = pl.concat([self._pend_full, ev.filter(
            (pl.col("type") == FULL_NAME) & (pl.col("value") != 0))
            .select("row", pl.col("time").alias("start"), pl.col("value").alias("full"))])
        j = spans.join(fulls, on=["row", "start"], how="left")
        self._kernels.append(j.filter(pl.col("full").is_not_null())
                             .with_columns(pl.col("full").cast(pl.Int32))
                             .select(list(_KERNEL_COLUMNS)))
        self._pend_kernels = j.filter(pl.col("full").is_null()).select(list(_KERNELS))
        self._pend_full = fulls.join(spans.select("row", "start"), on=["row", "start"],
                                     how="anti")

    def result(self, window: tuple[int, int] | None = None) -> Activities:
        names, labels = self.names, self.labels
        nvtx_types = self.nvtx_types
        flat_spans = pl.concat(self._spans) if self._spans else _empty(_SPANS)
        stack_spans = (pl.concat(self._stacked) if self._stacked
                       else _empty({**_SPANS, "level": pl.Int64}))
        if window is not None:
            lo, hi = window
            inside = (pl.col("start") >= lo) & (pl.col("start") < hi)
            flat_spans = flat_spans.filter(inside)
            stack_spans = stack_spans.filter(inside)
        # kernels whose full name never came (a trace without it for some): the short one
        rest = self._pend_kernels.with_columns(pl.col("name").alias("full")) \
            .select(list(_KERNEL_COLUMNS))
        kernels = pl.concat(self._kernels + [rest])
        self._kernels = []
        if window is not None:
            kernels = kernels.filter((pl.col("start") >= window[0])
                                     & (pl.col("start") < window[1]))
        kernels = kernels.sort("start", "row")
        memops = (flat_spans.filter(pl.col("type") == MEMOP)
                  .select("row", "start", "dur", pl.col("value").alias("op"))
                  .sort("start", "row"))
        nvtx_names: dict[int, str] = {}
        for t in nvtx_types:
            nvtx_names.update(names.get(t, {}))
        startend = [t for t in nvtx_types if t in STARTEND]
        ranges = pl.concat([
            stack_spans.select("row", "type", "value", "start", "dur", "level"),
            flat_spans.filter(pl.col("type").is_in(startend))
            .with_columns(pl.lit(0, pl.Int64).alias("level"))
            .select("row", "type", "value", "start", "dur", "level")])
        # top: not inside another range of the thread, whatever its domain or lane (a sweep:
        # sorted by start, longer first, a range is inside when an earlier one ends after it)
        ranges = (ranges.sort("row", "start", pl.col("dur"), descending=[False, False, True])
                  .with_columns((pl.col("start") + pl.col("dur")).cum_max().shift(1)
                                .over("row").alias("_cover"))
                  .with_columns((pl.col("_cover").is_null()
                                 | (pl.col("_cover") < pl.col("start") + pl.col("dur")))
                                .alias("top"))
                  .select("row", "start", "dur", pl.col("value").alias("name"), "type",
                          "level", "top")
                  .sort("start", "row"))
        sync_rows = (pl.concat(self._sync).group_by("row").agg(pl.col("dur").sum()).sort("row")
                     if self._sync else _empty({"row": pl.Int32, "dur": pl.Int64}))
        domains = pl.DataFrame({"type": list(nvtx_types),
                                "domain": [_domain_of(labels[t]) if t in PUSHPOP else None
                                           for t in nvtx_types]},
                               schema={"type": pl.Int64, "domain": pl.Utf8})
        return Activities(self.path, self._end, self.layout.rows, kernels, memops, ranges,
                          sync_rows, _table(names.get(KERNEL, {})),
                          _table(names.get(MEMOP, {})), _table(nvtx_names), domains)


def read_activities(path: Source, window: tuple[int, int] | None = None) -> Activities:
    """Every kernel, memory operation and NVTX range of the trace `path` with its duration,
    and the synchronisation time of its CPU threads (one pass); with `window` (trace ns,
    [start, end)), only activities that start inside it (whole activities are counted where
    they start, as nsys' statistics count them)."""
    collector = ActivityCollector(path)
    for w in windows(path, collector.types, state_rows="cpu"):
        collector.add(w)
    return collector.result(window)


def _sync(w: Trace, cpu_rows: pl.Series) -> pl.DataFrame:
    return (w.states.filter((pl.col("state") == SYNC_STATE) & pl.col("row").is_in(cpu_rows.to_list()))
            .group_by("row").agg((pl.col("end") - pl.col("begin")).sum().alias("dur")))


def range_instances(acts: Activities) -> pl.DataFrame:
    """NVTX ranges as `pipeline.window.nvtx_instance` takes them: name, domain, start, end
    (trace ns), to find `--filter-nvtx RANGE[@DOMAIN][/INDEX]` on a trace."""
    return acts.named_ranges().select("name", "domain", "start",
                                      (pl.col("start") + pl.col("dur")).alias("end"))
