"""The GPU efficiency model and the overlap numbers, computed on a trace.

Definitions (docs/cfgs.md, research EFFICIENCY.md): per device g over the trace time T,
U_g = useful time, Cm_g = communication time not hidden by useful work, A_g = U_g + Cm_g =
time with any GPU activity, Idle_g = T - A_g. With N devices:
  Parallel efficiency PE = sum U / (N T), Load balance LB = mean U / max U,
  Communication efficiency CE = max U / max A, Orchestration efficiency OE = max A / T,
  and PE = LB x CE x OE.
TALP-compatible form: useful = all kernels (NCCL included), communication = memcpy/memset
outside kernels. NCCL-aware form: useful = compute kernels, communication = NCCL kernels and
memcpy/memset outside compute kernels.

Everything is one compiled sweep per window (`timeline.GroupSweep`): per group (process or
device), how many of its rows have each set of types open, and each constant piece of time
classified. Groups are computed twice: per process (what the task-level cfgs show in
Paraver, compared with paramedir in the tests) and per device = (process, GPU id from the row
label), which is exact also when one process drives several GPUs. The main threads' time
per state and open calls is the other compiled sweep (`timeline.RowTimeline`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from ..lifeline import signals_held
from ..paraver.registry import cuda
from ..paraver.registry import STATE_BY_VALUE, STATE_NOT_CREATED
from ..paraver.registry import mpi as mpi_reg
from ..paraver.read import Layout, Source, Trace, TraceInfo, open_trace, pcf_names, windows
from . import idle
from .timeline import NST, GroupSweep, RowTimeline

KERNEL = cuda.CUDA_KERNEL
NCCL_KERNEL = cuda.NCCL_KERNEL
MEMOP = cuda.MEMORY_OPERATION
CUDA_CALL = cuda.CUDA_CALL
MPI_CALLS = tuple(mpi_reg.CALL_TYPES)
TYPES = frozenset({KERNEL, NCCL_KERNEL, MEMOP, CUDA_CALL, *MPI_CALLS})
# what a trace read whole needs for `analyze_trace(explain=True)`: the causes' calls and the
# kernels' full names beside the model's types
EXPLAIN_TYPES = TYPES | idle.CAUSE_TYPES | {cuda.KERNEL_FULL_NAME}
CAP = 3
# CPU-thread states inside CUDA calls (registry core: sync, others, memory, alloc, free, launch)
CUDA_STATES = (5, 15, 17, 30, 31, 32)
RUNNING = 1


@dataclass
class Efficiency:
    """Device efficiency model of one form over `n` devices (fractions, None if undefined)."""

    form: str
    n: int
    parallel: float | None
    load_balance: float | None
    communication: float | None
    orchestration: float | None
    max_useful_device: str | None = None
    max_active_device: str | None = None


@dataclass
class GroupResult:
    """Times (ns) of one device or process."""

    name: str
    task: int
    device: int | None
    useful_talp: int
    comm_talp: int
    useful_nccl: int
    comm_nccl: int
    active: int
    idle: int
    nccl_time: int
    hidden_comm: int
    levels: list[int]  # time with 0, 1, 2, 3+ kernels at once
    levels_comm: list[int]  # the same while an NCCL kernel runs (index 0 unused)


@dataclass
class HostResult:
    """Where the main thread of a process spends its time (the row whose tid is the pid, else
    its first CPU row): running, inside CUDA calls (CUDA-call states while a CUDA call event is
    open: synchronisation states of MPI or OS-runtime waits are not CUDA time), inside MPI
    calls, and alive (from its first to its last record)."""

    name: str
    task: int
    main_thread: str
    running: int
    in_cuda: int
    by_state: dict[str, int]
    offload_efficiency: float | None  # None without CUDA calls on the main thread
    in_mpi: int = 0
    alive: int = 0


@dataclass
class CpuModel:
    """POP's CPU efficiency model over the main threads of the processes (useful = time in
    state Running, Paraver's `Useful`: outside MPI, CUDA and OS-runtime calls): PE = mean
    useful / T, LB = mean useful / max useful, communication efficiency = max useful / T;
    PE = LB x CE. `load_balance_additive` = 1 - (max useful - mean useful) / T is the variant
    NAG's pypop prints as "MPI Load Balance". None without MPI."""

    n: int
    parallel: float | None
    load_balance: float | None
    communication: float | None
    useful: list[int] = field(default_factory=list)
    load_balance_additive: float | None = None


