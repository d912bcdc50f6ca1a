"""Building blocks of the registry: states (Extrae's), and the shapes of types and tables."""

from __future__ import annotations

from dataclasses import dataclass, field

# --------------------------------------------------------------------------------------------
# States (Extrae's numbers, labels and colours: extrae src/merger/paraver/labels.h)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """A Paraver state: its value, label and colour (Extrae's)."""

    value: int
    label: str
    color: tuple[int, int, int]


STATES: tuple[State, ...] = (
    State(0, "Idle", (117, 195, 255)),
    State(1, "Running", (0, 0, 255)),
    State(2, "Not created", (255, 255, 255)),
    State(3, "Waiting a message", (255, 0, 0)),
    State(4, "Blocking Send", (255, 0, 174)),
    State(5, "Synchronization", (179, 0, 0)),
    State(6, "Test/Probe", (0, 255, 0)),
    State(7, "Scheduling and Fork/Join", (255, 255, 0)),
    State(8, "Wait/WaitAll", (235, 0, 0)),
    State(9, "Blocked", (0, 162, 0)),
    State(10, "Immediate Send", (255, 0, 255)),
    State(11, "Immediate Receive", (100, 100, 177)),
    State(12, "I/O", (172, 174, 41)),
    State(13, "Group Communication", (255, 144, 26)),
    State(14, "Tracing Disabled", (2, 255, 177)),
    State(15, "Others", (192, 224, 0)),
    State(16, "Send Receive", (66, 66, 66)),
    State(17, "Memory transfer", (255, 0, 96)),
    State(18, "Profiling", (169, 169, 169)),
    State(19, "On-line analysis", (169, 0, 0)),
    State(20, "Remote memory access", (0, 109, 255)),
    State(21, "Atomic memory operation", (200, 61, 68)),
    State(22, "Memory ordering operation", (200, 66, 0)),
    State(23, "Distributed locking", (0, 41, 0)),
    State(24, "Overhead", (139, 121, 177)),
    State(25, "One-sided op", (116, 116, 116)),
    State(26, "Startup latency", (200, 50, 89)),
    State(27, "Waiting links", (255, 171, 98)),
    State(28, "Data copy", (0, 68, 189)),
    State(29, "RTT", (52, 43, 0)),
    State(30, "Allocating memory", (255, 46, 0)),
    State(31, "Freeing memory", (100, 216, 32)),
    State(32, "Configuring accelerator", (118, 185, 0)),
    State(33, "Stream Registration", (80, 185, 160)),
)

STATE_IDLE = 0
STATE_RUNNING = 1
STATE_NOT_CREATED = 2
STATE_SYNC = 5
STATE_FORK_JOIN = 7
STATE_BLOCKED = 9
STATE_IO = 12
STATE_OTHERS = 15
STATE_MEMORY_TRANSFER = 17
STATE_ALLOC = 30
STATE_FREE = 31
STATE_CONFIG_ACCEL = 32

STATE_BY_VALUE = {s.value: s for s in STATES}

# --------------------------------------------------------------------------------------------
# Event types
# --------------------------------------------------------------------------------------------

PRIVATE_RANGE = (67_000_000, 67_999_999)


@dataclass(frozen=True)
class EventType:
    """One Paraver event type.

    `values` names the value table: a dictionary family (names numbered per trace, see
    `ValueFamily`), a fixed enum (`ENUMS`), or None for plain numbers. `kinds` are the data
    kinds that write it (the `.pcf` lists a type when one of its kinds is in the trace).
    """

    type: int
    label: str
    group: str
    description: str
    values: str | None = None
    extrae: bool = False
    precision: int = 0
    kinds: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TypeRange:
    """A block of event types made per trace: one type per key (NVTX domain, lane, metric).

    Keys are numbered trace-wide like names: `fixed` keys at their offsets, the others in key
    order from the first free offset (or, with `numeric_keys`, at offset int(key)). `label`
    is a format string with {key}.
    """

    name: str
    base: int
    size: int
    label: str
    group: str
    description: str
    values: str | None = None
    precision: int = 0
    kinds: frozenset[str] = frozenset()
    fixed: dict[str, int] = field(default_factory=dict)
    numeric_keys: bool = False  # keys are numbers: key k is at offset k - first_key (lanes)
    first_free: int = 0  # offset of the first key that has no fixed offset
    first_key: int = 0  # numeric keys: the key at the range's base (Extrae's depth 1)
    extrae: bool = False  # Extrae's own numbers with Extrae's meaning (outside our range)

    def type_of(self, offset: int) -> int:
        if not 0 <= offset < self.size:
            raise ValueError(f"{self.name}: more than {self.size} types")
        return self.base + offset

    def type_of_key(self, key: str) -> int:
        """The type of numeric key `key` (`numeric_keys`)."""
        return self.type_of(int(key) - self.first_key)


@dataclass(frozen=True)
class ValueFamily:
    """Names numbered per trace: `fixed` values first, others from `first_free` in name order."""

    name: str
    description: str
    first_free: int = 1
    fixed: dict[str, int] = field(default_factory=dict)


def event_type(type_: int, label: str, group: str, description: str, values: str | None = None,
               extrae: bool = False, precision: int = 0, kinds: tuple[str, ...] = ()
               ) -> EventType:
    return EventType(type_, label, group, description, values, extrae, precision,
                     frozenset(kinds))


# Not written as events: a .pcf-only table listing the input reports and their clock offsets.
REPORT_INFO = 67_999_001
# Not written as events either: the first .pcf section, whose label is the write id that the
# .prv and .row of the same write carry too (paraver/writeid.py).
WRITE_ID = 67_999_002
