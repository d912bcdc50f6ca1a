"""`nsys2prv analyze --scaling`: the efficiency model across runs, checked against the
closed-form values of synthetic GPU runs (nsys2prv.testing.scaling) and against the
single-run analysis of each run."""

from __future__ import annotations

import json

import pytest

import nsys2prv
from nsys2prv.analysis import scaling
from nsys2prv.errors import InputError
from nsys2prv.cli.analyze import main as analyze_main
from nsys2prv.analysis.model import TYPES, analyze_trace
from nsys2prv.paraver.read import read_trace
from nsys2prv.testing import scaling as gen

from conftest import CORPUS, ROOT
from prvtools import sql

SIZES = (1, 2, 4)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{n: (directory of the n reports, translated trace)}"""
    d = tmp_path_factory.mktemp("scaling")
    out = {}
    for n in SIZES:
        paths = gen.gpu_run(n, d / f"run{n}")
        trace = d / f"run{n}.prv"
        nsys2prv.translate(paths, trace)
        out[n] = (d / f"run{n}", trace)
    return out


def _columns(runs, weak=False):
    rs = [scaling.run_of(read_trace(runs[n][1], scaling.SCALING_TYPES), f"{n} GPUs")
          for n in (4, 1, 2)]
    return scaling.table(rs, weak=weak)


def test_strong_scaling_equals_closed_form(runs):
    cols = _columns(runs)
    assert [c.devices for c in cols] == [1, 2, 4]  # ordered by device count
    for c, n in zip(cols, SIZES):
        want = gen.expected(n)
        for form in ("talp", "nccl"):
            for key in ("parallel", "load_balance", "communication", "orchestration",
                        "computational_scalability", "global"):
                assert c.__dict__[form][key] == pytest.approx(want[key], rel=1e-9), (n, key)
        assert c.speedup == pytest.approx(want["speedup"], rel=1e-9)
        assert c.kernels == want["kernels"]
        if n > 1:
            assert [(name, ms) for name, ms, _ in c.losers] == [
                ("gemm", pytest.approx(want["kernel_growth_ms"]))]
    # the 4-GPU run: load balance 5/8, kernels 30% slower than on one GPU
    assert cols[2].talp["load_balance"] == pytest.approx(0.625)
    assert cols[2].talp["computational_scalability"] == pytest.approx(1 / 1.3)


def test_computational_scalability_split(runs):
    """CS = kernel count scalability x time per kernel scalability, exactly; the GPU
    metrics sampled during the kernels are the closed-form time-weighted means of the
    generator's per-rank values, over all kernels and for the kernel name that grew."""
    cols = _columns(runs)
    ref = gen.expected_metrics(1)
    for c, n in zip(cols, SIZES):
        assert c.kernel_count_scalability == pytest.approx(1 / n, rel=1e-12)
        assert (c.kernel_count_scalability * c.time_per_kernel_scalability
                == pytest.approx(c.nccl["computational_scalability"], rel=1e-12))
        want = gen.expected_metrics(n)
        assert c.metrics == pytest.approx(want, rel=1e-12)
        if n > 1:
            (name, _, metrics), = c.losers
            assert metrics == {k: (pytest.approx(ref[k]), pytest.approx(want[k]))
                               for k in want}
    text = scaling.format_table(cols)
    assert "SM active during kernels (%)" in text
    assert "gemm +36.000 ms (SM active 90.0 -> 50.0 %, tensor active 50.0 -> 16.0 %)" in text
    weak = _columns(runs, weak=True)
    assert [c.kernel_count_scalability for c in weak] == pytest.approx([1.0, 1.0, 1.0])
    # kernel time beyond n x the reference's: none here (W x slowdown(n) < n x W)
    assert all(c.losers == [] for c in weak)



def test_gpu_and_cpu_only_runs_are_refused(runs, capsys):
    cpu = RECORDED / "mpi_scale_n1_rank0.nsys2023.4.sqlite"
    with pytest.raises(InputError, match="not one scaling study"):
        analyze_main(["--scaling", str(cpu), str(runs[2][1])])


def test_without_gpu_metrics_the_metric_rows_are_absent(tmp_path):
    paths = gen.gpu_run(2, tmp_path / "run", metrics=False)
    nsys2prv.translate(paths, tmp_path / "run.prv")
    run = scaling.run_of(read_trace(tmp_path / "run.prv", scaling.SCALING_TYPES), "2")
    assert run.metrics == {} and run.kernel_metrics == {}
    cols = scaling.table([run])
    assert cols[0].metrics == {"sm_active": None, "tensor_active": None}
    text = scaling.format_table(cols)
    assert "SM active" not in text and "kernel count scalability" in text


PARAMEDIR_DATA = ROOT / "tests" / "data" / "paramedir"


