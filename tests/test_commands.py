"""Every user-facing command on every export of ../shared/corpus, under a memory limit.

Small synthetic tests once hid a join that grew with the product of two interval sets
(issue 21): `analyze` died on 1 real export in 6. Here each export gets its own process,
limited to ADDRESS_SPACE of address space, running translate, check, analyze (text with
--plot and --html, --json (and --folded where the trace has CPU samples), --pop-trace,
--scaling (and its page), --views: the views of the findings must load in
wxparaver without a question; the six rules), translate and analyze of a window (the middle
tenth), diff (and its page) and prepare + merge (tests/corpus_commands.py). Any non-zero
exit, crash or limit breach fails, and so does a peak resident set above PEAK_RSS
(the goal of issue 21 for every command on every corpus export). New commands join the
driver when they land.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, corpus_cases, corpus_files

ADDRESS_SPACE = 3 << 30
PEAK_RSS = 1 << 30
DRIVER = ROOT / "tests" / "corpus_commands.py"
FILES = corpus_files()


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


_CASES = corpus_cases(FILES)


def _drive(export: Path, work: Path) -> tuple[int, str, str, int]:
    """The driver on one export in its own limited process: (exit code, stdout, stderr,
    peak RSS in bytes of that process)."""
    work.mkdir(parents=True)
    out_file, err_file = work / "driver.out", work / "driver.err"
    with open(out_file, "wb") as out, open(err_file, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(DRIVER), str(export), str(work)],
                                cwd=work, stdout=out, stderr=err, preexec_fn=_limit,
                                env={**os.environ, "RUST_BACKTRACE": "0"})
        _, status, usage = os.wait4(proc.pid, 0)  # the driver's own peak RSS
    return (os.waitstatus_to_exitcode(status), out_file.read_text(), err_file.read_text(),
            usage.ru_maxrss * 1024)  # kB on Linux


@pytest.fixture(scope="module")
def driven(tmp_path_factory) -> dict:
    """Every export's driver started at once, as many at a time as there are cores."""
    base = tmp_path_factory.mktemp("commands")
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    futures = {f: pool.submit(_drive, f, base / f"{i:03d}") for i, f in enumerate(FILES)}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


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
