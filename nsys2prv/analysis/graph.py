"""The critical path's dependency graph as data: its node and edge kinds, the `Graph` of
nodes in topological order with their predecessor edges, the orders its builders sort by,
the what-if factors and an evaluation's results. The graph's builders
(`critical_path.build_graph` in memory, `graph_build` on disk), its slabs (`graph_slabs`)
and the critical path's analysis (`critical_path`) all read these; this module reads none of
them.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..paraver.registry import cuda, deps, graphs
from ..paraver.registry import mpi as mpi_reg

KERNEL, NCCL_KERNEL, MEMOP = cuda.CUDA_KERNEL, cuda.NCCL_KERNEL, cuda.MEMORY_OPERATION
CUDA_CALL = cuda.CUDA_CALL
MPI_CALLS = tuple(mpi_reg.CALL_TYPES)
GPU_TYPES = (KERNEL, NCCL_KERNEL, MEMOP)
HOST_TYPES = (CUDA_CALL, *MPI_CALLS)
TYPES = frozenset((*GPU_TYPES, *HOST_TYPES))

# node kinds
(N_KERNEL, N_NCCL, N_NCCL_ARRIVE, N_MEMCPY, N_MEMSET, N_HOST, N_RETURN) = range(7)
ORDER = -2  # a binding on the row's previous node (engine/_graph.c)
EDGE_CHUNK = 1 << 20  # lines matched to their nodes at a time
# edge kinds (the what-if switches them by kind)
(E_ORDER, E_LAUNCH, E_STREAM_WAIT, E_HOST_SYNC, E_NCCL, E_MPI, E_MPI_COLLECTIVE) = range(7)
EDGE_NAMES = ("order", "launch", "stream wait", "GPU -> host sync", "NCCL collective",
              "MPI message", "MPI collective")
LAUNCH_TAGS = (cuda.TAG_KERNEL_LAUNCH, cuda.TAG_NCCL_LAUNCH, cuda.TAG_MEMORY_OPERATION,
               graphs.TAG_GRAPH_LAUNCH)
WAIT_TAGS = (deps.TAG_STREAM_WAIT, deps.TAG_STREAM_WAIT_INFERRED)
FULL_NAME = cuda.KERNEL_FULL_NAME  # a kernel's demangled name, at its start


@dataclass
class Graph:
    """Nodes in topological order (numpy arrays) and their predecessor edges (CSR)."""

    rows: pl.DataFrame  # the trace's rows (row, kind, task_index, device, label, ...)
    span: tuple[int, int]  # the analysed span [start, end) of the trace's time
    row: np.ndarray  # int32
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    split: np.ndarray  # int64: a host node's call start (before it: host compute)
    kind: np.ndarray  # int8 (N_*)
    value: np.ndarray  # int64: kernel / call / memory-operation value (names)
    vtype: np.ndarray  # int64: the event type of `value`
    pred_ptr: np.ndarray  # int64, n + 1 (the line edges; a row's order is `row_prev`)
    pred_node: np.ndarray  # int32
    pred_lag: np.ndarray  # int64
    edge_kind: np.ndarray  # uint8 (E_*)
    names: dict[int, dict[int, str]]  # the .pcf's value labels by type
    counts: dict[str, int] = field(default_factory=dict)  # edges by kind, lines unmatched
    nvtx: object | None = None  # its NVTX push/pops (critical_path.NvtxStacks, StoredNvtx)
    # the previous node of each node's row (-1: none): the order edges, implicit (lag 0)
    row_prev: np.ndarray | None = None
    connected_rows: np.ndarray | None = None  # rows in the job's dependencies (`connected`)
    # int32: a kernel node's demangled name (FULL_NAME value; 0: none, or not a kernel)
    full: np.ndarray | None = None
    _kernel_labels: dict[int, str] | None = None
    # the id of the first node (a slab of a larger graph, `graph_slabs`: its edges' and its
    # rows' previous nodes are ids of the whole graph)
    offset: int = 0

    def kernel_labels(self) -> dict[int, str]:
        """Demangled-name value -> its label (`labels.distinct_labels` over every kernel
        of the graph: the path's kernels of one short name told apart, alike in every
        list of this trace)."""
        if self._kernel_labels is None:  # (assigned once whole: never seen half made)
            pairs = np.zeros(0, np.int64)
            if self.full is not None and self.full.size:
                k = np.flatnonzero(np.isin(self.kind, (N_KERNEL, N_NCCL, N_NCCL_ARRIVE))
                                   & (self.full > 0))
                pairs = np.unique((self.value[k].astype(np.int64) << 32)
                                  | self.full[k].astype(np.int64))
            self._kernel_labels = kernel_labels_of(pairs, self.names)
        return self._kernel_labels

    @property
    def n(self) -> int:
        return int(self.start.size)

    def edges_of(self, nodes: np.ndarray, binding: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pred, lag, kind) of the binding edges of `nodes` (`Evaluation.binding` values:
        an index into the line edges, ORDER for the row's previous node; -1 gives pred -1)."""
        b = np.asarray(binding)
        line = b >= 0
        bi = np.where(line, b, 0)
        pred = np.where(line, self.pred_node[bi] if self.pred_node.size else -1,
                        np.where(b == ORDER, self.row_prev[nodes], -1)).astype(np.int64)
        lag = np.where(line, self.pred_lag[bi] if self.pred_lag.size else 0, 0)
        kind = np.where(line, self.edge_kind[bi] if self.edge_kind.size else E_ORDER,
                        E_ORDER).astype(np.uint8)
        return pred, lag, kind


