"""How a run changes over its steps: every instance of a repeated NVTX range (a training
step, an iteration) with its duration, GPU busy and idle time, category times and the causes
of its GPU idle time; the spread over the steps, the outliers, and the slowest step against
the median one, explained with the comparison's machinery (`diff.py`).

Steps: the k-th instance of the range on each process is step k of the job, which spans from
the earliest start to the latest end over the processes (`diff.instances`). Per step:

* duration; compute kernel, NCCL kernel, memcpy and memset time of the activities that start
  in it (summed over devices, as `nsys2prv diff` counts them);
* GPU busy: per device, the time any activity (kernel, memcpy, memset) runs inside its own
  process's instance (the union of the activities, clipped to the instance); GPU idle = the
  instance's length minus that, summed over the devices; busy % = busy / device time;
* idle causes: the gaps of the idle analysis (`idle.py`) whose middle lies in the step,
  whole (a gap is idle time between two activities of a device, so their sum differs from
  the clipped idle above where a device starts late or ends early in a step).

Outliers are steps outside Tukey's fences on the durations (below Q1 - 1.5 IQR or above
Q3 + 1.5 IQR; quartiles by linear interpolation), judged from 4 steps on. The slowest step
is compared with the median one (the lower middle for an even count) as two runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..errors import InputError
from ..paraver.read import Source
from .activities import Activities, ActivityCollector
from .diff import (Comparison, Side, _split_range, compare_sides, explain_changes,
                   instance_windows, instances)
from .steps import StepPick, pick
from .idle import CAUSE_KEYS, UNKNOWN_HOST
from .model import Analysis, analyze_path

CATEGORIES = ("compute kernels", "NCCL kernels", "memcpy", "memset")
SPREAD_COLUMNS = ("duration", "gpu_busy", "gpu_idle", *CATEGORIES)
MIN_FOR_OUTLIERS = 4


@dataclass
class IterationReport:
    """The steps of one run (times in the trace's ns)."""

    name: str
    domain: str | None
    picked: bool  # chosen by the tool (`steps.pick`)
    # instance, start, end, duration, the CATEGORIES, gpu_busy, gpu_idle, device_time,
    # busy_share, gap_idle, one column per idle cause ('idle.<cause>'), outlier
    steps: pl.DataFrame
    spread: pl.DataFrame  # metric, min, median, max
    outliers: list[int]
    slowest: int | None
    median: int | None
    comparison: Comparison | None  # the slowest step against the median one
    paragraph: str
    notes: list[str] = field(default_factory=list)
    pick: StepPick | None = None  # why the range was picked, and the runners-up

    def to_dict(self) -> dict:
        c = self.comparison
        return {"range": self.name, "domain": self.domain, "picked": self.picked,
                "why": None if self.pick is None else self.pick.why,
                "candidates": None if self.pick is None else self.pick.candidates.to_dicts(),
                "steps": self.steps.to_dicts(), "spread": self.spread.to_dicts(),
                "outliers": self.outliers, "slowest": self.slowest, "median": self.median,
                "paragraph": self.paragraph, "notes": self.notes,
                "slowest_against_median": None if c is None else {
                    k: v.to_dicts() for k, v in c.tables().items()}}


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


# --------------------------------------------------------------------------- steps --

def tukey_outliers(values: np.ndarray) -> np.ndarray:
    """Whether each value lies outside Tukey's fences (Q1 - 1.5 IQR, Q3 + 1.5 IQR); none
    with fewer than MIN_FOR_OUTLIERS values."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < MIN_FOR_OUTLIERS:
        return np.zeros(v.size, dtype=bool)
    q1, q3 = np.percentile(v, [25, 75])
    iqr = q3 - q1
    return (v < q1 - 1.5 * iqr) | (v > q3 + 1.5 * iqr)


def _cause_columns(idle_steps: list[dict]) -> pl.DataFrame:
    """instance, gap_idle, idle.<cause> (ns) from the idle analysis' per-step sums."""
    keys = [*CAUSE_KEYS, UNKNOWN_HOST]
    schema = {"instance": pl.Int64, "gap_idle": pl.Int64,
              **{f"idle.{k}": pl.Int64 for k in keys}}
    return pl.DataFrame([{"instance": d["instance"], "gap_idle": d["idle"],
                          **{f"idle.{k}": d["causes"].get(k, 0) for k in keys}}
                         for d in idle_steps], schema=schema)


def step_table(acts: Activities, name: str, domain: str | None,
               idle_steps: list[dict] | None) -> pl.DataFrame:
    """Every step of the range (see the module's docstring for the columns)."""
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
    return out.with_columns(pl.Series("outlier", tukey_outliers(out["duration"].to_numpy())))


def _spread(steps: pl.DataFrame) -> pl.DataFrame:
    cols = [c for c in SPREAD_COLUMNS if c in steps.columns]
    return pl.DataFrame({"metric": cols,
                         "min": [float(steps[c].min()) for c in cols],
                         "median": [float(steps[c].median()) for c in cols],
                         "max": [float(steps[c].max()) for c in cols]})


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def compare_steps(acts: Activities, steps: pl.DataFrame, slow: int, mid: int
                  ) -> tuple[Comparison, str]:
    """The slowest step against the median one as two runs (`diff.compare_sides` on the
    activities that start in each), and the paragraph that explains it."""
    rows = {r["instance"]: r for r in steps.iter_rows(named=True)}
    s, m = rows[slow], rows[mid]
    sides = [Side(f"step {k}", f"step {k}", acts.window(r["start"], r["end"]))
             for k, r in ((mid, m), (slow, s))]
    comp = compare_sides(sides[0], sides[1], auto_iterations=False)
    change = s["duration"] / m["duration"] - 1 if m["duration"] else None
    if s["duration"] == m["duration"]:
        head = f"Every step lasts as long as the median one ({_ms(m['duration'])})."
    else:
        head = (f"Slowest step {slow}: {_ms(s['duration'])}"
                + (f", {100 * change:+.1f} % against the median step {mid} "
                   f"({_ms(m['duration'])})." if change is not None else "."))
    parts = [head]
    if "gpu_idle" in s:
        parts.append(f"GPU idle {_ms(m['gpu_idle'])} -> {_ms(s['gpu_idle'])} "
                     f"(busy {100 * (m['busy_share'] or 0):.1f} % -> "
                     f"{100 * (s['busy_share'] or 0):.1f} %).")
    causes = [c for c in steps.columns if c.startswith("idle.")]
    if causes:
        moved = max(causes, key=lambda c: (abs(s[c] - m[c]), c))
        if s[moved] != m[moved]:
            parts.append(f"Idle cause that moved most: {moved[5:]} "
                         f"{(s[moved] - m[moved]) / 1e6:+.3f} ms.")
    comp.paragraph = " ".join(parts + explain_changes(comp))
    return comp, comp.paragraph


def resolve_range(acts: Activities, spec: str | None
                  ) -> tuple[str, str | None, StepPick | None]:
    """(range, domain, how it was picked) of `spec` ("RANGE[@DOMAIN]"; None: the step
    `steps.pick` finds, the same detector as the comparison's)."""
    if spec is not None:
        return (*_split_range(spec), None)
    found = pick(acts)
    if found is None or found.name is None:
        why = "the trace has no NVTX ranges" if found is None else found.why
        raise NoLoop(f"{why}: name the step's range with --iterations RANGE[@DOMAIN]",
                     found)
    return found.name, found.domain, found


def iteration_report(acts: Activities, name: str, domain: str | None, picked: bool = False,
                     idle_steps: list[dict] | None = None) -> IterationReport:
    """The steps of the range `name` of `domain` in one run's activities, with the idle
    causes of each step where the idle analysis summed them (`idle_steps`)."""
    steps = step_table(acts, name, domain, idle_steps)
    if steps.height == 0:
        from ..pipeline.window import nearest_ranges
        from .activities import range_instances

        near = nearest_ranges([range_instances(acts)], name)
        raise InputError(f"no instance of the NVTX range '{name}"
                         + (f"@{domain}" if domain else "") + "'"
                         + (f" (ranges: {', '.join(near)})" if near else
                            " (the trace has no NVTX ranges)"))
    outliers = steps.filter(pl.col("outlier"))["instance"].to_list()
    notes = []
    if steps.height < MIN_FOR_OUTLIERS:
        notes.append(f"{steps.height} step(s): outliers are judged from {MIN_FOR_OUTLIERS}")
    slowest = median = comp = None
    paragraph = "One step: nothing to compare it with."
    if steps.height >= 2:
        by_dur = steps.sort("duration", "instance")
        slowest = int(by_dur["instance"][-1])
        median = int(by_dur["instance"][(steps.height - 1) // 2])
        comp, paragraph = compare_steps(acts, steps, slowest, median)
    return IterationReport(name, domain, picked, steps, _spread(steps), outliers,
                           slowest, median, comp, paragraph, notes)


class NoLoop(InputError):
    """No range to pick: no NVTX range of the run is a step (`steps.pick`)."""

    def __init__(self, message: str, search: StepPick | None = None) -> None:
        super().__init__(message)
        self.search = search  # the candidates and why each is not the step


def analyze_steps(path: Source, iterations: str | None, explain: bool = True,
                  top: int = 10, observers: Sequence = ()
                  ) -> tuple[Analysis, Activities, IterationReport | str]:
    """`analyze_path` on a trace with its activities collected on the same pass and the
    idle causes of each step of `iterations` ("RANGE[@DOMAIN]"; None: picked) summed on the
    second one (`observers` see the first pass too). Where no range can be picked, the
    report is the reason (a range named but absent is an InputError)."""
    collector = ActivityCollector(path)
    state: dict = {}

    def steps() -> pl.DataFrame | None:
        state["acts"] = acts = collector.result()
        try:
            state["range"] = resolve_range(acts, iterations)
        except NoLoop as e:
            state["range"] = str(e)
            return None
        return instances(acts, *state["range"][:2]).select("instance", "start", "end")

    analysis = analyze_path(path, explain, top, observers=[collector, *observers],
                            steps=steps)
    if "acts" not in state:  # no second pass (no devices, or explain off)
        steps()
    acts = state["acts"]
    if isinstance(state["range"], str):
        return analysis, acts, state["range"]
    idle_steps = analysis.idle.instances if analysis.idle is not None else None
    name, domain, found = state["range"]
    report = iteration_report(acts, name, domain, picked=iterations is None,
                              idle_steps=idle_steps)
    report.pick = found
    return analysis, acts, report
