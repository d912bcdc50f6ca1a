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
from .projection import RankKeys

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


def codes_of(ids: np.ndarray, table_ids: np.ndarray, table_codes: np.ndarray) -> np.ndarray:
    """Per id, the code its table gives it (-1: not in the table): a search of the table's
    sorted ids, not a join that copies the ranges."""
    if table_ids.size == 0:
        return np.full(ids.size, -1, np.int64)
    order = np.argsort(table_ids, kind="stable")
    sorted_ids = table_ids[order]
    at = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
    hit = sorted_ids[at] == ids
    return np.where(hit, table_codes[order][at], -1)


def candidates(acts: Activities) -> pl.DataFrame:
    """Every range family of a run (see the module's docstring): family, domain, n
    (instances on the busiest process), tasks (processes that have it), gpu_share,
    time_share (of the trace, on the busiest process), operator (a PyTorch operator range,
    `OPERATOR`, without a step's name: never the step), name_share (of the kernel names its
    processes launch, those launched inside it: for the loops that launch COVER_FLOOR of
    the GPU time, else null), depth (mean nesting level, 0 at the top), convention (0 a
    step's name, 1 any other, 2 an epoch's), loop (sequential on one thread of each
    process, MIN_STEPS instances at least). The ranges sorted once by (family, domain,
    process, start) and summed per group with numpy, their instances searched over the GPU
    work read as a stream (`LaunchedWork`): a few arrays a range (millions of ranges: no
    polars sort, window or join over them), and only this table travels (what a side of a
    comparison computes in its own process)."""
    if acts.ranges.height == 0:
        return pl.DataFrame(schema=_SCHEMA)
    # the family and the domain of every range as codes (-1: none), their texts joined back
    # on the families' table at the end
    fams = range_families(acts).select("id", "family")
    fam_text = fams.select("family").drop_nulls().unique(maintain_order=True) \
        .with_row_index("fam")
    dom_text = acts.domains.select("domain").drop_nulls().unique(maintain_order=True) \
        .with_row_index("dom")
    fam_of = fams.join(fam_text, on="family", how="left")
    dom_of = acts.domains.join(dom_text, on="domain", how="left")
    task_rows = acts.rows.select("row", pl.col("task_index").cast(pl.Int64))

    def codes(column: str, table: pl.DataFrame, key: str, code: str) -> np.ndarray:
        return codes_of(acts.ranges[column].to_numpy().astype(np.int64),
                        table[key].to_numpy().astype(np.int64),
                        table[code].fill_null(-1).to_numpy().astype(np.int64))

    # codes are small: int32 (each sort key and array below is a few bytes a range)
    fam = codes("name", fam_of, "id", "fam").astype(np.int32)
    dom = codes("type", dom_of, "type", "dom").astype(np.int32)
    task = codes("row", task_rows, "row", "task_index").astype(np.int32)
    r = acts.ranges
    row = r["row"].to_numpy()
    start = r["start"].to_numpy()
    dur = r["dur"].to_numpy()
    # a family's instances on a process in start order (the longer first at one start: the
    # one that holds the other)
    order = np.lexsort((-dur, row, start, task, dom, fam))
    fam, dom, task = fam[order], dom[order], task[order]
    row, start, dur = row[order], start[order], dur[order]
    depth = np.clip(r["level"].to_numpy()[order] - 1, 0, None)
    del order
    n = fam.size
    # where a family (with its domain) begins in the sorted ranges, and where a family's
    # instances on one process begin
    family_change = np.ones(n, bool)
    family_change[1:] = (fam[1:] != fam[:-1]) | (dom[1:] != dom[:-1])
    fam_first = np.flatnonzero(family_change)
    family_change[1:] |= task[1:] != task[:-1]
    heads = np.flatnonzero(family_change)
    del family_change
    end = start + dur
    # an instance that starts before the one before it ends: before the end of every earlier
    # one, where none overlapped before it (durations are not negative)
    overlap = np.zeros(n, np.int8)
    overlap[1:] = start[1:] < end[:-1]
    overlap[heads] = 0
    counts = np.diff(np.append(heads, n))
    per_task = pl.DataFrame({
        "fam": fam[heads].astype(np.int64), "dom": dom[heads].astype(np.int64),
        "task_index": task[heads].astype(np.int64),
        "n": counts, "rows": np.minimum.reduceat(row, heads) == np.maximum.reduceat(row, heads),
        "overlap": np.maximum.reduceat(overlap, heads) > 0,
        "dur": np.add.reduceat(dur, heads),
        "depth": np.add.reduceat(depth, heads) / counts})
    del overlap, depth, row
    gpu = LaunchedWork(acts, task_rows)
    covered, tot, items = gpu.within(task, start, end)
    per_task = per_task.with_columns(pl.Series("covered", np.add.reduceat(covered, heads)))
    del covered
    # the -1 codes back to nulls: each its own group, as the texts' joins want them
    per_task = per_task.with_columns(
        pl.when(pl.col(c) >= 0).then(pl.col(c)).alias(c) for c in ("fam", "dom", "task_index")
    ).with_columns(pl.col("fam").cast(pl.UInt32), pl.col("dom").cast(pl.UInt32))
    key = ["fam", "dom", "task_index"]
    fam_key = ["fam", "dom"]
    per = (per_task.sort("n", "dur", "task_index", descending=[True, True, False])
           .group_by(fam_key, maintain_order=True)
           .agg(pl.col("n").first(), pl.col("dur").first().alias("busiest_dur"),
                pl.len().alias("tasks"),
                (pl.col("rows") & ~pl.col("overlap")).all().alias("sequential"),
                pl.col("depth").mean()))
    total = pl.DataFrame({"task_index": list(tot), "gpu_total": list(tot.values())},
                         schema={"task_index": pl.Int64, "gpu_total": pl.Int64})
    share = (per_task.select(*key, "covered")
             .join(total, on="task_index", how="left")
             .group_by(fam_key).agg(pl.col("covered").fill_null(0).sum(),
                                    pl.col("gpu_total").fill_null(0).sum()))
    out = (per.join(share, on=fam_key, how="left", nulls_equal=True)
           .join(fam_text, on="fam", how="left").join(dom_text, on="dom", how="left")
           .with_columns((pl.col("busiest_dur") / max(acts.end, 1)).alias("time_share")))
    out = out.with_columns(
        (pl.col("covered") / pl.col("gpu_total")).fill_nan(0.0).fill_null(0.0)
        .alias("gpu_share") if items else pl.col("time_share").alias("gpu_share"),
        pl.when(pl.col("family").str.contains(STEP_NAMES.pattern))
        .then(0).when(pl.col("family").str.contains(CONTAINER_NAMES.pattern)).then(2)
        .otherwise(1).cast(pl.Int64).alias("convention"),
        (pl.col("sequential") & (pl.col("n") >= MIN_STEPS)).alias("loop"),
        (pl.col("family").str.contains(OPERATOR.pattern)
         & ~pl.col("family").str.contains(STEP_NAMES.pattern)).alias("operator"))
    # the kernel names launched inside the loops that cover the work (a few; the operators
    # too: a reader sees why they hold the work, one or two names): a loop's instances are
    # one stretch of the sorted ranges
    judged = out.filter(pl.col("loop") & (pl.col("gpu_share") >= COVER_FLOOR))
    loops = judged.select(fam_key).rows()
    fam_end = np.append(fam_first[1:], n)

    def instances_of(f: int | None, d: int | None) -> pl.DataFrame:
        fc, dc = -1 if f is None else f, -1 if d is None else d
        i = np.flatnonzero((fam[fam_first] == fc) & (dom[fam_first] == dc))
        lo, hi = (int(fam_first[i[0]]), int(fam_end[i[0]])) if i.size else (0, 0)
        return pl.DataFrame({"task_index": task[lo:hi], "start": start[lo:hi],
                             "dur": dur[lo:hi]})

    shares = gpu.name_shares([instances_of(f, d) for f, d in loops])
    names = pl.DataFrame([(f, d, x) for (f, d), x in zip(loops, shares)],
                         schema={"fam": pl.UInt32, "dom": pl.UInt32, "name_share": pl.Float64},
                         orient="row")
    out = out.join(names, on=fam_key, how="left", nulls_equal=True)
    return (out.select(list(_SCHEMA)).cast(_SCHEMA)
            .sort("gpu_share", "n", "family", descending=[True, True, False]))


