"""The cfgs shipped in `cfgs/`, described once with the registry's numbers.

Per-device results: Paraver has no device level (rows are threads = CPU threads and GPU
streams, grouped in tasks = processes). The analysis views therefore aggregate GPU stream rows
at **task level**, which is per device when each process drives one GPU (the usual MPI /
torchrun / NCCL layout). A process driving several GPUs gets the sum of its GPUs in these
views; `nsys2prv analyze` reports true per-GPU numbers from the stream-row labels, and the
thread-level views (one row per stream) can be read per GPU by the row labels
"GPU d ctx c stream s". See docs/cfgs.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace

from ..paraver.registry import (critical, cuda, deps, gpu_metrics, graphs, nccl, nvtx, osrt,
                                sampling)
from .cfg import Cfg, Histogram, Window, write_all

# Extrae's numbers (extrae src/merger/paraver/MPI_EventEncoding.h, events.h), taken from the
# registry's MPI and OpenACC families when they are there.
try:
    from ..paraver.registry import mpi as _mpi

    MPI_TYPES: tuple[int, ...] = tuple(_mpi.CALL_TYPES)
except (ImportError, AttributeError):  # pragma: no cover - before the MPI kind lands
    MPI_TYPES = (50_000_001, 50_000_002, 50_000_003, 50_000_004, 50_000_005)
OPENACC_TYPES = (66_000_000, 66_000_001, 66_000_002)
# Both families are contiguous type numbers: a `[x,y]` filter over them selects exactly the
# same events as listing them, and Paraver's GUI does not ask when some are absent.
MPI_RANGE = (min(MPI_TYPES), max(MPI_TYPES))
OPENACC_RANGE = (min(OPENACC_TYPES), max(OPENACC_TYPES))
assert MPI_RANGE[1] - MPI_RANGE[0] + 1 == len(MPI_TYPES)
assert OPENACC_RANGE[1] - OPENACC_RANGE[0] + 1 == len(OPENACC_TYPES)

KERNEL = cuda.CUDA_KERNEL
NCCL_KERNEL = cuda.NCCL_KERNEL
KERNELS = (KERNEL, NCCL_KERNEL)
MEMOP = cuda.MEMORY_OPERATION
ACTIVITY = (KERNEL, NCCL_KERNEL, MEMOP)
ANY_TYPE = 2**32 - 1  # the largest Paraver event type (PRV_UINT32)
STACKED = {"compose_thread": "Stacked Val"}
SIGN = {"compose_thread": "Sign"}
TASK_SIGN = {"compose_thread": "Sign", "compose_task": "Sign"}
OVERLAP_CAP = 3  # levels 0, 1, 2, 3+


# ------------------------------------------------------------------------------------------
# Window builders
# ------------------------------------------------------------------------------------------

# the lines of the launches (CUDA call -> its GPU work) and of the dependencies
LAUNCH_TAGS = tuple(sorted((cuda.TAG_KERNEL_LAUNCH, cuda.TAG_NCCL_LAUNCH,
                            cuda.TAG_MEMORY_OPERATION, graphs.TAG_GRAPH_LAUNCH)))
DEPENDENCY_TAGS = tuple(sorted(deps.COMM_TAGS))


def lines(windows: Sequence[Window], tags: tuple[int, ...], exclude: bool = False
          ) -> tuple[Window, ...]:
    """`windows` taking only the communication lines of `tags` (all but them with
    `exclude`): a view of launch arrows draws no dependency line, and so on."""
    return tuple(w if w.derived else replace(w, comm_tags=tags, comm_tags_exclude=exclude)
                 for w in windows)


def states(name: str = "States") -> Window:
    return Window(name)


def last_value(name: str, types: tuple[int, ...], stacked: bool = False,
               type_range: bool = False, level: str = "thread") -> Window:
    """Value of the last event of `types` (names/enums; 0 = region ended)."""
    return Window(name, level=level, thread="Last Evt Val", types=types,
                  type_range=type_range, compose=dict(STACKED) if stacked else {})


def kernels_anchor(name: str = "CUDA kernels") -> Window:
    """Compute-kernel names as a one-type `[x,y]` window (same events as `= 63000006`).

    Why: wxparaver asks "Some of the events specified in the filter doesn't appear in the
    trace" when a listed type is absent (no NCCL kernels, no copies, no GPU metrics) and some
    other one is present, but a `[x,y]` window with data clears that for the windows picked
    before it (paraver-kernel `pickSymbols`). Placed as the last filtered window of a GPU view,
    it makes the view open silently on every trace with compute kernels."""
    return Window(name, thread="Last Evt Val", types=(KERNEL, KERNEL), type_range=True)


def present(what: str, first: int, last: int, level: str = "thread") -> Window:
    """Hidden window whose only job is the GUI's load check, for views about several kinds
    of which a trace may have only some (compute kernels, NCCL kernels, copies): a `[x,y]`
    range from the first to the last type has data whenever one of them is there, and it
    clears the question for the windows picked before it. No number uses it."""
    return Window(f"{what} present (load check)", level=level, thread="Last Evt Val",
                  types=(first, last), type_range=True, hidden=True)


def spanning(what: str, windows: Sequence[Window]) -> Window:
    """`present` from the first to the last type that `windows` filter. For views whose
    kinds a trace may have in any combination, none of them there whenever another is: a
    window of a run with GPU metric samples but no kernel, a POP copy that keeps the NCCL
    calls' message sizes on the CPU rows but no NCCL kernel, a critical path without GPU
    work. Only a range over all of them has data on every such trace."""
    types = [t for w in windows for t in (w.types or ())]  # a derived window filters none
    return present(what, min(types), max(types))


def kernels_present(level: str = "thread") -> Window:
    """Compute or NCCL kernels (63000006 ... 67000002)."""
    return present("GPU kernels", KERNEL, NCCL_KERNEL, level)


def gpu_activity_present() -> Window:
    """Compute kernels, NCCL kernels or memory operations (63000006 ... 67100001)."""
    return present("GPU activity", KERNEL, MEMOP)


def on_row(name: str, types: tuple[int, ...]) -> Window:
    """1 while a region of `types` is open on the row (a kernel, a copy...), else 0."""
    return Window(name, thread="Last Evt Val", types=types, compose=dict(SIGN), gradient=True)


def count_task(name: str, types: tuple[int, ...]) -> Window:
    """Number of rows of the process with a region of `types` open (kernels at once)."""
    return Window(name, level="task", thread="Last Evt Val", types=types,
                  compose=dict(SIGN), gradient=True)


def on_task(name: str, types: tuple[int, ...], factor: float | None = None,
            type_range: bool = False) -> Window:
    """1 while any row of the process has a region of `types` open (union of intervals);
    `factor` scales it (100 makes averages read as percentages)."""
    compose = dict(TASK_SIGN)
    params: tuple = ()
    if factor is not None:
        compose["topcompose1"] = "Prod"
        params = (("topcompose1", "Prod", ((factor,),)),)
    return Window(name, level="task", thread="Last Evt Val", types=types, compose=compose,
                  params=params, gradient=True, type_range=type_range)


def capped_count_task(name: str, types: tuple[int, ...], cap: int = OVERLAP_CAP) -> Window:
    """min(kernels at once, cap): Complement(cap) -> keep in [0, cap] -> Complement(cap)."""
    return Window(
        name, level="task", thread="Last Evt Val", types=types, gradient=True,
        compose={"compose_thread": "Sign", "compose_task": "Complement",
                 "topcompose1": "Select Range", "topcompose2": "Complement"},
        params=(("compose_task", "Complement", ((cap,),)),
                ("topcompose1", "Select Range", ((cap,), (0,))),
                ("topcompose2", "Complement", ((cap,),))))


def derived(name: str, op: str, a: str, b: str, level: str = "thread",
            factors: tuple[float, float] = (1.0, 1.0), compose: dict | None = None,
            params: tuple = (), units: str = "Nanoseconds") -> Window:
    return Window(name, level=level, derived=(op, (a, b), factors), compose=compose or {},
                  params=params, gradient=True, units=units)


def _scale(offset: int) -> tuple[float, float] | None:
    """0-100 for a percentage metric (its samples, rates and predictions then compare by
    colour), None (fitted to the values) for the others."""
    key = next(k for k, v in gpu_metrics.KNOWN_METRICS.items() if v == offset)
    return (0.0, 100.0) if gpu_metrics.is_percent(key) else None


def metric_samples(name: str, offset: int) -> Window:
    return Window(name, thread="Last Evt Val", types=(gpu_metrics.SAMPLES.type_of(offset),),
                  gradient=True, zero_unpainted=True, y_range=_scale(offset))


def metric_rate(name: str, offset: int) -> Window:
    """The kernels' rates of a metric (the sample-mixing model), on the stream rows: each
    kernel's from its start to the next kernel of the row."""
    return Window(name, thread="Last Evt Val", types=(gpu_metrics.RATE.type_of(offset),),
                  gradient=True, zero_unpainted=True, y_range=_scale(offset))


