"""The before/after pairs of nsys2prv.testing.synth_pairs hold exactly what `Expected` says,
the change each names and nothing else, and translate to traces that check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nsys2prv.analysis.diff import normalise_kernel
from nsys2prv.cli import main as cli
from nsys2prv.testing import synth_pairs as sp

from prvtools import sql, validate

KERNELS = """SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
             JOIN StringIds s ON s.id = k.demangledName ORDER BY k.globalPid, k.start,
             k.deviceId"""


def db_kernels(e: sp.Expected) -> dict[str, np.ndarray]:
    """name -> durations in the databases (rank, then time order)."""
    out: dict[str, list[int]] = {}
    for db in e.paths:
        for name, d in sql(db, KERNELS):
            out.setdefault(name, []).append(d)
    return {n: np.array(v) for n, v in out.items()}


def db_steps(e: sp.Expected) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of the step range per rank, (ranks, steps)."""
    starts, ends = [], []
    for db in e.paths:
        rows = sql(db, f"""SELECT n.start, n.end FROM NVTX_EVENTS n
                           JOIN StringIds s ON s.id = n.textId
                           WHERE n.eventType = 59 AND s.value = '{e.step_range}'
                           ORDER BY n.start""")
        starts.append([r[0] for r in rows])
        ends.append([r[1] for r in rows])
    return np.array(starts), np.array(ends)


