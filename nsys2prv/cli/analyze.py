"""`nsys2prv analyze INPUT...`: the device efficiency model and overlap numbers of a trace.

INPUTs are one translated trace (.prv/.prv.gz) or reports (.sqlite/.nsys-rep), which are
translated first (into a temporary directory, merged as `nsys2prv` would) so that the
numbers are those of the trace Paraver would show: they equal what the cfgs in
cfgs/analysis/ compute with paramedir on that trace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from ..errors import InputError, UsageError
from ..supervise import register_temp, stderr_is_terminal
from ..analysis.model import Analysis, Efficiency, GroupResult, analyze_path
from .common import Parser, Progress


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsys2prv analyze",
                description="GPU efficiency model (TALP-compatible and NCCL-aware forms) and "
                            "kernel overlap of a trace, per device.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="a trace (.prv, .prv.gz) or one or more reports (.sqlite, .nsys-rep)")
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
    p.add_argument("--pop-trace", metavar="OUT.prv",
                   help="also write a copy of the trace for POP's tools (pypop, paramedir "
                        "cfgs): only the application's CPU threads, Extrae-style .row labels "
                        "(THREAD a.t.h)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _is_trace(path: str) -> bool:
    return path.endswith(".prv") or path.endswith(".prv.gz")


def _translate(inputs: list[str], out: Path, what: str = "") -> None:
    """Translate reports for the analysis: reports prepared in parallel (as many processes
    as cores, within the default memory budget), progress bars on a terminal."""
    from ..api import translate

    if what and stderr_is_terminal():
        print(f"nsys2prv analyze: translating {what}", file=sys.stderr)
    bars = Progress(enabled=True)
    try:
        translate(inputs, str(out), jobs=os.cpu_count() or 1, on_report=bars.report,
                  on_merge=bars.merge)
    finally:
        bars.close()


def analyze(inputs: list[str]) -> Analysis:
    """Analyse one trace, or translate reports into a temporary trace and analyse it."""
    if len(inputs) == 1 and _is_trace(inputs[0]):
        if not Path(inputs[0]).exists():
            raise InputError(f"{inputs[0]}: no such file")
        return analyze_path(inputs[0])
    if any(_is_trace(i) for i in inputs):
        raise UsageError("give either one trace (.prv) or reports, not both")
    with tempfile.TemporaryDirectory(prefix="nsys2prv-analyze-") as tmp:
        register_temp(tmp)
        out = Path(tmp) / "trace.prv"
        _translate(inputs, out)
        result = analyze_path(out)
    result.trace = " ".join(inputs)
    return result


def _pct(x: int, total: int) -> str:
    return f"{100 * x / total:6.2f}" if total else "     -"


def _eff(x: float | None) -> str:
    return f"{x:5.2f}" if x is not None else "    -"


def _model_lines(e: Efficiency, title: str) -> list[str]:
    return [f"### {title}",
            f"###   Device parallel efficiency:      {_eff(e.parallel)}   ({e.n} devices)",
            f"###    - Load balance:                 {_eff(e.load_balance)}",
            f"###    - Communication efficiency:     {_eff(e.communication)}",
            f"###    - Orchestration efficiency:     {_eff(e.orchestration)}"]


def format_report(a: Analysis) -> str:
    """A TALP-like host/device summary, then per-device times and overlap levels."""
    T = a.end
    out = [f"### nsys2prv analyze: {a.trace}",
           f"### trace time {T / 1e6:.3f} ms, {len(a.processes)} process(es) with GPU work, "
           f"{len(a.devices)} device(s)", "###", "### Host (main thread of each process)"]
    for h in a.host:
        parts = [f"running {h.running / 1e6:.3f} ms"]
        if h.offload_efficiency is not None:
            parts.insert(0, f"in CUDA calls {h.in_cuda / 1e6:.3f} ms")
        if h.in_mpi:
            parts.append(f"in MPI calls {h.in_mpi / 1e6:.3f} ms")
        what = (f"device offload efficiency {_eff(h.offload_efficiency)}"
                if h.offload_efficiency is not None else "no CUDA calls")
        out.append(f"###   {h.name}: {what}  ({', '.join(parts)})")
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
                + " ".join(f"{u / 1e6:.3f}" for u in c.useful), "###"]
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
    for g in a.devices:
        out.append(_device_line(g, T))
    return "\n".join(out) + "\n"


def _device_line(g: GroupResult, T: int) -> str:
    lv = " ".join(_pct(x, T) for x in g.levels)
    lc = " ".join(_pct(x, g.nccl_time) for x in g.levels_comm[1:])
    return (f"{g.name[:48]:<48} {_pct(g.useful_talp, T)} {_pct(g.comm_talp, T)} "
            f"{_pct(g.useful_nccl, T)} {_pct(g.comm_nccl, T)} {_pct(g.idle, T)} | {lv} | {lc}"
            f" | {_pct(g.hidden_comm, g.nccl_time)}")


def _run_inputs(run: str) -> list[str]:
    """The files of one run: a trace, a directory of reports, or a glob of reports."""
    import glob

    p = Path(run)
    if _is_trace(run):
        if not p.exists():
            raise InputError(f"{run}: no such file")
        return [run]
    if p.is_dir():
        found = [f for f in p.iterdir() if f.name.endswith((".sqlite", ".nsys-rep", ".qdrep"))]
        # a report and its export side by side are one report: take the export
        exported = {f.name[: -len(".sqlite")] for f in found if f.name.endswith(".sqlite")}
        files = sorted(str(f) for f in found if f.name.endswith(".sqlite")
                       or f.name.rsplit(".", 1)[0] not in exported)
    else:
        files = sorted(glob.glob(run))
    if not files:
        raise InputError(f"{run}: no trace or reports found for this run")
    return files


def scaling_main(args) -> int:
    from ..analysis import scaling

    runs = []
    for run in args.inputs:
        files = _run_inputs(run)
        label = run.rstrip("/")  # as given: the table's heads drop what runs share
        for suffix in (".prv.gz", ".prv"):
            label = label[: -len(suffix)] if label.endswith(suffix) else label
        if len(files) == 1 and _is_trace(files[0]):
            runs.append(scaling.run_of_path(files[0], label))
            continue
        with tempfile.TemporaryDirectory(prefix="nsys2prv-scaling-") as tmp:
            register_temp(tmp)
            out = Path(tmp) / "trace.prv"
            _translate(files, out, f"run {label} ({len(files)} report"
                                   f"{'s' if len(files) > 1 else ''})")
            runs.append(scaling.run_of_path(out, label))
    columns = scaling.table(runs, weak=args.weak)
    if args.json:
        json.dump(scaling.to_dicts(columns), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.csv:
        sys.stdout.write(scaling.format_csv(columns))
    else:
        sys.stdout.write(scaling.format_table(columns, args.weak, colour=sys.stdout.isatty()))
    if args.plot:
        scaling.plot(columns, args.plot)
    return 0


def main(argv: list[str]) -> int:
    """Entry point of `nsys2prv analyze` (dispatched from nsys2prv.cli)."""
    args = _parser().parse_args(argv)
    if args.scaling:
        return scaling_main(args)
    if args.weak or args.csv:
        raise UsageError("--weak and --csv go with --scaling")
    if args.pop_trace and not (len(args.inputs) == 1 and _is_trace(args.inputs[0])):
        raise UsageError("--pop-trace needs one trace (.prv) as input")
    result = analyze(args.inputs)
    if args.pop_trace:
        from ..analysis.pop import pop_trace

        pop_trace(args.inputs[0], args.pop_trace)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(result))
    if args.plot:
        from ..analysis.plot import plot_analysis

        plot_analysis(result, args.plot)
    return 0
