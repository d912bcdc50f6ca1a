"""One function per section of the page: what one analysis returned (`run.Tables`, its
frames, notes and paragraph) as HTML, its picture first, then its tables, then the shipped
Paraver views (cfgs/) that show the same thing on the trace.

A section reads only the tables an analysis returns (so the library's `Run.to_html`, the
command line's `--html` and Jupyter's `Tables._repr_html_` show the same), and says what is
missing and how to record it where its analysis found nothing, with no empty chart.
"""

from __future__ import annotations

from html import escape

import polars as pl

from . import charts
from .document import Section
from .table import Col, table

# how to record what a section needs (nsys profile's flags)
RECORD_CUDA = "nsys profile -t cuda"
RECORD_NVTX = "nsys profile -t cuda,nvtx (and NVTX ranges in the program: PyTorch's " \
    "torch.cuda.nvtx.range_push/range_pop or torch.autograd.profiler.emit_nvtx())"
RECORD_METRICS = "nsys profile --gpu-metrics-devices=all (nsys 2023.2 and later; " \
    "--gpu-metrics-device=all before)"
RECORD_OSRT = "nsys profile -t cuda,osrt (the OS runtime calls tell what the host waits on)"
RECORD_SAMPLES = "nsys profile --sample=process-tree --backtrace=dwarf (CPU samples with " \
    "call stacks)"
LONGEST = 48  # rows of a bar chart at most (the rest: in its table)


def ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def ms_tick(ns: float) -> str:
    """A time on an axis: three digits at most (12.5 ms, 2.5 s)."""
    return f"{ns / 1e9:.3g} s" if ns >= 1e9 else f"{ns / 1e6:.3g} ms"


def pct(x: float) -> str:
    return f"{x:.1f} %"


def t_axis(end: float):
    """A time formatter for an axis over [0, end] (ns): ms, or s for long runs."""
    if end >= 20e9:
        return lambda t: f"{t / 1e9:.1f} s"
    return lambda t: f"{t / 1e6:.1f} ms" if end >= 20e6 else f"{t / 1e6:.3f} ms"


def figure(svg: str) -> str:
    return f'<div class="figure">{svg}</div>'


def missing(text: str, record: str | None = None) -> str:
    """What a section lacks and, where the recording can add it, how."""
    text = text.strip()
    text = (text[:1].upper() + text[1:]).rstrip(".") + "." if text else text
    how = f" Record it with <code>{escape(record)}</code>." if record else ""
    return f'<p class="missing">{escape(text)}{how}</p>'


def notes(lines) -> str:
    return "".join(f'<p class="note">{escape(n)}</p>' for n in lines if n)


def cfgs(names: list[str], why: str = "") -> str:
    """The shipped views to open in Paraver for the same view (cfgs/ of the package, or
    `nsys2prv paraver-setup`'s Hints menu)."""
    items = "".join(f"<li><code>cfgs/{escape(n)}</code></li>" for n in names)
    tail = f" {escape(why)}" if why else ""
    return (f'<p class="note">In Paraver (the trace: <code>nsys2prv translate</code>), the '
            f"same view:{tail}</p><ul class=\"cfgs\">{items}</ul>")


# --------------------------------------------------------------------- first screen --

def overview(facts: list[tuple[str, str]], findings: pl.DataFrame,
             statements: list[str] = ()) -> Section:
    """What the run is (facts: label, value) and the findings that matter most, each a
    sentence with its number (`data-number`, as --json's findings carry it) and a link to
    its section; `statements`: what the reader must know first (no step found)."""
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    items = []
    for r in findings.iter_rows(named=True):
        items.append(f'<li data-number="{r["number"]!r}" data-unit="{escape(r["unit"])}" '
                     f'data-section="{escape(r["section"])}"><a href="#{escape(r["section"])}">'
                     f'{escape(r["sentence"])}</a></li>')
    body = f'<dl class="facts">{dl}</dl>' + notes(statements)
    if items:
        body += ('<h3>What matters most</h3><ol class="findings" id="findings">'
                 + "".join(items) + "</ol>")
    else:
        body += missing("No finding: the run has no GPU work to judge.", RECORD_CUDA)
    return Section("summary", "The run", body)


# ------------------------------------------------------------------------ efficiency --

FORM_COLS = [Col("form", "form"), Col("n", "devices", "int"),
             Col("parallel", "parallel efficiency", "pct"),
             Col("load_balance", "load balance", "pct"),
             Col("communication", "communication efficiency", "pct"),
             Col("orchestration", "orchestration efficiency", "pct"),
             Col("max_useful_device", "most useful work"),
             Col("max_active_device", "most active")]
