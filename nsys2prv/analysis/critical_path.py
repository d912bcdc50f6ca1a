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

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..engine import graph_float, graph_path, graph_replay
from ..errors import UsageError
from ..paraver.read import Trace, companion, read_layout, windows
from ..paraver.registry import STATE_NOT_CREATED, cuda, deps, graphs
from ..paraver.registry import mpi as mpi_reg
from .activities import PUSHPOP, _names, _type_labels, pair_next, pair_stacked

KERNEL, NCCL_KERNEL, MEMOP = cuda.CUDA_KERNEL, cuda.NCCL_KERNEL, cuda.MEMORY_OPERATION
CUDA_CALL = cuda.CUDA_CALL
MPI_CALLS = tuple(mpi_reg.CALL_TYPES)
GPU_TYPES = (KERNEL, NCCL_KERNEL, MEMOP)
HOST_TYPES = (CUDA_CALL, *MPI_CALLS)
TYPES = frozenset((*GPU_TYPES, *HOST_TYPES))

# node kinds
(N_KERNEL, N_NCCL, N_NCCL_ARRIVE, N_MEMCPY, N_MEMSET, N_HOST, N_RETURN) = range(7)
# edge kinds (the what-if switches them by kind)
(E_ORDER, E_LAUNCH, E_STREAM_WAIT, E_HOST_SYNC, E_NCCL, E_MPI, E_MPI_COLLECTIVE) = range(7)
EDGE_NAMES = ("order", "launch", "stream wait", "GPU -> host sync", "NCCL collective",
              "MPI message", "MPI collective")
LAUNCH_TAGS = (cuda.TAG_KERNEL_LAUNCH, cuda.TAG_NCCL_LAUNCH, cuda.TAG_MEMORY_OPERATION,
               graphs.TAG_GRAPH_LAUNCH)
WAIT_TAGS = (deps.TAG_STREAM_WAIT, deps.TAG_STREAM_WAIT_INFERRED)

# categories of the path's time
BEFORE, AFTER = "before the first work", "after the last work"
WAITING, LATENCY = "waiting no work explains", "launch latency"
HOST_COMPUTE = "host compute"

_IV = {"row": pl.Int32, "start": pl.Int64, "end": pl.Int64, "type": pl.Int64,
       "value": pl.Int64}


# ----------------------------------------------------------------------- reading --

class GraphCollector:
    """Collects, window by window (`add`), the intervals of the GPU work and the host calls
    and every communication line; `graph()` builds the graph. Memory: one window, and a few
    numbers per node and per line."""

    comms = True  # an observer of `model.analyze_path` that needs the lines

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.layout = read_layout(self.path)
        self.end = self.layout.end
        events = {"row": pl.Int32, "time": pl.Int64, "type": pl.Int64, "value": pl.Int64,
                  "seq": pl.Int64}
        self._pending = pl.DataFrame(schema=events)
        self._pending_nvtx = pl.DataFrame(schema={**events, "level": pl.Int64})
        # the NVTX push/pop ranges of the trace's domains: what the path's runs are in
        self.pushpop = [t for t in _type_labels(companion(self.path, ".pcf"))
                        if t in PUSHPOP]
        self.types = TYPES | frozenset(self.pushpop)
        self._iv: list[pl.DataFrame] = []
        self._nvtx: list[pl.DataFrame] = []
        self._comms: list[pl.DataFrame] = []
        # per CPU row, its first and last instant alive: the host's time before its first
        # call and after its last one belongs to the graph too
        self._alive = pl.DataFrame(schema={"row": pl.Int32, "first": pl.Int64,
                                           "last": pl.Int64})

    def add(self, w: Trace) -> None:
        self.end = max(self.end, w.end)
        ev = w.events.slice(w.carried).filter(pl.col("type").is_in(list(self.types)))
        work = ev.filter(pl.col("type").is_in(list(TYPES)))
        if work.height or self._pending.height:
            done, self._pending = pair_next(work, self._pending)
            if done.height:
                self._iv.append(done.select(
                    "row", "start", (pl.col("start") + pl.col("dur")).alias("end"), "type",
                    "value").cast(_IV))
        if self.pushpop:
            nv = ev.filter(pl.col("type").is_in(self.pushpop))
            if nv.height or self._pending_nvtx.height:
                done, self._pending_nvtx = pair_stacked(nv, self._pending_nvtx)
                if done.height:
                    self._nvtx.append(done.select(
                        "row", "start", (pl.col("start") + pl.col("dur")).alias("end"),
                        "type", "value", "level"))
        if w.comms is not None and w.comms.height:
            self._comms.append(w.comms.select("send_row", "send", "recv_row", "recv", "tag"))
        alive = (w.states.filter(pl.col("state") != STATE_NOT_CREATED)
                 .group_by("row").agg(pl.col("begin").min().alias("first"),
                                      pl.col("end").max().alias("last")))
        if alive.height:
            self._alive = pl.concat([self._alive, alive.cast(self._alive.schema)]).group_by(
                "row").agg(pl.col("first").min(), pl.col("last").max())

    def nvtx(self) -> pl.DataFrame:
        """(row, start, end, level, name) of the NVTX push/pop ranges seen."""
        names = _names(companion(self.path, ".pcf"))
        schema = {"row": pl.Int32, "start": pl.Int64, "end": pl.Int64, "level": pl.Int64,
                  "name": pl.Utf8}
        if not self._nvtx:
            return pl.DataFrame(schema=schema)
        r = pl.concat(self._nvtx)
        labels = pl.DataFrame([(t, v, names.get(t, {}).get(v, str(v))) for t, v in
                               r.select("type", "value").unique().iter_rows()],
                              schema={"type": pl.Int64, "value": pl.Int64, "name": pl.Utf8},
                              orient="row")
        return r.join(labels, on=["type", "value"], how="left").select(list(schema)).cast(schema)

    def graph(self, span: tuple[int, int] | None = None) -> "Graph":
        iv = pl.concat(self._iv) if self._iv else pl.DataFrame(schema=_IV)
        comms = (pl.concat(self._comms) if self._comms else pl.DataFrame(
            schema={"send_row": pl.Int32, "send": pl.Int64, "recv_row": pl.Int32,
                    "recv": pl.Int64, "tag": pl.Int64}))
        self._iv, self._comms = [], []
        names = _names(companion(self.path, ".pcf"))
        g = build_graph(self.layout.rows, iv, comms, names, span or (0, self.end),
                        self._alive)
        g.nvtx = self.nvtx()
        return g


