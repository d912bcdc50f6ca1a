"""Inside the kernels: the sample-mixing model (analysis/rate_model.py) and its tables
(analysis/kernel_metrics.py), the rates the translation writes on the kernels, and
`analyze`'s section.

Synthetic runs (testing/synth_rates.py) have known rates: samples are written in closed
form from them, with noise, jitter and nsys' integer rounding. The model must recover every
rate within 4 of its own standard errors plus 0.25 percentage points (the integer rounding's
floor); the direct attribution's error is shown beside it. Real exports: the rates the
trace carries are those `analyze` prints, and both are checked against SQL where SQL can
say (counts, times, samples)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import CORPUS, translated_once
from hypothesis import given, settings
from hypothesis import strategies as st
from prvtools import sql, validate

import nsys2prv
from nsys2prv.analysis import rate_model as rm
from nsys2prv.analysis.kernel_metrics import KEY_METRICS as KEY_METRICS_
from nsys2prv.analysis.kernel_metrics import bound, read_kernel_metrics
from nsys2prv.analysis.labels import distinct_labels
from nsys2prv.paraver.read import read_trace
from nsys2prv.paraver.registry import gpu_metrics as greg
from nsys2prv.testing import synth_rates as sr

TOLERANCE_SE = 4.0
TOLERANCE_FLOOR = 0.25

KINDS = [sr.KernelKind("gemm", (85, 40, 70, 20), 200_000, 10_000_000, 1),
         sr.KernelKind("elementwise", (70, 10, 0, 55), 2_000, 30_000, 4),
         sr.KernelKind("tiny", (20, 5, 0, 5), 2_000, 4_000, 6),
         sr.KernelKind("conv", (80, 35, 50, 30), 30_000, 300_000, 2),
         sr.KernelKind("nccl", (12, 4, 0, 15), 20_000, 2_000_000, 1),
         # a copy kernel: little compute, but a running kernel keeps at least one of the
         # 108 SMs busy (the model's floor, 0.93 %)
         sr.KernelKind("copy", (1, 0, 0, 25), 5_000, 500_000, 1),
         sr.KernelKind("aux", (8, 3, 0, 4), 3_000, 40_000, 1)]


def _fit(sim: sr.Simulation):
    names = [k.name for k in sim.scenario.kinds]
    col, labels = rm.design([names[k] for k in sim.kind], np.zeros(sim.kind.size, bool),
                            sim.end - sim.start)
    lo, hi = rm.bounds([True] * sim.values.shape[1], sim.values)
    fit, ent = rm.fit_device(rm.periods_of(sim.times), sim.values, sim.start, sim.end, col,
                             len(labels), lo, hi)
    return fit, labels


def _errors(sim: sr.Simulation):
    """(model error, its standard error, direct attribution error) per (kernel, metric)."""
    fit, labels = _fit(sim)
    out = []
    for m in range(sim.values.shape[1]):
        mf = fit.metrics[m]
        for j, lab in enumerate(labels):
            true = sim.truth[lab][m]
            out.append((lab, m, mf.rates[j] - true, mf.se[j], mf.direct[j] - true))
    return fit, out


SCENARIOS = {
    # one stream, 10 kHz, kernels of 2 us to 10 ms
    "one stream 10 kHz": sr.RateScenario(KINDS[:4], streams=1, frequency=10_000,
                                         span=300_000_000, seed=3),
    # compute + NCCL-like + copy + auxiliary streams at once (contributions add up)
    "four streams 10 kHz": sr.RateScenario(KINDS, streams=4, frequency=10_000,
                                           span=300_000_000, seed=3, gap_mean=100_000,
                                           stream_kinds=[[0, 1, 2, 3], [4], [5], [6]]),
    "three streams 200 kHz": sr.RateScenario(KINDS, streams=3, frequency=200_000,
                                             span=60_000_000, seed=3, gap_mean=100_000,
                                             stream_kinds=[[0, 1, 2, 3], [4], [5]],
                                             jitter=0.2),
    "two streams 10 kHz noisy": sr.RateScenario(KINDS, streams=2, frequency=10_000,
                                                span=300_000_000, seed=5, noise=3.0,
                                                gap_mean=50_000,
                                                stream_kinds=[[0, 1, 2, 3], [4, 6]]),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_rates_recovered_within_their_errors(name):
    sim = sr.simulate(SCENARIOS[name])
    assert (sim.values >= 100).mean() < 0.05  # the contributions stay within the range
    fit, errors = _errors(sim)
    worst_model = max(abs(e) for _, _, e, _, _ in errors)
    worst_direct = max(abs(d) for _, _, _, _, d in errors)
    for lab, m, err, se, _ in errors:
        assert abs(err) <= TOLERANCE_SE * se + TOLERANCE_FLOOR, (lab, m, err, se)
        if lab == "gemm":  # fills whole periods: known to a fraction of a point
            assert se < 0.2, (lab, m, se)
    # the direct attribution blurs the short kernels with their neighbours
    assert worst_direct > 10 * worst_model
    noise = SCENARIOS[name].noise  # noise the model cannot explain lowers its R^2
    for mf in fit.metrics:
        assert mf.r2_cv > (0.97 if noise < 1 else 0.85)
        assert mf.r2_cv > mf.r2_direct


def test_short_kernels_are_separated_not_blurred():
    """'tiny' (2-4 us, 20 % SM Active, no tensor) always runs between others in periods of
    100 us: the direct attribution gives it its neighbours' values; the model its own."""
    sim = sr.simulate(SCENARIOS["one stream 10 kHz"])
    fit, labels = _fit(sim)
    j = labels.index("tiny")
    assert fit.method[j] == "model"
    mf = fit.metrics[2]  # Tensor Active: 0 for 'tiny'
    assert abs(mf.rates[j]) <= TOLERANCE_SE * mf.se[j] + TOLERANCE_FLOOR
    assert mf.direct[j] > 5.0 and mf.direct[j] > 3 * abs(mf.rates[j])
    assert fit.method[labels.index("gemm")] == "direct"  # fills whole periods


def test_saturated_concurrency_is_reported_by_the_fit():
    """Two streams whose rates add up past 100 %: the samples saturate, the additive model
    cannot hold, and its cross-validated R^2 says so (the metric that does not saturate
    still fits)."""
    sc = sr.RateScenario(KINDS[:4], streams=2, frequency=10_000, span=300_000_000, seed=3)
    sim = sr.simulate(sc)
    assert (sim.values[:, 0] >= 100).mean() > 0.2
    fit, _ = _fit(sim)
    assert fit.metrics[0].r2_cv < 0.5  # SM Active saturates
    assert fit.metrics[1].r2_cv > 0.97  # SM Issue does not