def metric_rate_windows(metric: str, offset: int) -> tuple[Window, Window, Window]:
    """The rate as written (the histograms' data: read while a kernel runs), whether a
    compute kernel runs, and their product, '<metric> rate of kernels': the rate drawn only
    while kernels run."""
    return (metric_rate(f"{metric} rate (last kernel)", offset),
            on_row(f"Compute kernel running ({metric})", (KERNEL,)),
            replace(derived(f"{metric} rate of kernels", "product",
                            f"{metric} rate (last kernel)",
                            f"Compute kernel running ({metric})"), zero_unpainted=True,
                    y_range=_scale(offset)))


def metric_predicted(name: str, offset: int) -> Window:
    """The model's prediction of each sample, on the metrics rows."""
    return Window(name, thread="Last Evt Val",
                  types=(gpu_metrics.PREDICTED.type_of(offset),), gradient=True,
                  zero_unpainted=True, y_range=_scale(offset))


# ------------------------------------------------------------------------------------------
# basics/: one view per event family
# ------------------------------------------------------------------------------------------

PUSHPOP_RANGE = (nvtx.PUSHPOP.base, nvtx.PUSHPOP.base + nvtx.PUSHPOP.size - 1)
STARTEND_LANE0 = nvtx.STARTEND.type_of(0)


def _profile(name: str, control: str, data: str, statistic: str = "Time") -> Histogram:
    """`statistic` per value of a name-valued window: one column per name. Names are
    numbered per trace, so the column range is computed from the trace (Paraver then uses
    one column per value of a code-coloured window; value 0 = no region is left out)."""
    return Histogram(name, control, data, statistic, compute_scale=True, hide_cols=True)


