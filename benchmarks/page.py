"""Cost of the page (issue 47): the analysis `analyze --html` runs (the model, why the GPUs
wait, the steps, the layers, the kernels, the critical path) against building the page from
what it computed, and NVIDIA's rules apart (they read the exports; a trace has none).

    python benchmarks/page.py INPUT... [--rules]

Prints CPU seconds (this process: user + system) and wall seconds of each part, the page's
size, and the ratio page / analysis (the goal: 0.2 at most)."""

from __future__ import annotations

import argparse
import os
import time


def clock() -> tuple[float, float]:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system, time.perf_counter()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("inputs", nargs="+")
    p.add_argument("--rules", action="store_true", help="time NVIDIA's rules too")
    args = p.parse_args()
    import nsys2prv
    from nsys2prv.run import analysis_html

    with nsys2prv.load(args.inputs) as run:
        c0, w0 = clock()
        a, ex = run.analysis(iterations="", what_if=[])
        c1, w1 = clock()
        html = analysis_html(a, ex, run.inputs, rules=False)
        c2, w2 = clock()
        print(f"analysis: {c1 - c0:.2f} CPU-s, {w1 - w0:.2f} s")
        print(f"page:     {c2 - c1:.2f} CPU-s, {w2 - w1:.2f} s, {len(html.encode()) / 1e6:.2f} MB"
              f" ({(c2 - c1) / max(c1 - c0, 1e-9):.3f} of the analysis' CPU time)")
        if args.rules:
            analysis_html(a, ex, run.inputs, rules=True)
            c3, w3 = clock()
            print(f"rules + page: {c3 - c2:.2f} CPU-s, {w3 - w2:.2f} s")


if __name__ == "__main__":
    main()
