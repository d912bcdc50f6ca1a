"""Synthetic exports with dependencies whose lines are known in closed form.

* `streams_export`: one process, one thread, streams A and B: a stream wait on an event whose
  record is traced (CUDA_EVENT), one whose record is not (inferred from the cudaEventRecord
  call), one on a stream without work; a stream sync, a context sync, an event sync and an
  event query that finds its event pending. `STREAM_LINES` / `HOST_LINES` are the lines the
  trace must hold, `COUNTS` the summary.
* `nccl_job`: one export per rank of an all-reduce loop on one communicator (payloads as
  JSON, as NCCL's NVTX ranges carry them): every instance's kernels end together; rank
  `late` starts each of its kernels `delay` later than the others.
* `mpi_job`: one export per rank of blocking collectives on MPI_COMM_WORLD, rank `late`
  calling each `delay` later than the others, which all return when it arrives.

Times are in ns on each report's own clock; all reports share one session start.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .synth import ApiCall, CudaEvent, Kernel, Nvtx, Spec, Sync, global_tid, write_export
from .synth_mpi import MpiCall, add_mpi, world

US = 1000
PID, TID = 4242, 4242
A, B, EMPTY = 7, 13, 99  # streams: A and B have work, EMPTY none


@dataclass(frozen=True, order=True)
class Line:
    """An expected line: (stream or "host", time) -> (stream or "host", time), its tag."""

    send_row: str
    send: int
    recv_row: str
    recv: int
    tag: int


def streams_spec() -> Spec:
    """See the module docstring; every time is in µs * US."""
    spec = Spec(processes=[(PID, "app")], threads=[(PID, TID, "main")], gpus=[(0, "GPU")])
    corr = iter(range(1, 100))

    def call(start: int, end: int, name: str) -> int:
        c = next(corr)
        spec.api.append(ApiCall(start * US, end * US, PID, TID, name, c))
        return c

    def kernel(launch: int, start: int, end: int, stream: int, name: str) -> None:
        c = call(launch, launch + 1, "cudaLaunchKernel_v7000")
        spec.kernels.append(Kernel(start * US, end * US, PID, 0, stream, name, c))

    # 1. traced record: K1 on A, record e1 on A (CUDA_EVENT row), B waits, K2 on B
    kernel(10, 20, 50, A, "k1")
    spec.cuda_events.append(CudaEvent(PID, 0, A, call(13, 14, "cudaEventRecord_v3020"), 1))
    spec.sync.append(Sync(15 * US, 16 * US, PID, 0, B, call(15, 16, "cudaStreamWaitEvent_v3020"),
                          sync_type=2, event=1))
    kernel(17, 55, 70, B, "k2")
    # 2. record not traced (event 2): K3 on A, the record call, B waits, K4 on B
    kernel(30, 80, 100, A, "k3")
    call(32, 33, "cudaEventRecord_v3020")
    spec.sync.append(Sync(34 * US, 35 * US, PID, 0, B, call(34, 35, "cudaStreamWaitEvent_v3020"),
                          sync_type=2, event=2))
    kernel(36, 105, 120, B, "k4")
    # 3. a wait on a stream that never runs anything: no line
    spec.sync.append(Sync(40 * US, 41 * US, PID, 0, EMPTY,
                          call(40, 41, "cudaStreamWaitEvent_v3020"), sync_type=2, event=2))
    # 4. stream sync on A while K5 runs: A's last work ending by the sync's end is K5
    kernel(121, 125, 145, A, "k5")
    spec.sync.append(Sync(131 * US, 149 * US, PID, 0, A,
                          call(130, 150, "cudaStreamSynchronize_v3020"), sync_type=3))
    # 5. context sync while K6 runs on B
    kernel(152, 155, 190, B, "k6")
    spec.sync.append(Sync(161 * US, 199 * US, PID, 0, None,
                          call(160, 200, "cudaDeviceSynchronize_v3020"), sync_type=4))
    # 6. event sync on e1 (recorded after K1): K1's end
    spec.sync.append(Sync(210 * US, 211 * US, PID, 0, None,
                          call(210, 212, "cudaEventSynchronize_v3020"), sync_type=1, event=1))
    # 7. an event query of e3 (recorded after K7) while K7 still runs: no line
    kernel(290, 300, 400, A, "k7")
    spec.cuda_events.append(CudaEvent(PID, 0, A, call(292, 293, "cudaEventRecord_v3020"), 3))
    spec.sync.append(Sync(310 * US, 311 * US, PID, 0, None,
                          call(310, 312, "cudaEventQuery_v3020"), sync_type=1, event=3))
    return spec


STREAM_LINES = [Line("A", 50 * US, "B", 55 * US, 67_200_010),
                Line("A", 100 * US, "B", 105 * US, 67_200_011)]
HOST_LINES = [Line("A", 145 * US, "host", 149 * US, 67_200_012),
              Line("B", 190 * US, "host", 199 * US, 67_200_012),
              Line("A", 50 * US, "host", 211 * US, 67_200_012)]
COUNTS = {
    "stream waits (cudaStreamWaitEvent records)": 3,
    "stream wait lines": 1,
    "stream wait lines (event record inferred)": 1,
    "stream waits without a line: the waiting stream has no work in the trace": 1,
    "host synchronisations (stream/event/context sync records)": 4,
    "host sync lines": 3,
    "host sync lines from work still running when the call began": 2,
    "host syncs without a line: the work of the event's record ended after the call returned "
    "(an event query that found it pending or an inferred record on another stream)": 1,
}


def streams_export(path: str | Path, layout: str = "3.17.1") -> Path:
    return write_export(path, streams_spec(), layout)


# -- NCCL ---------------------------------------------------------------------------------------

COMM = 0x00C0FFEE00000001


def nccl_rank_spec(rank: int, nranks: int, steps: int, late: int, delay: int) -> Spec:
    """Rank `rank`: ncclCommInitRank, then `steps` ncclAllReduce calls, each launching one
    kernel; kernel k of every rank ends at `nccl_end(k)`, starts at `nccl_start(k, rank)`."""
    pid = 1000 + rank
    spec = Spec(env={"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(nranks)},
                processes=[(pid, "trainer")], threads=[(pid, pid, "trainer")],
                gpus=[(rank, "GPU")])
    spec.nvtx.append(Nvtx(1_000 * US, 2_000 * US, pid, pid, "pushpop", "ncclCommInitRank",
                          "NCCL"))
    for k in range(steps):
        t = 10_000 * US * (k + 1) + (delay if rank == late else 0)
        spec.nvtx.append(Nvtx(t, t + 50 * US, pid, pid, "pushpop", "ncclAllReduce", "NCCL"))
        spec.api.append(ApiCall(t + 10 * US, t + 20 * US, pid, pid, "cuLaunchKernelEx", k + 1))
        spec.kernels.append(Kernel(nccl_start(k, rank, late, delay), nccl_end(k), pid, rank,
                                   7, "ncclDevKernel_AllReduce_RING_LL", k + 1))
    return spec


def nccl_start(k: int, rank: int, late: int, delay: int) -> int:
    return 10_000 * US * (k + 1) + 30 * US + (delay if rank == late else 0)


def nccl_end(k: int) -> int:
    return 10_000 * US * (k + 1) + 5_000 * US


def nccl_job(folder: str | Path, nranks: int = 4, steps: int = 3, late: int = 2,
             delay: int = 2_000 * US) -> list[Path]:
    """One export per rank (see `nccl_rank_spec`); payloads as JSON text."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(nranks):
        pid = 1000 + rank
        path = write_export(folder / f"rank{rank}.sqlite",
                            nccl_rank_spec(rank, nranks, steps, late, delay))
        con = sqlite3.connect(path)
        payloads = {"ncclCommInitRank": {"NCCL communicator ID": COMM, "No. of ranks": nranks,
                                         "Rank": rank, "CUDA device": rank},
                    "ncclAllReduce": {"NCCL communicator ID": COMM,
                                      "Message size [bytes]": 1 << 20,
                                      "Reduction operation": "Sum", "Datatype": "ncclFloat32"}}
        for name, payload in payloads.items():
            con.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE globalTid = ? AND textId IN "
                        "(SELECT id FROM StringIds WHERE value = ?)",
                        (json.dumps(payload), global_tid(pid, pid), name))
        con.commit()
        con.close()
        paths.append(path)
    return paths


