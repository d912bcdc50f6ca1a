"""Synthetic exports whose GPU gaps have one known host cause each (`nsys2prv analyze`'s
"why the GPUs wait", tests/test_idle.py).

One process, its main thread launching `n` kernels on one stream of one GPU. Iteration i:
a launch call of LAUNCH ns, the kernel DELAY ns after it for KERNEL ns, then the host does
one thing for PHASE ns (the cause), and the next iteration starts. Every gap between two
kernels (n - 1 of them) lasts PHASE + LAUNCH - KERNEL ns and the launching thread spends
PHASE - KERNEL ns of it in the cause and LAUNCH ns launching, but for the end of the last
gap (closed form, `expected`).

    cause      what the host does during PHASE
    sync       cudaDeviceSynchronize
    memcpy     cudaMemcpy from pageable memory, its copy running at the call's end (which
               splits the gap: the copy's own launch is the memcpy call)
    io         read() (OS runtime), inside an NVTX push/pop range LOADER_RANGE
    compute    nothing traced (Running)
    mpi        MPI_Barrier (native MPI tables)
    launch     PHASE = 0 and kernels shorter than their launch: back-to-back launches
"""

from __future__ import annotations

import os
from pathlib import Path

from .synth import ApiCall, Kernel, Memcpy, Nvtx, Osrt, Spec, write_export
from .synth_mpi import MpiCall, add_mpi, world

US = 1_000
LAUNCH, DELAY, KERNEL, PHASE = 10 * US, 5 * US, 100 * US, 1_000 * US
LOADER_RANGE = "data loading, batch"  # a name with spaces and a comma, read whole
PID = 7100
CAUSES = ("sync", "memcpy", "io", "compute", "mpi", "launch")
COPY = 10 * US  # the pageable copy on the GPU, ending COPY before the memcpy call returns


def spec_of(cause: str, n: int = 20) -> tuple[Spec, list[MpiCall]]:
    """The spec (and the MPI calls, for `mpi`) of `n` iterations with host cause `cause`."""
    if cause not in CAUSES:
        raise ValueError(f"unknown cause {cause!r}")
    spec = Spec(host="idle-node", env={"OMPI_COMM_WORLD_RANK": "0"})
    spec.processes = [(PID, "idle_app")]
    spec.threads = [(PID, PID, "idle_app")]
    spec.gpus = [(0, "NVIDIA H100")]
    mpi: list[MpiCall] = []
    kernel, phase = (3 * US, 0) if cause == "launch" else (KERNEL, PHASE)
    t = 1_000 * US
    corr = 1
    for i in range(n):
        spec.api.append(ApiCall(t, t + LAUNCH, PID, PID, "cudaLaunchKernel_v7000", corr))
        k0 = t + LAUNCH + DELAY
        spec.kernels.append(Kernel(k0, k0 + kernel, PID, 0, 7, "step_kernel", corr))
        corr += 1
        t += LAUNCH
        if i == n - 1 or not phase:
            continue
        end = t + phase
        if cause == "sync":
            spec.api.append(ApiCall(t, end, PID, PID, "cudaDeviceSynchronize_v3020", corr))
            corr += 1
        elif cause == "memcpy":
            spec.api.append(ApiCall(t, end, PID, PID, "cudaMemcpy_v3020", corr))
            spec.memcpy.append(Memcpy(end - 2 * COPY, end - COPY, PID, 0, 7, corr,
                                      bytes=64 << 20, copy_kind=1, src_kind=0, dst_kind=2))
            corr += 1
        elif cause == "io":
            spec.nvtx.append(Nvtx(t, end, PID, PID, "pushpop", LOADER_RANGE, None))
            spec.osrt.append(Osrt(t, end, PID, PID, "read", ret=4096))
        elif cause == "mpi":
            mpi.append(MpiCall(t, end, PID, PID, "MPI_Barrier"))
        t = end
    return spec, mpi


def export(path: str | os.PathLike[str], cause: str, n: int = 20) -> Path:
    """Write the export of `spec_of(cause, n)`."""
    spec, mpi = spec_of(cause, n)
    path = write_export(path, spec)
    if mpi:
        add_mpi(path, mpi, [world(0, 1)], ranks=[(PID, PID, 0)])
    return path


def expected(cause: str, n: int = 20) -> dict[str, int]:
    """Idle time per cause key (analysis.idle.CAUSES) of the job, in ns. The cause's time of
    a gap runs on DELAY ns into the next iteration's cause (the kernel starts DELAY after
    its launch call returns); after the last launch there is no cause, only host compute."""
    if cause == "launch":
        # each gap (LAUNCH - kernel) lies inside the next two launch calls
        return {"cuda_launch": (n - 1) * (LAUNCH - 3 * US) - DELAY, "no_data": DELAY}
    key = {"sync": "cuda_sync", "memcpy": "cuda_memcpy", "io": "io",
           "compute": "host_compute", "mpi": "mpi"}[cause]
    # PHASE - KERNEL in the cause (the copy, for memcpy, is GPU activity, not idle time)
    in_cause = (n - 1) * (PHASE - KERNEL - (COPY if cause == "memcpy" else 0)) - DELAY
    return {key: in_cause, "cuda_launch": (n - 1) * LAUNCH, "no_data": DELAY}


def gaps(cause: str, n: int = 20) -> int:
    """How many gaps the export has (the copy splits each of memcpy's in two)."""
    return (n - 1) * (2 if cause == "memcpy" else 1)
