"""The Paraver resource and process model of the whole trace.

* one node per host (reports from the same host share it);
* one task per process that has any record, ordered by MPI rank where known, then by input
  order and pid;
* inside a task: its CPU threads (main thread first, then by tid), then one row per GPU
  stream ordered by (device, context, stream);
* one virtual CPU per row, numbered node by node, so node- and CPU-level views add up the
  rows of each host.

Rows are keyed by (report, local row), so equal pids or stream ids in different reports, or
equal stream ids on different devices, never collide.

A trace of several runs (`combine_models`, e.g. before and after a change) has one Paraver
application per run, each with the nodes, tasks and rows its run alone would have; the
engine's task ids then carry the application in their high bits (`Task.engine_id`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np


@dataclass
class Row:
    """One row of the trace (a CPU thread or a GPU stream lane of a report), with the
    Paraver numbers the model gives it."""

    report: int
    local: int
    kind: str  # "cpu" | "gpu"
    pid: int
    tid: int | None
    device: int | None
    context: int | None
    stream: int | None
    lane: int | None
    first: int
    last: int
    label: str = ""
    thread: int = 0  # 1-based within its task
    cpu: int = 0  # 1-based global virtual CPU


APPL_SHIFT = 32  # an engine task id: (application - 1) << APPL_SHIFT | task number


@dataclass
class Task:
    """One process of a report (a Paraver task, in rank order), and its rows."""

    report: int
    pid: int
    rank: int | None
    name: str | None
    node: int = 0  # 1-based
    rows: list[Row] = field(default_factory=list)
    number: int = 0  # 1-based, within its application
    appl: int = 1  # 1-based Paraver application (the run, in a trace of several)

    @property
    def engine_id(self) -> int:
        """The task as the engine writes it: 'appl:task' from one integer (see _engine.c)."""
        return (self.appl - 1) << APPL_SHIFT | self.number

    @property
    def tag(self) -> str:
        """Short name of the task, the prefix of its rows' labels in a trace of many."""
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    @property
    def label(self) -> str:
        name = f" {self.name}" if self.name else ""
        return f"{self.tag}{name} (pid {self.pid})" if self.rank is not None \
            else f"{self.tag}{name}"


@dataclass
class ResourceModel:
    """The trace's nodes (hosts), tasks and rows: what the .row file and the records'
    cpu:appl:task:thread fields say."""

    nodes: list[str]
    tasks: list[Task]  # application by application
    reports: int
    report_hosts: list[str] = field(default_factory=list)  # node name of each report
    # a trace of several runs: the label of each application (empty: one application)
    applications: list[str] = field(default_factory=list)
    application_names: list[str] = field(default_factory=list)  # what each one ran

    @property
    def rows(self) -> list[Row]:
        return [r for t in self.tasks for r in t.rows]

    def cpus_per_node(self) -> list[int]:
        counts = [0] * len(self.nodes)
        for t in self.tasks:
            counts[t.node - 1] += len(t.rows)
        return counts

    def lookup(self, report: int, n_local: int) -> dict[str, np.ndarray]:
        """Arrays indexed by local row id: global order, cpu, task, thread (0 = no row)."""
        order = np.zeros(n_local, dtype=np.int64)
        cpu = np.zeros(n_local, dtype=np.int64)
        task = np.zeros(n_local, dtype=np.int64)
        thread = np.zeros(n_local, dtype=np.int64)
        for g, r in enumerate(self.rows):
            if r.report == report:
                order[r.local] = g
                cpu[r.local] = r.cpu
                task[r.local] = self._task_of[(r.report, r.local)]
                thread[r.local] = r.thread
        return {"order": order, "cpu": cpu, "task": task, "thread": thread}

    def __post_init__(self) -> None:
        self._task_of = {(r.report, r.local): t.engine_id for t in self.tasks for r in t.rows}

    def task_of(self, row: Row) -> int:
        """The engine task id of a row's task (Task.engine_id)."""
        return self._task_of[(row.report, row.local)]

    def application_tasks(self) -> list[list[Task]]:
        """The tasks of each application, in order."""
        out: list[list[Task]] = [[] for _ in range(max(1, len(self.applications)))]
        for t in self.tasks:
            out[t.appl - 1].append(t)
        return out

    def prefix(self, appl: int) -> str:
        """What the labels of an application's tasks and rows start with ('before: ')."""
        return f"{self.applications[appl - 1]}: " if self.applications else ""


