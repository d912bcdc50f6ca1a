"""Pictures of an analysis: per-device time split (both forms) and the overlap histogram;
with GPU metrics, each kernel's speed of light (compute against memory, % of peak).

matplotlib is optional: imported here only, with a one-line error when missing. No backend
is forced here: in Jupyter the figures a function returns draw inline (matplotlib's own
choice, the inline backend); the command line asks for Agg (`headless`), where nothing can
display and only files are written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from ..errors import Nsys2PrvError
from .model import CAP, Analysis

COLOURS = {"useful": "#1f4fd1", "communication": "#ff8c1a", "idle": "#b7dbff"}


def pyplot():
    """matplotlib's pyplot, with whatever backend is chosen (one-line error without it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise Nsys2PrvError("plots need matplotlib (pip install nsys2prv[plot])") from None
    import matplotlib.pyplot as plt

    return plt


def headless() -> None:
    """Agg, the file-only backend: for the command line, which writes pictures and shows
    none (a display's backend would open windows or fail without one)."""
    try:
        import matplotlib
    except ImportError:
        raise Nsys2PrvError("--plot needs matplotlib (pip install nsys2prv[plot])") from None
    matplotlib.use("Agg")


def shown(plt, fig):
    """A figure returned to a notebook: taken out of pyplot's list of open figures, so
    that it draws once, as the cell's value (the inline backend would draw the figures
    still open too)."""
    plt.close(fig)
    return fig


def plot_analysis(a: Analysis, path: str | Path | None, kernel_metrics=None, layers=None,
                  samples=None):
    """Stacked bars useful / communication / idle per device for the TALP-compatible and
    NCCL-aware forms, and the time per number of kernels at once, as % of the trace; with
    `kernel_metrics` (`kernel_metrics.KernelMetrics` with rates), the kernels' speed of
    light below (`speed_of_light`); with `layers` (`layers.Layers` with a layer level),
    their picture beside (`plot_layers`, PATH's stem + '_layers.png'); with `samples`
    (`samples.Samples`) whose gaps were seen, the flame graph of the CPU samples taken
    while the GPU was idle (PATH's stem + '_samples.png'). Without a path, the figure (a
    notebook shows it)."""
    plt = pyplot()
    T = a.end or 1
    names = [g.name for g in a.devices]
    height = 0.6 * max(len(names), 2) + 2.2
    sol = kernel_metrics is not None and not kernel_metrics.empty
    if sol:
        fig = plt.figure(figsize=(15, height + 7.5), constrained_layout=True)
        grid = fig.add_gridspec(2, 3, height_ratios=[height, 7.5])
        axes = [fig.add_subplot(grid[0, i]) for i in range(3)]
        speed_of_light(kernel_metrics, fig.add_subplot(grid[1, :]))
    else:
        fig, axes = plt.subplots(1, 3, figsize=(15, height), constrained_layout=True)
    for ax, form, title in ((axes[0], "talp", "TALP-compatible"),
                            (axes[1], "nccl", "NCCL-aware")):
        useful = [100 * getattr(g, f"useful_{form}") / T for g in a.devices]
        comm = [100 * getattr(g, f"comm_{form}") / T for g in a.devices]
        idle = [100 * g.idle / T for g in a.devices]
        left = [0.0] * len(names)
        for label, vals in (("useful", useful), ("communication", comm), ("idle", idle)):
            ax.barh(names, vals, left=left, color=COLOURS[label], label=label)
            left = [x + v for x, v in zip(left, vals)]
        eff = getattr(a, form)
        pe = f"{eff.parallel:.2f}" if eff.parallel is not None else "-"
        ax.set_title(f"{title}: device parallel efficiency {pe}")
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of trace time")
        ax.invert_yaxis()
        ax.legend(loc="lower right", fontsize="small")
    ax = axes[2]
    width = 0.8 / max(len(a.devices), 1)
    labels = [str(i) for i in range(CAP)] + [f"{CAP}+"]
    for i, g in enumerate(a.devices):
        xs = [k + i * width for k in range(CAP + 1)]
        ax.bar(xs, [100 * v / T for v in g.levels], width=width, label=g.name)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(CAP + 1)], labels)
    ax.set_xlabel("kernels running at once (NCCL included)")
    ax.set_ylabel("% of trace time")
    ax.set_title("Overlap")
    if a.devices:  # no device, no bar: a legend of nothing would only warn
        ax.legend(fontsize="x-small")
    if path is None:
        return shown(plt, fig)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    if layers is not None and layers.layers.height:
        plot_layers(layers, path.with_name(path.stem + "_layers" + path.suffix))
    if samples is not None and samples.gap_folded is not None and samples.gap_folded.height:
        gf = samples.gap_folded
        whole = gf.filter(pl.col("device") == "job") if "job" in gf["device"].to_list() \
            else gf
        plot_flame(whole.group_by("stack").agg(pl.col("samples").sum()).sort("stack"),
                   path.with_name(path.stem + "_samples" + path.suffix),
                   "CPU samples while the GPU was idle (every thread of its node)")
    return path


