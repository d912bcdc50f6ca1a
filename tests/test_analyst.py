"""Issue 36, read as an analyst: rows told apart in every table (labels), the step found at
any depth, on the real exports of the corpus (`aiprof_opt2`: a PyTorch MNIST training,
NVTX 'Epoch N' > 'Train' > 'Batch N'; the 2-GPU before/after pair), checked against the
exports' own tables with sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from nsys2prv.analysis import diff as D
from nsys2prv.analysis.labels import distinct_labels, fit_labels

from conftest import CORPUS, need_exports, translated_once

AIPROF = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"
BEFORE = CORPUS / "sqlite" / "nsysai_mfu2gpu_before.sqlite"
AFTER = CORPUS / "sqlite" / "nsysai_mfu2gpu_after.sqlite"


def _sql(db: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def aiprof(tmp_path_factory):
    """aiprof_opt2 translated once, analysed as `analyze --iterations --critical-path
    --modality` does (the step picked)."""
    need_exports(AIPROF)
    from nsys2prv.cli.analyze import analyze

    _, out = translated_once(AIPROF, tmp_path_factory)
    result, _, extras = analyze([str(out)], iterations="", modality=True, what_if=[])
    return out, result, extras


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    need_exports(BEFORE, AFTER)
    return D.compare(str(BEFORE), str(AFTER), workdir=tmp_path_factory.mktemp("pair"))


# ----------------------------------------------------------------------------- labels --

def test_labels_fit_a_column_and_stay_apart():
    labels = ["Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nt_align4>",
              "Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x5_nt_align4>",
              "gemm", "x" * 30 + "_A_" + "y" * 30, "x" * 30 + "_B_" + "y" * 30]
    for width in (20, 30, 43):
        fit = fit_labels(labels, width)
        assert all(len(v) <= width for v in fit.values())
        assert len(set(fit.values())) == len(labels), fit
    assert fit_labels(labels, 43)["gemm"] == "gemm"


def test_diff_kernel_labels_tell_rows_apart_alike_on_both_sides(pair):
    """The real pair's 8 'elementwise_kernel' rows (and every other short name shared by
    several demangled names) get distinct labels; a label is the one the names of both
    sides labelled together give, so a kernel reads alike before and after."""
    k = pair.kernels
    assert k["label"].n_unique() == k.height
    texts = sorted({n for names in k["names"] for n in names})
    want = distinct_labels(texts, [_short_of(pair, t) for t in texts])
    for r in k.iter_rows(named=True):
        assert r["label"] == want[r["kernel"]]
    shared = k.group_by("short").len().filter(pl.col("len") > 1)
    assert shared.height >= 4  # elementwise, vectorized, unrolled, CatArrayBatchedCopy ...
    ew = k.filter(pl.col("short") == "elementwise_kernel")
    assert ew.height == len({n for (n,) in _sql(BEFORE, (
        "SELECT DISTINCT d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON "
        "d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName "
        "WHERE s.value = 'elementwise_kernel'"))}) == 8
    assert all(label.startswith("elementwise_kernel<") for label in ew["label"])
    from nsys2prv.cli.diff import format_text

    text = format_text(pair, top=100)
    table = text.split("\nkernels (")[1].split("\n\n")[0].splitlines()[2:-1]
    printed = [line[:44].rstrip() for line in table if not line.startswith("  ")]
    assert len(printed) == k.height and len(set(printed)) == k.height


def _short_of(c, text: str) -> str:
    return c.kernels.filter(pl.col("names").list.contains(text))["short"][0]


def test_launch_table_is_per_demangled_name(aiprof):
    """`analyze`'s kernel launch statistics: one row per demangled name, its count equal to
    the export's launches of that name; the rows of one short name told apart."""
    _, result, _ = aiprof
    launches = result.idle.launches
    want = dict(_sql(AIPROF, "SELECT d.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                             "JOIN StringIds d ON d.id = k.demangledName GROUP BY 1"))
    from nsys2prv.paraver.values import NORMALISERS, clean_label

    want = {clean_label(NORMALISERS["kernel_names"](n)): c for n, c in want.items()}
    assert len(launches) == len(want) == 45
    assert {k.full: k.count for k in launches} == want
    assert len({k.label for k in launches}) == 45
    nchw = sorted(k.label for k in launches if k.name == "vectorized_elementwise_kernel")
    assert len(nchw) > 1 and all(x.startswith("vectorized_elementwise_kernel<") for x in nchw)


def test_critical_path_and_modality_list_kernels_by_label(aiprof):
    _, _, extras = aiprof
    kernels = extras.critical.by_detail.filter(pl.col("category") == "kernels")
    assert kernels["detail"].n_unique() == kernels.height
    assert kernels["full"].n_unique() == kernels.height  # the demangled name beside it
    m = extras.modality
    assert m["label"].n_unique() == m.height == m["kernel"].n_unique()
    # one label per kernel in every table of the run
    launch = {k.full: k.label for k in extras_launches(aiprof)}
    for r in m.iter_rows(named=True):
        assert launch[r["kernel"]] == r["label"]
    for r in kernels.iter_rows(named=True):
        assert launch[r["full"]] == r["detail"]


def extras_launches(aiprof):
    return aiprof[1].idle.launches


# --------------------------------------------------------------------------- the step --

def test_aiprof_step_is_batch_at_depth_two(aiprof):
    """'Epoch N' > 'Train' > 'Batch N': with no range named, the step is 'Batch #' (59
    instances, nested two deep), each equal to the export's range; the GPU time it
    launches equals the export's (launch calls matched on correlation ids); the runners-up
    say why they lost."""
    _, _, extras = aiprof
    r = extras.iterations
    assert (r.name, r.domain, r.picked) == ("Batch #", None, True)
    durs = [d for (d,) in _sql(AIPROF, "SELECT end - start FROM NVTX_EVENTS WHERE text LIKE "
                                       "'Batch %' AND eventType = 59 ORDER BY start")]
    assert r.steps["duration"].to_list() == durs and len(durs) == 59
    share = _sql(AIPROF, """
        WITH b AS (SELECT start s, end e FROM NVTX_EVENTS WHERE text LIKE 'Batch %'
                   AND eventType = 59),
        g AS (SELECT start, end, correlationId c, globalPid p FROM CUPTI_ACTIVITY_KIND_KERNEL
              UNION ALL SELECT start, end, correlationId, globalPid
              FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, end, correlationId,
              globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET),
        l AS (SELECT g.end - g.start d, r.start t FROM g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
              ON r.correlationId = g.c AND r.globalTid >> 24 = g.p >> 24)
        SELECT (SELECT SUM(d) FROM l JOIN b ON t >= b.s AND t < b.e) * 1.0
               / (SELECT SUM(end - start) FROM g)""")[0][0]
    c = {x["family"]: x for x in r.pick.candidates.iter_rows(named=True)}
    assert c["Batch #"]["gpu_share"] == pytest.approx(share, abs=1e-12)
    assert "59 instances one after the other on one thread, nested 2 deep" in r.pick.why
    ups = r.pick.runners_up(3)
    assert ups["family"].to_list() == ["Epoch #", "Train", "Backward pass"]
    assert ups["n"].to_list() == [1, 1, 59]
    assert ups["note"][0] == "fewer than 3 instances"
    # the critical path per step uses the same steps
    assert extras.critical.steps["instance"].unique().len() == 59
    from nsys2prv.cli.analyze import format_iterations

    text = format_iterations(r)
    assert "'Epoch #' (1 instance, 100 % of the GPU time): fewer than 3 instances" in text


def test_real_pair_has_no_step_and_says_why(pair):
    """The 2-GPU pair: its ranges are PyTorch's operators (flash attention takes half the
    GPU time but launches 1 of the 27 kernel names), never the step: the verdict is on the
    elapsed time and the search says why, with the closest candidates."""
    assert pair.iterations is None and pair.step_search is not None
    assert pair.step_search.name is None
    names = _sql(BEFORE, "SELECT COUNT(DISTINCT demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    c = pair.step_search.candidates.row(0, named=True)
    assert c["family"] == "FlashAttnFunc, seq = #, op_id = #"
    assert c["name_share"] == 1 / names[0][0] and names[0][0] == 27
    assert c["operator"] and c["note"].startswith("a PyTorch operator")
    from nsys2prv.cli.diff import format_text

    text = format_text(pair)
    assert "no step: no NVTX range other than an operator's repeats one after the other on " \
        "one thread" in text
    assert "closest candidates:\n    'FlashAttnFunc, seq = #, op_id = #' (34 instances" in text


def test_story_step_found_in_both_runs(tmp_path):
    """The synthetic loop 'Epoch e' > 'Train' > {'Data loading', 'Batch k'}, with a range
    around each launch ('gemm_op' around the GEMMs: 60 % of the GPU time): the step is
    'Batch #', its instances equal to the generator's on both sides."""
    from nsys2prv.testing.synth_story import series

    eb, ea = series(tmp_path, "noise")
    c = D.compare(str(eb.path), str(ea.path), workdir=tmp_path, rules=False, idle=False)
    it = c.iterations
    assert it is not None and (it.name, it.picked) == ("Batch #", True)
    assert it.before["duration"].to_list() == eb.batch_duration[0].tolist()
    assert it.after["duration"].to_list() == ea.batch_duration[0].tolist()
    cand = {x["family"]: x for x in it.pick.candidates.iter_rows(named=True)}
    assert cand["Epoch #"]["n"] == 2 and not cand["Epoch #"]["loop"]
    gemm = eb.total(story_gemm()) / (eb.total(story_gemm()) + sum(
        eb.total(n) for n in eb.kernel_durations if n != story_gemm()) + eb.steps * eb.copy_ns)
    assert cand["gemm_op"]["gpu_share"] == pytest.approx(gemm)
    assert cand["Data loading"]["gpu_share"] == 0.0


def story_gemm() -> str:
    from nsys2prv.testing.synth_story import GEMM

    return GEMM


# ----------------------------------------------------------------- copies by memory kind --

def test_copies_split_by_direction_and_memory_kind(pair):
    """The category table splits copies by direction and by the memory that tells them
    apart (the host side's: pageable, pinned; device; peer): count and time equal the
    export's CUPTI_ACTIVITY_KIND_MEMCPY rows grouped by copyKind, srcKind and dstKind."""
    for side, db in (("before", BEFORE), ("after", AFTER)):
        rows = _sql(db, "SELECT o.label, s.label, d.label, COUNT(*), SUM(m.end - m.start) "
                        "FROM CUPTI_ACTIVITY_KIND_MEMCPY m "
                        "JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = m.copyKind "
                        "JOIN ENUM_CUDA_MEM_KIND s ON s.id = m.srcKind "
                        "JOIN ENUM_CUDA_MEM_KIND d ON d.id = m.dstKind GROUP BY 1, 2, 3")
        want: dict[str, list[int]] = {}
        for op, src, dst, n, t in rows:
            memory = {"Host-to-Device": src, "Device-to-Host": dst}.get(op, dst).lower()
            got = want.setdefault(f"{op} {memory}", [0, 0])
            got[0] += n
            got[1] += t
        c = pair.categories.filter(pl.col("category") == "memcpy")
        have = {r["detail"]: [r[f"count_{side}"], r[f"total_{side}"]]
                for r in c.iter_rows(named=True) if r[f"count_{side}"]}
        assert have == want
    assert set(pair.categories["detail"]) >= {"Host-to-Device pageable",
                                              "Device-to-Device device"}
    assert "count_delta" in pair.kernels.columns and "count_delta" in pair.nvtx.columns
    k = pair.kernels.filter(pl.col("short") == "flash_fwd_kernel").row(0, named=True)
    assert k["count_delta"] == k["count_after"] - k["count_before"] == 60 - 68


# ---------------------------------------------------------------------- the paragraph --

def test_every_number_of_the_real_pair_comes_from_the_tables(pair):
    """The 2-GPU pair's paragraph (no step: the whole run's moves): each number is one of
    its --json's, the time per launch included."""
    from test_story import assert_numbers_from_tables

    assert_numbers_from_tables(pair)
    assert "per launch" in pair.paragraph
    assert pair.paragraph.startswith("Elapsed 299.986 ms -> 299.272 ms (-0.2 %); one run a "
                                     "side: noise cannot be judged.")


def test_docs_show_the_real_pairs_paragraph(pair):
    """docs/diff.md's example is this code's paragraph for the real pair, word for word."""
    from conftest import ROOT

    doc = (ROOT / "docs" / "diff.md").read_text()
    example = doc.split("## Example: the real before/after pair of the corpus")[1]
    text = " ".join(example.split("\n\n    Elapsed ", 1)[1].split("\n\n")[0].split())
    assert "Elapsed " + text == pair.paragraph
