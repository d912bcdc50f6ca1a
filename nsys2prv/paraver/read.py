"""Read a Paraver trace (.prv/.prv.gz + .row) into polars frames, whole or in time windows.

The analysis works on the trace rather than on the exports so that its numbers are the ones
Paraver computes with the cfgs on the same file (same clock alignment, same time 0, same
trace end, same lanes); this module is what it reads with. Events are read with Paraver's
own semantics: on a row, the value of a set of types at time t is the last event of the set
at or before t, events at equal times in file order (paraver-kernel sorts each row stably by
time).
"""

from __future__ import annotations

import gzip
import queue
import re
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

import numpy as np
import polars as pl

from ..errors import InputError
from .writeid import check_set, companion  # noqa: F401 - companion: for the readers

HEADER = re.compile(r"^#Paraver \((?P<date>[^)]*)\):(?P<end>\d+)(?:_(?P<unit>[a-z]+))?:"
                     r"(?P<resources>[^:]*):(?P<rest>.*)$")


@dataclass
class Trace:
    """Rows (one per Paraver thread, with task, node, label, kind and GPU device), the
    trace end time (ns) and the event/state lines selected when reading."""

    path: Path
    end: int
    rows: pl.DataFrame  # row, appl, task, thread, node, label, kind, device, task_label
    events: pl.DataFrame  # row, time, type, value, seq (file order)
    states: pl.DataFrame  # row, begin, end, state
    comms: pl.DataFrame | None = None  # send_row, send, recv_row, recv, size, tag
    start: int = 0  # a window of the trace covers [start, end) (see `windows`)
    carried: int = 0  # leading events that carry the values open at `start` in

# a row label starts with its task's tag in a trace of several tasks ("rank 3: GPU 0 ...")
ROW_PREFIX = r"^(?:(?:rank|pid) -?\d+: )?"


def open_text(path: Path):
    return gzip.open(path, "rt") if path.suffix == ".gz" else open(path)




def _parse_header(line: str) -> tuple[int, list[tuple[int, int, int, int]]]:
    """End time in ns and (appl, task, threads, node) for every task of the header."""
    m = HEADER.match(line.strip())
    if not m:
        raise InputError(f"not a Paraver trace header: {line[:80]!r}")
    scale = {"ns": 1, "us": 1_000, "ms": 1_000_000}.get(m["unit"] or "us", 1_000)
    end = int(m["end"]) * scale
    rest = m["rest"]
    n_appl, _, apps = rest.partition(":")
    tasks = []
    for appl, spec in enumerate(re.findall(r"\d+\(([^)]*)\)", apps)[: int(n_appl)], start=1):
        for task, pair in enumerate(spec.split(","), start=1):
            threads, node = pair.split(":")
            tasks.append((appl, task, int(threads), int(node)))
    return end, tasks


def _row_labels(path: Path) -> tuple[list[str], list[str], list[str]]:
    """THREAD, TASK and APPL labels of the .row file (empty lists if absent)."""
    levels: dict[str, list[str]] = {}
    if not path.exists():
        return [], [], []
    current: list[str] | None = None
    remaining = 0
    for line in path.read_text().splitlines():
        if remaining:
            current.append(line)  # type: ignore[union-attr]
            remaining -= 1
            continue
        m = re.match(r"^LEVEL (\w+) SIZE (\d+)", line)
        if m:
            current = levels.setdefault(m[1], [])
            remaining = int(m[2])
    return levels.get("THREAD", []), levels.get("TASK", []), levels.get("APPL", [])


