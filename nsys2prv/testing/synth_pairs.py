"""Synthetic before/after pairs of exports whose differences have a known size
(`nsys2prv diff`: every number of the comparison and its verdict has a closed form).

`iterations_run` writes the export of a training-like loop: `steps` instances of an NVTX
push/pop range (`step_range`) on the main thread of each rank. Inside a step, on every device
of the rank, the host issues one GPU activity after the other on stream 7:

    [memcpy HtoD]  kernel launches (dict order, `launches_per_step[name]` each)  [NCCL kernel]

then waits in cudaStreamSynchronize. The GPU runs them back to back with exactly `gap_ns` of
idle time between two consecutive activities (the host's time between launches); each launch
call ends DELAY ns before its activity starts. Kernel durations get N(0, noise_sd_ns) noise
from a seeded generator (rounded to ns, at least 1). The NCCL kernel is an all-reduce over
every GPU of the job: step k's all end together (the slower GPUs' wait is in the faster ones'
NCCL time), so with NCCL the ranks' steps coincide. Step timeline (ns after the step start):

    HOST0 + LAUNCH + DELAY   first activity starts
    + sum(dur) + (m-1) gap   last activity ends (m activities per device)
    + SYNC_RET               cudaStreamSynchronize returns (latest over devices)
    + TAIL                   the range pops; STEP_GAP ns later the next step pushes

`pair` writes two such runs that differ by a named change; `Expected` holds the exact inputs
(every duration), so tests compare with ==, not approximately.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .synth import ApiCall, Kernel, Memcpy, Nvtx, Spec, Sync, write_export

US = 1_000
PID = 8100
STREAM = 7
T0 = 1_000 * US  # first step start
HOST0 = 2 * US  # step start -> first call
LAUNCH = 4 * US  # a launch call (shorter when the previous activity is shorter)
DELAY = 3 * US  # launch call end -> activity start
SYNC_RET = 2 * US  # last activity end -> cudaStreamSynchronize returns
TAIL = 1 * US  # sync return -> range pop
STEP_GAP = 20 * US  # between steps (outside the range)
NCCL_NAME = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
GPU_NAME = "NVIDIA H100 80GB HBM3"
LAUNCH_CALL, MEMCPY_CALL, SYNC_CALL = ("cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020",
                                       "cudaStreamSynchronize_v3020")

KERNELS = {"gemm_kernel": 200 * US, "elementwise_kernel": 20 * US, "reduce_kernel": 50 * US}
LAUNCHES = {"gemm_kernel": 4, "elementwise_kernel": 8, "reduce_kernel": 2}
GAP_NS = 5 * US
NOISE_SD_NS = 2 * US  # the "noise" pair's default

# "kernel_renamed": before name -> after name (same duration and launches), plus one kernel
# only before and one only after
RENAMED = {"void gemm<float, 128>(const float *, float *, int)":
           "void gemm<float, 256>(const float *, float *, int)",
           "triton_poi_fused_add_0": "triton_poi_fused_add_1",
           "sm90_xmma_gemm_f16f16_128x64x32_tn": "sm90_xmma_gemm_f16f16_256x128x32_tn"}
RENAMED_DURATIONS = (150 * US, 15 * US, 80 * US)
REMOVED, ADDED = "legacy_softmax_kernel", "fused_softmax_kernel"
UNCHANGED = "elementwise_kernel"
CHANGES = ("kernel_2x", "gap_removed", "noise", "kernel_renamed", "none")

_TEMPLATE = re.compile(r"<[^<>]*>")
_PARAMS = re.compile(r"\([^()]*\)")


def short_name(name: str) -> str:
    """nsys' shortName of a demangled name: no return type, namespace, template arguments
    or parameters ('void ns::gemm<float>(int)' -> 'gemm')."""
    s = name
    while True:
        t = _PARAMS.sub("", _TEMPLATE.sub("", s))
        if t == s:
            break
        s = t
    s = s.strip().rsplit(" ", 1)[-1].rsplit("::", 1)[-1]
    return s or name


@dataclass
class Expected:
    """The exact contents of one run (ns). Arrays of steps are (ranks, steps); durations
    of a name are flat, ordered by rank, step, device, launch. NCCL kernels include their
    wait for the slowest GPU (with noise or several GPUs they exceed nccl_ns)."""

    paths: list[Path]
    steps: int
    ranks: int
    devices_per_rank: int
    step_range: str
    domain: str | None
    gap_ns: int
    noise_sd_ns: float
    seed: int
    kernel_durations: dict[str, np.ndarray]  # demangled name -> durations (incl. NCCL)
    memcpy_durations: np.ndarray
    memcpy_bytes: int
    step_start: np.ndarray
    step_end: np.ndarray
    gpu_busy_ns: np.ndarray  # activity time in each step, summed over the rank's devices
    gaps_per_step: int  # idle gaps of gap_ns between activities, per device and step
    nccl_name: str | None = None
    renamed: dict[str, str] = field(default_factory=dict)  # before -> after ("kernel_renamed")
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def step_duration(self) -> np.ndarray:
        return self.step_end - self.step_start

    @property
    def gpu_idle_ns(self) -> np.ndarray:
        """Device time in each step with nothing running, summed over the rank's devices."""
        return self.devices_per_rank * self.step_duration - self.gpu_busy_ns

    @property
    def job_step_duration(self) -> np.ndarray:
        """Step k of the job: from the earliest push to the latest pop over the ranks."""
        return self.step_end.max(axis=0) - self.step_start.min(axis=0)

    @property
    def trace_gpu_idle_ns(self) -> np.ndarray:
        """Per rank: device time with nothing running from the first step's push to the last
        step's pop (the report's span), summed over the rank's devices."""
        span = self.step_end[:, -1] - self.step_start[:, 0]
        return self.devices_per_rank * span - self.gpu_busy_ns.sum(axis=1)

    @property
    def path(self) -> Path:
        """What to give the translator: the export, or the directory of the rank exports."""
        return self.paths[0] if self.ranks == 1 else self.paths[0].parent

    def short_names(self) -> dict[str, str]:
        return {n: short_name(n) for n in self.kernel_durations}

    def stats(self, name: str, ddof: int = 1) -> dict[str, float]:
        """count/total/mean/median/min/max/std of a kernel name's durations (std with
        `ddof`; polars' default is 1)."""
        d = self.kernel_durations[name]
        return {"count": int(d.size), "total": int(d.sum()), "mean": float(d.mean()),
                "median": float(np.median(d)), "min": int(d.min()), "max": int(d.max()),
                "std": float(d.std(ddof=ddof)) if d.size > ddof else 0.0}


