"""The critical path's graph built on disk: `critical_path.build_graph`'s graph, node for node
and edge for edge, for a run whose graph does not fit in memory.

The pass files what the graph is made of as it reads the trace (`GraphCollector` with
`spill`): the GPU work by its start and, NCCL kernels, by their end; the host calls by
their start; the communication lines window by window. The build files the lines by the
times it looks them up by, and makes the graph a bucket at a time (the trace's windows'
time ranges), in time order, carrying across a bucket's edge what waits for a later one (a
thread's last call, a line whose work ends later):

1. the NCCL kernels a collective line ends at (by their end);
2. each thread's outermost calls, the host compute before each (from the call before, by
   their start), and the calls a line ends in (by their end);
3. the nodes, filed by their start; their ids (the topological order: start, end, row,
   part, then the order `build_graph` concatenates them in: `sub`), a slab of nodes every
   `SLAB_NODES` or so, and each row's previous node;
4. the lines matched to the nodes they leave and reach (by start or by end, as
   `build_graph._edges`), the edges filed by their successor's slab, each slab's edges in
   `build_graph`'s order (by successor, kind, line).

Tables are numpy columns appended to one file per table, bucket and column (`Columns`): a
bucket's rows come back in the order written (the intervals' and the nodes' order) and are
sorted on one key per (row, time), as `build_graph` sorts. Memory: one bucket (a window of
the trace) and what crosses its edges. The result is a `graph_slabs.Slabs` on disk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from .graph_slabs import SLAB_NODES, Slabs
from .store import WindowStore

MIN = np.iinfo(np.int64).min
MAX = np.iinfo(np.int64).max
I32, I64, I8 = np.int32, np.int64, np.int8
IV = {"row": I32, "start": I64, "end": I64, "type": I32, "value": I32, "full": I32,
      "idx": I64}
NVTX = {"row": I32, "time": I64, "type": I64, "value": I64}
LINE = {"send_row": I32, "send": I64, "recv_row": I32, "recv": I64, "tag": I64, "idx": I64}
_LINE_K = {"send_row": I32, "send": I64, "recv_row": I32, "recv": I64, "idx": I64,
           "ekind": I8}  # (classified: the tag is no longer needed)
_NODE = {"row": I32, "start": I64, "end": I64, "split": I64, "kind": I8, "value": I32,
         "vtype": I32, "full": I32, "part": I8, "sub": I64}
_LOOK = {"row": I32, "start": I64, "end": I64, "kind": I8, "id": I64}
_PRED = {**_LINE_K, "p": I64, "p_end": I64}

Cols = dict[str, np.ndarray]


class Columns:
    """A table of numpy columns filed by bucket: the rows of each bucket appended to a file
    of its own in `dir` (`add`; one record of the columns a row), read back in the order
    written (`read`). The buckets are time ranges from `starts` (a row filed by a time goes
    to the last bucket starting at or before it, the first bucket before them all) or
    given."""

    def __init__(self, dir: Path, name: str, schema: dict[str, type], starts) -> None:
        self.dir, self.name, self.schema, self.starts = dir, name, schema, starts
        self.dtype = np.dtype([(c, t) for c, t in schema.items()])
        self.rows = 0

    def _path(self, b: int) -> Path:
        return self.dir / f"{self.name}.{b:06d}.bin"

    def add(self, cols: Cols, time: np.ndarray | None = None, bucket: int | None = None,
            starts=None) -> None:
        """Rows filed by `time` (or all in `bucket`); `starts`: the buckets' starts known so
        far, if not all (a row at or after the last goes to the last)."""
        n = len(next(iter(cols.values())))
        if n == 0:
            return
        self.rows += n
        rec = np.empty(n, dtype=self.dtype)
        for c in self.schema:
            rec[c] = cols[c]
        if bucket is not None:
            parts = [(bucket, rec)]
        else:
            starts = np.asarray(self.starts if starts is None else starts, dtype=np.int64)
            b = np.clip(np.searchsorted(starts, time, side="right") - 1, 0, starts.size - 1)
            if b.min() == b.max():
                parts = [(int(b[0]), rec)]
            else:
                order = np.argsort(b, kind="stable")
                bs = b[order]
                cut = np.flatnonzero(bs[1:] != bs[:-1]) + 1
                parts = [(int(bs[lo]), rec[order[lo:hi]]) for lo, hi in
                         zip(np.append(0, cut), np.append(cut, n))]
        for b, part in parts:
            with open(self._path(b), "ab") as f:
                f.write(part.tobytes())

    def read(self, b: int, columns=None) -> Cols:
        try:
            rec = np.fromfile(self._path(b), dtype=self.dtype)
        except FileNotFoundError:
            rec = np.zeros(0, dtype=self.dtype)
        return {c: np.ascontiguousarray(rec[c]) for c in (columns or self.schema)}

    def drop(self) -> None:
        for f in self.dir.glob(f"{self.name}.*.bin"):
            f.unlink()


def _take(cols: Cols, sel) -> Cols:
    return {c: a[sel] for c, a in cols.items()}


def _cat(a: Cols | None, b: Cols) -> Cols:
    return b if a is None else {c: np.concatenate([a[c], b[c]]) for c in b}


def _size(cols: Cols) -> int:
    return len(next(iter(cols.values()))) if cols else 0


def _keys(rows: list[np.ndarray], times: list[np.ndarray]):
    """A (row, time) -> sortable int64 key function over the times given
    (`critical_path._Keys`)."""
    from .graph import _Keys

    nrows = max((int(r.max()) + 1 for r in rows if r.size), default=1)
    return _Keys(times, nrows + 1)


class GraphFiles:
    """What the pass files for the graph (`GraphCollector` with `spill`), window by window:
    the GPU work (by start; NCCL kernels also by end), the host calls (by start) and the
    lines (per window); in the directory of a `WindowStore` (whose windows it declares)."""

    def __init__(self, store: WindowStore, rows: pl.DataFrame) -> None:
        kinds = rows.sort("row")["kind"].to_list()
        self.is_cpu = np.array([k == "cpu" for k in kinds] + [False], dtype=bool)
        self.is_gpu = np.array([k == "gpu" for k in kinds] + [False], dtype=bool)
        self.store = store
        d, starts = store.dir, store.starts
        self.gpu = Columns(d, "gpu", IV, starts)
        self.nccl_end = Columns(d, "nccl_end", IV, starts)
        self.host = Columns(d, "host", IV, starts)
        self.lines = Columns(d, "lines", LINE, starts)
        self.nvtx = Columns(d, "nvtx", NVTX, starts)
        self.intervals = 0

    def window(self, start: int, end: int) -> None:
        """A window [start, end] of the pass begins: what it adds is filed by time in the
        buckets of the windows so far, and in the next one's (from `end`) for what ends
        there (a work's end at the window's end is read in it)."""
        if not self.store.starts or start > self.store.starts[-1]:
            self.store.window(start)
        self._known = [*self.store.starts, end]

    def finish(self, end: int) -> None:
        """The pass is over (the last window ended at `end`): the buckets are those of the
        windows and one from `end` on."""
        if not self.store.starts or end > self.store.starts[-1]:
            self.store.window(end)

    def add(self, iv: Cols, lines: Cols | None) -> None:
        from . import graph as C

        if iv is not None and _size(iv):
            r, t = iv["row"], iv["type"]
            gpu = np.isin(t, C.GPU_TYPES) & self.is_gpu[r]
            host = np.isin(t, C.HOST_TYPES) & self.is_cpu[r]
            g = _take(iv, gpu)
            self.gpu.add(g, g["start"], starts=self._known)
            nk = g["type"] == C.NCCL_KERNEL
            if nk.any():
                self.nccl_end.add(_take(g, nk), g["end"][nk], starts=self._known)
            h = _take(iv, host)
            self.host.add(h, h["start"], starts=self._known)
            self.intervals += int(gpu.sum() + host.sum())
        if lines is not None and _size(lines):
            self.lines.add(lines, bucket=len(self.store.starts) - 1)  # (read back whole)

    def add_nvtx(self, events: Cols) -> None:
        """NVTX push/pop events of the window (the runs of the path are looked up in
        them)."""
        self.nvtx.add(events, bucket=len(self.store.starts) - 1)

    def nvtx_held(self) -> Cols:
        """The NVTX events, whole, in the order read (a small graph)."""
        got = None
        for b in range(len(self.store.starts)):
            got = _cat(got, self.nvtx.read(b))
        return got or {c: np.zeros(0, t) for c, t in NVTX.items()}

    def move_nvtx(self, dir: Path) -> Columns:
        """The NVTX events' files moved to `dir` (where the graph's slabs are: they go
        with them)."""
        for f in self.store.dir.glob("nvtx.*.bin"):
            f.rename(dir / f.name)
        moved = Columns(dir, "nvtx", NVTX, self.nvtx.starts)
        moved.rows = self.nvtx.rows
        return moved

    def held(self) -> tuple[Cols, Cols]:
        """The intervals (in the order read) and the lines, whole (a small graph)."""
        nb = len(self.store.starts)
        iv = None
        for table in (self.gpu, self.host):
            for b in range(nb):
                iv = _cat(iv, table.read(b))
        if iv is None or not _size(iv):
            iv = {c: np.zeros(0, t) for c, t in IV.items()}
        iv = _take(iv, np.argsort(iv["idx"], kind="stable"))
        lines = None
        for b in range(nb):
            lines = _cat(lines, self.lines.read(b))
        return iv, lines or {c: np.zeros(0, t) for c, t in LINE.items()}


def build_slabs(files: GraphFiles, rows: pl.DataFrame, names: dict[int, dict[int, str]],
                span: tuple[int, int], alive: pl.DataFrame | None, nvtx,
                slab_nodes: int = SLAB_NODES) -> Slabs:
    """The graph of what `files` holds, as `build_graph` makes it, in slabs on disk of about
    `slab_nodes` nodes."""
    from . import graph as C

    store = files.store
    d, starts = store.dir, store.starts
    nrows = files.is_cpu.size - 1
    is_cpu, is_gpu = files.is_cpu, files.is_gpu
    nb = len(starts)
    first_alive = np.full(nrows + 1, MAX, dtype=np.int64)
    last_alive = np.full(nrows + 1, MIN, dtype=np.int64)
    if alive is not None and alive.height:
        ar = alive["row"].to_numpy()
        first_alive[ar] = alive["first"].to_numpy()
        last_alive[ar] = alive["last"].to_numpy()

    # -- 0. the lines by the times they are looked up by
    by_send = Columns(d, "by_send", _LINE_K, starts)
    by_recv = Columns(d, "by_recv", _LINE_K, starts)
    totals = np.zeros(8, dtype=np.int64)  # lines of each edge kind
    for b in range(nb):
        ln = files.lines.read(b)
        if not _size(ln):
            continue
        ek = C._classify(ln, is_cpu)
        ln = _take({**ln, "ekind": ek.astype(I8)}, ek >= 0)
        totals += np.bincount(ek[ek >= 0], minlength=8)[:8]
        by_send.add(ln, ln["send"])
        by_recv.add(ln, ln["recv"])
    files.lines.drop()
    memset_ids = [v for v, n in names.get(C.MEMOP, {}).items()
                  if n.lower().startswith("memset")]

    # -- 1. the NCCL kernels a collective line ends at (the first of a row and end, in
    # the order read): the arrival of the last participant
    nccl_last = Columns(d, "nccl_last", {"idx": I64, "last": I64}, starts)
    for b in range(nb):
        k = files.nccl_end.read(b, ("row", "end", "idx", "start"))
        if not k["row"].size:
            continue
        ln = by_recv.read(b, ("recv_row", "recv", "send", "ekind"))
        ln = _take(ln, ln["ekind"] == C.E_NCCL)
        if not ln["recv"].size:
            continue
        keys = _keys([k["row"], ln["recv_row"]], [k["end"], ln["recv"]])
        kk = keys(k["row"], k["end"])
        u, first = np.unique(kk, return_index=True)  # first: the lowest position (read order)
        i = np.searchsorted(u, keys(ln["recv_row"], ln["recv"]))
        hit = i < u.size
        hit[hit] &= u[i[hit]] == keys(ln["recv_row"][hit], ln["recv"][hit])
        kernel = first[i[hit]]
        last = np.full(kk.size, MIN, dtype=np.int64)
        np.maximum.at(last, kernel, ln["send"][hit])
        got = np.flatnonzero(last > MIN)
        nccl_last.add({"idx": k["idx"][got], "last": last[got]}, k["start"][got])

    # -- 2. each thread's outermost calls (from the previous one's end), and what they
    # waited for
    outer_t = Columns(d, "outer", {**IV, "seg": I64, "sub": I64}, starts)
    outer_end = Columns(d, "outer_end", {"row": I32, "start": I64, "end": I64, "idx": I64},
                        starts)
    reach = np.full(nrows + 1, MIN, dtype=np.int64)  # the latest end of a row's calls
    prev_end = np.full(nrows + 1, MIN, dtype=np.int64)  # its last outermost call's end
    last_call = {c: np.zeros(nrows + 1, np.int64) for c in ("start", "end", "value", "type")}
    has_call = np.zeros(nrows + 1, dtype=bool)
    sub = 0  # the outermost calls' order (row, start, -end, read order), as build_graph's
    for b in range(nb):
        h = files.host.read(b)
        if not h["row"].size:
            continue
        h = _take(h, C._by_row_start(h["row"], h["start"], h["end"], nrows))
        r, hs, he = h["row"], h["start"], h["end"]
        held = reach[r] > MIN
        keys = _keys([r], [he, reach[r][held]])
        ek = keys(r, he)
        carried = np.full(r.size, MIN, dtype=np.int64)
        carried[held] = keys(r[held], reach[r][held])
        before = np.empty(r.size, dtype=np.int64)  # the row's latest end before each call
        before[0] = MIN
        before[1:] = np.maximum.accumulate(ek)[:-1]  # (row-major keys: within the row)
        new = np.append(True, r[1:] != r[:-1])
        before[new] = MIN
        outer = ek > np.maximum(before, carried)
        np.maximum.at(reach, r, he)
        o = _take(h, outer)
        r, hs, he = o["row"], o["start"], o["end"]
        if not r.size:
            continue
        new = np.append(True, r[1:] != r[:-1])
        seg = np.empty(r.size, dtype=np.int64)
        seg[1:] = he[:-1]
        seg[new] = prev_end[r[new]]
        fresh = new & (prev_end[r] == MIN)
        seg[fresh] = np.minimum(first_alive[r[fresh]], hs[fresh])
        last = np.append(r[1:] != r[:-1], True)
        prev_end[r[last]] = he[last]
        has_call[r[last]] = True
        for c in ("start", "end", "value", "type"):
            last_call[c][r[last]] = o[c][last]
        o["seg"] = seg
        o["sub"] = np.arange(sub, sub + r.size, dtype=np.int64)
        sub += r.size
        outer_t.add(o, bucket=b)
        outer_end.add(o, he)
    files.host.drop()
    # the calls a synchronisation, MPI message or collective line ends in: the first
    # outermost call of its row ending at or after it, if it started before
    awaited_t = Columns(d, "awaited", {"idx": I64, "awaited": I64}, starts)
    waits = (C.E_HOST_SYNC, C.E_MPI, C.E_MPI_COLLECTIVE)
    pending = None
    for b in range(nb):
        w = by_recv.read(b, ("recv_row", "recv", "send", "ekind"))
        w = _cat(pending, _take(w, np.isin(w["ekind"], waits)))
        pending = None
        if not w["recv"].size:
            continue
        c = outer_end.read(b)
        if not c["row"].size:
            pending = w
            continue
        keys = _keys([c["row"], w["recv_row"]], [c["end"], w["recv"]])
        ck = keys(c["row"], c["end"])
        c = _take(c, np.argsort(ck, kind="stable"))
        ck = np.sort(ck, kind="stable")
        i = np.searchsorted(ck, keys(w["recv_row"], w["recv"]))
        found = i < ck.size
        found[found] &= c["row"][i[found]] == w["recv_row"][found]
        pending = _take(w, ~found)
        i = i[found]
        good = c["start"][i] <= w["recv"][found]
        if good.any():
            call = i[good]
            most = np.full(ck.size, MIN, dtype=np.int64)
            np.maximum.at(most, call, w["send"][found][good])
            got = np.flatnonzero(most > MIN)
            awaited_t.add({"idx": c["idx"][got], "awaited": most[got]}, c["start"][got])
    outer_end.drop()

    # -- 3. the nodes, by their start
    nodes_t = Columns(d, "nodes", _NODE, starts)

    def joined(idx: np.ndarray, other: Cols, col: str) -> np.ndarray:
        """other[col] at each idx (MIN where other has none)."""
        out = np.full(idx.size, MIN, dtype=np.int64)
        if other["idx"].size:
            order = np.argsort(other["idx"], kind="stable")
            oi = other["idx"][order]
            i = np.searchsorted(oi, idx)
            ok = i < oi.size
            ok[ok] &= oi[i[ok]] == idx[ok]
            out[ok] = other[col][order][i[ok]]
        return out

    def emit(**cols) -> None:
        nodes_t.add(cols, cols["start"])

    for b in range(nb):
        g = files.gpu.read(b)
        if g["row"].size:
            rg, sg, eg, tg, vg = g["row"], g["start"], g["end"], g["type"], g["value"]
            gk = np.full(rg.size, C.N_MEMCPY, dtype=np.int8)
            gk[tg == C.KERNEL] = C.N_KERNEL
            gk[tg == C.NCCL_KERNEL] = C.N_NCCL
            gk[(tg == C.MEMOP) & np.isin(vg, memset_ids)] = C.N_MEMSET
            lastv = joined(g["idx"], nccl_last.read(b), "last")
            coll = (gk == C.N_NCCL) & (lastv > MIN)
            comp = np.maximum(sg, np.minimum(lastv, eg))
            z = np.zeros(rg.size, np.int64)
            emit(row=rg, start=sg, end=np.where(coll, sg, eg), split=sg,
                 kind=np.where(coll, C.N_NCCL_ARRIVE, gk), value=vg, vtype=tg, full=g["full"],
                 part=z, sub=g["idx"])
            if coll.any():
                zc = np.zeros(int(coll.sum()), np.int64)
                emit(row=rg[coll], start=comp[coll], end=eg[coll], split=comp[coll],
                     kind=zc + C.N_NCCL, value=vg[coll], vtype=tg[coll], full=g["full"][coll],
                     part=zc + 1, sub=g["idx"][coll])
        o = outer_t.read(b)
        if o["row"].size:
            hr, hs, he, seg = o["row"], o["start"], o["end"], o["seg"]
            awaited = joined(o["idx"], awaited_t.read(b), "awaited")
            split = awaited > MIN
            ret = np.maximum(hs, np.minimum(awaited, he))
            v, t, s_ = o["value"], o["type"], o["sub"]
            z = np.zeros(hr.size, np.int64)
            emit(row=hr, start=seg, end=np.where(split, hs, he), split=hs, kind=z + C.N_HOST,
                 value=v, vtype=t, full=z, part=z, sub=s_)
            if split.any():
                zs = np.zeros(int(split.sum()), np.int64)
                emit(row=hr[split], start=ret[split], end=he[split], split=ret[split],
                     kind=zs + C.N_RETURN, value=v[split], vtype=t[split], full=zs,
                     part=zs + 1, sub=s_[split])
    tail = np.flatnonzero(has_call & (last_alive > last_call["end"]))
    if tail.size:
        z = np.zeros(tail.size, np.int64)
        emit(row=tail, start=last_call["end"][tail], end=last_alive[tail],
             split=last_alive[tail], kind=z + C.N_HOST, value=last_call["value"][tail],
             vtype=last_call["type"][tail], full=z, part=z + 2, sub=z)
    for t in (files.gpu, files.nccl_end, nccl_last, outer_t, awaited_t):
        t.drop()

    out = WindowStore(prefix="nsys2prv-graph-")
    try:
        return _slabs(d, starts, nodes_t, by_send, by_recv, out, nrows, is_gpu, totals, rows,
                      names, span, nvtx, slab_nodes)
    except BaseException:
        out.close()
        raise


def _slabs(d: Path, starts, nodes_t: Columns, by_send: Columns, by_recv: Columns,
           out: WindowStore, nrows: int, is_gpu: np.ndarray, totals: np.ndarray,
           rows: pl.DataFrame, names, span, nvtx, slab_nodes: int) -> Slabs:
    """Steps 3 (the ids, the slabs) and 4 (the edges) of `build_slabs`, the slabs into the
    directory of `out`."""
    from . import graph as C
    from .graph_slabs import NODE_COLUMNS, NODE_DTYPES

    nb = len(starts)
    dir = out.dir
    bounds = [0]
    held: list[Cols] = []  # the nodes of the slab being made
    row_last = np.full(nrows + 1, -1, dtype=np.int64)  # each row's last node so far
    pairs: list[np.ndarray] = []  # (value, demangled name) of the kernels
    max_end = MIN
    next_id = 0
    node_end = Columns(d, "node_end", _LOOK, starts)
    where: dict[int, tuple[int, int, int]] = {}  # bucket -> its nodes' slab, offset, count

    def flush() -> None:
        if not held:
            return
        s = len(bounds) - 1
        for c in NODE_COLUMNS:
            np.save(dir / f"node.{s:05d}.{c}.npy", np.concatenate([h[c] for h in held])
                    .astype(NODE_DTYPES[c], copy=False))
        bounds.append(bounds[-1] + sum(h["row"].size for h in held))
        held.clear()

    for b in range(nb):
        nodes = nodes_t.read(b)
        n = nodes["row"].size
        if not n:
            continue
        # the topological order: (start, end, row, part), then the order build_graph
        # gives its parts in (`sub`)
        nodes = _take(nodes, np.argsort(nodes["sub"], kind="stable"))
        nodes = _take(nodes, C._topological(nodes["start"], nodes["end"], nodes["row"],
                                            nodes["part"]))
        ids = np.arange(next_id, next_id + n, dtype=np.int64)
        next_id += n
        r = nodes["row"]
        # each row's previous node: within the bucket (by id), else the row's last before
        order = np.argsort(r, kind="stable")
        rs = r[order]
        prev = np.empty(n, dtype=np.int64)
        same = np.append(False, rs[1:] == rs[:-1])
        prev[order[same]] = ids[order[np.flatnonzero(same) - 1]]
        prev[order[~same]] = row_last[rs[~same]]
        ends = np.append(rs[1:] != rs[:-1], True)
        row_last[rs[ends]] = ids[order[ends]]
        nodes["row_prev"] = prev
        kern = np.isin(nodes["kind"], (C.N_KERNEL, C.N_NCCL, C.N_NCCL_ARRIVE)) & \
            (nodes["full"] > 0)
        if kern.any():
            pairs.append(np.unique((nodes["value"][kern].astype(np.int64) << 32)
                                   | nodes["full"][kern].astype(np.int64)))
        max_end = max(max_end, int(nodes["end"].max()))
        look = {"row": r, "start": nodes["start"], "end": nodes["end"],
                "kind": nodes["kind"], "id": ids}
        node_end.add(look, nodes["end"])
        if held and sum(h["row"].size for h in held) + n > slab_nodes:
            flush()
        where[b] = (len(bounds) - 1, sum(h["row"].size for h in held), n)
        held.append({c: nodes[c] for c in NODE_COLUMNS})
    flush()
    nodes_t.drop()
    total = bounds[-1]

    def node_start(b: int) -> Cols:
        """The nodes filed by start in bucket b (in id order), from their slab's files."""
        if b not in where:
            return {c: np.zeros(0, t) for c, t in _LOOK.items()}
        s, a, n = where[b]
        got = {c: np.array(np.load(dir / f"node.{s:05d}.{c}.npy", mmap_mode="r")[a:a + n])
               for c in ("row", "start", "end", "kind")}
        got["id"] = np.arange(bounds[s] + a, bounds[s] + a + n, dtype=np.int64)
        return got

    # -- 4. the edges: each line's predecessor (by its send), then its successor (by its
    # receive), filed by the successor's slab
    pred_t = Columns(d, "pred", _PRED, starts)
    pending = None  # lines whose predecessor ends in a later bucket
    for b in range(nb):
        ln = by_send.read(b)
        nc = ln["ekind"] == C.E_NCCL
        if nc.any():  # the arrival of the participant that came last: starts there
            hit = _exact(_take(ln, nc), "send_row", "send", node_start(b), "start", True)
            _file_pred(pred_t, hit)
        rest = _cat(pending, _take(ln, ~nc))
        pending = None
        if rest["send"].size:  # the node of its row ending first at or after the start
            hit, pending = _following(rest, "send_row", "send", node_end.read(b))
            _file_pred(pred_t, hit)
    by_send.drop()
    edges_t = Columns(dir, "edges", {"s": I64, "p": I64, "lag": I64, "ekind": I8, "idx": I64},
                      np.array(bounds[:-1] or [0], dtype=np.int64))
    pending = None  # lines whose return ends in a later bucket
    found = np.zeros(8, dtype=np.int64)
    cross_rows: list[np.ndarray] = []
    for b in range(nb):
        ln = pred_t.read(b)
        ln["pred"], ln["pred_end"] = ln.pop("p"), ln.pop("p_end")
        ek = ln["ekind"]
        edges = []
        launch = np.isin(ek, (C.E_LAUNCH, C.E_STREAM_WAIT))
        if launch.any():  # the GPU work starting at the line's end
            edges.append(_exact(_take(ln, launch), "recv_row", "recv", node_start(b),
                                "start", True))
        nc = ek == C.E_NCCL
        if nc.any():  # the NCCL completion ending there (the last node ending there)
            hit = _exact(_take(ln, nc), "recv_row", "recv", node_end.read(b), "end", False)
            edges.append(_take(hit, hit["p_kind"] == C.N_NCCL))
        waits = _cat(pending, _take(ln, np.isin(ek, (C.E_HOST_SYNC, C.E_MPI,
                                                      C.E_MPI_COLLECTIVE))))
        pending = None
        if waits["recv"].size:  # the return the line ends in
            at = node_end.read(b)
            hit, pending = _following(waits, "recv_row", "recv",
                                      _take(at, at["kind"] == C.N_RETURN))
            edges.append(_take(hit, hit["p_start"] <= hit["recv"]))
        for e in edges:
            e = _take(e, e["pred"] != e["p"])
            if not e["p"].size:
                continue
            found += np.bincount(e["ekind"], minlength=8)[:8]
            cross = e["send_row"] != e["recv_row"]
            cross_rows += [np.unique(e["send_row"][cross]), np.unique(e["recv_row"][cross])]
            edges_t.add({"s": e["p"], "p": e["pred"], "lag": e["send"] - e["pred_end"],
                         "ekind": e["ekind"], "idx": e["idx"]}, e["p"])
    by_recv.drop()
    pred_t.drop()
    for s in range(len(bounds) - 1):
        lo, hi = bounds[s], bounds[s + 1]
        e = edges_t.read(s)
        e = _take(e, np.lexsort((e["idx"], e["ekind"], e["s"])))  # by successor, kind, line
        ptr = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(np.bincount(e["s"] - lo, minlength=hi - lo), out=ptr[1:])
        np.save(dir / f"node.{s:05d}.pred_ptr.npy", ptr)
        for c, col, dtype in (("pred_node", "p", np.int32), ("pred_lag", "lag", np.int64),
                              ("edge_kind", "ekind", np.uint8)):
            np.save(dir / f"node.{s:05d}.{c}.npy", e[col].astype(dtype))
    edges_t.drop()
    counts: dict[str, int] = {}
    for ek in range(C.E_LAUNCH, C.E_MPI_COLLECTIVE + 1):
        if totals[ek]:
            counts[C.EDGE_NAMES[ek]] = int(found[ek])
            if totals[ek] > found[ek]:
                counts[f"{C.EDGE_NAMES[ek]} lines without their work"] = int(
                    totals[ek] - found[ek])
    connected_rows = np.union1d(np.concatenate(cross_rows).astype(np.int64) if cross_rows
                                else np.zeros(0, np.int64),
                                np.flatnonzero(is_gpu[:nrows])).astype(np.int64)
    # the connected nodes by end, ties by id (`Slabs.last_ending`): the buckets by end in
    # time order, each sorted
    flag = np.zeros(nrows + 1, dtype=bool)
    flag[connected_rows] = True
    with open(dir / "conn_end.bin", "wb") as fe, open(dir / "conn_id.bin", "wb") as fi:
        for b in range(nb):
            at = node_end.read(b, ("row", "end", "id"))
            keep = flag[at["row"]]
            e_, i_ = at["end"][keep], at["id"][keep]
            order = np.argsort(e_, kind="stable")
            fe.write(e_[order].tobytes())
            fi.write(i_[order].tobytes())
    node_end.drop()
    kernel_pairs = np.unique(np.concatenate(pairs)) if pairs else np.zeros(0, np.int64)
    return Slabs.stored(out, np.array(bounds if len(bounds) > 1 else [0, 0], np.int64),
                        rows, span, names, counts, nvtx, connected_rows,
                        C.kernel_labels_of(kernel_pairs, names), max_end if total else 0)


