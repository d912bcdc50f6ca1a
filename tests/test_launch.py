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


# -- the translation and the analysis ---------------------------------------------------------

import polars as pl  # noqa: E402

import nsys2prv  # noqa: E402
from conftest import CORPUS, need_exports, translated_once  # noqa: E402
from prvtools import sql, validate  # noqa: E402

from nsys2prv.analysis.launch import read_launches  # noqa: E402
from nsys2prv.testing.synth import A100, ApiCall, Kernel, Spec, write_export  # noqa: E402

AIPROF = CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite"


def _launches_by_sql(db) -> pl.DataFrame:
    """Per demangled name and launch configuration: launches and time, and what the
    calculator gives on the export's launch columns and its GPU's TARGET_INFO_GPU row."""
    rows = sql(db, "SELECT d.value, k.gridX * k.gridY * k.gridZ, k.blockX * k.blockY * "
                   "k.blockZ, k.registersPerThread, k.staticSharedMemory, "
                   "k.dynamicSharedMemory, k.sharedMemoryExecuted, count(*), "
                   "sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d "
                   "ON d.id = k.demangledName GROUP BY 1, 2, 3, 4, 5, 6, 7")
    g = sql(db, "SELECT smCount, maxWarpsPerSm, maxBlocksPerSm, maxRegistersPerSm, "
                "maxShmemPerSm, computeMajor, computeMinor FROM TARGET_INFO_GPU")
    assert len(set(g)) == 1
    sms, warps, blocks, regs, shared, major, minor = g[0]
    df = pl.DataFrame(rows, schema=["name", "blocks", "threads", "registers", "static",
                                    "dynamic", "carveout", "launches", "time"], orient="row")
    o = occ.occupancy(df["threads"].to_numpy(), df["registers"].to_numpy(),
                      df["static"].to_numpy(), df["dynamic"].to_numpy(),
                      df["carveout"].to_numpy(), major, minor, warps, blocks, regs, shared)
    c = occ.ceilings(df["blocks"].to_numpy(), df["threads"].to_numpy(), sms, o.blocks_per_sm,
                     warps)
    return df.with_columns(pl.Series("blocks_per_sm", o.blocks_per_sm),
                           pl.Series("occupancy", 100 * o.occupancy),
                           pl.Series("waves", c.waves), pl.Series("sm_ceiling", 100 * c.sm_active),
                           pl.Series("warps_ceiling", 100 * c.warps), pl.lit(sms).alias("sms"))


@pytest.fixture(scope="module")
def aiprof(tmp_path_factory):
    need_exports(AIPROF)
    return translated_once(AIPROF, tmp_path_factory)[1]


def test_launch_statistics_equal_the_export(aiprof):
    """aiprof_opt2 (A100): every launch configuration of every kernel, with its launches,
    time, blocks per SM, occupancy, waves and ceilings, is the export's (sqlite3 on its
    launch columns and TARGET_INFO_GPU, the calculator on those numbers); the issue's
    kernels have the ceilings it measured."""
    from nsys2prv.paraver.values import NORMALISERS, clean_label

    want = _launches_by_sql(AIPROF).with_columns(
        pl.col("name").map_elements(lambda n: clean_label(NORMALISERS["kernel_names"](n)),
                                    return_dtype=pl.Utf8).alias("kernel"))
    got = read_launches(aiprof).configs
    assert got.height == want.height == 124
    keys = ["kernel", "blocks", "threads", "registers", "carveout"]
    j = want.join(got, on=keys, how="inner", suffix="_got")
    assert j.height == want.height
    assert (j["launches"] == j["launches_got"]).all() and (j["time"] == j["time_got"]).all()
    assert (j["static"] + j["dynamic"] == j["shared"]).all()
    assert (j["blocks_per_sm"] == j["blocks_per_sm_got"]).all()
    assert ((j["occupancy"] - j["occupancy_got"]).abs() < 0.006).all()
    assert ((j["waves"] - j["waves_got"]).abs() < 1e-9).all()
    assert ((j["sm_ceiling_got"] - j["sm_ceiling"]).is_between(0, 0.01)).all()  # rounded up
    assert ((j["warps_ceiling_got"] - j["warps_ceiling"]).is_between(0, 0.01)).all()
    split = j.filter(pl.col("kernel").str.contains("split_k_kernel"))
    assert split["blocks"].to_list() == [10] and split["sm_ceiling_got"].item() == 9.26
    assert split["warps_ceiling_got"].item() == 0.58  # 40 of 6,912 warp slots
    offsets = j.filter(pl.col("kernel").str.contains("computeOffsetsKernel"))
    assert offsets["blocks"].to_list() == [3] and offsets["sm_ceiling_got"].item() == 2.78


