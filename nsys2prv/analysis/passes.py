"""Every analysis of one trace on the same passes over it.

The efficiency model reads a trace window by window (`model.analyze_path`); the analyses
that need every activity (the steps, the layers, the kernels' modality and GPU metric rates,
the critical path) observe that same pass, and what the idle analysis' second pass sums per
step or per layer instance is decided between the passes, once the activities are known.
`analyze_trace_all` runs what is asked and returns the results, for the command line
(`nsys2prv analyze`) and the library alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..paraver.read import Source, TraceInfo, open_trace
from .model import Analysis, analyze_path

AUTO = ""  # iterations / layers: found by the tool


@dataclass
class Extras:
    """What the analyses beyond the model add (None: not asked)."""

    # iterations.IterationReport, or why no range could be picked
    iterations: object | None = None
    modality: object | None = None  # polars DataFrame of analysis.modality
    critical: object | None = None  # analysis.critical_path.CriticalPath
    graph: object | None = None  # its graph (analysis.graph_slabs.Slabs)
    kernel_metrics: object | None = None  # analysis.kernel_metrics.KernelMetrics
    layers: object | None = None  # analysis.layers.Layers
    samples: object | None = None  # analysis.samples.Samples
    # per device and time bin, its busy fraction (analysis.utilisation; a polars DataFrame)
    utilisation: object | None = None


def analyze_trace_all(path: Source | TraceInfo, explain: bool = True, top: int = 10,
                      iterations: str | None = None, modality: bool = False,
                      what_if: list | None = None, kernel_metrics: bool = True,
                      layers: str | None = AUTO, samples: bool = True
                      ) -> tuple[Analysis, Extras]:
    """The analysis of a trace and, on the same passes, what is asked: the steps of
    `iterations` ('RANGE[@DOMAIN]'; AUTO: picked; None: not asked), the kernels'
    `modality`, the critical path with its what-ifs (`what_if` not None), what the kernels
    do with the GPU (`kernel_metrics`, where the trace has GPU metrics) and the NVTX ranges
    projected onto the GPU with the layer level (`layers`: a name or depth, AUTO: found;
    None: not asked; only where the trace has NVTX ranges), where in the code (`samples`:
    the CPU samples' profiles and, with `explain`, the code the host ran during the GPU's
    gaps; only where the trace has samples); always, each device's busy fraction per time
    bin (`utilisation`, on the model's pass)."""
    from .activities import ActivityCollector
    from .utilisation import UtilisationMap

    want_code = samples  # `samples` names the GPU metrics' collector below
    path = open_trace(path)  # read once: every section gets this object
    extras = Extras()
    utilisation = UtilisationMap(path)
    observers: list = [utilisation]
    graph = None
    if what_if is not None:
        from .critical_path import GraphCollector

        graph = GraphCollector(path, spill=True)  # on disk: a window at a time in memory
        observers.append(graph)
    # the activities kept on disk (a window at a time in memory), for the sections that
    # read them after the pass (the samples and launch classes filed beside them);
    # removed on every way out
    from ..lifeline import signals_held

    collector = None
    try:
        with signals_held():  # made and held here at once: a Ctrl-C finds it to remove
            collector = ActivityCollector(path, spill=True)
        samples = launches = None
        if kernel_metrics:
            from .kernel_metrics import SampleCollector
            from .launch import LaunchCollector

            samples = SampleCollector(path, store=collector.store)
            if samples.types:
                observers.append(samples)
            launches = LaunchCollector(path, per_kernel=bool(samples.types),
                                       store=collector.store)
            observers.append(launches)
        code = sample_collector = labels = None
        if want_code:
            from . import samples as code_samples

            labels = code_samples.read_labels(path)
            if labels[0]:
                sample_collector = code_samples.SampleCollector()
                observers.append(sample_collector)
                if explain:
                    code = code_samples.GapCode()
        if layers is not None and not collector.nvtx_types:
            layers = None  # no NVTX range: nothing to project
        need_acts = iterations is not None or modality or layers is not None \
            or (samples is not None and bool(samples.types))
        state: dict = {}
        keep_acts = iterations is not None or modality or (samples is not None
                                                          and bool(samples.types))

        def between() -> dict | None:
            """Between the passes: the activities, the step and the layers, and the buckets
            the idle analysis' second pass sums (the steps, the layers' instances)."""
            from .. import _alloc
            from .iterations import NoLoop, resolve_range
            from .steps import instances, pick

            # the pass's per-window arrays freed in glibc's heap (smaller than the mapped
            # blocks: `_alloc.map_large_blocks`) go back before the steps and the layers
            # map theirs: at the 30M benchmark export's end of pass, ~270 MB of it free
            _alloc.trim()
            state["acts"] = acts = collector.stored()
            buckets: dict = {}
            step = None
            if iterations is not None:
                try:
                    state["range"] = resolve_range(acts, iterations or None)
                    name, domain, found = state["range"]
                    buckets["steps"] = instances(acts, name, domain).select("instance", "start",
                                                                            "end")
                    step = found
                    if step is None:  # named: as a pick of that range
                        from .steps import StepPick
                        step = StepPick(name, domain, "named with --iterations")
                except NoLoop as e:
                    state["range"] = str(e)
            elif layers is not None:
                step = pick(acts)
            if layers is not None:
                from .layers import analyze_layers

                # and what the step's pick freed there (at the 30M benchmark trace's
                # layers, 72 MB of glibc's heap free but resident; 31 at 10M)
                _alloc.trim()
                state["layers"] = found_layers = analyze_layers(acts, step, layers or None)
                buckets["layers"] = found_layers.buckets()
                if code is not None and found_layers.members.height:
                    m = found_layers.members  # the layers' ranges on their CPU threads
                    code.layer_spans = m.select(
                        "row", pl.col("cpu_start").alias("start"),
                        (pl.col("cpu_start") + pl.col("cpu_dur")).alias("end"),
                        pl.col("layer").cast(pl.Utf8))
                found_layers.release()  # the work sorted for the projection: not needed now
                _alloc.trim()
                if not keep_acts:  # nor the activities: only the layers read them
                    state["acts"] = None
            return buckets or None

        if need_acts:
            result = analyze_path(path, explain, top, observers=[collector, *observers],
                                  steps=between, code=code)
            if "acts" not in state:  # no second pass (no devices, or explain off)
                between()
            acts = state["acts"]
        else:
            result = analyze_path(path, explain, top, observers=observers, code=code)
            acts = None
        extras.utilisation = utilisation.result(result.devices)
        if iterations is not None:
            from .iterations import iteration_report

            if isinstance(state["range"], str):
                extras.iterations = state["range"]
            else:
                name, domain, found = state["range"]
                idle_steps = result.idle.instances if result.idle is not None else None
                report = iteration_report(acts, name, domain, picked=not iterations,
                                          idle_steps=idle_steps)
                report.pick = found
                extras.iterations = report
        if modality:
            from .modality import kernel_modality

            extras.modality = kernel_modality(acts)
        if samples is not None:
            from .kernel_metrics import NO_METRICS, KernelMetrics
            from .kernel_metrics import kernel_metrics as km
            from .launch import launch_tables

            if acts is None or not samples.types:  # the launch statistics, without rates
                extras.kernel_metrics = KernelMetrics(
                    note=NO_METRICS, launch=launch_tables(launches.result(), path))
            else:
                steps = None
                if extras.iterations is not None and not isinstance(extras.iterations, str):
                    steps = extras.iterations.steps.select("instance", "start", "end")
                extras.kernel_metrics = km(acts, samples, steps, launches.result(),
                                           launches.kernel_classes(), info=path,
                                           overlap_launches=modality)
        if layers is not None:
            found_layers = state["layers"]
            found_layers.add_idle(result.idle)
            found_layers.add_rates(extras.kernel_metrics)
            if extras.iterations is not None and not isinstance(extras.iterations, str):
                found_layers.add_iterations(extras.iterations)
            extras.layers = found_layers
        if sample_collector is not None:
            extras.samples = _samples(result, sample_collector, code, labels)
        if what_if is not None:
            from .critical_path import critical_path, step_paths
            from .graph_slabs import Slabs

            # a large graph goes to disk in slabs as soon as it is built: the path, its
            # what-ifs and its steps read it a slab at a time
            extras.graph = g = Slabs.of(graph.graph())
            extras.critical = critical_path(g, what_if, top)
            if extras.iterations is not None and not isinstance(extras.iterations, str):
                extras.critical.steps = step_paths(g, extras.iterations.steps)
        return result, extras
    finally:
        if collector is not None:
            collector.close()
        if graph is not None:
            graph.close()


def _samples(result: Analysis, collector, code, labels):
    """Where in the code: the samples' profiles, and the code behind the GPU's gaps where
    the second pass saw them (`code` begun: the run has gaps)."""
    from .model import device_keys
    from .samples import add_gaps, profiles

    rows = collector.rows
    found = profiles(collector.counts.result(), rows, labels[0], collector.markers)
    if code is not None and getattr(code, "index", None) is not None and result.idle is not None:
        causes = {}
        for d in result.idle.devices:
            causes[d.name] = d.causes
        names = device_keys(rows).select("g", "name")
        by_g = {g: causes.get(n, {}) for g, n in names.iter_rows()}
        add_gaps(found, code, rows, labels[0], labels[1], names, by_g)
    return found
