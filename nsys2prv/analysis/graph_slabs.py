"""The critical path's graph slab by slab: its nodes in runs of consecutive ids (slabs), each
evaluated after the slabs before it, so that what the path's analysis holds is one slab,
whatever the run's length.

A graph's node ids are a topological order (`critical_path.build_graph`): every predecessor
comes before its successor. A slab is the nodes [lo, hi) with their predecessor edges (a
`Graph` whose `offset` is lo: its edges' and its rows' previous nodes are global ids).
`Slabs` holds a small graph as one slab, or keeps a large one on disk (numpy files in a
temporary directory, registered with the supervisor and removed when the object goes):

* `sweep`: the forward evaluation (engine `graph_replay`), slab after slab; the
  predecessors a slab has in earlier slabs come first, with their times read back from
  those slabs' results (`first`: given, not computed);
* `walk`: the critical path back from a node through the binding edges, slab by slab,
  latest first;
* `float_sweep`: the backward pass (`graph_float`), latest slab first; what a slab asks of
  its predecessors in earlier slabs is kept until their slab's turn.

Memory: one slab's arrays and results (~100 bytes a node), and the edges that cross the
slabs' boundaries.
"""

from __future__ import annotations

import shutil
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..engine import graph_float, graph_path, graph_replay

SLAB_NODES = 1 << 19  # nodes of a slab kept on disk (~50 MB of arrays and results)
NODE_COLUMNS = ("row", "start", "end", "split", "kind", "value", "vtype", "full", "row_prev")
NODE_DTYPES = {"row": np.int32, "start": np.int64, "end": np.int64, "split": np.int64,
               "kind": np.int8, "value": np.int32, "vtype": np.int32, "full": np.int32,
               "row_prev": np.int32}
EDGE_COLUMNS = ("pred_node", "pred_lag", "edge_kind")
RESULT_COLUMNS = ("start", "end", "binding")
MEASURED = "measured"  # the results of the graph as measured (`sweep` with no what-if)
_CACHED = 2  # slabs kept loaded (a walk and the lookups beside it)


@dataclass(frozen=True)
class Next:
    """The path's node after a slab's last one (in a later slab): when it starts, its
    binding edge's lag and kind, its row and id."""

    start: int
    lag: int
    kind: int
    row: int
    node: int


