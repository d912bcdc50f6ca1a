"""Atomic writing of a `.prv(.gz)/.pcf/.row` triple.

Everything is written to hidden temporary files in the output directory and renamed into
place only when all three are complete; on any error (disk full, interruption) the
temporaries are removed and an older trace of the same name is left untouched. The three
renames are not one: the `.pcf` and `.row` go first, the `.prv` last, and all three carry
the id of their write (`writeid.py`), so that a reader never takes the `.pcf` of one write
for the `.prv` of another (a kill between two renames: the reader refuses the trace with
one line, until it is written again).
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path


from ..errors import OutputError
from ..lifeline import signals_held
from ..supervise import register_temp
from .writeid import mark


def trace_paths(output: str | os.PathLike[str], compress: bool = False) -> tuple[Path, Path, Path]:
    """(.prv or .prv.gz, .pcf, .row) for an output name given with or without suffix."""
    out = Path(output)
    name = out.name
    for suffix in (".prv.gz", ".prv"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    base = out.with_name(name)
    prv = base.with_name(name + (".prv.gz" if compress or str(output).endswith(".gz") else ".prv"))
    return prv, base.with_name(name + ".pcf"), base.with_name(name + ".row")


COPY_BYTES = 16 << 20


class TraceWriter:
    """Writes one trace: `begin` (the header, the .pcf and the .row, which give the write
    its id), the body (`write`, `write_bytes`, `copy_file`), then `commit` publishes it; as
    a context manager, an error or an interruption before `commit` leaves nothing."""

    def __init__(self, output: str | os.PathLike[str], compress: bool = False) -> None:
        self.prv, self.pcf, self.row = trace_paths(output, compress)
        self.compress = self.prv.name.endswith(".gz")
        self.directory = self.prv.parent
        self._temps: list[Path] = []
        self._fh = None
        self._side: tuple[str, str] | None = None
        self.bytes_written = 0

    def _temp(self, final: Path) -> Path:
        try:
            fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp",
                                        dir=self.directory)
        except OSError as e:
            raise OutputError(f"{self.directory}: cannot write the trace here "
                              f"({e.strerror})") from None
        os.close(fd)
        path = Path(name)
        register_temp(path)
        self._temps.append(path)
        return path

    def __enter__(self) -> "TraceWriter":
        if not self.directory.is_dir():
            raise OutputError(f"{self.directory}: output directory does not exist")
        self._prv_tmp = self._temp(self.prv)
        raw = open(self._prv_tmp, "wb")  # noqa: SIM115 - closed in commit/abort
        self._fh = raw
        if self.compress:
            import gzip  # only for -z (start-up)

            self._fh = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0)
        self._raw = raw
        return self

    def begin(self, header: str, pcf_text: str, row_text: str) -> None:
        """Write the .prv's header (its line, then any comment lines) with the id of this
        write after its line; the .pcf and .row, which carry the same id, are published by
        `commit`."""
        header, pcf_text, row_text = mark(header, pcf_text, row_text)
        self._side = (pcf_text, row_text)
        self.write(header)

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        try:
            self._fh.write(data)
        except OSError as e:
            raise output_error(self.prv, e) from None
        self.bytes_written += len(data)

    def write_bytes(self, data: bytes) -> None:
        """Append formatted .prv text (whole lines)."""
        try:
            self._fh.write(data)
        except OSError as e:
            raise output_error(self.prv, e) from None
        self.bytes_written += len(data)

    def copy_file(self, path: str | os.PathLike[str]) -> None:
        """Append the bytes of a file (a part of the .prv written elsewhere): in the kernel
        where it can (`copy_file_range`: the bytes are not read into Python and written
        back, a window's file of a large trace being GBs), else read and written."""
        try:
            with open(path, "rb") as src:
                if not self.compress and self._copy_in_kernel(src):
                    return
                while chunk := src.read(COPY_BYTES):
                    self._fh.write(chunk)
                    self.bytes_written += len(chunk)
        except OSError as e:
            raise output_error(self.prv, e) from None

    def _copy_in_kernel(self, src) -> bool:
        """Copy what is left of `src` with copy_file_range; False (nothing copied) where the
        system or the file systems do not offer it."""
        copy = getattr(os, "copy_file_range", None)
        if copy is None:
            return False
        self._fh.flush()
        out = self._fh.fileno()
        first = True
        while True:
            try:
                n = copy(src.fileno(), out, COPY_BYTES)
            except OSError as e:
                # not offered here (old kernel, other file systems): the plain copy, unless
                # some bytes were already copied (then it is a real error)
                if first and e.errno in (errno.ENOSYS, errno.EXDEV, errno.EINVAL,
                                         errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF):
                    return False
                raise
            if n == 0:
                return True
            first = False
            self.bytes_written += n

    def commit(self) -> None:
        """Publish the trace: .pcf, .row, then .prv renamed into place (a reader that finds
        them of different writes refuses them)."""
        if self._side is None:
            raise RuntimeError("TraceWriter.commit before begin")
        pcf_text, row_text = self._side
        pcf_tmp, row_tmp = self._temp(self.pcf), self._temp(self.row)
        try:
            self._fh.close()
            if self._raw is not self._fh:
                self._raw.close()
            pcf_tmp.write_text(pcf_text, encoding="utf-8")
            row_tmp.write_text(row_text, encoding="utf-8")
            for tmp in (self._prv_tmp, pcf_tmp, row_tmp):
                os.chmod(tmp, 0o644)
            # Ctrl-C/SIGTERM/SIGHUP act after the three renames, not between them; SIGKILL
            # cannot be held: a reader then finds files of two writes and refuses them
            with signals_held():
                os.replace(pcf_tmp, self.pcf)
                os.replace(row_tmp, self.row)
                os.replace(self._prv_tmp, self.prv)
        except OSError as e:
            raise output_error(self.prv, e) from None
        self._temps = []

    def abort(self) -> None:
        try:
            if self._fh is not None:
                self._fh.close()
                if self._raw is not self._fh:
                    self._raw.close()
        except OSError:
            pass
        for p in self._temps:
            try:
                p.unlink()
            except OSError:
                pass
        self._temps = []

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or self._temps:
            self.abort()


def os_errno(e: OSError) -> int | None:
    """errno of an OSError, also when it comes from Rust code that only puts it in the text
    ("... (os error 28)")."""
    if e.errno is not None:
        return e.errno
    m = re.search(r"os error (\d+)", str(e))
    return int(m.group(1)) if m else None


def output_error(path: Path, e: OSError, what: str = "trace") -> OutputError:
    code = os_errno(e)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"{path}: disk full (or quota exceeded) while writing the {what}; "
                           "nothing was written")
    if code == errno.EFBIG:
        return OutputError(f"{path}: file size limit reached while writing the {what}; "
                           "nothing was written")
    return OutputError(f"{path}: cannot write ({e.strerror or e})")


