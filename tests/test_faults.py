"""Bad input, faults and odd data: clear errors, nothing lost, no partial output."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nsys2prv
from nsys2prv.cli import main
from nsys2prv.errors import Nsys2PrvError
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.check import check_trace
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import ApiCall, Kernel, Nvtx, Spec, write_export

from prvtools import read_prv, validate

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli(args, **kw):
    return subprocess.run([sys.executable, "-m", "nsys2prv", *map(str, args)],
                          capture_output=True, text=True, env=ENV, **kw)


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".")
                  and p.name != ".nsys2prv-cache")


def test_empty_export(tmp_path, capsys):
    db = write_export(tmp_path / "empty.sqlite", Spec(), "3.17.1")
    assert main([str(db), str(tmp_path / "e.prv")]) == 1
    err = capsys.readouterr().err
    assert "no data nsys2prv can translate" in err and "empty.sqlite" in err
    assert not list(tmp_path.glob("e.*")) and _leftovers(tmp_path) == []


def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_write_failure_leaves_nothing_and_keeps_old_output(tmp_path):
    db = write_export(tmp_path / "s.sqlite", sample_spec(8), "3.17.1")
    out = tmp_path / "out"
    out.mkdir()
    old = out / "t.prv"
    old.write_text("previous trace\n")
    proc = _cli([db, old, "-j", "1"], preexec_fn=_limit_file_size)
    assert proc.returncode == 1, proc.stderr
    assert "file size limit" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert old.read_text() == "previous trace\n"
    assert sorted(p.name for p in out.iterdir()) == ["t.prv"]


def test_interrupt_cleans_up(tmp_path):
    db = write_export(tmp_path / "s.sqlite", sample_spec(100), "3.17.1")
    out = tmp_path / "out"
    out.mkdir()
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen([sys.executable, "-m", "nsys2prv", str(db), str(out / "t.prv"),
                                 "-j", "1", "--chunk-rows", "1", "--spill-rows", "20"], env=ENV,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and not any(out.glob(".nsys2prv-work-*")):
            time.sleep(0.01)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0:
            pytest.skip("the translation finished before the signal arrived")
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        left = sorted(p.name for p in out.iterdir())
        # nothing, or (signal after the final rename) the complete trace and nothing else
        assert left in ([], ["t.pcf", "t.prv", "t.row"]), left
        if left:
            assert check_trace(out / "t.prv").ok
            for p in out.iterdir():
                p.unlink()


def test_inputs_are_never_modified(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    db = write_export(d / "s.sqlite", sample_spec(2), "3.17.1")
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    stat = db.stat()
    db.chmod(0o444)
    d.chmod(0o555)
    try:
        nsys2prv.translate(db, tmp_path / "t.prv")
    finally:
        d.chmod(0o755)
    assert sorted(p.name for p in d.iterdir()) == ["s.sqlite"]  # no journal, no cache
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    assert db.stat().st_mtime_ns == stat.st_mtime_ns


def _odd_spec() -> Spec:
    spec = Spec(processes=[(7, "odd")], threads=[(7, 7, "odd")], gpus=[(0, "GPU")])
    spec.api += [ApiCall(1000, 2000, 7, 7, "cudaLaunchKernel", 1),
                 ApiCall(3000, 3500, 7, 7, "cudaLaunchKernel", 1),  # duplicate correlation
                 ApiCall(4000, 3900, 7, 7, "cudaLaunchKernel", 2)]  # ends before it starts
    spec.kernels += [Kernel(2500, 2500, 7, 0, 7, "zero\nlength:kernel\twith tabs", 1),
                     Kernel(5000, 4000, 7, 0, 7, "backwards", 2),
                     Kernel(6000, 7000, 7, 0, 7, "orphan", 99),  # no API call
                     Kernel(6500, 8000, 7, 0, 7, "overlaps orphan", 98,
                            grid=(2**31, 1, 1))]  # beyond int32, on one stream
    spec.nvtx += [Nvtx(900, None, 7, 7, "pushpop", "never closed"),
                  Nvtx(1000, 1200, 7, 7, "pushpop", None),
                  Nvtx(1100, 1050, 7, 7, "startend", "backwards range")]
    return spec


def test_odd_data_is_translated_and_counted(tmp_path):
    db = write_export(tmp_path / "odd.sqlite", _odd_spec(), "3.17.1")
    result = nsys2prv.translate(db, tmp_path / "odd.prv")
    validate(tmp_path / "odd.prv")
    w = result.warnings
    assert w["CUDA API calls: duplicate correlation ids (the first call is used)"] == 1
    assert w["CUDA API calls: end before start (made zero-length)"] == 1
    assert w["kernels: end before start (made zero-length)"] == 1
    assert w["NVTX ranges: unterminated (end set to the end of the report)"] == 1
    assert result.counts["kernels without a matching CUDA call"] == 2
    assert result.counts["gpu_activities_on_overlap_lanes"] == 1
    tr = read_prv(tmp_path / "odd.prv")
    labels = tr.pcf_labels(reg.CUDA_KERNEL)
    assert "zero length:kernel with tabs" in labels.values()
    assert tr.nonzero(reg.CUDA_KERNEL) == 4
    assert 2**31 in tr.values(reg.CUDA_KERNEL_BLOCKS)  # 64-bit values stay in the body


def test_invalid_utf8_names(tmp_path):
    db = write_export(tmp_path / "u.sqlite", sample_spec(1), "3.17.1")
    con = sqlite3.connect(db)
    con.execute("UPDATE StringIds SET value = CAST(x'67656d6dff5f6b65726e656c' AS TEXT) "
                "WHERE value = 'gemm_kernel'")
    con.commit()
    con.close()
    nsys2prv.translate(db, tmp_path / "u.prv")
    validate(tmp_path / "u.prv")
    labels = read_prv(tmp_path / "u.prv").pcf_labels(reg.CUDA_KERNEL).values()
    assert "gemm\\ufffd_kernel" in labels  # the invalid byte, shown as an ASCII escape


names = st.one_of(st.none(), st.text(min_size=0, max_size=12),
                  st.sampled_from(["a\nb", "x:y", "t\tab", "nccl_x", "   ", ""]))
times = st.integers(min_value=-5_000, max_value=5_000_000)


@st.composite
def specs(draw):
    spec = Spec(processes=[(5, "p")], threads=[(5, 5, "p"), (5, 6, "w")],
                gpus=[(0, "G"), (1, "G")])
    n = draw(st.integers(0, 25))
    for i in range(n):
        s = draw(times)
        spec.api.append(ApiCall(s, s + draw(st.integers(-100, 10_000)), 5,
                                draw(st.sampled_from([5, 6])),
                                draw(st.sampled_from(["cudaLaunchKernel", "cudaMemcpy",
                                                      "cuLaunchKernel", "weird name"])),
                                draw(st.integers(0, 30))))
        k = draw(times)
        spec.kernels.append(Kernel(k, k + draw(st.integers(-10, 50_000)), 5,
                                   draw(st.sampled_from([0, 1])), draw(st.sampled_from([7, 13])),
                                   draw(names) or "k", draw(st.integers(0, 30)),
                                   grid=(draw(st.integers(0, 2**40)), 1, 1)))
    for i in range(draw(st.integers(0, 15))):
        s = draw(times)
        end = draw(st.one_of(st.none(), st.integers(s - 100, s + 100_000)))
        spec.nvtx.append(Nvtx(s, end, 5, draw(st.sampled_from([5, 6])),
                              draw(st.sampled_from(["pushpop", "startend", "mark"])),
                              draw(names), draw(st.sampled_from([None, "d1", "d:2"]))))
    return spec


@settings(max_examples=int(os.environ.get("NSYS2PRV_FUZZ_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(specs(), st.sampled_from(["legacy", "3.0.0", "3.17.1"]))
def test_fuzz_random_exports(tmp_path_factory, spec, layout):
    d = tmp_path_factory.mktemp("fuzz")
    db = write_export(d / "f.sqlite", spec, layout)
    try:
        result = nsys2prv.translate(db, d / "f.prv")
    except Nsys2PrvError as e:  # only a clean, explained refusal is acceptable
        assert str(e) and "\n" not in str(e)
        assert not list(d.glob("f.p*")) and not list(d.glob(".nsys2prv-work-*"))
        return
    rep = check_trace(d / "f.prv")
    assert rep.ok, rep.errors
    assert rep.event_counts.get(reg.CUDA_CALL, 0) == len(spec.api)
    assert rep.event_counts.get(reg.CUDA_KERNEL, 0) + rep.event_counts.get(
        reg.NCCL_KERNEL, 0) == len(spec.kernels)
    assert rep.event_counts.get(reg.NVTX_MARK, 0) == sum(n.kind == "mark" for n in spec.nvtx)
    assert result.counts.get("kernels", 0) == len(spec.kernels)
