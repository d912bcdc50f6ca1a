"""The numeric record layout shared by partial traces and the final writer.

One table shape for every record (Paraver state, event, communication), so that sorting,
spilling and merging handle a single schema:

========  =====================================================================================
time      record time in the report's own ns (state begin, event time, logical send)
row       local row id in its report
kind      1 state, 2 event, 3 communication
phase     order inside one (time, row): 0 end of an earlier region, 1 start and 2 end of a
          zero-length region, 3 start of a region that lasts. So regions ending at t close
          before new ones open, and a zero-length region never hides one starting with it.
sub       order inside a phase, so nested regions stack: starts by decreasing end (outer
          first), ends by decreasing start (inner first)
src       data kind that made the record (ties are broken by it, then by `ord`)
ord       position in the source (rowid), for a total, deterministic order
a..f      state: a=end, b=state
          event: a=type, b=value (a name id to renumber, or a plain number); optionally
                 c=type, d=value: a second pair that is renumbered too
          comm:  a=physical send, b=receiver row, c=logical recv, d=physical recv,
                 e=size, f=tag
text      event only: further ":type:value" pairs that need no renumbering
========  =====================================================================================

The engine (`nsys2prv/engine`) keeps a report's records sorted by time; the merge orders the
records of one time by (row's trace order, kind, phase, sub, src, report, ord).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

STATE, EVENT, COMM = 1, 2, 3
PHASE_END, PHASE_ZERO_START, PHASE_ZERO_END, PHASE_START = 0, 1, 2, 3

# Source ids: tie-breakers, and (with `ord` = the source rowid) the identity of the activity a
# record belongs to, so records can follow an activity moved to another row (overlap lanes).
# Every kind takes its ids from here (below SRC_LAUNCH_OFFSET, unique), so records of one
# activity are never confused with another kind's.
SRC_STATE, SRC_API, SRC_SYNC, SRC_KERNEL, SRC_MEMCPY, SRC_MEMSET = 0, 1, 2, 3, 4, 5
SRC_NVTX, SRC_NVTX_SE, SRC_OSRT, SRC_SCHED = 6, 7, 8, 9
SRC_GPU_METRICS, SRC_GRAPH, SRC_GPU_MEMORY, SRC_DNN, SRC_OPENACC = 40, 41, 42, 43, 44
SRC_MPI, SRC_MPI_MESSAGE, SRC_NCCL = 45, 46, 47
SRC_NVTX_GPU = 48  # NVTX ranges projected onto the GPU rows (ord: the range's rowid)
SRC_SAMPLES = 49  # CPU samples (ord: COMPOSITE_EVENTS.id)
SRC_CALLERS = 50  # the callers of an OS runtime or CUDA API call at its entry (ord: its rowid)
SRC_PYTHON_SAMPLES = 51  # Python backtrace samples (ord: the NVTX mark's rowid)
# sources whose events carry names in their numeric text pairs (a sample's callers at every
# depth): the merge renumbers those values as it does the (a, b) and (c, d) pairs'
TEXT_NAME_SRCS = (SRC_SAMPLES, SRC_CALLERS)
SRC_LAUNCH_OFFSET = 64  # an arrow to an activity of source s has src = s + SRC_LAUNCH_OFFSET

RECORD_SCHEMA: dict[str, pl.DataType] = {
    "time": pl.Int64, "row": pl.Int32, "kind": pl.Int8, "phase": pl.Int8, "sub": pl.Int64,
    "src": pl.Int8,
    "ord": pl.Int64, "a": pl.Int64, "b": pl.Int64, "c": pl.Int64, "d": pl.Int64,
    "e": pl.Int64, "f": pl.Int64, "text": pl.Utf8,
}
ORD_LIMIT = 1 << 40  # rowids stay below this (packed with the source and report ids)

INTERVAL_SCHEMA: dict[str, pl.DataType] = {
    "row": pl.Int32, "start": pl.Int64, "end": pl.Int64, "state": pl.Int8, "src": pl.Int8,
    "ord": pl.Int64,
}
INTERVAL_KEYS = ["row", "start", "ord"]


PAIR_PREFIX = "pair:"  # columns "pair:<k>:<type>": numeric pairs appended to the text


def columns(given: dict[str, pl.Expr], pairs: list[pl.Expr] | None = None) -> list[pl.Expr]:
    """Expressions of a record frame in its final shape: the `given` record columns cast to
    RECORD_SCHEMA's types, the others null (`sub` 0), in its order, then the numeric `pairs`
    (Int64). A frame selected with them needs no `conform` (one polars query, not two)."""
    exprs = [given[name].cast(dtype).alias(name) if name in given
             else pl.lit(0 if name == "sub" else None, dtype).alias(name)
             for name, dtype in RECORD_SCHEMA.items()]
    return exprs + [p.cast(pl.Int64) for p in pairs or ()]


def _conforms(schema: pl.Schema) -> bool:
    """Whether a frame already has the record shape (`columns`)."""
    items = list(schema.items())
    n = len(RECORD_SCHEMA)
    return items[:n] == list(RECORD_SCHEMA.items()) and all(
        name.startswith(PAIR_PREFIX) and dtype == pl.Int64 for name, dtype in items[n:])


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Add missing record columns (nulls; `sub` 0) and fix dtypes and column order (numeric
    pair columns stay, last, in their order)."""
    if _conforms(df.schema):
        return df
    given = {name: pl.col(name) for name in df.columns if name in RECORD_SCHEMA}
    return df.select(columns(given, [pl.col(name) for name in df.columns
                                     if name.startswith(PAIR_PREFIX)]))


