"""Merge stage: partial traces of one or more reports -> one `.prv/.pcf/.row`.

Builds the resource model, aligns clocks, numbers every name once for the whole trace, then
k-way merges all partial runs (each shifted to the common clock and renumbered on the fly)
and formats them into the `.prv`. A single report goes through exactly the same path.
"""

from __future__ import annotations

import bisect
import json
import multiprocessing
import os
import shutil
import tempfile
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..errors import InputError
from ..model.resources import ResourceModel, build_model
from ..paraver import pcf as pcf_mod
from ..paraver import prv as prv_mod
from ..paraver import records as R
from ..paraver import registry as reg
from ..paraver import row as row_mod
from ..paraver.kinds import TRANSLATORS
from ..paraver.output import TraceWriter, output_error, write_series_lines
from ..paraver.sorting import merge_block_rows, merge_sorted, read_run
from ..paraver.values import clean_label, global_numbering, labels_of
from .align import Alignment, align
from .budget import Budget, worker_environment
from .budget import plan as budget_plan
from .prepare import META_FILE

# = (time, order, kind, phase, sub, src, rep, ord), packed into four integer columns
MERGE_KEYS = ["time", "ok", "sub", "rso"]


@dataclass
class MergeOptions:
    hosts: list[str | None] | None = None  # host of each report without a recorded one
    compress: bool = False
    sync: str | None = "auto"  # "auto", "MPI_Init", "NCCL", "nvtx:NAME", or None
    sync_by_task: bool = False
    jobs: int = 1  # processes merging time windows of a large trace
    memory: int | None = None  # bytes for all merging processes together (None: default)


@dataclass
class MergeResult:
    output: Path
    model: ResourceModel
    alignment: Alignment
    end_time: int
    bytes_written: int
    counts: dict = field(default_factory=dict)
    warnings: dict = field(default_factory=dict)


def load_partial(directory: str | Path) -> dict:
    meta = json.loads((Path(directory) / META_FILE).read_text())
    meta["_dir"] = str(directory)
    return meta


# -- names and types --------------------------------------------------------------------------

FAMILY_IDS = {name: i for i, name in enumerate(sorted(reg.VALUE_FAMILIES), start=1)}
ROW_FAMILY = 0  # values that are local row ids (stream destination)
VALUE_KEY = 1 << 48  # (family, local value) packed into one integer for renumbering
FORMAT_ROWS = 131_072  # records formatted at a time
# threads formatting .prv blocks; one core stays with the merge itself
FORMAT_THREADS = max(1, min(4, (os.cpu_count() or 2) - 1))


def _family_of_types(dynamic_types: set[int]) -> dict[int, int]:
    """event type -> value family id, for the registered types and the per-trace types in
    use (types of plain numbers are absent)."""
    out = {reg.CUDA_STREAM_DEST: ROW_FAMILY}
    for t in reg.EVENT_TYPES:
        if t.values in reg.VALUE_FAMILIES:
            out[t.type] = FAMILY_IDS[t.values]
    for t in dynamic_types:
        r = reg.type_range_of(t)
        if r is not None and r.values in reg.VALUE_FAMILIES:
            out[t] = FAMILY_IDS[r.values]
    return out


