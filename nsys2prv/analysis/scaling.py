"""Scaling studies: the POP/BSC efficiency model across runs of one program.

For each run (one trace) the single-run model (`model.py`) gives the device parallel
efficiency PE = LB x CE x OE in both forms (TALP-compatible, NCCL-aware) and, where the
trace has MPI, POP's CPU model. Across runs, with the first run (fewest devices) as the
reference r (POP's definitions, research EFFICIENCY.md):

* computational scalability CS = U_r / U, where U is the total useful time of a run (sum
  over its devices, or over its processes for the CPU model); for weak scaling (the work
  per device is constant) CS = (U_r x n / n_r) / U, n the number of devices (processes);
* global efficiency GE = PE x CS;
* speed-up = T_r / T (elapsed trace times; for weak scaling the ideal is 1).

CS below 1 means the runs do more device work in total (more kernels, slower kernels).
What explains it, where the data allows:

* CS = kernel count scalability x time per kernel scalability (NCCL-aware useful time, so
  that only compute kernels count): count = K_r / K (x n / n_r for weak scaling), K the
  number of compute kernels executed; time per kernel = (U_r / K_r) / (U / K);
* the kernel names whose total time grew most against the reference;
* the kernels' GPU metric rates (SM Active, Tensor Active; the trace types
  `gpu_metrics_kernel_rate`, the sample-mixing model's rate of each kernel), as
  time-weighted means over compute kernel time: over all kernels and per kernel name -
  Paraver's 'Average value' of the hwcounters/*_per_kernel.cfg histograms, summed over
  the run's stream rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from ..errors import InputError
from ..paraver.check import parse_pcf
from ..paraver.registry import gpu_metrics
from .model import KERNEL, TYPES, Analysis, ModelSums
from ..paraver.read import Source, Trace, companion, windows

# GPU metrics that explain computational scalability: key -> type on the kernels' rows
KERNEL_METRICS = {
    "sm_active": gpu_metrics.RATE.type_of(gpu_metrics.KNOWN_METRICS["SM Active"]),
    "tensor_active": gpu_metrics.RATE.type_of(
        gpu_metrics.KNOWN_METRICS["Tensor Active"]),
}
METRIC_LABELS = {"sm_active": "SM active", "tensor_active": "tensor active"}
SCALING_TYPES = frozenset(TYPES | set(KERNEL_METRICS.values()))  # what run_of reads


@dataclass
class Run:
    """What one run contributes to a scaling table."""

    label: str
    devices: int
    processes: int
    elapsed: int  # trace time (ns)
    useful_talp: int  # device useful time, summed over devices (ns)
    useful_nccl: int
    analysis: Analysis
    kernels: int  # compute kernels executed
    kernel_time: dict[str, int] = field(default_factory=dict)  # per compute kernel name (ns)
    cpu_useful: int | None = None  # summed over processes, where the trace has MPI
    # metric key -> mean % over all compute kernel time, and per compute kernel name
    metrics: dict[str, float] = field(default_factory=dict)
    kernel_metrics: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class Column:
    """The scaling table's column of one run (efficiencies as fractions, None if undefined)."""

    label: str
    devices: int
    processes: int
    elapsed_ms: float
    speedup: float | None
    talp: dict[str, float | None]  # parallel, load_balance, communication, orchestration,
    nccl: dict[str, float | None]  # computational_scalability, global
    cpu: dict[str, float | None] | None
    kernels: int
    kernel_count_scalability: float | None  # CS (NCCL-aware) = count x time per kernel
    time_per_kernel_scalability: float | None
    metrics: dict[str, float | None]  # sm_active, tensor_active: % over compute kernel time
    offload: float | None  # mean device offload efficiency of the processes' main threads
    # kernel names whose total time grew most: (name, ms vs ref, {metric: (ref %, run %)})
    losers: list[tuple[str, float, dict[str, tuple[float | None, float | None]]]]
    split: dict[str, float]  # mean % of T per device (per process, CPU-only): useful/comm/idle


