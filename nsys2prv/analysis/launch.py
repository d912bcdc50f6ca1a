"""What each kernel's launch allows: launch statistics and occupancy per kernel and
launch configuration, read from a trace, with the findings an engineer reading Nsight
Compute's launch statistics and occupancy sections would note.

The translation computes, for every kernel, what its launch allows on its GPU
(`occupancy.py`: blocks per SM and the limiter, theoretical occupancy, blocks per wave, the
grid's SM Active and warps ceilings) and writes it with the launch configuration on the
kernel's start (registry/cuda.py `LAUNCH_TYPES`; a stream that is only analysed keeps
them). `LaunchCollector` reads them window by window and sums launches and time per (row,
kernel, configuration): memory is one row per distinct configuration of a kernel on a row,
whatever the number of launches. `launch_tables` gives:

* `configs`: per kernel (demangled name) and launch configuration: blocks, threads per
  block, registers per thread, shared memory (static, dynamic), carveout, cluster size,
  the GPU's SMs, blocks per SM and limiter, theoretical occupancy, blocks per wave, waves,
  the tail (the last wave's fill), the ceilings, launches and time with their share of the
  kernel's;
* `kernels`: per kernel, its main configuration (the one with most time) and the number
  of configurations, and the time-weighted ceilings (what bounds its GPU metric rates);
* `findings`: grids smaller than the GPU, occupancy held low by registers or shared memory,
  one or two waves with a large tail (thresholds below, docs/kernel_metrics.md), blocks
  that do not fit one SM (the export's launch and GPU disagree); one line for the GPUs
  that share a finding (`devices`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..engine import NUL
from ..paraver.read import Source, TraceInfo, open_trace
from ..paraver.registry import cuda
from . import occupancy as occ
from .sums import GroupSums
from .timeline import RowTimeKey, Spans

KERNEL_TYPES = (cuda.CUDA_KERNEL, cuda.NCCL_KERNEL)
FULL_NAME = cuda.KERNEL_FULL_NAME
# trace type -> column of the configuration (values as written: % and waves x 100)
CONFIG = {cuda.CUDA_KERNEL_BLOCKS: "blocks", cuda.CUDA_KERNEL_THREADS: "threads",
          cuda.KERNEL_REGISTERS: "registers", cuda.KERNEL_STATIC_SHMEM: "static_smem",
          cuda.CUDA_KERNEL_DYN_SHMEM: "dynamic_smem", cuda.KERNEL_CARVEOUT: "carveout",
          cuda.KERNEL_CLUSTER_SIZE: "cluster_size", cuda.KERNEL_GPU_SMS: "sms",
          cuda.KERNEL_BLOCKS_PER_SM: "blocks_per_sm", cuda.KERNEL_OCCUPANCY_LIMITER: "limiter",
          cuda.KERNEL_OCCUPANCY: "occupancy_pv", cuda.KERNEL_RESIDENT_BLOCKS: "resident",
          cuda.KERNEL_WARPS_CEILING: "warps_ceiling_pv"}
assert set(CONFIG) == set(cuda.LAUNCH_TYPES)
CONFIG_COLUMNS = tuple(CONFIG.values())

# findings (docs/kernel_metrics.md): a configuration is looked at when it holds at least
# FINDING_TIME of its GPU's kernel time
FINDING_TIME = 0.01
OCCUPANCY_LOW = 50.0  # theoretical occupancy (%) below: held low by registers / shared memory
TAIL_WAVES = 2.0  # at most this many waves ...
TAIL_FILL = 0.5  # ... whose last one is filled below this: a large tail
NO_LAUNCH = ("no launch statistics in this trace: translated before they were written, or "
             "from an export without the kernels' launch configuration or GPU limits")

NO_LIMITS = ("findings: none can be made: the GPUs' SM limits and compute capability are not "
             "in this export (reports of older nsys leave them empty), so occupancy, waves "
             "and tails are unknown; the launches as written")

# each attribute type's column, looked up by the type's low bits (the fewest that tell the
# types apart: 5 here): a table indexed by the type itself would span the types' range (4M
# entries, 32 MB held by every process that imports this module), a sorted search costs a
# few comparisons an event (1.5 s of the 10M benchmark's analysis)
_TYPE_BITS = next(k for k in range(1, 31) if len({t & ((1 << k) - 1) for t in CONFIG})
                  == len(CONFIG))
_TYPE_AT = np.full(1 << _TYPE_BITS, -1, dtype=np.int64)
_COLUMN_AT = np.full(1 << _TYPE_BITS, -1, dtype=np.int64)
for _i, _t in enumerate(CONFIG):
    _TYPE_AT[_t & ((1 << _TYPE_BITS) - 1)] = _t
    _COLUMN_AT[_t & ((1 << _TYPE_BITS) - 1)] = _i
del _i, _t


def _column_of_type(types: np.ndarray) -> np.ndarray:
    """The column of each launch attribute type (-1: not one)."""
    slot = np.bitwise_and(types, (1 << _TYPE_BITS) - 1)
    return np.where(_TYPE_AT[slot] == types, _COLUMN_AT[slot], -1)


def _wide(attrs: pl.DataFrame) -> pl.DataFrame:
    """One row per (row, time) of the launch attribute events, one column per attribute
    (null where absent): a pivot done with numpy (polars' pivot was most of the analysis'
    added time on the 10M benchmark). A kernel's attributes are one record of the trace,
    so its events are adjacent; they are sorted only where a (row, time) comes back."""
    row = attrs["row"].to_numpy()
    time = attrs["time"].to_numpy()
    col = _column_of_type(attrs["type"].to_numpy())
    value = attrs["value"].to_numpy()

    def starts() -> np.ndarray:
        first = np.ones(row.size, dtype=bool)
        first[1:] = (row[1:] != row[:-1]) | (time[1:] != time[:-1])
        return first

    first = starts()
    if pl.DataFrame({"r": row[first], "t": time[first]}).is_duplicated().any():
        order = np.lexsort((time, row))
        row, time, col, value = row[order], time[order], col[order], value[order]
        first = starts()
    group = np.cumsum(first) - 1
    n = int(group[-1]) + 1
    values = np.zeros((n, len(CONFIG_COLUMNS)), dtype=np.int64)
    seen = np.zeros((n, len(CONFIG_COLUMNS)), dtype=bool)
    values[group, col] = value  # a repeated attribute: the last one written
    seen[group, col] = True
    keys = np.flatnonzero(first)
    out = pl.DataFrame({"row": row[keys].astype(np.int32), "start": time[keys].astype(np.int64),
                        **{c: values[:, i] for i, c in enumerate(CONFIG_COLUMNS)},
                        **{f"{c}__seen": seen[:, i] for i, c in enumerate(CONFIG_COLUMNS)}})
    return out.select("row", "start", *(pl.when(pl.col(f"{c}__seen")).then(pl.col(c))
                                        .alias(c) for c in CONFIG_COLUMNS))


class LaunchCollector:
    """Launches and time per (row, kernel, launch configuration) of a trace, window by
    window (an observer of the analysis' pass: give it every window of
    `windows(path, collector.types)` in order, then `result`). Kernels are paired with
    their end as `timeline.Spans` pairs them; a configuration's values are those at the
    kernel's start (`CONFIG`)."""

    def __init__(self, path: Source | TraceInfo, per_kernel: bool = False,
                 store=None) -> None:
        self.info = open_trace(path)
        self.path = self.info.path
        # each kernel's launch class (`occupancy.grid_class`): the GPU metrics model gives
        # every class of a name its own column (row, start, class: 13 bytes a kernel whose
        # class is not 0)
        self.per_kernel = per_kernel
        self._classes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        # with `store` (an `ActivityCollector`'s, which declares the windows): the classes
        # filed there by the kernels' start, beside the kernels (`kernel_classes` is empty)
        self.store = store
        self.layout = self.info.layout
        self.types = frozenset({*KERNEL_TYPES, FULL_NAME, *CONFIG})
        self._spans = Spans([], KERNEL_TYPES, [], FULL_NAME, self.layout.rows.height)
        self._sums = GroupSums(("row", "name", "full", "nccl", *CONFIG_COLUMNS),
                               (pl.col("launches").sum(), pl.col("time").sum()))
        self._held = pl.DataFrame(schema={"row": pl.Int32, "start": pl.Int64,
                                          **{c: pl.Int64 for c in CONFIG_COLUMNS}})
        self._key = RowTimeKey.of_trace(self.layout.rows)

    def add(self, w) -> None:
        own = w.events.slice(w.carried)
        ev = own.filter(pl.col("type").is_in(list(self.types)))
        if ev.height == 0:
            return
        attrs = ev.filter(pl.col("type").is_in(list(CONFIG)))
        if attrs.height:
            held = pl.concat([self._held, _wide(attrs)])
        else:
            held = self._held
        flat, _ = self._spans.add(ev.filter(pl.col("type").is_in([*KERNEL_TYPES, FULL_NAME])))
        if len(flat):
            k = pl.DataFrame({"row": flat[:, 0].astype(np.int32), "start": flat[:, 3],
                              "dur": flat[:, 4], "name": flat[:, 2],
                              "full": np.where(flat[:, 5] == NUL, flat[:, 2], flat[:, 5]),
                              "nccl": flat[:, 1] == cuda.NCCL_KERNEL})
            self._key.see(w.end)
            joined = self._key.join(k, held)
            if self.per_kernel:  # the kernels of a class other than 0 (most are 0)
                pv = sm_ceiling_pv(joined)
                grid_class = occ.grid_class(np.where(pv >= 0, pv, np.nan)).astype(np.int8)
                other = grid_class != 0
                found = (joined["row"].to_numpy()[other], joined["start"].to_numpy()[other],
                         grid_class[other])
                if self.store is not None:
                    self.store.add_timed("classes", pl.DataFrame(
                        {"row": found[0].astype(np.int32), "start": found[1],
                         "class": found[2]}), "start")
                else:
                    self._classes.append(found)
            self._sums.add(joined.group_by(self._sums.keys).agg(
                pl.len().alias("launches"), pl.col("dur").sum().alias("time")))
            # what is left waits for its kernel's end in a later window
            held = self._key.join(held, k.select("row", "start"), how="anti")
        self._held = held

    def kernel_classes(self) -> pl.DataFrame:
        """(row, start, class) of every kernel whose class is not 0, with `per_kernel`."""
        parts = self._classes
        self._classes = []
        if not parts:
            return pl.DataFrame(schema={"row": pl.Int32, "start": pl.Int64,
                                        "class": pl.Int8})
        return pl.DataFrame({"row": np.concatenate([p[0] for p in parts]).astype(np.int32),
                             "start": np.concatenate([p[1] for p in parts]),
                             "class": np.concatenate([p[2] for p in parts])})

    def result(self) -> pl.DataFrame:
        """(row, name, full, nccl, the CONFIG columns, launches, time): value ids of the
        trace for the names (the .pcf gives their text)."""
        found = self._sums.result()
        if found is None:
            return pl.DataFrame(schema={"row": pl.Int32, "name": pl.Int64, "full": pl.Int64,
                                        "nccl": pl.Boolean,
                                        **{c: pl.Int64 for c in CONFIG_COLUMNS},
                                        "launches": pl.UInt32, "time": pl.Int64})
        return found


