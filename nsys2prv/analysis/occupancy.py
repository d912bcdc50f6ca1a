"""What a kernel's launch allows: the occupancy calculator and the grid's ceilings.

Nsight Compute's "Launch Statistics" and "Occupancy" sections, without replaying anything:
from a launch's grid, block, registers per thread and shared memory, and its GPU's per-SM
limits (`TARGET_INFO_GPU`: SMs, warps, blocks, registers and shared memory per SM, compute
capability), how many blocks fit on one SM and what limits them, the theoretical occupancy,
how many waves of blocks the grid makes and how full the last one is, and what the grid
caps: SM Active can never pass min(1, blocks / SMs), warps in flight never pass
min(blocks, resident blocks) x warps per block / (SMs x warps per SM).

The per-architecture facts the export does not hold (how registers and shared memory are
allocated, the shared memory the driver reserves per block, the carveouts an SM offers)
are NVIDIA's published ones, for compute capability 7.0 to 10.x and 12.x (`ARCHITECTURES`,
sources in docs/kernel_metrics.md); an architecture not listed gets no occupancy, and the
caller says so. The rules are those of NVIDIA's occupancy calculator (`cuda_occupancy.h`):

* warps per block = ceil(threads / 32); blocks by warps = warps per SM // warps per block;
* registers are allocated per warp, rounded up to 256, within each of the SM's 4
  sub-partitions: blocks by registers = (registers per SM / 4 // registers per warp) x 4
  // warps per block (no limit for a kernel that uses none);
* shared memory per block = static + dynamic + the reserved 1 KB (Ampere on), rounded up to
  128 bytes (256 before Ampere); blocks by shared memory = carveout // that (no limit for a
  block that needs none); the carveout is the one the launch ran with
  (`sharedMemoryExecuted`), raised to the next one the SM offers if smaller than a block
  needs (what the driver does), or, unknown, the largest (the calculator's default);
* blocks per SM = the least of those and the SM's block slots; theoretical occupancy =
  blocks per SM x warps per block / warps per SM; the limiter is the resource that gives
  the least, the SM's warp or block slots where they tie with registers or shared memory
  (relaxing a resource that ties with the slots would not fit another block).

Pure arithmetic on numpy arrays, vectorised over launch configurations: the translation
(`paraver/kinds/kernels.py`, which writes the results on every kernel, and
`paraver/kinds/gpu_metrics.py`, whose rate fit takes the ceilings as bounds) and the
analysis (`launch.py`, `kernel_metrics.py`) call the same functions on the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WARP = 32
# occupancy limiters (values of the trace's limiter type, registry/cuda.py)
LIMIT_WARPS, LIMIT_REGISTERS, LIMIT_SHARED, LIMIT_BLOCKS = 1, 2, 3, 4
LIMITERS = {LIMIT_WARPS: "warps", LIMIT_REGISTERS: "registers",
            LIMIT_SHARED: "shared memory", LIMIT_BLOCKS: "blocks"}
# precision of the percentages and waves written in the trace (value x 100)
SCALE = 100


@dataclass(frozen=True)
class Architecture:
    """NVIDIA's published per-SM facts of one compute capability (CUDA C++ Programming
    Guide, "Compute Capabilities"; the occupancy calculator `cuda_occupancy.h`). The limits
    the export also holds (warps, blocks, registers and shared memory per SM) are used only
    where its TARGET_INFO_GPU lacks them."""

    name: str
    max_warps: int  # resident warps per SM
    max_blocks: int  # resident blocks per SM
    max_shared_kb: int  # largest shared memory carveout per SM
    carveouts_kb: tuple[int, ...]  # shared memory sizes an SM can be configured with
    shared_unit: int  # shared memory allocation unit per block (bytes)
    reserved_shared: int  # shared memory the driver reserves per block (bytes)
    registers: int = 65536  # 32-bit registers per SM
    register_unit: int = 256  # registers are allocated per warp in units of this many
    sub_partitions: int = 4  # register file split (warp allocation granularity)
    max_registers_per_thread: int = 255


_VOLTA_CARVEOUTS = (0, 8, 16, 32, 64, 96)
_AMPERE_CARVEOUTS = (0, 8, 16, 32, 64, 100, 132, 164)
_SMALL_CARVEOUTS = (0, 8, 16, 32, 64, 100)
_HOPPER_CARVEOUTS = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)

ARCHITECTURES: dict[tuple[int, int], Architecture] = {
    (7, 0): Architecture("Volta", 64, 32, 96, _VOLTA_CARVEOUTS, 256, 0),
    (7, 2): Architecture("Volta (Xavier)", 64, 32, 96, _VOLTA_CARVEOUTS, 256, 0),
    (7, 5): Architecture("Turing", 32, 16, 64, (32, 64), 256, 0),
    (8, 0): Architecture("Ampere (A100)", 64, 32, 164, _AMPERE_CARVEOUTS, 128, 1024),
    (8, 6): Architecture("Ampere (GA10x)", 48, 16, 100, _SMALL_CARVEOUTS, 128, 1024),
    (8, 7): Architecture("Ampere (Orin)", 48, 16, 164, _AMPERE_CARVEOUTS, 128, 1024),
    (8, 9): Architecture("Ada", 48, 24, 100, _SMALL_CARVEOUTS, 128, 1024),
    (9, 0): Architecture("Hopper", 64, 32, 228, _HOPPER_CARVEOUTS, 128, 1024),
    (10, 0): Architecture("Blackwell (B200)", 64, 32, 228, _HOPPER_CARVEOUTS, 128, 1024),
    (10, 3): Architecture("Blackwell (B300)", 64, 32, 228, _HOPPER_CARVEOUTS, 128, 1024),
    (12, 0): Architecture("Blackwell (GB20x)", 48, 32, 100, _SMALL_CARVEOUTS, 128, 1024),
}


def known(major: int | None, minor: int | None) -> bool:
    return (major, minor) in ARCHITECTURES


def known_list() -> str:
    """The compute capabilities the tables hold, for messages ('7.0, 7.2, ...')."""
    return ", ".join(f"{a}.{b}" for a, b in ARCHITECTURES)


@dataclass
class Occupancy:
    """The calculator's result per launch configuration (arrays of one length; -1 / NaN
    where it is unknown: an architecture not in the tables, a field the export lacks)."""

    warps_per_block: np.ndarray
    by_warps: np.ndarray  # blocks per SM each resource allows
    by_registers: np.ndarray
    by_shared: np.ndarray
    by_blocks: np.ndarray
    blocks_per_sm: np.ndarray
    limiter: np.ndarray  # LIMIT_* (0: unknown)
    occupancy: np.ndarray  # theoretical, fraction of the SM's warps
    shared_per_block: np.ndarray  # bytes allocated per block (reserved and rounding in)
    carveout: np.ndarray  # the carveout the blocks were counted in (bytes)
    max_warps: np.ndarray  # the warps per SM counted with (the export's, else the table's)


def _round_up(x: np.ndarray, unit: int) -> np.ndarray:
    return -(-x // unit) * unit


def occupancy(threads, registers, static_shared, dynamic_shared, carveout, major, minor,
              max_warps=None, max_blocks=None, registers_per_sm=None, max_shared=None
              ) -> Occupancy:
    """Blocks per SM, the limiter and the theoretical occupancy of each launch
    configuration (arrays, or scalars broadcast): threads per block, registers per thread,
    static and dynamic shared memory per block, the carveout it ran with (bytes; < 0 or
    NaN: unknown, the largest is taken), the GPU's compute capability and, where the export
    has them, its per-SM limits (< 1 or NaN: the architecture's). The module docstring
    gives the rules."""
    arrays = np.broadcast_arrays(*[np.asarray(np.nan if v is None else v, dtype=np.float64)
                                   for v in (threads, registers, static_shared,
                                             dynamic_shared, carveout, major, minor,
                                             max_warps, max_blocks, registers_per_sm,
                                             max_shared)])
    (thr, regs, s_static, s_dyn, carve, maj, mnr, m_warps, m_blocks, m_regs,
     m_shared) = [np.atleast_1d(np.array(a)) for a in arrays]
    n = thr.size
    out = Occupancy(*(np.full(n, -1, dtype=np.int64) for _ in range(7)),
                    np.full(n, np.nan), np.full(n, -1, dtype=np.int64),
                    np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    out.occupancy = np.full(n, np.nan)
    out.limiter = np.zeros(n, dtype=np.int64)
    ok_in = (np.isfinite(thr) & (thr > 0) & np.isfinite(regs) & (regs >= 0)
             & np.isfinite(maj) & np.isfinite(mnr))
    s_static = np.where(np.isfinite(s_static), s_static, 0)
    s_dyn = np.where(np.isfinite(s_dyn), s_dyn, 0)
    for (a, b), arch in ARCHITECTURES.items():
        sel = np.flatnonzero(ok_in & (maj == a) & (mnr == b))
        if sel.size == 0:
            continue

        def limit(given: np.ndarray, default: int) -> np.ndarray:
            g = given[sel]
            return np.where(np.isfinite(g) & (g >= 1), g, default).astype(np.int64)

        warps_sm = limit(m_warps, arch.max_warps)
        blocks_sm = limit(m_blocks, arch.max_blocks)
        regs_sm = limit(m_regs, arch.registers)
        shared_sm = limit(m_shared, arch.max_shared_kb * 1024)
        t = thr[sel].astype(np.int64)
        r = regs[sel].astype(np.int64)
        wpb = -(-t // WARP)
        by_warps = warps_sm // wpb
        per_warp = _round_up(r * WARP, arch.register_unit)
        sub = arch.sub_partitions
        with np.errstate(divide="ignore"):
            warps_by_regs = np.where(per_warp > 0,
                                     (regs_sm // sub) // np.maximum(per_warp, 1) * sub, 0)
        big = np.iinfo(np.int64).max // 4
        by_regs = np.where(per_warp > 0, warps_by_regs // wpb, big)
        # a launch over the per-thread register limit, or whose block does not fit the
        # register file (the hardware rounds warps up to the sub-partitions), fits nowhere
        too_many = (r > arch.max_registers_per_thread) | (
            per_warp * _round_up(wpb, sub) > regs_sm)
        by_regs = np.where(too_many, 0, by_regs)
        need = (s_static[sel] + s_dyn[sel]).astype(np.int64) + arch.reserved_shared
        alloc = _round_up(need, arch.shared_unit)
        options = np.array([k * 1024 for k in arch.carveouts_kb], dtype=np.int64)
        options = options[options <= shared_sm.max()] if options.size else options
        c = carve[sel]
        c = np.where(np.isfinite(c) & (c >= 0), c, shared_sm).astype(np.int64)
        # the driver raises a carveout smaller than a block needs to the next one offered
        raise_to = options[np.minimum(np.searchsorted(options, alloc), options.size - 1)] \
            if options.size else alloc
        c = np.where((c < alloc) & (alloc > 0), np.maximum(raise_to, alloc), c)
        c = np.minimum(c, shared_sm)
        by_shared = np.where(alloc > 0, c // np.maximum(alloc, 1), big)
        by_shared = np.where(alloc > shared_sm, 0, by_shared)
        bps = np.minimum.reduce([by_warps, by_regs, by_shared, blocks_sm])
        # ties go to the SM's own slots (warps, then blocks): a resource is named only
        # when it holds the blocks below what the slots allow
        lim = np.select([bps == by_warps, bps == blocks_sm, bps == by_regs, bps == by_shared],
                        [LIMIT_WARPS, LIMIT_BLOCKS, LIMIT_REGISTERS, LIMIT_SHARED], 0)
        out.warps_per_block[sel] = wpb
        out.by_warps[sel] = by_warps
        out.by_registers[sel] = np.where(by_regs >= big, -1, by_regs)
        out.by_shared[sel] = np.where(by_shared >= big, -1, by_shared)
        out.by_blocks[sel] = blocks_sm
        out.blocks_per_sm[sel] = bps
        out.limiter[sel] = lim
        out.occupancy[sel] = bps * wpb / warps_sm
        out.shared_per_block[sel] = alloc
        out.carveout[sel] = c
        out.max_warps[sel] = warps_sm
    return out


@dataclass
class Ceilings:
    """What a grid allows on its GPU, per launch (arrays; NaN / -1 where unknown)."""

    resident: np.ndarray  # blocks the GPU holds at once (a wave)
    waves: np.ndarray  # blocks / resident
    tail: np.ndarray  # the last wave's fill (fraction; 1: full)
    sm_active: np.ndarray  # SM Active ceiling, fraction of the SMs
    warps: np.ndarray  # Compute Warps in Flight ceiling, fraction of the GPU's warp slots


def ceilings(blocks, threads, sms, blocks_per_sm, max_warps, max_active_clusters=None,
             cluster_size=None) -> Ceilings:
    """The grid's waves, tail and ceilings (arrays or scalars): blocks of the grid, threads
    per block, the GPU's SMs, blocks per SM (the calculator's; < 1: unknown), warps per SM
    (< 1: unknown). A cluster launch (cluster size > 1) whose CUPTI record says how many
    clusters fit at once (`maxActiveClusters` > 0) holds that many clusters' blocks, else
    SMs x blocks per SM (clusters can only lower it). Without blocks per SM, SM Active's
    ceiling is min(blocks, SMs) / SMs and warps' min(1, blocks x warps per block /
    (SMs x warps per SM)): bounds from the export's facts alone."""
    f = [np.asarray(np.nan if v is None else v, dtype=np.float64)
         for v in (blocks, threads, sms, blocks_per_sm, max_warps, max_active_clusters,
                   cluster_size)]
    b, t, s, bps, mw, mac, cs = [np.atleast_1d(np.array(a)) for a in np.broadcast_arrays(*f)]
    ok = np.isfinite(b) & (b >= 1) & np.isfinite(s) & (s >= 1)
    wpb = np.where(np.isfinite(t) & (t > 0), np.ceil(t / WARP), np.nan)
    resident = np.where(np.isfinite(bps) & (bps >= 1), s * bps, np.nan)
    cluster = np.isfinite(cs) & (cs > 1) & np.isfinite(mac) & (mac > 0)
    resident = np.where(cluster, mac * cs, resident)
    resident = np.where(ok, resident, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        waves = b / resident
        last = b - (np.ceil(waves) - 1) * resident
        tail = np.where(np.isfinite(waves), last / resident, np.nan)
        busy_blocks = np.where(np.isfinite(resident), np.minimum(b, resident), b)
        sm = np.where(ok, np.minimum(busy_blocks, s) / s, np.nan)
        slots = s * mw
        warps = np.where(ok & np.isfinite(wpb) & np.isfinite(mw) & (mw >= 1),
                         np.minimum(1.0, busy_blocks * wpb / slots), np.nan)
    return Ceilings(resident, waves, tail, sm, warps)


def to_trace(fraction: np.ndarray, up: bool = False) -> np.ndarray:
    """A fraction as the trace writes a percentage (value x 100, two decimals): rounded up
    for a ceiling (`up`), so that the written bound is never below the true one; -1 where
    unknown."""
    x = np.asarray(fraction, dtype=np.float64) * 100 * SCALE
    r = np.ceil(x - 1e-6) if up else np.round(x)
    return np.where(np.isfinite(x), r, -1).astype(np.int64)


def column_bounds(col: np.ndarray, time: np.ndarray, ceiling: np.ndarray, n_cols: int,
                  default: float) -> np.ndarray:
    """Per model column (a kernel name), the time-weighted mean of its launches' ceilings
    (`ceiling`, NaN: none known, `default` counts instead): the column's rate is the
    time-weighted mean of what its launches do, each below its own ceiling. Rounded to
    1e-6 so that a sum taken in another order gives the same bound."""
    col = np.asarray(col, dtype=np.int64)
    w = np.asarray(time, dtype=np.float64)
    c = np.where(np.isfinite(ceiling), ceiling, default)
    tw = np.bincount(col, weights=w, minlength=n_cols)
    tc = np.bincount(col, weights=w * c, minlength=n_cols)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(tw > 0, tc / tw, default)
    return np.round(out, 6)


# the metrics a grid caps: those averaged over all SMs of what happens on each (an SM that
# holds no block of the kernel adds nothing), and the warps in flight
SM_CAPPED = ("SM Active", "SM Issue", "Tensor Active", "Tensor Active / FP16 Active")
WARPS_CAPPED = ("Compute Warps in Flight",)
FLOORED = ("SM Active",)  # a running kernel keeps at least one SM busy


def rate_bounds(keys: list[str], lo: np.ndarray, hi: np.ndarray, col: np.ndarray,
                dur: np.ndarray, sms: np.ndarray, sm_ceiling: np.ndarray,
                warps_ceiling: np.ndarray, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per (model column, metric) for the sample-mixing model (`rate_model.fit`):
    the metric's own range `lo`/`hi` (per metric), tightened for the columns of kernels
    (`col`, `dur`: the kernel intervals of the model, with their GPU's SMs and their grid's
    SM Active and warps ceilings in %, NaN where unknown) to the time-weighted mean of
    their launches' ceilings, and SM Active raised to one SM (100 / SMs %). Columns without
    kernels (copies, idle) keep the metric's range. The translation and the analysis call
    it on the same numbers (the ceilings as the trace writes them)."""
    K1 = n_cols + 1
    M = len(keys)
    lo2 = np.tile(np.asarray(lo, dtype=np.float64), (K1, 1))
    hi2 = np.tile(np.asarray(hi, dtype=np.float64), (K1, 1))
    col = np.asarray(col, dtype=np.int64)
    if col.size == 0:
        return lo2, hi2
    kernel_cols = np.bincount(col, minlength=K1) > 0
    sms = np.asarray(sms, dtype=np.float64)
    floor_pct = np.where(np.isfinite(sms) & (sms >= 1), 100.0 / np.maximum(sms, 1), np.nan)
    for m, key in enumerate(keys):
        top = float(np.asarray(hi)[m])
        bottom = float(np.asarray(lo)[m])
        if key in SM_CAPPED or key in WARPS_CAPPED:
            ceiling = sm_ceiling if key in SM_CAPPED else warps_ceiling
            b = column_bounds(col, dur, np.minimum(np.asarray(ceiling, dtype=np.float64),
                                                   top), K1, top)
            hi2[kernel_cols, m] = np.minimum(hi2[kernel_cols, m], b[kernel_cols])
        if key in FLOORED:
            f = column_bounds(col, dur, floor_pct, K1, bottom)
            lo2[kernel_cols, m] = np.minimum(np.maximum(lo2[kernel_cols, m], f[kernel_cols]),
                                             hi2[kernel_cols, m])
    return lo2, hi2


# -- launch classes: one model column per kernel name and class of grid -----------------------
# A name launched with grids of very different sizes (a 1-block and a 73728-block launch of
# one elementwise kernel) does very different things; its rate would be a mean that no
# launch has, and the least-squares fit weighs long launches (whole periods) far above
# short ones, so no single bound fits it. The model gives each class of SM Active ceiling
# its own column: class 0 for grids that can fill the GPU (or whose ceiling is unknown),
# class k >= 1 for ceilings in (100 / 2^k, 100 / 2^(k-1)] % of the SMs.
CLASS_SHIFT = 4  # a kernel's model code: its name's code x 16 + its class
MAX_CLASS = (1 << CLASS_SHIFT) - 1


def grid_class(sm_ceiling_pv) -> np.ndarray:
    """The launch class of SM Active ceilings as the trace writes them (% x 100; < 0 or
    NaN: unknown, class 0)."""
    pv = np.asarray(sm_ceiling_pv, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = 1 + np.floor(np.log2(SCALE * 100 / pv))
    return np.where(np.isfinite(pv) & (pv > 0) & (pv < SCALE * 100),
                    np.clip(k, 1, MAX_CLASS), 0).astype(np.int64)


def class_label(k: int) -> str:
    """What a launch class means, for the tables: 'grid <= 50 % of the SMs'."""
    return "" if k == 0 else f"grid <= {100 / 2 ** (k - 1):.3g} % of the SMs"


def model_code(code: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The model's code of kernels: their name's code and their launch class."""
    return np.asarray(code, dtype=np.int64) * (1 << CLASS_SHIFT) + np.asarray(classes)


def model_labels(label_of: dict, memop_of: dict, codes: np.ndarray) -> tuple[dict, dict]:
    """Labels and memory-operation flags of model codes (`model_code` for kernels, the
    codes as they were for memory operations): a class other than 0 is named after its
    kernel with CLASS_SEP and the class."""
    out_l, out_m = {}, {}
    for mc in np.unique(codes).tolist():
        if memop_of.get(mc, False) and mc in label_of:
            out_l[mc], out_m[mc] = label_of[mc], True
            continue
        code, k = mc >> CLASS_SHIFT, mc & MAX_CLASS
        base = label_of.get(code)
        out_l[mc] = base if k == 0 or base is None else f"{base}{CLASS_SEP}{k}"
        out_m[mc] = bool(memop_of.get(code, False))
    return out_l, out_m


CLASS_SEP = "\x00grid class "


def split_label(label: str) -> tuple[str, int]:
    """(kernel label, launch class) of a model column's label."""
    if CLASS_SEP in label:
        base, k = label.split(CLASS_SEP, 1)
        return base, int(k)
    return label, 0
