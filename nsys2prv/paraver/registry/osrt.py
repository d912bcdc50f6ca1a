"""OS runtime calls (libc/pthread functions traced by `nsys -t osrt`)."""

from __future__ import annotations

from .core import ValueFamily, event_type

KINDS = ("osrt",)

OSRT_CALL = 67_400_001
OSRT_RETURN_VALUE = 67_400_002

EVENT_TYPES = (
    event_type(OSRT_CALL, "OS runtime call", "OS runtime",
               "libc/pthread call traced by nsys (value = function; 0 = end).",
               values="osrt_names", kinds=KINDS),
    event_type(OSRT_RETURN_VALUE, "OS runtime return value", "OS runtime",
               "Return value of the OS runtime call that ended.", kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = (ValueFamily("osrt_names", "OS runtime function names"),)
ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
