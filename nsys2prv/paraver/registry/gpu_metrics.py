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
* ``gpu_metrics_kernel_rate`` (67502000 + offset), on the GPU stream row of every kernel of a
  sampled GPU, for the metrics a kernel drives (`KERNEL_METRICS`): the kernel's *rate* for
  the metric, in effect from its start until the next kernel of the row. The rate is the
  metric's value while that kernel name runs on that GPU, separated by the sample-mixing
  model (`analysis/rate_model.py`) from the other kernels, copies and idle time that share
  its sampling periods: one value per (GPU, demangled kernel name), the same on every
  launch. A value is written only where it changes from the previous kernel of the stream
  (no value at a kernel's end: on a 10^7-kernel run, writing every rate twice per kernel
  doubled the trace). So a 2D histogram with the kernel name (63000006, ``Last Evt Val``)
  as control window and this type as data window (``Last Evt Val``) gives each kernel
  name's rate (``Average value``): what `nsys2prv analyze` prints under "Inside the
  kernels". Between kernels the value is the last kernel's; views multiply it by a
  kernel-running window to draw it only while kernels run.
* ``gpu_metrics_predicted`` (67503000 + offset), on the GPU's metrics row, at each sample's
  time, for the metrics a kernel drives: the value the model predicts for that sampling
  period from the rates of what ran in it. Beside the measured samples (``gpu_metrics``),
  it shows where the model fits.
* ``GPU_METRICS_METHOD`` (67504000), on each kernel of a sampled GPU at its start (0 at its
  end): how its rates were found: 1 measured directly (the kernel fills whole sampling
  periods), 2 separated by the model, 3 in a group of kernels that never run apart (their
  rates cannot be told apart: each gets the group's).

67501000 + offset (``gpu_metrics_on_kernel``: the sampling period's value on each kernel,
written before the model) is retired: never written again, never reused.
"""

from __future__ import annotations

import re

from .core import TypeRange, event_type

KINDS = ("gpu_metrics",)
PRECISION = 2
SCALE = 10 ** PRECISION

GPU_METRICS_BASE = 67_500_000
GPU_METRICS_ON_KERNEL_BASE = 67_501_000  # retired (see the docstring)
GPU_METRICS_RATE_BASE = 67_502_000
GPU_METRICS_PREDICTED_BASE = 67_503_000
GPU_METRICS_METHOD = 67_504_000

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

# The metrics a kernel drives, whose rates are written on the kernels' rows (every metric is
# fitted and in `analyze`; link, copy-engine and clock metrics follow copies and power, not
# kernels, and stay on the metrics rows with their predictions).
KERNEL_METRICS = ("SM Active", "SM Issue", "Tensor Active", "Tensor Active / FP16 Active",
                  "DRAM Read Bandwidth", "DRAM Write Bandwidth", "Compute Warps in Flight",
                  "Unallocated Warps in Active SMs")


def _per_metric(name: str, base: int, label: str, doc: str) -> TypeRange:
    """One type per metric from `base`, at the same offsets in every range of this family
    (samples, rates, predictions): a metric's types differ by their base alone."""
    return TypeRange(name, base, 1000, label, "GPU metrics", doc, precision=PRECISION,
                     kinds=frozenset(KINDS), fixed=_FIXED, first_free=FIRST_FREE_OFFSET)


SAMPLES = _per_metric(
    "gpu_metrics", GPU_METRICS_BASE, "GPU metric: {key}",
    "Device-wide metric sample on the GPU's metrics row, one multi-event per sample at its "
    "timestamp (the start of the sampling period: view with Last Evt Val); value x 100, "
    "PRECISION 2, in percent for throughput metrics and MHz for clocks. Known metrics have "
    "fixed types (base + offset: SM Active 0, SM Issue 1, Tensor Active 2, Tensor Active / "
    "FP16 Active 3, DRAM Read 4, DRAM Write 5, GR Active 6, PCIe RX 7, PCIe TX 8, NVLink RX "
    "9, NVLink TX 10, GPC clock 11, SYS clock 12, Compute warps in flight 13, Unallocated "
    "warps in active SMs 14, Sync copy engine 15, Async copy engine 16); others from offset "
    "100 in name order.")
RATE = _per_metric(
    "gpu_metrics_kernel_rate", GPU_METRICS_RATE_BASE, "GPU metric rate of kernel: {key}",
    "On the GPU stream row of every kernel of a sampled GPU, for the metrics a kernel drives "
    "(SM Active, SM Issue, Tensor Active, Tensor Active / FP16 Active, DRAM read and write "
    "bandwidth, compute warps in flight, unallocated warps in active SMs): the kernel's rate "
    "(its value while this kernel name runs on this GPU, separated from the other kernels, "
    "copies and idle time of its sampling periods by the sample-mixing model, "
    "docs/kernel_metrics.md), in effect from the kernel's start until the next kernel of "
    "the row (written only where it changes); the same value on every launch of a name on a "
    "GPU. With Last Evt Val, a histogram with control = kernel name (63000006), data = this "
    "type and statistic 'Average value' gives each kernel name's rate; outside kernels the "
    "value means nothing (multiply by a kernel-running window to draw it). Same offsets as "
    "the samples.")
PREDICTED = _per_metric(
    "gpu_metrics_predicted", GPU_METRICS_PREDICTED_BASE, "GPU metric predicted: {key}",
    "On the GPU's metrics row at each sample's time, for the metrics a kernel drives: the "
    "value the sample-mixing model predicts for that sampling period from the rates of what "
    "ran in it (view it beside the measured samples, same offsets, Last Evt Val).")

METHOD_DIRECT, METHOD_MODEL, METHOD_GROUP = 1, 2, 3
METHODS = {"direct": METHOD_DIRECT, "model": METHOD_MODEL, "group": METHOD_GROUP}

EVENT_TYPES = (
    event_type(GPU_METRICS_METHOD, "GPU metrics: how the kernel's rates were found",
               "GPU metrics",
               "On each kernel of a sampled GPU at its start (0 at its end): 1 measured "
               "directly (the kernel fills whole sampling periods), 2 separated by the "
               "sample-mixing model, 3 one of a group of kernels that never run apart (each "
               "gets the group's rates).",
               values="gpu_metrics_method", kinds=KINDS),
)
TYPE_RANGES = (SAMPLES, RATE, PREDICTED)
VALUE_FAMILIES = ()
ENUMS: dict = {"gpu_metrics_method": {
    METHOD_DIRECT: "measured directly", METHOD_MODEL: "separated by the model",
    METHOD_GROUP: "group (cannot be told apart)"}}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
RETIRED = ((GPU_METRICS_ON_KERNEL_BASE, GPU_METRICS_ON_KERNEL_BASE + 999,
            "GPU metric during kernel: the value of the sampling period in effect, written on "
            "every kernel it overlapped (the direct attribution); replaced by the kernels' "
            "rates, 67502000-67502999"),)


def is_percent(key: str) -> bool:
    """Whether a metric key is a percentage of a peak (no unit suffix left by `normalise`,
    not a clock): its values, and the kernels' rates, lie in 0-100."""
    return not _SUFFIX.match(key) and key not in _CLOCKS
