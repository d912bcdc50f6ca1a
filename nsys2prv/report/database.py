"""Read-only access to one SQLite export, with a fast Arrow-native path for bulk columns.

Small queries (metadata, strings, enums) go through Python's `sqlite3`, opened with
``mode=ro&immutable=1`` so SQLite never writes, locks or creates a journal. Bulk columns
(10^6-10^8 rows) go through connectorx, which fills Arrow arrays in Rust; it is several times
faster than fetching Python rows (see benchmarks/RESULTS.md). connectorx opens files
read-write, so it is used only on an existing file with no journal or WAL beside it (where a
read-write open could touch the file); otherwise, or if it fails on odd data (text in an
integer column, invalid UTF-8), the same query runs through `sqlite3`.
"""

from __future__ import annotations

import contextlib

import os
import sqlite3
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl

from .._alloc import trim
from ..errors import InputError

import importlib.util

# connectorx (the fast Arrow reader) is imported on first use: it costs ~15 ms of start-up
_HAVE_CX = importlib.util.find_spec("connectorx") is not None

SQLITE_MAGIC = b"SQLite format 3\x00"
SMALL_TABLE_ROWS = 4096  # rowid spans below this are read with sqlite3 (no connectorx set-up)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class Database:
    """One SQLite file, opened read-only; tables and columns are looked up by name."""

    def __init__(self, path: str | os.PathLike[str], use_arrow: bool = True) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InputError(f"{self.path}: no such file")
        if not self.path.is_file():
            raise InputError(f"{self.path}: not a file")
        try:
            with open(self.path, "rb") as f:
                magic = f.read(16)
        except OSError as e:
            raise InputError(f"{self.path}: cannot read ({e.strerror})") from None
        if magic != SQLITE_MAGIC:
            if not magic:
                raise InputError(f"{self.path}: empty file, not an SQLite export")
            raise InputError(f"{self.path}: not an SQLite database")
        uri = "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=ro&immutable=1"
        try:
            self._con = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._con.text_factory = _decode
            rows = self._con.execute(
                "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: corrupt or truncated SQLite database ({e})") from None
        self.tables: dict[str, str] = {name: kind for name, kind in rows}
        self._columns: dict[str, list[str]] = {}
        sidecars = [Path(str(self.path) + s) for s in ("-journal", "-wal", "-shm")]
        self._arrow_ok = use_arrow and _HAVE_CX and not any(p.exists() for p in sidecars)

    # -- introspection -----------------------------------------------------------------------
    def has_table(self, name: str) -> bool:
        return name in self.tables

    def columns(self, table: str) -> list[str]:
        if table not in self._columns:
            try:
                info = self._con.execute(f'PRAGMA table_info("{table}")').fetchall()
            except sqlite3.DatabaseError as e:
                raise InputError(f"{self.path}: cannot read table {table} ({e})") from None
            self._columns[table] = [r[1] for r in info]
        return self._columns[table]

    # -- small queries -----------------------------------------------------------------------
    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self._con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: query failed ({e}): {sql[:120]}") from None

    def scalar(self, sql: str, params: tuple = ()):
        r = self.rows(sql, params)
        return r[0][0] if r else None

    def count(self, table: str) -> int:
        return int(self.scalar(f'SELECT count(*) FROM "{table}"') or 0)

    # -- bulk queries ------------------------------------------------------------------------
    def frame(self, sql: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        """Run `sql` and return its columns with the given dtypes (names must match)."""
        if self._arrow_ok:
            try:
                table = _read_sql("sqlite://" + urllib.parse.quote(str(self.path.resolve())),
                                  sql, return_type="arrow")
                df = pl.from_arrow(table)
                if isinstance(df, pl.Series):  # pragma: no cover - single column edge
                    df = df.to_frame()
                return _conform(df, schema)
            except Exception:  # noqa: BLE001 - any connectorx failure: use the safe path
                pass
            except BaseException as e:  # a Rust panic (pyo3's PanicException)
                _unless_panic(e)
        return self._frame_sqlite(sql, schema)

    def _frame_sqlite(self, sql: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        try:
            cur = self._con.execute(sql)
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: query failed ({e}): {sql[:120]}") from None
        names = [d[0] for d in cur.description]
        parts = []
        try:
            while True:
                rows = cur.fetchmany(200_000)
                if not rows:
                    break
                cols = list(zip(*rows))
                parts.append(pl.DataFrame(
                    {n: pl.Series(n, list(c), dtype=_loose(schema.get(n)), strict=False)
                     for n, c in zip(names, cols)}))
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: corrupt data while reading ({e})") from None
        if not parts:
            return pl.DataFrame(schema={n: schema.get(n, pl.Int64) for n in names})
        return _conform(pl.concat(parts, how="vertical_relaxed"), schema)

    def chunks(self, table: str, select: str, schema: dict[str, pl.DataType],
               chunk_rows: int, where: str = "", rowids: np.ndarray | None = None
               ) -> Iterator[pl.DataFrame]:
        """Stream `SELECT {select} FROM table` in rowid ranges of `chunk_rows` rows.

        Rowid ranges keep memory bounded and read the table sequentially, which is what
        SQLite does fastest; the chunks come in rowid order, so output stays deterministic.
        `rowids` (sorted): only these rows, looked up in the rowid b-tree range by range (a
        window that holds a small part of a table).
        """
        # two statements: SQLite answers a lone min() or max() of the rowid from the b-tree
        # ends, but scans the whole table for both in one statement
        lo = self.scalar(f'SELECT min(rowid) FROM "{table}"')
        hi = self.scalar(f'SELECT max(rowid) FROM "{table}"')
        if lo is None:
            return
        extra = f" AND ({where})" if where else ""
        if rowids is not None:
            cuts = np.searchsorted(rowids, np.arange(lo, hi + chunk_rows + 1, chunk_rows))
            queries = [f'SELECT {select} FROM "{table}" WHERE rowid IN '
                       f'({",".join(map(str, rowids[a:b].tolist()))}){extra}'
                       for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
            if not queries:
                return
        else:
            queries = [f'SELECT {select} FROM "{table}" '
                       f"WHERE rowid >= {start} AND rowid < {start + chunk_rows}{extra}"
                       for start in range(lo, hi + 1, chunk_rows)]
        if hi - lo < SMALL_TABLE_ROWS:
            # a small table: Python's sqlite3 answers before connectorx has opened the file
            for sql in queries:
                df = self._frame_sqlite(sql, schema)
                if df.height:
                    yield df
            return
        if self._arrow_ok and rowids is None:
            yield from self._stream(table, select, schema, chunk_rows, lo, hi, extra)
            return
        # The next chunk is read on a second thread while the caller works on this one
        # (connectorx and polars release the GIL): reading overlaps translating, and at most
        # two chunks are held.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys2prv-read") as pool:
            ahead = _submit(pool, self.frame, queries[0], schema)
            for k in range(len(queries)):
                df = ahead.result()
                if k + 1 < len(queries):
                    ahead = _submit(pool, self.frame, queries[k + 1], schema)
                if df.height:
                    yield df

    def _stream(self, table: str, select: str, schema: dict[str, pl.DataType],
                chunk_rows: int, lo: int, hi: int, extra: str) -> Iterator[pl.DataFrame]:
        """A table's rows [lo, hi] in rowid order as connectorx queries read in batches of
        `chunk_rows` (`arrow_stream`), one query per STREAM_ROWS rowids: connectorx reads a
        query's rows ahead of the batches asked for without a bound (the kernels of the
        30M benchmark export, translated at their pace: 950 MB ahead), so a query is kept
        to a range whose rows may all be read ahead; and not one query per chunk, because
        every `read_sql` call of connectorx 0.4 leaves the threads of its connection pool
        behind (a process translating many reports, or a library user's session, would
        gather hundreds, 2 MiB of address space each). The next batch is read on a second
        thread; where connectorx fails (odd data), what is left is read with `sqlite3`
        from the last rowid given, when the query selects it (`row_id`)."""
        last = None
        start = lo
        try:
            for begin in range(lo, hi + 1, STREAM_ROWS):
                end = min(begin + STREAM_ROWS - 1, hi)
                sql = (f'SELECT {select} FROM "{table}" WHERE rowid >= {begin} AND '
                       f"rowid <= {end}{extra} ORDER BY rowid")
                with contextlib.closing(self._arrow_frames(sql, chunk_rows, schema)) as frames:
                    for df in frames:
                        if "row_id" in df.columns:
                            last = int(df["row_id"][-1])
                        yield df
                start = end + 1
            return
        except BaseException as e:  # noqa: BLE001 - any connectorx failure: the safe path
            if not isinstance(e, Exception):
                _unless_panic(e)
            if last is not None and last >= start:
                if not _selects_rowid(select):  # pragma: no cover - chunked reads select it
                    raise InputError(f"{self.path}: reading {table} failed midway ({e})") \
                        from None
                start = last + 1
        for begin in range(start, hi + 1, chunk_rows):
            df = self._frame_sqlite(
                f'SELECT {select} FROM "{table}" WHERE rowid >= {begin} AND '
                f"rowid < {begin + chunk_rows}{extra}", schema)
            if df.height:
                yield df

    def ordered(self, table: str, select: str, schema: dict[str, pl.DataType],
                key: tuple[str, ...], batch_rows: int, where: str = ""
                ) -> Iterator[pl.DataFrame]:
        """Stream `SELECT {select} FROM table [WHERE where] ORDER BY key` in batches of about
        `batch_rows` rows: a query per range of the key's first column (its key an index
        SQLite walks in order, as the call-stack tables' primary key (id, stackDepth) is),
        so that a table read in step with another one sorted the same way is read once,
        with few connectorx queries (each leaves threads behind, and reads its rows ahead
        without a bound: see `_stream`). `key` names columns of the table that `select`
        gives under the same names; where connectorx fails midway, the rest is read with
        `sqlite3` from after the last key given (SQL row values)."""
        order = ", ".join(f'"{k}"' for k in key)
        last = None
        hi = self.scalar(f'SELECT max(rowid) FROM "{table}"')
        lo = self.scalar(f'SELECT min(rowid) FROM "{table}"')
        if hi is None:
            return
        if self._arrow_ok and hi - lo >= SMALL_TABLE_ROWS:
            try:
                for part in self._key_ranges(table, key[0], hi - lo + 1, where):
                    sql = f'SELECT {select} FROM "{table}" WHERE {part} ORDER BY {order}'
                    with contextlib.closing(self._arrow_frames(sql, batch_rows, schema)) \
                            as frames:
                        for df in frames:
                            last = tuple(df[k][-1] for k in key)
                            yield df
                return
            except BaseException as e:  # noqa: BLE001 - any connectorx failure
                if not isinstance(e, Exception):
                    _unless_panic(e)
        while True:  # sqlite3, in batches, from after the last key given
            after = ""
            if last is not None:
                tup = ", ".join(f'"{k}"' for k in key)
                after = f"({tup}) > ({', '.join(str(int(v)) for v in last)})"
            conds = [c for c in (where and f"({where})", after) if c]
            sql = (f'SELECT {select} FROM "{table}"'
                   + (" WHERE " + " AND ".join(conds) if conds else "")
                   + f" ORDER BY {order} LIMIT {max(1, batch_rows)}")
            df = self._frame_sqlite(sql, schema)
            if df.height == 0:
                return
            last = tuple(df[k][-1] for k in key)
            yield df
            if df.height < batch_rows:
                return

    def _key_ranges(self, table: str, first: str, rows: int, where: str) -> list[str]:
        """Conditions cutting `table` by its first key column into ranges of about
        STREAM_ROWS rows (assuming its values spread evenly over the rows), each with
        `where`: one connectorx query each, as `_stream` cuts by rowid."""
        a = self.scalar(f'SELECT min("{first}") FROM "{table}"')
        b = self.scalar(f'SELECT max("{first}") FROM "{table}"')
        extra = f" AND ({where})" if where else ""
        if a is None or b is None:
            return [f"1{extra}"]
        a, b = int(a), int(b)
        span = max(1, (b - a + 1) * STREAM_ROWS // max(rows, 1))
        return [f'"{first}" >= {v} AND "{first}" < {v + span}{extra}'
                for v in range(a, b + 1, span)]

    def _arrow_frames(self, sql: str, batch_rows: int, schema: dict[str, pl.DataType]
                      ) -> Iterator[pl.DataFrame]:
        """`sql` as one connectorx query read in batches of `batch_rows` (`arrow_stream`),
        the next batch read on a second thread, each batch as a frame of `schema` (empty
        ones skipped); connectorx's failures propagate (the callers read the rest with
        `sqlite3`)."""
        url = "sqlite://" + urllib.parse.quote(str(self.path.resolve()))
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys2prv-read") as pool:
            reader = _read_sql(url, sql, return_type="arrow_stream",
                               batch_size=max(1, batch_rows))
            ahead = _submit(pool, _next_batch, reader)
            n = 0
            while True:
                batch = ahead.result()
                if batch is None:
                    return
                n += 1
                if n % TRIM_EVERY == 0:
                    trim()
                ahead = _submit(pool, _next_batch, reader)
                if batch.num_rows:
                    df = pl.from_arrow(batch)
                    if isinstance(df, pl.Series):  # pragma: no cover - one column
                        df = df.to_frame()
                    yield _conform(df, schema)

    def close(self) -> None:
        self._con.close()


def _submit(pool: ThreadPoolExecutor, fn, *args) -> Future:
    """`pool.submit`, or, where no thread can be started (the process is out of address
    space or threads), the call made here: reading goes on without reading ahead."""
    try:
        return pool.submit(fn, *args)
    except RuntimeError as e:
        if "can't start new thread" not in str(e):
            raise
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as err:  # noqa: BLE001 - handed to the caller as submit would
            done.set_exception(err)
        return done


STREAM_ROWS = 1 << 21  # rowids of a table read by one connectorx query (`_stream`)
TRIM_EVERY = 8  # batches of a table read between two trims of glibc's heap
CX_STACK = "524288"  # bytes of stack of the threads connectorx starts (Rust's default: 2 MiB)
_CX_FIRST = True


def _read_sql(*args, **kwargs):
    """connectorx's `read_sql`, its first call made with a small stack for the threads it
    starts. Every call leaves the three threads of a connection pool behind (connectorx
    0.4); they only manage connections, so a 512 KiB stack is plenty (a query 900
    subqueries deep ran on 64 KiB), and each costs a quarter of the address space Rust's
    default would. Rust reads RUST_MIN_STACK once per library, at its first thread: polars'
    threads are started before (`thread_pool_size`), with their own default, and the
    variable is put back after. A value the user set is kept."""
    global _CX_FIRST
    import connectorx as cx

    if not _CX_FIRST:
        return cx.read_sql(*args, **kwargs)
    _CX_FIRST = False
    if "RUST_MIN_STACK" in os.environ:
        return cx.read_sql(*args, **kwargs)
    pl.thread_pool_size()  # polars' pool exists before the variable is set
    os.environ["RUST_MIN_STACK"] = CX_STACK
    try:
        return cx.read_sql(*args, **kwargs)
    finally:
        os.environ.pop("RUST_MIN_STACK", None)


def _unless_panic(e: BaseException) -> None:
    """Re-raise `e` unless it is a Rust panic inside connectorx (pyo3 raises those as
    PanicException, a BaseException): seen when the process can start no more threads
    (its address space or thread limit reached). The read then goes through sqlite3, which
    needs no thread, and the user is told once why it is slower."""
    if type(e).__name__ != "PanicException":
        raise e
    global _PANIC_TOLD
    if not _PANIC_TOLD:
        _PANIC_TOLD = True
        import sys

        print("nsys2prv: warning: the fast SQLite reader (connectorx) failed "
              f"({str(e).splitlines()[0][:120]}); reading with sqlite3 instead, which is "
              "slower (is the process short of address space or threads? ulimit -v / -u)",
              file=sys.stderr)


_PANIC_TOLD = False


def _next_batch(reader):
    """The next record batch of a connectorx stream, None at its end."""
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None


def _selects_rowid(select: str) -> bool:
    return select.lstrip().lower().startswith("rowid as row_id")


def _loose(dtype):
    return dtype if dtype in (pl.Int64, pl.Float64, pl.Utf8) else None


def _conform(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    exprs = []
    for name in df.columns:
        want = schema.get(name)
        if want is None or df.schema[name] == want:
            exprs.append(pl.col(name))
        else:
            exprs.append(pl.col(name).cast(want, strict=False))
    return df.select(exprs)
