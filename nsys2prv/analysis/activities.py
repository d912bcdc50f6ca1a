"""Every GPU activity and NVTX range of a trace as one row each, with its duration.

The comparison of two runs (`diff.py`) and the per-instance tables need durations of single
activities (a kernel's median, a range's spread), not only sums over time. On a Paraver row an
activity is a value event at its start and the next event of the same type at its end
(kernels, memory operations, NVTX start/end lanes: `next` pairing), or a push and its pop
(NVTX push/pop types nest: `stacked` pairing). The trace is read window by window
(`paraver.read.windows`): only the events of the window proper are paired, and what is still
open at a window's end is handed to the next, so memory is that of one window plus the
result (a few numbers per activity).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..engine import NUL
from ..paraver.read import Source, Trace, TraceInfo, open_trace, windows
from ..paraver.registry import cuda
from ..paraver.registry import nvtx as nvtx_reg
from .store import WindowStore, handed_over, taken_over
from .timeline import RowTimeKey, Spans

KERNEL = cuda.CUDA_KERNEL
NCCL_KERNEL = cuda.NCCL_KERNEL
FULL_NAME = 67_000_001  # demangled full kernel name, at the start of compute and NCCL kernels
MEMOP = cuda.MEMORY_OPERATION
MEMORY_KIND_TYPES = (cuda.MEMORY_SRC_KIND, cuda.MEMORY_DST_KIND)  # at a copy's start
CUDA_CALL = cuda.CUDA_CALL
SYNC_STATE = 5
PUSHPOP = range(nvtx_reg.NVTX_PUSHPOP_BASE, nvtx_reg.NVTX_PUSHPOP_BASE + nvtx_reg.NVTX_DOMAIN_MAX)
STARTEND = range(nvtx_reg.NVTX_STARTEND_BASE,
                 nvtx_reg.NVTX_STARTEND_BASE + nvtx_reg.NVTX_LANE_MAX)

_KERNELS = {"row": pl.Int32, "start": pl.Int64, "dur": pl.Int64, "name": pl.Int32,
            "full": pl.Int32, "nccl": pl.Boolean}
LAUNCH_TAGS = (cuda.TAG_KERNEL_LAUNCH, cuda.TAG_NCCL_LAUNCH, cuda.TAG_MEMORY_OPERATION)


# one GPU activity (a kernel or a memory operation) as the sections that sweep them read
# it: `Activities.gpu_items`; name/full are -1 for a memory operation, op -1 for a kernel
GPU_ITEM = {"row": pl.Int32, "start": pl.Int64, "end": pl.Int64, "launch": pl.Int64,
            "launch_row": pl.Int32, "kernel": pl.Boolean, "nccl": pl.Boolean,
            "name": pl.Int32, "full": pl.Int32, "op": pl.Int32, "src_kind": pl.Int16,
            "dst_kind": pl.Int16}


# what the sections that read the work by launch read of it (`gpu_items(by="launch")`)
LAUNCHED = ("row", "start", "end", "launch", "launch_row", "kernel", "nccl", "full", "op")


def gpu_items(kernels: pl.DataFrame, memops: pl.DataFrame) -> pl.DataFrame:
    """Kernels and memory operations (the frames of `Activities`) as GPU items, kernels
    first."""
    c = pl.col
    k = kernels.select(
        "row", "start", (c("start") + c("dur")).alias("end"), "launch", "launch_row",
        pl.lit(True).alias("kernel"), "nccl", c("name").cast(pl.Int32),
        c("full").cast(pl.Int32), pl.lit(-1, pl.Int32).alias("op"),
        pl.lit(None, pl.Int16).alias("src_kind"), pl.lit(None, pl.Int16).alias("dst_kind"))
    m = memops.select(
        "row", "start", (c("start") + c("dur")).alias("end"), "launch", "launch_row",
        pl.lit(False).alias("kernel"), pl.lit(False).alias("nccl"),
        pl.lit(-1, pl.Int32).alias("name"), pl.lit(-1, pl.Int32).alias("full"),
        c("op").cast(pl.Int32), *(c(x) if x in memops.columns else pl.lit(None, pl.Int16)
                                   .alias(x) for x in ("src_kind", "dst_kind")))
    return pl.concat([k.cast(GPU_ITEM), m.cast(GPU_ITEM)])


class _ActivityViews:
    """What any trace's activities answer from their fields, whether they are held
    (`Activities`) or read back from the analysis' store (`StoredActivities`)."""

    def named_ranges(self) -> pl.DataFrame:
        """`ranges` with the text of their name and their domain (row, start, dur, name,
        domain, level, top)."""
        return (self.ranges.join(self.range_names.rename({"id": "name", "name": "text"}),
                                 on="name", how="left")
                .join(self.domains, on="type", how="left")
                .select("row", "start", "dur", pl.col("text").alias("name"), "domain",
                        "level", "top"))

    def window(self, lo: int, hi: int) -> "Activities":
        """The activities that start in [lo, hi), times moved so that lo is 0 (a step of
        the run as a run of its own, to compare two steps). The synchronisation time is
        per row, not per instant: a window has none."""
        inside = (pl.col("start") >= lo) & (pl.col("start") < hi)
        moved = pl.col("start") - lo

        def cut(df: pl.DataFrame) -> pl.DataFrame:
            df = df.filter(inside).with_columns(moved)
            return df.with_columns(pl.col("launch") - lo) if "launch" in df.columns else df

        kernels, memops = self._kernels_memops(lo, hi)
        return Activities(self.path, hi - lo, self.rows, cut(kernels), cut(memops),
                          self.ranges.filter(inside).with_columns(moved),
                          self.sync.clear(), self.kernel_names, self.memop_names,
                          self.range_names, self.domains, self.memory_kinds,
                          self.calls.filter(inside).with_columns(moved))

    def named_kernels(self) -> pl.DataFrame:
        """`kernels` with the text of their short and full names."""
        names = self.kernel_names
        return (self.kernels
                .join(names.rename({"id": "name", "name": "short"}), on="name", how="left")
                .join(names.rename({"id": "full", "name": "full_name"}), on="full",
                      how="left")
                .select("row", "start", "dur", pl.col("short").alias("name"),
                        pl.col("full_name").fill_null(pl.col("short")).alias("full"), "nccl"))

    def kernel_memop_chunks(self) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        """The kernels and memory operations as `kernels` and `memops` have them (columns,
        order), a chunk at a time in start order: held activities in one, stored ones a
        bucket at a time. What sums, counts and distinct values over them read without
        holding them all (the comparison of two runs)."""
        raise NotImplementedError

    def gpu_items(self, columns=None, by: str = "start") -> Iterator[pl.DataFrame]:
        """Every kernel and memory operation as `GPU_ITEM` rows, in chunks: held
        activities in one, stored ones bucket by bucket in time order (`by`: "start", or
        "launch": by the start of their launching call, their own start without one),
        each chunk sorted by it; by launch, the columns of `LAUNCHED` only. Sums over the
        chunks equal the sums over all."""
        raise NotImplementedError


