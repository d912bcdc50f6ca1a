"""NVTX ranges projected onto the GPU, as Nsight Systems projects them.

A range (a layer, an operator, a solver phase) opens and closes on a CPU thread; the GPU work
it launches runs later, asynchronously. Its *projection* is that work: the GPU activities
(kernels, NCCL kernels, copies, sets; the nodes of a CUDA graph launched inside it) whose
launching CUDA call started inside the range on the range's own thread. Projected start = the
first such activity's start, projected end = the last one's end; `ops` = the launching calls
with GPU work (nsys' NumGPUOps counts distinct correlation ids, not activities). Nesting is
nsys' too, on the CPU times of every range of a thread whatever its domain or style: the
parent of a range is the shortest other range of its thread that contains it, ends
inclusive (`enclosing`, compiled); level 0 at the roots. The rules, read from nsys 2023.4's
`nvtx_gpu_proj_trace` and checked against it: tests/data/nvtx_proj/README.md.

Arithmetic on arrays only, so that the translation (the projected ranges written on the GPU
rows, `paraver/kinds/nvtx.py`) and the analysis (`layers.py`, from a trace) compute the same
projection from the same numbers. The work is sorted once by (launching thread, call start):
the work of a range is then one contiguous slice of it (two searches), and every per-range
sum is a difference of prefix sums or a reduction over slices — memory of the activities'
count plus a few numbers per range, time of the activities times the nesting depth at most,
never a join of ranges with activities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..engine._engine import enclosing

# what a GPU activity is (the columns of `Projection.time`)
KERNEL, NCCL, MEMCPY, MEMSET = 0, 1, 2, 3
KINDS = ("compute kernels", "NCCL kernels", "memcpy", "memset")
# busy time (the union of a range's work) is computed for ranges whose work runs on several
# rows a batch of this many activities at a time (memory: ~40 bytes an activity of a batch)
UNION_BATCH = 4_000_000


class PackedKeys:
    """(row, time) as one sortable int64: row << 43 | (time - earliest) where the times span
    less than 2^43 ns (2.4 h) and rows fit 20 bits, else row << 32 | the time's rank among
    the times given (order kept, equal times equal)."""

    def __init__(self, times: list[np.ndarray], rows: int = 0) -> None:
        allt = [t for t in times if t.size]
        self.lo = min((int(t.min()) for t in allt), default=0)
        hi = max((int(t.max()) for t in allt), default=0)
        self.ranks = None if hi - self.lo < 1 << 43 and rows < 1 << 20 \
            else np.unique(np.concatenate(allt))

    def __call__(self, row: np.ndarray, t: np.ndarray) -> np.ndarray:
        if self.ranks is None:  # in place: one array of the pairs' count
            out = np.asarray(t, np.int64) - self.lo
            out |= np.left_shift(np.asarray(row, np.int64), 43)
            return out
        out = np.searchsorted(self.ranks, t).astype(np.int64)
        out |= np.left_shift(np.asarray(row, np.int64), 32)
        return out


def nesting(row: np.ndarray, start: np.ndarray, end: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(parent, level) of each range (row, start, end: any order): the parent's index in the
    input (-1 at a root) and the depth (0 at a root; -1 for twins — ranges of one thread
    with equal start and end, each the other's parent in nsys — and what lies below them)."""
    n = len(row)
    parent = np.full(n, -1, dtype=np.int64)
    level = np.zeros(n, dtype=np.int32)
    if n == 0:
        return parent, level
    order = np.lexsort((np.arange(n), -np.asarray(end, np.int64), start, row))
    p = np.empty(n, dtype=np.int64)
    lv = np.empty(n, dtype=np.int32)
    enclosing(np.ascontiguousarray(row[order], np.int32),
              np.ascontiguousarray(start[order], np.int64),
              np.ascontiguousarray(end[order], np.int64), p, lv)
    parent[order] = np.where(p >= 0, order[np.maximum(p, 0)], -1)
    level[order] = lv
    return parent, level


