"""What bounds the run: the job's dependency graph, its critical path, and what-if estimates.

The graph is read from the trace (what Paraver shows): its nodes are the work of every row,
its edges the order of each row and the communication lines that say what waited for what.

Nodes:
* GPU work: each kernel, memcpy and memset on its stream row. An NCCL kernel that the trace
  matches across its participants (a collective line reaches its end) is two nodes: its
  arrival (its start, no length) and its completion, which starts when the last participant
  has arrived and lasts until the kernel ends (the transfer).
* Host work: each CUDA or MPI call of a CPU thread (outermost only) is a node that starts
  where the thread's previous call ended (the host computing in between is part of it) and
  ends with the call. A call that waited for other work (a line reaches it: a GPU -> host
  synchronisation, an MPI message or collective) is two nodes: up to the call's start, and
  its return, from when what it waited for was done (or its start) to its end.

Edges (each makes its node ready at the predecessor's end plus a lag):
* order: the previous node of the same row (a stream runs its work in order; a thread runs
  its calls in order);
* launch: the CUDA call that launched a GPU activity (the launch line leaves from inside the
  call: the activity is ready at the line's start, a negative lag);
* stream wait, GPU -> host sync, NCCL and MPI collectives, MPI messages: the lines of the
  trace (docs/events.md), from the awaited work to the waiting one.

A node's measured start is its latest ready time plus a slack: the waiting that no edge
explains (launch latency, scheduling). The critical path walks back from the work that ends
last through the edge that set each node's start (its *binding* edge); the time on it is
split by what the path was doing (each node's time up to where its successor became ready,
and the slacks between), so that the path's composition adds up to the analysed span.

What-if: the same graph evaluated again (`engine._graph.c`) with some durations scaled,
every node starting at its new latest ready time plus its measured slack. The model's
assumptions: the dependencies are those measured (no reordering, no new contention, no
new overlap), durations scale, slack stays; `gaps=0` drops the launch edges (the host no
longer makes a GPU wait).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..engine import NUL
from ..errors import UsageError
from ..paraver.read import Source, Trace, TraceInfo, open_trace, windows
from ..paraver.registry import STATE_NOT_CREATED
from .activities import PUSHPOP
from .graph import (  # noqa: F401 (the graph's definitions, also read from here)
    CUDA_CALL, E_HOST_SYNC, E_LAUNCH, E_MPI, E_MPI_COLLECTIVE, E_NCCL, E_ORDER,
    E_STREAM_WAIT, EDGE_CHUNK, EDGE_NAMES, FULL_NAME, GPU_TYPES, HOST_TYPES, KERNEL,
    LAUNCH_TAGS, MEMOP, MPI_CALLS, N_HOST, N_KERNEL, N_MEMCPY, N_MEMSET, N_NCCL,
    N_NCCL_ARRIVE, N_RETURN, NCCL_KERNEL, ORDER, TYPES, WAIT_TAGS, Evaluation, Graph,
    WhatIf, _by_row_start, _classify, _Keys, _sort_ties, _topological, connected,
    kernel_labels_of, scales)
from .timeline import Spans


# categories of the path's time
BEFORE, AFTER = "before the first work", "after the last work"
WAITING, LATENCY = "waiting no work explains", "launch latency"
HOST_COMPUTE = "host compute"

_IV = {"row": np.int32, "start": np.int64, "end": np.int64, "type": np.int32,
       "value": np.int32, "full": np.int32}
_LINES = {"send_row": np.int32, "send": np.int64, "recv_row": np.int32, "recv": np.int64,
          "tag": np.int64}


# ----------------------------------------------------------------------- reading --

class NvtxStacks:
    """The NVTX push/pop events of the trace's domains, as read (file order), so that the
    range open at an instant is found for the few runs a report names, not paired for
    all."""

    def __init__(self, row: np.ndarray, time: np.ndarray, typ: np.ndarray,
                 value: np.ndarray, names: dict[int, dict[int, str]]) -> None:
        self.row, self.time, self.type, self.value = row, time, typ, value
        self.names = names

    @property
    def height(self) -> int:
        return int(self.row.size)

    def innermost(self, row: int, t: int) -> str | None:
        """The name of the innermost range open on `row` at `t` (start <= t < end) among
        the ranges that close: per type, each level's open push is the last push that
        reached it (depth clamped at 0: a pop without its push is ignored), open at `t`
        while the depth stays at or above its level; the deepest level wins, then the
        latest start."""
        on_row = np.flatnonzero(self.row == row)
        best = None
        for typ in np.unique(self.type[on_row]).tolist():
            j = on_row[self.type[on_row] == typ]
            k = int(np.searchsorted(self.time[j], t, side="right"))  # events at or before t
            if k == 0:
                continue
            push = self.value[j] != 0
            walk = np.cumsum(np.where(push, 1, -1))
            depth = walk - np.minimum(0, np.minimum.accumulate(walk))
            later_min = np.minimum.accumulate(depth[::-1])[::-1]  # min over i..end
            for level in range(int(depth[k - 1]), 0, -1):
                at = np.flatnonzero(push[:k] & (depth[:k] == level))
                if at.size == 0:
                    continue
                p = int(at[-1])
                if p + 1 < depth.size and later_min[p + 1] < level:  # it closes
                    key = (level, int(self.time[j[p]]))
                    if best is None or key > best[0]:
                        best = (key, typ, int(self.value[j[p]]))
                    break
        if best is None:
            return None
        _, typ, value = best
        return self.names.get(typ, {}).get(value, str(value))


class StoredNvtx:
    """`NvtxStacks` on disk: the push/pop events filed window by window (`graph_build.
    Columns`), a row's events read a window at a time for each range asked for. Memory: a
    window, and one entry per nesting level of the row's ranges."""

    def __init__(self, table, buckets: int, names: dict[int, dict[int, str]]) -> None:
        self.table, self.buckets, self.names = table, buckets, names

    @property
    def height(self) -> int:
        return self.table.rows

    def innermost(self, row: int, t: int) -> str | None:
        """`NvtxStacks.innermost`, walking the row's events in order once: per type, its
        depth at `t` and the push that reached it (the last push of each level is kept as
        the events go by), and the lowest depth after `t`; a type's range at `t` is its
        top one if the depth falls below it later (a deeper level cannot close when its
        top one does not)."""
        state: dict[int, dict] = {}
        for b in range(self.buckets):
            ev = self.table.read(b)
            on_row = ev["row"] == row
            if not on_row.any():
                continue
            for typ in np.unique(ev["type"][on_row]).tolist():
                sel = on_row & (ev["type"] == typ)
                st = state.setdefault(typ, {"walk": 0, "low": 0, "depth": 0, "seen": 0,
                                            "after": None, "time": {}, "value": {}})
                time, value = ev["time"][sel], ev["value"][sel]
                push = value != 0
                walk = st["walk"] + np.cumsum(np.where(push, 1, -1))
                low = np.minimum(st["low"], np.minimum.accumulate(walk))
                depth = walk - np.minimum(0, low)
                st["walk"], st["low"] = int(walk[-1]), int(low[-1])
                k = int(np.searchsorted(time, t, side="right"))  # events at or before t
                if k:
                    st["seen"] += k
                    st["depth"] = int(depth[k - 1])
                    at = np.flatnonzero(push[:k])
                    if at.size:  # the last push of each level reached
                        levels = depth[at][::-1]
                        u, last = np.unique(levels, return_index=True)
                        for lv, j in zip(u.tolist(), at[::-1][last].tolist()):
                            st["time"][lv] = int(time[j])
                            st["value"][lv] = int(value[j])
                if k < depth.size:
                    m = int(depth[k:].min())
                    st["after"] = m if st["after"] is None else min(st["after"], m)
        best = None
        for typ in sorted(state):
            st = state[typ]
            d, after = st["depth"], st["after"]
            if st["seen"] and d >= 1 and after is not None and after < d:
                key = (d, st["time"][d])
                if best is None or key > best[0]:
                    best = (key, typ, st["value"][d])
        if best is None:
            return None
        _, typ, value = best
        return self.names.get(typ, {}).get(value, str(value))