BASICS = [
    Cfg("basics/states.cfg", "States of every row",
        "CPU threads: Running outside CUDA calls, Configuring accelerator (launches), "
        "Synchronization, Memory transfer, Allocating/Freeing memory, Others, Not created. "
        "GPU streams: Running (kernel), Memory transfer (memcpy/memset), Idle.",
        (states(),)),
    Cfg("basics/states_profile.cfg", "Time per state per row (% of the trace)",
        "Histogram of the state view: % of the trace time each row spends in each state.",
        (states(),),
        Histogram("States profile", "States", "States", "% Time", 0, 33, 1, hide_cols=True)),
    Cfg("basics/cuda_kernels.cfg", "Compute kernels (63000006) on GPU stream rows",
        "Name of the compute kernel running on each GPU stream row (NCCL kernels are in "
        "nccl_kernels.cfg).",
        (last_value("CUDA kernels", (KERNEL,)),)),
    Cfg("basics/cuda_kernels_profile.cfg", "Time per compute kernel per stream row",
        "Total time of each compute kernel name (columns) on each row; Avg/Max per column "
        "compares streams.",
        (last_value("CUDA kernels", (KERNEL,)),),
        _profile("Kernel time profile", "CUDA kernels", "CUDA kernels")),
    Cfg("basics/nccl_kernels.cfg", "NCCL kernels (67000002) on GPU stream rows",
        "Name of the NCCL communication kernel running on each GPU stream row.",
        (last_value("NCCL kernels", (NCCL_KERNEL,)),)),
    Cfg("basics/memory_operations.cfg", "Memory operations (67100001) on GPU stream rows",
        "memcpy direction (Host-to-Device, Device-to-Host, Peer-to-Peer, ...) or memset "
        "running on each GPU stream row.",
        (last_value("Memory operations", (MEMOP,)),)),
    Cfg("basics/cuda_api.cfg", "CUDA API calls (63000000) on CPU threads",
        "CUDA runtime/driver call in progress on each CPU thread (Extrae's values where "
        "Extrae has the function). Nested calls: Stacked Val shows the innermost one.",
        (last_value("CUDA API calls", (cuda.CUDA_CALL,), stacked=True),)),
    Cfg("basics/cuda_api_profile.cfg", "Time per CUDA API call per CPU thread",
        "Total time in each CUDA call (columns) per thread (innermost call of nested ones).",
        (last_value("CUDA API calls", (cuda.CUDA_CALL,), stacked=True),),
        _profile("CUDA API profile", "CUDA API calls", "CUDA API calls")),
    Cfg("basics/nvtx_pushpop.cfg", "NVTX push/pop ranges (67300000 + domain), stacked",
        "Innermost open NVTX push/pop range of every domain on each CPU thread (types "
        "67300000-67300999, one per domain; 'Stacked Val' keeps the enclosing range visible "
        "after a nested one ends).",
        (last_value("NVTX push/pop", PUSHPOP_RANGE, stacked=True, type_range=True),)),
    Cfg("basics/nvtx_startend.cfg", "NVTX start/end ranges (67301000, lane 0)",
        "Start/end ranges on the thread that started them. Overlapping ranges go to further "
        "lanes (67301001, ...): change the type filter to see them.",
        (last_value("NVTX start/end lane 0", (STARTEND_LANE0,)),)),
    Cfg("basics/osrt.cfg", "OS runtime calls (67400001), stacked",
        "libc/pthread call in progress on each CPU thread (innermost of nested calls).",
        (last_value("OS runtime calls", (osrt.OSRT_CALL,), stacked=True),)),
    Cfg("basics/nccl_calls.cfg", "NCCL host calls (67600000), stacked",
        "Host-side NCCL call (ncclAllReduce, ncclSend, ncclGroupStart, ...) on each CPU "
        "thread; the device side is nccl_kernels.cfg and views/nccl_collectives.cfg.",
        (last_value("NCCL calls", (nccl.NCCL_RANGE,), stacked=True),)),
    Cfg("basics/nccl_payload.cfg", "NCCL collective of each NCCL kernel (67600001)",
        "Operation (AllReduce, AllGather, Send, ...) of the NCCL kernel running on each GPU "
        "stream row, decoded from NCCL's NVTX payloads.",
        (last_value("NCCL collective", (nccl.NCCL_COLLECTIVE,)),)),
    Cfg("basics/gpu_metrics.cfg", "GPU metric samples: SM Active (67500000)",
        "Sampled SM Active [%] on each 'GPU d metrics' row (values carry PRECISION 2). Every "
        "metric has its own view in cfgs/hwcounters/.",
        (metric_samples("SM Active", gpu_metrics.KNOWN_METRICS["SM Active"]),)),
    Cfg("basics/mpi.cfg", "MPI calls (Extrae 50000001-50000005)",
        "MPI call in progress on each CPU thread: point-to-point, collective, other, "
        "one-sided and I/O calls (Extrae's types and values).",
        (last_value("MPI calls", MPI_RANGE, type_range=True),)),
    Cfg("basics/openacc.cfg", "OpenACC regions (Extrae 66000000-66000002), stacked",
        "OpenACC other / data / launch events on each CPU thread (innermost region).",
        (last_value("OpenACC", OPENACC_RANGE, stacked=True, type_range=True),)),
]

# windows of views whose kinds come in any combination (they end with a `spanning` check)
NCCL_COLLECTIVE_WINDOWS = (
    last_value("NCCL collective", (nccl.NCCL_COLLECTIVE,)),
    on_row("Collective running", (nccl.NCCL_COLLECTIVE,)),
    Window("Message size (last)", thread="Last Evt Val", types=(nccl.NCCL_MESSAGE_SIZE,),
           gradient=True),
    last_value("NCCL kernels", (NCCL_KERNEL, NCCL_KERNEL), type_range=True))
TENSOR_WINDOWS = (
    metric_samples("Tensor Active (samples)", gpu_metrics.KNOWN_METRICS["Tensor Active"]),
    *metric_rate_windows("Tensor Active", gpu_metrics.KNOWN_METRICS["Tensor Active"]),
    kernels_anchor())

# ------------------------------------------------------------------------------------------
# views/: compound views
# ------------------------------------------------------------------------------------------

