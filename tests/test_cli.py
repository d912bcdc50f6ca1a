"""The command line: exit codes, one-line errors, no partial output, `.nsys-rep` via nsys."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsys2prv.cli import main
from nsys2prv.paraver import registry as reg
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export

from conftest import ROOT
from prvtools import read_prv, validate

SAMPLE = ROOT / "examples" / "sample.sqlite"


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory) -> Path:
    return write_export(tmp_path_factory.mktemp("db") / "sample.sqlite", sample_spec(), "3.17.1")


def run(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


def test_translate_and_summary(tmp_path, sample_db, capsys):
    code, _, err = run([sample_db, tmp_path / "t.prv", "-j", "1"], capsys)
    assert code == 0
    assert "wrote" in err and "kernels 16" in err
    validate(tmp_path / "t.prv")
    assert _leftovers(tmp_path) == []


def test_quiet(tmp_path, sample_db, capsys):
    code, out, err = run([sample_db, tmp_path / "t.prv", "-q"], capsys)
    assert (code, out, err) == (0, "", "")


@pytest.mark.parametrize("args, code, message", [
    ([], 2, "give at least one input"),
    (["only.sqlite"], 2, "give at least one input"),
    (["--only", "bogus", "IN", "out.prv"], 2, "unknown data kind 'bogus'"),
    (["IN", "out.txt"], 2, "must end in .prv"),
])
def test_usage_errors(tmp_path, sample_db, capsys, args, code, message):
    args = [str(sample_db) if a == "IN" else a for a in args]
    got, _, err = run(args, capsys)
    assert got == code
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_inputs_one_line_and_exit_1(tmp_path, sample_db, capsys):
    text = tmp_path / "notes.sqlite"
    text.write_text("hello\n")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(sample_db.read_bytes()[:9000])
    other = tmp_path / "other.sqlite"
    import sqlite3
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    cases = {text: "not an SQLite database", empty: "empty file",
             truncated: "corrupt or truncated", other: "not an Nsight Systems export",
             tmp_path / "missing.sqlite": "no such file"}
    for path, message in cases.items():
        code, _, err = run([path, tmp_path / "x.prv"], capsys)
        assert code == 1, (path, err)
        assert message in err and str(path.name) in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.prv").exists()
    assert _leftovers(tmp_path) == []


def test_failure_keeps_previous_output(tmp_path, sample_db, capsys):
    out = tmp_path / "t.prv"
    assert run([sample_db, out, "-q"], capsys)[0] == 0
    before = {p: p.read_bytes() for p in tmp_path.glob("t.*")}
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(sample_db.read_bytes()[:9000])
    assert run([bad, out, "-q"], capsys)[0] == 1
    assert {p: p.read_bytes() for p in tmp_path.glob("t.*")} == before
    assert _leftovers(tmp_path) == []


def test_output_must_not_overwrite_input(tmp_path, sample_db, capsys):
    trace = tmp_path / "t.prv"
    trace.write_text("not really a trace\n")
    code, _, err = run([trace, trace], capsys)
    assert code == 2 and "overwrite an input" in err


def test_output_directory_problems(tmp_path, sample_db, capsys):
    code, _, err = run([sample_db, tmp_path / "nope" / "t.prv"], capsys)
    assert code == 1 and "does not exist" in err
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        code, _, err = run([sample_db, ro / "t.prv"], capsys)
        assert code == 1 and "not writable" in err
    finally:
        ro.chmod(0o700)


def test_only_and_exclude(tmp_path, sample_db, capsys):
    assert run([sample_db, tmp_path / "k.prv", "-q", "--only", "kernels,nvtx"], capsys)[0] == 0
    validate(tmp_path / "k.prv")
    tr = read_prv(tmp_path / "k.prv")
    types = {t for *_, pairs in tr.events for t, _ in pairs}
    assert reg.CUDA_KERNEL in types and reg.CUDA_CALL not in types
    assert reg.MEMORY_OPERATION not in types and reg.OSRT_CALL not in types
    assert not tr.comms  # no API calls, so no launch arrows
    assert run([sample_db, tmp_path / "e.prv", "-q", "--exclude", "osrt"], capsys)[0] == 0
    tr = read_prv(tmp_path / "e.prv")
    types = {t for *_, pairs in tr.events for t, _ in pairs}
    assert reg.OSRT_CALL not in types and reg.CUDA_CALL in types


def test_python_dash_m_and_check_command(tmp_path, sample_db):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-m", "nsys2prv", str(sample_db),
                           str(tmp_path / "m.prv"), "-q"], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "nsys2prv", "check", str(tmp_path / "m.prv")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "OK" in proc.stdout
    bad = tmp_path / "bad.prv"
    lines = (tmp_path / "m.prv").read_text().splitlines()
    bad.write_text("\n".join(lines[:2] + lines[:1:-1]) + "\n")  # body reversed (not the
    # header and the write id the .pcf and .row copied carry)
    for ext in (".pcf", ".row"):
        (tmp_path / f"bad{ext}").write_bytes((tmp_path / f"m{ext}").read_bytes())
    proc = subprocess.run([sys.executable, "-m", "nsys2prv", "check", str(bad)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "out of time order" in proc.stderr


FAKE_NSYS = textwrap.dedent("""\
    #!{python}
    import shutil, sys
    with open({log!r}, "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
    if sys.argv[1] == "--version":
        print("NVIDIA Nsight Systems version 2099.1.1.1-0000")
        sys.exit(0)
    args = sys.argv[1:]
    report = args[-1]
    if open(report).read().startswith("NEWER"):
        print("Exportation error: Version number is invalid: 2100@1@1@1-0", file=sys.stderr)
        sys.exit(1)
    out = args[args.index("--output") + 1]
    shutil.copy({source!r}, out)
    """)


@pytest.fixture()
def fake_nsys(tmp_path, sample_db, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "nsys.log"
    script = bindir / "nsys"
    script.write_text(FAKE_NSYS.format(python=sys.executable, log=str(log),
                                       source=str(sample_db)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    return log


def test_nsys_rep_is_exported_once_and_cached(tmp_path, fake_nsys, capsys):
    rep = tmp_path / "run.nsys-rep"
    rep.write_text("report bytes")
    out = tmp_path / "out" / "t.prv"
    out.parent.mkdir()
    assert run([rep, out, "-q"], capsys)[0] == 0
    validate(out)
    cache = list((out.parent / ".nsys2prv-cache").glob("*.sqlite"))
    assert len(cache) == 1
    exports = [x for x in fake_nsys.read_text().splitlines() if x.startswith("export")]
    assert len(exports) == 1 and "--type sqlite" in exports[0]
    assert run([rep, out, "-q"], capsys)[0] == 0  # reused
    exports = [x for x in fake_nsys.read_text().splitlines() if x.startswith("export")]
    assert len(exports) == 1
    os.utime(rep, ns=(1, 1))  # the report changed: exported again
    assert run([rep, out, "-q"], capsys)[0] == 0
    exports = [x for x in fake_nsys.read_text().splitlines() if x.startswith("export")]
    assert len(exports) == 2
    assert not (tmp_path / ".nsys2prv-cache").exists()  # never in the CWD or input dir


def test_nsys_rep_too_new(tmp_path, fake_nsys, capsys):
    rep = tmp_path / "new.nsys-rep"
    rep.write_text("NEWER report")
    code, _, err = run([rep, tmp_path / "t.prv"], capsys)
    assert code == 1 and "newer Nsight Systems" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "new.nsys-rep", "nsys.log"]


def test_nsys_rep_without_nsys(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NSYS_HOME", raising=False)
    rep = tmp_path / "a.qdrep"
    rep.write_text("x")
    code, _, err = run([rep, tmp_path / "t.prv"], capsys)
    assert code == 1 and "needs Nsight Systems' `nsys`" in err


def test_same_input_twice_is_refused(tmp_path, sample_db, capsys):
    """a.sqlite a.sqlite (or the same file through a symlink or another path) would merge
    one report twice: one line naming the file, exit code 2, nothing written."""
    link = tmp_path / "link.sqlite"
    link.symlink_to(sample_db)
    other_path = sample_db.parent / ".." / sample_db.parent.name / sample_db.name
    for second in (sample_db, link, other_path):
        out = tmp_path / "twice.prv"
        code, _, err = run([str(sample_db), str(second), str(out)], capsys)
        assert code == 2, second
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "given twice" in lines[0], err
        assert str(second) in lines[0]
        assert not out.exists() and not out.with_suffix(".pcf").exists()


def test_kind_index_matches_the_translator_modules():
    """paraver/kinds KINDS (read without importing the kinds) says what each module declares:
    every module's translators, their order and their availability check, in that order."""
    import importlib
    import pkgutil

    from nsys2prv.paraver import kinds
    from nsys2prv.paraver.kinds import KINDS

    declared = {}
    for m in pkgutil.iter_modules(kinds.__path__):
        if m.name != "base" and not m.name.startswith("_"):
            module = importlib.import_module(f"nsys2prv.paraver.kinds.{m.name}")
            declared.update({t.name: (m.name, t) for t in module.TRANSLATORS})
    assert set(KINDS) == set(declared) and len(KINDS) == 17
    assert list(KINDS) == sorted(KINDS, key=lambda n: (declared[n][1].order, n))
    for name, kind in KINDS.items():
        module, translator = declared[name]
        source, function = kind.available.rsplit(".", 1)
        check = getattr(importlib.import_module(f"nsys2prv.sources.{source}"), function)
        assert (kind.module, kind.order, check) == (module, translator.order,
                                                    translator.available), name
        assert kinds.TRANSLATORS[name] is translator


def test_translating_the_sample_imports_only_its_kinds(tmp_path):
    """A report's kinds are the only translator modules imported (issue 20: start-up), with
    the helpers they share (`base`; `_launch`: what a kernel's launch allows)."""
    code = ("import sys; from nsys2prv.cli import main; "
            f"main([{str(SAMPLE)!r}, {str(tmp_path / 's.prv')!r}, '-q']); "
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
            "if m.startswith('nsys2prv.paraver.kinds.')))")
    run_ = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, NSYS2PRV_NO_SUPERVISOR="1"))
    assert run_.returncode == 0, run_.stderr
    # _projected: the NVTX ranges projected onto the GPU (kernels keep work, NVTX projects)
    assert run_.stdout.split("\n")[-2] == str(["_launch", "_projected", "base", "cuda_api", "cuda_deps",
                                               "cuda_sync", "kernels", "memory", "nvtx",
                                               "osrt"])


