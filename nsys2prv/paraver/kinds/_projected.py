"""NVTX ranges projected onto the GPU stream rows, as Nsight Systems draws its "NVTX
(projected)" rows: on every stream row that ran work a range launched, the range's name from
the first such work's start to the last one's end, one event type per nesting level.

The rules are those of `analysis/projection.py` (nsys' `nvtx_gpu_proj_trace`): the work of a
range is the GPU activities whose launching CUDA call started inside it on its thread; its
level is nsys' nesting level on the CPU times. The translation computes them from what the
kinds already hold, so no table is read twice: the kernels' and copies' kinds keep, as they
join each chunk with its CUDA calls (`kernels.launched`), 16 bytes an activity (`keep_work`),
and the NVTX kind projects its ranges at the end (`emit`).

Memory is linear in the activities, never activities x ranges, and the kept work is given up
as it is used: one (launching thread, GPU row) pair at a time, its work sorted by call start,
the work of a range on that stream is one slice of it (two searches per range). A `Work` of
`projection.py` (which `project` and `row_spans` take, with the same spans) also keeps what
the analysis reads and sorts all of it at once: on 4.7M activities it added 240 MB to the
translation's peak where this adds the kept 16 bytes an activity.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ...analysis.projection import PackedKeys, nesting
from ...report.report import Report
from .. import records as R
from .. import registry as reg
from .base import Context, push, start_end

WORK = "nvtx_gpu_work"  # ctx.shared: the GpuWork kept for the projection (None: not wanted)
CUT = "nvtx projected ranges cut where a later one of their level starts on a GPU row"
_UINT32_MAX = (1 << 32) - 1


def _compact(values: np.ndarray) -> np.ndarray:
    """uint32 when every value fits (4 bytes, not 8), else int64."""
    if values.size and 0 <= int(values.min()) and int(values.max()) <= _UINT32_MAX:
        return values.astype(np.uint32)
    return values.astype(np.int64, copy=False)


class GpuWork:
    """The GPU activities of one report with their launching call, kept chunk by chunk per
    (launching host row, GPU row) pair: per activity the call's start (int64), the delay
    from it to the activity's start and the activity's duration (uint32 each, int64 in a
    chunk with a longer one): 16 bytes an activity."""

    def __init__(self) -> None:
        # (host row, GPU row) -> pieces of (call start, delay, duration), one per chunk
        self.pairs: dict[tuple[int, int], list[tuple[np.ndarray, ...]]] = {}

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
        delay = _compact(start - launch)
        dur = _compact(np.asarray(end, np.int64)[order] - start)
        del start, order
        cuts = np.flatnonzero(pair[1:] != pair[:-1]) + 1
        for lo, hi in zip(np.append(0, cuts), np.append(cuts, pair.size)):  # a few pairs
            key = (int(pair[lo] >> 32), int(pair[lo] & 0xFFFFFFFF))
            self.pairs.setdefault(key, []).append((launch[lo:hi], delay[lo:hi], dur[lo:hi]))

    @property
    def size(self) -> int:
        return sum(p[0].size for pieces in self.pairs.values() for p in pieces)

    def spans(self, row: np.ndarray, start: np.ndarray, end: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per range (row, start, end) and per GPU row its work ran on: (range index, GPU
        row, first start, last end), the work being the activities whose call started in
        [start, end) on the range's row (`projection.Work.slices`). One pair at a time, its
        pieces given up as it is done: the work of one stream of one thread is in memory
        twice at most."""
        by_row = np.argsort(row, kind="stable")
        hosts, first, count = np.unique(np.asarray(row)[by_row], return_index=True,
                                        return_counts=True)
        out: list[tuple[np.ndarray, ...]] = []
        for (host, gpu) in sorted(self.pairs):
            pieces = self.pairs.pop((host, gpu))
            k = int(np.searchsorted(hosts, host))
            if k == hosts.size or hosts[k] != host:
                continue  # a thread without ranges
            ranges = by_row[first[k]:first[k] + count[k]]
            launch = np.concatenate([p[0] for p in pieces])
            t0 = launch + np.concatenate([p[1] for p in pieces])
            t1 = t0 + np.concatenate([p[2] for p in pieces])
            del pieces
            if launch.size > 1 and not bool(np.all(launch[1:] >= launch[:-1])):
                order = np.argsort(launch, kind="stable")
                launch, t0, t1 = launch[order], t0[order], t1[order]
                del order
            a = np.searchsorted(launch, start[ranges], "left")
            b = np.searchsorted(launch, end[ranges], "left")
            keep = b > a
            a, b = a[keep], b[keep]
            out.append((ranges[keep], np.full(a.size, gpu, np.int32),
                        reduce_slices(np.minimum, t0, a, b),
                        reduce_slices(np.maximum, t1, a, b)))
        if not out:
            z = np.zeros(0, np.int64)
            return z, z.astype(np.int32), z, z
        return tuple(np.concatenate([o[k] for o in out]) for k in range(4))  # type: ignore


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
        ctx.shared[WORK] = GpuWork() if wanted else None
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
    write them on the GPU rows (module docstring)."""
    work: GpuWork | None = ctx.shared.pop(WORK, None)
    ctx.shared[WORK] = None  # given up: kinds after this one keep nothing more
    if work is None or not work.pairs or len(row) == 0:
        return
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
    which, gpu, first, last = work.spans(row[nested], start[nested], end[nested])
    del work
    which = nested[which]
    projected = np.unique(which).size
    ctx.count("nvtx ranges projected onto the GPU", projected)
    if nested.size > projected:
        ctx.count("nvtx ranges without GPU work", nested.size - projected)
    if which.size == 0:
        return
    lvl = level[which].astype(np.int64)
    # per (GPU row, level), by start, the longer first at one start (the merge's order)
    order = np.lexsort((ord_[which], -last, first, lvl, gpu))
    which, gpu, first, last, lvl = which[order], gpu[order], first[order], last[order], \
        lvl[order]
    grp = np.flatnonzero(np.append(True, (gpu[1:] != gpu[:-1]) | (lvl[1:] != lvl[:-1])))
    group = np.repeat(np.arange(grp.size), np.diff(np.append(grp, gpu.size)))
    # an end inside a later span of the level on the row would end that one's value early:
    # the span ends where the next one starts instead (every start keeps its end, so
    # 'Stacked Val' views stay balanced)
    cut = np.flatnonzero(overlapped_ends(group, first, last))
    if cut.size:
        ctx.count(CUT, int(cut.size))
        last = last.copy()
        last[cut] = first[cut + 1]
    levels = np.unique(lvl)
    types = np.array([ctx.local_type(reg.GPU_PROJECTED.name, str(int(v))) for v in levels],
                     np.int64)
    ctx.count("nvtx projected spans on GPU rows", int(which.size))
    c = pl.col
    step = max(ctx.chunk_rows, 1)
    for lo in range(0, which.size, step):  # record frames of a chunk's size
        sl = slice(lo, lo + step)
        df = pl.DataFrame({
            "row": gpu[sl].astype(np.int32), "start": first[sl], "end": last[sl],
            "row_id": ord_[which[sl]], "value": value[which[sl]],
            "type": types[np.searchsorted(levels, lvl[sl])]})
        push(ctx, start_end(df, R.SRC_NVTX_GPU, c("type"), c("value")))