VIEWS = [
    Cfg("views/cuda_activities.cfg", "CUDA activities: API calls, kernels and memory operations",
        "The natural first view, with the launch arrows (communication lines from each CUDA "
        "call to its kernel or copy). Windows: states of every row; CUDA API calls on CPU "
        "threads (stacked); kernels (compute and NCCL) and memory operations on GPU streams; "
        "one timeline with all of them (CPU rows show the CUDA call, GPU rows the kernel or "
        "the copy). Table: time per CUDA call per CPU thread.",
        lines((states(), last_value("CUDA API calls", (cuda.CUDA_CALL,), stacked=True),
               last_value("GPU kernels", KERNELS), last_value("Memory operations", (MEMOP,)),
               last_value("CUDA activities", (cuda.CUDA_CALL, KERNEL, NCCL_KERNEL, MEMOP)),
               # the states window makes the GUI count the file as having data, so on a
               # trace without CUDA (MPI or CPU only) it would ask about the CUDA types: any
               # event at all lets it open (showing the states and empty CUDA windows)
               # without a question
               present("Any event", 0, ANY_TYPE)), LAUNCH_TAGS),
        _profile("CUDA API profile", "CUDA API calls", "CUDA API calls"),
        comm_lines=True),
    Cfg("views/dependencies.cfg", "What waited for what: the dependency lines",
        "CUDA calls on CPU threads, kernels and memory operations on GPU streams, with the "
        "lines of the dependencies only (docs/events.md): stream waits (cudaStreamWaitEvent, "
        "traced or inferred record), GPU -> host synchronisations, NCCL collectives (from the "
        "participant that arrived last to each other one) and MPI collectives; launch "
        "arrows and MPI messages are left out (paramedir applies the tag filter; wxparaver "
        "4.11 draws every line of the rows shown). Table: dependency lines sent from each "
        "row (rows) to each row (columns). The critical path (analyze --critical-path) "
        "follows these lines.",
        lines((last_value("CUDA activities", (cuda.CUDA_CALL, KERNEL, NCCL_KERNEL, MEMOP)),
               present("Any event", 0, ANY_TYPE)), DEPENDENCY_TAGS),
        Histogram("Dependency lines sent per row (columns: receiving row)", "CUDA activities",
                  "CUDA activities", "#Sends", 0, 1_000_000, 1_000_000),
        comm_lines=True),
    Cfg("views/memory_transfers.cfg", "Memory transfers: sizes and bandwidth (GB/s)",
        "Windows: memory operation (direction) per stream row; bytes of the running "
        "operation; bandwidth = bytes / duration in bytes/ns = GB/s. The histogram gives the "
        "effective bandwidth per direction (time-weighted average of the bandwidth = total "
        "bytes / total time) per stream row.",
        (last_value("Memory operations", (MEMOP,)),
         on_row("Copy running", (MEMOP,)),
         Window("Bytes (last)", thread="Last Evt Val", types=(cuda.MEMORY_BYTES,),
                gradient=True),
         derived("Bytes", "product", "Bytes (last)", "Copy running"),
         derived("Bandwidth GB/s", "product", "Bytes (last)", "Copy running",
                 compose={"topcompose1": "Divide by Burst Time"})),
        Histogram("Bandwidth per direction [GB/s]", "Memory operations", "Bandwidth GB/s",
                  "Average value", 1, 100, 1, hide_cols=True)),
    Cfg("views/memory_bytes.cfg", "Bytes moved per direction per stream row",
        "Sum over operations of their bytes (per burst of the masked bytes window) for each "
        "memcpy direction / memset (columns).",
        (last_value("Memory operations", (MEMOP,)),
         on_row("Copy running", (MEMOP,)),
         Window("Bytes (last)", thread="Last Evt Val", types=(cuda.MEMORY_BYTES,),
                gradient=True),
         derived("Bytes", "product", "Bytes (last)", "Copy running")),
        Histogram("Bytes per direction", "Memory operations", "Bytes", "Sum bursts", 1, 100, 1,
                  hide_cols=True)),
    Cfg("views/nccl_collectives.cfg", "NCCL collectives with message sizes",
        "Windows: NCCL kernel per stream row; collective operation (67600001); message size "
        "in bytes of the running operation (67600002 masked by the collective). The "
        "histogram gives the average message size per collective per stream row.",
        (*NCCL_COLLECTIVE_WINDOWS,
         derived("Message size", "product", "Message size (last)", "Collective running"),
         spanning("NCCL kernels or calls", NCCL_COLLECTIVE_WINDOWS)),
        _profile("Message size per collective [bytes]", "NCCL collective", "Message size",
                 "Average value")),
    Cfg("views/compare_kernels.cfg", "Kernels of the runs compared, one application each",
        "For a trace of several runs (nsys2prv.translate_applications: application 1 = "
        "before, 2 = after, each starting at 0 at its own start or window): the kernels "
        "(compute and NCCL) of every run on its stream rows. The runs share one numbering "
        "of the names, so a kernel has the same colour in both; row labels start with the "
        "run ('before: ', 'after: '). On an ordinary trace it is the kernel timeline.",
        (last_value("GPU kernels", KERNELS), kernels_present(),
         # what paramedir prints (its last window): the kernels again, as a derived window
         # (not part of the GUI's load check, which ends on the presence window)
         replace(derived("GPU kernels (printed)", "add", "GPU kernels",
                         "GPU kernels present (load check)", factors=(1.0, 0.0)),
                 hidden=True))),
    Cfg("views/mpi_messages.cfg", "MPI calls with their messages",
        "MPI call per thread (Extrae types) with the communication lines of the messages "
        "(not the launch arrows nor the dependency lines); the histogram gives bytes sent "
        "per MPI call per thread.",
        lines((last_value("MPI calls", MPI_RANGE, type_range=True),),
              LAUNCH_TAGS + DEPENDENCY_TAGS, exclude=True),
        _profile("Bytes sent per MPI call", "MPI calls", "MPI calls", "Bytes sent"),
        comm_lines=True),
]

# ------------------------------------------------------------------------------------------
# analysis/: overlap, hidden communication, tensor cores, efficiency model, histograms
# ------------------------------------------------------------------------------------------

COUNT = "Kernels at once (0/1/2/3+)"
CAPPED = "Kernels at once, capped at 3"


def _levels(name: str) -> Histogram:
    return Histogram(name, COUNT, COUNT, "% Time", 0, OVERLAP_CAP, 1)


def _efficiency(path: str, title: str, useful: tuple[int, ...], note: str) -> list[Cfg]:
    windows = (on_task("Useful (device)", useful), on_task("Active (device)", ACTIVITY),
               gpu_activity_present(),
               derived("Device time: 0 idle, 1 communication, 2 useful", "add",
                       "Useful (device)", "Active (device)", level="task"))
    cls = windows[-1].name
    desc = (f"{note}\nPer process (= per device when each process drives one GPU): "
            "column 2 = useful time, 1 = communication not hidden by useful work, "
            "0 = idle, as % of the trace time. With N processes with GPUs:\n"
            "  Device Parallel Efficiency      = Average(col 2) / 100\n"
            "  Load Balance                    = Avg/Max(col 2)\n"
            "  Communication Efficiency        = Maximum(col 2) / (100 - Minimum(col 0))\n"
            "  Orchestration Efficiency        = (100 - Minimum(col 0)) / 100\n"
            "PE = LB x CE x OE. `nsys2prv analyze` prints the same numbers.")
    return [
        Cfg(path, title, desc, windows,
            Histogram("Device time: idle / communication / useful (% of trace)", cls, cls,
                      "% Time", 0, 2, 1)),
        Cfg(path.replace(".cfg", "_time.cfg"), title + " - times in ns", desc, windows,
            Histogram("Device time: idle / communication / useful (ns)", cls, cls, "Time",
                      0, 2, 1)),
    ]


