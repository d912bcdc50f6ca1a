"""How many processes to run at once, and how large their buffers are, for a memory budget.

Analysts translate on shared login nodes: the memory a translation takes must not depend on
the core count or on the number of reports. The budget (default 2 GiB) is split between the
processes that run at once; each process sizes its read chunks, sort spills and merge blocks
from its share, and no more processes start than the budget can hold.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

DEFAULT_MEMORY = 2 << 30
# Below this share a process's fixed cost (interpreter, libraries, one chunk of every
# stage) dominates: fewer processes then, not smaller ones.
MIN_SHARE = 512 << 20
_MiB = 1 << 20


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


@dataclass(frozen=True)
class Budget:
    """A memory budget split between `workers` processes running at once."""

    total: int = DEFAULT_MEMORY
    workers: int = 1

    @property
    def share(self) -> int:
        return self.total // self.workers

    @property
    def spill_bytes(self) -> int:
        """Records a sorter holds before it writes a sorted run (two sorters per report,
        plus a copy while sorting, plus the chunk being translated)."""
        return _clamp(self.share // 8, 32 * _MiB, 256 * _MiB)

    @property
    def chunk_rows(self) -> int:
        """Rows read from a table at a time. A chunk of kernels lives as ~10 polars frames of
        ~30 columns while it is translated; 100k rows (the most) keeps that near 200 MB and
        was as fast as 250k at 21M activities (benchmarks/RESULTS.md)."""
        return _clamp(self.share // 20480, 32_768, 100_000)

    @property
    def merge_bytes(self) -> int:
        """Blocks the k-way merge buffers (one per run) and the blocks being formatted."""
        return _clamp(self.share // 8, 32 * _MiB, 256 * _MiB)


def plan(memory: int | None, jobs: int, tasks: int) -> Budget:
    """The budget for `tasks` pieces of work with at most `jobs` processes at once."""
    total = memory or DEFAULT_MEMORY
    workers = max(1, min(jobs, tasks, total // MIN_SHARE))
    return Budget(total, workers)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'2G', '512M', '1.5GiB', '1073741824' -> bytes (binary multiples)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 512M or 4G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def memory_size(text: str) -> int:
    """argparse type of --memory: a size such as 512M or 4G (at least 256M)."""
    try:
        size = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if size < 256 << 20:
        raise argparse.ArgumentTypeError(f"{text}: at least 256M is needed")
    return size


# polars allocates through jemalloc, which keeps freed pages for 10 s by default: with
# chunk-sized buffers coming and going, every process then holds hundreds of MB it no longer
# uses. Worker processes, which run several at once, give them back within 0.2 s (jemalloc's
# background thread does it). The main process keeps the default: one process, and the
# prompt return costs system time.
WORKER_MALLOC_CONF = "narenas:1,background_thread:true,dirty_decay_ms:200,muzzy_decay_ms:0"
_MALLOC_VAR = "_RJEM_MALLOC_CONF"


POLARS_THREADS_VAR = "POLARS_MAX_THREADS"


@contextmanager
def worker_environment(share: int | None = None) -> Iterator[None]:
    """Environment for starting worker processes (they read it when polars loads); a value
    the user set wins. `share`: the number of workers that run at once, each busy all the
    time (the two sides of a diff): each gets that share of the cores for polars' threads,
    whose pools would otherwise all be as wide as the machine and fight for it."""
    from .. import _alloc

    saved = {k: os.environ.get(k) for k in (_MALLOC_VAR, POLARS_THREADS_VAR)}
    if not _alloc.users_choice(os.environ.get(_MALLOC_VAR)):
        os.environ[_MALLOC_VAR] = WORKER_MALLOC_CONF
    if share and saved[POLARS_THREADS_VAR] is None:
        os.environ[POLARS_THREADS_VAR] = str(max(1, (os.cpu_count() or 1) // share))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
