"""The one registry of Paraver states, event types, value tables and communication tags.

The writer (`.prv`/`.pcf`), the docs (`docs/events.md` is generated from it and checked by a
test), the cfgs and the tests all take their numbers from here. Rules:

* Extrae's numbers are reused only where the meaning is exactly Extrae's (CUDA call 63000000,
  kernel 63000006, launch geometry 63000011-13, stream destination 63000008, MPI 5000000x,
  OpenACC 6600000x, state numbers and colours).
* Everything nsys-specific lives in the private range 67000000-67999999, which Extrae does not
  use. A number never changes meaning once released.
* Value 0 of a name-valued type means "end" (leaving the region), as in Extrae.

Each family of data has its own module here (cuda, nvtx, osrt, ...) with `EVENT_TYPES`,
`TYPE_RANGES`, `VALUE_FAMILIES`, `ENUMS`, `ENUM_TABLES` and `COMM_TAGS`; this package
collects every such module, so a new family is one new file.
"""

from __future__ import annotations

import importlib
import pkgutil

from .core import *  # noqa: F401,F403
from .core import PRIVATE_RANGE, STATES, EventType, TypeRange, ValueFamily  # noqa: F401
from .cuda import *  # noqa: F401,F403
from .nvtx import *  # noqa: F401,F403
from .osrt import *  # noqa: F401,F403

FAMILY_MODULES = tuple(
    importlib.import_module(f"{__name__}.{m.name}")
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
    if m.name != "core" and not m.name.startswith("_"))

EVENT_TYPES: tuple[EventType, ...] = tuple(t for m in FAMILY_MODULES for t in m.EVENT_TYPES)
TYPE_RANGES: tuple[TypeRange, ...] = tuple(r for m in FAMILY_MODULES for r in m.TYPE_RANGES)
VALUE_FAMILIES: dict[str, ValueFamily] = {
    f.name: f for m in FAMILY_MODULES for f in m.VALUE_FAMILIES}
ENUMS: dict[str, dict[int, str]] = {k: v for m in FAMILY_MODULES for k, v in m.ENUMS.items()}
ENUM_TABLES: dict[str, tuple[str, str]] = {
    k: v for m in FAMILY_MODULES for k, v in m.ENUM_TABLES.items()}
COMM_TAGS: dict[int, str] = {k: v for m in FAMILY_MODULES for k, v in m.COMM_TAGS.items()}
# numbers once released and no longer written: (first, last, what they meant), never reused
RETIRED: tuple[tuple[int, int, str], ...] = tuple(
    r for m in FAMILY_MODULES for r in getattr(m, "RETIRED", ()))
EVENT_TYPE_BY_NUMBER = {t.type: t for t in EVENT_TYPES}
TYPE_RANGE_BY_NAME = {r.name: r for r in TYPE_RANGES}


def type_range_of(type_: int) -> TypeRange | None:
    for r in TYPE_RANGES:
        if r.base <= type_ < r.base + r.size:
            return r
    return None


def describe_type(type_: int) -> tuple[str, str | None] | None:
    """(label, value family) of a registered type or of a type inside a registered range."""
    t = EVENT_TYPE_BY_NUMBER.get(type_)
    if t is not None:
        return t.label, t.values
    r = type_range_of(type_)
    if r is not None:
        return r.label.format(key=type_ - r.base), r.values
    return None
