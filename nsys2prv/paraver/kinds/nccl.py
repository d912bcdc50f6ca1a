"""NCCL -> NCCL calls on the CPU thread (type 67600000, with the call's own payload), and the
operation each NCCL kernel carries out (collective, size, datatype, reduction, root, peer,
communicator, rank, number of ranks) on that kernel's GPU stream row.

Kernel <- call: NCCL launches its kernel from inside an API call (or, for grouped calls, from
inside the ncclGroupEnd that closes the group), so a kernel belongs to the NCCL range of its
thread that contains the start of the CUDA call that launched it (matched on pid +
correlation id, as the launch arrows are). The operations of the kernel are that call, or
every call between the outermost ncclGroupStart and its ncclGroupEnd. Kernels no range
explains still get their collective from their name (ncclDevKernel_AllGather_RING_LL,
ncclAllReduceRingLLKernel_sum_f32, ...).

Kernel-side events use the kernel's own ordering fields (src = kernel, ord = kernel rowid), so
they follow the kernel when it goes to an overlap lane.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from ...report.report import Report
from ...sources import cuda_api as api_source
from ...sources import kernels as kernel_source
from ...sources import nccl as source
from .. import records as R
from ..registry import deps as dreg
from ..registry import nccl as nreg
from ..values import STRING_ID_OFFSET
from . import cuda_api, kernels
from ._collectives import collective_lines, lines_to_records, match
from .base import REPORT_END, Context, NameClassifier, Translator, fix_times, push, start_end
from .kernels import is_nccl

GROUP_START = "ncclGroupStart"
GROUP_END = "ncclGroupEnd"
UNKNOWN = "(unknown)"

# lower-case operation (call name without "nccl") -> registry name
_OPERATIONS = {k.lower(): k for k in nreg.COLLECTIVES} | {"bcast": "Broadcast",
                                                          "alltoall": "AllToAll"}
_KERNEL_OP = (re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)"),
              re.compile(r"^nccl([A-Za-z]+?)(?:Ring|Tree|CollNet|Nvls|NVLS|Pat)?"
                         r"(?:LL128|LL|Simple)?Kernel"))

# payload field -> (event type, offset added to the value)
_NUMBERS = (("bytes", nreg.NCCL_MESSAGE_SIZE, 0), ("datatype", nreg.NCCL_DATATYPE, 1),
            ("redop", nreg.NCCL_REDUCTION, 1), ("root", nreg.NCCL_ROOT, 0),
            ("peer", nreg.NCCL_PEER, 0), ("comm", nreg.NCCL_COMMUNICATOR, 0),
            ("rank", nreg.NCCL_RANK, 0), ("nranks", nreg.NCCL_NRANKS, 0))


def operation_of_call(name: str | None) -> str | None:
    """Registry name of the operation an NCCL call issues (ncclAllReduce -> AllReduce)."""
    if not name or not name.startswith("nccl"):
        return None
    return _OPERATIONS.get(name[4:].lower())


def operation_of_kernel(name: str) -> str | None:
    """Operation in an NCCL kernel name, for kernels no NCCL call explains."""
    for pattern in _KERNEL_OP:
        m = pattern.match(name)
        if m:
            return _OPERATIONS.get(m.group(1).lower())
    return None


def translate(report: Report, ctx: Context) -> None:
    c = pl.col
    parts = []
    for chunk in source.read(report, ctx.chunk_rows):
        df = _checked(fix_times(chunk, ctx, "NCCL calls", open_end=REPORT_END), ctx)
        df = df.with_columns(ctx.rows.cpu_rows(df).alias("row"))
        ctx.names.use("nccl_calls", df["text_id"])
        inline = df.select(pl.when(c("text_id").is_null()).then(c("text").fill_null(""))
                           .alias("t"))["t"]
        df = df.with_columns(pl.coalesce(c("text_id") + STRING_ID_OFFSET,
                                         ctx.names.intern("nccl_calls", inline)).alias("value"))
        ctx.spans.add(df["row"], df["start"], df["end"])
        ctx.count("nccl_calls", df.height)
        ctx.count("nccl_calls_with_payload",
                  df.filter(pl.any_horizontal(c(f).is_not_null() for f in source.FIELDS)).height)
        push(ctx, start_end(df, R.SRC_NCCL, nreg.NCCL_RANGE, c("value"),
                            start_text=_pairs(c), end_text=_pairs(c, end=True)))
        parts.append(df.select("row_id", "pid", "row", "start", "end", "name", *source.FIELDS))
    calls = pl.concat(parts, how="vertical") if parts else None
    _kernel_events(report, ctx, calls)


def _pairs(c, end: bool = False) -> pl.Expr:
    """':type:value' text of the payload numbers present (0 for each at the end)."""
    items = []
    for field, type_, shift in _NUMBERS:
        v = c(field) + shift if shift else c(field)
        items.append((type_, pl.when(c(field).is_not_null()).then(0) if end else v))
    return R.pairs(*items)


COMM_MASK = (1 << 63) - 1  # communicator ids use 64 bits; Paraver values must stay >= 0


def _checked(df: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Payload fields as Paraver values: communicator without its top bit; datatype and
    reduction inside the enums the .pcf labels; no negative number (dropped, counted)."""
    c = pl.col
    limits = {"datatype": len(nreg.ENUMS["nccl_datatype"]),
              "redop": len(nreg.ENUMS["nccl_redop"])}
    bad = {f: (c(f) < 0) | (c(f) >= limits[f]) if f in limits else c(f) < 0
           for f in source.FIELDS if f != "comm"}
    n_bad = df.select(pl.sum_horizontal(e.fill_null(False).cast(pl.Int64)
                                        for e in bad.values()).sum()).item()
    if n_bad:
        ctx.warn("NCCL payload: negative or unknown enum values (dropped)", n_bad)
    return df.with_columns(c("comm") & COMM_MASK,
                           *[pl.when(~e).then(c(f)).alias(f) for f, e in bad.items()])


