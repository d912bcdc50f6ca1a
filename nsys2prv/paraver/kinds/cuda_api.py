"""CUDA runtime/driver calls -> CUDA call events and CPU states, and the callers of the calls
nsys kept a call stack of (`--cudabacktrace`: Extrae's 70000000 + level at the call's entry,
`_stacks.push_callers`); builds the correlation index that kernels, copies and
synchronisation records are matched against."""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from ...report.report import Report
from ...sources import cuda_api as source
from .. import records as R
from .. import registry as reg
from .base import Context, NameClassifier, Translator, fix_times, intervals, name_value, push, \
    start_end

CORRELATIONS = "correlation_index"


def translate(report: Report, ctx: Context) -> None:
    state_of = NameClassifier(ctx.names, "cuda_api", call_state, pl.Int8,
                              reg.STATE_OTHERS)
    parts = []
    callers = None  # the export's call stacks, when it kept some (else no join is made)
    if source.has_stacks(report):
        from ._stacks import Callers  # only for an export with call stacks (start-up)

        callers = Callers(ctx, report, cuda=True)
    for chunk in source.read(report, ctx.chunk_rows, attributes=ctx.options.attributes):
        df = fix_times(chunk, ctx, "CUDA API calls")
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"))
        df = name_value(df, ctx, "cuda_api", "name_id", "CUDA API calls")
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("cuda_api", df.height)
        ret = pl.when(pl.col("return_value").is_not_null() & (pl.col("return_value") != 0))\
            .then(pl.col("return_value"))
        push(ctx, start_end(df, R.SRC_API, reg.CUDA_CALL, pl.col("value_name_id"),
                            start_text=R.numeric_pairs((reg.CORRELATION_ID, pl.col("correlation"))),
                            end_text=R.numeric_pairs((reg.CUDA_RETURN_VALUE, ret))))
        ctx.intervals(intervals(df.with_columns(state_of(df["name_id"]).alias("state")),
                                pl.col("state"), R.SRC_API))
        if callers is not None:
            callers.push(df)
        parts.append(df.filter(pl.col("correlation").is_not_null()).select(
            pl.col("pid").cast(pl.Int32), "correlation", pl.col("row").alias("api_row"),
            pl.col("start").alias("api_start")))
    if callers is not None:
        callers.close()
    index = CorrelationIndex(parts)
    del parts
    if index.duplicates:
        ctx.warn("CUDA API calls: duplicate correlation ids (the first call is used)",
                 index.duplicates)
    ctx.shared[CORRELATIONS] = index


# What a call does, for the CPU state (Extrae's CUDA states). Checked in this order.
_CLASSES = (
    (reg.STATE_SYNC, re.compile(r"Synchronize|WaitEvent|StreamWaitValue|StreamWait_")),
    (reg.STATE_MEMORY_TRANSFER, re.compile(r"^(?:cuda|cu)Mem(?:cpy|set|Prefetch)")),
    (reg.STATE_FREE, re.compile(r"^(?:cudaFree|cuMemFree|cuMemRelease|cuMemHostFree)")),
    (reg.STATE_ALLOC, re.compile(r"^(?:cudaMalloc|cudaHostAlloc|cuMemAlloc|cuMemHostAlloc|"
                                 r"cuMemCreate)")),
    (reg.STATE_CONFIG_ACCEL, re.compile(r"Launch|ConfigureCall|SetupArgument")),
)


def call_state(name: str) -> int:
    """Paraver state of a CPU thread inside the CUDA call `name`."""
    base = source.normalise_name(name)
    for state, pattern in _CLASSES:
        if pattern.search(base):
            return state
    return reg.STATE_OTHERS


