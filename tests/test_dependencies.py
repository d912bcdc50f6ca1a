"""Dependency lines (issue 26): stream waits, GPU -> host synchronisation, NCCL and MPI
collectives. Synthetic exports with a closed-form answer, and real exports checked line by
line against their tables read with sqlite3."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

import nsys2prv
from nsys2prv.paraver.kinds import cuda_deps
from nsys2prv.paraver.read import read_trace
from nsys2prv.paraver.registry import deps as dreg
from nsys2prv.testing import synth_deps as sd

from conftest import CORPUS
from prvtools import sql, validate

NO_ID = 4294967295
RECORDED = Path(__file__).resolve().parent / "data" / "recorded"
WAIT_TAGS = (dreg.TAG_STREAM_WAIT, dreg.TAG_STREAM_WAIT_INFERRED)
NOT_DRAWN = "without a line: "


def corpus_db(name: str) -> Path:
    db = CORPUS / name
    if not db.exists():
        pytest.skip(f"corpus export {name} not present (set NSYS2PRV_CORPUS)")
    return db


@dataclass
class Comms:
    comms: list[tuple]  # the communication records of a trace (15 ints each)


def without_event_records(db: Path) -> Path:
    """`db` without its CUDA_EVENT table (as exports that did not trace event records)."""
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT")
    con.commit()
    con.close()
    return db


def translate(dbs: list[Path], out: Path, check: bool = False):
    """Translate; the trace's communications (only they are parsed: real traces are large)."""
    result = nsys2prv.translate(dbs, out)
    if check:
        validate(out)
    with open(out, encoding="utf-8") as fh:
        comms = [tuple(int(x) for x in line.split(":")) for line in fh if line[0] == "3"]
    return result, Comms(comms)


def lines(tr, *tags: int) -> list[tuple]:
    return [c for c in tr.comms if c[14] in tags]


def row_labels(out: Path) -> dict[tuple[int, int], str]:
    rows = read_trace(out, frozenset()).rows
    return {(t, th): lab for t, th, lab in rows.select("task", "thread", "label").iter_rows()}


def drawn_and_not(counts: dict, what: str, drawn: tuple[str, ...]) -> tuple[int, int]:
    """(lines drawn, records counted as not drawn) of one dependency kind."""
    return (sum(counts.get(k, 0) for k in drawn),
            sum(v for k, v in counts.items() if k.startswith(f"{what} {NOT_DRAWN}")))


# -- synthetic: closed form ---------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["3.0.0", "3.17.1"])
def test_synthetic_streams_closed_form(tmp_path, layout):
    out = tmp_path / "s.prv"
    result, tr = translate([sd.streams_export(tmp_path / "s.sqlite", layout)], out, check=True)
    shift = result.alignment.shifts[0]
    label = row_labels(out)

    def name(task: int, thread: int) -> str:
        lab = label[(task, thread)]
        return "A" if lab.endswith(f"stream {sd.A} (GPU)") else (
            "B" if lab.endswith(f"stream {sd.B} (GPU)") else "host")

    got = sorted(sd.Line(name(c[3], c[4]), c[5] - shift, name(c[9], c[10]), c[11] - shift, c[14])
                 for c in lines(tr, *WAIT_TAGS, dreg.TAG_HOST_SYNC))
    assert got == sorted(sd.STREAM_LINES + sd.HOST_LINES)
    assert all(c[5] == c[6] and c[11] == c[12] and c[13] == 0 for c in lines(tr, *WAIT_TAGS))
    assert {k: v for k, v in result.counts.items() if k in sd.COUNTS} == sd.COUNTS
    # every record is either a line or counted with its reason
    assert sum(drawn_and_not(result.counts, "stream waits",
                             (cuda_deps.WAIT_LINES, cuda_deps.WAIT_LINES_INFERRED))) == 3
    assert sum(drawn_and_not(result.counts, "host syncs", (cuda_deps.SYNC_LINES,))) == 4


def test_synthetic_streams_without_the_event_table(tmp_path):
    """With no CUDA_EVENT table the traced record of the first wait is inferred, and the
    inference finds the same work (the record follows the launch of K1 on A)."""
    db = without_event_records(sd.streams_export(tmp_path / "s.sqlite"))
    result, tr = translate([db], tmp_path / "s.prv")
    shift = result.alignment.shifts[0]
    assert sorted((c[5] - shift, c[11] - shift) for c in lines(tr, *WAIT_TAGS)) == \
        sorted((x.send, x.recv) for x in sd.STREAM_LINES)
    assert {c[14] for c in lines(tr, *WAIT_TAGS)} == {dreg.TAG_STREAM_WAIT_INFERRED}
    assert result.counts[cuda_deps.WAIT_LINES_INFERRED] == 2