def test_kernels_that_never_run_apart_are_a_group():
    """'a' (3 us) is always followed at once by 'b' (3 us) inside one sampling period: every
    period has as much of one as of the other, so no sample can tell them apart; both are
    reported as one group with the group's rate (their mean). 'c' runs alone, with varying
    durations, and is fitted on its own."""
    period, n = 100_000, 400
    times = np.arange(n + 1, dtype=np.int64) * period
    rng = np.random.default_rng(1)
    starts, ends, cols = [], [], []
    for p in range(n - 1):
        t = p * period + int(rng.integers(0, period - 6_000))
        starts += [t, t + 3_000]
        ends += [t + 3_000, t + 6_000]
        cols += [0, 1]
        if p % 3 == 0:
            c = int(rng.integers(5_000, 60_000))
            starts.append(p * period + 10_000)  # may overlap a and b: contributions add
            ends.append(p * period + 10_000 + c)
            cols.append(2)
    start, end, col = (np.array(x, dtype=np.int64) for x in (starts, ends, cols))
    per = rm.periods_of(times)
    ent = rm.entries(per, start, end, col, 3)
    true = np.array([[60.0], [20.0], [35.0], [0.0]])  # a, b, c, idle
    values = rm.predict(ent, true, per.n)
    fit, _ = rm.fit_device(per, values, start, end, col, 3, np.zeros(1), np.full(1, 100.0))
    assert list(fit.method[:3]) == ["group", "group", "model"]
    assert fit.group[0] == fit.group[1] == 0 and fit.group[2] == -1
    assert fit.metrics[0].rates[0] == pytest.approx(40.0, abs=1e-6)  # (60 + 20) / 2
    assert fit.metrics[0].rates[1] == pytest.approx(40.0, abs=1e-6)
    assert fit.metrics[0].rates[2] == pytest.approx(35.0, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_bounded_lsq_meets_its_optimality_conditions(n, seed):
    """KKT: the gradient is zero on free variables, points outward at active bounds."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n + 3, n))
    y = rng.normal(size=n + 3) * 50
    G, b = A.T @ A, A.T @ y
    lo, hi = np.zeros(n), np.full(n, 10.0)
    x = rm.bounded_lsq(G, b, lo, hi)
    assert np.all(x >= lo - 1e-9) and np.all(x <= hi + 1e-9)
    g = G @ x - b
    scale = 1e-6 * (1 + np.abs(b).max())
    free = (x > lo + 1e-7) & (x < hi - 1e-7)
    assert np.all(np.abs(g[free]) < scale)
    assert np.all(g[x <= lo + 1e-7] > -scale)
    assert np.all(g[x >= hi - 1e-7] < scale)


@settings(max_examples=25, deadline=None)
@given(st.integers(20, 90), st.integers(0, 2**31 - 1))
def test_bounded_lsq_with_many_columns_at_their_bounds(n, seed):
    """Shares of many kernels whose true rates often pass their grids' ceilings (about half of
    the columns end at a bound): the column-by-column updated inverse finds what
    the iterations with a factorisation per step find (KKT too), from the clipped minimum
    or from any start inside the bounds."""
    rng = np.random.default_rng(seed)
    A = np.abs(rng.normal(size=(3 * n, n))) * (rng.random((3 * n, n)) < 0.3)
    A[np.arange(n), np.arange(n)] += 0.5  # every column runs alone somewhere
    truth = rng.uniform(0, 100, n)
    y = A @ truth + rng.normal(0, 3, 3 * n)
    G, b = A.T @ A, A.T @ y
    lo, hi = np.zeros(n), rng.uniform(30, 100, n)
    x = rm.bounded_lsq(G, b, lo, hi)
    x0 = np.linalg.solve(G, b)
    c = np.clip(x0, lo, hi)
    slow, _, _ = rm._active_set(G, b, lo, hi, c, (c > lo) & (c < hi), 500, None)
    assert np.allclose(x, slow, rtol=0, atol=1e-9 * (1 + np.abs(slow).max()))
    g = G @ x - b
    scale = 1e-6 * (1 + np.abs(b).max())
    free = (x > lo + 1e-7) & (x < hi - 1e-7)
    assert np.all(np.abs(g[free]) < scale)
    assert np.all(g[x <= lo + 1e-7] > -scale) and np.all(g[x >= hi - 1e-7] < scale)
    warm = rm.bounded_lsq(G, b, lo, hi, start=rng.uniform(lo, hi))
    assert np.allclose(warm, x, rtol=0, atol=1e-7 * (1 + np.abs(x).max()))


def _profile_by_search(G, b, lo, hi, k, allowed, direction):
    """The end of column k's profile range by bisection: the furthest value t of x_k (from
    the bounded fit, in `direction`) at which the best fit of the other columns within
    their bounds, x_k held at t, is at most `allowed` worse (in q = x'Gx/2 - b'x)."""
    n = b.size
    best = rm.bounded_lsq(G, b, lo, hi)
    q = lambda x: 0.5 * x @ G @ x - b @ x  # noqa: E731
    q0 = q(best)
    others = np.array([i for i in range(n) if i != k])

    def worse(t):
        if others.size == 0:
            x = np.array([t])
        else:
            # x_k held at t: the others' problem has b less the column k's pull
            sub = rm.bounded_lsq(G[np.ix_(others, others)], b[others] - G[others, k] * t,
                                 lo[others], hi[others])
            x = np.empty(n)
            x[others], x[k] = sub, t
        return q(x) - q0

    a = best[k]
    z = hi[k] if direction > 0 else lo[k]
    if worse(z) <= allowed:
        return z
    # to a width far inside the tests' tolerance (1e-4): ~26 halvings, not 50
    for _ in range(50):
        if abs(z - a) <= 1e-6 * (1 + abs(a)):
            break
        mid = (a + z) / 2
        a, z = (mid, z) if worse(mid) <= allowed else (a, mid)
    return (a + z) / 2


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 10), st.integers(0, 2**31 - 1))
def test_rate_ranges_follow_the_profile_within_the_bounds(n, seed):
    """A rate's range: the values whose best fit of every other column (within its bounds)
    is at most `allowed` worse. The parametric walk along the profile (`_System.ranges`,
    `_profile_end`) gives the ends a bisection of bounded fits finds; the range holds the
    bounded fit and stays within the column's bounds."""
    rng = np.random.default_rng(seed)
    A = np.abs(rng.normal(size=(n + 4, n)))  # shares: positive, some columns alike
    A[:, -1] += 0.8 * A[:, 0]
    y = rng.normal(size=n + 4) * 40 + 20
    G, b = A.T @ A, A.T @ y
    lo, hi = rng.uniform(0, 5, n), rng.uniform(20, 60, n)
    system = rm._System(G)
    x = system.bounded(b, system.solve(b), lo, hi)
    allowed = float(rng.uniform(0.5, 50))
    r_lo, r_hi = system.ranges(b, x, lo, hi, allowed)
    for k in range(n):
        assert lo[k] - 1e-9 <= r_lo[k] <= x[k] + 1e-9 <= r_hi[k] + 2e-9 <= hi[k] + 3e-9
        for direction, got in ((1, r_hi[k]), (-1, r_lo[k])):
            want = _profile_by_search(G, b, lo, hi, k, allowed / 2, direction)
            assert got == pytest.approx(want, abs=1e-4 * (1 + abs(want))), (k, direction)


