"""Run Paraver's command-line engine (paramedir) on cfgs and read what it writes.

paramedir is not a dependency: developers use this to verify the cfgs and to refresh the
expected outputs in tests/data/paramedir/ (`python tools/paramedir.py --help`);
the test suite only reads the stored outputs. paramedir exits 0 on most failures, so a run
counts as good only when stderr is empty, the output file exists and the cfg was not refused
(its "File creation aborted" notes go to stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Run:
    cfg: Path
    output: Path
    ok: bool
    stdout: str
    stderr: str
    seconds: float
    partial: bool = False  # a window filters only types absent from the trace


def find_paramedir() -> str | None:
    """$PARAMEDIR, then PATH."""
    for cand in (os.environ.get("PARAMEDIR"), shutil.which("paramedir")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def run_cfg(trace: str | Path, cfg: str | Path, output: str | Path, timeout: float = 120,
            paramedir: str | None = None) -> Run:
    """One cfg on one trace, with a throw-away HOME so that number formatting is Paraver's
    default (2 decimals)."""
    import time

    exe = paramedir or find_paramedir()
    if exe is None:
        raise FileNotFoundError("paramedir not found (set PARAMEDIR)")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.exists():
        output.unlink()
    with tempfile.TemporaryDirectory() as home:
        t0 = time.time()
        try:
            p = subprocess.run([exe, str(trace), str(cfg), str(output)], capture_output=True,
                               text=True, timeout=timeout, env={**os.environ, "HOME": home})
            out, err = p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            out, err = "", f"timeout after {timeout} s"
        seconds = time.time() - t0
    refused = "aborted" in out or "Cannot load" in out or "Cannot load" in err
    ok = not err.strip() and not refused and output.exists()
    return Run(Path(cfg), output, ok, out, err, seconds)


# ------------------------------------------------------------------------------------------
# Reading paramedir's outputs
# ------------------------------------------------------------------------------------------


@dataclass
class Table:
    """A histogram as paramedir writes it: column labels, row labels, cells, and the
    statistics rows (Total, Average, Maximum, Minimum, StDev, Avg/Max) by name."""

    columns: list[str]
    rows: list[str]
    cells: np.ndarray
    stats: dict[str, np.ndarray]

    def column(self, label: str) -> np.ndarray:
        return self.cells[:, self.columns.index(label)]

    def row(self, label: str) -> np.ndarray:
        return self.cells[self.rows.index(label)]


_STATS = ("Total", "Average", "Maximum", "Minimum", "StDev", "Avg/Max")


def _cell(text: str) -> float:
    text = text.strip().rstrip("%").strip()
    if not text or text in ("-nan", "nan", "inf", "-inf"):
        return float("nan")
    return float(text.replace(",", ""))


def read_table(path: str | Path) -> Table:
    """Parse a 2D histogram output (tab separated; first line = column labels)."""
    lines = [ln.rstrip("\n") for ln in Path(path).read_text().splitlines()]
    head = lines[0].split("\t")[1:]
    if head and head[-1] == "":
        head = head[:-1]
    rows, cells, stats = [], [], {}
    for ln in lines[1:]:
        if not ln.strip():
            continue
        parts = ln.split("\t")
        label, values = parts[0], [p for p in parts[1:]]
        if values and values[-1] == "":
            values = values[:-1]
        vals = np.array([_cell(v) for v in values], dtype=float)
        if label in _STATS:
            stats[label] = vals
        else:
            rows.append(label)
            cells.append(vals)
    arr = np.vstack(cells) if cells else np.zeros((0, len(head)))
    return Table(head, rows, arr, stats)


def read_timeline(path: str | Path):
    """Parse a timeline output (object, begin, duration, value; tab separated) into a
    polars DataFrame."""
    import polars as pl

    return pl.read_csv(path, separator="\t", has_header=False,
                       new_columns=["object", "begin", "duration", "value"],
                       schema_overrides={"object": pl.Utf8})


# ------------------------------------------------------------------------------------------
# Refreshing the expected outputs
# ------------------------------------------------------------------------------------------


def output_name(cfg_rel: str, histogram: bool) -> str:
    """tests/data/paramedir/<trace>/<cfg path with / as __>.(txt|csv)."""
    stem = cfg_rel.removesuffix(".cfg").replace("/", "__")
    return stem + (".txt" if histogram else ".csv")


def run_all(trace: str | Path, cfgdir: str | Path, outdir: str | Path,
            only: list[str] | None = None, histograms_only: bool = False,
            timeout: float = 120) -> list[Run]:
    """Every cfg under `cfgdir` on `trace`, outputs under `outdir` (failed ones removed)."""
    from nsys2prv.paraver.read import event_types
    from nsys2prv.views.cfg import parse_cfg

    root = Path(cfgdir)
    present = sorted(event_types(trace))
    runs = []
    for cfg in sorted(root.rglob("*.cfg")):
        rel = cfg.relative_to(root).as_posix()
        if only and rel not in only:
            continue
        parsed = parse_cfg(cfg)
        histogram = bool(parsed.histogram)
        if histograms_only and not histogram:
            continue
        run = run_cfg(trace, cfg, Path(outdir) / output_name(rel, histogram), timeout=timeout)
        run.partial = not all(_shows_data(w, present) for w in parsed.windows if w.types)
        if (not run.ok or run.partial) and run.output.exists():
            run.output.unlink()
        runs.append(run)
    return runs


def _shows_data(window, present: list[int]) -> bool:
    """A window has data when one of its types (or a type of its range) is in the trace."""
    if window.type_function == "[x,y]":
        lo, hi = window.types
        return any(lo <= t <= hi for t in present)
    return bool(set(window.types) & set(present))


SAMPLE_DIR = "sample"
CORPUS_TRACES = {"mfu2gpu": "sqlite/nsysai_mfu2gpu_before.sqlite",
                 "gpumetrics": "exported2023/ayushos_vector_add_gpumetrics_v3.nsys2023.4.sqlite"}
# traces kept beside their outputs (compressed), so that the tests compare on the same file
STORED_TRACES = ("sample", "gpumetrics")
FAMILIES_DIR = "families"


# the synthetic GPU scaling runs of nsys2prv.testing.scaling (1, 2, 4 GPUs): the cfgs whose
# numbers `analyze --scaling` reports (useful time per device, metrics per kernel)
SCALING_SIZES = (1, 2, 4)
SCALING_CFGS = ("analysis/useful_imbalance.cfg", "analysis/efficiency_talp_time.cfg",
                "analysis/efficiency_nccl_time.cfg", "hwcounters/sm_active_per_kernel.cfg",
                "analysis/tensor_per_kernel.cfg")


# a job of `refresh`: (output dir name, trace, histograms only, the cfgs to run or None: all)
Job = tuple[str, Path, bool, list[str] | None]


def scaling_jobs(tmp: Path) -> list[Job]:
    """Translate the synthetic scaling runs into `tmp`, as jobs of `refresh` running
    SCALING_CFGS (the traces are regenerated by the tests, not stored)."""
    from nsys2prv.testing.scaling import gpu_run
    from nsys2prv.api import translate

    jobs = []
    for n in SCALING_SIZES:
        trace = tmp / f"scaling{n}.prv"
        translate([str(p) for p in gpu_run(n, tmp / f"scaling{n}")], str(trace))
        jobs.append((f"scaling{n}", trace, True, list(SCALING_CFGS)))
    return jobs


# a trace of the corpus' before/after runs, one Paraver application each, and each run
# translated alone numbered like it: every histogram cfg on the three (tests/test_applications)
APPLICATIONS_DIR = "applications"
APPLICATION_RUNS = {"before": "sqlite/nsysai_mfu2gpu_before.sqlite",
                    "after": "sqlite/nsysai_mfu2gpu_after.sqlite"}


def trace_end(trace: Path) -> int:
    """The end time (ns) in a trace's header."""
    from nsys2prv.paraver.read import open_text

    with open_text(trace) as f:
        return int(f.readline().split("):", 1)[1].split("_ns", 1)[0])


