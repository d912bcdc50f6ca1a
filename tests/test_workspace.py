"""The nsys2prv Paraver workspaces and `nsys2prv paraver-setup`: the XML is what boost
writes, a user's own workspaces survive the merge, a second run changes nothing, and
--dry-run writes nothing."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nsys2prv.views import catalogue, workspace
from paramedir import find_paramedir
from nsys2prv.views.workspace import EVENT, STATE, Workspace, merge, parse, render
from nsys2prv.cli import main

USER = {"My MPI": Workspace("My MPI", EVENT, [(EVENT, 50_000_001), (EVENT, 50_000_002)],
                            [("/data/u/cfgs/mpi & co.cfg", "MPI <calls>")]),
        "Useful": Workspace("Useful", STATE, [(STATE, 1)], [("General/views/useful.cfg", "U")]),
        "Empty": Workspace("Empty", EVENT, [], [])}
USER_ORDER = ["Useful", "My MPI", "Empty"]


def test_render_is_boost_layout_and_round_trips():
    """Class attributes only on the first object of each class, in boost's numbering; the
    values decode back (little-endian type + value); names are escaped."""
    text = render(USER, USER_ORDER)
    ET.fromstring(text)
    assert text.count('class_id="3" tracking_level="0" version="2"') == 1  # Workspace v2
    # "Empty" comes first (std::map order): its empty vectors take ids 4 and 5, so the
    # WorkspaceValue (v1) is class 6 and the hint pair class 7
    assert re.findall(r'<(\w+) class_id="(\d+)"[^>]*version="(\d)"', text) == [
        ("workspace_manager", "0", "0"), ("workspaces", "1", "0"), ("item", "2", "0"),
        ("second", "3", "2"), ("autoTypes", "4", "0"), ("hintCFGs", "5", "0"),
        ("item", "6", "1"), ("item", "7", "0"), ("workspacesOrder", "8", "0")]
    assert "AgAAAIHw+gI=" in text  # (2, 50000001) as boost's binary object
    assert "mpi &amp; co.cfg" in text and "MPI &lt;calls&gt;" in text
    assert parse(text) == (USER, USER_ORDER)


def test_paraver_distributed_file_round_trips():
    """Where Paraver is installed, its own workspaces.xml re-renders identically (modulo
    whitespace): the writer follows boost's layout, not just our reader."""
    home = os.environ.get("PARAVER_HOME")
    if not home:  # the installation that the paramedir on PATH belongs to
        exe = find_paramedir()
        home = str(Path(exe).resolve().parent.parent) if exe else ""
    f = Path(home) / "share" / "workspaces.xml"
    if not home or not f.exists():
        pytest.skip("no Paraver installation (set PARAVER_HOME or put paramedir on PATH)")
    text = f.read_text()
    norm = lambda s: re.sub(r"\s+", "", s)  # noqa: E731
    assert norm(render(*parse(text))) == norm(text)


def test_workspaces_come_from_the_catalogue():
    main_ws, metrics, samples = workspace.nsys2prv_workspaces("P/")
    # in the catalogue's order: the GPU metrics' views and the samples' in their own
    paths = ["P/" + c.path for c in catalogue.CATALOGUE]
    assert [h[0] for h in metrics.hints] == [p for p in paths if p.startswith("P/hwcounters/")]
    assert [h[0] for h in samples.hints] == [p for p in paths if p.startswith("P/sampling/")]
    assert [h[0] for h in main_ws.hints] == [p for p in paths if not p.startswith(
        ("P/hwcounters/", "P/sampling/"))]
    assert (EVENT, catalogue.KERNEL) in main_ws.auto and (EVENT, 63_000_000) in main_ws.auto
    assert (EVENT, 67_500_000) in metrics.auto
    # the types of Paraver's 'Sampling' and 'Call stack references' workspaces
    assert samples.auto == [(EVENT, 30_000_000), (EVENT, 70_000_001)]


def test_merge_keeps_user_workspaces():
    merged = parse(merge(render(USER, USER_ORDER), workspace.nsys2prv_workspaces("")))
    ws, order = merged
    assert order == USER_ORDER + [workspace.NAME, workspace.METRICS_NAME,
                                  workspace.SAMPLES_NAME]
    for name, w in USER.items():
        assert ws[name] == w


def test_setup_dry_run_then_install_then_idempotent(tmp_path, capsys):
    user = tmp_path / "dotparaver"
    user.mkdir()
    original = render(USER, USER_ORDER)
    (user / "workspaces.xml").write_text(original)
    before = sorted(p.name for p in user.rglob("*"))
    assert main(["paraver-setup", "--dry-run", "--user-dir", str(user)]) == 0
    out = capsys.readouterr().out
    assert "would add/update" in out and f"{len(catalogue.CATALOGUE)} to write" in out
    assert sorted(p.name for p in user.rglob("*")) == before
    assert (user / "workspaces.xml").read_text() == original

    assert main(["paraver-setup", "--user-dir", str(user)]) == 0
    capsys.readouterr()
    ws, order = parse((user / "workspaces.xml").read_text())
    assert order[:3] == USER_ORDER and ws["My MPI"] == USER["My MPI"]
    hints = (ws[workspace.NAME].hints + ws[workspace.METRICS_NAME].hints
             + ws[workspace.SAMPLES_NAME].hints)
    assert len(hints) == len(catalogue.CATALOGUE)
    for path, _ in hints:
        assert Path(path).is_absolute() and Path(path).read_text().startswith("#ParaverCFG")
    backups = list(user.glob("workspaces.xml.nsys2prv-backup-*"))
    assert len(backups) == 1 and backups[0].read_text() == original

    text = (user / "workspaces.xml").read_text()
    assert main(["paraver-setup", "--user-dir", str(user)]) == 0
    assert "already has" in capsys.readouterr().out
    assert (user / "workspaces.xml").read_text() == text
    assert len(list(user.glob("workspaces.xml.nsys2prv-backup-*"))) == 1


def test_setup_paraver_home_uses_relative_hints(tmp_path, capsys):
    assert main(["paraver-setup", "--paraver-home", str(tmp_path)]) == 0
    ws, _ = parse((tmp_path / "share" / "workspaces.xml").read_text())
    path = ws[workspace.NAME].hints[0][0]
    assert path == "nsys2prv/" + catalogue.CATALOGUE[0].path
    assert (tmp_path / "cfgs" / path).exists()
