"""`nsys2prv diff`: the comparison of two runs, checked against the source databases.

Per-kernel, per-category and per-NVTX numbers are computed here again from the exports with
sqlite3 and Python's statistics module (independently of polars and of the trace); the tests
themselves (Mann-Whitney U, bootstrap) against brute-force enumeration; the CLI for its
outputs, gate and one-line errors.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from nsys2prv.analysis import diff as D
from nsys2prv.analysis.activities import read_activities
from nsys2prv.analysis.stats import bootstrap_median_difference, compare_samples, mann_whitney

from conftest import CORPUS, ROOT, need_exports

SAMPLE = ROOT / "examples" / "sample.sqlite"
BEFORE = CORPUS / "sqlite" / "nsysai_mfu2gpu_before.sqlite"
AFTER = CORPUS / "sqlite" / "nsysai_mfu2gpu_after.sqlite"


@pytest.fixture(scope="module")
def real_pair(tmp_path_factory):
    need_exports(BEFORE, AFTER)
    return D.compare(str(BEFORE), str(AFTER), workdir=tmp_path_factory.mktemp("diff"))


def _kernels_sql(db: Path) -> dict[str, list[int]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out: dict[str, list[int]] = {}
    for name, dur in con.execute(
            "SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName"):
        out.setdefault(name, []).append(dur)
    con.close()
    return out


def test_kernel_table_equals_the_exports(real_pair):
    """Every kernel (demangled name): count, total, mean, median, min, max and sample std of
    each side equal the export's CUPTI_ACTIVITY_KIND_KERNEL rows."""
    k = real_pair.kernels
    for side, db in (("before", BEFORE), ("after", AFTER)):
        want = _kernels_sql(db)
        got = k.filter(pl.col(f"count_{side}") > 0)
        assert got.height == len(want)
        for row in got.iter_rows(named=True):
            assert row["matched_by"] == "exact"  # the pair shares every kernel name
            durs = want[row["kernel"]]
            assert row[f"count_{side}"] == len(durs)
            assert row[f"total_{side}"] == sum(durs)
            assert row[f"min_{side}"] == min(durs) and row[f"max_{side}"] == max(durs)
            assert row[f"median_{side}"] == pytest.approx(statistics.median(durs))
            assert row[f"mean_{side}"] == pytest.approx(statistics.fmean(durs))
            std = statistics.stdev(durs) if len(durs) > 1 else 0.0
            assert row[f"std_{side}"] == pytest.approx(std, rel=1e-9, abs=1e-6)
    assert (k["delta"] == k["total_after"] - k["total_before"]).all()
    # sorted by the absolute change, largest first
    assert k["delta"].abs().to_list() == sorted(k["delta"].abs().to_list(), reverse=True)


def test_categories_add_up_and_equal_the_exports(real_pair):
    c = real_pair.categories
    for side, db in (("before", BEFORE), ("after", AFTER)):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        kern = dict(con.execute(
            "SELECT s.value LIKE 'nccl%', SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k"
            " JOIN StringIds s ON s.id = k.shortName GROUP BY 1").fetchall())
        memcpy = dict(con.execute(
            "SELECT e.label, SUM(m.end - m.start) FROM CUPTI_ACTIVITY_KIND_MEMCPY m "
            "JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind GROUP BY 1").fetchall())
        memset = con.execute("SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_MEMSET") \
            .fetchone()[0]
        con.close()

        def total(cat: str, detail: str = "") -> int:
            return int(c.filter((pl.col("category") == cat) & (pl.col("detail") == detail))
                       [f"total_{side}"].sum())
        assert total("compute kernels") == kern[0]
        assert total("NCCL kernels") == kern[1]
        assert total("memset") == memset
        assert sum(total("memcpy", d) for d in c.filter(pl.col("category") == "memcpy")
                   ["detail"]) == sum(memcpy.values())
        # the kernel table's totals add up to the two kernel categories
        assert int(real_pair.kernels[f"total_{side}"].sum()) == kern[0] + kern[1]


def test_nvtx_table_equals_the_exports(real_pair):
    """Range counts and times per side equal NVTX_EVENTS' push/pop and start/end ranges."""
    for side, db in (("before", BEFORE), ("after", AFTER)):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        n, t = con.execute("SELECT COUNT(*), SUM(end - start) FROM NVTX_EVENTS WHERE "
                           "end IS NOT NULL AND eventType IN (59, 60, 70, 71)").fetchone()
        con.close()
        assert int(real_pair.nvtx[f"count_{side}"].sum()) == n
        assert int(real_pair.nvtx[f"total_{side}"].sum()) == t