class Slabs:
    """A graph as slabs of consecutive node ids, held (`Slabs(g)`: one slab, `g` itself)
    or on disk (`Slabs.of(g)` for a graph of more than `size` nodes: `g`'s arrays can then
    be freed); the results of each evaluation (`sweep`) are kept beside them, by key."""

    def __init__(self, g, dir: Path | None = None, size: int = SLAB_NODES) -> None:
        from .graph import connected

        self.rows, self.span, self.names, self.counts = g.rows, g.span, g.names, g.counts
        self.nvtx = g.nvtx
        self.n = g.n
        connected(g)
        self.connected_rows = g.connected_rows
        self.kernel_labels = g.kernel_labels()
        self.max_end = int(g.end.max()) if g.n else 0
        self.dir = dir
        self._results: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        self.keys: set[str] = set()  # the evaluations made (`sweep`)
        self._cache: OrderedDict[int, object] = OrderedDict()
        # the connected nodes by their measured end (ties by id): the work that ends last
        # by a time (`last_ending`)
        ok = np.flatnonzero(self.connected(g.row))
        order = ok[np.argsort(g.end[ok], kind="stable")]
        conn_end, conn_id = g.end[order], order.astype(np.int64)
        del ok, order
        if dir is None:
            self.bounds = np.array([0, g.n], dtype=np.int64)
            self._held = [g]
            self._conn = (conn_end, conn_id)
            return
        self._held = None
        bounds = list(range(0, g.n, size)) + [g.n]
        self.bounds = np.array(bounds if len(bounds) > 1 else [0, 0], dtype=np.int64)
        conn_end.astype(np.int64).tofile(dir / "conn_end.bin")
        conn_id.astype(np.int64).tofile(dir / "conn_id.bin")
        self._conn = None
        del conn_end, conn_id
        for s in range(self.count):
            lo, hi = int(self.bounds[s]), int(self.bounds[s + 1])
            for c in NODE_COLUMNS:
                np.save(self._file("node", s, c), getattr(g, c)[lo:hi])
            e0, e1 = int(g.pred_ptr[lo]), int(g.pred_ptr[hi])
            np.save(self._file("node", s, "pred_ptr"), g.pred_ptr[lo:hi + 1] - e0)
            for c in EDGE_COLUMNS:
                np.save(self._file("node", s, c), getattr(g, c)[e0:e1])
        self._template = replace(g, **{c: None for c in (*NODE_COLUMNS, *EDGE_COLUMNS,
                                                             "pred_ptr")})

    @classmethod
    def stored(cls, store, bounds: np.ndarray, rows, span: tuple[int, int], names: dict,
               counts: dict[str, int], nvtx, connected_rows: np.ndarray,
               kernel_labels: dict[int, str], max_end: int) -> "Slabs":
        """Slabs whose files a builder wrote in `store`'s directory (`graph_build`):
        node.SLAB.COLUMN.npy for the node and edge columns, conn_end.bin and conn_id.bin;
        the directory goes with the object."""
        from .graph import Graph

        self = cls.__new__(cls)
        self.rows, self.span, self.names, self.counts = rows, span, names, counts
        self.nvtx = nvtx
        self.n = int(bounds[-1])
        self.connected_rows = connected_rows
        self.kernel_labels = kernel_labels
        self.max_end = max_end
        self.dir = store.dir
        self._results = {}
        self.keys = set()
        self._cache = OrderedDict()
        self._held = None
        self._conn = None
        self.bounds = bounds
        self._template = Graph(rows, span, *([None] * 11), names, counts, nvtx)
        self._finalizer = weakref.finalize(self, shutil.rmtree, store.dir, True)
        return self

    @classmethod
    def of(cls, g, size: int = SLAB_NODES) -> "Slabs":
        """`g` held when it is small, else on disk in a temporary directory (removed when
        the object goes, or by the supervisor if the process dies first); slabs given stay
        as they are."""
        if isinstance(g, Slabs):
            return g
        if g.n <= size:
            return cls(g)
        from .store import WindowStore

        store = WindowStore(prefix="nsys2prv-graph-")
        try:
            slabs = cls(g, store.dir, size)
        except BaseException:
            store.close()
            raise
        slabs._finalizer = weakref.finalize(slabs, shutil.rmtree, store.dir, True)
        return slabs

    def close(self) -> None:
        """Remove the files (a held graph: nothing)."""
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -------------------------------------------------------------------- reading --

    @property
    def count(self) -> int:
        return int(self.bounds.size - 1)

    def _file(self, key: str, s: int, column: str) -> Path:
        return self.dir / f"{key}.{s:05d}.{column}.npy"

    def slab_of(self, node: int) -> int:
        return int(np.searchsorted(self.bounds, node, side="right")) - 1

    def part(self, s: int):
        """Slab `s` as a Graph (offset: its first id)."""
        if self._held is not None:
            return self._held[0]
        got = self._cache.get(s)
        if got is None:
            cols = {c: np.load(self._file("node", s, c))
                    for c in (*NODE_COLUMNS, "pred_ptr", *EDGE_COLUMNS)}
            got = replace(self._template, offset=int(self.bounds[s]),
                          connected_rows=self.connected_rows,
                          _kernel_labels=self.kernel_labels, **cols)
            self._cache[s] = got
            while len(self._cache) > _CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(s)
        return got

    def connected(self, row: np.ndarray) -> np.ndarray:
        """Whether each row given takes part in the job's dependencies
        (`critical_path.connected`)."""
        flag = np.zeros(int(max(row.max(initial=-1), self.connected_rows.max(initial=-1))) + 1,
                        dtype=bool)
        flag[self.connected_rows] = True
        return flag[row]

    def last_ending(self, until: int) -> tuple[int, int] | None:
        """(end, id) of the connected node ending last at or before `until` (of those
        ending together, the latest id); None where none."""
        if self._conn is not None:
            ends, ids = self._conn
        elif (self.dir / "conn_end.bin").stat().st_size == 0:
            return None
        else:
            ends = np.memmap(self.dir / "conn_end.bin", dtype=np.int64, mode="r")
            ids = np.memmap(self.dir / "conn_id.bin", dtype=np.int64, mode="r")
        k = int(np.searchsorted(ends, until, side="right")) - 1
        return None if k < 0 else (int(ends[k]), int(ids[k]))

    def gather(self, ids: np.ndarray, column: str, key: str | None = None) -> np.ndarray:
        """A node column (key None) or a result column of evaluation `key` at the ids given
        (global, sorted): read from each slab's file without loading it."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._held is not None:
            src = self._held[0] if key is None else self._results[(key, 0)]
            arr = getattr(src, column) if key is None else src[column]
            return arr[ids]
        slab = np.searchsorted(self.bounds, ids, side="right") - 1
        cut = np.flatnonzero(np.diff(slab)) + 1
        parts = []
        for a, b in zip(np.append(0, cut), np.append(cut, ids.size)):
            if a == b:
                continue
            s = int(slab[a])
            if key is not None and (key, s) in self._results:
                arr = self._results[(key, s)][column]
            else:
                arr = np.load(self._file("node" if key is None else key, s, column),
                              mmap_mode="r")
            parts.append(np.array(arr[ids[a:b] - self.bounds[s]]))
            del arr
        if not parts:
            dtype = np.int64 if key is not None else np.load(
                self._file("node", 0, column), mmap_mode="r").dtype
            return np.zeros(0, dtype)
        return np.concatenate(parts)

    def put(self, key: str, s: int, **arrays: np.ndarray) -> None:
        if self._held is not None:
            self._results[(key, s)] = arrays
            return
        for c, a in arrays.items():
            np.save(self._file(key, s, c), a)

    def result(self, key: str, s: int):
        """The evaluation `key` of slab `s` (`critical_path.Evaluation`)."""
        from .graph import Evaluation

        got = self._results.get((key, s))
        if got is None:
            got = {c: np.load(self._file(key, s, c)) for c in RESULT_COLUMNS}
        return Evaluation(got["start"], got["end"], got["binding"])

    def drop(self, key: str) -> None:
        """Forget the results of evaluation `key`."""
        self.keys.discard(key)
        for k in [k for k in self._results if k[0] == key]:
            del self._results[k]
        if self.dir is not None:
            for f in self.dir.glob(f"{key}.*.npy"):
                f.unlink()


# ------------------------------------------------------------------ the passes --

def _externals(p) -> np.ndarray:
    """The predecessors of slab `p` in earlier slabs (global ids, sorted)."""
    lo = p.offset
    prev = p.row_prev[(p.row_prev >= 0) & (p.row_prev < lo)]
    return np.unique(np.concatenate([p.pred_node[p.pred_node < lo].astype(np.int64),
                                     prev.astype(np.int64)]))


def _local(ids: np.ndarray, lo: int, ext: np.ndarray) -> np.ndarray:
    """Global ids as ids of the slab at `lo` with its externals `ext` first (-1 stays)."""
    ids = ids.astype(np.int64)
    out = ids - lo + ext.size
    out_of = (ids >= 0) & (ids < lo)
    out[out_of] = np.searchsorted(ext, ids[out_of])
    out[ids < 0] = -1
    return out.astype(np.int32)


def _extended(slabs: Slabs, p) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Slab `p`'s externals (`_externals`) and its (start, end, pred_ptr, pred_node,
    row_prev) with them first: the engine's arrays, in slab ids (an external has no
    predecessor; its measured end is read from its slab)."""
    lo = p.offset
    ext = _externals(p) if lo else np.zeros(0, np.int64)
    e = ext.size
    if not e:
        pred = _local(p.pred_node, lo, ext) if lo else p.pred_node
        prev = _local(p.row_prev, lo, ext) if lo else p.row_prev
        return ext, (p.start, p.end, p.pred_ptr, pred, prev)
    return ext, (np.concatenate([np.zeros(e, np.int64), p.start]),
                 np.concatenate([slabs.gather(ext, "end"), p.end]),
                 np.concatenate([np.zeros(e, np.int64), p.pred_ptr]),
                 _local(p.pred_node, lo, ext),
                 np.concatenate([np.full(e, -1, np.int32), _local(p.row_prev, lo, ext)]))


