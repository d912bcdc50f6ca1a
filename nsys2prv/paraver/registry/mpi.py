"""MPI: calls in Extrae's encoding (five call types, one value per function), collective
payloads, point-to-point payloads, and the states of the calling thread.

Extrae's facts used here (its merger, `MPI_EventEncoding.h`, `mpi_prv_events.c`,
`mpi_prv_semantics.c`): the type of a call is its group (point-to-point 50000001,
collective 50000002, other 50000003, one-sided 50000004, I/O 50000005), its value is the
function's number in Extrae's value table, and a thread inside a call is in the state Extrae
gives that function. The table below is written out as data; the name rules for functions
Extrae does not list are ours. Extrae labels value 69 "MPI_Win_complete" and 70
"MPI_Win_start" (swapped); the labels here follow the functions.
"""

from __future__ import annotations

from .core import STATE_IO, STATE_MEMORY_TRANSFER, STATE_OTHERS, ValueFamily, event_type

KINDS = ("mpi",)

# -- call types (Extrae) ---------------------------------------------------------------------
MPI_POINT_TO_POINT = 50_000_001
MPI_COLLECTIVE = 50_000_002
MPI_OTHER = 50_000_003
MPI_ONE_SIDED = 50_000_004
MPI_IO = 50_000_005
# -- collective payload (Extrae: MPI_GLOBAL_OP_*, written when the collective starts) ---------
MPI_COLL_SEND_SIZE = 50_100_001
MPI_COLL_RECV_SIZE = 50_100_002
MPI_COLL_IS_ROOT = 50_100_003  # 1 on the root of a rooted collective
MPI_COLL_COMMUNICATOR = 50_100_004
# -- nsys payloads Extrae has no type for (private range) ----------------------------------
MPI_P2P_SIZE = 67_700_001
MPI_P2P_TAG = 67_700_002
MPI_P2P_PARTNER = 67_700_003
MPI_P2P_COMMUNICATOR = 67_700_004
MPI_COLL_ROOT_RANK = 67_700_005

CALL_TYPES = (MPI_POINT_TO_POINT, MPI_COLLECTIVE, MPI_OTHER, MPI_ONE_SIDED, MPI_IO)

# MPI states (Extrae's numbers; see core.STATES for labels)
STATE_WAITING_MESSAGE = 3
STATE_BLOCKING_SEND = 4
STATE_TEST_PROBE = 6
STATE_WAIT_ALL = 8
STATE_IMMEDIATE_SEND = 10
STATE_IMMEDIATE_RECEIVE = 11
STATE_GROUP_COMMUNICATION = 13
STATE_SEND_RECEIVE = 16

# Extrae's value table: value = position (0 is "end").
_EXTRAE_ORDER = """
Send Recv Isend Irecv Wait Waitall Bcast Barrier Reduce Allreduce Alltoall Alltoallv Gather
Gatherv Scatter Scatterv Allgather Allgatherv Comm_rank Comm_size Comm_create Comm_dup
Comm_split Comm_group Comm_free Comm_remote_group Comm_remote_size Comm_test_inter
Comm_compare Scan Init Finalize Bsend Ssend Rsend Ibsend Issend Irsend Test Cancel Sendrecv
Sendrecv_replace Cart_create Cart_shift Cart_coords Cart_get Cart_map Cart_rank Cart_sub
Cartdim_get Dims_create Graph_get Graph_map Graph_create Graph_neighbors Graphdims_get
Graph_neighbors_count Topo_test Waitany Waitsome Probe Iprobe Win_create Win_free Put Get
Accumulate Win_fence Win_start Win_complete Win_post Win_wait Win_test Win_lock Win_unlock
Pack Unpack Op_create Op_free Reduce_scatter Attr_delete Attr_get Attr_put Group_difference
Group_excl Group_free Group_incl Group_intersection Group_rank Group_range_excl
Group_range_incl Group_size Group_translate_ranks Group_union Group_compare Intercomm_create
Intercomm_merge Keyval_free Keyval_create Abort Error_class Errhandler_create Errhandler_free
Errhandler_get Error_string Errhandler_set Get_processor_name Initialized Wtick Wtime Address
Bsend_init Buffer_attach Buffer_detach Request_free Recv_init Send_init Get_count
Get_elements Pack_size Rsend_init Ssend_init Start Startall Testall Testany Test_cancelled
Testsome Type_commit Type_contiguous Type_extent Type_free Type_hindexed Type_hvector
Type_indexed Type_lb Type_size Type_struct Type_ub Type_vector File_open File_close File_read
File_read_all File_write File_write_all File_read_at File_read_at_all File_write_at
File_write_at_all Comm_spawn Comm_spawn_multiple Request_get_status Ireduce Iallreduce
Ibarrier Ibcast Ialltoall Ialltoallv Iallgather Iallgatherv Igather Igatherv Iscatter
Iscatterv Ireduce_scatter Iscan Reduce_scatter_block Ireduce_scatter_block Alltoallw
Ialltoallw Get_accumulate Dist_graph_create Neighbor_allgather Ineighbor_allgather
Neighbor_allgatherv Ineighbor_allgatherv Neighbor_alltoall Ineighbor_alltoall
Neighbor_alltoallv Ineighbor_alltoallv Neighbor_alltoallw Ineighbor_alltoallw Fetch_and_op
Compare_and_swap Win_flush Win_flush_all Win_flush_local Win_flush_local_all Mprobe Improbe
Mrecv Imrecv Comm_split_type File_write_all_begin File_write_all_end File_read_all_begin
File_read_all_end File_write_at_all_begin File_write_at_all_end File_read_at_all_begin
File_read_at_all_end File_read_ordered File_read_ordered_begin File_read_ordered_end
File_read_shared File_write_ordered File_write_ordered_begin File_write_ordered_end
File_write_shared Comm_dup_with_info Dist_graph_create_adjacent Comm_create_group Exscan
Iexscan
""".split()

