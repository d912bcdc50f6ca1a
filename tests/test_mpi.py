"""MPI: calls in Extrae's encoding, MPI states, sync points and messages between ranks.

Real data: a 4-rank Open MPI run recorded with nsys 2023.4 (native MPI tables) and 2022.4 (MPI
as NVTX ranges), see tests/data/recorded/README.md. Scrubbed copies of the 2023.4 per-rank
reports and of the 2022.4 launcher report are fixtures in tests/data/recorded (made with
`python tools/scrub.py`, see the README there), so these tests always run; the
other recordings (a folder named by $NSYS2PRV_RECORDINGS, with 2022.4/ and 2023.4/ in it)
and the corpus are used when present. Expected numbers come from SQL.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest

import nsys2prv
from nsys2prv.paraver.kinds import mpi as kind
from nsys2prv.paraver.registry import deps as dreg
from nsys2prv.paraver.registry import mpi as mreg
from nsys2prv.pipeline.prepare import PrepareOptions, prepare
from nsys2prv.report.report import Report
from nsys2prv.testing import synth
from scrub import scrub
from nsys2prv.testing.synth_mpi import WORLD_HANDLE, Communicator, MpiCall, add_mpi, world

from conftest import CORPUS
from prvtools import read_prv, sql, validate

DATA = Path(__file__).resolve().parent / "data" / "recorded"
FIXTURE_RANKS = [DATA / f"mpi_nvtx_rank{r}.nsys2023.4.sqlite" for r in range(4)]
FIXTURE_LAUNCHER_22 = DATA / "mpi_nvtx_launcher.nsys2022.4.sqlite"
# the unscrubbed recordings, where a developer has them (not shipped: too large)
RECORDINGS = Path(os.environ["NSYS2PRV_RECORDINGS"]) if os.environ.get("NSYS2PRV_RECORDINGS") \
    else None
NATIVE = {"MPI_P2P_EVENTS", "MPI_COLLECTIVES_EVENTS", "MPI_START_WAIT_EVENTS",
          "MPI_OTHER_EVENTS"}
SENDS = ("MPI_Send", "MPI_Isend", "MPI_Bsend", "MPI_Ssend", "MPI_Rsend")


def messages(tr) -> list[tuple]:
    """The point-to-point messages of a trace (not the collective dependency lines)."""
    return [c for c in tr.comms if c[14] != dreg.TAG_MPI_COLLECTIVE]


def recording(*parts: str) -> Path:
    """A file of the unscrubbed recordings; skips the test where they are not present."""
    if RECORDINGS is None:
        pytest.skip("needs the unscrubbed MPI recordings: set NSYS2PRV_RECORDINGS "
                    "(tests/data/recorded/README.md)")
    path = RECORDINGS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"recorded export not present: {path}")
    return path


# -- SQL expectations ---------------------------------------------------------------------------

def _tables(db: Path) -> set[str]:
    return {r[0] for r in sql(db, "SELECT name FROM sqlite_master WHERE type='table'")}


def sql_calls(db: Path) -> Counter:
    """(pid, function) -> calls: one per row of the native tables, one per distinct
    (thread, start, end, function) of MPI_START_WAIT_EVENTS (a row per request)."""
    out: Counter = Counter()
    present = _tables(db) & NATIVE
    for t in present:
        rows = sql(db, f"SELECT (e.globalTid >> 24) & 16777215, s.value, count(*) FROM "
                       f"(SELECT DISTINCT globalTid, start, end, textId FROM {t}) e "
                       f"JOIN StringIds s ON s.id = e.textId GROUP BY 1, 2"
                   if t == "MPI_START_WAIT_EVENTS" else
                   f"SELECT (e.globalTid >> 24) & 16777215, s.value, count(*) FROM {t} e "
                   f"JOIN StringIds s ON s.id = e.textId GROUP BY 1, 2")
        for pid, name, n in rows:
            out[(pid, name)] += n
    if not present:
        for pid, name, n in sql(db, """
                SELECT (e.globalTid >> 24) & 16777215, coalesce(s.value, e.text), count(*)
                FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                WHERE e.eventType = 59 AND EXISTS (
                    SELECT 1 FROM NVTX_EVENTS d LEFT JOIN StringIds ds ON ds.id = d.textId
                    WHERE d.eventType = 75 AND d.domainId = e.domainId
                      AND (d.globalTid >> 24) = (e.globalTid >> 24)
                      AND coalesce(ds.value, d.text) = 'MPI')
                GROUP BY 1, 2"""):
            out[(pid, name)] += n
    return out


def sql_sends(db: Path) -> list[tuple[int, int, int, int]]:
    """(rank, remoteRank, tag, size) of every send in a native export."""
    names = ",".join(f"'{n}'" for n in SENDS)
    return sql(db, f"""SELECT r.rank, p.remoteRank, p.tag, p.size FROM MPI_P2P_EVENTS p
                       JOIN StringIds s ON s.id = p.textId
                       JOIN MPI_RANKS r ON (r.globalTid >> 24) = (p.globalTid >> 24)
                       WHERE s.value IN ({names})""")


def sql_duration(db: Path, names: tuple[str, ...]) -> int:
    """Total time inside the given functions (a wait/test once per call)."""
    inlist = ",".join(f"'{n}'" for n in names)
    total = 0
    for t in _tables(db) & NATIVE:
        src = f"(SELECT DISTINCT globalTid, start, end, textId FROM {t})"
        total += sql(db, f"SELECT coalesce(sum(e.end - e.start), 0) FROM {src} e "
                         f"JOIN StringIds s ON s.id = e.textId WHERE s.value IN ({inlist})")[0][0]
    return total


def task_of_pid(result) -> dict[tuple[int, int], int]:
    return {(t.report, t.pid): t.number for t in result.model.tasks}


def trace_calls(tr) -> Counter:
    """(task, label) -> number of MPI call starts in the trace."""
    out: Counter = Counter()
    for ty in mreg.CALL_TYPES:
        labels = tr.pcf_labels(ty)
        for task, _, _, pairs in tr.events:
            for t, v in pairs:
                if t == ty and v:
                    out[(task, labels[v])] += 1
    return out


def expected_calls(dbs: list[Path], result) -> Counter:
    tasks = task_of_pid(result)
    out: Counter = Counter()
    for i, db in enumerate(dbs):
        for (pid, name), n in sql_calls(db).items():
            out[(tasks[(i, pid)], mreg.canonical_name(name))] += n
    return out


# -- the recorded 4-rank run, native tables (fixtures) ----------------------------------------

@pytest.fixture(scope="module")
def four(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi") / "four.prv"
    result = nsys2prv.translate(FIXTURE_RANKS, out)
    return result, out, read_prv(out)


def test_four_ranks_validate(four):
    validate(four[1])


def test_tasks_in_rank_order(four):
    result, _, _ = four
    assert [t.rank for t in result.model.tasks] == [0, 1, 2, 3]
    ranks = [sql(db, "SELECT rank FROM MPI_RANKS")[0][0] for db in FIXTURE_RANKS]
    assert [result.model.tasks[r].report for r in ranks] == [0, 1, 2, 3]


def test_call_counts_per_function_match_sql(four):
    result, _, tr = four
    want = expected_calls(FIXTURE_RANKS, result)
    assert trace_calls(tr) == want
    # the recording: 5 iterations of Send, Recv, 2 Isend, 2 Irecv, Waitall, Allreduce, Bcast,
    # Barrier, plus MPI_Init, a final Barrier and MPI_Finalize, on every rank
    assert want[(1, "MPI_Waitall")] == 5 and want[(1, "MPI_Barrier")] == 6
    assert sum(want.values()) == result.counts["mpi_calls"] == 4 * 53


def test_calls_use_extrae_types_and_values(four):
    _, _, tr = four
    for ty in mreg.CALL_TYPES:
        for v, label in tr.pcf_labels(ty).items():
            if v:
                assert v == mreg.EXTRAE_MPI_VALUES.get(label, v)
    values = Counter((t, v) for *_, pairs in tr.events for t, v in pairs
                     if t in mreg.CALL_TYPES and v)
    assert values[(mreg.MPI_POINT_TO_POINT, 1)] == 20  # MPI_Send
    assert values[(mreg.MPI_POINT_TO_POINT, 6)] == 20  # MPI_Waitall
    assert values[(mreg.MPI_COLLECTIVE, 10)] == 20  # MPI_Allreduce
    assert values[(mreg.MPI_OTHER, 31)] == 4 and values[(mreg.MPI_OTHER, 32)] == 4


def test_collective_payloads_match_sql(four):
    result, _, tr = four
    tasks = task_of_pid(result)
    want_send, want_recv, want_root = Counter(), Counter(), Counter()
    for i, db in enumerate(FIXTURE_RANKS):
        for pid, size, recv, root, rank in sql(
                db, "SELECT (c.globalTid >> 24) & 16777215, c.size, c.recvSize, c.rootRank, "
                    "r.rank FROM MPI_COLLECTIVES_EVENTS c JOIN MPI_RANKS r"):
            task = tasks[(i, pid)]
            if size is not None:
                want_send[(task, size)] += 1
            if recv is not None:
                want_recv[(task, recv)] += 1
            if root is not None and root == rank:  # MPI_COMM_WORLD: local rank = rank
                want_root[task] += 1
    got = defaultdict(Counter)
    for task, _, _, pairs in tr.events:
        for t, v in pairs:
            got[t][(task, v)] += 1
    assert got[mreg.MPI_COLL_SEND_SIZE] == want_send
    assert got[mreg.MPI_COLL_RECV_SIZE] == want_recv
    assert Counter({task: n for (task, v), n in got[mreg.MPI_COLL_IS_ROOT].items()}) == want_root
    assert tr.pcf_labels(mreg.MPI_COLL_COMMUNICATOR)[1] == "MPI_COMM_WORLD"
    assert set(v for (_, v) in got[mreg.MPI_COLL_COMMUNICATOR]) == {1}


def test_messages_match_the_sends_in_sql(four):
    result, _, tr = four
    sends = [s for db in FIXTURE_RANKS for s in sql_sends(db)]
    msgs = messages(tr)
    assert len(msgs) == len(sends) == 60
    assert sum(c[-2] for c in msgs) == sum(s[3] for s in sends) == 15360
    assert result.counts["MPI messages"] == 60
    assert result.counts["MPI message bytes"] == 15360
    assert not [k for k in result.counts if "not drawn" in k or "without" in k]
    # 3:cpu:appl:task:thread:lsend:psend:rcpu:rappl:rtask:rthread:lrecv:precv:size:tag
    rank_of_task = {t.number: t.rank for t in result.model.tasks}
    got = Counter((rank_of_task[c[3]], rank_of_task[c[9]], c[14], c[13]) for c in msgs)
    assert got == Counter(sends)
    for c in msgs:
        assert c[5] <= c[6] and c[11] <= c[12]  # logical <= physical
        assert c[4] == 1 and c[10] == 1  # main threads


def test_immediate_receives_end_at_their_waitall(four):
    """Physical receive of an MPI_Irecv = end of the first MPI_Waitall after it."""
    result, _, tr = four
    task = {t.number: t for t in result.model.tasks}
    halo = [c for c in tr.comms if c[14] == 200]
    assert len(halo) == 40
    for c in halo:
        t = task[c[9]]
        shift = result.alignment.shifts[t.report]
        waits = sql(FIXTURE_RANKS[t.report],
                    "SELECT DISTINCT w.start, w.end FROM MPI_START_WAIT_EVENTS w JOIN StringIds "
                    "s ON s.id = w.textId WHERE s.value = 'MPI_Waitall' ORDER BY w.start")
        irecv_start = c[11] - shift
        first = next((w for w in waits if w[0] >= irecv_start))
        assert c[12] - shift == first[1]


def test_mpi_states_match_call_durations(four):
    result, _, tr = four
    tasks = task_of_pid(result)
    per_task = tr.state_time()
    for i, db in enumerate(FIXTURE_RANKS):
        (pid,) = {p for (p, _) in sql_calls(db)}
        st = per_task[(tasks[(i, pid)], 1)]
        assert st[mreg.STATE_BLOCKING_SEND] == sql_duration(db, ("MPI_Send",))
        assert st[mreg.STATE_WAITING_MESSAGE] == sql_duration(db, ("MPI_Recv",))
        assert st[mreg.STATE_IMMEDIATE_SEND] == sql_duration(db, ("MPI_Isend",))
        assert st[mreg.STATE_IMMEDIATE_RECEIVE] == sql_duration(db, ("MPI_Irecv",))
        assert st[mreg.STATE_WAIT_ALL] == sql_duration(db, ("MPI_Waitall",))
        assert st[mreg.STATE_GROUP_COMMUNICATION] == sql_duration(
            db, ("MPI_Allreduce", "MPI_Bcast", "MPI_Barrier"))
        assert st[15] == sql_duration(db, ("MPI_Init", "MPI_Finalize"))


def test_mpi_init_end_is_the_sync_point(four, tmp_path):
    result, _, _ = four
    assert "MPI_Init" in result.alignment.method
    for i, db in enumerate(FIXTURE_RANKS[:2]):
        meta = prepare(Report(db), tmp_path / f"p{i}", PrepareOptions(kinds=["mpi"]))
        want = sql(db, "SELECT min(o.end) FROM MPI_OTHER_EVENTS o JOIN StringIds s "
                       "ON s.id = o.textId WHERE s.value IN ('MPI_Init', 'MPI_Init_thread')")
        assert meta["extra"]["sync_points"]["MPI_Init"] == want[0][0]


def test_two_of_four_ranks_count_what_they_cannot_draw(tmp_path):
    dbs = FIXTURE_RANKS[:2]
    result = nsys2prv.translate(dbs, tmp_path / "two.prv")
    validate(tmp_path / "two.prv")
    sends = [s for db in dbs for s in sql_sends(db)]
    inside = [s for s in sends if s[1] in (0, 1)]
    tr = read_prv(tmp_path / "two.prv")
    assert len(messages(tr)) == result.counts["MPI messages"] == len(inside) == 15
    assert result.counts["MPI messages to a rank not in the inputs (not drawn)"] == \
        len(sends) - len(inside) == 15
    recv_outside = sum(sql(db, "SELECT count(*) FROM MPI_P2P_EVENTS p JOIN StringIds s ON "
                               "s.id = p.textId WHERE s.value IN ('MPI_Recv', 'MPI_Irecv') "
                               "AND p.remoteRank NOT IN (0, 1)")[0][0] for db in dbs)
    assert result.counts["MPI messages from a rank not in the inputs (not drawn)"] == \
        recv_outside == 15


def test_only_mpi_gives_the_main_threads(tmp_path):
    result = nsys2prv.translate(FIXTURE_RANKS, tmp_path / "only.prv", only=["mpi"])
    validate(tmp_path / "only.prv")
    assert [len(t.rows) for t in result.model.tasks] == [1, 1, 1, 1]
    assert len(messages(read_prv(tmp_path / "only.prv"))) == 60


# -- MPI as NVTX ranges (nsys 2022.4) ---------------------------------------------------------

def _check_nvtx_form(dbs: list[Path], out: Path) -> None:
    result = nsys2prv.translate(dbs, out)
    validate(out)
    tr = read_prv(out)
    assert trace_calls(tr) == expected_calls(dbs, result)
    assert messages(tr) == []  # no payload in the NVTX form: no messages
    ranked = [t.rank for t in result.model.tasks if t.rank is not None]
    assert ranked == sorted(ranked) and len(ranked) == 4
    assert [t.rank for t in result.model.tasks[:4]] == [0, 1, 2, 3]
    assert result.counts["MPI sends/receives without message data (NVTX MPI domain)"] == \
        sum(n for (_, name), n in sum((sql_calls(d) for d in dbs), Counter()).items()
            if name in ("MPI_Send", "MPI_Recv", "MPI_Isend", "MPI_Irecv"))


def test_launcher_2022_nvtx_form(tmp_path):
    _check_nvtx_form([FIXTURE_LAUNCHER_22], tmp_path / "l22.prv")
    meta = prepare(Report(FIXTURE_LAUNCHER_22), tmp_path / "p", PrepareOptions(kinds=["mpi"]))
    inits = sql(FIXTURE_LAUNCHER_22, "SELECT min(e.end) FROM NVTX_EVENTS e JOIN StringIds s "
                                     "ON s.id = e.textId WHERE s.value = 'MPI_Init'")
    assert meta["extra"]["sync_points"]["MPI_Init"] == inits[0][0]


def test_per_rank_2022_nvtx_form(tmp_path):
    dbs = [recording("2022.4", f"mpi_nvtx_rank{r}.sqlite") for r in range(4)]
    _check_nvtx_form(dbs, tmp_path / "v22.prv")


def test_launcher_2023_four_tasks_in_rank_order(tmp_path):
    db = recording("2023.4", "mpi_nvtx_launcher.sqlite")
    result = nsys2prv.translate([db], tmp_path / "l23.prv")
    validate(tmp_path / "l23.prv")
    assert [t.rank for t in result.model.tasks[:4]] == [0, 1, 2, 3]
    assert all(t.rank is None for t in result.model.tasks[4:])
    tr = read_prv(tmp_path / "l23.prv")
    assert trace_calls(tr) == expected_calls([db], result)
    sends = sql_sends(db)
    rank_of_task = {t.number: t.rank for t in result.model.tasks}
    assert Counter((rank_of_task[c[3]], rank_of_task[c[9]], c[14], c[13])
                   for c in messages(tr)) == Counter(sends)
    assert len(sends) == 60


@pytest.mark.parametrize("name", ["sqlite/pipit_saxpy_mpi_cuda_rank0.sqlite",
                                  "exported/cumat_mpi_4gpu.nsys2022.4.sqlite"])
def test_corpus_mpi_as_nvtx(name, tmp_path):
    db = CORPUS / name
    if not db.exists():
        pytest.skip(f"corpus export {db} not present")
    result = nsys2prv.translate([db], tmp_path / "c.prv", only=["mpi"])
    validate(tmp_path / "c.prv")
    tr = read_prv(tmp_path / "c.prv")
    assert trace_calls(tr) == expected_calls([db], result)
    assert sum(trace_calls(tr).values()) == result.counts["mpi_calls"] > 0


# -- synthetic edge cases -----------------------------------------------------------------------

def _rank_export(path: Path, rank: int, calls, comms, pid: int, layout: str = "3.17.1"
                 ) -> Path:
    spec = synth.Spec(env={"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "4"},
                      processes=[(pid, "app")], threads=[(pid, pid, "main")])
    synth.write_export(path, spec, layout)
    return add_mpi(path, calls, comms, ranks=[(pid, pid, rank)])


def test_sub_communicator_peers_are_world_ranks(tmp_path):
    """A communicator of world ranks {1, 3}: local rank 1 is world rank 3."""
    sub = 0x7000
    members = "[1, 3]"
    r1 = _rank_export(tmp_path / "r1.sqlite", 1, [
        MpiCall(100, 200, 11, 11, "MPI_Init"),
        MpiCall(1_000, 1_500, 11, 11, "MPI_Send", comm=sub, tag=7, remote=1, size=64),
        MpiCall(2_000, 2_100, 11, 11, "MPI_Isend", comm=sub, tag=8, remote=1, size=32,
                requests=(0xA,)),
        MpiCall(2_200, 2_300, 11, 11, "MPI_Test", requests=(0xA,)),
        MpiCall(2_400, 2_500, 11, 11, "MPI_Wait", requests=(0xA,)),
        MpiCall(3_000, 3_200, 11, 11, "MPI_Bcast", comm=sub, root=0, size=4),
        MpiCall(3_500, 3_600, 11, 11, "MPI_Sendrecv", comm=sub, tag=5, remote=1, size=8),
    ], [world(1, 4), Communicator(1, sub, 2, 0, 500, WORLD_HANDLE, group_root=1,
                                  group_root_uid=42, members=members)], 11)
    r3 = _rank_export(tmp_path / "r3.sqlite", 3, [
        MpiCall(100, 220, 33, 33, "MPI_Init_thread"),
        MpiCall(900, 1_600, 33, 33, "MPI_Recv", comm=sub, tag=7, remote=0, size=64),
        MpiCall(1_900, 1_950, 33, 33, "MPI_Irecv", comm=sub, tag=8, remote=0, size=32,
                requests=(0xB,)),
        MpiCall(2_000, 2_010, 33, 33, "MPI_Test", requests=(0xB,)),  # not yet complete
        MpiCall(2_050, 2_700, 33, 33, "MPI_Waitall", requests=(0xB, 0xC)),
        MpiCall(2_800, 2_900, 33, 33, "MPI_Recv", comm=sub, tag=9, remote=-1, size=8),
        MpiCall(3_000, 3_300, 33, 33, "MPI_Bcast", comm=sub, root=0, recv_size=4),
    ], [world(3, 4), Communicator(3, sub, 2, 1, 500, WORLD_HANDLE, group_root=1,
                                  group_root_uid=42, members=members)], 33)
    out = tmp_path / "sub.prv"
    result = nsys2prv.translate([r3, r1], out, chunk_rows=2)
    validate(out)
    tr = read_prv(out)
    assert [t.rank for t in result.model.tasks] == [1, 3]
    assert len(messages(tr)) == 2
    by_tag = {c[14]: c for c in messages(tr)}
    assert by_tag[7][3] == 1 and by_tag[7][9] == 2 and by_tag[7][13] == 64
    assert by_tag[8][13] == 32
    shift = {t.number: result.alignment.shifts[t.report] for t in result.model.tasks}
    # Irecv: logical = Irecv start, physical = end of the Waitall (the Test did not complete
    # it: the Waitall is the last call touching the handle)
    assert by_tag[8][11] - shift[2] == 1_900 and by_tag[8][12] - shift[2] == 2_700
    # Isend: logical = start, physical = end of the Isend call
    assert by_tag[8][5] - shift[1] == 2_000 and by_tag[8][6] - shift[1] == 2_100
    assert result.counts["MPI sends/receives with a wildcard, MPI_PROC_NULL or "
                         "untranslatable partner (not drawn)"] == 1
    partners = Counter(v for *_, pairs in tr.events for t, v in pairs
                       if t == mreg.MPI_P2P_PARTNER)
    assert partners == Counter({3: 3, 1: 2})  # world ranks; the wildcard has none
    comm_labels = tr.pcf_labels(mreg.MPI_COLL_COMMUNICATOR)
    assert comm_labels[2] == "communicator 1:42 (size 2)"
    roots = [(task, v) for task, _, _, pairs in tr.events for t, v in pairs
             if t == mreg.MPI_COLL_IS_ROOT]
    assert roots == [(1, 1)]  # local rank 0 of the sub-communicator is world rank 1
    assert result.counts["MPI_Sendrecv calls (messages not drawn)"] == 1
    assert tr.state_time()[(1, 1)][mreg.STATE_SEND_RECEIVE] == 100
    calls = trace_calls(tr)
    assert calls[(2, "MPI_Init")] == 1  # MPI_Init_thread has Extrae's MPI_Init value
    assert calls[(2, "MPI_Waitall")] == 1 and calls[(2, "MPI_Test")] == 1


def test_handles_reused_after_free_follow_the_timestamps(tmp_path):
    """One handle, two communicators over time: each call uses the one alive at its start."""
    h = 0x9000
    comms0 = [world(0, 2), Communicator(0, h, 2, 0, 1_000, group_root=0, group_root_uid=1,
                                        members="0,1"),
              Communicator(0, h, 2, 1, 5_000, group_root=1, group_root_uid=2,
                           members="1,0")]
    comms1 = [world(1, 2), Communicator(1, h, 2, 1, 1_000, group_root=0, group_root_uid=1,
                                        members="0,1"),
              Communicator(1, h, 2, 0, 5_000, group_root=1, group_root_uid=2,
                           members="1,0")]
    r0 = _rank_export(tmp_path / "a.sqlite", 0, [
        MpiCall(2_000, 2_100, 5, 5, "MPI_Send", comm=h, tag=1, remote=1, size=10),
        MpiCall(6_000, 6_100, 5, 5, "MPI_Send", comm=h, tag=1, remote=0, size=20),
    ], comms0, 5)
    r1 = _rank_export(tmp_path / "b.sqlite", 1, [
        MpiCall(2_000, 2_200, 6, 6, "MPI_Recv", comm=h, tag=1, remote=0, size=10),
        MpiCall(6_000, 6_200, 6, 6, "MPI_Recv", comm=h, tag=1, remote=1, size=20),
    ], comms1, 6)
    result = nsys2prv.translate([r0, r1], tmp_path / "h.prv")
    tr = read_prv(tmp_path / "h.prv")
    assert sorted(c[13] for c in tr.comms) == [10, 20]
    assert all(c[3] == 1 and c[9] == 2 for c in tr.comms)
    assert result.counts["MPI messages"] == 2


def test_complete_requests_rules():
    issues = pl.DataFrame({"pid": [1, 1, 1, 1], "request": [5, 5, 6, None],
                           "start": [10, 30, 12, 14], "end": [11, 31, 13, 15]})
    waits = pl.DataFrame({"pid": [1, 1, 1, 1, 1], "request": [5, 5, 6, 5, 6],
                          "start": [20, 25, 20, 40, 50], "end": [21, 26, 22, 41, 51]})
    got = kind.complete_requests(issues, waits).to_list()
    # request 5 issued at 10 is reissued at 30: its last wait before 30 ends at 26;
    # request 6 has two waits after it and no reissue: the last one (ends 51) completed it
    assert got == [26, 41, 51, None]
    # one handle for two sends issued before any wait: both end at the first wait
    same = pl.DataFrame({"pid": [1, 1], "request": [9, 9], "start": [1, 3], "end": [2, 4]})
    w = pl.DataFrame({"pid": [1, 1], "request": [9, 9], "start": [5, 5], "end": [8, 8]})
    assert kind.complete_requests(same, w).to_list() == [8, 8]


def test_match_messages_in_posting_order():
    rows = {"role": [1, 1, 2, 2, 1], "rank": [0, 0, 1, 1, 0], "peer": [1, 1, 0, 0, 5],
            "comm": ["w"] * 5, "tag": [3, 3, 3, 3, 3], "size": [1, 2, 1, 2, 9],
            "t_log": [10, 20, 15, 16, 30], "t_phys": [11, 21, 25, 26, 31],
            "row": [0] * 5, "ord": [1, 2, 3, 4, 5], "rep": [0, 0, 1, 1, 0]}
    pairs, counts = kind.match_messages(pl.DataFrame(rows), {0, 1})
    assert pairs.sort("s_t_log")[["s_size", "r_size"]].rows() == [(1, 1), (2, 2)]
    assert counts["MPI messages to a rank not in the inputs (not drawn)"] == 1
    assert counts["MPI sends without a matching receive (not drawn)"] == 0


def test_registry_facts():
    v = mreg.EXTRAE_MPI_VALUES
    assert (v["MPI_Send"], v["MPI_Waitall"], v["MPI_Allreduce"], v["MPI_Init"],
            v["MPI_Finalize"], v["MPI_Waitany"], v["MPI_Iexscan"]) == (1, 6, 10, 31, 32, 59, 215)
    assert mreg.call_type("MPI_File_write") == mreg.MPI_IO
    assert mreg.call_type("MPI_Put") == mreg.MPI_ONE_SIDED
    assert mreg.call_type("MPI_Ialltoallv") == mreg.MPI_COLLECTIVE
    assert mreg.call_type("MPI_Comm_split") == mreg.MPI_OTHER
    assert mreg.call_state("MPI_Sendrecv") == mreg.STATE_SEND_RECEIVE
    assert mreg.call_state("MPI_Iprobe") == mreg.STATE_TEST_PROBE
    assert mreg.canonical_name("PMPI_ALLREDUCE") == "MPI_Allreduce"
    assert mreg.canonical_name("mpi_send_") == "MPI_Send"


# -- scrubbing -----------------------------------------------------------------------------------

def test_scrub_keeps_only_rank_and_size(tmp_path):
    spec = synth.Spec(env={"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                           "OMPI_MCA_orte_hnp_uri": "1.0;tcp://192.0.2.2:4001",
                           "SECRET_TOKEN": "abc"})
    src = synth.write_export(tmp_path / "in.sqlite", spec)
    con = sqlite3.connect(src)
    con.execute("INSERT INTO StringIds (id, value) VALUES (999, ?)",
                ("HOME=/root\x00PMIX_RANK=2\x00AWS_KEY=xyz",))
    con.commit()
    con.close()
    out = scrub(src, tmp_path / "out.sqlite", ("OSRT_API",))
    env = sql(out, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name='DeviceEnvironment'")
    assert env == [("OMPI_COMM_WORLD_RANK=2;OMPI_COMM_WORLD_SIZE=4",)]
    assert sorted(v for (v,) in sql(out, "SELECT value FROM META_DATA_CAPTURE")) == [
        'OMPI_COMM_WORLD_RANK="2"', 'OMPI_COMM_WORLD_SIZE="4"']
    assert sql(out, "SELECT value FROM StringIds WHERE id = 999") == [("PMIX_RANK=2",)]
    rep = Report(out)
    assert (rep.rank, rep.world_size) == (2, 4)
    raw = out.read_bytes()
    assert b"192.0.2" not in raw and b"SECRET" not in raw and b"AWS_KEY" not in raw


def test_fixtures_carry_no_environment():
    for db in [*FIXTURE_RANKS, FIXTURE_LAUNCHER_22]:
        raw = db.read_bytes()
        for needle in (b"OMPI_MCA", b"192.0.2", b"fd00::", b"PMIX_SERVER", b"SSL_CERT",
                       b"PATH=", b"HOME="):
            assert needle not in raw, (db.name, needle)
