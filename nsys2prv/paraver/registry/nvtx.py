"""NVTX: push/pop ranges per domain, start/end ranges on lanes, marks, categories."""

from __future__ import annotations

from .core import TypeRange, ValueFamily, event_type

KINDS = ("nvtx",)

NVTX_PUSHPOP_BASE = 67_300_000  # + domain index (0 = default domain)
NVTX_STARTEND_BASE = 67_301_000  # + lane (overlapping start/end ranges of one thread)
NVTX_MARK = 67_302_000
NVTX_CATEGORY = 67_302_001
NVTX_DOMAIN_MAX = 1000
NVTX_LANE_MAX = 1000

EVENT_TYPES = (
    event_type(NVTX_MARK, "NVTX mark", "NVTX",
               "Instantaneous NVTX marker on a CPU thread (value = text, any domain).",
               values="nvtx_names", kinds=KINDS),
    event_type(NVTX_CATEGORY, "NVTX category", "NVTX",
               "Category of the NVTX range or mark starting (value = 'domain: category').",
               values="nvtx_categories", kinds=KINDS),
)

PUSHPOP = TypeRange(
    "nvtx_pushpop", NVTX_PUSHPOP_BASE, NVTX_DOMAIN_MAX, "NVTX push/pop: {key}", "NVTX",
    "Nested push/pop ranges of one NVTX domain (base + domain index; index 0 is the default "
    "domain, the others are numbered in name order). Value = range text; 0 = end. Ranges "
    "nest: view them with the 'Stacked Val' compose function.", values="nvtx_names",
    kinds=frozenset(KINDS), fixed={"": 0})
STARTEND = TypeRange(
    "nvtx_startend", NVTX_STARTEND_BASE, NVTX_LANE_MAX, "NVTX start/end range (lane {key})",
    "NVTX", "Start/end ranges of all domains on the thread that started them; ranges that "
    "overlap go to further lanes (base + lane) so that none hides another.",
    values="nvtx_names", kinds=frozenset(KINDS), numeric_keys=True)

TYPE_RANGES = (PUSHPOP, STARTEND)

VALUE_FAMILIES = (
    ValueFamily("nvtx_names", "NVTX range and mark texts, all domains"),
    ValueFamily("nvtx_categories", "NVTX category names as 'domain: category'"),
)

ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}


def nvtx_startend_type(lane: int) -> int:
    return STARTEND.type_of(lane)
