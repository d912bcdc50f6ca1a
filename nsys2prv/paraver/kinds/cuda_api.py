"""CUDA runtime/driver calls -> CUDA call events and CPU states, and the callers of the calls
nsys kept a call stack of (`--cudabacktrace`: Extrae's 70000000 + level at the call's entry,
`_stacks.push_callers`); builds the correlation index that kernels, copies and
synchronisation records are matched against."""

from __future__ import annotations

import re
from pathlib import Path

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
    builder = IndexBuilder(Path(ctx.side_file("cuda_api_index")))
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
        builder.add(df.filter(pl.col("correlation").is_not_null()).select(
            pl.col("pid").cast(pl.Int32), "correlation", pl.col("row").alias("api_row"),
            pl.col("start").alias("api_start")))
    if callers is not None:
        callers.close()
    index = builder.finish()
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
        return _joined(df, *self.lookup(df), how)

    def lookup(self, df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, api_row, api_start) of each row of `df` (pid, correlation)."""
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
        found = pos >= 0
        at = np.maximum(pos, 0)
        if not self.height:
            return found, np.zeros(df.height, np.int32), np.zeros(df.height, np.int64)
        return found, self._row[at], self._start[at]


def _joined(df: pl.DataFrame, found: np.ndarray, row: np.ndarray, start: np.ndarray,
            how: str) -> pl.DataFrame:
    """`df` with the calls looked up (`CorrelationIndex.join`)."""
    if how == "inner":
        return (df if found.all() else df.filter(pl.Series(found))).with_columns(
            pl.Series("api_row", row[found], pl.Int32),
            pl.Series("api_start", start[found], pl.Int64))
    hit = pl.Series(found)
    return df.with_columns(
        pl.when(hit).then(pl.Series(row, dtype=pl.Int32)).alias("api_row"),
        pl.when(hit).then(pl.Series(start, dtype=pl.Int64)).alias("api_start"))


# -- the index of a long report, on disk ---------------------------------------------------------

SPILL_CALLS = 1 << 21  # calls held in memory before the index is built on disk instead
FENCE = 4096  # keys between two fences: a lookup reads the fences around its keys
WINDOW_BLOCKS = 256  # fence blocks read at once by a lookup (1M keys: 20 MB of the files)
KEY_SHIFT = 32  # key = pid << 32 | correlation (CUPTI's correlation ids are 32-bit)


def _keys(part: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(key, api_row, api_start) of the calls of `part` with a pid and an id, and the
    calls whose pid or id a key cannot hold (kept apart: none in exports seen)."""
    c = pl.col
    part = part.filter(c("pid").is_not_null() & c("correlation").is_not_null())
    fits = ((c("correlation") >= 0) & (c("correlation") < (1 << KEY_SHIFT))
            & (c("pid") >= 0) & (c("pid") < (1 << 30)))
    keyed = part.filter(fits).select(
        ((c("pid").cast(pl.Int64) * (1 << KEY_SHIFT)) + c("correlation").cast(pl.Int64))
        .alias("key"), c("api_row").cast(pl.Int32), c("api_start").cast(pl.Int64))
    return keyed, part.filter(~fits)


class IndexBuilder:
    """The correlation index, built as the CUDA calls are translated: held in memory
    (`CorrelationIndex`) while the calls are few; past SPILL_CALLS they go to a spill
    sorted by key on disk (`_spill.SortedSpill`) and the index is three flat files of
    which a lookup reads the stretches its keys fall in (`MappedIndex`): memory of a chunk, whatever the number
    of calls (15M calls held 300 MB, twice that while sorted)."""

    def __init__(self, directory: Path, spill_calls: int = SPILL_CALLS) -> None:
        self.dir = directory
        self.spill_calls = spill_calls
        self.parts: list[pl.DataFrame] = []
        self.n = 0
        self.spill = None
        self.apart: list[pl.DataFrame] = []  # calls no key can hold (with a spill)

    def add(self, part: pl.DataFrame) -> None:
        self.parts.append(part)
        self.n += part.height
        if self.spill is None and self.n > self.spill_calls:
            from ._spill import SortedSpill

            self.spill = SortedSpill(self.dir / "spill", ["key"])
        if self.spill is not None:
            for p in self.parts:
                keyed, apart = _keys(p)
                self.spill.add(keyed)
                if apart.height:
                    self.apart.append(apart)
            self.parts = []

    def finish(self) -> "CorrelationIndex | MappedIndex":
        if self.spill is None:
            index = CorrelationIndex(self.parts)
            self.parts = []
            return index
        return MappedIndex(self.spill, self.dir, CorrelationIndex(self.apart))


