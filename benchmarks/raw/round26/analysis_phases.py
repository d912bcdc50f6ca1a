"""RSS by phase of plain `analyze` of a trace, in one process: the pass, then each section
after it (the step's pick, the layers' projection and its parts, why the GPUs wait, the
kernels' metrics).

    PYTHONPATH=benchmarks python benchmarks/raw/round26/analysis_phases.py TRACE.prv
"""
import sys
from phase_marks import PhaseMarks
from nsys2prv.analysis import (activities, idle, iterations, kernel_metrics, launch, layers,
                               model, passes, steps, utilisation)
from nsys2prv.analysis import projection as P

marks = PhaseMarks()
# (object, function) marked where each call begins and ends; a method before its class
# (wrapping a class replaces it by a function)
for obj, name in [
        (activities.ActivityCollector, "stored"), (iterations, "resolve_range"),
        (steps, "instances"), (steps, "pick"), (layers, "analyze_layers"),
        (layers, "project_ranges"), (layers, "pick_layers"), (P, "Segments"),
        (P.RangeSums, "projected"), (P, "RangeSums"), (P, "nesting"),
        (layers, "launched_work"), (layers, "Projected"), (idle, "explain"),
        (model.ModelSums, "result"), (kernel_metrics, "kernel_metrics"),
        (launch, "launch_tables"), (utilisation.UtilisationMap, "result"),
        (layers.Layers, "add_idle"), (layers.Layers, "add_rates")]:
    marks.wrap(obj, name)
r, e = passes.analyze_trace_all(sys.argv[1])
marks.mark("analysis", "end")

marks.report()