@dataclass
class Analysis:
    trace: str
    end: int
    devices: list[GroupResult]
    processes: list[GroupResult]
    talp: Efficiency
    nccl: Efficiency
    host: list[HostResult] = field(default_factory=list)
    cpu: CpuModel | None = None  # POP's CPU model, where the trace has MPI calls
    idle: idle.IdleReport | None = None  # why the GPUs wait (analyze_path's second pass)

    def to_dict(self) -> dict:
        return asdict(self)


def _device_sweep(rows: pl.DataFrame, group: pl.Expr) -> GroupSweep:
    """The compiled sweep of the model's sets (K all kernels, C compute kernels, N NCCL
    kernels, A any activity) over the groups `group` gives the trace's rows."""
    return GroupSweep(rows, group, KERNEL, NCCL_KERNEL, MEMOP)


def _groups(sums: pl.DataFrame, keys: pl.DataFrame, T: int) -> list[GroupResult]:
    """The results of the groups from their summed segment times."""
    table = (keys.join(sums, on="g", how="left")
             .with_columns(pl.col(c).fill_null(0) for c in sums.columns if c != "g")
             .sort("g"))
    out = []
    for r in table.iter_rows(named=True):
        busy = [r[f"l{lv}"] for lv in range(1, CAP + 1)]
        out.append(GroupResult(
            name=r["name"], task=r["task"], device=r["device"],
            useful_talp=r["useful_talp"], comm_talp=r["comm_talp"],
            useful_nccl=r["useful_nccl"], comm_nccl=r["comm_nccl"],
            active=r["active"], idle=T - r["active"], nccl_time=r["nccl_time"],
            hidden_comm=r["hidden_comm"], levels=[T - sum(busy), *busy],
            levels_comm=[0, *(r[f"lc{lv}"] for lv in range(1, CAP + 1))]))
    return out


def efficiency(groups: list[GroupResult], T: int, form: str) -> Efficiency:
    """PE, LB, CE, OE over the groups for the 'talp' or 'nccl' form."""
    if not groups or T <= 0:
        return Efficiency(form, 0, None, None, None, None)
    u = np.array([getattr(g, f"useful_{form}") for g in groups], dtype=float)
    a = np.array([g.active for g in groups], dtype=float)
    n = len(groups)
    umax, amax = u.max(), a.max()
    return Efficiency(
        form, n, parallel=float(u.sum() / (n * T)),
        load_balance=float(u.mean() / umax) if umax > 0 else None,
        communication=float(umax / amax) if amax > 0 else None,
        orchestration=float(amax / T),
        max_useful_device=groups[int(u.argmax())].name,
        max_active_device=groups[int(a.argmax())].name)


def _main_rows(trace: Trace) -> pl.DataFrame:
    """The main thread of each task: the CPU row labelled with the process id as its tid."""
    cpu = trace.rows.filter(pl.col("kind") == "cpu").with_columns(
        pl.col("task_label").str.extract(r"\(pid (\d+)\)", 1).alias("pid"),
        pl.col("label").str.extract(r"\(tid (\d+)\)", 1).alias("tid"))
    return (cpu.with_columns((pl.col("pid").is_not_null() & (pl.col("pid") == pl.col("tid")))
                             .alias("is_main"))
            .sort("task_index", pl.col("is_main").not_(), "row")
            .group_by("task_index", maintain_order=True)
            .agg(pl.col("row").first(), pl.col("task_label").first(),
                 pl.col("label").first().alias("thread_label"))
            .sort("task_index"))


def _host_timeline(rows: pl.DataFrame, main: pl.DataFrame) -> RowTimeline:
    """The main rows' time per (state, open call sets), sets CUDA calls (0) and MPI calls
    (1): what `_host_sums` reads, summed over the windows given to it."""
    return RowTimeline(rows.height, main["row"].to_list(), [(CUDA_CALL,), MPI_CALLS])


