"""Pictures of the page as inline SVG, drawn here (no plotting library, no script needed to
see them): stacked and grouped bars, lines with markers, a scatter, a heatmap that bins its
rows, a small timeline of intervals and a flame graph of folded stacks.

Every function takes plain lists (the sections read them from the analyses' tables) and
returns one `<svg>` element whose width and height are set; every mark carries a `<title>`
with its exact value, which a browser shows on hover. Numbers are written with fixed
precision, so the same inputs give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

import numpy as np
import polars as pl

WIDTH = 860
FONT = 12
ROW = 22  # height of a bar's row
LABEL = 230  # room for the row labels on the left
PALETTE = ("#1f4fd1", "#ff8c1a", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896")
IDLE = "#c9dff5"
MARK = "#d62728"  # outliers
FLAME = ("#f2a541", "#f08a4b", "#e9c46a", "#f4a261", "#e76f51", "#ffb347")


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _n(x: float) -> str:
    """A coordinate: two decimals at most, no trailing zeros."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def cut(text: str, n: int) -> str:
    """A label cut to `n` characters (the whole text goes in the mark's title): its start
    and its end kept ('rank 0 app (pid 42…) / GPU 1'), where rows differ."""
    if len(text) <= n:
        return text
    if n < 12:
        return text[:max(n - 1, 1)] + "…"
    tail = min(12, n // 3)
    return text[:n - tail - 1] + "…" + text[-tail:]


def _svg(width: float, height: float, body: list[str], label: str) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" '
            f'height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}" role="img" '
            f'aria-label="{escape(label)}">' + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = FONT,
          cls: str = "", full: str | None = None) -> str:
    title = f"<title>{escape(full)}</title>" if full and full != text else ""
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{_n(x)}" y="{_n(y)}" font-size="{size}" text-anchor="{anchor}"{c}>'
            f"{title}{escape(text)}</text>")


def _rect(x: float, y: float, w: float, h: float, fill: str, title: str) -> str:
    return (f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0))}" height="{_n(h)}" '
            f'fill="{fill}"><title>{escape(title)}</title></rect>')


def _legend(items: Sequence[tuple[str, str]], x: float, y: float, width: float) -> tuple[
        list[str], float]:
    """Legend boxes in lines from (x, y); returns the elements and the height used."""
    out, cx, cy = [], x, y
    for label, fill in items:
        w = 26 + 7.5 * min(len(label), 40)
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 16
        out.append(f'<rect x="{_n(cx)}" y="{_n(cy)}" width="11" height="11" fill="{fill}"/>')
        out.append(_text(cx + 15, cy + 10, cut(label, 40), full=label))
        cx += w
    return out, cy - y + 18


