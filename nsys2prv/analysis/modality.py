"""Kernel duration modality ("are all GEMMs born equal?"): per kernel name, whether its
durations have two modes (some launches much slower than the rest) or a heavy tail, and where
the slow launches are: on which processes, in which part of the run.

The test, per kernel (demangled name) with at least MIN_LAUNCHES launches, on the logarithm
of the durations:

* **two modes**: a mixture of two Gaussians (fitted by EM, started from the best split of the
  sorted values into two groups, Otsu's criterion) is preferred to one Gaussian by the
  Bayesian information criterion, its components are separated by Ashman's D > 3
  (D = sqrt(2) |m1 - m2| / sqrt(s1^2 + s2^2); 2 is the usual bound, which flat
  distributions of a few hundred values pass), the mixture dips between them to a quarter of
  its lower peak at most (VALLEY), the smaller one holds at least MIN_MODE_SHARE of the
  launches (and
  MIN_MODE_LAUNCHES) and the modes' medians differ by 10 % at least (MIN_RATIO: two modes
  1 % apart are distinct but matter to nobody); every launch then belongs to the component
  of higher posterior;
* **heavy tail** (when not two modes): the launches beyond Tukey's far-out fence (Q3 + 3 IQR
  of the durations, the IQR taken as at least 1 % of the median: timer noise is no spread)
  are at least 1 % of the launches and hold at least 5 % of the kernel's time.

A kernel with more than SAMPLE launches is fitted on SAMPLE of them at evenly spaced ranks
(the same quantiles), so the cost is bounded whatever the run's size; the fits of all
kernels run at once (segment sums), not one kernel at a time.

On simulated samples of 50 values (200 each) this flags 1 % of normal or log-normal ones,
2-4 % of gamma, shifted exponential or Pareto ones and 8.5 % of uniform ones; of 100 values
or more, none of 40 (tests/test_modality.py checks 200-value samples); two modes 30 % apart
with a 3 % spread, or 7 % of launches twice as slow, are always found from 100 launches.

Where: the slow share (slow mode, or beyond the fence) per process, and per tenth of the
trace's time; a kernel whose slow launches are much more frequent on some processes (twice
the share of the least affected one, at least) or in a few tenths of the run says which. NCCL kernels are included: their durations hold the wait for the
peers, so two modes there are usually an imbalance, not the kernel. The slow launches are
"concentrated" in time when the fewest tenths of the run that hold 80 % of them are at most
3 and hold at most half of the kernel's launches.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .activities import Activities, KernelBatches
from .labels import kernel_label_ids

MIN_LAUNCHES = 50
MIN_MODE_SHARE = 0.05
MIN_MODE_LAUNCHES = 5
SEPARATION = 3.0  # Ashman's D
MIN_RATIO = 1.1  # the slow mode's median at least 10 % above the fast one's
VALLEY = 0.25  # the mixture's density between the modes at most a quarter of the lower peak
SAMPLE = 4096
EM_STEPS = 200
VAR_FLOOR = 1e-6  # of log-durations (0.1 % spread): a component of identical values
TAIL_SHARE, TAIL_TIME = 0.01, 0.05
TENTHS = 10
HOT_TENTHS = 3


def _segments(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and size of each run of equal values in a sorted group array."""
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    return starts, np.diff(np.r_[starts, group.size])


