"""MPI calls traced by nsys (`-t mpi`), in one normalised shape whatever the export version.

* nsys 2023.x and later write native tables: `MPI_P2P_EVENTS` (tag, remoteRank, size,
  commHandle, requestHandle), `MPI_COLLECTIVES_EVENTS` (rootRank, size, recvSize),
  `MPI_START_WAIT_EVENTS` (MPI_Wait*/Test*/Start*: one row per request, all with the call's
  start and end), `MPI_OTHER_EVENTS` (MPI_Init, ...), plus `MPI_RANKS` (thread -> rank) and
  `MPI_COMMUNICATORS` (handle, size, local rank, members).
* Older versions record the calls only as NVTX push/pop ranges of the domain "MPI", named after
  the function, without payload (the recorded 2022.4 runs and the corpus have no payload
  values in int64Value/uint64Value/jsonText for them).

Native tables win when any of them has rows, so a call is never read twice. Function names
are StringIds ids (`name_id`) or inline text (`text`); `source` says which table a row is from.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from . import nvtx as nvtx_source
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "mpi"
NVTX_DOMAIN = "MPI"
P2P, COLLECTIVE, START_WAIT, OTHER, NVTX = 0, 1, 2, 3, 4
NATIVE_TABLES = {P2P: "MPI_P2P_EVENTS", COLLECTIVE: "MPI_COLLECTIVES_EVENTS",
                 START_WAIT: "MPI_START_WAIT_EVENTS", OTHER: "MPI_OTHER_EVENTS"}
TABLES = (*NATIVE_TABLES.values(), nvtx_source.TABLE)
RANKS_TABLE = "MPI_RANKS"
COMMUNICATORS_TABLE = "MPI_COMMUNICATORS"

_COMMON = CPU_CALL + (
    Column("name_id", ("textId",)),
    Column("text", ("text",), dtype=pl.Utf8),
)
_PAYLOAD = (
    Column("comm_handle", ("commHandle",)),
    Column("tag", ("tag",)),
    Column("remote_rank", ("remoteRank",)),
    Column("size", ("size",)),
    Column("recv_size", ("recvSize",)),
    Column("root_rank", ("rootRank",)),
    Column("request", ("requestHandle",)),
)
SCHEMA: dict[str, pl.DataType] = {
    "row_id": pl.Int64, "source": pl.Int8, **{c.name: c.dtype for c in _COMMON + _PAYLOAD}}


def native(report: Report) -> list[int]:
    """Native MPI tables (source codes) that have rows."""
    return [s for s, t in NATIVE_TABLES.items() if has_rows(report, t)]


def nvtx_domain_ids(report: Report) -> pl.DataFrame:
    """(pid, domain_id) of the NVTX domains named "MPI"."""
    if not has_rows(report, nvtx_source.TABLE):
        return pl.DataFrame(schema={"pid": pl.Int64, "domain_id": pl.Int64})
    return nvtx_source.domains(report).filter(pl.col("name") == NVTX_DOMAIN).select(
        "pid", "domain_id")


def available(report: Report) -> bool:
    return bool(native(report)) or (nvtx_source.names_a_domain(report, NVTX_DOMAIN)
                                     and nvtx_domain_ids(report).height > 0)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    """Normalised MPI call chunks (SCHEMA): the native tables, else the NVTX "MPI" ranges."""
    sources = native(report)
    if sources:
        for src in sources:
            for df in read_chunks(report, NATIVE_TABLES[src], _COMMON + _PAYLOAD, chunk_rows):
                yield _conform(df, src)
        return
    domains = nvtx_domain_ids(report)
    if domains.height == 0:
        return
    pushpop = sorted(nvtx_source.event_type_ids(report)["pushpop"])
    ids = ",".join(str(int(d)) for d in domains["domain_id"].unique().sort().to_list())
    where = (f"eventType IN ({','.join(str(i) for i in pushpop)}) AND domainId IN ({ids})")
    cols = _COMMON + (Column("domain_id", ("domainId",)),)
    for df in read_chunks(report, nvtx_source.TABLE, cols, chunk_rows, where=where):
        df = df.join(domains, on=["pid", "domain_id"], how="semi", maintain_order="left")
        if df.height:
            yield _conform(df, NVTX)


def _conform(df: pl.DataFrame, source: int) -> pl.DataFrame:
    df = df.with_columns(pl.lit(source, pl.Int8).alias("source"))
    return df.select([(pl.col(n).cast(t) if n in df.columns else pl.lit(None, t)).alias(n)
                      for n, t in SCHEMA.items()])


def process_ranks(report: Report) -> pl.DataFrame:
    """(pid, rank): MPI_RANKS or 'MPI Rank N' thread names, else the report's own rank."""
    ranks = report.process_ranks
    schema = {"pid": pl.Int64, "rank": pl.Int64}
    if ranks:
        return pl.DataFrame({"pid": list(ranks), "rank": list(ranks.values())}, schema=schema)
    return pl.DataFrame(schema=schema)


COMMUNICATOR_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64, "timestamp": pl.Int64, "comm_handle": pl.Int64,
    "parent_handle": pl.Int64, "local_rank": pl.Int64, "size": pl.Int64,
    "group_root": pl.Int64, "group_root_uid": pl.Int64, "members": pl.Utf8,
    "comm_uid": pl.Int64}
_COMM_COLUMNS = {"rank": "rank", "timestamp": "timestamp", "comm_handle": "commHandle",
                 "parent_handle": "parentHandle", "local_rank": "localRank", "size": "size",
                 "group_root": "groupRoot", "group_root_uid": "groupRootUid",
                 "members": "members", "comm_uid": "commUid"}


def communicators(report: Report) -> pl.DataFrame:
    """MPI_COMMUNICATORS rows (COMMUNICATOR_SCHEMA); `rank` is the world rank of the
    process that created its handle. Missing columns (commUid before ~2024) are null."""
    real = report.nonempty(COMMUNICATORS_TABLE)
    if real is None:
        return pl.DataFrame(schema=COMMUNICATOR_SCHEMA)
    cols = set(report.db.columns(real))
    exprs = [(f'"{c}"' if c in cols else "NULL") + f" AS {n}" for n, c in _COMM_COLUMNS.items()]
    rows = report.db.rows(f'SELECT {", ".join(exprs)} FROM "{real}"')
    data = {n: [r[i] for r in rows] for i, n in enumerate(COMMUNICATOR_SCHEMA)}
    data["members"] = [None if v is None else str(v) for v in data["members"]]
    return pl.DataFrame(data, schema=COMMUNICATOR_SCHEMA, strict=False)