def test_findings_on_aiprof(aiprof):
    """The findings name what the launch columns say: a grid smaller than the GPU (fewer
    blocks than SMs), occupancy held by registers or shared memory below 50 %, a large
    tail; only for configurations with 1 % of the GPU's kernel time."""
    L = read_launches(aiprof)
    f = L.findings
    assert f.height and (f["share"] >= 0.01).all()
    grid = f.filter(pl.col("finding") == "grid smaller than the GPU")
    assert (grid["blocks"] < 108).all() and grid.height >= 1
    assert any("100 blocks on 108 SMs" in t for t in grid["text"].to_list())
    regs = f.filter(pl.col("finding") == "occupancy limited by registers")
    assert any("255 registers per thread" in t for t in regs["text"].to_list())
    tail = f.filter(pl.col("finding") == "large tail")
    # reduce_kernel 448 blocks of 512 threads: 4 per SM, 432 a wave: 1.04 waves, 16 left
    assert any("1.04 waves of 432 blocks: the last holds 16" in t for t in tail["text"])


def _with_metrics(db) -> bool:
    from prvtools import tables

    t = tables(db)
    return "GPU_METRICS" in t or "GENERIC_EVENTS" in t and sql(
        db, "SELECT count(*) FROM GENERIC_EVENT_TYPES")[0][0] > 0


METRIC_EXPORTS = [CORPUS / "exported2023" / "aiprof_opt2.nsys2023.4.sqlite",
                  CORPUS / "exported" / "resest_gpumetrics_report2.nsys2022.4.sqlite",
                  CORPUS / "exported2023" / "ayushos_vector_add_gpumetrics_v3.nsys2023.4.sqlite"]