class NumericPairs:
    """':type:value' pairs of integer columns, written after an event's text by the engine
    (no strings are built in polars); a null value writes nothing, as `pairs` does."""

    def __init__(self, items: tuple[tuple[int, pl.Expr], ...]) -> None:
        self.items = items

    def columns(self) -> list[pl.Expr]:
        return [expr.cast(pl.Int64).alias(f"{PAIR_PREFIX}{k}:{t}")
                for k, (t, expr) in enumerate(self.items)]


@dataclass(frozen=True)
class PairLists:
    """Each record's own ':type:value' pairs, as many as it has (a sample's callers at
    every depth of its stack), made by the engine after the numeric pairs: record i's are
    entries offsets[i]..offsets[i+1] of `types` and `values` (numpy int64)."""

    offsets: np.ndarray
    types: np.ndarray
    values: np.ndarray


def numeric_pairs(*items: tuple[int, pl.Expr]) -> NumericPairs:
    """Like `pairs`, for integer values, made by the engine (cheaper for millions of rows)."""
    return NumericPairs(items)


def pair_columns(df: pl.DataFrame) -> tuple[list[int], list[str]]:
    """(types, column names) of a record frame's numeric pair columns, in order."""
    names = [n for n in df.columns if n.startswith(PAIR_PREFIX)]
    return [int(n.rsplit(":", 1)[1]) for n in names], names


def events(time: pl.Expr, row: pl.Expr, phase: int | pl.Expr, src: int, ord_: pl.Expr,
           type_: int | pl.Expr, value: pl.Expr, text: pl.Expr | NumericPairs | None = None,
           sub: pl.Expr | None = None, type2: int | pl.Expr | None = None,
           value2: pl.Expr | None = None) -> list[pl.Expr]:
    """Expressions building event records from a normalised frame (`type2`/`value2`: a
    second pair whose value is renumbered like the first, e.g. a kernel's full name), in
    the record shape (`columns`)."""
    given = {"time": time, "row": row, "kind": pl.lit(EVENT),
             "phase": phase if isinstance(phase, pl.Expr) else pl.lit(phase),
             "sub": sub if sub is not None else pl.lit(0, pl.Int64), "src": pl.lit(src),
             "ord": ord_, "a": type_ if isinstance(type_, pl.Expr) else pl.lit(type_),
             "b": value}
    pairs = []
    if isinstance(text, NumericPairs):
        pairs = text.columns()
    elif text is not None:
        given["text"] = text
    if type2 is not None:
        given["c"] = type2 if isinstance(type2, pl.Expr) else pl.lit(type2, pl.Int64)
        given["d"] = value2
    return columns(given, pairs)


def end_phase(start: pl.Expr, end: pl.Expr) -> pl.Expr:
    """Phase of an end event: zero-length regions end right after they start."""
    return pl.when(end == start).then(pl.lit(PHASE_ZERO_END)).otherwise(pl.lit(PHASE_END))


def start_phase(start: pl.Expr, end: pl.Expr) -> pl.Expr:
    """Phase of a start event: zero-length regions open (and close) before lasting ones."""
    return pl.when(end == start).then(pl.lit(PHASE_ZERO_START)).otherwise(pl.lit(PHASE_START))


def pairs(*items: tuple[int, pl.Expr]) -> pl.Expr:
    """':type:value' text for the non-null values among `items`."""
    parts = [pl.when(expr.is_not_null()).then(pl.format(f":{t}:{{}}", expr)).otherwise(pl.lit(""))
             for t, expr in items]
    return pl.concat_str(parts)
