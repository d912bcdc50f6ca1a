"""CUDA kernels -> kernel events on GPU stream rows (NCCL kernels with their own type),
Running states, and launch arrows from the CUDA call that started them. A kernel's start
carries its launch configuration and what it allows on its GPU (blocks per SM, occupancy,
waves, the grid's ceilings: `_launch.py`)."""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import kernels as source
from .. import records as R
from .. import registry as reg
from . import _launch, cuda_api
from ._projected import keep_work
from .base import Context, NameClassifier, Translator, arrows, fix_times, intervals, \
    keep_for_metrics, name_value, push, start_end


NCCL_KERNELS = "nccl_kernels"  # ctx.shared: list of frames of this report's NCCL kernels


def is_nccl(name: str) -> bool:
    return name.lower().startswith("nccl")


def translate(report: Report, ctx: Context) -> None:
    nccl = NameClassifier(ctx.names, "kernel_names", is_nccl, pl.Boolean, False)
    index = cuda_api.index(ctx)
    c = pl.col
    ctx.shared[NCCL_KERNELS] = []
    for chunk in source.read(report, ctx.chunk_rows, attributes=ctx.options.attributes):
        df = fix_times(chunk, ctx, "kernels")
        df = _launch.statistics(df, report, ctx)
        df = df.with_columns(ctx.rows.gpu_rows(df).alias("row"),
                             nccl(df["short_name_id"]).alias("is_nccl"))
        df = name_value(df, ctx, "kernel_names", "short_name_id", "kernels")
        df = name_value(df, ctx, "kernel_names", "name_id", "kernels (full name)")
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("kernels", df.height)
        keep_for_metrics(ctx, report, "kernel", df.select(
            "start", "end", "pid", "device", "row", "row_id", "name_id", "sms",
            "sm_ceiling_pv", "warps_ceiling_pv"))
        ktype = pl.when(c("is_nccl")).then(pl.lit(reg.NCCL_KERNEL)).otherwise(
            pl.lit(reg.CUDA_KERNEL))
        geometry = R.numeric_pairs(
            (reg.CUDA_KERNEL_BLOCKS, c("grid_x") * c("grid_y") * c("grid_z")),
            (reg.CUDA_KERNEL_THREADS, c("block_x") * c("block_y") * c("block_z")),
            (reg.CUDA_KERNEL_DYN_SHMEM, c("dynamic_smem")),
            (reg.KERNEL_GRID_X, c("grid_x")), (reg.KERNEL_GRID_Y, c("grid_y")),
            (reg.KERNEL_GRID_Z, c("grid_z")), (reg.KERNEL_BLOCK_X, c("block_x")),
            (reg.KERNEL_BLOCK_Y, c("block_y")), (reg.KERNEL_BLOCK_Z, c("block_z")),
            (reg.KERNEL_REGISTERS, c("registers")), (reg.KERNEL_STATIC_SHMEM, c("static_smem")),
            (reg.KERNEL_LOCAL_MEM_THREAD, c("local_mem_thread")),
            (reg.KERNEL_LOCAL_MEM_TOTAL, c("local_mem_total")),
            (reg.CORRELATION_ID, c("correlation")),
            (reg.KERNEL_CARVEOUT, c("carveout")), (reg.KERNEL_CLUSTER_SIZE, c("cluster_size")),
            (reg.KERNEL_GPU_SMS, c("sms")), (reg.KERNEL_BLOCKS_PER_SM, c("blocks_per_sm")),
            (reg.KERNEL_OCCUPANCY_LIMITER, c("limiter")),
            (reg.KERNEL_OCCUPANCY, c("occupancy_pv")),
            (reg.KERNEL_RESIDENT_BLOCKS, c("resident")), (reg.KERNEL_WAVES, c("waves_pv")),
            (reg.KERNEL_SM_ACTIVE_CEILING, c("sm_ceiling_pv")),
            (reg.KERNEL_WARPS_CEILING, c("warps_ceiling_pv")))
        frames = start_end(df, R.SRC_KERNEL, ktype, c("value_short_name_id"),
                           start_text=geometry, end_text=R.numeric_pairs((reg.KERNEL_FULL_NAME, pl.lit(0))),
                           start_type2=reg.KERNEL_FULL_NAME, start_value2=c("value_name_id"))
        push(ctx, frames)
        ctx.intervals(intervals(df, reg.STATE_RUNNING, R.SRC_KERNEL))
        nccl_kernels = df.filter(c("is_nccl"))
        if nccl_kernels.height:
            # NCCL kernels end together on all ranks: a clock sync point
            ctx.sync_point("NCCL", nccl_kernels.sort("start")["end"][0])
            # kept for the NCCL kind (translated later), so it need not read the table again
            ctx.shared.setdefault(NCCL_KERNELS, []).append(nccl_kernels.select(
                "row_id", "pid", "correlation", "start", "end", "row", "short_name_id"))
        launched(df, ctx, index, "kernels", R.SRC_KERNEL, pl.lit(0, pl.Int64),
                 pl.when(c("is_nccl")).then(pl.lit(reg.TAG_NCCL_LAUNCH))
                 .otherwise(pl.lit(reg.TAG_KERNEL_LAUNCH)))


def launched(df: pl.DataFrame, ctx: Context, index: cuda_api.CorrelationIndex, what: str,
             src: int, size: pl.Expr, tag: pl.Expr | int) -> None:
    """Arrows from the CUDA call (matched on pid + correlation id) to each GPU activity; the
    activities with their call are kept for the NVTX ranges projected onto the GPU."""
    if index.height == 0 or df.height == 0:
        return
    joined = index.join(df, how="inner")
    if df.height > joined.height:
        ctx.count(f"{what} without a matching CUDA call", df.height - joined.height)
    arrows(joined, ctx, "api_start", "api_row", "start", "row", size, tag, src)
    ctx.count("launch arrows", joined.height)
    keep_work(ctx, ctx.report, joined)


TRANSLATORS = (Translator("kernels", 20, "CUDA kernels (NCCL kernels included)",
                          source.available, translate,
                          (source.TABLE,)),)
