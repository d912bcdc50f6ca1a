"""A strict validator for Paraver traces (`nsys2prv check`).

Paraver itself accepts many broken traces silently (see docs/troubleshooting.md), so this
checks what it does not: the header grammar; that every object id is inside the header; that
CPUs belong to their task's node; record field counts and integer syntax (int64);
non-decreasing record times; no overlapping states on a row (and whether states tile each
row); one event record per (row, time); every event type and labelled value in the `.pcf`;
`.pcf` numbers within int32; `.row` level sizes. The body is checked in chunks of lines,
column-wise (each line's syntax by one regular expression, then all its numbers parsed at
once by numpy), so large traces are checked in bounded memory.
"""

from __future__ import annotations

import gzip
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ..errors import InputError
from .writeid import check_set

HEADER_RE = re.compile(
    r"^#Paraver \((?P<date>[^)]*)\):(?P<end>\d+)(?P<unit>_ns|_us|_ms)?:"
    r"(?P<res>0|\d+(?:\([\d,]+\))?):(?P<nappl>\d+):(?P<appls>.*)$")
# a record line whose every field is an integer (an optional minus sign, ASCII digits: 19 at
# most; a line with a field of 19 digits, LONG_RE, has its fields checked against int64)
LINE_RE = r"^-?[0-9]{1,19}(?::-?[0-9]{1,19})*$"
LONG_RE = r"(?:^|:)-?[0-9]{19}(?::|$)"
# trace text checked at a time (on a 1M-activity trace: peak RSS 0.42 GiB at 16 MiB, 1.35 at
# 64 MiB; aiprof_opt2: 433 -> 190 MB and 0.7 GB less address space at 4 MiB, same time)
CHUNK_BYTES = 4 << 20
MAX_MESSAGES = 50


@dataclass
class Header:
    end_time: int
    cpus_per_node: list[int]
    tasks: list[tuple[int, int]]  # per task of every application, in order: (threads, node)
    applications: list[list[tuple[int, int]]]

    @property
    def total_cpus(self) -> int:
        return sum(self.cpus_per_node)

    @property
    def appl_offsets(self) -> list[int]:
        """Index in `tasks` of each application's first task, then the task count."""
        out = [0]
        for a in self.applications:
            out.append(out[-1] + len(a))
        return out


@dataclass
class CheckReport:
    path: Path
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    event_counts: dict[int, int] = field(default_factory=dict)  # type -> non-zero values
    header: Header | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, msg: str) -> None:
        if len(self.errors) < MAX_MESSAGES:
            self.errors.append(msg)
        elif len(self.errors) == MAX_MESSAGES:
            self.errors.append("... more errors not shown")

    def messages(self) -> list[str]:
        out = [f"{self.path}: error: {e}" for e in self.errors]
        out += [f"{self.path}: warning: {w}" for w in self.warnings]
        if self.ok:
            c = self.counts
            out.append(f"{self.path}: OK ({c.get('states', 0)} states, {c.get('events', 0)} "
                       f"event records, {c.get('comms', 0)} communications)")
        return out


def parse_header(line: str) -> Header:
    m = HEADER_RE.match(line.rstrip("\n"))
    if not m:
        raise ValueError("first line is not a Paraver header '#Paraver (date):end_ns:...'")
    if m.group("unit") != "_ns":
        raise ValueError("header end time must be in nanoseconds ('_ns')")
    res = m.group("res")
    if res == "0":
        cpus: list[int] = []
    elif "(" in res:
        n, inner = res[:-1].split("(")
        cpus = [int(x) for x in inner.split(",")]
        if len(cpus) != int(n):
            raise ValueError(f"header declares {n} nodes but lists {len(cpus)} CPU counts")
    else:
        cpus = [1] * int(res)
    nappl = int(m.group("nappl"))
    rest = m.group("appls")
    apps = []
    pos = 0
    for _ in range(nappl):
        am = re.compile(r"(\d+)\(([^)]*)\)").match(rest, pos)
        if not am:
            raise ValueError("malformed application list in header")
        ntasks = int(am.group(1))
        specs = am.group(2).split(",")
        if len(specs) != ntasks or ntasks < 1:
            raise ValueError(f"application declares {ntasks} tasks but lists {len(specs)}")
        tasks = []
        for s in specs:
            th, node = (int(x) for x in s.split(":"))
            if th < 1:
                raise ValueError("a task has no threads")
            if cpus and not 1 <= node <= len(cpus):
                raise ValueError(f"task on node {node}, but the header has {len(cpus)} nodes")
            tasks.append((th, node))
        apps.append(tasks)
        pos = am.end()
        if pos < len(rest) and rest[pos] in ":,":
            pos += 1
    tail = rest[pos:]
    if tail and not re.fullmatch(r"\d+", tail):
        raise ValueError(f"unexpected text after the applications: {tail[:40]!r}")
    if tail and int(tail):
        raise ValueError("communicator lines are not supported by this checker")
    return Header(int(m.group("end")), cpus, [t for a in apps for t in a], apps)


