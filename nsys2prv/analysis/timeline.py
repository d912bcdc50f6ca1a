"""The analysis' sweeps over a window of a trace, compiled (`engine/_timeline.c`).

Every event and state of a window is touched once, in time order, with Paraver's semantics
(a set of event types is open on a row from an event of the set with a value != 0 to the
next event of the set there, or the window's end). Two sweeps:

* `GroupSweep` — per group of rows (a device, a process): how many rows have each of the
  efficiency model's sets open (kernels, compute kernels, NCCL kernels, any activity),
  summed over time into the model's classes, and the runs in which the group is active
  (what the idle analysis needs).
* `RowTimeline` — per row of a few (host threads): time per (state, open call sets), and
  `between`: the time of each column of a (state, open sets) -> column map between two
  instants of a row (the causes of a GPU gap).

And `Spans`, every activity paired across windows, and `Gaps`, the holes between a device's
active runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ..engine._engine import Gaps as _Gaps
from ..engine._engine import Spans as _Spans
from ..engine._engine import group_sweep, row_timeline
from ..paraver.read import Trace

NSUMS = ("useful_talp", "comm_talp", "useful_nccl", "comm_nccl", "active", "nccl_time",
         "hidden_comm", "l1", "l2", "l3", "lc1", "lc2", "lc3")
# states with a bin of their own; others share one (registry states are 0..33)
NST = 64
ST_NONE, ST_ENDED = 0, 1  # bins of no state yet, and after a state ended with none next


def set_table(sets: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(types, bits): the event types of `sets`, sorted, and the bitmask of the sets each
    belongs to (set i is bit i)."""
    bits: dict[int, int] = {}
    for i, types in enumerate(sets):
        for t in types:
            bits[int(t)] = bits.get(int(t), 0) | (1 << i)
    types = np.array(sorted(bits), dtype=np.int64)
    return types, np.array([bits[t] for t in types.tolist()], dtype=np.uint8)


def first_of_each(*columns: str) -> pl.Expr:
    """A filter that keeps the first row of each distinct `columns` in the frame's order:
    `unique(columns, keep="first", maintain_order=True)` at a third to a fifth of its cost
    (polars' ordered unique sorts its groups; this marks the first of each)."""
    return pl.struct(*columns).is_first_distinct()


class RowTimeKey:
    """(row, time) pairs as one Int64 column `_k` = time * rows + row: polars joins and
    groups on one integer column at about half the cost of two (it hashes several key
    columns as encoded rows). A trace whose times could overflow that (`see`: every time a
    window brings, before its keys are made) gets a struct of both from then on; the keys
    are made afresh for each operation, never held, so the switch converts nothing."""

    def __init__(self, rows: int) -> None:
        self.rows = max(int(rows), 1)
        self.limit = (1 << 62) // self.rows
        self.packed = True

    @classmethod
    def of_trace(cls, rows: pl.DataFrame) -> "RowTimeKey":
        """The key of a trace's rows (`layout.rows`, `Trace.rows`: its row numbers)."""
        return cls(int(rows["row"].max() or 0) + 1)

    def see(self, *times) -> None:
        """Times (None: none) that keys will be made of."""
        if self.packed and any(t is not None and not -self.limit < t < self.limit
                               for t in times):
            self.packed = False

    def of(self, row: str = "row", time: str = "start") -> pl.Expr:
        if self.packed:
            return (pl.col(time).cast(pl.Int64) * self.rows
                    + pl.col(row).cast(pl.Int64)).alias("_k")
        return pl.struct(pl.col(row).cast(pl.Int64), pl.col(time).cast(pl.Int64)).alias("_k")

    def join(self, left: pl.DataFrame, right: pl.DataFrame, how: str = "left",
             row: str = "row", time: str = "start") -> pl.DataFrame:
        """`left.join(right, on=[row, time], how=how)`, left's order kept, on the key."""
        out = left.with_columns(self.of(row, time)).join(
            right.with_columns(self.of(row, time)).drop(row, time), on="_k", how=how,
            maintain_order="left" if how == "left" else None)
        return out.drop("_k")


def _col(frame: pl.DataFrame, name: str, dtype) -> np.ndarray:
    return np.ascontiguousarray(frame[name].to_numpy(), dtype=dtype)