def _rows(tasks: list[tuple[int, int, int, int]], labels: list[str],
          task_labels: list[str], appl_labels: list[str] = ()) -> pl.DataFrame:
    recs = []
    for t_index, (appl, task, threads, node) in enumerate(tasks):
        for thread in range(1, threads + 1):
            recs.append((appl, task, thread, node, t_index))
    df = pl.DataFrame(recs, schema=["appl", "task", "thread", "node", "task_index"],
                      orient="row")
    n = df.height
    lab = (labels + [""] * n)[:n] if labels else [
        f"THREAD {a}.{t}.{h}" for a, t, h, _, _ in recs]
    tlab = [task_labels[i] if i < len(task_labels) else f"TASK {tasks[i][0]}.{tasks[i][1]}"
            for i in range(len(tasks))]
    df = df.with_columns(pl.Series("label", lab),
                         pl.int_range(pl.len(), dtype=pl.Int32).alias("row"))
    # "GPU d ...", or "rank r: GPU d ..." in a trace of several tasks; in a trace of several
    # runs each row starts with its run's label ("before: "), the APPL label's first part
    own = pl.col("label")
    napps = max((t[0] for t in tasks), default=1)
    if napps > 1 and len(appl_labels) >= napps:
        prefix = [a.split(": ", 1)[0] + ": " for a in appl_labels[:napps]]
        df = df.with_columns(pl.Series("_prefix", prefix).gather(df["appl"] - 1))
        own = pl.col("label").str.strip_prefix(pl.col("_prefix"))
    gpu = own.str.extract(f"{ROW_PREFIX}GPU (\\d+) ", 1).cast(pl.Int64)
    kind = (pl.when(own.str.contains(f"{ROW_PREFIX}GPU \\d+ metrics"))
            .then(pl.lit("metrics"))
            .when(own.str.contains(f"{ROW_PREFIX}GPU \\d+ ctx \\d+ stream \\d+"))
            .then(pl.lit("gpu")).otherwise(pl.lit("cpu")))
    return df.with_columns(gpu.alias("device"), kind.alias("kind"),
                           pl.Series("task_label", tlab).gather(df["task_index"])
                           ).drop("_prefix", strict=False)


# bytes of trace text scanned at a time (one window of `windows`): a window's frames, the
# next one read ahead and the one being scanned are held at once; at 32 MiB the 30M
# benchmark's pass rose ~100 MB above its floor (benchmarks/RESULTS.md, round 21)
BLOCK = 16 << 20
# A stream's records go into the scanner without text, so its windows are counted in merged
# records: as many as BLOCK bytes of text hold at 60 bytes a record (the 10M benchmark's 60.5;
# the corpus' 15-52, 39 on average), which gives that trace the windows its text gave and
# traces of shorter lines smaller ones (the memory of a window follows its records).
LINE_BYTES = 60
RECORDS = BLOCK // LINE_BYTES


@dataclass
class Layout:
    """What the header and the .row say: the trace end of the header, tasks, rows."""

    path: Path
    end: int
    tasks: list[tuple[int, int, int, int]]
    rows: pl.DataFrame


@runtime_checkable
class Streamed(Protocol):
    """A trace that is not a file (`pipeline.merge.TraceStream`): its .pcf and .row are at
    `path`, its text comes from `blocks()` (header first), again on every call. Where it is
    `scannable`, `scan_blocks(scanner, records)` gives the scanner what its text would,
    without the text (merged records straight into the columns), yielding between blocks."""

    path: Path
    header: str

    def blocks(self) -> Iterator[bytes]: ...


def _scannable(source: Source) -> bool:
    """Whether the records of `source` go into a scanner without text (`scan_blocks`)."""
    return isinstance(source, Streamed) and getattr(source, "scannable", False)


Source = str | Path | Streamed  # what every reader here takes: a trace file, or a stream


def source_path(source: "Source | TraceInfo") -> Path:
    """Where the trace is (a stream's .pcf and .row are there)."""
    if isinstance(source, TraceInfo):
        return source.path
    return source.path if isinstance(source, Streamed) else Path(source)


def read_layout(source: Source) -> Layout:
    """The header and the .row of a trace; a file's .pcf and .row must be of its write
    (`writeid.check_set`: one line, InputError, else)."""
    path = source_path(source)
    if isinstance(source, Streamed):
        header = source.header.split("\n", 1)[0]
    else:
        check_set(path)  # never the .pcf/.row of another write
        with open_text(path) as f:
            header = f.readline()
    end, tasks = _parse_header(header)
    labels, task_labels, appl_labels = _row_labels(companion(path, ".row"))
    return Layout(path, end, tasks, _rows(tasks, labels, task_labels, appl_labels))


