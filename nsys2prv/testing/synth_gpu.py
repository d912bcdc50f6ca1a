"""Synthetic exports for NCCL payloads, CUDA graphs, CUDA memory usage and cuDNN/cuBLAS.

No file of the real corpus has CUDA graphs or NCCL payload values, so these fixtures are built
from NVIDIA's documented tables: a base export written by `synth.write_export`, to which the
functions here add the tables (and columns) of those features with the column lists of
NVIDIA's exporter DDL, and known contents that the tests check record by record.

* `nccl_export`: NCCL ranges in domain "NCCL" (and in an unnamed domain, as in exports whose
  domain rows were trimmed), with payloads as JSON text, as JSON StringIds, or as binary blobs
  (32-byte header `<IIIIQQ` + fields at the offsets of NVTX_PAYLOAD_SCHEMA_ENTRIES).
* `graph_export`: graph-level trace (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) with cudaGraphLaunch
  calls, CPU-side CUDA_GRAPH_EVENTS / CUDA_GRAPH_NODE_EVENTS, and node-level kernels/copies
  carrying graphNodeId (and graphId).
* `memory_export`: CUDA_GPU_MEMORY_USAGE_EVENTS on two devices.
* `dnn_export`: CUDNN_EVENTS and CUBLAS_EVENTS with their start/finish marker rows.
"""

from __future__ import annotations

import json
import sqlite3
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .synth import ApiCall, Kernel, Memcpy, Memset, Nvtx, Spec, global_pid, global_tid, \
    write_export

US = 1000
LAYOUT = "3.17.1"

# NVTX payload entry types (nvToolsExtPayload.h) and NCCL's static schema ids
T_INT, T_UINT64, T_SIZE = 5, 18, 22
STATIC = 1 << 24
REDOP_TYPE = STATIC + 14  # NVTX_PAYLOAD_ENTRY_NCCL_REDOP (an int-sized enum)

# schema id -> entries (name, type, offset or None = natural alignment); payload size
NCCL_SCHEMAS: dict[int, tuple[list[tuple[str, int, int | None]], int]] = {
    STATIC + 0: ([("NCCL communicator ID", T_UINT64, None), ("No. of ranks", T_INT, 8),
                  ("Rank", T_INT, 12), ("CUDA device", T_INT, 16)], 24),
    STATIC + 5: ([("NCCL communicator ID", T_UINT64, None), ("Message size [bytes]", T_SIZE, 8),
                  ("Reduction operation", REDOP_TYPE, 16), ("Datatype", T_INT, 20)], 24),
    STATIC + 9: ([("NCCL communicator ID", T_UINT64, None), ("Message size [bytes]", T_SIZE, 8),
                  ("Peer rank", T_INT, 16)], 24),
    STATIC + 10: ([("NCCL communicator ID", T_UINT64, None),
                   ("Message size [bytes]", T_SIZE, 8), ("Peer rank", T_INT, 16)], 24),
    # every offset left to natural alignment, as a schema registered without offsets
    STATIC + 6: ([("NCCL communicator ID", T_UINT64, None),
                  ("Message size [bytes]", T_SIZE, None), ("Root", T_INT, None)], 24),
    STATIC + 4: ([("NCCL communicator ID", T_UINT64, None),
                  ("Message size [bytes]", T_SIZE, 8)], 16),
}
_FORMATS = {T_INT: "<i", T_UINT64: "<Q", T_SIZE: "<Q", REDOP_TYPE: "<i"}
_SIZES = {T_INT: 4, T_UINT64: 8, T_SIZE: 8, REDOP_TYPE: 4}

COMM_A = 0xF00DCAFE12345678  # above 2^63: shows as a negative int64
COMM_B = 0x0123456789ABCDEF
NCCL_PID, NCCL_TID = 100, 100
TRIMMED_PID, TRIMMED_TID = 200, 200


@dataclass
class NcclCall:
    """One NCCL range with its payload (entry name -> value, as NCCL would fill it)."""

    start: int
    end: int
    name: str
    schema: int | None = None
    payload: dict[str, int] = field(default_factory=dict)
    pid: int = NCCL_PID
    tid: int = NCCL_TID
    launch: tuple[int, int, int] | None = None  # (api start, api end, correlation)


