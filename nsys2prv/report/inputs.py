"""The reports of a job as a user names them: files, a directory, a glob, or `@LIST`.

A job of thousands of ranks is awkward to name path by path (and a shell may refuse that
many arguments), so every command that takes reports also takes a directory (its reports),
a glob pattern it expands itself (quoted, so that the shell does not), and `@LIST`, a text
file with one path a line (blank lines and lines starting with `#` skipped; paths relative
to the current directory, as in the list `ls` or `find` wrote). Directories and globs are
listed in natural name order (rank2 before rank10), so the order does not depend on the file
system; the trace's task order is decided later, by MPI rank where the reports have one.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import InputError, UsageError

REPORT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


def natural_key(text: str) -> list:
    """Sort key that orders the numbers inside names by value: rank2 < rank10."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", text) if part]


def reports_in(directory: Path) -> list[str]:
    """The reports of a directory (not its subdirectories); a report and its export side by
    side (`x.nsys-rep` and `x.sqlite`) are one report: the export is taken."""
    found = [f for f in directory.iterdir() if f.name.endswith(REPORT_SUFFIXES) and f.is_file()]
    exported = {f.name[: -len(".sqlite")] for f in found if f.name.endswith(".sqlite")}
    files = [str(f) for f in found if f.name.endswith(".sqlite")
             or f.name.rsplit(".", 1)[0] not in exported]
    if not files:
        raise InputError(f"{directory}: no reports ({', '.join(REPORT_SUFFIXES)}) in this "
                         "directory")
    return sorted(files, key=natural_key)


def expand_inputs(items: Sequence[str | os.PathLike[str]],
                  directory: Callable[[Path], list[str]] = reports_in) -> list[str]:
    """Every input path named by `items`, in order: an existing file as given, a directory
    through `directory` (its reports by default), a glob pattern expanded (natural order),
    `@LIST` read (its lines expanded the same way, without further lists). A path that is
    none of these is kept: the command says later that it does not exist."""
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if text.startswith("@") and not os.path.exists(text):
            out += _expand_one_list(text[1:], directory)
        else:
            out += _expand_one(text, directory)
    return out


def is_trace(path: str) -> bool:
    """A Paraver trace (.prv, .prv.gz), which is read as it is, rather than a report."""
    return path.endswith(".prv") or path.endswith(".prv.gz")


def run_inputs(items: Sequence[str | os.PathLike[str]]) -> tuple[list[str], list[str]]:
    """The files of one run (`expand_inputs`) and the traces among them: one trace, or
    reports; anything else is a usage error."""
    paths = [str(p) for p in expand_inputs(items)]
    if not paths:
        raise UsageError("no input given")
    traces = [p for p in paths if is_trace(p)]
    if traces and len(paths) > 1:
        raise UsageError("give either one trace (.prv) or reports, not both")
    return paths, traces


def _expand_one_list(name: str, directory: Callable[[Path], list[str]]) -> list[str]:
    try:
        with open(name, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh]
    except FileNotFoundError:
        raise InputError(f"@{name}: no such list file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"@{name}: cannot read the list ({e})") from None
    out: list[str] = []
    for line in lines:
        if line and not line.startswith("#"):
            out += _expand_one(line, directory)
    if not out:
        raise InputError(f"@{name}: the list names no input")
    return out


def _expand_one(text: str, directory: Callable[[Path], list[str]]) -> list[str]:
    p = Path(text)
    if p.is_dir():
        return directory(p)
    if p.exists() or not glob.has_magic(text):
        return [text]
    matches = sorted(glob.glob(text), key=natural_key)
    if not matches:
        raise InputError(f"{text}: no file matches this pattern")
    out: list[str] = []
    for m in matches:
        out += directory(Path(m)) if Path(m).is_dir() else [m]
    return out
