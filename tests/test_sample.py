"""Exact checks on the synthetic sample, whose contents the test knows record by record."""

from __future__ import annotations

from collections import defaultdict

import pytest

import nsys2prv
from nsys2prv.paraver import registry as reg
from nsys2prv.testing.samples import MAIN, WORKER, sample_spec
from nsys2prv.testing.synth import LAYOUTS, write_export

from prvtools import read_prv, validate

US = 1000


@pytest.fixture(scope="module", params=LAYOUTS)
def translated(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"sample-{request.param}")
    spec = sample_spec()
    db = write_export(d / "sample.sqlite", spec, request.param)
    result = nsys2prv.translate(db, d / "sample.prv")
    validate(d / "sample.prv")
    return request.param, spec, result, read_prv(d / "sample.prv")


def _rows(tr):
    labels = tr.row.split("LEVEL THREAD SIZE ")[1].splitlines()[1:]
    return labels


def test_resource_model(translated):
    _, spec, result, tr = translated
    assert result.model.nodes == ["sample-node"] or translated[0] == "legacy"
    # one node with one CPU per row; one task: 2 CPU threads then 4 GPU streams
    assert tr.header.endswith(":1(6):1:1(6:1)")
    labels = _rows(tr)
    assert labels[0].endswith(f"(tid {MAIN})") and "main" in labels[0]
    assert labels[1].endswith(f"(tid {WORKER})")
    assert [lbl.split(" (")[0] for lbl in labels[2:]] == [
        "GPU 0 ctx 1 stream 7", "GPU 0 ctx 1 stream 13", "GPU 1 ctx 1 stream 7",
        "GPU 1 ctx 1 stream 13"]
    assert all("NVIDIA A100-SXM4-40GB" in lbl for lbl in labels[2:])


def test_times_rebased_and_header_end(translated):
    _, spec, result, tr = translated
    first = min(min(a.start for a in spec.api), min(n.start for n in spec.nvtx))
    last = max(max(k.end for k in spec.kernels), max(m.end for m in spec.memset + spec.memcpy),
               max(a.end for a in spec.api), max(n.end or 0 for n in spec.nvtx))
    assert tr.end == last - first
    assert min(s[2] for s in tr.states) == 0
    assert max(s[3] for s in tr.states) == tr.end
    assert all(t <= tr.end for _, _, t, _ in tr.events)


def test_counts(translated):
    _, spec, _, tr = translated
    nccl = [k for k in spec.kernels if k.name.startswith("nccl")]
    assert tr.nonzero(reg.CUDA_KERNEL) == len(spec.kernels) - len(nccl)
    assert tr.nonzero(reg.NCCL_KERNEL) == len(nccl)
    assert tr.nonzero(reg.KERNEL_FULL_NAME) == len(spec.kernels)
    assert tr.nonzero(reg.CUDA_CALL) == len(spec.api)
    ops = tr.values(reg.MEMORY_OPERATION)
    assert sum(1 for v in ops if v == reg.MEMSET_OPERATION_VALUE) == len(spec.memset)
    assert sum(1 for v in ops if v not in (0, reg.MEMSET_OPERATION_VALUE)) == len(spec.memcpy)
    assert tr.nonzero(reg.OSRT_CALL) == len(spec.osrt)
    assert tr.nonzero(reg.NVTX_MARK) == sum(n.kind == "mark" for n in spec.nvtx)
    assert tr.nonzero(reg.CUDA_SYNC_TYPE) == len(spec.sync)
    pushpop = sum(tr.nonzero(t) for t in range(reg.NVTX_PUSHPOP_BASE, reg.NVTX_PUSHPOP_BASE + 3))
    assert pushpop == sum(n.kind == "pushpop" for n in spec.nvtx)
    startend = sum(tr.nonzero(t) for t in range(reg.NVTX_STARTEND_BASE,
                                                reg.NVTX_STARTEND_BASE + 3))
    assert startend == sum(n.kind == "startend" for n in spec.nvtx)


def test_kernel_durations_and_geometry(translated):
    _, spec, _, tr = translated
    labels = tr.pcf_labels(reg.CUDA_KERNEL)
    by_name = defaultdict(int)
    for k in spec.kernels:
        by_name[k.name] += k.end - k.start
    got = {}
    for (t, v), d in tr.durations(reg.CUDA_KERNEL, reg.NCCL_KERNEL).items():
        got[labels[v]] = got.get(labels[v], 0) + d
    assert got == dict(by_name)
    gemm = next(k for k in spec.kernels if k.name == "gemm_kernel")
    starts = [p for *_, pairs in tr.events for p in [dict(pairs)]
              if p.get(reg.CUDA_KERNEL, 0) != 0]
    assert all(p[reg.CUDA_KERNEL_BLOCKS] == gemm.grid[0] * gemm.grid[1] * gemm.grid[2]
               for p in starts)
    assert all(p[reg.CUDA_KERNEL_THREADS] == 256 and p[reg.KERNEL_GRID_Y] == 2 and
               p[reg.KERNEL_REGISTERS] == 64 and p[reg.KERNEL_STATIC_SHMEM] == 4096 and
               p[reg.CUDA_KERNEL_DYN_SHMEM] == 8192 and p[reg.KERNEL_LOCAL_MEM_TOTAL] == 65536
               for p in starts)
    full = tr.pcf_labels(reg.KERNEL_FULL_NAME)
    assert gemm.full_name in full.values()


