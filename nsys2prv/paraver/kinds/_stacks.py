"""Call stacks as Extrae writes them: each frame a code location 'FUNCTION (MODULE)' of one
value table (`code_locations`), a stack the pairs (type of its level, value) of one record.

Shared by the CPU samples (`samples.py`: 30000000 + depth) and the callers of OS runtime and
CUDA API calls (`osrt.py`, `cuda_api.py`: 70000000 + level). Everything is done per chunk
on columns: a label is built once per distinct (symbol, module) of the export, a frame's
value is looked up on numpy, and a record's pairs are a slice of its frames
(`records.PairLists`, written by the engine), however deep its stack.
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
from .base import Context

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


KEY_SHIFT = 32  # a frame's key: symbol id << 32 | module id (StringIds ids: below 2^31)


class CodeLocations:
    """Local values of the code locations of one report's frames (and of their modules),
    labelled once per distinct (symbol, module) of the export. Frames are looked up on
    numpy, by symbol id where the symbol was seen in that module first, else by their key
    (symbol, module) among the sorted keys seen so far (a polars join of every chunk
    against the table costs several times more)."""

    def __init__(self, ctx: Context, report: Report) -> None:
        self._ctx = ctx
        self._strings = report.strings
        self.marker_ids = self._strings.filter(
            pl.col("value").is_in(list(callchains.MARKERS)))["id"].cast(pl.Int64).to_numpy()
        # per known key, sorted by key: its value, its module's value (-1: not interned
        # yet) and whether its symbol has no text (then the address names each frame)
        self._keys = np.zeros(0, np.int64)
        self._loc = np.zeros(0, np.int64)
        self._module_value = np.zeros(0, np.int64)
        self._by_ip = np.zeros(0, bool)
        self._known = pl.DataFrame(schema={"symbol": pl.Int64, "module": pl.Int64,
                                           "module_name": pl.Utf8, "function": pl.Utf8})
        self._by_ip_loc = pl.DataFrame(schema={"module": pl.Int64, "ip": pl.Int64,
                                               "ip_loc": pl.Int64})
        self._no_frames: int | None = None
        self._unknown_module: int | None = None
        # by symbol id: the value of the symbol in the first module it was seen in (-1: not
        # seen, or no text) and that module: a frame of that pair is looked up directly
        top = int(self._strings["id"].max() or 0) + 1 if self._strings.height else 1
        self._symbol_loc = np.full(top, -1, np.int64)
        self._symbol_module = np.full(top, -1, np.int64)

    def no_frames(self) -> int:
        """The value of a sample with no frame left (none recorded, or markers only)."""
        if self._no_frames is None:
            self._no_frames = int(self._ctx.names.intern(
                reg.CODE_LOCATIONS, pl.Series([f"[no frames] ({UNKNOWN_MODULE})"]))[0])
        return self._no_frames

    def unknown_module(self) -> int:
        """The module value of a sample with no frame left."""
        if self._unknown_module is None:
            self._unknown_module = int(self._ctx.names.intern(
                reg.SAMPLED_MODULES, pl.Series([UNKNOWN_MODULE]))[0])
        return self._unknown_module

    @staticmethod
    def keys(symbol: np.ndarray, module: np.ndarray) -> np.ndarray:
        return (symbol.astype(np.int64) << KEY_SHIFT) | module.astype(np.int64)

    def _learn(self, uniq: np.ndarray) -> None:
        """Label and number the keys (sorted, unique) not seen yet (one row each: few after
        the first chunks)."""
        at = np.minimum(np.searchsorted(self._keys, uniq), max(self._keys.size - 1, 0))
        new = uniq if not self._keys.size else uniq[self._keys[at] != uniq]
        if not new.size:
            return
        c = pl.col
        s = self._strings
        df = (pl.DataFrame({"symbol": new >> KEY_SHIFT, "module": new & ((1 << KEY_SHIFT) - 1)})
              .join(s.rename({"id": "symbol", "value": "function"}), on="symbol", how="left",
                    maintain_order="left")
              .join(s.rename({"id": "module", "value": "path"}), on="module", how="left",
                    maintain_order="left")
              .with_columns(module_name(c("path")).alias("module_name"),
                            (c("function").is_null() | (c("function") == "")).alias("by_ip")))
        labels = df.select(pl.when(~c("by_ip")).then(
            pl.concat_str(c("function"), pl.lit(" ("), c("module_name"), pl.lit(")"))))
        loc = self._ctx.names.intern(reg.CODE_LOCATIONS, labels.to_series()).fill_null(-1)
        keys_all = np.concatenate([self._keys, new])
        order = np.argsort(keys_all, kind="stable")
        self._keys = keys_all[order]
        self._loc = np.concatenate([self._loc, loc.to_numpy()])[order]
        self._module_value = np.concatenate([self._module_value,
                                             np.full(new.size, -1, np.int64)])[order]
        self._by_ip = np.concatenate([self._by_ip, df["by_ip"].to_numpy()])[order]
        self._known = pl.concat([self._known, df.select("symbol", "module", "module_name",
                                                        "function")], how="vertical")
        sym, mod = df["symbol"].to_numpy(), df["module"].to_numpy()
        fresh = (~df["by_ip"].to_numpy()) & (sym < self._symbol_loc.size) & (sym >= 0)
        fresh[fresh] = self._symbol_loc[sym[fresh]] < 0
        # first module seen wins (a repeated symbol among the new keys: the first of them)
        _, first = np.unique(sym[fresh], return_index=True)
        take = np.flatnonzero(fresh)[first]
        self._symbol_loc[sym[take]] = loc.to_numpy()[take]
        self._symbol_module[sym[take]] = mod[take]

    def values(self, symbol: np.ndarray, module: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The code location value of every frame, and where its symbol has no text (its
        value is then -1: `ip_values` names it by its address). A symbol is nearly always
        in one module: its frames are looked up by symbol id; the others by their key."""
        ok = np.zeros(symbol.size, bool)
        loc = np.full(symbol.size, -1, np.int64)
        if symbol.size and 0 <= symbol.min() and symbol.max() < self._symbol_loc.size:
            direct = self._symbol_loc[symbol]
            ok = (direct >= 0) & (self._symbol_module[symbol] == module)
            loc[ok] = direct[ok]
        by_ip = np.zeros(symbol.size, bool)
        if not ok.all():
            rest = ~ok
            uniq, inverse = np.unique(self.keys(symbol[rest], module[rest]),
                                      return_inverse=True)
            self._learn(uniq)
            pos = np.searchsorted(self._keys, uniq)
            loc[rest] = self._loc[pos][inverse]
            by_ip[rest] = self._by_ip[pos][inverse]
        return loc, by_ip

    def module_values(self, symbol: np.ndarray, module: np.ndarray) -> np.ndarray:
        """The module value (sampled_modules) of every frame (keys seen by `values`)."""
        pos = np.searchsorted(self._keys, self.keys(symbol, module))
        todo = np.unique(pos[self._module_value[pos] < 0])
        if todo.size:
            names = pl.DataFrame({"symbol": self._keys[todo] >> KEY_SHIFT,
                                  "module": self._keys[todo] & ((1 << KEY_SHIFT) - 1)}).join(
                self._known.unique(["symbol", "module"]), on=["symbol", "module"], how="left",
                maintain_order="left")["module_name"]
            self._module_value[todo] = self._ctx.names.intern(reg.SAMPLED_MODULES,
                                                              names).to_numpy()
        return self._module_value[pos]

    def frame_names(self, symbol: np.ndarray, module: np.ndarray) -> pl.DataFrame:
        """(function, module_name) of every frame (keys seen by `values`)."""
        return pl.DataFrame({"symbol": symbol, "module": module}).join(
            self._known.unique(["symbol", "module"]), on=["symbol", "module"], how="left",
            maintain_order="left").select("function", "module_name")

    def ip_values(self, module: np.ndarray, ip: np.ndarray) -> np.ndarray:
        """Values of frames whose symbol has no text: the function is their address
        (originalIP as an unsigned 64-bit number, kernel addresses are stored negative;
        NUL: no address)."""
        frames = pl.DataFrame({"module": module, "ip": ip}, schema={"module": pl.Int64,
                                                                    "ip": pl.Int64})
        new = frames.unique().join(self._by_ip_loc, on=["module", "ip"], how="anti")
        if new.height:
            names = new.join(self._known.unique("module").select("module", "module_name"),
                             on="module", how="left", maintain_order="left")
            texts = [UNRESOLVED if ip == NUL else f"0x{ip & ADDRESS_MASK:x}"
                     for ip in names["ip"].to_list()]  # a few distinct addresses, not frames
            labels = pl.Series([f"{t} ({m})" for t, m in
                                zip(texts, names["module_name"].to_list())])
            loc = self._ctx.names.intern(reg.CODE_LOCATIONS, labels)
            self._by_ip_loc = pl.concat([self._by_ip_loc, names.select(
                "module", "ip", loc.alias("ip_loc"))], how="vertical")
        return frames.join(self._by_ip_loc, on=["module", "ip"], how="left",
                           maintain_order="left")["ip_loc"].to_numpy()


