"""GPU metrics: samples on the metrics rows and per-kernel attribution on the stream rows.

Real exports: every count, mean and per-kernel integral is checked against SQL on the export.
Synthetic exports (native form with TARGET_INFO_CUDA_DEVICE, JSON form without): two GPUs,
two processes, a shared GPU seen under another CUDA ordinal, with values known sample by
sample. The trace side is read with the naive reader of prvtools and Paraver's "Last Evt Val"
semantics emulated in plain Python.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import CORPUS, corpus_cases, corpus_files, translate_case
from prvtools import read_prv, sql, tables, validate

import nsys2prv
from nsys2prv.paraver import registry as reg
from nsys2prv.paraver.registry import gpu_metrics as greg
from nsys2prv.testing import synth_metrics as sm
from nsys2prv.testing.synth import write_export

SM_ACTIVE = greg.SAMPLES.type_of(greg.KNOWN_METRICS["SM Active"])
TENSOR = greg.SAMPLES.type_of(greg.KNOWN_METRICS["Tensor Active"])
CLOCK = greg.SAMPLES.type_of(greg.KNOWN_METRICS["GPC Clock Frequency"])


# -- helpers ---------------------------------------------------------------------------------

def _rows(tr) -> list[str]:
    """Row labels without the task tag ('pid 200: ') of a trace of several tasks."""
    return [re.sub(r"^(?:rank|pid) -?\d+: ", "", label)
            for label in tr.row.split("LEVEL THREAD SIZE ")[1].splitlines()[1:]]


def _tasks(tr) -> list[str]:
    return tr.row.split("LEVEL TASK SIZE ")[1].split("\n\n")[0].splitlines()[1:]


def _row_of(tr, label_prefix: str, task: int | None = None) -> list[tuple[int, int]]:
    """(task, thread) of the rows whose label starts with `label_prefix`."""
    labels = _rows(tr)
    appl = re.search(r"\d+\(([\d:,]+)\)$", tr.header)  # nTasks(threads:node,...)
    sizes = [int(x.split(":")[0]) for x in appl.group(1).split(",")]
    out, i = [], 0
    for t, n in enumerate(sizes, start=1):
        for th in range(1, n + 1):
            if labels[i].startswith(label_prefix) and task in (None, t):
                out.append((t, th))
            i += 1
    return out


def _types_by_label(tr, prefix: str) -> dict[str, int]:
    """metric key -> trace type of the types whose .pcf label is '<prefix><key>'."""
    out = {}
    for line in tr.pcf.splitlines():
        m = re.match(r"^\d+\s+(\d+)\s+" + re.escape(prefix) + r"(.*)$", line)
        if m:
            out[m.group(2)] = int(m.group(1))
    return out


def integrals(tr, data_type: int, control_types=(reg.CUDA_KERNEL,)) -> tuple[dict, dict]:
    """Paraver 'Average value' ingredients per kernel name, emulated: on every row, the
    control window is the kernel name (Last Evt Val) and the data window `data_type` (Last
    Evt Val); returns (sum of data x time, time) per control value label."""
    labels = tr.pcf_labels(reg.CUDA_KERNEL)
    state: dict[tuple, list] = defaultdict(lambda: [0, 0, None])  # control, data, last time
    area: dict[str, float] = defaultdict(float)
    time: dict[str, int] = defaultdict(int)
    for task, thread, t, pairs in tr.events:
        st = state[(task, thread)]
        if st[2] is not None and st[0]:
            area[labels[st[0]]] += st[1] * (t - st[2])
            time[labels[st[0]]] += t - st[2]
        for ty, v in pairs:
            if ty in control_types:
                st[0] = v
            elif ty == data_type:
                st[1] = v
        st[2] = t
    return dict(area), dict(time)


def expected_integrals(kernels, periods, values) -> tuple[dict, dict]:
    """Independent model: a sample's value holds over its sampling period [t_i, t_i+1) (the
    last one lasts the median interval); a kernel gets the overlap x value of every period
    it overlaps; its time counts whole. kernels: (name, gpu, start, end); periods: gpu ->
    sorted sample times; values: (gpu, time) -> value."""
    area: dict[str, float] = defaultdict(float)
    time: dict[str, int] = defaultdict(int)
    for name, gpu, s, e in kernels:
        if e <= s:
            continue
        time[name] += e - s
        ts = periods.get(gpu, [])
        if not ts:
            continue
        med = statistics.median(b - a for a, b in zip(ts, ts[1:])) if len(ts) > 1 else 0
        for i, t in enumerate(ts):
            end = ts[i + 1] if i + 1 < len(ts) else t + med
            overlap = min(e, end) - max(s, t)
            if overlap > 0 and (gpu, t) in values:
                area[name] += overlap * values[(gpu, t)]
    return dict(area), dict(time)


# -- real exports ------------------------------------------------------------------------------

def _metrics_form(db: Path) -> str | None:
    t = tables(db)
    if "GPU_METRICS" in t and "TARGET_INFO_GPU_METRICS" in t and \
            sql(db, "SELECT count(*) FROM GPU_METRICS")[0][0]:
        return "native"
    if {"GENERIC_EVENTS", "GENERIC_EVENT_TYPES", "GENERIC_EVENT_SOURCES"} <= t and sql(
            db, "SELECT count(*) FROM GENERIC_EVENT_SOURCES WHERE json_extract(data, '$.Name')"
                " = 'GpuMetrics'")[0][0]:
        return "json"
    return None


FILES = [p for p in corpus_files() if _metrics_form(p)]


@pytest.fixture(scope="module", **corpus_cases(FILES))
def real(request, tmp_path_factory):
    db, result, out = translate_case(
        request, tmp_path_factory, f"no real export with GPU metrics (corpus at {CORPUS} "
        "absent or without GPU_METRICS / GENERIC_EVENTS GpuMetrics)")
    validate(out)
    return db, _metrics_form(db), result, read_prv(out)


def _samples_sql(db: Path, form: str) -> list[tuple[str, int, int]]:
    """(metric name, time, value) of every non-negative sample value, by SQL."""
    if form == "native":
        return sql(db, "SELECT m.metricName, g.timestamp, g.value FROM GPU_METRICS g JOIN "
                       "TARGET_INFO_GPU_METRICS m ON m.typeId = g.typeId AND m.metricId = "
                       "g.metricId WHERE g.value >= 0")
    return sql(db, "SELECT j.key, coalesce(g.timestamp, g.rawTimestamp), CAST(j.value AS "
                   "INTEGER) FROM GENERIC_EVENTS g, json_each(g.data) j WHERE g.typeId IN "
                   "(SELECT t.typeId FROM GENERIC_EVENT_TYPES t JOIN GENERIC_EVENT_SOURCES s "
                   "ON s.sourceId = t.sourceId WHERE json_extract(s.data, '$.Name') = "
                   "'GpuMetrics') AND CAST(j.value AS INTEGER) >= 0")


def test_samples_per_metric_match_sql(real):
    db, form, result, tr = real
    rows = _samples_sql(db, form)
    by_name: dict[str, list[int]] = defaultdict(list)
    for name, _, v in rows:
        by_name[name].append(v)
    types = _types_by_label(tr, "GPU metric: ")
    got: dict[int, list[int]] = defaultdict(list)
    for *_, pairs in tr.events:
        for t, v in pairs:
            if greg.GPU_METRICS_BASE <= t < greg.GPU_METRICS_BASE + 1000:
                got[t].append(v)
    assert len(types) == len(by_name)
    for name, values in by_name.items():
        key, factor = greg.normalise(name)
        t = types[key]
        assert len(got[t]) == len(values), name
        assert sorted(got[t]) == sorted(math.floor(v * factor * 100 + 0.5) for v in values), \
            name
    assert result.counts["gpu_metrics_values"] == len(rows)
    # the two metrics the tensor-core views use have their fixed types; means match SQL
    names = {greg.normalise(n)[0]: n for n in by_name}
    for t, key in ((SM_ACTIVE, "SM Active"), (TENSOR, "Tensor Active")):
        assert types[key] == t
        want = statistics.fmean(by_name[names[key]])
        assert statistics.fmean(got[t]) / 100 == pytest.approx(want, abs=1e-9)


def test_one_line_per_sample_on_the_metrics_row(real):
    db, form, result, tr = real
    times = {t for _, t, _ in _samples_sql(db, form)}
    (row,) = _row_of(tr, "GPU 0 metrics")
    lines = [t for task, thread, t, _ in tr.events if (task, thread) == row]
    assert len(lines) == len(set(lines)) == len(times)
    shift = result.alignment.shifts[0]
    assert sorted(lines) == sorted(t + shift for t in times)


def test_metrics_row_belongs_to_the_gpu_user(real):
    db, _, result, tr = real
    pids = sql(db, "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM "
                   "CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(pids) == 1
    (task, _), = _row_of(tr, "GPU 0 metrics")
    assert _tasks(tr)[task - 1].startswith(f"pid {pids[0][0]}")
    assert not result.warnings or set(result.warnings) == {
        "GPU metrics: values negative (counter overflow) (dropped)"}


def test_per_kernel_averages_match_sql(real):
    db, form, result, tr = real
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    kernels = sql(db, f"SELECT s.value, k.deviceId, k.start, k.end FROM {k} k JOIN StringIds s "
                      "ON s.id = k.shortName")
    rows = _samples_sql(db, form)
    periods = {0: sorted({t for _, t, _ in rows})}
    shift = result.alignment.shifts[0]
    on_kernel = _types_by_label(tr, "GPU metric during kernel: ")
    for key in ("SM Active", "Tensor Active"):
        values = {(0, t): v * 100 for n, t, v in rows if greg.normalise(n)[0] == key}
        want_area, want_time = expected_integrals(
            [(n, d, s + shift, e + shift) for n, d, s, e in kernels],
            {0: [t + shift for t in periods[0]]},
            {(g, t + shift): v for (g, t), v in values.items()})
        area, time = integrals(tr, on_kernel[key])
        assert time == want_time
        assert area.keys() <= want_area.keys()
        for name, a in want_area.items():
            assert area.get(name, 0) == pytest.approx(a), (key, name)
    assert result.counts["gpu_metrics_kernels_attributed"] == len(kernels)


# -- synthetic: two GPUs, two processes, a shared GPU --------------------------------------------

@pytest.fixture(scope="module", params=["native", "json"])
def synthetic(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"synth-metrics-{request.param}")
    spec, mspec = sm.two_gpu_scenario()
    if request.param == "native":
        db = write_export(d / "m.sqlite", spec, "3.17.1")
        sm.add_native_metrics(db, mspec)
    else:  # nsys 2022.4: JSON samples, no TARGET_INFO_CUDA_DEVICE
        mspec.cuda_devices = []
        db = write_export(d / "m.sqlite", spec, "3.0.0")
        sm.add_json_metrics(db, mspec)
    result = nsys2prv.translate(db, d / "m.prv")
    validate(d / "m.prv")
    return request.param, spec, mspec, result, read_prv(d / "m.prv")


def _gpu_of(form: str, pid: int, device: int) -> int:
    """GPU a kernel ran on, as the scenario defines it (identity without the mapping)."""
    if form == "native" and pid == sm.PID_B:
        return 1
    return device


def test_rows_owner_and_messages(synthetic):
    form, spec, mspec, result, tr = synthetic
    tasks = _tasks(tr)
    assert [t.split()[1] for t in tasks] == [str(sm.PID_A), str(sm.PID_B)]
    a_rows = [r for r in _row_of(tr, "GPU ") if r[0] == 1]
    metrics_a = [lbl for (t, th), lbl in zip(_row_of(tr, ""), _rows(tr))
                 if t == 1 and "metrics" in lbl]
    metrics_b = [lbl for (t, th), lbl in zip(_row_of(tr, ""), _rows(tr))
                 if t == 2 and "metrics" in lbl]
    assert a_rows
    if form == "native":
        # GPU 0: pid 100 only; GPU 1: pid 100 (1 kernel as CUDA device 1) and pid 200 (3
        # kernels as CUDA device 0): pid 200 owns it, labelled with its own ordinal 0
        assert [m.split(" (")[0] for m in metrics_a] == ["GPU 0 metrics"]
        assert [m.split(" (")[0] for m in metrics_b] == ["GPU 0 metrics"]
        assert result.counts["GPU metrics: GPU 1 used by processes 100, 200; its metrics row "
                             "is on pid 200 (most GPU activities)"] == 1
        assert not any("TARGET_INFO_CUDA_DEVICE" in w for w in result.warnings)
    else:
        # without the mapping, pid 200's device 0 is taken for GPU 0: pid 100 (9 kernels
        # there, against 3) owns GPU 0, and GPU 1 too
        assert [m.split(" (")[0] for m in metrics_a] == ["GPU 0 metrics", "GPU 1 metrics"]
        assert metrics_b == []
        assert result.warnings["GPU metrics: no TARGET_INFO_CUDA_DEVICE; nsys GPU ids taken "
                               "as CUDA device ordinals (wrong if CUDA_VISIBLE_DEVICES "
                               "renumbered the GPUs)"] == 1
    assert result.warnings["GPU metrics: values negative (counter overflow) (dropped)"] == 1


def _metrics_row(tr, form: str, gpu: int) -> tuple[int, int]:
    if form == "native":
        return _row_of(tr, "GPU 0 metrics", task=1 if gpu == 0 else 2)[0]
    return _row_of(tr, f"GPU {gpu} metrics", task=1)[0]


def test_sample_values_exact(synthetic):
    form, spec, mspec, result, tr = synthetic
    shift = result.alignment.shifts[0]
    types = _types_by_label(tr, "GPU metric: ")
    assert set(types) == {"SM Active", "Tensor Active", "GPC Clock Frequency",
                          "Compute Warps in Flight [Avg]"}
    assert types["SM Active"] == SM_ACTIVE and types["Tensor Active"] == TENSOR
    assert types["GPC Clock Frequency"] == CLOCK
    assert types["Compute Warps in Flight [Avg]"] == greg.SAMPLES.type_of(
        greg.FIRST_FREE_OFFSET)
    for gpu in (0, 1):
        row = _metrics_row(tr, form, gpu)
        got = {t: dict(pairs) for task, thread, t, pairs in tr.events
               if (task, thread) == row}
        want = {}
        for s in mspec.samples:
            if s.gpu == gpu:
                want[s.time + shift] = {types[greg.normalise(n)[0]]: v * 100
                                        for n, v in s.values.items() if v >= 0}
        assert got == want
    assert result.counts["gpu_metrics_samples"] == len(mspec.samples)
    assert result.counts["gpu_metrics_values"] == sum(
        1 for s in mspec.samples for v in s.values.values() if v >= 0)


def test_per_kernel_integrals_exact(synthetic):
    form, spec, mspec, result, tr = synthetic
    shift = result.alignment.shifts[0]
    on_kernel = _types_by_label(tr, "GPU metric during kernel: ")
    periods = defaultdict(list)
    for s in mspec.samples:
        periods[s.gpu].append(s.time + shift)
    kernels = [(k.name, _gpu_of(form, k.pid, k.device), k.start + shift, k.end + shift)
               for k in spec.kernels]
    for name in ("SMs Active [Throughput %]", "Tensor Active [Throughput %]",
                 "Compute Warps in Flight [Avg]"):
        values = {(s.gpu, s.time + shift): s.values[name] * 100 for s in mspec.samples}
        want = expected_integrals(kernels, dict(periods), values)
        got = integrals(tr, on_kernel[greg.normalise(name)[0]])
        assert got[1] == want[1]
        assert {k: v for k, v in got[0].items() if v} == \
            {k: v for k, v in want[0].items() if v}, name


def test_per_kernel_events_exact(synthetic):
    """The first gemm of pid 100 (GPU 0, 120-380 us): the periods starting at 80, 180 and
    280 us (samples 1, 2, 3), events at 120, 180, 280 us and 0 at 380 us; the relu that
    overlaps another on stream 7 took its events to the lane row; 'early', 'late' and
    'empty' got none."""
    form, spec, mspec, result, tr = synthetic
    shift, us = result.alignment.shifts[0], 1000
    t_tensor = _types_by_label(tr, "GPU metric during kernel: ")["Tensor Active"]
    (row,) = _row_of(tr, "GPU 0 ctx 1 stream 7 (", task=1)
    got = [(t - shift, dict(p)[t_tensor]) for task, th, t, p in tr.events
           if (task, th) == row and t_tensor in dict(p)]
    tensor = [s.values["Tensor Active [Throughput %]"] * 100 for s in mspec.samples
              if s.gpu == 0]
    assert got[:4] == [(120 * us, tensor[1]), (180 * us, tensor[2]), (280 * us, tensor[3]),
                       (380 * us, 0)]
    lane = _row_of(tr, "GPU 0 ctx 1 stream 7 lane 1", task=1)
    assert len(lane) == 1
    lane_events = [(t - shift, dict(p)[t_tensor]) for task, th, t, p in tr.events
                   if (task, th) == lane[0] and t_tensor in dict(p)]
    # relu 740-790 us: period [680, 780) then [780, 880), 0 at its end
    assert lane_events == [(740 * us, tensor[7]), (780 * us, tensor[8]), (790 * us, 0)]
    names = tr.pcf_labels(reg.CUDA_KERNEL)
    attributed = {names[v] for task, th, t, p in tr.events for ty, v in p
                  if ty == reg.CUDA_KERNEL and v and t_tensor in dict(p)}
    assert attributed == {"gemm", "relu", "conv"}
    kernels_with_periods = 10  # every kernel but early, late and empty
    assert result.counts["gpu_metrics_kernels_attributed"] == kernels_with_periods


def test_unsampled_tail_of_a_kernel_is_zero(synthetic):
    """pid 200's relu (900-1200 us) outlives the last sampling period of its GPU (GPU 1 with
    the CUDA device mapping: 910-1010 us; GPU 0 without: 980-1080 us): 0 from there on."""
    form, spec, mspec, result, tr = synthetic
    shift, us = result.alignment.shifts[0], 1000
    gpu = _gpu_of(form, sm.PID_B, 0)
    t_sm = _types_by_label(tr, "GPU metric during kernel: ")["SM Active"]
    (row,) = _row_of(tr, "GPU 0 ctx 1 stream 7 (", task=2)
    got = [(t - shift, dict(p)[t_sm]) for task, th, t, p in tr.events
           if (task, th) == row and t_sm in dict(p) and t - shift >= 900 * us]
    samples = [(s.time, s.values["SMs Active [Throughput %]"] * 100) for s in mspec.samples
               if s.gpu == gpu]
    (t8, v8), (t9, v9) = samples[-2:]
    assert t8 < 900 * us < t9 < 1200 * us < t9 + sm.PERIOD * 3
    assert got == [(900 * us, v8), (t9, v9), (t9 + sm.PERIOD, 0)]


def test_deterministic(tmp_path):
    spec, mspec = sm.two_gpu_scenario()
    db = write_export(tmp_path / "m.sqlite", spec, "3.17.1")
    sm.add_native_metrics(db, mspec)
    outs = []
    for i, chunk in enumerate((None, 7)):
        out = tmp_path / f"m{i}.prv"
        nsys2prv.translate(db, out, chunk_rows=chunk)
        outs.append(out.read_text().split("\n", 1)[1])
    assert outs[0] == outs[1]


def test_metric_names_fold_across_versions():
    assert greg.normalise("SMs Active [Throughput %]") == ("SM Active", 1.0)
    assert greg.normalise("Compute Warps In Flight") == ("Compute Warps in Flight", 1.0)
    assert greg.normalise("Compute Warps in Flight [Avg Warps per Cycle]")[0] == \
        "Compute Warps in Flight [Avg Warps per Cycle]"
    assert greg.normalise("GPC Clock Frequency") == ("GPC Clock Frequency", 1e-6)
    assert greg.normalise("GPC Clock Frequency [MHz]") == ("GPC Clock Frequency", 1.0)
    assert greg.normalise("DRAM Read Throughput")[0] == "DRAM Read Bandwidth"
    assert greg.normalise("Tensor Active \\/ FP16 Active")[0] == "Tensor Active / FP16 Active"
    assert greg.metric_key("GR Active (GE\\/CE)") == "GR Active"


def test_no_attribution_without_kernels(tmp_path):
    """With the kernels kind left out, the metrics rows are there and nothing is written on
    the stream rows (the memcpy rows of the streams must not get kernel values)."""
    spec, mspec = sm.two_gpu_scenario()
    db = write_export(tmp_path / "m.sqlite", spec, "3.17.1")
    sm.add_native_metrics(db, mspec)
    result = nsys2prv.translate(db, tmp_path / "m.prv", only=["gpu_metrics"])
    validate(tmp_path / "m.prv")
    tr = read_prv(tmp_path / "m.prv")
    assert [lbl.split(" (")[0] for lbl in _rows(tr)] == ["GPU 0 metrics", "GPU 0 metrics"]
    assert not any(greg.GPU_METRICS_ON_KERNEL_BASE <= t < greg.GPU_METRICS_ON_KERNEL_BASE + 1000
                   for *_, pairs in tr.events for t, _ in pairs)
    assert "gpu_metrics_kernel_periods" not in result.counts


def test_gpu_used_by_no_process(tmp_path):
    """Samples of a GPU no process of the report used (GPU 3) go to the process with the most
    GPU activity overall, labelled with the nsys GPU id, with a warning."""
    spec, mspec = sm.two_gpu_scenario()
    mspec.names = {3: sm.METRIC_NAMES}
    mspec.samples = [sm.Sample(s.time, 3, s.values) for s in mspec.samples if s.gpu == 1]
    db = write_export(tmp_path / "m.sqlite", spec, "3.17.1")
    sm.add_native_metrics(db, mspec)
    result = nsys2prv.translate(db, tmp_path / "m.prv")
    validate(tmp_path / "m.prv")
    tr = read_prv(tmp_path / "m.prv")
    assert _row_of(tr, "GPU 3 metrics", task=1)
    assert result.warnings["GPU metrics: GPU 3 used by no process of the report; metrics "
                           f"shown under pid {sm.PID_A}"] == 1
    assert "gpu_metrics_kernel_periods" not in result.counts