ANALYSIS = [
    Cfg("analysis/overlap_kernels_at_once.cfg",
        "Kernels running at once per process/device (NCCL included), levels 0/1/2/3+",
        "Windows: 1 while a kernel (compute or NCCL) runs on a stream row; number of "
        "kernels running at once in the process (sum of its stream rows); the same capped "
        "at 3 (3 = three or more). Per process = per device when each process drives one "
        "GPU.",
        (on_row("Kernel running", KERNELS), count_task("Kernels at once", KERNELS),
         replace(capped_count_task(CAPPED, KERNELS), hidden=True), kernels_present("task"),
         # the capped count again as the last window (what paramedir prints): a derived
         # window is not part of the GUI's load check, so the check ends on the presence one
         derived(COUNT, "add", CAPPED, "GPU kernels present (load check)", level="task",
                 factors=(1.0, 0.0)))),
    Cfg("analysis/overlap_levels.cfg", "Time per overlap level (% of trace time)",
        "Columns 0/1/2/3 = no kernel, one, two, three or more kernels running at once "
        "(NCCL included) in the process, as % of the trace time.",
        (capped_count_task(COUNT, KERNELS), kernels_present()),
        _levels("Overlap levels (% of trace time)")),
    Cfg("analysis/overlap_levels_comm.cfg", "Time per overlap level (% of communication time)",
        "Same levels counted only while an NCCL kernel runs, as % of the time with NCCL "
        "running: column 1 = communication alone (exposed), 2 and 3 = communication "
        "overlapped with one or more other kernels.",
        (capped_count_task(COUNT, KERNELS), on_task("NCCL running (device)", (NCCL_KERNEL,)),
         kernels_present(),
         derived("Kernels at once during communication", "product", COUNT,
                 "NCCL running (device)", level="task")),
        Histogram("Overlap levels (% of communication time)",
                  "Kernels at once during communication", "Kernels at once during communication",
                  "% Time Not Zero", 1, OVERLAP_CAP, 1)),
    Cfg("analysis/comm_hidden.cfg", "Communication hidden under compute (% of NCCL time)",
        "Per process/device: % of the time with an NCCL kernel running during which a "
        "compute kernel also runs (column 1). 100 - it is the exposed communication.",
        (on_task("NCCL running (device)", (NCCL_KERNEL,)),
         on_task("Compute running x100 (device)", (KERNEL,), factor=100),
         kernels_present()),
        Histogram("Communication hidden under compute (%)", "NCCL running (device)",
                  "Compute running x100 (device)", "Average value", 1, 1, 1)),
    Cfg("analysis/tensor_per_kernel.cfg",
        "Tensor-core use per kernel: average Tensor Active (%) per kernel name and stream",
        "Columns = compute kernel names, rows = GPU stream rows, cells = each kernel's Tensor "
        "Active rate (%), separated from the samples by the sample-mixing model "
        "(67502002, the same value on every launch of a name on a GPU: what `nsys2prv "
        "analyze` prints under 'Inside the kernels'). Windows also show the kernels, the "
        "sampled Tensor Active of each GPU (67500002, metrics rows) and the rates on the "
        "stream rows.",
        (*TENSOR_WINDOWS, spanning("Kernels or metric samples", TENSOR_WINDOWS)),
        _profile("Tensor Active per kernel (%)", "CUDA kernels",
                 "Tensor Active rate of kernels", "Average value")),
    *_efficiency("analysis/efficiency_talp.cfg",
                 "Device efficiency model, TALP-compatible form",
                 KERNELS,
                 "TALP-compatible form: useful = union of all kernels (NCCL kernels count as "
                 "useful, as CUPTI/TALP see them); communication = memcpy/memset time not "
                 "covered by any kernel."),
    *_efficiency("analysis/efficiency_nccl.cfg",
                 "Device efficiency model, NCCL-aware form",
                 (KERNEL,),
                 "NCCL-aware form: useful = union of compute kernels only; communication = "
                 "NCCL kernels and memcpy/memset not covered by a compute kernel."),
    Cfg("analysis/useful_imbalance.cfg", "Useful time per process/device and its imbalance",
        "Time with at least one compute kernel running (union over the process's streams), "
        "in ns. Avg/Max = load balance of the useful (compute) time across ranks.",
        (on_task("Useful (device)", (KERNEL,)),),
        Histogram("Useful time (ns)", "Useful (device)", "Useful (device)", "Time", 1, 1, 1)),
    Cfg("analysis/compare_kernel_time.cfg",
        "Time per kernel name per stream row, the runs' rows one above the other",
        "Columns = kernel names (compute and NCCL), rows = GPU stream rows, cells = total time "
        "of the kernel on the row in ns. On a trace of several runs (one application each, "
        "one numbering of the names) a kernel is one column for every run and the rows come "
        "application by application, labelled 'before: ...' then 'after: ...': the two "
        "runs' numbers of a kernel sit in one column. On an ordinary trace it is the kernel "
        "time profile with the NCCL kernels.",
        (last_value("GPU kernels", KERNELS), kernels_present()),
        _profile("Kernel time per run [ns]", "GPU kernels", "GPU kernels")),
    Cfg("analysis/critical_path.cfg", "The critical path across every row of the job",
        "For the copy of a trace that `nsys2prv analyze TRACE --critical-path --path-trace "
        "OUT.prv` writes: on every row, what the critical path does there (1 GPU work, 2 host "
        "work, 3 launch latency, 4 waiting that no traced work explains; nothing: the path "
        "is elsewhere). Table: the path's time per row and category (ns); its rows add up "
        "to the analysed span. Second window: every GPU activity's float (1 + microseconds "
        "it could end later without delaying the run; 1 = on the path).",
        (last_value("Critical path float (us)", (critical.CRITICAL_FLOAT,)),
         # a pixel shows the lowest code it covers: the path's work, not the microsecond
         # waits between its pieces; a one-type range (same events as `=`), last, so that a
         # path without GPU work (no float) opens without a question
         replace(last_value("On the critical path",
                            (critical.CRITICAL_PATH, critical.CRITICAL_PATH), type_range=True),
                 drawmode="draw_minnotzero")),
        Histogram("Critical path time per row [ns]", "On the critical path",
                  "On the critical path", "Time", 1, 4, 1)),
    Cfg("analysis/kernel_duration_histogram.cfg",
        "Kernel duration histograms per kernel name (bimodal GEMMs)",
        "3D histogram: columns = kernel duration bins (us, range computed from the trace), "
        "rows = stream rows, planes = compute kernel names; cells = number of kernel "
        "instances. Pick a GEMM's plane to see one or two modes.",
        (last_value("CUDA kernels", (KERNEL,)),
         Window("Kernel duration (us)", thread="Last Evt Val", types=(KERNEL,),
                compose={"compose_thread": "Burst Time"}, units="Microseconds",
                gradient=True),
         on_row("Kernel running", (KERNEL,)),
         derived("Kernel duration (us), kernels only", "product", "Kernel duration (us)",
                 "Kernel running", units="Microseconds")),
        Histogram("Kernel durations (count per bin)", "Kernel duration (us), kernels only",
                  "Kernel duration (us), kernels only", "# Bursts", compute_scale=True,
                  plane="CUDA kernels", plane_compute_scale=True, hide_cols=True)),
]

