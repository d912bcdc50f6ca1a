"""cuDNN and cuBLAS calls on their CPU threads: a synthetic export with known calls and marker
rows, and every real export with CUDNN_EVENTS/CUBLAS_EVENTS checked against SQL."""

from __future__ import annotations

from collections import Counter

import pytest

import nsys2prv
from nsys2prv.paraver.registry import dnn as dreg
from nsys2prv.testing import synth_gpu as sg

from conftest import CORPUS, corpus_files
from prvtools import read_prv, sql, tables, validate

TABLES = {"CUDNN_EVENTS": dreg.CUDNN_CALL, "CUBLAS_EVENTS": dreg.CUBLAS_CALL}
MARKERS = ("TRACE_PROCESS_EVENT_CUDNN_START", "TRACE_PROCESS_EVENT_CUDNN_FINISH",
           "TRACE_PROCESS_EVENT_CUBLAS_START", "TRACE_PROCESS_EVENT_CUBLAS_FINISH")


def _by_name(tr, type_) -> tuple[Counter, Counter]:
    """(calls, total duration) per function name of one call type."""
    labels = tr.pcf_labels(type_)
    calls = Counter(labels[v] for v in tr.values(type_) if v)
    durations = Counter()
    for (_, v), d in tr.durations(type_).items():
        durations[labels[v]] += d
    return calls, durations


def test_synthetic_calls(tmp_path):
    db = sg.dnn_export(tmp_path / "dnn.sqlite")
    result = nsys2prv.translate(db, tmp_path / "dnn.prv")
    validate(tmp_path / "dnn.prv")
    tr = read_prv(tmp_path / "dnn.prv")
    assert result.counts["cudnn_calls"] == 3 and result.counts["cublas_calls"] == 2
    for table, type_ in TABLES.items():
        calls = [e for e in sg.DNN_EVENTS if e[0] == table and e[3] in (28, 29)]
        assert _by_name(tr, type_) == (
            Counter(e[4] for e in calls),
            Counter({n: sum((b - a) * sg.US for _, a, b, _, m, _ in calls if m == n)
                     for n in {e[4] for e in calls}}))
    # on the calling thread: the worker's convolution and sgemm are on its own row
    labels = tr.row.split("LEVEL THREAD SIZE ")[1].splitlines()[1:]
    worker = 1 + next(i for i, lbl in enumerate(labels) if f"(tid {sg.DNN_TID2})" in lbl)
    on_worker = Counter(t for _, th, _, p in tr.events if th == worker
                        for t, v in p if v and t in TABLES.values())
    assert on_worker == {dreg.CUDNN_CALL: 1, dreg.CUBLAS_CALL: 1}


# -- real exports ------------------------------------------------------------------------------

FILES = [p for p in corpus_files() if any(
    t in tables(p) and sql(p, f'SELECT count(*) FROM "{t}"')[0][0] for t in TABLES)]


def test_corpus_has_cudnn_files():
    if not CORPUS.is_dir():
        pytest.skip(f"real-export corpus not found at {CORPUS}")
    assert {"darknet_keras_2019_6.nsys2022.4.sqlite", "darknet19_2020_1.nsys2022.4.sqlite"} <= {
        p.name for p in FILES}


@pytest.mark.parametrize("db", FILES or [None], ids=[p.name for p in FILES] or ["no-corpus"])
def test_corpus_calls_match_sql(db, tmp_path):
    if db is None:
        pytest.skip(f"real-export corpus not found at {CORPUS} (or no cuDNN/cuBLAS tables)")
    nsys2prv.translate(db, tmp_path / "d.prv")
    validate(tmp_path / "d.prv")
    tr = read_prv(tmp_path / "d.prv")
    markers = ",".join(f"'{m}'" for m in MARKERS)
    for table, type_ in TABLES.items():
        if table not in tables(db):
            assert not [v for v in tr.values(type_) if v]
            continue
        rows = sql(db, f"""SELECT s.value, count(*), sum(e."end" - e.start) FROM "{table}" e
            JOIN StringIds s ON s.id = e.nameId
            WHERE e.eventClass NOT IN (SELECT id FROM ENUM_NSYS_EVENT_CLASS
                                       WHERE name IN ({markers}))
            GROUP BY s.value""")
        assert _by_name(tr, type_) == (Counter({n: c for n, c, _ in rows}),
                                       Counter({n: d for n, _, d in rows}))