@pytest.mark.parametrize("db", METRIC_EXPORTS, ids=[p.name for p in METRIC_EXPORTS])
def test_no_rate_above_its_grid(db, tmp_path):
    """Every corpus export with GPU metrics: no kernel's SM Active, SM Issue, Tensor Active
    or warps-in-flight rate (per launch class: one model column each) above what its grids
    allow, the time-weighted mean of its launches' ceilings computed here from the export's
    grid sizes and SM count; no SM Active below one SM."""
    from nsys2prv.analysis.kernel_metrics import read_kernel_metrics
    from nsys2prv.paraver.values import NORMALISERS, clean_label

    need_exports(db)
    out = tmp_path / "t.prv"
    nsys2prv.translate(db, out)
    km = read_kernel_metrics(out)
    sms = sql(db, "SELECT smCount FROM TARGET_INFO_GPU")[0][0]
    rows = sql(db, "SELECT d.value, k.gridX * k.gridY * k.gridZ, k.end - k.start FROM "
                   "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName")
    df = pl.DataFrame(rows, schema=["name", "blocks", "dur"], orient="row")
    cap = 100 * np.minimum(df["blocks"].to_numpy(), sms) / sms
    df = df.with_columns(pl.Series("cap", np.ceil(cap * 100 - 1e-6) / 100),
                         pl.Series("class", occ.grid_class(np.ceil(cap * 100 - 1e-6))),
                         pl.col("name").map_elements(
                             lambda n: clean_label(NORMALISERS["kernel_names"](n)),
                             return_dtype=pl.Utf8).alias("kernel"))
    want = (df.group_by("kernel", "class")
            .agg(((pl.col("cap") * pl.col("dur")).sum() / pl.col("dur").sum()).alias("cap")))
    split = km.rates_by_launch
    per = km.rates.filter(pl.col("kind") == "kernel").with_columns(
        pl.lit(0, pl.Int64).alias("grid_class"))
    if split.height:
        per = pl.concat([per.filter(~pl.col("kernel").is_in(split["kernel"].unique()
                                                             .implode())), split],
                        how="diagonal_relaxed")
    checked = 0
    for r in per.filter(pl.col("metric").is_in(["SM Active", "SM Issue", "Tensor Active"])
                        & pl.col("rate").is_not_nan()).iter_rows(named=True):
        cap = want.filter((pl.col("kernel") == r["kernel"])
                          & (pl.col("class") == r["grid_class"]))["cap"]
        assert cap.len() == 1, r
        assert r["hi"] == pytest.approx(min(cap.item(), 100.0), abs=1e-5), r
        assert r["rate"] <= r["hi"] + 1e-9 and r["range_hi"] <= r["hi"] + 1e-9, r
        if r["metric"] == "SM Active":
            assert r["rate"] >= 100 / sms - 1e-6, r  # bounds are rounded to 1e-6
        checked += 1
    assert checked >= 3
    warps = per.filter((pl.col("metric") == "Compute Warps in Flight")
                       & pl.col("rate").is_not_nan())
    assert (warps["rate"] <= warps["hi"] + 1e-9).all()


def _one_kernel_export(path, kernel: Kernel, facts: dict | None = None, pid: int = 7,
                       rank: int | None = None):
    spec = Spec(processes=[(pid, "app")], threads=[(pid, pid, "app")],
                gpus=[(0, "GPU")], gpu_facts={0: facts or {}},
                env={} if rank is None else {"OMPI_COMM_WORLD_RANK": str(rank)})
    kernel.pid = pid
    spec.kernels = [kernel]
    spec.api = [ApiCall(kernel.start - 900, kernel.start - 100, pid, pid, "cudaLaunchKernel",
                        kernel.correlation)]
    return write_export(path, spec)


