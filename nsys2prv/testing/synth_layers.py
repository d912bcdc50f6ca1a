"""A synthetic transformer-like training run whose layers on the GPU are known exactly
(`nsys2prv analyze`'s "Layers on the GPU", `analysis/layers.py`).

Each rank (one export per rank, its own clock: `clock_offset` apart) runs `steps` steps on
its main thread:

    ProfilerStep#k > forward > layer_0 ... layer_{L-1}       (NVTX push/pop)
                   > backward (an NCCL all-reduce on a stream of its own)
                   > optimizer (a CUDA graph: its kernel nodes share the launch call)

and a loader thread that copies each step's input to the device inside a 'load' range
(start/end, the first thing of the step's GPU work). The host launches fast (each launch
call `LAUNCH` ns): the GPU runs the work long after the range that launched it closed.
Each layer launches KERNELS kernels on the compute stream; a layer's kernels last
`LAYER_NS` each, `slow` (rank, step, layer) -> factor makes one instance slower.

`layers_run` returns `Truth`: for every NVTX range its thread, CPU start and end, and, as
nsys projects it, its projected start and end, its launching calls with GPU work and its
nesting level, computed here from the generator's own records (per range: the work of the
calls that start inside it on its thread), so tests compare with it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .synth import ApiCall, Kernel, Memcpy, Nvtx, Spec, Sync, write_export

US = 1_000
PID = 7100
COMPUTE, COMM, COPY = 7, 13, 14  # streams
LAUNCH = 4 * US  # a launch call
GAP = 1 * US  # between two calls
DELAY = 2 * US  # call end -> its work may start
LAYER_NS = 120 * US  # a layer's kernel
KERNELS = 3  # per layer
NCCL_NS = 200 * US
OPT_NODES = (30 * US, 20 * US, 25 * US)  # the optimizer graph's kernel nodes
COPY_NS = 150 * US
T0 = 1_000 * US
GPU_NAME = "NVIDIA H100 80GB HBM3"
KERNEL_NAMES = ("void gemm_kernel<float, 128>(float*, const float*, int)",
                "void attention_kernel<float>(float*, const float*, int)",
                "void layernorm_kernel<float>(float*, int)")


@dataclass
class Range:
    """One NVTX range as nsys would project it (times on its rank's own clock)."""

    rank: int
    tid: int
    name: str
    start: int
    end: int
    level: int
    parent: int | None  # index in Truth.ranges
    work: list[tuple[int, int, int]] = field(default_factory=list)  # (call, start, end)

    @property
    def ops(self) -> int:
        return len({c for c, _, _ in self.work})

    @property
    def projected(self) -> tuple[int, int] | None:
        if not self.work:
            return None
        return min(s for _, s, _ in self.work), max(e for _, _, e in self.work)

    @property
    def gpu(self) -> int:
        return sum(e - s for _, s, e in self.work)


@dataclass
class Truth:
    path: Path  # the export (one rank) or the directory of the rank exports
    ranks: int
    steps: int
    layers: int
    ranges: list[Range]
    clock_offset: int

    def of(self, name: str) -> list[Range]:
        return [r for r in self.ranges if r.name == name]


class _Rank:
    """One rank's host and GPU timelines as the generator walks them."""

    def __init__(self, rank: int, ranks: int, clock_offset: int) -> None:
        self.rank = rank
        self.pid = PID + rank
        self.main, self.loader = self.pid, self.pid + 1
        self.spec = Spec(host=f"layers-node{rank}",
                         session_start_ns=1_700_000_000_000_000_000 + rank * clock_offset,
                         env={"OMPI_COMM_WORLD_RANK": str(rank),
                              "OMPI_COMM_WORLD_SIZE": str(ranks)})
        self.spec.processes = [(self.pid, "train.py")]
        self.spec.threads = [(self.pid, self.main, "python"), (self.pid, self.loader, "loader")]
        self.spec.gpus = [(0, GPU_NAME)]
        self.corr = 1
        self.free = {COMPUTE: 0, COMM: 0, COPY: 0}  # when each stream is free
        self.calls: list[tuple[int, int, int, list[tuple[int, int]]]] = []  # tid, start, corr, work

    def launch(self, tid: int, t: int, stream: int, durations: list[int], name: str,
               graph: bool = False, call_ns: int = LAUNCH) -> int:
        """A launch call at `t` on `tid`, `call_ns` long, whose work (one activity per
        duration, back to back on `stream`) runs when the stream is free; returns the call's
        end."""
        call = "cudaGraphLaunch_v10000" if graph else "cudaLaunchKernel_v7000"
        self.spec.api.append(ApiCall(t, t + call_ns, self.pid, tid, call, self.corr))
        start = max(t + call_ns + DELAY, self.free[stream])
        work = []
        for i, d in enumerate(durations):
            kname = name if not graph else f"void optimizer_node_{i}<float>(float*, int)"
            short = kname.split("(")[0].split("<")[0].split()[-1]
            self.spec.kernels.append(Kernel(start, start + d, self.pid, 0, stream, short,
                                            self.corr, full_name=kname))
            work.append((start, start + d))
            start += d
        self.free[stream] = start
        self.calls.append((tid, t, self.corr, work))
        self.corr += 1
        return t + call_ns

    def copy(self, tid: int, t: int) -> int:
        self.spec.api.append(ApiCall(t, t + LAUNCH, self.pid, tid, "cudaMemcpyAsync_v3020",
                                     self.corr))
        start = max(t + LAUNCH + DELAY, self.free[COPY])
        self.spec.memcpy.append(Memcpy(start, start + COPY_NS, self.pid, 0, COPY, self.corr,
                                       bytes=16 << 20, copy_kind=1, src_kind=1, dst_kind=2))
        self.free[COPY] = start + COPY_NS
        self.calls.append((tid, t, self.corr, [(start, start + COPY_NS)]))
        self.corr += 1
        return t + LAUNCH


def layers_run(path: str | os.PathLike[str], *, ranks: int = 1, steps: int = 6,
               layers: int = 8, slow: dict[tuple[int, int, int], float] | None = None,
               launch_bound: dict[int, int] | None = None,
               clock_offset: int = 5_000 * US, layout: str = "3.17.1") -> Truth:
    """Write the run (see the module's docstring) and return what nsys would project.
    `launch_bound` (layer -> call ns): that layer's launch calls take so long that the GPU
    waits for each of its kernels (the host is in the launch call meanwhile)."""
    slow = slow or {}
    launch_bound = launch_bound or {}
    path = Path(path)
    if ranks > 1:
        path.mkdir(parents=True, exist_ok=True)
    rks = [_Rank(r, ranks, clock_offset) for r in range(ranks)]
    ranges: list[list[Range]] = [[] for _ in range(ranks)]

    def push(r: int, tid: int, name: str, start: int, end: int, level: int,
             parent: int | None, kind: str = "pushpop") -> int:
        rks[r].spec.nvtx.append(Nvtx(start, end, rks[r].pid, tid, kind, name))
        ranges[r].append(Range(r, tid, name, start, end, level, parent))
        return len(ranges[r]) - 1

    step0 = T0
    for k in range(steps):  # the ranks start each step together (the all-reduce meets them)
        ends = []
        for r, rk in enumerate(rks):
            # the loader thread copies the step's input (a start/end range of its own)
            lt = step0 + 2 * US
            le = rk.copy(rk.loader, lt + US)
            push(r, rk.loader, "load", lt, le + US, 0, None, "startend")
            t = step0 + 10 * US
            fwd0 = t
            layer_idx = []
            for i in range(layers):
                l0 = t
                t += GAP
                f = slow.get((r, k, i), 1.0)
                for j in range(KERNELS):
                    t = rk.launch(rk.main, t, COMPUTE, [int(LAYER_NS * f)], KERNEL_NAMES[j],
                                  call_ns=launch_bound.get(i, LAUNCH))
                    t += GAP
                layer_idx.append((i, l0, t))
                t += GAP
            fwd1 = t
            t += GAP
            bwd0 = t
            t = rk.launch(rk.main, t + GAP, COMM, [NCCL_NS],
                          "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, int)") + GAP
            bwd1 = t
            t += GAP
            opt0 = t
            t = rk.launch(rk.main, t + GAP, COMPUTE, list(OPT_NODES), "", graph=True) + GAP
            opt1 = t
            # the step ends when its GPU work is done (a synchronisation)
            done = max(rk.free.values())
            s0 = t + GAP
            s1 = max(s0 + LAUNCH, done + 2 * US)
            rk.spec.api.append(ApiCall(s0, s1, rk.pid, rk.main, "cudaDeviceSynchronize_v3020",
                                       rk.corr))
            rk.spec.sync.append(Sync(s0 + US, s1 - US, rk.pid, 0, None, rk.corr, sync_type=1))
            rk.corr += 1
            step1 = s1 + 2 * US
            st = push(r, rk.main, f"ProfilerStep#{k}", step0, step1, 0, None)
            fw = push(r, rk.main, "forward", fwd0, fwd1, 1, st)
            for i, l0, l1 in layer_idx:
                push(r, rk.main, f"layer_{i}", l0, l1, 2, fw)
            push(r, rk.main, "backward", bwd0, bwd1, 1, st)
            push(r, rk.main, "optimizer", opt0, opt1, 1, st)
            ends.append(step1)
        step0 = max(ends) + 20 * US
    out: list[Range] = []
    for r, rk in enumerate(rks):
        # each range's work: the calls of its thread that start inside it
        for rg in ranges[r]:
            for tid, ct, corr, work in rk.calls:
                if tid == rg.tid and rg.start <= ct < rg.end:
                    rg.work += [(corr, s, e) for s, e in work]
        write_export(path if ranks == 1 else path / f"rank{r}.sqlite", rk.spec, layout)
        base = len(out)
        out += [Range(g.rank, g.tid, g.name, g.start, g.end, g.level,
                      None if g.parent is None else base + g.parent, g.work)
                for g in ranges[r]]
    return Truth(path, ranks, steps, layers, out, clock_offset)
