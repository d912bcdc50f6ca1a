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

CS below 1 means the runs do more device work in total (more kernels, slower kernels):
`kernels` and `kernel_time` say where, per compute kernel name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from ..paraver.check import parse_pcf
from .model import KERNEL, Analysis, analyze_trace
from .trace import Trace


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
    offload: float | None  # mean device offload efficiency of the processes' main threads
    losers: list[tuple[str, float]]  # kernel names whose total time grew most (ms vs ref)
    split: dict[str, float]  # mean % of T per device (per process, CPU-only): useful/comm/idle


def run_of(trace: Trace, label: str) -> Run:
    """Analyse one trace for the scaling table."""
    a = analyze_trace(trace)
    names: dict[int, str] = {}
    pcf = trace.path.with_suffix("").with_suffix(".pcf") if trace.path.suffix == ".gz" \
        else trace.path.with_suffix(".pcf")
    if pcf.exists():
        names = parse_pcf(pcf.read_text(errors="replace"))[0].get(KERNEL, {})
    ev = trace.events.filter(pl.col("type") == KERNEL).sort("row", "time", "seq")
    ev = ev.with_columns(pl.col("time").shift(-1).over("row").fill_null(trace.end)
                         .alias("next"))
    starts = ev.filter(pl.col("value") != 0)
    per = (starts.group_by("value").agg((pl.col("next") - pl.col("time")).sum().alias("t"))
           .sort("value"))
    kernel_time = {names.get(v, str(v)): int(t) for v, t in zip(per["value"], per["t"])}
    return Run(label, len(a.devices), len(a.host) or len(a.processes), a.end,
               sum(g.useful_talp for g in a.devices), sum(g.useful_nccl for g in a.devices),
               a, starts.height, kernel_time,
               sum(a.cpu.useful) if a.cpu is not None else None)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _scal(u_ref: float, u: float, n_ref: int, n: int, weak: bool) -> float | None:
    if not u:
        return None
    return (u_ref * (n / n_ref if weak and n_ref else 1.0)) / u


def table(runs: list[Run], weak: bool = False) -> list[Column]:
    """The scaling columns, ordered by device count (process count for CPU-only runs);
    the first is the reference."""
    runs = sorted(runs, key=lambda r: (r.devices or r.processes, r.processes, r.label))
    ref = runs[0]
    out = []
    for r in runs:
        forms = {}
        for form, u, u_ref in (("talp", r.useful_talp, ref.useful_talp),
                               ("nccl", r.useful_nccl, ref.useful_nccl)):
            e = getattr(r.analysis, form)
            cs = _scal(u_ref, u, ref.devices, r.devices, weak) if r.devices else None
            forms[form] = {"parallel": e.parallel, "load_balance": e.load_balance,
                           "communication": e.communication,
                           "orchestration": e.orchestration,
                           "computational_scalability": cs,
                           "global": e.parallel * cs if e.parallel is not None
                           and cs is not None else None}
        cpu = None
        c = r.analysis.cpu
        if c is not None and r.cpu_useful is not None and ref.cpu_useful:
            cs = _scal(ref.cpu_useful, r.cpu_useful, ref.processes, r.processes, weak)
            cpu = {"parallel": c.parallel, "load_balance": c.load_balance,
                   "load_balance_additive": c.load_balance_additive,
                   "communication": c.communication, "computational_scalability": cs,
                   "global": c.parallel * cs if c.parallel is not None and cs is not None
                   else None}
        offs = [h.offload_efficiency for h in r.analysis.host
                if h.offload_efficiency is not None]
        grown = sorted(((name, (t - ref.kernel_time.get(name, 0)) / 1e6)
                        for name, t in r.kernel_time.items()), key=lambda kv: -kv[1])
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
                          r.kernels, sum(offs) / len(offs) if offs else None,
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


def _cell(label: str, v, colour: bool, is_eff: bool) -> str:
    if v is None:
        return f"{'-':>10}"
    if label in _COUNTS:
        return f"{int(v):>10d}"
    text = f"{v:>10.2f}"
    if colour and is_eff:  # POP's convention: green >= 0.8, yellow >= 0.6, red below
        code = "32" if v >= 0.8 else "33" if v >= 0.6 else "31"
        return f"\033[{code}m{text}\033[0m"
    return text


def format_table(columns: list[Column], weak: bool = False, colour: bool = False) -> str:
    head = f"{'':<38}" + "".join(f"{c.label[-10:]:>10}" for c in columns)
    out = [f"### nsys2prv analyze --scaling ({'weak' if weak else 'strong'} scaling; "
           f"reference: {columns[0].label})", head]
    for i, (label, get) in enumerate(ROWS):
        vals = [get(c) for c in columns]
        if all(v is None for v in vals) or (label in ("devices", "compute kernels")
                                            and not any(vals)):
            continue
        out.append(f"{label:<38}" + "".join(_cell(label, v, colour, i in EFFICIENCY_ROWS)
                                             for v in vals))
    for c in columns[1:]:
        if c.losers:
            out.append(f"kernel time grown most in {c.label} vs {columns[0].label}: "
                       + "; ".join(f"{n[:50]} +{ms:.3f} ms" for n, ms in c.losers))
    return "\n".join(out) + "\n"


def format_csv(columns: list[Column]) -> str:
    lines = ["row," + ",".join(c.label.replace(",", " ") for c in columns)]
    for label, get in ROWS:
        vals = [get(c) for c in columns]
        if all(v is None for v in vals):
            continue
        lines.append(label.strip() + "," + ",".join("" if v is None else f"{v:.6g}"
                                                    for v in vals))
    return "\n".join(lines) + "\n"


def plot(columns: list[Column], path: str | Path) -> Path:
    """Efficiency lines against the device (process) count and a stacked bar per run of
    where device time goes (useful / communication / idle, TALP form, % of devices x T)."""
    from .plot import COLOURS, _pyplot

    plt = _pyplot()
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
    for name, get in series:
        ys = [get(c) for c in columns]
        if all(y is None for y in ys):
            continue
        ax1.plot(xs, [y if y is not None else float("nan") for y in ys], marker="o",
                 label=name, linewidth=2.5 if name == "global efficiency" else 1.5)
    ax1.axhspan(0.8, 1.05, color="#d9f2d9", zorder=0)
    ax1.axhspan(0.6, 0.8, color="#fff5cc", zorder=0)
    ax1.set_ylim(0, 1.05)
    ax1.set_xticks(xs)
    ax1.set_xlabel("devices" if any(c.devices for c in columns) else "processes")
    ax1.set_ylabel("efficiency")
    ax1.set_title("Efficiency model across runs (TALP form)")
    ax1.legend(fontsize="small", loc="lower left")
    labels = [f"{c.label}\n({x})" for c, x in zip(columns, xs)]
    bottom = [0.0] * len(columns)
    for name in ("useful", "communication", "idle"):
        vals = [c.split[name] for c in columns]
        ax2.bar(labels, vals, bottom=bottom, color=COLOURS[name], label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_ylabel("% of elapsed time, mean per device (process)")
    ax2.set_title("Where device time goes per run")
    ax2.legend(fontsize="small")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)

