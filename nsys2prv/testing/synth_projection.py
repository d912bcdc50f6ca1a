"""A small export whose NVTX ranges project onto the GPU in every way the translation must
handle, with the events it must write on the GPU rows (tests/test_projection_trace.py).

One process, GPU 0 with streams 7 and 8, two threads. Times in us on the report's clock
(every CUDA call lasts 2 us):

* main thread: `step` [0, 100] holds `layer A` [10, 30] (a kernel on stream 7 and one on
  stream 8, a copy on stream 8) and `layer B` [40, 60] (a kernel on stream 7), with `op`
  [50, 58] in it (a kernel on stream 7) and `inner` [53, 57] in that (a kernel on stream 7:
  four levels); all that work runs at 200-340 us, long after the ranges closed. `idle`
  [70, 80] launches nothing. `handoff` (start/end, [102, 108]) is ended on the helper
  thread: nsys does not project it, its kernel is launched in no range. `twin a`/`twin b`
  [110, 120] have equal times: nsys cannot nest them (level unknown).
* helper thread: `side` [15, 50], level 0 of its thread, launches onto stream 7 at 180-190
  and 230-250: on stream 7 its span [180, 250] overlaps `step`'s [200, 340] at level 0, so
  `side` shows from 180 and its end (250, inside `step`) moves to where `step` starts (200).

`projection_export` adds GPU metric samples (SM Issue, Tensor Active, DRAM Read Bandwidth)
over the kernels, for the layers' rates (hwcounters/layer_rates.cfg).
"""

from __future__ import annotations

import os
from pathlib import Path

from .synth import ApiCall, Kernel, Memcpy, Nvtx, Spec, write_export
from .synth_metrics import MetricsSpec, Sample, add_native_metrics

PID, MAIN, HELPER = 300, 300, 301
US = 1_000
BASE = 1_000_000  # the report's clock at the spec's 0 us

# (range, stream, level) -> (first start, last end) in us: the spans nsys projects
SPANS = {
    ("step", 7, 0): (200, 340), ("step", 8, 0): (210, 320),
    ("layer A", 7, 1): (200, 230), ("layer A", 8, 1): (210, 320),
    ("layer B", 7, 1): (260, 340), ("op", 7, 2): (330, 340), ("inner", 7, 3): (335, 340),
    ("side", 7, 0): (180, 250),
}
# what the GPU rows carry: (stream, level, time us, range name or None for the end)
EVENTS = sorted([
    (7, 0, 180, "side"), (7, 0, 200, None), (7, 0, 200, "step"), (7, 0, 340, None),
    (8, 0, 210, "step"), (8, 0, 320, None),
    (7, 1, 200, "layer A"), (7, 1, 230, None), (7, 1, 260, "layer B"), (7, 1, 340, None),
    (8, 1, 210, "layer A"), (8, 1, 320, None),
    (7, 2, 330, "op"), (7, 2, 340, None), (7, 3, 335, "inner"), (7, 3, 340, None),
], key=lambda e: (e[0], e[1], e[2], e[3] or ""))


def projection_spec() -> Spec:
    """The export described in the module's docstring."""
    spec = Spec(host="proj-node")
    spec.processes = [(PID, "proj_app")]
    spec.threads = [(PID, MAIN, "proj_app"), (PID, HELPER, "helper")]
    spec.gpus = [(0, "NVIDIA H100 80GB HBM3")]
    corr = iter(range(1, 1000))

    def t(us: float) -> int:
        return BASE + int(us * US)

    def launch(tid: int, at: float, stream: int, run: tuple[float, float], name: str,
               copy: bool = False) -> None:
        c = next(corr)
        spec.api.append(ApiCall(t(at), t(at + 2), PID, tid, "cudaMemcpyAsync_v3020" if copy
                                else "cudaLaunchKernel_v7000", c))
        if copy:
            spec.memcpy.append(Memcpy(t(run[0]), t(run[1]), PID, 0, stream, c, bytes=1 << 20))
        else:
            spec.kernels.append(Kernel(t(run[0]), t(run[1]), PID, 0, stream, name, c))

    def rng(start: float, end: float, text: str, tid: int = MAIN, kind: str = "pushpop",
            end_tid: int | None = None) -> None:
        spec.nvtx.append(Nvtx(t(start), t(end), PID, tid, kind, text, end_tid=end_tid))

    rng(0, 100, "step")
    rng(10, 30, "layer A")
    launch(MAIN, 12, 7, (200, 230), "gemm_a")
    launch(MAIN, 20, 8, (210, 300), "softmax_a")
    launch(MAIN, 25, 8, (300, 320), "copy_a", copy=True)
    rng(40, 60, "layer B")
    launch(MAIN, 45, 7, (260, 330), "gemm_b")
    rng(50, 58, "op")
    launch(MAIN, 51, 7, (330, 335), "relu_b")
    rng(53, 57, "inner")
    launch(MAIN, 54, 7, (335, 340), "inner_b")
    rng(70, 80, "idle")
    rng(102, 108, "handoff", kind="startend", end_tid=HELPER)
    launch(MAIN, 104, 8, (400, 410), "handoff_k")
    rng(110, 120, "twin a")
    rng(110, 120, "twin b")
    launch(MAIN, 115, 8, (420, 430), "twin_k")
    rng(15, 50, "side", tid=HELPER)
    launch(HELPER, 16, 7, (180, 190), "side_1")
    launch(HELPER, 40, 7, (230, 250), "side_2")
    spec.api.sort(key=lambda a: a.start)
    spec.nvtx.sort(key=lambda n: n.start)
    return spec


# what the layer views give on this export (tests/data/paramedir/projection): per stream and
# innermost range on it, the kernels' time (us) and count; the innermost range over time
INNERMOST = {7: [(180, 200, "side"), (200, 230, "layer A"), (230, 260, "step"),
                 (260, 330, "layer B"), (330, 335, "op"), (335, 340, "inner")],
             8: [(210, 320, "layer A")]}
KERNEL_TIME = {(7, "side"): 10, (7, "layer A"): 30, (7, "step"): 20, (7, "layer B"): 70,
               (7, "op"): 5, (7, "inner"): 5, (8, "layer A"): 90}  # step: side_2 runs in it
KERNELS = {key: 1 for key in KERNEL_TIME}


def projection_metrics() -> MetricsSpec:
    """SM Issue, Tensor Active and DRAM Read Bandwidth sampled on GPU 0 every 20 us over
    the kernels (160-440 us), with values that differ per period, so the kernels get rates
    of their own."""
    names = ["SM Issue [Throughput %]", "Tensor Active [Throughput %]",
             "DRAM Read Bandwidth [Throughput %]"]
    m = MetricsSpec(names={0: names}, cuda_devices=[(0, 0, PID)])
    for i in range(14):
        at = BASE + (160 + 20 * i) * US
        m.samples.append(Sample(at, 0, {names[0]: 20 + (i * 37) % 70,
                                        names[1]: (i * 23) % 60, names[2]: 5 + (i * 13) % 40}))
    return m


def projection_export(path: str | os.PathLike[str]) -> Path:
    """The export, with the GPU metrics of `projection_metrics`."""
    return add_native_metrics(write_export(path, projection_spec()), projection_metrics())
