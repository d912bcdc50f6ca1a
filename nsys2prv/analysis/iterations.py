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
from ..paraver.read import Source, open_trace
from .activities import Activities, ActivityCollector
from .diff import Comparison, Side, _split_range, compare_sides, explain_changes
from .steps import MIN_FOR_OUTLIERS, StepPick, instances, pick, step_rows
from .model import Analysis, analyze_path

CATEGORIES = ("compute kernels", "NCCL kernels", "memcpy", "memset")
SPREAD_COLUMNS = ("duration", "gpu_busy", "gpu_idle", *CATEGORIES)


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


def step_table(acts: Activities, name: str, domain: str | None,
               idle_steps: list[dict] | None) -> pl.DataFrame:
    """Every step of the range (`steps.step_rows`) and whether it is an outlier."""
    out = step_rows(acts, name, domain, idle_steps)
    if out.height == 0:
        return out
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
    path = open_trace(path)
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
