"""The Paraver views in cfgs/: generated from the catalogue, well formed, and referring only to
event types the registry defines and the translator writes.

paramedir is not needed (CI has none): its verified outputs are stored in
tests/data/paramedir/ (refreshed with `python tools/paramedir.py refresh`), and
test_paramedir_live re-runs them only where a paramedir is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CORPUS, ROOT
from nsys2prv.views import catalogue
from nsys2prv.views.cfg import parse_cfg, render
from nsys2prv.paraver.read import event_types
from nsys2prv.paraver import registry
from nsys2prv.paraver.registry.gpu_metrics import KERNEL_METRICS
from nsys2prv.paraver.kinds import TRANSLATORS

CFG_DIR = ROOT / "cfgs"
DATA = ROOT / "tests" / "data" / "paramedir"
CFGS = sorted(p.relative_to(CFG_DIR).as_posix() for p in CFG_DIR.rglob("*.cfg"))

# Function names paramedir accepts (paraver-kernel src/semantic*functions.cpp, kfilter.cpp,
# histogramstatistic.cpp); a typo makes paramedir drop the whole file.
THREAD_FUNCTIONS = {"State As Is", "Useful", "State Sign", "Given State", "In State",
                    "Not In State", "State Record Dur.", "Last Evt Type", "Last Evt Val",
                    "Next Evt Type", "Next Evt Val", "Avg Next Evt Val", "Avg Last Evt Val",
                    "Given Evt Val", "In Evt Val", "Int. Between Evt", "Not In Evt Val",
                    "In Evt Range", "Event Bytes"}
AGGREGATES = {"Adding", "AddingSign", "Average", "Maximum", "Minimum", "Activity",
              "In Activity", "Mode", "Active Thd"}
COMPOSE = {"As Is", "Sign", "1-Sign", "Mod", "Mod+1", "Div", "Prod", "Add", "Subs",
           "Complement", "Inverse Div", "Select Range", "Select Range [)", "Is In Range",
           "Is In Range [)", "Is Equal", "Is Equal (Sign)", "Floor", "Ceil", "Round", "Abs",
           "Stacked Val", "In Stacked Val", "Nesting level", "Burst Time",
           "Divide by Burst Time"}
FILTERS = {"All", "None", "=", "!=", ">", "<", "[x,y]"}
STATISTICS = {"Time", "% Time", "% Time Not Zero", "% Window Time", "# Bursts", "Integral",
              "Average value", "Maximum", "Minimum", "Average Burst Time", "Sum bursts",
              "Average per Burst", "Bytes sent", "Bytes received", "#Sends", "#Receives",
              "# Bursts != 0", "Average value != 0"}
OPERATIONS = {"add", "product", "substract", "divide", "maximum", "minimum", "different"}

# Extrae families that may not be in the registry yet (their kinds are being written)
PENDING = {"mpi": (50_000_001, 50_000_005), "openacc": (66_000_000, 66_000_002)}


def _kind_export(kind: str, d: Path) -> Path:
    """A small export with data of `kind`, which the sample does not have: the synthetic
    scenario of the kind's tests where there is one, else a corpus export."""
    from nsys2prv.testing.synth import write_export

    if kind == "nccl":
        from nsys2prv.testing.synth_gpu import nccl_export

        return nccl_export(d / "nccl.sqlite")
    if kind == "gpu_metrics":
        from nsys2prv.testing.synth_metrics import add_native_metrics, two_gpu_scenario

        spec, metrics = two_gpu_scenario()
        return add_native_metrics(write_export(d / "metrics.sqlite", spec), metrics)
    if kind == "nvtx":  # NVTX ranges projected onto the GPU, four levels deep
        from nsys2prv.testing.synth_projection import projection_export

        return projection_export(d / "projection.sqlite")
    if kind == "openacc":
        from nsys2prv.testing.synth_metrics import add_openacc, openacc_scenario

        spec, records = openacc_scenario()
        return add_openacc(write_export(d / "openacc.sqlite", spec), records)
    if kind in ("samples", "osrt", "cuda_api"):  # CPU samples, OS runtime and CUDA callers
        from nsys2prv.testing.synth_samples import edge_export

        return edge_export(d / "samples.sqlite")
    corpus = {"mpi": "exported/cumat_mpi_4gpu.nsys2022.4.sqlite"}.get(kind)
    if corpus is None or not (CORPUS / corpus).exists():
        pytest.skip(f"no small export with {kind} data here")
    return CORPUS / corpus


