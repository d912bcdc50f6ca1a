"""Paraver workspaces for nsys2prv traces, and `nsys2prv paraver-setup` that installs them.

wxparaver picks the workspaces whose "auto types" occur in a trace and lists their hint cfgs
in its Hints menu, greying out those whose event types the trace lacks (paraver-kernel
`api/workspace.h`, `api/workspacemanager.cpp`; wxparaver `paravermain.cpp`). Workspaces live in
`$PARAVER_HOME/share/workspaces.xml` (distributed) and `~/.paraver/workspaces.xml` (user), as
boost::serialization XML archives. This module reads such a file into plain data, merges the
nsys2prv workspaces (generated from the cfg catalogue) into it, and writes it back in the
layout boost writes (class attributes on the first object of each class), so Paraver reads
the user's own workspaces unchanged.
"""

from __future__ import annotations

import base64
import shutil
import struct
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

STATE, EVENT = 1, 2  # WorkspaceType
NAME = "nsys2prv"
METRICS_NAME = "nsys2prv GPU metrics"
SAMPLES_NAME = "nsys2prv CPU samples"


@dataclass
class Workspace:
    """One workspace: auto values are (kind, number): (EVENT, event type) or (STATE, state);
    hints are (cfg path, menu text); a relative path is under $PARAVER_HOME/cfgs."""

    name: str
    type: int = EVENT
    auto: list[tuple[int, int]] = field(default_factory=list)
    hints: list[tuple[str, str]] = field(default_factory=list)


# ------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------


def parse(text: str) -> tuple[dict[str, Workspace], list[str]]:
    """Workspaces by name and their order, from a workspaces.xml archive."""
    root = ET.fromstring(text)
    manager = root.find("workspace_manager")
    if manager is None:
        raise ValueError("not a Paraver workspaces file (no workspace_manager)")
    ws_version: int | None = None
    out: dict[str, Workspace] = {}
    for item in manager.find("workspaces").findall("item"):
        body = item.find("second")
        if ws_version is None:
            ws_version = int(body.get("version", "2"))
        name = body.findtext("name") or item.findtext("first") or ""
        w = Workspace(name, int(body.findtext("type") or EVENT) if ws_version >= 2 else EVENT)
        auto = body.find("autoTypes")
        for a in auto.findall("item") if auto is not None else ():
            if ws_version >= 2:
                raw = base64.b64decode("".join((a.findtext("WorkspaceValue") or "").split()))
                kind, value = struct.unpack("<iI", raw[:8])
                w.auto.append((kind, value))
            else:
                w.auto.append((EVENT, int(a.text)))
        hints = body.find("hintCFGs")
        for h in hints.findall("item") if hints is not None else ():
            w.hints.append((h.findtext("first") or "", h.findtext("second") or ""))
        out[name] = w
    order = [i.text or "" for i in manager.find("workspacesOrder").findall("item")]
    return out, order


# ------------------------------------------------------------------------------------------
# Writing (the layout of boost's xml_oarchive)
# ------------------------------------------------------------------------------------------


