"""CPU samples and call stacks in the trace as Extrae writes them (registry/sampling.py):
every sample of the synthetic exports (testing/synth_samples.py) against the generator's own
frames, with labels computed here, independently of the translation; the callers of OS
runtime and CUDA calls; Python samples kept out of NVTX; the scenarios' truths; the same
bytes whatever the chunking, boolean style or extra column; two reports merged with one
numbering. The corpus exports are checked in tests/test_corpus.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from prvtools import read_prv, sql, stacks_of, thread_ids, validate

import nsys2prv
from nsys2prv.analysis.iterations import analyze_steps
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.registry import sampling as sreg
from nsys2prv.testing import synth
from nsys2prv.testing import synth_samples as ss
from nsys2prv.testing.synth_pairs import iterations_run

MASK = (1 << 64) - 1
SAMPLE_TYPES = (sreg.SAMPLED_FUNCTION, sreg.SAMPLED_FUNCTION + 99)
CALLER_TYPES = (sreg.CALLER_BASE + 1, sreg.CALLER_BASE + 99)


def label(f: ss.Frame) -> str:
    """The code location of a generator frame, as the contract says it is written."""
    if f.function:
        function = f.function
    elif f.ip is not None:
        function = hex(f.ip & MASK)
    else:
        function = "[unresolved]"
    module = (f.module or "").rsplit("/", 1)[-1] or "[Unknown]"
    return f"{function} ({module.replace('(', '[').replace(')', ']')})"


def kept(frames: list[ss.Frame]) -> list[ss.Frame]:
    return [f for f in frames if not f.marker][:100]


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    """The edge-case export translated (NULL/1 booleans), its spec and stacks."""
    d = tmp_path_factory.mktemp("edge")
    spec, stacks = ss.edge_spec()
    db = ss.add_stacks(synth.write_export(d / "edge.sqlite", spec), stacks)
    result = nsys2prv.translate(db, d / "edge.prv")
    return spec, stacks, result, d / "edge.prv", read_prv(d / "edge.prv")


def test_every_sample_is_one_record_with_its_stack(edge):
    spec, stacks, _, out, tr = edge
    validate(out)
    got = stacks_of(tr, *SAMPLE_TYPES)
    assert len(got) == len(stacks.samples)
    want = Counter((s.pid, s.tid, tuple(label(f) for f in kept(s.frames)))
                   for s in stacks.samples)
    assert Counter((pid, tid, stack) for pid, tid, _, stack, _ in got) == want
    # one clock: every sample at its time shifted by the report's offset
    shift = {t - s.start for (_, _, t, _, _), s in
             zip(sorted(got, key=lambda g: g[2]), sorted(stacks.samples, key=lambda s: s.start))}
    assert len(shift) == 1


def test_sample_values_module_depth_cpu_markers(edge):
    _, stacks, _, _, tr = edge
    modules = tr.pcf_labels(sreg.SAMPLED_MODULE)
    by_key = {}
    for pid, tid, t, stack, pairs in stacks_of(tr, *SAMPLE_TYPES):
        by_key.setdefault((pid, tid, stack), []).append(pairs)
    for s in stacks.samples:
        frames = kept(s.frames)
        pairs = by_key[(s.pid, s.tid, tuple(label(f) for f in frames))].pop()
        assert modules[pairs[sreg.SAMPLED_MODULE]] == label(frames[0]).rsplit(" (", 1)[1][:-1]
        assert pairs[sreg.SAMPLE_DEPTH] == len(frames)
        assert pairs[sreg.SAMPLED_CPU] == s.cpu + 1
        markers = sum(f.marker for f in s.frames)
        assert pairs.get(sreg.SAMPLE_MARKERS) == (markers or None)


def test_edge_cases_written_as_the_contract_says(edge):
    _, stacks, result, _, tr = edge
    labels = set(tr.pcf_labels(sreg.SAMPLED_FUNCTION).values())
    assert "0xffffffffaac36a90 ([kernel.kallsyms])" in labels  # negative address, as text
    assert "0xfffffffffffffffe (libc.so.6)" in labels  # no text: the address, 64-bit
    assert "[unresolved] ([Unknown])" in labels  # neither text nor address nor module
    assert "jit_code ([Unknown])" in labels
    assert "poll_loop (libx.so [deleted])" in labels  # ' (' never inside a module
    assert all(lbl.rsplit(" (", 1)[1].endswith(")") and " (" not in lbl.rsplit(" (", 1)[1]
               for v, lbl in tr.pcf_labels(sreg.SAMPLED_FUNCTION).items() if v)
    # the marker between two frames: no gap in the depths
    inner = [p for *_, st, p in stacks_of(tr, *SAMPLE_TYPES) if st[0] == "inner (app)"]
    assert len(inner) == 1 and sorted(t for t in inner[0] if 30_000_000 <= t < 30_000_100) == [
        30_000_000, 30_000_001, 30_000_002]
    # the 105-frame stack: 100 frames written, never 30000100
    deep = [p for *_, st, p in stacks_of(tr, *SAMPLE_TYPES) if st[0] == "recurse_0 (app)"]
    assert deep[0][sreg.SAMPLE_DEPTH] == 100 and max(
        t for t in deep[0] if t < 31_000_000) == 30_000_099
    assert all(30_000_100 not in dict(p) for *_, p in tr.events)
    n = len(stacks.samples)
    assert result.counts["cpu_samples"] == n
    assert result.counts["cpu_samples_with_stack"] == sum(len(kept(s.frames)) > 1
                                                         for s in stacks.samples)
    assert result.counts["cpu_sample_marker_frames_dropped"] == sum(
        f.marker for s in stacks.samples for f in s.frames)
    assert result.warnings["CPU samples: frames deeper than 99 callers (cut)"] == 5
    # value 0 is End, never a function; the one table serves every depth and level
    table = tr.pcf_labels(sreg.SAMPLED_FUNCTION)
    assert table[0] == "End"
    assert tr.pcf_labels(sreg.SAMPLED_FUNCTION + 1) == table == tr.pcf_labels(
        sreg.CALLER_BASE + 1)


def test_samples_change_no_state(edge, tmp_path):
    """Every row keeps the states it has without the samples (the trace only lasts longer,
    to its last sample: the rows are 'Not created' there), and the helper process, known
    only by its samples, gets a row of its own."""
    spec, stacks, _, _, tr = edge
    bare = synth.write_export(tmp_path / "bare.sqlite", spec)
    nsys2prv.translate(bare, tmp_path / "bare.prv", exclude=["samples"])
    base = read_prv(tmp_path / "bare.prv")
    a, b = _states_by_thread(tr), _states_by_thread(base)
    assert set(a) == set(b) | {(ss.EDGE_OTHER, ss.EDGE_OTHER)}
    for key, states in b.items():
        assert a[key] == states
    assert f"(tid {ss.EDGE_WORKER})" in tr.row and f"(tid {ss.EDGE_OTHER})" in tr.row


def _states_by_thread(tr) -> dict:
    """(pid, tid) -> its states but 'Not created', in time order."""
    rows = thread_ids(tr)
    out: dict = {}
    for task, thread, t0, t1, state in tr.states:
        if (task, thread) in rows and state != reg.STATE_NOT_CREATED:
            out.setdefault(rows[(task, thread)], []).append((t0, t1, state))
    return {k: sorted(v) for k, v in out.items()}


def test_callers_of_os_runtime_and_cuda_calls(edge):
    spec, stacks, result, _, tr = edge
    calls = stacks_of(tr, *CALLER_TYPES)
    # OS runtime: level k = stackDepth k, the marker dropped
    osrt = [p for *_, p in calls if p.get(reg.OSRT_CALL)]
    assert len(osrt) == len(stacks.osrt) == result.counts["osrt_calls_with_stack"] == 2
    want_osrt = tuple(label(f) for f in kept(stacks.osrt[0])[1:])
    assert [st for *_, st, p in calls if p.get(reg.OSRT_CALL)] == [want_osrt] * 2
    # CUDA: on the plain rows only (never on the _v3020 twins), level 1 after the API frame
    cuda = [(st, p) for *_, st, p in calls if p.get(reg.CUDA_CALL)]
    assert result.counts["cuda_calls_with_stack"] == len(cuda) == 3
    names = tr.pcf_labels(reg.CUDA_CALL)
    got = {names[p[reg.CUDA_CALL]]: st for st, p in cuda}
    assert got["cudaMalloc"] == ("alloc_buffers (app)", "main (app)")
    assert got["cudaMemcpy"] == ("upload (app)", "main (app)")
    # no frame named cudaFree: level 1 is the first frame outside CUPTI and the driver
    assert got["cudaFree"] == ("0x55925a7d1b09 ([Unknown])", "0x55925a7cd220 ([Unknown])")


def test_python_samples_are_not_nvtx(edge, tmp_path):
    spec, _, result, _, tr = edge
    marks = [n for n in spec.nvtx if n.domain == ss.PYTHON_DOMAIN]
    assert result.counts["python_samples"] == len(marks) == tr.nonzero(sreg.PYTHON_SAMPLE)
    assert not tr.values(reg.NVTX_MARK) and not tr.values(reg.NVTX_CATEGORY)
    assert "Python" not in tr.pcf.split("EVENT_TYPE", 1)[1].split("Python sample", 1)[1]


def test_same_trace_for_both_boolean_styles_and_any_chunking(edge, tmp_path):
    """NULL/1 or 0/1 booleans, pipit's extra symbolName column and chunks of 7 rows (frames
    read in many batches of the ordered stream) give the trace of the edge export."""
    *_, out, tr = edge
    spec, stacks = ss.edge_spec("zero", symbol_name_column=True)
    db = ss.add_stacks(synth.write_export(tmp_path / "edge.sqlite", spec), stacks)
    nsys2prv.translate(db, tmp_path / "zero.prv", chunk_rows=7)
    other = read_prv(tmp_path / "zero.prv")
    assert other.events == tr.events and other.states == tr.states
    strip = lambda pcf: [x for x in pcf.splitlines() if "edge" not in x]  # noqa: E731
    assert strip(other.pcf) == strip(tr.pcf)


def test_two_reports_share_one_numbering(tmp_path):
    """Each report numbers its code locations its own way; merged, one function has one
    value at every depth of both (the engine renumbers the callers in the text pairs)."""
    paths = []
    for k, extra in enumerate(("alpha", "zeta")):
        spec = synth.Spec(host=f"n{k}", env={"OMPI_COMM_WORLD_RANK": str(k)})
        spec.processes = [(100 + k, "app")]
        spec.threads = [(100 + k, 100 + k, "app")]
        st = ss.Stacks(samples=[ss.CpuSample(
            1_000 * (j + 1), 100 + k, 100 + k, 0,
            [ss.Frame(f"{extra}_{j % 3}", "/a/lib.so"), ss.Frame("shared", "/a/lib.so"),
             ss.Frame("main", "/a/app")]) for j in range(12)])
        paths.append(ss.add_stacks(synth.write_export(tmp_path / f"r{k}.sqlite", spec), st))
    nsys2prv.translate(paths, tmp_path / "both.prv")
    tr = read_prv(tmp_path / "both.prv")
    got = Counter((pid, st) for pid, _, _, st, _ in stacks_of(tr, *SAMPLE_TYPES))
    want = Counter((100 + k, (f"{x}_{j % 3} (lib.so)", "shared (lib.so)", "main (app)"))
                   for k, x in enumerate(("alpha", "zeta")) for j in range(12))
    assert got == want


def test_without_stack_tables_nothing_changes(tmp_path):
    """An export without samples or stacks: no samples kind, the trace as before (its
    bytes are in the identity table; here: no type of this family)."""
    from nsys2prv.testing.samples import sample_spec

    db = synth.write_export(tmp_path / "s.sqlite", sample_spec())
    result = nsys2prv.translate(db, tmp_path / "s.prv")
    pcf = (tmp_path / "s.pcf").read_text()
    assert "Sampled" not in pcf and "Caller" not in pcf and "samples" not in str(
        result.counts)


@pytest.mark.parametrize("kind", ss.SCENARIOS)
def test_scenarios(kind, tmp_path):
    db = ss.scenario_export(tmp_path / f"{kind}.sqlite", kind, n=6)
    out = tmp_path / f"{kind}.prv"
    nsys2prv.translate(db, out)
    validate(out)
    tr = read_prv(out)
    truth = ss.expected_samples(kind, n=6)
    got = stacks_of(tr, *SAMPLE_TYPES)
    assert Counter((pid, tid) for pid, tid, *_ in got) == truth["counts"]
    first = min(spec_t for spec_t in _sample_starts(kind))
    shift = min(t for _, _, t, _, _ in got) - first
    leaves: dict = {}
    for pid, tid, t, stack, _ in got:
        if any(a <= t - shift < b for a, b in truth["gaps"]):
            per = leaves.setdefault((pid, tid), {})
            per[stack[0]] = per.get(stack[0], 0) + 1
    assert leaves == truth["gap_leaves"]
    if kind == "starved":
        callers = [st for *_, st, p in stacks_of(tr, *CALLER_TYPES) if p.get(reg.OSRT_CALL)]
        assert callers == [tuple(truth["blocking"][1:])] * 5
        # the workers have no ThreadNames row, yet their rows
        assert all(f"(pid {w})" in tr.row for w in ss.WORKERS)


def _sample_starts(kind):
    _, stacks = ss.scenario_spec(kind, n=6)
    return [s.start for s in stacks.samples]


def test_python_marks_never_make_steps(tmp_path):
    """Steps found on a run are the same once Python samples are added on its launching
    thread, every millisecond across its steps."""
    e = iterations_run(tmp_path / "run.sqlite", steps=8)
    plain = tmp_path / "plain.prv"
    nsys2prv.translate(e.path, plain)
    gtid, lo, hi = sql(e.path, "SELECT globalTid, min(start), max(\"end\") FROM "
                                "CUPTI_ACTIVITY_KIND_RUNTIME")[0]
    pid, tid = (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF
    ss.add_python_marks(e.path, pid, tid, range(lo, hi, 1_000_000))
    marked = tmp_path / "marked.prv"
    result = nsys2prv.translate(e.path, marked)
    assert result.counts["python_samples"] == len(range(lo, hi, 1_000_000)) >= 10
    a, b = analyze_steps(plain, None)[2], analyze_steps(marked, None)[2]
    assert a.name == b.name == "train_step" and a.steps.equals(b.steps)
    assert not read_prv(marked).values(reg.NVTX_MARK)


def test_window_keeps_the_samples_inside(edge, tmp_path):
    """A time window (one report: the export's own clock) keeps the samples inside it."""
    _, stacks, _, out, _ = edge
    db = Path(out).with_suffix(".sqlite")
    part = nsys2prv.translate(db, tmp_path / "w.prv", window="500us/1500us")
    got = stacks_of(read_prv(tmp_path / "w.prv"), *SAMPLE_TYPES)
    inside = [s for s in stacks.samples if 500_000 <= s.start < 1_500_000]
    assert Counter(st for *_, st, _ in got) == Counter(
        tuple(label(f) for f in kept(s.frames)) for s in inside)
    assert 0 < len(inside) < len(stacks.samples) and part.counts["cpu_samples"] >= len(inside)


# -- the + 1 of CUDA call stacks, on the two corpus exports that have them --------------------

def _cuda_chains(db):
    import re

    calls = sql(db, "SELECT s.value, r.callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                    "JOIN StringIds s ON s.id = r.nameId WHERE r.callchainId IS NOT NULL")
    frames: dict = {}
    for cid, symbol, ip in sql(db, "SELECT c.id, s.value, c.originalIP FROM CUDA_CALLCHAINS c "
                                   "JOIN StringIds s ON s.id = c.symbol "
                                   "ORDER BY c.id, c.stackDepth"):
        frames.setdefault(cid, []).append((re.sub(r"_v\d+$", "", symbol), ip))
    return [(re.sub(r"_v\d+$", "", n), c) for n, c in calls], frames


def test_cuda_stack_is_chain_plus_one_pipit():
    """pipit: with + 1 every call's chain has a frame named as the call's API; with the
    equality join NVIDIA documents 17 of 38 do and the call with id 0 finds no chain."""
    from conftest import CORPUS, need_exports

    db = CORPUS / "sqlite" / "pipit_saxpy_mpi_cuda_rank0.sqlite"
    need_exports(db)
    calls, frames = _cuda_chains(db)
    named = {off: sum(any(s == api for s, _ in frames.get(c + off, [])) for api, c in calls)
             for off in (0, 1)}
    assert len(calls) == 38 and named == {0: 17, 1: 38}
    assert 0 in {c for _, c in calls} and 0 not in frames


def test_cuda_stack_is_chain_plus_one_cumat():
    """cumat (every frame unresolved): with + 1 each return address at the API's frame
    (depth 3) and at its caller's (depth 4) belongs to calls of one API; with the equality
    join most addresses are shared by calls of different APIs."""
    from conftest import CORPUS, need_exports

    db = CORPUS / "exported" / "cumat_mpi_4gpu.nsys2022.4.sqlite"
    need_exports(db)
    calls, frames = _cuda_chains(db)
    assert len(calls) == 572

    def shared(off: int, depth: int) -> tuple[int, int]:
        apis: dict = {}
        for api, c in calls:
            chain = frames.get(c + off, [])
            if len(chain) > depth:
                apis.setdefault(chain[depth][1], set()).add(api)
        return len(apis), sum(len(v) > 1 for v in apis.values())

    assert [shared(1, d) for d in (3, 4)] == [(7, 0), (15, 0)]
    assert [shared(0, d) for d in (3, 4)] == [(7, 6), (15, 8)]


def test_cuda_callers_pipit_name_the_application(tmp_path):
    """In the trace, the first caller of pipit's cudaMalloc calls is the program's
    templated wrapper, then main: level 1 after libcudart's cudaMalloc frame."""
    from conftest import CORPUS, need_exports

    db = CORPUS / "sqlite" / "pipit_saxpy_mpi_cuda_rank0.sqlite"
    need_exports(db)
    nsys2prv.translate(db, tmp_path / "p.prv")
    tr = read_prv(tmp_path / "p.prv")
    names = tr.pcf_labels(reg.CUDA_CALL)
    mallocs = {st[:2] for *_, st, p in stacks_of(tr, *CALLER_TYPES)
               if names.get(p.get(reg.CUDA_CALL)) == "cudaMalloc"}
    assert mallocs == {("cudaError cudaMalloc<double>(double**, unsigned long) "
                        "(saxpy-mpi-cuda)", "main (saxpy-mpi-cuda)")}


# -- Paraver's own engine (paramedir) on the sampling cfgs: its stored outputs against the
#    exports' counts (tools/paramedir.py refresh --only samples) ---------------------------

PARAMEDIR = Path(__file__).resolve().parent / "data" / "paramedir"


def _table_by_tid(path: Path) -> dict[int, dict[str, float]]:
    """tid -> column label -> cell of a stored paramedir table (CPU thread rows only)."""
    import re

    from paramedir import read_table

    t = read_table(path)
    out = {}
    for r, row in enumerate(t.rows):
        m = re.search(r"\(tid (\d+)\)$", row)
        if m:
            out[int(m.group(1))] = {c: v for c, v in zip(t.columns, t.cells[r]) if v}
    return {k: v for k, v in out.items() if v}


def _leaf_counts_sql(db: Path) -> dict[int, dict[str, float]]:
    """tid -> leaf label -> samples, from the export (depth-0 frames, markers excluded)."""
    out: dict[int, dict[str, float]] = {}
    for gtid, symbol, module, ip, n in sql(
            db, "SELECT ce.globalTid, s.value, m.value, c.originalIP, count(*) "
                "FROM COMPOSITE_EVENTS ce JOIN SAMPLING_CALLCHAINS c ON c.id = ce.id "
                "JOIN StringIds s ON s.id = c.symbol JOIN StringIds m ON m.id = c.module "
                "WHERE c.stackDepth = 0 AND s.value NOT IN ('[Max depth]', '[Broken backtraces]') "
                "GROUP BY ce.globalTid, s.value, m.value, "
                "CASE WHEN s.value = '' THEN c.originalIP END"):
        f = ss.Frame(symbol, module, ip)
        per = out.setdefault(gtid & 0xFFFFFF, {})
        per[label(f)] = per.get(label(f), 0) + n
    return out


@pytest.mark.parametrize("name,rel", [("samples_pipit", "sqlite/pipit_saxpy_mpi_cuda_rank0"),
                                      ("samples_testcuda", "sqlite/testcuda_report1")])
def test_paramedir_sampled_function_profile_is_the_export(name, rel):
    """Paraver's sampled-function profile (paramedir on sampling/sampled_function_profile.cfg)
    counts, per thread and leaf function, the samples of the export."""
    from conftest import CORPUS, need_exports

    db = CORPUS / f"{rel}.sqlite"
    need_exports(db)
    got = _table_by_tid(PARAMEDIR / name / "sampling__sampled_function_profile.txt")
    assert got == _leaf_counts_sql(db)


def test_paramedir_on_the_edge_export():
    """paramedir on the edge-case trace: samples per function and per module per thread,
    and the time of OS runtime and CUDA calls per first caller, as the generator made them
    ('[kernel.kallsyms]' kept whole in the column labels)."""
    spec, stacks = ss.edge_spec()
    funcs: dict[int, dict[str, float]] = {}
    mods: dict[int, dict[str, float]] = {}
    for s in stacks.samples:
        leaf = label(kept(s.frames)[0])
        funcs.setdefault(s.tid, {}).setdefault(leaf, 0)
        funcs[s.tid][leaf] += 1
        mod = leaf.rsplit(" (", 1)[1][:-1]
        mods.setdefault(s.tid, {}).setdefault(mod, 0)
        mods[s.tid][mod] += 1
    d = PARAMEDIR / "samples"
    assert _table_by_tid(d / "sampling__sampled_function_profile.txt") == funcs
    assert _table_by_tid(d / "sampling__sampled_module_profile.txt") == mods
    osrt: dict[int, dict[str, float]] = {}
    for i, frames in stacks.osrt.items():
        o = spec.osrt[i]
        caller = label(kept(frames)[1])
        osrt.setdefault(o.tid, {}).setdefault(caller, 0)
        osrt[o.tid][caller] += o.end - o.start
    assert _table_by_tid(d / "sampling__callers_osrt.txt") == osrt
    cuda = _table_by_tid(d / "sampling__callers_cuda.txt")
    assert cuda == {ss.EDGE_MAIN: {"alloc_buffers (app)": 20_000, "upload (app)": 20_000,
                                   "0x55925a7d1b09 ([Unknown])": 20_000}}


def test_windowed_merge_and_stream_read_the_same_samples(tmp_path, monkeypatch):
    """The edge export's samples and callers merged in time windows by two processes give
    the serial merge's bytes (the callers' values renumbered in each), and an analysis
    stream (no .prv written, records scanned straight from the merge, the activities'
    attributes left out) reads the same sample events as the written trace, the depth and
    CPU of every sample included."""
    from nsys2prv.paraver.read import read_trace
    from nsys2prv.pipeline import merge as merge_mod

    spec, stacks = ss.edge_spec()
    db = ss.add_stacks(synth.write_export(tmp_path / "edge.sqlite", spec), stacks)
    other = ss.scenario_export(tmp_path / "starved.sqlite", "starved", n=6)
    nsys2prv.translate([db, other], tmp_path / "one.prv", jobs=1)
    monkeypatch.setattr(merge_mod, "WINDOW_RECORDS", 20)
    used, real = [], merge_mod._write_windows

    def spy(plan, partials, options, windows, *rest):
        used.append(windows)
        return real(plan, partials, options, windows, *rest)

    monkeypatch.setattr(merge_mod, "_write_windows", spy)
    nsys2prv.translate([db, other], tmp_path / "two.prv", jobs=2)
    assert len(used) == 1 and len(used[0]) == 2
    assert (tmp_path / "one.prv").read_bytes() == (tmp_path / "two.prv").read_bytes()
    types = [sreg.SAMPLED_FUNCTION, sreg.SAMPLED_FUNCTION + 1, sreg.SAMPLE_DEPTH,
             sreg.SAMPLED_CPU, sreg.CALLER_BASE + 1]
    written = read_trace(tmp_path / "one.prv", types).events
    from nsys2prv.api import translate_stream

    stream = translate_stream([db, other], tmp_path / "stream", attributes=False)
    streamed = read_trace(stream, types).events
    assert written.height > 100 and streamed.select(written.columns).equals(written)


def test_stack_ids_that_point_nowhere(tmp_path):
    """An OS runtime call whose callchainId names no stack and a sample without frames:
    warnings, no caller, the sample's leaf '[no frames] ([Unknown])'."""
    import sqlite3

    spec, stacks = ss.edge_spec()
    db = ss.add_stacks(synth.write_export(tmp_path / "e.sqlite", spec), stacks)
    con = sqlite3.connect(db)
    con.execute("UPDATE OSRT_API SET callchainId = 999 WHERE rowid = 3")  # 'write'
    con.execute("DELETE FROM SAMPLING_CALLCHAINS WHERE id = 1")
    con.commit()
    con.close()
    result = nsys2prv.translate(db, tmp_path / "e.prv")
    assert result.warnings["OS runtime calls: call stack ids that point to no stack"] == 1
    assert result.warnings["CPU samples without a frame"] == 1
    assert result.counts["osrt_calls_with_stack"] == 2
    tr = read_prv(tmp_path / "e.prv")
    leaves = Counter(st[0] for *_, st, _ in stacks_of(tr, *SAMPLE_TYPES))
    assert leaves["[no frames] ([Unknown])"] == 1
    assert len(stacks_of(tr, *SAMPLE_TYPES)) == len(stacks.samples)
    validate(tmp_path / "e.prv")
