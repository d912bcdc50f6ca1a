"""Why the GPUs wait (analysis/idle.py, `nsys2prv analyze`): gaps, their host causes, the NVTX
range, kernel launch statistics, views of the findings.

Each synthetic export (nsys2prv.testing.idle) has one known host cause per gap, with the
expected idle time per cause in closed form; the window machinery (`IntervalStream`,
`NvtxStacks`, gaps that cross windows) is checked against the whole trace read at once and
against brute force.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvtools import without_detail

from nsys2prv.analysis import idle
from nsys2prv.analysis.model import EXPLAIN_TYPES, analyze_path, analyze_trace
from nsys2prv.cli.analyze import main as analyze_main
from nsys2prv.paraver import read
from nsys2prv.paraver.read import Trace, read_trace
from nsys2prv.testing import idle as gen
from nsys2prv.api import translate


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("idle")
    out = {}
    for cause in gen.CAUSES:
        export = gen.export(d / f"{cause}.sqlite", cause)
        translate([str(export)], str(d / f"{cause}.prv"))
        out[cause] = d / f"{cause}.prv"
    return out


@pytest.mark.parametrize("cause", gen.CAUSES)
def test_each_gap_is_attributed_to_its_known_cause(traces, cause):
    r = analyze_path(traces[cause]).idle
    assert r is not None
    assert r.job.gaps == gen.gaps(cause)
    assert r.job.causes == gen.expected(cause)
    assert r.job.idle == sum(gen.expected(cause).values())
    assert [d.causes for d in r.devices] == [r.job.causes]  # one device
    # every listed gap is launched by the main thread, on the device's stream
    assert {f.host_thread for f in r.top} == {"idle_app main (tid 7100)"}
    assert r.notes == ["0.005 ms of idle time falls where the launching thread has no "
                       "record (not alive, or not traced)"]


def test_nvtx_range_open_during_the_gaps(traces):
    """The range open on the launching thread, by its whole name (a .pcf value label holds
    spaces: read to the end of the line)."""
    r = analyze_path(traces["io"]).idle
    # the range covers the phase that every gap starts with; each gap's middle is inside
    assert r.job.nvtx == {gen.LOADER_RANGE: gen.gaps("io") * (gen.PHASE + gen.LAUNCH
                                                             - gen.KERNEL)}
    assert all(f.nvtx == gen.LOADER_RANGE for f in r.top)  # whole: it holds spaces


def test_launch_statistics(traces):
    r = analyze_path(traces["launch"]).idle
    (k,) = r.launches
    assert (k.name, k.count, k.call_time, k.kernel_time) == (
        "step_kernel", 20, 20 * gen.LAUNCH, 20 * 3 * gen.US)
    assert (k.full, k.label) == ("step_kernel", "step_kernel")  # one name: its own label
    assert (k.delay_mean, k.delay_max) == (gen.DELAY, gen.DELAY)
    assert (k.short, k.short_time, r.short_kernel_share) == (20, 20 * 3 * gen.US, 1.0)
    (k,) = analyze_path(traces["sync"]).idle.launches
    assert (k.count, k.short, k.kernel_time) == (20, 0, 20 * gen.KERNEL)


@pytest.mark.parametrize("cause", ["memcpy", "io"])
def test_windows_of_any_size_give_the_whole_trace_report(traces, cause, monkeypatch):
    # (the kernels' demangled names too: the launch statistics are per demangled name)
    types = EXPLAIN_TYPES
    whole = analyze_trace(read_trace(traces[cause], types, comms=True), explain=True).idle
    monkeypatch.setattr(read, "BLOCK", 997)  # a few lines per window
    windowed = analyze_path(traces[cause]).idle
    assert windowed.to_dict() == whole.to_dict()
    assert whole.job.causes == gen.expected(cause)


def _windows_of_a_few_lines(trace, monkeypatch):
    """A source of the trace's windows of a few lines each (calls and ranges cross them),
    the keyword arguments of every read it serves, and the trace's .pcf."""
    monkeypatch.setattr(read, "BLOCK", 997)
    calls = []

    def source(**kw):
        calls.append(sorted(kw))
        return read.windows(trace, **kw)

    return source, calls, trace.with_suffix(".pcf")


