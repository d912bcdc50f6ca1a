"""GPU metrics samples (`nsys --gpu-metrics-devices`), in both export forms, as one long table.

* Native form (nsys 2023.x and later): `GPU_METRICS(timestamp, typeId, metricId, value)`, one
  row per (sample, metric), names in `TARGET_INFO_GPU_METRICS(typeId, metricId, metricName)`.
  `metricId` is "not assumed to be stable", so metrics are identified by (typeId, metricId)
  inside one export and by name across exports.
* JSON form (nsys 2021.x-2022.x): `GENERIC_EVENTS(rawTimestamp, timestamp, typeId, data)`, one
  row per sample with every metric as a JSON key; the GPU-metrics types are the
  `GENERIC_EVENT_TYPES` whose source is named "GpuMetrics" (their "Fields" list the metric
  names). `timestamp` is null in the exports we have; the source's "TimeSource" is
  "SessionNs", so `rawTimestamp` is already on the session timeline.

When an export has both (2023.x writes the same samples twice), the native form is read.

The GPU is `typeId & 0xFF` in both forms (NVIDIA's gpu_metric_util_map recipe does the same):
the nsys GPU id of `TARGET_INFO_GPU.id`, which is *not* necessarily the CUDA device ordinal a
process sees (CUDA_VISIBLE_DEVICES); `cuda_devices` gives that mapping where the export has
it. Normalised chunk columns: row_id, time, gpu, metric (index into `metric_table`), value
(float, as exported).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import polars as pl

from ..paraver.registry.gpu_metrics import normalise
from ..report.report import Report
from .base import DEFAULT_CHUNK_ROWS, Column, has_rows, read_chunks

KIND = "gpu_metrics"
NATIVE_TABLE = "GPU_METRICS"
NAMES_TABLE = "TARGET_INFO_GPU_METRICS"
GENERIC_TABLE = "GENERIC_EVENTS"
GENERIC_TYPES = "GENERIC_EVENT_TYPES"
GENERIC_SOURCES = "GENERIC_EVENT_SOURCES"
GPU_SOURCE_NAME = "GpuMetrics"
GPU_ID_MASK = 0xFF

METRIC_SCHEMA = {"metric": pl.Int64, "type_id": pl.Int64, "metric_id": pl.Int64,
                 "name": pl.Utf8, "key": pl.Utf8, "factor": pl.Float64}
CHUNK_SCHEMA = {"row_id": pl.Int64, "time": pl.Int64, "gpu": pl.Int64, "metric": pl.Int64,
                "value": pl.Float64}

NATIVE_COLUMNS = (
    Column("time", ("timestamp",)),
    Column("type_id", ("typeId",)),
    Column("gpu", ("typeId",), transform=f"({{c}} & {GPU_ID_MASK})"),
    Column("metric_id", ("metricId",)),
    Column("value", ("value",), dtype=pl.Float64),
)


def form(report: Report) -> str | None:
    """"native", "json" or None (no GPU metrics in this export)."""
    if has_rows(report, NATIVE_TABLE) and report.table(NAMES_TABLE) is not None:
        return "native"
    if _json_types(report):
        return "json"
    return None


def available(report: Report) -> bool:
    return form(report) is not None


def _json_types(report: Report) -> dict[int, tuple[list[str], bool]]:
    """typeId -> (metric names, rawTimestamp is session time) of the GPU-metrics types."""
    types, sources = report.table(GENERIC_TYPES), report.table(GENERIC_SOURCES)
    if types is None or sources is None or not has_rows(report, GENERIC_TABLE):
        return {}
    session_sources = {}
    for sid, data in report.db.rows(f'SELECT sourceId, data FROM "{sources}"'):
        info = _json(data)
        if info.get("Name") == GPU_SOURCE_NAME:
            session_sources[sid] = info.get("TimeSource") == "SessionNs"
    out = {}
    for tid, sid, data in report.db.rows(f'SELECT typeId, sourceId, data FROM "{types}"'):
        if sid in session_sources:
            fields = [f.get("Name") for f in _json(data).get("Fields", []) if f.get("Name")]
            out[int(tid)] = (fields, session_sources[sid])
    return out


def _json(text: str | None) -> dict:
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def metric_table(report: Report) -> pl.DataFrame:
    """One row per (typeId, metric) of the export: dense `metric` index, exported name, the
    trace-wide key and the factor to the key's unit (see registry.gpu_metrics.normalise)."""
    kind = form(report)
    rows: list[tuple[int, int, str]] = []
    if kind == "native":
        real = report.table(NAMES_TABLE)
        rows = [(int(t), int(m), str(n)) for t, m, n in report.db.rows(
            f'SELECT DISTINCT typeId, metricId, metricName FROM "{real}" '
            "WHERE typeId IS NOT NULL AND metricId IS NOT NULL AND metricName IS NOT NULL "
            "ORDER BY typeId, metricId")]
    elif kind == "json":
        rows = [(t, i, n) for t, (names, _) in sorted(_json_types(report).items())
                for i, n in enumerate(names)]
    if not rows:
        return pl.DataFrame(schema=METRIC_SCHEMA)
    keys = [normalise(n) for _, _, n in rows]
    return pl.DataFrame({
        "metric": list(range(len(rows))), "type_id": [r[0] for r in rows],
        "metric_id": [r[1] for r in rows], "name": [r[2] for r in rows],
        "key": [k for k, _ in keys], "factor": [f for _, f in keys]}, schema=METRIC_SCHEMA)


