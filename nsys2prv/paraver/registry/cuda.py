"""CUDA: API calls and synchronisation (CPU rows), kernels and memory operations (GPU rows)."""

from __future__ import annotations

from .core import ValueFamily, event_type

API = ("cuda_api",)
SYNC = ("cuda_sync",)
KERNELS = ("kernels",)
MEMORY = ("memcpy", "memset")

# CUDA host side ------------------------------------------------------------------------------
CUDA_CALL = 63_000_000
CUDA_STREAM_DEST = 63_000_008
CUDA_RETURN_VALUE = 67_200_001
CUDA_SYNC_TYPE = 67_200_002
CORRELATION_ID = 67_000_021

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
# what the launch allows (analysis/occupancy.py), on each kernel's start record
KERNEL_CARVEOUT = 67_000_022
KERNEL_CLUSTER_SIZE = 67_000_023
KERNEL_GPU_SMS = 67_000_024
KERNEL_BLOCKS_PER_SM = 67_000_025
KERNEL_OCCUPANCY_LIMITER = 67_000_026
KERNEL_OCCUPANCY = 67_000_027
KERNEL_RESIDENT_BLOCKS = 67_000_028
KERNEL_WAVES = 67_000_029
KERNEL_SM_ACTIVE_CEILING = 67_000_030
KERNEL_WARPS_CEILING = 67_000_031
LAUNCH_PRECISION = 2  # percentages and waves: value x 100

# Memory operations (GPU rows) ----------------------------------------------------------------
MEMORY_OPERATION = 67_100_001
MEMORY_BYTES = 67_100_002
MEMORY_SRC_KIND = 67_100_003
MEMORY_DST_KIND = 67_100_004
MEMSET_VALUE = 67_100_005
MEMSET_OPERATION_VALUE = 100  # value of MEMORY_OPERATION for a memset

