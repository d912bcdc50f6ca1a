"""Where in the code (analysis/samples.py) on windows built by hand: every table checked
against a count made sample by sample (the code counts by table, never by sample)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsys2prv.analysis import samples as S
from nsys2prv.analysis.stats import _fisher, proportion_p
from nsys2prv.paraver.read import Trace
from nsys2prv.paraver.registry import cuda, osrt

LABELS = {1: "main (app)", 2: "step (app)", 3: "sem_timedwait (libc.so.6)",
          4: "parse (app)", 5: "0x7fff0000 (libcuda.so.1)", 6: "work(int) (libwork.so)",
          7: "PyThread_acquire_lock_timed (python3.8)", 8: "acquire_timed (python3.8)",
          9: "start_thread (libToolsInjection64.so)"}


def rows_frame() -> pl.DataFrame:
    """Two processes on one node: the launcher (rows 0, 1) and a worker (row 2); the GPU
    stream row 3 belongs to the launcher (task 0, device 0)."""
    return pl.DataFrame({
        "row": pl.Series([0, 1, 2, 3], dtype=pl.Int32),
        "label": ["rank 0: python main (tid 10)", "rank 0: thread (tid 11)",
                  "rank 0: worker (tid 20)", "rank 0: GPU 0 ctx 1 stream 7 (A100)"],
        "task_label": ["rank 0 python (pid 10)", "rank 0 python (pid 10)",
                       "rank 0 python (pid 20)", "rank 0 python (pid 10)"],
        "task_index": [0, 0, 1, 0], "kind": ["cpu", "cpu", "cpu", "gpu"],
        "node": [1, 1, 1, 1], "device": [None, None, None, 0]})


def window(events: list[tuple[int, int, int, int]], start: int = 0, end: int = 1000,
           carried: int = 0) -> Trace:
    ev = pl.DataFrame(events, schema={"row": pl.Int32, "time": pl.Int64, "type": pl.Int64,
                                      "value": pl.Int64}, orient="row")
    ev = ev.with_row_index("seq").with_columns(pl.col("seq").cast(pl.Int64))
    return Trace(None, end, rows_frame(), ev, pl.DataFrame(), None, start, carried)


def sample_events(samples: list[tuple[int, int, list[int]]]) -> list[tuple]:
    return [(r, t, S.SAMPLED + k, v) for r, t, stack in samples for k, v in enumerate(stack)]


SAMPLES = [(0, 10, [3, 7, 8, 2, 1]), (0, 20, [3]), (0, 30, [4, 2, 1]), (0, 40, [3]),
           (2, 15, [6, 6, 1]), (2, 16, [6]), (2, 25, [5]), (2, 35, [6, 1]),
           (1, 50, [9]), (0, 60, [4, 2, 1])]


def collect(samples=SAMPLES) -> S.Samples:
    c = S.SampleCollector()
    w = window(sample_events(samples))
    c.add(w)
    return S.profiles(c.counts.result(), w.rows, LABELS, c.markers)


def fn(v: int) -> tuple[str, str]:
    return S.split_label(LABELS[v])


def test_split_label_keeps_a_signature_whole():
    assert S.split_label("work(int) (libwork.so)") == ("work(int)", "libwork.so")
    assert S.split_label("0x7fff0000 (libcuda.so.1)") == ("0x7fff0000", "libcuda.so.1")
    assert S.split_label("operator() (a.out)") == ("operator()", "a.out")


def test_self_and_inclusive_equal_counts_made_sample_by_sample():
    s = collect()
    leaves = Counter(fn(st[0]) for _, _, st in SAMPLES)
    incl = Counter(f for _, _, st in SAMPLES for f in {fn(v) for v in st})
    got_self = {(r["function"], r["module"]): r["samples"] for r in s.self_.iter_rows(named=True)}
    got_incl = {(r["function"], r["module"]): r["samples"]
                for r in s.inclusive.iter_rows(named=True)}
    assert got_self == dict(leaves)
    assert got_incl == dict(incl)  # 'work(int)' twice on one stack counts once
    assert got_incl[("work(int)", "libwork.so")] == 3
    assert s.self_["share"].sum() == pytest.approx(1.0)
    # per thread
    per = Counter((r, fn(st[0])) for r, _, st in SAMPLES)
    tid = {0: 10, 1: 11, 2: 20}
    got = {(r["tid"], (r["function"], r["module"])): r["samples"]
           for r in s.self_by_thread.iter_rows(named=True)}
    assert got == {(tid[r], f): n for (r, f), n in per.items()}


def test_threads_quality_and_profiler_share():
    s = collect()
    n = Counter(r for r, _, _ in SAMPLES)
    assert dict(zip(s.threads["tid"], s.threads["samples"])) == {10: n[0], 11: n[1], 20: n[2]}
    assert s.threads["pid"].to_list()[0] == 10  # the busiest first
    q = s.quality.row(0, named=True)
    assert q["samples"] == len(SAMPLES)
    assert q["with_stack"] == sum(len(st) > 1 for _, _, st in SAMPLES)
    assert q["unresolved_leaves"] == 1  # the libcuda address
    assert q["profiler"] == 1  # the libToolsInjection leaf
    assert any("leaf function only" in n for n in s.notes)


def test_modules_count_a_module_once_per_sample():
    s = collect()
    incl = Counter(m for _, _, st in SAMPLES for m in {fn(v)[1] for v in st})
    self_ = Counter(fn(st[0])[1] for _, _, st in SAMPLES)
    got = {r["module"]: (r["self"], r["inclusive"]) for r in s.modules.iter_rows(named=True)}
    assert got == {m: (self_.get(m, 0), incl[m]) for m in incl}


def test_callers_tree_and_folded():
    s = collect()
    stacked = [st for _, _, st in SAMPLES if len(st) > 1]
    callers = Counter((fn(st[0])[0], fn(st[1])[0]) for st in stacked)
    got = {(r["function"], r["caller_function"]): r["samples"]
           for r in s.callers.iter_rows(named=True)}
    assert got == dict(callers)
    # the tree: each root's total is the samples with a stack under it
    roots = s.tree.filter(pl.col("parent") < 0)
    assert dict(zip(roots["function"], roots["total"])) == dict(
        Counter(fn(st[-1])[0] for st in stacked))
    # every node's total = its self + its children's totals
    for r in s.tree.iter_rows(named=True):
        kids = s.tree.filter(pl.col("parent") == r["node"])["total"].sum()
        assert r["total"] == r["self"] + kids
    # folded stacks: root first, all samples, leaf-only ones under their own root
    assert s.folded["samples"].sum() == len(SAMPLES)
    folded = dict(zip(s.folded["stack"], s.folded["samples"]))
    assert folded["main;step;parse"] == 2
    assert folded[f"{S.LEAF_ONLY};sem_timedwait"] == 2
    assert folded["main;step;acquire_timed;PyThread_acquire_lock_timed;sem_timedwait"] == 1


def test_flame_rectangles_tile_their_parent():
    s = collect()
    rects = S.flame(s.folded, min_share=0)
    assert rects.filter(pl.col("depth") == 0)["width"].sum() == len(SAMPLES)
    # children never wider than their parent and never outside it
    for d in range(1, int(rects["depth"].max()) + 1):
        kids = rects.filter(pl.col("depth") == d)
        parents = rects.filter(pl.col("depth") == d - 1)
        for k in kids.iter_rows(named=True):
            inside = parents.filter((pl.col("start") <= k["start"])
                                    & (pl.col("start") + pl.col("width")
                                       >= k["start"] + k["width"]))
            assert inside.height == 1


def test_flame_picture_draws_each_frame_once_where_it_is():
    """The picture's frames (one collection of rectangles) are `flame`'s rectangles: one
    each, at its depth, from its start over its width; the wide ones named."""
    pytest.importorskip("matplotlib")
    from nsys2prv.analysis.plot import headless, plot_flame

    headless()
    s = collect()
    fig = plot_flame(s.folded, None)
    # the samples without a stack are left out of the picture (said in its title)
    rects = S.flame(s.folded.filter(~pl.col("stack").str.contains(S.LEAF_ONLY, literal=True)))
    (coll,) = fig.axes[0].collections
    boxes = sorted((v[:, 0].min(), (v[:, 1].min() + v[:, 1].max()) / 2, np.ptp(v[:, 0]))
                   for v in (p.vertices for p in coll.get_paths()))
    want = sorted((float(r["start"]), float(r["depth"]), float(r["width"]))
                  for r in rects.iter_rows(named=True))
    assert boxes == want and len(want) > 3
    total = rects.filter(pl.col("depth") == 0)["width"].sum()
    named = {t.get_text() for t in fig.axes[0].texts}
    assert named == {r["name"] for r in rects.iter_rows(named=True)
                     if r["width"] >= total * 0.02 and len(r["name"]) <= 160 * r["width"] / total}


def test_carried_values_are_no_samples():
    w = window(sample_events([(0, 5, [1])] + [(0, 10, [4, 1])]), carried=1)
    c = S.SampleCollector()
    c.add(w)
    assert c.counts.result()["samples"].sum() == 1


# ------------------------------------------------------------------ the GPU's gaps --

GAPS = pl.DataFrame({"gid": [0, 1, 2], "g": [0, 0, 0], "start": [12, 28, 45],
                     "end": [22, 42, 58], "host_row": [0, 0, None]},
                    schema={"gid": pl.Int64, "g": pl.Int64, "start": pl.Int64,
                            "end": pl.Int64, "host_row": pl.Int32})


def call_events() -> list[tuple]:
    """The launcher (row 0): sem_timedwait (value 31) 11-21 with a stack, a CUDA sync
    (value 40) 29-44 without one, an OS call 47-49 on row 1 (not a launching row)."""
    return [(0, 11, osrt.OSRT_CALL, 31), (0, 11, S.CALLER + 1, 7), (0, 11, S.CALLER + 2, 8),
            (0, 11, S.CALLER + 3, 2), (0, 21, osrt.OSRT_CALL, 0),
            (0, 29, cuda.CUDA_CALL, 40), (0, 44, cuda.CUDA_CALL, 0),
            (1, 47, osrt.OSRT_CALL, 31), (1, 49, osrt.OSRT_CALL, 0)]


def gap_code(events, windows_at=(0, 1000)) -> S.GapCode:
    code = S.GapCode()
    code.begin(GAPS, rows_frame(), 1000)
    ev = sorted(events, key=lambda e: e[1])
    bounds = list(windows_at)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        part = [e for e in ev if lo <= e[1] < hi]
        code.add(window(part, lo, hi))
    code.finish()
    return code


def brute_gaps(samples):
    """Per sample inside a gap of device 0: (row, leaf, launcher's?)."""
    out = []
    for r, t, st in samples:
        for g in GAPS.iter_rows(named=True):
            if g["start"] <= t < g["end"]:
                out.append((r, st[0], r == g["host_row"]))
    return out


@pytest.mark.parametrize("cuts", [(0, 1000), (0, 17, 33, 1000), (0, 12, 22, 28, 42, 45, 1000)])
def test_gap_code_samples_and_calls_across_windows(cuts):
    code = gap_code(sample_events(SAMPLES) + call_events(), cuts)
    brute = brute_gaps(SAMPLES)
    running = Counter(r for r, _, _ in brute)
    got = code.in_gaps.result().group_by("row").agg(pl.col("samples").sum())
    assert dict(zip(got["row"], got["samples"])) == dict(running)
    launching = Counter(leaf for _, leaf, own in brute if own)
    got = S._self(code.launching.result(), ["g"])
    assert dict(zip(got["value"], got["samples"])) == dict(launching)
    calls = {tuple(r["site"]): (r["time"], r["calls"]) for r in code.calls().iter_rows(named=True)}
    # sem_timedwait 11-21 overlaps gap 0 (12-22) by 9 ns; the sync 29-44 overlaps gap 1
    # (28-42) by 13 ns; row 1's call is not a launching thread's
    assert calls == {(osrt.OSRT_CALL, 31, 7, 8, 2): (9, 1), (cuda.CUDA_CALL, 40, 0, 0, 0): (13, 1)}


def test_gap_tables_and_the_line():
    s = collect()
    code = gap_code(sample_events(SAMPLES) + call_events())
    calls = {osrt.OSRT_CALL: {31: "sem_timedwait"}, cuda.CUDA_CALL: {40: "cudaStreamSynchronize"}}
    names = pl.DataFrame({"g": [0], "name": ["rank 0 python / GPU 0"]})
    S.add_gaps(s, code, rows_frame(), LABELS, calls, names, {0: {"wait": 9, "cuda_sync": 13}})
    b = s.gap_blocking
    assert b["api"].to_list() == ["cudaStreamSynchronize", "sem_timedwait"]
    top = b.filter(pl.col("api") == "sem_timedwait").row(0, named=True)
    assert top["callers"] == "PyThread_acquire_lock_timed < acquire_timed < step"
    assert top["cause"] == "wait" and top["kind"] == "OS runtime"
    idle = int((GAPS["end"] - GAPS["start"]).sum())
    assert top["share"] == pytest.approx(9 / idle)
    assert b.filter(pl.col("api") == "cudaStreamSynchronize")["cause"].item() == "cuda_sync"
    assert s.gaps.row(0, named=True)["idle"] == idle
    assert s.gap_folded["samples"].sum() == len(brute_gaps(SAMPLES))
    line = s.lines[0]
    assert "blocked in cudaStreamSynchronize" in line  # the main cause: 13 ns of sync
    brute = brute_gaps(SAMPLES)
    others = sum(r == 2 for r, _, _ in brute)  # the worker (pid 20): its own process
    assert (f"meanwhile 1 other process ran {others / len(brute):.0%} of the {len(brute)} "
            "samples taken in the gaps: pid 20") in line
    code = s.gap_code.row(0, named=True)
    assert code["others_share"] == pytest.approx(others / len(brute))
    assert code["code"].startswith("cudaStreamSynchronize")


def test_one_pass_equals_the_second_pass():
    """The comparison's first-pass count of the launching threads' samples inside the gaps
    equals the second pass's, however the windows cut the gaps."""
    ev = sample_events(SAMPLES)
    keys = np.array([0], dtype=np.int64)
    for cuts in ((0, 1000), (0, 17, 33, 50, 1000), (0, 13, 14, 30, 44, 1000)):
        one = S.OnePassGapSamples(keys, rows_frame())
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            ended = np.array([[0, g["start"], g["end"], g["host_row"]
                               if g["host_row"] is not None else -1]
                              for g in GAPS.iter_rows(named=True)
                              if lo < g["end"] <= hi], dtype=np.int64).reshape(-1, 4)
            idle = np.array([[0, g["start"]] for g in GAPS.iter_rows(named=True)
                             if g["start"] < hi < g["end"]], dtype=np.int64).reshape(-1, 2)
            one.add(window([e for e in ev if lo <= e[1] < hi], lo, hi), ended, idle)
        got = one.result()
        want = Counter(leaf for _, leaf, own in brute_gaps(SAMPLES) if own)
        assert dict(zip(got["value"], got["samples"])) == dict(want), cuts


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 200), st.integers(1, 30)),
                min_size=1, max_size=25),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 260), st.integers(0, 260)),
                min_size=1, max_size=20))
