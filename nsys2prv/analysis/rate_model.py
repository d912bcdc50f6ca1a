"""The sample-mixing model of GPU metrics: what each kernel does with the GPU, separated from
samples that each mix several kernels.

nsys samples a GPU's hardware metrics every 100-125 µs (`--gpu-metrics-frequency`); a
sample is the device's average over its sampling period, which starts at the sample's
timestamp and ends at the next one. Most kernels of an AI workload are shorter than a period,
so giving a kernel the values of the periods it overlaps (the *direct attribution*) blurs it
with its neighbours and with the idle time between them. The model instead writes each
sample as the time-weighted mix of what ran in its period:

    value_i = sum_c share_ic * rate_c

with one column c per kernel name (and per kind of memory operation, and one for the time
in which nothing ran: *idle*), share_ic the fraction of period i that c ran (summed over its
instances) and rate_c the metric's value while c runs. Rates are fitted per metric by
least squares over all samples, bounded to the metric's range (0-100 for percentages).

Concurrent activities (kernels on several streams, copies beside kernels) *add up*: each
column's rate is its contribution to the device-wide metric while it runs, and a period in
which two columns run at once gets the sum of both contributions (the idle column has the
share of the period in which nothing ran). That is the model's assumption; it holds for the
throughput metrics that count a device resource (SMs active, issue slots, tensor pipes, DRAM
and link bytes), not for clocks, whose fit quality says so.

Everything is found from additive sums over samples (the normal equations), kept per *fold*
(samples of even and odd index within a GPU): the fit on all samples, the fit on one fold
scored on the other (cross-validated R^2, for the model and for the direct attribution), the
uncertainty of each rate (standard error from the inverse Gram matrix and the held-out
residual), and which columns never run apart from another (a *group*, whose members cannot
be told apart). The sums are built with numpy in chunks of periods: memory is that of one
chunk's (period, column) pairs and a (columns x columns) matrix per fold.

This module is pure arithmetic on arrays; the analysis (`kernel_metrics.py`, from a trace)
and the translation (`paraver/kinds/gpu_metrics.py`, from an export, to write the rates on
the kernels' rows) give it the same arrays, so both find the same rates.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

FOLDS = 2
# a column "measured directly": it fills at least this share of some sampling periods
DIRECT_SHARE = 0.95
DIRECT_PERIODS = 2
# two columns whose shares are this collinear (cosine of their share vectors) never ran apart
GROUP_COSINE = 0.9995
# a gap between two samples longer than this many median intervals: the earlier sample's
# period is cut to one median interval (samples lost, or sampling paused)
GAP_FACTOR = 1.5
PAIRS_PER_CHUNK = 500_000
# a rate's range: the values whose fit is at most RANGE_Z^2 sigma^2 worse than the best
# (RANGE_Z = 2: about 95 % for a normal error); a range wider than UNDETERMINED of the
# metric's span (10 points of a percentage) is an undetermined rate
RANGE_Z = 2.0
UNDETERMINED = 0.10


@dataclass
class Periods:
    """A GPU's sampling periods: [start, end) of each sample, sorted; `interval` is the
    median interval between samples."""

    start: np.ndarray
    end: np.ndarray
    interval: int
    cut: int = 0  # periods cut short at a gap in the sampling

    @property
    def n(self) -> int:
        return int(self.start.size)


def periods_of(times: np.ndarray) -> Periods:
    """Sampling periods from sorted unique sample times: each sample holds until the next
    one; the last one, and one followed by a gap of more than GAP_FACTOR median intervals,
    lasts one median interval."""
    t = np.asarray(times, dtype=np.int64)
    if t.size == 0:
        return Periods(t, t.copy(), 0)
    gaps = np.diff(t)
    interval = int(np.median(gaps)) if gaps.size else 0
    end = np.empty_like(t)
    end[:-1] = t[1:]
    end[-1] = t[-1] + interval
    cut = 0
    if gaps.size and interval > 0:
        long = np.zeros(t.size, dtype=bool)
        long[:-1] = gaps > GAP_FACTOR * interval
        cut = int(long.sum())
        end[long] = t[long] + interval
    return Periods(t, end, interval, cut)


@dataclass
class Entries:
    """The (period, column, share) triplets of a GPU's samples, sorted by period, with the
    idle column (index `n_cols`) where the period was not entirely busy; `busy` is the
    fraction of each period in which anything ran (the union of the intervals)."""

    period: np.ndarray  # int64
    col: np.ndarray  # int64, 0..n_cols (n_cols = idle)
    share: np.ndarray  # float64
    busy: np.ndarray  # float64, one per period
    n_cols: int


def _expand(s: np.ndarray, e: np.ndarray, ps: np.ndarray, pe: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(interval index, period index, overlap ns) of every (interval, period) pair that
    overlaps: the periods are sorted and disjoint, so an interval [s, e) overlaps those from
    the first ending after s to the last starting before e."""
    first = np.searchsorted(pe, s, side="right")
    last = np.searchsorted(ps, e, side="left") - 1
    counts = np.maximum(last - first + 1, 0)
    idx = np.repeat(np.arange(s.size), counts)
    offsets = np.arange(idx.size) - np.repeat(np.cumsum(counts) - counts, counts)
    p = first[idx] + offsets
    ov = np.minimum(e[idx], pe[p]) - np.maximum(s[idx], ps[p])
    keep = ov > 0
    return idx[keep], p[keep], ov[keep]


