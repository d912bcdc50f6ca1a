"""CUDA graphs: graph-level executions, node-level ids and CPU-side graph events on synthetic
exports in NVIDIA's documented layouts (no real export has CUDA graphs), and the real exports
checked to have none where SQL finds none."""

from __future__ import annotations

from collections import Counter

import pytest

import nsys2prv
from nsys2prv.paraver.registry import graphs as greg
from nsys2prv.report.report import Report
from nsys2prv.sources import graphs as source
from nsys2prv.testing import synth_gpu as sg

from conftest import CORPUS, corpus_files
from prvtools import Trace, read_prv, sql, tables, validate

US = sg.US


def _thread_labels(tr) -> list[str]:
    return tr.row.split("LEVEL THREAD SIZE ")[1].splitlines()[1:]


def _thread_of(tr, text: str) -> int:
    hits = [i + 1 for i, lbl in enumerate(_thread_labels(tr)) if text in lbl]
    assert len(hits) == 1, (text, _thread_labels(tr))
    return hits[0]


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    d = tmp_path_factory.mktemp("graphs")
    db = sg.graph_export(d / "graphs.sqlite")
    result = nsys2prv.translate(db, d / "graphs.prv")
    validate(d / "graphs.prv")
    return result, read_prv(d / "graphs.prv")


def test_graph_executions_on_streams(graphs):
    result, tr = graphs
    assert result.counts["cuda_graph_executions"] == len(sg.GRAPH_EXECUTIONS)
    labels = tr.pcf_labels(greg.GRAPH_EXECUTION)
    got = {labels[v]: d for (_, v), d in tr.durations(greg.GRAPH_EXECUTION).items()}
    expected = Counter()
    for a, b, _, _, g, ge in sg.GRAPH_EXECUTIONS:
        expected[f"graph {g} exec {ge}"] += (b - a) * US
    assert got == dict(expected)
    # ids at the start of each execution, 0 at its end
    starts = [dict(p) for *_, p in tr.events if dict(p).get(greg.GRAPH_EXECUTION)]
    assert sorted((s[greg.GRAPH_ID], s[greg.GRAPH_EXEC_ID]) for s in starts) == sorted(
        (g, ge) for *_, g, ge in sg.GRAPH_EXECUTIONS)
    ends = [dict(p) for *_, p in tr.events if dict(p).get(greg.GRAPH_EXECUTION) == 0]
    assert all(e[greg.GRAPH_ID] == 0 and e[greg.GRAPH_EXEC_ID] == 0 for e in ends)
    assert len(ends) == len(sg.GRAPH_EXECUTIONS)


def test_graph_execution_is_running_state(graphs):
    _, tr = graphs
    stream13 = _thread_of(tr, "stream 13")
    states = tr.state_time()[(1, stream13)]
    assert states[1] == (300_000 - 210_000) * US  # Running exactly while graph 2 ran
    assert set(states) <= {0, 1}


def test_launch_arrows_to_graph_executions(graphs):
    _, tr = graphs
    arrows = [c for c in tr.comms if c[-1] == greg.TAG_GRAPH_LAUNCH]
    launches = {corr: a for a, _, corr in sg.GRAPH_LAUNCHES}
    expected = sorted((a - launches[corr]) * US for a, _, _, corr, _, _ in sg.GRAPH_EXECUTIONS)
    # 3:cpu:appl:task:thread:lsend:psend:cpu:appl:task:thread:lrecv:precv:size:tag
    assert sorted(c[12] - c[5] for c in arrows) == expected
    cpu = _thread_of(tr, "(tid 300)")
    assert {c[4] for c in arrows} == {cpu}
    assert {c[10] for c in arrows} == {_thread_of(tr, "stream 7 ("), _thread_of(tr, "stream 13")}


def test_node_ids_on_kernels_and_copies(graphs):
    result, tr = graphs
    assert result.counts["cuda_graph_node_kernels"] == 2
    assert result.counts["cuda_graph_node_memcpys"] == 1
    assert result.counts["cuda_graph_node_memsets"] == 1
    by_activity = {}
    for task, thread, time, pairs in tr.events:
        d = dict(pairs)
        node = d.get(greg.GRAPH_NODE_ID)
        if node and (d.get(63000006) or d.get(67100001)):  # on a kernel or memory operation
            by_activity[node] = (thread, d.get(greg.GRAPH_ID), d.get(67100001))
    assert sorted(by_activity) == sorted(n for *_, n, _ in sg.GRAPH_NODES)
    assert by_activity[101][1] == by_activity[103][1] == 1  # kernels carry graphId
    assert by_activity[102][2] == 2 and by_activity[104][2] == 100  # memcpy H2D, memset
    # node 103 overlapped node 101 on stream 7: it and its ids went to a lane row
    assert "lane 1" in _thread_labels(tr)[by_activity[103][0] - 1]
    cpu = _thread_of(tr, "(tid 300)")  # node creation events carry node ids too
    gpu = Trace(tr.header, tr.end, events=[e for e in tr.events if e[1] != cpu])
    durations = {v: d for (_, v), d in gpu.durations(greg.GRAPH_NODE_ID).items()}
    assert durations == {n: (b - a) * US for _, a, b, _, _, n, _ in sg.GRAPH_NODES}
    # the plain kernel has no graph ids
    plain = [dict(p) for *_, p in tr.events if dict(p).get(67000021) == 31]
    assert plain and greg.GRAPH_NODE_ID not in plain[0]


