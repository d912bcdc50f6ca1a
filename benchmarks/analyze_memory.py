#!/usr/bin/env python3
"""Memory of `nsys2prv analyze` over time (issue 48): peak RSS, CPU time and RSS against
progress, on an export or a trace, per section.

    # the command line, its process tree polled every 0.1 s (what a user's run takes)
    python benchmarks/analyze_memory.py cli OUT.json -- analyze --no-idle bench-10M-m.sqlite
    # in this process, with the phase each sample fell in (what holds the memory)
    python benchmarks/analyze_memory.py phases OUT.json bench-10M-m.sqlite [--no-layers ...]
    # RSS against progress of several runs, one picture
    python benchmarks/analyze_memory.py plot OUT.png A.json B.json ...

`cli` records the summed RSS and Pss of the process and its descendants (the supervised child does
the work), the largest process's peak (rusage, as GNU time reports it) and user + system
CPU time. `phases` runs `Run.analysis` in-process and names, for every sample, the
innermost of the analysis' steps it fell in (`PHASES`: functions wrapped for the run), with
the RSS each step started and peaked at: where the memory goes. Nothing here is part of
the package or the test suite.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTERVAL = 0.1

# (module, attribute): the steps of an analysis whose memory `phases` tells apart
PHASES = (
    ("nsys2prv.api", "translate_stream"),
    ("nsys2prv.analysis.activities.ActivityCollector", "result"),
    ("nsys2prv.analysis.steps", "pick"),
    ("nsys2prv.analysis.steps", "candidates"),
    ("nsys2prv.analysis.layers", "analyze_layers"),
    ("nsys2prv.analysis.layers", "project_ranges"),
    ("nsys2prv.analysis.idle", "explain"),
    ("nsys2prv.analysis.iterations", "iteration_report"),
    ("nsys2prv.analysis.kernel_metrics", "kernel_metrics"),
    ("nsys2prv.analysis.kernel_metrics", "_fit"),
    ("nsys2prv.analysis.kernel_metrics", "_interference"),
    ("nsys2prv.analysis.launch", "launch_tables"),
    ("nsys2prv.analysis.modality", "kernel_modality"),
)


def _tree(root: int, each: dict | None = None) -> tuple[int, int]:
    """Summed VmRSS and Pss (kB) of `root` and its descendants (`each`: pid -> its VmRSS,
    filled where given). RSS counts the pages a
    process shares with another (the libraries' code, what a forked child has not written)
    in each of them; Pss divides them between the sharers: their sum is what the tree takes
    from the machine (as a cgroup's memory limit counts it)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    total, pss, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        if each is not None:
                            each[pid] = int(line.split()[1])
                        break
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                        break
        except OSError:
            pass
    return total, pss


def cli(out: Path, args: list[str], exe: str) -> dict:
    """`nsys2prv ARGS` with its tree's RSS polled."""
    t0 = time.monotonic()
    p = subprocess.Popen([exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    series = []
    procs: dict[int, dict] = {}  # pid -> its peak and when it was seen
    while p.poll() is None:
        t, each = round(time.monotonic() - t0, 2), {}
        series.append((t, *_tree(p.pid, each)))
        for pid, kb in each.items():
            seen = procs.setdefault(pid, {"pid": pid, "first_s": t, "peak_mb": 0.0})
            seen["last_s"] = t
            if kb / 1024 > seen["peak_mb"]:
                seen["peak_mb"], seen["peak_s"] = round(kb / 1024, 1), t
        time.sleep(INTERVAL)
    _, status, ru = os.wait4(p.pid, 0) if p.returncode is None else (0, 0, None)
    wall = time.monotonic() - t0
    ru = ru or resource.getrusage(resource.RUSAGE_CHILDREN)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    res = {"mode": "cli", "args": args, "wall_s": round(wall, 2),
           "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "user_s": round(ru.ru_utime, 2),
           "sys_s": round(ru.ru_stime, 2), "max_rss_mb": round(ru.ru_maxrss / 1024, 1),
           "tree_peak_mb": round(max((r for _, r, _ in series), default=0) / 1024, 1),
           "tree_pss_peak_mb": round(max((q for _, _, q in series), default=0) / 1024, 1),
           "exit": p.returncode, "stderr_tail": err[-400:],
           "loadavg": round(os.getloadavg()[0], 2),
           # each process of the tree: its peak RSS (polled) and when it lived and peaked
           "processes": sorted(procs.values(), key=lambda x: -x["peak_mb"]),
           "series": [(t, round(r / 1024, 1), round(q / 1024, 1)) for t, r, q in series]}
    out.write_text(json.dumps(res))
    return res


def _resolve(path: str):
    """The object at a dotted path (a module, then attributes)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(path)


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def phases(out: Path, source: str, options: dict) -> dict:
    """`Run.analysis(**options)` in this process, each RSS sample with its phase."""
    import nsys2prv

    stack: list[str] = ["(start)"]
    marks: list[tuple[float, str, str, int]] = []  # time, phase, enter/exit, rss kB
    t0 = time.monotonic()

    def wrap(owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def wrapped(*a, **k):
            stack.append(label)
            marks.append((time.monotonic() - t0, label, "enter", _rss_kb()))
            try:
                return fn(*a, **k)
            finally:
                marks.append((time.monotonic() - t0, label, "exit", _rss_kb()))
                stack.pop()

        setattr(owner, name, wrapped)

    for mod, attr in PHASES:
        try:
            owner = _resolve(mod)
        except (ImportError, AttributeError):
            continue
        if hasattr(owner, attr):
            wrap(owner, attr, f"{mod.rsplit('.', 1)[-1]}.{attr}")
    series: list[tuple[float, int, str]] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            series.append((time.monotonic() - t0, _rss_kb(), stack[-1]))
            time.sleep(INTERVAL / 2)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    c0 = time.process_time()
    with nsys2prv.load(source) as run:
        run.analysis(**options)
    cpu = time.process_time() - c0
    done.set()
    th.join()
    per: dict[str, int] = {}
    for _, rss, ph in series:
        per[ph] = max(per.get(ph, 0), rss)
    res = {"mode": "phases", "source": source, "options": options,
           "wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(cpu, 2),
           "peak_mb": round(max((r for _, r, _ in series), default=0) / 1024, 1),
           "hwm_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "peak_by_phase_mb": {k: round(v / 1024, 1) for k, v in
                                sorted(per.items(), key=lambda kv: -kv[1])},
           "marks": [(round(t, 2), p, e, round(r / 1024, 1)) for t, p, e, r in marks],
           "series": [(round(t, 2), round(r / 1024, 1), p) for t, r, p in series]}
    out.write_text(json.dumps(res))
    return res


def plot(out: Path, runs: list[Path], title: str = "", pss: bool = False) -> None:
    """RSS (MB) against progress (share of the run's wall time), one line per run; `pss`:
    the tree's summed Pss instead (`cli` runs that recorded it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5), constrained_layout=True)
    for path in runs:
        r = json.loads(path.read_text())
        s = r["series"]
        if not s:
            continue
        wall = max(r["wall_s"], s[-1][0], 1e-9)
        at = 2 if pss else 1
        if pss and (len(s[0]) < 3 or isinstance(s[0][2], str)):
            continue  # no Pss recorded
        peak = r.get("tree_pss_peak_mb") if pss else r.get("tree_peak_mb", r.get("peak_mb"))
        ax.plot([x[0] / wall for x in s], [x[at] for x in s],
                label=f"{r.get('label') or path.stem}: peak {peak:.0f} MB, "
                      f"{r['cpu_s']:.0f} CPU-s")
    ax.axhline(1024, color="grey", linestyle="--", linewidth=1)
    ax.text(0.0, 1030, "1 GiB", color="grey", va="bottom")
    ax.set_xlabel("progress (share of the run's wall time)")
    ax.set_ylabel("Pss (MB, process tree)" if pss else "RSS (MB, process tree)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "nsys2prv analyze: memory over time")
    ax.legend(loc="upper left", fontsize=8)
    fig.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, rest = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("cli", "phases", "plot"))
    ap.add_argument("out", type=Path)
    ap.add_argument("inputs", nargs="*")
    ap.add_argument("--label", default="")
    ap.add_argument("--title", default="")
    ap.add_argument("--exe", default=str(Path(sys.executable).parent / "nsys2prv"))
    ap.add_argument("--pss", action="store_true", help="plot: the tree's Pss, not its RSS")
    ap.add_argument("--no-idle", action="store_true")
    ap.add_argument("--no-layers", action="store_true")
    ap.add_argument("--no-kernel-metrics", action="store_true")
    ap.add_argument("--iterations", action="store_true")
    a = ap.parse_args(argv)
    if a.mode == "cli":
        res = cli(a.out, rest, a.exe)
    elif a.mode == "phases":
        opts = {"explain": not a.no_idle, "kernel_metrics": not a.no_kernel_metrics,
                "layers": None if a.no_layers else "",
                "iterations": "" if a.iterations else None}
        res = phases(a.out, a.inputs[0], opts)
    else:
        plot(a.out, [Path(p) for p in a.inputs], a.title, a.pss)
        return 0
    if a.label:
        res["label"] = a.label
        a.out.write_text(json.dumps(res))
    print(json.dumps({k: v for k, v in res.items() if k not in ("series", "marks")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
