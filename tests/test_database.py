"""report.database: the bulk reader streams each table through one connectorx query per
STREAM_ROWS rowids (every `read_sql` call of connectorx 0.4 leaves the three threads of its
connection pool behind; a query's rows are read ahead without a bound),
gives the rows the sqlite3 path gives, and falls back to sqlite3 when connectorx fails,
also by a Rust panic (a process out of threads or address space)."""

from __future__ import annotations

import sqlite3

import connectorx
import polars as pl
import pytest

from nsys2prv.report.database import Database

SCHEMA = {"row_id": pl.Int64, "start": pl.Int64, "name": pl.Utf8}


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE T (start INTEGER, name TEXT)")
    con.executemany("INSERT INTO T VALUES (?, ?)",
                    [(i * 3, f"n{i % 17}") for i in range(20_000)])
    con.execute("DELETE FROM T WHERE start % 7 = 0")  # holes in the rowids
    con.commit()
    con.close()
    return path


def _read(path, chunk_rows, where="", arrow=True):
    db = Database(path, use_arrow=arrow)
    try:
        return list(db.chunks("T", "rowid AS row_id, start, name", SCHEMA, chunk_rows,
                              where=where))
    finally:
        db.close()


def test_one_query_per_table_same_rows_as_sqlite3(table, monkeypatch):
    calls = []
    real = connectorx.read_sql
    monkeypatch.setattr(connectorx, "read_sql",
                        lambda *a, **k: calls.append(k.get("return_type")) or real(*a, **k))
    chunks = _read(table, 1000, where="start % 2 = 0")
    assert calls == ["arrow_stream"]
    assert all(c.height <= 1000 for c in chunks)
    got = pl.concat(chunks)
    want = pl.concat(_read(table, 1000, where="start % 2 = 0", arrow=False))
    assert got.equals(want)
    assert got["row_id"].is_sorted() and got.height == sum(
        1 for i in range(20_000) if (i * 3) % 7 and (i * 3) % 2 == 0)


class PanicException(BaseException):
    """What pyo3 raises for a Rust panic (not an Exception)."""


def test_a_rust_panic_falls_back_to_sqlite3(table, monkeypatch, capsys):
    import nsys2prv.report.database as database

    def panic(*a, **k):
        raise PanicException("called `Result::unwrap()` on an `Err` value: Os { code: 11 }")

    monkeypatch.setattr(connectorx, "read_sql", panic)
    monkeypatch.setattr(database, "_PANIC_TOLD", False)
    got = pl.concat(_read(table, 999))
    assert got.equals(pl.concat(_read(table, 999, arrow=False)))
    db = Database(table)
    assert db.frame("SELECT rowid AS row_id, start, name FROM T", SCHEMA).height == got.height
    err = capsys.readouterr().err
    assert err.count("connectorx) failed") == 1 and "reading with sqlite3" in err


def test_a_failure_midway_goes_on_from_the_last_rowid(table, monkeypatch):
    real = connectorx.read_sql

    class Broken:
        def __init__(self, reader):
            self.reader, self.n = reader, 0

        def read_next_batch(self):
            self.n += 1
            if self.n == 3:
                raise RuntimeError("Cannot infer type from null for SQLite")
            return self.reader.read_next_batch()

    monkeypatch.setattr(connectorx, "read_sql", lambda *a, **k: Broken(real(*a, **k)))
    got = pl.concat(_read(table, 2500))
    assert got.equals(pl.concat(_read(table, 2500, arrow=False)))


def test_no_thread_to_read_ahead_reads_inline(table, monkeypatch):
    """A process out of address space cannot start the read-ahead thread: the rows come all
    the same, read on the caller's thread."""
    from concurrent.futures import ThreadPoolExecutor

    def refuse(self, *a, **k):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    for arrow in (True, False):
        got = pl.concat(_read(table, 3000, arrow=arrow))
        monkeypatch.undo()
        want = pl.concat(_read(table, 3000, arrow=False))
        monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
        assert got.equals(want)


