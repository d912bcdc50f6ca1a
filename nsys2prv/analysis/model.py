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

Everything is one vectorised sweep: per-row open intervals of each type set become +1/-1
steps, summed per group (process or device) and time, cumulated, and each constant segment
is classified. Groups are computed twice: per process (what the task-level cfgs show in
Paraver, compared with paramedir in the tests) and per device = (process, GPU id from the row
label), which is exact also when one process drives several GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl

from ..paraver.registry import cuda
from ..paraver.registry import STATE_BY_VALUE, STATE_NOT_CREATED
from ..paraver.registry import mpi as mpi_reg
from ..paraver.read import Source, Trace, companion, source_path, windows
from . import idle
from .intervals import open_intervals, overlap_time, total_time

KERNEL = cuda.CUDA_KERNEL
NCCL_KERNEL = cuda.NCCL_KERNEL
MEMOP = cuda.MEMORY_OPERATION
CUDA_CALL = cuda.CUDA_CALL
MPI_CALLS = tuple(mpi_reg.CALL_TYPES)
TYPES = frozenset({KERNEL, NCCL_KERNEL, MEMOP, CUDA_CALL, *MPI_CALLS})
# indicator sets, as in the cfgs: K kernels (NCCL included), C compute, N NCCL, A any activity
SETS = {"K": (KERNEL, NCCL_KERNEL), "C": (KERNEL,), "N": (NCCL_KERNEL,),
        "A": (KERNEL, NCCL_KERNEL, MEMOP)}
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


def _steps(trace: Trace) -> pl.DataFrame:
    """+1 where an interval of an indicator set opens on a row, -1 where it closes (columns
    K, C, N, A), in time order; computed once per window for both the device and the
    process sweep."""
    parts = []
    zero = {k: pl.lit(0, pl.Int8) for k in SETS}
    for name, types in SETS.items():
        iv = open_intervals(trace, types)
        parts += [iv.select("row", pl.col("start").alias("t"),
                            **{**zero, name: pl.lit(1, pl.Int8)}),
                  iv.select("row", pl.col("end").alias("t"),
                            **{**zero, name: pl.lit(-1, pl.Int8)})]
    return pl.concat(parts).sort("t")


def _sweep(trace: Trace, steps: pl.DataFrame, group: pl.Expr) -> pl.DataFrame:
    """Constant segments per group: (g, start, dur, K, C, N, A counts of open rows). Steps
    at one time need no summing first: the segments between them are empty."""
    rows = trace.rows.select("row", group.alias("g"))
    g = pl.col("row").replace_strict(rows["row"], rows["g"], default=None)
    return (steps.with_columns(g.alias("g")).filter(pl.col("g").is_not_null())
            .with_columns(pl.col(k).cast(pl.Int64).cum_sum().over("g") for k in SETS)
            .with_columns((pl.col("t").shift(-1).over("g").fill_null(trace.end) - pl.col("t"))
                          .alias("dur"))
            .rename({"t": "start"}))


def _segment_sums(seg: pl.DataFrame) -> pl.DataFrame:
    """Per group, the time of each class of segment (additive over time windows)."""
    k = pl.col("K")
    c, n, a = pl.col("C"), pl.col("N"), pl.col("A")
    dur = pl.col("dur")
    return seg.group_by("g").agg(
        (dur * (k > 0)).sum().alias("useful_talp"),
        (dur * ((a > 0) & (k == 0))).sum().alias("comm_talp"),
        (dur * (c > 0)).sum().alias("useful_nccl"),
        (dur * ((a > 0) & (c == 0))).sum().alias("comm_nccl"),
        (dur * (a > 0)).sum().alias("active"),
        (dur * (n > 0)).sum().alias("nccl_time"),
        (dur * ((n > 0) & (c > 0))).sum().alias("hidden_comm"),
        *((dur * (k.clip(upper_bound=CAP) == lv)).sum().alias(f"l{lv}")
          for lv in range(1, CAP + 1)),
        *((dur * ((n > 0) & (k.clip(upper_bound=CAP) == lv))).sum().alias(f"lc{lv}")
          for lv in range(1, CAP + 1)),
    )


def _add(parts: list[pl.DataFrame], keys: list[str]) -> pl.DataFrame:
    """Sum per key the additive frames of several windows."""
    return pl.concat(parts).group_by(keys).agg(pl.all().sum())


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


