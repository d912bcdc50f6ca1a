"""cuda_memcpy_async: asynchronous copies that touch pageable host memory.

A copy counts when the call that issued it is named `cudaMemcpy%Async%` (SQLite LIKE) and
its source or destination memory kind is pageable (CUPTI kind 0): CUDA stages such a copy
through a pinned buffer, and the call returns only when the copy is done, so it is not
asynchronous at all.
"""

from __future__ import annotations

import polars as pl

from .base import Rule, RuleInput
from .cuda_memcpy_sync import COLUMNS, check, copies

PAGEABLE = 0  # CUPTI memory kind


def find(inp: RuleInput, options: dict) -> pl.DataFrame:
    condition = f'"srcKind" = {PAGEABLE} OR "dstKind" = {PAGEABLE}'
    return copies(inp, condition, ("cudaMemcpy%Async%",), (), int(options["rows"]))


def _advice(options: dict) -> str:
    return ("These asynchronous copies read or write PAGEABLE host memory, so CUDA runs them "
            "synchronously: the calling thread waits, and the GPU may wait for it.\n\n"
            "What to try: allocate the host buffers as PINNED memory (cudaMallocHost, "
            "cudaHostAlloc or cudaHostRegister).")


def _no_result(options: dict) -> str:
    return "No asynchronous copies with pageable memory found: no problem to report."


RULE = Rule(
    name="cuda_memcpy_async",
    old_name="cuda-async-memcpy",
    title="CUDA Async Memcpy with Pageable Memory",
    summary="asynchronous memory copies that pageable host memory makes synchronous",
    options=(),
    columns=COLUMNS,
    check=check,
    find=find,
    advice=_advice,
    no_result=_no_result,
)
