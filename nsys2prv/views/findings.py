"""Paraver views of `nsys2prv analyze`'s findings: one cfg per gap of the report's top list,
zoomed on it.

Each cfg opens the trace on the gap with a margin on both sides, showing only the rows that
explain it: the host thread that launched the work after the gap, then the GPU stream rows
of the device. Two windows: the rows' states (the host thread's CUDA, MPI or OS states, the
streams' Running/Idle) with the launch arrows, and the CUDA calls, kernels and memory
operations by name. Only event types present in the trace are filtered on, so the GUI asks
no question when loading (`guicheck.py`).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..analysis.idle import CAUSE_LABELS, GapFinding, IdleReport
from ..paraver.read import read_layout
from ..paraver.registry import cuda
from .cfg import Cfg, Window, render

CALL_TYPES = (cuda.CUDA_CALL, cuda.CUDA_KERNEL, cuda.NCCL_KERNEL, cuda.MEMORY_OPERATION)
MARGIN = 0.25  # of the gap's length, on each side (at least 1 us)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()[:40]


def finding_cfg(f: GapFinding, rank: int, threads_per_task: list[int],
                present: set[int]) -> Cfg:
    """The cfg of one finding (`rank` = its place in the top list, from 1)."""
    margin = max(int(f.duration * MARGIN), 1000)
    span = (max(0, f.start - margin), f.end + margin)
    rows = set(f.gpu_rows) | ({f.host_row} if f.host_row is not None else set())
    selected, base = [], 0
    for threads in threads_per_task:
        selected.append(tuple(base + t in rows for t in range(threads)))
        base += threads
    causes = ", ".join(f"{CAUSE_LABELS.get(k, k)} {v / f.duration:.0%}" for k, v in
                       sorted(f.causes.items(), key=lambda kv: -kv[1]) if v)
    text = (f"Gap {rank}: {f.device} idle for {f.duration / 1e6:.3f} ms, from "
            f"{f.start / 1e6:.6f} to {f.end / 1e6:.6f} ms (trace time). Host thread that "
            f"launched the next work: {f.host_thread or 'unknown (no launch record)'}"
            + (f"; it was {causes}" if causes else "")
            + (f"; NVTX range open: {f.nvtx}" if f.nvtx else "") + ".")
    types = tuple(t for t in CALL_TYPES if t in present)
    windows = (Window("Gap: CUDA calls, kernels, memory operations", thread="Last Evt Val",
                      types=types, time_range=span, selected=tuple(selected)),) if types else ()
    # the states last: the window the GUI shows in front
    windows += (Window("Gap: host thread and GPU states", time_range=span,
                       selected=tuple(selected)),)
    name = f"gap_{rank:02d}_{_slug(f.device)}.cfg"
    return Cfg(name, f"nsys2prv finding {rank}: GPU idle", text, windows, comm_lines=True)


def write_findings(trace: str | Path, report: IdleReport, out_dir: str | Path,
                   present: set[int]) -> list[Path]:
    """Write the cfg of every finding of `report` into `out_dir`; returns the paths."""
    layout = read_layout(trace)
    threads = [t for _, _, t, _ in layout.tasks]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, f in enumerate(report.top, start=1):
        cfg = finding_cfg(f, i, threads, present)
        path = out / cfg.path
        path.write_text(render(cfg))
        written.append(path)
    return written