def test_bad_input_is_said_and_nothing_invented(tmp_path):
    """A kernel without launch columns, a GPU without limits, a compute capability the
    tables do not hold, a kernel with no register: each translated, said in the summary,
    and the launch statistics hold what can be known and nothing else."""
    k = Kernel(10_000, 50_000, 7, 0, 7, "k", 1, grid=(40, 1, 1), block=(256, 1, 1))
    # 1. the launch columns dropped (an export that has none)
    db = _one_kernel_export(tmp_path / "nolaunch.sqlite", k)
    import sqlite3
    con = sqlite3.connect(db)
    for col in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"):
        con.execute(f'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN "{col}"')
    con.commit()
    con.close()
    r = nsys2prv.translate(db, tmp_path / "nolaunch.prv")
    assert any("without their launch configuration" in w for w in r.warnings)
    L = read_launches(tmp_path / "nolaunch.prv")
    assert L.empty and "no launch statistics" in L.note
    # 2. a GPU without its SM count: the launch and its occupancy on one SM (the per-SM
    # limits are there), no waves nor ceiling
    db = _one_kernel_export(tmp_path / "nosm.sqlite", k, {"smCount": None})
    r = nsys2prv.translate(db, tmp_path / "nosm.prv")
    assert any("without smCount" in w for w in r.warnings)
    c = read_launches(tmp_path / "nosm.prv").configs.row(0, named=True)
    assert (c["blocks"], c["threads"], c["registers"]) == (40, 256, 32)
    assert c["occupancy"] == 100.0 and c["blocks_per_sm"] == 8
    assert c["sms"] is None and c["waves"] is None and c["sm_ceiling"] is None
    # 3. compute capability 6.1 (a GTX 1060 in the corpus): the grid's ceilings, from the
    # export's SMs and warps per SM alone; no blocks per SM, occupancy nor waves
    db = _one_kernel_export(tmp_path / "cc61.sqlite", k, {
        "computeMajor": 6, "computeMinor": 1, "smCount": 10, "maxWarpsPerSm": 64})
    r = nsys2prv.translate(db, tmp_path / "cc61.prv")
    assert any("compute capability 6.1, not in the occupancy tables" in w
               for w in r.warnings)
    c = read_launches(tmp_path / "cc61.prv").configs.row(0, named=True)
    assert c["occupancy"] is None and c["blocks_per_sm"] is None and c["waves"] is None
    # 40 blocks on 10 SMs: all of them busy; 40 x 8 warps of the 10 x 64 slots
    assert c["sm_ceiling"] == 100.0 and c["warps_ceiling"] == 50.0
    # 4. no register: no register limit (NVIDIA's calculator), said as a count
    k0 = Kernel(10_000, 50_000, 7, 0, 7, "k", 1, grid=(4, 1, 1), block=(1024, 1, 1),
                registers=0)
    db = _one_kernel_export(tmp_path / "noregs.sqlite", k0)
    r = nsys2prv.translate(db, tmp_path / "noregs.prv")
    assert any("using no register" in w for w in r.counts)
    c = read_launches(tmp_path / "noregs.prv").configs.row(0, named=True)
    assert c["blocks_per_sm"] == 2 and c["limiter"] == "warps"  # 64 warps / 32 a block
    validate(tmp_path / "noregs.prv")
    # 5. the export's warps per SM left empty (benchmarks/generate.py): the architecture's
    # (8.0: 64) in the warps ceiling too; 40 blocks x 8 warps of 108 x 64 slots
    db = _one_kernel_export(tmp_path / "nowarps.sqlite", k, {"maxWarpsPerSm": None})
    nsys2prv.translate(db, tmp_path / "nowarps.prv")
    c = read_launches(tmp_path / "nowarps.prv").configs.row(0, named=True)
    assert c["occupancy"] == 100.0
    assert c["warps_ceiling"] == round(100 * 40 * 8 / (108 * 64), 2)


def test_gpus_of_several_kinds(tmp_path):
    """One job, two ranks on GPUs of different kinds (an A100 and a Turing T4: 40 SMs, 32
    warps and 16 blocks per SM, 64 KB of shared memory), the same kernel: one launch
    configuration per GPU kind, each with its own GPU's occupancy, waves and ceilings."""
    T4 = {"smCount": 40, "computeMajor": 7, "computeMinor": 5, "maxWarpsPerSm": 32,
          "maxBlocksPerSm": 16, "maxRegistersPerSm": 65536, "maxShmemPerSm": 65536}
    paths = []
    for rank, facts in enumerate((None, T4)):
        k = Kernel(10_000, 90_000, 7, 0, 7, "gemm", 1, grid=(200, 1, 1), block=(256, 1, 1),
                   registers=48, carveout=32768 if rank == 0 else 65536)
        paths.append(_one_kernel_export(tmp_path / f"r{rank}.sqlite", k, facts, pid=100 + rank,
                                        rank=rank))
    nsys2prv.translate([str(p) for p in paths], tmp_path / "job.prv")
    cfg = read_launches(tmp_path / "job.prv").configs.sort("sms")
    assert cfg["sms"].to_list() == [40, 108]
    for r, (sms, warps, blocks, major, minor, shared) in zip(
            cfg.iter_rows(named=True), ((40, 32, 16, 7, 5, 65536), (108, 64, 32, 8, 0, 167936))):
        o = occ.occupancy(256, 48, 0, 0, r["carveout"], major, minor, warps, blocks, 65536,
                          shared)
        g = occ.ceilings(200, 256, sms, o.blocks_per_sm, warps)
        assert r["blocks_per_sm"] == o.blocks_per_sm[0]
        assert r["occupancy"] == pytest.approx(100 * o.occupancy[0], abs=0.006)
        assert r["waves"] == pytest.approx(g.waves[0])
    # Turing: 48 registers x 32 = 1536 a warp, 10 warps a sub-partition = 40 warps, over
    # its 32: warps limit, 4 blocks of 8 warps = 100 %; the A100 the same 4 blocks by
    # registers (40 warps of 64: 62.5 %)
    assert cfg["occupancy"].to_list() == [100.0, 62.5]


