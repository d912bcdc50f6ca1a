"""Compare two runs: what changed between BEFORE and AFTER, and whether it is beyond noise.

Each side is a trace (translated from its reports, or given), so that the numbers are those
Paraver shows on the same files. From each side's activities (`activities.py`):

* per kernel (demangled full name, as `nsys recipe cuda_gpu_kern_sum` lists them), per NVTX
  range (name, digits folded: 'step 12' and 'step 13' are 'step #'; and domain), per
  category (compute kernels, NCCL kernels, each memcpy direction, memset, CUDA
  synchronisation on the CPU threads, GPU idle) and per device: count, total, mean, median,
  min, max, std on each side, the delta and the ratio (after / before), added or removed;
* kernels whose names differ only by template arguments, parameter lists, launch
  configurations written into the name (128x64) or generated suffixes (_0, _1) are matched by
  a normalised name where no exact match exists (`matched_by` says which);
* the models of each run side by side (efficiency model in both forms, host offload, the
  causes of GPU idle time) and, where a side has exports, the findings of nsys' rules;
* the verdict on a repeated NVTX range (a training step): per-instance durations compared
  with `stats.compare_samples` (Mann-Whitney U, bootstrap interval of the median change).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..report.inputs import is_trace
from .activities import Activities, KernelBatches, StoredActivities, stored_activities
from .labels import label_frame
from .layers import ComparedRanges, comparison_ranges
from .stats import STAT_COLUMNS, Shift, compare_samples, holm, summary
from .story import explain, explain_changes  # noqa: F401 - API (iterations' paragraph)
from .steps import (StepPick, candidates, choose, instance_windows,  # noqa: F401 - API
                    instances, pick, range_families, range_parents, step_rows)

CATEGORY_ORDER = ("compute kernels", "NCCL kernels", "memcpy", "memset",
                  "CUDA synchronisation", "GPU idle")


@dataclass
class Side:
    """One run as the comparison sees it."""

    label: str
    source: str
    # held, or read back a bucket at a time from the side's store (`StoredActivities`, in
    # the comparison's folder: gone once `compare` returns; `elapsed` stays)
    acts: Activities | StoredActivities
    analysis: object | None = None  # analysis.model.Analysis
    rules: dict[str, int] | None = None  # rule -> rows found (exports only)
    exports: list[str] = field(default_factory=list)
    # reports only: where they were prepared (kept until the comparison ends) and, for a
    # window, the facts that preparation was given: `--trace` merges both runs from them
    partials: list[str] = field(default_factory=list)
    facts: list | None = None
    kernel_metrics: object | None = None  # analysis.kernel_metrics.KernelMetrics
    # the step this side's idle causes were summed per instance of (range, domain), and
    # those sums (`idle.IdleReport.instances`): the comparison's step, where it is the same
    step: tuple[str, str | None] | None = None
    idle_steps: list[dict] | None = None
    # the side's step candidates (`steps.candidates`), computed where its activities were
    # read: the pair's step is chosen from both tables (`steps.choose`)
    candidates: pl.DataFrame | None = None
    # its NVTX ranges projected onto the GPU, as the comparison reads them
    # (`layers.comparison_ranges`), computed where its activities were read
    layer_ranges: ComparedRanges | None = None
    # its CPU samples by leaf function, in the run and inside the GPU's gaps
    # (`samples.Shares`; None: no sample)
    samples: object | None = None

    @property
    def elapsed(self) -> int:
        return self.acts.end


@dataclass
class Iterations:
    """The repeated range the verdict is made on and its instances on both sides."""

    name: str
    domain: str | None
    picked: bool  # chosen by the tool (`steps.pick`)
    before: pl.DataFrame  # instance, start, end, duration, + category columns
    after: pl.DataFrame
    shifts: dict[str, Shift]  # 'duration', each category, GPU idle, idle groups -> shift
    pick: StepPick | None = None  # why it was picked, and the runners-up
    kernels: pl.DataFrame | None = None  # per kernel per step (`step_kernel_table`)
    layers: pl.DataFrame | None = None  # per projected NVTX range per step (`step_layer_table`)


@dataclass
class Comparison:
    before: Side
    after: Side
    kernels: pl.DataFrame
    nvtx: pl.DataFrame
    categories: pl.DataFrame
    devices: pl.DataFrame | None
    models: pl.DataFrame
    rules: pl.DataFrame | None
    iterations: Iterations | None
    verdict: Shift
    paragraph: str
    warnings: list[str]
    rates: pl.DataFrame | None = None  # kernel, short, metric, before, after, delta
    step_search: StepPick | None = None  # the search for a step, where none was found
    # each range family's parent family (`steps.range_parents`, before's, else after's)
    range_tree: pl.DataFrame | None = None
    # per NVTX range, its projection onto the GPU on each side (`layer_table`)
    layers: pl.DataFrame | None = None
    # the kernels whose launch configuration changed (`launch.launch_changes`)
    launches: pl.DataFrame | None = None
    # per function, its share of the CPU samples on each side (`sample_table`)
    samples: pl.DataFrame | None = None

    @property
    def elapsed_change(self) -> float | None:
        """after / before - 1 of the elapsed (trace or window) time."""
        b = self.before.elapsed
        return self.after.elapsed / b - 1 if b else None

    def tables(self) -> dict[str, pl.DataFrame]:
        """Every table of the comparison by name (what --csv and --json carry)."""
        out = {"kernels": self.kernels, "nvtx": self.nvtx, "categories": self.categories,
               "models": self.models}
        if self.rates is not None:
            out["kernel_rates"] = self.rates
        if self.layers is not None and self.layers.height:
            out["layers"] = self.layers
        if self.launches is not None:
            out["kernel_launches"] = self.launches
        if self.samples is not None:
            out["samples"] = self.samples
        if self.devices is not None:
            out["devices"] = self.devices
        if self.rules is not None:
            out["rules"] = self.rules
        if self.iterations is not None:
            out["iterations_before"] = self.iterations.before
            out["iterations_after"] = self.iterations.after
            if self.iterations.kernels is not None:
                out["step_kernels"] = self.iterations.kernels
            if self.iterations.layers is not None and self.iterations.layers.height:
                out["step_layers"] = self.iterations.layers
        return out

    def to_dict(self) -> dict:
        it = self.iterations
        return {
            "before": {"label": self.before.label, "source": self.before.source,
                       "elapsed_ns": self.before.elapsed},
            "after": {"label": self.after.label, "source": self.after.source,
                      "elapsed_ns": self.after.elapsed},
            "elapsed_change": self.elapsed_change,
            "verdict": asdict(self.verdict),
            "iterations": None if it is None else {
                "range": it.name, "domain": it.domain, "picked": it.picked,
                "why": None if it.pick is None else it.pick.why,
                "candidates": None if it.pick is None else it.pick.candidates.to_dicts(),
                "shifts": {k: asdict(v) for k, v in it.shifts.items()}},
            "step_search": None if self.step_search is None else self.step_search.to_dict(),
            "paragraph": self.paragraph,
            "warnings": self.warnings,
            "tables": {k: v.to_dicts() for k, v in self.tables().items()},
        }


# ------------------------------------------------------------------------ names --

_TEMPLATE = re.compile(r"<[^<>]*>")
_PARAMS = re.compile(r"\([^()]*\)")
_CONFIG = re.compile(r"\d+(?:x\d+)+")
_SUFFIX = re.compile(r"(?:_\d+)+$")


def normalise_kernel(name: str) -> str:
    """A kernel name without what varies between builds of one kernel: template arguments,
    parameter lists and return type, launch configurations written into the name
    (128x64x32) and generated numeric suffixes (triton_poi_fused_add_0)."""
    s = name
    for _ in range(32):  # nested templates/parameter lists, innermost first
        t = _PARAMS.sub("", _TEMPLATE.sub("", s))
        if t == s:
            break
        s = t
    s = s.strip()
    if " " in s:  # a return type before the name ('void ns::kernel')
        s = s.rsplit(" ", 1)[1]
    s = _CONFIG.sub("#", s)
    return _SUFFIX.sub("", s) or name


def _match_names(before: set[str], after: set[str]) -> dict[str, tuple[str, str]]:
    """name -> (key, matched_by) for the names of both sides: an exact match keeps its name;
    names without one that share a normalised name with a name of the other side are keyed
    by that normalised name ('≈ NAME'); the rest are added or removed."""
    out: dict[str, tuple[str, str]] = {}
    common = before & after
    for n in common:
        out[n] = (n, "exact")
    lone_b = {n: normalise_kernel(n) for n in before - common}
    lone_a = {n: normalise_kernel(n) for n in after - common}
    shared = set(lone_b.values()) & set(lone_a.values())
    for side, removed in ((lone_b, "removed"), (lone_a, "added")):
        for n, norm in side.items():
            out[n] = (f"≈ {norm}", "normalised") if norm in shared else (n, removed)
    return out


def _joined(b: pl.DataFrame, a: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Stats of both sides on `keys`, delta (after - before, ns) and ratio of the totals,
    sorted by the absolute change of total time."""
    ren = lambda df, s: df.rename({c: f"{c}_{s}" for c in STAT_COLUMNS})  # noqa: E731
    j = ren(b, "before").join(ren(a, "after"), on=keys, how="full", coalesce=True)
    j = j.with_columns([pl.col(f"{c}_{s}").fill_null(0) for c in ("count", "total")
                        for s in ("before", "after")])
    return (j.with_columns((pl.col("total_after") - pl.col("total_before")).alias("delta"),
                           pl.when(pl.col("total_before") > 0)
                           .then(pl.col("total_after") / pl.col("total_before"))
                           .otherwise(None).alias("ratio"),
                           (pl.col("count_after") - pl.col("count_before"))
                           .alias("count_delta"))
            .sort(pl.col("delta").abs(), *keys, descending=[True] + [False] * len(keys)))