@settings(max_examples=15, deadline=None)
@given(st.integers(6, 14), st.integers(0, 2**31 - 1))
def test_rate_ranges_whose_profiles_cross_other_bounds(n, seed):
    """As above, with half of the columns at their grids' ceilings and wide allowances:
    most profiles meet other columns' bounds and are followed on (`_profile_end` on the
    column-by-column updated inverse); their ends are still the bisection's."""
    rng = np.random.default_rng(seed)
    A = np.abs(rng.normal(size=(2 * n, n))) * (rng.random((2 * n, n)) < 0.5)
    A[np.arange(n), np.arange(n)] += 0.2
    y = A @ rng.uniform(0, 60, n) + rng.normal(0, 5, 2 * n)
    G, b = A.T @ A, A.T @ y
    lo, hi = np.zeros(n), rng.uniform(10, 50, n)
    system = rm._System(G)
    x = system.bounded(b, system.solve(b), lo, hi)
    allowed = float(rng.uniform(10, 400))
    r_lo, r_hi = system.ranges(b, x, lo, hi, allowed)
    for k in range(n):
        for direction, got in ((1, r_hi[k]), (-1, r_lo[k])):
            want = _profile_by_search(G, b, lo, hi, k, allowed / 2, direction)
            assert got == pytest.approx(want, abs=1e-4 * (1 + abs(want))), (k, direction)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_shares_and_sums_equal_brute_force(seed):
    """The shares of random intervals in random periods, the normal equations and the fit
    without active bounds equal a dense least-squares solution."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.integers(50, 150, 40)).astype(np.int64)
    per = rm.periods_of(times)
    k = int(rng.integers(1, 5))
    start = rng.integers(times[0] - 100, times[-1], 60).astype(np.int64)
    end = start + rng.integers(1, 300, 60)
    col = rng.integers(0, k, 60).astype(np.int64)
    ent = rm.entries(per, start, end, col, k)
    dense = np.zeros((per.n, k + 1))
    np.add.at(dense, (ent.period, ent.col), ent.share)
    want = np.zeros((per.n, k + 1))
    for s, e, c in zip(start, end, col):
        for p in range(per.n):
            want[p, c] += max(0, min(e, per.end[p]) - max(s, per.start[p])) / (
                per.end[p] - per.start[p])
    cover = np.zeros(per.n)
    for p in range(per.n):
        pts = np.zeros(per.end[p] - per.start[p], dtype=bool)
        for s, e in zip(start, end):
            a, z = max(s, per.start[p]), min(e, per.end[p])
            if z > a:
                pts[a - per.start[p]:z - per.start[p]] = True
        cover[p] = pts.mean()
    want[:, k] = 1 - cover
    assert np.allclose(dense, want)
    values = rng.normal(30, 10, (per.n, 2))
    sums = rm.accumulate(ent, values)
    assert np.allclose(sums.G.sum(0), dense.T @ dense)
    assert np.allclose(sums.b.sum(0), dense.T @ values)
    live = np.abs(dense).sum(0) > 0
    fit = rm.fit(sums, np.full(2, -1e9), np.full(2, 1e9))
    if np.linalg.matrix_rank(dense[:, live]) == live.sum() and not (fit.group >= 0).any():
        ref = np.linalg.lstsq(dense[:, live], values, rcond=None)[0]
        for m in range(2):
            assert np.allclose(fit.metrics[m].rates[live], ref[:, m], atol=1e-6)


def test_missing_values_leave_their_samples_out():
    sim = sr.simulate(SCENARIOS["one stream 10 kHz"])
    values = sim.values.copy()
    drop = np.random.default_rng(2).random(values.shape[0]) < 0.2
    values[drop, 1] = np.nan
    names = [k.name for k in sim.scenario.kinds]
    col, labels = rm.design([names[k] for k in sim.kind], np.zeros(sim.kind.size, bool),
                            sim.end - sim.start)
    per = rm.periods_of(sim.times)
    hi = np.full(4, 100.0)
    fit, _ = rm.fit_device(per, values, sim.start, sim.end, col, len(labels), np.zeros(4), hi)
    # the same metric fitted alone on the kept samples, from a matrix without them
    ent = rm.entries(per, sim.start, sim.end, col, len(labels))
    keep = ~drop
    dense = np.zeros((per.n, len(labels) + 1))
    np.add.at(dense, (ent.period, ent.col), ent.share)
    ref = rm.bounded_lsq(dense[keep].T @ dense[keep], dense[keep].T @ values[keep, 1],
                         np.zeros(len(labels) + 1), np.full(len(labels) + 1, 100.0))
    assert np.allclose(fit.metrics[1].rates, ref, atol=1e-6)
    assert fit.metrics[1].samples == int(keep.sum())
    assert fit.metrics[0].samples == per.n


def test_rates_alone_are_the_full_fits_rates():
    """`fit(rates_only=True)` (the translation's rates, the interference's two cases) skips
    the held folds, the errors and the ranges, not the rates: each metric's are those of
    the full fit to the last bit, with values missing in one metric (its own system) and
    bounds that bind; a metric not asked for has none."""
    sim = sr.simulate(SCENARIOS["one stream 10 kHz"])
    values = sim.values.copy()
    values[np.random.default_rng(3).random(values.shape[0]) < 0.2, 1] = np.nan
    names = [k.name for k in sim.scenario.kinds]
    col, labels = rm.design([names[k] for k in sim.kind], np.zeros(sim.kind.size, bool),
                            sim.end - sim.start)
    per = rm.periods_of(sim.times)
    sums = rm.accumulate(rm.entries(per, sim.start, sim.end, col, len(labels)), values)
    lo, hi = np.zeros(4), np.full(4, 100.0)
    free = rm.fit(sums, lo, hi)
    hi[0] = float(np.nanmedian(free.metrics[0].rates[:-1]))  # a bound that some rates meet
    full = rm.fit(sums, lo, hi)
    alone = rm.fit(sums, lo, hi, rates_only=True)
    some = rm.fit(sums, lo, hi, rates_only=True, metrics=[1, 3])
    assert (full.metrics[0].rates >= hi[0] - 1e-9).any()
    for m in range(4):
        assert np.array_equal(alone.metrics[m].rates, full.metrics[m].rates, equal_nan=True)
        assert np.isnan(alone.metrics[m].r2_cv) and np.isnan(alone.metrics[m].se).all()
        if m in (1, 3):
            assert np.array_equal(some.metrics[m].rates, full.metrics[m].rates,
                                  equal_nan=True)
        else:
            assert np.isnan(some.metrics[m].rates).all()
    assert np.array_equal(alone.method, full.method)
    assert not np.isnan(full.metrics[0].r2_cv)


def test_gram_from_its_upper_triangle_is_every_pairs_sum_to_the_last_bit(monkeypatch):
    """`accumulate` sums each period's pairs (i <= j) and mirrors them: the Gram sums, and
    those of a metric with missing values, are those of every ordered pair, bit for bit
    (40 columns, up to tens of entries a period)."""
    rng = np.random.default_rng(5)
    times = np.cumsum(rng.integers(90, 110, 20000))
    per = rm.periods_of(times)
    start = rng.integers(times[0], times[-1], 60000)
    end = start + rng.integers(1, 3000, start.size)
    ent = rm.entries(per, start, end, rng.integers(0, 40, start.size), 40)
    values = rng.normal(30, 10, (per.n, 3))
    values[rng.random(per.n) < 0.1, 1] = np.nan
    got = rm.accumulate(ent, values)

    def every_pair(p):  # each ordered pair of positions of one period
        heads = np.concatenate([[0], np.flatnonzero(np.diff(p)) + 1])
        counts = np.diff(np.concatenate([heads, [p.size]]))
        per_ = np.repeat(counts, counts)
        i = np.repeat(np.arange(p.size), per_)
        return i, np.repeat(heads, counts)[i] + np.arange(i.size) - np.repeat(
            np.cumsum(per_) - per_, per_)

    monkeypatch.setattr(rm, "_pairs", every_pair)
    monkeypatch.setattr(rm, "_mirrored", lambda sums, F, K1: sums)
    want = rm.accumulate(ent, values)
    assert np.bincount(ent.period).max() > 10
    assert np.array_equal(got.G, want.G) and list(got.missing) == [1]
    assert np.array_equal(got.missing[1], want.missing[1])
    assert not np.array_equal(got.G, np.zeros_like(got.G))


def test_periods_cut_at_gaps():
    times = np.array([0, 100, 200, 300, 1000, 1100, 1200], dtype=np.int64)
    per = rm.periods_of(times)
    assert per.interval == 100
    assert per.end.tolist() == [100, 200, 300, 400, 1100, 1200, 1300]
    assert per.cut == 1


def test_job_method_is_the_gpu_with_most_time_in_either_order():
    """A kernel measured directly on one GPU and by the model on another: the job's line
    takes the method of the GPU where the kernel had most of its sampled time, whatever
    the order of the GPUs (the mode of two came back in either order)."""
    from nsys2prv.analysis.kernel_metrics import _job_rates

    row = {"kernel": "k", "metric": "SM Active", "short": "k", "kind": "kernel",
           "rate": 50.0, "se": 1.0, "direct": 50.0, "group": None, "range_lo": 49.0,
           "range_hi": 51.0, "determined": True, "lo": 0.0, "hi": 100.0}
    a = {**row, "device": "GPU 0", "method": "direct", "time": 10.0}
    b = {**row, "device": "GPU 1", "method": "model", "time": 30.0}
    for rows in ([a, b], [b, a]):
        job = _job_rates(pl.DataFrame(rows))
        assert job["method"].to_list() == ["model"]


def test_bound_labels_of_known_kernels():
    assert bound({"DRAM Read Bandwidth": 45, "DRAM Write Bandwidth": 30, "SM Active": 90,
                  "SM Issue": 20}) == "memory-bound"  # a copy / transpose
    assert bound({"Tensor Active": 64, "SM Issue": 35, "SM Active": 98,
                  "DRAM Read Bandwidth": 12}) == "tensor-bound"  # a tensor-core GEMM
    assert bound({"SM Issue": 80, "SM Active": 100, "Tensor Active": 0,
                  "DRAM Read Bandwidth": 7}) == "compute-bound"
    assert bound({"SM Active": 20, "SM Issue": 5}) == "under-filled"  # a 5 us elementwise
    assert bound({"SM Active": 90, "SM Issue": 10, "Compute Warps in Flight": 8,
                  "DRAM Read Bandwidth": 10}) == "latency-bound"
    assert bound({}) == ""


def test_labels_tell_kernels_apart():
    full = ["void at::native::vectorized_elementwise_kernel<(int)4, at::native::AddFunctor"
            "<float>, at::detail::Array<char *, (int)3>>(int, T2, T3)",
            "void at::native::vectorized_elementwise_kernel<(int)4, at::native::MulFunctor"
            "<float>, at::detail::Array<char *, (int)3>>(int, T2, T3)",
            "void cudnn::ops::nchwToNhwcKernel<float, float, float, (bool)0>(T1)",
            "void cudnn::ops::nchwToNhwcKernel<__half, __half, float, (bool)0>(T1)",
            "ampere_sgemm_32x32_sliced1x4_tn"]
    short = ["vectorized_elementwise_kernel", "vectorized_elementwise_kernel",
             "nchwToNhwcKernel", "nchwToNhwcKernel", "ampere_sgemm_32x32_sliced1x4_tn"]
    labels = distinct_labels(full, short)
    assert labels[full[0]] == "vectorized_elementwise_kernel<AddFunctor<float>>"
    assert labels[full[1]] == "vectorized_elementwise_kernel<MulFunctor<float>>"
    assert labels[full[2]] == "nchwToNhwcKernel<float>"
    assert labels[full[3]] == "nchwToNhwcKernel<__half>"
    assert labels[full[4]] == "ampere_sgemm_32x32_sliced1x4_tn"
    # the same labels whatever else is labelled beside them
    assert distinct_labels(full[2:4], short[2:4]) == {f: labels[f] for f in full[2:4]}


# -- end to end: an export with known rates -----------------------------------------------------

@pytest.fixture(scope="module")
def known(tmp_path_factory):
    d = tmp_path_factory.mktemp("rates")
    sc = sr.RateScenario(KINDS, streams=2, frequency=10_000, span=120_000_000, seed=7,
                         gap_mean=80_000, stream_kinds=[[0, 1, 2, 3], [5]])
    sim = sr.simulate(sc)
    db = sr.write_export(sim, d / "known.sqlite")
    out = d / "known.prv"
    result = nsys2prv.translate(db, out)
    validate(out)
    return sim, db, out, result


def _trace_rates(path: Path) -> pl.DataFrame:
    """(kernel full name, metric, rate) at every kernel's start, as Paraver's Last Evt Val
    has it there: the rates are written where they change, and hold until the next kernel
    of the row sets them."""
    from nsys2prv.paraver.read import open_trace

    info = open_trace(path)
    names, labels = info.names, info.type_labels
    rate_types = {t: lab.split(": ", 1)[1] for t, lab in labels.items()
                  if greg.RATE.base <= t < greg.RATE.base + greg.RATE.size}
    tr = read_trace(path, types={67_000_001, *rate_types})
    ev = tr.events.sort("row", "time", "seq")
    starts = ev.filter((pl.col("type") == 67_000_001) & (pl.col("value") > 0)).select(
        "row", "time", pl.col("value").alias("full"))
    out = []
    for t, metric in rate_types.items():
        v = (ev.filter(pl.col("type") == t).group_by("row", "time", maintain_order=True)
             .agg(pl.col("value").last()))
        got = starts.sort("time").join_asof(v.sort("time"), on="time", by="row",
                                            strategy="backward")
        out.append(got.select(
            pl.col("full").replace_strict(names[67_000_001], return_dtype=pl.Utf8)
            .alias("kernel"), pl.lit(metric).alias("metric"),
            (pl.col("value").fill_null(0) / 100).alias("rate")).filter(pl.col("rate") != 0))
    return pl.concat(out)


def test_trace_carries_the_rates_analyze_prints(known):
    sim, db, out, result = known
    km = read_kernel_metrics(out)
    got = _trace_rates(out)
    # one value per kernel name and metric, on every launch
    per = got.group_by("kernel", "metric").agg(pl.col("rate").n_unique().alias("n"),
                                               pl.len().alias("launches"),
                                               pl.col("rate").first())
    assert per["n"].max() == 1
    launches = {n: int((sim.kind == i).sum()) for i, n in enumerate(k.name for k in KINDS)}
    for r in per.iter_rows(named=True):
        assert r["launches"] == launches[r["kernel"]]
    want = (km.rates.filter((pl.col("kind") == "kernel")
                            & pl.col("metric").is_in(greg.KERNEL_METRICS))
            .select("kernel", "metric", (pl.col("rate") * 100).round() / 100)
            .filter(pl.col("rate") != 0))
    joined = want.join(per.select("kernel", "metric", pl.col("rate").alias("trace")),
                       on=["kernel", "metric"], how="full", coalesce=True)
    assert joined.height == want.height == per.height
    assert (joined["rate"] - joined["trace"]).abs().max() < 1e-9
    assert result.counts["gpu_metrics_kernels_with_rates"] == sim.start.size


def test_analyze_recovers_the_known_rates(known):
    sim, db, out, result = known
    km = read_kernel_metrics(out)
    keys = ["SM Active", "SM Issue", "Tensor Active", "DRAM Read Bandwidth"]
    for r in km.rates.filter(pl.col("kind") == "kernel").iter_rows(named=True):
        true = sim.truth[r["kernel"]][keys.index(r["metric"])]
        assert abs(r["rate"] - true) <= TOLERANCE_SE * r["se"] + TOLERANCE_FLOOR, r
    assert km.fits["r2_cv"].min() > 0.97
    k = km.kernels
    assert dict(zip(k["kernel"].to_list(), k["launches"].to_list())) == {
        n.name: int((sim.kind == i).sum()) for i, n in enumerate(KINDS)
        if (sim.kind == i).any()}
    gemm = k.filter(pl.col("kernel") == "gemm").row(0, named=True)
    assert gemm["bound"] == "tensor-bound" and gemm["method"] == "direct"
    assert k.filter(pl.col("kernel") == "tiny")["bound"].item() == "under-filled"


def test_analyze_cli_section_and_json(known, tmp_path):
    sim, db, out, result = known
    text = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(out),
                           "--no-idle"], capture_output=True, text=True, check=True).stdout
    assert "### Inside the kernels" in text
    assert "tensor-bound" in text and "fit quality" in text
    js = json.loads(subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(db),
                                    "--json", "--no-idle"], capture_output=True, text=True,
                                   check=True).stdout)
    km = js["kernel_metrics"]
    assert {r["kernel"] for r in km["kernels"]} >= {"gemm", "elementwise", "tiny", "conv"}
    assert all(0.97 < f["r2_cv"] <= 1 for f in km["fits"])
    # the analysis of the export and of its trace agree
    trace_km = read_kernel_metrics(out)
    a = {(r["kernel"], r["metric"]): r["rate"] for r in km["rates"]}
    b = {(r["kernel"], r["metric"]): r["rate"] for r in trace_km.rates.to_dicts()}
    assert a.keys() == b.keys()
    assert max(abs(a[k] - b[k]) for k in a if a[k] is not None) < 1e-9


def test_no_gpu_metrics_is_one_line(tmp_path):
    """Without GPU metrics, one line says so; the launch statistics follow (they need only
    the launches): the kernel's configuration as the export has it."""
    from nsys2prv.testing.synth import ApiCall, Kernel, Spec, write_export

    spec = Spec(processes=[(1, "p")], threads=[(1, 1, "p")], gpus=[(0, "GPU")],
                kernels=[Kernel(1000, 5000, 1, 0, 7, "k", 1, grid=(40, 1, 1),
                                block=(256, 1, 1), registers=64)],
                api=[ApiCall(100, 900, 1, 1, "cudaLaunchKernel", 1)])
    db = write_export(tmp_path / "plain.sqlite", spec)
    text = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(db), "--no-idle"],
                          capture_output=True, text=True, check=True).stdout
    section = text.split("### Inside the kernels")[1].strip().splitlines()
    assert "no GPU metrics in this export" in section[1]
    assert "--gpu-metrics-devices=all" in section[1]
    assert section[2].startswith("###   launch statistics:")
    row = [ln for ln in section if ln.split()[1:2] == ["k"]]
    # 40 blocks of 256 threads, 64 registers: 4 blocks per SM by registers (64 x 32 = 2048
    # a warp, 8 warps a sub-partition), 50 % occupancy; 40 of the A100's 108 SMs
    assert row and row[-1].split()[2:10] == ["40", "256", "64", "0", "32K", "4",
                                             "registers", "50.0"]
    # waves 40 / (108 x 4); SM Active <= 40 / 108; warps <= 40 x 8 / (108 x 64)
    assert row[-1].split()[10:14] == [f"{40 / 432:.2f}", f"{100 * 40 / 432:.0f}%",
                                      f"{100 * 40 / 108:.1f}", f"{100 * 320 / 6912:.1f}"]
    # the one kernel holds all of its GPU's time: its grid smaller than the GPU is named
    assert "under-filled by its launch: 40 blocks on 108 SMs (SM Active <= 37.0 %)" in text


