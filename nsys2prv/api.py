"""The library entry points: `translate()`, `open_report()`, and the two stages on their own.

`translate` is prepare (one partial trace per report, in a work directory next to the
output) followed by merge; a single report is a merge of one. The per-report stage runs
in-process (`jobs=1`), in a local process pool (`jobs=N`) or on a Dask cluster (`dask=`), and
produces the same bytes in every case.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .errors import InputError, OutputError, UsageError
from .lifeline import signals_held
from .paraver.kinds import KINDS
from .paraver.output import trace_paths
from .paraver.values import ValuesLike, read_values_like
from .pipeline.align import align
from .pipeline.budget import plan as budget_plan
from .pipeline.budget import worker_environment
from .pipeline.facts import Facts, nvtx_ranges, report_facts
from .pipeline.merge import (Application, ApplicationWindowMoved, MergeOptions, MergeResult,
                             TraceStream, merge, merge_applications, stream)
from .pipeline.prepare import PrepareOptions, prepare
from .pipeline.window import Filter, NvtxFilter, WindowMoved, parse_filter, resolve
from .report.export import export_report, is_report
from .report.inputs import expand_inputs
from .report.report import Report
from .supervise import register_temp


def open_report(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None
                ) -> Report:
    """Open an export (`.sqlite`, or a `.nsys-rep` exported with `nsys` into `cache_dir`).

    Normalised tables of the report come from :mod:`nsys2prv.tables` (`kernels(report)`,
    `nvtx(report)`, ...).
    """
    path = Path(path)
    if is_report(path):
        path = export_report(path, cache_dir or path.parent)
    return Report(path)


def resolve_kinds(only: Sequence[str] | None, exclude: Sequence[str]) -> list[str] | None:
    known = set(KINDS)
    for k in list(only or []) + list(exclude):
        if k not in known:
            raise UsageError(f"unknown data kind '{k}' (known: {', '.join(KINDS)})")
    if only is None and not exclude:
        return None
    chosen = list(only) if only is not None else list(KINDS)
    return [k for k in chosen if k not in set(exclude)]


def _prepare_one(args: tuple) -> dict:
    path, name, workdir, options = args
    report = Report(path, name=name)
    try:
        return prepare(report, workdir, options)
    finally:
        report.close()


def _sqlite_of(path: Path, cache_root: Path) -> Path:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    return export_report(path, cache_root) if is_report(path) else path


def prepare_report(report: str | os.PathLike[str], directory: str | os.PathLike[str], *,
                   only: Sequence[str] | None = None, exclude: Sequence[str] = (),
                   sync_nvtx: str | None = None, memory: int | None = None) -> dict:
    """The per-report stage alone: write the partial trace of `report` into `directory`
    (buffers sized for `memory` bytes, default 2 GiB)."""
    path = Path(report)
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    sqlite = _sqlite_of(path, directory.parent)
    budget = budget_plan(memory, 1, 1)
    options = PrepareOptions(kinds=resolve_kinds(only, exclude), sync_nvtx=sync_nvtx,
                             chunk_rows=budget.chunk_rows, spill_bytes=budget.spill_bytes)
    return _prepare_one((str(sqlite), _report_names([path])[0], directory, options))


def merge_partials(partials: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str],
                   *, compress: bool = False, sync: str | None = "auto",
                   sync_by_task: bool = False, hosts: Sequence[str | None] | None = None,
                   jobs: int = 1, memory: int | None = None, window: Filter | str | None = None,
                   facts: list[Facts] | None = None, allow_empty: bool = False,
                   on_merge: Callable[[int, int], None] | None = None,
                   values_like: str | os.PathLike[str] | ValuesLike | None = None
                   ) -> MergeResult:
    """The merge stage alone: partial trace directories (in input order) -> one trace.

    `jobs` > 1 merges time windows of a large trace in that many processes (same bytes);
    `memory` (bytes, default 2 GiB) bounds them together. `window` (as for `translate`)
    writes that window of the run only; `values_like` (as for `translate`) numbers names as
    that trace did."""
    output = _check_output(Path(output), [], compress)
    like = _values_like(values_like)
    window = _window_filter(window)
    return merge([Path(p) for p in partials], output,
                 MergeOptions(hosts=list(hosts) if hosts else None, compress=compress,
                              sync=sync, sync_by_task=sync_by_task, jobs=max(1, jobs),
                              memory=memory, filter=window, facts=facts,
                              allow_empty=allow_empty, values_like=like),
                 progress=on_merge)


def stream_partials(partials: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str],
                    *, sync: str | None = "auto", sync_by_task: bool = False,
                    hosts: Sequence[str | None] | None = None,
                    window: Filter | str | None = None, facts: list[Facts] | None = None,
                    allow_empty: bool = False,
                    values_like: str | os.PathLike[str] | ValuesLike | None = None,
                    compress: bool = False, jobs: int = 1, memory: int | None = None,
                    on_merge: Callable[[int, int], None] | None = None) -> TraceStream:
    """`merge_partials` without writing the .prv: a `TraceStream` (its .pcf and .row written
    at `output`), read as many times as needed while the partials stay. `jobs`, `memory`
    and `on_merge` are `merge_partials`' and mean nothing here (the reader merges the text
    as it reads it); there is no compressed stream."""
    if compress:
        raise UsageError("a trace stream is never written: it cannot be compressed")
    return stream([Path(p) for p in partials], output,
                  MergeOptions(hosts=list(hosts) if hosts else None, sync=sync,
                               sync_by_task=sync_by_task, filter=_window_filter(window),
                               facts=facts, allow_empty=allow_empty,
                               values_like=_values_like(values_like)))


def _window_filter(window: Filter | str | None) -> Filter | None:
    """A window given as nsys' text parsed (see `translate`)."""
    if isinstance(window, str):
        return parse_filter(time=window) if "/" in window and _looks_like_time(window) \
            else parse_filter(nvtx=window)
    return window