# -- kernels ----------------------------------------------------------------------------------

def _nccl_kernels(report: Report, ctx: Context) -> Iterator[pl.DataFrame] | None:
    """NCCL kernels (pid, correlation, start, end, GPU row, rowid, operation from the name),
    a slice of about a chunk's rows at a time (None: the report has no kernels)."""
    if not kernel_source.available(report):
        return None
    return _sliced(_nccl_kernel_chunks(report, ctx), ctx.chunk_rows)


def _nccl_kernel_chunks(report: Report, ctx: Context) -> Iterator[pl.DataFrame]:
    nccl = NameClassifier(ctx.names, "kernel_names", is_nccl, pl.Boolean, False)
    op = NameClassifier(ctx.names, "kernel_names", lambda n: operation_of_kernel(n) or "",
                        pl.Utf8, "")
    c = pl.col
    if kernels.NCCL_KERNELS in ctx.shared:  # the kernels kind kept them: no second read
        kept = ctx.shared[kernels.NCCL_KERNELS]
        chunks: Iterator[pl.DataFrame] = (kept.pop(0) for _ in range(len(kept)))
        translated = True
    else:
        chunks = kernel_source.read(report, ctx.chunk_rows)
        translated = False
    for df in chunks:
        if not translated:
            df = df.filter(c("start").is_not_null() & c("end").is_not_null())
            df = df.filter(nccl(df["short_name_id"]))
            if df.height == 0:
                continue
            df = df.with_columns(ctx.rows.gpu_rows(df).alias("row"),
                                 pl.max_horizontal("start", "end").alias("end"))
        df = df.with_columns(op(df["short_name_id"]).alias("kernel_op"))
        yield df.select("row_id", "pid", "correlation", "start", "end", "row",
                        pl.when(c("kernel_op") != "").then(c("kernel_op")).alias("kernel_op"))


def _sliced(frames: Iterator[pl.DataFrame], rows: int) -> Iterator[pl.DataFrame]:
    """The rows of `frames` in order, in frames of about `rows` rows (the kernels kind keeps
    each of its chunks' few NCCL kernels: one query per few of them would cost more)."""
    held: list[pl.DataFrame] = []
    n = 0
    for f in frames:
        if f.height == 0:
            continue
        held.append(f)
        n += f.height
        if n >= rows:
            yield pl.concat(held, how="vertical")
            held, n = [], 0
    if held:
        yield pl.concat(held, how="vertical")


