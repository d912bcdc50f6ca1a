"""Every real export of ../shared/corpus translates, validates and keeps every record.

Expected numbers come from SQL on the export itself; the trace side is read by the project's
checker (vectorised) and by the naive reader in prvtools, and cross-checked with pertalde.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict

import numpy as np
import polars as pl
import pytest
from conftest import ROOT, corpus_cases, corpus_files, translate_case
from prvtools import pertalde_view, ptd, read_prv, sql, tables, validate, without_detail

from nsys2prv.analysis import scaling
from nsys2prv.analysis.model import (CUDA_CALL, CUDA_STATES, EXPLAIN_TYPES, TYPES, _main_rows,
                                     analyze_path, analyze_trace, host)
from nsys2prv.paraver import read as read_module
from nsys2prv.paraver.read import read_trace, windows
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.check import check_trace
from nsys2prv.paraver.registry import STATE_BY_VALUE

FILES = corpus_files()


@pytest.fixture(scope="module", **corpus_cases(FILES))
def translated(request, tmp_path_factory):
    return translate_case(request, tmp_path_factory,
                          "real-export corpus (../shared/corpus) not present")


@pytest.fixture(scope="module")
def naive(translated):
    """The trace as the naive reader reads it, once per export for the tests that need it
    (asked for with request.getfixturevalue after their skips: none reads it for nothing)."""
    return read_prv(translated[2])


def _count(db, table, where="1"):
    if table not in tables(db):
        return 0
    return sql(db, f'SELECT count(*) FROM "{table}" WHERE {where}')[0][0]


def _nvtx_ids(db, names, defaults):
    if "ENUM_NSYS_EVENT_TYPE" in tables(db):
        rows = sql(db, "SELECT id, name FROM ENUM_NSYS_EVENT_TYPE")
        ids = [i for i, n in rows if n in names]
        if ids:
            return ids
    return list(defaults)


@pytest.fixture(scope="module")
def checked(translated):
    """The strict checker's report of the trace, once per export (its validity, its
    counts)."""
    return check_trace(translated[2])


def test_validates(translated, checked):
    _, _, out = translated
    validate(out, checked)


def test_record_counts_match_the_database(translated, checked):
    db, result, out = translated
    counts = checked.event_counts
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    n_kernels = _count(db, k)
    n_nccl = 0
    if n_kernels:
        n_nccl = sql(db, f"SELECT count(*) FROM {k} JOIN StringIds s ON s.id = {k}.shortName "
                         "WHERE lower(s.value) LIKE 'nccl%'")[0][0]
    assert counts.get(reg.CUDA_KERNEL, 0) == n_kernels - n_nccl
    assert counts.get(reg.NCCL_KERNEL, 0) == n_nccl
    assert counts.get(reg.CUDA_CALL, 0) == _count(db, "CUPTI_ACTIVITY_KIND_RUNTIME")
    assert counts.get(reg.MEMORY_OPERATION, 0) == _count(
        db, "CUPTI_ACTIVITY_KIND_MEMCPY") + _count(db, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert counts.get(reg.OSRT_CALL, 0) == _count(db, "OSRT_API")
    if "NVTX_EVENTS" in tables(db):
        pp = _nvtx_ids(db, ("NvtxPushPopRange", "NvtxtPushPopRange"), (59, 70))
        se = _nvtx_ids(db, ("NvtxStartEndRange", "NvtxtStartEndRange"), (60, 71))
        mk = _nvtx_ids(db, ("NvtxMark", "NvtxtMark"), (34, 65))
        inlist = lambda ids: f"eventType IN ({','.join(map(str, ids))})"  # noqa: E731
        pushpop = sum(v for t, v in counts.items()
                      if reg.NVTX_PUSHPOP_BASE <= t < reg.NVTX_PUSHPOP_BASE + 1000)
        startend = sum(v for t, v in counts.items()
                       if reg.NVTX_STARTEND_BASE <= t < reg.NVTX_STARTEND_BASE + 1000)
        assert pushpop == _count(db, "NVTX_EVENTS", inlist(pp))
        assert startend == _count(db, "NVTX_EVENTS", inlist(se))
        assert counts.get(reg.NVTX_MARK, 0) == _count(db, "NVTX_EVENTS", inlist(mk))


def test_kernel_time_per_name_matches_sql(translated, request):
    db, _, out = translated
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    if k not in tables(db):
        pytest.skip("no kernels in this export")
    want = defaultdict(int)
    for name, total in sql(db, f"SELECT s.value, sum({k}.end - {k}.start) FROM {k} "
                               f"JOIN StringIds s ON s.id = {k}.shortName GROUP BY s.value"):
        want[name] += total
    tr = request.getfixturevalue("naive")
    labels = tr.pcf_labels(reg.CUDA_KERNEL)
    got = defaultdict(int)
    for (_, v), d in tr.durations(reg.CUDA_KERNEL, reg.NCCL_KERNEL).items():
        got[labels[v]] += d
    assert dict(got) == dict(want)


def test_api_time_per_name_matches_sql(translated, request):
    db, _, out = translated
    r = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if r not in tables(db):
        pytest.skip("no CUDA API calls in this export")
    want = defaultdict(int)
    for name, total in sql(db, f"SELECT s.value, sum({r}.end - {r}.start) FROM {r} "
                               f"JOIN StringIds s ON s.id = {r}.nameId GROUP BY s.value"):
        want[re.sub(r"_v\d+$", "", name)] += total
    tr = request.getfixturevalue("naive")
    labels = tr.pcf_labels(reg.CUDA_CALL)
    got = defaultdict(int)
    for (_, v), d in tr.durations(reg.CUDA_CALL).items():
        got[labels[v]] += d
    assert dict(got) == dict(want)


# CUPTI's synchronisation types (the event's value - 1) and words their labels must hold
SYNC_MEANING = {1: ("event", "sync"), 2: ("wait",), 3: ("stream", "sync"),
                4: ("context", "sync")}


def test_sync_kinds_follow_the_ids_not_sync_type(translated, request):
    """Each CUDA synchronisation event says what the record was by its ids (a stream and an
    event: stream wait; an event: event sync; a stream: stream sync; neither: context
    sync), counted per kind against SQL over the records whose CUDA call is in the export;
    the value's label says the same (most nsys versions number syncType otherwise)."""
    db, _, out = translated
    s, r = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME"
    if s not in tables(db) or r not in tables(db):
        pytest.skip("no synchronisation records with CUDA calls in this export")
    has = lambda c, lo: f"({c} IS NOT NULL AND {c} >= {lo} AND {c} < 4294967295)"  # noqa: E731
    stream, event = has("s.streamId", 0), has("s.eventId", 1)
    kind = (f"CASE WHEN {stream} AND {event} THEN 2 WHEN {event} THEN 1 "
            f"WHEN {stream} THEN 3 ELSE 4 END")
    pid = lambda c: f"(({c} >> 24) % 16777216)"  # noqa: E731
    # a semi-join (SQLite indexes the subquery's pairs once), not a correlated EXISTS that
    # scans every CUDA call for every synchronisation record: the same rows
    want = dict(sql(db, f"SELECT {kind}, count(*) FROM {s} s WHERE (s.correlationId, "
                        f"{pid('s.globalPid')}) IN (SELECT r.correlationId, "
                        f"{pid('r.globalTid')} FROM {r} r) GROUP BY 1"))
    ev = read_trace(out, {reg.CUDA_SYNC_TYPE}).events.filter(pl.col("value") != 0)
    got = {v - 1: n for v, n in ev.group_by("value").len().iter_rows()}
    assert got == want
    labels = request.getfixturevalue("naive").pcf_labels(reg.CUDA_SYNC_TYPE)
    for k in got:
        assert all(w in labels[k + 1].lower() for w in SYNC_MEANING[k]), labels[k + 1]