def _host_sums(timeline: RowTimeline) -> pl.DataFrame:
    """Per main row: time running, alive (in a state other than 'Not created'), inside MPI
    calls, in each CUDA-call state while a CUDA call is open (`s<state>`), and the number of
    CUDA calls (`cuda`: did the thread make any)."""
    alive = [s for s in range(NST) if s != STATE_NOT_CREATED]
    return pl.DataFrame({
        "row": pl.Series(timeline.rows, dtype=pl.Int32),
        "running": timeline.time([RUNNING]),
        "alive": timeline.time(alive) + timeline.time([NST]),  # NST: the other states' bin
        "in_mpi": timeline.time(open_set=1),
        "cuda": timeline.opens[:, 0],
        **{f"s{s}": timeline.time([s], open_set=0) for s in CUDA_STATES}})


def _hosts(main: pl.DataFrame, sums: pl.DataFrame) -> list[HostResult]:
    """Per process, its main thread: time running, inside CUDA calls, inside MPI calls;
    device offload efficiency = running / (running + CUDA calls), TALP's with 'useful' = not
    inside a traced CUDA call (None when the thread made no CUDA call)."""
    per_row = {r["row"]: r for r in sums.iter_rows(named=True)}
    out = []
    for r in main.iter_rows(named=True):  # one per process
        t = per_row[r["row"]]
        by = {STATE_BY_VALUE[s].label: int(t[f"s{s}"]) for s in CUDA_STATES if t[f"s{s}"]}
        run = int(t["running"])
        cuda_t = sum(by.values())
        out.append(HostResult(r["task_label"], r["task_index"] + 1, r["thread_label"],
                              run, cuda_t, by,
                              run / (run + cuda_t) if t["cuda"] and run + cuda_t else None,
                              in_mpi=int(t["in_mpi"]), alive=int(t["alive"])))
    return out


def host(trace: Trace) -> list[HostResult]:
    """The main thread of each process (`_hosts`) in a trace read whole."""
    main = _main_rows(trace)
    timeline = _host_timeline(trace.rows, main)
    timeline.add(trace)
    return _hosts(main, _host_sums(timeline))


def cpu_model(hosts: list[HostResult], T: int) -> CpuModel | None:
    """POP's CPU model from the main threads (None when no process made an MPI call)."""
    if not hosts or T <= 0 or not any(h.in_mpi for h in hosts):
        return None
    useful = [h.running for h in hosts]
    u = np.array(useful, dtype=float)
    umax = u.max()
    return CpuModel(len(hosts), parallel=float(u.mean() / T),
                    load_balance=float(u.mean() / umax) if umax > 0 else None,
                    communication=float(umax / T), useful=useful,
                    load_balance_additive=float(1 - (umax - u.mean()) / T))


def device_keys(rows: pl.DataFrame) -> pl.DataFrame:
    """(g, name, task, device, process) of every GPU device of the trace's processes."""
    gpu_rows = rows.filter(pl.col("kind") == "gpu")
    return (gpu_rows.select("task_index", "device", "task_label").unique()
            .sort("task_index", "device")
            .select((pl.col("task_index") * 1_000_000 + pl.col("device")).alias("g"),
                    (pl.col("task_label") + " / GPU " + pl.col("device").cast(pl.Utf8))
                    .alias("name"),
                    (pl.col("task_index") + 1).alias("task"), "device",
                    pl.col("task_label").alias("process")))