def _values_like(path: str | os.PathLike[str] | ValuesLike | None) -> ValuesLike | None:
    """The numbering of the trace `path` (read before anything is prepared or written)."""
    if path is None or isinstance(path, ValuesLike):
        return path
    return read_values_like(path)


def _check_output(output: Path, inputs: list[Path], compress: bool) -> Path:
    if not (output.name.endswith(".prv") or output.name.endswith(".prv.gz")):
        raise UsageError(f"{output}: the output name must end in .prv or .prv.gz")
    out_dir = output.parent if str(output.parent) else Path(".")
    if not out_dir.is_dir():
        raise OutputError(f"{out_dir}: output directory does not exist")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputError(f"{out_dir}: output directory is not writable")
    outs = {p.resolve() for p in trace_paths(output, compress)}
    for p in inputs:
        if p.exists() and p.resolve() in outs:
            raise UsageError(f"{p}: the output would overwrite an input")
    return output


def _refuse_duplicate_inputs(inputs: Sequence[Path]) -> None:
    """The same report given twice (even through another path or a symlink) would be merged
    as two reports with every process duplicated: refuse it."""
    seen: dict[object, Path] = {}
    for p in inputs:
        try:
            st = p.stat()
            key: object = (st.st_dev, st.st_ino)
        except OSError:  # missing files are reported later, with their own message
            key = os.path.realpath(p)
        if key in seen:
            same = "" if str(seen[key]) == str(p) else f" (same file as {seen[key]})"
            raise UsageError(f"input {p} given twice{same}")
        seen[key] = p


