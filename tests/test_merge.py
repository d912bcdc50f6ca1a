"""Several reports -> one trace: nodes per host, tasks in rank order, clocks aligned."""

from __future__ import annotations

import random
from pathlib import Path
import warnings
from collections import defaultdict

import pytest

import nsys2prv
from nsys2prv.paraver import registry as reg
from nsys2prv.testing.multi import MPI_INIT_END, NCCL_END, job
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export

from conftest import corpus_files
from prvtools import read_prv, sql, validate


def _write_job(tmp_path, layout="3.17.1", **kw):
    paths = []
    for info, spec in job(**kw):
        paths.append(write_export(tmp_path / f"rank{info.rank}.sqlite", spec, layout))
    return paths


def _region_ends(tr, label_type, name):
    """task -> time of the end (0) of the first region `name` of `label_type` on its row 1."""
    labels = tr.pcf_labels(label_type)
    value = next(v for v, n in labels.items() if n == name)
    out, open_ = {}, {}
    for task, thread, time, pairs in tr.events:
        for t, v in pairs:
            if t != label_type:
                continue
            if v == value:
                open_[task] = True
            elif v == 0 and open_.pop(task, False) and task not in out:
                out[task] = time
    return out


def _type_of(tr, label):
    for line in tr.pcf.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[2] == label:
            return int(parts[1])
    raise KeyError(label)