@dataclass
class Stacks:
    """The frames of one chunk's stacks, markers dropped, as columns."""

    owner: np.ndarray  # position of the frame's sample or call in the chunk
    level: np.ndarray  # 0-based level after markers were dropped (0 = the innermost frame)
    loc: np.ndarray  # code location value
    symbol: np.ndarray  # the kept frames' StringIds ids
    module: np.ndarray
    markers: np.ndarray  # per owner: marker frames dropped


def stacks(locations: CodeLocations, frames: pl.DataFrame, owner_ids: np.ndarray,
           chains: callchains.ChainFrames) -> Stacks:
    """The frames (sorted by id and depth) of the chains `owner_ids` (sorted, unique: the
    chunk's ids, in their order) without nsys' marker frames, their levels counted again
    without gaps; the addresses of frames whose symbol has no text are read from `chains`
    (the table's address column is not streamed: such frames are rare)."""
    n = owner_ids.size
    ids = frames["id"].to_numpy()
    symbol = frames["symbol"].to_numpy()
    module = frames["module"].to_numpy()
    depth = frames["depth"].to_numpy()
    is_marker = np.isin(symbol, locations.marker_ids)
    markers = np.zeros(n, np.int64)
    if is_marker.any():
        np.add.at(markers, np.searchsorted(owner_ids, ids[is_marker]), 1)
        keep = ~is_marker
        ids, symbol, module, depth = ids[keep], symbol[keep], module[keep], depth[keep]
    level = np.arange(ids.size, dtype=np.int64)
    owner = np.zeros(ids.size, np.int64)
    if ids.size:  # frames come by id: one group each
        first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        sizes = np.diff(np.r_[first, ids.size])
        level -= np.repeat(first, sizes)
        owner = np.repeat(np.searchsorted(owner_ids, ids[first]), sizes)
    loc, by_ip = locations.values(symbol, module)
    if by_ip.any():
        ips = chains.addresses(ids[by_ip], depth[by_ip])
        loc[by_ip] = locations.ip_values(module[by_ip], ips)
    return Stacks(owner, level, loc, symbol, module, markers)