def _excl_cumsum(a: np.ndarray, axis: int) -> np.ndarray:
    c = np.cumsum(a, axis=axis)
    return c - a


def _durations(ranks: int, steps: int, devs: int, base: np.ndarray, scale: np.ndarray,
               is_kernel: np.ndarray, noise_sd_ns: float, seed: int) -> np.ndarray:
    """(ranks, steps, devs, m) activity durations: base + seeded noise on kernels, rounded,
    at least 1, then scaled (so a scaled run's kernels are exactly factor x its twin's)."""
    m = base.size
    out = np.empty((ranks, steps, devs, m), dtype=np.int64)
    for r in range(ranks):  # one generator per rank: a rank's draws do not depend on `ranks`
        rng = np.random.default_rng([seed, r])
        noise = rng.normal(0.0, noise_sd_ns, size=(steps, devs, m)) if noise_sd_ns else 0.0
        d = np.maximum(1, np.rint(base + noise * is_kernel))
        out[r] = np.maximum(1, np.rint(d * scale))
    return out


def _timeline(dur: np.ndarray, gap_ns: int, nccl: bool) -> tuple[np.ndarray, ...]:
    """(durations, activity starts relative to the step, sync returns relative to the step,
    step starts, step ends) for (ranks, steps, devs, m) durations. With `nccl` the last
    activity is an all-reduce over every GPU of the job: all of step k's end together, at
    the latest over the GPUs (its duration includes the wait), so steps start together."""
    rel = HOST0 + LAUNCH + DELAY + _excl_cumsum(dur + gap_ns, axis=3)
    if nccl:
        dur = dur.copy()
        done = (rel[..., -1] + dur[..., -1]).max(axis=(0, 2))  # (steps,)
        dur[..., -1] = done[None, :, None] - rel[..., -1]
    sync_end = rel[..., -1] + dur[..., -1] + SYNC_RET  # (ranks, steps, devs)
    length = sync_end.max(axis=2) + TAIL
    s0 = T0 + _excl_cumsum(length + STEP_GAP, axis=1)
    return dur, rel, sync_end, s0, s0 + length