def test_synthetic_nccl_job_late_rank(tmp_path):
    """4 ranks, 3 all-reduces on one communicator, rank 2 late by 2 ms each time: per
    instance a line from rank 2's kernel start to the end of each other rank's kernel."""
    late, delay, steps, n = 2, 2_000 * sd.US, 3, 4
    paths = sd.nccl_job(tmp_path / "job", n, steps, late, delay)
    result, tr = translate(paths, tmp_path / "j.prv", check=True)
    task_rank = {t.number: t.rank for t in result.model.tasks}
    shift = {t.number: result.alignment.shifts[t.report] for t in result.model.tasks}
    got = sorted((task_rank[c[3]], c[5] - shift[c[3]], task_rank[c[9]], c[11] - shift[c[9]],
                  c[13]) for c in lines(tr, dreg.TAG_NCCL_COLLECTIVE))
    want = sorted((late, sd.nccl_start(k, late, late, delay), r, sd.nccl_end(k), 0)
                  for k in range(steps) for r in range(n) if r != late)
    assert got == want
    assert result.counts["NCCL operation instances"] == \
        result.counts["NCCL operation instances matched"] == steps
    assert result.counts["NCCL collective lines"] == steps * (n - 1)


def test_synthetic_nccl_job_missing_ranks_are_not_matched(tmp_path):
    """Two of four ranks: the payload says 4 ranks, so no instance is complete."""
    paths = sd.nccl_job(tmp_path / "job", 4, 2, 2, 1000)
    result, tr = translate(paths[:2], tmp_path / "j.prv")
    assert lines(tr, dreg.TAG_NCCL_COLLECTIVE) == []
    assert result.counts["NCCL operation instances not matched: missing participants (fewer "
                         "than the communicator's ranks)"] == 2


def test_synthetic_mpi_job_late_rank(tmp_path):
    late, delay, n = 1, 500 * sd.US, 3
    paths = sd.mpi_job(tmp_path / "job", n, late, delay)
    result, tr = translate(paths, tmp_path / "m.prv", check=True)
    task_rank = {t.number: t.rank for t in result.model.tasks}
    shift = {t.number: result.alignment.shifts[t.report] for t in result.model.tasks}
    got = sorted((task_rank[c[3]], c[5] - shift[c[3]], task_rank[c[9]], c[11] - shift[c[9]])
                 for c in lines(tr, dreg.TAG_MPI_COLLECTIVE))
    want = sorted((late, sd.mpi_call_times(k, late, late, delay)[0], r,
                   sd.mpi_call_times(k, r, late, delay)[1])
                  for k in range(len(sd.MPI_CALLS)) for r in range(n) if r != late)
    assert got == want
    assert result.counts["MPI collective instances matched"] == len(sd.MPI_CALLS)


# -- real exports: stream waits and host syncs against sqlite3 ---------------------------------

