"""Record what NVIDIA's `nsys recipe nvtx_gpu_proj_trace` and `nsys recipe nvtx_gpu_proj_sum`
give on the corpus exports, as the reference for nsys2prv's NVTX GPU projection (CI has no nsys).

    python tests/data/nvtx_proj/generate.py [--corpus ../shared/corpus] [--nsys nsys2023]
                                            [--python PYTHON3]

`--nsys` is Nsight Systems 2023.4.4 whose `recipe` command works (README.md, "Installing and
running"); `--python` is a python3 with numpy, pandas<2, pyarrow and psutil: its folder goes
first on PATH for nsys, and this script also uses it to write the Parquet inputs and to turn
the trace recipe's Parquet output into CSV.

Which exports: every `.sqlite` in the corpus folders sqlite/, exported/ and exported2023/ whose
NVTX_EVENTS and CUPTI_ACTIVITY_KIND_RUNTIME tables both have rows, plus the report
reports/aiprof_opt2.nsys-rep itself (REPORTS), plus the multi-report runs in MULTI and the
synthetic probes built here (PROBES).

The recipes take `.nsys-rep` reports only. For an export, the report is staged as an empty
placeholder `STEM.nsys-rep` and, made after it (later ctime), the two forms the recipes read
instead of exporting the report themselves:
  * `STEM.sqlite`, a copy of the export: read by nvtx_gpu_proj_trace (an SQL report run through
    nsys_recipe.data_service.StatsService);
  * `STEM_pqtdir/<TABLE>.parquet` for StringIds, NVTX_EVENTS, CUPTI_ACTIVITY_KIND_RUNTIME,
    _KERNEL, _MEMCPY, _MEMSET: read by nvtx_gpu_proj_sum (nsys_recipe.data_service.DataService
    defaults to the "parquetdir" format). Each is the export's table with all its columns,
    typed from the declared SQLite type (INTEGER -> int64, REAL -> double, TEXT -> string),
    except the serialized ids globalTid, globalPid, endGlobalTid: uint64, as nsys writes them
    (mixing int64 and uint64 would make pandas concatenate the GPU tables' globalPid as float,
    and the recipe's `>>` then fails).
    A GPU table missing from the export is written empty (start, end, correlationId,
    globalPid), as `nsys export --type parquetdir` does for a report without such activity.
`STEM` is the export's file name without `.sqlite`; it is the recipes' `File` value.

Outputs under `<case>/` (each exactly as the recipe wrote it, except trace.csv):
  trace.csv        nvtx_gpu_proj_trace: that recipe has no --csv and writes only trace.parquet;
                   this is `pandas.read_parquet(trace.parquet).to_csv(index=False)`
                   (not for MULTI cases: there it is the single traces concatenated)
  all_stats.csv    nvtx_gpu_proj_sum --csv
  rank_stats.csv   nvtx_gpu_proj_sum --csv
  (any of these over GZIP_OVER bytes is stored gzipped instead, as NAME.csv.gz, zero mtime)
  probe.sqlite     (synthetic probes only) the input that was staged
and index.csv (case, input, recipe, file, rows, failure) and versions.json.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

EXPORT_DIRS = ("sqlite", "exported", "exported2023")
# Reports run as they are (nsys exports them itself; only reports nsys 2023.4.4 can read).
REPORTS = ("reports/aiprof_opt2.nsys-rep",)
# Several exports given to one recipe run: case name -> exports (corpus-relative).
MULTI = {
    "multi_nsysai_mfu2gpu": ("sqlite/nsysai_mfu2gpu_before.sqlite",
                             "sqlite/nsysai_mfu2gpu_after.sqlite"),
    "multi_alcf_seqpar": ("exported2023/alcf_seqpar_rank0.nsys2023.4.sqlite",
                          "exported2023/alcf_seqpar_rank4.nsys2023.4.sqlite"),
}
# Synthetic probes: case name -> (build variant, extra recipe options).
PROBES = {
    "probe_edges": ("edges", ()),
    "probe_edges_window": ("edges", ("--start", "5500", "--end", "9000")),
    "probe_inside_api": ("inside_api", ()),
    "probe_dup_domain": ("dup_domain", ()),
}
RECIPES = ("nvtx_gpu_proj_trace", "nvtx_gpu_proj_sum")
PARQUET_TABLES = ("StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME",
                  "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET")
GPU_TABLES = PARQUET_TABLES[3:]
GZIP_OVER = 1_000_000
UNSIGNED = ("globalTid", "globalPid", "endGlobalTid")

ENV = dict(os.environ)
PYTHON = "python3"


# --------------------------------------------------------------------------- helpers run
# under --python (they need pandas / pyarrow): `generate.py _parquet SRC DST`,
# `generate.py _csv PARQUET CSV`

def to_parquet_dir(src: str, dst: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"INTEGER": pa.int64(), "REAL": pa.float64(), "TEXT": pa.string()}
    os.makedirs(dst, exist_ok=True)
    db = sqlite3.connect(f"file:{src}?immutable=1", uri=True)
    for table in PARQUET_TABLES:
        cols = db.execute("SELECT name, type FROM pragma_table_info(?)", (table,)).fetchall()
        if cols:
            rows = db.execute(f"SELECT * FROM {table}").fetchall()
            arrays = [pa.array([r[i] for r in rows],
                               type=pa.uint64() if name in UNSIGNED else types.get(kind.upper()))
                      for i, (name, kind) in enumerate(cols)]
            data = pa.table(arrays, names=[c[0] for c in cols])
        elif table in GPU_TABLES:
            data = pa.table({"start": pa.array([], pa.int64()), "end": pa.array([], pa.int64()),
                             "correlationId": pa.array([], pa.int64()),
                             "globalPid": pa.array([], pa.uint64())})
        else:
            continue
        pq.write_table(data, os.path.join(dst, f"{table}.parquet"))
    db.close()


def parquet_to_csv(src: str, dst: str) -> None:
    import pandas as pd

    pd.read_parquet(src).to_csv(dst, index=False)


# --------------------------------------------------------------------------- probes

def build_probe(path: Path, variant: str) -> None:
    """A minimal export (only the tables and columns the recipes read) with edge cases.

    Timestamps in ns. Process 100; threads 100 (T), 101 (T2), 102 (T3), 103 (T4),
    105 (T5, CUDA calls but no range), 106 (T6, a range but no CUDA call). NVTX rowids
    (the trace's RangeId) are given in the comments of the "edges" variant.
    """
    pid = 100

    def gtid(tid: int, p: int = pid) -> int:
        return (1 << 56) | (p << 24) | tid

    def gpid(p: int = pid) -> int:
        return (1 << 56) | (p << 24)

    T, T2, T3, T4, T5, T6 = (gtid(t) for t in (100, 101, 102, 103, 105, 106))
    db = sqlite3.connect(path)
    db.executescript("""
    CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
        rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
        endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
        eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
        nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
        correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
        shortName INTEGER NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
        correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
        copyKind INTEGER NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
        correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
        bytes INTEGER NOT NULL);
    """)
    db.executemany("INSERT INTO StringIds VALUES (?, ?)",
                   [(1, "k"), (2, "cudaLaunchKernel"), (7, "RegisteredName")])
    nvtx, api, kern, mcpy, mset = [], [], [], [], []

    def rng(start, end, text, tid, etype=59, text_id=None, domain=0, end_tid=None):
        nvtx.append((start, end, etype, text, tid, end_tid, text_id, domain))

    def domain_create(name, tid, domain):
        nvtx.append((0, None, 75, name, tid, None, None, domain))

    def call(start, end, corr, tid):
        api.append((start, end, 1, tid, corr, 2, 0))

    def kernel(start, end, corr, p=pid):
        kern.append((start, end, 0, 1, 7, corr, gpid(p), 1, 1))

    if variant == "edges":
        rng(1000, 2000, "A", T)                    # 1: holds c1 and c2 (c2 ends at A's end)
        rng(1100, 1200, "B", T)                    # 2: exactly c1's interval
        rng(3000, 4000, "C", T)                    # 3: holds c3, which has no GPU op
        rng(5000, None, "D", T)                    # 4: never ended (end NULL)
        rng(6000, 9000, "E", T, etype=60)          # 5: start/end range
        rng(6000, 9000, "F", T)                    # 6: same interval as E
        rng(1000, 2000, "G", T2, domain=5)         # 7: in domain 5 ("MyDom")
        rng(1400, 1700, None, T2, text_id=7)       # 8: registered string, no text
        domain_create("MyDom", T, 5)               # 9: created on another thread
        rng(12000, 13000, "K", T, end_tid=T2)      # 10: ended on another thread
        rng(11000, 11500, "J", T)                  # 11: calls only overlap it partly
        rng(20000, 20100, "S", T3)                 # 12-14: three "S" (10, 20, 60 ns on GPU)
        rng(20200, 20300, "S", T3)
        rng(20400, 20500, "S", T3)
        rng(30000, 40000, "P1", T4)                # 15-17: P3 in P2 in P1
        rng(30000, 39000, "P2", T4)
        rng(31000, 32000, "P3", T4)
        rng(50000, 50100, "Z", T3)                 # 18: zero-length projection
        rng(100, 200, "NoApiThread", T6)           # 19: thread without CUDA calls
        rng(60000, 60200, "L", T3)                 # 20: call starts at the range start
        call(1100, 1200, 1, T); kernel(5000, 5100, 1)
        kernel(4000, 5050, 1, p=200)               # same correlationId, another process
        call(1900, 2000, 2, T); kernel(6000, 6200, 2)
        call(3100, 3200, 3, T)
        call(5100, 5200, 4, T); mcpy.append((7000, 7300, 0, 1, 7, 4, gpid(), 8, 1))
        call(6100, 6200, 5, T); mset.append((8000, 8000, 0, 1, 7, 5, gpid(), 0, 8))
        call(6300, 6400, 6, T); kernel(8100, 8200, 6); kernel(8300, 8500, 6)  # 2 ops, 1 call
        call(1500, 1600, 7, T2); kernel(9500, 9600, 7)
        call(10900, 11100, 10, T); kernel(11200, 11300, 10)
        call(11400, 11600, 11, T); kernel(11700, 11800, 11)
        call(12100, 12200, 12, T); kernel(12300, 12400, 12)
        call(14000, 14100, 13, T); kernel(14500, 14600, 13)
        call(20010, 20020, 20, T3); kernel(100, 110, 20)
        call(20210, 20220, 21, T3); kernel(200, 220, 21)
        call(20410, 20420, 22, T3); kernel(300, 360, 22)
        call(31100, 31200, 30, T4); kernel(31300, 31400, 30)
        call(50010, 50020, 40, T3); kernel(50500, 50500, 40)
        call(100, 200, 50, T5); kernel(60000, 60100, 50)    # outside every range
        call(300, 400, 51, T5); kernel(60200, 60400, 51)
        call(60000, 60100, 60, T3); kernel(61000, 61100, 60)
    elif variant == "inside_api":
        rng(1000, 2000, "A", T)
        rng(1150, 1160, "I", T)                    # a range inside a CUDA call
        call(1100, 1200, 1, T); kernel(5000, 5100, 1)
    elif variant == "dup_domain":
        rng(1000, 2000, "G", T2, domain=5)
        domain_create("MyDom", T, 5)               # one domain created on two threads
        domain_create("MyDom", T2, 5)
        call(1500, 1600, 7, T2); kernel(9500, 9600, 7)
    else:
        raise ValueError(variant)
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, "
                   "endGlobalTid, textId, domainId) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", nvtx)
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?)", api)
    for table, rows in (("KERNEL", kern), ("MEMCPY", mcpy), ("MEMSET", mset)):
        db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_{table} VALUES "
                       "(?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()


# --------------------------------------------------------------------------- staging, running

def helper(*args: str) -> None:
    proc = subprocess.run([PYTHON, str(Path(__file__).resolve()), *args], capture_output=True,
                          text=True, env=ENV)
    if proc.returncode != 0:
        sys.exit(f"helper {args} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


def stage_export(export: Path, folder: Path) -> Path:
    """An empty STEM.nsys-rep and, made after it, STEM.sqlite and STEM_pqtdir/."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = export.name.removesuffix(".sqlite")
    report = folder / f"{stem}.nsys-rep"
    report.touch()
    time.sleep(0.05)
    shutil.copyfile(export, folder / f"{stem}.sqlite")
    helper("_parquet", str(export), str(folder / f"{stem}_pqtdir"))
    made = [folder / f"{stem}.sqlite", *(folder / f"{stem}_pqtdir").iterdir()]
    assert all(os.path.getctime(report) < os.path.getctime(p) for p in made)
    return report