DEVICE_COLS = [Col("name", "device"), Col("useful_talp", "useful (TALP)", "ms"),
               Col("comm_talp", "comm (TALP)", "ms"),
               Col("useful_nccl", "useful (NCCL-aware)", "ms"),
               Col("comm_nccl", "comm (NCCL-aware)", "ms"), Col("active", "active", "ms"),
               Col("idle", "idle", "ms"), Col("nccl_time", "NCCL", "ms"),
               Col("hidden_comm", "NCCL beside compute", "ms"),
               Col("level0", "0 kernels", "ms"), Col("level1", "1 kernel", "ms"),
               Col("level2", "2 kernels", "ms"), Col("level3", "3+ kernels", "ms")]
HOST_COLS = [Col("name", "process"), Col("main_thread", "main thread"),
             Col("running", "running", "ms"), Col("in_cuda", "in CUDA calls", "ms"),
             Col("offload_efficiency", "offload efficiency", "pct"),
             Col("in_mpi", "in MPI", "ms")]


def efficiency(tables, end: int) -> Section:
    """The efficiency model: its factors in both forms (POP's tree as bars), each device's
    time split (useful, communication, idle) and the tables; `end` the trace time (ns)."""
    forms = tables.frames.get("forms")
    devices = tables.frames.get("devices")
    if devices is None or devices.height == 0 or forms is None:
        return Section("efficiency", "Efficiency model",
                       missing("No GPU work in this trace: the device model is empty.",
                               RECORD_CUDA) + _host_table(tables))
    names = ["parallel efficiency", "load balance", "communication efficiency",
             "orchestration efficiency"]
    keys = ["parallel", "load_balance", "communication", "orchestration"]
    series = []
    for i, r in enumerate(forms.iter_rows(named=True)):
        label = {"talp": "TALP-compatible", "nccl": "NCCL-aware"}.get(r["form"], r["form"])
        series.append((label, charts.colour(i),
                       [None if r[k] is None else 100 * r[k] for k in keys]))
    tree = charts.grouped_bars(names, series, pct, "POP's device model (PE = LB x CE x OE)",
                               vmax=100)
    shown = devices.sort("idle", descending=True).head(LONGEST)
    T = max(end, 1)
    split = charts.stacked_bars(
        shown["name"].to_list(),
        [("useful (kernels)", charts.colour(0), [100 * v / T for v in shown["useful_talp"]]),
         ("communication (copies outside kernels)", charts.colour(1),
          [100 * v / T for v in shown["comm_talp"]]),
         ("idle", charts.IDLE, [100 * v / T for v in shown["idle"]])],
        pct, "Per device, share of the trace time (TALP-compatible form)", vmax=100,
        axis="% of the trace time")
    more = (f"<p class=\"note\">The {LONGEST} most idle of {devices.height} devices; every "
            "device in the table.</p>" if devices.height > LONGEST else "")
    body = (figure(tree) + figure(split) + more
            + table(forms, FORM_COLS, "Both forms")
            + table(devices, DEVICE_COLS, "Per device (ns on hover)")
            + _host_table(tables)
            + cfgs(["analysis/efficiency_talp.cfg", "analysis/efficiency_nccl.cfg",
                    "analysis/useful_imbalance.cfg", "analysis/overlap_levels.cfg"]))
    return Section("efficiency", "Efficiency model", body)


def _host_table(tables) -> str:
    host = tables.frames.get("host")
    out = table(host, HOST_COLS, "Host: each process's main thread") if host is not None \
        else ""
    cpu = tables.frames.get("cpu")
    if cpu is not None and cpu.height:
        out += table(cpu, [Col("n", "processes", "int"), Col("parallel", "parallel eff.",
                                                             "pct"),
                           Col("load_balance", "load balance", "pct"),
                           Col("communication", "communication eff.", "pct")],
                     "CPU, POP's model (MPI)")
    return out


# ----------------------------------------------------------------------- utilisation --

