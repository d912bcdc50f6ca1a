"""gpu_gaps: time a GPU sat idle between two operations of one process.

Per (process, device), between the start of its first operation and the end of its last, a
gap is a stretch that no operation (nor profiler overhead, see `gpu_ops`) covers. It is
found as nsys does without comparing intervals pairwise: with the starts and the ends each
sorted, the j-th end and the (j+1)-th start bound a gap exactly when that end comes before
that start. Gaps longer than `gap` ms are listed, longest first.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .base import Column, Option, Rule, RuleInput, limit_rows, numbered
from .gpu_ops import Operations, check_gpu_tables, operations, present_apis

DEFAULT_GAP_MS = 500

COLUMNS = (
    Column("Row#", pl.Int64),
    Column("Duration (ns)", pl.Int64, "ns"),
    Column("Start (ns)", pl.Int64, "ns"),
    Column("PID", pl.Int64),
    Column("Device ID", pl.Int64),
    Column("Context ID", pl.Int64),
)


def idle_gaps(ops: Operations, threshold_ns: int) -> pl.DataFrame:
    """Gaps longer than `threshold_ns` in one API's operations, in (pid, device, time)
    order. The context is that of the operation whose end opens the gap (of equal ends, the
    last in scan order, as SQLite's stable sort leaves them)."""
    keep = np.flatnonzero(ops.span_of >= 0)
    whole = keep.size == ops.frame.height
    group = ops.span_of if whole else ops.span_of[keep]
    start = ops.frame["start"].to_numpy()
    end = ops.frame["end"].to_numpy()
    if not whole:
        start, end = start[keep], end[keep]
    gap, end_time, by_end = following_gaps(group, start, end)
    del start, end
    opens = np.flatnonzero((gap > threshold_ns) & (gap > 0))
    found = by_end[opens]
    owner = ops.spans[group[found]] if opens.size else ops.spans.clear()
    context = ops.frame["context"].gather(found if whole else keep[found])
    return pl.DataFrame({
        "Duration (ns)": pl.Series(gap[opens], dtype=pl.Int64),
        "Start (ns)": pl.Series(end_time[opens], dtype=pl.Int64),
        "PID": owner["pid"], "Device ID": owner["device"],
        "Context ID": pl.Series(context, dtype=pl.Int64)})


# (span, time) sorted as one int64 key when both fit: the span in the top 10 bits, the time
# (>= 0 and < 2^53) below; then the difference of two keys of one span is a time difference.
_TIME_BITS = 53
_MAX_PACKED_SPANS = 1 << (63 - _TIME_BITS)


def following_gaps(group: np.ndarray, start: np.ndarray, end: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """With starts and ends each sorted by (span, time), ends in stable order: for each
    end but the last, the next start minus it (0 when that start is in another span), the
    sorted end times, and the operation of each sorted end."""
    fits = start.size == 0 or (int(group.max()) < _MAX_PACKED_SPANS
                               and min(int(start.min()), int(end.min())) >= 0
                               and max(int(start.max()), int(end.max())) < 1 << _TIME_BITS)
    if not fits:
        by_start = np.lexsort((start, group))
        by_end = np.lexsort((end, group))
        gap = start[by_start][1:] - end[by_end][:-1]
        gap[group[by_start][1:] != group[by_end][:-1]] = 0
        return gap, end[by_end], by_end
    starts = group << _TIME_BITS
    starts |= start
    starts.sort()
    ends = group << _TIME_BITS
    ends |= end
    by_end = np.argsort(ends, kind="stable")
    ends = ends[by_end]
    gap = starts[1:] - ends[:-1]
    other_span = np.bitwise_xor(starts[1:], ends[:-1], out=starts[1:])
    other_span >>= _TIME_BITS
    gap[other_span != 0] = 0
    del starts, other_span
    ends &= (1 << _TIME_BITS) - 1
    return gap, ends, by_end


def find(inp: RuleInput, options: dict) -> pl.DataFrame:
    threshold_ns = int(options["gap"]) * 1_000_000
    limit = int(options["rows"])  # type: ignore[arg-type]
    apis = present_apis(inp)
    found = []
    for api, tables in apis:
        gaps = idle_gaps(operations(inp, api, tables), threshold_ns)
        # nsys caps each API's list before ranking when it unites several APIs (even one
        # with an empty table), so with several the first gaps in time order are kept.
        found.append(limit_rows(gaps, limit) if len(apis) > 1 else gaps)
    gaps = pl.concat(found)
    ranked = gaps.sort("Duration (ns)", "Start (ns)", descending=[True, False],
                       maintain_order=True)
    return numbered(limit_rows(ranked, limit))


def _advice(options: dict) -> str:
    return (f"A GPU sat idle for more than {options['gap']} ms in the ranges below (per "
            "process and device, profiler overheads excluded). Closing them may speed up "
            "the application.\n\n"
            "What to try:\n"
            "   1. Look at what the CPU does meanwhile (CPU sampling, blocked OS runtime "
            "calls, thread synchronisation): a slow or waiting CPU thread leaves the GPU "
            "without work.\n"
            "   2. Mark the CPU code with NVTX ranges to see which part of the program runs "
            "during the gaps.")


def _no_result(options: dict) -> str:
    return (f"No GPU was idle for more than {options['gap']} ms: no problem found with GPU "
            "utilisation.")


RULE = Rule(
    name="gpu_gaps",
    old_name="gpu-starv",
    title="GPU Gaps",
    summary="time ranges where a GPU is idle for longer than a threshold",
    options=(Option("gap", DEFAULT_GAP_MS,
                    f"only gaps longer than this many ms (default {DEFAULT_GAP_MS})"),),
    columns=COLUMNS,
    check=check_gpu_tables,
    find=find,
    advice=_advice,
    no_result=_no_result,
)