def _offsets(entries: list[tuple[str, int, int | None]]) -> list[int]:
    out, pos = [], 0
    for _, etype, off in entries:
        size = _SIZES[etype]
        if off is None:
            off = -(-pos // size) * size
        out.append(off)
        pos = off + size
    return out


def pack_payload(domain: int, schema: int, values: dict[str, int]) -> bytes:
    """A binaryData blob: `<IIIIQQ` header, then the schema's fields at their offsets."""
    entries, size = NCCL_SCHEMAS[schema]
    body = bytearray(size)
    for (name, etype, _), off in zip(entries, _offsets(entries)):
        if name in values:
            struct.pack_into(_FORMATS[etype], body, off, values[name])
    return struct.pack("<IIIIQQ", domain, 0, schema, 0, size, 32 + size) + bytes(body)


# -- NCCL -------------------------------------------------------------------------------------

def nccl_calls() -> list[NcclCall]:
    """Process 100 (domain "NCCL"): init, an AllReduce, a Send+Recv group, a Broadcast.
    Process 200 (domain unnamed, as when domain rows are trimmed): an AllGather."""
    return [
        NcclCall(1_000 * US, 5_000 * US, "ncclCommInitRank", STATIC + 0,
                 {"NCCL communicator ID": COMM_A, "No. of ranks": 4, "Rank": 1,
                  "CUDA device": 0}),
        NcclCall(10_000 * US, 20_000 * US, "ncclAllReduce", STATIC + 5,
                 {"NCCL communicator ID": COMM_A, "Message size [bytes]": 4096,
                  "Reduction operation": 0, "Datatype": 7},
                 launch=(12_000 * US, 15_000 * US, 1)),
        NcclCall(60_000 * US, 61_000 * US, "ncclGroupStart"),
        NcclCall(62_000 * US, 63_000 * US, "ncclSend", STATIC + 9,
                 {"NCCL communicator ID": COMM_A, "Message size [bytes]": 1000,
                  "Peer rank": 2}),
        NcclCall(64_000 * US, 65_000 * US, "ncclRecv", STATIC + 10,
                 {"NCCL communicator ID": COMM_A, "Message size [bytes]": 3000,
                  "Peer rank": 2}),
        NcclCall(66_000 * US, 80_000 * US, "ncclGroupEnd", launch=(70_000 * US, 72_000 * US, 2)),
        NcclCall(130_000 * US, 140_000 * US, "ncclBroadcast", STATIC + 6,
                 {"NCCL communicator ID": COMM_A, "Message size [bytes]": 8, "Root": 0},
                 launch=(132_000 * US, 133_000 * US, 3)),
        NcclCall(10_000 * US, 20_000 * US, "ncclAllGather", STATIC + 4,
                 {"NCCL communicator ID": COMM_B, "Message size [bytes]": 2048},
                 pid=TRIMMED_PID, tid=TRIMMED_TID, launch=(11_000 * US, 12_000 * US, 5)),
    ]


# kernel name, pid, device, stream, start, end, correlation (correlation 4 is launched outside
# any NCCL range; kernel 6 is an ordinary kernel the Broadcast kernel overlaps on stream 7)
NCCL_KERNELS = [
    ("ncclDevKernel_AllReduce_RING_LL", NCCL_PID, 0, 7, 30_000, 50_000, 1),
    ("ncclDevKernel_SendRecv", NCCL_PID, 0, 7, 90_000, 120_000, 2),
    ("compute_kernel", NCCL_PID, 0, 7, 145_000, 158_000, 6),
    ("ncclDevKernel_Broadcast_RING_LL", NCCL_PID, 0, 7, 150_000, 160_000, 3),
    ("ncclKernel_AllGather_RING_LL_Sum_float", NCCL_PID, 0, 7, 200_000, 210_000, 4),
    ("ncclDevKernel_AllGather_RING_LL", TRIMMED_PID, 1, 7, 25_000, 40_000, 5),
]


def nccl_spec() -> Spec:
    calls = nccl_calls()
    spec = Spec(processes=[(NCCL_PID, "trainer"), (TRIMMED_PID, "trainer")],
                threads=[(NCCL_PID, NCCL_TID, "trainer"), (TRIMMED_PID, TRIMMED_TID, "trainer")],
                gpus=[(0, "NVIDIA H100"), (1, "NVIDIA H100")])
    for call in calls:
        domain = "NCCL" if call.pid == NCCL_PID else "nccl-trimmed"
        spec.nvtx.append(Nvtx(call.start, call.end, call.pid, call.tid, "pushpop", call.name,
                              domain))
        if call.launch:
            a, b, corr = call.launch
            spec.api.append(ApiCall(a, b, call.pid, call.tid, "cuLaunchKernelEx", corr))
    spec.api.append(ApiCall(199_000 * US, 199_500 * US, NCCL_PID, NCCL_TID, "cuLaunchKernelEx",
                            4))
    spec.api.append(ApiCall(140_500 * US, 141_000 * US, NCCL_PID, NCCL_TID, "cudaLaunchKernel",
                            6))
    # look-alikes that are not NCCL's: PyTorch's default-domain range, another library's domain
    spec.nvtx.append(Nvtx(300_000 * US, 301_000 * US, TRIMMED_PID, TRIMMED_TID, "pushpop",
                          "nccl:all_reduce"))
    spec.nvtx.append(Nvtx(302_000 * US, 303_000 * US, TRIMMED_PID, TRIMMED_TID, "pushpop",
                          "ncclLookAlike", "other"))
    for name, pid, dev, stream, start, end, corr in NCCL_KERNELS:
        spec.kernels.append(Kernel(start * US, end * US, pid, dev, stream, name, corr))
    return spec


def _add_strings(con: sqlite3.Connection, values: list[str]) -> dict[str, int]:
    known = dict((v, i) for i, v in con.execute("SELECT id, value FROM StringIds"))
    nxt = max(known.values(), default=-1) + 1
    for v in values:
        if v not in known:
            con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (nxt, v))
            known[v] = nxt
            nxt += 1
    return known