def utilisation(frame: pl.DataFrame | None, end: int) -> Section:
    """The devices' busy fraction per time bin as a rank x time heatmap (bands of ranks
    where there are many), and per device its busy time."""
    if frame is None or frame.height == 0:
        return Section("utilisation", "GPU utilisation over time",
                       missing("No GPU work in this trace.", RECORD_CUDA))
    bins = int(frame["bin"].max()) + 1
    order = frame.select("device").unique(maintain_order=True)["device"].to_list()
    values = frame["fraction"].to_numpy().reshape(len(order), bins).tolist()
    starts = frame["start"].head(bins).to_list()
    fmt = t_axis(end)
    svg = charts.heatmap(order, values, starts, fmt,
                         f"Busy share of each device in {bins} bins of "
                         f"{fmt(end / bins)} (kernels, copies, sets)")
    per = (frame.group_by("device", maintain_order=True)
           .agg(pl.col("busy").sum(), (pl.col("end").max() - pl.col("start").min())
                .alias("span"))
           .with_columns((pl.col("busy") / pl.col("span")).alias("share")))
    body = (figure(svg)
            + table(per, [Col("device", "device"), Col("busy", "busy", "ms"),
                          Col("share", "busy share of the trace", "pct")],
                    "Per device")
            + cfgs(["basics/states.cfg", "views/cuda_activities.cfg"]))
    return Section("utilisation", "GPU utilisation over time", body)


# ---------------------------------------------------------------------------- idle --

CAUSE_NAMES = {"mpi": "MPI", "nccl": "NCCL call", "cuda_sync": "CUDA sync",
               "cuda_memcpy": "memcpy/memset call", "cuda_alloc": "CUDA alloc/free",
               "cuda_launch": "launching", "cuda_other": "other CUDA call", "io": "I/O",
               "wait": "lock/wait", "sleep": "sleep/poll", "osrt_other": "other OS call",
               "descheduled": "descheduled", "host_compute": "host compute",
               "no_data": "no data", "unknown_host": "unknown host"}


def _causes(frame: pl.DataFrame, prefix: str = "cause.") -> list[str]:
    return [c for c in frame.columns if c.startswith(prefix)]


def idle(tables, end: int) -> Section:
    """Why the GPUs wait: per device the idle time by what the launching thread was doing
    (stacked bars), the largest gaps on a timeline, the job's causes and the tables."""
    job = tables.frames.get("job")
    if job is None or job.height == 0:
        return Section("idle", "Why the GPUs wait",
                       missing(" ".join(tables.notes) or "No GPU activity.", RECORD_CUDA))
    from ..analysis.idle import CAUSE_LABELS

    j = job.row(0, named=True)
    total = max(j["idle"], 1)
    keys = sorted((c[6:] for c in _causes(job) if j[c]), key=lambda k: (-j["cause." + k], k))
    causes_frame = pl.DataFrame(
        {"cause": [CAUSE_NAMES.get(k, k) for k in keys],
         "what": [CAUSE_LABELS.get(k, "with no launch record for the next work (host "
                                      "unknown)") for k in keys],
         "time": [j["cause." + k] for k in keys],
         "share": [j["cause." + k] / total for k in keys]},
        schema={"cause": pl.Utf8, "what": pl.Utf8, "time": pl.Int64, "share": pl.Float64})
    devices = tables.frames["devices"].sort("idle", descending=True)
    devices = devices.with_columns(pl.col(c).fill_null(0) for c in _causes(devices))
    shown = devices.head(LONGEST)
    dev_causes = [c for c in _causes(devices) if devices[c].sum()]
    order = sorted(dev_causes, key=lambda c: -devices[c].sum())
    bars = charts.stacked_bars(
        shown["name"].to_list(),
        [(CAUSE_NAMES.get(c[6:], c[6:]), charts.colour(i), shown[c].to_list())
         for i, c in enumerate(order)], ms,
        "Idle time per device, by what the thread that launched the next work was doing",
        axis="idle time", tick=ms_tick)
    lead = (f"<p class=\"lead\">{j['gaps']} gaps, idle {ms(j['idle'])} of {ms(j['span'])} "
            f"of device activity ({100 * j['idle'] / max(j['span'], 1):.1f} %).</p>")
    body = lead + figure(bars)
    gaps = tables.frames.get("gaps")
    if gaps is not None and gaps.height:
        devs = gaps["device"].unique(maintain_order=True).to_list()
        spans = []
        gc = _causes(gaps)
        for r in gaps.iter_rows(named=True):  # the top gaps (--top, 10 by default)
            main = max(gc, key=lambda c: (r[c] or 0)) if gc else None
            colour = charts.colour(order.index(main)) if main in order else charts.IDLE
            spans.append((devs.index(r["device"]), r["start"], r["end"], colour,
                          f"{ms(r['end'] - r['start'])} at {ms(r['start'])}: "
                          f"{CAUSE_NAMES.get((main or 'cause.-')[6:], '-')}"
                          + (f" [NVTX {r['nvtx']}]" if r.get("nvtx") else "")))
        body += figure(charts.timeline(devs, spans, 0, end, t_axis(end),
                                       f"The {gaps.height} largest gaps in the run"))
    body += notes(tables.notes)
    body += table(causes_frame, [Col("cause", "cause"), Col("what", "the launching thread "
                                                            "was"),
                                 Col("time", "idle time", "ms"), Col("share", "share", "pct")],
                  "The job's idle time by cause")
    dev_table = devices.with_columns((pl.col("idle") / pl.col("span")).alias("share"))
    body += table(dev_table, [Col("name", "device"), Col("gaps", "gaps", "int"),
                              Col("idle", "idle", "ms"), Col("span", "span", "ms"),
                              Col("share", "idle share", "pct")]
                  + [Col(c, CAUSE_NAMES.get(c[6:], c[6:]), "ms") for c in order],
                  "Per device")
    if gaps is not None and gaps.height:
        g = gaps.with_columns((pl.col("end") - pl.col("start")).alias("duration"))
        body += table(g, [Col("device", "device"), Col("start", "start", "ms"),
                          Col("duration", "duration", "ms"),
                          Col("host_thread", "launching thread"), Col("nvtx", "NVTX range")]
                      + [Col(c, CAUSE_NAMES.get(c[6:], c[6:]), "ms") for c in gc],
                      "The largest gaps (nsys2prv analyze --views DIR writes a view of each)")
    launches = tables.frames.get("launches")
    if launches is not None and launches.height:
        lt = launches.with_columns((pl.col("kernel_time") / pl.col("count")).alias("mean"),
                                   (pl.col("call_time") / pl.col("count")).alias("call"))
        body += table(lt, [Col("label", "kernel"), Col("count", "launches", "int"),
                           Col("kernel_time", "kernel time", "ms"),
                           Col("mean", "mean kernel", "us"), Col("call", "mean launch call",
                                                                 "us"),
                           Col("delay_mean", "mean launch delay", "us"),
                           Col("delay_max", "max delay", "us"),
                           Col("short", "shorter than their launch", "int")],
                      "Kernel launches (HTA's statistics)")
    body += cfgs(["views/cuda_activities.cfg", "basics/states.cfg", "basics/osrt.cfg",
                  "basics/nvtx_pushpop.cfg"])
    return Section("idle", "Why the GPUs wait", body)


