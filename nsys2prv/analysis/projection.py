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
    reduced too, and dropped: they add no more than the values once); where the slices
    nest so deep that they cover the values many times over (10^6 ranges left open, each
    inside the last), by blocks (`_block_reduce`)."""
    out = np.zeros(len(lo), dtype=values.dtype)
    full = np.flatnonzero(hi > lo)
    if full.size == 0:
        return out
    if int((hi[full] - lo[full]).sum()) > 8 * values.size + (1 << 20):
        out[full] = _block_reduce(ufunc, values, lo[full], hi[full])
        return out
    order = full[np.argsort(lo[full], kind="stable")]
    idx = np.empty(2 * order.size, dtype=np.int64)
    idx[0::2] = lo[order]
    idx[1::2] = hi[order]
    padded = np.append(values, values[-1:])  # hi may be len(values)
    out[order] = ufunc.reduceat(padded, idx)[0::2]
    return out


def _block_reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  block: int = 64) -> np.ndarray:
    """`ufunc.reduce(values[lo:hi])` (np.minimum or np.maximum) of non-empty slices in
    time linear in the values and the slices, whatever their lengths: within a block of
    `block` values by prefix and suffix reductions, across blocks by a table of the
    blocks' reductions over 2^k blocks."""
    n = values.size
    nb = (n + block - 1) // block
    fill = np.iinfo(values.dtype).max if ufunc is np.minimum else np.iinfo(values.dtype).min
    padded = np.full(nb * block, fill, dtype=values.dtype)
    padded[:n] = values
    grid = padded.reshape(nb, block)
    prefix = ufunc.accumulate(grid, axis=1).ravel()
    suffix = ufunc.accumulate(grid[:, ::-1], axis=1)[:, ::-1].ravel()
    table = [ufunc.reduce(grid, axis=1)]
    while (1 << len(table)) <= nb:
        last, step = table[-1], 1 << (len(table) - 1)
        table.append(ufunc(last[:-step], last[step:]))
    out = np.empty(lo.size, dtype=values.dtype)
    bl, bh = lo // block, (hi - 1) // block
    same = bl == bh
    if same.any():  # inside one block: a few passes over the slices
        a, z = lo[same], hi[same]
        acc = np.full(a.size, fill, dtype=values.dtype)
        for k in range(block):
            at = a + k
            live = at < z
            if not live.any():
                break
            acc = np.where(live, ufunc(acc, padded[np.minimum(at, padded.size - 1)]), acc)
        out[same] = acc
    cross = ~same
    if cross.any():
        a, z = lo[cross], hi[cross]
        b0, b1 = bl[cross] + 1, bh[cross]  # whole blocks between: [b0, b1)
        res = ufunc(suffix[a], prefix[z - 1])
        span = b1 - b0
        mid = span > 0
        if mid.any():
            k = np.floor(np.log2(span[mid])).astype(np.int64)
            first = np.empty(mid.sum(), dtype=values.dtype)
            for lv in np.unique(k).tolist():
                sel = k == lv
                t = table[lv]
                x0 = b0[mid][sel]
                x1 = b1[mid][sel] - (1 << lv)
                first[sel] = ufunc(t[x0], t[x1])
            res[mid] = ufunc(res[mid], first)
        out[cross] = res
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


# -- the same projection from the work read as a stream ----------------------------------
#
# The analysis of a trace does not hold its work: the ranges' boundaries cut each thread's
# calls into segments (between two boundaries, and at each one); each chunk of the streamed
# work is summed per segment it touches, and a range's numbers are those of its segments
# (sums, minima, maxima over a slice of segments) added chunk by chunk (`RangeSums`):
# memory of the ranges, the same numbers as `project` over the work sorted whole.

