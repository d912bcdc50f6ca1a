#!/usr/bin/env python3
"""Add GPU metrics samples (native form, as nsys 2023.4+ writes them) to a benchmark export.

    python benchmarks/add_gpu_metrics.py IN.sqlite OUT.sqlite --values 10000000

OUT is a copy of IN with `GPU_METRICS` (about VALUES rows: one per sample and metric),
`TARGET_INFO_GPU_METRICS` and the `GENERIC_EVENT_SOURCES/TYPES` rows they refer to. Each
device is sampled evenly over the span of its GPU work (the interval chosen so that the row
count comes out), with the metrics of an A100's "General Metrics" set; each sample's values
are what the sample-mixing model says they are (analysis/rate_model.py: the time-weighted
rates of the kernels and copies that ran in its period, a random rate per kernel name) plus
noise, rounded to integers as nsys exports them - the data the model is fitted on, at the
size of the issue's cost goal (10^7 samples).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

try:
    import nsys2prv  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nsys2prv.analysis import rate_model as rm
from nsys2prv.testing.synth_metrics import SOURCE_ID, type_id

METRICS = ["PCIe RX Throughput [Throughput %]", "PCIe TX Throughput [Throughput %]",
           "DRAM Read Bandwidth [Throughput %]", "DRAM Write Bandwidth [Throughput %]",
           "SMs Active [Throughput %]", "SM Issue [Throughput %]",
           "Tensor Active [Throughput %]", "GR Active [Throughput %]",
           "Compute Warps in Flight [Throughput %]",
           "Unallocated Warps in Active SMs [Throughput %]",
           "GPC Clock Frequency [MHz]", "SYS Clock Frequency [MHz]",
           "NVLink RX Throughput [Throughput %]", "NVLink TX Throughput [Throughput %]"]


def _activities(con: sqlite3.Connection) -> dict[int, tuple[np.ndarray, ...]]:
    """device -> (start, end, column) of its kernels (column: name id) and memory operations
    (column: one per kind after the names)."""
    out: dict[int, list] = {}
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    parts = [("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName")]
    parts += [(t, "-1") for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
              if t in have]
    for k, (table, name) in enumerate(parts):
        rows = np.array(con.execute(f"SELECT deviceId, start, end, {name} FROM {table} "
                                    "WHERE end > start").fetchall(), dtype=np.int64)
        if rows.size == 0:
            continue
        if name == "-1":
            rows[:, 3] = -1 - k
        for d in np.unique(rows[:, 0]):
            out.setdefault(int(d), []).append(rows[rows[:, 0] == d, 1:])
    return {d: np.concatenate(v) for d, v in out.items()}


def _rates(n_cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random per-column rates of each metric, shaped like real kernels (0-100 %, clocks in
    MHz)."""
    r = np.empty((n_cols, len(METRICS)))
    for m, name in enumerate(METRICS):
        if "Clock" in name:
            r[:, m] = rng.uniform(1100, 1410, n_cols)
        elif "NVLink" in name or "PCIe" in name:
            r[:, m] = rng.uniform(0, 8, n_cols)
        else:
            r[:, m] = rng.uniform(0, 45, n_cols)
    return r


def add(src: Path, dst: Path, values: int, seed: int = 1) -> dict:
    t0 = time.time()
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    acts = _activities(con)
    rng = np.random.default_rng(seed)
    M = len(METRICS)
    per_device = max(1, values // (M * max(1, len(acts))))
    tables = []
    for d, a in sorted(acts.items()):
        start, end, name = a[:, 0], a[:, 1], a[:, 2]
        lo, hi = int(start.min()), int(end.max())
        interval = max(1, (hi - lo) // per_device)
        times = lo + np.arange(per_device, dtype=np.int64) * interval
        times += rng.integers(0, max(1, interval // 20), per_device)  # jitter
        times = np.unique(times)
        keys, col = np.unique(name, return_inverse=True)
        per = rm.periods_of(times)
        ent = rm.entries(per, start, end, col, keys.size)
        rates = np.vstack([_rates(keys.size, rng), np.zeros((1, M))])
        rates[-1, [i for i, n in enumerate(METRICS) if "Clock" in n]] = 1200.0  # idle
        v = rm.predict(ent, rates, per.n) + rng.normal(0, 0.5, (per.n, M))
        v = np.clip(np.round(v), 0, None).astype(np.int64)
        tables.append(pa.table({
            "timestamp": np.repeat(times, M), "typeId": np.full(times.size * M, type_id(d)),
            "metricId": np.tile(np.arange(M, dtype=np.int64), times.size),
            "value": v.reshape(-1)}))
    con.execute("CREATE TABLE IF NOT EXISTS GENERIC_EVENT_SOURCES (sourceId INTEGER, "
                "data TEXT)")
    con.execute("CREATE TABLE IF NOT EXISTS GENERIC_EVENT_TYPES (typeId INTEGER, "
                "sourceId INTEGER, data TEXT)")
    con.execute("INSERT INTO GENERIC_EVENT_SOURCES VALUES (?, ?)", (SOURCE_ID, json.dumps(
        {"Name": "GpuMetrics", "TimeSource": "SessionNs", "SourceGroup": "Unknown"})))
    con.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, "
                "typeName TEXT, metricId INTEGER, metricName TEXT)")
    for d in sorted(acts):
        con.execute("INSERT INTO GENERIC_EVENT_TYPES VALUES (?, ?, ?)", (
            type_id(d), SOURCE_ID, json.dumps({"Name": "", "Fields": [
                {"Name": n} for n in METRICS]})))
        con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, ?, ?, ?)",
                        [(type_id(d), SOURCE_ID, "", i, n) for i, n in enumerate(METRICS)])
    con.commit()
    con.close()
    rows = sum(t.num_rows for t in tables)
    try:
        import adbc_driver_sqlite.dbapi as adbc

        with adbc.connect(str(dst)) as a:
            with a.cursor() as cur:
                for t in tables:
                    cur.adbc_ingest("GPU_METRICS", t, mode="create_append")
            a.commit()
    except ImportError:  # pragma: no cover - without ADBC: slower, same rows (Python ints:
        # sqlite3 would store numpy integers as blobs)
        con = sqlite3.connect(dst)
        con.execute("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, "
                    "metricId INTEGER, value INTEGER)")
        for t in tables:
            con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)",
                            zip(*(t[c].to_pylist() for c in t.column_names)))
        con.commit()
        con.close()
    return {"values": rows, "devices": len(acts), "metrics": M,
            "seconds": round(time.time() - t0, 1), "bytes": dst.stat().st_size}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--values", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    print(json.dumps(add(Path(a.input), Path(a.output), a.values, a.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
