"""The three pages: one run (`analyze --html`, `Run.to_html`), two runs compared
(`diff --html`, `nsys2prv.compare(...).to_html`) and a scaling study (`analyze --scaling
--html`, `nsys2prv.scaling(...).to_html`), each assembled from the sections of
`sections.py` over what the analyses returned (`run.Tables`).
"""

from __future__ import annotations

from html import escape

import polars as pl

from .. import __version__
from . import charts, sections
from .document import Section, render
from .table import Col, table

GENERATOR = f"Made by nsys2prv {__version__} (docs/html.md). Every number links to its " \
    "table; hover a value for its exact number."


def _duration(ns: int) -> str:
    return f"{ns / 1e9:.3f} s" if ns >= 10e9 else f"{ns / 1e6:.3f} ms"


def analysis_page(*, source: str, end: int, devices: int, processes: int, efficiency,
                  idle, steps, layers, kernels, critical, rules, rules_why: str,
                  findings: pl.DataFrame, utilisation: pl.DataFrame | None,
                  samples=None) -> str:
    """One run's page: what the run is and its findings, then a section per analysis
    (None: not computed, the section says so)."""
    facts = [("inputs", source), ("processes with GPU work", str(processes)),
             ("GPUs", str(devices)), ("trace time", _duration(end))]
    statements = []
    if steps is not None:
        st = steps.frames.get("steps")
        if st is None or st.height == 0:
            why = " ".join(steps.notes)
            statements.append(f"No training step found ({why}): the findings and sections "
                              "describe the capture as a whole.")
            facts.append(("step", "none found"))
        else:
            facts.append(("step", f"{steps.notes[0].removeprefix('step: ')}"))
    if layers is not None and layers.notes:
        facts.append(("layer level", layers.notes[0].removeprefix("layers: ")))
    parts = [sections.overview(facts, findings, statements),
             sections.efficiency(efficiency, end), sections.utilisation(utilisation, end)]
    parts.append(sections.idle(idle, end) if idle is not None else Section(
        "idle", "Why the GPUs wait", sections.missing(
            "Not computed (--no-idle): nsys2prv analyze without it explains the gaps.")))
    parts.append(sections.samples(samples))
    parts.append(sections.steps(steps) if steps is not None else Section(
        "steps", "Steps", sections.missing("Not computed for this page.")))
    parts.append(sections.layers(layers) if layers is not None else Section(
        "layers", "Layers on the GPU", sections.missing(
            "No NVTX range in this trace (or --no-layers).", sections.RECORD_NVTX)))
    parts.append(sections.kernels(kernels, idle))
    parts.append(sections.critical(critical))
    parts.append(sections.rules(rules, rules_why))
    return render(f"nsys2prv: {_short(source)}", f"{source} - {processes} process(es), "
                  f"{devices} GPU(s), {_duration(end)}", parts, GENERATOR)


def _short(text: str, n: int = 80) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1):]


# ------------------------------------------------------------------------ comparison --

CHANGED = 12  # items per before/after chart