def sweep(slabs: Slabs, w=None, key: str = MEASURED) -> int | None:
    """Evaluate the graph with the durations of what-if `w` (None: as measured), slab after
    slab, into `key`'s results; the work of the job that ends last (`critical_path.
    last_node`: of several ending together, the latest id), None where there is none."""
    from .graph import E_LAUNCH, WhatIf, scales

    w = w or WhatIf()
    slabs.keys.add(key)
    on = np.ones(256, dtype=np.uint8)
    if not w.gaps:
        on[E_LAUNCH] = 0
    best = [np.iinfo(np.int64).min, -1]  # connected work
    best_any = [np.iinfo(np.int64).min, -1]
    for s in range(slabs.count):
        p = slabs.part(s)
        n, lo = p.n, p.offset
        ext, (start_x, end_x, ptr_x, pred_x, prev_x) = _extended(slabs, p)
        e = ext.size
        scale = scales(p, w)
        scale_x = np.concatenate([np.ones(e), scale]) if e else scale
        new_start = np.zeros(e + n, dtype=np.int64)
        new_end = np.zeros(e + n, dtype=np.int64)
        binding = np.empty(e + n, dtype=np.int64)
        if e:
            new_end[:e] = slabs.gather(ext, "end", key)
        graph_replay(start_x, end_x, ptr_x, pred_x, p.pred_lag, p.edge_kind, on, scale_x,
                     new_start, new_end, binding, prev_x, e)
        new_start, new_end, binding = new_start[e:], new_end[e:], binding[e:]
        slabs.put(key, s, start=new_start, end=new_end, binding=binding)
        if n:
            conn = slabs.connected(p.row)
            for ends, target in ((np.where(conn, new_end, np.iinfo(np.int64).min), best),
                                 (new_end, best_any)):
                if target is best and not conn.any():
                    continue
                top = int(ends.max())
                if top >= target[0]:  # a later slab wins a tie (the latest id)
                    target[0], target[1] = top, lo + int(np.flatnonzero(ends == top)[-1])
    if best[1] >= 0:
        return best[1]
    return best_any[1] if best_any[1] >= 0 else None


