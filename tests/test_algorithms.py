"""Building blocks checked against brute force: lanes, out-of-core sorting, tiling with lanes."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

import nsys2prv
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.kinds.nvtx import assign_lanes
from nsys2prv.paraver.sorting import ExternalSorter, merge_sorted
from nsys2prv.testing.synth import ApiCall, Kernel, Spec, write_export

from prvtools import read_prv, validate

intervals = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 200), st.integers(0, 60)),
                     min_size=0, max_size=80)


def _first_fit(row, start, end):
    out = []
    active: dict[int, list] = {}
    for r, s, e in zip(row, start, end):
        lanes = active.setdefault(r, [])
        for i, lane_end in enumerate(lanes):
            if lane_end <= s:
                lanes[i] = e
                out.append(i)
                break
        else:
            lanes.append(e)
            out.append(len(lanes) - 1)
    return out


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_assign_lanes_is_first_fit(items):
    items = sorted((r, s, s + d) for r, s, d in items)
    row = np.array([i[0] for i in items], dtype=np.int64)
    start = np.array([i[1] for i in items], dtype=np.int64)
    end = np.array([i[2] for i in items], dtype=np.int64)
    lanes = assign_lanes(row, start, end)
    assert lanes.tolist() == _first_fit(row, start, end)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 4)), max_size=300),
       st.integers(1, 60), st.integers(1, 20), st.integers(1, 2))
def test_external_sorter_matches_sort(tmp_path_factory, rows, max_rows, block_rows, cut_keys):
    d = tmp_path_factory.mktemp("runs")
    df = pl.DataFrame({"a": [r[0] for r in rows], "b": [r[1] for r in rows],
                       "i": list(range(len(rows)))}, schema={"a": pl.Int64, "b": pl.Int64,
                                                             "i": pl.Int64})
    sorter = ExternalSorter(["a", "b"], d, "t", max_rows=max_rows, block_rows=block_rows)
    for off in range(0, df.height, 7):
        sorter.add(df.slice(off, 7))
    got = list(sorter.sorted_blocks(cut_keys=cut_keys))
    out = pl.concat(got) if got else df.head(0)
    assert out.equals(df.sort(["a", "b"], maintain_order=True))


def test_merge_sorted_interleaves_many_sources():
    rng = np.random.default_rng(1)
    sources, frames = [], []
    for k in range(5):
        t = np.sort(rng.integers(0, 100, 200))
        f = pl.DataFrame({"time": t, "src": np.full(200, k)})
        frames.append(f)
        sources.append([f.slice(o, 13) for o in range(0, 200, 13)])
    merged = pl.concat(list(merge_sorted(sources, ["time", "src"])))
    assert merged.equals(pl.concat(frames).sort(["time", "src"], maintain_order=True))


def _overlap_spec():
    """One stream where kernels overlap in chains of three (like programmatic launch)."""
    spec = Spec(processes=[(10, "app")], threads=[(10, 10, "app")], gpus=[(0, "GPU X")])
    t, corr = 1000, 1
    for i in range(40):
        for j in range(3):  # a starts, b starts while a runs, c starts while b runs
            s = t + j * 50
            spec.api.append(ApiCall(s - 20, s - 10, 10, 10, "cudaLaunchKernel", corr))
            spec.kernels.append(Kernel(s, s + 120, 10, 0, 7, f"k{j}", corr))
            corr += 1
        t += 400
    return spec


def test_overlapping_kernels_use_lanes(tmp_path):
    spec = _overlap_spec()
    db = write_export(tmp_path / "o.sqlite", spec, "3.17.1")
    result = nsys2prv.translate(db, tmp_path / "o.prv", chunk_rows=17, spill_rows=23)
    validate(tmp_path / "o.prv")
    tr = read_prv(tmp_path / "o.prv")
    labels = [r.label for r in result.model.rows]
    # k0 at 0, k1 at 50 (overlaps k0 until 120) -> lane 1, k2 at 100 overlaps both -> lane 2
    assert labels[1:] == ["GPU 0 ctx 1 stream 7 (GPU X)", "GPU 0 ctx 1 stream 7 lane 1 (GPU X)",
                          "GPU 0 ctx 1 stream 7 lane 2 (GPU X)"]
    names = tr.pcf_labels(reg.CUDA_KERNEL)
    per_row = {}
    for task, thread, _, pairs in tr.events:
        for t, v in pairs:
            if t == reg.CUDA_KERNEL and v:
                per_row.setdefault(thread, set()).add(names[v])
    assert per_row == {2: {"k0"}, 3: {"k1"}, 4: {"k2"}}
    dur = {names[v]: d for (_, v), d in tr.durations(reg.CUDA_KERNEL).items()}
    assert dur == {"k0": 40 * 120, "k1": 40 * 120, "k2": 40 * 120}
    # every arrow lands on the row where its kernel runs, at the kernel start
    starts = {(thread, time) for _, thread, time, pairs in tr.events
              if any(t == reg.CUDA_KERNEL and v for t, v in pairs)}
    assert len(tr.comms) == 120
    assert all((c[10], c[11]) in starts for c in tr.comms)
    st_ = tr.state_time()
    for thread in (2, 3, 4):
        assert st_[(1, thread)][reg.STATE_RUNNING] == 40 * 120
    # same bytes without the tiny chunks
    nsys2prv.translate(db, tmp_path / "p.prv")
    assert (tmp_path / "o.prv").read_bytes() == (tmp_path / "p.prv").read_bytes()


calls = st.lists(st.tuples(st.sampled_from([7, 9, None]), st.one_of(st.none(),
                                                                   st.integers(-5, 30))),
                 min_size=0, max_size=60)


@given(calls, calls)
@settings(max_examples=150, deadline=None)
def test_correlation_index_matches_a_brute_force_lookup(api, activities):
    """First call per (pid, correlation) wins; rows without pid or id never match."""
    from nsys2prv.paraver.kinds.cuda_api import CorrelationIndex
    parts = [pl.DataFrame({"pid": [p for p, _ in api], "correlation": [k for _, k in api],
                           "api_row": list(range(len(api))),
                           "api_start": [10 * i for i in range(len(api))]},
                          schema={"pid": pl.Int64, "correlation": pl.Int64,
                                  "api_row": pl.Int32, "api_start": pl.Int64})]
    index = CorrelationIndex(parts)
    first: dict[tuple, int] = {}
    for i, (p, k) in enumerate(api):
        if p is not None and k is not None:
            first.setdefault((p, k), i)
    assert index.height == len(first)
    assert index.duplicates == sum(p is not None and k is not None for p, k in api) - len(first)
    df = pl.DataFrame({"pid": [p for p, _ in activities],
                       "correlation": [k for _, k in activities],
                       "me": list(range(len(activities)))},
                      schema={"pid": pl.Int64, "correlation": pl.Int64, "me": pl.Int64})
    want = [first.get((p, k)) for p, k in activities]
    left = index.join(df, how="left")
    assert left["me"].to_list() == list(range(len(activities)))
    assert left["api_row"].to_list() == want
    assert left["api_start"].to_list() == [None if w is None else 10 * w for w in want]
    inner = index.join(df, how="inner")
    assert inner["me"].to_list() == [i for i, w in enumerate(want) if w is not None]
    assert inner["api_row"].to_list() == [w for w in want if w is not None]
