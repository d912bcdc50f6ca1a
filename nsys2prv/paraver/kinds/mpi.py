"""MPI -> calls in Extrae's encoding and MPI states on the calling thread, collective and
point-to-point payloads, the end of MPI_Init as a clock sync point, and point-to-point
messages drawn as Paraver communications between ranks.

Per report, every send and receive is written to a side file with world ranks (peers in other
communicators are translated through MPI_COMMUNICATORS members) and the times of its call; an
immediate receive is completed by the wait/test that last touched its request handle. The
merge stage loads the side files of all reports and pairs sends with receives by
(communicator, source rank, destination rank, tag) in posting order, which is MPI's
non-overtaking rule, so messages between reports are matched exactly when every rank is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from ...report.report import Report
from ...sources import mpi as source
from .. import records as R
from ..registry import deps as dreg
from ..registry import mpi as mreg
from ._collectives import collective_lines, endpoint_rows, lines_to_records, match
from .base import REPORT_END, Context, Translator, fix_times, intervals, push, start_end

SRC_MPI = R.SRC_MPI
SRC_MPI_MESSAGE = R.SRC_MPI_MESSAGE
SIDE_FILE = "mpi_p2p.arrow"
ORD_STRIDE = 1 << 40  # ord = source table * stride + rowid: unique over the five tables
WORLD = "MPI_COMM_WORLD"
CALLS, COMMS = "mpi_calls", "mpi_communicators"
ROLE_NONE, ROLE_SEND, ROLE_RECV = 0, 1, 2
_INT64_MAX = (1 << 63) - 1

COLL_FILE = "mpi_collectives.arrow"
COLL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64, "comm": pl.Utf8, "comm_size": pl.Int64, "fname": pl.Utf8,
    "start": pl.Int64, "end": pl.Int64, "row": pl.Int32, "ord": pl.Int64}
SRC_COLLECTIVE_LINE = SRC_MPI + R.SRC_LAUNCH_OFFSET  # lines between collective calls
SIDE_SCHEMA: dict[str, pl.DataType] = {
    "role": pl.Int8, "rank": pl.Int64, "peer": pl.Int64, "comm": pl.Utf8, "tag": pl.Int64,
    "size": pl.Int64, "t_log": pl.Int64, "t_phys": pl.Int64, "row": pl.Int32, "ord": pl.Int64}


class _CallNames:
    """Per distinct function name (StringIds id or inline text), computed once: the local
    value id in "mpi_calls", Extrae's type and state, and the role in messages."""

    def __init__(self, ctx: Context, report: Report) -> None:
        self._ctx, self._report = ctx, report
        self._known: dict[str, tuple[int, int, int, int, bool, bool, str, bool]] = {}

    def annotate(self, df: pl.DataFrame) -> pl.DataFrame:
        c = pl.col
        df = df.with_columns(pl.when(c("name_id").is_not_null())
                             .then(pl.format("#{}", c("name_id")))
                             .otherwise(pl.format("${}", c("text").fill_null(""))).alias("key"))
        new = [k for k in df["key"].unique().to_list() if k not in self._known]
        if new:
            ids = [int(k[1:]) for k in new if k.startswith("#")]
            strings = dict(self._report.strings.filter(c("id").is_in(ids)).iter_rows())
            raw = [strings.get(int(k[1:])) if k.startswith("#") else k[1:] for k in new]
            names = [mreg.canonical_name(n) if n else "(unnamed)" for n in raw]
            local = self._ctx.names.intern(CALLS, pl.Series(names, dtype=pl.Utf8)).to_list()
            for k, n, v in zip(new, names, local):
                role = (ROLE_SEND if n in mreg.SEND_CALLS else
                        ROLE_RECV if n in mreg.RECV_CALLS else ROLE_NONE)
                self._known[k] = (v, mreg.call_type(n), mreg.call_state(n), role,
                                  n in mreg.IMMEDIATE_CALLS, n in mreg.INIT_CALLS, n,
                                  is_blocking_collective(n))
        keys = list(self._known)
        table = pl.DataFrame({
            "key": keys, "value": [self._known[k][0] for k in keys],
            "mtype": [self._known[k][1] for k in keys],
            "state": [self._known[k][2] for k in keys],
            "role": [self._known[k][3] for k in keys],
            "immediate": [self._known[k][4] for k in keys],
            "is_init": [self._known[k][5] for k in keys],
            "fname": [self._known[k][6] for k in keys],
            "blocking_coll": [self._known[k][7] for k in keys]},
            schema={"key": pl.Utf8, "value": pl.Int64, "mtype": pl.Int64, "state": pl.Int8,
                    "role": pl.Int8, "immediate": pl.Boolean, "is_init": pl.Boolean,
                    "fname": pl.Utf8, "blocking_coll": pl.Boolean})
        return df.join(table, on="key", how="left", maintain_order="left").drop("key")


