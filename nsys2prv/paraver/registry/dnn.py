"""cuDNN and cuBLAS calls traced by nsys (`-t cudnn,cublas`) on the calling CPU thread."""

from __future__ import annotations

from .core import ValueFamily, event_type

KINDS = ("dnn",)

CUDNN_CALL = 67_820_000
CUBLAS_CALL = 67_820_001

EVENT_TYPES = (
    event_type(CUDNN_CALL, "cuDNN call", "CUDA libraries",
               "cuDNN function call on the CPU thread (value = function; 0 = end).",
               values="cuda_library_calls", kinds=KINDS),
    event_type(CUBLAS_CALL, "cuBLAS call", "CUDA libraries",
               "cuBLAS function call on the CPU thread (value = function; 0 = end).",
               values="cuda_library_calls", kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = (ValueFamily("cuda_library_calls", "cuDNN and cuBLAS function names"),)
ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
