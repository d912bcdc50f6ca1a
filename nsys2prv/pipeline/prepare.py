"""Per-report stage: read one export and write its sorted partial trace to a directory.

The partial (documented in docs/intermediate.md) is what the merge stage needs and nothing
more: sorted record runs in local time with local row ids and local name ids, the row table,
the names each value family uses, counts, warnings and clock facts. A partial depends only on
its own report, so reports can be prepared in any order, in parallel, or on other machines.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..model.rows import RowRegistry, RowSpans
from ..paraver import mapping as M
from ..paraver import records as R
from ..paraver import registry as reg
from ..paraver.sorting import ExternalSorter, write_run
from ..paraver.values import LocalNames
from ..report.report import Report
from ..report.schema import warn_if_newer
from ..sources import KINDS, available_kinds, base, cuda_api, cuda_sync, kernels, memory, nvtx, osrt
from .tiling import tile

PARTIAL_FORMAT = 1
META_FILE = "partial.json"
MOVES_FILE = "moves.arrow"  # (src, ord, row): activities moved to an overlap lane row


@dataclass
class PrepareOptions:
    """What to read and how much to hold in memory."""

    kinds: list[str] | None = None  # None: every kind present
    chunk_rows: int = base.DEFAULT_CHUNK_ROWS
    spill_rows: int = 4_000_000


class ReportSink:
    """Collects one report's records, state intervals, rows, names and counters."""

    def __init__(self, report: Report, workdir: Path, options: PrepareOptions,
                 report_end: int) -> None:
        self.rows = RowRegistry()
        self.spans = RowSpans()
        self.names = LocalNames(report.strings)
        self.report_end = report_end
        self.counts: Counter[str] = Counter()
        self.warnings: Counter[str] = Counter()
        self.min_time: int | None = None
        self.max_time: int | None = None
        self.record_sorter = ExternalSorter(R.SORT_KEYS, workdir, "records",
                                            max_rows=options.spill_rows)
        self.interval_sorter = ExternalSorter(R.INTERVAL_KEYS, workdir, "intervals",
                                              max_rows=options.spill_rows)

    def records(self, df: pl.DataFrame) -> None:
        self.record_sorter.add(df)

    def intervals(self, df: pl.DataFrame) -> None:
        self.interval_sorter.add(df)

    def warn(self, key: str, n: int) -> None:
        self.warnings[key] += int(n)

    def count(self, key: str, n: int) -> None:
        self.counts[key] += int(n)


def report_span(report: Report, kinds: list[str]) -> tuple[int, int]:
    """(first, last) ns over the tables of `kinds` (SQLite aggregates, one scan each)."""
    lo, hi = None, None
    for k in kinds:
        a, b, _ = base.span(report, KINDS[k].table)
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
    present = available_kinds(report)
    wanted = present if options.kinds is None else [k for k in present if k in options.kinds]
    _, end = report_span(report, wanted)
    sink = ReportSink(report, workdir, options, end)
    chunk = options.chunk_rows

    def step(label: str) -> None:
        if progress is not None:
            progress(label)

    correlations: list[pl.DataFrame] = []
    if "cuda_api" in wanted:
        step("CUDA API")
        classifier = M.CallClassifier(sink.names)
        for df in cuda_api.read(report, chunk):
            M.map_cuda_api(df, sink, classifier, correlations)
    index = M.correlation_index(correlations)
    del correlations
    if "kernels" in wanted:
        step("kernels")
        nccl = M.NcclNames(sink.names)
        for df in kernels.read(report, chunk):
            M.map_kernels(df, sink, nccl, index)
    if "memcpy" in wanted:
        step("memcpy")
        for df in memory.read_memcpy(report, chunk):
            M.map_memory(df, sink, index, memset=False)
    if "memset" in wanted:
        step("memset")
        for df in memory.read_memset(report, chunk):
            M.map_memory(df, sink, index, memset=True)
    if "cuda_sync" in wanted:
        step("CUDA synchronization")
        for df in cuda_sync.read(report, chunk):
            M.map_cuda_sync(df, sink, index)
    del index
    nvtx_ctx = None
    if "nvtx" in wanted:
        step("NVTX")
        nvtx_ctx = M.NvtxContext(nvtx.domains(report), nvtx.categories(report),
                                 nvtx.event_type_ids(report))
        for df in nvtx.read(report, chunk):
            M.map_nvtx(df, sink, nvtx_ctx)
        M.finish_nvtx_start_end(sink, nvtx_ctx)
    if "osrt" in wanted:
        step("OS runtime")
        for df in osrt.read(report, chunk):
            M.map_osrt(df, sink)
    step("states")
    spans = sink.spans.table()
    states, lane_spans, moves = tile(sink.interval_sorter.sorted_blocks(cut_keys=2), sink.rows,
                                     sink.rows.table(), spans)
    _emit_states(sink, states)
    sink.interval_sorter.cleanup()
    if lane_spans.height:
        sink.count("gpu_activities_on_overlap_lanes", moves.height)
        spans = pl.concat([spans, lane_spans.select(spans.columns)], how="vertical")
    if moves.height:
        write_run(moves, workdir / MOVES_FILE, 1 << 20)
    runs = sink.record_sorter.finish_runs()
    row_table = sink.rows.table()
    meta = _metadata(report, wanted, sink, row_table, spans, runs, nvtx_ctx, moves.height > 0)
    (workdir / META_FILE).write_text(json.dumps(meta, sort_keys=True))
    return meta