def applications_jobs(tmp: Path, corpus: Path | None) -> list[Job]:
    """Translate the before/after pair into one trace of two applications and each run
    alone (`values_like` the pair), as jobs of `refresh` (histograms only; the traces are
    made again by the tests, not stored). None without the corpus."""
    from nsys2prv.api import translate, translate_applications

    if corpus is None or not all((corpus / r).exists() for r in APPLICATION_RUNS.values()):
        return []
    both = tmp / "both.prv"
    translate_applications([str(corpus / r) for r in APPLICATION_RUNS.values()], both,
                           labels=list(APPLICATION_RUNS))
    jobs: list[Job] = [(f"{APPLICATIONS_DIR}/both", both, True, None)]
    for label, rel in APPLICATION_RUNS.items():
        trace = tmp / f"{label}.prv"
        translate([str(corpus / rel)], str(trace), values_like=both)
        jobs.append((f"{APPLICATIONS_DIR}/{label}", trace, True, None))
    return jobs


# NVTX ranges projected onto the GPU: the layer views on the synthetic export of
# testing/synth_projection (all of them, its timeline included: tests/test_projection_trace
# checks them against the export) and on the corpus' aiprof_opt2 (its histograms)
LAYER_CFGS = ("views/layers_on_gpu.cfg", "analysis/layer_gpu_time.cfg",
              "analysis/layer_kernel_count.cfg", "hwcounters/layer_rates.cfg")
