"""`nsys2prv INPUT... OUTPUT.prv` (translate) and `nsys2prv check TRACE.prv`."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .. import __version__
from ..errors import UsageError
from ..pipeline.budget import memory_size
from ..report.inputs import expand_inputs
from .common import (Parser, Progress, add_window_arguments, kind_list, kind_names,
                     print_summary, window_of)


def translate_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="nsys2prv",
        description="Translate Nsight Systems exports (.sqlite, or .nsys-rep/.qdrep with nsys "
                   "installed) into a Paraver trace. Several inputs are merged into one trace.",
        epilog="Other commands: 'nsys2prv check TRACE.prv' validates a trace; 'nsys2prv "
               "analyze INPUTS' prints the GPU efficiency model; 'nsys2prv prepare REPORT DIR' "
               "and 'nsys2prv merge DIR... OUT.prv' run the two stages separately; 'nsys2prv "
               "paraver-setup' installs the views and workspaces for wxparaver.")
    p.add_argument("paths", nargs="*", metavar="INPUT... OUTPUT",
                   help="one or more reports, then the output trace name (.prv or .prv.gz). "
                        "An INPUT may be a directory (its reports), a quoted glob such as "
                        "'run/rank*.sqlite' (expanded in natural order: rank2 before rank10) "
                        "or @LIST, a file naming one report a line")
    p.add_argument("--only", metavar="KINDS",
                   help="translate only these kinds, comma separated: "
                        f"{','.join(kind_names())} (nsys2prv --list-kinds)")
    p.add_argument("--exclude", metavar="KINDS", default="",
                   help="translate everything present except these kinds "
                        "(same names as --only)")
    p.add_argument("--list-kinds", action="store_true",
                   help="print the kinds --only/--exclude accept, one a line, and exit")
    p.add_argument("-z", "--compress", action="store_true", help="write OUTPUT.prv.gz")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="reports prepared in parallel (default: number of cores)")
    p.add_argument("-m", "--multi-report", action="store_true",
                   help="accepted for compatibility: several inputs are always merged")
    p.add_argument("--host", action="append", metavar="REPORT=HOST", default=[],
                   help="host (Paraver node) of a report without a recorded host name")
    p.add_argument("--sync", choices=["auto", "MPI_Init", "NCCL"], default="auto",
                   help="clock sync point of several reports (auto: end of MPI_Init, else of "
                        "the first NCCL kernel)")
    p.add_argument("--sync-nvtx", metavar="NAME",
                   help="align reports on the end of the first NVTX range or mark NAME")
    p.add_argument("--sync-by-task", action="store_true",
                   help="correct every report on its own (default: one correction per host)")
    add_window_arguments(p)
    p.add_argument("--values-like", metavar="OTHER.prv",
                   help="number kernel names, NVTX ranges, calls and every other named value "
                        "as the nsys2prv trace OTHER.prv did (names it lacks after its "
                        "largest value), so that both traces show the same value and colour "
                        "for the same name side by side")
    p.add_argument("--no-sync", action="store_true",
                   help="align reports on their recorded session start times only")
    p.add_argument("--workdir", help="directory for temporary files (default: next to OUTPUT)")
    p.add_argument("--dask", metavar="SCHEDULER",
                   help="prepare the reports on a Dask cluster (scheduler address; workers "
                        "must see the inputs and --workdir at the same paths)")
    p.add_argument("--memory", type=memory_size, metavar="SIZE",
                   help="memory for all processes together, e.g. 4G (default 2G): caps how "
                        "many reports are read at once and sizes the buffers")
    p.add_argument("--chunk-rows", type=int, metavar="N",
                   help="rows read from the export at a time (default: from --memory, "
                        "at most 250000)")
    p.add_argument("--spill-rows", type=int, metavar="N",
                   help="records held in memory before sorting them to disk (default 4000000)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or summary")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"nsys2prv {__version__}")
    return p


def check_parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsys2prv check",
               description="Validate a Paraver trace strictly (header, ids, order, states, "
                           ".pcf/.row consistency).")
    p.add_argument("trace", help="TRACE.prv or TRACE.prv.gz")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--debug", action="store_true")
    return p


def run_translate(argv: list[str]) -> int:
    args = translate_parser().parse_args(argv)
    if args.list_kinds:
        print("\n".join(kind_names()))
        return 0
    if len(args.paths) < 2:
        raise UsageError("give at least one input and the output trace name "
                         "(nsys2prv --help)")
    from ..api import translate

    *given, output = args.paths
    inputs = expand_inputs(given)
    hosts = None
    if args.host:
        names = {}
        for item in args.host:
            if "=" not in item:
                raise UsageError(f"--host expects REPORT=HOST, got '{item}'")
            k, v = item.split("=", 1)
            names[k] = v
        hosts = [names.get(os.path.basename(i)) or names.get(i) for i in inputs]
    bars = Progress(enabled=not args.quiet)
    t0 = time.time()
    window = window_of(args)
    result = translate(inputs, output, only=kind_list(args.only),
                       exclude=kind_list(args.exclude) or [],
                       compress=args.compress, jobs=max(1, args.jobs), hosts=hosts,
                       workdir=args.workdir, sync=None if args.no_sync else args.sync,
                       sync_nvtx=args.sync_nvtx, sync_by_task=args.sync_by_task,
                       dask=args.dask, chunk_rows=args.chunk_rows, spill_rows=args.spill_rows,
                       memory=args.memory, window=window, allow_empty=args.allow_empty,
                       on_report=bars.report, on_merge=bars.merge,
                       values_like=args.values_like)
    bars.close()
    if not args.quiet:
        print_summary(result, time.time() - t0)
    return 0


def run_check(argv: list[str]) -> int:
    args = check_parser().parse_args(argv)
    from ..paraver.check import check_trace

    report = check_trace(args.trace)
    if not args.quiet:
        for line in report.messages():
            print(line, file=sys.stderr if not report.ok else sys.stdout)
    return 0 if report.ok else 1
