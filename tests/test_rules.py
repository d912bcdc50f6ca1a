"""nsys2prv.rules: the expert-system rules of `nsys analyze`, without nsys.

* equality with Nsight Systems 2023.4 on every corpus export, for the six rules with default
  and other options (tests/data/rules/nsys2023, recorded by tests/data/rules/generate.py;
  re-run live where nsys2023 is installed), and with 2022.4 where 2023.4 refuses old exports;
* synthetic exports with answers worked out by hand;
* bad specs and inputs: one-line errors.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import polars as pl
import pytest

from nsys2prv import rules
from nsys2prv.errors import InputError, UsageError
from nsys2prv.cli.rules import main as rules_main
from nsys2prv.rules.numbers import sequential_sums, sqlite_round
from nsys2prv.testing.synth import ApiCall, Kernel, Memcpy, Memset, Nvtx, Spec, global_tid, \
    write_export
from nsys2prv.testing.synth_rules import SEEDS, probe_exports

from conftest import CORPUS, corpus_cases, corpus_files

DATA = Path(__file__).parent / "data" / "rules"
OLD_EXPORT = re.compile(r"greenContextId|ENUM_CUDA_MEM_KIND")
MS = 1_000_000


# -- equality with nsys on the corpus ---------------------------------------------------------

def _index(version: str) -> dict[str, list[dict]]:
    by_export: dict[str, list[dict]] = {}
    path = DATA / version / "index.csv"
    if path.exists():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                by_export.setdefault(row["export"], []).append(row)
    return by_export


NSYS2023 = _index("nsys2023")
NSYS2022 = {(r["export"], r["spec"]): r for rows in _index("nsys2022").values() for r in rows}


def _recorded(version: str, row: dict) -> str:
    return (DATA / version / row["file"]).read_text() if row["file"] else ""


def _without_green(text: str) -> str:
    """Our CSV with the Green Context ID column (which 2022.4 does not have) removed."""
    lines = list(csv.reader(text.splitlines()))
    if not lines or "Green Context ID" not in lines[0]:
        return text
    i = lines[0].index("Green Context ID")
    out = [",".join(x for j, x in enumerate(line) if j != i) for line in lines]
    return "\n".join(out) + "\n"


def compare_export(export: Path, cases: list[dict]) -> list[str]:
    """Every recorded case of one export against our result; the mismatches, described."""
    problems = []
    for case in cases:
        spec = case["spec"]
        result = rules.run(export, spec)
        ours = rules.format_csv(result, raw=True)
        status = case["status"]
        if status == "skipped" and OLD_EXPORT.search(case["message"]):
            # 2023.4 refuses exports older than its schema; we answer, as 2022.4 does
            if result.skipped:
                problems.append(f"{spec}: skipped ({result.skipped}), nsys 2022.4 answers")
                continue
            old = NSYS2022.get((case["export"], spec))
            if old is not None:
                want = _recorded("nsys2022", old) if old["status"] == "rows" else ""
                if old["status"] not in ("rows", "empty"):
                    problems.append(f"{spec}: nsys 2022.4 says {old['status']}")
                elif _without_green(ours) != want:
                    problems.append(f"{spec}: differs from nsys 2022.4\n--- ours\n{ours}"
                                    f"--- nsys 2022.4\n{want}")
        elif status == "skipped":
            if not result.skipped:
                problems.append(f"{spec}: nsys skips ({case['message']}), we do not")
        elif status in ("rows", "empty"):
            want = _recorded("nsys2023", case)
            if result.skipped:
                problems.append(f"{spec}: we skip ({result.skipped}), nsys answers")
            elif ours != want:
                problems.append(f"{spec}: differs\n--- ours\n{ours}--- nsys\n{want}")
        else:
            problems.append(f"{spec}: unexpected recorded status {status}")
    return problems


@pytest.fixture(**corpus_cases(sorted(CORPUS / e for e in NSYS2023
                                      if not e.startswith("probe/"))))
def recorded_export(request) -> Path:
    if request.param is None:
        pytest.skip("no recorded nsys outputs (tests/data/rules/nsys2023) or corpus at "
                    f"{CORPUS}")
    if not request.param.exists():
        pytest.skip(f"corpus file {request.param} not found (set NSYS2PRV_CORPUS)")
    return request.param


def test_equal_to_nsys_2023_on_corpus(recorded_export: Path) -> None:
    cases = NSYS2023[recorded_export.relative_to(CORPUS).as_posix()]
    problems = compare_export(recorded_export, cases)
    assert not problems, "\n".join(problems)


PROBES = sorted(e for e in NSYS2023 if e.startswith("probe/"))


@pytest.fixture(scope="module")
def probe_files(tmp_path_factory) -> dict[str, Path]:
    return probe_exports(tmp_path_factory.mktemp("probes"))


@pytest.mark.parametrize("name", PROBES)
def test_equal_to_nsys_2023_on_probes(name: str, probe_files: dict[str, Path]) -> None:
    """Seeded synthetic exports full of ties, shared correlation ids, overheads and
    graphics workloads, rebuilt here, against what nsys printed for them."""
    path = probe_files[name.removeprefix("probe/").removesuffix(".sqlite")]
    problems = compare_export(path, NSYS2023[name])
    assert not problems, "\n".join(problems)


def test_reference_covers_the_corpus() -> None:
    """Every corpus export has recorded cases, and the recorded outputs are not trivial."""
    if not corpus_files():
        pytest.skip(f"real-export corpus not found at {CORPUS}")
    recorded = {CORPUS / e for e in NSYS2023}
    assert set(corpus_files()) <= recorded
    statuses = [c["status"] for cases in NSYS2023.values() for c in cases]
    assert statuses.count("rows") > 300
    rules_with_rows = {c["spec"].split(":")[0] for e, cases in NSYS2023.items() for c in cases
                       if c["status"] == "rows" and not e.startswith("probe/")}
    # no corpus export has a synchronous memset on pinned or managed memory
    assert rules_with_rows == set(rules.DEFAULT_RULES) - {"cuda_memset_sync"}
    probe_rules = {c["spec"].split(":")[0] for e in PROBES for c in NSYS2023[e]
                   if c["status"] == "rows"}
    assert probe_rules == set(rules.DEFAULT_RULES) and len(PROBES) == len(SEEDS)
    assert any("nvtx=" in c["spec"] and c["status"] == "rows"
               for cases in NSYS2023.values() for c in cases)


def _nsys_2023() -> str | None:
    for name in ("nsys2023", "nsys"):
        exe = shutil.which(name)
        if exe is None:
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        if re.search(r"\b2023\.4\.", out):
            return exe
    return None


LIVE_CASES = [("exported/cumat_mpi_4gpu.nsys2022.4.sqlite",
               ["gpu_gaps:gap=0:rows=7", "gpu_time_util:threshold=95:chunks=13",
                "cuda_api_sync:nvtx=MPI_Barrier@MPI/2", "gpu-starv:gap=0:rows=3"]),
              ("sqlite/nsysai_mfu2gpu_before.sqlite",
               ["cuda_memcpy_async:rows=-1", "cuda_memcpy_sync:rows=9",
                "cuda_memset_sync:rows=-1", "gpu_time_util:threshold=60:chunks=77"])]


@pytest.mark.parametrize("export,specs", LIVE_CASES, ids=[c[0] for c in LIVE_CASES])
def test_equal_to_live_nsys_2023(export: str, specs: list[str]) -> None:
    """The same comparison against nsys run now (where Nsight Systems 2023.4 is installed)."""
    exe = _nsys_2023()
    if exe is None:
        pytest.skip("Nsight Systems 2023.4 not installed (no nsys2023, nor nsys 2023.4)")
    path = CORPUS / export
    if not path.exists():
        pytest.skip(f"corpus file {path} not found")
    for spec in specs:
        proc = subprocess.run([exe, "analyze", "-q", "--format", "csv:noconv", "--rule",
                               spec, str(path)], capture_output=True, text=True, check=True)
        want = "\n".join(ln for ln in proc.stdout.splitlines() if ln.strip())
        ours = rules.format_csv(rules.run(path, spec), raw=True).rstrip("\n")
        assert ours == want, spec


# -- synthetic exports with known answers -----------------------------------------------------

def _gpu_spec() -> Spec:
    """Process 10 on device 0: kernels [0,10) [15,30) [20,25) [100,110) ms, a memcpy
    [150,160) ms and a memset [300,301) ms; device 1: kernels [0,1) and [2,3) ms.
    Process 11 on device 0: one kernel [50,60) ms."""
    k = [Kernel(0, 10 * MS, 10, 0, 7, "a", 1), Kernel(15 * MS, 30 * MS, 10, 0, 7, "b", 2),
         Kernel(20 * MS, 25 * MS, 10, 0, 8, "c", 3), Kernel(100 * MS, 110 * MS, 10, 0, 7, "d", 4),
         Kernel(0, 1 * MS, 10, 1, 7, "e", 5), Kernel(2 * MS, 3 * MS, 10, 1, 7, "f", 6),
         Kernel(50 * MS, 60 * MS, 11, 0, 7, "g", 7)]
    # a kernel at time 0 is ignored (nsys only counts start > 0): shift everything by 1 ns
    for x in k:
        x.start += 1
        x.end += 1
    return Spec(kernels=k,
                memcpy=[Memcpy(150 * MS + 1, 160 * MS + 1, 10, 0, 7, 8, 1 << 20)],
                memset=[Memset(300 * MS + 1, 301 * MS + 1, 10, 0, 7, 9, 4096)],
                api=[ApiCall(0, 1, 10, 10, "cudaLaunchKernel", i) for i in range(1, 8)])


@pytest.fixture(scope="module")
def gpu_export(tmp_path_factory) -> Path:
    return write_export(tmp_path_factory.mktemp("rules") / "gpu.sqlite", _gpu_spec())


def test_rules_of_one_run_read_the_operations_once(gpu_export: Path, monkeypatch) -> None:
    """`run_all` reads the GPU operations once for gpu_gaps and gpu_time_util (they read
    the same), and every rule's rows equal those of the rule run alone; a window of the
    options is another read."""
    from nsys2prv.rules import gpu_ops

    reads = []
    read = gpu_ops._operations

    def counted(inp, api, tables):
        reads.append((api.name, inp.window))
        return read(inp, api, tables)

    monkeypatch.setattr(gpu_ops, "_operations", counted)
    specs = ["gpu_gaps:gap=0", "gpu_time_util:threshold=60:chunks=7"]
    together = rules.run_all(gpu_export, specs)
    assert len(reads) == 1
    for spec, r in zip(specs, together):
        alone = rules.run(gpu_export, spec)
        assert r.rows.height and r.rows.equals(alone.rows)
    reads.clear()
    rules.run_all(gpu_export, ["gpu_gaps:gap=0", "gpu_time_util:start=50:end=200"])
    assert len(reads) == 2 and reads[0][1] != reads[1][1]


def test_gaps_closed_form(gpu_export: Path) -> None:
    """Gaps are the holes of the union of operations per (process, device)."""
    r = rules.run(gpu_export, "gpu_gaps:gap=0")
    assert r.skipped is None
    got = r.rows.select("Duration (ns)", "Start (ns)", "PID", "Device ID").rows()
    # device 0 of pid 10: busy [0,10) [15,30) [100,110) [150,160) [300,301) (+1 ns each)
    assert got == [(140 * MS, 160 * MS + 1, 10, 0), (70 * MS, 30 * MS + 1, 10, 0),
                   (40 * MS, 110 * MS + 1, 10, 0), (5 * MS, 10 * MS + 1, 10, 0),
                   (1 * MS, 1 * MS + 1, 10, 1)]
    assert r.rows["Row#"].to_list() == [1, 2, 3, 4, 5]
    # strictly longer than the threshold: the 40 ms gap is out at gap=40, in at gap=39
    assert rules.run(gpu_export, "gpu_gaps:gap=40").rows["Duration (ns)"].to_list() == [
        140 * MS, 70 * MS]
    assert rules.run(gpu_export, "gpu_gaps:gap=39").rows.height == 3
    assert rules.run(gpu_export, "gpu_gaps").rows.height == 0
    assert "500 ms" in rules.run(gpu_export, "gpu_gaps").message
    # rows limits the list to the longest gaps
    assert rules.run(gpu_export, "gpu_gaps:gap=0:rows=2").rows["Duration (ns)"].to_list() == [
        140 * MS, 70 * MS]
    assert rules.run(gpu_export, "gpu_gaps:gap=0:rows=2").truncated


def test_operations_at_time_zero_do_not_count(tmp_path: Path) -> None:
    """nsys keeps only GPU operations with start > 0."""
    spec = Spec(kernels=[Kernel(0, 5 * MS, 1, 0, 7, "a", 1), Kernel(10 * MS, 12 * MS, 1, 0, 7,
                                                                    "b", 2),
                         Kernel(20 * MS, 21 * MS, 1, 0, 7, "c", 3)])
    path = write_export(tmp_path / "zero.sqlite", spec)
    got = rules.run(path, "gpu_gaps:gap=0").rows.select("Duration (ns)", "Start (ns)").rows()
    assert got == [(8 * MS, 12 * MS)]


def test_gaps_in_a_window(gpu_export: Path) -> None:
    """start/end keep operations overlapping the window (not clipped), then gaps as usual."""
    r = rules.run(gpu_export, f"gpu_gaps:gap=0:start={105 * MS}:end={155 * MS}")
    assert r.rows.select("Duration (ns)", "Start (ns)").rows() == [(40 * MS, 110 * MS + 1)]
    # a window touching nothing of pid 10 device 1 leaves device 1 out entirely
    r = rules.run(gpu_export, f"gpu_gaps:gap=0:start={20 * MS}")
    assert set(r.rows["Device ID"].to_list()) == {0}


def _add_overheads(path: Path, rows: list[tuple[int, int, int, str]]) -> None:
    """Add PROFILER_OVERHEAD rows (start, end, pid, name) to a synthetic export."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE PROFILER_OVERHEAD (start INTEGER NOT NULL, end INTEGER, "
                "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL)")
    next_id = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    for start, end, pid, name in rows:
        found = con.execute("SELECT id FROM StringIds WHERE value = ?", (name,)).fetchone()
        if found is None:
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (next_id, name))
            found, next_id = (next_id,), next_id + 1
        con.execute("INSERT INTO PROFILER_OVERHEAD VALUES (?, ?, ?, 0, ?)",
                    (start, end, global_tid(pid, pid), found[0]))
    con.commit()
    con.close()


