"""The analyses' numbers before and after a change: `nsys2prv analyze --json` (default
sections, `--iterations`, `--modality`, the critical path with its what-ifs and steps) on
every corpus export, on the cori_omp ranks merged, on a few translated traces (there also
the critical path's trace, `--path-trace`, compared byte for byte), `--scaling --json` and
`diff --json` on a few pairs.

    python tools/json_baseline.py record ../json-baseline    # the code as it is
    python tools/json_baseline.py compare ../json-baseline   # again, and compare
    python tools/json_baseline.py compare DIR --ignore-key samples --ignore-key findings

`record` stores each case's stdout, stderr and exit code in DIR (outside the repository:
the corpus is not the project's); `compare` runs every case again into DIR/../<name>-new
and compares byte for byte, after removing timing fields (keys named in TIMING, anywhere)
and the top-level keys named with `--ignore-key` (new keys other work adds to --json).
Exit 1 when anything differs, naming each case and the first differing path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("NSYS2PRV_CORPUS", ROOT.parent / "shared" / "corpus"))
# keys whose values are measured times of the run itself, not of the trace (none today;
# the comparison drops them wherever they are)
TIMING = frozenset({"wall_s", "cpu_s", "seconds", "elapsed_s", "took_s"})
# (after the inputs: --iterations takes an optional RANGE)
VARIANTS = {"default": [], "iterations": ["--iterations"], "modality": ["--modality"],
            "critical": ["--critical-path", "--what-if", "kernel:*=0.5", "--what-if",
                         "gaps=0", "--what-if", "nccl=0,rank:0=0.5", "--iterations"]}
# the files a case writes beside its output, compared byte for byte ({out}: the case's
# directory, {name}: its name)
WRITTEN = (".path.prv", ".path.pcf", ".path.row")
# (name, before, after): diff pairs of the corpus (a real before/after, two ranks of one
# run, two nsys versions of one program)
DIFF_PAIRS = (
    ("nsysai_mfu2gpu", "sqlite/nsysai_mfu2gpu_before.sqlite",
     "sqlite/nsysai_mfu2gpu_after.sqlite"),
    ("cori_rank0_rank6", "exported/cori_omp_run1_rank0.nsys2022.4-trim.sqlite",
     "exported/cori_omp_run1_rank6.nsys2022.4-trim.sqlite"),
    ("alcf_seqpar", "exported2023/alcf_seqpar_rank0.nsys2023.4.sqlite",
     "exported2023/alcf_seqpar_rank4.nsys2023.4.sqlite"),
    ("fuser_versions", "sqlite/fuser_report1_2024_6.sqlite",
     "sqlite/fuser_report1_2025_1.sqlite"),
)
# exports also analysed as translated traces (the trace is written once into DIR/traces)
TRACED = ("sqlite/nsysai_mfu2gpu_before.sqlite", "exported2023/aiprof_opt2.nsys2023.4.sqlite",
          "exported/cumat_mpi_4gpu.nsys2022.4.sqlite",
          "sqlite/ncar_miniweather_baseline.sqlite")


def _exports() -> list[Path]:
    out = []
    for sub in ("sqlite", "exported", "exported2023"):
        out += sorted((CORPUS / sub).glob("*.sqlite"))
    return out


def cases(traces: Path) -> list[tuple[str, list[str]]]:
    """(case name, nsys2prv arguments) of every case."""
    out = []
    for db in _exports():
        name = f"{db.parent.name}__{db.name}"
        for variant, extra in VARIANTS.items():
            out.append((f"analyze__{name}__{variant}", ["analyze", "--json", str(db), *extra]))
    cori = sorted((CORPUS / "exported").glob("cori_omp_run1_rank*.sqlite"))
    if cori:
        for variant, extra in VARIANTS.items():
            out.append((f"analyze__cori_omp_merged__{variant}",
                        ["analyze", "--json", *map(str, cori), *extra]))
        out.append(("scaling__cori_1_2_8", [
            "analyze", "--scaling", "--json", str(cori[0]),
            f"@{traces / 'cori2.list'}", f"@{traces / 'cori8.list'}"]))
    for rel in TRACED:
        db = CORPUS / rel
        if db.exists():
            prv = traces / (db.name.split(".")[0] + ".prv")
            for variant, extra in VARIANTS.items():
                out.append((f"trace__{db.name.split('.')[0]}__{variant}",
                            ["analyze", "--json", str(prv), *extra]))
            out.append((f"trace__{db.name.split('.')[0]}__critical_trace",
                        ["analyze", "--json", str(prv), *VARIANTS["critical"],
                         "--path-trace", "{out}/{name}.path.prv"]))
    for name, a, b in DIFF_PAIRS:
        if (CORPUS / a).exists() and (CORPUS / b).exists():
            out.append((f"diff__{name}", ["diff", "--json", str(CORPUS / a), str(CORPUS / b)]))
    return out


def _prepare(traces: Path, exe: str) -> None:
    """The translated traces and the lists of the scaling runs (once per directory)."""
    traces.mkdir(parents=True, exist_ok=True)
    cori = sorted((CORPUS / "exported").glob("cori_omp_run1_rank*.sqlite"))
    (traces / "cori2.list").write_text("".join(f"{p}\n" for p in cori[:2]))
    (traces / "cori8.list").write_text("".join(f"{p}\n" for p in cori))
    for rel in TRACED:
        db = CORPUS / rel
        prv = traces / (db.name.split(".")[0] + ".prv")
        if db.exists() and not prv.exists():
            subprocess.run([exe, str(db), str(prv)], check=True, stdout=subprocess.DEVNULL)


def _run(exe: str, out: Path, case: tuple[str, list[str]]) -> str:
    name, args = case
    args = [a.format(out=out, name=name) if "{out}" in a else a for a in args]
    p = subprocess.run([exe, *args], capture_output=True, text=True,
                       env={**os.environ, "NO_COLOR": "1"})
    (out / f"{name}.json").write_text(p.stdout)
    (out / f"{name}.err").write_text(f"rc={p.returncode}\n{p.stderr}")
    return f"{name}: rc={p.returncode}"


def _strip(value, top: bool, ignore: frozenset[str]):
    """`value` without the timing keys (anywhere) and the ignored keys (top level)."""
    if isinstance(value, dict):
        return {k: _strip(v, False, ignore) for k, v in value.items()
                if k not in TIMING and not (top and k in ignore)}
    if isinstance(value, list):
        return [_strip(v, False, ignore) for v in value]
    return value


def _first_difference(a, b, path: str = "") -> str:
    if type(a) is not type(b):
        return f"{path or '/'}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}/{k}: only {'before' if k in a else 'after'}"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}/{k}")
        if list(a) != list(b):
            return f"{path or '/'}: key order"
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path or '/'}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path or '/'}: {str(a)[:80]!r} != {str(b)[:80]!r}"


def _canonical(text: str, ignore: frozenset[str]) -> tuple[str, object]:
    """The text to compare (the JSON re-dumped without the dropped keys, key order kept;
    the text itself where it is not JSON) and the parsed value (None: not JSON)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text, None
    value = _strip(value, True, ignore)
    return json.dumps(value, indent=2, sort_keys=False), value


