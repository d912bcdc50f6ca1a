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

import numpy as np
import polars as pl

from .base import RuleInput, Skip, pid_of, sql_text

OVERHEAD_TABLE = "PROFILER_OVERHEAD"
OPS_SCHEMA = {"pid": pl.Int64, "device": pl.Int64, "context": pl.Int64, "start": pl.Int64,
              "end": pl.Int64}
_DEVICE_BITS = 39  # pid (24 bits) and device packed in one int64 key


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


@dataclass
class Operations:
    """One API's GPU operations (`frame`: pid, device, context, start, end; overheads first),
    their per-(pid, device) spans (see `device_spans`) and each operation's span row
    (`span_of`, -1 for none)."""

    frame: pl.DataFrame
    spans: pl.DataFrame
    span_of: np.ndarray


def operations(inp: RuleInput, api: GpuApi, tables: list[str]) -> Operations:
    """Read one API's GPU operations and add the overheads that count for it; read once
    for the rules of one run that ask for the same (gpu_gaps and gpu_time_util: 1.5 s of
    reading on 4.7M operations). Read only: the rules share the arrays."""
    key = ("operations", api, tuple(tables), inp.window)
    if key not in inp.shared:
        inp.shared.clear()  # one kept at a time: its memory is that of one rule
        inp.shared[key] = _operations(inp, api, tables)
    return inp.shared[key]


def _operations(inp: RuleInput, api: GpuApi, tables: list[str]) -> Operations:
    parts = []
    for table in tables:
        for raw in inp.chunks(table, {"start": pl.Int64, "end": pl.Int64, api.owner: pl.Int64,
                                      api.device: pl.Int64, api.context: pl.Int64},
                              '"start" > 0'):
            parts.append(raw.select(pid_of(pl.col(api.owner)).alias("pid"),
                                    pl.col(api.device).alias("device"),
                                    pl.col(api.context).alias("context"), "start",
                                    "end").cast(OPS_SCHEMA))  # type: ignore[arg-type]
    ops = _contiguous(parts)
    del parts
    spans, span_of = device_spans(ops)
    # overheads lie strictly inside a span: they change no span's ends nor its context
    overhead, overhead_span = overhead_rows(inp, api, spans)
    if overhead.height == 0:
        return Operations(ops, spans, span_of)
    return Operations(pl.concat([overhead, ops]), spans, np.concatenate([overhead_span,
                                                                       span_of]))