def test_gaps_exclude_profiler_overhead(tmp_path: Path) -> None:
    """A CUDA flush overhead inside a device's span fills the gap it covers, on every
    device of its process; other overheads and overheads outside the span do not."""
    path = write_export(tmp_path / "o.sqlite", _gpu_spec())
    _add_overheads(path, [(40 * MS, 90 * MS, 10, "CUDA profiling data flush overhead"),
                          (170 * MS, 250 * MS, 10, "CUPTI: Buffer flush"),
                          (1 * MS + 100, 2 * MS - 100, 10, "CUDA profiling overhead"),
                          (400 * MS, 500 * MS, 10, "CUDA profiling stop overhead")])
    got = rules.run(path, "gpu_gaps:gap=0").rows.select(
        "Duration (ns)", "Start (ns)", "Device ID").rows()
    # device 0: the 70 ms gap at 30 ms is cut by the flush overhead [40, 90) ms; device 1:
    # the 1 ms gap at 1 ms is cut by [1 ms + 100, 2 ms - 100)
    assert got == [(140 * MS, 160 * MS + 1, 0), (40 * MS, 110 * MS + 1, 0),
                   (10 * MS + 1, 90 * MS, 0), (10 * MS - 1, 30 * MS + 1, 0),
                   (5 * MS, 10 * MS + 1, 0), (101, 2 * MS - 100, 1), (99, 1 * MS + 1, 1)]