def test_gap_index_equals_a_scan(gaps, queries):
    # disjoint gaps per device: laid out one after the other
    rows, t = [], {}
    for g, gapbefore, length in gaps:
        s = t.get(g, 0) + gapbefore
        rows.append((g, s, s + length))
        t[g] = s + length
    frame = pl.DataFrame(rows, schema={"g": pl.Int64, "start": pl.Int64, "end": pl.Int64},
                         orient="row").with_columns(pl.lit(0, pl.Int32).alias("host_row"))
    end = max(e for _, _, e in rows) + 300
    idx = S._GapIndex.of(frame, end)
    for g, a, b in queries:
        if g not in set(frame["g"]):
            continue
        gi = np.array([int(np.searchsorted(idx.g, g))])
        lo, hi = min(a, b), max(a, b)
        want = sum(max(0, min(hi, e) - max(lo, s)) for gg, s, e in rows if gg == g)
        got = int(idx.covered(gi, np.array([hi]))[0] - idx.covered(gi, np.array([lo]))[0])
        assert got == want
        inside = [i for i, (gg, s, e) in enumerate(rows) if gg == g and s <= a < e]
        assert (int(idx.inside(gi, np.array([a]))[0]) >= 0) == bool(inside)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(1, 60),
                          st.integers(0, 2)), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2000), st.integers(1, 5)),
                max_size=200))
