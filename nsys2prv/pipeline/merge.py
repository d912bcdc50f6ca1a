"""Merge stage: partial traces of one or more reports -> one `.prv/.pcf/.row`.

Builds the resource model, aligns clocks, numbers every name once for the whole trace, then
k-way merges all partial runs (each shifted to the common clock and renumbered on the fly)
and formats them into the `.prv`. A single report goes through exactly the same path.
"""

from __future__ import annotations

import bisect
import json
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl

from .. import engine
from ..errors import InputError
from ..lifeline import signals_held
from ..model.resources import ResourceModel, build_model, combine_models
from ..paraver import pcf as pcf_mod
from ..paraver import prv as prv_mod
from ..paraver import records as R
from ..paraver import registry as reg
from ..paraver import row as row_mod
from ..paraver.kinds import TRANSLATORS
from ..paraver.output import TraceWriter, output_error, trace_paths
from ..paraver.writeid import mark
from ..paraver.values import (REPORT_INFO_LABEL, ValuesLike, clean_label, global_numbering,
                               labels_of)
from ..supervise import register_temp
from .align import Alignment, align
from .budget import worker_environment
from .descriptors import run_pool_size
from .budget import plan as budget_plan
from .facts import Facts, nvtx_ranges
from .prepare import META_FILE, PARTIAL_FORMAT
from .window import (CutStream, Filter, NvtxFilter, TimeFilter, WindowMoved, attribute_types,
                     resolve, stacked_types)

# = (time, order, kind, phase, sub, src, rep, ord), packed into four integer columns
MERGE_KEYS = ["time", "ok", "sub", "rso"]


@dataclass
class MergeOptions:
    """How partial traces are merged into one trace (the merge stage's options)."""

    hosts: list[str | None] | None = None  # host of each report without a recorded one
    compress: bool = False
    sync: str | None = "auto"  # "auto", "MPI_Init", "NCCL", "nvtx:NAME", or None
    sync_by_task: bool = False
    jobs: int = 1  # processes merging time windows of a large trace
    memory: int | None = None  # bytes for all merging processes together (None: default)
    # a window of the run: [from, to) in the trace's time (to None: the trace's end); the
    # trace written starts at 0 at `from` (see cut_stream)
    window: tuple[int, int | None] | None = None
    # the clocks, when known before the merge
    alignment: Alignment | None = None
    # a window asked for (`--filter-time`, `--filter-nvtx`), resolved on the aligned clocks;
    # `facts` (per report, from the whole reports) give the sync points a windowed partial
    # may lack and the NVTX ranges; `allow_empty` writes a trace for a window outside the run
    filter: Filter | None = None
    facts: list[Facts] | None = None
    allow_empty: bool = False
    # number names as this trace did (`--values-like`; values.read_values_like)
    values_like: ValuesLike | None = None


@dataclass
class MergeResult:
    """What a merge wrote: the trace, its resource model and clock alignment."""

    output: Path
    model: ResourceModel
    alignment: Alignment
    end_time: int
    bytes_written: int
    counts: dict = field(default_factory=dict)
    warnings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the summary should say (windows)
    alignments: list[Alignment] = field(default_factory=list)  # of each run (applications)


def load_partial(directory: str | Path) -> dict:
    meta = json.loads((Path(directory) / META_FILE).read_text())
    if meta.get("format") != PARTIAL_FORMAT:
        raise InputError(f"{directory}: a partial trace of another nsys2prv version (format "
                         f"{meta.get('format')}, this one reads {PARTIAL_FORMAT}): prepare it "
                         "again")
    meta["_dir"] = str(directory)
    return meta


# -- names and types --------------------------------------------------------------------------