EXTRAE_MPI_VALUES: dict[str, int] = {f"MPI_{n}": i for i, n in enumerate(_EXTRAE_ORDER, 1)}
# Extrae records MPI_Init_thread as MPI_Init.
EXTRAE_MPI_VALUES["MPI_Init_thread"] = EXTRAE_MPI_VALUES["MPI_Init"]
FIRST_FREE_MPI_VALUE = 1000  # functions Extrae does not number

_CANONICAL = {n.lower(): n for n in EXTRAE_MPI_VALUES}

# -- groups of functions (Extrae's) ---------------------------------------------------------
_P2P = {f"MPI_{n}" for n in """Send Recv Isend Irecv Wait Waitall Waitany Waitsome Bsend Ssend
Rsend Ibsend Issend Irsend Sendrecv Sendrecv_replace Cancel Probe Iprobe Mprobe Improbe Mrecv
Imrecv Bsend_init Recv_init Send_init Rsend_init Ssend_init""".split()}
_COLLECTIVE_BASES = {n.lower() for n in """Barrier Bcast Reduce Allreduce Alltoall Alltoallv
Alltoallw Gather Gatherv Scatter Scatterv Allgather Allgatherv Reduce_scatter
Reduce_scatter_block Scan Exscan Neighbor_allgather Neighbor_allgatherv Neighbor_alltoall
Neighbor_alltoallv Neighbor_alltoallw""".split()}
_RMA_DATA = {f"MPI_{n}" for n in """Put Get Accumulate Get_accumulate Fetch_and_op
Compare_and_swap Rput Rget Raccumulate Rget_accumulate Win_fence""".split()}
_STATE_BY_NAME = {
    **{f"MPI_{n}": STATE_BLOCKING_SEND for n in ("Send", "Bsend", "Ssend", "Rsend")},
    **{f"MPI_{n}": STATE_IMMEDIATE_SEND for n in ("Isend", "Ibsend", "Issend", "Irsend")},
    **{f"MPI_{n}": STATE_WAITING_MESSAGE for n in ("Recv", "Mrecv")},
    **{f"MPI_{n}": STATE_IMMEDIATE_RECEIVE for n in ("Irecv", "Imrecv")},
    **{f"MPI_{n}": STATE_TEST_PROBE for n in ("Probe", "Iprobe", "Mprobe", "Improbe")},
    **{f"MPI_{n}": STATE_WAIT_ALL for n in ("Wait", "Waitall", "Waitany", "Waitsome", "Test",
                                            "Testall", "Testany", "Testsome", "Win_wait")},
    **{f"MPI_{n}": STATE_SEND_RECEIVE for n in ("Sendrecv", "Sendrecv_replace")},
}

# Roles in point-to-point messages (used to draw them).
SEND_CALLS = frozenset(f"MPI_{n}" for n in ("Send", "Bsend", "Ssend", "Rsend", "Isend",
                                            "Ibsend", "Issend", "Irsend"))
RECV_CALLS = frozenset(f"MPI_{n}" for n in ("Recv", "Irecv", "Mrecv", "Imrecv"))
IMMEDIATE_CALLS = frozenset(f"MPI_{n}" for n in ("Isend", "Ibsend", "Issend", "Irsend",
                                                 "Irecv", "Imrecv"))
INIT_CALLS = ("MPI_Init", "MPI_Init_thread")


def canonical_name(name: str) -> str:
    """Extrae's spelling of an MPI function name (PMPI_ and Fortran forms folded)."""
    n = name.strip()
    if n.upper().startswith("PMPI_"):
        n = n[1:]
    if n.endswith("_") and not n.endswith("__"):
        n = n[:-1]
    return _CANONICAL.get(n.lower(), n)


