#!/usr/bin/env python3
"""`check_trace` before and after round 28 side by side: each run in its own process,
alternated, wall / CPU seconds and peak RSS per run; the reports must be equal.

    check_pairs.py OLD_CHECK.py ROUNDS TRACE... > raw.json

OLD_CHECK.py: the module as it was (`git show e4dcc00~1:nsys2prv/paraver/check.py`, its two
relative imports made absolute), imported from a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CHILD = r"""
import importlib.util, json, sys, time
which, old, trace = sys.argv[1:4]
if which == "old":
    spec = importlib.util.spec_from_file_location("check_old", old)
    m = importlib.util.module_from_spec(spec); sys.modules["check_old"] = m
    spec.loader.exec_module(m)
else:
    from nsys2prv.paraver import check as m
r = m.check_trace(trace)
print(json.dumps({"errors": [e.replace(" (of int64)", "") for e in r.errors],
                  "warnings": r.warnings, "counts": r.counts,
                  "event_counts": sorted(r.event_counts.items())}))
"""


def one(which: str, old: str, trace: str) -> dict:
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CHILD, which, old, trace],
                         stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    return {"which": which, "trace": trace, "wall": time.perf_counter() - t0,
            "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
            "exit": os.waitstatus_to_exitcode(status), "report": json.loads(out),
            "load": os.getloadavg()[0]}


def main() -> None:
    old, rounds, traces = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    runs = []
    for trace in traces:
        for r in range(rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            pair = {w: one(w, old, trace) for w in order}
            same = pair["old"]["report"] == pair["new"]["report"]
            for w in order:
                run = pair[w]
                run["same_report"] = same
                run.pop("report")
                runs.append(run)
                print(json.dumps(run), file=sys.stderr)
    json.dump(runs, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
