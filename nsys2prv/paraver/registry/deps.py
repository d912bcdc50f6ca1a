"""Dependency lines: Paraver communications that say what a piece of work waited for.

Each kind of dependency has its own tag, so that a view can show or hide it; none is an event
type. A line goes from the moment the awaited work ended (or, for collectives, from the
arrival of the participant that came last) to the moment the waiting side could go on, so it
never points back in time.
"""

from __future__ import annotations

EVENT_TYPES = ()
TYPE_RANGES = ()
VALUE_FAMILIES = ()
ENUMS: dict[str, dict[int, str]] = {}
ENUM_TABLES: dict = {}

TAG_STREAM_WAIT = 67_200_010
TAG_STREAM_WAIT_INFERRED = 67_200_011
TAG_HOST_SYNC = 67_200_012
TAG_NCCL_COLLECTIVE = 67_600_010
TAG_MPI_COLLECTIVE = 67_700_010

COMM_TAGS = {
    TAG_STREAM_WAIT: "Stream wait (cudaStreamWaitEvent), event record traced (CUDA_EVENT): "
                     "end of the last GPU work submitted to the recording stream before the "
                     "latest record of the event -> start of the first work submitted to the "
                     "waiting stream after the wait (size 0; none when the event was recorded "
                     "on the waiting stream itself)",
    TAG_STREAM_WAIT_INFERRED: "The same where the export has no record of the event (nsys "
                              "without --cuda-event-trace): the record is taken to be the last "
                              "cudaEventRecord call of the waiting thread before the wait, and "
                              "the awaited work the last work that thread submitted before "
                              "that call (size 0)",
    TAG_HOST_SYNC: "GPU -> host: end of the GPU work a synchronisation call waited for (the "
                   "last work of the stream, or of any stream of the context for a "
                   "device/context sync, ending by the end of the blocking; for an event sync, "
                   "and an event query that found the event complete, the work of the "
                   "event's record as for stream waits) -> end of the blocking (the CUPTI "
                   "synchronisation record's end) on the calling thread (size 0)",
    TAG_NCCL_COLLECTIVE: "NCCL operation matched across its participants (the k-th kernel of "
                         "each process and device on one communicator; kernels whose payload "
                         "names none share one): start of the kernel of the participant that "
                         "arrived last -> end of the kernel of each other participant that was "
                         "still running (size 0: the operation's bytes are on the kernel's "
                         "events)",
    TAG_MPI_COLLECTIVE: "Blocking MPI collective matched across ranks (the k-th on one "
                        "communicator; MPI_COMM_WORLD for the NVTX form): start of the call of "
                        "the rank that arrived last -> end of the call of each other rank "
                        "still in it (size 0: the bytes are on the call's events, and "
                        "'Bytes sent' statistics stay those of the messages)",
}
