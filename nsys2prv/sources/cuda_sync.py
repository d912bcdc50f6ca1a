"""CUDA synchronisation records (`CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`), CUDA event records
(`CUPTI_ACTIVITY_KIND_CUDA_EVENT`) and the calls that record events.

A synchronisation record covers the time a host thread blocked in a stream/event/context
synchronisation (or enqueued a stream wait); it carries the correlation id of the API call,
not the thread itself.

What a record is must be read from which of its ids are set, not from `syncType`: the number
nsys stores there does not follow the export's own ENUM_CUPTI_SYNC_TYPE in every version. In
the corpus, exports of captures up to 2022.x store 1 for context syncs, 2 for event syncs
(and event queries) and 3 for both stream syncs and stream waits; 2024.6-2025.1 store 2 or 0
for stream and device syncs; 2025.5 and later follow the enum. The ids never disagree: a
stream wait has a stream and an event, an event sync (or query) an event only, a stream sync
a stream only, a context/device sync neither (`dependency_class`).
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from . import cuda_api
from .base import GPU_ACTIVITY, DEFAULT_CHUNK_ROWS, PID_FROM_GLOBAL, Column, has_rows, \
    read_chunks

KIND = "cuda_sync"
TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
EVENT_TABLE = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"

COLUMNS = GPU_ACTIVITY + (  # no syncType: the kind is read from the ids (see above)
    Column("event", ("eventId",)),
    Column("event_sync_id", ("eventSyncId",)),
)

# CUDA event records: no start/end (nsys 2026 adds `timestamp`); the time of a record is
# that of the cudaEventRecord call with its correlation id.
EVENT_COLUMNS = (
    Column("timestamp", ("timestamp",)),
    Column("pid", ("globalPid",), transform=PID_FROM_GLOBAL),
    Column("device", ("deviceId",)),
    Column("context", ("contextId",), fallback="0"),
    Column("stream", ("streamId",)),
    Column("correlation", ("correlationId",)),
    Column("event", ("eventId",)),
    Column("event_sync_id", ("eventSyncId",)),
)

# dependency_class values
STREAM_WAIT, EVENT_SYNC, STREAM_SYNC, CONTEXT_SYNC = 1, 2, 3, 4
_NO_ID = 0xFFFFFFFF  # what CUPTI writes for "no stream" / "no event" (also seen as -1)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    yield from read_chunks(report, TABLE, COLUMNS, chunk_rows, windowed=True)


def has_id(c: pl.Expr, first: int = 0) -> pl.Expr:
    """An id that names something: not null, -1 or 0xFFFFFFFF, and at least `first`."""
    return c.is_not_null() & (c >= first) & (c < _NO_ID)


def dependency_class(stream: pl.Expr, event: pl.Expr) -> pl.Expr:
    """STREAM_WAIT, EVENT_SYNC, STREAM_SYNC or CONTEXT_SYNC from which ids a record has.

    CUPTI numbers events from 1 (every export of the corpus); exports made by this project's
    generator before it wrote CUPTI's "none" put event id 0 on stream syncs (the shipped
    sample), so 0 is no event."""
    s, e = has_id(stream), has_id(event, first=1)
    return (pl.when(s & e).then(pl.lit(STREAM_WAIT)).when(e).then(pl.lit(EVENT_SYNC))
            .when(s).then(pl.lit(STREAM_SYNC)).otherwise(pl.lit(CONTEXT_SYNC))
            .cast(pl.Int8))


def events_available(report: Report) -> bool:
    return has_rows(report, EVENT_TABLE)


def read_events(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS
                ) -> Iterator[pl.DataFrame]:
    """CUDA event records (nsys --cuda-event-trace): which stream recorded which event."""
    if events_available(report):
        yield from read_chunks(report, EVENT_TABLE, EVENT_COLUMNS, chunk_rows, windowed=False)


def record_call_names(report: Report) -> list[int]:
    """StringIds ids of the API functions that record a CUDA event (cudaEventRecord,
    cudaEventRecordWithFlags, cuEventRecord, ...; any version suffix)."""
    s = report.strings
    if s.height == 0:
        return []
    return s.filter(pl.col("value").str.contains(r"^cu(?:da)?EventRecord(?:WithFlags)?(?:_v\d+)?"
                                                 r"(?:_ptsz)?$"))["id"].sort().to_list()


def read_record_calls(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS
                      ) -> Iterator[pl.DataFrame]:
    """The CUDA API calls that record an event (pid, tid, start, end, correlation): SQLite
    filters the runtime table on the few function name ids, so only they are read."""
    ids = record_call_names(report)
    if not ids or not cuda_api.available(report):
        return
    where = f'"nameId" IN ({",".join(str(int(i)) for i in ids)})'
    yield from read_chunks(report, cuda_api.TABLE, cuda_api.COLUMNS, chunk_rows, where=where,
                           windowed=True)
