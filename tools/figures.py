"""Pictures for docs/cfgs.md drawn from paramedir's stored outputs (there is no GUI Paraver
here): `python tools/figures.py tests/data/paramedir cfgs/img`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from nsys2prv.paraver.registry import STATE_BY_VALUE
from nsys2prv.analysis.plot import headless, pyplot
from paramedir import read_timeline  # tools/paramedir.py


headless()  # pictures written to files, none shown


def _thread_labels(row_file: Path) -> list[str]:
    text = row_file.read_text().split("LEVEL THREAD SIZE")[1].strip().splitlines()
    return text[1:1 + int(text[0])]


def states_timeline(csv: Path, row_file: Path, out: Path, title: str) -> None:
    """A Paraver-like state timeline: one bar per row, coloured as the .pcf colours."""
    plt = pyplot()
    tl = read_timeline(csv)
    labels = _thread_labels(row_file)
    objs = sorted(set(tl["object"]), key=lambda o: [int(x) for x in o.split(".")])
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(objs) + 1.2), constrained_layout=True)
    used = {}
    for y, obj in enumerate(objs):
        part = tl.filter(tl["object"] == obj)
        for value in sorted(set(part["value"])):
            seg = part.filter(part["value"] == value)
            st = STATE_BY_VALUE[int(value)]
            colour = tuple(c / 255 for c in st.color)
            ax.broken_barh(list(zip(seg["begin"] / 1e3, seg["duration"] / 1e3)), (y - 0.4, 0.8),
                           facecolors=colour, edgecolor="none")
            used[st.label] = colour
    ax.set_yticks(range(len(objs)), [labels[i] if i < len(labels) else o
                                     for i, o in enumerate(objs)], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, ec="grey") for c in used.values()]
    ax.legend(handles, list(used), fontsize="x-small", ncol=4, loc="upper center",
              bbox_to_anchor=(0.5, -0.18))
    fig.savefig(out, dpi=90)
    plt.close(fig)


def duration_histogram(txt: Path, kernel: str, out: Path, title: str) -> None:
    """One plane (kernel name) of the 3D kernel-duration histogram, per stream row."""
    plt = pyplot()
    lines = txt.read_text().splitlines()
    i = lines.index(kernel)
    bins = [b for b in lines[i + 1].split("\t") if b]
    fig, ax = plt.subplots(figsize=(8, 3.2), constrained_layout=True)
    for ln in lines[i + 2:]:
        if not ln.strip():
            break
        name, *vals = [x for x in ln.split("\t") if x != ""]
        counts = [float(v) for v in vals]
        if sum(counts):
            lo = [float(re.findall(r"\d+(?:\.\d+)?", b.replace(",", ""))[0]) for b in bins]
            ax.bar([f"{x:.0f}" for x in lo], counts, alpha=0.6, label=name)
    ax.set_xlabel("kernel duration bin start (us)")
    ax.set_ylabel("kernels")
    ax.set_title(title, fontsize="small")
    ax.legend(fontsize="x-small")
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    data, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    states_timeline(data / "sample" / "basics__states.csv",
                    data / "sample" / "trace" / "sample.row", out / "sample_states.png",
                    "basics/states.cfg on the sample (paramedir output)")
    kernel = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
    duration_histogram(data / "mfu2gpu" / "analysis__kernel_duration_histogram.txt", kernel,
                       out / "mfu_gemm_durations.png",
                       f"analysis/kernel_duration_histogram.cfg, plane {kernel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