# -- the real A100 export with GPU metrics ----------------------------------------------------

AIPROF = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"


@pytest.fixture(scope="module")
def aiprof(tmp_path_factory):
    if not AIPROF.exists():
        pytest.skip(f"{AIPROF} not in the corpus (set NSYS2PRV_CORPUS)")
    _, out = translated_once(AIPROF, tmp_path_factory)
    return out, read_kernel_metrics(out)


def test_aiprof_counts_equal_sql(aiprof):
    out, km = aiprof
    kernels = sql(AIPROF, "SELECT d.value, count(*), sum(k.end - k.start) FROM "
                          "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON "
                          "d.id = k.demangledName GROUP BY 1")
    got = km.kernels.filter(pl.col("kind") == "kernel")
    assert got.height == len(kernels) == 45
    want = {n: (c, t) for n, c, t in kernels}
    from nsys2prv.paraver.values import NORMALISERS, clean_label
    norm = {clean_label(NORMALISERS["kernel_names"](n)): v for n, v in want.items()}
    for r in got.iter_rows(named=True):
        assert (r["launches"], r["time"]) == norm[r["kernel"]]
    samples = sql(AIPROF, "SELECT count(DISTINCT timestamp) FROM GPU_METRICS")[0][0]
    assert km.fits["samples"].max() == samples
    # 36 of the 45 kernel names last less than one sampling interval on average
    assert (got["periods"] < 1).sum() >= 30