def _task_of_row(acts: Activities, tasks: pl.DataFrame) -> np.ndarray:
    """Per trace row, the process (task index) of a GPU row, -1 for the others."""
    nrows = int(acts.rows["row"].max() or 0) + 2
    task_of = np.full(nrows, -1, dtype=np.int64)
    gpu = acts.rows.filter(pl.col("kind") == "gpu").join(tasks, on="row")
    task_of[gpu["row"].to_numpy()] = gpu["task_index"].to_numpy()
    return task_of


class LaunchedWork:
    """The GPU work (kernels, copies, sets) of a run as launched: each activity at the
    start of its launching call (the host range it belongs to), or at its own start
    without a launch line, on its process. Sums over the activities read as a stream
    (`Activities.gpu_items`), kept per query, per process and per kernel name: memory of
    the queries (the ranges' instances), never of the activities."""

    COLUMNS = ("row", "start", "end", "launch", "kernel", "full")

    def __init__(self, acts: Activities, tasks: pl.DataFrame) -> None:
        self.acts = acts
        self.task_of = _task_of_row(acts, tasks)

    def _chunks(self):
        """(task, launch time, duration, kernel name id or -1) of the activities on GPU
        rows, chunk by chunk."""
        for items in self.acts.gpu_items(list(self.COLUMNS), by="launch"):
            row = np.clip(items["row"].to_numpy(), 0, self.task_of.size - 1)
            task = self.task_of[row]
            keep = task >= 0
            launch = items["launch"].fill_null(items["start"]).to_numpy()
            dur = (items["end"] - items["start"]).to_numpy()
            full = np.where(items["kernel"].to_numpy(), items["full"].fill_null(-1)
                            .to_numpy().astype(np.int64), -1)
            yield task[keep], launch[keep], dur[keep], full[keep]

    def within(self, task: np.ndarray, start: np.ndarray, end: np.ndarray
               ) -> tuple[np.ndarray, dict[int, int], int]:
        """(GPU time launched on `task` in [start, end), each instance; the GPU time of each
        process; the number of activities), on one pass: the instances' starts and ends as
        one sorted set of queries, an activity counted at the first query of its process
        after it (the sums of a process begin and end within its queries: a difference of
        two running totals is the time between them)."""
        m = np.size(task)
        keys = RankKeys([start, end])
        # every array of the queries made once and in place (millions of ranges: each
        # int64 array of the queries is 16 bytes a range)
        q = np.empty(2 * m, dtype=np.int64)
        q[:m] = keys(task, start)
        q[m:] = keys(task, end)
        order = np.argsort(q, kind="stable")
        qs = q[order]
        del q
        both = np.concatenate([np.asarray(task), np.asarray(task)])
        qtask = both[order] if m else np.zeros(0, np.int64)
        del both
        acc = np.zeros(qs.size + 1, dtype=np.int64)
        totals: dict[int, int] = {}
        n = 0
        for ctask, launch, dur, _ in self._chunks():
            n += ctask.size
            if ctask.size == 0:
                continue
            # an activity counts for the queries of its process that come after it
            p = np.searchsorted(qs, keys(ctask, launch) + 1, side="left")
            same = np.zeros(p.size, dtype=bool)
            ok = p < qs.size
            same[ok] = qtask[p[ok]] == ctask[ok]
            np.add.at(acc, np.where(same, p, qs.size), dur)
            u, inv = np.unique(ctask, return_inverse=True)
            sums = np.zeros(u.size, dtype=np.int64)
            np.add.at(sums, inv, dur)
            for x, v in zip(u.tolist(), sums.tolist()):
                totals[x] = totals.get(x, 0) + v
        del qs, qtask
        running = acc[:-1]
        np.cumsum(running, out=running)
        at_query = np.empty_like(running)
        at_query[order] = running
        del running, acc, order
        return at_query[m:] - at_query[:m], totals, n

    def name_shares(self, families: list[pl.DataFrame]) -> list[float | None]:
        """For each loop (its instances: task_index, start, dur): of the kernel names its
        processes launch, the share launched inside its instances (None: no kernels). A
        loop's instances follow each other on each process: the one an activity was
        launched in is found by one search."""
        prepared = []
        for inst in families:
            tasks = inst["task_index"].fill_null(-1).to_numpy().astype(np.int64)
            s0 = inst["start"].to_numpy()
            e0 = s0 + inst["dur"].to_numpy()
            keys = RankKeys([s0, e0])
            ik = keys(tasks, s0)
            order = np.argsort(ik, kind="stable")
            prepared.append((np.unique(tasks), keys, ik[order], keys(tasks, e0)[order],
                             set(), set()))
        if not prepared:
            return []
        for ctask, launch, _, full in self._chunks():
            kern = full >= 0
            for tasks, keys, ik, ie, total, hit in prepared:
                mine = np.isin(ctask, tasks) & kern
                if not mine.any():
                    continue
                f = full[mine]
                total.update(np.unique(f).tolist())
                k = keys(ctask[mine], launch[mine])
                j = np.searchsorted(ik, k, side="right") - 1
                ok = j >= 0
                h = np.zeros(k.size, dtype=bool)
                h[ok] = k[ok] < ie[j[ok]]  # before the instance's end, on its process
                hit.update(np.unique(f[h]).tolist())
        return [len(h) / len(t) if t else None for _, _, _, _, t, h in prepared]