def _union(s: np.ndarray, e: np.ndarray, presorted: bool = False
           ) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [s, e) as sorted disjoint intervals (`presorted`: s is
    sorted already)."""
    if s.size == 0:
        return s, e
    if not presorted:
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    starts = s[new]
    group = np.cumsum(new) - 1
    ends = np.full(starts.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(ends, group, e)
    return starts, ends


def _by_start(start: np.ndarray, end: np.ndarray, col: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty intervals [start, end) of column `col`, as int64, in start order
    (stable). In that order the (interval, period) pairs come nearly sorted by period: the
    sorts of `entries` and `block_entries` (stable: timsort, which runs through sorted
    stretches) then cost little."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    col = np.asarray(col, dtype=np.int64)
    ok = end > start
    start, end, col = start[ok], end[ok], col[ok]
    by_start = np.argsort(start, kind="stable")
    return start[by_start], end[by_start], col[by_start]


def entries(periods: Periods, start: np.ndarray, end: np.ndarray, col: np.ndarray,
            n_cols: int, chunk: int = 250_000) -> Entries:
    """The shares of every column in every sampling period (intervals [start, end) of column
    `col`; any order), the idle share included."""
    ps, pe = periods.start, periods.end
    n = periods.n
    length = (pe - ps).astype(np.float64)
    start, end, col = _by_start(start, end, col)
    keys, sums = [], []
    width = n_cols + 1
    for lo in range(0, start.size, chunk):
        i, p, ov = _expand(start[lo:lo + chunk], end[lo:lo + chunk], ps, pe)
        keys.append(p * width + col[lo:lo + chunk][i])
        sums.append(ov.astype(np.float64))
    if keys:
        key = np.concatenate(keys)
        ov = np.concatenate(sums)
        order = np.argsort(key, kind="stable")
        key, ov = key[order], ov[order]
        heads = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
        key, ov = key[heads], np.add.reduceat(ov, heads)
    else:
        key, ov = np.zeros(0, dtype=np.int64), np.zeros(0)
    us, ue = _union(start, end, presorted=True)
    busy = np.zeros(n)
    for lo in range(0, us.size, chunk):
        _, up, uov = _expand(us[lo:lo + chunk], ue[lo:lo + chunk], ps, pe)
        busy += np.bincount(up, weights=uov.astype(np.float64), minlength=n)
    del us, ue
    busy = np.divide(busy, length, out=np.zeros(n), where=length > 0)
    busy = np.minimum(busy, 1.0)
    period = key // width
    column = key % width
    share = ov / length[period]
    del ov
    idle_p = np.nonzero(busy < 1.0)[0]
    # the idle entries go after the busy ones of their period (keys sort that way)
    key = np.concatenate([key, idle_p * width + n_cols])
    order = np.argsort(key, kind="stable")
    del key
    return Entries(np.concatenate([period, idle_p])[order],
                   np.concatenate([column, np.full(idle_p.size, n_cols)])[order],
                   np.concatenate([share, 1.0 - busy[idle_p]])[order], busy, n_cols)


@dataclass
class Sums:
    """Additive sums of the normal equations, per fold (axis 0): G = sum s s', b = sum s v,
    and per metric the count, sum and sum of squares of the valid values; the same for the
    periods in which nothing ran (`idle_*`), so that fit quality can be scored on the busy
    periods alone. `share` is each column's summed share (its time in periods), `full` the
    number of periods it fills alone (share >= DIRECT_SHARE)."""

    G: np.ndarray  # (F, K1, K1)
    b: np.ndarray  # (F, K1, M)
    n: np.ndarray  # (F, M)
    sv: np.ndarray
    svv: np.ndarray
    idle_n: np.ndarray  # (F, M)
    idle_sv: np.ndarray
    idle_svv: np.ndarray
    share: np.ndarray  # (F, K1)
    full: np.ndarray  # (K1,)
    missing: dict = field(default_factory=dict)  # metric -> (F, K1, K1) G of invalid samples


def _pairs(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (i, j), i <= j, of positions holding the same period, for `p` sorted.
    A period's entries are one per column, by column (`entries`), so these pairs make the
    upper triangle of the Gram matrix and `_mirrored` the rest: half the pairs, the same
    sums to the last bit (the pair (j, i) adds the same product in the same period)."""
    if p.size == 0:
        return p, p
    bounds = np.flatnonzero(np.diff(p)) + 1
    ends = np.concatenate([bounds, [p.size]])
    counts = np.diff(np.concatenate([[0], ends]))
    per = np.repeat(ends, counts) - np.arange(p.size)  # each position: j from it to its end
    i = np.repeat(np.arange(p.size), per)
    offsets = np.arange(i.size) - np.repeat(np.cumsum(per) - per, per)
    return i, i + offsets


def _mirrored(upper: np.ndarray, F: int, K1: int) -> np.ndarray:
    """A chunk's Gram sums (F x K1 x K1, flat) from its upper triangle (`_pairs`): the
    lower one copied from it (x + 0.0 is x), the diagonal as it is."""
    u = upper.reshape(F, K1, K1)
    full = u + u.transpose(0, 2, 1)
    d = np.arange(K1)
    full[:, d, d] = u[:, d, d]
    return full.reshape(-1)


def accumulate(ent: Entries, values: np.ndarray) -> Sums:
    """The sums of the model for samples `values` (periods x metrics; NaN where a value is
    missing or invalid)."""
    v = np.asarray(values, dtype=np.float64)
    n_p, M = v.shape
    K1 = ent.n_cols + 1
    F = FOLDS
    valid = ~np.isnan(v)
    v0 = np.where(valid, v, 0.0)
    fold_p = np.arange(n_p) % F
    G = np.zeros(F * K1 * K1)
    b = np.zeros((F * K1, M))
    share = np.zeros(F * K1)
    # chunks of whole periods, so that every pair of a period is in one chunk
    counts = np.bincount(ent.period, minlength=n_p)
    cum = np.cumsum(counts.astype(np.int64) ** 2)
    bounds = [0]
    while bounds[-1] < n_p:
        base = cum[bounds[-1] - 1] if bounds[-1] else 0
        nxt = int(np.searchsorted(cum, base + PAIRS_PER_CHUNK, side="right"))
        bounds.append(max(nxt, bounds[-1] + 1))
    starts = np.concatenate([[0], np.cumsum(counts)])
    missing_metrics = [m for m in range(M) if not valid[:, m].all()]
    missing = {m: np.zeros(F * K1 * K1) for m in missing_metrics}
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        a, z = starts[lo], starts[min(hi, n_p)]
        p, c, s = ent.period[a:z], ent.col[a:z], ent.share[a:z]
        f = fold_p[p]
        i, j = _pairs(p)
        key = (f[i] * K1 + c[i]) * K1 + c[j]
        w = s[i] * s[j]
        G += _mirrored(np.bincount(key, weights=w, minlength=F * K1 * K1), F, K1)
        for m in missing_metrics:
            bad = ~valid[p[i], m]
            if bad.any():
                missing[m] += _mirrored(np.bincount(key[bad], weights=w[bad],
                                                    minlength=F * K1 * K1), F, K1)
        fc = f * K1 + c
        share += np.bincount(fc, weights=s, minlength=F * K1)
        vp = v0[p]
        for m in range(M):
            b[:, m] += np.bincount(fc, weights=s * vp[:, m], minlength=F * K1)
    full = np.bincount(ent.col[ent.share >= DIRECT_SHARE], minlength=K1)
    full[ent.n_cols] = 0
    n = np.zeros((F, M))
    sv = np.zeros((F, M))
    svv = np.zeros((F, M))
    idle = ent.busy <= 0.0
    in_n, in_sv, in_svv = np.zeros((F, M)), np.zeros((F, M)), np.zeros((F, M))
    for fo in range(F):
        sel = fold_p == fo
        n[fo] = valid[sel].sum(0)
        sv[fo] = v0[sel].sum(0)
        svv[fo] = (v0[sel] ** 2).sum(0)
        sel_i = sel & idle
        in_n[fo] = valid[sel_i].sum(0)
        in_sv[fo] = v0[sel_i].sum(0)
        in_svv[fo] = (v0[sel_i] ** 2).sum(0)
    return Sums(G.reshape(F, K1, K1), b.reshape(F, K1, M), n, sv, svv, in_n, in_sv, in_svv,
                share.reshape(F, K1), full,
                {m: g.reshape(F, K1, K1) for m, g in missing.items()})


# -- the same, fed in pieces: memory of a block of periods, the same numbers -------------------

def periods_block(t: np.ndarray, following: int | None, interval: int) -> tuple[np.ndarray, int]:
    """The ends of the periods of sample times `t` (a run of one GPU's sorted times) as
    `periods_of` makes them, `following`: the time of the sample after the run (None: the
    run is the last), `interval` the median interval of all of them; and the periods cut
    at a gap (`Periods.cut`)."""
    t = np.asarray(t, dtype=np.int64)
    end = np.empty_like(t)
    if t.size == 0:
        return end, 0
    end[:-1] = t[1:]
    end[-1] = t[-1] + interval if following is None else following
    nxt = np.append(t[1:], following if following is not None else t[-1])
    cut = 0
    if interval > 0:
        long = (nxt - t) > GAP_FACTOR * interval
        if following is None:
            long[-1] = False  # the last one lasts one interval already
        cut = int(long.sum())
        end[long] = t[long] + interval
    return end, cut