def _kinds_of(type_: int) -> frozenset[str] | None:
    """Kinds that write a registered type (None if the registry does not know it)."""
    t = registry.EVENT_TYPE_BY_NUMBER.get(type_)
    if t is not None:
        return t.kinds
    r = registry.type_range_of(type_)
    return r.kinds if r is not None else None


def _span(type_: int) -> tuple[int, int]:
    """Types that count as showing `type_`: itself, or, for a fixed key of a range whose
    keys depend on the hardware (GPU metric sets differ per chip), any type of the range."""
    r = registry.type_range_of(type_)
    if r is not None and r.fixed and (type_ - r.base) in r.fixed.values():
        return r.base, r.base + r.size - 1
    return type_, type_


def _pending_kind(type_: int) -> str | None:
    for kind, (lo, hi) in PENDING.items():
        if lo <= type_ <= hi:
            return kind
    return None


@pytest.fixture(scope="module")
def sample_types(tmp_path_factory) -> set[int]:
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export
    from nsys2prv import translate

    d = tmp_path_factory.mktemp("cfg-sample")
    export = write_export(d / "sample.sqlite", sample_spec())
    translate([str(export)], str(d / "sample.prv"))
    return event_types(d / "sample.prv")


_translated: dict[str, set[int]] = {}
# kinds that an analysis writes into a copy of a trace, not a translation
ANALYSIS_KINDS = ("critical_path",)


def _path_trace_types(tmp: Path) -> set[int]:
    """Event types of the sample's trace with its critical path (analyze --path-trace)."""
    from nsys2prv import translate
    from nsys2prv.analysis.critical_path import critical_path, read_graph, write_path_trace
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export

    trace = tmp / "cp-src.prv"
    translate([str(write_export(tmp / "cp.sqlite", sample_spec()))], str(trace))
    g = read_graph(trace)
    return event_types(write_path_trace(trace, tmp / "cp.prv", g, critical_path(g).segments))


def _types_of_kind(kind: str, tmp: Path) -> set[int]:
    """Event types of the translation of `kind`'s small export (cached per session)."""
    if kind not in _translated and kind == "critical_path":
        _translated[kind] = _path_trace_types(tmp)
    if kind not in _translated:
        from nsys2prv import translate

        export = _kind_export(kind, tmp)
        translate([str(export)], str(tmp / f"{kind}.prv"))
        _translated[kind] = event_types(tmp / f"{kind}.prv")
    return _translated[kind]


def test_cfgs_are_the_catalogue():
    """cfgs/ is generated: every catalogue entry is written as rendered, and nothing else."""
    expected = {c.path: render(c) for c in catalogue.CATALOGUE}
    assert sorted(expected) == CFGS, "regenerate: python -m nsys2prv.views.catalogue cfgs"
    for path, text in expected.items():
        assert (CFG_DIR / path).read_text() == text, f"{path} differs from the catalogue"