def translate(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
              output: str | os.PathLike[str], *, only: Sequence[str] | None = None,
              exclude: Sequence[str] = (), compress: bool = False, jobs: int = 1,
              hosts: Sequence[str | None] | None = None,
              workdir: str | os.PathLike[str] | None = None,
              chunk_rows: int | None = None, spill_rows: int | None = None,
              sync: str | None = "auto", sync_nvtx: str | None = None,
              sync_by_task: bool = False, dask: Any = None, memory: int | None = None,
              window: Filter | str | None = None, allow_empty: bool = False,
              on_report: Callable[[int, int], None] | None = None,
              on_merge: Callable[[int, int], None] | None = None,
              values_like: str | os.PathLike[str] | None = None) -> MergeResult:
    """Translate one or more exports into the Paraver trace `output` (.prv or .prv.gz).

    An input may also be a directory (its reports), a glob pattern or "@LIST" (a file naming
    one report a line): `nsys2prv.report.inputs`. Several inputs are merged into one trace
    (one node per host, tasks in MPI rank order, clocks aligned). `sync` picks the clock sync point ("auto": end of MPI_Init, else of the
    first NCCL kernel; "MPI_Init"; "NCCL"; None: session start only); `sync_nvtx` names an
    NVTX range or mark to align on instead. `jobs` reports are prepared in parallel; `dask`
    (a `distributed.Client` or a scheduler address) runs that stage on a Dask cluster, whose
    workers must see the inputs and `workdir` at the same paths. `memory` (bytes, default
    2 GiB) bounds what the local processes take together: it caps how many run at once and
    sizes their buffers. `window` translates a window of the run only: a `TimeFilter` or
    `NvtxFilter` (`pipeline.window`), or nsys' text for them ("1s/2s" for a time window,
    else an NVTX range "NAME[@DOMAIN][/INDEX]"); only what overlaps it is read, the trace
    starts at 0 at its start (see docs/usage.md); `allow_empty` writes an empty trace for a
    window outside the run instead of failing. `values_like` names an existing nsys2prv
    trace (.prv): names it has (kernels, NVTX ranges, calls, ...) keep its values, the others
    are numbered after its largest, so that both traces show the same value and colour for
    the same name. Returns what was written and a summary (counts, warnings, clock offsets
    and residual skew).
    """
    return _translate(inputs, output, only=only, exclude=exclude, compress=compress, jobs=jobs,
                      hosts=hosts, workdir=workdir, chunk_rows=chunk_rows,
                      spill_rows=spill_rows, sync=sync, sync_nvtx=sync_nvtx,
                      sync_by_task=sync_by_task, dask=dask, memory=memory, window=window,
                      allow_empty=allow_empty, on_report=on_report, on_merge=on_merge,
                      values_like=values_like)


def translate_stream(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                     directory: str | os.PathLike[str], *, name: str = "trace",
                     jobs: int = 1, memory: int | None = None,
                     window: Filter | str | None = None, allow_empty: bool = False,
                     on_report: Callable[[int, int], None] | None = None,
                     attributes: bool = True) -> TraceStream:
    """The trace `translate` would write, for an analysis that reads it and needs no file
    (`nsys2prv analyze`/`diff` of reports): the reports are prepared into `directory`,
    which must stay until the stream is no longer read, and the trace's .pcf and .row are
    written there as NAME.pcf/.row; the .prv text is merged again on every read of the
    stream (`paraver.read` takes it wherever it takes a trace file). `attributes=False`
    leaves out the activities' attributes (launch geometry, correlation ids, bytes, return
    values), which the views show and no analysis reads: for a stream that is only
    analysed, not merged into a trace (on a 10M-activity export, 10 CPU-s less)."""
    from ._alloc import map_large_blocks

    # an analysis reads the stream in this process next: large blocks mapped from the
    # preparation on, so that the chunks' arrays do not leave glibc's heap fragmented, with
    # the analysis' arrays carved from it rather than mapped and given back (10M benchmark
    # export: the first pass' top 543 -> 490 MB)
    map_large_blocks()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return _translate(inputs, directory / f"{name}.prv", jobs=jobs, memory=memory,
                      window=window, allow_empty=allow_empty, on_report=on_report,
                      streamed=directory / f"{name}-partials", attributes=attributes)


def _work_dir(where: Path) -> Path:
    """A new hidden work folder in `where`, registered for the supervisor to remove if this
    process is killed. Its callers make it with Ctrl-C, SIGTERM and SIGHUP held, inside the
    `try` whose `finally` removes it: an interruption that came between making it and that
    `try` (a loaded machine) left it behind, since the supervisor removes what is registered
    only when the command was killed; an interrupted command removes its own."""
    work = Path(tempfile.mkdtemp(prefix=".nsys2prv-work-", dir=where))
    register_temp(work)
    return work


