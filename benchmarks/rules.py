"""Wall time and peak RSS of each expert-system rule: nsys2prv.rules against `nsys analyze`.

    .venv/bin/python benchmarks/rules.py EXPORT.sqlite [--nsys nsys2023] [--repeat 3]
                                        [--rules gpu_gaps,gpu_time_util,...]

Each rule runs as its own process under `/usr/bin/time -v` (ours through the `analyze`
entry, `python -m nsys2prv.rules.cli`; nsys with `-q --format csv:noconv`), `--repeat`
times; the table shows the fastest run and its peak RSS, and whether the two printed the
same CSV. `--nsys ''` measures ours alone.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

RULES = ("gpu_gaps", "gpu_time_util", "cuda_api_sync", "cuda_memcpy_sync",
         "cuda_memset_sync", "cuda_memcpy_async")


def measure(cmd: list[str]) -> tuple[float, int, str]:
    """(seconds, peak RSS in KiB, stdout) of one run."""
    with tempfile.NamedTemporaryFile("r") as log:
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", log.name, *cmd],
                              capture_output=True, text=True)
        report = log.read()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    clock = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", report)
    assert clock is not None, report
    hours, minutes, seconds = clock.groups()
    wall = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", report).group(1))
    return wall, rss, proc.stdout


def best(cmd: list[str], repeat: int) -> tuple[float, int, str]:
    return min((measure(cmd) for _ in range(repeat)), key=lambda r: r[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--nsys", default="nsys2023")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rules", default=",".join(RULES))
    args = parser.parse_args()
    print(f"{args.export} (best of {args.repeat})\n")
    print("| rule | nsys2prv.rules | | nsys analyze | | same CSV |")
    print("|---|---:|---:|---:|---:|---|")
    for rule in args.rules.split(","):
        ours = best([sys.executable, "-m", "nsys2prv.rules.cli", "-r", rule, "-f", "csv",
                     "--noconv", str(args.export)], args.repeat)
        row = f"| {rule} | {ours[0]:.2f} s | {ours[1] / 1024:.0f} MiB |"
        if args.nsys:
            theirs = best([args.nsys, "analyze", "-q", "-f", "csv:noconv", "-r", rule,
                           str(args.export)], args.repeat)
            same = ours[2].split() == theirs[2].split()
            row += f" {theirs[0]:.2f} s | {theirs[1] / 1024:.0f} MiB | {same} |"
        else:
            row += " | | |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
