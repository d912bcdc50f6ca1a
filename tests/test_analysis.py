"""`nsys2prv analyze`: its numbers equal paramedir's on the same traces (outputs stored in
tests/data/paramedir/, made with the cfgs of cfgs/analysis/), and the per-device numbers
equal those computed from paramedir's per-row timelines and from SQL on the exports."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import CORPUS, ROOT
from nsys2prv.cli.analyze import main as analyze_main
from nsys2prv.analysis.model import TYPES, Analysis, analyze_trace, efficiency
from paramedir import (CORPUS_TRACES, read_table, read_timeline)
from nsys2prv.paraver.read import read_trace

DATA = ROOT / "tests" / "data" / "paramedir"
PCT = 0.0051  # paramedir prints two decimals


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, Path]:
    """(export, trace) of the project's sample."""
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export
    from nsys2prv import translate

    d = tmp_path_factory.mktemp("analysis-sample")
    export = write_export(d / "sample.sqlite", sample_spec())
    translate([str(export)], str(d / "sample.prv"))
    return export, d / "sample.prv"


def _trace(name: str, sample: tuple[Path, Path], tmp: Path) -> Path:
    """The trace paramedir ran on: stored beside its outputs (sample, families, gpumetrics),
    or translated again from the corpus (mfu2gpu: too large to keep)."""
    if name == "sample-fresh":
        return sample[1]
    stored = DATA / name / "trace"
    for cand in (stored / f"{name}.prv.gz", stored / f"{name}.prv"):
        if cand.exists():
            return cand
    src = CORPUS / CORPUS_TRACES[name]
    if not src.exists():
        pytest.skip(f"corpus export {src} not found")
    from nsys2prv import translate

    out = tmp / f"{name}.prv"
    translate([str(src)], str(out))
    return out


TRACES = ["sample", "families", "mfu2gpu", "gpumetrics"]


@pytest.fixture(scope="module")
def analyses(sample, tmp_path_factory) -> dict[str, Analysis]:
    cache: dict[str, Analysis] = {}

    def get(name: str) -> Analysis:
        if name not in cache:
            trace = _trace(name, sample, tmp_path_factory.mktemp(name))
            cache[name] = analyze_trace(read_trace(trace, TYPES))
        return cache[name]

    return get  # type: ignore[return-value]


def _table(trace: str, stem: str):
    p = DATA / trace / f"{stem}.txt"
    if not p.exists():
        pytest.skip(f"no paramedir output {p.relative_to(ROOT)} (types absent from the trace)")
    return read_table(p)


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("form", ["talp", "nccl"])
def test_device_times_equal_paramedir(trace, form, analyses):
    """idle / communication / useful per process: ns equal, % within rounding."""
    a = analyses(trace)
    t_ns = _table(trace, f"analysis__efficiency_{form}_time")
    t_pct = _table(trace, f"analysis__efficiency_{form}")
    by_name = {p.name: p for p in a.processes}
    for i, row in enumerate(t_ns.rows):
        if row not in by_name:  # a process without GPU rows: all idle in paramedir
            assert t_ns.cells[i, 1] == 0 and t_ns.cells[i, 2] == 0
            continue
        p = by_name[row]
        got = [p.idle, getattr(p, f"comm_{form}"), getattr(p, f"useful_{form}")]
        np.testing.assert_allclose(t_ns.cells[i], got, atol=0.006)
        np.testing.assert_allclose(t_pct.cells[i], [100 * x / a.end for x in got], atol=PCT)


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("form", ["talp", "nccl"])
def test_efficiency_model_equals_paramedir_table(trace, form, analyses):
    """PE, LB, CE, OE read from the paramedir table as docs/cfgs.md says equal the model
    (over processes: what the task-level cfgs aggregate)."""
    a = analyses(trace)
    t = _table(trace, f"analysis__efficiency_{form}")
    ns = _table(trace, f"analysis__efficiency_{form}_time")
    rows = [i for i, r in enumerate(t.rows) if r in {p.name for p in a.processes}]
    useful, idle = t.cells[rows, 2], t.cells[rows, 0]
    e = efficiency(a.processes, a.end, form)
    assert e.parallel == pytest.approx(useful.mean() / 100, abs=PCT / 100)
    assert e.orchestration == pytest.approx((100 - idle.min()) / 100, abs=PCT / 100)
    u_ns, idle_ns = ns.cells[rows, 2], ns.cells[rows, 0]  # ratios of small % need the ns
    if u_ns.max() > 0:
        assert e.load_balance == pytest.approx(u_ns.mean() / u_ns.max(), abs=1e-9)
        assert e.communication == pytest.approx(u_ns.max() / (a.end - idle_ns.min()),
                                                abs=1e-9)
        assert ns.stats["Avg/Max"][2] == pytest.approx(e.load_balance, abs=0.0051)
    assert e.parallel == pytest.approx(
        e.load_balance * e.communication * e.orchestration if e.load_balance else 0, abs=1e-12)


