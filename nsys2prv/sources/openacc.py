"""OpenACC activity records (`CUPTI_ACTIVITY_KIND_OPENACC_DATA` / `_LAUNCH` / `_OTHER`).

The three tables share their leading columns; DATA adds bytes and the variable name,
LAUNCH the gangs/workers/vector length and the kernel name. They normalise to one layout
(absent columns are null) with a `table` code, because the *event kind* and not the table
tells what a record is (nsys 2022.4 exports hold enter/exit data in DATA and enqueue
upload/download, with their bytes-less records, in OTHER). `event_kind` is CUPTI's
CUpti_OpenAccEventKind (ENUM_OPENACC_EVENT_KIND ids); names are StringIds ids.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "openacc"
DATA_TABLE = "CUPTI_ACTIVITY_KIND_OPENACC_DATA"
LAUNCH_TABLE = "CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH"
OTHER_TABLE = "CUPTI_ACTIVITY_KIND_OPENACC_OTHER"
TABLES = (DATA_TABLE, LAUNCH_TABLE, OTHER_TABLE)  # `table` code = index here

COLUMNS = CPU_CALL + (
    Column("name_id", ("nameId",)),
    Column("event_kind", ("eventKind",)),
    Column("device_type", ("DeviceType", "deviceType")),
    Column("line", ("lineNo",)),
    Column("cu_device", ("cuDeviceId",)),
    Column("cu_context", ("cuContextId",)),
    Column("cu_stream", ("cuStreamId",)),
    Column("file_id", ("srcFile",)),
    Column("function_id", ("funcName",)),
    Column("bytes", ("bytes",)),
    Column("variable_id", ("varName",)),
    Column("gangs", ("numGangs",)),
    Column("workers", ("numWorkers",)),
    Column("vector_length", ("vectorLength",)),
    Column("kernel_id", ("kernelName",)),
)


def available(report: Report) -> bool:
    return any(has_rows(report, t) for t in TABLES)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    """Normalised records of the three tables in turn, each chunk with its `table` code."""
    for code, table in enumerate(TABLES):
        for chunk in read_chunks(report, table, COLUMNS, chunk_rows, windowed=True):
            yield chunk.with_columns(pl.lit(code, pl.Int64).alias("table"))


def event_kind_ids(report: Report) -> dict[str, int]:
    """CUPTI OpenACC event kind name (without the CUPTI_OPENACC_EVENT_KIND_ prefix) -> id, from
    the export's enum table; {} when it has none."""
    prefix = "CUPTI_OPENACC_EVENT_KIND_"
    return {n[len(prefix):] if n.startswith(prefix) else n: i
            for n, i in report.enums.ids("ENUM_OPENACC_EVENT_KIND").items()}


def device_type_ids(report: Report) -> dict[str, int]:
    """acc_device_t name -> id from ENUM_OPENACC_DEVICE ({} when absent)."""
    return report.enums.ids("ENUM_OPENACC_DEVICE")
