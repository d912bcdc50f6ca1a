"""What every kind translator shares: the per-report context it writes to, and helpers.

A *kind* is one kind of nsys data (kernels, NVTX, ...). Its module in this package reads the
kind's normalised tables (`nsys2prv.sources`) chunk by chunk and turns them into Paraver
records (`records.py`) and state intervals, column-wise. A module exposes
``TRANSLATORS = (Translator(...), ...)``; the package collects them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from ...model.rows import RowRegistry, RowSpans
from ...report.report import Report
from .. import records as R
from ..registry import cuda as reg_cuda
from ..values import STRING_ID_OFFSET, LocalNames


class Context(Protocol):
    """The per-report state a translator writes to (see pipeline/prepare.py)."""

    report: Report
    rows: RowRegistry
    spans: RowSpans
    names: LocalNames
    report_end: int  # last time of the report's selected tables (computed when first read)
    chunk_rows: int
    shared: dict[str, Any]  # data one kind leaves for another (e.g. the correlation index)
    meta: dict[str, Any]  # extra partial metadata for the merge stage
    options: Any  # PrepareOptions (e.g. options.sync_nvtx)

    def records(self, df: pl.DataFrame, lists: R.PairLists | None = None) -> None: ...
    def intervals(self, df: pl.DataFrame) -> None: ...
    def warn(self, key: str, n: int) -> None: ...
    def count(self, key: str, n: int) -> None: ...
    def local_type(self, range_name: str, key: str) -> int: ...
    def side_file(self, name: str) -> Any: ...
    def sync_point(self, name: str, time: int) -> None: ...
    def reach(self, first: int, last: int) -> None: ...


@dataclass(frozen=True)
class Translator:
    """One kind of data: when it is present, and how it becomes records."""

    name: str
    order: int  # kinds are translated in this order (CUDA API first: others match it)
    description: str
    available: Callable[[Report], bool]
    translate: Callable[[Report, Context], None]
    tables: tuple[str, ...] = ()  # logical tables whose time span bounds the report
    # Records that need every report (e.g. MPI messages between ranks): called by the merge
    # stage with a MergeContext, yields frames in merge.FINAL_SCHEMA sorted by MERGE_KEYS.
    merge_records: Callable[[Any], Iterable[pl.DataFrame]] | None = None


# -- helpers ----------------------------------------------------------------------------------

METRICS_ACTIVITIES = "gpu_metrics_activities"  # ctx.shared: the model's intervals, per kind


def keep_for_metrics(ctx: Context, report: Report, what: str, df: pl.DataFrame) -> None:
    """Keep the GPU activities of a chunk (start, end, pid, device, row, row_id, the
    column that names them and, for kernels, the grid's ceilings) for the GPU metrics
    model, when the report's metrics are translated: it then needs not read the tables
    again (every read through connectorx costs a connection pool whose threads outlive
    it). They go to a spill on disk sorted by time (`keep_activities`)."""
    wanted = ctx.shared.get(METRICS_ACTIVITIES + ".wanted")
    if wanted is None:
        from . import available

        kinds = getattr(ctx.options, "kinds", None)
        wanted = available("gpu_metrics", report) and (kinds is None or "gpu_metrics" in kinds)
        ctx.shared[METRICS_ACTIVITIES + ".wanted"] = wanted
    if wanted:
        keep_activities(ctx, what, df)


ACTIVITY_ORDER = ("start", "row", "row_id")
UNNAMED_CODE = -1_000_000  # a kernel without a name
# what each kernel's launch allows, kept with its interval: the bounds of its rates
LAUNCH_BOUNDS = ("sms", "sm_ceiling_pv", "warps_ceiling_pv")


def keep_activities(ctx: Context, what: str, df: pl.DataFrame) -> None:
    """File a chunk of the kinds' GPU activities (`keep_for_metrics`) for the model:
    start, end, pid, device, row, row_id, code (`_activity_frame`) and the launch's
    bounds."""
    activity_spill(ctx).add(_activity_frame(what, df))


def activity_spill(ctx: Context):
    """The report's spill of GPU activities for the GPU metrics model (made when first
    asked for)."""
    spill = ctx.shared.get(METRICS_ACTIVITIES)
    if spill is None:
        from ._spill import SortedSpill  # only for reports with GPU metrics (start-up)

        spill = ctx.shared[METRICS_ACTIVITIES] = SortedSpill(
            Path(ctx.side_file("gpu_metrics_activities")), ACTIVITY_ORDER)
    return spill


def _activity_frame(what: str, df: pl.DataFrame) -> pl.DataFrame:
    """A kind's activities longer than 0 ns as the model reads them: a kernel's code is its
    full name's string id (>= 0; UNNAMED_CODE without one), a memory operation's -1 - the
    value of its memory operation type (the analysis reads the same value from the
    trace)."""
    c = pl.col
    df = df.filter(c("start").is_not_null() & c("end").is_not_null() & (c("end") > c("start")))
    if what == "kernel":
        code = c("name_id").fill_null(UNNAMED_CODE)
        launch = [c(n).cast(pl.Int32) for n in LAUNCH_BOUNDS]
    else:
        code = (-1 - (c("copy_kind").fill_null(0) + 1) if what.startswith("memcpy") else
                pl.lit(-1 - reg_cuda.MEMSET_OPERATION_VALUE, pl.Int64))
        launch = [pl.lit(None, pl.Int32).alias(n) for n in LAUNCH_BOUNDS]
    return df.select(c("start").cast(pl.Int64), c("end").cast(pl.Int64),
                     c("pid").cast(pl.Int32), c("device").cast(pl.Int32),
                     c("row").cast(pl.Int32), c("row_id").cast(pl.Int64),
                     code.cast(pl.Int64).alias("code"), *launch)


REPORT_END = object()  # fix_times(open_end=REPORT_END): unterminated regions end with the report


def fix_times(df: pl.DataFrame, ctx: Context, what: str, open_end: int | object | None = None
              ) -> pl.DataFrame:
    """Unterminated regions end at `open_end` (or, with REPORT_END, at the end of the report,
    which is only computed when needed: it takes a scan of every table); regions ending
    before they start get length 0."""
    n_open = df["end"].null_count()
    if n_open:
        if open_end is REPORT_END:
            open_end = ctx.report_end
        if open_end is None:
            ctx.warn(f"{what}: records without end time (dropped)", n_open)
            df = df.filter(pl.col("end").is_not_null())
        else:
            ctx.warn(f"{what}: unterminated (end set to the end of the report)", n_open)
            df = df.with_columns(pl.col("end").fill_null(max(open_end, 0)))
    n_null_start = df["start"].null_count()
    if n_null_start:
        ctx.warn(f"{what}: records without start time (dropped)", n_null_start)
        df = df.filter(pl.col("start").is_not_null())
    n_neg = df.select((pl.col("end") < pl.col("start")).sum()).item()
    if n_neg:
        ctx.warn(f"{what}: end before start (made zero-length)", n_neg)
        df = df.with_columns(pl.max_horizontal("start", "end").alias("end"))
    return df


def start_end(df: pl.DataFrame, src: int, type_: int | pl.Expr, value: pl.Expr,
              start_text: pl.Expr | None = None, end_text: pl.Expr | None = None,
              start_type2: int | None = None, start_value2: pl.Expr | None = None
              ) -> list[pl.DataFrame]:
    """Start record (value) and end record (0) of every region (start, end, row, row_id).

    `start_type2`/`start_value2` add a second renumbered pair to the start record (its end
    value 0 then belongs in `end_text`)."""
    c = pl.col
    start = df.select(R.events(c("start"), c("row"), R.start_phase(c("start"), c("end")), src,
                               c("row_id"), type_, value, start_text, sub=-c("end"),
                               type2=start_type2, value2=start_value2))
    end = df.select(R.events(c("end"), c("row"), R.end_phase(c("start"), c("end")), src,
                             c("row_id"), type_, pl.lit(0, pl.Int64), end_text, sub=-c("start")))
    return [start, end]


def point_events(df: pl.DataFrame, src: int, type_: int | pl.Expr, value: pl.Expr,
                 text: pl.Expr | None = None, time: str = "start") -> pl.DataFrame:
    """One event record per row of `df` (marks, samples: no end)."""
    c = pl.col
    return df.select(R.events(c(time), c("row"), R.PHASE_START, src, c("row_id"), type_, value,
                              text))


def push(ctx: Context, frames: list[pl.DataFrame]) -> None:
    for f in frames:
        if f.height:
            ctx.records(R.conform(f))


def name_value(df: pl.DataFrame, ctx: Context, family: str, column: str, what: str
               ) -> pl.DataFrame:
    """Adds `value_<column>`: local name id (StringIds id + 1), '(unnamed)' where null."""
    ctx.names.use(family, df[column])
    missing = df[column].null_count()
    if missing:
        ctx.warn(f"{what}: records without a name", missing)
        unnamed = ctx.names.intern(family, pl.Series(["(unnamed)"])).item()
        value = (pl.col(column) + STRING_ID_OFFSET).fill_null(unnamed)
    else:
        value = pl.col(column) + STRING_ID_OFFSET
    return df.with_columns(value.alias(f"value_{column}"))


def intervals(df: pl.DataFrame, state: int | pl.Expr, src: int) -> pl.DataFrame:
    """State intervals (row, start, end, state) of the regions in `df`, for tiling."""
    return df.select(pl.col("row").cast(pl.Int32), "start", "end",
                     (state if isinstance(state, pl.Expr) else pl.lit(state)).cast(pl.Int8)
                     .alias("state"), pl.lit(src, pl.Int8).alias("src"),
                     pl.col("row_id").alias("ord"))


def arrows(df: pl.DataFrame, ctx: Context, send_time: str, send_row: str, recv_time: str,
           recv_row: str, size: pl.Expr, tag: pl.Expr | int, target_src: int) -> None:
    """Communication records from (send_row, send_time) to (recv_row, recv_time)."""
    c = pl.col
    comms = df.select(R.columns({
        "time": c(send_time), "row": c(send_row), "kind": pl.lit(R.COMM), "phase": pl.lit(0),
        "src": pl.lit(target_src + R.SRC_LAUNCH_OFFSET), "ord": c("row_id"), "a": c(send_time),
        "b": c(recv_row), "c": c(recv_time), "d": c(recv_time), "e": size,
        "f": tag if isinstance(tag, pl.Expr) else pl.lit(tag, pl.Int64)}))
    if comms.height:
        ctx.records(comms)


class NameClassifier:
    """A per-name property (e.g. the CPU state of a CUDA call), computed once per name."""

    def __init__(self, names: LocalNames, family: str, rule: Callable[[str], Any],
                 dtype: pl.DataType, default: Any) -> None:
        self._names, self._family, self._rule = names, family, rule
        self._dtype, self._default = dtype, default
        self._known: dict[int, Any] = {}

    def __call__(self, name_ids: pl.Series) -> pl.Series:
        uniq = name_ids.drop_nulls().unique()
        new = uniq.filter(~uniq.is_in(list(self._known)))
        if new.len():
            for i, name in zip(new.to_list(), self._names.name_of(self._family, new).to_list()):
                self._known[i] = self._rule(name or "")
        return name_ids.replace_strict(self._known, default=self._default,
                                       return_dtype=self._dtype)