def test_a_finding_of_several_gpus_is_one_line(tmp_path):
    """The same under-filled launch on two A100s (50 blocks on 108 SMs) is one finding
    with both GPUs' time; on a T4 of the same job (40 SMs) the grid is not smaller than
    the GPU. A block that no SM can hold (1024 threads x 128 registers: 128 K registers of
    the SM's 64 K) is said as the export's launch and GPU disagreeing, not as an
    occupancy."""
    T4 = {"smCount": 40, "computeMajor": 7, "computeMinor": 5, "maxWarpsPerSm": 32,
          "maxBlocksPerSm": 16, "maxRegistersPerSm": 65536, "maxShmemPerSm": 65536}
    paths = []
    for rank, facts in enumerate((None, None, T4)):
        k = Kernel(10_000, 90_000, 7, 0, 7, "small", 1, grid=(50, 1, 1), block=(128, 1, 1))
        big = Kernel(100_000, 130_000, 7, 0, 7, "big", 2, grid=(400, 1, 1),
                     block=(1024, 1, 1), registers=128)
        spec = Spec(processes=[(100 + rank, "app")], threads=[(100 + rank, 100 + rank, "app")],
                    gpus=[(0, "GPU")], gpu_facts={0: facts or {}},
                    env={"OMPI_COMM_WORLD_RANK": str(rank)})
        for kern in (k, big):
            kern.pid = 100 + rank
        spec.kernels = [k, big]
        spec.api = [ApiCall(x.start - 900, x.start - 100, 100 + rank, 100 + rank,
                            "cudaLaunchKernel", x.correlation) for x in (k, big)]
        paths.append(write_export(tmp_path / f"r{rank}.sqlite", spec))
    r = nsys2prv.translate([str(p) for p in paths], tmp_path / "job.prv")
    assert [n for w, n in r.warnings.items() if "does not fit one SM" in w] == [3]
    f = read_launches(tmp_path / "job.prv").findings
    grid = f.filter(pl.col("finding") == "grid smaller than the GPU")
    assert grid.height == 1 and grid["devices"].item() == 2
    assert "50 blocks on 108 SMs" in grid["text"].item()
    # each GPU ran 80 us of "small" and 30 us of "big"
    assert grid["share"].item() == pytest.approx(80 / 110)
    big = f.filter(pl.col("finding") == "block larger than an SM")
    assert big.height == 1 and big["devices"].item() == 3  # the A100s and the T4 alike
    assert all("1024 threads x 128 registers" in t for t in big["text"].to_list())
    assert f.filter((pl.col("kernel") == "big")
                    & pl.col("finding").str.contains("occupancy")).height == 0