def kernel_table(b: Activities, a: Activities) -> pl.DataFrame:
    """Per kernel: stats of each side, delta, ratio, how it was matched. Kernels are
    grouped by their value ids first (the long names are looked at once per name)."""
    def names_of(acts: Activities) -> pl.DataFrame:
        ids = _gpu_sums(acts).kernel_ids
        return (ids.join(acts.kernel_names.rename({"id": "full", "name": "text"}),
                         on="full", how="left")
                .join(acts.kernel_names.rename({"id": "name", "name": "short"}), on="name",
                      how="left")
                .with_columns(pl.col("text").fill_null(pl.col("short")).fill_null(""),
                              pl.col("short").fill_null(""))
                .select("full", "text", "short", "nccl"))

    nb, na = names_of(b), names_of(a)
    match = _match_names(set(nb["text"].to_list()), set(na["text"].to_list()))
    keys = pl.DataFrame({"text": list(match), "kernel": [k for k, _ in match.values()],
                         "matched_by": [m for _, m in match.values()]},
                        schema={"text": pl.Utf8, "kernel": pl.Utf8, "matched_by": pl.Utf8})

    def per(acts: Activities, names: pl.DataFrame) -> pl.DataFrame:
        ids = names.join(keys, on="text").with_columns(
            pl.col("kernel").rank("dense").cast(pl.Int64).alias("key"))
        s = _kernel_summary(acts, ids.select(pl.col("full").cast(pl.Int32), "key"))
        return s.join(ids.group_by("key").agg(pl.col("kernel").first()), on="key") \
            .drop("key")

    pb, pa = per(b, nb), per(a, na)
    both = pl.concat([nb, na])
    meta = (both.join(keys, on="text")
            .group_by("kernel").agg(pl.col("short").min(), pl.col("nccl").first(),
                                    pl.col("matched_by").first(),
                                    pl.col("text").unique().sort().alias("names")))
    # the names of both sides labelled together: a kernel has one label before and after
    texts = both.select("text", "short").unique().sort("text")
    labels = label_frame(texts["text"].to_list(), texts["short"].to_list()).rename(
        {"full": "kernel"})
    out = _joined(pb, pa, ["kernel"]).join(meta, on="kernel", how="left")
    out = out.join(labels, on="kernel", how="left").with_columns(
        pl.col("label").fill_null(pl.col("kernel")),
        # the time per launch: whether the kernel changed, or how often it ran
        pl.when(pl.col("mean_before") > 0).then(pl.col("mean_after") / pl.col("mean_before"))
        .otherwise(None).alias("mean_ratio"))
    cols = out.columns
    return out.select("kernel", "label", *[c for c in cols if c not in ("kernel", "label")])


@dataclass
class GpuSums:
    """What the comparison sums of one side's GPU activities, in one read of them (a chunk
    at a time: `kernel_memop_chunks`): per full kernel name its short name and whether it
    is NCCL (`kernel_ids`: full, name, nccl), count and time of the kernels per (row, nccl)
    (`kernel_rows`) and of the memory operations per (row, op[, src_kind, dst_kind])
    (`memop_rows`)."""

    kernel_ids: pl.DataFrame
    kernel_rows: pl.DataFrame
    memop_rows: pl.DataFrame


def _gpu_sums(acts: Activities) -> GpuSums:
    """The side's `GpuSums`, read once and kept on `acts`."""
    kept = getattr(acts, "_gpu_sums", None)
    if kept is not None:
        return kept
    kinds = _KIND_COLUMNS(acts)
    ids, krows, mrows = [], [], []
    for k, m in acts.kernel_memop_chunks():
        ids.append(k.group_by("full").agg(pl.col("name").min(), pl.col("nccl").first(),
                                          pl.len().cast(pl.Int64).alias("count")))
        krows.append(k.group_by("row", "nccl").agg(pl.len().cast(pl.Int64).alias("count"),
                                                   pl.col("dur").sum()))
        mrows.append(m.group_by("row", *kinds).agg(pl.len().cast(pl.Int64).alias("count"),
                                                   pl.col("dur").sum()))

    def merged(parts: list[pl.DataFrame], by: list[str]) -> pl.DataFrame:
        return parts[0] if len(parts) == 1 else pl.concat(parts).group_by(*by).agg(
            pl.col("count").sum(), pl.col("dur").sum())

    acts._gpu_sums = kept = GpuSums(
        ids[0] if len(ids) == 1 else pl.concat(ids).group_by("full", maintain_order=True)
        .agg(pl.col("name").min(), pl.col("nccl").first(), pl.col("count").sum()),
        merged(krows, ["row", "nccl"]), merged(mrows, ["row", *kinds]))
    return kept


def _kernel_chunks(acts: Activities) -> Iterator[pl.DataFrame]:
    """The kernels' start, full name and duration in `kernels`' order, a chunk and a few
    columns at a time."""
    for items in acts.gpu_items(["kernel", "full", "start", "end"]):
        yield items.filter(pl.col("kernel")).select(
            "start", pl.col("full").cast(pl.Int32),
            (pl.col("end") - pl.col("start")).alias("dur"))


MEDIAN_BATCH = 4_000_000  # kernels whose durations are held at once for the medians


