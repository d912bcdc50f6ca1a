"""Layers on the GPU: every NVTX range projected onto the GPU, and the level a person reads
as the model's layers, found by itself.

A layer, an operator or a solver phase is an NVTX range on a CPU thread; the GPU runs its
work later. `projection.py` projects every range onto the GPU as nsys does (equal to
`nsys recipe nvtx_gpu_proj_trace`/`nvtx_gpu_proj_sum`); here, from a trace's activities:

* `instances`: every projected range — rank, thread row, name, domain, nsys' level and
  parent, its CPU start and duration, its projected start and duration, the launching calls
  with GPU work (`ops`), and beyond nsys: the GPU's busy time inside it (the union of its
  work), that time per category (compute kernels, NCCL kernels, copies by direction,
  memset), and the idle time inside its span;
* `names`: per range name (per rank, and for the job: rank null) the count, mean, sample
  standard deviation, min, quartiles (linear), median, max and sum of the projected
  durations (nsys' `nvtx_gpu_proj_sum`: ranges whose projection lasts 0 ns left out);
* the GPU work launched outside every range (nsys' unnamed row) and the ranges that
  launched nothing, counted.

The layer level (`pick_layers`), like the step (`steps.py`), is chosen among candidates with
why and the runners-up: a family of numbered ranges under one parent (`layer_3`,
`TransformerBlock[3]`, `encoder.layers.3`: each number a layer); else the ranges that repeat
as the step's children (`Forward pass`, `Backward pass`, ...); else PyTorch's operator
ranges (`aten::*`, `autograd::engine::evaluate_function: *Backward0`, the outermost of
them). `--layers NAME|DEPTH` names it instead. Per layer: its GPU time and share of the
step's (or the run's), the split by category, the idle time inside it, its top kernels, per
step; and the outliers: an instance much slower than its numbered siblings, than the same
layer on the other ranks, or than itself in the other steps.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from .. import _alloc
from . import projection as P
from .activities import Activities
from .store import handed_over, taken_over
from .steps import CONTAINER_NAMES, MIN_FOR_OUTLIERS, OPERATOR, STEP_NAMES, StepPick, \
    codes_of, family, fold, instance_windows

# what the GPU work is, by category (the columns of the tables, in this order)
CATEGORIES = ("compute kernels", "NCCL kernels", "memcpy HtoD", "memcpy DtoH", "memcpy DtoD",
              "memcpy peer", "memcpy other", "memset")
_MEMCPY_DIRECTION = (("Host-to-Device", 2), ("Device-to-Host", 3), ("Device-to-Device", 4),
                     ("Peer-to-Peer", 5))
MEMSET_CATEGORY = 7
OTHER_COPY = 6

COVER_FLOOR = 0.25  # a layer level holds this share of the step's GPU time at least
TOLERANCE = 0.8  # and this fraction of what the level that holds most holds
SIBLING_SHARE = 0.5  # a child of the step is a layer when it is in this share of the steps
OUTLIER_RATIO = 1.5  # an instance this many times its peers' median GPU time
OUTLIER_FLOOR = 0.01  # and longer by this share of the step's (or the run's) GPU time
TOP_KERNELS = 3
SLOW_SHARE = 0.1  # a layer explains a slow step when it has this share of its extra time


def memop_categories(acts: Activities) -> dict[int, int]:
    """The category code (index in CATEGORIES) of each memory operation id."""
    names = acts.memop_names
    code = {}
    for op, name in zip(names["id"].to_list(), names["name"].to_list()):
        if name == "memset":
            code[op] = MEMSET_CATEGORY
        elif name.startswith("memcpy"):
            code[op] = next((c for d, c in _MEMCPY_DIRECTION if name.endswith(d)), OTHER_COPY)
    return code


_WORK = ("row", "start", "end", "launch", "launch_row", "kernel", "nccl", "full", "op")


def launched_work(acts: Activities, by: str = "launch"):
    """The GPU work that has a launching call (as `projection.Work.of` keeps it), chunk by
    chunk (`by`: "launch", each call's activities in one chunk; "start", in start order):
    frames of row, start, end, launch, launch_row, kind (CATEGORIES code), full (a kernel's
    name id, -1 for a copy), calls_at and zero (the calls of its launch instant:
    `Activities.calls`)."""
    code = memop_categories(acts)
    calls = acts.calls
    for items in acts.gpu_items(list(_WORK), by=by):
        w = items.filter(pl.col("launch_row").is_not_null())
        if not w.height:
            continue
        kind = pl.when(pl.col("kernel")).then(pl.col("nccl").cast(pl.Int8)).otherwise(
            pl.col("op").cast(pl.Int64).replace_strict(code, default=OTHER_COPY,
                                                       return_dtype=pl.Int8))
        w = w.select("row", "start", "end", "launch", "launch_row", kind.alias("kind"),
                     pl.when(pl.col("kernel")).then(pl.col("full")).otherwise(-1)
                     .alias("full"))
        if calls.height:  # instants of several calls, or of calls of 0 ns
            w = w.join(calls.select(pl.col("row").alias("launch_row"),
                                    pl.col("start").alias("launch"), "calls", "zero"),
                       on=["launch_row", "launch"], how="left", maintain_order="left")
        yield w


def _arrays(w: pl.DataFrame) -> dict:
    out = {k: w[k].to_numpy() for k in ("row", "start", "end", "launch", "launch_row",
                                          "kind")}
    if "calls" in w.columns:
        out["calls_at"] = w["calls"].fill_null(1).to_numpy()
        out["zero"] = w["zero"].fill_null(False).to_numpy()
    return out


def _rank_of_row(acts: Activities, upto: int = 0) -> np.ndarray:
    """Per trace row (0 .. the largest of the trace's and `upto`), its process's task index
    (-1: no such row), to look up the rank of many rows at once."""
    known = acts.rows["row"].to_numpy().astype(np.int64)
    table = np.full(max(int(known.max(initial=0)), upto) + 1, -1, np.int64)
    table[known] = acts.rows["task_index"].to_numpy()
    return table


def _beside(keys: pl.DataFrame, table: pl.DataFrame, on: str) -> pl.DataFrame:
    """`table`'s columns for each row of `keys` (null where its key is not there), in
    `keys`' order: to set beside a large frame instead of joining it (a join copies every
    column of the frame)."""
    return keys.join(table, on=on, how="left", maintain_order="left")


_INSTANCE_SCHEMA = {
    "id": pl.Int64, "rank": pl.Int64, "row": pl.Int32, "name": pl.Utf8, "domain": pl.Utf8,
    "level": pl.Int32, "parent": pl.Int64, "cpu_start": pl.Int64, "cpu_dur": pl.Int64,
    "start": pl.Int64, "dur": pl.Int64, "ops": pl.Int64, "busy": pl.Int64, "idle": pl.Int64,
    **{c: pl.Int64 for c in CATEGORIES}}


_DERIVED = ("busy", "idle")  # kept as an array beside the packed columns (`fill_busy`)


def _pack(column: pl.Series) -> bytes:
    """A column compressed (Arrow IPC, zstd): the instances' take ~6x less."""
    buf = io.BytesIO()
    column.to_frame().write_ipc(buf, compression="zstd")
    return buf.getvalue()


@dataclass
class Projected:
    """Every NVTX range of a trace projected onto the GPU (times in the trace's ns; `rank`
    is the task index, `row` the thread's trace row, `id` the range's index, `parent` the
    id of nsys' parent range; level -1: a range nsys cannot nest, the twin of another).
    The instances are kept packed, each column compressed as it is made (~30 bytes a
    range, not ~170), and read back a few columns at a time (`columns`): a run's ranges can
    be millions, and the layer pick reads a few of their columns, the layers' members a
    few of their rows."""

    packed: dict[str, bytes]  # the instances' columns (_INSTANCE_SCHEMA, by start) but busy, idle
    busy: np.ndarray  # per instance, the GPU's busy time inside it (-1: not known yet)
    ranges: int = 0  # NVTX ranges of the trace
    not_projected: int = 0  # ranges whose calls launched nothing on the GPU
    unassigned: dict = field(default_factory=dict)  # work launched in no range
    # the ranges' segments of the work and each projected instance's slice of them, with
    # the activities to read the work again from (for layer tables)
    segments: P.Segments | None = None
    slices: tuple[np.ndarray, np.ndarray] | None = None
    devices: pl.DataFrame | None = None  # row, g: each GPU row's device (idle's key)
    source: Activities | None = None
    work_time: int = 0  # the GPU time of all the work launched by a call
    totals: dict = field(default_factory=dict)  # (step, domain) -> its GPU time (`_total_gpu`)

    @property
    def projected(self) -> int:
        """How many ranges launched GPU work (the instances)."""
        return self.busy.size

    @property
    def instances(self) -> pl.DataFrame:
        """The projected ranges (`_INSTANCE_SCHEMA`, by start), every column read back."""
        return self.columns(*_INSTANCE_SCHEMA)

    def columns(self, *names: str) -> pl.DataFrame:
        """The instances' columns `names` (of `_INSTANCE_SCHEMA`), only those read back."""
        stored = [c for c in names if c not in _DERIVED]
        need = stored + (["dur"] if "idle" in names and "dur" not in stored else [])
        if not self.packed:
            return pl.DataFrame(schema={c: _INSTANCE_SCHEMA[c] for c in names})
        cols = [pl.read_ipc(io.BytesIO(self.packed[c]))[c] for c in need]
        if "busy" in names or "idle" in names:
            cols.append(pl.Series("busy", self.busy).set(pl.Series(self.busy < 0), None))
        frame = pl.DataFrame(cols)
        if "idle" in names:
            frame = frame.with_columns((pl.col("dur") - pl.col("busy")).alias("idle"))
        return frame.select(names)

    @property
    def work(self) -> bool:
        """Whether the work can still be read (`Layers.release` lets it go)."""
        return self.segments is not None and self.source is not None

    def fill_busy(self, ids: pl.Series) -> None:
        """The busy time (the union of the work) and idle time of the instances `ids` that
        lack it (their work ran on several rows): one pass over the work in start order."""
        if self.projected == 0 or not self.work:
            return
        k = np.flatnonzero(np.isin(self.columns("id")["id"].to_numpy(), ids.to_numpy())
                           & (self.busy < 0))
        if k.size == 0:
            return
        lo, hi = self.slices[0][k], self.slices[1][k]
        wanted = P.WantedUnion(lo, hi)
        for w in launched_work(self.source, by="start"):
            wanted.add(self.segments.of(w["launch_row"].to_numpy(), w["launch"].to_numpy()),
                       w["start"].to_numpy(), w["end"].to_numpy())
        # in place: frames read back before may share the array, but only where they hold
        # nulls (the instances filled here), so what they show does not change
        self.busy[k] = wanted.covered

    def names(self) -> pl.DataFrame:
        """Per range name, per rank and for the job (rank null): the statistics of
        `name_stats`. Grouped by one key at a time, an integer per (name, rank): a group_by
        on two columns encodes every row (~50 bytes a range: 43 MB at 0.9M ranges, at the
        end of a run's analysis), one of integers or categories does not."""
        name = self.columns("name")["name"].cast(pl.Categorical)
        code = pl.col("name").to_physical().cast(pl.Int64)
        inst = (self.columns("rank", "dur").with_columns(name).filter(pl.col("dur") > 0)
                .select("name", "dur", (code * (1 << 32) + pl.col("rank")).alias("key")))
        del name
        of_code = inst.select("name").unique().select("name", code.alias("code"))
        per = (name_stats(inst.select("key", "dur"), ["key"])
               .with_columns((pl.col("key") // (1 << 32)).alias("code"),
                             (pl.col("key") % (1 << 32)).alias("rank"))
               .join(of_code, on="code")
               .select("name", "rank", pl.exclude("name", "rank", "key", "code")))
        job = name_stats(inst.select("name", "dur"), ["name"]).with_columns(
            pl.lit(None, pl.Int64).alias("rank"))
        return pl.concat([job.select(per.columns), per]).with_columns(
            pl.col("name").cast(pl.Utf8)).sort(
            "rank", "sum", "name", descending=[False, True, False], nulls_last=False)

    def to_dict(self) -> dict:
        return {"ranges": self.ranges, "projected": self.projected,
                "not_projected": self.not_projected, "unassigned": self.unassigned,
                "instances": self.instances.to_dicts(), "names": self.names().to_dicts()}


def name_stats(instances: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Count, mean, std (sample; null for one range), min, q1, median, q3 (linear
    interpolation), max and sum of the projected durations per `by`, as nsys'
    `nvtx_gpu_proj_sum` gives them (ranges projected to 0 ns left out), with the GPU's busy
    time beside (sum)."""
    d = pl.col("dur")
    return (instances.filter(d > 0).group_by(by)
            .agg(pl.len().cast(pl.Int64).alias("count"), d.mean().alias("mean"),
                 d.std().alias("std"), d.min().alias("min"),
                 d.quantile(0.25, "linear").alias("q1"), d.median().alias("median"),
                 d.quantile(0.75, "linear").alias("q3"), d.max().alias("max"),
                 d.sum().alias("sum")))


def project_ranges(acts: Activities, busy: bool = False) -> Projected:
    """Every range of `acts` projected onto the GPU (module docstring). `busy`: the union of
    the work of every range; else only of those whose work ran on one GPU row (a sum), the
    others' null until `fill_busy` (the layers and the steps get theirs)."""
    r = acts.ranges
    if r.height == 0:
        return Projected({}, np.empty(0, np.int64))
    row = r["row"].to_numpy()
    s = r["start"].to_numpy()
    e = s + r["dur"].to_numpy()
    segments = P.Segments(row, s, e)
    # what making the boundaries freed in glibc's heap (sorts and searches of every
    # range's times) goes back before the sums are made: 80 MB for 0.9M ranges, which
    # the heap would otherwise keep under its trim threshold (`_alloc.map_large_blocks`)
    _alloc.trim()
    sums = P.RangeSums(segments, s, e, len(CATEGORIES))
    for w in launched_work(acts):  # one pass over the work, summed per range
        a = _arrays(w)
        sums.add(a["launch_row"], a["launch"], a["row"], a["start"], a["end"], a["kind"],
                 a.get("calls_at"), a.get("zero"))
        del a
    # the ranges with GPU work, by start; busy time: the summed durations where a range's
    # work ran on one row; the union, which needs its work in start order, where asked
    # (`busy`) or later for the layers and the steps. The table is made once from the
    # projected ranges' arrays (a join per column would copy it whole each time)
    _alloc.trim()  # and what the chunks of work freed
    keep, proj = sums.projected()
    unassigned, work_time = sums.unassigned, sums.work_time
    del sums
    height = keep.size
    packed: dict[str, bytes] = {}

    def pack(c: str, values) -> None:
        packed[c] = _pack(pl.Series(c, values).cast(_INSTANCE_SCHEMA[c]))

    # each column packed as it is made, the arrays it came from let go: the table is never
    # whole in memory. The projection's columns first, before the nesting sorts every
    # range: the two sets of arrays are never held at once (~300 MB at 3M ranges)
    pack("start", proj["start"])
    pack("dur", proj.pop("end") - proj.pop("start"))
    pack("ops", proj.pop("ops"))
    times = proj.pop("time")
    for k, c in enumerate(CATEGORIES):  # a kind no range's work had: zeros, made here
        t, times[k] = times[k], None
        pack(c, np.zeros(height, np.int64) if t is None else t)
        del t
    del times
    _alloc.trim()
    parent, level = P.nesting(row, s, e)
    rank = _rank_of_row(acts, int(row.max(initial=0)))[row[keep]]
    made = {
        "id": lambda: keep.astype(np.int64),
        "rank": lambda: pl.Series(rank).set(pl.Series(rank < 0), None),
        "row": lambda: row[keep].astype(np.int32),
        "name": lambda: _beside(r["name"].gather(keep).to_frame("id"), acts.range_names,
                                "id")["name"],
        "domain": lambda: _beside(r["type"].gather(keep).to_frame("type"), acts.domains,
                                  "type")["domain"],
        "level": lambda: pl.Series(level[keep]).set(pl.Series(level[keep] < 0), None),
        "parent": lambda: pl.Series(parent[keep]).set(pl.Series(parent[keep] < 0), None),
        "cpu_start": lambda: s[keep], "cpu_dur": lambda: r["dur"].gather(keep)}
    for c, make in made.items():
        pack(c, make())
    del made
    packed = {c: packed[c] for c in _INSTANCE_SCHEMA if c in packed}
    busy_k = np.asarray(proj.pop("busy"), np.int64)
    slices = (proj["lo"], proj["hi"])
    del rank, proj, parent, level, keep
    devices = acts.rows.filter(pl.col("kind") == "gpu").select(
        "row", (pl.col("task_index") * 1_000_000 + pl.col("device")).cast(pl.Int64).alias("g"))
    out = Projected(packed, busy_k, r.height, r.height - height, unassigned, segments, slices,
                    devices, acts, work_time)
    _alloc.trim()  # the projection's arrays, let go as they were packed
    if busy:
        out.fill_busy(out.columns("id")["id"])
    return out


# ---------------------------------------------------------------- the layer level --

@dataclass
class LayerPick:
    """The layer level: `kind` ('numbered', 'children of the step', 'operators', 'named',
    'depth'; None: none found), the families it holds (digit runs folded to '#'; 'depth':
    the level), why, and the candidates with why each lost."""

    kind: str | None
    families: list[str]
    why: str
    candidates: pl.DataFrame = field(default_factory=pl.DataFrame)
    numbered: bool = False  # each number a layer of its own ('layer_3')
    depth: int | None = None  # 'depth': nsys' level

    def to_dict(self) -> dict:
        return {"kind": self.kind, "families": self.families, "why": self.why,
                "numbered": self.numbered, "depth": self.depth,
                "candidates": self.candidates.to_dicts()}


def _ancestor_flag(parent: np.ndarray, level: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """Per range (arrays indexed by range id; parent -1 at a root; level -1: unknown): has
    an ancestor with `flag`. One vectorised step per nesting level."""
    out = np.zeros(flag.size, dtype=bool)
    for lv in range(1, int(level.max(initial=0)) + 1):
        at = np.flatnonzero(level == lv)
        p = parent[at]
        ok = p >= 0
        out[at[ok]] = flag[p[ok]] | out[p[ok]]
    return out


def _name_codes(acts: Activities) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The range names of a run as codes: (names: nc, name, fc, operator, n — each distinct
    name, its family's code, whether it is a PyTorch operator's, the number of a name of
    one number; families: fc, family; of_id: id, nc — each range name id's code). Codes
    follow the texts' sorted order, so that sorting by code sorts by text."""
    ids = acts.range_names.select("id", pl.col("name").cast(pl.Utf8))
    names = (ids.select("name").drop_nulls().unique().sort("name")
             .with_row_index("nc").with_columns(pl.col("nc").cast(pl.Int64),
                                                 family("name").alias("family")))
    families = (names.select("family").unique().sort("family", nulls_last=False)
                .with_row_index("fc").with_columns(pl.col("fc").cast(pl.Int64)))
    names = (names.join(families, on="family", how="left", nulls_equal=True)
             .select("nc", "name", "fc",
                     pl.col("name").str.contains(OPERATOR.pattern).fill_null(False)
                     .alias("operator"), _number("name")).sort("nc"))
    of_id = ids.join(names.select("name", "nc"), on="name", how="inner").select("id", "nc")
    return names, families, of_id


@dataclass
class _Tree:
    """The projected instances (their index `at`, id, level, parent and GPU time, the
    columns the layer pick reads) with their name's and family's codes (`nc`, `fc`: of
    `names` and `families`, `_name_codes`), step, operator flag and whether an ancestor is
    an operator, plus the parent/level arrays by range id. Codes, not texts: a run's
    ranges can be millions (a range per operator), its distinct names a few hundred; the
    pick's tests on texts are made on the names' table."""

    inst: pl.DataFrame
    parent: np.ndarray
    level: np.ndarray
    names: pl.DataFrame
    families: pl.DataFrame

    @classmethod
    def of(cls, proj: Projected, acts: Activities, step: StepPick | None) -> "_Tree":
        gpu = np.zeros(proj.projected, np.int64)
        for c in CATEGORIES:  # one column read back at a time
            gpu += proj.columns(c)[c].to_numpy()
        inst = proj.columns("id", "level", "parent").with_row_index("at") \
            .with_columns(pl.Series("gpu", gpu))
        del gpu
        n = proj.ranges
        parent = np.full(n, -1, np.int64)
        level = np.full(n, -1, np.int32)
        ids = inst["id"].to_numpy()
        parent[ids] = inst["parent"].fill_null(-1).to_numpy()
        level[ids] = inst["level"].fill_null(-1).to_numpy()
        names, families, of_id = _name_codes(acts)
        nc = codes_of(acts.ranges["name"].gather(ids).to_numpy().astype(np.int64),
                      of_id["id"].to_numpy().astype(np.int64), of_id["nc"].to_numpy())
        named = nc >= 0
        at = np.maximum(nc, 0)
        if names.height:
            fc = names["fc"].to_numpy()[at]
            operator = named & names["operator"].to_numpy()[at]
        else:
            fc, operator = np.zeros(nc.size, np.int64), np.zeros(nc.size, bool)
        del at
        unnamed = pl.Series(~named)
        inst = inst.with_columns(pl.Series("nc", nc).set(unnamed, None),
                                 pl.Series("fc", fc).set(unnamed, None),
                                 pl.Series("operator", operator),
                                 step_of(proj, acts, step))
        del nc, fc, unnamed
        op = np.zeros(n, dtype=bool)
        op[ids] = operator
        inst = inst.with_columns(pl.Series("under_operator",
                                           _ancestor_flag(parent, level, op)[ids]))
        return cls(inst, parent, level, names, families)

    def name_codes(self, where: pl.Expr) -> pl.Series:
        """The codes of the names where `where` holds (an expression of the names' name,
        family, n, operator)."""
        return self.names.join(self.families, on="fc", how="left").filter(where)["nc"]

    def family_texts(self, codes: pl.Series) -> pl.Series:
        """The families of `codes`, in their order (null: a null code)."""
        return codes.rename("fc").to_frame().join(self.families, on="fc", how="left",
                                                   maintain_order="left")["family"]

    def outermost(self, member: pl.Expr, columns: tuple[str, ...] | None = None
                  ) -> pl.DataFrame:
        """The instances selected by `member` that have no selected ancestor (only
        `columns` of them, where given: a filter copies every column it keeps)."""
        ids = self.inst.filter(member)["id"].to_numpy()
        flag = np.zeros(self.parent.size, dtype=bool)
        flag[ids] = True
        inner = _ancestor_flag(self.parent, self.level, flag)
        inst = self.inst if columns is None else self.inst.select("id", *columns)
        return inst.filter(pl.col("id").is_in(ids[~inner[ids]]))

    def members(self, proj: Projected, member: pl.Expr) -> pl.DataFrame:
        """`outermost(member)` with every column of their instances (`_INSTANCE_SCHEMA`,
        read back a column at a time and only these rows kept), their family, step,
        operator flags and GPU time, and their slice of the work (lo, hi)."""
        picked = self.outermost(member)
        at = picked["at"].to_numpy()
        cols = [picked[c] if c in picked.columns else proj.columns(c)[c].gather(at)
                for c in _INSTANCE_SCHEMA]
        out = pl.DataFrame(cols)
        if proj.slices is not None:
            out = out.with_columns(pl.Series("lo", proj.slices[0][at]),
                                   pl.Series("hi", proj.slices[1][at]))
        return out.with_columns(self.family_texts(picked["fc"]),
                                *picked.select("operator", "step", "under_operator", "gpu")
                                .get_columns())


def step_of(proj: Projected, acts: Activities, step: StepPick | None) -> pl.Series:
    """Per projected instance, in their order: the step instance its CPU start lies in, on
    its own process (`steps.instance_windows`); null outside every step or without a step.
    Put back in order by position, not joined on the id (a hash table of every range)."""
    if step is None or step.name is None:
        return pl.repeat(None, proj.projected, dtype=pl.Int64, eager=True).alias("step")
    at = proj.columns("rank", "cpu_start").with_row_index("at")
    win = _step_windows(acts, step)
    hit = (at.sort("cpu_start").join_asof(win.sort("s_start"), left_on="cpu_start",
                                          right_on="s_start", by="rank",
                                          strategy="backward", check_sortedness=False)
           .select("at", pl.when(pl.col("cpu_start") < pl.col("s_end")).then(pl.col("step"))
                   .otherwise(None).alias("step"))
           .sort("at"))
    return hit["step"]


def _step_windows(acts: Activities, step: StepPick) -> pl.DataFrame:
    """(rank, step, s_start, s_end) of the step's instances on each process."""
    return instance_windows(acts, step.name, step.domain).rename(
        {"task_index": "rank", "instance": "step", "start": "s_start", "end": "s_end"})


_SUMMED = ("fc", "gpu", "level")  # what the pick reads of a candidate's instances
_one_number = pl.col("family").str.count_matches("#") == 1  # one number in the name
# a name whose family can number layers (the operator ranges are left out beside it)
_can_number = (_one_number & ~pl.col("family").str.contains(CONTAINER_NAMES.pattern)
               & ~pl.col("family").str.contains(STEP_NAMES.pattern))


def _is_step_range(tree: _Tree, step: StepPick | None) -> pl.Expr:
    if step is None or step.name is None:
        return pl.lit(False)
    return pl.col("nc").is_in(tree.name_codes(
        (pl.col("family") == fold(step.name)) | (pl.col("name") == step.name)).implode())


def pick_layers(proj: Projected, acts: Activities, step: StepPick | None = None,
                spec: str | None = None, tree: _Tree | None = None) -> LayerPick:
    """The layer level of a run (module docstring); `spec` ('NAME' or a depth) names it."""
    tree = tree or _Tree.of(proj, acts, step)
    # the columns the pick reads (its filters copy what they keep)
    tree = _Tree(tree.inst.select("id", "nc", "fc", "operator", "under_operator",
                                  "step", "level", "parent", "gpu"),
                 tree.parent, tree.level, tree.names, tree.families)
    inst = tree.inst
    if inst.height == 0:
        return LayerPick(None, [], "no NVTX range launched GPU work")
    in_step = pl.col("step").is_not_null()
    has_step = step is not None and step.name is not None
    total = float(_total_gpu(proj, acts, step)) or 1.0
    if spec is not None:
        spec = spec.strip()
        if spec.isdigit():
            fams = tree.family_texts(inst.filter(pl.col("level") == int(spec))["fc"]
                                     .unique()).sort()
            if fams.len() == 0:
                raise LayersNotFound(f"no projected range at depth {spec} (depths: 0-"
                                     f"{int(inst['level'].max() or 0)})")
            return LayerPick("depth", fams.to_list(), f"depth {spec} named with --layers",
                             depth=int(spec))
        hit = inst.filter(pl.col("nc").is_in(tree.name_codes(
            (pl.col("name") == spec) | (pl.col("family") == fold(spec))).implode()))
        if hit.height == 0:
            raise LayersNotFound(f"no projected NVTX range named '{spec}'")
        fam = tree.family_texts(hit["fc"].head(1))[0]
        numbered = "#" in fam and hit["nc"].n_unique() > 1
        return LayerPick("named", [fam], f"'{spec}' named with --layers", numbered=numbered)
    rows = []
    # the ranges that can number layers: the tests of their names made on the names'
    # table; of the instances, only the codes and the parent kept (a filter copies every
    # column it keeps)
    layer_names = tree.name_codes(_can_number)
    base = (inst.select("nc", "fc", "parent", "step", "operator", "under_operator")
            .filter(~pl.col("operator") & ~pl.col("under_operator")
                    & ~_is_step_range(tree, step)
                    & pl.col("nc").is_in(layer_names.implode())
                    & (in_step if has_step else pl.lit(True)))
            .join(tree.names.select("nc", "n"), on="nc", how="left")
            .select(pl.col("fc").alias("family"), "parent", pl.col("nc").alias("name"), "n"))
    # 1. numbered families: several numbers under one parent range
    for fam, per in _numbered_families(base).iter_rows():
        out = tree.outermost(pl.col("fc") == fam, _SUMMED)
        rows.append(("numbered", tree.family_texts(pl.Series([fam])).to_list(),
                     float(out["gpu"].sum() or 0), float(out["level"].mean() or 0),
                     f"{int(per)} numbered ranges under each parent"))
    del base
    # 2. the children of the step (descending through single wrappers)
    if has_step:
        parents = set(inst.filter(_is_step_range(tree, step))["id"].to_list())
        nsteps = max(inst["step"].n_unique(), 1)
        for _ in range(6):
            kids = inst.filter(pl.col("parent").is_in(list(parents)))
            per = (kids.filter(~pl.col("operator")).group_by("fc")
                   .agg(pl.col("step").n_unique().alias("steps"), pl.col("gpu").sum()))
            common = per.filter(pl.col("steps") >= SIBLING_SHARE * nsteps)
            if common.height == 0:
                break
            if common.height == 1:  # a wrapper ('forward' alone): its children
                parents = set(kids.filter(pl.col("fc") == common["fc"][0])["id"].to_list())
                continue
            codes = common.sort("gpu", descending=True)["fc"]
            fams = tree.family_texts(codes).to_list()
            out = tree.outermost(pl.col("fc").is_in(codes.implode()) & in_step, _SUMMED)
            rows.append(("children of the step", fams,
                         float(out["gpu"].sum() or 0),
                         float(out["level"].mean() or 0),
                         f"{len(fams)} ranges repeated in the steps"))
            break
    # 3. PyTorch's operators: the outermost operator ranges
    ops = tree.outermost(pl.col("operator") & (in_step if has_step else pl.lit(True)),
                         _SUMMED)
    if ops.height:
        by_time = (ops.group_by("fc").agg(pl.col("gpu").sum().alias("t"))
                   .join(tree.families, on="fc", how="left")
                   .sort("t", "family", descending=[True, False]))
        rows.append(("operators", by_time["family"].to_list(),
                     float(ops["gpu"].sum() or 0),
                     float(ops["level"].mean() or 0),
                     _count(ops['fc'].n_unique(), "operator range")
                     + " (aten::, autograd)"))
    order = {"numbered": 0, "children of the step": 1, "operators": 2}
    cand = pl.DataFrame(
        [(k, f, g, g / total, d, note) for k, f, g, d, note in rows],
        schema={"kind": pl.Utf8, "families": pl.List(pl.Utf8), "gpu": pl.Float64,
                "share": pl.Float64, "depth": pl.Float64, "note": pl.Utf8}, orient="row")
    if cand.height == 0:
        return LayerPick(None, [], "no numbered, repeated or operator ranges",
                         cand)
    best_share = float(cand["share"].max())
    cand = (cand.with_columns(pl.col("kind").replace_strict(order).alias("rank"),
                              ((pl.col("share") >= COVER_FLOOR)
                               & (pl.col("share") >= TOLERANCE * best_share)).alias("eligible"))
            .sort(~pl.col("eligible"), "rank", pl.col("gpu"), descending=[False, False, True])
            .drop("rank"))
    best = cand.row(0, named=True)
    where = f"of the {'step' if has_step else 'run'}'s GPU time"
    if not best["eligible"]:
        return LayerPick(None, [], f"no level holds {100 * COVER_FLOOR:.0f} % {where} "
                         f"(best: {best['kind']}, {100 * best['share']:.1f} %)", cand)
    fams = best["families"]
    shown = ", ".join(layer_label(f) for f in fams[:4]) \
        + (f" and {len(fams) - 4} more" if len(fams) > 4 else "")
    why = f"{best['kind']}: {shown} ({best['note']}; {100 * best['share']:.1f} % {where})"
    return LayerPick(best["kind"], fams, why, cand, numbered=best["kind"] == "numbered")


def _number(name: str) -> pl.Expr:
    """The number in a name of one number (column `n`)."""
    return pl.col(name).str.extract(r"(\d+)\D*$", 1).cast(pl.Int64, strict=False).alias("n")


def _numbered_families(one: pl.DataFrame) -> pl.DataFrame:
    """(family, per_parent): the families of `one` (ranges of one number in their name:
    family, parent, name, n its number; family and name strings or their codes) that
    number layers: several numbers under one parent range (the median parent 2 at least),
    and each name repeated (a layer runs in every step) or the numbers of a parent counting
    from 0 or 1 (layers of one pass) — not ids that never repeat ('seq = 960')."""
    per_parent = (one.group_by("family", "parent")
                  .agg(pl.col("name").n_unique().alias("k"), pl.col("n").min().alias("first"))
                  .group_by("family").agg(pl.col("k").median().alias("per_parent"),
                                          (pl.col("first") <= 1).mean().alias("from_zero")))
    repeats = one.group_by("family", "name").len().group_by("family").agg(
        pl.col("len").median().alias("repeats"))
    return (per_parent.join(repeats, on="family")
            .filter((pl.col("per_parent") >= 2)
                    & ((pl.col("repeats") >= 2) | (pl.col("from_zero") >= 0.5)))
            .select("family", "per_parent").sort("family"))


@dataclass
class ComparedRanges:
    """What a comparison reads of a run's projected ranges (`comparison_ranges`): numbers
    per range, strings per distinct name (a side's process hands it over).

    sums: per (range, domain, name, parent_range): count (instances), gpu (the GPU time of
        their work), span (projected durations summed);
    starts: per projected range, by CPU start: key (of `keys`), cpu_start, gpu;
    keys: key -> range."""

    sums: pl.DataFrame
    starts: pl.DataFrame
    keys: pl.DataFrame
    # where `starts` goes when pickled (`store.handed_over`: a side's process hands it
    # over through a file); None: pickled with the rest
    folder: Path | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.folder is not None:
            state["starts"] = handed_over(self.starts, self.folder / "handed-starts.arrow")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, starts=taken_over(state["starts"]))


def comparison_ranges(acts: Activities) -> ComparedRanges | None:
    """A run's projected ranges as a comparison reads them (`ComparedRanges`; None without
    NVTX ranges). A range is called by its name with digit runs folded to '#' ('Batch 12'
    is 'Batch #'), but the members of numbered layer families keep their number
    ('layer_4': each number a layer; `_numbered_families`, not operators, steps or epochs);
    its parent_range is that of nsys' parent range, where it launched GPU work too. The
    ranges are handled as codes of their names (a run can have millions, of a few dozen
    names): 20 bytes a range are kept."""
    r = acts.ranges
    if r.height == 0:
        return None
    proj = project_ranges(acts)
    proj.segments = proj.slices = proj.source = None  # only its columns are read here
    inst = proj.columns("id", "parent", "cpu_start", "dur")
    gpu = proj.columns(CATEGORIES[0])[CATEGORIES[0]]
    for c in CATEGORIES[1:]:
        gpu = gpu + proj.columns(c)[c]
    del proj
    # the names: one code per distinct text, its family, number and whether it can be a
    # numbered layer (not an operator, a container or a step)
    names, families, of_id = _name_codes(acts)
    texts = (names.join(families, on="fc", how="left")
             .select(pl.col("nc").cast(pl.UInt32).alias("code"), "name", "family", "n",
                     pl.col("fc").cast(pl.UInt32),
                     (_can_number & ~pl.col("operator")).alias("layer")))

    def codes(ids: pl.Series) -> pl.Series:
        return ids.replace_strict(of_id["id"], of_id["nc"], default=None,
                                  return_dtype=pl.UInt32)

    ids = inst["id"]
    code = codes(r["name"].gather(ids))
    parent = inst["parent"]
    # 1. the numbered layer families, from the ranges' codes and nsys' parents
    cand = texts.filter("layer").select(pl.col("code").alias("name"),
                                        pl.col("fc").alias("family"), "n")
    one = pl.DataFrame({"name": code, "parent": parent}).join(cand, on="name")
    kept = families.filter(pl.col("fc").is_in(_numbered_families(one)["family"].cast(
        pl.Int64).implode()))["family"]
    del one
    # 2. each name's key: the name in a numbered family, else its family; a range whose
    # name the trace lacks: '' (its family)
    key_text = texts.select("code", pl.when(pl.col("family").is_in(kept.implode()))
                            .then(pl.col("name")).otherwise(pl.col("family")).alias("range"))
    keys = (pl.concat([key_text.select("range"), pl.DataFrame({"range": [""]})])
            .unique().sort("range").with_row_index("key"))
    key_of = key_text.join(keys, on="range")
    empty = keys.filter(pl.col("range") == "")["key"][0]
    key = code.replace_strict(key_of["code"], key_of["key"], default=empty).fill_null(empty)
    # 3. the parent's key, where the parent was projected too
    projected = np.zeros(r.height, dtype=bool)
    projected[ids.to_numpy()] = True
    pidx = parent.fill_null(0).to_numpy()
    has = parent.is_not_null().to_numpy() & projected[pidx]
    pkey = codes(r["name"].gather(pl.Series(pidx))).replace_strict(
        key_of["code"], key_of["key"], default=empty).fill_null(empty)
    pkey = pkey.set(pl.Series(~has), None) if has.size else pkey
    rows = pl.DataFrame({"key": key, "type": r["type"].gather(ids), "name": code,
                         "parent_key": pkey, "cpu_start": inst["cpu_start"],
                         "dur": inst["dur"], "gpu": gpu})
    del inst, key, code, pkey, gpu, parent
    sums = (rows.group_by("key", "type", "name", "parent_key")
            .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("gpu").sum(),
                 pl.col("dur").sum().alias("span"))
            .join(keys, on="key", how="left")
            .join(keys.rename({"key": "parent_key", "range": "parent_range"}),
                  on="parent_key", how="left")
            .join(acts.domains, on="type", how="left")
            .join(texts.select(pl.col("code").alias("name"), pl.col("name").alias("text")),
                  on="name", how="left")
            .select("range", pl.col("domain").fill_null(""), pl.col("text").alias("name"),
                    "parent_range", "count", "gpu", "span"))
    starts = rows.select("key", "cpu_start", "gpu").sort("cpu_start", "key", "gpu")
    return ComparedRanges(sums, starts, keys)


class LayersNotFound(ValueError):
    """`--layers` names a range or depth the trace does not have."""


# ---------------------------------------------------------------- the layer tables --

RATE_METRICS = ("SM Active", "SM Issue", "Tensor Active", "Tensor Active / FP16 Active",
                "DRAM Read Bandwidth", "DRAM Write Bandwidth", "Compute Warps in Flight")


@dataclass
class Layers:
    """The NVTX ranges of a run projected onto the GPU (`projected`), the layer level
    (`pick`) and its tables (times in ns):

    layers: per layer (a numbered range's name, else its family): instances, ranks, gpu
        (GPU time of its work, summed), busy (the union), span (projected durations summed),
        idle (inside the spans), share (of the step's GPU time, or the run's), the
        CATEGORIES, top_kernels (label, time); with the idle analysis, gap_idle and the idle
        causes inside its spans (`idle.<cause>`) and the main one (`idle_cause`); with GPU
        metrics, the time-weighted rates of its kernels (`rate.<metric>`) and `bound`;
    per_step: per layer, step and rank: instances, gpu, busy, span;
    outliers: kind ('siblings', 'ranks', 'steps'), layer, rank, step, gpu, median (of its
        peers), ratio;
    members: the layer instances (projected instances with their layer and step).
    """

    projected: Projected
    pick: LayerPick
    step: str | None = None
    layers: pl.DataFrame = field(default_factory=pl.DataFrame)
    per_step: pl.DataFrame = field(default_factory=pl.DataFrame)
    outliers: pl.DataFrame = field(default_factory=pl.DataFrame)
    members: pl.DataFrame = field(default_factory=pl.DataFrame)
    total: int = 0  # the GPU time the shares are of
    kernel_time: pl.DataFrame = field(default_factory=pl.DataFrame)  # layer, full, time
    notes: list[str] = field(default_factory=list)
    # with --iterations: per layer, its GPU time in the slowest and the median step
    slow_step: pl.DataFrame | None = None
    # (k, row, start, end): each member instance's work per GPU row (`buckets`)
    spans: pl.DataFrame | None = None

    def buckets(self) -> pl.DataFrame | None:
        """(instance, g, start, end): each layer instance's projected span on each device
        it ran on (g: the idle analysis' device key), for the idle analysis to sum the
        gaps inside them."""
        dev, m = self.projected.devices, self.members
        if self.spans is None or dev is None or m.height == 0:
            return None
        spans = self.spans.join(dev, on="row", how="inner")
        ids = m["id"].to_numpy()
        return (spans.with_columns(pl.Series("instance", ids[spans["k"].to_numpy()]))
                .group_by("instance", "g").agg(pl.col("start").min(), pl.col("end").max())
                .sort("instance", "g"))

    def release(self) -> None:
        """Let the segments and the slices go (what `buckets` and `fill_busy` read): the
        tables are made."""
        self.projected.segments = None
        self.projected.source = None
        self.projected.slices = None
        self.members = self.members.drop("lo", "hi", strict=False)

    def add_idle(self, idle) -> None:
        """The idle causes of each layer (`idle.IdleReport.layer_instances`)."""
        if idle is None or self.layers.height == 0:
            return
        rows = [{"id": d["instance"], "gap_idle": d["idle"],
                 **{f"idle.{k}": v for k, v in d["causes"].items()}}
                for d in idle.layer_instances]
        per = pl.DataFrame(rows).fill_null(0) if rows else \
            pl.DataFrame(schema={"id": pl.Int64, "gap_idle": pl.Int64})
        causes = [c for c in per.columns if c.startswith("idle.")]
        sums = (self.members.select("id", "layer").join(per, on="id", how="inner")
                .group_by("layer").agg(pl.col("gap_idle").sum(),
                                       *(pl.col(c).sum() for c in causes)))
        if not causes:
            sums = sums.with_columns(pl.lit(None, pl.Utf8).alias("idle_cause"))
        else:
            main = pl.concat_list([pl.struct(pl.lit(c[5:]).alias("c"), pl.col(c).alias("t"))
                                   for c in causes])
            sums = sums.with_columns(
                main.list.eval(pl.element().sort_by(pl.element().struct.field("t"),
                                                    descending=True).first())
                .list.first().struct.field("c").alias("idle_cause"))
        self.layers = self.layers.join(sums, on="layer", how="left").with_columns(
            pl.col("gap_idle", *causes).fill_null(0))

    def add_rates(self, km) -> None:
        """The time-weighted GPU metric rates of each layer's kernels (`kernel_metrics`:
        the job's rate of each kernel), and a bound label from them."""
        if km is None or getattr(km, "empty", True) or self.kernel_time.height == 0:
            return
        from .kernel_metrics import bound

        per_gpu = km.rates.filter((pl.col("device") != "job")
                                  & pl.col("metric").is_in(list(RATE_METRICS))
                                  & pl.col("rate").is_not_null() & pl.col("rate").is_not_nan()
                                  & (pl.col("time") > 0))
        if per_gpu.height == 0:
            return
        # each kernel's rate over the GPUs, weighted by its sampled time on each (sums in
        # one order: the frames' orders vary from run to run, and the last digit with them)
        job = (per_gpu.sort("kernel", "metric", "device")
               .group_by("kernel", "metric", maintain_order=True).agg(
                   ((pl.col("rate") * pl.col("time")).sum() / pl.col("time").sum())
                   .alias("rate")))
        kt = (self.kernel_time.join(job.select(pl.col("kernel").alias("full"), "metric",
                                               "rate"), on="full", how="inner")
              .sort("layer", "metric", "full"))
        w = (kt.group_by("layer", "metric", maintain_order=True)
             .agg(((pl.col("rate") * pl.col("time")).sum() / pl.col("time").sum())
                  .alias("rate"))
             .pivot(on="metric", index="layer", values="rate"))
        w = w.rename({c: f"rate.{c}" for c in w.columns if c != "layer"})
        bounds = {r["layer"]: bound({k[5:]: v for k, v in r.items() if k.startswith("rate.")})
                  for r in w.iter_rows(named=True)}
        w = w.with_columns(pl.col("layer").replace_strict(bounds, return_dtype=pl.Utf8)
                           .alias("bound"))
        self.layers = self.layers.join(w, on="layer", how="left")

    def add_iterations(self, it) -> None:
        """Per step, which layer makes the slowest step slow (against the median step)."""
        if it is None or self.per_step.height == 0 or it.slowest is None:
            return
        per = self.per_step.group_by("layer", "step").agg(pl.col("gpu").sum())
        slow = per.filter(pl.col("step") == it.slowest).rename({"gpu": "slow"})
        mid = per.filter(pl.col("step") == it.median).rename({"gpu": "mid"})
        d = (slow.drop("step").join(mid.drop("step"), on="layer", how="full", coalesce=True)
             .fill_null(0).with_columns((pl.col("slow") - pl.col("mid")).alias("delta"))
             .sort("delta", "layer", descending=[True, False]))
        steps = dict(zip(it.steps["instance"].to_list(), it.steps["duration"].to_list()))
        longer = steps.get(it.slowest, 0) - steps.get(it.median, 0)
        if d.height and d["delta"][0] > 0 and d["delta"][0] >= SLOW_SHARE * longer:
            r = d.row(0, named=True)
            self.notes.append(
                f"slowest step {it.slowest}: {layer_label(r['layer'])} has "
                f"{(r['slow'] - r['mid']) / 1e6:+.3f} ms of GPU time against the median "
                f"step {it.median} ({r['mid'] / 1e6:.3f} -> {r['slow'] / 1e6:.3f} ms; the "
                f"step is {longer / 1e6:.3f} ms longer)")
        elif d.height:
            self.notes.append(
                f"slowest step {it.slowest}: no layer's GPU time explains it (the largest "
                f"change, {layer_label(d['layer'][0])}, {d['delta'][0] / 1e6:+.3f} ms, of "
                f"{longer / 1e6:.3f} ms)")
        self.slow_step = d

    def to_dict(self) -> dict:
        return {"projection": self.projected.to_dict(), "step": self.step,
                "pick": self.pick.to_dict(), "total": self.total,
                "layers": self.layers.to_dicts(), "per_step": self.per_step.to_dicts(),
                "outliers": self.outliers.to_dicts(), "notes": self.notes}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def layer_label(layer: str) -> str:
    """A layer's name as a table shows it: PyTorch's operator ranges without the autograd
    prefix and the sequence number."""
    out = re.sub(r"^autograd::engine::evaluate_function: ", "", layer)
    return re.sub(r"(?:, (?:seq|op_id) = [#\d]+)+$", "", out)


def analyze_layers(acts: Activities, step: StepPick | None = None, spec: str | None = None
                   ) -> Layers:
    """Every range of `acts` projected onto the GPU, the layer level (`spec` names it) and
    its tables (`Layers`)."""
    proj = project_ranges(acts)
    if proj.projected == 0:
        why = "no NVTX range" if proj.ranges == 0 else "no NVTX range launched GPU work"
        return Layers(proj, LayerPick(None, [], why))
    tree = _Tree.of(proj, acts, step)
    pick = pick_layers(proj, acts, step, spec, tree)
    step_name = step.name if step is not None else None
    if pick.kind is None:
        return Layers(proj, pick, step_name)
    member = (pl.col("level") == pick.depth) if pick.kind == "depth" \
        else pl.col("fc").is_in(tree.families.filter(pl.col("family").is_in(pick.families))
                                ["fc"].implode())
    # the union of the work of the layers' instances and the steps', which are shown
    wanted = tree.inst.select("id", "level", "fc", "nc").filter(
        member | _is_step_range(tree, step))["id"]
    proj.fill_busy(wanted)
    tree.inst = tree.inst.with_columns(proj.columns("busy", "idle").get_columns())
    has_step = step is not None and step.name is not None
    if has_step and pick.kind not in ("named", "depth"):
        member = member & pl.col("step").is_not_null()
    members = tree.members(proj, member).with_columns(
        (pl.col("name") if pick.numbered else pl.col("family")).alias("layer"))
    total = _total_gpu(proj, acts, step)
    kernel_time, spans = _member_sums(proj, acts, members)
    layers = (members.group_by("layer")
              .agg(pl.len().cast(pl.Int64).alias("instances"),
                   pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"),
                   pl.col("gpu").sum(), pl.col("busy").sum(), pl.col("dur").sum().alias("span"),
                   pl.col("idle").sum(), *(pl.col(c).sum() for c in CATEGORIES),
                   pl.col("start").min().alias("first"))
              .with_columns((pl.col("gpu") / max(total, 1)).alias("share"))
              .join(_top_kernels(kernel_time, acts), on="layer", how="left")
              .sort("gpu", "layer", descending=[True, False]))
    per_step = (members.group_by("layer", "step", "rank")
                .agg(pl.len().cast(pl.Int64).alias("instances"), pl.col("gpu").sum(),
                     pl.col("busy").sum(), pl.col("dur").sum().alias("span"))
                .sort("step", "rank", "layer", nulls_last=True))
    if has_step:  # its GPU time per step (over the ranks): median and most
        spread = (per_step.filter(pl.col("step").is_not_null())
                  .group_by("layer", "step").agg(pl.col("gpu").sum())
                  .group_by("layer").agg(pl.col("gpu").median().alias("step_median"),
                                         pl.col("gpu").max().alias("step_max")))
        layers = layers.join(spread, on="layer", how="left")
    return Layers(proj, pick, step_name, layers, per_step,
                  _outliers(per_step, members, pick, total, has_step), members, total,
                  kernel_time, spans=spans)


def _member_of(n: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per segment, the index of the slice [lo, hi) that holds it (-1: none; the slices
    do not overlap)."""
    out = np.full(n + 1, -1, dtype=np.int64)
    size = np.maximum(hi - lo, 0)
    seg = np.repeat(lo - np.cumsum(size) + size, size) + np.arange(int(size.sum()))
    out[seg] = np.repeat(np.arange(lo.size, dtype=np.int64), size)
    return out


def _total_gpu(proj: Projected, acts: Activities, step: StepPick | None) -> int:
    """The GPU time the layers' shares are of: of the work launched (by any thread of its
    process) inside the step's instances, or of all the work (one pass over the work,
    once per step)."""
    if not proj.work:
        return 0
    if step is None or step.name is None:
        return proj.work_time
    key = (step.name, step.domain)
    if key not in proj.totals:
        proj.totals[key] = _launched_in_steps(proj, acts, step)
    return proj.totals[key]


def _launched_in_steps(proj: Projected, acts: Activities, step: StepPick) -> int:
    table = _rank_of_row(acts)
    win = _step_windows(acts, step).sort("s_start")
    total = 0
    for w in launched_work(acts):
        launches = pl.DataFrame({"rank": table[w["launch_row"].to_numpy()],
                                 "t": w["launch"].to_numpy(),
                                 "d": (w["end"] - w["start"]).to_numpy()})
        hit = (launches.sort("t").join_asof(win, left_on="t", right_on="s_start",
                                            by="rank", strategy="backward",
                                            check_sortedness=False)
               .filter(pl.col("t") < pl.col("s_end")))
        total += int(hit["d"].sum() or 0)
    return total


def _member_sums(proj: Projected, acts: Activities, members: pl.DataFrame
                 ) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """On one pass over the work: (layer, full, time), the time of each kernel (full name)
    in each layer (its instances are outermost: their slices of the work do not overlap),
    and (k, row, start, end), the first start and last end of each instance's work (k: its
    index in `members`) on each GPU row (`Layers.buckets`)."""
    schema = {"layer": pl.Utf8, "full": pl.Utf8, "time": pl.Int64}
    if not proj.work or members.height == 0:
        return pl.DataFrame(schema=schema), None
    member = _member_of(proj.segments.n, members["lo"].to_numpy(), members["hi"].to_numpy())
    layer = members["layer"].to_numpy()
    parts, spans = [], []
    for w in launched_work(acts):
        k = member[proj.segments.of(w["launch_row"].to_numpy(), w["launch"].to_numpy())]
        mine = k >= 0
        if not mine.any():
            continue
        start, end = w["start"].to_numpy()[mine], w["end"].to_numpy()[mine]
        spans.append(pl.DataFrame({"k": k[mine], "row": w["row"].to_numpy()[mine],
                                   "start": start, "end": end})
                     .group_by("k", "row").agg(pl.col("start").min(), pl.col("end").max()))
        full = w["full"].to_numpy()[mine]
        kern = full >= 0
        if kern.any():
            parts.append(pl.DataFrame({"layer": layer[k[mine][kern]], "fid": full[kern],
                                       "time": (end - start)[kern]},
                                      schema_overrides={"layer": pl.Utf8})
                         .group_by("layer", "fid").agg(pl.col("time").sum()))
    spans_frame = (pl.concat(spans).group_by("k", "row")
                   .agg(pl.col("start").min(), pl.col("end").max()) if spans else None)
    if not parts:
        return pl.DataFrame(schema=schema), spans_frame
    names = acts.kernel_names.rename({"id": "fid", "name": "full"})
    return ((pl.concat(parts).group_by("layer", "fid").agg(pl.col("time").sum())
             .join(names, on="fid", how="left")
             .select("layer", pl.col("full").fill_null("(unnamed)"), "time").cast(schema)),
            spans_frame)


def _top_kernels(kernel_time: pl.DataFrame, acts: Activities) -> pl.DataFrame:
    """(layer, top_kernels: [{kernel, time}]): the TOP_KERNELS kernels of each layer with
    most time, by label (`labels.distinct_labels`: a short name, or what tells apart the
    kernels that share it)."""
    from .labels import distinct_labels

    schema = {"layer": pl.Utf8, "top_kernels": pl.List(pl.Struct({"kernel": pl.Utf8,
                                                                    "time": pl.Int64}))}
    if kernel_time.height == 0:
        return pl.DataFrame(schema=schema)
    names = acts.kernel_names
    k = (acts.kernel_pairs()
         .join(names.rename({"id": "full", "name": "f"}), on="full", how="left")
         .join(names.rename({"id": "name", "name": "s"}), on="name", how="left"))
    labels = distinct_labels(k["f"].fill_null("").to_list(), k["s"].fill_null("").to_list())
    return (kernel_time.with_columns(pl.col("full").replace_strict(
                labels, default=pl.col("full"), return_dtype=pl.Utf8).alias("kernel"))
            .sort("time", "kernel", descending=[True, False])
            .group_by("layer", maintain_order=True).head(TOP_KERNELS)
            .group_by("layer", maintain_order=True)
            .agg(pl.struct("kernel", "time").alias("top_kernels")).cast(schema))


def _outliers(per_step: pl.DataFrame, members: pl.DataFrame, pick: LayerPick, total: int,
              has_step: bool) -> pl.DataFrame:
    """Instances much slower than their peers (OUTLIER_RATIO times their median, by
    OUTLIER_FLOOR of the step's GPU time): numbered siblings in one step of one rank; the
    same layer in one step on the other ranks; the same layer of one rank in the other steps
    (Tukey's fences over 4 steps or more)."""
    schema = {"kind": pl.Utf8, "layer": pl.Utf8, "rank": pl.Int64, "step": pl.Int64,
              "gpu": pl.Int64, "median": pl.Float64, "ratio": pl.Float64}
    if per_step.height == 0:
        return pl.DataFrame(schema=schema)
    nsteps = max(per_step["step"].n_unique(), 1) if has_step else 1
    floor = OUTLIER_FLOOR * total / nsteps
    found = []

    def flag(kind: str, df: pl.DataFrame, by: list[str]) -> None:
        peers = df.with_columns(pl.col("gpu").median().over(by).alias("median"),
                                pl.len().over(by).alias("n"))
        hit = peers.filter((pl.col("n") >= 3) & (pl.col("gpu") >= OUTLIER_RATIO * pl.col("median"))
                           & (pl.col("gpu") - pl.col("median") >= floor))
        if hit.height:
            found.append(hit.select(pl.lit(kind).alias("kind"), "layer", "rank", "step",
                                    "gpu", "median",
                                    (pl.col("gpu") / pl.col("median")).alias("ratio")))

    if pick.numbered:
        fam = members.select("layer", "family").unique()
        flag("siblings", per_step.join(fam, on="layer"), ["family", "step", "rank"])
    if per_step["rank"].n_unique() > 1:
        flag("ranks", per_step, ["layer", "step"])
    if has_step:  # Tukey's fences per (layer, rank), as `iterations.tukey_outliers`
        g = pl.col("gpu")
        by = ["layer", "rank"]
        steps = (per_step.filter(pl.col("step").is_not_null())
                 .with_columns(g.quantile(0.25, "linear").over(by).alias("q1"),
                               g.quantile(0.75, "linear").over(by).alias("q3"),
                               g.median().over(by).alias("median"), pl.len().over(by).alias("n")))
        hit = steps.filter((pl.col("n") >= MIN_FOR_OUTLIERS)
                           & (g > pl.col("q3") + 1.5 * (pl.col("q3") - pl.col("q1")))
                           & (g - pl.col("median") >= floor))
        if hit.height:
            found.append(hit.select(pl.lit("steps").alias("kind"), "layer", "rank", "step",
                                    "gpu", "median", (g / pl.col("median")).alias("ratio")))
    if not found:
        return pl.DataFrame(schema=schema)
    return (pl.concat([f.cast(schema) for f in found])
            .sort("ratio", descending=True))
