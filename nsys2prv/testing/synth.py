"""Synthetic Nsight Systems exports in the real table layouts, with known contents.

The test suite, the README sample and the benchmarks use these. The column lists below are
the ones real exports have (checked against nsys 2021.2, 2022.4 and 2025.1 exports); only the
tables the translator reads are created, as in a lazy export.

Layouts:
  "legacy"  nsys 2020.x-2021.x: no metadata table, no PROCESSES / session start / host
  "3.0.0"   nsys 2022.4: EXPORT_META_DATA, ENUM_* tables, inline NVTX text
  "3.17.1"  nsys 2025.1: META_DATA_EXPORT + META_DATA_CAPTURE, greenContextId columns,
            registered NVTX strings (textId), TARGET_INFO_CUDA_CONTEXT_INFO
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LAYOUTS = ("legacy", "3.0.0", "3.17.1")

_I, _T, _R = "INTEGER", "TEXT", "REAL"

_KERNEL_COMMON_HEAD = ["start", "end", "deviceId", "contextId"]
_KERNEL_TAIL = ["streamId", "correlationId", "globalPid", "demangledName", "shortName"]
_KERNEL_REST = ["launchType", "cacheConfig", "registersPerThread", "gridX", "gridY", "gridZ",
                "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory",
                "localMemoryPerThread", "localMemoryTotal", "gridId", "sharedMemoryExecuted",
                "graphNodeId", "sharedMemoryLimitConfig"]
_MEMCPY_REST = ["bytes", "copyKind", "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId",
                "srcContextId", "dstDeviceId", "dstContextId", "migrationCause", "graphNodeId"]
_NVTX = ["start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid",
         "endGlobalTid", "textId", "domainId", "uint64Value", "int64Value", "doubleValue",
         "uint32Value", "int32Value", "floatValue", "jsonTextId", "jsonText"]


def _columns(layout: str) -> dict[str, list[str]]:
    green = ["greenContextId"] if layout == "3.17.1" else []
    mangled = ["mangledName"] if layout != "legacy" else []
    cols = {
        "StringIds": ["id", "value"],
        "ThreadNames": ["nameId", "priority", "globalTid"],
        "TARGET_INFO_GPU": ["vmId", "id", "name", "busLocation", "isDiscrete", "totalMemory",
                            "smCount", "cuDevice", "computeMajor", "computeMinor"]
        + ([] if layout == "legacy" else ["maxShmemPerSm", "maxRegistersPerSm",
                                          "maxWarpsPerSm", "maxBlocksPerSm"]),
        "TARGET_INFO_CUDA_STREAM": ["streamId", "hwId", "vmId", "processId", "contextId",
                                    "priority", "flag"],
        "CUPTI_ACTIVITY_KIND_KERNEL": _KERNEL_COMMON_HEAD + green + _KERNEL_TAIL + mangled
        + _KERNEL_REST,
        "CUPTI_ACTIVITY_KIND_MEMCPY": _KERNEL_COMMON_HEAD + green + [
            "streamId", "correlationId", "globalPid"] + _MEMCPY_REST
        + (["virtualAddress"] if layout != "legacy" else []),
        "CUPTI_ACTIVITY_KIND_MEMSET": _KERNEL_COMMON_HEAD + green + [
            "streamId", "correlationId", "globalPid", "value", "bytes", "graphNodeId", "memKind"],
        "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "eventClass", "globalTid",
                                        "correlationId", "nameId", "returnValue", "callchainId"],
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": _KERNEL_COMMON_HEAD + green + [
            "streamId", "correlationId", "globalPid"]
        + (["deprecatedSyncType"] if layout == "3.17.1" else []) + ["syncType", "eventId"]
        + (["eventSyncId"] if layout == "3.17.1" else []),
        "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ["deviceId", "contextId"] + green + [
            "streamId", "correlationId", "globalPid", "eventId"],
        "NVTX_EVENTS": _NVTX + (["binaryData"] if layout == "3.17.1" else []),
        "OSRT_API": ["start", "end", "eventClass", "globalTid", "correlationId", "nameId",
                     "returnValue", "nestingLevel", "callchainId"],
    }
    if layout != "legacy":
        cols.update({
            "PROCESSES": ["globalPid", "pid", "name"],
            "TARGET_INFO_SYSTEM_ENV": ["globalVid", "devStateName", "name", "nameEnum", "value"],
            "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs", "utcTime", "localTime"],
            "ENUM_NSYS_EVENT_TYPE": ["id", "name", "label"],
            "ENUM_CUDA_MEMCPY_OPER": ["id", "name", "label"],
            "ENUM_CUDA_MEM_KIND": ["id", "name", "label"],
            "ENUM_CUPTI_SYNC_TYPE": ["id", "name", "label"],
        })
        meta = "EXPORT_META_DATA" if layout == "3.0.0" else "META_DATA_EXPORT"
        cols[meta] = ["name", "value"]
    if layout == "3.17.1":
        cols["META_DATA_CAPTURE"] = ["name", "value"]
        cols["TARGET_INFO_CUDA_CONTEXT_INFO"] = ["nullStreamId", "hwId", "vmId", "processId",
                                                 "deviceId", "contextId", "parentContextId",
                                                 "isGreenContext"]
    return cols


_TEXT_COLUMNS = {"value", "name", "label", "text", "jsonText", "busLocation", "devStateName",
                 "utcTime", "localTime", "binaryData"}
_REAL_COLUMNS = {"doubleValue", "floatValue"}
# columns whose usual type (above) differs in one table of real exports
_TABLE_TYPES = {("CUPTI_ACTIVITY_KIND_MEMSET", "value"): _I}



def _column_type(table: str, column: str) -> str:
    if (table, column) in _TABLE_TYPES:
        return _TABLE_TYPES[(table, column)]
    return _T if column in _TEXT_COLUMNS else (_R if column in _REAL_COLUMNS else _I)


NVTX_EVENT_TYPES = {"NvtxCategory": 33, "NvtxMark": 34, "NvtxThread": 39,
                    "NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
_MEMCPY_OPER = ["UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD",
                "HTOH", "PTOP"]
_MEM_KIND = ["PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC",
             "MANAGED_STATIC", "UNKNOWN"]
SYNC_TYPES = ["UNKNOWN", "EVENT_SYNCHRONIZE", "STREAM_WAIT_EVENT", "STREAM_SYNCHRONIZE",
              "CONTEXT_SYNCHRONIZE"]


# an A100-SXM4's TARGET_INFO_GPU limits (as aiprof_opt2's export has them), every synthetic
# GPU's unless `Spec.gpu_facts` says otherwise
A100 = {"smCount": 108, "computeMajor": 8, "computeMinor": 0, "maxShmemPerSm": 167936,
        "maxRegistersPerSm": 65536, "maxWarpsPerSm": 64, "maxBlocksPerSm": 32}
_CLUSTER = ["clusterX", "clusterY", "clusterZ", "clusterSchedulingPolicy",
            "maxPotentialClusterSize", "maxActiveClusters"]


def global_tid(pid: int, tid: int, vm: int = 1) -> int:
    """nsys' serialised id: VM id in bits 48-55, PID in 24-47, TID in 0-23."""
    return (vm << 48) | (pid << 24) | tid


