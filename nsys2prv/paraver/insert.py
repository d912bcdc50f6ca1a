"""A copy of a trace with more events: the lines of an analysis (the critical path, say)
merged into the trace's lines by time, block by block (memory: one block and the new
lines, or the chunk of them that reaches that block's time), written atomically beside its
.pcf (with the new types added) and .row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl

from .output import TraceWriter
from .read import companion, open_text, read_layout
from .writeid import PRV_MARK, unmark_pcf, unmark_row

BLOCK = 32 << 20  # characters of trace text merged at a time


def event_lines(path: Path, events: pl.DataFrame) -> pl.DataFrame:
    """(time, key, pairs) of `events` (row, time, type, value) of the trace at `path`: key =
    'appl:task:thread:time' of the line they go on, pairs = 'type:value[:type:value]' (the
    events of one row and time on one line, as Paraver wants them; those that end something
    first), in time order."""
    rows = read_layout(path).rows.select(pl.col("row").cast(pl.Int32), "appl", "task",
                                         "thread")
    c = pl.col
    ev = (events.with_columns(c("row").cast(pl.Int32))
          .join(rows, on="row", how="left")
          .sort("time", "row", c("value") != 0, "type"))
    key = pl.concat_str([c("appl").cast(pl.Utf8), c("task").cast(pl.Utf8),
                         c("thread").cast(pl.Utf8), c("time").cast(pl.Utf8)], separator=":")
    pair = pl.concat_str([c("type").cast(pl.Utf8), c("value").cast(pl.Utf8)], separator=":")
    return (ev.select("time", key.alias("key"), pair.alias("pair"))
            .group_by("time", "key", maintain_order=True)
            .agg(pl.col("pair").str.join(":").alias("pairs")))


def _merge(lines: pl.Series, new: pl.DataFrame) -> list[str]:
    """The body lines with the new events merged: appended to the event line of their row
    and time where there is one, else as lines of their own after the lines of their time."""
    parts = lines.str.split_exact(":", 6)
    body = pl.DataFrame({"line": lines}).with_columns(
        parts.struct.field("field_0").alias("kind"),
        parts.struct.field("field_5").cast(pl.Int64).alias("time"),
        pl.concat_str([parts.struct.field(f"field_{i}") for i in (2, 3, 4, 5)],
                      separator=":").alias("key")).with_row_index("i")
    if new.height:
        events = body.filter(pl.col("kind") == "2").select("key", "i")
        hit = new.join(events, on="key", how="inner")
        if hit.height:
            body = body.join(hit.select("i", "pairs"), on="i", how="left").with_columns(
                pl.when(pl.col("pairs").is_not_null())
                .then(pl.concat_str(["line", "pairs"], separator=":"))
                .otherwise(pl.col("line")).alias("line")).drop("pairs")
        new = new.join(events, on="key", how="anti")
    merged = pl.concat([
        body.select("time", pl.lit(0, pl.Int8).alias("k"), "i", "line"),
        new.with_row_index("i").select(
            "time", pl.lit(1, pl.Int8).alias("k"), "i",
            pl.concat_str([pl.lit("2:0"), pl.col("key").str.replace(r":\d+$", ""),
                           pl.col("time").cast(pl.Utf8), "pairs"], separator=":")
            .alias("line"))]).sort("time", "k", "i")
    return merged["line"].to_list()


class _Pending:
    """The new lines in time order, from one frame or from chunks of it (each after the
    one before): `before(t)` takes those before `t`, reading chunks only as far as `t`."""

    def __init__(self, new: pl.DataFrame | Iterable[pl.DataFrame]) -> None:
        if isinstance(new, pl.DataFrame):
            new = [new.sort("time", maintain_order=True)]
        self._chunks: Iterator[pl.DataFrame] = iter(new)
        self._held: pl.DataFrame | None = None
        self._more = True

    def _pull(self) -> None:
        chunk = next(self._chunks, None)
        if chunk is None:
            self._more = False
        elif chunk.height:
            self._held = chunk if self._held is None else pl.concat([self._held, chunk])

    def before(self, t: int) -> pl.DataFrame:
        while self._more and (self._held is None or int(self._held["time"].max()) < t):
            self._pull()
        if self._held is None:
            return pl.DataFrame(schema={"time": pl.Int64, "key": pl.Utf8, "pairs": pl.Utf8})
        take = self._held.filter(pl.col("time") < t)
        self._held = self._held.filter(pl.col("time") >= t)
        return take


def write_with_events(src: str | Path, output: str | Path,
                      new: pl.DataFrame | Iterable[pl.DataFrame], pcf_extra: str) -> Path:
    """Write `output` (.prv, .pcf, .row): the trace `src` with the events of `new` (time,
    key, pairs: `event_lines`; or such frames one after the other in time order, each read
    when the trace's blocks reach its time) merged in, its .pcf followed by `pcf_extra`, its
    .row. Returns the .prv written. Lines of the last time of a block wait for the next one,
    so that every line of a time meets the events of that time."""
    src = Path(src)
    pending = _Pending(new)
    row_path = companion(src, ".row")
    pcf = unmark_pcf(companion(src, ".pcf").read_text())
    row = unmark_row(row_path.read_text()) if row_path.exists() else ""
    with TraceWriter(output) as writer, open_text(src) as f:
        writer.begin(f.readline(), pcf.rstrip("\n") + "\n\n" + pcf_extra, row)
        carry = ""
        held = pl.Series("line", [], dtype=pl.Utf8)
        while True:
            chunk = f.read(BLOCK)
            text = carry + chunk
            cut = text.rfind("\n") if chunk else len(text)
            body, carry = (text[: cut + 1], text[cut + 1:]) if chunk else (text, "")
            lines = pl.Series("line", body.splitlines(), dtype=pl.Utf8)
            comment = lines.str.starts_with("#")
            if comment.any():  # header comments come first, before any record; the
                # source's write id is not this write's
                kept = lines.filter(comment & ~lines.str.starts_with(PRV_MARK))
                if kept.len():
                    writer.write("\n".join(kept.to_list()) + "\n")
            lines = pl.concat([held, lines.filter(~comment & (lines.str.len_chars() > 0))])
            if chunk and lines.len():
                times = lines.str.split_exact(":", 6).struct.field("field_5").cast(pl.Int64)
                last = int(times.max())
                held, lines = lines.filter(times == last), lines.filter(times < last)
            else:
                last = 2**62
                held = held.clear()
            if lines.len():
                take = pending.before(last)
                writer.write("\n".join(_merge(lines, take)) + "\n")
            if not chunk:
                break
        rest = pending.before(2**63 - 1)
        if rest.height:
            writer.write("\n".join(_merge(pl.Series("line", [], dtype=pl.Utf8), rest))
                         + "\n")
        writer.commit()
    return writer.prv