def _kernel_summary(acts: Activities, ids: pl.DataFrame) -> pl.DataFrame:
    """`stats.summary` of the kernels' durations per key (`ids`: full, key). The medians
    need every duration of a key: they are read in batches of keys (`KernelBatches`, at
    most MEDIAN_BATCH kernels each: 12 bytes a kernel of a batch held)."""
    counts = _gpu_sums(acts).kernel_ids.select("full", "count")
    with KernelBatches(acts, ["dur"], ids.rename({"key": "group"}), MEDIAN_BATCH,
                       counts) as batches:
        parts = [summary(b.select(pl.col("group").alias("key"), "dur"), ["key"])
                 for b in batches]
    return pl.concat(parts)


def nvtx_table(b: Activities, a: Activities) -> pl.DataFrame:
    """Per NVTX range (name with digit runs folded to '#', domain): stats of both sides."""
    def per(acts: Activities) -> pl.DataFrame:
        fam = range_families(acts).select(pl.col("id").alias("name"),
                                           pl.col("family").alias("range"))
        r = (acts.ranges.join(fam, on="name", how="left")
             .join(acts.domains, on="type", how="left")
             .with_columns(pl.col("range").fill_null(""), pl.col("domain").fill_null("")))
        return summary(r, ["range", "domain"])
    return _joined(per(b), per(a), ["range", "domain"])


def _category_frame(acts: Activities, analysis) -> pl.DataFrame:
    """category, detail, task_index, device -> count, dur (ns) of one side: activities are
    summed per row first (a few lines a row, whatever their number)."""
    rows = acts.rows.select("row", "task_index", "device")
    sums = _gpu_sums(acts)
    k = (sums.kernel_rows
         .join(rows, on="row")
         .with_columns(pl.when(pl.col("nccl")).then(pl.lit("NCCL kernels"))
                       .otherwise(pl.lit("compute kernels")).alias("category"),
                       pl.lit("").alias("detail")))
    m = (sums.memop_rows
         .join(rows, on="row").join(copy_details(acts), on=_KIND_COLUMNS(acts), how="left",
                                    nulls_equal=True)
         .with_columns(pl.col("category").fill_null("memcpy"), pl.col("detail").fill_null("")))
    s = acts.sync.join(rows, on="row").with_columns(
        pl.lit(1).alias("count"), pl.lit("CUDA synchronisation").alias("category"),
        pl.lit("").alias("detail"))
    cols = ["category", "detail", "task_index", "device", "count", "dur"]
    parts = [k.select(cols), m.select(cols), s.select(cols)]
    if analysis is not None:
        idle = [(g.task - 1, g.device, g.idle) for g in analysis.devices]
        if idle:
            parts.append(pl.DataFrame(
                {"category": ["GPU idle"] * len(idle), "detail": [""] * len(idle),
                 "task_index": [t for t, _, _ in idle], "device": [d for _, d, _ in idle],
                 "count": [1] * len(idle), "dur": [i for _, _, i in idle]},
                schema={"category": pl.Utf8, "detail": pl.Utf8, "task_index": pl.Int64,
                        "device": pl.Int64, "count": pl.Int64, "dur": pl.Int64}))
    return pl.concat([p.with_columns(pl.col("task_index").cast(pl.Int64),
                                     pl.col("device").cast(pl.Int64),
                                     pl.col("count").cast(pl.Int64),
                                     pl.col("dur").cast(pl.Int64)) for p in parts])


MEMORY_KIND_WORDS = {"Pageable": "pageable", "Pinned": "pinned", "Device": "device",
                     "Array": "array", "Managed": "managed", "Device Static": "device",
                     "Managed Static": "managed", "Unknown": ""}


def _KIND_COLUMNS(acts: Activities) -> list[str]:  # noqa: N802 - a list of names
    if not isinstance(acts, Activities):  # stored activities always have both
        return ["op", "src_kind", "dst_kind"]
    return ["op"] + [c for c in ("src_kind", "dst_kind") if c in acts.memops.columns]


def copy_memory(direction: str, src: str | None, dst: str | None) -> str:
    """The memory a copy is told by: the host side's (pageable, pinned, managed) for one
    between host and device, 'peer' between devices, the device's kind otherwise."""
    words = (MEMORY_KIND_WORDS.get(src or "", (src or "").lower()),
             MEMORY_KIND_WORDS.get(dst or "", (dst or "").lower()))
    if "Peer" in direction:
        return "peer"
    if direction.startswith("Host-to-Host"):
        return words[0] if words[0] == words[1] else "-".join(w for w in words if w)
    if direction.startswith("Host"):
        return words[0]
    if direction.endswith("to-Host"):
        return words[1]
    return "managed" if "managed" in words else (words[1] or words[0])


def copy_details(acts: Activities) -> pl.DataFrame:
    """(op[, src_kind, dst_kind]) -> category ('memcpy', 'memset'), detail ('Host-to-Device
    pageable'): one row per combination the run has (a few), named once each."""
    cols = _KIND_COLUMNS(acts)
    combos = _gpu_sums(acts).memop_rows.select(cols).unique()
    ops = dict(acts.memop_names.select("id", "name").iter_rows())
    kinds = dict(acts.memory_kinds.select("id", "name").iter_rows())
    out = []
    for row in combos.iter_rows(named=True):
        name = ops.get(row["op"], "memcpy")
        if not name.startswith("memcpy"):
            out.append({**row, "category": "memset", "detail": ""})
            continue
        direction = name[len("memcpy "):] if name.startswith("memcpy ") else ""
        memory = copy_memory(direction, kinds.get(row.get("src_kind")),
                             kinds.get(row.get("dst_kind")))
        out.append({**row, "category": "memcpy",
                    "detail": f"{direction} {memory}".strip()})
    schema = {**combos.schema, "category": pl.Utf8, "detail": pl.Utf8}
    return pl.DataFrame(out, schema=schema) if out else pl.DataFrame(schema=schema)


def category_table(b: Activities, a: Activities, an_b, an_a) -> pl.DataFrame:
    """Per category (memcpy per direction and memory kind: 'Host-to-Device pageable'):
    count and total time of each side (GPU idle: device time without any GPU activity,
    summed over devices; count = devices)."""
    def per(acts, an):
        f = _category_frame(acts, an)
        return f.group_by("category", "detail").agg(
            pl.col("count").sum().cast(pl.Int64), pl.col("dur").sum().alias("total"))
    j = per(b, an_b).rename({"count": "count_before", "total": "total_before"}).join(
        per(a, an_a).rename({"count": "count_after", "total": "total_after"}),
        on=["category", "detail"], how="full", coalesce=True).fill_null(0)
    order = {c: i for i, c in enumerate(CATEGORY_ORDER)}
    return (j.with_columns((pl.col("total_after") - pl.col("total_before")).alias("delta"),
                           pl.when(pl.col("total_before") > 0)
                           .then(pl.col("total_after") / pl.col("total_before"))
                           .otherwise(None).alias("ratio"),
                           pl.col("category").replace_strict(order, default=99,
                                                             return_dtype=pl.Int64)
                           .alias("_o"))
            .sort("_o", "detail").drop("_o"))