def test_real_pair_models_devices_rules(real_pair):
    c = real_pair
    assert c.devices is not None and c.devices.height == 2  # 2 GPUs a side
    metrics = c.models["metric"].to_list()
    assert "talp.parallel" in metrics and "nccl.orchestration" in metrics
    assert "host.offload" in metrics
    an = c.before.analysis
    pe = c.models.filter(pl.col("metric") == "talp.parallel").row(0, named=True)
    assert pe["before"] == pytest.approx(an.talp.parallel)
    idle = c.categories.filter(pl.col("category") == "GPU idle")
    assert int(idle["total_before"][0]) == sum(g.idle for g in an.devices)
    assert c.rules is not None and set(c.rules["rule"]) >= {"gpu_gaps", "cuda_api_sync"}
    # no step range in this pair (ranges carry ids, not a loop counter): one sample a side
    assert c.iterations is None
    assert c.verdict.verdict == "noise cannot be judged" and c.verdict.p is None
    assert "noise cannot be judged" in c.paragraph
    assert "flash_fwd_kernel" in c.paragraph  # the kernel whose time moved most


# ------------------------------------------------------------------ the tests --

def _brute_p(x, y) -> float:
    """Two-sided exact p of U by enumerating every split of the pooled values."""
    pooled = list(x) + list(y)
    n1 = len(x)
    u_obs, _ = mann_whitney(np.array(x), np.array(y))
    mu = n1 * len(y) / 2
    extreme = total = 0
    for idx in itertools.combinations(range(len(pooled)), n1):
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in idx]
        u = sum((a > b) + 0.5 * (a == b) for a in xs for b in ys)
        total += 1
        extreme += abs(u - mu) >= abs(u_obs - mu) - 1e-9
    return extreme / total


@pytest.mark.parametrize("x,y", [([1, 2, 3], [4, 5, 6]), ([1, 5, 9, 13], [2, 3, 4, 20, 21]),
                                 ([3.1, 0.2, 7.7, 5.5], [6.6, 9.9, 8.8, 1.1])])
def test_mann_whitney_exact_equals_enumeration(x, y):
    assert mann_whitney(np.array(x), np.array(y))[1] == pytest.approx(_brute_p(x, y))


def test_mann_whitney_u_and_normal_approximation():
    x = np.arange(60, dtype=float)
    y = np.arange(60, dtype=float) + 0.5
    u, p = mann_whitney(x, y)
    assert u == sum((a > b) for a in x for b in y)
    assert 0.5 < p <= 1.0  # shifted by half a step out of 60: no evidence
    u, p = mann_whitney(x, x + 100)
    assert u == 0 and p < 1e-12


def test_verdicts():
    rng = np.random.default_rng(3)
    base = rng.normal(100, 2, 20)
    assert compare_samples(base, base * 1.10).verdict == "slower"
    assert compare_samples(base, base * 0.90).verdict == "faster"
    same = compare_samples(base, rng.normal(100, 2, 20))
    assert same.verdict == "no change beyond noise" and same.p > 0.05
    one = compare_samples(np.array([100.0]), np.array([101.0]))
    assert one.verdict == "noise cannot be judged" and one.change == pytest.approx(0.01)
    lo, hi = bootstrap_median_difference(base, base + 10)
    assert 0 < lo <= 10 <= hi  # each side resampled on its own: an interval around +10
    assert bootstrap_median_difference(base, base * 1.1) == \
        bootstrap_median_difference(base, base * 1.1)  # seeded


@pytest.mark.parametrize("a,b", [
    ("void gemm<float, 128>(float *, int)", "void gemm<float, 256>(float *, int)"),
    ("triton_poi_fused_add_0", "triton_poi_fused_add_1"),
    ("sm80_xmma_gemm_128x64x32_stage3", "sm80_xmma_gemm_64x64x32_stage3"),
])
def test_normalised_names_match(a, b):
    assert D.normalise_kernel(a) == D.normalise_kernel(b)
    m = D._match_names({a, "kept"}, {b, "kept"})
    assert m["kept"] == ("kept", "exact")
    assert m[a][1] == m[b][1] == "normalised" and m[a][0] == m[b][0]


def test_different_kernels_stay_apart():
    assert D.normalise_kernel("gemm_kernel") != D.normalise_kernel("gemv_kernel")
    m = D._match_names({"conv2d_fwd"}, {"conv3d_fwd"})
    assert m["conv2d_fwd"] == ("conv2d_fwd", "removed")
    assert m["conv3d_fwd"] == ("conv3d_fwd", "added")


