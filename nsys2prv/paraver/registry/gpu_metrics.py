"""GPU metrics sampled by nsys (`--gpu-metrics-devices`): one type per metric, keyed by name.

Metric ids are not stable across exports or GPU generations, so types are keyed by the metric
*name* (unit suffix removed, known aliases folded): well-known metrics have fixed types, the
others get types in name order per trace. Values are written as value x 100 with PRECISION 2,
so Paraver shows (and cfgs compute on) the metric in its own unit with two decimals.

Two ranges use the same keys: samples on the GPU's metrics row, and the same samples written
on the GPU stream rows of the kernels running at the sample time (per-kernel attribution).
"""

from __future__ import annotations

import re

from .core import TypeRange

KINDS = ("gpu_metrics",)
PRECISION = 2
SCALE = 10 ** PRECISION

GPU_METRICS_BASE = 67_500_000
GPU_METRICS_ON_KERNEL_BASE = 67_501_000

# name (as normalised by metric_key) -> offset in both ranges
KNOWN_METRICS = {
    "SM Active": 0, "SM Issue": 1, "Tensor Active": 2, "Tensor Active / FP16 Active": 3,
    "DRAM Read Bandwidth": 4, "DRAM Write Bandwidth": 5, "GR Active": 6,
    "PCIe RX Throughput": 7, "PCIe TX Throughput": 8, "NVLink RX Throughput": 9,
    "NVLink TX Throughput": 10, "GPC Clock Frequency": 11, "SYS Clock Frequency": 12,
    "Compute Warps in Flight": 13, "Unallocated Warps in Active SMs": 14,
    "Sync Copy Engine Active": 15, "Async Copy Engine Active": 16,
}
FIRST_FREE_OFFSET = 100

_ALIASES = {
    "SMs Active": "SM Active",
    "DRAM Read Throughput": "DRAM Read Bandwidth",
    "DRAM Write Throughput": "DRAM Write Bandwidth",
    "PCIe Rx Throughput": "PCIe RX Throughput",
    "PCIe Tx Throughput": "PCIe TX Throughput",
    "GR Active (GE/CE)": "GR Active",
}


def metric_key(name: str) -> str:
    """Trace-wide key of a metric name: unit suffixes ('[Throughput %]') dropped, aliases
    folded ('SMs Active' -> 'SM Active')."""
    base = re.sub(r"\s*\[[^\]]*\]", "", name).replace("\\/", "/").strip()
    base = re.sub(r"\s+", " ", base)
    return _ALIASES.get(base, base)


_FIXED = {k: v for k, v in KNOWN_METRICS.items()}

SAMPLES = TypeRange(
    "gpu_metrics", GPU_METRICS_BASE, 1000, "GPU metric: {key}", "GPU metrics",
    "Device-wide metric sample on the GPU's metrics row (value x 100, PRECISION 2). Known "
    "metrics have fixed types (base + offset: SM Active 0, SM Issue 1, Tensor Active 2, "
    "Tensor Active / FP16 Active 3, DRAM Read 4, DRAM Write 5, GR Active 6, PCIe RX 7, "
    "PCIe TX 8, NVLink RX 9, NVLink TX 10, GPC clock 11, SYS clock 12, warps in flight 13, "
    "...); others from offset 100 in name order.",
    precision=PRECISION, kinds=frozenset(KINDS), fixed=_FIXED, first_free=FIRST_FREE_OFFSET)
ON_KERNEL = TypeRange(
    "gpu_metrics_on_kernel", GPU_METRICS_ON_KERNEL_BASE, 1000,
    "GPU metric during kernel: {key}", "GPU metrics",
    "The same samples written on the stream rows of the kernels running on that GPU at the "
    "sample time, so a histogram of kernel name x metric gives the average metric per kernel "
    "(same offsets as the samples).",
    precision=PRECISION, kinds=frozenset(KINDS), fixed=_FIXED, first_free=FIRST_FREE_OFFSET)

EVENT_TYPES = ()
TYPE_RANGES = (SAMPLES, ON_KERNEL)
VALUE_FAMILIES = ()
ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
