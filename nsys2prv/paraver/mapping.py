"""From normalised tables to Paraver records: one function per kind of nsys data.

Each function takes a chunk of a source's normalised table and pushes records (see
`records.py`) and state intervals into the per-report sink. All work is column-wise; Python
only loops over distinct names (to classify them), never over events.
"""

from __future__ import annotations

import heapq
from typing import Protocol

import numpy as np
import polars as pl

from ..model.rows import RowRegistry, RowSpans
from ..sources import cuda_api as cuda_api_source
from . import records as R
from . import registry as reg
from .values import STRING_ID_OFFSET, LocalNames


class Sink(Protocol):
    rows: RowRegistry
    spans: RowSpans
    names: LocalNames
    report_end: int

    def records(self, df: pl.DataFrame) -> None: ...
    def intervals(self, df: pl.DataFrame) -> None: ...
    def warn(self, key: str, n: int) -> None: ...
    def count(self, key: str, n: int) -> None: ...


# -- helpers ----------------------------------------------------------------------------------

def _fix_times(df: pl.DataFrame, sink: Sink, what: str, open_end: int | None = None
               ) -> pl.DataFrame:
    """Unterminated regions end at `open_end`; regions ending before they start get length 0."""
    n_open = df["end"].null_count()
    if n_open:
        if open_end is None:
            sink.warn(f"{what}: records without end time (dropped)", n_open)
            df = df.filter(pl.col("end").is_not_null())
        else:
            sink.warn(f"{what}: unterminated (end set to the end of the report)", n_open)
            df = df.with_columns(pl.col("end").fill_null(max(open_end, 0)))
    n_null_start = df["start"].null_count()
    if n_null_start:
        sink.warn(f"{what}: records without start time (dropped)", n_null_start)
        df = df.filter(pl.col("start").is_not_null())
    n_neg = df.select((pl.col("end") < pl.col("start")).sum()).item()
    if n_neg:
        sink.warn(f"{what}: end before start (made zero-length)", n_neg)
        df = df.with_columns(pl.max_horizontal("start", "end").alias("end"))
    return df


def _start_end(df: pl.DataFrame, src: int, type_: int | pl.Expr, value: pl.Expr,
               start_text: pl.Expr | None = None, end_text: pl.Expr | None = None
               ) -> list[pl.DataFrame]:
    """Start record (value) and end record (0) of every region in `df`."""
    c = pl.col
    start = df.select(R.events(c("start"), c("row"), R.start_phase(c("start"), c("end")), src,
                               c("row_id"), type_, value, start_text, sub=-c("end")))
    end = df.select(R.events(c("end"), c("row"), R.end_phase(c("start"), c("end")), src,
                             c("row_id"), type_, pl.lit(0, pl.Int64), end_text, sub=-c("start")))
    return [start, end]


def _name_value(df: pl.DataFrame, sink: Sink, family: str, column: str, what: str) -> pl.DataFrame:
    """Column `value_<column>`: local name id (StringIds id + 1); '(unnamed)' where null."""
    missing = df[column].null_count()
    if missing:
        sink.warn(f"{what}: records without a name", missing)
        unnamed = sink.names.intern(family, pl.Series(["(unnamed)"])).item()
        value = (pl.col(column) + STRING_ID_OFFSET).fill_null(unnamed)
    else:
        value = pl.col(column) + STRING_ID_OFFSET
    return df.with_columns(value.alias(f"value_{column}"))


def _push(sink: Sink, frames: list[pl.DataFrame]) -> None:
    for f in frames:
        if f.height:
            sink.records(R.conform(f))


def _intervals(df: pl.DataFrame, state: int | pl.Expr, src: int) -> pl.DataFrame:
    return df.select(pl.col("row").cast(pl.Int32), "start", "end",
                     (state if isinstance(state, pl.Expr) else pl.lit(state)).cast(pl.Int8)
                     .alias("state"), pl.lit(src, pl.Int8).alias("src"),
                     pl.col("row_id").alias("ord"))


# -- CUDA API -----------------------------------------------------------------------------------

class CallClassifier:
    """CPU state of each CUDA call name id, classified once per distinct name."""

    def __init__(self, names: LocalNames) -> None:
        self._names = names
        self._state: dict[int, int] = {}

    def states(self, name_ids: pl.Series) -> pl.Series:
        uniq = name_ids.drop_nulls().unique()
        new = uniq.filter(~uniq.is_in(list(self._state)))
        if new.len():
            for i, name in zip(new.to_list(), self._names.name_of("cuda_api", new).to_list()):
                self._state[i] = cuda_api_source.call_state(name or "")
        return name_ids.replace_strict(self._state, default=reg.STATE_OTHERS,
                                       return_dtype=pl.Int8)