def read_graph(path: str | Path, span: tuple[int, int] | None = None) -> "Graph":
    """The dependency graph of a trace (one pass, window by window), with its NVTX ranges
    (`Graph.nvtx`)."""
    collector = GraphCollector(path)
    for w in windows(path, collector.types, state_rows="cpu", comms=True):
        collector.add(w)
    return collector.graph(span)


# --------------------------------------------------------------------- the graph --

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
    pred_ptr: np.ndarray  # int64, n + 1
    pred_node: np.ndarray  # int32
    pred_lag: np.ndarray  # int64
    edge_kind: np.ndarray  # uint8 (E_*)
    names: dict[int, dict[int, str]]  # the .pcf's value labels by type
    counts: dict[str, int] = field(default_factory=dict)  # edges by kind, lines unmatched
    nvtx: pl.DataFrame | None = None  # row, start, end, level, name: NVTX push/pop ranges

    @property
    def n(self) -> int:
        return int(self.start.size)


def _outermost(host: pl.DataFrame) -> pl.DataFrame:
    """Host calls that no other call of their row contains (MPI calls run CUDA calls)."""
    host = host.sort("row", "start", pl.col("end"), descending=[False, False, True])
    reach = pl.col("end").cum_max().shift(1).over("row")
    return host.filter(reach.is_null() | (pl.col("end") > reach))


def _classify(comms: pl.DataFrame, kinds: pl.DataFrame) -> pl.DataFrame:
    """Each line's edge kind (None: not a dependency: e.g. a line between two GPU rows
    that no kind describes)."""
    c = pl.col
    k = comms.join(kinds.select(c("row").alias("send_row"), c("kind").alias("sk")),
                   on="send_row", how="left").join(
        kinds.select(c("row").alias("recv_row"), c("kind").alias("rk")), on="recv_row",
        how="left")
    tag = c("tag")
    return k.with_columns(
        pl.when(tag.is_in(LAUNCH_TAGS)).then(pl.lit(E_LAUNCH))
        .when(tag.is_in(WAIT_TAGS)).then(pl.lit(E_STREAM_WAIT))
        .when(tag == deps.TAG_HOST_SYNC).then(pl.lit(E_HOST_SYNC))
        .when(tag == deps.TAG_NCCL_COLLECTIVE).then(pl.lit(E_NCCL))
        .when(tag == deps.TAG_MPI_COLLECTIVE).then(pl.lit(E_MPI_COLLECTIVE))
        .when((c("sk") == "cpu") & (c("rk") == "cpu")).then(pl.lit(E_MPI))
        .otherwise(None).cast(pl.Int8).alias("ekind")).drop("sk", "rk")


