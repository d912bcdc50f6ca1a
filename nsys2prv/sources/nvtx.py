"""NVTX annotations (`NVTX_EVENTS`): push/pop and start/end ranges, marks, domains, categories.

Event kinds are resolved by name in `ENUM_NSYS_EVENT_TYPE` (with NVIDIA's documented ids as
fallback). Range text is `StringIds[textId]` or the inline `text`; domains and categories are
defined per process by their own NVTX rows and are returned by :func:`domains` and
:func:`categories`.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, TID_FROM_GLOBAL, Column, has_rows,
                   read_chunks)

KIND = "nvtx"
TABLE = "NVTX_EVENTS"

# kind -> (enum names, documented ids)
KINDS = {
    "pushpop": (("NvtxPushPopRange", "NvtxtPushPopRange"), (59, 70)),
    "startend": (("NvtxStartEndRange", "NvtxtStartEndRange"), (60, 71)),
    "mark": (("NvtxMark", "NvtxtMark"), (34, 65)),
}
DOMAIN_CREATE = ("NvtxDomainCreate", 75)
# the domain nsys itself creates for --python-sampling: one mark per Python backtrace sample,
# not the user's annotations (sources/samples.py reads them; the NVTX kind leaves them out)
PYTHON_DOMAIN = "Python Backtrace"
CATEGORY = ("NvtxCategory", 33)
THREAD_NAME = ("NvtxThread", 39)

COLUMNS = CPU_CALL + (
    Column("end_tid", ("endGlobalTid",), transform=TID_FROM_GLOBAL),
    Column("event_type", ("eventType",)),
    Column("text_id", ("textId",)),
    Column("text", ("text",), dtype=pl.Utf8),
    Column("domain_id", ("domainId",), fallback="0"),
    Column("category", ("category",), fallback="0"),
    Column("color", ("color",)),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE) and bool(event_type_ids(report)["pushpop"]
                                            | event_type_ids(report)["startend"]
                                            | event_type_ids(report)["mark"])


def event_type_ids(report: Report) -> dict[str, set[int]]:
    """kind -> set of eventType ids present in this export's enum (or the documented ids)."""
    enum = report.enums.ids("ENUM_NSYS_EVENT_TYPE")
    out = {}
    for kind, (names, defaults) in KINDS.items():
        ids = {enum[n] for n in names if n in enum}
        out[kind] = ids or set(defaults)
    return out


def _enum_id(report: Report, pair: tuple[str, int]) -> int:
    return report.enums.id_of("ENUM_NSYS_EVENT_TYPE", pair[0], pair[1])


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    """Range and mark rows (definitions such as domains/categories are left out)."""
    ids = event_type_ids(report)
    wanted = sorted(ids["pushpop"] | ids["startend"] | ids["mark"])
    where = "eventType IN (" + ",".join(str(i) for i in wanted) + ")"
    yield from read_chunks(report, TABLE, COLUMNS, chunk_rows, where=where, windowed=True)


def _definitions(report: Report, kind: tuple[str, int]) -> pl.DataFrame:
    table = report.table(TABLE)
    schema = {"pid": pl.Int64, "domain_id": pl.Int64, "category": pl.Int64, "name": pl.Utf8}
    if table is None:
        return pl.DataFrame(schema=schema)
    cols = set(report.db.columns(table))
    text = "coalesce(s.value, e.text)" if "textId" in cols else "e.text"
    join = 'LEFT JOIN "StringIds" s ON s.id = e.textId' if "textId" in cols else ""
    cat = "e.category" if "category" in cols else "0"
    dom = "e.domainId" if "domainId" in cols else "0"
    rows = report.db.rows(
        f"SELECT (e.globalTid >> 24) & 16777215, {dom}, {cat}, {text} FROM \"{table}\" e {join} "
        f"WHERE e.eventType = {_enum_id(report, kind)}")
    return pl.DataFrame({k: [r[i] for r in rows] for i, k in enumerate(schema)}, schema=schema)


def names_a_domain(report: Report, name: str) -> bool:
    """Whether some process created an NVTX domain called `name` (one SQL probe, no table
    read: how kinds that live in a domain tell they are absent)."""
    table = report.table(TABLE)
    if table is None:
        return False
    cols = set(report.db.columns(table))
    text = "coalesce(s.value, e.text)" if "textId" in cols else "e.text"
    join = 'LEFT JOIN "StringIds" s ON s.id = e.textId' if "textId" in cols else ""
    return bool(report.db.rows(
        f"SELECT 1 FROM \"{table}\" e {join} "
        f"WHERE e.eventType = {_enum_id(report, DOMAIN_CREATE)} AND {text} = ? LIMIT 1",
        (name,)))


def domains(report: Report) -> pl.DataFrame:
    """(pid, domain_id, name) of the domains each process created."""
    return (_definitions(report, DOMAIN_CREATE).drop("category")
            .unique(["pid", "domain_id"], keep="last", maintain_order=True))


def categories(report: Report) -> pl.DataFrame:
    """(pid, domain_id, category, name) of the named categories."""
    return _definitions(report, CATEGORY).unique(["pid", "domain_id", "category"], keep="last",
                                                 maintain_order=True)


def thread_names(report: Report) -> pl.DataFrame:
    """(pid, tid, thread_name) given by nvtxNameOsThread."""
    table = report.table(TABLE)
    schema = {"pid": pl.Int64, "tid": pl.Int64, "thread_name": pl.Utf8}
    if table is None:
        return pl.DataFrame(schema=schema)
    cols = set(report.db.columns(table))
    text = "coalesce(s.value, e.text)" if "textId" in cols else "e.text"
    join = 'LEFT JOIN "StringIds" s ON s.id = e.textId' if "textId" in cols else ""
    rows = report.db.rows(
        f"SELECT (e.globalTid >> 24) & 16777215, e.globalTid & 16777215, {text} "
        f"FROM \"{table}\" e {join} WHERE e.eventType = {_enum_id(report, THREAD_NAME)}")
    return pl.DataFrame({k: [r[i] for r in rows] for i, k in enumerate(schema)},
                        schema=schema).filter(pl.col("thread_name").is_not_null()).unique(
                            ["pid", "tid"], keep="last", maintain_order=True)