PROJECTION_DIR = "projection"
LAYER_CORPUS = {"aiprof": "exported2023/aiprof_opt2.nsys2023.4.sqlite"}


def layer_jobs(tmp: Path, corpus: Path | None) -> list[Job]:
    """Translate the synthetic projection export (and aiprof_opt2 where the corpus is) into
    `tmp`, as jobs of `refresh` running LAYER_CFGS (the traces are made again by the tests,
    not stored)."""
    from nsys2prv.api import translate
    from nsys2prv.testing.synth_projection import projection_export

    trace = tmp / f"{PROJECTION_DIR}.prv"
    translate([str(projection_export(tmp / f"{PROJECTION_DIR}.sqlite"))], str(trace))
    jobs: list[Job] = [(PROJECTION_DIR, trace, False, list(LAYER_CFGS))]
    for name, rel in LAYER_CORPUS.items():
        if corpus is not None and (corpus / rel).exists():
            translate([str(corpus / rel)], str(tmp / f"{name}.prv"))
            jobs.append((name, tmp / f"{name}.prv", True, list(LAYER_CFGS)))
    return jobs


# CPU samples and call stacks (issue 46): every sampling/ cfg on the synthetic edge-case
# export (testing/synth_samples.edge_export), their histograms on corpus traces with samples
# and stacks (tests/test_samples.py checks them against the exports' own counts)
SAMPLES_DIR = "samples"
SAMPLES_CORPUS = {"samples_pipit": "sqlite/pipit_saxpy_mpi_cuda_rank0.sqlite",
                  "samples_testcuda": "sqlite/testcuda_report1.sqlite"}


def samples_jobs(tmp: Path, corpus: Path | None) -> list[Job]:
    """Translate the edge-case export of testing/synth_samples (and the corpus traces of
    SAMPLES_CORPUS where the corpus is) into `tmp`, as jobs of `refresh` running the
    sampling/ cfgs (the traces are made again by the tests, not stored)."""
    from nsys2prv.api import translate
    from nsys2prv.testing.synth_samples import edge_export
    from nsys2prv.views.catalogue import SAMPLING

    cfgs = [c.path for c in SAMPLING]
    trace = tmp / f"{SAMPLES_DIR}.prv"
    translate([str(edge_export(tmp / f"{SAMPLES_DIR}.sqlite"))], str(trace))
    jobs: list[Job] = [(SAMPLES_DIR, trace, False, cfgs)]
    for name, rel in SAMPLES_CORPUS.items():
        if corpus is not None and (corpus / rel).exists():
            translate([str(corpus / rel)], str(tmp / f"{name}.prv"))
            jobs.append((name, tmp / f"{name}.prv", True, cfgs))
    return jobs


