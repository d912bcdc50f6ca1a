"""`nsys2prv diff`'s paragraph on a synthetic optimisation series whose story is known in
closed form (`testing/synth_story.py`: one change per pair): the paragraph names the change
and no other, each verdict is right, and every number in it is one of the comparison's
`--json` (the corpus' real pair: tests/test_analyst.py)."""

from __future__ import annotations

import math
import re

import numpy as np
import polars as pl
import pytest

from nsys2prv.analysis import diff as D
from nsys2prv.testing import synth_story as S


# what each change may be named by in the paragraph, and what it must not mention
SENTENCES = {"kernels": "Kernels whose time per step moved", "copies": "Copies:",
             "waits": "waits", "device": "One device moved apart",
             "per step": "Per step, beyond noise", "launch": "Launched differently"}
NAMED = {"kernel_2x": {"kernels", "per step"}, "pinned": {"copies", "per step"},
         "launch_halved": {"waits", "per step"},
         "rank_slowed": {"kernels", "device", "per step"}, "noise": set()}
VERDICT = {"kernel_2x": "faster", "pinned": "faster", "launch_halved": "slower",
           "rank_slowed": "slower", "noise": "no change beyond noise"}


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """The five pairs of the series, compared (no rules: the exports are synthetic)."""
    d = tmp_path_factory.mktemp("story")
    out = {}
    for change in S.CHANGES:
        eb, ea = S.series(d / change, change)
        out[change] = (D.compare(str(eb.path), str(ea.path), workdir=d, rules=False), eb, ea)
    return out


def _per_step(e: S.Expected, name: str) -> np.ndarray:
    """A kernel's time in each step of the job (summed over ranks and launches)."""
    return e.kernel_durations[name].sum(axis=(0, 2))


@pytest.mark.parametrize("change", S.CHANGES)
def test_the_paragraph_names_the_change_and_no_other(story, change):
    c, eb, ea = story[change]
    it = c.iterations
    assert it is not None and it.name == "Batch #" and it.before.height == eb.steps
    assert it.before["duration"].to_list() == eb.job_batch_duration.tolist()
    assert it.after["duration"].to_list() == ea.job_batch_duration.tolist()
    assert c.verdict.verdict == VERDICT[change]
    named = {k for k, phrase in SENTENCES.items() if phrase in c.paragraph}
    assert named == NAMED[change], c.paragraph
    if change == "noise":
        assert "Inside the step nothing moved beyond noise" in c.paragraph
        assert not any(label in c.paragraph for label in c.kernels["label"])


def test_kernel_made_twice_as_fast(story):
    """The GEMM per step: the generator's durations halved (rounded); it alone moved; the
    step got faster by what it saved, the GPU idle time did not move."""
    c, eb, ea = story["kernel_2x"]
    k = c.iterations.kernels.filter(pl.col("verdict") != "no change beyond noise")
    assert k["kernel"].to_list() == [S.GEMM] and k["verdict"][0] == "faster"
    row = k.row(0, named=True)
    assert row["median_before"] == np.median(_per_step(eb, S.GEMM))
    assert row["median_after"] == np.median(_per_step(ea, S.GEMM))
    assert abs(row["median_after"] / row["median_before"] - 0.5) < 1e-3
    assert (row["n_before"], row["n_after"]) == (4, 4)
    assert c.iterations.shifts["GPU idle"].verdict == "no change beyond noise"
    label = c.kernels.filter(pl.col("kernel") == S.GEMM)["label"][0]
    assert f"{label} {row['median_before'] / 1e6:.3f} ms -> {row['median_after'] / 1e6:.3f} " \
           f"ms (-50.0 %)" in c.paragraph