def global_pid(pid: int, vm: int = 1) -> int:
    return global_tid(pid, 0, vm)


@dataclass
class ApiCall:
    start: int
    end: int
    pid: int
    tid: int
    name: str
    correlation: int
    ret: int = 0


@dataclass
class Kernel:
    start: int
    end: int
    pid: int
    device: int
    stream: int
    name: str
    correlation: int
    full_name: str | None = None
    context: int = 1
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    registers: int = 32
    static_smem: int = 0
    dynamic_smem: int = 0
    local_mem_thread: int = 0
    local_mem_total: int = 0
    carveout: int | None = 32768  # sharedMemoryExecuted (bytes); None: NULL
    cluster: tuple[int, int, int] | None = None  # cluster dimensions (nsys 2024.2+ columns)
    max_active_clusters: int = 0


@dataclass
class Memcpy:
    start: int
    end: int
    pid: int
    device: int
    stream: int
    correlation: int
    bytes: int
    copy_kind: int = 1
    src_kind: int = 0
    dst_kind: int = 2
    context: int = 1


@dataclass
class Memset:
    start: int
    end: int
    pid: int
    device: int
    stream: int
    correlation: int
    bytes: int
    value: int = 0
    mem_kind: int = 2
    context: int = 1


NO_ID = 0xFFFFFFFF  # what CUPTI writes for "no stream" / "no event" in sync records