def pick(before: Activities, after: Activities | None = None) -> StepPick | None:
    """The step of a run (and, with `after`, of both runs of a comparison), with why and
    the candidates (see the module's docstring). None where the run has no NVTX range;
    a pick whose `name` is None where no range qualifies (`why` says so)."""
    return choose(candidates(before), None if after is None else candidates(after),
                  gpu=before.gpu_count() > 0)


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
    names = acts.memop_names
    memcpy = np.array([i for i, n in zip(names["id"].to_list(), names["name"].to_list())
                       if n.startswith("memcpy")], dtype=np.int64)
    # each activity to the step it starts in (steps sorted, non-overlapping by instance):
    # the last step that starts at or before it, while it lasts; summed as they stream
    by_start = steps.select("start", "end", "instance").sort("start", maintain_order=True)
    s0, s1 = by_start["start"].to_numpy(), by_start["end"].to_numpy()
    sums = np.zeros((by_start.height, 4), dtype=np.int64)
    seen = np.zeros((by_start.height, 4), dtype=bool)
    for items in acts.gpu_items(["start", "end", "kernel", "nccl", "op"]):
        start = items["start"].to_numpy()
        cat = np.where(items["kernel"].to_numpy(), items["nccl"].to_numpy().astype(np.int64),
                       np.where(np.isin(items["op"].to_numpy(), memcpy), 2, 3))
        i = np.searchsorted(s0, start, side="right") - 1
        ok = i >= 0
        ok[ok] = start[ok] < s1[i[ok]]
        np.add.at(sums, (i[ok], cat[ok]), (items["end"] - items["start"]).to_numpy()[ok])
        seen[i[ok], cat[ok]] = True
    k, cat = np.nonzero(seen)
    tagged = pl.DataFrame({
        "instance": by_start["instance"].to_numpy()[k], "cat": cat.astype(np.int8),
        "dur": sums[k, cat]}).with_columns(pl.col("cat").replace_strict(
            {0: "compute kernels", 1: "NCCL kernels", 2: "memcpy", 3: "memset"},
            return_dtype=pl.Utf8).alias("category"))
    per = tagged.pivot(on="category", index="instance", values="dur")
    out = steps.join(per, on="instance", how="left")
    for c in ("compute kernels", "NCCL kernels", "memcpy", "memset"):
        if c not in out.columns:
            out = out.with_columns(pl.lit(0, pl.Int64).alias(c))
    return out.fill_null(0).select("instance", "start", "end", "duration", "compute kernels",
                                   "NCCL kernels", "memcpy", "memset")


