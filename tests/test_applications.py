"""One trace of several runs, one Paraver application each (`translate_applications`).

Each application must be exactly the trace of its run alone (translated with the same window
and numbered like the two-run trace, so that values match): its lines, with the application
id and the CPUs of the runs before it taken off, equal that trace's lines one for one. Checked
on the corpus' before/after runs, on two recordings of one MPI program (4 rank reports
against one launcher report, a window on each) and on the shipped sample against itself with
a window; the header, the .row, the .pcf, `nsys2prv check` and the trace reader see every
application. Paraver's own numbers (paramedir, every shipped cfg with a histogram): see
test_histograms_per_application.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import CORPUS, ROOT

import nsys2prv
from nsys2prv.api import translate_applications
from nsys2prv.errors import UsageError
from nsys2prv.paraver.check import check_trace
from nsys2prv.paraver.read import read_layout, read_trace

SAMPLE = ROOT / "examples" / "sample.sqlite"
BEFORE = CORPUS / "sqlite" / "nsysai_mfu2gpu_before.sqlite"
AFTER = CORPUS / "sqlite" / "nsysai_mfu2gpu_after.sqlite"
RECORDED = ROOT / "tests" / "data" / "recorded"
RANKS = sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite"))
LAUNCHER = RECORDED / "mpi_nvtx_launcher.nsys2022.4.sqlite"
KERNEL = 63_000_006
PARAMEDIR_APPS = ROOT / "tests" / "data" / "paramedir" / "applications"
HEADER = re.compile(r"#Paraver \((?P<date>[^)]*)\):(?P<end>\d+)_ns:(?P<nodes>\d+)\((?P<cpus>[\d,]+)\)"
                    r":(?P<napps>\d+):(?P<apps>.*)")


def need_corpus() -> None:
    if not (BEFORE.exists() and AFTER.exists()):
        pytest.skip(f"real-export corpus not found at {CORPUS} (set NSYS2PRV_CORPUS)")


def header(path: Path) -> dict:
    m = HEADER.match(path.read_text().split("\n", 1)[0])
    assert m, path
    apps = re.findall(r"(\d+)\(([^)]*)\)", m["apps"])
    return {"end": int(m["end"]), "cpus": [int(c) for c in m["cpus"].split(",")],
            "apps": [[tuple(map(int, t.split(":"))) for t in spec.split(",")]
                     for _, spec in apps], "napps": int(m["napps"])}


def body(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


def application_lines(path: Path, appl: int, cpu_before: int) -> list[str]:
    """The lines of application `appl` as the trace of its run alone writes them: appl 1,
    CPUs numbered from 1 (the `cpu_before` CPUs of the runs before it taken off)."""
    out = []
    for ln in body(path):
        f = ln.split(":")
        if int(f[2]) != appl:
            continue
        f[2] = "1"
        if f[1] != "0":
            f[1] = str(int(f[1]) - cpu_before)
        if f[0] == "3":  # the receiver: same application (messages stay inside a run)
            assert int(f[8]) == appl
            f[7], f[8] = str(int(f[7]) - cpu_before), "1"
        out.append(":".join(f))
    return out


def row_levels(path: Path) -> dict[str, list[str]]:
    levels: dict[str, list[str]] = {}
    current = None
    for ln in path.with_suffix(".row").read_text().splitlines():
        m = re.match(r"LEVEL (\w+) SIZE \d+", ln)
        if m:
            current = levels.setdefault(m[1], [])
        elif ln and current is not None:
            current.append(ln)
    return levels


def pcf_values(path: Path) -> dict[int, dict[int, str]]:
    out: dict[int, dict[int, str]] = {}
    group: list[int] = []
    mode = None
    for ln in path.with_suffix(".pcf").read_text().splitlines():
        if ln and ln.isupper() and " " not in ln:
            mode = ln
            if ln == "EVENT_TYPE":
                group = []
            continue
        if not ln.strip():
            continue
        if mode == "EVENT_TYPE" and not ln.startswith("PRECISION"):
            t = int(ln.split()[1])
            group.append(t)
            out[t] = {}
        elif mode == "VALUES":
            v, label = ln.split(None, 1)
            for t in group:
                out[t][int(v)] = label
    return out


def check_applications(both: Path, singles: list[Path], labels: list[str]) -> None:
    """Every application of `both` is the trace `singles[k]` of its run alone."""
    hb = header(both)
    assert hb["napps"] == len(singles) == len(hb["apps"])
    assert check_trace(both).ok, check_trace(both).messages()
    levels = row_levels(both)
    assert [a.split(": ", 1)[0] for a in levels["APPL"]] == labels
    cpu_before = node_before = 0
    task_before = thread_before = 0
    for k, (single, label) in enumerate(zip(singles, labels), start=1):
        hs = header(single)
        assert hs["napps"] == 1
        # its tasks (threads, node), its nodes' CPUs, after those of the runs before it
        assert hb["apps"][k - 1] == [(th, node + node_before) for th, node in hs["apps"][0]]
        assert hb["cpus"][node_before:node_before + len(hs["cpus"])] == hs["cpus"]
        assert application_lines(both, k, cpu_before) == body(single), label
        # the .row: the run's own labels, each starting with the run's label
        own = row_levels(single)
        for level in ("CPU", "NODE", "TASK", "THREAD"):
            n = len(own[level])
            first = {"CPU": cpu_before, "NODE": node_before, "TASK": task_before,
                     "THREAD": thread_before}[level]
            assert levels[level][first:first + n] == [f"{label}: {x}" for x in own[level]]
        assert levels["APPL"][k - 1] == f"{label}: {own['APPL'][0]}"
        # every value the run's trace labels has that label in the trace of both
        pb, ps = pcf_values(both), pcf_values(single)
        for t, table in ps.items():
            if t != 67_999_001:  # the reports' list: numbered by input
                assert {v: pb[t][v] for v in table} == table, t
        cpu_before += sum(hs["cpus"])
        node_before += len(hs["cpus"])
        task_before += len(hs["apps"][0])
        thread_before += sum(th for th, _ in hs["apps"][0])
    assert hb["end"] == max(header(s)["end"] for s in singles)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, list[Path]]:
    """The corpus before/after runs in one trace, and each alone numbered like it."""
    need_corpus()
    d = tmp_path_factory.mktemp("pair")
    both = d / "both.prv"
    result = translate_applications([BEFORE, AFTER], both)
    assert result.output == both and len(result.alignments) == 2
    singles = [d / "before.prv", d / "after.prv"]
    for src, out in zip((BEFORE, AFTER), singles):
        nsys2prv.translate(src, out, values_like=both)
    return both, singles


def test_pair_each_application_is_its_run(pair):
    both, singles = pair
    check_applications(both, singles, ["before", "after"])


def test_pair_one_numbering(pair, tmp_path):
    """One value per kernel name across the runs: a name's value in the trace of both is
    the value the before run alone numbered like the after run gets for it as well."""
    both, _ = pair
    labels = pcf_values(both)[KERNEL]
    names = {label: v for v, label in labels.items() if v}
    assert len(names) == len(labels) - 1  # no name twice
    trace = read_trace(both, {KERNEL}, state_rows="none")
    appl = trace.rows.select("row", "appl")
    used = trace.events.filter(trace.events["value"] != 0).join(appl, on="row")
    by_run = [set(used.filter(used["appl"] == a)["value"].to_list()) for a in (1, 2)]
    shared = by_run[0] & by_run[1]
    assert len(shared) >= 5  # the runs share most kernels: same values in both applications


def test_reader_sees_every_application(pair):
    both, singles = pair
    layout = read_layout(both)
    rows = layout.rows
    assert rows["appl"].unique().sort().to_list() == [1, 2]
    for k, single in enumerate(singles, start=1):
        own = read_layout(single).rows
        mine = rows.filter(rows["appl"] == k)
        # the same kinds and devices as the run's own trace, labels with the run's prefix
        assert mine["kind"].to_list() == own["kind"].to_list()
        assert mine["device"].to_list() == own["device"].to_list()
        prefix = ["before: ", "after: "][k - 1]
        assert mine["label"].to_list() == [prefix + x for x in own["label"].to_list()]
    # and the events of each application are its run's events (times, types, values)
    types = {KERNEL, 63_000_000}
    tb = read_trace(both, types, state_rows="gpu")
    for k, single in enumerate(singles, start=1):
        ts = read_trace(single, types, state_rows="gpu")
        first = rows.filter(rows["appl"] == k)["row"].min()
        ev = tb.events.join(rows.select("row", "appl"), on="row")
        ev = ev.filter(ev["appl"] == k)
        ev = ev.with_columns(ev["row"] - first)
        assert ev.select("row", "time", "type", "value").equals(
            ts.events.select("row", "time", "type", "value")), k
        st = tb.states.join(rows.select("row", "appl"), on="row")
        st = st.filter(st["appl"] == k)
        st = st.with_columns(st["row"] - first)
        assert st.select("row", "begin", "end", "state").equals(ts.states), k


def test_windows_resolved_on_each_run(tmp_path):
    """Two recordings of one MPI program (4 rank reports with nsys 2023.4, one launcher
    report with 2022.4): 'iteration 2' found on each run's own clocks, each application
    starting at 0 at its own iteration 2, MPI messages inside each."""
    both = tmp_path / "mpi.prv"
    labels = ["ranks", "launcher"]
    result = translate_applications([RANKS, LAUNCHER], both, window="iteration 2",
                                    labels=labels, jobs=2)
    singles = [tmp_path / "ranks.prv", tmp_path / "launcher.prv"]
    ends = []
    for src, out in zip((RANKS, LAUNCHER), singles):
        ends.append(nsys2prv.translate(src, out, window="iteration 2",
                                       values_like=both).end_time)
    check_applications(both, singles, labels)
    assert result.end_time == max(ends) and ends[0] != ends[1]
    assert any(ln.startswith("3:") for ln in body(both))
    text = both.read_text()
    for k, label in enumerate(labels, start=1):
        assert f"# application {k} ({label}): window: [" in text


def test_sample_window_against_itself(tmp_path):
    """The sample twice, NVTX window 'iteration 1': both applications are that window."""
    both = tmp_path / "ss.prv"
    translate_applications([SAMPLE, [str(SAMPLE)]], both, window="iteration 1")
    single = tmp_path / "s.prv"
    nsys2prv.translate(SAMPLE, single, window="iteration 1", values_like=both)
    check_applications(both, [single, single], ["before", "after"])
    # numbered like the two-run trace, the window alone is the plain window translation
    plain = tmp_path / "plain.prv"
    nsys2prv.translate(SAMPLE, plain, window="iteration 1")
    assert body(plain) == body(single)


def test_values_like_for_all_runs(tmp_path):
    """`values_like` numbers the two-run trace like another trace."""
    whole = tmp_path / "whole.prv"
    nsys2prv.translate(SAMPLE, whole)
    both = tmp_path / "ss.prv"
    translate_applications([SAMPLE, SAMPLE], both, window="iteration 3", values_like=whole)
    pw, pb = pcf_values(whole), pcf_values(both)
    for t, table in pb.items():
        if t in pw and t != 67_999_001:
            assert all(pw[t].get(v) == label for v, label in table.items()), t


@pytest.mark.parametrize("sides, labels, message", [
    (lambda d: [SAMPLE, d / "x.prv"], None, "not from a .prv"),
    (lambda d: [SAMPLE, SAMPLE], ["a", "a"], "one distinct"),
    (lambda d: [SAMPLE, SAMPLE], ["a: b", "c"], "without ': '"),
    (lambda d: [SAMPLE, SAMPLE], ["a"], "one distinct"),
    (lambda d: [SAMPLE, [SAMPLE, SAMPLE]], None, "given twice"),
])
def test_bad_sides_are_one_line_and_write_nothing(sides, labels, message, tmp_path):
    (tmp_path / "x.prv").write_text("#Paraver (01/01/1970 at 00:00):10_ns:0:1:1(1:1)\n")
    out = tmp_path / "out" / "t.prv"
    out.parent.mkdir()
    with pytest.raises(UsageError, match=message) as e:
        translate_applications(sides(tmp_path), out, labels=labels)
    assert "\n" not in str(e.value)
    assert list(out.parent.iterdir()) == []


def test_one_application_is_unchanged(tmp_path):
    """A trace of one run written through the applications path: the header and .row of an
    ordinary trace except the run's label, the same lines."""
    one = tmp_path / "one.prv"
    translate_applications([SAMPLE], one, labels=["only"])
    single = tmp_path / "s.prv"
    nsys2prv.translate(SAMPLE, single, values_like=one)
    assert header(one)["apps"] == header(single)["apps"]
    assert body(one) == body(single)
    assert row_levels(one)["THREAD"] == ["only: " + x for x in row_levels(single)["THREAD"]]


