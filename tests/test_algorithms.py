"""Building blocks checked against brute force: lanes, the engine (runs, merge, formatting,
tiling) and tiling with lanes end to end."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

import nsys2prv
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.kinds.nvtx import assign_lanes
from nsys2prv import engine
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


NUL = engine.NUL
BIG = 1 << 62

record = st.tuples(
    st.integers(0, 30),                       # time
    st.integers(0, 3),                        # row
    st.sampled_from([1, 2, 2, 2, 3]),         # kind
    st.integers(0, 3),                        # phase
    st.sampled_from([0, -5, -40, 7, -BIG]),   # sub
    st.integers(0, 111),                      # src
    st.integers(-1, 3),                       # ord
    st.lists(st.one_of(st.none(), st.integers(-BIG, BIG), st.integers(-3, 50)),
             min_size=6, max_size=6),         # a..f
    st.one_of(st.none(), st.sampled_from(["", ":7:1", ":63000005:123456789:9:0"])))


def _frame(recs):
    cols = list(zip(*recs)) if recs else [[]] * 9
    vals = list(zip(*cols[7])) if recs else [[]] * 6
    return pl.DataFrame({
        "time": cols[0], "row": cols[1], "kind": cols[2], "phase": cols[3], "sub": cols[4],
        "src": cols[5], "ord": cols[6], **{k: list(v) for k, v in zip("abcdef", vals)},
        "text": cols[8]}, schema={
        "time": pl.Int64, "row": pl.Int32, "kind": pl.Int8, "phase": pl.Int8, "sub": pl.Int64,
        "src": pl.Int8, "ord": pl.Int64, **{k: pl.Int64 for k in "abcdef"}, "text": pl.Utf8})


def _identity_map(shift=0, n_rows=4):
    """Row r -> order 10r, cpu r+1, task 1, thread r+1; the 'no row' slot is all zeros."""
    rows = np.arange(n_rows + 1, dtype=np.int64)
    one = (rows < n_rows).astype(np.int64)
    empty = np.zeros(0, np.int64)
    return (shift, rows * 10 * one, (rows + 1) * one, one, (rows + 1) * one,
            empty, empty, empty, empty, empty, empty, empty, empty)


def _reference(recs, shift=0):
    """The .prv text of `recs` as the merge defines it, written the slow and obvious way."""
    def key(i):
        t, row, kind, phase, sub, src, ord_ = recs[i][:7]
        return (t + shift, row * 10, kind, phase, sub, src, 0, ord_, i)
    lines, prev = [], None
    for i in sorted(range(len(recs)), key=key):
        t, row, kind, phase, sub, src, ord_, f, text = recs[i]
        a, b, c, d, e, ff = f
        if a is None or b is None:
            continue
        t += shift
        if kind != 2:
            a += shift
        if kind == 3:
            c = None if c is None else c + shift
            d = None if d is None else d + shift
        tail = f":{a}"
        if kind == 3:
            r = b if 0 <= b < 4 else None
            tail += f":{r + 1}:1:1:{r + 1}" if r is not None else ":0:1:0:0"
        else:
            tail += f":{b}"
        if c is not None and d is not None:
            tail += f":{c}:{d}"
        if kind == 3 and e is not None and ff is not None:
            tail += f":{e}:{ff}"
        if kind == 2 and text:
            tail += text
        if kind == 2 and prev == (2, t, row):
            lines[-1] += tail
        else:
            lines.append(f"{kind}:{row + 1}:1:1:{row + 1}:{t}" + tail)
        prev = (kind, t, row)
    return "".join(line + "\n" for line in lines)


def _merge_text(runs, lo=-BIG, hi=BIG, shift=0):
    merger = engine.Merger([(r.path, 0, 0, -1) for r in runs], [_identity_map(shift)], [], lo, hi)
    out = b""
    while (block := merger.next(64)) is not None:
        out += block
    return out.decode()


@settings(max_examples=80, deadline=None)
@given(st.lists(record, max_size=120), st.integers(1, 40), st.sampled_from([1, 3, 8192]),
       st.integers(-20, 20))
def test_engine_runs_and_merge_match_a_plain_sort(tmp_path_factory, recs, chunk, block,
                                                  shift):
    """Tiny buffers (many runs), tiny blocks, nulls, huge values, negative sub and ord, text:
    the merged text equals sorting everything at once, and windows concatenate to it."""
    d = tmp_path_factory.mktemp("runs")
    store = engine.Records(d / "r", 4096, block)
    df = _frame(recs)
    for off in range(0, df.height, chunk):
        store.add(df.slice(off, chunk))
    runs = store.finish()
    assert sum(r.records for r in runs) == len(recs)
    assert len(runs) >= len(recs) * 96 // 4096 // 2
    text = _merge_text(runs, shift=shift)
    assert text == _reference(recs, shift)
    cut = 12 + shift
    assert _merge_text(runs, hi=cut, shift=shift) + _merge_text(runs, lo=cut, shift=shift) == text


def test_merge_reads_blocks_longer_than_its_buffer(tmp_path):
    """The merge reads a run's block a piece at a time (the engine's RUN_READ_BYTES, 32 kB):
    records cut by a piece's end, texts longer than a piece (100 kB) and blocks of many
    pieces give the text a plain sort gives, for runs read side by side."""
    rng = np.random.default_rng(7)
    recs = []
    for i in range(6000):
        n = int(rng.integers(0, 60)) if i % 500 else 100_000 + i
        text = "".join(f":{7 + k % 3}:{int(v)}" for k, v in
                       enumerate(rng.integers(0, 10**9, n // 12 + 1)))[:n] if n else None
        if text is not None and text[-1] == ":":
            text = text[:-1]
        recs.append((int(rng.integers(0, 3000)), int(rng.integers(0, 4)), 2, 0, 0, 0, i,
                     [60000019, i, None, None, None, None], text))
    store = engine.Records(tmp_path / "r", 1 << 20, 4096)
    for off in range(0, len(recs), 1000):
        store.add(_frame(recs[off:off + 1000]))
    runs = store.finish()
    assert len(runs) >= 2 and max(Path(r.path).stat().st_size for r in runs) > 20 * 32768
    assert _merge_text(runs) == _reference(recs)


def test_binary_pairs_read_across_pieces_as_the_text_they_stand_for(tmp_path):
    """Runs keep a record's numeric pairs and pair lists as numbers after its text; the
    merge writes them ':type:value' after the text. Texts of 100 kB, then pairs; lists of
    5,000 pairs (longer than a 32 kB piece); types out of order (negative deltas); values
    of every size and null: the merged text is that of records whose text was written out."""
    from nsys2prv.paraver import records as R
    rng = np.random.default_rng(11)
    n = 3000
    texts = [None if i % 7 else ":1:2" * (25_000 if i % 700 == 0 else 1) for i in range(n)]
    v1 = [None if i % 5 == 0 else int(rng.integers(-BIG, BIG)) for i in range(n)]
    v2 = [int(rng.integers(0, 300)) for i in range(n)]
    sizes = [5000 if i % 450 == 1 else int(rng.integers(0, 4)) for i in range(n)]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ltypes = rng.integers(1, 90_000_000, int(offsets[-1])).astype(np.int64)
    ltypes[[0, 1, 2]] = [2**63 - 1, -2**63 + 1, 5]  # deltas that wrap around 64 bits
    lvals = rng.integers(-10**12, 10**12, int(offsets[-1])).astype(np.int64)
    times = rng.integers(0, 2000, n)
    recs = []
    for i in range(n):
        tail = "".join(f":{t}:{v}" for t, v in ((63000009, v1[i]), (7, v2[i])) if v is not None)
        tail += "".join(f":{int(t)}:{int(v)}" for t, v in
                        zip(ltypes[offsets[i]:offsets[i + 1]], lvals[offsets[i]:offsets[i + 1]]))
        text = (texts[i] or "") + tail
        recs.append((int(times[i]), i % 4, 2, 0, 0, 0, i, [60000019, i, None, None, None, None],
                     text or None))
    frame = _frame([r[:8] + (texts[i],) for i, r in enumerate(recs)]).with_columns(
        pl.Series(f"{R.PAIR_PREFIX}0:63000009", v1, pl.Int64),
        pl.Series(f"{R.PAIR_PREFIX}1:7", v2, pl.Int64))
    store = engine.Records(tmp_path / "r", 1 << 20, 4096)
    for off in range(0, n, 1000):
        part = slice(off, off + 1000)
        lists = R.PairLists(offsets[part.start:part.stop + 1] - offsets[part.start],
                            ltypes[offsets[part.start]:offsets[min(part.stop, n)]],
                            lvals[offsets[part.start]:offsets[min(part.stop, n)]])
        store.add(frame.slice(off, 1000), lists)
    runs = store.finish()
    text_bytes = sum(len(r[8] or "") for r in recs)
    assert sum(Path(r.path).stat().st_size for r in runs) < text_bytes * 0.75
    assert _merge_text(runs) == _reference(recs)


def _tile_reference(items, first, gpu):
    """States (row, time, end, state) of intervals (row, start, end, state): per row in
    (start, add order); GPU rows send overlapping activities to first-fit lanes."""
    out, moved = [], []
    for row in sorted({i[0] for i in items}):
        ivs = sorted((i for i in items if i[0] == row), key=lambda i: (i[1], i[4]))
        lanes, cmax, kept = [], None, []
        for it in ivs:
            if row in gpu:
                if cmax is None or it[1] >= cmax:
                    lanes = []
                cmax = it[2] if cmax is None or it[1] >= cmax else max(cmax, it[2])
                lane = next((k for k, e in enumerate(lanes) if e <= it[1]), len(lanes))
                if lane == len(lanes):
                    lanes.append(0)
                lanes[lane] = it[2]
                if lane:
                    moved.append((it, lane))
                    continue
            kept.append(it)
        cm = None
        for r, s, e, state, _ in kept:
            prev = cm if cm is not None else first[row]
            eff = max(s, prev)
            if eff < e:
                out.append((row, eff, e, state))
            if prev < s:
                out.append((row, prev, s, 9 if row not in gpu else 8))
            cm = e if cm is None else max(cm, e)
    return sorted(out), moved


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100), st.integers(0, 40),
                          st.integers(1, 5)), max_size=80), st.sampled_from([4096, 1 << 20]))
def test_engine_tiling_matches_brute_force(tmp_path_factory, items, budget):
    d = tmp_path_factory.mktemp("tile")
    items = [(r, s, s + dur, st_, i) for i, (r, s, dur, st_) in enumerate(items)]
    gpu = {2, 3}
    first = np.array([min([i[1] for i in items if i[0] == r], default=0) for r in range(4)])
    iv = engine.Intervals(d / "i", budget)
    iv.add(pl.DataFrame({"row": [i[0] for i in items], "start": [i[1] for i in items],
                         "end": [i[2] for i in items], "state": [i[3] for i in items],
                         "src": [3] * len(items), "ord": [i[4] for i in items]},
                        schema={"row": pl.Int32, "start": pl.Int64, "end": pl.Int64,
                                "state": pl.Int8, "src": pl.Int8, "ord": pl.Int64}))
    recs = engine.Records(d / "r", 1 << 20)
    moved, row_max = iv.tile(recs, first, np.array([9, 9, 8, 8]), np.array([0, 0, 1, 1]))
    want, want_moved = _tile_reference(items, first, gpu)
    text = _merge_text(recs.finish())
    got = sorted((int(f[4]) - 1, int(f[5]), int(f[6]), int(f[7]))
                 for f in (line.split(":") for line in text.splitlines()))
    assert got == want
    assert [(int(m["ord"]), int(m["lane"])) for m in moved] == [(m[0][4], m[1])
                                                                 for m in want_moved]


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


@given(calls, calls, st.integers(1, 7))
@settings(max_examples=100, deadline=None)
def test_the_index_on_disk_finds_what_the_held_one_finds(tmp_path_factory, api, activities,
                                                          piece):
    """`IndexBuilder` past its threshold (the calls spilled in buckets of a few rows, the
    index read through memory maps) joins as `CorrelationIndex` does, duplicates, ids no
    key holds and all."""
    from nsys2prv.paraver.kinds import _spill, cuda_api
    from nsys2prv.paraver.kinds.cuda_api import CorrelationIndex, IndexBuilder, MappedIndex

    api = [(p, k if k is None or k != 29 else -(1 << 40)) for p, k in api]  # no key holds it
    frame = pl.DataFrame({"pid": [p for p, _ in api], "correlation": [k for _, k in api],
                          "api_row": list(range(len(api))),
                          "api_start": [10 * i for i in range(len(api))]},
                         schema={"pid": pl.Int32, "correlation": pl.Int64,
                                 "api_row": pl.Int32, "api_start": pl.Int64})
    held = CorrelationIndex([frame.clone()])  # it takes the columns of its parts
    d = tmp_path_factory.mktemp("index")
    builder = IndexBuilder(d, spill_calls=0)
    defaults = _spill.SortedSpill.__init__.__defaults__
    sizes = cuda_api.FENCE, cuda_api.WINDOW_BLOCKS
    _spill.SortedSpill.__init__.__defaults__ = (3, 4)
    cuda_api.FENCE, cuda_api.WINDOW_BLOCKS = 2, 2  # lookups read many stretches
    try:
        for a in range(0, max(frame.height, 1), piece):
            builder.add(frame[a:a + piece])
        index = builder.finish()
        assert isinstance(index, MappedIndex) or frame.height == 0
        assert (index.height, index.duplicates) == (held.height, held.duplicates)
        df = pl.DataFrame({"pid": [p for p, _ in activities],
                           "correlation": [k for _, k in activities]},
                          schema={"pid": pl.Int64, "correlation": pl.Int64})
        for how in ("left", "inner"):
            assert index.join(df, how=how).equals(held.join(df, how=how))
    finally:
        _spill.SortedSpill.__init__.__defaults__ = defaults
        cuda_api.FENCE, cuda_api.WINDOW_BLOCKS = sizes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-BIG, BIG)),
                          st.one_of(st.none(), st.integers(-5, 5))), min_size=1, max_size=30),
       st.sampled_from([None, ":1:2"]))
def test_numeric_pairs_write_what_string_pairs_write(tmp_path_factory, values, text):
    """The engine's ':type:value' text of numeric pairs equals polars' `records.pairs`."""
    from nsys2prv.paraver import records as R
    d = tmp_path_factory.mktemp("pairs")
    n = len(values)
    base = pl.DataFrame({"v1": [v[0] for v in values], "v2": [v[1] for v in values],
                         "t": list(range(n))}, schema={"v1": pl.Int64, "v2": pl.Int64,
                                                       "t": pl.Int64})
    c = pl.col
    texts = []
    for pairs in (R.numeric_pairs((63000002, c("v1")), (7, c("v2"))),
                  R.pairs((63000002, c("v1")), (7, c("v2")))):
        store = engine.Records(d / f"r{len(texts)}", 1 << 20)
        full = pairs if text is None or isinstance(pairs, R.NumericPairs) else \
            pl.concat_str([pl.lit(text), pairs])
        frame = base.select(R.events(c("t"), pl.lit(0), R.PHASE_START, R.SRC_KERNEL, c("t"),
                                     63000006, pl.lit(1, pl.Int64),
                                     full if isinstance(full, R.NumericPairs) or text is None
                                     else full))
        if text is not None and isinstance(pairs, R.NumericPairs):
            frame = frame.with_columns(pl.lit(text).alias("text"))
        store.add(R.conform(frame))
        texts.append(_merge_text(store.finish()))
    assert texts[0] == texts[1]
    assert texts[0].count("\n") == n


def test_event_frames_are_built_in_the_record_shape():
    """`records.events` builds a frame `conform` leaves as it is (no second query), equal to
    what `conform` makes of the same record given in another column order and types."""
    from nsys2prv.paraver import records as R
    c = pl.col
    df = pl.DataFrame({"s": [5, 7], "e": [9, 7], "row": [1, 2], "id": [10, 11]})
    built = df.select(R.events(c("s"), c("row"), R.start_phase(c("s"), c("e")), R.SRC_NVTX,
                               c("id"), 60000019, c("id") * 2, R.numeric_pairs((7, c("e"))),
                               sub=-c("e"), type2=8, value2=c("s")))
    assert R.conform(built) is built
    loose = df.select(pl.col("e").alias("pair:0:7"), (c("id") * 2).alias("b"),
                      pl.lit(8).alias("c"), c("s").alias("d"), pl.lit(60000019).alias("a"),
                      c("id").alias("ord"), pl.lit(R.SRC_NVTX).alias("src"),
                      (-c("e")).alias("sub"), pl.Series("phase", [R.PHASE_START,
                                                                  R.PHASE_ZERO_START]),
                      pl.lit(R.EVENT).alias("kind"), c("row"), c("s").alias("time"))
    assert R.conform(loose).equals(built)
    assert built.columns == [*R.RECORD_SCHEMA, "pair:0:7"]
    assert built.rows() == [(5, 1, R.EVENT, R.PHASE_START, -9, R.SRC_NVTX, 10, 60000019, 20,
                             8, 5, None, None, None, 9),
                            (7, 2, R.EVENT, R.PHASE_ZERO_START, -7, R.SRC_NVTX, 11, 60000019,
                             22, 8, 7, None, None, None, 7)]


def test_run_files_are_little_endian(tmp_path):
    """docs/intermediate.md: magic, then per block (records, payload bytes) as little-endian
    u32 whatever the host, so partials move between x86_64 and aarch64 machines."""
    recs = [(t, t % 4, 2, 0, 0, 0, t, [t, 1, None, None, None, None], None)
            for t in range(5000)]
    store = engine.Records(tmp_path / "r", 1 << 20, 4096)
    store.add(_frame(recs))
    (run,) = store.finish()
    data = Path(run.path).read_bytes()
    assert data[:8] == b"N2PRUN3\n"
    count1, bytes1 = struct.unpack("<II", data[8:16])
    second = 16 + bytes1
    count2, bytes2 = struct.unpack("<II", data[second:second + 8])
    assert (count1, count2) == (4096, 904) and len(data) == second + 8 + bytes2
    assert run.index == [(0, 8), (4096, second)]


def _run_bytes(runs):
    return [(Path(r.path).read_bytes(), r.index, r.records) for r in runs]


@settings(max_examples=25, deadline=None)
@given(st.lists(record, min_size=1, max_size=200), st.integers(1, 40), st.integers(1, 3))
def test_a_fed_store_writes_the_runs_a_direct_one_writes(tmp_path_factory, recs, chunk, depth):
    """Frames handed to the stores from the feeder's thread (several outstanding) make the
    same run files, byte for byte, as frames added directly, and the same tiled states."""
    d = tmp_path_factory.mktemp("fed")
    df = _frame(recs)
    feeder = engine.StoreFeeder(depth)
    direct = engine.Records(d / "direct", 4096, 8)
    fed = engine.Records(d / "fed", 4096, 8, feeder=feeder)
    iv_direct = engine.Intervals(d / "ivd", 4096)
    iv_fed = engine.Intervals(d / "ivf", 4096, feeder=feeder)
    iv = pl.DataFrame({"row": df["row"], "start": df["time"], "end": df["time"] + 5,
                       "state": pl.Series([1] * df.height, dtype=pl.Int8),
                       "src": pl.Series([0] * df.height, dtype=pl.Int8), "ord": df["ord"]})
    for off in range(0, df.height, chunk):
        for store in (direct, fed):
            store.add(df.slice(off, chunk))
        for store in (iv_direct, iv_fed):
            store.add(iv.slice(off, chunk))
    per_row = (np.zeros(4, np.int64), np.full(4, reg.STATE_IDLE, np.int8), np.zeros(4, np.uint8))
    tiled = [store.tile(recs_, *per_row) for store, recs_ in ((iv_direct, direct), (iv_fed, fed))]
    assert [t.tobytes() for t in tiled[0]] == [t.tobytes() for t in tiled[1]]
    assert fed.total == direct.total >= len(recs)
    runs_direct, runs_fed = direct.finish(), fed.finish()
    feeder.close()
    assert len(runs_fed) == len(runs_direct) >= 1
    assert _run_bytes(runs_fed) == _run_bytes(runs_direct)


def test_a_fed_stores_error_reaches_the_caller(tmp_path):
    """A run the feeder's thread cannot write (its directory is gone) is an error of the next
    call that needs the store, naming the file; the thread then has nothing left to do."""
    feeder = engine.StoreFeeder()
    store = engine.Records(tmp_path / "gone" / "r", 4096, 8, feeder=feeder)
    recs = [(t, t % 4, 2, 0, 0, 0, t, [t, 1, None, None, None, None], None) for t in range(500)]
    store.add(_frame(recs))  # returns at once: the spill fails in the thread
    try:
        store.finish()
    except FileNotFoundError as e:
        assert "gone" in str(e)
    else:
        raise AssertionError("the failed spill was not reported")
    feeder.close()  # nothing pending: no second error


def test_a_failed_preparation_leaves_no_feeding_thread(tmp_path, monkeypatch):
    """A kind that fails while the feeder still holds frames: prepare raises the kind's
    error only after the thread has written its last byte (nothing goes on writing into a
    partial the caller is about to remove), and the thread is gone."""
    import dataclasses
    import threading
    from nsys2prv.paraver.kinds import kernels
    from nsys2prv.pipeline.prepare import prepare
    from nsys2prv.report.report import Report

    spec = Spec(processes=[(10, "app")], threads=[(10, 10, "main")], gpus=[(0, "GPU")])
    for i in range(2000):
        spec.api.append(ApiCall(100 * i, 100 * i + 20, 10, 10, "cudaLaunchKernel_v7000", i))
        spec.kernels.append(Kernel(100 * i + 30, 100 * i + 80, 10, 0, 7, f"k{i % 5}", i))
    db = write_export(tmp_path / "x.sqlite", spec)
    real = next(t for t in kernels.TRANSLATORS if t.name == "kernels")

    def failing(report, ctx):
        real.translate(report, ctx)
        raise RuntimeError("kind failed")

    monkeypatch.setattr(kernels, "TRANSLATORS", [dataclasses.replace(t, translate=failing)
                                                 if t is real else t
                                                 for t in kernels.TRANSLATORS])
    report = Report(db)
    try:
        prepare(report, tmp_path / "partial")
    except RuntimeError as e:
        assert str(e) == "kind failed"
    else:
        raise AssertionError("prepare did not fail")
    finally:
        report.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("nsys2prv-store")]
