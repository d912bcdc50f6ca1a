"""GPU metrics samples -> one "GPU d metrics" row per sampled GPU, and on the stream rows of
the kernels of that GPU each kernel's rates (tensor-core use per kernel, ...) separated from
the samples by the sample-mixing model (analysis/rate_model.py), with the model's prediction
of every sample beside the measured one. Types, units and the Paraver semantics are
described in registry/gpu_metrics.py.

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

The model (see `_model`) is fitted on what the trace shows of each GPU: the samples as
written and the kernels and memory operations of the GPU's owner. Kernels of other processes
on a shared GPU are not in its model and get no rates (their samples still show them).

Memory: samples stream through twice in rowid chunks (records on the metrics row; then the
values of each GPU as a (periods x metrics) matrix); the owner's kernels and memory
operations are held as a few numbers each while the model is fitted.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ...report.report import Report
from ...sources import gpu_metrics as source
from ...sources import kernels as kernel_source
from .. import records as R
from ..registry import cuda as reg_cuda
from ..registry import gpu_metrics as greg
from . import _launch
from .base import METRICS_ACTIVITIES, Context, Translator

SRC_GPU_METRICS = R.SRC_GPU_METRICS
EARLIEST_NS = -1_000_000_000
# what each kernel's launch allows, kept with its interval: the bounds of its rates
LAUNCH_BOUNDS = ("sms", "sm_ceiling_pv", "warps_ceiling_pv")


def translate(report: Report, ctx: Context) -> None:
    metrics = source.metric_table(report)
    if metrics.height == 0:
        return
    metrics = _with_types(metrics, ctx)
    gpus = sorted(set((metrics["type_id"] & source.GPU_ID_MASK).to_list()))
    owners, users = placement(report, ctx, gpus)
    c = pl.col
    times, n_in, n_out = [], 0, 0
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
    ctx.count("gpu_metrics_values", n_out)
    missing = source.row_count(report) - n_in
    if missing > 0:
        ctx.warn("GPU metrics: values of metrics without a name (dropped)", missing)
    if not times:
        return
    ctx.count("gpu_metrics_samples", pl.concat(times).unique().height)
    _model(report, ctx, metrics, owners, pl.concat(times))


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
    rate = {k: ctx.local_type(greg.RATE.name, k) for k in keys}
    predicted = {k: ctx.local_type(greg.PREDICTED.name, k) for k in keys}
    key = pl.col("key")
    return metrics.with_columns(
        key.replace_strict(sample, return_dtype=pl.Int64).alias("sample_type"),
        key.replace_strict(rate, return_dtype=pl.Int64).alias("rate_type"),
        key.replace_strict(predicted, return_dtype=pl.Int64).alias("predicted_type"))


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


# -- the kernels' rates (the sample-mixing model) --------------------------------------------

def _model(report: Report, ctx: Context, metrics: pl.DataFrame, owners: pl.DataFrame,
           times: pl.DataFrame) -> None:
    """Fit the sample-mixing model on each sampled GPU (`analysis/rate_model.py`) and write
    its results: each kernel's rates on its stream row (and how they were found), the
    predicted value of each sample on the metrics row.

    The model sees what the trace shows of the GPU, so that the analysis of the trace finds
    the same rates: the samples as written (value x 100, rounded), and the kernels and
    memory operations of the process whose stream rows sit beside the metrics row (the GPU's
    owner, see `placement`)."""
    from ...analysis import rate_model as rm

    if not _translated(report, ctx, "kernels"):
        return  # no kernel events to give rates to (e.g. --only gpu_metrics)
    c = pl.col
    acts, labels = _activities(report, ctx, owners)
    if acts.height == 0:
        return
    memop_of = {code: code < 0 for code in labels}
    by_gpu = {g: w["time"].unique().sort().to_numpy()
              for (g,), w in times.partition_by("gpu", as_dict=True).items()}
    gpus = sorted(set(acts["gpu"].unique().to_list()) & set(by_gpu))
    columns = {g: metrics.filter((c("type_id") & source.GPU_ID_MASK) == g).sort("metric")
               for g in gpus}
    periods = {g: rm.periods_of(by_gpu[g]) for g in gpus}
    values = _values(report, ctx, metrics, periods, columns)
    by_gpu_acts = {g: part for (g,), part in acts.partition_by("gpu", as_dict=True).items()}
    del acts  # each GPU's part is let go once its model is written
    fitted = 0
    for g in gpus:
        mine = by_gpu_acts.pop(g)
        start, end = mine["start"].to_numpy(), mine["end"].to_numpy()
        code, code_labels, code_memop = model_codes(mine, labels, memop_of)
        col, names = rm.design_codes(code, code_labels, code_memop, end - start)
        del code
        keys = columns[g]["key"].to_list()
        lo, hi = launch_bounds(mine, col, keys, len(names), values[g])
        # the trace holds the rates alone: their ranges are analyze's (the same fit)
        result, ent = rm.fit_device(periods[g], values[g], start, end, col, len(names), lo, hi,
                                    with_ranges=False)
        if periods[g].cut:
            ctx.warn("GPU metrics: samples followed by a gap in the sampling (their period "
                     "cut to one sampling interval)", periods[g].cut)
        fitted += 1
        rates = np.stack([f.rates for f in result.metrics], axis=1)  # (K1, M)
        kernels = mine.select("row", "row_id", "start", "end", pl.Series("col", col),
                              "code").filter(c("code") >= 0).drop("code")
        del mine, start, end, col
        _kernel_events(ctx, kernels, rates, result.method, columns[g])
        del kernels
        # the prediction of the metrics a kernel drives, that were ever nonzero
        live = [m for m, key in enumerate(keys) if key in greg.KERNEL_METRICS
                and np.nanmax(values[g][:, m], initial=0) > 0]
        pred = rm.predict(ent, rates[:, live], periods[g].n)
        del ent
        _predicted_events(ctx, owners.filter(c("gpu") == g), periods[g].start, pred,
                          columns[g][live])
        values[g] = None  # done with this GPU
    ctx.count("gpu_metrics_gpus_modelled", fitted)


def model_codes(acts: pl.DataFrame, labels: dict, memop_of: dict
                ) -> tuple[np.ndarray, dict, dict]:
    """The model's code of every activity (a kernel's: its name and its launch class,
    `analysis.occupancy.grid_class` of its SM Active ceiling as written; a memory
    operation's as it is) and their labels."""
    from ...analysis import occupancy as occ

    code = acts["code"].to_numpy()
    ceiling = acts["sm_ceiling_pv"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    mcode = np.where(code >= 0, occ.model_code(code, occ.grid_class(ceiling)), code)
    return (mcode, *occ.model_labels(labels, memop_of, mcode))


def launch_bounds(acts: pl.DataFrame, col: np.ndarray, keys: list[str], n_cols: int,
                  values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bounds of the model's rates per column and metric: the metric's range, and for
    the kernels what their grids allow (`analysis.occupancy.rate_bounds`, on the ceilings
    as the trace writes them, so that the analysis finds the same bounds)."""
    from ...analysis import occupancy as occ
    from ...analysis import rate_model as rm

    lo, hi = rm.bounds([greg.is_percent(k) for k in keys], values)
    kernel = (acts["code"] >= 0).to_numpy()

    def pct(name: str) -> np.ndarray:
        return acts[name].cast(pl.Float64).fill_null(np.nan).to_numpy()[kernel] / occ.SCALE

    dur = (acts["end"] - acts["start"]).to_numpy()[kernel]
    sms = acts["sms"].cast(pl.Float64).fill_null(np.nan).to_numpy()[kernel]
    return occ.rate_bounds(keys, lo, hi, col[kernel], dur, sms, pct("sm_ceiling_pv"),
                           pct("warps_ceiling_pv"), n_cols)


def _activities(report: Report, ctx: Context, owners: pl.DataFrame
                ) -> tuple[pl.DataFrame, dict[int, str]]:
    """The kernels and memory operations on each sampled GPU's owner's streams, as the trace
    has them: (gpu, row, row_id, start, end, code), with the label of each code: a
    kernel's code is its full name's string id (>= 0), labelled as the trace labels it; a
    memory operation's is -1 - the value of its memory operation type, labelled
    'memop:<value>' (the analysis reads the same value from the trace)."""
    from ...sources import memory as memory_source
    from ..values import NORMALISERS, clean_label

    c = pl.col
    own = owners.select(c("gpu").cast(pl.Int32), c("pid").cast(pl.Int32),
                        c("device").cast(pl.Int32))
    frames = []
    kept = ctx.shared.pop(METRICS_ACTIVITIES, None)
    if kept is not None:  # the kinds kept their chunks: no second read of the tables
        def drain(frames: list):  # each chunk let go as it is used
            while frames:
                yield frames.pop(0)

        sources = [(what, drain(kept.get(key, []))) for what, key in
                   (("kernel", "kernel"), ("memcpy", "memcpys"), ("memset", "memsets"))]
    else:
        sources = [("kernel", kernel_source.read(report, ctx.chunk_rows, attributes=False))]
        if _translated(report, ctx, "memcpy"):
            sources.append(("memcpy", memory_source.read_memcpy(report, ctx.chunk_rows)))
        if _translated(report, ctx, "memset"):
            sources.append(("memset", memory_source.read_memset(report, ctx.chunk_rows)))
    for what, chunks in sources:
        for chunk in chunks:
            df = chunk.filter(c("start").is_not_null() & c("end").is_not_null()
                              & (c("end") > c("start"))).with_columns(
                c("pid").cast(pl.Int32), c("device").cast(pl.Int32))
            df = df.join(own, on=["pid", "device"], how="inner", maintain_order="left")
            if df.height == 0:
                continue
            if "row" not in df.columns:
                df = df.with_columns(ctx.rows.lookup_gpu(df).alias("row"))
            df = df.filter(c("row").is_not_null())
            if what == "kernel":
                code = c("name_id").fill_null(-1_000_000)  # '(unnamed)'
                if "sm_ceiling_pv" not in df.columns:  # read again: the launch's ceilings
                    df = _launch.statistics(df, report, ctx, warn=False)
                launch = [c(n).cast(pl.Int32) for n in LAUNCH_BOUNDS]
            else:
                code = (-1 - (c("copy_kind").fill_null(0) + 1) if what == "memcpy" else
                        pl.lit(-1 - reg_cuda.MEMSET_OPERATION_VALUE, pl.Int64))
                launch = [pl.lit(None, pl.Int32).alias(n) for n in LAUNCH_BOUNDS]
            frames.append(df.select(c("gpu").cast(pl.Int32), c("row").cast(pl.Int32), "row_id",
                                    "start", "end", code.cast(pl.Int64).alias("code"),
                                    *launch))
    if not frames:
        return pl.DataFrame(), {}
    acts = pl.concat(frames)
    codes = acts["code"].unique().to_list()
    demangle = NORMALISERS["kernel_names"]
    ids = [x for x in codes if x >= 0]
    text = dict(report.strings.filter(c("id").is_in(ids)).iter_rows()) if ids else {}
    labels = {x: (clean_label(demangle(text[x])) if x in text else "(unnamed)") if x >= 0
              else ("(unnamed)" if x == -1_000_000 else f"memop:{-1 - x}") for x in codes}
    return acts, labels


def _values(report: Report, ctx: Context, metrics: pl.DataFrame, periods: dict,
            columns: dict) -> dict:
    """gpu -> (periods x metrics) values as the trace has them (value x factor, rounded to
    the types' precision), NaN where a sample has no valid value of a metric."""
    out = {g: np.full((p.n, columns[g].height), np.nan) for g, p in periods.items()}
    index = {g: dict(zip(cols["metric"].to_list(), range(cols.height)))
             for g, cols in columns.items()}
    factors = metrics.select("metric", "factor")
    for chunk in source.read(report, ctx.chunk_rows, metrics):
        df = _quiet_clean(chunk).filter(pl.col("gpu").is_in(list(periods)))
        if df.height == 0:
            continue
        df = df.join(factors, on="metric", how="left", maintain_order="left").with_columns(
            (pl.col("value") * pl.col("factor") * greg.SCALE).round().alias("pv"))
        for (g,), part in df.partition_by("gpu", as_dict=True).items():
            p = periods[g]
            rows = np.searchsorted(p.start, part["time"].to_numpy())
            cols = part["metric"].replace_strict(index[g], default=-1,
                                                 return_dtype=pl.Int64).to_numpy()
            ok = (rows < p.n) & (cols >= 0)
            out[g][rows[ok], cols[ok]] = part["pv"].to_numpy()[ok] / greg.SCALE
    return out


def _fixed_types(range_: greg.TypeRange, keys: list[str]) -> list[int | None]:
    """The trace type of each metric key whose offset is fixed in the registry (known
    metrics: the merge numbers them at that offset), None for the others. Their values can
    go as numeric pairs of one record (no renumbering); the others need a record each."""
    return [range_.type_of(greg.KNOWN_METRICS[k]) if k in greg.KNOWN_METRICS else None
            for k in keys]


def _kernel_events(ctx: Context, kernels: pl.DataFrame, rates: np.ndarray,
                   method: np.ndarray, cols: pl.DataFrame) -> None:
    """Each kernel's rates and how they were found, at its start on its stream row (moving
    with it to an overlap lane), as values that hold until the next kernel of the row sets
    them (Paraver's Last Evt Val; no value at the kernel's end: the views and the analysis
    read a rate only while a kernel runs). A value is written only where it differs from the
    one the previous kernel of the stream left, except around kernels that overlap on the
    stream (the tiler may move them to other rows): there every value is written. The
    metrics a kernel drives (`registry.gpu_metrics.KERNEL_METRICS`, fixed types) go as
    numeric pairs of one record per kernel."""
    c = pl.col
    K1, M = rates.shape
    pv = np.round(np.nan_to_num(rates) * greg.SCALE).astype(np.int64)
    codes = np.array([greg.METHODS.get(x, 0) for x in method], dtype=np.int64)
    keys = cols["key"].to_list()
    fixed = _fixed_types(greg.RATE, keys)
    # the metrics a kernel drives have fixed types: one record per kernel carries them all
    pair_metrics = [m for m in range(M) if (pv[:, m] != 0).any() and fixed[m] is not None
                    and keys[m] in greg.KERNEL_METRICS]
    k = kernels.sort(["row", "start", "row_id"])
    if k.height == 0:
        return
    row = k["row"].to_numpy()
    start, end = k["start"].to_numpy(), k["end"].to_numpy()
    col = k["col"].to_numpy()
    first = np.ones(row.size, dtype=bool)
    first[1:] = row[1:] != row[:-1]
    reach = k.select(c("end").cum_max().over("row"))["end"].to_numpy()
    prev_reach = np.where(first, np.iinfo(np.int64).min, np.roll(reach, 1))
    over_prev = start < prev_reach
    over_next = np.zeros(row.size, dtype=bool)
    over_next[:-1] = ~first[1:] & over_prev[1:]
    cluster = over_prev | over_next
    # safe: this kernel and the previous one of its stream stay on the stream's own row
    safe = ~first & ~cluster & ~np.roll(cluster, 1)
    prev = np.roll(col, 1)
    # the record's own pair is how the rates were found, written again where it did not
    # change (the same value: harmless) when a rate did; in chunks of kernels, so that the
    # per-metric arrays stay small
    row_id = k["row_id"].to_numpy()
    order = 1  # after the kernel's own start record (sub = -end)
    step = 500_000
    for lo in range(0, row.size, step):
        hi = min(lo + step, row.size)
        ck, cp, cs = col[lo:hi], prev[lo:hi], safe[lo:hi]
        write = ~cs | (codes[ck] != codes[cp])
        pair_v = {}
        for m in pair_metrics:
            v = pv[ck, m]
            changed = ~cs | (v != pv[cp, m])
            write |= changed
            pair_v[m] = np.where(changed, v, NUL_VALUE)
        idx = np.flatnonzero(write)
        if idx.size == 0:
            continue
        df = pl.DataFrame({"row": row[lo:hi][idx], "row_id": row_id[lo:hi][idx],
                           "start": start[lo:hi][idx], "end": end[lo:hi][idx],
                           "method": codes[ck[idx]],
                           **{f"r{m}": _nullable(pair_v[m][idx]) for m in pair_metrics}})
        del pair_v
        ctx.records(R.conform(df.select(R.events(
            c("start"), c("row"), R.PHASE_START, R.SRC_KERNEL, c("row_id"),
            greg.GPU_METRICS_METHOD, c("method"),
            R.numeric_pairs(*[(fixed[m], c(f"r{m}")) for m in pair_metrics]),
            sub=-c("end") + order))))
    ctx.count("gpu_metrics_kernels_with_rates", int((codes[col] > 0).sum()))


NUL_VALUE = np.iinfo(np.int64).min  # no value to write


def _nullable(values: np.ndarray) -> pl.Series:
    return pl.Series(values).set(pl.Series(values == NUL_VALUE), None) \
        if (values == NUL_VALUE).any() else pl.Series(values)


def _predicted_events(ctx: Context, owner: pl.DataFrame, start: np.ndarray,
                      pred: np.ndarray, cols: pl.DataFrame) -> None:
    """The model's value of every sample (`pred`: samples x the metrics of `cols`, the
    metrics a kernel drives, fixed types), at the sample's time on the metrics row: one
    record per sample, after the sample's own values."""
    c = pl.col
    if pred.shape[1] == 0 or start.size == 0:
        return
    fixed = _fixed_types(greg.PREDICTED, cols["key"].to_list())
    local = cols["predicted_type"].to_list()
    pv = np.round(pred * greg.SCALE).astype(np.int64)
    n = start.size
    df = pl.DataFrame({"time": start, "row_id": np.arange(n, dtype=np.int64),
                       **{f"p{m}": pv[:, m] for m in range(pv.shape[1])}}).with_columns(
        pid=pl.lit(owner["pid"][0], pl.Int64), device=pl.lit(owner["device"][0], pl.Int64))
    df = df.with_columns(ctx.rows.metric_rows(df).alias("row")).drop("pid", "device")
    ctx.records(R.conform(df.select(R.events(
        c("time"), c("row"), R.PHASE_START, SRC_GPU_METRICS, c("row_id"), local[0], c("p0"),
        R.numeric_pairs(*[(fixed[m], c(f"p{m}")) for m in range(1, pv.shape[1])]),
        sub=pl.lit(greg.PREDICTED.size, pl.Int64)))))


def _translated(report: Report, ctx: Context, kind: str) -> bool:
    """Whether `kind` is translated for this report (present and selected)."""
    from . import KINDS, available  # the package lists this module: import at call time
    kinds = getattr(ctx.options, "kinds", None)
    return kind in KINDS and available(kind, report) and (kinds is None or kind in kinds)


def _quiet_clean(df: pl.DataFrame) -> pl.DataFrame:
    """The same filter as `_clean`, without counting again."""
    c = pl.col
    return df.filter(c("time").is_not_null() & (c("time") >= EARLIEST_NS)
                     & c("value").is_not_null() & ~c("value").is_nan() & (c("value") >= 0))


TRANSLATORS = (Translator("gpu_metrics", 70, "GPU metrics samples (device-wide, per-kernel)",
                          source.available, translate),)