def _json_payload(call: NcclCall) -> str:
    """JSON as NCCL's entry names; enums by name, as a registered enum would print."""
    out: dict[str, object] = {}
    for k, v in call.payload.items():
        if k == "Reduction operation":
            out[k] = ["Sum", "Prod", "Max", "Min", "Avg"][v]
        elif k == "Datatype":
            out[k] = ["ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64",
                      "ncclUint64", "ncclFloat16", "ncclFloat32"][v]
        else:
            out[k] = v
    return json.dumps(out)


def nccl_export(path: str | Path, encoding: str = "binary") -> Path:
    """`nccl_spec()` with payloads as "binary" blobs, "json" text or "json_id" strings."""
    path = write_export(path, nccl_spec(), LAYOUT)
    con = sqlite3.connect(path)
    # NCCL's domain id per process as write_export numbered them; then "trim" the domain
    # definition of process 200, as in exports whose domain rows were dropped
    named = {(pid, text): dom for pid, dom, text in con.execute(
        "SELECT (globalTid >> 24) & 16777215, domainId, text FROM NVTX_EVENTS "
        "WHERE eventType = 75")}
    domains = {NCCL_PID: named[(NCCL_PID, "NCCL")],
               TRIMMED_PID: named[(TRIMMED_PID, "nccl-trimmed")]}
    con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'nccl-trimmed'")
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, "
                "name TEXT, type INTEGER, flags INTEGER, numEntries INTEGER, "
                "payloadSize INTEGER, alignTo INTEGER)")
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER NOT NULL, "
                "schemaId INTEGER NOT NULL, idx INTEGER NOT NULL, flags INTEGER, type INTEGER, "
                "name TEXT, description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER)")
    for dom in sorted(set(domains.values())):  # one copy per process domain, as nsys writes
        for sid, (entries, size) in NCCL_SCHEMAS.items():
            con.execute("INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (?, ?, NULL, 1, NULL, ?, ?, "
                        "NULL)", (dom, sid, len(entries), size))
            for i, (name, etype, off) in enumerate(entries):
                con.execute("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES "
                            "(?, ?, ?, NULL, ?, ?, NULL, NULL, ?)", (dom, sid, i, etype, name,
                                                                     off))
    calls = [x for x in nccl_calls() if x.payload]
    ids = _add_strings(con, [_json_payload(x) for x in calls]) if encoding == "json_id" else {}
    for call in calls:
        where = "start = ? AND globalTid = ? AND eventType = 59"
        key = (call.start, global_tid(call.pid, call.tid))
        if encoding == "binary":
            blob = pack_payload(domains[call.pid], call.schema, call.payload)
            con.execute(f"UPDATE NVTX_EVENTS SET binaryData = ? WHERE {where}", (blob, *key))
        elif encoding == "json":
            con.execute(f"UPDATE NVTX_EVENTS SET jsonText = ? WHERE {where}",
                        (_json_payload(call), *key))
        else:
            con.execute(f"UPDATE NVTX_EVENTS SET jsonTextId = ? WHERE {where}",
                        (ids[_json_payload(call)], *key))
    con.commit()
    con.close()
    return path


