"""A table of the page: a polars frame's chosen columns in human units (ms, %, GB/s) with the
exact value on hover, sortable, filterable, its first rows in the HTML and every row in an
inline JSON array the page's script renders on demand (`assets.JS`).

Each cell is `[text shown, value sorted by, exact value]` (the last only where it differs
from the text); the script and the HTML show the same texts, made here once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape

import polars as pl

FOLD = 20  # rows in the HTML; the others on demand
MAX_ROWS = 20_000  # rows carried at most (the rest: in --json)
NAME = 60  # characters of a name shown (the whole name on hover)


@dataclass(frozen=True)
class Col:
    """A column shown: the frame's column, its head, its kind: text, ms (from ns), us (from
    ns), s (from ns), pct (a fraction), pct100 (already %), int, num, ratio (x), gbs (GB/s),
    bool, list (a list of names)."""

    name: str
    head: str
    kind: str = "text"


def _fmt(v, kind: str) -> tuple[str, object, str | None]:
    """(text, sort value, exact value or None) of one cell."""
    if v is None or (isinstance(v, float) and v != v):
        return ("-", None, None)
    if kind == "text":
        t = str(v)
        return (t if len(t) <= NAME else t[:NAME - 1] + "…", t, t if len(t) > NAME else None)
    if kind == "list":
        items = [i if isinstance(i, str) else str(next(iter(i.values()), "")) if isinstance(
            i, dict) else str(i) for i in v]
        t = ", ".join(items)
        return (t if len(t) <= NAME else t[:NAME - 1] + "…", t, t if len(t) > NAME else None)
    if kind == "bool":
        return ("yes" if v else "no", 1 if v else 0, None)
    x = float(v)
    if x != x or x in (float("inf"), float("-inf")):
        return (str(x), None, None)
    if kind == "ms":
        return (f"{x / 1e6:,.3f} ms", x, f"{int(v) if float(v).is_integer() else v} ns")
    if kind == "us":
        return (f"{x / 1e3:,.1f} us", x, f"{v} ns")
    if kind == "s":
        return (f"{x / 1e9:,.3f} s", x, f"{v} ns")
    if kind == "pct":
        return (f"{100 * x:.1f} %", x, repr(v))
    if kind == "pct100":
        return (f"{x:.1f} %", x, repr(v))
    if kind == "ratio":
        return (f"{x:.2f}x", x, repr(v))
    if kind == "gbs":
        return (f"{x:.1f} GB/s", x, repr(v))
    if kind == "int":
        return (f"{int(x):,}", x, None)
    return (f"{x:.4g}", x, repr(v))


def _json(data) -> str:
    """JSON safe inside a <script> element (no '<', '>' or '&' left as such)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def table(frame: pl.DataFrame, columns: list[Col], caption: str = "",
          flag: str | None = None, fold: int = FOLD) -> str:
    """The table of `frame`'s `columns` (those it has), rows in the frame's order; `flag`:
    a boolean column whose true rows are highlighted (outliers)."""
    cols = [c for c in columns if c.name in frame.columns]
    if not cols or frame.height == 0:
        return ""
    shown = frame.head(MAX_ROWS)
    flags = shown[flag].fill_null(False).to_list() if flag and flag in shown.columns else None
    data = []
    for c in cols:  # column by column: one formatter per column
        data.append([_fmt(v, c.kind) for v in shown[c.name].to_list()])
    rows = []
    for i in range(shown.height):
        row = [[t, s] if e is None else [t, s, e] for t, s, e in (col[i] for col in data)]
        if flags is not None:
            row.append(1 if flags[i] else 0)
        rows.append(row)
    kinds = ["text" if c.kind in ("text", "list") else "num" for c in cols]
    head = "".join(f'<th class="{k}" title="click to sort">{escape(c.head)}</th>'
                   for c, k in zip(cols, kinds))
    body = []
    for row in rows[:fold]:
        cls = ' class="flag"' if flags is not None and row[-1] else ""
        tds = "".join(
            f'<td class="{k}"' + (f' title="{escape(cell[2])}"' if len(cell) > 2 else "")
            + f">{escape(cell[0])}</td>" for cell, k in zip(row, kinds))
        body.append(f"<tr{cls}>{tds}</tr>")
    more = frame.height - shown.height
    left = len(rows) - min(fold, len(rows))
    cap = f"<h3>{escape(caption)}</h3>" if caption else ""
    return (f'{cap}<div class="tbl" data-fold="{fold}" data-kinds="{escape(_json(kinds))}">'
            f'<div class="tools"><input type="search" placeholder="filter rows" '
            f'aria-label="filter rows"><span class="count">{len(rows)} rows</span>'
            + (f"<span>({more} more rows in --json)</span>" if more > 0 else "")
            + '</div><div class="wrap"><table class="data"><thead><tr>' + head
            + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>"
            + (f'<button class="more" type="button">show {min(left, 500)} more of {left}'
               f"</button>" if left > 0 else "")
            + f'<script type="application/json" class="rows">{_json(rows)}</script></div>')
