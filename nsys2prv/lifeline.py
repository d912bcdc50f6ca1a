"""The processes of a run end with the process that started them.

`kill -9` of the command line's supervising process (`supervise.py`), or the death of its
terminal (SIGHUP), must not leave the command or its workers running: a worker that lives on
finishes later and replaces the trace the user meant to keep, and keeps the cores and the
memory the user thought freed. So:

* `die_with_parent(sig, parent)`: the kernel sends `sig` to this process when its parent
  dies (Linux's `PR_SET_PDEATHSIG`, through ctypes' `prctl`), at once if the parent is
  already gone; where prctl is missing or fails, a daemon thread watches `getppid()` (four
  times a second) and sends it.
* `process_pool(workers)`: a "spawn" `ProcessPoolExecutor` whose workers die (SIGKILL) with
  the process that started them: they hold nothing to clean up (what they write is in
  their parent's registered temporaries, see `supervise.register_temp`). When its `with`
  block ends by an exception (an interruption included), it kills them at once and waits
  for them, instead of waiting for their running tasks as `shutdown` does: the parent's
  cleanup then runs after they are gone, and nothing they write comes after it.

Standard library only: the supervising process imports it before it forks.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1
WATCH_SECONDS = 0.25


def _prctl_deathsig(sig: int) -> bool:
    """PR_SET_PDEATHSIG; False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int, sig: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os.kill(os.getpid(), sig)


def die_with_parent(sig: int, parent: int) -> None:
    """Have `sig` sent to this process when `parent` (its parent's pid, taken before it was
    started) dies; at once if it is already gone (it died before this call)."""
    if not _prctl_deathsig(sig):
        threading.Thread(target=_watch, args=(parent, sig), daemon=True,
                         name="nsys2prv-lifeline").start()
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def _worker_start(parent: int) -> None:
    """A pool worker's first act: die with the process that started it."""
    die_with_parent(signal.SIGKILL, parent)


def kill_workers(pool) -> None:
    """SIGKILL the worker processes of a `ProcessPoolExecutor` and reap them."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        try:
            p.kill()
        except (OSError, ValueError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        try:
            p.join(5)
        except (OSError, ValueError, AssertionError):
            pass


@contextmanager
def process_pool(workers: int) -> Iterator:
    """A `ProcessPoolExecutor` of `workers` spawned processes that die with this one; an
    exception out of the block kills them before it goes on (see the module doc)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: forking a process whose polars thread pool runs can deadlock it
    pool = ProcessPoolExecutor(max_workers=workers,
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_start, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        kill_workers(pool)
        raise
    pool.shutdown(wait=True)
