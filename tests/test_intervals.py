"""Interval arithmetic of the analysis (analysis/intervals.py) against brute force.

Random small interval sets on an integer time line: the brute force marks every time unit
covered, the sweep must give the same coverage, the same intersection per key and label.
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from nsys2prv.analysis.intervals import overlap_time, total_time, union

SPAN = 40


def _intervals(max_size=12):
    pair = st.tuples(st.integers(0, 2), st.integers(0, SPAN), st.integers(0, 8))
    return st.lists(pair, max_size=max_size).map(
        lambda xs: [(k, s, s + d) for k, s, d in xs])


def _frame(items, label=None) -> pl.DataFrame:
    cols = {"row": [k for k, *_ in items], "start": [s for _, s, _, *_ in items],
            "end": [e for _, _, e, *_ in items]}
    if label is not None:
        cols[label] = [x[3] for x in items]
    schema = {"row": pl.Int64, "start": pl.Int64, "end": pl.Int64}
    if label is not None:
        schema[label] = pl.Int64
    return pl.DataFrame(cols, schema=schema)


def _covered(items) -> dict[int, set[int]]:
    out: dict[int, set[int]] = defaultdict(set)
    for k, s, e, *_ in items:
        out[k].update(range(s, e))
    return out


def _disjoint_labelled(draw_items):
    """Per key, a tiling-like set: sorted cut points, each piece with a label (or a gap)."""
    out = []
    for key, cuts, labels in draw_items:
        points = sorted(set(cuts))
        for i in range(len(points) - 1):
            lab = labels[i % len(labels)]
            if lab >= 0:  # -1: a gap between two states
                out.append((key, points[i], points[i + 1], lab))
    return out


_labelled = st.dictionaries(
    st.integers(0, 2),
    st.tuples(st.lists(st.integers(0, SPAN), min_size=2, max_size=10),
              st.lists(st.integers(-1, 3), min_size=1, max_size=5)),
    max_size=3).map(lambda d: _disjoint_labelled((k, c, lab) for k, (c, lab) in d.items()))


@settings(max_examples=300, deadline=None)
@given(_intervals())
def test_union_covers_the_same_time_and_is_disjoint(items):
    u = union(_frame(items), ["row"])
    got: dict[int, set[int]] = defaultdict(set)
    last: dict[int, int] = {}
    for k, s, e in u.iter_rows():
        assert s < e
        assert s > last.get(k, -1), "touching or overlapping pieces must be joined"
        last[k] = e
        got[k].update(range(s, e))
    assert dict(got) == {k: v for k, v in _covered(items).items() if v}


@settings(max_examples=300, deadline=None)
@given(_labelled, _intervals())
def test_overlap_time_per_key_and_label_equals_brute_force(a_items, b_items):
    got = overlap_time(_frame(a_items, "state"), _frame(b_items), ["row"], label="state")
    b_cov = _covered(b_items)
    want: dict[tuple[int, int], int] = defaultdict(int)
    for k, s, e, lab in a_items:
        n = sum(1 for t in range(s, e) if t in b_cov.get(k, ()))
        if n:
            want[(k, lab)] += n
    assert {(k, lab): t for k, lab, t in got.iter_rows() if t} == dict(want)


@settings(max_examples=200, deadline=None)
@given(_labelled, _intervals())
def test_overlap_time_without_label(a_items, b_items):
    a = _frame([x[:3] for x in a_items])
    got = dict(overlap_time(a, _frame(b_items), ["row"]).iter_rows())
    b_cov = _covered(b_items)
    want: dict[int, int] = defaultdict(int)
    for k, s, e, _ in a_items:
        want[k] += sum(1 for t in range(s, e) if t in b_cov.get(k, ()))
    assert {k: t for k, t in got.items() if t} == {k: t for k, t in want.items() if t}


def test_total_time_and_empty_inputs():
    iv = _frame([(0, 0, 5), (0, 10, 12), (1, 3, 4)])
    assert dict(total_time(iv, ["row"]).iter_rows()) == {0: 7, 1: 1}
    empty = _frame([])
    assert overlap_time(empty, iv, ["row"]).height == 0
    assert overlap_time(iv, empty, ["row"]).height == 0
    assert union(empty, ["row"]).height == 0
