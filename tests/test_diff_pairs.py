"""`nsys2prv diff` on synthetic before/after pairs whose changes have a known size
(`nsys2prv.testing.synth_pairs`): every number and the verdict against the closed form."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from nsys2prv.analysis import diff as D
from nsys2prv.testing.synth_pairs import KERNELS, LAUNCHES, pair


def _compare(tmp_path, change, **kw):
    b, a, eb, ea = pair(tmp_path / "pair", change, **kw)
    return D.compare(str(b), str(a), workdir=tmp_path, rules=False), eb, ea, b, a


def _kernel(c, short):
    return c.kernels.filter(pl.col("short") == short).row(0, named=True)


def test_one_kernel_twice_as_slow(tmp_path):
    c, eb, ea, _, _ = _compare(tmp_path, "kernel_2x")
    g = _kernel(c, "gemm_kernel")
    durs_b, durs_a = eb.kernel_durations["gemm_kernel"], ea.kernel_durations["gemm_kernel"]
    assert g["count_before"] == g["count_after"] == eb.steps * LAUNCHES["gemm_kernel"]
    assert g["total_before"] == durs_b.sum() and g["total_after"] == durs_a.sum()
    assert g["total_after"] == 2 * g["total_before"] and g["ratio"] == 2.0
    assert g["median_after"] == 2 * g["median_before"] == 2 * np.median(durs_b)
    # nothing else moved
    others = c.kernels.filter(pl.col("short") != "gemm_kernel")
    assert (others["delta"] == 0).all() and others.height == len(KERNELS) - 1
    assert c.kernels["delta"].sum() == durs_a.sum() - durs_b.sum()
    # the loop is found and the verdict is 'slower', by the closed-form median change
    assert c.iterations is not None and c.iterations.name == "train_step"
    assert c.iterations.picked
    assert c.iterations.before["duration"].to_list() == eb.step_duration[0].tolist()
    want = np.median(ea.step_duration) / np.median(eb.step_duration) - 1
    assert c.verdict.change == pytest.approx(want)
    assert c.verdict.verdict == "slower" and c.verdict.p < 0.001
    shift = c.iterations.shifts["compute kernels"]
    assert shift.verdict == "slower"
    assert "slower" in c.paragraph
    per_step = np.median(durs_b.reshape(eb.steps, -1).sum(axis=1)) / 1e6
    assert f"gemm_kernel {per_step:.3f} ms -> {2 * per_step:.3f} ms (+100.0 %)" in c.paragraph
    fails, _ = D.gate(c, 5)
    assert fails
    assert not D.gate(c, 100 * want + 1)[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_only_is_no_change(tmp_path, seed):
    """Same program, noise of known variance on both sides: never 'faster' or 'slower'."""
    c, eb, ea, _, _ = _compare(tmp_path, "noise", seed=seed)
    assert c.iterations is not None and c.iterations.before.height == eb.steps
    assert c.verdict.verdict == "no change beyond noise" and c.verdict.p >= 0.05
    assert not D.gate(c, 0.0)[0]  # slower by a hair, perhaps: but not beyond noise
    for name, durs in eb.kernel_durations.items():
        k = c.kernels.filter(pl.col("kernel") == name).row(0, named=True)
        assert k["std_before"] == pytest.approx(np.std(durs, ddof=1))
        assert k["total_after"] == ea.kernel_durations[name].sum()


def test_gap_removed(tmp_path):
    c, eb, ea, _, _ = _compare(tmp_path, "gap_removed")
    idle = c.categories.filter(pl.col("category") == "GPU idle").row(0, named=True)
    assert (c.kernels["delta"] == 0).all()
    # the idle time the gaps made is gone, exactly
    assert idle["total_before"] - idle["total_after"] == \
        int(eb.trace_gpu_idle_ns.sum() - ea.trace_gpu_idle_ns.sum())
    assert idle["total_before"] - idle["total_after"] == \
        eb.steps * eb.gaps_per_step * eb.gap_ns
    assert c.verdict.verdict == "faster"
    assert c.verdict.change == pytest.approx(
        np.median(ea.step_duration) / np.median(eb.step_duration) - 1)


def test_renamed_kernels_matched_by_normalised_name(tmp_path):
    c, eb, ea, _, _ = _compare(tmp_path, "kernel_renamed")
    norm = c.kernels.filter(pl.col("matched_by") == "normalised")
    assert norm.height == len({D.normalise_kernel(n) for n in eb.renamed})
    for before, after in eb.renamed.items():
        row = norm.filter(pl.col("names").list.contains(before)).row(0, named=True)
        assert after in row["names"] and row["kernel"].startswith("≈ ")
        assert row["count_before"] == len(eb.kernel_durations[before])
        assert row["total_after"] == ea.kernel_durations[after].sum()
    removed = c.kernels.filter(pl.col("matched_by") == "removed")["kernel"].to_list()
    added = c.kernels.filter(pl.col("matched_by") == "added")["kernel"].to_list()
    assert sorted(removed) == sorted(eb.removed) and sorted(added) == sorted(eb.added)
    assert c.kernels.filter(pl.col("matched_by") == "removed")["total_after"].sum() == 0


def test_identical_runs(tmp_path):
    c, _, _, _, _ = _compare(tmp_path, "none")
    for t in (c.kernels, c.nvtx, c.categories):
        assert (t["delta"] == 0).all()
    assert (c.models["delta"].fill_null(0) == 0).all()
    assert c.verdict.verdict == "no change beyond noise" and c.verdict.change == 0


def test_multi_rank_job_steps(tmp_path):
    """Two 2-rank jobs given as directories: the job's step spans every rank, devices are
    compared one by one."""
    c, eb, ea, b, a = _compare(tmp_path, "kernel_2x", ranks=2, steps=8)
    assert b.is_dir() and a.is_dir()
    assert c.devices is not None and c.devices.height == 2
    assert c.iterations.before["duration"].to_list() == eb.job_step_duration.tolist()
    assert c.verdict.verdict == "slower"


def test_gate_exit_codes(tmp_path):
    b, a, _, _ = pair(tmp_path / "p", "kernel_2x")
    run = lambda *x: subprocess.run([sys.executable, "-m", "nsys2prv", "diff", str(b),  # noqa
                                     str(a), "--no-rules", *x], capture_output=True, text=True)
    slow = run("--fail-if-slower", "10")
    assert slow.returncode == 1 and "FAIL" in slow.stderr
    ok = run("--fail-if-slower", "1000")
    assert ok.returncode == 0 and "pass" in ok.stderr
    nb, na, _, _ = pair(tmp_path / "n", "noise")
    noise = subprocess.run([sys.executable, "-m", "nsys2prv", "diff", str(nb), str(na),
                            "--no-rules", "--fail-if-slower", "0"], capture_output=True,
                           text=True)
    assert noise.returncode == 0, noise.stderr
