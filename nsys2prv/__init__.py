"""nsys2prv: NVIDIA Nsight Systems exports -> Paraver traces.

Library use::

    import nsys2prv
    nsys2prv.translate(["rank0.sqlite", "rank1.sqlite"], "job.prv")
    report = nsys2prv.open_report("rank0.sqlite")
    kernels = nsys2prv.tables.kernels(report)   # polars DataFrame
"""

__version__ = "0.1.0"

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402

if "polars" not in _sys.modules:
    # polars allocates through jemalloc, which keeps freed pages for 10 s by default; with
    # chunk-sized buffers coming and going that holds hundreds of MB per process. Return
    # them within 0.2 s, from jemalloc's own background thread. Only takes effect when
    # polars is loaded after this (always so for the command line and its worker
    # processes, which inherit the variable); a value set by the user wins.
    _os.environ.setdefault("_RJEM_MALLOC_CONF",
                           "background_thread:true,dirty_decay_ms:200,muzzy_decay_ms:0")

from .errors import Nsys2PrvError  # noqa: E402
from .translate import open_report, translate  # noqa: E402
from . import tables  # noqa: E402

__all__ = ["translate", "open_report", "tables", "Nsys2PrvError", "__version__"]
