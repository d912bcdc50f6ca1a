"""A trace read as it is merged (`api.translate_stream`), the way `analyze` and `diff` read
reports: the same bytes `translate` writes, read by every reader, and no .prv written."""

from __future__ import annotations

import pickle
from pathlib import Path

import polars as pl
import pytest

import nsys2prv
from nsys2prv.analysis.activities import read_activities
from nsys2prv.analysis.launch import read_launches
from nsys2prv.analysis.model import analyze_path
from nsys2prv.paraver.read import event_types, read_layout, windows
from nsys2prv.testing.multi import job
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


def _text(stream) -> bytes:
    return b"".join(bytes(b) for b in stream.blocks())


@pytest.fixture(scope="module")
def multi_job(tmp_path_factory) -> list[Path]:
    """Four GPU ranks on two hosts (multi-event lines, arrows, overlap lanes) and the
    recorded MPI run (message arrows from the merge hook)."""
    d = tmp_path_factory.mktemp("stream")
    paths = [write_export(d / f"rank{info.rank}.sqlite", spec) for info, spec in job()]
    return paths + sorted(RECORDED.glob("mpi_nvtx_rank*.nsys2023.4.sqlite"))


@pytest.mark.parametrize("window", [None, "iteration 1", "3ms/9ms"])
def test_stream_is_the_translated_trace(multi_job, tmp_path, window):
    """Its text, .pcf and .row are those `translate` writes (whole, an NVTX window and a
    time window), read twice (an analysis reads a trace twice), and it writes no .prv."""
    written = nsys2prv.translate(multi_job, tmp_path / "t.prv", window=window)
    stream = nsys2prv.api.translate_stream(multi_job, tmp_path / "s", name="t", window=window)
    text = (tmp_path / "t.prv").read_bytes()
    assert _text(stream) == text and _text(stream) == text
    assert written.counts["MPI messages"] == 60 or window is not None
    for ext in (".pcf", ".row"):
        assert (tmp_path / "s" / f"t{ext}").read_bytes() == (tmp_path / f"t{ext}").read_bytes()
    assert not list((tmp_path / "s").rglob("*.prv"))
    # a stream pickled to another process plans its merge again: the same text
    assert _text(pickle.loads(pickle.dumps(stream))) == text


def test_readers_take_a_stream(multi_job, tmp_path):
    """Layout, event types, windows, activities and the whole analysis (with the idle causes'
    second pass) read from the stream are those read from the file."""
    out = tmp_path / "t.prv"
    nsys2prv.translate(multi_job, out)
    stream = nsys2prv.api.translate_stream(multi_job, tmp_path / "s", name="t")
    assert read_layout(stream).rows.equals(read_layout(out).rows)
    assert read_layout(stream).end == read_layout(out).end
    assert event_types(stream) == event_types(out)
    types = event_types(out)
    a = [(w.start, w.end, w.events.height, w.states.height) for w in windows(out, types)]
    b = [(w.start, w.end, w.events.height, w.states.height) for w in windows(stream, types)]
    assert sum(x[2] for x in a) == sum(x[2] for x in b) > 0
    assert a[-1][1] == b[-1][1]
    x, y = read_activities(out), read_activities(stream)
    assert x.kernels.height > 0 and x.kernels.equals(y.kernels) and x.ranges.equals(y.ranges)
    full, streamed = analyze_path(out).to_dict(), analyze_path(stream).to_dict()
    assert full.pop("trace") != streamed.pop("trace")  # each names what it read
    assert full["idle"] is not None and full == streamed


def test_analyze_of_reports_writes_no_trace(tmp_path, monkeypatch, capsys):
    """`nsys2prv analyze REPORT` reads the translation as it is merged: the numbers are
    those of the translated trace, and no .prv is written on the way."""
    from nsys2prv.cli import main
    from nsys2prv.pipeline import merge as merge_mod

    export = write_export(tmp_path / "s4.sqlite", sample_spec(4))
    nsys2prv.translate([str(export)], tmp_path / "t.prv")
    wrote = []
    real = merge_mod.TraceWriter.__enter__

    def spy(self):
        wrote.append(self.prv)
        return real(self)

    monkeypatch.setattr(merge_mod.TraceWriter, "__enter__", spy)
    assert main(["analyze", str(export), "--json"]) == 0
    from_reports = capsys.readouterr().out
    assert wrote == []
    assert main(["analyze", str(tmp_path / "t.prv"), "--json"]) == 0
    from_trace = capsys.readouterr().out
    drop = lambda s: [ln for ln in s.splitlines() if '"trace":' not in ln]  # noqa: E731
    assert drop(from_reports) == drop(from_trace)