class CorrelationIndex:
    """(pid, correlation id) -> row and start time of the CUDA call, for matching kernels,
    copies and synchronisation records to the call that issued them.

    Sorted numpy arrays searched per process: a hash join of each 250K-row chunk against an
    index of 10M calls rebuilds the hash table every time (0.19 s a chunk, 15x slower than
    the binary search), and the arrays take 20 bytes a call. Duplicate ids keep the first
    call."""

    def __init__(self, parts: list[pl.DataFrame]) -> None:
        # Built column by column from compact numpy pieces, each piece list freed as soon as
        # it is joined: the index of 10M calls peaks near its own 200 MB, not at 4-5 copies of
        # a polars frame (concat, sort, filter).
        c = pl.col
        valid = [None if p["pid"].null_count() == 0 and p["correlation"].null_count() == 0
                 else p.select(c("pid").is_not_null() & c("correlation").is_not_null())
                 .to_series().to_numpy() for p in parts]

        def column(name: str, dtype) -> np.ndarray:
            pieces = []
            for p, ok in zip(parts, valid):
                s = p.drop_in_place(name)  # the part gives its column up: freed once joined
                a = (s.fill_null(0) if s.null_count() else s).to_numpy().astype(dtype, copy=False)
                pieces.append(a if ok is None else a[ok])
            return np.concatenate(pieces) if pieces else np.zeros(0, dtype)

        pids = column("pid", np.int32)  # pids fit 24 bits (nsys packs them so)
        corr = column("correlation", np.int64)
        # stable order by (pid, correlation): the first call of a duplicated id comes first.
        # Calls are usually in id order per process already; then nothing is moved.
        ordered = pids.size < 2 or bool(np.all((pids[1:] > pids[:-1]) | (
            (pids[1:] == pids[:-1]) & (corr[1:] >= corr[:-1]))))
        order = None if ordered else np.lexsort((corr, pids))
        if order is not None:
            pids, corr = pids[order], corr[order]
        first = np.ones(pids.size, dtype=bool)
        if pids.size > 1:
            first[1:] = (pids[1:] != pids[:-1]) | (corr[1:] != corr[:-1])
        self.duplicates = int(pids.size - np.count_nonzero(first))

        def kept(values: np.ndarray) -> np.ndarray:
            if order is not None:
                values = values[order]
            return values[first] if self.duplicates else values

        self._corr = corr[first] if self.duplicates else corr
        self._row = kept(column("api_row", np.int32))
        self._start = kept(column("api_start", np.int64))
        parts.clear()  # the caller's list: its frames are no longer needed
        pids = pids[first] if self.duplicates else pids
        keys, firsts = np.unique(pids, return_index=True)  # pids are sorted: one range each
        last = np.append(firsts[1:], pids.size)
        self._pids = {int(p): (int(a), int(b)) for p, a, b in zip(keys, firsts, last)}

    @property
    def height(self) -> int:
        return int(self._corr.size)

    def join(self, df: pl.DataFrame, how: str = "inner") -> pl.DataFrame:
        """`df` (with pid, correlation) plus api_row and api_start: only the rows with a
        call (`inner`), or every row in order with nulls where none matches (`left`)."""
        pos = np.full(df.height, -1, dtype=np.int64)  # index position of each row's call
        if df.height and self.height:
            pid_col, corr_col = df["pid"], df["correlation"]
            valid = (pid_col.is_not_null() & corr_col.is_not_null()).to_numpy()
            pid = pid_col.fill_null(0).cast(pl.Int64).to_numpy()
            corr = corr_col.fill_null(0).cast(pl.Int64).to_numpy()
            for p, (lo, hi) in self._pids.items():
                sel = np.flatnonzero(valid & (pid == p))
                if sel.size == 0:
                    continue
                keys = self._corr[lo:hi]
                at = np.minimum(np.searchsorted(keys, corr[sel]), hi - lo - 1)
                hit = keys[at] == corr[sel]
                pos[sel[hit]] = lo + at[hit]
        if how == "inner":
            hit = pos >= 0
            at = pos[hit]
            return (df if hit.all() else df.filter(pl.Series(hit))).with_columns(
                pl.Series("api_row", self._row[at], pl.Int32),
                pl.Series("api_start", self._start[at], pl.Int64))
        found = pl.Series(pos >= 0)
        at = np.maximum(pos, 0)
        row = self._row[at] if self.height else np.zeros(df.height, np.int32)
        start = self._start[at] if self.height else np.zeros(df.height, np.int64)
        return df.with_columns(
            pl.when(found).then(pl.Series(row, dtype=pl.Int32)).alias("api_row"),
            pl.when(found).then(pl.Series(start, dtype=pl.Int64)).alias("api_start"))


def index(ctx: Context) -> CorrelationIndex:
    """The correlation index (empty when CUDA API calls are not translated)."""
    found = ctx.shared.get(CORRELATIONS)
    return found if found is not None else CorrelationIndex([])


TRANSLATORS = (Translator("cuda_api", 10, "CUDA runtime/driver API calls", source.available,
                          translate,
                          (source.TABLE,)),)