# ------------------------------------------------------------------------------------------
# hwcounters/: every known GPU metric as a timeline and as a per-kernel profile
# ------------------------------------------------------------------------------------------


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_").replace("__", "_")


HWCOUNTERS = []
for _metric, _offset in sorted(gpu_metrics.KNOWN_METRICS.items(), key=lambda kv: kv[1]):
    _slugged = _slug(_metric).replace("__", "_")
    HWCOUNTERS.append(
        Cfg(f"hwcounters/{_slugged}_timeline.cfg", f"GPU metric timeline: {_metric}",
            f"Sampled '{_metric}' on each 'GPU d metrics' row (type "
            f"{gpu_metrics.SAMPLES.type_of(_offset)}, value in the metric's unit with two "
            "decimals).",
            (metric_samples(_metric, _offset),)))
    if _metric in gpu_metrics.KERNEL_METRICS:  # the rates written on the kernels
        HWCOUNTERS.append(
            Cfg(f"hwcounters/{_slugged}_per_kernel.cfg", f"GPU metric per kernel: {_metric}",
                f"Columns = compute kernel names, rows = GPU stream rows, cells = each "
                f"kernel's '{_metric}' rate, separated from the samples by the sample-mixing "
                f"model (type {gpu_metrics.RATE.type_of(_offset)}, what `nsys2prv analyze` "
                "prints; docs/kernel_metrics.md). The timeline draws the rate while compute "
                "kernels run.",
                (*metric_rate_windows(_metric, _offset), kernels_anchor(),
                 # a window of a run may hold a kernel's rate, in effect at its start, but
                 # no kernel
                 spanning("Kernels or their rates",
                          (*metric_rate_windows(_metric, _offset), kernels_anchor()))),
                _profile(f"{_metric} per kernel", "CUDA kernels",
                         f"{_metric} rate (last kernel)", "Average value")))

# the model against the samples, for the metrics the kernel views show most
for _metric in ("SM Active", "SM Issue", "Tensor Active", "DRAM Read Bandwidth"):
    _offset = gpu_metrics.KNOWN_METRICS[_metric]
    _slugged = _slug(_metric).replace("__", "_")
    HWCOUNTERS.append(
        Cfg(f"hwcounters/{_slugged}_model_fit.cfg",
            f"GPU metric, measured against the model: {_metric}",
            f"On each 'GPU d metrics' row: the sampled '{_metric}' (type "
            f"{gpu_metrics.SAMPLES.type_of(_offset)}), the value the sample-mixing model "
            "predicts for each sampling period from the rates of the kernels that ran in it "
            f"(type {gpu_metrics.PREDICTED.type_of(_offset)}) and their difference (measured "
            "- predicted): where the difference stays near 0 the model explains the samples; "
            "a run of large differences is time the kernels' rates do not account for "
            "(docs/kernel_metrics.md).",
            (metric_samples(f"{_metric} measured", _offset),
             metric_predicted(f"{_metric} predicted", _offset),
             replace(derived(f"{_metric}: measured - predicted", "substract",
                             f"{_metric} measured", f"{_metric} predicted"),
                     y_range=(-20.0, 20.0)))))

# ------------------------------------------------------------------------------------------
# NVTX ranges projected onto the GPU (registry nvtx_gpu: 67303000 + nsys' nesting level)
# ------------------------------------------------------------------------------------------

GPU_RANGES = (nvtx.GPU_PROJECTED.base, nvtx.GPU_PROJECTED.base + nvtx.GPU_PROJECTED.size - 1)
INNERMOST = "NVTX on the GPU, innermost level"
LAYER_LEVELS = 4  # the levels the timeline view opens one window each for (0-3)


def gpu_ranges(name: str = INNERMOST) -> Window:
    """The innermost NVTX range projected onto each GPU stream row: every level's type, and
    'Stacked Val' (a range's work on a row lies inside its parent's there, so the levels
    nest on the row like push/pop ranges on a thread)."""
    return last_value(name, GPU_RANGES, stacked=True, type_range=True)


def gpu_level(level: int) -> Window:
    """The ranges of one nesting level on the GPU stream rows (a one-type `[x,y]`: the same
    events as `=`, and a level a trace does not have asks nothing). Stacked too: ranges of
    one level from two threads (PyTorch's autograd thread beside the main one) may nest on
    a stream, and the outer one shows again when the inner one ends."""
    t = nvtx.nvtx_gpu_type(level)
    return last_value(f"NVTX on the GPU, level {level}", (t, t), stacked=True,
                      type_range=True)


_LAYER_NOTE = (
    "NVTX ranges projected onto the GPU (types 67303000 + nesting level, docs/events.md): "
    "on every GPU stream row that ran a range's work, the range from its first work's start "
    "to its last one's end, with the CPU rows' NVTX name values (one colour = one range on "
    "the threads, basics/nvtx_pushpop.cfg, and on the streams).")
_INNERMOST_NOTE = (
    "Columns are the innermost range on the row (the deepest level drawn there: with "
    "PyTorch's NVTX, the aten:: operators); for one level, filter the first window on type "
    "= 67303000 + level instead of the range. Rows are GPU stream rows (a kernel that "
    "overlaps another on its stream is on a lane row of its own, which carries no range). "
    "Paraver gives each name a column only when the trace's NVTX name values span at most "
    "10,000 (else it bins them).")