def build_graph(rows: pl.DataFrame, iv: pl.DataFrame, comms: pl.DataFrame,
                names: dict[int, dict[int, str]], span: tuple[int, int],
                alive: pl.DataFrame | None = None) -> Graph:
    """The graph from the trace's intervals (row, start, end, type, value) and lines; `alive`
    (row, first, last) extends each CPU row's first node back to its first instant and adds
    a last node up to its last one (host work before the first call, after the last)."""
    c = pl.col
    kinds = rows.select(c("row").cast(pl.Int32), "kind")
    lines = _classify(comms, kinds).filter(c("ekind").is_not_null())
    memset_ids = [v for v, n in names.get(MEMOP, {}).items() if n.lower().startswith("memset")]
    gpu = (iv.filter(c("type").is_in(list(GPU_TYPES)))
           .join(kinds, on="row").filter(c("kind") == "gpu")
           .with_columns(pl.when(c("type") == NCCL_KERNEL).then(pl.lit(N_NCCL))
                         .when(c("type") == KERNEL).then(pl.lit(N_KERNEL))
                         .when(c("value").is_in(memset_ids)).then(pl.lit(N_MEMSET))
                         .otherwise(pl.lit(N_MEMCPY)).cast(pl.Int8).alias("nkind"))
           .drop("kind"))
    host = _outermost(iv.filter(c("type").is_in(list(HOST_TYPES)))
                      .join(kinds, on="row").filter(c("kind") == "cpu").drop("kind"))
    # -- host nodes: a call from the previous call's end; calls that a line reaches split
    if alive is not None and alive.height:
        host = host.join(alive.select(c("row").cast(pl.Int32), "first", "last"), on="row",
                         how="left")
    else:
        host = host.with_columns(pl.lit(None, pl.Int64).alias("first"),
                                 pl.lit(None, pl.Int64).alias("last"))
    first_seg = pl.min_horizontal(c("first").fill_null(c("start")), c("start"))
    host = host.sort("row", "start").with_columns(
        c("end").shift(1).over("row").fill_null(first_seg).alias("seg"))
    tails = (host.group_by("row").agg(c("end").max(), c("last").first(), c("value").last(),
                                      c("type").last())
             .filter(c("last") > c("end")))
    waits = lines.filter(c("ekind").is_in([E_HOST_SYNC, E_MPI, E_MPI_COLLECTIVE]))
    hit = _containing(host.select("row", "start", "end", pl.int_range(pl.len()).alias("h")),
                      waits.select(c("recv_row").alias("row"), c("recv").alias("t"), "send"))
    host = host.with_row_index("h").join(
        hit.group_by("h").agg(c("send").max().alias("awaited")), on="h", how="left")
    split = c("awaited").is_not_null()
    ret_start = pl.max_horizontal("start", pl.min_horizontal("awaited", "end"))
    host_nodes = pl.concat([
        host.select("row", c("seg").alias("start"),
                    pl.when(split).then(c("start")).otherwise(c("end")).alias("end"),
                    c("start").alias("split"), pl.lit(N_HOST, pl.Int8).alias("nkind"),
                    "value", "type", pl.lit(0, pl.Int8).alias("part")),
        host.filter(split).select("row", ret_start.alias("start"), "end",
                                  ret_start.alias("split"),
                                  pl.lit(N_RETURN, pl.Int8).alias("nkind"), "value", "type",
                                  pl.lit(1, pl.Int8).alias("part")),
        tails.select("row", c("end").alias("start"), c("last").alias("end"),
                     c("last").alias("split"), pl.lit(N_HOST, pl.Int8).alias("nkind"),
                     "value", "type", pl.lit(2, pl.Int8).alias("part"))])
    # -- GPU nodes: NCCL kernels that a collective line reaches split in two
    arrivals = lines.filter(c("ekind") == E_NCCL).select(
        c("recv_row").alias("row"), c("recv").alias("end"), "send")
    nccl_last = arrivals.group_by("row", "end").agg(c("send").max().alias("last"))
    gpu = gpu.join(nccl_last, on=["row", "end"], how="left").with_columns(
        (c("last").is_not_null() & (c("nkind") == N_NCCL)).alias("coll"))
    complete_start = pl.max_horizontal("start", pl.min_horizontal("last", "end"))
    gpu_nodes = pl.concat([
        gpu.select("row", "start",
                   pl.when(c("coll")).then(c("start")).otherwise(c("end")).alias("end"),
                   c("start").alias("split"),
                   pl.when(c("coll")).then(pl.lit(N_NCCL_ARRIVE, pl.Int8))
                   .otherwise(c("nkind")).alias("nkind"), "value", "type",
                   pl.lit(0, pl.Int8).alias("part")),
        gpu.filter(c("coll")).select("row", complete_start.alias("start"), "end",
                                     complete_start.alias("split"),
                                     pl.lit(N_NCCL, pl.Int8).alias("nkind"), "value", "type",
                                     pl.lit(1, pl.Int8).alias("part"))])
    nodes = (pl.concat([gpu_nodes, host_nodes])
             .sort("start", "end", "row", "part")
             .with_row_index("id").with_columns(c("id").cast(pl.Int32)))
    edges, counts = _edges(nodes, lines)
    edges = edges.sort("succ", "pred")
    n = nodes.height
    ptr = np.zeros(n + 1, dtype=np.int64)
    if edges.height:
        np.cumsum(np.bincount(edges["succ"].to_numpy(), minlength=n), out=ptr[1:])
    return Graph(rows, span, nodes["row"].to_numpy().astype(np.int32),
                 nodes["start"].to_numpy().astype(np.int64),
                 nodes["end"].to_numpy().astype(np.int64),
                 nodes["split"].to_numpy().astype(np.int64),
                 nodes["nkind"].to_numpy().astype(np.int8),
                 nodes["value"].to_numpy().astype(np.int64),
                 nodes["type"].to_numpy().astype(np.int64), ptr,
                 edges["pred"].to_numpy().astype(np.int32),
                 edges["lag"].to_numpy().astype(np.int64),
                 edges["ekind"].to_numpy().astype(np.uint8), names, counts)


