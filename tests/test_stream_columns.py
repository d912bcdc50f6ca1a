"""The engine's `Merger.scan`: merged records go straight into a `PrvScanner`'s columns. They
must be exactly the columns that scanning `Merger.next`'s text gives (events, states of the
rows asked for, communications, distinct types, and the lines and malformed lines counted)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsys2prv.engine import NUL, Merger
from nsys2prv.engine._engine import PrvScanner

COLUMNS = ("ev_row", "ev_time", "ev_type", "ev_value", "st_row", "st_begin", "st_end",
           "st_state", "cm_send_row", "cm_lsend", "cm_psend", "cm_recv_row", "cm_lrecv",
           "cm_precv", "cm_size", "cm_tag")


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
