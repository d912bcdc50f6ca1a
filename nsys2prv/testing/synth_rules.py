"""Synthetic exports that probe the corners of the expert-system rules (nsys2prv.rules).

`rules_export(path, seed)` writes a seeded random export (`synth.write_export`) and adds what
the base generator does not make: profiler overheads (counted and not counted), graphics
workloads (Vulkan, OpenGL, DX12: each a separate operation table for nsys' GPU rules),
copies with known device ids, correlation ids shared by two processes, NVTX ranges on main
and worker threads, operations without a process id and device ids too wide to pack. Times
sit on a coarse grid so that ties (equal durations, equal ends on two contexts, chunk uses
exactly halfway between two rounded values) occur often.
tests/data/rules/generate.py records what nsys prints for these files; the tests rebuild
them from the same seeds and compare.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from .synth import ApiCall, Kernel, Memcpy, Memset, Nvtx, Spec, global_tid, write_export

# seed -> what the export stresses (the names are the recorded case directories)
SEEDS = {1: "cuda", 2: "cuda-graphics", 3: "cuda-ties", 4: "cuda-graphics-empty",
         5: "cuda-odd-ids"}
GRID = 250  # ns; all times are multiples of it
PROCESSES = (100, 200)
MEMCPY_NAMES = ("cudaMemcpy_v3020", "cudaMemcpyAsync_v3020", "cudaMemcpy2DAsync_v3020",
                "cudaMemcpyToSymbol_v3020", "cudaMemcpyPeerAsync_v4000")
MEMSET_NAMES = ("cudaMemset_v3020", "cudaMemsetAsync_v3020", "cudaMemset2D_v3020",
                "cudaMemset2Dasync")
SYNC_NAMES = ("cudaDeviceSynchronize_v3020", "cudaStreamSynchronize_v3020",
              "cudaStreamSynchronize", "cudaEventSynchronize_v3020", "cudaDeviceSynchronize")
OVERHEADS = ("CUDA profiling data flush overhead", "CUDA profiling stop overhead",
             "CUDA profiling overhead", "CUPTI: Buffer flush", "Vulkan profiling overhead",
             "OpenGL profiling overhead", "DX12 profiling overhead")
NVTX_NAMES = ("step", "io", "solve")

GRAPHICS_DDL = {
    "VULKAN_WORKLOAD": ["start", "end", "eventClass", "globalTid", "correlationId",
                        "endCorrelationId", "nameId", "gpu", "contextId", "color", "textId"],
    "OPENGL_WORKLOAD": ["start", "end", "eventClass", "globalTid", "endGlobalTid",
                        "correlationId", "endCorrelationId", "nameId", "endNameId",
                        "returnValue", "frameId", "contextId", "gpu", "display"],
    "DX12_WORKLOAD": ["start", "end", "eventClass", "globalTid", "correlationId",
                      "endCorrelationId", "nameId", "shortContextId", "frameId", "gpu",
                      "color", "textId", "commandListType", "objectNameId"],
}


def _t(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randrange(lo // GRID, hi // GRID) * GRID


def _spec(rng: random.Random, ties: bool) -> tuple[Spec, list[tuple[int, int, int, int]]]:
    """The CUDA part; also returns (correlation, pid, device, kind) of each copy."""
    spec = Spec()
    spec.processes = [(p, f"app{p}") for p in PROCESSES]
    corr = 0
    copies = []
    for pid in PROCESSES:
        tids = (pid, pid + 1, pid + 2)
        for device in (0, 1):
            t = 1_000_000 + _t(rng, 0, 200_000)
            for _ in range(rng.randrange(150, 260)):
                corr += 1
                gap = rng.choice((0, 0, GRID, 4 * GRID, 40 * GRID, 2_000_000)) if ties else \
                    _t(rng, 0, 3_000_000) * rng.choice((0, 1, 1))
                dur = rng.choice((GRID, 2 * GRID, 8 * GRID)) if ties else _t(rng, GRID, 400_000)
                start = t + gap
                # on the grid, some operations overlap the previous one or end with it
                if ties and rng.random() < 0.2:
                    start = max(1_000_000, start - rng.choice((GRID, 2 * GRID)))
                end = start + dur
                t = max(t, end)
                what = rng.random()
                tid = rng.choice(tids)
                api_start = max(GRID, start - _t(rng, GRID, 50_000))
                api_end = api_start + (dur if rng.random() < 0.5 else GRID)
                context = 1 + device + (1 if rng.random() < 0.15 else 0)
                if what < 0.55:
                    spec.kernels.append(Kernel(start, end, pid, device, 7 + device, "k", corr,
                                               context=context))
                    spec.api.append(ApiCall(api_start, api_end, pid, tid,
                                            "cudaLaunchKernel_v7000", corr))
                elif what < 0.85:
                    size = rng.choice((64_000, 64_001, 4096, 1 << 20, 7))
                    kind = rng.choice((1, 1, 2, 8, 10))
                    src = rng.choice((0, 0, 1, 2, 4))
                    dst = rng.choice((0, 1, 2, 2, 4))
                    spec.memcpy.append(Memcpy(start, end, pid, device, 7 + device, corr, size,
                                              copy_kind=kind, src_kind=src, dst_kind=dst,
                                              context=context))
                    spec.api.append(ApiCall(api_start, api_end, pid, tid,
                                            rng.choice(MEMCPY_NAMES), corr))
                    copies.append((corr, pid, device, kind))
                else:
                    spec.memset.append(Memset(start, end, pid, device, 7 + device, corr,
                                              rng.choice((100, 1 << 16)),
                                              mem_kind=rng.choice((1, 2, 4, 0)),
                                              context=context))
                    spec.api.append(ApiCall(api_start, api_end, pid, tid,
                                            rng.choice(MEMSET_NAMES), corr))
                if rng.random() < 0.2:
                    s = end + _t(rng, 0, 20_000)
                    d = rng.choice((GRID, 4 * GRID)) if ties else _t(rng, GRID, 900_000)
                    corr += 1
                    spec.api.append(ApiCall(s, s + d, pid, tid, rng.choice(SYNC_NAMES), corr))
        for _ in range(12):
            tid = rng.choice(tids)
            s = 1_000_000 + _t(rng, 0, 60_000_000)
            spec.nvtx.append(Nvtx(s, s + _t(rng, GRID, 20_000_000), pid, tid,
                                  rng.choice(("pushpop", "pushpop", "startend")),
                                  rng.choice(NVTX_NAMES),
                                  domain=rng.choice((None, None, "lib"))))
    return spec, copies


def rules_export(path: str | Path, seed: int) -> Path:
    """Write the probe export of `seed` (see SEEDS) at `path`."""
    kind = SEEDS[seed]
    rng = random.Random(seed)
    spec, copies = _spec(rng, ties="ties" in kind)
    path = write_export(path, spec)
    con = sqlite3.connect(path)
    _with_primary_key(con, "StringIds", "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL")
    _with_primary_key(con, "ENUM_CUDA_MEM_KIND",
                      "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT")
    names = {v: i for i, v in con.execute("SELECT id, value FROM StringIds")}

    def string(value: str) -> int:
        if value not in names:
            names[value] = max(names.values()) + 1
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (names[value], value))
        return names[value]

    # copies: device ids known for peer copies (same device: left out by cuda_memcpy_sync)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcDeviceId = NULL, dstDeviceId = NULL")
    for corr, pid, device, copy_kind in copies:
        if copy_kind == 10:
            other = device if rng.random() < 0.5 else 1 - device
            con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcDeviceId = ?, dstDeviceId = ? "
                        "WHERE correlationId = ?", (device, other, corr))
    # two processes sharing correlation ids: a copy pairs with the other process' call too
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET correlationId = correlationId % 40 "
                "WHERE rowid % 9 = 0")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = correlationId % 40 "
                "WHERE rowid % 7 = 0")
    # a few green contexts
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET greenContextId = rowid % 3 "
                "WHERE rowid % 5 = 0")
    # profiler overheads on every process, some counted, some not, some outside the spans
    con.execute("CREATE TABLE PROFILER_OVERHEAD (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "globalTid INTEGER, nameId INTEGER NOT NULL, overheadType INTEGER NOT NULL)")
    for _ in range(40):
        pid = rng.choice(PROCESSES)
        s = _t(rng, 0, 90_000_000)
        con.execute("INSERT INTO PROFILER_OVERHEAD VALUES (?, ?, ?, ?, 0)",
                    (s, s + _t(rng, GRID, 3_000_000), global_tid(pid, pid + rng.choice((0, 1))),
                     string(rng.choice(OVERHEADS))))
    if "odd-ids" in kind:
        # operations without a process, and device ids too wide to pack beside a pid
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL WHERE rowid % 50 = 0")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 5 WHERE rowid % 70 = 1")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET deviceId = ? WHERE rowid % 3 = 0",
                    (1 << 40,))
    if "graphics" in kind:
        for table, columns in GRAPHICS_DDL.items():
            con.execute(f'CREATE TABLE "{table}" ({", ".join(f"{c} INTEGER" for c in columns)})')
            if "empty" in kind and table != "OPENGL_WORKLOAD":
                continue
            rows = []
            for _ in range(rng.randrange(30, 80)):
                pid = rng.choice(PROCESSES)
                s = 1_000_000 + _t(rng, 0, 80_000_000)
                row = dict.fromkeys(columns, 0)
                row.update(start=s, end=s + _t(rng, GRID, 2_000_000),
                           globalTid=global_tid(pid, pid), gpu=rng.choice((0, 1)),
                           contextId=rng.choice((5, 6)), shortContextId=rng.choice((5, 6)),
                           nameId=string("Submit"))
                rows.append([row[c] for c in columns])
            con.executemany(f'INSERT INTO "{table}" VALUES ({", ".join("?" * len(columns))})',
                            rows)
    con.commit()
    con.close()
    return path


def _with_primary_key(con: sqlite3.Connection, table: str, columns: str) -> None:
    """Re-create `table` with the primary key real exports declare (the base generator
    declares none, and SQLite plans joins, hence orders ties, by the keys it finds)."""
    con.execute(f'ALTER TABLE "{table}" RENAME TO "_old"')
    con.execute(f'CREATE TABLE "{table}" ({columns})')
    con.execute(f'INSERT INTO "{table}" SELECT * FROM "_old"')
    con.execute('DROP TABLE "_old"')


def probe_exports(directory: str | Path) -> dict[str, Path]:
    """Every probe export, written into `directory`: name -> path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return {name: rules_export(directory / f"{name}.sqlite", seed)
            for seed, name in SEEDS.items()}


__all__ = ["rules_export", "probe_exports", "SEEDS"]
