"""NCCL: host-side NCCL ranges (NVTX) and their payloads, written on the NCCL kernels.

NCCL kernels themselves are type 67000002 (cuda.py). NCCL marks each API call with an NVTX
range of its "NCCL" domain; recent NCCL releases attach a payload to it (communicator, message
size, peer, root, reduction, ...), exported as JSON (`jsonText`) or as a binary blob described
by the NVTX_PAYLOAD_SCHEMA* tables. The call is written on its CPU thread (67600000) with its
own payload fields; the fields of the operation(s) that a kernel carries out are written on
that NCCL kernel (the kernel launched inside the call, or inside the ncclGroupEnd that closes
the group the call belongs to). Payload fields are plain numbers: value at the start of the
call or kernel, 0 at its end.
"""

from __future__ import annotations

from .core import ValueFamily, event_type

KINDS = ("nccl",)

NCCL_RANGE = 67_600_000
NCCL_COLLECTIVE = 67_600_001
NCCL_MESSAGE_SIZE = 67_600_002
NCCL_DATATYPE = 67_600_003
NCCL_REDUCTION = 67_600_004
NCCL_ROOT = 67_600_005
NCCL_PEER = 67_600_006
NCCL_COMMUNICATOR = 67_600_007
NCCL_RANK = 67_600_008
NCCL_NRANKS = 67_600_009

COLLECTIVES = {
    "AllReduce": 1, "AllGather": 2, "ReduceScatter": 3, "Broadcast": 4, "Reduce": 5,
    "Send": 6, "Recv": 7, "AllToAll": 8, "Gather": 9, "Scatter": 10, "SendRecv": 11,
}
# Name of the operation of a kernel whose group mixes different collectives (first free value).
MIXED_GROUP = "Group"

EVENT_TYPES = (
    event_type(NCCL_RANGE, "NCCL call", "NCCL",
               "Host-side NCCL call (NVTX range of NCCL) on the CPU thread (value = call "
               "name; 0 = end).", values="nccl_calls", kinds=KINDS),
    event_type(NCCL_COLLECTIVE, "NCCL collective", "NCCL",
               "Collective/point-to-point operation of the NCCL kernel starting (value = "
               "operation; SendRecv for a group of sends and receives, Group for a group of "
               "different collectives; 0 = end).", values="nccl_collectives", kinds=KINDS),
    event_type(NCCL_MESSAGE_SIZE, "NCCL message size", "NCCL",
               "Message size in bytes of the NCCL call, and on its kernel the sum over the "
               "operations of the group the kernel carries out.", kinds=KINDS),
    event_type(NCCL_DATATYPE, "NCCL datatype", "NCCL",
               "Datatype of the NCCL operation (value = ncclDataType_t + 1).",
               values="nccl_datatype", kinds=KINDS),
    event_type(NCCL_REDUCTION, "NCCL reduction operation", "NCCL",
               "Reduction of the NCCL operation (value = ncclRedOp_t + 1).",
               values="nccl_redop", kinds=KINDS),
    event_type(NCCL_ROOT, "NCCL root", "NCCL", "Root rank of the NCCL operation.", kinds=KINDS),
    event_type(NCCL_PEER, "NCCL peer", "NCCL", "Peer rank of an NCCL send/recv.", kinds=KINDS),
    event_type(NCCL_COMMUNICATOR, "NCCL communicator", "NCCL",
               "Communicator id of the NCCL operation (NCCL's 64-bit id with its top bit "
               "cleared, so that it stays a non-negative 64-bit Paraver value).", kinds=KINDS),
    event_type(NCCL_RANK, "NCCL rank", "NCCL",
               "Rank of this process in the communicator (from the payload, or from the "
               "ncclCommInitRank* call that created the communicator).", kinds=KINDS),
    event_type(NCCL_NRANKS, "NCCL number of ranks", "NCCL", "Size of the communicator.",
               kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = (
    ValueFamily("nccl_calls", "NCCL host-side call names (ncclAllReduce, ncclSend, ...)"),
    ValueFamily("nccl_collectives", "NCCL operations", first_free=100, fixed=COLLECTIVES),
)
ENUMS: dict[str, dict[int, str]] = {
    "nccl_datatype": {i + 1: n for i, n in enumerate(
        ["ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
         "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3",
         "ncclFloat8e5m2"])},
    "nccl_redop": {i + 1: n for i, n in enumerate(
        ["ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"])},
}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
