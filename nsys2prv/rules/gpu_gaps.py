"""gpu_gaps: time a GPU sat idle between two operations of one process.

Per (process, device), between the start of its first operation and the end of its last, a
gap is a stretch that no operation (nor profiler overhead, see `gpu_ops`) covers. It is
found as nsys does without comparing intervals pairwise: with the starts and the ends each
sorted, the j-th end and the (j+1)-th start bound a gap exactly when that end comes before
that start. Gaps longer than `gap` ms are listed, longest first.
"""

from __future__ import annotations

import polars as pl

from .base import Column, Option, Rule, RuleInput, limit_rows, numbered
from .gpu_ops import check_gpu_tables, operations, present_apis

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
    order. The context is that of the operation whose end opens the gap."""
    keys = ["pid", "device"]
    starts = ops.select(*keys, "start").sort(*keys, "start")
    ends = ops.select(*keys, "end", "context").sort(*keys, "end", maintain_order=True)
    follower = starts.select(pl.all().shift(-1).name.prefix("next_"))
    pairs = pl.concat([ends, follower], how="horizontal")
    gap = pl.col("next_start") - pl.col("end")
    return pairs.filter(
        (pl.col("pid") == pl.col("next_pid")) & (pl.col("device") == pl.col("next_device"))
        & (gap > threshold_ns) & (pl.col("end") < pl.col("next_start"))
    ).select(gap.alias("Duration (ns)"), pl.col("end").alias("Start (ns)"),
             pl.col("pid").alias("PID"), pl.col("device").alias("Device ID"),
             pl.col("context").alias("Context ID"))


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
