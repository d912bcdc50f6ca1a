"""Interval arithmetic on polars frames by sorting and sweeping, in O(n log n).

Intervals are frames with `start` and `end` (ns, end exclusive) and key columns. Nothing here
joins intervals with intervals: a join on the key followed by an overlap filter grows with
the product of the two sets (tens of thousands of CUDA calls times as many states on one
main thread) - the crash of issue 21. Instead every interval becomes two boundary steps
(+1 at its start, -1 at its end), the steps of one key are sorted by time and summed, and
each constant segment between two boundaries is classified by the counts open in it.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from ..paraver.read import Trace

_CNT = "__open"


def _steps(iv: pl.DataFrame, by: Sequence[str], column: str) -> pl.DataFrame:
    """+1 at every start and -1 at every end, in column `column`."""
    live = iv.filter(pl.col("end") > pl.col("start"))
    return pl.concat([
        live.select(*by, pl.col("start").alias("t"), pl.lit(1, pl.Int64).alias(column)),
        live.select(*by, pl.col("end").alias("t"), pl.lit(-1, pl.Int64).alias(column)),
    ])


def union(iv: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """The disjoint, sorted intervals covering the same time as `iv`, per key `by` (touching
    intervals are joined)."""
    by = list(by)
    if iv.height == 0:
        return iv.select(*by, "start", "end")
    steps = (_steps(iv, by, _CNT).group_by(*by, "t").agg(pl.col(_CNT).sum())
             .sort(*by, "t"))
    cum = pl.col(_CNT).cum_sum()
    steps = steps.with_columns((cum.over(by) if by else cum).alias("__level"))
    prev = pl.col("__level").shift(1)
    prev = (prev.over(by) if by else prev).fill_null(0)
    edges = steps.filter((pl.col("__level") > 0) != (prev > 0))
    opens = edges.filter(pl.col("__level") > 0)
    closes = edges.filter(pl.col("__level") == 0)
    return opens.select(*by, pl.col("t").alias("start")).with_columns(
        closes["t"].alias("end"))


def overlap_time(a: pl.DataFrame, b: pl.DataFrame, by: Sequence[str],
                 label: str | None = None) -> pl.DataFrame:
    """Per key `by` (and per value of `label` in `a`): the time covered both by `a` and by
    `b`. `a` must be disjoint within a key (states that tile a row, a row's open-value
    intervals); `b` may overlap itself (its union is used). Columns: by, [label], time."""
    by = list(by)
    keys = by + ([label] if label else [])
    if a.height == 0 or b.height == 0:
        return pl.DataFrame(schema={**{k: a.schema[k] for k in keys}, "time": pl.Int64})
    bu = union(b, by)
    a = a.filter(pl.col("end") > pl.col("start"))
    lab = [pl.col(label)] if label else []
    sa = pl.concat([
        a.select(*by, pl.col("start").alias("t"), pl.lit(1, pl.Int64).alias("da"),
                 pl.lit(0, pl.Int64).alias("db"), *lab),
        a.select(*by, pl.col("end").alias("t"), pl.lit(-1, pl.Int64).alias("da"),
                 pl.lit(0, pl.Int64).alias("db"),
                 *((pl.lit(None, a.schema[label]).alias(label),) if label else ())),
        bu.select(*by, pl.col("start").alias("t"), pl.lit(0, pl.Int64).alias("da"),
                  pl.lit(1, pl.Int64).alias("db"),
                  *((pl.lit(None, a.schema[label]).alias(label),) if label else ())),
        bu.select(*by, pl.col("end").alias("t"), pl.lit(0, pl.Int64).alias("da"),
                  pl.lit(-1, pl.Int64).alias("db"),
                  *((pl.lit(None, a.schema[label]).alias(label),) if label else ())),
    ], how="vertical_relaxed")
    # one line per boundary time: the label is that of the `a` interval starting there
    steps = (sa.group_by(*by, "t")
             .agg(pl.col("da").sum(), pl.col("db").sum(),
                  *((pl.col(label).drop_nulls().first(),) if label else ()))
             .sort(*by, "t"))

    def over(e: pl.Expr) -> pl.Expr:
        return e.over(by) if by else e

    seg = steps.with_columns(
        over(pl.col("da").cum_sum()).alias("ca"), over(pl.col("db").cum_sum()).alias("cb"),
        over(pl.col("t").shift(-1)).alias("next"),
        *((over(pl.col(label).forward_fill()).alias(label),) if label else ()))
    both = seg.filter((pl.col("ca") > 0) & (pl.col("cb") > 0) & pl.col("next").is_not_null())
    return (both.group_by(*keys).agg((pl.col("next") - pl.col("t")).sum().alias("time"))
            .sort(*keys))


def total_time(iv: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Per key: the summed length of the intervals (no union: for disjoint sets)."""
    return (iv.group_by(*by).agg((pl.col("end") - pl.col("start")).sum().alias("time"))
            .sort(*by))


def open_intervals(trace: Trace, types: tuple[int, ...]) -> pl.DataFrame:
    """(row, start, end) where the last event of `types` on the row has a value != 0 -
    Paraver's `Last Evt Val` filtered on `types`, then `Sign`. Events are in file order,
    which is time order (Paraver's order for one time), so no sort is needed: the next
    event of the row is the next one of its group."""
    ev = trace.events.filter(pl.col("type").is_in(list(types)))
    ev = ev.with_columns(pl.col("time").shift(-1).over("row").fill_null(trace.end)
                         .alias("next"))
    return (ev.filter((pl.col("value") != 0) & (pl.col("next") > pl.col("time")))
            .select("row", pl.col("time").alias("start"), pl.col("next").alias("end")))


def asof(left: pl.DataFrame, right: pl.DataFrame, left_on: str, right_on: str,
         by: str | list[str]) -> pl.DataFrame:
    """For each row of `left`, the last row of `right` of the same `by` keys at or before
    it (`join_asof`, backward): both are sorted on their time here. polars cannot check the
    order within groups and says so; the sort makes it true."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sortedness of columns cannot be checked")
        return left.sort(left_on).join_asof(right.sort(right_on), left_on=left_on,
                                            right_on=right_on, by=by, strategy="backward")