SAMPLE_COLS = [Col("function", "function"), Col("module", "module"),
               Col("samples", "samples", "int"), Col("share", "share", "pct")]
SITE_COLS = [Col("device", "device"), Col("api", "call"), Col("callers", "called from"),
             Col("cause", "cause"), Col("time", "time in the gaps", "ms"),
             Col("share", "share of the idle time", "pct"), Col("calls", "calls", "int")]
RUNNING_COLS = [Col("device", "device"), Col("process", "process"), Col("pid", "pid", "int"),
                Col("thread", "thread"), Col("tid", "tid", "int"),
                Col("samples", "samples", "int"), Col("share", "share", "pct")]
THREAD_COLS = [Col("process", "process"), Col("pid", "pid", "int"), Col("thread", "thread"),
               Col("tid", "tid", "int"), Col("samples", "samples", "int"),
               Col("share", "share", "pct"), Col("with_stack", "with a stack", "int")]
SAMPLE_CFGS = ["sampling/sampled_function_profile.cfg", "sampling/sampled_functions.cfg",
               "sampling/sampled_module_profile.cfg", "sampling/callers_osrt.cfg",
               "sampling/callers_cuda.cfg"]


def samples(tables) -> Section:
    """Where in the code (`Run.samples()`): each device's idle time named in the code, the
    flame graph of what the node's threads ran while the GPUs waited (stacks rooted at
    their process; samples without a stack left out, said), the call sites that blocked
    the launching threads, what they computed, what ran meanwhile; then the run's
    profiles (threads, self, inclusive, modules)."""
    title = "Where in the code"
    f = tables.frames if tables is not None else {}
    threads = f.get("threads")
    if threads is None or threads.height == 0:
        return Section("samples", title, missing(
            "No CPU samples in this run.", RECORD_SAMPLES))
    body = notes(tables.notes)
    gf = f.get("gap_folded")
    if gf is not None and gf.height:
        whole = gf.filter(pl.col("device") == "job") if "job" in gf["device"].to_list() \
            else gf
        stacks = whole.group_by("stack").agg(pl.col("samples").sum()).sort("stack")
        stacked = stacks.filter(~pl.col("stack").str.contains("[no backtrace", literal=True))
        left = int(stacks["samples"].sum() - stacked["samples"].sum())
        caption = "CPU samples of the node's threads while the GPUs were idle (width: samples)"
        if left and stacked.height:
            caption += f"; {left} samples without a call stack left out"
        body += figure(charts.flame_graph(stacked if stacked.height else stacks, caption))
    body += table(f["gap_blocking"], SITE_COLS, "Call sites of the launching threads "
                  "during the gaps") if f.get("gap_blocking") is not None else ""
    if f.get("gap_launching") is not None:
        body += table(f["gap_launching"], [Col("device", "device"), *SAMPLE_COLS],
                      "The launching threads' samples inside the gaps")
    if f.get("gap_running") is not None:
        body += table(f["gap_running"], RUNNING_COLS, "Every thread's samples inside the gaps")
    body += table(f["threads"], THREAD_COLS, "Threads")
    body += table(f["self"], SAMPLE_COLS, "Self: the sampled function (the leaf)")
    body += table(f["inclusive"], SAMPLE_COLS, "Inclusive: anywhere on the stack, once a "
                  "sample")
    body += table(f["modules"], [Col("module", "module"), Col("self", "self", "int"),
                                 Col("inclusive", "inclusive", "int")], "Modules")
    body += cfgs(SAMPLE_CFGS)
    return Section("samples", title, body)