@pytest.mark.parametrize("trace", TRACES)
def test_overlap_levels_equal_paramedir(trace, analyses):
    a = analyses(trace)
    levels = _table(trace, "analysis__overlap_levels")
    comm = _table(trace, "analysis__overlap_levels_comm")
    hidden = _table(trace, "analysis__comm_hidden")
    useful = _table(trace, "analysis__useful_imbalance")
    for p in a.processes:
        i = levels.rows.index(p.name)
        np.testing.assert_allclose(levels.cells[i], [100 * x / a.end for x in p.levels],
                                   atol=PCT)
        if p.nccl_time:
            np.testing.assert_allclose(
                comm.cells[comm.rows.index(p.name)],
                [100 * x / p.nccl_time for x in p.levels_comm[1:]], atol=PCT)
            assert hidden.cells[hidden.rows.index(p.name), 0] == pytest.approx(
                100 * p.hidden_comm / p.nccl_time, abs=PCT)
        assert useful.cells[useful.rows.index(p.name), 0] == pytest.approx(p.useful_nccl,
                                                                           abs=0.006)


@pytest.mark.parametrize("trace", TRACES)
def test_host_offload_equals_state_profile(trace, analyses):
    """Main thread: running / (running + CUDA-call states) from paramedir's state profile.
    CUDA time is the CUDA-call states while a CUDA call is open: where the main thread also
    waits in OS-runtime calls (Synchronization state outside any CUDA call), it is less than
    paramedir's state total, and exactly that total where it does not."""
    a = analyses(trace)
    t = _table(trace, "basics__states_profile")
    cuda_labels = {"Synchronization", "Others", "Memory transfer", "Allocating memory",
                   "Freeing memory", "Configuring accelerator"}
    checked = 0
    for h in a.host:
        if h.offload_efficiency is None:
            continue
        i = t.rows.index(h.main_thread)
        running = t.cells[i, t.columns.index("Running")]
        in_states = sum(t.cells[i, t.columns.index(c)] for c in cuda_labels if c in t.columns)
        assert 100 * h.running / a.end == pytest.approx(running, abs=0.006)
        in_cuda = 100 * h.in_cuda / a.end
        assert in_cuda <= in_states + 0.006
        if trace in ("sample", "mfu2gpu"):  # no OS-runtime waits on these main threads
            assert h.offload_efficiency == pytest.approx(running / (running + in_states),
                                                         abs=2e-4)
        checked += 1
    assert checked