def test_catalogue_covers_the_families():
    """One basic view per event family and the compound and analysis views of issue 5."""
    expected = {"basics/" + n for n in (
        "states.cfg", "cuda_kernels.cfg", "nccl_kernels.cfg", "memory_operations.cfg",
        "cuda_api.cfg", "nvtx_pushpop.cfg", "nvtx_startend.cfg", "nccl_calls.cfg",
        "nccl_payload.cfg", "gpu_metrics.cfg", "osrt.cfg", "mpi.cfg", "openacc.cfg")}
    expected |= {"views/cuda_activities.cfg", "views/memory_transfers.cfg",
                 "views/nccl_collectives.cfg", "views/mpi_messages.cfg",
                 "analysis/overlap_levels.cfg", "analysis/overlap_levels_comm.cfg",
                 "analysis/comm_hidden.cfg", "analysis/tensor_per_kernel.cfg",
                 "analysis/efficiency_talp.cfg", "analysis/efficiency_nccl.cfg",
                 "analysis/kernel_duration_histogram.cfg", "analysis/useful_imbalance.cfg"}
    assert expected <= set(CFGS)
    # a timeline per known metric, a per-kernel table per metric a kernel drives (the rates
    # written on the kernels), the model against the samples for four of them
    metrics = registry.TYPE_RANGE_BY_NAME["gpu_metrics"].fixed
    hw = {c for c in CFGS if c.startswith("hwcounters/")}
    assert {c for c in hw if c.endswith("_timeline.cfg")} == {
        f"hwcounters/{catalogue._slug(m).replace('__', '_')}_timeline.cfg" for m in metrics}
    assert {c for c in hw if c.endswith("_per_kernel.cfg")} == {
        f"hwcounters/{catalogue._slug(m).replace('__', '_')}_per_kernel.cfg"
        for m in KERNEL_METRICS}
    assert len([c for c in hw if c.endswith("_model_fit.cfg")]) == 4
    # + the kernels' rates per NVTX range on the GPU (layer_rates.cfg)
    assert len(hw) == len(metrics) + len(KERNEL_METRICS) + 4 + 1


@pytest.mark.parametrize("rel", CFGS)
def test_cfg_is_well_formed(rel):
    """What paramedir would refuse silently: unknown functions, dangling window references,
    windows without an event-type function (the load-abort rule), bad histogram tags."""
    cfg = parse_cfg(CFG_DIR / rel)
    assert cfg.windows, rel
    assert cfg.description.strip(), rel
    for i, w in enumerate(cfg.windows, start=1):
        f = w.functions
        if w.composed:
            assert w.parents is not None and max(w.parents) < i, (rel, w.name)
            continue
        assert f.get("thread") in THREAD_FUNCTIONS, (rel, w.name, f.get("thread"))
        for lv in ("appl", "task", "node", "system", "workload"):
            assert f.get(lv) in AGGREGATES, (rel, w.name, lv)
        assert f.get("evt_type") in FILTERS, (rel, w.name)
        if f["evt_type"] not in ("All", "None"):
            assert w.types, (rel, w.name, "filter without types")
        if f["evt_type"] == "[x,y]":
            assert len(w.types) == 2 and w.types[0] <= w.types[1], (rel, w.name)
        for k, v in f.items():
            if k.startswith("compose") or k.startswith("topcompose"):
                assert v in COMPOSE, (rel, w.name, k, v)
    text = (CFG_DIR / rel).read_text()
    for line in text.splitlines():
        if line.startswith("window_operation"):
            assert line.split(" ", 1)[1] in OPERATIONS, (rel, line)
    if cfg.histogram:
        h = cfg.histogram
        assert h["Analyzer2D.Statistic"] in STATISTICS, rel
        n = len(cfg.windows)
        for key in ("Analyzer2D.ControlWindow", "Analyzer2D.DataWindow",
                    "Analyzer2D.3D_ControlWindow"):
            if key in h:
                assert 1 <= int(h[key]) <= n, (rel, key)


@pytest.mark.parametrize("rel", CFGS)
def test_cfg_types_are_registered_and_written(rel, sample_types, tmp_path_factory):
    """Every event type a cfg filters on is in the registry, and every filtering window
    shows data on a translated trace: the sample, or a small export of the kind for data the
    sample does not have (a window filtering several types needs one of them, as paramedir)."""
    cfg = parse_cfg(CFG_DIR / rel)
    # hidden windows are the GUI's load checks (guicheck), not views of data
    windows = [w for w in cfg.windows if w.types and not w.composed and not w.hidden]
    for w in windows:
        for t in w.types:
            kinds = _kinds_of(t)
            if kinds is None:
                pending = _pending_kind(t)
                assert pending is not None, f"{rel}: type {t} is not in the registry"
                pytest.skip(f"{rel}: the {pending} kind is not implemented yet "
                            f"(type {t} not in the registry, '{pending}' not in TRANSLATORS)")
            missing = sorted(k for k in kinds if k not in TRANSLATORS
                             and k not in ANALYSIS_KINDS)
            if missing:
                pytest.skip(f"{rel}: kind {', '.join(missing)} is not implemented yet "
                            f"(type {t} reserved in the registry)")
    for w in windows:
        if w.type_function == "[x,y]":
            lo, hi = w.types
            hit = lambda types: any(lo <= t <= hi for t in types)  # noqa: E731
        else:
            spans = [_span(t) for t in w.types]
            hit = lambda types: any(lo <= t <= hi for t in types  # noqa: E731
                                    for lo, hi in spans)
        if hit(sample_types):
            continue
        kinds = sorted({k for t in w.types for k in (_kinds_of(t) or ())})
        assert kinds, (rel, w.name)
        found = [k for k in kinds if hit(_types_of_kind(k, tmp_path_factory.mktemp(k)))]
        assert found, f"{rel}: window {w.name!r} ({w.types}) shows nothing on the sample " \
                      f"nor on a {'/'.join(kinds)} export"