def test_aiprof_rates_within_their_launch(aiprof):
    """aiprof_opt2: no kernel at SM Active 0.0 any more (15 were; a running kernel keeps one
    of the 108 SMs busy), split_k_kernel's 10 blocks cap its SM Active at 9.26 % and its
    warps at 0.58 % (the model gave 37.9 and 76.8), and the rates the samples cannot pin
    down are ranges: the kernels that have some are the short ones (less than a sampling
    interval on average)."""
    out, km = aiprof
    k = km.rates.filter(pl.col("kind") == "kernel")
    sm = k.filter(pl.col("metric") == "SM Active")
    assert (sm["rate"] >= 100 / 108 - 1e-6).all()
    split = k.filter(pl.col("short") == "split_k_kernel")
    rates = dict(zip(split["metric"].to_list(), split["rate"].to_list()))
    assert rates["SM Active"] <= 9.26 and rates["Compute Warps in Flight"] <= 0.58
    ranged = k.filter(~pl.col("determined") & pl.col("metric").is_in(list(KEY_METRICS_)))
    names = set(ranged["kernel"].to_list())
    assert 5 <= len(names) <= 30
    periods = dict(zip(km.kernels["kernel"].to_list(), km.kernels["periods"].to_list()))
    assert all(periods[n] < 1 for n in names)
    # a model column the samples cannot pin down has a range wider than 10 points (a name
    # of several launch classes shows their ranges' time-weighted mean)
    split = km.rates_by_launch
    columns = pl.concat([k.filter(~pl.col("kernel").is_in(split["kernel"].implode())),
                         split], how="diagonal_relaxed")
    loose = columns.filter(~pl.col("determined") & pl.col("metric").is_in(list(KEY_METRICS_)))
    assert loose.height and (loose["range_hi"] - loose["range_lo"] > 10).all()