def test_out_of_threads_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    import nsys2prv.cli.translate as translate
    from nsys2prv.cli import _main

    def no_thread(rest):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(translate, "run_translate", no_thread)
    assert _main([str(tmp_path / "x.sqlite"), str(tmp_path / "x.prv")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not start a thread" in err[0] and "ulimit" in err[0]


def _failing_query(monkeypatch, n: int) -> list:
    """connectorx whose n-th query fails at its second batch; returns the list its queries
    are counted in."""
    real = connectorx.read_sql
    count: list = []

    class Broken:
        def __init__(self, reader, i):
            self.reader, self.i, self.k = reader, i, 0

        def read_next_batch(self):
            self.k += 1
            if self.i == n and self.k == 2:
                raise RuntimeError("Cannot infer type from null for SQLite")
            return self.reader.read_next_batch()

    monkeypatch.setattr(connectorx, "read_sql",
                        lambda *a, **k: count.append(1) or Broken(real(*a, **k), len(count)))
    return count


def test_a_long_table_is_read_by_one_query_per_range(table, monkeypatch):
    """Past STREAM_ROWS rowids a table is read by one query per range (what connectorx can
    read ahead is one range): the same rows in order, chunks never across two ranges; a
    failure in a later range goes on with sqlite3 from the last rowid given."""
    import nsys2prv.report.database as database

    monkeypatch.setattr(database, "STREAM_ROWS", 6_000)
    calls = []
    real = connectorx.read_sql
    monkeypatch.setattr(connectorx, "read_sql",
                        lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    chunks = _read(table, 2_500)
    want = pl.concat(_read(table, 2_500, arrow=False))
    assert pl.concat(chunks).equals(want)
    assert len(calls) == 4 and all("ORDER BY rowid" in q for q in calls)
    lo = want["row_id"][0]  # the first range starts at the table's first rowid
    assert len({(c["row_id"][0] - lo) // 6_000 for c in chunks}) == 4
    assert all((c["row_id"][0] - lo) // 6_000 == (c["row_id"][-1] - lo) // 6_000
               for c in chunks)

    count = _failing_query(monkeypatch, 3)  # the third query fails after its first batch
    assert pl.concat(_read(table, 2_500)).equals(want)
    assert len(count) == 3


def test_the_names_a_family_uses_stay_compact():
    """`LocalNames.use` keeps per family a few merged id lists, not one a chunk, and the
    family's table lists every id used once."""
    from nsys2prv.paraver.values import LocalNames

    strings = pl.DataFrame({"id": list(range(50)), "value": [f"s{i}" for i in range(50)]})
    names = LocalNames(strings)
    for k in range(300):
        names.use("kernels", pl.Series([k % 50, (k * 7) % 50, None, k % 50]))
    assert len(names._used["kernels"]) <= 65
    table = names.family_table("kernels")
    assert table["local_id"].to_list() == [i + 1 for i in range(50)]
    assert table["name"].to_list() == [f"s{i}" for i in range(50)]


def test_an_ordered_read_is_cut_by_key_ranges(table, monkeypatch):
    """`Database.ordered` reads a long table by ranges of its key's first column, one query
    each: the rows of one `ORDER BY key` query, in order; a failure in a later range goes on
    with sqlite3 after the last key given."""
    import nsys2prv.report.database as database

    monkeypatch.setattr(database, "STREAM_ROWS", 5_000)

    def read():
        db = Database(table)
        try:
            return pl.concat(list(db.ordered("T", "rowid AS row_id, start, name", SCHEMA,
                                             ("start",), 2_000, where="start % 2 = 0")))
        finally:
            db.close()

    con = sqlite3.connect(table)
    want = con.execute("SELECT rowid, start, name FROM T WHERE start % 2 = 0 "
                       "ORDER BY start").fetchall()
    con.close()
    calls = []
    real = connectorx.read_sql
    monkeypatch.setattr(connectorx, "read_sql",
                        lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    assert read().rows() == want
    assert len(calls) == 4

    count = _failing_query(monkeypatch, 2)  # the second query fails at its second batch
    assert read().rows() == want
    assert len(count) == 2
