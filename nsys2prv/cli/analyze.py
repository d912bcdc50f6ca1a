"""`nsys2prv analyze INPUT...`: the device efficiency model and overlap numbers of a trace.

INPUTs are one translated trace (.prv/.prv.gz) or reports (.sqlite/.nsys-rep), which are
translated first (into a temporary directory, merged as `nsys2prv` would) so that the
numbers are those of the trace Paraver would show: they equal what the cfgs in
cfgs/analysis/ compute with paramedir on that trace.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import InputError, UsageError
from ..report.inputs import expand_inputs, is_trace
from ..supervise import stderr_is_terminal
from ..analysis.idle import CAUSE_LABELS, UNKNOWN_HOST, IdleReport
from ..analysis.labels import fit_labels
from ..analysis.model import Analysis, Efficiency, GroupResult
from ..analysis.passes import AUTO, Extras
from ..run import load
from .common import Parser, Progress, add_window_arguments, window_of


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsys2prv analyze",
               description="GPU efficiency model (TALP-compatible and NCCL-aware forms) and "
                           "kernel overlap of a trace, per device.",
               epilog="With -r/--rule SPEC, runs Nsight Systems' expert-system rules on "
                      "exports instead (`nsys2prv analyze -r gpu_gaps --help`; "
                      "docs/rules.md).")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="a trace (.prv, .prv.gz) or one or more reports (.sqlite, .nsys-rep); "
                        "a directory, a quoted glob or @LIST (one path a line) names many")
    p.add_argument("--scaling", action="store_true",
                   help="each INPUT is a run (a trace, or a directory or glob of the reports "
                        "of one run): the efficiency model across runs, with computational "
                        "scalability and global efficiency (first run = fewest devices = "
                        "reference)")
    p.add_argument("--weak", action="store_true",
                   help="with --scaling: weak scaling (the work per device is constant)")
    p.add_argument("--csv", action="store_true", help="with --scaling: print CSV")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--plot", metavar="FILE.png",
                   help="write per-device bars and the overlap histogram (needs matplotlib)")
    p.add_argument("--html", metavar="PAGE.html",
                   help="also write the run on one self-contained page (docs/html.md): what "
                        "the run is and its five findings, then every analysis with its "
                        "pictures, tables and the cfgs to open in Paraver (adds the steps and "
                        "the critical path to what is computed; with --scaling: the POP table "
                        "and the scaling plots)")
    p.add_argument("--pop-trace", metavar="OUT.prv",
                   help="also write a copy of the trace for POP's tools (pypop, paramedir "
                        "cfgs): only the application's CPU threads, Extrae-style .row labels "
                        "(THREAD a.t.h)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="gaps listed (and given a view with --views), largest first "
                        "(default 10)")
    p.add_argument("--views", metavar="DIR",
                   help="write a Paraver view (.cfg) zoomed on each listed gap into DIR; "
                        "reports given as input are translated into DIR too, so that the "
                        "views have their trace")
    add_window_arguments(p)
    p.add_argument("--list-all", action="store_true",
                   help=f"print every process and device (default: a job of more than {MANY} "
                        f"shows the {SHOWN} worst of each and the spread; --json has all)")
    p.add_argument("--no-idle", action="store_true",
                   help="skip why the GPUs wait (one pass over the trace instead of two)")
    p.add_argument("--iterations", nargs="?", const="", metavar="RANGE[@DOMAIN]",
                   help="per instance of a repeated NVTX range (a training step): duration, "
                        "GPU busy/idle, compute/communication time, idle causes, the spread "
                        "and outliers, and the slowest step against the median one (no "
                        "RANGE: the step is found, at any depth: a range repeated one after "
                        "the other on one thread that launches most of the GPU work)")
    p.add_argument("--critical-path", action="store_true",
                   help="what bounds the run: the critical path through the job's "
                        "dependencies (launches, stream waits, synchronisations, NCCL and MPI), "
                        "its composition per category, process and longest segments (per step "
                        "with --iterations)")
    p.add_argument("--what-if", action="append", default=[], metavar="SPEC",
                   help="with the critical path, the run's predicted time when work is "
                        "shortened: 'kernel:GLOB=F', 'nccl=F', 'memcpy=F', 'memset=F', "
                        "'host=F', 'rank:N=F', 'gaps=0' (no GPU waits for its host); terms "
                        "joined by commas; repeat for several scenarios")
    p.add_argument("--path-trace", metavar="OUT.prv",
                   help="with the critical path: write a copy of the trace with the path "
                        "and every GPU activity's float as events, for "
                        "cfgs/analysis/critical_path.cfg")
    p.add_argument("--modality", action="store_true",
                   help="per kernel name, whether its durations have two modes or a heavy "
                        "tail, and on which processes and in which part of the run the slow "
                        "launches are")
    p.add_argument("--no-kernel-metrics", action="store_true",
                   help="skip 'Inside the kernels' (each kernel's GPU metrics from the samples, "
                        "printed by default when the trace has GPU metrics)")
    p.add_argument("--layers", metavar="NAME|DEPTH",
                   help="the layer level of 'Layers on the GPU' (NVTX ranges projected onto "
                        "the GPU, printed by default when the trace has NVTX ranges): a "
                        "range's name (digits as '#' for a family: 'layer_#') or a nesting "
                        "depth (0 = outermost); default: found (numbered ranges, the step's "
                        "repeated children, or PyTorch's operators)")
    p.add_argument("--no-layers", action="store_true",
                   help="skip 'Layers on the GPU'")
    p.add_argument("--no-samples", action="store_true",
                   help="skip 'Where in the code' (the CPU samples' profiles and the code "
                        "behind the GPU's idle gaps, printed by default when the trace has "
                        "CPU samples)")
    p.add_argument("--folded", metavar="OUT.txt",
                   help="write the CPU samples as folded stacks ('root;...;leaf COUNT', one "
                        "line per distinct stack), which FlameGraph and speedscope read")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def analyze(inputs: list[str], explain: bool = True, top: int = 10,
            keep_in: Path | None = None, window=None,
            allow_empty: bool = False, iterations: str | None = None,
            modality: bool = False, what_if: list | None = None,
            kernel_metrics: bool = True, layers: str | None = AUTO, samples: bool = True
            ) -> tuple[Analysis, Path | None, Extras]:
    """The run of `inputs` (`nsys2prv.load`: one trace, or reports translated as they are
    read, into `keep_in` when given, with progress bars on a terminal) analysed as
    `Run.analysis` does with these options. Returns the analysis, the trace kept, if any,
    and what the other analyses add."""
    bars = Progress(enabled=True)
    source = " ".join(inputs) if len(inputs) <= 4 else \
        f"{len(inputs)} reports: {inputs[0]} ... {inputs[-1]}"
    try:
        run = load(inputs, window=window, allow_empty=allow_empty, source=source,
                   on_report=bars.report, on_merge=bars.merge)
        kept = Path(inputs[0]) if run.is_trace and window is None else None
        if keep_in is not None and kept is None:  # the views need their trace
            keep_in.mkdir(parents=True, exist_ok=True)
            name = "window.prv" if run.is_trace else Path(inputs[0]).name.split(".")[0] + ".prv"
            kept = run.translate(keep_in / name)
            run = load(kept, source=source)
        with run:
            result, extras = run.analysis(explain=explain, top=top, iterations=iterations,
                                          modality=modality, what_if=what_if,
                                          kernel_metrics=kernel_metrics, layers=layers,
                                          samples=samples)
    finally:
        bars.close()
    return result, kept, extras


def _pct(x: int, total: int) -> str:
    return f"{100 * x / total:6.2f}" if total else "     -"


def _eff(x: float | None) -> str:
    return f"{x:5.2f}" if x is not None else "    -"


# a job of more processes or devices than this lists the SHOWN worst of each and sums up the
# rest (every one is in --json; --list-all prints them all)
MANY = 32
SHOWN = 10


def _spread(values: list[float], fmt: str) -> str:
    """'min a, median b, max c' of a list of numbers."""
    v = sorted(values)
    return (f"min {format(v[0], fmt)}, median {format(v[len(v) // 2], fmt)}, "
            f"max {format(v[-1], fmt)}")


def _worst(items: list, key, list_all: bool) -> tuple[list, int]:
    """The items to print (all, or the SHOWN with the lowest key), and how many are left."""
    if list_all or len(items) <= MANY:
        return items, 0
    return sorted(items, key=key)[:SHOWN], len(items) - SHOWN


def _model_lines(e: Efficiency, title: str) -> list[str]:
    return [f"### {title}",
            f"###   Device parallel efficiency:      {_eff(e.parallel)}   ({e.n} devices)",
            f"###    - Load balance:                 {_eff(e.load_balance)}",
            f"###    - Communication efficiency:     {_eff(e.communication)}",
            f"###    - Orchestration efficiency:     {_eff(e.orchestration)}"]


def format_report(a: Analysis, list_all: bool = False) -> str:
    """A TALP-like host/device summary, then per-device times and overlap levels. A job of
    more than MANY processes or devices shows the worst SHOWN of each and the spread."""
    T = a.end
    out = [f"### nsys2prv analyze: {a.trace}",
           f"### trace time {T / 1e6:.3f} ms, {len(a.processes)} process(es) with GPU work, "
           f"{len(a.devices)} device(s)", "###", "### Host (main thread of each process)"]
    hosts, rest = _worst(a.host, lambda h: (h.offload_efficiency is None,
                                             h.offload_efficiency or 0), list_all)
    if rest:
        effs = [h.offload_efficiency for h in a.host if h.offload_efficiency is not None]
        out.append(f"###   {len(a.host)} processes"
                   + (f", device offload efficiency {_spread(effs, '.2f')}" if effs else "")
                   + f"; the {SHOWN} lowest:")
    for h in hosts:
        parts = [f"running {h.running / 1e6:.3f} ms"]
        if h.offload_efficiency is not None:
            parts.insert(0, f"in CUDA calls {h.in_cuda / 1e6:.3f} ms")
        if h.in_mpi:
            parts.append(f"in MPI calls {h.in_mpi / 1e6:.3f} ms")
        what = (f"device offload efficiency {_eff(h.offload_efficiency)}"
                if h.offload_efficiency is not None else "no CUDA calls")
        out.append(f"###   {h.name}: {what}  ({', '.join(parts)})")
    if rest:
        out.append(f"###   ... {rest} more processes (all in --json, or --list-all)")
    out.append("###")
    if a.cpu is not None:
        c = a.cpu
        out += ["### CPU, POP model (useful = main thread Running: outside MPI, CUDA and "
                "OS-runtime calls)",
                f"###   Parallel efficiency:             {_eff(c.parallel)}   ({c.n} processes)",
                f"###    - Load balance:                 {_eff(c.load_balance)}"
                f"   (additive, as pypop: {_eff(c.load_balance_additive)})",
                f"###    - Communication efficiency:     {_eff(c.communication)}",
                "###   useful per process (ms):        "
                + (" ".join(f"{u / 1e6:.3f}" for u in c.useful)
                   if list_all or len(c.useful) <= MANY else
                   _spread([u / 1e6 for u in c.useful], ".3f") + f" ({len(c.useful)} "
                   "processes)"), "###"]
    if not a.devices:
        out.append("### (no GPU work in this trace: the device model is empty)")
        return "\n".join(out) + "\n"
    out += _model_lines(a.talp, "Device, TALP-compatible (useful = all kernels incl. NCCL; "
                                "communication = memcpy/memset outside kernels)")
    out.append("###")
    out += _model_lines(a.nccl, "Device, NCCL-aware (useful = compute kernels; communication "
                                "= NCCL + memcpy/memset outside compute)")
    out += ["", "Per device, % of trace time (TALP form: useful/comm; NCCL-aware form: "
                "useful/comm; idle is the same in both):",
            f"{'device':<48} {'useful':>7} {'comm':>7} {'useful':>7} {'comm':>7} {'idle':>7}"
            f" | {'0':>6} {'1':>6} {'2':>6} {'3+':>6} | {'c1':>6} {'c2':>6} {'c3+':>6}"
            f" | {'hidden':>6}",
            f"{'':<48} {'TALP':>15} {'NCCL-aware':>15} {'':>7} | kernels at once (% trace)"
            f"     | during NCCL (% NCCL)| % NCCL"]
    devices, rest = _worst(a.devices, lambda g: -g.idle, list_all)
    for g in devices:
        out.append(_device_line(g, T))
    if rest:
        out.append(f"... the {SHOWN} most idle of {len(a.devices)} devices above (idle % of "
                   f"trace {_spread([100 * g.idle / T for g in a.devices], '.2f')}); "
                   f"{rest} more in --json, or --list-all")
    return "\n".join(out) + "\n"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


def _clip(text: str, n: int = 60) -> str:
    """A name cut to `n` characters for one line (NVTX texts can be whole stack dumps)."""
    return text if len(text) <= n else text[:n - 3] + "..."


def _cause_list(causes: dict[str, int], total: int, n: int = 3) -> str:
    """The main causes of `total` ns of idle time, largest first: 'label 61%, ...'."""
    parts = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return ", ".join(f"{CAUSE_SHORT.get(k, k)} {v / total:.0%}" for k, v in parts
                     if v >= total / 200) if total else "-"  # what rounds to 0% is left out


CAUSE_SHORT = {"mpi": "MPI", "nccl": "NCCL call", "cuda_sync": "CUDA sync",
               "cuda_memcpy": "memcpy/memset call", "cuda_alloc": "CUDA alloc/free",
               "cuda_launch": "launching", "cuda_other": "other CUDA call", "io": "I/O",
               "wait": "lock/wait", "sleep": "sleep/poll", "osrt_other": "other OS call",
               "descheduled": "descheduled", "host_compute": "host compute",
               "no_data": "no data", UNKNOWN_HOST: "unknown host"}


def format_idle(r: IdleReport, list_all: bool = False) -> str:
    """Why the GPUs wait: the job's idle time by host cause, the devices and processes
    that wait most, the largest gaps, and the kernel launch statistics."""
    j = r.job
    out = ["", "### Why the GPUs wait: idle time between each device's first and last "
               "activity, split by what the host thread that launched the next GPU work "
               "was doing", f"###   job: {j.gaps} gaps, idle {_ms(j.idle)} of {_ms(j.span)} "
               f"of device activity ({j.idle / j.span:.1%})" if j.span else
               f"###   job: {j.gaps} gaps"]
    for k, v in sorted(j.causes.items(), key=lambda kv: (-kv[1], kv[0])):
        label = CAUSE_LABELS.get(k, "no launch record for the next work: host unknown")
        share = f"{v / j.idle:6.1%}" if v >= j.idle / 1000 else " <0.1%"
        out.append(f"###     {share}  {label}")
    if j.nvtx:
        out.append("###   NVTX ranges open on the launching thread (share of idle time): "
                   + "; ".join(f"{_clip(n)} {t / j.idle:.0%}" for n, t in j.nvtx.items()))
    for note in r.notes:
        out.append(f"###   note: {note}")
    if len(r.processes) > 1:
        out.append("###   processes, most idle first (idle % of device activity; causes):")
        idlest = lambda p: -(p.idle / p.span if p.span else 0)  # noqa: E731
        ranked, rest = _worst(sorted(r.processes, key=idlest), idlest, list_all)
        for p in ranked:
            share = f"{p.idle / p.span:6.1%}" if p.span else "     -"
            out.append(f"###     {share}  {p.name}: {_cause_list(p.causes, p.idle)}")
        if rest:
            out.append(f"###     ... {rest} more processes (all in --json, or --list-all)")
    devices, rest = _worst(r.devices, lambda d: -(d.idle / d.span if d.span else 0), list_all)
    out.append("###   devices (idle % of device activity; causes)"
               + (f", the {SHOWN} most idle:" if rest else ":"))
    for d in devices:
        share = f"{d.idle / d.span:6.1%}" if d.span else "     -"
        out.append(f"###     {share}  {d.name}: {_cause_list(d.causes, d.idle)}")
    if rest:
        out.append(f"###     ... {rest} more devices (all in --json, or --list-all)")
    if r.top:
        out.append("###   largest gaps (times in the trace's time base):")
        for i, f in enumerate(r.top, start=1):
            who = f.host_thread or "host unknown"
            nv = f" [NVTX {_clip(f.nvtx)}]" if f.nvtx else ""
            out.append(f"###   {i:3d}. {_ms(f.duration)} at {f.start / 1e6:.6f}-"
                       f"{f.end / 1e6:.6f} ms, {f.device} <- {who}: "
                       f"{_cause_list(f.causes, f.duration)}{nv}")
    if r.launches:
        n = sum(k.count for k in r.launches)
        out.append(f"###   kernel launches (HTA): {n} timed; kernels shorter than their launch "
                   f"call: {sum(k.short for k in r.launches)} "
                   f"({r.short_kernel_share:.1%} of kernel time)")
        out.append(f"###     {'kernel (top 5 by time)':<40} {'count':>7} {'kernel':>10} "
                   f"{'launch':>10} {'delay':>10} {'max delay':>10} {'short':>6}")
        fit = fit_labels([k.label or k.name for k in r.launches], 40)
        for k in r.launches[:5]:
            out.append(f"###     {fit[k.label or k.name]:<40} {k.count:7d} "
                       f"{k.kernel_time / k.count / 1e3:8.1f}us "
                       f"{k.call_time / k.count / 1e3:8.1f}us {k.delay_mean / 1e3:8.1f}us "
                       f"{k.delay_max / 1e3:8.1f}us {k.short:6d}")
    return "\n".join(out) + "\n"


def format_iterations(r, list_all: bool = False) -> str:
    """The steps of a run: one line each (the slowest SHOWN and the outliers of a long
    run), the spread, the outliers and the slowest step against the median one."""
    from .diff import format_runners_up

    st = r.steps
    how = "--iterations" if not r.picked or r.pick is None else f"picked: {r.pick.why}"
    out = ["", f"### Steps: NVTX range '{r.name}'" + (f"@{r.domain}" if r.domain else "")
           + f" ({how}), {st.height} instances"]
    if r.picked and r.pick is not None:
        out += format_runners_up(r.pick, 3, "###   ").rstrip("\n").splitlines()
    out.append(f"###   {'step':>6} {'start ms':>11} {'duration':>11} {'GPU busy':>9} "
               f"{'GPU idle':>11} {'compute':>11} {'NCCL':>11} {'memcpy':>11}  "
               "main idle causes")
    shown = st
    if not list_all and st.height > MANY:
        shown = (st.sort("duration", descending=True).head(SHOWN)
                 .vstack(st.filter(st["outlier"])).unique("instance").sort("instance"))
    causes = [c for c in st.columns if c.startswith("idle.")]
    for row in shown.iter_rows(named=True):
        busy = "-" if row["busy_share"] is None else f"{100 * row['busy_share']:.1f} %"
        main = _cause_list({c[5:]: row[c] for c in causes}, row["gap_idle"]) \
            if causes and row.get("gap_idle") else "-"
        flag = "  outlier" if row["outlier"] else ""
        out.append(f"###   {row['instance']:>6} {row['start'] / 1e6:>11.3f} "
                   f"{_ms(row['duration']):>11} {busy:>9} {_ms(row['gpu_idle']):>11} "
                   f"{_ms(row['compute kernels']):>11} {_ms(row['NCCL kernels']):>11} "
                   f"{_ms(row['memcpy']):>11}  {main}{flag}")
    if shown.height < st.height:
        out.append(f"###   ... the {SHOWN} slowest and the outliers of {st.height} steps "
                   "above (all in --json, or --list-all)")
    for m in r.spread.iter_rows(named=True):
        out.append(f"###   {m['metric']:<16} min {_ms(m['min'])}, median {_ms(m['median'])}, "
                   f"max {_ms(m['max'])}")
    out.append("###   outliers (Tukey's fences on the durations): "
               + (", ".join(f"step {k}" for k in r.outliers) if r.outliers else "none"))
    for note in r.notes:
        out.append(f"###   note: {note}")
    out.append(f"###   {r.paragraph}")
    return "\n".join(out) + "\n"


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:.1f} us"


def format_modality(m, list_all: bool = False, km=None) -> str:
    """The kernels whose durations have two modes or a heavy tail (all judged kernels with
    --list-all), and whether the slow launches are those beside NCCL kernels or copies
    (`km`, the kernel metrics, where the trace has GPU metrics)."""
    from ..analysis.modality import MIN_LAUNCHES

    overlap = {}
    if km is not None and not km.empty:
        from ..analysis.kernel_metrics import slow_launches_overlapped

        o = slow_launches_overlapped(m, km)
        overlap = {r["kernel"]: r for r in o.iter_rows(named=True)} if o.height else {}

    flagged = m.filter(m["verdict"] != "")
    out = ["", f"### Kernel duration modality ({m.height} kernels of {MIN_LAUNCHES} launches "
               f"or more judged; {flagged.height} with two modes or a heavy tail; "
               "docs/cfgs.md says how)"]
    fit = fit_labels([r or "" for r in m["label"].to_list()], 60)
    for row in (m if list_all else flagged).iter_rows(named=True):
        name = fit[row["label"] or ""] or row["kernel"][:60]
        if row["verdict"] == "two modes":
            what = (f"two modes: {100 * (1 - row['slow_share']):.0f} % at "
                    f"{_us(row['fast_median'])}, {100 * row['slow_share']:.0f} % at "
                    f"{_us(row['slow_median'])} ({100 * row['slow_time_share']:.0f} % of its "
                    f"time; separation {row['separation']:.1f})")
        elif row["verdict"] == "heavy tail":
            what = (f"heavy tail: {100 * row['slow_share']:.1f} % of launches beyond "
                    f"Q3 + 3 IQR (median {_us(row['median'])}, theirs "
                    f"{_us(row['slow_median'])}; {100 * row['slow_time_share']:.0f} % of its "
                    "time)")
        else:
            what = f"one mode (median {_us(row['median'])})"
        out.append(f"###   {name} ({row['count']} launches): {what}")
        where = [w for w in (row["by_process"], row["in_run"]) if w]
        o = overlap.get(row["kernel"])
        if o is not None and o["slow_overlapped"] is not None:
            share = (f"{100 * o['slow_overlapped']:.0f} % of them beside NCCL kernels or "
                     f"copies (of the fast ones {100 * (o['fast_overlapped'] or 0):.0f} %)")
            where.append(("the slow mode is the overlapped launches: " if o["overlap_explains"]
                          else "") + share)
        if where:
            out.append(f"###       slow launches: {'; '.join(where)}")
    if flagged.height:
        out.append("###   analysis/kernel_duration_histogram.cfg shows each kernel's durations "
                   "(one plane per kernel name)")
    return "\n".join(out) + "\n"


def format_critical_path(cp, top: int = 10) -> str:
    """What bounds the run: the path's composition, per process, its longest runs on one
    row, the what-ifs and (with steps) each step's path."""
    lo, hi = cp.span
    end = cp.path_end
    out = ["", f"### Critical path from {lo / 1e6:.3f} ms to the end of the last work at "
               f"{end / 1e6:.3f} ms ({_ms(end - lo)}; the span analysed ends at "
               f"{hi / 1e6:.3f} ms; docs/critical_path.md)", f"###   {cp.verdict}",
           "###   by category (share of the span):"]
    for r in cp.by_category.iter_rows(named=True):
        out.append(f"###     {100 * r['share']:6.1f} %  {_ms(r['time']):>13}  {r['category']}")
    kernels = cp.by_detail.filter(cp.by_detail["category"].is_in(["kernels", "NCCL"]))
    if kernels.height:
        out.append("###   kernels on the path:")
        fit = fit_labels(kernels["detail"].to_list(), 70)
        for r in kernels.head(top).iter_rows(named=True):
            out.append(f"###     {100 * r['share']:6.1f} %  {_ms(r['time']):>13}  "
                       f"{fit[r['detail']]}")
    if cp.by_process.height > 1:
        out.append("###   per process (GPU / host work on the path):")
        for r in cp.by_process.head(top).iter_rows(named=True):
            out.append(f"###     {100 * r['share']:6.1f} %  {r['process']}: GPU "
                       f"{_ms(r['gpu'])}, host {_ms(r['host'])}")
    if cp.longest.height:
        out.append("###   longest runs of the path on one row:")
        for r in cp.longest.iter_rows(named=True):
            out.append(f"###     {_ms(r['duration']):>13} at {r['start'] / 1e6:.3f} ms  "
                       f"{r['label']}: {r['category']}"
                       + (f" ({r['detail'][:50]})" if r["detail"] else "")
                       + (f" [NVTX {r['nvtx'][:40]}]" if r["nvtx"] else ""))
    for s in cp.what_if:
        ch = "-" if s.change is None else f"{100 * s.change:+.1f} %"
        out.append(f"###   what if {s.text}: predicted {_ms(s.predicted)} (measured "
                   f"{_ms(s.measured)}, {ch}); path: "
                   + ", ".join(f"{r['category']} {100 * r['share']:.0f} %"
                               for r in s.composition.head(4).iter_rows(named=True)))
    lines = {k: v for k, v in cp.counts.items()}
    if lines:
        out.append("###   dependencies used: " + ", ".join(f"{k} {v}" for k, v in
                                                         sorted(lines.items())))
    if cp.steps is not None and cp.steps.height:
        out.append("###   per step (main categories of each step's path):")
        for inst, part in cp.steps.sort("instance").group_by("instance", maintain_order=True):
            top3 = part.sort("time", descending=True).head(3)
            out.append(f"###     step {inst[0]}: " + ", ".join(
                f"{r['category']} {100 * r['share']:.0f} %" for r in top3.iter_rows(named=True)))
    return "\n".join(out) + "\n"