def parse_pcf(text: str) -> tuple[dict[int, dict[int, str]], list[str]]:
    """type -> {value: label} (empty dict for types without VALUES; labels whole, tabs read
    as spaces), and problems found."""
    problems = []
    types: dict[int, dict[int, str]] = {}
    section = None
    group: list[int] = []
    in_values = False
    names = {"DEFAULT_OPTIONS", "DEFAULT_SEMANTIC", "STATES", "STATES_COLOR", "EVENT_TYPE",
             "GRADIENT_COLOR", "GRADIENT_NAMES"}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.replace("\t", " ").strip()
        if not line or line.startswith("#"):
            continue
        if line in names:
            section, group, in_values = line, [], False
            continue
        if section != "EVENT_TYPE":
            continue
        if line == "VALUES":
            in_values = True
            continue
        if line.startswith("PRECISION"):
            continue
        parts = line.split(None, 1 if in_values else 2)  # a value's label holds spaces
        try:
            if in_values:
                v = int(parts[0])
                if not -2**31 <= v < 2**31:
                    problems.append(f".pcf line {n}: value {v} outside int32")
                for t in group:
                    types[t][v] = parts[1] if len(parts) > 1 else ""
            else:
                t = int(parts[1])
                if not 0 < t < 2**31:
                    problems.append(f".pcf line {n}: type {t} outside int32")
                group.append(t)
                types.setdefault(t, {})
        except (ValueError, IndexError):
            problems.append(f".pcf line {n}: cannot parse {line[:60]!r}")
    return types, problems


def pcf_type_labels(text: str) -> dict[int, str]:
    """type -> label of every EVENT_TYPE line of a .pcf."""
    out: dict[int, str] = {}
    section = None
    for raw in text.splitlines():
        line = raw.replace("\t", " ").strip()
        if line.isupper() and " " not in line:
            section = line
            continue
        if section == "EVENT_TYPE":
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].lstrip("-").isdigit() and parts[1].isdigit():
                out[int(parts[1])] = parts[2]
    return out


