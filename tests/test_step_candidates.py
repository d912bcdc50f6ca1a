"""The steps' candidates (`analysis.steps.candidates`: a family of NVTX ranges per process,
summed over its instances with numpy on one sort) against brute force on random runs: the
instances on the busiest process, the processes, whether it is a loop (one thread, no
instance inside another), the depth, and the GPU time launched inside its instances."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nsys2prv.analysis.activities import Activities
from nsys2prv.analysis.steps import MIN_STEPS, LaunchedWork, candidates

NAMES = ["step 1", "step 2", "fwd", "bwd", "epoch 0"]  # 'step #' is a family of two
TASK_OF_CPU = {0: 0, 1: 0, 2: 1, 3: None}  # row 3: a thread of no process
GPU_ROWS = {4: 0, 5: 1}
DOMAINS = {10: None, 11: "app"}

ranges = st.lists(st.tuples(st.sampled_from(sorted(TASK_OF_CPU)), st.integers(0, 60),
                            st.integers(0, 25), st.integers(0, len(NAMES) - 1),
                            st.sampled_from(sorted(DOMAINS)), st.integers(0, 3)),
                  min_size=1, max_size=40)
work = st.lists(st.tuples(st.sampled_from(sorted(GPU_ROWS)), st.integers(0, 90),
                          st.integers(1, 9), st.one_of(st.none(), st.integers(0, 90)),
                          st.booleans()),
                max_size=40)


def _acts(tmp_path, rr, ww) -> Activities:
    rows = pl.DataFrame(
        {"row": list(TASK_OF_CPU) + list(GPU_ROWS),
         "kind": ["cpu"] * len(TASK_OF_CPU) + ["gpu"] * len(GPU_ROWS),
         "task_index": list(TASK_OF_CPU.values()) + list(GPU_ROWS.values())},
        schema={"row": pl.Int32, "kind": pl.Utf8, "task_index": pl.Int32})
    r = pl.DataFrame([(row, s, d, name, typ, level) for row, s, d, name, typ, level in rr],
                     schema={"row": pl.Int32, "start": pl.Int64, "dur": pl.Int64,
                             "name": pl.Int64, "type": pl.Int64, "level": pl.Int64},
                     orient="row").with_columns(pl.lit(True).alias("top")).sort("start", "row")
    k = [(row, s, d, launch) for row, s, d, launch, kern in ww if kern]
    m = [(row, s, d, launch) for row, s, d, launch, kern in ww if not kern]
    schema = {"row": pl.Int32, "start": pl.Int64, "dur": pl.Int64, "launch": pl.Int64}
    kernels = pl.DataFrame(k, schema=schema, orient="row").with_columns(
        pl.lit(7, pl.Int32).alias("name"), pl.lit(7, pl.Int32).alias("full"),
        pl.lit(False).alias("nccl"), pl.lit(0, pl.Int32).alias("launch_row"))
    memops = pl.DataFrame(m, schema=schema, orient="row").with_columns(
        pl.lit(1, pl.Int64).alias("op"), pl.lit(0, pl.Int32).alias("launch_row"))
    names = pl.DataFrame({"id": list(range(len(NAMES))), "name": NAMES},
                         schema={"id": pl.Int64, "name": pl.Utf8})
    domains = pl.DataFrame({"type": list(DOMAINS), "domain": list(DOMAINS.values())},
                           schema={"type": pl.Int64, "domain": pl.Utf8})
    empty = pl.DataFrame(schema={"row": pl.Int32, "dur": pl.Int64})
    return Activities(tmp_path, 100, rows, kernels, memops, r, empty, names.clear(),
                      names.clear(), names, domains)


def _family(name: str) -> str:
    return "step #" if name.startswith("step") else ("epoch #" if name.startswith("epoch")
                                                      else name)


def _brute(rr, ww) -> dict:
    """family, domain -> n, tasks, loop, depth, gpu_share, by the definitions."""
    gpu_total: dict[int, int] = {}
    launched = []  # (task, launch time, duration)
    for row, s, d, launch, _ in ww:
        task = GPU_ROWS[row]
        gpu_total[task] = gpu_total.get(task, 0) + d
        launched.append((task, s if launch is None else launch, d))
    groups: dict = {}
    for row, s, d, name, typ, level in rr:
        key = (_family(NAMES[name]), DOMAINS[typ])
        groups.setdefault(key, {}).setdefault(TASK_OF_CPU[row], []).append((row, s, d, level))
    out = {}
    for key, per_task in groups.items():
        stats = []
        for task, inst in per_task.items():
            inside = any(i != j and si <= sj < si + di
                         for i, (_, si, di, _) in enumerate(inst)
                         for j, (_, sj, _, _) in enumerate(inst))
            one_row = len({row for row, _, _, _ in inst}) == 1
            covered = sum(d for t, at, d in launched if t == task
                          for _, s, di, _ in inst if s <= at < s + di)
            stats.append((len(inst), sum(d for _, _, d, _ in inst),
                          -1 if task is None else task, one_row and not inside,
                          np.mean([max(lv - 1, 0) for _, _, _, lv in inst]), covered,
                          gpu_total.get(task, 0) if task is not None else 0))
        busiest = sorted(stats, key=lambda x: (-x[0], -x[1], x[2]))[0]
        covered = sum(x[5] for x in stats)
        total = sum(x[6] for x in stats)
        out[key] = {"n": busiest[0], "tasks": len(stats),
                    "loop": all(x[3] for x in stats) and busiest[0] >= MIN_STEPS,
                    "depth": float(np.mean([x[4] for x in stats])),
                    "gpu_share": (covered / total if total else 0.0) if launched
                    else busiest[1] / 100}
    return out


@settings(max_examples=100, deadline=None)
@given(rr=ranges, ww=work)
# three instances that touch (a loop), and two that start together (one holds the other: none)
@example(rr=[(0, 0, 5, 0, 10, 1), (0, 5, 5, 1, 10, 1), (0, 10, 5, 0, 10, 1)],
         ww=[(4, 6, 3, None, True), (4, 1, 2, 4, False)])
@example(rr=[(0, 0, 0, 0, 10, 2), (0, 0, 10, 1, 10, 2), (0, 20, 5, 0, 10, 2)], ww=[])
def test_candidates_equal_brute_force(tmp_path_factory, rr, ww):
    acts = _acts(tmp_path_factory.mktemp("c"), rr, ww)
    found = {(r["family"], r["domain"]): r for r in candidates(acts).iter_rows(named=True)}
    want = _brute(rr, ww)
    assert set(found) == set(want)
    for key, w in want.items():
        f = found[key]
        assert (f["n"], f["tasks"], f["loop"]) == (w["n"], w["tasks"], w["loop"]), key
        assert f["depth"] == pytest.approx(w["depth"]), key
        assert f["gpu_share"] == pytest.approx(w["gpu_share"]), key


def test_within_sums_the_work_launched_in_each_instance(tmp_path):
    """`LaunchedWork.within` on many instances and activities against a direct count: an
    activity counts for an instance of its process that holds its launch, [start, end)."""
    rng = np.random.default_rng(5)
    n, m = 3000, 5000
    ww = [(int(rng.choice(list(GPU_ROWS))), int(s), int(d), int(s) - int(lag), True)
          for s, d, lag in zip(rng.integers(0, 10_000, m), rng.integers(1, 50, m),
                               rng.integers(0, 30, m))]
    acts = _acts(tmp_path, [(0, 0, 1, 0, 10, 0)], ww)
    task = rng.integers(-1, 2, n)
    start = rng.integers(0, 10_000, n)
    end = start + rng.integers(0, 400, n)
    covered, totals, count = LaunchedWork(acts, acts.rows.select(
        "row", pl.col("task_index").cast(pl.Int64))).within(task, start, end)
    at = np.array([w[3] for w in ww])
    dur = np.array([w[2] for w in ww])
    wtask = np.array([GPU_ROWS[w[0]] for w in ww])
    want = [int(dur[(wtask == t) & (at >= s) & (at < e)].sum())
            for t, s, e in zip(task, start, end)]
    assert covered.tolist() == want
    assert count == m
    assert totals == {t: int(dur[wtask == t].sum()) for t in set(wtask.tolist())}