def test_aiprof_ranges_on_the_updated_inverse_equal_direct_solves(aiprof, monkeypatch):
    """aiprof_opt2's Gram matrices are singular (condition ~3e19: kernels that run only
    together), where an inverse must not stand in for the direct solves: every range
    equals the one found with a factorisation per step (checked once against bisection of
    bounded fits: the 558 profiles that go on past another column's bound, all equal)."""
    out, _ = aiprof
    systems = []
    ranges = rm._System.ranges

    def capture(self, b, x, lo, hi, allowed):
        systems.append((self, b, x, lo, hi, allowed))
        return ranges(self, b, x, lo, hi, allowed)

    monkeypatch.setattr(rm._System, "ranges", capture)
    read_kernel_metrics(out)
    monkeypatch.setattr(rm._System, "ranges", ranges)
    got = [ranges(*args) for args in systems]

    def direct_only(self, G, free, H=None):
        self.G, self.direct = G, True
        self.reset(np.flatnonzero(free))

    monkeypatch.setattr(rm._FreeInverse, "__init__", direct_only)
    assert len(systems) >= 20
    for args, (g_lo, g_hi) in zip(systems, got):
        w_lo, w_hi = ranges(*args)
        for g, w in ((g_lo, w_lo), (g_hi, w_hi)):
            scale = 1 + np.abs(w[np.isfinite(w)]).max(initial=0.0)
            assert np.allclose(g, w, rtol=0, atol=1e-9 * scale, equal_nan=True)


def test_aiprof_layout_transforms_issue_no_tensor_instruction(aiprof):
    """cuDNN's nchwToNhwc / nhwcToNchw transforms get 3-6 % Tensor Active from the direct
    attribution (their tensor-core neighbours); the model gives them none, and gives the
    two TF32 tensor-core convolutions more than the direct attribution does."""
    out, km = aiprof
    t = km.rates.filter(pl.col("metric") == "Tensor Active")
    transforms = t.filter(pl.col("short").is_in(["nchwToNhwcKernel", "nhwcToNchwKernel"]))
    assert transforms.height == 2
    assert (transforms["rate"] < 0.5).all()
    assert (transforms["direct"] > 2.0).all()
    convs = t.filter(pl.col("kernel").str.contains("cutlass_tensorop_s1688")
                     & pl.col("kernel").str.contains("_tf32_256x64_16x4_nhwc"))
    assert convs.height == 2
    for r in convs.iter_rows(named=True):
        assert r["rate"] > r["direct"] + 3
    assert sorted(round(x) for x in convs["rate"]) == [47, 64]
    fit = km.fits.filter(pl.col("metric") == "Tensor Active").row(0, named=True)
    assert fit["r2_cv"] > 0.99 > fit["r2_direct"]


# the issue's case: a short kernel of a small grid (10 blocks: SM Active <= 9.26 % of 108
# SMs) always right after a longer one, in the same sampling period
FOLLOWED = [sr.KernelKind("leader", (90, 40, 50, 20), 10_000, 13_000, 1),
            sr.KernelKind("follower", (8, 4, 0, 10), 3_000, 3_600, 0, blocks=10,
                          threads=128),
            sr.KernelKind("elementwise", (70, 10, 0, 55), 5_000, 40_000, 2),
            sr.KernelKind("tiny", (20, 5, 0, 5), 2_000, 4_000, 2)]


def _followed(tmp_path, lag: int, seed: int):
    sc = sr.RateScenario(FOLLOWED, frequency=10_000, span=100_000_000, seed=seed,
                         followers={0: 1}, lag=lag, gap_mean=30_000)
    sim = sr.simulate(sc)
    db = sr.write_export(sim, tmp_path / f"followed{lag}_{seed}.sqlite")
    out = tmp_path / f"followed{lag}_{seed}.prv"
    nsys2prv.translate(db, out)
    return sim, read_kernel_metrics(out)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_short_kernels_after_a_long_one_hold_the_truth(tmp_path, seed):
    """A short kernel that always follows a longer one: every reported rate is within its
    errors of the generator's (4 standard errors and the rounding's 0.25 points), and where
    the samples cannot pin a rate down its range holds the truth; the follower's rates stay
    within its grid (SM Active <= 9.26 %, >= one SM) and so does every range."""
    sim, km = _followed(tmp_path, 0, seed)
    keys = ["SM Active", "SM Issue", "Tensor Active", "DRAM Read Bandwidth"]
    for r in km.rates.filter(pl.col("kind") == "kernel").iter_rows(named=True):
        true = sim.truth[r["kernel"]][keys.index(r["metric"])]
        if r["determined"]:
            assert abs(r["rate"] - true) <= TOLERANCE_SE * r["se"] + TOLERANCE_FLOOR, r
        else:
            assert r["range_lo"] - TOLERANCE_FLOOR <= true <= r["range_hi"] + TOLERANCE_FLOOR
    f = km.rates.filter(pl.col("kernel") == "follower")
    capped = f.filter(pl.col("metric").is_in(keys[:3]))
    assert (capped["hi"] == 9.26).all()
    assert (capped["rate"] <= 9.26).all() and (capped["range_hi"] <= 9.26).all()
    sm = f.filter(pl.col("metric") == "SM Active")
    assert sm["rate"].item() >= 100 / 108 - 1e-6


def test_a_follower_of_a_misread_neighbour_stays_within_its_grid(tmp_path):
    """The samples lag the kernels by 3 us, so the leader's last microseconds land in its
    follower's periods: the model without the grids' bounds hands the follower a SM Active
    five times what its 10 blocks allow, beyond 4 of its standard errors (the issue's
    symptom on aiprof_opt2). With the bounds its SM Active stays at or below its grid's
    9.26 %, nearer the truth (8 %)."""
    sim, km = _followed(tmp_path, 3_000, 1)
    names = [k.name for k in sim.scenario.kinds]
    col, labels = rm.design([names[k] for k in sim.kind], np.zeros(sim.kind.size, bool),
                            sim.end - sim.start)
    lo, hi = rm.bounds([True] * 4, sim.values)
    free, _ = rm.fit_device(rm.periods_of(sim.times), sim.values, sim.start, sim.end, col,
                            len(labels), lo, hi)
    j = labels.index("follower")
    unbounded = free.metrics[0].rates[j]
    assert unbounded > 9.26 + TOLERANCE_SE * free.metrics[0].se[j]
    bounded = km.rates.filter((pl.col("kernel") == "follower")
                              & (pl.col("metric") == "SM Active")).row(0, named=True)
    assert bounded["rate"] <= 9.26 and abs(bounded["rate"] - 8) < abs(unbounded - 8) / 10