def test_cluster_launches(tmp_path):
    """Hopper, kernels launched with thread block clusters: where CUPTI says how many
    clusters fit at once, a wave is that many clusters' blocks; where it does not, SMs x
    blocks per SM (an upper bound), said in the summary."""
    H100 = {"smCount": 132, "computeMajor": 9, "computeMinor": 0, "maxWarpsPerSm": 64,
            "maxBlocksPerSm": 32, "maxRegistersPerSm": 65536, "maxShmemPerSm": 233472}
    spec = Spec(processes=[(7, "app")], threads=[(7, 7, "app")], gpus=[(0, "H100")],
                gpu_facts={0: H100})
    spec.kernels = [Kernel(10_000, 50_000, 7, 0, 7, "a", 1, grid=(480, 1, 1),
                           block=(384, 1, 1), registers=168, dynamic_smem=200_000,
                           carveout=233472, cluster=(4, 1, 1), max_active_clusters=30),
                    Kernel(60_000, 90_000, 7, 0, 7, "b", 2, grid=(480, 1, 1),
                           block=(384, 1, 1), registers=168, dynamic_smem=200_000,
                           carveout=233472, cluster=(4, 1, 1), max_active_clusters=0)]
    spec.api = [ApiCall(1000, 2000, 7, 7, "cudaLaunchKernel", 1),
                ApiCall(55_000, 56_000, 7, 7, "cudaLaunchKernel", 2)]
    db = write_export(tmp_path / "h.sqlite", spec)
    r = nsys2prv.translate(db, tmp_path / "h.prv")
    assert r.counts["launch: kernels launched with thread block clusters"] == 2
    assert any("without CUPTI's maximum active clusters" in w for w in r.counts)
    cfg = {x["kernel"]: x for x in read_launches(tmp_path / "h.prv").configs.iter_rows(
        named=True)}
    assert cfg["a"]["cluster_size"] == 4 and cfg["a"]["resident"] == 120
    assert cfg["a"]["waves"] == 4.0 and cfg["a"]["sm_ceiling"] == pytest.approx(
        np.ceil(10000 * 120 / 132) / 100)
    # 1 block per SM (196 KB + 1 KB of shared memory in 228 KB): 132 a wave
    assert cfg["b"]["blocks_per_sm"] == 1 and cfg["b"]["resident"] == 132
    assert cfg["b"]["sm_ceiling"] == 100.0


def test_nccl_kernels_are_not_findings(tmp_path):
    """An all-gather of 4 blocks (NCCL's channels) beside a compute kernel of 50 blocks on an
    A100's 108 SMs: both are launch configurations, only the compute kernel is a finding
    (the corpus' alcf_seqpar: 'ncclDevKernel_AllGather_RING_LL under-filled' was noise)."""
    nccl = "ncclDevKernel_AllGather_RING_LL"
    spec = Spec(processes=[(7, "app")], threads=[(7, 7, "app")], gpus=[(0, "A100")])
    spec.kernels = [Kernel(10_000, 90_000, 7, 0, 7, "small", 1, grid=(50, 1, 1),
                           block=(128, 1, 1)),
                    Kernel(100_000, 300_000, 7, 0, 7, nccl, 2, grid=(4, 1, 1),
                           block=(544, 1, 1), registers=96)]
    spec.api = [ApiCall(x.start - 900, x.start - 100, 7, 7, "cudaLaunchKernel", x.correlation)
                for x in spec.kernels]
    nsys2prv.translate(write_export(tmp_path / "n.sqlite", spec), tmp_path / "n.prv")
    launches = read_launches(tmp_path / "n.prv")
    assert sorted(launches.configs["kernel"].to_list()) == [nccl, "small"]
    assert launches.configs.filter(pl.col("kernel") == nccl)["nccl"].item() is True
    assert launches.findings["kernel"].to_list() == ["small"]
    assert launches.findings["text"].item().startswith("under-filled by its launch: 50 blocks")
    # the all-gather alone: no finding, and analyze says NCCL kernels are not judged
    from nsys2prv.cli.analyze import _launch_lines

    spec.kernels, spec.api = spec.kernels[1:], spec.api[1:]
    nsys2prv.translate(write_export(tmp_path / "o.sqlite", spec), tmp_path / "o.prv")
    alone = read_launches(tmp_path / "o.prv")
    assert alone.configs["kernel"].to_list() == [nccl] and alone.findings.height == 0
    text = "\n".join(_launch_lines(alone, list_all=False, top=10))
    assert "findings: none (" in text and "NCCL kernels are not judged" in text


