"""Turn `.nsys-rep`/`.qdrep` reports into SQLite with the user's `nsys`, cached next to the output.

`nsys` is looked up on PATH, then in `$NSYS_HOME/bin`. The export goes to
``<output dir>/.nsys2prv-cache/<report stem>-<hash>.sqlite`` and is reused while the report's
size and modification time and the nsys version match what was recorded beside it. `nsys` is
always called with an argument list (never through a shell).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import NsysError
from ..supervise import register_temp

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
CACHE_DIR_NAME = ".nsys2prv-cache"


def is_report(path: str | os.PathLike[str]) -> bool:
    return str(path).lower().endswith(REPORT_SUFFIXES)


def find_nsys() -> str | None:
    found = shutil.which("nsys")
    if found:
        return found
    home = os.environ.get("NSYS_HOME")
    if home:
        for candidate in (Path(home) / "bin" / "nsys", Path(home) / "nsys"):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def nsys_version(nsys: str) -> str:
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NsysError(f"cannot run {nsys} --version ({e})") from None
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", out.stdout + out.stderr)
    return m.group(1) if m else "unknown"


def export_report(report: str | os.PathLike[str], cache_root: str | os.PathLike[str],
                  nsys: str | None = None) -> Path:
    """Export `report` to SQLite in `cache_root`/.nsys2prv-cache (reusing an up-to-date copy)."""
    report = Path(report)
    if not report.is_file():
        raise NsysError(f"{report}: no such file")
    nsys = nsys or find_nsys()
    if nsys is None:
        raise NsysError(f"{report}: translating a report needs Nsight Systems' `nsys` on PATH "
                        "or in $NSYS_HOME/bin (or give the .sqlite made by `nsys export`)")
    version = nsys_version(nsys)
    cache = Path(cache_root) / CACHE_DIR_NAME
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NsysError(f"{cache}: cannot create the export cache ({e.strerror})") from None
    digest = hashlib.sha256(str(report.resolve()).encode()).hexdigest()[:10]
    target = cache / f"{report.stem}-{digest}.sqlite"
    stamp_file = target.with_suffix(".json")
    st = report.stat()
    stamp = {"report": str(report.resolve()), "size": st.st_size,
             "mtime_ns": st.st_mtime_ns, "nsys": version}
    if target.is_file() and stamp_file.is_file():
        try:
            if json.loads(stamp_file.read_text()) == stamp:
                return target
        except (OSError, ValueError):
            pass
    tmp = target.with_name(target.stem + ".part.sqlite")
    register_temp(tmp)
    for p in (tmp, target, stamp_file):
        p.unlink(missing_ok=True)
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
           "--output", str(tmp), str(report)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=24 * 3600)
    except OSError as e:
        raise NsysError(f"{report}: cannot run {nsys} ({e.strerror})") from None
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # leave no empty cache behind a failed export
            cache.rmdir()
        raise NsysError(_explain_failure(report, version, proc.stdout + proc.stderr))
    os.replace(tmp, target)
    stamp_file.write_text(json.dumps(stamp))
    return target


def _explain_failure(report: Path, version: str, output: str) -> str:
    text = " ".join(output.split())
    if re.search(r"Version number is invalid|newer than|ProtobufParse|unsupported version",
                 text, re.I):
        return (f"{report}: this report was recorded by a newer Nsight Systems than the "
                f"installed nsys {version}; export it with that version (nsys export --type "
                "sqlite) and translate the .sqlite")
    last = text[-300:] if text else "no output"
    return f"{report}: nsys {version} could not export it: {last}"