# ------------------------------------------------------------------ the sample --

@pytest.fixture(scope="module")
def sample_trace(tmp_path_factory) -> Path:
    import nsys2prv

    out = tmp_path_factory.mktemp("sample") / "sample.prv"
    nsys2prv.translate(SAMPLE, out)
    return out


def test_sample_iterations_and_identity(sample_trace, tmp_path):
    """An export against its own trace: nothing changes, the loop 'iteration N' is found,
    each instance's duration equals the export's range."""
    c = D.compare(str(SAMPLE), str(sample_trace), workdir=tmp_path)
    assert c.iterations is not None and c.iterations.picked
    assert c.iterations.name == "iteration #"
    con = sqlite3.connect(f"file:{SAMPLE}?mode=ro", uri=True)
    durs = [d for (d,) in con.execute(
        "SELECT n.end - n.start FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
        "WHERE s.value LIKE 'iteration %' ORDER BY n.start")]
    con.close()
    assert c.iterations.before["duration"].to_list() == durs
    assert c.verdict.verdict == "no change beyond noise"
    assert (c.kernels["delta"] == 0).all() and (c.categories["delta"] == 0).all()
    assert c.rules is not None and c.rules["after"].null_count() == c.rules.height


def test_window_on_a_trace_side(sample_trace, tmp_path):
    """--filter-nvtx on a .prv side: the range is looked up in the trace; the same window of
    the export gives the same numbers."""
    c = D.compare(str(SAMPLE), str(sample_trace), window="iteration 2", workdir=tmp_path,
                  models=False, rules=False)
    assert c.before.elapsed == c.after.elapsed
    assert (c.kernels["delta"] == 0).all()
    assert int(c.kernels["count_before"].sum()) > 0
    acts = read_activities(sample_trace)
    r = acts.named_ranges().filter(pl.col("name") == "iteration 2").row(0, named=True)
    assert c.before.elapsed == r["dur"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsys2prv", "diff", *args],
                          capture_output=True, text=True)


def test_cli_outputs_and_gate(sample_trace):
    text = _cli(str(SAMPLE), str(sample_trace), "--no-rules")
    assert text.returncode == 0, text.stderr
    assert "iterations: 'iteration #'" in text.stdout and "gemm_kernel" in text.stdout
    js = _cli(str(SAMPLE), str(sample_trace), "--json", "--no-rules")
    d = json.loads(js.stdout)
    assert d["verdict"]["verdict"] == "no change beyond noise"
    assert {"kernels", "nvtx", "categories", "models"} <= set(d["tables"])
    csv = _cli(str(SAMPLE), str(sample_trace), "--csv", "--no-rules")
    lines = csv.stdout.splitlines()
    assert lines[0] == "table,key,metric,before,after"
    gemm = [r for r in d["tables"]["kernels"] if r["short"] == "gemm_kernel"][0]
    import csv as csvmod
    rows = list(csvmod.reader(lines))
    assert ["kernels", gemm["kernel"], "total", str(gemm["total_before"]),
            str(gemm["total_after"])] in rows
    gate = _cli(str(SAMPLE), str(sample_trace), "--fail-if-slower", "5", "--no-rules")
    assert gate.returncode == 0 and "pass" in gate.stderr


def test_cli_errors(sample_trace, tmp_path):
    missing = _cli(str(tmp_path / "nope.sqlite"), str(SAMPLE))
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "before side" in missing.stderr
    foreign = tmp_path / "other.prv"
    foreign.write_text("#Paraver (01/01/2020 at 00:00):10_ns:1(1):1:1(1:1)\n")
    bad = _cli(str(SAMPLE), str(foreign))
    assert bad.returncode == 1 and "after side" in bad.stderr and "nsys2prv" in bad.stderr
    no_range = _cli(str(SAMPLE), str(sample_trace), "--filter-nvtx", "nosuchrange")
    assert no_range.returncode == 1 and "before side" in no_range.stderr
    assert no_range.stderr.count("\n") == 1
    no_it = _cli(str(SAMPLE), str(sample_trace), "--iterations", "nosuchrange", "--no-rules")
    assert no_it.returncode == 1 and "before side" in no_it.stderr


