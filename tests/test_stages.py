"""The two stages on their own (prepare / merge) and on Dask: same bytes as one run."""

from __future__ import annotations

import pytest

import nsys2prv
from nsys2prv.cli import main
from nsys2prv.testing.multi import job
from nsys2prv.testing.synth import write_export

from conftest import corpus_files
from prvtools import validate


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    return [write_export(d / f"rank{info.rank}.sqlite", spec, "3.17.1") for info, spec in job()]


def _same(a, b):
    for ext in (".prv", ".pcf", ".row"):
        assert a.with_suffix(ext).read_bytes() == b.with_suffix(ext).read_bytes(), ext


def test_prepare_then_merge_equals_translate(tmp_path, ranks, capsys):
    nsys2prv.translate(ranks, tmp_path / "direct.prv")
    for r in ranks:  # as a SLURM array job would: one prepare per report
        assert main(["prepare", str(r), str(tmp_path / "parts" / r.stem), "-q"]) == 0
    assert main(["merge", str(tmp_path / "parts"), str(tmp_path / "staged.prv"), "-q"]) == 0
    validate(tmp_path / "staged.prv")
    _same(tmp_path / "direct.prv", tmp_path / "staged.prv")
    assert main(["merge", str(tmp_path / "nothing"), str(tmp_path / "x.prv")]) == 1
    assert "not a partial trace" in capsys.readouterr().err
    # a partial of another nsys2prv version (other run-file format) is refused in one line
    import json
    meta_path = tmp_path / "parts" / ranks[0].stem / "partial.json"
    meta = json.loads(meta_path.read_text())
    meta["format"] = 1
    meta_path.write_text(json.dumps(meta))
    assert main(["merge", str(tmp_path / "parts"), str(tmp_path / "old.prv"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "another nsys2prv version (format 1" in err and err.count("\n") == 1
    assert not (tmp_path / "old.prv").exists()


def test_dask_local_cluster_gives_the_same_bytes(tmp_path, ranks):
    distributed = pytest.importorskip("distributed")
    cori = [p for p in corpus_files("exported") if p.name.startswith("cori_omp_run1_rank")]
    inputs = cori if len(cori) == 8 else ranks
    nsys2prv.translate(inputs, tmp_path / "local.prv", jobs=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        done = []
        nsys2prv.translate(inputs, tmp_path / "dask.prv", dask=client,
                           on_report=lambda d, t: done.append(d))
    assert done[-1] == len(inputs)
    _same(tmp_path / "local.prv", tmp_path / "dask.prv")
