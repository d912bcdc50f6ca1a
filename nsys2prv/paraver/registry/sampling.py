"""CPU samples and call stacks, written as Extrae writes them.

Extrae's numbers (extrae `src/common/events.h`): `SAMPLING_EV` 30000000 is the sampled
function (the leaf), 30000000+k its caller k levels up (k < 100: 30000100 is Extrae's
sampled source line, which nsys does not record); `CALLER_EV` 70000000+k is the k-th caller
of a traced call, at the call's entry. One value table, the code locations, is shared by all
of them (as `mpi2prv -unique-caller-id` makes Extrae's), so one function has one value at
every depth and level. Paraver's "Sampling" workspace activates on 30000000 and its "Call
stack references" workspace on 70000001. What Extrae has no number for (the leaf's module,
the stack's depth, the CPU) has ours in the private range.
"""

from __future__ import annotations

from .core import TypeRange, ValueFamily, event_type

KINDS = ("samples",)
# the OS runtime and CUDA API calls carry their stacks (callers) at their entries
CALLER_KINDS = frozenset(("osrt", "cuda_api"))

SAMPLED_FUNCTION = 30_000_000  # Extrae's SAMPLING_EV
SAMPLED_FUNCTION_LEVELS = 100  # Extrae's MAX_CALLERS: 30000100 is a source line, not depth 100
CALLER_BASE = 70_000_000  # Extrae's CALLER_EV: 70000000 + level, level >= 1
CALLER_LEVELS = 100
# our own numbers (the block 67_700_000 the contract named is MPI's: 67700001-67700005
# and the dependency tag 67700010)
SAMPLED_MODULE = 67_830_000
SAMPLE_DEPTH = 67_830_001
SAMPLED_CPU = 67_830_002
SAMPLE_MARKERS = 67_830_003
PYTHON_SAMPLE = 67_830_010

CODE_LOCATIONS = "code_locations"
SAMPLED_MODULES = "sampled_modules"

EVENT_TYPES = (
    event_type(SAMPLED_FUNCTION, "Sampled functions", "CPU samples",
               "At each CPU sample, on the sampled thread's row at the sample's time: the "
               "function the instruction pointer was in (the stack's leaf), as "
               "'FUNCTION (MODULE)'. One event per COMPOSITE_EVENTS row; samples never "
               "change states. The leaf's callers are 30000001-30000099, its module "
               "67830000, on the same record.", values=CODE_LOCATIONS, extrae=True,
               kinds=KINDS),
    event_type(SAMPLED_MODULE, "Sampled module", "CPU samples",
               "At each CPU sample: the module (basename of the binary or library, "
               "[kernel.kallsyms], [vdso], [Unknown]) of the sampled function. Not Extrae's "
               "30000100, which is a source line.", values=SAMPLED_MODULES, kinds=KINDS),
    event_type(SAMPLE_DEPTH, "Sample stack depth", "CPU samples",
               "At each CPU sample: how many frames of its call stack are written (1 = the "
               "leaf only: with DWARF unwinding nsys keeps a stack for one sample in four; "
               "at most 100, deeper frames are cut), after the '[Max depth]' and "
               "'[Broken backtraces]' marker frames are dropped.", kinds=KINDS),
    event_type(SAMPLED_CPU, "Sampled CPU", "CPU samples",
               "At each CPU sample: the CPU core it was taken on + 1.", kinds=KINDS),
    event_type(SAMPLE_MARKERS, "Marker frames dropped", "CPU samples",
               "At a CPU sample whose stack ended in nsys' '[Max depth]' or '[Broken "
               "backtraces]' marker frames: how many were dropped (written only when > 0).",
               kinds=KINDS),
    event_type(PYTHON_SAMPLE, "Python sample", "CPU samples",
               "A Python backtrace sample of nsys --python-sampling (an NVTX mark of nsys' "
               "own domain 'Python Backtrace', value 1): not a user NVTX mark, so never an "
               "NVTX type (steps and layers never see it).", kinds=KINDS),
)

SAMPLED_DEPTH = TypeRange(
    "sampled_depth", SAMPLED_FUNCTION + 1, SAMPLED_FUNCTION_LEVELS - 1,
    "Sampled functions (depth {key})", "CPU samples",
    "At each CPU sample with a call stack: the caller at depth k of the sampled function "
    "(Extrae's 30000000+k; k = nsys' stackDepth once the marker frames are dropped, the "
    "depths renumbered without gaps), on the same record as 30000000. Depths of 100 and "
    "more are cut (counted in the summary).",
    values=CODE_LOCATIONS, kinds=frozenset(KINDS), numeric_keys=True, first_key=1,
    extrae=True)
CALLERS = TypeRange(
    "callers", CALLER_BASE + 1, CALLER_LEVELS - 1, "Caller at level {key}", "CPU samples",
    "At the entry of an OS runtime or CUDA API call that nsys kept a call stack for "
    "(OSRT_CALLCHAINS: calls of 80 us and more; CUDA_CALLCHAINS: --cudabacktrace): its "
    "k-th caller (Extrae's 70000000+k); 0 (End) at the call's exit, so a caller is a "
    "region of its call. OS runtime: level k = stackDepth k (depth 0 is the libc wrapper, "
    "the call itself). CUDA: level 1 is the frame after the one named as the API (CUPTI, "
    "the driver and the runtime come first); see docs/samples.md.",
    values=CODE_LOCATIONS, kinds=CALLER_KINDS, numeric_keys=True, first_key=1, extrae=True)

TYPE_RANGES = (SAMPLED_DEPTH, CALLERS)
VALUE_FAMILIES = (
    ValueFamily(CODE_LOCATIONS, "Code locations of the sampled functions and callers, "
                "'FUNCTION (MODULE)' (module = basename; an unresolved frame's function is "
                "its address), one table for every depth and level"),
    ValueFamily(SAMPLED_MODULES, "Modules of the sampled functions (basenames)"),
)
ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}


def sampled_depth_type(depth: int) -> int:
    """Extrae's type of the caller at stack depth `depth` (1..99) of a sample."""
    return SAMPLED_DEPTH.type_of_key(str(depth))


def caller_type(level: int) -> int:
    """Extrae's type of the caller at `level` (1..99) of a traced call."""
    return CALLERS.type_of_key(str(level))
