"""Run the pass on a trace once; at the steps' pick, measure the candidates (the version
before, `nsys2prv/analysis/_old_steps.py` = `git show 7379342:nsys2prv/analysis/steps.py`,
not committed, and the current one, each twice) and the layers (twice): peak RSS above the
level before the call, sampled every 2 ms, labelled by sub-step (round 20).

    python benchmarks/raw/round20/candidates_layers_harness.py TRACE.prv
"""
import sys, time, threading, importlib
from nsys2prv import _alloc
_alloc.for_analysis()
import numpy as np
from nsys2prv.analysis import passes, steps, layers, _old_steps

label = ["-"]
samples = []
stop = threading.Event()
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 1e6
def poll():
    while not stop.is_set():
        samples.append((time.monotonic(), rss(), label[0]))
        time.sleep(0.002)
threading.Thread(target=poll, daemon=True).start()

def labelled(owner, name, tag):
    fn = getattr(owner, name)
    def w(*a, **k):
        prev = label[0]; label[0] = tag
        try:
            return fn(*a, **k)
        finally:
            label[0] = prev
    setattr(owner, name, w)
labelled(steps.LaunchedWork, "within", "cand.within")
labelled(_old_steps.LaunchedWork, "before", "cand.before")
labelled(steps.LaunchedWork, "name_shares", "cand.name_shares")
labelled(layers, "project_ranges", "layers.project")
from nsys2prv.analysis import projection as P
labelled(P.RangeSums, "add", "P.add")
labelled(P.RangeSums, "projected", "P.projected")
labelled(P.RangeSums, "__init__", "P.RangeSums")
labelled(P.Segments, "__init__", "P.Segments")
labelled(P, "nesting", "P.nesting")
labelled(layers._Tree, "of", "tree.of")
labelled(layers, "pick_layers", "pick_layers")
for nm in ("_member_sums", "_total_gpu", "_outliers", "_pack", "_rank_of_row"):
    if hasattr(layers, nm): labelled(layers, nm, nm)
labelled(layers.Projected, "fill_busy", "fill_busy")


def measure(tag, fn):
    _alloc.trim(); time.sleep(1.5); _alloc.trim()
    base = rss(); t0 = time.monotonic(); n0 = len(samples)
    label[0] = tag
    out = fn()
    label[0] = "-"
    t1 = time.monotonic()
    per = {}
    for t, r, l in samples[n0:]:
        per[l] = max(per.get(l, 0), r - base)
    print(f"{tag}: base {base:.0f} MB, {t1-t0:.2f} s, peak above base by step:",
          {k: round(v) for k, v in per.items()}, flush=True)
    return out

orig_pick = steps.pick
def pick(acts, after=None):
    n = acts.ranges.height
    print("ranges", n, flush=True)
    for i in range(2):
        c0 = measure("old candidates", lambda: _old_steps.candidates(acts))
        c = measure("new candidates", lambda: steps.candidates(acts))
    print("equal", c0.equals(c), c.height, flush=True)
    if "--no-cand" in sys.argv: pass
    if "--no-layers" in sys.argv:
        raise SystemExit
    p = orig_pick(acts, after)
    for i in range(2):
        measure("layers", lambda: layers.analyze_layers(acts, p, None))
    return p
steps.pick = pick
passes_mod = importlib.import_module("nsys2prv.analysis.passes")
res, ex = passes.analyze_trace_all(sys.argv[1], kernel_metrics=False)
stop.set()