def test_the_console_script_freezes_its_imports_and_a_library_caller_keeps_its_gc(tmp_path):
    """The console script's command imports polars and numpy with the collector off and
    freezes them (issue 48: start-up), the collector on again for the work; a caller of
    `main(argv)` finds its collector as it left it."""
    code = ("import gc, sys; from nsys2prv.cli import main; "
            f"sys.argv = ['nsys2prv', {str(SAMPLE)!r}, {str(tmp_path / 'a.prv')!r}, '-q']; "
            "main(); print(gc.get_freeze_count(), gc.isenabled()); "
            f"gc.unfreeze(); main([{str(SAMPLE)!r}, {str(tmp_path / 'b.prv')!r}, '-q']); "
            "print(gc.get_freeze_count(), gc.isenabled())")
    run_ = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, NSYS2PRV_NO_SUPERVISOR="1"))
    assert run_.returncode == 0, run_.stderr
    console, library = [line.split() for line in run_.stdout.splitlines()[-2:]]
    assert int(console[0]) > 10_000 and console[1] == "True"  # polars' and numpy's objects
    assert library == ["0", "True"]
    assert (tmp_path / "a.prv").read_bytes() == (tmp_path / "b.prv").read_bytes()


def test_list_kinds_and_help_name_every_kind(capsys):
    """--list-kinds prints every kind --only accepts; --help names them all too."""
    from nsys2prv.paraver.kinds import TRANSLATORS

    code, out, _ = run(["--list-kinds"], capsys)
    assert code == 0 and out.split() == list(TRANSLATORS)
    with pytest.raises(SystemExit):
        main(["--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps the list anywhere
    assert ",".join(TRANSLATORS) in text
    assert "(nsys2prv--list-kinds)" in text