EVENT_TYPES = (
    event_type(CUDA_CALL, "CUDA library call", "CUDA API",
               "CUDA runtime or driver API call on a CPU thread (value = function; 0 = end). "
               "Names Extrae knows keep Extrae's value (cudaMemcpy = 3, cudaStreamSynchronize "
               "= 5, ...).", values="cuda_api", extrae=True, kinds=API),
    event_type(CUDA_STREAM_DEST, "Stream ID destination", "CUDA API",
               "On a synchronisation call: the Paraver thread number (within the task) of the "
               "GPU stream row waited for (or that an OpenACC operation targets).",
               extrae=True, kinds=SYNC + ("openacc",)),
    event_type(CUDA_RETURN_VALUE, "CUDA API return value", "CUDA API",
               "Non-zero return code of a CUDA call (written only when the call failed).",
               kinds=API),
    event_type(CUDA_SYNC_TYPE, "CUDA synchronization", "CUDA API",
               "CUPTI synchronization record on the calling thread (value = kind, read from "
               "which ids the record has: a stream and an event = stream wait, an event = "
               "event sync, a stream = stream sync, neither = context sync; not from "
               "`syncType`, which most nsys versions number otherwise; 0 = end).",
               values="sync_type", kinds=SYNC),
    event_type(CORRELATION_ID, "CUDA correlation ID", "CUDA API",
               "CUPTI correlation id, on the API call and on the GPU activity it launched.",
               kinds=API + KERNELS + MEMORY),
    event_type(CUDA_KERNEL, "CUDA kernel", "CUDA kernels",
               "Compute kernel running on a GPU stream row (value = short kernel name; "
               "0 = end).", values="kernel_names", extrae=True, kinds=KERNELS),
    event_type(NCCL_KERNEL, "NCCL kernel", "CUDA kernels",
               "NCCL communication kernel (name starts with 'nccl') on a GPU stream row.",
               values="kernel_names", kinds=KERNELS),
    event_type(KERNEL_FULL_NAME, "CUDA kernel full name", "CUDA kernels",
               "Demangled full signature of the running kernel (0 = end).",
               values="kernel_names", kinds=KERNELS),
    event_type(CUDA_KERNEL_BLOCKS, "CUDA Kernel blocks per grid", "CUDA kernels",
               "gridX*gridY*gridZ of the kernel starting.", extrae=True, kinds=KERNELS),
    event_type(CUDA_KERNEL_THREADS, "CUDA Kernel threads per block", "CUDA kernels",
               "blockX*blockY*blockZ of the kernel starting.", extrae=True, kinds=KERNELS),
    event_type(CUDA_KERNEL_DYN_SHMEM, "CUDA Kernel shared memory bytes", "CUDA kernels",
               "Dynamic shared memory requested at launch (bytes).", extrae=True,
               kinds=KERNELS),
    event_type(KERNEL_GRID_X, "CUDA kernel grid X", "CUDA kernels", "Grid size, X.",
               kinds=KERNELS),
    event_type(KERNEL_GRID_Y, "CUDA kernel grid Y", "CUDA kernels", "Grid size, Y.",
               kinds=KERNELS),
    event_type(KERNEL_GRID_Z, "CUDA kernel grid Z", "CUDA kernels", "Grid size, Z.",
               kinds=KERNELS),
    event_type(KERNEL_BLOCK_X, "CUDA kernel block X", "CUDA kernels", "Block size, X.",
               kinds=KERNELS),
    event_type(KERNEL_BLOCK_Y, "CUDA kernel block Y", "CUDA kernels", "Block size, Y.",
               kinds=KERNELS),
    event_type(KERNEL_BLOCK_Z, "CUDA kernel block Z", "CUDA kernels", "Block size, Z.",
               kinds=KERNELS),
    event_type(KERNEL_REGISTERS, "CUDA kernel registers per thread", "CUDA kernels",
               "Registers per thread.", kinds=KERNELS),
    event_type(KERNEL_STATIC_SHMEM, "CUDA kernel static shared memory", "CUDA kernels",
               "Static shared memory per block (bytes).", kinds=KERNELS),
    event_type(KERNEL_LOCAL_MEM_THREAD, "CUDA kernel local memory per thread", "CUDA kernels",
               "Local memory per thread (bytes).", kinds=KERNELS),
    event_type(KERNEL_LOCAL_MEM_TOTAL, "CUDA kernel local memory total", "CUDA kernels",
               "Local memory reserved for the kernel (bytes).", kinds=KERNELS),
    event_type(KERNEL_CARVEOUT, "CUDA kernel shared memory carveout", "CUDA kernels",
               "Shared memory per SM the driver configured for the launch "
               "(`sharedMemoryExecuted`, bytes).", kinds=KERNELS),
    event_type(KERNEL_CLUSTER_SIZE, "CUDA kernel cluster size", "CUDA kernels",
               "Blocks per thread block cluster (clusterX*clusterY*clusterZ), on kernels "
               "launched with clusters (compute capability 9.0 on).", kinds=KERNELS),
    event_type(KERNEL_GPU_SMS, "CUDA kernel SMs of its GPU", "CUDA kernels",
               "Streaming multiprocessors of the GPU the kernel ran on (TARGET_INFO_GPU "
               "smCount: a MIG instance's own).", kinds=KERNELS),
    event_type(KERNEL_BLOCKS_PER_SM, "CUDA kernel blocks per SM", "CUDA kernels",
               "Blocks of the kernel one SM holds at once (the occupancy calculator: the "
               "least that warps, registers, shared memory and the SM's block slots allow; "
               "docs/kernel_metrics.md).", kinds=KERNELS),
    event_type(KERNEL_OCCUPANCY_LIMITER, "CUDA kernel occupancy limiter", "CUDA kernels",
               "What limits the blocks per SM: 1 the SM's warp slots (block size), 2 "
               "registers, 3 shared memory, 4 the SM's block slots.",
               values="occupancy_limiter", kinds=KERNELS),
    event_type(KERNEL_OCCUPANCY, "CUDA kernel theoretical occupancy", "CUDA kernels",
               "Blocks per SM x warps per block / warps per SM, in % (value x 100).",
               precision=LAUNCH_PRECISION, kinds=KERNELS),
    event_type(KERNEL_RESIDENT_BLOCKS, "CUDA kernel blocks per wave", "CUDA kernels",
               "Blocks the GPU holds at once: SMs x blocks per SM, or for a cluster launch "
               "CUPTI's maximum active clusters x cluster size.", kinds=KERNELS),
    event_type(KERNEL_WAVES, "CUDA kernel waves", "CUDA kernels",
               "Blocks of the grid / blocks per wave (value x 100); the fraction above a "
               "whole number is the last wave's fill (the tail).",
               precision=LAUNCH_PRECISION, kinds=KERNELS),
    event_type(KERNEL_SM_ACTIVE_CEILING, "CUDA kernel SM Active ceiling", "CUDA kernels",
               "The most SM Active the grid allows: min(blocks, blocks per wave, SMs) / SMs, "
               "in % (value x 100, rounded up).", precision=LAUNCH_PRECISION,
               kinds=KERNELS),
    event_type(KERNEL_WARPS_CEILING, "CUDA kernel warps in flight ceiling", "CUDA kernels",
               "The most Compute Warps in Flight the grid allows: min(blocks, blocks per "
               "wave) x warps per block / (SMs x warps per SM), in % (value x 100, rounded "
               "up).", precision=LAUNCH_PRECISION, kinds=KERNELS),
    event_type(MEMORY_OPERATION, "CUDA memory operation", "CUDA memory",
               "memcpy (value = direction) or memset on a GPU stream row; 0 = end.",
               values="memory_operation", kinds=MEMORY),
    event_type(MEMORY_BYTES, "CUDA memory operation bytes", "CUDA memory",
               "Bytes copied or set by the operation starting.", kinds=MEMORY),
    event_type(MEMORY_SRC_KIND, "CUDA memcpy source memory kind", "CUDA memory",
               "Kind of the source memory (pageable, pinned, device, ...).",
               values="memory_kind", kinds=MEMORY),
    event_type(MEMORY_DST_KIND, "CUDA memory destination memory kind", "CUDA memory",
               "Kind of the destination memory of a memcpy, or of the memory set by a memset.",
               values="memory_kind", kinds=MEMORY),
    event_type(MEMSET_VALUE, "CUDA memset value", "CUDA memory",
               "Byte value written by a memset.", kinds=MEMORY),
)