def pair_lists(ctx: Context, type_range: reg.TypeRange, owner: np.ndarray,
               level: np.ndarray, loc: np.ndarray, rows: np.ndarray, first: int, last: int
               ) -> R.PairLists:
    """The pairs (type of the level in `type_range`, value) of the frames of levels first..
    last, for the owners `rows` (positions, sorted: the records' order; every owner with
    such frames is among them), each record's in level order (frames come by owner and
    level)."""
    keep = (level >= first) & (level <= last)  # only `rows` have frames of these levels
    lev = level[keep]
    counts = np.bincount(np.searchsorted(rows, owner[keep]), minlength=rows.size)
    types = {int(k): ctx.local_type(type_range.name, str(int(k)))
             for k in np.flatnonzero(np.bincount(lev)) if lev.size}
    base = type_range.base - type_range.first_key  # numeric keys: the type is base + key
    assert all(t == base + k for k, t in types.items())
    return R.PairLists(np.concatenate([[0], np.cumsum(counts)]), base + lev, loc[keep])


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
    st = stacks(locations, got, owner_ids, frames)
    level = _cuda_levels(ctx, locations, calls, owner_ids, first_of, st) if cuda else st.level
    has = np.zeros(owner_ids.size, bool)
    has[st.owner[level >= 1]] = True
    missing = int(np.count_nonzero(~np.isin(owner_ids, got["id"].to_numpy())))
    what = "CUDA API calls" if cuda else "OS runtime calls"
    if missing:
        ctx.warn(f"{what}: call stack ids that point to no stack", missing)
    cut = int(np.count_nonzero(level > MAX_LEVEL))
    if cut:
        ctx.warn(f"{what}: callers beyond level {MAX_LEVEL} (cut)", cut)
    # every call that shares a chain id (none do in real exports) gets its stack
    where = np.searchsorted(owner_ids, chain_ids)
    with_stack = has[where]
    if not with_stack.any():
        return
    calls = calls.filter(pl.Series(with_stack))
    where = where[with_stack]
    ctx.count("cuda_calls_with_stack" if cuda else "osrt_calls_with_stack", calls.height)
    # the entry's first caller is its (a, b) pair; the others are its own pairs, and 0
    # (End) for each at the exit: a caller is a region of the call, so 'Last Evt Val'
    # shows it only during the call
    first = np.full(owner_ids.size, NUL, np.int64)
    is_first = level == 1
    first[st.owner[is_first]] = st.loc[is_first]
    chains = np.unique(where)
    lists = pair_lists(ctx, reg.CALLERS, st.owner, level, st.loc, chains, 2, MAX_LEVEL)
    # each call takes its chain's entries (calls are in chain order)
    slot = np.searchsorted(chains, where)
    starts, sizes = lists.offsets[:-1][slot], np.diff(lists.offsets)[slot]
    index = np.repeat(starts - np.r_[0, np.cumsum(sizes)[:-1]], sizes) + np.arange(sizes.sum())
    entry = R.PairLists(np.r_[0, np.cumsum(sizes)], lists.types[index], lists.values[index])
    exit_ = R.PairLists(entry.offsets, entry.types, np.zeros_like(entry.values))
    c = pl.col
    df = calls.select("start", "end", "row", "row_id").with_columns(
        pl.Series("first_loc", first[where]))
    head = ctx.local_type(reg.CALLERS.name, "1")
    if df.height:
        ctx.records(R.conform(df.select(R.events(
            c("start"), c("row"), R.start_phase(c("start"), c("end")), R.SRC_CALLERS,
            c("row_id"), head, c("first_loc"), sub=-c("end")))), entry)
        ctx.records(R.conform(df.select(R.events(
            c("end"), c("row"), R.end_phase(c("start"), c("end")), R.SRC_CALLERS,
            c("row_id"), head, pl.lit(0, pl.Int64), sub=-c("start")))), exit_)