def _ticks(vmax: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least vmax."""
    if vmax <= 0:
        return [0.0, 1.0]
    import math

    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    k = math.ceil(vmax / step - 1e-9)
    return [i * step for i in range(k + 1)]


def stacked_bars(rows: Sequence[str], series: Sequence[tuple[str, str, Sequence[float]]],
                 fmt: Callable[[float], str], title: str, vmax: float | None = None,
                 axis: str = "", tick: Callable[[float], str] | None = None) -> str:
    """Horizontal bars, one per row, each the sum of the series' values (label, colour,
    one value per row) stacked left to right; `vmax` fixes the axis (e.g. 100 %); `fmt`
    writes a value on hover, `tick` (default `fmt`) on the axis."""
    tick = tick or fmt
    series = [(label, fill, [v or 0 for v in values]) for label, fill, values in series]
    totals = [sum(s[2][i] for s in series) for i in range(len(rows))]
    top = vmax if vmax is not None else max(totals, default=0) or 1
    ticks = _ticks(top) if vmax is None else [top * k / 4 for k in range(5)]
    top = max(top, ticks[-1])
    plot = WIDTH - LABEL - 20
    body = [_text(0, 14, title, size=13, cls="title")]
    y0 = 26
    for i, row in enumerate(rows):
        y = y0 + i * ROW
        body.append(_text(LABEL - 6, y + 15, cut(row, 34), "end", full=row))
        x = LABEL
        for label, fill, values in series:
            v = values[i]
            if v <= 0:
                continue
            w = plot * v / top
            body.append(_rect(x, y + 3, w, ROW - 6, fill, f"{row}: {label} {fmt(v)}"))
            x += w
    ya = y0 + len(rows) * ROW + 4
    for t in ticks:
        x = LABEL + plot * t / top
        body.append(f'<line x1="{_n(x)}" y1="{y0}" x2="{_n(x)}" y2="{_n(ya)}" class="grid"/>')
        body.append(_text(x, ya + 13, tick(t), "middle", 11))
    if axis:
        body.append(_text(LABEL + plot / 2, ya + 28, axis, "middle", 11))
    leg, h = _legend([(s[0], s[1]) for s in series], LABEL, ya + 36, plot)
    body += leg
    return _svg(WIDTH, ya + 36 + h, body, title)


def paired_bars(rows: Sequence[str], series: Sequence[tuple[str, str, Sequence[float | None]]],
                fmt: Callable[[float], str], title: str,
                tick: Callable[[float], str] | None = None) -> str:
    """Horizontal bars side by side per row (before and after): one thin bar per series
    (label, colour, one value per row; None: none), names readable on the left."""
    tick = tick or fmt
    vals = [v for s in series for v in s[2] if v is not None]
    ticks = _ticks(max(vals, default=0) or 1)
    top = ticks[-1]
    plot = WIDTH - LABEL - 20
    k = max(len(series), 1)
    body = [_text(0, 14, title, size=13, cls="title")]
    y0 = 26
    for i, row in enumerate(rows):
        y = y0 + i * ROW
        body.append(_text(LABEL - 6, y + 15, cut(row, 34), "end", full=row))
        for j, (label, fill, values) in enumerate(series):
            v = values[i]
            if v is None:
                continue
            h = (ROW - 6) / k
            body.append(_rect(LABEL, y + 3 + j * h, plot * max(v, 0) / top, h - 0.5, fill,
                              f"{row}: {label} {fmt(v)}"))
    ya = y0 + len(rows) * ROW + 4
    for t in ticks:
        x = LABEL + plot * t / top
        body.append(f'<line x1="{_n(x)}" y1="{y0}" x2="{_n(x)}" y2="{_n(ya)}" class="grid"/>')
        body.append(_text(x, ya + 13, tick(t), "middle", 11))
    leg, h = _legend([(s[0], s[1]) for s in series], LABEL, ya + 24, plot)
    body += leg
    return _svg(WIDTH, ya + 24 + h, body, title)


def grouped_bars(groups: Sequence[str], series: Sequence[tuple[str, str, Sequence[float | None]]],
                 fmt: Callable[[float], str], title: str, vmax: float | None = None,
                 axis: str = "") -> str:
    """Vertical bars: per group (x), one bar per series (label, colour, one value per
    group; None: no bar)."""
    vals = [v for s in series for v in s[2] if v is not None]
    top = vmax if vmax is not None else max(vals, default=0) or 1
    ticks = _ticks(top) if vmax is None else [top * k / 4 for k in range(5)]
    top = max(top, ticks[-1])
    left, height = 60, 200
    plot = WIDTH - left - 20
    gw = plot / max(len(groups), 1)
    bw = 0.8 * gw / max(len(series), 1)
    body = [_text(0, 14, title, size=13, cls="title")]
    y0 = 28
    for t in ticks:
        y = y0 + height - height * t / top
        body.append(f'<line x1="{left}" y1="{_n(y)}" x2="{_n(left + plot)}" y2="{_n(y)}" '
                    'class="grid"/>')
        body.append(_text(left - 6, y + 4, fmt(t), "end", 11))
    for gi, g in enumerate(groups):
        gx = left + gi * gw + 0.1 * gw
        for si, (label, fill, values) in enumerate(series):
            v = values[gi]
            if v is None:
                continue
            h = height * max(v, 0) / top
            body.append(_rect(gx + si * bw, y0 + height - h, bw * 0.92, h, fill,
                              f"{g}, {label}: {fmt(v)}"))
        body.append(_text(left + (gi + 0.5) * gw, y0 + height + 15, cut(g, int(gw / 7) + 1),
                          "middle", 11, full=g))
    if axis:
        body.append(_text(14, y0 + height / 2, axis, "middle", 11))
    leg, h = _legend([(s[0], s[1]) for s in series], left, y0 + height + 26, plot)
    body += leg
    return _svg(WIDTH, y0 + height + 26 + h, body, title)


def lines(x: Sequence[float], series: Sequence[tuple[str, str, Sequence[float | None]]],
          fmt_x: Callable[[float], str], fmt_y: Callable[[float], str], title: str,
          xlabel: str = "", ylabel: str = "", marked: Sequence[int] = (),
          ymax: float | None = None, log_x: bool = False) -> str:
    """Lines with a marker at each point (series: label, colour, one y per x; None: a
    hole); the points of index `marked` (outliers) drawn larger, in red."""
    import math

    ys = [v for s in series for v in s[2] if v is not None]
    top = ymax if ymax is not None else max(ys, default=0) or 1
    ticks = _ticks(top)
    top = max(top, ticks[-1])
    fx = (lambda v: math.log2(max(v, 1e-12))) if log_x else (lambda v: float(v))
    xs = [fx(v) for v in x]
    lo, hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    left, height = 70, 220
    plot = WIDTH - left - 30
    y0 = 40

    def px(v: float) -> float:
        return left + plot * (v - lo) / (hi - lo)

    def py(v: float) -> float:
        return y0 + height - height * v / top

    body = [_text(0, 14, title, size=13, cls="title")]
    for t in ticks:
        body.append(f'<line x1="{left}" y1="{_n(py(t))}" x2="{_n(left + plot)}" '
                    f'y2="{_n(py(t))}" class="grid"/>')
        body.append(_text(left - 6, py(t) + 4, fmt_y(t), "end", 11))
    shown = list(range(len(x))) if len(x) <= 12 else \
        sorted({round(i * (len(x) - 1) / 10) for i in range(11)})
    for i in shown:
        body.append(_text(px(xs[i]), y0 + height + 15, fmt_x(x[i]), "middle", 11))
    mark = set(marked)
    for label, fill, values in series:
        pts = [(px(xs[i]), py(v), i, v) for i, v in enumerate(values) if v is not None]
        if len(pts) > 1:
            path = " ".join(f"{_n(a)},{_n(b)}" for a, b, _, _ in pts)
            body.append(f'<polyline points="{path}" fill="none" stroke="{fill}" '
                        'stroke-width="1.6"/>')
        r = 3 if len(pts) <= 200 else 1.6
        for a, b, i, v in pts:
            big = i in mark
            body.append(f'<circle cx="{_n(a)}" cy="{_n(b)}" r="{_n(r * 1.8 if big else r)}" '
                        f'fill="{MARK if big else fill}"><title>{escape(label)}: '
                        f'{escape(fmt_x(x[i]))} -> {escape(fmt_y(v))}'
                        f'{" (outlier)" if big else ""}</title></circle>')
    if xlabel:
        body.append(_text(left + plot / 2, y0 + height + 30, xlabel, "middle", 11))
    if ylabel:
        body.append(_text(left - 6, y0 - 12, ylabel, "end", 11))
    leg, h = _legend([(s[0], s[1]) for s in series]
                     + ([("outlier", MARK)] if mark else []), left, y0 + height + 38, plot)
    body += leg
    return _svg(WIDTH, y0 + height + 38 + h, body, title)


def scatter(points: Sequence[tuple[float, float, float, str, str]], title: str,
            xlabel: str, ylabel: str, xmax: float = 100.0, ymax: float = 100.0) -> str:
    """Points (x, y, size 0-1, label, colour) on fixed axes from 0 (a speed-of-light
    chart: compute against memory, % of peak); the point's area grows with its size."""
    import math

    left, height, plot = 60, 320, 420
    y0 = 28
    body = [_text(0, 14, title, size=13, cls="title")]
    for k in range(5):
        v = xmax * k / 4
        x = left + plot * k / 4
        y = y0 + height - height * k / 4
        body.append(f'<line x1="{_n(x)}" y1="{y0}" x2="{_n(x)}" y2="{y0 + height}" '
                    'class="grid"/>')
        body.append(f'<line x1="{left}" y1="{_n(y)}" x2="{left + plot}" y2="{_n(y)}" '
                    'class="grid"/>')
        body.append(_text(x, y0 + height + 15, f"{v:g}", "middle", 11))
        body.append(_text(left - 6, y + 4, f"{ymax * k / 4:g}", "end", 11))
    body.append(f'<line x1="{left}" y1="{y0 + height}" x2="{left + plot}" y2="{y0}" '
                'class="diag"/>')
    for x, y, size, label, fill in sorted(points, key=lambda p: -p[2]):
        r = 3 + 14 * math.sqrt(max(min(size, 1.0), 0.0))
        cx = left + plot * min(max(x, 0), xmax) / xmax
        cy = y0 + height - height * min(max(y, 0), ymax) / ymax
        body.append(f'<circle cx="{_n(cx)}" cy="{_n(cy)}" r="{_n(r)}" fill="{fill}" '
                    f'fill-opacity="0.55" stroke="{fill}"><title>{escape(label)}: '
                    f'{escape(xlabel)} {x:.1f}, {escape(ylabel)} {y:.1f}, '
                    f'{100 * size:.1f} % of the time</title></circle>')
    body.append(_text(left + plot / 2, y0 + height + 30, xlabel, "middle", 11))
    body.append(_text(left + plot + 8, y0 + 10, "↑ " + ylabel, "start", 11))
    return _svg(left + plot + 20 + 7 * len(ylabel), y0 + height + 40, body, title)