@pytest.mark.parametrize("n", SIZES)
def test_useful_times_and_metrics_equal_paramedir(runs, n):
    """The same synthetic runs through paramedir with the shipped cfgs (outputs stored in
    tests/data/paramedir/scaling<n>, `python tools/paramedir.py refresh`): the
    useful time summed over devices (both forms), and the kernel-time-weighted SM Active
    and Tensor Active of the run, rebuilt from the per-stream 'Average value' cells
    weighted by each stream's compute kernel time."""
    from paramedir import read_table

    d = PARAMEDIR_DATA / f"scaling{n}"
    run = scaling.run_of(read_trace(runs[n][1], scaling.SCALING_TYPES), str(n))
    useful = read_table(d / "analysis__useful_imbalance.txt")
    assert useful.cells[:, 0].sum() == pytest.approx(run.useful_nccl, abs=0.01 * n)
    for form in ("talp", "nccl"):
        t = read_table(d / f"analysis__efficiency_{form}_time.txt")
        assert t.column("2").sum() == pytest.approx(getattr(run, f"useful_{form}"),
                                                    abs=0.01 * n)
    weights = useful.cells[:, 0]  # one stream per process, in process order
    for key, stem in (("sm_active", "hwcounters__sm_active_per_kernel"),
                      ("tensor_active", "analysis__tensor_per_kernel")):
        t = read_table(d / f"{stem}.txt")
        streams = [i for i, r in enumerate(t.rows) if " stream " in r]
        per_stream = t.column("gemm")[streams]
        assert len(per_stream) == len(weights) == n
        assert run.metrics[key] == pytest.approx(
            (per_stream * weights).sum() / weights.sum(), abs=0.006)
        assert run.kernel_metrics["gemm"][key] == run.metrics[key]


def test_metrics_of_a_real_export_equal_paramedir():
    """A real nsys 2023.4 export with GPU metrics (the stored translation of the corpus'
    A100 vectorAdd run): the run's SM Active and Tensor Active during kernels equal
    paramedir's per-kernel 'Average value' of the same trace (one stream)."""
    from paramedir import read_table

    d = PARAMEDIR_DATA / "gpumetrics"
    run = scaling.run_of(read_trace(d / "trace" / "gpumetrics.prv.gz",
                                    scaling.SCALING_TYPES), "a100")
    assert set(run.kernel_metrics) == {"vectorAdd"}
    for key, stem in (("sm_active", "hwcounters__sm_active_per_kernel"),
                      ("tensor_active", "analysis__tensor_per_kernel")):
        t = read_table(d / f"{stem}.txt")
        (cell,) = [t.cells[i, 0] for i, r in enumerate(t.rows) if " stream " in r]
        assert run.metrics[key] == pytest.approx(cell, abs=0.006)
        assert run.kernel_metrics["vectorAdd"][key] == run.metrics[key]


def test_per_run_numbers_equal_single_run_analyze(runs):
    for c, n in zip(_columns(runs), SIZES):
        a = analyze_trace(read_trace(runs[n][1], TYPES))
        assert c.talp["parallel"] == a.talp.parallel
        assert c.talp["load_balance"] == a.talp.load_balance
        assert c.nccl["orchestration"] == a.nccl.orchestration
        assert c.elapsed_ms == a.end / 1e6


def test_weak_scaling_counts_the_devices(runs):
    for c, n in zip(_columns(runs, weak=True), SIZES):
        u, u1 = sum(gen.rank_work(n)), sum(gen.rank_work(1))
        assert c.talp["computational_scalability"] == pytest.approx(u1 * n / u)


