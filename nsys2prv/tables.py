"""Normalised tables of a report as polars DataFrames (`.to_pandas()` for pandas).

Names are resolved to strings here; times are the report's own nanoseconds.
"""

from __future__ import annotations

import polars as pl

from .report.report import Report
from .sources import cuda_api as _api
from .sources import kernels as _kernels
from .sources import memory as _memory
from .sources import nvtx as _nvtx
from .sources import osrt as _osrt


def _all(chunks) -> pl.DataFrame | None:
    parts = list(chunks)
    return pl.concat(parts, how="vertical") if parts else None


def _named(report: Report, df: pl.DataFrame, id_col: str, name_col: str) -> pl.DataFrame:
    strings = report.strings.rename({"id": id_col, "value": name_col})
    return df.join(strings, on=id_col, how="left", maintain_order="left")


def _empty(columns) -> pl.DataFrame:
    return pl.DataFrame(schema={c.name: c.dtype for c in columns})


def kernels(report: Report) -> pl.DataFrame:
    """One row per kernel: times, pid, device/context/stream, names, launch geometry."""
    df = _all(_kernels.read(report)) if _kernels.available(report) else None
    if df is None:
        df = _empty(_kernels.COLUMNS)
    df = _named(report, df, "short_name_id", "short_name")
    return _named(report, df, "name_id", "name")


def memory_operations(report: Report) -> pl.DataFrame:
    """memcpy and memset rows in one table (`operation` is 'memcpy' or 'memset')."""
    parts = []
    if _memory.memcpy_available(report):
        parts += [d.with_columns(pl.lit("memcpy").alias("operation"))
                  for d in _memory.read_memcpy(report)]
    if _memory.memset_available(report):
        parts += [d.with_columns(pl.lit("memset").alias("operation"))
                  for d in _memory.read_memset(report)]
    if not parts:
        return _empty(_memory.MEMCPY_COLUMNS).with_columns(
            pl.lit(None, pl.Utf8).alias("operation"))
    return pl.concat(parts, how="vertical")


def cuda_api(report: Report) -> pl.DataFrame:
    """CUDA runtime/driver calls with their names."""
    df = _all(_api.read(report)) if _api.available(report) else None
    return _named(report, df if df is not None else _empty(_api.COLUMNS), "name_id", "name")


def nvtx(report: Report) -> pl.DataFrame:
    """NVTX ranges and marks with `kind` (pushpop/startend/mark), `name` and `domain`."""
    df = _all(_nvtx.read(report)) if _nvtx.available(report) else None
    if df is None:
        df = _empty(_nvtx.COLUMNS)
    kinds = _nvtx.event_type_ids(report)
    kind = pl.lit(None, pl.Utf8)
    for k, ids in kinds.items():
        kind = pl.when(pl.col("event_type").is_in(sorted(ids))).then(pl.lit(k)).otherwise(kind)
    df = _named(report, df, "text_id", "text_string").with_columns(
        pl.coalesce("text_string", "text").alias("name"), kind.alias("kind")).drop("text_string")
    domains = _nvtx.domains(report).rename({"name": "domain"})
    return df.join(domains, on=["pid", "domain_id"], how="left", maintain_order="left")


def osrt(report: Report) -> pl.DataFrame:
    """OS runtime calls with their names."""
    df = _all(_osrt.read(report)) if _osrt.available(report) else None
    return _named(report, df if df is not None else _empty(_osrt.COLUMNS), "name_id", "name")


def threads(report: Report) -> pl.DataFrame:
    """(pid, tid, thread_name) of named threads."""
    return report.thread_names


def devices(report: Report) -> pl.DataFrame:
    """(device, gpu_name) of the GPUs of the target system."""
    return report.gpus


def processes(report: Report) -> pl.DataFrame:
    return report.processes


def gpu_metrics(report: Report) -> pl.DataFrame:
    """GPU metric samples (time, GPU, metric name, value), from either export form."""
    from .sources import gpu_metrics as _metrics

    if not _metrics.available(report):
        return pl.DataFrame()
    df = _all(_metrics.read(report))
    if df is None:
        return pl.DataFrame()
    names = _metrics.metric_table(report).select("metric", pl.col("name").alias("metric_name"))
    return df.join(names, on="metric", how="left", maintain_order="left")


def mpi(report: Report) -> pl.DataFrame:
    """MPI calls (native MPI_* tables, or the NVTX "MPI" domain of older exports)."""
    from .sources import mpi as _mpi

    df = _all(_mpi.read(report)) if _mpi.available(report) else None
    return df if df is not None else pl.DataFrame()


def openacc(report: Report) -> pl.DataFrame:
    """OpenACC data, launch and other records."""
    from .sources import openacc as _acc

    df = _all(_acc.read(report)) if _acc.available(report) else None
    return df if df is not None else pl.DataFrame()


def nccl(report: Report) -> pl.DataFrame:
    """NCCL calls (NVTX ranges of NCCL) with their decoded payload fields."""
    from .sources import nccl as _nccl

    df = _all(_nccl.read(report)) if _nccl.available(report) else None
    return df if df is not None else pl.DataFrame()