def test_time_util_closed_form(gpu_export: Path) -> None:
    """Chunks of ceil(span / chunks) ns; use = summed overlap / chunk length; runs of low
    chunks merged with a length-weighted mean, rounded as SQLite rounds."""
    r = rules.run(gpu_export, "gpu_time_util:chunks=3")
    # pid 10 device 1 spans [1, 3 ms + 1): chunks of 1 ms, busy, idle, busy
    # pid 10 device 0 spans [1, 301 ms + 1): chunks of 100333334 ns (the last shorter)
    width = 100_333_334
    sizes = [width, width, 301 * MS - 2 * width]
    used = [30 * MS + (width + 1 - (100 * MS + 1)),  # 10 + 15 + 5 ms, then 110 ms' kernel
            (110 * MS + 1) - (width + 1) + 10 * MS,  # the rest of it, and the memcpy
            1 * MS]  # the memset
    pct = [u / s * 100 for u, s in zip(used, sizes)]
    assert r.rows.select("In-Use (%)", "Duration (ns)", "Start (ns)", "PID",
                         "Device ID").rows() == [
        (0.0, 1 * MS, 1 * MS + 1, 10, 1),
        (sqlite_round(sum(s * p for s, p in zip(sizes, pct)) / sum(sizes), 1), 301 * MS, 1,
         10, 0)]  # pid 11's single kernel keeps its device busy
    # with threshold 20 the first chunk (30.2 %) stays out: the other two form one run
    low = rules.run(gpu_export, "gpu_time_util:chunks=3:threshold=20").rows.filter(
        pl.col("Device ID") == 0)
    assert pct[0] > 20 > pct[1]
    assert low.select("In-Use (%)", "Duration (ns)", "Start (ns)").rows() == [
        (sqlite_round((sizes[1] * pct[1] + sizes[2] * pct[2]) / (sizes[1] + sizes[2]), 1),
         sizes[1] + sizes[2], 1 + width)]