def test_states_per_row(translated):
    _, spec, result, tr = translated
    st = tr.state_time()
    # GPU rows: task 1 threads 3..6 = (dev0,s7), (dev0,s13), (dev1,s7), (dev1,s13)
    rows = {(0, 7): 3, (0, 13): 4, (1, 7): 5, (1, 13): 6}
    for (dev, stream), thread in rows.items():
        run = sum(k.end - k.start for k in spec.kernels if (k.device, k.stream) == (dev, stream))
        mem = sum(m.end - m.start for m in spec.memcpy + spec.memset
                  if (m.device, m.stream) == (dev, stream))
        assert st[(1, thread)].get(reg.STATE_RUNNING, 0) == run
        assert st[(1, thread)].get(reg.STATE_MEMORY_TRANSFER, 0) == mem
        assert sum(st[(1, thread)].values()) == tr.end  # tiled from 0 to the end
        assert set(st[(1, thread)]) <= {reg.STATE_IDLE, reg.STATE_RUNNING,
                                        reg.STATE_MEMORY_TRANSFER}
    main = st[(1, 1)]
    by_class = defaultdict(int)
    for a in spec.api:
        if "Launch" in a.name:
            by_class[reg.STATE_CONFIG_ACCEL] += a.end - a.start
        elif "Synchronize" in a.name:
            by_class[reg.STATE_SYNC] += a.end - a.start
        elif "Memcpy" in a.name or "Memset" in a.name:
            by_class[reg.STATE_MEMORY_TRANSFER] += a.end - a.start
        elif "Malloc" in a.name:
            by_class[reg.STATE_ALLOC] += a.end - a.start
        elif "Free" in a.name:
            by_class[reg.STATE_FREE] += a.end - a.start
    for state, total in by_class.items():
        assert main.get(state, 0) == total, state
    assert sum(main.values()) == tr.end
    worker = st[(1, 2)]
    first_worker = min(n.start for n in spec.nvtx if n.tid == WORKER)
    first = min(a.start for a in spec.api)
    assert worker[reg.STATE_NOT_CREATED] >= first_worker - first
    # OS runtime waits: pthread_cond_wait is Synchronization, write is I/O (Extrae's states)
    assert worker[reg.STATE_SYNC] == sum(o.end - o.start for o in spec.osrt
                                         if o.name == "pthread_cond_wait")
    assert worker[reg.STATE_IO] == sum(o.end - o.start for o in spec.osrt if o.name == "write")


def test_pthread_calls_use_extrae_values(translated):
    _, spec, _, tr = translated
    values = [v for v in tr.values(reg.PTHREAD_CALL) if v]
    assert values == [12] * sum(o.name == "pthread_cond_wait" for o in spec.osrt)
    assert tr.pcf_labels(reg.PTHREAD_CALL)[12] == "pthread_cond_*wait"


def test_launch_arrows(translated):
    _, spec, _, tr = translated
    launches = (reg.TAG_KERNEL_LAUNCH, reg.TAG_NCCL_LAUNCH, reg.TAG_MEMORY_OPERATION)
    arrows = [c for c in tr.comms if c[14] in launches]  # not the dependency lines
    assert len(arrows) == len(spec.kernels) + len(spec.memcpy) + len(spec.memset)
    sizes = sorted(c[13] for c in arrows if c[14] == reg.TAG_MEMORY_OPERATION)
    assert sizes == sorted(m.bytes for m in spec.memcpy + spec.memset)
    assert sum(1 for c in arrows if c[14] == reg.TAG_NCCL_LAUNCH) == sum(
        k.name.startswith("nccl") for k in spec.kernels)
    for c in arrows:
        assert (c[3], c[4]) == (1, 1)  # sent from the main thread
        assert c[10] >= 3  # received on a GPU stream row
        assert c[5] <= c[11]  # launched before it starts