def communicator_table(report: Report) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Communicators of the report and their member translation.

    Returns (comms, members): comms has one row per MPI_COMMUNICATORS row with `cid`, the
    trace-wide name `comm` (equal on every rank: MPI_COMM_WORLD, else built from the
    globally unique id or the group root's rank and id) and the creator's `local_rank`;
    members maps (cid, local rank) -> world rank. `members` text is read both ways nsys could
    mean it (list by local rank of world ranks, or list by world rank of local ranks): the
    reading in which the creating rank sits at its own local rank wins.
    """
    c = pl.col
    comms = source.communicators(report).with_row_index("cid").with_columns(
        c("cid").cast(pl.Int64))
    world = c("members").is_null() & c("group_root").is_null() & c("group_root_uid").is_null()
    name = (pl.when(world).then(pl.lit(WORLD))
            .when(c("comm_uid").is_not_null())
            .then(pl.format("communicator uid {} (size {})", c("comm_uid"), c("size")))
            .when(c("group_root").is_not_null() & c("group_root_uid").is_not_null())
            .then(pl.format("communicator {}:{} (size {})", c("group_root"),
                            c("group_root_uid"), c("size")))
            .otherwise(pl.lit(None, pl.Utf8)))
    comms = comms.with_columns(name.alias("comm"), world.alias("is_world"))
    lists = comms.filter(c("members").is_not_null()).select(
        "cid", "rank", "local_rank", "size",
        c("members").str.extract_all(r"-?\d+").cast(pl.List(pl.Int64)).alias("m"))
    by_local = (c("m").list.len() == c("size")) & (c("m").list.get(c("local_rank"),
                                                                    null_on_oob=True) == c("rank"))
    by_world = ~by_local & (c("m").list.get(c("rank"), null_on_oob=True) == c("local_rank"))
    exploded = lists.with_columns(by_local.alias("by_local"), by_world.alias("by_world"))\
        .filter(c("by_local") | c("by_world")).explode("m").with_columns(
            c("m").cum_count().over("cid").sub(1).cast(pl.Int64).alias("index"))
    members = exploded.select(
        "cid", pl.when(c("by_local")).then(c("index")).otherwise(c("m")).alias("local"),
        pl.when(c("by_local")).then(c("m")).otherwise(c("index")).alias("world")).filter(
            c("local") >= 0).unique(["cid", "local"], keep="first", maintain_order=True)
    return comms, members


def _resolve_communicators(df: pl.DataFrame, comms: pl.DataFrame) -> pl.DataFrame:
    """Adds cid/comm/is_world/comm_local_rank: the communicator row of each call's handle
    (latest created at or before the call, else the first one after: handles are reused)."""
    c = pl.col
    keyed = df.filter(c("comm_handle").is_not_null() & c("rank").is_not_null())
    rest = df.filter(c("comm_handle").is_null() | c("rank").is_null())
    right = comms.select("rank", "comm_handle", "timestamp", "cid").filter(
        c("timestamp").is_not_null()).sort("timestamp")
    extra = {"cid": pl.Int64}
    if keyed.height and right.height:
        keyed = keyed.with_columns(c("start").alias("_t")).sort("_t")
        back = keyed.join_asof(right, left_on="_t", right_on="timestamp",
                               by=["rank", "comm_handle"], strategy="backward",
                               check_sortedness=False)
        fwd = keyed.join_asof(right, left_on="_t", right_on="timestamp",
                              by=["rank", "comm_handle"], strategy="forward",
                              check_sortedness=False)
        keyed = keyed.with_columns(pl.coalesce(back["cid"], fwd["cid"]).alias("cid")).drop("_t")
    else:
        keyed = keyed.with_columns(pl.lit(None, pl.Int64).alias("cid"))
    # Handles without a timestamp row (never seen so far) are matched on the handle alone.
    untimed = comms.filter(c("timestamp").is_null()).unique(["rank", "comm_handle"],
                                                             keep="first")
    if untimed.height:
        keyed = keyed.join(untimed.select("rank", "comm_handle", c("cid").alias("_c2")),
                           on=["rank", "comm_handle"], how="left").with_columns(
            pl.coalesce("cid", "_c2").alias("cid")).drop("_c2")
    df = pl.concat([keyed, rest.with_columns(pl.lit(None, pl.Int64).alias("cid"))],
                   how="diagonal_relaxed").cast(extra)
    return df.join(comms.select("cid", "comm", "is_world",
                                c("local_rank").alias("comm_local_rank")),
                   on="cid", how="left")


def translate(report: Report, ctx: Context) -> None:
    c = pl.col
    names = _CallNames(ctx, report)
    ranks = source.process_ranks(report)
    fallback_rank = report.rank
    comms, members = communicator_table(report)
    last_wait_key: pl.DataFrame | None = None
    init_end: int | None = None
    p2p_parts: list[pl.DataFrame] = []
    wait_parts: list[pl.DataFrame] = []
    coll_parts: list[pl.DataFrame] = []
    sizes = comms.select("cid", c("size").alias("comm_size"))
    wait_keys = ["pid", "tid", "start", "end", "name_id"]
    for chunk in source.read(report, ctx.chunk_rows):
        df = fix_times(chunk, ctx, "MPI calls", open_end=REPORT_END)
        df = df.with_columns((c("source").cast(pl.Int64) * ORD_STRIDE + c("row_id"))
                             .alias("row_id"))
        # Waits/tests: one row per request; every row completes a request, one is the call.
        is_wait = c("source") == source.START_WAIT
        waits = df.filter(is_wait)
        if waits.height:
            wait_parts.append(waits.select("pid", "request", "start", "end"))
            calls = waits.unique(wait_keys, keep="first", maintain_order=True)
            if last_wait_key is not None:  # a call whose rows straddle two chunks
                calls = calls.join(last_wait_key, on=wait_keys, how="anti", nulls_equal=True)
            last_wait_key = waits.select(wait_keys).tail(1)
            df = pl.concat([df.filter(~is_wait), calls], how="vertical")
        if df.height == 0:
            continue
        df = names.annotate(df)
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"))
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("mpi_calls", df.height)
        inits = df.filter(c("is_init"))
        if inits.height:
            t = int(inits["end"].min())
            init_end = t if init_end is None else min(init_end, t)
        df = df.join(ranks, on="pid", how="left").with_columns(
            c("rank").fill_null(fallback_rank) if fallback_rank is not None else c("rank"))
        df = _resolve_communicators(df, comms)
        df = df.join(members.rename({"local": "remote_rank", "world": "peer_world"}),
                     on=["cid", "remote_rank"], how="left").with_columns(
            pl.when(c("is_world")).then(c("remote_rank")).otherwise(c("peer_world"))
            .alias("peer"))
        df = df.with_columns(
            ctx.names.intern(COMMS, df["comm"]).alias("comm_value"),
            pl.when(c("is_world")).then(c("rank")).otherwise(c("comm_local_rank"))
            .alias("my_local"))
        _emit(df, ctx)
        coll = df.filter(c("blocking_coll"))
        if coll.height:
            coll_parts.append(coll.join(sizes, on="cid", how="left", maintain_order="left")
                              .select("source", "rank", "comm", "comm_size", "fname",
                                      "start", "end", "row", c("row_id").alias("ord")))
        p2p = df.filter((c("source") == source.P2P) & (c("role") != ROLE_NONE))
        if p2p.height:
            p2p_parts.append(p2p.select("role", "immediate", "pid", "request", "rank", "peer",
                                        "comm", "tag", "size", "start", "end", "row",
                                        c("row_id").alias("ord")))
        n_nvtx, n_sendrecv = df.select(
            ((c("source") == source.NVTX) & (c("role") != ROLE_NONE)).sum().alias("nvtx"),
            ((c("source") == source.P2P) & (c("state") == mreg.STATE_SEND_RECEIVE)).sum()
            .alias("sendrecv")).row(0)
        if n_nvtx:  # the NVTX form has no peer, tag or size: no message can be drawn
            ctx.count("MPI sends/receives without message data (NVTX MPI domain)", n_nvtx)
        if n_sendrecv:  # one row with one peer for two messages
            ctx.count("MPI_Sendrecv calls (messages not drawn)", n_sendrecv)
    if init_end is not None:
        ctx.sync_point("MPI_Init", init_end)
    _write_messages(ctx, p2p_parts, wait_parts)
    _write_collectives(ctx, coll_parts, report.world_size)


def is_blocking_collective(name: str) -> bool:
    """A collective that returns only once it has completed (MPI_Allreduce; not
    MPI_Iallreduce, whose completion is a later wait, nor MPI_Allreduce_init)."""
    if mreg.call_type(name) != mreg.MPI_COLLECTIVE:
        return False
    base = name.lower().removeprefix("mpi_").removesuffix("_c")
    return not base.startswith("i") and not base.endswith("_init")


def _nonneg(e: pl.Expr) -> pl.Expr:
    """Null for MPI's negative sentinels (MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_PROC_NULL)."""
    return pl.when(e >= 0).then(e)


def _emit(df: pl.DataFrame, ctx: Context) -> None:
    """Call events (with payloads on the start) and state intervals of MPI calls."""
    c = pl.col
    is_p2p, is_coll = c("source") == source.P2P, c("source") == source.COLLECTIVE
    payload = pl.when(is_p2p).then(R.pairs(
        (mreg.MPI_P2P_SIZE, c("size")), (mreg.MPI_P2P_TAG, _nonneg(c("tag"))),
        (mreg.MPI_P2P_PARTNER, _nonneg(c("peer"))))).when(is_coll).then(R.pairs(
            (mreg.MPI_COLL_SEND_SIZE, c("size")), (mreg.MPI_COLL_RECV_SIZE, c("recv_size")),
            (mreg.MPI_COLL_IS_ROOT, pl.when(c("root_rank").is_not_null()
                                            & (c("root_rank") == c("my_local"))).then(1)),
            (mreg.MPI_COLL_ROOT_RANK, _nonneg(c("root_rank"))))).otherwise(pl.lit(None, pl.Utf8))
    frames = start_end(df, SRC_MPI, c("mtype"), c("value"), start_text=payload)
    with_comm = df.filter((is_p2p | is_coll) & c("comm_value").is_not_null())
    if with_comm.height:
        ctype = pl.when(is_p2p).then(pl.lit(mreg.MPI_P2P_COMMUNICATOR)).otherwise(
            pl.lit(mreg.MPI_COLL_COMMUNICATOR))
        frames.append(with_comm.select(R.events(
            c("start"), c("row"), R.start_phase(c("start"), c("end")), SRC_MPI, c("row_id"),
            ctype, c("comm_value"), sub=-c("end"))))
    push(ctx, frames)
    ctx.intervals(intervals(df, c("state"), SRC_MPI))


def complete_requests(issues: pl.DataFrame, waits: pl.DataFrame) -> pl.Series:
    """End of the wait/test call that completed each immediate call's request.

    A request handle is valid from its issue until completed, then may be reused, so the
    completing call is the last wait/test touching the handle before it is issued again; when
    the handle is reissued before any wait (Open MPI returns one handle for all completed
    sends) the first wait/test after the issue is taken. Null when none touches it.
    """
    c = pl.col
    n = issues.height
    if n == 0 or waits.height == 0:
        return pl.Series("complete", [None] * n, dtype=pl.Int64)
    iss = issues.select("pid", "request", "start", "end").with_row_index("i").sort(
        ["pid", "request", "start"]).with_columns(
        c("start").shift(-1).over(["pid", "request"]).alias("next"))
    w = waits.filter(c("request").is_not_null()).select(
        "pid", "request", c("start").alias("w_start"), c("end").alias("w_end")).sort("w_start")
    iss = iss.filter(c("request").is_not_null())
    last = iss.with_columns(pl.coalesce(c("next") - 1, pl.lit(_INT64_MAX)).alias("_k")).sort(
        "_k").join_asof(w, left_on="_k", right_on="w_start", by=["pid", "request"],
                        strategy="backward", check_sortedness=False).select(
        "i", pl.when(c("w_start") >= c("end")).then(c("w_end")).alias("last"))
    first = iss.sort("end").join_asof(w, left_on="end", right_on="w_start",
                                      by=["pid", "request"], strategy="forward",
                                      check_sortedness=False).select(
        "i", c("w_end").alias("first"))
    out = pl.DataFrame({"i": pl.int_range(0, n, eager=True, dtype=pl.UInt32)}).join(
        last, on="i", how="left").join(first, on="i", how="left").sort("i")
    return out.select(pl.coalesce("last", "first").alias("complete"))["complete"]


def _write_messages(ctx: Context, parts: list[pl.DataFrame], wait_parts: list[pl.DataFrame]
                    ) -> None:
    """Sends and receives of this report, with world ranks and times, to the side file."""
    c = pl.col
    if not parts:
        return
    df = pl.concat(parts, how="vertical")
    waits = pl.concat(wait_parts, how="vertical") if wait_parts else pl.DataFrame(
        schema={"pid": pl.Int64, "request": pl.Int64, "start": pl.Int64, "end": pl.Int64})
    irecv = c("immediate") & (c("role") == ROLE_RECV)
    iss = df.filter(irecv)
    done = complete_requests(iss, waits)
    n_open = done.null_count()
    if n_open:
        ctx.count("MPI immediate receives without a completing wait/test (drawn to the "
                  "receive call)", n_open)
    iss = iss.with_columns(pl.coalesce(done, c("end")).alias("t_phys"))
    df = pl.concat([df.filter(~irecv).with_columns(c("end").alias("t_phys")), iss],
                   how="vertical")
    sends = df.filter(c("role") == ROLE_SEND)
    ctx.count("MPI sends", sends.height)
    ctx.count("MPI bytes sent", int(sends["size"].fill_null(0).sum()))
    ctx.count("MPI receives", df.height - sends.height)
    checks = [
        (c("rank").is_null(), "MPI sends/receives of a process without a known rank"),
        (c("comm").is_null(), "MPI sends/receives on a communicator missing from "
                              "MPI_COMMUNICATORS"),
        (c("peer").is_null() | (c("peer") < 0) | c("tag").is_null() | (c("tag") < 0),
         "MPI sends/receives with a wildcard, MPI_PROC_NULL or untranslatable partner"),
    ]
    for bad, what in checks:
        n = df.select(bad.fill_null(False).sum()).item()
        if n:
            ctx.count(what + " (not drawn)", n)
            df = df.filter(~bad.fill_null(False))
    df = df.select(c("role").cast(pl.Int8), "rank", "peer", "comm", "tag", "size",
                   c("start").alias("t_log"), "t_phys", c("row").cast(pl.Int32), "ord")
    df.sort(["t_log", "ord"]).write_ipc(ctx.side_file(SIDE_FILE))


def _write_collectives(ctx: Context, parts: list[pl.DataFrame], world: int | None) -> None:
    """Blocking collective calls of this report (rank, communicator and its size, function,
    times, row) to the side file the merge stage matches across ranks. Calls of the NVTX
    form name no communicator: they are taken to be MPI_COMM_WORLD's, of the job's size."""
    c = pl.col
    if not parts:
        return
    df = pl.concat(parts, how="vertical")
    no_rank = df.select(c("rank").is_null().sum()).item()
    if no_rank:
        ctx.count("MPI collective calls of a process without a known rank (not matched)",
                  no_rank)
        df = df.filter(c("rank").is_not_null())
    lost = df.select((c("comm").is_null() & (c("source") != source.NVTX)).sum()).item()
    if lost:
        ctx.count("MPI collective calls on a communicator missing from MPI_COMMUNICATORS (not "
                  "matched)", lost)
        df = df.filter(c("comm").is_not_null() | (c("source") == source.NVTX))
    unknown = c("comm").is_null()
    df = df.with_columns(
        pl.when(unknown).then(pl.lit(WORLD)).otherwise(c("comm")).alias("comm"),
        pl.when(unknown | (c("comm") == WORLD)).then(
            pl.coalesce("comm_size", pl.lit(world, pl.Int64))).otherwise(c("comm_size"))
        .alias("comm_size"))
    ctx.count("MPI collective calls (blocking)", df.height)
    df.select(*[c(n).cast(t) for n, t in COLL_SCHEMA.items()]).sort("start", "ord").write_ipc(
        ctx.side_file(COLL_FILE))


# -- merge stage ------------------------------------------------------------------------------

def _count(mctx: Any, key: str, n: int) -> None:
    mctx.count(key, n)


def load_messages(mctx: Any) -> pl.DataFrame:
    """Every report's sends/receives, times on the trace clock, with the report index."""
    parts = []
    for i, meta in enumerate(mctx.metas):
        path = Path(mctx.side_file(i, SIDE_FILE))
        if not path.exists():
            continue
        df = pl.read_ipc(path)
        shift = int(mctx.shifts[i])
        parts.append(df.with_columns(pl.lit(i, pl.Int32).alias("rep"),
                                     (pl.col("t_log") + shift).alias("t_log"),
                                     (pl.col("t_phys") + shift).alias("t_phys")))
    if not parts:
        return pl.DataFrame(schema={**SIDE_SCHEMA, "rep": pl.Int32})
    return pl.concat(parts, how="vertical")


def match_messages(df: pl.DataFrame, present: set[int]) -> tuple[pl.DataFrame, dict[str, int]]:
    """Pairs sends with receives: same communicator, source, destination and tag, k-th send
    with k-th receive in posting order (MPI's non-overtaking rule). Returns the pairs (s_* and
    r_* columns) and counts of what could not be paired."""
    c = pl.col
    keys = ["comm", "src", "dst", "tag"]
    sends = df.filter(c("role") == ROLE_SEND).rename({"rank": "src", "peer": "dst"})
    recvs = df.filter(c("role") == ROLE_RECV).rename({"rank": "dst", "peer": "src"})
    counts = {}
    known = list(present)
    lost_s = sends.filter(~c("dst").is_in(known))
    lost_r = recvs.filter(~c("src").is_in(known))
    counts["MPI messages to a rank not in the inputs (not drawn)"] = lost_s.height
    counts["MPI messages from a rank not in the inputs (not drawn)"] = lost_r.height
    sends = sends.filter(c("dst").is_in(known))
    recvs = recvs.filter(c("src").is_in(known))

    def numbered(x: pl.DataFrame) -> pl.DataFrame:
        return x.sort(["t_log", "ord"]).with_columns(
            pl.int_range(pl.len()).over(keys).alias("seq"))

    s = numbered(sends).select(*keys, "seq", *[c(n).alias(f"s_{n}") for n in (
        "size", "t_log", "t_phys", "row", "ord", "rep")])
    r = numbered(recvs).select(*keys, "seq", *[c(n).alias(f"r_{n}") for n in (
        "size", "t_log", "t_phys", "row", "ord", "rep")])
    pairs = s.join(r, on=[*keys, "seq"], how="inner")
    counts["MPI messages"] = pairs.height
    counts["MPI message bytes"] = int(pairs["s_size"].fill_null(pairs["r_size"])
                                      .fill_null(0).sum()) if pairs.height else 0
    counts["MPI sends without a matching receive (not drawn)"] = s.height - pairs.height
    counts["MPI receives without a matching send (not drawn)"] = r.height - pairs.height
    return pairs, counts


def _present_ranks(mctx: Any, df: pl.DataFrame) -> set[int]:
    ranks = set(df["rank"].drop_nulls().unique().to_list())
    for meta in mctx.metas:
        for proc in meta.get("processes", {}).values():
            if proc.get("rank") is not None:
                ranks.add(int(proc["rank"]))
        if meta.get("report", {}).get("rank") is not None:
            ranks.add(int(meta["report"]["rank"]))
    return ranks


def merge_records(mctx: Any) -> Iterator[pl.DataFrame]:
    """Communication records of every matched message and of every collective matched
    across ranks, in the trace-wide layout (one frame, sorted: one engine source)."""
    frames = [f for f in (_message_records(mctx), _collective_records(mctx)) if f.height]
    if not frames:
        return iter(())
    if len(frames) == 1:
        return iter(frames)
    return iter([mctx.final(pl.concat(frames, how="vertical"))])


def _collective_records(mctx: Any) -> pl.DataFrame:
    """Lines from the rank that called each collective instance last to every other rank
    (instance = the k-th blocking collective of each rank on one communicator)."""
    c = pl.col
    parts = []
    for i in range(len(mctx.metas)):
        path = Path(mctx.side_file(i, COLL_FILE))
        if path.exists():
            shift = int(mctx.shifts[i])
            parts.append(pl.read_ipc(path).with_columns(
                pl.lit(i, pl.Int32).alias("rep"), c("start") + shift, c("end") + shift))
    if not parts:
        return pl.DataFrame()
    df = pl.concat(parts, how="vertical").rename({"fname": "op", "comm_size": "size"})
    counts: dict[str, int] = {}
    matched, counts = match(df, ["rank"], "MPI collective instances", counts)
    pairs = collective_lines(matched, counts, "MPI collective")
    for k, v in counts.items():
        _count(mctx, k, v)
    if pairs.height == 0:
        return pl.DataFrame()
    return lines_to_records(mctx, pairs, SRC_COLLECTIVE_LINE, dreg.TAG_MPI_COLLECTIVE)


def _message_records(mctx: Any) -> pl.DataFrame:
    """Communication records of every matched point-to-point message."""
    c = pl.col
    df = load_messages(mctx)
    if df.height == 0:
        return pl.DataFrame()
    pairs, counts = match_messages(df, _present_ranks(mctx, df))
    for k, v in counts.items():
        _count(mctx, k, v)
    if pairs.height == 0:
        return pl.DataFrame()
    s_look = endpoint_rows(mctx, pairs, "s", ("order", "cpu", "task", "thread"))
    r_look = endpoint_rows(mctx, pairs, "r", ("r_order", "rcpu", "rtask", "rthread"))
    out = pairs.join(s_look, on=["s_rep", "s_row"], how="left").join(
        r_look, on=["r_rep", "r_row"], how="left")
    out = out.select(
        c("s_t_log").alias("time"), "order", pl.lit(R.COMM).alias("kind"),
        pl.lit(0).alias("phase"), pl.lit(0).alias("sub"), pl.lit(SRC_MPI_MESSAGE).alias("src"),
        c("s_rep").alias("rep"), c("s_ord").alias("ord"),
        pl.max_horizontal("s_t_phys", "s_t_log").alias("a"), c("r_order").alias("b"),
        c("r_t_log").alias("c"), pl.max_horizontal("r_t_phys", "r_t_log").alias("d"),
        c("s_size").fill_null(c("r_size")).fill_null(0).alias("e"), c("tag").alias("f"),
        "cpu", "task", "thread", "rcpu", "rtask", "rthread")
    return mctx.final(out)


TRANSLATORS = (Translator("mpi", 45, "MPI calls (Extrae encoding), states and messages",
                          source.available, translate, source.TABLES,
                          merge_records=merge_records),)