class Dictionary:
    """Trace-wide numbering of names and of per-trace types (NVTX domains, lanes, ...), and
    each report's renumbering."""

    def __init__(self, metas: list[dict]) -> None:
        names: dict[str, set[str]] = {}
        for m in metas:
            for fam, table in m["names"].items():
                names.setdefault(fam, set()).update(table.values())
        self.numbering = {fam: global_numbering(fam, ns) for fam, ns in names.items()}
        keys: dict[str, set[str]] = {}
        for m in metas:
            for r, table in m["type_keys"].items():
                keys.setdefault(r, set()).update(table.values())
        self.type_numbering = {r: _number_keys(reg.TYPE_RANGE_BY_NAME[r], ks)
                               for r, ks in keys.items()}

    def value_map(self, meta: dict) -> pl.DataFrame:
        fams, locs, globs = [], [], []
        for fam, table in meta["names"].items():
            num = self.numbering[fam]
            for local, name in table.items():
                fams.append(FAMILY_IDS[fam])
                locs.append(int(local))
                globs.append(num[name])
        return pl.DataFrame({"fam": fams, "b": locs, "nb": globs},
                            schema={"fam": pl.Int8, "b": pl.Int64, "nb": pl.Int64})

    def type_map(self, meta: dict) -> dict[int, int]:
        """local type -> trace type, for the per-trace types this report uses."""
        return {int(t): self.type_numbering[r][k]
                for r, table in meta["type_keys"].items() for t, k in table.items()}

    def pcf_types(self, metas: list[dict]) -> list[pcf_mod.PcfType]:
        """Registered types of the kinds in the trace, plus each per-trace type in use."""
        kinds = {k for m in metas for k in m["kinds"]}
        labels = {fam: labels_of(fam, num) for fam, num in self.numbering.items()}
        enums = {fam: dict(table) for fam, table in reg.ENUMS.items()}
        for m in metas:
            for fam, table in m.get("enums", {}).items():
                for v, label in table.items():
                    enums.setdefault(fam, {}).setdefault(int(v), label)

        def values_for(family: str | None) -> dict[int, str]:
            if family is None:
                return {}
            if family in enums:
                return {0: "End", **dict(sorted(enums[family].items()))}
            return {0: "End", **labels.get(family, {})}

        out = [pcf_mod.PcfType(t.type, t.label, values_for(t.values), t.precision)
               for t in reg.EVENT_TYPES if t.kinds & kinds]
        for name, numbering in sorted(self.type_numbering.items()):
            r = reg.TYPE_RANGE_BY_NAME[name]
            for key, type_ in sorted(numbering.items(), key=lambda kv: kv[1]):
                label = r.label.format(key=key or "default domain")
                out.append(pcf_mod.PcfType(type_, label, values_for(r.values), r.precision))
        return out


def _number_keys(r: reg.TypeRange, keys: set[str]) -> dict[str, int]:
    """key -> trace type of one type range (see registry.core.TypeRange)."""
    out = {k: r.type_of(off) for k, off in r.fixed.items() if k in keys}
    if r.numeric_keys:
        out.update({k: r.type_of(int(k)) for k in keys if k not in out})
        return out
    used = set(r.fixed.values())
    offset = r.first_free
    for k in sorted(keys - set(out)):
        while offset in used:
            offset += 1
        out[k] = r.type_of(offset)
        used.add(offset)
    return out


# -- per-report transformation ----------------------------------------------------------------