def test_one_pass_gap_samples_equal_a_scan(gaps, samples):
    """The first pass's samples inside the gaps (one as-of sweep per device) count what a
    scan of every (sample, gap) pair counts: the samples of a gap's host row in [a, b)."""
    rows, t = [], {}
    for gi, before, length, host in gaps:  # a device's gaps one after the other
        a = t.get(gi, 0) + before
        rows.append((gi, a, a + length, host))
        t[gi] = a + length
    gap_frame = pl.DataFrame(rows, schema={"gi": pl.Int64, "a": pl.Int64, "b": pl.Int64,
                                           "row": pl.Int32}, orient="row")
    leaves = pl.DataFrame(samples, schema={"row": pl.Int32, "time": pl.Int64,
                                           "value": pl.Int64}, orient="row")
    got = {(gi, v): n for gi, v, n in S.OnePassGapSamples._inside(leaves, gap_frame)
           .filter(pl.col("samples") > 0).iter_rows()}
    want: Counter = Counter()
    for row, time, value in samples:
        for gi, a, b, host in rows:
            if host == row and a <= time < b:
                want[(gi, value)] += 1
    assert got == dict(want)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50),
                          st.lists(st.integers(1, 9), min_size=1, max_size=5)),
                max_size=40), st.booleans())
def test_stacks_cut_where_they_change_equal_the_sorted_ones(samples, shuffle):
    """A window's stacks read in the order the trace writes them (one line a sample, by
    time then row) equal those of the sort-and-group path; any other layout (shuffled
    events) goes to that path, with the same result."""
    lines = sorted({(t, r): stack for r, t, stack in samples}.items())
    ev = pl.DataFrame([(r, t, S.SAMPLED + d, v) for (t, r), stack in lines
                       for d, v in enumerate(stack)],
                      schema={"row": pl.Int32, "time": pl.Int64, "type": pl.Int64,
                              "value": pl.Int64}, orient="row")
    if shuffle:
        ev = ev.sample(fraction=1.0, shuffle=True, seed=3)
    got = S.sample_stacks(ev).sort("row", "time")
    want = (ev.sort("row", "time", "type").group_by("row", "time", maintain_order=True)
            .agg(pl.col("value").alias("stack")))
    assert got.select("row", "time", "stack").to_dicts() == \
        want.with_columns(pl.col("row").cast(pl.Int32)).to_dicts()
    if ev.height and not shuffle:
        assert S._consecutive_stacks(ev) is not None  # the trace's own layout: no sort