def per_kernel(trace: Trace, metric: int | None = None) -> pl.DataFrame:
    """Per compute kernel value: the `time` kernels with it ran (summed over rows) and, with
    `metric`, the `area` of that type under them. On every row the kernel name and the
    metric are each the last event of their type (Paraver's Last Evt Val); each segment
    between events adds its length, and value x length, to its kernel name - 'Average
    value' with the kernel name as the control window."""
    types = [KERNEL] if metric is None else [KERNEL, metric]
    value = (pl.when(pl.col("type") == metric).then(pl.col("value")).forward_fill()
             .over("row").fill_null(0) if metric is not None else pl.lit(0))
    return (trace.events.filter(pl.col("type").is_in(types))
            .sort("row", "time", "seq")
            .with_columns(
                pl.when(pl.col("type") == KERNEL).then(pl.col("value"))
                .forward_fill().over("row").alias("kernel"),
                value.alias("metric"),
                (pl.col("time").shift(-1).over("row").fill_null(trace.end)
                 - pl.col("time")).alias("dt"))
            .filter(pl.col("kernel").is_not_null() & (pl.col("kernel") != 0))
            .group_by("kernel")
            .agg((pl.col("metric") * pl.col("dt")).sum().alias("area"),
                 pl.col("dt").sum().alias("time"))
            .sort("kernel"))