_RATE_METRICS = ("SM Issue", "Tensor Active", "DRAM Read Bandwidth")
_LAYER_VIEW = (last_value("GPU kernels", KERNELS),
               *(gpu_level(lv) for lv in range(LAYER_LEVELS)), gpu_ranges())
_LAYER_TIME = (gpu_ranges(), on_row("Kernel running", KERNELS))
_LAYER_COUNT = (gpu_ranges(), last_value("GPU kernels", KERNELS))
_LAYER_RATES = (
    gpu_ranges(), on_row("Compute kernel running", (KERNEL,)),
    *(w for m in _RATE_METRICS for w in (
        replace(metric_rate(f"{m} rate (last kernel)", gpu_metrics.KNOWN_METRICS[m]),
                hidden=True),
        replace(derived(f"{m} rate of kernels", "product", f"{m} rate (last kernel)",
                        "Compute kernel running"), zero_unpainted=True,
                y_range=_scale(gpu_metrics.KNOWN_METRICS[m])))),
    kernels_anchor())

LAYERS = [
    Cfg("views/layers_on_gpu.cfg", "NVTX ranges (layers) on the GPU rows, over the kernels",
        _LAYER_NOTE + " Windows: the kernels (compute and NCCL) on the stream rows; the "
        f"ranges of levels 0-{LAYER_LEVELS - 1} (nsys' level: 0 = outermost; a deeper one: "
        "change a window's type to 67303000 + level); the innermost range of every level "
        "('Stacked Val'). A layer's work runs after the layer closed on the CPU: here it "
        "is where the GPU ran it. `nsys2prv analyze` finds the level that holds the layers.",
        (*_LAYER_VIEW, spanning("Kernels or NVTX on the GPU", _LAYER_VIEW),
         # what paramedir prints (its last window): the innermost ranges again, derived
         # (not part of the GUI's load check, which ends on the presence window)
         replace(derived(f"{INNERMOST} (printed)", "add", INNERMOST,
                         "Kernels or NVTX on the GPU present (load check)",
                         factors=(1.0, 0.0)), hidden=True))),
    Cfg("analysis/layer_gpu_time.cfg", "GPU time per NVTX range on the GPU [ns]",
        _LAYER_NOTE + " Cells: the time kernels (compute and NCCL) run on the row while the "
        "range is the innermost one there, in ns (Integral of 'Kernel running'): per range "
        "name, the GPU time of its own kernels, the part its sub-ranges do not hold. "
        + _INNERMOST_NOTE,
        (*_LAYER_TIME, spanning("Kernels or NVTX on the GPU", _LAYER_TIME)),
        _profile("GPU time per range [ns]", INNERMOST, "Kernel running", "Integral")),
    Cfg("analysis/layer_kernel_count.cfg", "Kernels per NVTX range on the GPU",
        _LAYER_NOTE + " Cells: the number of kernels (compute and NCCL) that run on the row "
        "while the range is the innermost one there ('# Bursts != 0' of the kernel names: a "
        "kernel running across two ranges counts in both). " + _INNERMOST_NOTE,
        (*_LAYER_COUNT, spanning("Kernels or NVTX on the GPU", _LAYER_COUNT)),
        _profile("Kernels per range", INNERMOST, "GPU kernels", "# Bursts != 0")),
    Cfg("hwcounters/layer_rates.cfg",
        "GPU metric rates per NVTX range on the GPU: SM Issue (Tensor Active, DRAM Read)",
        _LAYER_NOTE + " Cells: the kernels' SM Issue rate (the sample-mixing model's, "
        f"type {gpu_metrics.RATE.type_of(gpu_metrics.KNOWN_METRICS['SM Issue'])}, "
        "docs/kernel_metrics.md), averaged over the time its compute kernels run while the "
        "range is the innermost one on the row (kernels whose rate is 0 left out); the "
        "windows 'Tensor Active rate of kernels' and 'DRAM Read Bandwidth rate of kernels' "
        "give the same table as the histogram's data window. " + _INNERMOST_NOTE,
        (*_LAYER_RATES, spanning("Kernels, NVTX on the GPU or their rates", _LAYER_RATES)),
        _profile("SM Issue per range (%)", INNERMOST, "SM Issue rate of kernels",
                 "Average value != 0")),
]

# analysis/: what each kernel's launch allows (registry/cuda.py, docs/kernel_metrics.md)
# ------------------------------------------------------------------------------------------


def launch_windows(name: str, type_: int, y_range: tuple[float, float] | None
                   ) -> tuple[Window, Window, Window]:
    """A launch statistic as written on each kernel's start (the histograms' data: read
    while a kernel runs), whether a compute kernel runs, and their product, '<name> of
    kernels': the value drawn only while kernels run."""
    last = f"{name} (last kernel)"
    running = f"Compute kernel running ({name})"
    return (Window(last, thread="Last Evt Val", types=(type_,), gradient=True,
                   zero_unpainted=True, y_range=y_range),
            on_row(running, (KERNEL,)),
            replace(derived(f"{name} of kernels", "product", last, running),
                    zero_unpainted=True, y_range=y_range))


for _stem, _name, _type, _scale, _what in (
        ("occupancy", "Theoretical occupancy (%)", cuda.KERNEL_OCCUPANCY, (0.0, 100.0),
         "theoretical occupancy (blocks per SM x warps per block / warps per SM, the "
         "occupancy calculator on the kernel's launch and GPU"),
        ("waves", "Waves", cuda.KERNEL_WAVES, None,
         "waves of blocks (blocks of the grid / blocks the GPU holds at once; the part "
         "above a whole number is the last wave's fill"),
        ("sm_active_ceiling", "SM Active ceiling (%)", cuda.KERNEL_SM_ACTIVE_CEILING,
         (0.0, 100.0),
         "SM Active ceiling (the most SM Active its grid allows: min(blocks, SMs) / SMs; "
         "the bound of its SM Active rate")):
    _windows = launch_windows(_name, _type, _scale)
    ANALYSIS.append(
        Cfg(f"analysis/{_stem}_per_kernel.cfg", f"Launch per kernel: {_name}",
            f"Columns = compute kernel names, rows = GPU stream rows, cells = the kernels' "
            f"{_what}; type {_type}, written on every kernel's start: the average over a "
            "name's launches, weighted by their time, what `nsys2prv analyze` weighs the "
            "rates' bounds with; docs/kernel_metrics.md). The timeline draws it while "
            "compute kernels run.",
            (*_windows, kernels_anchor(),
             spanning("Kernels or their launch", (*_windows, kernels_anchor()))),
            _profile(f"{_name} per kernel", "CUDA kernels", f"{_name} (last kernel)",
                     "Average value")))

