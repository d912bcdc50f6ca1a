"""The critical path's graph on disk, slab by slab (`analysis/graph_slabs.py`): the path, its
what-ifs, its steps and its trace's events are those of the graph held in memory, on
synthetic runs and on corpus traces cut into slabs of a few nodes (every boundary crossed
by edges and by the path); the slabs' files go with the object."""

from __future__ import annotations

import gc

import numpy as np
import polars as pl
import pytest

import nsys2prv
from nsys2prv.analysis import critical_path as C
from nsys2prv.analysis import graph_slabs as S

WHAT_IF = ("kernel:*=0.5", "gaps=0", "nccl=0,rank:0=0.5", "host=2")


def _steps(g: C.Graph, count: int) -> pl.DataFrame:
    lo, hi = g.span
    k = np.arange(count)
    return pl.DataFrame({"instance": k, "start": lo + (hi - lo) * k // count,
                         "end": lo + (hi - lo) * (k + 1) // count})


def _crossings(slabs: S.Slabs) -> tuple[int, int]:
    """(slabs with predecessors in earlier slabs, slabs the measured path runs through)."""
    with_ext = sum(S._externals(slabs.part(s)).size > 0 for s in range(slabs.count))
    last = S.sweep(slabs)
    return with_ext, sum(1 for _ in S.walk(slabs, last))


def _same_everywhere(g: C.Graph, size: int, trace=None, tmp=None) -> S.Slabs:
    """The graph held and in slabs of `size` nodes give the same tables, segments, steps
    and path events, and (`trace` given) the same path trace, byte for byte (from slabs on
    disk: written a bucket of events at a time); the slabs (open) for more checks."""
    wi = [C.parse_what_if(t) for t in WHAT_IF]
    steps = _steps(g, 9)
    held = C.critical_path(g, wi)
    held_steps = C.step_paths(g, steps)
    held_events = C.path_events(g, held.segments)
    slabs = S.Slabs.of(g, size=size)
    assert slabs.dir is not None and slabs.count == -(-g.n // size)
    cp = C.critical_path(slabs, wi)
    assert cp.to_dict() == held.to_dict()
    assert cp.segments.equals(held.segments)
    assert C.step_paths(slabs, steps).equals(held_steps)
    assert C.path_events(slabs, cp.segments).equals(held_events)
    if trace is not None:
        C.write_path_trace(trace, tmp / "held.prv", g, held.segments)
        C.write_path_trace(trace, tmp / "slabs.prv", slabs, cp.segment_parts)
        for ext in (".prv", ".pcf", ".row"):
            assert (tmp / f"held{ext}").read_bytes() == (tmp / f"slabs{ext}").read_bytes()
        assert not any(slabs.dir.glob("path-events.*"))
    return slabs


def test_a_job_of_collectives_in_slabs(tmp_path):
    """testing/synth_deps.nccl_job (4 ranks, NCCL lines between them, a late rank): slabs
    of 5 nodes, every one with predecessors before it, the path through half of them."""
    from nsys2prv.testing.synth_deps import nccl_job

    nccl_job(tmp_path / "job", nranks=4, steps=3, late=2, delay=2_000_000)
    trace = tmp_path / "job.prv"
    nsys2prv.translate(tmp_path / "job", trace)
    g = C.read_graph(trace)
    n = g.n
    slabs = _same_everywhere(g, 5, trace, tmp_path)
    with_ext, crossed = _crossings(slabs)
    assert with_ext >= slabs.count - 1 and crossed >= slabs.count // 2, (with_ext, crossed, n)


def test_streams_and_syncs_in_slabs(tmp_path):
    """testing/synth_deps.streams_export (two streams, events, host synchronisations):
    slabs of 3 nodes."""
    from nsys2prv.testing.synth_deps import streams_export

    trace = tmp_path / "streams.prv"
    nsys2prv.translate(streams_export(tmp_path / "streams.sqlite"), trace)
    slabs = _same_everywhere(C.read_graph(trace), 3)
    with_ext, crossed = _crossings(slabs)
    assert with_ext > 0 and crossed > 1


@pytest.mark.parametrize("export", ["sqlite/nsysai_mfu2gpu_before.sqlite",
                                    "exported2023/aiprof_opt2.nsys2023.4.sqlite"])
def test_corpus_traces_in_slabs(tmp_path, export):
    """Real traces (two GPUs and NCCL; NVTX ranges the longest runs are reported in):
    slabs of 997 nodes."""
    from conftest import CORPUS

    src = CORPUS / export
    if not src.exists():
        pytest.skip(f"corpus export {src} not found")
    trace = tmp_path / "t.prv"
    nsys2prv.translate(src, trace)
    g = C.read_graph(trace)
    assert g.n > 10 * 997
    slabs = _same_everywhere(g, 997, trace, tmp_path)
    with_ext, crossed = _crossings(slabs)
    assert with_ext == slabs.count - 1 and crossed > 1


def test_slab_files_go_with_the_object(tmp_path):
    """The slabs' directory is removed by `close`, and when the object is collected."""
    from nsys2prv.testing.synth_deps import streams_export

    trace = tmp_path / "streams.prv"
    nsys2prv.translate(streams_export(tmp_path / "streams.sqlite"), trace)
    g = C.read_graph(trace)
    held = S.Slabs.of(g)  # small: held, no files
    assert held.dir is None and held.count == 1
    slabs = S.Slabs.of(g, size=4)
    where = slabs.dir
    assert any(where.glob("node.*.npy"))
    C.critical_path(slabs, [C.parse_what_if("gaps=0")])
    assert not any(where.glob("what-if-0.*"))  # a what-if's results are dropped after it
    del slabs
    gc.collect()
    assert not where.exists()
    slabs = S.Slabs.of(g, size=4)
    slabs.close()
    assert not slabs.dir.exists()