def _calls_read(report: Report, ctx: Context, kernels: pl.DataFrame
                ) -> cuda_api.CorrelationIndex:
    """(pid, correlation) -> api_row, api_start of the calls that launched `kernels`, read
    from the runtime table for just these correlation ids (for a report whose CUDA calls
    are not translated: no CUDA API index)."""
    wanted = kernels.select("pid", "correlation").unique()
    parts = []
    for chunk in api_source.read(report, ctx.chunk_rows):
        chunk = chunk.join(wanted, on=["pid", "correlation"], how="semi")
        if chunk.height:
            parts.append(chunk.select("pid", "correlation",
                                      ctx.rows.cpu_rows(chunk).alias("api_row"),
                                      pl.col("start").alias("api_start")))
    return cuda_api.CorrelationIndex(parts)


def group_keys(calls: pl.DataFrame) -> pl.DataFrame:
    """Adds `key`: the rowid of the outermost ncclGroupStart for calls inside a group (and for
    the ncclGroupEnd that closes it), the call's own rowid otherwise.

    Group depth is the running sum of +1 (start) / -1 (end) per thread, clamped at 0 so a
    trace that begins inside a group does not shift every later group (Lindley recursion:
    clamped = sum - min(0, running min of sum))."""
    c = pl.col
    df = calls.sort(["row", "start", "row_id"])
    delta = (c("name") == GROUP_START).cast(pl.Int64) - (c("name") == GROUP_END).cast(pl.Int64)
    df = df.with_columns(delta.fill_null(0).alias("_d"))
    df = df.with_columns(c("_d").cum_sum().over("row").alias("_s"))
    df = df.with_columns((c("_s") - pl.min_horizontal(c("_s").cum_min().over("row"), pl.lit(0)))
                         .alias("_after"))
    df = df.with_columns(c("_after").shift(1).over("row").fill_null(0).alias("_before"))
    opens = (c("name") == GROUP_START) & (c("_before") == 0)
    df = df.with_columns(pl.when(opens).then(c("row_id")).forward_fill().over("row")
                         .alias("_opener"))
    grouped = (c("_before") > 0) | opens
    return df.with_columns(pl.when(grouped & c("_opener").is_not_null()).then(c("_opener"))
                           .otherwise(c("row_id")).alias("key")).drop(
        "_d", "_s", "_after", "_before", "_opener")


def operations(calls: pl.DataFrame) -> pl.DataFrame:
    """Per group key: the operation and payload a kernel launched by it carries out.

    One call: its own fields. A group: the shared collective (SendRecv for sends and
    receives, Group for a mix), the summed message size, and every other field where all
    calls of the group agree."""
    c = pl.col
    ops = calls.with_columns(_operation_expr(c("name")).alias("op"))
    ops = ops.filter(c("op").is_not_null())
    single = [pl.when(c(f).drop_nulls().n_unique() == 1).then(c(f).drop_nulls().first())
              .alias(f) for f in source.FIELDS if f != "bytes"]
    agg = ops.group_by("key", maintain_order=True).agg(
        pl.when(c("op").n_unique() == 1).then(c("op").first())
        .when(c("op").is_in(["Send", "Recv"]).all()).then(pl.lit("SendRecv"))
        .otherwise(pl.lit(nreg.MIXED_GROUP)).alias("op"),
        pl.when(c("bytes").is_not_null().any()).then(c("bytes").sum()).alias("bytes"),
        c("pid").first(), *single)
    return agg


def _operation_expr(name: pl.Expr) -> pl.Expr:
    """operation_of_call as an expression (a small dictionary over call names)."""
    key = name.str.strip_prefix("nccl").str.to_lowercase()
    return pl.when(name.str.starts_with("nccl")).then(
        key.replace_strict(_OPERATIONS, default=None, return_dtype=pl.Utf8))


def _communicators(calls: pl.DataFrame) -> pl.DataFrame:
    """(pid, comm) -> rank, nranks, from the calls whose payload has them (ncclCommInitRank)."""
    c = pl.col
    return (calls.filter(c("comm").is_not_null() & (c("rank").is_not_null()
                                                    | c("nranks").is_not_null()))
            .group_by("pid", "comm", maintain_order=True)
            .agg(c("rank").drop_nulls().last().alias("c_rank"),
                 c("nranks").drop_nulls().last().alias("c_nranks")))


