"""The pages in a real browser (docs/html.md): Playwright driving the system's Chromium
(never a downloaded one: `playwright install` is not run), every network request aborted.
Each page loads from its file with no console error, has every section, draws every picture
with a non-zero size, sorts a table when its header is clicked, and its first screen's
numbers are --json's. On a corpus export (aiprof_opt2), a multi-rank run (the synthetic
2-rank job, and the corpus' cori_omp ranks where present) and a diff pair (the corpus'
nsysai_mfu2gpu before/after).

Skipped, with the reason, where Playwright or Chromium is missing: docs/html.md says how to
install them (pip install playwright; apt-get install chromium)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CORPUS

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
RUN_SECTIONS = ["summary", "efficiency", "utilisation", "idle", "samples", "steps", "layers",
                "kernels", "critical", "rules"]


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


@pytest.fixture(scope="module")
def browser():
    sync = pytest.importorskip("playwright.sync_api",
                               reason="playwright is not installed (pip install playwright; "
                                      "docs/html.md)")
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; docs/html.md)")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=FLAGS)
        yield b
        b.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "nsys2prv", *args], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    return out


def _open(browser, path: Path):
    """The page from its file, every request but the file itself aborted; returns the page
    and the console errors and the requests that were refused."""
    page = browser.new_page()
    errors, refused = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if r.request.url == path.as_uri():
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, refused


def _check_page(browser, path: Path, sections: list[str], findings: list[dict] | None):
    page, errors, refused = _open(browser, path)
    try:
        assert errors == [] and refused == []
        ids = page.eval_on_selector_all("main > section", "s => s.map(e => e.id)")
        assert ids == sections
        sizes = page.eval_on_selector_all(
            "svg.chart", "s => s.map(e => [e.getBoundingClientRect().width, "
                         "e.getBoundingClientRect().height])")
        assert sizes and all(w > 0 and h > 0 for w, h in sizes)
        if findings is not None:
            shown = page.eval_on_selector_all(
                "#findings li", "s => s.map(e => [Number(e.dataset.number), e.dataset.unit, "
                                "e.dataset.section, e.innerText])")
            assert [(n, u, s) for n, u, s, _ in shown] == \
                [(f["number"], f["unit"], f["section"]) for f in findings]
            assert [t for *_, t in shown] == [f["sentence"] for f in findings]
            for _, _, s, _ in shown:  # each finding links to its section
                assert page.locator(f"#{s}").count() == 1
        _sorts(page)
    finally:
        page.close()


def _sorts(page) -> None:
    """A numeric column of a table with several values: a click on its head sorts the rows
    by it (ascending, then descending), the values the exact ones the cells carry."""
    boxes = page.locator("div.tbl")
    for i in range(boxes.count()):
        box = boxes.nth(i)
        heads = box.locator("th.num")
        rows = box.locator("tbody tr").count()
        if heads.count() == 0 or rows < 3:
            continue
        col = page.evaluate("b => Array.from(b.querySelectorAll('th')).findIndex("
                            "t => t.classList.contains('num'))", box.element_handle())
        data = json.loads(box.locator("script.rows").inner_text())
        values = [r[col][1] for r in data]
        if len({v for v in values if v is not None}) < 2:
            continue
        head = box.locator("th").nth(col)
        head.click()
        asc = sorted(v for v in values if v is not None)
        got = [c.get_attribute("title") or c.inner_text()
               for c in box.locator(f"tbody tr td:nth-child({col + 1})").all()]
        cells = [r[col] for r in sorted(data, key=lambda r: (r[col][1] is None,
                                                             r[col][1] or 0))]
        assert got == [c[2] if len(c) > 2 else c[0] for c in cells][:len(got)]
        assert head.get_attribute("aria-sort") == "ascending"
        head.click()
        first = box.locator(f"tbody tr td:nth-child({col + 1})").first
        want = next(c for c in (r[col] for r in data) if c[1] == asc[-1])
        assert (first.get_attribute("title") or first.inner_text()) == \
            (want[2] if len(want) > 2 else want[0])
        return
    raise AssertionError("no table with a numeric column to sort")


def test_a_synthetic_two_rank_run(browser, tmp_path):
    """The 2-rank, 2-GPU job of the steps' tests (noisy steps, NCCL, copies): always run."""
    from nsys2prv.testing.synth_pairs import iterations_run

    e = iterations_run(tmp_path / "job", steps=8, ranks=2, devices_per_rank=2,
                       noise_sd_ns=20_000, seed=3, nccl_ns=30_000, memcpy_ns=10_000)
    page = tmp_path / "job.html"
    out = _cli("analyze", str(e.path), "--html", str(page), "--json")
    found = json.loads(out.stdout)["findings"]
    assert found
    _check_page(browser, page, RUN_SECTIONS, found)
    html = page.read_text()
    assert html.count("rank 1") > 0 and "Per device" in html


def test_aiprof_opt2(browser, tmp_path):
    export = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"
    if not export.exists():
        pytest.skip(f"corpus export {export.name} not found under {CORPUS}")
    page = tmp_path / "aiprof.html"
    out = _cli("analyze", str(export), "--html", str(page), "--json")
    found = json.loads(out.stdout)["findings"]
    assert found[0]["section"] == "idle" and found[0]["number"] == 95.7
    _check_page(browser, page, RUN_SECTIONS, found)
    assert page.stat().st_size < 4_000_000


def test_cori_ranks(browser, tmp_path):
    ranks = sorted((CORPUS / "exported").glob("cori_omp_run1_rank*.sqlite"))
    if len(ranks) < 2:
        pytest.skip(f"the corpus' cori_omp rank exports are not under {CORPUS}/exported")
    page = tmp_path / "cori.html"
    out = _cli("analyze", *map(str, ranks), "--html", str(page), "--json", "--no-layers")
    found = json.loads(out.stdout)["findings"]
    _check_page(browser, page, RUN_SECTIONS, found)


def test_a_diff_pair(browser, tmp_path):
    before = CORPUS / "sqlite" / "nsysai_mfu2gpu_before.sqlite"
    after = CORPUS / "sqlite" / "nsysai_mfu2gpu_after.sqlite"
    if not (before.exists() and after.exists()):
        pytest.skip(f"the corpus' nsysai_mfu2gpu pair is not under {CORPUS}/sqlite")
    page = tmp_path / "diff.html"
    _cli("diff", str(before), str(after), "--html", str(page))
    _check_page(browser, page, ["summary", "kernels", "layers", "steps", "memory", "tables"],
                None)