@dataclass
class TraceInfo:
    """What every analysis of one trace reads before its records, read once (`open_trace`)
    and handed to each section (the readers below take it in place of the trace itself):
    the source, its layout (header and .row) and its .pcf's names (type -> {value: label},
    labels whole) and type labels."""

    source: Source
    layout: Layout
    names: dict[int, dict[int, str]]
    type_labels: dict[int, str]

    @property
    def path(self) -> Path:
        return self.layout.path

    @property
    def rows(self) -> pl.DataFrame:
        return self.layout.rows

    def value_names(self, *types: int) -> dict[int, str]:
        """value -> label of the given types merged (later types win)."""
        out: dict[int, str] = {}
        for t in types:
            out.update(self.names.get(t, {}))
        return out


def open_trace(source: "Source | TraceInfo") -> TraceInfo:
    """The trace's layout and .pcf names, read once (a `TraceInfo` is given back as is): the
    one reading every section of an analysis shares."""
    if isinstance(source, TraceInfo):
        return source
    layout = read_layout(source)
    return TraceInfo(source, layout, *pcf_names(layout.path))


def pcf_names(path: Path) -> tuple[dict[int, dict[int, str]], dict[int, str]]:
    """(type -> {value: label}, type -> label) of the .pcf beside the trace `path` (empty
    without one): the .pcf read once, parsed by `check.parse_pcf`."""
    from .check import parse_pcf, pcf_type_labels

    pcf = companion(path, ".pcf")
    text = pcf.read_text(errors="replace") if pcf.exists() else ""
    if not text:
        return {}, {}
    return parse_pcf(text)[0], pcf_type_labels(text)


def _layout_of(source: "Source | TraceInfo") -> tuple[Source, Layout]:
    """(the records' source, its layout): read, or the one a `TraceInfo` holds."""
    if isinstance(source, TraceInfo):
        return source.source, source.layout
    return source, read_layout(source)


def make_scanner(layout: Layout, **options):
    """The engine's `PrvScanner` for the rows of `layout` (options: see engine/_scan.c)."""
    from ..engine._engine import PrvScanner

    task_rows = [0]
    appl_offsets: list[int] = []
    for i, (appl, _, threads, _) in enumerate(layout.tasks):
        if len(appl_offsets) < appl:
            appl_offsets.append(i)
        task_rows.append(task_rows[-1] + threads)
    return PrvScanner(task_rows, appl_offsets, **options)


def _fill(source: Source, scanner) -> None:
    """All of `source` into `scanner` (then take its columns with final=True)."""
    if _scannable(source):
        for _ in source.scan_blocks(scanner, RECORDS):
            pass
        return
    for block in _blocks(source, BLOCK):
        scanner.feed(block)


def _blocks(source: Source, size: int):
    """The trace in blocks of `size` bytes (a .gz decompressed as it is read: `file_blocks`);
    a stream's blocks as it gives them."""
    if isinstance(source, Streamed):
        yield from source.blocks()
        return
    path = Path(source)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        yield from file_blocks(f, size)