def test_diff_puts_the_rates_side_by_side(tmp_path):
    """After: the GEMM uses the tensor cores twice as much and runs shorter; the rates
    table shows both sides' rates and the paragraph names the change."""
    from nsys2prv.analysis.diff import compare
    from nsys2prv.cli.diff import format_text

    k1 = [sr.KernelKind("gemm", (85, 40, 35, 20), 200_000, 2_000_000, 1), *KINDS[1:3]]
    k2 = [sr.KernelKind("gemm", (90, 45, 70, 20), 100_000, 1_000_000, 1), *KINDS[1:3]]
    b = sr.write_export(sr.simulate(sr.RateScenario(k1, span=80_000_000, seed=1)),
                        tmp_path / "before.sqlite")
    a = sr.write_export(sr.simulate(sr.RateScenario(k2, span=80_000_000, seed=2)),
                        tmp_path / "after.sqlite")
    c = compare(str(b), str(a), rules=False)
    r = c.rates.filter((pl.col("kernel") == "gemm") & (pl.col("metric") == "Tensor Active"))
    assert r["before"].item() == pytest.approx(35, abs=1) and \
        r["after"].item() == pytest.approx(70, abs=1)
    elementwise = c.rates.filter((pl.col("kernel") == "elementwise")
                                 & (pl.col("metric") == "SM Active"))
    assert abs(elementwise["delta"].item()) < 1.5  # unchanged kernel, unchanged rate
    before, after = r["before"].item(), r["after"].item()
    assert (f"Largest rate change among them: gemm" in c.paragraph
            and f"Tensor Active {before:.1f} % -> {after:.1f} %" in c.paragraph)
    text = format_text(c)
    assert "kernel GPU metric rates" in text
    assert "kernel_rates" in c.to_dict()["tables"]


def test_the_step_whose_kernels_ran_differently(tmp_path):
    """Ten steps of 20 ms; in step 6 the GEMM's tensor-core rate drops from 70 to 40 %: that
    step, and only it, is named, on Tensor Active."""
    from nsys2prv.analysis.activities import ActivityCollector
    from nsys2prv.analysis.kernel_metrics import SampleCollector, kernel_metrics
    from nsys2prv.paraver.read import windows

    ms = 1_000_000
    sc = sr.RateScenario(KINDS[:4], span=200 * ms, seed=4,
                         changes=[(120 * ms, 140 * ms, 0, (85, 40, 40, 20))])
    sim = sr.simulate(sc)
    db = sr.write_export(sim, tmp_path / "steps.sqlite")
    out = tmp_path / "steps.prv"
    result = nsys2prv.translate(db, out)
    shift = result.alignment.shifts[0]
    acts, samples = ActivityCollector(out), SampleCollector(out)
    for w in windows(out, acts.types | samples.types, state_rows="cpu"):
        acts.add(w)
        samples.add(w)
    steps = pl.DataFrame({"instance": list(range(1, 11)),
                          "start": [i * 20 * ms + shift for i in range(10)],
                          "end": [(i + 1) * 20 * ms + shift for i in range(10)]})
    km = kernel_metrics(acts.result(), samples, steps)
    odd = km.steps.filter(pl.col("differs"))
    assert set(odd["instance"].to_list()) == {7}
    assert "Tensor Active" in odd["metric"].to_list()
    t = odd.filter(pl.col("metric") == "Tensor Active").row(0, named=True)
    assert t["measured"] < t["predicted"] - 5


def test_interference_beside_nccl(tmp_path):
    """'conv' runs on stream 7, NCCL kernels on stream 8; a conv beside an NCCL kernel
    issues less (SM Issue 35 -> 20, tensor 50 -> 30): the interference table gives both
    cases' rates, and launches that match the layout."""
    sc = sr.RateScenario([KINDS[3], KINDS[4]], streams=2, span=200_000_000, seed=6,
                         gap_mean=150_000, stream_kinds=[[0], [1]],
                         interference=[(0, 1, (70, 20, 30, 30))])
    sim = sr.simulate(sc)
    over = sr.overlapping(sim.start, sim.end, sim.kind, 0, 1)
    db = sr.write_export(sim, tmp_path / "interference.sqlite")
    out = tmp_path / "interference.prv"
    nsys2prv.translate(db, out)
    km = read_kernel_metrics(out)
    t = km.interference
    assert set(t["kernel"].to_list()) == {"conv"}
    alone = t.filter(pl.col("case") == "alone").row(0, named=True)
    both = t.filter(pl.col("case") == "overlapped").row(0, named=True)
    assert (alone["launches"], both["launches"]) == (int((~over & (sim.kind == 0)).sum()),
                                                     int(over.sum()))
    assert alone["SM Issue"] == pytest.approx(35, abs=1.5)
    assert both["SM Issue"] == pytest.approx(20, abs=1.5)
    assert both["Tensor Active"] == pytest.approx(30, abs=1.5)
    text = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(out), "--no-idle"],
                          capture_output=True, text=True, check=True).stdout
    assert "interference" in text and "overlapped" in text


def test_modality_says_the_slow_mode_is_the_overlapped_launches(tmp_path):
    """A kernel 60 % slower when an NCCL kernel runs beside it: --modality finds two modes,
    and says they are the overlapped launches."""
    from nsys2prv.analysis.activities import read_activities
    from nsys2prv.analysis.kernel_metrics import slow_launches_overlapped
    from nsys2prv.analysis.modality import kernel_modality

    sc = sr.RateScenario([sr.KernelKind("conv", (80, 35, 50, 30), 100_000, 110_000, 1),
                          sr.KernelKind("nccl", (12, 4, 0, 15), 300_000, 600_000, 1)],
                         streams=2, span=200_000_000, seed=8, gap_mean=150_000,
                         stream_kinds=[[0], [1]])
    sim = sr.simulate(sc)
    over = sr.overlapping(sim.start, sim.end, sim.kind, 0, 1)
    # the overlapped convs take 1.6x as long (the layout is kept: they end later)
    sim.end = np.where(over, sim.start + ((sim.end - sim.start) * 1.6).astype(np.int64),
                       sim.end)
    db = sr.write_export(sim, tmp_path / "modes.sqlite")
    out = tmp_path / "modes.prv"
    nsys2prv.translate(db, out)
    m = kernel_modality(read_activities(out))
    assert m.filter(pl.col("kernel") == "conv")["verdict"].item() == "two modes"
    o = slow_launches_overlapped(m, read_kernel_metrics(out)).row(0, named=True)
    assert o["kernel"] == "conv" and o["overlap_explains"]
    assert o["slow_overlapped"] == pytest.approx(1.0) and o["fast_overlapped"] < 0.1
    text = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(out), "--no-idle",
                           "--modality"], capture_output=True, text=True, check=True).stdout
    assert "the slow mode is the overlapped launches" in text


def test_folding_shows_a_kernels_tail(tmp_path):
    """A GEMM of 1-10 ms whose last fifth falls to half its rates: folded over its launches,
    the first eight bins hold its rate, the last ones less, down towards half."""
    sc = sr.RateScenario([sr.KernelKind("gemm", (85, 40, 70, 20), 1_000_000, 10_000_000, 1),
                          KINDS[1]], span=400_000_000, seed=9, tails={0: (0.8, 0.5)})
    sim = sr.simulate(sc)
    db = sr.write_export(sim, tmp_path / "tail.sqlite")
    out = tmp_path / "tail.prv"
    nsys2prv.translate(db, out)
    f = read_kernel_metrics(out).folding.filter((pl.col("kernel") == "gemm")
                                                 & (pl.col("metric") == "Tensor Active"))
    by_bin = dict(zip(f["bin"].to_list(), f["mean"].to_list()))
    assert sorted(by_bin) == list(range(10))
    for b in range(7):
        assert by_bin[b] == pytest.approx(70, abs=1.5)
    # bins 8 and 9: the profile's mean there (0.875 and 0.625 of the rate)
    assert by_bin[8] == pytest.approx(70 * 0.875, abs=3)
    assert by_bin[9] == pytest.approx(70 * 0.625, abs=3)


