"""Call stacks (`*_CALLCHAINS`): the frames of CPU samples, of long OS runtime calls and of
CUDA API calls, read in step with the rows that point to them.

Every call-stack table has one row per frame, primary key (id, stackDepth): depth 0 is the
innermost frame (the sampled instruction, the libc wrapper of an OS runtime call, CUPTI's
own frame of a CUDA call), the deepest the outermost (`_start`). `symbol` and `module` are
StringIds ids; an unresolved frame's symbol is normally its address as text (`0x7fcb...`),
and `originalIP` is its address (kernel addresses stored as negative int64). The tables are
read in primary-key order, one query each (`Database.ordered`), while the rows that point to
them come in their own order: the chain ids grow with those rows in every export of the
corpus, so each table is read once, a batch at a time (`ChainFrames`).

How a call finds its stack:

* OS runtime: `OSRT_API.callchainId` = `OSRT_CALLCHAINS.id`; 0 means no stack (nsys keeps
  one only for calls of 80 us and more, `BACKTRACES_THRESHOLD_NS`). The frame at depth 0 is
  the call itself (`pthread_cond_wait@@GLIBC_2`, `__GI___libc_open`).
* CUDA (`--cudabacktrace`): `CUPTI_ACTIVITY_KIND_RUNTIME.callchainId` + 1 =
  `CUDA_CALLCHAINS.id`; NULL means no stack. The runtime's ids count from 0, the table's
  from 1 (there is no chain 0), so the equality join NVIDIA documents attaches to each call
  the next call's stack. Evidence, in the two corpus exports that have such stacks
  (tests/test_samples.py checks both): `sqlite/pipit_saxpy_mpi_cuda_rank0` (38 calls with
  an id): with + 1 every call's chain has a frame named as the call's API (`cudaMalloc` in
  libcudart for a cudaMalloc call), with the equality join 17 do and the call with id 0
  finds no chain; `exported/cumat_mpi_4gpu` (572 calls, every frame unresolved): with + 1
  each return address at the API's frame (depth 3) and at its caller's (depth 4) belongs
  to calls of one API, with the equality join 6 of its 7 and 8 of its 15 addresses are
  shared by calls of different APIs. With `--cudabacktrace`, nsys records each call twice
  with one correlation id: the versioned row (`cudaMalloc_v3020`) has no callchainId, the
  plain one has it; the stack belongs to the row that carries the id.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl

from ..report.report import Report
from .base import has_rows

SAMPLING = "SAMPLING_CALLCHAINS"
OSRT = "OSRT_CALLCHAINS"
CUDA = "CUDA_CALLCHAINS"

# frames that name no function, dropped from the stacks (and counted): the markers nsys
# appends where unwinding stopped, and a return address of 0 (printed '0x0': no code lives
# at address 0; unwinders end a stack there, aiprof_opt2 has one before 3643 of its 3652
# '[Broken backtraces]' and OS runtime stacks end in one)
MARKERS = ("[Max depth]", "[Broken backtraces]", "0x0")

# a frame as streamed: its address (`originalIP`) is read only for the frames that need it
# (`ChainFrames.addresses`): a fifth column costs 40 % more reading
FRAME_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int64, "depth": pl.Int64, "symbol": pl.Int64, "module": pl.Int64}

BATCH_ROWS = 100_000  # frames per batch of a table read in order


def available(report: Report, table: str) -> bool:
    """Whether the export has frames in call-stack table `table`."""
    return has_rows(report, table)


def osrt_chain(column: pl.Expr) -> pl.Expr:
    """`OSRT_CALLCHAINS.id` of an OS runtime call from its `callchainId` (0: none -> null)."""
    return pl.when(column > 0).then(column)


def cuda_chain(column: pl.Expr) -> pl.Expr:
    """`CUDA_CALLCHAINS.id` of a CUDA API call from its `callchainId` (NULL: none): the id
    plus one (module docstring)."""
    return column + 1


def _select(report: Report, real: str) -> str:
    return '"id" AS id, "stackDepth" AS depth, "symbol" AS symbol, "module" AS module'


def read_ordered(report: Report, table: str, batch_rows: int = BATCH_ROWS, where: str = ""
                 ) -> Iterator[pl.DataFrame]:
    """Frames of `table` (FRAME_SCHEMA) in (id, depth) order, in batches."""
    real = report.table(table)
    if real is None:
        return
    for df in report.db.ordered(real, _select(report, real), FRAME_SCHEMA, ("id", "depth"),
                                batch_rows, where=where):
        yield df.select([pl.col(k).cast(t) for k, t in FRAME_SCHEMA.items()])


def read_ids(report: Report, table: str, ids: np.ndarray) -> pl.DataFrame:
    """Frames of the chains `ids` (sorted), in (id, depth) order, by a query of their own."""
    real = report.table(table)
    if real is None or ids.size == 0:
        return pl.DataFrame(schema=FRAME_SCHEMA)
    lo, hi = int(ids[0]), int(ids[-1])
    if hi - lo + 1 <= 4 * ids.size:
        where = f'"id" BETWEEN {lo} AND {hi}'
    else:
        where = f'"id" IN ({",".join(map(str, ids.tolist()))})'
    df = report.db.frame(f'SELECT {_select(report, real)} FROM "{real}" WHERE {where} '
                         'ORDER BY "id", "stackDepth"', FRAME_SCHEMA)
    df = df.select([pl.col(k).cast(t) for k, t in FRAME_SCHEMA.items()])
    return df.filter(pl.Series(np.isin(df["id"].to_numpy(), ids)))


class ChainFrames:
    """The frames of one call-stack table for the chains the caller asks for, in id order.

    The table is streamed once in (id, depth) order; `of(ids)` returns the frames of `ids`
    (the chains of one chunk of samples or calls) and lets go of every frame up to the
    largest of them. Ids asked for after the stream has passed them (rows not in chain-id
    order) are read by a query of their own, so any order is right and the usual one costs
    one pass."""

    def __init__(self, report: Report, table: str, batch_rows: int = BATCH_ROWS,
                 where: str = "") -> None:
        self._report, self._table = report, table
        self._stream = read_ordered(report, table, batch_rows, where)
        self._held: list[pl.DataFrame] = []  # frames read, not yet given or passed
        self._passed = -(1 << 62)  # every id up to this one was given or dropped
        self._ended = False

    def of(self, ids: np.ndarray) -> pl.DataFrame:
        """Frames of the chains `ids` (any order, repeats allowed), in (id, depth) order."""
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        if ids.size == 0:
            return pl.DataFrame(schema=FRAME_SCHEMA)
        parts = []
        early = ids[ids <= self._passed]
        if early.size:
            parts.append(read_ids(self._report, self._table, early))
            ids = ids[ids > self._passed]
        if ids.size:
            top = int(ids[-1])
            while not self._ended and (not self._held or self._held[-1]["id"][-1] <= top):
                batch = next(self._stream, None)
                if batch is None:
                    self._ended = True
                elif batch.height:
                    self._held.append(batch)
            held = pl.concat(self._held, how="vertical") if len(self._held) > 1 else (
                self._held[0] if self._held else pl.DataFrame(schema=FRAME_SCHEMA))
            cut = int(np.searchsorted(held["id"].to_numpy(), top, side="right"))
            mine, rest = held.slice(0, cut), held.slice(cut)
            self._held = [rest] if rest.height else []
            self._passed = top
            parts.append(mine.filter(pl.Series(np.isin(mine["id"].to_numpy(), ids))))
        out = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
        return out.sort("id", "depth") if len(parts) > 1 else out

    def addresses(self, ids: np.ndarray, depths: np.ndarray) -> np.ndarray:
        """The addresses (`originalIP`; NUL where none) of the frames (ids, depths), by a
        query of their own: for the few frames whose symbol has no text."""
        from ..engine import NUL

        real = self._report.table(self._table)
        out = np.full(ids.size, NUL, np.int64)
        if real is None or not ids.size or "originalIP" not in self._report.db.columns(real):
            return out
        uniq = np.unique(ids)
        got = self._report.db.frame(
            f'SELECT "id" AS id, "stackDepth" AS depth, "originalIP" AS ip FROM "{real}" '
            f'WHERE "id" IN ({",".join(map(str, uniq.tolist()))})',
            {"id": pl.Int64, "depth": pl.Int64, "ip": pl.Int64})
        want = pl.DataFrame({"id": ids, "depth": depths})
        ip = want.join(got, on=["id", "depth"], how="left", maintain_order="left")["ip"]
        return ip.fill_null(NUL).to_numpy()

    def close(self) -> None:
        """Stop reading (the query's stream is closed)."""
        self._stream.close()
        self._held = []
