"""Per-report stage: read one export and write its sorted partial trace to a directory.

The partial (documented in docs/intermediate.md) is what the merge stage needs and nothing
more: sorted record runs in local time with local row ids and local name ids, the row table,
the names each value family uses, counts, warnings and clock facts. A partial depends only on
its own report, so reports can be prepared in any order, in parallel, or on other machines.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ..engine import Intervals, Records, Run, StoreFeeder
from ..model.rows import RowRegistry, RowSpans
from ..paraver import records as R
from ..paraver import registry as reg
from ..paraver.registry import sampling
from ..paraver.kinds import TRANSLATORS
from ..paraver.kinds import available as kind_available
from ..paraver.values import LocalNames
from ..report.report import Report
from ..report.schema import warn_if_newer
from ..sources import base, nvtx
from .tiling import tile
from .window import attribute_types

# what a partial that is only analysed leaves out: the attributes, but the memory kinds of
# copies (the comparison splits copies by them: pageable or pinned host memory), the
# kernels' launch statistics (analysis/launch.py, the bounds of the GPU metric rates) and
# what the CPU samples carry (the depth of their stacks, their CPU, the markers dropped)
_ATTRIBUTES = frozenset(attribute_types()) - {reg.MEMORY_SRC_KIND, reg.MEMORY_DST_KIND,
                                             *reg.LAUNCH_TYPES, *(
                                                 t.type for t in sampling.EVENT_TYPES)}

PARTIAL_FORMAT = 3  # 3: pairs binary in the runs (2: as text; 1: Arrow IPC runs)
META_FILE = "partial.json"
MOVES_FILE = "moves.arrow"  # (src, ord, row): activities moved to an overlap lane row
SPILL_BYTES = 256 << 20


@dataclass
class PrepareOptions:
    """What to read and how much to hold in memory."""

    kinds: list[str] | None = None  # None: every kind present
    chunk_rows: int = base.DEFAULT_CHUNK_ROWS
    spill_rows: int = 4_000_000
    spill_bytes: int = SPILL_BYTES  # bytes of records held in memory before a run is spilled
    sync_nvtx: str | None = None  # NVTX range/mark whose first end is a clock sync point
    # [start, end) local ns: read only what overlaps it (and every row's first and last
    # records); the merge cuts the exact window (pipeline/window.py)
    window: tuple[int, int] | None = None
    present: list[str] | None = None  # the kinds the report has, when already known
    # the attributes of activities (grid dimensions, local memory, correlation ids, bytes,
    # return values: numbers the trace's views show and no analysis reads; not the memory
    # kinds of copies, which the comparison reads, nor the kernels' launch statistics);
    # False leaves them out of a partial that is only analysed (`api.translate_stream`),
    # never of one written as a trace
    attributes: bool = True


def available_kinds(report: Report) -> list[str]:
    """Kinds with data in this report, in translation order."""
    return [name for name in TRANSLATORS if kind_available(name, report)]


class PrepareContext:
    """One report's records, state intervals, rows, names, types and counters."""

    def __init__(self, report: Report, workdir: Path, options: PrepareOptions,
                 kinds: list[str]) -> None:
        self.report = report
        self.workdir = workdir
        self.rows = RowRegistry()
        self.spans = RowSpans()
        self.names = LocalNames(report.strings)
        self._kinds = kinds
        self._report_end: int | None = None
        self.options = options
        self.chunk_rows = options.chunk_rows
        self.shared: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}
        self.counts: Counter[str] = Counter()
        self.warnings: Counter[str] = Counter()
        self.type_keys: dict[str, dict[int, str]] = {}
        self.extent: tuple[int, int] | None = None  # records outside every row's lifetime
        # A quarter of the spill budget for records, an eighth for intervals: smaller buffers
        # touch fewer fresh pages (page faults cost more than merging a few more runs).
        # spill_rows (a test knob: tiny runs) caps the record buffer at ~96 bytes a record.
        # At least 16 MiB: every run costs the merge a read buffer and a block, so a small
        # budget must not mean thousands of runs.
        budget = min(max(options.spill_bytes // 8, 16 << 20), max(1, options.spill_rows) * 96)
        # the stores are fed from a second thread while the kinds work on their next chunk
        self.feeder = StoreFeeder()
        self.record_store = Records(workdir / "records", budget, feeder=self.feeder)
        self.interval_store = Intervals(workdir / "intervals", budget // 2, feeder=self.feeder)

    @property
    def report_end(self) -> int:
        """Last time of the report's tables (for regions without an end; scans once)."""
        if self._report_end is None:
            self._report_end = report_span(self.report, self._kinds)[1]
        return self._report_end

    def records(self, df: pl.DataFrame, lists: R.PairLists | None = None) -> None:
        if not self.options.attributes:
            df = df.drop([c for t, c in zip(*R.pair_columns(df)) if t in _ATTRIBUTES])
        self.record_store.add(df, lists)

    def intervals(self, df: pl.DataFrame) -> None:
        self.interval_store.add(df)

    def warn(self, key: str, n: int) -> None:
        self.warnings[key] += int(n)

    def count(self, key: str, n: int) -> None:
        self.counts[key] += int(n)

    def local_type(self, range_name: str, key: str) -> int:
        """A local event type of the per-trace range `range_name` for `key` (e.g. a domain).

        Numbers are local to the report; the merge stage renumbers them trace-wide."""
        r = reg.TYPE_RANGE_BY_NAME[range_name]
        keys = self.type_keys.setdefault(range_name, {})
        for t, k in keys.items():
            if k == key:
                return t
        t = r.type_of_key(key) if r.numeric_keys else r.type_of(len(keys))
        keys[t] = key
        return t

    def reach(self, first: int, last: int) -> None:
        """Records from `first` to `last` that extend no row's lifetime (CPU samples of a
        thread outside its other records): the trace still lasts from the first to the
        last of them."""
        if self.extent is None:
            self.extent = (int(first), int(last))
        else:
            self.extent = (min(self.extent[0], int(first)), max(self.extent[1], int(last)))

    def sync_point(self, name: str, time: int) -> None:
        """A local time that happens at the same moment on every rank (e.g. the end of
        MPI_Init); the earliest one given per name is kept for clock alignment."""
        points = self.meta.setdefault("sync_points", {})
        if name not in points or time < points[name]:
            points[name] = int(time)

    def side_file(self, name: str) -> Path:
        """A file of the partial for data the merge stage needs (e.g. MPI messages)."""
        return self.workdir / name


def report_span(report: Report, kinds: list[str]) -> tuple[int, int]:
    """(first, last) ns over the tables of `kinds` (SQLite aggregates, one scan each)."""
    lo, hi = None, None
    for k in kinds:
        for table in TRANSLATORS[k].tables:
            a, b, _ = base.span(report, table)
            if a is not None:
                lo = a if lo is None else min(lo, a)
            if b is not None:
                hi = b if hi is None else max(hi, b)
    return (lo or 0), (hi if hi is not None else (lo or 0))


def prepare(report: Report, workdir: str | Path, options: PrepareOptions | None = None,
            progress=None) -> dict:
    """Translate one report into a partial trace in `workdir`; returns its metadata."""
    options = options or PrepareOptions()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    warn_if_newer(report.schema, str(report.path))
    present = options.present if options.present is not None else available_kinds(report)
    wanted = present if options.kinds is None else [k for k in present if k in options.kinds]
    report.window = options.window
    ctx = PrepareContext(report, workdir, options, wanted)
    try:
        meta = _prepare(ctx, report, workdir, wanted, progress)
    except BaseException:
        # nothing may go on writing into the partial once the caller sees the error
        with contextlib.suppress(BaseException):
            ctx.feeder.close()
        raise
    ctx.feeder.close()
    return meta


def _prepare(ctx: PrepareContext, report: Report, workdir: Path, wanted: list[str],
             progress) -> dict:
    for name in wanted:
        if progress is not None:
            progress(name)
        TRANSLATORS[name].translate(report, ctx)
    ctx.shared.clear()
    spans = ctx.spans.table()
    lane_spans, moves = tile(ctx.interval_store, ctx.record_store, ctx.rows, ctx.rows.table(),
                             spans, str(workdir / "intervals"))
    del ctx.interval_store
    if lane_spans.height:
        ctx.count("gpu_activities_on_overlap_lanes", moves.height)
        spans = pl.concat([spans, lane_spans.select(spans.columns)], how="vertical")
    if moves.height:
        moves.write_ipc(workdir / MOVES_FILE)
    runs = ctx.record_store.finish()
    meta = _metadata(ctx, wanted, ctx.rows.table(), spans, runs, moves.height > 0)
    (workdir / META_FILE).write_text(json.dumps(meta, sort_keys=True))
    return meta


def _enum_labels(report: Report) -> dict[str, dict[str, str]]:
    """Value labels of the enum-valued types as this export names them (value = id + 1)."""
    out = {}
    for family, (table, prefix) in reg.ENUM_TABLES.items():
        labels = report.enums.labels(table)
        if labels:
            out[family] = {str(i + 1): prefix + lbl for i, lbl in labels.items()}
    return out


def _metadata(ctx: PrepareContext, kinds: list[str], row_table: pl.DataFrame,
              spans: pl.DataFrame, runs: list[Run], has_moves: bool) -> dict:
    report = ctx.report
    rows = row_table.join(spans, on="row", how="left")
    if rows.height:
        first, last = rows["first"].min(), rows["last"].max()
    else:
        first, last = 0, 0
    if ctx.extent is not None and rows.height:
        first, last = min(first, ctx.extent[0]), max(last, ctx.extent[1])
    pids = set(rows["pid"].to_list())
    procs = report.processes.filter(pl.col("pid").is_in(list(pids)))
    proc_names = dict(zip(procs["pid"].to_list(), procs["process_name"].to_list()))
    labels = rows.filter(pl.col("kind") == "cpu").select("pid", "tid").join(
        report.thread_names, on=["pid", "tid"], how="left")
    if "nvtx" in kinds:
        named = nvtx.thread_names(report)
        if named.height:
            labels = labels.join(named.rename({"thread_name": "nvtx_name"}),
                                 on=["pid", "tid"], how="left").with_columns(
                pl.coalesce("nvtx_name", "thread_name").alias("thread_name")).drop("nvtx_name")
    names = {fam: dict(zip(map(str, t["local_id"].to_list()), t["name"].to_list()))
             for fam in ctx.names.families()
             if (t := ctx.names.family_table(fam)).height}
    return {
        "format": PARTIAL_FORMAT,
        "report": report.describe(),
        "kinds": kinds,
        "counts": dict(sorted(ctx.counts.items())),
        "warnings": dict(sorted(ctx.warnings.items())),
        "rows": rows.to_dicts(),
        "processes": {str(p): {"name": proc_names.get(p),
                               "rank": report.process_ranks.get(p)} for p in sorted(pids)},
        "thread_names": {f"{p}:{t}": n for p, t, n in labels.iter_rows() if n},
        "gpus": {str(k): v for k, v in zip(report.gpus["device"].to_list(),
                                             report.gpus["gpu_name"].to_list())},
        "names": names,
        "type_keys": {r: {str(t): k for t, k in keys.items()}
                      for r, keys in sorted(ctx.type_keys.items())},
        "enums": _enum_labels(report),
        "time": {"first": first, "last": last},
        "runs": [Path(r.path).name for r in runs],
        # per run: (local time of the first record, byte offset) of each block (for reading
        # a time window of a run, as the parallel merge does)
        "run_index": [[list(p) for p in r.index] for r in runs],
        "moves": MOVES_FILE if has_moves else None,
        "records": sum(r.records for r in runs),
        "extra": ctx.meta,
        "window": list(ctx.options.window) if ctx.options.window else None,
    }