def test_cli_trace_of_both_runs(sample_trace, tmp_path):
    """`diff --trace both.prv`: one trace of two applications, each the run's window (here
    'iteration 2' of the sample on both sides), valid for `nsys2prv check`; a side given as
    a trace cannot be translated again (one-line error, nothing written)."""
    from nsys2prv.paraver.check import check_trace
    from nsys2prv.paraver.read import read_layout

    both = tmp_path / "both.prv"
    r = _cli(str(SAMPLE), str(SAMPLE), "--no-rules", "--no-idle", "--filter-nvtx",
             "iteration 2", "--trace", str(both))
    assert r.returncode == 0, r.stderr
    assert f"wrote {both}: application 1 = before, 2 = after" in r.stdout
    assert check_trace(both).ok
    rows = read_layout(both).rows
    assert rows["appl"].unique().sort().to_list() == [1, 2]
    acts = read_activities(sample_trace)
    it2 = acts.named_ranges().filter(pl.col("name") == "iteration 2").row(0, named=True)
    assert read_layout(both).end == it2["dur"]  # both windows start at 0, same length
    bad = tmp_path / "bad.prv"
    r = _cli(str(SAMPLE), str(sample_trace), "--no-rules", "--trace", str(bad))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--trace needs" in r.stderr
    assert not bad.exists()


def test_text_columns_hold_a_thousand_gpus(sample_trace, tmp_path):
    """The text tables keep their columns apart at the totals of a big job (a diff of two
    1,024-rank jobs printed '0.000-508728.000'): every time column of the sample's comparison
    scaled by 10^5 (hundreds of seconds summed over devices) still has blanks between numbers."""
    import dataclasses
    import re

    from nsys2prv.cli.diff import format_text

    c = D.compare(str(SAMPLE), str(sample_trace), workdir=tmp_path, rules=False)

    def scaled(df):
        return df.with_columns(
            [(pl.col(n) * 100_000 * (1 if n.endswith("before") else -1)).alias(n)
             for n, t in df.schema.items()
             if t.is_numeric() and not n.startswith(("count", "ratio", "index"))
             and n not in ("before", "after", "delta")])

    big = dataclasses.replace(c, kernels=scaled(c.kernels), nvtx=scaled(c.nvtx),
                              categories=scaled(c.categories))
    text = format_text(big)
    assert "-" in text and re.search(r"\d{6}\.\d{3}", text)  # the numbers are that big
    assert not re.search(r"\.\d{3}[-\d]", text), text
    # a kernel hundreds of times longer (a diff of two 10M runs printed '14693.150483.910')
    for factor in (483.91, 48391.0):
        grown = dataclasses.replace(big, kernels=big.kernels.with_columns(
            pl.lit(factor).alias("ratio")))
        text = format_text(grown)
        assert re.search(r"\.\d{3} +(483\.9|4\.84e\+04)  ", text), text
        assert not re.search(r"\.\d{3}[-\d]", text), text


@pytest.mark.parametrize("window", [None, "iteration 2", "2ms/9ms"])
def test_trace_of_both_equals_translate_applications(tmp_path, window):
    """`diff --trace` merges both runs from the partials its sides were read from: the
    .prv, .pcf and .row equal `translate_applications` of the reports (which prepares
    them again), whole and with an NVTX or a time window; a side of 4 rank exports."""
    from nsys2prv.api import translate_applications
    from nsys2prv.testing.multi import job
    from nsys2prv.testing.synth import write_export

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for info, spec in job(ranks=4):
        write_export(ranks / f"rank{info.rank}.sqlite", spec)
    if window == "iteration 2":
        before, after = str(SAMPLE), str(SAMPLE)
    else:
        before, after = str(SAMPLE), str(ranks)
    both, ref = tmp_path / "both.prv", tmp_path / "ref.prv"
    D.compare(before, after, window=window, workdir=tmp_path, rules=False, idle=False,
              trace=both)
    translate_applications([before, after], ref, window=window)
    for ext in (".prv", ".pcf", ".row"):
        assert both.with_suffix(ext).read_bytes() == ref.with_suffix(ext).read_bytes(), ext
    assert not list(tmp_path.glob("nsys2prv-diff-*"))  # the sides' partials are gone


def test_two_processes_give_the_same_comparison(real_pair, tmp_path):
    """The sides read in two processes (what large inputs get: each prepares its reports and
    runs nsys' rules in a process of its own, then analyses) give what one process gives,
    and leave no partial behind; a side given as a trace has no rules."""
    work = tmp_path / "work"
    work.mkdir()
    two = D.compare(str(BEFORE), str(AFTER), workdir=work, parallel=True)
    assert two.to_dict() == real_pair.to_dict()
    assert two.rules is not None and two.rules.height
    assert list(work.iterdir()) == []
    trace = tmp_path / "before.prv"
    import nsys2prv

    nsys2prv.translate([str(BEFORE)], str(trace))
    mixed = D.compare(str(trace), str(AFTER), workdir=work, parallel=True)
    assert mixed.before.rules is None and mixed.after.rules
    assert mixed.kernels.equals(real_pair.kernels)