def _file_pred(pred_t: Columns, hit: Cols) -> None:
    """Lines with the node they leave, kept where the node starts by the line's start."""
    ok = _take(hit, hit["p_start"] <= hit["send"])
    pred_t.add(ok, ok["recv"])


def _exact(lines: Cols, row: str, time: str, at: Cols, col: str, first: bool) -> Cols:
    """`lines` that have a node of `at` (in id order) on their row whose `col` equals their
    `time`, with the first (lowest id) or the last such node: p, p_start, p_end, p_kind."""
    if not at["row"].size or not lines[time].size:
        return _take({**lines, **{c: np.zeros(lines[time].size, np.int64)
                                  for c in ("p", "p_start", "p_end", "p_kind")}},
                     np.zeros(lines[time].size, dtype=bool))
    keys = _keys([at["row"], lines[row]], [at[col], lines[time]])
    k = keys(at["row"], at[col])
    if first:
        u, pick = np.unique(k, return_index=True)
    else:
        u, pick = np.unique(k[::-1], return_index=True)
        pick = k.size - 1 - pick
    q = keys(lines[row], lines[time])
    i = np.searchsorted(u, q)
    hit = i < u.size
    hit[hit] &= u[i[hit]] == q[hit]
    j = pick[i[hit]]
    out = _take(lines, hit)
    out.update(p=at["id"][j], p_start=at["start"][j], p_end=at["end"][j], p_kind=at["kind"][j])
    return out


def _following(lines: Cols, row: str, time: str, at: Cols) -> tuple[Cols, Cols]:
    """The lines whose row has a node of `at` (in id order) ending at or after their `time`
    (the first such in (row, end, id) order: p, p_start, p_end, p_kind), and those whose
    row has none in `at` (to look for in a later bucket)."""
    qr, qt = lines[row], lines[time]
    if not at["row"].size:
        return _exact(lines, row, time, at, "end", True), lines
    keys = _keys([at["row"], qr], [at["end"], qt])
    k = keys(at["row"], at["end"])
    order = np.argsort(k, kind="stable")
    k, ar = k[order], at["row"][order]
    i = np.searchsorted(k, keys(qr, qt))
    hit = i < ar.size
    hit[hit] &= ar[i[hit]] == qr[hit]
    j = order[i[hit]]
    found = _take(lines, hit)
    found.update(p=at["id"][j], p_start=at["start"][j], p_end=at["end"][j],
                 p_kind=at["kind"][j])
    return found, _take(lines, ~hit)
