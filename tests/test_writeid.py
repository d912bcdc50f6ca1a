"""A trace's three files name their write (issue 37, nsys2prv/paraver/writeid.py): a reader
never takes the .pcf/.row of one write for the .prv of another. The publish is killed
between each of its renames (.pcf, .row, .prv), and every reader of ours is asked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

import nsys2prv
from nsys2prv.errors import InputError
from nsys2prv.paraver.check import check_trace
from nsys2prv.paraver.read import event_types, read_layout, read_trace
from nsys2prv.paraver.writeid import ids, unmark_pcf, unmark_row, write_id
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export

EXTS = (".prv", ".pcf", ".row")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("exports")
    return {"old": write_export(d / "old.sqlite", sample_spec(4)),
            "new": write_export(d / "new.sqlite", sample_spec(6))}


def _files(prv: Path) -> dict[str, bytes]:
    return {ext: prv.with_suffix(ext).read_bytes() for ext in EXTS}


def test_the_three_files_carry_one_id_from_their_content(exports, tmp_path):
    a, b, c = (tmp_path / f"{n}.prv" for n in "abc")
    nsys2prv.translate(exports["old"], a)
    nsys2prv.translate(exports["old"], b)
    nsys2prv.translate(exports["new"], c)
    assert _files(a) == _files(b)  # deterministic: the id is the content's, not a time's
    own = ids(a)
    assert own[".prv"] == own[".pcf"] == own[".row"] != ids(c)[".prv"]
    lines = a.read_text().splitlines()
    assert lines[1] == f"# nsys2prv write {own['.prv']}"
    pcf, row = a.with_suffix(".pcf").read_text(), a.with_suffix(".row").read_text()
    assert pcf.startswith(f"EVENT_TYPE\n0    67999002   nsys2prv write {own['.prv']}\n")
    assert row.startswith(f"# nsys2prv write {own['.prv']}\nLEVEL ")
    assert own[".prv"] == write_id(lines[0], unmark_pcf(pcf), unmark_row(row))
    assert check_trace(a).ok


def _publish_killed(exports, out: Path, step: int) -> subprocess.CompletedProcess:
    """`nsys2prv NEW out/t.prv` as a user runs it (supervised), SIGKILLed after `step` of
    the three renames that publish the trace (0: before the first)."""
    hook = out.parent / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(textwrap.dedent(f"""
        import os, signal
        _replace, _done = os.replace, [0]
        def _stop():
            if _done[0] == {step}:
                os.kill(os.getpid(), signal.SIGKILL)
        def replace(src, dst, *args, **kw):
            if not str(dst).endswith((".prv", ".pcf", ".row")):
                return _replace(src, dst, *args, **kw)
            _stop()
            _replace(src, dst, *args, **kw)
            _done[0] += 1
            _stop()
        os.replace = replace
    """))
    env = {**os.environ, "PYTHONPATH": f"{hook}:{ROOT}"}
    env.pop("NSYS2PRV_NO_SUPERVISOR", None)
    return subprocess.run([sys.executable, "-m", "nsys2prv", str(exports["new"]),
                           str(out / "t.prv")], capture_output=True, text=True, env=env,
                          timeout=300)


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsys2prv", *map(str, args)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_a_publish_killed_between_renames_is_never_read_mixed(exports, step, tmp_path):
    """Killed before the renames: the old trace, read as ever. After the .pcf, or the .pcf
    and the .row: every reader refuses the trace with one line. After the .prv: the new
    trace, whole."""
    ref = tmp_path / "ref"
    ref.mkdir()
    nsys2prv.translate(exports["new"], ref / "t.prv")
    out = tmp_path / "out"
    out.mkdir()
    nsys2prv.translate(exports["old"], out / "t.prv")
    old = _files(out / "t.prv")
    proc = _publish_killed(exports, out, step)
    assert proc.returncode == 1 and "SIGKILL" in proc.stderr, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["t.pcf", "t.prv", "t.row"]  # no temp
    prv = out / "t.prv"
    now = _files(prv)
    if step in (0, 3):
        assert now == (old if step == 0 else _files(ref / "t.prv"))
        assert check_trace(prv).ok and event_types(prv)
        assert _cli("check", prv).returncode == 0
        return
    assert now[".prv"] == old[".prv"] and now[".pcf"] == _files(ref / "t.prv")[".pcf"]
    assert now[".row"] == (old if step == 1 else _files(ref / "t.prv"))[".row"]
    report = check_trace(prv)
    assert not report.ok and len(report.errors) == 1
    assert "t.pcf is from another write" in report.errors[0]
    for reader in (read_layout, event_types, lambda p: read_trace(p, {63_000_006})):
        with pytest.raises(InputError, match="is from another write"):
            reader(prv)
    for args in (("check", prv), ("analyze", prv)):
        proc = _cli(*args)
        assert proc.returncode == 1, proc
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert len(lines) == 1 and "t.pcf is from another write" in lines[0], lines


def test_traces_without_id_are_read_as_before(exports, tmp_path):
    """A trace written before write ids (no id in any file) is read and checked as ever;
    so is a .prv without id beside our .pcf (Paraver's cutter copies the .pcf and .row);
    a .prv with an id beside a .pcf without one (an older write's) is refused."""
    nsys2prv.translate(exports["old"], tmp_path / "t.prv")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    lines = (tmp_path / "t.prv").read_text().splitlines(keepends=True)
    (legacy / "t.prv").write_text(lines[0] + "".join(lines[2:]))
    (legacy / "t.pcf").write_text(unmark_pcf((tmp_path / "t.pcf").read_text()))
    (legacy / "t.row").write_text(unmark_row((tmp_path / "t.row").read_text()))
    assert ids(legacy / "t.prv") == {".prv": None, ".pcf": None, ".row": None}
    assert check_trace(legacy / "t.prv").ok
    assert read_trace(legacy / "t.prv", {63_000_006}).events.height == \
        read_trace(tmp_path / "t.prv", {63_000_006}).events.height > 0
    shutil.copy(tmp_path / "t.pcf", legacy / "t.pcf")  # our .pcf beside a foreign .prv
    assert check_trace(legacy / "t.prv").ok
    (tmp_path / "t.pcf").write_text(unmark_pcf((tmp_path / "t.pcf").read_text()))
    report = check_trace(tmp_path / "t.prv")
    assert report.errors == [f"its t.pcf is from another write (write without id, the "
                             f".prv's {ids(tmp_path / 't.prv')['.prv']}): the trace is being "
                             "written or its writing was cut short; write it again"]


def test_copies_carry_their_own_id(exports, tmp_path):
    """A window cut from a trace and a critical-path copy name their own write, not the
    source's (the source's id line is left out of the copy)."""
    from nsys2prv.analysis import critical_path as C
    from nsys2prv.pipeline.window import cut_trace

    src = tmp_path / "s.prv"
    nsys2prv.translate(exports["new"], src)
    cut_trace(src, tmp_path / "w.prv", 1_000_000, 3_000_000)
    g = C.read_graph(src)
    C.write_path_trace(src, tmp_path / "p.prv", g, C.critical_path(g).segments)
    for copy in (tmp_path / "w.prv", tmp_path / "p.prv"):
        own = ids(copy)
        assert own[".prv"] == own[".pcf"] == own[".row"] != ids(src)[".prv"], copy
        text = copy.read_text()
        assert text.count("# nsys2prv write ") == 1 and check_trace(copy).ok, copy
        assert unmark_pcf(copy.with_suffix(".pcf").read_text()).count("67999002") == 0