def _contiguous(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The parts as one frame with one buffer per column (numpy then reads it without a
    copy), joined a column at a time so that only one column is ever held twice."""
    if not parts:
        return pl.DataFrame(schema=OPS_SCHEMA)
    columns = {}
    for name in OPS_SCHEMA:
        columns[name] = pl.concat([p[name] for p in parts], rechunk=True)
        parts[:] = [p.drop(name) for p in parts]
    return pl.DataFrame(columns)


def device_spans(ops: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """Per (pid, device), in that order (nulls first, as SQLite sorts): first start
    (`span_start`), last end (`span_end`) and the context of the first operation that
    reaches the last end (the one nsys reports for the device); and for each operation the
    row of its span, -1 when its pid or device is null (nsys' joins never match a null).

    Done with numpy on one int64 key per operation: a polars group-by gathers every column
    per group, several times the size of a large table.
    """
    keyed = (ops["pid"].is_not_null() & ops["device"].is_not_null()).to_numpy()
    whole = bool(keyed.all())
    rows = None if whole else np.flatnonzero(keyed)

    def column(name: str) -> np.ndarray:
        values = ops[name] if whole else ops[name].gather(rows)
        return values.to_numpy()

    device = column("device")
    packed = device.size == 0 or (device.min() >= 0 and device.max() < 1 << _DEVICE_BITS)
    if packed:
        key = column("pid") << _DEVICE_BITS
        key |= device
    else:  # a device id too wide to pack beside the pid: rank the (pid, device) pairs
        pairs = ops if whole else ops[rows]
        key = pairs.select(pl.struct("pid", "device").rank("dense")).to_series().to_numpy()
        key = key.astype(np.int64, copy=False)
    del device
    keys = np.sort(pl.Series(key, dtype=pl.Int64).unique().to_numpy())
    index = np.searchsorted(keys, key)
    del key
    start, end = column("start"), column("end")
    span_start = np.full(keys.size, np.iinfo(np.int64).max)
    span_end = np.full(keys.size, np.iinfo(np.int64).min)
    np.minimum.at(span_start, index, start)
    np.maximum.at(span_end, index, end)
    at_end = np.flatnonzero(end == span_end[index])
    del start, end
    owner = np.full(keys.size, index.size)  # the first operation reaching the span's end
    np.minimum.at(owner, index[at_end], at_end)
    if not whole:
        owner = rows[owner]
    if packed:
        pid = pl.Series(keys >> _DEVICE_BITS, dtype=pl.Int64)
        device_of = pl.Series(keys & ((1 << _DEVICE_BITS) - 1), dtype=pl.Int64)
    else:
        some = np.full(keys.size, index.size)  # an operation of each span
        np.minimum.at(some, index, np.arange(index.size))
        some = some if whole else rows[some]
        pid, device_of = ops["pid"].gather(some), ops["device"].gather(some)
    spans = pl.DataFrame({"pid": pid, "device": device_of,
                          "span_start": pl.Series(span_start, dtype=pl.Int64),
                          "span_end": pl.Series(span_end, dtype=pl.Int64),
                          "context": ops["context"].gather(owner)})
    if whole:
        return spans, index
    span_of = np.full(ops.height, -1, dtype=np.int64)
    span_of[rows] = index
    # spans of a null pid or device: nsys lists them, with no work in them
    unkeyed = ops.filter(~pl.Series(keyed)).group_by("pid", "device", maintain_order=True).agg(
        span_start=pl.col("start").min(), span_end=pl.col("end").max(),
        context=pl.col("context").get(pl.col("end").arg_max()))
    both = pl.concat([unkeyed.with_columns(_span=pl.lit(-1, pl.Int64)),
                      spans.with_columns(_span=pl.int_range(pl.len(), dtype=pl.Int64))],
                     how="vertical").sort("pid", "device", maintain_order=True)
    placed = both["_span"].to_numpy()
    moved = np.empty(keys.size, dtype=np.int64)
    moved[placed[placed >= 0]] = np.flatnonzero(placed >= 0)
    span_of[rows] = moved[index]
    return both.drop("_span"), span_of


def overhead_rows(inp: RuleInput, api: GpuApi, spans: pl.DataFrame
                  ) -> tuple[pl.DataFrame, np.ndarray]:
    """The API's profiler overheads as operations on each device of their process, and
    the span row of each."""
    table = inp.table(OVERHEAD_TABLE)
    names = inp.string_ids(*(f"value = {sql_text(n)}" for n in api.overheads))
    if table is None or names.height == 0 or spans.height == 0:
        return pl.DataFrame(schema=OPS_SCHEMA), np.zeros(0, dtype=np.int64)
    ids = ", ".join(str(i) for i in names["id"].to_list())
    raw = inp.read(table, {"start": pl.Int64, "end": pl.Int64, "globalTid": pl.Int64},
                   f'"nameId" IN ({ids})')
    rows = raw.select("_row", "start", "end", pid_of(pl.col("globalTid")).alias("pid"))
    # nsys pairs each overhead with the devices of its process in (device, pid) order
    by_device = spans.with_row_index("_span").sort("device", "pid", maintain_order=True
                                                   ).with_row_index("_order")
    joined = rows.join(by_device, on="pid", how="inner").filter(
        (pl.col("start") > pl.col("span_start")) & (pl.col("end") < pl.col("span_end"))
    ).sort("_row", "_order")
    frame = joined.select(*OPS_SCHEMA).cast(OPS_SCHEMA)  # type: ignore[arg-type]
    return frame, joined["_span"].cast(pl.Int64).to_numpy()