class ReportView:
    """Turns one report's partial records into trace-wide records (time, rows, values).

    Row lookups are array gathers and renumbering is one hash replace per block, so this
    stays cheap next to formatting."""

    def __init__(self, index: int, meta: dict, model: ResourceModel, shift: int,
                 dictionary: Dictionary) -> None:
        self.index = index
        self.meta = meta
        self.shift = shift
        n_local = max((r["row"] for r in meta["rows"]), default=-1) + 1
        look = model.lookup(index, n_local)
        self.lookup = pl.DataFrame({"row": np.arange(n_local, dtype=np.int32), **look})
        # local row -> (order, cpu, task, thread); an extra slot for "no row" (nulls)
        self._cols = {k: pl.Series(k, np.append(look[k], 0)) for k in ("order", "cpu", "task",
                                                                       "thread")}
        self._missing = n_local
        self.types = dictionary.type_map(meta)
        values = dictionary.value_map(meta)
        self._value_old = (values["fam"].cast(pl.Int64) * VALUE_KEY + values["b"])
        self._value_new = values["nb"]
        self._fam_of_type = _family_of_types(set(self.types.values()))
        self.moves = None
        if meta.get("moves"):
            self.moves = pl.concat(list(read_run(Path(meta["_dir"]) / meta["moves"])))

    def _gather(self, name: str, rows: pl.Expr) -> pl.Expr:
        idx = pl.when(rows.is_between(0, self._missing - 1)).then(rows).otherwise(self._missing)
        return pl.lit(self._cols[name]).gather(idx.cast(pl.Int64))

    def _follow_moves(self, df: pl.DataFrame) -> pl.DataFrame:
        """Events of an activity moved to an overlap lane, and arrows to it, follow it."""
        c = pl.col
        mv = self.moves.rename({"row": "moved"})
        df = df.join(mv, on=["src", "ord"], how="left", maintain_order="left")
        arrows = mv.with_columns((c("src") + R.SRC_LAUNCH_OFFSET).cast(pl.Int8))\
            .rename({"moved": "moved_to"})
        df = df.join(arrows, on=["src", "ord"], how="left", maintain_order="left")
        return df.with_columns(
            pl.when((c("kind") == R.EVENT) & c("moved").is_not_null()).then(c("moved"))
            .otherwise(c("row")).alias("row"),
            pl.when((c("kind") == R.COMM) & c("moved_to").is_not_null())
            .then(c("moved_to").cast(pl.Int64)).otherwise(c("b")).alias("b"),
        ).drop("moved", "moved_to")

    def runs(self, rows: int, window: tuple[int, int] | None = None
             ) -> list[Iterator[pl.DataFrame]]:
        """One sorted source per run file of the partial (runs are merged, not chained), in
        blocks of `rows` rows; only the records of a trace-time window [lo, hi) if given."""
        d = Path(self.meta["_dir"])
        out: list[Iterator[pl.DataFrame]] = []
        for k, name in enumerate(self.meta["runs"]):
            if window is None:
                out.append(self.transform(b) for b in read_run(d / name, rows))
                continue
            # batch i holds local times F[i]..F[i+1] (equal times may continue in i+1)
            firsts = self.meta["run_index"][k]
            lo, hi = window[0] - self.shift, window[1] - self.shift
            batches = range(max(0, bisect.bisect_left(firsts, lo) - 1),
                            bisect.bisect_left(firsts, hi))
            out.append(_in_window((self.transform(b) for b in
                                   read_run(d / name, rows, batches)), window))
        return out

    def _renumber(self, type_: pl.Expr, value: pl.Expr) -> pl.Expr:
        """Trace-wide value of a (type, local value) pair of an event."""
        fam = type_.replace_strict(self._fam_of_type, default=None, return_dtype=pl.Int64)
        key = fam * VALUE_KEY + value
        named = key.replace_strict(self._value_old, self._value_new, default=None)
        thread = self._gather("thread", value)
        return (pl.when(fam == ROW_FAMILY).then(pl.when(value.is_not_null()).then(thread))
                .when(fam.is_not_null() & (value != 0)).then(pl.coalesce(named, value))
                .otherwise(value))

    def transform(self, df: pl.DataFrame) -> pl.DataFrame:
        c = pl.col
        s = self.shift
        is_state, is_event, is_comm = (c("kind") == k for k in (R.STATE, R.EVENT, R.COMM))
        if self.types:
            df = df.with_columns(pl.when(is_event).then(c("a").replace(self.types))
                                 .otherwise(c("a")).alias("a"),
                                 pl.when(is_event).then(c("c").replace(self.types))
                                 .otherwise(c("c")).alias("c"))
        if self.moves is not None:
            df = self._follow_moves(df)
        df = df.with_columns(
            (c("time") + s).alias("time"),
            pl.when(is_state | is_comm).then(c("a") + s).otherwise(c("a")).alias("a"),
            pl.when(is_event).then(self._renumber(c("a"), c("b"))).otherwise(c("b")).alias("b"),
            pl.when(is_comm).then(c("c") + s).otherwise(c("c")).alias("c"),
            pl.when(is_comm).then(c("d") + s)
            .when(is_event).then(self._renumber(c("c"), c("d"))).otherwise(c("d")).alias("d"),
            pl.lit(self.index, pl.Int32).alias("rep"),
            self._gather("order", c("row")).alias("order"),
            self._gather("cpu", c("row")).alias("cpu"),
            self._gather("task", c("row")).alias("task"),
            self._gather("thread", c("row")).alias("thread"),
            pl.when(is_comm).then(self._gather("cpu", c("b"))).alias("rcpu"),
            pl.when(is_comm).then(self._gather("task", c("b"))).alias("rtask"),
            pl.when(is_comm).then(self._gather("thread", c("b"))).alias("rthread"))
        return final_schema(df)