class KernelSums:
    """Per compute kernel name, additive over the windows of a trace: time, and the area of
    each GPU metric of `types` present in the trace; the number of compute kernels run."""

    def __init__(self, types: dict[str, int] = KERNEL_METRICS) -> None:
        self.types = types
        self._time: list[pl.DataFrame] = []
        self._area: dict[str, list[pl.DataFrame]] = {key: [] for key in types}
        self.kernels = 0

    def add(self, window: Trace) -> None:
        self._time.append(per_kernel(window))
        present = set(window.events["type"].unique().to_list())
        for key, ty in self.types.items():
            if ty in present:
                self._area[key].append(per_kernel(window, ty))
        self.kernels += window.events.slice(window.carried).filter(
            (pl.col("type") == KERNEL) & (pl.col("value") != 0)).height

    @staticmethod
    def _sum(parts: list[pl.DataFrame]) -> pl.DataFrame:
        return (pl.concat(parts).group_by("kernel").agg(pl.col("area").sum(),
                                                         pl.col("time").sum())
                .sort("kernel"))

    def kernel_time(self, names: dict[int, str]) -> dict[str, int]:
        per = self._sum(self._time)
        return {names.get(v, str(v)): int(t) for v, t in zip(per["kernel"], per["time"])}

    def metric_means(self, names: dict[int, str]
                     ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """Time-weighted mean of each metric (in its unit) over compute kernel time: over
        all kernels, and per kernel name. Metrics without events in the trace are left
        out."""
        overall: dict[str, float] = {}
        per_name: dict[str, dict[str, float]] = {}
        scale = gpu_metrics.SCALE
        for key, parts in self._area.items():
            if not parts:
                continue
            per = self._sum(parts).filter(pl.col("time") > 0)
            area, time = int(per["area"].sum() or 0), int(per["time"].sum() or 0)
            if time:
                overall[key] = area / time / scale
            for v, a, t in zip(per["kernel"], per["area"], per["time"]):
                per_name.setdefault(names.get(v, str(v)), {})[key] = a / t / scale
        return overall, per_name


def kernel_metric_means(trace: Trace, names: dict[int, str],
                        types: dict[str, int] = KERNEL_METRICS
                        ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """`KernelSums.metric_means` of a trace read whole."""
    sums = KernelSums(types)
    sums.add(trace)
    return sums.metric_means(names)


def run_of(source: Trace | Iterable[Trace], label: str) -> Run:
    """Analyse one trace for the scaling table: read whole (with `SCALING_TYPES`), or as
    its windows (`trace.windows`, one pass)."""
    model, kernels = ModelSums(), KernelSums()
    first = None
    for window in [source] if isinstance(source, Trace) else source:
        first = first or window
        model.add(window)
        kernels.add(window)
    if first is None:
        raise ValueError("no window of the trace was given")
    a = model.result()
    names: dict[int, str] = {}
    pcf = companion(first.path, ".pcf")
    if pcf.exists():
        names = parse_pcf(pcf.read_text(errors="replace"))[0].get(KERNEL, {})
    metrics, kernel_metrics = kernels.metric_means(names)
    return Run(label, len(a.devices), len(a.host) or len(a.processes), a.end,
               sum(g.useful_talp for g in a.devices), sum(g.useful_nccl for g in a.devices),
               a, kernels.kernels, kernels.kernel_time(names),
               sum(a.cpu.useful) if a.cpu is not None else None, metrics, kernel_metrics)


def run_of_path(path: Source, label: str) -> Run:
    """`run_of` a trace (a file or a stream), window by window (memory of one window)."""
    return run_of(windows(path, SCALING_TYPES), label)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _size_ratio(n: int, n_ref: int, weak: bool) -> float:
    """n / n_r for weak scaling (the reference's work grown to this run's size), else 1."""
    return n / n_ref if weak and n_ref else 1.0


def _scal(u_ref: float, u: float, size_ratio: float) -> float | None:
    if not u or not u_ref:
        return None
    return u_ref * size_ratio / u


def table(runs: list[Run], weak: bool = False) -> list[Column]:
    """The scaling columns, ordered by device count (process count for CPU-only runs);
    the first is the reference."""
    runs = sorted(runs, key=lambda r: (r.devices or r.processes, r.processes, r.label))
    gpu = [r.label for r in runs if r.devices]
    if gpu and len(gpu) < len(runs):
        cpu = [r.label for r in runs if not r.devices]
        raise InputError(f"runs with GPU activity ({', '.join(gpu)}) and without "
                         f"({', '.join(cpu)}) are not one scaling study")
    ref = runs[0]
    out = []
    for r in runs:
        per_device = _size_ratio(r.devices, ref.devices, weak)
        per_process = _size_ratio(r.processes, ref.processes, weak)
        forms = {}
        for form, u, u_ref in (("talp", r.useful_talp, ref.useful_talp),
                               ("nccl", r.useful_nccl, ref.useful_nccl)):
            e = getattr(r.analysis, form)
            cs = _scal(u_ref, u, per_device) if r.devices else None
            forms[form] = {"parallel": e.parallel, "load_balance": e.load_balance,
                           "communication": e.communication,
                           "orchestration": e.orchestration,
                           "computational_scalability": cs,
                           "global": e.parallel * cs if e.parallel is not None
                           and cs is not None else None}
        cpu = None
        c = r.analysis.cpu
        if c is not None and r.cpu_useful is not None and ref.cpu_useful:
            cs = _scal(ref.cpu_useful, r.cpu_useful, per_process)
            cpu = {"parallel": c.parallel, "load_balance": c.load_balance,
                   "load_balance_additive": c.load_balance_additive,
                   "communication": c.communication, "computational_scalability": cs,
                   "global": c.parallel * cs if c.parallel is not None and cs is not None
                   else None}
        offs = [h.offload_efficiency for h in r.analysis.host
                if h.offload_efficiency is not None]
        expect = per_device if r.devices else per_process
        grown = sorted(((name, (t - expect * ref.kernel_time.get(name, 0)) / 1e6,
                         {k: (ref.kernel_metrics.get(name, {}).get(k),
                              r.kernel_metrics.get(name, {}).get(k))
                          for k in KERNEL_METRICS if k in r.metrics or k in ref.metrics})
                        for name, t in r.kernel_time.items()), key=lambda kv: -kv[1])
        count = time_per = None
        if r.devices and r.kernels and ref.kernels and r.useful_nccl and ref.useful_nccl:
            count = ref.kernels * per_device / r.kernels
            time_per = (ref.useful_nccl / ref.kernels) / (r.useful_nccl / r.kernels)
        T = r.elapsed or 1
        if r.analysis.devices:
            ds = r.analysis.devices
            useful = 100 * sum(g.useful_talp for g in ds) / (len(ds) * T)
            comm = 100 * sum(g.comm_talp for g in ds) / (len(ds) * T)
        else:
            hs = r.analysis.host or []
            n = max(len(hs), 1)
            useful = 100 * (r.cpu_useful or 0) / (n * T)
            comm = 100 * sum(h.in_mpi for h in hs) / (n * T)
        split = {"useful": useful, "communication": comm,
                 "idle": max(0.0, 100 - useful - comm)}
        out.append(Column(r.label, r.devices, r.processes, r.elapsed / 1e6,
                          _ratio(ref.elapsed, r.elapsed), forms["talp"], forms["nccl"], cpu,
                          r.kernels, count, time_per,
                          {k: r.metrics.get(k) for k in KERNEL_METRICS},
                          sum(offs) / len(offs) if offs else None,
                          [g for g in grown[:3] if g[1] > 0] if r is not ref else [], split))
    return out


def to_dicts(columns: list[Column]) -> list[dict]:
    return [asdict(c) for c in columns]


def _form_rows(form: str, title: str) -> list:
    def get(key: str):
        return lambda c: getattr(c, form)[key]

    return [(f"global efficiency ({title})", get("global")),
            ("  parallel efficiency", get("parallel")),
            ("    load balance", get("load_balance")),
            ("    communication efficiency", get("communication")),
            ("    orchestration efficiency", get("orchestration")),
            ("  computational scalability", get("computational_scalability"))]


ROWS = [  # (label, getter)
    ("devices", lambda c: c.devices),
    ("processes", lambda c: c.processes),
    ("elapsed time (ms)", lambda c: c.elapsed_ms),
    ("speed-up", lambda c: c.speedup),
    *_form_rows("talp", "TALP form"),
    *_form_rows("nccl", "NCCL-aware form"),
    ("compute kernels", lambda c: c.kernels),
    ("  kernel count scalability", lambda c: c.kernel_count_scalability),
    ("  time per kernel scalability", lambda c: c.time_per_kernel_scalability),
    ("SM active during kernels (%)", lambda c: c.metrics["sm_active"]),
    ("tensor active during kernels (%)", lambda c: c.metrics["tensor_active"]),
    ("device offload efficiency (host)", lambda c: c.offload),
    ("CPU global efficiency (POP, MPI)", lambda c: c.cpu and c.cpu["global"]),
    ("  parallel efficiency", lambda c: c.cpu and c.cpu["parallel"]),
    ("    load balance", lambda c: c.cpu and c.cpu["load_balance"]),
    ("    (additive, as pypop)", lambda c: c.cpu and c.cpu["load_balance_additive"]),
    ("    communication efficiency", lambda c: c.cpu and c.cpu["communication"]),
    ("  computational scalability", lambda c: c.cpu and c.cpu["computational_scalability"]),
]
_COUNTS = {"devices", "processes", "compute kernels"}
EFFICIENCY_ROWS = {i for i, (label, _) in enumerate(ROWS)
                   if "efficiency" in label or "balance" in label or "scalability" in label}


def _cell(label: str, v, colour: bool, is_eff: bool, width: int = 10) -> str:
    if v is None:
        return f"{'-':>{width}}"
    if label in _COUNTS:
        return f"{int(v):>{width}d}"
    text = f"{v:>{width}.2f}"
    if colour and is_eff:  # POP's convention: green >= 0.8, yellow >= 0.6, red below
        code = "32" if v >= 0.8 else "33" if v >= 0.6 else "31"
        return f"\033[{code}m{text}\033[0m"
    return text


def _metric_change(metrics: dict[str, tuple[float | None, float | None]]) -> str:
    """' (SM active 90.0 -> 60.0 %, ...)' for the metrics known in both runs."""
    parts = [f"{METRIC_LABELS[k]} {a:.1f} -> {b:.1f} %" for k, (a, b) in metrics.items()
             if a is not None and b is not None]
    return f" ({', '.join(parts)})" if parts else ""


_SEPARATORS = "/_.-*"


def column_names(labels: list[str], limit: int = 24) -> list[str]:
    """Column heads of at most `limit` characters. The directories all runs share are
    dropped; labels still too long lose the end all runs share (from a separator on: the
    '_rank*.nsys2023.4.sqlite' of globs), then the start they share (up to a separator),
    and are cut on the left only if still too long."""
    def fits(names: list[str]) -> bool:
        return all(len(n) <= limit for n in names)

    def distinct(names: list[str]) -> bool:
        return all(names) and len(set(names)) == len(names)

    out = list(labels)
    if len(out) > 1:
        prefix = os.path.commonprefix(out)
        cut = prefix.rfind("/") + 1
        if cut and distinct([n[cut:] for n in out]):
            out = [n[cut:] for n in out]
        if not fits(out):
            suffix = os.path.commonprefix([n[::-1] for n in out])[::-1]
            while suffix and suffix[0] not in _SEPARATORS:
                suffix = suffix[1:]
            cand = [n[: len(n) - len(suffix)] for n in out]
            if distinct(cand):
                out = cand
        if not fits(out):
            prefix = os.path.commonprefix(out)
            cut = max(prefix.rfind(c) for c in _SEPARATORS) + 1
            cand = [n[cut:] for n in out]
            if cut and distinct(cand):
                out = cand
    return [n if len(n) <= limit else "…" + n[-(limit - 1):] for n in out]


def format_table(columns: list[Column], weak: bool = False, colour: bool = False) -> str:
    names = column_names([c.label for c in columns])
    width = max(10, max(len(n) for n in names) + 2)
    head = f"{'':<38}" + "".join(f"{n:>{width}}" for n in names)
    out = [f"### nsys2prv analyze --scaling ({'weak' if weak else 'strong'} scaling; "
           f"reference: {columns[0].label})", head]
    for i, (label, get) in enumerate(ROWS):
        vals = [get(c) for c in columns]
        if all(v is None for v in vals) or (label in ("devices", "compute kernels")
                                            and not any(vals)):
            continue
        out.append(f"{label:<38}" + "".join(_cell(label, v, colour, i in EFFICIENCY_ROWS, width)
                                             for v in vals))
    for i, c in enumerate(columns):
        if i and c.losers:
            out.append(f"kernel time grown most in {names[i]} vs {names[0]}: "
                       + "; ".join(f"{n[:50]} +{ms:.3f} ms{_metric_change(m)}"
                                   for n, ms, m in c.losers))
    return "\n".join(out) + "\n"


def format_csv(columns: list[Column]) -> str:
    names = column_names([c.label for c in columns], limit=1000)
    lines = ["row," + ",".join(n.replace(",", " ") for n in names)]
    for label, get in ROWS:
        vals = [get(c) for c in columns]
        if all(v is None for v in vals):
            continue
        lines.append(label.strip() + "," + ",".join("" if v is None else f"{v:.6g}"
                                                    for v in vals))
    return "\n".join(lines) + "\n"


def plot(columns: list[Column], path: str | Path | None):
    """Efficiency lines against the device (process) count (with the sampled SM / tensor
    activity during kernels, dashed, where present) and a stacked bar per run of where
    device time goes (useful / communication / idle, TALP form, % of devices x T)."""
    from .plot import COLOURS, pyplot, shown

    plt = pyplot()
    xs = [c.devices or c.processes for c in columns]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    series = [("global efficiency", lambda c: c.talp["global"]),
              ("parallel efficiency", lambda c: c.talp["parallel"]),
              ("load balance", lambda c: c.talp["load_balance"]),
              ("communication eff.", lambda c: c.talp["communication"]),
              ("orchestration eff.", lambda c: c.talp["orchestration"]),
              ("computational scalability", lambda c: c.talp["computational_scalability"])]
    if all(c.devices == 0 for c in columns):  # CPU-only runs: POP's CPU model
        series = [(name, (lambda key: lambda c: c.cpu and c.cpu[key])(key)) for name, key in
                  (("global efficiency", "global"), ("parallel efficiency", "parallel"),
                   ("load balance", "load_balance"),
                   ("communication eff.", "communication"),
                   ("computational scalability", "computational_scalability"))]
    markers = "oDs^vP"  # distinct, shrinking: equal values stay visible as nested markers
    for i, (name, get) in enumerate(series):
        ys = [get(c) for c in columns]
        if all(y is None for y in ys):
            continue
        ax1.plot(xs, [y if y is not None else float("nan") for y in ys], marker=markers[i],
                 markersize=11 - 1.2 * i, label=name,
                 linewidth=2.5 if name == "global efficiency" else 1.5)
    for key in KERNEL_METRICS:  # sampled GPU metrics during the kernels, as fractions
        ys = [c.metrics.get(key) for c in columns]
        if any(y is not None for y in ys):
            ax1.plot(xs, [y / 100 if y is not None else float("nan") for y in ys],
                     linestyle="--", marker="s", markersize=4,
                     label=f"{METRIC_LABELS[key]} during kernels (/100)")
    ax1.axhspan(0.8, 1.05, color="#d9f2d9", zorder=0)
    ax1.axhspan(0.6, 0.8, color="#fff5cc", zorder=0)
    ax1.set_ylim(0, 1.05)
    ax1.set_xticks(xs)
    ax1.set_xlabel("devices" if any(c.devices for c in columns) else "processes")
    ax1.set_ylabel("efficiency")
    ax1.set_title("Efficiency model across runs (TALP form)")
    ax1.legend(fontsize="small", loc="lower left")
    labels = [f"{n}\n({x})" for n, x in zip(column_names([c.label for c in columns]), xs)]
    bottom = [0.0] * len(columns)
    for name in ("useful", "communication", "idle"):
        vals = [c.split[name] for c in columns]
        ax2.bar(labels, vals, bottom=bottom, color=COLOURS[name], label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_ylabel("% of elapsed time, mean per device (process)")
    ax2.set_title("Where device time goes per run")
    ax2.legend(fontsize="small")
    if path is None:  # a notebook shows the figure
        return shown(plt, fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)