def test_time_util_counts_concurrency_and_ranks(gpu_export: Path) -> None:
    """Overlapping kernels add up (chunks 20..24 ms hold two: 200 %); rows are ranked by
    use; rows=N keeps nsys' first N runs (by run, device, process) before ranking."""
    r = rules.run(gpu_export, "gpu_time_util:chunks=301:threshold=1000")
    dev0 = r.rows.filter((pl.col("Device ID") == 0) & (pl.col("PID") == 10))
    assert dev0["In-Use (%)"].to_list() == [sqlite_round(51 / 301 * 100, 1)]  # 51 ms busy
    r = rules.run(gpu_export, "gpu_time_util:chunks=301:threshold=150")
    assert r.rows.select("In-Use (%)", "Duration (ns)", "Start (ns)", "PID",
                         "Device ID").rows() == [
        (9.4, 276 * MS, 25 * MS + 1, 10, 0),  # 5 + 10 + 10 + 1 ms busy of 276
        (sqlite_round(2 / 3 * 100, 1), 3 * MS, 1, 10, 1),
        (75.0, 20 * MS, 1, 10, 0),  # 10 + 5 ms busy of 20
        (100.0, 10 * MS, 50 * MS + 1, 11, 0)]
    top = rules.run(gpu_export, "gpu_time_util:chunks=301:threshold=150:rows=2")
    assert top.rows.select("In-Use (%)", "PID").rows() == [(75.0, 10), (100.0, 11)]


def test_time_util_chunks_zero_and_bounds(gpu_export: Path) -> None:
    assert rules.run(gpu_export, "gpu_time_util:chunks=0").rows.height == 0
    for bad in ("gpu_time_util:chunks=1001", "gpu_time_util:chunks=-1"):
        with pytest.raises(UsageError, match="between 1 and 1000"):
            rules.run(gpu_export, bad)