class ModelSums:
    """The model's additive sums over the windows of one trace (`trace.windows`): feed
    every window to `add`, then `result`. A trace read whole is one window."""

    def __init__(self, processes: bool = True) -> None:
        self.processes = processes  # False: the per-process groups are not summed
        # of the first window, its path and rows only: the window itself (its events, ~20
        # MB for a 16 MiB block of text) would be held to the end of the analysis
        self.path: str | None = None
        self.rows: pl.DataFrame | None = None
        self._main: pl.DataFrame | None = None
        self._dev: GroupSweep | None = None
        self._proc: GroupSweep | None = None
        self._host: RowTimeline | None = None
        self.end = 0

    @property
    def devices(self) -> GroupSweep | None:
        """The sweep of the device groups (None before the first window)."""
        return self._dev

    def add(self, window: Trace) -> pl.DataFrame:
        """Add a window; returns the runs in which each device is active (gi, g, start,
        end), for the analyses that follow the model's sweep (`idle.GapFinder`)."""
        if self.rows is None:
            self.path, self.rows = str(window.path), window.rows
            self._main = _main_rows(window)
            self._dev = _device_sweep(window.rows, DEVICE_GROUP)
            if self.processes:
                self._proc = _device_sweep(window.rows, PROCESS_GROUP)
            self._host = _host_timeline(window.rows, self._main)
        runs = self._dev.add(window)
        if self._proc is not None:
            self._proc.add(window)
        self._host.add(window)
        self.end = window.end
        return runs

    def result(self) -> Analysis:
        if self.rows is None:
            raise ValueError("no window of the trace was given")
        T = self.end
        dev_keys = device_keys(self.rows)
        gpu_rows = self.rows.filter(pl.col("kind") == "gpu")
        proc_keys = (gpu_rows.select("task_index", "task_label").unique().sort("task_index")
                     .with_columns(pl.col("task_index").alias("g"),
                                   pl.col("task_label").alias("name"),
                                   (pl.col("task_index") + 1).alias("task"),
                                   pl.lit(None, pl.Int64).alias("device")))
        devices = _groups(self._dev.result(), dev_keys.select("g", "name", "task", "device"),
                          T)
        processes = _groups(self._proc.result(), proc_keys.select(
            "g", "name", "task", "device"), T) if self._proc is not None else []
        hosts = _hosts(self._main, _host_sums(self._host))
        return Analysis(self.path, T, devices, processes,
                        efficiency(devices, T, "talp"), efficiency(devices, T, "nccl"),
                        hosts, cpu_model(hosts, T))


DEVICE_GROUP = pl.col("task_index") * 1_000_000 + pl.col("device").fill_null(0)
PROCESS_GROUP = pl.col("task_index")


def _analyze(source: Callable[..., Iterable[Trace]], explain: bool, top: int,
             info: TraceInfo | None, observers: Sequence = (),
             steps: Callable[[], pl.DataFrame | None] | None = None,
             detail: bool = True, spill: bool = False, code=None,
             one_pass_code: Callable | None = None) -> Analysis:
    """The model over the windows `source(types=..., comms=...)` gives; with `explain`, the
    gaps and launches on the same pass and the host's causes on a second one
    (`idle.explain`): over the first pass's windows kept on disk with `spill`
    (`idle.WindowSpill`, for a trace that would be read again), else over `source` again;
    without `detail` or `steps`, on the first pass itself (`idle.OnePassCauses`).
    `observers` (objects with `types` and `add(window)`) see every window of the first
    pass too (and, where they have `add_runs(runs, keys)`, the devices' active runs the
    model's sweep found in it), read with their types added (and the communications, for an
    observer whose `comms` is true): one pass serves them all. `steps`,
    called between the passes (when the observers have seen the trace), gives the steps
    (instance, start, end) whose idle causes the second pass sums too. Without `detail`,
    only what a comparison of two runs reads is computed (devices, hosts, the idle causes):
    no per-process groups, launch statistics or NVTX range of each gap; there the causes
    are found on the first pass whatever `steps`, and only where `steps` gives some (the
    run has a step: a comparison's side) does a second pass read `source` again for their
    sums (a run without a step pays nothing for it). `code` (`samples.GapCode`, with
    `detail`) sees the second pass: its types are kept for it; without `detail`,
    `one_pass_code(device keys, rows)` makes an object whose `add(window, ended gaps, idle
    devices)` sees the first pass (`samples.OnePassGapSamples`)."""
    model = ModelSums(processes=detail)
    finder = launches = causes = gap_code = None
    types = frozenset(TYPES.union(*(o.types for o in observers)))
    if explain and detail:  # the launch statistics are per demangled name
        types = types | {cuda.KERNEL_FULL_NAME}
    cause_types = idle.CAUSE_TYPES if detail else idle.CAUSE_TYPES - frozenset(idle.PUSHPOP)
    if code is not None and detail:
        cause_types = cause_types | code.types
    else:
        code = None
    # without the NVTX range of each gap or the steps' sums, the causes are found on this
    # pass (`idle.OnePassCauses`); else on a second one, over what this one kept
    one_pass = explain and not detail
    late_steps = one_pass and steps is not None  # a second pass only if there are steps
    kept = None
    comms = explain or any(getattr(o, "comms", False) for o in observers)
    try:
        if explain and spill and not one_pass:
            try:  # made inside the try that removes it, with Ctrl-C held (lifeline)
                with signals_held():
                    kept = idle.WindowSpill(cause_types)
            except OSError:  # no temporary directory: pass 2 reads the trace again
                pass
        if kept is not None or one_pass:
            types = types | cause_types
        for window in source(types=types, comms=comms):
            for o in observers:
                o.add(window)
            if kept is not None:
                try:
                    kept.add(window)
                except (OSError, pl.exceptions.PolarsError):  # no room: read it again
                    kept = _unspill(kept, finder)
            runs = model.add(window)  # the sweeps ignore the types they do not read
            for o in observers:  # those that read the devices' active runs (utilisation)
                if hasattr(o, "add_runs"):
                    o.add_runs(runs, model.devices.keys)
            if explain:
                if finder is None:
                    # the gaps go beside the spilled windows, else are held for pass 2
                    finder = idle.GapFinder(model.devices, window.rows,
                                            keep=(not one_pass or late_steps)
                                            and kept is None)
                    launches = idle.LaunchStats() if detail else None
                    if one_pass:
                        causes = idle.OnePassCauses(finder, window.rows, top)
                        if one_pass_code is not None:
                            gap_code = one_pass_code(finder.keys, window.rows)
                ended = finder.add(window, runs)
                if kept is not None:
                    try:
                        kept.add_gaps(ended)
                    except OSError:
                        kept = _unspill(kept, finder)
                if causes is not None:
                    causes.add(window, ended)
                if gap_code is not None:
                    gap_code.add(window, ended, finder.idle(window.end))
                if launches is not None:
                    launches.add(window)
        window = None  # the last window is not held through what follows the pass
        result = model.result()
        if finder is not None and result.devices:
            rows = model.rows
            again = source if kept is None else \
                (lambda types, state_rows: kept.windows(types, state_rows))
            buckets = steps() if steps is not None else None
            fold = causes.result() if causes is not None else None
            if late_steps and idle.bucket_sets(buckets):
                fold = None  # the causes again, on a second pass, with the steps' sums
            result.idle = idle.explain(finder, launches, again, result.end, rows,
                                       device_keys(rows), info, top, buckets, nvtx=detail,
                                       fold=fold, spill=kept,
                                       code=code if fold is None else None)
    finally:
        if kept is not None:
            kept.close()
    return result


