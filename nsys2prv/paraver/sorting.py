"""Out-of-core sorting: sorted runs on disk and a vectorised k-way merge of them.

Traces do not fit in memory, so records are sorted in runs of at most `max_rows` rows, each
written to an Arrow IPC file (LZ4), and merged back block by block. The merge never compares
single rows in Python: from every run's current block it takes all rows whose leading key is
below the smallest "last key" among the blocks (those rows can no longer be preceded by
anything unread), sorts that slab with polars and hands it on.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

_IPC_OPTIONS = ipc.IpcWriteOptions(compression="lz4")
# Rows per record batch in a run file: small enough that a merge of many runs can hold one
# short block of each, large enough that the per-batch cost stays negligible.
RUN_BATCH_ROWS = 8_192
# In-memory data (estimated bytes) an ExternalSorter collects before spilling a run.
SPILL_BYTES = 256 << 20
# Memory a k-way merge may hold in its per-run blocks, and the block bounds.
MERGE_BYTES = 256 << 20
MERGE_BLOCK_ROWS = 65_536


def merge_block_rows(n_runs: int, budget: int = MERGE_BYTES, row_bytes: int = 150) -> int:
    """Rows to buffer per run when merging `n_runs` runs: large blocks for few runs (fewer,
    bigger vectorised steps), shorter ones for many, so the buffers stay near `budget`."""
    fit = budget // max(1, n_runs * row_bytes)
    return max(RUN_BATCH_ROWS, min(MERGE_BLOCK_ROWS, fit))


def write_run(df: pl.DataFrame, path: Path, block_rows: int) -> list[int]:
    """Write a sorted frame as an IPC file of record batches of `block_rows` rows; returns
    the first value of the leading column in each batch (an index for reading a key range)."""
    table = df.to_arrow()
    block_rows = max(1, block_rows)
    firsts = df[df.columns[0]].gather_every(block_rows).to_list() if df.height else []
    with pa.OSFile(str(path), "wb") as sink:
        with ipc.new_file(sink, table.schema, options=_IPC_OPTIONS) as writer:
            for batch in table.to_batches(max_chunksize=block_rows):
                writer.write_batch(batch)
    return firsts


def read_run(path: Path, rows: int = 0, batches: range | None = None
             ) -> Iterator[pl.DataFrame]:
    """The rows of a run file (or of its record batches `batches`), in order, in blocks of
    at least `rows` rows (one record batch per block when `rows` is 0)."""
    # a plain file, not a memory map: mapped pages would stay in the resident set as the
    # merge walks through the runs
    with pa.OSFile(str(path), "rb") as source:
        reader = ipc.open_file(source)
        held: list[pa.RecordBatch] = []
        n_held = 0
        for i in batches if batches is not None else range(reader.num_record_batches):
            batch = reader.get_batch(i)
            held.append(batch)
            n_held += batch.num_rows
            if n_held >= rows:
                yield pl.from_arrow(pa.Table.from_batches(held))  # type: ignore[misc]
                held, n_held = [], 0
        if held:
            yield pl.from_arrow(pa.Table.from_batches(held))  # type: ignore[misc]


class ExternalSorter:
    """Collects frames, spilling sorted runs to `spill_dir` when they pass `max_rows` rows or
    `max_bytes` bytes (whichever comes first), so memory stays bounded whatever the input."""

    def __init__(self, keys: Sequence[str], spill_dir: Path, prefix: str,
                 max_rows: int = 4_000_000, max_bytes: int = SPILL_BYTES,
                 block_rows: int = RUN_BATCH_ROWS) -> None:
        self.keys = list(keys)
        self.spill_dir = Path(spill_dir)
        self.prefix = prefix
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.block_rows = block_rows
        self._pending: list[pl.DataFrame] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self.run_paths: list[Path] = []
        self.run_firsts: list[list[int]] = []  # per run: first leading key of each batch
        self.rows = 0

    def add(self, df: pl.DataFrame) -> None:
        if df.height == 0:
            return
        self._pending.append(df)
        self._pending_rows += df.height
        self._pending_bytes += df.estimated_size()
        self.rows += df.height
        if self._pending_rows >= self.max_rows or self._pending_bytes >= self.max_bytes:
            self._spill()

    def _take_pending(self) -> pl.DataFrame | None:
        if not self._pending:
            return None
        df = pl.concat(self._pending, how="vertical").sort(self.keys, maintain_order=True)
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        return df

    def _spill(self) -> None:
        df = self._take_pending()
        if df is None:
            return
        path = self.spill_dir / f"{self.prefix}-{len(self.run_paths):05d}.arrow"
        self.run_firsts.append(write_run(df, path, self.block_rows))
        self.run_paths.append(path)

    def finish_runs(self) -> list[Path]:
        """Spill what is left and return every run file (the partial-trace form)."""
        self._spill()
        return list(self.run_paths)

    def sorted_blocks(self, cut_keys: int = 1) -> Iterator[pl.DataFrame]:
        """Everything added so far, in key order, as blocks (memory: one block per run)."""
        rest = self._take_pending()
        rows = merge_block_rows(len(self.run_paths) + 1)
        sources: list[Iterable[pl.DataFrame]] = [read_run(p, rows) for p in self.run_paths]
        if rest is not None:
            sources.append(_blocks_of(rest, rows))
        yield from merge_sorted(sources, self.keys, cut_keys=cut_keys)

    def cleanup(self) -> None:
        for p in self.run_paths:
            try:
                os.unlink(p)
            except OSError:
                pass
        self.run_paths = []
        self.run_firsts = []


def _blocks_of(df: pl.DataFrame, block_rows: int) -> Iterator[pl.DataFrame]:
    for offset in range(0, df.height, block_rows):
        yield df.slice(offset, block_rows)


def _below(keys: Sequence[str], cutoff: Sequence) -> pl.Expr:
    """Lexicographic (keys) < (cutoff) as a polars expression."""
    expr = pl.col(keys[-1]) < cutoff[-1]
    for k, c in zip(reversed(keys[:-1]), reversed(cutoff[:-1])):
        expr = (pl.col(k) < c) | ((pl.col(k) == c) & expr)
    return expr


def merge_sorted(sources: Sequence[Iterable[pl.DataFrame]], keys: Sequence[str],
                 cut_keys: int = 1) -> Iterator[pl.DataFrame]:
    """k-way merge of sources that each yield blocks sorted by `keys`.

    Rows are released once their first `cut_keys` keys are below every unfinished source's
    last buffered key; each released slab is sorted by all `keys` (stable), so the output
    order is fully defined by the keys and the source order.
    """
    keys = list(keys)
    cut = keys[:cut_keys]
    iters = [iter(s) for s in sources]
    buffers: list[pl.DataFrame | None] = []
    for it in iters:
        buffers.append(next(it, None))
    done = [b is None for b in buffers]
    while True:
        live = [i for i, b in enumerate(buffers) if b is not None and b.height]
        if not live:
            return
        open_runs = [i for i in live if not done[i]]
        if not open_runs:
            slab = pl.concat([buffers[i] for i in live], how="vertical")
            yield slab.sort(keys, maintain_order=True)
            return
        lasts = {i: tuple(buffers[i].row(-1, named=True)[k] for k in cut) for i in open_runs}
        cutoff = min(lasts.values())
        cond = _below(cut, cutoff)
        taken = []
        for i in live:
            b = buffers[i]
            # Every buffer is sorted, so the rows below the cutoff are a prefix.
            if cut_keys == 1:
                n = int(b[cut[0]].search_sorted(cutoff[0], side="left"))
            else:
                n = b.select(cond.sum()).item()
            if n:
                taken.append(b.head(n))
                buffers[i] = b.slice(n)
        if taken:
            yield pl.concat(taken, how="vertical").sort(keys, maintain_order=True)
        # Refill the runs that set the cutoff: what is left of them sits at the cutoff.
        for i in open_runs:
            if lasts[i] == cutoff:
                b = buffers[i]
                nxt = next(iters[i], None)
                if nxt is None:
                    done[i] = True
                else:
                    buffers[i] = pl.concat([b, nxt], how="vertical") if b.height else nxt


def chain_blocks(*parts: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    return itertools.chain(*parts)