def _cuda_levels(ctx: Context, locations: CodeLocations, calls: pl.DataFrame,
                 owner_ids: np.ndarray, first_of: np.ndarray, st: Stacks) -> np.ndarray:
    """Level of every kept frame of CUDA call stacks (0 or less: not a caller)."""
    n = owner_ids.size
    suffix = r"_v\d+$"  # sources.cuda_api.normalise_name, on columns
    api = ctx.names.name_of("cuda_api", calls["name_id"].gather(first_of)).fill_null("")
    api = api.str.replace(suffix, "")
    names = locations.frame_names(st.symbol, st.module)
    is_api = (names["function"].fill_null("").str.replace(suffix, "")
              == api.gather(st.owner)).to_numpy()
    own = names["module_name"].str.contains(CUDA_OWN_MODULES).fill_null(False).to_numpy()
    big = np.iinfo(np.int64).max
    api_level = np.full(n, big, np.int64)
    np.minimum.at(api_level, st.owner[is_api], st.level[is_api])
    outside = np.full(n, big, np.int64)
    np.minimum.at(outside, st.owner[~own], st.level[~own])
    base = np.where(api_level < big, api_level + 1,  # the frame after the API's
                    np.where(outside < big, outside, 0))
    return st.level - base[st.owner] + 1
