"""OpenACC (CUPTI OpenACC activity records): regions on the CPU thread that ran them.

Extrae's three OpenACC types are reused with Extrae's values (extrae src/common/events.h,
OPENACC_EV family): 66000000 "OpenACC" for device init/shutdown, enter/exit data, update,
compute construct and wait; 66000001 "OpenACC Data" for enqueue upload/download, create,
delete, alloc and free; 66000002 "OpenACC Launch" for enqueue launch. CUPTI kinds Extrae
has no value for (runtime shutdown, implicit wait) get private values from 100 in 66000000.

Every CUPTI record is a region (value at start, 0 at end), also the instantaneous ones
(create/delete/alloc/free have start == end: a zero-length region), where Extrae writes
those four as bare events. Regions of one type nest (a compute construct holds its waits):
view them with 'Stacked Val'. Source location, function, variable, kernel name, bytes and
launch geometry are nsys2prv types in 67900000-67900999.
"""

from __future__ import annotations

from .core import ValueFamily, event_type

KINDS = ("openacc",)

# Extrae's types -----------------------------------------------------------------------------
OPENACC = 66_000_000
OPENACC_DATA = 66_000_001
OPENACC_LAUNCH = 66_000_002

# Extrae's values (enum after OPENACC_END_VAL = 0)
ACC_ENQUEUE_UPLOAD = 1
ACC_ENQUEUE_DOWNLOAD = 2
ACC_CREATE = 3
ACC_DELETE = 4
ACC_ALLOC = 5
ACC_FREE = 6
ACC_ENQUEUE_LAUNCH = 7
ACC_DEVICE_INIT = 8
ACC_DEVICE_SHUTDOWN = 9
ACC_ENTER_DATA = 10
ACC_EXIT_DATA = 11
ACC_UPDATE = 12
ACC_COMPUTE_CONSTRUCT = 13
ACC_WAIT = 14
# nsys2prv values for CUPTI kinds Extrae does not trace
ACC_IMPLICIT_WAIT = 100
ACC_RUNTIME_SHUTDOWN = 101

# nsys2prv types -------------------------------------------------------------------------------
OPENACC_SOURCE_FILE = 67_900_001
OPENACC_LINE = 67_900_002
OPENACC_FUNCTION = 67_900_003
OPENACC_BYTES = 67_900_004
OPENACC_VARIABLE = 67_900_005
OPENACC_KERNEL = 67_900_006
OPENACC_GANGS = 67_900_007
OPENACC_WORKERS = 67_900_008
OPENACC_VECTOR_LENGTH = 67_900_009
OPENACC_DEVICE_TYPE = 67_900_010
OPENACC_STREAM = 67_900_011

# CUPTI_OPENACC_EVENT_KIND_<name> (ENUM_OPENACC_EVENT_KIND.name without the prefix)
# -> (Paraver type, value).
CUPTI_KINDS: dict[str, tuple[int, int]] = {
    "DEVICE_INIT": (OPENACC, ACC_DEVICE_INIT),
    "DEVICE_SHUTDOWN": (OPENACC, ACC_DEVICE_SHUTDOWN),
    "RUNTIME_SHUTDOWN": (OPENACC, ACC_RUNTIME_SHUTDOWN),
    "ENQUEUE_LAUNCH": (OPENACC_LAUNCH, ACC_ENQUEUE_LAUNCH),
    "ENQUEUE_UPLOAD": (OPENACC_DATA, ACC_ENQUEUE_UPLOAD),
    "ENQUEUE_DOWNLOAD": (OPENACC_DATA, ACC_ENQUEUE_DOWNLOAD),
    "WAIT": (OPENACC, ACC_WAIT),
    "IMPLICIT_WAIT": (OPENACC, ACC_IMPLICIT_WAIT),
    "COMPUTE_CONSTRUCT": (OPENACC, ACC_COMPUTE_CONSTRUCT),
    "UPDATE": (OPENACC, ACC_UPDATE),
    "ENTER_DATA": (OPENACC, ACC_ENTER_DATA),
    "EXIT_DATA": (OPENACC, ACC_EXIT_DATA),
    "CREATE": (OPENACC_DATA, ACC_CREATE),
    "DELETE": (OPENACC_DATA, ACC_DELETE),
    "ALLOC": (OPENACC_DATA, ACC_ALLOC),
    "FREE": (OPENACC_DATA, ACC_FREE),
}
# CUPTI's CUpti_OpenAccEventKind numbering, for exports without ENUM_OPENACC_EVENT_KIND.
CUPTI_KIND_IDS = {
    "DEVICE_INIT": 1, "DEVICE_SHUTDOWN": 2, "RUNTIME_SHUTDOWN": 3, "ENQUEUE_LAUNCH": 4,
    "ENQUEUE_UPLOAD": 5, "ENQUEUE_DOWNLOAD": 6, "WAIT": 7, "IMPLICIT_WAIT": 8,
    "COMPUTE_CONSTRUCT": 9, "UPDATE": 10, "ENTER_DATA": 11, "EXIT_DATA": 12, "CREATE": 13,
    "DELETE": 14, "ALLOC": 15, "FREE": 16,
}
ACC_DEVICE_NVIDIA = 4  # acc_device_nvidia in ENUM_OPENACC_DEVICE (OpenACC's acc_device_t)