def comparison_page(tables) -> str:
    """Two runs compared: the analyst's paragraph and the verdict on top, then before /
    after charts of what changed most (kernels, layers, steps, memory kinds) with their
    verdicts, and every table."""
    c = tables.source
    b, a = c.before, c.after
    v = c.verdict
    change = "-" if v.change is None else f"{100 * v.change:+.1f} %"
    facts = [("before", f"{b.source} ({_duration(b.elapsed)})"),
             ("after", f"{a.source} ({_duration(a.elapsed)})"),
             ("verdict", f"{v.verdict} ({change}" + (f", p = {v.p:.3g}" if v.p is not None
                                                    else "") + ")")]
    it = c.iterations
    if it is not None:
        facts.append(("step", f"'{it.name}'" + (f"@{it.domain}" if it.domain else "")
                      + f", {it.before.height} / {it.after.height} instances"))
    elif c.step_search is not None:
        facts.append(("step", f"none found: {c.step_search.why}"))
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(x)}</dd>" for k, x in facts)
    top = (f'<dl class="facts">{dl}</dl><p class="para">{escape(c.paragraph)}</p>'
           + sections.notes(f"warning: {w}" for w in c.warnings))
    parts = [Section("summary", "The comparison", top)]
    frames = tables.frames
    parts.append(_changed("kernels", "Kernels", frames.get("kernels"), "label",
                          "total_before", "total_after",
                          [Col("label", "kernel"), Col("count_before", "launches before",
                                                       "int"),
                           Col("count_after", "launches after", "int"),
                           Col("total_before", "time before", "ms"),
                           Col("total_after", "time after", "ms"),
                           Col("delta", "change", "ms"), Col("ratio", "after / before",
                                                             "ratio"),
                           Col("matched_by", "matched by")],
                          ["analysis/compare_kernel_time.cfg", "views/compare_kernels.cfg"]))
    parts.append(_changed("layers", "Layers (NVTX ranges on the GPU)", frames.get("layers"),
                          "range", "gpu_before", "gpu_after",
                          [Col("range", "range"), Col("count_before", "before", "int"),
                           Col("count_after", "after", "int"),
                           Col("gpu_before", "GPU time before", "ms"),
                           Col("gpu_after", "GPU time after", "ms"),
                           Col("delta", "change", "ms"), Col("ratio", "after / before",
                                                             "ratio")],
                          ["views/layers_on_gpu.cfg", "analysis/layer_gpu_time.cfg"]))
    parts.append(_steps_compared(c, frames))
    parts.append(_changed("memory", "Categories and memory kinds", frames.get("categories"),
                          "label", "total_before", "total_after",
                          [Col("category", "category"), Col("detail", "kind"),
                           Col("count_before", "before", "int"),
                           Col("count_after", "after", "int"),
                           Col("total_before", "time before", "ms"),
                           Col("total_after", "time after", "ms"),
                           Col("delta", "change", "ms"), Col("ratio", "after / before",
                                                             "ratio")],
                          ["views/memory_transfers.cfg", "basics/memory_operations.cfg"],
                          label_of=(pl.col("category") + pl.when(pl.col("detail") != "")
                                 .then(pl.lit(": ") + pl.col("detail")).otherwise(pl.lit("")))))
    rest = ""
    for name, head in (("models", "Efficiency models"), ("devices", "Devices"),
                       ("nvtx", "NVTX ranges (CPU time)"), ("kernel_rates", "Kernel rates"),
                       ("kernel_launches", "Launch configurations that changed"),
                       ("rules", "NVIDIA's rules (rows found)")):
        f = frames.get(name)
        if f is not None and f.height:
            rest += table(f, [Col(col, col, _kind(col, f)) for col in f.columns
                              if not isinstance(f[col].dtype, pl.List)], head)
    if rest:
        parts.append(Section("tables", "Every other table", rest))
    return render(f"nsys2prv diff: {_short(b.label)} -> {_short(a.label)}",
                  f"{b.source} -> {a.source}", parts, GENERATOR)


def _kind(col: str, f: pl.DataFrame) -> str:
    """A comparison table's column kind: times (ns) as ms, ratios, counts, text."""
    dt = f[col].dtype
    if dt == pl.Boolean:
        return "bool"
    if dt.is_numeric():
        if "ratio" in col:
            return "ratio"
        if col.startswith(("total", "gpu", "span", "delta", "mean", "median", "min", "max",
                           "std", "compute kernels", "NCCL kernels", "memcpy", "memset",
                           "GPU idle")):
            return "ms"
        return "int" if dt.is_integer() else "num"
    return "text"


def _changed(sid: str, title: str, frame: pl.DataFrame | None, label: str, before: str,
             after: str, cols: list[Col], cfg_names: list[str], label_of=None) -> Section:
    """A before/after chart of the items whose time changed most, and their table."""
    if frame is None or frame.height == 0:
        return Section(sid, title, sections.missing("Nothing to compare in these runs."))
    f = frame if label_of is None else frame.with_columns(label_of.alias(label))
    f = f.with_columns((pl.col(after).fill_null(0) - pl.col(before).fill_null(0)).abs()
                       .alias("_moved")).sort("_moved", label, descending=[True, False])
    top = f.head(CHANGED)
    from ..analysis.layers import layer_label

    names = [layer_label(x or "") if sid == "layers" else (x or "")
             for x in top[label].to_list()]
    svg = charts.paired_bars(
        names, [("before", charts.colour(10), [None if x is None else x
                                               for x in top[before].to_list()]),
                ("after", charts.colour(0), [None if x is None else x
                                             for x in top[after].to_list()])],
        sections.ms, f"The {top.height} whose time moved most, before and after",
        tick=sections.ms_tick)
    body = sections.figure(svg) + table(f.drop("_moved"), cols, "All") \
        + sections.cfgs(cfg_names)
    return Section(sid, title, body)


