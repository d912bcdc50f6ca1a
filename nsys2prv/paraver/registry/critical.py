"""The critical path of a run (`nsys2prv analyze --critical-path --path-trace OUT.prv`):
which work of every row lies on it, and how much later each GPU activity could have ended
without delaying the run (its float). Written only into the copy of a trace that the
analysis makes, never by a translation.
"""

from __future__ import annotations

from .core import event_type

KINDS = ("critical_path",)

CRITICAL_PATH = 67_950_000
CRITICAL_FLOAT = 67_950_001

PATH_GPU, PATH_HOST, PATH_LATENCY, PATH_WAITING = 1, 2, 3, 4

EVENT_TYPES = (
    event_type(CRITICAL_PATH, "On the critical path", "Critical path",
               "What the critical path is doing on this row: 1 GPU work (kernel, NCCL, "
               "memcpy, memset), 2 host work (computing, CUDA or MPI calls), 3 launch "
               "latency (a GPU activity ready, not started yet), 4 waiting that no traced "
               "work explains; 0 = the path leaves the row.", values="critical_path",
               kinds=KINDS),
    event_type(CRITICAL_FLOAT, "Critical path float (us)", "Critical path",
               "At the start of each GPU activity: 1 + how many microseconds later it could "
               "have ended without delaying the end of the run, its dependencies and "
               "durations as measured (1 = on the critical path); 0 at its end.",
               kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = ()
ENUMS: dict[str, dict[int, str]] = {
    "critical_path": {PATH_GPU: "GPU work", PATH_HOST: "host work",
                      PATH_LATENCY: "launch latency", PATH_WAITING: "waiting (no work explains)"},
}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