def _slots(nrows: int, rows: Sequence[int]) -> np.ndarray:
    """The slot of each of `nrows` rows: its place in `rows`, -1 for the others."""
    slot = np.full(nrows, -1, dtype=np.int32)
    slot[np.asarray(list(rows), dtype=np.int64)] = np.arange(len(rows))
    return slot


def _events(window: Trace) -> tuple[np.ndarray, ...]:
    ev = window.events
    return (_col(ev, "row", np.int32), _col(ev, "time", np.int64),
            _col(ev, "type", np.int64), _col(ev, "value", np.int64))


class GroupSweep:
    """The model's sums per group of rows over the windows given to `add`. Sets: K (all
    kernels), C (compute kernels), N (NCCL kernels), A (kernels and memory operations);
    `group` maps every row of the trace to its group's key (rows.row order)."""

    def __init__(self, rows: pl.DataFrame, group: pl.Expr, kernel: int, nccl: int,
                 memop: int) -> None:
        keys = rows.sort("row").select(group.alias("g"))["g"]
        self.keys, index = np.unique(keys.to_numpy(), return_inverse=True)
        self.group_of_row = np.ascontiguousarray(index, dtype=np.int32)
        self.types, self.bits = set_table([(kernel, nccl), (kernel,), (nccl,),
                                           (kernel, nccl, memop)])
        self.sums = np.zeros((len(self.keys), len(NSUMS)), dtype=np.int64)

    def add(self, window: Trace) -> pl.DataFrame:
        """Sum a window; returns its active runs (gi: the group's index in `keys`, g, start,
        end), by g and start."""
        runs = group_sweep(*_events(window), self.group_of_row, self.types, self.bits,
                           window.end, self.sums)
        r = np.frombuffer(runs, dtype=np.int64).reshape(-1, 3)
        r = r[np.lexsort((r[:, 1], r[:, 0]))]
        return pl.DataFrame({"gi": r[:, 0], "g": self.keys[r[:, 0]].astype(np.int64),
                             "start": r[:, 1], "end": r[:, 2]})

    def result(self) -> pl.DataFrame:
        """(g, *NSUMS) of every group."""
        return pl.DataFrame({"g": self.keys.astype(np.int64),
                             **{c: self.sums[:, i] for i, c in enumerate(NSUMS)}})


class RowTimeline:
    """Time per (state, open call sets) of `rows` (row ids), and per set the intervals of
    positive length, summed over the windows given to `add`. Call sets are `sets` (lists of
    event types), at most 8."""

    def __init__(self, nrows: int, rows: Sequence[int], sets: Sequence[Sequence[int]]) -> None:
        self.rows = list(rows)
        self.slot_of_row = _slots(nrows, self.rows)
        self.nsets = len(sets)
        self.types, self.bits = set_table(sets)
        self.bins = np.zeros((len(self.rows), (NST + 3) << self.nsets), dtype=np.int64)
        self.opens = np.zeros((len(self.rows), self.nsets), dtype=np.int64)

    def add(self, window: Trace) -> None:
        st = window.states
        row_timeline(_col(st, "row", np.int32), _col(st, "begin", np.int64),
                     _col(st, "end", np.int64), _col(st, "state", np.int32), *_events(window),
                     self.slot_of_row, NST, self.types, self.bits, self.nsets, window.end,
                     self.bins, self.opens, None, None, None, None, None)

    def time(self, states: Sequence[int] | None = None, open_set: int | None = None
             ) -> np.ndarray:
        """Per row, the time in any of `states` (None: in any state, or none) while set
        `open_set` is open (None: whatever is open)."""
        b = self.bins.reshape(len(self.rows), NST + 3, 1 << self.nsets)
        if states is not None:
            b = b[:, [state_bin(s) for s in states], :]
        if open_set is not None:
            b = b[:, :, [f for f in range(1 << self.nsets) if f & (1 << open_set)]]
        return b.sum(axis=(1, 2))


def state_bin(state: int) -> int:
    """The state index of a state value in the bins."""
    return state + 2 if 0 <= state < NST else NST + 2


