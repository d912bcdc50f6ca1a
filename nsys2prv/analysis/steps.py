"""The training step, found as an analyst finds it: a repeated NVTX range at any nesting
depth whose instances follow each other on one thread, number many, and hold most of the
GPU work.

Candidates are NVTX ranges grouped by name with digit runs folded to '#' ('Batch 12' and
'Batch 13' are 'Batch #', 'ProfilerStep#7' is 'ProfilerStep##') and domain, counted on the
process that holds most instances (a step is the k-th instance on each process: summed over
the ranks of a job, a short call range of 1,024 ranks would look like a loop). A candidate
is a loop when, on every process, its instances are on one thread and never overlap, and
there are MIN_STEPS of them at least. What it covers: the GPU time (kernels, copies, sets)
that starts inside its instances, as a share of the GPU time of the processes that have it
(where the run has no GPU work, its share of the trace time).

The pick, among loops that cover COVER_FLOOR of the GPU work at least and within TOLERANCE
of the loop that covers most (the step holds nearly all the work; a range nested in it
holds a part): a name of a known step convention first (PyTorch's `ProfilerStep#N`,
Megatron / NeMo / DeepSpeed `iteration`, `step`, `train_step`, `Batch N`), a name of an
epoch last (an epoch holds steps), then the most instances (a step, not the epoch or the
training phase that holds the steps), then the larger share, the shallower range, the name.
The conventions order the candidates that cover the work alike; they never make a range
that covers little a step. An operator is never the step: PyTorch's autograd/ATen ranges
(`aten::*`, `*Backward0`, `c10d::*`, anything `record_function` numbers with `, seq = N` or
`, op_id = N`, FSDP's hooks among them: `OPERATOR`) repeat one after the other and can hold
most of the GPU work of a short capture, but each is one operation; where only they qualify,
no step is found and the capture is described as a whole. With the other run of a comparison, the step must be a loop
there too, with no more than twice or half as many instances.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from .activities import Activities
from .idle import CAUSE_KEYS, UNKNOWN_HOST

MIN_STEPS = 3  # fewer: the verdict cannot judge noise anyway (3 a side: p >= 0.1)
MIN_FOR_OUTLIERS = 4  # steps from which outliers are judged (Tukey's fences)
COVER_FLOOR = 0.25  # share of the GPU work a step must hold at least
TOLERANCE = 0.8  # a step holds this fraction of the largest share at least
NAME_FLOOR = 0.5  # and launches this share of the kernel names at least
DIGITS = r"(^|[^A-Za-z0-9])\d+"
DIGITS_RE = re.compile(DIGITS)
# names of steps in common frameworks (after digit folding), and of what holds steps
STEP_NAMES = re.compile(
    r"(?i)^(?:ProfilerStep|iteration|iter|step|train[ _]?step|training[ _]step|train[ _]batch|"
    r"training[ _]batch|batch|global[ _]step|train[ _]iteration)(?:\b|[#_ ])")
CONTAINER_NAMES = re.compile(r"(?i)^(?:epoch|train(?:ing)?[ _]?epoch)(?:\b|[#_ ])")
# PyTorch's operator ranges (autograd's NVTX: `emit_nvtx`, `record_function`): on a name or a
# family (digits folded to '#')
OPERATOR = re.compile(r"^(?:aten::|autograd::|torch::|c10d::|cudnn::|cublas::)|"
                      r"Backward\d*(?:,|$)|, (?:seq|op_id) = [\d#]+")


def family(column: str) -> pl.Expr:
    """A range name with its digit runs folded to '#' (not those inside words: conv2d)."""
    return pl.col(column).fill_null("").str.replace_all(DIGITS, "${1}#")


def fold(name: str) -> str:
    """`family` of one name."""
    return DIGITS_RE.sub(lambda m: m.group(1) + "#", name)


def range_families(acts: Activities) -> pl.DataFrame:
    """name id -> name text, family (computed once per distinct name)."""
    return acts.range_names.with_columns(family("name").alias("family"))


@dataclass
class StepPick:
    """The range picked as the step, why, and the candidates it was picked among."""

    name: str  # the family ('Batch #') or the one text repeated ('train_step')
    domain: str | None
    why: str
    # family, domain, n, tasks, gpu_share, time_share, depth, convention, loop, eligible,
    # note (why a candidate lost), best first
    candidates: pl.DataFrame = field(default_factory=pl.DataFrame)

    def runners_up(self, k: int = 3) -> pl.DataFrame:
        """The `k` candidates after the step, with why each lost."""
        if self.name is None:
            return self.candidates.head(k)
        return self.candidates.filter(
            ~((pl.col("family") == self.name) & pl.col("domain").eq_missing(self.domain))
        ).head(k)

    def to_dict(self) -> dict:
        return {"range": self.name, "domain": self.domain, "why": self.why,
                "candidates": self.candidates.to_dicts()}


_SCHEMA = {"family": pl.Utf8, "domain": pl.Utf8, "n": pl.Int64, "tasks": pl.Int64,
           "gpu_share": pl.Float64, "time_share": pl.Float64, "name_share": pl.Float64,
           "depth": pl.Float64, "convention": pl.Int64, "loop": pl.Boolean,
           "operator": pl.Boolean}


def candidates(acts: Activities) -> pl.DataFrame:
    """Every range family of a run (see the module's docstring): family, domain, n
    (instances on the busiest process), tasks (processes that have it), gpu_share,
    time_share (of the trace, on the busiest process), operator (a PyTorch operator range,
    `OPERATOR`, without a step's name: never the step), name_share (of the kernel names its
    processes launch, those launched inside it: for the loops that launch COVER_FLOOR of
    the GPU time, else null), depth (mean nesting level, 0 at the top), convention (0 a
    step's name, 1 any other, 2 an epoch's), loop (sequential on one thread of each
    process, MIN_STEPS instances at least). A few group-bys over the ranges and searches
    of their instances in the GPU work sorted once (`GpuWork`): what a side of a
    comparison computes in its own process, so that only this table travels."""
    if acts.ranges.height == 0:
        return pl.DataFrame(schema=_SCHEMA)
    fams = range_families(acts).select(pl.col("id").alias("name"), "family")
    tasks = acts.rows.select("row", pl.col("task_index").cast(pl.Int64))
    r = (acts.ranges.join(fams, on="name", how="left")
         .join(acts.domains, on="type", how="left")
         .join(tasks, on="row", how="left")
         .select("family", "domain", "task_index", "row", "start", "dur", "level"))
    key = ["family", "domain", "task_index"]
    end = pl.col("start") + pl.col("dur")
    # per process: one thread, no instance before the previous one ends
    per_task = (r.sort("start", "row")
                .with_columns((pl.col("start") < end.cum_max().shift(1).over(key))
                              .fill_null(False).alias("overlap"))
                .group_by(key).agg(pl.len().alias("n"), pl.col("row").n_unique().alias("rows"),
                                   pl.col("overlap").any(), pl.col("dur").sum(),
                                   (pl.col("level") - 1).clip(0, None).mean().alias("depth")))
    fam_key = ["family", "domain"]
    per = (per_task.sort("n", "dur", "task_index", descending=[True, True, False])
           .group_by(fam_key, maintain_order=True)
           .agg(pl.col("n").first(), pl.col("dur").first().alias("busiest_dur"),
                pl.len().alias("tasks"),
                ((pl.col("rows") == 1) & ~pl.col("overlap")).all().alias("sequential"),
                pl.col("depth").mean()))
    gpu = GpuWork.of(acts, tasks, r)
    task = r["task_index"].fill_null(-1).to_numpy().astype(np.int64)
    s0 = r["start"].to_numpy()
    covered = (r.select(*key).with_columns(pl.Series(
        "covered", gpu.before(task, s0 + r["dur"].to_numpy()) - gpu.before(task, s0)))
               .group_by(key).agg(pl.col("covered").sum()))
    tot = gpu.totals()
    total = pl.DataFrame({"task_index": list(tot), "gpu_total": list(tot.values())},
                         schema={"task_index": pl.Int64, "gpu_total": pl.Int64})
    share = (per_task.select(key)
             .join(covered, on=key, how="left", nulls_equal=True)
             .join(total, on="task_index", how="left")
             .group_by(fam_key).agg(pl.col("covered").fill_null(0).sum(),
                                    pl.col("gpu_total").fill_null(0).sum()))
    out = (per.join(share, on=fam_key, how="left", nulls_equal=True)
           .with_columns((pl.col("busiest_dur") / max(acts.end, 1)).alias("time_share")))
    out = out.with_columns(
        (pl.col("covered") / pl.col("gpu_total")).fill_nan(0.0).fill_null(0.0)
        .alias("gpu_share") if gpu.size else pl.col("time_share").alias("gpu_share"),
        pl.when(pl.col("family").str.contains(STEP_NAMES.pattern))
        .then(0).when(pl.col("family").str.contains(CONTAINER_NAMES.pattern)).then(2)
        .otherwise(1).cast(pl.Int64).alias("convention"),
        (pl.col("sequential") & (pl.col("n") >= MIN_STEPS)).alias("loop"),
        (pl.col("family").str.contains(OPERATOR.pattern)
         & ~pl.col("family").str.contains(STEP_NAMES.pattern)).alias("operator"))
    # the kernel names launched inside the loops that cover the work (a few; the operators
    # too: a reader sees why they hold the work, one or two names)
    judged = out.filter(pl.col("loop") & (pl.col("gpu_share") >= COVER_FLOOR))
    names = pl.DataFrame(
        [(f, d, gpu.name_share(r.filter((pl.col("family") == f)
                                        & pl.col("domain").eq_missing(d))))
         for f, d in judged.select(fam_key).iter_rows()],
        schema={"family": pl.Utf8, "domain": pl.Utf8, "name_share": pl.Float64},
        orient="row")
    out = out.join(names, on=fam_key, how="left", nulls_equal=True)
    return (out.select(list(_SCHEMA)).cast(_SCHEMA)
            .sort("gpu_share", "n", "family", descending=[True, True, False]))


class _Keys:
    """(process, time) as one sortable int64: process << 43 | (time - earliest) where the
    times span less than 2^43 ns (2.4 h), else process << 32 | the time's rank among the
    times given."""

    def __init__(self, times: list[np.ndarray]) -> None:
        allt = [t for t in times if t.size]
        self.lo = min((int(t.min()) for t in allt), default=0)
        hi = max((int(t.max()) for t in allt), default=0)
        self.ranks = None if hi - self.lo < 1 << 43 else np.unique(np.concatenate(allt))

    def __call__(self, task: np.ndarray, t: np.ndarray) -> np.ndarray:
        if self.ranks is None:  # in place: one array of the pairs' count
            out = np.asarray(t, np.int64) - self.lo
            out |= np.left_shift(task, 43, dtype=np.int64)
            return out
        out = np.searchsorted(self.ranks, t).astype(np.int64)
        out |= np.left_shift(task, 32, dtype=np.int64)
        return out


@dataclass
class GpuWork:
    """Every GPU activity of a run (kernels, copies, sets) as numpy columns sorted by
    (process, launch time: its launch call's start, the host range it belongs to, or its
    own start without a launch line): `key` (`_Keys`), `upto` (the GPU time launched up to
    and with it, over the run: `offset` of its process subtracted gives the process's),
    `task`, `full` (a kernel's name id, -1 for copies and sets). Built in place, a few
    arrays of the activities' count (10M activities: 4.7M on the GPU, ~150 MB at the
    peak), no frame of them."""

    keys: _Keys
    key: np.ndarray
    upto: np.ndarray
    task: np.ndarray
    full: np.ndarray
    offset: dict[int, int]  # process -> GPU time launched by the processes before it

    @classmethod
    def of(cls, acts: Activities, tasks: pl.DataFrame, ranges: pl.DataFrame) -> "GpuWork":
        nrows = int(acts.rows["row"].max() or 0) + 2
        task_of = np.full(nrows, -1, dtype=np.int32)
        gpu = acts.rows.filter(pl.col("kind") == "gpu").join(tasks, on="row")
        task_of[gpu["row"].to_numpy()] = gpu["task_index"].to_numpy()
        parts = [f for f in (acts.kernels, acts.memops) if f.height]
        if not parts:
            e = np.zeros(0, np.int64)
            return cls(_Keys([]), e, e, e.astype(np.int32), e.astype(np.int32), {})

        def col(name: str, default=None) -> np.ndarray:
            return np.concatenate([
                (f[name] if name in f.columns else pl.Series([default] * f.height))
                .to_numpy() for f in parts])

        task = task_of[np.clip(col("row"), 0, nrows - 1)]
        on_gpu = task >= 0
        # the activities on GPU rows (all of them, but for a trace that lacks a GPU's
        # row): no copy of each column where nothing is left out
        sel = None if on_gpu.all() else np.flatnonzero(on_gpu)
        del on_gpu

        def gpu_only(a: np.ndarray) -> np.ndarray:
            return a if sel is None else a[sel]

        task = gpu_only(task)
        launch = gpu_only(np.concatenate([
            (f["launch"].fill_null(f["start"]) if "launch" in f.columns
             else f["start"]).to_numpy() for f in parts]))
        s0 = ranges["start"].to_numpy()
        keys = _Keys([launch, s0, s0 + ranges["dur"].to_numpy()])
        key = keys(task, launch)
        del launch
        order = np.argsort(key, kind="stable")
        key = key[order]
        upto = gpu_only(col("dur"))[order].astype(np.int64, copy=False)
        np.cumsum(upto, out=upto)
        full = gpu_only(np.concatenate([
            f["full"].to_numpy().astype(np.int32) if "full" in f.columns
            else np.full(f.height, -1, np.int32) for f in parts]))[order]
        task = task[order]
        del order, sel
        first = np.flatnonzero(np.append(True, task[1:] != task[:-1]))
        offset = {int(task[i]): int(upto[i - 1]) if i else 0 for i in first}
        return cls(keys, key, upto, task, full, offset)

    @property
    def size(self) -> int:
        return int(self.key.size)

    def before(self, task: np.ndarray, t: np.ndarray) -> np.ndarray:
        """GPU time launched on `task` strictly before `t` (each pair)."""
        out = np.zeros(len(task), dtype=np.int64)
        if self.size == 0:
            return out
        i = np.searchsorted(self.key, self.keys(task, t), side="left")
        ok = i > 0
        j = i[ok] - 1
        same = self.task[j] == task[ok]  # the previous activity is of the same process
        idx = np.flatnonzero(ok)[same]
        base = np.array([self.offset.get(int(x), 0) for x in task[idx]], dtype=np.int64) \
            if idx.size < 4096 else _offsets(self.offset, task[idx])
        out[idx] = self.upto[j[same]] - base
        return out

    def totals(self) -> dict[int, int]:
        """GPU time per process."""
        if self.size == 0:
            return {}
        last = np.flatnonzero(np.append(self.task[1:] != self.task[:-1], True))
        return {int(self.task[i]): int(self.upto[i]) - self.offset[int(self.task[i])]
                for i in last}

    def name_share(self, inst: pl.DataFrame) -> float | None:
        """Of the kernel names the processes of the instances `inst` (a loop's ranges:
        task_index, start, dur) launch, the share launched inside them (None: no kernels).
        A loop's instances follow each other on each process: the one an activity was
        launched in is found by one search."""
        tasks = inst["task_index"].fill_null(-1).to_numpy().astype(np.int64)
        mine = np.isin(self.task, np.unique(tasks)) & (self.full >= 0)
        total = np.unique(self.full[mine]).size
        if total == 0:
            return None
        s0 = inst["start"].to_numpy()
        ik = self.keys(tasks, s0)
        order = np.argsort(ik, kind="stable")
        ik, ie = ik[order], self.keys(tasks, s0 + inst["dur"].to_numpy())[order]
        k = self.key[mine]
        j = np.searchsorted(ik, k, side="right") - 1
        ok = j >= 0
        hit = np.zeros(k.size, dtype=bool)
        hit[ok] = k[ok] < ie[j[ok]]  # before the instance's end, on its process
        return np.unique(self.full[mine][hit]).size / total


def _offsets(offset: dict[int, int], task: np.ndarray) -> np.ndarray:
    """`offset` of each process of `task` (vectorised through a lookup array)."""
    top = max(offset) + 1 if offset else 1
    table = np.zeros(top, dtype=np.int64)
    table[list(offset)] = list(offset.values())
    return table[np.clip(task, 0, top - 1)]


def pick(before: Activities, after: Activities | None = None) -> StepPick | None:
    """The step of a run (and, with `after`, of both runs of a comparison), with why and
    the candidates (see the module's docstring). None where the run has no NVTX range;
    a pick whose `name` is None where no range qualifies (`why` says so)."""
    return choose(candidates(before), None if after is None else candidates(after),
                  gpu=before.kernels.height + before.memops.height > 0)


def choose(c: pl.DataFrame, other: pl.DataFrame | None = None, gpu: bool = True
           ) -> StepPick | None:
    """The step among one run's `candidates` (with `other`, those of the other run of a
    comparison, where it must be a loop too with no more than twice or half as many
    instances): the module's docstring says how. `gpu`: the run has GPU work (else the
    shares are of the trace's time)."""
    if c.height == 0:
        return None
    if other is not None:
        c = c.join(other.filter(pl.col("loop")).select(
            "family", "domain", pl.col("n").alias("n_after")),
            on=["family", "domain"], how="left", nulls_equal=True)
        in_after = (pl.col("n_after").is_not_null() & (pl.col("n_after") * 2 >= pl.col("n"))
                    & (pl.col("n") * 2 >= pl.col("n_after")))
    else:
        c = c.with_columns(pl.lit(None, pl.Int64).alias("n_after"))
        in_after = pl.lit(True)
    if "operator" not in c.columns:  # a side's table from before operators were told apart
        c = c.with_columns(pl.col("family").str.contains(OPERATOR.pattern).alias("operator"))
    usable = pl.col("loop") & in_after & ~pl.col("operator").fill_null(False) \
        & (pl.col("gpu_share") >= COVER_FLOOR)
    c = c.with_columns(in_after.alias("in_after"), usable.alias("eligible"))
    best = c.filter(pl.col("eligible"))["gpu_share"].max() or 0.0
    # eligible: near the largest share, and launching half the kernel names (a step runs
    # the program's kernels, a range around one operation one or two)
    c = c.with_columns(pl.col("eligible") & (pl.col("gpu_share") >= TOLERANCE * best)
                       & (pl.col("name_share").is_null()
                          | (pl.col("name_share") >= NAME_FLOOR)))
    order = c.sort(["eligible", "convention", "n", "gpu_share", "depth", "family"],
                   descending=[True, False, True, True, False, False], nulls_last=True)
    top = order.row(0, named=True) if order.height and order["eligible"][0] else None
    # listed as an analyst reads them: the step, then by the share of the work they hold
    is_top = pl.repeat(False, pl.len()) if top is None else \
        (pl.col("family") == top["family"]) & pl.col("domain").eq_missing(top["domain"])
    c = (order.with_columns(_note(top).alias("note"))
         .sort([is_top, "gpu_share", "n", "family"], descending=[True, True, True, False])
         .drop("in_after"))
    what = "GPU time" if gpu else "trace's time"
    if top is None:
        return StepPick(None, None, "no NVTX range other than an operator's repeats one "
                        f"after the other on one thread ({MIN_STEPS} times or more"
                        + (", in both runs" if other is not None else "")
                        + f") launching {100 * COVER_FLOOR:.0f} % of the {what} and "
                        f"{100 * NAME_FLOOR:.0f} % of the kernel names", c)
    deep = f", nested {top['depth']:.0f} deep" if top["depth"] >= 0.5 else ""
    names = "" if top["name_share"] is None else \
        f" and {100 * top['name_share']:.0f} % of the kernel names"
    why = (f"{top['n']} instances one after the other on one thread{deep}, launching "
           f"{100 * top['gpu_share']:.0f} % of the {what}{names}"
           + ("; a step's name" if top["convention"] == 0 else ""))
    return StepPick(top["family"], top["domain"], why, c)


def _note(top: dict | None) -> pl.Expr:
    """Why each candidate is not the step (null for the step)."""
    is_top = pl.lit(False) if top is None else \
        (pl.col("family") == top["family"]) & pl.col("domain").eq_missing(top["domain"])
    conv = 1 if top is None else top["convention"]
    n = 0 if top is None else top["n"]
    return (pl.when(is_top).then(pl.lit(None, pl.Utf8))
            .when(pl.col("operator").fill_null(False)).then(pl.lit(
                "a PyTorch operator (aten::, autograd, op_id): one operation, never the step"))
            .when(pl.col("n") < MIN_STEPS).then(pl.lit(f"fewer than {MIN_STEPS} instances"))
            .when(~pl.col("loop")).then(pl.lit("instances overlap or span threads"))
            .when(~pl.col("in_after")).then(pl.lit(
                "not a loop of the other run with as many instances (x2 at most)"))
            .when(pl.col("gpu_share") < COVER_FLOOR).then(pl.lit(
                f"launches less than {100 * COVER_FLOOR:.0f} % of the GPU time"))
            .when(pl.col("name_share").fill_null(1.0) < NAME_FLOOR).then(pl.lit(
                f"launches less than {100 * NAME_FLOOR:.0f} % of the kernel names: an "
                "operation, not a step"))
            .when(~pl.col("eligible")).then(pl.lit(
                f"launches less than {100 * TOLERANCE:.0f} % of what the step launches"))
            .when(pl.col("convention") == 2).then(pl.lit("an epoch: it holds steps"))
            .when(pl.col("convention") > conv).then(pl.lit(
                "the step has a step's name (ProfilerStep, iteration, step, Batch ...)"))
            .when(pl.col("n") < n).then(pl.lit("fewer instances: it holds steps"))
            .otherwise(pl.lit("holds less, or nested deeper")))


# ------------------------------------------------------------------- the step's tables --

def instance_windows(acts: Activities, name: str, domain: str | None) -> pl.DataFrame:
    """(task_index, instance, start, end): the k-th instance (by start) of the range on each
    process. `name` is a range's text, or a family ('step #'; also 'step 3' when no range is
    named so: every 'step N')."""
    rows = acts.rows.select("row", "task_index")
    fams = range_families(acts)
    ids = fams.filter(pl.col("name") == name)
    if ids.height == 0:
        ids = fams.filter(pl.col("family") == fold(name))
    types = acts.domains.filter(pl.col("domain").is_null() if domain is None
                                else pl.col("domain") == domain)["type"].to_list()
    return (acts.ranges.filter(pl.col("name").is_in(ids["id"].to_list())
                               & pl.col("type").is_in(types))
            .join(rows, on="row")
            .sort("task_index", "start", "row")
            .with_columns(pl.int_range(pl.len()).over("task_index").alias("instance"))
            .select(pl.col("task_index").cast(pl.Int64), pl.col("instance").cast(pl.Int64),
                    "start", (pl.col("start") + pl.col("dur")).alias("end")))


def instances(acts: Activities, name: str, domain: str | None) -> pl.DataFrame:
    """Per instance k of the range (`instance_windows`; step k of a job spans from the
    earliest start to the latest end over its processes): start, end, duration and the
    category times of the activities that start inside it (ns, summed over devices)."""
    r = instance_windows(acts, name, domain)
    steps = (r.group_by("instance").agg(pl.col("start").min(), pl.col("end").max())
             .sort("instance").with_columns((pl.col("end") - pl.col("start")).alias("duration")))
    if steps.height == 0:
        return steps
    # category codes (0 compute, 1 NCCL, 2 memcpy, 3 memset): no string per activity
    memcat = acts.memop_names.select(
        pl.col("id").alias("op"), pl.when(pl.col("name").str.starts_with("memcpy"))
        .then(2).otherwise(3).cast(pl.Int8).alias("cat"))
    starts = pl.concat([
        acts.kernels.select("start", pl.col("nccl").cast(pl.Int8).alias("cat"), "dur"),
        acts.memops.join(memcat, on="op", how="left").select(
            "start", pl.col("cat").fill_null(2), "dur")]).sort("start")
    # each activity to the step it starts in (steps sorted, non-overlapping by instance)
    tagged = starts.join_asof(steps.select("start", "end", "instance").sort("start"),
                              on="start", strategy="backward")
    tagged = (tagged.filter(pl.col("start") < pl.col("end"))
              .group_by("instance", "cat").agg(pl.col("dur").sum())
              .with_columns(pl.col("cat").replace_strict(
                  {0: "compute kernels", 1: "NCCL kernels", 2: "memcpy", 3: "memset"},
                  return_dtype=pl.Utf8).alias("category")))
    per = tagged.pivot(on="category", index="instance", values="dur")
    out = steps.join(per, on="instance", how="left")
    for c in ("compute kernels", "NCCL kernels", "memcpy", "memset"):
        if c not in out.columns:
            out = out.with_columns(pl.lit(0, pl.Int64).alias(c))
    return out.fill_null(0).select("instance", "start", "end", "duration", "compute kernels",
                                   "NCCL kernels", "memcpy", "memset")


# ------------------------------------------------------------------------- GPU busy --

def _busy_blocks(acts: Activities) -> pl.DataFrame:
    """(task_index, device, s, e, before): the union of every device's activities as
    disjoint blocks in time order, with the busy time of the device before each block."""
    gpu = acts.rows.filter(pl.col("kind") == "gpu").select(
        "row", pl.col("task_index").cast(pl.Int64), pl.col("device").cast(pl.Int64))
    act = (pl.concat([acts.kernels.select("row", "start", "dur"),
                      acts.memops.select("row", "start", "dur")])
           .join(gpu, on="row")
           .select("task_index", "device", pl.col("start").alias("s"),
                   (pl.col("start") + pl.col("dur")).alias("e"))
           .sort("task_index", "device", "s"))
    key = ["task_index", "device"]
    reach = pl.col("e").cum_max().shift(1).over(key)  # how far the earlier ones reach
    blocks = (act.with_columns((reach.is_null() | (pl.col("s") > reach)).cast(pl.Int64)
                               .cum_sum().over(key).alias("block"))
              .group_by(*key, "block").agg(pl.col("s").min(), pl.col("e").max())
              .sort(*key, "s"))
    return blocks.with_columns((pl.col("e") - pl.col("s")).cum_sum().shift(1, fill_value=0)
                               .over(key).alias("before")).drop("block")


def _busy_at(blocks: pl.DataFrame, queries: pl.DataFrame, t: str) -> pl.Series:
    """The busy time of each query's device up to its time `t` (blocks' prefix sums)."""
    q = queries.with_row_index("_q").sort(t)
    hit = q.join_asof(blocks.sort("s"), left_on=t, right_on="s", by=["task_index", "device"],
                      strategy="backward", check_sortedness=False)  # both sorted by time
    busy = (pl.col("before") + (pl.col(t) - pl.col("s")).clip(0, None)
            .clip(None, pl.col("e") - pl.col("s"))).fill_null(0)
    return hit.select("_q", busy.alias("b")).sort("_q")["b"]


def device_busy(acts: Activities, windows: pl.DataFrame) -> pl.DataFrame:
    """Per instance: busy (ns of device time with some activity inside its process's
    instance, summed over devices), device_time (the instances' lengths summed over the
    devices of their processes). `windows`: (task_index, instance, start, end)."""
    devices = (acts.rows.filter(pl.col("kind") == "gpu")
               .select(pl.col("task_index").cast(pl.Int64), pl.col("device").cast(pl.Int64))
               .unique())
    q = windows.join(devices, on="task_index")
    schema = {"instance": pl.Int64, "busy": pl.Int64, "device_time": pl.Int64}
    if q.height == 0:
        return pl.DataFrame(schema=schema)
    blocks = _busy_blocks(acts)
    q = q.with_columns((_busy_at(blocks, q, "end") - _busy_at(blocks, q, "start"))
                       .alias("busy"))
    return (q.group_by("instance").agg(pl.col("busy").sum(),
                                       (pl.col("end") - pl.col("start")).sum()
                                       .alias("device_time"))
            .cast(schema).sort("instance"))


def _cause_columns(idle_steps: list[dict]) -> pl.DataFrame:
    """instance, gap_idle, idle.<cause> (ns) from the idle analysis' per-step sums."""
    keys = [*CAUSE_KEYS, UNKNOWN_HOST]
    schema = {"instance": pl.Int64, "gap_idle": pl.Int64,
              **{f"idle.{k}": pl.Int64 for k in keys}}
    return pl.DataFrame([{"instance": d["instance"], "gap_idle": d["idle"],
                          **{f"idle.{k}": d["causes"].get(k, 0) for k in keys}}
                         for d in idle_steps], schema=schema)


def step_rows(acts: Activities, name: str, domain: str | None,
              idle_steps: list[dict] | None) -> pl.DataFrame:
    """Every instance of the range: instance, start, end, duration, the category times of
    the activities that start in it, gpu_busy, device_time, gpu_idle, busy_share, and where
    the idle analysis summed them per step (`idle_steps`), gap_idle and one column per idle
    cause ('idle.<cause>')."""
    st = instances(acts, name, domain)
    if st.height == 0:
        return st
    busy = device_busy(acts, instance_windows(acts, name, domain))
    out = (st.join(busy.rename({"busy": "gpu_busy"}), on="instance", how="left")
           .with_columns(pl.col("gpu_busy").fill_null(0), pl.col("device_time").fill_null(0))
           .with_columns((pl.col("device_time") - pl.col("gpu_busy")).alias("gpu_idle"),
                         pl.when(pl.col("device_time") > 0)
                         .then(pl.col("gpu_busy") / pl.col("device_time"))
                         .otherwise(None).alias("busy_share")))
    if idle_steps is not None:
        causes = _cause_columns(idle_steps)
        out = out.join(causes, on="instance", how="left").with_columns(
            pl.col(c).fill_null(0) for c in causes.columns if c != "instance")
    return out


def range_parents(acts: Activities) -> pl.DataFrame:
    """(family, domain, parent, parent_domain, n, parent_n): for each range family the
    family of the range its instances are most often directly inside (push/pop ranges of
    one domain on one thread; null at the top) and how many instances each has (as many
    as its parent, and nearly all its time: a wrapper, 'Data loading' around PyTorch's
    'enumerate(DataLoader)...__next__'). One as-of join of the ranges with their possible
    parents (vectorised)."""
    schema = {"family": pl.Utf8, "domain": pl.Utf8, "parent": pl.Utf8,
              "parent_domain": pl.Utf8, "n": pl.Int64, "parent_n": pl.Int64}
    if acts.ranges.height == 0:
        return pl.DataFrame(schema=schema)
    fams = range_families(acts).select(pl.col("id").alias("name"), "family")
    r = (acts.ranges.join(fams, on="name", how="left").join(acts.domains, on="type",
                                                            how="left")
         .select("row", "type", "level", "start", "dur", "family", "domain")
         .with_row_index("i"))
    parents = (r.filter(pl.col("level") >= 1)
               .select("row", "type", (pl.col("level") + 1).alias("level"),
                       pl.col("start").alias("p_start"),
                       (pl.col("start") + pl.col("dur")).alias("p_end"),
                       pl.col("family").alias("parent"),
                       pl.col("domain").alias("parent_domain"), pl.col("i").alias("p"))
               .sort("p_start"))
    kids = r.filter(pl.col("level") >= 2).sort("start")
    hit = (kids.join_asof(parents, left_on="start", right_on="p_start",
                          by=["row", "type", "level"], strategy="backward",
                          check_sortedness=False)
           .filter(pl.col("start") + pl.col("dur") <= pl.col("p_end")))
    # per family: its most frequent parent family
    edge = (hit.group_by("family", "domain", "parent", "parent_domain")
            .agg(pl.len().alias("k"))
            .sort("k", "parent", descending=[True, False])
            .group_by("family", "domain", maintain_order=True).first().drop("k"))
    counts = r.group_by("family", "domain").agg(pl.len().cast(pl.Int64).alias("n"))
    out = (counts.join(edge, on=["family", "domain"], how="left", nulls_equal=True)
           .join(counts.rename({"family": "parent", "domain": "parent_domain",
                                "n": "parent_n"}),
                 on=["parent", "parent_domain"], how="left", nulls_equal=True))
    return out.select(list(schema)).cast(schema).sort("family", "domain")
