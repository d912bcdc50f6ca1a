"""nsys2prv: NVIDIA Nsight Systems exports -> Paraver traces.

Library use::

    import nsys2prv
    nsys2prv.translate(["rank0.sqlite", "rank1.sqlite"], "job.prv")
    report = nsys2prv.open_report("rank0.sqlite")
    kernels = nsys2prv.tables.kernels(report)   # polars DataFrame
"""

__version__ = "0.1.0"

import os as _os

from . import _alloc

_alloc.setup()  # before polars is imported
# numpy's OpenBLAS starts worker threads that spin after a BLAS call; nsys2prv makes none
# worth a thread, and the spinning takes a core from the engine (a user's setting wins).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .errors import Nsys2PrvError  # noqa: E402
from .translate import merge_partials, open_report, prepare_report, translate  # noqa: E402
from . import tables  # noqa: E402

__all__ = ["translate", "open_report", "prepare_report", "merge_partials", "tables",
           "Nsys2PrvError", "__version__"]