# -- MPI ----------------------------------------------------------------------------------------

MPI_CALLS = ("MPI_Allreduce", "MPI_Barrier", "MPI_Allreduce")


def mpi_call_times(k: int, rank: int, late: int, delay: int) -> tuple[int, int]:
    """(start, end) of collective k on `rank`: everyone returns 10 µs after `late` arrives."""
    base = 1_000_000 * (k + 1)
    start = base + (delay if rank == late else 100 * rank)
    return start, base + delay + 10 * US


def mpi_job(folder: str | Path, nranks: int = 3, late: int = 1, delay: int = 500 * US
            ) -> list[Path]:
    """One export per rank: MPI_Init, then the collectives of MPI_CALLS on MPI_COMM_WORLD."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(nranks):
        pid = 2000 + rank
        spec = Spec(env={"OMPI_COMM_WORLD_RANK": str(rank),
                         "OMPI_COMM_WORLD_SIZE": str(nranks)},
                    processes=[(pid, "app")], threads=[(pid, pid, "main")])
        path = write_export(folder / f"rank{rank}.sqlite", spec)
        calls = [MpiCall(100 * US, 200 * US, pid, pid, "MPI_Init")]
        for k, name in enumerate(MPI_CALLS):
            s, e = mpi_call_times(k, rank, late, delay)
            calls.append(MpiCall(s, e, pid, pid, name, size=64))
        paths.append(add_mpi(path, calls, [world(rank, nranks)], ranks=[(pid, pid, rank)]))
    return paths
