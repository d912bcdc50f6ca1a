"""What a kernel's launch allows (analysis/occupancy.py, analysis/launch.py): the occupancy
calculator against NVIDIA's published examples and against the limits restated as a search
(the most blocks whose warps, registers and shared memory all fit one SM), the grid's
ceilings against their closed forms, and the launch statistics of translated exports against
the launch columns of the export read with sqlite3."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsys2prv.analysis import occupancy as occ


# -- the calculator ---------------------------------------------------------------------------

def test_best_practices_guide_register_example():
    """CUDA C++ Best Practices Guide, "Calculating Occupancy": on compute capability 7.0, a
    kernel of 128-thread blocks using 37 registers per thread runs 12 blocks per SM, 75 %
    occupancy; with 320-thread blocks and the same registers, 4 blocks (the guide rounds
    62.5 % to 63 %), both limited by the registers (their allocation granularity)."""
    r = occ.occupancy(np.array([128, 320]), 37, 0, 0, -1, 7, 0)
    assert r.blocks_per_sm.tolist() == [12, 4]
    assert r.occupancy.tolist() == [0.75, 0.625]
    assert r.limiter.tolist() == [occ.LIMIT_REGISTERS] * 2
    # without the granularity (37 x 128 registers a block) 13 blocks would fit: it matters
    assert 65536 // (37 * 128) == 13


def test_the_issues_split_k_kernel():
    """aiprof_opt2's split_k_kernel (A100: 108 SMs, 64 warps per SM): 10 blocks of 4 warps
    occupy at most 10 of the 108 SMs (SM Active <= 9.3 %) and 40 of 6,912 warp slots
    (warps in flight <= 0.6 %), as the issue measured."""
    r = occ.occupancy(128, 48, 0, 9216, 102400, 8, 0, 64, 32, 65536, 167936)
    g = occ.ceilings(10, 128, 108, r.blocks_per_sm, 64)
    assert g.sm_active[0] == pytest.approx(10 / 108)
    assert g.warps[0] == pytest.approx(40 / 6912)
    assert g.waves[0] == pytest.approx(10 / (108 * r.blocks_per_sm[0]))
    assert round(100 * g.sm_active[0], 1) == 9.3 and round(100 * g.warps[0], 1) == 0.6


A100 = dict(major=8, minor=0, warps=64, blocks=32, regs=65536, shared=167936, sms=108,
            unit=128, reserved=1024, carveouts=(0, 8, 16, 32, 64, 100, 132, 164))
V100 = dict(major=7, minor=0, warps=64, blocks=32, regs=65536, shared=98304, sms=80,
            unit=256, reserved=0, carveouts=(0, 8, 16, 32, 64, 96))
GA102 = dict(major=8, minor=6, warps=48, blocks=16, regs=65536, shared=102400, sms=82,
             unit=128, reserved=1024, carveouts=(0, 8, 16, 32, 64, 100))
H100 = dict(major=9, minor=0, warps=64, blocks=32, regs=65536, shared=233472, sms=132,
            unit=128, reserved=1024,
            carveouts=(0, 8, 16, 32, 64, 100, 132, 164, 196, 228))
GPUS = {"A100": A100, "V100": V100, "GA102": GA102, "H100": H100}


def _fits(n: int, gpu: dict, threads: int, regs: int, shared: int, carveout: int) -> bool:
    """Whether n blocks fit one SM, each resource checked as a capacity: warp slots, block
    slots, the 4 register sub-partitions (a warp's registers rounded up to 256, a warp in
    one sub-partition), the carveout (a block's shared memory with the reserved part rounded
    up to the allocation unit; a carveout smaller than a block needs raised to the next
    size the SM offers)."""
    wpb = -(-threads // 32)
    if n * wpb > gpu["warps"] or n > gpu["blocks"]:
        return False
    per_warp = -(-regs * 32 // 256) * 256
    if per_warp and n * wpb > 4 * ((gpu["regs"] // 4) // per_warp):
        return False
    need = -(-(shared + gpu["reserved"]) // gpu["unit"]) * gpu["unit"]
    if carveout < need:
        carveout = min(k * 1024 for k in gpu["carveouts"] if k * 1024 >= need)
    return n * need <= carveout


@settings(max_examples=300, deadline=None)
@given(gpu=st.sampled_from(sorted(GPUS)), threads=st.integers(1, 1024),
       regs=st.integers(0, 255), shared=st.integers(0, 48 * 1024),
       carveout_kb=st.sampled_from([0, 8, 16, 32, 64, 96, 100]))
def test_blocks_per_sm_is_the_most_that_fit(gpu, threads, regs, shared, carveout_kb):
    g = GPUS[gpu]
    carveout = min(carveout_kb * 1024, g["shared"])
    if carveout_kb * 1024 not in [k * 1024 for k in g["carveouts"]]:
        carveout = max(k * 1024 for k in g["carveouts"] if k * 1024 <= carveout)
    wpb = -(-threads // 32)
    per_warp = -(-regs * 32 // 256) * 256
    # launches the hardware refuses (a block's registers over the register file) never run
    if per_warp * (-(-wpb // 4) * 4) > g["regs"]:
        return
    r = occ.occupancy(threads, regs, shared, 0, carveout, g["major"], g["minor"],
                      g["warps"], g["blocks"], g["regs"], g["shared"])
    want = max(n for n in range(0, 65) if n == 0 or _fits(n, g, threads, regs, shared,
                                                            carveout))
    assert r.blocks_per_sm[0] == want
    assert r.occupancy[0] == pytest.approx(want * wpb / g["warps"])
    # the limiter gives the least: relaxing a tied resource would not fit one more block
    by = {occ.LIMIT_WARPS: r.by_warps[0], occ.LIMIT_REGISTERS: r.by_registers[0],
          occ.LIMIT_SHARED: r.by_shared[0], occ.LIMIT_BLOCKS: r.by_blocks[0]}
    assert by[r.limiter[0]] == want


def test_unknown_architecture_gives_nothing():
    """Compute capability 6.1 (GTX 1060 in the corpus) and 11.0 are not in the tables: no
    blocks per SM, no occupancy (the caller says so); the grid's SM Active ceiling needs
    only the SMs and is still there, and the warps ceiling only the warps per SM."""
    r = occ.occupancy(256, 32, 0, 0, 49152, np.array([6, 11]), np.array([1, 0]), 64, 32,
                      65536, 98304)
    assert (r.blocks_per_sm == -1).all() and np.isnan(r.occupancy).all()
    assert (r.limiter == 0).all()
    g = occ.ceilings(5, 256, 10, np.nan, 64)
    assert g.sm_active[0] == 0.5 and g.warps[0] == pytest.approx(5 * 8 / 640)
    assert np.isnan(g.waves[0]) and np.isnan(g.resident[0])
    assert not occ.known(6, 1) and occ.known(8, 0) and "10.0" in occ.known_list()


def test_zero_registers_and_no_shared_memory_do_not_limit():
    """A kernel using no register and no shared memory (NVIDIA's calculator: no limit)
    before Ampere's reserved shared memory; from Ampere on the reserved 1 KB per block is
    allocated whatever the kernel asks."""
    v = occ.occupancy(64, 0, 0, 0, 0, 7, 0)
    assert v.by_registers[0] == -1 and v.by_shared[0] == -1
    assert v.blocks_per_sm[0] == 32 and v.limiter[0] == occ.LIMIT_WARPS
    a = occ.occupancy(32, 0, 0, 0, 0, 8, 0, 64, 32, 65536, 167936)
    # 1 KB a block in the 8 KB carveout the driver raises 0 to: 8 blocks
    assert a.shared_per_block[0] == 1024 and a.carveout[0] == 8192
    assert a.blocks_per_sm[0] == 8 and a.limiter[0] == occ.LIMIT_SHARED


def test_unknown_carveout_takes_the_largest():
    """sharedMemoryExecuted missing: the largest carveout (the calculator's default),
    so the blocks per SM are the most the shared memory could allow."""
    r = occ.occupancy(128, 32, 0, 40 * 1024, np.array([-1, 100 * 1024]), 8, 0, 64, 32,
                      65536, 167936)
    assert r.carveout.tolist() == [167936, 102400]
    assert r.blocks_per_sm.tolist() == [167936 // (41 * 1024), 102400 // (41 * 1024)]


@settings(max_examples=200, deadline=None)
@given(blocks=st.integers(1, 200_000), threads=st.integers(1, 1024),
       sms=st.integers(1, 160), bps=st.integers(1, 32), warps=st.sampled_from([32, 48, 64]))
def test_ceilings_closed_forms(blocks, threads, sms, bps, warps):
    """The issue's closed forms: SM Active <= min(1, blocks / SMs); warps in flight <=
    min(occupancy, blocks x warps per block / (SMs x warps per SM)); waves = blocks /
    (SMs x blocks per SM); the tail is the last wave's fill."""
    wpb = -(-threads // 32)
    if bps * wpb > warps:
        return
    g = occ.ceilings(blocks, threads, sms, bps, warps)
    assert g.sm_active[0] == pytest.approx(min(1.0, blocks / sms))
    occupancy = bps * wpb / warps
    assert g.warps[0] == pytest.approx(min(occupancy, blocks * wpb / (sms * warps)))
    assert g.waves[0] == pytest.approx(blocks / (sms * bps))
    full, rest = divmod(blocks, sms * bps)
    assert g.tail[0] == pytest.approx(rest / (sms * bps) if rest else 1.0)


def test_cluster_launch_takes_cuptis_active_clusters():
    """A cluster launch whose record says how many clusters fit at once: a wave is that many
    clusters' blocks (here fewer than SMs x blocks per SM), and SM Active cannot pass it."""
    g = occ.ceilings(np.array([480, 480]), 128, 132, 1, 64, np.array([30, 0]),
                     np.array([4, 4]))
    assert g.resident.tolist() == [120, 132]
    assert g.waves[0] == 4.0 and g.sm_active[0] == pytest.approx(120 / 132)
    assert g.sm_active[1] == 1.0


def test_rate_bounds_weight_each_configuration_by_its_time():
    """A kernel name launched with two grids: its rate is the time-weighted mean of its
    launches', so its bound is the time-weighted mean of their ceilings; SM Active gets the
    one-SM floor, copies and idle keep the metric's range."""
    keys = ["SM Active", "Compute Warps in Flight", "DRAM Read Bandwidth"]
    lo, hi = np.zeros(3), np.full(3, 100.0)
    col = np.array([0, 0, 0])  # three launches of column 0 (column 1: a copy; 2: idle)
    dur = np.array([1000, 1000, 2000])
    sm = np.array([10.0, 10.0, 100.0])
    warps = np.array([1.0, 1.0, np.nan])  # unknown for the last: the metric's own top
    lo2, hi2 = occ.rate_bounds(keys, lo, hi, col, dur, np.full(3, 108), sm, warps, 2)
    assert hi2[0, 0] == pytest.approx((10 * 2000 + 100 * 2000) / 4000)
    assert hi2[0, 1] == pytest.approx((1 * 2000 + 100 * 2000) / 4000)
    assert hi2[0, 2] == 100.0 and lo2[0, 2] == 0.0
    assert lo2[0, 0] == pytest.approx(100 / 108) and lo2[0, 1] == 0.0
    assert (hi2[1:] == 100.0).all() and (lo2[1:] == 0.0).all()
