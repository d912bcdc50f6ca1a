"""The run on one page (docs/html.md): the SVG pictures drawn right (widths against the
values they show, the heatmap's bands, the flame graph's frames against folded stacks
summed by hand), every text escaped, tables folded with every row in their JSON, the write
atomic, the findings and the utilisation map against the tables and activities they come
from, and the command line's --html on analyze, diff and --scaling."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest

import nsys2prv
from nsys2prv.errors import OutputError
from nsys2prv.page import charts
from nsys2prv.page.document import Section, render, write
from nsys2prv.page.table import Col, table

from conftest import ROOT

SAMPLE = ROOT / "examples" / "sample.sqlite"
SVG = "{http://www.w3.org/2000/svg}"


def _rects(svg: str) -> list[tuple[dict, str]]:
    """(attributes, title) of every rect with a title: the marks of a chart."""
    root = ET.fromstring(svg)
    out = []
    for r in root.iter(f"{SVG}rect"):
        t = r.find(f"{SVG}title")
        if t is not None:
            out.append((r.attrib, t.text or ""))
    return out


def test_stacked_bars_are_as_wide_as_their_values():
    svg = charts.stacked_bars(["a", "b"], [("x", "#000", [1.0, 3.0]), ("y", "#111", [2.0, 0.0])],
                              lambda v: f"{v:g}", "t")
    marks = {title: float(a["width"]) for a, title in _rects(svg)}
    assert set(marks) == {"a: x 1", "a: y 2", "b: x 3"}
    # one scale for all: 1 and 2 stacked are as wide as 3
    assert marks["a: x 1"] + marks["a: y 2"] == pytest.approx(marks["b: x 3"], abs=0.02)
    assert marks["a: y 2"] == pytest.approx(2 * marks["a: x 1"], abs=0.02)


def test_text_of_the_data_is_escaped():
    name = '<script>alert("x")</script> & co'
    svg = charts.stacked_bars([name], [("<b>", "#000", [1.0])], str, "t <i>")
    assert "<script>" not in svg and "<b>" not in svg
    ET.fromstring(svg)  # well formed
    html = table(pl.DataFrame({"name": [name, "</script><script>x()</script>"]}),
                 [Col("name", "name <th>")])
    assert html.count("<script") == 1  # the data's own script element only
    rows = re.search(r'<script type="application/json" class="rows">(.*)</script>', html)[1]
    assert json.loads(rows)[1][0][0] == "</script><script>x()</script>"
    page = render("t <x>", "s & t", [Section("a", "A <b>", "<p>ok</p>")], "gen")
    assert "<x>" not in page and "A &lt;b&gt;" in page


def test_heatmap_bins_rows_into_bands():
    rows = [f"rank {r} / GPU 0" for r in range(100)]
    values = [[r / 100] * 4 for r in range(100)]
    svg = charts.heatmap(rows, values, [0, 10, 20, 30], lambda t: f"{t}", "h", max_rows=10)
    marks = [t for _, t in _rects(svg)]
    assert len(marks) == 10 * 4  # 10 bands of 10 ranks, 4 bins
    # band k holds ranks 10k..10k+9: mean busy (10k + 4.5) %
    for k in range(10):
        assert f"rank {10 * k} / GPU 0 … rank {10 * k + 9} / GPU 0 (10), from 0: busy " \
               f"{10 * k + 4.5:.1f} %" in marks


def test_flame_graph_frames_against_the_stacks():
    folded = pl.DataFrame({"stack": ["main;train;forward", "main;train;backward",
                                     "main;load", "main;train;forward", "idle"],
                           "samples": [4, 3, 2, 1, 10]})
    svg = charts.flame_graph(folded, "f")
    boxes = {t.split(":")[0]: a for a, t in _rects(svg)}
    w = charts.WIDTH / 20  # 20 samples in all
    # summed by hand: main 10 (train 8: forward 5, backward 3; load 2), idle 10
    for name, samples in (("main", 10), ("train", 8), ("forward", 5), ("backward", 3),
                          ("load", 2), ("idle", 10)):
        assert float(boxes[name]["width"]) == pytest.approx(samples * w - 0.5, abs=0.02)
    x = {k: float(a["x"]) for k, a in boxes.items()}
    # side by side in name order (as flamegraph.pl), callees from their caller's left edge
    assert x["idle"] == 0 and x["main"] == pytest.approx(10 * w)
    assert x["load"] == x["main"] and x["train"] == pytest.approx(12 * w)
    assert x["backward"] == x["train"] and x["forward"] == pytest.approx(15 * w)
    y = {k: float(a["y"]) for k, a in boxes.items()}
    assert y["main"] > y["train"] > y["forward"] and y["main"] == y["idle"]
    from nsys2prv.page.sections import samples
    from nsys2prv.run import Tables

    empty = pl.DataFrame({"device": ["job"]})
    frames = {"threads": pl.DataFrame({"samples": [folded["samples"].sum()]}),
              "gap_folded": folded.with_columns(pl.lit("job").alias("device")),
              "self": empty, "inclusive": empty, "modules": empty}
    s = samples(Tables("Where in the code", frames, kind="samples"))
    assert s.id == "samples" and "<svg" in s.body
    assert "Record it with" in samples(None).body
    assert "Record it with" in samples(Tables("Where in the code", {})).body


def test_tables_fold_and_carry_every_row():
    df = pl.DataFrame({"kernel": [f"k{i}" for i in range(50)],
                       "time": [1_000_000 * i for i in range(50)],
                       "share": [i / 50 for i in range(50)]})
    html = table(df, [Col("kernel", "kernel"), Col("time", "time", "ms"),
                      Col("share", "share", "pct")])
    assert html.count("<tr>") == 1 + 20  # the head and the first rows
    rows = json.loads(re.search(r'class="rows">(.*)</script>', html)[1])
    assert len(rows) == 50
    assert rows[7] == [["k7", "k7"], ["7.000 ms", 7_000_000.0, "7000000 ns"],
                       ["14.0 %", 0.14, "0.14"]]
    assert 'title="7000000 ns">7.000 ms</td>' in html
    assert "show 30 more of 30" in html
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>"
    html = table(pl.DataFrame({"kernel": [long]}), [Col("kernel", "kernel")])
    assert f'title="{long}">{long[:59]}…</td>' in html.replace("&lt;", "<").replace(
        "&gt;", ">")


def test_the_page_is_written_whole_or_not_at_all(tmp_path):
    out = tmp_path / "page.html"
    write("old", out)
    with pytest.raises(UnicodeEncodeError):
        write("new \ud800", out)  # fails while writing
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["page.html"]
    with pytest.raises(OutputError, match="does not exist"):
        write("x", tmp_path / "nowhere" / "p.html")
    with pytest.raises(OutputError, match="is a directory"):
        write("x", tmp_path)


@pytest.fixture(scope="module")
def sample_run():
    with nsys2prv.load(SAMPLE) as run:
        run.analysis(iterations="", what_if=[])
        yield run


def test_utilisation_map_against_the_activities(sample_run):
    """Each device's busy time per bin, against the union of its kernels and copies from
    the activities, clipped to the bins by hand."""
    from nsys2prv.analysis.activities import read_activities

    u = sample_run.utilisation()
    a, _ = sample_run.analysis()
    acts = read_activities(sample_run.trace)
    gpu = acts.rows.filter(pl.col("kind") == "gpu").select("row", "device")
    spans = (pl.concat([acts.kernels.select("row", "start", "dur"),
                        acts.memops.select("row", "start", "dur")])
             .join(gpu, on="row").sort("device", "start"))
    for d in a.devices:
        mine = spans.filter(pl.col("device") == d.device)
        union = []  # merged intervals, by hand
        for s, e in zip(mine["start"], mine["start"] + mine["dur"]):
            if union and s <= union[-1][1]:
                union[-1][1] = max(union[-1][1], e)
            else:
                union.append([s, e])
        rows = u.filter(pl.col("device") == d.name).sort("bin")
        want = [sum(max(0, min(e, b1) - max(s, b0)) for s, e in union)
                for b0, b1 in zip(rows["start"], rows["end"])]
        assert rows["busy"].to_list() == want
        assert sum(want) == d.active
    assert u["fraction"].max() <= 1.0 and u["bin"].n_unique() == 120


def test_findings_read_the_tables(sample_run):
    f = sample_run.findings()
    assert f["rank"].to_list() == list(range(1, f.height + 1)) and 1 <= f.height <= 5
    by = {r["section"] + ":" + r["sentence"][:12]: r for r in f.iter_rows(named=True)}
    job = sample_run.idle()["job"].row(0, named=True)
    idle = next(r for r in f.iter_rows(named=True) if r["section"] == "idle")
    assert idle["number"] == round(100 * job["idle"] / job["span"], 1)
    assert f"GPU idle {idle['number']:.1f} %" in idle["sentence"]
    forms = sample_run.efficiency()["forms"].row(0, named=True)
    eff = next(r for k, r in by.items() if k.startswith("efficiency:Device"))
    assert eff["number"] == round(100 * forms["parallel"], 1)
    launches = sample_run.idle()["launches"]
    share = launches["kernel_time"].max() / launches["kernel_time"].sum()
    kern = next(r for k, r in by.items() if k.startswith("kernels:Kernel"))
    assert kern["number"] == round(100 * share, 1)
    # every number is printed in its sentence as the page shows it
    for r in f.iter_rows(named=True):
        text = f"{r['number']:.3f}" if r["unit"] == "ms" else f"{r['number']:.1f}"
        assert text in r["sentence"]


def test_a_run_without_gpu_work_says_so(tmp_path):
    """No GPU finding, no empty chart: the sections say what is missing and how to record
    it; the step (a loop over the trace's time) is still one."""
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export

    spec = sample_spec()
    spec.kernels, spec.memcpy, spec.memset = [], [], []
    export = write_export(tmp_path / "cpu.sqlite", spec)
    with nsys2prv.load(export) as run:
        assert run.findings(iterations=None).height == 0
        assert run.findings()["section"].to_list() == ["steps"]
        html = run.html()
    assert "of the trace&#x27;s time" in html
    assert html.count("No GPU work in this trace") == 2
    assert "Record it with <code>nsys profile -t cuda</code>" in html
    assert '<svg' not in html.split('id="efficiency"')[1].split("</section>")[0]


def test_page_is_deterministic_and_keeps_the_environment_out(sample_run, monkeypatch):
    monkeypatch.setenv("NSYS2PRV_PAGE_SECRET", "xyzzy-4242")
    one = sample_run.html()
    assert one == sample_run.html()
    assert "xyzzy-4242" not in one
    ids = re.findall(r'<section id="([a-z]+)">', one)
    assert ids == ["summary", "efficiency", "utilisation", "idle", "samples", "steps",
                   "layers",
                   "kernels", "critical", "rules"]
    # the sample's environment (recorded in its export) is never on the page
    from nsys2prv.testing.samples import sample_spec

    env = sample_spec().env
    assert env
    for k, v in env.items():
        assert f"{k}={v}" not in one and (len(v) < 6 or v not in one)


def test_jupyter_shows_the_section(sample_run):
    html = sample_run.layers()._repr_html_()
    assert 'class="tbl"' in html and "Every range projected" in html
    html = sample_run.efficiency()._repr_html_()
    assert "<svg" in html and "POP&#x27;s device model" in html
    assert "body{" not in html  # the page's frame is not forced on the notebook


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsys2prv", *args], capture_output=True,
                          text=True)