def compare(old: Path, new: Path, names: list[str], ignore: frozenset[str]) -> list[str]:
    """What differs between the outputs of `names` in `old` and `new` (one line each)."""
    bad = []
    for name in names:
        for ext in WRITTEN:
            a, b = old / f"{name}{ext}", new / f"{name}{ext}"
            if a.exists() != b.exists() or (a.exists() and a.read_bytes() != b.read_bytes()):
                bad.append(f"{name}{ext}: differs")
        for ext in (".json", ".err"):
            a = (old / f"{name}{ext}").read_text() if (old / f"{name}{ext}").exists() \
                else None
            b = (new / f"{name}{ext}").read_text()
            if a is None:
                bad.append(f"{name}{ext}: not in the baseline")
                continue
            if ext == ".err":  # the exit code, and the error line of a failed case
                if a.split("\n", 1)[0] != b.split("\n", 1)[0] or \
                        (not a.startswith("rc=0") and a != b):
                    bad.append(f"{name}: {a.splitlines()[0]} -> {b.splitlines()[0]}")
                continue
            ta, va = _canonical(a, ignore)
            tb, vb = _canonical(b, ignore)
            if ta != tb:
                where = _first_difference(va, vb) if va is not None and vb is not None \
                    else "text differs"
                bad.append(f"{name}: {where}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("record", "compare", "list"))
    ap.add_argument("dir", type=Path, help="where the baseline is (outside the repository)")
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--ignore-key", action="append", default=[],
                    help="a top-level --json key to leave out of the comparison (repeat)")
    ap.add_argument("-j", type=int, default=1, help="cases run at once")
    ap.add_argument("--exe", default=str(Path(sys.executable).parent / "nsys2prv"))
    ap.add_argument("--out", type=Path, default=None,
                    help="where `compare` writes the new outputs (default: DIR-new beside DIR)")
    args = ap.parse_args(argv)
    base = args.dir.resolve()
    traces = base / "traces"
    todo = [c for c in cases(traces) if args.only in c[0]]
    if args.action == "list":
        for name, a in todo:
            print(name, " ".join(a))
        return 0
    _prepare(traces, args.exe)
    out = base if args.action == "record" else (
        args.out.resolve() if args.out else base.parent / f"{base.name}-new")
    if args.action == "compare":
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(1, args.j)) as pool:
        for line in pool.map(lambda c: _run(args.exe, out, c), todo):
            print(line, flush=True)
    if args.action == "record":
        print(f"{len(todo)} cases recorded in {out}")
        return 0
    bad = compare(base, out, [c[0] for c in todo], frozenset(args.ignore_key))
    for line in bad:
        print("DIFFERS", line)
    print(f"{len(todo) - len({b.split(':')[0].split('.')[0] for b in bad})} of {len(todo)} "
          f"cases equal")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
