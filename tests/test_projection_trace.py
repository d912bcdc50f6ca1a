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
        f"0    {reg.NVTX_GPU_BASE + k}   NVTX projected, level {k}" for k in range(3)}


def test_synthetic_counts(synthetic):
    """What is not drawn is counted: the range without work, the twins, the start/end range
    ended on another thread; and the range cut where a later one starts."""
    _, result, _ = synthetic
    c = result.counts
    assert c["nvtx ranges projected onto the GPU"] == 5
    assert c["nvtx projected spans on GPU rows"] == 7
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