FAMILY_IDS = {name: i for i, name in enumerate(sorted(reg.VALUE_FAMILIES), start=1)}
ROW_FAMILY = 0  # values that are local row ids (stream destination)
VALUE_KEY = 1 << 48  # (family, local value) packed into one integer for renumbering
BLOCK_BYTES = 8 << 20  # .prv text the engine formats at a time


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
    each report's renumbering; `like` reuses another trace's numbers (values.ValuesLike)."""

    def __init__(self, metas: list[dict], like: ValuesLike | None = None) -> None:
        names: dict[str, set[str]] = {}
        for m in metas:
            for fam, table in m["names"].items():
                names.setdefault(fam, set()).update(table.values())
        self.numbering = {fam: global_numbering(fam, ns, like.values.get(fam) if like else None)
                          for fam, ns in names.items()}
        keys: dict[str, set[str]] = {}
        for m in metas:
            for r, table in m["type_keys"].items():
                keys.setdefault(r, set()).update(table.values())
        self.type_numbering = {r: _number_keys(reg.TYPE_RANGE_BY_NAME[r], ks,
                                               like.types.get(r) if like else None)
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


def _number_keys(r: reg.TypeRange, keys: set[str], like: dict[str, int] | None = None
                 ) -> dict[str, int]:
    """key -> trace type of one type range (see registry.core.TypeRange); `like` (type label
    -> type of another trace) gives the types of the keys it has."""
    out = {k: r.type_of(off) for k, off in r.fixed.items() if k in keys}
    if r.numeric_keys:
        out.update({k: r.type_of_key(k) for k in keys if k not in out})
        return out
    used = set(r.fixed.values())
    offset = r.first_free
    if like:
        for k in sorted(keys - set(out)):
            off = like.get(clean_label(r.label.format(key=k or "default domain")), -1) - r.base
            if 0 <= off < r.size and off not in used:
                out[k] = r.type_of(off)
                used.add(off)
        offset = max([offset, *(t - r.base + 1 for t in like.values()
                                if 0 <= t - r.base < r.size)])
    for k in sorted(keys - set(out)):
        while offset in used:
            offset += 1
        out[k] = r.type_of(offset)
        used.add(offset)
    return out


# -- per-report transformation ----------------------------------------------------------------

class ReportView:
    """How one report's partial records become trace-wide ones: its clock shift, where its
    local rows are in the trace, and the renumbering of its names and per-trace types (the
    engine applies it to every record)."""

    def __init__(self, index: int, meta: dict, model: ResourceModel, shift: int,
                 dictionary: Dictionary) -> None:
        self.index = index
        self.meta = meta
        self.shift = shift
        n_local = max((r["row"] for r in meta["rows"]), default=-1) + 1
        look = model.lookup(index, n_local)
        self.lookup = pl.DataFrame({"row": np.arange(n_local, dtype=np.int32), **look})
        # local row -> (order, cpu, task, thread); an extra slot for "no row" (zeros)
        self._cols = {k: np.append(look[k], 0).astype(np.int64)
                      for k in ("order", "cpu", "task", "thread")}
        self.types = dictionary.type_map(meta)
        self._values = dictionary.value_map(meta)
        self._fam_of_type = _family_of_types(set(self.types.values()))
        self.moves = None
        if meta.get("moves"):
            self.moves = pl.read_ipc(Path(meta["_dir"]) / meta["moves"])

    def engine_map(self) -> tuple:
        """The report's mapping in the engine's form (see engine.Merger)."""
        def pairs(d: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
            return (np.fromiter(d.keys(), np.int64, len(d)),
                    np.fromiter(d.values(), np.int64, len(d)))

        v = self._values
        value_keys = (v["fam"].cast(pl.Int64) * VALUE_KEY + v["b"]).to_numpy()
        if self.moves is not None and self.moves.height:
            m = self.moves
            move_keys = (m["src"].cast(pl.Int64) * (1 << 48) + m["ord"]).to_numpy()
            move_rows = m["row"].cast(pl.Int64).to_numpy()
        else:
            move_keys = move_rows = np.zeros(0, np.int64)
        c = self._cols
        return (int(self.shift), c["order"], c["cpu"], c["task"], c["thread"],
                *pairs(self.types), *pairs(self._fam_of_type),
                np.ascontiguousarray(value_keys, np.int64),
                np.ascontiguousarray(v["nb"].to_numpy(), np.int64),
                np.ascontiguousarray(move_keys, np.int64),
                np.ascontiguousarray(move_rows, np.int64),
                sum(1 << s for s in R.TEXT_NAME_SRCS))

    def runs(self, window: tuple[int, int] | None = None) -> list[tuple[str, int, int, int]]:
        """(path, report, start offset, end offset or -1) of each run file, limited to the
        blocks that can hold records of a trace-time window [lo, hi) if given."""
        d = Path(self.meta["_dir"])
        out = []
        for k, name in enumerate(self.meta["runs"]):
            path = str(d / name)
            if window is None:
                out.append((path, self.index, 0, -1))
                continue
            index = self.meta["run_index"][k]
            firsts = [t for t, _ in index]
            lo, hi = window[0] - self.shift, window[1] - self.shift
            # block i holds local times F[i]..F[i+1] (equal times may continue in i+1)
            first = max(0, bisect.bisect_left(firsts, lo) - 1)
            last = bisect.bisect_left(firsts, hi)
            if last <= first:
                continue
            end = index[last][1] if last < len(index) else -1
            out.append((path, self.index, index[first][1], end))
        return out


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


def _load(partials: list[str | Path], facts: list[Facts] | None) -> list[dict]:
    """The partials' metadata, with the sync points of the whole reports when a window was
    read; a report with nothing to translate is an error."""
    metas = [load_partial(p) for p in partials]
    for m, f in zip(metas, facts or []):
        m.setdefault("extra", {})["sync_points"] = dict(f.sync_points)
    empty = [m for m in metas if not m["rows"]]
    if empty:
        m = empty[0]
        found = ", ".join(m["kinds"]) or "none"
        raise InputError(f"{m['report']['path']}: the export has no data nsys2prv can "
                         f"translate (kinds found: {found})")
    return metas


def _clocks(metas: list[dict], model: ResourceModel, options: MergeOptions,
            quiet: bool = False, stacklevel: int = 4) -> tuple[Alignment, int]:
    """The reports' clock alignment and the end of their trace."""
    alignment = options.alignment or align(
        metas, model.report_hosts, options.sync, options.sync_by_task,
        reference=model.tasks[0].report if model.tasks else 0)
    end_time = 0
    for m, s in zip(metas, alignment.shifts):
        if m["rows"]:
            end_time = max(end_time, m["time"]["last"] + s)
    if end_time >= 2**53 and not quiet:
        warnings.warn(f"the trace spans {end_time} ns (more than 2^53, about 104 days): "
                      "Paraver stores times as doubles and will round them; check the "
                      "timestamps of the inputs", stacklevel=stacklevel)
    return alignment, end_time


