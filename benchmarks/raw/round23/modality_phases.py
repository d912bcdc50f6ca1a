"""Memory of `kernel_modality` on a trace's stored activities (round 23), in this process:
RSS sampled every 20 ms, markers around the module's steps.

    python modality_phases.py TRACE > OUT.txt
"""
import sys, tempfile, threading, time
import numpy as np
import nsys2prv.analysis.modality as MO
from nsys2prv.analysis.activities import stored_activities
samples, marks, t0, stop = [], [], time.time(), False
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
def sampler():
    while not stop:
        samples.append((time.time() - t0, rss())); time.sleep(0.02)
def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        marks.append((time.time() - t0, name, "begin", rss()))
        try: return f(*a, **k)
        finally: marks.append((time.time() - t0, name, "end", rss()))
    setattr(mod, name, g)
for n in ("_prepared", "_classified", "fit_two_modes", "_log_normal", "_where", "_sample"):
    wrap(MO, n)
with tempfile.TemporaryDirectory() as tmp:
    acts = stored_activities(sys.argv[1], tmp)
    threading.Thread(target=sampler, daemon=True).start()
    marks.append((time.time() - t0, "modality", "begin", rss()))
    MO.kernel_modality(acts)
    marks.append((time.time() - t0, "modality", "end", rss()))
    stop = True
    acts.close()
prev, pname = marks[0][0], "start"
for t, n, w, r in marks:
    seg = [x[1] for x in samples if prev <= x[0] <= t]
    if seg and max(seg) > 0:
        print(f"{prev:7.1f}-{t:7.1f} {pname:>22s} -> {n}:{w:5s} max {max(seg):5d} MB, at mark {r}")
    prev, pname = t, f"{n}:{w}"
