"""Run a command in a child process, so that deaths Python cannot catch end in one line.

When memory runs out inside polars (Rust), the allocator aborts the process with "memory
allocation of N bytes failed" and, where RUST_BACKTRACE is set, a stack trace; the kernel's
OOM killer ends a process without a word. Neither reaches an `except`. The command line
therefore runs each command in a forked child whose stderr passes through the parent: the
parent relays it as it comes (progress bars included), drops the allocator's message and
what follows it, and when the child dies of a signal prints one line saying what happened
and what to do, then removes the temporary files the child had registered
(`register_temp`) and not yet cleaned up. Only the console script is supervised
(`nsys2prv.cli.main` with no arguments); library calls and in-process `main(argv)` are not.

The child ends with the parent (`lifeline.py`): when the parent is killed (`kill -9`) the
kernel sends the child SIGTERM, which stops the command as an interruption does (its workers
killed, its temporaries removed, an older trace of the output's name left as it was); the
child then removes what it had registered and the ledger itself, the parent's part. SIGHUP
(the terminal closed) reaches the parent's command as SIGTERM and SIGINT do: it stops and
cleans up.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .lifeline import die_with_parent

LEDGER_ENV = "NSYS2PRV_LEDGER"
TTY_ENV = "NSYS2PRV_STDERR_TTY"
# what Rust prints when an allocation fails or a thread panics (e.g. cannot be started for
# lack of memory), then the lines that follow it, up to a line of ours or a Python traceback
_RUST = (b"memory allocation of ", b"thread '")
_RESUME = (b"nsys2prv: ", b"Traceback ")


def stderr_is_terminal() -> bool:
    """Whether the user's stderr is a terminal (in a supervised child, the parent's)."""
    flag = os.environ.get(TTY_ENV)
    if flag is not None:
        return flag == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def register_temp(path: str | os.PathLike[str]) -> None:
    """Note a temporary file or directory, so that the supervisor removes it if this
    process dies before removing it itself (no-op when not supervised)."""
    ledger = os.environ.get(LEDGER_ENV)
    if not ledger:
        return
    try:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(os.fspath(os.path.abspath(path)) + "\n")
    except OSError:
        pass


def _remove_registered(ledger: Path) -> None:
    try:
        paths = ledger.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for p in reversed(paths):
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def _partial_tail(data: bytes, markers: tuple[bytes, ...]) -> int:
    """Length of the longest end of `data` that is the beginning of a marker (it may
    become one when the next bytes come)."""
    for n in range(min(len(data), max(map(len, markers)) - 1), 0, -1):
        if any(m.startswith(data[-n:]) for m in markers):
            return n
    return 0


class _Relay:
    """Copies the child's stderr to ours as it comes, except Rust's messages (a failed
    allocation, a panicking thread; they may start in the middle of a progress bar's line)
    and the lines after them up to the next line of ours ('nsys2prv: ...'; a worker process
    may abort while the command goes on to report it) or a Python traceback. Lines are split
    at newlines and carriage returns (progress bars redraw with '\\r'); bytes that may still
    become a marker are held back until the next bytes tell."""

    def __init__(self, out) -> None:
        self.out = out
        self.held = b""
        self.dropping = False

    def _write(self, data: bytes) -> None:
        if data and self.out is not None:
            try:
                self.out.write(data)
                self.out.flush()
            except (OSError, ValueError):  # the terminal is gone (SIGHUP): drop the rest
                self.out = None

    def feed(self, data: bytes) -> None:
        data = self.held + data
        self.held = b""
        while data:
            if not self.dropping:
                hits = [i for i in (data.find(m) for m in _RUST) if i >= 0]
                if not hits:
                    keep = _partial_tail(data, _RUST)
                    self._write(data[:len(data) - keep])
                    self.held = data[len(data) - keep:]
                    return
                self._write(data[:min(hits)])
                data = data[min(hits):]
                self.dropping = True
            # dropping: skip to the next line that starts with one of ours
            cut = min((i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0), default=-1)
            if cut < 0:
                return
            data = data[cut + 1:]
            if any(data.startswith(m) for m in _RESUME):
                self.dropping = False
            elif any(m.startswith(data) for m in _RESUME):
                self.held = b"\n" + data  # too short to tell yet: decide on the next bytes
                return

    def close(self) -> None:
        if not self.dropping:
            self._write(self.held)
        self.held = b""


def _describe_death(sig: int, what: str, advice: str) -> str:
    if sig in (signal.SIGABRT, signal.SIGKILL):
        cause = ("out of memory" if sig == signal.SIGABRT
                 else "killed (SIGKILL: out of memory, or by a job limit)")
        return f"{cause} while {what}; partial outputs removed ({advice})"
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return (f"crashed with {name} while {what}; partial outputs removed (run again with "
            "--debug and report it)")


def _interrupt_once(signum, frame):
    """SIGINT, SIGTERM or SIGHUP in the child: KeyboardInterrupt once, later ones of that
    signal ignored (the cleanup runs; the command may install its own handlers)."""
    signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt


# what the parent passes on to the child: the child stops and cleans up itself
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _orphaned_cleanup(parent: int, ledger: Path) -> None:
    """In the child, once the command is over: if the parent died (killed), do its part,
    removing what is registered and the ledger."""
    if os.getppid() == parent:
        return
    _remove_registered(ledger)
    try:
        ledger.unlink()
    except OSError:
        pass


def run_supervised(command: Callable[[], int], what: str, advice: str) -> int:
    """Run `command()` in a forked child and return its exit code; if the child dies of a
    signal, print one line (`what` it was doing, `advice`) and return 1."""
    fd, ledger_name = tempfile.mkstemp(prefix="nsys2prv-ledger-", suffix=".txt")
    os.close(fd)
    ledger = Path(ledger_name)
    read_end, write_end = os.pipe()
    tty = stderr_is_terminal()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: run the command with stderr into the pipe
        os.close(read_end)
        os.dup2(write_end, 2)
        os.close(write_end)
        os.environ[LEDGER_ENV] = ledger_name
        os.environ[TTY_ENV] = "1" if tty else "0"
        os.environ["RUST_BACKTRACE"] = "0"
        for s in FORWARDED:
            if signal.getsignal(s) is not signal.SIG_IGN:  # `nohup` keeps SIGHUP ignored
                signal.signal(s, _interrupt_once)
        code = 1
        try:
            die_with_parent(signal.SIGTERM, parent)  # a killed parent stops the command
            code = command()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - report like an uncaught exception would
            import traceback

            try:
                traceback.print_exc()
            except OSError:  # no parent to read it
                pass
        finally:
            try:
                for s in FORWARDED:  # the command is over: nothing left to interrupt
                    signal.signal(s, signal.SIG_IGN)
                _orphaned_cleanup(parent, ledger)
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code if isinstance(code, int) else 1)
    os.close(write_end)
    previous = {s: signal.getsignal(s) for s in FORWARDED}
    # signals for us are for the command: the child cleans up and says so itself (Ctrl-C
    # and a closed terminal's SIGHUP reach it twice, from the terminal and from here: it acts
    # on the first)
    for s, h in previous.items():
        if h is not signal.SIG_IGN:
            signal.signal(s, lambda sig, frame: os.kill(pid, sig))
    relay = _Relay(sys.stderr.buffer if hasattr(sys.stderr, "buffer") else sys.stderr)
    try:
        while True:
            try:
                data = os.read(read_end, 65536)
            except InterruptedError:
                continue
            if not data:
                break
            relay.feed(data)
        relay.close()
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
    finally:
        os.close(read_end)
        for s, h in previous.items():
            signal.signal(s, h)
    try:
        if os.WIFSIGNALED(status):
            _remove_registered(ledger)
            print(f"nsys2prv: error: {_describe_death(os.WTERMSIG(status), what, advice)}",
                  file=sys.stderr)
            return 1
        return os.WEXITSTATUS(status)
    finally:
        try:
            ledger.unlink()
        except OSError:
            pass
