"""OS runtime calls (libc/pthread functions traced by `nsys -t osrt`)."""

from __future__ import annotations

from .core import ValueFamily, event_type

KINDS = ("osrt",)

OSRT_CALL = 67_400_001
OSRT_RETURN_VALUE = 67_400_002
PTHREAD_CALL = 61_000_000  # Extrae's PTHREAD_BASE_EV with Extrae's values
THREAD_CPU = 67_400_010

EVENT_TYPES = (
    event_type(OSRT_CALL, "OS runtime call", "OS runtime",
               "libc/pthread call traced by nsys (value = function; 0 = end).",
               values="osrt_names", kinds=KINDS),
    event_type(OSRT_RETURN_VALUE, "OS runtime return value", "OS runtime",
               "Return value of the OS runtime call that ended.", kinds=KINDS),
    event_type(PTHREAD_CALL, "pthread call", "OS runtime",
               "pthread function traced as OS runtime call, with Extrae's values (0 = end).",
               values="pthread_call", extrae=True, kinds=KINDS),
    event_type(THREAD_CPU, "CPU of the thread", "OS runtime",
               "CPU core the thread runs on (value = core + 1; 0 = descheduled), from thread "
               "scheduling records (nsys --cpuctxsw).", kinds=("sched",)),
)
TYPE_RANGES = ()
VALUE_FAMILIES = (ValueFamily("osrt_names", "OS runtime function names"),)
ENUMS: dict[str, dict[int, str]] = {"pthread_call": {
    1: "pthread_exit", 2: "pthread_create", 3: "pthread_join", 4: "pthread_detach",
    5: "pthread_rwlock_*wrlock", 6: "pthread_rwlock_*rdlock", 7: "pthread_rwlock_unlock",
    8: "pthread_mutex_*lock", 9: "pthread_mutex_unlock", 10: "pthread_cond_signal",
    11: "pthread_cond_broadcast", 12: "pthread_cond_*wait", 13: "pthread_barrier_wait"}}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