class GraphCollector:
    """Collects, window by window (`add`), the intervals of the GPU work and the host calls
    and every communication line; `graph()` builds the graph. Memory: one window, and a few
    numbers per node and per line; with `spill`, one window: what it collects is filed on
    disk, and a graph of more than `held_nodes` intervals is built there
    (`graph_build.build_slabs`) and kept there in slabs (`close` removes the files)."""

    comms = True  # an observer of `model.analyze_path` that needs the lines

    def __init__(self, path: Source | TraceInfo, spill: bool = False,
                 held_nodes: int | None = None, slab_nodes: int | None = None) -> None:
        from .graph_slabs import SLAB_NODES

        self.files = None  # with spill: what the pass files for the graph (graph_build)
        self.held_nodes = SLAB_NODES if held_nodes is None else held_nodes
        self.slab_nodes = SLAB_NODES if slab_nodes is None else slab_nodes
        self._seq = [0, 0]  # intervals and lines filed so far (their order: `idx`)
        self.info = info = open_trace(path)
        self.path = info.path
        self.layout = info.layout
        if spill:
            from .graph_build import GraphFiles
            from .store import WindowStore

            self.files = GraphFiles(WindowStore(prefix="nsys2prv-graph-pass-"),
                                    self.layout.rows)
        self.end = self.layout.end
        # the work: a value event to the next event of its row and type, paired across
        # windows
        # (kernels with their demangled name: the path's kernels listed by it)
        labels = info.type_labels
        full = FULL_NAME if FULL_NAME in labels else None
        self._work = Spans(sorted(TYPES - {KERNEL, NCCL_KERNEL}), (KERNEL, NCCL_KERNEL), (),
                           full, self.layout.rows.height)
        # the NVTX push/pop ranges of the trace's domains: what the path's runs are in
        self.pushpop = [t for t in labels if t in PUSHPOP]
        self.types = TYPES | frozenset(self.pushpop) | ({full} if full else frozenset())
        self._iv: list[pl.DataFrame] = []
        self._nvtx: list[pl.DataFrame] = []
        self._comms: list[pl.DataFrame] = []
        # per CPU row, its first and last instant alive: the host's time before its first
        # call and after its last one belongs to the graph too
        self._alive = pl.DataFrame(schema={"row": pl.Int32, "first": pl.Int64,
                                           "last": pl.Int64})

    def add(self, w: Trace) -> None:
        self.end = max(self.end, w.end)
        if self.files is not None:
            self.files.window(w.start, w.end)
        ev = w.events.slice(w.carried)
        done, _ = self._work.add(ev)
        if len(done):
            iv = pl.DataFrame({
                "row": done[:, 0].astype(np.int32), "start": done[:, 3],
                "end": done[:, 3] + done[:, 4], "type": done[:, 1].astype(np.int32),
                "value": done[:, 2].astype(np.int32),
                "full": np.where(done[:, 5] == NUL, 0, done[:, 5]).astype(np.int32)})
            if self.files is None:
                self._iv.append(iv)
            else:
                self.files.add(self._numbered(iv, 0), None)
        if self.pushpop:
            nv = ev.filter(pl.col("type").is_in(self.pushpop))
            if nv.height:
                nv = nv.select("row", "time", "type", "value")
                if self.files is None:
                    self._nvtx.append(nv)
                else:
                    self.files.add_nvtx({c: nv[c].to_numpy() for c in nv.columns})
        if w.comms is not None and w.comms.height:
            lines = w.comms.select("send_row", "send", "recv_row", "recv",
                                   pl.col("tag").cast(pl.Int64))
            if self.files is None:
                self._comms.append(lines)
            else:
                self.files.add(None, self._numbered(lines, 1))
        alive = (w.states.filter(pl.col("state") != STATE_NOT_CREATED)
                 .group_by("row").agg(pl.col("begin").min().alias("first"),
                                      pl.col("end").max().alias("last")))
        if alive.height:
            self._alive = pl.concat([self._alive, alive.cast(self._alive.schema)]).group_by(
                "row").agg(pl.col("first").min(), pl.col("last").max())

    def _numbered(self, frame: pl.DataFrame, k: int) -> dict[str, np.ndarray]:
        """A window's intervals (k 0) or lines (1) as numpy columns, with their order among
        all those read (`idx`)."""
        cols = {c: frame[c].to_numpy() for c in frame.columns}
        cols["idx"] = np.arange(self._seq[k], self._seq[k] + frame.height)
        self._seq[k] += frame.height
        return cols

    def nvtx(self) -> NvtxStacks:
        """The NVTX push/pop events seen (`NvtxStacks`)."""
        names = self.info.names
        if self.files is not None:
            cols = self.files.nvtx_held()
            return NvtxStacks(cols["row"], cols["time"], cols["type"], cols["value"], names)
        cols = _columns(self._nvtx, {"row": np.int32, "time": np.int64, "type": np.int64,
                                     "value": np.int64})
        self._nvtx = []
        return NvtxStacks(cols["row"], cols["time"], cols["type"], cols["value"], names)

    def graph(self, span: tuple[int, int] | None = None):
        """The graph: a `Graph` in memory, or, spilled and larger than `held_nodes`
        intervals, a `graph_slabs.Slabs` on disk."""
        if self.files is not None:
            from .graph_build import build_slabs

            self.files.finish(self.end)
            if self.files.intervals > self.held_nodes:
                slabs = build_slabs(self.files, self.layout.rows, self.info.names,
                                    span or (0, self.end), self._alive, None,
                                    self.slab_nodes)
                # the NVTX events go with the slabs, read from there for the runs asked
                slabs.nvtx = StoredNvtx(self.files.move_nvtx(slabs.dir),
                                        len(self.files.store.starts), self.info.names)
                self.close()
                return slabs
            iv, comms = self.files.held()
            nvtx = self.nvtx()  # (read back before the files go)
            self.close()
        else:
            iv = _columns(self._iv, _IV)
            comms = _columns(self._comms, _LINES)
            nvtx = self.nvtx()
        self._iv = []
        self._comms = []
        names = self.info.names
        g = build_graph(self.layout.rows, iv, comms, names, span or (0, self.end),
                        self._alive)
        g.nvtx = nvtx
        return g

    def close(self) -> None:
        """Remove what was filed on disk (the graph's slabs, once built, are not)."""
        if self.files is not None:
            self.files.store.close()
            self.files = None


def _columns(frames: list[pl.DataFrame], schema: dict) -> dict[str, np.ndarray]:
    """The columns of window frames as contiguous numpy arrays (read-only: polars' memory,
    concatenated by polars on its threads, then viewed)."""
    if not frames:
        return {name: np.zeros(0, dtype) for name, dtype in schema.items()}
    whole = pl.concat([f.select(list(schema)) for f in frames], rechunk=True)
    frames.clear()  # the windows' copies go as the whole is made
    return {name: whole[name].to_numpy().astype(dtype, copy=False)
            for name, dtype in schema.items()}


def read_graph(path: Source | TraceInfo, span: tuple[int, int] | None = None,
               block: int | None = None, **collector):
    """The dependency graph of a trace (one pass, window by window, of `block` bytes of
    text), with its NVTX push/pop events (`Graph.nvtx`); `collector`: `GraphCollector`'s
    options (with `spill`, a large graph comes back as `graph_slabs.Slabs` on disk)."""
    got = GraphCollector(path, **collector)
    try:
        for w in windows(got.info, got.types, state_rows="cpu", comms=True, block=block):
            got.add(w)
        return got.graph(span)
    finally:
        got.close()


# --------------------------------------------------------------------- the graph --

def _search(keys: np.ndarray, q: np.ndarray, side: str = "left") -> np.ndarray:
    """`np.searchsorted` with the queries sorted first: lines come nearly in order, so the
    sort is short and the search walks the keys once instead of jumping (10x faster on
    millions of lines)."""
    if q.size < 1024:
        return np.searchsorted(keys, q, side=side)
    order = np.argsort(q, kind="stable")
    out = np.empty(q.size, dtype=np.int64)
    out[order] = np.searchsorted(keys, q[order], side=side)
    return out


def _node_at(keys: np.ndarray, order: np.ndarray, q: np.ndarray) -> np.ndarray:
    """For queries `q`, the node of `order` (sorted by `keys`) whose key equals the query
    (the first of equal ones); -1 where none."""
    i = _search(keys, q)
    out = np.full(q.size, -1, dtype=np.int64)
    ok = i < keys.size
    ok[ok] &= keys[i[ok]] == q[ok]
    out[ok] = order[i[ok]]
    return out


def _first_ending(keys: np.ndarray, order: np.ndarray, q: np.ndarray) -> np.ndarray:
    """For queries `q` (keys of (row, t)), the index (into the nodes) of the first node of
    `order` (nodes sorted by their (row, end) key, `keys` = those keys in that order) whose
    end is at t or after, on the same row; -1 where none (verified by the caller)."""
    i = _search(keys, q, side="left")
    ok = i < keys.size
    out = np.full(q.size, -1, dtype=np.int64)
    out[ok] = order[i[ok]]
    return out


