"""What every rule shares: option specs, the result type, and the export a rule reads.

A rule is asked for with nsys' syntax, ``NAME[:option=value[:option=value]...]``; the options
every rule has (`rows`, `start`, `end`, `nvtx`) and the per-rule ones are declared as
:class:`Option`\\ s and parsed here, so that a bad spec fails in one line before any file is
opened. :class:`RuleInput` is the export as a rule sees it: the report, and the rows of each
table that the time range (`start`/`end`/`nvtx`, and `process`/`thread`) lets through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..errors import UsageError
from ..report.report import Report

DEFAULT_ROWS = 50
CHUNK_ROWS = 1 << 20  # rows of a large table read at a time
# The end of time when only `start` is given: the largest 64-bit timestamp.
END_OF_TIME = 0x7FFFFFFFFFFFFFFF
PID_SHIFT = 24
ID_MASK = 0xFFFFFF


@dataclass(frozen=True)
class Option:
    """One `name=value` option of a rule; `check` rejects values the type alone allows."""

    name: str
    default: object
    help: str
    kind: type = int
    check: Callable[[object], str | None] | None = None

    def parse(self, rule: str, text: str) -> object:
        if self.kind is str:
            return text
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"{rule}: option {self.name} needs an integer, "
                             f"not '{text}'") from None


COMMON_OPTIONS = (
    Option("rows", DEFAULT_ROWS, f"most rows to show (default {DEFAULT_ROWS}; -1: all)"),
    Option("start", None, "only data recorded after this time (ns)"),
    Option("end", None, "only data recorded before this time (ns)"),
    Option("nvtx", None, "only data within the first NVTX range named RANGE[@DOMAIN][/N]",
           kind=str),
)


@dataclass(frozen=True)
class Column:
    """An output column: its header (with the unit nsys shows) and its polars dtype.

    `unit` says how formatters may convert it: "ns" (times), "B" (bytes), "%" or None.
    """

    name: str
    dtype: pl.DataType
    unit: str | None = None


class Skip(Exception):
    """The export lacks what the rule needs; the message says what, in one line."""


@dataclass
class RuleResult:
    """What a rule found in one export: rows (`rows`, columns as `columns` name them) and
    the advice that goes with them, or why there is nothing to show."""

    rule: str
    title: str
    export: Path
    options: dict[str, object]
    columns: tuple[Column, ...]
    rows: pl.DataFrame
    advice: str
    no_result: str
    skipped: str | None = None
    given: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """The text a reader sees above (or instead of) the rows."""
        if self.skipped:
            return self.skipped
        return self.advice if self.rows.height else self.no_result

    @property
    def row_limit(self) -> int:
        return int(self.options.get("rows", DEFAULT_ROWS))  # type: ignore[arg-type]

    @property
    def truncated(self) -> bool:
        """True when the row limit was reached (more rows may exist)."""
        return 0 < self.row_limit <= self.rows.height

    @property
    def spec(self) -> str:
        """The rule and the options that were given, in nsys' syntax."""
        return ":".join([self.rule, *(f"{k}={self.options[k]}" for k in self.given)])


def limit_rows(df: pl.DataFrame, limit: int) -> pl.DataFrame:
    """SQL's LIMIT: a negative limit keeps every row."""
    return df if limit < 0 else df.head(limit)


def numbered(df: pl.DataFrame) -> pl.DataFrame:
    """Prefix the rows with their rank (`Row#`, from 1)."""
    return df.with_row_index("Row#", offset=1).with_columns(pl.col("Row#").cast(pl.Int64))


# -- specs ------------------------------------------------------------------------------------

def split_spec(spec: str) -> tuple[str, list[tuple[str, str]]]:
    """`NAME:a=1:b=2` -> ("NAME", [("a", "1"), ("b", "2")]); a bad piece is a UsageError."""
    name, *pieces = spec.strip().split(":")
    if not name:
        raise UsageError(f"rule spec '{spec}' has no rule name")
    pairs = []
    for piece in pieces:
        key, eq, value = piece.partition("=")
        if not eq or not key:
            raise UsageError(f"{name}: option '{piece}' is not of the form name=value")
        pairs.append((key.strip(), value))
    return name, pairs


def parse_options(rule: str, options: Sequence[Option], pairs: Sequence[tuple[str, str]]
                  ) -> tuple[dict[str, object], tuple[str, ...]]:
    """Values of every option (defaults filled in) and the names given; the last of a
    repeated option wins, as in nsys."""
    known = {o.name: o for o in options}
    values = {o.name: o.default for o in options}
    given = []
    for key, text in pairs:
        if key not in known:
            raise UsageError(f"{rule}: unknown option '{key}' "
                             f"(options: {', '.join(known)})")
        values[key] = known[key].parse(rule, text)
        check = known[key].check
        problem = check(values[key]) if check else None
        if problem:
            raise UsageError(f"{rule}: option {key}: {problem}")
        if key not in given:
            given.append(key)
    return values, tuple(given)