class MappedIndex:
    """The correlation index in three files (keys sorted, int64; the calls' rows, int32;
    their starts, int64), the first call of a duplicated (pid, id) kept; in memory, every
    FENCE-th key, to find the stretches of the files a lookup reads; calls whose pid or id
    no key holds in a `CorrelationIndex` beside it."""

    def __init__(self, spill, directory: Path, apart: CorrelationIndex) -> None:
        spill.finish()
        directory.mkdir(parents=True, exist_ok=True)
        self.paths = {n: directory / f"index.{n}" for n in ("key", "row", "start")}
        files = {n: open(p, "wb") for n, p in self.paths.items()}
        self.duplicates = apart.duplicates
        kept = 0
        prev = None
        fences: list[np.ndarray] = []
        try:
            for b in spill.buckets():  # in key order, a key within one bucket
                key = b["key"].to_numpy()
                first = np.ones(key.size, dtype=bool)
                first[1:] = key[1:] != key[:-1]
                if prev is not None and key.size and key[0] == prev:
                    first[0] = False
                prev = int(key[-1]) if key.size else prev
                self.duplicates += int(key.size - np.count_nonzero(first))
                kk = key[first].astype(np.int64)
                fences.append(kk[(-kept) % FENCE::FENCE])  # keys at positions k * FENCE
                kk.tofile(files["key"])
                b["api_row"].to_numpy()[first].astype(np.int32).tofile(files["row"])
                b["api_start"].to_numpy()[first].astype(np.int64).tofile(files["start"])
                kept += int(np.count_nonzero(first))
        finally:
            for f in files.values():
                f.close()
            spill.close()
        self._n = kept
        self.apart = apart
        # every FENCE-th key, to find the stretch of the file a lookup reads
        self._fence = np.concatenate(fences) if fences else np.zeros(0, np.int64)

    @property
    def height(self) -> int:
        return self._n + self.apart.height

    def join(self, df: pl.DataFrame, how: str = "inner") -> pl.DataFrame:
        return _joined(df, *self.lookup(df), how)

    def lookup(self, df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found, row, start = self.apart.lookup(df)
        if df.height == 0 or self._n == 0:
            return found, row, start
        keyed, _ = _keys(df.select(pl.col("pid"), pl.col("correlation"),
                                   pl.int_range(pl.len(), dtype=pl.Int32).alias("api_row"),
                                   pl.lit(0, pl.Int64).alias("api_start")))
        if keyed.height == 0:
            return found, row, start
        keyed = keyed.sort("key")
        q, at_row = keyed["key"].to_numpy(), keyed["api_row"].to_numpy()
        found, row, start = found.copy(), row.copy(), start.copy()
        # the queries in key order, a stretch of the files at a time: the blocks of FENCE
        # keys that hold them, WINDOW_BLOCKS blocks at most (the calls of a chunk of
        # kernels: their ids are near one another, a stretch or two)
        block = np.maximum(np.searchsorted(self._fence, q, side="right") - 1, 0)
        i = 0
        while i < q.size:
            first = int(block[i])
            j = int(np.searchsorted(block, first + WINDOW_BLOCKS, side="left"))
            lo, hi = first * FENCE, min((int(block[j - 1]) + 1) * FENCE, self._n)
            qs, rs = q[i:j], at_row[i:j]
            i = j
            keys = self._read("key", lo, hi)
            at = np.minimum(np.searchsorted(keys, qs), keys.size - 1)
            hit = keys[at] == qs
            if not hit.any():
                continue
            mine, at = rs[hit], at[hit]
            found[mine] = True
            row[mine] = self._read("row", lo, hi)[at]
            start[mine] = self._read("start", lo, hi)[at]
        return found, row, start

    def _read(self, name: str, lo: int, hi: int) -> np.ndarray:
        dtype = np.dtype(np.int32 if name == "row" else np.int64)
        return np.fromfile(self.paths[name], dtype=dtype, count=hi - lo,
                           offset=lo * dtype.itemsize)


def index(ctx: Context) -> "CorrelationIndex | MappedIndex":
    """The correlation index (empty when CUDA API calls are not translated)."""
    found = ctx.shared.get(CORRELATIONS)
    return found if found is not None else CorrelationIndex([])


TRANSLATORS = (Translator("cuda_api", 10, "CUDA runtime/driver API calls", source.available,
                          translate,
                          (source.TABLE,)),)
