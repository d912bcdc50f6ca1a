"""GPU metrics samples -> one "GPU d metrics" row per sampled GPU, and the same samples on the
stream rows of the kernels running on that GPU (per-kernel attribution, e.g. tensor-core use
per kernel). Types, units and the Paraver semantics are described in registry/gpu_metrics.py.

Which task holds a GPU's metrics row. Samples are device-wide and carry the nsys GPU id; the
row goes to the process that used that GPU most (kernels + memcpy + memset on it; a CUDA
context counts as a use with no activity), ties to the lowest pid, and is labelled with that
process's CUDA ordinal of the GPU, so it sits next to the process's own stream rows. nsys GPU
id -> (pid, CUDA ordinal) comes from TARGET_INFO_CUDA_DEVICE when the export has it (nsys
2025.1+); older exports have no per-process mapping, so the GPU id is taken as the CUDA
ordinal (as the rest of nsys2prv does with TARGET_INFO_GPU.id), with a warning when the
report has several GPUs, where CUDA_VISIBLE_DEVICES could make that wrong. A GPU used by no
process of the report is shown under the process with the most GPU activity overall (else
the first process with a row), with a warning. Sharing is reported as a count.

Samples are kept as nsys times them, also slightly before the session start (nsys starts
sampling a little before time 0; the merge rebases every trace), except those more than
`EARLIEST_NS` before the session start, which are dropped with a warning: they would stretch
the trace with an empty head and only appear with broken clocks. Negative values (seen for
clocks: 32-bit overflow in nsys) are dropped with a warning, so the previous sample's value
holds, as nsys2prv's Paraver checker also rejects negative values.

Memory: samples stream through twice in rowid chunks (records on the metrics row; then the
values of the sampling periods that kernels overlap); only the distinct sample times per GPU
and the (kernel, sampling period) pairs are held.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ...report.report import Report
from ...sources import gpu_metrics as source
from ...sources import kernels as kernel_source
from .. import records as R
from ..registry import gpu_metrics as greg
from .base import Context, Translator

SRC_GPU_METRICS = R.SRC_GPU_METRICS
EARLIEST_NS = -1_000_000_000


def translate(report: Report, ctx: Context) -> None:
    metrics = source.metric_table(report)
    if metrics.height == 0:
        return
    metrics = _with_types(metrics, ctx)
    gpus = sorted(set((metrics["type_id"] & source.GPU_ID_MASK).to_list()))
    owners, users = placement(report, ctx, gpus)
    c = pl.col
    times, present, n_in, n_out = [], [], 0, 0
    for chunk in source.read(report, ctx.chunk_rows, metrics):
        n_in += chunk.height
        df = _clean(chunk, ctx).join(metrics.select("metric", "factor", "sample_type"),
                                     on="metric", how="left", maintain_order="left")
        df = df.join(owners, on="gpu", how="left", maintain_order="left")
        df = df.with_columns(ctx.rows.metric_rows(df).alias("row"),
                             (c("value") * c("factor") * greg.SCALE).round().cast(pl.Int64)
                             .alias("pv"))
        if df.height == 0:
            continue
        n_out += df.height
        ctx.spans.add(df["row"], df["time"])
        # one line per sample, metrics in type order within it whatever the chunking: the
        # type is the `sub` tie-breaker (metrics rows hold nothing else)
        ctx.records(R.conform(df.select(R.events(
            c("time"), c("row"), R.PHASE_START, SRC_GPU_METRICS, c("row_id"), c("sample_type"),
            c("pv"), sub=c("sample_type") - greg.SAMPLES.base))))
        times.append(df.select("gpu", "time").unique())
        present.append(df.select("gpu", "metric").unique(maintain_order=True))
    ctx.count("gpu_metrics_values", n_out)
    missing = source.row_count(report) - n_in
    if missing > 0:
        ctx.warn("GPU metrics: values of metrics without a name (dropped)", missing)
    if not times:
        return
    ctx.count("gpu_metrics_samples", pl.concat(times).unique().height)
    windows = sampling_periods(pl.concat(times))
    pairs = kernel_periods(report, ctx, users, windows)
    if pairs.height:
        _on_kernel(report, ctx, metrics, pairs, pl.concat(present).unique().sort("gpu", "metric"))


def _with_types(metrics: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Local types of both ranges per metric; a second name folding to a key that another
    metric of the same GPU already has keeps its own exported name as key (never two metrics
    on one type)."""
    dup = metrics.select(pl.col("key").cum_count().over("type_id", "key") > 1)["key"]
    if dup.any():
        ctx.warn("GPU metrics: names folding to a key already used on the GPU (kept apart "
                 "under their exported names)", int(dup.sum()))
        metrics = metrics.with_columns(pl.when(dup).then(pl.col("name")).otherwise(
            pl.col("key")).alias("key"))
    keys = sorted(set(metrics["key"].to_list()))
    sample = {k: ctx.local_type(greg.SAMPLES.name, k) for k in keys}
    on_kernel = {k: ctx.local_type(greg.ON_KERNEL.name, k) for k in keys}
    return metrics.with_columns(
        pl.col("key").replace_strict(sample, return_dtype=pl.Int64).alias("sample_type"),
        pl.col("key").replace_strict(on_kernel, return_dtype=pl.Int64).alias("kernel_type"))