def map_cuda_api(chunk: pl.DataFrame, sink: Sink, classifier: CallClassifier,
                 correlations: list[pl.DataFrame]) -> None:
    df = _fix_times(chunk, sink, "CUDA API calls")
    df = df.with_columns(sink.rows.cpu_rows(df).alias("row"))
    sink.names.use("cuda_api", df["name_id"])
    sink.spans.add(df["row"], df["start"], df["end"])
    sink.count("cuda_api", df.height)
    ret = pl.when(pl.col("return_value").is_not_null() & (pl.col("return_value") != 0)).then(
        pl.col("return_value"))
    df = _name_value(df, sink, "cuda_api", "name_id", "CUDA API calls")
    _push(sink, _start_end(df, R.SRC_API, reg.CUDA_CALL, pl.col("value_name_id"),
                           start_text=R.pairs((reg.CORRELATION_ID, pl.col("correlation"))),
                           end_text=R.pairs((reg.CUDA_RETURN_VALUE, ret))))
    sink.intervals(_intervals(df.with_columns(classifier.states(df["name_id"]).alias("state")),
                              pl.col("state"), R.SRC_API))
    correlations.append(df.filter(pl.col("correlation").is_not_null()).select(
        "pid", "correlation", pl.col("row").alias("api_row"), pl.col("start").alias("api_start")))


