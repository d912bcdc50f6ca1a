"""GPU metric samples made from known per-kernel rates, for the sample-mixing model's tests.

A scenario gives kernel names with their true rate of each metric and their durations, how
many streams run at once, idle gaps, the sampling frequency (with jitter) and the noise.
`simulate` lays the kernels out on the streams and writes each sample in closed form, as
the model says the GPU does: the time-weighted sum over its sampling period of the rates of
what ran (concurrent kernels add up), the idle rate where nothing ran, plus Gaussian noise,
clipped to the metric's range and, like nsys' native export, rounded to integers.
`write_export` turns a simulation into a real-layout export (kernels with their CUDA calls,
native GPU metrics) for end-to-end tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .synth import ApiCall, Kernel, Spec, write_export
from .synth_metrics import MetricsSpec, Sample, add_native_metrics

METRICS = ("SMs Active [Throughput %]", "SM Issue [Throughput %]",
           "Tensor Active [Throughput %]", "DRAM Read Bandwidth [Throughput %]")


@dataclass
class KernelKind:
    """A kernel name, its true rate of each metric (percent) and its durations (ns,
    log-uniform in [shortest, longest])."""

    name: str
    rates: tuple[float, ...]
    shortest: int
    longest: int
    weight: float = 1.0  # how often it is picked
    # its launch (the export's grid and block): 4096 blocks of 256 threads fill an A100, so
    # the grid caps none of the rates; a small grid caps SM Active (blocks / 108 SMs)
    blocks: int = 4096
    threads: int = 256
    registers: int = 32


@dataclass
class RateScenario:
    kinds: list[KernelKind]
    streams: int = 1
    frequency: float = 10_000.0  # samples per second
    jitter: float = 0.05  # sampling interval jitter, fraction of the interval (uniform)
    noise: float = 0.5  # standard deviation of the noise added to each sample
    gap_mean: int = 20_000  # mean idle gap between two kernels of a stream (ns, exponential)
    span: int = 200_000_000  # ns of run
    idle_rates: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    metrics: tuple[str, ...] = METRICS
    quantise: bool = True
    seed: int = 1
    # the kinds each stream draws from (indices into kinds; None: all of them on every
    # stream): concurrent kernels add up, so streams meant to run at once should not sum
    # past 100
    stream_kinds: list[list[int]] | None = None
    # (start, end, kind index, rates): kernels of that kind starting in [start, end) run at
    # these rates instead (a step whose kernels behave differently)
    changes: list[tuple[int, int, int, tuple[float, ...]]] = field(default_factory=list)
    # (kind k, kind j, rates): kernels of kind k that overlap a kernel of kind j run at these
    # rates instead (interference: a GEMM beside an NCCL kernel gets fewer SMs)
    interference: list[tuple[int, int, tuple[float, ...]]] = field(default_factory=list)
    # kind index -> (from, to): the kind's rates are full up to `from` of its duration, then
    # fall linearly to `to` x rate at its end (a tail: the last wave of thread blocks)
    tails: dict[int, tuple[float, float]] = field(default_factory=dict)
    # kind index -> kind index: every kernel of the first is followed at once (after
    # `follow_gap` ns) by one of the second on its stream: the second never runs apart
    followers: dict[int, int] = field(default_factory=dict)
    follow_gap: int = 1_000
    # the samples lag the kernels' timestamps by this many ns (what the GPU did in a period
    # is what ran `lag` ns earlier): the leader's last microseconds land in its follower's
    # share of a period, as on real exports, so a model without the grids' bounds hands the
    # follower part of its leader's activity
    lag: int = 0


@dataclass
class Simulation:
    scenario: RateScenario
    start: np.ndarray  # kernels, sorted by start
    end: np.ndarray
    stream: np.ndarray
    kind: np.ndarray  # index into scenario.kinds
    times: np.ndarray  # sample times
    values: np.ndarray  # (samples x metrics)
    truth: dict[str, tuple[float, ...]] = field(default_factory=dict)


def simulate(sc: RateScenario) -> Simulation:
    rng = np.random.default_rng(sc.seed)
    starts, ends, streams, kinds = [], [], [], []
    for s in range(sc.streams):
        pool = (sc.stream_kinds[s] if sc.stream_kinds is not None
                else list(range(len(sc.kinds))))
        weights = np.array([sc.kinds[k].weight for k in pool], dtype=np.float64)
        weights /= weights.sum()
        t = int(rng.integers(0, 50_000))
        while t < sc.span:
            k = pool[int(rng.choice(len(pool), p=weights))]
            kk = sc.kinds[k]
            d = int(np.exp(rng.uniform(np.log(kk.shortest), np.log(kk.longest))))
            starts.append(t)
            ends.append(t + d)
            streams.append(s)
            kinds.append(k)
            if k in sc.followers:  # its follower, at once
                j = sc.followers[k]
                kj = sc.kinds[j]
                t += d + sc.follow_gap
                d = int(np.exp(rng.uniform(np.log(kj.shortest), np.log(kj.longest))))
                starts.append(t)
                ends.append(t + d)
                streams.append(s)
                kinds.append(j)
            t += d + int(rng.exponential(sc.gap_mean))
    start = np.array(starts, dtype=np.int64)
    end = np.array(ends, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    stream = np.array(streams, dtype=np.int64)[order]
    kind = np.array(kinds, dtype=np.int64)[order]
    interval = 1e9 / sc.frequency
    n = int(sc.span / interval) + 2
    steps = interval * (1 + rng.uniform(-sc.jitter, sc.jitter, n))
    times = np.round(np.concatenate([[0.0], np.cumsum(steps)[:-1]])).astype(np.int64)
    values = _closed_form(sc, start + sc.lag, end + sc.lag, kind, times)
    values += rng.normal(0, sc.noise, values.shape)
    values = np.clip(values, 0, 100)
    if sc.quantise:
        values = np.round(values)
    truth = {k.name: k.rates for k in sc.kinds}
    return Simulation(sc, start, end, stream, kind, times, values, truth)


def _closed_form(sc: RateScenario, start: np.ndarray, end: np.ndarray, kind: np.ndarray,
                 times: np.ndarray) -> np.ndarray:
    """Each period's value: sum over kernels of overlap / period x rate, plus the idle
    share (the part of the period no kernel covers) x the idle rate."""
    ps = times[:-1]
    pe = times[1:]
    length = (pe - ps).astype(np.float64)
    rates = np.array([k.rates for k in sc.kinds], dtype=np.float64)
    own = rates[kind]  # each kernel's rates
    for lo, hi, k, r in sc.changes:
        own[(kind == k) & (start >= lo) & (start < hi)] = r
    for k, j, r in sc.interference:
        own[overlapping(start, end, kind, k, j)] = r
    M = rates.shape[1]
    out = np.zeros((ps.size, M))
    covered = np.zeros(ps.size)
    first = np.searchsorted(pe, start, side="right")
    last = np.searchsorted(ps, end, side="left") - 1
    for i in range(start.size):  # a test generator: clarity over speed
        tail = sc.tails.get(int(kind[i]))
        for p in range(first[i], last[i] + 1):
            a, b = max(start[i], ps[p]), min(end[i], pe[p])
            if b <= a:
                continue
            if tail is None:
                out[p] += (b - a) / length[p] * own[i]
            else:  # the mean of the profile over [a, b), on 64 points
                x = (np.linspace(a, b, 65)[:-1] + (b - a) / 128 - start[i]) / (end[i] - start[i])
                f = np.where(x < tail[0], 1.0, 1.0 - (1.0 - tail[1]) * (x - tail[0])
                             / (1.0 - tail[0]))
                out[p] += (b - a) / length[p] * own[i] * f.mean()
    # the union of the kernels, for the idle share
    order = np.argsort(start)
    s, e = start[order], end[order]
    us, ue = [], []
    for a, b in zip(s.tolist(), e.tolist()):
        if us and a <= ue[-1]:
            ue[-1] = max(ue[-1], b)
        else:
            us.append(a)
            ue.append(b)
    for a, b in zip(us, ue):
        lo = np.searchsorted(pe, a, side="right")
        hi = np.searchsorted(ps, b, side="left") - 1
        for p in range(lo, hi + 1):
            covered[p] += max(0, min(b, pe[p]) - max(a, ps[p]))
    idle = np.clip(1 - covered / length, 0, 1)
    out += idle[:, None] * np.array(sc.idle_rates, dtype=np.float64)[None, :]
    # the last sample's period: as long as the one before, nothing after the last time
    return np.vstack([out, np.array(sc.idle_rates, dtype=np.float64)[None, :]])


def overlapping(start: np.ndarray, end: np.ndarray, kind: np.ndarray, k: int, j: int
                ) -> np.ndarray:
    """Which kernels of kind k overlap a kernel of kind j."""
    js, je = start[kind == j], end[kind == j]
    out = np.zeros(start.size, dtype=bool)
    for i in np.flatnonzero(kind == k):
        out[i] = bool(((js < end[i]) & (je > start[i])).any())
    return out


def write_export(sim: Simulation, path: str | os.PathLike[str], pid: int = 4242,
                 device: int = 0) -> Path:
    """A real-layout export of the simulation: one process, one GPU, its kernels on streams
    7, 8, ... each launched by a CUDA call, native GPU metrics."""
    from . import synth

    sc = sim.scenario
    spec = Spec(processes=[(pid, "trainer")], threads=[(pid, pid, "trainer")],
                gpus=[(device, "NVIDIA A100-SXM4-80GB")])
    spec.kernels = [Kernel(int(s), int(e), pid, device, 7 + int(st), kk.name,
                           correlation=i + 1, grid=(kk.blocks, 1, 1),
                           block=(kk.threads, 1, 1), registers=kk.registers)
                    for i, (s, e, st, kk) in enumerate(zip(
                        sim.start, sim.end, sim.stream, (sc.kinds[int(k)] for k in sim.kind)))]
    spec.api = [ApiCall(int(s) - 3000, int(s) - 1000, pid, pid, "cudaLaunchKernel", i + 1)
                for i, s in enumerate(sim.start)]
    path = Path(path)
    synth.write_export(path, spec)
    names = list(sc.metrics)
    m = MetricsSpec(names={device: names})
    m.samples = [Sample(int(t), device, {n: float(v) for n, v in zip(names, row)})
                 for t, row in zip(sim.times, sim.values)]
    add_native_metrics(path, m)
    return path
