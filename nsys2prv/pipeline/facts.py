"""What a report's clock alignment and a window need, read with a few SQL aggregates before
any translation: the first record's time, the clock sync points, the instances of an NVTX
range.

Translating a window reads only the records that overlap it, so these facts cannot come from
the translation (its first record is the window's, its sync points may lie outside): they
are read here from the whole report, and give the same values the whole translation's
partial holds (tests/test_window.py checks them on the corpus).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..paraver.registry import mpi as mreg
from ..report.report import Report
from ..sources import kernels as kernels_source
from ..sources import mpi as mpi_source
from ..sources import nvtx as nvtx_source
from ..sources.base import has_rows
from .prepare import available_kinds, report_span


@dataclass
class Facts:
    """Local ns: first and last record of the kinds translated, sync points by name."""

    first: int
    last: int
    sync_points: dict[str, int]
    nvtx: pl.DataFrame | None = None  # nvtx_ranges, when a window names one
    present: list[str] | None = None  # the kinds the report has


def _min(report: Report, sql: str) -> int | None:
    rows = report.db.rows(sql)
    return int(rows[0][0]) if rows and rows[0][0] is not None else None


def _text_expr(report: Report, table: str, alias: str = "e") -> tuple[str, str]:
    """(SQL text expression, join) of NVTX-like rows with `textId` and/or `text`."""
    cols = set(report.db.columns(table))
    if "textId" in cols:
        inline = f"{alias}.text" if "text" in cols else "NULL"
        return (f"coalesce(s.value, {inline})",
                f'LEFT JOIN "StringIds" s ON s.id = {alias}.textId')
    return f"{alias}.text", ""


def _mpi_init_end(report: Report, kinds: list[str]) -> int | None:
    """End of MPI_Init: the earliest end of an init call in the native MPI tables or the
    NVTX "MPI" domain (the mpi kind), and the end of the first such NVTX range (the nvtx
    kind), whichever is earlier, as the translation gives it."""
    ends = []
    if "mpi" in kinds:
        for table in mpi_source.NATIVE_TABLES.values():
            real = report.table(table)
            if real is None or not has_rows(report, table):
                continue
            ids = [i for i, v in report.db.rows(
                f'SELECT DISTINCT e.textId, s.value FROM "{real}" e '
                'LEFT JOIN "StringIds" s ON s.id = e.textId')
                if v and mreg.canonical_name(v) in mreg.INIT_CALLS]
            if ids:
                ends.append(_min(report, f'SELECT min("end") FROM "{real}" WHERE textId IN '
                                         f'({",".join(map(str, ids))})'))
    nv = _mpi_nvtx_inits(report) if {"mpi", "nvtx"} & set(kinds) else None
    if nv is not None and nv.height:
        if "mpi" in kinds and not mpi_source.native(report):
            ends.append(int(nv["end"].min()))
        if "nvtx" in kinds:
            ends.append(int(nv.sort("start")["end"][0]))
    ends = [e for e in ends if e is not None]
    return min(ends) if ends else None


def _mpi_nvtx_inits(report: Report) -> pl.DataFrame | None:
    """(start, end) of the MPI_Init ranges of the NVTX "MPI" domain."""
    domains = mpi_source.nvtx_domain_ids(report)
    real = report.table(nvtx_source.TABLE)
    if domains.height == 0 or real is None:
        return None
    text, join = _text_expr(report, real)
    pushpop = sorted(nvtx_source.event_type_ids(report)["pushpop"])
    rows = report.db.rows(
        f'SELECT (e.globalTid >> 24) & 16777215, e.domainId, e.start, '
        f'coalesce(e."end", e.start), {text} FROM "{real}" e {join} '
        f'WHERE e.eventType IN ({",".join(map(str, pushpop))})')
    df = pl.DataFrame(rows, schema={"pid": pl.Int64, "domain_id": pl.Int64,
                                    "start": pl.Int64, "end": pl.Int64, "text": pl.Utf8},
                      orient="row")
    df = df.join(domains, on=["pid", "domain_id"], how="semi")
    return df.filter(pl.col("text").map_elements(
        lambda t: mreg.canonical_name(t) in mreg.INIT_CALLS, return_dtype=pl.Boolean)
        if df.height else pl.lit(False))


def _nccl_first_end(report: Report) -> int | None:
    """End of the first NCCL kernel (by start)."""
    real = report.table(kernels_source.TABLE)
    if real is None:
        return None
    ids = [r[0] for r in report.db.rows(
        """SELECT id FROM "StringIds" WHERE lower(value) LIKE 'nccl%'""")]
    if not ids:
        return None
    rows = report.db.rows(
        f'SELECT "end" FROM "{real}" WHERE shortName IN ({",".join(map(str, ids))}) '
        "ORDER BY start, rowid LIMIT 1")
    return int(rows[0][0]) if rows else None


def _nvtx_first_end(report: Report, name: str) -> int | None:
    """End (start, for a mark) of the first NVTX range or mark whose text is `name`."""
    real = report.table(nvtx_source.TABLE)
    if real is None:
        return None
    ids = nvtx_source.event_type_ids(report)
    wanted = sorted(ids["pushpop"] | ids["startend"] | ids["mark"])
    text, join = _text_expr(report, real)
    rows = report.db.rows(
        f'SELECT coalesce(e."end", e.start) FROM "{real}" e {join} '
        f'WHERE e.eventType IN ({",".join(map(str, wanted))}) AND {text} = ? '
        "ORDER BY e.start, e.rowid LIMIT 1", (name,))
    return int(rows[0][0]) if rows else None


def report_facts(report: Report, kinds: list[str] | None = None,
                 sync_nvtx: str | None = None, span: bool = True) -> Facts:
    """The facts of `report` for the `kinds` translated (None: all present); without
    `span`, no first and last record (0: one scan of every table saved, where they are not
    needed)."""
    present = available_kinds(report)
    kinds = present if kinds is None else [k for k in present if k in kinds]
    first, last = report_span(report, kinds) if span else (0, 0)
    points: dict[str, int] = {}
    init = _mpi_init_end(report, kinds)
    if init is not None:
        points["MPI_Init"] = init
    if "kernels" in kinds:
        nccl = _nccl_first_end(report)
        if nccl is not None:
            points["NCCL"] = nccl
    if sync_nvtx is not None and "nvtx" in kinds:
        hit = _nvtx_first_end(report, sync_nvtx)
        if hit is not None:
            points[f"nvtx:{sync_nvtx}"] = hit
    return Facts(first, last, points, present=present)


def nvtx_ranges(report: Report) -> pl.DataFrame:
    """Every NVTX push/pop and start/end range: (name, domain, start, end), domain null for
    ranges without one; an unterminated range ends at the report's last record."""
    schema = {"name": pl.Utf8, "domain": pl.Utf8, "start": pl.Int64, "end": pl.Int64}
    real = report.table(nvtx_source.TABLE)
    if real is None:
        return pl.DataFrame(schema=schema)
    ids = nvtx_source.event_type_ids(report)
    ranges = sorted(ids["pushpop"] | ids["startend"])
    text, join = _text_expr(report, real)
    dom = "e.domainId" if "domainId" in report.db.columns(real) else "0"
    rows = report.db.rows(
        f'SELECT (e.globalTid >> 24) & 16777215, {dom}, {text}, e.start, e."end" '
        f'FROM "{real}" e {join} WHERE e.eventType IN ({",".join(map(str, ranges))})')
    df = pl.DataFrame(rows, schema={"pid": pl.Int64, "domain_id": pl.Int64, "name": pl.Utf8,
                                    "start": pl.Int64, "end": pl.Int64}, orient="row")
    last = report_span(report, available_kinds(report))[1]
    names = nvtx_source.domains(report).rename({"name": "domain"})
    return (df.join(names, on=["pid", "domain_id"], how="left")
            .with_columns(pl.col("end").fill_null(max(last, 0)))
            .select("name", "domain", "start", "end"))
