"""`nsys2prv analyze --iterations`: every step of a run against the generator's exact
timeline (testing/synth_pairs.iterations_run: every duration is known), the slowest step
against the median one, Tukey's fences, the picking rule, and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import nsys2prv
from nsys2prv.analysis.iterations import analyze_steps, tukey_outliers
from nsys2prv.testing.synth_pairs import iterations_run

from conftest import ROOT

SAMPLE = ROOT / "examples" / "sample.sqlite"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """2 ranks x 2 GPUs, 12 steps of a noisy loop with a memcpy, kernels and an all-reduce."""
    d = tmp_path_factory.mktemp("job")
    e = iterations_run(d / "job", steps=12, ranks=2, devices_per_rank=2, noise_sd_ns=20_000,
                       seed=3, nccl_ns=30_000, memcpy_ns=10_000)
    trace = d / "job.prv"
    nsys2prv.translate(e.path, trace)
    return e, trace, analyze_steps(trace, None)


def test_steps_equal_the_generated_timeline(job):
    e, _, (_, _, r) = job
    assert r.name == "train_step" and r.picked and r.steps.height == e.steps
    st = r.steps
    assert st["duration"].to_list() == e.job_step_duration.tolist()
    assert st["gpu_busy"].to_list() == e.gpu_busy_ns.sum(axis=0).tolist()
    assert st["gpu_idle"].to_list() == e.gpu_idle_ns.sum(axis=0).tolist()
    devices = e.ranks * e.devices_per_rank
    assert st["device_time"].to_list() == (e.step_duration.sum(axis=0) * e.devices_per_rank
                                           ).tolist()
    # the gaps inside a step: gaps_per_step of gap_ns on every device, whole; their causes
    # add up to them
    assert (st["gap_idle"] == e.gaps_per_step * e.gap_ns * devices).all()
    causes = st.select(pl.sum_horizontal(pl.col("^idle\\..*$")))
    assert causes.to_series().to_list() == st["gap_idle"].to_list()
    # category times: the generator's durations of each step, summed over ranks and devices
    per_step = {n: d.reshape(e.ranks, e.steps, e.devices_per_rank, -1).sum(axis=(0, 2, 3))
                for n, d in e.kernel_durations.items()}
    nccl = per_step.pop(e.nccl_name)
    assert st["NCCL kernels"].to_list() == nccl.tolist()
    assert st["compute kernels"].to_list() == sum(per_step.values()).tolist()
    assert st["memcpy"].to_list() == e.memcpy_durations.reshape(e.ranks, e.steps, -1).sum(
        axis=(0, 2)).tolist()


def test_slowest_against_median(job):
    e, _, (_, _, r) = job
    d = e.job_step_duration
    assert r.slowest == int(np.argmax(d))
    order = np.argsort(d, kind="stable")
    assert r.median == int(order[(d.size - 1) // 2])
    assert r.outliers == [int(k) for k in np.flatnonzero(tukey_outliers(d))]
    assert r.steps.filter(pl.col("outlier"))["instance"].to_list() == r.outliers
    # the comparison's kernel table: each kernel's time in the slowest step minus its time
    # in the median one, exactly
    k = r.comparison.kernels
    for name, durs in e.kernel_durations.items():
        per = durs.reshape(e.ranks, e.steps, e.devices_per_rank, -1).sum(axis=(0, 2, 3))
        row = k.filter(pl.col("names").list.contains(name)).row(0, named=True)
        assert row["total_before"] == per[r.median] and row["total_after"] == per[r.slowest]
    assert r.paragraph.startswith(f"Slowest step {r.slowest}: ")
    change = d[r.slowest] / d[r.median] - 1
    assert f"{100 * change:+.1f} % against the median step {r.median}" in r.paragraph
    spread = {m["metric"]: m for m in r.spread.iter_rows(named=True)}
    assert spread["duration"]["max"] == d.max() and spread["duration"]["min"] == d.min()
    assert spread["duration"]["median"] == float(np.median(d))


def test_tukey_fences():
    values = np.array([10, 11, 12, 13, 14, 40, 1])
    q1, q3 = np.percentile(values, [25, 75])  # 10.5, 13.5: fences 6 and 18
    assert (q1, q3) == (10.5, 13.5)
    assert tukey_outliers(values).tolist() == [False] * 5 + [True, True]
    assert not tukey_outliers(np.array([1, 100, 1000])).any()  # too few to judge


def test_sample_steps_and_cli(tmp_path):
    """The shipped sample: its four 'iteration N' ranges are the steps (durations equal
    the export's), named or picked; JSON carries every step; a missing range is one line."""
    import sqlite3

    con = sqlite3.connect(f"file:{SAMPLE}?mode=ro", uri=True)
    durs = [d for (d,) in con.execute(
        "SELECT n.end - n.start FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
        "WHERE s.value LIKE 'iteration %' ORDER BY n.start")]
    con.close()
    run = lambda *a: subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", *a],  # noqa
                                    capture_output=True, text=True)
    out = run(str(SAMPLE), "--iterations", "--json")
    assert out.returncode == 0, out.stderr
    it = json.loads(out.stdout)["iterations"]
    assert it["range"] == "iteration #" and it["picked"]
    assert [s["duration"] for s in it["steps"]] == durs
    named = run(str(SAMPLE), "--iterations", "iteration 2")
    assert named.returncode == 0 and "### Steps: NVTX range 'iteration 2' (--iterations), 1 " \
        "instances" in named.stdout and "One step: nothing to compare" in named.stdout
    bad = run(str(SAMPLE), "--iterations", "nosuchstep")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "no instance of the NVTX range 'nosuchstep'" in bad.stderr


