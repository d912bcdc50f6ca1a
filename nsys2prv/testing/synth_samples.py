"""CPU samples, call stacks and Python samples added to a synthetic export, in the real
tables' layout (`COMPOSITE_EVENTS`, `SAMPLING_CALLCHAINS`, `OSRT_CALLCHAINS`,
`CUDA_CALLCHAINS`, as nsys 2022.2-2026.1 write them; SAMPLING.md), and scenario exports whose
GPU gaps have a known cause in the host's code.

    spec = synth.Spec(...); path = synth.write_export(tmp / "r.sqlite", spec)
    add_stacks(path, Stacks(samples=[CpuSample(...)], osrt={0: [Frame(...), ...]}))

What real exports do and these reproduce: one COMPOSITE_EVENTS row per sample (id 1..N,
`cpuCycles` 1, `threadState` 1), its frames leaf first (stackDepth 0) in
SAMPLING_CALLCHAINS with primary key (id, stackDepth); the '[Max depth]' and '[Broken
backtraces]' marker frames (symbol = module = the marker, no address); booleans written NULL
or 1 (nsys up to 2023.4) or 0 and 1 (2025.5 on); kernel addresses stored as negative int64;
an unresolved frame's symbol its address as text (or no text at all); with DWARF unwinding
one sample in four per CPU with a stack (`dwarf_samples`); OS runtime calls pointing to their
stack by `callchainId` (0 = none); CUDA calls by `callchainId` counted from 0 while
CUDA_CALLCHAINS ids count from 1 (the + 1 of sources/callchains.py), the stack on the plain
row of a call recorded twice (`cudaMalloc` with the id, `cudaMalloc_v3020` without);
Python backtrace samples as NVTX marks of nsys' 'Python Backtrace' domain (`python_marks`).

Scenarios (`scenario_spec`, `scenario_export`), for the analysis of the GPU's waits: one
process launches a kernel per iteration (`idle.spec_of`), then, before the next launch,
* "starved": its launching thread blocks in `sem_timedwait`, called from
  `PyThread_acquire_lock_timed` < `acquire_timed` < `lock_PyThread_acquire_lock` < ... (an
  OS runtime call with that stack), while two DataLoader-like worker processes (no
  ThreadNames rows) run and are sampled decoding and transforming images;
* "compute": its launching thread computes, sampled in named functions (`COMPUTE`).
`expected_samples` gives the truths the tests check.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import idle
from .synth import Nvtx, Osrt, Spec, appended_strings, global_tid, write_export

US = 1_000
MAX_DEPTH = "[Max depth]"
BROKEN = "[Broken backtraces]"
NULL_FRAME = "0x0"  # a return address of 0, as DWARF stacks end before '[Broken backtraces]'
PYTHON_DOMAIN = "Python Backtrace"
PYTHON_CATEGORY = "Python Thread"

SC_COLUMNS = ["id", "symbol", "module", "kernelMode", "thumbCode", "unresolved",
              "specialEntry", "originalIP", "unwindMethod", "stackDepth"]
CUDA_COLUMNS = ["id", "symbol", "module", "unresolved", "originalIP", "stackDepth"]
UNWIND_DWARF, UNWIND_MARKER_OLD, UNWIND_MARKER_NEW = 7, None, 0  # marker rows: NULL <= 2023.4


@dataclass(frozen=True)
class Frame:
    """One frame: `function` None or "" writes a symbol without text (an unresolved frame
    whose address is only in `ip`), `module` None the module [Unknown]'s string id."""

    function: str | None
    module: str | None
    ip: int | None = None
    kernel: bool = False
    unresolved: bool = False

    @property
    def marker(self) -> bool:
        """nsys' markers, and a return address of 0 ('0x0'): frames that name no code."""
        return self.function in (MAX_DEPTH, BROKEN, NULL_FRAME)


def marker(name: str) -> Frame:
    """A marker frame as nsys writes it: symbol and module the marker, no address."""
    return Frame(name, name)


