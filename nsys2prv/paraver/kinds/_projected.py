"""NVTX ranges projected onto the GPU stream rows, as Nsight Systems draws its "NVTX
(projected)" rows: on every stream row that ran work a range launched, the range's name from
the first such work's start to the last one's end, one event type per nesting level.

The rules are those of `analysis/projection.py` (nsys' `nvtx_gpu_proj_trace`): the work of a
range is the GPU activities whose launching CUDA call started inside it on its thread; its
level is nsys' nesting level on the CPU times. The translation computes them from what the
kinds already hold, so no table is read twice: the kernels' and copies' kinds keep, as they
join each chunk with its CUDA calls (`kernels.launched`), 12 bytes an activity (`keep_work`),
written to a file of the partial (in memory they would add their size to the translation's
peak, which the kernels' and NCCL kinds reach), and the NVTX kind projects its ranges at the
end (`emit`).

Memory is linear in the activities, never activities x ranges, and the kept work is given up
as it is used: one (launching thread, GPU row) pair at a time, its work sorted by call start,
the work of a range on that stream is one slice of it (two searches per range); the spans are
written one GPU row at a time. A `Work` of `projection.py` (which `project` and `row_spans`
take, with the same spans) also keeps what the analysis reads and sorts all of it at once: on
4.7M activities it added 240 MB to the translation's peak.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import polars as pl

from ...analysis.projection import PackedKeys, nesting
from ...report.report import Report
from .. import records as R
from .. import registry as reg
from .base import Context, push, start_end

WORK = "nvtx_gpu_work"  # ctx.shared: the GpuWork kept for the projection (None: not wanted)
WORK_FILE = "nvtx_gpu_work.bin"  # the kept work, in the partial's directory until the NVTX kind
CUT = "nvtx projected ranges cut where a later one of their level starts on a GPU row"
_UINT32_MAX = (1 << 32) - 1


def _compact(values: np.ndarray) -> np.ndarray:
    """uint32 when every value fits (4 bytes, not 8), else int64."""
    if values.size and 0 <= int(values.min()) and int(values.max()) <= _UINT32_MAX:
        return values.astype(np.uint32)
    return values.astype(np.int64, copy=False)


class GpuWork:
    """The GPU activities of one report with their launching call, kept chunk by chunk per
    (launching host row, GPU row) pair in a file of the partial (`path`; RSS holds only the
    index): per activity the call's start (as an offset from the piece's first one), the
    delay from it to the activity's start and the activity's duration (uint32 each, int64
    in a piece with a longer one): 12 bytes an activity, read back one pair at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = None
        # (host row, GPU row) -> pieces: first call start, activities, and the (file offset,
        # dtype) of the call start offsets, the delays and the durations
        self.pairs: dict[tuple[int, int], list[tuple[int, int, tuple[tuple[int, str], ...]]]] \
            = {}

    def _write(self, values: np.ndarray) -> tuple[int, str]:
        if self._file is None:
            self._file = open(self.path, "w+b")
        at = self._file.tell()
        values.tofile(self._file)
        return at, values.dtype.str

    def _read(self, n: int, at: int, dtype: str) -> np.ndarray:
        assert self._file is not None
        self._file.seek(at)
        return np.fromfile(self._file, dtype=np.dtype(dtype), count=n)

    def close(self) -> None:
        """Remove the file (the pairs not read yet are given up)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)
        self.pairs.clear()

    def add(self, host_row: np.ndarray, launch: np.ndarray, gpu_row: np.ndarray,
            start: np.ndarray, end: np.ndarray) -> None:
        if len(host_row) == 0:
            return
        pair = np.left_shift(np.asarray(host_row, np.int64), 32) \
            | np.asarray(gpu_row, np.int64)
        order = np.argsort(pair, kind="stable")
        pair = pair[order]
        launch = np.asarray(launch, np.int64)[order]
        start = np.asarray(start, np.int64)[order]
        end = np.asarray(end, np.int64)[order]
        del order
        cuts = np.flatnonzero(pair[1:] != pair[:-1]) + 1
        for lo, hi in zip(np.append(0, cuts), np.append(cuts, pair.size)):  # a few pairs
            key = (int(pair[lo] >> 32), int(pair[lo] & 0xFFFFFFFF))
            base = int(launch[lo:hi].min())
            columns = (launch[lo:hi] - base, start[lo:hi] - launch[lo:hi],
                       end[lo:hi] - start[lo:hi])
            self.pairs.setdefault(key, []).append(
                (base, int(hi - lo), tuple(self._write(_compact(c)) for c in columns)))

    def _pair(self, key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The call starts, starts and ends of a pair's activities, its pieces given up."""
        pieces = self.pairs.pop(key)
        launch = np.concatenate([base + self._read(n, *cols[0]).astype(np.int64)
                                 for base, n, cols in pieces])
        t0 = launch + np.concatenate([self._read(n, *cols[1]) for _, n, cols in pieces])
        t1 = t0 + np.concatenate([self._read(n, *cols[2]) for _, n, cols in pieces])
        return launch, t0, t1

    def spans(self, row: np.ndarray, start: np.ndarray, end: np.ndarray
              ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Per GPU row, the ranges (row, start, end) whose work ran on it: (GPU row, range
        indices, first start, last end), the work being the activities whose call started
        in [start, end) on the range's row (`projection.Work.slices`). One (thread, GPU
        row) pair at a time, its pieces given up as it is done: the work of one stream of
        one thread is in memory (twice at most), the spans of one GPU row."""
        by_row = np.argsort(row, kind="stable")
        hosts, first, count = np.unique(np.asarray(row)[by_row], return_index=True,
                                        return_counts=True)
        for gpu in sorted({g for _, g in self.pairs}):
            out: list[tuple[np.ndarray, ...]] = []
            for host in sorted(h for h, g in self.pairs if g == gpu):
                k = int(np.searchsorted(hosts, host))
                if k == hosts.size or hosts[k] != host:
                    self.pairs.pop((host, gpu))
                    continue  # a thread without ranges
                ranges = by_row[first[k]:first[k] + count[k]]
                launch, t0, t1 = self._pair((host, gpu))
                if launch.size > 1 and not bool(np.all(launch[1:] >= launch[:-1])):
                    order = np.argsort(launch, kind="stable")
                    launch, t0, t1 = launch[order], t0[order], t1[order]
                    del order
                a = np.searchsorted(launch, start[ranges], "left")
                b = np.searchsorted(launch, end[ranges], "left")
                keep = b > a
                a, b = a[keep], b[keep]
                out.append((ranges[keep].astype(np.int32), reduce_slices(np.minimum, t0, a, b),
                            reduce_slices(np.maximum, t1, a, b)))
            if out:
                yield gpu, *(np.concatenate([o[k] for o in out]) for k in range(3))


def reduce_slices(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray
                  ) -> np.ndarray:
    """`ufunc.reduce(values[lo:hi])` of every slice (all non-empty; they may overlap), in one
    `reduceat` over the slices ordered by `lo` (its odd results, between two slices, are
    dropped)."""
    out = np.zeros(len(lo), dtype=values.dtype)
    if len(lo) == 0:
        return out
    order = np.argsort(lo, kind="stable")
    idx = np.empty(2 * order.size, dtype=np.int64)
    idx[0::2] = lo[order]
    idx[1::2] = hi[order]
    padded = np.append(values, values[-1:])  # hi may be len(values)
    out[order] = ufunc.reduceat(padded, idx)[0::2]
    return out


def keep_work(ctx: Context, report: Report, joined: pl.DataFrame) -> None:
    """Keep the GPU activities of a chunk joined with their calls (api_row, api_start, row,
    start, end) for the projection, when the report's NVTX ranges are translated for a
    trace that is written (an analysis-only stream has no use for them: docs/architecture.md
    `attributes=False`)."""
    if WORK not in ctx.shared:
        from . import available

        options = ctx.options
        kinds = getattr(options, "kinds", None)
        wanted = (getattr(options, "attributes", True) and available("nvtx", report)
                  and (kinds is None or "nvtx" in kinds))
        ctx.shared[WORK] = GpuWork(Path(ctx.side_file(WORK_FILE))) if wanted else None
    work = ctx.shared[WORK]
    if work is not None and joined.height:
        work.add(joined["api_row"].to_numpy(), joined["api_start"].to_numpy(),
                 joined["row"].to_numpy(), joined["start"].to_numpy(),
                 joined["end"].to_numpy())


def wanted(ctx: Context) -> bool:
    """Whether GPU work was kept for the projection (the ranges are then worth keeping)."""
    work = ctx.shared.get(WORK)
    return work is not None and bool(work.pairs)


def overlapped_ends(group: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per span, in the order given (sorted by group, first, then last descending: the merge
    writes starts of one time outer first), whether its end falls inside a later span of
    its group (one that starts before it ends and ends no earlier)."""
    n = len(group)
    inside = np.zeros(n, bool)
    if n < 2:
        return inside
    keys = PackedKeys([first, last], int(group.max()) + 1)
    key = keys(group, first)
    # the later spans of i's group that start before i ends: (i, stop)
    stop = np.searchsorted(key, keys(group, last), "left")
    cand = np.flatnonzero(stop > np.arange(n, dtype=np.int64) + 1)
    if cand.size:
        inside[cand] = reduce_slices(np.maximum, last, cand + 1, stop[cand]) >= last[cand]
    return inside