# ---------------------------------------------------------------------------- steps --

STEP_COLS = [Col("instance", "step", "int"), Col("start", "start", "ms"),
             Col("duration", "duration", "ms"), Col("gpu_busy", "GPU busy", "ms"),
             Col("gpu_idle", "GPU idle", "ms"), Col("busy_share", "busy share", "pct"),
             Col("compute kernels", "compute", "ms"), Col("NCCL kernels", "NCCL", "ms"),
             Col("memcpy", "memcpy", "ms"), Col("memset", "memset", "ms"),
             Col("outlier", "outlier", "bool")]
CANDIDATE_COLS = [Col("family", "range"), Col("domain", "domain"), Col("n", "instances", "int"),
                  Col("gpu_share", "GPU work inside", "pct"),
                  Col("name_share", "kernel names inside", "pct"), Col("loop", "loop", "bool"),
                  Col("operator", "operator", "bool"), Col("note", "why not the step")]


def steps(tables) -> Section:
    """The step: each step's duration and GPU busy time (outliers marked), the slowest
    against the median step, the spread, the candidates; or why no step was found."""
    st = tables.frames.get("steps")
    if st is None or st.height == 0:
        why = " ".join(tables.notes) or "no step"
        body = (missing(f"No training step found: {why}. The other sections describe the "
                        "capture as a whole.", RECORD_NVTX)
                + "<p class=\"note\">Or name the step's range: <code>nsys2prv analyze "
                  "--iterations RANGE[@DOMAIN]</code>.</p>")
        cand = tables.frames.get("candidates")
        if cand is not None:
            body += table(cand, CANDIDATE_COLS, "Repeated ranges considered")
        return Section("steps", "Steps", body)
    x = st["instance"].to_list()
    marked = [i for i, f in enumerate(st["outlier"].to_list()) if f] \
        if "outlier" in st.columns else []
    svg = charts.lines(x, [("duration", charts.colour(0), [v / 1e6 for v in st["duration"]]),
                           ("GPU busy", charts.colour(2), [v / 1e6 for v in st["gpu_busy"]])],
                       lambda v: f"{v:g}", lambda v: f"{v:.3g} ms",
                       "Duration of each step (outliers: Tukey's fences)", "step", "ms",
                       marked)
    body = (notes(tables.notes[:1]) + figure(svg)
            + (f'<p class="para">{escape(tables.paragraph)}</p>' if tables.paragraph else "")
            + notes(tables.notes[1:])
            + table(st, STEP_COLS, "Per step", flag="outlier"))
    spread = tables.frames.get("spread")
    if spread is not None:
        body += table(spread, [Col("metric", "metric"), Col("min", "min", "ms"),
                               Col("median", "median", "ms"), Col("max", "max", "ms")],
                      "Spread")
    cand = tables.frames.get("candidates")
    if cand is not None:
        body += table(cand, CANDIDATE_COLS, "Candidates")
    body += cfgs(["basics/nvtx_pushpop.cfg", "views/cuda_activities.cfg"])
    return Section("steps", "Steps", body)


# --------------------------------------------------------------------------- layers --

LAYER_CATEGORIES = ("compute kernels", "NCCL kernels", "memcpy HtoD", "memcpy DtoH",
                    "memcpy DtoD", "memcpy peer", "memcpy other", "memset")
