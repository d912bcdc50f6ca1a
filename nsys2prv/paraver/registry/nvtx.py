"""NVTX: push/pop ranges per domain, start/end ranges on lanes, marks, categories."""

from __future__ import annotations

from .core import TypeRange, ValueFamily, event_type

KINDS = ("nvtx",)

NVTX_PUSHPOP_BASE = 67_300_000  # + domain index (0 = default domain)
NVTX_STARTEND_BASE = 67_301_000  # + lane (overlapping start/end ranges of one thread)
NVTX_MARK = 67_302_000
NVTX_CATEGORY = 67_302_001
NVTX_GPU_BASE = 67_303_000  # + nesting level (nsys'): NVTX ranges projected onto the GPU
NVTX_DOMAIN_MAX = 1000
NVTX_LANE_MAX = 1000
NVTX_LEVEL_MAX = 1000

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

GPU_PROJECTED = TypeRange(
    "nvtx_gpu", NVTX_GPU_BASE, NVTX_LEVEL_MAX, "NVTX projected, level {key}", "NVTX",
    "NVTX ranges projected onto the GPU, as Nsight Systems' 'NVTX (projected)' rows and its "
    "nvtx_gpu_proj_trace recipe: on every GPU stream row that ran work launched inside a "
    "range (by a CUDA call that started inside it on its thread), the range's value from "
    "the first such work's start to the last one's end (0). Base + nesting level (nsys' "
    "level on the CPU times of every range of the thread, 0 = outermost); values are the "
    "CPU rows' NVTX names, so one colour is one range on both; levels nest on a row, so "
    "'Stacked Val' over the range of types shows the innermost. Two ranges of one level "
    "that overlap on one stream row (two threads launching onto one stream): the later one "
    "shows from its start, and the earlier one, when its end falls inside a later one, "
    "ends where the next one of the level starts on that row. Ranges nsys cannot nest (two "
    "of one thread with equal start and end) and start/end ranges ended on another thread "
    "are not projected.",
    values="nvtx_names", kinds=frozenset(KINDS), numeric_keys=True)

TYPE_RANGES = (PUSHPOP, STARTEND, GPU_PROJECTED)

VALUE_FAMILIES = (
    ValueFamily("nvtx_names", "NVTX range and mark texts, all domains"),
    ValueFamily("nvtx_categories", "NVTX category names as 'domain: category'"),
)

ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}


def nvtx_startend_type(lane: int) -> int:
    return STARTEND.type_of(lane)


def nvtx_gpu_type(level: int) -> int:
    """The type of the ranges of nesting level `level` projected onto the GPU."""
    return GPU_PROJECTED.type_of(level)