def kernel_labels_of(pairs: np.ndarray, names: dict[int, dict[int, str]]) -> dict[int, str]:
    """`Graph.kernel_labels` of the kernels' (value << 32 | demangled-name value) pairs."""
    if not pairs.size:
        return {}
    from .labels import distinct_labels

    shorts = {**names.get(NCCL_KERNEL, {}), **names.get(KERNEL, {})}
    fulls = names.get(FULL_NAME, {})
    sv, fv = (pairs >> 32).tolist(), (pairs & 0xFFFFFFFF).tolist()
    texts = [fulls.get(f, shorts.get(v, str(v))) for v, f in zip(sv, fv)]
    labels = distinct_labels(texts, [shorts.get(v, "") for v in sv])
    return {f: labels[t] for f, t in zip(fv, texts)}


class _Keys:
    """(row, time) pairs as one sortable int64 key: row * base + time, or, where that
    could overflow, row * 2^31 + the time's rank among all the times given."""

    def __init__(self, times: list[np.ndarray], rows: int) -> None:
        lo = min((int(t.min()) for t in times if t.size), default=0)
        hi = max((int(t.max()) for t in times if t.size), default=0)
        self.lo = lo
        self.base = hi - lo + 1
        self.ranks = None
        if rows * self.base >= 2**62:
            self.ranks = np.unique(np.concatenate(times))
            self.base = 2**31

    def __call__(self, row: np.ndarray, t: np.ndarray) -> np.ndarray:
        key = row.astype(np.int64)  # one array, computed in place
        key *= self.base
        if self.ranks is not None:
            key += np.searchsorted(self.ranks, t)
        else:
            key += t
            key -= self.lo
        return key


def _classify(comms: dict[str, np.ndarray], is_cpu: np.ndarray) -> np.ndarray:
    """Each line's edge kind (-1: not a dependency, e.g. a line between two GPU rows that
    no kind describes)."""
    tag = comms["tag"]
    k = np.full(tag.size, -1, dtype=np.int8)
    cpu_to_cpu = is_cpu[comms["send_row"]] & is_cpu[comms["recv_row"]]
    k[cpu_to_cpu] = E_MPI
    for tags, kind in ((LAUNCH_TAGS, E_LAUNCH), (WAIT_TAGS, E_STREAM_WAIT),
                       ((deps.TAG_HOST_SYNC,), E_HOST_SYNC),
                       ((deps.TAG_NCCL_COLLECTIVE,), E_NCCL),
                       ((deps.TAG_MPI_COLLECTIVE,), E_MPI_COLLECTIVE)):
        k[np.isin(tag, tags)] = kind
    return k


def _sort_ties(order: np.ndarray, tie: np.ndarray, keys_of) -> None:
    """Sort in place the groups of `order` that an earlier sort left tied (`tie`: the
    positions equal to the next one) by `keys_of(nodes)` (np.lexsort's keys, last the major
    one; the groups' common key among them, so that they stay where they are), then by
    index."""
    if tie.size:
        pos = np.union1d(tie, tie + 1)
        sub = order[pos]
        order[pos] = sub[np.lexsort((sub, *keys_of(sub)))]