LAYERS_SHOWN = 20


def layers(tables) -> Section:
    """The layers: their GPU time by category (stacked bars), compute against memory where
    the trace has GPU metrics, the layers' table, the outliers and the projected ranges."""
    from ..analysis.layers import layer_label

    lay = tables.frames.get("layers")
    if not tables.frames:
        return Section("layers", "Layers on the GPU",
                       missing(" ".join(tables.notes) or "No NVTX range.", RECORD_NVTX))
    body = notes(tables.notes)
    if lay is None or lay.height == 0:
        body += missing("No layer level found (the note above says why); the projected "
                        "ranges are below. Name the level with nsys2prv analyze --layers "
                        "NAME|DEPTH.")
    else:
        lay = lay.with_columns(pl.col("layer").map_elements(layer_label, return_dtype=pl.Utf8)
                               .alias("label"))
        shown = lay.head(LAYERS_SHOWN)
        cats = [c for c in (*LAYER_CATEGORIES, "idle") if c in shown.columns
                and shown[c].sum()]
        body += figure(charts.stacked_bars(
            shown["label"].to_list(),
            [(c, charts.IDLE if c == "idle" else charts.colour(i), shown[c].to_list())
             for i, c in enumerate(cats)], ms,
            f"GPU time of the {shown.height} largest layers by category (idle: inside "
            "the layer's span)", axis="GPU time", tick=ms_tick))
        rates = [c for c in ("rate.SM Issue", "rate.Tensor Active", "rate.DRAM Read Bandwidth",
                             "rate.DRAM Write Bandwidth") if c in lay.columns]
        if any(c.startswith("rate.DRAM") for c in rates) and len(rates) > 1:
            total = max(float(shown["gpu"].max() or 1), 1.0)
            pts = []
            for r in shown.iter_rows(named=True):
                comp = max(r.get("rate.SM Issue") or 0, r.get("rate.Tensor Active") or 0)
                mem = min((r.get("rate.DRAM Read Bandwidth") or 0)
                          + (r.get("rate.DRAM Write Bandwidth") or 0), 100)
                if r.get("bound"):
                    pts.append((mem, comp, r["gpu"] / total, f"{r['label']} ({r['bound']})",
                                BOUNDS.get(r["bound"].split(" (")[0], "#7f7f7f")))
            if pts:
                body += figure(charts.scatter(
                    pts, "Layers: compute against memory (area: GPU time)",
                    "DRAM read + write, % of peak", "max(SM Issue, Tensor Active), %"))
        else:
            body += missing("No GPU metrics: the layers' compute and memory rates are not "
                            "known.", RECORD_METRICS)
        body += table(lay, [Col("label", "layer"), Col("instances", "instances", "int"),
                            Col("ranks", "ranks", "int"), Col("gpu", "GPU time", "ms"),
                            Col("share", "share", "pct"),
                            Col("step_median", "median per step", "ms"),
                            Col("step_max", "max per step", "ms")]
                      + [Col(c, c, "ms") for c in LAYER_CATEGORIES if c in lay.columns
                         and lay[c].sum()]
                      + [Col("idle", "idle inside", "ms"), Col("idle_cause", "idle cause")]
                      + [Col(c, c[5:], "pct100") for c in rates]
                      + [Col("bound", "bound"), Col("top_kernels", "top kernels", "list")],
                      "Per layer")
    out = tables.frames.get("outliers")
    if out is not None and out.height:
        body += table(out, [Col("kind", "against"), Col("layer", "layer"),
                            Col("rank", "rank", "int"), Col("step", "step", "int"),
                            Col("gpu", "GPU time", "ms"), Col("median", "peers' median", "ms"),
                            Col("ratio", "ratio", "ratio")], "Outliers")
    names = tables.frames.get("names")
    if names is not None and names.height:
        job = names.filter(pl.col("rank").is_null()).sort("sum", "name",
                                                          descending=[True, False])
        body += table(job, [Col("name", "range"), Col("count", "count", "int"),
                            Col("sum", "total", "ms"), Col("mean", "mean", "ms"),
                            Col("median", "median", "ms"), Col("max", "max", "ms")],
                      "Every range projected onto the GPU (nsys' nvtx_gpu_proj_sum)")
    body += cfgs(["views/layers_on_gpu.cfg", "analysis/layer_gpu_time.cfg",
                  "analysis/layer_kernel_count.cfg", "hwcounters/layer_rates.cfg"])
    return Section("layers", "Layers on the GPU", body)