def test_proportion_test():
    # Fisher's exact two-sided p of [[3, 2], [0, 5]] is 1/6 (R: fisher.test)
    assert _fisher(3, 5, 0, 5) == pytest.approx(1 / 6)
    assert proportion_p(41, 100, 3, 100) < 1e-9
    assert proportion_p(500, 1000, 510, 1000) > 0.5
    assert proportion_p(1, 0, 1, 10) is None


# ------------------------------------------- scenario exports, reports and their traces --

from pathlib import Path  # noqa: E402

import nsys2prv  # noqa: E402
from nsys2prv.testing import synth_samples as ss  # noqa: E402


@pytest.fixture(scope="module", params=["starved", "compute"])
def scenario(request, tmp_path_factory):
    """A scenario's export and its analysis from the report and from its trace."""
    d = tmp_path_factory.mktemp(request.param)
    path = ss.scenario_export(d / f"{request.param}.sqlite", request.param)
    nsys2prv.translate(path, d / "t.prv")
    with nsys2prv.load(path) as run:
        from_report = run.samples()
    with nsys2prv.load(d / "t.prv") as run:
        from_trace = run.samples()
    return request.param, ss.expected_samples(request.param), from_report, from_trace


def test_scenario_threads_and_the_launching_thread(scenario):
    kind, exp, t, t2 = scenario
    got = {(r["pid"], r["tid"]): r["samples"] for r in t["threads"].iter_rows(named=True)}
    assert got == exp["counts"]
    launcher = ss.idle.PID
    want = exp["gap_leaves"][(launcher, launcher)]
    got = {ss.label(ss.Frame(r["function"], r["module"])): r["samples"]
           for r in t["gap_launching"].iter_rows(named=True)}
    assert got == want
    running = {(r["pid"], r["tid"]): r["samples"] for r in t["gap_running"].iter_rows(named=True)}
    assert running == {k: sum(v.values()) for k, v in exp["gap_leaves"].items()}
    for name in ("threads", "self", "inclusive", "gap_blocking", "gap_launching",
                 "gap_running", "gap_folded", "folded"):
        assert t[name].equals(t2[name]), name  # the report and its trace agree
    assert t.notes == t2.notes