def test_per_device_from_paramedir_timelines(analyses, sample):
    """Per-GPU numbers (one process drives two GPUs in the sample, so no task-level cfg
    shows them) rebuilt from paramedir's per-row timelines of kernels, NCCL kernels and
    copies, grouped by the GPU of each row's label."""
    a = analyses("sample")
    row_file = DATA / "sample" / "trace" / "sample.row"
    labels = row_file.read_text().split("LEVEL THREAD SIZE")[1]
    labels = labels.strip().splitlines()[1:]
    T = a.end

    def busy(stem: str) -> dict[str, list[tuple[float, float]]]:
        tl = read_timeline(DATA / "sample" / f"{stem}.csv")
        out: dict[str, list[tuple[float, float]]] = {}
        for obj, b, d, v in tl.iter_rows():
            if v != 0 and d > 0:
                out.setdefault(obj, []).append((b, b + d))
        return out

    def union(iv):
        iv = sorted(iv)
        total, cur = 0.0, None
        for b, e in iv:
            if cur is None or b > cur[1]:
                if cur:
                    total += cur[1] - cur[0]
                cur = [b, e]
            else:
                cur[1] = max(cur[1], e)
        return total + (cur[1] - cur[0] if cur else 0)

    comp, nccl, mem = (busy("basics__cuda_kernels"), busy("basics__nccl_kernels"),
                       busy("basics__memory_operations"))
    for dev in a.devices:
        objs = [f"1.{dev.task}.{k + 1}" for k, lab in enumerate(labels)
                if lab.startswith(f"GPU {dev.device} ctx")]
        c = [x for o in objs for x in comp.get(o, [])]
        n = [x for o in objs for x in nccl.get(o, [])]
        m = [x for o in objs for x in mem.get(o, [])]
        assert dev.useful_nccl == union(c)
        assert dev.useful_talp == union(c + n)
        assert dev.active == union(c + n + m)
        assert dev.comm_nccl == union(c + n + m) - union(c)
        assert dev.nccl_time == union(n)
        assert dev.idle == T - union(c + n + m)


def _sql_union_per_device(export: Path) -> dict[int, tuple[int, int]]:
    """(compute union, all-kernel union) per CUDA device, from the export's kernel table."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT k.deviceId, k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.shortName").fetchall()
    con.close()
    out = {}
    for dev in sorted({r[0] for r in rows}):
        iv = np.array([(r[1], r[2], r[3].startswith("nccl")) for r in rows if r[0] == dev],
                      dtype=object)
        out[dev] = tuple(_np_union(iv[sel][:, :2].astype(np.int64))
                         for sel in (~iv[:, 2].astype(bool), np.ones(len(iv), bool)))
    return out


def _np_union(iv: np.ndarray) -> int:
    """Length of the union: each interval counts beyond the furthest end before it."""
    if not len(iv):
        return 0
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    before = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(iv[:-1, 1])])
    return int(np.clip(iv[:, 1] - np.maximum(iv[:, 0], before), 0, None).sum())


@pytest.mark.parametrize("trace", ["sample", "mfu2gpu"])
def test_useful_time_equals_sql(trace, analyses, sample):
    """Union of kernel intervals per device straight from CUPTI_ACTIVITY_KIND_KERNEL."""
    export = sample[0] if trace == "sample" else CORPUS / CORPUS_TRACES[trace]
    if not export.exists():
        pytest.skip(f"{export} not found")
    a = analyses("sample-fresh" if trace == "sample" else trace)
    sql = _sql_union_per_device(export)
    assert sorted(d.device for d in a.devices) == sorted(sql)
    for d in a.devices:
        assert (d.useful_nccl, d.useful_talp) == sql[d.device]


def test_sample_overlap_per_gpu(analyses):
    """The sample's GPU 0: gemm [t+120, t+420) on stream 7 and the NCCL all-reduce
    [t+300, t+500) on stream 13 (samples.py): 180 us alone, 120 us both, 80 us NCCL alone
    per iteration, 4 iterations."""
    d0 = analyses("sample").devices[0]
    assert d0.levels[1:] == [4 * (180 + 80) * 1000, 4 * 120 * 1000, 0]
    assert d0.levels_comm[1:] == [4 * 80 * 1000, 4 * 120 * 1000, 0]
    assert d0.hidden_comm == 4 * 120 * 1000


def test_cli_table_json_and_reports(sample, capsys, tmp_path):
    """The CLI prints the table, --json the same numbers, and a report input gives the same
    result as its translated trace."""
    export, prv = sample
    assert analyze_main([str(prv)]) == 0
    out = capsys.readouterr().out
    assert "Device parallel efficiency" in out and "NCCL-aware" in out
    assert analyze_main([str(prv), "--json"]) == 0
    from_trace = json.loads(capsys.readouterr().out)
    assert analyze_main([str(export), "--json"]) == 0
    from_report = json.loads(capsys.readouterr().out)
    for key in ("devices", "processes", "talp", "nccl", "host", "end"):
        assert from_trace[key] == from_report[key]
    assert from_trace["talp"]["n"] == 2


def test_cli_errors(tmp_path):
    from nsys2prv.cli import main

    assert main(["analyze", str(tmp_path / "missing.prv")]) == 1
    assert main(["analyze"]) == 2


def test_plot(sample, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "a.png"
    assert analyze_main([str(sample[1]), "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(sample, tmp_path, monkeypatch):
    import builtins

    from nsys2prv.analysis.plot import plot_analysis
    from nsys2prv.errors import Nsys2PrvError

    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    a = analyze_trace(read_trace(sample[1], TYPES))
    with pytest.raises(Nsys2PrvError, match="matplotlib"):
        plot_analysis(a, tmp_path / "x.png")


RECORDED = ROOT / "tests" / "data" / "recorded"
MPI_TABLES = ("MPI_P2P_EVENTS", "MPI_COLLECTIVES_EVENTS", "MPI_START_WAIT_EVENTS",
              "MPI_OTHER_EVENTS")


def _sql_main_thread_mpi(export: Path) -> int:
    """Time the main thread (tid = pid) spends in MPI calls, from the export's MPI tables."""
    con = sqlite3.connect(f"file:{export}?mode=ro&immutable=1", uri=True)
    rows = []
    for table in MPI_TABLES:
        rows += con.execute(
            f'SELECT start, "end" FROM {table} WHERE (globalTid / 16777216) % 16777216 '
            f"= globalTid % 16777216").fetchall()
    return _np_union(np.array(sorted(rows), dtype=np.int64))