def _hooks(metas: list[dict], model: ResourceModel, shifts: list[int],
           views: list[ReportView]) -> tuple[MergeContext, list[Iterator[pl.DataFrame]]]:
    """The merge records of the kinds that need every report at once (MPI messages)."""
    mctx = MergeContext(metas, model, shifts, views)
    kinds = {k for m in metas for k in m["kinds"]}
    translators = [TRANSLATORS[name] for name in TRANSLATORS if name in kinds]
    return mctx, [iter(t.merge_records(mctx)) for t in translators
                  if t.merge_records is not None]


def _plan(partials: list[str | Path], options: MergeOptions, quiet: bool = False) -> _Plan:
    metas = _load(partials, options.facts)
    model = build_model(metas, options.hosts)
    alignment, end_time = _clocks(metas, model, options, quiet)
    dictionary = Dictionary(metas, options.values_like)
    views = [ReportView(i, m, model, s, dictionary) for i, (m, s) in
             enumerate(zip(metas, alignment.shifts))]
    mctx, hooks = _hooks(metas, model, alignment.shifts, views)
    return _Plan(metas, model, alignment, dictionary, views, end_time, mctx, hooks)


MEMORY_COLUMNS = ("time", "order", "kind", "phase", "sub", "src", "rep", "ord", "a", "b", "c",
                  "d", "e", "f", "cpu", "task", "thread", "rcpu", "rtask", "rthread")


def _memory_source(frames: Iterable[pl.DataFrame]) -> tuple | None:
    """Trace-wide records (FINAL_SCHEMA, sorted by MERGE_KEYS) as an engine source."""
    parts = [f for f in frames if f.height]
    if not parts:
        return None
    df = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
    offsets, data = engine.text_buffers(df["text"])
    return ([engine.int64_column(df[c]) for c in MEMORY_COLUMNS], offsets, data)


def _merger(plan: _Plan, window: tuple[int, int] | None = None) -> engine.Merger:
    """The engine merging every record source of the trace (or of one time window of it):
    the run files of every report, then the edge states, then each kind's merge records."""
    runs = [run for v in plan.views for run in v.runs(window)]
    memory = [m for m in (_memory_source(src) for src in
                          [_edge_states(plan.model, plan.alignment.shifts, plan.end_time),
                           *plan.hooks]) if m is not None]
    lo, hi = window if window is not None else (-_FAR, _FAR)
    return engine.Merger(runs, [v.engine_map() for v in plan.views], memory, lo, hi,
                         run_pool_size(len(runs)))