@pytest.mark.parametrize("cause", gen.CAUSES)
def test_second_pass_reads_the_first_ones_spill(traces, cause, monkeypatch):
    """A trace file or stream is read once: pass 2 reads the windows pass 1 kept
    (`idle.WindowSpill`), with the same report as reading the trace again (windows of a few
    lines, so that calls and ranges cross them), and the spill is removed after."""
    from nsys2prv.analysis.model import _analyze

    source, calls, pcf = _windows_of_a_few_lines(traces[cause], monkeypatch)
    twice = _analyze(source, True, 10, pcf)
    assert calls == [["comms", "types"], ["state_rows", "types"]]
    calls.clear()
    made = []
    init = idle.WindowSpill.__init__

    def spy(self, types):
        init(self, types)
        made.append(self.dir)

    monkeypatch.setattr(idle.WindowSpill, "__init__", spy)
    once = _analyze(source, True, 10, pcf, spill=True)
    assert calls == [["comms", "types"]]
    assert once.to_dict() == twice.to_dict()
    assert once.idle.job.causes == gen.expected(cause)
    assert len(made) == 1 and not made[0].exists()


@pytest.mark.parametrize("cause", gen.CAUSES)
def test_one_pass_causes_equal_the_second_pass(traces, cause, monkeypatch):
    """Without the NVTX range of each gap or the steps (a comparison's analysis), the causes
    are found on the first pass (`idle.OnePassCauses`: the part of a gap before its last
    window summed on every CPU row of its process while it was open): the same report as
    the second pass gives, in windows of a few lines (gaps crossing several), nothing
    kept on disk."""
    from nsys2prv.analysis.model import _analyze

    source, calls, pcf = _windows_of_a_few_lines(traces[cause], monkeypatch)
    # a step (one, the whole run): its sums need the second pass, which reads the source
    # again (a comparison's side with a step); the whole run's causes are the same
    whole = pl.DataFrame({"instance": [0], "start": [0], "end": [1 << 62]})
    two = _analyze(source, True, 10, pcf, detail=False, steps=lambda: whole)
    assert calls == [["comms", "types"], ["state_rows", "types"]]
    (step,) = two.idle.instances
    assert step["causes"] == {k: v for k, v in two.idle.job.causes.items() if v}
    calls.clear()
    monkeypatch.setattr(idle, "WindowSpill", None)  # never made
    one = _analyze(source, True, 10, pcf, detail=False, spill=True)
    assert calls == [["comms", "types"]]
    # without steps (or a step-less run: steps giving none), one pass only
    assert _analyze(source, True, 10, pcf, detail=False, steps=lambda: None).to_dict() == \
        one.to_dict()
    assert calls == [["comms", "types"], ["comms", "types"]]
    d2 = two.to_dict()
    d2["idle"]["instances"] = one.to_dict()["idle"]["instances"]
    assert one.to_dict() == d2
    assert one.idle.job.causes == gen.expected(cause)
    assert one.idle.job.gaps == gen.gaps(cause)


def _causes_instant_by_instant(t: Trace, row: int, a: int, b: int) -> dict[str, int]:
    """The time of each cause on `row` from a to b, the cause of each instant computed from
    the records directly: the state covering it and, per call set, whether the set's last
    event at or before it opened a call (Paraver's Last Evt Val, closed at the trace's
    end). Instants before the row's first record or after its last change have none."""
    states = t.states.filter(pl.col("row") == row).sort("begin")
    sets = {}
    for name, types in idle.CALL_SETS.items():
        sets[name] = t.events.filter((pl.col("row") == row) & pl.col("type").is_in(types)
                                     ).sort("seq").select("time", "value").rows()
    cuts = set(states["begin"].to_list()) | set(states["end"].to_list())
    for evs in sets.values():
        cuts |= {time for time, _ in evs}
        if evs and evs[-1][1] != 0:
            cuts.add(t.end)
    cuts = sorted(cuts)
    out: dict[str, int] = {}
    spans = states.select("begin", "end", "state").rows()
    for x, y in zip(cuts, cuts[1:]):
        lo, hi = max(x, a), min(y, b)
        if hi <= lo:
            continue
        state = next((s for b0, e0, s in spans if b0 <= x < e0), None)
        opened = {name for name, evs in sets.items() if x < t.end and
                  [v for time, v in evs if time <= x][-1:] not in ([], [0])}
        cause = idle.cause_of(opened, state)
        out[cause] = out.get(cause, 0) + hi - lo
    return out


