#!/usr/bin/env python3
"""Start-up: whole-process wall time of translating the shipped sample against importing
polars and numpy alone, measured side by side (issue 20: at most 1.25x).

    benchmarks/startup.py [--runs 20] [--python VENV/bin/python]

Measured as users run it: the checkout installed as a wheel (`pip install .`) into a fresh
venv under build/ (an editable install imports every module through setuptools' finder,
which doubles the time of nsys2prv's own imports), or the venv given with --python.
Each round runs, in alternating order, `python -c "import polars, numpy"`, the console
script `nsys2prv examples/sample.sqlite OUT.prv` (supervised: a parent that forks the
command) and `python -c "import nsys2prv.cli"` (what the parent imports before forking);
output goes to /dev/null, as for a user's redirected run. Prints the medians, minima and
the ratio of the medians (the goal) and of the minima (less sensitive to other load on a
shared machine).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL = 1.25


def wall(command: list[str], cwd: str) -> float:
    """Seconds of one run of `command` (which must succeed) in `cwd` (not the checkout,
    whose nsys2prv/ `python -c` would import instead of the installed one)."""
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   cwd=cwd)
    return time.perf_counter() - start


def installed(venv: Path) -> Path:
    """A venv with this checkout installed as users install it; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)], check=True,
                   stderr=subprocess.DEVNULL)
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)  # pip's in-tree build
    return python


def measure(python: Path, runs: int) -> dict[str, list[float]]:
    """Wall times of each command, `runs` rounds, the order alternating between rounds."""
    script = python.parent / "nsys2prv"
    with tempfile.TemporaryDirectory(prefix="nsys2prv-startup-") as tmp:
        commands = {
            "import polars, numpy": [str(python), "-c", "import polars, numpy"],
            "nsys2prv sample": [str(script), str(ROOT / "examples" / "sample.sqlite"),
                                str(Path(tmp) / "sample.prv")],
            "import nsys2prv.cli": [str(python), "-c", "import nsys2prv.cli"],
        }
        for command in commands.values():  # warm the page cache and .pyc files
            wall(command, tmp)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for r in range(runs):
            order = list(commands) if r % 2 == 0 else list(reversed(commands))
            for name in order:
                times[name].append(wall(commands[name], tmp))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--python", type=Path, help="a venv's python with nsys2prv installed "
                        "(default: install this checkout into build/startup-venv)")
    args = parser.parse_args()
    python = args.python.absolute() if args.python else installed(ROOT / "build" / "startup-venv")
    times = measure(python, args.runs)
    print(f"{args.runs} rounds, {python}")
    print("| command | median s | min s |")
    print("|---|---|---|")
    for name, ts in times.items():
        print(f"| `{name}` | {statistics.median(ts):.3f} | {min(ts):.3f} |")
    base, ours = times["import polars, numpy"], times["nsys2prv sample"]
    ratio = statistics.median(ours) / statistics.median(base)
    print(f"ratio of medians {ratio:.2f} (goal <= {GOAL}), of minima "
          f"{min(ours) / min(base):.2f}")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
