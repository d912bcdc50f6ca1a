"""Paraver views (.cfg) of nsys2prv traces, built from the registry's numbers.

The files under `cfgs/` are generated from the catalogue in `catalogue.py`
(`python -m nsys2prv.views.catalogue cfgs/`) so that every event type a view filters on comes
from `nsys2prv.paraver.registry` and cannot drift; a test checks that the committed files are
what the catalogue produces. This module holds the small cfg model (windows, derived windows,
histograms), the writer, and a reader used by the tests to list what a cfg file refers to.

Syntax notes (verified against paramedir, see docs/cfgs.md): windows are referenced by
position, a window that filters no event type must say `{evt_type, All}` (else paramedir
aborts loading on traces without the listed types), and paramedir writes only the last
histogram of a file (or the last window when there is none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

LEVELS = ("cpu", "appl", "task", "thread", "node", "system", "workload")
COMPOSE_LEVELS = ("compose_cpu", "compose_appl", "compose_task", "compose_thread",
                  "compose_node", "compose_system", "compose_workload", "topcompose1",
                  "topcompose2")


@dataclass(frozen=True)
class Window:
    """One timeline. `types` None means no event filter ({evt_type, All}); `type_range`
    makes the two types the ends of a `[x,y]` range. `derived` = (operation, parent names,
    factors) makes it a composed window of two earlier windows of the same cfg.

    `params` are (level, function, parameter lists) for `window_semantic_module`.
    """

    name: str
    level: str = "thread"
    thread: str = "State As Is"
    aggregate: str = "Adding"
    compose: Mapping[str, str] = field(default_factory=dict)
    params: tuple[tuple[str, str, tuple[tuple[float, ...], ...]], ...] = ()
    types: tuple[int, ...] | None = None
    type_range: bool = False
    values: tuple[int, ...] | None = None
    derived: tuple[str, tuple[str, str], tuple[float, float]] | None = None
    units: str = "Nanoseconds"
    gradient: bool = False  # numeric values (gradient colours; auto histogram scales bin them)
    # with `gradient`: 0 means "no value here" (no sample, not in a kernel) and is not
    # painted, so rows without the data stay empty instead of taking the gradient's colour
    zero_unpainted: bool = False
    hidden: bool = False  # loaded but not opened (`window_open false`)
    # a fixed colour scale (minimum, maximum) instead of one fitted to the values shown:
    # windows of one metric in one scale (percentages 0-100) compare by colour
    y_range: tuple[float, float] | None = None
    # a zoom: (begin, end) in trace units instead of the whole trace
    time_range: tuple[int, int] | None = None
    # rows shown: for every task of the trace in order, one flag per thread (None = all)
    selected: tuple[tuple[bool, ...], ...] | None = None
    # what a pixel that covers several values shows (Paraver's default: the maximum), e.g.
    # "draw_minnotzero" where short high codes would hide the long low ones
    drawmode: str | None = None
    # the communication lines the window takes: only these tags (None: all), or all but
    # these with `comm_tags_exclude`
    comm_tags: tuple[int, ...] | None = None
    comm_tags_exclude: bool = False


@dataclass(frozen=True)
class Histogram:
    """A 2D (or 3D with `plane`) analyzer over windows named by `control`/`data`."""

    name: str
    control: str
    data: str
    statistic: str
    minimum: float = 0.0
    maximum: float = 1.0
    delta: float = 1.0
    compute_scale: bool = False
    num_columns: int | None = None
    plane: str | None = None
    plane_minimum: float = 0.0
    plane_maximum: float = 1.0
    plane_delta: float = 1.0
    plane_compute_scale: bool = False
    hide_cols: bool = False
    # False: column labels whole; Paraver's default shortens them, erasing from the first
    # '[' to the last ']' (for Extrae's 'function [full name]'), which would also erase
    # nsys' '[kernel.kallsyms]' and '[Unknown]' modules from 'FUNCTION (MODULE)' labels
    short_labels: bool | None = None


@dataclass(frozen=True)
class Cfg:
    """A cfg file: `path` under cfgs/, a title, a description shown by Paraver and the docs,
    its windows and an optional histogram (what paramedir writes)."""

    path: str
    title: str
    description: str
    windows: tuple[Window, ...]
    histogram: Histogram | None = None
    comm_lines: bool = False  # draw communication lines (launch arrows, MPI messages)


# ------------------------------------------------------------------------------------------
# Writer
# ------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{float(x):.12f}"


def _window_lines(w: Window, position: int, names: dict[str, int],
                  comm_lines: bool = False) -> list[str]:
    out = ["", "#" * 80, f"< NEW DISPLAYING WINDOW {w.name} >", "#" * 80,
           f"window_name {w.name}"]
    compose = {k: "As Is" for k in COMPOSE_LEVELS}
    compose.update(w.compose)
    compose_txt = ", ".join(f"{{{k}, {v}}}" for k, v in compose.items())
    if w.derived is not None:
        op, (a, b), (fa, fb) = w.derived
        out += ["window_type composed", f"window_id {position}",
                f"window_factors {_num(fa)} {_num(fb)}", "window_shifts 0 0",
                f"window_operation {op}", f"window_identifiers {names[a]} {names[b]}",
                f"window_units {w.units}", f"window_level {w.level}",
                "window_begin_time_relative 0.000000000000",
                "window_end_time_relative 1.000000000000",
                "window_selected_functions { 5, { " + ", ".join(
                    f"{{{lv}, {w.aggregate}}}" for lv in ("appl", "task", "node", "system",
                                                          "workload")) + " } }",
                f"window_compose_functions {{ 9, {{ {compose_txt} }} }}"]
    else:
        if w.types is None:
            evt = "All"
        elif w.type_range:
            evt = "[x,y]"
        else:
            evt = "="
        value_fn = "=" if w.values else "All"
        fns = [("cpu", "Active Thd"), ("appl", w.aggregate), ("task", w.aggregate),
               ("thread", w.thread), ("node", w.aggregate), ("system", w.aggregate),
               ("workload", w.aggregate), ("from_obj", "All"), ("to_obj", "All"),
               ("tag_msg", ("!=" if w.comm_tags_exclude else "=") if w.comm_tags
                else "All"), ("size_msg", "All"),
               ("bw_msg", "All"),
               ("evt_type", evt), ("evt_value", value_fn)]
        span = ([f"window_begin_time {w.time_range[0]}", f"window_stop_time {w.time_range[1]}"]
                if w.time_range else ["window_begin_time_relative 0.000000000000",
                                      "window_end_time_relative 1.000000000000"])
        out += ["window_type single", f"window_id {position}", f"window_units {w.units}",
                f"window_level {w.level}", *span,
                "window_selected_functions { 14, { " + ", ".join(
                    f"{{{k}, {v}}}" for k, v in fns) + " } }",
                f"window_compose_functions {{ 9, {{ {compose_txt} }} }}"]
        for task, flags in enumerate(w.selected or ()):
            out.append(f"window_object thread {{ 0, {task}, {len(flags)}, {{ "
                       + ", ".join("1" if f else "0" for f in flags) + " } }")
        if w.types is not None:
            out.append(f"window_filter_module evt_type {len(w.types)} "
                       + " ".join(str(t) for t in w.types))
        if w.values:
            out.append(f"window_filter_module evt_value {len(w.values)} "
                       + " ".join(str(v) for v in w.values))
        if w.comm_tags:
            out.append(f"window_filter_module tag_msg {len(w.comm_tags)} "
                       + " ".join(str(t) for t in w.comm_tags))
            # tag AND size: with Paraver's default (OR) a line of another tag still passes
            # on its size (any size)
            out.append("window_comm_tagsize true")
    if w.drawmode:
        out.append(f"window_drawmode {w.drawmode}")
    if w.hidden:
        out.append("window_open false")
    out.append(f"window_comm_lines_enabled {'true' if comm_lines else 'false'}")
    # the GUI fits the colour scale to the values the window shows (paramedir ignores it):
    # without it, in code colours every value above the default maximum (18) - states 19-33
    # (launches, allocations), API and kernel names - is painted black like Idle, and in a
    # gradient every value above it gets the same colour
    if w.y_range is not None:
        out += [f"window_minimum_y {_num(w.y_range[0])}", f"window_maximum_y {_num(w.y_range[1])}",
                "window_compute_y_max false"]
    else:
        out.append("window_compute_y_max true")
    if w.gradient:
        out.append("window_color_mode " + ("window_in_null_gradient_mode" if w.zero_unpainted
                                           else "window_in_gradient_mode"))
    for level, fn, plists in w.params:
        body = ", ".join(f"{len(p)} " + " ".join(_num(v) for v in p) for p in plists)
        out.append(f"window_semantic_module {level} {fn} {{ {len(plists)}, {{ {body} }} }}")
    return out


def _histogram_lines(h: Histogram, names: dict[str, int]) -> list[str]:
    out = ["", "< NEW ANALYZER2D >", f"Analyzer2D.Name: {h.name}",
           f"Analyzer2D.ControlWindow: {names[h.control]}",
           f"Analyzer2D.DataWindow: {names[h.data]}", "Analyzer2D.Accumulator: Semantic",
           f"Analyzer2D.Statistic: {h.statistic}", "Analyzer2D.CalculateAll: True",
           f"Analyzer2D.HideCols: {h.hide_cols}", "Analyzer2D.HorizVert: Horizontal",
           "Analyzer2D.SortCols: False", "Analyzer2D.AnalysisLimits: Alltrace",
           f"Analyzer2D.ComputeYScale: {h.compute_scale}"]
    if not h.compute_scale:
        out += [f"Analyzer2D.Minimum: {_num(h.minimum)}", f"Analyzer2D.Maximum: {_num(h.maximum)}",
                f"Analyzer2D.Delta: {_num(h.delta)}"]
    if h.num_columns is not None:
        out.append(f"Analyzer2D.NumColumns: {h.num_columns}")
    if h.short_labels is not None:
        out.append(f"Analyzer2D.ShortHeaderLabels: {h.short_labels}")
    if h.plane is not None:
        out += [f"Analyzer2D.3D_ControlWindow: {names[h.plane]}",
                f"Analyzer3D.ComputeYScale: {h.plane_compute_scale}"]
        if not h.plane_compute_scale:
            out += [f"Analyzer2D.3D_Minimum: {_num(h.plane_minimum)}",
                    f"Analyzer2D.3D_Maximum: {_num(h.plane_maximum)}",
                    f"Analyzer2D.3D_Delta: {_num(h.plane_delta)}"]
    return out


def render(cfg: Cfg) -> str:
    """The text of a cfg file (windows by position, then the histogram)."""
    names: dict[str, int] = {}
    body: list[str] = []
    for i, w in enumerate(cfg.windows, start=1):
        if w.name in names:
            raise ValueError(f"{cfg.path}: window name {w.name!r} used twice")
        if w.derived is not None:
            for parent in w.derived[1]:
                if parent not in names:
                    raise ValueError(f"{cfg.path}: {w.name!r} uses {parent!r} before it")
        names[w.name] = i
        body += _window_lines(w, i, names, cfg.comm_lines)
    if cfg.histogram is not None:
        body += _histogram_lines(cfg.histogram, names)
    head = ["#ParaverCFG", "ConfigFile.Version: 3.4",
            f"ConfigFile.NumWindows: {len(cfg.windows)}", "ConfigFile.BeginDescription",
            cfg.title, *cfg.description.strip().splitlines(), "ConfigFile.EndDescription"]
    return "\n".join(head + body) + "\n"


def write_all(cfgs: Iterable[Cfg], root: str | Path) -> list[Path]:
    """Write every cfg under `root`; returns the paths written."""
    written = []
    for cfg in cfgs:
        p = Path(root) / cfg.path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(render(cfg))
        written.append(p)
    return written


# ------------------------------------------------------------------------------------------
# Reader (what a cfg file refers to), for tests and docs
# ------------------------------------------------------------------------------------------


@dataclass
class ParsedWindow:
    name: str
    composed: bool = False
    level: str = "thread"
    functions: dict[str, str] = field(default_factory=dict)
    types: list[int] = field(default_factory=list)
    type_function: str | None = None
    parents: tuple[int, int] | None = None
    hidden: bool = False
    comm_lines: bool | None = None


@dataclass
class ParsedCfg:
    path: Path
    windows: list[ParsedWindow]
    histogram: dict[str, str]
    description: str

    def event_types(self) -> list[tuple[int, ...]]:
        """Event types filtered by each window: a 1-tuple per listed type, a 2-tuple
        (first, last) per `[x,y]` range."""
        out: list[tuple[int, ...]] = []
        for w in self.windows:
            if w.type_function == "[x,y]" and len(w.types) == 2:
                out.append((w.types[0], w.types[1]))
            else:
                out += [(t,) for t in w.types]
        return out


_PAIR = re.compile(r"\{([^{},]+),\s*([^{}]+?)\}")


def parse_cfg(path: str | Path) -> ParsedCfg:
    """Read the parts of a cfg that matter for checking it against a trace: each window's
    level, functions and event-type filter, the histogram tags and the description."""
    text = Path(path).read_text()
    windows: list[ParsedWindow] = []
    pending_name: str | None = None
    histogram: dict[str, str] = {}
    desc: list[str] = []
    in_desc = False
    in_hist = False
    for line in text.splitlines():
        if line.startswith("ConfigFile.BeginDescription"):
            in_desc = True
            continue
        if line.startswith("ConfigFile.EndDescription"):
            in_desc = False
            continue
        if in_desc:
            desc.append(line)
            continue
        if not line or line.startswith("#"):
            continue
        if line.startswith("< NEW ANALYZER2D >"):
            in_hist = True
            continue
        if in_hist:
            key, _, value = line.partition(":")
            histogram[key.strip()] = value.strip()
            continue
        tag, _, arg = line.partition(" ")
        if tag == "window_name":
            pending_name = arg
        elif tag == "window_type":
            windows.append(ParsedWindow(pending_name or f"window {len(windows) + 1}",
                                        composed=arg.strip() == "composed"))
        elif not windows:
            continue
        elif tag == "window_level":
            windows[-1].level = arg.strip()
        elif tag in ("window_selected_functions", "window_compose_functions"):
            for k, v in _PAIR.findall(arg):
                windows[-1].functions[k.strip()] = v.strip()
            if tag == "window_selected_functions":
                windows[-1].type_function = windows[-1].functions.get("evt_type")
        elif tag == "window_filter_module":
            parts = arg.split()
            if parts and parts[0] == "evt_type":
                windows[-1].types = [int(x) for x in parts[2:2 + int(parts[1])]]
        elif tag == "window_open":
            windows[-1].hidden = arg.strip() == "false"
        elif tag == "window_comm_lines_enabled":
            windows[-1].comm_lines = arg.strip() == "true"
        elif tag == "window_identifiers":
            a, b = arg.split()
            windows[-1].parents = (int(a), int(b))
    return ParsedCfg(Path(path), windows, histogram, "\n".join(desc))