def _rank_spec(rank: int, ranks: int, names: list[str | None], dur: np.ndarray,
               rel: np.ndarray, sync_end: np.ndarray, s0: np.ndarray, s1: np.ndarray,
               step_range: str, domain: str | None, memcpy_bytes: int) -> Spec:
    """The spec of one rank from its (steps, devs, m) slice of the timeline."""
    steps, devs, m = dur.shape
    start = s0[:, None, None] + rel
    end = start + dur
    step = np.diff(start, axis=2, prepend=start[..., :1] - LAUNCH)
    call_end = start - DELAY
    call_start = call_end - np.minimum(LAUNCH, step)
    sync_start = call_end[..., -1]
    sync_stop = s0[:, None] + sync_end
    corr = 1 + np.arange(steps * devs * (m + 1)).reshape(steps, devs, m + 1)
    pid = PID + rank
    tid = np.broadcast_to(pid + np.arange(devs)[None, :, None], start.shape)
    dev = np.broadcast_to(np.arange(devs)[None, :, None], start.shape)
    slot = np.broadcast_to(np.arange(m), start.shape)

    spec = Spec(host="pair-node", env={"OMPI_COMM_WORLD_RANK": str(rank),
                                       "OMPI_COMM_WORLD_SIZE": str(ranks)})
    spec.processes = [(pid, "train.py")]
    spec.threads = [(pid, pid, "python")] + [(pid, pid + d, f"launcher-{d}")
                                             for d in range(1, devs)]
    spec.gpus = [(d, GPU_NAME) for d in range(devs)]
    rows = zip(call_start.ravel().tolist(), call_end.ravel().tolist(), start.ravel().tolist(),
               end.ravel().tolist(), tid.ravel().tolist(), dev.ravel().tolist(),
               slot.ravel().tolist(), corr[..., :m].ravel().tolist())
    for cs, ce, ks, ke, t, d, j, c in rows:
        name = names[j]
        spec.api.append(ApiCall(cs, ce, pid, t, MEMCPY_CALL if name is None else LAUNCH_CALL, c))
        if name is None:
            spec.memcpy.append(Memcpy(ks, ke, pid, d, STREAM, c, bytes=memcpy_bytes,
                                      copy_kind=1, src_kind=1, dst_kind=2))
        else:
            spec.kernels.append(Kernel(ks, ke, pid, d, STREAM, short_name(name), c,
                                       full_name=name))
    sync_rows = zip(sync_start.ravel().tolist(), sync_stop.ravel().tolist(),
                    tid[..., 0].ravel().tolist(), dev[..., 0].ravel().tolist(),
                    corr[..., m].ravel().tolist())
    for ss, se, t, d, c in sync_rows:
        spec.api.append(ApiCall(ss, se, pid, t, SYNC_CALL, c))
        spec.sync.append(Sync(ss, se, pid, d, STREAM, c, sync_type=3))
    spec.nvtx = [Nvtx(a, e, pid, pid, "pushpop", step_range, domain)
                 for a, e in zip(s0.tolist(), s1.tolist())]
    return spec