def _device_line(g: GroupResult, T: int) -> str:
    lv = " ".join(_pct(x, T) for x in g.levels)
    lc = " ".join(_pct(x, g.nccl_time) for x in g.levels_comm[1:])
    return (f"{g.name[:48]:<48} {_pct(g.useful_talp, T)} {_pct(g.comm_talp, T)} "
            f"{_pct(g.useful_nccl, T)} {_pct(g.comm_nccl, T)} {_pct(g.idle, T)} | {lv} | {lc}"
            f" | {_pct(g.hidden_comm, g.nccl_time)}")


def _run_inputs(run: str) -> list[str]:
    """The files of one run: a trace, a directory of reports, a glob of reports, or @LIST."""
    files = expand_inputs([run])
    if len(files) == 1 and not Path(files[0]).exists():
        raise InputError(f"{files[0]}: no such file")
    return files


def scaling_main(args) -> int:
    from ..analysis import scaling as sc
    from ..run import scaling

    if args.html:
        from ..page.document import check_writable

        check_writable(args.html)
    runs = []
    window = window_of(args)  # the same iterations of every run
    bars = Progress(enabled=True)
    try:
        for given in args.inputs:
            files = _run_inputs(given)
            label = given.rstrip("/")  # as given: the table's heads drop what runs share
            for suffix in (".prv.gz", ".prv"):
                label = label[: -len(suffix)] if label.endswith(suffix) else label
            if not (len(files) == 1 and is_trace(files[0])) and stderr_is_terminal():
                print(f"nsys2prv analyze: translating run {label} ({len(files)} report"
                      f"{'s' if len(files) > 1 else ''})", file=sys.stderr)
            runs.append(load(files, window=window, allow_empty=args.allow_empty,
                             label=label, on_report=bars.report))
        table = scaling(runs, weak=args.weak)
    finally:
        bars.close()
    columns = table.source
    if args.json:
        json.dump(sc.to_dicts(columns), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.csv:
        sys.stdout.write(sc.format_csv(columns))
    else:
        sys.stdout.write(sc.format_table(columns, args.weak, colour=sys.stdout.isatty()))
    if args.plot:
        from ..analysis.plot import headless

        headless()
        table.plot(args.plot)
    if args.html:
        table.to_html(args.html)
    return 0


def wants_rules(argv: list[str]) -> bool:
    """True when an `analyze` command line names a rule (-r/--rule): the rules' command."""
    for a in argv:
        if a == "--":
            return False
        if a == "--rule" or a.startswith("--rule=") or (a.startswith("-r") and a[1:2] == "r"):
            return True
    return False


def main(argv: list[str]) -> int:
    """Entry point of `nsys2prv analyze` (dispatched from nsys2prv.cli); with -r/--rule,
    nsys' expert-system rules (nsys2prv.cli.rules) instead of the efficiency model."""
    if wants_rules(argv):
        from .rules import main as rules_main

        return rules_main(argv)
    args = _parser().parse_args(argv)
    if args.scaling:
        return scaling_main(args)
    args.inputs = expand_inputs(args.inputs)
    if args.weak or args.csv:
        raise UsageError("--weak and --csv go with --scaling")
    if args.pop_trace and not (len(args.inputs) == 1 and is_trace(args.inputs[0])):
        raise UsageError("--pop-trace needs one trace (.prv) as input")
    if args.top < 0:
        raise UsageError("--top takes a number >= 0")
    views = Path(args.views) if args.views else None
    if views is not None and args.no_idle:
        raise UsageError("--views shows the gaps, which --no-idle skips")
    what_if = None
    if args.path_trace and not (args.critical_path or args.what_if):
        raise UsageError("--path-trace goes with --critical-path")
    if args.critical_path or args.what_if:
        from ..analysis.critical_path import parse_what_if

        what_if = [parse_what_if(w) for w in args.what_if]
    if args.layers is not None and args.no_layers:
        raise UsageError("--layers and --no-layers exclude each other")
    layers = None if args.no_layers else (args.layers or AUTO)
    if args.folded and args.no_samples:
        raise UsageError("--folded writes the samples, which --no-samples skips")
    if args.folded:
        from ..paraver.output import check_writable

        check_writable(args.folded, "folded stacks")
    iterations, critical = args.iterations, what_if
    if args.html:  # the page shows the steps and the critical path too
        from ..page.document import check_writable

        check_writable(args.html)
        iterations = AUTO if iterations is None else iterations
        critical = [] if critical is None else critical
    result, trace, extras = analyze(args.inputs, not args.no_idle, args.top, views,
                                    window_of(args), args.allow_empty, iterations,
                                    args.modality, critical, not args.no_kernel_metrics,
                                    layers, not args.no_samples)
    if args.folded:
        if extras.samples is None:
            raise UsageError(f"--folded: no CPU sample in {' '.join(args.inputs)} (nsys "
                             "profile samples by default: --sample=process-tree)")
        write_folded(extras.samples, args.folded)
    if args.html:
        from ..run import analysis_html
        from ..page.document import write

        write(analysis_html(result, extras, args.inputs), args.html)
    asked_steps = args.iterations is not None
    asked_path = what_if is not None
    written = []
    if views is not None and trace is not None and result.idle is not None:
        from ..paraver.read import event_types
        from ..views.findings import write_findings

        written = write_findings(trace, result.idle, views, event_types(trace))
    if args.path_trace:
        if trace is None:
            raise UsageError("--path-trace needs a trace (.prv) as input, or --views DIR to "
                             "keep the translation of the reports")
        from ..analysis.critical_path import write_path_trace

        write_path_trace(trace, args.path_trace, extras.graph,
                         extras.critical.segment_parts)
    if args.pop_trace:
        from ..analysis.pop import pop_trace

        pop_trace(args.inputs[0], args.pop_trace)
    if args.json:
        from ..analysis.findings import findings

        out = result.to_dict()
        steps = extras.iterations if asked_steps else None
        if isinstance(steps, str):
            out["iterations"] = {"note": steps}
        elif steps is not None:
            out["iterations"] = steps.to_dict()
        if extras.modality is not None:
            out["modality"] = extras.modality.to_dicts()
            if extras.kernel_metrics is not None and not extras.kernel_metrics.empty:
                from ..analysis.kernel_metrics import slow_launches_overlapped

                o = slow_launches_overlapped(extras.modality, extras.kernel_metrics)
                out["modality_overlap"] = o.to_dicts() if o.height else []
        if extras.critical is not None and asked_path:
            out["critical_path"] = extras.critical.to_dict()
        if extras.kernel_metrics is not None:
            out["kernel_metrics"] = extras.kernel_metrics.to_dict()
        if extras.layers is not None:
            out["layers"] = extras.layers.to_dict()
        if extras.samples is not None:
            out["samples"] = extras.samples.to_dict()
        # the findings that matter most (analysis/findings.py; the page's first screen)
        out["findings"] = findings(result, extras).to_dicts()
        json.dump(out, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(result, args.list_all))
        if result.idle is not None:
            sys.stdout.write(format_idle(result.idle, args.list_all))
        steps = extras.iterations if asked_steps else None
        if isinstance(steps, str):
            sys.stdout.write(f"\n### Steps: {steps}\n")
        elif steps is not None:
            sys.stdout.write(format_iterations(steps, args.list_all))
        if extras.modality is not None:
            sys.stdout.write(format_modality(extras.modality, args.list_all,
                                             extras.kernel_metrics))
        if extras.critical is not None and asked_path:
            sys.stdout.write(format_critical_path(extras.critical, args.top))
        if extras.kernel_metrics is not None:
            sys.stdout.write(format_kernel_metrics(extras.kernel_metrics, args.list_all,
                                                   args.top))
        if extras.layers is not None:
            sys.stdout.write(format_layers(extras.layers, args.list_all, args.top))
        if extras.samples is not None:
            sys.stdout.write(format_samples(extras.samples, args.list_all, args.top))
        elif not args.no_samples:
            sys.stdout.write(f"\n### Where in the code: {NO_SAMPLES}\n")
        if written:
            sys.stdout.write(f"\nViews of the gaps ({len(written)}), to open with "
                             f"{trace}: {views}/gap_*.cfg\n")
        if args.html:
            sys.stdout.write(f"\nThe run on one page: {args.html}\n")
    if args.plot:
        from ..analysis.plot import headless, plot_analysis

        headless()
        plot_analysis(result, args.plot, extras.kernel_metrics, layers=extras.layers,
                      samples=extras.samples)
    return 0


# metric key -> column head of the "Inside the kernels" tables
_RATE_HEADS = {"SM Active": "SM act", "SM Issue": "SM iss", "Tensor Active": "tensor",
               "Tensor Active / FP16 Active": "tensor", "DRAM Read Bandwidth": "DRAM r",
               "DRAM Write Bandwidth": "DRAM w", "Compute Warps in Flight": "warps"}
def _rate(v) -> str:
    return "-" if v is None or v != v else f"{v:.1f}"


def format_kernel_metrics(km, list_all: bool = False, top: int = 10) -> str:
    """Inside the kernels: the fit quality per GPU, the kernels that hold most of the GPU
    time with their rates, bound and how the rates were found, the spread across GPUs and
    its outliers, interference, folding and the steps."""
    import polars as pl

    from ..analysis.kernel_metrics import FOLD_BINS, OUTLIER_RATIO, TRUSTED_R2

    out = ["", "### Inside the kernels: each kernel's GPU metrics, separated from the "
               "samples by the sample-mixing model (docs/kernel_metrics.md)"]
    if km.empty:
        out.append(f"###   {km.note}")
        out += _launch_lines(km.launch, list_all, top)
        return "\n".join(out) + "\n"
    c = pl.col
    devices = km.fits["device"].unique(maintain_order=True).to_list()
    for dev in devices:
        f = km.fits.filter(c("device") == dev)
        first = f.row(0, named=True)
        out.append(f"###   {dev}: {first['samples']} samples, one every "
                   f"{first['interval'] / 1e3:.1f} us ({first['busy_samples']} with GPU work); "
                   "fit quality, cross-validated R^2 of the model (of the direct attribution):")
        live = f.filter(c("r2_cv").is_not_nan())
        parts = [f"{r['metric']} {r['r2_cv']:.3f} ({r['r2_direct']:.3f})"
                 for r in live.iter_rows(named=True)]
        for i in range(0, len(parts), 4):
            out.append("###     " + "; ".join(parts[i:i + 4]))
        weak = live.filter(c("r2_cv") < TRUSTED_R2)["metric"].to_list()
        if weak:
            out.append(f"###     not explained by the kernels (R^2 < {TRUSTED_R2}), do not "
                       f"read per kernel: {', '.join(weak)}")
        flat = f.filter(c("r2_cv").is_nan() & (c("samples") > 0))["metric"].to_list()
        if flat:
            out.append("###     constant while kernels run (nothing to fit): "
                       + ", ".join(flat))
        absent = f.filter(c("samples") == 0)["metric"].to_list()
        if absent:
            out.append("###     not sampled on this GPU (its metric set has them not): "
                       + ", ".join(absent))
    scope = "job" if "job" in km.kernels["device"].to_list() else devices[0]
    metrics = [m for m in _RATE_HEADS if m in set(km.rates["metric"].to_list())]
    metrics = [m for i, m in enumerate(metrics)
               if not (m == "Tensor Active / FP16 Active" and "Tensor Active" in metrics)]
    table = km.kernels.filter((c("device") == scope) & c("kind").is_in(["kernel", "nccl"]))
    shown = table if list_all else table.head(top)
    wide = (km.rates.filter((c("device") == scope) & c("metric").is_in(metrics))
            .select("kernel", "metric", "rate", "se", "range_lo", "range_hi", "determined"))
    rate_of = {(r["kernel"], r["metric"]): r for r in wide.iter_rows(named=True)}
    heads = " ".join(f"{_RATE_HEADS[m]:>9}" for m in metrics)
    launch = "blocks" in table.columns
    job = ", the job: each rate averaged over the GPUs, weighted by time" \
        if scope == "job" else ""
    which = "all" if list_all else f"top {shown.height}"
    out.append(f"###   kernels by GPU time ({which} of {table.height}{job}; rates in % of "
               "peak, lo-hi: the range the samples allow, where they cannot pin the rate "
               "down; blocks, occupancy, waves: the launch with most time, + when it has "
               "others):")
    launch_heads = f" {'blocks':>7} {'occ':>5} {'waves':>6}" if launch else ""
    out.append(f"###     {'kernel':<44} {'time':>10} {'share':>6} {'launches':>8} "
               f"{'mean':>9} {'/period':>7}{launch_heads} {heads}  {'bound':<25} how")
    for r in shown.iter_rows(named=True):
        rates = [rate_of.get((r["kernel"], m), {}) for m in metrics]
        # ± half the widest range of the row's determined rates (about 2 standard errors
        # where no bound binds)
        se = max(((x["range_hi"] - x["range_lo"]) / 2 for x in rates
                  if x.get("determined") and x.get("range_lo") is not None
                  and x["range_hi"] - x["range_lo"] == x["range_hi"] - x["range_lo"]),
                 default=None)
        how = {"direct": "measured", "model": "model", "group": f"group of {r['group']}"[:30],
               "none": "not sampled"}.get(r["method"] or "none", r["method"])
        if se is not None and r["method"] in ("direct", "model"):
            how += f" ±{se:.1f}"
        cols = ""
        if launch:
            more = "+" if (r.get("configs") or 0) > 1 else ""
            blocks = "-" if r["blocks"] is None else f"{r['blocks']}{more}"
            occ_ = "-" if r["occupancy"] is None else f"{r['occupancy']:.0f}%"
            waves = "-" if r["waves"] is None else f"{r['waves']:.2f}"
            cols = f" {blocks:>7} {occ_:>5} {waves:>6}"
        out.append(f"###     {(r['label'] or r['kernel'])[:44]:<44} {_ms(r['time']):>10} "
                   f"{100 * r['share']:5.1f}% {r['launches']:>8} {_us(r['mean_dur']):>9} "
                   f"{r['periods']:>7.2f}{cols} "
                   + " ".join(f"{_rate_cell(x):>9}" for x in rates)
                   + f"  {r['bound'] or '-':<25} {how}")
    if table.height > shown.height:
        out.append(f"###     ... {table.height - shown.height} more kernels (all in --json, "
                   "or --list-all)")
    short = table.filter(c("periods") < 1)
    if table.height and short.height:
        out.append(f"###   {short.height} of {table.height} kernels "
                   f"({short['time'].sum() / max(table['time'].sum(), 1):.0%} of kernel time) "
                   "are shorter than one sampling interval: the direct attribution blurs them "
                   "with their neighbours, the model separates them")
    if km.spread.height:
        out.append("###   rates across GPUs (per compute kernel: avg, max, min, stdev, "
                   "avg/max):")
        for r in km.spread.head(top * 2 if not list_all else km.spread.height).iter_rows(
                named=True):
            ratio = "-" if r["avg_over_max"] is None else f"{r['avg_over_max']:.2f}"
            out.append(f"###     {(r['label'] or r['kernel'])[:40]:<40} {r['metric']:<14} "
                       f"{r['avg']:6.1f} {r['max']:6.1f} {r['min']:6.1f} {r['std']:6.2f} "
                       f"{ratio:>5}  ({r['devices']} GPUs)")
    if km.outliers.height:
        per = km.outliers.group_by("device").agg(pl.len().alias("n"),
                                                  c("dur_ratio").median().alias("dur"))
        for r in per.sort("n", descending=True).iter_rows(named=True):
            longer = "" if r["dur"] is None else (
                f"; those kernels run {r['dur']:.2f}x their peers' duration there")
            out.append(f"###   outlier: {r['device']} is below {OUTLIER_RATIO:.0%} of its "
                       f"peers' median for {r['n']} kernel rate(s){longer}")
    if km.interference.height:
        out.append("###   interference (kernels alone / beside NCCL or copies on another "
                   "stream):")
        for (dev, kern), part in km.interference.group_by("device", "kernel",
                                                         maintain_order=True):
            cases = {r["case"]: r for r in part.iter_rows(named=True)}
            a, o = cases.get("alone"), cases.get("overlapped")
            if a is None or o is None:
                continue
            rates = "; ".join(f"{_RATE_HEADS.get(m, m)} {_rate(a.get(m))} -> {_rate(o.get(m))}"
                              for m in metrics if m in a)
            out.append(f"###     {(a['label'] or kern)[:44]}: {a['launches']} alone "
                       f"{_us(a['mean_dur'])}, {o['launches']} overlapped "
                       f"{_us(o['mean_dur'])} ({o['mean_dur'] / a['mean_dur']:.2f}x); {rates}")
    if km.folding.height:
        names = km.folding.select("kernel", "label").unique("kernel", maintain_order=True)
        out.append(f"###   folding ({names.height} long kernel(s), metrics along the "
                   "normalised duration, 10 bins, start -> end):")
        for r in names.head(top).iter_rows(named=True):
            for m in metrics:
                prof = km.folding.filter((c("kernel") == r["kernel"]) & (c("metric") == m))
                if prof.height:
                    at = dict(zip(prof["bin"].to_list(), prof["mean"].to_list()))
                    vals = " ".join(f"{at[b]:5.1f}" if b in at else "    -"
                                    for b in range(FOLD_BINS))
                    out.append(f"###     {(r['label'] or r['kernel'])[:30]:<30} "
                               f"{_RATE_HEADS[m]:>6}: {vals}")
    if km.steps.height:
        st = km.steps
        n = st["instance"].n_unique()
        odd = st.filter(c("differs")).with_columns(c("z").abs().alias("az")).sort(
            "az", descending=True)
        if odd.height:
            out.append(f"###   steps ({n}): each step's samples against what the run's "
                       "rates predict from its own kernels; steps whose kernels ran "
                       "differently:")
            for r in odd.head(top).iter_rows(named=True):
                out.append(f"###     step {r['instance']}: {r['metric']} measured "
                           f"{r['measured']:.1f}, predicted {r['predicted']:.1f} "
                           f"({r['diff']:+.1f} points, {r['z']:+.1f} robust SD from the "
                           "other steps)")
        else:
            big = st.with_columns(c("diff").abs().alias("ad")).sort("ad", descending=True)
            w = big.row(0, named=True)
            out.append(f"###   steps ({n}): every step's samples match what the run's rates "
                       f"predict from its own kernels (largest difference: step "
                       f"{w['instance']}, {w['metric']} {w['diff']:+.1f} points)")
    for what, per in km.dropped.items():
        out.append(f"###   dropped: {what}: "
                   + ", ".join(f"{dev} {n}" for dev, n in per.items()))
    out += _launch_lines(km.launch, list_all, top)
    return "\n".join(out) + "\n"


def format_layers(lay, list_all: bool = False, top: int = 10) -> str:
    """Layers on the GPU: what the NVTX ranges launched, the layer level picked and why, per
    layer its GPU time, share, split, idle time and cause, top kernels and rates, the
    outliers; then the projected ranges with most GPU time, per name."""
    import polars as pl

    from ..analysis.layers import CATEGORIES, layer_label

    c = pl.col
    p = lay.projected
    out = ["", "### Layers on the GPU: NVTX ranges projected onto the GPU (each range's GPU "
               "work: what its calls launched; docs/layers.md)"]
    un = p.unassigned
    out.append(f"###   {p.projected} of {p.ranges} NVTX ranges launched GPU work "
               f"({p.not_projected} launched nothing)"
               + (f"; {un.get('ops', 0)} calls launched {_ms(un.get('gpu_time', 0))} of GPU "
                  "work outside every range" if un.get("ops") else ""))
    pick = lay.pick
    if pick.kind is None:
        hint = (" (name them with --layers NAME|DEPTH)" if p.projected else "")
        out.append(f"###   layers: none found: {pick.why}{hint}")
    else:
        out.append(f"###   layers: {pick.why}")
        lost = pick.candidates.filter(~c("families").list.eval(pl.element()).list.join("|")
                                      .eq("|".join(pick.families))) \
            if pick.candidates.height else pick.candidates
        for r in lost.head(2).iter_rows(named=True):
            fams = ", ".join(layer_label(f) for f in r["families"][:3])
            out.append(f"###     runner-up: {r['kind']} ({fams}{'...' if len(r['families']) > 3 else ''}; "
                       f"{100 * r['share']:.1f} %)")
        table = lay.layers
        shown = table if list_all else table.head(top)
        scope = f"launched in the steps ('{lay.step}')" if lay.step else "of the run"
        out.append(f"###   per layer (top {shown.height} of {table.height} by GPU time; "
                   f"shares of the GPU time {scope}, {_ms(lay.total)}):")
        rates = [m for m in ("SM Active", "SM Issue", "Tensor Active", "DRAM Read Bandwidth",
                             "DRAM Write Bandwidth") if f"rate.{m}" in table.columns]
        heads = " ".join(f"{_RATE_HEADS[m]:>6}" for m in rates)
        per_step = "step_median" in table.columns
        step_heads = f" {'med/step':>10} {'max/step':>10}" if per_step else ""
        out.append(f"###     {'layer':<36} {'n':>5} {'GPU time':>10} {'share':>6}{step_heads} "
                   f"{'compute':>7} {'NCCL':>5} {'copy':>5} {'idle in':>10} "
                   f"{'idle cause':<13} {heads}{'  bound' if rates else ''}  top kernels")
        copy = [x for x in CATEGORIES if x.startswith("memcpy")]
        for r in shown.iter_rows(named=True):
            g = max(r["gpu"], 1)
            cp = sum(r[x] for x in copy)
            kern = ", ".join(k["kernel"] for k in (r.get("top_kernels") or [])[:2])
            cause = r.get("idle_cause") or "-"
            steps = (f" {_ms(r['step_median'] or 0):>10} {_ms(r['step_max'] or 0):>10}"
                     if per_step else "")
            line = (f"###     {layer_label(r['layer'])[:36]:<36} {r['instances']:>5} "
                    f"{_ms(r['gpu']):>10} {100 * r['share']:5.1f}%{steps} "
                    f"{100 * r['compute kernels'] / g:6.0f}% {100 * r['NCCL kernels'] / g:4.0f}% "
                    f"{100 * cp / g:4.0f}% {_ms(r['idle']):>10} {cause:<13} ")
            if rates:
                line += " ".join(f"{_rate(r.get('rate.' + m)):>6}" for m in rates)
                line += f"  {r.get('bound') or '-':<13}"
            out.append(line + f"  {kern[:60]}")
        if table.height > shown.height:
            out.append(f"###     ... {table.height - shown.height} more layers (all in --json, "
                       "or --list-all)")
        if lay.outliers.height:
            out.append("###   outliers (GPU time against the median of its peers):")
            for r in lay.outliers.head(top).iter_rows(named=True):
                where = {"siblings": "its numbered siblings", "ranks": "the other ranks",
                         "steps": "the other steps"}[r["kind"]]
                at = (f"step {r['step']} " if r["step"] is not None else "") + \
                    f"rank {r['rank']}"
                out.append(f"###     {layer_label(r['layer'])} at {at}: {_ms(r['gpu'])}, "
                           f"{r['ratio']:.2f}x {where} ({_ms(int(r['median']))})")
        for note in lay.notes:
            out.append(f"###   {note}")
    names = p.names().filter(c("rank").is_null()).sort("sum", "name",
                                                        descending=[True, False])
    if names.height:
        n = names.height if list_all else min(top, names.height)
        out.append(f"###   projected ranges by GPU span (top {n} of {names.height} names; "
                   "per name: count, total, mean, median, max of the projected durations, "
                   "as nsys' nvtx_gpu_proj_sum):")
        for r in names.head(n).iter_rows(named=True):
            out.append(f"###     {(r['name'] or '')[:48]:<48} {r['count']:>6} "
                       f"{_ms(r['sum']):>12} {_ms(r['mean']):>12} {_ms(r['median']):>12} "
                       f"{_ms(r['max']):>12}")
    return "\n".join(out) + "\n"


def _rate_cell(r: dict) -> str:
    """A rate, or the range the samples allow where they cannot pin it down."""
    if not r or r.get("rate") is None or r["rate"] != r["rate"]:
        return "-"
    if r.get("determined") is False and r["range_lo"] is not None:
        return f"{r['range_lo']:.1f}-{r['range_hi']:.1f}"
    return f"{r['rate']:.1f}"


def _launch_lines(launch, list_all: bool, top: int) -> list[str]:
    """What the kernels' launches allow: the findings, then the launch configurations of
    the kernels with most time (analysis/launch.py)."""
    if launch is None:
        return []
    if launch.empty:
        return [f"###   launch statistics: {launch.note}"] if launch.note else []
    from ..analysis.launch import FINDING_TIME

    out = ["###   launch statistics: what each kernel's launch allows on its GPU (blocks per "
           "SM and what limits them, theoretical occupancy, waves of blocks, the last "
           "wave's fill; docs/kernel_metrics.md):"]
    f = launch.findings
    if f.height:
        out.append(f"###     findings (launches with at least {FINDING_TIME:.0%} of their GPU's "
                   "kernel time):")
        for r in (f if list_all else f.head(2 * top)).iter_rows(named=True):
            gpus = f" (on {r['devices']} GPUs)" if r["devices"] > 1 else ""
            out.append(f"###       {(r['label'] or r['kernel'])[:44]:<44} "
                       f"{100 * r['share']:5.1f}%  {r['text']}{gpus}")
    if launch.note:  # GPUs without their SM limits: findings unknown, not none
        out.append(f"###     {launch.note}")
    elif not f.height:
        nccl = ("; NCCL kernels are not judged: one block per channel, by design"
                if "nccl" in launch.configs.columns and launch.configs["nccl"].any() else "")
        out.append("###     findings: none (no grid smaller than its GPU, no occupancy held "
                   f"low by registers or shared memory, no large tail{nccl})")
    cfg = launch.configs
    shown = cfg if list_all else cfg.head(top)
    which = "all" if list_all else f"top {shown.height}"
    out.append(f"###     launch configurations by GPU time ({which} of {cfg.height}):")
    out.append(f"###       {'kernel':<40} {'blocks':>7} {'thr':>5} {'regs':>4} "
               f"{'shared':>7} {'carve':>5} {'blk/SM':>6} {'limiter':<13} {'occ':>5} "
               f"{'waves':>7} {'tail':>5} {'SM<=':>6} {'warps<=':>7} {'launches':>8} "
               f"{'of time':>7}")

    def num(v, fmt: str) -> str:
        return "-" if v is None or v != v else format(v, fmt)

    for r in shown.iter_rows(named=True):
        carve = "-" if r["carveout"] is None else f"{r['carveout'] // 1024}K"
        shared = "-" if r["shared"] is None else f"{r['shared']}"
        tail = "-" if r["tail"] is None else f"{r['tail']:.0f}%"
        out.append(f"###       {(r['label'] or r['kernel'])[:40]:<40} {num(r['blocks'], 'd'):>7} "
                   f"{num(r['threads'], 'd'):>5} {num(r['registers'], 'd'):>4} {shared:>7} "
                   f"{carve:>5} {num(r['blocks_per_sm'], 'd'):>6} {r['limiter'] or '-':<13} "
                   f"{num(r['occupancy'], '.1f'):>5} {num(r['waves'], '.2f'):>7} {tail:>5} "
                   f"{num(r['sm_ceiling'], '.1f'):>6} {num(r['warps_ceiling'], '.1f'):>7} "
                   f"{r['launches']:>8} {100 * (r['time_share'] or 0):6.1f}%")
    if cfg.height > shown.height:
        out.append(f"###       ... {cfg.height - shown.height} more (all in --json, or "
                   "--list-all)")
    return out


def _fn(function: str, module: str, n: int = 50) -> str:
    """A function for one line: its name cut, its module's name."""
    return _clip(function, n) + (f" ({module})" if module else "")


def _top_list(df, n: int, total: int | None = None, collapse: bool = True) -> str:
    """'f (module) 12.3%, ...' of the first `n` rows of (function, module, samples), with
    `collapse` the unresolved addresses of a module summed as one (self counts only: a
    sample holds one leaf)."""
    from ..analysis.samples import collapse_unresolved

    if df is None or not df.height:
        return "-"
    if collapse:
        df = collapse_unresolved(df.select("function", "module", "samples"))
    total = total or int(df["samples"].sum())
    return ", ".join(f"{_fn(r['function'], r['module'], 40)} {r['samples'] / total:.1%}"
                     for r in df.head(n).iter_rows(named=True))


NO_SAMPLES = ("no CPU sample in the trace (nsys profile samples every thread by default: "
              "--sample=process-tree; call stacks with --backtrace=dwarf|lbr|fp)")


def format_samples(s, list_all: bool = False, top: int = 10) -> str:
    """Where in the code: who was sampled, the hottest functions and modules, the callers
    of the top ones, and each device's idle time named in the code."""
    import polars as pl

    q = s.quality.row(0, named=True) if s.quality.height else {"samples": 0}
    total = q["samples"]
    out = ["", "### Where in the code: CPU samples and call stacks (docs/samples.md)"]
    if not total:
        out += [f"###   {n}" for n in s.notes]
        return "\n".join(out) + "\n"
    procs = s.threads.select("task").n_unique()
    out.append(f"###   {total} samples on {s.threads.height} threads of {procs} process"
               f"{'es' if procs != 1 else ''}; {q['with_stack'] / total:.0%} with a call stack")
    n = s.threads.height if list_all else min(top, s.threads.height)
    out.append("###   threads (share of the samples):")
    for r in s.threads.head(n).iter_rows(named=True):
        out.append(f"###     {r['share']:6.1%}  {_clip(r['thread'] or 'thread', 40)} "
                   f"(pid {r['pid']}, tid {r['tid']})")
    if s.threads.height > n:
        out.append(f"###     ... {s.threads.height - n} more threads (all in --json, or "
                   "--list-all)")
    k = 5
    out.append(f"###   self (the sampled function): {_top_list(s.self_, k, total)}")
    out.append(f"###   inclusive (anywhere on the stack): {_top_list(s.inclusive, k, total, False)}")
    mods = s.modules.head(k)
    out.append("###   modules (self): " + ", ".join(
        f"{_clip(m, 40)} {v / total:.1%}" for m, v in mods.select("module", "self").iter_rows()))
    if s.callers.height:
        firsts = s.callers.group_by("function", "module", maintain_order=True).head(2).head(6)
        out.append("###   callers of the top functions: " + "; ".join(
            f"{_clip(r['function'], 30)} <- {_clip(r['caller_function'], 30)} "
            f"({r['samples']})" for r in firsts.iter_rows(named=True)))
    if s.in_steps is not None and s.in_steps.height:
        out.append(f"###   inside the steps (self): {_top_list(s.in_steps, k)}")
    if s.in_layers is not None and s.in_layers.height:
        busiest = (s.in_layers.group_by("layer").agg(pl.col("samples").sum())
                   .sort(["samples", "layer"], descending=[True, False]).head(3))
        out.append("###   per layer (its thread's samples while its range was open; all in "
                   "--json):")
        for layer, n_ in busiest.iter_rows():
            part = s.in_layers.filter(pl.col("layer") == layer)
            out.append(f"###     {_clip(layer, 40)} ({n_} samples): {_top_list(part, 3)}")
    if s.gaps is not None:
        out.append("###   the GPU's idle gaps in the code (the launching thread's calls and "
                   "samples, and what ran meanwhile):")
        for line in s.lines:
            out.append(f"###     {line}")
        sites = s.gap_blocking
        if sites is not None and sites.height:
            shown = sites.group_by("device", maintain_order=True).head(3)
            out.append("###   call sites of the launching threads during the gaps (share of "
                       "the device's idle time):")
            for r in shown.iter_rows(named=True):
                share = f"{r['share']:6.1%}" if r["share"] is not None else "     -"
                where = f" < {_clip(r['callers'], 90)}" if r["callers"] else " (no stack)"
                out.append(f"###     {share}  {r['device']}: {r['api']}{where}")
        launch = s.gap_launching
        if launch is not None and launch.height:
            for device, part in launch.group_by("device", maintain_order=True):
                out.append(f"###   {device[0]}: the launching thread's samples in the gaps: "
                           f"{_top_list(part, 3)}")
    for note in s.notes:
        out.append(f"###   note: {note}")
    return "\n".join(out) + "\n"


def write_folded(s, path: str) -> None:
    """Folded stacks ('root;...;leaf COUNT', FlameGraph's and speedscope's input), written
    whole or not at all."""
    from ..paraver.output import atomic_text

    lines = [f"{stack} {n}" for stack, n in s.folded.select("stack", "samples").iter_rows()]
    atomic_text(path, "\n".join(lines) + ("\n" if lines else ""), "folded stacks")