def _emit_states(sink: ReportSink, df: pl.DataFrame) -> None:
    df = df.filter(pl.col("time") < pl.col("a"))
    if df.height == 0:
        return
    sink.records(R.conform(df.with_columns(
        pl.lit(R.STATE).alias("kind"), pl.lit(0).alias("phase"),
        pl.lit(R.SRC_STATE).alias("src"))))


def _enum_labels(report: Report) -> dict[str, dict[str, str]]:
    """Value labels of the enum-valued types as this export names them (value = id + 1)."""
    out = {}
    for family, tables in reg.ENUM_TABLES.items():
        for table in tables:
            labels = report.enums.labels(table)
            if labels:
                prefix = "memcpy " if family == "memory_operation" else ""
                out[family] = {str(i + 1): prefix + lbl for i, lbl in labels.items()}
                break
    return out


def _metadata(report: Report, kinds: list[str], sink: ReportSink, row_table: pl.DataFrame,
              spans: pl.DataFrame, runs: list[Path], nvtx_ctx, has_moves: bool) -> dict:
    rows = row_table.join(spans, on="row", how="left")
    if rows.height:
        first, last = rows["first"].min(), rows["last"].max()
    else:
        first, last = 0, 0
    pids = set(rows["pid"].to_list())
    procs = report.processes.filter(pl.col("pid").is_in(list(pids)))
    proc_names = dict(zip(procs["pid"].to_list(), procs["process_name"].to_list()))
    tnames = report.thread_names
    nvtx_names = nvtx.thread_names(report) if "nvtx" in kinds else None
    cpu = rows.filter(pl.col("kind") == "cpu").select("pid", "tid")
    labels = cpu.join(tnames, on=["pid", "tid"], how="left")
    if nvtx_names is not None and nvtx_names.height:
        labels = labels.join(nvtx_names.rename({"thread_name": "nvtx_name"}), on=["pid", "tid"],
                             how="left").with_columns(
            pl.coalesce("nvtx_name", "thread_name").alias("thread_name")).drop("nvtx_name")
    thread_names = {f"{p}:{t}": n for p, t, n in labels.iter_rows() if n}
    gpus = dict(zip(report.gpus["device"].to_list(), report.gpus["gpu_name"].to_list()))
    names = {fam: dict(zip(map(str, t["local_id"].to_list()), t["name"].to_list()))
             for fam in sink.names.families()
             if (t := sink.names.family_table(fam)).height}
    return {
        "format": PARTIAL_FORMAT,
        "report": report.describe(),
        "kinds": kinds,
        "counts": dict(sorted(sink.counts.items())),
        "warnings": dict(sorted(sink.warnings.items())),
        "rows": rows.to_dicts(),
        "processes": {str(p): {"name": proc_names.get(p),
                               "rank": report.process_ranks.get(p)} for p in sorted(pids)},
        "thread_names": thread_names,
        "gpus": {str(k): v for k, v in gpus.items()},
        "names": names,
        "type_keys": {"nvtx_pushpop": {str(t): d for t, d in
                                       (nvtx_ctx.type_keys().items() if nvtx_ctx else [])}},
        "enums": _enum_labels(report),
        "nvtx_lanes": nvtx_ctx.lanes if nvtx_ctx else 0,
        "time": {"first": first, "last": last},
        "runs": [p.name for p in runs],
        "moves": MOVES_FILE if has_moves else None,
        "records": sink.record_sorter.rows,
    }
