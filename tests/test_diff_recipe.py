"""The per-kernel numbers of `nsys2prv diff` equal NVIDIA's own: `nsys recipe
cuda_gpu_kern_sum` on each export and `nsys recipe diff` of the two (nsys 2023.4.4, stored in
tests/data/recipes by its generate.py; its README states how the recipes compute each
column). Live where the recipes run (`nsys2023` on PATH, as generate.py calls it)."""

from __future__ import annotations

import csv
import importlib.util
import math
import shutil
from pathlib import Path

import polars as pl
import pytest

from nsys2prv.analysis import diff as D

from conftest import CORPUS, ROOT

DATA = ROOT / "tests" / "data" / "recipes"


def _index() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    with open(DATA / "index.csv") as f:
        for r in csv.DictReader(f):
            if r["export"]:
                out.setdefault(r["pair"], {})[r["side"]] = r["export"]
    return out


PAIRS = _index()


def _export(name: str) -> Path:
    return ROOT / name[2:] if name.startswith("@/") else CORPUS / name


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _close(ours: float, theirs: str, digits: int = 1) -> bool:
    """nsys rounds to 0.1 (half away from zero, or half to even): equal within half a unit
    of the last place (and float noise)."""
    return abs(ours - float(theirs)) <= 0.5 * 10 ** -digits + 1e-6 * max(1.0, abs(ours))


def _side_rows(kernels: pl.DataFrame, side: str) -> dict[str, dict]:
    """name -> our stats of one side, for the kernels matched by exact name (or found on one
    side only), whose key is the name itself."""
    return {r["kernel"]: r for r in kernels.filter(
        pl.col("matched_by") != "normalised").iter_rows(named=True)
        if r[f"count_{side}"] > 0}


def _check_side(ours: dict[str, dict], side: str, theirs: list[dict[str, str]],
                normalised: pl.DataFrame) -> None:
    held = {n: r for r in normalised.iter_rows(named=True) for n in r["names"]}
    for t in theirs:
        name = t["Name"]
        if name in held:  # matched by normalised name: its side holds this name's launches
            r = held[name]
            assert r[f"count_{side}"] >= int(t["Instances"])
            continue
        r = ours[name]
        assert r[f"count_{side}"] == int(t["Instances"]), name
        assert r[f"total_{side}"] == int(t["Total Time"]), name
        assert r[f"min_{side}"] == int(t["Min"]) and r[f"max_{side}"] == int(t["Max"]), name
        assert _close(r[f"mean_{side}"], t["Avg"]), (name, r[f"mean_{side}"], t["Avg"])
        assert _close(r[f"median_{side}"], t["Med"]), (name, r[f"median_{side}"], t["Med"])
        assert _close(r[f"std_{side}"], t["StdDev"]), (name, r[f"std_{side}"], t["StdDev"])
    assert sum(r[f"count_{side}"] for r in ours.values()) + \
        int(normalised[f"count_{side}"].sum()) == sum(int(t["Instances"]) for t in theirs)


def _check_diff(kernels: pl.DataFrame, theirs: list[dict[str, str]]) -> None:
    """`nsys recipe diff AFTER BEFORE`: after - before per name present in AFTER; empty
    cells for a name BEFORE lacks."""
    rows = {r["kernel"]: r for r in kernels.iter_rows(named=True)}
    for t in theirs:
        name = t["Name"]
        if t["Total Time"] == "":
            assert rows.get(name, {}).get("matched_by") != "exact", name
            continue
        r = rows[name]
        assert r["matched_by"] == "exact"
        assert r["delta"] == int(float(t["Total Time"])), name
        assert r["count_after"] - r["count_before"] == int(float(t["Instances"])), name
        assert r["max_after"] - r["max_before"] == int(float(t["Max"]))
        # the recipe subtracts its rounded medians: within one rounding unit
        assert math.isclose(r["median_after"] - r["median_before"], float(t["Med"]),
                            abs_tol=0.1 + 1e-6)


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_kernel_numbers_equal_the_recipes(pair, tmp_path):
    sides = PAIRS[pair]
    before, after = _export(sides["before"]), _export(sides["after"])
    for p in (before, after):
        if not p.exists():
            pytest.skip(f"{p} not found (corpus: set NSYS2PRV_CORPUS)")
    c = D.compare(str(before), str(after), models=False, rules=False, workdir=tmp_path)
    norm = c.kernels.filter(pl.col("matched_by") == "normalised")
    for side in ("before", "after"):
        _check_side(_side_rows(c.kernels, side), side,
                    _read(DATA / pair / f"{side}.rank_stats.csv"), norm)
    _check_diff(c.kernels, _read(DATA / pair / "diff_after_minus_before.rank_stats.csv"))
    if pair == "fuser_report1":  # two nsys versions, no kernel name in common
        assert any("no kernel name in common" in w for w in c.warnings)


def _generator():
    spec = importlib.util.spec_from_file_location("recipes_generate", DATA / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(shutil.which("nsys2023") is None,
                    reason="nsys 2023.4 with the recipes' Python (`nsys2023`, see "
                           "tests/data/recipes/README.md) not installed: the stored outputs "
                           "are checked instead")
def test_live_recipes_on_the_real_pair(tmp_path):
    sides = PAIRS["nsysai_mfu2gpu"]
    before, after = _export(sides["before"]), _export(sides["after"])
    if not before.exists():
        pytest.skip("corpus not found")
    gen = _generator()
    outs = {side: gen.kern_sum("nsys2023", path, tmp_path, side)
            for side, path in (("before", before), ("after", after))}
    d = gen.diff("nsys2023", outs["after"], outs["before"], tmp_path, "d")
    c = D.compare(str(before), str(after), models=False, rules=False, workdir=tmp_path)
    norm = c.kernels.filter(pl.col("matched_by") == "normalised")
    for side in ("before", "after"):
        _check_side(_side_rows(c.kernels, side), side, _read(outs[side] / "rank_stats.csv"),
                    norm)
    _check_diff(c.kernels, _read(d / "rank_stats.csv"))