# -- CUDA graphs ------------------------------------------------------------------------------

GRAPH_PID, GRAPH_TID = 300, 300
EVENT_CLASSES = {77: "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION",
                 94: "TRACE_PROCESS_EVENT_CUDA_GRAPHEXEC_CREATION",
                 95: "TRACE_PROCESS_EVENT_CUDA_GRAPH_CREATION",
                 96: "TRACE_PROCESS_EVENT_CUDA_GRAPH_CLONE",
                 28: "TRACE_PROCESS_EVENT_CUDNN", 29: "TRACE_PROCESS_EVENT_CUBLAS",
                 33: "TRACE_PROCESS_EVENT_CUDNN_START", 34: "TRACE_PROCESS_EVENT_CUDNN_FINISH",
                 35: "TRACE_PROCESS_EVENT_CUBLAS_START",
                 36: "TRACE_PROCESS_EVENT_CUBLAS_FINISH"}

# graph-level executions: (start, end, stream, correlation, graphId, graphExecId)
GRAPH_EXECUTIONS = [(100_000, 180_000, 7, 11, 1, 1), (200_000, 260_000, 7, 12, 1, 1),
                    (210_000, 300_000, 13, 13, 2, 2)]
# cudaGraphLaunch calls: (start, end, correlation)
GRAPH_LAUNCHES = [(90_000, 95_000, 11), (190_000, 192_000, 12), (195_000, 198_000, 13)]
# CPU-side events: (table, start, end, class, function, ids...)
GRAPH_NODE_EVENTS = [(10_000, 11_000, 77, "cudaGraphAddKernelNode", 101, None),
                     (12_000, 13_000, 77, "cudaGraphAddMemcpyNode", 102, None),
                     (40_000, 41_000, 77, "cudaGraphInstantiate", 201, 101)]
# (start, end, class, function, graphId, originalGraphId, graphExecId)
GRAPH_EVENTS = [(5_000, 6_000, 95, "cudaGraphCreate", 1, None, None),
                (30_000, 31_000, 96, "cudaGraphClone", 2, 1, None),
                (40_000, 45_000, 94, "cudaGraphInstantiate", 1, None, 1),
                (46_000, 50_000, 94, "cudaGraphInstantiate", 2, None, 2)]
# node-level activities: (kind, start, end, stream, correlation, graphNodeId, graphId)
GRAPH_NODES = [("kernel", 400_000, 420_000, 7, 21, 101, 1),
               ("kernel", 410_000, 430_000, 7, 21, 103, 1),  # overlaps: goes to a lane
               ("memcpy", 440_000, 450_000, 7, 21, 102, 1),
               ("memset", 455_000, 458_000, 7, 21, 104, 1)]


def graph_spec() -> Spec:
    spec = Spec(processes=[(GRAPH_PID, "graphs")], threads=[(GRAPH_PID, GRAPH_TID, "main")],
                gpus=[(0, "NVIDIA H100")])
    for a, b, corr in GRAPH_LAUNCHES:
        spec.api.append(ApiCall(a * US, b * US, GRAPH_PID, GRAPH_TID, "cudaGraphLaunch_v10000",
                                corr))
    spec.api.append(ApiCall(390_000 * US, 395_000 * US, GRAPH_PID, GRAPH_TID,
                            "cudaGraphLaunch_v10000", 21))
    for kind, a, b, stream, corr, _, _ in GRAPH_NODES:
        if kind == "kernel":
            spec.kernels.append(Kernel(a * US, b * US, GRAPH_PID, 0, stream, "graph_kernel",
                                       corr))
        elif kind == "memcpy":
            spec.memcpy.append(Memcpy(a * US, b * US, GRAPH_PID, 0, stream, corr, 1 << 20))
        else:
            spec.memset.append(Memset(a * US, b * US, GRAPH_PID, 0, stream, corr, 1 << 10))
    # an ordinary kernel that no graph ran
    spec.kernels.append(Kernel(500_000 * US, 510_000 * US, GRAPH_PID, 0, 7, "plain_kernel", 31))
    spec.api.append(ApiCall(499_000 * US, 499_500 * US, GRAPH_PID, GRAPH_TID,
                            "cudaLaunchKernel_v7000", 31))
    return spec


