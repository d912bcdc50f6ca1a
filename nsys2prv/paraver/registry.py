"""The one registry of Paraver states, event types, value tables and communication tags.

The writer (`.prv`/`.pcf`), the docs (`docs/events.md` is generated from it and checked by a
test), the cfgs and the tests all take their numbers from here. Rules:

* Extrae's numbers are reused only where the meaning is exactly Extrae's (CUDA call 63000000,
  kernel 63000006, launch geometry 63000011-13, stream destination 63000008, MPI 5000000x,
  OpenACC 6600000x, state numbers and colours).
* Everything nsys-specific lives in the private range 67000000-67999999, which Extrae does not
  use. A number never changes meaning once released.
* Value 0 of a name-valued type means "end" (leaving the region), as in Extrae.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# --------------------------------------------------------------------------------------------
# States (Extrae's numbers, labels and colours: extrae src/merger/paraver/labels.h)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
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
    :data:`VALUE_FAMILIES`), a fixed enum (:data:`ENUMS`), or None for plain numbers.
    """

    type: int
    label: str
    group: str
    description: str
    values: str | None = None
    extrae: bool = False
    precision: int = 0


@dataclass(frozen=True)
class TypeRange:
    """A block of event types made per trace: one type per key (NVTX domain, lane, metric)."""

    base: int
    size: int
    label: str  # format string with {key}
    group: str
    description: str
    values: str | None = None
    precision: int = 0


def _t(type_, label, group, description, values=None, extrae=False, precision=0):
    return EventType(type_, label, group, description, values, extrae, precision)


# CUDA host side -----------------------------------------------------------------------------
CUDA_CALL = 63_000_000
CUDA_STREAM_DEST = 63_000_008
CUDA_RETURN_VALUE = 67_200_001
CUDA_SYNC_TYPE = 67_200_002

# CUDA kernels (GPU rows) ---------------------------------------------------------------------
CUDA_KERNEL = 63_000_006
CUDA_KERNEL_BLOCKS = 63_000_011
CUDA_KERNEL_THREADS = 63_000_012
CUDA_KERNEL_DYN_SHMEM = 63_000_013
KERNEL_FULL_NAME = 67_000_001
NCCL_KERNEL = 67_000_002
KERNEL_GRID_X = 67_000_011
KERNEL_GRID_Y = 67_000_012
KERNEL_GRID_Z = 67_000_013
KERNEL_BLOCK_X = 67_000_014
KERNEL_BLOCK_Y = 67_000_015
KERNEL_BLOCK_Z = 67_000_016
KERNEL_REGISTERS = 67_000_017
KERNEL_STATIC_SHMEM = 67_000_018
KERNEL_LOCAL_MEM_THREAD = 67_000_019
KERNEL_LOCAL_MEM_TOTAL = 67_000_020
CORRELATION_ID = 67_000_021

# Memory operations (GPU rows) ----------------------------------------------------------------
MEMORY_OPERATION = 67_100_001
MEMORY_BYTES = 67_100_002
MEMORY_SRC_KIND = 67_100_003
MEMORY_DST_KIND = 67_100_004
MEMSET_VALUE = 67_100_005

# NVTX ---------------------------------------------------------------------------------------
NVTX_PUSHPOP_BASE = 67_300_000  # + domain index (0 = default domain)
NVTX_STARTEND_BASE = 67_301_000  # + lane (overlapping start/end ranges of one thread)
NVTX_MARK = 67_302_000
NVTX_CATEGORY = 67_302_001
NVTX_DOMAIN_MAX = 1000
NVTX_LANE_MAX = 1000

# OS runtime ---------------------------------------------------------------------------------
OSRT_CALL = 67_400_001
OSRT_RETURN_VALUE = 67_400_002