def _containing(nodes: pl.DataFrame, q: pl.DataFrame, key: str = "h") -> pl.DataFrame:
    """For each query (row, t, ...), the `key` of the node of its row whose [start, end]
    holds t: the first node ending at or after t (nodes of a row tile its time in order),
    if it has started by t."""
    if q.height == 0:
        return q.with_columns(pl.lit(None, pl.Int64).alias(key))
    hit = (q.with_row_index("_q").sort("t")
           .join_asof(nodes.select("row", pl.col("end").alias("_e"), pl.col("start").alias("_s"),
                                   key).sort("_e"),
                      left_on="t", right_on="_e", by="row", strategy="forward",
                      check_sortedness=False))
    return (hit.filter(pl.col("_s") <= pl.col("t")).sort("_q")
            .drop("_q", "_e", "_s"))


def _edges(nodes: pl.DataFrame, lines: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """(pred, succ, lag, ekind) of every edge, and how many lines of each kind became one."""
    c = pl.col
    schema = {"pred": pl.Int32, "succ": pl.Int32, "lag": pl.Int64, "ekind": pl.Int8}
    parts = []
    # order: the previous node of the row (by the row's order of start, end)
    by_row = nodes.sort("row", "start", "end", "id").select("row", "id", "start", "end")
    prev = by_row.with_columns(c("id").shift(1).over("row").alias("pred"))
    parts.append(prev.filter(c("pred").is_not_null()).select(
        c("pred").cast(pl.Int32), c("id").alias("succ"), pl.lit(0, pl.Int64).alias("lag"),
        pl.lit(E_ORDER, pl.Int8).alias("ekind")))
    counts: dict[str, int] = {}
    starts = nodes.select("row", "start", "id", "nkind").sort("id").unique(
        ["row", "start"], keep="first", maintain_order=True)
    ends = nodes.select("row", "end", "id", "nkind").sort("id").unique(
        ["row", "end"], keep="last", maintain_order=True)
    returns = nodes.filter(c("nkind") == N_RETURN)
    completes = nodes.filter(c("nkind") == N_NCCL)
    for ekind in range(E_LAUNCH, E_MPI_COLLECTIVE + 1):
        ls = lines.filter(c("ekind") == ekind)
        if ls.height == 0:
            continue
        send = ls.select(c("send_row").alias("row"), c("send").alias("t"),
                         pl.int_range(pl.len()).alias("line"))
        recv = ls.select(c("recv_row").alias("row"), c("recv").alias("t"),
                         pl.int_range(pl.len()).alias("line"))
        # the predecessor: the node of the sending row that holds the line's start
        pred = _containing(nodes.select("row", "start", "end", "id"), send, "id")
        pred = pred.join(nodes.select("id", c("end").alias("pend")), on="id").select(
            "line", c("id").alias("pred"), (c("t") - c("pend")).alias("lag"))
        # the successor: the GPU node starting at the line's end (launch, stream wait), the
        # return that the line ends in (sync, MPI), the NCCL completion it ends at
        if ekind in (E_LAUNCH, E_STREAM_WAIT):
            succ = recv.join(starts, left_on=["row", "t"], right_on=["row", "start"])
        elif ekind == E_NCCL:
            succ = recv.join(completes.select("row", "end", "id"), left_on=["row", "t"],
                             right_on=["row", "end"])
        else:
            succ = _containing(returns.select("row", "start", "end", "id"), recv, "id")
        succ = succ.select("line", c("id").alias("succ"))
        e = pred.join(succ, on="line").filter(c("pred") != c("succ"))
        counts[EDGE_NAMES[ekind]] = e.height
        if ls.height > e.height:
            counts[f"{EDGE_NAMES[ekind]} lines without their work"] = ls.height - e.height
        parts.append(e.select(c("pred").cast(pl.Int32), c("succ").cast(pl.Int32), "lag",
                              pl.lit(ekind, pl.Int8).alias("ekind")))
    return pl.concat([p.cast(schema) for p in parts]).unique(), counts


# ----------------------------------------------------------------------- what-if --

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


def scales(g: Graph, w: WhatIf) -> np.ndarray:
    """Each node's duration factor under `w`."""
    s = np.ones(g.n, dtype=np.float64)
    k = g.kind
    s[(k == N_NCCL)] = w.nccl
    s[k == N_MEMCPY] = w.memcpy
    s[k == N_MEMSET] = w.memset
    s[(k == N_HOST) | (k == N_RETURN)] = w.host
    if w.kernels:
        labels = g.names.get(KERNEL, {})
        is_k = k == N_KERNEL
        values = np.unique(g.value[is_k])
        for glob, factor in w.kernels:
            hit = [v for v in values.tolist()
                   if fnmatch.fnmatchcase(labels.get(v, ""), glob)]
            s[is_k & np.isin(g.value, hit)] = factor
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


def evaluate(g: Graph, w: WhatIf | None = None) -> Evaluation:
    """The graph's times with the durations of `w` (None: as measured)."""
    w = w or WhatIf()
    on = np.ones(256, dtype=np.uint8)
    if not w.gaps:
        on[E_LAUNCH] = 0
    new_start = np.empty(g.n, dtype=np.int64)
    new_end = np.empty(g.n, dtype=np.int64)
    binding = np.empty(g.n, dtype=np.int64)
    graph_replay(g.start, g.end, g.pred_ptr, g.pred_node, g.pred_lag, g.edge_kind,
                         on, scales(g, w), new_start, new_end, binding)
    return Evaluation(new_start, new_end, binding)


def connected(g: Graph) -> np.ndarray:
    """Whether each node's row takes part in the job's dependencies: a GPU row, or a thread
    with an edge to or from another row (a launch, a synchronisation, a message). A thread
    that only computes and polls by itself (a watchdog, a progress thread) ends when it
    ends: it does not set the end of the run."""
    succ_of = np.repeat(np.arange(g.n), np.diff(g.pred_ptr))
    cross = g.row[g.pred_node] != g.row[succ_of]
    rows = np.union1d(g.row[g.pred_node[cross]], g.row[succ_of[cross]])
    gpu = g.rows.filter(pl.col("kind") == "gpu")["row"].to_numpy()
    return np.isin(g.row, np.union1d(rows, gpu))


def last_node(g: Graph, ev: Evaluation, until: int | None = None) -> int | None:
    """The work of the job that ends last (by `until`, if given): where the path ends."""
    ok = connected(g) if g.n else np.zeros(0, dtype=bool)
    if until is not None:
        ok &= ev.end <= until
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    return int(idx[np.lexsort((idx, ev.end[idx]))[-1]])


def path_nodes(g: Graph, ev: Evaluation, last: int | None = None,
               stop: int | None = None) -> np.ndarray:
    """The nodes of the critical path, earliest first: back from `last` (default: the
    job's work that ends last, `last_node`) through the binding edges, while they end
    after `stop`."""
    if last is None:
        last = last_node(g, ev)
    if last is None:
        return np.zeros(0, dtype=np.int64)
    out = np.empty(g.n, dtype=np.int64)
    k = graph_path(ev.binding, g.pred_node, ev.end, last,
                           -(2**62) if stop is None else stop, out)
    return out[:k][::-1].copy()


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


def _labels(g: Graph) -> pl.DataFrame:
    """(vtype, value, category, detail) of every (type, value) the nodes use."""
    pairs = pl.DataFrame({"vtype": g.vtype, "value": g.value, "nkind": g.kind}).unique()
    out = []
    for t, v, k in pairs.iter_rows():  # once per distinct name, not per node
        label = g.names.get(t, {}).get(v, str(v))
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
                                     "category": pl.Utf8, "detail": pl.Utf8}, orient="row")


