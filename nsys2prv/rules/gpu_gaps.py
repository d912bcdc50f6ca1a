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
from .gpu_ops import check_gpu_tables, device_spans, operations, present_apis

DEFAULT_GAP_MS = 500

COLUMNS = (
    Column("Row#", pl.Int64),
    Column("Duration (ns)", pl.Int64, "ns"),
    Column("Start (ns)", pl.Int64, "ns"),
    Column("PID", pl.Int64),
    Column("Device ID", pl.Int64),
    Column("Context ID", pl.Int64),
)


def idle_gaps(ops: pl.DataFrame, threshold_ns: int) -> pl.DataFrame:
    """Gaps longer than `threshold_ns` in one API's operations, in (pid, device, time)
    order. The context is that of the operation whose end opens the gap (of equal ends, the
    last in scan order, as SQLite's stable sort leaves them)."""
    spans, group = device_spans(ops)
    keep = np.flatnonzero(group >= 0)
    group = group[keep]
    start = ops["start"].to_numpy()[keep]
    end = ops["end"].to_numpy()[keep]
    start_group, start = sorted_in_groups(group, start)
    by_end = order_in_groups(group, end)
    end_group, end = group[by_end], end[by_end]
    del group
    opens = np.flatnonzero((end_group[:-1] == start_group[1:])
                           & (start[1:] - end[:-1] > threshold_ns) & (end[:-1] < start[1:]))
    owner = spans[end_group[opens]] if opens.size else spans.clear()
    context = ops["context"].gather(keep[by_end[opens]]) if opens.size else []
    return pl.DataFrame({
        "Duration (ns)": pl.Series(start[opens + 1] - end[opens], dtype=pl.Int64),
        "Start (ns)": pl.Series(end[opens], dtype=pl.Int64),
        "PID": owner["pid"], "Device ID": owner["device"],
        "Context ID": pl.Series(context, dtype=pl.Int64)})


# Sorting by (group, value) as one int64 key when groups and values fit: group in the top
# 10 bits, the value (a time >= 0 and < 2^53) below.
_VALUE_BITS = 53
_MAX_PACKED_GROUPS = 1 << (63 - _VALUE_BITS)


def _packable(group: np.ndarray, values: np.ndarray) -> bool:
    return (values.size == 0 or (int(group.max()) < _MAX_PACKED_GROUPS
                                 and int(values.min()) >= 0
                                 and int(values.max()) < (1 << _VALUE_BITS)))


def sorted_in_groups(group: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(groups, values) sorted by group then value."""
    if _packable(group, values):
        packed = np.sort((group << _VALUE_BITS) | values)
        return packed >> _VALUE_BITS, packed & ((1 << _VALUE_BITS) - 1)
    order = np.lexsort((values, group))
    return group[order], values[order]


def order_in_groups(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The stable order by group then value (ties keep their order)."""
    if _packable(group, values):
        return np.argsort((group << _VALUE_BITS) | values, kind="stable")
    return np.lexsort((values, group))


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
