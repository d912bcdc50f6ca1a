"""CUDA memory usage: running sums per process and device on the GPU's metrics row, checked on
a synthetic export with known allocations and on every real export that has the table."""

from __future__ import annotations

from collections import defaultdict

import pytest

import nsys2prv
from nsys2prv.paraver.registry import gpu_memory as mreg
from nsys2prv.testing import synth_gpu as sg

from conftest import CORPUS, corpus_files
from prvtools import read_prv, sql, tables, validate

TYPES = {mreg.GPU_MEMORY_ALLOCATED, mreg.GPU_MEMORY_ALLOCATION, mreg.GPU_MEMORY_FREE,
         *(mreg.kind_type(k) for k in range(8))}


def _metrics_rows(tr) -> dict[int, str]:
    labels = tr.row.split("LEVEL THREAD SIZE ")[1].splitlines()[1:]
    return {i + 1: lbl for i, lbl in enumerate(labels) if " metrics" in lbl}


def series(tr) -> dict[str, list[dict[int, int]]]:
    """metrics row label -> the memory pairs of each of its event lines, in time order."""
    rows = _metrics_rows(tr)
    out = defaultdict(list)
    for task, thread, time, pairs in tr.events:
        d = {t: v for t, v in pairs if t in TYPES}
        if d:
            assert thread in rows, "memory events only on metrics rows"
            out[rows[thread].split(" (")[0]].append(d)
    return dict(out)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu-memory")
    db = sg.memory_export(d / "mem.sqlite")
    result = nsys2prv.translate(db, d / "mem.prv")
    validate(d / "mem.prv")
    return result, read_prv(d / "mem.prv")


def test_synthetic_running_sums(synthetic):
    result, tr = synthetic
    MiB, T, DEV, PIN = 1 << 20, mreg.GPU_MEMORY_ALLOCATED, mreg.kind_type(2), mreg.kind_type(1)
    A, F = mreg.GPU_MEMORY_ALLOCATION, mreg.GPU_MEMORY_FREE
    assert series(tr) == {
        "GPU 0 metrics": [
            {T: MiB, DEV: MiB, A: MiB},
            {T: 5 * MiB + 65536, DEV: 5 * MiB, PIN: 65536, A: 4 * MiB + 65536},
            {T: 4 * MiB + 65536, DEV: 4 * MiB, F: MiB},
            {T: 6 * MiB + 65536, DEV: 6 * MiB, A: 2 * MiB},
            {T: 4 * MiB + 65536, DEV: 4 * MiB, F: 2 * MiB},  # size taken from its allocation
        ],
        "GPU 1 metrics": [{T: 8 * MiB, DEV: 8 * MiB, A: 8 * MiB}, {T: 0, DEV: 0, F: 8 * MiB}],
    }
    assert result.counts["cuda_memory_allocations"] == 5
    assert result.counts["cuda_memory_frees"] == 3
    assert result.warnings == {
        "CUDA memory usage: frees of memory allocated before the trace (not counted)": 1}


def test_synthetic_event_times(synthetic):
    _, tr = synthetic
    times = sorted({t for _, _, t, p in tr.events if dict(p).get(mreg.GPU_MEMORY_ALLOCATED)
                    is not None})
    start = [t for t, *_ in sg.MEMORY_EVENTS[:-1]]
    assert [t - times[0] for t in times] == sorted({(t - start[0]) * sg.US for t in start})


# -- real exports ------------------------------------------------------------------------------

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
FILES = [p for p in corpus_files() if TABLE in tables(p)
         and sql(p, f"SELECT count(*) FROM {TABLE}")[0][0]]


@pytest.mark.parametrize("db", FILES or [None], ids=[p.name for p in FILES] or ["no-corpus"])
def test_corpus_running_sums_match_sql(db, tmp_path):
    if db is None:
        pytest.skip(f"real-export corpus not found at {CORPUS} (or no {TABLE})")
    result = nsys2prv.translate(db, tmp_path / "m.prv")
    validate(tmp_path / "m.prv")
    tr = read_prv(tmp_path / "m.prv")
    delta = "CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END"
    # running sums after the last change at each time, per (process, device) and per kind
    total = sql(db, f"""
        SELECT deviceId, start, sum({delta}) OVER (PARTITION BY globalPid, deviceId
               ORDER BY start, rowid ROWS UNBOUNDED PRECEDING) AS s,
               row_number() OVER (PARTITION BY globalPid, deviceId, start
                                  ORDER BY rowid DESC) AS last
        FROM {TABLE} ORDER BY start""")
    expected = defaultdict(list)
    for dev, _, s, last in total:
        if last == 1:
            expected[f"GPU {dev} metrics"].append(s)
    got = {row: [d[mreg.GPU_MEMORY_ALLOCATED] for d in lines]
           for row, lines in series(tr).items()}
    assert got == dict(expected)
    by_kind = sql(db, f"""
        SELECT deviceId, memKind, sum({delta}) OVER (PARTITION BY globalPid, deviceId, memKind
               ORDER BY start, rowid ROWS UNBOUNDED PRECEDING),
               row_number() OVER (PARTITION BY globalPid, deviceId, memKind, start
                                  ORDER BY rowid DESC)
        FROM {TABLE} ORDER BY start""")
    expected_kind = defaultdict(list)
    for dev, kind_id, s, last in by_kind:
        if last == 1:
            expected_kind[(f"GPU {dev} metrics", kind_id)].append(s)
    got_kind = defaultdict(list)
    for row, lines in series(tr).items():
        for d in lines:
            for k in range(8):
                if mreg.kind_type(k) in d:
                    got_kind[(row, k)].append(d[mreg.kind_type(k)])
    assert dict(got_kind) == dict(expected_kind)
    alloc, free = sql(db, f"SELECT sum(CASE memoryOperationType WHEN 0 THEN bytes END), "
                          f"sum(CASE memoryOperationType WHEN 1 THEN bytes END) FROM {TABLE}")[0]
    assert sum(tr.values(mreg.GPU_MEMORY_ALLOCATION)) == alloc
    assert sum(tr.values(mreg.GPU_MEMORY_FREE)) == (free or 0)
    n_alloc = sql(db, f"SELECT count(*) FROM {TABLE} WHERE memoryOperationType = 0")[0][0]
    assert result.counts["cuda_memory_allocations"] == n_alloc