def test_pageable_copies_made_pinned(story):
    """The copies go from one row of the category table to another, exactly the
    generator's times, and the paragraph says so."""
    c, eb, ea = story["pinned"]
    cp = {r["detail"]: r for r in c.categories.filter(pl.col("category") == "memcpy")
          .iter_rows(named=True)}
    pageable, pinned = cp["Host-to-Device pageable"], cp["Host-to-Device pinned"]
    n = eb.steps
    assert (pageable["count_before"], pageable["total_before"]) == (n, n * S.COPY_PAGEABLE_NS)
    assert (pageable["count_after"], pageable["total_after"]) == (0, 0)
    assert (pinned["count_after"], pinned["total_after"]) == (n, n * S.COPY_PINNED_NS)
    assert f"Copies: Host-to-Device pageable {n * S.COPY_PAGEABLE_NS / 1e6:.3f} ms ({n} " \
           f"copies) -> pinned {n * S.COPY_PINNED_NS / 1e6:.3f} ms ({n} copies)." in c.paragraph
    s = c.iterations.shifts["memcpy"]
    assert (s.median_before, s.median_after, s.verdict) == (S.COPY_PAGEABLE_NS,
                                                             S.COPY_PINNED_NS, "faster")
    assert c.iterations.shifts["duration"].delta == pytest.approx(
        float(np.median(ea.job_batch_duration) - np.median(eb.job_batch_duration)))


def test_launch_rate_halved(story):
    """The host launches at half the rate: the GPU idle time of each step is the
    generator's, it grew, and its bound is the host: launching and host compute."""
    c, eb, ea = story["launch_halved"]
    it = c.iterations
    assert it.before["gpu_idle"].to_list() == eb.gpu_idle_in_batch[0].tolist()
    assert it.after["gpu_idle"].to_list() == ea.gpu_idle_in_batch[0].tolist()
    for k in ("GPU idle", "idle: launching", "idle: host compute"):
        assert it.shifts[k].verdict == "slower", k
    assert it.shifts["compute kernels"].verdict == "no change beyond noise"
    # the groups of causes add up to the gaps' idle time of each step
    groups = [c for c in it.after.columns if c.startswith("idle: ")]
    assert it.after.select(pl.sum_horizontal(groups)).to_series().to_list() == \
        it.after["gap_idle"].to_list()
    assert "The GPU now waits longer for the host: launching +" in c.paragraph
    assert "host compute +" in c.paragraph


def test_one_rank_slowed(story):
    """Rank 1's kernels 50 % slower: its device is named apart, with its time, and the
    other rank waits for it in the all-reduce."""
    c, eb, ea = story["rank_slowed"]
    d = c.devices.sort("index")
    assert d["compute kernels_ratio"][1] == pytest.approx(1.5, abs=1e-3)
    assert d["compute kernels_ratio"][0] == 1.0
    b1 = int(sum(eb.kernel_durations[n][1].sum() for n, _, _ in S.KERNELS))
    a1 = int(sum(ea.kernel_durations[n][1].sum() for n, _, _ in S.KERNELS))
    assert (d["compute kernels_before"][1], d["compute kernels_after"][1]) == (b1, a1)
    dev = d["device_after"][1]
    assert f"One device moved apart from the others: {dev} compute kernels " \
           f"{b1 / 1e6:.3f} ms -> {a1 / 1e6:.3f} ms (+50.0 %)" in c.paragraph
    assert "the others wait for it in NCCL" in c.paragraph
    assert c.iterations.shifts["NCCL kernels"].verdict == "slower"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noise_names_nothing(tmp_path, seed):
    """Noise only, other seeds: the paragraph names no kernel, copy, device or bound."""
    eb, ea = S.series(tmp_path, "noise", seed=seed)
    c = D.compare(str(eb.path), str(ea.path), workdir=tmp_path, rules=False, idle=False)
    assert c.verdict.verdict in ("no change beyond noise", "inconclusive")
    assert not any(p in c.paragraph for p in SENTENCES.values()), c.paragraph


# ------------------------------------------------------------------ numbers in the text --

_NUM = r"[+-]?\d+(?:\.\d+)?"


def _numbers(obj) -> list[float]:
    """Every number a `to_dict` holds."""
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, (list, tuple)):
        return [x for v in obj for x in _numbers(v)]
    if isinstance(obj, bool) or obj is None:
        return []
    if isinstance(obj, (int, float)) and not (isinstance(obj, float) and math.isnan(obj)):
        return [float(obj)]
    return []


