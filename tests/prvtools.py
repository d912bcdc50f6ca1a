"""Test helpers: a small, independent `.prv` reader and SQL expectations from exports.

The reader is deliberately naive (one Python step per line) and shares no code with the
writer, so tests compare two implementations. Use it on small traces only.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nsys2prv.paraver.check import check_trace
from nsys2prv.paraver.writeid import unmark_pcf, unmark_row


@dataclass
class Trace:
    header: str
    end: int
    states: list[tuple] = field(default_factory=list)  # (task, thread, begin, end, state)
    events: list[tuple] = field(default_factory=list)  # (task, thread, time, [(type, value)])
    comms: list[tuple] = field(default_factory=list)  # 15-field tuples (ints)
    pcf: str = ""
    row: str = ""

    def values(self, type_: int) -> list[int]:
        return [v for *_, pairs in self.events for t, v in pairs if t == type_]

    def nonzero(self, *types: int) -> int:
        return sum(1 for *_, pairs in self.events for t, v in pairs if t in types and v != 0)

    def durations(self, *types: int) -> dict[tuple[int, int], int]:
        """(type, value) -> total time of its regions, reading values as Paraver's 'Stacked
        Val' does: a value opens a region, 0 closes the innermost open one of that row."""
        stacks: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        out: dict[tuple[int, int], int] = defaultdict(int)
        for task, thread, time, pairs in self.events:
            for t, v in pairs:
                if t not in types:
                    continue
                stack = stacks[(task, thread, t)]
                if v == 0:
                    if stack:
                        value, start = stack.pop()
                        out[(t, value)] += time - start
                else:
                    stack.append((v, time))
        return dict(out)

    def pcf_labels(self, type_: int) -> dict[int, str]:
        labels: dict[int, str] = {}
        lines = self.pcf.splitlines()
        i = 0
        while i < len(lines):
            if lines[i] == "EVENT_TYPE":
                types, j = [], i + 1
                while j < len(lines) and lines[j] and lines[j] != "VALUES" and \
                        lines[j].split()[0].isdigit() and len(lines[j].split()) > 2 and \
                        lines[j].split()[1].isdigit():
                    types.append(int(lines[j].split()[1]))
                    j += 1
                if type_ in types and j < len(lines) and lines[j] == "VALUES":
                    j += 1
                    while j < len(lines) and lines[j].strip():
                        v, label = lines[j].split(None, 1)
                        labels[int(v)] = label
                        j += 1
                    return labels
                i = j
            else:
                i += 1
        return labels

    def state_time(self) -> dict[tuple[int, int], dict[int, int]]:
        out: dict[tuple[int, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for task, thread, b, e, s in self.states:
            out[(task, thread)][s] += e - b
        return out


def read_prv(path: str | Path) -> Trace:
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n")
        end = int(header.split("):", 1)[1].split("_ns", 1)[0])
        tr = Trace(header, end)
        for line in fh:
            if line.startswith("#"):
                continue
            f = [int(x) for x in line.rstrip("\n").split(":")]
            if f[0] == 1:
                tr.states.append((f[3], f[4], f[5], f[6], f[7]))
            elif f[0] == 2:
                tr.events.append((f[3], f[4], f[5], list(zip(f[6::2], f[7::2]))))
            elif f[0] == 3:
                tr.comms.append(tuple(f))
    base = path.name[:-7] if path.name.endswith(".prv.gz") else path.name[:-4]
    # without the write id (paraver/writeid.py): the content, whichever write made it
    tr.pcf = unmark_pcf(path.with_name(base + ".pcf").read_text())
    tr.row = unmark_row(path.with_name(base + ".row").read_text())
    return tr


@contextmanager
def pertalde_view(path: str | Path):
    """`path`, or a copy whose .pcf lacks PRECISION lines: pertalde 0.1.5's .pcf grammar does
    not know Paraver's PRECISION keyword (which Paraver reads, see research/CFG_FORMAT.md)."""
    path = Path(path)
    base = path.name[:-7] if path.name.endswith(".prv.gz") else path.name[:-4]
    pcf = path.with_name(base + ".pcf").read_text()
    if "\nPRECISION " not in pcf:
        yield path
        return
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / path.name
        target.symlink_to(path.resolve())
        (Path(tmp) / (base + ".row")).symlink_to(path.with_name(base + ".row").resolve())
        (Path(tmp) / (base + ".pcf")).write_text(
            "\n".join(x for x in pcf.splitlines() if not x.startswith("PRECISION ")) + "\n")
        yield target


def ptd() -> str | None:
    found = shutil.which("ptd") or str(Path(sys.executable).with_name("ptd"))
    return found if Path(found).exists() else None


def validate(path: str | Path, report=None) -> None:
    """Our strict checker (or its `report` of the trace, made before) and, when installed,
    pertalde's `ptd comprovar -e` must accept it."""
    report = check_trace(path) if report is None else report
    assert report.ok, "\n".join(report.messages())
    if ptd() is None:
        return
    with pertalde_view(path) as target:
        proc = subprocess.run([ptd(), "comprovar", "-e", str(target)], capture_output=True,
                              text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def sql(db: str | Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def tables(db: str | Path) -> set[str]:
    return {r[0] for r in sql(db, "SELECT name FROM sqlite_master WHERE type='table'")}


def without_detail(full: dict) -> dict:
    """An analysis' dict as `analyze_path(detail=False)` must give it: no per-process
    groups, launch statistics or NVTX ranges; every other number the same."""
    out = {**full, "processes": []}
    if full["idle"] is not None:
        i = full["idle"]
        out["idle"] = {
            **i, "launches": [], "short_kernel_share": None,
            "notes": [n for n in i["notes"] if not n.startswith("no kernel launch could")],
            "devices": [{**g, "nvtx": {}} for g in i["devices"]],
            "processes": [{**g, "nvtx": {}} for g in i["processes"]],
            "job": {**i["job"], "nvtx": {}},
            "top": [{**f, "nvtx": None} for f in i["top"]]}
    return out


def thread_ids(tr: Trace) -> dict[tuple[int, int], tuple[int, int]]:
    """(task, thread) of every CPU thread row -> (pid, tid), read from the `.row` labels
    ('... (pid N)' tasks, '... (tid N)' threads) in the header's task order."""
    import re

    from nsys2prv.paraver.check import parse_header

    levels: dict[str, list[str]] = {}
    name = None
    for line in tr.row.splitlines():
        if line.startswith("LEVEL "):
            name = line.split()[1]
            levels[name] = []
        elif line.strip() and name is not None:
            levels[name].append(line)
    header = parse_header(tr.header)
    out, k = {}, 0
    for task, (threads, _node) in enumerate(header.tasks, start=1):
        pid = int(re.search(r"\bpid (\d+)", levels["TASK"][task - 1]).group(1))
        for thread in range(1, threads + 1):
            m = re.search(r"\(tid (\d+)\)$", levels["THREAD"][k])
            k += 1
            if m:
                out[(task, thread)] = (pid, int(m.group(1)))
    return out


def stacks_of(tr: Trace, first_type: int, last_type: int) -> list[tuple]:
    """(pid, tid, time, labels, pairs) of every event line with a value (not 0, End) of type
    `first_type`: the labels of types first_type.. last_type on it, in type order (a
    sample's leaf and callers, or a call's callers at its entry), and all its pairs."""
    ids = thread_ids(tr)
    labels = tr.pcf_labels(first_type)
    out = []
    for task, thread, time, pairs in tr.events:
        d = dict(pairs)
        if not d.get(first_type):
            continue
        stack = tuple(labels[d[t]] for t in sorted(d) if first_type <= t <= last_type)
        out.append((*ids[(task, thread)], time, stack, d))
    return out