def _calls_spec() -> Spec:
    """Synchronisation calls, sync and async copies (pageable or pinned), memsets."""
    api = [ApiCall(1000, 5000, 20, 21, "cudaDeviceSynchronize_v3020", 100),
           ApiCall(6000, 16000, 20, 22, "cudaStreamSynchronize_v3020", 101),
           ApiCall(17000, 19000, 20, 21, "cudaEventSynchronize_v3020", 102),
           ApiCall(20000, 24000, 30, 30, "cudaStreamSynchronize", 103),
           # copies: correlation -> the call that issued it
           ApiCall(30000, 31000, 20, 21, "cudaMemcpy_v3020", 1),
           ApiCall(32000, 33000, 20, 21, "cudaMemcpy_v3020", 2),
           ApiCall(34000, 35000, 20, 21, "cudaMemcpyAsync_v3020", 3),
           ApiCall(36000, 37000, 20, 21, "cudaMemcpyAsync_v3020", 4),
           ApiCall(38000, 39000, 20, 21, "cudaMemcpy2DAsync_v3020", 5),
           ApiCall(40000, 41000, 20, 21, "cudaMemcpy_v3020", 6),
           ApiCall(42000, 43000, 20, 21, "cudaMemset_v3020", 7),
           ApiCall(44000, 45000, 20, 21, "cudaMemsetAsync_v3020", 8),
           ApiCall(46000, 47000, 20, 21, "cudaMemset_v3020", 9),
           ApiCall(48000, 49000, 20, 21, "cudaMemset_v3020", 10)]
    memcpy = [Memcpy(30100, 30900, 20, 0, 7, 1, 64000, copy_kind=1),  # small HtoD: out
              Memcpy(32100, 32800, 20, 0, 7, 2, 64001, copy_kind=1),  # large HtoD: in
              Memcpy(34100, 34600, 20, 0, 7, 3, 10, src_kind=0, dst_kind=2),  # pageable
              Memcpy(36100, 36300, 20, 0, 7, 4, 10, src_kind=1, dst_kind=2),  # pinned: out
              Memcpy(38100, 38500, 20, 0, 7, 5, 10, copy_kind=2, src_kind=2, dst_kind=0),
              Memcpy(40100, 40800, 20, 0, 7, 6, 10, copy_kind=2, src_kind=2, dst_kind=1)]
    memset = [Memset(42100, 42900, 20, 0, 7, 7, 100, mem_kind=1),  # pinned: in
              Memset(44100, 44900, 20, 0, 7, 8, 100, mem_kind=4),  # async: out
              Memset(46100, 46500, 20, 0, 7, 9, 100, mem_kind=4),  # managed: in
              Memset(48100, 48900, 20, 0, 7, 10, 100, mem_kind=2)]  # device: out
    return Spec(api=api, memcpy=memcpy, memset=memset)


@pytest.fixture(scope="module")
def calls_export(tmp_path_factory) -> Path:
    path = write_export(tmp_path_factory.mktemp("rules") / "calls.sqlite", _calls_spec())
    con = sqlite3.connect(path)  # real exports leave the device ids of most copies unknown
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcDeviceId = NULL, dstDeviceId = NULL "
                "WHERE correlationId != 6")
    con.commit()
    con.close()
    return path


def test_sync_calls(calls_export: Path) -> None:
    r = rules.run(calls_export, "cuda_api_sync")
    assert r.rows.rows() == [(10000, 6000, 20, 22, "cudaStreamSynchronize_v3020"),
                             (4000, 1000, 20, 21, "cudaDeviceSynchronize_v3020"),
                             (4000, 20000, 30, 30, "cudaStreamSynchronize")]
    assert rules.run(calls_export, "cuda_api_sync:process=30").rows["PID"].to_list() == [30]
    assert rules.run(calls_export, "cuda_api_sync:thread=21").rows["Start (ns)"].to_list() == [
        1000]
    assert rules.run(calls_export, "cuda_api_sync:end=5999").rows.height == 1
    assert rules.run(calls_export, "cuda-sync-api:rows=1").rows.height == 1  # 2022.4 name


def test_sync_memcpy(calls_export: Path) -> None:
    """Synchronous cudaMemcpy copies, except small host-to-device ones and copies within
    one known device."""
    r = rules.run(calls_export, "cuda_memcpy_sync")
    assert r.rows.select("Duration (ns)", "Bytes (B)", "Src Kind", "Dst Kind").rows() == [
        (700, 64001, "Pageable", "Device")]  # correlation 6 is a same-device copy: out


def test_pageable_async_memcpy(calls_export: Path) -> None:
    r = rules.run(calls_export, "cuda_memcpy_async")
    assert r.rows.select("Duration (ns)", "Src Kind", "Dst Kind", "API Name").rows() == [
        (500, "Pageable", "Device", "cudaMemcpyAsync_v3020"),
        (400, "Device", "Pageable", "cudaMemcpy2DAsync_v3020")]
    assert r.rows["Green Context ID"].null_count() == 2


def test_sync_memset(calls_export: Path) -> None:
    r = rules.run(calls_export, "cuda_memset_sync")
    assert r.rows.select("Duration (ns)", "Memory Kind", "Bytes (B)").rows() == [
        (800, "Pinned", 100), (400, "Managed", 100)]


def test_nvtx_window(tmp_path: Path) -> None:
    """nvtx=NAME[@DOMAIN][/N] takes the N-th range of that name by start time; a push/pop
    range off the main thread limits CPU rows to its thread, GPU rows to its process."""
    spec = _calls_spec()
    spec.nvtx = [Nvtx(500, 18000, 20, 21, "pushpop", "phase"),
                 Nvtx(19000, 30000, 20, 20, "pushpop", "phase", domain="D"),
                 Nvtx(5500, 25000, 20, 22, "pushpop", "phase")]
    path = write_export(tmp_path / "n.sqlite", spec)
    starts = rules.run(path, "cuda_api_sync:nvtx=phase").rows["Start (ns)"].to_list()
    assert starts == [1000]  # thread 21 only
    starts = rules.run(path, "cuda_api_sync:nvtx=phase/1").rows["Start (ns)"].to_list()
    assert starts == [6000]  # the second "phase" (thread 22)
    r = rules.run(path, "cuda_api_sync:nvtx=phase@D")  # main thread: the whole process
    assert r.rows.height == 0 and r.skipped is None  # process 20 has no sync call in it
    r = rules.run(path, "cuda_api_sync:nvtx=nothing")
    assert r.skipped and "nothing" in r.skipped and r.rows.height == 0