def _formats(v: float) -> set[str]:
    """How the paragraph may print a number of the tables (ns as ms or s, fractions and
    ratios as %, percents, p-values, counts), signed and not."""
    out = set()
    for x, fmt in ((v / 1e6, ".3f"), (v / 1e9, ".3f"), (100 * v, ".1f"),
                   (100 * (v - 1), ".1f"), (v, ".1f"), (v, ".3f"), (v, "g")):
        out.add(format(x, fmt))
        out.add(format(x, "+" + fmt))
    return out


def paragraph_numbers(text: str) -> list[str]:
    """The numbers of a paragraph that are measurements: with a unit (ms, s, %), a p-value,
    counts of launches, copies, instances (names, which hold digits, are not read)."""
    found = re.findall(rf"(?<![\w<,#.])({_NUM}) (?:ms|s|%)(?!\w)", text)
    found += re.findall(rf"p = ({_NUM})", text)
    for a, b in re.findall(rf"\(({_NUM}) -> ({_NUM}) launches", text):
        found += [a, b]
    found += re.findall(rf"\(({_NUM}) copies\)", text)
    for a, b in re.findall(rf"launches ({_NUM}) -> ({_NUM})", text):
        found += [a, b]
    for a, b in re.findall(rf"\(({_NUM}) / ({_NUM}) instances\)", text):
        found += [a, b]
    return found


def assert_numbers_from_tables(c) -> None:
    values = set()
    for v in _numbers(c.to_dict()):
        values |= _formats(v)
    text = c.paragraph
    found = paragraph_numbers(text)
    assert found, text
    missing = [x for x in found if x not in values and x.lstrip("+") not in values]
    assert not missing, (missing, text)


@pytest.mark.parametrize("change", S.CHANGES)
def test_every_number_comes_from_the_tables(story, change):
    assert_numbers_from_tables(story[change][0])


def test_a_number_not_in_the_tables_is_caught(story):
    """The check can fail: a paragraph with a number made up is refused."""
    import dataclasses

    c = story["kernel_2x"][0]
    bad = dataclasses.replace(c, paragraph=c.paragraph + " Made up: 12.345 ms (+98.7 %).")
    with pytest.raises(AssertionError):
        assert_numbers_from_tables(bad)


def test_a_kernel_launched_differently_is_said(tmp_path):
    """The GEMM made 2x faster by a new launch (a grid 4x as large, half the block, half the
    registers: twice the occupancy): after the kernels whose time per step moved, the paragraph gives the GEMM's
    launch before and after with what it allows (the kernel_launches table's words), and no
    other kernel's; every number in it comes from the tables."""
    old = {"grid": (108, 1, 1), "block": (256, 1, 1), "registers": 128}
    new = {"grid": (432, 1, 1), "block": (128, 1, 1), "registers": 64}
    eb = S.story_run(tmp_path / "before.sqlite", gemm_launch=old)
    ea = S.story_run(tmp_path / "after.sqlite", gemm_launch=new, scale={S.GEMM: 0.5})
    c = D.compare(str(eb.path), str(ea.path), workdir=tmp_path, rules=False)
    assert c.launches["kernel"].to_list() == [S.GEMM]
    r = c.launches.row(0, named=True)
    assert (r["blocks_before"], r["threads_before"], r["registers_before"]) == (108, 256, 128)
    assert (r["blocks_after"], r["threads_after"], r["registers_after"]) == (432, 128, 64)
    label = c.kernels.filter(pl.col("kernel") == S.GEMM)["label"].item()
    assert "Kernels whose time per step moved: " + label in c.paragraph
    assert (f"Launched differently after: {label} {r['before']} -> {r['after']} "
            f"({r['change']}).") in c.paragraph, c.paragraph
    # A100: 65,536 registers an SM hold 2 blocks of 256 x 128 (16 of 64 warps), 8 of 128 x 64
    # (32 warps); both grids fill half a wave of 108 SMs, every SM busy (waves, ceiling same)
    assert r["change"] == "occupancy 25.0 % -> 50.0 %, limiter registers"
    assert (r["waves_before"], r["waves_after"]) == (0.5, 0.5)
    assert_numbers_from_tables(c)
