"""wxparaver's load questions: every shipped cfg opens without "Some of the events specified
in the filter doesn't appear in the trace" on the traces the suite makes and on the corpus,
and says "None of the events..." only where the trace has none of the cfg's event types.

The GUI rule is applied by `nsys2prv.views.guicheck` (paraver-kernel `CFGLoader::loadCFG`);
the first tests pin that rule on small hand-written cfgs, so the checker cannot pass by
answering "no question" for everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, corpus_cases, corpus_files, translate_case
from nsys2prv.views import guicheck
from nsys2prv.views.cfg import Cfg, Window, parse_cfg, render
from nsys2prv.paraver.read import event_types

CFG_DIR = ROOT / "cfgs"
CFGS = sorted(CFG_DIR.rglob("*.cfg"))


def _cfg(tmp_path: Path, *windows: Window) -> guicheck.ParsedCfg:
    p = tmp_path / "t.cfg"
    p.write_text(render(Cfg("t.cfg", "t", "t", windows)))
    return parse_cfg(p)


def test_rule_some_none_and_ranges(tmp_path):
    """The GUI's rule on small cfgs: listed types partly absent ask SOME, all absent NONE,
    an `All` window counts as data, and a `[x,y]` window with data clears the question for the
    windows before it (not after it)."""
    a = Window("a", thread="Last Evt Val", types=(10, 20))
    rng = Window("r", thread="Last Evt Val", types=(10, 30), type_range=True)
    assert guicheck.question(_cfg(tmp_path, a), {10, 20, 99}) is None
    assert guicheck.question(_cfg(tmp_path, a), {10}) == guicheck.SOME
    assert guicheck.question(_cfg(tmp_path, a), {99}) == guicheck.NONE
    assert guicheck.question(_cfg(tmp_path, Window("s"), a), {99}) == guicheck.SOME
    assert guicheck.question(_cfg(tmp_path, Window("s")), set()) is None
    # the range has data through 25 only: its own listed ends (10, 30) are absent
    assert guicheck.question(_cfg(tmp_path, a, rng), {25}) is None
    assert guicheck.question(_cfg(tmp_path, rng, a), {25}) == guicheck.SOME
    assert guicheck.question(_cfg(tmp_path, a, rng), {99}) == guicheck.NONE
    # hints: enabled when any filtered type is there, or when nothing is filtered
    assert guicheck.hint_enabled(_cfg(tmp_path, a), {20})
    assert not guicheck.hint_enabled(_cfg(tmp_path, a), {99})
    assert guicheck.hint_enabled(_cfg(tmp_path, Window("s")), set())
    assert guicheck.hint_enabled(_cfg(tmp_path, rng), {25})


def test_old_filters_asked(tmp_path):
    """The rule catches what the issue measured: a kernels window listing the NCCL type asks
    on a trace without NCCL kernels (63000006 present, 67000002 absent)."""
    w = Window("GPU kernels", thread="Last Evt Val", types=(63_000_006, 67_000_002))
    assert guicheck.question(_cfg(tmp_path, w), {63_000_000, 63_000_006}) == guicheck.SOME


def _assert_no_question(name: str, loaded: set[int]) -> None:
    asking = []
    for p in CFGS:
        cfg = parse_cfg(p)
        q = guicheck.question(cfg, loaded)
        rel = p.relative_to(CFG_DIR).as_posix()
        if q == guicheck.SOME:
            asking.append(rel)
        if q == guicheck.NONE:  # only when no type any window filters is in the trace
            for w in cfg.windows:
                if w.type_function == "[x,y]":
                    assert not any(w.types[0] <= t <= w.types[1] for t in loaded), (name, rel)
                else:
                    assert not set(w.types) & loaded, (name, rel, w.name)
    assert not asking, f"{name}: wxparaver asks 'Some of the events...' on {asking}"


def _suite_traces(d: Path) -> dict[str, Path]:
    """One translation of each synthetic scenario the suite builds (sample, NCCL, CUDA
    graphs, GPU memory, cuDNN/cuBLAS, GPU metrics, OpenACC, MPI, multi-rank job) and the
    hand-made families trace."""
    from paramedir import families_trace
    from nsys2prv.testing import synth
    from nsys2prv.testing.multi import job
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth_gpu import dnn_export, graph_export, memory_export, nccl_export
    from nsys2prv.testing.synth_metrics import (add_native_metrics, add_openacc,
                                                openacc_scenario, two_gpu_scenario)
    from nsys2prv.testing.synth_mpi import MpiCall, add_mpi
    from nsys2prv import translate

    exports = {
        "sample": [synth.write_export(d / "sample.sqlite", sample_spec())],
        "nccl": [nccl_export(d / "nccl.sqlite")],
        "graphs": [graph_export(d / "graphs.sqlite")],
        "memory": [memory_export(d / "memory.sqlite")],
        "dnn": [dnn_export(d / "dnn.sqlite")],
        "job": [synth.write_export(d / f"rank{i.rank}.sqlite", s) for i, s in job(ranks=2)],
    }
    spec, metrics = two_gpu_scenario()
    exports["metrics"] = [add_native_metrics(synth.write_export(d / "metrics.sqlite", spec),
                                             metrics)]
    spec, records = openacc_scenario()
    exports["openacc"] = [add_openacc(synth.write_export(d / "openacc.sqlite", spec), records)]
    pid = 4242
    mpi_spec = synth.Spec(env={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
                          processes=[(pid, "app")], threads=[(pid, pid, "main")])
    mpi_db = synth.write_export(d / "mpi.sqlite", mpi_spec)
    exports["mpi"] = [add_mpi(mpi_db, [MpiCall(100, 200, pid, pid, "MPI_Init"),
                                      MpiCall(1_000, 5_000, pid, pid, "MPI_Barrier")], [],
                              ranks=[(pid, pid, 0)])]
    out = {}
    for name, dbs in exports.items():
        prv = d / f"{name}.prv"
        translate([str(p) for p in dbs], str(prv))
        out[name] = prv
    out["families"] = families_trace(d / "families")
    return out


@pytest.fixture(scope="module")
def suite_traces(tmp_path_factory) -> dict[str, Path]:
    return _suite_traces(tmp_path_factory.mktemp("guicheck"))


SUITE = ["sample", "nccl", "graphs", "memory", "dnn", "job", "metrics", "openacc", "mpi",
         "families"]


@pytest.mark.parametrize("name", SUITE)
def test_suite_traces_open_without_question(name, suite_traces):
    loaded = event_types(suite_traces[name])
    assert loaded, name
    _assert_no_question(name, loaded)


def test_kind_views_open_on_their_kind(suite_traces):
    """The views of a kind open (no NONE) on the trace that has it: the check is not
    satisfied by views that never find their data."""
    expect = {"nccl": ["views/nccl_collectives.cfg", "analysis/comm_hidden.cfg",
                       "analysis/efficiency_talp.cfg", "analysis/overlap_levels_comm.cfg"],
              "metrics": ["basics/gpu_metrics.cfg", "analysis/tensor_per_kernel.cfg",
                          "hwcounters/sm_active_timeline.cfg"],
              "openacc": ["basics/openacc.cfg"],
              "mpi": ["basics/mpi.cfg", "views/mpi_messages.cfg"],
              "sample": ["views/cuda_activities.cfg", "analysis/overlap_kernels_at_once.cfg",
                         "analysis/efficiency_nccl.cfg", "basics/cuda_kernels.cfg"]}
    for name, rels in expect.items():
        loaded = event_types(suite_traces[name])
        for rel in rels:
            assert guicheck.question(parse_cfg(CFG_DIR / rel), loaded) is None, (name, rel)


_CORPUS = corpus_files()


@pytest.fixture(scope="module", **corpus_cases(_CORPUS))
def corpus_trace(request, tmp_path_factory):
    return translate_case(request, tmp_path_factory,
                          "real-export corpus not found (set NSYS2PRV_CORPUS)")


def test_corpus_traces_open_without_question(corpus_trace):
    db, _, prv = corpus_trace
    _assert_no_question(db.name, event_types(prv))


# -- every kind of trace nsys2prv writes (issue 37) -------------------------------------------

RECORDED = ROOT / "tests" / "data" / "recorded"
# sources: a CPU-only MPI job (4 recorded ranks, no GPU) and the suite's GPU exports: one
# process, NCCL, GPU metrics, a 2-rank job merged from two reports
SOURCES = ("cpu_mpi", "sample", "nccl", "metrics", "job")
# derived from each source: the critical path's copy, the POP copy, the thirds of the run
# translated as --filter-time windows, a window cut from the trace (diff's side given as a
# trace)
DERIVED = ("path", "pop", "w0", "w1", "w2", "cut")
# traces of two runs (diff --trace): (before, after)
PAIRS = (("cpu_mpi", "sample"), ("nccl", "metrics"), ("job", "cpu_mpi"))
KINDS = ([*SOURCES, *(f"{s}_{k}" for s in SOURCES for k in DERIVED),
          *(f"diff_{a}_{b}" for a, b in PAIRS)])


def _quiet_main(args: list) -> None:
    import contextlib
    import io

    from nsys2prv.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    assert code == 0, (args, err.getvalue())


@pytest.fixture(scope="module")
def kind_traces(suite_traces, tmp_path_factory) -> dict[str, Path]:
    """Every kind of trace of the issue, from a CPU-only MPI job and from GPU exports."""
    from nsys2prv import translate
    from nsys2prv.analysis.pop import pop_trace
    from nsys2prv.paraver.read import read_layout
    from nsys2prv.pipeline.window import cut_trace

    d = tmp_path_factory.mktemp("kinds")
    gpu = suite_traces["sample"].parent
    inputs = {"cpu_mpi": sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite")),
              "sample": [gpu / "sample.sqlite"], "nccl": [gpu / "nccl.sqlite"],
              "metrics": [gpu / "metrics.sqlite"], "job": sorted(gpu.glob("rank*.sqlite"))}
    out = {name: suite_traces[name] for name in SOURCES if name in suite_traces}
    out["cpu_mpi"] = d / "cpu_mpi.prv"
    translate([str(p) for p in inputs["cpu_mpi"]], str(out["cpu_mpi"]))
    for name in SOURCES:
        src, end = out[name], read_layout(out[name]).end
        _quiet_main(["analyze", src, "--critical-path", "--path-trace", d / f"{name}_path.prv"])
        pop_trace(src, d / f"{name}_pop.prv")
        for k in range(3):
            translate([str(p) for p in inputs[name]], str(d / f"{name}_w{k}.prv"),
                      window=f"{end * k // 3}ns/{end * (k + 1) // 3}ns", allow_empty=True)
        cut_trace(src, d / f"{name}_cut.prv", end // 4, end // 2)
        out.update({f"{name}_{k}": d / f"{name}_{k}.prv" for k in DERIVED})
    for a, b in PAIRS:  # what `diff A B --trace` writes, through the command itself
        sides = []
        for name in (a, b):
            lst = d / f"{name}.list"
            lst.write_text("".join(f"{p}\n" for p in inputs[name]))
            sides.append(f"@{lst}")
        _quiet_main(["diff", *sides, "--trace", d / f"diff_{a}_{b}.prv", "--no-rules"])
        out[f"diff_{a}_{b}"] = d / f"diff_{a}_{b}.prv"
    return out


@pytest.mark.parametrize("name", KINDS)
def test_every_kind_of_trace_opens_without_question(name, kind_traces):
    """Path traces, POP copies, windows (of reports and of a trace), traces of two runs and
    a CPU-only MPI job: no shipped cfg asks 'Some of the events...' on any of them (each is
    also a valid trace)."""
    from nsys2prv.paraver.check import check_trace

    prv = kind_traces[name]
    assert check_trace(prv).ok, check_trace(prv).messages()
    loaded = event_types(prv)
    _assert_no_question(name, loaded)


def test_kinds_cover_what_asked_before(kind_traces):
    """The traces that made the issue's questions are among the kinds, with the types that
    made them: a CPU-only path (no float), a POP copy with NCCL message sizes but no NCCL
    kernel, a window with GPU metric samples but no kernel."""
    from nsys2prv.paraver.registry import critical, cuda, nccl

    path = event_types(kind_traces["cpu_mpi_path"])
    assert critical.CRITICAL_PATH in path and critical.CRITICAL_FLOAT not in path
    pop = event_types(kind_traces["nccl_pop"])
    assert nccl.NCCL_MESSAGE_SIZE in pop and cuda.NCCL_KERNEL not in pop
    window = event_types(kind_traces["metrics_w1"])
    assert cuda.CUDA_KERNEL not in window and any(67_500_000 <= t < 67_501_000 for t in window)
