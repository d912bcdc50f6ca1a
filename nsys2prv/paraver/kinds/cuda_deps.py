"""Dependency lines inside one report: what a GPU stream or a host thread waited for.

* **Stream waits** (cudaStreamWaitEvent: SYNCHRONIZATION records with a stream and an event):
  a line from the end of the last GPU work submitted to the recording stream before the event
  record to the start of the first work submitted to the waiting stream after the wait. The
  record is the latest CUDA_EVENT record of that event (same process) before the wait; where
  none is traced (nsys records them only with --cuda-event-trace), it is inferred: the last
  cudaEventRecord call of the waiting thread before the wait, and as its work the last work
  that thread submitted before that call (PyTorch and most libraries record an event on the
  stream they have just launched to, then make another stream wait for it). Inferred lines
  have their own tag.
* **GPU -> host** (stream, event, context/device synchronisation): a line from the end of the
  work the call waited for to the end of the blocking on the calling thread: the last work of
  the stream (stream sync), of any stream of the context (context/device sync) ending by
  then, or the work of the event's record (event sync, and event queries that found the
  event complete; a query that found it pending gets none).

"Submitted" is the start of the CUDA call that launched the work (its correlation id), or the
work's own start where no call matches. Every record is counted: drawn, or not drawn with the
reason, so the counts add up to the SYNCHRONIZATION table's rows.

Memory: the synchronisation records and event records are held (they are few); the GPU work is
read chunk by chunk, each chunk matched against every query with sorted as-of joins and only
the best candidate so far kept per query, so nothing grows with the work.
"""

from __future__ import annotations

import polars as pl

from ...report.report import Report
from ...sources import cuda_sync as source
from ...sources import gpu_work
from .. import records as R
from ..registry import deps as dreg
from . import cuda_api
from .base import Context, Translator, push

SRC_OF_TABLE = {gpu_work.KERNEL: R.SRC_KERNEL, gpu_work.MEMCPY: R.SRC_MEMCPY,
                gpu_work.MEMSET: R.SRC_MEMSET, gpu_work.GRAPH: R.SRC_GRAPH}
# A context belongs to one device, and stream ids are unique in a context: the device id is
# left out of the keys because synchronisation records do not always carry the device of the
# work (nsysai_mfu2gpu: the second process's records say device 0, its kernels device 1).
_CTX = ["pid", "context"]
_STREAM = ["pid", "context", "stream"]


class StreamRows:
    """(pid, context, stream) -> the stream's GPU row (lane 0), for records whose device id
    may differ from that of the stream's work; null where the stream has no row."""

    def __init__(self, ctx: Context) -> None:
        c = pl.col
        table = ctx.rows.table()
        self._rows = table.filter((c("kind") == "gpu") & (c("lane") == 0)).sort("row").unique(
            _STREAM, keep="first", maintain_order=True).select(
            *[c(k).cast(pl.Int64) for k in _STREAM], c("row").cast(pl.Int32))

    def __call__(self, df: pl.DataFrame) -> pl.Series:
        probe = df.select([pl.col(k).fill_null(-1).cast(pl.Int64) for k in _STREAM])
        return probe.join(self._rows, on=_STREAM, how="left", maintain_order="left")["row"]

# count keys (the summary): every stream wait and every host sync lands in exactly one
WAITS = "stream waits (cudaStreamWaitEvent records)"
WAIT_LINES = "stream wait lines"
WAIT_LINES_INFERRED = "stream wait lines (event record inferred)"
SYNCS = "host synchronisations (stream/event/context sync records)"
SYNC_LINES = "host sync lines"


def _not_drawn(what: str, why: str) -> str:
    return f"{what} without a line: {why}"