def path_segments(g: Graph, ev: Evaluation, path: np.ndarray,
                  span: tuple[int, int] | None = None) -> pl.DataFrame:
    """The path's time as segments (start, end, row, category, detail, node), tiling
    `span` (default: the graph's): each node's time up to where its successor on the path
    became ready (a host node split into host compute and its call), the slack before
    each node (launch latency after a launch edge, else waiting no work explains), and
    the time before the path's first node and after its last."""
    lo, hi = span or g.span
    schema = {"start": pl.Int64, "end": pl.Int64, "row": pl.Int32, "category": pl.Utf8,
              "detail": pl.Utf8, "node": pl.Int64}
    if path.size == 0:
        return pl.DataFrame([(lo, hi, None, WAITING, "", None)], schema=schema, orient="row")
    start, end = ev.start[path], ev.end[path]
    edge = ev.binding[path[1:]]  # the edge into each next node
    ready = end[:-1] + g.pred_lag[edge]
    cut = np.append(np.minimum(ready, end[:-1]), end[-1])
    cut = np.maximum(cut, start)
    split = np.clip(g.split[path] + (ev.start[path] - g.start[path]), start, cut)
    host = (g.kind[path] == N_HOST)
    nodes = pl.DataFrame({"node": path, "row": g.row[path], "start": start, "cut": cut,
                          "split": np.where(host, split, start), "vtype": g.vtype[path],
                          "value": g.value[path], "nkind": g.kind[path]})
    nodes = nodes.join(_labels(g), on=["vtype", "value", "nkind"], how="left")
    c = pl.col
    work = pl.concat([
        nodes.filter(c("split") > c("start")).select(
            "start", c("split").alias("end"), "row", pl.lit(HOST_COMPUTE).alias("category"),
            pl.lit("").alias("detail"), "node"),
        nodes.select(c("split").alias("start"), c("cut").alias("end"), "row", "category",
                     "detail", "node")])
    slack_start = np.maximum(ready, cut[:-1])
    slack = pl.DataFrame({"start": slack_start, "end": start[1:], "row": g.row[path[1:]],
                          "launch": g.edge_kind[edge] == E_LAUNCH, "node": path[1:]})
    slack = slack.select("start", "end", "row",
                         pl.when(c("launch")).then(pl.lit(LATENCY)).otherwise(pl.lit(WAITING))
                         .alias("category"), pl.lit("").alias("detail"), "node")
    edges = pl.DataFrame([(lo, int(start[0]), None, BEFORE, "", None),
                          (int(end[-1]), hi, None, AFTER, "", None)], schema=schema,
                         orient="row")
    out = pl.concat([p.cast(schema) for p in (work, slack, edges)])
    return (out.with_columns(c("start").clip(lo, hi), c("end").clip(lo, hi))
            .filter(c("end") > c("start")).sort("start", "end"))


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
    segments: pl.DataFrame  # start, end, row, category, detail, node
    by_category: pl.DataFrame  # category, time, share
    by_detail: pl.DataFrame  # category, detail, time, share (kernels by name, calls ...)
    by_process: pl.DataFrame  # task_index, process, time, share, gpu, host
    longest: pl.DataFrame  # start, end, duration, row label, category, detail (runs on a row)
    bound: dict[str, float]  # share of the path on GPU work, on host work, waiting
    counts: dict[str, int]
    what_if: list[Scenario] = field(default_factory=list)
    steps: pl.DataFrame | None = None  # instance, category, time, share (with iterations)

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
    return (seg.group_by("category").agg(d.sum().alias("time"))
            .with_columns((pl.col("time") / max(total, 1)).alias("share"))
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


def _longest(seg: pl.DataFrame, rows: pl.DataFrame, top: int, g: Graph,
             ev: Evaluation) -> pl.DataFrame:
    """Runs of the path on one row (consecutive segments of a row), the longest first, with
    what takes most of each and the NVTX range it is in."""
    c = pl.col
    s = seg.filter(c("row").is_not_null()).sort("start")
    s = s.with_columns((c("row") != c("row").shift(1)).fill_null(True).cum_sum().alias("run"))
    d = (c("end") - c("start"))
    main = (s.group_by("run", "category", "detail").agg(d.sum().alias("t"))
            .sort("run", "t", "category", descending=[False, True, False])
            .group_by("run", maintain_order=True).first())
    runs = (s.group_by("run").agg(c("row").first(), c("start").min(), c("end").max(),
                                  c("node").drop_nulls().min().alias("first"))
            .join(main.select("run", "category", "detail"), on="run")
            .with_columns((c("end") - c("start")).alias("duration"))
            .join(rows.select(c("row").cast(pl.Int32), "label", "kind"), on="row", how="left")
            .sort("duration", "start", descending=[True, False]).head(top))
    return runs.with_columns(pl.Series("nvtx", [_nvtx_of(g, ev, r) for r in
                                                runs.iter_rows(named=True)], dtype=pl.Utf8)
                             ).select("start", "end", "duration", "label", "category",
                                      "detail", "nvtx")


def _nvtx_of(g: Graph, ev: Evaluation, run: dict) -> str | None:
    """The innermost NVTX range open on the host thread of a run of the path: its own row at
    its middle, or, for a GPU run, the thread whose call launched its first work, at the
    launch."""
    if g.nvtx is None or g.nvtx.height == 0:
        return None
    row, t = run["row"], (run["start"] + run["end"]) // 2
    if run["kind"] != "cpu":
        first = run["first"]
        edge = ev.binding[first] if first is not None else -1
        if edge < 0 or g.edge_kind[edge] != E_LAUNCH:
            return None
        pred = int(g.pred_node[edge])
        row, t = int(g.row[pred]), int(ev.end[pred] + g.pred_lag[edge])
    hit = (g.nvtx.filter((pl.col("row") == row) & (pl.col("start") <= t) & (pl.col("end") > t))
           .sort("level", "start"))
    return hit["name"][-1] if hit.height else None


def _by_process(seg: pl.DataFrame, rows: pl.DataFrame, total: int) -> pl.DataFrame:
    """Per process: the path's time on its rows, of which on GPU work and on host work."""
    d = pl.col("end") - pl.col("start")
    gpu = pl.col("category").is_in(list(GPU_CATEGORIES))
    return (seg.join(rows, on="row", how="inner")
            .group_by("task_index").agg(pl.col("task_label").first().alias("process"),
                                        d.sum().alias("time"),
                                        d.filter(gpu).sum().alias("gpu"),
                                        d.filter(~gpu).sum().alias("host"))
            .with_columns((pl.col("time") / max(total, 1)).alias("share"))
            .sort("time", "task_index", descending=[True, False]))


def critical_path(g: Graph, what_if: Iterable[WhatIf] = (), top: int = 10) -> CriticalPath:
    """The critical path over the graph's span, its composition, and each what-if."""
    lo, hi = g.span
    ev = evaluate(g)
    path = path_nodes(g, ev)
    seg = path_segments(g, ev, path)
    total = hi - lo
    by_cat = _by_category(seg, total)
    d = pl.col("end") - pl.col("start")
    by_detail = (seg.group_by("category", "detail").agg(d.sum().alias("time"))
                 .with_columns((pl.col("time") / max(total, 1)).alias("share"))
                 .sort("time", "category", "detail", descending=[True, False, False]))
    rows = g.rows.select(pl.col("row").cast(pl.Int32), "task_index", "task_label", "kind",
                         "label", "device")
    by_process = _by_process(seg, rows, total)
    scenarios = []
    measured = int(ev.end[path[-1]]) - lo if path.size else 0
    for w in what_if:
        e2 = evaluate(g, w)
        p2 = path_nodes(g, e2)
        end2 = int(e2.end[p2[-1]]) if p2.size else lo
        seg2 = path_segments(g, e2, p2, (lo, max(end2, lo)))
        scenarios.append(Scenario(w.text, measured, end2 - lo, _by_category(seg2, end2 - lo),
                                  _by_process(seg2, rows, end2 - lo)))
    return CriticalPath((lo, hi), seg, by_cat, by_detail, by_process,
                        _longest(seg, rows, top, g, ev), _bound(by_cat),
                        dict(g.counts),
                        scenarios)


def step_paths(g: Graph, steps: pl.DataFrame) -> pl.DataFrame:
    """Per step (instance, start, end): the critical path inside it - back from the work
    that ends last in the step to the step's start - as (instance, category, time,
    share of the step)."""
    ev = evaluate(g)
    ok = np.flatnonzero(connected(g))
    order = ok[np.argsort(g.end[ok], kind="stable")]
    ends = g.end[order]
    parts = []
    for inst, lo, hi in steps.select("instance", "start", "end").iter_rows():
        k = int(np.searchsorted(ends, hi, side="right")) - 1  # last work ending in the step
        if k < 0 or ends[k] <= lo:
            continue
        path = path_nodes(g, ev, int(order[k]), stop=lo)
        seg = path_segments(g, ev, path, (lo, hi))
        parts.append(_by_category(seg, hi - lo).with_columns(pl.lit(inst).alias("instance")))
    if not parts:
        return pl.DataFrame(schema={"instance": pl.Int64, "category": pl.Utf8,
                                    "time": pl.Int64, "share": pl.Float64})
    return pl.concat(parts).select(pl.col("instance").cast(pl.Int64), "category", "time",
                                   "share")


def float_of(g: Graph, until: int | None = None) -> np.ndarray:
    """Each node's float (ns): how much later it could end, as measured, without any work
    ending after `until` (default: the end of the work that ends last): 0 on the critical
    path."""
    latest = np.empty(g.n, dtype=np.int64)
    if g.n == 0:
        return latest
    on = np.ones(256, dtype=np.uint8)
    graph_float(g.start, g.end, g.pred_ptr, g.pred_node, g.pred_lag, g.edge_kind, on,
                        int(g.end.max()) if until is None else until, latest)
    return latest - g.end


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


def path_events(g: Graph, segments: pl.DataFrame, floats: np.ndarray) -> pl.DataFrame:
    """(row, time, type, value): the critical path's segments on their rows (what it is
    doing; 0 where it leaves a row) and every GPU activity's float (1 + us at its start, 0
    at its end)."""
    from ..paraver.registry import critical as creg

    c = pl.col
    seg = segments.filter(c("row").is_not_null()).with_columns(
        c("category").map_elements(_path_code, return_dtype=pl.Int64).alias("code"))
    on = seg.select("row", c("start").alias("time"), pl.lit(creg.CRITICAL_PATH).alias("type"),
                    c("code").alias("value"))
    off = seg.select("row", c("end").alias("time"), pl.lit(creg.CRITICAL_PATH).alias("type"),
                     pl.lit(0, pl.Int64).alias("value"))
    # a row's segments that touch: no 0 between them
    path = (pl.concat([off, on]).sort("row", "time", "value")
            .unique(["row", "time"], keep="last", maintain_order=True))
    gpu = np.isin(g.kind, (N_KERNEL, N_NCCL, N_MEMCPY, N_MEMSET))
    us = np.minimum(floats[gpu] // 1000 + 1, 2**31 - 1)
    fl = pl.DataFrame({"row": g.row[gpu], "start": g.start[gpu], "end": g.end[gpu], "v": us})
    floats_ev = pl.concat([
        fl.select("row", c("end").alias("time"), pl.lit(creg.CRITICAL_FLOAT).alias("type"),
                  pl.lit(0, pl.Int64).alias("value")),
        fl.select("row", c("start").alias("time"), pl.lit(creg.CRITICAL_FLOAT).alias("type"),
                  c("v").cast(pl.Int64).alias("value"))]).sort("row", "time", "value").unique(
        ["row", "time"], keep="last", maintain_order=True)
    schema = {"row": pl.Int32, "time": pl.Int64, "type": pl.Int64, "value": pl.Int64}
    return pl.concat([path.cast(schema), floats_ev.cast(schema)]).sort("time", "row", "type")


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


def write_path_trace(trace: str | Path, output: str | Path, g: Graph,
                     segments: pl.DataFrame) -> Path:
    """A copy of `trace` with the critical path's events (`path_events`)."""
    from ..paraver.insert import event_lines, write_with_events

    events = path_events(g, segments, float_of(g))
    return write_with_events(trace, output, event_lines(Path(trace), events), path_pcf())
