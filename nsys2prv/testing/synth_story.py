"""A synthetic optimisation series whose story is known in closed form (`nsys2prv diff`'s
paragraph, read as an analyst reads it).

`story_run` writes one run of a PyTorch-like training loop, on each rank's main thread:

    Epoch e > Train > { Data loading, Batch k }      (NVTX push/pop, `epochs` x `batches`)

'Data loading' waits on the loader (an OS-runtime `pthread_cond_wait`, no GPU work).
'Batch k' copies the input to the device (a synchronous `cudaMemcpy` from pageable memory,
or from pinned memory, which is faster), launches the kernels of
KERNELS (each launch wrapped in its own 'op' range; the GEMMs' in 'gemm_op'), an
all-reduce across the ranks when there are several, and synchronises. The host spends
`launch_ns` in each launch call and `host_ns` between two (the launch rate); the GPU runs
each activity when it is launched and the previous one is done, so short kernels launched
more slowly than they run leave the GPU waiting for the host. Kernel durations get seeded
Gaussian noise; the all-reduce of every rank ends when the last rank's starts plus
NCCL_NS (the faster ranks wait in it).

`series` writes the runs of one optimisation story, each differing from the first by one
change (`CHANGES`); `Expected` holds every duration, so tests compare with closed forms.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .synth import ApiCall, Kernel, Memcpy, Nvtx, Osrt, Spec, Sync, write_export

US = 1_000
PID = 9100
STREAM = 7
T0 = 1_000 * US
LOAD_NS = 600 * US  # 'Data loading' of each batch
DELAY = 3 * US  # launch call end -> the activity may start
COPY_BYTES = 32 << 20
COPY_PAGEABLE_NS = 400 * US  # the input copy from pageable memory ...
COPY_PINNED_NS = 150 * US  # ... and from pinned memory
SYNC_RET = 2 * US  # GPU done -> cudaStreamSynchronize returns
TAIL = 3 * US  # sync return -> 'Batch k' pops
NCCL_NS = 80 * US
NCCL_NAME = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
GPU_NAME = "NVIDIA A100-SXM4-40GB"
LAUNCH_NS = 6 * US  # a launch call ...
HOST_NS = 4 * US  # ... and the host's time between two: 10 us a launch
NOISE_SD = 1.5 * US

# (demangled name, ns per launch, launches per batch) in launch order: two elementwise
# kernels of one short name (labels tell them apart), GEMMs that take most of the time
KERNELS = (
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AddFunctor<float>>"
     "(int, T2)", 14 * US, 8),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nt_align4>(T1::Params)",
     260 * US, 4),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::MulFunctor<float>>"
     "(int, T2)", 14 * US, 8),
    ("void at::native::reduce_kernel<(int)512, (int)1>(T1)", 40 * US, 2),
)
GEMM = KERNELS[1][0]
CHANGES = ("kernel_2x", "pinned", "launch_halved", "rank_slowed", "noise")


@dataclass
class Expected:
    """What one run holds (ns); arrays of steps are (ranks, steps)."""

    path: Path  # the export, or the directory of the rank exports
    ranks: int
    steps: int
    batch_start: np.ndarray
    batch_end: np.ndarray
    kernel_durations: dict[str, np.ndarray]  # demangled name -> (ranks, steps, launches)
    copy_ns: int
    pinned: bool
    gpu_idle_in_batch: np.ndarray  # (ranks, steps): device time in 'Batch k' without work
    launch_ns: int
    host_ns: int
    elapsed: int = 0  # the trace's length
    notes: list[str] = field(default_factory=list)

    @property
    def batch_duration(self) -> np.ndarray:
        return self.batch_end - self.batch_start

    @property
    def job_batch_duration(self) -> np.ndarray:
        """Step k of the job: the earliest push to the latest pop over the ranks."""
        return self.batch_end.max(axis=0) - self.batch_start.min(axis=0)

    def total(self, name: str) -> int:
        return int(self.kernel_durations[name].sum())


def short_of(name: str) -> str:
    from .synth_pairs import short_name

    return short_name(name)


def story_run(path: str | os.PathLike[str], *, epochs: int = 2, batches: int = 8,
              ranks: int = 1, seed: int = 0, noise_sd: float = NOISE_SD,
              scale: dict[str, float] | None = None, pinned: bool = False,
              launch_ns: int = LAUNCH_NS, host_ns: int = HOST_NS,
              rank_scale: dict[int, float] | None = None,
              gemm_launch: dict | None = None,
              layout: str = "3.17.1") -> Expected:
    """Write one run (see the module's docstring): `scale` multiplies a kernel's durations
    (after the noise, so runs of one seed differ by exactly that factor), `rank_scale`
    every kernel of a rank; `pinned` copies from pinned memory; `gemm_launch` gives the
    GEMM's launches `synth.Kernel`'s launch fields (grid, block, registers, ...)."""
    gemm_launch = gemm_launch or {}
    scale = scale or {}
    rank_scale = rank_scale or {}
    steps = epochs * batches
    path = Path(path)
    if ranks > 1:
        path.mkdir(parents=True, exist_ok=True)
    names = [n for n, _, k in KERNELS for _ in range(k)]
    base = np.array([d for _, d, k in KERNELS for _ in range(k)], dtype=np.float64)
    fac = np.array([scale.get(n, 1.0) for n in names])
    durs = np.empty((ranks, steps, len(names)), dtype=np.int64)
    for r in range(ranks):
        rng = np.random.default_rng([seed, r])
        noise = rng.normal(0.0, noise_sd, size=(steps, len(names))) if noise_sd else 0.0
        d = np.maximum(1, np.rint(base + noise))
        durs[r] = np.maximum(1, np.rint(d * fac * rank_scale.get(r, 1.0)))
    copy_ns = COPY_PINNED_NS if pinned else COPY_PAGEABLE_NS
    per_launch = launch_ns + host_ns
    # the timeline of every rank, step by step (ranks meet in the all-reduce)
    specs = [_new_spec(r, ranks) for r in range(ranks)]
    corr = [1] * ranks
    t = np.full(ranks, T0, dtype=np.int64)
    b_start = np.zeros((ranks, steps), np.int64)
    b_end = np.zeros((ranks, steps), np.int64)
    idle = np.zeros((ranks, steps), np.int64)
    epoch_start = np.zeros(ranks, np.int64)
    for k in range(steps):
        if k % batches == 0:
            epoch_start = t.copy()
        plans = []
        for r in range(ranks):
            spec, pid = specs[r], PID + r
            load0 = int(t[r])
            spec.nvtx.append(Nvtx(load0, load0 + LOAD_NS, pid, pid, "pushpop", "Data loading"))
            spec.osrt.append(Osrt(load0 + 1 * US, load0 + LOAD_NS - 1 * US, pid, pid,
                                  "pthread_cond_wait"))
            b0 = load0 + LOAD_NS + 1 * US
            b_start[r, k] = b0
            # the input copy, synchronous (the call returns after it) from either memory:
            # pinned memory only makes it faster
            c0 = b0 + 2 * US
            g0 = c0 + DELAY
            g1 = g0 + copy_ns
            call_end = g1 + 2 * US
            spec.api.append(ApiCall(c0, call_end, pid, pid, "cudaMemcpy_v3020", corr[r]))
            spec.memcpy.append(Memcpy(g0, g1, pid, 0, STREAM, corr[r], bytes=COPY_BYTES,
                                      copy_kind=1, src_kind=1 if pinned else 0, dst_kind=2))
            corr[r] += 1
            # the launches, one every per_launch ns; the GPU runs each when it can
            h = call_end + host_ns + np.arange(len(names), dtype=np.int64) * per_launch
            ready = h + launch_ns + DELAY
            d = durs[r, k]
            # s_i = max(ready_i, e_{i-1}): with e_i = s_i + d_i, s_i - C_{i-1} is a running
            # max of ready_j - C_{j-1} (C: cumulative durations), seeded by the copy's end
            cum = np.concatenate([[0], np.cumsum(d)])
            s = np.maximum.accumulate(np.maximum(ready - cum[:-1], g1)) + cum[:-1]
            e = s + d
            gaps = np.diff(np.concatenate([[g1], s])) - np.concatenate([[0], d[:-1]])
            idle[r, k] = int(gaps.sum()) + (g0 - b0)
            for i, n in enumerate(names):
                short = short_of(n)
                op = "gemm_op" if n == GEMM else "op"
                spec.nvtx.append(Nvtx(int(h[i]) - 1 * US, int(h[i]) + launch_ns + 1 * US, pid,
                                      pid, "pushpop", op))
                spec.api.append(ApiCall(int(h[i]), int(h[i]) + launch_ns, pid, pid,
                                        "cudaLaunchKernel_v7000", corr[r]))
                spec.kernels.append(Kernel(int(s[i]), int(e[i]), pid, 0, STREAM, short,
                                           corr[r], full_name=n,
                                           **(gemm_launch if n == GEMM else {})))
                corr[r] += 1
            plans.append((int(h[-1]) + per_launch, int(e[-1])))
        if ranks > 1:  # the all-reduce: each rank launches it, all end together
            nccl_start = [max(hl + launch_ns + DELAY, last) for hl, last in plans]
            done = max(nccl_start) + NCCL_NS
            for r in range(ranks):
                spec, pid = specs[r], PID + r
                hl = plans[r][0]
                spec.api.append(ApiCall(hl, hl + launch_ns, pid, pid, "cudaLaunchKernel_v7000",
                                        corr[r]))
                spec.kernels.append(Kernel(nccl_start[r], done, pid, 0, STREAM, NCCL_NAME,
                                           corr[r]))
                corr[r] += 1
                idle[r, k] += nccl_start[r] - plans[r][1]
                plans[r] = (hl + per_launch, done)
        for r in range(ranks):
            spec, pid = specs[r], PID + r
            sync0, gpu_done = plans[r]
            sync1 = max(sync0, gpu_done) + SYNC_RET
            spec.api.append(ApiCall(sync0, sync1, pid, pid, "cudaStreamSynchronize_v3020",
                                    corr[r]))
            spec.sync.append(Sync(sync0 + 1 * US, sync1 - 1 * US, pid, 0, STREAM, corr[r]))
            corr[r] += 1
            b_end[r, k] = sync1 + TAIL
            idle[r, k] += b_end[r, k] - gpu_done
            specs[r].nvtx.append(Nvtx(int(b_start[r, k]), int(b_end[r, k]), PID + r, PID + r,
                                      "pushpop", f"Batch {k % batches}"))
            t[r] = b_end[r, k] + 1 * US
        if k % batches == batches - 1:
            for r in range(ranks):
                pid = PID + r
                specs[r].nvtx.append(Nvtx(int(epoch_start[r]) - 2 * US, int(t[r]), pid, pid,
                                          "pushpop", f"Epoch {k // batches}"))
                specs[r].nvtx.append(Nvtx(int(epoch_start[r]) - 1 * US, int(t[r]) - 1, pid,
                                          pid, "pushpop", "Train"))
            t += 10 * US
    for r in range(ranks):
        write_export(path if ranks == 1 else path / f"rank{r}.sqlite", specs[r], layout)
    per = {n: durs[..., [j for j, x in enumerate(names) if x == n]] for n, _, _ in KERNELS}
    return Expected(path, ranks, steps, b_start, b_end, per, copy_ns, pinned, idle,
                    launch_ns, host_ns)


def _new_spec(rank: int, ranks: int) -> Spec:
    pid = PID + rank
    spec = Spec(host="story-node", env={"OMPI_COMM_WORLD_RANK": str(rank),
                                        "OMPI_COMM_WORLD_SIZE": str(ranks)})
    spec.processes = [(pid, "train.py")]
    spec.threads = [(pid, pid, "python")]
    spec.gpus = [(0, GPU_NAME)]
    return spec


def series(directory: str | os.PathLike[str], change: str, *, seed: int = 0,
           ranks: int | None = None, **kw) -> tuple[Expected, Expected]:
    """Two runs under `directory` (before, after) that differ by one change:

    kernel_2x      the GEMM made exactly 2x faster (same seed: the same noise)
    pinned         the input copies from pinned memory instead of pageable
    launch_halved  the host launches at half the rate (launch calls and the time between
                   them doubled): the short kernels leave the GPU waiting
    rank_slowed    2 ranks; every kernel of rank 1 50 % slower: rank 0 waits in the
                   all-reduce
    noise          the same program, another seed
    """
    if change not in CHANGES:
        raise ValueError(f"unknown change {change!r}; one of {', '.join(CHANGES)}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    n = ranks or (2 if change == "rank_slowed" else 1)
    ext = "" if n > 1 else ".sqlite"
    b_kw: dict = {"seed": seed}
    a_kw: dict = {"seed": seed}
    if change == "kernel_2x":
        a_kw["scale"] = {GEMM: 0.5}
    elif change == "pinned":
        a_kw["pinned"] = True
    elif change == "launch_halved":
        a_kw.update(launch_ns=2 * LAUNCH_NS, host_ns=2 * HOST_NS)
    elif change == "rank_slowed":
        a_kw["rank_scale"] = {1: 1.5}
    elif change == "noise":
        a_kw["seed"] = seed + 1
    before = story_run(d / f"before{ext}", ranks=n, **kw, **b_kw)
    after = story_run(d / f"after{ext}", ranks=n, **kw, **a_kw)
    return before, after
