"""File descriptors of the merge: a job of thousands of ranks has more run files than a
process may hold open (1,024 is a common default soft limit on clusters).

The soft limit is raised to the hard limit where the system allows it (what a user would do
with `ulimit -n` by hand); if the runs still outnumber what is left, the engine's merger reads
them through a pool of at most that many descriptors, closing the oldest opened and opening a
run again at its next block. Every read is positional, so the bytes written are the same
whatever the pool size (tests/test_many.py); the cost is one open and close per block read
when the pool is smaller than the number of runs (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import os

# descriptors kept free for everything else a merge opens while it reads the runs: the
# output trace, .pcf/.row, Python's imports, worker pipes (a quarter of a tiny limit)
RESERVED = 64
SMALLEST_POOL = 2


def raise_open_file_limit() -> tuple[int, int] | None:
    """Raise this process' soft limit of open files to its hard limit (as `ulimit -n` can).
    Returns (soft, hard) after the change, or None where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == inf or (hard != inf and soft >= hard):
        return _finite(soft), _finite(hard)
    # an unlimited hard limit: macOS refuses an unlimited soft one, so ask for a large one
    target = hard if hard != inf else max(soft, 1 << 20)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _finite(soft), _finite(hard)


def _finite(limit: int) -> int:
    import resource

    return 1 << 30 if limit == resource.RLIM_INFINITY else limit


def open_descriptors() -> int:
    """How many descriptors this process holds now (an estimate where /proc is missing)."""
    for d in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(d))
        except OSError:
            continue
    return 32


def run_pool_size(runs: int) -> int:
    """How many run files the merger may hold open at once: 0 (all of them) when they fit
    under the soft limit, after raising it; otherwise what is left, less a reserve."""
    limits = raise_open_file_limit()
    if limits is None:
        return 0
    soft = limits[0]
    free = soft - open_descriptors() - min(RESERVED, soft // 4)
    if runs <= free:
        return 0
    return max(SMALLEST_POOL, free)
