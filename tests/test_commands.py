"""Every user-facing command on every export of ../shared/corpus, under a memory limit.

Small synthetic tests once hid a join that grew with the product of two interval sets
(issue 21): `analyze` died on 1 real export in 6. Here each export gets its own process
(forked from one that imported the package once), limited to ADDRESS_SPACE of address
space, running analyze of the export (text with --plot; --views, whose kept translation
is the trace the other commands read: the views of the findings must load in wxparaver
without a question; the six rules), analyze of the trace (--json with --html and
--critical-path --path-trace (and --folded where the trace has CPU samples), --pop-trace,
--scaling and its page), check of the traces these write, translate of a window (the middle
tenth), diff (and its page; of the window too, with --trace) and prepare + merge
(tests/corpus_commands.py). The plain translation of every export is checked by
tests/test_corpus.py. Any non-zero
exit, crash or limit breach fails, and so does a peak resident set above PEAK_RSS
(the goal of issue 21 for every command on every corpus export). New commands join the
driver when they land.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future

import pytest
from conftest import ROOT, corpus_cases, corpus_files, usable_cores

ADDRESS_SPACE = 3 << 30
PEAK_RSS = 1 << 30
DRIVER = ROOT / "tests" / "corpus_commands.py"
FILES = corpus_files()


_CASES = corpus_cases(FILES)


@pytest.fixture(scope="module")
def driven(tmp_path_factory) -> dict:
    """Every export's driver, as many at a time as there are cores, each in its own limited
    process forked from one that imported the package once (`corpus_commands.serve`):
    export -> future of (exit code, driver's stdout, its stderr, its peak RSS in bytes)."""
    base = tmp_path_factory.mktemp("commands")
    futures = {f: Future() for f in FILES}
    if not FILES:
        yield futures
        return
    with open(base / "server.err", "wb") as server_err:
        server = subprocess.Popen(
            [sys.executable, str(DRIVER), "--serve", str(base), str(usable_cores()),
             str(ADDRESS_SPACE), *map(str, FILES)], stdout=subprocess.PIPE,
            stderr=server_err, text=True, env={**os.environ, "RUST_BACKTRACE": "0"})
    by_name = {str(f): f for f in FILES}

    def read() -> None:
        for line in server.stdout:
            done = json.loads(line)
            work = base / f"{FILES.index(by_name[done['export']]):03d}"
            out, err = work / "driver.out", work / "driver.err"
            futures[by_name[done["export"]]].set_result(
                (done["code"], out.read_text() if out.exists() else "",
                 err.read_text() if err.exists() else "", done["peak"]))
        server.wait()
        why = (f"the drivers' server ended ({server.returncode}): "
               f"{(base / 'server.err').read_text()[-2000:]}")
        for f in futures.values():
            if not f.done():
                f.set_exception(RuntimeError(why))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    yield futures
    server.kill()
    reader.join()


@pytest.mark.parametrize("export", _CASES["params"], ids=_CASES["ids"])
def test_every_command_on_the_export(export, driven):
    if export is None:
        pytest.skip("real-export corpus (../shared/corpus) not present")
    code, out, err, peak = driven[export].result()
    assert code == 0, f"driver died ({code}): {err[-2000:]}"
    report = json.loads(out)
    failed = {name: (r["code"], r["stderr"]) for name, r in report["commands"].items()
              if r["code"] != 0}
    assert not failed, failed
    checks = report["checks"]
    assert checks["merge_same_bytes"], "prepare + merge differs from translate"
    assert isinstance(checks["json_devices"], int), checks["json_devices"]
    assert checks["scaling_columns"] == 1
    assert checks["plot_written"]
    assert checks["pages_bad"] == [], checks["pages_bad"]  # --html of analyze/scaling/diff
    assert checks["folded_off"] in (None, 0), checks["folded_off"]  # --folded sums
    assert checks["views_asking"] == []
    # an export against its own translation (whole, and a window of each): no difference
    assert checks["diff_nonzero"] == [], checks["diff_nonzero"]
    assert checks["diff_window_nonzero"] == [], checks["diff_window_nonzero"]
    # analyze --iterations --modality: sane steps where a loop was found, a kernel table
    assert checks["steps_bad"] == [], checks["steps_bad"]
    assert isinstance(checks["modality_kernels"], int)
    # analyze --critical-path --what-if --path-trace: the composition adds up, work made
    # shorter never makes the run longer, the trace with the path validates (check_path)
    assert checks["path_sum"] == 0, checks["path_sum"]
    assert checks["what_if_longer"] == [], checks["what_if_longer"]
    assert peak <= PEAK_RSS, f"peak RSS {peak / 2**20:.0f} MiB over {PEAK_RSS >> 20} MiB"