def device_table(b: Activities, a: Activities, an_b, an_a) -> pl.DataFrame | None:
    """Per device (the i-th device of one side against the i-th of the other), where both
    sides have the same number of devices: category totals of each side."""
    def per(acts, an):
        f = _category_frame(acts, an).filter(pl.col("device").is_not_null())
        devs = (acts.rows.filter(pl.col("kind") == "gpu")
                .select(pl.col("task_index").cast(pl.Int64), pl.col("device").cast(pl.Int64),
                        "task_label").unique().sort("task_index", "device")
                .with_row_index("index"))
        wide = (f.group_by("task_index", "device", "category").agg(pl.col("dur").sum())
                .pivot(on="category", index=["task_index", "device"], values="dur"))
        return devs.join(wide, on=["task_index", "device"], how="left").fill_null(0)
    pb, pa = per(b, an_b), per(a, an_a)
    if pb.height != pa.height or pb.height == 0:
        return None
    cats = [c for c in CATEGORY_ORDER if c in pb.columns or c in pa.columns]
    def norm(df, s):
        df = df.with_columns([pl.lit(0, pl.Int64).alias(c) for c in cats if c not in df.columns])
        return df.select("index", (pl.col("task_label") + " / GPU "
                                   + pl.col("device").cast(pl.Utf8)).alias(f"device_{s}"),
                         *[pl.col(c).alias(f"{c}_{s}") for c in cats])
    j = norm(pb, "before").join(norm(pa, "after"), on="index")
    return j.with_columns([(pl.col(f"{c}_after") - pl.col(f"{c}_before")).alias(f"{c}_delta")
                           for c in cats] + [
        pl.when(pl.col(f"{c}_before") > 0).then(pl.col(f"{c}_after") / pl.col(f"{c}_before"))
        .otherwise(None).alias(f"{c}_ratio") for c in cats])


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def model_table(an_b, an_a) -> pl.DataFrame:
    """The efficiency model (both forms), host offload and the causes of GPU idle time of
    each run, side by side (efficiencies as fractions; causes in ns)."""
    rows: list[tuple[str, float | None, float | None]] = []
    for form in ("talp", "nccl"):
        for f in ("parallel", "load_balance", "communication", "orchestration"):
            rows.append((f"{form}.{f}", getattr(getattr(an_b, form), f) if an_b else None,
                         getattr(getattr(an_a, form), f) if an_a else None))
    rows.append(("host.offload", _mean([h.offload_efficiency for h in an_b.host]) if an_b
                 else None, _mean([h.offload_efficiency for h in an_a.host]) if an_a else None))
    cb = an_b.idle.job.causes if an_b is not None and an_b.idle is not None else {}
    ca = an_a.idle.job.causes if an_a is not None and an_a.idle is not None else {}
    for cause in sorted(set(cb) | set(ca)):
        rows.append((f"idle.{cause}", float(cb.get(cause, 0)), float(ca.get(cause, 0))))
    df = pl.DataFrame(rows, schema={"metric": pl.Utf8, "before": pl.Float64,
                                    "after": pl.Float64}, orient="row")
    return df.with_columns((pl.col("after") - pl.col("before")).alias("delta"))


def rules_table(rb: dict[str, int] | None, ra: dict[str, int] | None) -> pl.DataFrame | None:
    """Rows each nsys rule found on each side (None where neither side has exports)."""
    if rb is None and ra is None:
        return None
    names = sorted(set(rb or {}) | set(ra or {}))
    return pl.DataFrame({"rule": names,
                         "before": [(rb or {}).get(n) for n in names],
                         "after": [(ra or {}).get(n) for n in names]},
                        schema={"rule": pl.Utf8, "before": pl.Int64, "after": pl.Int64})


# ------------------------------------------------------------------- iterations --

def pick_range(before: Activities, after: Activities | None = None
               ) -> tuple[str, str | None] | None:
    """(range, domain) of the step of a run (with `after`, of both runs), or None: the
    range `steps.pick` finds."""
    found = pick(before, after)
    return None if found is None or found.name is None else (found.name, found.domain)


STEP_CATEGORIES = ("compute kernels", "NCCL kernels", "memcpy", "memset")
# the bound of a step's GPU idle time: the idle causes (idle.py) as an analyst groups them
IDLE_GROUPS = (("launching", ("cuda_launch",)), ("host compute", ("host_compute",)),
               ("synchronisation", ("cuda_sync",)),
               ("waiting for data", ("wait", "io", "sleep")),
               ("copy calls", ("cuda_memcpy",)))


def with_idle_groups(steps: pl.DataFrame) -> pl.DataFrame:
    """A step table with one column per idle group ('idle: launching', ..., 'idle: other'),
    the sums of its causes' columns, where the table has the causes."""
    causes = [c for c in steps.columns if c.startswith("idle.")]
    if not causes:
        return steps
    grouped = {c for _, keys in IDLE_GROUPS for c in (f"idle.{k}" for k in keys)}
    cols = [pl.sum_horizontal([pl.col(f"idle.{k}") for k in keys if f"idle.{k}" in causes]
                              or [pl.lit(0, pl.Int64)]).alias(f"idle: {g}")
            for g, keys in IDLE_GROUPS]
    rest = [pl.col(c) for c in causes if c not in grouped]
    cols.append(pl.sum_horizontal(rest or [pl.lit(0, pl.Int64)]).alias("idle: other"))
    return steps.with_columns(cols)


def iteration_shifts(ib: pl.DataFrame, ia: pl.DataFrame) -> dict[str, Shift]:
    """The step's duration, and inside it its categories, GPU idle time and idle groups:
    one family of tests, Holm-corrected (`stats.holm`), so that nothing is named as moved
    by chance among the dozen quantities looked at."""
    out = {"duration": compare_samples(ib["duration"].to_numpy(), ia["duration"].to_numpy())}
    family = {}
    cols = [c for c in STEP_CATEGORIES if c in ib.columns and c in ia.columns]
    if "gpu_idle" in ib.columns and "gpu_idle" in ia.columns:
        cols.append("gpu_idle")
    cols += [c for c in ib.columns if c.startswith("idle: ") and c in ia.columns]
    for c in cols:
        if ib[c].sum() or ia[c].sum():
            family["GPU idle" if c == "gpu_idle" else c] = compare_samples(ib[c].to_numpy(),
                                                                           ia[c].to_numpy())
    out.update(holm(family))
    return out


STEP_KERNELS = 12  # kernels tested per step: those whose median time per step moved most


def step_kernel_table(b: Activities, a: Activities, kernels: pl.DataFrame,
                      ib: pl.DataFrame, ia: pl.DataFrame) -> pl.DataFrame:
    """Per kernel, its time and launches per step on each side (medians over the steps,
    the activities that start in each), for the STEP_KERNELS kernels whose median moved
    most, each with its verdict (Holm-corrected over them): kernel, label, n_before,
    n_after (launches per step), median_before, median_after (ns per step), change, p,
    lo, hi (the 95 % interval of the median change, ns), verdict."""
    names = kernels.select("kernel", "names").explode("names").rename({"names": "text"})

    def per_step(acts: Activities, steps: pl.DataFrame) -> pl.DataFrame:
        keys = (acts.kernel_names.rename({"id": "full", "name": "text"})
                .join(names, on="text").select(pl.col("full").cast(pl.Int32), "kernel"))
        bounds = steps.select("start", "end", "instance").sort("start")
        parts = []
        for chunk in _kernel_chunks(acts):  # each kernel in the step it starts in
            k = chunk.join(keys, on="full").sort("start")
            tagged = (k.join_asof(bounds, on="start", strategy="backward")
                      .filter(pl.col("start") < pl.col("end")))
            parts.append(tagged.group_by("instance", "kernel").agg(
                pl.col("dur").sum().alias("time"), pl.len().cast(pl.Int64).alias("n")))
        if not parts:  # stored activities without GPU work
            parts = [pl.DataFrame(schema={"instance": steps.schema["instance"],
                                          "kernel": pl.Utf8, "time": pl.Int64,
                                          "n": pl.Int64})]
        sums = pl.concat(parts).group_by("instance", "kernel").agg(
            pl.col("time").sum(), pl.col("n").sum()) if len(parts) > 1 else parts[0]
        grid = steps.select("instance").join(kernels.select("kernel"), how="cross")
        return (grid.join(sums, on=["instance", "kernel"], how="left")
                .with_columns(pl.col("time").fill_null(0), pl.col("n").fill_null(0))
                .sort("kernel", "instance"))

    if kernels.height == 0 or ib.height == 0 or ia.height == 0:
        return _step_verdicts(None, None, {}, "kernel")
    label = dict(kernels.select("kernel", "label").iter_rows())
    return _step_verdicts(per_step(b, ib), per_step(a, ia), label, "kernel")


