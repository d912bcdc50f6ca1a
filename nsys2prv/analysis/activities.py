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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..engine import NUL
from ..paraver.read import Source, Trace, companion, read_layout, source_path, windows
from ..paraver.registry import cuda
from ..paraver.registry import nvtx as nvtx_reg
from .timeline import Spans

KERNEL = cuda.CUDA_KERNEL
NCCL_KERNEL = cuda.NCCL_KERNEL
FULL_NAME = 67_000_001  # demangled full kernel name, at the start of compute and NCCL kernels
MEMOP = cuda.MEMORY_OPERATION
MEMORY_KIND_TYPES = (cuda.MEMORY_SRC_KIND, cuda.MEMORY_DST_KIND)  # at a copy's start
CUDA_CALL = cuda.CUDA_CALL
SYNC_STATE = 5
PUSHPOP = range(nvtx_reg.NVTX_PUSHPOP_BASE, nvtx_reg.NVTX_PUSHPOP_BASE + nvtx_reg.NVTX_DOMAIN_MAX)
STARTEND = range(nvtx_reg.NVTX_STARTEND_BASE,
                 nvtx_reg.NVTX_STARTEND_BASE + nvtx_reg.NVTX_LANE_MAX)

_KERNELS = {"row": pl.Int32, "start": pl.Int64, "dur": pl.Int64, "name": pl.Int32,
            "full": pl.Int32, "nccl": pl.Boolean}
LAUNCH_TAGS = (cuda.TAG_KERNEL_LAUNCH, cuda.TAG_NCCL_LAUNCH, cuda.TAG_MEMORY_OPERATION)


