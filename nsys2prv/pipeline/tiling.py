"""States that tile every row, from activity intervals sorted by (row, start).

CPU threads: an interval nested in (or overlapping) an earlier one is clipped to where the
earlier one ends, so the outer call's state wins; gaps are Running.

GPU streams: activities that overlap an earlier one on the same stream (programmatic
dependent launch, clock jitter) are not clipped: each goes to the first free *lane*, an
extra row "GPU d ctx c stream s (lane k)" of the task, so both keep their full duration in
Paraver. The records of a moved activity follow it (see `row_moves`). Gaps are Idle.

Intervals stream through in sorted blocks; what crosses a block boundary (the running end of
the current row, the lanes of an open overlap cluster) is carried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import polars as pl

from ..model.rows import CPU, GPU, RowRegistry
from ..paraver import records as R
from ..paraver import registry as reg


class Tiler:
    """Tiles sorted interval blocks; states go to `emit` as soon as they are known, so memory
    holds one block, not the trace."""

    def __init__(self, rows: RowRegistry, row_table: pl.DataFrame, spans: pl.DataFrame,
                 emit: Callable[[pl.DataFrame], None]) -> None:
        c = pl.col
        self.rows = rows
        self.info = spans.join(row_table.select("row", "kind"), on="row", how="left")\
            .with_columns(c("row").cast(pl.Int32),
                          pl.when(c("kind") == CPU).then(pl.lit(reg.STATE_RUNNING))
                          .otherwise(pl.lit(reg.STATE_IDLE)).cast(pl.Int8).alias("default"))
        self.gpu_rows = set(row_table.filter(c("kind") == GPU)["row"].to_list())
        self.emit = emit
        self.moves: list[pl.DataFrame] = []  # (src, ord, row) of activities moved to a lane
        self.lane_intervals: list[pl.DataFrame] = []
        self._carry_row: int | None = None  # tiling carry (lane 0 / CPU)
        self._carry_end: int | None = None
        self._cluster_row: int | None = None  # overlap cluster carry (GPU rows)
        self._cluster_max: int | None = None
        self._cluster_lanes: list[int] = []
        self._row_max: list[pl.DataFrame] = []

    # -- lanes --------------------------------------------------------------------------------
    def _lanes(self, df: pl.DataFrame) -> np.ndarray:
        """First-fit lane of each GPU interval of a block sorted by (row, start, ord)."""
        n = df.height
        lanes = np.zeros(n, dtype=np.int64)
        if n == 0:
            return lanes
        row = df["row"].to_numpy()
        start = df["start"].to_numpy()
        end = df["end"].to_numpy()
        prev = (df.select(pl.col("end").cum_max().shift(1).over("row"))["end"]
                .to_numpy(allow_copy=True).astype(np.float64))
        first = np.isnan(prev)
        if self._cluster_row is not None:
            cont = first & (row == self._cluster_row)
            prev[cont] = self._cluster_max
            first &= ~cont
        prev_i = np.where(np.isnan(prev), np.iinfo(np.int64).min, prev).astype(np.int64)
        new_cluster = first | (start >= prev_i)
        cid = np.cumsum(new_cluster)
        busy = np.bincount(cid)[cid] > 1
        continues = (~new_cluster[0]) if n else False
        if continues:
            busy |= cid == cid[0]
        for i in np.flatnonzero(busy):  # only intervals of overlap clusters (rare)
            if new_cluster[i] or (i == 0 and not continues):
                ends: list[int] = []
            elif i == 0:
                ends = list(self._cluster_lanes)
            for lane, e in enumerate(ends):
                if e <= start[i]:
                    break
            else:
                lane = len(ends)
                ends.append(0)
            ends[lane] = int(end[i])
            lanes[i] = lane
            self._cluster_lanes = ends
        # carry the last cluster of the block
        last = n - 1
        self._cluster_row = int(row[last])
        self._cluster_max = int(max(end[last], prev_i[last]) if not new_cluster[last]
                                else end[last])
        if not busy[last]:
            self._cluster_lanes = [int(end[last])]
        return lanes

    # -- tiling ---------------------------------------------------------------------------------
    def block(self, block: pl.DataFrame) -> None:
        is_gpu = block["row"].is_in(list(self.gpu_rows))
        gpu = block.filter(is_gpu)
        if gpu.height:
            lanes = self._lanes(gpu)
            if lanes.any():
                moved = gpu.filter(pl.Series(lanes > 0))
                keys = self.rows.gpu_keys(moved["row"]).drop("lane").with_columns(
                    pl.Series("lane", lanes[lanes > 0]))
                new_rows = self.rows.gpu_rows(keys)
                moved = moved.with_columns(new_rows.alias("row"))
                self.moves.append(moved.select("src", "ord", "row"))
                self.lane_intervals.append(moved)
                block = pl.concat([block.filter(~is_gpu), gpu.filter(pl.Series(lanes == 0))],
                                  how="vertical").sort(R.INTERVAL_KEYS, maintain_order=True)
        self._tile(block)

    def _tile(self, block: pl.DataFrame) -> None:
        c = pl.col
        if block.height == 0:
            return
        df = block.join(self.info.select("row", "first", "default"), on="row", how="left",
                        maintain_order="left")
        cm = c("end").cum_max().over("row")
        carry_row, carry_end = self._carry_row, self._carry_end
        if carry_row is not None:
            cm = pl.when(c("row") == carry_row).then(pl.max_horizontal(cm, pl.lit(carry_end)))\
                .otherwise(cm)
        df = df.with_columns(cm.alias("cm"))
        prev = c("cm").shift(1).over("row")
        if carry_row is not None:
            prev = pl.when(prev.is_null() & (c("row") == carry_row)).then(pl.lit(carry_end))\
                .otherwise(prev)
        df = df.with_columns(prev.fill_null(c("first")).alias("prev"))
        df = df.with_columns(pl.max_horizontal("start", "prev").alias("eff"))
        states = df.filter(c("eff") < c("end")).select(
            "row", c("eff").alias("time"), c("end").alias("a"),
            c("state").cast(pl.Int64).alias("b"), "ord")
        gaps = df.filter(c("prev") < c("start")).select(
            "row", c("prev").alias("time"), c("start").alias("a"),
            c("default").cast(pl.Int64).alias("b"), "ord")
        self.emit(pl.concat([states, gaps], how="vertical"))
        self._carry_row, self._carry_end = df.select(c("row").last(), c("cm").last()).row(0)
        self._row_max.append(df.group_by("row").agg(c("cm").max().alias("max_end")))

    def finish(self) -> pl.DataFrame:
        """Tiles the lane rows and the tails; returns the spans of the new lane rows."""
        c = pl.col
        lane_spans = pl.DataFrame(schema={"row": pl.Int32, "first": pl.Int64, "last": pl.Int64})
        if self.lane_intervals:
            lanes = pl.concat(self.lane_intervals, how="vertical").sort(R.INTERVAL_KEYS)
            lane_spans = lanes.group_by("row").agg(c("start").min().alias("first"),
                                                   c("end").max().alias("last"))
            self.info = pl.concat([self.info, lane_spans.with_columns(
                pl.lit(GPU).alias("kind"), pl.lit(reg.STATE_IDLE, pl.Int8).alias("default"))
                .select(self.info.columns)], how="vertical")
            self._carry_row = self._carry_end = None
            self._tile(lanes)
        if self._row_max:
            ends = pl.concat(self._row_max, how="vertical").group_by("row").agg(
                c("max_end").max())
        else:
            ends = pl.DataFrame(schema={"row": pl.Int32, "max_end": pl.Int64})
        tails = self.info.join(ends, on="row", how="left").with_columns(
            c("max_end").fill_null(c("first")).alias("from")).filter(
            c("from") < c("last")).select(
            "row", c("from").alias("time"), c("last").alias("a"),
            c("default").cast(pl.Int64).alias("b"), pl.lit(-1, pl.Int64).alias("ord"))
        self.emit(tails)
        return lane_spans

    def row_moves(self) -> pl.DataFrame:
        if not self.moves:
            return pl.DataFrame(schema={"src": pl.Int8, "ord": pl.Int64, "row": pl.Int32})
        return pl.concat(self.moves, how="vertical")


def tile(blocks: Iterable[pl.DataFrame], rows: RowRegistry, row_table: pl.DataFrame,
         spans: pl.DataFrame, emit: Callable[[pl.DataFrame], None]
         ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Emit the states (row, time, a=end, b=state, ord) of every row; returns (spans of new
    lane rows, moves of activities to lanes)."""
    tiler = Tiler(rows, row_table, spans, emit)
    for block in blocks:
        tiler.block(block)
    lane_spans = tiler.finish()
    return lane_spans, tiler.row_moves()