def test_scenario_names_the_code(scenario):
    kind, exp, t, _ = scenario
    line = t.notes[0]
    if kind == "starved":
        top = t["gap_blocking"].row(0, named=True)
        want = [ss.label(f) for f in ss.WAIT_STACK]
        assert f"{top['api']} ({Path('libc.so.6').name})" == want[0]
        assert top["callers"] == " < ".join(w.rsplit(" (", 1)[0] for w in want[1:4])
        assert top["time"] == exp["blocked_ns"]
        assert top["cause"] == "wait"
        assert "blocked in sem_timedwait from PyThread_acquire_lock_timed" in line
        assert f"pid {ss.WORKERS[0]}" in line and f"pid {ss.WORKERS[1]}" in line
        assert "meanwhile 2 other processes ran" in line
    else:
        assert "computed:" in line
        names = {f.function for stack in ss.COMPUTE for f in stack[:1]}
        assert any(n in line for n in names)
        assert t["gap_blocking"].filter(pl.col("kind") == "OS runtime").height == 0


def test_folded_output_sums_to_the_samples(scenario, tmp_path):
    kind, exp, t, _ = scenario
    from nsys2prv.cli import main

    out = tmp_path / "f.txt"
    path = ss.scenario_export(tmp_path / "s.sqlite", kind)
    assert main(["analyze", str(path), "--folded", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert sum(int(x.rsplit(" ", 1)[1]) for x in lines) == sum(exp["counts"].values())
    assert len(lines) == len(set(x.rsplit(" ", 1)[0] for x in lines))  # one per stack


def test_two_ranks_per_rank_and_job(tmp_path):
    """Two reports, one rank each on its own node (a starved one, a computing one): the
    threads of both, per device its own waits, and the job's line."""
    from nsys2prv.testing.synth import write_export

    paths, truths = [], []
    for rank, kind in enumerate(("starved", "compute")):
        spec, stacks = ss.scenario_spec(kind)
        spec.env = {"OMPI_COMM_WORLD_RANK": str(rank)}
        spec.host = f"node{rank}"
        paths.append(ss.add_stacks(write_export(tmp_path / f"r{rank}.sqlite", spec), stacks))
        truths.append(ss.expected_samples(kind))
    with nsys2prv.load(paths) as run:
        t = run.samples()
    rank = pl.col("process").str.extract(r"^rank (\d+) ", 1).cast(pl.Int64)
    per_rank = dict(t["threads"].group_by(rank).agg(pl.col("samples").sum()).iter_rows())
    assert per_rank == {0: sum(truths[0]["counts"].values()),
                        1: sum(truths[1]["counts"].values())}
    devices = t["gaps"]["device"].to_list()
    assert len(devices) == 3 and devices[-1] == "job"
    idle = dict(zip(t["gaps"]["device"], t["gaps"]["idle"]))
    assert idle["job"] == idle[devices[0]] + idle[devices[1]]
    lines = t.notes[:3]
    assert "blocked in sem_timedwait" in lines[0] and "computed:" in lines[1]
    # a worker of rank 0's node never runs in rank 1's gaps: it is on another node
    rank1 = t["gap_running"].filter(pl.col("device") == devices[1])
    assert set(rank1["process"]) == {"rank 1 idle_app"}


def test_a_window_keeps_the_samples_inside(tmp_path):
    path = ss.scenario_export(tmp_path / "s.sqlite", "compute")
    _, stacks = ss.scenario_spec("compute")
    times = sorted(s.start for s in stacks.samples)
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    with nsys2prv.load(path, window=f"{lo}ns/{hi}ns") as run:
        t = run.samples()
    # a window is [lo, hi): nsys' --filter-time, Paraver's cutter
    assert t["quality"]["samples"].item() == sum(lo <= x < hi for x in times)


def test_diff_names_the_function_whose_share_moved(tmp_path):
    """Before the launching thread waits (its samples in the gaps: the driver's launch),
    after it computes (its samples in the gaps: the compute functions): the comparison's
    samples table moves them beyond noise and the paragraph names one; the same run twice
    moves nothing."""
    before = ss.scenario_export(tmp_path / "b.sqlite", "starved")
    after = ss.scenario_export(tmp_path / "a.sqlite", "compute")
    from nsys2prv.run import compare

    c = compare(before, after)
    t = c["samples"]
    gaps = t.filter(pl.col("scope") == "gaps")
    exp_b, exp_a = ss.expected_samples("starved"), ss.expected_samples("compute")
    launcher = (ss.idle.PID, ss.idle.PID)
    n_b = sum(exp_b["gap_leaves"][launcher].values())
    n_a = sum(exp_a["gap_leaves"][launcher].values())
    assert set(gaps["total_before"]) == {n_b} and set(gaps["total_after"]) == {n_a}
    moved = gaps.filter(pl.col("moved"))
    compute = {f.function for stack in ss.COMPUTE for f in stack[:1]}
    assert compute & set(moved["function"])
    assert "Where in the code, the launching thread's samples inside the GPU's idle gaps" \
        in c.paragraph
    same = compare(after, after)
    assert not same["samples"]["moved"].any()
    assert "Where in the code" not in same.paragraph


def test_the_page_and_the_first_finding_name_the_code(tmp_path):
    path = ss.scenario_export(tmp_path / "s.sqlite", "starved")
    with nsys2prv.load(path) as run:
        findings = run.findings()
        page = run.html(critical_path=False, rules=False)
    first = findings.filter(pl.col("section") == "idle")["sentence"].item()
    assert "in the code, it blocked in sem_timedwait from PyThread_acquire_lock_timed" in first
    assert "while 2 other processes ran" in first
    section = page[page.index('<section id="samples">'):]
    section = section[:section.index("</section>")]
    assert "sem_timedwait" in section and "<svg" in section
    assert "sampling/sampled_function_profile.cfg" in section
