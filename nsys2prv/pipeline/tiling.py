"""States that tile every row, from the activity intervals of one report.

CPU threads: an interval nested in (or overlapping) an earlier one is clipped to where the
earlier one ends, so the outer call's state wins; gaps are Running.

GPU streams: activities that overlap an earlier one on the same stream (programmatic
dependent launch, clock jitter) are not clipped: each goes to the first free *lane* of its
overlap cluster, an extra row "GPU d ctx c stream s (lane k)" of the task, so both keep their
full duration in Paraver. The records of a moved activity follow it in the merge (`moves`).
Gaps are Idle. Every row ends with its default state up to its last record.

The sorting and tiling run in the engine (`IntervalStore.tile`): intervals sorted by
(row, start, ord) out of core, states written straight into the report's records.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..engine import NUL, Intervals, Records
from ..model.rows import GPU, RowRegistry, default_states
from ..paraver import registry as reg

_SPANS = {"row": pl.Int32, "first": pl.Int64, "last": pl.Int64}


def _per_row(n: int, rows: np.ndarray, values: np.ndarray, fill: int, dtype) -> np.ndarray:
    out = np.full(n, fill, dtype=dtype)
    out[rows] = values
    return out


def _tails(records: Records, info: pl.DataFrame, row_max: np.ndarray) -> None:
    """Each row's default state from its last tiled end (or its first record) to its last
    record."""
    rows = info["row"].to_numpy()
    ends = row_max[rows]
    start = np.where(ends == NUL, info["first"].to_numpy(), ends)
    keep = start < info["last"].to_numpy()
    if not keep.any():
        return
    n = int(keep.sum())
    tails = pl.DataFrame({
        "time": start[keep], "row": rows[keep].astype(np.int32),
        "kind": np.full(n, 1, np.int8), "phase": np.zeros(n, np.int8),
        "sub": np.zeros(n, np.int64), "src": np.zeros(n, np.int8),
        "ord": np.full(n, -1, np.int64), "a": info["last"].to_numpy()[keep],
        "b": info["default"].to_numpy()[keep].astype(np.int64),
        "c": np.full(n, NUL, np.int64), "d": np.full(n, NUL, np.int64),
        "e": np.full(n, NUL, np.int64), "f": np.full(n, NUL, np.int64),
        "text": pl.Series([None] * n, dtype=pl.Utf8)})
    records.add(tails)


def tile(intervals: Intervals, records: Records, rows: RowRegistry, row_table: pl.DataFrame,
         spans: pl.DataFrame, workprefix: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Write the states of every row into `records`; returns (spans of the new lane rows,
    moves (src, ord, row) of the activities moved to them)."""
    info = spans.cast(_SPANS).join(default_states(row_table, rows.evidence_rows()), on="row", how="left")
    n = rows.count
    first = _per_row(n, info["row"].to_numpy(), info["first"].to_numpy(), NUL, np.int64)
    default = _per_row(n, info["row"].to_numpy(), info["default"].fill_null(0).to_numpy(), 0,
                       np.int8)
    gpu_rows = row_table.filter(pl.col("kind") == GPU)["row"].to_numpy()
    is_gpu = _per_row(n, gpu_rows, np.ones(len(gpu_rows), np.uint8), 0, np.uint8)
    moved, row_max = intervals.tile(records, first, default, is_gpu)
    lane_spans = pl.DataFrame(schema=_SPANS)
    moves = pl.DataFrame(schema={"src": pl.Int8, "ord": pl.Int64, "row": pl.Int32})
    if len(moved):
        keys = rows.gpu_keys(pl.Series(moved["row"])).drop("lane").with_columns(
            pl.Series("lane", moved["lane"]))
        new_rows = rows.gpu_rows(keys).to_numpy().astype(np.int32)
        moves = pl.DataFrame({"src": moved["src"], "ord": moved["ord"], "row": new_rows},
                             schema=moves.schema)
        lanes = pl.DataFrame({"row": new_rows, "start": moved["start"], "end": moved["end"],
                              "state": moved["state"], "src": moved["src"],
                              "ord": moved["ord"]})
        lane_spans = lanes.group_by("row").agg(pl.col("start").min().alias("first"),
                                               pl.col("end").max().alias("last")) \
            .sort("row").cast(_SPANS)
        n2 = rows.count
        lane_iv = Intervals(workprefix + "-lanes", 16 << 20)
        lane_iv.add(lanes)
        lane_first = _per_row(n2, lane_spans["row"].to_numpy(), lane_spans["first"].to_numpy(),
                              NUL, np.int64)
        lane_default = np.full(n2, reg.STATE_IDLE, np.int8)
        _, lane_max = lane_iv.tile(records, lane_first, lane_default, np.zeros(n2, np.uint8))
        row_max = np.where(np.arange(n2) < n, np.append(row_max, np.full(n2 - n, NUL)),
                           lane_max)
        info = pl.concat([info, lane_spans.with_columns(
            pl.lit(reg.STATE_IDLE, pl.Int8).alias("default"))], how="vertical")
    _tails(records, info, row_max)
    return lane_spans, moves