@dataclass
class CpuSample:
    start: int
    pid: int
    tid: int
    cpu: int
    frames: list[Frame]  # leaf first


@dataclass
class Stacks:
    samples: list[CpuSample] = field(default_factory=list)
    osrt: dict[int, list[Frame]] = field(default_factory=dict)  # spec.osrt index -> stack
    cuda: dict[int, list[Frame]] = field(default_factory=dict)  # spec.api index -> stack
    booleans: str = "null"  # "null": NULL or 1 (nsys <= 2023.4); "zero": 0 or 1 (>= 2025.5)
    symbol_name_column: bool = False  # pipit's export: an extra, empty `symbolName` column


def dwarf_samples(times: Sequence[int], pid: int, tid: int, cpu: int, stack: list[Frame],
                  every: int = 4) -> list[CpuSample]:
    """Samples of one thread on one CPU as DWARF unwinding records them: the whole `stack`
    for every `every`-th sample (the first included), the leaf alone for the others."""
    return [CpuSample(t, pid, tid, cpu, list(stack) if i % every == 0 else [stack[0]])
            for i, t in enumerate(times)]


def python_marks(spec: Spec, pid: int, tid: int, times: Sequence[int]) -> None:
    """Python backtrace samples (`--python-sampling`) as nsys 2023.4 exports them: NVTX
    marks without text in the 'Python Backtrace' domain, with its 'Python Thread'
    category."""
    spec.categories[(pid, PYTHON_DOMAIN, 1)] = PYTHON_CATEGORY
    spec.nvtx += [Nvtx(t, None, pid, tid, "mark", None, PYTHON_DOMAIN, category=1)
                  for t in times]


def add_stacks(path: str | os.PathLike[str], stacks: Stacks) -> Path:
    """Add the samples and call stacks of `stacks` to an export written by
    `synth.write_export` (whose OS runtime calls and CUDA calls are the spec's, in order)."""
    path = Path(path)
    con = sqlite3.connect(path)
    try:
        sid = appended_strings(con)

        zero = 0 if stacks.booleans == "zero" else None

        def flag(v: bool):
            return 1 if v else zero

        def frame_row(chain: int, depth: int, f: Frame, full: bool) -> tuple:
            symbol = sid(f.function or "")
            module = sid(f.module if f.module is not None else "[Unknown]")
            if not full:
                return (chain, symbol, module, flag(f.unresolved), f.ip, depth)
            unwind = (UNWIND_MARKER_NEW if stacks.booleans == "zero" else UNWIND_MARKER_OLD) \
                if f.marker else UNWIND_DWARF
            return (chain, symbol, module, flag(f.kernel), zero, flag(f.unresolved), zero,
                    None if f.marker else f.ip, unwind, depth)

        if stacks.samples:
            con.execute('CREATE TABLE COMPOSITE_EVENTS (id INTEGER NOT NULL PRIMARY KEY, '
                        'start INTEGER NOT NULL, cpu INTEGER, threadState INTEGER, '
                        'globalTid INTEGER, cpuCycles INTEGER NOT NULL)')
            _chain_table(con, "SAMPLING_CALLCHAINS", SC_COLUMNS, stacks.symbol_name_column)
            ordered = sorted(stacks.samples, key=lambda s: s.start)
            con.executemany('INSERT INTO COMPOSITE_EVENTS VALUES (?, ?, ?, 1, ?, 1)',
                            [(i, s.start, s.cpu, global_tid(s.pid, s.tid))
                             for i, s in enumerate(ordered, start=1)])
            con.executemany(f"INSERT INTO SAMPLING_CALLCHAINS ({', '.join(SC_COLUMNS)}) "
                            f"VALUES ({', '.join('?' * len(SC_COLUMNS))})",
                            [frame_row(i, d, f, True) for i, s in enumerate(ordered, start=1)
                             for d, f in enumerate(s.frames)])
        if stacks.osrt:
            _chain_table(con, "OSRT_CALLCHAINS", SC_COLUMNS)
            for chain, (index, frames) in enumerate(sorted(stacks.osrt.items()), start=1):
                con.execute("UPDATE OSRT_API SET callchainId = ? WHERE rowid = ?",
                            (chain, index + 1))
                con.executemany(f"INSERT INTO OSRT_CALLCHAINS ({', '.join(SC_COLUMNS)}) "
                                f"VALUES ({', '.join('?' * len(SC_COLUMNS))})",
                                [frame_row(chain, d, f, True) for d, f in enumerate(frames)])
        if stacks.cuda:
            _chain_table(con, "CUDA_CALLCHAINS", CUDA_COLUMNS)
            for chain, (index, frames) in enumerate(sorted(stacks.cuda.items())):
                # the runtime's id counts from 0, the table's from 1
                con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET callchainId = ? "
                            "WHERE rowid = ?", (chain, index + 1))
                con.executemany(f"INSERT INTO CUDA_CALLCHAINS ({', '.join(CUDA_COLUMNS)}) "
                                f"VALUES ({', '.join('?' * len(CUDA_COLUMNS))})",
                                [frame_row(chain + 1, d, f, False)
                                 for d, f in enumerate(frames)])
        con.commit()
    finally:
        con.close()
    return path


