#!/usr/bin/env python3
"""Start-up: whole-process wall and CPU time of translating the shipped sample against
importing polars and numpy alone, measured side by side (issues 20, 48: at most 1.25x).

    benchmarks/startup.py [--runs 20] [--python VENV/bin/python] [--in-process]
                          [--candidate NAME=DIR ...] [--raw FILE.json]

Measured as users run it: the checkout installed as a wheel (`pip install .`) into a fresh
venv under build/ (an editable install imports every module through setuptools' finder,
which doubles the time of nsys2prv's own imports), or the venv given with --python.
Each round runs, in alternating order, `python -c "import polars, numpy"`, the console
script `nsys2prv examples/sample.sqlite OUT.prv` (supervised: a parent that forks the
command) and `python -c "import nsys2prv.cli"` (what the parent imports before forking);
output goes to /dev/null, as for a user's redirected run. `--in-process` adds the console
script run without its supervisor (NSYS2PRV_NO_SUPERVISOR=1); each `--candidate NAME=DIR`
adds the console script with DIR first on PYTHONPATH (DIR/nsys2prv: another version of the
package with its compiled engine; byte-compiled here as pip does), so that designs are compared in one
alternated series. Prints per command the medians and minima of wall time and of CPU time
(user + system of the process and its children: on a shared machine the other load moves
wall times more than CPU times) and, per command, the median of its ratio to `import
polars, numpy` in the same round; the goal is the ratio of the medians of wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL = 1.25
BASE = "import polars, numpy"
OURS = "nsys2prv sample"


def timed(command: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `command` (which must succeed) in `cwd` (not the
    checkout, whose nsys2prv/ `python -c` would import instead of the installed one)."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(command, stdout=null, stderr=null, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode})")
    return wall, usage.ru_utime + usage.ru_stime


def installed(venv: Path) -> Path:
    """A venv with this checkout installed as users install it; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)], check=True,
                   stderr=subprocess.DEVNULL)
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)  # pip's in-tree build
    return python


def measure(python: Path, runs: int, in_process: bool, candidates: dict[str, Path]
            ) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU times of each command, `runs` rounds, the order alternating between
    rounds."""
    script = python.parent / "nsys2prv"
    sample = str(ROOT / "examples" / "sample.sqlite")
    plain = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",
                                                              "NSYS2PRV_NO_SUPERVISOR")}
    with tempfile.TemporaryDirectory(prefix="nsys2prv-startup-") as tmp:
        commands = {
            BASE: ([str(python), "-c", "import polars, numpy"], plain),
            OURS: ([str(script), sample, str(Path(tmp) / "sample.prv")], plain),
            "import nsys2prv.cli": ([str(python), "-c", "import nsys2prv.cli"], plain),
        }
        if in_process:
            commands[f"{OURS}, in-process"] = (
                [str(script), sample, str(Path(tmp) / "inproc.prv")],
                {**plain, "NSYS2PRV_NO_SUPERVISOR": "1"})
        for name, path in candidates.items():
            commands[f"{OURS}: {name}"] = (
                [str(script), sample, str(Path(tmp) / f"{name}.prv")],
                {**plain, "PYTHONPATH": str(path)})
        for command, env in commands.values():  # warm the page cache and .pyc files
            timed(command, env, tmp)
        times = {name: {"wall": [], "cpu": []} for name in commands}
        for r in range(runs):
            order = list(commands) if r % 2 == 0 else list(reversed(commands))
            for name in order:
                wall, cpu = timed(*commands[name], tmp)
                times[name]["wall"].append(wall)
                times[name]["cpu"].append(cpu)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--python", type=Path, help="a venv's python with nsys2prv installed "
                        "(default: install this checkout into build/startup-venv)")
    parser.add_argument("--in-process", action="store_true",
                        help="also run the console script without its supervisor")
    parser.add_argument("--candidate", action="append", default=[], metavar="NAME=DIR",
                        help="also run the console script with DIR first on PYTHONPATH")
    parser.add_argument("--raw", type=Path, help="write every run's times to this JSON file")
    args = parser.parse_args()
    candidates = {}
    for item in args.candidate:
        name, _, path = item.partition("=")
        if not path or not (Path(path) / "nsys2prv" / "__init__.py").is_file():
            parser.error(f"--candidate {item}: expected NAME=DIR with DIR/nsys2prv")
        candidates[name] = Path(path).absolute()
    python = args.python.absolute() if args.python else installed(ROOT / "build" / "startup-venv")
    for path in candidates.values():  # as pip does for an install (PYTHONDONTWRITEBYTECODE)
        subprocess.run([str(python), "-m", "compileall", "-q", str(path / "nsys2prv")],
                       check=True, stdout=subprocess.DEVNULL)
    times = measure(python, args.runs, args.in_process, candidates)
    if args.raw:
        args.raw.write_text(json.dumps(times, indent=1))
    base = times[BASE]
    print(f"{args.runs} rounds, {python}, load average {os.getloadavg()[0]:.1f}")
    print("| command | wall median s | wall min s | CPU median s | CPU min s "
          "| wall ratio (median of rounds) | CPU ratio (median of rounds) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, t in times.items():
        ratios = {k: statistics.median(a / b for a, b in zip(t[k], base[k]))
                  for k in ("wall", "cpu")}
        print(f"| `{name}` | {statistics.median(t['wall']):.3f} | {min(t['wall']):.3f} "
              f"| {statistics.median(t['cpu']):.3f} | {min(t['cpu']):.3f} "
              f"| {ratios['wall']:.2f} | {ratios['cpu']:.2f} |")
    ours = times[OURS]
    ratio = statistics.median(ours["wall"]) / statistics.median(base["wall"])
    print(f"ratio of medians {ratio:.2f} (goal <= {GOAL}), of minima "
          f"{min(ours['wall']) / min(base['wall']):.2f}; CPU: ratio of medians "
          f"{statistics.median(ours['cpu']) / statistics.median(base['cpu']):.2f}")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