LAYER_COLOURS = {"compute kernels": "#1f4fd1", "NCCL kernels": "#ff8c1a",
                 "memcpy HtoD": "#2ca02c", "memcpy DtoH": "#98df8a", "memcpy DtoD": "#17becf",
                 "memcpy peer": "#9467bd", "memcpy other": "#c5b0d5", "memset": "#8c564b",
                 "idle": "#d9d9d9"}
LAYERS_SHOWN = 20


def plot_layers(layers, path: str | Path | None):
    """The layers of the run (of its step): a stacked bar per layer of its GPU time by
    category and the idle time inside it, in ms per step; and, with GPU metrics, each layer
    on compute (max of SM Issue and Tensor Active) against DRAM bandwidth (read + write), in
    % of peak, sized by its GPU time and coloured by its bound. Without a path, the figure."""
    from .layers import CATEGORIES, layer_label

    plt = pyplot()
    table = layers.layers.head(LAYERS_SHOWN)
    steps = max(layers.per_step["step"].drop_nulls().n_unique(), 1) \
        if layers.step and layers.per_step.height else 1
    names = [layer_label(x)[:40] for x in table["layer"].to_list()]
    rated = "rate.SM Issue" in table.columns or "rate.Tensor Active" in table.columns
    fig, axes = plt.subplots(1, 2 if rated else 1, figsize=(15 if rated else 9,
                                                           0.35 * max(len(names), 4) + 2),
                             constrained_layout=True, squeeze=False)
    ax = axes[0][0]
    left = [0.0] * len(names)
    for cat in (*CATEGORIES, "idle"):
        vals = [v / 1e6 / steps for v in table[cat].to_list()]
        if any(vals):
            ax.barh(names, vals, left=left, color=LAYER_COLOURS[cat], label=cat)
            left = [x + v for x, v in zip(left, vals)]
    per = " per step" if steps > 1 else ""
    ax.set_xlabel(f"ms{per} (GPU time by category; idle: inside the layer's span)")
    ax.set_title(f"Layers on the GPU ({layers.pick.kind}"
                 + (f", step '{layers.step}'" if layers.step else "") + ")")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize="small")
    if rated:
        ax = axes[0][1]
        issue = table.get_column("rate.SM Issue") if "rate.SM Issue" in table.columns \
            else None
        tensor = table.get_column("rate.Tensor Active") if "rate.Tensor Active" in \
            table.columns else None
        dram = [sum(v or 0 for v in vs) for vs in zip(*[
            table.get_column(c).fill_null(0).to_list() for c in
            ("rate.DRAM Read Bandwidth", "rate.DRAM Write Bandwidth") if c in table.columns])] \
            or [0.0] * len(names)
        comp = [max(a or 0, b or 0) for a, b in zip(
            issue.to_list() if issue is not None else [0] * len(names),
            tensor.to_list() if tensor is not None else [0] * len(names))]
        gpu = table["gpu"].to_list()
        size = [600 * g / max(max(gpu), 1) + 20 for g in gpu]
        bounds = table["bound"].fill_null("").to_list() if "bound" in table.columns \
            else [""] * len(names)
        palette = {"memory-bound": "#d62728", "tensor-bound": "#9467bd",
                   "compute-bound": "#1f4fd1", "under-filled": "#7f7f7f",
                   "latency-bound": "#ff8c1a", "mixed": "#2ca02c"}
        has = [i for i in range(len(names)) if bounds[i]]  # layers without rates: not drawn
        bounds = [bounds[i] if i in has else None for i in range(len(names))]
        for b in sorted(set(x for x in bounds if x is not None)):
            idx = [i for i, x in enumerate(bounds) if x == b]
            ax.scatter([dram[i] for i in idx], [comp[i] for i in idx],
                       s=[size[i] for i in idx], alpha=0.6,
                       color=palette.get(b, "#bcbd22"), label=b)
        for i, n in enumerate(names[:10]):
            if bounds[i] is not None:
                ax.annotate(n[:24], (dram[i], comp[i]), fontsize="x-small")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
        ax.set_xlabel("DRAM read + write bandwidth, % of peak")
        ax.set_ylabel("compute: max(SM Issue, Tensor Active), % of peak")
        ax.set_title("Layers: compute against memory (size: GPU time)")
        ax.legend(fontsize="x-small", loc="upper right")
    if path is None:
        return shown(plt, fig)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# bound label -> colour (the labels of kernel_metrics.bound, the cause in parentheses aside)
