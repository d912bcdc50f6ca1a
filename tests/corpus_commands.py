"""Run every user-facing command on one export, as `nsys2prv ...` would (tests/test_commands.py).

    python tests/corpus_commands.py EXPORT WORKDIR
    python tests/corpus_commands.py --serve BASE JOBS LIMIT EXPORT...

Each command goes through `nsys2prv.cli.main(argv)` in one process (one interpreter start
for all of them); stdout is captured per command. Prints one JSON object: per command its
exit code, the last line it wrote on stderr and its wall time, and a few checks that need
the outputs (the --json output parses, the merged trace has the bytes of the translated one,
the POP copy validates).

`--serve` runs many exports, JOBS at a time, each in a child forked from this process once
it has imported what the commands need (an interpreter start and those imports cost ~1.5 s
an export), under LIMIT bytes of address space: the child writes that JSON object to
BASE/NNN/driver.out, its stderr to driver.err; this process prints one line per export as
its child ends: {"export", "code" (exit code), "peak" (the child's peak resident set, bytes)}.
Polars' thread pool starts at a query's first use, so none runs here when the children fork.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import signal
import sys
import time
from pathlib import Path


def run(argv: list[str]) -> dict:
    from nsys2prv.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse --help and the like
            code = e.code if isinstance(e.code, int) else 1
    lines = err.getvalue().strip().splitlines()
    return {"argv": argv, "code": code, "stderr": lines[-1] if lines else "",
            "seconds": round(time.perf_counter() - t0, 3), "stdout": out.getvalue()}


def _middle(export: str) -> str:
    """--filter-time for the middle tenth of the export's records after the session start
    (ns since it)."""
    from nsys2prv.pipeline.facts import report_facts
    from nsys2prv.report.report import Report

    report = Report(export)
    try:
        facts = report_facts(report)
    finally:
        report.close()
    # the trace starts at the session start: records before it (scheduling, on some
    # exports) are not translated, so the window is a tenth of the part from 0 on
    first = max(facts.first, 0)
    span = facts.last - first
    return f"{first + span * 45 // 100}/{first + span * 55 // 100}"


def main(export: str, work: str) -> dict:
    w = Path(work)
    pop, merged, part = w / "pop.prv", w / "m.prv", w / "part"
    results = {}
    # the export analysed as users do, its translation kept for the views of its findings:
    # the trace the other commands read (translating the export: the translation that
    # `nsys2prv EXPORT OUT.prv` writes, tests/test_corpus.py checks it)
    views = w / "views"
    trace = views / (Path(export).name.split(".")[0] + ".prv")
    results["analyze"] = run(["analyze", export, "--plot", str(w / "eff.png"),
                              "--iterations", "--modality", "--views", str(views),
                              "--top", "3"])
    # the folded stacks where the trace has CPU samples (--folded says none otherwise)
    pcf = trace.with_suffix(".pcf")
    sampled = pcf.exists() and re.search(r"^0\s+30000000\s", pcf.read_text(errors="replace"),
                                         re.M) is not None
    folded = ["--folded", str(w / "stacks.folded")] if sampled else []
    # every other output of an analysis of the trace on one analysis (the page computes the
    # steps and the critical path too; the POP trace needs only the trace)
    results["analyze_json"] = run(["analyze", "--json", str(trace), "--iterations",
                                   "--modality", "--critical-path", "--what-if", "gaps=0",
                                   "--what-if", "kernel:*=0.5,nccl=0",
                                   "--path-trace", str(w / "path.prv"),
                                   "--html", str(w / "run.html"), *folded,
                                   "--pop-trace", str(pop)])
    results["check_path"] = run(["check", "-q", str(w / "path.prv")])
    results["check_pop"] = run(["check", "-q", str(pop)])
    results["analyze_scaling"] = run(["analyze", "--scaling", "--json", str(trace),
                                      "--html", str(w / "scaling.html")])
    results["analyze_rules"] = run(["analyze", "-r", "all", "-f", "csv", export])
    window = _middle(export)
    results["translate_window"] = run([export, str(w / "win.prv"), "-q", "--allow-empty",
                                       f"--filter-time={window}"])
    results["check_window"] = run(["check", "-q", str(w / "win.prv")])
    # (the export's window analysed: by both sides of diff_window below)
    # the export against its own translation: every difference must be zero
    results["diff"] = run(["diff", export, str(trace), "--json", "--html",
                           str(w / "diff.html")])
    # a time window is on each side's own clock (nsys' for an export, the trace's for a
    # trace): the same window of the export on both sides
    results["diff_window"] = run(["diff", export, export, "--json", "--no-rules",
                                  "--no-idle", f"--filter-time={window}",
                                  "--trace", str(w / "both.prv")])
    results["check_both"] = run(["check", "-q", str(w / "both.prv")])
    results["prepare"] = run(["prepare", "-q", export, str(part)])
    results["merge"] = run(["merge", "-q", str(part), str(merged)])
    checks = {}
    try:
        analysis = json.loads(results["analyze_json"]["stdout"])
        checks["json_devices"] = len(analysis["devices"])
        # the steps, when a loop was found: each lasts, its GPU busy time within its devices'
        # time
        steps = analysis["iterations"].get("steps", [])
        checks["steps_bad"] = [s["instance"] for s in steps if s["duration"] <= 0
                               or not 0 <= s["gpu_busy"] <= s["device_time"]]
        checks["modality_kernels"] = len(analysis["modality"])
        cp = analysis["critical_path"]
        # the path's composition adds up to the span; a what-if never predicts longer
        checks["path_sum"] = sum(r["time"] for r in cp["by_category"]) - cp["length"]
        checks["what_if_longer"] = [w["what_if"] for w in cp["what_if"]
                                    if w["predicted_ns"] > w["measured_ns"]]
    except (ValueError, KeyError) as e:
        checks["json_devices"] = f"bad JSON: {e}"
    try:
        checks["scaling_columns"] = len(json.loads(results["analyze_scaling"]["stdout"]))
    except ValueError as e:
        checks["scaling_columns"] = f"bad JSON: {e}"
    try:
        for name in ("diff", "diff_window"):
            d = json.loads(results[name]["stdout"])["tables"]
            checks[f"{name}_nonzero"] = [k for k in ("kernels", "nvtx", "categories")
                                         for r in d[k] if r["delta"] != 0]
    except (ValueError, KeyError) as e:
        checks["diff_nonzero"] = checks["diff_window_nonzero"] = f"bad JSON: {e}"
    checks["merge_same_bytes"] = (merged.exists() and trace.exists()
                                  and merged.read_bytes() == trace.read_bytes())
    checks["plot_written"] = (w / "eff.png").exists()
    # the pages (analyze, --scaling, diff --html): whole documents
    checks["pages_bad"] = [n for n in ("run.html", "scaling.html", "diff.html")
                           if not (w / n).exists()
                           or not (w / n).read_text().rstrip().endswith("</html>")]
    # the folded stacks: as many samples as the JSON's profiles count
    checks["folded_off"] = None
    if sampled:
        try:
            lines = (w / "stacks.folded").read_text().splitlines()
            total = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
            checks["folded_off"] = total - json.loads(
                results["analyze_json"]["stdout"])["samples"]["quality"]["samples"]
        except (OSError, ValueError, KeyError, IndexError) as e:
            checks["folded_off"] = f"bad folded stacks: {e}"
    # every view of a finding loads in wxparaver without a question (the GUI's load rule)
    from nsys2prv.paraver.read import event_types
    from nsys2prv.views.cfg import parse_cfg
    from nsys2prv.views.guicheck import question

    loaded = event_types(trace) if trace.exists() else set()
    cfgs = sorted(views.glob("gap_*.cfg"))
    checks["views"] = len(cfgs)
    checks["views_asking"] = [p.name for p in cfgs if question(parse_cfg(p), loaded)]
    for r in results.values():
        r.pop("stdout")
    return {"commands": results, "checks": checks}


def _child(export: str, work: Path, limit: int, parent: int) -> None:
    """In a forked child: the commands on `export` under `limit`, their JSON in
    work/driver.out, then exit (never returns)."""
    code = 1
    try:
        from nsys2prv.lifeline import die_with_parent

        die_with_parent(signal.SIGKILL, parent)  # a test run stopped stops its drivers
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.chdir(work)
        for fd, name in ((1, "driver.stdout"), (2, "driver.err")):  # not the server's lines
            f = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        report = main(export, str(work))
        (work / "driver.out").write_text(json.dumps(report))
        code = 0
    except BaseException:  # noqa: BLE001 - the test reads driver.err
        import traceback

        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def serve(base: str, jobs: int, limit: int, exports: list[str], timeout: float = 900) -> None:
    """`exports` in forked children, `jobs` at a time; a line per export as it ends (a child
    over `timeout` seconds is killed: code -9)."""
    import importlib

    import matplotlib

    matplotlib.use("Agg")
    # what the commands import on their first use (analyze --plot: pyplot)
    for name in ("matplotlib.pyplot", "nsys2prv.analysis.plot", "nsys2prv.cli",
                 "nsys2prv.paraver.kinds", "nsys2prv.run"):
        importlib.import_module(name)

    server = os.getpid()
    pending = list(enumerate(exports))
    running: dict[int, tuple[str, float]] = {}
    while pending or running:
        while pending and len(running) < jobs:
            i, export = pending.pop(0)
            work = Path(base) / f"{i:03d}"
            work.mkdir(parents=True)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(os.path.abspath(export), work, limit, server)
            running[pid] = (export, time.monotonic())
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for p, (_, started) in running.items():
                if now - started > timeout:
                    os.kill(p, 9)
            time.sleep(0.05)
            continue
        export, _ = running.pop(pid)
        print(json.dumps({"export": export, "code": os.waitstatus_to_exitcode(status),
                          "peak": usage.ru_maxrss * 1024}), flush=True)  # kB on Linux


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
    else:
        json.dump(main(sys.argv[1], sys.argv[2]), sys.stdout)