def _enum_table(con: sqlite3.Connection, name: str, rows: dict[int, str]) -> None:
    con.execute(f'CREATE TABLE IF NOT EXISTS "{name}" (id INTEGER, name TEXT, label TEXT)')
    con.executemany(f'INSERT INTO "{name}" VALUES (?, ?, ?)',
                    [(i, n, n) for i, n in rows.items()])


def graph_export(path: str | Path, layout: str = LAYOUT) -> Path:
    """Graph-level executions, CPU graph events and node-level activities in one export.

    layout "3.17.1": CUDA_GRAPH_NODE_EVENTS + CUDA_GRAPH_EVENTS (graph ids), kernels with a
    graphId column; layout "3.0.0" (nsys 2022.4): CUDA_GRAPH_EVENTS has the node columns and
    there is no graph-level trace table."""
    path = write_export(path, graph_spec(), layout)
    con = sqlite3.connect(path)
    tid = global_tid(GRAPH_PID, GRAPH_TID)
    names = _add_strings(con, sorted({e[3] for e in GRAPH_NODE_EVENTS}
                                     | {e[3] for e in GRAPH_EVENTS}))
    _enum_table(con, "ENUM_NSYS_EVENT_CLASS", EVENT_CLASSES)
    node_table = "CUDA_GRAPH_NODE_EVENTS" if layout == LAYOUT else "CUDA_GRAPH_EVENTS"
    con.execute(f'CREATE TABLE "{node_table}" (start INTEGER NOT NULL, end INTEGER NOT NULL, '
                "eventClass INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL, "
                "graphNodeId INTEGER NOT NULL, originalGraphNodeId INTEGER)")
    con.executemany(f'INSERT INTO "{node_table}" VALUES (?, ?, ?, ?, ?, ?, ?)',
                    [(a * US, b * US, cls, tid, names[fn], node, orig)
                     for a, b, cls, fn, node, orig in GRAPH_NODE_EVENTS])
    if layout == LAYOUT:
        con.execute("CREATE TABLE CUDA_GRAPH_EVENTS (start INTEGER NOT NULL, end INTEGER NOT "
                    "NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT "
                    "NULL, graphId INTEGER, originalGraphId INTEGER, graphExecId INTEGER)")
        con.executemany("INSERT INTO CUDA_GRAPH_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [(a * US, b * US, cls, tid, names[fn], g, og, ge)
                         for a, b, cls, fn, g, og, ge in GRAPH_EVENTS])
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, "
                    "end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT "
                    "NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId "
                    "INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER "
                    "NOT NULL)")
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES "
                        "(?, ?, 0, 1, NULL, ?, ?, ?, ?, ?)",
                        [(a * US, b * US, st, corr, global_pid(GRAPH_PID), g, ge)
                         for a, b, st, corr, g, ge in GRAPH_EXECUTIONS])
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN graphId INTEGER")
    tables = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
              "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}
    for kind, a, _, _, _, node, graph in GRAPH_NODES:
        sets = "graphNodeId = ?" + (", graphId = ?" if kind == "kernel" and layout == LAYOUT
                                    else "")
        args = (node, graph) if kind == "kernel" and layout == LAYOUT else (node,)
        con.execute(f'UPDATE "{tables[kind]}" SET {sets} WHERE start = ?', (*args, a * US))
    con.commit()
    con.close()
    return path


# -- CUDA memory usage ------------------------------------------------------------------------

MEM_PID, MEM_TID = 400, 400
# (start us, device, address, bytes, memKind, op) op: 0 allocation, 1 free
MEMORY_EVENTS = [
    (1_000, 0, 0x7F0000000000, 1 << 20, 2, 0),
    (2_000, 0, 0x7F0000100000, 4 << 20, 2, 0),
    (2_000, 0, 0x200000000, 1 << 16, 1, 0),      # pinned host memory, same time
    (3_000, 1, 0x7E0000000000, 8 << 20, 2, 0),
    (4_000, 0, 0x7F0000000000, 1 << 20, 2, 1),
    (5_000, 0, 0x7F0000000000, 2 << 20, 2, 0),   # same address allocated again
    (6_000, 0, 0x7F0000000000, 0, 2, 1),          # free without a size: the 2 MiB one
    (7_000, 1, 0x7E0000000000, 8 << 20, 2, 1),
    (8_000, 0, 0x7D0000000000, 1 << 10, 2, 1),   # freed before the capture: not counted
]