def _chain_table(con: sqlite3.Connection, table: str, columns: list[str],
                 symbol_name: bool = False) -> None:
    types = ", ".join(f"{c} INTEGER{' NOT NULL' if c in ('id', 'symbol', 'module', 'stackDepth') else ''}"
                      for c in columns)
    extra = ", symbolName TEXT" if symbol_name else ""
    con.execute(f"CREATE TABLE {table} ({types}{extra}, PRIMARY KEY (id, stackDepth))")


# -- scenarios: the host code behind the GPU's gaps ---------------------------------------------

PYTHON = "/usr/lib/x86_64-linux-gnu/libpython3.10.so.1.0"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
WORKERS = (idle.PID + 1, idle.PID + 2)  # DataLoader-like worker processes (their main threads)
SAMPLE_PERIOD = 50 * US  # a sample every 50 us of a running thread
# the launching thread's stack while it waits for the next batch (leaf first)
WAIT_STACK = [Frame("sem_timedwait", LIBC), Frame("PyThread_acquire_lock_timed", PYTHON),
              Frame("acquire_timed", PYTHON), Frame("lock_PyThread_acquire_lock", PYTHON),
              Frame("_PyEval_EvalFrameDefault", PYTHON), Frame("main", "/usr/bin/python3.10")]
LAUNCH_STACK = [Frame("0x7f0000123456", LIBCUDA, 0x7f0000123456, unresolved=True),
                Frame("cudaLaunchKernel", "/opt/cuda/lib64/libcudart.so.12"),
                Frame("at::native::launch_kernel", "/opt/torch/lib/libtorch_cuda.so"),
                Frame("_PyEval_EvalFrameDefault", PYTHON), Frame("main", "/usr/bin/python3.10")]
# what the workers run while the GPU waits, leaf first
WORKER_STACKS = [
    [Frame("ImagingResampleHorizontal_8bpc", "/opt/pil/_imaging.cpython-310-x86_64-linux-gnu.so"),
     Frame("ImagingResample", "/opt/pil/_imaging.cpython-310-x86_64-linux-gnu.so"),
     Frame("_PyEval_EvalFrameDefault", PYTHON), Frame("main", "/usr/bin/python3.10")],
    [Frame("decode_mcu", "/usr/lib/x86_64-linux-gnu/libjpeg.so.8"),
     Frame("jpeg_read_scanlines", "/usr/lib/x86_64-linux-gnu/libjpeg.so.8"),
     Frame("_PyEval_EvalFrameDefault", PYTHON), Frame("main", "/usr/bin/python3.10")]]