CRITICAL_DIR = "critical"  # the sample's critical path (analyze --path-trace): its cfg


def critical_jobs(tmp: Path, sample: Path) -> list[Job]:
    """The sample's trace with its critical path's events (`analyze --critical-path
    --path-trace`), as a job of `refresh` running analysis/critical_path.cfg."""
    from nsys2prv.analysis.critical_path import critical_path, read_graph, write_path_trace
    from nsys2prv.api import translate

    trace = tmp / "critical-src.prv"
    translate([str(sample)], str(trace))
    g = read_graph(trace)
    out = write_path_trace(trace, tmp / "critical.prv", g, critical_path(g).segments)
    return [(CRITICAL_DIR, out, False, ["analysis/critical_path.cfg"])]


def refresh(data: Path, cfgdir: Path, corpus: Path | None, groups: list[str] | None = None
            ) -> int:
    """Regenerate tests/data/paramedir: the sample (every cfg), small corpus traces
    (histograms only: their timelines are large), the hand-made families trace, the
    synthetic scaling runs (SCALING_CFGS only), the corpus before/after pair as one
    trace of two applications and as two traces (histograms only) and the layer views
    (LAYER_CFGS) on the synthetic projection export and aiprof_opt2, the sampling/ views
    on the samples' edge-case export and corpus traces with samples. `groups` (of "main",
    "scaling", "applications", "critical", "layers", "samples"): only those jobs."""
    from nsys2prv.testing.samples import sample_spec
    from nsys2prv.testing.synth import write_export
    from nsys2prv.api import translate

    bad = 0
    want = set(groups) if groups else None
    with tempfile.TemporaryDirectory() as tmp:
        jobs: list[Job] = []
        sources = {SAMPLE_DIR: write_export(Path(tmp) / "sample.sqlite", sample_spec())}
        for name, rel in CORPUS_TRACES.items():
            if corpus is not None and (corpus / rel).exists():
                sources[name] = corpus / rel
        if want is None or "main" in want:
            for name, src in sources.items():
                if name in STORED_TRACES:
                    trace = data / name / "trace" / f"{name}.prv.gz"
                    trace.parent.mkdir(parents=True, exist_ok=True)
                    translate([str(src)], str(trace), compress=True)
                    jobs.append((name, trace, name != SAMPLE_DIR, None))
                else:
                    translate([str(src)], str(Path(tmp) / f"{name}.prv"))
                    jobs.append((name, Path(tmp) / f"{name}.prv", True, None))
            fam = families_trace(data / FAMILIES_DIR / "trace")
            jobs.append((FAMILIES_DIR, fam, False, None))
        if want is None or "scaling" in want:
            jobs += scaling_jobs(Path(tmp))
        if want is None or "applications" in want:
            jobs += applications_jobs(Path(tmp), corpus)
        if want is None or "critical" in want:
            jobs += critical_jobs(Path(tmp), sources[SAMPLE_DIR])
        if want is None or "layers" in want:
            jobs += layer_jobs(Path(tmp), corpus)
        if want is None or "samples" in want:
            jobs += samples_jobs(Path(tmp), corpus)
        ends = {name.split("/")[1]: trace_end(trace) for name, trace, _, _ in jobs
                if name.startswith(APPLICATIONS_DIR + "/")}
        if ends:  # what the '% Time' cells of each trace are a share of
            (data / APPLICATIONS_DIR / "ends.json").write_text(json.dumps(ends, indent=1))
        for name, trace, hist_only, only in jobs:
            out = data / name
            for old in out.glob("*.*"):
                if old.suffix in (".txt", ".csv"):
                    old.unlink()
            for run in run_all(trace, cfgdir, out, only=only, histograms_only=hist_only):
                refused = "aborted" in run.stdout
                status = ("part" if run.ok and run.partial else "OK  " if run.ok
                          else "n/a " if refused and not run.stderr else "FAIL")
                bad += status == "FAIL"
                print(f"{status} {name:<10} {run.seconds:6.2f}s {run.cfg.relative_to(cfgdir)}"
                      f" {run.stderr.strip()[:200]}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Run every cfg under CFGDIR on TRACE and store the outputs in OUTDIR, or
    `refresh [--corpus DIR]` to regenerate tests/data/paramedir."""
    from nsys2prv.views.cfg import parse_cfg

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["refresh"]:
        rp = argparse.ArgumentParser(prog="python tools/paramedir.py refresh")
        rp.add_argument("--data", default="tests/data/paramedir")
        rp.add_argument("--cfgs", default="cfgs")
        rp.add_argument("--corpus", default="../shared/corpus")
        rp.add_argument("--only", nargs="*", choices=("main", "scaling", "applications",
                                                      "critical", "layers", "samples"),
                        help="refresh only these groups of outputs")
        ra = rp.parse_args(argv[1:])
        corpus = Path(ra.corpus) if Path(ra.corpus).exists() else None
        return refresh(Path(ra.data), Path(ra.cfgs), corpus, ra.only)
    ap = argparse.ArgumentParser(prog="python tools/paramedir.py",
                                 description=main.__doc__)
    ap.add_argument("trace")
    ap.add_argument("cfgdir")
    ap.add_argument("outdir")
    ap.add_argument("--only", nargs="*", help="cfg paths (relative to CFGDIR) to run")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--histograms-only", action="store_true",
                    help="skip cfgs without a histogram (timelines of big traces are large)")
    args = ap.parse_args(argv)
    root = Path(args.cfgdir)
    bad = 0
    for cfg in sorted(root.rglob("*.cfg")):
        rel = cfg.relative_to(root).as_posix()
        if args.only and rel not in args.only:
            continue
        parsed = parse_cfg(cfg)
        histogram = bool(parsed.histogram)
        if args.histograms_only and not histogram:
            continue
        run = run_cfg(args.trace, cfg, Path(args.outdir) / output_name(rel, histogram),
                      timeout=args.timeout)
        note = (run.stdout.strip().splitlines() or [""])[0] if not run.ok else ""
        print(f"{'OK  ' if run.ok else 'FAIL'} {run.seconds:6.2f}s {rel} {note} "
              f"{run.stderr.strip()[:200]}")
        if not run.ok:
            bad += 1
            if run.output.exists():
                run.output.unlink()
    return 1 if bad else 0



# ------------------------------------------------------------------------------------------
# A hand-made trace with the families that are not translated yet
# ------------------------------------------------------------------------------------------


def families_trace(directory: str | Path) -> Path:
    """Write `families.prv/.pcf/.row`: 2 processes x (CPU thread, GPU stream, GPU metrics
    row) with MPI (the five Extrae types and a message), NCCL calls and payloads, OpenACC,
    every known GPU metric, and one CUDA call, kernels and one copy, laid out as the registry describes them. It lets paramedir check the
    cfgs of kinds whose translators do not exist yet; it is not a translation of anything."""
    from nsys2prv.paraver.registry import gpu_metrics, nccl

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    end = 1_000_000
    lines = [f"#Paraver (01/01/2026 at 00:00):{end}_ns:1(6):1:2(3:1,3:1)"]
    recs: list[tuple[int, str]] = []
    events: dict[tuple[int, int, int, int], list[int]] = {}
    metrics = sorted(gpu_metrics.KNOWN_METRICS.items(), key=lambda kv: kv[1])
    for task in (1, 2):
        cpu0 = 3 * (task - 1)

        def at(thread: int, t: int, *pairs: int) -> None:
            events.setdefault((t, task, thread, cpu0 + thread), []).extend(pairs)

        def state(thread: int, b: int, e: int, s: int) -> None:
            recs.append((b, f"1:{cpu0 + thread}:1:{task}:{thread}:{b}:{e}:{s}"))

        shift = 0 if task == 1 else 20_000  # rank 2 a bit later: imbalance
        state(1, 0, end, 1)
        state(3, 0, end, 0)
        # CPU: OpenACC other/data/launch, MPI collective, NCCL call, CUDA launch, MPI p2p
        at(1, 10_000, 66_000_000, 1)
        at(1, 20_000, 66_000_000, 0)
        at(1, 60_000, 66_000_001, 1)
        at(1, 70_000, 66_000_001, 0)
        at(1, 95_000, 66_000_002, 1)
        at(1, 99_000, 66_000_002, 0)
        at(1, 50_000, 50_000_002, 10)
        at(1, 90_000, 50_000_002, 0)
        at(1, 1_000, 50_000_003, 31)
        at(1, 5_000, 50_000_003, 0)
        at(1, 930_000, 50_000_004, 1)
        at(1, 935_000, 50_000_004, 0)
        at(1, 970_000, 50_000_005, 1)
        at(1, 980_000, 50_000_005, 0)
        at(1, 99_000, 63_000_000, 1000)
        at(1, 99_500, 63_000_000, 0)
        at(1, 380_000, nccl.NCCL_RANGE, 1)
        at(1, 390_000, nccl.NCCL_RANGE, 0)
        p2p = (920_000, 950_000) if task == 1 else (910_000, 960_000)
        at(1, p2p[0], 50_000_001, 1 if task == 1 else 2)
        at(1, p2p[1], 50_000_001, 0)
        # GPU stream: gemm, NCCL AllReduce with payload, gemm
        k1 = (100_000, 400_000 + shift)
        nc = (k1[1], 600_000)
        k2 = (700_000, 900_000)
        cp = (950_000, 960_000)
        for b, e, st in ((0, k1[0], 0), (k1[0], nc[1], 1), (nc[1], k2[0], 0),
                         (k2[0], k2[1], 1), (k2[1], cp[0], 0), (cp[0], cp[1], 17),
                         (cp[1], end, 0)):
            state(2, b, e, st)
        at(2, cp[0], 67_100_001, 2, 67_100_002, 4 << 20)
        at(2, cp[1], 67_100_001, 0)
        for b, e in (k1, k2):
            at(2, b, 63_000_006, 1)
            at(2, e, 63_000_006, 0)
        at(2, nc[0], 67_000_002, 2, nccl.NCCL_COLLECTIVE, 1, nccl.NCCL_MESSAGE_SIZE, 1 << 20)
        at(2, nc[1], 67_000_002, 0, nccl.NCCL_COLLECTIVE, 0)
        # metrics: one sample of every known metric every 100 us on the metrics row; each
        # kernel's rates (the model's) at its start on the stream row, 0 at its end
        for t in range(50_000, end, 100_000):
            pairs: list[int] = []
            for name, off in metrics:
                v = (1000 * (off + 1) + t // 1000 + 500 * task) % 10_000
                pairs += [gpu_metrics.SAMPLES.type_of(off), v,
                          gpu_metrics.PREDICTED.type_of(off), v * 9 // 10]
            at(3, t, *pairs)
        for i, (b, e) in enumerate((k1, nc, k2)):
            rates: list[int] = []
            zeros: list[int] = []
            for name, off in metrics:
                rates += [gpu_metrics.RATE.type_of(off),
                          (1000 * (off + 1) + 300 * i + 500 * task) % 10_000]
                zeros += [gpu_metrics.RATE.type_of(off), 0]
            at(2, b, *rates)
            at(2, e, *zeros)
    for (t, task, thread, cpu), pairs in events.items():
        recs.append((t, f"2:{cpu}:1:{task}:{thread}:{t}:" + ":".join(str(x) for x in pairs)))
    # the MPI message: rank 1 sends 4096 bytes to rank 2 (tag 1)
    recs.append((920_000, "3:1:1:1:1:920000:920000:4:1:2:1:960000:960000:4096:1"))
    recs.sort(key=lambda r: (r[0], {"1": 0, "2": 1, "3": 2}[r[1][0]]))
    (d / "families.prv").write_text("\n".join(lines + [r for _, r in recs]) + "\n")
    pcf = ["DEFAULT_OPTIONS", "", "LEVEL               THREAD", "UNITS               NANOSEC",
           "", "STATES", "0    Idle", "1    Running", "", "EVENT_TYPE",
           "0    63000000   CUDA library call", "VALUES", "0 End", "1000 cudaLaunchKernel", "",
           "EVENT_TYPE", "0    67100001   CUDA memory operation", "VALUES", "0 End",
           "2 memcpy Host-to-Device", "", "EVENT_TYPE", "0    67100002   CUDA memory operation bytes",
           "", "EVENT_TYPE", "0    63000006   CUDA kernel", "0    67000002   NCCL kernel", "VALUES", "0 End",
           "1 gemm_kernel", "2 ncclDevKernel_AllReduce_Sum_f32_RING_LL", "",
           "EVENT_TYPE", "0    50000001   MPI Point-to-point", "VALUES", "0 End",
           "1 MPI_Send", "2 MPI_Recv", "", "EVENT_TYPE", "0    50000002   MPI Collective Comm",
           "VALUES", "0 End", "10 MPI_Allreduce", "", "EVENT_TYPE",
           "0    50000003   MPI Other", "VALUES", "0 End", "31 MPI_Init", "", "EVENT_TYPE",
           "0    50000004   MPI One-sided", "VALUES", "0 End", "1 MPI_Put", "", "EVENT_TYPE",
           "0    50000005   MPI I/O", "VALUES", "0 End", "1 MPI_File_write", "",
           "EVENT_TYPE", "0    66000000   OpenACC", "0    66000001   OpenACC data",
           "0    66000002   OpenACC launch", "VALUES", "0 End", "1 region", "",
           "EVENT_TYPE", f"0    {nccl.NCCL_RANGE}   NCCL call", "VALUES", "0 End",
           "1 ncclAllReduce", "", "EVENT_TYPE", f"0    {nccl.NCCL_COLLECTIVE}   NCCL collective",
           "VALUES", "0 End", "1 AllReduce", "",
           "EVENT_TYPE", f"0    {nccl.NCCL_MESSAGE_SIZE}   NCCL message size", ""]
    for name, off in metrics:
        pcf += ["EVENT_TYPE", f"0    {gpu_metrics.SAMPLES.type_of(off)}   GPU metric: {name}",
                f"0    {gpu_metrics.RATE.type_of(off)}   GPU metric rate of kernel: {name}",
                f"0    {gpu_metrics.PREDICTED.type_of(off)}   GPU metric predicted: {name}",
                f"PRECISION {gpu_metrics.PRECISION}", ""]
    (d / "families.pcf").write_text("\n".join(pcf) + "\n")
    threads = []
    for task in (1, 2):
        threads += [f"rank {task - 1} main", f"GPU {task - 1} ctx 1 stream 7",
                    f"GPU {task - 1} metrics"]
    row = (["LEVEL NODE SIZE 1", "families-node", "", "LEVEL TASK SIZE 2", "rank 0", "rank 1",
            "", "LEVEL THREAD SIZE 6"] + threads)
    (d / "families.row").write_text("\n".join(row) + "\n")
    return d / "families.prv"


if __name__ == "__main__":
    sys.exit(main())