def _translate(inputs, output, *, only=None, exclude=(), compress=False, jobs=1, hosts=None,
               workdir=None, chunk_rows=None, spill_rows=None, sync="auto", sync_nvtx=None,
               sync_by_task=False, dask=None, memory=None, window=None, allow_empty=False,
               on_report=None, on_merge=None, values_like=None,
               streamed: Path | None = None, attributes: bool = True):
    """`translate`, or with `streamed` (where the partials are kept) `translate_stream`."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [Path(p) for p in expand_inputs(inputs)]
    if not inputs:
        raise UsageError("no input given")
    window = _window_filter(window)
    _refuse_duplicate_inputs(inputs)
    output = _check_output(Path(output), inputs, compress)
    like = _values_like(values_like)
    out_dir = output.parent if str(output.parent) else Path(".")
    options = PrepareOptions(kinds=resolve_kinds(only, exclude), sync_nvtx=sync_nvtx,
                             attributes=attributes)
    if sync_nvtx:
        sync = f"nvtx:{sync_nvtx}"
    # Dask workers have their own memory: each report there gets a whole budget.
    budget = budget_plan(memory, 1 if dask is not None else jobs, len(inputs))
    options.chunk_rows = chunk_rows or budget.chunk_rows
    options.spill_bytes = budget.spill_bytes
    if spill_rows:
        options.spill_rows = spill_rows
    sqlite_paths = [_sqlite_of(p, out_dir) for p in inputs]
    names = _report_names(inputs)
    if streamed is not None:
        streamed.mkdir(parents=True, exist_ok=True)
    work = streamed
    merged = merge_partials if streamed is None else stream_partials
    try:
        if work is None:
            with signals_held():  # see _work_dir
                work = _work_dir(workdir or out_dir)
        dirs = [work / f"report-{i:05d}" for i in range(len(sqlite_paths))]
        merge_args = dict(compress=compress, sync=sync, sync_by_task=sync_by_task,
                          hosts=hosts, jobs=jobs, memory=memory, on_merge=on_merge,
                          values_like=like)
        if window is None:
            _run_prepare([(str(sp), name, d, options) for sp, name, d in
                          zip(sqlite_paths, names, dirs)], budget.workers, dask, on_report)
            return merged(dirs, output, **merge_args)
        facts, local = _window_estimate(sqlite_paths, names, options, window, hosts, sync,
                                        sync_by_task)
        for attempt in range(3):
            _run_prepare([(str(sp), name, d, replace(options, window=w, present=f.present))
                          for sp, name, d, w, f in zip(sqlite_paths, names, dirs, local, facts)],
                         budget.workers, dask, on_report)
            try:
                return merged(dirs, output, window=window, facts=facts,
                              allow_empty=allow_empty, **merge_args)
            except WindowMoved as moved:  # the exact clocks moved it: read those windows
                local = moved.local
                for d in dirs:
                    shutil.rmtree(d, ignore_errors=True)
        raise InputError("the window's place on the trace did not settle")  # pragma: no cover
    finally:
        if streamed is None and work is not None:
            shutil.rmtree(work, ignore_errors=True)


Inputs = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def translate_applications(sides: Sequence[Inputs], output: str | os.PathLike[str], *,
                           window: Filter | str | None = None,
                           values_like: str | os.PathLike[str] | None = None, jobs: int = 1,
                           memory: int | None = None,
                           on_report: Callable[[int, int], None] | None = None,
                           on_merge: Callable[[int, int], None] | None = None,
                           labels: Sequence[str] | None = None) -> MergeResult:
    """Translate several runs into ONE trace, one Paraver application per run (application 1
    = side 1, e.g. before a change, application 2 = side 2, after it), to compare them in
    one window of wxparaver or one paramedir histogram.

    Each side is what `translate` takes (one export, the exports of the ranks of one job, a
    directory, a glob or @LIST) and is aligned on its own clocks exactly as `translate`
    aligns it alone; its rows start at 0 at its own start, or at its own `window` (resolved
    on every side separately: "iteration 10" of each run). One numbering for all sides: the
    same kernel name has the same value (and colour) in every application; `values_like`
    takes it from another trace as for `translate`. Labels of the applications, tasks and
    rows start with the side's label (`labels`; default 'before'/'after' for two sides,
    'run K' otherwise). The trace ends where the longest side ends. `jobs` reports are
    prepared in parallel, within `memory` bytes (default 2 GiB)."""
    if len(sides) < 1:
        raise UsageError("no side given")
    names = _side_labels(len(sides), labels)
    side_inputs: list[list[Path]] = []
    for label, side in zip(names, sides):
        given = [side] if isinstance(side, (str, os.PathLike)) else list(side)
        paths = [Path(p) for p in expand_inputs(given)]
        if not paths:
            raise UsageError(f"{label}: no input given")
        for p in paths:
            if p.name.endswith((".prv", ".prv.gz")):
                raise UsageError(f"{p}: a trace of several applications is made from the "
                                 f"reports of each side (.sqlite, .nsys-rep), not from a .prv")
        _refuse_duplicate_inputs(paths)
        side_inputs.append(paths)
    window = _window_filter(window)
    output = _check_output(Path(output), [p for ps in side_inputs for p in ps], False)
    like = _values_like(values_like)
    out_dir = output.parent if str(output.parent) else Path(".")
    budget = budget_plan(memory, jobs, sum(len(ps) for ps in side_inputs))
    options = PrepareOptions(chunk_rows=budget.chunk_rows, spill_bytes=budget.spill_bytes)
    sqlite = [[_sqlite_of(p, out_dir) for p in ps] for ps in side_inputs]
    reports = [_report_names(ps) for ps in side_inputs]
    work = None
    try:
        with signals_held():  # see _work_dir
            work = _work_dir(out_dir)
        dirs = [[work / f"run-{k}" / f"report-{i:05d}" for i in range(len(ps))]
                for k, ps in enumerate(sqlite)]
        facts: list[list[Facts] | None] = [None] * len(sides)
        local: list[list[tuple[int, int]] | None] = [None] * len(sides)
        if window is not None:
            for k, (ps, rs) in enumerate(zip(sqlite, reports)):
                facts[k], local[k] = _window_estimate(ps, rs, options, window, None, "auto",
                                                      False)
        todo = list(range(len(sides)))
        for _ in range(2 * len(sides) + 1):
            jobs_args = []
            for k in todo:
                for i, (sp, name, d) in enumerate(zip(sqlite[k], reports[k], dirs[k])):
                    side_facts, side_local = facts[k], local[k]
                    opts = options if side_facts is None or side_local is None else replace(
                        options, window=side_local[i], present=side_facts[i].present)
                    jobs_args.append((str(sp), name, d, opts))
            _run_prepare(jobs_args, budget.workers, None, on_report)
            try:
                return _merge_applications(
                    [Application(d, label, f) for d, label, f in zip(dirs, names, facts)],
                    output, window, like, on_merge, memory)
            except ApplicationWindowMoved as moved:  # read that side's window again
                k = moved.application
                local[k] = moved.local
                shutil.rmtree(work / f"run-{k}", ignore_errors=True)
                todo = [k]
        raise InputError("the window's place on the trace did not settle")  # pragma: no cover
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def merge_application_partials(applications: Sequence[Application],
                               output: str | os.PathLike[str], *,
                               window: Filter | str | None = None,
                               values_like: str | os.PathLike[str] | None = None,
                               on_merge: Callable[[int, int], None] | None = None
                               ) -> MergeResult:
    """The merge stage of `translate_applications` alone, for runs whose reports are
    already prepared (`Application`: each run's partial directories in rank order, its
    label, and for a window the facts its preparation was given, as a `TraceStream` of it
    holds them): what `nsys2prv diff --trace` writes from the partials its sides were
    read from, instead of preparing every report again. Raises `ApplicationWindowMoved`
    when a run's partials do not hold its window (prepare that run again)."""
    apps = list(applications)
    if not apps:
        raise UsageError("no side given")
    _side_labels(len(apps), [a.label for a in apps])  # the labels' rules
    output = _check_output(Path(output), [], False)
    return _merge_applications(apps, output, _window_filter(window),
                               _values_like(values_like), on_merge)