def _unspill(kept: "idle.WindowSpill", finder: "idle.GapFinder | None") -> None:
    """The spill failed (no room): the gaps it held go back to the finder, which keeps
    them from now on, and pass 2 reads the trace again."""
    if finder is not None:
        for i in range(len(kept._windows)):
            found = kept.gaps_of(i)
            if len(found):
                finder._gaps.append(found[:, 1:])
        finder._keep = True
    kept.close()
    return None


def analyze_windows(windows: Iterable[Trace]) -> Analysis:
    """Per-device and per-process results and both efficiency forms (over devices), from
    the windows of a trace in time order."""
    windows = list(windows) if not isinstance(windows, list) else windows
    return _analyze(lambda **_: iter(windows), False, 0, None)


def analyze_trace(trace: Trace, explain: bool = False, top: int = 10) -> Analysis:
    """The analysis of a trace read whole; `explain` (why the GPUs wait) needs it read with
    `comms=True` and the types of `idle.CAUSE_TYPES` and the kernels' full names too
    (`EXPLAIN_TYPES`: the launch statistics are per demangled name)."""
    info = TraceInfo(trace.path, Layout(trace.path, trace.end, [], trace.rows),
                     *pcf_names(trace.path))
    return _analyze(lambda **_: [trace], explain and trace.comms is not None, top, info)


def analyze_path(path: Source | TraceInfo, explain: bool = True, top: int = 10,
                 observers: Sequence = (),
                 steps: Callable[[], idle.Buckets] | None = None,
                 detail: bool = True, code=None, one_pass_code=None) -> Analysis:
    """The analysis of a trace file, read window by window (memory of one window): the
    model, and with `explain` why the GPUs wait (a second pass, over what the first one
    kept: the trace is read once). `observers` see the
    windows of the first pass, `steps` gives the steps whose idle causes are summed too,
    `detail=False` leaves out what a comparison does not read (see `_analyze`)."""
    from .._alloc import map_large_blocks

    map_large_blocks()
    info = open_trace(path)
    return _analyze(lambda **kw: windows(info, **kw), explain, top, info, observers, steps,
                    detail, spill=True, code=code, one_pass_code=one_pass_code)