def _clean(df: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    c = pl.col
    for what, bad in (("without a time", c("time").is_null()),
                      (f"more than {-EARLIEST_NS // 10**9} s before the session start",
                       c("time") < EARLIEST_NS),
                      ("without a value", c("value").is_null() | c("value").is_nan()),
                      ("negative (counter overflow)", c("value") < 0)):
        n = df.select(bad.fill_null(False).sum()).item()
        if n:
            ctx.warn(f"GPU metrics: values {what} (dropped)", n)
            df = df.filter(~bad.fill_null(False))
    return df


# -- GPU <-> process ---------------------------------------------------------------------

def placement(report: Report, ctx: Context, gpus: list[int]
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(owners: gpu -> pid, device of its metrics row; users: (pid, device) -> gpu of every
    process's CUDA devices), as described in the module docstring."""
    activity = source.device_activity(report)
    cuda = source.cuda_devices(report)
    if cuda.height:
        users = (activity.join(cuda, on=["pid", "device"], how="full", coalesce=True)
                 .with_columns(pl.col("activities").fill_null(0)))
        unmapped = users.filter(pl.col("gpu").is_null())
        if unmapped.height:
            ctx.warn("GPU metrics: CUDA devices missing from TARGET_INFO_CUDA_DEVICE (GPU id "
                     "taken as the CUDA ordinal)", unmapped.height)
        users = users.with_columns(pl.coalesce("gpu", "device").alias("gpu"))
    else:
        users = activity.with_columns(pl.col("device").alias("gpu"))
        if report.gpus.height > 1 or users["device"].n_unique() > 1:
            ctx.warn("GPU metrics: no TARGET_INFO_CUDA_DEVICE; nsys GPU ids taken as CUDA "
                     "device ordinals (wrong if CUDA_VISIBLE_DEVICES renumbered the GPUs)", 1)
    users = users.select("pid", "device", "gpu", "activities")
    ranked = users.sort(["gpu", "activities", "pid"], descending=[False, True, False])
    owners = ranked.unique("gpu", keep="first", maintain_order=True).select("gpu", "pid",
                                                                            "device")
    for g in gpus:
        pids = sorted(set(users.filter(pl.col("gpu") == g)["pid"].to_list()))
        if len(pids) > 1:
            owner = owners.filter(pl.col("gpu") == g)["pid"].item()
            ctx.count(f"GPU metrics: GPU {g} used by processes {', '.join(map(str, pids))}; "
                      f"its metrics row is on pid {owner} (most GPU activities)", 1)
    orphans = [g for g in gpus if g not in set(owners["gpu"].to_list())]
    if orphans:
        pid = _fallback_pid(users, ctx)
        ctx.warn(f"GPU metrics: GPU {', '.join(map(str, orphans))} used by no process of the "
                 f"report; metrics shown under pid {pid}", len(orphans))
        owners = pl.concat([owners, pl.DataFrame(
            {"gpu": orphans, "pid": [pid] * len(orphans), "device": orphans},
            schema=owners.schema)])
    return owners.filter(pl.col("gpu").is_in(gpus)), users.select("pid", "device", "gpu")


def _fallback_pid(users: pl.DataFrame, ctx: Context) -> int:
    if users.height:
        top = users.group_by("pid").agg(pl.col("activities").sum()).sort(
            ["activities", "pid"], descending=[True, False])
        return int(top["pid"][0])
    rows = ctx.rows.table().filter(pl.col("pid").is_not_null())
    return int(rows["pid"][0]) if rows.height else 0


# -- per-kernel attribution -------------------------------------------------------------------

def sampling_periods(times: pl.DataFrame) -> pl.DataFrame:
    """(gpu, start, end) of every sampling period: a sample's value holds from its timestamp
    to the next sample of the GPU; the last one lasts the GPU's median sampling interval."""
    c = pl.col
    df = times.unique().sort("gpu", "time")
    df = df.with_columns(c("time").shift(-1).over("gpu").alias("end"))
    period = df.group_by("gpu").agg((c("end") - c("time")).median().alias("period"))
    df = df.join(period, on="gpu", how="left").with_columns(
        c("end").fill_null(c("time") + c("period").fill_null(0).cast(pl.Int64)))
    return df.select("gpu", c("time").alias("start"), "end")


def kernel_periods(report: Report, ctx: Context, users: pl.DataFrame,
                   windows: pl.DataFrame) -> pl.DataFrame:
    """(gpu, start of the sampling period, kernel row, kernel rowid, kernel start/end, time
    of its on-kernel event) for every sampling period a kernel overlaps.

    An interval join done with `searchsorted` per GPU: the periods of a GPU are contiguous and
    sorted, so the ones a kernel [s, e) overlaps are those from the period holding s to the
    last one starting before e; each kernel expands to that many rows."""
    if not _translated(report, ctx, "kernels"):
        return pl.DataFrame()  # no kernel events to attribute to (e.g. --only gpu_metrics)
    c = pl.col
    by_gpu = {g: (w["start"].to_numpy(), w["end"].to_numpy())
              for (g,), w in windows.partition_by("gpu", as_dict=True).items()}
    out, no_row = [], 0
    for chunk in kernel_source.read(report, ctx.chunk_rows):
        df = chunk.filter(c("start").is_not_null() & c("end").is_not_null()
                          & (c("end") > c("start")))
        df = df.join(users, on=["pid", "device"], how="left", maintain_order="left")
        df = df.with_columns(ctx.rows.lookup_gpu(df).alias("row"))
        no_row += df.filter(c("row").is_null() & c("gpu").is_in(list(by_gpu))).height
        df = df.filter(c("row").is_not_null() & c("gpu").is_in(list(by_gpu)))
        for (g,), k in df.partition_by("gpu", as_dict=True).items():
            out.append(_expand(k, *by_gpu[g]).with_columns(pl.lit(g, pl.Int64).alias("gpu")))
    if no_row:
        ctx.count("GPU metrics: kernels without a stream row (kernels not translated)", no_row)
    if not out:
        return pl.DataFrame()
    pairs = pl.concat(out, how="vertical")
    ctx.count("gpu_metrics_kernel_periods", pairs.height)
    return pairs


def _translated(report: Report, ctx: Context, kind: str) -> bool:
    """Whether `kind` is translated for this report (present and selected)."""
    from . import KINDS, available  # the package lists this module: import at call time
    kinds = getattr(ctx.options, "kinds", None)
    return kind in KINDS and available(kind, report) and (kinds is None or kind in kinds)


def _expand(k: pl.DataFrame, starts: np.ndarray, ends: np.ndarray) -> pl.DataFrame:
    s, e = k["start"].to_numpy(), k["end"].to_numpy()
    first = np.maximum(np.searchsorted(starts, s, side="right") - 1, 0)
    last = np.searchsorted(starts, e, side="left") - 1
    counts = np.where((last >= first) & (ends[first] > s), last - first + 1, 0)
    idx = np.repeat(np.arange(len(s)), counts)
    offsets = np.arange(idx.size) - np.repeat(np.cumsum(counts) - counts, counts)
    w = first[idx] + offsets
    return pl.DataFrame({
        "time": starts[w], "row": k["row"].to_numpy()[idx], "row_id": k["row_id"].to_numpy()[idx],
        "start": s[idx], "end": e[idx], "etime": np.maximum(s[idx], starts[w]),
        "pend": ends[w]},
        schema={"time": pl.Int64, "row": pl.Int32, "row_id": pl.Int64, "start": pl.Int64,
                "end": pl.Int64, "etime": pl.Int64, "pend": pl.Int64})


def _on_kernel(report: Report, ctx: Context, metrics: pl.DataFrame, pairs: pl.DataFrame,
               present: pl.DataFrame) -> None:
    """Second pass over the samples: the values of each (kernel, period) pair at the event
    time, then 0 for every metric its GPU has at the kernel's end, or where the GPU's last
    sampling period ends if the kernel runs on (not sampled: 0, as before the first sample).
    The records carry the kernel's source id and rowid, so they follow the kernel to an
    overlap lane row."""
    c = pl.col
    types = metrics.select("metric", "factor", "kernel_type")
    lo, hi = pairs["time"].min(), pairs["time"].max()
    for chunk in source.read(report, ctx.chunk_rows, metrics):
        # the kernel's rowid (from `pairs`) is the records' `ord`, not the sample's
        df = _quiet_clean(chunk).filter(c("time").is_between(lo, hi)).drop("row_id")
        if df.height == 0:
            continue
        t0, t1 = df["time"].min(), df["time"].max()
        df = (df.join(pairs.filter(c("time").is_between(t0, t1)), on=["gpu", "time"],
                      how="inner", maintain_order="left")
              .join(types, on="metric", how="left", maintain_order="left")
              .sort(["etime", "row", "row_id", "kernel_type"], maintain_order=True))
        if df.height == 0:
            continue
        df = df.with_columns((c("value") * c("factor") * greg.SCALE).round().cast(pl.Int64)
                             .alias("pv"))
        ctx.records(R.conform(df.select(R.events(
            c("etime"), c("row"), R.PHASE_START, R.SRC_KERNEL, c("row_id"), c("kernel_type"),
            c("pv"), sub=-c("end") + _type_order(c("kernel_type"))))))
    ends = (pairs.group_by("gpu", "row", "row_id", "start", "end", maintain_order=True)
            .agg(pl.col("pend").max())
            .with_columns(pl.min_horizontal("end", "pend").alias("close"))
            .join(present, on="gpu", how="inner", maintain_order="left")
            .join(types, on="metric", how="left", maintain_order="left")
            .sort(["close", "row", "row_id", "kernel_type"], maintain_order=True))
    ctx.records(R.conform(ends.select(R.events(
        c("close"), c("row"), R.PHASE_END, R.SRC_KERNEL, c("row_id"), c("kernel_type"),
        pl.lit(0, pl.Int64), sub=-c("start") + _type_order(c("kernel_type"))))))
    ctx.count("gpu_metrics_kernels_attributed", ends.select("row", "row_id").unique().height)


def _type_order(kernel_type: pl.Expr) -> pl.Expr:
    """1 + the type's offset in its range, added to the kernel record's `sub`: the metric
    events of a kernel then follow the kernel's own start (or end) record in a fixed order,
    whatever the chunking, and still sort like the kernel against any other region (a
    region ending < 1000 ns apart starting with it on one stream would overlap it, so it is
    on another lane row)."""
    return kernel_type - greg.ON_KERNEL.base + 1


def _quiet_clean(df: pl.DataFrame) -> pl.DataFrame:
    """The same filter as `_clean`, without counting again."""
    c = pl.col
    return df.filter(c("time").is_not_null() & (c("time") >= EARLIEST_NS)
                     & c("value").is_not_null() & ~c("value").is_nan() & (c("value") >= 0))


TRANSLATORS = (Translator("gpu_metrics", 70, "GPU metrics samples (device-wide, per-kernel)",
                          source.available, translate),)
