"""The analysis' compiled sweeps (engine/_timeline.c, analysis/timeline.py) against brute
force: the state of every instant computed from the records directly (Paraver's Last Evt
Val: a set is open from an event of it with a value != 0 to the next event of the set on the
row, or the window's end), on random windows and on hand-made cases whose numbers are known.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from nsys2prv.analysis import idle
from nsys2prv.analysis.timeline import (NSUMS, NST, GroupSweep, RowTimeline, between,
                                        set_table, state_bin)
from nsys2prv.paraver.read import Trace

KERNEL, NCCL, MEMOP, OTHER = 10, 11, 12, 13
CALL_A, CALL_B = 20, 21


def _trace(events: list[tuple[int, int, int, int]], states=(), nrows: int = 3,
           end: int = 100, devices: list[int] | None = None) -> Trace:
    """A window of `nrows` rows: events (row, time, type, value) in time order, states
    (row, begin, end, state)."""
    rows = pl.DataFrame({"row": pl.Series(range(nrows), dtype=pl.Int32),
                         "task_index": [0] * nrows,
                         "device": devices if devices is not None else [0] * nrows})
    ev = pl.DataFrame(events, schema={"row": pl.Int32, "time": pl.Int64, "type": pl.Int64,
                                      "value": pl.Int64}, orient="row")
    ev = ev.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("seq"))
    sts = pl.DataFrame(list(states), schema={"row": pl.Int32, "begin": pl.Int64,
                                             "end": pl.Int64, "state": pl.Int32}, orient="row")
    return Trace(Path("x.prv"), end, rows, ev, sts)


def _open_at(events, row: int, types, x: int, end: int) -> bool:
    """Is a set open on `row` at instant x (brute force)?"""
    last = [v for r, t, ty, v in events if r == row and ty in types and t <= x]
    return x < end and bool(last) and last[-1] != 0


def _changes(events, states, rows, end: int) -> list[int]:
    cuts = {t for r, t, _, _ in events if r in rows} | {end}
    cuts |= {b for r, b, _, _ in states if r in rows} | {e for r, _, e, _ in states if r in rows}
    return sorted(c for c in cuts if c <= end)


EVENTS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60),
                            st.sampled_from([KERNEL, NCCL, MEMOP, OTHER]),
                            st.sampled_from([0, 0, 1, 7])), max_size=30)


@settings(max_examples=300, deadline=None)
@given(EVENTS, st.lists(st.integers(0, 1), min_size=3, max_size=3))
def test_group_sweep_equals_the_counts_of_every_instant(raw, devices):
    events = sorted(raw, key=lambda e: e[1])
    end = 80
    sweep = GroupSweep(_trace([], nrows=3, devices=devices).rows,
                       pl.col("device"), KERNEL, NCCL, MEMOP)
    runs = sweep.add(_trace(events, end=end, devices=devices))
    got = sweep.result()
    sets = {"k": (KERNEL, NCCL), "c": (KERNEL,), "n": (NCCL,), "a": (KERNEL, NCCL, MEMOP)}
    for g in sorted(set(devices)):
        rows = [r for r in range(3) if devices[r] == g]
        want = dict.fromkeys(NSUMS, 0)
        active = []
        first = min((t for r, t, ty, _ in events if r in rows and ty != OTHER), default=end)
        cuts = [c for c in _changes(events, [], rows, end) if c >= first]
        for x, y in zip(cuts, cuts[1:]):
            n = {k: sum(_open_at(events, r, types, x, end) for r in rows)
                 for k, types in sets.items()}
            d = y - x
            want["useful_talp"] += d * (n["k"] > 0)
            want["comm_talp"] += d * (n["a"] > 0 and n["k"] == 0)
            want["useful_nccl"] += d * (n["c"] > 0)
            want["comm_nccl"] += d * (n["a"] > 0 and n["c"] == 0)
            want["active"] += d * (n["a"] > 0)
            want["nccl_time"] += d * (n["n"] > 0)
            want["hidden_comm"] += d * (n["n"] > 0 and n["c"] > 0)
            if n["k"]:
                want[f"l{min(n['k'], 3)}"] += d
                if n["n"]:
                    want[f"lc{min(n['k'], 3)}"] += d
            if n["a"] and d:
                if active and active[-1][1] == x:
                    active[-1][1] = y
                else:
                    active.append([x, y])
        row = got.filter(pl.col("g") == g)
        assert {k: row[k].item() for k in NSUMS} == want
        assert runs.filter(pl.col("g") == g).select("start", "end").rows() == \
            [tuple(a) for a in active]


STATES = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 15), st.integers(0, 10),
                            st.sampled_from([1, 2, 5, 9, 12, 99])), max_size=12)


def _tile(raw) -> list[tuple[int, int, int, int]]:
    """Disjoint states per row from (row, length, gap before, state)."""
    out, at = [], {0: 0, 1: 0, 2: 0}
    for row, length, gap, state in raw:
        b = at[row] + gap
        out.append((row, b, b + length, state))
        at[row] = b + length
    return sorted(out, key=lambda s: s[1])


def _state_at(states, row: int, x: int):
    return next((s for r, b, e, s in states if r == row and b <= x < e), None)


CALLS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 90),
                           st.sampled_from([CALL_A, CALL_B, OTHER]), st.sampled_from([0, 3])),
                 max_size=25)


@settings(max_examples=300, deadline=None)
@given(CALLS, STATES, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100),
                                         st.integers(0, 60)), max_size=8))
def test_row_timeline_equals_the_state_of_every_instant(raw_calls, raw_states, raw_queries):
    events = sorted(raw_calls, key=lambda e: e[1])
    states = _tile(raw_states)
    end = 100
    states = [(r, b, min(e, end), s) for r, b, e, s in states if b < end]
    window = _trace(events, states, end=end)
    walked = [0, 2]
    sets = [(CALL_A,), (CALL_A, CALL_B)]
    tl = RowTimeline(3, walked, sets)
    tl.add(window)
    # a column per (state, open sets) as the cause table does: here, 4 columns
    column = np.full((NST + 3) << 2, -1, dtype=np.int8)
    for index in range(NST + 3):
        for flags in range(4):
            column[(index << 2) | flags] = flags if index == state_bin(5) or flags else -1
    queries = pl.DataFrame([(r, a, a + w) for r, a, w in raw_queries],
                           schema={"row": pl.Int32, "a": pl.Int64, "b": pl.Int64}, orient="row")
    got = between(window, walked, 3, sets, column, 4, queries)
    for slot, row in enumerate(walked):
        # the row's changes: its states' edges, its calls, and the window's end when a
        # call is still open there (the timeline ends at its last change)
        calls = [(t, ty, v) for r, t, ty, v in events if r == row and ty != OTHER]
        cuts = {b for r, b, _, _ in states if r == row} | \
            {e for r, _, e, _ in states if r == row} | {t for t, _, _ in calls}
        if any([v for _, ty, v in calls if ty in s][-1:] not in ([], [0]) for s in sets):
            cuts.add(end)
        cuts = sorted(cuts)
        bins = np.zeros_like(tl.bins[slot])
        per_query = {}
        for x, y in zip(cuts, cuts[1:]):
            state = _state_at(states, row, x)
            ended = state is None and any(r == row and e <= x for r, _, e, _ in states)
            index = state_bin(state) if state is not None else (1 if ended else 0)
            flags = sum(1 << i for i, s in enumerate(sets) if _open_at(events, row, s, x, end))
            bins[(index << 2) | flags] += y - x
            for q, (qr, a, b) in enumerate(queries.rows()):
                c = column[(index << 2) | flags]
                if qr == row and c >= 0:
                    per_query[(q, int(c))] = per_query.get((q, int(c)), 0) + \
                        max(0, min(y, b) - max(x, a))
        assert tl.bins[slot].tolist() == bins.tolist()
        for q, (qr, _, _) in enumerate(queries.rows()):
            if qr == row:
                assert got[q].tolist() == [per_query.get((q, c), 0) for c in range(4)]
    for q, (qr, _, _) in enumerate(queries.rows()):
        if qr not in walked:
            assert not got[q].any()


def test_calls_open_at_the_window_end_close_there():
    """A row with no state: a call open until the window's end counts up to it (and no
    further), a state ended with nothing after it counts nothing more."""
    sets = [(CALL_A,)]
    window = _trace([(0, 10, CALL_A, 3), (1, 30, CALL_A, 3), (1, 40, CALL_A, 0)],
                    [(1, 0, 20, 1)], end=50)
    tl = RowTimeline(3, [0, 1], sets)
    tl.add(window)
    assert tl.time(open_set=0).tolist() == [40, 10]
    assert tl.time([1]).tolist() == [0, 20]
    assert tl.opens[:, 0].tolist() == [1, 1]
    # the causes: row 0 in a CUDA call with no state, row 1 running then no state then in
    # an OS call with no state
    pieces = pl.DataFrame({"qid": [0, 1], "row": pl.Series([0, 1], dtype=pl.Int32),
                           "a": [0, 0], "b": [100, 100]})
    cause_sets = {k: v for k, v in idle.CALL_SETS.items()}
    cause_sets["cuda"] = (CALL_A,)
    got = between(window, [0, 1], 3, list(cause_sets.values()), idle.CAUSE_COLUMNS,
                  len(idle.CAUSE_KEYS), pieces)
    named = [{k: int(v) for k, v in zip(idle.CAUSE_KEYS, r) if v} for r in got]
    assert named == [{"cuda_other": 40}, {"host_compute": 20, "no_data": 10, "cuda_other": 10}]


def test_set_table_bits():
    types, bits = set_table([(5, 3), (3,), (9,)])
    assert types.tolist() == [3, 5, 9]
    assert bits.tolist() == [0b011, 0b001, 0b100]


SPAN_EVENTS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40),
                                 st.sampled_from([KERNEL, MEMOP, CALL_A, OTHER, 99]),
                                 st.sampled_from([0, 0, 1, 5])), max_size=40)


@settings(max_examples=300, deadline=None)
@given(SPAN_EVENTS, st.lists(st.integers(0, 40), max_size=3))
def test_spans_pair_like_paraver_across_windows(raw, cuts):
    """Flat types: an event with a value opens a span that the next event of its row and
    type closes; a kernel takes the full name (type 99) given on its row at its start time
    (the last one before it opens, else the first before it closes);
    stacked (CALL_A): push and pop, a pop with nothing open dropped. The windows' edges
    change nothing."""
    from nsys2prv.analysis.timeline import Spans

    events = sorted(raw, key=lambda e: e[1])
    flat_want, stacked_want = [], []
    for row in range(3):
        for typ in (KERNEL, MEMOP):
            mine = [(i, t, v) for i, (r, t, ty, v) in enumerate(events)
                    if r == row and ty == typ]
            for (i, t, v), (i2, t2, _) in zip(mine, mine[1:]):
                if v:
                    def fulls(part):
                        return [fv for r, ft, ty, fv in part
                                if r == row and ty == 99 and ft == t and fv]
                    # the last given before it opened, else the first until it closes
                    before, after = fulls(events[:i]), fulls(events[i:i2])
                    full = (before[-1] if before else after[0] if after else None) \
                        if typ == KERNEL else None
                    flat_want.append((row, typ, v, t, t2 - t, full))
        stack = []
        for r, t, ty, v in events:
            if r == row and ty == CALL_A:
                if v:
                    stack.append((t, v))
                elif stack:
                    s, sv = stack.pop()
                    stacked_want.append((row, CALL_A, sv, s, t - s, len(stack) + 1))
    spans = Spans((KERNEL, MEMOP), (KERNEL,), (CALL_A,), 99, 3)
    frame = _trace(events).events
    bounds = sorted({0, *(sum(1 for e in events if e[1] < c) for c in cuts), len(events)})
    flat, stacked = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        f, s = spans.add(frame.slice(lo, hi - lo))
        flat += [tuple(int(x) for x in r) for r in f]
        stacked += [tuple(int(x) for x in r) for r in s]
    nul = np.iinfo(np.int64).min
    assert sorted(flat) == sorted((*w[:5], nul if w[5] is None else w[5]) for w in flat_want)
    assert sorted(stacked) == sorted(stacked_want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 90), st.integers(1, 8)),
                max_size=20),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 99), st.integers(0, 3),
                          st.sampled_from([1, 2, 7])), max_size=30),
       st.lists(st.integers(1, 99), max_size=3))
def test_gaps_are_the_holes_between_runs_with_their_launch(raw_runs, raw_arrows, cuts):
    """The holes between a device's active runs, across windows, each with the send row of
    the launch arrow (tags 1, 2) that reaches the device at the hole's end: of those, the
    one from the lowest receiving row, then the earliest."""
    from nsys2prv.analysis.timeline import Gaps

    # rows 0, 1: GPU streams of device 0; row 2: device 1 (CPU rows 3, 4 send)
    rows = pl.DataFrame({"row": pl.Series(range(5), dtype=pl.Int32), "task_index": [0] * 5,
                         "device": [0, 0, 1, 0, 0],
                         "kind": ["gpu", "gpu", "gpu", "cpu", "cpu"]})
    sweep = GroupSweep(rows, pl.col("device"), KERNEL, NCCL, MEMOP)
    # disjoint runs per device, as the sweep makes them (touching ones merged)
    busy = {0: set(), 1: set()}
    for g, s, n in raw_runs:
        busy[g] |= set(range(s, s + n))
    bounds = sorted({0, *cuts, 100})
    gaps = Gaps(sweep, rows, (1, 2))
    # arrows: (recv_row, recv, send offset, tag) sent from row 3 + recv_row % 2
    arrows = [(rr, rv, max(0, rv - off), 3 + rr % 2, tag) for rr, rv, off, tag in raw_arrows]
    found = []
    for lo, hi in zip(bounds, bounds[1:]):
        runs = []
        for g in (0, 1):
            t = lo
            while t < hi:
                if t in busy[g]:
                    s = t
                    while t < hi and t in busy[g]:
                        t += 1
                    runs.append((g, s, t))
                else:
                    t += 1
        frame = pl.DataFrame(runs, schema={"gi": pl.Int64, "start": pl.Int64, "end": pl.Int64},
                             orient="row")
        sent = [a for a in arrows if lo <= a[2] < hi]  # a window holds the lines sent in it
        comms = pl.DataFrame({"send_row": pl.Series([a[3] for a in sent], dtype=pl.Int32),
                              "send": [a[2] for a in sent],
                              "recv_row": pl.Series([a[0] for a in sent], dtype=pl.Int32),
                              "recv": [a[1] for a in sent], "tag": [a[4] for a in sent]},
                             schema={"send_row": pl.Int32, "send": pl.Int64,
                                     "recv_row": pl.Int32, "recv": pl.Int64, "tag": pl.Int64})
        found += [tuple(int(x) for x in r) for r in gaps.add(frame, comms, hi)]
    want = []
    for g in (0, 1):
        times = sorted(busy[g])
        for a, b in zip(times, times[1:]):
            if b > a + 1:
                reaching = sorted((rr, snd, sr) for rr, rv, snd, sr, tag in arrows
                                  if rv == b and tag in (1, 2) and (rr == 2) == (g == 1))
                want.append((g, a + 1, b, reaching[0][2] if reaching else -1))
    assert sorted(found) == sorted(want)
    spans = gaps.spans()
    assert sorted(spans.rows()) == sorted((g, min(t), max(t) + 1) for g, t in busy.items() if t)


def test_row_time_key_packs_until_a_time_could_overflow():
    """(row, time) as one Int64 (time * rows + row) while every time seen fits, a struct
    after; a join on either key is the join on both columns, left order kept."""
    import polars as pl

    from nsys2prv.analysis.timeline import RowTimeKey

    left = pl.DataFrame({"row": [2, 0, 1, 2, 0], "start": [5, 5, -3, 7, 1 << 40],
                         "x": range(5)}, schema_overrides={"row": pl.Int32})
    right = pl.DataFrame({"row": [0, 2, 1, 1], "start": [5, 7, -3, 5], "y": [10, 20, 30, 40]},
                         schema_overrides={"row": pl.Int32})
    want = left.join(right, on=["row", "start"], how="left", maintain_order="left")
    key = RowTimeKey(3)
    assert key.packed and key.limit == (1 << 62) // 3
    assert key.join(left, right).equals(want)
    assert key.join(left, right, how="anti")["x"].to_list() == [0, 4]
    packed = left.select(key.of())["_k"].to_list()
    assert packed == [17, 15, -8, 23, (1 << 40) * 3]
    key.see(None, 10, key.limit - 1)
    assert key.packed
    key.see(-key.limit)
    assert not key.packed
    assert left.select(key.of())["_k"].dtype == pl.Struct
    assert key.join(left, right).equals(want)
    assert key.join(left, right, how="anti")["x"].to_list() == [0, 4]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.sampled_from(
    [0, 5, 63000001, 1 << 32, (1 << 32) ^ 1, (1 << 62) + 7, -1])), max_size=400))
def test_last_events_is_the_last_event_of_every_row_and_type(raw):
    """What a window carries into the next (`read._last_of_each`): the index of the last
    event of every (row, type), in file order. The rows and types are chosen so that the
    table's packed key (row << 32 ^ type) collides for different pairs (a type with bit 32
    set against the next row) and so that thousands of pairs make the table grow."""
    from nsys2prv.engine._engine import last_events

    rows = np.array([r for r, _ in raw], dtype=np.int32)
    types = np.array([t for _, t in raw], dtype=np.int64)
    last = {}
    for i, key in enumerate(raw):
        last[key] = i
    got = np.frombuffer(last_events(rows, types), dtype=np.int64).tolist()
    assert got == sorted(last.values())


def test_last_events_of_many_pairs():
    """Some 10^5 (row, type) pairs among 10^6 events: the table grows many times."""
    from nsys2prv.engine._engine import last_events

    rng = np.random.default_rng(7)
    rows = rng.integers(0, 1000, 1_000_000).astype(np.int32)
    types = rng.integers(0, 100, 1_000_000).astype(np.int64) * 1_000_003
    got = np.frombuffer(last_events(rows, types), dtype=np.int64)
    frame = pl.DataFrame({"row": rows, "type": types}).with_row_index("i")
    want = frame.group_by("row", "type").agg(pl.col("i").last())["i"].sort()
    assert got.size == want.len() > 90_000
    assert got.tolist() == want.to_list()