def _host_sums(trace: Trace, main: pl.DataFrame) -> pl.DataFrame:
    """Per main row, additive over time windows: time running, alive (not 'Not created'),
    inside MPI calls, in each CUDA-call state while a CUDA call is open (`s<state>`), and
    the number of CUDA calls open in the window (`cuda`: did the thread make any)."""
    rows = main.select("row")
    states = (trace.states.join(rows, on="row", how="inner")
              .select("row", pl.col("begin").alias("start"), "end", "state"))
    cuda_calls = open_intervals(trace, (CUDA_CALL,)).join(rows, on="row", how="inner")
    mpi_calls = open_intervals(trace, MPI_CALLS).join(rows, on="row", how="inner")
    # CUDA-call states while a CUDA call is open: one sweep over the main rows
    in_cuda = overlap_time(states.filter(pl.col("state").is_in(CUDA_STATES)), cuda_calls,
                           ["row"], label="state")
    dur = pl.col("end") - pl.col("start")
    parts = [
        states.group_by("row").agg(
            dur.filter(pl.col("state") == RUNNING).sum().alias("running"),
            dur.filter(pl.col("state") != STATE_NOT_CREATED).sum().alias("alive")),
        total_time(mpi_calls, ["row"]).rename({"time": "in_mpi"}),
        cuda_calls.group_by("row").agg(pl.len().cast(pl.Int64).alias("cuda")),
        *(in_cuda.filter(pl.col("state") == s).select("row", pl.col("time").alias(f"s{s}"))
          for s in CUDA_STATES),
    ]
    columns = ["running", "alive", "in_mpi", "cuda", *(f"s{s}" for s in CUDA_STATES)]
    out = rows
    for part in parts:
        out = out.join(part, on="row", how="left")
    return out.select("row", *(pl.col(c).cast(pl.Int64).fill_null(0) for c in columns))


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
    return _hosts(main, _host_sums(trace, main))


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


def gpu_row_groups(rows: pl.DataFrame) -> pl.DataFrame:
    """(row, g): the device group of every GPU stream row."""
    return rows.filter(pl.col("kind") == "gpu").select("row", DEVICE_GROUP.alias("g"))


class ModelSums:
    """The model's additive sums over the windows of one trace (`trace.windows`): feed
    every window to `add`, then `result`. A trace read whole is one window."""

    def __init__(self, processes: bool = True) -> None:
        self.processes = processes  # False: the per-process groups are not summed
        self._dev: list[pl.DataFrame] = []
        self._proc: list[pl.DataFrame] = []
        self._host: list[pl.DataFrame] = []
        self._first: Trace | None = None
        self._main: pl.DataFrame | None = None
        self.end = 0

    def add(self, window: Trace) -> pl.DataFrame:
        """Add a window; returns its device segments (g, start, dur, K, C, N, A) for the
        analyses that follow the model's sweep (`idle.GapFinder`)."""
        if self._first is None:
            self._first = window
            self._main = _main_rows(window)
        steps = _steps(window)
        device_segments = _sweep(window, steps, DEVICE_GROUP)
        self._dev.append(_segment_sums(device_segments))
        if self.processes:
            self._proc.append(_segment_sums(_sweep(window, steps, PROCESS_GROUP)))
        self._host.append(_host_sums(window, self._main))
        self.end = window.end
        return device_segments

    def result(self) -> Analysis:
        trace = self._first
        if trace is None:
            raise ValueError("no window of the trace was given")
        T = self.end
        dev_keys = device_keys(trace.rows)
        gpu_rows = trace.rows.filter(pl.col("kind") == "gpu")
        proc_keys = (gpu_rows.select("task_index", "task_label").unique().sort("task_index")
                     .with_columns(pl.col("task_index").alias("g"),
                                   pl.col("task_label").alias("name"),
                                   (pl.col("task_index") + 1).alias("task"),
                                   pl.lit(None, pl.Int64).alias("device")))
        devices = _groups(_add(self._dev, ["g"]), dev_keys.select("g", "name", "task",
                                                                    "device"), T)
        processes = _groups(_add(self._proc, ["g"]), proc_keys.select(
            "g", "name", "task", "device"), T) if self.processes else []
        hosts = _hosts(self._main, _add(self._host, ["row"]))
        return Analysis(str(trace.path), T, devices, processes,
                        efficiency(devices, T, "talp"), efficiency(devices, T, "nccl"),
                        hosts, cpu_model(hosts, T))


