"""`analysis.sums.GroupSums`: the sums of parts folded now and then are the sums of all
the rows at once, and what it holds follows the distinct groups, not the parts."""

import numpy as np
import polars as pl
import pytest

from nsys2prv.analysis.sums import GroupSums


def _parts(seed: int, n_parts: int, rows: int, groups: int) -> list[pl.DataFrame]:
    rng = np.random.default_rng(seed)
    return [pl.DataFrame({"a": rng.integers(0, groups, rows),
                          "b": rng.integers(0, 3, rows).astype(np.int32),
                          "t": rng.integers(0, 1_000_000, rows),
                          "m": rng.integers(0, 1_000_000, rows)})
            for _ in range(n_parts)]


# in another order than the parts' columns (n, t, m): a fold must stack with the next part
FOLD = (pl.col("m").max(), pl.col("n").sum(), pl.col("t").sum())


def _grouped(part: pl.DataFrame) -> pl.DataFrame:
    return part.group_by("a", "b").agg(pl.len().cast(pl.Int64).alias("n"), pl.col("t").sum(),
                                       pl.col("m").max())


@pytest.mark.parametrize("least", [1, 50, 1000, 10**9])
def test_folded_sums_are_the_sums_of_every_row(least):
    parts = _parts(1, 60, 200, 150)
    sums = GroupSums(("a", "b"), FOLD, least=least)
    for p in parts:
        sums.add(_grouped(p))
    whole = _grouped(pl.concat(parts)).sort("a", "b")
    got = sums.result().sort("a", "b").select(whole.columns)
    assert got.equals(whole)
    assert got.height == whole.height == whole.unique(["a", "b"]).height


def test_ungrouped_parts_are_summed_too():
    parts = [p.with_columns(pl.lit(1, pl.Int64).alias("n")) for p in _parts(2, 5, 300, 20)]
    sums = GroupSums(("a", "b"), FOLD, least=10**9)  # never folded before the result
    for p in parts:
        sums.add(p.select("a", "b", "n", "t", "m"))
    assert sums.result().sort("a", "b").select("a", "b", "n", "t", "m").equals(
        _grouped(pl.concat(parts)).sort("a", "b"))


def test_what_it_holds_follows_the_groups_not_the_parts():
    groups = 400
    sums = GroupSums(("a", "b"), FOLD, least=100)
    held = []
    for p in _parts(3, 300, 500, groups):
        sums.add(_grouped(p))
        held.append(sum(x.height for x in sums._parts))
    distinct = groups * 3
    # at most the last fold's rows (the groups) and as many again before the next fold,
    # plus the part that set it off; never the 300 parts' rows
    assert max(held) <= 2 * distinct + 3 * 500
    assert sum(_grouped(p).height for p in _parts(3, 300, 500, groups)) > 40 * max(held)


def test_nothing_added_is_none():
    sums = GroupSums(("a",), (pl.col("n").sum(),))
    sums.add(pl.DataFrame({"a": [], "n": []}, schema={"a": pl.Int64, "n": pl.Int64}))
    assert sums.result() is None