class RunningAsOf:
    """For fixed queries (qid, key columns, t): the work item on the same key whose time is
    the latest <= t (`backward`) or the earliest >= t (forward), over items given chunk by
    chunk. Ties of time go to the item with the larger (backward) or smaller `ord`, so the
    answer does not depend on how the items are chunked."""

    def __init__(self, queries: pl.DataFrame, by: list[str], time: str, backward: bool,
                 payload: list[str]) -> None:
        self.by, self.time, self.backward, self.payload = by, time, backward, payload
        self.queries = queries.select("qid", *by, "t").filter(
            pl.all_horizontal(pl.col(k).is_not_null() for k in [*by, "t"])).sort("t")
        # the keys that have queries: items on other keys are dropped before matching
        self.keys = self.queries.select(by).unique()
        self.best: pl.DataFrame | None = None

    def update(self, items: pl.DataFrame) -> None:
        """Match the queries against `items` (by columns, `time`, `ord`, payload), sorted by
        (`time`, `ord`): an as-of join takes the last item of equal times (backward) or the
        first (forward), which is the tie rule."""
        if self.queries.height == 0 or items.height == 0:
            return
        c = pl.col
        right = items.join(self.keys, on=self.by, how="semi", maintain_order="left").select(
            *self.by, c(self.time).alias("bt"), "ord",
            *[c(p).alias(f"w_{p}") for p in self.payload])
        if right.height == 0:
            return
        hit = self.queries.join_asof(
            right, left_on="t", right_on="bt", by=self.by,
            strategy="backward" if self.backward else "forward", check_sortedness=False)
        hit = hit.filter(c("bt").is_not_null()).select(
            "qid", "bt", "ord", *[f"w_{p}" for p in self.payload])
        if self.best is None or self.best.height == 0:
            self.best = hit
            return
        both = pl.concat([self.best, hit], how="vertical")
        order = [self.backward] * 2  # backward: the latest first; forward: the earliest
        self.best = both.sort(["qid", "bt", "ord"], descending=[False, *order]).unique(
            "qid", keep="first", maintain_order=True)

    def result(self) -> pl.DataFrame:
        """qid and the payload (w_<name>) of each query's match (queries without one are
        absent)."""
        if self.best is None:
            return _empty_found()
        return self.best


def _syncs(report: Report, ctx: Context, index: cuda_api.CorrelationIndex,
           stream_rows: StreamRows) -> pl.DataFrame:
    """Every synchronisation record: class, times, waiting stream row, calling thread row."""
    c = pl.col
    parts = []
    for chunk in source.read(report, ctx.chunk_rows):
        df = chunk.filter(c("start").is_not_null() & c("end").is_not_null()).with_columns(
            pl.max_horizontal("start", "end").alias("end"),
            source.dependency_class(c("stream"), c("event")).alias("cls"))
        df = index.join(df, how="left")
        parts.append(df.select("row_id", "cls", "start", "end", "pid", "device", "context",
                               "stream", "event", "api_row",
                               stream_rows(df).alias("stream_row")))
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts, how="vertical").with_columns(c("row_id").alias("qid"))


def _traced_records(report: Report, ctx: Context, index: cuda_api.CorrelationIndex,
                    stream_rows: StreamRows) -> pl.DataFrame:
    """CUDA_EVENT records: (pid, event, time, stream row) with time = the record's timestamp,
    else the start of its cudaEventRecord call."""
    c = pl.col
    parts = []
    for chunk in source.read_events(report, ctx.chunk_rows):
        df = index.join(chunk, how="left")
        df = df.with_columns(pl.coalesce("timestamp", "api_start").alias("t"),
                             stream_rows(df).alias("rec_row"))
        parts.append(df.filter(c("t").is_not_null() & c("event").is_not_null()).select(
            "pid", "event", "t", "rec_row", c("row_id").alias("rec_id")))
    if not parts:
        return pl.DataFrame(schema={"pid": pl.Int64, "event": pl.Int64, "t": pl.Int64,
                                    "rec_row": pl.Int32, "rec_id": pl.Int64})
    return pl.concat(parts, how="vertical").sort("t", "rec_id")


