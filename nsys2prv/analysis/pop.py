"""A copy of a trace for POP's own tools (NAG's pypop, POP analysts' paramedir cfgs).

POP's tools read a Paraver trace as Extrae writes it: every thread is an application thread
(pypop's parallel efficiency averages useful time over *all* threads, to count OpenMP-style
serialisation), and the .row names threads `THREAD a.t.h`, the labels paramedir gives when
there is no .row (pypop parses the task and thread numbers out of them). An nsys2prv trace
has more rows per process: OS-runtime helper threads (Open MPI's progress threads, nsys's),
rows without a thread (tid 0), GPU streams. `pop_trace` writes a copy with only the
application's CPU threads - the rows the trace shows Running at some time (see
`nsys2prv.model.rows.default_states`), and the main thread of each process - renumbered, with
Extrae-style labels. Records on the other rows (and communications with an end on one) are
left out; everything else is copied byte for byte.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import polars as pl

from ..errors import InputError, UsageError
from ..paraver.output import TraceWriter
from ..paraver.read import (BLOCK, HEADER, companion, file_blocks, make_scanner, open_text,
                            read_layout, windows)
from ..paraver.writeid import is_mark, unmark_pcf


def application_rows(path: str | Path) -> list[int]:
    """0-based rows of the trace that are application CPU threads: Running at some time, or
    the main thread (tid = pid) of their process; at least one row per process. The trace
    is read window by window (the CPU rows' states only)."""
    running: set[int] = set()
    rows = None
    for window in windows(path, frozenset(), state_rows="cpu"):
        rows = window.rows
        running.update(window.states.filter(pl.col("state") == 1)["row"].unique().to_list())
    assert rows is not None
    labelled = rows.with_columns(
        pl.col("task_label").str.extract(r"\(pid (\d+)\)", 1).alias("pid"),
        pl.col("label").str.extract(r"\(tid (\d+)\)", 1).alias("tid"))
    keep = []
    # every task keeps a row: a Paraver task has at least one thread (a process whose
    # report has GPU rows only keeps its first one)
    for task in labelled.partition_by("task_index", maintain_order=True):
        mine = [r["row"] for r in task.filter(pl.col("kind") == "cpu").iter_rows(named=True)
                if r["row"] in running or (r["pid"] is not None and r["pid"] == r["tid"])]
        cpu = task.filter(pl.col("kind") == "cpu")["row"]
        keep += mine or [cpu[0] if cpu.len() else task["row"][0]]
    return sorted(keep)


def pop_trace(src: str | Path, dst: str | Path) -> list[int]:
    """Write `dst` (.prv, with .pcf and an Extrae-style .row) holding only the application
    rows of `src`; returns the kept rows (0-based, in `src`)."""
    src, dst = Path(src), Path(dst)
    if not (dst.name.endswith(".prv") or dst.name.endswith(".prv.gz")):
        raise UsageError(f"{dst}: the POP copy must be a .prv or .prv.gz")
    keep = application_rows(src)
    with open_text(src) as f:
        header = f.readline().rstrip("\n")
    m = HEADER.match(header)
    if not m:
        raise InputError(f"{src}: not a Paraver trace header")
    date, end, unit, resources = m["date"], m["end"], m["unit"], m["resources"]
    n_appl, _, apps = m["rest"].partition(":")
    if int(n_appl) != 1:
        raise InputError(f"{src}: a POP copy needs a trace with one application")
    spec = re.match(r"(\d+)\(([^)]*)\)(.*)$", apps)
    assert spec is not None
    tasks = [tuple(int(x) for x in p.split(":")) for p in spec[2].split(",")]
    # (task, thread) -> new thread; rows are numbered task by task, as in the header
    old = [(t, h) for t, (threads, _) in enumerate(tasks, start=1)
           for h in range(1, threads + 1)]
    kept = [old[r] for r in keep]
    new_thread: dict[tuple[int, int], int] = {}
    count = [0] * len(tasks)
    for t, h in kept:
        count[t - 1] += 1
        new_thread[(t, h)] = count[t - 1]
    nodes = [node for _, node in tasks]
    n_nodes = int(resources.split("(")[0]) if resources else max(nodes)
    per_node = [0] * n_nodes
    for t, n in enumerate(count, start=1):
        per_node[nodes[t - 1] - 1] += n
    # virtual CPUs node by node, rows in task order (as nsys2prv numbers them)
    new_cpu: dict[tuple[int, int], int] = {}
    nxt = 1
    for node in range(1, n_nodes + 1):
        for t, h in kept:
            if nodes[t - 1] == node:
                new_cpu[(t, h)] = nxt
                nxt += 1
    unit_s = f"_{unit}" if unit else ""
    head = (f"#Paraver ({date}):{end}{unit_s}:{n_nodes}({','.join(map(str, per_node))}):1:"
            f"{len(tasks)}({','.join(f'{c}:{n}' for c, n in zip(count, nodes))}){spec[3]}")
    # the body rewritten by the engine's scanner: records of other rows dropped, cpu and
    # thread ids renumbered, everything else copied byte for byte
    row_map = [-1] * len(old)
    for r, key in zip(keep, kept):
        row_map[r] = new_cpu[key] << 32 | new_thread[key]
    layout = read_layout(src)
    scanner = make_scanner(layout, row_map=row_map)
    pcf = companion(src, ".pcf")
    with gzip.open(src, "rb") if src.name.endswith(".gz") else open(src, "rb") as fin, \
            TraceWriter(dst) as writer:  # atomic, with its own write id
        fin.readline()
        writer.begin(head + "\n", unmark_pcf(pcf.read_text()) if pcf.exists() else "",
                     _extrae_row(kept, new_thread, new_cpu, nodes, n_nodes,
                                 companion(src, ".row")))
        second = fin.readline()  # the source's write id is not the copy's
        if not is_mark(second):
            scanner.feed(second)
        for block in file_blocks(fin, BLOCK):
            scanner.feed(block)
            writer.write_bytes(scanner.take()["text"])
        writer.write_bytes(scanner.take(final=True)["text"])
        writer.commit()
    return keep


def _extrae_row(kept: list[tuple[int, int]], new_thread: dict, new_cpu: dict,
                nodes: list[int], n_nodes: int, src_row: Path) -> str:
    """A .row with paramedir's default labels (`THREAD 1.t.h`, `TASK 1.t`, `CPU n`) and the
    node names of the source .row."""
    names = [f"NODE {n}" for n in range(1, n_nodes + 1)]
    if src_row.exists():
        lines = src_row.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("LEVEL NODE SIZE"):
                names = lines[i + 1:i + 1 + n_nodes]
    cpus = sorted(new_cpu.values())
    out = [f"LEVEL CPU SIZE {len(cpus)}", *(f"CPU {c}" for c in cpus), "",
           f"LEVEL NODE SIZE {n_nodes}", *names, "",
           "LEVEL APPL SIZE 1", "APPL 1", "",
           f"LEVEL TASK SIZE {len(nodes)}", *(f"TASK 1.{t}" for t in range(1, len(nodes) + 1)),
           "", f"LEVEL THREAD SIZE {len(kept)}",
           *(f"THREAD 1.{t}.{new_thread[(t, h)]}" for t, h in kept)]
    return "\n".join(out) + "\n"
