"""Windows of a run: `--filter-time [START]/[END]` and `--filter-nvtx RANGE[@DOMAIN][/INDEX]`,
with exactly `nsys stats`' syntax.

Times are integers or decimals (scientific notation allowed, negative allowed) each followed
by an optional unit, several in a row adding up (`1s200ms`, `1.5e3us`); no unit means
nanoseconds. Units: ns/nsec, us/usec, ms/msec, s/sec, m/min, h/hour. An omitted side of
`START/END` is open. An NVTX range is named by its text; a range that belongs to a domain must
be given with `@DOMAIN`, one without a domain without it; `/INDEX` picks the INDEX-th instance
(zero-based) by start time, and is taken as part of the name when it is not a non-negative
integer. Malformed specs are one-line `UsageError`s before any work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..errors import InputError, UsageError

UNITS = {"ns": 1, "nsec": 1, "us": 1_000, "usec": 1_000, "ms": 1_000_000, "msec": 1_000_000,
         "s": 1_000_000_000, "sec": 1_000_000_000, "m": 60_000_000_000,
         "min": 60_000_000_000, "h": 3_600_000_000_000, "hour": 3_600_000_000_000}
_TERM = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-z]*)")


@dataclass(frozen=True)
class TimeFilter:
    """[start, end] in the time base of the request (None: open side)."""

    start: int | None
    end: int | None

    def describe(self) -> str:
        """The window as asked, in seconds ('-0.5 s/1.25 s', an open side empty)."""
        side = lambda t: "" if t is None else f"{t / 1e9:.9g} s"  # noqa: E731
        return f"{side(self.start)}/{side(self.end)}"


@dataclass(frozen=True)
class NvtxFilter:
    """The `index`-th instance (by start time) of the NVTX range `name` of `domain` (None:
    the range has no domain)."""

    name: str
    domain: str | None
    index: int

    def describe(self) -> str:
        return (self.name + (f"@{self.domain}" if self.domain else "")
                + (f"/{self.index}" if self.index else ""))


Filter = TimeFilter | NvtxFilter


def parse_duration(text: str) -> int:
    """ns of a time value such as `1s200ms`, `2.5us`, `-3e6`, `10` (ns)."""
    pos, total, terms = 0, 0.0, 0
    while pos < len(text):
        m = _TERM.match(text, pos)
        if not m or m.end() == pos:
            raise UsageError(f"bad time value '{text}': expected numbers with units "
                             f"({', '.join(UNITS)}), e.g. 1s200ms")
        unit = m.group(2) or "ns"
        if unit not in UNITS:
            raise UsageError(f"bad time value '{text}': unknown unit '{unit}' (units: "
                             f"{', '.join(UNITS)})")
        total += float(m.group(1)) * UNITS[unit]
        terms += 1
        pos = m.end()
    if not terms:
        raise UsageError("empty time value")
    return round(total)


def parse_time_filter(text: str) -> TimeFilter:
    """`START/END`, either side may be empty, not both; START <= END."""
    if text.count("/") != 1:
        raise UsageError(f"--filter-time '{text}': expected START/END (one of them may be "
                         "empty), e.g. 1s/1s500ms")
    a, b = (x.strip() for x in text.split("/"))
    if not a and not b:
        raise UsageError("--filter-time '/': give a start, an end or both")
    start = parse_duration(a) if a else None
    end = parse_duration(b) if b else None
    if start is not None and end is not None and start > end:
        raise UsageError(f"--filter-time '{text}': the start is after the end")
    return TimeFilter(start, end)


def parse_nvtx_filter(text: str) -> NvtxFilter:
    """`RANGE[@DOMAIN][/INDEX]`."""
    spec, index = text, 0
    if "/" in text:
        head, _, tail = text.rpartition("/")
        if tail.isdigit():
            spec, index = head, int(tail)
    name, at, domain = spec.rpartition("@") if "@" in spec else (spec, "", "")
    if not name:
        raise UsageError(f"--filter-nvtx '{text}': no range name")
    if at and not domain:
        raise UsageError(f"--filter-nvtx '{text}': no domain after '@'")
    return NvtxFilter(name, domain or None, index)


def parse_filter(time: str | None = None, nvtx: str | None = None) -> Filter | None:
    """The window the command line asks for; like nsys, `--filter-nvtx` wins over
    `--filter-time`."""
    if nvtx is not None:
        return parse_nvtx_filter(nvtx)
    if time is not None:
        return parse_time_filter(time)
    return None


def parse_window(text: str) -> Filter:
    """A window given as one text (the library's form): "START/END" (both sides empty or
    starting with a digit or a sign) is a time window, anything else an NVTX range
    "NAME[@DOMAIN][/INDEX]" (whose name may hold a slash)."""
    a, _, b = text.partition("/")
    if "/" in text and all(not x or x.strip()[:1] in "0123456789+-." for x in (a, b)):
        return parse_time_filter(text)
    return parse_nvtx_filter(text)


# -- where a window lies on the trace -----------------------------------------------------

class WindowMoved(Exception):
    """The clocks known after the windowed reports were read put the window elsewhere than
    the first estimate: the reports must be read again for `local` windows."""

    def __init__(self, local: list[tuple[int, int] | None]) -> None:
        super().__init__("window moved")
        self.local = local


def nvtx_instance(ranges: pl.DataFrame, flt: NvtxFilter) -> tuple[int, int] | None:
    """(start, end) local ns of the instance `flt` asks for, None if the report has fewer."""
    domain = (pl.col("domain").is_null() if flt.domain is None
              else pl.col("domain") == flt.domain)
    hits = ranges.filter((pl.col("name") == flt.name) & domain).sort("start", "end")
    if flt.index >= hits.height:
        return None
    row = hits.row(flt.index, named=True)
    return int(row["start"]), int(row["end"])


def nearest_ranges(ranges: list[pl.DataFrame], name: str, n: int = 5) -> list[str]:
    """The range names (name@domain) closest to `name`, for an error message."""
    import difflib

    found = sorted({f"{r['name']}@{r['domain']}" if r["domain"] else str(r["name"])
                    for df in ranges for r in df.select("name", "domain").unique()
                    .iter_rows(named=True) if r["name"]})
    close = difflib.get_close_matches(name, found, n=n, cutoff=0.3)
    return close or found[:n]


@dataclass
class Resolved:
    """A window on the trace's time [start, end) (end None: the trace's end), the report
    windows that hold it, and what the summary should say."""

    start: int
    end: int | None
    local: list[tuple[int, int] | None]  # per report, None: the whole report
    notes: list[str]


def resolve(flt: Filter, shifts: list[int], firsts: list[int],
            ranges: list[pl.DataFrame] | None, names: list[str]) -> Resolved:
    """Where `flt` lies on the trace. Time filters are in the trace's time, but for one
    report in its own timeline (what `nsys stats --filter-time` takes: ns since the
    session start); an NVTX filter takes the instance on every report and their union, so
    that every rank is cut at the same instant."""
    notes: list[str] = []
    single = len(shifts) == 1
    if isinstance(flt, TimeFilter):
        # one report: its timeline is the export's own clock, the trace starts at its
        # first record; several: the trace's own time
        base = firsts[0] if single else 0
        start = 0 if flt.start is None else max(0, flt.start - base)
        end = None if flt.end is None else flt.end - base
    else:
        assert ranges is not None
        spans = []
        for i, (df, shift) in enumerate(zip(ranges, shifts)):
            hit = nvtx_instance(df, flt)
            if hit is None:
                notes.append(f"{names[i]} has no instance {flt.index} of the NVTX range "
                             f"{flt.describe()}")
            else:
                spans.append((hit[0] + shift, hit[1] + shift))
        if not spans:
            near = nearest_ranges(ranges, flt.name)
            raise InputError(f"no report has the NVTX range {flt.describe()}"
                             + (f" (ranges found: {', '.join(near)})" if near else
                                " (the reports have no NVTX ranges)"))
        start, end = min(s for s, _ in spans), max(e for _, e in spans)
        if len(spans) < len(shifts):
            notes[:0] = [f"window = the union of {len(spans)} of {len(shifts)} reports' "
                         "instances"]
    if end is not None:
        end = max(end, start)  # before the run: empty (the merge says it lies outside)
    local = [(start - s, (end if end is not None else 1 << 62) - s) for s in shifts]
    return Resolved(start, end, local, notes)


# -- cutting a window out of .prv text -----------------------------------------------------




class CutStream:
    """A writer of .prv text that keeps only the window [lo, hi) of it (the engine's
    `PrvScanner` in cut mode): times moved by -lo, what is open at lo written at 0 (the
    states that cross it, the last value of every event type, the open ranges of the types
    that nest), states clipped, communications kept when both ends are inside."""

    def __init__(self, task_rows: list[int], window: tuple[int, int], write) -> None:
        """`task_rows`: the first row of every task, then the row count (one application)."""
        from ..engine._engine import PrvScanner

        self._scanner = PrvScanner(task_rows, [0], cut=window, stacked=stacked_types(),
                                   attributes=attribute_types())
        self._write = write

    def feed(self, block: bytes | memoryview) -> None:
        self._scanner.feed(block)
        text = self._scanner.take()["text"]
        if text:
            self._write(text)

    def close(self) -> None:
        text = self._scanner.take(final=True)["text"]
        if text:
            self._write(text)


def attribute_types() -> list[int]:
    """Event types that describe what starts with them (bytes, ids, geometry, kinds of
    memory, return values, categories) rather than open a region: at a window's start they
    are written only alongside a value still open from the same time (the clipped kernel's
    geometry), not as what the last, long ended, activity left behind. Plain numbers of the
    registry, but those that hold a value until changed (memory in use, the CPU of a thread,
    graph ids closed by 0), the name-valued attributes, and the instants: NVTX marks and
    CPU samples (their functions at every depth and their modules)."""
    from ..paraver import registry as reg
    from ..paraver.registry import (cuda, gpu_memory, graphs, nccl, nvtx, openacc, osrt,
                                    sampling)

    holding = {osrt.THREAD_CPU, graphs.GRAPH_ID, graphs.GRAPH_EXEC_ID, graphs.GRAPH_NODE_ID,
               openacc.OPENACC_LINE, *(t.type for t in gpu_memory.EVENT_TYPES)}
    depths = sampling.SAMPLED_DEPTH
    named = {cuda.MEMORY_SRC_KIND, cuda.MEMORY_DST_KIND, cuda.KERNEL_OCCUPANCY_LIMITER,
             nvtx.NVTX_CATEGORY, nvtx.NVTX_MARK, nccl.NCCL_DATATYPE, nccl.NCCL_REDUCTION,
             sampling.SAMPLED_FUNCTION, sampling.SAMPLED_MODULE,
             *range(depths.base, depths.base + depths.size)}
    plain = {t.type for t in reg.EVENT_TYPES if t.values is None}
    return sorted((plain - holding) | named)


def stacked_types() -> list[int]:
    """Event types whose regions nest (a value opens one, 0 closes the innermost): at a
    window's start all their open values are written, innermost last, so that Paraver's
    Stacked Val sees the same stack (the callers of nested calls with a stack too)."""
    from ..paraver.registry import nvtx, openacc, sampling

    callers = sampling.CALLERS
    return [*range(nvtx.NVTX_PUSHPOP_BASE, nvtx.NVTX_PUSHPOP_BASE + nvtx.NVTX_DOMAIN_MAX),
            openacc.OPENACC, openacc.OPENACC_DATA, openacc.OPENACC_LAUNCH,
            openacc.OPENACC_SOURCE_FILE, openacc.OPENACC_LINE, openacc.OPENACC_FUNCTION,
            *range(callers.base, callers.base + callers.size)]


def cut_trace(src: str | Path, dst: str | Path, start: int, end: int | None,
              allow_empty: bool = False) -> int:
    """Write the window [start, end) of the trace `src` (times of the trace) as the trace
    `dst` (.prv, with its .pcf and .row copied); returns the new trace's end time."""
    import gzip

    from ..paraver.output import TraceWriter
    from ..paraver.read import BLOCK, HEADER, companion, file_blocks, read_layout
    from ..paraver.writeid import is_mark, unmark_pcf, unmark_row

    layout = read_layout(src)
    hi = layout.end if end is None else min(end, layout.end)
    if (start >= layout.end or hi <= start) and not allow_empty:
        raise InputError(f"the window from {start / 1e9:.9f} s lies outside the trace "
                         f"(0 to {layout.end / 1e9:.9f} s); --allow-empty writes an empty trace")
    rows = [0]
    for _, _, threads, _ in layout.tasks:
        rows.append(rows[-1] + threads)
    src = Path(src)
    opener = gzip.open if src.name.endswith(".gz") else open
    pcf, row = companion(src, ".pcf"), companion(src, ".row")
    with opener(src, "rb") as f, TraceWriter(dst) as writer:
        m = HEADER.match(f.readline().decode().strip())
        assert m is not None  # read_layout parsed it
        length = max(0, hi - start)
        writer.begin(f"#Paraver ({m['date']}):{length}_ns:{m['resources']}:{m['rest']}\n"
                     f"# window: [{start}, {hi}) ns of {src.name}; add {start} ns to a time of "
                     f"this trace to get the whole trace's\n",
                     unmark_pcf(pcf.read_text()) if pcf.exists() else "",
                     unmark_row(row.read_text()) if row.exists() else "")
        cut = CutStream(rows, (start, start + length), writer.write_bytes)
        second = f.readline()  # the source's write id, if any, is not this write's
        if not is_mark(second):
            cut.feed(second)
        for block in file_blocks(f, BLOCK):
            cut.feed(block)
        cut.close()
        writer.commit()
    return length