EVENT_TYPES: tuple[EventType, ...] = (
    _t(CUDA_CALL, "CUDA library call", "CUDA API",
       "CUDA runtime or driver API call on a CPU thread (value = function; 0 = end). Names "
       "Extrae knows keep Extrae's value (cudaMemcpy = 3, cudaStreamSynchronize = 5, ...).",
       values="cuda_api", extrae=True),
    _t(CUDA_STREAM_DEST, "Stream ID destination", "CUDA API",
       "On a synchronisation call: the Paraver thread number (within the task) of the GPU "
       "stream row waited for.", extrae=True),
    _t(CUDA_RETURN_VALUE, "CUDA API return value", "CUDA API",
       "Non-zero return code of a CUDA call (written only when the call failed)."),
    _t(CUDA_SYNC_TYPE, "CUDA synchronization", "CUDA API",
       "CUPTI synchronization record on the calling thread (value = kind; 0 = end).",
       values="sync_type"),
    _t(CORRELATION_ID, "CUDA correlation ID", "CUDA API",
       "CUPTI correlation id, on the API call and on the GPU activity it launched."),
    _t(CUDA_KERNEL, "CUDA kernel", "CUDA kernels",
       "Compute kernel running on a GPU stream row (value = short kernel name; 0 = end).",
       values="kernel_names", extrae=True),
    _t(NCCL_KERNEL, "NCCL kernel", "CUDA kernels",
       "NCCL communication kernel (name starts with 'nccl') on a GPU stream row.",
       values="kernel_names"),
    _t(KERNEL_FULL_NAME, "CUDA kernel full name", "CUDA kernels",
       "Demangled full signature of the running kernel (0 = end).", values="kernel_names"),
    _t(CUDA_KERNEL_BLOCKS, "CUDA Kernel blocks per grid", "CUDA kernels",
       "gridX*gridY*gridZ of the kernel starting.", extrae=True),
    _t(CUDA_KERNEL_THREADS, "CUDA Kernel threads per block", "CUDA kernels",
       "blockX*blockY*blockZ of the kernel starting.", extrae=True),
    _t(CUDA_KERNEL_DYN_SHMEM, "CUDA Kernel shared memory bytes", "CUDA kernels",
       "Dynamic shared memory requested at launch (bytes).", extrae=True),
    _t(KERNEL_GRID_X, "CUDA kernel grid X", "CUDA kernels", "Grid size, X."),
    _t(KERNEL_GRID_Y, "CUDA kernel grid Y", "CUDA kernels", "Grid size, Y."),
    _t(KERNEL_GRID_Z, "CUDA kernel grid Z", "CUDA kernels", "Grid size, Z."),
    _t(KERNEL_BLOCK_X, "CUDA kernel block X", "CUDA kernels", "Block size, X."),
    _t(KERNEL_BLOCK_Y, "CUDA kernel block Y", "CUDA kernels", "Block size, Y."),
    _t(KERNEL_BLOCK_Z, "CUDA kernel block Z", "CUDA kernels", "Block size, Z."),
    _t(KERNEL_REGISTERS, "CUDA kernel registers per thread", "CUDA kernels",
       "Registers per thread."),
    _t(KERNEL_STATIC_SHMEM, "CUDA kernel static shared memory", "CUDA kernels",
       "Static shared memory per block (bytes)."),
    _t(KERNEL_LOCAL_MEM_THREAD, "CUDA kernel local memory per thread", "CUDA kernels",
       "Local memory per thread (bytes)."),
    _t(KERNEL_LOCAL_MEM_TOTAL, "CUDA kernel local memory total", "CUDA kernels",
       "Local memory reserved for the kernel (bytes)."),
    _t(MEMORY_OPERATION, "CUDA memory operation", "CUDA memory",
       "memcpy (value = direction) or memset on a GPU stream row; 0 = end.",
       values="memory_operation"),
    _t(MEMORY_BYTES, "CUDA memory operation bytes", "CUDA memory",
       "Bytes copied or set by the operation starting."),
    _t(MEMORY_SRC_KIND, "CUDA memcpy source memory kind", "CUDA memory",
       "Kind of the source memory (pageable, pinned, device, ...).", values="memory_kind"),
    _t(MEMORY_DST_KIND, "CUDA memory destination memory kind", "CUDA memory",
       "Kind of the destination memory of a memcpy, or of the memory set by a memset.",
       values="memory_kind"),
    _t(MEMSET_VALUE, "CUDA memset value", "CUDA memory", "Byte value written by a memset."),
    _t(NVTX_MARK, "NVTX mark", "NVTX",
       "Instantaneous NVTX marker on a CPU thread (value = text, any domain).",
       values="nvtx_names"),
    _t(NVTX_CATEGORY, "NVTX category", "NVTX",
       "Category of the NVTX range or mark starting (value = category id of its domain).",
       values="nvtx_categories"),
    _t(OSRT_CALL, "OS runtime call", "OS runtime",
       "libc/pthread call traced by nsys (value = function; 0 = end).", values="osrt_names"),
    _t(OSRT_RETURN_VALUE, "OS runtime return value", "OS runtime",
       "Return value of the OS runtime call that ended."),
)

TYPE_RANGES: tuple[TypeRange, ...] = (
    TypeRange(NVTX_PUSHPOP_BASE, NVTX_DOMAIN_MAX, "NVTX push/pop: {key}", "NVTX",
              "Nested push/pop ranges of one NVTX domain (base + domain index; index 0 is the "
              "default domain, the others are numbered in name order). Value = range text; "
              "0 = end. Ranges nest: view them with the 'Stacked Val' compose function.",
              values="nvtx_names"),
    TypeRange(NVTX_STARTEND_BASE, NVTX_LANE_MAX, "NVTX start/end range (lane {key})", "NVTX",
              "Start/end ranges of all domains on the thread that started them; ranges that "
              "overlap go to further lanes (base + lane) so that none hides another.",
              values="nvtx_names"),
)

EVENT_TYPE_BY_NUMBER = {t.type: t for t in EVENT_TYPES}

# --------------------------------------------------------------------------------------------
# Value tables
# --------------------------------------------------------------------------------------------