def _sample(sizes: np.ndarray, starts: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of at most `cap` values of each segment at evenly spaced ranks, and the
    segment of each."""
    m = np.minimum(sizes, cap)
    seg = np.repeat(np.arange(sizes.size), m)
    first = np.repeat(np.cumsum(m) - m, m)
    k = np.arange(m.sum()) - first
    n, mm = sizes[seg], m[seg]
    step = np.where(mm > 1, (n - 1) / np.maximum(mm - 1, 1), 0.0)
    return starts[seg] + np.rint(k * step).astype(np.int64), seg


def _seg_sum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.add.reduceat(values, starts) if values.size else np.zeros(0)


def _log_normal(x: np.ndarray, mu: np.ndarray, var: np.ndarray) -> np.ndarray:
    return -0.5 * (np.log(2 * np.pi * var) + (x - mu) ** 2 / var)


def fit_two_modes(x: np.ndarray, seg: np.ndarray, nseg: int) -> dict[str, np.ndarray]:
    """Per segment of the sorted values `x` (log-durations; `seg` the segment of each,
    segments contiguous and each sorted): the two-Gaussian mixture and the one-Gaussian
    fit: w1, mu1, var1, w2, mu2, var2 (component 2 the slower), bic1, bic2."""
    starts, sizes = _segments(seg)
    n = sizes.astype(np.float64)
    mean = _seg_sum(x, starts) / n
    xc = x - mean[seg]  # centred: prefix sums of squares without cancellation
    var1 = np.maximum(_seg_sum(xc * xc, starts) / n, VAR_FLOOR)
    ll1 = _seg_sum(_log_normal(xc, 0.0, var1[seg]), starts)
    # the best split of each sorted segment into a lower and an upper group (Otsu)
    c1, c2 = np.cumsum(xc), np.cumsum(xc * xc)
    base = np.repeat(starts, sizes)
    before1 = np.where(base > 0, c1[base - 1], 0.0)
    before2 = np.where(base > 0, c2[base - 1], 0.0)
    left_n = np.arange(x.size) - base + 1.0
    s1, s2 = c1 - before1, c2 - before2
    tot1, tot2 = (_seg_sum(xc, starts)[seg], _seg_sum(xc * xc, starts)[seg])
    right_n = n[seg] - left_n
    with np.errstate(divide="ignore", invalid="ignore"):
        sse = (s2 - s1 * s1 / left_n) + ((tot2 - s2) - (tot1 - s1) ** 2 / right_n)
    sse = np.where(right_n >= 1, sse, np.inf)
    order = np.lexsort((sse, seg))
    best = order[np.r_[True, seg[order][1:] != seg[order][:-1]]]  # first of each segment
    k = left_n[best]
    w1 = k / n
    mu1 = s1[best] / k + mean
    mu2 = (tot1[best] - s1[best]) / np.maximum(n - k, 1) + mean
    v1 = np.maximum((s2[best] - s1[best] ** 2 / k) / k, VAR_FLOOR)
    v2 = np.maximum(((tot2[best] - s2[best]) - (tot1[best] - s1[best]) ** 2
                     / np.maximum(n - k, 1)) / np.maximum(n - k, 1), VAR_FLOOR)
    ll2 = np.full(nseg, -np.inf)
    for _ in range(EM_STEPS):  # fixed steps over every segment at once (vectorised)
        a = np.log(np.maximum(w1[seg], 1e-300)) + _log_normal(x, mu1[seg], v1[seg])
        b = np.log(np.maximum(1 - w1[seg], 1e-300)) + _log_normal(x, mu2[seg], v2[seg])
        top = np.maximum(a, b)
        lse = top + np.log(np.exp(a - top) + np.exp(b - top))
        r = np.exp(a - lse)  # responsibility of component 1
        new_ll = _seg_sum(lse, starts)
        r1, r2 = _seg_sum(r, starts), _seg_sum(1 - r, starts)
        ok1, ok2 = r1 > 0, r2 > 0
        mu1 = np.where(ok1, _seg_sum(r * x, starts) / np.where(ok1, r1, 1), mu1)
        mu2 = np.where(ok2, _seg_sum((1 - r) * x, starts) / np.where(ok2, r2, 1), mu2)
        v1 = np.where(ok1, np.maximum(_seg_sum(r * (x - mu1[seg]) ** 2, starts)
                                      / np.where(ok1, r1, 1), VAR_FLOOR), v1)
        v2 = np.where(ok2, np.maximum(_seg_sum((1 - r) * (x - mu2[seg]) ** 2, starts)
                                      / np.where(ok2, r2, 1), VAR_FLOOR), v2)
        w1 = r1 / n
        if np.all(np.abs(new_ll - ll2) <= 1e-9 * np.maximum(np.abs(new_ll), 1.0)):
            ll2 = new_ll
            break
        ll2 = new_ll
    swap = mu1 > mu2  # component 2 is the slower one
    w1, mu1, mu2, v1, v2 = (np.where(swap, 1 - w1, w1), np.where(swap, mu2, mu1),
                            np.where(swap, mu1, mu2), np.where(swap, v2, v1),
                            np.where(swap, v1, v2))
    logn = np.log(n)
    return {"w1": w1, "mu1": mu1, "var1": v1, "w2": 1 - w1, "mu2": mu2, "var2": v2,
            "bic1": -2 * ll1 + 2 * logn, "bic2": -2 * ll2 + 5 * logn,
            "mean": mean, "var": var1, "valley": _valley(w1, mu1, v1, mu2, v2)}


def _valley(w1: np.ndarray, mu1: np.ndarray, v1: np.ndarray, mu2: np.ndarray,
            v2: np.ndarray, points: int = 65) -> np.ndarray:
    """The mixture's lowest density between its two means over the lower of its densities
    at the means (1: no dip between them)."""
    t = np.linspace(0.0, 1.0, points)
    grid = mu1[:, None] + (mu2 - mu1)[:, None] * t[None, :]

    def density(z: np.ndarray) -> np.ndarray:
        return (w1[:, None] * np.exp(_log_normal(z, mu1[:, None], v1[:, None]))
                + (1 - w1)[:, None] * np.exp(_log_normal(z, mu2[:, None], v2[:, None])))

    d = density(grid)
    peaks = np.minimum(d[:, 0], d[:, -1])
    return np.where(peaks > 0, d.min(axis=1) / np.where(peaks > 0, peaks, 1), 1.0)


MODALITY_BATCH = 1_000_000  # kernels held at once (`KernelBatches`: whole names)
LOG_DURATION = pl.col("dur").clip(1, None).cast(pl.Float64).log()  # x, of every path


def _prepared(k: pl.DataFrame, min_launches: int) -> pl.DataFrame:
    """A batch's kernels of `min_launches` launches or more, with their log-duration `x`,
    sorted by (full, x, start); the columns the test reads only (a batch can be one name's
    millions of launches)."""
    k = k.select("full", "row", "start", "dur", "name", "nccl").with_columns(
        pl.len().over("full").alias("n"))
    return (k.filter(pl.col("n") >= min_launches).drop("n")
            .with_columns(LOG_DURATION.alias("x"))
            .sort("full", "x", "start"))


SLICE = 1 << 20  # launches whose likelihoods are computed at once


def _names(k: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Of a batch sorted by full name: its names, each launch's name index (int32), and
    each name's first row and count (no sort: the rows are in name order)."""
    full = k["full"].to_numpy()
    starts, sizes = _segments(full)
    return full[starts], np.repeat(np.arange(starts.size, dtype=np.int32), sizes), starts, \
        sizes


def _log_durations(dur: np.ndarray) -> np.ndarray:
    return pl.DataFrame({"dur": dur}).select(LOG_DURATION)["dur"].to_numpy()


def _in_slow_mode(x: np.ndarray, fit_of: np.ndarray, fit: dict[str, np.ndarray]
                  ) -> np.ndarray:
    """Whether each launch (log-duration `x`, its name's fit `fit_of`) is likelier in its
    name's slower component; SLICE launches at a time (the temporaries bounded)."""
    slow = np.empty(x.size, dtype=bool)
    for lo in range(0, x.size, SLICE):
        g, xs = fit_of[lo:lo + SLICE], x[lo:lo + SLICE]
        a = np.log(fit["w1"][g]) + _log_normal(xs, fit["mu1"][g], fit["var1"][g])
        b = np.log(np.maximum(fit["w2"][g], 1e-300)) + _log_normal(
            xs, fit["mu2"][g], fit["var2"][g])
        slow[lo:lo + SLICE] = b > a
    return slow


def kernel_modality(acts: Activities, min_launches: int = MIN_LAUNCHES) -> pl.DataFrame:
    """Per kernel name with `min_launches` launches or more: count, median, the verdict
    ('two modes', 'heavy tail' or ''), the modes (fast/slow median, slow share of launches
    and of time, Ashman's D) or the tail (share beyond the fence), and where the slow
    launches are (`by_process`, `in_run`), sorted by the slow launches' time. The kernels
    are read a batch of whole names at a time (`KernelBatches`, twice: the names' samples
    for one fit of them all, then each launch against its name's fit); a name of more
    than MODALITY_BATCH launches alone, its durations only held (`_Alone`)."""
    names = acts.kernel_names
    tasks = acts.rows.select("row", pl.col("task_index").cast(pl.Int64))
    with KernelBatches(acts, ["row", "start", "dur", "name", "nccl"],
                       limit=MODALITY_BATCH) as batches:
        # 1. each name's sample (values at evenly spaced ranks): one fit of every name,
        # the batches' names in order (each batch holds names above the last one's)
        keys, sizes, xs, segs = [], [], [], []
        kept = None  # one batch: prepared once
        lone = {b: _Alone(batches, b) for b, n in batches.alone.items() if n >= min_launches}
        for b in range(batches.batches):
            if b in batches.alone:
                if b not in lone:
                    continue
                alone = lone[b]
                x = alone.sample()
                kb, seg, sz = np.array([alone.full]), np.zeros(x.size, np.int64), \
                    np.array([alone.count])
            else:
                k = batches.batch(b)
                if k is None:
                    continue
                k = _prepared(k, min_launches)
                kept = k if batches.batches == 1 else None
                if k.height == 0:
                    continue
                kb, _, starts, sz = _names(k)
                idx, seg = _sample(sz, starts, SAMPLE)
                x = k["x"].to_numpy()[idx]
            xs.append(x)
            segs.append(seg + sum(names_of.size for names_of in keys))
            keys.append(kb)
            sizes.append(sz)
        if not keys:
            return _empty()
        sizes_all = np.concatenate(sizes)
        nkeys = sizes_all.size
        fit = fit_two_modes(np.concatenate(xs), np.concatenate(segs), nkeys)
        del xs, segs
        minor = np.minimum(fit["w1"], fit["w2"])
        d = np.sqrt(2) * (fit["mu2"] - fit["mu1"]) / np.sqrt(fit["var1"] + fit["var2"])
        two = ((fit["bic2"] < fit["bic1"]) & (d > SEPARATION) & (minor >= MIN_MODE_SHARE)
               & (np.rint(minor * sizes_all) >= MIN_MODE_LAUNCHES)
               & (fit["valley"] <= VALLEY))
        # 2. every launch to its component (two modes), or beyond the far-out fence (the
        # others), a batch of names at a time
        summaries, wheres, offset = [], [], 0
        for b in range(batches.batches):
            if b in batches.alone:
                if b not in lone:
                    continue
                summary, where = lone[b].classified(offset, fit, two, d, tasks, acts.end)
                offset += 1
            else:
                k = kept
                if k is None:
                    k = batches.batch(b)
                    if k is None:
                        continue
                    k = _prepared(k, min_launches)
                if k.height == 0:
                    continue
                kb, seg, _, _ = _names(k)
                slow_mode = _in_slow_mode(k["x"].to_numpy(), seg + offset, fit)
                per = pl.DataFrame({"full": kb, "two": two[offset:offset + kb.size],
                                    "d": d[offset:offset + kb.size]})
                offset += kb.size
                summary, where = _classified(k, slow_mode, seg, per, tasks, acts.end)
                del k, slow_mode
            summaries.append(summary)
            wheres.extend(where)
        kept = None
    summary = pl.concat(summaries)
    where = _where(summary, wheres, acts)
    text = names.rename({"id": "full", "name": "kernel"})
    short = names.rename({"id": "name", "name": "short"})
    labels = kernel_label_ids(acts).with_columns(pl.col("full").cast(pl.Int32))
    return (summary.join(where, on="full", how="left")
            .join(text.with_columns(pl.col("full").cast(pl.Int32)), on="full", how="left")
            .join(short.with_columns(pl.col("name").cast(pl.Int32)), on="name", how="left")
            .join(labels, on="full", how="left")
            .with_columns(pl.col("kernel").fill_null(pl.col("short")),
                          pl.when(pl.col("two")).then(pl.col("d")).otherwise(None)
                          .alias("separation"))
            .with_columns(pl.col("label").fill_null(pl.col("short")))
            .sort(pl.col("verdict") == "", -pl.col("slow_time"), "kernel")
            .select("kernel", "label", "short", "nccl", "count", "median", "verdict",
                    "fast_median", "slow_median", "slow_share", "slow_time_share",
                    "separation", "by_process", "in_run"))


QUARTILES = (pl.col("dur").median().alias("median"),
             pl.col("dur").quantile(0.25, "linear").alias("q1"),
             pl.col("dur").quantile(0.75, "linear").alias("q3"))
FENCE = (pl.col("q3") + 3 * pl.max_horizontal(pl.col("q3") - pl.col("q1"),
                                               0.01 * pl.col("median"))).alias("fence")
SUMS = (pl.len().alias("count"), pl.col("slow").sum().alias("slow_count"),
        pl.col("dur").filter(pl.col("slow")).sum().alias("slow_time"),
        pl.col("dur").sum().alias("time"),
        pl.col("dur").filter(~pl.col("slow")).median().alias("fast_median"),
        pl.col("dur").filter(pl.col("slow")).median().alias("slow_median"))


def _classified(k: pl.DataFrame, slow_mode: np.ndarray, seg: np.ndarray, per: pl.DataFrame,
                tasks: pl.DataFrame, end: int) -> tuple[pl.DataFrame, list[tuple]]:
    """Of a batch's launches (`_prepared`; `slow_mode`: in the slower of its name's two
    modes; `seg`: its name's row of `per`) and its names' fits (`per`: full, two, d, by
    full): the summary per name with its verdict (`_verdicts`), and the counts of where its
    flagged names' slow launches are (`_where_counts`). Per launch only a column is added
    (the batch is not joined: copied)."""
    fits = per.join(k.group_by("full").agg(*QUARTILES).with_columns(FENCE), on="full",
                    how="left", maintain_order="left")
    two = fits["two"].to_numpy()[seg]
    beyond = k["dur"].to_numpy() > fits["fence"].to_numpy()[seg]
    k = k.with_columns(pl.Series("slow", np.where(two, slow_mode, beyond)))
    summary = _verdicts(k.group_by("full").agg(
        *SUMS, pl.col("nccl").first(), pl.col("name").first()), fits)
    flagged = summary.filter(pl.col("verdict") != "")["full"]
    return summary, [_where_counts(k.filter(pl.col("full").is_in(flagged.implode())), tasks,
                                   end)]


def _verdicts(sums: pl.DataFrame, fits: pl.DataFrame) -> pl.DataFrame:
    """Per name, its sums (`SUMS`, nccl, name) and fit (full, median, two, d): the shares
    of slow launches and time, and the verdict."""
    summary = sums.join(fits.select("full", "median", "two", "d"), on="full")
    summary = summary.with_columns(
        (pl.col("slow_count") / pl.col("count")).alias("slow_share"),
        (pl.col("slow_time") / pl.col("time")).alias("slow_time_share"),
        pl.col("two") & (pl.col("slow_median") >= MIN_RATIO * pl.col("fast_median")))
    tail = ((~pl.col("two")) & (pl.col("slow_share") >= TAIL_SHARE)
            & (pl.col("slow_time_share") >= TAIL_TIME))
    return summary.with_columns(
        pl.when(pl.col("two")).then(pl.lit("two modes"))
        .when(tail).then(pl.lit("heavy tail")).otherwise(pl.lit("")).alias("verdict"))


def _where_counts(k: pl.DataFrame, tasks: pl.DataFrame, end: int
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Of launches (full, row, start, slow): per (full, task_index) and per (full, tenth of
    the run), how many and how many slow; sums of these over parts of a name's launches are
    the counts of them all."""
    tenth = (pl.col("start") * TENTHS // max(end, 1)).clip(0, TENTHS - 1)
    k = k.select("full", "row", "start", "slow").join(tasks, on="row", how="left")
    return (k.group_by("full", "task_index").agg(pl.col("slow").sum(), pl.len().alias("n")),
            k.group_by("full", tenth.alias("tenth")).agg(pl.col("slow").sum().alias("s"),
                                                         pl.len().alias("n")))


class _Alone:
    """A name of more launches than a batch holds, read a file at a time: only its
    durations are held (sorted: its quantiles, sample and modes' medians need them all);
    where its slow launches are is counted file by file."""

    def __init__(self, batches: KernelBatches, b: int) -> None:
        self.batches, self.b = batches, b
        first = next(p for p in batches.pieces(b, ["full", "name", "nccl"])
                     if p.height).row(0, named=True)  # a window can hold none of it
        self.full, self.name, self.nccl = first["full"], first["name"], first["nccl"]
        self.count = batches.alone[b]  # counted as the batches were made

    def durations(self) -> np.ndarray:
        """Every launch's duration, sorted."""
        parts = [p["dur"].to_numpy() for p in self.batches.pieces(self.b, ["dur"])]
        dur = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        dur.sort()
        return dur

    def sample(self) -> np.ndarray:
        """The log-durations at SAMPLE evenly spaced ranks (`_sample`)."""
        dur = self.durations()
        idx, _ = _sample(np.array([dur.size]), np.array([0]), SAMPLE)
        return _log_durations(dur[idx])

    def classified(self, index: int, fit: dict[str, np.ndarray], two: np.ndarray,
                   d: np.ndarray, tasks: pl.DataFrame, end: int
                   ) -> tuple[pl.DataFrame, list[tuple]]:
        """`_classified` of this name (`index`: its fit): the same sums from its sorted
        durations, the where counts from its files."""
        dur = self.durations()
        whole = pl.DataFrame({"dur": dur}).select(*QUARTILES).with_columns(FENCE)
        fence = whole["fence"][0]
        fits = pl.DataFrame({"full": [self.full], "two": [bool(two[index])],
                             "d": [float(d[index])]}, schema={
            "full": pl.Int32, "two": pl.Boolean, "d": pl.Float64}).hstack(whole)

        def slow(durations: np.ndarray) -> np.ndarray:
            if not two[index]:
                return durations > fence
            x = _log_durations(durations)
            return _in_slow_mode(x, np.full(x.size, index, dtype=np.int32), fit)

        sums = pl.DataFrame({"dur": dur, "slow": slow(dur)}).select(*SUMS)
        del dur
        summary = _verdicts(sums.with_columns(
            pl.lit(self.full, pl.Int32).alias("full"), pl.lit(self.nccl).alias("nccl"),
            pl.lit(self.name, pl.Int32).alias("name")).select("full", *sums.columns,
                                                             "nccl", "name"), fits)
        if summary["verdict"][0] == "":
            return summary, []
        return summary, [_where_counts(p.with_columns(pl.Series(
            "slow", slow(p["dur"].to_numpy()))), tasks, end)
            for p in self.batches.pieces(self.b, ["full", "row", "start", "dur"])]


def _where(summary: pl.DataFrame, counts: list[tuple[pl.DataFrame, pl.DataFrame]],
           acts: Activities) -> pl.DataFrame:
    """full -> by_process, in_run: where the slow launches of the flagged kernels are
    (`counts`: `_where_counts` of their launches, in parts)."""
    schema = {"full": pl.Int32, "by_process": pl.Utf8, "in_run": pl.Utf8}
    flagged = summary.filter(pl.col("verdict") != "")["full"]
    if flagged.len() == 0 or not counts:
        return pl.DataFrame(schema=schema)
    labels = (acts.rows.select(pl.col("task_index").cast(pl.Int64), "task_label").unique()
              .sort("task_index"))
    procs = (pl.concat([p for p, _ in counts]).group_by("full", "task_index").agg(
        pl.col("slow").sum(), pl.col("n").sum())
        .with_columns((pl.col("slow") / pl.col("n")).alias("share"))
        .join(labels, on="task_index", how="left"))
    out = []
    times = pl.concat([t for _, t in counts]).group_by("full", "tenth").agg(
        pl.col("s").sum(), pl.col("n").sum())
    overall = times.group_by("full").agg(pl.col("s").sum().alias("total"))
    for full, p in procs.sort("full", "task_index").group_by("full", maintain_order=True):
        full = full[0]
        lo, hi = float(p["share"].min()), float(p["share"].max())
        if p.height > 1 and hi >= 2 * lo and hi > 0:
            worst = p.filter(pl.col("share") >= hi / 2).sort("share", descending=True)
            by = "mostly on " + ", ".join(f"{r['task_label']} ({100 * r['share']:.0f} %)"
                                          for r in worst.head(3).iter_rows(named=True))
        elif p.height > 1:
            by = f"alike on all {p.height} processes ({100 * lo:.0f}-{100 * hi:.0f} %)"
        else:
            by = ""
        o = overall.filter(pl.col("full") == full).row(0, named=True)
        # the fewest tenths that hold 80 % of the slow launches: concentrated when they are
        # at most 3 and hold at most half of all the kernel's launches
        t = (times.filter(pl.col("full") == full).sort("s", "tenth", descending=[True, False])
             .with_columns(pl.col("s").cum_sum().alias("cum")))
        need = t.filter(pl.col("cum").shift(1, fill_value=0) < 0.8 * o["total"])
        if o["total"] and need.height <= HOT_TENTHS and need["n"].sum() <= 0.5 * t["n"].sum():
            spans = ", ".join(f"{10 * int(x)}-{10 * int(x) + 10} %"
                              for x in sorted(need["tenth"].to_list()))
            when = f"concentrated in {spans} of the run"
        else:
            when = "spread over the run"
        out.append((full, by, when))
    return pl.DataFrame(out, schema=schema, orient="row")


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema={
        "kernel": pl.Utf8, "label": pl.Utf8, "short": pl.Utf8, "nccl": pl.Boolean,
        "count": pl.UInt32,
        "median": pl.Float64, "verdict": pl.Utf8, "fast_median": pl.Float64,
        "slow_median": pl.Float64, "slow_share": pl.Float64, "slow_time_share": pl.Float64,
        "separation": pl.Float64, "by_process": pl.Utf8, "in_run": pl.Utf8})
