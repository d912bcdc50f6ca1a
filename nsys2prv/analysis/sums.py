"""Tables summed per group as a pass brings them, window by window.

An observer of a pass that sums per group (a kernel, a launch configuration, a stack)
gets one small grouped table a window. Kept as they come, they grow with the number of
windows; summed together only now and then, the sum is a spike: a polars `group_by` over
many key columns takes about twice its input again while it runs (52 MB for the 200k rows
of 17 keys the launch configurations were summed at, on the 30M benchmark trace).
`GroupSums` folds the parts whenever they hold more rows than the last fold left (and at
least `least`): memory follows the distinct groups, each fold reads at most about twice
them, and the folds cost what their rows do.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


class GroupSums:
    """Per group of `keys`, the aggregations `fold` (over the parts' columns: sums of
    sums, maxima of maxima) of the grouped parts `add`ed."""

    def __init__(self, keys: Sequence[str], fold: Sequence[pl.Expr], least: int = 50_000
                 ) -> None:
        self.keys = list(keys)
        self.fold = list(fold)
        self.least = least
        self._parts: list[pl.DataFrame] = []
        self._rows = 0  # held in the parts
        self._folded = 0  # rows the last fold left

    def add(self, part: pl.DataFrame) -> None:
        """A part (grouped by `keys`, or not: the bound then counts its rows)."""
        if part.height == 0:
            return
        self._parts.append(part)
        self._rows += part.height
        if self._rows > max(self.least, 2 * self._folded):
            self._compact()

    def _compact(self) -> None:
        if self._rows > self._folded:  # a part came since the last fold
            columns = self._parts[0].columns  # the parts' order: the next ones stack on it
            self._parts = [pl.concat(self._parts).group_by(self.keys).agg(self.fold)
                           .select(columns)]
        self._rows = self._folded = self._parts[0].height if self._parts else 0

    def result(self) -> pl.DataFrame | None:
        """The sums, one row a group in no set order (None: nothing added)."""
        self._compact()
        return self._parts[0] if self._parts else None
