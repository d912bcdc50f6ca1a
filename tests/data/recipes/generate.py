"""Record what NVIDIA's `nsys recipe cuda_gpu_kern_sum` and `nsys recipe diff` give for pairs
of corpus exports, as the reference `nsys2prv diff` is compared against (CI has no nsys).

    python tests/data/recipes/generate.py [--corpus ../shared/corpus] [--nsys nsys2023]
                                          [--python PYTHON3]

`--nsys` is Nsight Systems 2023.4.4 whose `recipe` command works: the `python3` it finds
first on PATH (`--python` puts one there) has numpy, pandas, psutil and pyarrow, and the
empty folder `python/packages/nsys_recipe/third_party` exists in its install (README.md).

The recipes take `.nsys-rep` reports only, and read the SQLite export that sits beside a
report (`X.sqlite` next to `X.nsys-rep`) when it is newer than the report; otherwise they
run `nsys export`. So each export is staged as an empty placeholder `STEM.nsys-rep` with a
copy of the export, `STEM.sqlite`, made after it: the recipe reads the copy and never the
placeholder. `STEM` is the export's file name without `.sqlite`; it is the recipe's `File`.

For every pair (see PAIRS) it writes, under `<pair>/`:
  before.all_stats.csv, before.rank_stats.csv   cuda_gpu_kern_sum --csv of the first export
  after.all_stats.csv,  after.rank_stats.csv    the same for the second export
  diff_before_minus_after.{all,rank}_stats.csv  diff --input BEFORE_OUT AFTER_OUT --csv
  diff_after_minus_before.{all,rank}_stats.csv  diff --input AFTER_OUT BEFORE_OUT --csv
each file exactly as the recipe wrote it, and index.csv (pair, side, export, file, rows)
plus versions.json (nsys, Python, pandas, numpy, pyarrow that produced them).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

# pair name -> (before, after), relative to the corpus, or to the repository for "@/..."
PAIRS = {
    "nsysai_mfu2gpu": ("sqlite/nsysai_mfu2gpu_before.sqlite",
                       "sqlite/nsysai_mfu2gpu_after.sqlite"),
    "fuser_report1": ("sqlite/fuser_report1_2024_6.sqlite",
                      "sqlite/fuser_report1_2025_1.sqlite"),
    "cori_omp_rank0_rank1": ("exported/cori_omp_run1_rank0.nsys2022.4-trim.sqlite",
                             "exported/cori_omp_run1_rank1.nsys2022.4-trim.sqlite"),
    "sample_self": ("@/examples/sample.sqlite", "@/examples/sample.sqlite"),
}
STATS = ("all_stats", "rank_stats")


def resolve(corpus: Path, name: str) -> Path:
    return ROOT / name[2:] if name.startswith("@/") else corpus / name


ENV = dict(os.environ)


def run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1200, env=ENV)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


def stage(export: Path, folder: Path) -> Path:
    """An empty STEM.nsys-rep and, made after it, STEM.sqlite (a copy): the recipe's input."""
    folder.mkdir(parents=True)
    stem = export.name.removesuffix(".sqlite")
    report = folder / f"{stem}.nsys-rep"
    report.touch()
    time.sleep(0.05)
    shutil.copyfile(export, folder / f"{stem}.sqlite")
    assert os.path.getctime(report) < os.path.getctime(folder / f"{stem}.sqlite")
    return report


def kern_sum(nsys: str, export: Path, work: Path, side: str) -> Path:
    report = stage(export, work / f"in_{side}")
    out = work / f"out_{side}"
    run([nsys, "recipe", "cuda_gpu_kern_sum", "--input", str(report), "--output", str(out),
         "--csv"], work)
    return out


def diff(nsys: str, first: Path, second: Path, work: Path, name: str) -> Path:
    """`diff` takes no --output: it writes cuda_gpu_kern_sum-diff[-N] in its working folder."""
    cwd = work / name
    cwd.mkdir()
    run([nsys, "recipe", "diff", "--input", str(first), str(second), "--csv"], cwd)
    (out,) = [p for p in cwd.iterdir() if p.is_dir()]
    return out


def rows(path: Path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.reader(f)) - 1


def versions(nsys: str, env: dict) -> dict:
    ver = subprocess.run([nsys, "--version"], capture_output=True, text=True, env=env)
    probe = ("import json, sys, numpy, pandas, pyarrow, psutil; print(json.dumps({'python': "
             "sys.version.split()[0], 'numpy': numpy.__version__, 'pandas': pandas.__version__,"
             " 'pyarrow': pyarrow.__version__, 'psutil': psutil.__version__}))")
    py = subprocess.run(["python3", "-c", probe], capture_output=True, text=True, env=env)
    if py.returncode != 0:
        sys.exit(f"python3 on PATH cannot run the recipes:\n{py.stderr}")
    return {"nsys": ver.stdout.strip(), **json.loads(py.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--nsys", default="nsys2023")
    parser.add_argument("--python", help="the python3 (with numpy, pandas, psutil, pyarrow) "
                        "to run the recipes on: its folder goes first on PATH for nsys")
    args = parser.parse_args()
    corpus = args.corpus.resolve()
    env = dict(os.environ)
    if args.python:
        env["PATH"] = str(Path(args.python).absolute().parent) + os.pathsep + env["PATH"]
    info = versions(args.nsys, env)
    ENV.update(env)

    index = [["pair", "side", "export", "file", "rows"]]
    with tempfile.TemporaryDirectory(prefix="nsys2prv-recipes-") as tmp:
        for pair, (before, after) in PAIRS.items():
            work = Path(tmp) / pair
            work.mkdir()
            dest = HERE / pair
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir()
            outs = {side: kern_sum(args.nsys, resolve(corpus, name), work, side)
                    for side, name in (("before", before), ("after", after))}
            outs["diff_before_minus_after"] = diff(args.nsys, outs["before"], outs["after"],
                                                   work, "d1")
            outs["diff_after_minus_before"] = diff(args.nsys, outs["after"], outs["before"],
                                                   work, "d2")
            for side, out in outs.items():
                export = {"before": before, "after": after}.get(side, "")
                for stats in STATS:
                    file = f"{side}.{stats}.csv"
                    shutil.copyfile(out / f"{stats}.csv", dest / file)
                    index.append([pair, side, export, f"{pair}/{file}", rows(dest / file)])
            print(f"{pair}: done", file=sys.stderr)
    with open(HERE / "index.csv", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(index)
    (HERE / "versions.json").write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    main()
