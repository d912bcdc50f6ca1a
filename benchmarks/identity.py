#!/usr/bin/env python3
"""Byte identity of our outputs across code changes.

    benchmarks/identity.py record hashes.json     # translate every input, store sha256s
    benchmarks/identity.py compare hashes.json    # translate again, list what differs

Inputs: every SQLite export of ../shared/corpus (one trace each), the 8-rank corpus set and
the two alcf ranks merged, the shipped sample, the recorded MPI runs of tests/data (each,
and the four 2023.4 ranks merged), and a few synthetic exports of the project's generators
(GPU-rich: overlap lanes, NCCL, graphs, metrics; CPU samples and call stacks). Each is
translated in a fresh process with `-q`; the .prv, .pcf and .row are hashed.
`benchmarks/identity-hashes.json` is the table of the code before the engine rewrite (issue
12); a difference must be explained in the commit that makes it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = ROOT.parent / "shared" / "corpus"
PY = sys.executable

def inputs() -> list[tuple[str, list[Path]]]:
    """(label, input files) of every translation."""
    out: list[tuple[str, list[Path]]] = [("sample", [ROOT / "examples" / "sample.sqlite"])]
    rec = sorted((ROOT / "tests" / "data" / "recorded").glob("*.sqlite"))
    out += [(f"recorded/{p.name}", [p]) for p in rec]
    ranks = [p for p in rec if "rank" in p.name]
    if ranks:
        out.append(("recorded/merged-4-ranks", ranks))
    if CORPUS.is_dir():
        for p in sorted(CORPUS.glob("*/*.sqlite")):
            out.append((str(p.relative_to(CORPUS)), [p]))
        cori = sorted(CORPUS.glob("exported/cori_omp_run1_rank*.sqlite"))
        if cori:
            out.append(("merged/cori_omp_run1_8ranks", cori))
        alcf = sorted(CORPUS.glob("*/alcf_seqpar_rank*.sqlite"))
        if len(alcf) >= 2:
            out.append(("merged/alcf_seqpar", alcf[:2]))
    return out


def synthetic(work: Path) -> list[tuple[str, list[Path]]]:
    """Synthetic exports from the project's generators (made fresh, deterministic)."""
    script = r"""
import json, subprocess, sys
from pathlib import Path
from nsys2prv.testing import multi, synth_gpu as sg, synth_metrics as sm, synth_samples as ss
from nsys2prv.testing.synth import write_export
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
made = {}
made["nccl-binary"] = sg.nccl_export(out / "nccl-b.sqlite", "binary")
made["nccl-json"] = sg.nccl_export(out / "nccl-j.sqlite", "json")
made["graphs"] = sg.graph_export(out / "graphs.sqlite")
made["graphs-3.0.0"] = sg.graph_export(out / "graphs300.sqlite", layout="3.0.0")
made["gpu-memory"] = sg.memory_export(out / "mem.sqlite")
made["dnn"] = sg.dnn_export(out / "dnn.sqlite")
spec, ms = sm.two_gpu_scenario()
made["metrics-native"] = sm.add_native_metrics(write_export(out / "mn.sqlite", spec), ms)
spec, ms = sm.two_gpu_scenario()
made["metrics-json"] = sm.add_json_metrics(write_export(out / "mj.sqlite", spec), ms)
spec, recs = sm.openacc_scenario()
made["openacc"] = sm.add_openacc(write_export(out / "acc.sqlite", spec), recs)
made["samples-edge"] = ss.edge_export(out / "samples-edge.sqlite")
made["samples-starved"] = ss.scenario_export(out / "samples-starved.sqlite", "starved")
for info, spec in multi.job():
    made[f"multi-rank{info.rank}"] = write_export(out / f"multi{info.rank}.sqlite", spec)
gen = Path(sys.argv[2]) / "generate.py"
subprocess.run([sys.executable, str(gen), str(out / "gen.sqlite"), "-q", "--preset", "100K"],
               check=True, capture_output=True)
made["generated-100K"] = out / "gen.sqlite"
subprocess.run([sys.executable, str(gen), str(out / "gen-s.sqlite"), "-q", "--preset", "100K",
                "--samples", "20000", "--frames", "40"], check=True, capture_output=True)
made["generated-100K-samples"] = out / "gen-s.sqlite"
print(json.dumps({k: str(v) for k, v in made.items()}))
"""
    r = subprocess.run([PY, "-c", script, str(work), str(HERE)], capture_output=True, text=True,
                       cwd=str(ROOT))
    if r.returncode != 0:
        print(f"(no synthetic set: {r.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
        return []
    made = json.loads(r.stdout.strip().splitlines()[-1])
    out = [(f"synthetic/{k}", [Path(v)]) for k, v in sorted(made.items())
           if not k.startswith("multi-")]
    ranks = [Path(v) for k, v in sorted(made.items()) if k.startswith("multi-")]
    return out + [("synthetic/multi-4-ranks", ranks)]


def sha(path: Path) -> str | None:
    if not path.exists():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def translate_all(extra_args: list[str]) -> dict[str, dict]:
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="nsys2prv-identity-") as tmp:
        work = Path(tmp)
        todo = inputs() + synthetic(work / "synth")
        for i, (label, files) in enumerate(todo):
            prefix = work / f"t{i}"
            t0 = time.perf_counter()
            r = subprocess.run([PY, "-m", "nsys2prv", *map(str, files), f"{prefix}.prv", "-q",
                                *extra_args], capture_output=True, text=True, cwd=str(ROOT))
            entry: dict = {"exit": r.returncode,
                           "seconds": round(time.perf_counter() - t0, 2)}
            if r.returncode == 0:
                for ext in ("prv", "pcf", "row"):
                    entry[ext] = sha(Path(f"{prefix}.{ext}"))
            else:
                entry["error"] = r.stderr.strip()[-300:]
            results[label] = entry
            print(f"{label}: {entry['exit']} {entry['seconds']} s", file=sys.stderr)
    return results


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("record", "compare"):
        sys.exit(__doc__)
    mode, table = sys.argv[1], Path(sys.argv[2])
    extra = sys.argv[3:]
    now = translate_all(extra)
    if mode == "record":
        table.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"{len(now)} translations recorded in {table}")
        return
    before = json.loads(table.read_text())
    differ = []
    for label in sorted(set(before) | set(now)):
        a, b = before.get(label), now.get(label)
        if a is None or b is None:
            differ.append(f"{label}: only {'now' if a is None else 'before'}")
            continue
        bad = [k for k in ("exit", "prv", "pcf", "row") if a.get(k) != b.get(k)]
        if bad:
            differ.append(f"{label}: {', '.join(bad)} differ")
    same = len(set(before) & set(now)) - sum(1 for d in differ if "differ" in d)
    print(f"{same} identical, {len(differ)} different")
    for d in differ:
        print("  " + d)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