@dataclass
class Sync:
    """A SYNCHRONIZATION record: a stream sync (stream, no event), a stream wait (stream and
    event), an event sync or query (event, no stream: stream None), a context sync (neither)."""

    start: int
    end: int
    pid: int
    device: int
    stream: int | None
    correlation: int
    sync_type: int = 3
    context: int = 1
    event: int | None = None


@dataclass
class CudaEvent:
    """A CUDA_EVENT record (nsys --cuda-event-trace): `event` recorded on `stream` by the
    cudaEventRecord call with this correlation id (no time of its own)."""

    pid: int
    device: int
    stream: int
    correlation: int
    event: int
    context: int = 1


@dataclass
class Nvtx:
    start: int
    end: int | None
    pid: int
    tid: int
    kind: str  # "pushpop" | "startend" | "mark"
    text: str | None
    domain: str | None = None
    category: int = 0
    end_tid: int | None = None  # a start/end range ended on another thread (endGlobalTid)


@dataclass
class Osrt:
    start: int
    end: int
    pid: int
    tid: int
    name: str
    ret: int = 0
    nesting: int = 0


@dataclass
class Spec:
    """Contents of one synthetic export (times in ns on the report's own clock)."""

    host: str | None = "synth-node"
    session_start_ns: int | None = 1_700_000_000_000_000_000
    cpu_cores: int = 16
    env: dict[str, str] = field(default_factory=dict)
    processes: list[tuple[int, str]] = field(default_factory=list)
    threads: list[tuple[int, int, str]] = field(default_factory=list)
    gpus: list[tuple[int, str]] = field(default_factory=list)
    api: list[ApiCall] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    memcpy: list[Memcpy] = field(default_factory=list)
    memset: list[Memset] = field(default_factory=list)
    sync: list[Sync] = field(default_factory=list)
    cuda_events: list[CudaEvent] = field(default_factory=list)
    nvtx: list[Nvtx] = field(default_factory=list)
    # TARGET_INFO_GPU columns per GPU id, over the A100's (`A100`); None leaves a column NULL
    gpu_facts: dict[int, dict] = field(default_factory=dict)
    categories: dict[tuple[int, str | None, int], str] = field(default_factory=dict)
    thread_nvtx_names: dict[tuple[int, int], str] = field(default_factory=dict)
    osrt: list[Osrt] = field(default_factory=list)


class Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        # nsys' first strings; a name at id 0 must not become Paraver value 0.
        for s in ("QnxKernelTrace", "GpuMetrics"):
            self.id(s)

    def id(self, s: str) -> int:
        if s not in self.ids:
            self.ids[s] = len(self.ids)
        return self.ids[s]

    def ids_of(self, names: Iterable[str]) -> list[int]:
        return [self.id(n) for n in names]


def appended_strings(con: sqlite3.Connection) -> Callable[[str | None], int | None]:
    """The id of a string in an export's StringIds (None: None), appended after the
    strings already there when new: for the generators that add tables to an export."""
    strings = dict(con.execute('SELECT value, id FROM "StringIds"').fetchall())
    next_id = max(strings.values(), default=-1) + 1

    def sid(s: str | None) -> int | None:
        nonlocal next_id
        if s is None:
            return None
        if s not in strings:
            strings[s] = next_id
            con.execute('INSERT INTO "StringIds" (id, value) VALUES (?, ?)', (next_id, s))
            next_id += 1
        return strings[s]

    return sid


def _insert(con: sqlite3.Connection, table: str, cols: list[str], rows: Iterable[dict]) -> None:
    names = ", ".join(f'"{c}"' for c in cols)
    marks = ", ".join("?" for _ in cols)
    con.executemany(f'INSERT INTO "{table}" ({names}) VALUES ({marks})',
                    ([r.get(c) for c in cols] for r in rows))