def test_cpu_graph_events(graphs):
    result, tr = graphs
    n = len(sg.GRAPH_NODE_EVENTS) + len(sg.GRAPH_EVENTS)
    assert result.counts["cuda_graph_api_events"] == n
    cls = tr.pcf_labels(greg.GRAPH_EVENT)
    got = Counter(cls[v] for v in tr.values(greg.GRAPH_EVENT) if v)
    expected = Counter(greg.GRAPH_EVENT_CLASSES[e[2]] for e in sg.GRAPH_NODE_EVENTS)
    expected.update(greg.GRAPH_EVENT_CLASSES[e[2]] for e in sg.GRAPH_EVENTS)
    assert got == expected
    fn = tr.pcf_labels(greg.GRAPH_FUNCTION)
    durations = Counter()
    for (_, v), d in tr.durations(greg.GRAPH_FUNCTION).items():
        durations[fn[v]] += d
    expected_d = Counter()
    for a, b, _, name, *_ in sg.GRAPH_NODE_EVENTS + sg.GRAPH_EVENTS:
        expected_d[name] += (b - a) * US
    assert durations == expected_d
    starts = [dict(p) for *_, p in tr.events if dict(p).get(greg.GRAPH_EVENT)]
    clone = [s for s in starts if s.get(greg.GRAPH_ORIGINAL_ID)]
    assert len(clone) == 1
    assert clone[0][greg.GRAPH_ID] == 2 and clone[0][greg.GRAPH_ORIGINAL_ID] == 1
    assert sorted(s[greg.GRAPH_ORIGINAL_NODE_ID] for s in starts
                  if s.get(greg.GRAPH_ORIGINAL_NODE_ID)) == [101]
    assert sorted(s[greg.GRAPH_EXEC_ID] for s in starts if s.get(greg.GRAPH_EXEC_ID)) == [1, 2]


def test_nsys_2022_layout(tmp_path):
    """nsys 2022.4: CUDA_GRAPH_EVENTS holds the node events; no graph-level trace table."""
    db = sg.graph_export(tmp_path / "g.sqlite", layout="3.0.0")
    result = nsys2prv.translate(db, tmp_path / "g.prv")
    validate(tmp_path / "g.prv")
    tr = read_prv(tmp_path / "g.prv")
    assert "cuda_graph_executions" not in result.counts
    nodes = sorted(v for v in tr.values(greg.GRAPH_NODE_ID) if v)
    assert nodes == sorted([101, 102, 201] + [n for *_, n, _ in sg.GRAPH_NODES])
    assert not [v for v in tr.values(greg.GRAPH_ID) if v]  # no graphId column on kernels
    cls = tr.pcf_labels(greg.GRAPH_EVENT)
    assert Counter(cls[v] for v in tr.values(greg.GRAPH_EVENT) if v) == {
        "CUDA graph node creation": 3}


# -- real exports ------------------------------------------------------------------------------

FILES = corpus_files()


@pytest.mark.parametrize("db", FILES or [None], ids=[p.name for p in FILES] or ["no-corpus"])
def test_corpus_graph_data_detected_as_sql_finds_it(db):
    """No real export has CUDA graphs (corpus MANIFEST); detection must agree with SQL."""
    if db is None:
        pytest.skip(f"real-export corpus not found at {CORPUS}")
    t = tables(db)
    n = 0
    for table in (source.GRAPH_TRACE, source.GRAPH_EVENTS, source.NODE_EVENTS):
        if table in t:
            n += sql(db, f'SELECT count(*) FROM "{table}"')[0][0]
    for table in source.NODE_TABLES.values():
        if table in t and "graphNodeId" in {r[1] for r in sql(
                db, f'PRAGMA table_info("{table}")')}:
            n += sql(db, f'SELECT count(*) FROM "{table}" WHERE graphNodeId IS NOT NULL')[0][0]
    assert source.available(Report(db)) == (n > 0)