def heatmap(rows: Sequence[str], values: Sequence[Sequence[float]], starts: Sequence[float],
            fmt_t: Callable[[float], str], title: str, max_rows: int = 48) -> str:
    """A row x column grid of fractions 0-1 (white to dark blue), columns in time
    (`starts`: each column's start); more rows than `max_rows` are binned: consecutive
    rows averaged into `max_rows` bands, labelled with the rows they hold."""
    n = len(rows)
    if n > max_rows:  # bands of consecutive rows, averaged
        band = [(k * n) // max_rows for k in range(max_rows + 1)]
        grid = np.asarray(values, dtype=np.float64).reshape(n, len(starts))
        sums = np.add.reduceat(grid, band[:-1], axis=0)
        values = (sums / np.diff(band)[:, None]).tolist()
        rows = [f"{cut(rows[a], 24)} … {cut(rows[b - 1], 24)} ({b - a})" if b - a > 1
                else rows[a] for a, b in zip(band, band[1:])]
    cols = len(starts)
    cell_h = 14 if len(rows) <= 24 else 9
    left = LABEL
    plot = WIDTH - left - 20
    cw = plot / max(cols, 1)
    y0 = 26
    body = [_text(0, 14, title, size=13, cls="title")]
    for i, (row, vals) in enumerate(zip(rows, values)):
        y = y0 + i * cell_h
        body.append(_text(left - 6, y + cell_h - 2, cut(row, 34), "end",
                          11 if cell_h > 10 else 9, full=row))
        for j, v in enumerate(vals):
            shade = _blue(v)
            body.append(f'<rect x="{_n(left + j * cw)}" y="{y}" width="{_n(cw + 0.3)}" '
                        f'height="{cell_h - 1}" fill="{shade}"><title>{escape(row)}, from '
                        f'{escape(fmt_t(starts[j]))}: busy {100 * v:.1f} %</title></rect>')
    ya = y0 + len(rows) * cell_h + 4
    for j in sorted({round(k * (cols - 1) / 6) for k in range(7)}) if cols else []:
        body.append(_text(left + j * cw, ya + 12, fmt_t(starts[j]), "middle", 10))
    body.append(_text(left, ya + 30, "busy:", "start", 11))
    for k in range(6):
        body.append(f'<rect x="{left + 40 + 30 * k}" y="{ya + 20}" width="30" height="11" '
                    f'fill="{_blue(k / 5)}" stroke="#999" stroke-width="0.3"/>')
        body.append(_text(left + 55 + 30 * k, ya + 44, f"{20 * k} %", "middle", 9))
    return _svg(WIDTH, ya + 50, body, title)


def _blue(v: float) -> str:
    """White (0) to dark blue (1)."""
    v = min(max(v, 0.0), 1.0)
    r = round(255 - v * (255 - 16))
    g = round(255 - v * (255 - 60))
    b = round(255 - v * (255 - 160))
    return f"#{r:02x}{g:02x}{b:02x}"


def timeline(rows: Sequence[str], spans: Sequence[tuple[int, float, float, str, str]],
             t0: float, t1: float, fmt_t: Callable[[float], str], title: str) -> str:
    """Intervals (row index, start, end, colour, title) on rows over [t0, t1]: where in the
    run the largest gaps fall. An interval shorter than a pixel is drawn a pixel wide."""
    left = LABEL
    plot = WIDTH - left - 20
    span = max(t1 - t0, 1)
    y0 = 26
    body = [_text(0, 14, title, size=13, cls="title")]
    for i, row in enumerate(rows):
        y = y0 + i * ROW
        body.append(_text(left - 6, y + 15, cut(row, 34), "end", full=row))
        body.append(f'<rect x="{left}" y="{y + 9}" width="{plot}" height="2" fill="#ddd"/>')
    for r, s, e, fill, tip in spans:
        x = left + plot * (s - t0) / span
        w = max(plot * (e - s) / span, 1.5)
        body.append(_rect(x, y0 + r * ROW + 3, w, ROW - 6, fill, tip))
    ya = y0 + len(rows) * ROW + 4
    for k in range(7):
        t = t0 + span * k / 6
        body.append(_text(left + plot * k / 6, ya + 12, fmt_t(t), "middle", 10))
    return _svg(WIDTH, ya + 20, body, title)


def flame_graph(folded: pl.DataFrame, title: str, min_share: float = 0.002,
                max_depth: int = 40) -> str:
    """A flame graph of folded stacks (`stack`: 'root;...;leaf', `samples`): each frame a
    box as wide as the samples of the stacks through it, its callees above it, roots at
    the bottom (the layout of `analysis.samples.flame`, depth by depth). Frames narrower
    than `min_share` of all samples, or deeper than `max_depth`, are left out."""
    from ..analysis.samples import flame

    total = int(folded["samples"].sum()) if folded.height else 0
    if total == 0:
        return _svg(WIDTH, 40, [_text(0, 14, title + ": no samples", size=13)], title)
    shown = flame(folded, min_share).filter(pl.col("depth") < max_depth)
    depth = int(shown["depth"].max()) + 1
    h = 17
    y_base = 26 + depth * h
    body = [_text(0, 14, title, size=13, cls="title")]
    for r in shown.sort("depth", "start").iter_rows(named=True):  # the boxes (bounded)
        x = WIDTH * r["start"] / total
        w = WIDTH * r["width"] / total
        y = y_base - (r["depth"] + 1) * h
        fill = FLAME[hash_text(r["name"]) % len(FLAME)]
        tip = f"{r['name']}: {r['width']} samples ({100 * r['width'] / total:.1f} %)"
        body.append(_rect(x, y, w - 0.5, h - 1, fill, tip))
        if w > 40:
            body.append(_text(x + 3, y + 12, cut(r["name"], int(w / 7)), size=11,
                              full=r["name"], cls="flame"))
    return _svg(WIDTH, y_base + 6, body, title)


def hash_text(text: str) -> int:
    """A stable hash of a text (Python's `hash` changes between processes)."""
    h = 0
    for ch in text.encode("utf-8")[:64]:
        h = (h * 31 + ch) & 0xFFFFFFFF
    return h