@pytest.mark.parametrize("layout", ["3.17.1", "3.0.0"])
def test_job_on_two_hosts(tmp_path, layout):
    paths = _write_job(tmp_path, layout)
    shuffled = paths[:]
    random.Random(3).shuffle(shuffled)
    result = nsys2prv.translate(shuffled, tmp_path / "job.prv", jobs=1)
    validate(tmp_path / "job.prv")
    model = result.model
    assert model.nodes == ["node-a", "node-b"]
    assert [t.rank for t in model.tasks] == [0, 1, 2, 3]
    assert [t.node for t in model.tasks] == [1, 1, 2, 2]
    tr = read_prv(tmp_path / "job.prv")
    rows_per_task = [len(t.rows) for t in model.tasks]
    assert tr.header.split("_ns:")[1].startswith(
        f"2({sum(rows_per_task[:2])},{sum(rows_per_task[2:])}):1:4(")
    assert "LEVEL NODE SIZE 2\nnode-a\nnode-b\n" in tr.row
    # MPI_Init ends and the NCCL kernel ends happen together on every rank after alignment
    mpi = _region_ends(tr, _type_of(tr, "NVTX push/pop: MPI"), "MPI_Init")
    assert sorted(mpi) == [1, 2, 3, 4] and len(set(mpi.values())) == 1
    nccl = _region_ends(tr, reg.NCCL_KERNEL, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert len(set(nccl.values())) == 1
    assert nccl[1] - mpi[1] == NCCL_END - MPI_INIT_END
    al = result.alignment
    assert al.residual_ns == 0 and al.check_point == "NCCL" and al.check_spread_ns == 0
    infos = {i.rank: i for i, _ in job()}
    errors = {d["host"]: d["sync_correction_ns"] for d in al.details}
    assert errors["node-a"] == 0
    assert errors["node-b"] == -(infos[3].clock_error - infos[0].clock_error)
    assert result.counts["kernels"] == 4 * 6
    # same pid in every report: still one task each
    assert len({(t.report, t.pid) for t in model.tasks}) == 4 and {t.pid for t in model.tasks} \
        == {1000}


def test_session_only_keeps_clock_error(tmp_path):
    paths = _write_job(tmp_path)
    result = nsys2prv.translate(paths, tmp_path / "job.prv", sync=None)
    tr = read_prv(tmp_path / "job.prv")
    mpi = _region_ends(tr, _type_of(tr, "NVTX push/pop: MPI"), "MPI_Init")
    infos = {i.rank: i for i, _ in job()}
    assert mpi[3] - mpi[1] == infos[3].clock_error - infos[0].clock_error
    assert result.alignment.method == "session start"


def test_sync_by_task_and_named_nvtx(tmp_path):
    paths = _write_job(tmp_path)
    result = nsys2prv.translate(paths, tmp_path / "a.prv", sync_by_task=True)
    assert result.alignment.residual_ns == 0 and "per report" in result.alignment.method
    result = nsys2prv.translate(paths, tmp_path / "b.prv", sync_nvtx="MPI_Finalize")
    assert result.alignment.method.startswith("session start + end of nvtx:MPI_Finalize")
    assert result.alignment.residual_ns == 0


def test_parallel_prepare_is_byte_identical(tmp_path):
    paths = _write_job(tmp_path)
    nsys2prv.translate(paths, tmp_path / "one.prv", jobs=1)
    nsys2prv.translate(paths, tmp_path / "two.prv", jobs=2)
    for ext in (".prv", ".pcf", ".row"):
        assert (tmp_path / f"one{ext}").read_bytes() == (tmp_path / f"two{ext}").read_bytes()


def test_reports_without_host_get_a_node_each(tmp_path):
    a = write_export(tmp_path / "a.sqlite", sample_spec(1), "legacy")
    b = write_export(tmp_path / "b.sqlite", sample_spec(1), "legacy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = nsys2prv.translate([a, b], tmp_path / "ab.prv")
    assert result.model.nodes == ["a", "b"]
    assert any("no host name" in str(w.message) for w in caught)
    result = nsys2prv.translate([a, b], tmp_path / "ab2.prv", hosts=["n1", "n1"])
    assert result.model.nodes == ["n1"]
    validate(tmp_path / "ab2.prv")


CORI = corpus_files("exported")
CORI = [p for p in CORI if p.name.startswith("cori_omp_run1_rank")]


@pytest.mark.skipif(len(CORI) != 8, reason="the 8-rank cori set of ../shared/corpus is absent")
def test_cori_eight_ranks(tmp_path):
    shuffled = CORI[:]
    random.Random(1).shuffle(shuffled)
    result = nsys2prv.translate(shuffled, tmp_path / "cori.prv", jobs=2)
    validate(tmp_path / "cori.prv")
    assert result.model.nodes == ["cgpu04"]
    assert [t.rank for t in result.model.tasks] == list(range(8))
    tr = read_prv(tmp_path / "cori.prv")
    per_task = defaultdict(int)
    for task, _, _, pairs in tr.events:
        per_task[task] += sum(1 for t, v in pairs if t == reg.CUDA_KERNEL and v)
    by_rank = {}
    for path in CORI:
        env = sql(path, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name='DeviceEnvironment'")
        rank = int(str(env).split("PMI_RANK=")[1].split(";")[0].split("\\")[0].split("'")[0])
        by_rank[rank] = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert [per_task[r + 1] for r in range(8)] == [by_rank[r] for r in range(8)]


ALCF = [p for p in corpus_files("exported2023") if p.name.startswith("alcf_seqpar_rank")]


@pytest.mark.skipif(len(ALCF) != 2, reason="the alcf ranks of ../shared/corpus are absent")
def test_alcf_two_nodes(tmp_path):
    result = nsys2prv.translate(ALCF, tmp_path / "alcf.prv")
    validate(tmp_path / "alcf.prv")
    assert len(result.model.nodes) == 2
    assert [t.rank for t in result.model.tasks] == [0, 4]
    assert "NCCL" in result.alignment.method
    tr = read_prv(tmp_path / "alcf.prv")
    nccl = _region_ends(tr, reg.NCCL_KERNEL, tr.pcf_labels(reg.NCCL_KERNEL)[1])
    assert len(set(nccl.values())) == 1  # first NCCL kernels end together once aligned


@pytest.mark.parametrize("nbytes", [1, 2, 70])
def test_output_does_not_depend_on_the_format_block_size(tmp_path, monkeypatch, nbytes):
    """Records of one row at one time must stay one multi-event line whatever the formatting
    block size (a cut inside such a group once split them into two lines): blocks of a few
    bytes end after every time."""
    from nsys2prv.pipeline import merge as merge_mod
    paths = _write_job(tmp_path)
    nsys2prv.translate(paths, tmp_path / "big.prv")
    monkeypatch.setattr(merge_mod, "BLOCK_BYTES", nbytes)
    nsys2prv.translate(paths, tmp_path / "small.prv")
    big = (tmp_path / "big.prv").read_bytes()
    assert big == (tmp_path / "small.prv").read_bytes()
    lines = big.decode().splitlines()
    # the job has multi-event lines, so small blocks really had groups to split
    assert sum(1 for ln in lines if ln.startswith("2:") and ln.count(":") > 8) > 10
    validate(tmp_path / "small.prv")


RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


@pytest.mark.parametrize("compress", [False, True])
def test_windowed_merge_is_byte_identical(tmp_path, monkeypatch, compress):
    """Merging time windows in several processes gives the serial merge's bytes: the GPU job
    (multi-event lines, arrows, overlap lanes) and the recorded MPI run (message arrows from
    the merge hook) together."""
    import gzip

    from nsys2prv.pipeline import merge as merge_mod
    paths = _write_job(tmp_path) + sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite"))
    suffix = ".prv.gz" if compress else ".prv"
    serial = nsys2prv.translate(paths, tmp_path / f"one{suffix}", jobs=1)
    monkeypatch.setattr(merge_mod, "WINDOW_RECORDS", 50)
    used = []
    real = merge_mod._write_windows

    def spy(plan, partials, options, windows, *rest):
        used.append(windows)
        return real(plan, partials, options, windows, *rest)

    monkeypatch.setattr(merge_mod, "_write_windows", spy)
    parallel = nsys2prv.translate(paths, tmp_path / f"three{suffix}", jobs=3)
    assert len(used) == 1 and len(used[0]) == 3
    read = gzip.decompress if compress else (lambda b: b)
    one = read((tmp_path / f"one{suffix}").read_bytes())
    assert one == read((tmp_path / f"three{suffix}").read_bytes())
    assert serial.counts == parallel.counts and serial.warnings == parallel.warnings
    assert serial.counts["MPI messages"] == 60
    for ext in (".pcf", ".row"):
        assert (tmp_path / f"one{ext}").read_bytes() == (tmp_path / f"three{ext}").read_bytes()
    assert not list(tmp_path.glob(".nsys2prv-*"))


def test_appended_window_files_land_between_the_writes_around_them(tmp_path, monkeypatch):
    """A window's file is appended in the kernel (copy_file_range) after the header the
    buffered writer still holds and before the text written next; where the system refuses
    the kernel copy, and into a compressed trace, the plain copy gives the same bytes."""
    import errno
    import gzip
    import os
    from nsys2prv.paraver.output import TraceWriter

    part = tmp_path / "window.txt"
    body = b"".join(b"2:1:1:1:1:%d:63000001:%d\n" % (t, t % 7) for t in range(200_000))
    part.write_bytes(body)

    def write(name, compress=False):
        with TraceWriter(tmp_path / name, compress=compress) as w:
            w.begin("#Paraver (01/01/2025 at 00:00):1_ns:0:1:1(1:1)\n", "", "")
            w.write_bytes(b"1:1:1:1:1:0:1:1\n")
            w.copy_file(part)
            w.write_bytes(b"1:1:1:1:1:1:2:0\n")
            w.copy_file(part)
            w.commit()
            return w.bytes_written

    if not hasattr(os, "copy_file_range"):
        pytest.skip("no copy_file_range on this system (Linux only): the plain copy is used")
    calls = []
    real = os.copy_file_range

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(os, "copy_file_range", counted)
    plain_n = write("kernel.prv")
    assert calls  # Linux with a local file system: the kernel copied the windows
    kernel = (tmp_path / "kernel.prv").read_bytes()
    assert kernel.endswith(b"1:1:1:1:1:1:2:0\n" + body) and kernel.count(body) == 2
    assert plain_n == len(kernel)

    def refuse(*a, **k):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    assert write("plain.prv") == plain_n
    assert (tmp_path / "plain.prv").read_bytes() == kernel
    write("z.prv", compress=True)
    assert gzip.decompress((tmp_path / "z.prv.gz").read_bytes()) == kernel
