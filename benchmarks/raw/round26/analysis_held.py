"""What plain `analyze` of a trace holds during its pass: every EVERY windows, the RSS, the
largest RSS since the last line, and the size of what each observer of the pass holds
(its polars frames and numpy arrays, the three largest attributes named).

    PYTHONPATH=benchmarks python benchmarks/raw/round26/analysis_held.py TRACE.prv [EVERY]
"""
import sys, time
import numpy as np, polars as pl
from phase_marks import rss_mb
from nsys2prv.analysis import model, idle, utilisation, launch, activities, kernel_metrics, samples, passes

REG = []
def reg(cls):
    init = cls.__init__
    def wrapped(self, *a, **k):
        init(self, *a, **k)
        REG.append(self)
    cls.__init__ = wrapped
for c in [idle.GapFinder, idle.LaunchStats, idle.WindowSpill, model.ModelSums,
          utilisation.UtilisationMap, launch.LaunchCollector, activities.ActivityCollector,
          kernel_metrics.SampleCollector, samples.SampleCollector, samples.GapCode]:
    reg(c)

def size(o, depth=0, seen=None):
    seen = seen if seen is not None else set()
    if id(o) in seen or depth > 6: return 0
    seen.add(id(o))
    if isinstance(o, pl.DataFrame): return o.estimated_size()
    if isinstance(o, pl.Series): return o.estimated_size()
    if isinstance(o, np.ndarray): return o.nbytes
    if isinstance(o, (bytes, str)): return len(o)
    if isinstance(o, dict): return sum(size(k, depth+1, seen) + size(v, depth+1, seen) for k, v in o.items())
    if isinstance(o, (list, tuple, set, frozenset)): return sum(size(v, depth+1, seen) for v in o)
    if hasattr(o, "__dict__"): return sum(size(v, depth+1, seen) for v in vars(o).values())
    if hasattr(o, "__slots__"): return sum(size(getattr(o, s, None), depth+1, seen) for s in o.__slots__)
    return 0

import threading
PEAK = [0]
def _sample():
    while True:
        PEAK[0] = max(PEAK[0], rss_mb()); time.sleep(0.02)
threading.Thread(target=_sample, daemon=True).start()

def report(n):
    parts = []
    for o in REG:
        s = size(o)
        top = sorted(((size(v), k) for k, v in (vars(o).items() if hasattr(o, "__dict__") else [])), reverse=True)[:3]
        parts.append(f"{type(o).__name__}={s/1e6:.1f}[" + ",".join(f"{k}:{v/1e6:.1f}" for v, k in top if v > 1e6) + "]")
    print(f"{time.time()-T0:7.1f}s w{n} rss {rss_mb()} peak-since {PEAK[0]} | " + " ".join(parts), flush=True); PEAK[0] = 0

orig = model.windows
def counted(*a, **k):
    n = 0
    for w in orig(*a, **k):
        n += 1
        if n % EVERY == 0: report(n)
        yield w
    report(n)
model.windows = counted
EVERY = int(sys.argv[2]) if len(sys.argv) > 2 else 50
T0 = time.time()
r, e = passes.analyze_trace_all(sys.argv[1])
report(-1)
print("peak", open("/proc/self/status").read().split("VmHWM:")[1].split("\n")[0])