def test_stream_of_partials_numbers_values_like(tmp_path):
    """`stream_partials(values_like=)` numbers names as that trace did, as `merge_partials`
    does (it was dropped silently); a compressed stream is refused."""
    from nsys2prv.api import merge_partials, prepare_report, stream_partials
    from nsys2prv.errors import UsageError
    from nsys2prv.paraver.check import parse_pcf

    spec = sample_spec()
    like = tmp_path / "like.prv"
    nsys2prv.translate(write_export(tmp_path / "a.sqlite", spec), like)
    spec.kernels.reverse()  # the other run meets its kernel names in another order
    for k in spec.kernels[:3]:
        k.name = k.name + "_v2"
    part = tmp_path / "part"
    prepare_report(write_export(tmp_path / "b.sqlite", spec), part)
    merged = tmp_path / "m.prv"
    merge_partials([part], merged, values_like=like)
    stream = stream_partials([part], tmp_path / "s.prv", values_like=like)
    assert _text(stream) == merged.read_bytes()
    assert (tmp_path / "s.pcf").read_bytes() == merged.with_suffix(".pcf").read_bytes()
    plain = stream_partials([part], tmp_path / "p.prv")
    assert _text(plain) != _text(stream)  # the numbering is not that of a run alone
    pcf = [parse_pcf((tmp_path / f"{n}.pcf").read_text())[0] for n in ("s", "p")]
    assert pcf[0] != pcf[1]
    with pytest.raises(UsageError, match="cannot be compressed"):
        stream_partials([part], tmp_path / "c.prv", compress=True)


@pytest.mark.parametrize("window", [None, "iteration 1"])
def test_stream_without_attributes_is_analysed_the_same(multi_job, tmp_path, window):
    """A stream prepared without the activities' attributes (`attributes=False`, what an
    analysis of reports uses) has none of the attributes' numeric pairs but the kernels'
    launch statistics (the analysis reads them) and every other event of the translation:
    the analysis, the activities and the launch tables are the same, its partials smaller
    (on a 10M-activity export: 1.67 -> 0.79 GB, 10 CPU-s less, before the launch
    statistics were kept)."""
    from nsys2prv.api import translate_stream
    from nsys2prv.paraver.read import read_trace
    from nsys2prv.paraver.registry import cuda
    from nsys2prv.pipeline.window import attribute_types

    full = translate_stream(multi_job, tmp_path / "full", window=window)
    lean = translate_stream(multi_job, tmp_path / "lean", window=window, attributes=False)
    attributes = set(attribute_types())
    numeric = {cuda.CORRELATION_ID, cuda.MEMORY_BYTES, cuda.KERNEL_GRID_X,
               cuda.KERNEL_LOCAL_MEM_TOTAL, cuda.KERNEL_WAVES, cuda.CUDA_RETURN_VALUE
               } & event_types(full)
    assert len(numeric) >= (3 if window is None else 0)
    assert not numeric & event_types(lean)
    launch = set(cuda.LAUNCH_TYPES) & event_types(full)
    assert len(launch) >= (10 if window is None else 0)
    assert launch <= event_types(lean)
    others = event_types(full) - attributes
    assert event_types(lean) - attributes == others
    a, b = (read_trace(s, others, state_rows="all", comms=True) for s in (lean, full))
    assert a.events.equals(b.events) and a.states.equals(b.states) and a.comms.equals(b.comms)
    assert analyze_path(lean).to_dict() | {"trace": None} == \
        analyze_path(full).to_dict() | {"trace": None}
    a, b = read_activities(lean), read_activities(full)
    assert a.kernels.equals(b.kernels) and a.ranges.equals(b.ranges)
    assert a.memops.equals(b.memops) and a.sync.equals(b.sync)
    a, b = read_launches(lean), read_launches(full)
    assert a.configs.equals(b.configs) and a.findings.equals(b.findings)
    assert a.configs.height >= (1 if window is None else 0)

    def size(stream) -> int:
        return sum(f.stat().st_size for p in stream.partials for f in Path(p).iterdir())

    assert size(lean) < size(full)


def test_sources_read_attributes_only_when_kept():
    """Without attributes, a kernel's local memory and a call's return value are not read
    (null), every other column is the same (a kernel's launch configuration is read)."""
    from nsys2prv.report.report import Report
    from nsys2prv.sources import cuda_api, kernels

    report = Report(str(Path(__file__).resolve().parent.parent / "examples" / "sample.sqlite"))
    for source in (kernels, cuda_api):
        whole = pl.concat(list(source.read(report)))
        lean = pl.concat(list(source.read(report, attributes=False)))
        attrs = [c.name for c in source.COLUMNS if c.attribute]
        assert attrs and whole.height == lean.height > 0
        assert lean.select(attrs).null_count().row(0) == (lean.height,) * len(attrs)
        assert whole.drop(attrs).equals(lean.drop(attrs))
        assert whole.select(attrs).null_count().sum_horizontal().item() < whole.height
