"""Synthetic GPU metrics and OpenACC tables with known contents, added to an export written by
`nsys2prv.testing.synth.write_export` (which this module leaves alone).

Table layouts are the real ones: native GPU metrics as nsys 2023.4+ writes them
(`GPU_METRICS`, `TARGET_INFO_GPU_METRICS`, with the `GENERIC_EVENT_*` tables they refer to),
the JSON form of nsys 2021-2022 (`GENERIC_EVENTS` with one JSON object per sample),
`TARGET_INFO_CUDA_DEVICE` (nsys 2025.1+) and the three OpenACC activity tables of nsys 2022.4.

`two_gpu_scenario()` is the reference case of the tests: two GPUs, two processes, GPU 1 shared
and seen by one process as CUDA device 0 (CUDA_VISIBLE_DEVICES), kernels overlapping known
sampling periods.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from .synth import Kernel, Spec, Sync, appended_strings, global_tid

SOURCE_ID = (1 << 48) | (1 << 32)


def type_id(gpu: int) -> int:
    """GENERIC_EVENT_TYPES / GPU_METRICS typeId of a GPU, as nsys encodes it (VM id in bits
    48-55, then 1 << 32, the nsys GPU id in the low byte)."""
    return SOURCE_ID | gpu


@dataclass
class Sample:
    time: int
    gpu: int
    values: dict[str, float]  # exported metric name -> value


@dataclass
class MetricsSpec:
    """GPU metric samples plus the CUDA device mapping of TARGET_INFO_CUDA_DEVICE."""

    names: dict[int, list[str]] = field(default_factory=dict)  # gpu -> metric names (id order)
    samples: list[Sample] = field(default_factory=list)
    cuda_devices: list[tuple[int, int, int]] = field(default_factory=list)  # (gpuId, cudaId, pid)


def _create(con: sqlite3.Connection, table: str, cols: dict[str, str]) -> None:
    defs = ", ".join(f'"{c}" {t}' for c, t in cols.items())
    con.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({defs})')


def _generic_types(con: sqlite3.Connection, spec: MetricsSpec) -> None:
    _create(con, "GENERIC_EVENT_SOURCES", {"sourceId": "INTEGER", "data": "TEXT"})
    _create(con, "GENERIC_EVENT_TYPES", {"typeId": "INTEGER", "sourceId": "INTEGER",
                                         "data": "TEXT"})
    con.execute("INSERT INTO GENERIC_EVENT_SOURCES VALUES (?, ?)", (SOURCE_ID, json.dumps(
        {"Name": "GpuMetrics", "TimeSource": "SessionNs", "SourceGroup": "Unknown"})))
    con.executemany("INSERT INTO GENERIC_EVENT_TYPES VALUES (?, ?, ?)", [
        (type_id(g), SOURCE_ID, json.dumps({"Name": "", "Fields": [{"Name": n} for n in names]}))
        for g, names in sorted(spec.names.items())])


def _cuda_devices(con: sqlite3.Connection, spec: MetricsSpec) -> None:
    if spec.cuda_devices:
        _create(con, "TARGET_INFO_CUDA_DEVICE", {"gpuId": "INTEGER", "cudaId": "INTEGER",
                                                 "pid": "INTEGER"})
        con.executemany("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?)",
                        spec.cuda_devices)


def add_native_metrics(path: str | os.PathLike[str], spec: MetricsSpec) -> Path:
    """GPU_METRICS + TARGET_INFO_GPU_METRICS (+ GENERIC_EVENT_SOURCES/TYPES), as nsys 2023.4+."""
    path = Path(path)
    con = sqlite3.connect(path)
    _generic_types(con, spec)
    _create(con, "TARGET_INFO_GPU_METRICS", {
        "typeId": "INTEGER", "sourceId": "INTEGER", "typeName": "TEXT", "metricId": "INTEGER",
        "metricName": "TEXT"})
    _create(con, "GPU_METRICS", {"timestamp": "INTEGER", "typeId": "INTEGER",
                                 "metricId": "INTEGER", "value": "INTEGER"})
    con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, ?, ?, ?)", [
        (type_id(g), SOURCE_ID, "", i, n)
        for g, names in sorted(spec.names.items()) for i, n in enumerate(names)])
    ids = {(g, n): i for g, names in spec.names.items() for i, n in enumerate(names)}
    con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)", [
        (s.time, type_id(s.gpu), ids[(s.gpu, n)], v)
        for s in spec.samples for n, v in s.values.items()])
    _cuda_devices(con, spec)
    con.commit()
    con.close()
    return path


def add_json_metrics(path: str | os.PathLike[str], spec: MetricsSpec) -> Path:
    """GENERIC_EVENTS with one JSON object per sample (values as strings), as nsys 2022.4:
    `timestamp` null, the session time in `rawTimestamp`."""
    path = Path(path)
    con = sqlite3.connect(path)
    _generic_types(con, spec)
    _create(con, "GENERIC_EVENTS", {"rawTimestamp": "INTEGER", "timestamp": "INTEGER",
                                    "typeId": "INTEGER", "data": "TEXT"})
    con.executemany("INSERT INTO GENERIC_EVENTS VALUES (?, NULL, ?, ?)", [
        (s.time, type_id(s.gpu), json.dumps({n: str(int(v)) for n, v in s.values.items()},
                                            indent=4).replace("/", "\\/"))
        for s in spec.samples])
    _cuda_devices(con, spec)
    con.commit()
    con.close()
    return path


# -- the reference scenario --------------------------------------------------------------------

PID_A, PID_B = 100, 200
PERIOD = 100_000
METRIC_NAMES = ["SMs Active [Throughput %]", "Tensor Active [Throughput %]",
                "GPC Clock Frequency [MHz]", "Compute Warps in Flight [Avg]"]


def _value(name: str, gpu: int, i: int) -> int:
    if name.startswith("GPC"):
        return 1000 + 10 * i + gpu
    if name.startswith("Compute"):
        return (i * 3 + gpu) % 17
    if name.startswith("Tensor"):
        return (i * 7 + 13 * gpu) % 101
    return (i * 11 + 5 * gpu) % 101


def two_gpu_scenario() -> tuple[Spec, MetricsSpec]:
    """(export spec, metrics spec). GPUs 0 and 1 sampled every 100 us from t = -20 us (GPU 1
    shifted by 30 us); pid 100 uses CUDA devices 0 (= GPU 0) and 1 (= GPU 1); pid 200 was
    started with CUDA_VISIBLE_DEVICES=1, so its CUDA device 0 is GPU 1, which it uses more
    than pid 100 does: it owns GPU 1's metrics row. One sample of GPU 0 has a negative clock
    (nsys' 32-bit overflow): dropped. Kernels: some span several sampling periods, one runs
    before sampling starts, one after it ends, one has zero length, two overlap on one
    stream (the second goes to a lane row)."""
    spec = Spec(processes=[(PID_A, "trainer"), (PID_B, "helper")],
                threads=[(PID_A, PID_A, "trainer"), (PID_B, PID_B, "helper")],
                gpus=[(0, "NVIDIA A100-SXM4-40GB"), (1, "NVIDIA A100-SXM4-40GB")])
    us = 1000
    ks = [
        # pid, CUDA device, stream, name, start, end
        (PID_A, 0, 7, "gemm", 120 * us, 380 * us),
        (PID_A, 0, 7, "gemm", 400 * us, 450 * us),
        (PID_A, 0, 7, "relu", 450 * us, 455 * us),
        (PID_A, 0, 13, "gemm", 130 * us, 260 * us),  # concurrent with the first gemm
        (PID_A, 0, 7, "early", -500 * us, -400 * us),  # before the first sample: none
        (PID_A, 0, 7, "late", 5000 * us, 5100 * us),  # after the last period: none
        (PID_A, 0, 7, "empty", 600 * us, 600 * us),  # zero length: none
        (PID_A, 0, 7, "relu", 700 * us, 760 * us),
        (PID_A, 0, 7, "relu", 740 * us, 790 * us),  # overlaps the previous: lane row
        (PID_A, 1, 7, "gemm", 100 * us, 200 * us),
        (PID_B, 0, 7, "conv", 50 * us, 170 * us),
        (PID_B, 0, 7, "conv", 230 * us, 560 * us),
        (PID_B, 0, 7, "relu", 900 * us, 1200 * us),  # runs past GPU 1's last sample
    ]
    # grids that fill the GPU: the samples' values are the kernels' own (no grid caps them)
    spec.kernels = [Kernel(s, e, p, d, st, n, correlation=i + 1, grid=(4096, 1, 1),
                           block=(256, 1, 1))
                    for i, (p, d, st, n, s, e) in enumerate(ks)]
    m = MetricsSpec(names={0: METRIC_NAMES, 1: METRIC_NAMES},
                    cuda_devices=[(0, 0, PID_A), (1, 1, PID_A), (1, 0, PID_B)])
    for gpu, offset, count in ((0, -20 * us, 11), (1, 10 * us, 10)):
        for i in range(count):
            values = {n: _value(n, gpu, i) for n in METRIC_NAMES}
            if gpu == 0 and i == 3:
                values["GPC Clock Frequency [MHz]"] = -2140552984
            m.samples.append(Sample(offset + i * PERIOD, gpu, values))
    return spec, m


# -- OpenACC ------------------------------------------------------------------------------------

ACC_KINDS = ["INVALID", "DEVICE_INIT", "DEVICE_SHUTDOWN", "RUNTIME_SHUTDOWN", "ENQUEUE_LAUNCH",
             "ENQUEUE_UPLOAD", "ENQUEUE_DOWNLOAD", "WAIT", "IMPLICIT_WAIT",
             "COMPUTE_CONSTRUCT", "UPDATE", "ENTER_DATA", "EXIT_DATA", "CREATE", "DELETE",
             "ALLOC", "FREE"]
ACC_DEVICES = ["acc_device_none", "acc_device_default", "acc_device_host",
               "acc_device_not_host", "acc_device_nvidia"]
_ACC_COMMON = {"start": "INTEGER", "end": "INTEGER", "nameId": "INTEGER",
               "globalTid": "INTEGER", "eventKind": "INTEGER", "DeviceType": "INTEGER",
               "lineNo": "INTEGER", "cuDeviceId": "INTEGER", "cuContextId": "INTEGER",
               "cuStreamId": "INTEGER", "srcFile": "INTEGER", "funcName": "INTEGER"}
ACC_TABLES = {
    "CUPTI_ACTIVITY_KIND_OPENACC_DATA": {**_ACC_COMMON, "bytes": "INTEGER",
                                         "varName": "INTEGER"},
    "CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH": {**_ACC_COMMON, "numGangs": "INTEGER",
                                           "numWorkers": "INTEGER",
                                           "vectorLength": "INTEGER", "kernelName": "INTEGER"},
    "CUPTI_ACTIVITY_KIND_OPENACC_OTHER": dict(_ACC_COMMON),
}


@dataclass
class AccRecord:
    table: str  # "DATA" | "LAUNCH" | "OTHER"
    kind: str  # ACC_KINDS name
    start: int
    end: int
    pid: int
    tid: int
    line: int
    file: str = "main.c"
    function: str = "main"
    stream: int = 7
    device: int = 0
    context: int = 1
    bytes: int | None = None
    variable: str | None = None
    gangs: int | None = None
    workers: int | None = None
    vector: int | None = None
    kernel: str | None = None


def add_openacc(path: str | os.PathLike[str], records: list[AccRecord]) -> Path:
    """The three OpenACC tables and their enums; strings appended to StringIds."""
    path = Path(path)
    con = sqlite3.connect(path)
    sid = appended_strings(con)

    for table, cols in ACC_TABLES.items():
        _create(con, table, cols)
    for enum, names in (("ENUM_OPENACC_EVENT_KIND",
                         ["CUPTI_OPENACC_EVENT_KIND_" + n for n in ACC_KINDS]),
                        ("ENUM_OPENACC_DEVICE", ACC_DEVICES)):
        _create(con, enum, {"id": "INTEGER", "name": "TEXT", "label": "TEXT"})
        con.executemany(f"INSERT INTO {enum} VALUES (?, ?, ?)",
                        [(i, n, n.title()) for i, n in enumerate(names)])
    for r in records:
        table = f"CUPTI_ACTIVITY_KIND_OPENACC_{r.table}"
        row = {"start": r.start, "end": r.end, "nameId": sid(r.kind.replace("_", " ").title()),
               "globalTid": global_tid(r.pid, r.tid), "eventKind": ACC_KINDS.index(r.kind),
               "DeviceType": ACC_DEVICES.index("acc_device_nvidia"), "lineNo": r.line,
               "cuDeviceId": r.device, "cuContextId": r.context, "cuStreamId": r.stream,
               "srcFile": sid(r.file), "funcName": sid(r.function), "bytes": r.bytes,
               "varName": sid(r.variable), "numGangs": r.gangs, "numWorkers": r.workers,
               "vectorLength": r.vector, "kernelName": sid(r.kernel)}
        cols = list(ACC_TABLES[table])
        con.execute(f'INSERT INTO "{table}" ({", ".join(cols)}) VALUES '
                    f'({", ".join("?" for _ in cols)})', [row[c] for c in cols])
    con.commit()
    con.close()
    return path


def openacc_scenario() -> tuple[Spec, list[AccRecord]]:
    """One thread running a data region, a compute construct with a launch and a wait on
    stream 13, an implicit wait and an update; the kernel the launch starts runs on stream
    13 so that the stream row exists; one CUDA synchronization record (so that the cuda_sync
    kind, which owns type 63000008, is in the trace)."""
    pid, us = 300, 1000
    spec = Spec(processes=[(pid, "acc")], threads=[(pid, pid, "acc")],
                gpus=[(0, "NVIDIA A100-SXM4-40GB")],
                kernels=[Kernel(260 * us, 300 * us, pid, 0, 13, "main_31_gpu", 1)],
                sync=[Sync(395 * us, 398 * us, pid, 0, 13, 2)])
    recs = [
        AccRecord("OTHER", "DEVICE_INIT", 10 * us, 40 * us, pid, pid, 20),
        AccRecord("DATA", "ENTER_DATA", 50 * us, 150 * us, pid, pid, 28, bytes=0,
                  variable="<Unknown>"),
        AccRecord("DATA", "CREATE", 60 * us, 60 * us, pid, pid, 28, bytes=4096, variable="a"),
        AccRecord("DATA", "ALLOC", 61 * us, 61 * us, pid, pid, 28, bytes=4096, variable="a"),
        AccRecord("OTHER", "ENQUEUE_UPLOAD", 70 * us, 120 * us, pid, pid, 28, stream=13),
        AccRecord("OTHER", "WAIT", 125 * us, 145 * us, pid, pid, 28, stream=13),
        AccRecord("OTHER", "COMPUTE_CONSTRUCT", 200 * us, 400 * us, pid, pid, 31),
        AccRecord("LAUNCH", "ENQUEUE_LAUNCH", 210 * us, 250 * us, pid, pid, 31, stream=13,
                  gangs=80, workers=1, vector=128, kernel="main_31_gpu",
                  file="(runtime)", function="main"),
        AccRecord("OTHER", "WAIT", 255 * us, 390 * us, pid, pid, 31, stream=13),
        AccRecord("OTHER", "IMPLICIT_WAIT", 420 * us, 430 * us, pid, pid, 33, stream=13),
        AccRecord("OTHER", "UPDATE", 440 * us, 470 * us, pid, pid, 35),
        AccRecord("DATA", "EXIT_DATA", 500 * us, 560 * us, pid, pid, 40, bytes=0),
        AccRecord("OTHER", "ENQUEUE_DOWNLOAD", 510 * us, 540 * us, pid, pid, 40, stream=99),
        AccRecord("DATA", "DELETE", 550 * us, 550 * us, pid, pid, 40, bytes=4096, variable="a"),
    ]
    return spec, recs
