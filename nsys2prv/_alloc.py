"""Memory allocator settings, applied before polars is imported (nsys2prv/__init__.py).

polars allocates with jemalloc, read-ahead threads with glibc's malloc. With their default
arenas (several per thread) memory freed after one chunk is often not the memory the next
chunk reuses, and the resident set of a 21M-activity translation grew ~10% higher, with a
third more system time in page faults (benchmarks/RESULTS.md). One arena each fixes both;
jemalloc returning freed pages after 100 ms instead of polars' 500 ms keeps the peak of a
21M-activity translation under 1 GiB at no measured cost in time.
glibc's malloc serves a block from its heap once a larger one was freed (its mmap threshold
rises to the largest block freed, up to 32 MiB), and a heap fragmented by the analysis'
per-chunk arrays is not given back: analyze on the 30M benchmark trace held 100-200 MB
more than it used. The analysis (`map_large_blocks`) fixes the threshold at 4 MiB, which
maps every larger array on its own and returns it when freed (10M trace: 553 -> 475 MB
for 4 % CPU; 1 MiB: the same memory for 18 %, in page faults); the translation keeps
glibc's default (a fixed threshold cost it ~7 % CPU for 2 % less memory):
benchmarks/RESULTS.md, round 11. A translation that an analysis then reads in the same
process (`api.translate_stream`) fixes it from its start: the heap its chunks left behind
was fragmented, and the analysis' arrays were carved from it rather than mapped (round 15).
The analysis trades some memory back for time, below the peak of an analysis of reports
(their translation's): glibc keeps up to 64 MiB free at the top of its heap (the default
trim threshold, 128 KiB, stays once the mmap threshold is fixed, and every chunk's arrays
were faulted in again), and `nsys2prv analyze` has jemalloc keep freed pages for 1 s
(10M benchmark trace: 3.8M -> 1.2M page faults, system time 15-16 -> 9-9.5 s, largest
process 447-449 -> 476-480 MB; its export: the same peak; benchmarks/RESULTS.md, round
19). The analysis gives memory back before its peaks itself (`trim`).
A value the user set in the environment wins.
"""

from __future__ import annotations

import ctypes
import os
import sys

JEMALLOC_VAR = "_RJEM_MALLOC_CONF"  # polars' jemalloc reads this when it loads
MAIN_CONF = "narenas:1,dirty_decay_ms:100,muzzy_decay_ms:0"
ANALYSIS_CONF = "narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0"  # `nsys2prv analyze`
# polars sets the variable itself when it is imported first: then it is not the user's
USER_SET = JEMALLOC_VAR in os.environ and "polars" not in sys.modules
_M_ARENA_MAX = -8  # glibc mallopt parameters
_M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 64 << 20


def setup() -> None:
    if not USER_SET and "polars" not in sys.modules:
        os.environ.setdefault(JEMALLOC_VAR, MAIN_CONF)
    if "MALLOC_ARENA_MAX" not in os.environ:
        _mallopt(_M_ARENA_MAX, 1)


def for_analysis() -> None:
    """The jemalloc setting of a process that will analyse (module docstring): called by
    the command line before polars is imported; a value the user set wins."""
    if not USER_SET and "polars" not in sys.modules:
        os.environ[JEMALLOC_VAR] = ANALYSIS_CONF


def map_large_blocks() -> None:
    """Blocks of MMAP_THRESHOLD and more mapped on their own from now on (the analysis'
    streamed passes: module docstring), and up to TRIM_THRESHOLD kept free at the top of
    the heap, unless the user set the thresholds."""
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        _mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def trim() -> None:
    """Give the free pages inside glibc's heap back to the system (`malloc_trim`)."""
    _glibc("malloc_trim", 0)


def _mallopt(param: int, value: int) -> None:
    _glibc("mallopt", param, value)


def _glibc(name: str, *args: int) -> None:
    try:
        getattr(ctypes.CDLL(None), name)(*args)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def users_choice(value: str | None) -> bool:
    """Whether the jemalloc setting `value` is the user's (kept for worker processes) rather
    than nsys2prv's (MAIN_CONF or ANALYSIS_CONF, which polars appends to its own defaults)
    or polars' alone."""
    if USER_SET:
        return True
    return (value is not None and MAIN_CONF not in value and ANALYSIS_CONF not in value
            and not value.startswith("dirty_decay_ms:"))
