"""One run as a notebook user meets it: `run = nsys2prv.load("job.prv")`, every analysis a
method that returns polars frames.

    import nsys2prv
    run = nsys2prv.load("rank*.sqlite")          # reports (translated as they are read), or a trace
    run.efficiency()["forms"]                     # the GPU efficiency model
    run.layers()["layers"]                        # NVTX ranges projected onto the GPU
    run.compare(nsys2prv.load("after.sqlite")).paragraph

A method whose answer is one table returns a `polars.DataFrame`; one with several returns a
`Tables` (a mapping of names to frames, with the notes and the paragraph an analyst reads,
rendered as tables in Jupyter, `.to_pandas()`, `.plot()` where `analyze --plot` draws one).
Every method takes the options the command line takes, with its defaults. The analyses
share their passes over the trace (`analysis.passes`): each distinct set of options reads
the trace once, and what was computed is kept for the next method that needs it. The
command line (`nsys2prv analyze`, `nsys2prv diff`) prints what these methods return.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .analysis.passes import AUTO, Extras, analyze_trace_all
from .errors import InputError, UsageError
from .report.inputs import is_trace

PathLike = str | os.PathLike[str]


class Tables(Mapping[str, pl.DataFrame]):
    """Several tables of one analysis (names -> polars frames), with what the analysis says
    beside them: `notes` (one line each) and `paragraph` (its story, where it tells one).
    Rendered as tables in Jupyter; `to_pandas()`, `to_dict()`; `plot()` where the command
    line's `--plot` draws one."""

    def __init__(self, title: str, frames: Mapping[str, pl.DataFrame | None],
                 notes: Sequence[str] = (), paragraph: str = "", plot=None,
                 source: Any = None, kind: str = "") -> None:
        self.title = title
        self.kind = kind  # which analysis (the page's section that shows it: page.sections)
        self.frames = {k: v for k, v in frames.items() if v is not None}
        self.notes = list(notes)
        self.paragraph = paragraph
        self._plot = plot
        self.source = source  # the analysis' own result object (its other fields)

    def __getitem__(self, name: str) -> pl.DataFrame:
        try:
            return self.frames[name]
        except KeyError:
            raise KeyError(f"{self.title}: no table {name!r} (tables: "
                           f"{', '.join(self.frames) or 'none'})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.frames)

    def __len__(self) -> int:
        return len(self.frames)

    def to_pandas(self) -> dict:
        """Every table as a pandas DataFrame (needs pandas: pip install nsys2prv[pandas])."""
        return {k: v.to_pandas() for k, v in self.frames.items()}

    def to_dict(self) -> dict:
        return {"tables": {k: v.to_dicts() for k, v in self.frames.items()},
                "notes": self.notes, "paragraph": self.paragraph}

    def plot(self, path: PathLike | None = None):
        """The analysis' picture: written to `path` (a .png) and returned as its path, or,
        without a path, returned as a matplotlib figure (needs matplotlib)."""
        if self._plot is None:
            raise UsageError(f"{self.title}: no picture for this analysis")
        return self._plot(path)

    def html(self) -> str:
        """These tables as a page of their own (docs/html.md): a comparison's
        (`nsys2prv.compare`: the paragraph, then before/after charts per changed item) or a
        scaling study's (`nsys2prv.scaling`: the POP table and the scaling plots), else the
        section of the page its analysis has."""
        from .page.build import tables_page

        return tables_page(self)

    def to_html(self, path: PathLike) -> Path:
        """Write `html()` to `path` atomically; returns the path."""
        from .page.document import write

        return write(self.html(), path)

    def __repr__(self) -> str:
        parts = [f"<{self.title}: " + ", ".join(f"{k} ({v.height} rows)"
                                              for k, v in self.frames.items()) + ">"]
        if self.paragraph:
            parts.append(self.paragraph)
        parts += self.notes
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        """Jupyter: the section of the page that shows this analysis (page.sections), its
        tables sortable and folded."""
        from .page.sections import of_tables

        return of_tables(self)


def _frame(rows: list[dict], schema: dict | None = None) -> pl.DataFrame:
    """Rows (dicts, as `--json` carries them) as a frame; nested dicts become structs."""
    if not rows:
        return pl.DataFrame(schema=schema or {})
    return pl.DataFrame(rows, infer_schema_length=None)


@dataclass(frozen=True)
class _Options:
    """What one pass over the trace computes (`analysis.passes.analyze_trace_all`)."""

    explain: bool = True
    top: int = 10
    iterations: str | None = None
    modality: bool = False
    what_if: tuple = ()
    critical: bool = False
    kernel_metrics: bool = True
    layers: str | None = AUTO
    samples: bool = True

    def covers(self, need: "_Options") -> bool:
        """Whether a pass with these options gives what `need` asks."""
        return (self.explain == need.explain and self.top == need.top
                and (need.iterations is None or self.iterations == need.iterations)
                and (self.modality or not need.modality)
                and (not need.critical or (self.critical and self.what_if == need.what_if))
                and (self.kernel_metrics or not need.kernel_metrics)
                and (need.layers is None or self.layers == need.layers)
                and (self.samples or not need.samples))


@dataclass
class Run:
    """One run of a program: a trace written by nsys2prv, or reports (.sqlite, .nsys-rep;
    one per rank) translated as they are read (`api.translate_stream`, into `workdir`, no
    trace written). Made by `load`; see the module's docstring."""

    inputs: list[str]
    span: Any = None  # the window of the run analysed (`window`), a pipeline.window filter
    label: str = "run"
    jobs: int | None = None
    allow_empty: bool = False  # a window outside the run gives an empty trace, not an error
    source: str = ""  # what the results name as the run (default: the inputs)
    on_report: Any = field(default=None, repr=False)  # progress callbacks of the translation
    on_merge: Any = field(default=None, repr=False)
    _trace: Any = field(default=None, repr=False)  # Path or TraceStream, made on first need
    _workdir: Any = field(default=None, repr=False)  # TemporaryDirectory of a stream or cut
    _cache: list = field(default_factory=list, repr=False)  # (options, Analysis, Extras)

    def close(self) -> None:
        """Remove what the run's analysis wrote (a stream's partial traces, a cut); the run
        can be analysed again (it is translated again)."""
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
        self._trace = None

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- the trace --

    @property
    def is_trace(self) -> bool:
        """Given as a trace (.prv), not as reports."""
        return len(self.inputs) == 1 and is_trace(self.inputs[0])

    @property
    def trace(self):
        """What the analyses read: the trace given (cut to the window), or the reports'
        translation as a stream (made once, on first need)."""
        if self._trace is None:
            self._trace = self._make_trace()
        return self._trace

    def _make_trace(self):
        from .api import translate_stream
        from .supervise import register_temp

        self._workdir = tempfile.TemporaryDirectory(prefix="nsys2prv-run-")
        register_temp(self._workdir.name)
        place = Path(self._workdir.name)
        if self.is_trace:
            if self.span is None:
                return Path(self.inputs[0])
            return _cut(self.inputs[0], place / "window.prv", self.span, self.allow_empty)
        return translate_stream(self.inputs, place, name="trace",
                                jobs=self.jobs or os.cpu_count() or 1, window=self.span,
                                allow_empty=self.allow_empty, on_report=self.on_report,
                                attributes=False)

    def translate(self, output: PathLike, **options) -> Path:
        """Write the run's trace (`nsys2prv.translate` with the run's window and `options`:
        only, exclude, compress, jobs, memory, ...); returns the .prv written. A run given
        as a trace is cut (to its window) or copied."""
        from .api import translate

        out = Path(output)
        if self.is_trace:
            if self.span is None:
                raise UsageError(f"{self.inputs[0]} is already a trace")
            return _cut(self.inputs[0], out, self.span, self.allow_empty)
        options.setdefault("jobs", self.jobs or os.cpu_count() or 1)
        options.setdefault("on_report", self.on_report)
        options.setdefault("on_merge", self.on_merge)
        options.setdefault("allow_empty", self.allow_empty)
        translate(self.inputs, str(out), window=self.span, **options)
        return out

    def window(self, spec) -> "Run":
        """The same run cut to a window: 'START/END' (nsys' --filter-time syntax, times of
        the run) or 'RANGE[@DOMAIN][/INDEX]' (--filter-nvtx: reports only), or a
        `pipeline.window` filter."""
        return Run(self.inputs, _span(self.inputs, spec), self.label, self.jobs,
                   self.allow_empty, self.source, self.on_report, self.on_merge)

    # ---------------------------------------------------------------- the passes --

    def analysis(self, *, explain: bool = True, top: int = 10,
                 iterations: str | None = None, modality: bool = False,
                 what_if: Sequence | None = None, kernel_metrics: bool = True,
                 layers: str | None = AUTO, samples: bool = True):
        """The efficiency model (`analysis.model.Analysis`) and what the other analyses add
        (`analysis.passes.Extras`), computed on one pass over the trace (two with
        `explain`: why the GPUs wait) and kept: what `nsys2prv analyze` prints with the same
        options (iterations: a range, or '' to find the step; what_if: the critical path's
        scenarios, [] for the path alone; layers: a name or depth, '' to find the level,
        None to skip)."""
        opts = _Options(explain, top, iterations, modality,
                        tuple(what_if or ()), what_if is not None, kernel_metrics, layers,
                        samples)
        for cached, result, extras in self._cache:
            if cached.covers(opts):
                return result, extras
        from .analysis.layers import LayersNotFound

        wi = None
        if opts.critical:
            from .analysis.critical_path import WhatIf, parse_what_if

            wi = [w if isinstance(w, WhatIf) else parse_what_if(w) for w in opts.what_if]
        try:
            result, extras = analyze_trace_all(self.trace, explain, top, iterations,
                                               modality, wi, kernel_metrics, layers, samples)
        except LayersNotFound as e:
            raise InputError(f"--layers: {e}") from None
        result.trace = self.source or (" ".join(self.inputs) if len(self.inputs) <= 4 else
                                       f"{len(self.inputs)} reports: {self.inputs[0]} ... "
                                       f"{self.inputs[-1]}")
        self._cache.append((opts, result, extras))
        return result, extras

    # -------------------------------------------------------------- the analyses --

    def efficiency(self) -> Tables:
        """The GPU efficiency model (docs/cfgs.md): `forms` (TALP-compatible and NCCL-aware:
        parallel efficiency, load balance, communication, orchestration, fractions), per
        `devices` and `processes` their useful, communication, active and idle times (ns),
        `host` (each process's main thread: running, in CUDA, offload efficiency) and `cpu`
        (POP's CPU model, where the trace has MPI)."""
        a, _ = self.analysis()
        return efficiency_tables(a)

    def overlap(self) -> pl.DataFrame:
        """Per device, the time with 0, 1, 2 and 3 or more kernels running at once (ns),
        and the same while an NCCL kernel runs: the overlap histogram."""
        a, _ = self.analysis()
        from .analysis.model import CAP

        rows = []
        for g in a.devices:
            for k in range(CAP + 1):
                rows.append({"device": g.name, "task": g.task, "kernels": k,
                             "time": g.levels[k], "with_nccl": g.levels_comm[k]})
        return _frame(rows)

    def idle(self, top: int = 10) -> Tables:
        """Why the GPUs wait (docs/idle.md): per `devices`, `processes` and the `job` the
        idle time and its causes (ns: what the host thread that launched the next work was
        doing), the `top` longest `gaps`, and the kernels' `launches` statistics."""
        a, _ = self.analysis(top=top)
        return idle_tables(a)

    def launches(self) -> pl.DataFrame:
        """HTA's kernel launch statistics, per kernel: launches, call and kernel time, mean
        and largest launch delay (kernel start - its launch call's end), the kernels shorter
        than their launch call (ns)."""
        return self.idle()["launches"]

    def steps(self, range: str | None = None) -> Tables:  # noqa: A002 - the option's name
        """The run over its steps (`analyze --iterations`): the step (`range`
        'RANGE[@DOMAIN]', else found) and why, per step its duration, GPU busy and idle
        time, categories and idle causes (`steps`), the `spread`, the `candidates`, and the
        slowest step against the median one (its tables and `paragraph`)."""
        _, ex = self.analysis(iterations=range or AUTO)
        return steps_tables(ex)

    def modality(self) -> pl.DataFrame:
        """Per kernel name, whether its durations have two modes or a heavy tail, and where
        the slow launches are (`analyze --modality`)."""
        _, ex = self.analysis(modality=True)
        return ex.modality

    def critical_path(self, what_if: Sequence[str] = (), top: int = 10) -> Tables:
        """What bounds the run (docs/critical_path.md): the path's composition by category,
        process and longest segments, and each `what_if` scenario's predicted time
        ('kernel:GLOB=F', 'nccl=F', 'gaps=0', ...)."""
        _, ex = self.analysis(what_if=list(what_if), top=top)
        return critical_tables(ex)

    def kernel_metrics(self) -> Tables:
        """Inside the kernels (docs/kernel_metrics.md): each kernel's GPU metric rates
        separated from the samples, their fit, bound labels, spread across GPUs,
        interference, folding; empty, with a note, without GPU metrics."""
        _, ex = self.analysis()
        return kernel_tables(ex)

    def layers(self, level: str | None = None) -> Tables:
        """Layers on the GPU (docs/layers.md): every NVTX range projected onto the GPU
        (`instances`, per name `names`, as nsys' nvtx_gpu_proj recipes), the layer level
        (`level`: a range name or depth, else found; its `candidates`) and per layer its GPU
        time, share, categories, idle time and cause, rates and top kernels (`layers`),
        per step (`per_step`), the `outliers`."""
        _, ex = self.analysis(layers=level or AUTO)
        return layer_tables(ex)

    def utilisation(self) -> pl.DataFrame:
        """Per device and time bin (analysis/utilisation.py: the run cut into 120 equal
        bins), the time it runs something and that time's share of the bin: nsys'
        cuda_gpu_time_util_map as a table (device, task, gpu, bin, start, end, busy,
        fraction)."""
        _, ex = self.analysis()
        return ex.utilisation

    def findings(self, **options) -> pl.DataFrame:
        """The five findings that matter most (analysis/findings.py: rank, section,
        sentence, number, unit), from the analyses `options` ask for (as `analysis`; the
        step found by default, as the page finds it), as the first screen of `to_html`
        and `analyze --json` show them."""
        from .analysis.findings import findings

        options.setdefault("iterations", AUTO)
        a, ex = self.analysis(**options)
        return findings(a, ex)

    def html(self, *, top: int = 10, iterations: str | None = AUTO,
             critical_path: bool = True, what_if: Sequence = (), kernel_metrics: bool = True,
             layers: str | None = AUTO, explain: bool = True, rules: bool = True) -> str:
        """The run on one page (docs/html.md): what the run is and its five findings, then
        a section per analysis (picture, tables, the cfgs to open in Paraver), as one
        self-contained HTML text. The options are `analysis`'s (`critical_path`: with
        the critical path; `rules`: NVIDIA's rules, where the run is reports)."""
        a, ex = self.analysis(explain=explain, top=top, iterations=iterations,
                              what_if=list(what_if) if critical_path else None,
                              kernel_metrics=kernel_metrics, layers=layers)
        return analysis_html(a, ex, self.inputs, rules=rules)

    def to_html(self, path: PathLike, **options) -> Path:
        """Write `html(**options)` to `path` atomically (a temporary file renamed into
        place); returns the path."""
        from .page.document import write

        return write(self.html(**options), path)

    def samples(self, top: int = 10) -> Tables:
        """Where in the code (docs/samples.md): the CPU samples' `threads`, `self` and
        `inclusive` profiles by function (job-wide, per process and per thread), `modules`,
        the `callers` of the top functions, the top-down `tree`, `folded` stacks, their
        `quality`; and the GPU's idle gaps in the code: per device the launching threads'
        functions (`gap_launching`), the call sites that blocked them (`gap_blocking`),
        what ran meanwhile (`gap_running`), the stacks sampled meanwhile (`gap_folded`,
        the flame graph `plot` draws) and the code named per device (`gap_code`; the
        notes' first lines). Empty, with a note, without samples."""
        _, ex = self.analysis(top=top)
        return samples_tables(ex)

    def rules(self, rule: str = "all") -> Tables:
        """Nsight Systems' expert-system rules (docs/rules.md: gpu_gaps, gpu_time_util,
        cuda_api_sync, ...), equal to nsys 2023.4's, on the run's exports: one table per
        rule. Needs the reports, not a trace."""
        if self.is_trace:
            raise UsageError("the rules read the exports: load the reports, not a trace")
        from . import rules as nsys_rules

        specs = nsys_rules.DEFAULT_RULES if rule == "all" else tuple(
            r.strip() for r in rule.split(","))
        return _rule_tables(self.inputs, specs)

    def compare(self, other: "Run", **options) -> Tables:
        """This run (before) against `other` (after), as `nsys2prv diff` compares them
        (docs/diff.md; `options` as its: iterations, idle, models, rules, jobs, ...): every
        table of the comparison and its paragraph."""
        if self.span is not None:
            options.setdefault("window", self.span)
        return compare(self.inputs, other.inputs, labels=(self.label, other.label),
                       **options)


def load(inputs: PathLike | Sequence[PathLike], *, window=None, label: str | None = None,
         jobs: int | None = None, allow_empty: bool = False, source: str = "",
         on_report=None, on_merge=None) -> Run:
    """A run: a trace written by nsys2prv (.prv, .prv.gz), or one or more reports (.sqlite,
    .nsys-rep; a directory, a glob or '@LIST' names many), translated when first analysed
    (no trace written: `Run.translate` writes one). `window`: 'START/END' or
    'RANGE[@DOMAIN][/INDEX]', as `--filter-time`/`--filter-nvtx` (`allow_empty`: a window
    outside the run is an empty trace, not an error); `jobs`: processes of the
    translation (default: every core); `on_report`/`on_merge`: progress callbacks, as
    `translate` takes them. Use it as a context manager, or `close()` it, to remove its
    temporary files at once."""
    from .report.inputs import run_inputs

    given = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    paths, _ = run_inputs(given)
    for p in paths:
        if not Path(p).exists():
            raise InputError(f"{p}: no such file")
    span = _span(paths, window)
    name = label or Path(paths[0]).name.split(".")[0]
    return Run(paths, span, name, jobs, allow_empty, source, on_report, on_merge)


def compare(before: PathLike | Sequence[PathLike], after: PathLike | Sequence[PathLike],
            labels: tuple[str, str] = ("before", "after"), **options) -> Tables:
    """Two runs compared (`nsys2prv diff`, docs/diff.md): each side a trace or its reports
    (a directory, a glob, '@LIST'), read in a process of its own; `options` as
    `analysis.diff.compare` takes them (window, iterations, models, rules, idle, jobs,
    trace). Every table of the comparison, its warnings and its paragraph; `source` is the
    `analysis.diff.Comparison` (its verdict, `to_dict()`)."""
    from .analysis.diff import compare as compare_runs

    c = compare_runs(before, after, **options)
    return Tables(f"{labels[0]} -> {labels[1]}", c.tables(), list(c.warnings), c.paragraph,
                  source=c, kind="compare")


def scaling(runs: Sequence[Run | PathLike | Sequence[PathLike]], weak: bool = False
            ) -> Tables:
    """POP's model across runs of one program on more GPUs or ranks (`analyze --scaling`;
    docs/cfgs.md): `runs`, one row per run (the first, with fewest devices, the reference):
    devices, time, both forms of the device model with global efficiency and computational
    scalability (its parts: kernel count, time per kernel, SM and tensor activity), and POP's
    CPU model for MPI runs. `plot()` draws them. Each run is read once, one after the other
    (its translation removed before the next)."""
    from .analysis import scaling as sc

    loaded = [r if isinstance(r, Run) else load(r) for r in runs]
    done = []
    for r in loaded:
        with r:
            done.append(sc.run_of_path(r.trace, r.label))
    cols = sc.table(done, weak)
    rows = []
    for c in sc.to_dicts(cols):  # the forms' and the CPU model's fields as columns
        row = {k: v for k, v in c.items() if k not in ("talp", "nccl", "cpu", "metrics",
                                                        "losers", "split")}
        for part in ("talp", "nccl", "cpu", "metrics", "split"):
            row.update({f"{part}.{k}": v for k, v in (c.get(part) or {}).items()})
        row["grown"] = [x[0] for x in c["losers"]]  # the kernels whose time grew most
        rows.append(row)
    return Tables("Scaling", {"runs": pl.DataFrame(rows, infer_schema_length=None)},
                  source=cols, plot=lambda path=None: sc.plot(cols, path), kind="scaling")


# ----------------------------------------------------- the analyses as Tables --
# (from what one pass computed: `Run.analysis`'s analysis and extras)

def efficiency_tables(a) -> Tables:
    """The efficiency model's tables (`Run.efficiency`) of an `analysis.model.Analysis`."""
    d = a.to_dict()
    forms = _frame([{**d["talp"]}, {**d["nccl"]}])
    cpu = None if d.get("cpu") is None else _frame([d["cpu"]])
    return Tables("Efficiency", {
        "forms": forms, "devices": _frame(_flat_groups(d["devices"])),
        "processes": _frame(_flat_groups(d["processes"])),
        "host": _frame(d["host"]), "cpu": cpu}, source=a,
        plot=lambda path=None: _plot(lambda p: _plot_analysis(a, p), path), kind="efficiency")


def idle_tables(a) -> Tables:
    """Why the GPUs wait (`Run.idle`) of an analysis made with `explain`."""
    rep = a.idle
    if rep is None:
        return Tables("Idle", {}, ["no GPU activity: nothing to wait for"], kind="idle")
    d = asdict(rep)
    return Tables("Why the GPUs wait", {
        "devices": _frame(_flat_idle(d["devices"])),
        "processes": _frame(_flat_idle(d["processes"])),
        "job": _frame(_flat_idle([d["job"]])),
        "gaps": _frame([{**{k: v for k, v in g.items() if k != "causes"},
                         **{f"cause.{c}": t for c, t in g["causes"].items()}}
                        for g in d["top"]]),
        "launches": _frame(d["launches"])}, rep.notes, source=rep, kind="idle")


def steps_tables(ex: Extras) -> Tables:
    """The steps (`Run.steps`) of a pass's extras (made with `iterations`)."""
    it = ex.iterations
    if it is None:
        return Tables("Steps", {}, ["the steps were not asked for"], kind="steps")
    if isinstance(it, str):
        return Tables("Steps", {}, [it], kind="steps")
    frames = {"steps": it.steps, "spread": it.spread,
              "candidates": None if it.pick is None else it.pick.candidates}
    if it.comparison is not None:
        frames.update({f"slowest.{k}": v for k, v in it.comparison.tables().items()})
    notes = ([f"step: {it.name}" + (f"@{it.domain}" if it.domain else "")
              + (f" ({it.pick.why})" if it.pick is not None else "")] + it.notes)
    return Tables("Steps", frames, notes, it.paragraph, source=it, kind="steps")


def critical_tables(ex: Extras) -> Tables | None:
    """The critical path (`Run.critical_path`) of a pass's extras (None: not computed)."""
    cp = ex.critical
    if cp is None:
        return None
    d = cp.to_dict()
    frames = {k: _frame(v) for k, v in d.items() if isinstance(v, list)
              and (not v or isinstance(v[0], dict))}
    notes = [f"{k}: {v}" for k, v in d.items() if not isinstance(v, (list, dict))]
    return Tables("Critical path", frames, notes, source=cp, kind="critical")


def kernel_tables(ex: Extras) -> Tables:
    """Inside the kernels (`Run.kernel_metrics`) of a pass's extras."""
    km = ex.kernel_metrics
    if km is None:
        return Tables("Inside the kernels", {}, ["the kernel metrics were not asked for"],
                      kind="kernels")
    frames = {k: v for k, v in vars(km).items()
              if isinstance(v, pl.DataFrame) and v.height}
    launch = getattr(km, "launch", None)  # what each kernel's launch allows
    if launch is not None:
        frames.update({f"launch.{k}": v for k, v in vars(launch).items()
                       if isinstance(v, pl.DataFrame) and v.height})
    notes = [n for n in (km.note, getattr(launch, "note", "")) if n]
    return Tables("Inside the kernels", frames, notes, source=km, kind="kernels",
                  plot=None if km.empty else
                  (lambda path=None: _plot(lambda q: _plot_speed_of_light(km, q), path)))


def layer_tables(ex: Extras) -> Tables:
    """Layers on the GPU (`Run.layers`) of a pass's extras."""
    lay = ex.layers
    if lay is None:
        return Tables("Layers on the GPU", {}, ["no NVTX range in the trace"], kind="layers")
    p = lay.projected
    frames = {"instances": p.instances, "names": p.names(), "layers": lay.layers,
              "per_step": lay.per_step, "outliers": lay.outliers,
              "candidates": lay.pick.candidates}
    notes = [f"layers: {lay.pick.why}"] + lay.notes
    return Tables("Layers on the GPU", frames, notes, source=lay, kind="layers",
                  plot=lambda path=None: _plot(lambda q: _plot_layers(lay, q), path))


NO_SAMPLES = ("no CPU sample in the trace (nsys profile samples every thread by default: "
              "--sample=process-tree; call stacks with --backtrace)")


def samples_tables(ex: Extras) -> Tables:
    """Where in the code (`Run.samples`) of a pass's extras."""
    s = ex.samples
    if s is None:
        return Tables("Where in the code", {}, [NO_SAMPLES], kind="samples")

    def draw(path=None):
        from .analysis.plot import plot_flame

        gf = s.gap_folded if s.gap_folded is not None and s.gap_folded.height else None
        if gf is not None:
            whole = gf.filter(pl.col("device") == "job") \
                if "job" in gf["device"].to_list() else gf
            stacks = whole.group_by("stack").agg(pl.col("samples").sum()).sort("stack")
            title = "CPU samples while the GPU was idle"
        else:
            stacks, title = s.folded, "CPU samples"
        return _plot(lambda q: plot_flame(stacks, q, title), path)

    return Tables("Where in the code", s.tables(), s.lines + s.notes, source=s,
                  kind="samples", plot=draw)


def analysis_html(a, ex: Extras, inputs: Sequence[str], rules: bool = True) -> str:
    """The page of one run (`Run.html`, `nsys2prv analyze --html`) from what its pass
    computed (`a`, `ex`) and its inputs (NVIDIA's rules read the exports)."""
    from .analysis.findings import findings
    from .page.build import analysis_page

    rule_tables, why = None, ""
    if not rules:
        why = "Not asked for (--no-rules)."
    elif len(inputs) == 1 and is_trace(inputs[0]):
        why = "The rules read the exports (.sqlite, .nsys-rep): give the reports, not a trace."
    else:
        from . import rules as nsys_rules

        rule_tables = _rule_tables(inputs, nsys_rules.DEFAULT_RULES)
    return analysis_page(
        source=a.trace, end=a.end, devices=len(a.devices),
        processes=len({g.task for g in a.devices}) or len(a.host),
        efficiency=efficiency_tables(a),
        # no devices: the section says there is nothing to wait for; else None: not computed
        idle=idle_tables(a) if a.idle is not None or not a.devices else None,
        steps=steps_tables(ex) if ex.iterations is not None else None,
        layers=layer_tables(ex) if ex.layers is not None else None,
        kernels=kernel_tables(ex) if ex.kernel_metrics is not None else None,
        critical=critical_tables(ex), rules=rule_tables, rules_why=why,
        findings=findings(a, ex), utilisation=ex.utilisation,
        samples=samples_tables(ex))


def _rule_tables(inputs: Sequence[str], specs) -> Tables:
    """NVIDIA's rules on every export (`Run.rules`)."""
    from . import rules as nsys_rules

    frames, notes = {}, []
    for export in inputs:
        for res in nsys_rules.run_all(export, specs):
            key = res.rule if len(inputs) == 1 else f"{res.rule}@{Path(export).name}"
            frames[key] = res.rows
            notes.append(f"{key}: {res.message}")
    return Tables("nsys rules", frames, notes, kind="rules")


# ------------------------------------------------------------------------ helpers --

def _span(inputs: list[str], window):
    """The run's window as a filter (None: the whole run); on a trace a time window only
    (an NVTX range is looked up in the reports), said when the run is made."""
    from .api import _window_filter
    from .pipeline.window import TimeFilter

    span = _window_filter(window)
    if span is not None and len(inputs) == 1 and is_trace(inputs[0]) \
            and not isinstance(span, TimeFilter):
        raise UsageError("--filter-nvtx needs the reports (an NVTX range is looked up in "
                         "them); on a trace use --filter-time with the trace's times")
    return span


def _cut(trace: str, out: Path, window, allow_empty: bool = False) -> Path:
    """A trace given with a time window (`_span`): its cut into `out`, in the trace's own
    time."""
    from .pipeline.window import cut_trace

    cut_trace(trace, out, window.start or 0, window.end, allow_empty)
    return out


def _flat_groups(groups: list[dict]) -> list[dict]:
    """Device/process results with their overlap levels as columns."""
    out = []
    for g in groups:
        row = {k: v for k, v in g.items() if k not in ("levels", "levels_comm")}
        for k, v in enumerate(g.get("levels", [])):
            row[f"level{k}"] = v
        out.append(row)
    return out


def _flat_idle(groups: list[dict]) -> list[dict]:
    """Idle groups with one column per cause (ns) and their top NVTX ranges as a list."""
    out = []
    for g in groups:
        row = {k: v for k, v in g.items() if k not in ("causes", "nvtx")}
        for c, t in g["causes"].items():
            row[f"cause.{c}"] = t
        row["nvtx"] = [{"range": k, "time": v} for k, v in g["nvtx"].items()]
        out.append(row)
    return out


def _plot(draw, path):
    """`draw(path)`: the picture written to `path`, or, without one, the figure."""
    return draw(path)


def _plot_analysis(a, path):
    from .analysis.plot import plot_analysis

    return plot_analysis(a, path)


def _plot_speed_of_light(km, path):
    """Nsight Compute's speed-of-light chart of the kernels (`analysis.plot.speed_of_light`)."""
    from .analysis.plot import pyplot, shown, speed_of_light

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 7), constrained_layout=True)
    speed_of_light(km, ax)
    if path is None:
        return shown(plt, fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _plot_layers(lay, path):
    from .analysis.plot import plot_layers

    return plot_layers(lay, path)


__all__ = ["Run", "Tables", "load", "compare", "scaling", "Extras"]
