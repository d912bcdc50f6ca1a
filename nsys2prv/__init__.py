"""nsys2prv: NVIDIA Nsight Systems exports -> Paraver traces.

Library use::

    import nsys2prv
    run = nsys2prv.load("rank*.sqlite")       # or a trace: nsys2prv.load("job.prv")
    run.efficiency()["forms"]                 # every analysis a method (docs/library.md)
    run.layers()["layers"]
    nsys2prv.translate(["rank0.sqlite", "rank1.sqlite"], "job.prv")
    report = nsys2prv.open_report("rank0.sqlite")
    kernels = nsys2prv.tables.kernels(report)   # polars DataFrame

The entry points (`api.py`) and `tables` are imported on first use, so that `import
nsys2prv` and the command line's supervising process stay light (no polars, no numpy).
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib as _importlib
import os as _os

from . import _alloc

_alloc.setup()  # before polars is imported
# numpy's OpenBLAS starts worker threads that spin after a BLAS call; nsys2prv makes none
# worth a thread, and the spinning takes a core from the engine (a user's setting wins).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .errors import Nsys2PrvError  # noqa: E402

__all__ = ["load", "compare", "scaling", "Run", "translate", "translate_applications", "open_report",
           "prepare_report", "merge_partials", "tables", "Nsys2PrvError", "__version__"]

_FROM_API = ("translate", "translate_applications", "open_report", "prepare_report",
             "merge_partials")
_FROM_RUN = ("load", "compare", "scaling", "Run", "Tables")


def __getattr__(name: str):
    """The entry points and `tables`, imported when first asked for."""
    if name in _FROM_API:
        value = getattr(_importlib.import_module(f"{__name__}.api"), name)
    elif name in _FROM_RUN:
        value = getattr(_importlib.import_module(f"{__name__}.run"), name)
    elif name == "tables":
        value = _importlib.import_module(f"{__name__}.tables")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