# the launching thread's code between two launches in the host-compute scenario (leaf
# first), in turn: parse, parse, normalize (2 of 3 samples parsing)
COMPUTE = [
    [Frame("parse_record", "/opt/app/libloader.so"), Frame("load_batch", "/opt/app/libloader.so"),
     Frame("main", "/opt/app/train")],
    [Frame("parse_record", "/opt/app/libloader.so"), Frame("load_batch", "/opt/app/libloader.so"),
     Frame("main", "/opt/app/train")],
    [Frame("normalize", "/opt/app/libloader.so"), Frame("load_batch", "/opt/app/libloader.so"),
     Frame("main", "/opt/app/train")]]
SCENARIOS = ("starved", "compute")


def _phases(n: int) -> list[tuple[int, int]]:
    """(start, end) of the host phase after each launch but the last (idle.spec_of's
    timing: launch call of LAUNCH ns, then PHASE ns of the cause)."""
    t = 1_000 * US
    out = []
    for i in range(n):
        t += idle.LAUNCH
        if i < n - 1:
            out.append((t, t + idle.PHASE))
            t += idle.PHASE
    return out


def scenario_spec(kind: str, n: int = 20) -> tuple[Spec, Stacks]:
    """The spec and stacks of `n` iterations of scenario `kind` (module docstring)."""
    if kind not in SCENARIOS:
        raise ValueError(f"unknown scenario {kind!r}")
    spec, _ = idle.spec_of("compute", n)  # nothing traced between the launches
    pid = idle.PID
    stacks = Stacks()
    for i, call in enumerate(spec.api):  # every launch call: sampled in the driver
        stacks.samples.append(CpuSample(call.start + idle.LAUNCH // 2, pid, pid, 0,
                                        list(LAUNCH_STACK)))
    for k, (a, b) in enumerate(_phases(n)):
        times = range(a + SAMPLE_PERIOD // 2, b, SAMPLE_PERIOD)
        if kind == "starved":
            spec.osrt.append(Osrt(a, b, pid, pid, "sem_timedwait", ret=0))
            stacks.osrt[len(spec.osrt) - 1] = list(WAIT_STACK)
            for w, worker in enumerate(WORKERS):
                for j, t in enumerate(times):
                    stacks.samples.append(CpuSample(t + w * US, worker, worker, 2 + w,
                                                    list(WORKER_STACKS[(j + w) % 2])))
        else:
            for j, t in enumerate(times):
                stacks.samples.append(CpuSample(t, pid, pid, 0, list(COMPUTE[j % 3])))
    if kind == "starved":
        spec.processes += [(w, "pt_data_worker") for w in WORKERS]
    return spec, stacks


def scenario_export(path: str | os.PathLike[str], kind: str, n: int = 20) -> Path:
    """Write the export of `scenario_spec(kind, n)`."""
    spec, stacks = scenario_spec(kind, n)
    return add_stacks(write_export(path, spec), stacks)


def label(frame: Frame) -> str:
    """The code location nsys2prv writes for `frame` (registry/sampling.py)."""
    return f"{frame.function} ({Path(frame.module).name})"


def gaps(spec: Spec) -> list[tuple[int, int]]:
    """The GPU's idle gaps [start, end) between consecutive kernels of the spec."""
    ks = sorted((k.start, k.end) for k in spec.kernels)
    return [(a[1], b[0]) for a, b in zip(ks, ks[1:]) if b[0] > a[1]]


def expected_samples(kind: str, n: int = 20) -> dict:
    """The truths of scenario `kind`, counted on its spec: samples per (pid, tid); per
    (pid, tid) the leaf labels of its samples inside the GPU's gaps; for "starved" the
    blocking call's stack (labels, leaf first) and the time it overlaps the gaps."""
    spec, stacks = scenario_spec(kind, n)
    holes = gaps(spec)

    def in_gap(t: int) -> bool:
        return any(a <= t < b for a, b in holes)

    counts: dict[tuple[int, int], int] = {}
    leaves: dict[tuple[int, int], dict[str, int]] = {}
    for smp in stacks.samples:
        key = (smp.pid, smp.tid)
        counts[key] = counts.get(key, 0) + 1
        if in_gap(smp.start):
            per = leaves.setdefault(key, {})
            per[label(smp.frames[0])] = per.get(label(smp.frames[0]), 0) + 1
    out = {"counts": counts, "gap_leaves": leaves, "gaps": holes}
    if kind == "starved":
        blocked = sum(max(0, min(o.end, b) - max(o.start, a))
                      for o in spec.osrt for a, b in holes)
        out.update(blocking=[label(f) for f in WAIT_STACK], blocked_ns=blocked)
    return out


# -- every edge case of the tables, in one small export -----------------------------------------

EDGE_PID, EDGE_MAIN, EDGE_WORKER, EDGE_OTHER = 5100, 5100, 5107, 5200  # worker: no ThreadNames
KERNEL_IP = -0x553C9570  # a kernel address as nsys stores it: 0xffffffffaac36a90
APP = "/opt/app/bin/app"
LIBX = "/tmp/libx.so (deleted)"  # a mapped file removed since: ' (' in its path


def edge_spec(booleans: str = "null", symbol_name_column: bool = False) -> tuple[Spec, Stacks]:
    """Samples, call stacks and Python samples with every edge case translation handles:
    the 1-in-4 DWARF pattern on two threads of one process (the worker without a
    ThreadNames row) and on a thread of a second process; stacks ending in '[Max depth]'
    and in '[Broken backtraces]', a marker between two frames; a kernel frame with a
    negative address; a frame whose symbol has no text (its address names it) and one with
    neither text nor address; a frame without module; a module whose path has ' ('; a stack
    of 105 frames (5 cut); OS runtime calls with and without a stack; CUDA calls recorded
    twice (`_v3020`) with the stack on the plain row; Python samples in the main thread."""
    from .synth import ApiCall

    spec = Spec(host="edge-node")
    spec.processes = [(EDGE_PID, "app"), (EDGE_OTHER, "helper")]
    spec.threads = [(EDGE_PID, EDGE_MAIN, "app"), (EDGE_OTHER, EDGE_OTHER, "helper")]
    st = Stacks(booleans=booleans, symbol_name_column=symbol_name_column)
    main = Frame("main", APP)
    work = [Frame("dot", "/usr/lib/libblas.so.3"), Frame("solve", APP), main]
    st.samples += dwarf_samples(range(100 * US, 2_000 * US, 100 * US), EDGE_PID, EDGE_MAIN, 3,
                                work + [marker(MAX_DEPTH)])
    st.samples += dwarf_samples(range(150 * US, 1_000 * US, 100 * US), EDGE_PID, EDGE_WORKER, 5,
                                [Frame("memcpy", "/lib/libc.so.6"), Frame("worker_loop", APP),
                                 Frame(NULL_FRAME, "[Unknown]", 0, unresolved=True),
                                 marker(BROKEN)])
    st.samples += dwarf_samples(range(120 * US, 600 * US, 60 * US), EDGE_OTHER, EDGE_OTHER, 0,
                                [Frame("poll_loop", LIBX), Frame("main", "/opt/helper")])
    special = [
        # a marker between two frames: depths renumbered without a gap
        [Frame("inner", APP), marker(BROKEN), Frame("outer", APP), main],
        # kernel frame (negative address, symbol its address as text) in a syscall
        [Frame("0xffffffffaac36a90", "[kernel.kallsyms]", KERNEL_IP, kernel=True,
               unresolved=True), Frame("__GI___libc_write", "/lib/libc.so.6"), main],
        # no symbol text: the address names it (masked to 64 bits), and one without either
        [Frame("", "/lib/libc.so.6", -2, unresolved=True), Frame(None, None, None,
                                                                  unresolved=True), main],
        # a frame without module
        [Frame("jit_code", None, 0x7F00DEAD0000), main],
        # 105 frames: depths 100-104 cut
        [Frame(f"recurse_{k}", APP) for k in range(105)],
    ]
    st.samples += [CpuSample(2_100 * US + k * 10 * US, EDGE_PID, EDGE_MAIN, 1, frames)
                   for k, frames in enumerate(special)]
    # OS runtime calls: the first two with a stack, the third without
    wait = [Frame("pthread_cond_wait@@GLIBC_2.3.2", "/lib/libc.so.6"), Frame("queue_pop", APP),
            main, marker(MAX_DEPTH)]
    spec.osrt += [Osrt(300 * US, 500 * US, EDGE_PID, EDGE_WORKER, "pthread_cond_wait"),
                  Osrt(700 * US, 900 * US, EDGE_PID, EDGE_MAIN, "pthread_cond_wait"),
                  Osrt(1_000 * US, 1_010 * US, EDGE_PID, EDGE_MAIN, "write", ret=8)]
    st.osrt = {0: list(wait), 1: list(wait)}
    # CUDA calls recorded twice with one correlation id; the stack on the plain rows
    cupti = Frame("0x7fd990700588", "/opt/nsys/libcupti.so.12", 0x7FD990700588, unresolved=True)
    driver = Frame("0x7fd99b6226b6", "/usr/lib64/libcuda.so.1", 0x7FD99B6226B6, unresolved=True)
    for k, (name, user) in enumerate((("cudaMalloc", "alloc_buffers"),
                                      ("cudaMemcpy", "upload"))):
        t = 1_200 * US + k * 100 * US
        spec.api += [ApiCall(t, t + 20 * US, EDGE_PID, EDGE_MAIN, name, 10 + k),
                     ApiCall(t + 1 * US, t + 19 * US, EDGE_PID, EDGE_MAIN, f"{name}_v3020",
                             10 + k)]
        st.cuda[len(spec.api) - 2] = [cupti, driver,
                                      Frame(name, "/opt/cuda/lib64/libcudart.so.12"),
                                      Frame(user, APP), main]
    # a CUDA call whose stack names no API frame (every frame unresolved)
    spec.api.append(ApiCall(1_500 * US, 1_520 * US, EDGE_PID, EDGE_MAIN, "cudaFree", 12))
    st.cuda[len(spec.api) - 1] = [cupti, Frame("0x55925a7d1b09", None, 0x55925A7D1B09,
                                               unresolved=True),
                                  Frame("0x55925a7cd220", None, 0x55925A7CD220, unresolved=True)]
    python_marks(spec, EDGE_PID, EDGE_MAIN, range(50 * US, 1_950 * US, 200 * US))
    spec.nvtx.append(Nvtx(40 * US, 1_990 * US, EDGE_PID, EDGE_MAIN, "pushpop", "train", None))
    return spec, st


def edge_export(path: str | os.PathLike[str], booleans: str = "null",
                symbol_name_column: bool = False) -> Path:
    """Write the export of `edge_spec`."""
    spec, stacks = edge_spec(booleans, symbol_name_column)
    return add_stacks(write_export(path, spec), stacks)


def add_python_marks(path: str | os.PathLike[str], pid: int, tid: int,
                     times: Sequence[int]) -> Path:
    """Add Python backtrace samples (`python_marks`) to an existing export: the domain's
    creation and one mark per time, in NVTX_EVENTS (created if absent)."""
    path = Path(path)
    con = sqlite3.connect(path)
    try:
        cols = [r[1] for r in con.execute('PRAGMA table_info("NVTX_EVENTS")')]
        if not cols:
            con.execute('CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, '
                        'eventType INTEGER, text TEXT, globalTid INTEGER, domainId INTEGER, '
                        'category INTEGER)')
        domain = 1 + (con.execute("SELECT max(domainId) FROM NVTX_EVENTS WHERE "
                                  "(globalTid >> 24) & 16777215 = ?", (pid,)).fetchone()[0] or 0)
        gtid = global_tid(pid, tid)
        con.execute('INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId, '
                    'category) VALUES (?, 75, ?, ?, ?, 0)',
                    (min(times, default=0), PYTHON_DOMAIN, global_tid(pid, 0), domain))
        con.executemany('INSERT INTO NVTX_EVENTS (start, eventType, globalTid, domainId, '
                        'category) VALUES (?, 34, ?, ?, 1)', [(t, gtid, domain) for t in times])
        con.commit()
    finally:
        con.close()
    return path