BOUNDS = {"memory-bound": "#d62728", "tensor-bound": "#2ca02c", "compute-bound": "#1f77b4",
          "under-filled": "#ff7f0e", "latency-bound": "#9467bd", "mixed": "#7f7f7f",
          "undetermined": "#bcbd22"}


# -------------------------------------------------------------------------- kernels --

def kernels(km, idle_tables=None) -> Section:
    """The kernels: the largest by GPU time, the speed-of-light chart and their rates with
    the ranges the samples allow (with GPU metrics), the launch findings and
    configurations."""
    body = ""
    launches = idle_tables.frames.get("launches") if idle_tables is not None else None
    if launches is not None and launches.height:
        top = launches.sort("kernel_time", descending=True).head(15)
        body += figure(charts.stacked_bars(
            [r or n for r, n in zip(top["label"].to_list(), top["name"].to_list())],
            [("kernel time", charts.colour(0), top["kernel_time"].to_list())], ms,
            "The kernels with most GPU time", axis="GPU time", tick=ms_tick))
    frames = km.frames if km is not None else {}
    rated = "rates" in frames and "kernels" in frames
    if rated:
        from ..analysis.plot import speed_of_light_points

        p = speed_of_light_points(km.source)
        if p.height:
            total = max(float(p["time"].max()), 1.0)
            pts = [(r["memory"], r["compute"], r["time"] / total,
                    f"{r['label'] or r['kernel']} ({r['bound'] or '-'}; memory "
                    f"{r['memory_lo']:.1f}-{r['memory_hi']:.1f}, compute "
                    f"{r['compute_lo']:.1f}-{r['compute_hi']:.1f})",
                    BOUNDS.get((r["bound"] or "").split(" (")[0], "#7f7f7f"))
                   for r in p.iter_rows(named=True)]
            body += figure(charts.scatter(pts, "Speed of light per kernel (area: GPU time)",
                                          "DRAM read + write, % of peak",
                                          "max(SM Issue, Tensor Active), %"))
        k = frames["kernels"]
        scope = "job" if "job" in k["device"].to_list() else k["device"][0]
        kt = k.filter(pl.col("device") == scope)
        body += table(kt, [Col("label", "kernel"), Col("time", "GPU time", "ms"),
                           Col("share", "share", "pct"), Col("launches", "launches", "int"),
                           Col("mean_dur", "mean", "us"), Col("bound", "bound"),
                           Col("method", "how"), Col("blocks", "blocks", "int"),
                           Col("occupancy", "occupancy", "pct100"),
                           Col("waves", "waves", "num")],
                      f"Kernels by GPU time ({'the job' if scope == 'job' else scope})")
        rt = frames["rates"].filter(pl.col("device") == scope)
        body += table(rt, [Col("label", "kernel"), Col("metric", "metric"),
                           Col("rate", "rate", "pct100"), Col("range_lo", "lowest possible",
                                                              "pct100"),
                           Col("range_hi", "highest possible", "pct100"),
                           Col("determined", "pinned down", "bool"), Col("method", "how")],
                      "Rates, % of peak, with the range the samples allow")
    else:
        why = "; ".join(n.rstrip(".") for n in (km.notes if km is not None else []) if n) \
            or "No GPU metrics in this trace"
        body += missing(why, None if "record with" in why else RECORD_METRICS)
    findings = frames.get("launch.findings")
    if findings is not None and findings.height:
        body += table(findings, [Col("label", "kernel"), Col("share", "of its GPU's time",
                                                             "pct"),
                                 Col("text", "finding"), Col("devices", "GPUs", "int")],
                      "What the launches allow: findings")
    configs = frames.get("launch.configs")
    if configs is not None and configs.height:
        body += table(configs, [Col("label", "kernel"), Col("blocks", "blocks", "int"),
                                Col("threads", "threads", "int"),
                                Col("registers", "registers", "int"),
                                Col("shared", "shared memory", "int"),
                                Col("blocks_per_sm", "blocks/SM", "int"),
                                Col("limiter", "limiter"),
                                Col("occupancy", "occupancy", "pct100"),
                                Col("waves", "waves", "num"), Col("tail", "last wave", "pct100"),
                                Col("launches", "launches", "int"),
                                Col("time_share", "of its time", "pct")],
                      "Launch configurations")
    if not body:
        body = missing("No kernel in this trace.", RECORD_CUDA)
    body += cfgs(["basics/cuda_kernels_profile.cfg", "analysis/kernel_duration_histogram.cfg",
                  "analysis/occupancy_per_kernel.cfg", "analysis/waves_per_kernel.cfg",
                  "hwcounters/sm_active_per_kernel.cfg", "analysis/tensor_per_kernel.cfg"])
    return Section("kernels", "Kernels", body)


