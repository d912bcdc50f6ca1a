"""CUDA runtime and driver API calls (`CUPTI_ACTIVITY_KIND_RUNTIME`) on CPU threads."""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from ..report.report import Report
from .base import (CPU_CALL, DEFAULT_CHUNK_ROWS, Column, has_rows,
                   read_chunks)

KIND = "cuda_api"
TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"

COLUMNS = CPU_CALL + (
    Column("correlation", ("correlationId",)),
    Column("name_id", ("nameId",)),
    Column("return_value", ("returnValue",), attribute=True),
)


def available(report: Report) -> bool:
    return has_rows(report, TABLE)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS, attributes: bool = True
         ) -> Iterator[pl.DataFrame]:
    """Normalised calls; without `attributes`, the return value is null."""
    yield from read_chunks(report, TABLE, COLUMNS, chunk_rows, windowed=True,
                           attributes=attributes)


_VERSION_SUFFIX = re.compile(r"_v\d+$")


def normalise_name(name: str) -> str:
    """Drop the ABI version suffix nsys shows (`cudaLaunchKernel_v7000` -> `cudaLaunchKernel`)."""
    return _VERSION_SUFFIX.sub("", name)