# Extrae's fixed values of CUDACALL_EV (extrae src/common/events.h, enum after CUDACALL_EV).
EXTRAE_CUDA_CALL_VALUES: dict[str, int] = {
    name: i + 1
    for i, name in enumerate([
        "cudaLaunch", "cudaConfigureCall", "cudaMemcpy", "cudaDeviceSynchronize",
        "cudaStreamSynchronize", "cudaStreamCreate", "cudaMemcpyAsync", "cudaDeviceReset",
        "cudaThreadExit", "cudaStreamDestroy", "cudaMalloc", "cudaMallocPitch", "cudaFree",
        "cudaMallocArray", "cudaFreeArray", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc",
        "cudaMemcpy2D", "cudaMemcpyToArray", "cudaMemcpy2DToArray", "cudaMemcpyFromArray",
        "cudaMemcpy2DFromArray", "cudaMemcpyArrayToArray", "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol", "cudaMemcpyToArrayAsync", "cudaMemcpyFromArrayAsync",
        "cudaMemcpy2DAsync", "cudaMemcpy2DToArrayAsync", "cudaMemcpy2DFromArrayAsync",
        "cudaMemcpyToSymbolAsync", "cudaMemcpyFromSymbolAsync", "cudaMemset",
        "cudaMemsetAsync", "cudaEventRecord", "cudaEventSynchronize", "cudaStreamWaitEvent",
        "cudaMalloc3D", "cudaMalloc3DArray",
    ])
}


@dataclass(frozen=True)
class ValueFamily:
    """Names numbered per trace: `fixed` values first, others from `first_free` in name order."""

    name: str
    description: str
    first_free: int = 1
    fixed: dict[str, int] = field(default_factory=dict)


VALUE_FAMILIES: dict[str, ValueFamily] = {
    f.name: f
    for f in (
        ValueFamily("cuda_api", "CUDA runtime/driver function names (version suffix removed)",
                    first_free=1000, fixed=EXTRAE_CUDA_CALL_VALUES),
        ValueFamily("kernel_names", "kernel names (short and full names share one table)"),
        ValueFamily("nvtx_names", "NVTX range and mark texts, all domains"),
        ValueFamily("nvtx_categories", "NVTX category names as 'domain: category'"),
        ValueFamily("osrt_names", "OS runtime function names"),
    )
}

# CUPTI enums (ids as in the ENUM_* tables; a value is id + 1 so that 0 keeps meaning "end").
# Defaults for exports without ENUM_* tables (legacy exports use the same ids); labels found
# in an export's own ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND / ENUM_CUPTI_SYNC_TYPE win.
MEMCPY_KINDS = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}
MEMORY_KINDS = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}
SYNC_TYPES = {
    0: "Unknown", 1: "Event synchronize", 2: "Stream wait event", 3: "Stream synchronize",
    4: "Context synchronize",
}
MEMSET_OPERATION_VALUE = 100  # value of MEMORY_OPERATION for a memset

# enum family -> ENUM_* tables of the export that label it (value = id + 1)
ENUM_TABLES = {
    "memory_operation": ("ENUM_CUDA_MEMCPY_OPER",),
    "memory_kind": ("ENUM_CUDA_MEM_KIND",),
    "sync_type": ("ENUM_CUPTI_SYNC_TYPE",),
}

ENUMS: dict[str, dict[int, str]] = {
    "memory_operation": {
        **{k + 1: f"memcpy {v}" for k, v in MEMCPY_KINDS.items()},
        MEMSET_OPERATION_VALUE: "memset",
    },
    "memory_kind": {k + 1: v for k, v in MEMORY_KINDS.items()},
    "sync_type": {k + 1: v for k, v in SYNC_TYPES.items()},
}

# --------------------------------------------------------------------------------------------
# Communication tags: the tag of an arrow is the event type of the activity it points to.
# --------------------------------------------------------------------------------------------

TAG_KERNEL_LAUNCH = CUDA_KERNEL
TAG_NCCL_LAUNCH = NCCL_KERNEL
TAG_MEMORY_OPERATION = MEMORY_OPERATION

COMM_TAGS = {
    TAG_KERNEL_LAUNCH: "CUDA API call -> compute kernel it launched (size 0)",
    TAG_NCCL_LAUNCH: "CUDA API call -> NCCL kernel it launched (size 0)",
    TAG_MEMORY_OPERATION: "CUDA API call -> memcpy/memset it issued (size = bytes)",
}


def nvtx_pushpop_type(domain_index: int) -> int:
    if not 0 <= domain_index < NVTX_DOMAIN_MAX:
        raise ValueError(f"too many NVTX domains ({domain_index})")
    return NVTX_PUSHPOP_BASE + domain_index


def nvtx_startend_type(lane: int) -> int:
    if not 0 <= lane < NVTX_LANE_MAX:
        raise ValueError(f"too many overlapping NVTX start/end ranges ({lane})")
    return NVTX_STARTEND_BASE + lane


def describe_type(type_: int) -> tuple[str, str | None] | None:
    """(label, value family) of a registered type or of a type inside a registered range."""
    t = EVENT_TYPE_BY_NUMBER.get(type_)
    if t is not None:
        return t.label, t.values
    for r in TYPE_RANGES:
        if r.base <= type_ < r.base + r.size:
            return r.label.format(key=type_ - r.base), r.values
    return None


def all_known_types() -> set[int]:
    return set(EVENT_TYPE_BY_NUMBER)
