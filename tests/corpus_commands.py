"""Run every user-facing command on one export, as `nsys2prv ...` would (tests/test_commands.py).

    python tests/corpus_commands.py EXPORT WORKDIR

Each command goes through `nsys2prv.cli.main(argv)` in this one process (one interpreter
start for all of them); stdout is captured per command. Prints one JSON object: per command
its exit code, the last line it wrote on stderr and its wall time, and a few checks that need
the outputs (the --json output parses, the merged trace has the bytes of the translated one,
the POP copy validates).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
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
    trace, pop, merged, part = w / "t.prv", w / "pop.prv", w / "m.prv", w / "part"
    results = {}
    results["translate"] = run([export, str(trace), "-q"])
    results["check"] = run(["check", "-q", str(trace)])
    results["analyze"] = run(["analyze", export, "--plot", str(w / "eff.png"),
                              "--iterations", "--modality", "--html", str(w / "run.html")])
    # the folded stacks where the trace has CPU samples (--folded says none otherwise)
    pcf = trace.with_suffix(".pcf")
    sampled = pcf.exists() and re.search(r"^0\s+30000000\s", pcf.read_text(errors="replace"),
                                         re.M) is not None
    folded = ["--folded", str(w / "stacks.folded")] if sampled else []
    results["analyze_json"] = run(["analyze", "--json", str(trace), "--iterations",
                                   "--modality", "--critical-path", "--what-if", "gaps=0",
                                   "--what-if", "kernel:*=0.5,nccl=0",
                                   "--path-trace", str(w / "path.prv"), *folded])
    results["check_path"] = run(["check", "-q", str(w / "path.prv")])
    results["analyze_pop"] = run(["analyze", str(trace), "--pop-trace", str(pop)])
    results["check_pop"] = run(["check", "-q", str(pop)])
    results["analyze_scaling"] = run(["analyze", "--scaling", "--json", str(trace),
                                      "--html", str(w / "scaling.html")])
    results["analyze_views"] = run(["analyze", str(trace), "--views", str(w / "views"),
                                    "--top", "3"])
    results["analyze_rules"] = run(["analyze", "-r", "all", "-f", "csv", export])
    window = _middle(export)
    results["translate_window"] = run([export, str(w / "win.prv"), "-q", "--allow-empty",
                                       f"--filter-time={window}"])
    results["check_window"] = run(["check", "-q", str(w / "win.prv")])
    results["analyze_window"] = run(["analyze", "--allow-empty", f"--filter-time={window}",
                                     export])
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
    views = sorted((w / "views").glob("gap_*.cfg"))
    checks["views"] = len(views)
    checks["views_asking"] = [p.name for p in views if question(parse_cfg(p), loaded)]
    for r in results.values():
        r.pop("stdout")
    return {"commands": results, "checks": checks}


if __name__ == "__main__":
    json.dump(main(sys.argv[1], sys.argv[2]), sys.stdout)