def write_export(path: str | os.PathLike[str], spec: Spec, layout: str = "3.17.1") -> Path:
    """Write `spec` as an SQLite export in the given layout (overwrites `path`)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout}")
    path = Path(path)
    path.unlink(missing_ok=True)
    cols = _columns(layout)
    if any(k.cluster for k in spec.kernels):  # as exports of nsys 2024.2 on have them
        cols["CUPTI_ACTIVITY_KIND_KERNEL"] = cols["CUPTI_ACTIVITY_KIND_KERNEL"] + _CLUSTER
    con = sqlite3.connect(path)
    for table, names in cols.items():
        defs = ", ".join(
            f'"{c}" {_column_type(table, c)}' for c in names)
        con.execute(f'CREATE TABLE "{table}" ({defs})')
    s = Strings()
    registered_nvtx = layout == "3.17.1"
    legacy = layout == "legacy"

    def opt(table: str) -> bool:
        return table in cols

    # metadata --------------------------------------------------------------------------
    if not legacy:
        meta = "EXPORT_META_DATA" if layout == "3.0.0" else "META_DATA_EXPORT"
        major, minor, micro = layout.split(".")
        product = "2022.4.2.1" if layout == "3.0.0" else "2025.1.1.110"
        _insert(con, meta, ["name", "value"], [
            {"name": "EXPORT_PRODUCT_NAME", "value": "Nsight Systems"},
            {"name": "EXPORT_PRODUCT_VERSION", "value": product},
            {"name": "EXPORT_SCHEMA_VERSION", "value": layout},
            {"name": "EXPORT_SCHEMA_VERSION_MAJOR", "value": major},
            {"name": "EXPORT_SCHEMA_VERSION_MINOR", "value": minor},
            {"name": "EXPORT_SCHEMA_VERSION_MICRO", "value": micro}])
        _insert(con, "ENUM_NSYS_EVENT_TYPE", ["id", "name", "label"],
                [{"id": i, "name": n, "label": n} for n, i in NVTX_EVENT_TYPES.items()])
        _insert(con, "ENUM_CUDA_MEMCPY_OPER", ["id", "name", "label"],
                [{"id": i, "name": "CUDA_MEMCPY_KIND_" + n, "label": n}
                 for i, n in enumerate(_MEMCPY_OPER)])
        _insert(con, "ENUM_CUDA_MEM_KIND", ["id", "name", "label"],
                [{"id": i, "name": "CUDA_MEMOPR_MEMORY_KIND_" + n, "label": n.title()}
                 for i, n in enumerate(_MEM_KIND)])
        _insert(con, "ENUM_CUPTI_SYNC_TYPE", ["id", "name", "label"],
                [{"id": i, "name": n, "label": n} for i, n in enumerate(SYNC_TYPES)])
        if spec.session_start_ns is not None:
            _insert(con, "TARGET_INFO_SESSION_START_TIME",
                    ["utcEpochNs", "utcTime", "localTime"],
                    [{"utcEpochNs": spec.session_start_ns, "utcTime": "", "localTime": ""}])
        env_rows = [{"globalVid": 1 << 48, "devStateName": "Local (CLI)", "name": "CpuCores",
                     "nameEnum": 1, "value": str(spec.cpu_cores)}]
        if spec.host and layout == "3.17.1":
            env_rows.append({"globalVid": 1 << 48, "devStateName": "Local (CLI)",
                             "name": "Hostname", "nameEnum": 619, "value": spec.host})
        if spec.env:
            text = ";".join(f"{k}={v}" for k, v in spec.env.items())
            if layout == "3.0.0" and spec.host:
                text += f";HOSTNAME={spec.host}"
            env_rows.append({"globalVid": 1 << 48, "devStateName": "Local (CLI)",
                             "name": "DeviceEnvironment", "nameEnum": 610, "value": text})
        elif layout == "3.0.0" and spec.host:
            env_rows.append({"globalVid": 1 << 48, "devStateName": "Local (CLI)",
                             "name": "DeviceEnvironment", "nameEnum": 610,
                             "value": f"HOSTNAME={spec.host}"})
        _insert(con, "TARGET_INFO_SYSTEM_ENV", cols["TARGET_INFO_SYSTEM_ENV"], env_rows)
        if opt("META_DATA_CAPTURE"):
            _insert(con, "META_DATA_CAPTURE", ["name", "value"],
                    [{"name": "PROCESS_0:ENVIRONMENT_VARIABLE", "value": f'{k}="{v}"'}
                     for k, v in spec.env.items()])
        _insert(con, "PROCESSES", ["globalPid", "pid", "name"],
                [{"globalPid": global_pid(p), "pid": p, "name": n} for p, n in spec.processes])
    # target info ---------------------------------------------------------------------------
    gpu_rows = []
    for gid, name in spec.gpus:
        facts = {**A100, **spec.gpu_facts.get(gid, {})}
        gpu_rows.append({"vmId": 1, "id": gid, "name": name, "busLocation": f"0000:{gid:02x}:00.0",
                         "isDiscrete": 1, "cuDevice": gid, **facts})
    _insert(con, "TARGET_INFO_GPU", cols["TARGET_INFO_GPU"], gpu_rows)
    _insert(con, "ThreadNames", cols["ThreadNames"],
            [{"nameId": s.id(n), "priority": 0, "globalTid": global_tid(p, t)}
             for p, t, n in spec.threads])
    if opt("TARGET_INFO_CUDA_CONTEXT_INFO"):
        ctxs = sorted({(k.pid, k.device, k.context) for k in spec.kernels})
        _insert(con, "TARGET_INFO_CUDA_CONTEXT_INFO", cols["TARGET_INFO_CUDA_CONTEXT_INFO"],
                [{"nullStreamId": 7, "hwId": 0, "vmId": 1, "processId": p, "deviceId": d,
                  "contextId": c, "parentContextId": 0, "isGreenContext": 0}
                 for p, d, c in ctxs])
    # CUDA ---------------------------------------------------------------------------------
    _insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", cols["CUPTI_ACTIVITY_KIND_RUNTIME"],
            [{"start": a.start, "end": a.end, "eventClass": 1,
              "globalTid": global_tid(a.pid, a.tid), "correlationId": a.correlation,
              "nameId": s.id(a.name), "returnValue": a.ret} for a in spec.api])
    _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", cols["CUPTI_ACTIVITY_KIND_KERNEL"], [
        {"start": k.start, "end": k.end, "deviceId": k.device, "contextId": k.context,
         "greenContextId": None, "streamId": k.stream, "correlationId": k.correlation,
         "globalPid": global_pid(k.pid), "demangledName": s.id(k.full_name or k.name),
         "shortName": s.id(k.name), "mangledName": None, "launchType": 0, "cacheConfig": 0,
         "registersPerThread": k.registers, "gridX": k.grid[0], "gridY": k.grid[1],
         "gridZ": k.grid[2], "blockX": k.block[0], "blockY": k.block[1], "blockZ": k.block[2],
         "staticSharedMemory": k.static_smem, "dynamicSharedMemory": k.dynamic_smem,
         "localMemoryPerThread": k.local_mem_thread, "localMemoryTotal": k.local_mem_total,
         "gridId": i, "sharedMemoryExecuted": k.carveout,
         **({"clusterX": k.cluster[0], "clusterY": k.cluster[1], "clusterZ": k.cluster[2],
             "maxActiveClusters": k.max_active_clusters} if k.cluster else {})}
        for i, k in enumerate(spec.kernels)])
    _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", cols["CUPTI_ACTIVITY_KIND_MEMCPY"], [
        {"start": m.start, "end": m.end, "deviceId": m.device, "contextId": m.context,
         "streamId": m.stream, "correlationId": m.correlation, "globalPid": global_pid(m.pid),
         "bytes": m.bytes, "copyKind": m.copy_kind, "srcKind": m.src_kind,
         "dstKind": m.dst_kind, "srcDeviceId": m.device, "dstDeviceId": m.device}
        for m in spec.memcpy])
    _insert(con, "CUPTI_ACTIVITY_KIND_MEMSET", cols["CUPTI_ACTIVITY_KIND_MEMSET"], [
        {"start": m.start, "end": m.end, "deviceId": m.device, "contextId": m.context,
         "streamId": m.stream, "correlationId": m.correlation, "globalPid": global_pid(m.pid),
         "value": m.value, "bytes": m.bytes, "memKind": m.mem_kind} for m in spec.memset])
    _insert(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            cols["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"], [
        {"start": y.start, "end": y.end, "deviceId": y.device, "contextId": y.context,
         "streamId": NO_ID if y.stream is None else y.stream, "correlationId": y.correlation,
         "globalPid": global_pid(y.pid), "syncType": y.sync_type,
         "eventId": NO_ID if y.event is None else y.event} for y in spec.sync])
    _insert(con, "CUPTI_ACTIVITY_KIND_CUDA_EVENT", cols["CUPTI_ACTIVITY_KIND_CUDA_EVENT"], [
        {"deviceId": e.device, "contextId": e.context, "streamId": e.stream,
         "correlationId": e.correlation, "globalPid": global_pid(e.pid), "eventId": e.event}
        for e in spec.cuda_events])
    streams = sorted({(x.pid, x.context, x.stream) for x in
                      [*spec.kernels, *spec.memcpy, *spec.memset]})
    _insert(con, "TARGET_INFO_CUDA_STREAM", cols["TARGET_INFO_CUDA_STREAM"],
            [{"streamId": st, "hwId": 0, "vmId": 1, "processId": p, "contextId": c,
              "priority": 0, "flag": 0} for p, c, st in streams])
    # NVTX ---------------------------------------------------------------------------------
    nvtx_rows = []
    domain_ids: dict[tuple[int, str], int] = {}

    def dom(pid: int, name: str | None) -> int:
        if name is None:
            return 0
        if (pid, name) not in domain_ids:
            domain_ids[(pid, name)] = len([k for k in domain_ids if k[0] == pid]) + 1
            nvtx_rows.append(_nvtx_row(s, registered_nvtx, 0, None, "NvtxDomainCreate", pid, 0,
                                       name, domain_ids[(pid, name)]))
        return domain_ids[(pid, name)]

    for (pid, tid), name in spec.thread_nvtx_names.items():
        nvtx_rows.append(_nvtx_row(s, registered_nvtx, 0, None, "NvtxThread", pid, tid, name, 0))
    for (pid, d, cat), name in spec.categories.items():
        row = _nvtx_row(s, registered_nvtx, 0, None, "NvtxCategory", pid, 0, name, dom(pid, d))
        row["category"] = cat
        nvtx_rows.append(row)
    kinds = {"pushpop": "NvtxPushPopRange", "startend": "NvtxStartEndRange",
             "mark": "NvtxMark"}
    for n in spec.nvtx:
        row = _nvtx_row(s, registered_nvtx, n.start, n.end, kinds[n.kind], n.pid, n.tid, n.text,
                        dom(n.pid, n.domain))
        row["category"] = n.category
        if n.end_tid is not None:
            row["endGlobalTid"] = global_tid(n.pid, n.end_tid)
        nvtx_rows.append(row)
    if nvtx_rows:
        _insert(con, "NVTX_EVENTS", cols["NVTX_EVENTS"], nvtx_rows)
    # OS runtime -------------------------------------------------------------------------------
    _insert(con, "OSRT_API", cols["OSRT_API"], [
        {"start": o.start, "end": o.end, "eventClass": 27, "globalTid": global_tid(o.pid, o.tid),
         "nameId": s.id(o.name), "returnValue": o.ret, "nestingLevel": o.nesting,
         "callchainId": 0} for o in spec.osrt])
    _insert(con, "StringIds", ["id", "value"], [{"id": i, "value": v} for v, i in s.ids.items()])
    con.commit()
    # Lazy export: drop empty tables, as nsys does by default.
    for table in list(cols):
        if con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == 0 and table not in (
                "StringIds",):
            con.execute(f'DROP TABLE "{table}"')
    con.commit()
    con.execute("VACUUM")
    con.close()
    return path


def _nvtx_row(s: Strings, registered: bool, start: int, end: int | None, kind: str, pid: int,
              tid: int, text: str | None, domain: int) -> dict:
    row = {"start": start, "end": end, "eventType": NVTX_EVENT_TYPES[kind],
           "globalTid": global_tid(pid, tid), "domainId": domain, "category": 0}
    if text is not None:
        if registered and kind not in ("NvtxDomainCreate", "NvtxCategory", "NvtxThread"):
            row["textId"] = s.id(text)
        else:
            row["text"] = text
    return row


def scaled_names(prefix: str, n: int) -> Sequence[str]:
    return [f"{prefix}{i}" for i in range(n)]