TYPE_RANGES = ()

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

VALUE_FAMILIES = (
    ValueFamily("cuda_api", "CUDA runtime/driver function names (version suffix removed)",
                first_free=1000, fixed=EXTRAE_CUDA_CALL_VALUES),
    ValueFamily("kernel_names", "kernel names (short and full names share one table)"),
)

# Defaults for exports without ENUM_* tables (legacy exports use the same ids); labels found
# in an export's own ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND / ENUM_CUPTI_SYNC_TYPE fill
# ids missing here.
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

# enum family -> (ENUM_* table of the export, label prefix); value = id + 1
ENUM_TABLES = {
    "memory_operation": ("ENUM_CUDA_MEMCPY_OPER", "memcpy "),
    "memory_kind": ("ENUM_CUDA_MEM_KIND", ""),
    "sync_type": ("ENUM_CUPTI_SYNC_TYPE", ""),
}

ENUMS: dict[str, dict[int, str]] = {
    "memory_operation": {
        **{k + 1: f"memcpy {v}" for k, v in MEMCPY_KINDS.items()},
        MEMSET_OPERATION_VALUE: "memset",
    },
    "memory_kind": {k + 1: v for k, v in MEMORY_KINDS.items()},
    "sync_type": {k + 1: v for k, v in SYNC_TYPES.items()},
    "occupancy_limiter": {1: "warps (block size)", 2: "registers", 3: "shared memory",
                          4: "blocks per SM"},
}
# the launch statistics a stream that is only analysed keeps (pipeline/prepare.py): the
# launch's own numbers and what the occupancy calculator made of them
LAUNCH_TYPES = (CUDA_KERNEL_BLOCKS, CUDA_KERNEL_THREADS, CUDA_KERNEL_DYN_SHMEM,
                KERNEL_REGISTERS, KERNEL_STATIC_SHMEM, KERNEL_CARVEOUT, KERNEL_CLUSTER_SIZE,
                KERNEL_GPU_SMS, KERNEL_BLOCKS_PER_SM, KERNEL_OCCUPANCY_LIMITER,
                KERNEL_OCCUPANCY, KERNEL_RESIDENT_BLOCKS, KERNEL_WARPS_CEILING)

# Communication tags: the tag of an arrow is the event type of the activity it points to.
TAG_KERNEL_LAUNCH = CUDA_KERNEL
TAG_NCCL_LAUNCH = NCCL_KERNEL
TAG_MEMORY_OPERATION = MEMORY_OPERATION

COMM_TAGS = {
    TAG_KERNEL_LAUNCH: "CUDA API call -> compute kernel it launched (size 0)",
    TAG_NCCL_LAUNCH: "CUDA API call -> NCCL kernel it launched (size 0)",
    TAG_MEMORY_OPERATION: "CUDA API call -> memcpy/memset it issued (size = bytes)",
}
