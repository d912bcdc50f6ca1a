"""`analyze` whose memory does not grow with the run (issue 48): the sections read the
activities, the samples and the gaps back from the pass's store window by window, so their
numbers must not depend on where the windows fall. Edge cases of the issue: an export whose
tables are not in time order, a kernel that spans the whole run, 10^6 NVTX ranges left open
(pushes without pops), a rank with all its work in one stream, and an analysis interrupted:
no temporary file left, and the exit code says so."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT

import nsys2prv
from nsys2prv.cli import main
from nsys2prv.paraver import read
from nsys2prv.testing.synth import ApiCall, Kernel, Memcpy, Nvtx, Spec, write_export
from nsys2prv.testing.synth_metrics import (METRIC_NAMES, MetricsSpec, Sample,
                                            add_native_metrics)

US = 1_000
PID, MAIN = 4300, 4300
STEPS, LAYERS = 12, 4
KERNELS = ("gemm", "relu", "softmax")
LONG = (50 * US, 50 * US + STEPS * 400 * US + 200 * US)  # a kernel over the whole run
PERIOD = 40 * US  # GPU metrics sampling


def _spec(one_stream: bool = False) -> Spec:
    """One process, one GPU: STEPS steps ('step N', push/pop) of LAYERS layers
    ('layer_K') that launch the KERNELS each, a copy and an NCCL kernel per step, and
    (unless `one_stream`) a kernel on a stream of its own that spans the whole run."""
    spec = Spec(processes=[(PID, "trainer")], threads=[(PID, MAIN, "trainer")],
                gpus=[(0, "NVIDIA A100-SXM4-40GB")])
    corr = 1
    compute = 7
    if not one_stream:
        spec.api.append(ApiCall(LONG[0] - 10 * US, LONG[0] - 5 * US, PID, MAIN,
                                "cudaLaunchKernel_v7000", corr))
        spec.kernels.append(Kernel(LONG[0], LONG[1], PID, 0, 9, "spin_forever", corr,
                                   grid=(1, 1, 1), block=(32, 1, 1)))
        corr += 1
    t = 100 * US
    for step in range(STEPS):
        spec.nvtx.append(Nvtx(t, t + 390 * US, PID, MAIN, "pushpop", f"step {step}"))
        spec.api.append(ApiCall(t + US, t + 3 * US, PID, MAIN, "cudaMemcpyAsync_v3020", corr))
        spec.memcpy.append(Memcpy(t + 4 * US, t + 14 * US, PID, 0, compute, corr,
                                  bytes=1 << 20, copy_kind=1, src_kind=1, dst_kind=2))
        corr += 1
        gpu = t + 15 * US
        for layer in range(LAYERS):
            lt = t + 20 * US + layer * 80 * US
            spec.nvtx.append(Nvtx(lt, lt + 70 * US, PID, MAIN, "pushpop", f"layer_{layer}"))
            for k, name in enumerate(KERNELS):
                call = lt + US + 20 * k * US
                spec.api.append(ApiCall(call, call + 2 * US, PID, MAIN,
                                        "cudaLaunchKernel_v7000", corr))
                dur = (5 + 3 * k + layer + (7 if step == 5 else 0)) * US
                gpu = max(gpu, call + 4 * US)
                spec.kernels.append(Kernel(gpu, gpu + dur, PID, 0, compute, name, corr,
                                           grid=(4096, 1, 1), block=(256, 1, 1)))
                gpu += dur + 2 * US
                corr += 1
        nccl = t + 345 * US
        spec.api.append(ApiCall(nccl, nccl + 2 * US, PID, MAIN, "cudaLaunchKernel_v7000", corr))
        spec.kernels.append(Kernel(max(gpu, nccl + 4 * US), max(gpu, nccl + 4 * US) + 20 * US,
                                   PID, 0, compute if one_stream else 13,
                                   "ncclDevKernel_AllReduce_Sum_f32_RING_LL", corr,
                                   grid=(2, 1, 1), block=(640, 1, 1)))
        corr += 1
        t += 400 * US
    return spec


def _metrics() -> MetricsSpec:
    m = MetricsSpec(names={0: METRIC_NAMES}, cuda_devices=[(0, 0, PID)])
    for i in range((LONG[1] + 100 * US) // PERIOD):
        m.samples.append(Sample(i * PERIOD, 0, {n: (i * 7 + 3 * j) % 97 + 1
                                                for j, n in enumerate(METRIC_NAMES)}))
    return m


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """(export, its trace) of `_spec` with GPU metrics."""
    d = tmp_path_factory.mktemp("flat")
    export = add_native_metrics(write_export(d / "run.sqlite", _spec()), _metrics())
    trace = d / "run.prv"
    nsys2prv.translate(export, trace)
    return export, trace


def _json(capsys, *argv) -> dict:
    assert main(["analyze", "--json", *map(str, argv)]) == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("trace", None)  # the input's path
    return out


def test_many_windows_give_the_numbers_of_one(run, capsys, monkeypatch):
    """The trace read in windows of 1 KiB (the long kernel, the gaps, the steps and the
    layers all cross many of them; the GPU activities come back from the store out of the
    windows where they ended) gives the same report as read in one."""
    _, trace = run
    one = _json(capsys, trace, "--iterations")
    seen = []
    windows = read.windows

    def counted(*a, **k):
        for w in windows(*a, **k):
            seen.append(w.start)
            yield w

    monkeypatch.setattr(read, "BLOCK", 1024)
    monkeypatch.setattr("nsys2prv.analysis.model.windows", counted)
    many = _json(capsys, trace, "--iterations")
    assert len(seen) > 100
    assert many == one
    # what the run is: the steps, the layers and the kernels it was written with
    assert [s["instance"] for s in one["iterations"]["steps"]] == list(range(STEPS))
    layers = {r["layer"]: r["instances"] for r in one["layers"]["layers"]}
    assert layers == {f"layer_{k}": STEPS for k in range(LAYERS)}
    kernels = {r["kernel"]: r["launches"] for r in one["kernel_metrics"]["kernels"]}
    assert kernels["spin_forever"] == 1
    assert all(kernels[k] == STEPS * LAYERS for k in KERNELS)
    # the kernel that spans the run keeps its GPU active from its start to its end
    (dev,) = one["devices"]
    assert dev["active"] >= LONG[1] - LONG[0]


def test_row_time_keys_switched_midway_give_the_same_numbers(run, capsys, monkeypatch):
    """The joins of the activities' starts with their launch lines and memory kinds key
    (row, time) as one integer; a trace whose times could overflow it switches to a
    struct key where such a time comes (`timeline.RowTimeKey`). Forced to switch in the
    middle of the run (1 KiB windows: lines and starts held across it), the report is the
    one of the packed keys (read in one window: the windows change nothing, as
    `test_many_windows_give_the_numbers_of_one` shows)."""
    from nsys2prv.analysis import timeline

    _, trace = run
    packed = _json(capsys, trace, "--iterations")
    monkeypatch.setattr(read, "BLOCK", 1024)
    made = []
    init = timeline.RowTimeKey.__init__

    def early(self, rows):
        init(self, rows)
        self.limit = STEPS * 400 * US // 2  # a time of the run's middle overflows
        made.append(self)

    monkeypatch.setattr(timeline.RowTimeKey, "__init__", early)
    switched = _json(capsys, trace, "--iterations")
    assert made and not any(k.packed for k in made)
    assert switched == packed
    assert [s["instance"] for s in packed["iterations"]["steps"]] == list(range(STEPS))


def test_tables_out_of_time_order(run, tmp_path, capsys):
    """An export whose activity tables are not in time order (rows shuffled) is analysed
    as the same export in order."""
    export, _ = run
    spec = _spec()
    rng = random.Random(7)
    for rows in (spec.api, spec.kernels, spec.memcpy, spec.nvtx):
        rng.shuffle(rows)
    shuffled = add_native_metrics(write_export(tmp_path / "shuffled.sqlite", spec), _metrics())
    assert _json(capsys, shuffled) == _json(capsys, export)


def test_one_stream(tmp_path, capsys):
    """A rank with all its work in one stream: the device is busy for the sum of the
    activities' times (one stream runs one at a time), and idle in the holes between them."""
    spec = _spec(one_stream=True)
    export = write_export(tmp_path / "one.sqlite", spec)
    out = _json(capsys, export)
    work = sorted([(k.start, k.end) for k in spec.kernels]
                  + [(m.start, m.end) for m in spec.memcpy])
    busy = sum(e - s for s, e in work)
    holes = [(b[0] - a[1]) for a, b in zip(work, work[1:]) if b[0] > a[1]]
    (dev,) = out["devices"]
    assert dev["active"] == busy
    assert out["idle"]["job"]["gaps"] == len(holes)
    assert out["idle"]["job"]["idle"] == sum(holes)