@dataclass
class _Job:
    """What a merge writes, decided before any record is: the plan, the trace's header
    and comments, its end, the time windows merged apart, and the summary."""

    plan: _Plan
    options: MergeOptions
    header: str
    counts: dict[str, int]
    warns: dict[str, int]
    notes: list[str]
    end_time: int
    windows: list[tuple[int, int]]
    application: str

    def pcf_text(self) -> str:
        return pcf_mod.render(self.plan.dictionary.pcf_types(self.plan.metas)
                              + [_reports_type(self.plan.alignment)])

    def row_text(self) -> str:
        return row_mod.render(self.plan.model, self.application)

    def cut(self, write) -> CutStream:
        """What keeps only the window's lines of the merged text (`options.window` set),
        handing them to `write`."""
        rows = [0]
        for t in self.plan.model.tasks:
            rows.append(rows[-1] + len(t.rows))
        lo = self.options.window[0]
        return CutStream(rows, (lo, lo + self.end_time), write)


def _job(partials: list[str | Path], options: MergeOptions) -> _Job:
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
    end_time, epoch = plan.end_time, alignment.epoch_of_zero
    notes: list[str] = []
    if options.filter is not None:
        options.window, notes = _resolve_window(metas, alignment, plan.end_time, options)
        # what a window's reading cannot match (the launching call or the NCCL call before the
        # window) says nothing about the data: left out of the summary
        counts = {k: v for k, v in counts.items() if "without a matching" not in k
                  and "without a CUDA call" not in k}
        notes.append(WINDOW_COUNTS_NOTE)
    if options.window is not None:
        lo, hi = options.window
        hi = plan.end_time if hi is None else min(hi, plan.end_time)
        end_time = max(0, hi - lo)
        epoch = None if epoch is None else epoch + lo
        comments = [c if not c.startswith("time 0 = UTC epoch") else
                    f"time 0 = UTC epoch {epoch} ns" for c in comments]
        comments.append(f"window: [{lo}, {hi}) ns of the whole trace's time; add {lo} ns to "
                        "a time of this trace to get the whole trace's")
        windows = [(-_FAR, _FAR)]  # one stream through the cut
    header = (prv_mod.header(plan.model, end_time, epoch)
              + "".join(f"# {clean_label(c)}\n" for c in comments))
    return _Job(plan, options, header, counts, warns, notes, end_time, windows, application)


def _emit_records(job: _Job, write, progress=None, writer: TraceWriter | None = None,
                  partials: list[str] | None = None) -> None:
    """The .prv lines after the header, in order, to `write` (the windows of a trace merged
    in several processes need the `writer`'s directory and the `partials`)."""
    plan, options = job.plan, job.options
    if options.window is not None:
        cut = job.cut(write)
        _write_records(_merger(plan), cut.feed, job.warns, progress, plan.end_time)
        cut.close()
    elif len(job.windows) == 1:
        _write_records(_merger(plan), write, job.warns, progress, plan.end_time)
    else:
        _write_windows(plan, partials or [], options, job.windows, writer, job.warns, progress,
                       plan.end_time)


def merge(partials: list[str | Path], output: str | Path, options: MergeOptions | None = None,
          progress=None) -> MergeResult:
    """Write the trace for prepared partials (in rank/input order) to `output`.

    With `options.jobs` > 1 and enough records, the time axis is cut into windows merged and
    formatted by separate processes, then concatenated in order: the bytes are the same."""
    options = options or MergeOptions()
    job = _job(partials, options)
    with TraceWriter(output, options.compress) as writer:
        writer.begin(job.header, job.pcf_text(), job.row_text())
        _emit_records(job, writer.write_bytes, progress, writer, [str(p) for p in partials])
        writer.commit()
    return MergeResult(writer.prv, job.plan.model, job.plan.alignment, job.end_time,
                       writer.bytes_written, job.counts, job.warns, job.notes)