def _row_label(row: Row, task: Task, thread_names: dict[str, str], gpus: dict[str, str]) -> str:
    if row.kind in ("gpu", "metrics"):
        model = gpus.get(str(row.device))
        if model is None and len(set(gpus.values())) == 1:
            model = next(iter(gpus.values()))
        suffix = f" ({model})" if model else ""
        if row.kind == "metrics":
            return f"GPU {row.device} metrics{suffix}"
        lane = f" lane {row.lane}" if row.lane else ""
        return f"GPU {row.device} ctx {row.context} stream {row.stream}{lane}{suffix}"
    name = thread_names.get(f"{row.pid}:{row.tid}")
    main = " main" if row.tid == row.pid else ""
    return f"{name or 'thread'}{main} (tid {row.tid})"


def build_model(metas: list[dict], hosts: list[str | None] | None = None) -> ResourceModel:
    """Resource model from the partial metadata of every report (in input order)."""
    hosts = list(hosts) if hosts else [None] * len(metas)
    tasks: list[Task] = []
    node_of_report: list[str] = []
    missing_host = []
    for i, meta in enumerate(metas):
        host = hosts[i] or meta["report"].get("host")
        if not host:
            host = meta["report"]["name"]
            missing_host.append(meta["report"]["name"])
        node_of_report.append(host)
        report_rank = meta["report"].get("rank")
        by_pid: dict[int, list[Row]] = {}
        for r in meta["rows"]:
            row = Row(i, r["row"], r["kind"], r["pid"], r.get("tid"), r.get("device"),
                      r.get("context"), r.get("stream"), r.get("lane"), r.get("first") or 0,
                      r.get("last") or 0)
            by_pid.setdefault(row.pid, []).append(row)
        for pid, rows in by_pid.items():
            proc = meta["processes"].get(str(pid), {})
            rank = proc.get("rank")
            if rank is None and report_rank is not None:
                rank = report_rank
            task = Task(i, pid, rank, proc.get("name"))
            cpu = sorted((r for r in rows if r.kind == "cpu"),
                         key=lambda r: (r.tid != r.pid, r.tid))
            gpu = sorted((r for r in rows if r.kind == "gpu"),
                         key=lambda r: (r.device, r.context, r.stream, r.lane or 0))
            metrics = sorted((r for r in rows if r.kind == "metrics"), key=lambda r: r.device)
            task.rows = cpu + gpu + metrics
            for n, r in enumerate(task.rows, start=1):
                r.thread = n
                r.label = _row_label(r, task, meta.get("thread_names", {}), meta.get("gpus", {}))
            tasks.append(task)
    if missing_host and len(metas) > 1:
        warnings.warn("no host name in " + ", ".join(missing_host) +
                      ": each of them gets a node of its own (give --host-map to group them)",
                      stacklevel=2)
    tasks.sort(key=lambda t: (t.rank if t.rank is not None else math.inf, t.report, t.pid))
    if len(tasks) > 1:  # rows of many tasks look alike: say whose each is (rank, else pid)
        for t in tasks:
            for r in t.rows:
                r.label = f"{t.tag}: {r.label}"
    nodes: list[str] = []
    for t in tasks:
        host = node_of_report[t.report]
        if host not in nodes:
            nodes.append(host)
        t.node = nodes.index(host) + 1
    for n, t in enumerate(tasks, start=1):
        t.number = n
    # Virtual CPUs: node by node, each node's rows in task order.
    next_cpu = 1
    for node in range(1, len(nodes) + 1):
        for t in tasks:
            if t.node == node:
                for r in t.rows:
                    r.cpu = next_cpu
                    next_cpu += 1
    return ResourceModel(nodes, tasks, len(metas), node_of_report)


def combine_models(models: list[ResourceModel], labels: list[str], names: list[str]
                   ) -> ResourceModel:
    """One model of several runs, application k = run k: each run keeps the nodes, tasks,
    rows and CPUs (in that order) that its own trace has, its reports, nodes and CPUs
    numbered after those of the runs before it; nodes are named 'LABEL: host' (two runs on
    one host stay apart)."""
    nodes: list[str] = []
    tasks: list[Task] = []
    hosts: list[str] = []
    reports = cpus = 0
    for appl, (m, label) in enumerate(zip(models, labels), start=1):
        for t in m.tasks:
            rows = [replace(r, report=r.report + reports, cpu=r.cpu + cpus) for r in t.rows]
            tasks.append(replace(t, report=t.report + reports, node=t.node + len(nodes),
                                 rows=rows, appl=appl))
        nodes += [f"{label}: {n}" for n in m.nodes]
        hosts += m.report_hosts
        reports += m.reports
        cpus += sum(m.cpus_per_node())
    return ResourceModel(nodes, tasks, reports, hosts, list(labels), list(names))
