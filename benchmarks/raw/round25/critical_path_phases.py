"""Memory of `--critical-path` by phase (round 25): the graph collected on its own pass over
TRACE in this process (SPILL=1: filed on disk and built there, `graph_build`; SPILL=0: held
and built in memory, then put in slabs on disk), its path, what-ifs and steps found a slab
at a time; RSS with markers (benchmarks/phase_marks.py).

    PYTHONPATH=benchmarks SPILL=1 python critical_path_phases.py TRACE STEPS [WHAT-IF ...]
"""
import os
import sys

import numpy as np
import polars as pl
from phase_marks import PhaseMarks

import nsys2prv.analysis.critical_path as CP
import nsys2prv.analysis.graph_build as GB
import nsys2prv.analysis.graph_slabs as GS
from nsys2prv.paraver.read import windows

marks = PhaseMarks()
for n in ("_columns", "build_graph", "_edges", "_topological", "critical_path", "step_paths"):
    marks.wrap(CP, n)
for n in ("sweep",):
    marks.wrap(GS, n)
for n in ("build_slabs", "_slabs"):
    marks.wrap(GB, n)
col = CP.GraphCollector(sys.argv[1], spill=os.environ.get("SPILL", "1") == "1")
marks.mark("pass", "begin")
for w in windows(col.info, col.types, state_rows="cpu", comms=True):
    col.add(w)
marks.mark("pass", "end")
g = col.graph()
print("nodes", g.n)
marks.mark("slabs", "begin")
slabs = GS.Slabs.of(g)
del g
marks.mark("slabs", "end")
print("slabs", slabs.count)
cp = CP.critical_path(slabs, [CP.parse_what_if(x) for x in sys.argv[3:]])
lo, hi = slabs.span
k = np.arange(int(sys.argv[2]))
steps = pl.DataFrame({"instance": k, "start": lo + (hi - lo) * k // k.size,
                      "end": lo + (hi - lo) * (k + 1) // k.size})
CP.step_paths(slabs, steps)
marks.report()