def test_diff_shows_a_changed_launch(tmp_path):
    """The GEMM's registers go from 32 to 128 a thread between the runs: diff's
    kernel_launches has both launches and what the change does (occupancy 100 % -> 25 %,
    now held by the registers: 128 x 32 = 4096 registers a warp, 4 warps a sub-partition,
    16 warps = 2 blocks of 8); the elementwise kernel, unchanged, is not there."""
    from nsys2prv.analysis.diff import compare
    from nsys2prv.cli.diff import format_text
    from nsys2prv.testing import synth_rates as sr

    def kinds(regs: int):
        return [sr.KernelKind("gemm", (85, 40, 70, 20), 200_000, 2_000_000, 1,
                              registers=regs),
                sr.KernelKind("elementwise", (70, 10, 0, 55), 2_000, 30_000, 4)]

    b = sr.write_export(sr.simulate(sr.RateScenario(kinds(32), span=40_000_000, seed=1)),
                        tmp_path / "before.sqlite")
    a = sr.write_export(sr.simulate(sr.RateScenario(kinds(128), span=40_000_000, seed=2)),
                        tmp_path / "after.sqlite")
    c = compare(str(b), str(a), rules=False)
    ch = c.launches
    assert ch["kernel"].to_list() == ["gemm"]
    r = ch.row(0, named=True)
    assert (r["registers_before"], r["registers_after"]) == (32, 128)
    assert (r["occupancy_before"], r["occupancy_after"]) == (100.0, 25.0)
    assert r["limiter_after"] == "registers"
    assert r["change"].startswith("occupancy 100.0 % -> 25.0 %, limiter registers")
    assert "kernel_launches" in c.tables()
    text = format_text(c)
    assert "kernels whose launch changed (1" in text
    assert "4096 x 256, 32 regs -> 4096 x 256, 128 regs: occupancy 100.0 % -> 25.0 %" in text
    # the paragraph names the GEMM among the kernels that moved most, then its new launch
    # (the elementwise kernel, named too, kept its launch)
    assert "Kernels that moved most: gemm" in c.paragraph
    sentence = [s for s in c.paragraph.split(". ") if s.startswith("Launched differently")]
    assert sentence == ["Launched differently after: gemm 4096 x 256, 32 regs -> 4096 x 256, "
                        "128 regs (occupancy 100.0 % -> 25.0 %, limiter registers; waves "
                        f"{r['waves_before']:.2f} -> {r['waves_after']:.2f})"]
    from test_story import assert_numbers_from_tables
    assert_numbers_from_tables(c)


