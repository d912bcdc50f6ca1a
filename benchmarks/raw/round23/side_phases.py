"""Memory of one `diff` side by phase (round 23): `diff.read_side` on a trace in this
process, its RSS sampled every 50 ms, markers around the calls named below, then the side
pickled as its process hands it over. The runs before the change wrapped
`comparison_rows` (its name then) where this wraps `comparison_ranges`.

    python side_phases.py TRACE OUT.json > OUT.txt
"""
import json, pickle, sys, tempfile, threading, time
from pathlib import Path
import nsys2prv.analysis.diff as D
import nsys2prv.analysis.model as M
import nsys2prv.analysis.kernel_metrics as KM

samples, marks, t0 = [], [], time.time()
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
stop = False
def sampler():
    while not stop:
        samples.append((time.time() - t0, rss())); time.sleep(0.05)
threading.Thread(target=sampler, daemon=True).start()

def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        marks.append((time.time() - t0, name, "begin", rss()))
        try:
            return f(*a, **k)
        finally:
            marks.append((time.time() - t0, name, "end", rss()))
    setattr(mod, name, g)
for n in ("candidates", "comparison_ranges", "choose", "instances"):
    wrap(D, n)
wrap(M, "analyze_path")
wrap(KM, "kernel_metrics")
import nsys2prv.analysis.activities as A
wrap(A.ActivityCollector, "stored")

with tempfile.TemporaryDirectory() as tmp:
    s = D.read_side([sys.argv[1]], "before", Path(tmp))
    marks.append((time.time() - t0, "read_side", "end", rss()))
    b = pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)
    marks.append((time.time() - t0, "pickle", "end", rss()))
    sizes = {f: len(pickle.dumps(getattr(s, f), protocol=5)) for f in
             ("acts", "analysis", "kernel_metrics", "candidates", "layer_ranges", "idle_steps", "samples")}
    stop = True
json.dump({"samples": samples, "marks": marks, "sizes": sizes, "pickled": len(b)},
          open(sys.argv[2], "w"))
# summary: max RSS between consecutive marks
prev = 0.0; pname = "start"
for t, n, w, r in marks:
    seg = [x[1] for x in samples if prev <= x[0] <= t]
    print(f"{prev:7.1f}-{t:7.1f} {pname:>22s} -> {n}:{w:5s} max {max(seg) if seg else 0:5d} MB, at mark {r}")
    prev, pname = t, f"{n}:{w}"
print("sizes", {k: round(v / 1e6, 1) for k, v in sizes.items()}, "pickled", round(len(b) / 1e6, 1))
