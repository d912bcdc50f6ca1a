"""GPU utilisation over time: per device, the share of each of a fixed number of time bins
in which it runs something (a kernel, a copy or a set), what `nsys recipe
cuda_gpu_time_util_map` shows as a rank x time heatmap.

It observes the efficiency model's pass (`model._analyze`): the model's sweep already finds
the runs in which each device is active (`timeline.GroupSweep.add`), and each window's runs
are added into a devices x bins matrix here, with no table of activities kept: memory is
the matrix (8 bytes a cell), whatever the trace's length. The bins split the trace's time
(its header's end) into `BINS` equal parts.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..paraver.read import Source, TraceInfo, open_trace

BINS = 120  # time bins per device (a page's heatmap is ~120 columns wide)


class UtilisationMap:
    """An observer of the model's pass (`types` adds nothing to what it reads): `add_runs`
    takes the active runs of each window, `result` gives the table."""

    types: frozenset = frozenset()

    def __init__(self, path: Source | TraceInfo, bins: int = BINS) -> None:
        self.end = max(int(open_trace(path).layout.end), 1)
        self.bins = max(1, min(bins, self.end))
        self.edges = (np.arange(self.bins + 1, dtype=np.int64) * self.end) // self.bins
        self.busy = np.zeros((0, self.bins), dtype=np.int64)
        self.full = np.zeros((0, self.bins + 1), dtype=np.int64)  # whole bins, differences
        self.keys = np.zeros(0, dtype=np.int64)

    def add(self, window) -> None:  # the runs come through `add_runs`
        pass

    def add_runs(self, runs: pl.DataFrame, keys: np.ndarray) -> None:
        """A window's active runs (gi: the group's index in `keys`, start, end)."""
        if len(keys) > self.busy.shape[0]:
            grow = len(keys) - self.busy.shape[0]
            self.busy = np.vstack([self.busy, np.zeros((grow, self.bins), np.int64)])
            self.full = np.vstack([self.full, np.zeros((grow, self.bins + 1), np.int64)])
            self.keys = np.asarray(keys, dtype=np.int64)
        if runs.height == 0:
            return
        gi = runs["gi"].to_numpy().astype(np.int64)
        s = np.clip(runs["start"].to_numpy(), 0, self.end)
        e = np.clip(runs["end"].to_numpy(), 0, self.end)
        keep = e > s
        gi, s, e = gi[keep], s[keep], e[keep]
        edges = self.edges
        bs = np.searchsorted(edges, s, side="right") - 1
        be = np.searchsorted(edges, e - 1, side="right") - 1
        flat = self.busy.reshape(-1)
        one = bs == be
        np.add.at(flat, gi[one] * self.bins + bs[one], e[one] - s[one])
        many = ~one
        g, b0, b1 = gi[many], bs[many], be[many]
        np.add.at(flat, g * self.bins + b0, edges[b0 + 1] - s[many])
        np.add.at(flat, g * self.bins + b1, e[many] - edges[b1])
        inner = b1 - b0 > 1  # whole bins between: +1 from b0 + 1, -1 from b1
        fl = self.full.reshape(-1)
        np.add.at(fl, g[inner] * (self.bins + 1) + b0[inner] + 1, 1)
        np.add.at(fl, g[inner] * (self.bins + 1) + b1[inner], -1)

    def matrix(self) -> np.ndarray:
        """[devices, bins]: busy ns of each device in each bin."""
        width = np.diff(self.edges)
        return self.busy + np.cumsum(self.full[:, :-1], axis=1) * width[None, :]

    def result(self, devices) -> pl.DataFrame:
        """device, task, gpu, bin, start, end, busy (ns), fraction of the bin: one row per
        device (`model.GroupResult`s, in their order) and bin."""
        schema = {"device": pl.Utf8, "task": pl.Int64, "gpu": pl.Int64, "bin": pl.Int64,
                  "start": pl.Int64, "end": pl.Int64, "busy": pl.Int64, "fraction": pl.Float64}
        if not devices:
            return pl.DataFrame(schema=schema)
        m = np.vstack([self.matrix(), np.zeros((1, self.bins), np.int64)])  # last: none
        index = {int(k): i for i, k in enumerate(self.keys.tolist())}
        rows = np.array([index.get((d.task - 1) * 1_000_000 + (d.device or 0), len(m) - 1)
                         for d in devices], dtype=np.int64)
        n, b = len(devices), self.bins
        busy = m[rows].reshape(-1)
        width = np.tile(np.diff(self.edges), n).astype(np.float64)
        return pl.DataFrame({
            "device": np.repeat([d.name for d in devices], b),
            "task": np.repeat([d.task for d in devices], b),
            "gpu": np.repeat([-1 if d.device is None else d.device for d in devices], b),
            "bin": np.tile(np.arange(b), n), "start": np.tile(self.edges[:-1], n),
            "end": np.tile(self.edges[1:], n), "busy": busy,
            "fraction": np.minimum(busy / np.maximum(width, 1), 1.0)}, schema=schema)