def between(window: Trace, rows: Sequence[int], nrows: int, sets: Sequence[Sequence[int]],
            column: np.ndarray, ncols: int, queries: pl.DataFrame) -> np.ndarray:
    """[len(queries), ncols]: per query (row, a, b), the time between a and b of each column,
    the column of an instant being `column[state index << len(sets) | open sets]` (-1:
    none) on the query's row, as the window's states and call events on `rows` give it."""
    slot = _slots(nrows, rows)
    types, bits = set_table(sets)
    st = window.states
    out = np.zeros((queries.height, ncols), dtype=np.int64)
    row_timeline(_col(st, "row", np.int32), _col(st, "begin", np.int64),
                 _col(st, "end", np.int64), _col(st, "state", np.int32), *_events(window),
                 slot, NST, types, bits, len(sets), window.end, None, None,
                 _col(queries, "row", np.int32), _col(queries, "a", np.int64),
                 _col(queries, "b", np.int64), np.ascontiguousarray(column, dtype=np.int8),
                 out)
    return out


class Spans:
    """Activities as spans, paired across the windows given to `add` in order: an event
    with a value != 0 of a `flat` type opens a span that the next event of its row and type
    closes (kernels among them take the value of the `full` name event at their start on
    their row); a `stacked` type nests: a value pushes, 0 pops the innermost (a pop with
    nothing open is dropped). What is still open waits for the next window."""

    def __init__(self, flat: Sequence[int], kernels: Sequence[int], stacked: Sequence[int],
                 full: int | None, nrows: int) -> None:
        kinds = {int(t): 1 for t in flat}
        kinds.update({int(t): 2 for t in kernels})
        kinds.update({int(t): 3 for t in stacked})
        if full is not None:
            kinds[int(full)] = 4
        types = sorted(kinds)
        self._spans = _Spans(np.array(types, dtype=np.int64),
                             np.array([kinds[t] for t in types], dtype=np.uint8), nrows)

    def add(self, events: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The spans that closed in `events` (row, time, type, value; the window's own, not
        the values carried into it), in the order they closed: flat [n, 6] (row, type,
        value, start, dur, full name or NUL) and stacked [n, 6] (row, type, value, start,
        dur, level: 1 outermost)."""
        ev = events
        flat, stacked = self._spans.add(_col(ev, "row", np.int32), _col(ev, "time", np.int64),
                                        _col(ev, "type", np.int64), _col(ev, "value", np.int64))
        return (np.frombuffer(flat, dtype=np.int64).reshape(-1, 6),
                np.frombuffer(stacked, dtype=np.int64).reshape(-1, 6))


class Gaps:
    """The gaps of every device of a `GroupSweep` (the holes between its active runs, across
    windows) and the host row of the launch arrow (a communication with one of `tags`) that
    reaches the device at each gap's end: the first by receiving row, then send time."""

    def __init__(self, sweep: GroupSweep, rows: pl.DataFrame, tags: Sequence[int]) -> None:
        gpu = (rows.sort("row")["kind"] == "gpu").to_numpy()
        self.keys = sweep.keys
        self._gaps = _Gaps(np.where(gpu, sweep.group_of_row, -1).astype(np.int32),
                           len(sweep.keys), np.array(list(tags), dtype=np.int64))

    def add(self, runs: pl.DataFrame, comms: pl.DataFrame | None, end: int) -> np.ndarray:
        """The window's active runs (`GroupSweep.add`) and communications: the gaps that
        ended in it, [n, 4] (g index, start, end, host row or -1)."""
        if comms is None:
            comms = pl.DataFrame(schema={"send_row": pl.Int32, "send": pl.Int64,
                                         "recv_row": pl.Int32, "recv": pl.Int64,
                                         "tag": pl.Int64})
        out = self._gaps.add(_col(runs, "gi", np.int64), _col(runs, "start", np.int64),
                             _col(runs, "end", np.int64), _col(comms, "send_row", np.int32),
                             _col(comms, "send", np.int64), _col(comms, "recv_row", np.int32),
                             _col(comms, "recv", np.int64), _col(comms, "tag", np.int64), end)
        return np.frombuffer(out, dtype=np.int64).reshape(-1, 4)

    def idle(self, end: int) -> np.ndarray:
        """[n, 2] (g index, since): the devices idle at `end` (a window's end) after some
        activity: a gap is open on them since `since`."""
        return np.frombuffer(self._gaps.idle(end), dtype=np.int64).reshape(-1, 2)

    def spans(self) -> pl.DataFrame:
        """(g, first, last): start of each device's first activity, end of its last."""
        s = np.frombuffer(self._gaps.spans(), dtype=np.int64).reshape(-1, 3)
        return pl.DataFrame({"g": self.keys[s[:, 0]].astype(np.int64), "first": s[:, 1],
                             "last": s[:, 2]})
