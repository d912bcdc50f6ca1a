"""The critical path's graph built on disk (`analysis/graph_build.py`) is
`critical_path.build_graph`'s, array for array (nodes, their order, each row's previous
node, the edges in their order, the counts of lines, the connected rows, the kernels'
labels), on synthetic runs and corpus traces read in windows of a few KiB (so that calls,
kernels and lines cross the windows' edges) and cut into slabs of a few hundred nodes;
and the critical path of both is the same."""

from __future__ import annotations

import numpy as np
import pytest

import nsys2prv
from nsys2prv.analysis import critical_path as C
from nsys2prv.analysis import graph_slabs as S


def _same_graph(trace, block: int, slab_nodes: int) -> tuple[C.Graph, S.Slabs]:
    g = C.read_graph(trace, block=block)
    st = C.read_graph(trace, block=block, spill=True, held_nodes=0, slab_nodes=slab_nodes)
    assert isinstance(st, S.Slabs) and st.n == g.n
    parts = [st.part(s) for s in range(st.count)]
    for c in (*S.NODE_COLUMNS, *S.EDGE_COLUMNS):
        got = np.concatenate([getattr(p, c) for p in parts])
        assert np.array_equal(got, getattr(g, c)), c
        assert got.dtype == getattr(g, c).dtype, c
    edges = np.cumsum([0] + [p.pred_ptr[-1] for p in parts])
    ptr = np.concatenate([[0]] + [p.pred_ptr[1:] + e for p, e in zip(parts, edges)])
    assert np.array_equal(ptr, g.pred_ptr)
    assert list(st.counts.items()) == list(g.counts.items())
    C.connected(g)
    assert np.array_equal(st.connected_rows, g.connected_rows)
    assert st.kernel_labels == g.kernel_labels()
    assert st.max_end == int(g.end.max())
    wi = [C.parse_what_if(t) for t in ("kernel:*=0.5", "gaps=0", "nccl=0,rank:0=0.5")]
    assert C.critical_path(st, wi).to_dict() == C.critical_path(g, wi).to_dict()
    return g, st


def test_a_job_of_collectives_built_on_disk(tmp_path):
    """testing/synth_deps.nccl_job: 4 ranks of NCCL collectives (a late one), windows of
    2 KiB, slabs of 8 nodes."""
    from nsys2prv.testing.synth_deps import nccl_job

    nccl_job(tmp_path / "job", nranks=4, steps=3, late=2, delay=2_000_000)
    trace = tmp_path / "job.prv"
    nsys2prv.translate(tmp_path / "job", trace)
    g, st = _same_graph(trace, 2048, 8)
    assert g.counts["NCCL collective"] == 9 and st.count > 3


def test_streams_and_syncs_built_on_disk(tmp_path):
    """testing/synth_deps.streams_export (events between streams, host synchronisations
    whose lines end in calls): windows of 1 KiB, slabs of 4 nodes."""
    from nsys2prv.testing.synth_deps import streams_export

    trace = tmp_path / "streams.prv"
    nsys2prv.translate(streams_export(tmp_path / "streams.sqlite"), trace)
    g, st = _same_graph(trace, 1024, 4)
    assert g.counts["GPU -> host sync"] > 0 and g.counts["stream wait"] > 0
    assert st.count > 3


@pytest.mark.parametrize("export, block", [
    ("sqlite/nsysai_mfu2gpu_before.sqlite", 64 << 10),
    # a window ends where an NCCL kernel and its collective line end (read in the window
    # before: filed by time in the next one's bucket, as the line is)
    ("sqlite/nsysai_mfu2gpu_after.sqlite", 64 << 10),
    ("exported/cumat_mpi_4gpu.nsys2022.4.sqlite", 16 << 10)])
def test_corpus_graphs_built_on_disk(tmp_path, export, block):
    """Real traces (NCCL and syncs on two GPUs, before and after a change; MPI and CUDA on
    four GPUs): windows of a few KiB, slabs of 500 nodes (`tools/graph_equal.py` checks
    every corpus trace so)."""
    from conftest import CORPUS

    src = CORPUS / export
    if not src.exists():
        pytest.skip(f"corpus export {src} not found")
    trace = tmp_path / "t.prv"
    nsys2prv.translate(src, trace)
    g, st = _same_graph(trace, block, 500)
    assert st.count > 1 and g.pred_node.size > 0


