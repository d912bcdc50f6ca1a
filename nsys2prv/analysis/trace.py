"""Read what the analysis needs from a Paraver trace (.prv/.prv.gz + .row), vectorised.

The analysis works on the trace rather than on the exports so that its numbers are the ones
Paraver computes with the cfgs on the same file (same clock alignment, same time 0, same
trace end, same lanes). Events are read with Paraver's own semantics: on a row, the value of
a set of types at time t is the last event of the set at or before t, events at equal times
in file order (paraver-kernel sorts each row stably by time).
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

_GPU_ROW = re.compile(r"^GPU (\d+) (?:ctx \d+ stream \d+|metrics)")
_HEADER = re.compile(r"^#Paraver \((?P<date>[^)]*)\):(?P<end>\d+)(?:_(?P<unit>[a-z]+))?:"
                     r"(?P<resources>[^:]*):(?P<rest>.*)$")


@dataclass
class Trace:
    """Rows (one per Paraver thread, with task, node, label, kind and GPU device), the
    trace end time (ns) and the event/state lines selected when reading."""

    path: Path
    end: int
    rows: pl.DataFrame  # row, appl, task, thread, node, label, kind, device, task_label
    events: pl.DataFrame  # row, time, type, value, seq
    states: pl.DataFrame  # row, begin, end, state


def _open_text(path: Path):
    return gzip.open(path, "rt") if path.suffix == ".gz" else open(path)


def _companion(path: Path, ext: str) -> Path:
    name = path.name
    for suffix in (".prv.gz", ".prv"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ext)
    return path.with_suffix(ext)


def _lines(path: Path) -> pl.LazyFrame:
    """The body lines of a trace as one string column (comments and header skipped)."""
    opts = dict(has_header=False, separator="\x1f", quote_char=None, comment_prefix="#",
                new_columns=["line"], infer_schema=False)
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return pl.read_csv(f.read(), **opts).lazy()
    return pl.scan_csv(path, **opts)


def _parse_header(line: str) -> tuple[int, list[tuple[int, int, int, int]]]:
    """End time in ns and (appl, task, threads, node) for every task of the header."""
    m = _HEADER.match(line.strip())
    if not m:
        raise ValueError(f"not a Paraver trace header: {line[:80]!r}")
    scale = {"ns": 1, "us": 1_000, "ms": 1_000_000}.get(m["unit"] or "us", 1_000)
    end = int(m["end"]) * scale
    rest = m["rest"]
    n_appl, _, apps = rest.partition(":")
    tasks = []
    for appl, spec in enumerate(re.findall(r"\d+\(([^)]*)\)", apps)[: int(n_appl)], start=1):
        for task, pair in enumerate(spec.split(","), start=1):
            threads, node = pair.split(":")
            tasks.append((appl, task, int(threads), int(node)))
    return end, tasks


def _row_labels(path: Path) -> tuple[list[str], list[str]]:
    """THREAD and TASK labels of the .row file (empty lists if absent)."""
    levels: dict[str, list[str]] = {}
    if not path.exists():
        return [], []
    current: list[str] | None = None
    remaining = 0
    for line in path.read_text().splitlines():
        if remaining:
            current.append(line)  # type: ignore[union-attr]
            remaining -= 1
            continue
        m = re.match(r"^LEVEL (\w+) SIZE (\d+)", line)
        if m:
            current = levels.setdefault(m[1], [])
            remaining = int(m[2])
    return levels.get("THREAD", []), levels.get("TASK", [])


def _rows(tasks: list[tuple[int, int, int, int]], labels: list[str],
          task_labels: list[str]) -> pl.DataFrame:
    recs = []
    for t_index, (appl, task, threads, node) in enumerate(tasks):
        for thread in range(1, threads + 1):
            recs.append((appl, task, thread, node, t_index))
    df = pl.DataFrame(recs, schema=["appl", "task", "thread", "node", "task_index"],
                      orient="row")
    n = df.height
    lab = (labels + [""] * n)[:n] if labels else [
        f"THREAD {a}.{t}.{h}" for a, t, h, _, _ in recs]
    tlab = [task_labels[i] if i < len(task_labels) else f"TASK {tasks[i][0]}.{tasks[i][1]}"
            for i in range(len(tasks))]
    df = df.with_columns(pl.Series("label", lab), pl.int_range(pl.len()).alias("row"))
    gpu = pl.col("label").str.extract(r"^GPU (\d+) ", 1).cast(pl.Int64)
    kind = (pl.when(pl.col("label").str.contains(r"^GPU \d+ metrics")).then(pl.lit("metrics"))
            .when(pl.col("label").str.contains(r"^GPU \d+ ctx \d+ stream \d+"))
            .then(pl.lit("gpu")).otherwise(pl.lit("cpu")))
    return df.with_columns(gpu.alias("device"), kind.alias("kind"),
                           pl.Series("task_label", tlab).gather(df["task_index"]))


def read_trace(path: str | Path, types: set[int] | frozenset[int],
               state_rows: str = "cpu") -> Trace:
    """Read a trace, keeping events of `types` (all rows) and the states of the rows of
    kind `state_rows` ('cpu', 'gpu', 'all')."""
    path = Path(path)
    with _open_text(path) as f:
        header = f.readline()
    end, tasks = _parse_header(header)
    labels, task_labels = _row_labels(_companion(path, ".row"))
    rows = _rows(tasks, labels, task_labels)
    key = rows.select("appl", "task", "thread", "row")

    lines = _lines(path).with_row_index("seq")
    wanted = "|".join(str(t) for t in sorted(types))
    ev = (lines.filter(pl.col("line").str.starts_with("2:")
                       & pl.col("line").str.contains(f":(?:{wanted}):"))
          .with_columns(pl.col("line").str.split(":").alias("f"))
          .select("seq",
                  pl.col("f").list.get(2).cast(pl.Int64).alias("appl"),
                  pl.col("f").list.get(3).cast(pl.Int64).alias("task"),
                  pl.col("f").list.get(4).cast(pl.Int64).alias("thread"),
                  pl.col("f").list.get(5).cast(pl.Int64).alias("time"),
                  pl.col("f").list.slice(6).list.gather_every(2).alias("type"),
                  pl.col("f").list.slice(6).list.gather_every(2, offset=1).alias("value"))
          .with_columns(pl.int_ranges(0, pl.col("type").list.len()).alias("pair"))
          .explode(["type", "value", "pair"])
          .with_columns(pl.col("type").cast(pl.Int64), pl.col("value").cast(pl.Int64))
          .filter(pl.col("type").is_in(sorted(types)))
          .with_columns((pl.col("seq").cast(pl.Int64) * 4096 + pl.col("pair")).alias("seq")))
    st = (lines.filter(pl.col("line").str.starts_with("1:"))
          .with_columns(pl.col("line").str.split(":").alias("f"))
          .select(*(pl.col("f").list.get(i).cast(pl.Int64).alias(n) for i, n in
                    ((2, "appl"), (3, "task"), (4, "thread"), (5, "begin"), (6, "end"),
                     (7, "state")))))
    events = (ev.collect().join(key, on=["appl", "task", "thread"], how="inner")
              .select("row", "time", "type", "value", "seq"))
    states = st.collect().join(key, on=["appl", "task", "thread"], how="inner")
    if state_rows != "all":
        keep = rows.filter(pl.col("kind") == state_rows)["row"]
        states = states.filter(pl.col("row").is_in(keep.implode()))
    states = states.select("row", "begin", "end", "state")
    end = max(end, int(states["end"].max() or 0), int(events["time"].max() or 0))
    return Trace(path, end, rows, events, states)


def open_intervals(trace: Trace, types: tuple[int, ...]) -> pl.DataFrame:
    """(row, start, end) where the last event of `types` on the row has a value != 0 -
    Paraver's `Last Evt Val` filtered on `types`, then `Sign`."""
    ev = (trace.events.filter(pl.col("type").is_in(list(types)))
          .sort(["row", "time", "seq"]))
    ev = ev.with_columns(pl.col("time").shift(-1).over("row").fill_null(trace.end)
                         .alias("next"))
    return (ev.filter((pl.col("value") != 0) & (pl.col("next") > pl.col("time")))
            .select("row", pl.col("time").alias("start"), pl.col("next").alias("end")))


def event_types(path: str | Path) -> set[int]:
    """Every event type written in a trace (to check that a cfg's types occur in it)."""
    lines = _lines(Path(path))
    types = (lines.filter(pl.col("line").str.starts_with("2:"))
             .select(pl.col("line").str.split(":").list.slice(6).list.gather_every(2)
                     .alias("t"))
             .explode("t").select(pl.col("t").cast(pl.Int64)).unique().collect())
    return set(types["t"].to_list())
