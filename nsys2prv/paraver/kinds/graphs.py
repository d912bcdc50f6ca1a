"""CUDA graphs -> graph executions on GPU stream rows (Running, with graph ids, and an arrow
from the cudaGraphLaunch that started them), graph ids and node ids on the kernels and copies
that graph nodes ran, and CPU-side graph creation/instantiation/clone events.

Node-level activities are written by the kernel/memcpy/memset kinds; this kind only adds the
ids to them, with the activity's own ordering fields (src, ord = its rowid) so the ids follow
it to an overlap lane.
"""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import graphs as source
from .. import records as R
from .. import registry as reg
from ..registry import graphs as greg
from . import cuda_api
from .base import Context, Translator, fix_times, intervals, name_value, push, start_end
from .kernels import launched

SRC_GRAPH = R.SRC_GRAPH  # graph executions: (src, ord) identifies them when moved to a lane
NODE_SRC = {"kernel": R.SRC_KERNEL, "memcpy": R.SRC_MEMCPY, "memset": R.SRC_MEMSET}


def _zero_if(*items: tuple[int, pl.Expr]) -> pl.Expr:
    """End pairs: 0 for each item that had a value at the start."""
    return R.pairs(*[(t, pl.when(e.is_not_null()).then(0)) for t, e in items])


def translate(report: Report, ctx: Context) -> None:
    _executions(report, ctx)
    _nodes(report, ctx)
    _events(report, ctx)


def _executions(report: Report, ctx: Context) -> None:
    """Graph-level trace: one region per graph launch on its stream row."""
    c = pl.col
    index = cuda_api.index(ctx)
    for chunk in source.read_executions(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, "CUDA graph executions")
        df = df.with_columns(ctx.rows.gpu_rows(df).alias("row"))
        label = pl.format("graph {} exec {}", c("graph_id").fill_null(-1),
                          c("graph_exec_id").fill_null(-1))
        labels = df.select(label.alias("l"))["l"]
        df = df.with_columns(ctx.names.intern("cuda_graphs", labels).alias("value"))
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("cuda_graph_executions", df.height)
        ids = ((greg.GRAPH_ID, c("graph_id")), (greg.GRAPH_EXEC_ID, c("graph_exec_id")))
        push(ctx, start_end(df, SRC_GRAPH, greg.GRAPH_EXECUTION, c("value"),
                            start_text=R.pairs(*ids), end_text=_zero_if(*ids)))
        ctx.intervals(intervals(df, reg.STATE_RUNNING, SRC_GRAPH))
        launched(df, ctx, index, "CUDA graph executions", SRC_GRAPH, pl.lit(0, pl.Int64),
                 greg.TAG_GRAPH_LAUNCH)


def _nodes(report: Report, ctx: Context) -> None:
    """Node-level trace: node id (and graph id when exported) on each activity of a node."""
    c = pl.col
    for activity, chunk in source.read_nodes(report, ctx.chunk_rows):
        df = chunk.filter(c("start").is_not_null() & c("end").is_not_null())
        df = df.with_columns(ctx.rows.gpu_rows(df).alias("row"),
                             pl.max_horizontal("start", "end").alias("end"))
        ctx.spans.add(df["row"], df["start"], df["end"])  # the row exists even with --only
        ctx.count(f"cuda_graph_node_{activity}s", df.height)
        ids = ((greg.GRAPH_ID, c("graph_id")),)
        push(ctx, start_end(df, NODE_SRC[activity], greg.GRAPH_NODE_ID, c("node_id"),
                            start_text=R.pairs(*ids), end_text=_zero_if(*ids)))


def _class_map(report: Report) -> dict[int, int]:
    """Export's eventClass id -> documented id (by enum name; identity without the enum)."""
    ids = report.enums.ids("ENUM_NSYS_EVENT_CLASS")
    return {ids[name]: doc for name, doc in greg.GRAPH_EVENT_CLASS_NAMES.items() if name in ids}


def _events(report: Report, ctx: Context) -> None:
    """CPU-side graph events: class, ids and function on the calling thread."""
    c = pl.col
    mapping = _class_map(report) or {k: k for k in greg.GRAPH_EVENT_CLASSES}
    for chunk in source.read_events(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, "CUDA graph API events")
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"),
                             # rowids of the two tables must not collide as tie-breakers
                             (c("row_id") * 2 + c("source")).alias("row_id"))
        df = name_value(df, ctx, "cuda_graph_functions", "name_id", "CUDA graph API events")
        doc = c("event_class").replace_strict(mapping, default=None, return_dtype=pl.Int64)
        df = df.with_columns(pl.when(doc.is_not_null()).then(doc + 1)
                             .otherwise(pl.lit(greg.OTHER_GRAPH_EVENT)).alias("class_value"))
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("cuda_graph_api_events", df.height)
        ids = ((greg.GRAPH_ID, c("graph_id")), (greg.GRAPH_EXEC_ID, c("graph_exec_id")),
               (greg.GRAPH_NODE_ID, c("node_id")),
               (greg.GRAPH_ORIGINAL_ID, c("original_graph_id")),
               (greg.GRAPH_ORIGINAL_NODE_ID, c("original_node_id")))
        frames = start_end(df, R.SRC_API, greg.GRAPH_EVENT, c("class_value"),
                           start_text=R.pairs(*ids), end_text=_zero_if(*ids))
        frames += start_end(df, R.SRC_API, greg.GRAPH_FUNCTION, c("value_name_id"))
        push(ctx, frames)


TRANSLATORS = (Translator("graphs", 35, "CUDA graphs: executions, node ids, creation events",
                          source.available, translate,
                          (source.GRAPH_TRACE, source.GRAPH_EVENTS, source.NODE_EVENTS)),)