def test_a_small_graph_filed_on_disk_is_the_graph_held(tmp_path):
    """The analysis files the pass on disk whatever the run's size; a graph of fewer
    intervals than `held_nodes` is read back and built in memory: the same graph, NVTX
    events included (the runs of the path are reported in their ranges), as one collected
    in memory."""
    from conftest import CORPUS

    src = CORPUS / "sqlite" / "nsysai_mfu2gpu_before.sqlite"
    if not src.exists():
        pytest.skip(f"corpus export {src} not found")
    trace = tmp_path / "t.prv"
    nsys2prv.translate(src, trace)
    held = C.read_graph(trace, block=64 << 10)
    filed = C.read_graph(trace, block=64 << 10, spill=True)
    assert isinstance(filed, C.Graph)
    for c in (*S.NODE_COLUMNS, *S.EDGE_COLUMNS, "pred_ptr"):
        assert np.array_equal(getattr(filed, c), getattr(held, c)), c
    assert held.nvtx.height > 1000
    for c in ("row", "time", "type", "value"):
        assert np.array_equal(getattr(filed.nvtx, c), getattr(held.nvtx, c)), c
    assert C.critical_path(filed).to_dict() == C.critical_path(held).to_dict()


def test_the_pass_files_are_removed(tmp_path):
    """What the pass files on disk is gone once the graph is built (held or on disk), and
    when the collector is closed without building it."""
    from nsys2prv.paraver.read import windows
    from nsys2prv.testing.synth_deps import streams_export

    trace = tmp_path / "streams.prv"
    nsys2prv.translate(streams_export(tmp_path / "streams.sqlite"), trace)
    for held in (0, 10**9):
        col = C.GraphCollector(trace, spill=True, held_nodes=held)
        where = col.files.store.dir
        for w in windows(col.info, col.types, state_rows="cpu", comms=True, block=1024):
            col.add(w)
        assert any(where.iterdir())
        got = col.graph()
        assert not where.exists()
        assert isinstance(got, S.Slabs if held == 0 else C.Graph)
    col = C.GraphCollector(trace, spill=True)
    where = col.files.store.dir
    col.close()
    assert not where.exists()


def test_nvtx_on_disk_answers_as_held(tmp_path):
    """`StoredNvtx` (the NVTX events filed window by window, read a window at a time) gives
    `NvtxStacks.innermost`'s range at every instant of random sequences on two rows and two
    domains: nested up to 6 deep, pops without their push, ranges left open at the end,
    the windows cut anywhere."""
    from nsys2prv.analysis.graph_build import NVTX, Columns

    rng = np.random.default_rng(11)
    rows, times, types, values = [], [], [], []
    for row in (3, 5):
        for typ in (9200, 9201):
            t, depth = 0, 0
            for _ in range(300):
                t += int(rng.integers(1, 4))
                push = depth < 6 and rng.random() < 0.55
                rows.append(row)
                times.append(2 * t + typ - 9200)
                types.append(typ)
                values.append(int(rng.integers(1, 6)) if push else 0)
                depth = depth + 1 if push else max(depth - 1, 0)
    order = np.argsort(np.array(times), kind="stable")
    ev = {"row": np.array(rows, np.int32)[order], "time": np.array(times, np.int64)[order],
          "type": np.array(types, np.int64)[order], "value": np.array(values, np.int64)[order]}
    names = {t: {v: f"{t}:{v}" for v in range(1, 6)} for t in (9200, 9201)}
    held = C.NvtxStacks(ev["row"], ev["time"], ev["type"], ev["value"], names)
    table = Columns(tmp_path, "nvtx", NVTX, [0])
    cuts = np.sort(rng.choice(np.arange(1, order.size), 9, replace=False))
    for b, (lo, hi) in enumerate(zip(np.append(0, cuts), np.append(cuts, order.size))):
        table.add({c: a[lo:hi] for c, a in ev.items()}, bucket=b)
    stored = C.StoredNvtx(table, cuts.size + 1, names)
    assert stored.height == order.size
    found = 0
    for row in (3, 5, 4):
        for t in range(-1, int(ev["time"].max()) + 3, 2):
            want = held.innermost(row, t)
            assert stored.innermost(row, t) == want, (row, t)
            found += want is not None
    assert found > 300
