"""OpenACC: Extrae's 66000000 family and the attributes, against SQL on every real export with
OpenACC records, and record by record on a synthetic export."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import CORPUS, corpus_cases, corpus_files, translate_case
from prvtools import read_prv, sql, tables, validate

import nsys2prv
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.registry import openacc as acc
from nsys2prv.testing import synth_metrics as sm
from nsys2prv.testing.synth import write_export

ACC_TABLES = ("CUPTI_ACTIVITY_KIND_OPENACC_DATA", "CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH",
              "CUPTI_ACTIVITY_KIND_OPENACC_OTHER")
# CUPTI event kind id -> (type, value): Extrae's events.h enum, written out independently
EXPECTED = {1: (66000000, 8), 2: (66000000, 9), 3: (66000000, 101), 4: (66000002, 7),
            5: (66000001, 1), 6: (66000001, 2), 7: (66000000, 14), 8: (66000000, 100),
            9: (66000000, 13), 10: (66000000, 12), 11: (66000000, 10), 12: (66000000, 11),
            13: (66000001, 3), 14: (66000001, 4), 15: (66000001, 5), 16: (66000001, 6)}
TYPES = (acc.OPENACC, acc.OPENACC_DATA, acc.OPENACC_LAUNCH)


def _has_openacc(db: Path) -> bool:
    t = tables(db)
    return any(x in t and sql(db, f"SELECT count(*) FROM {x}")[0][0] for x in ACC_TABLES)


FILES = [p for p in corpus_files() if _has_openacc(p)]


@pytest.fixture(scope="module", **corpus_cases(FILES))
def real(request, tmp_path_factory):
    db, result, out = translate_case(
        request, tmp_path_factory, f"no real export with OpenACC records (corpus at {CORPUS} "
        "absent or without CUPTI_ACTIVITY_KIND_OPENACC_* rows)")
    validate(out)
    return db, result, read_prv(out)


def _union(db: Path, columns: str, where: str = "1") -> list[tuple]:
    parts = [f"SELECT {columns} FROM {t} WHERE {where}" for t in ACC_TABLES if t in tables(db)]
    return sql(db, " UNION ALL ".join(parts))


def test_regions_per_kind_match_sql(real):
    db, result, tr = real
    want_n: Counter = Counter()
    want_d: Counter = Counter()
    for kind, n, d in _union(db, "eventKind, count(*), sum(end - start)", "1 GROUP BY 1"):
        want_n[EXPECTED[kind]] += n
        want_d[EXPECTED[kind]] += d
    got_n = Counter((t, v) for *_, pairs in tr.events for t, v in pairs if t in TYPES and v)
    assert got_n == want_n
    assert result.counts["openacc"] == sum(want_n.values())
    got_d = {k: d for k, d in tr.durations(*TYPES).items()}
    assert got_d == {k: d for k, d in want_d.items()}


def test_attributes_match_sql(real):
    db, _, tr = real
    assert sorted(v for v in tr.values(acc.OPENACC_BYTES)) == sorted(
        b for (b,) in _union_bytes(db))
    launch = "CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH"
    if launch in tables(db):
        g, w, v, n = sql(db, f"SELECT sum(numGangs), sum(numWorkers), sum(vectorLength), "
                             f"count(*) FROM {launch}")[0]
        assert sum(tr.values(acc.OPENACC_GANGS)) == (g or 0)
        assert sum(tr.values(acc.OPENACC_WORKERS)) == (w or 0)
        assert sum(tr.values(acc.OPENACC_VECTOR_LENGTH)) == (v or 0)
        names = tr.pcf_labels(acc.OPENACC_KERNEL)
        got = Counter(names[v] for v in tr.values(acc.OPENACC_KERNEL) if v)
        want = Counter({name: c for name, c in sql(
            db, f"SELECT s.value, count(*) FROM {launch} l JOIN StringIds s ON s.id = "
                "l.kernelName GROUP BY 1")})
        assert got == want
        # the OpenACC kernel name has the value of the same name as a CUDA kernel (63000006)
        kernels = tr.pcf_labels(reg.CUDA_KERNEL)
        assert all(kernels.get(v) == names[v] for v in set(tr.values(acc.OPENACC_KERNEL)) if v)
    lines = Counter(v for v in tr.values(acc.OPENACC_LINE) if v)
    want_lines: Counter = Counter()
    for line, c in _union(db, "lineNo, count(*)", "lineNo > 0 GROUP BY 1"):
        want_lines[line] += c
    assert lines == want_lines
    files = tr.pcf_labels(acc.OPENACC_SOURCE_FILE)
    got = Counter(files[v] for v in tr.values(acc.OPENACC_SOURCE_FILE) if v)
    want: Counter = Counter()
    for name, c in _union(db, "(SELECT value FROM StringIds WHERE id = srcFile), count(*)",
                          "srcFile IS NOT NULL GROUP BY 1"):
        want[name] += c
    assert got == want


def _union_bytes(db: Path) -> list[tuple]:
    t = "CUPTI_ACTIVITY_KIND_OPENACC_DATA"
    return sql(db, f"SELECT bytes FROM {t} WHERE bytes > 0") if t in tables(db) else []


def test_every_region_has_its_thread(real):
    db, _, tr = real
    threads = {g for (g,) in _union(db, "DISTINCT (globalTid >> 24) & 16777215")}
    labels = tr.row.split("LEVEL TASK SIZE ")[1].split("\n\n")[0].splitlines()[1:]
    tasks = {int(lbl.split()[1]) for lbl in labels}
    assert threads <= tasks


# -- synthetic ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth-openacc")
    spec, recs = sm.openacc_scenario()
    db = write_export(d / "acc.sqlite", spec, "3.0.0")
    sm.add_openacc(db, recs)
    result = nsys2prv.translate(db, d / "acc.prv")
    validate(d / "acc.prv")
    return spec, recs, result, read_prv(d / "acc.prv")


def test_synthetic_regions_exact(synthetic):
    spec, recs, result, tr = synthetic
    shift = result.alignment.shifts[0]
    kinds = {n: i for i, n in enumerate(sm.ACC_KINDS)}
    want = sorted((r.start + shift, *EXPECTED[kinds[r.kind]]) for r in recs)
    got = sorted((t, ty, v) for task, th, t, pairs in tr.events for ty, v in pairs
                 if ty in TYPES and v)
    assert got == want
    want_d: dict = defaultdict(int)
    for r in recs:
        want_d[EXPECTED[kinds[r.kind]]] += r.end - r.start
    assert tr.durations(*TYPES) == dict(want_d)
    # the compute construct holds the launch and a wait of the same family: they nest
    assert tr.durations(acc.OPENACC)[(acc.OPENACC, acc.ACC_COMPUTE_CONSTRUCT)] == 200_000


def test_synthetic_attributes(synthetic):
    spec, recs, result, tr = synthetic
    shift = result.alignment.shifts[0]
    by_time: dict[int, dict[int, int]] = defaultdict(dict)
    for task, th, t, pairs in tr.events:
        for ty, v in pairs:
            if v:
                by_time[t].setdefault(ty, v)
    launch = next(r for r in recs if r.kind == "ENQUEUE_LAUNCH")
    at = by_time[launch.start + shift]
    assert (at[acc.OPENACC_GANGS], at[acc.OPENACC_WORKERS], at[acc.OPENACC_VECTOR_LENGTH]) == \
        (80, 1, 128)
    assert at[acc.OPENACC_LINE] == 31
    assert tr.pcf_labels(acc.OPENACC_KERNEL)[at[acc.OPENACC_KERNEL]] == "main_31_gpu"
    assert tr.pcf_labels(reg.CUDA_KERNEL)[at[acc.OPENACC_KERNEL]] == "main_31_gpu"
    assert tr.pcf_labels(acc.OPENACC_SOURCE_FILE)[at[acc.OPENACC_SOURCE_FILE]] == "(runtime)"
    assert tr.pcf_labels(acc.OPENACC_DEVICE_TYPE)[at[acc.OPENACC_DEVICE_TYPE]] == \
        "acc_device_nvidia"
    create = next(r for r in recs if r.kind == "CREATE")
    at = by_time[create.start + shift]
    assert at[acc.OPENACC_BYTES] == 4096
    assert tr.pcf_labels(acc.OPENACC_VARIABLE)[at[acc.OPENACC_VARIABLE]] == "a"
    # bytes 0 (enter/exit data) are not written
    assert sorted(tr.values(acc.OPENACC_BYTES)) == [4096, 4096, 4096]
    # every name-valued attribute closes with its region: as many 0s as values
    for t in (acc.OPENACC_SOURCE_FILE, acc.OPENACC_FUNCTION, acc.OPENACC_LINE):
        vals = tr.values(t)
        assert vals.count(0) == len(vals) - vals.count(0) == len(recs)


def test_synthetic_states_and_stream(synthetic):
    spec, recs, result, tr = synthetic
    st = tr.state_time()
    cpu = st[(1, 1)]
    us = 1000
    assert cpu[reg.STATE_MEMORY_TRANSFER] == (120 - 70) * us + (540 - 510) * us
    assert cpu[reg.STATE_CONFIG_ACCEL] == (250 - 210) * us
    assert cpu[reg.STATE_SYNC] == (145 - 125 + 390 - 255 + 430 - 420) * us
    # enclosing constructs have no state of their own: the rest of the thread is Running
    assert cpu[reg.STATE_RUNNING] == sum(cpu.values()) - cpu[reg.STATE_MEMORY_TRANSFER] - \
        cpu[reg.STATE_CONFIG_ACCEL] - cpu[reg.STATE_SYNC] - cpu.get(reg.STATE_NOT_CREATED, 0)
    labels = tr.row.split("LEVEL THREAD SIZE ")[1].splitlines()[1:]
    stream13 = 1 + next(i for i, lbl in enumerate(labels) if lbl.startswith(
        "GPU 0 ctx 1 stream 13"))
    # upload, two waits, launch, implicit wait target stream 13, the download stream 99
    assert sorted(tr.values(acc.OPENACC_STREAM)) == [13] * 5 + [99]
    # Extrae's stream destination only where the stream has a row (not stream 99)
    assert tr.values(reg.CUDA_STREAM_DEST) == [stream13] * 5
    assert result.counts["openacc_with_stream"] == 5


def test_stream_destination_without_cuda_sync(tmp_path):
    """63000008 is registered for OpenACC too, so it is written (and listed in the .pcf)
    even when CUDA synchronization records are not translated."""
    spec, recs = sm.openacc_scenario()
    db = write_export(tmp_path / "acc.sqlite", spec, "3.0.0")
    sm.add_openacc(db, recs)
    nsys2prv.translate(db, tmp_path / "acc.prv", exclude=["cuda_sync"])
    validate(tmp_path / "acc.prv")
    tr = read_prv(tmp_path / "acc.prv")
    assert tr.values(reg.CUDA_STREAM_DEST) == [2] * 5
    assert f"{reg.CUDA_STREAM_DEST:<10} Stream ID destination" in tr.pcf
    assert len(tr.values(acc.OPENACC_STREAM)) == 6