def _application_rows(table, label: str) -> dict[str, dict[str, float]]:
    """row label -> {column label: cell} of the rows of one application of a histogram of
    the two-run trace (their labels start with 'LABEL: ', taken off), or of a single run's
    histogram (label None: every row)."""
    out = {}
    prefix = f"{label}: "
    for r, row in zip(table.rows, table.cells):
        if label is None or r.startswith(prefix):
            key = r if label is None else r[len(prefix):]
            # columns that are rows too (communication partners) carry the prefix as well
            out[key] = {(c[len(prefix):] if label and c.startswith(prefix) else c): v
                        for c, v in zip(table.columns, row) if v == v and v != 0}
    return out


# histograms whose columns are bins of a range computed from the whole trace: the bins of
# the two-run trace span both runs, so its cells cannot equal a single run's
# (and the per NVTX range ones: these runs' names, one per op_id, span more than the 10,000
# values Paraver gives one column each, so it bins them too)
RANGE_BINNED = {"analysis/kernel_duration_histogram.cfg", "analysis/layer_gpu_time.cfg",
                "analysis/layer_kernel_count.cfg", "hwcounters/layer_rates.cfg"}


PERCENT = ("% Time", "% Window Time", "% Time Not Zero")


def compare_histograms(directory: Path, labels: list[str], ends: dict[str, int]) -> list[str]:
    """For every histogram cfg paramedir ran on the two-run trace ('both') and on each run
    alone: the rows of application k equal the rows of run k's own trace, cell by cell
    (cells matched by column label: a value absent from one run is no column there). A
    percentage of the trace's time is of the two-run trace's time in one and of the run's
    own in the other: it is compared scaled by their ratio (`ends`: trace -> end ns), to
    paramedir's two decimals. Returns the cfgs compared."""
    from nsys2prv.views.cfg import parse_cfg
    from paramedir import read_table

    compared = []
    for out in sorted((directory / "both").glob("*.txt")):
        cfg = out.stem.replace("__", "/") + ".cfg"
        if cfg in RANGE_BINNED:
            continue
        both = read_table(out)
        for label in labels:
            single = directory / label / out.name
            assert single.exists(), f"{cfg}: paramedir ran on the two-run trace, not on {label}"
            mine, own = _application_rows(both, label), _application_rows(read_table(single),
                                                                          None)
            assert list(mine) == list(own), (cfg, label)
            percent = parse_cfg(ROOT / "cfgs" / cfg).histogram["Analyzer2D.Statistic"] \
                in PERCENT
            # a percentage is of the trace's time: the two-run trace's in one, the run's own
            # in the other; both rounded to 0.01 by paramedir
            scale = ends[label] / ends["both"] if percent else 1.0
            tol = 0.011 if percent else 0.0
            # past the run's end its rows hold nothing, which Paraver counts as value 0: the
            # column of 0 (if the cfg has one) holds that tail as well
            tail = (ends["both"] - ends[label]) * (100 / ends["both"] if percent else 1)
            for row in own:
                want = {c: v * scale for c, v in own[row].items()}
                off = {c: mine[row].get(c, 0.0) - want.get(c, 0.0)
                       for c in set(mine[row]) | set(want)}
                moved = [c for c, d in off.items() if abs(d) > tol]
                assert len(moved) <= 1, (cfg, label, row, off)
                assert all(off[c] == pytest.approx(tail, abs=tol) for c in moved), \
                    (cfg, label, row, off, tail)
        compared.append(cfg)
    return compared


