"""OpenACC records -> Extrae's OpenACC regions (66000000/1/2) on the CPU thread that ran them,
with their source file, line, function, variable, bytes, kernel name and launch geometry
(registry/openacc.py), the stream they target, and CPU states for the leaf operations.

States follow Extrae's OpenACC semantics (upload/download: Memory transfer, launch:
Configuring accelerator, wait: Synchronization) but only for these *leaf* operations. The
enclosing constructs (compute construct, enter/exit data, update, init) get no state: the
tiling keeps the outer interval's state on a CPU row (pipeline/tiling.py), so a compute
construct's state would hide the waits and CUDA calls inside it for its whole length.

Target stream: launches, uploads, downloads and waits on an NVIDIA device carry their CUDA
stream id (67900011) and, when the report has a row for (pid, cuDeviceId, cuContextId,
cuStreamId), Extrae's "Stream ID destination" (63000008, the Paraver thread of that row).
OpenACC records are host-side: nothing is written on the stream rows.

The three tables' rowids overlap, so records are ordered by `rowid * 3 + table`.
"""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import openacc as source
from .. import records as R
from .. import registry as reg
from ..registry import openacc as acc
from ..values import STRING_ID_OFFSET
from .base import Context, Translator, fix_times, intervals, push, start_end

SRC_OPENACC = R.SRC_OPENACC

LEAF_STATES = {
    "ENQUEUE_UPLOAD": reg.STATE_MEMORY_TRANSFER, "ENQUEUE_DOWNLOAD": reg.STATE_MEMORY_TRANSFER,
    "ENQUEUE_LAUNCH": reg.STATE_CONFIG_ACCEL, "WAIT": reg.STATE_SYNC,
    "IMPLICIT_WAIT": reg.STATE_SYNC,
}
STREAM_KINDS = ("ENQUEUE_UPLOAD", "ENQUEUE_DOWNLOAD", "ENQUEUE_LAUNCH", "WAIT", "IMPLICIT_WAIT")

# (type, value family, column) of the name-valued attributes: value at start, 0 at end
NAMES = ((acc.OPENACC_SOURCE_FILE, "openacc_files", "file_id"),
         (acc.OPENACC_FUNCTION, "openacc_functions", "function_id"),
         (acc.OPENACC_VARIABLE, "openacc_variables", "variable_id"),
         (acc.OPENACC_KERNEL, "kernel_names", "kernel_id"))


def kind_table(report: Report) -> pl.DataFrame:
    """CUPTI event kind id -> Paraver type and value, state, and whether it targets a stream.
    Ids come from the export's ENUM_OPENACC_EVENT_KIND, else CUPTI's numbering."""
    ids = {**acc.CUPTI_KIND_IDS, **source.event_kind_ids(report)}
    rows = [(ids[name], t, v, LEAF_STATES.get(name), name in STREAM_KINDS)
            for name, (t, v) in acc.CUPTI_KINDS.items() if name in ids]
    return pl.DataFrame(rows, orient="row", schema={
        "event_kind": pl.Int64, "ptype": pl.Int64, "pvalue": pl.Int64, "state": pl.Int8,
        "to_stream": pl.Boolean})


def translate(report: Report, ctx: Context) -> None:
    kinds = kind_table(report)
    nvidia = source.device_type_ids(report).get("acc_device_nvidia", acc.ACC_DEVICE_NVIDIA)
    c = pl.col
    for chunk in source.read(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, "OpenACC records")
        n = df.select(c("pid").is_null().sum()).item()
        if n:
            ctx.warn("OpenACC records without a thread (dropped)", n)
            df = df.filter(c("pid").is_not_null())
        df = df.join(kinds, on="event_kind", how="left", maintain_order="left")
        n = df.select(c("ptype").is_null().sum()).item()
        if n:
            ctx.warn("OpenACC records of an unknown event kind (dropped)", n)
            df = df.filter(c("ptype").is_not_null())
        if df.height == 0:
            continue
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"),
                             (c("row_id") * len(source.TABLES) + c("table")).alias("row_id"))
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("openacc", df.height)
        frames = start_end(
            df, SRC_OPENACC, c("ptype"), c("pvalue"),
            start_text=R.pairs(
                (acc.OPENACC_LINE, c("line")),
                (acc.OPENACC_BYTES, pl.when(c("bytes") > 0).then(c("bytes"))),
                (acc.OPENACC_GANGS, c("gangs")), (acc.OPENACC_WORKERS, c("workers")),
                (acc.OPENACC_VECTOR_LENGTH, c("vector_length")),
                (acc.OPENACC_DEVICE_TYPE, c("device_type") + 1),
                (acc.OPENACC_STREAM, pl.when(c("to_stream") & (c("device_type") == nvidia))
                 .then(c("cu_stream")))),
            end_text=R.pairs((acc.OPENACC_LINE, pl.when(c("line").is_not_null()).then(0))))
        for type_, family, column in NAMES:
            named = df.filter(c(column).is_not_null())
            if named.height:
                ctx.names.use(family, named[column])
                frames += start_end(named, SRC_OPENACC, type_, c(column) + STRING_ID_OFFSET)
        frames += _stream_destination(df, ctx, nvidia)
        push(ctx, frames)
        leaves = df.filter(c("state").is_not_null())
        if leaves.height:
            ctx.intervals(intervals(leaves, c("state"), SRC_OPENACC))


def _stream_destination(df: pl.DataFrame, ctx: Context, nvidia: int) -> list[pl.DataFrame]:
    c = pl.col
    ops = df.filter(c("to_stream") & (c("device_type") == nvidia)
                    & c("cu_stream").is_not_null())
    if ops.height == 0:
        return []
    ops = ops.with_columns(ctx.rows.lookup_gpu(ops.select(
        "pid", c("cu_device").alias("device"), c("cu_context").alias("context"),
        c("cu_stream").alias("stream"))).alias("stream_row")).filter(
        c("stream_row").is_not_null())
    ctx.count("openacc_with_stream", ops.height)
    return [ops.select(R.events(c("start"), c("row"), R.start_phase(c("start"), c("end")),
                                SRC_OPENACC, c("row_id"), reg.CUDA_STREAM_DEST,
                                c("stream_row").cast(pl.Int64), sub=-c("end")))]


TRANSLATORS = (Translator("openacc", 65, "OpenACC regions (CUPTI OpenACC records)",
                          source.available, translate, source.TABLES),)