def test_legacy_export_without_enums(tmp_path: Path) -> None:
    """Exports without ENUM_CUDA_MEM_KIND or greenContextId (which nsys 2023.4 refuses) are
    analysed with CUPTI's memory-kind names and no green context."""
    path = write_export(tmp_path / "legacy.sqlite", _calls_spec(), layout="legacy")
    r = rules.run(path, "cuda_memcpy_async")
    assert r.skipped is None
    assert r.rows["Src Kind"].to_list() == ["Pageable", "Device"]


def test_missing_data_is_skipped(tmp_path: Path) -> None:
    path = write_export(tmp_path / "cpu.sqlite", Spec(api=[ApiCall(1, 2, 1, 1, "cudaFree", 1)]))
    for spec in ("gpu_gaps", "gpu_time_util"):
        assert "no GPU operations" in rules.run(path, spec).skipped
    assert "memcpy" in rules.run(path, "cuda_memcpy_sync").skipped
    assert "memset" in rules.run(path, "cuda_memset_sync").skipped
    assert rules.run(path, "cuda_api_sync").skipped is None


def test_sqlite_round_matches_sqlite() -> None:
    """SQLite rounds halves up (and values a hair below); Python's round does not."""
    assert sqlite_round(12.25, 1) == 12.3 and round(12.25, 1) == 12.2
    assert sqlite_round(12.249999999999998, 1) == 12.3
    assert sqlite_round(5.05, 1) == 5.1 and sqlite_round(0.0, 1) == 0.0
    assert sqlite_round(49.94, 1) == 49.9 and sqlite_round(99.96, 1) == 100.0


def test_sequential_sums() -> None:
    import numpy as np

    values = np.array([1e16, 1.0, 1.0, 3.0, 4.0, 0.1, 0.2])
    sums = sequential_sums(values, np.array([0, 3, 5]))
    assert sums.tolist() == [(1e16 + 1.0) + 1.0, 7.0, 0.1 + 0.2]


# -- formatting, the CLI and errors -----------------------------------------------------------

def test_formats(calls_export: Path) -> None:
    r = rules.run(calls_export, "cuda_memcpy_sync")
    assert rules.format_csv(r) == (
        "Duration (ns),Start (ns),Src Kind,Dst Kind,Bytes (MB),PID,Device ID,Context ID,"
        "Green Context ID,Stream ID,API Name\n"
        "700,32100,Pageable,Device,0.064,20,0,1,,7,cudaMemcpy_v3020\n")
    assert "Bytes (B)" in rules.format_csv(r, raw=True)
    text = rules.format_text(r)
    assert text.startswith(" ** CUDA Synchronous Memcpy (cuda_memcpy_sync):")
    table = text.split("\n\n")[-1].splitlines()
    assert table[0].split() == ["Duration", "(ns)", "Start", "(ns)", "Src", "Kind", "Dst",
                                "Kind", "Bytes", "(MB)", "PID", "Device", "ID", "Context",
                                "ID", "Green", "Context", "ID", "Stream", "ID", "API", "Name"]
    assert set(table[1].replace(" ", "")) == {"-"}
    assert table[2].split() == ["700", "32100", "Pageable", "Device", "0.064", "20", "0", "1",
                                "7", "cudaMemcpy_v3020"]
    empty = rules.run(calls_export, "gpu_gaps")
    assert rules.format_csv(empty) == "" and "No GPU was idle" in rules.format_text(empty)


def test_cli(calls_export: Path, capsys) -> None:
    assert rules_main(["-r", "cuda_api_sync:rows=1,cuda_memset_sync", "-f", "csv",
                       str(calls_export)]) == 0
    out = capsys.readouterr().out
    assert out == ("Duration (ns),Start (ns),PID,TID,API Name\n"
                   "10000,6000,20,22,cudaStreamSynchronize_v3020\n\n"
                   "Duration (ns),Start (ns),Memory Kind,Bytes (MB),PID,Device ID,Context ID,"
                   "Green Context ID,Stream ID,API Name\n"
                   "800,42100,Pinned,0.000,20,0,1,,7,cudaMemset_v3020\n"
                   "400,46100,Managed,0.000,20,0,1,,7,cudaMemset_v3020\n\n")
    assert rules_main([str(calls_export)]) == 0  # all six rules, text
    out, err = capsys.readouterr()
    assert out.count(" ** ") == 6 and "GPU Gaps (gpu_gaps)" in out