def check_writable(path: str | os.PathLike[str], what: str = "file") -> Path:
    """Fail early, before a long analysis, where `what` could not be written at `path`:
    its directory missing or not writable, or the path a directory (one-line
    OutputError)."""
    out = Path(path)
    directory = out.parent if str(out.parent) else Path(".")
    if not directory.is_dir():
        raise OutputError(f"{directory}: directory does not exist (writing {out.name})")
    if out.is_dir():
        raise OutputError(f"{out}: is a directory, not a {what} to write")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{directory}: cannot write the {what} here (permission denied)")
    return out


def atomic_text(path: str | os.PathLike[str], text: str, what: str = "file") -> Path:
    """Write `text` to `path` whole or not at all: a temporary file beside it (made and
    registered with the supervisor with Ctrl-C held, removed on any error or interruption)
    renamed into place; an older file of that name stays whole until then. One-line
    `OutputError` when the place cannot be written."""
    out = Path(path)
    directory = out.parent if str(out.parent) else Path(".")
    try:
        with signals_held():  # made and registered before an interruption can strike
            fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp",
                                        dir=directory)
            register_temp(name)
    except OSError as e:
        raise OutputError(f"{directory}: cannot write the {what} here "
                          f"({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(name, 0o644)
        with signals_held():
            os.replace(name, out)
    except BaseException as e:
        try:
            os.unlink(name)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise output_error(out, e, what) from None
        raise
    return out