def build_graph(rows: pl.DataFrame, iv: dict[str, np.ndarray], comms: dict[str, np.ndarray],
                names: dict[int, dict[int, str]], span: tuple[int, int],
                alive: pl.DataFrame | None = None) -> Graph:
    """The graph from the trace's intervals (row, start, end, type, value: numpy columns)
    and lines (send_row, send, recv_row, recv, tag); `alive` (row, first, last) extends each
    CPU row's first node back to its first instant and adds a last node up to its last one
    (host work before the first call, after the last). Built with sorted numpy arrays:
    a few numbers per node and per edge."""
    kinds = rows.sort("row")["kind"].to_list()
    nrows = len(kinds)
    is_cpu = np.array([k == "cpu" for k in kinds] + [False], dtype=bool)
    is_gpu = np.array([k == "gpu" for k in kinds] + [False], dtype=bool)
    # taken out of `iv` so that they are freed as soon as the nodes are built
    row, start, end, typ, value = (iv.pop(c) for c in ("row", "start", "end", "type",
                                                         "value"))
    full = iv.pop("full", None)
    if full is None:
        full = np.zeros(row.size, dtype=np.int32)
    ekind = _classify(comms, is_cpu)
    keep = ekind >= 0
    if not keep.all():
        lines = {k: v[keep] for k, v in comms.items()}
        ekind = ekind[keep]
    else:
        lines = dict(comms)
    alive_times = [alive["first"].to_numpy(), alive["last"].to_numpy()] \
        if alive is not None and alive.height else []
    # every time a key is made of: the work, the lines, the threads' lives
    keys = _Keys([start, end, lines["send"], lines["recv"], *alive_times], nrows)
    def gpu_nodes() -> list[tuple]:
        # -- GPU nodes (NCCL kernels that a collective line reaches: arrival + completion)
        g = np.flatnonzero(np.isin(typ, GPU_TYPES) & is_gpu[row])
        rg, sg, eg, tg, vg = row[g], start[g], end[g], typ[g], value[g]  # gathered once
        memset_ids = [v for v, n in names.get(MEMOP, {}).items() if n.lower().startswith("memset")]
        gk = np.full(g.size, N_MEMCPY, dtype=np.int8)
        gk[tg == KERNEL] = N_KERNEL
        gk[tg == NCCL_KERNEL] = N_NCCL
        gk[(tg == MEMOP) & np.isin(vg, memset_ids)] = N_MEMSET
        last = np.full(g.size, np.iinfo(np.int64).min, dtype=np.int64)
        nl = ekind == E_NCCL
        if nl.any():  # the NCCL kernels by (row, end): where each collective line ends
            nk = np.flatnonzero(gk == N_NCCL)
            sk = keys(rg[nk], eg[nk])
            order = nk[np.argsort(sk, kind="stable")]
            sk = np.sort(sk, kind="stable")
            at = _node_at(sk, order, keys(lines["recv_row"][nl], lines["recv"][nl]))
            hit = at >= 0
            np.maximum.at(last, at[hit], lines["send"][nl][hit])
            del nk, sk, order, at
        coll = (gk == N_NCCL) & (last > np.iinfo(np.int64).min)
        comp = np.maximum(sg, np.minimum(last, eg))
        ncoll = int(coll.sum())
        fg = full[g]
        gpu_parts = [
            (rg, sg, np.where(coll, sg, eg) if ncoll else eg, sg,
             np.where(coll, N_NCCL_ARRIVE, gk).astype(np.int8), vg, tg,
             np.zeros(g.size, np.int8), fg),
            (rg[coll], comp[coll], eg[coll], comp[coll],
             np.full(ncoll, N_NCCL, np.int8), vg[coll], tg[coll], np.ones(ncoll, np.int8),
             fg[coll])]
        return gpu_parts

    def host_nodes() -> list[tuple]:
        # -- host nodes: outermost calls, each from the previous call's end
        h = np.flatnonzero(np.isin(typ, HOST_TYPES) & is_cpu[row])
        h = h[_by_row_start(row[h], start[h], end[h], nrows)]
        hr, hs, he = row[h], start[h], end[h]
        end_key = keys(hr, he)
        reach = np.maximum.accumulate(end_key)  # within a row: rows are key-ordered
        outer = np.ones(h.size, dtype=bool)
        outer[1:] = end_key[1:] > reach[:-1]
        del end_key, reach
        h, hr, hs, he = h[outer], hr[outer], hs[outer], he[outer]
        first_alive = np.full(nrows + 1, np.iinfo(np.int64).max, dtype=np.int64)
        last_alive = np.full(nrows + 1, np.iinfo(np.int64).min, dtype=np.int64)
        if alive is not None and alive.height:
            ar = alive["row"].to_numpy()
            first_alive[ar] = alive["first"].to_numpy()
            last_alive[ar] = alive["last"].to_numpy()
        new_row = np.ones(h.size, dtype=bool)
        new_row[1:] = hr[1:] != hr[:-1]
        seg = np.empty(h.size, dtype=np.int64)
        seg[1:] = he[:-1]
        seg[new_row] = np.minimum(first_alive[hr[new_row]], hs[new_row])
        # calls that waited for other work: a sync, MPI message or collective line ends in them
        w = np.isin(ekind, (E_HOST_SYNC, E_MPI, E_MPI_COLLECTIVE))
        awaited = np.full(h.size, np.iinfo(np.int64).min, dtype=np.int64)
        if w.any() and h.size:
            hk = keys(hr, he)  # sorted: calls of a row do not overlap
            qr, qt = lines["recv_row"][w], lines["recv"][w]
            i = np.searchsorted(hk, keys(qr, qt))
            ok = i < h.size
            ok[ok] &= (hr[i[ok]] == qr[ok]) & (hs[i[ok]] <= qt[ok])
            np.maximum.at(awaited, i[ok], lines["send"][w][ok])
        split = awaited > np.iinfo(np.int64).min
        ret = np.maximum(hs, np.minimum(awaited, he))
        last_call = np.flatnonzero(np.append(hr[1:] != hr[:-1], True)) if h.size else h
        tail = last_call[last_alive[hr[last_call]] > he[last_call]]
        nsplit = int(split.sum())
        host_parts = [
            (hr, seg, np.where(split, hs, he), hs, np.full(h.size, N_HOST, np.int8), value[h],
             typ[h], np.zeros(h.size, np.int8), np.zeros(h.size, np.int32)),
            (hr[split], ret[split], he[split], ret[split],
             np.full(nsplit, N_RETURN, np.int8), value[h][split], typ[h][split],
             np.ones(nsplit, np.int8), np.zeros(nsplit, np.int32)),
            (hr[tail], he[tail], last_alive[hr[tail]], last_alive[hr[tail]],
             np.full(tail.size, N_HOST, np.int8), value[h][tail], typ[h][tail],
             np.full(tail.size, 2, np.int8), np.zeros(tail.size, np.int32))]
        return host_parts

    # the GPU and the host nodes are independent: built in two threads (numpy gives the
    # interpreter lock up in its sorts and array passes)
    with ThreadPoolExecutor(max_workers=2) as pool:
        gpu_future = pool.submit(gpu_nodes)
        host_parts = host_nodes()
        gpu_parts = gpu_future.result()
    del row, start, end, typ, value, full
    parts = gpu_parts + host_parts
    del gpu_parts, host_parts
    # one column at a time: concatenated, then put in topological order
    n_part = np.concatenate([p[7] for p in parts])
    n_row = np.concatenate([p[0] for p in parts])
    n_start = np.concatenate([p[1] for p in parts])
    n_end = np.concatenate([p[2] for p in parts])
    topo = _topological(n_start, n_end, n_row, n_part)
    del n_part
    with ThreadPoolExecutor(max_workers=2) as pool:  # the columns in that order, two at once
        later = [pool.submit(lambda c: np.concatenate([p[c] for p in parts])[topo], c)
                 for c in (3, 4, 5, 6, 8)]
        n_row, n_start, n_end = n_row[topo], n_start[topo], n_end[topo]
        n_split, n_kind, n_value, n_type, n_full = (f.result() for f in later)
    del parts, topo, later
    n = n_start.size
    # the nodes by (row, start, end), ties in topological order: a stable sort on the row
    # alone keeps the topological order (start, end, ...) within each row
    by_row = np.argsort(n_row.astype(np.uint16) if nrows < 2**16 else n_row,
                        kind="stable").astype(np.int32)
    # the order of each row: its previous node
    row_prev = np.full(n, -1, dtype=np.int32)
    same = n_row[by_row[1:]] == n_row[by_row[:-1]]
    row_prev[by_row[1:][same]] = by_row[:-1][same]
    del same
    pred, succ, lag, kind, counts = _edges(n_row, n_start, n_end, n_kind, lines, ekind, keys,
                                           by_row)
    del by_row
    order = np.argsort(succ, kind="stable")  # CSR: the edges of each node together
    pred, lag, kind = pred[order], lag[order], kind[order]
    del order
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(succ, minlength=n), out=ptr[1:])
    del succ
    return Graph(rows, span, n_row.astype(np.int32), n_start, n_end, n_split, n_kind,
                 n_value.astype(np.int32), n_type.astype(np.int32), ptr,
                 pred.astype(np.int32), lag, kind.astype(np.uint8), names, counts,
                 row_prev=row_prev, full=n_full.astype(np.int32, copy=False))


