"""Build of the compiled engine (nsys2prv/engine/_engine.c, _scan.c, _graph.c, _timeline.c);
everything else is in pyproject.toml. Plain C against the CPython API: a C compiler and the
Python headers are all it needs. Wheels need neither; a source build without them stops with
one line saying what to install (`toolchain_problem`), not a compiler command line."""

from __future__ import annotations

import os
import subprocess
import sysconfig
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import PlatformError

HINT = "or install a wheel: pip install --only-binary nsys2prv nsys2prv"


def _compiles(command: list[str], source: str, include_dirs: list[str]) -> bool:
    """Whether `command` compiles `source` (its messages are not shown)."""
    with tempfile.TemporaryDirectory(prefix="nsys2prv-probe-") as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(source)
        args = command + [f"-I{d}" for d in include_dirs] + ["-c", src, "-o", src + ".o"]
        try:
            return subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def toolchain_problem(command: list[str], include_dirs: list[str]) -> str | None:
    """What stops the engine from being built, in one line, or None: no working C compiler
    (`command`, e.g. ['gcc', ...]), or no Python.h in `include_dirs`."""
    if not _compiles(command, "int nsys2prv_probe(void) { return 0; }\n", []):
        return (f"nsys2prv: building the compiled engine needs a C compiler, and "
                f"'{command[0]}' does not work: install gcc (apt-get install gcc, "
                f"dnf install gcc), {HINT}")
    if not _compiles(command, "#include <Python.h>\n", include_dirs):
        found = [d for d in include_dirs if os.path.exists(os.path.join(d, "Python.h"))]
        where = ("is not usable in " + ", ".join(found)) if found else \
            f"is missing (looked in {', '.join(include_dirs) or 'no folder'})"
        return (f"nsys2prv: building the compiled engine needs the Python headers, and "
                f"Python.h {where}: install python3-dev (Debian, Ubuntu) or python3-devel "
                f"(Fedora, RHEL), {HINT}")
    return None


class BuildEngine(build_ext):
    """build_ext that checks the compiler and the Python headers before compiling."""

    def build_extensions(self) -> None:
        command = getattr(self.compiler, "compiler_so", None)
        if command:  # a Unix compiler; others report their own errors
            includes = list(self.include_dirs or []) + [sysconfig.get_path("include")]
            problem = toolchain_problem(list(command), list(dict.fromkeys(includes)))
            if problem:
                raise PlatformError(problem)
        super().build_extensions()


ENGINE = Extension("nsys2prv.engine._engine", ["nsys2prv/engine/_engine.c",
                                               "nsys2prv/engine/_scan.c",
                                               "nsys2prv/engine/_graph.c",
                                               "nsys2prv/engine/_timeline.c"],
                   depends=["nsys2prv/engine/_scan.h", "nsys2prv/engine/_views.h"],
                   # hidden: the functions _engine.c calls in _scan.c stay inlinable there
                   extra_compile_args=["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall",
                                       "-Wextra",
                                       "-Wno-unused-parameter",
                                       "-Wno-missing-field-initializers",
                                       "-Wno-cast-function-type"])

if __name__ == "__main__":
    setup(ext_modules=[ENGINE], cmdclass={"build_ext": BuildEngine})