def test_cuda_call_values_follow_extrae(translated):
    _, _, _, tr = translated
    labels = tr.pcf_labels(reg.CUDA_CALL)
    inverse = {v: k for k, v in labels.items()}
    assert inverse["cudaMemcpyAsync"] == 7
    assert inverse["cudaStreamSynchronize"] == 5
    assert inverse["cudaMalloc"] == 11
    assert inverse["cudaFree"] == 13
    assert inverse["cudaMemsetAsync"] == 35
    assert inverse["cudaLaunchKernel"] >= 1000  # not an Extrae name: private range


def test_sync_points_at_the_stream(translated):
    _, spec, _, tr = translated
    dest = [v for v in tr.values(reg.CUDA_STREAM_DEST)]
    assert dest and set(dest) == {5}  # GPU 1 stream 7 is thread 5 of the task
    assert tr.pcf_labels(reg.CUDA_SYNC_TYPE)[4] == "Stream synchronize"


def test_nvtx_domains_categories_lanes(translated):
    _, spec, _, tr = translated
    model = tr.pcf_labels(reg.NVTX_PUSHPOP_BASE + 1)
    assert "forward" in model.values()
    assert f"{reg.NVTX_PUSHPOP_BASE + 1:<10} NVTX push/pop: model" in tr.pcf
    cats = tr.pcf_labels(reg.NVTX_CATEGORY)
    assert "model: compute" in cats.values()
    assert tr.nonzero(reg.NVTX_CATEGORY) == sum(n.category != 0 for n in spec.nvtx)
    # the two start/end ranges overlap in every iteration: one of them goes to lane 1
    lane0 = tr.nonzero(reg.NVTX_STARTEND_BASE)
    lane1 = tr.nonzero(reg.NVTX_STARTEND_BASE + 1)
    assert (lane0, lane1) == (4, 4)
    for (t, v), d in tr.durations(reg.NVTX_STARTEND_BASE, reg.NVTX_STARTEND_BASE + 1).items():
        name = tr.pcf_labels(t)[v]
        want = sum(n.end - n.start for n in spec.nvtx if n.text == name)
        assert d == want
    # worker thread named through NVTX
    assert "io worker (tid" in tr.row


def test_environment_not_leaked(translated):
    _, _, result, tr = translated
    for text in (tr.pcf, tr.row, result.output.read_text()):
        assert "do-not-leak-me" not in text and "SECRET_TOKEN" not in text


def test_same_records_for_every_layout(tmp_path):
    bodies = []
    for layout in LAYOUTS:
        db = write_export(tmp_path / f"s-{layout}.sqlite", sample_spec(), layout)
        nsys2prv.translate(db, tmp_path / f"s-{layout}.prv")
        lines = (tmp_path / f"s-{layout}.prv").read_text().splitlines()
        bodies.append([x for x in lines[1:] if not x.startswith("#")])
    assert bodies[0] == bodies[1] == bodies[2]


def test_deterministic_and_chunk_independent(tmp_path):
    db = write_export(tmp_path / "s.sqlite", sample_spec(), "3.17.1")
    nsys2prv.translate(db, tmp_path / "a.prv")
    nsys2prv.translate(db, tmp_path / "b.prv")
    nsys2prv.translate(db, tmp_path / "c.prv", chunk_rows=7, spill_rows=50)
    a = (tmp_path / "a.prv").read_bytes()
    assert a == (tmp_path / "b.prv").read_bytes() == (tmp_path / "c.prv").read_bytes()
    for ext in (".pcf", ".row"):
        assert (tmp_path / f"a{ext}").read_bytes() == (tmp_path / f"c{ext}").read_bytes()


def test_compressed_output(tmp_path):
    db = write_export(tmp_path / "s.sqlite", sample_spec(), "3.17.1")
    nsys2prv.translate(db, tmp_path / "plain.prv")
    nsys2prv.translate(db, tmp_path / "z.prv", compress=True)
    import gzip
    assert gzip.decompress((tmp_path / "z.prv.gz").read_bytes()) == \
        (tmp_path / "plain.prv").read_bytes()
    validate(tmp_path / "z.prv.gz")


def test_shipped_sample_is_the_generated_one(tmp_path):
    """examples/sample.sqlite (the README's sample) is what the generator writes today."""
    from pathlib import Path
    shipped = Path(__file__).resolve().parent.parent / "examples" / "sample.sqlite"
    fresh = write_export(tmp_path / "fresh.sqlite", sample_spec(), "3.17.1")
    nsys2prv.translate(shipped, tmp_path / "shipped.prv")
    nsys2prv.translate(fresh, tmp_path / "fresh.prv")
    strip = lambda p: [x for x in p.read_text().splitlines() if not x.startswith("#")]  # noqa
    assert strip(tmp_path / "shipped.prv") == strip(tmp_path / "fresh.prv"), \
        "regenerate: python -m nsys2prv.testing.samples examples/sample.sqlite"