def _step_verdicts(sb: pl.DataFrame | None, sa: pl.DataFrame | None, label: dict,
                   key: str) -> pl.DataFrame:
    """From each side's time per (instance, `key`) (with `n`, the count per step), the
    STEP_KERNELS keys whose median per step moved most, each with its verdict
    (Holm-corrected over them): key, label, n_before, n_after (medians per step),
    median_before, median_after (ns per step), change, p, lo, hi (the 95 % interval of the
    median change, ns), verdict."""
    schema = {key: pl.Utf8, "label": pl.Utf8, "n_before": pl.Float64,
              "n_after": pl.Float64, "median_before": pl.Float64,
              "median_after": pl.Float64, "change": pl.Float64, "p": pl.Float64,
              "lo": pl.Float64, "hi": pl.Float64, "verdict": pl.Utf8}
    if sb is None or sa is None or sb.height == 0 or sa.height == 0:
        return pl.DataFrame(schema=schema)
    med = (sb.group_by(key).agg(pl.col("time").median().alias("mb"))
           .join(sa.group_by(key).agg(pl.col("time").median().alias("ma")), on=key)
           .with_columns((pl.col("ma") - pl.col("mb")).abs().alias("moved"))
           .sort("moved", key, descending=[True, False]).head(STEP_KERNELS))
    tested = med[key].to_list()

    def samples(df: pl.DataFrame) -> dict:
        return dict(df.filter(pl.col(key).is_in(tested)).group_by(key)
                    .agg(pl.col("time"), pl.col("n").median()).select(
                        key, pl.struct("time", "n")).iter_rows())

    xb, xa = samples(sb), samples(sa)
    shifts = holm({k: compare_samples(np.array(xb[k]["time"]), np.array(xa[k]["time"]))
                   for k in tested})
    rows = []
    for k in tested:
        sh = shifts[k]
        lo, hi = sh.interval if sh.interval is not None else (None, None)
        rows.append({key: k, "label": label.get(k, k), "n_before": xb[k]["n"],
                     "n_after": xa[k]["n"], "median_before": sh.median_before,
                     "median_after": sh.median_after, "change": sh.change, "p": sh.p,
                     "lo": lo, "hi": hi, "verdict": sh.verdict})
    return pl.DataFrame(rows, schema=schema)


def layer_table(pb: ComparedRanges | None, pa: ComparedRanges | None) -> pl.DataFrame:
    """Per NVTX range (name with digit runs folded to '#', but numbered layers':
    `layers.comparison_ranges`; domain), what its projection onto the GPU holds on each
    side: instances (count), gpu (the GPU time of the work its calls launched), span
    (projected durations summed), delta and ratio of gpu, the whole names folded into it
    (`names`) and the range it is most often directly inside (`parent`; of a tie, the
    first by name)."""
    schema = {"range": pl.Utf8, "domain": pl.Utf8, "count": pl.Int64, "gpu": pl.Int64,
              "span": pl.Int64, "names": pl.List(pl.Utf8),
              "parents": pl.List(pl.Utf8)}

    def per(ranges: ComparedRanges | None) -> pl.DataFrame:
        if ranges is None or ranges.sums.height == 0:
            return pl.DataFrame(schema=schema)
        sums = ranges.sums
        parents = (sums.filter(pl.col("parent_range").is_not_null())
                   .group_by("range", "domain", "parent_range").agg(pl.col("count").sum())
                   .filter(pl.col("count") == pl.col("count").max().over("range", "domain"))
                   .group_by("range", "domain")
                   .agg(pl.col("parent_range").sort().alias("parents")))
        return (sums.group_by("range", "domain")
                .agg(pl.col("count").sum(), pl.col("gpu").sum(), pl.col("span").sum(),
                     pl.col("name").unique().sort().alias("names"))
                .join(parents, on=["range", "domain"], how="left")
                .with_columns(pl.col("parents").fill_null([]))
                .select(*schema).cast(schema))

    b, a = per(pb), per(pa)
    cols = ("count", "gpu", "span")
    j = (b.rename({c: f"{c}_before" for c in (*cols, "names", "parents")})
         .join(a.rename({c: f"{c}_after" for c in (*cols, "names", "parents")}),
               on=["range", "domain"], how="full", coalesce=True)
         .with_columns(*(pl.col(f"{c}_{x}").fill_null(0) for c in cols
                         for x in ("before", "after"))))
    return (j.with_columns((pl.col("gpu_after") - pl.col("gpu_before")).alias("delta"),
                           pl.when(pl.col("gpu_before") > 0)
                           .then(pl.col("gpu_after") / pl.col("gpu_before"))
                           .otherwise(None).alias("ratio"),
                           pl.concat_list(pl.col("names_before").fill_null([]),
                                          pl.col("names_after").fill_null([]))
                           .list.unique().list.sort().alias("names"),
                           # the range it is most often directly inside (before's, else after's)
                           pl.coalesce(pl.col("parents_before").list.first(),
                                       pl.col("parents_after").list.first()).alias("parent"))
            .drop("names_before", "names_after", "parents_before", "parents_after")
            .sort(pl.col("delta").abs(), "range", "domain",
                  descending=[True, False, False]))


def step_layer_table(pb: ComparedRanges | None, pa: ComparedRanges | None,
                     ib: pl.DataFrame, ia: pl.DataFrame) -> pl.DataFrame:
    """Per NVTX range family, its projected GPU time per step on each side (the ranges
    whose CPU start lies in each step), for the STEP_KERNELS families whose median moved
    most, each with its verdict (as `step_kernel_table`; column `range`)."""

    def per_step(ranges: ComparedRanges | None, steps: pl.DataFrame) -> pl.DataFrame | None:
        if ranges is None or ranges.starts.height == 0:
            return None
        inst = ranges.starts.select("key", pl.col("cpu_start").alias("start"), "gpu")
        tagged = (inst.join_asof(steps.select("start", "end", "instance").sort("start"),
                                 on="start", strategy="backward")
                  .filter(pl.col("start") < pl.col("end")))
        sums = (tagged.group_by("instance", "key")
                .agg(pl.col("gpu").sum().alias("time"), pl.len().cast(pl.Int64).alias("n"))
                .join(ranges.keys, on="key").drop("key"))
        grid = steps.select("instance").join(sums.select("range").unique(), how="cross")
        return (grid.join(sums, on=["instance", "range"], how="left")
                .with_columns(pl.col("time").fill_null(0), pl.col("n").fill_null(0)))

    sb, sa = per_step(pb, ib), per_step(pa, ia)
    if sb is not None and sa is not None:  # both sides' families, zero where one lacks it
        names = pl.concat([sb.select("range"), sa.select("range")]).unique()
        sb = ib.select("instance").join(names, how="cross").join(
            sb, on=["instance", "range"], how="left").fill_null(0)
        sa = ia.select("instance").join(names, how="cross").join(
            sa, on=["instance", "range"], how="left").fill_null(0)
    return _step_verdicts(sb, sa, {}, "range")


# -------------------------------------------------------------------- paragraph --

def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} %"