def emit(ctx: Context, row: np.ndarray, start: np.ndarray, end: np.ndarray,
         value: np.ndarray, ord_: np.ndarray) -> None:
    """Project the ranges (CPU row, start, end, name value, rowid) onto the kept GPU work and
    write them on the GPU rows (module docstring), one GPU row at a time."""
    work: GpuWork | None = ctx.shared.pop(WORK, None)
    ctx.shared[WORK] = None  # given up: kinds after this one keep nothing more
    if work is None:
        return
    try:
        if work.pairs and len(row):
            _emit(ctx, work, row, start, end, value, ord_)
    finally:
        work.close()


def _emit(ctx: Context, work: GpuWork, row: np.ndarray, start: np.ndarray, end: np.ndarray,
          value: np.ndarray, ord_: np.ndarray) -> None:
    _, level = nesting(row, start, end)
    twins = level < 0
    if twins.any():
        ctx.count("nvtx ranges nsys cannot nest (equal twins): not projected",
                  int(twins.sum()))
    deep = level >= reg.GPU_PROJECTED.size
    if deep.any():
        ctx.warn(f"NVTX ranges nested deeper than {reg.GPU_PROJECTED.size} levels: not "
                 "projected onto the GPU rows", int(deep.sum()))
    nested = np.flatnonzero(~twins & ~deep)
    projected = np.zeros(len(row), bool)
    types: dict[int, int] = {}
    spans = 0
    for gpu, which, first, last in work.spans(row[nested], start[nested], end[nested]):
        which = nested[which]
        projected[which] = True
        spans += which.size
        lvl = level[which]
        # per level, by start, the longer first at one start (the merge's order)
        order = np.lexsort((ord_[which], -last, first, lvl))
        which, first, last, lvl = which[order], first[order], last[order], lvl[order]
        del order
        # an end inside a later span of the level on the row would end that one's value
        # early: the span ends where the next one starts instead (every start keeps its
        # end, so 'Stacked Val' views stay balanced)
        cut = np.flatnonzero(overlapped_ends(lvl, first, last))
        if cut.size:
            ctx.count(CUT, int(cut.size))
            last[cut] = first[cut + 1]
        for v in np.unique(lvl).tolist():
            if v not in types:
                types[v] = ctx.local_type(reg.GPU_PROJECTED.name, str(v))
        levels = np.array(sorted(types), np.int64)
        typed = np.array([types[v] for v in levels.tolist()], np.int64)
        step = max(ctx.chunk_rows, 1)
        for lo in range(0, which.size, step):  # record frames of a chunk's size
            sl = slice(lo, lo + step)
            df = pl.DataFrame({
                "row": np.full(len(which[sl]), gpu, np.int32), "start": first[sl],
                "end": last[sl], "row_id": ord_[which[sl]], "value": value[which[sl]],
                "type": typed[np.searchsorted(levels, lvl[sl])]})
            push(ctx, start_end(df, R.SRC_NVTX_GPU, pl.col("type"), pl.col("value")))
    n_projected = int(projected.sum())
    ctx.count("nvtx ranges projected onto the GPU", n_projected)
    if nested.size > n_projected:
        ctx.count("nvtx ranges without GPU work", nested.size - n_projected)
    if spans:
        ctx.count("nvtx projected spans on GPU rows", spans)
