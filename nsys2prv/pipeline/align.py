"""Clock alignment of several reports on one timeline.

Each report's times count from its own session start. The base alignment puts every report on
UTC using `TARGET_INFO_SESSION_START_TIME`; the trace then starts (time 0) at the earliest
record of any report, so no absolute epoch nanoseconds are ever written.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field


@dataclass
class Alignment:
    """shift[i] is added to report i's local times; `epoch_of_zero` is trace time 0 in UTC ns."""

    shifts: list[int]
    epoch_of_zero: int | None
    method: str
    details: list[dict] = field(default_factory=list)


def session_alignment(metas: list[dict]) -> Alignment:
    epochs = [m["report"].get("session_start_ns") for m in metas]
    firsts = [m["time"]["first"] for m in metas]
    known = all(e is not None for e in epochs)
    if not known:
        if len(metas) > 1:
            warnings.warn("some reports have no session start time (legacy export): their "
                          "clocks are taken as already aligned", stacklevel=2)
        epochs = [0 if e is None else e for e in epochs]
    starts = [e + f for e, f in zip(epochs, firsts)]
    base = min(starts) if starts else 0
    shifts = [e - base for e in epochs]
    details = [{"report": m["report"]["name"], "offset_ns": s} for m, s in zip(metas, shifts)]
    return Alignment(shifts, base if known else None, "session start", details)