def _kernel_events(report: Report, ctx: Context, calls: pl.DataFrame | None) -> None:
    """Operation and payload of each NCCL kernel, on its row at its start (0 at its end),
    a slice of the kernels at a time (memory of a slice and of the calls' operations, not
    of every NCCL kernel: 220 B a kernel on the 30M benchmark export).

    Launch -> call: the latest-starting NCCL call of the launching thread that began before
    the launch and had not ended (an as-of join; NCCL calls do not nest in practice)."""
    slices = _nccl_kernels(report, ctx)
    if slices is None:
        return
    ops = ranges = index = None
    if calls is not None and calls.height:
        keyed = group_keys(calls)
        ops = operations(keyed)
        comms = _communicators(calls)
        if comms.height:
            ops = ops.join(comms, on=["pid", "comm"], how="left", maintain_order="left")\
                .with_columns(pl.coalesce("rank", "c_rank").alias("rank"),
                              pl.coalesce("nranks", "c_nranks").alias("nranks"))\
                .drop("c_rank", "c_nranks")
        ops = ops.drop("pid")
        ranges = keyed.select(pl.col("row").alias("api_row"), pl.col("start").alias("r_start"),
                              pl.col("end").alias("r_end"), "key").sort("r_start")
        del keyed
        index = cuda_api.index(ctx)
        if index.height == 0 and api_source.available(report):
            # CUDA calls not translated: the calls of every NCCL kernel read at once
            held = list(slices)
            if held:
                index = _calls_read(report, ctx, pl.concat(held, how="vertical"))
            slices = iter(held)
    instances = []
    for kernels in slices:
        matched = _operations_of(ctx, kernels, ops, ranges, index)
        instances.append(_instances(ctx, matched))
        _push_operations(ctx, matched)
    if instances:
        _write_instances(ctx, pl.concat(instances, how="vertical"))


def _operations_of(ctx: Context, kernels: pl.DataFrame, ops: pl.DataFrame | None,
                   ranges: pl.DataFrame | None, index) -> pl.DataFrame:
    """`kernels` with the operation and payload of the call that launched them (nulls
    where none), their operation from the name where no call names one."""
    c = pl.col
    fields = list(source.FIELDS)
    matched = kernels.with_columns(pl.lit(None, pl.Utf8).alias("op"),
                                   *[pl.lit(None, pl.Int64).alias(f) for f in fields])
    if ops is not None:
        launches = index.join(kernels, how="left").filter(c("api_row").is_not_null())
        if launches.height:
            hit = launches.sort("api_start").join_asof(
                ranges, left_on="api_start", right_on="r_start", by="api_row",
                strategy="backward", check_sortedness=False)  # both sorted on the key
            hit = hit.filter(c("r_end").is_not_null() & (c("api_start") <= c("r_end")))
            ctx.count("nccl_kernels_matched_to_calls", hit.height)
            hit = hit.select("row_id", "key").join(ops, on="key", how="inner")
            matched = kernels.join(hit.drop("key"), on="row_id", how="left",
                                   maintain_order="left")
    return matched.with_columns(pl.coalesce("op", "kernel_op").alias("op"))


def _push_operations(ctx: Context, matched: pl.DataFrame) -> None:
    """The records of the kernels that have an operation or a payload field."""
    c = pl.col
    has_any = c("op").is_not_null() | pl.any_horizontal(c(f).is_not_null()
                                                         for f in source.FIELDS)
    matched = matched.filter(has_any).with_columns(c("op").fill_null(UNKNOWN))
    if matched.height == 0:
        return
    matched = matched.with_columns(
        ctx.names.intern("nccl_collectives", matched["op"]).alias("op_value"))
    ctx.spans.add(matched["row"], matched["start"], matched["end"])
    ctx.count("nccl_kernels_with_operation", matched.height)
    push(ctx, start_end(matched, R.SRC_KERNEL, nreg.NCCL_COLLECTIVE, c("op_value"),
                        start_text=_pairs(c), end_text=_pairs(c, end=True)))


# -- collectives across participants (merge stage) ---------------------------------------------

SIDE_FILE = "nccl_kernels.arrow"
SIDE_SCHEMA: dict[str, pl.DataType] = {
    "pid": pl.Int64, "device": pl.Int64, "row": pl.Int32, "ord": pl.Int64, "start": pl.Int64,
    "end": pl.Int64, "op": pl.Utf8, "comm": pl.Int64, "nranks": pl.Int64}