@pytest.mark.parametrize("cause", gen.CAUSES)
def test_cause_times_equal_the_cause_of_every_instant(traces, cause):
    """`cause_times` (one compiled walk of each host row, engine/_timeline.c) against the
    cause of every instant computed from the records: pieces of every length and phase,
    touching, nested in calls or spanning several, on every CPU row."""
    t = read_trace(traces[cause], idle.CAUSE_TYPES, comms=False)
    rows = t.rows.filter(pl.col("kind") == "cpu")["row"]
    step = max(1, t.end // 97)
    pieces = pl.DataFrame(
        [(r, a, min(a + w, t.end)) for r in rows.to_list()
         for i, a in enumerate(range(0, t.end, step)) for w in (step // 3 + i % 5,)
         if i % 4 == 1],
        schema={"row": pl.Int32, "a": pl.Int64, "b": pl.Int64}, orient="row"
    ).with_row_index("qid").with_columns(pl.col("qid").cast(pl.Int64))
    got = idle.cause_times(t, rows.to_list(), pieces)
    assert got["qid"].to_list() == pieces["qid"].to_list()
    for piece, times in zip(pieces.iter_rows(named=True), got.iter_rows(named=True)):
        want = _causes_instant_by_instant(t, piece["row"], piece["a"], piece["b"])
        assert {k: v for k, v in times.items() if k != "qid" and v} == want
    assert got.select(pl.sum_horizontal(idle.CAUSE_KEYS).sum()).item() > 0
    # window by window (calls open at a window's end close there, and reopen with the
    # values carried into the next): the pieces' parts add up to the same times
    parts = []
    for w in read.windows(traces[cause], idle.CAUSE_TYPES, state_rows=rows.to_list(),
                          block=600):
        inside = pieces.filter((pl.col("a") < w.end) & (pl.col("b") > w.start)).with_columns(
            pl.col("a").clip(lower_bound=w.start), pl.col("b").clip(upper_bound=w.end))
        parts.append(idle.cause_times(w, rows.to_list(), inside))
    assert len(parts) >= 8
    summed = pl.concat(parts).group_by("qid").agg(pl.all().sum())
    assert got.join(summed, on="qid", how="left").fill_null(0).select(
        (pl.col(k) == pl.col(f"{k}_right")).all() for k in idle.CAUSE_KEYS).row(0) == \
        (True,) * len(idle.CAUSE_KEYS)


@pytest.mark.parametrize("cause", gen.CAUSES)
def test_without_detail_the_compared_numbers_are_the_same(traces, cause):
    full = analyze_path(traces[cause])
    assert full.processes and full.idle.job.causes  # something to leave out, and to keep
    assert analyze_path(traces[cause], detail=False).to_dict() == without_detail(
        full.to_dict())


def test_no_launch_record_is_unknown_host(tmp_path):
    spec, _ = gen.spec_of("compute", 4)
    spec.api = [a for a in spec.api if a.correlation != 3]  # the 2nd kernel's launch
    from nsys2prv.testing.synth import write_export

    translate([str(write_export(tmp_path / "x.sqlite", spec))], str(tmp_path / "x.prv"))
    r = analyze_path(tmp_path / "x.prv").idle
    gap = gen.PHASE + gen.LAUNCH - gen.KERNEL
    assert r.job.causes[idle.UNKNOWN_HOST] == gap
    assert any("no launch record" in n for n in r.notes)


def test_cli_text_json_views_and_exports(traces, tmp_path, capsys):
    from nsys2prv.paraver.read import event_types
    from nsys2prv.views.cfg import parse_cfg
    from nsys2prv.views.guicheck import question

    trace = traces["sync"]
    assert analyze_main([str(trace), "--views", str(tmp_path / "v"), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "### Why the GPUs wait" in text
    assert f"{17_095_000 / 17_290_000:6.1%}  in a CUDA synchronisation call" in text
    cfgs = sorted((tmp_path / "v").glob("gap_*.cfg"))
    assert [p.name for p in cfgs] == [f"gap_0{i}_rank_0_idle_app_pid_7100_gpu_0.cfg"
                                      for i in (1, 2, 3)]
    parsed = parse_cfg(cfgs[0])
    assert [w.name for w in parsed.windows] == ["Gap: CUDA calls, kernels, memory operations",
                                                "Gap: host thread and GPU states"]
    # the GUI asks no question loading them on this trace
    loaded = event_types(trace)
    assert [question(parse_cfg(p), loaded) for p in cfgs] == [None] * 3
    first = (tmp_path / "v" / cfgs[0].name).read_text()
    r = analyze_path(trace).idle
    f = r.top[0]
    margin = max(int(f.duration * 0.25), 1000)
    assert f"window_begin_time {max(0, f.start - margin)}" in first
    assert f"window_stop_time {f.end + margin}" in first
    assert "window_object thread { 0, 0, 2, { 1, 1 } }" in first
    # --json on the trace equals --json on the export (translated inside)
    assert analyze_main([str(trace), "--json"]) == 0
    on_trace = json.loads(capsys.readouterr().out)
    export = trace.with_suffix(".sqlite")
    assert analyze_main([str(export), "--json"]) == 0
    on_export = json.loads(capsys.readouterr().out)
    assert on_export["idle"] == on_trace["idle"]
    assert on_trace["idle"]["job"]["causes"] == gen.expected("sync")


def test_reports_with_views_keep_their_trace(traces, tmp_path, capsys):
    export = traces["io"].with_suffix(".sqlite")
    assert analyze_main([str(export), "--views", str(tmp_path / "v"), "--top", "1"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == [
        "gap_01_rank_0_idle_app_pid_7100_gpu_0.cfg", "io.pcf", "io.prv", "io.row"]


def test_without_gpu_work_nothing_is_guessed(tmp_path, capsys):
    from nsys2prv.testing.synth import Osrt, Spec, write_export

    spec = Spec(processes=[(1, "cpu_only")], threads=[(1, 1, "cpu_only")])
    spec.osrt.append(Osrt(1000, 5000, 1, 1, "read"))
    translate([str(write_export(tmp_path / "c.sqlite", spec))], str(tmp_path / "c.prv"))
    assert analyze_path(tmp_path / "c.prv").idle is None
    assert analyze_main([str(tmp_path / "c.prv")]) == 0
    out = capsys.readouterr().out
    assert "no GPU work in this trace" in out
    assert "Why the GPUs wait" not in out


# ------------------------------------------------- the window machinery, brute force --


def _window(events: list[tuple[int, int, int, int]], start: int, end: int,
            carried: int = 0) -> Trace:
    ev = pl.DataFrame(events, schema={"row": pl.Int32, "time": pl.Int64, "type": pl.Int64,
                                      "value": pl.Int64}, orient="row")
    ev = ev.with_row_index("seq").with_columns(pl.col("seq").cast(pl.Int64))
    rows = pl.DataFrame({"row": [0, 1]}, schema={"row": pl.Int32})
    states = pl.DataFrame(schema={"row": pl.Int32, "begin": pl.Int64, "end": pl.Int64,
                                  "state": pl.Int32})
    return Trace(Path("x.prv"), end, rows, ev.select("row", "time", "type", "value", "seq"),
                 states, None, start=start, carried=carried)


# a row's events: (time step, value); values 0 end a range, others start one
_events = st.lists(st.tuples(st.integers(0, 1), st.integers(1, 4), st.integers(0, 3)),
                   max_size=30)


def _timeline(items) -> list[tuple[int, int, int, int]]:
    t, out = 0, []
    for row, dt, value in items:
        t += dt
        out.append((row, t, idle.PUSHPOP[0], value))
    return out


def _cuts(events, cut_points) -> list[tuple[int, int, list]]:
    """Windows [a, b) cut at times between events, as `read.windows` cuts them."""
    times = sorted({e[1] for e in events})
    cuts = sorted({times[i % len(times)] for i in cut_points}) if times else []
    bounds = [0, *cuts, (times[-1] + 5) if times else 10]
    return [(a, b, [e for e in events if (a <= e[1] < b) or (b == bounds[-1] and e[1] >= a)])
            for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=200, deadline=None)
@given(_events, st.lists(st.integers(0, 40), max_size=4))
def test_interval_stream_completes_intervals_across_windows(items, cut_points):
    events = _timeline(items)
    end = (events[-1][1] + 5) if events else 10
    stream = idle.IntervalStream(idle.PUSHPOP[:1])
    got = []
    for a, b, part in _cuts(events, cut_points):
        got += stream.add(_window(part, a, b)).iter_rows()
    got += stream.finish(end).iter_rows()
    # brute force: Last Evt Val per row, one interval per non-zero value until the next event
    want = []
    for row in (0, 1):
        mine = [e for e in events if e[0] == row]
        for i, (_, t, _, v) in enumerate(mine):
            nxt = mine[i + 1][1] if i + 1 < len(mine) else end
            if v and nxt > t:
                want.append((row, t, nxt, v))
    assert sorted(got) == sorted(want)


@settings(max_examples=200, deadline=None)
@given(_events, st.lists(st.integers(0, 40), max_size=4), st.lists(st.integers(0, 60),
                                                                    max_size=8))
def test_nvtx_stacks_name_the_innermost_open_range(items, cut_points, query_times):
    events = _timeline(items)
    stacks = idle.NvtxStacks()
    rows = pl.Series([0, 1], dtype=pl.Int32)
    queries = [(i, row, t) for i, t in enumerate(query_times) for row in (0, 1)]
    got = {}
    for a, b, part in _cuts(events, cut_points):
        q = pl.DataFrame([(i * 2 + row, row, t) for i, row, t in queries if a <= t < b],
                         schema={"qid": pl.Int64, "row": pl.Int32, "t": pl.Int64},
                         orient="row")
        for qid, _, value in stacks.add(_window(part, a, b), rows, q).iter_rows():
            got[qid] = value
    # brute force: a stack per row, values push and 0 pops (an empty stack stays empty)
    end = _cuts(events, cut_points)[-1][1]
    want = {}
    for i, row, t in queries:
        if t >= end:
            continue
        stack: list[int] = []
        for r, te, _, v in events:
            if r == row and te <= t:
                if v:
                    stack.append(v)
                elif stack:
                    stack.pop()
        if stack:
            want[i * 2 + row] = stack[-1]
    # a pop on an empty stack is left unmatched by both only when it never happens first
    balanced = all(_balanced(events, row) for row in (0, 1))
    if balanced:
        assert got == want


def _balanced(events, row) -> bool:
    depth = 0
    for r, _, _, v in events:
        if r == row:
            depth += 1 if v else -1
            if depth < 0:
                return False
    return True


def test_a_spill_without_room_reads_the_trace_again(traces, monkeypatch):
    """A temporary directory that fills up (ENOSPC on a login node's small /tmp) does not
    fail the analysis: the spill is dropped and pass 2 reads the trace again."""
    import errno

    from nsys2prv.analysis.model import _analyze

    calls = []
    made = []
    init = idle.WindowSpill.__init__

    def spy(self, types):
        init(self, types)
        made.append(self.dir)

    def full(self, window):
        raise OSError(errno.ENOSPC, "No space left on device")

    def source(**kw):
        calls.append(sorted(kw))
        return read.windows(traces["sync"], **kw)

    monkeypatch.setattr(idle.WindowSpill, "__init__", spy)
    monkeypatch.setattr(idle.WindowSpill, "add", full)
    r = _analyze(source, True, 10, traces["sync"].with_suffix(".pcf"), spill=True)
    assert calls == [["comms", "types"], ["state_rows", "types"]]
    assert r.idle.job.causes == gen.expected("sync")
    assert len(made) == 1 and not made[0].exists()
