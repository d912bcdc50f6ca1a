"""Translators, one module per kind of nsys data (see base.py), imported only when a report
has that kind.

`KINDS` says, for every kind in translation order, which module of this package translates
it and which function of `nsys2prv.sources` tells whether a report has it: finding the kinds
of a report imports their readers' modules, and only the kinds present are imported to be
translated (a run of the shipped sample does not import the MPI, NCCL or GPU-metrics code).
A new kind adds its line here; tests/test_cli.py checks the table against the modules'
`TRANSLATORS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from .base import Context, Translator


class Kind(NamedTuple):
    """Where a kind lives: its module here and its check in nsys2prv.sources."""

    module: str  # nsys2prv.paraver.kinds.<module> defines its Translator in TRANSLATORS
    order: int  # kinds are translated in (order, name) order (CUDA API first: others match it)
    available: str  # "<module>.<function>" of nsys2prv.sources: whether a report has the kind


KINDS: dict[str, Kind] = {
    "cuda_api": Kind("cuda_api", 10, "cuda_api.available"),
    "kernels": Kind("kernels", 20, "kernels.available"),
    "nccl": Kind("nccl", 25, "nccl.available"),
    "memcpy": Kind("memory", 30, "memory.memcpy_available"),
    "memset": Kind("memory", 31, "memory.memset_available"),
    "graphs": Kind("graphs", 35, "graphs.available"),
    "cuda_sync": Kind("cuda_sync", 40, "cuda_sync.available"),
    "cuda_deps": Kind("cuda_deps", 41, "cuda_sync.available"),
    "mpi": Kind("mpi", 45, "mpi.available"),
    "nvtx": Kind("nvtx", 50, "nvtx.available"),
    "dnn": Kind("dnn", 55, "dnn.available"),
    "osrt": Kind("osrt", 60, "osrt.available"),
    "openacc": Kind("openacc", 65, "openacc.available"),
    "sched": Kind("sched", 65, "sched.available"),
    "gpu_memory": Kind("gpu_memory", 70, "gpu_memory.available"),
    "gpu_metrics": Kind("gpu_metrics", 70, "gpu_metrics.available"),
    # after every kind that gives CPU rows their lifetimes: samples do not change them
    "samples": Kind("samples", 80, "samples.available"),
}


def available(name: str, report) -> bool:
    """Whether `report` has data of kind `name` (imports only the kind's reader)."""
    module, function = KINDS[name].available.rsplit(".", 1)
    return getattr(importlib.import_module(f"nsys2prv.sources.{module}"), function)(report)


class _Translators(Mapping):
    """Kind name -> Translator, in translation order; a kind's module is imported when its
    translator is first asked for."""

    def __getitem__(self, name: str) -> Translator:
        module = importlib.import_module(f"{__name__}.{KINDS[name].module}")
        return next(t for t in module.TRANSLATORS if t.name == name)

    def __iter__(self) -> Iterator[str]:
        return iter(KINDS)

    def __len__(self) -> int:
        return len(KINDS)


TRANSLATORS: Mapping[str, Translator] = _Translators()

__all__ = ["KINDS", "TRANSLATORS", "Translator", "Context", "available"]
