"""Call stacks as Extrae writes them: each frame a code location 'FUNCTION (MODULE)' of one
value table (`code_locations`), a stack the columns of its levels.

Shared by the CPU samples (`samples.py`: 30000000 + depth) and the callers of OS runtime and
CUDA API calls (`osrt.py`, `cuda_api.py`: 70000000 + level). Everything is done per chunk
on columns: a label is built once per distinct (symbol, module) of the export, a stack is a
scatter of its frames into one column per level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ...engine import NUL
from ...report.report import Report
from ...sources import callchains
from .. import records as R
from ..registry import sampling as reg
from .base import Context, push

UNKNOWN_MODULE = "[Unknown]"
UNRESOLVED = "[unresolved]"  # a frame with neither a symbol text nor an address
ADDRESS_MASK = (1 << 64) - 1
MAX_LEVEL = reg.SAMPLED_FUNCTION_LEVELS - 1  # 99: deeper frames are cut
# modules of CUPTI, the CUDA driver and runtime and nsys' injection: the frames a CUDA
# call's stack starts with before the application's code
CUDA_OWN_MODULES = r"^(libcupti|libcuda|libToolsInjection|libnvperf|libnvidia-)"


def module_name(path: pl.Expr) -> pl.Expr:
    """A module's label: the basename of its path ([kernel.kallsyms], [vdso] and [Unknown]
    as they are; no path: [Unknown]). Parentheses become brackets, so that a label
    'FUNCTION (MODULE)' splits at its last ' (' into function and module."""
    base = path.str.extract(r"([^/]*)$", 1)
    base = pl.when(base.is_null() | (base == "")).then(path).otherwise(base)
    base = pl.when(base.is_null() | (base.str.strip_chars() == "")).then(
        pl.lit(UNKNOWN_MODULE)).otherwise(base)
    return base.str.replace_all("(", "[", literal=True).str.replace_all(")", "]", literal=True)


class CodeLocations:
    """Local values of the code locations of one report's frames (and of their modules),
    labelled once per distinct (symbol, module) of the export."""

    def __init__(self, ctx: Context, report: Report) -> None:
        self._ctx = ctx
        self._strings = report.strings
        self.marker_ids = self._strings.filter(
            pl.col("value").is_in(list(callchains.MARKERS)))["id"].cast(pl.Int64).to_numpy()
        self._known = pl.DataFrame(schema={"symbol": pl.Int64, "module": pl.Int64,
                                           "loc": pl.Int64, "module_name": pl.Utf8,
                                           "function": pl.Utf8, "by_ip": pl.Boolean})
        self._by_ip = pl.DataFrame(schema={"module": pl.Int64, "ip": pl.Int64,
                                           "ip_loc": pl.Int64})
        self._no_frames: int | None = None

    def no_frames(self) -> int:
        """The value of a sample with no frame left (none recorded, or markers only)."""
        if self._no_frames is None:
            self._no_frames = int(self._ctx.names.intern(
                reg.CODE_LOCATIONS, pl.Series([f"[no frames] ({UNKNOWN_MODULE})"]))[0])
        return self._no_frames

    def locate(self, frames: pl.DataFrame, function: bool = False) -> pl.DataFrame:
        """`frames` (symbol, module, ip) with `loc` (local value) and `module_name` added
        (and the symbol's text as `function`, when asked)."""
        c = pl.col
        pairs = frames.select("symbol", "module").unique()
        new = pairs.join(self._known, on=["symbol", "module"], how="anti", nulls_equal=True)
        if new.height:
            s = self._strings
            new = (new.join(s.rename({"id": "symbol", "value": "function"}), on="symbol",
                            how="left")
                   .join(s.rename({"id": "module", "value": "path"}), on="module", how="left")
                   .with_columns(module_name(c("path")).alias("module_name"),
                                 (c("function").is_null() | (c("function") == ""))
                                 .alias("by_ip")))
            labels = new.select(pl.when(~c("by_ip")).then(
                pl.concat_str(c("function"), pl.lit(" ("), c("module_name"), pl.lit(")"))))
            loc = self._ctx.names.intern(reg.CODE_LOCATIONS, labels.to_series())
            self._known = pl.concat([self._known, new.select(
                "symbol", "module", loc.alias("loc"), "module_name", "function", "by_ip")],
                how="vertical")
        cols = ["symbol", "module", "loc", "module_name", "by_ip"] + (
            ["function"] if function else [])
        out = frames.join(self._known.select(cols), on=["symbol", "module"], how="left",
                          maintain_order="left", nulls_equal=True)
        if out["by_ip"].any():
            out = self._locate_by_ip(out)
        return out.drop("by_ip")

    def _locate_by_ip(self, out: pl.DataFrame) -> pl.DataFrame:
        """Frames whose symbol has no text: the function is their address (originalIP as
        an unsigned 64-bit number; kernel addresses are stored negative)."""
        c = pl.col
        keys = out.filter(c("by_ip")).select("module", "ip", "module_name").unique()
        new = keys.join(self._by_ip, on=["module", "ip"], how="anti", nulls_equal=True)
        if new.height:
            texts = [UNRESOLVED if ip is None else f"0x{ip & ADDRESS_MASK:x}"
                     for ip in new["ip"].to_list()]  # a few distinct addresses, not frames
            labels = pl.Series([f"{t} ({m})" for t, m in
                                zip(texts, new["module_name"].to_list())])
            loc = self._ctx.names.intern(reg.CODE_LOCATIONS, labels)
            self._by_ip = pl.concat([self._by_ip, new.select(
                "module", "ip", loc.alias("ip_loc"))], how="vertical")
        out = out.join(self._by_ip, on=["module", "ip"], how="left", maintain_order="left",
                       nulls_equal=True)
        return out.with_columns(pl.when(c("by_ip")).then(c("ip_loc")).otherwise(c("loc"))
                                .alias("loc")).drop("ip_loc")


@dataclass
class Stacks:
    """The frames of one chunk's stacks, markers dropped, as (owner, level, loc) columns."""

    owner: np.ndarray  # position of the frame's sample or call in the chunk
    level: np.ndarray  # 0-based level after markers were dropped (0 = the innermost frame)
    loc: np.ndarray  # code location value
    markers: np.ndarray  # per owner: marker frames dropped
    frames: pl.DataFrame  # the kept frames with every column `locate` added


def stacks(locations: CodeLocations, frames: pl.DataFrame, owner_ids: np.ndarray,
           function: bool = False) -> Stacks:
    """The frames (sorted by id and depth) of the chains `owner_ids` (sorted, unique: the
    chunk's ids, in their order) without nsys' marker frames, their levels counted again
    without gaps."""
    n = owner_ids.size
    ids = frames["id"].to_numpy()
    is_marker = np.isin(frames["symbol"].to_numpy(), locations.marker_ids)
    markers = np.zeros(n, np.int64)
    if is_marker.any():
        np.add.at(markers, np.searchsorted(owner_ids, ids[is_marker]), 1)
        frames = frames.filter(pl.Series(~is_marker))
        ids = ids[~is_marker]
    owner = np.searchsorted(owner_ids, ids)
    level = np.arange(ids.size, dtype=np.int64)
    if ids.size:
        first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        level -= np.repeat(first, np.diff(np.r_[first, ids.size]))
    located = locations.locate(frames, function)
    return Stacks(owner, level, located["loc"].to_numpy(), markers, located)


def level_columns(owner: np.ndarray, level: np.ndarray, loc: np.ndarray, rows: np.ndarray,
                  first: int, last: int) -> dict[int, np.ndarray]:
    """For each level first..last that some frame has: the value of every owner in `rows`
    (positions, sorted) at that level, NUL where it has none (the engine writes no pair)."""
    keep = (level >= first) & (level <= last)
    if not keep.any():
        return {}
    pos = np.searchsorted(rows, owner[keep])
    lev = level[keep]
    out = {}
    for k in np.unique(lev).tolist():
        col = np.full(rows.size, NUL, dtype=np.int64)
        sel = lev == k
        col[pos[sel]] = loc[keep][sel]
        out[int(k)] = col
    return out


# -- the callers of traced calls ---------------------------------------------------------------

class Callers:
    """The callers of one kind's calls (OS runtime, or CUDA API with `cuda`), written chunk by
    chunk of calls as the kind reads them, the call-stack table read alongside."""

    def __init__(self, ctx: Context, report: Report, cuda: bool) -> None:
        self._ctx, self._cuda = ctx, cuda
        self._locations = CodeLocations(ctx, report)
        self._frames = callchains.ChainFrames(
            report, callchains.CUDA if cuda else callchains.OSRT, ctx.chunk_rows)

    def push(self, calls: pl.DataFrame) -> None:
        """Callers of a chunk of calls (start, end, row, row_id, chain, name_id)."""
        push_callers(self._ctx, self._locations, calls, self._frames, self._cuda)

    def close(self) -> None:
        self._frames.close()


def push_callers(ctx: Context, locations: CodeLocations, calls: pl.DataFrame,
                 frames: callchains.ChainFrames, cuda: bool) -> None:
    """The callers of `calls` (start, end, row, row_id, chain: the call-stack id, name_id)
    as one event record per call at its entry: 70000000 + level, Extrae's caller types.
    OS runtime: level k = stackDepth k (depth 0 is the call's own libc frame). CUDA: level
    1 is the frame after the one named as the call's API (its `_vNNNN` suffix dropped);
    where no frame is (every frame unresolved), the first frame outside CUPTI, the driver,
    the runtime and nsys' injection library; where none is, the innermost frame."""
    calls = calls.filter(pl.col("chain").is_not_null())
    if calls.height == 0:
        return
    calls = calls.sort("chain", maintain_order=True)
    chain_ids = calls["chain"].to_numpy()
    owner_ids, first_of = np.unique(chain_ids, return_index=True)
    got = frames.of(owner_ids)
    st = stacks(locations, got, owner_ids, function=cuda)
    level = _cuda_levels(ctx, calls, owner_ids, first_of, st) if cuda else st.level
    has = np.zeros(owner_ids.size, bool)
    has[st.owner[level >= 1]] = True
    missing = int(np.count_nonzero(~np.isin(owner_ids, got["id"].to_numpy())))
    what = "CUDA API calls" if cuda else "OS runtime calls"
    if missing:
        ctx.warn(f"{what}: call stack ids that point to no stack", missing)
    cut = int(np.count_nonzero(level > MAX_LEVEL))
    if cut:
        ctx.warn(f"{what}: callers beyond level {MAX_LEVEL} (cut)", cut)
    cols = level_columns(st.owner, level, st.loc, np.arange(owner_ids.size), 1, MAX_LEVEL)
    if not cols:
        return
    # every call that shares a chain id (none do in real exports) gets its stack
    where = np.searchsorted(owner_ids, chain_ids)
    with_stack = has[where]
    calls = calls.filter(pl.Series(with_stack))
    where = where[with_stack]
    ctx.count("cuda_calls_with_stack" if cuda else "osrt_calls_with_stack", calls.height)
    types = {k: ctx.local_type(reg.CALLERS.name, str(k)) for k in cols}
    levels = sorted(cols)
    head = levels[0]
    c = pl.col
    df = calls.select("start", "end", "row", "row_id").with_columns(
        pl.Series("first_loc", cols[head][where]),
        *[pl.Series(f"lvl{k}", cols[k][where]) for k in levels[1:]])
    push(ctx, [df.select(R.events(
        c("start"), c("row"), R.start_phase(c("start"), c("end")), R.SRC_CALLERS, c("row_id"),
        types[head], c("first_loc"),
        R.numeric_pairs(*[(types[k], c(f"lvl{k}")) for k in levels[1:]]), sub=-c("end")))])


def _cuda_levels(ctx: Context, calls: pl.DataFrame, owner_ids: np.ndarray,
                 first_of: np.ndarray, st: Stacks) -> np.ndarray:
    """Level of every kept frame of CUDA call stacks (0 or less: not a caller)."""
    n = owner_ids.size
    suffix = r"_v\d+$"  # sources.cuda_api.normalise_name, on columns
    api = ctx.names.name_of("cuda_api", calls["name_id"].gather(first_of)).fill_null("")
    api = api.str.replace(suffix, "")
    frames = st.frames
    is_api = (frames["function"].fill_null("").str.replace(suffix, "")
              == api.gather(st.owner)).to_numpy()
    own = frames["module_name"].str.contains(CUDA_OWN_MODULES).fill_null(False).to_numpy()
    big = np.iinfo(np.int64).max
    api_level = np.full(n, big, np.int64)
    np.minimum.at(api_level, st.owner[is_api], st.level[is_api])
    outside = np.full(n, big, np.int64)
    np.minimum.at(outside, st.owner[~own], st.level[~own])
    base = np.where(api_level < big, api_level + 1,  # the frame after the API's
                    np.where(outside < big, outside, 0))
    return st.level - base[st.owner] + 1