class _Classes:
    """boost numbers classes in the order their first object is saved and writes
    class_id/tracking_level/version only on that first object."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def attrs(self, cls: str, version: int) -> str:
        if cls in self.ids:
            return ""
        self.ids[cls] = len(self.ids)
        return f' class_id="{self.ids[cls]}" tracking_level="0" version="{version}"'


def render(workspaces: dict[str, Workspace], order: Sequence[str]) -> str:
    """The workspaces.xml text (boost serialization archive version 17, Workspace v2)."""
    c = _Classes()
    c.attrs("manager", 0)
    t = "\t"
    lines = ['<?xml version="1.0" encoding="UTF-8" standalone="yes" ?>',
             "<!DOCTYPE boost_serialization>",
             '<boost_serialization signature="serialization::archive" version="17">',
             '<workspace_manager class_id="0" tracking_level="0" version="0">',
             f'{t}<workspaces{c.attrs("map", 0)}>',
             f"{t * 2}<count>{len(workspaces)}</count>", f"{t * 2}<item_version>0</item_version>"]
    for name in sorted(workspaces):  # std::map order
        w = workspaces[name]
        lines += [f'{t * 2}<item{c.attrs("pair", 0)}>', f"{t * 3}<first>{escape(name)}</first>",
                  f'{t * 3}<second{c.attrs("workspace", 2)}>',
                  f"{t * 4}<name>{escape(w.name)}</name>", f"{t * 4}<type>{w.type}</type>",
                  f'{t * 4}<autoTypes{c.attrs("values", 0)}>',
                  f"{t * 5}<count>{len(w.auto)}</count>", f"{t * 5}<item_version>1</item_version>"]
        for kind, value in w.auto:
            b64 = base64.b64encode(struct.pack("<iI", kind, value)).decode()
            lines += [f'{t * 5}<item{c.attrs("value", 1)}>', f"{t * 6}<type>{kind}</type>",
                      f"{t * 6}<WorkspaceValue>", b64, f"{t * 6}</WorkspaceValue>",
                      f"{t * 5}</item>"]
        lines += [f"{t * 4}</autoTypes>", f'{t * 4}<hintCFGs{c.attrs("hints", 0)}>',
                  f"{t * 5}<count>{len(w.hints)}</count>", f"{t * 5}<item_version>0</item_version>"]
        for path, text in w.hints:
            lines += [f'{t * 5}<item{c.attrs("hint", 0)}>',
                      f"{t * 6}<first>{escape(path)}</first>",
                      f"{t * 6}<second>{escape(text)}</second>", f"{t * 5}</item>"]
        lines += [f"{t * 4}</hintCFGs>", f"{t * 3}</second>", f"{t * 2}</item>"]
    lines += [f"{t}</workspaces>", f'{t}<workspacesOrder{c.attrs("order", 0)}>',
              f"{t * 2}<count>{len(order)}</count>", f"{t * 2}<item_version>0</item_version>"]
    lines += [f"{t * 2}<item>{escape(n)}</item>" for n in order]
    lines += [f"{t}</workspacesOrder>", "</workspace_manager>", "</boost_serialization>", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# The nsys2prv workspaces, from the catalogue
# ------------------------------------------------------------------------------------------


def nsys2prv_workspaces(prefix: str) -> list[Workspace]:
    """The workspaces for nsys2prv traces; hint paths are `prefix` + the cfg's path.

    Auto types: every single event type the basics views filter (a trace with any of them
    selects the workspace); GPU-metric views go to their own workspace, selected by the
    metric sample types, so they are offered only on traces with GPU metrics; the views of
    CPU samples and call stacks to theirs, selected by Extrae's sampled function (30000000)
    and first caller (70000001), the types Paraver's own 'Sampling' and 'Call stack
    references' workspaces are selected by."""
    from ..paraver.registry import gpu_metrics, sampling
    from .catalogue import BASICS, CATALOGUE

    main = Workspace(NAME)
    metrics = Workspace(METRICS_NAME)
    samples = Workspace(SAMPLES_NAME, auto=[(EVENT, sampling.SAMPLED_FUNCTION),
                                            (EVENT, sampling.caller_type(1))])
    auto: set[int] = set()
    for cfg in BASICS:
        for w in cfg.windows:
            if w.types and not w.hidden:
                auto.update(w.types if not w.type_range else (w.types[0],))
    main.auto = [(EVENT, t) for t in sorted(auto)]
    metrics.auto = [(EVENT, gpu_metrics.SAMPLES.type_of(o))
                    for o in sorted(gpu_metrics.KNOWN_METRICS.values())]
    for cfg in CATALOGUE:
        target = (metrics if cfg.path.startswith("hwcounters/") else
                  samples if cfg.path.startswith("sampling/") else main)
        target.hints.append((prefix + cfg.path, cfg.title))
    return [main, metrics, samples]


def merge(existing: str | None, ours: Sequence[Workspace]) -> str:
    """`existing` (a workspaces.xml text, or None) with `ours` added or replaced by name;
    every other workspace and the order are kept."""
    workspaces, order = parse(existing) if existing else ({}, [])
    for w in ours:
        workspaces[w.name] = w
        if w.name not in order:
            order.append(w.name)
    return render(workspaces, order)


# ------------------------------------------------------------------------------------------
# nsys2prv paraver-setup
# ------------------------------------------------------------------------------------------


@dataclass
class Plan:
    cfg_dir: Path
    workspaces_file: Path
    cfgs: dict[Path, str]  # files to write (new or changed)
    workspaces_text: str | None  # None: already up to date


def plan(user_dir: Path | None = None, paraver_home: Path | None = None) -> Plan:
    """What `paraver-setup` writes: for one user (`user_dir`, default ~/.paraver: cfgs in
    cfgs/nsys2prv/, absolute hint paths) or for every user of a Paraver installation
    (`paraver_home`: cfgs in $PARAVER_HOME/cfgs/nsys2prv/, workspaces in share/)."""
    from .catalogue import CATALOGUE
    from .cfg import render as render_cfg

    if paraver_home is not None:
        cfg_dir = Path(paraver_home) / "cfgs" / "nsys2prv"
        ws_file = Path(paraver_home) / "share" / "workspaces.xml"
        prefix = "nsys2prv/"
    else:
        base = Path(user_dir) if user_dir is not None else Path.home() / ".paraver"
        cfg_dir = base / "cfgs" / "nsys2prv"
        ws_file = base / "workspaces.xml"
        prefix = str(cfg_dir.resolve()) + "/"
    cfgs = {}
    for cfg in CATALOGUE:
        p = cfg_dir / cfg.path
        text = render_cfg(cfg)
        if not p.exists() or p.read_text() != text:
            cfgs[p] = text
    existing = ws_file.read_text() if ws_file.exists() else None
    text = merge(existing, nsys2prv_workspaces(prefix))
    return Plan(cfg_dir, ws_file, cfgs, None if text == existing else text)


def apply(p: Plan) -> Path | None:
    """Write the plan; returns the backup of the previous workspaces file, if any."""
    for path, text in p.cfgs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    backup = None
    if p.workspaces_text is not None:
        p.workspaces_file.parent.mkdir(parents=True, exist_ok=True)
        if p.workspaces_file.exists():
            backup = p.workspaces_file.with_name(
                p.workspaces_file.name + time.strftime(".nsys2prv-backup-%Y%m%d-%H%M%S"))
            shutil.copy2(p.workspaces_file, backup)
        tmp = p.workspaces_file.with_name(p.workspaces_file.name + ".nsys2prv-tmp")
        tmp.write_text(p.workspaces_text)
        tmp.replace(p.workspaces_file)
    return backup
