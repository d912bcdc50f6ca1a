"""What every subcommand of the command line shares: the argument parser that fails in one
line, progress bars, the translation summary, kind lists and error wording."""

from __future__ import annotations

import argparse
import errno
import sys
import time

from ..errors import UsageError
from ..supervise import stderr_is_terminal


class Parser(argparse.ArgumentParser):
    """argparse that ends a wrong command line with one line and exit code 2."""

    def error(self, message: str):
        raise UsageError(message)


WINDOW_HELP_BASE = ("for one report, ns since its session start (nsys' timeline, what "
                    "`nsys stats --filter-time` takes); for several, the merged trace's own "
                    "time (what Paraver shows for the whole run)")


def add_window_arguments(p: argparse.ArgumentParser) -> None:
    """--filter-time / --filter-nvtx / --allow-empty, with nsys' syntax."""
    p.add_argument("--filter-time", metavar="[START]/[END]",
                   help="translate only this window of the run: times with units (ns, us, ms, "
                        "s, m, h; sums like 1s200ms; an empty side is open), "
                        + WINDOW_HELP_BASE)
    p.add_argument("--filter-nvtx", metavar="RANGE[@DOMAIN][/INDEX]",
                   help="translate only the INDEX-th instance (0 = first, by start time) of "
                        "the NVTX range RANGE (of DOMAIN; a range without a domain is named "
                        "without @); with several reports, the union of every report's "
                        "instance. Wins over --filter-time, as in nsys")
    p.add_argument("--allow-empty", action="store_true",
                   help="write an empty trace for a window outside the run instead of failing")


def window_of(args: argparse.Namespace):
    """The window of --filter-time / --filter-nvtx (parsed: a malformed one stops here)."""
    from ..pipeline.window import parse_filter

    return parse_filter(time=args.filter_time, nvtx=args.filter_nvtx)


def kind_list(text: str | None) -> list[str] | None:
    """`--only`/`--exclude` text as a list of kind names (None when not given)."""
    if text is None:
        return None
    return [k.strip() for k in text.split(",") if k.strip()]


def kind_names() -> list[str]:
    """Every kind a translator exists for, in translation order (the --only vocabulary)."""
    from ..paraver.kinds import TRANSLATORS

    return list(TRANSLATORS)


SHOW_AFTER_S = 0.5  # a bar for a shorter command would only flicker


class Progress:
    """tqdm bars on stderr (only on a terminal): reports prepared, then the merge. Nothing is
    shown, and tqdm not even imported, before the command has run for SHOW_AFTER_S."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and stderr_is_terminal()
        self._since = time.monotonic()
        self._reports = None
        self._merge = None
        self._done = 0

    def _showing(self) -> bool:
        return self.enabled and time.monotonic() - self._since >= SHOW_AFTER_S

    def report(self, done: int, total: int) -> None:
        if not self._showing():
            return
        from tqdm import tqdm
        if self._reports is None:
            self._reports = tqdm(total=total, desc="reports", unit="report", leave=False)
        self._reports.update(done - self._reports.n)

    def merge(self, t: int, end: int) -> None:
        if not self._showing():
            return
        from tqdm import tqdm
        if self._merge is None:
            self._merge = tqdm(total=100, desc="writing trace", unit="%", leave=False)
        pct = int(100 * t / end) if end else 100
        self._merge.update(max(0, pct - self._merge.n))

    def close(self) -> None:
        for b in (self._reports, self._merge):
            if b is not None:
                b.close()


SUMMARY_REPORTS = 16  # more reports than this: the alignment summary shows the extremes
SUMMARY_LARGEST = 5


def print_summary(result, seconds: float) -> None:
    """The lines a translation ends with on stderr: what was written, counts, alignment."""
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
        details = al.details
        if len(details) > SUMMARY_REPORTS:  # a big job: the extremes (all in the header)
            by_fix = sorted(details, key=lambda d: abs(d["sync_correction_ns"]))
            hosts = len({d["host"] for d in details})
            print(f"nsys2prv:   {len(details)} reports on {hosts} host(s): offsets "
                  f"{min(d['offset_ns'] for d in details) / 1e6:.6f} to "
                  f"{max(d['offset_ns'] for d in details) / 1e6:.6f} ms; the largest sync "
                  "corrections below, every report's in the trace's header", file=err)
            details = by_fix[-SUMMARY_LARGEST:][::-1]
        for d in details:
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
    for note in getattr(result, "notes", []):
        print(f"nsys2prv: {note}", file=err)
    if result.warnings:
        print("nsys2prv: warnings: " + "; ".join(f"{k}: {v}" for k, v in
                                                  sorted(result.warnings.items())), file=err)


def describe_os_error(e: OSError) -> str:
    from ..paraver.output import os_errno

    where = f"{e.filename}: " if getattr(e, "filename", None) else ""
    code = os_errno(e)
    if code in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full (or quota exceeded) while writing; nothing was written"
    elif code == errno.EFBIG:
        what = "file size limit reached while writing; nothing was written"
    else:
        what = e.strerror or str(e)
    return where + what


def show_warning(message, category, filename, lineno, file=None, line=None):
    """Python warnings as one `nsys2prv: warning:` line."""
    print(f"nsys2prv: warning: {message}", file=sys.stderr)