def _p(shift: Shift) -> str:
    if shift.p is None:
        return "one instance a side: noise cannot be judged" if \
            max(shift.n_before, shift.n_after) <= 1 else \
            f"{shift.n_before}/{shift.n_after} instances: too few to judge noise"
    p = "p < 0.001" if shift.p < 0.001 else f"p = {shift.p:.3f}"
    return f"{p}, Mann-Whitney U, n = {shift.n_before}/{shift.n_after}"


RATE_METRICS = ("Tensor Active", "Tensor Active / FP16 Active", "SM Issue", "SM Active",
                "DRAM Read Bandwidth", "DRAM Write Bandwidth", "Compute Warps in Flight")


def rates_table(kernels: pl.DataFrame, before, after) -> pl.DataFrame | None:
    """Per kernel of the kernel table and metric, each side's rate (the sample-mixing
    model's, analysis/kernel_metrics.py; the job's where a side has several GPUs; the
    time-weighted mean of the names a normalised match groups) and the change; None when
    neither side has GPU metrics."""
    def per(km, side: str) -> pl.DataFrame | None:
        if km is None or km.empty:
            return None
        r = km.rates
        scope = "job" if "job" in r["device"].to_list() else r["device"][0]
        r = r.filter((pl.col("device") == scope) & pl.col("kind").is_in(["kernel", "nccl"])
                     & pl.col("metric").is_in(RATE_METRICS) & pl.col("rate").is_not_nan())
        return r.select(pl.col("kernel").alias("text"), "metric", "rate", "time")

    sides = {"before": per(before, "before"), "after": per(after, "after")}
    if all(v is None for v in sides.values()):
        return None
    names = kernels.select("kernel", "short", "names").explode("names").rename(
        {"names": "text"})
    out = None
    for side, r in sides.items():
        if r is None:
            continue
        w = (r.join(names, on="text", how="inner")
             .group_by("kernel", "metric")
             .agg(((pl.col("rate") * pl.col("time")).sum() / pl.col("time").sum())
                  .alias(side)))
        out = w if out is None else out.join(w, on=["kernel", "metric"], how="full",
                                             coalesce=True)
    for side in sides:
        if side not in out.columns:
            out = out.with_columns(pl.lit(None, pl.Float64).alias(side))
    order = kernels.select("kernel", "short").with_row_index("rank")
    metric_rank = pl.col("metric").replace_strict(
        {m: i for i, m in enumerate(RATE_METRICS)}, return_dtype=pl.Int64)
    return (out.join(order, on="kernel", how="left")
            .with_columns((pl.col("after") - pl.col("before")).alias("delta"))
            .sort(["rank", metric_rank]).select("kernel", "short", "metric", "before", "after",
                                             "delta"))


# ---------------------------------------------------------------------- compare --

def compare_sides(before: Side, after: Side, iterations: str | None = None,
                  domain: str | None = None, auto_iterations: bool = True) -> Comparison:
    """The comparison of two sides already read (`Side`): every table, the verdict and the
    paragraph. `iterations` names the repeated range for the verdict (else, with
    `auto_iterations`, the most repeated top-level range of BEFORE that AFTER has too)."""
    b, a = before.acts, after.acts
    warnings: list[str] = []
    kernels = kernel_table(b, a)
    if kernels["count_before"].sum() and kernels["count_after"].sum() and \
            not kernels.filter(pl.col("matched_by") == "exact").height:
        warnings.append("the two runs have no kernel name in common: the comparison is weak.")
    devices = device_table(b, a, before.analysis, after.analysis)
    nb = b.rows.filter(pl.col("kind") == "gpu").select("task_index", "device").unique().height
    na = a.rows.filter(pl.col("kind") == "gpu").select("task_index", "device").unique().height
    if nb != na:
        warnings.append(f"the runs have different GPU counts ({nb} and {na}): no per-device "
                        f"comparison.")
    pb = before.layer_ranges if before.layer_ranges is not None else comparison_ranges(b)
    pa = after.layer_ranges if after.layer_ranges is not None else comparison_ranges(a)
    its = found = None
    if iterations is not None or auto_iterations:
        picked = iterations is None
        spec = (iterations, domain)
        if picked:
            cb = before.candidates if before.candidates is not None else candidates(b)
            ca = after.candidates if after.candidates is not None else candidates(a)
            found = choose(cb, ca, gpu=b.gpu_count() > 0)
            spec = None if found is None or found.name is None else (found.name, found.domain)
        if spec is not None:
            # with each side's idle causes per step where it summed them for this range
            use = before.idle_steps is not None and after.idle_steps is not None and \
                before.step == tuple(spec) and after.step == tuple(spec)
            ib = step_rows(b, *spec, before.idle_steps if use else None)
            ia = step_rows(a, *spec, after.idle_steps if use else None)
            if iterations is not None:
                for side, i in ((before, ib), (after, ia)):
                    if i.height == 0:
                        from ..errors import InputError
                        raise InputError(f"{side.label} side: no instance of the NVTX range "
                                         f"'{iterations}" + (f"@{domain}" if domain else "")
                                         + "'")
            if ib.height and ia.height:
                ib, ia = with_idle_groups(ib), with_idle_groups(ia)
                its = Iterations(spec[0], spec[1], picked, ib, ia, iteration_shifts(ib, ia),
                                 found, step_kernel_table(b, a, kernels, ib, ia),
                                 step_layer_table(pb, pa, ib, ia))
    if its is not None:
        verdict = its.shifts["duration"]
    else:
        verdict = compare_samples(np.array([before.elapsed]), np.array([after.elapsed]))
    comp = Comparison(before, after, kernels, nvtx_table(b, a),
                      category_table(b, a, before.analysis, after.analysis), devices,
                      model_table(before.analysis, after.analysis),
                      rules_table(before.rules, after.rules), its, verdict, "", warnings,
                      rates_table(kernels, before.kernel_metrics, after.kernel_metrics),
                      found if its is None else None, _range_tree(b, a),
                      layer_table(pb, pa) if pb is not None or pa is not None else None)
    from .launch import launch_changes

    comp.launches = launch_changes(kernels, getattr(before.kernel_metrics, "launch", None),
                                   getattr(after.kernel_metrics, "launch", None))
    comp.samples = sample_table(before.samples, after.samples)
    comp.paragraph = explain(comp)
    return comp


SAMPLE_MIN_SHARE = 0.01  # functions below this share of samples on both sides: left out