def _collective_base(name: str) -> str | None:
    base = name[4:].lower() if name.lower().startswith("mpi_") else name.lower()
    for suffix in ("_init", "_c"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    if base in _COLLECTIVE_BASES:
        return base
    if base.startswith("i") and base[1:] in _COLLECTIVE_BASES:
        return base[1:]
    return None


def call_type(name: str) -> int:
    """Extrae's type of an MPI function (canonical name); unknown names by their prefix."""
    if name in _P2P:
        return MPI_POINT_TO_POINT
    low = name.lower()
    if low.startswith("mpi_file_"):
        return MPI_IO
    if name in _RMA_DATA or low.startswith("mpi_win_"):
        return MPI_ONE_SIDED
    if _collective_base(name) is not None:
        return MPI_COLLECTIVE
    return MPI_OTHER


def call_state(name: str) -> int:
    """Extrae's state of a thread inside an MPI function (canonical name)."""
    state = _STATE_BY_NAME.get(name)
    if state is not None:
        return state
    low = name.lower()
    if low.startswith("mpi_file_") and low not in ("mpi_file_open", "mpi_file_close"):
        return STATE_IO
    if name in _RMA_DATA:
        return STATE_MEMORY_TRANSFER
    if _collective_base(name) is not None:
        return STATE_GROUP_COMMUNICATION
    return STATE_OTHERS


EVENT_TYPES = (
    event_type(MPI_POINT_TO_POINT, "MPI Point-to-point", "MPI",
               "Point-to-point MPI call (send, receive, wait, probe, ...) on the calling "
               "thread; value = function in Extrae's numbering; 0 = end.", values="mpi_calls",
               extrae=True, kinds=KINDS),
    event_type(MPI_COLLECTIVE, "MPI Collective Comm", "MPI",
               "Collective MPI call on the calling thread (value = function; 0 = end).",
               values="mpi_calls", extrae=True, kinds=KINDS),
    event_type(MPI_OTHER, "MPI Other", "MPI",
               "Other MPI call (init/finalize, communicators, groups, types, tests, ...; "
               "value = function; 0 = end).", values="mpi_calls", extrae=True, kinds=KINDS),
    event_type(MPI_ONE_SIDED, "MPI One-sided", "MPI",
               "One-sided (RMA, MPI_Win_*) MPI call (value = function; 0 = end).",
               values="mpi_calls", extrae=True, kinds=KINDS),
    event_type(MPI_IO, "MPI I/O", "MPI", "MPI-IO call (value = function; 0 = end).",
               values="mpi_calls", extrae=True, kinds=KINDS),
    event_type(MPI_COLL_SEND_SIZE, "Send Size in MPI Global OP", "MPI",
               "Bytes the collective starting sends (nsys `size`).", extrae=True, kinds=KINDS),
    event_type(MPI_COLL_RECV_SIZE, "Recv Size in MPI Global OP", "MPI",
               "Bytes the collective starting receives (nsys `recvSize`).", extrae=True,
               kinds=KINDS),
    event_type(MPI_COLL_IS_ROOT, "Root in MPI Global OP", "MPI",
               "1 when this rank is the root of the rooted collective starting.", extrae=True,
               kinds=KINDS),
    event_type(MPI_COLL_COMMUNICATOR, "Communicator in MPI Global OP", "MPI",
               "Communicator of the collective starting (value = communicator, numbered per "
               "trace; the same communicator has the same value on every rank).",
               values="mpi_communicators", extrae=True, kinds=KINDS),
    event_type(MPI_P2P_SIZE, "MPI message size", "MPI",
               "Bytes sent or received by the point-to-point call starting (nsys `size`).",
               kinds=KINDS),
    event_type(MPI_P2P_TAG, "MPI message tag", "MPI",
               "Tag of the point-to-point call starting. Communications between MPI ranks "
               "carry this MPI tag as their Paraver tag (and their size in bytes).",
               kinds=KINDS),
    event_type(MPI_P2P_PARTNER, "MPI partner rank", "MPI",
               "Rank in MPI_COMM_WORLD of the destination (send) or source (receive) of the "
               "point-to-point call starting.", kinds=KINDS),
    event_type(MPI_P2P_COMMUNICATOR, "MPI point-to-point communicator", "MPI",
               "Communicator of the point-to-point call starting (values as in type "
               "50100004).", values="mpi_communicators", kinds=KINDS),
    event_type(MPI_COLL_ROOT_RANK, "MPI collective root rank", "MPI",
               "Root of the rooted collective starting, as the rank in its communicator.",
               kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = (
    ValueFamily("mpi_calls", "MPI function names (Extrae's values; others from 1000)",
                first_free=FIRST_FREE_MPI_VALUE, fixed=EXTRAE_MPI_VALUES),
    ValueFamily("mpi_communicators", "MPI communicators (MPI_COMM_WORLD = 1)", first_free=2,
                fixed={"MPI_COMM_WORLD": 1}),
)
ENUMS: dict = {}
ENUM_TABLES: dict = {}
COMM_TAGS: dict = {}