def _steps_compared(c, frames) -> Section:
    """The steps of both runs: each step's duration before and after, the shifts with
    their verdicts, the kernels per step that moved most."""
    it = c.iterations
    if it is None:
        why = c.step_search.why if c.step_search is not None else "no step"
        return Section("steps", "Steps", sections.missing(
            f"No step in both runs ({why}): the verdict compares the elapsed times.",
            sections.RECORD_NVTX))
    n = max(it.before.height, it.after.height)
    x = list(range(n))

    def col(f: pl.DataFrame) -> list:
        d = [v / 1e6 for v in f["duration"].to_list()]
        return d + [None] * (n - len(d))

    svg = charts.lines(x, [("before", charts.colour(10), col(it.before)),
                           ("after", charts.colour(0), col(it.after))],
                       lambda v: f"{v:g}", lambda v: f"{v:.3g} ms",
                       "Duration of each step, before and after", "step", "ms")
    shifts = pl.DataFrame([{"what": k, "median before": s.median_before,
                            "median after": s.median_after, "change": s.change,
                            "p": s.p, "verdict": s.reading()} for k, s in it.shifts.items()],
                          schema={"what": pl.Utf8, "median before": pl.Float64,
                                  "median after": pl.Float64, "change": pl.Float64,
                                  "p": pl.Float64, "verdict": pl.Utf8})
    body = sections.figure(svg) + table(shifts, [
        Col("what", "per step"), Col("median before", "median before", "ms"),
        Col("median after", "median after", "ms"), Col("change", "change", "pct"),
        Col("p", "p", "num"), Col("verdict", "verdict")], "Shifts and verdicts")
    sk = it.kernels
    if sk is not None and sk.height:
        body += table(sk, [Col(col_, col_, _kind(col_, sk)) for col_ in sk.columns
                           if not isinstance(sk[col_].dtype, pl.List)],
                      "Kernels per step that moved most (verdicts Holm-corrected)")
    body += sections.cfgs(["basics/nvtx_pushpop.cfg"])
    return Section("steps", "Steps", body)


# --------------------------------------------------------------------------- scaling --

def scaling_page(tables) -> str:
    """A scaling study (TALP Pages' view): the POP table across runs, the efficiencies and
    the speed-up against the number of devices."""
    from ..analysis.scaling import ROWS, column_names

    columns = tables.source
    names = column_names([c.label for c in columns])
    devices = [c.devices for c in columns]
    rows = []
    for label, get in ROWS:
        vals = [get(c) for c in columns]
        if all(v is None for v in vals):
            continue
        rows.append({"metric": label.strip(), **{n: (None if v is None else float(v))
                                                 for n, v in zip(names, vals)}})
    pop = pl.DataFrame(rows, schema={"metric": pl.Utf8, **{n: pl.Float64 for n in names}})
    x = devices
    form = [("global efficiency", "global"), ("parallel efficiency", "parallel"),
            ("load balance", "load_balance"), ("communication efficiency", "communication"),
            ("orchestration efficiency", "orchestration"),
            ("computational scalability", "computational_scalability")]
    body = ""
    for key, title in (("talp", "TALP-compatible form"), ("nccl", "NCCL-aware form")):
        series = [(label, charts.colour(i), [None if getattr(c, key).get(k) is None
                                             else 100 * getattr(c, key)[k] for c in columns])
                  for i, (label, k) in enumerate(form)]
        body += sections.figure(charts.lines(
            x, series, lambda v: f"{v:g}", lambda v: f"{v:.0f} %",
            f"Efficiencies against the devices ({title}; reference: {names[0]})",
            "devices", "%", ymax=max([100.0, *(v for s in series for v in s[2]
                                               if v is not None)]), log_x=len(set(x)) > 2))
    speed = [c.speedup for c in columns]
    if any(s is not None for s in speed):
        ideal = [d / devices[0] if devices[0] else None for d in devices]
        body += sections.figure(charts.lines(
            x, [("speed-up", charts.colour(0), speed), ("ideal (strong)", "#999", ideal)],
            lambda v: f"{v:g}", lambda v: f"{v:.2f}x", "Speed-up against the devices",
            "devices", "x", log_x=len(set(x)) > 2))
    body += table(pop, [Col("metric", "metric")] + [Col(n, n, "num") for n in names],
                  "POP's table across the runs", fold=len(rows))
    body += sections.cfgs(["analysis/efficiency_talp.cfg", "analysis/efficiency_nccl.cfg",
                           "analysis/useful_imbalance.cfg"], "(on each run's trace)")
    runs = "".join(f"<li><code>{escape(c.label)}</code>: {c.devices} device(s), "
                   f"{c.elapsed_ms:.3f} ms</li>" for c in columns)
    parts = [Section("summary", "The runs", f"<ul>{runs}</ul>"),
             Section("scaling", "Efficiency across the runs", body)]
    return render("nsys2prv analyze --scaling", f"{len(columns)} runs, reference "
                  f"{columns[0].label}" if columns else "no run", parts, GENERATOR)


def tables_page(tables) -> str:
    """A `run.Tables` as a page: a comparison's or a scaling study's, else the one section
    its analysis has."""
    if tables.kind == "compare":
        return comparison_page(tables)
    if tables.kind == "scaling":
        return scaling_page(tables)
    html = sections.of_tables(tables)
    return render(f"nsys2prv: {tables.title}", tables.title,
                  [Section("tables", tables.title, html)], GENERATOR)