@dataclass
class Work:
    """GPU activities with the CUDA call that launched them, sorted by (launching row, call
    start): `launch_row` (the host row of the call), `launch` (its start), `row` (the GPU
    row the activity ran on), `start`, `end`, `kind` (a category code), `item` (the
    activity's index in the caller's order, to carry its own columns along), `key`
    (`keys(launch_row, launch)`), `calls` (on the first activity of each launch instant,
    the calls it stands for: nsys counts launching calls, not activities)."""

    launch_row: np.ndarray
    launch: np.ndarray
    row: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    item: np.ndarray
    key: np.ndarray
    keys: PackedKeys
    calls: np.ndarray  # per activity: the calls its first activity of a launch instant stands for
    zero: np.ndarray | None = None  # its launch instant holds calls of 0 ns only

    @classmethod
    def of(cls, launch_row: np.ndarray, launch: np.ndarray, row: np.ndarray,
           start: np.ndarray, end: np.ndarray, kind: np.ndarray,
           range_times: list[np.ndarray] = (), calls_at: np.ndarray | None = None,
           zero: np.ndarray | None = None) -> "Work":
        """Activities without a launching call (launch_row < 0) are left out, as nsys leaves
        them out. `range_times`: the ranges' starts and ends, which the keys must order
        too. Where clamped timestamps put several calls of a thread at one instant:
        `calls_at` (per activity, the calls that start at its launch instant; default 1) and
        `zero` (those calls all last 0 ns)."""
        valid = np.asarray(launch_row) >= 0
        keep = None if valid.all() else np.flatnonzero(valid).astype(np.int32)
        del valid
        lr = np.asarray(launch_row, np.int32) if keep is None \
            else np.asarray(launch_row, np.int32)[keep]
        la = np.asarray(launch, np.int64) if keep is None \
            else np.asarray(launch, np.int64)[keep]
        nrows = int(lr.max()) + 1 if lr.size else 0
        keys = PackedKeys([la, *[np.asarray(t, np.int64) for t in range_times]], nrows)
        key = keys(lr, la)
        order = np.argsort(key, kind="stable").astype(np.int32)
        item = order if keep is None else keep[order]
        key = key[order]
        lr, la = lr[order], la[order]
        del order, keep
        # the launching calls an instant stands for: one per activity at most (several calls
        # of one instant each launched one), as many as started there at most
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        size = np.diff(np.append(starts, key.size))
        at = np.ones(key.size, np.int64) if calls_at is None \
            else np.maximum(np.asarray(calls_at, np.int64)[item], 1)
        calls = np.zeros(key.size, dtype=np.int32)
        calls[starts] = np.minimum(size, at[starts])
        del first, starts, size, at
        return cls(lr, la, np.asarray(row, np.int32)[item],
                   np.asarray(start, np.int64)[item], np.asarray(end, np.int64)[item],
                   np.asarray(kind, np.int8)[item], item, key, keys, calls,
                   None if zero is None else np.asarray(zero, bool)[item])

    @property
    def size(self) -> int:
        return int(self.key.size)

    def slices(self, row: np.ndarray, start: np.ndarray, end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """[lo, hi) of the work of each range (row, start, end): the calls of its row that
        start at or after its start and before its end (a call that starts inside a range
        of its own thread ends inside it: the thread is in the call until it returns)."""
        row = np.asarray(row, np.int64)
        lo = np.searchsorted(self.key, self.keys(row, np.asarray(start, np.int64)), "left")
        end_key = self.keys(row, np.asarray(end, np.int64))
        hi = np.searchsorted(self.key, end_key, "left")
        if self.zero is not None and self.size:  # calls of 0 ns at the end: inside (nsys)
            right = np.searchsorted(self.key, end_key, "right")
            at_end = (right > hi) & self.zero[np.minimum(hi, self.size - 1)]
            hi = np.where(at_end, right, hi)
        return lo, np.maximum(hi, lo)


def _reduce_slices(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray
                   ) -> np.ndarray:
    """`ufunc.reduce(values[lo:hi])` of every non-empty slice (lo < hi: the caller masks the
    others), in one `reduceat` over slices ordered by `lo` (the pieces between them are
    reduced too, and dropped: they add no more than the values once)."""
    out = np.zeros(len(lo), dtype=values.dtype)
    full = np.flatnonzero(hi > lo)
    if full.size == 0:
        return out
    order = full[np.argsort(lo[full], kind="stable")]
    idx = np.empty(2 * order.size, dtype=np.int64)
    idx[0::2] = lo[order]
    idx[1::2] = hi[order]
    padded = np.append(values, values[-1:])  # hi may be len(values)
    out[order] = ufunc.reduceat(padded, idx)[0::2]
    return out


@dataclass
class Projection:
    """Per range (in the caller's order): `lo`, `hi` (its slice of `Work`), `start` and
    `end` (of its GPU work; meaningful where `ops` > 0), `ops` (launching calls with GPU
    work), `time` (ranges x KINDS: the GPU time of each kind of activity, summed), `busy`
    (the union of its work's intervals; -1 where not computed), `rows` (its work ran on
    more than one GPU row)."""

    lo: np.ndarray
    hi: np.ndarray
    start: np.ndarray
    end: np.ndarray
    ops: np.ndarray
    time: np.ndarray
    busy: np.ndarray
    multirow: np.ndarray

    @property
    def projected(self) -> np.ndarray:
        """The ranges with GPU work."""
        return self.ops > 0


def project(work: Work, row: np.ndarray, start: np.ndarray, end: np.ndarray,
            busy: bool = True, kinds: int = len(KINDS)) -> Projection:
    """The projection of the ranges (row, start, end) onto `work` (see the module's
    docstring); with `busy`, the union of each range's work too; `time` has a column per
    kind code 0..kinds-1 of the work."""
    lo, hi = work.slices(row, start, end)
    n = len(lo)
    if work.size == 0:
        z = np.zeros(n, dtype=np.int64)
        return Projection(lo, hi, z, z.copy(), z.copy(), np.zeros((n, kinds), np.int64),
                          z.copy(), np.zeros(n, bool))
    calls = np.concatenate([[0], np.cumsum(work.calls)])
    ops = calls[hi] - calls[lo]
    gstart = _reduce_slices(np.minimum, work.start, lo, hi)
    gend = _reduce_slices(np.maximum, work.end, lo, hi)
    dur = work.end - work.start
    time = np.zeros((n, kinds), dtype=np.int64)
    for k in range(kinds):
        cs = np.concatenate([[0], np.cumsum(np.where(work.kind == k, dur, 0))])
        time[:, k] = cs[hi] - cs[lo]
    rmin = _reduce_slices(np.minimum, work.row, lo, hi)
    rmax = _reduce_slices(np.maximum, work.row, lo, hi)
    multirow = (hi > lo) & (rmin != rmax)
    out = Projection(lo, hi, gstart, gend, ops, time, np.full(n, -1, np.int64), multirow)
    if busy:
        out.busy = union_time(work, lo, hi, multirow)
    return out


def union_time(work: Work, lo: np.ndarray, hi: np.ndarray, multirow: np.ndarray
               ) -> np.ndarray:
    """The time covered by the work of each slice: its summed durations where it ran on
    one row (the activities of a row never overlap: a stream's overlapping kernels are on
    lanes of their own), else the union of its intervals (sorted per range, each adding
    what passes the furthest end before it), a batch of UNION_BATCH activities at a time."""
    dur = work.end - work.start
    cs = np.concatenate([[0], np.cumsum(dur)])
    out = cs[hi] - cs[lo]
    many = np.flatnonzero(multirow)
    if many.size == 0:
        return out
    lengths = hi[many] - lo[many]
    batch = np.cumsum(lengths) // UNION_BATCH
    for b in np.unique(batch):
        part = many[batch == b]
        ln = hi[part] - lo[part]
        owner = np.repeat(np.arange(part.size, dtype=np.int64), ln)
        idx = np.arange(int(ln.sum()), dtype=np.int64) \
            - np.repeat(np.cumsum(ln) - ln - lo[part], ln)
        covered = (pl.DataFrame({"o": owner, "s": work.start[idx], "e": work.end[idx]})
                   .sort("o", "s")
                   .with_columns(pl.col("e").cum_max().shift(1).over("o").alias("p"))
                   .group_by("o").agg((pl.col("e") - pl.max_horizontal("s", "p"))
                                      .clip(0, None).sum().alias("t"))
                   .sort("o"))
        out[part[covered["o"].to_numpy()]] = covered["t"].to_numpy()
    return out


def row_spans(work: Work, proj: Projection, which: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per range of `which` (indices of projected ranges) and per GPU row its work ran on:
    (range index, GPU row, first start, last end) — what the range looks like on each
    stream. Sorted by (launching row, GPU row, call start), the work of a range on one GPU
    row is a slice (two searches); the GPU rows tried for a range are those its thread
    launches onto (a few streams)."""
    z = np.zeros(0, np.int64)
    if work.size == 0 or len(which) == 0:
        return z, z.astype(np.int32), z, z
    order = np.lexsort((work.launch, work.row, work.launch_row))
    host, gpu = work.launch_row[order].astype(np.int64), work.row[order].astype(np.int64)
    block_start = np.flatnonzero(np.append(True, (host[1:] != host[:-1])
                                           | (gpu[1:] != gpu[:-1])))
    block_host, block_gpu = host[block_start], gpu[block_start]
    block = np.repeat(np.arange(block_start.size), np.diff(np.append(block_start, host.size)))
    launch = work.launch[order]
    keys = PackedKeys([launch, work.launch], block_start.size)
    key = keys(block, launch)
    # the blocks of each range's thread (blocks of one host row are consecutive)
    hosts, hfirst, hcount = np.unique(block_host, return_index=True, return_counts=True)
    which = np.asarray(which, np.int64)
    lo, hi = proj.lo[which], proj.hi[which]
    h = np.searchsorted(hosts, work.launch_row[lo].astype(np.int64))
    cnt = hcount[h]
    rep = np.repeat(np.arange(which.size), cnt)
    blk = np.repeat(hfirst[h], cnt) + np.arange(int(cnt.sum())) \
        - np.repeat(np.cumsum(cnt) - cnt, cnt)
    t0 = work.launch[lo][rep]  # the range's first call
    t1 = work.launch[hi - 1][rep]  # and its last
    a = np.searchsorted(key, keys(blk, t0), "left")
    b = np.searchsorted(key, keys(blk, t1), "right")
    keep = b > a
    a, b, rep, blk = a[keep], b[keep], rep[keep], blk[keep]
    first = _reduce_slices(np.minimum, work.start[order], a, b)
    last = _reduce_slices(np.maximum, work.end[order], a, b)
    return which[rep], block_gpu[blk].astype(np.int32), first, last