@dataclass
class Activities:
    """One trace's activities (times in the trace's ns, rows as in `rows`). Names are the
    trace's value ids (a few bytes an activity, whatever the length of a kernel signature);
    the `*_names` tables give their text.

    kernels: row, start, dur, name (short name id), full (demangled name id), nccl (bool),
        launch (start of the CUDA call that launched it, from the launch line; null: none),
        launch_row (the host row of that call)
    memops: row, start, dur, op (id: 'memcpy Host-to-Device', 'memset', ...), launch,
        launch_row, src_kind, dst_kind (memory kind ids: 'Pageable', 'Pinned', ...; null: unknown)
    ranges: row, start, dur, name (text id), type (event type: its domain or lane), level
        (nesting depth in its domain), top (inside no other range of its thread)
    sync: row, dur (time in the Synchronization state of CPU threads, one line per row)
    kernel_names / memop_names / range_names / memory_kinds: id, name; domains: type,
    domain (null: the default domain, or a start/end range, whose domain the trace does not
    keep)
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
    memory_kinds: pl.DataFrame = field(default_factory=lambda: _table({}))
    # CUDA calls of one thread that share their start, or last 0 ns: row, start, calls (how
    # many), zero (all of them 0 ns); read only where the trace has NVTX ranges
    calls: pl.DataFrame = field(default_factory=lambda: _empty(_CALLS))

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

        def cut(df: pl.DataFrame) -> pl.DataFrame:
            df = df.filter(inside).with_columns(moved)
            return df.with_columns(pl.col("launch") - lo) if "launch" in df.columns else df

        return Activities(self.path, hi - lo, self.rows, cut(self.kernels), cut(self.memops),
                          self.ranges.filter(inside).with_columns(moved),
                          self.sync.clear(), self.kernel_names, self.memop_names,
                          self.range_names, self.domains, self.memory_kinds,
                          self.calls.filter(inside).with_columns(moved))

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
    `windows(path, collector.types, state_rows="cpu", comms=True)` in order (`add`), then
    `result`. The launch lines give each GPU activity the time its CUDA call started
    (what range of the host it belongs to: the step that launched it, not the one it runs
    in while the host waits in a copy).
    The analysis' own pass can feed it (`model.analyze_path(observers=...)`), so that the
    comparison reads each trace once for both. The pairing is compiled (`timeline.Spans`):
    a value event and the next event of its row and type (kernels, with the full name at
    their start; memory operations; NVTX start/end lanes), a push and its pop (NVTX
    push/pop), what is still open handed from window to window."""

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
        # CUDA calls only where NVTX ranges are projected (`calls`)
        self.call_types = [CUDA_CALL] if self.nvtx_types and CUDA_CALL in self.labels else []
        self.types = frozenset(set(self.flat) | set(self.pushpop) | {FULL_NAME}
                               | set(MEMORY_KIND_TYPES) | set(self.call_types))
        self._spans = Spans(self.flat, [KERNEL, NCCL_KERNEL], self.pushpop,
                            FULL_NAME if FULL_NAME in self.labels else None,
                            self.layout.rows.height)
        self._kernels: list[pl.DataFrame] = []
        self._flat: list[pl.DataFrame] = []
        self._stacked: list[pl.DataFrame] = []
        self._end = self.layout.end
        self._cpu = (self.layout.rows.sort("row")["kind"] == "cpu").to_numpy()
        self._sync = np.zeros(self.layout.rows.height, dtype=np.int64)
        self._sync_seen = np.zeros(self.layout.rows.height, dtype=bool)
        # the launch lines (receiving row, time, sending time: 20 bytes a line) and the
        # copies' memory kinds, matched to the activities once, at the end (a sort and a
        # search in numpy: per window, the activities still open made it quadratic)
        self._lines: list[tuple[np.ndarray, ...]] = []
        self._kinds: list[pl.DataFrame] = []
        self._calls: list[pl.DataFrame] = []

    comms = True  # an observer of `model.analyze_path` that needs the launch lines

    def add(self, w: Trace) -> None:
        self._end = max(self._end, w.end)
        own = w.events.slice(w.carried)
        kinds = own.filter(pl.col("type").is_in(MEMORY_KIND_TYPES))
        if kinds.height:  # a copy's memory kinds, at its start on its row
            self._kinds.append(_memory_kinds(kinds))
        if w.comms is not None and w.comms.height:
            c = w.comms
            tag = c["tag"].to_numpy()
            keep = np.isin(tag, LAUNCH_TAGS)
            if keep.any():
                self._lines.append((c["recv_row"].to_numpy()[keep].astype(np.int32),
                                    c["recv"].to_numpy()[keep].astype(np.int64),
                                    c["send"].to_numpy()[keep].astype(np.int64),
                                    c["send_row"].to_numpy()[keep].astype(np.int32)))
        if self.call_types:
            groups = _call_groups(own)
            if groups.height:
                self._calls.append(groups)
        flat, stacked = self._spans.add(own)
        if len(flat):  # kept compact: a few bytes an activity
            kernel = np.isin(flat[:, 1], [KERNEL, NCCL_KERNEL])
            k = flat[kernel]
            name = k[:, 2].astype(np.int32)
            # a kernel whose full name never came (a trace without it for some): the short one
            full = np.where(k[:, 5] == NUL, k[:, 2], k[:, 5]).astype(np.int32)
            self._kernels.append(pl.DataFrame({
                "row": k[:, 0].astype(np.int32), "start": k[:, 3], "dur": k[:, 4],
                "name": name, "full": full, "nccl": k[:, 1] == NCCL_KERNEL}))
            self._flat.append(_spans_frame(flat[~kernel]))
        if len(stacked):
            self._stacked.append(_spans_frame(stacked, "level"))
        st = w.states
        if st.height:  # time in the Synchronization state of each CPU row
            row = st["row"].to_numpy()
            sync = (st["state"].to_numpy() == SYNC_STATE) & self._cpu[row]
            dur = (st["end"].to_numpy() - st["begin"].to_numpy())[sync]
            np.add.at(self._sync, row[sync], dur)
            self._sync_seen[row[sync]] = True

    def result(self, window: tuple[int, int] | None = None) -> Activities:
        names, labels = self.names, self.labels
        nvtx_types = self.nvtx_types
        flat_spans = pl.concat(self._flat) if self._flat else _spans_frame(_NO_SPANS)
        stack_spans = (pl.concat(self._stacked) if self._stacked
                       else _spans_frame(_NO_SPANS, "level"))
        kernels = pl.concat(self._kernels) if self._kernels else _empty(_KERNELS)
        kinds = (pl.concat(self._kinds).unique(["row", "start"], keep="first")
                 if self._kinds else _empty(_KINDS))
        lines = _Lines(self._lines)
        calls = pl.concat(self._calls) if self._calls else _empty(_CALLS)
        self._flat, self._stacked, self._kernels, self._lines = [], [], [], []
        self._kinds, self._calls = [], []
        if window is not None:
            lo, hi = window
            inside = (pl.col("start") >= lo) & (pl.col("start") < hi)
            flat_spans = flat_spans.filter(inside)
            stack_spans = stack_spans.filter(inside)
            kernels = kernels.filter(inside)
        kernels = kernels.sort("start", "row")
        kernels = kernels.with_columns(*lines.launch(kernels))
        memops = (flat_spans.filter(pl.col("type") == MEMOP)
                  .select("row", "start", "dur", pl.col("value").alias("op"))
                  .sort("start", "row"))
        memops = (memops.with_columns(*lines.launch(memops))
                  .join(kinds, on=["row", "start"], how="left"))
        del lines
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
        seen = np.nonzero(self._sync_seen)[0]
        sync_rows = pl.DataFrame({"row": pl.Series(seen, dtype=pl.Int32),
                                  "dur": self._sync[seen]})
        domains = pl.DataFrame({"type": list(nvtx_types),
                                "domain": [_domain_of(labels[t]) if t in PUSHPOP else None
                                           for t in nvtx_types]},
                               schema={"type": pl.Int64, "domain": pl.Utf8})
        return Activities(self.path, self._end, self.layout.rows, kernels, memops, ranges,
                          sync_rows, _table(names.get(KERNEL, {})),
                          _table(names.get(MEMOP, {})), _table(nvtx_names), domains,
                          _table(names.get(cuda.MEMORY_SRC_KIND, {})), calls)