def test_no_loop_is_a_note(tmp_path):
    """A run without a repeated range: --iterations (picked) says so and the rest is
    printed; exit 0."""
    from nsys2prv.testing.synth import write_export
    from nsys2prv.testing.samples import sample_spec

    spec = sample_spec()
    spec.nvtx = []
    export = write_export(tmp_path / "flat.sqlite", spec)
    out = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(export),
                          "--iterations"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "### Steps: the trace has no NVTX ranges: name the step's range" in out.stdout
    assert "Device parallel efficiency" in out.stdout


def test_overlapping_instances_are_no_loop(tmp_path):
    """A range that runs on several threads at once (NVIDIA Fuser's parallel compilation)
    is not picked as the loop; 'iteration N' of the sample is."""
    from nsys2prv.analysis.activities import read_activities
    from nsys2prv.analysis.diff import pick_range
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import Nvtx, write_export

    spec = sample_spec()
    pid = spec.processes[0][0]
    tids = [9001, 9002]
    spec.threads += [(pid, t, f"compiler-{t}") for t in tids]
    # 'compile' on two threads at once, four times each: more repeated than 'iteration N'
    # and longer in total, so that it would win if overlapping instances were a loop
    spec.nvtx += [Nvtx(1_000_000 * k, 1_000_000 * k + 900_000, pid, t, "pushpop", "compile",
                       None) for k in range(1, 5) for t in tids]
    export = write_export(tmp_path / "par.sqlite", spec)
    trace = tmp_path / "par.prv"
    nsys2prv.translate(export, trace)
    assert pick_range(read_activities(trace)) == ("iteration #", None)