def _edges(row: np.ndarray, start: np.ndarray, end: np.ndarray, kind: np.ndarray,
           lines: dict[str, np.ndarray], ekind: np.ndarray, keys: _Keys, by_row: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """(pred, succ, lag, kind) of every edge (node ids in topological order), and how many
    lines of each kind became one; `by_row`: the nodes by (row, start), ties in id
    order."""
    preds: list[np.ndarray] = []
    succs: list[np.ndarray] = []
    lags: list[np.ndarray] = []
    kinds: list[np.ndarray] = []
    # lookups: nodes by (row, start) and by (row, end) (ties in id order); within a row the
    # ends are nearly in start order: a stable sort of them in `by_row` order is short work
    start_order = by_row
    rb = row[by_row]

    def ends() -> tuple[np.ndarray, np.ndarray]:
        end_keys = keys(rb, end[by_row])
        resort = np.argsort(end_keys, kind="stable")
        return by_row[resort], end_keys[resort]

    with ThreadPoolExecutor(max_workers=2) as pool:  # two lookups, built side by side
        end_future = pool.submit(ends)
        start_keys = keys(rb, start[by_row])
        end_order, end_keys = end_future.result()
    del rb
    counts: dict[str, int] = {}
    ret = np.flatnonzero(kind == N_RETURN)
    ret_keys = keys(row[ret], end[ret])
    ret_order = np.argsort(ret_keys, kind="stable")
    ret, ret_keys = ret[ret_order], ret_keys[ret_order]
    del ret_order
    chunks = [(ek, c) for ek in range(E_LAUNCH, E_MPI_COLLECTIVE + 1)
              for m in [np.flatnonzero(ekind == ek)] for c in
              np.array_split(m, max(1, -(-m.size // EDGE_CHUNK))) if c.size]

    def match(ek: int, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(pred, succ, lag) of the lines `m` of kind `ek` that became edges, and how many
        did."""
        sr, st, rr, rt = (lines[c][m] for c in ("send_row", "send", "recv_row", "recv"))
        # the predecessor: the node of the sending row that holds the line's start (an NCCL
        # line leaves from the arrival of the participant that came last: the node starting
        # there)
        if ek == E_NCCL:
            p = _node_at(start_keys, start_order, keys(sr, st))
        else:
            p = _first_ending(end_keys, end_order, keys(sr, st))
        okp = p >= 0
        okp[okp] &= (row[p[okp]] == sr[okp]) & (start[p[okp]] <= st[okp])
        # the successor: the GPU node starting at the line's end (launch, stream wait), the
        # NCCL completion ending there, or the return the line ends in (sync, MPI)
        if ek in (E_LAUNCH, E_STREAM_WAIT):
            s_ = _node_at(start_keys, start_order, keys(rr, rt))
        elif ek == E_NCCL:
            q = keys(rr, rt)
            i = _search(end_keys, q, side="right") - 1  # the last node ending there
            s_ = np.full(q.size, -1, dtype=np.int64)
            ok = i >= 0
            ok[ok] &= end_keys[i[ok]] == q[ok]
            s_[ok] = end_order[i[ok]]
            ok2 = s_ >= 0
            ok2[ok2] &= kind[s_[ok2]] == N_NCCL
            s_[~ok2] = -1
        else:
            s_ = _first_ending(ret_keys, ret, keys(rr, rt))
            ok2 = s_ >= 0
            ok2[ok2] &= (row[s_[ok2]] == rr[ok2]) & (start[s_[ok2]] <= rt[ok2])
            s_[~ok2] = -1
        good = okp & (s_ >= 0)
        good[good] &= p[good] != s_[good]
        return (p[good].astype(np.int32), s_[good].astype(np.int32), st[good] - end[p[good]],
                int(good.sum()))

    # chunks of lines (a million at a time: bounded temporaries), two threads at once
    with ThreadPoolExecutor(max_workers=2) as pool:
        matched = list(pool.map(lambda c: match(*c), chunks))
    for (ek, m), (p, s_, lag, found) in zip(chunks, matched):
        name = EDGE_NAMES[ek]
        counts[name] = counts.get(name, 0) + found
        if m.size > found:
            lost = f"{name} lines without their work"
            counts[lost] = counts.get(lost, 0) + int(m.size - found)
        preds.append(p)
        succs.append(s_)
        lags.append(lag)
        kinds.append(np.full(found, ek, dtype=np.int8))
    del matched
    # (two lines between the same two nodes make two equal edges: harmless to the
    # evaluation, which takes the latest ready time)
    if not preds:
        empty = np.zeros(0, dtype=np.int32)
        return empty, empty, np.zeros(0, np.int64), np.zeros(0, np.int8), counts
    return (np.concatenate(preds).astype(np.int32), np.concatenate(succs).astype(np.int32),
            np.concatenate(lags), np.concatenate(kinds), counts)


# ----------------------------------------------------------------------- what-if --

_TERM = re.compile(r"^(kernel:(?P<glob>.+)|rank:(?P<rank>\d+)|(?P<what>nccl|memcpy|memset|host"
                   r"|gaps))=(?P<factor>[0-9.eE+-]+)$")


def parse_what_if(text: str) -> WhatIf:
    """'kernel:gemm*=0.5', 'nccl=0', 'gaps=0', 'rank:3=0', 'host=0.8', several joined by
    commas."""
    kernels: list[tuple[str, float]] = []
    ranks: list[tuple[int, float]] = []
    other: dict = {}
    for term in (t.strip() for t in text.split(",")):
        m = _TERM.match(term)
        if not m:
            raise UsageError(f"--what-if '{term}': expected kernel:GLOB=F, nccl=F, memcpy=F, "
                             "memset=F, host=F, rank:N=F or gaps=0")
        try:
            factor = float(m["factor"])
        except ValueError:
            raise UsageError(f"--what-if '{term}': bad factor") from None
        if factor < 0:
            raise UsageError(f"--what-if '{term}': a factor is >= 0")
        if m["glob"]:
            kernels.append((m["glob"], factor))
        elif m["rank"]:
            ranks.append((int(m["rank"]), factor))
        elif m["what"] == "gaps":
            if factor != 0:
                raise UsageError("--what-if gaps=0 is the only form of gaps")
            other["gaps"] = False
        else:
            other[m["what"]] = factor
    return WhatIf(text, tuple(kernels), ranks=tuple(ranks), **other)


def evaluate(g: Graph, w: WhatIf | None = None) -> Evaluation:
    """The graph's times with the durations of `w` (None: as measured)."""
    from .graph_slabs import MEASURED, Slabs, sweep

    slabs = Slabs(g)
    sweep(slabs, w)
    return slabs.result(MEASURED, 0)


def last_node(g: Graph, ev: Evaluation, until: int | None = None) -> int | None:
    """The work of the job that ends last (by `until`, if given): where the path ends (of
    several ending together, the latest in topological order)."""
    ok = connected(g) if g.n else np.zeros(0, dtype=bool)
    if not ok.any():  # no GPU and no dependency (a CPU-only run): every thread counts
        ok = np.ones(g.n, dtype=bool)
    if until is not None:
        ok &= ev.end <= until
    if not ok.any():
        return None
    ends = np.where(ok, ev.end, np.iinfo(np.int64).min)
    top = ends.max()
    return int(np.flatnonzero(ends == top)[-1])


def path_nodes(g: Graph, ev: Evaluation, last: int | None = None,
               stop: int | None = None) -> np.ndarray:
    """The nodes of the critical path, earliest first: back from `last` (default: the
    job's work that ends last, `last_node`) through the binding edges, while they end
    after `stop`."""
    from .graph_slabs import Slabs, walk

    if last is None:
        last = last_node(g, ev)
    if last is None:
        return np.zeros(0, dtype=np.int64)
    slabs = Slabs(g)
    slabs.put("given", 0, start=ev.start, end=ev.end, binding=ev.binding)
    return np.concatenate([here for *_, here, _ in walk(slabs, last, stop, "given")]
                          or [np.zeros(0, np.int64)])


# --------------------------------------------------------------------- the path's time --

def _call_category(name: str) -> str:
    """What a CUDA call is, for the path's composition."""
    n = name.lower()
    if "launch" in n:
        return "launch overhead (CUDA launch calls)"
    if "synchronize" in n or "streamwait" in n or "eventquery" in n or "streamquery" in n:
        return "CUDA synchronisation"
    if "memcpy" in n or "memset" in n:
        return "CUDA memcpy/memset calls"
    return "other CUDA calls"


def _labels_of(vtype: np.ndarray, value: np.ndarray, kind: np.ndarray,
               names: dict[int, dict[int, str]]) -> pl.DataFrame:
    """(vtype, value, nkind, category, detail) of every distinct (type, value, kind) of the
    columns given."""
    pairs = pl.DataFrame({"vtype": np.asarray(vtype, np.int64),
                          "value": np.asarray(value, np.int64),
                          "nkind": np.asarray(kind, np.int8)}).unique()
    out = []
    for t, v, k in pairs.iter_rows():  # once per distinct name, not per node
        label = names.get(t, {}).get(v, str(v))
        if k == N_KERNEL:
            out.append((t, v, k, "kernels", label))
        elif k in (N_NCCL, N_NCCL_ARRIVE):
            out.append((t, v, k, "NCCL", label))
        elif k == N_MEMCPY:
            out.append((t, v, k, "memcpy", label))
        elif k == N_MEMSET:
            out.append((t, v, k, "memset", label))
        elif t in MPI_CALLS:
            out.append((t, v, k, "MPI", label))
        else:
            out.append((t, v, k, _call_category(label), label))
    return pl.DataFrame(out, schema={"vtype": pl.Int64, "value": pl.Int64, "nkind": pl.Int8,
                                     "category": pl.Categorical, "detail": pl.Categorical},
                        orient="row")


@dataclass
class _Segments:
    """The path's segments as numpy columns in time order (codes into `cats`, `dets`)."""

    start: np.ndarray
    end: np.ndarray
    row: np.ndarray  # int32, -1: before the first work / after the last
    cat: np.ndarray  # int32 into cats
    det: np.ndarray  # int32 into dets
    node: np.ndarray  # int64, -1: none
    cats: list[str]
    dets: list[str]


SEGMENT_SCHEMA = {"start": pl.Int64, "end": pl.Int64, "row": pl.Int32,
                  "category": pl.Categorical, "detail": pl.Categorical, "node": pl.Int64}


def path_segments(g: Graph, ev: Evaluation, path: np.ndarray,
                  span: tuple[int, int] | None = None) -> pl.DataFrame:
    """The path's time as segments (start, end, row, category, detail, node), tiling
    `span` (default: the graph's): each node's time up to where its successor on the path
    became ready (a host node split into host compute and its call), the slack before
    each node (launch latency after a launch edge, else waiting no work explains), and
    the time before the path's first node and after its last. Built in numpy; category and
    detail are categoricals (a path of millions of nodes holds numbers, not strings)."""
    lo, hi = span or g.span
    if path.size == 0:
        return _frame(_waiting((lo, hi)))
    on_path = Evaluation(ev.start[path], ev.end[path], ev.binding[path])
    return _frame(_segment_arrays(g, on_path, path, (lo, hi), ends=True))


def _frame(a: _Segments) -> pl.DataFrame:
    """Segments in numpy columns as a table (`path_segments`)."""
    cat_s = pl.Series("category", a.cats, dtype=pl.Categorical)
    det_s = pl.Series("detail", a.dets, dtype=pl.Categorical)
    return pl.DataFrame({
        "start": a.start, "end": a.end,
        "row": pl.Series(a.row.astype(np.int32)).replace(-1, None),
        "category": cat_s.gather(a.cat), "detail": det_s.gather(a.det),
        "node": pl.Series(a.node.astype(np.int64)).replace(-1, None)}).cast(SEGMENT_SCHEMA)


def _waiting(span: tuple[int, int]) -> _Segments:
    """The segments of a span with no path: waiting, all of it."""
    one = np.ones(1, dtype=np.int32)
    return _Segments(np.array([span[0]]), np.array([span[1]]), -one, 2 * one, 0 * one,
                     np.array([-1]), [HOST_COMPUTE, LATENCY, WAITING, BEFORE, AFTER], [""])


def _edge_segments(span: tuple[int, int], first_start: int, last_end: int) -> _Segments:
    """The time before the path's first node and after its last, clipped to `span`, those
    not empty."""
    lo, hi = span
    s0 = np.clip(np.array([lo, last_end]), lo, hi)
    e0 = np.clip(np.array([first_start, hi]), lo, hi)
    keep = np.flatnonzero(e0 > s0)
    z = np.zeros(keep.size, dtype=np.int32)
    return _Segments(s0[keep], e0[keep], z - 1, np.array([3, 4], np.int32)[keep], z,
                     np.full(keep.size, -1, np.int64),
                     [HOST_COMPUTE, LATENCY, WAITING, BEFORE, AFTER], [""])


def _segment_arrays(g: Graph, on_path: Evaluation, path: np.ndarray, span: tuple[int, int],
                    after=None, ends: bool = False) -> _Segments:
    """The segments of `path` (ids in `g`, a path or the part of one in a slab, not empty)
    in numpy columns, clipped to `span`, those not empty, in time order; `on_path`: the
    evaluation of its nodes; `after`: the path's next node (`graph_slabs.Next`) when it
    goes on in a later slab; `ends`: with the time before the path and after it."""
    lo, hi = span
    parts, cats, dets = _segment_parts(g, on_path, path, after)
    if ends:
        e = _edge_segments(span, int(on_path.start[0]), int(on_path.end[-1]))
        parts.append((e.start, e.end, e.row, e.cat, e.det, e.node))
    s0 = np.clip(np.concatenate([p[0] for p in parts]), lo, hi)
    e0 = np.clip(np.concatenate([p[1] for p in parts]), lo, hi)
    keep = np.flatnonzero(e0 > s0)
    # the parts are each in time order and the kept segments tile the span: a stable sort
    # on the start merges them (ties, which tiling rules out, fall back to start, end)
    order = keep[np.argsort(s0[keep], kind="stable")]
    if order.size > 1 and not (np.diff(s0[order]) > 0).all():
        order = keep[np.lexsort((e0[keep], s0[keep]))]
    del keep
    r0, c0, d0, n0 = (np.concatenate([p[i] for p in parts])[order] for i in range(2, 6))
    del parts
    return _Segments(s0[order], e0[order], r0.astype(np.int32), c0.astype(np.int32),
                     d0.astype(np.int32), n0.astype(np.int64), cats, dets)


def _segment_parts(g: Graph, on_path: Evaluation, path: np.ndarray, after=None
                   ) -> tuple[list[tuple[np.ndarray, ...]], list[str], list[str]]:
    """The path's segments as three parts, each in time order, not clipped: (start, end,
    row, category code, detail code, node id) columns; and the categories' and details'
    names. `on_path`: the evaluation of the path's nodes; `after`: its next node in a
    later slab (`_segment_arrays`)."""
    start, end = on_path.start, on_path.end
    _, lag, ekind = g.edges_of(path[1:], on_path.binding[1:])  # into each next node
    rows = g.row[path]
    nodes = path + g.offset
    next_start, next_row, next_node = start[1:], rows[1:], nodes[1:]
    if after is not None:  # the last node's successor is in a later slab
        lag, ekind = np.append(lag, after.lag), np.append(ekind, after.kind)
        next_start = np.append(next_start, after.start)
        next_row = np.append(next_row, after.row).astype(rows.dtype)
        next_node = np.append(next_node, after.node)
        ready = end + lag
        cut = np.maximum(np.minimum(ready, end), start)
    else:
        ready = end[:-1] + lag
        cut = np.maximum(np.append(np.minimum(ready, end[:-1]), end[-1]), start)
    host = g.kind[path] == N_HOST
    split = np.where(host, np.clip(g.split[path] + (start - g.start[path]), start, cut), start)
    # each node's label: its (type, value, kind) looked up once per distinct triple
    def key(vtype, value, nkind):  # one int64 per (type < 2^27, value < 2^32, kind < 8)
        return ((np.asarray(vtype, np.int64) << 35) | (np.asarray(value, np.int64) << 3)
                | np.asarray(nkind, np.int64))

    vtype, value = g.vtype[path], g.value[path]
    if g.full is not None:  # kernels by their demangled name (labelled, below)
        f = g.full[path]
        named = f > 0
        vtype = np.where(named, FULL_NAME, vtype)
        value = np.where(named, f, value)
    keys = key(vtype, value, g.kind[path])
    del vtype, value
    uniq = np.unique(keys)  # hashed: a few hundred names among millions of nodes
    inverse = np.searchsorted(uniq, keys)
    del keys
    names = g.names
    if g.full is not None:
        names = {**g.names, FULL_NAME: g.kernel_labels()}
    labels = _labels_of(uniq >> 35, (uniq >> 3) & 0xFFFFFFFF, uniq & 7, names
                        ).with_columns(pl.col("category").cast(pl.Utf8),
                                       pl.col("detail").cast(pl.Utf8))
    table = dict(zip(key(labels["vtype"], labels["value"], labels["nkind"]).tolist(),
                     zip(labels["category"].to_list(), labels["detail"].to_list())))
    names = [table.get(k, ("other", "")) for k in uniq.tolist()]
    cats = [HOST_COMPUTE, LATENCY, WAITING, BEFORE, AFTER]
    cat_code = {c: i for i, c in enumerate(cats)}
    dets = [""]
    det_code = {"": 0}
    node_cat = np.empty(len(names), dtype=np.int32)
    node_det = np.empty(len(names), dtype=np.int32)
    for i, (cat, det) in enumerate(names):  # per distinct label, not per node
        node_cat[i] = cat_code.setdefault(cat, len(cats))
        if node_cat[i] == len(cats):
            cats.append(cat)
        node_det[i] = det_code.setdefault(det, len(dets))
        if node_det[i] == len(dets):
            dets.append(det)
    n = path.size
    zeros = np.zeros(n, dtype=np.int32)
    parts = [  # (start, end, row, category code, detail code, node)
        (start, split, rows, zeros, zeros, nodes),
        (split, cut, rows, node_cat[inverse], node_det[inverse], nodes),
        (np.maximum(ready, cut[:ready.size]), next_start, next_row,
         np.where(ekind == E_LAUNCH, 1, 2).astype(np.int32), zeros[:ready.size], next_node)]
    return parts, cats, dets


# ------------------------------------------------------------------------ the report --

GPU_CATEGORIES = ("kernels", "NCCL", "memcpy", "memset")
WAIT_CATEGORIES = (WAITING, LATENCY)
EDGE_CATEGORIES = (BEFORE, AFTER)


@dataclass
class Scenario:
    """A what-if: the predicted end of the analysed span, against the measured one."""

    text: str
    measured: int  # ns of the span the path covers (its last work's end - span start)
    predicted: int
    composition: pl.DataFrame  # category, time, share (of the predicted span)
    processes: pl.DataFrame | None = None  # task_index, process, time on the predicted path

    @property
    def change(self) -> float | None:
        return self.predicted / self.measured - 1 if self.measured else None


@dataclass
class CriticalPath:
    """The critical path of a trace (or a window of it) and its what-ifs (times in ns of the
    trace's time; shares of the span)."""

    span: tuple[int, int]
    segment_parts: "_Kept"  # the path's segments, part by part (`segments`)
    by_category: pl.DataFrame  # category, time, share
    by_detail: pl.DataFrame  # category, detail, time, share (kernels by name, calls ...)
    by_process: pl.DataFrame  # task_index, process, time, share, gpu, host
    longest: pl.DataFrame  # start, end, duration, row label, category, detail (runs on a row)
    bound: dict[str, float]  # share of the path on GPU work, on host work, waiting
    counts: dict[str, int]
    what_if: list[Scenario] = field(default_factory=list)
    steps: pl.DataFrame | None = None  # instance, category, time, share (with iterations)

    @property
    def segments(self) -> pl.DataFrame:
        """The path's segments in time order (start, end, row, category, detail, node):
        read back whole, for small paths and tests; `segment_parts` gives them part by
        part."""
        return pl.concat(list(self.segment_parts.frames())) if self.segment_parts.count \
            else _frame(_waiting(self.span))

    @property
    def length(self) -> int:
        """The analysed span's length (what the composition adds up to)."""
        return self.span[1] - self.span[0]

    @property
    def path_end(self) -> int:
        """When the path's last work ends (the span's end less the time after it)."""
        after = self.by_category.filter(pl.col("category") == AFTER)["time"].sum()
        return self.span[1] - int(after)

    @property
    def verdict(self) -> str:
        b = self.bound
        what = ("GPU-bound" if b["gpu"] >= max(b["host"], b["waiting"]) else
                "host-bound" if b["host"] >= b["waiting"] else "bound by waiting")
        return (f"{what}: {100 * b['gpu']:.1f} % of the critical path on GPU work, "
                f"{100 * b['host']:.1f} % on host work, {100 * b['waiting']:.1f} % waiting")

    def to_dict(self) -> dict:
        return {"span": list(self.span), "length": self.length, "path_end": self.path_end,
                "verdict": self.verdict,
                "bound": self.bound, "counts": self.counts,
                "by_category": self.by_category.to_dicts(),
                "by_detail": self.by_detail.to_dicts(),
                "by_process": self.by_process.to_dicts(),
                "longest": self.longest.to_dicts(),
                "what_if": [{"what_if": s.text, "measured_ns": s.measured,
                             "predicted_ns": s.predicted, "change": s.change,
                             "by_category": s.composition.to_dicts(),
                             "by_process": None if s.processes is None else
                             s.processes.to_dicts()} for s in self.what_if],
                "steps": None if self.steps is None else self.steps.to_dicts()}


def _by_category(seg: pl.DataFrame, total: int) -> pl.DataFrame:
    d = pl.col("end") - pl.col("start")
    return (seg.group_by("category").agg(d.sum().alias("time"))  # then the few names
            .with_columns(pl.col("category").cast(pl.Utf8),
                          (pl.col("time") / max(total, 1)).alias("share"))
            .sort("time", "category", descending=[True, False]))


def _bound(by_cat: pl.DataFrame) -> dict[str, float]:
    """Shares of the path's own time (the span less the time before its first work and
    after its last) on GPU work, on host work and waiting."""
    t = dict(by_cat.select("category", "time").iter_rows())
    gpu = sum(t.get(k, 0) for k in GPU_CATEGORIES)
    waiting = sum(t.get(k, 0) for k in WAIT_CATEGORIES)
    host = sum(v for k, v in t.items() if k not in GPU_CATEGORIES and k not in WAIT_CATEGORIES
               and k not in EDGE_CATEGORIES)
    own = max(gpu + waiting + host, 1)
    return {"gpu": gpu / own, "host": host / own, "waiting": waiting / own}


class _Kept:
    """The path's segments, part by part (for its trace, `write_path_trace`): held, or
    written beside the graph's slabs (`dir`). Parts come latest first (the walk's order)."""

    def __init__(self, dir: Path | None = None) -> None:
        self.dir = dir
        self._parts: list[pl.DataFrame | Path] = []

    @property
    def count(self) -> int:
        return len(self._parts)

    def add(self, frame: pl.DataFrame) -> None:
        if self.dir is None:
            self._parts.append(frame)
            return
        path = self.dir / f"segments.{len(self._parts):06d}.arrow"
        frame.write_ipc(path)
        self._parts.append(path)

    def frames(self) -> Iterable[pl.DataFrame]:
        """The parts in time order."""
        for part in reversed(self._parts):
            yield part if isinstance(part, pl.DataFrame) else pl.read_ipc(part)


@dataclass
class _Run:
    """A run of the path on one row (consecutive segments on it): its span, its time by
    (category, detail), its first node (None: none)."""

    start: int
    end: int
    row: int
    times: dict[tuple[str, str], int]
    first: int | None

    def joined(self, later: "_Run") -> "_Run":
        times = dict(self.times)
        for k, v in later.times.items():
            times[k] = times.get(k, 0) + v
        firsts = [f for f in (self.first, later.first) if f is not None]
        return _Run(self.start, max(self.end, later.end), self.row, times,
                    min(firsts) if firsts else None)


def _runs_of(a: _Segments, top: int) -> list[_Run]:
    """The runs of a part of the path (segments in time order) that can be among the `top`
    longest: its `top` longest and its first and last (which may go on in the parts beside
    it), in time order."""
    on = np.flatnonzero(a.row >= 0)
    if on.size == 0:
        return []
    start, end, row = a.start[on], a.end[on], a.row[on]
    first = np.flatnonzero(np.append(True, row[1:] != row[:-1]))
    last = np.append(first[1:], row.size)
    run_start, run_end = start[first], np.maximum.reduceat(end, first)
    pick = set(np.lexsort((run_start, -(run_end - run_start)))[:top].tolist())
    pick |= {0, first.size - 1}
    ndet = len(a.dets)
    code = a.cat[on].astype(np.int64) * ndet + a.det[on]
    node = a.node[on]
    out = []
    for k in sorted(pick):
        lo, hi = int(first[k]), int(last[k])
        u, inv = np.unique(code[lo:hi], return_inverse=True)
        t = np.bincount(inv, weights=end[lo:hi] - start[lo:hi])
        times = {(a.cats[c // ndet], a.dets[c % ndet]): int(round(v))
                 for c, v in zip(u.tolist(), t.tolist())}
        nodes = node[lo:hi][node[lo:hi] >= 0]
        out.append(_Run(int(run_start[k]), int(run_end[k]), int(row[lo]), times,
                        int(nodes.min()) if nodes.size else None))
    return out


class _PathTables:
    """What a path's segments add up to, given part by part (latest first, as the walk
    gives them): the time by category and detail and by row and category; with `top`, the
    longest runs on one row; with `kept`, the segments themselves. Memory: a few numbers
    per name, per row and per run kept, not per segment."""

    def __init__(self, span: tuple[int, int], top: int = 0, kept: _Kept | None = None
                 ) -> None:
        self.span = span
        self.total = span[1] - span[0]
        self.top, self.kept = top, kept
        self.det_time: dict[tuple[str, str], int] = {}
        self.row_time: dict[tuple[int, str], int] = {}
        self.runs: list[list[_Run]] = []  # per part, latest part first

    def add(self, a: _Segments) -> None:
        if self.kept is not None:
            self.kept.add(_frame(a))
        if a.start.size == 0:
            return
        d = a.end - a.start
        ndet, ncat = len(a.dets), len(a.cats)
        for key, names, out in (
                (a.cat.astype(np.int64) * ndet + a.det,
                 lambda c: (a.cats[c // ndet], a.dets[c % ndet]), self.det_time),
                (a.row.astype(np.int64) * ncat + a.cat,
                 lambda c: (c // ncat, a.cats[c % ncat]), self.row_time)):
            ok = key >= 0  # (rows: -1 is none)
            u, inv = np.unique(key[ok], return_inverse=True)
            t = np.bincount(inv, weights=d[ok], minlength=u.size)
            for c, v in zip(u.tolist(), t.tolist()):
                k = names(c)
                out[k] = out.get(k, 0) + int(round(v))
        if self.top:
            self.runs.append(_runs_of(a, self.top))

    def by_category(self) -> pl.DataFrame:
        per: dict[str, int] = {}
        for (cat, _), t in self.det_time.items():
            per[cat] = per.get(cat, 0) + t
        return (pl.DataFrame({"category": list(per), "time": list(per.values())},
                             schema={"category": pl.Utf8, "time": pl.Int64})
                .with_columns((pl.col("time") / max(self.total, 1)).alias("share"))
                .sort("time", "category", descending=[True, False]))

    def by_detail(self) -> pl.DataFrame:
        keys = list(self.det_time)
        return (pl.DataFrame({"category": [k[0] for k in keys], "detail": [k[1] for k in keys],
                              "time": list(self.det_time.values())},
                             schema={"category": pl.Utf8, "detail": pl.Utf8, "time": pl.Int64})
                .with_columns((pl.col("time") / max(self.total, 1)).alias("share"))
                .sort("time", "category", "detail", descending=[True, False, False]))

    def by_process(self, rows: pl.DataFrame) -> pl.DataFrame:
        """Per process: the path's time on its rows, of which on GPU work and on host
        work."""
        keys = list(self.row_time)
        per_row = pl.DataFrame({"row": [k[0] for k in keys], "category": [k[1] for k in keys],
                                "t": list(self.row_time.values())},
                               schema={"row": pl.Int32, "category": pl.Utf8, "t": pl.Int64}
                               ).with_columns(pl.col("category").is_in(list(GPU_CATEGORIES))
                                              .alias("gpu"))
        labels = rows.group_by("task_index").agg(pl.col("task_label").first().alias("process"))
        t, gpu = pl.col("t"), pl.col("gpu")
        return (per_row.join(rows.select("row", "task_index"), on="row", how="inner")
                .group_by("task_index").agg(t.sum().alias("time"),
                                            t.filter(gpu).sum().alias("gpu"),
                                            t.filter(~gpu).sum().alias("host"))
                .join(labels, on="task_index", how="left")
                .with_columns((pl.col("time") / max(self.total, 1)).alias("share"))
                .select("task_index", "process", "time", "gpu", "host", "share")
                .sort("time", "task_index", descending=[True, False]))

    def longest(self, rows: pl.DataFrame, slabs) -> pl.DataFrame:
        """Runs of the path on one row, the longest first (`top` of them), with what takes
        most of each and the NVTX range it is in."""
        done: list[_Run] = []
        chain: _Run | None = None
        for runs in reversed(self.runs):  # in time order; a run may go on across parts
            if not runs:
                continue
            head = runs[0]
            if chain is not None and chain.row == head.row:
                head = chain.joined(head)
            elif chain is not None:
                done.append(chain)
            if len(runs) == 1:
                chain = head
                continue
            done.append(head)
            done.extend(runs[1:-1])
            chain = runs[-1]
        if chain is not None:
            done.append(chain)
        schema = {"start": pl.Int64, "end": pl.Int64, "duration": pl.Int64, "label": pl.Utf8,
                  "category": pl.Utf8, "detail": pl.Utf8, "nvtx": pl.Utf8}
        if not done:
            return pl.DataFrame(schema=schema)
        start = np.array([r.start for r in done], dtype=np.int64)
        duration = np.array([r.end for r in done], dtype=np.int64) - start
        label_of = dict(rows.select(pl.col("row").cast(pl.Int64), "label").iter_rows())
        kind_of = dict(rows.select(pl.col("row").cast(pl.Int64), "kind").iter_rows())
        out = []
        for k in np.lexsort((start, -duration))[:self.top].tolist():
            r = done[k]
            most = max(r.times.values())
            main = min(key for key, v in r.times.items() if v == most)
            run = {"row": r.row, "start": r.start, "end": r.end, "kind": kind_of.get(r.row),
                   "first": r.first}
            out.append((r.start, r.end, r.end - r.start, label_of.get(r.row), main[0],
                        main[1], _nvtx_of(slabs, run)))
        return pl.DataFrame(out, schema=schema, orient="row")


def _nvtx_of(slabs, run: dict) -> str | None:
    """The innermost NVTX range open on the host thread of a run of the path: its own row at
    its middle, or, for a GPU run, the thread whose call launched its first work, at the
    launch."""
    from .graph_slabs import MEASURED

    if slabs.nvtx is None or slabs.nvtx.height == 0:
        return None
    row, t = run["row"], (run["start"] + run["end"]) // 2
    if run["kind"] != "cpu":
        first = run["first"]
        if first is None:
            return None
        s = slabs.slab_of(first)
        p, ev = slabs.part(s), slabs.result(MEASURED, s)
        here = np.array([first - p.offset])
        pred, lag, kind = p.edges_of(here, ev.binding[here])
        if pred[0] < 0 or kind[0] != E_LAUNCH:
            return None
        at = pred[:1]
        row = int(slabs.gather(at, "row")[0])
        t = int(slabs.gather(at, "end", MEASURED)[0] + lag[0])
    return slabs.nvtx.innermost(row, t)


def _follow(slabs, last: int | None, tables: _PathTables, key: str | None = None,
            stop: int | None = None) -> int | None:
    """Walk the path of evaluation `key` back from node `last` (while its nodes end after
    `stop`) into `tables`, part by part; the end of its last node (None: no path)."""
    from .graph_slabs import MEASURED, walk

    span = tables.span
    last_end = first_start = None
    for p, ev, here, after in walk(slabs, last, stop, key or MEASURED):
        on = Evaluation(ev.start[here], ev.end[here], ev.binding[here])
        if last_end is None:
            last_end = int(on.end[-1])
            tables.add(_edge_segments(span, span[0], last_end))  # after the path
        tables.add(_segment_arrays(p, on, here, span, after))
        first_start = int(on.start[0])
    if last_end is None:
        tables.add(_waiting(span))
        return None
    tables.add(_edge_segments(span, first_start, span[1]))  # before the path
    return last_end


def critical_path(g, what_if: Iterable[WhatIf] = (), top: int = 10) -> CriticalPath:
    """The critical path over the graph's span (a `Graph`, or its `graph_slabs.Slabs`),
    its composition, and each what-if (another evaluation of the graph, slab by slab)."""
    from .graph_slabs import Slabs, sweep

    slabs = g if isinstance(g, Slabs) else Slabs(g)
    lo, hi = slabs.span
    rows = slabs.rows.select(pl.col("row").cast(pl.Int32), "task_index", "task_label", "kind",
                             "label", "device")
    kept = _Kept(slabs.dir)
    tables = _PathTables((lo, hi), top, kept)
    last_end = _follow(slabs, sweep(slabs), tables)
    measured = last_end - lo if last_end is not None else 0
    scenarios = []
    for i, w in enumerate(what_if):
        key = f"what-if-{i}"
        last = sweep(slabs, w, key)
        end2 = lo if last is None else int(slabs.gather(np.array([last]), "end", key)[0])
        t2 = _PathTables((lo, max(end2, lo)))
        _follow(slabs, last, t2, key)
        slabs.drop(key)
        scenarios.append(Scenario(w.text, measured, end2 - lo, t2.by_category(),
                                  t2.by_process(rows)))
    by_cat = tables.by_category()
    by_detail = _with_full_names(tables.by_detail(), slabs.names, slabs.kernel_labels)
    return CriticalPath((lo, hi), kept, by_cat, by_detail, tables.by_process(rows),
                        tables.longest(rows, slabs), _bound(by_cat), dict(slabs.counts),
                        scenarios)


def _with_full_names(by_detail: pl.DataFrame, names: dict[int, dict[int, str]],
                     kernel_labels: dict[int, str]) -> pl.DataFrame:
    """`by_detail` with a `full` column: a kernel's demangled name beside its label (the
    detail), null for the rest."""
    fulls = names.get(FULL_NAME, {})
    text = {label: fulls.get(v, label) for v, label in kernel_labels.items()}
    is_kernel = pl.col("category").is_in(["kernels", "NCCL"])
    return by_detail.with_columns(
        pl.when(is_kernel).then(pl.col("detail").replace_strict(
            text, default=pl.col("detail"), return_dtype=pl.Utf8))
        .otherwise(None).alias("full"))


def step_paths(g, steps: pl.DataFrame) -> pl.DataFrame:
    """Per step (instance, start, end): the critical path inside it - back from the work
    that ends last in the step to the step's start - as (instance, category, time,
    share of the step). `g`: a `Graph` or its `graph_slabs.Slabs`."""
    from .graph_slabs import MEASURED, Slabs, sweep

    slabs = g if isinstance(g, Slabs) else Slabs(g)
    if MEASURED not in slabs.keys:
        sweep(slabs)
    parts = []
    for inst, lo, hi in steps.select("instance", "start", "end").iter_rows():
        got = slabs.last_ending(hi)  # the last work ending in the step
        if got is None or got[0] <= lo:
            continue
        tables = _PathTables((lo, hi))
        _follow(slabs, got[1], tables, MEASURED, stop=lo)
        parts.append(tables.by_category().with_columns(pl.lit(inst).alias("instance")))
    if not parts:
        return pl.DataFrame(schema={"instance": pl.Int64, "category": pl.Utf8,
                                    "time": pl.Int64, "share": pl.Float64})
    return pl.concat(parts).select(pl.col("instance").cast(pl.Int64), "category", "time",
                                   "share")


# ----------------------------------------------------------------- in Paraver --

def _path_code(category: str) -> int:
    from ..paraver.registry import critical as creg

    if category in GPU_CATEGORIES:
        return creg.PATH_GPU
    if category == LATENCY:
        return creg.PATH_LATENCY
    if category == WAITING:
        return creg.PATH_WAITING
    return creg.PATH_HOST


def _segment_events(seg: pl.DataFrame) -> pl.DataFrame:
    """(row, time, type, value) of path segments on rows: what the path does from each
    start, 0 at each end (not yet settled: `_settled`)."""
    from ..paraver.registry import critical as creg

    c = pl.col
    seg = seg.filter(c("row").is_not_null()).with_columns(
        c("category").cast(pl.Utf8).alias("category"))
    codes = {k: _path_code(k) for k in seg["category"].unique().to_list()}  # per category
    seg = seg.with_columns(c("category").replace_strict(codes, default=0,
                                                        return_dtype=pl.Int64).alias("code"))
    on = seg.select("row", c("start").alias("time"), pl.lit(creg.CRITICAL_PATH).alias("type"),
                    c("code").cast(pl.Int64).alias("value"))
    off = seg.select("row", c("end").alias("time"), pl.lit(creg.CRITICAL_PATH).alias("type"),
                     pl.lit(0, pl.Int64).alias("value"))
    return pl.concat([off, on]).cast(_EVENTS)


def _float_events(p, floats: np.ndarray) -> pl.DataFrame:
    """(row, time, type, value) of the floats of a slab's GPU activities: 1 + us at its
    start, 0 at its end (not yet settled)."""
    from ..paraver.registry import critical as creg

    gpu = np.isin(p.kind, (N_KERNEL, N_NCCL, N_MEMCPY, N_MEMSET))
    us = np.minimum(floats[gpu] // 1000 + 1, 2**31 - 1)
    row = p.row[gpu]
    return pl.DataFrame({
        "row": np.concatenate([row, row]), "time": np.concatenate([p.end[gpu], p.start[gpu]]),
        "type": np.full(2 * row.size, creg.CRITICAL_FLOAT, np.int64),
        "value": np.concatenate([np.zeros(row.size, np.int64), us.astype(np.int64)])}
    ).cast(_EVENTS)


_EVENTS = {"row": pl.Int32, "time": pl.Int64, "type": pl.Int64, "value": pl.Int64}


def _settled(events: pl.DataFrame) -> pl.DataFrame:
    """Events of one type or more, each (row, time) of a type once (a start wins over an
    end at the same instant: a row's segments that touch have no 0 between them), in
    (time, row, type) order. Settles any set of events that holds every event of its
    instants."""
    by_type = [e.sort("row", "time", "value").unique(["row", "time"], keep="last",
                                                      maintain_order=True)
               for _, e in sorted(events.partition_by("type", as_dict=True).items())]
    if not by_type:
        return events.clear()
    return pl.concat(by_type).cast(_EVENTS).sort("time", "row", "type")


def path_events(g, segments: pl.DataFrame) -> pl.DataFrame:
    """(row, time, type, value): the critical path's segments on their rows (what it is
    doing; 0 where it leaves a row) and every GPU activity's float (1 + us at its start, 0
    at its end: `graph_slabs.float_sweep`), whole. `g`: a `Graph` or its
    `graph_slabs.Slabs`."""
    from .graph_slabs import Slabs, float_sweep

    slabs = g if isinstance(g, Slabs) else Slabs(g)
    return _settled(pl.concat([_segment_events(segments)]
                              + [_float_events(p, f) for p, f in float_sweep(slabs)]))


def path_event_chunks(slabs, parts: Iterable[pl.DataFrame]) -> Iterable[pl.DataFrame]:
    """`path_events` of slabs on disk, in time order a bucket at a time (the slabs' time
    ranges: the events filed there first, from the path's segment `parts` and the float
    sweep, then settled bucket by bucket). Memory: a bucket."""
    from .graph_build import Columns
    from .graph_slabs import float_sweep

    firsts = slabs.bounds[:-1][np.diff(slabs.bounds) > 0]
    starts = slabs.gather(firsts, "start") if firsts.size else np.zeros(1, np.int64)
    schema = {"row": np.int32, "time": np.int64, "type": np.int64, "value": np.int64}
    table = Columns(slabs.dir, "path-events", schema, np.maximum.accumulate(starts))
    try:
        def file(ev: pl.DataFrame) -> None:
            if ev.height:
                cols = {c: ev[c].to_numpy() for c in schema}
                table.add(cols, cols["time"])

        for seg in parts:
            file(_segment_events(seg))
        for p, f in float_sweep(slabs):
            file(_float_events(p, f))
        for b in range(starts.size):
            got = table.read(b)
            if got["time"].size:
                yield _settled(pl.DataFrame(got).cast(_EVENTS))
    finally:
        table.drop()


def path_pcf() -> str:
    """The .pcf sections of the critical path's event types."""
    from ..paraver import pcf as pcf_mod
    from ..paraver.registry import critical as creg

    types = [pcf_mod.PcfType(t.type, t.label, dict(creg.ENUMS.get(t.values, {}))
                             if t.values else {}) for t in creg.EVENT_TYPES]
    for t in types:
        if t.values:
            t.values = {0: "End", **t.values}
    return pcf_mod.render_types(types)


def write_path_trace(trace: str | Path, output: str | Path, g, segments) -> Path:
    """A copy of `trace` with the critical path's events (`path_events`); `g`: the
    `Graph` or its `graph_slabs.Slabs`; `segments`: the path's segments (a frame, or the
    `CriticalPath.segment_parts` of slabs on disk: then written a bucket at a time)."""
    from ..paraver.insert import event_lines, write_with_events
    from .graph_slabs import Slabs

    if isinstance(g, Slabs) and g.dir is not None and isinstance(segments, _Kept):
        chunks = (event_lines(Path(trace), ev)
                  for ev in path_event_chunks(g, segments.frames()))
        return write_with_events(trace, output, chunks, path_pcf())
    if isinstance(segments, _Kept):
        segments = pl.concat(list(segments.frames()))
    events = path_events(g, segments)
    return write_with_events(trace, output, event_lines(Path(trace), events), path_pcf())
