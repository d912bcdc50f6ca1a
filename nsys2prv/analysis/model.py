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

from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from ..paraver.registry import cuda
from .trace import Trace, open_intervals

KERNEL = cuda.CUDA_KERNEL
NCCL_KERNEL = cuda.NCCL_KERNEL
MEMOP = cuda.MEMORY_OPERATION
TYPES = frozenset({KERNEL, NCCL_KERNEL, MEMOP})
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
    """CUDA-runtime share of the main thread of a process (states of its first CPU row)."""

    name: str
    task: int
    main_thread: str
    running: int
    in_cuda: int
    by_state: dict[str, int]
    offload_efficiency: float | None


@dataclass
class Analysis:
    trace: str
    end: int
    devices: list[GroupResult]
    processes: list[GroupResult]
    talp: Efficiency
    nccl: Efficiency
    host: list[HostResult] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _sweep(trace: Trace, group: pl.Expr) -> pl.DataFrame:
    """Constant segments per group: (g, start, dur, K, C, N, A counts of open rows)."""
    rows = trace.rows.select("row", group.alias("g"))
    parts = []
    for name, types in SETS.items():
        iv = open_intervals(trace, types).join(rows, on="row", how="inner")
        zero = {k: pl.lit(0, pl.Int64) for k in SETS}
        parts.append(pl.concat([
            iv.select("g", pl.col("start").alias("t"), **{**zero, name: pl.lit(1, pl.Int64)}),
            iv.select("g", pl.col("end").alias("t"), **{**zero, name: pl.lit(-1, pl.Int64)}),
        ]))
    steps = (pl.concat(parts).group_by("g", "t").agg(pl.col(k).sum() for k in SETS)
             .sort("g", "t"))
    return (steps.with_columns(pl.col(k).cum_sum().over("g") for k in SETS)
            .with_columns((pl.col("t").shift(-1).over("g").fill_null(trace.end) - pl.col("t"))
                          .alias("dur"))
            .rename({"t": "start"}))


def _groups(trace: Trace, seg: pl.DataFrame, keys: pl.DataFrame) -> list[GroupResult]:
    """Classify the segments and sum their durations per group."""
    T = trace.end
    k = pl.col("K")
    c, n, a = pl.col("C"), pl.col("N"), pl.col("A")
    dur = pl.col("dur")
    agg = (seg.group_by("g").agg(
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
    ))
    table = (keys.join(agg, on="g", how="left")
             .with_columns(pl.col(c).fill_null(0) for c in agg.columns if c != "g")
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


def host(trace: Trace) -> list[HostResult]:
    """Per process: the main thread's (first CPU row's) time running vs inside CUDA calls;
    offload efficiency = running / (running + CUDA calls), TALP's Device Offload Efficiency
    with 'useful' = not inside a traced CUDA call."""
    from ..paraver.registry import STATE_BY_VALUE

    main = (trace.rows.filter(pl.col("kind") == "cpu").group_by("task_index")
            .agg(pl.col("row").min(), pl.col("task_label").first(),
                 pl.col("label").sort_by("row").first().alias("thread_label"))
            .sort("task_index"))
    st = (trace.states.join(main.select("row"), on="row", how="inner")
          .with_columns((pl.col("end") - pl.col("begin")).alias("dur"))
          .group_by("row", "state").agg(pl.col("dur").sum()))
    out = []
    for r in main.iter_rows(named=True):
        mine = st.filter(pl.col("row") == r["row"])
        by = {STATE_BY_VALUE[s].label: int(d) for s, d in zip(mine["state"], mine["dur"])
              if s in CUDA_STATES}
        running = int(mine.filter(pl.col("state") == RUNNING)["dur"].sum())
        cuda_t = sum(by.values())
        out.append(HostResult(r["task_label"], r["task_index"] + 1, r["thread_label"],
                              running, cuda_t, by,
                              running / (running + cuda_t) if running + cuda_t else None))
    return out


def analyze_trace(trace: Trace) -> Analysis:
    """Per-device and per-process results and both efficiency forms (over devices)."""
    gpu_rows = trace.rows.filter(pl.col("kind") == "gpu")
    dev_keys = (gpu_rows.select("task_index", "device", "task_label").unique()
                .sort("task_index", "device")
                .with_columns((pl.col("task_index") * 1_000_000 + pl.col("device")).alias("g"),
                              (pl.col("task_label") + " / GPU "
                               + pl.col("device").cast(pl.Utf8)).alias("name"),
                              (pl.col("task_index") + 1).alias("task")))
    proc_keys = (gpu_rows.select("task_index", "task_label").unique().sort("task_index")
                 .with_columns(pl.col("task_index").alias("g"),
                               pl.col("task_label").alias("name"),
                               (pl.col("task_index") + 1).alias("task"),
                               pl.lit(None, pl.Int64).alias("device")))
    dev_seg = _sweep(trace, pl.col("task_index") * 1_000_000 + pl.col("device").fill_null(0))
    proc_seg = _sweep(trace, pl.col("task_index"))
    devices = _groups(trace, dev_seg, dev_keys.select("g", "name", "task", "device"))
    processes = _groups(trace, proc_seg, proc_keys.select("g", "name", "task", "device"))
    return Analysis(str(trace.path), trace.end, devices, processes,
                    efficiency(devices, trace.end, "talp"),
                    efficiency(devices, trace.end, "nccl"), host(trace))