def test_a_call_range_of_many_ranks_is_no_loop(tmp_path):
    """The loop must cover a tenth of the run on one process, not summed over the ranks: on
    8 ranks, 'allreduce' (4 x 1 ms a rank, about 5 % of each rank's run) is no loop, though
    its 32 ms over the job are more than a tenth of the trace (a 1,024-rank job's 50 us NCCL
    call ranges were picked as its iterations). Counted per process, 'step #' (3 x 5 ms on
    every rank) is a loop of 3 instances holding 15 ms."""
    from nsys2prv.analysis.activities import read_activities
    from nsys2prv.analysis.diff import pick_range
    from nsys2prv.analysis.steps import candidates
    from nsys2prv.testing.multi import job
    from nsys2prv.testing.synth import Nvtx, write_export

    def run(steps: bool) -> Path:
        d = tmp_path / f"steps{int(steps)}"
        d.mkdir()
        for info, spec in job(ranks=8):
            pid = spec.processes[0][0]
            local = info.session_delay
            spec.nvtx += [Nvtx(52_000_000 + 3_000_000 * k - local,
                               53_000_000 + 3_000_000 * k - local, pid, pid, "pushpop",
                               "allreduce", None) for k in range(4)]
            if steps:
                spec.nvtx += [Nvtx(51_000_000 + 5_000_000 * k - local,
                                   56_000_000 + 5_000_000 * k - local, pid, pid, "pushpop",
                                   f"step {k}", None) for k in range(3)]
            write_export(d / f"rank{info.rank}.sqlite", spec)
        out = tmp_path / f"steps{int(steps)}.prv"
        nsys2prv.translate(d, out)
        return out

    acts = read_activities(run(False))
    c = candidates(acts).filter(pl.col("family") == "allreduce").row(0, named=True)
    # 4 a rank, one after the other: a loop, but it launches none of the GPU work
    assert (c["n"], c["tasks"], c["loop"], c["gpu_share"]) == (4, 8, True, 0.0)
    assert pick_range(acts) is None
    acts = read_activities(run(True))
    c = {r["family"]: r for r in candidates(acts).iter_rows(named=True)}
    # 'step #' launches the 5 compute kernels of each rank (2 ms each), not the all-reduce
    # that follows the steps (from 66 ms + the rank's delay to 80 ms)
    nccl = sum(14_000_000 - 1_000_000 * r - 10_000 for r in range(8))
    compute = 8 * 5 * 1_990_000
    assert (c["step #"]["n"], c["step #"]["tasks"]) == (3, 8)
    assert c["step #"]["gpu_share"] == pytest.approx(compute / (compute + nccl))
    assert pick_range(acts) == ("step #", None)


def test_an_operator_is_never_the_step(tmp_path):
    """The sample with its step ranges and the ranges nested in them renamed as PyTorch
    numbers its operators under emit_nvtx ('aten::to, op_id = N', 'aten::linear, seq = N,
    op_id = M'): the same loop, holding all the GPU work and every kernel name, is an
    operator, so no step is found (the sample's other ranges left out) (the candidate says why), the layers describe the run as
    a whole, and --json says there is no step."""
    from nsys2prv.analysis.activities import read_activities
    from nsys2prv.analysis.steps import candidates, pick
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export

    spec = sample_spec()
    steps = [n for n in spec.nvtx if (n.text or "").startswith("iteration ")]
    assert len(steps) >= 3
    for k, n in enumerate(steps):
        n.text = f"aten::to, op_id = {317151 + 40 * k}"
    forward = [n for n in spec.nvtx if n.text == "forward"]
    for k, n in enumerate(forward):
        n.text, n.domain = f"aten::linear, seq = {k}, op_id = {317152 + 40 * k}", None
    spec.nvtx = steps + forward  # the worker's ranges and the marks left out
    export = write_export(tmp_path / "ops.sqlite", spec)
    trace = tmp_path / "ops.prv"
    nsys2prv.translate(export, trace)
    acts = read_activities(trace)
    c = candidates(acts).filter(pl.col("family") == "aten::to, op_id = #").row(0, named=True)
    # the loop the sample's step was: every instance, one after the other, all the work
    assert (c["n"], c["loop"], c["operator"]) == (len(steps), True, True)
    assert c["gpu_share"] > 0.9
    p = pick(acts)
    assert p.name is None and "other than an operator's" in p.why
    assert p.candidates.filter(pl.col("family") == "aten::to, op_id = #")["note"][0] \
        .startswith("a PyTorch operator")
    out = subprocess.run([sys.executable, "-m", "nsys2prv", "analyze", str(trace), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lay = json.loads(out.stdout)["layers"]
    assert lay["step"] is None
    assert "of the run's GPU time" in lay["pick"]["why"]
    assert not [o for o in lay["outliers"] if o["kind"] == "steps"]


def test_a_step_named_under_emit_nvtx_is_still_the_step(tmp_path):
    """A step's name that record_function numbered ('ProfilerStep#3, op_id = N') is no
    operator: it stays the step."""
    from nsys2prv.analysis.activities import read_activities
    from nsys2prv.analysis.steps import pick
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export

    spec = sample_spec()
    for k, n in enumerate(n for n in spec.nvtx if (n.text or "").startswith("iteration ")):
        n.text = f"ProfilerStep#{k}, op_id = {1000 + 7 * k}"
    export = write_export(tmp_path / "ps.sqlite", spec)
    trace = tmp_path / "ps.prv"
    nsys2prv.translate(export, trace)
    assert pick(read_activities(trace)).name == "ProfilerStep##, op_id = #"
