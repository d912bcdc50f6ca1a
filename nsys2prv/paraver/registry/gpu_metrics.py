"""GPU metrics sampled by nsys (`--gpu-metrics-devices`): one type per metric, keyed by name.

Metric ids are not stable across exports or GPU generations, so types are keyed by the metric
*name* as normalised by `normalise` (unit suffix folded, known aliases and spellings folded):
well-known metrics have fixed types, the others get types in name order per trace. Values are
written as value x 100 with PRECISION 2, so Paraver shows (and cfgs compute on) the metric in
its own unit with two decimals: percent for throughput metrics, MHz for clocks.

Two ranges use the same keys:

* ``gpu_metrics`` (67500000 + offset), on the GPU's "GPU d metrics" row: one multi-event per
  sample at the sample's timestamp. nsys' timestamp is the *start* of the sampling period
  (the value holds until the next sample, as nsys draws it), so view these types with the
  ``Last Evt Val`` semantic.
* ``gpu_metrics_on_kernel`` (67501000 + offset), on the GPU stream row of every kernel that
  runs on that GPU while sampled: at max(kernel start, sample time) the value of the sampling
  period in effect, and 0 at the kernel's end (or where the GPU's last sampling period ends:
  like the time before the first sample, unsampled kernel time is 0). So, with
  ``Last Evt Val``, the window is exactly the device metric while the kernel runs and 0
  elsewhere, and a 2D histogram with the kernel name (63000006, ``Last Evt Val``) as
  control window, this type as data window and the statistic ``Average value`` gives the
  time-weighted mean of the metric over each kernel name's execution time. Kernels running
  at once on one GPU each get the device-wide value (it is not apportioned). The events of a
  kernel moved to an overlap lane row move with it.
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

# Spellings seen across nsys versions (lower case, unit suffix removed) -> canonical name.
# 2021-2022 JSON keys: "SM Active", "Compute Warps In Flight", "DRAM Read Throughput",
# "PCIe Rx Throughput", "GR Active (GE/CE)", "NVLink bytes received", "Unallocated Warps in
# Active SM"; 2024+ names: "SMs Active [Throughput %]", "DRAM Read Bandwidth [Throughput %]".
_ALIASES = {
    "sms active": "SM Active",
    "dram read throughput": "DRAM Read Bandwidth",
    "dram write throughput": "DRAM Write Bandwidth",
    "pcie read throughput": "PCIe RX Throughput",
    "pcie write throughput": "PCIe TX Throughput",
    "gr active (ge/ce)": "GR Active",
    "nvlink bytes received": "NVLink RX Throughput",
    "nvlink bytes transmitted": "NVLink TX Throughput",
    "unallocated warps in active sm": "Unallocated Warps in Active SMs",
    **{k.lower(): k for k in KNOWN_METRICS},
}
# Unit suffixes that mean the unit the unsuffixed (older) names already had: dropped.
_PERCENT_UNITS = {"throughput %", "%"}
# Clocks: older exports give Hz without a suffix, newer ones "[MHz]"; the key's unit is MHz.
_CLOCKS = {"GPC Clock Frequency", "SYS Clock Frequency"}
_SUFFIX = re.compile(r"^(?P<base>.*?)\s*\[(?P<unit>[^\]]*)\]\s*$")


def normalise(name: str) -> tuple[str, float]:
    """(key, factor) of a metric name: the trace-wide key, and the factor that converts the
    sample value into the key's unit.

    '[Throughput %]' is dropped (older exports name the same percentage without a suffix),
    other unit suffixes stay in the key because newer exports have several metrics with one
    base name ('Compute Warps in Flight [Avg]', '... [Avg Warps per Cycle]'); known aliases
    and capitalisations are folded ('SMs Active' -> 'SM Active', 'Warps In Flight' ->
    'Warps in Flight'); clock frequencies are in MHz whatever the export wrote (Hz before
    the '[MHz]' suffix appeared).
    """
    text = re.sub(r"\s+", " ", name.replace("\\/", "/")).strip()
    unit = None
    m = _SUFFIX.match(text)
    if m:
        text, unit = m.group("base"), m.group("unit").strip()
    text = re.sub(r" In Flight\b", " in Flight", text)
    base = _ALIASES.get(text.lower(), text)
    factor = 1.0
    if base in _CLOCKS:
        if unit is None or unit.lower() == "hz":
            factor, unit = 1e-6, None
        elif unit.lower() == "mhz":
            unit = None
    if unit is not None and unit.lower() in _PERCENT_UNITS:
        unit = None
    return (base if unit is None else f"{base} [{unit}]"), factor


def metric_key(name: str) -> str:
    """Trace-wide key of a metric name (see `normalise`)."""
    return normalise(name)[0]


_FIXED = {k: v for k, v in KNOWN_METRICS.items()}

SAMPLES = TypeRange(
    "gpu_metrics", GPU_METRICS_BASE, 1000, "GPU metric: {key}", "GPU metrics",
    "Device-wide metric sample on the GPU's metrics row, one multi-event per sample at its "
    "timestamp (the start of the sampling period: view with Last Evt Val); value x 100, "
    "PRECISION 2, in percent for throughput metrics and MHz for clocks. Known metrics have "
    "fixed types (base + offset: SM Active 0, SM Issue 1, Tensor Active 2, Tensor Active / "
    "FP16 Active 3, DRAM Read 4, DRAM Write 5, GR Active 6, PCIe RX 7, PCIe TX 8, NVLink RX "
    "9, NVLink TX 10, GPC clock 11, SYS clock 12, Compute warps in flight 13, Unallocated "
    "warps in active SMs 14, Sync copy engine 15, Async copy engine 16); others from offset "
    "100 in name order.",
    precision=PRECISION, kinds=frozenset(KINDS), fixed=_FIXED, first_free=FIRST_FREE_OFFSET)
ON_KERNEL = TypeRange(
    "gpu_metrics_on_kernel", GPU_METRICS_ON_KERNEL_BASE, 1000,
    "GPU metric during kernel: {key}", "GPU metrics",
    "The same samples on the stream rows of the kernels running on that GPU: at max(kernel "
    "start, sample time) the value of the sampling period in effect, 0 at the kernel's end. "
    "With Last Evt Val it is the metric while the kernel runs and 0 elsewhere, so a "
    "histogram with control = kernel name (63000006), data = this type and statistic "
    "'Average value' gives the time-weighted mean per kernel (same offsets as the samples).",
    precision=PRECISION, kinds=frozenset(KINDS), fixed=_FIXED, first_free=FIRST_FREE_OFFSET)

EVENT_TYPES = ()
TYPE_RANGES = (SAMPLES, ON_KERNEL)
VALUE_FAMILIES = ()
ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