def _work(db: Path) -> list[tuple]:
    """Every kernel/memcpy/memset: (pid, stream, context, submitted, src, rowid, start, end),
    submitted = start of the CUDA call with its correlation id, else its own start."""
    out = []
    calls = {(g >> 24 & 0xFFFFFF, c): s for g, c, s in sql(
        db, "SELECT globalTid, correlationId, min(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            "GROUP BY globalTid >> 24, correlationId")}
    names = {t for (t,) in sql(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    for src, table in ((3, "CUPTI_ACTIVITY_KIND_KERNEL"), (4, "CUPTI_ACTIVITY_KIND_MEMCPY"),
                       (5, "CUPTI_ACTIVITY_KIND_MEMSET")):
        if table not in names:
            continue
        for rid, gp, stream, ctx, corr, s, e in sql(
                db, f"SELECT rowid, globalPid, streamId, contextId, correlationId, start, end "
                    f"FROM {table}"):
            pid = gp >> 24 & 0xFFFFFF
            out.append((pid, stream, ctx, calls.get((pid, corr), s), src, rid, s, max(s, e)))
    return out


class Sorted:
    """(key, ...) items sorted by key (then by source and rowid, the translator's ties)."""

    def __init__(self, items: list[tuple]) -> None:
        self.items = sorted(items)
        self.keys = [x[0] for x in self.items]

    def last_before(self, t: int) -> tuple | None:
        """The last item with key <= t."""
        i = bisect.bisect_right(self.keys, t)
        return self.items[i - 1] if i else None

    def first_after(self, t: int) -> tuple | None:
        """The first item with key >= t."""
        i = bisect.bisect_left(self.keys, t)
        return self.items[i] if i < len(self.items) else None


def sorted_groups(groups: dict) -> defaultdict:
    return defaultdict(lambda: Sorted([]), {k: Sorted(v) for k, v in groups.items()})


def expected_stream_waits(db: Path) -> tuple[list[tuple[int, int]], int]:
    """(awaited work end, first start after the wait) of the stream waits whose record is
    traced, from the tables; and the number of stream wait rows."""
    by_stream = defaultdict(list)
    for pid, stream, ctx, sub, src, rid, s, e in _work(db):
        by_stream[(pid, ctx, stream)].append((sub, src, rid, s, e))
    by_stream = sorted_groups(by_stream)
    records = defaultdict(list)
    for gp, stream, ctx, event, t in sql(
            db, "SELECT e.globalPid, e.streamId, e.contextId, e.eventId, r.start FROM "
                "CUPTI_ACTIVITY_KIND_CUDA_EVENT e JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
                "r.correlationId = e.correlationId AND r.globalTid >> 24 = e.globalPid >> 24"):
        records[(gp >> 24 & 0xFFFFFF, event)].append((t, stream, ctx))
    records = sorted_groups(records)
    waits = sql(db, f"SELECT globalPid, streamId, contextId, eventId, start FROM "
                    f"CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE streamId NOT IN (-1, {NO_ID}) "
                    f"AND eventId NOT IN (-1, 0, {NO_ID})")
    out = []
    for gp, stream, ctx, event, t in waits:
        pid = gp >> 24 & 0xFFFFFF
        rec = records[(pid, event)].last_before(t)
        if rec is None:
            continue
        src_work = by_stream[(pid, rec[2], rec[1])].last_before(rec[0])
        dst_work = by_stream[(pid, ctx, stream)].first_after(t)
        if src_work and dst_work and rec[1] != stream:
            out.append((src_work[4], dst_work[3]))
    return sorted(out), len(waits)


@pytest.mark.parametrize("name", ["exported/dlprof_nsys_profile.nsys2022.4.sqlite",
                                  "sqlite/dlprof_nsys_profile.sqlite"])
def test_traced_stream_waits_against_sqlite(tmp_path, name):
    """dlprof: 40 stream waits, records traced (CUDA_EVENT): 12 lines, each from the end of
    the last work submitted to the record's stream before the record to the start of the
    first work submitted to the waiting stream after the wait, as the tables say; 14 waits
    on streams without work and 14 records on streams without work before them."""
    db = corpus_db(name)
    result, tr = translate([db], tmp_path / "d.prv")
    shift = result.alignment.shifts[0]
    want, n_waits = expected_stream_waits(db)
    got = sorted((c[5] - shift, c[11] - shift) for c in lines(tr, dreg.TAG_STREAM_WAIT))
    assert got == want and len(got) == 12
    assert result.counts[cuda_deps.WAITS] == n_waits == 40
    assert drawn_and_not(result.counts, "stream waits",
                         (cuda_deps.WAIT_LINES, cuda_deps.WAIT_LINES_INFERRED)) == (12, 28)
    assert lines(tr, dreg.TAG_STREAM_WAIT_INFERRED) == []


def test_inferred_records_agree_with_the_traced_ones(tmp_path):
    """dlprof without its CUDA_EVENT table: of the 12 waits drawn from traced records, the
    inference (last record call of the thread, last work it submitted) draws 10 the same;
    it draws 14 more (records on streams that had no work, attributed to the work the thread
    had just launched), 24 in all."""
    import shutil

    db = tmp_path / "noev.sqlite"
    shutil.copy(corpus_db("exported/dlprof_nsys_profile.nsys2022.4.sqlite"), db)
    db.chmod(0o644)
    result, tr = translate([without_event_records(db)], tmp_path / "n.prv")
    shift = result.alignment.shifts[0]
    traced, _ = expected_stream_waits(corpus_db("exported/dlprof_nsys_profile.nsys2022.4.sqlite"))
    got = Counter((c[5] - shift, c[11] - shift) for c in lines(tr, dreg.TAG_STREAM_WAIT_INFERRED))
    assert sum((Counter(traced) & got).values()) == 10
    assert result.counts[cuda_deps.WAIT_LINES_INFERRED] == 24


def expected_host_syncs(db: Path) -> tuple[list[tuple[int, int]], int]:
    """(awaited work end, sync end) of every stream and context sync, from the tables: the
    last work of the stream / of any stream of the context ending by the sync's end."""
    by_stream, by_ctx = defaultdict(list), defaultdict(list)
    for pid, stream, ctx, sub, src, rid, s, e in _work(db):
        by_stream[(pid, ctx, stream)].append((e, src, rid))
        by_ctx[(pid, ctx)].append((e, src, rid))
    by_stream, by_ctx = sorted_groups(by_stream), sorted_groups(by_ctx)
    out = []
    syncs = sql(db, f"SELECT globalPid, streamId, contextId, end FROM "
                    f"CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE eventId IN (-1, 0, {NO_ID})")
    for gp, stream, ctx, end in syncs:
        pid = gp >> 24 & 0xFFFFFF
        items = by_ctx[(pid, ctx)] if stream in (-1, NO_ID) else by_stream[(pid, ctx, stream)]
        w = items.last_before(end)
        if w:
            out.append((w[0], end))
    return sorted(out), len(syncs)


@pytest.mark.parametrize("name", ["exported/cori_omp_run1_rank0.nsys2022.4-trim.sqlite",
                                  "sqlite/ncar_miniweather_baseline.sqlite",
                                  "sqlite/rodinia_gaussian_report2.sqlite"])
def test_host_syncs_against_sqlite(tmp_path, name):
    """Stream and context syncs: one line per record, from the end of the last work of the
    stream (any stream of the context) ending by the end of the blocking, to that end."""
    db = corpus_db(name)
    result, tr = translate([db], tmp_path / "h.prv")
    shift = result.alignment.shifts[0]
    want, n = expected_host_syncs(db)
    label = row_labels(tmp_path / "h.prv")
    host = [c for c in lines(tr, dreg.TAG_HOST_SYNC) if "stream" not in label[(c[9], c[10])]]
    assert len(host) == len(lines(tr, dreg.TAG_HOST_SYNC))  # every line ends on a thread
    n_event = sql(db, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE "
                      f"eventId NOT IN (-1, 0, {NO_ID}) AND streamId IN (-1, {NO_ID})")[0][0]
    got = Counter((c[5] - shift, c[11] - shift) for c in host)
    assert sum((got & Counter(want)).values()) == len(want) == n  # every stream/context sync
    drawn, not_drawn = drawn_and_not(result.counts, "host syncs", (cuda_deps.SYNC_LINES,))
    assert result.counts[cuda_deps.SYNCS] == n + n_event == drawn + not_drawn


@pytest.mark.parametrize("name,waits,inferred,syncs", [
    ("sqlite/nsysai_mfu2gpu_before.sqlite", 200, 0, 33),
    ("sqlite/nsysai_mfu2gpu_after.sqlite", 180, 0, 30),
    ("exported/darknet_keras_2019_6.nsys2022.4.sqlite", 940, 881, 598),
    ("exported/cori_omp_run1_rank0.nsys2022.4-trim.sqlite", 0, 0, 698),
    ("sqlite/qcu_runtime_only_report11.sqlite", 2, 0, 0),  # no GPU work exported at all
])
def test_every_sync_record_is_drawn_or_counted(tmp_path, name, waits, inferred, syncs):
    """Counts equal the SYNCHRONIZATION table: every stream wait (a stream and an event) and
    every host sync gets a line or is counted with its reason. nsysai's waits are all on
    streams without work or on the recording stream itself (none drawn); its 133/124 event
    queries run on a thread that records no event (no record found)."""
    db = corpus_db(name)
    result, tr = translate([db], tmp_path / "c.prv")
    n_wait, n_all = sql(db, f"SELECT sum(streamId NOT IN (-1, {NO_ID}) AND eventId NOT IN "
                            f"(-1, 0, {NO_ID})), count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")[0]
    assert n_wait == waits
    c = result.counts
    assert c.get(cuda_deps.WAITS, 0) == waits
    assert sum(drawn_and_not(c, "stream waits", (cuda_deps.WAIT_LINES,
                                                 cuda_deps.WAIT_LINES_INFERRED))) == waits
    assert c.get(cuda_deps.WAIT_LINES_INFERRED, 0) == len(
        lines(tr, dreg.TAG_STREAM_WAIT_INFERRED)) == inferred
    assert c[cuda_deps.SYNCS] == n_all - n_wait
    assert sum(drawn_and_not(c, "host syncs", (cuda_deps.SYNC_LINES,))) == n_all - n_wait
    assert c.get(cuda_deps.SYNC_LINES, 0) == len(lines(tr, dreg.TAG_HOST_SYNC)) == syncs
    for x in lines(tr, *WAIT_TAGS, dreg.TAG_HOST_SYNC):
        assert x[5] <= x[11]  # never back in time


# -- real exports: collectives ---------------------------------------------------------------

def test_nccl_pairs_of_nsysai_against_sqlite(tmp_path):
    """nsysai_mfu2gpu_before: two processes, 33 SendRecv kernels each, no payload: the k-th
    kernels pair up; a line from the one that started last to the other's end."""
    db = corpus_db("sqlite/nsysai_mfu2gpu_before.sqlite")
    result, tr = translate([db], tmp_path / "n.prv")
    shift = result.alignment.shifts[0]
    per_pid = defaultdict(list)
    for gp, s, e in sql(db, "SELECT k.globalPid, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL "
                            "k JOIN StringIds n ON n.id = k.shortName WHERE n.value LIKE 'nccl%' "
                            "ORDER BY k.start"):
        per_pid[gp].append((s, e))
    a, b = per_pid.values()
    assert len(a) == len(b) == 33
    want = sorted((max(x[0], y[0]), (y if x[0] >= y[0] else x)[1]) for x, y in zip(a, b))
    got = sorted((c[5] - shift, c[11] - shift) for c in lines(tr, dreg.TAG_NCCL_COLLECTIVE))
    assert got == want
    assert result.counts["NCCL operation instances matched"] == 33


def test_mpi_collectives_of_the_recorded_ranks(tmp_path):
    """The recorded 4-rank run (native MPI tables): 16 blocking collectives per rank make 16
    instances; per instance a line from the rank whose call started last (on the aligned
    clocks) to each rank whose call had not ended by then, as the tables say."""
    dbs = sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite"))
    result, tr = translate(dbs, tmp_path / "m.prv")
    shifts = result.alignment.shifts
    per_rank = []
    for i, db in enumerate(dbs):
        per_rank.append([(s + shifts[i], e + shifts[i], i) for s, e in sql(
            db, "SELECT c.start, c.end FROM MPI_COLLECTIVES_EVENTS c ORDER BY c.start")])
    assert {len(x) for x in per_rank} == {16}
    want = []
    for inst in zip(*per_rank):
        last = max(inst, key=lambda x: (x[0], -x[2]))
        want += [(last[2], last[0], x[2], x[1]) for x in inst if x is not last and x[1] >= last[0]]
    report = {t.number: t.report for t in result.model.tasks}
    got = sorted((report[c[3]], c[5], report[c[9]], c[11]) for c in lines(tr, dreg.TAG_MPI_COLLECTIVE))
    assert got == sorted(want) and len(got) == result.counts["MPI collective lines"] == 37
    assert result.counts["MPI collective instances matched"] == 16


def test_mpi_collectives_of_the_launcher_nvtx_form(tmp_path):
    """The NVTX form has no communicator: the 4 ranks of one report are matched as
    MPI_COMM_WORLD; every rank calls 16 collectives."""
    result, tr = translate([RECORDED / "mpi_nvtx_launcher.nsys2022.4.sqlite"],
                           tmp_path / "l.prv")
    assert result.counts["MPI collective calls (blocking)"] == 64
    assert result.counts["MPI collective instances matched"] == 16
    assert len(lines(tr, dreg.TAG_MPI_COLLECTIVE)) == result.counts["MPI collective lines"] \
        == 16 * 3 - result.counts["MPI collective: participants that ended before the last "
                                  "one arrived (no line)"]


def test_alcf_two_of_eight_ranks_leave_the_nccl_instance_unmatched(tmp_path):
    dbs = [corpus_db(f"exported2023/alcf_seqpar_rank{r}.nsys2023.4.sqlite") for r in (0, 4)]
    result, tr = translate(dbs, tmp_path / "a.prv")
    assert lines(tr, dreg.TAG_NCCL_COLLECTIVE) == []
    assert result.counts["NCCL operation instances not matched: missing participants (fewer "
                         "than the communicator's ranks)"] == 1