SRC_LINE = R.SRC_KERNEL + R.SRC_LAUNCH_OFFSET  # the line ends on an NCCL kernel
NO_COMM = -1  # communicator key of kernels no payload names one


def _instances(ctx: Context, kernels: pl.DataFrame) -> pl.DataFrame:
    """NCCL kernels as the side file holds them (its participant, times, operation,
    communicator)."""
    c = pl.col
    keys = ctx.rows.gpu_keys(kernels["row"])
    df = kernels.with_columns(keys["pid"].alias("pid"), keys["device"].alias("device"))
    return df.select(*[c("row_id" if n == "ord" else n).cast(t).alias(n)
                       for n, t in SIDE_SCHEMA.items()])


def _write_instances(ctx: Context, instances: pl.DataFrame) -> None:
    """Every NCCL kernel of the report (`_instances`), in time order, to the side file the
    merge stage matches across reports."""
    instances.sort("start", "ord").write_ipc(ctx.side_file(SIDE_FILE))


def load_instances(mctx: Any) -> pl.DataFrame:
    """Every report's NCCL kernels, times on the trace clock, with the report index."""
    parts = []
    for i in range(len(mctx.metas)):
        path = Path(mctx.side_file(i, SIDE_FILE))
        if not path.exists():
            continue
        shift = int(mctx.shifts[i])
        parts.append(pl.read_ipc(path).with_columns(
            pl.lit(i, pl.Int32).alias("rep"), pl.col("start") + shift, pl.col("end") + shift))
    if not parts:
        return pl.DataFrame(schema={**SIDE_SCHEMA, "rep": pl.Int32})
    return pl.concat(parts, how="vertical")


def world_size(mctx: Any) -> int | None:
    """The job's size as the reports' environment says (PMI_SIZE, WORLD_SIZE, ...)."""
    sizes = [m.get("report", {}).get("world_size") for m in mctx.metas]
    sizes = [int(x) for x in sizes if x is not None]
    return max(sizes) if sizes else None


def match_instances(df: pl.DataFrame, world: int | None = None
                    ) -> tuple[pl.DataFrame, dict[str, int]]:
    """The k-th NCCL kernel of every participant (report, process, device) on one
    communicator is one instance of an operation. Kernels no payload names a communicator
    share one (NO_COMM), ordered per participant, which holds when each device runs them on
    one stream: participants that have them on several are left out; its size is taken to
    be the job's (`world`) when the environment says it. Returns the kernels of the
    instances that are complete (two participants or more, as many as the communicator's
    size where known, one operation) with `inst`, and counts."""
    c = pl.col
    counts: dict[str, int] = {}
    part = ["rep", "pid", "device"]
    df = df.with_columns(c("comm").fill_null(NO_COMM), c("nranks").alias("size"))
    streams = df.filter(c("comm") == NO_COMM).group_by(part).agg(
        c("row").n_unique().alias("n_streams"))
    ambiguous = streams.filter(c("n_streams") > 1)
    if ambiguous.height:
        lost = df.join(ambiguous, on=part, how="semi").filter(c("comm") == NO_COMM)
        counts["NCCL kernels without a communicator on a device with several NCCL streams "
               "(not matched)"] = lost.height
        df = df.join(lost.select(*part, "ord"), on=[*part, "ord"], how="anti")
    if world is not None:
        df = df.with_columns(pl.when(c("comm") == NO_COMM).then(
            pl.coalesce("size", pl.lit(world, pl.Int64))).otherwise(c("size")).alias("size"))
    return match(df, part, "NCCL operation instances", counts)


def merge_records(mctx: Any) -> Iterator[pl.DataFrame]:
    """Lines of every NCCL operation matched across the reports' participants."""
    df = load_instances(mctx)
    if df.height == 0:
        return iter(())
    matched, counts = match_instances(df, world_size(mctx))
    pairs = collective_lines(matched, counts, "NCCL collective")
    for k, v in counts.items():
        mctx.count(k, v)
    if pairs.height == 0:
        return iter(())
    return iter([lines_to_records(mctx, pairs, SRC_LINE, dreg.TAG_NCCL_COLLECTIVE,
                                  lane_src=R.SRC_KERNEL)])


TRANSLATORS = (Translator("nccl", 25, "NCCL calls and the operations of NCCL kernels",
                          source.available, translate, (source.TABLE,),
                          merge_records=merge_records),)