def test_cpu_only_mpi_trace_names_time_and_has_pop_model(tmp_path, capsys):
    """A CPU-only MPI run (4 ranks recorded with nsys 2023.4): no time is called CUDA time,
    the MPI time of each main thread equals the export's MPI tables, and POP's CPU model is
    computed from it (useful = Running, i.e. alive outside MPI and OS-runtime calls)."""
    import nsys2prv
    ranks = sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite"))
    out = tmp_path / "mpi.prv"
    nsys2prv.translate(ranks, out)
    a = analyze_trace(read_trace(out, TYPES))
    assert [h.offload_efficiency for h in a.host] == [None] * 4
    assert [h.in_cuda for h in a.host] == [0] * 4
    want = [_sql_main_thread_mpi(r) for r in ranks]  # ranks 0..3, the tasks' order
    assert [h.in_mpi for h in a.host] == want
    assert all(w > 0 for w in want)
    # useful = Running (Paraver's Useful, what pypop counts): outside MPI and outside the
    # OS-runtime calls the main thread makes between MPI calls
    useful = [h.running for h in a.host]
    assert a.cpu is not None and a.cpu.useful == useful
    assert all(0 < h.running <= h.alive - h.in_mpi for h in a.host)
    assert a.cpu.load_balance_additive == pytest.approx(
        1 - (max(useful) - np.mean(useful)) / a.end)
    assert a.cpu.load_balance == pytest.approx(np.mean(useful) / max(useful))
    assert a.cpu.communication == pytest.approx(max(useful) / a.end)
    assert a.cpu.parallel == pytest.approx(a.cpu.load_balance * a.cpu.communication)
    assert analyze_main([str(out)]) == 0
    text = capsys.readouterr().out
    assert "in CUDA calls" not in text and "no CUDA calls" in text
    assert "CPU, POP model" in text and "in MPI calls" in text
    # a GPU trace without MPI has no CPU model
    assert analyze_trace(read_trace(_sample_trace(tmp_path), TYPES)).cpu is None


def _sample_trace(tmp_path: Path) -> Path:
    import nsys2prv
    out = tmp_path / "sample.prv"
    nsys2prv.translate(ROOT / "examples" / "sample.sqlite", out)
    return out
