"""Summary statistics and the two-sample tests the comparison of runs uses.

Statistics are those of Nsight Systems' summaries (`nsys stats`, `nsys recipe
cuda_gpu_kern_sum`): count, total, mean, median (mean of the two middle values for an even
count), min, max and the sample standard deviation (n - 1 in the denominator; 0 for one
value).

Noise: two sets of per-instance durations (the steps of a training loop, say) are compared
with the two-sided Mann-Whitney U test (exact distribution without ties for up to 50 values a
side, else the normal approximation with the tie correction) and a bootstrap percentile
interval of the difference of the medians (seeded: the same inputs give the same interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

STAT_COLUMNS = ("count", "total", "mean", "median", "min", "max", "std")


def summary(df: pl.DataFrame, by: list[str], column: str = "dur") -> pl.DataFrame:
    """Per group of `by`: count, total, mean, median, min, max, std of `column` (ns)."""
    c = pl.col(column)
    return (df.group_by(by)
            .agg(pl.len().cast(pl.Int64).alias("count"), c.sum().cast(pl.Int64).alias("total"),
                 c.mean().alias("mean"), c.median().alias("median"),
                 c.min().cast(pl.Int64).alias("min"), c.max().cast(pl.Int64).alias("max"),
                 c.std(ddof=1).fill_null(0.0).fill_nan(0.0).alias("std")))


def _exact_u_cdf(n1: int, n2: int) -> np.ndarray:
    """P(U <= u) for u = 0..n1*n2 under the null, without ties (counts of arrangements by
    the recurrence f(n1, n2, u) = f(n1-1, n2, u-n2) + f(n1, n2-1, u))."""
    # table[j][u]: arrangements of i values of x and j of y with U = u, built up over i
    table = [np.zeros(1, dtype=np.float64) for _ in range(n2 + 1)]
    for j in range(n2 + 1):
        table[j] = np.zeros(1)
        table[j][0] = 1.0
    for i in range(1, n1 + 1):
        new = [np.array([1.0])]
        for j in range(1, n2 + 1):
            size = i * j + 1
            cur = np.zeros(size)
            a = new[j - 1]  # (i, j-1): the last value is a y: U unchanged
            cur[: a.size] += a
            b = table[j]  # (i-1, j): the last value is an x above j y's: U + j
            cur[j: j + b.size] += b
            new.append(cur)
        table = new
    counts = table[n2]
    return np.cumsum(counts) / counts.sum()


def mann_whitney(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(U of x, two-sided p) of the Mann-Whitney U test of x against y."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    both = np.concatenate([x, y])
    order = both.argsort(kind="stable")
    ranks = np.empty(both.size)
    sorted_vals = both[order]
    # average ranks of ties
    _, first, counts = np.unique(sorted_vals, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    ties = counts[counts > 1]
    if not ties.size and n1 <= 50 and n2 <= 50:
        cdf = _exact_u_cdf(n1, n2)
        u_small = min(u1, n1 * n2 - u1)
        p = min(1.0, 2.0 * cdf[int(math.floor(u_small))])
        return float(u1), float(p)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie_term = float((ties ** 3 - ties).sum()) / (n * (n - 1)) if n > 1 else 0.0
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    if sigma == 0:
        return float(u1), 1.0
    z = (abs(u1 - mu) - 0.5) / sigma
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return float(u1), float(min(1.0, p))


def bootstrap_median_difference(x: np.ndarray, y: np.ndarray, level: float = 0.95,
                                samples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(y) - median(x) (resampling each side with
    replacement; seeded, so deterministic)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    mx = np.median(x[rng.integers(0, x.size, (samples, x.size))], axis=1)
    my = np.median(y[rng.integers(0, y.size, (samples, y.size))], axis=1)
    d = my - mx
    alpha = (1 - level) / 2
    return float(np.quantile(d, alpha)), float(np.quantile(d, 1 - alpha))


@dataclass
class Shift:
    """How a per-instance quantity moved between two runs."""

    n_before: int
    n_after: int
    median_before: float
    median_after: float
    change: float | None  # median_after / median_before - 1
    p: float | None  # two-sided Mann-Whitney p; None when noise cannot be judged
    interval: tuple[float, float] | None  # 95 % bootstrap interval of the median difference
    # 'faster', 'slower', 'no change beyond noise', 'inconclusive' (the two tests disagree),
    # 'noise cannot be judged'
    verdict: str
    delta: float | None = None  # median_after - median_before
    # the interval in % of median_before (what the text prints beside the ns)
    interval_pct: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.delta is None and self.median_before == self.median_before and \
                self.median_after == self.median_after:  # not NaN
            self.delta = self.median_after - self.median_before
        if self.interval_pct is None and self.interval is not None and self.median_before:
            lo, hi = self.interval
            self.interval_pct = (100 * lo / self.median_before, 100 * hi / self.median_before)

    @property
    def changed(self) -> bool:
        """Beyond noise: both tests agree that it moved."""
        return self.verdict in ("faster", "slower")

    def interval_text(self, unit: float = 1e6, name: str = "ms") -> str:
        """'-0.120 to +1.300 ms (-1.6 % to +17.6 %)': the 95 % interval of the median
        change, in `name` (ns / `unit`) and in % of the median before."""
        if self.interval is None:
            return ""
        lo, hi = self.interval
        pct = ""
        if self.interval_pct is not None:
            pct = f" ({self.interval_pct[0]:+.1f} % to {self.interval_pct[1]:+.1f} %)"
        return f"{lo / unit:+.3f} to {hi / unit:+.3f} {name}{pct}"

    def p_text(self) -> str:
        """'p = 0.004' ('p < 0.001' below that)."""
        if self.p is None:
            return ""
        return "p < 0.001" if self.p < 0.001 else f"p = {self.p:.3f}"

    def reading(self, unit: float = 1e6, name: str = "ms") -> str:
        """The verdict as it must read: a change with its p; no change with its p (never
        below alpha) and the interval that holds 0; 'inconclusive' with why (the test
        rejects but the interval holds 0, or the other way round)."""
        if self.p is None:
            return self.verdict
        iv = self.interval_text(unit, name)
        if self.verdict == "inconclusive":
            why = (f"{self.p_text()}, but the 95 % interval of the median change, {iv}, "
                   "includes 0") if self.p < ALPHA else \
                (f"the 95 % interval of the median change, {iv}, excludes 0, but "
                 f"{self.p_text()}")
            return f"inconclusive: {why}"
        return f"{self.verdict} ({self.p_text()}; median change {iv})"


ALPHA = 0.05
MIN_INSTANCES = 3  # fewer a side: the exact test cannot reach p < 0.05 (n=3/3: p >= 0.1)


def compare_samples(x: np.ndarray, y: np.ndarray, alpha: float = ALPHA) -> Shift:
    """The verdict on per-instance durations x (before) and y (after): 'slower'/'faster'
    when the Mann-Whitney test rejects equal distributions at `alpha` and the bootstrap
    interval of the median difference excludes 0; 'no change beyond noise' when neither
    does; 'inconclusive' when they disagree (the distributions differ but the median's
    change is not sure, or the other way round: a p below alpha is never read as no
    change); with fewer than MIN_INSTANCES a side, 'noise cannot be judged'. Measured on
    simulated pairs (tests/test_verdicts.py, docs/diff.md): 'slower' or 'faster' on 1.7-4.3 %
    of pairs of 20 steps without a change, whatever the distribution."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    mx = float(np.median(x)) if x.size else float("nan")
    my = float(np.median(y)) if y.size else float("nan")
    change = (my / mx - 1.0) if x.size and y.size and mx > 0 else None
    if x.size < MIN_INSTANCES or y.size < MIN_INSTANCES:
        return Shift(x.size, y.size, mx, my, change, None, None, "noise cannot be judged")
    _, p = mann_whitney(x, y)
    lo, hi = bootstrap_median_difference(x, y)
    excludes = lo > 0 or hi < 0
    if p < alpha and excludes:
        verdict = "slower" if my > mx else "faster"
    elif p >= alpha and not excludes:
        verdict = "no change beyond noise"
    else:
        verdict = "inconclusive"
    return Shift(x.size, y.size, mx, my, change, p, (lo, hi), verdict)