def correlation_index(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """(pid, correlation) -> calling row and call start; duplicates keep the first call."""
    if not parts:
        return pl.DataFrame(schema={"pid": pl.Int64, "correlation": pl.Int64,
                                    "api_row": pl.Int32, "api_start": pl.Int64})
    return pl.concat(parts, how="vertical").unique(["pid", "correlation"], keep="first",
                                                   maintain_order=True)


def _launch_arrows(df: pl.DataFrame, index: pl.DataFrame, sink: Sink, tag: pl.Expr,
                   size: pl.Expr, what: str, target_src: int) -> None:
    """Communication API call -> GPU activity, matched on (pid, correlation id)."""
    if index.height == 0 or df.height == 0:
        return
    joined = df.join(index, on=["pid", "correlation"], how="inner")
    missing = df.height - joined.height
    if missing:
        sink.count(f"{what} without a matching CUDA call", missing)
    if joined.height == 0:
        return
    comms = joined.select(
        pl.col("api_start").alias("time"), pl.col("api_row").alias("row"),
        pl.lit(R.COMM).alias("kind"), pl.lit(0).alias("phase"), pl.lit(target_src + R.SRC_LAUNCH_OFFSET).alias("src"),
        pl.col("row_id").alias("ord"), pl.col("api_start").alias("a"),
        pl.col("row").cast(pl.Int64).alias("b"), pl.col("start").alias("c"),
        pl.col("start").alias("d"), size.alias("e"), tag.alias("f"))
    sink.records(R.conform(comms))
    sink.count("launch arrows", comms.height)


# -- kernels ----------------------------------------------------------------------------------

class NcclNames:
    """Which kernel name ids are NCCL kernels (name starts with 'nccl')."""

    def __init__(self, names: LocalNames) -> None:
        self._names = names
        self._known: dict[int, bool] = {}

    def mask(self, ids: pl.Series) -> pl.Series:
        uniq = ids.drop_nulls().unique()
        new = uniq.filter(~uniq.is_in(list(self._known)))
        if new.len():
            for i, name in zip(new.to_list(), self._names.name_of("kernel_names", new).to_list()):
                self._known[i] = (name or "").lower().startswith("nccl")
        return ids.replace_strict(self._known, default=False, return_dtype=pl.Boolean)


def map_kernels(chunk: pl.DataFrame, sink: Sink, nccl: NcclNames, index: pl.DataFrame) -> None:
    df = _fix_times(chunk, sink, "kernels")
    df = df.with_columns(sink.rows.gpu_rows(df).alias("row"),
                         nccl.mask(df["short_name_id"]).alias("is_nccl"))
    sink.names.use("kernel_names", df["short_name_id"])
    sink.names.use("kernel_names", df["name_id"])
    sink.spans.add(df["row"], df["start"], df["end"])
    sink.count("kernels", df.height)
    ktype = pl.when(pl.col("is_nccl")).then(pl.lit(reg.NCCL_KERNEL)).otherwise(
        pl.lit(reg.CUDA_KERNEL))
    c = pl.col
    geometry = R.pairs(
        (reg.CUDA_KERNEL_BLOCKS, c("grid_x") * c("grid_y") * c("grid_z")),
        (reg.CUDA_KERNEL_THREADS, c("block_x") * c("block_y") * c("block_z")),
        (reg.CUDA_KERNEL_DYN_SHMEM, c("dynamic_smem")),
        (reg.KERNEL_GRID_X, c("grid_x")), (reg.KERNEL_GRID_Y, c("grid_y")),
        (reg.KERNEL_GRID_Z, c("grid_z")), (reg.KERNEL_BLOCK_X, c("block_x")),
        (reg.KERNEL_BLOCK_Y, c("block_y")), (reg.KERNEL_BLOCK_Z, c("block_z")),
        (reg.KERNEL_REGISTERS, c("registers")), (reg.KERNEL_STATIC_SHMEM, c("static_smem")),
        (reg.KERNEL_LOCAL_MEM_THREAD, c("local_mem_thread")),
        (reg.KERNEL_LOCAL_MEM_TOTAL, c("local_mem_total")),
        (reg.CORRELATION_ID, c("correlation")))
    df = _name_value(df, sink, "kernel_names", "short_name_id", "kernels")
    df = _name_value(df, sink, "kernel_names", "name_id", "kernels (full name)")
    frames = _start_end(df, R.SRC_KERNEL, ktype, c("value_short_name_id"),
                        start_text=geometry,
                        end_text=pl.lit(f":{reg.KERNEL_FULL_NAME}:0"))
    frames.append(df.select(R.events(c("start"), c("row"), R.start_phase(c("start"), c("end")),
                                     R.SRC_KERNEL, c("row_id"), reg.KERNEL_FULL_NAME,
                                     c("value_name_id"), sub=-c("end"))))
    _push(sink, frames)
    sink.intervals(_intervals(df, reg.STATE_RUNNING, R.SRC_KERNEL))
    tag = pl.when(c("is_nccl")).then(pl.lit(reg.TAG_NCCL_LAUNCH)).otherwise(
        pl.lit(reg.TAG_KERNEL_LAUNCH))
    _launch_arrows(df, index, sink, tag, pl.lit(0, pl.Int64), "kernels", R.SRC_KERNEL)


# -- memory operations ------------------------------------------------------------------------

def map_memory(chunk: pl.DataFrame, sink: Sink, index: pl.DataFrame, memset: bool) -> None:
    what = "memsets" if memset else "memcpys"
    df = _fix_times(chunk, sink, what)
    df = df.with_columns(sink.rows.gpu_rows(df).alias("row"))
    sink.spans.add(df["row"], df["start"], df["end"])
    sink.count("memset" if memset else "memcpy", df.height)
    c = pl.col
    if memset:
        value = pl.lit(reg.MEMSET_OPERATION_VALUE, pl.Int64)
        text = R.pairs((reg.MEMORY_BYTES, c("bytes")), (reg.MEMSET_VALUE, c("value")),
                       (reg.MEMORY_DST_KIND, c("dst_kind") + 1),
                       (reg.CORRELATION_ID, c("correlation")))
        src = R.SRC_MEMSET
    else:
        value = c("copy_kind").fill_null(0) + 1
        text = R.pairs((reg.MEMORY_BYTES, c("bytes")), (reg.MEMORY_SRC_KIND, c("src_kind") + 1),
                       (reg.MEMORY_DST_KIND, c("dst_kind") + 1),
                       (reg.CORRELATION_ID, c("correlation")))
        src = R.SRC_MEMCPY
    _push(sink, _start_end(df, src, reg.MEMORY_OPERATION, value, start_text=text))
    sink.intervals(_intervals(df, reg.STATE_MEMORY_TRANSFER, src))
    _launch_arrows(df, index, sink, pl.lit(reg.TAG_MEMORY_OPERATION, pl.Int64),
                   c("bytes").fill_null(0), what, src)


# -- CUDA synchronisation ---------------------------------------------------------------------

def map_cuda_sync(chunk: pl.DataFrame, sink: Sink, index: pl.DataFrame) -> None:
    df = _fix_times(chunk, sink, "CUDA synchronization records")
    joined = df.join(index, on=["pid", "correlation"], how="inner")
    if df.height > joined.height:
        sink.count("CUDA synchronization records without a CUDA call", df.height - joined.height)
    if joined.height == 0:
        return
    df = joined.with_columns(pl.col("api_row").alias("row"),
                             sink.rows.lookup_gpu(joined).alias("stream_row"))
    sink.count("cuda_sync", df.height)
    c = pl.col
    frames = _start_end(df, R.SRC_SYNC, reg.CUDA_SYNC_TYPE, c("sync_type").fill_null(0) + 1)
    dest = df.filter(c("stream_row").is_not_null())
    frames.append(dest.select(R.events(c("start"), c("row"), R.PHASE_START, R.SRC_SYNC,
                                       c("row_id"), reg.CUDA_STREAM_DEST,
                                       c("stream_row").cast(pl.Int64))))
    _push(sink, frames)


# -- OS runtime -------------------------------------------------------------------------------

def map_osrt(chunk: pl.DataFrame, sink: Sink) -> None:
    df = _fix_times(chunk, sink, "OS runtime calls")
    df = df.with_columns(sink.rows.cpu_rows(df).alias("row"))
    sink.names.use("osrt_names", df["name_id"])
    sink.spans.add(df["row"], df["start"], df["end"])
    sink.count("osrt", df.height)
    df = _name_value(df, sink, "osrt_names", "name_id", "OS runtime calls")
    _push(sink, _start_end(df, R.SRC_OSRT, reg.OSRT_CALL, pl.col("value_name_id"),
                           end_text=R.pairs((reg.OSRT_RETURN_VALUE, pl.col("return_value")))))


# -- NVTX -------------------------------------------------------------------------------------

class NvtxContext:
    """Per-report NVTX lookups: domain names and types, category labels, range kinds."""

    DEFAULT_DOMAIN = ""

    def __init__(self, domains: pl.DataFrame, categories: pl.DataFrame,
                 kinds: dict[str, set[int]]) -> None:
        self.domains = domains.rename({"name": "domain_name"})
        self.categories = categories.rename({"name": "category_name"})
        self.kinds = kinds
        self.domain_types: dict[str, int] = {self.DEFAULT_DOMAIN: reg.nvtx_pushpop_type(0)}
        self.start_end: list[pl.DataFrame] = []
        self.lanes = 0

    def type_keys(self) -> dict[int, str]:
        """local push/pop type -> domain name ('' = default domain)."""
        return {t: name for name, t in self.domain_types.items()}

    def domain_type(self, names: pl.Series) -> pl.Series:
        for n in names.unique().to_list():
            if n not in self.domain_types:
                self.domain_types[n] = reg.nvtx_pushpop_type(len(self.domain_types))
        return names.replace_strict(self.domain_types, return_dtype=pl.Int64)


def map_nvtx(chunk: pl.DataFrame, sink: Sink, ctx: NvtxContext) -> None:
    c = pl.col
    df = chunk.join(ctx.domains, on=["pid", "domain_id"], how="left", maintain_order="left")
    df = df.with_columns(
        pl.when(c("domain_id").fill_null(0) == 0).then(pl.lit(NvtxContext.DEFAULT_DOMAIN))
        .otherwise(c("domain_name").fill_null(pl.format("domain {}", c("domain_id"))))
        .alias("domain"))
    # Range text: its StringIds id, else an interned id for the inline text ('' if none).
    inline = df.select(pl.when(c("text_id").is_null()).then(c("text").fill_null(""))
                       .alias("t"))["t"]
    df = df.with_columns(pl.coalesce(c("text_id") + STRING_ID_OFFSET,
                                     sink.names.intern("nvtx_names", inline)).alias("value"))
    sink.names.use("nvtx_names", df["text_id"])
    df = df.with_columns(sink.rows.cpu_rows(df).alias("row"))
    # Category label "domain: name" (or "domain: category N"), as its own value family.
    cats = df.filter(c("category").fill_null(0) != 0)
    cat_frames: list[pl.DataFrame] = []
    kinds = ctx.kinds
    is_mark = c("event_type").is_in(sorted(kinds["mark"]))
    is_se = c("event_type").is_in(sorted(kinds["startend"]))
    is_pp = c("event_type").is_in(sorted(kinds["pushpop"]))
    if cats.height:
        cats = cats.join(ctx.categories, on=["pid", "domain_id", "category"], how="left",
                         maintain_order="left")
        label = pl.format("{}: {}", pl.when(c("domain") == "").then(pl.lit("default"))
                          .otherwise(c("domain")),
                          c("category_name").fill_null(pl.format("category {}", c("category"))))
        cats = cats.with_columns(label.alias("cat_label"))
        cats = cats.with_columns(sink.names.intern("nvtx_categories", cats["cat_label"])
                                 .alias("cat_value"))
        marks_c = cats.filter(is_mark)
        ranges_c = _fix_times(cats.filter(~is_mark), sink, "NVTX ranges (categories)",
                              open_end=sink.report_end) if cats.filter(~is_mark).height else None
        if marks_c.height:
            cat_frames.append(marks_c.select(R.events(c("start"), c("row"), R.PHASE_START,
                                                      R.SRC_NVTX, c("row_id"), reg.NVTX_CATEGORY,
                                                      c("cat_value"))))
        if ranges_c is not None and ranges_c.height:
            cat_frames += _start_end(ranges_c, R.SRC_NVTX, reg.NVTX_CATEGORY, c("cat_value"))
    marks = df.filter(is_mark)
    pushpop = df.filter(is_pp)
    startend = df.filter(is_se)
    frames = list(cat_frames)
    if marks.height:
        sink.count("nvtx_marks", marks.height)
        sink.spans.add(marks["row"], marks["start"])
        frames.append(marks.select(R.events(c("start"), c("row"), R.PHASE_START, R.SRC_NVTX,
                                            c("row_id"), reg.NVTX_MARK, c("value"))))
    if pushpop.height:
        pushpop = _fix_times(pushpop, sink, "NVTX push/pop ranges", open_end=sink.report_end)
        sink.count("nvtx_pushpop", pushpop.height)
        sink.spans.add(pushpop["row"], pushpop["start"], pushpop["end"])
        pushpop = pushpop.with_columns(ctx.domain_type(pushpop["domain"]).alias("ptype"))
        frames += _start_end(pushpop, R.SRC_NVTX, c("ptype"), c("value"))
    if startend.height:
        startend = _fix_times(startend, sink, "NVTX start/end ranges", open_end=sink.report_end)
        sink.count("nvtx_startend", startend.height)
        sink.spans.add(startend["row"], startend["start"], startend["end"])
        ctx.start_end.append(startend.select("row", "start", "end", "value", "row_id"))
    _push(sink, frames)


def assign_lanes(row: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lowest free lane of each range (inputs sorted by row, start): first-fit by start.

    Ranges that overlap nothing before them (the usual case) get lane 0 without any loop;
    only clusters of mutually overlapping ranges are walked, with a heap of lane end times.
    """
    n = len(row)
    lanes = np.zeros(n, dtype=np.int64)
    if n == 0:
        return lanes
    prev_max = (pl.DataFrame({"row": row, "end": end})
                .select(pl.col("end").cum_max().shift(1).over("row"))["end"]
                .fill_null(np.iinfo(np.int64).min).to_numpy())
    cluster_start = start >= prev_max  # also true for the first range of each row
    cluster_id = np.cumsum(cluster_start)
    busy = np.flatnonzero(np.bincount(cluster_id)[cluster_id] > 1)
    if busy.size == 0:
        return lanes
    cuts = np.flatnonzero(np.diff(cluster_id[busy])) + 1
    for idx in np.split(busy, cuts):  # one pass per overlapping cluster
        active: list[tuple[int, int]] = []  # (end, lane) of ranges still open
        free: list[int] = []
        n_lanes = 0
        for i in idx:
            while active and active[0][0] <= start[i]:
                heapq.heappush(free, heapq.heappop(active)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, n_lanes = n_lanes, n_lanes + 1
            lanes[i] = lane
            heapq.heappush(active, (int(end[i]), lane))
    return lanes


def finish_nvtx_start_end(sink: Sink, ctx: NvtxContext) -> None:
    """Place the collected start/end ranges on lanes and emit them."""
    if not ctx.start_end:
        return
    df = pl.concat(ctx.start_end, how="vertical").sort(["row", "start", "row_id"])
    lanes = assign_lanes(df["row"].to_numpy(), df["start"].to_numpy(), df["end"].to_numpy())
    overlapping = int((lanes > 0).sum())
    if overlapping:
        sink.count("nvtx_startend_on_extra_lanes", overlapping)
    ctx.lanes = int(lanes.max(initial=0)) + 1
    if lanes.max(initial=0) >= reg.NVTX_LANE_MAX:
        raise ValueError("more than 1000 overlapping NVTX start/end ranges on one thread")
    df = df.with_columns((pl.Series("lane", lanes) + reg.NVTX_STARTEND_BASE).alias("ltype"))
    _push(sink, _start_end(df, R.SRC_NVTX_SE, pl.col("ltype"), pl.col("value")))
