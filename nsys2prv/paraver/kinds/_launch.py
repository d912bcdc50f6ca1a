"""What each kernel's launch allows, for the kernel records and the GPU metrics model: its
GPU's limits joined to it, the occupancy calculator and the grid's ceilings
(`analysis/occupancy.py`) computed once per distinct launch configuration of a chunk.

A kernel's GPU is its deviceId, mapped to the nsys GPU id through TARGET_INFO_CUDA_DEVICE
where the export has it (else the id is taken as the CUDA ordinal, as the rest of nsys2prv
does). What cannot be computed is left out, counted and said in the summary: a report
without GPU limits (no TARGET_INFO_GPU, or no SM count), a compute capability the tables do
not hold, kernels without their launch configuration.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ...analysis import occupancy as occ
from ...report.report import Report
from .base import Context

GPUS = "launch.gpus"  # ctx.shared: (pid, device) -> the GPU's limits, once per report

# the columns `statistics` adds (Int64, null where unknown)
COLUMNS = ("cluster_size", "sms", "blocks_per_sm", "limiter", "occupancy_pv", "resident",
           "waves_pv", "sm_ceiling_pv", "warps_ceiling_pv")
# a launch configuration: what the kernel's record gives, and its GPU (whose limits come
# from the GPU table: joined to the distinct configurations, not to every kernel)
_LAUNCH = ("gpu", "threads", "registers", "static_smem", "dynamic_smem", "carveout", "blocks",
           "cluster_size", "max_active_clusters")
_CONFIG = ("threads", "registers", "static_smem", "dynamic_smem", "carveout", "blocks",
           "cluster_size", "max_active_clusters", "sms", "max_warps", "max_blocks",
           "max_registers", "max_shared", "cc_major", "cc_minor")


def gpu_table(report: Report, ctx: Context) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the GPU limits by gpu id, (pid, device) -> gpu id from TARGET_INFO_CUDA_DEVICE:
    empty without it), read once per report."""
    if GPUS not in ctx.shared:
        from ...sources.gpu_metrics import cuda_devices

        limits = report.gpu_limits.drop("gpu_name")
        mapping = cuda_devices(report)
        ctx.shared[GPUS] = (limits, mapping)
    limits, mapping = ctx.shared[GPUS]
    return limits, mapping


def statistics(df: pl.DataFrame, report: Report, ctx: Context, warn: bool = True
               ) -> pl.DataFrame:
    """`df` (kernels with pid, device, grid_*, block_*, registers, static_smem,
    dynamic_smem, carveout, cluster_*, max_active_clusters) with COLUMNS added; `warn`:
    count in the summary what could not be computed."""
    c = pl.col
    limits, mapping = gpu_table(report, ctx)
    k = df.with_columns(
        (c("grid_x") * c("grid_y") * c("grid_z")).alias("blocks"),
        (c("block_x") * c("block_y") * c("block_z")).alias("threads"),
        pl.when(c("cluster_x").fill_null(0) * c("cluster_y").fill_null(0)
                * c("cluster_z").fill_null(0) > 1)
        .then(c("cluster_x") * c("cluster_y") * c("cluster_z")).otherwise(None)
        .alias("cluster_size"))
    if mapping.height:
        k = k.join(mapping.select(c("pid").cast(k.schema["pid"]),
                                  c("device").cast(k.schema["device"]), "gpu"),
                   on=["pid", "device"], how="left", maintain_order="left")
        k = k.with_columns(c("gpu").fill_null(c("device").cast(pl.Int64)))
    else:
        k = k.with_columns(c("device").cast(pl.Int64).alias("gpu"))
    configs = k.select(_LAUNCH).unique().join(limits, on="gpu", how="left")
    out = _compute(configs)
    k = k.join(out, on=list(_LAUNCH), how="left", maintain_order="left", nulls_equal=True)
    if warn:
        _say(k, ctx)
    return k.drop([n for n in ("blocks", "threads", "gpu", "max_warps", "max_blocks",
                               "max_registers", "max_shared", "cc_major", "cc_minor")
                   if n in k.columns])