_NO_SPANS = np.empty((0, 6), dtype=np.int64)


_KINDS = {"row": pl.Int32, "start": pl.Int64, "src_kind": pl.Int16, "dst_kind": pl.Int16}
_CALLS = {"row": pl.Int32, "start": pl.Int64, "calls": pl.Int32, "zero": pl.Boolean}


def _call_groups(ev: pl.DataFrame) -> pl.DataFrame:
    """(row, start, calls, zero) of the CUDA calls of a window (its events, in file order:
    the events of one instant of one row are contiguous) that start at one instant of one
    thread with others, or last 0 ns: what the projection of NVTX ranges needs where exports
    have clamped timestamps (several calls of one thread at one ns, each with its
    correlation id; a call of 0 ns at a range's end is inside it). At an instant, `calls` =
    the calls that start (value events); all of them last 0 ns when the instant's last
    event ends a call (a call still open starts last). An instant's events are all in one
    window. numpy over the window's calls: a few passes, no group-by."""
    is_call = ev["type"].to_numpy() == CUDA_CALL
    if not is_call.any():
        return _empty(_CALLS)
    row = ev["row"].to_numpy()[is_call]
    time = ev["time"].to_numpy()[is_call]
    value = ev["value"].to_numpy()[is_call]
    first = np.ones(row.size, dtype=bool)
    first[1:] = (row[1:] != row[:-1]) | (time[1:] != time[:-1])
    at = np.flatnonzero(first)
    calls = np.add.reduceat((value != 0).astype(np.int32), at)
    last = value[np.append(at[1:], row.size) - 1]
    keep = (calls > 1) | ((calls == 1) & (last == 0))
    if not keep.any():
        return _empty(_CALLS)
    return pl.DataFrame({"row": row[at][keep].astype(np.int32), "start": time[at][keep],
                         "calls": calls[keep].astype(np.int32), "zero": last[keep] == 0},
                        schema=_CALLS)


def _memory_kinds(ev: pl.DataFrame) -> pl.DataFrame:
    """(row, start, src_kind, dst_kind) of a window's memory kind events (row, time, type,
    value): one row per copy."""
    dst = pl.col("type") == cuda.MEMORY_DST_KIND
    return (ev.filter(pl.col("value") != 0)
            .group_by("row", "time")
            .agg(pl.col("value").filter(~dst).first().alias("src_kind"),
                 pl.col("value").filter(dst).first().alias("dst_kind"))
            .rename({"time": "start"}).cast(_KINDS))