@pytest.mark.parametrize("spec,message", [
    ("nosuchrule", "unknown rule 'nosuchrule'"),
    ("gpu_gaps:foo=1", "unknown option 'foo'"),
    ("gpu_gaps:gap", "not of the form name=value"),
    ("gpu_gaps:gap=1.5", "needs an integer, not '1.5'"),
    ("cuda_api_sync:rows=", "needs an integer"),
    ("gpu_time_util:chunks=5000", "between 1 and 1000"),
    ("gpu_gaps:start=10:end=9", "start (10) is after end (9)"),
    ("cuda_api_sync:nvtx=a:process=3", "nvtx cannot be combined"),
    ("cuda_memcpy_sync:process=3", "unknown option 'process'"),
    (":rows=3", "no rule name"),
])
def test_bad_specs(spec: str, message: str, calls_export: Path, capsys) -> None:
    with pytest.raises(UsageError) as err:
        rules.run(calls_export, spec)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert rules_main(["-r", spec, str(calls_export)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_report_input_is_exported_with_nsys(tmp_path: Path) -> None:
    """A .qdrep/.nsys-rep is exported with the installed nsys (cached beside it) and gives
    the rows its export gives."""
    report = CORPUS / "reports" / "vaclav_cuda_par_exec_2020_4.qdrep"
    export = CORPUS / "exported" / "vaclav_cuda_par_exec_2020_4.nsys2022.4.sqlite"
    if shutil.which("nsys") is None:
        pytest.skip("no nsys on PATH to export a report")
    if not report.exists() or not export.exists():
        pytest.skip(f"corpus report {report} not found")
    copy = tmp_path / report.name
    shutil.copy(report, copy)
    ours = rules.run(copy, "cuda_api_sync:rows=-1")
    assert ours.rows.height > 0
    assert ours.rows.equals(rules.run(export, "cuda_api_sync:rows=-1").rows)


def test_bad_inputs(tmp_path: Path, capsys) -> None:
    with pytest.raises(InputError, match="no such file"):
        rules.run(tmp_path / "missing.sqlite", "gpu_gaps")
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database")
    with pytest.raises(InputError, match="not an SQLite database"):
        rules.run(text, "gpu_gaps")
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        rules.run(other, "cuda_api_sync")
    assert rules_main([str(text)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_mounted_as_analyze_rule(calls_export: Path, capsys) -> None:
    """`nsys2prv analyze -r/--rule ...` is the rules' command; `all` is the six rules; without
    a rule, analyze is the efficiency model (which reads the same export)."""
    from nsys2prv.cli import main as cli_main
    from nsys2prv.cli.analyze import wants_rules

    assert rules_main(["-f", "csv", str(calls_export)]) == 0
    six = capsys.readouterr().out
    assert cli_main(["analyze", "-r", "all", "-f", "csv", str(calls_export)]) == 0
    assert capsys.readouterr().out == six
    assert cli_main(["analyze", "--rule=cuda_api_sync:rows=1", "-f", "csv",
                     str(calls_export)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "10000,6000,20,22,cudaStreamSynchronize_v3020"
    assert cli_main(["analyze", "-rgpu_gaps", str(calls_export)]) == 0
    assert "GPU Gaps (gpu_gaps)" in capsys.readouterr().out
    assert [wants_rules(a) for a in (["x.prv"], ["--json", "x.prv"], ["--", "-r"],
                                     ["-r", "gpu_gaps", "x"], ["--rule", "all", "x"])] \
        == [False, False, False, True, True]


# -- nsys analyze's output options (-o, -f, --force-overwrite, @command) ------------------------

def _run_cli(args: list, capsys) -> tuple[int, str, str]:
    code = rules_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_outputs_are_files_paired_with_rules_as_in_nsys(calls_export: Path, tmp_path: Path,
                                                        capsys) -> None:
    """The k-th rule goes to the k-th output in the k-th format, the last of each serving the
    rules after it; a file is BASE_RULE[_OPTION=VALUE...].EXT; no rows: an empty CSV, an
    empty JSON array; extra outputs are warned about."""
    a, b = tmp_path / "a", tmp_path / "b"
    code, out, err = _run_cli(["-r", "cuda_api_sync:rows=2,gpu_gaps,cuda_memset_sync",
                               "-f", "csv,json", "-o", f"{a},{b},{tmp_path / 'c'},{a}",
                               calls_export], capsys)
    assert (code, out) == (0, "")
    assert err == "nsys2prv analyze: warning: more outputs (-o) than rules: the last 1 are " \
                  "not used\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a_cuda_api_sync_rows=2.csv", "b_gpu_gaps.json", "c_cuda_memset_sync.json"]
    assert (tmp_path / "a_cuda_api_sync_rows=2.csv").read_text() == (
        "Duration (ns),Start (ns),PID,TID,API Name\n"
        "10000,6000,20,22,cudaStreamSynchronize_v3020\n"
        "4000,1000,20,21,cudaDeviceSynchronize_v3020\n")
    assert (tmp_path / "b_gpu_gaps.json").read_text() == "[\n]\n"
    import json

    memset = json.loads((tmp_path / "c_cuda_memset_sync.json").read_text())
    assert [(r["Duration (ns)"], r["Memory Kind"], r["Bytes (MB)"], r["Green Context ID"])
            for r in memset] == [(800, "Pinned", 0.0, ""), (400, "Managed", 0.0, "")]
    # tsv with bytes as bytes; the file named after the export (-o .)
    code, out, err = _run_cli(["-r", "cuda_memcpy_sync", "-f", "tsv:noconv", "-o", ".",
                               calls_export], capsys)
    assert (code, out, err) == (0, "", "")
    made = calls_export.with_name("calls_cuda_memcpy_sync.tsv")
    assert made.read_text().splitlines()[1].split("\t")[:5] == [
        "700", "32100", "Pageable", "Device", "64001"]
    made.unlink()


def test_existing_files_are_kept_without_force_overwrite(calls_export: Path, tmp_path: Path,
                                                         capsys) -> None:
    """As nsys: an existing file is left alone and its rule skipped (a line on stderr, exit
    0) unless --force-overwrite true; the option takes true or false."""
    target = tmp_path / "r_cuda_api_sync.csv"
    target.write_text("older\n")
    args = ["-r", "cuda_api_sync", "-o", tmp_path / "r", calls_export]
    code, out, err = _run_cli(args, capsys)
    assert (code, out, target.read_text()) == (0, "", "older\n")
    assert err == f"nsys2prv analyze: SKIPPED: output file {target} exists " \
                  "(--force-overwrite true replaces it)\n"
    assert _run_cli([*args, "--force-overwrite", "false"], capsys)[0] == 0
    assert target.read_text() == "older\n"
    assert _run_cli([*args, "--force-overwrite", "true"], capsys) == (0, "", "")
    assert target.read_text().startswith("Duration (ns),Start (ns),PID,TID,API Name\n10000,")
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no temporary left
    code, _, err = _run_cli([*args[:-1], "--force-overwrite", calls_export], capsys)
    assert code == 2 and err.count("\n") == 1 and "--force-overwrite" in err


def test_command_outputs_and_errors(calls_export: Path, tmp_path: Path, capsys) -> None:
    """@COMMAND gets the result on its stdin (CSV by default), split on whitespace; bad
    formats, a base for several exports and an unwritable place are one-line errors."""
    import sys

    script = tmp_path / "keep.py"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read())\n")
    got = tmp_path / "got.txt"
    code, out, err = _run_cli(["-r", "cuda_api_sync:rows=1,gpu_gaps", "-o",
                               f"@{sys.executable} {script} {got}", calls_export], capsys)
    assert (code, out, err) == (0, "", "")
    assert got.read_text() == ("Duration (ns),Start (ns),PID,TID,API Name\n"
                               "10000,6000,20,22,cudaStreamSynchronize_v3020\n")
    code, out, _ = _run_cli(["-r", "cuda_api_sync:rows=1", "-f", "table", calls_export],
                            capsys)  # nsys' boxed table
    box = "+---------------+------------+-----+-----+-----------------------------+"
    lines = out.splitlines()
    assert code == 0 and lines[lines.index(box):lines.index(box) + 5] == [
        box, "| Duration (ns) | Start (ns) | PID | TID |          API Name           |", box,
        "|         10000 |       6000 |  20 |  22 | cudaStreamSynchronize_v3020 |", box]
    second = tmp_path / "second.sqlite"
    shutil.copy(calls_export, second)
    for args, code_, words in (
            (["-f", "hdoc"], 2, "unsupported format 'hdoc'"),
            (["-f", "csv:mem=B"], 2, "format argument 'mem=B'"),
            (["-o", tmp_path / "x", second], 2, "use -o ."),
            (["-o", tmp_path / "missing" / "x"], 1, "cannot write"),
            (["-o", "@no-such-command-here"], 1, "cannot run it")):
        code, out, err = _run_cli(["-r", "cuda_api_sync", *args, calls_export], capsys)
        assert code == code_ and err.count("\n") == 1 and words in err, (args, err)


def test_output_options_equal_to_live_nsys(tmp_path: Path) -> None:
    """Where Nsight Systems 2023.4 is installed: the same command line writes the same files
    with the same bytes (CSV, TSV, JSON; the text formats carry our own advice), keeps them
    without --force-overwrite true and replaces them with it."""
    import sys

    exe = _nsys_2023()
    if exe is None:
        pytest.skip("Nsight Systems 2023.4 not installed (no nsys2023, nor nsys 2023.4)")
    export = CORPUS / "sqlite" / "hpco_report2.sqlite"
    if not export.exists():
        export = Path(__file__).resolve().parents[1] / "examples" / "sample.sqlite"
    runs = {"nsys": [exe, "analyze"],
            "ours": [sys.executable, "-m", "nsys2prv", "analyze"]}
    files = {}
    for who, cmd in runs.items():
        d = tmp_path / who
        d.mkdir()
        shutil.copy(export, d / "e.sqlite")
        args = ["-r", "cuda_api_sync,gpu_gaps:gap=0:rows=3,cuda_memcpy_sync,gpu_time_util",
                "-f", "csv,json,tsv:noconv", "-o", f"{d / 'a'},{d / 'b'},.", str(d / "e.sqlite")]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        for force in ([], [], ["--force-overwrite", "true"]):
            proc = subprocess.run(cmd + args + force, capture_output=True, text=True, env=env)
            assert proc.returncode == 0, (who, proc.stderr)
            if not force and not any(p.name.endswith(".old") for p in d.iterdir()):
                for p in d.iterdir():  # after the first run: mark every output file
                    if p.name != "e.sqlite":
                        p.with_name(p.name + ".old").write_bytes(p.read_bytes())
                        p.write_text("kept\n")
            elif not force:  # second run: every file kept
                assert all(p.read_text() == "kept\n" for p in d.iterdir()
                           if p.suffix in (".csv", ".json", ".tsv")), who
        files[who] = {p.name: p.read_bytes() for p in d.iterdir() if p.name != "e.sqlite"}
    assert files["ours"] == files["nsys"]
    assert "a_cuda_api_sync.csv" in files["ours"] and "e_gpu_time_util.tsv" in files["ours"]
