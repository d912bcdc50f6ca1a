"""NVTX ranges projected onto the GPU rows of the translated trace (registry type range
`nvtx_gpu`, 67303000 + nsys' nesting level): on every GPU stream row that ran a range's work,
the range's name from the first such work's start to the last one's end.

Checked against what they must equal: the export itself (each range's work found here with
sqlite3, independently of the translation: the GPU activities whose launching CUDA call lies
inside the range on its thread, per stream), nsys 2023.4's own `nvtx_gpu_proj_trace` output
stored in tests/data/nvtx_proj (each range's projected start and duration, its level), and a
synthetic export whose events are written out by hand (nsys2prv/testing/synth_projection.py).
"""

from __future__ import annotations

import gzip
import io
import re
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import CORPUS, ROOT, need_exports
from prvtools import Trace as TextTrace
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.read import event_types, read_trace
from nsys2prv.paraver.values import clean_label

GPU_TYPES = frozenset(range(reg.NVTX_GPU_BASE, reg.NVTX_GPU_BASE + reg.NVTX_LEVEL_MAX))
PUSHPOP_TYPES = frozenset(range(reg.NVTX_PUSHPOP_BASE, reg.NVTX_PUSHPOP_BASE + 1000))
CPU_TYPES = PUSHPOP_TYPES | frozenset(range(reg.NVTX_STARTEND_BASE,
                                            reg.NVTX_STARTEND_BASE + 1000))
CUT = "nvtx projected ranges cut where a later one of their level starts on a GPU row"
NSYS = ROOT / "tests" / "data" / "nvtx_proj"
STREAM = re.compile(r"GPU (\d+) ctx (\d+) stream (\d+)")


def _pcf_names(prv: Path) -> dict[int, str]:
    """Value -> label of the NVTX names (the table the projected types share)."""
    pcf = TextTrace("", 0, pcf=prv.with_suffix(".pcf").read_text())
    return pcf.pcf_labels(reg.NVTX_GPU_BASE)


def _events(prv: Path, types: frozenset[int]) -> pl.DataFrame:
    """Events of `types` with their row's label and the value's name (null: 0, an end)."""
    tr = read_trace(prv, types, state_rows="none")
    names = {v: n for v, n in _pcf_names(prv).items() if v != 0}
    rows = tr.rows.select("row", "label")
    return (tr.events.join(rows, on="row", how="left")
            .with_columns(pl.col("value").replace_strict(names, default=None,
                                                         return_dtype=pl.Utf8).alias("name"))
            .sort("seq"))


def _stream_of(label: str) -> tuple[int, int, int] | None:
    m = STREAM.search(label)
    return (int(m[1]), int(m[2]), int(m[3])) if m and "lane" not in label else None


# ---------------------------------------------------------------- the synthetic export --

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    import nsys2prv
    from nsys2prv.testing.synth import write_export
    from nsys2prv.testing.synth_projection import projection_spec

    d = tmp_path_factory.mktemp("proj")
    db = write_export(d / "proj.sqlite", projection_spec())
    result = nsys2prv.translate(db, d / "proj.prv")
    return db, result, d / "proj.prv"


def test_synthetic_events_on_the_gpu_rows(synthetic):
    """Every event of the projected types is where the hand-made expectation puts it: the
    work running long after its range closed, a range on two streams, three levels, the
    helper thread's range overlapping the main thread's on one stream (its end, inside the
    later one, moved to the later one's start), nothing for the twins, the range ended on
    another thread and the range without work."""
    from nsys2prv.testing.synth_projection import BASE, EVENTS, US

    _, _, prv = synthetic
    cpu = _events(prv, PUSHPOP_TYPES)
    # the trace's clock: the CPU start of `step` is the report's BASE
    shift = cpu.filter(pl.col("name") == "step")["time"].min() - BASE
    gpu = _events(prv, GPU_TYPES)
    got = [(_stream_of(r["label"])[2], r["type"] - reg.NVTX_GPU_BASE,
            (r["time"] - shift - BASE) / US, r["name"]) for r in gpu.iter_rows(named=True)]
    assert sorted(got, key=lambda e: (e[0], e[1], e[2], e[3] or "")) == \
        [(s, lv, float(t), n) for s, lv, t, n in EVENTS]
    # one value, one range: the GPU rows number the names like the CPU rows
    assert dict(zip(gpu["name"], gpu["value"])).items() <= dict(zip(cpu["name"],
                                                                    cpu["value"])).items()
    assert {lbl for lbl in TextTrace("", 0, pcf=prv.with_suffix(".pcf").read_text()).pcf
            .splitlines() if "NVTX projected" in lbl} == {
        f"0    {reg.NVTX_GPU_BASE + k}   NVTX projected, level {k}" for k in range(4)}


