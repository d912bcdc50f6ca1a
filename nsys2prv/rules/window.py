"""The time range a rule looks at: `start`/`end`, an NVTX range, or one process/thread.

Without any of these options a rule reads every row. With them, nsys keeps the rows that
overlap the range (see :class:`~nsys2prv.rules.base.Window`); `nvtx=NAME[@DOMAIN][/N]` takes
the range from the N-th (default first, by start time) NVTX push/pop or start/end range of
that name, and explicit `start`/`end` override its ends.
"""

from __future__ import annotations

from ..errors import UsageError
from .base import END_OF_TIME, RuleInput, Skip, Window, sql_text

# NVTX event types of ranges: push/pop and start/end, plain and "T" (nvtxt) variants.
NVTX_RANGE_TYPES = (59, 60, 70, 71)
NVTX_DOMAIN_CREATE = 75


def check_times(rule: str, options: dict) -> None:
    """Spec-level checks that need no export (so they fail before any file is opened)."""
    start, end = options.get("start"), options.get("end")
    if start is not None and end is not None and start > end:
        raise UsageError(f"{rule}: start ({start}) is after end ({end})")
    if options.get("nvtx") is not None and (_given_id(options, "process") is not None
                                            or _given_id(options, "thread") is not None):
        raise UsageError(f"{rule}: nvtx cannot be combined with process or thread")


def _given_id(options: dict, name: str) -> int | None:
    """A process/thread filter; a negative id (the default) means none."""
    value = options.get(name)
    return None if value is None or value < 0 else int(value)


def build_window(inp: RuleInput, options: dict) -> Window | None:
    """The window the options ask for, or None when they ask for none."""
    start, end, nvtx = options.get("start"), options.get("end"), options.get("nvtx")
    pid, tid = _given_id(options, "process"), _given_id(options, "thread")
    if all(v is None for v in (start, end, nvtx, pid, tid)):
        return None
    nvtx_tid = None
    if nvtx is not None:
        r_start, r_end, nvtx_tid = find_nvtx_range(inp, nvtx)
        start = r_start if start is None else start
        end = r_end if end is None else end
    start = 0 if start is None else start
    end = END_OF_TIME if end is None else end
    if start > end:
        raise Skip(f"the time range of nvtx={nvtx} starts ({start}) after it ends ({end})")
    return Window(start, end, nvtx_tid, pid, tid)


def split_nvtx_name(text: str) -> tuple[str, int]:
    """`NAME[@DOMAIN]/N` -> (`NAME[@DOMAIN]`, N); a suffix that is not a whole number >= 0
    belongs to the name."""
    name, slash, index = text.rpartition("/")
    if slash:
        try:
            n = int(index)
        except ValueError:
            return text, 0
        if n >= 0:
            return name, n
    return text, 0


def find_nvtx_range(inp: RuleInput, text: str) -> tuple[int, int, int]:
    """(start, end, globalTid) of the range `text` names (see the module docstring).

    A range in a named domain is `NAME@DOMAIN` (the domain found from the domain-creation
    event of the same process); a range in the default domain is just `NAME`.
    """
    table = inp.table("NVTX_EVENTS")
    if table is None:
        raise Skip(f"{inp.name} has no NVTX data (needed by nvtx={text})")
    strings = inp.table("StringIds")
    if strings is None:
        raise Skip(f"{inp.name} has no string table (StringIds)")
    name, index = split_nvtx_name(text)
    cols = set(inp.columns(table))
    label = "r.text" if "text" in cols else "NULL"
    join = ""
    if "textId" in cols:
        join += f' LEFT JOIN "{strings}" AS s ON s.id = r.textId'
        label = f"coalesce({label}, s.value)"
    if "domainId" in cols and "text" in cols:
        join += (f' LEFT JOIN "{table}" AS d ON d.eventType = {NVTX_DOMAIN_CREATE} '
                 "AND d.domainId = r.domainId AND (d.globalTid >> 24) = (r.globalTid >> 24)")
        label += " || coalesce('@' || d.text, '')"
    types = ", ".join(map(str, NVTX_RANGE_TYPES))
    sql = (f'SELECT r.start, r."end", r.globalTid FROM "{table}" AS r{join} '
           f"WHERE r.eventType IN ({types}) AND {label} = {sql_text(name)} "
           f"ORDER BY r.start, r.rowid LIMIT 1 OFFSET {index}")
    rows = inp.report.db.rows(sql)
    if not rows:
        raise Skip(f"NVTX range '{text}' is not in {inp.name}")
    start, end, global_tid = rows[0]
    return int(start), END_OF_TIME if end is None else int(end), int(global_tid)