def _compute(cfg: pl.DataFrame) -> pl.DataFrame:
    """The calculator and the ceilings on the distinct configurations."""
    floats = cfg.select(pl.col(_CONFIG).cast(pl.Float64).fill_null(np.nan))  # one query

    def col(name: str) -> np.ndarray:
        return floats[name].to_numpy()

    o = occ.occupancy(col("threads"), col("registers"), col("static_smem"),
                      col("dynamic_smem"), col("carveout"), col("cc_major"), col("cc_minor"),
                      col("max_warps"), col("max_blocks"), col("max_registers"),
                      col("max_shared"))
    bps = np.where(o.blocks_per_sm >= 0, o.blocks_per_sm, np.nan)
    # the export's warps per SM, else the architecture's (what the calculator counted with)
    warps_sm = np.where(np.isfinite(col("max_warps")) & (col("max_warps") >= 1),
                        col("max_warps"),
                        np.where(o.max_warps >= 1, o.max_warps, np.nan).astype(np.float64))
    g = occ.ceilings(col("blocks"), col("threads"), col("sms"), bps, warps_sm,
                     col("max_active_clusters"), col("cluster_size"))

    def ints(x: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(x), x, -1).astype(np.int64)

    # -1: unknown (null in the trace)
    known = {"blocks_per_sm": ints(bps),
             "limiter": ints(np.where(o.limiter > 0, o.limiter, np.nan)),
             "occupancy_pv": occ.to_trace(o.occupancy), "resident": ints(g.resident),
             "waves_pv": occ.to_trace(g.waves / 100),
             "sm_ceiling_pv": occ.to_trace(g.sm_active, up=True),
             "warps_ceiling_pv": occ.to_trace(g.warps, up=True)}
    c = pl.col
    return cfg.with_columns(pl.Series(name, values) for name, values in known.items()
                            ).with_columns(pl.when(c(name) != -1).then(c(name)).alias(name)
                                           for name in known)


def _say(k: pl.DataFrame, ctx: Context) -> None:
    """Counts, in the summary, of the kernels whose launch could not be fully worked out."""
    c = pl.col
    has = c("blocks").is_not_null() & c("threads").is_not_null()
    sized = has & c("sms").is_not_null()
    clusters = sized & c("cluster_size").is_not_null()
    unknown = has & c("blocks_per_sm").is_null() & c("registers").is_not_null()
    n = k.select(  # every count in one query
        no_launch=(~has).sum(), no_gpu=(has & c("sms").is_null()).sum(),
        unknown=unknown.sum(), too_large=(sized & (c("blocks_per_sm") == 0)).sum(),
        no_regs=(sized & c("registers").is_null()).sum(),
        zero_regs=(sized & (c("registers") == 0)).sum(),
        no_carve=(sized & c("carveout").is_null() & c("blocks_per_sm").is_not_null()).sum(),
        clusters=clusters.sum(),
        blind=(clusters & (c("max_active_clusters").fill_null(0) <= 0)).sum()).row(0, named=True)
    if n["no_launch"]:
        ctx.warn("kernels without their launch configuration (grid, block): no launch "
                 "statistics", n["no_launch"])
    if n["no_gpu"]:
        ctx.warn("kernels of a GPU whose SM count the export does not give (no "
                 "TARGET_INFO_GPU, or without smCount): no waves nor grid ceilings", n["no_gpu"])
    if n["unknown"]:
        for (major, minor), part in k.filter(unknown).group_by("cc_major", "cc_minor"):
            cc = "unknown (not in the export)" if major is None else f"{major}.{minor}"
            ctx.warn(f"kernels of a GPU of compute capability {cc}, not in the occupancy "
                     f"tables (known: {occ.known_list()}): no occupancy", part.height)
    if n["too_large"]:
        ctx.warn("kernels whose block does not fit one SM by their GPU's limits (the "
                 "export's launch and GPU disagree): occupancy 0, no waves", n["too_large"])
    if n["no_regs"]:
        ctx.warn("kernels without registers per thread: no occupancy", n["no_regs"])
    if n["zero_regs"]:
        ctx.count("launch: kernels using no register (no register limit on their "
                  "occupancy)", n["zero_regs"])
    if n["no_carve"]:
        ctx.count("launch: kernels without the shared memory carveout they ran with "
                  "(sharedMemoryExecuted): the largest counted, NVIDIA's calculator's "
                  "default", n["no_carve"])
    if n["clusters"]:
        ctx.count("launch: kernels launched with thread block clusters", n["clusters"])
        if n["blind"]:
            ctx.count("launch: cluster launches without CUPTI's maximum active clusters: "
                      "blocks per wave counted as SMs x blocks per SM (an upper bound)",
                      n["blind"])
