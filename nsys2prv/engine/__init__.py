"""The engine: records in, sorted Paraver text out.

Everything that touches every record once per pass is compiled (`_engine.c`); this module
turns polars frames into the column buffers it takes. Three parts:

* `Records` (per report) — takes record frames (`paraver/records.py` layout) and keeps them
  in a bounded buffer that is spilled as *run files*: records sorted by time, compact
  (varint-coded, times as deltas), in blocks indexed by their first time and offset.
* `Intervals` (per report) — takes state intervals; `tile()` sorts them by (row, start, ord)
  out of core and writes the states that tile every row straight into a `Records`. GPU
  activities that overlap an earlier one on their stream come back with their lane.
* `Merger` (merge stage) — k-way merges the run files of every report and trace-wide
  in-memory sources, maps local records to the trace (clock shift, row -> cpu/task/thread,
  renumbered names and types, activities moved to lanes), orders the records of each time
  by the merge key (order, kind, phase, sub, src, report, ord) and returns the `.prv` lines
  block by block. Blocks end between two times, so windows of a trace merged apart and
  concatenated give the same bytes. `scan` puts the records into a `PrvScanner`'s columns
  instead, as scanning those lines would, without the text (for the analysis).

Null integers cross the boundary as `NUL` (INT64_MIN).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from ..paraver import records as R
from ._engine import NUL, IntervalStore, Merger, RecordStore
from ._engine import graph_float, graph_path, graph_replay  # noqa: F401 (analysis/critical_path)

__all__ = ["NUL", "Records", "Intervals", "Merger", "Run", "StoreFeeder", "text_buffers",
           "int64_column", "RUN_BLOCK_RECORDS"]

RUN_BLOCK_RECORDS = 4096  # records per block of a run file (the unit a time window seeks to;
#                           the merge reads it 32 kB at a time: engine RUN_READ_BYTES)

# numpy layout of a moved interval as IntervalStore.tile returns it (the C struct Iv + lane,
# in memory: host byte order)
MOVED_DTYPE = np.dtype([("start", "=i8"), ("end", "=i8"), ("ord", "=i8"), ("row", "=i4"),
                        ("state", "i1"), ("src", "i1"), ("pad", "=i2"), ("lane", "=i8")])


@dataclass(frozen=True)
class Run:
    """A run file: its path, (first time, byte offset) of each block, and its record count."""

    path: str
    index: list[tuple[int, int]]
    records: int


_NULS = np.full(0, NUL, dtype=np.int64)


def _all_null(n: int) -> np.ndarray:
    """A read-only view of n NULs (one shared array: all-null columns are common and a fresh
    array each time costs page faults)."""
    global _NULS
    if len(_NULS) < n:
        _NULS = np.full(max(n, 1 << 16), NUL, dtype=np.int64)
        _NULS.flags.writeable = False
    return _NULS[:n]


def int64_column(s: pl.Series) -> np.ndarray:
    """A contiguous int64 array of `s`, nulls as NUL (zero-copy when there is nothing to do)."""
    nulls = s.null_count()
    if nulls == s.len():
        return _all_null(s.len())
    if s.dtype != pl.Int64:
        s = s.cast(pl.Int64)
    if nulls:
        s = s.fill_null(NUL)
    return s.to_numpy()


def _typed(s: pl.Series, dtype: pl.DataType, np_dtype: str) -> np.ndarray:
    if s.dtype != dtype:
        s = s.cast(dtype)
    if s.null_count():
        s = s.fill_null(-1)
    return np.ascontiguousarray(s.to_numpy(), dtype=np_dtype)


def text_buffers(s: pl.Series) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(offsets, bytes) of a string column for the engine, or (None, None) when it is all
    null or empty (nulls are empty strings: both print nothing)."""
    nulls = s.null_count()
    if s.len() == 0 or nulls == s.len():
        return None, None
    lengths = s.str.len_bytes()
    if nulls:
        lengths = lengths.fill_null(0)
    offsets = np.zeros(s.len() + 1, dtype=np.int64)
    np.cumsum(lengths.to_numpy(), out=offsets[1:])
    if offsets[-1] == 0:
        return None, None
    data = s.str.join("").item().encode()
    return offsets, np.frombuffer(data, dtype=np.uint8)