def walk(slabs: Slabs, last: int | None, stop: int | None = None, key: str = MEASURED
         ) -> Iterator[tuple[object, object, np.ndarray, Next | None]]:
    """The critical path back from node `last` through the binding edges of evaluation
    `key`, while its nodes end after `stop`: per slab, latest first, (the slab, its
    evaluation, the path's nodes in it as slab ids in time order, the path's next node
    after them or None)."""
    from .graph import E_ORDER, ORDER

    node = last
    after: Next | None = None
    stop = -(2**62) if stop is None else stop
    while node is not None and node >= 0:
        s = slabs.slab_of(node)
        p = slabs.part(s)
        ev = slabs.result(key, s)
        lo = p.offset
        # predecessors in earlier slabs become negative: the walk stops before them
        pred = (p.pred_node.astype(np.int64) - lo).astype(np.int32) if lo else p.pred_node
        prev = np.where(p.row_prev >= 0, p.row_prev.astype(np.int64) - lo, -1).astype(
            np.int32) if lo else p.row_prev
        out = np.empty(p.n, dtype=np.int64)
        k = graph_path(ev.binding, pred, ev.end, node - lo, stop, out, prev)
        if k == 0:
            return
        here = out[:k][::-1].copy()
        yield p, ev, here, after
        first = int(here[0])
        b = int(ev.binding[first])
        lag = int(p.pred_lag[b]) if b >= 0 else 0
        kind = int(p.edge_kind[b]) if b >= 0 else E_ORDER
        after = Next(int(ev.start[first]), lag, kind, int(p.row[first]), lo + first)
        up = int(p.row_prev[first]) if b == ORDER else int(p.pred_node[b]) if b >= 0 else -1
        node = up if 0 <= up < lo else None


def float_sweep(slabs: Slabs, until: int | None = None) -> Iterator[tuple[object, np.ndarray]]:
    """Each node's float (`critical_path.float_of`), slab by slab, latest first: (the slab,
    its nodes' floats)."""
    on = np.ones(256, dtype=np.uint8)
    until = slabs.max_end if until is None else until
    big = np.iinfo(np.int64).max
    asked_ids = np.zeros(0, np.int64)  # caps later slabs put on nodes of earlier ones
    asked = np.zeros(0, np.int64)
    for s in reversed(range(slabs.count)):
        p = slabs.part(s)
        n, lo = p.n, p.offset
        ext, (start_x, end_x, ptr_x, pred_x, prev_x) = _extended(slabs, p)
        e = ext.size
        latest = np.full(e + n, big, dtype=np.int64)
        mine = (asked_ids >= lo) & (asked_ids < lo + n)
        if mine.any():
            np.minimum.at(latest, asked_ids[mine] - lo + e, asked[mine])
            asked_ids, asked = asked_ids[~mine], asked[~mine]
        graph_float(start_x, end_x, ptr_x, pred_x, p.pred_lag, p.edge_kind, on, until,
                    latest, prev_x, e, True)
        if e:
            asked_ids = np.concatenate([asked_ids, ext])
            asked = np.concatenate([asked, latest[:e]])
            if asked_ids.size > 4 * max(e, 1024):  # one cap a node
                u, inv = np.unique(asked_ids, return_inverse=True)
                low = np.full(u.size, big, dtype=np.int64)
                np.minimum.at(low, inv, asked)
                asked_ids, asked = u, low
        yield p, latest[e:] - p.end
