"""Where `analyze` peaks at its end (round 24): `nsys2prv analyze ARGS` in this process, its
RSS sampled every 10 ms, with markers around the analysis and each section's formatting.
Run with NSYS2PRV_NO_SUPERVISOR=1 on a translated trace.

    NSYS2PRV_NO_SUPERVISOR=1 python end_phases.py --modality TRACE > OUT.txt
"""
import contextlib
import io
import sys
import threading
import time

import nsys2prv.cli.analyze as CA

samples, marks, t0, stop = [], [], time.time(), False


def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024


def sampler():
    while not stop:
        samples.append((time.time() - t0, rss()))
        time.sleep(0.01)


def wrap(mod, name):
    f = getattr(mod, name)

    def g(*a, **k):
        marks.append((time.time() - t0, name, "begin", rss()))
        try:
            return f(*a, **k)
        finally:
            marks.append((time.time() - t0, name, "end", rss()))
    setattr(mod, name, g)


for n in ("analyze", "format_report", "format_idle", "format_modality",
          "format_kernel_metrics", "format_layers", "format_samples", "format_iterations"):
    wrap(CA, n)
threading.Thread(target=sampler, daemon=True).start()
with contextlib.redirect_stdout(io.StringIO()):
    CA.main(sys.argv[1:])
marks.append((time.time() - t0, "main", "end", rss()))
stop = True
prev, pname = 0.0, "start"
for t, n, w, r in marks:
    seg = [x[1] for x in samples if prev <= x[0] <= t]
    print(f"{prev:7.1f}-{t:7.1f} {pname:>26s} -> {n}:{w:5s} "
          f"max {max(seg) if seg else -1:5d} MB, at mark {r}")
    prev, pname = t, f"{n}:{w}"