class StoreFeeder:
    """Hands frames to the stores from one second thread, in the order they were given.

    Adding a frame is mostly compiled work that releases the GIL (copying records and their
    numeric pairs, sorting and writing a run when the buffer is full), so the
    kinds go on with their next chunk meanwhile: a second core takes a third of one report's
    preparation. At most `depth` additions are outstanding (their frames stay alive until
    done); an addition's error is raised by the next `submit` or `drain`. The stores are
    touched by that thread alone between drains: `Records` and `Intervals` drain before
    anything else."""

    def __init__(self, depth: int = 2) -> None:
        self._depth = max(1, depth)
        self._pending: deque[Future] = deque()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, work: Callable[..., None], *args) -> None:
        while len(self._pending) >= self._depth:
            self._pending.popleft().result()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="nsys2prv-store")
        self._pending.append(self._pool.submit(work, *args))

    def drain(self) -> None:
        """Wait for every addition; the first error is raised (the rest are still waited
        for: nothing writes into the partial after this returns or raises)."""
        error: BaseException | None = None
        while self._pending:
            try:
                self._pending.popleft().result()
            except BaseException as e:  # noqa: BLE001 (re-raised below)
                error = error or e
        if error is not None:
            raise error

    def close(self) -> None:
        """Drain, then end the thread (errors raised as by `drain`)."""
        try:
            self.drain()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


class _Fed:
    """A store added to directly, or through a `StoreFeeder` when it has one."""

    def __init__(self, feeder: StoreFeeder | None) -> None:
        self.feeder = feeder

    def _give(self, work: Callable[..., None], *args) -> None:
        if self.feeder is None:
            work(*args)
        else:
            self.feeder.submit(work, *args)

    def settle(self) -> None:
        """Every frame given so far is in the store."""
        if self.feeder is not None:
            self.feeder.drain()


class Records(_Fed):
    """One report's records, spilled as sorted run files `<prefix>-NNNNN.run`."""

    def __init__(self, prefix: str | Path, budget: int,
                 block_records: int = RUN_BLOCK_RECORDS,
                 feeder: StoreFeeder | None = None) -> None:
        super().__init__(feeder)
        self.store = RecordStore(str(prefix), int(budget), int(block_records))

    def add(self, df: pl.DataFrame, lists: R.PairLists | None = None) -> None:
        """Take a frame in the record layout (`records.conform`), and each record's own
        further pairs (`lists`: a sample's callers); through the feeder when there is one."""
        if df.height:
            self._give(self._add, df, lists)

    def _add(self, df: pl.DataFrame, lists: R.PairLists | None) -> None:
        c = df.get_column
        offsets, data = text_buffers(c("text"))
        types, names = R.pair_columns(df)
        extra = () if lists is None else (
            np.ascontiguousarray(lists.offsets, np.int64),
            np.ascontiguousarray(lists.types, np.int64),
            np.ascontiguousarray(lists.values, np.int64))
        self.store.add(int64_column(c("time")), _typed(c("row"), pl.Int32, "=i4"),
                       _typed(c("kind"), pl.Int8, "i1"), _typed(c("phase"), pl.Int8, "i1"),
                       int64_column(c("sub")), _typed(c("src"), pl.Int8, "i1"),
                       int64_column(c("ord")),
                       *(int64_column(c(k)) for k in ("a", "b", "c", "d", "e", "f")),
                       offsets, data, types, [int64_column(c(n)) for n in names], *extra)

    @property
    def total(self) -> int:
        self.settle()
        return self.store.total

    def finish(self) -> list[Run]:
        self.settle()
        return [Run(path, [tuple(p) for p in index], n)
                for path, index, n in self.store.finish()]


class Intervals(_Fed):
    """One report's state intervals (row, start, end, state, src, ord) until tiling."""

    def __init__(self, prefix: str | Path, budget: int,
                 feeder: StoreFeeder | None = None) -> None:
        super().__init__(feeder)
        self.store = IntervalStore(str(prefix), int(budget))

    def add(self, df: pl.DataFrame) -> None:
        if df.height:
            self._give(self._add, df)

    def _add(self, df: pl.DataFrame) -> None:
        c = df.get_column
        self.store.add(_typed(c("row"), pl.Int32, "=i4"), int64_column(c("start")),
                       int64_column(c("end")), _typed(c("state"), pl.Int8, "i1"),
                       _typed(c("src"), pl.Int8, "i1"), int64_column(c("ord")))

    def tile(self, records: Records, first: np.ndarray, default: np.ndarray,
             is_gpu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tile every row (arrays indexed by row id); returns (moved intervals as
        MOVED_DTYPE, max tiled end per row with NUL where none)."""
        self.settle()
        records.settle()
        moved, row_max = self.store.tile(
            records.store, np.ascontiguousarray(first, dtype=np.int64),
            np.ascontiguousarray(default, dtype=np.int8),
            np.ascontiguousarray(is_gpu, dtype=np.uint8))
        return np.frombuffer(moved, dtype=MOVED_DTYPE), np.frombuffer(row_max, dtype=np.int64)
