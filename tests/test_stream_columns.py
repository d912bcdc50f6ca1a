"""A stream read without its text (`TraceStream.scan_blocks`, the engine's `Merger.scan`): the
merged records go straight into a `PrvScanner`'s columns. They must be exactly the columns
that scanning the stream's text gives (events, states of the rows asked for, communications,
distinct types, and the lines and malformed lines counted), and every reader must give the
same answers on both paths."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import corpus_cases, corpus_files
from hypothesis import given, settings
from hypothesis import strategies as st

import nsys2prv
import nsys2prv.api
from nsys2prv.analysis.activities import read_activities
from nsys2prv.analysis.model import TYPES, analyze_path, analyze_windows
from nsys2prv.engine import NUL, Merger
from nsys2prv.engine._engine import PrvScanner
from nsys2prv.paraver import read as read_module
from nsys2prv.paraver.read import event_types, make_scanner, read_layout, read_trace, windows
from nsys2prv.pipeline import merge as merge_mod
from nsys2prv.testing.multi import job
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export
from nsys2prv.testing.synth_deps import streams_export
from nsys2prv.testing.synth_gpu import nccl_export

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"
COLUMNS = ("ev_row", "ev_time", "ev_type", "ev_value", "st_row", "st_begin", "st_end",
           "st_state", "cm_send_row", "cm_lsend", "cm_psend", "cm_recv_row", "cm_lrecv",
           "cm_precv", "cm_size", "cm_tag")


class TextOnly:
    """A stream read as text only (its `blocks()`): how the readers took it before."""

    def __init__(self, stream) -> None:
        self.path, self.header, self.blocks = stream.path, stream.header, stream.blocks


def _text_columns(stream, layout, **options) -> dict:
    scanner = make_scanner(layout, **options)
    for block in stream.blocks():
        scanner.feed(block)
    return scanner.take(final=True)


def _binary_columns(stream, layout, records: int, **options) -> dict:
    scanner = make_scanner(layout, **options)
    blocks = sum(1 for _ in stream.scan_blocks(scanner, records))
    cols = scanner.take(final=True)
    cols["blocks"] = blocks + 1
    return cols


def _mask(rows: pl.DataFrame, keep) -> bytes:
    return np.isin(np.arange(rows.height), list(keep)).astype(np.uint8).tobytes()


def _option_sets(layout, types: list[int]) -> dict[str, dict]:
    """Scanner options: every type or some, the states of the CPU rows, of all, of none or
    of a list of rows, communications or not, and the distinct types only."""
    rows = layout.rows
    cpu = (rows["kind"] == "cpu").to_numpy().astype(np.uint8).tobytes()
    some_rows = {0, rows.height - 1, rows.height // 2}
    return {
        "all": dict(types=None, state_rows=None, comms=True),
        "cpu-states": dict(types=sorted(TYPES), state_rows=cpu, comms=False),
        "subset-rows": dict(types=types[::2], state_rows=_mask(rows, some_rows), comms=True),
        "no-states": dict(types=types[1::3], state_rows=b"", comms=False),
        "distinct": dict(types=None, state_rows=b"", distinct_types=True),
        "distinct-subset": dict(types=types[::3], state_rows=None, distinct_types=True),
    }


def _assert_same_columns(stream, layout, records: int) -> dict:
    """Both paths, every option set: the same columns. Returns the 'all' columns."""
    types = sorted(event_types(TextOnly(stream)))
    assert types
    out = {}
    for name, options in _option_sets(layout, types).items():
        text = _text_columns(stream, layout, **options)
        binary = _binary_columns(stream, layout, records, **options)
        for key in (*COLUMNS, "bad", "lines", "types", "text"):
            assert binary[key] == text[key], (name, key)
        out[name] = binary
    return out


# -- the engine alone: records of every shape, malformed ones included ----------------------

APPL = 1 << 32  # a task id carries its application in its high 32 bits
HEADER = dict(task_rows=[0, 2, 5, 6], appl_offsets=[0, 2])  # appl 1: 2 + 3 threads; appl 2: 1


def _random_records(rng: np.random.Generator, n: int) -> list[dict]:
    """One in-memory source of `n` records sorted by time, in trace-wide form (MEMORY_COLUMNS):
    states, events (continued lines: same time and order), communications; tasks and threads
    inside the header and outside it (application 3, task 0 and 4, thread 0, NUL); fields
    unresolved (NUL: the record is dropped, or a communication misses its receive fields);
    text pairs, some with a value that is no integer."""
    inside, outside = [1, 2, APPL + 1], [0, 4, 2 * APPL + 1, NUL]
    texts = ["", ":4:x", ":2:7:3:1.5"]

    def task() -> int:
        return int(rng.choice(inside if rng.random() < 0.8 else outside))

    def value() -> int:
        r = rng.random()
        return NUL if r < 0.1 else int(rng.integers(-(1 << 62), 1 << 62)) if r < 0.2 else \
            int(rng.integers(-5, 40))

    recs = []
    for _ in range(n):
        kind = int(rng.choice([1, 2, 2, 2, 3]))
        f = [value() for _ in range(6)]
        if kind == 2:  # types
            f[0], f[2] = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        if rng.random() < 0.5:
            f[1] = int(rng.integers(0, 10))
        text = ""
        if kind == 2 and rng.random() < 0.6:
            text = "".join(f":{rng.integers(1, 7)}:{rng.integers(-3, 1 << 40)}"
                           for _ in range(rng.integers(1, 4))) if rng.random() < 0.85 else \
                str(rng.choice(texts))
        recs.append(dict(
            time=int(rng.integers(0, 13)), order=int(rng.integers(0, 4)), kind=kind,
            phase=int(rng.integers(0, 2)), sub=0, src=0, rep=0, ord=int(rng.integers(0, 10)),
            f=f, cpu=1 if rng.random() < 0.9 else NUL, task=task(),
            thread=int(rng.choice([1, 2, 3, 0])), rcpu=1 if rng.random() < 0.9 else NUL,
            rtask=task(), rthread=int(rng.choice([1, 2, 9])), text=text))
    recs.sort(key=lambda r: r["time"])
    return recs


def _memory_source(recs: list[dict]) -> tuple:
    def col(values):
        return np.asarray(values, dtype=np.int64)

    names = ("time", "order", "kind", "phase", "sub", "src", "rep", "ord")
    cols = [col([r[k] for r in recs]) for k in names]
    cols += [col([r["f"][k] for r in recs]) for k in range(6)]
    cols += [col([r[k] for r in recs]) for k in ("cpu", "task", "thread", "rcpu", "rtask",
                                                 "rthread")]
    text = "".join(r["text"] for r in recs).encode()
    if not text:
        return cols, None, None
    offsets = np.zeros(len(recs) + 1, dtype=np.int64)
    np.cumsum([len(r["text"]) for r in recs], out=offsets[1:])
    return cols, offsets, np.frombuffer(text, dtype=np.uint8)


def _merger(sources: list[list[dict]]) -> Merger:
    return Merger([], [], [_memory_source(s) for s in sources if s], -(1 << 62), 1 << 62)


OPTIONS = st.fixed_dictionaries({
    "types": st.one_of(st.none(), st.lists(st.integers(1, 6), max_size=4)),
    "state_rows": st.one_of(st.none(), st.binary(min_size=0, max_size=6)),
    "comms": st.booleans(),
    "distinct_types": st.booleans()})


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(0, 40), min_size=1, max_size=3),
       options=OPTIONS, max_bytes=st.integers(1, 200), max_records=st.integers(1, 30))
def test_engine_scan_equals_scanning_the_text(seed, sizes, options, max_bytes, max_records):
    """Records of every kind, continued event lines, text pairs, records dropped (unresolved
    fields), rows outside the header, malformed lines (a communication missing its receive
    fields, a value that is no integer), from up to three sources: the columns and counts of
    `Merger.scan` are those of scanning `Merger.next`'s text, fed in blocks of any size and
    taken in any number of records."""
    rng = np.random.default_rng(seed)
    sources = [_random_records(rng, n) for n in sizes]
    text, binary = PrvScanner(**HEADER, **options), PrvScanner(**HEADER, **options)
    merger = _merger(sources)
    while (block := merger.next(max_bytes)) is not None:
        text.feed(block)
    want = text.take(final=True)
    other = _merger(sources)
    handled = []
    while n := other.scan(binary, max_records):
        assert n >= max_records or other.done  # whole times, at least max_records
        handled.append(n)
    got = binary.take(final=True)
    assert other.done and other.scan(binary, 1) == 0
    assert sum(handled) == sum(len(s) for s in sources) == other.written + other.dropped
    assert (other.written, other.dropped) == (merger.written, merger.dropped)
    for key in (*COLUMNS, "bad", "lines", "types", "text"):
        assert got[key] == want[key], key


def test_engine_scan_counts_malformed_lines():
    """The cases the property test mixes, checked one by one against known values: a
    continued event line of a row outside the header is one bad line; a communication
    without its receive times is bad; a record with an unresolved field is dropped, not bad;
    a state of a masked row is read but not kept."""
    def rec(time, kind, f, task=1, thread=1, text="", order=0, cpu=1, rtask=1):
        return dict(time=time, order=order, kind=kind, phase=0, sub=0, src=0, rep=0, ord=0,
                    f=f, cpu=cpu, task=task, thread=thread, rcpu=1, rtask=rtask, rthread=1,
                    text=text)

    recs = [rec(0, 1, [10, 3, NUL, NUL, NUL, NUL]),                  # state, row 0
            rec(0, 1, [10, 4, NUL, NUL, NUL, NUL], thread=2, order=1),  # state, row 1: masked
            rec(1, 2, [5, 1, 6, 2, NUL, NUL], text=":5:3"),           # one line of three pairs
            rec(1, 2, [6, 7, NUL, NUL, NUL, NUL]),                    # ... continued: a 4th
            rec(2, 2, [5, 9, NUL, NUL, NUL, NUL], task=3),            # task 3: outside
            rec(2, 2, [5, 8, NUL, NUL, NUL, NUL], task=3),            # ... continued
            rec(3, 3, [4, 1, 5, 6, 64, 7]),                           # comm, complete
            rec(3, 3, [4, 1, NUL, NUL, 64, 7], order=1),              # no receive times: bad
            rec(4, 2, [5, 2, NUL, NUL, NUL, NUL], cpu=NUL),           # dropped
            rec(5, 2, [5, 1, NUL, NUL, NUL, NUL], text=":6:x")]       # a value that is no int
    merger = Merger([], [], [_memory_source(recs)], -(1 << 62), 1 << 62)
    scanner = PrvScanner([0, 2, 3], [0], state_rows=b"\x01\x00\x01", comms=True)
    assert merger.scan(scanner, 1000) == len(recs)
    cols = scanner.take(final=True)
    events = list(zip(np.frombuffer(cols["ev_row"], "=i4"), np.frombuffer(cols["ev_time"], "=i8"),
                      np.frombuffer(cols["ev_type"], "=i4"), np.frombuffer(cols["ev_value"], "=i8")))
    assert events == [(0, 1, 5, 1), (0, 1, 6, 2), (0, 1, 5, 3), (0, 1, 6, 7), (0, 5, 5, 1)]
    assert np.frombuffer(cols["st_row"], "=i4").tolist() == [0]
    assert np.frombuffer(cols["st_state"], "=i4").tolist() == [3]
    assert np.frombuffer(cols["cm_lrecv"], "=i8").tolist() == [5]
    assert np.frombuffer(cols["cm_tag"], "=i8").tolist() == [7]
    assert (cols["bad"], cols["lines"]) == (3, 7)  # task 3's line, the comm, the ':6:x' line
    assert (merger.written, merger.dropped) == (9, 1)


def test_scan_refuses_a_scanner_that_needs_the_text():
    """Cut and rewrite modes work on the text, a scanner holding part of a line would get
    records before its end, and only a PrvScanner takes records: all refused."""
    merger = Merger([], [], [_memory_source([dict(
        time=0, order=0, kind=2, phase=0, sub=0, src=0, rep=0, ord=0, f=[5, 1, NUL, NUL, NUL, NUL],
        cpu=1, task=1, thread=1, rcpu=1, rtask=1, rthread=1, text="")])], -(1 << 62), 1 << 62)
    with pytest.raises(ValueError, match="cuts or rewrites"):
        merger.scan(PrvScanner([0, 1], [0], cut=(0, 10)), 10)
    with pytest.raises(ValueError, match="cuts or rewrites"):
        merger.scan(PrvScanner([0, 1], [0], row_map=[0]), 10)
    pending = PrvScanner([0, 1], [0])
    pending.feed(b"2:1:1:1:1:0:5:1")  # no newline yet
    with pytest.raises(ValueError, match="part of a line"):
        merger.scan(pending, 10)
    with pytest.raises(TypeError, match="PrvScanner"):
        merger.scan(object(), 10)
    with pytest.raises(ValueError, match="positive"):
        merger.scan(PrvScanner([0, 1], [0]), 0)
    reader = PrvScanner([0, 1], [0])
    assert merger.scan(reader, 10) == 1 and merger.written == 1  # nothing taken before


# -- streams of synthetic and recorded reports ------------------------------------------------

@pytest.fixture(scope="module")
def streams(tmp_path_factory) -> dict[str, object]:
    """Four GPU ranks on two hosts with the recorded MPI run (multi-event lines, arrows,
    overlap lanes, MPI messages from the merge hook), the recorded MPI run alone, streams
    with dependency lines, NCCL."""
    d = tmp_path_factory.mktemp("columns")
    ranks = [write_export(d / f"rank{info.rank}.sqlite", spec) for info, spec in job()]
    mpi = sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite"))
    inputs = {"job+mpi": ranks + mpi, "mpi": mpi,
              "deps": [streams_export(d / "deps.sqlite")],
              "nccl": [nccl_export(d / "nccl.sqlite")]}
    return {name: nsys2prv.api.translate_stream(paths, d / name, name="t")
            for name, paths in inputs.items()}


@pytest.mark.parametrize("name", ["job+mpi", "mpi", "deps", "nccl"])
def test_stream_columns_equal_the_scanned_text(streams, name):
    """Every option set: the binary path's columns are the text's, in one block or in many."""
    stream = streams[name]
    layout = read_layout(stream)
    cols = _assert_same_columns(stream, layout, records=31)
    kept = cols["all"]
    assert len(kept["ev_time"]) > 0 and len(kept["st_begin"]) > 0 and kept["bad"] == 0
    assert cols["all"]["blocks"] > 3  # 31 records at a time: several blocks
    if name in ("job+mpi", "mpi", "deps"):
        assert len(kept["cm_lsend"]) > 0  # MPI messages, dependency lines
    one = _binary_columns(stream, layout, 1 << 30, types=None, state_rows=None, comms=True)
    assert one["blocks"] == 1 and all(one[k] == kept[k] for k in COLUMNS)


def test_rows_outside_the_header_count_as_bad(streams):
    """A scanner whose header lacks the last task and one thread of the first: the lines of
    those rows are malformed on both paths, counted alike, and nothing of them is kept."""
    stream = streams["job+mpi"]
    layout = read_layout(stream)
    task_rows = [0]
    for i, (_, _, threads, _) in enumerate(layout.tasks[:-1]):
        task_rows.append(task_rows[-1] + (threads - 1 if i == 0 else threads))
    options = dict(task_rows=task_rows, appl_offsets=[0], comms=True)
    text, binary = PrvScanner(**options), PrvScanner(**options)
    for block in stream.blocks():
        text.feed(block)
    for _ in stream.scan_blocks(binary, 1000):
        pass
    want, got = text.take(final=True), binary.take(final=True)
    assert want["bad"] > 0 and len(want["ev_time"]) > 0
    for key in (*COLUMNS, "bad", "lines"):
        assert got[key] == want[key], key
    assert np.frombuffer(got["ev_row"], "=i4").max() < task_rows[-1]


def test_windows_and_readers_equal_on_both_paths(streams, monkeypatch):
    """One window (a trace smaller than a block): the same window, column by column. Many
    windows (small blocks): the boundaries differ (the text path holds a block's last line
    back to the next one), but every event is read once, in order, and what the analysis
    sums over the windows is the same. read_trace and event_types: equal."""
    stream = streams["job+mpi"]
    text = TextOnly(stream)
    types = event_types(text)
    assert event_types(stream) == types
    for state_rows in ("cpu", "all", "none"):
        a = read_trace(text, types, state_rows=state_rows, comms=True)
        b = read_trace(stream, types, state_rows=state_rows, comms=True)
        assert a.events.equals(b.events) and a.states.equals(b.states)
        assert a.comms.equals(b.comms) and a.end == b.end
    [x] = list(windows(text, types, state_rows="all", comms=True))
    [y] = list(windows(stream, types, state_rows="all", comms=True))
    assert (x.start, x.end, x.carried) == (y.start, y.end, y.carried)
    assert x.events.equals(y.events) and x.states.equals(y.states) and x.comms.equals(y.comms)
    assert x.events.height > 0 and x.comms.height > 0
    small = 1 << 15  # the text path: the merger's blocks as small (windows end with them)
    monkeypatch.setattr(merge_mod, "BLOCK_BYTES", small)
    xs = list(windows(text, TYPES, comms=True, block=small))
    ys = list(windows(stream, TYPES, comms=True, block=small))
    assert len(xs) > 3 and len(ys) > 3
    own = lambda ws: pl.concat([w.events.slice(w.carried) for w in ws])  # noqa: E731
    assert own(xs).equals(own(ys))
    assert pl.concat([w.comms for w in xs]).equals(pl.concat([w.comms for w in ys]))
    assert xs[-1].end == ys[-1].end
    assert analyze_windows(iter(xs)).to_dict() == analyze_windows(iter(ys)).to_dict()


def test_analysis_equal_on_both_paths(streams, monkeypatch):
    """The whole analysis (the idle causes' second pass included) and the activities, read
    from the stream's records and from its text, in windows of 64 KiB of text or the records
    as many: the same numbers."""
    monkeypatch.setattr(read_module, "BLOCK", 1 << 16)
    for name in ("job+mpi", "deps"):
        stream = streams[name]
        x, y = read_activities(TextOnly(stream)), read_activities(stream)
        assert x.kernels.height > 0 and x.kernels.equals(y.kernels) and x.ranges.equals(y.ranges)
        text, binary = analyze_path(TextOnly(stream)).to_dict(), analyze_path(stream).to_dict()
        assert text["idle"] is not None and text == binary


def test_analyze_json_unchanged(tmp_path, monkeypatch, capsys):
    """`nsys2prv analyze REPORT --json` prints what it printed when it read the text, with
    the steps, the kernels' modality and the critical path too."""
    from nsys2prv.cli import main
    from nsys2prv.pipeline.merge import TraceStream

    export = write_export(tmp_path / "r.sqlite", sample_spec(4))
    drop = lambda s: [ln for ln in s.splitlines() if '"trace":' not in ln]  # noqa: E731
    for extra in ([], ["--iterations", "--modality", "--critical-path"]):
        args = ["analyze", str(export), "--json", *extra]
        assert main(args) == 0
        binary = drop(capsys.readouterr().out)
        with monkeypatch.context() as m:
            m.setattr(TraceStream, "scannable", property(lambda self: False))
            assert main(args) == 0
        text = drop(capsys.readouterr().out)
        assert any('"idle"' in ln for ln in binary) and binary == text
        assert not extra or any('"critical_path"' in ln for ln in binary)


def test_a_window_stream_is_read_as_text(tmp_path):
    """A stream of a window is cut out of the merged text: it is not scannable, and its
    scan_blocks refuses."""
    ranks = [write_export(tmp_path / f"rank{i.rank}.sqlite", s) for i, s in job()]
    stream = nsys2prv.api.translate_stream(ranks, tmp_path / "w", name="t", window="3ms/9ms")
    assert not stream.scannable
    with pytest.raises(ValueError, match="read as text"):
        next(stream.scan_blocks(make_scanner(read_layout(stream)), 100))
    assert read_trace(stream, set(TYPES)).events.height > 0


def test_dropped_records_warn_on_the_binary_path(streams, monkeypatch):
    """Records the merge cannot resolve are counted and warned about, as blocks() does."""
    stream = streams["mpi"]
    real = merge_mod._merger

    def broken(plan, window=None):  # a merge hook record with no receiver cpu
        hooks = plan.hooks
        plan.hooks = [[f.with_columns(pl.lit(NUL, pl.Int64).alias("rcpu")) for f in h]
                      for h in hooks]
        try:
            return real(plan, window)
        finally:
            plan.hooks = hooks

    monkeypatch.setattr(merge_mod, "_merger", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        n = len(read_trace(stream, set(), comms=True).comms)
    assert n == 0 and any("records dropped" in str(w.message) for w in caught)


# -- every corpus export ----------------------------------------------------------------------

CORPUS = corpus_cases(corpus_files())


@pytest.mark.parametrize("db", CORPUS["params"], ids=CORPUS["ids"])
def test_corpus_export_reads_the_same_on_both_paths(db, tmp_path):
    """Every real export: the columns of every type, the states of all rows and the
    communications, and the distinct types, are the text's; so is what the windows the
    analysis reads hold."""
    if db is None:
        pytest.skip("real-export corpus (../shared/corpus) not present")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the export's own translation warnings
        stream = nsys2prv.api.translate_stream([db], tmp_path, name="t")
        layout = read_layout(stream)
        # every type, every row's states, the communications and the distinct types, in one
        # read a path (the other selections are compared on the synthetic streams above)
        options = dict(types=None, state_rows=None, comms=True, distinct_types=True)
        text = _text_columns(stream, layout, **options)
        binary = _binary_columns(stream, layout, 5000, **options)
        for key in (*COLUMNS, "bad", "lines", "types"):
            assert binary[key] == text[key], key
        assert len(binary["types"]) > 0 and text["lines"] > 0
        xs = list(windows(TextOnly(stream), TYPES, comms=True))
        ys = list(windows(stream, TYPES, comms=True))
        if len(xs) == len(ys) == 1:  # smaller than a window: the same one
            x, y = xs[0], ys[0]
            assert (x.start, x.end, x.carried) == (y.start, y.end, y.carried)
            assert x.events.equals(y.events) and x.states.equals(y.states)
            assert x.comms.equals(y.comms)
        else:
            # a larger trace is cut where each path's window fills (32 MiB of text, or as
            # many merged records): the windows differ, what they hold does not
            def whole(ws):
                ev = pl.concat([w.events.slice(w.carried) for w in ws]).drop("seq")
                st = (pl.concat([w.states for w in ws])
                      .group_by("row", "state")
                      .agg((pl.col("end") - pl.col("begin")).sum()).sort("row", "state"))
                return ev, st, pl.concat([w.comms for w in ws])
            (ex, sx, cx), (ey, sy, cy) = whole(xs), whole(ys)
            assert ex.equals(ey) and sx.equals(sy) and cx.equals(cy)
            assert xs[-1].end == ys[-1].end
        # (the analysis of windows that hold the same is the same wherever they are cut:
        # tests/test_corpus.py, test_analysis_in_windows_equals_the_whole_trace)


def test_windows_keep_the_lines_of_blocks_without_records(streams, tmp_path):
    """A block with communications but no event or state kept (no types, no states asked):
    its lines go with the next window, on a file and on a stream, whatever the block."""
    stream = streams["mpi"]
    whole = read_trace(stream, set(), state_rows="none", comms=True).comms
    assert whole.height > 50
    out = tmp_path / "mpi.prv"
    nsys2prv.translate(sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite")), out)
    for source in (stream, out):
        for block in (1 << 12, 240):
            got = pl.concat([w.comms for w in windows(source, frozenset(), state_rows="none",
                                                      comms=True, block=block)])
            assert got.equals(whole)
