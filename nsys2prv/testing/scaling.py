"""Synthetic GPU scaling runs with known useful times and known imbalance.

`gpu_run(n)` is one run of a program whose total device work W is split over n ranks (one
report per rank, one GPU each, one host, sessions started together) with weights 1..n, and
whose kernels get slower as it scales (slowdown 1 + 0.1 (n - 1)). Every number of the
efficiency model follows in closed form (`expected`), so tests compare exact values.

Each GPU is sampled (nsys 2023.4+ native GPU metrics) every `SAMPLE_PERIOD` from the first
record to its last kernel's end, with SM Active and Tensor Active constant per rank and falling
with the run's size (`metric_values`), so the time-weighted means over kernel time that
`analyze --scaling` reports have closed forms too (`expected_metrics`).
"""

from __future__ import annotations

from pathlib import Path

from .synth import ApiCall, Kernel, Spec, write_export
from .synth_metrics import MetricsSpec, Sample, add_native_metrics

WORK_NS = 120_000_000  # total device work of the reference run
KERNELS_PER_RANK = 10
KERNEL_START = 10_000  # ns after the session start: the first kernel of every rank
FIRST_RECORD = 1_000  # the first launch call: the trace starts there (time 0)
PID = 2000
SAMPLE_PERIOD = 1_000_000  # ns between GPU metric samples
METRIC_NAMES = ("SMs Active [Throughput %]", "Tensor Active [Throughput %]")


def slowdown(n: int) -> float:
    return 1 + 0.1 * (n - 1)


def rank_work(n: int) -> list[int]:
    """Device work (ns) of each rank of an n-rank run: weights 1..n of W x slowdown."""
    total = n * (n + 1) // 2
    k = KERNELS_PER_RANK  # whole ns per kernel
    return [round(WORK_NS * slowdown(n) * (i + 1) / total / k) * k for i in range(n)]


def metric_values(n: int, rank: int) -> tuple[int, int]:
    """(SM Active, Tensor Active) in percent, sampled on the GPU of `rank` in an n-rank run:
    the kernels use the GPU less as the run scales (and less on higher ranks)."""
    return 90 - 10 * (n - 1) - 5 * rank, 50 - 10 * (n - 1) - 2 * rank


def gpu_run(n: int, directory: str | Path, metrics: bool = True) -> list[Path]:
    """Write the n reports of one run; returns their paths (rank order). `metrics`: add
    GPU metric samples (see `metric_values`)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for rank, work in enumerate(rank_work(n)):
        spec = Spec(host="node-a", env={"OMPI_COMM_WORLD_RANK": str(rank),
                                        "OMPI_COMM_WORLD_SIZE": str(n)})
        pid = PID + rank
        spec.processes = [(pid, "app")]
        spec.threads = [(pid, pid, "app")]
        spec.gpus = [(0, "NVIDIA H100 80GB HBM3")]
        step = work // KERNELS_PER_RANK
        t = KERNEL_START
        for k in range(KERNELS_PER_RANK):
            spec.api.append(ApiCall(FIRST_RECORD + 100 * k, FIRST_RECORD + 50 + 100 * k, pid, pid,
                                    "cudaLaunchKernel_v7000", k + 1))
            # a grid that fills the GPU: the metrics' values are the GEMM's own
            spec.kernels.append(Kernel(t, t + step, pid, 0, 7, "gemm", k + 1,
                                       grid=(4096, 1, 1), block=(256, 1, 1)))
            t += step
        path = write_export(directory / f"rank{rank}.sqlite", spec)
        if metrics:
            sm, tensor = metric_values(n, rank)
            m = MetricsSpec(names={0: list(METRIC_NAMES)})
            # from the first record (the trace start) to the last kernel's end (the trace
            # end): the last sampling period (as long as the others) covers the rest
            m.samples = [Sample(at, 0, {METRIC_NAMES[0]: sm, METRIC_NAMES[1]: tensor})
                         for at in range(FIRST_RECORD, t + 1, SAMPLE_PERIOD)]
            add_native_metrics(path, m)
        out.append(path)
    return out


def expected(n: int, ref: int = 1) -> dict[str, float]:
    """The model's values for the n-rank run, from the generator's inputs alone (strong
    scaling, reference = the `ref`-rank run; TALP and NCCL-aware forms agree: no NCCL, no
    copies)."""
    def elapsed(m: int) -> int:  # from the first record to the end of the last kernel
        return KERNEL_START - FIRST_RECORD + max(rank_work(m))

    work = rank_work(n)
    T = elapsed(n)
    mean, top = sum(work) / n, max(work)
    cs = sum(rank_work(ref)) / sum(work)
    pe = mean / T
    return {"parallel": pe, "load_balance": mean / top, "communication": 1.0,
            "orchestration": top / T, "computational_scalability": cs, "global": pe * cs,
            "speedup": elapsed(ref) / T, "kernels": n * KERNELS_PER_RANK,
            "kernel_growth_ms": (sum(work) - sum(rank_work(ref))) / 1e6}


def expected_metrics(n: int) -> dict[str, float]:
    """Time-weighted means (percent) of SM Active and Tensor Active over the compute kernel
    time of the n-rank run: rank r's value weighs with its kernel time rank_work(n)[r]."""
    work = rank_work(n)
    return {key: sum(w * metric_values(n, r)[i] for r, w in enumerate(work)) / sum(work)
            for i, key in enumerate(("sm_active", "tensor_active"))}