BOUND_COLOURS = {"memory-bound": "#d62728", "tensor-bound": "#2ca02c",
                 "compute-bound": "#1f77b4", "under-filled": "#ff7f0e",
                 "latency-bound": "#9467bd", "mixed": "#7f7f7f", "undetermined": "#bcbd22",
                 "": "#c7c7c7"}
LABELLED = 10  # the kernels with most time are named on the chart


def speed_of_light_points(km):
    """One row per kernel (the job's rates where there are several GPUs): its label, GPU
    time, bound, compute = max(SM Issue, Tensor Active) and memory = DRAM read + write (%
    of peak) with the ranges the samples allow (lo, hi; the rate itself where it is pinned
    down). A polars frame; what `speed_of_light` draws."""
    import polars as pl

    c = pl.col
    r = km.rates
    scope = "job" if "job" in r["device"].to_list() else r["device"][0]
    r = r.filter((c("device") == scope) & c("kind").is_in(["kernel", "nccl"]))

    def metric(*names: str) -> pl.DataFrame:
        part = r.filter(c("metric").is_in(list(names)))
        lo = pl.when(c("determined")).then(c("rate")).otherwise(c("range_lo"))
        hi = pl.when(c("determined")).then(c("rate")).otherwise(c("range_hi"))
        return part.select("kernel", "metric", c("rate").fill_nan(None), lo.alias("lo"),
                           hi.alias("hi"))

    comp = (metric("SM Issue", "Tensor Active", "Tensor Active / FP16 Active")
            .group_by("kernel").agg(c("rate").max().alias("compute"),
                                    c("lo").max().alias("compute_lo"),
                                    c("hi").max().alias("compute_hi")))
    mem = (metric("DRAM Read Bandwidth", "DRAM Write Bandwidth")
           .group_by("kernel").agg(c("rate").sum().clip(0, 100).alias("memory"),
                                   c("lo").sum().clip(0, 100).alias("memory_lo"),
                                   c("hi").sum().clip(0, 100).alias("memory_hi")))
    k = km.kernels.filter((c("device") == scope) & c("kind").is_in(["kernel", "nccl"]))
    return (k.select("kernel", "label", "time", "bound")
            .join(comp, on="kernel", how="inner").join(mem, on="kernel", how="inner")
            .filter(c("compute").is_not_null() & c("memory").is_not_null())
            .sort("time", descending=True))