@dataclass
class Launches:
    """The tables of the module docstring (empty, with `note`, when the trace has none)."""

    configs: pl.DataFrame = field(default_factory=pl.DataFrame)
    kernels: pl.DataFrame = field(default_factory=pl.DataFrame)
    findings: pl.DataFrame = field(default_factory=pl.DataFrame)
    note: str = ""

    @property
    def empty(self) -> bool:
        return self.configs.height == 0

    def to_dict(self) -> dict:
        return {"note": self.note, "configs": json_rows(self.configs),
                "kernels": json_rows(self.kernels), "findings": json_rows(self.findings)}


def json_rows(df: pl.DataFrame) -> list[dict]:
    """A table's rows for --json: NaN (no value, in float columns) as null."""
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
            for r in df.to_dicts()]


def sm_ceiling_pv(df: pl.DataFrame) -> np.ndarray:
    """The SM Active ceiling of each configuration (% x 100, rounded up as the translation
    writes it; -1: unknown) from its blocks, blocks per wave and SMs as the trace holds them
    (`occupancy.ceilings`: the same arithmetic on the same numbers)."""
    def col(name: str) -> np.ndarray:
        return df[name].cast(pl.Float64).fill_null(np.nan).to_numpy()

    blocks, resident, sms = col("blocks"), col("resident"), col("sms")
    g = occ.ceilings(blocks, np.nan, sms, np.nan, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        busy = np.where(np.isfinite(resident), np.minimum(blocks, resident), blocks)
        sm = np.where(np.isfinite(g.sm_active), np.minimum(busy, sms) / sms, np.nan)
    return occ.to_trace(sm, up=True)


def _derived(df: pl.DataFrame) -> pl.DataFrame:
    """The configuration's numbers in their units (%, waves, the tail in % of a wave), from
    what the trace holds: waves and the SM Active ceiling recomputed from the blocks, the
    blocks per wave and the SMs as the translation computed them (`occupancy.ceilings`)."""
    c = pl.col

    def col(name: str) -> np.ndarray:
        return df[name].cast(pl.Float64).fill_null(np.nan).to_numpy()

    resident, blocks = col("resident"), col("blocks")
    # blocks per wave stand for SMs x blocks per SM (or a cluster launch's own count)
    with np.errstate(invalid="ignore", divide="ignore"):
        waves = blocks / resident
        tail = np.where(np.isfinite(waves),
                        (blocks - (np.ceil(waves) - 1) * resident) / resident, np.nan)
    sm_pv = sm_ceiling_pv(df)
    limiter = c("limiter").replace_strict(occ.LIMITERS, default=None, return_dtype=pl.Utf8)
    return df.with_columns(
        limiter.alias("limiter"),
        pl.Series("grid_class", occ.grid_class(np.where(sm_pv >= 0, sm_pv, np.nan))),
        (c("occupancy_pv") / occ.SCALE).alias("occupancy"),
        pl.Series("waves", waves).fill_nan(None),
        pl.Series("tail", 100 * tail).fill_nan(None),
        pl.Series("sm_ceiling", np.where(sm_pv >= 0, sm_pv / occ.SCALE, np.nan))
        .fill_nan(None),
        (c("warps_ceiling_pv") / occ.SCALE).alias("warps_ceiling"),
        (c("static_smem").fill_null(0) + c("dynamic_smem").fill_null(0)).alias("shared"),
    ).drop("occupancy_pv", "warps_ceiling_pv")


def launch_tables(collected: pl.DataFrame, path: Source | TraceInfo,
                  rows: pl.DataFrame | None = None) -> Launches:
    """The tables of the module docstring from a `LaunchCollector` result (`path`: its
    trace, or stream, or what `open_trace` read of it; `rows`: the trace's rows, when the
    caller has them)."""
    from .labels import distinct_labels

    c = pl.col
    if collected.height == 0 or collected["blocks"].null_count() == collected.height:
        return Launches(note=NO_LAUNCH)
    info = open_trace(path)
    rows = _device_rows(info.rows if rows is None else rows)
    names = info.names
    kernel_names = names.get(cuda.CUDA_KERNEL, {})
    df = collected.join(rows.select(c("row").cast(pl.Int32), "device"), on="row", how="inner")
    if df.height == 0:
        return Launches(note=NO_LAUNCH)
    df = df.with_columns(c("full").replace_strict(kernel_names, default=None,
                                                  return_dtype=pl.Utf8).alias("kernel"),
                         c("name").replace_strict(kernel_names, default=None,
                                                  return_dtype=pl.Utf8).alias("short"))
    df = df.with_columns(c("kernel").fill_null(c("short")).fill_null("(unnamed)"),
                         c("short").fill_null("(unnamed)"))
    keys = ["kernel", *CONFIG_COLUMNS]
    per = (df.group_by(keys).agg(c("short").first(), c("nccl").any(),
                                 c("launches").sum().cast(pl.Int64), c("time").sum(),
                                 c("device").n_unique().alias("devices")))
    per = _derived(per)
    total = c("time").sum().over("kernel")
    per = per.with_columns((c("launches") / c("launches").sum().over("kernel"))
                           .alias("launch_share"),
                           pl.when(total > 0).then(c("time") / total).otherwise(None)
                           .alias("time_share"))
    named = per.unique("kernel")
    labels = distinct_labels(named["kernel"].to_list(), named["short"].to_list())
    per = per.with_columns(c("kernel").replace_strict(labels, default=c("short"),
                                                      return_dtype=pl.Utf8).alias("label"))
    configs = per.select(
        "kernel", "label", "short", "nccl", "blocks", "threads", "registers", "shared",
        "static_smem", "dynamic_smem", "carveout", "cluster_size", "sms", "blocks_per_sm",
        "limiter", "occupancy", "resident", "waves", "tail", "sm_ceiling", "warps_ceiling",
        "launches", "time", "launch_share", "time_share", "devices"
    ).sort(["time", "kernel", "blocks", "threads", "registers", "shared", "carveout",
            "sms"], descending=[True] + [False] * 7, nulls_last=True)
    kernels = _kernel_summary(configs)
    gpu_time = df.group_by("device").agg(c("time").sum().alias("gpu_time"))
    findings = _findings(df, gpu_time, labels)
    unknown = configs.filter(c("occupancy").is_null())
    note = ""
    if unknown.height == configs.height:
        note = NO_LIMITS
    elif unknown.height:
        note = (f"{unknown.height} of {configs.height} launch configurations on a GPU whose "
                "SM limits are not in this export: their occupancy, waves and findings "
                "unknown")
    return Launches(configs, kernels, findings, note)


def _device_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """The GPU rows of a trace with their device's name ('task label / GPU d')."""
    c = pl.col
    return rows.filter(c("kind") == "gpu").select(
        "row", pl.format("{} / GPU {}", c("task_label"), c("device")).alias("device"))


def _kernel_summary(configs: pl.DataFrame) -> pl.DataFrame:
    """Per kernel: its main configuration (most time), how many it has, and the
    time-weighted ceilings of all of them (unknown ones count as 100 %)."""
    c = pl.col
    w = c("time").cast(pl.Float64)
    agg = configs.group_by("kernel").agg(
        pl.len().alias("configs"),
        ((c("sm_ceiling").fill_null(100.0) * w).sum() / w.sum()).alias("sm_ceiling_mean"),
        ((c("warps_ceiling").fill_null(100.0) * w).sum() / w.sum()).alias("warps_ceiling_mean"))
    main = configs.unique("kernel", keep="first", maintain_order=True)  # sorted by time
    return (main.join(agg, on="kernel").select(
        "kernel", "label", "short", "configs", "blocks", "threads", "registers", "shared",
        "carveout", "cluster_size", "sms", "blocks_per_sm", "limiter", "occupancy", "waves",
        "tail", "sm_ceiling", "warps_ceiling", "sm_ceiling_mean", "warps_ceiling_mean")
        .sort("kernel"))


def _findings(df: pl.DataFrame, gpu_time: pl.DataFrame, labels: dict[str, str]
              ) -> pl.DataFrame:
    """The configurations that hold at least FINDING_TIME of their GPU's kernel time and
    whose launch leaves the GPU idle: fewer blocks than SMs, occupancy below OCCUPANCY_LOW
    held by registers or shared memory, one or two waves whose last is filled below
    TAIL_FILL. NCCL kernels are left out: their grid is one block per channel, kept small
    by NCCL so that the compute kernels they overlap keep the SMs (not a launch to fix)."""
    c = pl.col
    keys = ["device", "kernel", *CONFIG_COLUMNS]
    per = (df.group_by(keys).agg(c("short").first(), c("nccl").any(), c("launches").sum(),
                                 c("time").sum())
           .join(gpu_time, on="device"))
    per = per.filter((c("time") >= FINDING_TIME * c("gpu_time")) & ~c("nccl"))
    if per.height == 0:
        return pl.DataFrame()
    per = _derived(per).with_columns((c("time") / c("gpu_time")).alias("share"))
    out = []
    for r in per.iter_rows(named=True):  # the few configurations that hold 1 % of a GPU
        label = labels.get(r["kernel"], r["short"])
        base = {"device": r["device"], "kernel": r["kernel"], "label": label,
                "blocks": r["blocks"], "time": r["time"], "gpu_time": r["gpu_time"]}
        if r["blocks_per_sm"] == 0:  # the GPU's limits leave no room for one block
            out.append({**base, "finding": "block larger than an SM",
                        "text": f"no block fits one SM ({_too_large(r)}): a launch that "
                                "ran cannot need this; the export's launch and GPU disagree"})
            continue
        if r["blocks"] is not None and r["sms"] is not None and r["blocks"] < r["sms"]:
            blocks = f"{r['blocks']} block" + ("" if r["blocks"] == 1 else "s")
            out.append({**base, "finding": "grid smaller than the GPU",
                        "text": f"under-filled by its launch: {blocks} on {r['sms']} SMs "
                                f"(SM Active <= {r['sm_ceiling']:.1f} %)"})
        if (r["occupancy"] is not None and r["occupancy"] < OCCUPANCY_LOW
                and r["limiter"] in ("registers", "shared memory")):
            what = (f"{r['registers']} registers per thread" if r["limiter"] == "registers"
                    else f"{r['shared'] / 1024:.1f} KB of shared memory per block in a "
                         f"{(r['carveout'] or 0) // 1024} KB carveout")
            per = "block" if r["blocks_per_sm"] == 1 else "blocks"
            out.append({**base, "finding": f"occupancy limited by {r['limiter']}",
                        "text": f"theoretical occupancy {r['occupancy']:.1f} %: "
                                f"{r['blocks_per_sm']} {per} per SM, held by {what}"})
        waves, tail = r["waves"], r["tail"]
        if (waves is not None and 1 < waves <= TAIL_WAVES and tail is not None
                and tail < 100 * TAIL_FILL):
            n = int(np.ceil(waves))
            last = r["blocks"] - (n - 1) * r["resident"]
            out.append({**base, "finding": "large tail",
                        "text": f"{waves:.2f} waves of {r['resident']} blocks: the last "
                                f"holds {last} ({tail:.0f} % of a wave); with blocks of "
                                f"equal time the GPU runs {tail:.0f} % full for up to "
                                f"1/{n} of the kernel"})
    if not out:
        return pl.DataFrame()
    # one line for a finding that several GPUs share (the same kernel and words)
    merged = (pl.DataFrame(out).sort("device")
              .group_by("kernel", "label", "finding", "text", "blocks", maintain_order=True)
              .agg(c("device").first(), pl.len().alias("devices"), c("time").sum(),
                   c("gpu_time").sum()))
    merged = merged.with_columns((c("time") / c("gpu_time")).alias("share")).drop("gpu_time")
    return merged.select("device", "devices", "kernel", "label", "blocks", "share", "time",
                         "finding", "text").sort(["share", "kernel", "device", "finding"],
                                                 descending=[True, False, False, False])


def _too_large(r: dict) -> str:
    """What a block asks of an SM beyond its limits (the calculator's limiter)."""
    if r["limiter"] == "registers":
        return f"{r['threads']} threads x {r['registers']} registers"
    if r["limiter"] == "shared memory":
        return f"{r['shared'] / 1024:.1f} KB of shared memory"
    return f"{r['threads']} threads"


def read_launches(path: Source) -> Launches:
    """The tables of a trace file, on one pass of its own."""
    from ..paraver.read import windows

    collector = LaunchCollector(path)
    for w in windows(collector.info, collector.types, state_rows="cpu"):
        collector.add(w)
    return launch_tables(collector.result(), collector.info)


# what makes a launch configuration (the rest follows from it and the GPU)
CONFIG_KEYS = ("blocks", "threads", "registers", "shared", "carveout", "cluster_size", "sms")


def launch_changes(kernels: pl.DataFrame, before: Launches | None, after: Launches | None
                   ) -> pl.DataFrame | None:
    """For `diff`: the kernels of the comparison's kernel table (kernel, short, names: the
    full names each groups) whose main launch configuration (the one with most time)
    differs between the runs, with both and what the change does: occupancy, limiter,
    waves, the grid's ceilings. None when a side has no launch statistics."""
    if before is None or after is None or before.empty or after.empty:
        return None
    c = pl.col
    names = kernels.select("kernel", "short", "names").explode("names").rename(
        {"names": "text"})

    def main(launch: Launches) -> pl.DataFrame:
        cfg = launch.configs.rename({"kernel": "text"}).join(
            names.select("text", c("kernel").alias("key")), on="text", how="inner")
        return (cfg.sort(["time", "launches"], descending=True)
                .unique("key", keep="first")
                .select("key", *CONFIG_KEYS, "blocks_per_sm", "limiter", "occupancy",
                        "waves", "tail", "sm_ceiling", "warps_ceiling"))

    b, a = main(before), main(after)
    both = b.join(a, on="key", how="inner", suffix="_after")
    changed = pl.any_horizontal([c(k).ne_missing(c(f"{k}_after")) for k in CONFIG_KEYS])
    both = both.filter(changed)
    if both.height == 0:
        return pl.DataFrame()
    rows = []
    for r in both.iter_rows(named=True):  # the few kernels whose launch changed
        rows.append({"kernel": r["key"], "before": _config_text(r, ""),
                     "after": _config_text(r, "_after"), "change": _change_text(r),
                     **{f"{k}_before": r[k] for k in (*CONFIG_KEYS, "occupancy", "limiter",
                                                       "waves", "sm_ceiling")},
                     **{f"{k}_after": r[f"{k}_after"] for k in (*CONFIG_KEYS, "occupancy",
                                                                 "limiter", "waves",
                                                                 "sm_ceiling")}})
    out = pl.DataFrame(rows)
    order = kernels.select("kernel", "short").with_row_index("rank")
    return out.join(order, on="kernel", how="left").sort("rank").drop("rank")


def _config_text(r: dict, s: str) -> str:
    """A launch configuration as an engineer writes it: '2304 x 128, 254 regs, 80.0 KB
    shared (164 KB carveout)'."""
    parts = [f"{r[f'blocks{s}']} x {r[f'threads{s}']}"]
    if r[f"registers{s}"] is not None:
        parts.append(f"{r[f'registers{s}']} regs")
    if r[f"shared{s}"]:
        carve = r[f"carveout{s}"]
        parts.append(f"{r[f'shared{s}'] / 1024:.1f} KB shared"
                     + (f" ({carve // 1024} KB carveout)" if carve is not None else ""))
    if r[f"cluster_size{s}"]:
        parts.append(f"clusters of {r[f'cluster_size{s}']}")
    return ", ".join(parts)


def _change_text(r: dict) -> str:
    """What the change of launch does: occupancy (and its limiter), waves, SM Active's
    ceiling, where they moved."""
    out = []
    o1, o2 = r["occupancy"], r["occupancy_after"]
    if o1 is not None and o2 is not None and abs(o2 - o1) >= 0.05:
        lim = r["limiter_after"]
        out.append(f"occupancy {o1:.1f} % -> {o2:.1f} %" + (f", limiter {lim}" if lim else ""))
    w1, w2 = r["waves"], r["waves_after"]
    if w1 is not None and w2 is not None and abs(w2 - w1) >= 0.005:
        out.append(f"waves {w1:.2f} -> {w2:.2f}")
    s1, s2 = r["sm_ceiling"], r["sm_ceiling_after"]
    if s1 is not None and s2 is not None and abs(s2 - s1) >= 0.05:
        out.append(f"SM Active ceiling {s1:.1f} % -> {s2:.1f} %")
    # reports of older nsys leave TARGET_INFO_GPU's limits empty: occupancy and waves are
    # then unknown, which is not 'the same'
    sides = [side for side, v in (("before", o1), ("after", o2)) if v is None]
    if sides:
        out.append("occupancy and waves unknown " + ("on both sides" if len(sides) == 2 else
                                                     sides[0])
                   + " (the export has no SM limits of the GPU)")
    return "; ".join(out) or "same occupancy, waves and ceilings"
