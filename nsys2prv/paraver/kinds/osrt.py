"""OS runtime calls -> call events (with return values) on CPU threads, Extrae's pthread call
events for the pthread functions, the state of the thread while it waits in them, and, for
the calls nsys kept a call stack of, their callers at their entry (Extrae's 70000000 + level,
`_stacks.push_callers`)."""

from __future__ import annotations

import re

import polars as pl

from ...report.report import Report
from ...sources import osrt as source
from .. import records as R
from .. import registry as reg
from .base import (Context, NameClassifier, Translator, fix_times, intervals, name_value, push,
                   start_end)


def translate(report: Report, ctx: Context) -> None:
    state_of = NameClassifier(ctx.names, "osrt_names", call_state, pl.Int8, reg.STATE_OTHERS)
    pthread_of = NameClassifier(ctx.names, "osrt_names", pthread_value, pl.Int64, 0)
    callers = None  # the export's call stacks, when it kept some (else no join is made)
    if source.has_stacks(report):
        from ._stacks import Callers  # only for an export with call stacks (start-up)

        callers = Callers(ctx, report, cuda=False)
    try:
        for chunk in source.read(report, ctx.chunk_rows):
            _translate_chunk(chunk, ctx, state_of, pthread_of, callers)
    finally:
        if callers is not None:
            callers.close()


def _translate_chunk(chunk: pl.DataFrame, ctx: Context, state_of: NameClassifier,
                     pthread_of: NameClassifier, callers) -> None:
    c = pl.col
    df = fix_times(chunk, ctx, "OS runtime calls")
    df = df.with_columns(ctx.rows.cpu_rows(df, runtime_only=True).alias("row"),
                         state_of(chunk["name_id"]).alias("state"),
                         pthread_of(chunk["name_id"]).alias("pthread"))
    df = name_value(df, ctx, "osrt_names", "name_id", "OS runtime calls")
    ctx.spans.add(df["row"], df["start"], df["end"])
    ctx.count("osrt", df.height)
    frames = start_end(df, R.SRC_OSRT, reg.OSRT_CALL, c("value_name_id"),
                       end_text=R.pairs((reg.OSRT_RETURN_VALUE, c("return_value"))))
    pthread = df.filter(c("pthread") != 0)
    if pthread.height:
        ctx.count("pthread", pthread.height)
        frames += start_end(pthread, R.SRC_OSRT, reg.PTHREAD_CALL, c("pthread"))
    push(ctx, frames)
    ctx.intervals(intervals(df, c("state"), R.SRC_OSRT))
    if callers is not None:  # _stacks.Callers
        callers.push(df)


# What an OS runtime call means for the thread's state, by function name (checked in order).
_SYNC = re.compile(r"^(pthread_(mutex_(timed)?lock|rwlock_(timed)?(rd|wr)lock|cond_(timed|clock)?wait|"
                   r"barrier_wait|spin_lock)|sem_(timed|clock)?wait)")
_FORK_JOIN = re.compile(r"^(pthread_(create|join|timedjoin_np|tryjoin_np|detach)|fork|vfork|"
                        r"clone|wait|waitpid|waitid)$")
_BLOCKED = re.compile(r"^(e?poll|epoll_p?wait|p?select|ppoll|pselect6?|nanosleep|clock_nanosleep|"
                      r"u?sleep|sched_yield|pause|sigwait|sigtimedwait|sigsuspend|futex|accept4?|"
                      r"msgrcv)$")
_IO = re.compile(r"^(read|write|pread(64)?|pwrite(64)?|readv|writev|preadv|pwritev|open(64)?|"
                 r"openat|close|fopen(64)?|fclose|fread|fwrite|fflush|fsync|fdatasync|fgets|fputs|"
                 r"getc|putc|recv|recvfrom|recvmsg|send|sendto|sendmsg|connect|socket|"
                 r"mmap(64)?|munmap|truncate|ftruncate|unlink|rename|stat|fstat|lstat)$")


def call_state(name: str) -> int:
    """Paraver state of a thread inside OS runtime call `name` (Extrae's pthread states:
    Synchronization for locks/waits, Scheduling and Fork/Join for create/join; Blocked for
    sleeps and polls; I/O for file and socket calls; Others for the rest)."""
    if _SYNC.match(name):
        return reg.STATE_SYNC
    if _FORK_JOIN.match(name):
        return reg.STATE_FORK_JOIN
    if _BLOCKED.match(name):
        return reg.STATE_BLOCKED
    if _IO.match(name):
        return reg.STATE_IO
    return reg.STATE_OTHERS


# Extrae's pthread call values (type 61000000), by function name.
_PTHREAD_VALUES = (
    (re.compile(r"^pthread_exit$"), 1), (re.compile(r"^pthread_create$"), 2),
    (re.compile(r"^pthread_(timed|try)?join(_np)?$"), 3), (re.compile(r"^pthread_detach$"), 4),
    (re.compile(r"^pthread_rwlock_(timed|try)?wrlock$"), 5),
    (re.compile(r"^pthread_rwlock_(timed|try)?rdlock$"), 6),
    (re.compile(r"^pthread_rwlock_unlock$"), 7),
    (re.compile(r"^pthread_mutex_(timed|try)?lock$"), 8),
    (re.compile(r"^pthread_mutex_unlock$"), 9), (re.compile(r"^pthread_cond_signal$"), 10),
    (re.compile(r"^pthread_cond_broadcast$"), 11),
    (re.compile(r"^pthread_cond_(timed|clock)?wait$"), 12),
    (re.compile(r"^pthread_barrier_wait$"), 13),
)


def pthread_value(name: str) -> int:
    """Extrae's value of `name` in the pthread call type, 0 if it is not one of those."""
    for pattern, value in _PTHREAD_VALUES:
        if pattern.match(name):
            return value
    return 0


TRANSLATORS = (Translator("osrt", 60, "OS runtime calls", source.available, translate,
                          (source.TABLE,)),)