def test_a_million_ranges_left_open(tmp_path, capsys):
    """10^6 NVTX pushes that are never popped (an application that forgot its pops), all
    open at once, inside a step: each is a range to the end of the run, nested in the one
    before (their nesting found in time linear in them, not in the pairs of them), none
    launched GPU work; the steps and layers that did close are analysed as without them."""
    spec = _spec(one_stream=True)
    t0 = max(c.end for c in spec.api) + US  # inside the last step, after its last call
    spec.nvtx.append(Nvtx(t0, None, PID, MAIN, "pushpop", "leaked"))
    export = write_export(tmp_path / "open.sqlite", spec)
    with sqlite3.connect(export) as con:  # the other 10^6 - 1 pushes, as the first one
        con.execute("""
            INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, domainId, category,
                                     textId)
            WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 999999)
            SELECT e.start + k.i, NULL, e.eventType, e.globalTid, e.domainId, e.category,
                   e.textId
            FROM k, NVTX_EVENTS AS e WHERE e.start = ? AND e.end IS NULL""", (t0,))
        assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE end IS NULL"
                           ).fetchone()[0] == 10 ** 6
    out = _json(capsys, export)
    projection = out["layers"]["projection"]
    assert projection["ranges"] == STEPS * (LAYERS + 1) + 10 ** 6
    assert projection["projected"] == STEPS * (LAYERS + 1)
    names = {r["name"] for r in projection["names"]}
    assert "leaked" not in names and "layer_0" in names
    assert {r["layer"] for r in out["layers"]["layers"]} == {f"layer_{k}" for k in
                                                             range(LAYERS)}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_analysis_leaves_nothing(run, tmp_path, sig):
    """`nsys2prv analyze` interrupted (Ctrl-C, kill) while its store is on disk: exit 130,
    one line, and no temporary file left."""
    _, trace = run
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(f"""
        import time
        from nsys2prv.analysis import store
        _add = store.WindowStore.add_timed
        def add_timed(self, *a, **k):  # the pass waits, its store on disk: signal now
            open({str(hook / "started")!r}, "w").close()
            time.sleep(1)
            return _add(self, *a, **k)
        store.WindowStore.add_timed = add_timed
    """))
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": f"{hook}:{ROOT}"}
    proc = subprocess.Popen([sys.executable, "-m", "nsys2prv", "analyze", str(trace)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (hook / "started").exists():
        time.sleep(0.01)
    assert any(tmp.glob("nsys2prv-acts-*")), "the store is not on disk"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp.iterdir()) == []


@pytest.mark.parametrize("user_set", [False, True])
def test_the_analysis_maps_large_blocks_unless_the_user_chose(run, monkeypatch, user_set):
    """The analysis fixes glibc's mmap threshold (`_alloc.map_large_blocks`: freed arrays
    go back to the system instead of fragmenting the heap) and its trim threshold (the
    heap's top is not given back after every chunk), unless MALLOC_MMAP_THRESHOLD_ and
    MALLOC_TRIM_THRESHOLD_ are the user's; the translation touches neither."""
    from nsys2prv import _alloc
    from nsys2prv.analysis.model import analyze_path

    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(_alloc.ctypes, "CDLL", lambda name: Libc())
    for var in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        if user_set:
            monkeypatch.setenv(var, "65536")
        else:
            monkeypatch.delenv(var, raising=False)
    export, trace = run
    nsys2prv.translate(export, trace.with_name("again.prv"))
    assert not calls
    analysis = analyze_path(trace)
    assert analysis.devices  # the analysis ran
    assert calls.count((_alloc._M_MMAP_THRESHOLD, 4 << 20)) == (0 if user_set else 1)
    assert calls.count((_alloc._M_TRIM_THRESHOLD, 64 << 20)) == (0 if user_set else 1)
    assert len(calls) == (0 if user_set else 2)


SHOW_ALLOCATOR = """
import os, sys
sys.argv = ["nsys2prv", *sys.argv[1:]]
from nsys2prv.cli import main
try:
    main()
except SystemExit:
    pass
print(os.environ.get("_RJEM_MALLOC_CONF"))
"""


@pytest.mark.parametrize("command, user_value", [
    ("analyze", None), ("translate", None), ("analyze", "narenas:2")])
def test_analyze_chooses_jemalloc_decay_before_polars_loads(command, user_value):
    """`nsys2prv analyze` keeps jemalloc's freed pages for 1 s (`_alloc.for_analysis`),
    set before polars is imported (jemalloc reads it when it loads); other commands keep
    the main setting; a value the user set wins."""
    from nsys2prv import _alloc

    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    env["NSYS2PRV_NO_SUPERVISOR"] = "1"
    if user_value:
        env["_RJEM_MALLOC_CONF"] = user_value
    argv = [command, "--help"] if command == "analyze" else ["--help"]
    out = subprocess.run([sys.executable, "-c", SHOW_ALLOCATOR, *argv], env=env,
                         capture_output=True, text=True, timeout=120).stdout
    value = out.strip().splitlines()[-1]
    if user_value:  # polars puts its defaults before it: the last setting wins
        assert value.endswith(user_value) and _alloc.ANALYSIS_CONF not in value
    else:
        want = _alloc.ANALYSIS_CONF if command == "analyze" else _alloc.MAIN_CONF
        assert want in value
        assert (_alloc.MAIN_CONF in value) != (_alloc.ANALYSIS_CONF in value)
        assert not _alloc.users_choice(value)  # worker processes get their own setting


def test_no_window_is_held_past_the_pass(run, monkeypatch):
    """When the pass is over (the layers start), none of its windows is alive: the model
    kept its first window (its rows only were read) and the pass its last one, each a
    block of the trace's records (~40 MB at the 32 MiB default) held to the end."""
    import gc
    import weakref

    from nsys2prv.analysis import layers

    _, trace = run
    alive: list[weakref.ref] = []
    windows = read.windows

    def watched(*a, **k):
        for w in windows(*a, **k):
            alive.append(weakref.ref(w))
            yield w

    held_at_layers = []
    analyze_layers = layers.analyze_layers

    def checked(*a, **k):
        gc.collect()
        held_at_layers.append(sum(r() is not None for r in alive))
        return analyze_layers(*a, **k)

    monkeypatch.setattr(read, "BLOCK", 4096)
    monkeypatch.setattr("nsys2prv.analysis.model.windows", watched)
    monkeypatch.setattr(layers, "analyze_layers", checked)
    with nsys2prv.load(trace) as r:
        _, extras = r.analysis()
    assert len(alive) > 10
    assert held_at_layers == [0]
    assert extras.layers.pick.kind is not None  # the layers ran on what the pass kept


def test_the_pass_files_its_nvtx_ranges_in_the_store(run, monkeypatch):
    """With `spill`, the NVTX ranges of each window go to the store as the pass reads them
    (the pass holds none: 40 MB at the end of the 30M benchmark trace's pass), and read
    back they are the ranges a collector that holds them finds, once."""
    from nsys2prv.analysis.activities import ActivityCollector

    _, trace = run
    monkeypatch.setattr(read, "BLOCK", 4096)
    held, filed = ActivityCollector(trace), ActivityCollector(trace, spill=True)
    try:
        n = 0
        for w in read.windows(read.open_trace(trace), types=held.types, state_rows="cpu",
                              comms=True):
            held.add(w)
            filed.add(w)
            n += 1
        assert n > 10
        assert filed._stacked == [] and filed._flat == [] and filed._calls == []
        assert filed.store.rows("stacked") == STEPS * (1 + LAYERS)  # every push/pop range
        want, got = held.result(), filed.stored()
        assert got.ranges.equals(want.ranges)
        assert got.calls.equals(want.calls)
        assert got.ranges.height == STEPS * (1 + LAYERS)
        assert filed.result().ranges.height == 0  # taken once, as the held lists are
    finally:
        filed.close()
