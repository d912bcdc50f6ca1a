"""gpu_time_util: stretches of time where a GPU is used less than a threshold.

Per (process, device), the span from its first operation's start to its last operation's end
is cut into `chunks` chunks of equal length (the length rounded up to a whole ns, so the last
chunk may be shorter and fewer chunks may be needed). A chunk's use is the time operations
(and profiler overheads, see `gpu_ops`) overlap it, summed over operations (so concurrent
work can exceed 100 %), divided by the chunk length. Consecutive chunks below `threshold` %
are merged into one row whose use is their length-weighted mean, rounded to 0.1 %.

The overlap sums are computed without pairing operations with chunks: an operation adds its
partial overlap to the chunk of its start and of its end, and a whole chunk length to every
chunk in between (a difference array), so the work is linear in operations plus chunks.
Arithmetic follows nsys' SQL: times are exact integers, ratios IEEE doubles in the same order.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .base import Column, Option, Rule, RuleInput, limit_rows, numbered
from .gpu_ops import Operations, check_gpu_tables, operations, present_apis
from .numbers import sqlite_round, sequential_sums

DEFAULT_THRESHOLD = 50
DEFAULT_CHUNKS = 30
MAX_CHUNKS = 1000

COLUMNS = (
    Column("Row#", pl.Int64),
    Column("In-Use (%)", pl.Float64, "%"),
    Column("Duration (ns)", pl.Int64, "ns"),
    Column("Start (ns)", pl.Int64, "ns"),
    Column("PID", pl.Int64),
    Column("Device ID", pl.Int64),
    Column("Context ID", pl.Int64),
)


def _check_chunks(value: object) -> str | None:
    # nsys lets 0 through (it then finds nothing) and rejects the rest outside 1..1000
    if value and not 1 <= int(value) <= MAX_CHUNKS:  # type: ignore[call-overload]
        return f"must be between 1 and {MAX_CHUNKS}"
    return None


BLOCK = 1 << 20  # operations handled at a time (bounds the temporary arrays)


def chunk_use(ops: Operations, chunks: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk of every span: its span, its index in the span, its [start, end) (a 2-row
    array) and the summed overlap of the operations (float64, as nsys sums it; the sums
    are whole numbers below 2^53, so exact in any order)."""
    span_start = ops.spans["span_start"].to_numpy()
    span_end = ops.spans["span_end"].to_numpy()
    length = span_end - span_start
    width = np.ceil(length.astype(np.float64) / np.float64(chunks)).astype(np.int64)
    safe = np.maximum(width, 1)
    count = np.where(width > 0, np.minimum(chunks, -(-length // safe)), 0)
    first = np.cumsum(count) - count
    total = int(count.sum())
    span_of = np.repeat(np.arange(len(count)), count)
    index = np.arange(total) - first[span_of]
    c_start = span_start[span_of] + index * width[span_of]
    c_end = np.minimum(c_start + width[span_of], span_end[span_of])
    used = np.zeros(total, dtype=np.float64)
    steps = np.zeros(total + 1, dtype=np.int64)
    starts, ends = ops.frame["start"], ops.frame["end"]
    for lo in range(0, ops.frame.height if total else 0, BLOCK):
        span = ops.span_of[lo:lo + BLOCK]
        keep = np.flatnonzero(span >= 0)
        keep = keep[count[span[keep]] > 0]
        span = span[keep]
        start = starts.slice(lo, BLOCK).to_numpy()[keep]
        end = ends.slice(lo, BLOCK).to_numpy()[keep]
        origin, w, last = span_start[span], safe[span], count[span] - 1
        k_start = np.clip((start - origin) // w, 0, last)
        k_end = np.clip((end - origin) // w, 0, last)
        base = first[span]
        one = k_start == k_end
        used += np.bincount(base[one] + k_start[one], weights=(end - start)[one],
                            minlength=total)
        many = k_start < k_end
        head = origin[many] + (k_start[many] + 1) * w[many] - start[many]
        tail = end[many] - (origin[many] + k_end[many] * w[many])
        used += np.bincount(base[many] + k_start[many], weights=head, minlength=total)
        used += np.bincount(base[many] + k_end[many], weights=tail, minlength=total)
        # whole chunks strictly between the first and the last: a difference array
        steps += np.bincount(base[many] + k_start[many] + 1, minlength=total + 1)
        steps -= np.bincount(base[many] + k_end[many], minlength=total + 1)
    used += (np.cumsum(steps)[:total] * width[span_of]).astype(np.float64)
    return span_of, index, np.stack([c_start, c_end]), used


def low_use_runs(ops: Operations, chunks: int, threshold: int) -> pl.DataFrame:
    """Runs of consecutive chunks below `threshold` %, in nsys' grouping order (run id,
    device, pid), with their mean use."""
    spans = ops.spans
    if chunks <= 0 or spans.height == 0:
        return _runs_frame([], [], [], [], [], [], [])
    span_of, index, bounds, used = chunk_use(ops, chunks)
    c_start, c_end = bounds
    size = (c_end - c_start).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        percent = used / size * 100.0
    low = np.flatnonzero(percent < threshold)
    if low.size == 0:
        return _runs_frame([], [], [], [], [], [], [])
    s, k = span_of[low], index[low]
    new_run = np.ones(low.size, dtype=bool)
    new_run[1:] = (s[1:] != s[:-1]) | (k[1:] != k[:-1] + 1)
    run_first = np.flatnonzero(new_run)
    run_last = np.append(run_first[1:], low.size) - 1
    # nsys' run id: chunk index minus the chunk's rank among the span's low chunks
    span_first = np.ones(low.size, dtype=bool)
    span_first[1:] = s[1:] != s[:-1]
    rank = np.arange(low.size) - np.maximum.accumulate(
        np.where(span_first, np.arange(low.size), 0)) + 1
    run_id = (k - rank)[run_first]
    weighted = sequential_sums(size[low] * percent[low], run_first)
    sizes = sequential_sums(size[low], run_first)
    mean = [sqlite_round(float(w / n), 1) for w, n in zip(weighted, sizes)]
    run_span = s[run_first]
    start = c_start[low][run_first]
    duration = c_end[low][run_last] - start
    owner = spans[run_span]  # keeps a null pid or device
    return _runs_frame(run_id, owner["device"], owner["pid"], start, duration, mean,
                       owner["context"]).sort(
        "_run", "Device ID", "PID", maintain_order=True)


def _runs_frame(run_id, device, pid, start, duration, mean, context) -> pl.DataFrame:
    return pl.DataFrame({
        "_run": pl.Series(run_id, dtype=pl.Int64),
        "In-Use (%)": pl.Series(mean, dtype=pl.Float64),
        "Duration (ns)": pl.Series(duration, dtype=pl.Int64),
        "Start (ns)": pl.Series(start, dtype=pl.Int64),
        "PID": pl.Series(pid, dtype=pl.Int64),
        "Device ID": pl.Series(device, dtype=pl.Int64),
        "Context ID": pl.Series(context, dtype=pl.Int64),
    })


def find(inp: RuleInput, options: dict) -> pl.DataFrame:
    chunks, threshold = int(options["chunks"]), int(options["threshold"])
    limit = int(options["rows"])
    found = []
    for api, tables in present_apis(inp):
        runs = low_use_runs(operations(inp, api, tables), chunks, threshold)
        found.append(limit_rows(runs, limit))  # nsys caps each API's runs in run-id order
    runs = pl.concat(found).drop("_run")
    ranked = runs.sort("In-Use (%)", "Duration (ns)", maintain_order=True)
    return numbered(limit_rows(ranked, limit))


def _advice(options: dict) -> str:
    return (f"In the time ranges below a GPU was busy less than {options['threshold']} % of "
            "the time on average (its span cut into "
            f"{options['chunks']} chunks per process and device). Giving it work there may "
            "speed up the application.\n\n"
            "What to try:\n"
            "   1. Look at what the CPU does meanwhile (CPU sampling, blocked OS runtime "
            "calls, thread synchronisation): a slow or waiting CPU thread leaves the GPU "
            "without work.\n"
            "   2. Mark the CPU code with NVTX ranges to see which part of the program runs "
            "then.")


def _no_result(options: dict) -> str:
    return (f"No time range has a mean GPU use below {options['threshold']} %: no problem "
            "found with GPU utilisation.")


RULE = Rule(
    name="gpu_time_util",
    old_name="gpu-low-util",
    title="GPU Time Utilization",
    summary="time ranges where a GPU is used less than a threshold",
    options=(Option("threshold", DEFAULT_THRESHOLD,
                    f"only chunks used less than this % (default {DEFAULT_THRESHOLD})"),
             Option("chunks", DEFAULT_CHUNKS,
                    f"chunks per process and device, 1-{MAX_CHUNKS} "
                    f"(default {DEFAULT_CHUNKS})", check=_check_chunks)),
    columns=COLUMNS,
    check=check_gpu_tables,
    find=find,
    advice=_advice,
    no_result=_no_result,
)
