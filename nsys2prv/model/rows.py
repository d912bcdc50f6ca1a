"""Local timeline rows of one report: CPU threads and GPU streams, numbered as discovered.

Rows get final Paraver (task, thread) numbers only when every report is known (see
`resources.py`); until then records refer to these local ids. Discovery order follows the
data's rowid order, so the ids are deterministic for a given export.
"""

from __future__ import annotations

import polars as pl

CPU = "cpu"
GPU = "gpu"
METRICS = "metrics"  # one row per GPU for sampled device-wide metrics

_CPU_KEYS = ["pid", "tid"]
_GPU_KEYS = ["pid", "device", "context", "stream", "lane"]


class RowRegistry:
    """Assigns a small int per (pid, tid) thread and per (pid, device, context, stream)."""

    def __init__(self) -> None:
        self._cpu = pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "row": pl.Int32})
        self._gpu = pl.DataFrame(schema={"pid": pl.Int64, "device": pl.Int64,
                                         "context": pl.Int64, "stream": pl.Int64,
                                         "lane": pl.Int64, "row": pl.Int32})
        self._metrics = pl.DataFrame(schema={"pid": pl.Int64, "device": pl.Int64,
                                             "row": pl.Int32})
        self.count = 0
        self._evidence: set[int] = set()  # CPU rows seen in a record that shows the thread runs

    def _assign(self, table: pl.DataFrame, keys: list[str], df: pl.DataFrame
                ) -> tuple[pl.DataFrame, pl.Series]:
        probe = df.select([pl.col(k).fill_null(-1).cast(pl.Int64) for k in keys])
        rows = probe.join(table, on=keys, how="left", maintain_order="left")["row"]
        if rows.null_count() == 0:  # every key known already (all chunks after the first)
            return table, rows
        new = (probe.unique(maintain_order=True)
               .join(table, on=keys, how="anti", nulls_equal=True))
        if new.height:
            new = new.with_columns(
                pl.int_range(self.count, self.count + new.height, dtype=pl.Int32).alias("row"))
            self.count += new.height
            table = pl.concat([table, new], how="vertical")
        rows = probe.join(table, on=keys, how="left", maintain_order="left")["row"]
        return table, rows

    def cpu_rows(self, df: pl.DataFrame, runtime_only: bool = False) -> pl.Series:
        """Row id of each (pid, tid) in `df`, adding unseen threads.

        `runtime_only`: the records are OS-runtime calls, which say nothing about whether the
        thread runs between them (see `default_states`); every other caller's records do."""
        self._cpu, rows = self._assign(self._cpu, _CPU_KEYS, df)
        if not runtime_only:
            self._evidence.update(rows.unique().drop_nulls().to_list())
        return rows

    def evidence_rows(self) -> set[int]:
        """CPU rows with a record other than an OS-runtime call (MPI, CUDA, NVTX, scheduling,
        ...)."""
        return set(self._evidence)

    def gpu_rows(self, df: pl.DataFrame) -> pl.Series:
        """Row id of each (pid, device, context, stream[, lane]) in `df`, adding new ones.

        Lane 0 is the stream itself; further lanes hold activities that overlap earlier
        ones on the same stream (see pipeline/tiling.py)."""
        if "lane" not in df.columns:
            df = df.with_columns(pl.lit(0, pl.Int64).alias("lane"))
        self._gpu, rows = self._assign(self._gpu, _GPU_KEYS, df)
        return rows

    def metric_rows(self, df: pl.DataFrame) -> pl.Series:
        """Row id of the metrics row of each (pid, device) in `df` (GPU metrics samples)."""
        self._metrics, rows = self._assign(self._metrics, ["pid", "device"], df)
        return rows

    def gpu_keys(self, rows: pl.Series) -> pl.DataFrame:
        """(pid, device, context, stream) of GPU row ids."""
        return pl.DataFrame({"row": rows.cast(pl.Int32)}).join(
            self._gpu, on="row", how="left", maintain_order="left")

    def lookup_gpu(self, df: pl.DataFrame) -> pl.Series:
        """Row id of existing streams only (null where the stream has no row)."""
        df = df.with_columns(pl.lit(0, pl.Int64).alias("lane"))
        probe = df.select([pl.col(k).fill_null(-1).cast(pl.Int64) for k in _GPU_KEYS])
        return probe.join(self._gpu, on=_GPU_KEYS, how="left", maintain_order="left")["row"]

    def table(self) -> pl.DataFrame:
        """All rows: row, kind, pid, tid, device, context, stream, lane (nulls where n/a)."""
        cpu = self._cpu.with_columns(pl.lit(CPU).alias("kind"),
                                     pl.lit(None, pl.Int64).alias("device"),
                                     pl.lit(None, pl.Int64).alias("context"),
                                     pl.lit(None, pl.Int64).alias("stream"),
                                     pl.lit(None, pl.Int64).alias("lane"))
        gpu = self._gpu.with_columns(pl.lit(GPU).alias("kind"),
                                     pl.lit(None, pl.Int64).alias("tid"))
        metrics = self._metrics.with_columns(
            pl.lit(METRICS).alias("kind"), pl.lit(None, pl.Int64).alias("tid"),
            pl.lit(None, pl.Int64).alias("context"), pl.lit(None, pl.Int64).alias("stream"),
            pl.lit(None, pl.Int64).alias("lane"))
        cols = ["row", "kind", "pid", "tid", "device", "context", "stream", "lane"]
        return pl.concat([cpu.select(cols), gpu.select(cols), metrics.select(cols)],
                         how="vertical").sort("row")