def rank_positions(points: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Times `t` as positions among the sorted distinct `points` that keep every order
    relation with them: a point p[i] is 2 i + 1, a time between p[i-1] and p[i] is 2 i.
    Made in place in one array of the times' count (millions of ranges' times at once)."""
    i = np.searchsorted(points, t, side="left").astype(np.int64, copy=False)
    if points.size:
        on = points[np.minimum(i, points.size - 1)] == t
        on &= i < points.size
    else:
        on = np.zeros(i.size, dtype=bool)
    i *= 2
    i += on
    return i


def sorted_unique(parts: list[np.ndarray]) -> np.ndarray:
    """The sorted distinct values of the arrays `parts` (int64), sorted in place in their
    one concatenation: `np.unique` would hold a sorted copy beside it."""
    if not parts:
        return np.zeros(0, np.int64)
    out = np.concatenate([np.asarray(p, np.int64) for p in parts])
    out.sort()
    if out.size:
        keep = np.empty(out.size, dtype=bool)
        keep[0] = True
        np.not_equal(out[1:], out[:-1], out=keep[1:])
        out = out[keep]
    return out


class RankKeys:
    """(group, time) as one int64 that sorts as the pairs do, for times compared with a
    set of points: `group * width + rank_positions(points, time)` (exact whatever the
    times' span, unlike a time packed into the low bits)."""

    def __init__(self, points: list[np.ndarray]) -> None:
        self.points = sorted_unique([p for p in points if np.size(p)])
        self.width = 2 * self.points.size + 2

    def __call__(self, group: np.ndarray, t: np.ndarray) -> np.ndarray:
        out = rank_positions(self.points, np.asarray(t, np.int64))
        out += np.asarray(group, np.int64) * self.width
        return out


class Segments:
    """The boundaries (start and end) of ranges (row, start, end) on their threads, and the
    segments they cut the calls of each thread into: at a boundary (2 i + 1) and between
    two (2 i). A range's calls are those of segments 2 a + 1 .. 2 c (a, c: its start's and
    end's boundaries), and those at its end where the calls there last 0 ns
    (`Work.slices`)."""

    def __init__(self, row: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.keys = RankKeys([start, end])
        sk = self.keys(row, start)
        ek = self.keys(row, end)
        self.bounds = sorted_unique([sk, ek])
        self.n = 2 * self.bounds.size + 1
        # the segments at each range's start and end boundary (2 a + 1, 2 c + 1), made in
        # place and handed over once (`take_ends`): 16 bytes a range not held twice
        self._ends: list[np.ndarray] = []
        for k in (sk, ek):
            at = np.searchsorted(self.bounds, k)
            at *= 2
            at += 1
            self._ends.append(at)

    def take_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """Each range's segment at its start boundary and at its end boundary (2 a + 1,
        2 c + 1), to their one holder: this object lets go of them."""
        lo, hi = self._ends
        self._ends = []
        return lo, hi

    def of(self, row: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The segment of calls (row, start time)."""
        k = self.keys(row, t)
        i = np.searchsorted(self.bounds, k, side="left")
        on = np.zeros(i.size, dtype=bool)
        inside = i < self.bounds.size
        on[inside] = self.bounds[i[inside]] == k[inside]
        return 2 * i.astype(np.int64) + on


class RangeSums:
    """The projection of ranges (`Segments`) from the work streamed chunk by chunk, kept
    per range (not per segment: a quarter of the numbers): each chunk summed over the
    segments it touches, then over the slices of the ranges that can hold it (started by
    its last launch and not ended before its first), and added to theirs; per segment, the
    activities, the launching calls they stand for (`Work.calls`), first start, last end,
    GPU time per kind that ran, lowest and highest GPU row, and whether the calls at a
    boundary last 0 ns (then inside the range that ends there). The work launched in no
    range and all the work's time are summed on the way (`unassigned`, `work_time`). The
    activities of one launch instant must come in one chunk; chunks in any order."""

    def __init__(self, segments: Segments, start: np.ndarray, end: np.ndarray,
                 kinds: int) -> None:
        self.segments = segments
        self.lo, self.hi = segments.take_ends()
        n = self.lo.size
        self.start = np.asarray(start, np.int64)
        self.end = np.asarray(end, np.int64)
        self.by_start = np.argsort(self.start, kind="stable")
        self.sorted_start = self.start[self.by_start]
        self.kinds = kinds
        self.calls = np.zeros(n, dtype=np.int64)
        self.first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        self.last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        self.times: dict[int, np.ndarray] = {}
        self.rmin = np.full(n, np.iinfo(np.int32).max, dtype=np.int32)
        self.rmax = np.full(n, -1, dtype=np.int32)
        self.at_end = np.zeros(n, dtype=bool)
        # the segments inside some range's slice (calls at an end boundary too where they
        # last 0 ns: `end_bound`, decided by the chunk that holds them)
        depth = np.zeros(segments.n + 1, dtype=np.int32)
        np.add.at(depth, self.lo, 1)
        np.add.at(depth, self.hi, -1)
        np.cumsum(depth, out=depth)  # in place (a cumsum of int32 is made in int64)
        self.covered = depth[:-1] > 0
        del depth
        self.end_bound = np.zeros(segments.n, dtype=bool)
        self.end_bound[self.hi] = True
        self.unassigned = {"ops": 0, "activities": 0, "gpu_time": 0}
        self.work_time = 0

    def add(self, launch_row: np.ndarray, launch: np.ndarray, row: np.ndarray,
            start: np.ndarray, end: np.ndarray, kind: np.ndarray,
            calls_at: np.ndarray | None = None, zero: np.ndarray | None = None) -> None:
        """Activities with their launching call (launch_row >= 0), as `Work.of` takes
        them."""
        if len(launch_row) == 0:
            return
        la = np.asarray(launch, np.int64)
        seg = self.segments.of(launch_row, la)
        order = np.argsort(seg, kind="stable")
        ss = seg[order]
        heads = np.flatnonzero(np.append(True, ss[1:] != ss[:-1]))
        touched = ss[heads]
        start = np.asarray(start, np.int64)
        end = np.asarray(end, np.int64)
        dur = end - start
        count = np.diff(np.append(heads, ss.size))
        first = np.minimum.reduceat(start[order], heads)
        last = np.maximum.reduceat(end[order], heads)
        r32 = np.asarray(row, np.int32)[order]
        rmin = np.minimum.reduceat(r32, heads)
        rmax = np.maximum.reduceat(r32, heads)
        kind = np.asarray(kind, np.int64)
        times = {k: np.add.reduceat(np.where(kind == k, dur, 0)[order], heads)
                 for k in np.unique(kind).tolist()}
        del r32
        # the calls of each launch instant: as many as its activities, at most as many as
        # started there (`Work.of`), on its segment
        lr = np.asarray(launch_row, np.int64)
        o2 = np.lexsort((la, lr))
        ihead = np.flatnonzero(np.append(True, (lr[o2][1:] != lr[o2][:-1])
                                         | (la[o2][1:] != la[o2][:-1])))
        ifirst = o2[ihead]
        size = np.diff(np.append(ihead, o2.size))
        at = np.ones(ifirst.size, np.int64) if calls_at is None \
            else np.maximum(np.asarray(calls_at, np.int64)[ifirst], 1)
        where = np.searchsorted(touched, seg[ifirst])
        calls = np.zeros(touched.size, dtype=np.int64)
        np.add.at(calls, where, np.minimum(size, at))
        zeros = np.zeros(touched.size, dtype=bool)
        if zero is not None:
            zeros[where[np.asarray(zero, bool)[ifirst]]] = True
        del o2, ihead, ifirst, size, at, where
        # the work launched in no range, and all of it
        chunk_time = sum(times.values())
        self.work_time += int(chunk_time.sum())
        out = ~self.covered[touched] & ~(self.end_bound[touched] & zeros)
        self.unassigned["ops"] += int(calls[out].sum())
        self.unassigned["activities"] += int(count[out].sum())
        self.unassigned["gpu_time"] += int(chunk_time[out].sum())
        # the ranges that can hold this work: started by its last launch, not ended
        # before its first
        began = self.by_start[:np.searchsorted(self.sorted_start, la.max(), "right")]
        live = began[self.end[began] >= la.min()]
        if live.size == 0:
            return
        p = np.searchsorted(touched, self.lo[live], "left")
        q = np.searchsorted(touched, self.hi[live], "left")
        qq = np.minimum(q, touched.size - 1)
        ext = (q < touched.size) & (touched[qq] == self.hi[live]) & zeros[qq]
        self.at_end[live[ext]] = True
        q = q + ext
        has = q > p
        live, p, q = live[has], p[has], q[has]
        if live.size == 0:
            return

        def summed(values: np.ndarray) -> np.ndarray:
            cs = np.concatenate([[0], np.cumsum(values)])
            return cs[q] - cs[p]

        self.calls[live] += summed(calls)
        for k, t in times.items():
            if k not in self.times:
                self.times[k] = np.zeros(self.calls.size, dtype=np.int64)
            self.times[k][live] += summed(t)
        # `live` holds each range once
        self.first[live] = np.minimum(self.first[live], _reduce_slices(np.minimum, first, p, q))
        self.last[live] = np.maximum(self.last[live], _reduce_slices(np.maximum, last, p, q))
        self.rmin[live] = np.minimum(self.rmin[live], _reduce_slices(np.minimum, rmin, p, q))
        self.rmax[live] = np.maximum(self.rmax[live], _reduce_slices(np.maximum, rmax, p, q))

    def projected(self) -> tuple[np.ndarray, dict]:
        """The ranges with GPU work, by the start of their work then their index, and what
        `project` gives of them (start, end, ops, busy: -1 where the work ran on several
        rows, `union_time` gives it; lo, hi: their slices of segments; `time`, a column a
        kind, None for a kind no range's work had): ranges that launched nothing are not
        projected. Consumes the sums: each array is let go once its projected rows are
        taken (a run's ranges can be millions: one array held twice at a time, not all of
        them)."""
        keep = np.flatnonzero(self.calls > 0)
        keep = keep[np.lexsort((keep, self.first[keep]))]
        several = self.rmin[keep] != self.rmax[keep]
        self.rmin = self.rmax = None
        times = []
        for k in range(self.kinds):
            t = self.times.pop(k, None)
            times.append(t[keep] if t is not None else None)
            del t
        had = [t for t in times if t is not None]
        out = {"busy": np.where(several, -1, sum(had) if had else 0).astype(np.int64),
               "time": times}
        del had
        del several
        out["start"] = self.first[keep]
        self.first = None
        out["end"] = self.last[keep]
        self.last = None
        out["ops"] = self.calls[keep]
        self.calls = None
        lo = self.lo[keep]
        out["lo"] = lo
        out["hi"] = np.maximum(np.where(self.at_end[keep], self.hi[keep] + 1, self.hi[keep]),
                               lo)
        self.lo = self.hi = self.at_end = None
        return keep, out


class WantedUnion:
    """The time covered by the work of some ranges (`lo`, `hi`: their slices of segments),
    from the work streamed in start order (`add`, chunk by chunk, each with its segments):
    per range the end reached so far and the time covered, its work's union as the sorted
    work gives it (`union_time`). Memory: the ranges, and per segment the ranges that
    hold it."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray) -> None:
        n = np.asarray(hi - lo, np.int64)
        owner = np.repeat(np.arange(lo.size, dtype=np.int64), np.maximum(n, 0))
        seg = np.arange(int(np.maximum(n, 0).sum()), dtype=np.int64) \
            - np.repeat(np.cumsum(np.maximum(n, 0)) - np.maximum(n, 0) - lo, np.maximum(n, 0))
        order = np.argsort(seg, kind="stable")
        self.seg = seg[order]
        self.owner = owner[order]
        self.reach = np.full(lo.size, np.iinfo(np.int64).min, dtype=np.int64)
        self.covered = np.zeros(lo.size, dtype=np.int64)

    def add(self, seg: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        a = np.searchsorted(self.seg, seg, side="left")
        z = np.searchsorted(self.seg, seg, side="right")
        k = z - a
        if not k.any():
            return
        item = np.repeat(np.arange(seg.size), k)
        pos = np.repeat(a, k) + (np.arange(item.size) - np.repeat(np.cumsum(k) - k, k))
        who = self.owner[pos]
        o = np.lexsort((item, who))  # per range, in the work's (start) order
        who, s, e = who[o], start[item[o]], end[item[o]]
        first = np.append(True, who[1:] != who[:-1])
        # the end reached before each activity of a range: its earlier ones', and what
        # the range reached in the chunks before
        run = (pl.DataFrame({"w": who, "e": np.maximum(e, self.reach[who])})
               .select(pl.col("e").cum_max().over("w"))["e"].to_numpy())
        prev = np.empty_like(e)
        prev[1:] = run[:-1]
        prev[first] = self.reach[who[first]]
        gain = np.maximum(e - np.maximum(s, prev), 0)
        np.add.at(self.covered, who, gain)
        last = np.append(np.flatnonzero(first)[1:], e.size) - 1
        self.reach[who[last]] = run[last]