def _record_calls(report: Report, ctx: Context) -> pl.DataFrame:
    """cudaEventRecord calls: (thread row, start)."""
    parts = [chunk.filter(pl.col("start").is_not_null()).select(
        ctx.rows.cpu_rows(chunk.filter(pl.col("start").is_not_null())).alias("api_row"),
        "start") for chunk in source.read_record_calls(report, ctx.chunk_rows)]
    if not parts:
        return pl.DataFrame(schema={"api_row": pl.Int32, "start": pl.Int64})
    return pl.concat(parts, how="vertical").sort("start")


def _records_of(waits: pl.DataFrame, traced: pl.DataFrame, calls: pl.DataFrame
                ) -> pl.DataFrame:
    """The record each wait (or event sync) waited for: qid, t_rec, rec_row (the recording
    stream's row; null when inferred), rec_thread (the recording thread's row, inferred
    only), inferred."""
    c = pl.col
    q = waits.select("qid", "pid", "event", "api_row", c("start").alias("t")).sort("t")
    exact = q.join_asof(traced.rename({"t": "t_rec"}), left_on="t", right_on="t_rec",
                        by=["pid", "event"], strategy="backward", check_sortedness=False)
    exact = exact.filter(c("rec_id").is_not_null()).select(
        "qid", c("t_rec"), "rec_row", pl.lit(None, pl.Int32).alias("rec_thread"),
        pl.lit(False).alias("inferred"))
    rest = q.join(exact.select("qid"), on="qid", how="anti").filter(c("api_row").is_not_null())
    guessed = rest.join_asof(calls.rename({"start": "t_rec"}), left_on="t", right_on="t_rec",
                             by="api_row", strategy="backward", check_sortedness=False)
    guessed = guessed.filter(c("t_rec").is_not_null()).select(
        "qid", "t_rec", pl.lit(None, pl.Int32).alias("rec_row"),
        c("api_row").cast(pl.Int32).alias("rec_thread"), pl.lit(True).alias("inferred"))
    return pl.concat([exact.with_columns(c("rec_row").cast(pl.Int32)), guessed],
                     how="vertical")


def _work_chunks(report: Report, ctx: Context, index: cuda_api.CorrelationIndex):
    """GPU work of the translated kinds: row, start, end, submitted, launching thread row,
    context keys, ord = src << 40 | rowid, src, row_id."""
    c = pl.col
    kinds = None if getattr(ctx.options, "kinds", None) is None else set(ctx.options.kinds)
    src = pl.col("table").replace_strict(SRC_OF_TABLE, return_dtype=pl.Int64)
    for chunk in gpu_work.read(report, ctx.chunk_rows, kinds):
        df = chunk.filter(c("start").is_not_null() & c("end").is_not_null())
        df = df.with_columns(ctx.rows.lookup_gpu(df).alias("row"),
                             pl.max_horizontal("start", "end").alias("end"))
        df = df.filter(c("row").is_not_null())
        if df.height == 0:
            continue
        df = index.join(df, how="left")
        yield df.with_columns(src.alias("src")).select(
            "row", "start", "end", *_CTX, "api_row",
            pl.coalesce("api_start", "start").alias("submitted"),
            (c("src") * R.ORD_LIMIT + c("row_id")).alias("ord"), "src", "row_id")


