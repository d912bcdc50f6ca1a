"""CUDA memory in use per process and device over time (`--cuda-memory-usage=true`).

nsys records every allocation and free (CUDA_GPU_MEMORY_USAGE_EVENTS); the trace shows their
running sum, in bytes, on the GPU's metrics row of the process ("GPU d metrics"), in total and
per memory kind, plus the bytes allocated and freed at that time (Paraver values are kept
non-negative: checkers such as pertalde reject negative event values).
"""

from __future__ import annotations

from .core import event_type
from .cuda import MEMORY_KINDS

KINDS = ("gpu_memory",)

GPU_MEMORY_ALLOCATED = 67_810_000
GPU_MEMORY_KIND_BASE = 67_810_001  # + memory kind id (ENUM_CUDA_MEM_KIND), 0-7
GPU_MEMORY_ALLOCATION = 67_810_010
GPU_MEMORY_FREE = 67_810_011


def kind_type(kind_id: int) -> int:
    """Event type of the allocated bytes of one memory kind."""
    return GPU_MEMORY_KIND_BASE + kind_id


EVENT_TYPES = (
    event_type(GPU_MEMORY_ALLOCATED, "CUDA memory allocated", "CUDA memory usage",
               "Bytes of CUDA memory (all kinds) the process holds on this GPU, written at "
               "every allocation and free on the GPU's metrics row.", kinds=KINDS),
    *(event_type(kind_type(k), f"CUDA memory allocated: {label}", "CUDA memory usage",
                 f"Bytes of {label.lower()} memory the process holds on this GPU (metrics row).",
                 kinds=KINDS)
      for k, label in MEMORY_KINDS.items()),
    event_type(GPU_MEMORY_ALLOCATION, "CUDA memory allocation size", "CUDA memory usage",
               "Bytes allocated at that time (metrics row; written when non-zero).",
               kinds=KINDS),
    event_type(GPU_MEMORY_FREE, "CUDA memory free size", "CUDA memory usage",
               "Bytes freed at that time (metrics row; written when non-zero).", kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = ()
ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
