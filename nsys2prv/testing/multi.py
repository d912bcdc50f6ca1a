"""Synthetic multi-rank jobs: one export per rank, on several hosts whose clocks disagree.

Every rank records in its own report: its session starts at a different true time, and the
host's clock is off by a known error, which the recorded UTC session start carries (local
times, measured from the session start on the same clock, are exact). All ranks end MPI_Init
(NVTX domain "MPI", as nsys up to 2022.x stores MPI) at the same true moment and run an NCCL
kernel that ends at the same true moment, so alignment can be checked exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from .synth import ApiCall, Kernel, Nvtx, Spec

TRUE_BASE = 1_700_000_000_000_000_000  # true UTC ns of the job start
MPI_INIT_END = 50_000_000  # true ns after TRUE_BASE at which every MPI_Init returns
NCCL_END = 80_000_000


@dataclass
class RankInfo:
    rank: int
    host: str
    session_delay: int  # true ns after TRUE_BASE when this rank's session starts
    clock_error: int  # how far this host's clock is ahead of true time


def job(ranks: int = 4, hosts: tuple[str, ...] = ("node-a", "node-b"),
        clock_errors: dict[str, int] | None = None, pid: int = 1000
        ) -> list[tuple[RankInfo, Spec]]:
    """(info, spec) per rank; hosts get consecutive ranks, every process has the same pid."""
    clock_errors = clock_errors or {h: i * 3_700_000 for i, h in enumerate(hosts)}
    # sessions start 1 ms apart (closer in a job of more than 8 ranks: all in the first 9 ms)
    step = min(1_000_000, 8_000_000 // ranks)
    out = []
    for r in range(ranks):
        host = hosts[r * len(hosts) // ranks]
        info = RankInfo(r, host, session_delay=step * (r + 1) + 137 * r,
                        clock_error=clock_errors[host])
        out.append((info, _rank_spec(info, pid, ranks)))
    return out


def _rank_spec(info: RankInfo, pid: int, world: int) -> Spec:
    def local(true_ns: int) -> int:  # ns after this rank's session start
        return true_ns - info.session_delay

    spec = Spec(host=info.host, session_start_ns=TRUE_BASE + info.session_delay + info.clock_error,
                env={"OMPI_COMM_WORLD_RANK": str(info.rank),
                     "OMPI_COMM_WORLD_SIZE": str(world)})
    spec.processes = [(pid, "app")]
    spec.threads = [(pid, pid, "app")]
    spec.gpus = [(0, "NVIDIA H100 80GB HBM3")]
    # ranks enter MPI_Init at different times, 1 ms apart (closer in a job of more than 30
    # ranks, so that every rank enters after its session start and before MPI_INIT_END)
    init_start = 10_000_000 + min(1_000_000, 30_000_000 // world) * info.rank
    spec.nvtx.append(Nvtx(local(init_start), local(MPI_INIT_END), pid, pid, "pushpop",
                          "MPI_Init", "MPI"))
    corr = 1
    t = MPI_INIT_END + 1_000_000
    for i in range(5):  # some compute
        spec.api.append(ApiCall(local(t), local(t + 5_000), pid, pid, "cudaLaunchKernel", corr))
        spec.kernels.append(Kernel(local(t + 10_000), local(t + 2_000_000), pid, 0, 7,
                                   "compute_kernel", corr))
        corr += 1
        t += 3_000_000
    # an all-reduce that every rank enters at its own time but leaves together
    enter = t + min(1_000_000, 10_000_000 // world) * info.rank  # before NCCL_END
    spec.api.append(ApiCall(local(enter), local(enter + 5_000), pid, pid, "cudaLaunchKernel",
                            corr))
    spec.kernels.append(Kernel(local(enter + 10_000), local(NCCL_END), pid, 0, 13,
                               "ncclDevKernel_AllReduce_Sum_f32_RING_LL", corr))
    spec.nvtx.append(Nvtx(local(NCCL_END + 1_000_000), local(NCCL_END + 2_000_000), pid, pid,
                          "pushpop", "MPI_Finalize", "MPI"))
    return spec