@pytest.mark.parametrize("pair, block", [("corpus", 1 << 18), ("sample", 997)])
def test_the_sides_gpu_activities_are_read_a_bucket_at_a_time(tmp_path, monkeypatch, pair,
                                                             block):
    """Each side keeps its kernels and memory operations on disk (as `analyze` does) and
    the comparison reads them a bucket at a time (`kernel_memop_chunks`: never all at
    once), summing over the buckets what it summed over all: every table equals that of
    the same sides with their activities held in memory. The traces are read in small
    windows, so that each side has many buckets; the sample's loop gives the per-step
    tables. The kernels' medians are summed a few names at a time (batches of 5 kernels
    here), from files in the side's store."""
    import dataclasses

    import nsys2prv
    from nsys2prv.analysis import stats
    from nsys2prv.analysis.activities import Activities, StoredActivities
    from nsys2prv.paraver import read

    sources = (BEFORE, AFTER) if pair == "corpus" else (SAMPLE, SAMPLE)
    need_exports(*sources)
    traces = []
    for i, src in enumerate(sources):
        traces.append(tmp_path / f"{i}-{src.stem}.prv")
        nsys2prv.translate([str(src)], str(traces[-1]))
    monkeypatch.setattr(read, "BLOCK", block)
    work = tmp_path / "work"
    work.mkdir()
    sides = [D.read_side([str(t)], label, work) for t, label in zip(traces, ("before", "after"))]
    for s in sides:
        assert isinstance(s.acts, StoredActivities)
        assert len(s.acts.store.bucket_ids("gpu")) > 3
        assert s.acts.store.dir.parent == work  # removed with the comparison's folder
    summed = []
    monkeypatch.setattr(D, "MEDIAN_BATCH", 5)
    monkeypatch.setattr(D, "summary", lambda df, by: (by == ["key"] and summed.append(
        (df.height, df["key"].n_unique()))) or stats.summary(df, by))
    stored = D.compare_sides(*sides)
    assert all(s.acts._whole is None for s in sides)
    batches = summed[:]
    # two batches a side at least, each of 5 kernels at most or of one name
    assert len(batches) >= 4 and all(n <= 5 or keys == 1 for n, keys in batches)
    assert sum(n for n, _ in batches) == sum(D._gpu_sums(s.acts).kernel_ids["count"].sum()
                                             for s in sides)
    if pair == "sample":
        assert stored.iterations is not None and stored.iterations.kernels.height
    fields = ("path", "end", "rows", "kernels", "memops", "ranges", "sync", "kernel_names",
              "memop_names", "range_names", "domains", "memory_kinds", "calls")
    held = [dataclasses.replace(s, acts=Activities(*(getattr(s.acts, f) for f in fields)))
            for s in sides]
    assert held[0].acts.kernels.height >= 16
    assert D.compare_sides(*held).to_dict() == stored.to_dict()
    for s in sides:
        s.acts.close()
    assert list(work.iterdir()) == []


def test_a_side_hands_its_ranges_over_through_files(tmp_path):
    """A side's process hands its NVTX ranges and projected ranges to the comparing
    process through files in its store's folder (pickled, a frame is copied in the
    sender's memory two or three times): the pickle does not hold them, and what is
    unpickled equals what was read."""
    import pickle

    import nsys2prv

    need_exports(SAMPLE)
    trace = tmp_path / "sample.prv"
    nsys2prv.translate([str(SAMPLE)], str(trace))
    work = tmp_path / "work"
    work.mkdir()
    side = D.read_side([str(trace)], "before", work)
    try:
        ranges, starts = side.acts.ranges, side.layer_ranges.starts
        assert ranges.height > 10 and starts.height > 10
        blob = pickle.dumps(side)
        folder = side.acts.store.dir
        assert {"handed-ranges.arrow", "handed-starts.arrow"} <= {p.name for p in
                                                                 folder.iterdir()}
        back = pickle.loads(blob)
        assert back.acts.ranges.equals(ranges) and back.layer_ranges.starts.equals(starts)
        assert back.layer_ranges.sums.equals(side.layer_ranges.sums)
        for name in ("handed-ranges.arrow", "handed-starts.arrow"):  # not in the pickle
            (folder / name).unlink()
        with pytest.raises(FileNotFoundError):
            pickle.loads(blob)
    finally:
        side.acts.close()
    assert list(work.iterdir()) == []
