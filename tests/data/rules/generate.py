"""Record what `nsys analyze` prints for the corpus, as the reference tests/test_rules.py
compares nsys2prv.rules against (CI has no nsys).

    python tests/data/rules/generate.py [--corpus ../shared/corpus] [--nsys2023 nsys2023]
                                        [--nsys2022 nsys] [--only EXPORT ...]

For every corpus export it runs each case (a rule spec; see `cases`) through Nsight Systems
2023.4 with `--format csv:noconv` (exact values: bytes in B) and writes
  nsys2023/index.csv         export, spec, status (rows | empty | skipped | error), row
                             count, file with the rows, nsys' message
  nsys2023/<export>/<n>.csv  the CSV nsys printed for case n (cases with rows only)
Where 2023.4 refuses the memcpy/memset rules only because the export predates a column or
enum table it insists on (greenContextId, ENUM_CUDA_MEM_KIND), the same cases are recorded
from nsys 2022.4 (old rule names, same definitions, no Green Context ID column) in nsys2022/.

Cases: the six rules with default options on every export, plus non-default options chosen
from the export's own data: all rows, small gap thresholds, other thresholds and chunk
counts, a start/end window over the middle third of the GPU (or CUDA API) span, only a start
or an end, a process/thread filter, and, on exports with NVTX ranges, an `nvtx=` range
(the most frequent range name, and its second instance).

The same is recorded for the probe exports of nsys2prv.testing.synth_rules (index entries
"probe/<name>.sqlite"), which the tests rebuild from their seeds.
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RULES_2023 = ("cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync", "cuda_api_sync",
              "gpu_gaps", "gpu_time_util")
OLD_NAMES = {"cuda_memcpy_async": "cuda-async-memcpy", "cuda_memcpy_sync": "cuda-sync-memcpy",
             "cuda_memset_sync": "cuda-sync-memset", "cuda_api_sync": "cuda-sync-api",
             "gpu_gaps": "gpu-starv", "gpu_time_util": "gpu-low-util"}
MEMORY_RULES = ("cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync")
# 2023.4 refusals that are about the export's age, not about missing data
OLD_EXPORT = re.compile(r"greenContextId|ENUM_CUDA_MEM_KIND")
SAFE_NVTX = re.compile(r"^[A-Za-z0-9_ @.()\[\]-]+$")  # no ':' ',' '/' or quotes
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET")


def connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def span(con: sqlite3.Connection) -> tuple[int, int] | None:
    """First start and last end of the GPU work, or of the CUDA calls without GPU work."""
    have = tables(con)
    parts = [f"SELECT start, end FROM {t} WHERE start > 0" for t in GPU_TABLES if t in have]
    if not parts and "CUPTI_ACTIVITY_KIND_RUNTIME" in have:
        parts = ["SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME"]
    if not parts:
        return None
    lo, hi = con.execute(f"SELECT min(start), max(end) FROM ({' UNION ALL '.join(parts)})"
                         ).fetchone()
    return (lo, hi) if lo is not None else None


def nvtx_name(con: sqlite3.Connection) -> str | None:
    """The most frequent NVTX range name (NAME or NAME@DOMAIN) that a spec can carry."""
    have = tables(con)
    if "NVTX_EVENTS" not in have:
        return None
    cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    text = "coalesce(n.text, s.value)" if "textId" in cols else "n.text"
    join = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in cols else ""
    rows = con.execute(
        f"SELECT {text} || coalesce('@' || d.text, ''), count(*) FROM NVTX_EVENTS n {join} "
        "LEFT JOIN (SELECT domainId, globalTid, text FROM NVTX_EVENTS WHERE eventType = 75) d "
        "ON d.domainId = n.domainId AND d.globalTid >> 24 = n.globalTid >> 24 "
        "WHERE n.eventType IN (59, 60, 70, 71) GROUP BY 1 ORDER BY 2 DESC, 1").fetchall()
    for name, _ in rows:
        if name and SAFE_NVTX.match(name):
            return name
    return None


def sync_thread(con: sqlite3.Connection) -> tuple[int, int] | None:
    """(pid, tid) of the first synchronisation call, for the process/thread options."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables(con):
        return None
    row = con.execute(
        "SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON s.id = r.nameId WHERE s.value LIKE 'cuda%Synchronize%' ORDER BY r.rowid LIMIT 1"
    ).fetchone()
    return None if row is None else ((row[0] >> 24) & 0xFFFFFF, row[0] & 0xFFFFFF)


def cases(export: Path) -> list[str]:
    """The rule specs recorded for one export."""
    con = connect(export)
    out = list(RULES_2023)
    out += ["gpu_gaps:gap=0:rows=100", "gpu_gaps:gap=1:rows=-1", "gpu_gaps:gap=10:rows=5",
            "gpu_time_util:threshold=80:chunks=7",
            "gpu_time_util:threshold=90:chunks=200:rows=-1",
            "gpu_time_util:threshold=100:chunks=1000:rows=3",
            "gpu_time_util:threshold=30:chunks=1", "gpu_time_util:chunks=0",
            "cuda_api_sync:rows=-1", "cuda_api_sync:rows=1",
            "cuda_memcpy_async:rows=-1", "cuda_memcpy_sync:rows=300",
            "cuda_memset_sync:rows=-1"]
    bounds = span(con)
    if bounds:
        lo, hi = bounds
        a, b = lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3
        window = f"start={a}:end={b}"
        out += [f"{r}:{window}:rows=-1" for r in RULES_2023 if r != "gpu_time_util"]
        out += [f"gpu_time_util:{window}:threshold=90:chunks=50:rows=-1",
                f"gpu_gaps:gap=0:start={a}:rows=20", f"cuda_api_sync:end={b}:rows=20",
                f"gpu_time_util:end={b}:threshold=70"]
    who = sync_thread(con)
    if who:
        out += [f"cuda_api_sync:process={who[0]}:rows=10",
                f"cuda_api_sync:process={who[0]}:thread={who[1]}:rows=10",
                f"cuda_api_sync:thread={who[1] + 1}"]
    name = nvtx_name(con)
    if name:
        out += [f"{r}:nvtx={name}:rows=-1" for r in RULES_2023]
        out += [f"gpu_gaps:gap=0:nvtx={name}/1:rows=-1",
                f"gpu_time_util:nvtx={name}/1:threshold=100:chunks=20:rows=-1",
                f"cuda_api_sync:nvtx={name}/1:rows=-1"]
    con.close()
    return out


