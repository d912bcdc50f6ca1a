"""cuDNN and cuBLAS calls (`CUDNN_EVENTS`, `CUBLAS_EVENTS`, `nsys -t cudnn,cublas`).

Both tables are (start, end, eventClass, globalTid, nameId = function). Besides the calls,
nsys writes marker rows of the "cuDNN/cuBLAS start/finish" classes (the moments library
tracing started and finished); they are not calls and are left out here.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "dnn"
TABLES = {"cudnn": "CUDNN_EVENTS", "cublas": "CUBLAS_EVENTS"}
CLASS_ENUM = "ENUM_NSYS_EVENT_CLASS"
# marker classes (name, documented id) that are not calls
MARKERS = (("TRACE_PROCESS_EVENT_CUDNN_START", 33), ("TRACE_PROCESS_EVENT_CUDNN_FINISH", 34),
           ("TRACE_PROCESS_EVENT_CUBLAS_START", 35), ("TRACE_PROCESS_EVENT_CUBLAS_FINISH", 36))

COLUMNS = CPU_CALL + (
    Column("event_class", ("eventClass",)),
    Column("name_id", ("nameId",)),
)


def available(report: Report) -> bool:
    return any(has_rows(report, t) for t in TABLES.values())


def marker_classes(report: Report) -> list[int]:
    return sorted({report.enums.id_of(CLASS_ENUM, n, d) for n, d in MARKERS})


def read(report: Report, library: str, chunk_rows: int = DEFAULT_CHUNK_ROWS
         ) -> Iterator[pl.DataFrame]:
    """Calls of one library ("cudnn" or "cublas"), marker rows excluded."""
    table = TABLES[library]
    if report.table(table) is None:
        return
    where = ("eventClass IS NULL OR eventClass NOT IN ("
             + ",".join(str(i) for i in marker_classes(report)) + ")")
    if "eventClass" not in report.columns(table):
        where = ""
    yield from read_chunks(report, table, COLUMNS, chunk_rows, where=where, windowed=True)
