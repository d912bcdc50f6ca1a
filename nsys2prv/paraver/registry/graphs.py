"""CUDA graphs: whole-graph executions on GPU streams, graph/node ids on the GPU activities
a graph ran, and the CPU-side creation, instantiation and clone events of graphs and nodes.

With `--cuda-graph-trace=graph` nsys records one interval per graph launch
(CUPTI_ACTIVITY_KIND_GRAPH_TRACE) and no kernel of it; with `node` every kernel/copy of the
graph is recorded and carries its graph node id. Both are translated: the first as a graph
execution region on the stream row, the second as ids on the kernels and copies.
"""

from __future__ import annotations

from .core import ValueFamily, event_type

KINDS = ("graphs",)

GRAPH_EXECUTION = 67_800_000
GRAPH_ID = 67_800_001
GRAPH_EXEC_ID = 67_800_002
GRAPH_NODE_ID = 67_800_003
GRAPH_EVENT = 67_800_004
GRAPH_ORIGINAL_ID = 67_800_005
GRAPH_ORIGINAL_NODE_ID = 67_800_006
GRAPH_FUNCTION = 67_800_007

# ENUM_NSYS_EVENT_CLASS ids (as NVIDIA documents them) and names of the CPU-side graph events;
# value = id + 1. Exports that number classes differently are mapped by name.
GRAPH_EVENT_CLASSES = {
    77: "CUDA graph node creation", 94: "CUDA graph exec creation", 95: "CUDA graph creation",
    96: "CUDA graph clone",
}
GRAPH_EVENT_CLASS_NAMES = {
    "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION": 77,
    "TRACE_PROCESS_EVENT_CUDA_GRAPHEXEC_CREATION": 94,
    "TRACE_PROCESS_EVENT_CUDA_GRAPH_CREATION": 95,
    "TRACE_PROCESS_EVENT_CUDA_GRAPH_CLONE": 96,
}
OTHER_GRAPH_EVENT = 1000  # value of a class this table does not know

EVENT_TYPES = (
    event_type(GRAPH_EXECUTION, "CUDA graph execution", "CUDA graphs",
               "A whole CUDA graph running on a GPU stream row (graph-level trace; value = "
               "'graph G exec E'; 0 = end). The stream row is Running meanwhile.",
               values="cuda_graphs", kinds=KINDS),
    event_type(GRAPH_ID, "CUDA graph id", "CUDA graphs",
               "Graph id of the graph execution, of the kernel/memcpy/memset that a graph node "
               "ran (node-level trace, when the export has graphId), or of the graph a CPU "
               "event created (value at the start, 0 at the end).", kinds=KINDS),
    event_type(GRAPH_EXEC_ID, "CUDA graph exec id", "CUDA graphs",
               "Executable-graph id of a graph execution or of a graph exec creation (value at "
               "the start, 0 at the end).", kinds=KINDS),
    event_type(GRAPH_NODE_ID, "CUDA graph node id", "CUDA graphs",
               "Graph node id of a kernel/memcpy/memset run by a CUDA graph (node-level "
               "trace), or of the node a CPU event created (value at the start, 0 at the "
               "end).", kinds=KINDS),
    event_type(GRAPH_EVENT, "CUDA graph API event", "CUDA graphs",
               "CPU-side graph event on the thread that made it (CUDA_GRAPH_EVENTS, "
               "CUDA_GRAPH_NODE_EVENTS; value = event class id + 1, 1000 for a class not "
               "listed; 0 = end).", values="graph_event_class", kinds=KINDS),
    event_type(GRAPH_ORIGINAL_ID, "CUDA graph original graph id", "CUDA graphs",
               "On a graph clone: the id of the graph it was cloned from.", kinds=KINDS),
    event_type(GRAPH_ORIGINAL_NODE_ID, "CUDA graph original node id", "CUDA graphs",
               "On a node creation by cloning: the id of the node it was cloned from.",
               kinds=KINDS),
    event_type(GRAPH_FUNCTION, "CUDA graph API function", "CUDA graphs",
               "Function that made the CPU-side graph event (value = name; 0 = end).",
               values="cuda_graph_functions", kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = (
    ValueFamily("cuda_graphs", "CUDA graph executions as 'graph G exec E'"),
    ValueFamily("cuda_graph_functions", "functions that created, instantiated or cloned "
                                        "CUDA graphs and graph nodes"),
)
ENUMS: dict[str, dict[int, str]] = {
    "graph_event_class": {**{k + 1: v for k, v in GRAPH_EVENT_CLASSES.items()},
                          OTHER_GRAPH_EVENT: "Other CUDA graph event"},
}
ENUM_TABLES: dict = {}

TAG_GRAPH_LAUNCH = GRAPH_EXECUTION
COMM_TAGS = {
    TAG_GRAPH_LAUNCH: "cudaGraphLaunch -> the graph execution it started (size 0; "
                      "graph-level trace)",
}