def parse_row(text: str) -> dict[str, tuple[int, list[str]]]:
    """level -> (declared size, names found before the next section)."""
    levels: dict[str, tuple[int, list[str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        m = re.match(r"^LEVEL (\w+) SIZE (\d+)$", line)
        if m:
            current = m.group(1)
            levels[current] = (int(m.group(2)), [])
        elif current is not None and line and not line.startswith("#"):
            levels[current][1].append(line)
    return levels


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")  # noqa: SIM115


def check_trace(path: str | Path) -> CheckReport:
    path = Path(path)
    rep = CheckReport(path)
    if not path.is_file():
        rep.error("no such file")
        return rep
    base = path.name[:-7] if path.name.endswith(".prv.gz") else path.name[:-4]
    pcf_path, row_path = path.with_name(base + ".pcf"), path.with_name(base + ".row")
    try:  # the .pcf and .row of another write say nothing about this .prv
        check_set(path)
    except InputError as e:
        rep.error(str(e).removeprefix(f"{path}: "))
        return rep
    with _open_text(path) as fh:
        first = fh.readline()
        try:
            header = parse_header(first)
        except ValueError as e:
            rep.error(f"header: {e}")
            return rep
        rep.header = header
        pcf_types: dict[int, dict[int, str]] | None = None
        if pcf_path.is_file():
            pcf_types, problems = parse_pcf(pcf_path.read_text(encoding="utf-8",
                                                               errors="replace"))
            for p in problems:
                rep.error(p)
        else:
            rep.error(f"missing {pcf_path.name}")
        if row_path.is_file():
            _check_row(rep, header, parse_row(row_path.read_text(encoding="utf-8",
                                                                 errors="replace")))
        else:
            rep.error(f"missing {row_path.name}")
        _check_body(rep, header, fh, pcf_types)
    return rep


def _check_row(rep: CheckReport, header: Header, levels) -> None:
    expect = {"CPU": header.total_cpus, "NODE": len(header.cpus_per_node),
              "TASK": len(header.tasks), "THREAD": sum(t for t, _ in header.tasks)}
    for level, n in expect.items():
        if level not in levels:
            continue
        declared, names = levels[level]
        if declared != n:
            rep.error(f".row: LEVEL {level} SIZE {declared}, but the header has {n}")
        elif len(names) != declared:
            rep.error(f".row: LEVEL {level} declares {declared} names but lists {len(names)}")
    if "THREAD" not in levels:
        rep.error(".row: no LEVEL THREAD section")


class _BodyState:
    def __init__(self, header: Header) -> None:
        # Global thread index of (task, thread) and node of each task.
        self.thread_base = np.zeros(len(header.tasks) + 2, dtype=np.int64)
        acc = 0
        for i, (th, _) in enumerate(header.tasks, start=1):
            self.thread_base[i] = acc
            acc += th
        self.n_threads = acc
        self.thread_base[len(header.tasks) + 1] = acc  # the end of the last task
        self.threads_of_task = np.array([0] + [t for t, _ in header.tasks], dtype=np.int64)
        self.node_of_task = np.array([0] + [n for _, n in header.tasks], dtype=np.int64)
        cpu_node = [0]
        for node, n in enumerate(header.cpus_per_node, start=1):
            cpu_node += [node] * n
        self.node_of_cpu = np.array(cpu_node, dtype=np.int64)
        # first global task (1-based) of each application (1-based), the task count after
        self.appl_first = np.array([0, *(o + 1 for o in header.appl_offsets)], dtype=np.int64)
        self.last_time = -1
        self.last_state_end = np.full(acc + 1, -1, dtype=np.int64)
        self.covered = np.zeros(acc + 1, dtype=np.int64)
        self.last_event_keys: set[tuple[int, int]] = set()


def _check_body(rep: CheckReport, header: Header, fh, pcf_types) -> None:
    st = _BodyState(header)
    counts = {"states": 0, "events": 0, "comms": 0, "comments": 0}
    event_counts: dict[int, int] = {}
    unlabelled: dict[int, set[int]] = {}
    missing_types: set[int] = set()
    line_no = 1
    while True:
        lines = fh.readlines(CHUNK_BYTES)  # whole lines, about CHUNK_BYTES at a time
        if not lines:
            break
        _check_lines(rep, st, lines, line_no, header, counts, event_counts, pcf_types,
                     unlabelled, missing_types)
        line_no += len(lines)
    if missing_types:
        rep.error(f"event types not in the .pcf: {sorted(missing_types)[:20]}")
    for t, vals in sorted(unlabelled.items()):
        rep.error(f"type {t}: values without a .pcf label: {sorted(vals)[:10]}")
    rep.counts = counts
    rep.event_counts = event_counts
    extent = np.full(st.n_threads, header.end_time, dtype=np.int64)
    if len(header.applications) > 1:  # runs of different lengths: each to its own end
        for a in range(len(header.applications)):
            lo, hi = (int(st.thread_base[st.appl_first[a + k]]) for k in (1, 2))
            extent[lo:hi] = max(0, int(st.last_state_end[1 + lo:1 + hi].max(initial=0)))
    gaps = int(np.sum(st.covered[1:] != extent))
    if counts["states"] and gaps:
        rep.warnings.append(f"{gaps} of {st.n_threads} rows are not fully covered by states")


def _global_task(st: _BodyState, appl: np.ndarray, task: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(global 1-based task, whether the (appl, task) pair is in the header)."""
    n_appl = len(st.appl_first) - 2
    ok = (appl >= 1) & (appl <= n_appl)
    a = np.where(ok, appl, 1)
    first, after = st.appl_first[a], st.appl_first[a + 1]
    ok &= (task >= 1) & (task <= after - first)
    return np.where(ok, first + task - 1, 0), ok


def _check_lines(rep, st: _BodyState, lines, first_line_no, header, counts, event_counts,
                 pcf_types, unlabelled, missing_types) -> None:
    s = pl.Series("l", lines, dtype=pl.Utf8).str.strip_chars_end("\r\n")  # as read: with \n
    df = pl.DataFrame({"l": s, "n": np.arange(first_line_no + 1, first_line_no + 1 + len(lines))})
    comment = df["l"].str.starts_with("#")
    counts["comments"] += int(comment.sum())
    # the record's kind, field count and integer syntax from the line's text (one pass of
    # the string column each)
    parts = df.filter(~comment).with_columns(
        (pl.col("l").str.count_matches(":", literal=True) + 1).alias("nf"),
        pl.col("l").str.extract(r"^([^:]*)", 1).alias("k"),
        pl.col("l").str.contains(LINE_RE).alias("ints"))
    long = parts.filter(pl.col("ints") & pl.col("l").str.contains(LONG_RE))
    if long.height:  # numbers beyond int64 (which numpy's parser would saturate): not integers
        over = [n for n, line in long.select("n", "l").iter_rows()
                if not all(-(1 << 63) <= int(x) < 1 << 63 for x in line.split(":"))]
        parts = parts.with_columns(pl.col("ints") & ~pl.col("n").is_in(over))
    bad_kind = parts.filter(~pl.col("k").is_in(["1", "2", "3"]))
    for n, l in bad_kind.select("n", "l").head(5).iter_rows():
        rep.error(f"line {n}: unknown record kind: {l[:60]!r}")
    shape = ((pl.col("k") == "1") & (pl.col("nf") != 8)) | (
        (pl.col("k") == "3") & (pl.col("nf") != 15)) | (
        (pl.col("k") == "2") & ((pl.col("nf") < 8) | (pl.col("nf") % 2 == 1)))
    for n, l in parts.filter(shape).select("n", "l").head(5).iter_rows():
        rep.error(f"line {n}: wrong number of fields: {l[:80]!r}")
    parts = parts.filter(pl.col("k").is_in(["1", "2", "3"]) & ~shape)
    for n, l in parts.filter(~pl.col("ints")).select("n", "l").head(5).iter_rows():
        rep.error(f"line {n}: a field is not an integer (of int64): {l[:80]!r}")
    parts = parts.filter(pl.col("ints"))
    if parts.height == 0:
        return
    # every field of the well-formed lines as one array of numbers (numpy's C parser), and
    # where each line's fields start in it
    nf = parts["nf"].to_numpy().astype(np.int64)
    fields = np.fromstring(parts["l"].str.join(":").item(), dtype=np.int64, sep=":")
    if len(fields) != int(nf.sum()):  # the lines were checked: never expected
        raise AssertionError("trace fields misparsed")
    off = np.zeros(len(nf), dtype=np.int64)
    np.cumsum(nf[:-1], out=off[1:])
    line_no, text = parts["n"].to_numpy(), parts["l"]
    kind, cpu, appl, task, thread, times = (fields[off + i] for i in range(6))
    end = header.end_time
    tt = st.threads_of_task
    nt = st.node_of_task
    nc = st.node_of_cpu
    # object ids
    gtask, ok_obj = _global_task(st, appl, task)
    ok_obj &= thread >= 1
    safe_task = np.where(ok_obj, gtask, 0)
    ok_obj &= thread <= tt[safe_task]
    ok_cpu = (cpu >= 0) & (cpu <= header.total_cpus)
    safe_cpu = np.where(ok_cpu, cpu, 0)
    ok_cpu &= (cpu == 0) | (nc[safe_cpu] == nt[safe_task])
    bad = ~(ok_obj & ok_cpu)
    for i in np.flatnonzero(bad)[:5]:
        rep.error(f"line {line_no[i]}: object or CPU outside the header / on another node: "
                  f"{text[int(i)][:60]!r}")
    if (times < 0).any():
        rep.error(f"line {line_no[np.argmax(times < 0)]}: negative time")
    if (times > end).any():
        rep.error(f"line {line_no[np.argmax(times > end)]}: record after the header end "
                  f"time {end}")
    order = np.diff(np.concatenate(([st.last_time], times)))
    if (order < 0).any():
        rep.error(f"line {line_no[np.argmax(order < 0)]}: records out of time order")
    st.last_time = int(times[-1])
    gthread = st.thread_base[safe_task] + np.where(bad, 0, thread)
    # states
    sm = (kind == 1) & ~bad
    if sm.any():
        sn, begin, send = line_no[sm], times[sm], fields[off[sm] + 6]
        gt = gthread[sm]
        if (send <= begin).any():
            rep.error(f"line {sn[np.argmax(send <= begin)]}: state ends before it begins (or "
                      "is empty)")
        if (send > end).any():
            rep.error(f"line {sn[np.argmax(send > end)]}: state ends after the header end time")
        # overlap per thread (rows sorted by begin time already)
        order_idx = np.lexsort((begin, gt))
        gts, bs, es = gt[order_idx], begin[order_idx], send[order_idx]
        prev_end = np.concatenate(([0], es[:-1]))
        same = np.concatenate(([False], gts[1:] == gts[:-1]))
        prev_end = np.where(same, prev_end, st.last_state_end[gts])
        overlap = bs < prev_end
        if overlap.any():
            i = int(np.flatnonzero(overlap)[0])
            rep.error(f"line {sn[order_idx[i]]}: state overlaps the previous state of its row")
        last = np.zeros_like(st.last_state_end)
        np.maximum.at(last, gts, es)
        st.last_state_end = np.maximum(st.last_state_end, last)
        np.add.at(st.covered, gts, es - bs)
        counts["states"] += int(sm.sum())
    # events
    em = (kind == 2) & ~bad
    if em.any():
        rows, at = gthread[em], times[em]
        # records of one row at one time: neighbours once sorted by (row, time); the first
        # such pair in that order is the one reported
        by_key = np.lexsort((at, rows))
        r, t = rows[by_key], at[by_key]
        twice = (r[1:] == r[:-1]) & (t[1:] == t[:-1])
        if twice.any():
            rep.error(f"two event records for one row at time {int(t[int(np.argmax(twice))])} "
                      "(must be one multi-event line)")
        last = at == st.last_time
        edge = set(zip(rows[last].tolist(), at[last].tolist()))
        if st.last_event_keys & set(zip(rows[:64].tolist(), at[:64].tolist())):
            rep.error("two event records for one row at the same time across lines")
        st.last_event_keys = edge
        # the (type, value) pairs: fields 6, 8, ... of each event line and the one after each
        pairs = (nf[em] - 6) // 2
        first = np.repeat(off[em] + 6 - 2 * (np.cumsum(pairs) - pairs), pairs)
        at_type = first + 2 * np.arange(len(first))
        types_, values = fields[at_type], fields[at_type + 1]
        got, n_set = np.unique(types_[values != 0], return_counts=True)
        for t, c in zip(got.tolist(), n_set.tolist()):
            event_counts[t] = event_counts.get(t, 0) + c
        if pcf_types is not None:
            types = set(np.unique(types_).tolist())
            missing_types.update(types - set(pcf_types))
            labelled = {t for t in types if pcf_types.get(t)}
            if labelled:
                vals = pl.DataFrame({"t": types_, "v": values}).filter(
                    pl.col("t").is_in(sorted(labelled))).unique()
                for t, v in vals.iter_rows():
                    if v not in pcf_types[t]:
                        unlabelled.setdefault(t, set()).add(v)
        counts["events"] += int(em.sum())
    # communications
    cm = (kind == 3) & ~bad
    if cm.any():
        cn, at = line_no[cm], off[cm]
        ps, rcpu, rappl, rtask, rthread, lr, pr = (fields[at + i] for i in range(6, 13))
        rt, ok = _global_task(st, rappl, rtask)
        srt = np.where(ok, rt, 0)
        ok &= (rthread >= 1) & (rthread <= tt[srt])
        ok &= (rcpu >= 0) & (rcpu <= header.total_cpus)
        ok &= (rcpu == 0) | (nc[np.where((rcpu >= 0) & (rcpu <= header.total_cpus), rcpu, 0)]
                             == nt[srt])
        for i in np.flatnonzero(~ok)[:5]:
            rep.error(f"line {cn[i]}: communication receiver outside the header")
        for v in (ps, lr, pr):
            if ((v < 0) | (v > end)).any():
                rep.error(f"line {cn[np.argmax((v < 0) | (v > end))]}: communication time "
                          "outside the trace")
        counts["comms"] += int(cm.sum())