def translate(report: Report, ctx: Context) -> None:
    index = cuda_api.index(ctx)
    stream_rows = StreamRows(ctx)
    syncs = _syncs(report, ctx, index, stream_rows)
    if syncs.height == 0:
        return
    c = pl.col
    waits = syncs.filter(c("cls") == source.STREAM_WAIT)
    event_syncs = syncs.filter(c("cls") == source.EVENT_SYNC)
    needs_record = pl.concat([waits, event_syncs], how="vertical")
    records = pl.DataFrame(schema={"qid": pl.Int64, "t_rec": pl.Int64, "rec_row": pl.Int32,
                                   "rec_thread": pl.Int32, "inferred": pl.Boolean})
    if needs_record.height:
        calls = _record_calls(report, ctx) if index.height else pl.DataFrame(
            schema={"api_row": pl.Int32, "start": pl.Int64})
        records = _records_of(needs_record,
                              _traced_records(report, ctx, index, stream_rows), calls)
    payload = ["row", "start", "end", "src", "row_id"]
    # where each query looks: (queries, by, time of the work, backward)
    exact = records.filter(~c("inferred"))
    guessed = records.filter(c("inferred"))
    finders = {
        "record": (exact.select("qid", c("rec_row").alias("row"), c("t_rec").alias("t")),
                   ["row"], "submitted", True),
        "record_inferred": (guessed.select("qid", c("rec_thread").alias("api_row"),
                                           c("t_rec").alias("t")),
                            ["api_row"], "submitted", True),
        "after_wait": (waits.select("qid", c("stream_row").alias("row"), c("start").alias("t")),
                       ["row"], "submitted", False),
        "stream_sync": (syncs.filter(c("cls") == source.STREAM_SYNC).select(
            "qid", c("stream_row").alias("row"), c("end").alias("t")), ["row"], "end", True),
        "context_sync": (syncs.filter(c("cls") == source.CONTEXT_SYNC).select(
            "qid", *_CTX, c("end").alias("t")), _CTX, "end", True),
    }
    matchers = {k: RunningAsOf(q, by, time, backward, payload)
                for k, (q, by, time, backward) in finders.items() if q.height}
    if matchers:
        times = sorted({m.time for m in matchers.values()})
        for work in _work_chunks(report, ctx, index):
            for time in times:  # one sort per time column, shared by its matchers
                ordered = work.sort(time, "ord")
                for m in matchers.values():
                    if m.time == time:
                        m.update(ordered)
    found = {k: m.result() for k, m in matchers.items()}
    _stream_wait_lines(ctx, waits, records, found)
    _host_sync_lines(ctx, syncs.filter(c("cls") != source.STREAM_WAIT), records, found)


def _empty_found() -> pl.DataFrame:
    return pl.DataFrame(schema={"qid": pl.Int64, "bt": pl.Int64, "ord": pl.Int64,
                                "w_row": pl.Int32, "w_start": pl.Int64, "w_end": pl.Int64,
                                "w_src": pl.Int64, "w_row_id": pl.Int64})