def run_nsys(nsys: str, export: Path, spec: str) -> tuple[str, list[str], str]:
    """(status, CSV lines, message) of one rule run."""
    proc = subprocess.run([nsys, "analyze", "--format", "csv:noconv", "--rule", spec,
                           str(export)], capture_output=True, text=True, timeout=1200)
    lines = (proc.stdout + proc.stderr).splitlines()
    body = [ln for ln in lines if not ln.startswith("Processing [")]
    for ln in body:
        if ln.startswith("SKIPPED: "):
            return "skipped", [], ln[len("SKIPPED: "):].replace(str(export), "<export>")
        if ln.startswith("ERROR: "):
            return "error", [], ln[len("ERROR: "):].replace(str(export), "<export>")
    rows = [ln for ln in body if ln.strip()]
    return ("rows" if len(rows) > 1 else "empty"), rows, ""


PROBE_CASES = ["gpu_gaps:gap=0:rows=7", "gpu_gaps:gap=0:rows=-1",
               "gpu_time_util:threshold=100:rows=5", "gpu_time_util:threshold=101:chunks=999",
               "gpu_time_util:threshold=17:chunks=97:rows=-1", "cuda_memcpy_sync:rows=-1",
               "cuda_memset_sync:rows=7", "cuda_api_sync:rows=-1:process=200"]


def record(nsys: str, out: Path, exports: list[tuple[str, Path]],
           spec_of=lambda spec: spec, keep=lambda name, spec: True,
           only: set[str] | None = None) -> None:
    """Run every case of every (name, export) and write `out`/index.csv and the row files;
    with `only`, just those exports, their rows replacing theirs in the existing index
    (the others' recorded rows kept as they are)."""
    old: dict[str, list[list[str]]] = {}
    if only is not None and (out / "index.csv").exists():
        with open(out / "index.csv", newline="") as f:
            for row in list(csv.reader(f))[1:]:
                old.setdefault(row[0], []).append(row)
        for name in only:
            shutil.rmtree(out / name.removesuffix(".sqlite"), ignore_errors=True)
    elif out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "index.csv", "w", newline="") as f:
        index = csv.writer(f, lineterminator="\n")
        index.writerow(["export", "spec", "status", "rows", "file", "message"])
        for name, export in exports:
            if only is not None and name not in only:
                index.writerows(old.get(name, []))
                continue
            stem = name.removesuffix(".sqlite")
            specs = cases(export) + (PROBE_CASES if name.startswith("probe/") else [])
            for n, spec in enumerate(specs):
                if not keep(name, spec):
                    continue
                status, rows, message = run_nsys(nsys, export, spec_of(spec))
                file = ""
                if status == "rows":
                    file = f"{stem}/{n:02d}.csv"
                    (out / file).parent.mkdir(parents=True, exist_ok=True)
                    (out / file).write_text("\n".join(rows) + "\n")
                index.writerow([name, spec, status, max(len(rows) - 1, 0), file, message])
                print(f"{name} {spec}: {status} {message[:60]}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--nsys2023", default="nsys2023")
    parser.add_argument("--nsys2022", default="nsys")
    parser.add_argument("--only", nargs="+", metavar="EXPORT",
                        help="record only these exports (names as in index.csv, e.g. "
                             "exported2023/x.sqlite), keeping the others' recorded rows")
    args = parser.parse_args()
    corpus = args.corpus.resolve()
    exports = [(p.relative_to(corpus).as_posix(), p) for p in sorted(
        p for sub in ("sqlite", "exported", "exported2023") for p in (corpus / sub).glob(
            "*.sqlite"))]
    sys.path.insert(0, str(ROOT))
    from nsys2prv.testing.synth_rules import probe_exports

    probes = tempfile.TemporaryDirectory(prefix="nsys2prv-probes-")
    exports += [(f"probe/{name}.sqlite", path)
                for name, path in probe_exports(probes.name).items()]
    only = set(args.only) if args.only else None
    record(args.nsys2023, HERE / "nsys2023", exports, only=only)

    # where 2023.4 refused a memory rule for the export's age: the 2022.4 answer
    refused = set()
    with open(HERE / "nsys2023" / "index.csv") as f:
        for row in csv.DictReader(f):
            if row["status"] == "skipped" and OLD_EXPORT.search(row["message"]):
                refused.add((row["export"], row["spec"]))

    def old_spec(spec: str) -> str:
        name, _, rest = spec.partition(":")
        return OLD_NAMES[name] + (":" + rest if rest else "")

    def keep(name: str, spec: str) -> bool:
        # 2022.4 has no nvtx=NAME/N instances; its nvtx filter is otherwise the same
        return (name, spec) in refused and "/" not in spec

    record(args.nsys2022, HERE / "nsys2022", exports, old_spec, keep, only=only)
    probes.cleanup()


if __name__ == "__main__":
    main()