def db_busy(e: sp.Expected) -> np.ndarray:
    """GPU activity time per rank and step (kernels and copies starting in the step)."""
    s, t = db_steps(e)
    out = np.zeros_like(s)
    for r, db in enumerate(e.paths):
        acts = sql(db, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL")
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in {x[0] for x in sql(
                db, "SELECT name FROM sqlite_master")}:
            acts += sql(db, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        a = np.array(acts)
        step = np.searchsorted(s[r], a[:, 0], side="right") - 1
        assert (a[:, 1] <= t[r][step]).all()  # every activity inside its step
        np.add.at(out[r], step, a[:, 1] - a[:, 0])
    return out


def assert_matches(e: sp.Expected) -> None:
    """The databases hold exactly `e`'s kernels, steps and GPU time."""
    got = db_kernels(e)
    assert got.keys() == e.kernel_durations.keys()
    for name, d in e.kernel_durations.items():
        assert got[name].size == d.size, name
        assert got[name].sum() == d.sum(), name
        if e.devices_per_rank == 1:  # one stream: time order is the Expected order
            assert (got[name] == d).all(), name
        else:
            assert (np.sort(got[name]) == np.sort(d)).all(), name
    s, t = db_steps(e)
    assert s.shape == (e.ranks, e.steps)
    assert (s == e.step_start).all() and (t == e.step_end).all()
    assert (db_busy(e) == e.gpu_busy_ns).all()
    # correlation: every kernel has its launch call on the same process
    for db in e.paths:
        lone = sql(db, """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                          LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                          ON r.correlationId = k.correlationId WHERE r.start IS NULL""")
        assert lone == [(0,)]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, tuple]:
    root = tmp_path_factory.mktemp("pairs")
    return {c: sp.pair(root / c, c, seed=3) for c in sp.CHANGES}


@pytest.mark.parametrize("change", sp.CHANGES)
def test_contents_match_expected(pairs, change):
    b, a, eb, ea = pairs[change]
    assert b.is_file() and a.is_file()
    assert_matches(eb)
    assert_matches(ea)
    assert eb.steps == ea.steps == 20


def test_kernel_2x(pairs):
    _, _, eb, ea = pairs["kernel_2x"]
    kb, ka = eb.kernel_durations, ea.kernel_durations
    assert kb.keys() == ka.keys()
    assert (ka["gemm_kernel"] == 2 * kb["gemm_kernel"]).all()
    for n in kb.keys() - {"gemm_kernel"}:
        assert (ka[n] == kb[n]).all()
    per_step = sp.LAUNCHES["gemm_kernel"] * sp.KERNELS["gemm_kernel"]
    assert (ea.step_duration - eb.step_duration == per_step).all()
    assert (ea.gpu_idle_ns == eb.gpu_idle_ns).all()


def test_kernel_2x_with_noise(tmp_path):
    """Same seed on both sides: the doubled kernel is exactly 2x even with noise."""
    _, _, eb, ea = sp.pair(tmp_path, "kernel_2x", steps=5, noise_sd_ns=3_000, seed=7)
    assert (ea.kernel_durations["gemm_kernel"] == 2 * eb.kernel_durations["gemm_kernel"]).all()
    assert (ea.kernel_durations["reduce_kernel"] == eb.kernel_durations["reduce_kernel"]).all()
    assert eb.kernel_durations["gemm_kernel"].std() > 0
    assert_matches(ea)


def test_gap_removed(pairs):
    _, _, eb, ea = pairs["gap_removed"]
    assert eb.gap_ns == sp.GAP_NS and ea.gap_ns == 0
    for n, d in eb.kernel_durations.items():
        assert (ea.kernel_durations[n] == d).all()
    drop = eb.gaps_per_step * sp.GAP_NS
    assert eb.gaps_per_step == sum(sp.LAUNCHES.values()) - 1
    assert (eb.gpu_idle_ns - ea.gpu_idle_ns == drop).all()
    assert (eb.step_duration - ea.step_duration == drop).all()
    assert (eb.trace_gpu_idle_ns - ea.trace_gpu_idle_ns == eb.steps * drop).all()


def test_noise(pairs):
    _, _, eb, ea = pairs["noise"]
    assert (eb.seed, ea.seed) == (3, 4) and eb.noise_sd_ns == ea.noise_sd_ns == sp.NOISE_SD_NS
    for n, d in eb.kernel_durations.items():
        diff = d - sp.KERNELS[n]
        assert not (d == ea.kernel_durations[n]).all()
        # noise of the stated size, centred on the programmed duration
        assert abs(diff.mean()) < 4 * sp.NOISE_SD_NS / np.sqrt(d.size)
        assert 0.7 < diff.std() / sp.NOISE_SD_NS < 1.3
    # the same seed gives the same run
    again = sp.iterations_run(Path(eb.paths[0]).with_name("again.sqlite"),
                              noise_sd_ns=sp.NOISE_SD_NS, seed=3)
    assert Path(eb.paths[0]).read_bytes() == again.paths[0].read_bytes()


def test_kernel_renamed(pairs):
    _, _, eb, ea = pairs["kernel_renamed"]
    nb, na = set(eb.kernel_durations), set(ea.kernel_durations)
    assert nb - na == set(sp.RENAMED) | {sp.REMOVED}
    assert na - nb == set(sp.RENAMED.values()) | {sp.ADDED}
    assert nb & na == {sp.UNCHANGED}
    assert ea.renamed == sp.RENAMED and ea.added == [sp.ADDED] and ea.removed == [sp.REMOVED]
    for old, new in sp.RENAMED.items():
        assert old != new and normalise_kernel(old) == normalise_kernel(new)
        assert (eb.kernel_durations[old] == ea.kernel_durations[new]).all()
    assert normalise_kernel(sp.ADDED) != normalise_kernel(sp.REMOVED)
    # the short names nsys would store
    short = dict(sql(eb.paths[0], """SELECT d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                     JOIN StringIds d ON d.id = k.demangledName
                                     JOIN StringIds s ON s.id = k.shortName"""))
    assert short["void gemm<float, 128>(const float *, float *, int)"] == "gemm"
    assert (eb.step_duration == ea.step_duration).all()


def test_none_identical(pairs):
    b, a, eb, ea = pairs["none"]
    assert b.read_bytes() == a.read_bytes()


def test_full_run(tmp_path):
    """Ranks, devices, a copy, an NCCL kernel, noise and a domain."""
    e = sp.iterations_run(tmp_path / "job", steps=4, ranks=2, devices_per_rank=2,
                          nccl_ns=30_000, memcpy_ns=10_000, noise_sd_ns=1_000, seed=1,
                          domain="app", step_range="step")
    assert e.path == tmp_path / "job" and [p.name for p in e.paths] == ["rank0.sqlite",
                                                                          "rank1.sqlite"]
    assert_matches(e)
    assert e.nccl_name in e.kernel_durations
    assert e.kernel_durations["gemm_kernel"].size == 2 * 4 * 2 * sp.LAUNCHES["gemm_kernel"]
    for db in e.paths:
        assert sql(db, "SELECT count(*), sum(end - start), min(bytes) "
                       "FROM CUPTI_ACTIVITY_KIND_MEMCPY") == [(8, 8 * 10_000, 64 << 20)]
        assert sql(db, """SELECT count(*) FROM NVTX_EVENTS n JOIN NVTX_EVENTS d
                          ON d.eventType = 75 AND d.domainId = n.domainId AND d.text = 'app'
                          WHERE n.eventType = 59""") == [(4,)]
    st = e.stats("gemm_kernel")
    assert st["count"] == 64 and st["min"] <= st["median"] <= st["max"] and st["std"] > 0
    assert (e.gpu_idle_ns > 0).all()
    # the all-reduce ends together everywhere, so the ranks' steps coincide
    assert (e.step_start[0] == e.step_start[1]).all() and (e.step_end[0] == e.step_end[1]).all()
    assert (e.job_step_duration == e.step_duration[0]).all()
    ends = {r for db in e.paths for r in sql(db, """SELECT k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'ncclDevKernel%'""")}
    assert len(ends) == e.steps
    assert (e.kernel_durations[e.nccl_name] >= 30_000 - 5 * 1_000).all()
    out = tmp_path / "job.prv"
    assert cli(["-q", str(e.path), str(out)]) == 0
    validate(out)


def test_translates_checks_and_analyzes(pairs, tmp_path):
    b, a, _, _ = pairs["kernel_2x"]
    exe = Path(sys.executable).with_name("nsys2prv")
    out = tmp_path / "before.prv"
    run = subprocess.run([str(exe), "-q", str(b), str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    check = subprocess.run([str(exe), "check", str(out)], capture_output=True, text=True)
    assert check.returncode == 0 and "OK" in check.stdout, check.stdout + check.stderr
    validate(out)
    assert cli(["analyze", str(a)]) == 0


def test_pair_of_jobs(tmp_path):
    """ranks > 1: each side is a directory of rank exports; the change holds on every rank."""
    b, a, eb, ea = sp.pair(tmp_path, "gap_removed", ranks=2, steps=4, nccl_ns=40_000,
                           devices_per_rank=2)
    assert b.is_dir() and a.is_dir() and sorted(p.name for p in b.iterdir()) == [
        "rank0.sqlite", "rank1.sqlite"]
    assert_matches(eb)
    assert_matches(ea)
    drop = 2 * eb.gaps_per_step * sp.GAP_NS  # two devices per rank
    assert (eb.gpu_idle_ns - ea.gpu_idle_ns == drop).all()