def test_pertalde_counts_agree(translated):
    """pertalde's own reader counts the same kernel and CUDA call records."""
    db, _, out = translated
    if ptd() is None:
        pytest.skip("pertalde not installed")
    with pertalde_view(out) as target:
        proc = subprocess.run([ptd(), "comptar", "--all", str(target)], capture_output=True,
                              text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    occ = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\|\s*Event\s*\|\s*(.+?)\s*\|\s*(\d+)\s*\|", line)
        if m:
            occ[m.group(1)] = int(m.group(2))
    # every region writes a start and an end record
    assert occ.get("CUDA library call", 0) == 2 * _count(db, "CUPTI_ACTIVITY_KIND_RUNTIME")
    kernels = _count(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert occ.get("CUDA kernel", 0) + occ.get("NCCL kernel", 0) == 2 * kernels


# --- analyze on real exports (issue 21): windows, pinned numbers, an independent check ---

PINNED = json.loads((ROOT / "tests" / "data" / "analyze" / "corpus.json").read_text())


def _case_id(db) -> str:
    return f"{db.parent.name}/{db.name}"


def test_analysis_in_windows_equals_the_whole_trace(translated, checked, monkeypatch):
    """The trace read in small windows (what analyze does on any size, in bounded memory)
    gives exactly the numbers of the trace read whole, why the GPUs wait included."""
    _, _, out = translated
    # 64 KiB, or ~12 windows on larger traces: what is tested is the edges (states cut,
    # events carried), 11 a trace; each window costs the analysis ~120 small polars calls
    # (48 windows: 2.4 s for an 8.7 MB trace read whole in 0.13 s; 64 KiB gave the 41 MB
    # trace 625 windows)
    block = max(1 << 16, out.stat().st_size // 12)
    # (the model's numbers come from the first pass, which `explain` only adds to: the
    # windowed analysis with it, equal to the whole one, covers them)
    explained = analyze_trace(read_trace(out, EXPLAIN_TYPES, comms=True), explain=True)
    monkeypatch.setattr(read_module, "BLOCK", block)
    full = analyze_path(out).to_dict()
    assert full == {**explained.to_dict(), "trace": str(out)}
    # what a diff computes (no per-process groups, launches or NVTX ranges): the same numbers
    assert analyze_path(out, detail=False).to_dict() == without_detail(full)
    r1 = scaling.run_of(read_trace(out, scaling.SCALING_TYPES), "x")
    r2 = scaling.run_of(windows(out, scaling.SCALING_TYPES, block=block), "x")
    assert (r1.kernels, r1.kernel_time, r1.metrics, r1.kernel_metrics) == \
        (r2.kernels, r2.kernel_time, r2.metrics, r2.kernel_metrics)
    kernels = sql(translated[0], "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0] \
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables(translated[0]) else 0
    n_nccl = checked.event_counts.get(reg.NCCL_KERNEL, 0)
    assert r2.kernels == kernels - n_nccl


def test_analysis_numbers_are_pinned(translated):
    """analyze prints what it printed before issue 21 where it did not crash; the exports
    that crashed are pinned too (their CUDA-call times are checked below)."""
    db, _, out = translated
    key = _case_id(db)
    if key not in PINNED["results"]:
        pytest.skip(f"{key}: no pinned analyze numbers (a new corpus export)")
    got = analyze_path(out, explain=False).to_dict()
    got.pop("trace")
    got.pop("idle")
    assert got == PINNED["results"][key]


def test_main_thread_cuda_time_by_prefix_sums(translated):
    """Time in each CUDA-call state while a CUDA call is open, per main thread, computed a
    second way: prefix sums of the sorted CUDA-call intervals, evaluated at every state's
    edges (no sweep, no join)."""
    _, _, out = translated
    trace = read_trace(out, TYPES)
    main = _main_rows(trace)
    # CUDA calls: from an event with a value != 0 to the row's next CUDA-call event
    ev = trace.events.filter(pl.col("type") == CUDA_CALL).sort("seq")
    calls = (ev.with_columns(pl.col("time").shift(-1).over("row").fill_null(trace.end)
                             .alias("end"))
             .filter((pl.col("value") != 0) & (pl.col("end") > pl.col("time")))
             .select("row", pl.col("time").alias("start"), "end"))
    hosts = {h.task: h for h in host(trace)}
    for r in main.iter_rows(named=True):
        iv = calls.filter(pl.col("row") == r["row"]).sort("start")
        s, e = iv["start"].to_numpy(), iv["end"].to_numpy()
        before = np.concatenate([[0], np.cumsum(e - s)])

        def covered(t):
            k = np.searchsorted(s, t, side="right") - 1
            inside = np.where(k >= 0, np.minimum(t, e[np.maximum(k, 0)]) - s[np.maximum(k, 0)],
                              0) if len(s) else np.zeros_like(t)
            return np.where(k >= 0, before[np.maximum(k, 0)] + np.maximum(inside, 0), 0) \
                if len(s) else np.zeros_like(t)

        st = trace.states.filter((pl.col("row") == r["row"])
                                 & pl.col("state").is_in(CUDA_STATES))
        want = {}
        for state in CUDA_STATES:
            part = st.filter(pl.col("state") == state)
            if part.height:
                t = int((covered(part["end"].to_numpy())
                         - covered(part["begin"].to_numpy())).sum())
                if t:
                    want[STATE_BY_VALUE[state].label] = t
        assert hosts[r["task_index"] + 1].by_state == want


# -- CPU samples and call stacks (issue 46): the trace against the export's own frames ------

from nsys2prv.sources.callchains import MARKERS  # noqa: E402 - the frames dropped
CUDA_OWN = re.compile(r"^(libcupti|libcuda|libToolsInjection|libnvperf|libnvidia-)")


def _location(symbol, module, ip) -> str:
    """A frame's label as the contract (docs/samples.md) says it is written."""
    function = symbol if symbol else (f"0x{ip & ((1 << 64) - 1):x}" if ip is not None
                                      else "[unresolved]")
    base = (module or "").rsplit("/", 1)[-1] or (module or "")
    base = base if base.strip() else "[Unknown]"
    return f"{function} ({base.replace('(', '[').replace(')', ']')})"


def _chains(db, table, ids_sql: str) -> dict[int, list[tuple[str, str]]]:
    """chain id -> its frames (label, symbol text) leaf first, markers dropped."""
    ip = "c.originalIP" if "originalIP" in {r[1] for r in sql(
        db, f'PRAGMA table_info("{table}")')} else "NULL"
    out: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for cid, symbol, module, addr in sql(
            db, f"SELECT c.id, s.value, m.value, {ip} FROM {table} c "
                "LEFT JOIN StringIds s ON s.id = c.symbol LEFT JOIN StringIds m ON m.id = c.module "
                f"WHERE c.id IN ({ids_sql}) ORDER BY c.id, c.stackDepth"):
        if symbol not in MARKERS:
            out[cid].append((_location(symbol, module, addr), symbol or ""))
    return out


def _gtid(g):
    return (g >> 24) & 0xFFFFFF, g & 0xFFFFFF


def test_samples_match_the_export(translated, request):
    """One 30000000 record per COMPOSITE_EVENTS row, on its thread, with its whole stack
    (leaf and callers by depth, markers dropped, at most 100 frames); per thread and per
    leaf (symbol, module) the counts of the export's samples and depth-0 frames."""
    from collections import Counter

    from prvtools import stacks_of

    db, result, out = translated
    if "COMPOSITE_EVENTS" not in tables(db):
        pytest.skip("no CPU samples in this export")
    frames = _chains(db, "SAMPLING_CALLCHAINS", "SELECT id FROM COMPOSITE_EVENTS")
    want = Counter()
    for cid, gtid in sql(db, "SELECT id, globalTid FROM COMPOSITE_EVENTS"):
        stack = tuple(lbl for lbl, _ in frames.get(cid, []))[:100] or ("[no frames] ([Unknown])",)
        want[(*_gtid(gtid), stack)] += 1
    tr = request.getfixturevalue("naive")
    got = Counter((pid, tid, st) for pid, tid, _, st, _ in stacks_of(tr, 30_000_000, 30_000_099))
    assert got == want
    per_thread = Counter()
    for g, n in sql(db, "SELECT globalTid, count(*) FROM COMPOSITE_EVENTS GROUP BY globalTid"):
        per_thread[_gtid(g)] += n
    assert Counter({(p, t): n for (p, t, _), n in got.items()}) == per_thread or \
        sum(per_thread.values()) == sum(got.values())
    leaves = Counter()
    for symbol, module, addr, n in sql(
            db, "SELECT s.value, m.value, c.originalIP, count(*) FROM SAMPLING_CALLCHAINS c "
                "JOIN StringIds s ON s.id = c.symbol JOIN StringIds m ON m.id = c.module "
                "WHERE c.stackDepth = 0 AND s.value NOT IN "
                f"({', '.join(repr(m) for m in MARKERS)}) "
                "GROUP BY s.value, m.value, CASE WHEN s.value = '' THEN c.originalIP END"):
        leaves[_location(symbol, module, addr)] += n
    got_leaves = Counter()
    for (_, _, st), n in got.items():
        got_leaves[st[0]] += n
    assert got_leaves == leaves
    assert result.counts["cpu_samples"] == sum(want.values())


def test_sample_profiles_match_the_export(translated):
    """The analysis' profiles of the trace (analysis/samples.py, as `analyze` reads them):
    per thread the export's samples, self counts its leaf frames and inclusive counts its
    frames once per sample, by (symbol, module), markers dropped."""
    from collections import Counter

    from nsys2prv.analysis import samples as S
    from nsys2prv.paraver.read import windows

    db, result, out = translated
    if "COMPOSITE_EVENTS" not in tables(db):
        pytest.skip("no CPU samples in this export")
    frames = _chains(db, "SAMPLING_CALLCHAINS", "SELECT id FROM COMPOSITE_EVENTS")
    leaves, anywhere, threads = Counter(), Counter(), Counter()
    for cid, gtid in sql(db, "SELECT id, globalTid FROM COMPOSITE_EVENTS"):
        stack = [lbl for lbl, _ in frames.get(cid, [])][:100] or ["[no frames] ([Unknown])"]
        leaves[stack[0]] += 1
        anywhere.update(set(stack))
        threads[_gtid(gtid)] += 1
    collector = S.SampleCollector()
    for window in windows(out, types=S.SampleCollector.types):
        collector.add(window)
    labels, _ = S.read_labels(out.with_suffix(".pcf"))
    got = S.profiles(collector.counts.result(), collector.rows, labels, collector.markers)

    def by_label(df):
        return {f"{f} ({m})": n for f, m, n in df.select("function", "module", "samples")
                .iter_rows()}

    assert by_label(got.self_) == dict(leaves)
    assert by_label(got.inclusive) == dict(anywhere)
    assert {(p, t): n for p, t, n in got.threads.select("pid", "tid", "samples")
            .iter_rows()} == dict(threads)
    assert got.folded["samples"].sum() == sum(threads.values())


def _caller_levels(frames: list[tuple[str, str]], api: str | None) -> tuple[str, ...]:
    """Level 1.. of a call's stack: OS runtime (api None) the frames after depth 0; CUDA
    the frames after the one named as the API, else from the first frame outside CUPTI, the
    driver and nsys' libraries, else from depth 0."""
    if api is None:
        return tuple(lbl for lbl, _ in frames[1:])[:99]
    names = [re.sub(r"_v\d+$", "", s) for _, s in frames]
    if api in names:
        start = names.index(api) + 1
    else:
        own = [bool(CUDA_OWN.match(lbl.rsplit(" (", 1)[1][:-1])) for lbl, _ in frames]
        start = own.index(False) if False in own else 0
    return tuple(lbl for lbl, _ in frames[start:])[:99]


def test_callers_match_the_export(translated, request):
    """At the entry of every OS runtime call with a stack (callchainId > 0) and of every CUDA
    call with one (callchainId + 1), Extrae's caller events hold the stack's frames by
    level; no other call has them."""
    from collections import Counter

    from prvtools import stacks_of

    db, result, out = translated
    have = tables(db)
    want_osrt, want_cuda = Counter(), Counter()
    if "OSRT_CALLCHAINS" in have:
        frames = _chains(db, "OSRT_CALLCHAINS",
                         "SELECT callchainId FROM OSRT_API WHERE callchainId > 0")
        for g, cid in sql(db, "SELECT globalTid, callchainId FROM OSRT_API WHERE callchainId > 0"):
            levels = _caller_levels(frames.get(cid, []), None)
            if levels:
                want_osrt[(*_gtid(g), levels)] += 1
    if "CUDA_CALLCHAINS" in have:
        r = "CUPTI_ACTIVITY_KIND_RUNTIME"
        frames = _chains(db, "CUDA_CALLCHAINS",
                         f"SELECT callchainId + 1 FROM {r} WHERE callchainId IS NOT NULL")
        for g, cid, name in sql(db, f"SELECT r.globalTid, r.callchainId + 1, s.value FROM {r} r "
                                    "JOIN StringIds s ON s.id = r.nameId "
                                    "WHERE r.callchainId IS NOT NULL"):
            levels = _caller_levels(frames.get(cid, []), re.sub(r"_v\d+$", "", name))
            if levels:
                want_cuda[(*_gtid(g), levels)] += 1
    if not want_osrt and not want_cuda:
        pytest.skip("no OS runtime or CUDA call stacks in this export")
    tr = request.getfixturevalue("naive")
    calls = stacks_of(tr, reg.CALLER_BASE + 1 if hasattr(reg, "CALLER_BASE") else 70_000_001,
                      70_000_099)
    got_osrt = Counter((p, t, st) for p, t, _, st, d in calls if d.get(reg.OSRT_CALL))
    got_cuda = Counter((p, t, st) for p, t, _, st, d in calls if d.get(reg.CUDA_CALL))
    assert got_osrt == want_osrt
    assert got_cuda == want_cuda
    assert len(calls) == sum(want_osrt.values()) + sum(want_cuda.values())
    assert result.counts.get("osrt_calls_with_stack", 0) == sum(want_osrt.values())
    assert result.counts.get("cuda_calls_with_stack", 0) == sum(want_cuda.values())