def sample_table(b, a) -> pl.DataFrame | None:
    """Per leaf function (function, module), its samples and share of the run's samples on
    each side (`scope` 'run'), and of the launching threads' samples inside the GPU's idle
    gaps (`scope` 'gaps'), the change of share (points) and the p-value that the two shares
    are one (`stats.proportion_p`, Holm-adjusted within a scope); `moved`: beyond noise and
    by at least `stats.SHARE_MOVE`. Functions under `SAMPLE_MIN_SHARE` on both sides are
    left out. None when a side has no samples."""
    from .stats import SHARE_MOVE, proportion_p

    if b is None or a is None:
        return None
    parts = []
    for scope, fb, fa in (("run", b.run, a.run), ("gaps", b.gaps, a.gaps)):
        if fb is None or fa is None:
            continue
        nb = int(fb["samples"].sum()) if fb.height else 0
        na = int(fa["samples"].sum()) if fa.height else 0
        if nb == 0 or na == 0:
            continue
        t = (fb.rename({"samples": "samples_before"})
             .join(fa.rename({"samples": "samples_after"}), on=["function", "module"],
                   how="full", coalesce=True)
             .with_columns(pl.col("samples_before").fill_null(0),
                           pl.col("samples_after").fill_null(0))
             .with_columns((pl.col("samples_before") / nb).alias("share_before"),
                           (pl.col("samples_after") / na).alias("share_after"))
             .filter((pl.col("share_before") >= SAMPLE_MIN_SHARE)
                     | (pl.col("share_after") >= SAMPLE_MIN_SHARE))
             .with_columns((pl.col("share_after") - pl.col("share_before")).alias("delta")))
        p = [proportion_p(x, nb, y, na) for x, y in
             t.select("samples_before", "samples_after").iter_rows()]
        # Holm-Bonferroni within the scope: p_(i) x (m - i + 1), running maximum
        order = sorted(range(len(p)), key=lambda i: (p[i], i))
        adjusted = [1.0] * len(p)
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, p[i] * (len(p) - rank)))
            adjusted[i] = running
        t = t.with_columns(pl.Series("p", adjusted, dtype=pl.Float64),
                           pl.lit(scope).alias("scope"),
                           pl.lit(nb).alias("total_before"), pl.lit(na).alias("total_after"))
        t = t.with_columns(((pl.col("p") < 0.05) & (pl.col("delta").abs() >= SHARE_MOVE))
                           .alias("moved"))
        parts.append(t.sort(pl.col("delta").abs(), "function", "module",
                            descending=[True, False, False]))
    if not parts:
        return None
    return pl.concat(parts).select("scope", "function", "module", "samples_before",
                                   "share_before", "samples_after", "share_after", "delta",
                                   "p", "moved", "total_before", "total_after")


def _range_tree(b: Activities, a: Activities) -> pl.DataFrame:
    """The parent of each range family (`steps.range_parents`): before's, and after's for
    the families before lacks."""
    tb, ta = range_parents(b), range_parents(a)
    return pl.concat([tb, ta.join(tb, on=["family", "domain"], how="anti",
                                  nulls_equal=True)])


def gate(c: Comparison, pct: float) -> tuple[bool, str]:
    """Whether `--fail-if-slower PCT` fails: the iteration median (or, without iterations,
    the elapsed time) got slower by more than PCT % and, where noise can be judged, beyond
    noise. Returns (fails, why)."""
    v = c.verdict
    if v.change is None:
        return False, "no time to compare"
    slower = v.change * 100 > pct
    if v.p is None:
        return slower, (f"{_pct(v.change)} against a limit of +{pct:g} % ("
                        f"{_p(v)}; the change alone decides)")
    return slower and v.verdict == "slower", (
        f"{_pct(v.change)} against a limit of +{pct:g} % ({v.verdict}, {_p(v)})")


# ------------------------------------------------------------------------ sides --

def is_nsys2prv_trace(path: Path) -> bool:
    """A trace written by nsys2prv: its second header line says so."""
    from ..paraver.read import open_text

    try:
        with open_text(path) as f:
            first, second = f.readline(), f.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return first.startswith("#Paraver") and second.startswith("# nsys2prv")


def trace_window(path: Path, window) -> tuple[int, int | None]:
    """[start, end) on a trace's own time of a window: a time window as given, an NVTX
    range (`--filter-nvtx`) looked up among the trace's ranges."""
    from ..errors import InputError
    from ..pipeline.window import NvtxFilter, nearest_ranges, nvtx_instance

    if not isinstance(window, NvtxFilter):
        return window.start or 0, window.end
    from .activities import range_instances

    acts = stored_activities(path)
    try:
        ranges = range_instances(acts)
    finally:
        acts.close()
    hit = nvtx_instance(ranges, window)
    if hit is None:
        near = nearest_ranges([ranges], window.name)
        raise InputError(f"no instance {window.index} of the NVTX range "
                         f"'{window.describe()}' in {path}"
                         + (f" (ranges: {', '.join(near)})" if near else ""))
    return hit


def read_side(inputs: list[str], label: str, workdir: Path, window=None,
              models: bool = True, rules: bool = True, jobs: int = 1,
              on_report=None, idle: bool = True, isolate: bool = False,
              attributes: bool = False,
              iterations: tuple[str, str | None] | None = None) -> Side:
    """One side: its trace (the reports' translation read as it is merged, never written:
    `api.translate_stream` into `workdir`; or the trace given, cut to `window`), its
    activities, its models and, for exports, the rows nsys' rules find. Errors name the
    side. The GPU activities are kept on disk in a store made in `workdir` (a window at a
    time in memory, as `analyze` keeps them); the comparison reads them back a bucket at a
    time. `isolate` prepares the reports in a process of its own, so that the peak of the
    preparation and that of the analysis do not add up in one process. `attributes` keeps
    the activities' attributes in the partials (what a trace merged from them needs).
    With the idle causes, they are also summed per instance of the side's step (the range
    `iterations` names, else the one `steps.pick` finds on this side: the comparison's
    step whenever both sides find the same), on a second pass over what the first kept."""
    from .. import _alloc
    from ..errors import InputError, UsageError
    from ..report.inputs import run_inputs

    collector = acts = None
    try:
        paths, traces = run_inputs(inputs)
        out = workdir / f"{label}.prv"
        exports: list[str] = []
        partials: list[str] = []
        facts = found = None
        if traces:
            src = Path(traces[0])
            if not src.exists():
                raise InputError(f"{src}: no such file")
            if not is_nsys2prv_trace(src):
                raise InputError(f"{src}: not a trace written by nsys2prv (its header does "
                                 f"not say so); translate the reports instead")
            if window is None:
                out = src
            else:
                from ..pipeline.window import cut_trace

                lo, hi = trace_window(src, window)
                cut_trace(src, out, lo, hi)
        else:
            from ..api import translate_stream

            # the side's trace is never written: the analysis reads it as it is merged
            if isolate:  # the preparation's memory (and the rules') is given back before
                from ..lifeline import process_pool  # the analysis starts

                with process_pool(1) as p:
                    out, found = p.submit(_prepare, paths, workdir, label, window, jobs,
                                          attributes, rules).result()
            else:
                out = translate_stream(paths, workdir, name=label, window=window, jobs=jobs,
                                       on_report=on_report, attributes=attributes)
            exports = paths
            partials, facts = out.partials, out.facts
        samples = shares = None
        analysis = step = idle_steps = None
        if models:  # one pass for the model, the activities, the idle causes, the samples
            from .activities import ActivityCollector
            from .kernel_metrics import SampleCollector
            from .model import analyze_path

            from .launch import LaunchCollector

            from ..paraver.read import open_trace
            from . import samples as code

            from ..lifeline import signals_held

            info = open_trace(out)  # read once, for every collector and the model
            # the GPU activities kept on disk, a window at a time in memory (as `analyze`
            # keeps them), in the comparison's folder: the parent reads them from there
            # and removes them with it, whatever becomes of this process
            with signals_held():  # made and held at once: a Ctrl-C finds it to remove
                collector = ActivityCollector(info, spill=True, spill_dir=workdir)
            samples = SampleCollector(info, store=collector.store)
            launches = LaunchCollector(info, per_kernel=bool(samples.types),
                                       store=collector.store)
            observers = [collector, launches] + ([samples] if samples.types else [])
            state: dict = {}
            labels = code.read_labels(info)[0]
            code_samples = code.SampleCollector() if labels else None
            if code_samples is not None:
                observers.append(code_samples)

            def gap_samples(keys, rows):
                state["gap_samples"] = found = code.OnePassGapSamples(keys, rows)
                return found

            def steps() -> pl.DataFrame | None:
                # the side's own step (the range named, else the one this side alone
                # gives): its idle causes summed per instance on the causes' pass. The
                # pass's per-window arrays freed in glibc's heap go back first (as
                # `analyze` does between its passes)
                _alloc.trim()
                state["acts"] = acts = collector.stored()
                state["candidates"] = cand = candidates(acts)
                spec = iterations
                if spec is None:
                    found = choose(cand, gpu=acts.gpu_count() > 0)
                    spec = None if found is None or found.name is None else \
                        (found.name, found.domain)
                state["step"] = spec
                return None if spec is None else \
                    instances(acts, *spec).select("instance", "start", "end")

            analysis = analyze_path(info, idle, 10, observers=observers, detail=False,
                                    steps=steps if idle else None,
                                    one_pass_code=gap_samples if code_samples else None)
            if code_samples is not None:
                shares = code.shares(code_samples, state.get("gap_samples"), labels)
            if "acts" in state:
                acts = state["acts"]
                step = state.get("step")
                if step is not None and analysis.idle is not None:
                    idle_steps = analysis.idle.instances
        else:
            acts = stored_activities(out, workdir)
        removed = None
        if partials and not attributes:  # read for the last time: removed meanwhile
            import threading

            removed = threading.Thread(target=_remove, args=(partials,))
            removed.start()
            partials = []
        km = None
        if collector is not None:
            if "acts" not in state:
                acts = collector.stored()
            from .kernel_metrics import KernelMetrics, kernel_metrics

            km = kernel_metrics(acts, samples if samples.types else None,
                                launches=launches.result(),
                                classes=launches.kernel_classes(), info=info)
            # what the comparison reads of them (the rates, the launches): the rest holds a
            # few numbers a launch (75 MB of a 10M side), sent for nothing to the comparing
            # process
            km = KernelMetrics(rates=km.rates, launch=km.launch, note=km.note)
        cand = state.get("candidates") if collector is not None else None
        if cand is None:
            cand = candidates(acts)
        if not isolate and rules and exports:
            found = _rules(exports)
        if removed is not None:
            removed.join()
        _alloc.trim()  # what the kernel metrics freed, before the ranges' projection
        ranges = comparison_ranges(acts)
        if ranges is not None and isinstance(acts, StoredActivities):
            ranges.folder = acts.store.dir  # handed over through a file, as the ranges
    except BaseException as e:
        if collector is not None:  # the side's store goes with it
            collector.close()
        elif isinstance(acts, StoredActivities):
            acts.close()
        if isinstance(e, (InputError, UsageError)):
            raise type(e)(f"{label} side: {e}") from None
        raise
    return Side(label, " ".join(inputs), acts, analysis, found, exports, partials, facts, km,
                step, idle_steps, cand, ranges, shares)