def test_every_cfg_was_verified_in_paramedir():
    """Each cfg has a stored paramedir output on at least one trace where all its types
    occur (sample, corpus mfu2gpu or the hand-made families trace)."""
    from paramedir import output_name

    stored = {p.name for d in DATA.iterdir() if d.is_dir() for p in d.iterdir()}
    for rel in CFGS:
        names = {output_name(rel, True), output_name(rel, False)}
        assert names & stored, f"{rel}: no paramedir output in {DATA}"


def test_paramedir_live(tmp_path):
    """Where paramedir is installed, the sample's stored outputs are reproduced."""
    from paramedir import find_paramedir, run_all
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export
    from nsys2prv import translate

    if find_paramedir() is None:
        pytest.skip("paramedir not installed (CI): the stored outputs are checked instead")
    export = write_export(tmp_path / "sample.sqlite", sample_spec())
    translate([str(export)], str(tmp_path / "sample.prv"))
    only = ["analysis/efficiency_nccl_time.cfg", "analysis/overlap_levels.cfg",
            "basics/cuda_kernels.cfg", "views/memory_transfers.cfg"]
    runs = run_all(tmp_path / "sample.prv", CFG_DIR, tmp_path / "out", only=only)
    assert len(runs) == len(only)
    for run in runs:
        assert run.ok and not run.partial, (run.cfg, run.stdout, run.stderr)
        assert run.output.read_text() == (DATA / "sample" / run.output.name).read_text()


COMM_LINE_VIEWS = {"views/cuda_activities.cfg", "views/mpi_messages.cfg", "views/dependencies.cfg"}


@pytest.mark.parametrize("rel", CFGS)
def test_comm_lines_only_in_their_views(rel):
    """Launch arrows / message lines are drawn only by the views made for them: every window
    says it explicitly (Paraver draws them when the cfg is silent)."""
    cfg = parse_cfg(CFG_DIR / rel)
    assert {w.comm_lines for w in cfg.windows} == {rel in COMM_LINE_VIEWS}, rel


@pytest.mark.parametrize("rel", CFGS)
def test_load_check_windows_stay_out_of_the_numbers(rel):
    """A hidden load-check window (guicheck) is never what paramedir prints (the last window
    of a cfg without table) nor a histogram's input; a derived window may use it only with
    factor 0."""
    cfg = parse_cfg(CFG_DIR / rel)
    hidden = {i for i, w in enumerate(cfg.windows, start=1)
              if w.hidden and w.name.endswith("(load check)")}
    if cfg.histogram:
        for key in ("Analyzer2D.ControlWindow", "Analyzer2D.DataWindow",
                    "Analyzer2D.3D_ControlWindow"):
            assert int(cfg.histogram.get(key, 0)) not in hidden, (rel, key)
    else:
        assert len(cfg.windows) not in hidden, rel
    text = (CFG_DIR / rel).read_text().split("< NEW DISPLAYING WINDOW ")[1:]
    for i, (w, block) in enumerate(zip(cfg.windows, text), start=1):
        if w.parents and set(w.parents) & hidden:
            factors = next(ln for ln in block.splitlines() if ln.startswith("window_factors"))
            a, b = (float(x) for x in factors.split()[1:])
            for parent, factor in zip(w.parents, (a, b)):
                if parent in hidden:
                    assert factor == 0.0, (rel, w.name)