def test_diff_of_launches_without_the_gpu_limits(tmp_path):
    """Reports of older nsys leave TARGET_INFO_GPU's limits and compute capability empty
    (the corpus' darknet pair): a kernel launched with 480 blocks, then 120, is in kernel_launches with
    occupancy and waves unknown on both sides, not 'the same', and the paragraph says so;
    analyze says its findings cannot be made rather than that there are none."""
    from nsys2prv.analysis.diff import compare

    def run(blocks: int, name: str):
        spec = Spec(processes=[(7, "app")], threads=[(7, 7, "app")], gpus=[(0, "V100")],
                    gpu_facts={0: dict.fromkeys(("smCount", "computeMajor", "computeMinor",
                                                 "maxWarpsPerSm", "maxBlocksPerSm",
                                                 "maxRegistersPerSm", "maxShmemPerSm"))})
        spec.kernels = [Kernel(10_000 + 100_000 * i, 60_000 + 100_000 * i * (blocks // 120),
                               7, 0, 7, "k", i + 1, grid=(blocks, 1, 1), block=(256, 1, 1))
                        for i in range(4)]
        spec.api = [ApiCall(1000 + 100_000 * i, 2000 + 100_000 * i, 7, 7, "cudaLaunchKernel",
                            i + 1) for i in range(4)]
        return write_export(tmp_path / name, spec)

    c = compare(str(run(480, "b.sqlite")), str(run(120, "a.sqlite")), rules=False)
    r = c.launches.row(0, named=True)
    assert (r["blocks_before"], r["blocks_after"]) == (480, 120)
    assert r["occupancy_before"] is None and r["waves_after"] is None
    assert r["change"] == ("occupancy and waves unknown on both sides (the export has no SM "
                           "limits of the GPU)")
    assert (f"Launched differently after: k 480 x 256, 32 regs -> 120 x 256, 32 regs "
            f"({r['change']}).") in c.paragraph, c.paragraph
    # analyze: the launches as written, and no finding said to be none
    from nsys2prv.analysis.launch import NO_LIMITS
    from nsys2prv.cli.analyze import _launch_lines

    nsys2prv.translate(tmp_path / "b.sqlite", tmp_path / "b.prv")
    launches = read_launches(tmp_path / "b.prv")
    assert launches.configs["blocks"].to_list() == [480]
    assert launches.note == NO_LIMITS and launches.findings.height == 0
    text = "\n".join(_launch_lines(launches, list_all=False, top=10))
    assert NO_LIMITS in text and "findings: none (" not in text


def test_speed_of_light_points_are_the_rates(tmp_path):
    """The speed-of-light chart's points are the kernels' rates: compute = the larger of SM
    Issue and Tensor Active, memory = DRAM read + write; the PNG is written (matplotlib)."""
    pytest.importorskip("matplotlib")
    from nsys2prv.analysis.kernel_metrics import read_kernel_metrics
    from nsys2prv.analysis.plot import plot_speed_of_light, speed_of_light_points
    from nsys2prv.testing import synth_rates as sr

    kinds = [sr.KernelKind("gemm", (85, 40, 70, 20), 200_000, 2_000_000, 1),
             sr.KernelKind("copy", (30, 5, 0, 60), 20_000, 200_000, 2)]
    sc = sr.RateScenario(kinds, span=40_000_000, seed=3,
                         metrics=sr.METRICS + ("DRAM Write Bandwidth [Throughput %]",),
                         idle_rates=(0.0,) * 5)
    for k, w in zip(sc.kinds, (5.0, 15.0)):
        k.rates = k.rates + (w,)
    db = sr.write_export(sr.simulate(sc), tmp_path / "s.sqlite")
    nsys2prv.translate(db, tmp_path / "s.prv")
    km = read_kernel_metrics(tmp_path / "s.prv")
    p = speed_of_light_points(km)
    rate = {(r["kernel"], r["metric"]): r["rate"] for r in km.rates.iter_rows(named=True)}
    for r in p.iter_rows(named=True):
        k = r["kernel"]
        assert r["compute"] == pytest.approx(max(rate[(k, "SM Issue")],
                                                 rate[(k, "Tensor Active")]))
        assert r["memory"] == pytest.approx(rate[(k, "DRAM Read Bandwidth")]
                                            + rate[(k, "DRAM Write Bandwidth")])
    assert set(p["kernel"]) == {"gemm", "copy"}
    png = plot_speed_of_light(km, tmp_path / "sol.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_attribute_columns_without_a_table_over_the_types():
    """Each launch attribute type has its column in `launch.CONFIG`'s order, any other
    type -1; the module holds no table indexed by type (the types span 4M numbers: such
    a table was 32 MB in every analysis)."""
    from nsys2prv.analysis import launch

    types = list(launch.CONFIG)
    # others: beside the types, and with a type's low bits (the lookup's slot)
    others = [min(types) - 1, max(types) + 1, 0] + [t + (1 << launch._TYPE_BITS) * k
                                                     for t in types for k in (1, -3, 1000)]
    got = launch._column_of_type(np.array(types + others))
    assert got.tolist() == list(range(len(types))) + [-1] * len(others)
    arrays = [v for v in vars(launch).values() if isinstance(v, np.ndarray)]
    assert arrays and max(a.nbytes for a in arrays) < 1 << 10