DEVICE_GROUP = pl.col("task_index") * 1_000_000 + pl.col("device").fill_null(0)
PROCESS_GROUP = pl.col("task_index")


def _analyze(source: Callable[..., Iterable[Trace]], explain: bool, top: int,
             pcf: Path | None, observers: Sequence = (),
             steps: Callable[[], pl.DataFrame | None] | None = None,
             detail: bool = True, spill: bool = False) -> Analysis:
    """The model over the windows `source(types=..., comms=...)` gives; with `explain`, the
    gaps and launches on the same pass and the host's causes on a second one
    (`idle.explain`): over the first pass's windows kept on disk with `spill`
    (`idle.WindowSpill`, for a trace that would be read again), else over `source` again.
    `observers` (objects with `types` and `add(window)`) see every window of the first
    pass too, read with their types added (and the communications, for an
    observer whose `comms` is true): one pass serves them all. `steps`,
    called between the passes (when the observers have seen the trace), gives the steps
    (instance, start, end) whose idle causes the second pass sums too. Without `detail`,
    only what a comparison of two runs reads is computed (devices, hosts, the idle causes):
    no per-process groups, launch statistics or NVTX range of each gap."""
    model = ModelSums(processes=detail)
    finder = launches = None
    types = frozenset(TYPES.union(*(o.types for o in observers)))
    cause_types = idle.CAUSE_TYPES if detail else idle.CAUSE_TYPES - frozenset(idle.PUSHPOP)
    kept = None
    if explain and spill:
        try:
            kept = idle.WindowSpill(cause_types)
        except OSError:  # no temporary directory: pass 2 reads the trace again
            pass
    if kept is not None:
        types = types | cause_types
    comms = explain or any(getattr(o, "comms", False) for o in observers)
    try:
        for window in source(types=types, comms=comms):
            for o in observers:
                o.add(window)
            if kept is not None:
                try:
                    kept.add(window)
                except (OSError, pl.exceptions.PolarsError):  # no room: read it again
                    kept.close()
                    kept = None
            if types != TYPES:  # the model sees what it would have read alone
                keep = window.events["type"].is_in(list(TYPES))
                window = replace(window, events=window.events.filter(keep),
                                 carried=int(keep.head(window.carried).sum()))
            device_segments = model.add(window)
            if explain:
                if finder is None:
                    finder = idle.GapFinder(gpu_row_groups(window.rows))
                    launches = idle.LaunchStats() if detail else None
                finder.add(window, device_segments)
                if launches is not None:
                    launches.add(window)
        result = model.result()
        if finder is not None and result.devices:
            rows = model._first.rows if model._first is not None else None
            again = source if kept is None else \
                (lambda types, state_rows: kept.windows(types, state_rows))
            result.idle = idle.explain(finder, launches, again, result.end, rows,
                                       device_keys(rows), pcf, top,
                                       steps() if steps is not None else None, nvtx=detail)
    finally:
        if kept is not None:
            kept.close()
    return result


def analyze_windows(windows: Iterable[Trace]) -> Analysis:
    """Per-device and per-process results and both efficiency forms (over devices), from
    the windows of a trace in time order."""
    windows = list(windows) if not isinstance(windows, list) else windows
    return _analyze(lambda **_: iter(windows), False, 0, None)


def analyze_trace(trace: Trace, explain: bool = False, top: int = 10) -> Analysis:
    """The analysis of a trace read whole; `explain` (why the GPUs wait) needs it read with
    `comms=True` and the types of `idle.CAUSE_TYPES` too."""
    return _analyze(lambda **_: [trace], explain and trace.comms is not None, top,
                    companion(trace.path, ".pcf"))


def analyze_path(path: Source, explain: bool = True, top: int = 10,
                 observers: Sequence = (),
                 steps: Callable[[], pl.DataFrame | None] | None = None,
                 detail: bool = True) -> Analysis:
    """The analysis of a trace file, read window by window (memory of one window): the
    model, and with `explain` why the GPUs wait (a second pass, over what the first one
    kept: the trace is read once). `observers` see the
    windows of the first pass, `steps` gives the steps whose idle causes are summed too,
    `detail=False` leaves out what a comparison does not read (see `_analyze`)."""
    return _analyze(lambda **kw: windows(path, **kw), explain, top,
                    companion(source_path(path), ".pcf"), observers, steps, detail,
                    spill=True)
