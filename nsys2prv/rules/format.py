"""Print rule results as `nsys analyze` does, in its formats: `column` (a titled text
table, the console's default), `table` (the same with a boxed table), `csv`, `tsv`, `json`.

Values are shown in nsys' default units: times in ns, percentages with one decimal, byte
counts in MB (10^6 bytes) with three decimals. `raw=True` keeps bytes as integers (what
`nsys analyze --format csv:noconv` prints).
"""

from __future__ import annotations

import csv
import io
import re
import textwrap

import polars as pl

from .base import Column, RuleResult

TEXT_WIDTH = 80
MAX_COLUMN = 100  # widest a text column grows
WIDTH_SAMPLE = 100  # rows that decide a text column's width
ELLIPSIS = "…"


def header(column: Column, raw: bool) -> str:
    if column.unit == "B" and not raw:
        return column.name.replace("(B)", "(MB)")
    return column.name


def _cells(result: RuleResult, raw: bool) -> list[list[str]]:
    """Rows as display strings, column by column in nsys' units."""
    columns = []
    for column in result.columns:
        series = result.rows[column.name]
        if column.unit == "B" and not raw:
            shown = [None if v is None else f"{v / 1e6:.3f}" for v in series.to_list()]
        elif series.dtype == pl.Float64:
            shown = [None if v is None else repr(v) for v in series.to_list()]
        else:
            shown = [None if v is None else str(v) for v in series.to_list()]
        columns.append(["" if v is None else v for v in shown])
    return [list(row) for row in zip(*columns)]


def format_csv(result: RuleResult, raw: bool = False, head: bool = True) -> str:
    """CSV of the rows with a header line (`head`); empty when there are none (as nsys
    prints)."""
    if result.skipped or result.rows.height == 0:
        return ""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if head:
        writer.writerow([header(c, raw) for c in result.columns])
    writer.writerows(_cells(result, raw))
    return out.getvalue()


def format_tsv(result: RuleResult, raw: bool = False, head: bool = True) -> str:
    """Tab-separated rows with a header line (`head`), unquoted; empty when there are none."""
    if result.skipped or result.rows.height == 0:
        return ""
    lines = [[header(c, raw) for c in result.columns]] if head else []
    return "".join("\t".join(row) + "\n" for row in lines + _cells(result, raw))


_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def _json_value(cell: str) -> str:
    """A number or a JSON keyword as it is, anything else a string (nsys' formatter
    recognises them the same way; it does not escape quotes, we do)."""
    if _NUMBER.fullmatch(cell) or cell in ("true", "false", "null"):
        return cell
    return '"' + cell.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_json(result: RuleResult, raw: bool = False) -> str:
    """An array of one object per row, the column headers as keys, as nsys writes it
    ("[\n]" when there is no row)."""
    heads = [header(c, raw) for c in result.columns]
    rows = [] if result.skipped else _cells(result, raw)
    objects = ["  {\n" + ",\n".join(f'    "{h}": {_json_value(v)}' for h, v in zip(heads, row))
               + "\n  }" for row in rows]
    return "[\n" + "".join(o + (",\n" if i < len(objects) - 1 else "\n")
                           for i, o in enumerate(objects)) + "]\n"


def _wrap(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        item = line.lstrip(" ")
        marker = item.split(" ", 1)[0] if item[:1].isdigit() else ""
        lines.append(textwrap.fill(line, TEXT_WIDTH, subsequent_indent=" " * (
            indent + len(marker) + 1 if marker else indent)) if line else "")
    return "\n".join(lines)


def _center(text: str, width: int) -> str:
    """A header centred as nsys centres it (an odd space goes to the right; Python's
    str.center may put it on the left), cut to `width`."""
    pad = max(0, width - len(text))
    return " " * (pad // 2) + text[:width] + " " * (pad - pad // 2)


def _fit(text: str, width: int, numeric: bool) -> str:
    if len(text) > width:
        return text[:width - 1] + ELLIPSIS
    return text.rjust(width) if numeric else text.ljust(width)


def _layout(result: RuleResult, raw: bool
            ) -> tuple[list[str], list[list[str]], list[int], list[bool]]:
    """What both table formats lay out: headers, cells, column widths (the widest of the
    header and the first WIDTH_SAMPLE cells, at most MAX_COLUMN) and which columns are
    numbers (right-aligned)."""
    heads = [header(c, raw) for c in result.columns]
    rows = _cells(result, raw)
    widths = [min(MAX_COLUMN, max([len(h)] + [len(r[i]) for r in rows[:WIDTH_SAMPLE]]))
              for i, h in enumerate(heads)]
    return heads, rows, widths, [c.dtype != pl.Utf8 for c in result.columns]


def table(result: RuleResult, raw: bool = False) -> str:
    """The rows as text columns: numbers right-aligned, text left-aligned, headers centred."""
    heads, rows, widths, numeric = _layout(result, raw)
    lines = [" " + "  ".join(_center(h, w) for h, w in
                             zip(heads, widths)),
             " " + "  ".join("-" * w for w in widths)]
    lines += [" " + "  ".join(_fit(v, w, n) for v, w, n in zip(row, widths, numeric))
              for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def boxed(result: RuleResult, raw: bool = False) -> str:
    """The rows as a boxed table (nsys' `table` format): cells as in `table`."""
    heads, rows, widths, numeric = _layout(result, raw)
    rule = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    lines = [rule, "| " + " | ".join(_center(h, w)
                                     for h, w in zip(heads, widths)) + " |", rule]
    lines += ["| " + " | ".join(_fit(v, w, n) for v, w, n in zip(row, widths, numeric)) + " |"
              for row in rows]
    return "\n".join(lines + [rule])


def format_text(result: RuleResult, raw: bool = False, box: bool = False) -> str:
    """Title, advice (or the reason there is nothing), the table (boxed with `box`) and a
    note when the row limit cut the list short."""
    parts = [f" ** {result.title} ({result.rule}):", _wrap(result.message)]
    if not result.skipped and result.rows.height:
        parts.append(boxed(result, raw) if box else table(result, raw))
        if result.truncated:
            parts.append(f"Only the first {result.rows.height} rows are shown; there may be "
                         "more (rows=-1 shows all).")
    return "\n\n".join(parts) + "\n"


# nsys' format names and the extension of their files; `text` is ours for `column`
EXTENSIONS = {"column": ".txt", "table": ".txt", "csv": ".csv", "tsv": ".tsv", "json": ".json"}
FORMAT_ARGS = ("noconv", "nohdr")  # bytes as bytes; no header line (csv, tsv)


def render(result: RuleResult, fmt: str, raw: bool = False, head: bool = True) -> str:
    """`result` in the format `fmt` (a name of EXTENSIONS)."""
    if fmt == "csv":
        return format_csv(result, raw, head)
    if fmt == "tsv":
        return format_tsv(result, raw, head)
    if fmt == "json":
        return format_json(result, raw)
    return format_text(result, raw, box=fmt == "table")