def test_cli_runs_from_report_directories_and_traces(runs, capsys, tmp_path):
    args = ["--scaling", str(runs[1][0]), str(runs[2][1]), str(runs[4][0])]
    assert analyze_main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["devices"] for d in data] == [1, 2, 4]
    assert data[2]["talp"]["global"] == pytest.approx(gen.expected(4)["global"], rel=1e-9)
    assert analyze_main(args + ["--csv"]) == 0
    csv = capsys.readouterr().out.splitlines()
    assert csv[0].startswith("row,run1,run2,run4")
    row = next(line for line in csv if line.startswith("computational scalability"))
    assert [float(x) for x in row.split(",")[1:]] == pytest.approx(
        [1.0, 1 / 1.1, 1 / 1.3], rel=1e-5)
    png = tmp_path / "scaling.png"
    assert analyze_main(args + ["--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "computational scalability" in text and "global efficiency (TALP form)" in text
    assert png.stat().st_size > 10_000


def test_cpu_only_runs_use_pops_cpu_model(tmp_path, capsys):
    """CPU-only MPI runs: subsets of the recorded 4-rank job (a smoke test: not a real
    scaling study) give POP's CPU rows, and the CPU computational scalability is the ratio
    of the useful CPU times of the runs."""
    ranks = sorted((ROOT / "tests" / "data" / "recorded").glob("mpi_nvtx_rank*.nsys2023.4.sqlite"))
    rs = []
    for k in (1, 2, 4):
        out = tmp_path / f"cpu{k}.prv"
        nsys2prv.translate(ranks[:k], out)
        rs.append(scaling.run_of(read_trace(out, TYPES), f"{k} ranks"))
    cols = scaling.table(rs)
    assert [c.processes for c in cols] == [1, 2, 4] and all(c.devices == 0 for c in cols)
    for c, r in zip(cols, rs):
        assert c.cpu["computational_scalability"] == pytest.approx(
            rs[0].cpu_useful / r.cpu_useful)
        assert c.cpu["parallel"] == pytest.approx(r.analysis.cpu.parallel)
    text = scaling.format_table(cols)
    assert "CPU global efficiency (POP, MPI)" in text and "orchestration" not in text


RECORDED = ROOT / "tests" / "data" / "recorded" / "scaling"


def test_recorded_cpu_scaling_runs_match_the_programs_imbalance(capsys):
    """Real runs of tests/data/recorded/scaling/mpi_scale.c on 1, 2 and 4 Open MPI ranks
    (nsys 2023.4, no GPU): 80 ms of busy work per iteration split 1:2:..:n, so POP's load
    balance is (n + 1) / (2 n) and the total useful time does not change with n. Measured
    on a 2-core VM (4 ranks oversubscribed): load balance within 0.03 of the program's,
    computational scalability within 0.15 of 1 (process start-up and MPI_Finalize are
    useful time too)."""
    runs = [str(RECORDED / f"mpi_scale_n{n}_rank*.nsys2023.4.sqlite") for n in (4, 1, 2)]
    assert analyze_main(["--scaling", *runs, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["processes"] for d in data] == [1, 2, 4] and all(d["devices"] == 0 for d in data)
    for d, n in zip(data, (1, 2, 4)):
        assert d["cpu"]["load_balance"] == pytest.approx((n + 1) / (2 * n), abs=0.03)
        assert d["cpu"]["computational_scalability"] == pytest.approx(1.0, abs=0.15)
        assert d["cpu"]["parallel"] == pytest.approx(
            d["cpu"]["load_balance"] * d["cpu"]["communication"])
    assert analyze_main(["--scaling", *runs]) == 0
    text = capsys.readouterr().out
    assert "CPU global efficiency (POP, MPI)" in text and "compute kernels" not in text
    # column heads: the globs without what they share at the end
    assert text.splitlines()[1].split() == [f"mpi_scale_n{n}" for n in (1, 2, 4)]


def test_column_names_keep_what_tells_runs_apart():
    assert scaling.column_names(["gpus1", "gpus2"]) == ["gpus1", "gpus2"]
    long = [f"/scratch/project/study/run_{n}_nodes/report.sqlite" for n in (4, 16)]
    assert scaling.column_names(long) == ["run_4", "run_16"]
    assert scaling.column_names(["/data/r4", "/data/r8"]) == ["r4", "r8"]
    assert scaling.column_names(["x" * 30]) == ["…" + "x" * 23]


CORI = [CORPUS / "exported" / f"cori_omp_run1_rank{r}.nsys2022.4-trim.sqlite" for r in range(4)]


def test_corpus_rank_subsets_smoke(tmp_path, capsys):
    """Smoke test on real data (not a scaling study): subsets of the corpus' 8-rank Cori
    run (1, 2, 4 ranks, one GPU each, every rank doing the same work) as weak scaling.
    Kernel counts are the exports' (SQL), kernel count scalability is 1 (n ranks x the same
    kernels), CS = count x time per kernel, and each run's model is its single-run one."""
    if not all(p.exists() for p in CORI):
        pytest.skip(f"corpus Cori exports not found under {CORPUS}")
    counts = [sql(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0] for p in CORI]
    dirs = []
    for n in (1, 2, 4):
        d = tmp_path / f"ranks{n}"
        d.mkdir()
        for p in CORI[:n]:
            (d / p.name).symlink_to(p)
        dirs.append(str(d))
    assert analyze_main(["--scaling", "--weak", *dirs, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["devices"] for d in data] == [1, 2, 4]
    for d, n in zip(data, (1, 2, 4)):
        assert d["kernels"] == sum(counts[:n])
        assert d["kernel_count_scalability"] == pytest.approx(1.0)
        assert d["kernel_count_scalability"] * d["time_per_kernel_scalability"] == \
            pytest.approx(d["nccl"]["computational_scalability"], rel=1e-12)
    # kernel names that grew most beyond n x the reference's time, from SQL durations
    per_rank = [dict(sql(p, "SELECT s.value, sum(k.end - k.start) FROM "
                            "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = "
                            "k.shortName GROUP BY s.value")) for p in CORI]
    for d, n in zip(data[1:], (2, 4)):
        assert d["losers"]
        for name, ms, _ in d["losers"]:
            total = sum(r.get(name, 0) for r in per_rank[:n])
            assert ms == pytest.approx((total - n * per_rank[0].get(name, 0)) / 1e6, abs=1e-6)
    nsys2prv.translate(CORI[:2], tmp_path / "two.prv")
    a = analyze_trace(read_trace(tmp_path / "two.prv", TYPES))
    assert data[1]["talp"]["parallel"] == a.talp.parallel
    assert data[1]["talp"]["load_balance"] == a.talp.load_balance
