"""The library API: normalised tables with real values, from every layout."""

from __future__ import annotations

import polars as pl
import pytest

import nsys2prv
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import LAYOUTS, write_export

from conftest import corpus_files
from prvtools import sql


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tables_of_the_sample(tmp_path, layout):
    spec = sample_spec()
    report = nsys2prv.open_report(write_export(tmp_path / "s.sqlite", spec, layout))
    k = nsys2prv.tables.kernels(report)
    assert k.height == len(spec.kernels)
    assert sorted(k["short_name"].unique()) == sorted({x.name for x in spec.kernels})
    assert k.filter(pl.col("short_name") == "gemm_kernel")["grid_y"].unique().to_list() == [2]
    m = nsys2prv.tables.memory_operations(report)
    assert (m["operation"] == "memcpy").sum() == len(spec.memcpy)
    assert m.filter(pl.col("operation") == "memset")["bytes"].sum() == sum(
        x.bytes for x in spec.memset)
    api = nsys2prv.tables.cuda_api(report)
    assert api.height == len(spec.api) and set(api["tid"]) == {x.tid for x in spec.api}
    nv = nsys2prv.tables.nvtx(report)
    assert nv.filter(pl.col("kind") == "startend").height == sum(
        x.kind == "startend" for x in spec.nvtx)
    assert set(nv.filter(pl.col("kind") == "pushpop")["domain"].drop_nulls()) == {"model"}
    assert nsys2prv.tables.osrt(report)["name"].to_list() == [x.name for x in spec.osrt]
    assert k.to_pandas().shape[0] == len(spec.kernels)  # pandas at hand
    if layout != "legacy":
        assert report.host == "sample-node" and report.rank == 0
        assert report.schema.layout in ("EXPORT_META_DATA", "META_DATA_EXPORT")


GPU_METRICS = [p for p in corpus_files("exported2023") if "gpumetrics" in p.name]


@pytest.mark.skipif(not GPU_METRICS, reason="the GPU-metrics export of ../shared/corpus is absent")
def test_gpu_metrics_table():
    report = nsys2prv.open_report(GPU_METRICS[0])
    g = nsys2prv.tables.gpu_metrics(report)
    assert g.height == sql(GPU_METRICS[0], "SELECT count(*) FROM GPU_METRICS")[0][0]
    assert "Tensor Active" in set(g["metric_name"])


def test_import_is_light_and_the_entry_points_come_on_use():
    """`import nsys2prv` (and the command line's parent) imports neither polars nor numpy;
    the entry points are the functions of nsys2prv.api, whatever was imported before."""
    import subprocess
    import sys

    code = ("import sys, nsys2prv, nsys2prv.cli; "
            "light = not {'polars', 'numpy'} & set(sys.modules); "
            "import nsys2prv.api, nsys2prv.tables; "
            "print(light, nsys2prv.translate is nsys2prv.api.translate, "
            "nsys2prv.open_report is nsys2prv.api.open_report, "
            "nsys2prv.tables.__name__, sorted(set(nsys2prv.__all__) - set(dir(nsys2prv))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["True", "True", "True", "nsys2prv.tables", "[]"]
    with pytest.raises(AttributeError):
        nsys2prv.no_such_name