def test_histograms_per_application():
    """paramedir (stored outputs, tests/data/paramedir/applications, refreshed with
    `python tools/paramedir.py refresh`): for every shipped cfg with a histogram
    that has data on the before/after pair, the rows of each application of the two-run
    trace equal the rows of that run's own trace."""
    from paramedir import APPLICATION_RUNS

    ends = json.loads((PARAMEDIR_APPS / "ends.json").read_text())
    assert ends["after"] < ends["before"] == ends["both"]  # % cells are scaled for 'after'
    compared = compare_histograms(PARAMEDIR_APPS, list(APPLICATION_RUNS), ends)
    assert {"analysis/compare_kernel_time.cfg", "basics/cuda_kernels_profile.cfg",
            "basics/states_profile.cfg", "analysis/efficiency_nccl_time.cfg"} <= set(compared)
    assert len(compared) >= 12


def test_histograms_per_application_live(tmp_path):
    """The same with paramedir run now on today's translation (where it is installed)."""
    from paramedir import (APPLICATION_RUNS, applications_jobs,
                                          find_paramedir, run_all, trace_end)

    if find_paramedir() is None:
        pytest.skip("paramedir not installed: the stored outputs are checked instead")
    need_corpus()
    out = tmp_path / "out"
    ends = {}
    for name, trace, _, _ in applications_jobs(tmp_path, CORPUS):
        ends[name.split("/")[1]] = trace_end(trace)
        run_all(trace, ROOT / "cfgs", out / name.split("/")[1], histograms_only=True)
    stored = {p.relative_to(PARAMEDIR_APPS) for p in PARAMEDIR_APPS.rglob("*.txt")}
    assert {p.relative_to(out) for p in out.rglob("*.txt")} == stored
    assert len(compare_histograms(out, list(APPLICATION_RUNS), ends)) >= 12