def median_interval(diffs: np.ndarray, counts: np.ndarray) -> int:
    """`int(np.median(gaps))` from the distinct gaps and how often each occurs."""
    n = int(counts.sum())
    if n == 0:
        return 0
    order = np.argsort(diffs, kind="stable")
    d, c = np.asarray(diffs)[order], np.cumsum(np.asarray(counts)[order])

    def kth(k: int) -> int:  # the k-th smallest gap (0-based)
        return int(d[np.searchsorted(c, k, side="right")])

    if n % 2:
        return int(kth(n // 2))
    return int(np.mean(np.array([kth(n // 2 - 1), kth(n // 2)], dtype=np.int64)))


def block_entries(ps: np.ndarray, pe: np.ndarray, start: np.ndarray, end: np.ndarray,
                  col: np.ndarray, n_cols: int, p0: int = 0) -> Entries:
    """`entries` of a block of consecutive periods [ps, pe) (global index of the first:
    `p0`) from every interval that overlaps them (any order; others are ignored): the same
    triplets, in the same order, as `entries` of all periods has for these."""
    n = ps.size
    length = (pe - ps).astype(np.float64)
    start, end, col = _by_start(start, end, col)
    width = n_cols + 1
    i, p, ov = _expand(start, end, ps, pe)
    key = p * width + col[i]
    ov = ov.astype(np.float64)
    if key.size:
        order = np.argsort(key, kind="stable")
        key, ov = key[order], ov[order]
        heads = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
        key, ov = key[heads], np.add.reduceat(ov, heads)
    us, ue = _union(start, end, presorted=True)
    busy = np.zeros(n)
    _, up, uov = _expand(us, ue, ps, pe)
    busy += np.bincount(up, weights=uov.astype(np.float64), minlength=n)
    busy = np.divide(busy, length, out=np.zeros(n), where=length > 0)
    busy = np.minimum(busy, 1.0)
    period = key // width
    column = key % width
    share = ov / length[period]
    idle_p = np.nonzero(busy < 1.0)[0]
    key = np.concatenate([key, idle_p * width + n_cols])
    order = np.argsort(key, kind="stable")
    return Entries(np.concatenate([period, idle_p])[order] + p0,
                   np.concatenate([column, np.full(idle_p.size, n_cols)])[order],
                   np.concatenate([share, 1.0 - busy[idle_p]])[order], busy, n_cols)


def lookup(table: dict, keys: np.ndarray) -> np.ndarray:
    """table[k] for each of `keys` (every key is in the table): a column per model code."""
    k = np.fromiter(table.keys(), dtype=np.int64, count=len(table))
    v = np.fromiter(table.values(), dtype=np.int64, count=len(table))
    order = np.argsort(k)
    return v[order][np.searchsorted(k[order], np.asarray(keys, dtype=np.int64))]


def sweep(blocks, activities, n_cols: int, columns, on_block) -> None:
    """The model's entries block by block of periods, each from the activities that overlap
    it: `blocks` yields (times, ends, values) of consecutive periods in order, `activities`
    frames (start, end, ...) in start order, `columns(frame)` each activity's column;
    `on_block(ent, times, ends, values, near, p0)` gets the block's entries
    (`block_entries`), its first period's index `p0` and `near`, the activities that start
    before its last period ends and were not over before the previous block's (None: none
    yet). Activities that may still overlap a later period are kept (one that spans the run
    stays to its end), the others let go; those after the last period are not read."""
    import polars as pl

    kept = None
    exhausted = False
    p0 = 0
    z = np.zeros(0, np.int64)
    for times, ends, mat in blocks:
        last = int(ends.max())
        # every activity that starts before the block's last period ends
        while not exhausted and (kept is None or kept.height == 0
                                 or int(kept["start"][-1]) < last):
            nxt = next(activities, None)
            if nxt is None:
                exhausted = True
                break
            nxt = nxt.with_columns(pl.Series("col", columns(nxt), dtype=pl.Int64))
            kept = nxt if kept is None else pl.concat([kept, nxt])
        near = kept.filter(pl.col("start") < last) if kept is not None else None
        if near is not None and near.height:
            ent = block_entries(times, ends, near["start"].to_numpy(), near["end"].to_numpy(),
                                near["col"].to_numpy(), n_cols, p0=p0)
        else:
            ent = block_entries(times, ends, z, z, z, n_cols, p0=p0)
        on_block(ent, times, ends, mat, near, p0)
        p0 += times.size
        if kept is not None:  # what ends by this block's last period cannot reach later
            kept = kept.filter(pl.col("end") > last)


class SumsStream:
    """`accumulate` fed block by block of consecutive periods (`add`: their entries and
    values), chunked as `accumulate` chunks all of them (whole periods, PAIRS_PER_CHUNK
    pairs, found greedily from the first period) and summed in the same order: `result`
    gives the same `Sums` to the last bit. `missing`: the metrics with an invalid value in
    some period (known before: `accumulate` looks at all of them). Also sums, in entry
    order, each column's time (`fit_device`'s `time`)."""

    def __init__(self, n_cols: int, M: int, missing: list[int]) -> None:
        self.K1 = K1 = n_cols + 1
        self.M = M
        F = FOLDS
        self.G = np.zeros(F * K1 * K1)
        self.b = np.zeros((F * K1, M))
        self.share = np.zeros(F * K1)
        self.full = np.zeros(K1, dtype=np.int64)
        self.missing = {m: np.zeros(F * K1 * K1) for m in missing}
        self.time = np.zeros(K1)
        z = np.zeros((F, M))
        self.n, self.sv, self.svv = z.copy(), z.copy(), z.copy()
        self.idle_n, self.idle_sv, self.idle_svv = z.copy(), z.copy(), z.copy()
        self.periods = 0  # periods given (the next one's global index)
        self._first = 0  # periods summed (the open chunk's first)
        self._used = 0  # pairs in the open chunk
        self._held: list[tuple[Entries, np.ndarray, np.ndarray]] = []  # the open chunk

    def add(self, ent: Entries, values: np.ndarray, length: np.ndarray) -> None:
        """The entries of the next block of periods (global indices), their values
        (periods x metrics, NaN: invalid) and lengths (ns)."""
        n = ent.busy.size
        if n == 0:
            return
        v = np.asarray(values, dtype=np.float64)
        p0 = self.periods
        local = ent.period - p0
        counts = np.bincount(local, minlength=n).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        sq = counts ** 2
        at = 0
        while at < n:  # close chunks where `accumulate` would
            room = PAIRS_PER_CHUNK - self._used
            cum = np.cumsum(sq[at:])
            k = int(np.searchsorted(cum, room, side="right"))  # periods that fit
            if k == 0 and self._used == 0:
                k = 1  # a period alone over the limit: a chunk of its own
            if k == 0:
                self._flush()
                continue
            hi = at + min(k, n - at)
            self._hold(ent, v, length, local, starts, at, hi, p0)
            self._used += int(cum[hi - at - 1])
            at = hi
            if at < n:
                self._flush()
        self.periods += n

    def _hold(self, ent, v, length, local, starts, lo, hi, p0) -> None:
        a, z = starts[lo], starts[hi]
        piece = Entries(ent.period[a:z], ent.col[a:z], ent.share[a:z], ent.busy[lo:hi],
                        ent.n_cols)
        self._held.append((piece, v[lo:hi], length[lo:hi]))
        # the column times, in entry order (`fit_device`'s bincount, entry by entry)
        np.add.at(self.time, piece.col, piece.share * length[piece.period - p0])

    def _flush(self) -> None:
        """Sum the open chunk (as one iteration of `accumulate`'s loop)."""
        if not self._held:
            return
        K1, F, M = self.K1, FOLDS, self.M
        p = np.concatenate([h[0].period for h in self._held])
        c = np.concatenate([h[0].col for h in self._held])
        s = np.concatenate([h[0].share for h in self._held])
        busy = np.concatenate([h[0].busy for h in self._held])
        v = np.concatenate([h[1] for h in self._held])
        self._held = []
        self._used = 0
        first = self._first  # the chunk's periods: global first .. first + len(v)
        self._first += v.shape[0]
        valid = ~np.isnan(v)
        v0 = np.where(valid, v, 0.0)
        fold_p = (np.arange(first, first + v.shape[0])) % F
        pl_ = p - first
        f = fold_p[pl_]
        i, j = _pairs(pl_)
        key = (f[i] * K1 + c[i]) * K1 + c[j]
        w = s[i] * s[j]
        self.G += _mirrored(np.bincount(key, weights=w, minlength=F * K1 * K1), F, K1)
        for m in self.missing:
            bad = ~valid[pl_[i], m]
            if bad.any():
                self.missing[m] += _mirrored(np.bincount(key[bad], weights=w[bad],
                                                         minlength=F * K1 * K1), F, K1)
        fc = f * K1 + c
        self.share += np.bincount(fc, weights=s, minlength=F * K1)
        vp = v0[pl_]
        for m in range(M):
            self.b[:, m] += np.bincount(fc, weights=s * vp[:, m], minlength=F * K1)
        self.full += np.bincount(c[s >= DIRECT_SHARE], minlength=K1)
        idle = busy <= 0.0
        for fo in range(F):
            sel = fold_p == fo
            _running(self.n[fo], valid[sel])
            _running(self.sv[fo], v0[sel])
            _running(self.svv[fo], v0[sel] ** 2)
            sel_i = sel & idle
            _running(self.idle_n[fo], valid[sel_i])
            _running(self.idle_sv[fo], v0[sel_i])
            _running(self.idle_svv[fo], v0[sel_i] ** 2)

    def result(self) -> Sums:
        self._flush()
        K1, F = self.K1, FOLDS
        full = self.full.copy()
        full[K1 - 1] = 0
        return Sums(self.G.reshape(F, K1, K1), self.b.reshape(F, K1, self.M), self.n,
                    self.sv, self.svv, self.idle_n, self.idle_sv, self.idle_svv,
                    self.share.reshape(F, K1), full,
                    {m: g.reshape(F, K1, K1) for m, g in self.missing.items()})


def _running(total: np.ndarray, rows: np.ndarray) -> None:
    """total += each row of `rows` in turn (the order numpy's sum over axis 0 adds them)."""
    if rows.shape[0] == 0:
        return
    acc = np.cumsum(np.vstack([total[None, :].astype(np.float64), rows.astype(np.float64)]),
                    axis=0)
    total[:] = acc[-1]


# -- the fit --------------------------------------------------------------------------------

class _FreeInverse:
    """inv(G[f, f]) for a set f of columns (sorted) that changes one column at a time, as
    the active-set methods below free and fix columns: each change is an O(|f|^2) update
    instead of a new O(|f|^3) factorisation (the benchmarks' synthetic metrics: 600
    columns, half of them ending at their grids' ceilings). Refactorised every REFRESH
    changes and whenever a pivot is too small to trust; every solve is checked by its
    residual, and where the inverse cannot be trusted (G[f, f] singular or too
    ill-conditioned: kernels that nearly always run together) each solve is done
    directly, as `_solve` does it."""

    REFRESH = 48

    def __init__(self, G: np.ndarray, free: np.ndarray, H: np.ndarray | None = None) -> None:
        self.G = G
        self.direct = False
        if H is None:
            self.reset(np.flatnonzero(free))
        else:  # the inverse the caller already has (and checked) for these columns
            self.idx, self.H, self.changes = np.flatnonzero(free), H.copy(), 0

    def reset(self, idx: np.ndarray) -> None:
        self.idx = np.asarray(idx, dtype=np.int64)
        self.changes = 0
        self.H = np.zeros((self.idx.size, self.idx.size))
        if self.direct or self.idx.size == 0:
            return
        A = self.G[np.ix_(self.idx, self.idx)]
        if _well_conditioned(A) is None:
            self.direct = True
            return
        self.H = np.linalg.inv(A)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """G[f, f]^-1 rhs (rhs over the sorted free columns)."""
        A = self.G[np.ix_(self.idx, self.idx)]
        if not self.direct:
            y = self.H @ rhs
            if _accurate(A, y, rhs):
                return y
            if self.changes:  # the updates drifted: once more from a factorisation
                self.reset(self.idx)
                y = self.H @ rhs
                if not self.direct and _accurate(A, y, rhs):
                    return y
            self.direct = True
        return _solve(A, rhs)

    def fix(self, j: int) -> None:
        """Column j leaves the free set."""
        p = int(np.searchsorted(self.idx, j))
        keep = np.ones(self.idx.size, dtype=bool)
        keep[p] = False
        h = 0.0 if self.direct else self.H[p, p]
        if self.direct or self.changes >= self.REFRESH or not h > 0:
            self.reset(self.idx[keep])
            return
        col = self.H[keep, p]
        self.H = self.H[np.ix_(keep, keep)] - np.outer(col, col) / h
        self.idx = self.idx[keep]
        self.changes += 1

    def free(self, j: int) -> None:
        """Column j joins the free set."""
        p = int(np.searchsorted(self.idx, j))
        new_idx = np.insert(self.idx, p, j)
        if self.direct or self.changes >= self.REFRESH:
            self.reset(new_idx)
            return
        B = self.G[self.idx, j]
        HB = self.H @ B
        s = float(self.G[j, j] - B @ HB)
        if not s > PIVOT * abs(float(self.G[j, j])):  # (nearly) dependent on the free ones
            self.reset(new_idx)
            return
        n = self.idx.size
        H = np.empty((n + 1, n + 1))
        H[:n, :n] = self.H + np.outer(HB, HB) / s
        H[:n, n] = H[n, :n] = -HB / s
        H[n, n] = 1.0 / s
        order = np.insert(np.arange(n), p, n)
        self.H = H[np.ix_(order, order)]
        self.idx = new_idx
        self.changes += 1


# the least pivot (relative to its column's own) that the updated inverse is trusted with:
# below it the free columns (nearly) depend on each other and the direct solves decide
PIVOT = 1e-8


def _well_conditioned(A: np.ndarray) -> np.ndarray | None:
    """A's Cholesky factor where A is positive definite with no pivot below PIVOT of its
    diagonal (no column nearly a mix of the others), else None."""
    try:
        chol = np.linalg.cholesky(A)
    except np.linalg.LinAlgError:
        return None
    pivots = np.diag(chol) ** 2
    return chol if np.all(pivots > PIVOT * np.diag(A)) else None


def _accurate(A: np.ndarray, y: np.ndarray, rhs: np.ndarray) -> bool:
    """Whether y solves A y = rhs to a residual a direct solve would also leave (a backward
    stable solve: a few n x eps of |A| |y|; an inverse of an ill-conditioned A does not)."""
    r = A @ y - rhs
    scale = float(np.abs(A).max(initial=0.0)) * float(np.abs(y).sum()) \
        + float(np.abs(rhs).max(initial=0.0))
    return bool(np.all(np.isfinite(r))) and float(np.abs(r).max(initial=0.0)) <= 1e-9 * scale


def bounded_lsq(G: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                max_iter: int = 500, x0: np.ndarray | None = None,
                start: np.ndarray | None = None) -> np.ndarray:
    """argmin 1/2 x'Gx - b'x subject to lo <= x <= hi, for G symmetric positive
    semi-definite: the unconstrained minimum when it is within the bounds, else an active
    set method (Lawson-Hanson's, with two bounds) started from `start` (a near solution:
    the fit on all samples for a fold's) or the clipped unconstrained minimum (`x0`, where
    the caller has it). The steps run on an inverse of the free columns' system updated
    column by column (`_FreeInverse`: many columns at their bounds, kernels whose grids
    cap them, cost one factorisation instead of one each); the answer is then checked,
    and finished if need be, with a factorisation per step, so that the result is that of
    direct solves. Singular blocks are solved by least squares (minimum norm)."""
    n = b.size
    if n == 0:
        return b.copy()
    x = _solve(G, b) if x0 is None else np.array(x0, dtype=np.float64)
    if np.all((x >= lo) & (x <= hi)):
        return x
    x = np.clip(x if start is None else np.where(np.isfinite(start), start, x), lo, hi)
    free = (x > lo) & (x < hi)
    inverse = _FreeInverse(G, free)
    if not inverse.direct:
        x, free, _ = _active_set(G, b, lo, hi, x, free, max_iter, inverse)
    x, _, _ = _active_set(G, b, lo, hi, x, free, max_iter, None)
    return x


def _active_set(G: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                x: np.ndarray, free: np.ndarray, max_iter: int,
                inverse: _FreeInverse | None) -> tuple[np.ndarray, np.ndarray, bool]:
    """`bounded_lsq`'s iterations from x, whose columns strictly inside their bounds are
    `free`: on `inverse` (kept equal to the free set), or solving each step directly.
    Returns x, the free columns and whether x is the minimum (False: the inverse could not
    be trusted; x is feasible, with `free` the columns inside their bounds, for the direct
    iterations to go on from)."""
    n = b.size
    free = free.copy()
    scale = max(float(np.abs(G).max()), 1e-300)
    tol = 1e-10 * scale * max(1.0, float(np.abs(hi[np.isfinite(hi)]).max(initial=1.0)))
    with np.errstate(invalid="ignore"):  # infinite bounds: inf - inf is never hit
        near_lo = lo + 1e-12 * (1 + np.abs(lo))
        near_hi = hi - 1e-12 * (1 + np.abs(hi))
    for _ in range(max_iter):
        # inner loop: the minimum over the free set, stepping back to the bounds it crosses
        for _ in range(n + 1):
            z = x.copy()
            fixed = ~free
            if free.any():
                rhs = b[free] - G[np.ix_(free, fixed)] @ x[fixed]
                z[free] = (inverse.solve(rhs) if inverse is not None
                           else _solve(G[np.ix_(free, free)], rhs))
                if inverse is not None and inverse.direct:
                    return x, free, False  # the inverse cannot be trusted
            out = free & ((z < lo) | (z > hi))
            if not out.any():
                x = z
                break
            d = z - x
            with np.errstate(divide="ignore", invalid="ignore"):
                to_lo = np.where(out & (z < lo), (lo - x) / d, np.inf)
                to_hi = np.where(out & (z > hi), (hi - x) / d, np.inf)
            alpha = float(np.clip(np.min(np.minimum(to_lo, to_hi)), 0.0, 1.0))
            x = np.clip(x + alpha * d, lo, hi)
            hit = free & ((x <= near_lo) | (x >= near_hi))
            hit |= out & (np.minimum(to_lo, to_hi) <= alpha + 1e-15)
            x = np.where(hit & (z < lo), lo, np.where(hit & (z > hi), hi, x))
            free &= ~hit
            if inverse is not None:
                for j in np.flatnonzero(hit):
                    inverse.fix(int(j))
        # outer loop: free the bound variable whose gradient points inside most
        w = b - G @ x
        at_lo = ~free & (x <= lo)
        at_hi = ~free & (x >= hi)
        viol = np.where(at_lo & (w > tol), w, 0.0) - np.where(at_hi & (w < -tol), w, 0.0)
        if not (viol > 0).any():
            break
        j = int(np.argmax(viol))
        free[j] = True
        if inverse is not None:
            inverse.free(j)
            if inverse.direct:
                return x, free, False  # singular from here: the direct iterations go on
    return x, free, True


def _profile_end(G: np.ndarray, b: np.ndarray, x: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, k: int, direction: float, allowed: float,
                 max_steps: int = 200, inverse: _FreeInverse | None = None) -> float:
    """How far column k's rate can move in `direction` (+1 up, -1 down) from the bounded
    minimum `x` of q = x'Gx/2 - b'x while the minimum of q over the other columns (each
    within its bounds) grows by at most `allowed`: the end of the column's profile range.
    The profile is followed exactly: between two changes of which columns sit at a bound,
    the others move along -G_FF^-1 G_Fk and q grows as a quadratic in the step; a free
    column that reaches a bound stops there, one at a bound whose gradient turns follows
    again (a parametric active set). `inverse`: the free columns' inverse Gram matrix
    where the caller has it (updated column by column along the way)."""
    x = x.copy()
    g = G @ x - b
    tol = 1e-9 * (1.0 + np.abs(x))
    at_lo = x <= lo + tol
    at_hi = x >= hi - tol
    free = ~(at_lo | at_hi)
    free[k] = False
    if inverse is None or not np.array_equal(inverse.idx, np.flatnonzero(free)):
        inverse = _FreeInverse(G, free)
    grown = 0.0
    for _ in range(max_steps):
        room = (hi[k] - x[k]) if direction > 0 else (x[k] - lo[k])
        if room <= 0:
            break
        f = np.flatnonzero(free)
        d = np.zeros(x.size)
        d[k] = direction
        if f.size:
            d[f] = -inverse.solve(G[f, k]) * direction
        Gd = G @ d
        slope, curve = float(g @ d), float(d @ Gd)
        # the step at which q has grown by `allowed`
        left = allowed - grown
        if curve > 1e-300:
            s_end = (-slope + np.sqrt(max(slope * slope + 2 * curve * left, 0.0))) / curve
        elif slope > 0:
            s_end = left / slope
        else:
            s_end = np.inf
        # the first change of the active set: a free column at a bound, a bound one freed
        with np.errstate(divide="ignore", invalid="ignore"):
            to_hi = np.where(free & (d > 0), (hi - x) / d, np.inf)
            to_lo = np.where(free & (d < 0), (lo - x) / d, np.inf)
            off_lo = np.where(at_lo & ~free & (Gd < 0), -g / Gd, np.inf)
            off_hi = np.where(at_hi & ~free & (Gd > 0), -g / Gd, np.inf)
        off_lo[k] = off_hi[k] = np.inf
        stops = np.minimum(np.minimum(to_hi, to_lo), np.minimum(off_lo, off_hi))
        j = int(np.argmin(stops))
        s_set = max(float(stops[j]), 0.0)
        step = min(s_end, s_set, room)
        x += step * d
        g += step * Gd
        grown += slope * step + 0.5 * curve * step * step
        if step >= s_end or step >= room:
            break
        # the active set changes at j
        if free[j]:
            free[j] = False
            x[j] = hi[j] if d[j] > 0 else lo[j]
            at_hi[j], at_lo[j] = d[j] > 0, d[j] < 0
            inverse.fix(j)
        else:
            free[j] = True
            at_lo[j] = at_hi[j] = False
            inverse.free(j)
    return float(np.clip(x[k], lo[k], hi[k]))


def _solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        c = np.linalg.cholesky(A)
        y = np.linalg.solve(c, b)
        return np.linalg.solve(c.T, y)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(A, b, rcond=None)[0]


@dataclass
class MetricFit:
    """The fit of one metric on one GPU."""

    rates: np.ndarray  # (K1,) NaN: the column has no sampled time
    se: np.ndarray  # (K1,)
    direct: np.ndarray  # (K1,) the direct attribution: mean of the samples over its time
    r2_cv: float  # cross-validated R^2 of the model on the busy samples
    r2_direct: float  # the same for the direct attribution
    rmse: float  # held-out root mean square error (all valid samples)
    samples: int  # valid samples
    busy_samples: int
    # (K1,) the range of rates consistent with the samples and the bounds (`fit`), whether
    # it is narrow enough to call the rate determined, the bounds the fit took
    range_lo: np.ndarray = field(default_factory=lambda: np.zeros(0))
    range_hi: np.ndarray = field(default_factory=lambda: np.zeros(0))
    determined: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    lo: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hi: np.ndarray = field(default_factory=lambda: np.zeros(0))
    span: float = float("nan")  # the metric's own range (100 for a percentage)


@dataclass
class DeviceFit:
    """Every metric's fit on one GPU, with the columns' groups and methods."""

    n_cols: int  # kernel and memory columns; the idle column is index n_cols
    metrics: list[MetricFit]
    group: np.ndarray  # (K1,) group id (the lowest member's column), -1: not grouped
    method: np.ndarray  # (K1,) 'direct', 'model', 'group', 'none'
    time: np.ndarray  # (K1,) the column's time in sampled periods (ns)
    full_periods: np.ndarray  # (K1,)
    periods: int
    interval: int


def _groups(G: np.ndarray) -> np.ndarray:
    """Columns whose share vectors are (nearly) collinear: they never run apart, so no fit
    can tell their rates apart. Returns each column's group (its lowest member), or -1."""
    d = np.sqrt(np.clip(np.diag(G), 0, None))
    K1 = d.size
    group = np.full(K1, -1, dtype=np.int64)
    live = np.flatnonzero(d > 0)
    if live.size < 2:
        return group
    sub = G[np.ix_(live, live)] / np.outer(d[live], d[live])
    np.fill_diagonal(sub, 0.0)
    a, b_ = np.nonzero(np.triu(sub >= GROUP_COSINE))
    if a.size == 0:
        return group
    parent = np.arange(live.size)

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in zip(a.tolist(), b_.tolist()):  # a few pairs: the collinear ones
        rx, ry = root(x), root(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    roots = np.array([root(x) for x in range(live.size)])
    sizes = np.bincount(roots, minlength=live.size)
    grouped = sizes[roots] > 1
    group[live[grouped]] = live[roots[grouped]]
    return group


def _merge_matrix(K1: int, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, keep): P maps the K1 columns onto the merged ones (a group is one column), keep
    the original column each merged column stands for."""
    target = np.where(group >= 0, group, np.arange(K1))
    keep = np.unique(target)
    index = np.searchsorted(keep, target)
    P = np.zeros((K1, keep.size))
    P[np.arange(K1), index] = 1.0
    return P, keep


class _System:
    """One Gram matrix over the merged columns that had time, factorised once: the
    unconstrained solutions of every metric sharing it come from one solve."""

    def __init__(self, G: np.ndarray) -> None:
        self.live = np.diag(G) > 0
        self.G = G[np.ix_(self.live, self.live)]
        try:
            self._chol = np.linalg.cholesky(self.G) if self.G.size else None
        except np.linalg.LinAlgError:
            self._chol = None

    def solve(self, B: np.ndarray) -> np.ndarray:
        if self.G.size == 0:
            return B[self.live]
        if self._chol is not None:
            return np.linalg.solve(self._chol.T, np.linalg.solve(self._chol, B[self.live]))
        return np.linalg.lstsq(self.G, B[self.live], rcond=None)[0]

    def bounded(self, b: np.ndarray, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                start: np.ndarray | None = None) -> np.ndarray:
        """The merged columns' rates (NaN for those without time) within [lo, hi] (one
        bound per merged column); `start`: a near solution over the merged columns."""
        out = np.full(self.live.size, np.nan)
        out[self.live] = bounded_lsq(self.G, b[self.live], lo[self.live], hi[self.live],
                                     x0=x0, start=None if start is None else start[self.live])
        return out

    def ranges(self, b: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               allowed: float) -> tuple[np.ndarray, np.ndarray]:
        """Per merged column, the range of rates whose fit is at most `allowed` worse (sum
        of squares) than the bounded fit `x`, every column within its bounds (NaN for the
        columns without time): the ends of the fit's profile along the column, every other
        column re-fitted within its bounds. The first stretch of every profile comes from
        one inverse of the free columns' Gram matrix (a free column moves the others along
        its column of that inverse); a profile that meets a bound of another column before
        its end is followed further by `_profile_end`."""
        n = self.live.size
        rlo, rhi = np.full(n, np.nan), np.full(n, np.nan)
        if not self.G.size or not np.isfinite(allowed):
            return rlo, rhi
        G, bl = self.G, b[self.live]
        xl, lol, hil = x[self.live], lo[self.live], hi[self.live]
        K = xl.size
        tol = 1e-9 * (1.0 + np.abs(xl))
        at_lo, at_hi = xl <= lol + tol, xl >= hil - tol
        free = ~(at_lo | at_hi)
        g = G @ xl - bl
        g[free] = 0.0
        f = np.flatnonzero(free)
        # D[:, k]: how every column moves per unit of column k (others re-fitted)
        D = np.zeros((K, K))
        D[np.arange(K), np.arange(K)] = 1.0
        H = H_exact = None  # the free columns' inverse, for the profiles that go on
        if f.size:
            try:
                H = np.linalg.inv(G[np.ix_(f, f)])
            except np.linalg.LinAlgError:
                H = np.linalg.pinv(G[np.ix_(f, f)], hermitian=True)
            if _well_conditioned(G[np.ix_(f, f)]) is not None:
                H_exact = H  # can be updated along the profiles that go on
            h = np.diag(H)
            ok = h > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                D[np.ix_(f, f)] = np.where(ok[None, :], H / np.where(ok, h, 1.0)[None, :], 0.0)
            a = np.flatnonzero(~free)
            if a.size:
                D[np.ix_(f, a)] = -H @ G[np.ix_(f, a)]
        GD = G @ D
        curve = np.einsum("ij,ij->j", D, GD)
        slope = g @ D
        for direction, out in ((1.0, rhi), (-1.0, rlo)):
            sl = slope * direction
            left = allowed / 2  # q = x'Gx/2 - b'x: half the sum of squares
            with np.errstate(divide="ignore", invalid="ignore"):
                s_end = np.where(curve > 1e-300,
                                 (-sl + np.sqrt(np.maximum(sl * sl + 2 * curve * left, 0)))
                                 / np.where(curve > 1e-300, curve, 1.0),
                                 np.where(sl > 0, left / np.where(sl > 0, sl, 1.0), np.inf))
                Dd = D * direction
                step_hi = np.where(free[:, None] & (Dd > 0), (hil - xl)[:, None] / Dd, np.inf)
                step_lo = np.where(free[:, None] & (Dd < 0), (lol - xl)[:, None] / Dd, np.inf)
                GDd = GD * direction
                g_col = g[:, None]
                off_lo = np.where((at_lo & ~free)[:, None] & (GDd < 0), -g_col / GDd, np.inf)
                off_hi = np.where((at_hi & ~free)[:, None] & (GDd > 0), -g_col / GDd, np.inf)
            stops = np.minimum(np.minimum(step_hi, step_lo), np.minimum(off_lo, off_hi))
            stops[np.arange(K), np.arange(K)] = np.inf
            first = stops.min(axis=0)
            room = (hil - xl) if direction > 0 else (xl - lol)
            step = np.minimum(np.minimum(s_end, room), np.maximum(first, 0))
            end = np.clip(xl + direction * step, lol, hil)
            # profiles that reach another column's bound before their end go on
            for k in np.flatnonzero((first < s_end) & (first < room)):
                inverse = None
                if H_exact is not None:
                    inverse = _FreeInverse(G, free, H_exact)
                    if free[k]:
                        inverse.fix(int(k))
                end[k] = _profile_end(G, bl, xl, lol, hil, int(k), direction, left,
                                      inverse=inverse)
            out[self.live] = end
        return rlo, rhi

    def inverse_diagonal(self) -> np.ndarray:
        out = np.full(self.live.size, np.nan)
        if self.G.size:
            if self._chol is not None:
                inv_l = np.linalg.inv(self._chol)
                out[self.live] = (inv_l * inv_l).sum(0)
            else:
                out[self.live] = np.diag(np.linalg.pinv(self.G, hermitian=True))
        return out


def _column_bounds(lo: np.ndarray, hi: np.ndarray, K1: int, M: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Bounds per (column, metric): `lo`/`hi` given per metric (M,) or per column and
    metric (K1, M)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    return (np.array(np.broadcast_to(lo, (K1, M)) if lo.ndim == 2 else
                     np.broadcast_to(lo[None, :], (K1, M))),
            np.array(np.broadcast_to(hi, (K1, M)) if hi.ndim == 2 else
                     np.broadcast_to(hi[None, :], (K1, M))))


def fit(sums: Sums, lo: np.ndarray, hi: np.ndarray, rates_only: bool = False,
        metrics: Collection[int] | None = None) -> DeviceFit:
    """Rates of every column for every metric (bounds lo/hi per metric, or per column and
    metric: a kernel's grid caps what it can do), their standard errors and ranges, the
    cross-validated R^2 of the model and of the direct attribution, the groups of columns
    that cannot be told apart and how each rate was found. The matrices are factorised
    once for all the metrics with the same valid samples (all of them, unless some values
    are missing).

    The standard errors and ranges take sigma from the held-out error of the busy samples:
    the idle ones, which the idle rate predicts to the point, say nothing of the kernels
    and would shrink it (on aiprof_opt2, 95 % of the samples). A rate's range is the set
    of values whose fit is at most RANGE_Z^2 sigma^2 worse than the best, within the
    column's bounds (`_System.ranges`); a rate whose range is wider than UNDETERMINED of
    the metric's span is `determined` False.

    `rates_only` (the translation, which writes the rates alone; the interference's two
    cases): the bounded rates of the metrics `metrics` (None: all; the others' rates NaN),
    the same numbers as a full fit gives, without what costs most beside them: the fits
    of the held folds (R^2 and the errors NaN), the standard errors and the ranges (NaN;
    every rate `determined`)."""
    F, K1, _ = sums.G.shape
    M = sums.b.shape[2]
    lo_c, hi_c = _column_bounds(lo, hi, K1, M)
    Gall = sums.G.sum(0)
    group = _groups(Gall)
    grouped = bool((group >= 0).any())
    P, keep = _merge_matrix(K1, group)
    target = np.searchsorted(keep, np.where(group >= 0, group, np.arange(K1)))
    # a merged column (a group) takes the tightest of its members' bounds
    K = keep.size
    lo_k = np.full((K, M), -np.inf)
    hi_k = np.full((K, M), np.inf)
    np.maximum.at(lo_k, target, lo_c)
    np.minimum.at(hi_k, target, hi_c)
    lo_k = np.minimum(lo_k, hi_k)

    def merged(G: np.ndarray) -> np.ndarray:
        return P.T @ G @ P if grouped else G

    def merged_b(b: np.ndarray) -> np.ndarray:
        return P.T @ b if grouped else b

    share_all = sums.share.sum(0)
    idle_col = target[K1 - 1]
    systems: dict = {}

    def system(m: int):
        """(full system, per held fold: (train system, held Gram), the full system's inverse
        diagonal) for metric m's samples; without the folds and the diagonal (`rates_only`)
        the full system alone."""
        key = m if m in sums.missing else None
        if key not in systems:
            Gf = sums.G - sums.missing[m] if key is not None else sums.G
            folds = []
            for held in range(F if not rates_only else 0):
                train = [f for f in range(F) if f != held]
                folds.append((_System(merged(Gf[train].sum(0))), merged(Gf[held])))
            full = _System(merged(Gf.sum(0)))
            systems[key] = (full, folds, None if rates_only else full.inverse_diagonal())
        return systems[key]

    # the unconstrained solutions of every metric, one solve per system
    bm_all = merged_b(sums.b.sum(0))  # (K, M)
    bt_all = [merged_b(sums.b[[f for f in range(F) if f != h]].sum(0)) for h in range(F)]
    plain = [m for m in range(M) if m not in sums.missing]
    x0: dict[tuple, np.ndarray] = {}
    if plain:
        full, folds, _ = system(plain[0])
        X = full.solve(bm_all[:, plain])
        for i, m in enumerate(plain):
            x0[("full", m)] = X[:, i]
        for h, (train, _) in enumerate(folds):
            X = train.solve(bt_all[h][:, plain])
            for i, m in enumerate(plain):
                x0[(h, m)] = X[:, i]
    out = []
    for m in range(M):
        full, folds, inv_diag = system(m)  # no folds, no diagonal with `rates_only`
        bf = sums.b[:, :, m]
        bm = bm_all[:, m] if m not in sums.missing else merged_b(bf.sum(0))
        if metrics is not None and m not in metrics:  # not asked for (`rates_only`)
            rm = np.full(K, np.nan)
        else:
            start = x0.get(("full", m))
            rm = full.bounded(bm, start if start is not None else full.solve(bm), lo_k[:, m],
                              hi_k[:, m])
        rates = rm[target]
        # cross-validation: fit on one fold, score on the other (busy periods only)
        sse = sst = sse_d = 0.0
        sse_all = n_all = n_busy = 0.0
        for held, (train, Gh) in enumerate(folds):
            tr = [f for f in range(F) if f != held]
            bt = merged_b(bf[tr].sum(0))
            start = x0.get((held, m))
            rt = train.bounded(bt, start if start is not None else train.solve(bt),
                               lo_k[:, m], hi_k[:, m], start=rm)
            st = merged_b(sums.share[tr].sum(0))
            fallback = bt.sum() / st.sum() if st.sum() > 0 else 0.0
            rt = np.where(np.isnan(rt), fallback, rt)
            with np.errstate(invalid="ignore", divide="ignore"):
                rd = np.where(st > 0, bt / st, fallback)
            bh = merged_b(bf[held])
            n_h, sv_h, svv_h = sums.n[held, m], sums.sv[held, m], sums.svv[held, m]
            # every valid held-out sample
            Ghr, Ghd = Gh @ rt, Gh @ rd
            sse_all += max(svv_h - 2 * rt @ bh + rt @ Ghr, 0.0)
            n_all += n_h
            # the busy ones: minus the periods in which nothing ran (share 1 on idle)
            i_n, i_sv, i_svv = (sums.idle_n[held, m], sums.idle_sv[held, m],
                                sums.idle_svv[held, m])
            vv, nb, svb = svv_h - i_svv, n_h - i_n, sv_h - i_sv
            if nb > 1:
                # Gb = Gh with the idle column's diagonal less i_n; bb = bh less i_sv there
                e = vv - 2 * (rt @ bh - rt[idle_col] * i_sv) + rt @ Ghr \
                    - i_n * rt[idle_col] ** 2
                d_ = vv - 2 * (rd @ bh - rd[idle_col] * i_sv) + rd @ Ghd \
                    - i_n * rd[idle_col] ** 2
                sse += max(e, 0.0)
                sse_d += max(d_, 0.0)
                sst += max(vv - svb * svb / nb, 0.0)
                n_busy += nb
        r2 = 1 - sse / sst if sst > 0 else float("nan")
        r2d = 1 - sse_d / sst if sst > 0 else float("nan")
        sigma2 = sse_all / n_all if n_all > 0 else float("nan")
        # the kernels' uncertainty: the error of the samples they are in
        sigma2_busy = sse / n_busy if n_busy > 0 else sigma2
        # standard errors: sigma^2 (G^-1)_kk over the merged columns with time
        se_m = np.sqrt(np.clip(inv_diag, 0, None) * sigma2_busy) if inv_diag is not None \
            else np.full(K, np.nan)
        allowed = RANGE_Z ** 2 * sigma2_busy if sigma2_busy == sigma2_busy else np.inf
        natural = _natural_span(lo, hi, m)
        if not rates_only:
            r_lo, r_hi = full.ranges(bm, rm, lo_k[:, m], hi_k[:, m], allowed)
        else:
            r_lo = r_hi = np.full(K, np.nan)
        width = (r_hi - r_lo)[target]
        determined = ~(width > UNDETERMINED * natural) if natural == natural else \
            np.ones(K1, dtype=bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            direct = np.where(share_all > 0, bf.sum(0) / share_all, np.nan)
        n_valid = int(sums.n[:, m].sum())
        busy = int((sums.n[:, m] - sums.idle_n[:, m]).sum())
        out.append(MetricFit(rates, se_m[target], direct, float(r2), float(r2d),
                             float(np.sqrt(sigma2)) if sigma2 == sigma2 else float("nan"),
                             n_valid, busy, r_lo[target], r_hi[target], determined,
                             lo_c[:, m].copy(), hi_c[:, m].copy(), natural))
    method = np.where(share_all <= 0, "none",
                      np.where(group >= 0, "group",
                               np.where(sums.full >= DIRECT_PERIODS, "direct", "model")))
    method[K1 - 1] = "direct" if share_all[K1 - 1] > 0 else "none"
    return DeviceFit(K1 - 1, out, group, method.astype(object), share_all, sums.full,
                     0, 0)


def _natural_span(lo: np.ndarray, hi: np.ndarray, m: int) -> float:
    """The width of metric m's own range (100 for a percentage), NaN when unbounded."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    a = float(np.min(lo[..., m])) if lo.ndim == 2 else float(lo[m])
    b = float(np.max(hi[..., m])) if hi.ndim == 2 else float(hi[m])
    return b - a if np.isfinite(b - a) else float("nan")


def fit_device(periods: Periods, values: np.ndarray, start: np.ndarray, end: np.ndarray,
               col: np.ndarray, n_cols: int, lo: np.ndarray, hi: np.ndarray
               ) -> tuple[DeviceFit, Entries]:
    """The model of one GPU: `values` (periods x metrics, NaN = missing) sampled over
    `periods`, the intervals [start, end) of columns `col` (0..n_cols-1)."""
    ent = entries(periods, start, end, col, n_cols)
    result = fit(accumulate(ent, values), lo, hi)
    length = (periods.end - periods.start).astype(np.float64)
    result.time = np.bincount(ent.col, weights=ent.share * length[ent.period],
                              minlength=n_cols + 1)
    result.periods = periods.n
    result.interval = periods.interval
    return result, ent


def predict(ent: Entries, rates: np.ndarray, n_periods: int) -> np.ndarray:
    """The model's value of every period for `rates` (K1 x metrics; NaN rates count as 0)."""
    r = np.nan_to_num(np.asarray(rates, dtype=np.float64))
    out = np.zeros((n_periods, r.shape[1]))
    for m in range(r.shape[1]):
        out[:, m] = np.bincount(ent.period, weights=ent.share * r[ent.col, m],
                                minlength=n_periods)
    return out


# -- the columns ----------------------------------------------------------------------------

MAX_COLUMNS = 1024
OTHER = "(other kernels)"


def design(keys, memop: np.ndarray, dur: np.ndarray, max_columns: int = MAX_COLUMNS
           ) -> tuple[np.ndarray, list[str]]:
    """`design_codes` for intervals given by their key (a label each)."""
    import polars as pl

    k = pl.Series(keys, dtype=pl.Utf8).fill_null("(unnamed)")
    memop = np.asarray(memop, dtype=bool)
    codes = pl.DataFrame({"key": k, "memop": memop}).with_columns(
        pl.struct("key", "memop").rank("dense").cast(pl.Int64).alias("code"))
    table = codes.unique("code")
    return design_codes(codes["code"].to_numpy(), dict(zip(table["code"], table["key"])),
                        dict(zip(table["code"], table["memop"])), dur, max_columns)


def design_codes(code: np.ndarray, label_of: dict, memop_of: dict, dur: np.ndarray,
                 max_columns: int = MAX_COLUMNS) -> tuple[np.ndarray, list[str]]:
    """(column of each interval, column labels) for intervals given by an integer code
    (a name id) with each code's label and whether it is a memory operation: one column
    per kernel label (in label order), then one per memory operation label; beyond
    `max_columns`, the kernels with the least time share one column, OTHER. Both callers
    (the analysis and the translation) give the same labels, so the columns and their
    order are the same. Labels are looked at once per code, not per interval."""
    code = np.asarray(code, dtype=np.int64)
    if code.size == 0:
        return np.zeros(0, dtype=np.int64), []
    lo, hi = int(code.min()), int(code.max())
    if hi - lo < 4 * code.size + (1 << 16):  # value ids: a table as long as their range
        counts = np.bincount(code - lo, minlength=hi - lo + 1)
        uniq = np.flatnonzero(counts) + lo
        index = np.zeros(hi - lo + 1, dtype=np.int64)
        index[uniq - lo] = np.arange(uniq.size)
        inv = index[code - lo]
    else:
        uniq, inv = np.unique(code, return_inverse=True)
    time = np.bincount(inv, weights=np.asarray(dur, dtype=np.float64))
    labels = [label_of.get(int(c)) or "(unnamed)" for c in uniq]
    memop = [bool(memop_of.get(int(c), False)) for c in uniq]
    per: dict[tuple[bool, str], float] = {}
    for lab, m, t in zip(labels, memop, time.tolist()):
        per[(m, lab)] = per.get((m, lab), 0.0) + t
    n_mem = sum(1 for m, _ in per if m)
    kernels = [(lab, t) for (m, lab), t in per.items() if not m]
    if len(kernels) + n_mem > max_columns:
        keep = {lab for lab, _ in sorted(kernels, key=lambda x: (-x[1], x[0]))[
            :max(max_columns - n_mem - 1, 0)]}
        labels = [lab if m or lab in keep else OTHER for lab, m in zip(labels, memop)]
        per = {}
        for lab, m, t in zip(labels, memop, time.tolist()):
            per[(m, lab)] = per.get((m, lab), 0.0) + t
    order = sorted(per)  # kernels (False) first, each by label
    column = {key: i for i, key in enumerate(order)}
    code_col = np.array([column[(m, lab)] for lab, m in zip(labels, memop)], dtype=np.int64)
    return code_col[inv], [lab for _, lab in order]


def bounds(percent: list[bool], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of each metric's rates: 0-100 for a percentage whose samples stay within
    100, else 0 to unbounded."""
    v = np.asarray(values, dtype=np.float64)
    top = np.nanmax(v, axis=0, initial=0.0) if v.size else np.zeros(len(percent))
    return bounds_from_top(percent, top)


def bounds_from_top(percent: list[bool], top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`bounds` from each metric's largest value (NaN ignored, at least 0)."""
    hi = np.where(np.asarray(percent, dtype=bool) & (np.asarray(top) <= 100.0), 100.0, np.inf)
    return np.zeros(len(percent)), hi
