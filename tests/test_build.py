"""Source builds: without a C compiler or the Python headers, the build stops with one line
saying what is missing and what to install (setup.py), not a compiler command line."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from conftest import ROOT


pytest.importorskip("setuptools")  # not in a venv of Python 3.12+ unless installed


def _setup_module():
    spec = importlib.util.spec_from_file_location("nsys2prv_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: defines, does not build
    return module


SETUP = _setup_module()
GCC = shutil.which("gcc") or shutil.which("cc")
HEADERS = sysconfig.get_path("include")


def test_no_compiler_names_gcc():
    problem = SETUP.toolchain_problem(["false"], [HEADERS])
    assert problem.startswith("nsys2prv: building the compiled engine needs a C compiler, "
                              "and 'false' does not work: install gcc")
    assert "pip install --only-binary nsys2prv nsys2prv" in problem and "\n" not in problem


def test_missing_compiler_executable():
    problem = SETUP.toolchain_problem(["no-such-compiler-nsys2prv"], [HEADERS])
    assert "'no-such-compiler-nsys2prv' does not work: install gcc" in problem


@pytest.mark.skipif(GCC is None, reason="needs a C compiler")
def test_no_headers_names_the_dev_packages(tmp_path):
    problem = SETUP.toolchain_problem([GCC], [str(tmp_path)])
    assert problem == (f"nsys2prv: building the compiled engine needs the Python headers, and "
                       f"Python.h is missing (looked in {tmp_path}): install python3-dev "
                       f"(Debian, Ubuntu) or python3-devel (Fedora, RHEL), or install a "
                       f"wheel: pip install --only-binary nsys2prv nsys2prv")


@pytest.mark.skipif(GCC is None, reason="needs a C compiler")
def test_unusable_headers_are_named(tmp_path):
    (tmp_path / "Python.h").write_text("#error not the real header\n")
    problem = SETUP.toolchain_problem([GCC], [str(tmp_path)])
    assert f"Python.h is not usable in {tmp_path}: install python3-dev" in problem


@pytest.mark.skipif(GCC is None or not os.path.exists(os.path.join(HEADERS, "Python.h")),
                    reason="needs a C compiler and the Python headers")
def test_working_toolchain_passes():
    assert SETUP.toolchain_problem([GCC, "-fPIC"], [HEADERS]) is None


def test_build_ext_stops_with_one_line(tmp_path):
    """The real command, with CC=false: the last line is ours and no compiler ran."""
    env = dict(os.environ, CC="false")
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_ext",
                          "--build-temp", str(tmp_path / "t"), "--build-lib", str(tmp_path / "l")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "error: nsys2prv: building the compiled engine needs a C compiler, and 'false' does "
        "not work: install gcc (apt-get install gcc, dnf install gcc), or install a wheel: "
        "pip install --only-binary nsys2prv nsys2prv")
    assert " -c nsys2prv/engine" not in run.stdout + run.stderr
    assert not (tmp_path / "l").exists()