@dataclass
class MergeContext:
    """What a translator's merge hook sees: every partial, the model and the clock shifts."""

    metas: list[dict]
    model: ResourceModel
    shifts: list[int]
    views: list[ReportView]
    counts: dict[str, int] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)

    def count(self, key: str, n: int) -> None:
        """A count for the summary (e.g. MPI messages drawn)."""
        if n:
            self.counts[key] = self.counts.get(key, 0) + int(n)

    def warn(self, key: str, n: int) -> None:
        if n:
            self.warnings[key] = self.warnings.get(key, 0) + int(n)

    def side_file(self, report: int, name: str) -> Path:
        return Path(self.metas[report]["_dir"]) / name

    def rows(self, report: int, local_rows: pl.Series) -> pl.DataFrame:
        """order, cpu, task, thread of local row ids of a report (null where unknown)."""
        return pl.DataFrame({"row": local_rows.cast(pl.Int32)}).join(
            self.views[report].lookup, on="row", how="left", maintain_order="left")

    def final(self, df: pl.DataFrame) -> pl.DataFrame:
        """`df` in the trace-wide record layout, sorted by the merge keys."""
        return final_schema(df).sort(MERGE_KEYS, maintain_order=True)


# -- the merge itself -------------------------------------------------------------------------

@dataclass
class _Plan:
    """Everything the merge decides before it reads a record: model, clocks, numbering."""

    metas: list[dict]
    model: ResourceModel
    alignment: Alignment
    dictionary: Dictionary
    views: list[ReportView]
    end_time: int
    mctx: MergeContext
    hooks: list[Iterator[pl.DataFrame]]


def _plan(partials: list[str | Path], options: MergeOptions, quiet: bool = False) -> _Plan:
    metas = [load_partial(p) for p in partials]
    empty = [m for m in metas if not m["rows"]]
    if empty:
        m = empty[0]
        found = ", ".join(m["kinds"]) or "none"
        raise InputError(f"{m['report']['path']}: the export has no data nsys2prv can "
                         f"translate (kinds found: {found})")
    model = build_model(metas, options.hosts)
    alignment = align(metas, model.report_hosts, options.sync, options.sync_by_task,
                      reference=model.tasks[0].report if model.tasks else 0)
    dictionary = Dictionary(metas)
    end_time = 0
    for m, s in zip(metas, alignment.shifts):
        if m["rows"]:
            end_time = max(end_time, m["time"]["last"] + s)
    if end_time >= 2**53 and not quiet:
        warnings.warn(f"the trace spans {end_time} ns (more than 2^53, about 104 days): "
                      "Paraver stores times as doubles and will round them; check the "
                      "timestamps of the inputs", stacklevel=3)
    views = [ReportView(i, m, model, s, dictionary) for i, (m, s) in
             enumerate(zip(metas, alignment.shifts))]
    mctx = MergeContext(metas, model, alignment.shifts, views)
    kinds = {k for m in metas for k in m["kinds"]}
    hooks = [iter(t.merge_records(mctx)) for name, t in TRANSLATORS.items()
             if t.merge_records is not None and name in kinds]
    return _Plan(metas, model, alignment, dictionary, views, end_time, mctx, hooks)