def read(report: Report, chunk_rows: int = DEFAULT_CHUNK_ROWS,
         metrics: pl.DataFrame | None = None) -> Iterator[pl.DataFrame]:
    """Samples in rowid chunks, one row per (sample, metric); (typeId, metric) pairs missing
    from `metric_table` are dropped (counted by the caller as rows it did not get)."""
    metrics = metric_table(report) if metrics is None else metrics
    ids = metrics.select("type_id", "metric_id", "metric")
    kind = form(report)
    if kind == "native":
        for chunk in read_chunks(report, NATIVE_TABLE, NATIVE_COLUMNS, chunk_rows):
            yield chunk.join(ids, on=["type_id", "metric_id"], how="inner",
                             maintain_order="left").select(list(CHUNK_SCHEMA))
    elif kind == "json":
        yield from _read_json(report, chunk_rows, metrics)


def _read_json(report: Report, chunk_rows: int, metrics: pl.DataFrame
               ) -> Iterator[pl.DataFrame]:
    """GENERIC_EVENTS rows unpivoted by SQLite's json_each (values may be JSON strings or
    numbers), in rowid ranges sized so that a chunk holds about `chunk_rows` samples."""
    types = _json_types(report)
    table = report.table(GENERIC_TABLE)
    cols = set(report.db.columns(table))
    names = metrics.select("type_id", pl.col("name").alias("key_name"), "metric")
    per_row = max(1, max(len(f) for f, _ in types.values()))
    step = max(1, chunk_rows // per_row)
    lo, hi = report.db.rows(f'SELECT min(rowid), max(rowid) FROM "{table}"')[0]
    if lo is None:
        return
    session = [t for t, (_, s) in types.items() if s]
    other = [t for t, (_, s) in types.items() if not s]
    ts = '"timestamp"' if "timestamp" in cols else "NULL"
    raw = '"rawTimestamp"' if "rawTimestamp" in cols else "NULL"
    # rawTimestamp is a session time only for sources that say so
    time = (f"CASE WHEN g.typeId IN ({','.join(map(str, session)) or 'NULL'}) "
            f"THEN coalesce(g.{ts}, g.{raw}) ELSE g.{ts} END")
    wanted = ",".join(map(str, session + other))
    schema = {"row_id": pl.Int64, "time": pl.Int64, "type_id": pl.Int64, "gpu": pl.Int64,
              "key_name": pl.Utf8, "value": pl.Float64}
    start = lo
    while start <= hi:
        stop = start + step
        sql = (f"SELECT g.rowid AS row_id, {time} AS time, g.typeId AS type_id, "
               f"g.typeId & {GPU_ID_MASK} AS gpu, j.key AS key_name, "
               f"CAST(j.value AS REAL) AS value "
               f'FROM "{table}" g, json_each(g.data) j '
               f"WHERE g.rowid >= {start} AND g.rowid < {stop} AND g.typeId IN ({wanted}) "
               "AND j.type IN ('text', 'integer', 'real')")
        df = report.db.frame(sql, schema)
        if df.height:
            yield df.join(names, on=["type_id", "key_name"], how="inner",
                          maintain_order="left").select(list(CHUNK_SCHEMA))
        start = stop


def row_count(report: Report) -> int:
    """Number of (sample, metric) values in the export (for tests and summaries)."""
    kind = form(report)
    if kind == "native":
        return report.db.count(report.table(NATIVE_TABLE))
    if kind == "json":
        types = _json_types(report)
        table = report.table(GENERIC_TABLE)
        return int(report.db.scalar(
            f'SELECT count(*) FROM "{table}" g, json_each(g.data) j '
            f"WHERE g.typeId IN ({','.join(map(str, types))})") or 0)
    return 0


# -- which processes use which GPU ---------------------------------------------------------

ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                   "CUPTI_ACTIVITY_KIND_MEMSET")
CONTEXT_TABLE = "TARGET_INFO_CUDA_CONTEXT_INFO"
CUDA_DEVICE_TABLE = "TARGET_INFO_CUDA_DEVICE"
ACTIVITY_SCHEMA = {"pid": pl.Int64, "device": pl.Int64, "activities": pl.Int64}