def iterations_run(path: str | os.PathLike[str], *, steps: int = 20, ranks: int = 1,
                   devices_per_rank: int = 1, kernels: dict[str, int] | None = None,
                   launches_per_step: dict[str, int] | None = None, gap_ns: int = GAP_NS,
                   noise_sd_ns: float = 0, seed: int = 0, step_range: str = "train_step",
                   domain: str | None = None, nccl_ns: int = 0, memcpy_ns: int = 0,
                   memcpy_bytes: int = 64 << 20, scale: dict[str, float] | None = None,
                   layout: str = "3.17.1") -> Expected:
    """Write one run (see the module doc): an export at `path`, or with ranks > 1 the
    directory `path` holding rank{r}.sqlite. `kernels`: demangled name -> ns per launch;
    `scale`: name -> factor applied after the noise (so a scaled side's durations are
    exactly factor x the unscaled side's with the same seed); `nccl_ns`/`memcpy_ns` > 0 add
    an NCCL kernel at the end / an HtoD copy at the start of every step."""
    kernels = dict(KERNELS if kernels is None else kernels)
    launches = LAUNCHES if launches_per_step is None else launches_per_step
    scale = scale or {}
    names: list[str | None] = [None] if memcpy_ns else []
    for n in kernels:
        names += [n] * launches.get(n, 1)
    if nccl_ns:
        names.append(NCCL_NAME)
    durs = {**kernels, NCCL_NAME: nccl_ns, None: memcpy_ns}
    base = np.array([durs[n] for n in names], dtype=np.float64)
    sc = np.array([scale.get(n, 1.0) if n else 1.0 for n in names])
    is_kernel = np.array([n is not None for n in names], dtype=np.float64)
    path = Path(path)
    if ranks > 1:
        path.mkdir(parents=True, exist_ok=True)
    dur = _durations(ranks, steps, devices_per_rank, base, sc, is_kernel, noise_sd_ns, seed)
    dur, rel, sync_end, s0, s1 = _timeline(dur, gap_ns, bool(nccl_ns))
    out = []
    for r in range(ranks):
        spec = _rank_spec(r, ranks, names, dur[r], rel[r], sync_end[r], s0[r], s1[r],
                          step_range, domain, memcpy_bytes)
        out.append(write_export(path if ranks == 1 else path / f"rank{r}.sqlite", spec,
                                layout))
    per = {n: dur[..., [j for j, x in enumerate(names) if x == n]].ravel()
           for n in dict.fromkeys(names) if n is not None}
    return Expected(paths=out, steps=steps, ranks=ranks, devices_per_rank=devices_per_rank,
                    step_range=step_range, domain=domain, gap_ns=gap_ns,
                    noise_sd_ns=noise_sd_ns, seed=seed, kernel_durations=per,
                    memcpy_durations=dur[..., 0].ravel() if memcpy_ns
                    else np.zeros(0, np.int64), memcpy_bytes=memcpy_bytes,
                    step_start=s0, step_end=s1, gpu_busy_ns=dur.sum(axis=(2, 3)),
                    gaps_per_step=len(names) - 1,
                    nccl_name=NCCL_NAME if nccl_ns else None)


def pair(directory: str | os.PathLike[str], change: str, *, seed: int = 0, steps: int = 20,
         ranks: int = 1, target: str = "gemm_kernel", noise_sd_ns: float | None = None,
         **kw) -> tuple[Path, Path, Expected, Expected]:
    """Write before/after runs under `directory` that differ by `change` (CHANGES):

    kernel_2x       `target` takes exactly 2x as long in after (same seed, same noise)
    gap_removed     after has gap_ns = 0: GPU idle per step drops by gaps_per_step x gap_ns
                    per device
    noise           same program, noise of sd `noise_sd_ns` (default NOISE_SD_NS), seeds
                    seed and seed + 1: the true change is zero
    kernel_renamed  RENAMED's names differ only by template arguments / launch configuration
                    / generated suffix; REMOVED only before, ADDED only after
    none            the same program and seed: identical files

    Returns (before path, after path, expected before, expected after); a path is the
    export, or the directory of rank exports when ranks > 1. `kw` goes to iterations_run."""
    if change not in CHANGES:
        raise ValueError(f"unknown change {change!r}; one of {', '.join(CHANGES)}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ext = "" if ranks > 1 else ".sqlite"
    sd = (NOISE_SD_NS if change == "noise" else 0) if noise_sd_ns is None else noise_sd_ns
    common = dict(steps=steps, ranks=ranks, noise_sd_ns=sd, **kw)
    b_kw: dict = {"seed": seed}
    a_kw: dict = {"seed": seed}
    if change == "kernel_2x":
        a_kw["scale"] = {target: 2}
    elif change == "gap_removed":
        b_kw["gap_ns"] = common.pop("gap_ns", GAP_NS)
        a_kw["gap_ns"] = 0
    elif change == "noise":
        a_kw["seed"] = seed + 1
    elif change == "kernel_renamed":
        before = dict(zip(RENAMED, RENAMED_DURATIONS)) | {UNCHANGED: KERNELS[UNCHANGED],
                                                          REMOVED: 30 * US}
        after = dict(zip(RENAMED.values(), RENAMED_DURATIONS)) | {UNCHANGED: KERNELS[UNCHANGED],
                                                                  ADDED: 30 * US}
        common.pop("kernels", None)
        b_kw["kernels"], a_kw["kernels"] = before, after
    eb = iterations_run(directory / f"before{ext}", **common, **b_kw)
    ea = iterations_run(directory / f"after{ext}", **common, **a_kw)
    if change == "kernel_renamed":
        for e in (eb, ea):
            e.renamed, e.added, e.removed = dict(RENAMED), [ADDED], [REMOVED]
    return eb.path, ea.path, eb, ea
