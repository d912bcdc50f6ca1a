"""Copy an Nsight Systems export without the recording machine's environment.

    python tools/scrub.py in.sqlite out.sqlite [--drop TABLE[.NAME] ...]

Exports carry the whole environment of the profiled process (TARGET_INFO_SYSTEM_ENV row
`DeviceEnvironment`, META_DATA_CAPTURE rows `PROCESS_n:ENVIRONMENT_VARIABLE`), which under an
MPI launcher includes session directories, job ids, the launcher's URIs (IP addresses, ports)
and per-job keys; StringIds also holds the environments of other processes nsys saw. Test
fixtures need only the MPI rank and world size from them, so every other variable is removed
(also from any text value that starts like an environment block, `NAME=...`) and IP addresses
left in a kept value are masked. `--drop` removes what a fixture does not need, to keep it
small: tables (shell patterns, e.g. OSRT_CALLCHAINS, 'ENUM_D3D12*') or, as TABLE.NAME, the
rows of a name/value table with that name (e.g. TARGET_INFO_SYSTEM_ENV.GpuMetricsConfig).
The copy is VACUUMed, so removed text is not left in free pages.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import shutil
import sqlite3
import sys
from pathlib import Path

from nsys2prv.report.report import RANK_VARIABLES, SIZE_VARIABLES

KEEP_VARIABLES = frozenset(RANK_VARIABLES + SIZE_VARIABLES)
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")
_IPV6 = re.compile(r"\b(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{0,4}\b")
_SEPARATORS = ("\x00", ";", "\n")
# A value that starts like an environment block ("NAME=value", NAME starting upper-case):
# nsys also stores the environments of other processes it saw as StringIds entries.
_ENV_BLOCK = re.compile(r"^[A-Z_][A-Za-z0-9_]*=")


def mask_addresses(text: str) -> str:
    return _IPV6.sub("::", _IPV4.sub("0.0.0.0", text))


def scrub_environment_text(text: str) -> str:
    """Only the rank/size variables of a joined environment (NUL-, ';'- or newline-joined,
    as nsys versions differ); fragments of values that contain the separator are dropped
    with their variable."""
    sep = next((s for s in _SEPARATORS if s in text), ";")
    kept = []
    for item in text.split(sep):
        name = item.split("=", 1)[0].strip()
        if "=" in item and name in KEEP_VARIABLES:
            kept.append(mask_addresses(item))
    return sep.join(kept)


def _variable_name(value: str | None) -> str:
    return (value or "").split("=", 1)[0].strip()


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _scrub_text_columns(con: sqlite3.Connection, table: str) -> None:
    """Environment blocks stored as plain text anywhere else (StringIds, ...)."""
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')
            if (r[2] or "").upper() == "TEXT"]
    for col in cols:
        rows = con.execute(f'SELECT rowid, "{col}" FROM "{table}" WHERE "{col}" GLOB '
                           "'[A-Z_]*=*'").fetchall()
        for rowid, value in rows:
            if isinstance(value, str) and _ENV_BLOCK.match(value):
                con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE rowid = ?',
                            (scrub_environment_text(value), rowid))


def scrub(src: str | Path, dst: str | Path, drop: tuple[str, ...] = ()) -> Path:
    """Write the scrubbed copy of `src` to `dst` (overwritten) and return its path."""
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise ValueError("scrub writes a copy: give another output path")
    dst.unlink(missing_ok=True)
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        tables = _tables(con)
        if "TARGET_INFO_SYSTEM_ENV" in tables:
            rows = con.execute("SELECT rowid, value FROM TARGET_INFO_SYSTEM_ENV "
                               "WHERE name = 'DeviceEnvironment'").fetchall()
            for rowid, value in rows:
                con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE rowid = ?",
                            (scrub_environment_text(str(value or "")), rowid))
        if "META_DATA_CAPTURE" in tables:
            rows = con.execute("SELECT rowid, value FROM META_DATA_CAPTURE "
                               "WHERE name LIKE '%ENVIRONMENT_VARIABLE%'").fetchall()
            for rowid, value in rows:
                if _variable_name(value) in KEEP_VARIABLES:
                    con.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE rowid = ?",
                                (mask_addresses(str(value)), rowid))
                else:
                    con.execute("DELETE FROM META_DATA_CAPTURE WHERE rowid = ?", (rowid,))
        for table in sorted(_tables(con) - {"TARGET_INFO_SYSTEM_ENV", "META_DATA_CAPTURE"}):
            _scrub_text_columns(con, table)
        for item in drop:
            table, _, row = item.partition(".")
            for name in sorted(t for t in _tables(con) if fnmatch.fnmatchcase(t, table)):
                if row:
                    con.execute(f'DELETE FROM "{name}" WHERE name = ?', (row,))
                else:
                    con.execute(f'DROP TABLE "{name}"')
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/scrub.py", description=__doc__
                                 .split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--drop", action="append", default=[], metavar="TABLE[.NAME]",
                    help="also drop these tables (shell pattern), or the rows named NAME of "
                         "a name/value table (repeatable)")
    args = ap.parse_args(argv)
    scrub(args.input, args.output, tuple(args.drop))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