def device_activity(report: Report) -> pl.DataFrame:
    """(pid, CUDA device, number of kernels + memcpy + memset) per process and device, plus
    the devices a process holds a CUDA context on (0 activities). SQLite aggregates."""
    rows: list[tuple] = []
    for logical in ACTIVITY_TABLES:
        real = report.table(logical)
        if real is None or not {"globalPid", "deviceId"} <= set(report.db.columns(real)):
            continue
        rows += report.db.rows(f'SELECT ("globalPid" >> 24) & 16777215, "deviceId", count(*) '
                               f'FROM "{real}" GROUP BY 1, 2')
    real = report.table(CONTEXT_TABLE)
    if real is not None and {"processId", "deviceId"} <= set(report.db.columns(real)):
        rows += [(p, d, 0) for p, d in report.db.rows(
            f'SELECT DISTINCT "processId", "deviceId" FROM "{real}"')]
    df = pl.DataFrame(rows, schema=ACTIVITY_SCHEMA, orient="row")
    return (df.drop_nulls(["pid", "device"]).group_by("pid", "device")
            .agg(pl.col("activities").sum()).sort("pid", "device"))


def cuda_devices(report: Report) -> pl.DataFrame:
    """(pid, device = CUDA ordinal in that process, gpu = nsys GPU id) from
    TARGET_INFO_CUDA_DEVICE (nsys 2025.1+); empty when the export does not have it."""
    schema = {"pid": pl.Int64, "device": pl.Int64, "gpu": pl.Int64}
    real = report.table(CUDA_DEVICE_TABLE)
    if real is None or not {"gpuId", "cudaId", "pid"} <= set(report.db.columns(real)):
        return pl.DataFrame(schema=schema)
    rows = report.db.rows(f'SELECT DISTINCT "pid", "cudaId", "gpuId" FROM "{real}" '
                          'WHERE "gpuId" IS NOT NULL')
    return pl.DataFrame(rows, schema=schema, orient="row").unique(
        ["pid", "device"], keep="first", maintain_order=True)
