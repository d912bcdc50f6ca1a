"""Host side: OS runtime waits as states, pthread calls, thread scheduling."""

from __future__ import annotations

import sqlite3

import nsys2prv
from nsys2prv.paraver import registry as reg
from nsys2prv.testing.samples import PID, WORKER, sample_spec
from nsys2prv.testing.synth import global_tid, write_export

from prvtools import read_prv, validate


def _add_sched(db, switches):
    """SCHED_EVENTS rows (start, cpu, isSchedIn, globalTid), as nsys --cpuctxsw writes them."""
    con = sqlite3.connect(db)
    con.execute('CREATE TABLE SCHED_EVENTS (start INTEGER NOT NULL, cpu INTEGER NOT NULL, '
                'isSchedIn INTEGER NOT NULL, globalTid INTEGER)')
    con.executemany("INSERT INTO SCHED_EVENTS VALUES (?, ?, ?, ?)", switches)
    con.commit()
    con.close()


def test_descheduled_time_is_blocked_outside_calls(tmp_path):
    spec = sample_spec(1)
    db = write_export(tmp_path / "s.sqlite", spec, "3.17.1")
    gtid = global_tid(PID, WORKER)
    calls = [(o.start, o.end) for o in spec.osrt]
    first = min(n.start for n in spec.nvtx if n.tid == WORKER)
    # worker: runs on CPU 3, goes off the CPU for 20 us outside any call, then comes back;
    # then off again inside its pthread_cond_wait (that time keeps the call's state)
    off1, on1 = first + 10_000, first + 30_000
    inside = calls[0][0] + 5_000
    switches = [(first, 3, 1, gtid), (off1, 3, 0, gtid), (on1, 5, 1, gtid),
                (inside, 5, 0, gtid), (inside + 50_000, 3, 1, gtid),
                (inside + 60_000, 3, 0, gtid)]
    assert all(not (s <= off1 < e) for s, e in calls) and calls[0][0] < inside < calls[0][1]
    _add_sched(db, switches)
    result = nsys2prv.translate(db, tmp_path / "s.prv")
    validate(tmp_path / "s.prv")
    tr = read_prv(tmp_path / "s.prv")
    worker = tr.state_time()[(1, 2)]
    assert worker[reg.STATE_BLOCKED] == on1 - off1
    cpus = [v for v in tr.values(reg.THREAD_CPU) if v]
    assert cpus == [4, 6, 4]  # core + 1 at each switch-in
    assert result.counts["sched_descheduled"] == 2