def _sources(plan: _Plan, budget: Budget,
             window: tuple[int, int] | None = None) -> list[Iterator[pl.DataFrame]]:
    """Every sorted record source of the trace (or of one time window of it)."""
    n_runs = sum(len(m["runs"]) for m in plan.metas)
    block_rows = merge_block_rows(n_runs, budget.merge_bytes)
    sources = [run for v in plan.views for run in v.runs(block_rows, window)]
    extra = [_edge_states(plan.model, plan.alignment.shifts, plan.end_time), *plan.hooks]
    if window is not None:
        extra = [_in_window(src, window) for src in extra]
    return sources + extra


def _in_window(blocks: Iterable[pl.DataFrame], window: tuple[int, int]
               ) -> Iterator[pl.DataFrame]:
    """The records of `blocks` with lo <= time < hi (empty blocks are dropped: the merge
    would take an empty buffer for a finished source)."""
    lo, hi = window
    for b in blocks:
        b = b.filter((pl.col("time") >= lo) & (pl.col("time") < hi))
        if b.height:
            yield b


def merge(partials: list[str | Path], output: str | Path, options: MergeOptions | None = None,
          progress=None) -> MergeResult:
    """Write the trace for prepared partials (in rank/input order) to `output`.

    With `options.jobs` > 1 and enough records, the time axis is cut into windows merged and
    formatted by separate processes, then concatenated in order: the bytes are the same."""
    options = options or MergeOptions()
    plan = _plan(partials, options)
    metas, alignment = plan.metas, plan.alignment
    comments = alignment_comments(alignment, len(metas))
    counts: dict[str, int] = {}
    warns: dict[str, int] = {}
    for part_counts, part_warns in [(m["counts"], m["warnings"]) for m in metas] + [
            (plan.mctx.counts, plan.mctx.warnings)]:
        for k, v in part_counts.items():
            counts[k] = counts.get(k, 0) + v
        for k, v in part_warns.items():
            warns[k] = warns.get(k, 0) + v
    application = metas[0]["report"]["name"] if len(metas) == 1 else f"{len(metas)} reports"
    windows = _windows(plan, options.jobs, options.memory)
    with TraceWriter(output, options.compress) as writer:
        writer.write(prv_mod.header(plan.model, plan.end_time, alignment.epoch_of_zero))
        writer.write("".join(f"# {clean_label(c)}\n" for c in comments))
        if len(windows) == 1:
            _write_records(_sources(plan, budget_plan(options.memory, 1, 1)), writer.write_lines,
                           warns, progress, plan.end_time)
        else:
            _write_windows([str(p) for p in partials], options, windows, writer, warns,
                           progress, plan.end_time)
        writer.commit(pcf_mod.render(plan.dictionary.pcf_types(metas)
                                     + [_reports_type(alignment)]),
                      row_mod.render(plan.model, application))
    return MergeResult(writer.prv, plan.model, alignment, plan.end_time, writer.bytes_written,
                       counts, warns)


def _write_records(sources: list[Iterator[pl.DataFrame]], write_lines, warns: dict[str, int],
                   progress, end_time: int) -> None:
    """k-way merge `sources` and write their .prv lines, in order."""
    # Formatting runs in threads beside the merge (polars releases the GIL); blocks are
    # written in submission order, so the output does not depend on the thread count.
    with ThreadPoolExecutor(max_workers=FORMAT_THREADS) as pool:
        pending: deque = deque()
        for slab in merge_sorted(sources, MERGE_KEYS, cut_keys=1):
            # a slab holds up to one block of every run: format it in bounded pieces
            for block in _format_blocks(slab):
                last = block["time"][-1]
                pending.append((pool.submit(prv_mod.format_block, _checked(block, warns)),
                                last))
                while len(pending) > FORMAT_THREADS:
                    _write_formatted(write_lines, pending.popleft(), progress, end_time)
        while pending:
            _write_formatted(write_lines, pending.popleft(), progress, end_time)


# -- merging time windows in parallel ---------------------------------------------------------

WINDOW_RECORDS = 8_000_000  # fewer records per window than this: not worth a process
_FAR = 1 << 62  # beyond any trace time, either way