def _sources(records: pl.DataFrame, found: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """qid -> the work a record stands for (s_row, s_end), and whether it was inferred."""
    c = pl.col
    parts = []
    for key, inferred in (("record", False), ("record_inferred", True)):
        f = found.get(key, _empty_found())
        parts.append(f.select("qid", c("w_row").cast(pl.Int32).alias("s_row"),
                              c("w_end").alias("s_end"), pl.lit(inferred).alias("inferred")))
    return pl.concat(parts, how="vertical")


def _count_reasons(ctx: Context, what: str, df: pl.DataFrame, reasons: list[tuple[str, pl.Expr]]
                   ) -> pl.DataFrame:
    """Counts each row under the first reason that holds; returns the rows none holds."""
    for why, expr in reasons:
        hit = df.select(expr.fill_null(True).sum()).item()
        if hit:
            ctx.count(_not_drawn(what, why), hit)
        df = df.filter(~expr.fill_null(True))
    return df


def _stream_wait_lines(ctx: Context, waits: pl.DataFrame, records: pl.DataFrame,
                       found: dict[str, pl.DataFrame]) -> None:
    if waits.height == 0:
        return
    c = pl.col
    ctx.count(WAITS, waits.height)
    after = found.get("after_wait", _empty_found())
    df = waits.select("qid", "stream_row").join(
        records.select("qid", "inferred").rename({"inferred": "has_inferred"}), on="qid",
        how="left").join(_sources(records, found), on="qid", how="left").join(
        after.select("qid", c("w_row").cast(pl.Int32).alias("r_row"),
                     c("w_start").alias("r_start"), c("w_src").alias("src"),
                     c("w_row_id").alias("row_id")), on="qid", how="left").sort("qid")
    df = _count_reasons(ctx, "stream waits", df, [
        ("the waiting stream has no work in the trace", c("stream_row").is_null()),
        ("no record of the event (none traced, no cudaEventRecord call before the wait on "
         "its thread)", c("has_inferred").is_null()),
        ("no GPU work submitted before the event record", c("s_end").is_null()),
        ("no GPU work submitted to the waiting stream after the wait", c("r_start").is_null()),
        ("the event was recorded on the waiting stream itself (no cross-stream dependency)",
         c("s_row") == c("r_row")),
        ("the work after the wait started before the awaited work ended (inferred record "
         "wrong)", c("r_start") < c("s_end")),
    ])
    n_inf = df.select(c("inferred").sum()).item()
    if df.height - n_inf:
        ctx.count(WAIT_LINES, df.height - n_inf)
    if n_inf:
        ctx.count(WAIT_LINES_INFERRED, n_inf)
    tag = pl.when(c("inferred")).then(pl.lit(dreg.TAG_STREAM_WAIT_INFERRED)).otherwise(
        pl.lit(dreg.TAG_STREAM_WAIT))
    _lines(ctx, df, "s_end", "s_row", "r_start", "r_row", tag, c("src") + R.SRC_LAUNCH_OFFSET,
           c("row_id"))


def _host_sync_lines(ctx: Context, syncs: pl.DataFrame, records: pl.DataFrame,
                     found: dict[str, pl.DataFrame]) -> None:
    if syncs.height == 0:
        return
    c = pl.col
    ctx.count(SYNCS, syncs.height)
    direct = pl.concat([found.get(k, _empty_found()) for k in ("stream_sync", "context_sync")],
                       how="vertical").select("qid", c("w_row").cast(pl.Int32).alias("s_row"),
                                              c("w_end").alias("s_end"))
    via_record = _sources(records, found).drop("inferred")
    df = syncs.select("qid", "cls", "api_row", "stream_row", "start", "end").join(
        pl.concat([direct, via_record], how="vertical"), on="qid", how="left").join(
        records.select("qid", c("inferred").alias("rec")), on="qid", how="left").sort("qid")
    is_event = c("cls") == source.EVENT_SYNC
    df = _count_reasons(ctx, "host syncs", df, [
        ("no CUDA call", c("api_row").is_null()),
        ("the stream has no work in the trace",
         (c("cls") == source.STREAM_SYNC) & c("stream_row").is_null()),
        ("no record of the event", is_event & c("rec").is_null()),
        ("no GPU work before", c("s_end").is_null()),
        ("the work of the event's record ended after the call returned (an event query "
         "that found it pending or an inferred record on another stream)",
         c("s_end") > c("end")),
    ])
    if df.height:
        ctx.count(SYNC_LINES, df.height)
        waited = df.select((c("s_end") > c("start")).sum()).item()
        if waited:
            ctx.count("host sync lines from work still running when the call began", waited)
    _lines(ctx, df, "s_end", "s_row", "end", "api_row", pl.lit(dreg.TAG_HOST_SYNC),
           pl.lit(R.SRC_SYNC + R.SRC_LAUNCH_OFFSET), c("qid"))


def _lines(ctx: Context, df: pl.DataFrame, send_time: str, send_row: str, recv_time: str,
           recv_row: str, tag: pl.Expr, src: pl.Expr, ord_: pl.Expr) -> None:
    """Communication records of the lines in `df` (`src` - SRC_LAUNCH_OFFSET and `ord` name
    the receiving activity, so that the receiving end follows it to an overlap lane)."""
    if df.height == 0:
        return
    c = pl.col
    comms = df.select(R.columns({
        "time": c(send_time), "row": c(send_row), "kind": pl.lit(R.COMM), "phase": pl.lit(0),
        "sub": c("qid"), "src": src, "ord": ord_, "a": c(send_time), "b": c(recv_row),
        "c": c(recv_time), "d": c(recv_time), "e": pl.lit(0, pl.Int64), "f": tag}))
    push(ctx, [comms])


TRANSLATORS = (Translator("cuda_deps", 41, "dependency lines: stream waits and GPU -> host "
                          "synchronisation", source.available, translate),)
