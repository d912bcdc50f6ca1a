"""CUDA runtime and driver API calls (`CUPTI_ACTIVITY_KIND_RUNTIME`) on CPU threads."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

import polars as pl

from ..report.report import Report
from . import callchains
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "cuda_api"
TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"

COLUMNS = CPU_CALL + (
    Column("correlation", ("correlationId",)),
    Column("name_id", ("nameId",)),
    Column("return_value", ("returnValue",), attribute=True),
    # CUDA_CALLCHAINS.id of the call's stack (callchains.cuda_chain: the id + 1)
    Column("chain", ("callchainId",), transform=callchains.cuda_chain),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def has_stacks(report: Report) -> bool:
    """Whether the export kept call stacks of CUDA API calls (`--cudabacktrace`)."""
    return callchains.available(report, callchains.CUDA)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS, attributes: bool = True
         ) -> Iterator[pl.DataFrame]:
    """Normalised calls; without `attributes`, the return value is null; `chain` is null
    everywhere when the export has no stacks (the column is then not read)."""
    columns = COLUMNS if has_stacks(report) else tuple(
        replace(c, candidates=()) if c.name == "chain" else c for c in COLUMNS)
    yield from read_chunks(report, TABLE, columns, chunk_rows, windowed=True,
                           attributes=attributes)


_VERSION_SUFFIX = re.compile(r"_v\d+$")


def normalise_name(name: str) -> str:
    """Drop the ABI version suffix nsys shows (`cudaLaunchKernel_v7000` -> `cudaLaunchKernel`)."""
    return _VERSION_SUFFIX.sub("", name)
