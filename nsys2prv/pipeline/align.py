"""Clock alignment of several reports on one timeline, and how good it is.

1. Session start: every report's times count from its own session start, recorded in UTC
   (`TARGET_INFO_SESSION_START_TIME`). Adding it puts all reports on the hosts' clocks, which
   agree within NTP precision (typically 1-10 ms between hosts).
2. Sync point (default): an event that ends at the same moment on every rank — the end of
   `MPI_Init` when MPI is traced, else the end of the first NCCL kernel, or an NVTX range/mark
   the user names (`--sync-nvtx`). Reports on one host share a clock, so like Extrae's merger
   (`-syn-by-node`) one correction is applied per host: the mean sync time of each host is
   moved onto the mean of the first host. `by_task` corrects every report on its own.
3. Residual skew: the spread (max - min) of the sync times after alignment, and, as an
   independent check, the spread of another sync point present in every report.

The trace starts (time 0) at the earliest record of any report; no epoch times are written.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

AUTO_SYNC = ("MPI_Init", "NCCL")


@dataclass
class Alignment:
    """shift[i] is added to report i's local times; `epoch_of_zero` is trace time 0 in UTC ns."""

    shifts: list[int]
    epoch_of_zero: int | None
    method: str
    details: list[dict] = field(default_factory=list)
    residual_ns: int | None = None  # spread of the sync point used, after alignment
    check_point: str | None = None  # another sync point used as an independent check
    check_spread_ns: int | None = None


def mean(values: Iterable[int]) -> int | float:
    """statistics.mean of integers, which these times are: the int when the sum divides, else
    the nearest float (the same value; statistics imports fractions and decimal, which a
    translation does not otherwise need at start-up)."""
    xs = list(values)
    q, r = divmod(sum(xs), len(xs))
    return q if r == 0 else sum(xs) / len(xs)


def align(metas: list[dict], hosts: list[str], sync: str | None = "auto",
          by_task: bool = False, reference: int = 0) -> Alignment:
    """Offsets of every report (see module docstring). `sync`: "auto", a sync point name
    ("MPI_Init", "NCCL", "nvtx:NAME") or None for session start only. The clock of report
    `reference` (and its host) is kept; the others are moved onto it."""
    epochs = [m["report"].get("session_start_ns") for m in metas]
    known = all(e is not None for e in epochs)
    if not known and len(metas) > 1:
        warnings.warn("some reports have no session start time (legacy export): their clocks "
                      "are taken as already aligned", stacklevel=2)
    epochs = [0 if e is None else int(e) for e in epochs]
    points = [m.get("extra", {}).get("sync_points", {}) for m in metas]
    method = "session start"
    corrections = [0] * len(metas)
    used = _choose(points, sync) if len(metas) > 1 else None
    if sync not in (None, "auto") and used is None and len(metas) > 1:
        warnings.warn(f"sync point {sync!r} is missing from some reports: clocks aligned on "
                      "session start only", stacklevel=2)
    residual = None
    if used is not None:
        aligned = [points[i][used] + epochs[i] for i in range(len(metas))]
        groups: dict[str, list[int]] = {}
        for i in range(len(metas)):
            groups.setdefault(f"report {i}" if by_task else hosts[i], []).append(i)
        ref_group = f"report {reference}" if by_task else hosts[reference]
        ref = mean(aligned[i] for i in groups[ref_group])
        for members in groups.values():
            c = round(ref - mean(aligned[i] for i in members))
            for i in members:
                corrections[i] = c
        after = [aligned[i] + corrections[i] for i in range(len(metas))]
        residual = int(max(after) - min(after))
        method = f"session start + end of {used} " + ("per report" if by_task else "per host")
    shifts_abs = [epochs[i] + corrections[i] for i in range(len(metas))]
    starts = [shifts_abs[i] + m["time"]["first"] for i, m in enumerate(metas)]
    base = min(starts) if starts else 0
    shifts = [s - base for s in shifts_abs]
    details = [{"report": m["report"]["name"], "host": hosts[i],
                "session_offset_ns": epochs[i] - min(epochs),
                "sync_correction_ns": corrections[i], "offset_ns": shifts[i]}
               for i, m in enumerate(metas)]
    out = Alignment(shifts, base if known else None, method, details, residual)
    # An independent estimate: another sync point present in every report.
    for other in [p for p in AUTO_SYNC if p != used] + sorted(
            {k for p in points for k in p if k.startswith("nvtx:") and k != used}):
        if len(metas) > 1 and all(other in p for p in points):
            after = [points[i][other] + shifts[i] for i in range(len(metas))]
            out.check_point, out.check_spread_ns = other, int(max(after) - min(after))
            break
    return out


def _choose(points: list[dict], sync: str | None) -> str | None:
    if sync is None:
        return None
    candidates = AUTO_SYNC if sync == "auto" else (sync,)
    for name in candidates:
        if all(name in p for p in points):
            return name
    return None
