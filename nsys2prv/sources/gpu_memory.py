"""CUDA memory allocations and frees (`CUDA_GPU_MEMORY_USAGE_EVENTS`, `--cuda-memory-usage`).

One row per allocation or free: time, process, device, address, bytes, memory kind
(ENUM_CUDA_MEM_KIND id) and operation (ENUM_CUDA_DEV_MEM_EVENT_OPER: allocation or
deallocation, resolved by name). `is_free` is True for deallocations.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import DEFAULT_CHUNK_ROWS, PID_FROM_GLOBAL, Column, has_rows, read_chunks

KIND = "gpu_memory"
TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
OPERATION_ENUM = "ENUM_CUDA_DEV_MEM_EVENT_OPER"
# documented ids (legacy exports: "0 if memory was allocated and 1 if deallocated")
ALLOCATION = ("CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", 0)
DEALLOCATION = ("CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", 1)

COLUMNS = (
    Column("start", ("start",)),
    Column("pid", ("globalPid",), transform=PID_FROM_GLOBAL),
    Column("device", ("deviceId",)),
    Column("context", ("contextId",), fallback="0"),
    Column("address", ("address",)),
    Column("bytes", ("bytes",)),
    Column("mem_kind", ("memKind",)),
    Column("operation", ("memoryOperationType",)),
    Column("correlation", ("correlationId",)),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pl.DataFrame]:
    """Allocation/free rows with `is_free` (null when the operation is neither)."""
    dealloc = report.enums.id_of(OPERATION_ENUM, *DEALLOCATION)
    alloc = report.enums.id_of(OPERATION_ENUM, *ALLOCATION)
    c = pl.col
    for chunk in read_chunks(report, TABLE, COLUMNS, chunk_rows):
        yield chunk.with_columns(
            pl.when(c("operation") == dealloc).then(pl.lit(True))
            .when(c("operation") == alloc).then(pl.lit(False)).alias("is_free"))