class TraceStream:
    """A trace that is never written: its `.pcf` and `.row` are written at `path` (as the
    trace's would be), its `.prv` text is merged again from the partials on every
    `blocks()`. What an analysis of reports reads instead of a temporary trace: writing
    the text and reading it back cost as much CPU time as merging it (the copies into and
    out of the page cache), and the disk space of a whole trace."""

    def __init__(self, partials: list[str | Path], path: Path, options: MergeOptions) -> None:
        self.partials = [str(p) for p in partials]
        self.path = path
        self._options = replace(options)  # as given: the job is planned again after pickling
        self.job = self._planned()
        self.header = self.job.header

    @property
    def facts(self) -> list[Facts] | None:
        """The facts of the whole reports a window was prepared with (None: no window)."""
        return self._options.facts

    def __getstate__(self) -> dict:
        """Pickled without its plan (another process plans it again from the partials)."""
        return {k: v for k, v in self.__dict__.items() if k != "job"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.job = self._planned()

    def _planned(self) -> _Job:
        job = _job(self.partials, replace(self._options))
        # the merge hooks' records (MPI messages, ...) are made once: kept for every read
        job.plan.hooks = [list(h) for h in job.plan.hooks]
        return job

    def blocks(self) -> Iterator[bytes | memoryview]:
        """The .prv text (header first) in blocks of whole lines, merged as they are asked
        for; a block is valid until the next one is asked for (read it, do not keep it)."""
        yield self.header.encode("utf-8")
        job = self.job
        merger = _merger(job.plan)
        if job.options.window is None:
            while (block := merger.next(BLOCK_BYTES)) is not None:
                yield block
        else:  # only the window's lines, as `merge` writes them
            held: list = []
            cut = job.cut(held.append)
            while (block := merger.next(BLOCK_BYTES)) is not None:
                cut.feed(block)
                yield from held
                held.clear()
            cut.close()
            yield from held
        self._count_dropped(merger)

    @property
    def scannable(self) -> bool:
        """Whether `scan_blocks` can read it: a stream without a window (a window's text
        is cut out of the merged text, so it is read as text)."""
        return self.job.options.window is None

    def scan_blocks(self, scanner, records: int) -> Iterator[None]:
        """Fill `scanner` (a reading `PrvScanner`) with what scanning `blocks()` would give
        it (the header, then the columns of every record), the records going straight from
        the merge into its columns, never formatted as text: about `records` at a time (whole
        times). Yields after each of these blocks but the last (take its columns there)."""
        if not self.scannable:
            raise ValueError(f"{self.path}: a stream of a window is read as text (blocks())")
        scanner.feed(self.header.encode("utf-8"))
        merger = _merger(self.job.plan)
        while merger.scan(scanner, records) and not merger.done:
            yield
        self._count_dropped(merger)

    def _count_dropped(self, merger: engine.Merger) -> None:
        if merger.dropped:  # a bug guard, as `merge` has it: counted, never silent
            self.job.warns[DROPPED] = self.job.warns.get(DROPPED, 0) + merger.dropped
            warnings.warn(f"{self.path}: {merger.dropped} {DROPPED}", RuntimeWarning,
                          stacklevel=3)


def stream(partials: list[str | Path], path: str | Path,
           options: MergeOptions | None = None) -> TraceStream:
    """The trace of prepared partials as a `TraceStream` (its .pcf and .row written at
    `path`): what `merge` would write, read without writing it. The partials must stay
    until the stream is no longer read."""
    options = replace(options or MergeOptions(), jobs=1, compress=False)
    path = Path(path)
    trace = TraceStream(partials, path, options)
    _, pcf, row = trace_paths(path)
    # the header, .pcf and .row that `merge` would write, write id included
    trace.header, pcf_text, row_text = mark(trace.header, trace.job.pcf_text(),
                                            trace.job.row_text())
    pcf.write_text(pcf_text, encoding="utf-8")
    row.write_text(row_text, encoding="utf-8")
    return trace


# -- a trace of several runs ------------------------------------------------------------------

@dataclass
class Application:
    """One run of a trace of several (`merge_applications`): its partials (in rank/input
    order), its label ('before') and, for a window, the facts of its whole reports."""

    partials: list[str | Path]
    label: str
    facts: list[Facts] | None = None


class ApplicationWindowMoved(WindowMoved):
    """`WindowMoved` for the reports of one application (index into the applications)."""

    def __init__(self, application: int, local: list[tuple[int, int] | None]) -> None:
        super().__init__(local)
        self.application = application


@dataclass
class _Run:
    """One application's reports: what its own trace would be, and where it goes."""

    metas: list[dict]
    model: ResourceModel
    alignment: Alignment
    end_time: int
    window: tuple[int, int] | None = None  # [lo, hi) of its own trace's time
    notes: list[str] = field(default_factory=list)
    mctx: MergeContext | None = None  # what its merge hooks counted

    @property
    def length(self) -> int:
        """Its time in the trace: its window, or its whole run."""
        if self.window is None:
            return self.end_time
        lo, hi = self.window
        return max(0, min(hi, self.end_time) - lo)


def merge_applications(applications: list[Application], output: str | Path,
                       options: MergeOptions | None = None, progress=None) -> MergeResult:
    """Write ONE trace of several runs, application k = run k: each run's rows exactly as its
    own trace (`merge` of its partials alone: its clocks, its window resolved on it, starting
    at 0 at its window's start), all numbered by one dictionary (the same name has the same
    value in every application). The trace ends where the longest run ends. A window of the
    options (`filter`) is resolved on every run separately (`ApplicationWindowMoved` when a
    run's reports must be read again for it)."""
    options = replace(options or MergeOptions(), alignment=None)  # each run has its own
    runs: list[_Run] = []
    for k, app in enumerate(applications):
        metas = _load(app.partials, app.facts)
        model = build_model(metas)
        run = _Run(metas, model, *_clocks(metas, model, options))
        if options.filter is not None:
            try:
                (lo, hi), run.notes = _resolve_window(metas, run.alignment, run.end_time,
                                                      replace(options, facts=app.facts))
            except WindowMoved as moved:
                raise ApplicationWindowMoved(k, moved.local) from None
            except InputError as e:
                raise InputError(f"{app.label}: {e}") from None
            run.window = (lo, run.end_time if hi is None else hi)
        runs.append(run)
    labels = [a.label for a in applications]
    names = [r.metas[0]["report"]["name"] if len(r.metas) == 1 else f"{len(r.metas)} reports"
             for r in runs]
    model = combine_models([r.model for r in runs], labels, names)
    all_metas = [m for r in runs for m in r.metas]
    dictionary = Dictionary(all_metas, options.values_like)
    # every run's window starts at `origin` on the merged clock (no time is negative)
    origin = max((r.window[0] for r in runs if r.window is not None), default=0)
    shifts: list[int] = []
    ends: list[int] = []
    views: list[ReportView] = []
    hooks: list[Iterator[pl.DataFrame]] = []
    counts: dict[str, int] = {}
    warns: dict[str, int] = {}
    for r in runs:
        move = origin - r.window[0] if r.window is not None else 0
        first = len(shifts)
        run_views = [ReportView(first + i, m, model, s + move, dictionary)
                     for i, (m, s) in enumerate(zip(r.metas, r.alignment.shifts))]
        shifts += [s + move for s in r.alignment.shifts]
        ends += [r.end_time + move] * len(r.metas)
        mctx, run_hooks = _hooks(r.metas, model, shifts[first:], run_views)
        views += run_views
        hooks += run_hooks
        r.mctx = mctx
    end_time = max(r.length for r in runs)
    windowed = options.filter is not None
    with TraceWriter(output, options.compress) as writer:
        first_epoch = runs[0].alignment.epoch_of_zero
        if first_epoch is not None and runs[0].window is not None:
            first_epoch += runs[0].window[0]
        reports = pcf_mod.PcfType(reg.REPORT_INFO, REPORT_INFO_LABEL, {
            i: f"{label}: {text}" for i, (label, text) in enumerate(
                ((a.label, t) for a, r in zip(applications, runs)
                 for t in _reports_type(r.alignment).values.values()), start=1)})
        writer.begin(prv_mod.header(model, end_time, first_epoch)
                     + "".join(f"# {clean_label(c)}\n" for c in
                               _applications_comments(runs, labels)),
                     pcf_mod.render(dictionary.pcf_types(all_metas) + [reports]),
                     row_mod.render(model, ""))
        memory = [m for m in (_memory_source(src) for src in
                              [_edge_states(model, shifts, max(ends), ends), *hooks])
                  if m is not None]
        runs_files = [f for v in views for f in v.runs()]
        merger = engine.Merger(runs_files, [v.engine_map() for v in views], memory, -_FAR,
                               _FAR, run_pool_size(len(runs_files)))
        if windowed:
            cut = _ApplicationsCut(model, origin, [origin + r.length for r in runs],
                                   writer.write_bytes)
            _write_records(merger, cut.feed, warns, progress, origin + end_time)
            cut.close()
        else:
            _write_records(merger, writer.write_bytes, warns, progress, end_time)
        writer.commit()
    notes: list[str] = []
    for r in runs:
        assert r.mctx is not None
        for part_counts, part_warns in [(m["counts"], m["warnings"]) for m in r.metas] + [
                (r.mctx.counts, r.mctx.warnings)]:
            for k, v in part_counts.items():
                counts[k] = counts.get(k, 0) + v
            for k, v in part_warns.items():
                warns[k] = warns.get(k, 0) + v
        notes += [n for n in r.notes if n not in notes]
    if windowed:
        counts = {k: v for k, v in counts.items() if "without a matching" not in k
                  and "without a CUDA call" not in k}
        notes.append(WINDOW_COUNTS_NOTE)
    return MergeResult(writer.prv, model, runs[0].alignment, end_time, writer.bytes_written,
                       counts, warns, notes, [r.alignment for r in runs])


def _applications_comments(runs: list[_Run], labels: list[str]) -> list[str]:
    """The header comments of a trace of several runs: each run's own, prefixed by its
    application, and where its window lies on its own trace."""
    out = [f"nsys2prv trace of {len(runs)} runs, one Paraver application each: "
           + ", ".join(f"{k} = {label}" for k, label in enumerate(labels, start=1))]
    for k, (r, label) in enumerate(zip(runs, labels), start=1):
        head = f"application {k} ({label}): "
        lo = r.window[0] if r.window is not None else 0
        for c in alignment_comments(r.alignment, len(r.metas)):
            if c.startswith("time 0 = UTC epoch") and r.alignment.epoch_of_zero is not None:
                c = f"time 0 = UTC epoch {r.alignment.epoch_of_zero + lo} ns"
            out.append(head + c)
        if r.window is not None:
            out.append(head + f"window: [{lo}, {lo + r.length}) ns of its own trace's time; "
                       f"add {lo} ns to a time of this application to get its own trace's")
        out.append(head + f"ends at {r.length} ns")
    return out


class _ApplicationsCut(CutStream):
    """The cut of a trace of several runs whose windows all start at `origin`: each
    application ends at its own end (the engine's cut with one end per application)."""

    def __init__(self, model: ResourceModel, origin: int, ends: list[int], write) -> None:
        from ..engine._engine import PrvScanner

        task_rows, offsets = [0], []
        for i, t in enumerate(model.tasks):
            if len(offsets) < t.appl:
                offsets.append(i)
            task_rows.append(task_rows[-1] + len(t.rows))
        self._scanner = PrvScanner(task_rows, offsets, cut=(origin, max(ends), ends),
                                   stacked=stacked_types(), attributes=attribute_types())
        self._write = write


WINDOW_COUNTS_NOTE = ("counts are of the records read for the window: those that overlap it, "
                      "and every row's first and last")


def _resolve_window(metas: list[dict], alignment: Alignment, end_time: int,
                    options: MergeOptions) -> tuple[tuple[int, int | None], list[str]]:
    """The asked window on the trace's clock; the reports must have been read for it
    (`WindowMoved` if not), and it must meet the run (unless `allow_empty`)."""
    ranges = None
    if isinstance(options.filter, NvtxFilter):
        ranges = [f.nvtx for f in options.facts] if options.facts else \
            [_nvtx_ranges_of(m) for m in metas]
    res = resolve(options.filter, alignment.shifts, [m["time"]["first"] for m in metas],
                  ranges, [m["report"]["name"] for m in metas])
    for m, (lo, hi) in zip(metas, res.local):
        read = m.get("window")
        if read is not None and not (read[0] <= lo and hi <= read[1]):
            raise WindowMoved(res.local)
    if (res.start >= end_time or (res.end is not None and res.end <= res.start)) \
            and not options.allow_empty:
        end = "the end" if res.end is None else f"{res.end / 1e9:.9f} s"
        asked = (f" (--filter-time {options.filter.describe()}, since the session start)"
                 if isinstance(options.filter, TimeFilter) else "")
        raise InputError(f"the window from {res.start / 1e9:.9f} s to {end}{asked} lies "
                         f"outside the run (0 to {end_time / 1e9:.9f} s of the trace's time); "
                         "--allow-empty writes an empty trace for it")
    return (res.start, res.end), res.notes


def _nvtx_ranges_of(meta: dict) -> pl.DataFrame:
    """The NVTX ranges of a partial's report, read from its export (merge of partials
    prepared elsewhere: their exports must still be at the recorded path)."""
    from ..report.report import Report

    path = meta["report"]["path"]
    if not Path(path).exists():
        raise InputError(f"{path}: an NVTX window needs the export of every partial (not "
                         "found at the path it was prepared from)")
    report = Report(path)
    try:
        return nvtx_ranges(report)
    finally:
        report.close()


DROPPED = "records dropped (unresolved fields)"


def _write_records(merger: engine.Merger, write, warns: dict[str, int], progress,
                   end_time: int) -> None:
    """Write the merged .prv lines, block by block, in order: the engine formats the next
    block on a second thread while this one is written (a block stays valid until the call
    after the next)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys2prv-merge") as pool:
        ahead = pool.submit(merger.next, BLOCK_BYTES)
        while (block := ahead.result()) is not None:
            last = merger.last_time
            ahead = pool.submit(merger.next, BLOCK_BYTES)
            write(block)
            if progress is not None:
                progress(last, end_time)
    if merger.dropped:  # a bug guard: counted, never silent
        warns[DROPPED] = warns.get(DROPPED, 0) + merger.dropped


# -- merging time windows in parallel ---------------------------------------------------------

WINDOW_RECORDS = 8_000_000  # fewer records per window than this: not worth a process
_FAR = 1 << 62  # beyond any trace time, either way


def _windows(plan: _Plan, jobs: int, memory: int | None) -> list[tuple[int, int]]:
    """Time windows [lo, hi) of about equal record counts, one per process (or one window).

    Cut points come from the run indexes (first time of every block), so a window
    never splits the records of one time: multi-event lines stay whole."""
    total = sum(m.get("records", 0) for m in plan.metas)
    n = budget_plan(memory, jobs, total // WINDOW_RECORDS).workers
    if n < 2 or any(len(m.get("run_index") or []) != len(m["runs"]) for m in plan.metas):
        return [(-_FAR, _FAR)]
    firsts = np.sort(np.concatenate(
        [np.asarray([t for t, _ in idx], dtype=np.int64) + v.shift
         for v, m in zip(plan.views, plan.metas) for idx in m["run_index"]]
        or [np.zeros(0, np.int64)]))
    cuts = sorted({int(firsts[len(firsts) * k // n]) for k in range(1, n)} - {int(firsts[0])})
    bounds = [-_FAR, *cuts, _FAR]
    return list(zip(bounds[:-1], bounds[1:]))


def _write_windows(plan: _Plan, partials: list[str], options: MergeOptions,
                   windows: list[tuple[int, int]], writer: TraceWriter, warns: dict[str, int],
                   progress, end_time: int) -> None:
    """Merge the first window here, straight into the output, and each later one in its own
    process into a file next to the output, then append those files in order (a window's
    file is removed as soon as it is copied): the first window's bytes are written once."""
    tmp = None
    try:
        with signals_held():  # made and noted before an interruption can leave it behind
            tmp = Path(tempfile.mkdtemp(prefix=".nsys2prv-merge-", dir=writer.directory))
            register_temp(tmp)
        from ..lifeline import process_pool  # only for windows in processes

        with worker_environment(), process_pool(len(windows) - 1) as pool:
            futures = [pool.submit(merge_window, partials, options, w, len(windows),
                                   str(tmp / f"window-{i:04d}.txt"))
                       for i, w in enumerate(windows) if i]
            first_end = windows[0][1]
            _write_records(_merger(plan, windows[0]), writer.write_bytes, warns,
                           None if progress is None else
                           (lambda t, _end: progress(min(t, first_end, end_time), end_time)),
                           end_time)
            for i, (future, (_, hi)) in enumerate(zip(futures, windows[1:]), start=1):
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
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def merge_window(partials: list[str], options: MergeOptions, window: tuple[int, int],
                 n_windows: int, path: str) -> dict[str, int]:
    """The .prv lines of one time window, written to `path` (a worker process's job);
    returns the warnings counted while formatting."""
    plan = _plan(partials, options, quiet=True)
    warns: dict[str, int] = {}
    with open(path, "wb") as fh:
        _write_records(_merger(plan, window), fh.write, warns, None, plan.end_time)
    return warns


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
    return pcf_mod.PcfType(reg.REPORT_INFO, REPORT_INFO_LABEL, labels)


def _edge_states(model: ResourceModel, shifts: list[int], end_time: int,
                 ends: list[int] | None = None) -> Iterator[pl.DataFrame]:
    """Head and tail states of every row: Not created (CPU) / Idle (GPU) to the trace ends
    (to each report's own end with `ends`: the runs of a trace of several end apart)."""
    rows = []
    for order, r in enumerate(model.rows):
        state = reg.STATE_NOT_CREATED if r.kind == "cpu" else reg.STATE_IDLE
        first, last = r.first + shifts[r.report], r.last + shifts[r.report]
        if ends is not None:
            end_time = ends[r.report]
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