_G = "OpenACC"
EVENT_TYPES = (
    event_type(OPENACC, "OpenACC", _G,
               "OpenACC construct or runtime region on the CPU thread (Extrae values: 8 device "
               "init, 9 device shutdown, 10 enter data, 11 exit data, 12 update, 13 compute "
               "construct, 14 wait; nsys2prv: 100 implicit wait, 101 runtime shutdown; 0 = "
               "end). Regions nest: use Stacked Val.", values="openacc_events", extrae=True,
               kinds=KINDS),
    event_type(OPENACC_DATA, "OpenACC Data", _G,
               "OpenACC data operation (Extrae values: 1 enqueue upload, 2 enqueue download, 3 "
               "create, 4 delete, 5 alloc, 6 free; 0 = end; create/delete/alloc/free are "
               "zero-length regions).", values="openacc_events", extrae=True, kinds=KINDS),
    event_type(OPENACC_LAUNCH, "OpenACC Launch", _G,
               "OpenACC kernel launch enqueued (Extrae value 7 enqueue launch; 0 = end).",
               values="openacc_events", extrae=True, kinds=KINDS),
    event_type(OPENACC_SOURCE_FILE, "OpenACC source file", _G,
               "Source file of the directive of the OpenACC region (0 = end; nests like the "
               "regions).", values="openacc_files", kinds=KINDS),
    event_type(OPENACC_LINE, "OpenACC source line", _G,
               "Line of the directive of the OpenACC region (0 = end).", kinds=KINDS),
    event_type(OPENACC_FUNCTION, "OpenACC function", _G,
               "Function holding the OpenACC directive (0 = end).", values="openacc_functions",
               kinds=KINDS),
    event_type(OPENACC_BYTES, "OpenACC data bytes", _G,
               "Bytes of the OpenACC data operation starting (written when > 0).", kinds=KINDS),
    event_type(OPENACC_VARIABLE, "OpenACC variable", _G,
               "Variable of the OpenACC data operation (0 = end).", values="openacc_variables",
               kinds=KINDS),
    event_type(OPENACC_KERNEL, "OpenACC kernel", _G,
               "Kernel of the OpenACC launch (same values as the CUDA kernel names of "
               "63000006; 0 = end).", values="kernel_names", kinds=KINDS),
    event_type(OPENACC_GANGS, "OpenACC gangs", _G, "Gangs of the OpenACC launch starting.",
               kinds=KINDS),
    event_type(OPENACC_WORKERS, "OpenACC workers", _G,
               "Workers of the OpenACC launch starting.", kinds=KINDS),
    event_type(OPENACC_VECTOR_LENGTH, "OpenACC vector length", _G,
               "Vector length of the OpenACC launch starting.", kinds=KINDS),
    event_type(OPENACC_STREAM, "OpenACC CUDA stream", _G,
               "CUDA stream id (as in the 'GPU d ctx c stream s' row labels) a launch, upload, "
               "download or wait on an NVIDIA device targets.", kinds=KINDS),
    event_type(OPENACC_DEVICE_TYPE, "OpenACC device type", _G,
               "acc_device_t of the OpenACC region starting (value = id + 1).",
               values="openacc_device", kinds=KINDS),
)
TYPE_RANGES = ()
VALUE_FAMILIES = (
    ValueFamily("openacc_files", "source files of OpenACC directives"),
    ValueFamily("openacc_functions", "functions holding OpenACC directives"),
    ValueFamily("openacc_variables", "variables of OpenACC data operations"),
)
ENUMS: dict[str, dict[int, str]] = {
    "openacc_events": {
        ACC_ENQUEUE_UPLOAD: "acc_ev_enqueue_upload",
        ACC_ENQUEUE_DOWNLOAD: "acc_ev_enqueue_download",
        ACC_CREATE: "acc_ev_create", ACC_DELETE: "acc_ev_delete", ACC_ALLOC: "acc_ev_alloc",
        ACC_FREE: "acc_ev_free", ACC_ENQUEUE_LAUNCH: "acc_ev_enqueue_launch",
        ACC_DEVICE_INIT: "acc_ev_device_init", ACC_DEVICE_SHUTDOWN: "acc_ev_device_shutdown",
        ACC_ENTER_DATA: "acc_ev_enter_data", ACC_EXIT_DATA: "acc_ev_exit_data",
        ACC_UPDATE: "acc_ev_update", ACC_COMPUTE_CONSTRUCT: "acc_ev_compute_construct",
        ACC_WAIT: "acc_ev_wait", ACC_IMPLICIT_WAIT: "acc_ev_wait (implicit)",
        ACC_RUNTIME_SHUTDOWN: "acc_ev_runtime_shutdown",
    },
    "openacc_device": {i + 1: n for i, n in enumerate(
        ["acc_device_none", "acc_device_default", "acc_device_host", "acc_device_not_host",
         "acc_device_nvidia", "acc_device_radeon", "acc_device_xeonphi",
         "acc_device_pgi_opencl", "acc_device_nvidia_opencl", "acc_device_opencl"])},
}
ENUM_TABLES = {"openacc_device": ("ENUM_OPENACC_DEVICE", "")}
COMM_TAGS: dict = {}