def test_synthetic_counts(synthetic):
    """What is not drawn is counted: the range without work, the twins, the start/end range
    ended on another thread; and the range cut where a later one starts."""
    _, result, _ = synthetic
    c = result.counts
    assert c["nvtx ranges projected onto the GPU"] == 6
    assert c["nvtx projected spans on GPU rows"] == 8
    assert c["nvtx ranges without GPU work"] == 1
    assert c["nvtx ranges nsys cannot nest (equal twins): not projected"] == 2
    assert c["nvtx ranges ended on another thread: not projected"] == 1
    assert c[CUT] == 1


def test_synthetic_spans_are_the_analysis_projection(synthetic):
    """`analysis/projection.py` (Work, project, row_spans, nesting) gives the same spans on
    the export's own numbers: the translation and the analysis agree."""
    from nsys2prv.analysis import projection as P
    from nsys2prv.testing.synth_projection import BASE, SPANS, US

    db, _, _ = synthetic
    ranges, work = _export_tables(db)
    ranges = ranges.filter(pl.col("end_tid").is_null())
    row = ranges["tid"].to_numpy()
    s, e = ranges["start"].to_numpy(), ranges["end"].to_numpy()
    w = P.Work.of(work["tid"].to_numpy(), work["call_start"].to_numpy(),
                  work["stream_id"].to_numpy(), work["start"].to_numpy(), work["end"].to_numpy(),
                  np.zeros(work.height, np.int8), [s, e])
    _, level = P.nesting(row, s, e)
    proj = P.project(w, row, s, e, busy=False)
    which, gpu, first, last = P.row_spans(w, proj, np.flatnonzero(proj.projected & (level >= 0)))
    names = ranges["name"].to_list()
    got = {(names[i], int(g), int(level[i])): ((int(a) - BASE) // US, (int(b) - BASE) // US)
           for i, g, a, b in zip(which, gpu, first, last)}
    assert got == SPANS


def test_not_in_an_analysis_only_stream(synthetic, tmp_path):
    """A stream prepared for an analysis only (attributes=False) carries no projected
    events: they are for the views."""
    import nsys2prv

    db, _, _ = synthetic
    stream = nsys2prv.api.translate_stream(db, tmp_path / "s", attributes=False)
    assert not event_types(stream) & GPU_TYPES
    assert event_types(nsys2prv.api.translate_stream(db, tmp_path / "a")) & GPU_TYPES


# ------------------------------------------------------------------- the corpus exports --

def _export_tables(db: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """From the export with sqlite3: the NVTX ranges (id = rowid, tid = globalTid, name,
    start, end, end_tid) and every GPU activity with its launching call (tid, call_start,
    call_end, stream = (device, context, stream) packed, start, end)."""
    con = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    rows = con.execute(
        "SELECT e.rowid, e.globalTid, coalesce(s.value, e.text), e.start, e.end, "
        "e.endGlobalTid FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType IN (59, 60, 70, 71)").fetchall()
    ranges = pl.DataFrame(rows, schema={"id": pl.Int64, "tid": pl.Int64, "name": pl.Utf8,
                                        "start": pl.Int64, "end": pl.Int64,
                                        "end_tid": pl.Int64}, orient="row")
    calls = pl.DataFrame(con.execute(
        "SELECT globalTid, start, end, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        .fetchall(), schema={"tid": pl.Int64, "call_start": pl.Int64, "call_end": pl.Int64,
                             "correlation": pl.Int64}, orient="row")
    acts = []
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET"):
        if t in tables:
            acts += con.execute(f"SELECT start, end, correlationId, globalPid, deviceId, "
                                f"contextId, streamId FROM {t}").fetchall()
    con.close()
    acts = pl.DataFrame(acts, schema={"start": pl.Int64, "end": pl.Int64,
                                      "correlation": pl.Int64, "gpid": pl.Int64,
                                      "device": pl.Int64, "context": pl.Int64,
                                      "stream_id": pl.Int64}, orient="row")
    # nsys' association: same correlation id, same process (globalTid's upper bits)
    calls = calls.with_columns((pl.col("tid") - pl.col("tid") % (1 << 24)).alias("gpid"))
    work = acts.join(calls, on=["correlation", "gpid"], how="inner").with_columns(
        (pl.col("device") * 1_000_000_000 + pl.col("context") * 1_000_000
         + pl.col("stream_id")).alias("stream"))
    return ranges, work


def _expected_spans(ranges: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """Per range and stream: the first start and last end of the work whose call lies
    inside the range on its thread (nsys: `R.start <= call.start`, `call.end <= R.end`)."""
    out = []
    by_tid = {k[0]: g.sort("call_start") for k, g in work.group_by("tid")}
    for tid, rs in ranges.group_by("tid"):
        g = by_tid.get(tid[0])
        if g is None:
            continue
        cs, ce = g["call_start"].to_numpy(), g["call_end"].to_numpy()
        st, s, e = g["stream"].to_numpy(), g["start"].to_numpy(), g["end"].to_numpy()
        lo = np.searchsorted(cs, rs["start"].to_numpy(), "left")
        hi = np.searchsorted(cs, rs["end"].to_numpy(), "right")
        for rid, a, b, rend in zip(rs["id"], lo, hi, rs["end"]):
            sel = np.arange(a, b)[ce[a:b] <= rend]
            if sel.size == 0:
                continue
            for stream in np.unique(st[sel]):
                k = sel[st[sel] == stream]
                out.append((rid, int(stream), int(s[k].min()), int(e[k].max())))
    return pl.DataFrame(out, schema={"id": pl.Int64, "stream": pl.Int64, "first": pl.Int64,
                                     "last": pl.Int64}, orient="row")


def _shown(spans: pl.DataFrame) -> tuple[list[tuple], int]:
    """The events the rule of the registry (`nvtx_gpu`) writes for `spans` (stream, level,
    first, last, name, id): per stream and level, by start (the longer first), a start at
    the first start and an end at the last end, or, when that end falls inside a later
    span, at the next span's start. Also how many were cut so."""
    out = []
    cut = 0
    for _, g in spans.sort("stream", "level", "first", pl.col("last") * -1, "id").group_by(
            "stream", "level", maintain_order=True):
        first, last = g["first"].to_list(), g["last"].to_list()
        for i, r in enumerate(g.iter_rows(named=True)):
            out.append((r["stream"], r["level"], r["first"], r["name"]))
            j = i + 1
            inside = False
            while j < len(first) and first[j] < last[i]:
                inside |= last[j] >= last[i]
                j += 1
            out.append((r["stream"], r["level"], first[i + 1] if inside else r["last"], None))
            cut += inside
    return out, cut


CASES = {"aiprof_opt2.nsys2023.4": "exported2023/aiprof_opt2.nsys2023.4.sqlite",
         "nsysai_mfu2gpu_before": "sqlite/nsysai_mfu2gpu_before.sqlite"}


@pytest.fixture(scope="module", params=sorted(CASES))
def corpus_case(request, tmp_path_factory):
    import nsys2prv

    db = CORPUS / CASES[request.param]
    need_exports(db)
    prv = tmp_path_factory.mktemp("projcorpus") / "t.prv"
    result = nsys2prv.translate(db, prv)
    return request.param, db, result, prv


def _nsys_trace(case: str) -> pl.DataFrame:
    """nsys' `nvtx_gpu_proj_trace` rows of named ranges: id (RangeId), level, start, end."""
    d = NSYS / case
    raw = gzip.decompress((d / "trace.csv.gz").read_bytes()) if (d / "trace.csv.gz").exists() \
        else (d / "trace.csv").read_bytes()
    t = pl.read_csv(io.BytesIO(raw), infer_schema_length=0)
    t = t.filter(pl.col("RangeId").is_not_null() & (pl.col("RangeId") != ""))
    num = lambda c: pl.col(c).cast(pl.Float64).cast(pl.Int64)  # noqa: E731 - "12.0" cells
    return t.select(num("RangeId").alias("id"), num("Lvl").alias("level"),
                    num("Projected Start").alias("start"),
                    (num("Projected Start") + num("Projected Duration")).alias("end"))


def test_corpus_projection_on_the_gpu_rows(corpus_case):
    """On real exports: (1) the work found in the export per range equals nsys' projected
    start and end for every range nsys projects, and no other range has work; (2) per GPU
    stream row and level, the trace's events are exactly that work's spans (shifted by the
    trace's clock), with nsys' levels, named like the CPU ranges; (3) so the union over a
    range's stream rows is nsys' projected start and duration."""
    case, db, result, prv = corpus_case
    ranges, work = _export_tables(db)
    assert ranges["end"].null_count() == 0  # else nsys ends them elsewhere than we do
    ranges = ranges.filter(pl.col("end_tid").is_null())
    spans = _expected_spans(ranges, work)
    nsys = _nsys_trace(case)
    union = spans.group_by("id").agg(pl.col("first").min().alias("start"),
                                     pl.col("last").max().alias("end"))
    assert union.height == nsys.height == result.counts["nvtx ranges projected onto the GPU"]
    cmp = nsys.join(union, on="id", how="left", suffix="_export")
    assert (cmp["start"] == cmp["start_export"]).all() and (cmp["end"] == cmp["end_export"]).all()
    assert nsys["level"].null_count() == 0  # no twins in these exports
    spans = (spans.join(nsys.select("id", "level"), on="id")
             .join(ranges.select("id", "name"), on="id")
             .with_columns(pl.col("name").map_elements(clean_label, return_dtype=pl.Utf8)))
    assert spans.height == result.counts["nvtx projected spans on GPU rows"]

    # the trace's clock: the first range starts at the export's earliest range start
    cpu = _events(prv, CPU_TYPES)
    shift = int(cpu.filter(pl.col("value") != 0)["time"].min()) - int(ranges["start"].min())
    gpu = _events(prv, GPU_TYPES)
    streams = {lbl: _stream_of(lbl) for lbl in gpu["label"].unique()}
    got = Counter((streams[r["label"]][0] * 1_000_000_000 + streams[r["label"]][1] * 1_000_000
                   + streams[r["label"]][2], r["type"] - reg.NVTX_GPU_BASE,
                   r["time"] - shift, r["name"]) for r in gpu.iter_rows(named=True))
    shown, cut = _shown(spans)
    assert got == Counter(shown)
    assert result.counts.get(CUT, 0) == cut
    # every level nsys draws has its type, values shared with the CPU ranges
    assert set(gpu["type"].unique()) == {reg.NVTX_GPU_BASE + lv
                                         for lv in nsys["level"].unique()}
    cpu_values = dict(zip(cpu["name"], cpu["value"]))
    assert all(cpu_values[n] == v for n, v in zip(gpu["name"], gpu["value"]) if n is not None)


# ------------------------------------------------------ the layer views (paramedir) --
# paramedir's outputs of the layer cfgs are stored (python tools/paramedir.py
# refresh): on the synthetic export they must be the hand-made numbers, on aiprof_opt2 what
# analysis/projection.py gives from the export, on mfu2gpu their totals.

PARAMEDIR = ROOT / "tests" / "data" / "paramedir"


def _table(case: str, name: str):
    from paramedir import read_table

    path = PARAMEDIR / case / name
    assert path.exists(), f"{path}: refresh with python tools/paramedir.py refresh"
    return read_table(path)


def _kernel_rates(prv: Path, shift: int) -> pl.DataFrame:
    """Every compute kernel of the trace's stream rows (stream key, start, end in the
    export's clock) with its SM Issue rate (the last rate written on its row at or before
    its start: rates are written where they change)."""
    from nsys2prv.paraver.registry import gpu_metrics

    rate_type = gpu_metrics.RATE.type_of(gpu_metrics.KNOWN_METRICS["SM Issue"])
    tr = read_trace(prv, {reg.CUDA_KERNEL, rate_type}, state_rows="none")
    labels = dict(zip(tr.rows["row"], tr.rows["label"]))
    key = {r: s[0] * 1_000_000_000 + s[1] * 1_000_000 + s[2]
           for r, lbl in labels.items() if (s := _stream_of(lbl)) is not None}
    ev = (tr.events.filter(pl.col("row").is_in(list(key)))
          .with_columns(pl.col("row").replace_strict(key, return_dtype=pl.Int64)
                        .alias("stream"), (pl.col("time") - shift).alias("t"))
          .sort("stream", "t", "seq"))
    # a stream row's kernels never overlap (a lane row takes an overlapping one): its n-th
    # start and n-th end (in file order) are one kernel's
    k = ev.filter(pl.col("type") == reg.CUDA_KERNEL).with_columns(
        pl.int_range(pl.len()).over("stream", pl.col("value") == 0).alias("n"))
    kernels = (k.filter(pl.col("value") != 0).select("stream", "n", "t")
               .join(k.filter(pl.col("value") == 0).select("stream", "n",
                                                           pl.col("t").alias("end")),
                     on=["stream", "n"]).sort("stream", "t"))
    rates = ev.filter(pl.col("type") == rate_type).select("stream", "t", "value")
    return (kernels.join_asof(rates, on="t", by="stream", strategy="backward",
                              check_sortedness=False)
            .select("stream", pl.col("t").alias("start"), "end",
                    (pl.col("value").fill_null(0) / 100).alias("rate")))


def test_layer_views_on_the_synthetic_export(tmp_path):
    """paramedir's stored outputs of the four layer cfgs on the synthetic export: the
    innermost range of each stream over time, and per stream and range the kernels' time,
    their count and their SM Issue rate averaged over their time, as the export says."""
    import nsys2prv
    from nsys2prv.testing.synth_projection import (BASE, INNERMOST, KERNEL_TIME, KERNELS,
                                                   US, projection_export)
    from paramedir import read_timeline

    prv = tmp_path / "projection.prv"
    nsys2prv.translate(projection_export(tmp_path / "p.sqlite"), prv)
    cpu = _events(prv, CPU_TYPES)
    shift = cpu.filter(pl.col("name") == "step")["time"].min() - BASE
    rows = read_trace(prv, frozenset(), state_rows="none").rows
    stream_of = {f"1.{r['task']}.{r['thread']}": _stream_of(r["label"])
                 for r in rows.iter_rows(named=True)}

    def cells(name: str, scale: float) -> dict:
        """(stream, column) -> the non-zero cells (only stream rows have any)."""
        t = _table("projection", name)
        return {(_stream_of(r)[2], c): v / scale
                for r, row in zip(t.rows, t.cells) for c, v in zip(t.columns, row) if v}

    assert cells("analysis__layer_gpu_time.txt", US) == KERNEL_TIME
    assert cells("analysis__layer_kernel_count.txt", 1) == KERNELS
    # the timeline: the innermost range of each stream row over time
    names = _pcf_names(prv)
    tl = read_timeline(PARAMEDIR / "projection" / "views__layers_on_gpu.csv").filter(
        (pl.col("duration") > 0) & (pl.col("value") != 0))
    got: dict[int, list] = {}
    for r in tl.iter_rows(named=True):
        s = stream_of[r["object"]]
        begin = (round(r["begin"]) - shift - BASE) // US
        end = begin + round(r["duration"]) // US
        seq = got.setdefault(s[2], [])
        name = names[round(r["value"])]
        if seq and seq[-1][1] == begin and seq[-1][2] == name:
            seq[-1] = (seq[-1][0], end, name)
        else:
            seq.append((begin, end, name))
    assert got == INNERMOST
    # the rates: per stream and innermost range, the time-weighted mean of its kernels'
    k = _kernel_rates(prv, shift + BASE).filter(pl.col("rate") != 0)
    expected = {}
    for stream, spans in INNERMOST.items():
        for a, b, name in spans:
            sel = k.filter((pl.col("stream") % 1_000_000 == stream)
                           & (pl.col("start") >= a * US) & (pl.col("start") < b * US))
            if sel.height:
                d = (sel["end"] - sel["start"]).cast(pl.Float64)
                expected[(stream, name)] = float((sel["rate"] * d).sum() / d.sum())
    rates = cells("hwcounters__layer_rates.txt", 1)
    assert rates.keys() == expected.keys() and len(rates) >= 4
    assert all(abs(rates[key] - v) < 0.006 for key, v in expected.items())


def _own_kernels(db: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """From the export, with analysis/projection.py: (per range name, the GPU time and count
    of the kernels a range launched that none of its sub-ranges launched: what it holds
    while it is the innermost range on the stream; every kernel launched in a range with
    its stream, start, end and that name)."""
    from nsys2prv.analysis import projection as P

    ranges, work = _export_tables(db)
    ranges = ranges.filter(pl.col("end_tid").is_null())
    con = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    kernels = pl.DataFrame(con.execute(
        "SELECT start, deviceId * 1000000000 + contextId * 1000000 + streamId "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall(), schema=["start", "stream"],
        orient="row").unique().with_columns(pl.lit(0, pl.Int8).alias("kind"))
    con.close()
    work = work.join(kernels, on=["start", "stream"], how="left").with_columns(
        pl.col("kind").fill_null(2))
    row, s, e = (ranges[c].to_numpy() for c in ("tid", "start", "end"))
    w = P.Work.of(work["tid"].to_numpy(), work["call_start"].to_numpy(),
                  work["stream"].to_numpy(), work["start"].to_numpy(),
                  work["end"].to_numpy(), work["kind"].to_numpy(), [s, e])
    _, level = P.nesting(row, s, e)
    proj = P.project(w, row, s, e, busy=False)
    # each activity's innermost range: the deepest level whose slice holds it
    owner = np.full(w.size, -1)
    for lv in np.unique(level[proj.projected & (level >= 0)]):
        for i in np.flatnonzero(proj.projected & (level == lv)):
            owner[proj.lo[i]:proj.hi[i]] = i
    names = np.array([clean_label(n) for n in ranges["name"].to_list()], dtype=object)
    mine = np.flatnonzero((owner >= 0) & (w.kind == 0))
    acts = pl.DataFrame({"name": names[owner[mine]], "stream": w.row[mine].astype(np.int64),
                         "start": w.start[mine], "end": w.end[mine]})
    per = acts.group_by("name").agg((pl.col("end") - pl.col("start")).sum().alias("time"),
                                    pl.len().alias("count"))
    return per, acts


def _column_sums(case: str, name: str) -> dict[str, float]:
    t = _table(case, name)
    return dict(zip(t.columns, np.nansum(t.cells, axis=0)))


def test_layer_views_on_aiprof(tmp_path):
    """On aiprof_opt2 (2,720 NVTX names: one column each), paramedir's GPU time, kernel
    count and SM Issue rate per innermost range equal what analysis/projection.py gives from
    the export: every kernel under the deepest range that launched it (one stream, so a
    range's own kernels run between its sub-ranges' on the GPU too)."""
    import nsys2prv

    db = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"
    need_exports(db)
    per, acts = _own_kernels(db)
    time = _column_sums("aiprof", "analysis__layer_gpu_time.txt")
    count = _column_sums("aiprof", "analysis__layer_kernel_count.txt")
    per = per.filter(pl.col("time") > 0)
    assert len(time) == per.height == 432
    assert time == {n: float(v) for n, v in zip(per["name"], per["time"])}
    assert count == {n: float(v) for n, v in zip(per["name"], per["count"])}
    assert sum(count.values()) == 9345  # every kernel of the run
    # the rates: each kernel's from the trace, time-weighted per innermost range
    prv = tmp_path / "aiprof.prv"
    nsys2prv.translate(db, prv)
    cpu = _events(prv, CPU_TYPES)
    ranges, _ = _export_tables(db)
    shift = int(cpu.filter(pl.col("value") != 0)["time"].min()) - int(ranges["start"].min())
    k = _kernel_rates(prv, shift).join(acts, on=["stream", "start"], how="inner")
    assert k.height == acts.height
    k = k.filter(pl.col("rate") != 0).with_columns(
        (pl.col("end") - pl.col("start")).cast(pl.Float64).alias("d"))
    expected = dict(k.group_by("name").agg((pl.col("rate") * pl.col("d")).sum()
                                           / pl.col("d").sum()).iter_rows())
    rates = _column_sums("aiprof", "hwcounters__layer_rates.txt")
    assert rates.keys() == expected.keys() and len(rates) > 200
    assert all(abs(rates[n] - v) < 0.006 for n, v in expected.items())


def test_layer_views_on_mfu2gpu_totals():
    """On nsysai_mfu2gpu_before the names span more values than Paraver gives one column each
    (10,000: it bins them), so only the totals are compared: the time of every kernel
    launched inside a range is under some range of its stream, but for the one kernel that
    overlaps the one before it on its stream (a lane row takes it, and lane rows carry no
    range); that earlier kernel runs across the start of the later one's range, where the
    earlier range is cut, so it counts in both and the count is every kernel's."""
    db = CORPUS / "sqlite" / "nsysai_mfu2gpu_before.sqlite"
    need_exports(db)
    _, acts = _own_kernels(db)
    lane = (acts.sort("stream", "start")
            .with_columns(pl.col("end").cum_max().shift(1).over("stream").alias("before"))
            .filter(pl.col("before") > pl.col("start")))
    assert lane.height == 1
    assert sum(_column_sums("mfu2gpu", "analysis__layer_gpu_time.txt").values()) == \
        int((acts["end"] - acts["start"]).sum() - (lane["end"] - lane["start"]).sum())
    assert sum(_column_sums("mfu2gpu", "analysis__layer_kernel_count.txt").values()) == \
        acts.height
