"""`nsys2prv prepare` and `nsys2prv merge`: the two stages as separate commands.

For jobs too large for one machine: a SLURM array job runs `prepare` once per report (each
writes a partial trace directory, see docs/intermediate.md) and one job runs `merge`:

    nsys2prv prepare rank17.nsys-rep parts/rank17
    nsys2prv merge parts/ job.prv
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import InputError, UsageError
from ..pipeline.budget import memory_size
from ..pipeline.prepare import META_FILE
from ..report.inputs import expand_inputs, natural_key
from .common import Parser, add_window_arguments, kind_list, print_summary, window_of


def _prepare_parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsys2prv prepare",
               description="Translate one report into a partial trace directory.")
    p.add_argument("report", help="an export (.sqlite) or a report (.nsys-rep/.qdrep)")
    p.add_argument("directory", help="directory to create for the partial trace")
    p.add_argument("--only", metavar="KINDS")
    p.add_argument("--exclude", metavar="KINDS", default="")
    p.add_argument("--sync-nvtx", metavar="NAME")
    p.add_argument("--memory", type=memory_size, metavar="SIZE",
                   help="memory for this report's buffers, e.g. 1G (default 2G)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--debug", action="store_true")
    return p


def _merge_parser() -> argparse.ArgumentParser:
    p = Parser(prog="nsys2prv merge",
               description="Merge partial trace directories into one Paraver trace.")
    p.add_argument("paths", nargs="*", metavar="PARTIAL... OUTPUT",
                   help="partial directories (or directories holding them), then OUTPUT.prv")
    p.add_argument("-z", "--compress", action="store_true")
    p.add_argument("--sync", choices=["auto", "MPI_Init", "NCCL"], default="auto")
    p.add_argument("--sync-nvtx", metavar="NAME")
    p.add_argument("--sync-by-task", action="store_true")
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes merging time windows of a large trace "
                        "(default: the number of cores)")
    p.add_argument("--memory", type=memory_size, metavar="SIZE",
                   help="memory for all merging processes together, e.g. 4G (default 2G)")
    p.add_argument("--values-like", metavar="OTHER.prv",
                   help="number names as the nsys2prv trace OTHER.prv did (names it lacks "
                        "after its largest value)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--debug", action="store_true")
    add_window_arguments(p)
    return p


def partials_in(directory: Path) -> list[str]:
    """A partial directory itself, or the partials one level below a directory (in natural
    name order, so that the result does not depend on the file system)."""
    if (directory / META_FILE).is_file():
        return [str(directory)]
    found = sorted((str(d) for d in directory.iterdir() if (d / META_FILE).is_file()),
                   key=natural_key)
    if not found:
        raise InputError(f"{directory}: no partial traces in this directory")
    return found


def find_partials(paths: list[str]) -> list[Path]:
    """Partial directories given directly, found one level below the given directories, or
    named by a glob or @LIST (as reports are: nsys2prv.report.inputs)."""
    out = []
    for p in map(Path, expand_inputs(paths, directory=partials_in)):
        if not (p / META_FILE).is_file():
            raise InputError(f"{p}: not a partial trace directory")
        out.append(p)
    return out


def main(command: str, argv: list[str]) -> int:

    if command == "prepare":
        args = _prepare_parser().parse_args(argv)
        from ..api import prepare_report

        meta = prepare_report(args.report, args.directory, only=kind_list(args.only),
                              exclude=kind_list(args.exclude) or [], sync_nvtx=args.sync_nvtx,
                              memory=args.memory)
        if not args.quiet:
            counts = ", ".join(f"{k} {v}" for k, v in sorted(meta["counts"].items()))
            print(f"nsys2prv: prepared {args.directory}: {counts}", file=sys.stderr)
        return 0
    args = _merge_parser().parse_args(argv)
    if len(args.paths) < 2:
        raise UsageError("give at least one partial directory and the output trace name")
    *dirs, output = args.paths
    from ..api import merge_partials

    sync = None if args.no_sync else (f"nvtx:{args.sync_nvtx}" if args.sync_nvtx else args.sync)
    window = window_of(args)
    result = merge_partials(find_partials(dirs), output, compress=args.compress, sync=sync,
                            sync_by_task=args.sync_by_task, jobs=args.jobs,
                            memory=args.memory, window=window, allow_empty=args.allow_empty,
                            values_like=args.values_like)
    if not args.quiet:
        print_summary(result, 0.0)
    return 0
