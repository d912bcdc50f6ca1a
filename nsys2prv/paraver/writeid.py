"""The write id that ties a trace's `.prv`, `.pcf` and `.row` to one write.

A trace is published by three renames, `.pcf`, `.row`, then `.prv` (`output.py`). A crash or
a kill between them leaves a new `.pcf` beside an old `.prv`, whose event names would then
be wrong with no error. Each file therefore names its write, by an id derived from what is
written (the `.prv`'s header line, the `.pcf` and the `.row`: same input, same bytes), in a
form that Paraver and pertalde ignore (research/PRV_FORMAT.md):

* `.prv`: its second line, a comment: `# nsys2prv write 0123456789abcdef`;
* `.pcf`: its first section, an EVENT_TYPE whose label names it (`0  67999002  nsys2prv
  write 0123456789abcdef`): pertalde's .pcf grammar has no comments, and a type no record
  uses is only a label;
* `.row`: its first line, a comment (Paraver skips `#` lines between levels).

`check_set` refuses a `.prv` that has an id when its `.pcf` or `.row` carries another one,
or none. A `.prv` without id is read as before, whatever its `.pcf` says: a trace written
before ids existed, or a `.prv` that another tool wrote beside a copy of our `.pcf` (Paraver's
cutter copies the `.pcf` and `.row` but not our comment line). The one mixed set this lets
through is an old trace (no id) whose replacement was killed between its renames. A missing
`.pcf` or `.row` is for the reader to judge, as before.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

from ..errors import InputError
from .registry.core import WRITE_ID

PRV_MARK = "# nsys2prv write "
ROW_MARK = PRV_MARK
_PCF_HEAD = "EVENT_TYPE\n0    {type}   nsys2prv write {id}\n\n\n"
_PCF_MARK = re.compile(rf"EVENT_TYPE\r?\n0\s+{WRITE_ID}\s+nsys2prv write ([0-9a-f]+)\s*\r?\n")
_ID = re.compile(r"[0-9a-f]{16}")


def write_id(header_line: str, pcf: str, row: str) -> str:
    """16 hex digits of the SHA-256 of the .prv header line, the .pcf and the .row (as they
    are without their ids)."""
    h = hashlib.sha256()
    for part in (header_line.rstrip("\n"), pcf, row):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def mark(header: str, pcf: str, row: str) -> tuple[str, str, str]:
    """(header, .pcf, .row) with the id of their write: the .prv's comment line goes right
    after the header line (`header` may hold comment lines after it)."""
    first, nl, rest = header.partition("\n")
    wid = write_id(first, pcf, row)
    return (f"{first}\n{PRV_MARK}{wid}\n{rest}", _PCF_HEAD.format(type=WRITE_ID, id=wid) + pcf,
            f"{ROW_MARK}{wid}\n{row}")


def unmark_pcf(text: str) -> str:
    """A .pcf without its write id (what a copy of the trace starts from)."""
    m = _PCF_MARK.match(text)
    return text[m.end():].lstrip("\r\n") if m else text


def unmark_row(text: str) -> str:
    """A .row without its write id."""
    return text.split("\n", 1)[1] if text.startswith(ROW_MARK) else text


def is_mark(line: str | bytes) -> bool:
    """Whether a .prv line is the write id (a copy of a trace leaves it out)."""
    return (line.startswith(PRV_MARK.encode()) if isinstance(line, bytes)
            else line.startswith(PRV_MARK))


def companion(path: Path, ext: str) -> Path:
    """The .pcf or .row (`ext`) beside a .prv or .prv.gz."""
    name = path.name
    for suffix in (".prv.gz", ".prv"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ext)
    return path.with_suffix(ext)


def _prv_id(path: Path) -> str | None:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            f.readline()
            line = f.readline(256).decode("utf-8", "replace")
    except (OSError, EOFError):
        return None
    return _parse(line[len(PRV_MARK):]) if line.startswith(PRV_MARK) else None


def _parse(text: str) -> str | None:
    m = _ID.match(text.strip())
    return m.group(0) if m else None


def _pcf_id(path: Path) -> str | None:
    with open(path, encoding="utf-8", errors="replace") as f:
        m = _PCF_MARK.match(f.read(256))
    return m.group(1) if m else None


def _row_id(path: Path) -> str | None:
    with open(path, encoding="utf-8", errors="replace") as f:
        line = f.readline(256)
    return _parse(line[len(ROW_MARK):]) if line.startswith(ROW_MARK) else None


def ids(prv: str | Path) -> dict[str, str | None]:
    """The write id each file of the trace carries ('.prv', and '.pcf'/'.row' where the
    file exists; None: no id)."""
    prv = Path(prv)
    out = {".prv": _prv_id(prv)}
    for ext, read in ((".pcf", _pcf_id), (".row", _row_id)):
        p = companion(prv, ext)
        if p.is_file():
            out[ext] = read(p)
    return out


def check_set(prv: str | Path) -> None:
    """Raise InputError (one line) when the .pcf or .row beside `prv` is from another
    write than the .prv."""
    prv = Path(prv)
    found = ids(prv)
    if found[".prv"] is None:
        return
    for ext in (".pcf", ".row"):
        if ext in found and found[ext] != found[".prv"]:
            raise InputError(
                f"{prv}: its {companion(prv, ext).name} is from another write (write "
                f"{found[ext] or 'without id'}, the .prv's {found['.prv']}): the trace is "
                "being written or its writing was cut short; write it again")