@dataclass
class Activities(_ActivityViews):
    """One trace's activities (times in the trace's ns, rows as in `rows`). Names are the
    trace's value ids (a few bytes an activity, whatever the length of a kernel signature);
    the `*_names` tables give their text.

    kernels: row, start, dur, name (short name id), full (demangled name id), nccl (bool),
        launch (start of the CUDA call that launched it, from the launch line; null: none),
        launch_row (the host row of that call)
    memops: row, start, dur, op (id: 'memcpy Host-to-Device', 'memset', ...), launch,
        launch_row, src_kind, dst_kind (memory kind ids: 'Pageable', 'Pinned', ...; null: unknown)
    ranges: row, start, dur, name (text id), type (event type: its domain or lane), level
        (nesting depth in its domain), top (inside no other range of its thread)
    sync: row, dur (time in the Synchronization state of CPU threads, one line per row)
    kernel_names / memop_names / range_names / memory_kinds: id, name; domains: type,
    domain (null: the default domain, or a start/end range, whose domain the trace does not
    keep)
    """

    path: Path
    end: int
    rows: pl.DataFrame
    kernels: pl.DataFrame
    memops: pl.DataFrame
    ranges: pl.DataFrame
    sync: pl.DataFrame
    kernel_names: pl.DataFrame
    memop_names: pl.DataFrame
    range_names: pl.DataFrame
    domains: pl.DataFrame
    memory_kinds: pl.DataFrame = field(default_factory=lambda: _table({}))
    # CUDA calls of one thread that share their start, or last 0 ns: row, start, calls (how
    # many), zero (all of them 0 ns); read only where the trace has NVTX ranges
    calls: pl.DataFrame = field(default_factory=lambda: _empty(_CALLS))

    def _kernels_memops(self, lo: int, hi: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        return self.kernels, self.memops

    def gpu_count(self) -> int:
        """Kernels and memory operations."""
        return self.kernels.height + self.memops.height

    def kernel_memop_chunks(self) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        yield self.kernels, self.memops

    def kernel_pairs(self) -> pl.DataFrame:
        """(name, full): the distinct pairs of short and full name ids of the kernels."""
        return self.kernels.select("name", "full").unique()

    def gpu_items(self, columns=None, by: str = "start") -> Iterator[pl.DataFrame]:
        items = gpu_items(self.kernels, self.memops)
        if by == "launch":
            items = items.with_columns(pl.col("launch").fill_null(pl.col("start"))
                                       .alias("_t")).sort("_t", maintain_order=True) \
                .drop("_t")
        else:
            items = items.sort("start", "row", maintain_order=True)
        yield items.select(list(columns)) if columns else items

    def gpu_buckets(self, columns=None, by: str = "start"
                    ) -> Iterator[tuple[int, pl.DataFrame]]:
        for items in self.gpu_items(columns, by):
            yield 0, items


class StoredActivities(_ActivityViews):
    """A trace's activities as the analysis' pass kept them (`ActivityCollector` with a
    `WindowStore`): the ranges, names and per-row sums held (bounded by the ranges and the
    names), the GPU activities on disk, read back bucket by bucket (`gpu_items`: memory of
    one window). `kernels` and `memops` read them all into memory (for a library user; no
    section reads them so); `kernel_memop_chunks` a bucket at a time (the comparison's
    sums); `KernelBatches` a batch of whole names at a time (the statistics per name).
    `close` removes the store."""

    def __init__(self, held: Activities, store: WindowStore) -> None:
        for name in ("path", "end", "rows", "ranges", "sync", "kernel_names", "memop_names",
                     "range_names", "domains", "memory_kinds", "calls"):
            setattr(self, name, getattr(held, name))
        self.store = store
        self._whole: tuple[pl.DataFrame, pl.DataFrame] | None = None

    def _kernels_memops(self, lo: int | None = None, hi: int | None = None
                        ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The kernels and memory operations as `Activities` has them (those that start in
        [lo, hi) where given: only the buckets of that window are read)."""
        if lo is None and self._whole is not None:
            return self._whole
        starts = self.store.starts
        parts = []
        for b in self.store.bucket_ids("gpu"):
            if lo is not None:  # the buckets of the window alone are read
                b_lo = starts[b] if b < len(starts) else starts[-1]
                b_hi = starts[b + 1] if b + 1 < len(starts) else None
                if (b_hi is not None and b_hi <= lo) or b_lo >= hi:
                    continue
            part = self.store.bucket("gpu", b, ["start", "row"])
            if lo is not None:
                part = part.filter((pl.col("start") >= lo) & (pl.col("start") < hi))
            parts.append(part)
        items = pl.concat(parts) if parts else pl.DataFrame(schema=GPU_ITEM)
        kernels, memops = _split_items(items)
        if lo is None:
            self._whole = (kernels, memops)
        return kernels, memops

    def kernel_memop_chunks(self) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        if self._whole is not None:
            yield self._whole
            return
        ids = self.store.bucket_ids("gpu")
        for b in ids:
            yield _split_items(self.store.bucket("gpu", b, ["start", "row"]))
        if not ids:  # no GPU activity: one empty chunk
            yield _split_items(pl.DataFrame(schema=GPU_ITEM))

    def gpu_count(self) -> int:
        return self.store.rows("gpu")

    def kernel_pairs(self) -> pl.DataFrame:
        parts = [items.filter(pl.col("kernel")).select("name", "full").unique()
                 for items in self.gpu_items(["kernel", "name", "full"])]
        if not parts:
            return pl.DataFrame(schema={"name": pl.Int32, "full": pl.Int32})
        return pl.concat(parts).unique()

    @property
    def kernels(self) -> pl.DataFrame:
        return self._kernels_memops()[0]

    @property
    def memops(self) -> pl.DataFrame:
        return self._kernels_memops()[1]

    def gpu_items(self, columns=None, by: str = "start") -> Iterator[pl.DataFrame]:
        for _, items in self.gpu_buckets(columns, by):
            yield items

    def gpu_buckets(self, columns=None, by: str = "start"
                    ) -> Iterator[tuple[int, pl.DataFrame]]:
        """`gpu_items` with each chunk's bucket (the window its times fall in: the key of
        the other tables filed by time, `WindowStore.bucket`)."""
        table, key = ("launched", ["t"]) if by == "launch" else ("gpu", ["start", "row"])
        for b in self.store.bucket_ids(table):
            yield b, self.store.bucket(table, b, key, columns)

    def close(self) -> None:
        self._whole = None
        self.store.close()

    def __getstate__(self) -> dict:
        """Pickled (a `diff` side handing its activities over): the ranges go through a
        file in the store's folder (`store.handed_over`); activities read whole are not sent
        (the other process reads the store)."""
        state = dict(self.__dict__, _whole=None)
        state["ranges"] = handed_over(self.ranges, self.store.dir / "handed-ranges.arrow")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, ranges=taken_over(state["ranges"]))


class KernelBatches:
    """A trace's kernels (`columns` of `kernels`, in its order) in batches that each hold
    every kernel of some groups of names (`groups`: full, group; kernels of a name it does
    not list are left out; None: each full name a group of its own), at most `limit`
    kernels a batch but for a group with more, alone: what statistics per name that need
    all of a name's values (medians, quantiles, mixtures) read in bounded memory. Held
    activities, or stored ones of `limit` GPU activities at most, are one batch; stored
    ones are filed per batch in the store's folder on one read of it (after a read to
    count the kernels per name, unless `counts`: full, count) and read back a batch at a
    time, as often as they are iterated. `alone`: the batches of one group of more than
    `limit` kernels, with that count, which a reader can take a file at a time (`pieces`)
    rather than whole (`batch`). `close` (or the `with` block) removes the files."""

    def __init__(self, acts: "Activities | StoredActivities", columns: list[str],
                 groups: pl.DataFrame | None = None, limit: int = 1_000_000,
                 counts: pl.DataFrame | None = None) -> None:
        self.columns = list(dict.fromkeys(["full", *columns]))
        self.groups = None if groups is None else groups.select(
            pl.col("full").cast(pl.Int32), pl.col("group").cast(pl.Int64))
        self.folder: Path | None = None
        self.batches = 1
        self.alone: dict[int, int] = {}  # batch -> its one group's kernels
        self._acts = acts
        store = getattr(acts, "store", None)
        if store is None or getattr(acts, "_whole", None) is not None or \
                acts.gpu_count() <= limit:
            return
        import tempfile

        if counts is None:  # one read to count them
            parts = [k.group_by("full").len() for k, _ in acts.kernel_memop_chunks()]
            counts = pl.concat(parts).group_by("full").agg(pl.col("len").sum().alias("count"))
        counts = self._grouped(counts.select(pl.col("full").cast(pl.Int32), "count"))
        per = counts.group_by("group").agg(pl.col("count").sum()).sort("group")
        batch, filled, n = [], 0, 0
        for c in per["count"].to_list():  # greedy, in group order
            if filled and filled + c > limit:
                n, filled = n + 1, 0
            batch.append(n)
            filled += c
            if c > limit:
                self.alone[n] = c
        self.batches = n + 1
        if self.batches == 1:
            return
        of = counts.join(per.select("group", pl.Series("batch", batch, dtype=pl.Int32)),
                         on="group").select("full", "batch")
        self.folder = Path(tempfile.mkdtemp(prefix="kernels-", dir=store.dir))
        try:
            for i, (k, _) in enumerate(acts.kernel_memop_chunks()):
                k = self._grouped(k.select(self.columns)).join(
                    of, on="full", how="left", maintain_order="left")
                for (b,), rows in k.partition_by("batch", as_dict=True).items():
                    rows.drop("batch").write_ipc(self.folder / f"{b}-{i}.arrow")
        except BaseException:
            self.close()
            raise

    def _grouped(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` with each kernel's group (those of no group left out)."""
        if self.groups is None:
            return frame.with_columns(pl.col("full").cast(pl.Int64).alias("group"))
        return frame.join(self.groups, on="full", how="inner", maintain_order="left")

    def __iter__(self) -> Iterator[pl.DataFrame]:
        """Each batch: `columns` and its kernels' group, in `kernels`' order."""
        for b in range(self.batches):
            frame = self.batch(b)
            if frame is not None:
                yield frame

    def batch(self, b: int) -> pl.DataFrame | None:
        """Batch `b` whole (None: it has no kernel)."""
        parts = list(self.pieces(b))
        return None if not parts else pl.concat(parts) if len(parts) > 1 else parts[0]

    def pieces(self, b: int, columns: list[str] | None = None) -> Iterator[pl.DataFrame]:
        """Batch `b` a file at a time (`columns` of it only, where given): the kernels of
        one window of the run each."""
        if self.batches == 1:
            for k, _ in self._acts.kernel_memop_chunks():
                k = self._grouped(k.select(self.columns))
                yield k.select(columns) if columns else k
            return
        if self.folder is None:
            raise ValueError("the kernel batches were closed")
        files = sorted(self.folder.glob(f"{b}-*.arrow"),
                       key=lambda f: int(f.stem.split("-")[1]))
        for f in files:
            yield pl.read_ipc(f, columns=columns)

    def close(self) -> None:
        if self.folder is not None:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> "KernelBatches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _split_items(items: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """GPU items (`GPU_ITEM`) as the kernels and memory operations of `Activities`, each
    sorted by (start, row)."""
    c = pl.col
    kernels = (items.filter(c("kernel"))
               .select("row", "start", (c("end") - c("start")).alias("dur"), "name",
                       "full", "nccl", "launch", "launch_row")
               .cast(_KERNEL_PARTS).sort("start", "row"))
    memops = (items.filter(~c("kernel"))
              .select("row", "start", (c("end") - c("start")).alias("dur"),
                      c("op").cast(pl.Int64), "launch", "launch_row", "src_kind",
                      "dst_kind")
              .cast(_MEMOP_PARTS).sort("start", "row"))
    return kernels, memops


def _table(names: dict[int, str]) -> pl.DataFrame:
    return pl.DataFrame({"id": list(names), "name": list(names.values())},
                        schema={"id": pl.Int64, "name": pl.Utf8})


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def _domain_of(label: str) -> str | None:
    """The NVTX domain of a push/pop type label ('NVTX push/pop: NAME'); None for the
    default domain."""
    name = label.split(": ", 1)[1] if ": " in label else label
    return None if name == "default domain" else name


class ActivityCollector:
    """Collects a trace's activities window by window: give it every window of
    `windows(path, collector.types, state_rows="cpu", comms=True)` in order (`add`), then
    `result`. The launch lines give each GPU activity the time its CUDA call started
    (what range of the host it belongs to: the step that launched it, not the one it runs
    in while the host waits in a copy).
    The analysis' own pass can feed it (`model.analyze_path(observers=...)`), so that the
    comparison reads each trace once for both. The pairing is compiled (`timeline.Spans`):
    a value event and the next event of its row and type (kernels, with the full name at
    their start; memory operations; NVTX start/end lanes), a push and its pop (NVTX
    push/pop), what is still open handed from window to window."""

    def __init__(self, path: Source | TraceInfo, spill: bool = False,
                 spill_dir: str | Path | None = None) -> None:
        info = open_trace(path)
        self.path = info.path
        self.names = info.names
        self.labels = info.type_labels
        self.layout = info.layout
        self.nvtx_types = [t for t in self.labels if t in PUSHPOP or t in STARTEND]
        self.pushpop = [t for t in self.nvtx_types if t in PUSHPOP]
        self.flat = [KERNEL, NCCL_KERNEL, MEMOP] + [t for t in self.nvtx_types
                                                     if t in STARTEND]
        # CUDA calls only where NVTX ranges are projected (`calls`)
        self.call_types = [CUDA_CALL] if self.nvtx_types and CUDA_CALL in self.labels else []
        self.types = frozenset(set(self.flat) | set(self.pushpop) | {FULL_NAME}
                               | set(MEMORY_KIND_TYPES) | set(self.call_types))
        self._spans = Spans(self.flat, [KERNEL, NCCL_KERNEL], self.pushpop,
                            FULL_NAME if FULL_NAME in self.labels else None,
                            self.layout.rows.height)
        # the GPU activities of each window, with their launch and memory kinds: kept here,
        # or with `spill` written to a store (read back by `stored`)
        self.store = WindowStore("nsys2prv-acts-", spill_dir) if spill else None
        self._kernels: list[pl.DataFrame] = []
        self._memops: list[pl.DataFrame] = []
        # the NVTX ranges (start/end, push/pop) and the instants of several CUDA calls of a
        # window: kept here, or with `spill` in the store (`_keep`), read back by `result`
        self._flat: list[pl.DataFrame] = []  # NVTX start/end ranges
        self._stacked: list[pl.DataFrame] = []
        self._end = self.layout.end
        self._cpu = (self.layout.rows.sort("row")["kind"] == "cpu").to_numpy()
        self._sync = np.zeros(self.layout.rows.height, dtype=np.int64)
        self._sync_seen = np.zeros(self.layout.rows.height, dtype=bool)
        self._starts = _Starts(RowTimeKey.of_trace(self.layout.rows))
        self._calls: list[pl.DataFrame] = []
        self._read_back: set[str] = set()  # the tables `result` has read from the store
        self.windows = 0

    comms = True  # an observer of `model.analyze_path` that needs the launch lines

    def add(self, w: Trace) -> None:
        self._end = max(self._end, w.end)
        own = w.events.slice(w.carried)
        if self.store is not None:
            self.store.window(w.start)
        self._starts.add(own, w.comms, w.end)
        if self.call_types:
            groups = _call_groups(own)
            if groups.height:
                self._keep("calls", groups)
        flat, stacked = self._spans.add(own)
        kernels, memops = _empty(_KERNEL_PARTS), _empty(_MEMOP_PARTS)
        if len(flat):  # kept compact: a few bytes an activity
            kernel = np.isin(flat[:, 1], [KERNEL, NCCL_KERNEL])
            k = flat[kernel]
            name = k[:, 2].astype(np.int32)
            # a kernel whose full name never came (a trace without it for some): the short one
            full = np.where(k[:, 5] == NUL, k[:, 2], k[:, 5]).astype(np.int32)
            kernels = self._starts.attach(pl.DataFrame({
                "row": k[:, 0].astype(np.int32), "start": k[:, 3], "dur": k[:, 4],
                "name": name, "full": full, "nccl": k[:, 1] == NCCL_KERNEL}), kinds=False)
            other = _spans_frame(flat[~kernel])
            memops = self._starts.attach(
                other.filter(pl.col("type") == MEMOP)
                .select("row", "start", "dur", pl.col("value").alias("op")), kinds=True)
            self._starts.done(pl.concat([kernels.select("row", "start"),
                                         memops.select("row", "start")]))
            ranges = other.filter(pl.col("type") != MEMOP)
            if ranges.height:
                self._keep("flat", ranges)
        if self.store is not None:  # by start, and by launch (its call's start, else its own)
            items = gpu_items(kernels, memops).sort("start", "row", maintain_order=True)
            self.store.add_timed("gpu", items, "start", sorted_by=("start", "row"))
            self.store.add_timed("launched", items.select(
                *LAUNCHED, pl.col("launch").fill_null(pl.col("start")).alias("t"))
                .sort("t", maintain_order=True), "t", sorted_by=("t",))
        else:
            if kernels.height:
                self._kernels.append(kernels)
            if memops.height:
                self._memops.append(memops)
        self.windows += 1
        if len(stacked):
            self._keep("stacked", _spans_frame(stacked, "level"))
        st = w.states
        if st.height:  # time in the Synchronization state of each CPU row
            row = st["row"].to_numpy()
            sync = (st["state"].to_numpy() == SYNC_STATE) & self._cpu[row]
            dur = (st["end"].to_numpy() - st["begin"].to_numpy())[sync]
            np.add.at(self._sync, row[sync], dur)
            self._sync_seen[row[sync]] = True

    def _keep(self, table: str, frame: pl.DataFrame) -> None:
        """A window's part of `table` ("flat", "stacked", "calls"): in the store with
        `spill` (the pass holds none of them: 40 MB of NVTX ranges at the end of the 30M
        benchmark trace's pass), else held."""
        if self.store is not None:
            self.store.add(table, frame)
        else:
            getattr(self, "_" + table).append(frame)

    def _kept(self, table: str) -> list[pl.DataFrame]:
        """The parts of `table` kept so far, in the order they came."""
        held = getattr(self, "_" + table)
        if self.store is None or table in self._read_back:
            return held
        self._read_back.add(table)  # `result` takes them once, as it empties the lists
        return [p for p in self.store.parts(table) if p.height] + held

    def stored(self) -> StoredActivities:
        """With `spill`: the activities, their GPU work read back from the store (what
        `result` holds but the kernels and memory operations)."""
        return StoredActivities(self.result(), self.store)

    def close(self) -> None:
        """Remove the store (with `spill`)."""
        if self.store is not None:
            self.store.close()

    def result(self, window: tuple[int, int] | None = None) -> Activities:
        names, labels = self.names, self.labels
        nvtx_types = self.nvtx_types
        flat_spans = self._kept("flat")
        flat_spans = pl.concat(flat_spans) if flat_spans else _spans_frame(_NO_SPANS)
        stack_spans = self._kept("stacked")
        stack_spans = (pl.concat(stack_spans) if stack_spans
                       else _spans_frame(_NO_SPANS, "level"))
        kernels = pl.concat(self._kernels) if self._kernels else _empty(_KERNEL_PARTS)
        memops = pl.concat(self._memops) if self._memops else _empty(_MEMOP_PARTS)
        calls = self._kept("calls")
        calls = pl.concat(calls) if calls else _empty(_CALLS)
        self._flat, self._stacked, self._kernels, self._memops = [], [], [], []
        self._calls = []
        if window is not None:
            lo, hi = window
            inside = (pl.col("start") >= lo) & (pl.col("start") < hi)
            flat_spans = flat_spans.filter(inside)
            stack_spans = stack_spans.filter(inside)
            kernels = kernels.filter(inside)
            memops = memops.filter(inside)
        kernels = kernels.sort("start", "row")
        memops = memops.sort("start", "row")
        nvtx_names: dict[int, str] = {}
        for t in nvtx_types:
            nvtx_names.update(names.get(t, {}))
        startend = [t for t in nvtx_types if t in STARTEND]
        ranges = pl.concat([
            stack_spans.select("row", "type", "value", "start", "dur", "level"),
            flat_spans.filter(pl.col("type").is_in(startend))
            .with_columns(pl.lit(0, pl.Int64).alias("level"))
            .select("row", "type", "value", "start", "dur", "level")])
        # top: not inside another range of the thread, whatever its domain or lane (a sweep:
        # sorted by start, longer first, a range is inside when an earlier one ends after it)
        ranges = (ranges.sort("row", "start", pl.col("dur"), descending=[False, False, True])
                  .with_columns((pl.col("start") + pl.col("dur")).cum_max().shift(1)
                                .over("row").alias("_cover"))
                  .with_columns((pl.col("_cover").is_null()
                                 | (pl.col("_cover") < pl.col("start") + pl.col("dur")))
                                .alias("top"))
                  .select("row", "start", "dur", pl.col("value").alias("name"), "type",
                          "level", "top")
                  .sort("start", "row"))
        seen = np.nonzero(self._sync_seen)[0]
        sync_rows = pl.DataFrame({"row": pl.Series(seen, dtype=pl.Int32),
                                  "dur": self._sync[seen]})
        domains = pl.DataFrame({"type": list(nvtx_types),
                                "domain": [_domain_of(labels[t]) if t in PUSHPOP else None
                                           for t in nvtx_types]},
                               schema={"type": pl.Int64, "domain": pl.Utf8})
        return Activities(self.path, self._end, self.layout.rows, kernels, memops, ranges,
                          sync_rows, _table(names.get(KERNEL, {})),
                          _table(names.get(MEMOP, {})), _table(nvtx_names), domains,
                          _table(names.get(cuda.MEMORY_SRC_KIND, {})), calls)


_NO_SPANS = np.empty((0, 6), dtype=np.int64)


_KINDS = {"row": pl.Int32, "start": pl.Int64, "src_kind": pl.Int16, "dst_kind": pl.Int16}
_LAUNCH = {"launch": pl.Int64, "launch_row": pl.Int32}
_KERNEL_PARTS = {**_KERNELS, **_LAUNCH}
_MEMOP_PARTS = {"row": pl.Int32, "start": pl.Int64, "dur": pl.Int64, "op": pl.Int64,
                **_LAUNCH, "src_kind": pl.Int16, "dst_kind": pl.Int16}
_LINES = {"row": pl.Int32, "start": pl.Int64, **_LAUNCH}
_OPEN = {"row": pl.Int32, "start": pl.Int64, **_LAUNCH, "src_kind": pl.Int16,
         "dst_kind": pl.Int16, "n": pl.Int64}


class _Starts:
    """What a GPU activity's start tells, held from the window where it starts to the one
    where it ends (`Spans` gives activities when they end): the launch line that reaches it
    (the first to its row and start time, in the trace's order: a line is written at its
    send time, never after the activity's start) and a copy's memory kinds. Memory: the
    activities open and the lines not yet at their activity."""

    def __init__(self, key: RowTimeKey) -> None:
        self._pending = _empty(_LINES)  # lines whose activity has not started yet
        self._open = _empty(_OPEN)  # per (row, start): its line and kinds, and how many
        self.dropped = 0  # lines that reach no activity start (checked by the tests)
        self._key = key  # (row, start) as one column for the joins

    def add(self, own: pl.DataFrame, comms: pl.DataFrame | None, end: int) -> None:
        """A window's own events and communications (`end`: the window's end)."""
        key = self._key
        key.see(end)
        if comms is not None and comms.height:
            lines = comms.filter(pl.col("tag").is_in(LAUNCH_TAGS)).select(
                pl.col("recv_row").cast(pl.Int32).alias("row"),
                pl.col("recv").cast(pl.Int64).alias("start"),
                pl.col("send").cast(pl.Int64).alias("launch"),
                pl.col("send_row").cast(pl.Int32).alias("launch_row"))
            if lines.height:
                key.see(lines["start"].min(), lines["start"].max())
                self._pending = pl.concat([self._pending, lines])
        starts = (own.filter(pl.col("type").is_in([KERNEL, NCCL_KERNEL, MEMOP])
                             & (pl.col("value") != 0))
                  .group_by(key.of("row", "time"), maintain_order=True)
                  .agg(pl.col("row").first().cast(pl.Int32), pl.col("time").first()
                       .alias("start"), pl.len().cast(pl.Int64).alias("n"))
                  .drop("_k"))
        p = self._pending
        # lines up to the window's end meet their start here (one at its end may meet it
        # in the next window too: a time's records can span two windows)
        due = p.filter(pl.col("start") <= end)
        self._pending = p.filter(pl.col("start") >= end)
        if not starts.height:
            self.dropped += due.filter(pl.col("start") < end).height
            return
        first = due.filter(key.of().is_first_distinct())
        kinds = own.filter(pl.col("type").is_in(MEMORY_KIND_TYPES))
        kinds = _memory_kinds(kinds).filter(key.of().is_first_distinct()) if kinds.height \
            else _empty(_KINDS)
        new = key.join(key.join(starts, first), kinds)
        self.dropped += key.join(due.filter(pl.col("start") < end), starts.select(
            "row", "start"), how="anti").height
        opened = pl.concat([self._open, new.select(list(_OPEN)).cast(_OPEN)])
        if opened.select(key.of().is_duplicated().any()).item():
            opened = opened.group_by(key.of(), maintain_order=True).agg(
                pl.col("row", "start").first(),
                pl.col("launch", "launch_row", "src_kind", "dst_kind").drop_nulls().first(),
                pl.col("n").sum()).drop("_k")
        self._open = opened

    def attach(self, acts: pl.DataFrame, kinds: bool) -> pl.DataFrame:
        """`acts` (row, start, ...: ended in this window) with their launch, launch_row and,
        with `kinds`, src_kind and dst_kind (null: none)."""
        cols = ["launch", "launch_row"] + (["src_kind", "dst_kind"] if kinds else [])
        return self._key.join(acts, self._open.select("row", "start", *cols))

    def done(self, ended: pl.DataFrame) -> None:
        """The activities (row, start) that ended: their starts are let go."""
        if not ended.height:
            return
        key = self._key
        count = ended.group_by(key.of()).agg(pl.len().cast(pl.Int64).alias("ended"))
        self._open = (self._open.with_columns(key.of())
                      .join(count, on="_k", how="left", maintain_order="left")
                      .with_columns(pl.col("n") - pl.col("ended").fill_null(0))
                      .filter(pl.col("n") > 0).drop("ended", "_k"))
_CALLS = {"row": pl.Int32, "start": pl.Int64, "calls": pl.Int32, "zero": pl.Boolean}


def _call_groups(ev: pl.DataFrame) -> pl.DataFrame:
    """(row, start, calls, zero) of the CUDA calls of a window (its events, in file order:
    the events of one instant of one row are contiguous) that start at one instant of one
    thread with others, or last 0 ns: what the projection of NVTX ranges needs where exports
    have clamped timestamps (several calls of one thread at one ns, each with its
    correlation id; a call of 0 ns at a range's end is inside it). At an instant, `calls` =
    the calls that start (value events); all of them last 0 ns when the instant's last
    event ends a call (a call still open starts last). An instant's events are all in one
    window. numpy over the window's calls: a few passes, no group-by."""
    is_call = ev["type"].to_numpy() == CUDA_CALL
    if not is_call.any():
        return _empty(_CALLS)
    row = ev["row"].to_numpy()[is_call]
    time = ev["time"].to_numpy()[is_call]
    value = ev["value"].to_numpy()[is_call]
    first = np.ones(row.size, dtype=bool)
    first[1:] = (row[1:] != row[:-1]) | (time[1:] != time[:-1])
    at = np.flatnonzero(first)
    calls = np.add.reduceat((value != 0).astype(np.int32), at)
    last = value[np.append(at[1:], row.size) - 1]
    keep = (calls > 1) | ((calls == 1) & (last == 0))
    if not keep.any():
        return _empty(_CALLS)
    return pl.DataFrame({"row": row[at][keep].astype(np.int32), "start": time[at][keep],
                         "calls": calls[keep].astype(np.int32), "zero": last[keep] == 0},
                        schema=_CALLS)


def _memory_kinds(ev: pl.DataFrame) -> pl.DataFrame:
    """(row, start, src_kind, dst_kind) of a window's memory kind events (row, time, type,
    value): one row per copy."""
    dst = pl.col("type") == cuda.MEMORY_DST_KIND
    return (ev.filter(pl.col("value") != 0)
            .group_by("row", "time")
            .agg(pl.col("value").filter(~dst).first().alias("src_kind"),
                 pl.col("value").filter(dst).first().alias("dst_kind"))
            .rename({"time": "start"}).cast(_KINDS))


def _spans_frame(a: np.ndarray, last: str | None = None) -> pl.DataFrame:
    """Spans `Spans.add` returned as a frame (row, type, value, start, dur[, `last`];
    without `last`, flat spans: with their launch and memory kinds, null until matched)."""
    return pl.DataFrame({"row": a[:, 0].astype(np.int32), "type": a[:, 1], "value": a[:, 2],
                         "start": a[:, 3], "dur": a[:, 4],
                         **({last: a[:, 5]} if last else {})})


def read_activities(path: Source | TraceInfo, window: tuple[int, int] | None = None
                    ) -> Activities:
    """Every kernel, memory operation and NVTX range of the trace `path` with its duration,
    and the synchronisation time of its CPU threads (one pass); with `window` (trace ns,
    [start, end)), only activities that start inside it (whole activities are counted where
    they start, as nsys' statistics count them)."""
    info = open_trace(path)
    collector = ActivityCollector(info)
    for w in windows(info, collector.types, state_rows="cpu", comms=True):
        collector.add(w)
    return collector.result(window)


def stored_activities(path: Source | TraceInfo, spill_dir: str | Path | None = None
                      ) -> StoredActivities:
    """`read_activities` with the GPU activities kept on disk (`StoredActivities`: a
    window at a time in memory, in a folder made in `spill_dir`); the caller closes it."""
    from ..lifeline import signals_held

    info = open_trace(path)
    with signals_held():  # made and held at once: a Ctrl-C finds it to remove
        collector = ActivityCollector(info, spill=True, spill_dir=spill_dir)
    try:
        for w in windows(info, collector.types, state_rows="cpu", comms=True):
            collector.add(w)
        return collector.stored()
    except BaseException:
        collector.close()
        raise


def range_instances(acts: Activities) -> pl.DataFrame:
    """NVTX ranges as `pipeline.window.nvtx_instance` takes them: name, domain, start, end
    (trace ns), to find `--filter-nvtx RANGE[@DOMAIN][/INDEX]` on a trace."""
    return acts.named_ranges().select("name", "domain", "start",
                                      (pl.col("start") + pl.col("dur")).alias("end"))
