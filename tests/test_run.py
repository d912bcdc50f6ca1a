"""The library's front door (`nsys2prv.load` -> `Run`): every analysis of the command line
is a method returning polars frames, with the numbers the command line prints (its --json
is compared with the methods' frames), on a synthetic 2-rank run and on a corpus export."""

from __future__ import annotations

import json

import polars as pl
import pytest

import nsys2prv
from conftest import CORPUS
from nsys2prv.cli import main
from nsys2prv.errors import InputError, UsageError
from nsys2prv.testing.synth_layers import layers_run


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A 2-rank run (its reports and its trace) whose layers and steps are known."""
    d = tmp_path_factory.mktemp("run")
    truth = layers_run(d / "reports", ranks=2, steps=6, layers=4, slow={(1, 3, 2): 3.0})
    reports = sorted(str(p) for p in truth.path.glob("*.sqlite"))
    trace = d / "job.prv"
    nsys2prv.translate(reports, str(trace))
    return truth, reports, trace


def _cli_json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def _rows(df: pl.DataFrame) -> list[dict]:
    return json.loads(json.dumps(df.to_dicts(), default=str))


def test_every_method_equals_the_cli_json(job, capsys):
    """analyze --json --iterations --modality --critical-path against the run's methods."""
    truth, reports, trace = job
    out = _cli_json(capsys, "analyze", str(trace), "--json", "--iterations", "--modality",
                    "--critical-path")
    run = nsys2prv.load(trace)
    eff = run.efficiency()
    forms = {r["form"]: r for r in eff["forms"].to_dicts()}
    assert forms["talp"] == out["talp"] and forms["nccl"] == out["nccl"]
    assert eff["devices"]["useful_talp"].to_list() == [d["useful_talp"] for d in out["devices"]]
    assert eff["devices"]["level1"].to_list() == [d["levels"][1] for d in out["devices"]]
    idle = run.idle()
    job_causes = {c[len("cause."):]: v for c, v in idle["job"].row(0, named=True).items()
                  if c.startswith("cause.") and v is not None}
    assert job_causes == out["idle"]["job"]["causes"]
    assert idle["gaps"].height == len(out["idle"]["top"])
    assert run.launches()["count"].to_list() == [k["count"] for k in out["idle"]["launches"]]
    steps = run.steps()
    assert _rows(steps["steps"]) == out["iterations"]["steps"]
    assert steps.paragraph == out["iterations"]["paragraph"]
    assert _rows(run.modality()) == out["modality"]
    cp = run.critical_path()
    assert _rows(cp["by_category"]) == out["critical_path"]["by_category"]
    lay = run.layers()
    assert _rows(lay["layers"]) == out["layers"]["layers"]
    assert _rows(lay["instances"]) == out["layers"]["projection"]["instances"]
    assert _rows(lay["outliers"]) == out["layers"]["outliers"]
    # the trace was read once per set of options, not once per method
    assert len(run._cache) <= 4


def test_reports_and_their_trace_give_the_same_numbers(job):
    """A run loaded from its reports (translated as they are read) equals its trace."""
    truth, reports, trace = job
    with nsys2prv.load(reports) as from_reports:
        a = from_reports.layers()["layers"]
        b = nsys2prv.load(trace).layers()["layers"]
        assert a.equals(b)
        e = from_reports.efficiency()["devices"]
        assert e.drop("name").equals(nsys2prv.load(trace).efficiency()["devices"].drop("name"))
    assert from_reports._workdir is None  # closed: its temporary files removed


def test_tables_render_convert_and_plot(job, tmp_path):
    truth, reports, trace = job
    lay = nsys2prv.load(trace).layers()
    html = lay._repr_html_()  # the page's section (page.sections), its tables folded
    assert "<h3>Layers on the GPU</h3>" in html and "Per layer</h3>" in html
    assert html.count('<span class="count">4 rows</span>') >= 1
    assert set(lay) >= {"instances", "names", "layers", "per_step", "outliers"}
    pdf = lay.to_pandas()["layers"]
    assert list(pdf["layer"]) == lay["layers"]["layer"].to_list()
    png = lay.plot(tmp_path / "layers.png")
    assert png.exists() and png.stat().st_size > 1000
    fig = lay.plot()
    assert fig.axes  # a figure to show in a notebook
    assert "layers: numbered: layer_#" in repr(lay)
    with pytest.raises(KeyError, match="no table 'nope'"):
        lay["nope"]


def test_window_translate_and_compare(job, tmp_path, capsys):
    """window() cuts the run, translate() writes its trace, compare() is `diff`."""
    truth, reports, trace = job
    run = nsys2prv.load(reports)
    out = run.translate(tmp_path / "copy.prv")
    assert out.exists() and out.with_suffix(".pcf").exists()
    first = run.window("ProfilerStep#0")
    assert first.span is not None
    inst = first.layers()["instances"]  # the first step's ranges, on both ranks
    assert inst.filter(pl.col("name") == "layer_0").height == 2
    assert inst.filter(pl.col("name").str.starts_with("layer_")).height == 2 * truth.layers
    other = nsys2prv.load(trace)
    c = run.compare(other, rules=False)
    cli = _cli_json(capsys, "diff", str(truth.path), str(trace), "--json", "--no-rules")
    assert c.paragraph == cli["paragraph"] and c.paragraph.startswith("Elapsed")
    assert "layers" in c and c["layers"]["delta"].abs().sum() == 0  # the same run
    assert _rows(c["kernels"]) == cli["tables"]["kernels"]


def test_scaling_equals_the_cli(job, capsys, tmp_path):
    truth, reports, trace = job
    one = tmp_path / "one.prv"
    nsys2prv.translate([reports[0]], str(one))
    out = _cli_json(capsys, "analyze", "--scaling", str(one), str(trace), "--json")
    table = nsys2prv.scaling([nsys2prv.load(one), nsys2prv.load(trace)])
    assert table["runs"]["devices"].to_list() == [c["devices"] for c in out] == [1, 2]
    assert table["runs"]["talp.parallel"].to_list() == [c["talp"]["parallel"] for c in out]


def test_kernel_metrics_and_rules_on_a_corpus_export(capsys):
    export = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"
    if not export.exists():
        pytest.skip(f"corpus export {export.name} not found under {CORPUS}")
    run = nsys2prv.load(export)
    km = run.kernel_metrics()
    out = _cli_json(capsys, "analyze", str(export), "--json", "--no-idle")
    assert _rows(km["rates"]) == out["kernel_metrics"]["rates"]
    rules = run.rules("gpu_time_util")
    assert list(rules) == ["gpu_time_util"]
    assert rules["gpu_time_util"].height >= 1


def test_load_says_what_is_wrong_in_one_line(job, tmp_path):
    truth, reports, trace = job
    with pytest.raises(InputError, match="no such file"):
        nsys2prv.load(tmp_path / "missing.sqlite")
    with pytest.raises(UsageError, match="either one trace"):
        nsys2prv.load([str(trace), reports[0]])
    with pytest.raises(UsageError, match="--filter-nvtx needs the reports"):
        nsys2prv.load(trace, window="ProfilerStep#0")
    with pytest.raises(UsageError, match="load the reports"):
        nsys2prv.load(trace).rules()
    with pytest.raises(InputError, match="--layers: no projected NVTX range named 'x_y'"):
        nsys2prv.load(trace).layers("x_y")