def _merge_applications(apps: list[Application], output: Path, window: Filter | None,
                        like: ValuesLike | None, on_merge, memory: int | None = None
                        ) -> MergeResult:
    return merge_applications(apps, output, MergeOptions(memory=memory, filter=window,
                                                         values_like=like),
                              progress=on_merge)


def _side_labels(n: int, labels: Sequence[str] | None) -> list[str]:
    """The label of every side: given (one each, distinct, not empty), else before/after."""
    if labels is None:
        return ["before", "after"] if n == 2 else [f"run {k}" for k in range(1, n + 1)]
    out = [str(x).strip() for x in labels]
    if len(out) != n or not all(out) or len(set(out)) != n or any(": " in x for x in out):
        raise UsageError(f"give one distinct, non-empty label per side ({n}) without ': ' "
                         f"(it ends the label in the row names), got {list(labels)}")
    return out


def _looks_like_time(text: str) -> bool:
    """Whether a window given as text is a time window ("START/END") rather than an NVTX
    range whose name holds a slash: both sides are empty or start with a digit or sign."""
    a, _, b = text.partition("/")
    return all(not s or s.strip()[:1] in "0123456789+-." for s in (a, b))


def _window_estimate(paths: list[Path], names: list[str], options: PrepareOptions,
                     flt: Filter, hosts: Sequence[str | None] | None, sync: str | None,
                     sync_by_task: bool) -> tuple[list[Facts], list[tuple[int, int]]]:
    """The facts of every report (SQL, whole reports) and a first estimate of the window
    each must read: the clocks from the facts' first records (the merge checks them against
    the translated records and asks for a second reading if they differ)."""
    facts, metas = [], []
    for i, (path, name) in enumerate(zip(paths, names)):
        report = Report(path, name=name)
        try:
            # one report's window is in its own time: no need of its first record
            f = report_facts(report, options.kinds, options.sync_nvtx,
                             span=len(paths) > 1)
            if isinstance(flt, NvtxFilter):
                f.nvtx = nvtx_ranges(report)
            desc = report.describe()
        finally:
            report.close()
        facts.append(f)
        metas.append({"report": desc, "time": {"first": f.first},
                      "extra": {"sync_points": f.sync_points}})
    report_hosts = [(hosts[i] if hosts else None) or m["report"].get("host")
                    or m["report"]["name"] for i, m in enumerate(metas)]
    alignment = align(metas, report_hosts, sync, sync_by_task)
    res = resolve(flt, alignment.shifts, [f.first for f in facts],
                  [f.nvtx for f in facts] if isinstance(flt, NvtxFilter) else None, names)
    return facts, res.local


