"""Pictures of an analysis: per-device time split (both forms) and the overlap histogram.

matplotlib is optional: imported here only, with a one-line error when missing.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import Nsys2PrvError
from .model import CAP, Analysis

COLOURS = {"useful": "#1f4fd1", "communication": "#ff8c1a", "idle": "#b7dbff"}


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise Nsys2PrvError("--plot needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_analysis(a: Analysis, path: str | Path) -> Path:
    """Stacked bars useful / communication / idle per device for the TALP-compatible and
    NCCL-aware forms, and the time per number of kernels at once, as % of the trace."""
    plt = pyplot()
    T = a.end or 1
    names = [g.name for g in a.devices]
    fig, axes = plt.subplots(1, 3, figsize=(15, 0.6 * max(len(names), 2) + 2.2),
                             constrained_layout=True)
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
    ax.legend(fontsize="x-small")
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
