"""Command line: `nsys2prv INPUT... OUTPUT.prv`, `nsys2prv check TRACE.prv`.

Errors are one line on stderr and an exit code (1 bad input/environment, 2 usage, 130
interrupted); `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import time
import warnings
from concurrent.futures.process import BrokenProcessPool

from . import __version__
from .errors import Interrupted, Nsys2PrvError, UsageError
from .pipeline.budget import memory_size
from .supervise import stderr_is_terminal

SUBCOMMANDS = ("translate", "check", "analyze", "prepare", "merge", "paraver-setup")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2
        raise UsageError(message)


def _translate_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="nsys2prv",
        description="Translate Nsight Systems exports (.sqlite, or .nsys-rep/.qdrep with nsys "
                    "installed) into a Paraver trace. Several inputs are merged into one trace.",
        epilog="Other commands: 'nsys2prv check TRACE.prv' validates a trace; 'nsys2prv "
               "analyze INPUTS' prints the GPU efficiency model; 'nsys2prv prepare REPORT DIR' "
               "and 'nsys2prv merge DIR... OUT.prv' run the two stages separately; 'nsys2prv "
               "paraver-setup' installs the views and workspaces for wxparaver.")
    p.add_argument("paths", nargs="*", metavar="INPUT... OUTPUT",
                   help="one or more reports, then the output trace name (.prv or .prv.gz)")
    p.add_argument("--only", metavar="KINDS",
                   help="translate only these kinds, comma separated: "
                        f"{','.join(_kind_names())} (nsys2prv --list-kinds)")
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


def _check_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="nsys2prv check",
                description="Validate a Paraver trace strictly (header, ids, order, states, "
                            ".pcf/.row consistency).")
    p.add_argument("trace", help="TRACE.prv or TRACE.prv.gz")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--debug", action="store_true")
    return p


def _kinds(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [k.strip() for k in text.split(",") if k.strip()]


def _kind_names() -> list[str]:
    """Every kind a translator exists for, in translation order (the --only vocabulary)."""
    from .paraver.kinds import TRANSLATORS

    return list(TRANSLATORS)


def _run_translate(argv: list[str]) -> int:
    args = _translate_parser().parse_args(argv)
    if args.list_kinds:
        print("\n".join(_kind_names()))
        return 0
    if len(args.paths) < 2:
        raise UsageError("give at least one input and the output trace name "
                         "(nsys2prv --help)")
    from .translate import translate

    *inputs, output = args.paths
    hosts = None
    if args.host:
        names = {}
        for item in args.host:
            if "=" not in item:
                raise UsageError(f"--host expects REPORT=HOST, got '{item}'")
            k, v = item.split("=", 1)
            names[k] = v
        hosts = [names.get(os.path.basename(i)) or names.get(i) for i in inputs]
    bars = _Progress(enabled=not args.quiet)
    t0 = time.time()
    result = translate(inputs, output, only=_kinds(args.only), exclude=_kinds(args.exclude) or [],
                       compress=args.compress, jobs=max(1, args.jobs), hosts=hosts,
                       workdir=args.workdir, sync=None if args.no_sync else args.sync,
                       sync_nvtx=args.sync_nvtx, sync_by_task=args.sync_by_task,
                       dask=args.dask, chunk_rows=args.chunk_rows, spill_rows=args.spill_rows,
                       memory=args.memory,
                       on_report=bars.report, on_merge=bars.merge)
    bars.close()
    if not args.quiet:
        _summary(result, time.time() - t0)
    return 0


class _Progress:
    """tqdm bars on stderr (only on a terminal): reports prepared, then the merge."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._reports = None
        self._merge = None
        self._done = 0

    def report(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm
        if self._reports is None:
            self._reports = tqdm(total=total, desc="reports", unit="report",
                                 disable=not stderr_is_terminal(), leave=False)
        self._reports.update(done - self._reports.n)

    def merge(self, t: int, end: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm
        if self._merge is None:
            self._merge = tqdm(total=100, desc="writing trace", unit="%",
                               disable=not stderr_is_terminal(), leave=False)
        pct = int(100 * t / end) if end else 100
        self._merge.update(max(0, pct - self._merge.n))

    def close(self) -> None:
        for b in (self._reports, self._merge):
            if b is not None:
                b.close()


def _summary(result, seconds: float) -> None:
    err = sys.stderr
    m = result.model
    print(f"nsys2prv: wrote {result.output} ({result.bytes_written / 1e6:.1f} MB) in "
          f"{seconds:.1f} s: {len(m.nodes)} node(s), {len(m.tasks)} task(s), "
          f"{len(m.rows)} rows, {result.end_time / 1e9:.3f} s of trace", file=err)
    if result.counts:
        items = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
        print(f"nsys2prv: translated {items}", file=err)
    al = result.alignment
    if len(al.details) > 1:
        print(f"nsys2prv: clocks aligned on {al.method}", file=err)
        for d in al.details:
            print(f"nsys2prv:   {d['report']} ({d['host']}): offset "
                  f"{d['offset_ns'] / 1e6:.6f} ms, sync correction "
                  f"{d['sync_correction_ns'] / 1e3:.3f} us", file=err)
        if al.residual_ns is not None:
            print(f"nsys2prv: spread at the sync point after alignment "
                  f"{al.residual_ns / 1e3:.3f} us (an upper bound of the residual skew; ranks "
                  "on one host share a clock, so there it is their own spread)", file=err)
        if al.check_point is not None:
            print(f"nsys2prv: spread of {al.check_point} after alignment "
                  f"{al.check_spread_ns / 1e3:.3f} us (independent check)", file=err)
    if result.warnings:
        print("nsys2prv: warnings: " + "; ".join(f"{k}: {v}" for k, v in
                                                  sorted(result.warnings.items())), file=err)


def _run_check(argv: list[str]) -> int:
    args = _check_parser().parse_args(argv)
    from .paraver.check import check_trace

    report = check_trace(args.trace)
    if not args.quiet:
        for line in report.messages():
            print(line, file=sys.stderr if not report.ok else sys.stdout)
    return 0 if report.ok else 1


def _on_signal(signum, frame):
    signal.signal(signum, signal.SIG_IGN)  # once: a second SIGTERM must not stop the cleanup
    raise Interrupted(f"interrupted by signal {signum}; partial outputs removed")


# what a command does and what to try when it runs out of memory (see supervise.py)
_DOING = {"translate": ("translating", "try a smaller --memory, or -j 1"),
          "analyze": ("analysing", "translate first with a smaller --memory, then analyze "
                                   "the trace"),
          "prepare": ("preparing", "try a smaller --memory"),
          "merge": ("merging", "try a smaller --memory"),
          "check": ("checking the trace", "free memory, or check on a larger machine")}


def main(argv: list[str] | None = None) -> int:
    """The command line. Run as the console script (no `argv`), each command runs in a
    supervised child process (`supervise.py`): a death by out-of-memory ends in one line and
    leaves no partial output. `--debug` or NSYS2PRV_NO_SUPERVISOR=1 run it in-process."""
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None and "--debug" not in args and not os.environ.get("NSYS2PRV_NO_SUPERVISOR"):
        cmd = args[0] if args and args[0] in SUBCOMMANDS else "translate"
        if cmd in _DOING:
            from .supervise import run_supervised

            return run_supervised(lambda: _main(args), *_DOING[cmd])
    return _main(args)


def _main(argv: list[str]) -> int:
    debug = "--debug" in argv
    signal.signal(signal.SIGTERM, _on_signal)
    warnings.simplefilter("default")
    warnings.showwarning = _show_warning
    try:
        if argv and argv[0] in SUBCOMMANDS:
            cmd, rest = argv[0], argv[1:]
        else:
            cmd, rest = "translate", argv
        if cmd == "check":
            return _run_check(rest)
        if cmd == "analyze":
            from .analysis.cli import main as analyze_main
            return analyze_main(rest)
        if cmd == "paraver-setup":
            from .analysis.workspace import main as setup_main
            return setup_main(rest)
        if cmd in ("prepare", "merge"):
            from .pipeline.cli import main as stage_main
            return stage_main(cmd, rest)
        return _run_translate(rest)
    except KeyboardInterrupt:
        if debug:
            raise
        print("nsys2prv: error: interrupted; partial outputs removed", file=sys.stderr)
        return Interrupted.exit_code
    except Nsys2PrvError as e:
        if debug:
            raise
        print(f"nsys2prv: error: {e}", file=sys.stderr)
        return e.exit_code
    except (MemoryError, BrokenProcessPool) as e:
        if debug:
            raise
        what = "out of memory" if isinstance(e, MemoryError) else \
            "a worker process died (out of memory?)"
        print(f"nsys2prv: error: {what}; partial outputs removed (try a smaller --memory "
              "or -j 1)", file=sys.stderr)
        return 1
    except OSError as e:  # disk full, file size limit, permissions on temporary files, ...
        if debug:
            raise
        print(f"nsys2prv: error: {describe_os_error(e)}", file=sys.stderr)
        return 1


def describe_os_error(e: OSError) -> str:
    from .paraver.output import os_errno

    where = f"{e.filename}: " if getattr(e, "filename", None) else ""
    code = os_errno(e)
    if code in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full (or quota exceeded) while writing; nothing was written"
    elif code == errno.EFBIG:
        what = "file size limit reached while writing; nothing was written"
    else:
        what = e.strerror or str(e)
    return where + what


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"nsys2prv: warning: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