# -------------------------------------------------------------------- critical path --

def critical(tables) -> Section:
    """What bounds the run: the critical path's composition by category and process, its
    longest runs."""
    if tables is None:
        return Section("critical", "Critical path",
                       missing("Not computed for this page: nsys2prv analyze --html "
                               "computes it unless --no-critical-path."))
    cat = tables.frames.get("by_category")
    body = notes(n for n in tables.notes if n.startswith("verdict"))
    if cat is None or cat.height == 0:
        return Section("critical", "Critical path",
                       body + missing("No dependency to follow in this trace.", RECORD_CUDA))
    body += figure(charts.stacked_bars(
        cat["category"].to_list(), [("share of the path", charts.colour(0),
                                     [100 * v for v in cat["share"]])],
        pct, "The critical path by category", vmax=100, axis="% of the path"))
    body += table(cat, [Col("category", "category"), Col("time", "time", "ms"),
                        Col("share", "share", "pct")], "By category")
    for name, head in (("by_process", "By process"), ("longest", "Longest runs on one row"),
                       ("by_detail", "By kernel, call or range")):
        f = tables.frames.get(name)
        if f is None or f.height == 0:
            continue
        cols = [Col(c, c, "ms" if c in ("time", "gpu", "host", "duration", "start", "end")
                    else "pct" if c == "share" else "text")
                for c in f.columns if c not in ("task_index", "full")]
        body += table(f, cols, head)
    body += cfgs(["analysis/critical_path.cfg"], "(on the trace that nsys2prv analyze "
                 "--critical-path --path-trace OUT.prv writes)")
    return Section("critical", "Critical path", body)


# --------------------------------------------------------------------------- rules --

def rules(tables, why_not: str = "") -> Section:
    """NVIDIA's expert-system rules (nsys analyze): each rule's message and rows."""
    if tables is None:
        return Section("rules", "NVIDIA's rules",
                       missing(why_not or "The rules were not run."))
    body = "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in tables.notes) + "</ul>"
    for name, f in tables.frames.items():
        if f.height:
            body += table(f, [Col(c, c, "int" if f[c].dtype.is_integer() else
                                  "num" if f[c].dtype.is_float() else "text")
                              for c in f.columns], name)
    body += cfgs(["basics/cuda_api.cfg", "basics/memory_operations.cfg"])
    return Section("rules", "NVIDIA's rules", body)


# ------------------------------------------------------------ any analysis' Tables --

def of_tables(tables) -> str:
    """A `run.Tables` as HTML for Jupyter: the section its analysis has on the page where
    there is one (`tables.kind`), else its notes and tables; with the page's style and
    script, so that its tables sort and unfold there too."""
    from .assets import JS, PARTS_CSS

    kind = getattr(tables, "kind", "")
    end = getattr(getattr(tables, "source", None), "end", 0) or 0
    makers = {"efficiency": lambda t: efficiency(t, end), "steps": steps, "layers": layers,
              "kernels": kernels, "critical": critical, "rules": rules, "samples": samples,
              "idle": lambda t: idle(t, _idle_end(t))}
    if kind in makers:
        s = makers[kind](tables)
        body = f"<h3>{escape(s.title)}</h3>{s.body}"
    else:
        body = (f"<h3>{escape(tables.title)}</h3>"
                + (f'<p class="para">{escape(tables.paragraph)}</p>' if tables.paragraph
                   else "") + notes(tables.notes)
                + "".join(table(f, [Col(c, c, _kind(f, c)) for c in f.columns], name)
                          for name, f in tables.frames.items()))
    return f"<div class=\"nsys2prv\"><style>{PARTS_CSS}</style>{body}<script>{JS}</script></div>"


def _idle_end(tables) -> int:
    gaps = tables.frames.get("gaps")
    job = tables.frames.get("job")
    return int(max([*(gaps["end"].to_list() if gaps is not None and gaps.height else []),
                    int(job["span"][0]) if job is not None and job.height else 0, 1]))


def _kind(f: pl.DataFrame, c: str) -> str:
    """A column's kind where nothing else says it: by its type (names read as text)."""
    dt = f[c].dtype
    if dt.is_integer():
        return "int"
    if dt.is_float():
        return "num"
    if dt == pl.Boolean:
        return "bool"
    if isinstance(dt, pl.List):
        return "list"
    return "text"

