"""Rows that come in any order, given back in the order of a time column in bounded memory.

The GPU metrics model reads each GPU's activities and samples in time order several times
(its sums, then each kernel's rates and each sample's prediction), but the kinds read their
tables in rowid order, which nsys does not promise to be time order. `SortedSpill` keeps
what it is given in memory while it is small; past RAW_ROWS it writes it to disk as it
comes (lz4 Arrow IPC, in a directory of the partial trace, removed with it), then cuts the
rows into buckets of about BUCKET_ROWS rows at quantiles of a sample of their times, sorts
each bucket once and gives them back in time order: memory of one bucket, whatever the
report's length (an external bucket sort).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import polars as pl

RAW_ROWS = 1 << 19  # rows gathered in memory before they are written
BUCKET_ROWS = 1 << 19  # rows a bucket is cut for (memory of reading one back)
SAMPLE_EVERY = 64  # one time in this many kept to place the buckets' bounds


class SortedSpill:
    """`add` frames (one schema) in any order; after `finish`, `buckets` yields them in
    order of `by` (its first column the time: rows of one time are in one bucket; ties of
    `by` in the order added), bucket by bucket, as often as wanted."""

    def __init__(self, directory: Path, by: Sequence[str], bucket_rows: int = BUCKET_ROWS,
                 raw_rows: int = RAW_ROWS) -> None:
        self.dir = Path(directory)
        self.by = list(by)
        self.bucket_rows = bucket_rows
        self.raw_rows = raw_rows
        self.rows = 0
        self._pending: list[pl.DataFrame] = []
        self._pending_rows = 0
        self._raw: list[Path] = []
        self._sample: list[np.ndarray] = []
        self._schema: pl.Schema | None = None
        self._buckets: list[Path] | None = None  # on disk, sorted
        self._held: pl.DataFrame | None = None  # all of it, sorted, when it stayed small

    def add(self, frame: pl.DataFrame) -> None:
        if self._schema is None:
            self._schema = frame.schema
        if frame.height == 0:
            return
        self.rows += frame.height
        self._pending.append(frame)
        self._pending_rows += frame.height
        self._sample.append(frame[self.by[0]].to_numpy()[::SAMPLE_EVERY].copy())
        if self._pending_rows >= self.raw_rows:
            self._write_raw()

    def _write_raw(self) -> None:
        if not self._pending:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"raw{len(self._raw):05d}.arrow"
        pl.concat(self._pending).write_ipc(path, compression="lz4")
        self._raw.append(path)
        self._pending, self._pending_rows = [], 0

    def finish(self) -> None:
        """No more rows: sort them (in memory when they never left it)."""
        if self._buckets is not None or self._held is not None:
            return
        if not self._raw:
            self._held = (pl.concat(self._pending).sort(self.by, maintain_order=True)
                          if self._pending else pl.DataFrame(schema=self._schema or {}))
            self._pending = []
            return
        self._write_raw()
        k = -(-self.rows // self.bucket_rows)
        sample = np.sort(np.concatenate(self._sample))
        self._sample = []
        # the bounds: times at the sample's quantiles (a time is in the bucket after it)
        bounds = np.unique(sample[(np.arange(1, k) * sample.size) // k]) if k > 1 else \
            np.zeros(0, sample.dtype)
        parts: dict[int, list[Path]] = {}
        for i, raw in enumerate(self._raw):
            frame = pl.read_ipc(raw)
            raw.unlink()
            b = np.searchsorted(bounds, frame[self.by[0]].to_numpy(), side="right")
            tagged = frame.with_columns(pl.Series("_b", b, dtype=pl.Int64))
            del frame
            for (j,), part in tagged.partition_by("_b", as_dict=True,
                                                  maintain_order=True).items():
                path = self.dir / f"part{int(j):05d}.{i:05d}.arrow"
                part.drop("_b").write_ipc(path, compression="lz4")
                parts.setdefault(int(j), []).append(path)
            del tagged
        self._raw = []
        self._buckets = []
        for j in sorted(parts):  # each bucket sorted once (its parts in the order added)
            frame = pl.concat([pl.read_ipc(p) for p in parts[j]])
            for p in parts[j]:
                p.unlink()
            path = self.dir / f"bucket{j:05d}.arrow"
            frame.sort(self.by, maintain_order=True).write_ipc(path, compression="lz4")
            self._buckets.append(path)

    def buckets(self, columns: Sequence[str] | None = None) -> Iterator[pl.DataFrame]:
        """The rows in order, a bucket at a time (`finish` first)."""
        cols = list(columns) if columns else None
        if self._held is not None:
            if self._held.height:
                yield self._held.select(cols) if cols else self._held
            return
        for path in self._buckets or []:
            yield pl.read_ipc(path, columns=cols)

    def close(self) -> None:
        """Let go of the rows (the files removed)."""
        self._pending, self._held, self._buckets, self._raw = [], None, [], []
        shutil.rmtree(self.dir, ignore_errors=True)