def test_spread_across_gpus_names_the_slow_gpu(tmp_path):
    """Four ranks, one GPU each; on the third, the convolution uses the tensor cores less
    (50 -> 30 %) and runs 1.4x longer: the seed's table shows the spread, and that GPU is
    named, with the longer duration."""
    exports = []
    for rank in range(4):
        conv = KINDS[3] if rank != 2 else sr.KernelKind("conv", (80, 30, 30, 30), 42_000,
                                                       420_000, 2)
        sc = sr.RateScenario([KINDS[0], KINDS[1], conv], span=100_000_000, seed=20 + rank)
        exports.append(sr.write_export(sr.simulate(sc), tmp_path / f"r{rank}.sqlite",
                                       pid=1000 + rank))
    out = tmp_path / "job.prv"
    nsys2prv.translate(exports, out)
    km = read_kernel_metrics(out)
    spread = km.spread.filter((pl.col("kernel") == "conv")
                              & (pl.col("metric") == "Tensor Active")).row(0, named=True)
    assert spread["devices"] == 4
    assert spread["max"] == pytest.approx(50, abs=1.5)
    assert spread["min"] == pytest.approx(30, abs=1.5)
    assert spread["avg"] == pytest.approx(45, abs=1.5)
    assert spread["avg_over_max"] == pytest.approx(0.9, abs=0.04)
    gemm = km.spread.filter((pl.col("kernel") == "gemm")
                            & (pl.col("metric") == "Tensor Active")).row(0, named=True)
    assert gemm["std"] < 1.0  # the same everywhere
    slow = km.outliers
    assert set(slow["device"].to_list()) == {d for d in km.fits["device"].unique().to_list()
                                            if "pid 1002" in d}
    assert set(slow["kernel"].to_list()) == {"conv"}
    assert slow.filter(pl.col("metric") == "Tensor Active")["dur_ratio"].item() > 1.2
    job = km.kernels.filter((pl.col("device") == "job") & (pl.col("kernel") == "gemm"))
    assert job["launches"].item() == km.kernels.filter(
        (pl.col("device") != "job") & (pl.col("kernel") == "gemm"))["launches"].sum()
    text = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(out), "--no-idle"],
                          capture_output=True, text=True, check=True).stdout
    assert "rates across GPUs" in text and "outlier: " in text and "pid 1002" in text


# -- paramedir on the shipped views gives the rates analyze prints ---------------------------

def _per_kernel_by_paramedir(table, km, device: str, metric: str) -> list[tuple]:
    """(column, paramedir's cell on the stream row, analyze's rate) of every kernel column:
    a column is a short name, so analyze's rates of the full names under it are averaged
    over their time on the GPU, as the histogram's Average value does."""
    rates = km.rates.filter((pl.col("device") == device) & (pl.col("metric") == metric)
                            & (pl.col("kind") == "kernel"))
    kernels = km.kernels.filter(pl.col("device") == device).select("kernel", "time")
    joined = rates.drop("time").join(kernels, on="kernel")
    want = (joined.group_by("short").agg(
        ((pl.col("rate") * pl.col("time")).sum() / pl.col("time").sum()).alias("rate")))
    want = dict(zip(want["short"].to_list(), want["rate"].to_list()))
    stream = [i for i, r in enumerate(table.rows) if " stream " in r]
    out = []
    for j, col in enumerate(table.columns):
        cells = [table.cells[i, j] for i in stream if table.cells[i, j] == table.cells[i, j]]
        if cells and col in want:
            out.append((col, cells[0], want[col]))
    return out


def test_stored_paramedir_tables_equal_analyze():
    """tests/data/paramedir/gpumetrics: paramedir's per-kernel tables of the shipped cfgs on
    the stored trace (a real A100 export) are the rates analyze finds on that trace."""
    from conftest import ROOT
    from paramedir import read_table

    d = ROOT / "tests" / "data" / "paramedir" / "gpumetrics"
    km = read_kernel_metrics(d / "trace" / "gpumetrics.prv.gz")
    device = km.fits["device"][0]
    checked = 0
    for stem, metric in (("analysis__tensor_per_kernel", "Tensor Active"),
                         ("hwcounters__sm_active_per_kernel", "SM Active"),
                         ("hwcounters__sm_issue_per_kernel", "SM Issue"),
                         ("hwcounters__dram_read_bandwidth_per_kernel", "DRAM Read Bandwidth")):
        for col, cell, rate in _per_kernel_by_paramedir(read_table(d / f"{stem}.txt"), km,
                                                         device, metric):
            assert cell == pytest.approx(rate, abs=0.005 + 1e-9), (stem, col)
            checked += 1
    assert checked == 4


def test_live_paramedir_on_aiprof_equals_analyze(aiprof, tmp_path):
    """Where paramedir is installed: its per-kernel tables on aiprof_opt2's trace give, for
    every kernel column, the rates analyze prints (to the two decimals the trace keeps)."""
    from paramedir import find_paramedir, read_table, run_cfg

    if find_paramedir() is None:
        pytest.skip("paramedir not installed: the stored outputs are checked instead")
    from conftest import ROOT

    out, km = aiprof
    device = km.fits["device"][0]
    checked = 0
    for cfg, metric in (("analysis/tensor_per_kernel.cfg", "Tensor Active"),
                        ("hwcounters/sm_issue_per_kernel.cfg", "SM Issue")):
        run = run_cfg(out, ROOT / "cfgs" / cfg, tmp_path / f"{metric}.txt")
        assert run.ok, run.stderr
        rows = _per_kernel_by_paramedir(read_table(tmp_path / f"{metric}.txt"), km, device,
                                        metric)
        for col, cell, rate in rows:
            # a column of several full names: their rates each rounded to 0.01, averaged
            assert cell == pytest.approx(rate, abs=0.011), (cfg, col)
        checked += len(rows)
    assert checked >= 20  # the short names paramedir prints whole (two tables)


def test_a_metric_missing_on_one_gpu(tmp_path):
    """Two ranks on GPUs of different metric sets: the second has no Tensor Active. Its fit
    says so (no sample of it), the other metrics are fitted on both, and analyze names it."""
    exports = []
    for rank, metrics in enumerate((sr.METRICS, tuple(m for m in sr.METRICS
                                                      if not m.startswith("Tensor")))):
        kinds = [sr.KernelKind(k.name, tuple(r for r, m in zip(k.rates, sr.METRICS)
                                             if m in metrics), k.shortest, k.longest,
                               k.weight) for k in KINDS[:4]]
        sc = sr.RateScenario(kinds, span=60_000_000, seed=30 + rank, metrics=metrics,
                             idle_rates=tuple(0.0 for _ in metrics))
        exports.append(sr.write_export(sr.simulate(sc), tmp_path / f"g{rank}.sqlite",
                                       pid=2000 + rank))
    out = tmp_path / "mixed.prv"
    nsys2prv.translate(exports, out)
    km = read_kernel_metrics(out)
    f = km.fits
    second = [d for d in f["device"].unique().to_list() if "pid 2001" in d][0]
    t = f.filter((pl.col("device") == second) & (pl.col("metric") == "Tensor Active"))
    assert t["samples"].item() == 0
    sm = f.filter((pl.col("device") == second) & (pl.col("metric") == "SM Active"))
    assert sm["r2_cv"].item() > 0.9
    text = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(out), "--no-idle"],
                          capture_output=True, text=True, check=True).stdout
    assert "not sampled on this GPU" in text and "Tensor Active" in text.split(
        "not sampled on this GPU")[1].splitlines()[0]
