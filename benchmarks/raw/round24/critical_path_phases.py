"""Memory of `--critical-path` by phase (round 24): the graph collected on its own pass over
TRACE in this process, built and its path found (`critical_path`), RSS sampled every 20 ms
with markers around the functions named below; the graph's arrays by size.

    python critical_path_phases.py TRACE [WHAT-IF ...] > OUT.txt
"""
import sys, threading, time
import nsys2prv.analysis.critical_path as CP
samples, marks, t0, stop = [], [], time.time(), False
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
def sampler():
    while not stop:
        samples.append((time.time() - t0, rss())); time.sleep(0.02)
def wrap(obj, name):
    f = getattr(obj, name)
    def g(*a, **k):
        marks.append((time.time() - t0, name, "begin", rss()))
        try: return f(*a, **k)
        finally: marks.append((time.time() - t0, name, "end", rss()))
    setattr(obj, name, g)
for n in ("_columns", "build_graph", "_edges", "_topological", "evaluate", "connected", "path_nodes",
          "path_segments", "_composition", "_longest", "_by_process", "float_of", "scales"):
    wrap(CP, n)
wrap(CP.GraphCollector, "graph")
threading.Thread(target=sampler, daemon=True).start()
from nsys2prv.paraver.read import windows
col = CP.GraphCollector(sys.argv[1])
marks.append((time.time() - t0, "pass", "begin", rss()))
for w in windows(col.info, col.types, state_rows="cpu", comms=True):
    col.add(w)
marks.append((time.time() - t0, "pass", "end", rss()))
g = col.graph()
print("nodes", g.n, "line edges", g.pred_node.size)
nbytes = sum(getattr(g, a).nbytes for a in ("row", "start", "end", "split", "kind", "value", "vtype", "pred_ptr", "pred_node", "pred_lag", "edge_kind") )
print("graph arrays MB", nbytes / 1e6, {a: getattr(g, a).nbytes // 1000000 for a in ("row", "start", "end", "split", "kind", "value", "vtype", "pred_ptr", "pred_node", "pred_lag", "edge_kind", "row_prev", "full") if getattr(g, a) is not None})
wi = [CP.parse_what_if(x) for x in sys.argv[2:]]
cp = CP.critical_path(g, wi)
marks.append((time.time() - t0, "critical_path", "end", rss()))
stop = True
prev, pname = 0.0, "start"
for t, n, w, r in marks:
    seg = [x[1] for x in samples if prev <= x[0] <= t]
    print(f"{prev:7.1f}-{t:7.1f} {pname:>22s} -> {n}:{w:5s} max {max(seg) if seg else -1:5d} MB, at mark {r}")
    prev, pname = t, f"{n}:{w}"
