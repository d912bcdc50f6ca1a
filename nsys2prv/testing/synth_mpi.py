"""Native MPI tables (nsys 2023.x layout) added to a synthetic export, for edge cases the
recorded runs do not have: sub-communicators, wildcard receives, reused request handles,
tests before waits, calls split across chunks.

    path = synth.write_export(tmp / "r0.sqlite", synth.Spec(env={"OMPI_COMM_WORLD_RANK": "0"}))
    add_mpi(path, [MpiCall(...), ...], [Communicator(...)], ranks=[(pid, tid, 0)])

Columns and their order are those of the recorded 2023.4 exports (`MPI_*` tables).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..paraver.registry import mpi as mreg
from .synth import appended_strings, global_tid

TABLES: dict[str, list[str]] = {
    "MPI_RANKS": ["globalTid", "rank"],
    "MPI_P2P_EVENTS": ["start", "end", "globalTid", "textId", "commHandle", "tag", "remoteRank",
                       "size", "requestHandle"],
    "MPI_COLLECTIVES_EVENTS": ["start", "end", "globalTid", "textId", "commHandle", "rootRank",
                               "size", "recvSize", "requestHandle"],
    "MPI_START_WAIT_EVENTS": ["start", "end", "globalTid", "textId", "requestHandle"],
    "MPI_OTHER_EVENTS": ["start", "end", "globalTid", "textId"],
    "MPI_COMMUNICATORS": ["rank", "timestamp", "commHandle", "parentHandle", "localRank",
                          "size", "groupRoot", "groupRootUid", "members"],
}
_TEXT = {"members"}
WORLD_HANDLE = 0x5000  # default handle of MPI_COMM_WORLD in these exports


@dataclass
class MpiCall:
    """One MPI call; `requests` holds the request of an immediate call, or every request a
    wait/test call touches (one row each, as nsys writes them)."""

    start: int
    end: int | None
    pid: int
    tid: int
    name: str
    comm: int | None = WORLD_HANDLE
    tag: int | None = None
    remote: int | None = None
    size: int | None = None
    recv_size: int | None = None
    root: int | None = None
    requests: tuple[int, ...] = ()


@dataclass
class Communicator:
    rank: int  # world rank of the process that holds the handle
    handle: int
    size: int
    local_rank: int
    timestamp: int | None = 0
    parent: int = 0
    group_root: int | None = None
    group_root_uid: int | None = None
    members: str | None = None


def table_of(name: str) -> str:
    """The native table nsys writes a function to."""
    low = name.lower()
    if low.startswith(("mpi_wait", "mpi_test", "mpi_start")):
        return "MPI_START_WAIT_EVENTS"
    kind = mreg.call_type(mreg.canonical_name(name))
    if kind == mreg.MPI_POINT_TO_POINT:
        return "MPI_P2P_EVENTS"
    if kind == mreg.MPI_COLLECTIVE:
        return "MPI_COLLECTIVES_EVENTS"
    return "MPI_OTHER_EVENTS"


def world(rank: int, size: int, handle: int = WORLD_HANDLE, timestamp: int | None = 0
          ) -> Communicator:
    """MPI_COMM_WORLD as nsys records it: no group root, no members."""
    return Communicator(rank, handle, size, rank, timestamp)


def add_mpi(path: str | os.PathLike[str], calls: Sequence[MpiCall],
            communicators: Sequence[Communicator] = (),
            ranks: Sequence[tuple[int, int, int]] = ()) -> Path:
    """Add the MPI tables (rows for `calls`, `communicators`, (pid, tid, rank) `ranks`) to an
    export written by `synth.write_export`; function names are added to StringIds."""
    path = Path(path)
    con = sqlite3.connect(path)
    try:
        for table, cols in TABLES.items():
            defs = ", ".join(f'"{c}" {"TEXT" if c in _TEXT else "INTEGER"}' for c in cols)
            con.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({defs})')
        con.execute('CREATE TABLE IF NOT EXISTS "StringIds" (id INTEGER PRIMARY KEY, value TEXT)')
        sid = appended_strings(con)

        rows: dict[str, list[dict]] = {t: [] for t in TABLES}
        for c in calls:
            table = table_of(c.name)
            base = {"start": c.start, "end": c.end, "globalTid": global_tid(c.pid, c.tid),
                    "textId": sid(c.name)}
            if table == "MPI_P2P_EVENTS":
                rows[table].append({**base, "commHandle": c.comm, "tag": c.tag,
                                    "remoteRank": c.remote, "size": c.size,
                                    "requestHandle": c.requests[0] if c.requests else None})
            elif table == "MPI_COLLECTIVES_EVENTS":
                rows[table].append({**base, "commHandle": c.comm, "rootRank": c.root,
                                    "size": c.size, "recvSize": c.recv_size})
            elif table == "MPI_START_WAIT_EVENTS":
                for r in c.requests or (None,):
                    rows[table].append({**base, "requestHandle": r})
            else:
                rows[table].append(base)
        rows["MPI_COMMUNICATORS"] = [
            {"rank": m.rank, "timestamp": m.timestamp, "commHandle": m.handle,
             "parentHandle": m.parent, "localRank": m.local_rank, "size": m.size,
             "groupRoot": m.group_root, "groupRootUid": m.group_root_uid,
             "members": m.members} for m in communicators]
        rows["MPI_RANKS"] = [{"globalTid": global_tid(p, t), "rank": r} for p, t, r in ranks]
        for table, items in rows.items():
            cols = TABLES[table]
            con.executemany(
                f'INSERT INTO "{table}" ({", ".join(cols)}) VALUES '
                f'({", ".join("?" for _ in cols)})', [[r.get(k) for k in cols] for r in items])
        con.commit()
        for table in TABLES:  # lazy export: empty tables are absent
            if con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == 0:
                con.execute(f'DROP TABLE "{table}"')
        con.commit()
    finally:
        con.close()
    return path
