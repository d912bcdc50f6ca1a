"""CPU instruction-pointer samples (`COMPOSITE_EVENTS`) with their call stacks
(`SAMPLING_CALLCHAINS`), and the Python backtrace samples of `--python-sampling`.

`COMPOSITE_EVENTS` has one row per sample (id 1..N, `start`, `cpu`, `globalTid`; its columns
are the same in every export version from 2022.2 to 2026.1); `SAMPLING_CALLCHAINS` one row
per frame of the sample's stack (`callchains.py`). Every thread of the profiled process tree
is sampled, the profiler's own threads too, and most sampled threads may have no
`ThreadNames` row. Samples are read in chunks of ids, each with the frames of its samples:
the frames table is streamed once in (id, depth) order beside them, so memory holds one
chunk of samples and about `chunk_rows` frames.

Python sampling leaves no table of its own: nsys 2023.4 writes NVTX marks in a domain it
creates, "Python Backtrace" (`PYTHON_DOMAIN`), one a sample, with no text (SAMPLING.md 1.7).
They are not the user's annotations: `python_marks` reads them for this kind, and the NVTX
kind leaves that domain out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from ..report.report import Report
from . import callchains
from . import nvtx
from .base import (DEFAULT_CHUNK_ROWS, PID_FROM_GLOBAL, TID_FROM_GLOBAL, Column, has_rows,
                   read_chunks)

KIND = "samples"
TABLE = "COMPOSITE_EVENTS"
FRAMES = callchains.SAMPLING
PYTHON_DOMAIN = nvtx.PYTHON_DOMAIN

COLUMNS = (
    Column("id", ("id",)),
    Column("start", ("start",)),
    Column("cpu", ("cpu",)),
    Column("pid", ("globalTid",), transform=PID_FROM_GLOBAL),
    Column("tid", ("globalTid",), transform=TID_FROM_GLOBAL),
)


@dataclass
class Chunk:
    """Samples (id, start, cpu, pid, tid; sorted by id) and their frames (FRAME_SCHEMA,
    sorted by id and depth), and the table they come from (for the addresses of the frames
    that need them, `ChainFrames.addresses`)."""

    samples: pl.DataFrame
    frames: pl.DataFrame
    chains: callchains.ChainFrames | None


def available(report: Report) -> bool:
    """Whether the export has CPU samples or Python backtrace samples."""
    return has_rows(report, TABLE) or has_python_marks(report)


def has_python_marks(report: Report) -> bool:
    return nvtx.names_a_domain(report, PYTHON_DOMAIN)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[Chunk]:
    """The samples in id order (within the report's window, if any), in chunks of about
    `chunk_rows` frames, each with the frames of its samples."""
    table = report.table(TABLE)
    if table is None or not has_rows(report, TABLE):
        return
    where, frame_where = "", ""
    if report.window is not None:
        lo, hi = report.window
        where = f'"start" >= {int(lo)} AND "start" < {int(hi)}'
        first, last = report.db.rows(f'SELECT min(id), max(id) FROM "{table}" WHERE {where}')[0]
        if first is None:
            return
        frame_where = f'"id" BETWEEN {int(first)} AND {int(last)}'
    frames = None
    if has_rows(report, FRAMES):
        frames = callchains.ChainFrames(report, FRAMES, chunk_rows, frame_where)
    try:
        for df in read_chunks(report, TABLE, COLUMNS, _samples_per_chunk(report, chunk_rows),
                              where=where):
            df = df.drop("row_id")
            got = (frames.of(df["id"].to_numpy()) if frames is not None
                   else pl.DataFrame(schema=callchains.FRAME_SCHEMA))
            yield Chunk(df, got, frames)
    finally:
        if frames is not None:
            frames.close()


FRAMES_PER_ROW = 4  # a chunk holds about 4 x chunk_rows frames: four int64 columns each (a
#                    chunk of 100k rows of a kernel table has 20), and per chunk a sample
#                    costs as much as its frames (10k samples of 40 frames: 13 MB of frames)


def _samples_per_chunk(report: Report, chunk_rows: int) -> int:
    """Samples per chunk, at most `chunk_rows`, so that a chunk holds about FRAMES_PER_ROW x
    `chunk_rows` frames (frames per sample from the tables' last rowids: no count scans the
    tables)."""
    samples = report.db.scalar(f'SELECT max(rowid) FROM "{report.table(TABLE)}"') or 1
    real = report.table(FRAMES)
    frames = report.db.scalar(f'SELECT max(rowid) FROM "{real}"') if real else None
    per_sample = max(1.0, (frames or samples) / max(samples, 1))
    return max(1, min(chunk_rows, int(FRAMES_PER_ROW * chunk_rows / per_sample)))


PYTHON_COLUMNS = (
    Column("start", ("start",)),
    Column("pid", ("globalTid",), transform=PID_FROM_GLOBAL),
    Column("tid", ("globalTid",), transform=TID_FROM_GLOBAL),
    Column("domain_id", ("domainId",), fallback="0"),
)


def python_marks(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS
                 ) -> Iterator[pl.DataFrame]:
    """The Python backtrace samples (start, pid, tid, row_id): the NVTX marks of the
    'Python Backtrace' domain of their process."""
    if not has_python_marks(report):
        return
    domains = nvtx.domains(report).filter(pl.col("name") == PYTHON_DOMAIN).select(
        "pid", "domain_id")
    marks = sorted(nvtx.event_type_ids(report)["mark"])
    where = ("eventType IN (" + ",".join(map(str, marks)) + ") AND domainId IN ("
             + ",".join(map(str, sorted(set(domains["domain_id"].to_list())))) + ")")
    for df in read_chunks(report, nvtx.TABLE, PYTHON_COLUMNS, chunk_rows, where=where,
                          windowed=True):
        df = df.join(domains, on=["pid", "domain_id"], how="semi", maintain_order="left")
        if df.height:
            yield df.drop("domain_id")