def holm(shifts: dict[str, Shift], alpha: float = ALPHA) -> dict[str, Shift]:
    """The shifts of one family of tests (the kernels of a step, its categories) with the
    Holm-Bonferroni step-down correction: p-values adjusted (p_(i) x (m - i + 1), running
    maximum), the verdicts taken again on them, so that testing many things at once does
    not name one that moved by chance (family-wise error at most `alpha`)."""
    judged = sorted((s.p, k) for k, s in shifts.items() if s.p is not None)
    m = len(judged)
    out = dict(shifts)
    running = 0.0
    for i, (p, k) in enumerate(judged):
        running = max(running, min(1.0, p * (m - i)))
        s = shifts[k]
        lo, hi = s.interval
        excludes = lo > 0 or hi < 0
        if running < alpha and excludes:
            verdict = "slower" if s.median_after > s.median_before else "faster"
        elif running >= alpha and not excludes:
            verdict = "no change beyond noise"
        else:
            verdict = "inconclusive"
        out[k] = Shift(s.n_before, s.n_after, s.median_before, s.median_after, s.change,
                       running, s.interval, verdict)
    return out


def proportion_p(k1: int, n1: int, k2: int, n2: int) -> float | None:
    """Two-sided p-value that k1 of n1 and k2 of n2 come from one share (a function's
    samples among two runs' samples): Fisher's exact test where an expected count of the
    2x2 table is below 5, else the pooled two-proportion z test (the chi-square test of the
    table). None when a side has no sample. Samples are read as independent draws, which
    periodic samples of one program only approach: the comparison also asks a share to move
    by `SHARE_MOVE` before it names it."""
    if n1 <= 0 or n2 <= 0:
        return None
    k, n = k1 + k2, n1 + n2
    expected = min(k * n1, k * n2, (n - k) * n1, (n - k) * n2) / n
    if expected < 5:
        return _fisher(k1, n1, k2, n2)
    p = k / n
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0
    z = (k1 / n1 - k2 / n2) / se
    return math.erfc(abs(z) / math.sqrt(2))


def _fisher(k1: int, n1: int, k2: int, n2: int) -> float:
    """Fisher's exact test of the 2x2 table (k1, n1-k1; k2, n2-k2), two-sided: the
    probability of the tables with the same margins no more likely than this one."""
    k, n = k1 + k2, n1 + n2
    lo, hi = max(0, k - n2), min(k, n1)

    def logp(x: int) -> float:  # hypergeometric: x of the k successes in the first row
        return (math.lgamma(n1 + 1) - math.lgamma(x + 1) - math.lgamma(n1 - x + 1)
                + math.lgamma(n2 + 1) - math.lgamma(k - x + 1) - math.lgamma(n2 - k + x + 1)
                - math.lgamma(n + 1) + math.lgamma(k + 1) + math.lgamma(n - k + 1))

    xs = np.arange(lo, hi + 1)
    logs = np.array([logp(int(x)) for x in xs])
    here = logp(k1)
    keep = logs <= here + 1e-7
    return float(min(1.0, np.exp(logs[keep]).sum()))


SHARE_MOVE = 0.05  # a function's share of samples must move this much to be named
