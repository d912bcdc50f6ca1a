"""The library entry points: `translate()` and `open_report()`.

`translate` is prepare (one partial trace per report, in a work directory next to the
output) followed by merge; a single report is a merge of one.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .errors import InputError, OutputError, UsageError
from .pipeline.merge import MergeOptions, MergeResult, merge
from .pipeline.prepare import PrepareOptions, prepare
from .report.export import export_report, is_report
from .report.report import Report
from .paraver.kinds import TRANSLATORS as KINDS


def open_report(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None
                ) -> Report:
    """Open an export (`.sqlite`, or a `.nsys-rep` exported with `nsys` into `cache_dir`).

    The returned :class:`~nsys2prv.report.report.Report` gives normalised tables through
    :mod:`nsys2prv.tables` helpers (`kernels(report)`, `nvtx(report)`, ...).
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


def translate(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
              output: str | os.PathLike[str], *, only: Sequence[str] | None = None,
              exclude: Sequence[str] = (), compress: bool = False, jobs: int = 1,
              hosts: Sequence[str | None] | None = None,
              workdir: str | os.PathLike[str] | None = None,
              chunk_rows: int | None = None, spill_rows: int | None = None,
              sync: str | None = "auto", sync_nvtx: str | None = None,
              sync_by_task: bool = False,
              on_report: Callable[[int, int], None] | None = None,
              on_merge: Callable[[int, int], None] | None = None) -> MergeResult:
    """Translate one or more exports into the Paraver trace `output` (.prv or .prv.gz).

    Several inputs are merged into one trace (one node per host, tasks in MPI rank order,
    clocks aligned). `sync` picks the clock sync point ("auto": end of MPI_Init, else of the
    first NCCL kernel; "MPI_Init"; "NCCL"; None: session start only); `sync_nvtx` names an
    NVTX range or mark to align on instead. Returns what was written and a summary (counts,
    warnings, clock offsets and residual skew).
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise UsageError("no input given")
    output = Path(output)
    if not (output.name.endswith(".prv") or output.name.endswith(".prv.gz")):
        raise UsageError(f"{output}: the output name must end in .prv or .prv.gz")
    out_dir = output.parent if str(output.parent) else Path(".")
    if not out_dir.is_dir():
        raise OutputError(f"{out_dir}: output directory does not exist")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputError(f"{out_dir}: output directory is not writable")
    from .paraver.output import trace_paths
    outs = {p.resolve() for p in trace_paths(output, compress)}
    for p in inputs:
        if p.exists() and p.resolve() in outs:
            raise UsageError(f"{p}: the output would overwrite an input")
    kinds = resolve_kinds(only, exclude)
    options = PrepareOptions(kinds=kinds, sync_nvtx=sync_nvtx)
    if sync_nvtx:
        sync = f"nvtx:{sync_nvtx}"
    if chunk_rows:
        options.chunk_rows = chunk_rows
    if spill_rows:
        options.spill_rows = spill_rows
    sqlite_paths = []
    for p in inputs:
        if not p.exists():
            raise InputError(f"{p}: no such file")
        sqlite_paths.append(export_report(p, out_dir) if is_report(p) else p)
    names = _report_names(inputs)
    work = Path(tempfile.mkdtemp(prefix=".nsys2prv-work-", dir=workdir or out_dir))
    try:
        jobs_args = [(str(sp), name, work / f"report-{i:05d}", options)
                     for i, (sp, name) in enumerate(zip(sqlite_paths, names))]
        if jobs > 1 and len(jobs_args) > 1:
            # spawn, not fork: forking a process whose polars thread pool is running can
            # deadlock the child.
            with ProcessPoolExecutor(max_workers=jobs,
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                metas = []
                for i, m in enumerate(pool.map(_prepare_one, jobs_args)):
                    metas.append(m)
                    if on_report:
                        on_report(i + 1, len(jobs_args))
        else:
            metas = []
            for i, a in enumerate(jobs_args):
                metas.append(_prepare_one(a))
                if on_report:
                    on_report(i + 1, len(jobs_args))
        return merge([a[2] for a in jobs_args], output,
                     MergeOptions(hosts=list(hosts) if hosts else None, compress=compress,
                                  sync=sync, sync_by_task=sync_by_task),
                     progress=on_merge)
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
