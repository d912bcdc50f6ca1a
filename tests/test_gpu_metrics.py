"""GPU metrics: samples on the metrics rows, the model's prediction beside them, and each
kernel's rates (the sample-mixing model) on the stream rows.

Real exports: every count and mean is checked against SQL on the export; the rates on the
kernels are those the analysis finds on the trace.
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

import numpy as np
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
    tr = read_prv(out)
    tr.path = out
    return db, _metrics_form(db), result, tr


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
    # the task is labelled 'pid P' or, for a rank, 'rank R name (pid P)'
    assert re.search(rf"\bpid {pids[0][0]}\b", _tasks(tr)[task - 1])
    assert set(result.warnings) <= {
        "GPU metrics: values negative (counter overflow) (dropped)",
        "GPU metrics: samples followed by a gap in the sampling (their period cut to one "
        "sampling interval)"}


def _rate_events(tr) -> dict[tuple, dict[int, int]]:
    """(task, thread, time) -> {rate type: value} in effect at every kernel start (Paraver's
    Last Evt Val: a rate holds on its row until the next one of its type), nonzero ones."""
    rates = lambda ty: (greg.RATE.base <= ty < greg.RATE.base + greg.RATE.size  # noqa: E731
                        or ty == greg.GPU_METRICS_METHOD)
    held: dict[tuple, dict[int, int]] = defaultdict(dict)
    out: dict[tuple, dict[int, int]] = {}
    for task, thread, t, pairs in tr.events:
        row = held[(task, thread)]
        for ty, v in pairs:
            if rates(ty):
                row[ty] = v
        if any(ty in (reg.CUDA_KERNEL, 67_000_002) and v for ty, v in pairs):
            now = {ty: v for ty, v in row.items() if v}
            if now:
                out[(task, thread, t)] = now
    return out


def test_rates_on_every_sampled_kernel(real):
    """Every kernel that ran while its GPU was sampled carries how its rates were found,
    and the rates the analysis finds on the trace: one value per name, launch class (its
    grid's SM Active ceiling, written on it) and metric; a name launched with grids of
    several classes has each class's rate on its launches, and analyze's rate of the name
    is their mean weighted by the launches' time (what Paraver's per-kernel tables give)."""
    from nsys2prv.analysis import occupancy as occ
    from nsys2prv.analysis.kernel_metrics import read_kernel_metrics

    db, form, result, tr = real
    rows = _samples_sql(db, form)
    times = sorted({t for _, t, _ in rows})
    interval = statistics.median(b - a for a, b in zip(times, times[1:]))
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    sampled = sql(db, f"SELECT count(*) FROM {k} WHERE end > start AND end > {times[0]} "
                      f"AND start < {times[-1] + interval}")[0][0]
    assert result.counts["gpu_metrics_kernels_with_rates"] == sampled
    held = _rate_events(tr)
    assert sum(1 for r in held.values() if r.get(greg.GPU_METRICS_METHOD)) == sampled
    km = read_kernel_metrics(Path(tr.path))
    labels = tr.pcf_labels(67_000_001)
    rate_types = {v: key for key, v in _types_by_label(tr, "GPU metric rate of kernel: ").items()}
    full_at = {(task, th, t): labels[v] for task, th, t, pairs in tr.events
               for ty, v in pairs if ty == 67_000_001 and v}
    ceiling_at = {(task, th, t): v for task, th, t, pairs in tr.events
                  for ty, v in pairs if ty == reg.KERNEL_SM_ACTIVE_CEILING}
    # each launch's duration: its start to the next kernel event of its row
    dur_at, open_ = {}, {}
    for task, th, t, pairs in tr.events:
        for ty, v in pairs:
            if ty in (reg.CUDA_KERNEL, 67_000_002):
                if (task, th) in open_:
                    dur_at[open_.pop((task, th))] = t - open_.get((task, th, "t"), t)
                if v:
                    open_[(task, th)] = (task, th, t)
                    open_[(task, th, "t")] = t
    seen: dict[tuple, set[int]] = defaultdict(set)
    per_name: dict[tuple, list] = defaultdict(list)
    for where, rates in held.items():
        k = int(occ.grid_class(ceiling_at.get(where, -1)))
        for ty, v in rates.items():
            if ty != greg.GPU_METRICS_METHOD:
                seen[(full_at[where], k, rate_types[ty])].add(v)
        for ty, metric in rate_types.items():  # a rate of 0 is not held: it counts as 0
            per_name[(full_at[where], metric)].append((dur_at.get(where, 0),
                                                       rates.get(ty, 0)))
    assert all(len(v) == 1 for v in seen.values())
    got = {key: v.pop() for key, v in seen.items()}
    split = km.rates_by_launch
    several = set(split["kernel"].to_list()) if split.height else set()
    want = {(r["kernel"], 0, r["metric"]): round(r["rate"] * 100)
            for r in km.rates.filter(km.rates["kind"] == "kernel").iter_rows(named=True)
            if r["kernel"] not in several}
    if split.height:
        want |= {(r["kernel"], r["grid_class"], r["metric"]): round(r["rate"] * 100)
                 for r in split.iter_rows(named=True) if r["rate"] == r["rate"]}
    want = {key: v for key, v in want.items() if v and key[2] in greg.KERNEL_METRICS}
    assert got == want
    # the name's rate: its launches' rates weighted by their time
    for r in km.rates.filter((km.rates["kind"] == "kernel")
                             & km.rates["kernel"].is_in(list(several))).iter_rows(named=True):
        pairs = per_name.get((r["kernel"], r["metric"]))
        if not pairs or r["metric"] not in greg.KERNEL_METRICS:
            continue
        mean = sum(d * v for d, v in pairs) / sum(d for d, _ in pairs) / 100
        assert mean == pytest.approx(r["rate"], abs=0.006), r


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
        got = {t: {ty: v for ty, v in pairs if ty < greg.GPU_METRICS_BASE + 1000}
               for task, thread, t, pairs in tr.events if (task, thread) == row}
        predicted = {t: {ty for ty, _ in pairs if greg.PREDICTED.base <= ty
                         < greg.PREDICTED.base + 1000}
                     for task, thread, t, pairs in tr.events if (task, thread) == row}
        want = {}
        for s in mspec.samples:
            if s.gpu == gpu:
                want[s.time + shift] = {types[greg.normalise(n)[0]]: v * 100
                                        for n, v in s.values.items() if v >= 0}
        assert got == want
        # the model's value of every sample beside it, for every metric a kernel drives that
        # was ever > 0
        live = {types[k] - greg.SAMPLES.base + greg.PREDICTED.base
                for k in types if any(v.get(types[k], 0) for v in want.values())
                and k in greg.KERNEL_METRICS}
        assert all(predicted[t] == live for t in want)
    assert result.counts["gpu_metrics_samples"] == len(mspec.samples)
    assert result.counts["gpu_metrics_values"] == sum(
        1 for s in mspec.samples for v in s.values.values() if v >= 0)


def _launch_bounds(kernels, keys: list[str], values, col, n_cols: int):
    """The model's bounds for synthetic kernels, from their launch as the spec gives it on
    the synthetic GPU (synth.A100): the metrics' ranges, each kernel's grid ceilings
    (written rounded up to 0.01 %, as the trace has them) and the one-SM floor."""
    from nsys2prv.analysis import occupancy as occ
    from nsys2prv.analysis import rate_model as rm
    from nsys2prv.testing.synth import A100

    def prod(t):
        return t[0] * t[1] * t[2]

    o = occ.occupancy(np.array([prod(k.block) for k in kernels]),
                      np.array([k.registers for k in kernels]),
                      np.array([k.static_smem for k in kernels]),
                      np.array([k.dynamic_smem for k in kernels]),
                      np.array([k.carveout for k in kernels]), A100["computeMajor"],
                      A100["computeMinor"], A100["maxWarpsPerSm"], A100["maxBlocksPerSm"],
                      A100["maxRegistersPerSm"], A100["maxShmemPerSm"])
    g = occ.ceilings(np.array([prod(k.grid) for k in kernels]),
                     np.array([prod(k.block) for k in kernels]), A100["smCount"],
                     o.blocks_per_sm, A100["maxWarpsPerSm"])
    lo, hi = rm.bounds([greg.is_percent(x) for x in keys], values)
    return occ.rate_bounds(keys, lo, hi, col, np.array([k.end - k.start for k in kernels]),
                           np.full(len(kernels), A100["smCount"]),
                           occ.to_trace(g.sm_active, up=True) / occ.SCALE,
                           occ.to_trace(g.warps, up=True) / occ.SCALE, n_cols)


def test_kernel_rates_from_the_samples(synthetic):
    """The rates on the kernels equal the model fitted on the scenario itself (its samples
    and the kernels of each GPU's owner, as defined there, not as read back): every launch
    of a name carries them, the relu moved to a lane row too; the kernels of pid 100 on
    the GPU pid 200 owns, and those outside the sampling ('early', 'late', 'empty'), carry
    none."""
    from nsys2prv.analysis import rate_model as rm

    form, spec, mspec, result, tr = synthetic
    shift = result.alignment.shifts[0]
    owner = {0: sm.PID_A, 1: sm.PID_B if form == "native" else sm.PID_A}
    rate_types = _types_by_label(tr, "GPU metric rate of kernel: ")
    labels = tr.pcf_labels(67_000_001)
    events = _rate_events(tr)
    full_at = {(task, th, t): labels[v] for task, th, t, pairs in tr.events
               for ty, v in pairs if ty == 67_000_001 and v}
    pids = [int(t.split()[1]) for t in _tasks(tr)]
    for gpu in (0, 1):
        names = mspec.names[gpu]
        times = sorted(s.time for s in mspec.samples if s.gpu == gpu)
        values = np.full((len(times), len(names)), np.nan)
        for s in mspec.samples:
            if s.gpu == gpu:
                for n, v in s.values.items():
                    if v >= 0:
                        values[times.index(s.time), names.index(n)] = \
                            round(v * greg.normalise(n)[1] * 100) / 100
        mine = [k for k in spec.kernels if k.pid == owner[gpu]
                and _gpu_of(form, k.pid, k.device) == gpu and k.end > k.start]
        col, cols = rm.design([k.name for k in mine], np.zeros(len(mine), bool),
                              np.array([k.end - k.start for k in mine]))
        keys = [greg.normalise(n)[0] for n in names]
        lo, hi = _launch_bounds(mine, keys, values, col, len(cols))
        fit, _ = rm.fit_device(rm.periods_of(np.array(times)), values,
                               np.array([k.start for k in mine]),
                               np.array([k.end for k in mine]), col, len(cols), lo, hi)
        task = pids.index(owner[gpu]) + 1
        for k, c in zip(mine, col):
            want = {rate_types[key]: round(fit.metrics[m].rates[c] * 100)
                    for m, key in enumerate(keys)
                    if fit.metrics[m].rates[c] == fit.metrics[m].rates[c]
                    and round(fit.metrics[m].rates[c] * 100)
                    and key in greg.KERNEL_METRICS}
            got = [{ty: v for ty, v in r.items() if ty != greg.GPU_METRICS_METHOD}
                   for (t_, th, t), r in events.items()
                   if t_ == task and t == k.start + shift and full_at[(t_, th, t)] == k.name]
            assert len(got) <= 1 and (got[0] if got else {}) == want, (gpu, k)
    lane = _row_of(tr, "GPU 0 ctx 1 stream 7 lane 1", task=1)
    assert len(lane) == 1 and any((t_, th) == lane[0] for t_, th, _ in events)
    # 'empty' lasts no time: in no model, it shows what its row holds (and counts for nothing)
    named = {full_at[w] for w, r in events.items() if r.get(greg.GPU_METRICS_METHOD)} - {
        "empty"}
    # without the CUDA device mapping (JSON form) pid 200's conv is taken to run on GPU 0,
    # whose owner is pid 100
    assert named == ({"gemm", "relu", "conv"} if form == "native" else {"gemm", "relu"})
    if form == "native":  # pid 100's gemm on GPU 1 (owned by pid 200) has no rates
        assert not [w for w in events if w[0] == 1 and w[2] == 100_000 + shift]


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
    assert not any(greg.RATE.base <= t < greg.RATE.base + 1000 or
                   t == greg.GPU_METRICS_METHOD for *_, pairs in tr.events for t, _ in pairs)
    assert "gpu_metrics_kernels_with_rates" not in result.counts


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
    assert "gpu_metrics_kernels_with_rates" not in result.counts


# -- the model streamed from spills on disk -----------------------------------------------------

def _tiny_spills(monkeypatch, rows: int = 2) -> None:
    """Every spill on disk in buckets of a few rows, the values of every block on disk, the
    CUDA calls' index on disk, read a few keys at a time."""
    from nsys2prv.paraver.kinds import _spill, cuda_api, gpu_metrics as gm

    monkeypatch.setattr(_spill.SortedSpill.__init__, "__defaults__", (rows, rows + 1))
    monkeypatch.setattr(gm, "HELD_VALUES", 3)
    monkeypatch.setattr(cuda_api.IndexBuilder.__init__, "__defaults__", (0,))
    monkeypatch.setattr(cuda_api, "FENCE", 4)
    monkeypatch.setattr(cuda_api, "WINDOW_BLOCKS", 3)


def test_model_spilled_to_disk_writes_the_same_trace(tmp_path, monkeypatch):
    """The model read back from disk in buckets of two rows (each stream's last kernel held
    over from bucket to bucket, the overlapping relus among them) writes the trace the model
    held in memory writes; the scenario's kernel table is not in time order ('early' comes
    after later kernels)."""
    spec, mspec = sm.two_gpu_scenario()
    assert [k.start for k in spec.kernels] != sorted(k.start for k in spec.kernels)
    db = write_export(tmp_path / "m.sqlite", spec, "3.17.1")
    sm.add_native_metrics(db, mspec)
    held = nsys2prv.translate(db, tmp_path / "held.prv")
    _tiny_spills(monkeypatch)
    spilled = nsys2prv.translate(db, tmp_path / "spilled.prv")
    assert held.counts["gpu_metrics_kernels_with_rates"] > 0
    assert spilled.counts == held.counts
    for ext in ("prv", "pcf", "row"):
        assert (tmp_path / f"spilled.{ext}").read_bytes() == (tmp_path / f"held.{ext}").read_bytes()
    assert not list(tmp_path.glob("**/*.arrow")) and not list(tmp_path.glob("**/*.npy"))


def test_model_spilled_to_disk_same_trace_on_a_real_export(tmp_path, monkeypatch):
    """The same on a real export (kernels, copies and samples of one GPU): buckets of 500
    rows."""
    from conftest import need_exports

    db = CORPUS / "exported2023" / "ayushos_vector_add_gpumetrics_v3.nsys2023.4.sqlite"
    need_exports(db)
    held = nsys2prv.translate(db, tmp_path / "held.prv")
    _tiny_spills(monkeypatch, 500)
    spilled = nsys2prv.translate(db, tmp_path / "spilled.prv")
    assert held.counts["gpu_metrics_kernels_with_rates"] > 1000
    assert held.counts["launch arrows"] > 1000
    assert spilled.counts == held.counts
    for ext in ("prv", "pcf", "row"):
        assert (tmp_path / f"spilled.{ext}").read_bytes() == (tmp_path / f"held.{ext}").read_bytes()


def test_sorted_spill_gives_every_row_back_in_order(tmp_path):
    """Frames in any order come back stably sorted, each time value within one bucket,
    buckets near their size, the files gone after close; small spills never touch disk."""
    import polars as pl

    from nsys2prv.paraver.kinds._spill import SortedSpill

    rng = np.random.default_rng(3)
    n = 20_000
    t = rng.integers(0, 3_000, n)  # many ties
    t[:2_000] = 7  # one time held by 2,000 rows
    frame = pl.DataFrame({"time": rng.permutation(t), "seq": np.arange(n)})
    spill = SortedSpill(tmp_path / "s", ["time"], bucket_rows=1_000, raw_rows=1_500)
    for a in range(0, n, 333):
        spill.add(frame[a:a + 333])
    spill.finish()
    buckets = list(spill.buckets())
    back = pl.concat(buckets)
    assert back.equals(frame.sort("time", maintain_order=True))
    seen = [set(b["time"].to_list()) for b in buckets]
    assert all(not (x & y) for i, x in enumerate(seen) for y in seen[i + 1:])
    assert 15 <= len(buckets) <= 25 and max(b.height for b in buckets) <= 3_000
    assert list(spill.buckets())[3].equals(buckets[3])  # read again, the same
    spill.close()
    assert not (tmp_path / "s").exists()
    small = SortedSpill(tmp_path / "t", ["time", "seq"])
    small.add(frame[:100])
    small.finish()
    assert pl.concat(list(small.buckets())).equals(frame[:100].sort(["time", "seq"]))
    assert not (tmp_path / "t").exists()


def _rates_written_whole(kernels: list[tuple], codes, pv, pairs) -> dict:
    """What the rate records of kernels (row, row_id, start, end, col) are, from all of them
    at once: per (row, row_id) the method and the pair values written (None: not written),
    a kernel omitted where it writes nothing. A kernel and the one before it on its stream
    that overlap nothing there write only what changed."""
    out = {}
    by_row = defaultdict(list)
    for k in kernels:
        by_row[k[0]].append(k)
    for row, ks in by_row.items():
        ks.sort(key=lambda k: (k[2], k[1]))
        reach, op = None, []
        for k in ks:
            op.append(reach is not None and k[2] < reach)
            reach = k[3] if reach is None else max(reach, k[3])
        cluster = [op[i] or (i + 1 < len(ks) and op[i + 1]) for i in range(len(ks))]
        for i, k in enumerate(ks):
            safe = i > 0 and not cluster[i] and not cluster[i - 1]
            prev = ks[i - 1][4] if i else None
            vals = {m: (int(pv[k[4], m]) if not safe or pv[k[4], m] != pv[prev, m] else None)
                    for m in pairs}
            if not safe or codes[k[4]] != codes[prev] or any(v is not None for v in
                                                              vals.values()):
                out[(row, k[1])] = (int(codes[k[4]]), vals)
    return out


def test_rate_writer_fed_in_buckets_equals_the_whole(monkeypatch):
    """`_RateWriter` fed kernels in start order, cut into buckets anywhere (ties of start
    never split), writes what the whole kernels' flags say: on streams where kernels
    overlap, chains of overlaps and kernels that span many others."""
    import polars as pl

    from nsys2prv.paraver.kinds import gpu_metrics as gm

    keys = ["SM Active", "Tensor Active", "DRAM Read Bandwidth"]
    rng = np.random.default_rng(11)
    for case in range(40):
        n_cols = int(rng.integers(1, 5))
        rates = np.round(rng.uniform(0, 100, (n_cols + 1, 3)) * (rng.random((n_cols + 1, 3))
                                                                 > 0.3), 1)
        method = list(rng.choice(["direct", "fit", "none"], n_cols + 1))
        n = int(rng.integers(1, 60))
        row = rng.integers(0, 3, n)
        start = rng.integers(0, 400, n) * 10
        dur = np.where(rng.random(n) < 0.1, 3000, rng.integers(1, 40, n) * 10)
        kernels = [(int(row[i]), i, int(start[i]), int(start[i] + dur[i]),
                    int(rng.integers(0, n_cols + 1))) for i in range(n)]
        got: dict = {}

        class Ctx:
            def records(self, df, lists=None):
                pair_cols = [c for c in df.columns if c.startswith("pair:")]
                for r in df.iter_rows(named=True):
                    got[(r["row"], r["ord"])] = (r["b"], [r[c] for c in pair_cols])

            def count(self, key, value):
                pass

        writer = gm._RateWriter(Ctx(), rates, np.array(method, dtype=object), keys)
        frame = pl.DataFrame(kernels, schema=["row", "row_id", "start", "end", "col"],
                             orient="row").sort("start", "row", "row_id")
        times = np.unique(frame["start"].to_numpy())
        cuts = np.sort(rng.choice(times, min(len(times), int(rng.integers(0, 8))),
                                  replace=False))
        starts = frame["start"].to_numpy()
        edges = [0, *np.searchsorted(starts, cuts).tolist(), frame.height]
        for a, b in zip(edges[:-1], edges[1:]):
            writer.add(frame[a:b])
        writer.finish()
        want = _rates_written_whole(kernels, writer.codes, writer.pv, writer.pair_metrics)
        assert set(got) == set(want), case
        assert writer.with_rates == sum(int(writer.codes[k[4]] > 0) for k in kernels)
        for key, (code, vals) in want.items():
            assert got[key] == (code, [vals[m] for m in writer.pair_metrics]), (case, key)