PARALLEL_BYTES = 32 << 20


def _size(inputs: list[str]) -> int:
    """Bytes of the files a side names (0 for what is not a file yet: a glob, @LIST)."""
    total = 0
    for i in inputs:
        try:
            p = Path(i)
            total += sum(f.stat().st_size for f in p.iterdir()) if p.is_dir() \
                else p.stat().st_size
        except OSError:
            pass
    return total


def _read_side_args(kwargs: dict) -> Side:
    return read_side(**kwargs, isolate=True)


def _prepare(paths: list[str], workdir: Path, label: str, window, jobs: int,
             attributes: bool, rules: bool):
    """A side's reports prepared (`api.translate_stream`) and nsys' rules on its exports,
    in the process of its own that `read_side(isolate=True)` starts: their memory is given
    back before the analysis starts (on 10M activities, the rules after the analysis in one
    process peaked at 930 MB, here at 620)."""
    from ..api import translate_stream

    stream = translate_stream(paths, workdir, name=label, window=window, jobs=jobs,
                              attributes=attributes)
    return stream, (_rules(paths) if rules else None)


def _remove(dirs: list[str]) -> None:
    import shutil

    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def _rules(exports: list[str]) -> dict[str, int]:
    """Rows found by each of nsys' rules, summed over a side's exports."""
    from ..rules import run_all

    out: dict[str, int] = {}
    for e in exports:
        if not e.endswith(".sqlite"):
            continue
        for r in run_all(e):
            out[r.rule] = out.get(r.rule, 0) + (0 if r.skipped else r.rows.height)
    return out


def compare(before: str | list[str], after: str | list[str], *, window=None,
            iterations: str | None = None, models: bool = True, rules: bool = True,
            idle: bool = True, workdir: str | Path | None = None, jobs: int = 1,
            parallel: bool | None = None, trace: str | Path | None = None) -> Comparison:
    """Compare two runs, each one export, several rank exports (a directory, glob or
    @LIST too), a report or a trace written by nsys2prv. `window` (a Filter, or nsys'
    text: "1s/2s" or "RANGE[@DOMAIN][/INDEX]") is applied to each side on its own clock;
    `iterations` ("RANGE[@DOMAIN]") names the repeated range the verdict is made on (else
    the most repeated top-level range). `idle` adds the causes of GPU idle time (a second
    pass over each trace); `parallel` reads the two sides in two processes (default: when
    each side's files hold more than PARALLEL_BYTES, where that pays for two interpreter
    starts). Returns every table as polars frames
    (`Comparison.tables()`), the verdict and a paragraph."""
    import tempfile

    from ..errors import UsageError
    from ..pipeline.window import parse_window

    if isinstance(window, str):
        window = parse_window(window)
    name, domain = _split_range(iterations) if iterations else (None, None)
    if trace is not None:  # before any work
        from ..report.inputs import expand_inputs

        for side in (before, after):
            given = [side] if isinstance(side, (str, Path)) else list(side)
            if any(is_trace(str(p)) for p in expand_inputs([Path(i) for i in given])):
                raise UsageError("--trace needs the reports of each side (a side given as a "
                                 "trace cannot be translated again)")
    args = []
    with tempfile.TemporaryDirectory(prefix="nsys2prv-diff-", dir=workdir) as tmp:
        for label, inputs in (("before", before), ("after", after)):
            inputs = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
            # the partials keep the activities' attributes only for the trace of both runs
            args.append(dict(inputs=[str(i) for i in inputs], label=label, workdir=Path(tmp),
                             window=window, models=models, rules=rules, jobs=jobs, idle=idle,
                             attributes=trace is not None,
                             iterations=(name, domain) if name else None))
        if parallel is None:
            parallel = min(_size(a["inputs"]) for a in args) > PARALLEL_BYTES
        if parallel:
            # each side is one process's work (translate, then scan): two at once
            from ..lifeline import process_pool
            from ..pipeline.budget import worker_environment

            with worker_environment(share=2), process_pool(2) as pool:
                sides = list(pool.map(_read_side_args, args))
        else:
            sides = [read_side(**a) for a in args]
        result = compare_sides(sides[0], sides[1], name, domain)
        if trace is not None:  # from the reports as the sides prepared them
            _trace_of_both(sides, trace, window, jobs)
    return result


def _trace_of_both(sides: list[Side], trace: str | Path, window, jobs: int) -> None:
    """One trace of both runs (application 1 = before, 2 = after), merged from the partials
    each side was read from: preparing 2 x 1,024 reports again took two more minutes."""
    from ..api import merge_application_partials, translate_applications
    from ..pipeline.merge import Application, ApplicationWindowMoved

    try:
        merge_application_partials([Application(s.partials, s.label, s.facts) for s in sides],
                                   trace, window=window)
    except ApplicationWindowMoved:  # pragma: no cover - each side's window settled already
        translate_applications([s.exports for s in sides], trace, window=window, jobs=jobs,
                               labels=[s.label for s in sides])


def _split_range(text: str) -> tuple[str, str | None]:
    """RANGE[@DOMAIN] -> (range, domain or None)."""
    name, at, domain = text.rpartition("@") if "@" in text else (text, "", "")
    return name, (domain or None)