# ------------------------------------------------------------------------------------------
# sampling/: CPU samples and call stacks as Extrae writes them (registry/sampling.py)
# ------------------------------------------------------------------------------------------

SAMPLED = sampling.SAMPLED_FUNCTION
CALLER_1 = sampling.caller_type(1)
CALLER_2 = sampling.caller_type(2)
_SAMPLE_NOTE = (
    "Each CPU sample is one event on its thread's row at its time (no region: a sample "
    "never changes the state): 30000000 the function the instruction pointer was in, as "
    "'FUNCTION (MODULE)', its callers 30000001-30000099 (Extrae's sampled functions, one "
    "value table for every depth), 67830000 its module. With DWARF unwinding nsys keeps a "
    "call stack for one sample in four: the others have the leaf only (67830001 = 1).")
_CALLER_NOTE = (
    "Extrae's callers (70000000 + level, docs/samples.md) are written at the entry of the "
    "calls nsys kept a call stack of (OS runtime calls of 80 us and more; CUDA calls with "
    "--cudabacktrace) and end (0) with the call: 'Stacked Val' shows the caller of the "
    "innermost call with a stack.")


def samples_window(name: str, type_: int) -> Window:
    """The value of the last sample of `type_` (a sample's function, caller or module)."""
    return Window(name, thread="Last Evt Val", types=(type_,))


def _code_profile(name: str, control: str, data: str, statistic: str = "Time") -> Histogram:
    """`_profile` of code locations: whole column labels ('[kernel.kallsyms]' kept)."""
    return replace(_profile(name, control, data, statistic), short_labels=False)


def caller_windows(call: str, call_type: int) -> tuple[Window, ...]:
    """The calls of a kind, the first two callers of those with a stack, whether a call of
    the kind runs (the histograms' data) and the first caller drawn only then, ending on a
    range that has data whenever the calls or their callers are there."""
    windows = (
        last_value(f"{call} calls", (call_type,), stacked=True),
        last_value("Caller at level 1", (CALLER_1, CALLER_1), stacked=True,
                   type_range=True),
        replace(last_value("Caller at level 2", (CALLER_2, CALLER_2), stacked=True,
                           type_range=True), hidden=True),
        Window(f"Inside {call} calls", thread="Last Evt Val", types=(call_type,),
               compose={"compose_thread": "Stacked Val", "topcompose1": "Sign"},
               gradient=True, hidden=True))
    return (*windows,
            derived(f"First caller of {call} calls", "product", "Caller at level 1",
                    f"Inside {call} calls"),
            spanning(f"{call} calls or callers", windows))


SAMPLING = [
    Cfg("sampling/sampled_functions.cfg", "CPU samples: the sampled function on the timeline",
        _SAMPLE_NOTE + " Windows: the last sampled function (30000000) on every thread, "
        "its module (67830000), the depth of its call stack (67830001, frames written) "
        "and the CPU it ran on + 1 (67830002).",
        (samples_window("Sampled functions", SAMPLED),
         samples_window("Sampled module", sampling.SAMPLED_MODULE),
         replace(samples_window("Sample stack depth", sampling.SAMPLE_DEPTH), gradient=True),
         replace(samples_window("Sampled CPU + 1", sampling.SAMPLED_CPU), gradient=True))),
    Cfg("sampling/sampled_function_profile.cfg",
        "CPU samples per sampled function per thread (self profile)",
        _SAMPLE_NOTE + " Cells: the number of samples taken in each function (columns: "
        "'FUNCTION (MODULE)') on each thread (the leaf of every sample: nsys' Bottom-Up "
        "top level), Paraver's 'Sampled function profile' of Extrae traces.",
        (samples_window("Sampled functions", SAMPLED),),
        _code_profile("Samples per function", "Sampled functions", "Sampled functions",
                 "# Bursts != 0")),
    Cfg("sampling/sampled_module_profile.cfg", "CPU samples per module per thread",
        _SAMPLE_NOTE + " Cells: the number of samples taken in each module (columns: "
        "the binary or library, [kernel.kallsyms] for the kernel) on each thread.",
        (samples_window("Sampled module", sampling.SAMPLED_MODULE),),
        _code_profile("Samples per module", "Sampled module", "Sampled module", "# Bursts != 0")),
    Cfg("sampling/callers_osrt.cfg", "OS runtime calls by their first caller (time)",
        _CALLER_NOTE + " Windows: the OS runtime call on every thread (stacked), its callers "
        "at levels 1 and 2, the first caller while an OS runtime call runs. Cells: the time "
        "in OS runtime calls (with a stack) per first caller per thread: which code waits "
        "in sem_timedwait, pthread_cond_wait, read...",
        caller_windows("OS runtime", osrt.OSRT_CALL),
        _code_profile("Time in OS runtime calls per first caller [ns]", "Caller at level 1",
                      "Inside OS runtime calls", "Integral")),
    Cfg("sampling/callers_cuda.cfg", "CUDA API calls by their first caller (time)",
        _CALLER_NOTE + " Windows: the CUDA call on every thread (stacked), its callers at "
        "levels 1 and 2 (level 1: the first frame after the API's own, CUPTI's and the "
        "driver's), the first caller while a CUDA call runs. Cells: the time in CUDA calls "
        "(with a stack) per first caller per thread.",
        caller_windows("CUDA API", cuda.CUDA_CALL),
        _code_profile("Time in CUDA calls per first caller [ns]", "Caller at level 1",
                      "Inside CUDA API calls", "Integral")),
]

CATALOGUE: list[Cfg] = BASICS + VIEWS + ANALYSIS + HWCOUNTERS + LAYERS + SAMPLING


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m nsys2prv.views.catalogue OUTDIR`: (re)write the catalogue's cfg files."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        print("usage: python -m nsys2prv.views.catalogue OUTDIR", file=sys.stderr)
        return 2
    for p in write_all(CATALOGUE, argv[0]):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
