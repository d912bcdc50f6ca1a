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
  cleanup then runs after they are gone, and nothing they write comes after it. Its
  `submit` (which starts the workers and the pool's thread) runs with Ctrl-C, SIGTERM and
  SIGHUP held (`signals_held`): an interruption there left a pool that could not be shut
  down, or a worker started but not yet known to it, which then printed a traceback.

Standard library only: the supervising process imports it before it forks.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1
WATCH_SECONDS = 0.25
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP (a killed supervisor's) for a few steps that must
    not be cut in the middle: they act once the block is over. Their handlers are swapped
    for one that notes them, and what was noted is sent again after: blocking them with
    pthread_sigmask is not enough, since another thread (polars', the pool's) takes the
    signal and Python runs the handler in the main thread all the same. Outside the main
    thread (no handler can run there) nothing is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    swapped = {s: h for s in HELD
               if (h := signal.getsignal(s)) is not None and h is not signal.SIG_IGN}
    for s in swapped:
        signal.signal(s, lambda sig, frame: noted.append(sig))
    try:
        yield
    finally:
        for s, h in swapped.items():
            signal.signal(s, h)
        for s in dict.fromkeys(noted):
            os.kill(os.getpid(), s)


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
    """SIGKILL the worker processes of a `ProcessPoolExecutor`, then shut it down: with its
    workers gone its manager thread ends at once, and its queues' named semaphores are
    released here (else multiprocessing's resource tracker reports them as leaked when this
    process ends by `os._exit`)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        try:
            p.kill()
        except (OSError, ValueError):
            pass
    try:
        pool.shutdown(wait=True, cancel_futures=True)
    except RuntimeError:  # its thread never started: nothing more to wait for
        pass
    for p in processes:
        try:
            p.join(5)
        except (OSError, ValueError, AssertionError):
            pass


@functools.cache
def _pool_class() -> type:
    """ProcessPoolExecutor whose `submit` holds the signals (made on first use: the
    supervising parent does not import concurrent.futures)."""
    from concurrent.futures import ProcessPoolExecutor

    class Pool(ProcessPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            with signals_held():
                return super().submit(fn, *args, **kwargs)

    return Pool


@contextmanager
def process_pool(workers: int) -> Iterator:
    """A `ProcessPoolExecutor` of `workers` spawned processes that die with this one; an
    exception out of the block kills them before it goes on (see the module doc)."""
    import multiprocessing

    # spawn, not fork: forking a process whose polars thread pool runs can deadlock it
    pool = _pool_class()(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                         initializer=_worker_start, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        kill_workers(pool)
        raise
    pool.shutdown(wait=True)