def speed_of_light(km, ax) -> None:
    """Nsight Compute's speed-of-light chart for every kernel at once: compute (the busier
    of SM Issue and Tensor Active) against memory (DRAM read + write), in % of peak, a
    point per kernel with an area for its GPU time, coloured by its bound; a kernel whose
    rates the samples cannot pin down is drawn as the box of the values they allow."""
    from matplotlib.patches import Rectangle

    p = speed_of_light_points(km)
    if p.height == 0:
        ax.text(0.5, 0.5, "no kernel with both compute and memory metrics",
                ha="center", va="center", transform=ax.transAxes)
        return
    total = max(float(p["time"].max()), 1.0)
    seen = set()
    for i, r in enumerate(p.iter_rows(named=True)):
        base = (r["bound"] or "").split(" (")[0]
        colour = BOUND_COLOURS.get(base, BOUND_COLOURS[""])
        if r["memory_hi"] - r["memory_lo"] > 0.05 or r["compute_hi"] - r["compute_lo"] > 0.05:
            ax.add_patch(Rectangle((r["memory_lo"], r["compute_lo"]),
                                   max(r["memory_hi"] - r["memory_lo"], 0.2),
                                   max(r["compute_hi"] - r["compute_lo"], 0.2),
                                   fill=False, edgecolor=colour, linewidth=1.0, alpha=0.8))
        seen.add(base)
        ax.scatter([r["memory"]], [r["compute"]], s=20 + 900 * r["time"] / total,
                   color=colour, alpha=0.7, edgecolors="black", linewidths=0.4, zorder=3)
        if i < LABELLED:
            ax.annotate((r["label"] or r["kernel"])[:40], (r["memory"], r["compute"]),
                        xytext=(4, 4), textcoords="offset points", fontsize=7)
    ax.plot([0, 100], [0, 100], color="#999999", linewidth=0.6, linestyle=":")
    ax.set_xlim(-2, 102)
    ax.set_ylim(-2, 102)
    ax.set_xlabel("memory: DRAM read + write bandwidth (% of peak)")
    ax.set_ylabel("compute: max(SM Issue, Tensor Active) (% of peak)")
    ax.set_title("Speed of light per kernel (area: GPU time; boxes: the range the samples "
                 "allow)")
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], marker="o", linestyle="", color=BOUND_COLOURS[b],
                              markeredgecolor="black", markersize=8, label=b)
                       for b in BOUND_COLOURS if b and b in seen],
              loc="upper right", fontsize="small")


def plot_speed_of_light(km, path: str | Path) -> Path:
    """The speed-of-light chart alone (the documentation's figure)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 7), constrained_layout=True)
    speed_of_light(km, ax)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_flame(folded, path: str | Path | None, title: str = "CPU samples"):
    """A flame graph of folded stacks (stack 'root;...;leaf', samples): roots at the bottom,
    each frame as wide as its samples, named where it is wide enough. Without a path, the
    figure."""
    import zlib

    from .samples import LEAF_ONLY, flame

    plt = pyplot()
    stacked = folded.filter(~pl.col("stack").str.contains(LEAF_ONLY, literal=True))
    if stacked.height:  # the samples nsys kept no stack for would only widen the roots
        left_out = int(folded["samples"].sum() - stacked["samples"].sum())
        if left_out:
            title += f", {left_out} samples without a call stack left out"
        folded = stacked
    rects = flame(folded)
    total = int(folded["samples"].sum()) if folded.height else 0
    depth = int(rects["depth"].max()) + 1 if rects.height else 1
    fig, ax = plt.subplots(figsize=(15, 0.28 * depth + 1.5), constrained_layout=True)
    if rects.height:
        from matplotlib.collections import PolyCollection

        cmap = plt.get_cmap("YlOrRd")
        names = rects["name"].to_list()
        x0 = rects["start"].to_numpy().astype(float)
        x1 = x0 + rects["width"].to_numpy()
        y = rects["depth"].to_numpy().astype(float)
        # the frames as one artist: a bar each (one patch per frame) took 9 s of the 3,700
        # frames of one real export's flame graph
        corners = np.stack([np.column_stack(c) for c in
                            ((x0, y - 0.475), (x0, y + 0.475), (x1, y + 0.475),
                             (x1, y - 0.475))], axis=1)
        shades = [cmap(0.25 + 0.5 * (zlib.crc32(n.encode()) % 97) / 97) for n in names]
        ax.add_collection(PolyCollection(corners, facecolors=shades, edgecolors="white",
                                         linewidths=0.3))
        for r in rects.filter(pl.col("width") >= total * 0.02).iter_rows(named=True):
            chars = max(int(160 * r["width"] / total), 1)
            text = r["name"] if len(r["name"]) <= chars else r["name"][:max(chars - 2, 1)] + ".."
            ax.text(r["start"] + r["width"] / 2, r["depth"], text, ha="center",
                    va="center", fontsize=7, clip_on=True)
    ax.set_xlim(0, max(total, 1))
    ax.set_ylim(-0.5, depth - 0.5)
    ax.set_yticks([])
    ax.set_xlabel("samples")
    ax.set_title(f"{title} ({total} samples)")
    if path is None:
        return shown(plt, fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
