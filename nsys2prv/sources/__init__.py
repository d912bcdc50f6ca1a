"""Readers, one module per kind of nsys data, each returning normalised tables.

`KINDS` lists the kinds the translator knows, in the order they are read (CUDA API calls
first: GPU activities are matched to them by correlation id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..report.report import Report
from . import cuda_api, cuda_sync, kernels, memory, nvtx, osrt


@dataclass(frozen=True)
class Kind:
    name: str
    table: str
    description: str
    available: Callable[[Report], bool]


KINDS: dict[str, Kind] = {
    k.name: k for k in (
        Kind("cuda_api", cuda_api.TABLE, "CUDA runtime/driver API calls", cuda_api.available),
        Kind("kernels", kernels.TABLE, "CUDA kernels (NCCL kernels included)", kernels.available),
        Kind("memcpy", memory.MEMCPY_TABLE, "CUDA memcpy", memory.memcpy_available),
        Kind("memset", memory.MEMSET_TABLE, "CUDA memset", memory.memset_available),
        Kind("cuda_sync", cuda_sync.TABLE, "CUDA synchronization records", cuda_sync.available),
        Kind("nvtx", nvtx.TABLE, "NVTX ranges and marks", nvtx.available),
        Kind("osrt", osrt.TABLE, "OS runtime calls", osrt.available),
    )
}


def available_kinds(report: Report) -> list[str]:
    """Kinds with data in this report, in reading order."""
    return [name for name, kind in KINDS.items() if kind.available(report)]