# -- the export as a rule sees it -------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """The rows a rule may use: those overlapping [start, end) and, for an NVTX range or the
    `process`/`thread` options, those of one thread or process.

    nsys keeps a row when it starts in the range, ends in it, or spans it; rows are never
    clipped. An NVTX range limits rows with a thread id to its thread when it is a push/pop
    range on a thread other than the process' main one (tid != pid) and to its process
    otherwise; rows with only a process id (GPU work) to its process.
    """

    start: int
    end: int
    nvtx_global_tid: int | None = None
    pid: int | None = None
    tid: int | None = None

    def sql(self, columns: Sequence[str]) -> str:
        """A WHERE condition for a table with these columns (TRUE if it has no start/end)."""
        if "start" not in columns or "end" not in columns:
            return "1"
        s, e = self.start, self.end
        parts = [f'(("start" >= {s} AND "start" < {e}) OR ("end" >= {s} AND "end" < {e}) '
                 f'OR ("start" < {s} AND "end" >= {e}))']
        tid_col = "globalTid" if "globalTid" in columns else None
        pid_col = tid_col or ("globalPid" if "globalPid" in columns else None)
        if self.pid is not None and pid_col:
            parts.append(f'(("{pid_col}" >> {PID_SHIFT}) & {ID_MASK}) = {self.pid}')
        if self.tid is not None and tid_col:
            parts.append(f'("{tid_col}" & {ID_MASK}) = {self.tid}')
        g = self.nvtx_global_tid
        if g is not None and pid_col:
            one_thread = ((g >> PID_SHIFT) & ID_MASK) != (g & ID_MASK)
            if tid_col and one_thread:
                parts.append(f'"{tid_col}" = {g}')
            else:
                parts.append(f'("{pid_col}" >> {PID_SHIFT}) = {g >> PID_SHIFT}')
        return " AND ".join(parts)


class RuleInput:
    """One export opened for rules: table lookup and reads limited to the window."""

    def __init__(self, report: Report, window: Window | None,
                 shared: dict | None = None) -> None:
        self.report = report
        self.window = window
        self.name = str(report.path)
        # what several rules of one run read alike (gpu_ops.operations), by key
        self.shared = {} if shared is None else shared

    def table(self, logical: str) -> str | None:
        return self.report.table(logical)

    def columns(self, table: str) -> list[str]:
        return self.report.db.columns(table)

    def where(self, table: str, *conditions: str, windowed: bool = True) -> str:
        """WHERE clause: `conditions` and (if `windowed`) the window's."""
        parts = [c for c in conditions if c]
        if windowed and self.window is not None:
            parts.append(self.window.sql(self.columns(table)))
        return " WHERE " + " AND ".join(f"({p})" for p in parts) if parts else ""

    def read(self, table: str, columns: dict[str, pl.DataType], *conditions: str,
             windowed: bool = True) -> pl.DataFrame:
        """Plain columns of `table` in rowid order (`_row` = rowid); a column the table lacks
        comes back null. Only plain columns are selected so the Arrow reader types them
        from the table's declaration."""
        present = set(self.columns(table))
        chosen = [c for c in columns if c in present]
        select = ", ".join(["rowid AS _row", *(f'"{c}"' for c in chosen)])
        sql = f'SELECT {select} FROM "{table}"' + self.where(table, *conditions,
                                                              windowed=windowed)
        df = self.report.db.frame(sql + " ORDER BY rowid",
                                  {"_row": pl.Int64, **{c: columns[c] for c in chosen}})
        missing = [pl.lit(None, dtype).alias(c) for c, dtype in columns.items()
                   if c not in present]
        return df.with_columns(missing) if missing else df

    def chunks(self, table: str, columns: dict[str, pl.DataType], *conditions: str,
               rows: int = CHUNK_ROWS) -> Iterator[pl.DataFrame]:
        """`read` (within the window, without `_row`) in rowid ranges of `rows` rows, so a
        large table is never held both as read and as converted by the caller."""
        present = set(self.columns(table))
        chosen = [c for c in columns if c in present]
        where = self.where(table, *conditions).removeprefix(" WHERE ")
        missing = [pl.lit(None, dtype).alias(c) for c, dtype in columns.items()
                   if c not in present]
        select = ", ".join(f'"{c}"' for c in chosen) or "1 AS _none"
        for df in self.report.db.chunks(table, select, {c: columns[c] for c in chosen}, rows,
                                        where=where):
            yield df.with_columns(missing) if missing else df

    def string_ids(self, *conditions: str) -> pl.DataFrame:
        """(id, value) of the StringIds rows meeting SQL `conditions` on `value`."""
        table = self.table("StringIds")
        if table is None:
            return pl.DataFrame(schema={"id": pl.Int64, "value": pl.Utf8})
        where = " OR ".join(f"({c})" for c in conditions) or "1"
        rows = self.report.db.rows(f'SELECT id, value FROM "{table}" WHERE {where}')
        return pl.DataFrame({"id": [r[0] for r in rows], "value": [r[1] for r in rows]},
                            schema={"id": pl.Int64, "value": pl.Utf8})


def pid_of(global_id: pl.Expr) -> pl.Expr:
    """PID bits (24-47) of a globalTid/globalPid."""
    return (global_id // (1 << PID_SHIFT)) % (1 << PID_SHIFT)


def tid_of(global_id: pl.Expr) -> pl.Expr:
    return global_id % (1 << PID_SHIFT)


def sql_text(value: str) -> str:
    """`value` as an SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


# -- rules ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """A rule: its names, options, output columns, messages and the function that finds
    its rows (`find(input, options) -> DataFrame` with exactly `columns`, or `Skip`)."""

    name: str
    old_name: str  # the name nsys 2022.4 used
    title: str
    summary: str
    options: tuple[Option, ...]
    columns: tuple[Column, ...]
    find: Callable[[RuleInput, dict], pl.DataFrame]
    advice: Callable[[dict], str]
    no_result: Callable[[dict], str]
    check: Callable[[RuleInput], None] | None = None  # raises Skip when tables are missing

    @property
    def all_options(self) -> tuple[Option, ...]:
        return COMMON_OPTIONS + self.options