def stage_report(src: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    report = folder / src.name
    shutil.copyfile(src, report)
    return report


def failure(text: str, work: Path) -> str:
    """One line saying why a recipe gave no output (temporary paths cut to the file name)."""
    text = text.replace(f"{work}/in/", "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if any(ln.startswith("Traceback") for ln in lines):
        return "crash: " + lines[-1]
    keep = [ln for ln in lines if ln.startswith(("ERROR", "INFO")) and "Exporting" not in ln
            and "No output generated" not in ln]
    return " | ".join(keep) or (lines[-1] if lines else "no output")


def run_recipe(nsys: str, recipe: str, reports: list[Path], out: Path, extra: tuple,
               cwd: Path) -> tuple[bool, str]:
    cmd = [nsys, "recipe", recipe, "--input", *map(str, reports), "--output", str(out),
           *extra]
    if recipe == "nvtx_gpu_proj_sum":
        cmd.append("--csv")
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1800, env=ENV)
    log = proc.stdout + proc.stderr
    done = (out / ("trace.parquet" if recipe == "nvtx_gpu_proj_trace" else "all_stats.csv"))
    return done.exists(), log


def rows(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        return sum(1 for _ in csv.reader(f)) - 1


def maybe_gzip(target: Path) -> Path:
    """Replace a CSV over GZIP_OVER bytes by NAME.csv.gz (no name, zero mtime: reproducible)."""
    if target.stat().st_size > GZIP_OVER:
        gz = target.with_name(target.name + ".gz")
        with open(target, "rb") as src, open(gz, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped:
            shutil.copyfileobj(src, zipped)
        target.unlink()
        target = gz
    return target


def store_trace(out: Path, dest: Path) -> Path:
    target = dest / "trace.csv"
    helper("_csv", str(out / "trace.parquet"), str(target))
    return maybe_gzip(target)


def qualifies(export: Path) -> bool:
    db = sqlite3.connect(f"file:{export}?immutable=1", uri=True)
    try:
        for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            if not db.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]:
                return False
        return True
    except sqlite3.Error:
        return False
    finally:
        db.close()


def versions(nsys: str) -> dict:
    ver = subprocess.run([nsys, "--version"], capture_output=True, text=True, env=ENV)
    probe = ("import json, sys, numpy, pandas, pyarrow, psutil; print(json.dumps({'python': "
             "sys.version.split()[0], 'numpy': numpy.__version__, 'pandas': pandas.__version__,"
             " 'pyarrow': pyarrow.__version__, 'psutil': psutil.__version__}))")
    py = subprocess.run(["python3", "-c", probe], capture_output=True, text=True, env=ENV)
    if py.returncode != 0:
        sys.exit(f"python3 on PATH cannot run the recipes:\n{py.stderr}")
    return {"nsys": ver.stdout.strip(), **json.loads(py.stdout)}


def main() -> None:
    global PYTHON
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--nsys", default="nsys2023")
    parser.add_argument("--python", help="the python3 (with numpy, pandas<2, psutil, pyarrow) "
                        "to run the recipes on: its folder goes first on PATH for nsys")
    parser.add_argument("--only", nargs="*", help="case names to (re)make; default all")
    args = parser.parse_args()
    corpus = args.corpus.resolve()
    if args.python:
        ENV["PATH"] = str(Path(args.python).absolute().parent) + os.pathsep + ENV["PATH"]
        PYTHON = str(Path(args.python).absolute())
    info = versions(args.nsys)

    # case -> (inputs as written in index.csv, kind, payload)
    cases: dict[str, tuple[str, str, object]] = {}
    for folder in EXPORT_DIRS:
        for export in sorted((corpus / folder).glob("*.sqlite")):
            if qualifies(export):
                stem = export.name.removesuffix(".sqlite")
                assert stem not in cases, stem
                cases[stem] = (f"{folder}/{export.name}", "export", export)
    for rel in REPORTS:
        cases[Path(rel).stem] = (rel, "report", corpus / rel)
    for name, rels in MULTI.items():
        cases[name] = (" ".join(rels), "multi", [corpus / r for r in rels])
    for name, (variant, extra) in PROBES.items():
        opts = " ".join(extra)
        cases[name] = (f"synthetic:{variant}" + (f" ({opts})" if opts else ""), "probe",
                       (variant, extra))

    index_path = HERE / "index.csv"
    old = []
    if args.only and index_path.exists():
        with open(index_path, newline="") as f:
            old = [r for r in csv.reader(f)][1:]
        old = [r for r in old if r[0] not in args.only]
    index = [["case", "input", "recipe", "file", "rows", "failure"]]
    with tempfile.TemporaryDirectory(prefix="nsys2prv-nvtxproj-") as tmp:
        for case, (label, kind, payload) in cases.items():
            if args.only and case not in args.only:
                continue
            work = Path(tmp) / case
            work.mkdir()
            dest = HERE / case
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir()
            extra: tuple = ()
            if kind == "export":
                reports = [stage_export(payload, work / "in")]
            elif kind == "report":
                reports = [stage_report(payload, work / "in")]
            elif kind == "multi":
                reports = [stage_export(p, work / "in") for p in payload]
            else:
                variant, extra = payload
                probe_db = dest / "probe.sqlite"
                build_probe(probe_db, variant)
                reports = [stage_export(probe_db, work / "in")]
            # A multi-report trace is the single traces one after the other (README.md): not kept.
            for recipe in RECIPES if kind != "multi" else ("nvtx_gpu_proj_sum",):
                out = work / f"out_{recipe}"
                ok, log = run_recipe(args.nsys, recipe, reports, out, extra, work)
                (work / f"{recipe}.log").write_text(log)
                if not ok:
                    index.append([case, label, recipe, "", "", failure(log, work)])
                    print(f"{case} {recipe}: FAILED {failure(log, work)}", file=sys.stderr)
                    continue
                if recipe == "nvtx_gpu_proj_trace":
                    stored = [store_trace(out, dest)]
                else:
                    stored = []
                    for stats in ("all_stats", "rank_stats"):
                        shutil.copyfile(out / f"{stats}.csv", dest / f"{stats}.csv")
                        stored.append(maybe_gzip(dest / f"{stats}.csv"))
                for path in stored:
                    index.append([case, label, recipe, f"{case}/{path.name}", rows(path), ""])
                print(f"{case} {recipe}: {[rows(p) for p in stored]} rows", file=sys.stderr)
            if not any(dest.iterdir()):
                dest.rmdir()
    body = sorted(old + index[1:], key=lambda r: (list(cases).index(r[0]), r[2], r[3]))
    with open(index_path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([index[0], *body])
    (HERE / "versions.json").write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "_parquet":
        to_parquet_dir(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "_csv":
        parquet_to_csv(sys.argv[2], sys.argv[3])
    else:
        main()