def memory_spec() -> Spec:
    return Spec(processes=[(MEM_PID, "alloc")], threads=[(MEM_PID, MEM_TID, "main")],
                gpus=[(0, "NVIDIA H100"), (1, "NVIDIA H100")],
                api=[ApiCall(500 * US, 9_000 * US, MEM_PID, MEM_TID, "cudaDeviceSynchronize",
                             1)])


def memory_export(path: str | Path) -> Path:
    path = write_export(path, memory_spec(), LAYOUT)
    con = sqlite3.connect(path)
    _enum_table(con, "ENUM_CUDA_DEV_MEM_EVENT_OPER",
                {0: "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION",
                 1: "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION"})
    con.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid "
                "INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
                "address INTEGER NOT NULL, pc INTEGER NOT NULL, bytes INTEGER NOT NULL, "
                "memKind INTEGER NOT NULL, memoryOperationType INTEGER NOT NULL, name TEXT, "
                "correlationId INTEGER, localMemoryPoolAddress INTEGER, "
                "localMemoryPoolReleaseThreshold INTEGER, localMemoryPoolSize INTEGER, "
                "localMemoryPoolUtilizedSize INTEGER, importedMemoryPoolAddress INTEGER, "
                "importedMemoryPoolProcessId INTEGER)")
    con.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, globalPid, deviceId, "
                    "contextId, address, pc, bytes, memKind, memoryOperationType, "
                    "correlationId) VALUES (?, ?, ?, 1, ?, 0, ?, ?, ?, 0)",
                    [(t * US, global_pid(MEM_PID), d, a, b, k, op)
                     for t, d, a, b, k, op in MEMORY_EVENTS])
    con.commit()
    con.close()
    return path


# -- cuDNN / cuBLAS -----------------------------------------------------------------------------

DNN_PID, DNN_TID, DNN_TID2 = 500, 500, 501
# (table, start us, end us, eventClass, name, tid)
DNN_EVENTS = [
    ("CUDNN_EVENTS", 100, 100, 33, "cuDNNprofiling started", DNN_TID),
    ("CUDNN_EVENTS", 1_000, 3_000, 28, "cudnnCreate", DNN_TID),
    ("CUDNN_EVENTS", 4_000, 4_500, 28, "cudnnConvolutionForward", DNN_TID),
    ("CUDNN_EVENTS", 5_000, 5_200, 28, "cudnnConvolutionForward", DNN_TID2),
    ("CUDNN_EVENTS", 9_900, 9_900, 34, "cuDNN finished", DNN_TID),
    ("CUBLAS_EVENTS", 150, 150, 35, "cuBLASprofiling started", DNN_TID),
    ("CUBLAS_EVENTS", 6_000, 6_400, 29, "cublasSgemm_v2", DNN_TID),
    ("CUBLAS_EVENTS", 6_000, 6_400, 29, "cublasSgemm_v2", DNN_TID2),
]


def dnn_spec() -> Spec:
    return Spec(processes=[(DNN_PID, "dnn")],
                threads=[(DNN_PID, DNN_TID, "main"), (DNN_PID, DNN_TID2, "worker")],
                api=[ApiCall(4_100 * US, 4_200 * US, DNN_PID, DNN_TID, "cudaLaunchKernel", 1)])


def dnn_export(path: str | Path) -> Path:
    path = write_export(path, dnn_spec(), LAYOUT)
    con = sqlite3.connect(path)
    _enum_table(con, "ENUM_NSYS_EVENT_CLASS", EVENT_CLASSES)
    names = _add_strings(con, sorted({e[4] for e in DNN_EVENTS}))
    for table in ("CUDNN_EVENTS", "CUBLAS_EVENTS"):
        con.execute(f'CREATE TABLE "{table}" (start INTEGER NOT NULL, end INTEGER NOT NULL, '
                    "eventClass INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL)")
    for table, a, b, cls, name, tid in DNN_EVENTS:
        con.execute(f'INSERT INTO "{table}" VALUES (?, ?, ?, ?, ?)',
                    (a * US, b * US, cls, global_tid(DNN_PID, tid), names[name]))
    con.commit()
    con.close()
    return path
