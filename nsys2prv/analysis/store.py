"""What the analysis' pass keeps of each window for the sections that read it again after
the pass, on disk: memory of one window, whatever the trace's length.

The model's pass (`model.analyze_path`) reads the trace window by window; the sections that
need every activity (the step, the layers, the kernels' metrics, the steps' tables) read
them again once the pass is over, when what they look for is known (the step's instances,
the ranges). `WindowStore` writes each window's frames as they are made (lz4 Arrow IPC, one
file per window and table, in a temporary directory registered with the supervisor and
removed by `close` on every exit path, as `idle.WindowSpill`) and gives them back in window
order, one window at a time. Sections keep per-group sums over the windows (per range, per
step, per device: bounded by those, not by the activities).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl


class WindowStore:
    """Frames of named tables written window by window and read back in the order written.
    `add(table, frame)` appends one part (empty frames are kept as their schema only);
    `parts(table)` yields them in order. Memory: the part being read.

    A table can also be filed by a time column (`add_timed`): each row goes to the bucket
    of the window its time falls in (`window` declares each window's start, in order), so
    that `buckets` gives the rows bucket by bucket in time order, each bucket sorted (rows
    that come in a later window than their time's, an activity that ends windows after it
    starts, are filed under the earlier bucket: a few per window)."""

    def __init__(self, prefix: str = "nsys2prv-store-", dir: str | Path | None = None
                 ) -> None:
        """`dir`: where its directory is made (default: the system's temporary folder)."""
        import tempfile

        from ..lifeline import signals_held
        from ..supervise import register_temp

        self.dir = None
        try:
            with signals_held():  # made and registered in one step (a Ctrl-C waits)
                self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
                register_temp(self.dir)
        except BaseException:  # interrupted as it was made: nobody else can remove it
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self._parts: dict[str, list[Path | pl.DataFrame]] = {}
        self._rows: dict[str, int] = {}
        self.starts: list[int] = []  # each window's start (`window`)
        # timed tables: table -> bucket -> parts, and the schema of each table
        self._timed: dict[str, dict[int, list[Path]]] = {}
        self._schema: dict[str, pl.Schema] = {}
        self._sorted: dict[str, tuple[str, ...]] = {}
        self._files = 0

    def window(self, start: int) -> None:
        """A window starts (in time order): rows of timed tables at or after `start` and
        before the next window's start are filed under it."""
        self.starts.append(int(start))

    def add_timed(self, table: str, frame: pl.DataFrame, time: str,
                  sorted_by: Sequence[str] | None = None) -> None:
        """Rows of the current window (the last declared) filed by their `time` column;
        `sorted_by`: the frame is sorted so (a bucket of one file is read as it is)."""
        self._schema.setdefault(table, frame.schema)
        self._timed.setdefault(table, {})
        if sorted_by is not None:
            self._sorted[table] = tuple(sorted_by)
        if frame.height == 0:
            return
        import numpy as np

        current = len(self.starts) - 1
        t = frame[time].to_numpy()
        bucket = np.searchsorted(np.asarray(self.starts, dtype=np.int64), t, side="right") - 1
        bucket = np.clip(bucket, 0, current)
        if bucket.min() == current:
            self._write_timed(table, current, frame)
        else:
            tagged = frame.with_columns(pl.Series("_b", bucket, dtype=pl.Int64))
            for (b,), part in tagged.partition_by("_b", as_dict=True,
                                                  maintain_order=True).items():
                self._write_timed(table, int(b), part.drop("_b"))
        self._rows[table] = self._rows.get(table, 0) + frame.height

    def _write_timed(self, table: str, bucket: int, frame: pl.DataFrame) -> None:
        path = self.dir / f"{table}.t{bucket:06d}.{self._files:07d}.arrow"
        self._files += 1
        frame.write_ipc(path, compression="lz4")
        self._timed[table].setdefault(bucket, []).append(path)

    def buckets(self, table: str, by: Sequence[str], columns: Sequence[str] | None = None
                ) -> Iterator[pl.DataFrame]:
        """The rows of a timed table bucket by bucket in time order, each bucket sorted by
        `by` (stably: rows of one bucket in the order written). Memory: one bucket."""
        for b in self.bucket_ids(table):
            yield self.bucket(table, b, by, columns)

    def bucket_ids(self, table: str) -> list[int]:
        """The buckets of a timed table that hold rows, in time order."""
        return sorted(self._timed.get(table, {}))

    def bucket(self, table: str, b: int, by: Sequence[str],
               columns: Sequence[str] | None = None) -> pl.DataFrame:
        """The rows of bucket `b` of a timed table (none: an empty frame), sorted by `by`."""
        files = self._timed.get(table, {}).get(b)
        cols = None if not columns else list(dict.fromkeys([*columns, *by]))
        if not files:
            schema = self._schema.get(table, {})
            frame = pl.DataFrame(schema=schema)
            return frame.select(list(columns)) if columns and schema else frame
        parts = [pl.read_ipc(f, columns=cols) for f in files]
        if len(parts) == 1 and self._sorted.get(table) == tuple(by):
            frame = parts[0]
        else:
            frame = pl.concat(parts).sort(list(by), maintain_order=True)
        return frame.select(list(columns)) if columns else frame

    def add(self, table: str, frame: pl.DataFrame) -> None:
        parts = self._parts.setdefault(table, [])
        if frame.height == 0:  # nothing to write: its schema stands in
            parts.append(frame.clear())
            return
        path = self.dir / f"{table}.{len(parts):06d}.arrow"
        frame.write_ipc(path, compression="lz4")
        parts.append(path)
        self._rows[table] = self._rows.get(table, 0) + frame.height

    def rows(self, table: str) -> int:
        """Rows written to `table`."""
        return self._rows.get(table, 0)

    def parts(self, table: str, columns: Sequence[str] | None = None
              ) -> Iterator[pl.DataFrame]:
        """The parts of `table` in the order written (with `columns` only)."""
        for part in self._parts.get(table, []):
            if isinstance(part, pl.DataFrame):
                frame = part
            else:
                frame = pl.read_ipc(part, columns=list(columns) if columns else None)
            yield frame.select(list(columns)) if columns else frame

    def close(self) -> None:
        """Remove the files (the store cannot be read after)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self._parts.clear()


def handed_over(frame: pl.DataFrame, path: Path) -> Path:
    """`frame` written to `path` for another process to read (`taken_over`): what a
    process hands over of its results goes through a file, not its pipe (pickled, a frame
    is copied two or three times in the sender's memory: the peak of a `diff` side at its
    end)."""
    frame.write_ipc(path)
    return path


def taken_over(value: pl.DataFrame | Path) -> pl.DataFrame:
    """A frame `handed_over` (read from its file), or one given as it is."""
    return pl.read_ipc(value) if isinstance(value, Path) else value