def test_analyze_html_and_json_agree(tmp_path):
    page = tmp_path / "run.html"
    out = _cli("analyze", str(SAMPLE), "--html", str(page), "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)["findings"]
    html = page.read_text()
    shown = re.findall(r'<li data-number="([^"]+)" data-unit="([^"]*)" '
                       r'data-section="([a-z]+)">', html)
    assert [(float(n), u, s) for n, u, s in shown] == \
        [(f["number"], f["unit"], f["section"]) for f in found]
    # --html adds the steps and the path to the page, not to the JSON's keys
    assert "critical_path" not in json.loads(out.stdout)
    bad = _cli("analyze", str(SAMPLE), "--html", str(tmp_path / "no" / "p.html"))
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "directory does not exist" in bad.stderr
    assert not (tmp_path / "no").exists()


def test_a_trace_s_page_says_the_rules_need_the_reports(tmp_path):
    trace = tmp_path / "s.prv"
    nsys2prv.translate(SAMPLE, trace)
    page = tmp_path / "s.html"
    out = _cli("analyze", str(trace), "--html", str(page))
    assert out.returncode == 0, out.stderr
    assert f"The run on one page: {page}" in out.stdout
    rules = page.read_text().split('<section id="rules">')[1]
    assert "The rules read the exports (.sqlite, .nsys-rep): give the reports" in rules


def test_diff_and_scaling_pages(tmp_path):
    from nsys2prv.testing.scaling import gpu_run
    from nsys2prv.testing.synth_pairs import pair

    before, after, _, _ = pair(tmp_path / "pair", "kernel_2x", steps=6)
    page = tmp_path / "diff.html"
    out = _cli("diff", str(before), str(after), "--html", str(page), "--no-rules")
    assert out.returncode == 0, out.stderr
    html = page.read_text()
    for sid in ("summary", "kernels", "layers", "steps", "memory"):
        assert f'<section id="{sid}">' in html
    paragraph = re.search(r'<p class="para">(.*?)</p>', html)[1]
    c = nsys2prv.compare(before, after, rules=False)
    from html import escape

    assert paragraph == escape(c.paragraph)
    assert "gemm_kernel" in html.split('id="kernels"')[1]
    runs = [gpu_run(n, tmp_path / f"run{n}", metrics=False) for n in (1, 2)]
    spage = tmp_path / "scaling.html"
    out = _cli("analyze", "--scaling", str(tmp_path / "run1"), str(tmp_path / "run2"),
               "--html", str(spage))
    assert out.returncode == 0, out.stderr
    html = spage.read_text()
    assert "POP&#x27;s table across the runs" in html and html.count("<svg") >= 3
    assert len(runs) == 2


def test_notebook_plots_need_no_agg():
    """analysis/plot.py no longer forces matplotlib's backend on import or use."""
    code = ("import matplotlib; matplotlib.use('svg');"
            "from nsys2prv.analysis.plot import pyplot; plt = pyplot();"
            "import matplotlib as m; print(m.get_backend())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "MPLBACKEND": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg"


def test_every_cfg_a_section_names_is_shipped():
    """The views a section tells to open in Paraver exist in cfgs/."""
    text = "".join((ROOT / "nsys2prv" / "page" / f).read_text()
                   for f in ("sections.py", "build.py"))
    names = set(re.findall(r'"((?:analysis|basics|views|hwcounters)/[a-z_0-9]+\.cfg)"', text))
    assert len(names) > 15
    shipped = {str(p.relative_to(ROOT / "cfgs")) for p in (ROOT / "cfgs").rglob("*.cfg")}
    assert names <= shipped, names - shipped