def _run_prepare(jobs_args: list[tuple], jobs: int, dask: Any,
                 on_report: Callable[[int, int], None] | None) -> None:
    total = len(jobs_args)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_report:
            on_report(done, total)

    if dask is not None:
        client = _dask_client(dask)
        futures = client.map(_prepare_one, jobs_args, pure=False)
        from distributed import as_completed
        for future in as_completed(futures):
            future.result()  # re-raises a worker's error here
            tick()
        return
    if jobs > 1 and total > 1:
        # only for a process pool: not on a one-report run's path
        from .lifeline import process_pool

        with worker_environment(), process_pool(jobs) as pool:
            for _ in pool.map(_prepare_one, jobs_args):
                tick()
        return
    from ._alloc import trim

    for a in jobs_args:
        _prepare_one(a)
        # glibc keeps the free pages of the report's chunks in its heap (~140 MB after
        # a 10M-activity export); the merge or the analysis that follows here would not
        # reuse them all
        trim()
        tick()


def _dask_client(dask: Any):
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("running on Dask needs the dask extra: pip install 'nsys2prv[dask]'") \
            from None
    if isinstance(dask, Client):
        return dask
    return Client(str(dask))


def _report_names(paths: list[Path]) -> list[str]:
    """Short, unique report names (file name without export suffixes)."""
    names = []
    for p in paths:
        name = p.name
        for suffix in (".sqlite", ".nsys-rep", ".qdrep"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        names.append(name)
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if names.count(n) == 1 else f"{n}#{seen[n]}")
    return out