# ------------------------------------------------------------------------- GPU busy --

def _busy_at(acts: Activities, group_of_row: np.ndarray, qg: np.ndarray, qt: np.ndarray
             ) -> np.ndarray:
    """Per query (group qg, time qt): the time before qt in which its group of GPU rows
    (a device) had some activity (the measure of the union of its activities there), the
    activities read as a stream in start order: per group the union's last block is
    carried from chunk to chunk, the closed ones summed into the queries."""
    out = np.zeros(qg.size, dtype=np.int64)
    order = np.lexsort((qt, qg))
    sg, st = qg[order], qt[order]
    ngroups = int(group_of_row.max(initial=-1)) + 1
    open_s = np.full(ngroups, -1, dtype=np.int64)
    open_e = np.full(ngroups, -1, dtype=np.int64)
    has = np.zeros(ngroups, dtype=bool)

    def close(g: np.ndarray, bs: np.ndarray, be: np.ndarray) -> None:
        """Blocks (group, start, end: disjoint, each group's sorted) add to the queries."""
        if g.size == 0:
            return
        for grp in np.unique(g).tolist():
            qa, qz = np.searchsorted(sg, grp, "left"), np.searchsorted(sg, grp, "right")
            if qa == qz:
                continue
            mine = g == grp
            s_, e_ = bs[mine], be[mine]
            cum = np.concatenate([[0], np.cumsum(e_ - s_)])
            t = st[qa:qz]
            k = np.searchsorted(s_, t, side="left")  # blocks that start before t
            part = cum[k]
            inside = k > 0
            over = np.zeros(t.size, dtype=np.int64)
            over[inside] = np.maximum(e_[k[inside] - 1] - t[inside], 0)
            out[order[qa:qz]] += part - over

    for items in acts.gpu_items(["row", "start", "end"]):
        row = np.clip(items["row"].to_numpy(), 0, group_of_row.size - 1)
        g = group_of_row[row]
        keep = g >= 0
        g = g[keep]
        s = items["start"].to_numpy()[keep]
        e = items["end"].to_numpy()[keep]
        carried = np.flatnonzero(has)
        g = np.concatenate([carried, g])
        s = np.concatenate([open_s[carried], s])
        e = np.concatenate([open_e[carried], e])
        if g.size == 0:
            continue
        o = np.lexsort((s, g))
        g, s, e = g[o], s[o], e[o]
        first = np.append(True, g[1:] != g[:-1])
        # per group, the end reached by the activities before each one
        prev = np.empty_like(e)
        prev[0] = np.iinfo(np.int64).min
        run = e.copy()
        starts = np.flatnonzero(first)
        for a_, z_ in zip(starts, np.append(starts[1:], e.size)):
            run[a_:z_] = np.maximum.accumulate(e[a_:z_])
        prev[1:] = run[:-1]
        prev[first] = np.iinfo(np.int64).min
        new = first | (s > prev)
        block = np.cumsum(new) - 1
        bs = s[new]
        be = np.full(bs.size, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(be, block, e)
        bg = g[new]
        last = np.append(bg[1:] != bg[:-1], True)  # each group's last block stays open
        close(bg[~last], bs[~last], be[~last])
        has[:] = False
        has[bg[last]] = True
        open_s[bg[last]], open_e[bg[last]] = bs[last], be[last]
    carried = np.flatnonzero(has)
    close(carried, open_s[carried], open_e[carried])
    return out


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
    gpu = (acts.rows.filter(pl.col("kind") == "gpu")
           .select("row", pl.col("task_index").cast(pl.Int64), pl.col("device").cast(pl.Int64))
           .join(devices.with_row_index("g").with_columns(pl.col("g").cast(pl.Int64)),
                 on=["task_index", "device"]))
    group_of_row = np.full(int(acts.rows["row"].max() or 0) + 2, -1, dtype=np.int64)
    group_of_row[gpu["row"].to_numpy()] = gpu["g"].to_numpy()
    q = q.join(devices.with_row_index("g").with_columns(pl.col("g").cast(pl.Int64)),
               on=["task_index", "device"], maintain_order="left")
    n = q.height
    g = q["g"].to_numpy()
    busy = _busy_at(acts, group_of_row, np.concatenate([g, g]),
                    np.concatenate([q["start"].to_numpy(), q["end"].to_numpy()]))
    q = q.with_columns(pl.Series("busy", busy[n:] - busy[:n]))
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