def _topological(start: np.ndarray, end: np.ndarray, row: np.ndarray, part: np.ndarray
                 ) -> np.ndarray:
    """The nodes' order by (start, end, row, part), ties in index order: a stable sort on
    the start (the parts come in long runs already in order), then the few nodes that
    share a start sorted by the rest."""
    order = np.argsort(start, kind="stable")
    s = start[order]
    tie = np.flatnonzero(s[1:] == s[:-1])
    del s
    _sort_ties(order, tie, lambda i: (part[i], row[i], end[i], start[i]))
    return order


def _by_row_start(row: np.ndarray, start: np.ndarray, end: np.ndarray, nrows: int
                  ) -> np.ndarray:
    """The order by (row, start, -end), ties in index order: the calls come nearly in
    start order (a stable sort on it is short work), a stable sort on the row keeps that,
    and the few that share a row and a start (nested calls) are sorted by their end."""
    order = np.argsort(start, kind="stable")
    r = row[order]
    order = order[np.argsort(r.astype(np.uint16) if nrows < 2**16 else r, kind="stable")]
    r, s_ = row[order], start[order]
    tie = np.flatnonzero((r[1:] == r[:-1]) & (s_[1:] == s_[:-1]))
    del r, s_
    _sort_ties(order, tie, lambda i: (-end[i], start[i], row[i]))
    return order


@dataclass(frozen=True)
class WhatIf:
    """Scale factors: `kernels` (name glob -> factor, on compute kernels' names), `nccl`,
    `memcpy`, `memset`, `host` (host compute and calls), `ranks` (task index -> factor on
    all its work); `gaps` False: no launch edge (no GPU waits for its host)."""

    text: str = ""
    kernels: tuple[tuple[str, float], ...] = ()
    nccl: float = 1.0
    memcpy: float = 1.0
    memset: float = 1.0
    host: float = 1.0
    ranks: tuple[tuple[int, float], ...] = ()
    gaps: bool = True


def scales(g: Graph, w: WhatIf) -> np.ndarray:
    """Each node's duration factor under `w`."""
    per_kind = np.ones(256, dtype=np.float64)  # a factor per node kind, looked up
    per_kind[N_NCCL] = w.nccl
    per_kind[N_MEMCPY] = w.memcpy
    per_kind[N_MEMSET] = w.memset
    per_kind[N_HOST] = per_kind[N_RETURN] = w.host
    s = per_kind[g.kind.view(np.uint8)]
    if w.kernels:
        labels = g.names.get(KERNEL, {})
        is_k = g.kind == N_KERNEL
        values = np.unique(g.value[is_k])
        per_value = np.ones(int(values.max(initial=0)) + 1, dtype=np.float64)
        hit = np.zeros(per_value.size, dtype=bool)
        for glob, factor in w.kernels:
            for v in values.tolist():
                if fnmatch.fnmatchcase(labels.get(v, ""), glob):
                    per_value[v] = factor
                    hit[v] = True
        sel = np.flatnonzero(is_k)
        v = g.value[sel]
        sel = sel[hit[v]]
        s[sel] = per_value[g.value[sel]]
    if w.ranks:
        task = g.rows.select("row", "task_index").sort("row")["task_index"].to_numpy()
        node_task = task[g.row]
        for rank, factor in w.ranks:
            s[node_task == rank] = factor
    return s


@dataclass
class Evaluation:
    start: np.ndarray
    end: np.ndarray
    binding: np.ndarray  # edge index, -1 for a root


def connected(g: Graph) -> np.ndarray:
    """Whether each node's row takes part in the job's dependencies: a GPU row, or a thread
    with an edge to or from another row (a launch, a synchronisation, a message). A thread
    that only computes and polls by itself (a watchdog, a progress thread) ends when it
    ends: it does not set the end of the run. Computed once per graph (every scenario and
    step asks)."""
    if g.connected_rows is None:
        succ_of = np.repeat(np.arange(g.n, dtype=np.int32), np.diff(g.pred_ptr))
        cross = g.row[g.pred_node] != g.row[succ_of]
        rows = np.union1d(g.row[g.pred_node[cross]], g.row[succ_of[cross]])
        gpu = g.rows.filter(pl.col("kind") == "gpu")["row"].to_numpy()
        g.connected_rows = np.union1d(rows, gpu).astype(np.int64)
    flag = np.zeros(int(max(g.row.max(initial=-1), g.connected_rows.max(initial=-1))) + 1,
                    dtype=bool)
    flag[g.connected_rows] = True
    return flag[g.row]
