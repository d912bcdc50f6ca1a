"""The command line: `nsys2prv INPUT... OUTPUT.prv` and its subcommands (`check`,
`analyze`, `diff`, `prepare`, `merge`, `paraver-setup`), one module each in this package, sharing
`common.py`.

Errors are one line on stderr and an exit code (1 bad input/environment, 2 usage, 130
interrupted); `--debug` shows the traceback instead.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import NoReturn
from concurrent.futures import BrokenExecutor  # a process pool whose worker died

from ..errors import Interrupted, Nsys2PrvError
from .common import describe_os_error, show_warning

SUBCOMMANDS = ("translate", "check", "analyze", "diff", "prepare", "merge", "paraver-setup")


def _on_signal(signum, frame):
    signal.signal(signum, signal.SIG_IGN)  # once: a second SIGTERM must not stop the cleanup
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    raise Interrupted(f"interrupted by {name}; partial outputs removed")


# what a command does and what to try when it runs out of memory (see supervise.py)
_DOING = {"translate": ("translating", "try a smaller --memory, or -j 1"),
          "analyze": ("analysing", "translate first with a smaller --memory, then analyze "
                                   "the trace"),
          "diff": ("comparing", "translate each side first with a smaller --memory, then "
                                "compare the traces"),
          "prepare": ("preparing", "try a smaller --memory"),
          "merge": ("merging", "try a smaller --memory"),
          "check": ("checking the trace", "free memory, or check on a larger machine")}


# what every command of _DOING imports (numpy.ma: polars imports it to make its first Series
# from a numpy array), imported at its start with the cyclic garbage collector off
HEAVY_IMPORTS = ("numpy", "numpy.ma", "polars")


def main(argv: list[str] | None = None) -> int:
    """The command line. Run as the console script (no `argv`), each command runs in a
    supervised child process (`supervise.py`): a death by out-of-memory ends in one line and
    leaves no partial output; the supervising process then ends with the command's exit
    code (`_exit_now`). `--debug` or NSYS2PRV_NO_SUPERVISOR=1 run it in-process."""
    args = list(sys.argv[1:] if argv is None else argv)
    cmd = args[0] if args and args[0] in SUBCOMMANDS else "translate"
    if argv is None and cmd == "analyze":
        from .. import _alloc

        _alloc.for_analysis()  # before polars is imported, in this process or the child
    if argv is None and cmd in _DOING:
        if "--debug" not in args and not os.environ.get("NSYS2PRV_NO_SUPERVISOR"):
            from ..supervise import run_supervised

            _exit_now(run_supervised(lambda: _main(args, _import_heavy), *_DOING[cmd]))
        return _main(args, _import_heavy)
    return _main(args)


def _exit_now(code: int) -> NoReturn:
    """End the supervising parent without the interpreter's teardown: it has nothing to
    clean up (its one temporary, the ledger, is removed; it starts no thread and leaves no
    atexit work), and tearing down the modules it imported was ~10 ms of a small run
    (benchmarks/RESULTS.md, round 10)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader is gone: nothing more to tell it
            pass
    os._exit(code)


def _import_heavy() -> None:
    """Import HEAVY_IMPORTS with the cyclic garbage collector off, then freeze what exists
    (`gc.freeze`: later collections skip it) and turn the collector back on. Importing
    them makes some 40,000 objects that live as long as the process, and their allocations
    ran the collector over them about a hundred times: ~6 % of the start-up
    (benchmarks/RESULTS.md, round 10). Only for the console script, whose process is the
    command's: a library caller's collector is left as it is."""
    gc.disable()
    try:
        for name in HEAVY_IMPORTS:
            importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()


def _main(argv: list[str], start: Callable[[], None] | None = None) -> int:
    debug = "--debug" in argv
    signal.signal(signal.SIGTERM, _on_signal)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # not under `nohup`
        signal.signal(signal.SIGHUP, _on_signal)  # the terminal closed: stop, clean up
    warnings.simplefilter("default")
    warnings.showwarning = show_warning
    try:
        if start is not None:  # in the try: an interruption here ends as any other does
            start()
        if argv and argv[0] in SUBCOMMANDS:
            cmd, rest = argv[0], argv[1:]
        else:
            cmd, rest = "translate", argv
        if cmd == "check":
            from .translate import run_check
            return run_check(rest)
        if cmd == "analyze":
            from .analyze import main as analyze_main
            return analyze_main(rest)
        if cmd == "diff":
            from .diff import main as diff_main
            return diff_main(rest)
        if cmd == "paraver-setup":
            from .setup import main as setup_main
            return setup_main(rest)
        if cmd in ("prepare", "merge"):
            from .stages import main as stage_main
            return stage_main(cmd, rest)
        from .translate import run_translate
        return run_translate(rest)
    except KeyboardInterrupt:
        if debug:
            raise
        print("nsys2prv: error: interrupted; partial outputs removed", file=sys.stderr)
        return Interrupted.exit_code
    except Nsys2PrvError as e:
        if debug:
            raise
        print(f"nsys2prv: error: {e}", file=sys.stderr)
        return e.exit_code
    except (MemoryError, BrokenExecutor) as e:
        if debug:
            raise
        what = "out of memory" if isinstance(e, MemoryError) else \
            "a worker process died (out of memory?)"
        print(f"nsys2prv: error: {what}; partial outputs removed (try a smaller --memory "
              "or -j 1)", file=sys.stderr)
        return 1
    except RuntimeError as e:
        if debug or "can't start new thread" not in str(e):
            raise
        # the process's address space (ulimit -v) or thread limit (ulimit -u) is spent
        print("nsys2prv: error: could not start a thread (the process is out of address "
              "space or threads: ulimit -v / -u); partial outputs removed", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `nsys2prv analyze ... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when stdout is flushed at exit
        return 1
    except OSError as e:  # disk full, file size limit, permissions on temporary files, ...
        if debug:
            raise
        print(f"nsys2prv: error: {describe_os_error(e)}", file=sys.stderr)
        return 1
