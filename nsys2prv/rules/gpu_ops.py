"""The GPU operations table the two GPU rules share: work per (process, device), plus the
profiler overheads that the user cannot remove.

As in nsys, each graphics/compute API is one table of operations, analysed on its own:
CUDA (kernels, memcpy and memset rows), Vulkan, OpenGL and DX12 workloads. Only operations
with a start time > 0 count. An overhead of the API's profiler (e.g. "CUDA profiling data flush
overhead") recorded on any thread of a process counts as GPU work on every device of that
process, when it lies strictly inside the device's span (first operation start to last
operation end): a GPU that waits for the profiler is not starved by the application.

Rows come in the order nsys scans them (overheads first, then each table in row order), which
decides which context id a gap or a chunk reports when several qualify.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .base import RuleInput, Skip, pid_of, sql_text

OVERHEAD_TABLE = "PROFILER_OVERHEAD"
OPS_SCHEMA = {"pid": pl.Int64, "device": pl.Int64, "context": pl.Int64, "start": pl.Int64,
              "end": pl.Int64}


@dataclass(frozen=True)
class GpuApi:
    """Where one API's GPU operations live and which overheads count for it."""

    name: str
    tables: tuple[str, ...]
    owner: str  # the column with the serialised process id
    device: str
    context: str
    overheads: tuple[str, ...]
    needs_device_column: bool = False


GPU_APIS = (
    GpuApi("cuda", ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                    "CUPTI_ACTIVITY_KIND_MEMSET"), "globalPid", "deviceId", "contextId",
           ("CUDA profiling data flush overhead", "CUDA profiling stop overhead",
            "CUDA profiling overhead")),
    GpuApi("vulkan", ("VULKAN_WORKLOAD",), "globalTid", "gpu", "contextId",
           ("Vulkan profiling overhead",), needs_device_column=True),
    GpuApi("opengl", ("OPENGL_WORKLOAD",), "globalTid", "gpu", "contextId",
           ("OpenGL profiling overhead",)),
    GpuApi("dx12", ("DX12_WORKLOAD",), "globalTid", "gpu", "shortContextId",
           ("DX12 profiling overhead",), needs_device_column=True),
)


def present_apis(inp: RuleInput) -> list[tuple[GpuApi, list[str]]]:
    """The APIs with at least one table (empty or not), each with its real table names."""
    found = []
    for api in GPU_APIS:
        tables = [t for t in (inp.table(name) for name in api.tables) if t is not None]
        if tables:
            found.append((api, tables))
    return found


def check_gpu_tables(inp: RuleInput) -> None:
    """Skip an export with no GPU operation table, or a graphics table without its GPU id."""
    apis = present_apis(inp)
    if not apis:
        raise Skip(f"{inp.name} has no GPU operations to analyse (no CUDA kernel, memcpy or "
                   "memset trace, nor a graphics workload)")
    for api, tables in apis:
        if api.needs_device_column and api.device not in inp.columns(tables[0]):
            raise Skip(f"{inp.name}: {tables[0]} has no '{api.device}' column (an old "
                       "export); export the report again with a newer Nsight Systems")


def operations(inp: RuleInput, api: GpuApi, tables: list[str]) -> pl.DataFrame:
    """One API's GPU operations (pid, device, context, start, end), overhead rows first."""
    parts = []
    for table in tables:
        raw = inp.read(table, {"start": pl.Int64, "end": pl.Int64, api.owner: pl.Int64,
                               api.device: pl.Int64, api.context: pl.Int64}, '"start" > 0')
        parts.append(raw.select(pid_of(pl.col(api.owner)).alias("pid"),
                                pl.col(api.device).alias("device"),
                                pl.col(api.context).alias("context"), "start", "end"))
        del raw
    ops = pl.concat(parts) if parts else pl.DataFrame(schema=OPS_SCHEMA)
    ops = ops.cast(OPS_SCHEMA)  # type: ignore[arg-type]
    overhead = overhead_rows(inp, api, device_spans(ops))
    return pl.concat([overhead, ops]) if overhead.height else ops


def device_spans(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (pid, device): first start, last end, and the context of the first operation
    that reaches the last end (the one nsys reports for the device)."""
    return ops.group_by("pid", "device", maintain_order=True).agg(
        span_start=pl.col("start").min(),
        span_end=pl.col("end").max(),
        context=pl.col("context").filter(pl.col("end") == pl.col("end").max()).first(),
    ).sort("device", "pid", maintain_order=True)


def overhead_rows(inp: RuleInput, api: GpuApi, spans: pl.DataFrame) -> pl.DataFrame:
    """The API's profiler overheads as operations on each device of their process."""
    table = inp.table(OVERHEAD_TABLE)
    names = inp.string_ids(*(f"value = {sql_text(n)}" for n in api.overheads))
    if table is None or names.height == 0 or spans.height == 0:
        return pl.DataFrame(schema=OPS_SCHEMA)
    ids = ", ".join(str(i) for i in names["id"].to_list())
    raw = inp.read(table, {"start": pl.Int64, "end": pl.Int64, "globalTid": pl.Int64},
                   f'"nameId" IN ({ids})')
    rows = raw.select("_row", "start", "end", pid_of(pl.col("globalTid")).alias("pid"))
    joined = rows.join(spans.with_row_index("_span"), on="pid", how="inner")
    return joined.filter((pl.col("start") > pl.col("span_start"))
                         & (pl.col("end") < pl.col("span_end"))).sort(
        "_row", "_span").select(*OPS_SCHEMA).cast(OPS_SCHEMA)  # type: ignore[arg-type]