class RowSpans:
    """First and last record time per row (a CPU thread exists from its first record)."""

    def __init__(self) -> None:
        self._parts: list[pl.DataFrame] = []

    def add(self, rows: pl.Series, start: pl.Series, end: pl.Series | None = None) -> None:
        end = start if end is None else end
        df = pl.DataFrame({"row": rows, "first": start, "last": end.fill_null(start)})
        self._parts.append(df.group_by("row").agg(pl.col("first").min(), pl.col("last").max()))
        if len(self._parts) > 64:
            self._parts = [self.table()]

    def table(self) -> pl.DataFrame:
        if not self._parts:
            return pl.DataFrame(schema={"row": pl.Int32, "first": pl.Int64, "last": pl.Int64})
        return (pl.concat(self._parts, how="vertical").group_by("row")
                .agg(pl.col("first").min(), pl.col("last").max()).sort("row"))


def default_states(row_table: pl.DataFrame, evidence: set[int]) -> pl.DataFrame:
    """(row, default): the state of each row where nothing was recorded, between its first and
    last record.

    GPU and metrics rows: Idle. CPU threads: Running (POP's useful computation) only where the
    data says the thread is the application's: the main thread (tid = pid) and threads with a
    record other than an OS-runtime call (MPI, CUDA, NVTX, OpenACC, scheduling, ...). A thread
    known only through OS-runtime calls (Open MPI's progress threads, nsys's own) is Idle
    between its calls: nsys records nothing that says it computes there. A row without a
    thread (tid 0: OS-runtime calls recorded with no thread id) is Not created: it is no
    thread at all. Without this, POP's tools count such rows as useful work."""
    from ..paraver import registry as reg

    c = pl.col
    tid = c("tid").fill_null(-1)
    return row_table.select(
        c("row").cast(pl.Int32),
        pl.when(c("kind") != CPU).then(pl.lit(reg.STATE_IDLE))
        .when(tid <= 0).then(pl.lit(reg.STATE_NOT_CREATED))
        .when((tid == c("pid")) | c("row").is_in(sorted(evidence))).then(pl.lit(reg.STATE_RUNNING))
        .otherwise(pl.lit(reg.STATE_IDLE)).cast(pl.Int8).alias("default"))