def file_blocks(f: BinaryIO, size: int) -> Iterator[memoryview]:
    """The rest of the open file `f` in blocks of `size` bytes, read into one buffer,
    reused: a block is valid until the next one is asked for (the scanners copy the line
    they cut). A new buffer per block cost a page fault per 4 KiB of the trace."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    while n := f.readinto(buffer):
        yield view[:n]


def _column(cols: dict, name: str, dtype: str) -> np.ndarray:
    return np.frombuffer(cols[name], dtype=dtype)


def _frames(cols: dict, comms: bool, seq0: int
            ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None]:
    """The scanner's column bytes as (events, states, comms) frames; events numbered in file
    order from `seq0`."""
    n = len(cols["ev_time"]) // 8
    events = pl.DataFrame({
        "row": _column(cols, "ev_row", "=i4"), "time": _column(cols, "ev_time", "=i8"),
        "type": _column(cols, "ev_type", "=i4").astype(np.int64),
        "value": _column(cols, "ev_value", "=i8"),
        "seq": np.arange(seq0, seq0 + n, dtype=np.int64)})
    states = pl.DataFrame({
        "row": _column(cols, "st_row", "=i4"), "begin": _column(cols, "st_begin", "=i8"),
        "end": _column(cols, "st_end", "=i8"), "state": _column(cols, "st_state", "=i4")})
    communications = pl.DataFrame({
        "send_row": _column(cols, "cm_send_row", "=i4"),
        "send": _column(cols, "cm_lsend", "=i8"),
        "recv_row": _column(cols, "cm_recv_row", "=i4"),
        "recv": _column(cols, "cm_precv", "=i8"), "size": _column(cols, "cm_size", "=i8"),
        "tag": _column(cols, "cm_tag", "=i8")}) if comms else None
    return events, states, communications


StateRows = str | Collection[int]


def _state_mask(rows: pl.DataFrame, state_rows: StateRows) -> bytes | None:
    """One byte per row: keep its states? `state_rows` is a kind of row ('cpu', 'gpu',
    'metrics'), 'all', 'none', or the row ids themselves."""
    if isinstance(state_rows, str):
        if state_rows == "all":
            return None
        return (rows["kind"] == state_rows).to_numpy().astype(np.uint8).tobytes()
    mask = np.zeros(rows.height, dtype=np.uint8)
    mask[np.asarray(list(state_rows), dtype=np.int64)] = 1
    return mask.tobytes()


def _check_sorted(path: Path, events: pl.DataFrame, states: pl.DataFrame) -> None:
    """Paraver traces are sorted by time; the analysis relies on it (file order = time
    order on every row)."""
    for frame, col in ((events, "time"), (states, "begin")):
        if frame.height > 1 and not frame[col].is_sorted():
            raise InputError(f"{path}: records are not sorted by time")


def read_trace(path: "Source | TraceInfo", types: set[int] | frozenset[int],
               state_rows: StateRows = "cpu", comms: bool = False) -> Trace:
    """Read a whole trace into memory, keeping events of `types` (all rows), the states of
    the rows of kind `state_rows` ('cpu', 'gpu', 'metrics', 'all', 'none') and, with
    `comms`, the communications. For large traces use `windows`."""
    path, layout = _layout_of(path)
    scanner = make_scanner(layout, types=sorted(types),
                       state_rows=_state_mask(layout.rows, state_rows), comms=comms)
    _fill(path, scanner)
    events, states, communications = _frames(scanner.take(final=True), comms, 0)
    _check_sorted(layout.path, events, states)
    end = max(layout.end, int(states["end"].max() or 0), int(events["time"].max() or 0))
    return Trace(layout.path, end, layout.rows, events, states, communications)


def _scanned(path: Source, scanner, block: int) -> Iterator[tuple[dict, bool]]:
    """(columns of the next `block` bytes or so, whether it is the last) - the scanner fed
    block by block (a stream's records without text: as many as `block` bytes of their
    text would hold, about)."""
    if _scannable(path):
        for _ in path.scan_blocks(scanner, max(1, block // LINE_BYTES)):
            yield scanner.take(), False
        yield scanner.take(final=True), True
        return
    fed = 0
    for chunk in _blocks(path, block):
        scanner.feed(chunk)
        fed += len(chunk)
        if fed >= block:
            yield scanner.take(), False
            fed = 0
    yield scanner.take(final=True), True


def _read_ahead(items: Iterator, depth: int = 1) -> Iterator:
    """`items` produced on a second thread, `depth` ahead of the consumer (reading and
    scanning the next block, which release the GIL, overlap with the analysis of one). The
    thread stops when the consumer does."""
    out: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put((None, e))
            return
        put((done, None))

    threading.Thread(target=produce, daemon=True).start()
    try:
        while True:
            item, error = out.get()
            if error is not None:
                raise error
            if item is done:
                return
            yield item
    finally:
        stop.set()


def windows(path: "Source | TraceInfo", types: set[int] | frozenset[int],
            state_rows: StateRows = "cpu", comms: bool = False, block: int | None = None
            ) -> Iterator[Trace]:
    """The trace as consecutive time windows [start, end), each a `Trace` that answers for
    its window exactly as the whole trace would: the last event of every (row, type) before
    the window is carried in as an event at `start` (the first `carried` events), states
    that cross an edge are clipped to it. The last window ends at the trace end. Memory is
    that of one window (`block` bytes of text, default BLOCK), whatever the trace size; the
    trace must be
    sorted by time, as Paraver writes it (a record before the current window is an error).
    Numbers that add up over time (durations, areas, counts of non-carried events) summed
    over the windows equal those of `read_trace`. A `TraceInfo` given for `path` is not
    read again (its layout is used)."""
    path, layout = _layout_of(path)
    scanner = make_scanner(layout, types=sorted(types),
                       state_rows=_state_mask(layout.rows, state_rows), comms=comms)
    start = 0
    seq = 0
    end_seen = layout.end
    carry_ev = pl.DataFrame(schema={"row": pl.Int32, "time": pl.Int64, "type": pl.Int64,
                                    "value": pl.Int64, "seq": pl.Int64})
    carry_st = pl.DataFrame(schema={"row": pl.Int32, "begin": pl.Int64, "end": pl.Int64,
                                    "state": pl.Int32})
    last = False
    held: pl.DataFrame | None = None  # the lines of blocks with no event or state
    scanned = _read_ahead(_scanned(path, scanner, block or BLOCK))
    while not last:
        cols, last = next(scanned)
        events, states, communications = _frames(cols, comms, seq)
        del cols
        seq += events.height
        if held is not None and communications is not None:
            communications = pl.concat([held, communications])
            held = None
        if not last and events.height == 0 and states.height == 0:
            held = communications  # a block of lines only: they go with the next window
            continue
        first = min(int(events["time"].min() if events.height else 2**62),
                    int(states["begin"].min() if states.height else 2**62))
        if first < start:
            raise InputError(f"{layout.path}: records are not sorted by time (a record at "
                             f"{first} ns after one at {start} ns)")
        _check_sorted(layout.path, events, states)
        end_seen = max(end_seen, int(states["end"].max() or 0),
                       int(events["time"].max() or 0))
        # the window ends where the next one may start: at the last time of this block
        stop = end_seen if last else max(int(events["time"].max() or 0),
                                          int(states["begin"].max() or 0), start)
        carried = carry_ev.with_columns(pl.lit(start, pl.Int64).alias("time"))
        # one chunk each: the compiled sweeps take the columns without a copy
        ev = pl.concat([carried, events], rechunk=True)
        st = pl.concat([carry_st.with_columns(pl.max_horizontal("begin", pl.lit(start))
                                              .alias("begin")), states], rechunk=True)
        window = Trace(layout.path, stop, layout.rows, ev,
                       st.with_columns(pl.min_horizontal("end", pl.lit(stop)).alias("end"))
                       .filter(pl.col("end") > pl.col("begin")) if not last else st,
                       communications, start=start, carried=carried.height)
        if not last:
            carry_ev = _last_of_each(ev)
            carry_st = st.filter(pl.col("end") > stop)
        start = stop
        yield window


def _last_of_each(events: pl.DataFrame) -> pl.DataFrame:
    """The last event of every (row, type), in file order (what a window carries into the
    next; compiled: a group-by of every window's events cost seconds on large traces)."""
    from ..engine._engine import last_events

    rows = np.ascontiguousarray(events["row"].to_numpy(), dtype=np.int32)
    types = np.ascontiguousarray(events["type"].to_numpy(), dtype=np.int64)
    return events[np.frombuffer(last_events(rows, types), dtype=np.int64)]


def event_types(path: "Source | TraceInfo") -> set[int]:
    """Every event type written in a trace (to check that a cfg's types occur in it)."""
    path, layout = _layout_of(path)
    scanner = make_scanner(layout, types=None, state_rows=b"", distinct_types=True)
    _fill(path, scanner)
    return set(scanner.take(final=True)["types"])