def _windows(plan: _Plan, jobs: int, memory: int | None) -> list[tuple[int, int]]:
    """Time windows [lo, hi) of about equal record counts, one per process (or one window).

    Cut points come from the run indexes (first time of every record batch), so a window
    never splits the records of one time: multi-event lines stay whole."""
    total = sum(m.get("records", 0) for m in plan.metas)
    n = budget_plan(memory, jobs, total // WINDOW_RECORDS).workers
    if n < 2 or any(len(m.get("run_index") or []) != len(m["runs"]) for m in plan.metas):
        return [(-_FAR, _FAR)]
    firsts = np.sort(np.concatenate(
        [np.asarray(idx, dtype=np.int64) + v.shift
         for v, m in zip(plan.views, plan.metas) for idx in m["run_index"]]
        or [np.zeros(0, np.int64)]))
    cuts = sorted({int(firsts[len(firsts) * k // n]) for k in range(1, n)} - {int(firsts[0])})
    bounds = [-_FAR, *cuts, _FAR]
    return list(zip(bounds[:-1], bounds[1:]))


def _write_windows(partials: list[str], options: MergeOptions, windows: list[tuple[int, int]],
                   writer: TraceWriter, warns: dict[str, int], progress, end_time: int) -> None:
    """Merge each window in its own process into a file next to the output, then append the
    files in order (a window's file is removed as soon as it is copied)."""
    tmp = Path(tempfile.mkdtemp(prefix=".nsys2prv-merge-", dir=writer.directory))
    try:
        ctx = multiprocessing.get_context("spawn")  # forking a polars process can deadlock
        with worker_environment(), ProcessPoolExecutor(max_workers=len(windows),
                                                       mp_context=ctx) as pool:
            futures = [pool.submit(merge_window, partials, options, w, len(windows),
                                   str(tmp / f"window-{i:04d}.txt"))
                       for i, w in enumerate(windows)]
            for i, (future, (_, hi)) in enumerate(zip(futures, windows)):
                try:
                    window_warns = future.result()
                except OSError as e:  # e.g. disk full writing the window's file
                    raise output_error(writer.prv, e) from None
                for k, v in window_warns.items():
                    warns[k] = warns.get(k, 0) + v
                part = tmp / f"window-{i:04d}.txt"
                writer.copy_file(part)
                part.unlink()
                if progress is not None:
                    progress(min(hi, end_time), end_time)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def merge_window(partials: list[str], options: MergeOptions, window: tuple[int, int],
                 n_windows: int, path: str) -> dict[str, int]:
    """The .prv lines of one time window, written to `path` (a worker process's job);
    returns the warnings counted while formatting."""
    plan = _plan(partials, options, quiet=True)
    warns: dict[str, int] = {}
    with open(path, "wb") as fh:
        _write_records(_sources(plan, budget_plan(options.memory, n_windows, n_windows),
                                window),
                       lambda lines: write_series_lines(fh, lines), warns, None, plan.end_time)
    return warns


def _format_blocks(slab: pl.DataFrame) -> Iterator[pl.DataFrame]:
    """Pieces of about FORMAT_ROWS records, cut only between two times: the records of one
    row at one time must meet in one piece to become one multi-event line."""
    times = slab["time"]
    start = 0
    while start < slab.height:
        end = start + FORMAT_ROWS
        if end < slab.height:
            end = int(times.search_sorted(times[end - 1], side="right"))
        yield slab.slice(start, end - start)
        start = end


def _write_formatted(write_lines, item: tuple, progress, end_time: int) -> None:
    future, last = item
    write_lines(future.result())
    if progress is not None:
        progress(last, end_time)


def alignment_comments(alignment: Alignment, n_reports: int) -> list[str]:
    out = [f"nsys2prv trace of {n_reports} report(s)", f"clock alignment: {alignment.method}"]
    if alignment.epoch_of_zero is not None:
        out.append(f"time 0 = UTC epoch {alignment.epoch_of_zero} ns")
    if alignment.residual_ns is not None:
        out.append(f"spread at the sync point after alignment (bounds the residual skew): "
                   f"{alignment.residual_ns} ns")
    if alignment.check_point is not None:
        out.append(f"spread of {alignment.check_point} after alignment: "
                   f"{alignment.check_spread_ns} ns")
    for d in alignment.details:
        out.append(f"report {d['report']} on {d['host']}: offset {d['offset_ns']} ns "
                   f"(sync correction {d['sync_correction_ns']} ns)")
    return out


def _reports_type(alignment: Alignment) -> pcf_mod.PcfType:
    """The reports and their clock offsets, as labels in the .pcf (visible in Paraver)."""
    labels = {}
    for i, d in enumerate(alignment.details, start=1):
        labels[i] = (f"{d['report']} on {d['host']}: offset {d['offset_ns']} ns, sync "
                     f"correction {d['sync_correction_ns']} ns ({alignment.method})")
    return pcf_mod.PcfType(reg.REPORT_INFO, "nsys2prv input report (clock offsets)", labels)


def _checked(block: pl.DataFrame, warns: dict[str, int]) -> pl.DataFrame:
    """Drop records whose fields did not resolve (a bug guard: counted, never silent)."""
    c = pl.col
    bad = c("a").is_null() | c("b").is_null() | c("cpu").is_null() | (
        (c("kind") == R.COMM) & c("rcpu").is_null())
    n = block.select(bad.sum()).item()
    if n:
        warns["records dropped (unresolved fields)"] = warns.get(
            "records dropped (unresolved fields)", 0) + n
        block = block.filter(~bad)
    return block


def _edge_states(model: ResourceModel, shifts: list[int], end_time: int
                 ) -> Iterator[pl.DataFrame]:
    """Head and tail states of every row: Not created (CPU) / Idle (GPU) to the trace ends."""
    rows = []
    for order, r in enumerate(model.rows):
        state = reg.STATE_NOT_CREATED if r.kind == "cpu" else reg.STATE_IDLE
        first, last = r.first + shifts[r.report], r.last + shifts[r.report]
        common = {"order": order, "cpu": r.cpu, "task": model.task_of(r), "thread": r.thread,
                  "rep": r.report, "b": state}
        if first > 0:
            rows.append({"time": 0, "a": first, **common})
        if last < end_time:
            rows.append({"time": last, "a": end_time, **common})
    if rows:
        df = pl.DataFrame(rows).with_columns(pl.lit(R.STATE).alias("kind"),
                                             pl.lit(0).alias("phase"),
                                             pl.lit(R.SRC_STATE).alias("src"),
                                             pl.lit(-1).alias("ord"))
        yield final_schema(df).sort(MERGE_KEYS, maintain_order=True)


FINAL_SCHEMA: dict[str, pl.DataType] = {
    "time": pl.Int64, "order": pl.Int64, "kind": pl.Int8, "phase": pl.Int8, "sub": pl.Int64,
    "src": pl.Int8, "rep": pl.Int32, "ord": pl.Int64, "a": pl.Int64, "b": pl.Int64,
    "c": pl.Int64, "d": pl.Int64, "e": pl.Int64, "f": pl.Int64, "text": pl.Utf8,
    "cpu": pl.Int64, "task": pl.Int64, "thread": pl.Int64, "rcpu": pl.Int64, "rtask": pl.Int64,
    "rthread": pl.Int64,
}


def final_schema(df: pl.DataFrame) -> pl.DataFrame:
    """The trace-wide record layout (same columns and dtypes from every source), with the
    packed merge keys."""
    c = pl.col
    df = df.select([
        (c(n).cast(t) if n in df.columns else pl.lit(0 if n == "sub" else None, t)).alias(n)
        for n, t in FINAL_SCHEMA.items()])
    return df.with_columns(
        (c("order") * 64 + c("kind").cast(pl.Int64) * 8 + c("phase").cast(pl.Int64)).alias("ok"),
        (c("src").cast(pl.Int64) * (1 << 56) + c("rep").cast(pl.Int64) * R.ORD_LIMIT
         + c("ord")).alias("rso"))