def _spans_frame(a: np.ndarray, last: str | None = None) -> pl.DataFrame:
    """Spans `Spans.add` returned as a frame (row, type, value, start, dur[, `last`];
    without `last`, flat spans: with their launch and memory kinds, null until matched)."""
    return pl.DataFrame({"row": a[:, 0].astype(np.int32), "type": a[:, 1], "value": a[:, 2],
                         "start": a[:, 3], "dur": a[:, 4],
                         **({last: a[:, 5]} if last else {})})


class _Lines:
    """The launch lines of a trace, sorted once by (time, receiving row) as one int64 key,
    to find the line that reaches each activity (`launch`) by a search of activities sorted
    the same way (start, row): 4.7M lines and as many activities in ~1 s and ~150 MB,
    where a join of frames took 2 GB."""

    def __init__(self, parts: list[tuple[np.ndarray, ...]]) -> None:
        if parts:
            row, recv, send, send_row = (np.concatenate([p[k] for p in parts])
                                         for k in range(4))
        else:
            row, recv, send = np.zeros(0, np.int32), np.zeros(0, np.int64), \
                np.zeros(0, np.int64)
            send_row = np.zeros(0, np.int32)
        parts.clear()  # the windows' arrays go as soon as they are joined
        self.lo = int(recv.min()) if recv.size else 0
        self.wide = bool(recv.size) and (int(recv.max()) - self.lo >= 1 << 43
                                         or int(row.max()) >= 1 << 20)
        if self.wide:  # a span of more than 2.4 h: matched with a join instead
            self.frame = pl.DataFrame({"row": row, "start": recv, "launch": send,
                                       "launch_row": send_row}).unique(["row", "start"],
                                                                       keep="first")
            return
        key = recv  # in place: (time - lo) << 20 | row, one array of 8 bytes a line
        key -= self.lo
        key <<= 20
        key |= row
        del row
        order = np.argsort(key, kind="stable")
        self.key = key[order]
        del key
        self.send = send[order]
        self.send_row = send_row[order]

    def launch(self, acts: pl.DataFrame) -> list[pl.Series]:
        """The start of the call that launched each of `acts` (row, start, sorted by start
        then row: the search walks the keys once) and the host row it was made on (nulls:
        none)."""
        if self.wide:
            found = acts.select("row", "start").join(self.frame, on=["row", "start"],
                                                     how="left")
            return [found["launch"], found["launch_row"]]
        out = np.zeros(acts.height, dtype=np.int64)
        out_row = np.zeros(acts.height, dtype=np.int32)
        found = np.zeros(acts.height, dtype=bool)
        if self.key.size and acts.height:
            start = acts["start"].to_numpy()
            ok = start >= self.lo
            q = ((start - self.lo) << 20) | acts["row"].to_numpy().astype(np.int64)
            i = np.searchsorted(self.key, q)
            ok &= i < self.key.size
            i = np.where(ok, i, 0)
            found = ok & (self.key[i] == q)
            out = np.where(found, self.send[i], 0)
            out_row = np.where(found, self.send_row[i], 0).astype(np.int32)
        missing = pl.Series(~found)
        return [pl.Series("launch", out).set(missing, None),
                pl.Series("launch_row", out_row).set(missing, None)]


def read_activities(path: Source, window: tuple[int, int] | None = None) -> Activities:
    """Every kernel, memory operation and NVTX range of the trace `path` with its duration,
    and the synchronisation time of its CPU threads (one pass); with `window` (trace ns,
    [start, end)), only activities that start inside it (whole activities are counted where
    they start, as nsys' statistics count them)."""
    collector = ActivityCollector(path)
    for w in windows(path, collector.types, state_rows="cpu", comms=True):
        collector.add(w)
    return collector.result(window)


def range_instances(acts: Activities) -> pl.DataFrame:
    """NVTX ranges as `pipeline.window.nvtx_instance` takes them: name, domain, start, end
    (trace ns), to find `--filter-nvtx RANGE[@DOMAIN][/INDEX]` on a trace."""
    return acts.named_ranges().select("name", "domain", "start",
                                      (pl.col("start") + pl.col("dur")).alias("end"))
