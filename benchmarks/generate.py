#!/usr/bin/env python3
"""Write large synthetic Nsight Systems SQLite exports for benchmarking.

The tables and columns are the project's 2025.1 layout (`nsys2prv.testing.synth._columns`,
"3.17.1"); the contents model one profiled process driving D GPUs, one host thread per GPU:

* CUDA runtime calls (`CUPTI_ACTIVITY_KIND_RUNTIME`) back to back on each host thread, with
  realistic names (`cudaLaunchKernel_v7000`, `cudaMemcpyAsync_v3020`, ...) and correlation
  ids numbered in call order across the process, as CUPTI does;
* every kernel, memcpy and memset is issued by one call on its device's thread and runs on
  one of S streams of that device; a stream runs its work in issue order, never before the
  call that issued it and never overlapping (so no lanes are needed);
* a few hundred distinct kernel names (PyTorch/cuBLAS/cuDNN/CUTLASS/Triton-like) with
  Zipf-like frequencies, NCCL kernels (`ncclDevKernel_*`) on a stream of their own;
* NVTX push/pop ranges nested two levels deep on every host thread (default domain, an
  application domain and the NCCL domain), with registered strings (`textId`);
* the metadata a real export has: META_DATA_EXPORT, META_DATA_CAPTURE, StringIds, ENUM_*
  tables, TARGET_INFO_* (GPUs, streams, contexts, system env, session start), PROCESSES,
  ThreadNames.

Columns are built with numpy and written with the ADBC SQLite driver's bulk ingest (about
1M rows/s for the kernel table); without `adbc_driver_sqlite`, `executemany` is used.

    python benchmarks/generate.py ../benchdata/b1m.sqlite --preset 1M
    python benchmarks/generate.py out.sqlite --kernels 10000000 --api 10000000 --nvtx 1000000

`EXPORT_SCHEMA_VERSION` defaults to 3.16.3 so that BSC's nsys2prv 0.5.8 (which warns outside
3.11-3.16) reads the file without complaint; the columns are the 3.17.1 set, a superset of
what 0.5.8 reads (it needs e.g. greenContextId, TARGET_INFO_CUDA_CONTEXT_INFO and a Hostname
row in TARGET_INFO_SYSTEM_ENV).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

try:
    import nsys2prv  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nsys2prv.testing import synth
from nsys2prv.testing.synth import (
    NVTX_EVENT_TYPES,
    SYNC_TYPES,
    _column_type,
    _columns,
    global_tid,
)

# Activity mix of the presets (fractions of the total row count).
MIX = {"kernels": 0.44, "memcpy": 0.02, "memset": 0.01, "api": 0.50, "nvtx": 0.03}
PRESETS = {"100K": 100_000, "1M": 1_000_000, "10M": 10_000_000, "50M": 50_000_000}

BATCH = 1_000_000


# --------------------------------------------------------------------------- names -----
def kernel_names(n: int, nccl: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """(demangled, short) names: n non-NCCL kernels and `nccl` NCCL kernels."""
    out: list[tuple[str, str]] = []
    dtypes = ["float", "c10::Half", "c10::BFloat16", "double", "long", "int", "bool",
              "unsigned char"]
    functors = ["FillFunctor", "CUDAFunctor_add", "MulFunctor", "AbsFunctor", "sqrt_kernel_cuda",
                "GeluCUDAKernelImpl", "silu_kernel", "tanh_kernel_cuda", "sigmoid_kernel_cuda",
                "exp_kernel_cuda", "neg_kernel_cuda", "where_kernel_impl", "copy_kernel_impl",
                "clamp_scalar_kernel_impl", "div_true_kernel_cuda", "pow_tensor_scalar_kernel"]
    for f in functors:
        for d in dtypes:
            short = "vectorized_elementwise_kernel"
            out.append((f"void at::native::vectorized_elementwise_kernel<4, "
                        f"at::native::{f}<{d}>, at::detail::Array<char*, 2>>"
                        f"(int, at::native::{f}<{d}>, at::detail::Array<char*, 2>)", short))
            short = "elementwise_kernel"
            out.append((f"void at::native::elementwise_kernel<128, 2, "
                        f"at::native::gpu_kernel_impl_nocast<at::native::{f}<{d}>>"
                        f"(at::TensorIteratorBase&, at::native::{f}<{d}> const&)::"
                        f"{{lambda(int)#1}}>(int, {{lambda(int)#1}})", short))
    for tile in ("128x64", "128x128", "64x64", "256x128", "64x32", "32x32"):
        for lay in ("nn", "nt", "tn", "tt"):
            for pre in ("ampere_sgemm", "ampere_h16816gemm", "sm80_xmma_gemm_f16f16"):
                name = f"{pre}_{tile}_{lay}"
                out.append((name, name))
    for op in ("softmax_warp_forward", "softmax_warp_backward", "layer_norm_kernel",
               "LayerNormBackwardCUDAKernel", "reduce_kernel", "index_elementwise_kernel",
               "indexSelectLargeIndex", "embedding_backward_feature_kernel", "cat_array_batched_copy",
               "fused_dropout_kernel", "nll_loss_forward_reduce_cuda_kernel_2d",
               "cunn_SoftMaxForward", "adam_math", "multi_tensor_apply_kernel",
               "CatArrayBatchedCopy", "unrolled_elementwise_kernel", "radixSortKVInPlace",
               "upsample_bilinear2d_out_frame", "max_pool_forward_nchw", "batch_norm_collect_statistics"):
        for d in ("float", "c10::Half", "c10::BFloat16"):
            out.append((f"void at::native::(anonymous namespace)::{op}<{d}, {d}, float>"
                        f"({d}*, {d} const*, int, int, int)", op))
    for i in range(40):
        name = f"triton_poi_fused_add_mul_{i}"
        out.append((name, name))
        name = f"triton_red_fused_native_layer_norm_{i}"
        out.append((name, name))
    for i in range(12):
        cut = (f"cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_"
               f"{64 * (1 + i % 4)}x{64 * (1 + i // 4)}_32x3_tn_align8>")
        out.append((f"void {cut}({cut}::Params)", "Kernel2"))
        cud = f"cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, {i % 2 == 0}, false, (cudnnKernelDataType_t){i % 3}>"
        out.append((f"void {cud}(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, "
                    "float const*, float*)", "nchwToNhwcKernel"))
    # Deduplicate, keep order, take n.
    seen, uniq = set(), []
    for d, s in out:
        if d not in seen:
            seen.add(d)
            uniq.append((d, s))
    while len(uniq) < n:  # more than the families give: numbered variants
        i = len(uniq)
        uniq.append((f"void generated_kernel_{i}<float>(float*, int)", f"generated_kernel_{i}"))
    order = rng.permutation(len(uniq))[:n]
    names = [uniq[i] for i in sorted(order)]
    ncc: list[tuple[str, str]] = []
    for op in ("AllReduce_Sum", "AllGather", "ReduceScatter_Sum", "Broadcast", "SendRecv",
               "AllReduce_Max", "Reduce_Sum"):
        for dt in ("f32", "bf16", "f16", "i64"):
            for algo in ("RING_LL", "RING_LL128", "TREE_LL", "RING_SIMPLE"):
                short = f"ncclDevKernel_{op}_{dt}_{algo}"
                ncc.append((f"{short}(ncclDevKernelArgsStorage<4096ul>)", short))
    return names + ncc[:nccl]


API_LAUNCH = ("cudaLaunchKernel_v7000", 0.9), ("cuLaunchKernel", 0.1)
API_NCCL_LAUNCH = "cudaLaunchKernelExC_v11060"
API_MEMCPY = "cudaMemcpyAsync_v3020"
API_MEMSET = "cudaMemsetAsync_v3020"
# Calls that issue no GPU work: (name, weight, median duration ns)
API_OTHER = [
    ("cudaStreamSynchronize_v3020", 0.14, 25_000),
    ("cudaEventRecord_v3020", 0.22, 1_500),
    ("cudaStreamWaitEvent_v3020", 0.12, 1_200),
    ("cudaEventQuery_v3020", 0.10, 600),
    ("cudaGetDevice_v3020", 0.12, 300),
    ("cudaStreamIsCapturing_v10000", 0.10, 350),
    ("cudaPointerGetAttributes_v4000", 0.05, 700),
    ("cudaFuncGetAttributes_v3020", 0.04, 900),
    ("cudaMalloc_v3020", 0.03, 60_000),
    ("cudaFree_v3020", 0.03, 40_000),
    ("cudaDeviceSynchronize_v3020", 0.02, 120_000),
    ("cudaMemGetInfo_v3020", 0.03, 2_000),
]

NVTX_OUTER = ["train_step", "forward", "backward", "optimizer.step", "data_loader.next",
              "validation", "checkpoint", "zero_grad", "all_reduce_gradients", "eval_step"]
NVTX_INNER = [f"{m}.{op}" for m in ("encoder", "decoder", "embed", "head", "attn", "mlp")
              for op in ("forward", "backward", "qkv_proj", "softmax", "out_proj", "norm",
                         "dropout", "residual")]
NVTX_NCCL = ["ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
             "ncclGroupStart", "ncclGroupEnd", "ncclSend", "ncclRecv"]
NVTX_APP_DOMAIN = "app"

MEMCPY_OPER = [("UNKNOWN", "Unknown"), ("HTOD", "Host-to-Device"), ("DTOH", "Device-to-Host"),
               ("HTOA", "Host-to-Array"), ("ATOH", "Array-to-Host"), ("ATOA", "Array-to-Array"),
               ("ATOD", "Array-to-Device"), ("DTOA", "Device-to-Array"),
               ("DTOD", "Device-to-Device"), ("HTOH", "Host-to-Host"),
               ("PTOP", "Peer-to-Peer")]
MEM_KIND = [("PAGEABLE", "Pageable"), ("PINNED", "Pinned"), ("DEVICE", "Device"),
            ("ARRAY", "Array"), ("MANAGED", "Managed"), ("DEVICE_STATIC", "Device Static"),
            ("MANAGED_STATIC", "Managed Static"), ("UNKNOWN", "Unknown")]


class Strings(synth.Strings):
    def ids_of(self, names) -> np.ndarray:
        return np.array(super().ids_of(names), dtype=np.int64)


def zipf_weights(n: int, a: float, rng: np.random.Generator) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** a
    w = w[rng.permutation(n)]
    return w / w.sum()


def lognormal(rng, median: float, sigma: float, n: int, lo: int = 1, hi: int | None = None):
    x = rng.lognormal(np.log(median), sigma, n)
    x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x.astype(np.int64)


# ------------------------------------------------------------------------- writer ------
class Writer:
    def __init__(self, path: Path, layout: str = "3.17.1", fresh: bool = True) -> None:
        """A bulk writer of `path`: a new file, or (`fresh` False) the export there."""
        self.path = path
        self.cols = _columns(layout)
        if fresh:
            for p in (path, Path(str(path) + "-journal")):
                p.unlink(missing_ok=True)
            con = sqlite3.connect(path)
            con.execute("PRAGMA page_size=4096")
            con.close()
        try:
            import adbc_driver_sqlite.dbapi as adbc
            self._adbc = adbc.connect(str(path), autocommit=True)
            self._cur = self._adbc.cursor()
            for p in ("PRAGMA journal_mode=OFF", "PRAGMA synchronous=OFF",
                      "PRAGMA cache_size=-262144", "PRAGMA locking_mode=EXCLUSIVE"):
                self._cur.execute(p)
                self._cur.fetchall() if self._cur.description else None
            self._con = None
        except ImportError:
            self._adbc = None
            self._con = sqlite3.connect(path, isolation_level=None)
            for p in ("PRAGMA journal_mode=OFF", "PRAGMA synchronous=OFF",
                      "PRAGMA cache_size=-262144", "PRAGMA locking_mode=EXCLUSIVE"):
                self._con.execute(p)
        self.created: set[str] = set()

    def _exec(self, sql: str) -> None:
        if self._adbc is not None:
            self._cur.execute(sql)
        else:
            self._con.execute(sql)

    def create(self, table: str) -> None:
        defs = ", ".join(f'"{c}" {_column_type(table, c)}' for c in self.cols[table])
        self._exec(f'CREATE TABLE "{table}" ({defs})')
        self.created.add(table)

    def insert(self, table: str, data: dict[str, object], n: int) -> None:
        """Append n rows; columns missing from `data` are NULL (as nsys leaves them)."""
        if table not in self.created:
            self.create(table)
        arrays = []
        for c in self.cols[table]:
            v = data.get(c)
            typ = {"TEXT": pa.string(), "REAL": pa.float64(),
                   "INTEGER": pa.int64()}[_column_type(table, c)]
            if v is None:
                arrays.append(pa.nulls(n, typ))
            elif isinstance(v, pa.Array):
                arrays.append(v.cast(typ))
            elif isinstance(v, (int, str, float)):
                arrays.append(pa.array([v] * n, typ))
            else:
                arrays.append(pa.array(v, typ))
        tbl = pa.Table.from_arrays(arrays, names=self.cols[table])
        if self._adbc is not None:
            self._cur.execute("BEGIN")
            self._cur.adbc_ingest(table, tbl, mode="append")
            self._cur.execute("COMMIT")
        else:
            names = ", ".join(f'"{c}"' for c in self.cols[table])
            marks = ", ".join("?" for _ in self.cols[table])
            self._con.execute("BEGIN")
            self._con.executemany(f'INSERT INTO "{table}" ({names}) VALUES ({marks})',
                                  zip(*[a.to_pylist() for a in tbl.columns]))
            self._con.execute("COMMIT")

    def rows(self, table: str, rows: list[dict]) -> None:
        if not rows:
            if table not in self.created:
                self.create(table)
            return
        keys = {k for r in rows for k in r}
        self.insert(table, {k: [r.get(k) for r in rows] for k in keys}, len(rows))

    def close(self) -> None:
        if self._adbc is not None:
            self._cur.close()
            self._adbc.close()
        else:
            self._con.close()


# ---------------------------------------------------------------------- generation -----
def generate(path: Path, *, kernels: int, api: int, memcpy: int, memset: int, nvtx: int,
             devices: int = 2, streams: int = 4, n_kernel_names: int = 300,
             nccl_fraction: float = 0.05, pid: int = 4242, rank: int | None = None,
             world: int | None = None, host: str = "bench-node",
             schema_version: str = "3.16.3", seed: int = 1, quiet: bool = False) -> dict:
    t_begin = time.time()
    rng = np.random.default_rng(seed)
    log = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    gpu_ops = kernels + memcpy + memset
    if api < gpu_ops:
        log(f"--api raised from {api} to {gpu_ops}: every GPU activity needs its launch call")
        api = gpu_ops
    D, S = devices, streams
    s = Strings()
    w = Writer(path)

    # ---- names -------------------------------------------------------------------------
    n_nccl_names = 16 if nccl_fraction > 0 else 0
    knames = kernel_names(n_kernel_names, n_nccl_names, rng)
    kdem = s.ids_of([d for d, _ in knames])
    kshort = s.ids_of([sh for _, sh in knames])
    kmang = s.ids_of([f"_Z{len(sh)}{sh}P{len(d) % 7}v" for d, sh in knames])
    n_plain = len(knames) - n_nccl_names
    plain_w = zipf_weights(n_plain, 1.1, rng)
    nccl_w = zipf_weights(n_nccl_names, 1.0, rng) if n_nccl_names else None
    # per-name launch geometry
    nk = len(knames)
    k_block = rng.choice([64, 128, 256, 512, 1024], nk, p=[0.1, 0.3, 0.35, 0.2, 0.05])
    k_grid = lognormal(rng, 512, 2.0, nk, 1, 2_000_000)
    k_regs = rng.choice([16, 24, 32, 40, 48, 64, 96, 128, 168, 255], nk)
    k_ssm = rng.choice([0, 0, 0, 1024, 4096, 16384, 49152], nk)
    k_dsm = rng.choice([0, 0, 0, 0, 8192, 32768, 98304], nk)
    k_lmem = rng.choice([0, 0, 0, 0, 0, 16, 64], nk)
    k_dur = lognormal(rng, 6_000, 0.9, nk, 1_500, 300_000)  # median duration per name
    k_dur[n_plain:] = lognormal(rng, 60_000, 0.8, n_nccl_names, 10_000, 3_000_000)

    api_names = ([n for n, _ in API_LAUNCH] + [API_NCCL_LAUNCH, API_MEMCPY, API_MEMSET]
                 + [n for n, _, _ in API_OTHER])
    api_ids = s.ids_of(api_names)
    A_LAUNCH, A_CULAUNCH, A_NCCL, A_MEMCPY, A_MEMSET = 0, 1, 2, 3, 4
    other_w = np.array([x[1] for x in API_OTHER])
    other_w = other_w / other_w.sum()
    other_med = np.array([x[2] for x in API_OTHER])

    # ---- per host thread (one per device): calls and GPU work ---------------------------
    tids = [pid] + [pid + 7 + d for d in range(1, D)]
    t0 = 2_000_000_000  # ns after session start
    per = lambda total, d: total // D + (1 if d < total % D else 0)  # noqa: E731
    call_cols = {k: [] for k in ("start", "end", "tid", "name")}
    op_cols = {k: [] for k in ("start", "end", "device", "stream", "call", "type", "name",
                               "bytes", "copy")}
    call_base = 0
    for d in range(D):
        A, K, M, MS = per(api, d), per(kernels, d), per(memcpy, d), per(memset, d)
        G = K + M + MS
        is_op = np.zeros(A, dtype=bool)
        op_pos = np.sort(rng.choice(A, G, replace=False)) if G < A else np.arange(A)
        is_op[op_pos] = True
        op_type = rng.permutation(np.repeat(np.array([0, 1, 2], dtype=np.int8), [K, M, MS]))
        # kernel names (NCCL with probability nccl_fraction)
        op_name = np.full(G, -1, dtype=np.int64)
        kmask = op_type == 0
        nk_d = int(kmask.sum())
        is_nccl = rng.random(nk_d) < nccl_fraction if n_nccl_names else np.zeros(nk_d, bool)
        names_d = rng.choice(n_plain, nk_d, p=plain_w)
        if n_nccl_names and is_nccl.any():
            names_d[is_nccl] = n_plain + rng.choice(n_nccl_names, int(is_nccl.sum()), p=nccl_w)
        op_name[kmask] = names_d
        # call names and durations
        cname = np.empty(A, dtype=np.int64)
        cdur = np.empty(A, dtype=np.int64)
        other = ~is_op
        n_other = int(other.sum())
        oi = rng.choice(len(API_OTHER), n_other, p=other_w)
        cname[other] = 5 + oi
        cdur[other] = (other_med[oi] * rng.lognormal(0, 0.6, n_other)).astype(np.int64) + 150
        op_call_name = np.where(op_type == 1, A_MEMCPY, np.where(op_type == 2, A_MEMSET, A_LAUNCH))
        knccl = np.zeros(G, dtype=bool)
        knccl[kmask] = op_name[kmask] >= n_plain
        op_call_name[knccl] = A_NCCL
        cu = (op_type == 0) & ~knccl & (rng.random(G) < 0.1)
        op_call_name[cu] = A_CULAUNCH
        cname[is_op] = op_call_name
        cdur[is_op] = np.where(op_type == 1, lognormal(rng, 7_000, 0.5, G, 2_000),
                               lognormal(rng, 3_500, 0.45, G, 1_200))
        gap = lognormal(rng, 4_000, 0.9, A, 200, 5_000_000)
        cstart = t0 + rng.integers(0, 50_000) + np.concatenate(
            ([0], np.cumsum(cdur[:-1] + gap[:-1])))
        cend = cstart + cdur
        # GPU work
        ostream = rng.integers(0, max(S - 1, 1), G)  # streams 0..S-2 for compute/copies
        if S > 1:
            ostream[knccl] = S - 1  # NCCL on its own stream
        obytes = np.zeros(G, dtype=np.int64)
        ocopy = np.zeros(G, dtype=np.int64)
        odur = np.empty(G, dtype=np.int64)
        odur[kmask] = (k_dur[op_name[kmask]] * rng.lognormal(0, 0.35, nk_d)).astype(np.int64) + 800
        mm = op_type == 1
        obytes[mm] = lognormal(rng, 128 * 1024, 1.5, int(mm.sum()), 4, 256 << 20)
        ocopy[mm] = rng.choice([1, 2, 8], int(mm.sum()), p=[0.5, 0.3, 0.2])
        odur[mm] = 1_200 + obytes[mm] // 12  # ~12 GB/s
        ms = op_type == 2
        obytes[ms] = lognormal(rng, 64 * 1024, 2.0, int(ms.sum()), 4, 1 << 30)
        odur[ms] = 900 + obytes[ms] // 400
        ready = cstart[op_pos] + cdur[op_pos] // 2 + lognormal(rng, 3_000, 0.4, G, 500)
        ostart = np.empty(G, dtype=np.int64)
        for st in range(S):  # stream runs in issue order: end_j = C_j + max_{k<=j}(ready_k - C_{k-1})
            idx = np.flatnonzero(ostream == st)
            if not idx.size:
                continue
            dur = odur[idx]
            C = np.cumsum(dur)
            Cprev = C - dur
            end = C + np.maximum.accumulate(ready[idx] - Cprev)
            ostart[idx] = end - dur
        call_cols["start"].append(cstart)
        call_cols["end"].append(cend)
        call_cols["tid"].append(np.full(A, tids[d], dtype=np.int64))
        call_cols["name"].append(cname)
        op_cols["start"].append(ostart)
        op_cols["end"].append(ostart + odur)
        op_cols["device"].append(np.full(G, d, dtype=np.int64))
        op_cols["stream"].append(ostream)
        op_cols["call"].append(call_base + op_pos)
        op_cols["type"].append(op_type)
        op_cols["name"].append(op_name)
        op_cols["bytes"].append(obytes)
        op_cols["copy"].append(ocopy)
        call_base += A
        busy = [odur[ostream == st].sum() / max(cend[-1] - cstart[0], 1) for st in range(S)]
        lag = (ostart - ready).max() / 1e6
        log(f"  device {d}: {A} calls, {K} kernels ({int(knccl.sum())} NCCL), {M} memcpy, "
            f"{MS} memset over {(cend[-1] - cstart[0]) / 1e9:.2f} s; streams busy "
            + "/".join(f"{b:.0%}" for b in busy) + f", max queueing {lag:.1f} ms")
    calls = {k: np.concatenate(v) for k, v in call_cols.items()}
    ops = {k: np.concatenate(v) for k, v in op_cols.items()}
    del call_cols, op_cols
    # Correlation ids in call order across threads (CUPTI numbers calls process-wide).
    corder = np.argsort(calls["start"], kind="stable")
    corr = np.empty(api, dtype=np.int64)
    corr[corder] = np.arange(1, api + 1)
    # ---- strings of NVTX and threads ---------------------------------------------------
    thread_names = ["python3"] + [f"pt_autograd_{d}" for d in range(1, D)]
    thread_name_ids = s.ids_of(thread_names)
    nv_outer = s.ids_of(NVTX_OUTER)
    nv_inner = s.ids_of(NVTX_INNER)
    nv_nccl = s.ids_of(NVTX_NCCL)

    # ---- write: metadata ----------------------------------------------------------------
    major, minor, micro = (schema_version.split(".") + ["0", "0"])[:3]
    w.rows("META_DATA_EXPORT", [
        {"name": "EXPORT_PRODUCT_NAME", "value": "Nsight Systems"},
        {"name": "EXPORT_PRODUCT_VERSION", "value": "2025.1.1.110-251135540420v0"},
        {"name": "EXPORT_SCHEMA_VERSION", "value": schema_version},
        {"name": "EXPORT_SCHEMA_VERSION_MAJOR", "value": major},
        {"name": "EXPORT_SCHEMA_VERSION_MINOR", "value": minor},
        {"name": "EXPORT_SCHEMA_VERSION_MICRO", "value": micro}])
    env = {"HOSTNAME": host, "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(D)))}
    if rank is not None:
        env.update({"OMPI_COMM_WORLD_RANK": str(rank), "RANK": str(rank)})
        if world is not None:
            env.update({"OMPI_COMM_WORLD_SIZE": str(world), "WORLD_SIZE": str(world)})
    w.rows("META_DATA_CAPTURE", [{"name": "PROCESS_0:ENVIRONMENT_VARIABLE", "value": f'{k}="{v}"'}
                                 for k, v in env.items()]
           + [{"name": "CAPTURE_START_TIME_UTC", "value": "2026-01-01T00:00:00Z"}])
    w.rows("ENUM_NSYS_EVENT_TYPE", [{"id": i, "name": n, "label": n}
                                    for n, i in NVTX_EVENT_TYPES.items()])
    w.rows("ENUM_CUDA_MEMCPY_OPER", [{"id": i, "name": "CUDA_MEMCPY_KIND_" + n, "label": lbl}
                                     for i, (n, lbl) in enumerate(MEMCPY_OPER)])
    w.rows("ENUM_CUDA_MEM_KIND", [{"id": i, "name": "CUDA_MEMOPR_MEMORY_KIND_" + n, "label": lbl}
                                  for i, (n, lbl) in enumerate(MEM_KIND)])
    w.rows("ENUM_CUPTI_SYNC_TYPE", [{"id": i, "name": n, "label": n}
                                    for i, n in enumerate(SYNC_TYPES)])
    session = 1_767_225_600_000_000_000 + (rank or 0) * 1_000_003
    w.rows("TARGET_INFO_SESSION_START_TIME", [{"utcEpochNs": session, "utcTime": "", "localTime": ""}])
    w.rows("TARGET_INFO_SYSTEM_ENV", [
        {"globalVid": 1 << 48, "devStateName": "Local (CLI)", "name": "CpuCores", "nameEnum": 1,
         "value": "64"},
        {"globalVid": 1 << 48, "devStateName": "Local (CLI)", "name": "Hostname",
         "nameEnum": 619, "value": host}])
    w.rows("PROCESSES", [{"globalPid": global_tid(pid, 0), "pid": pid, "name": "python3"}])
    w.rows("ThreadNames", [{"nameId": int(thread_name_ids[d]), "priority": 0,
                            "globalTid": global_tid(pid, tids[d])} for d in range(D)])
    w.rows("TARGET_INFO_GPU", [
        {"vmId": 1, "id": d, "name": "NVIDIA H100 80GB HBM3", "busLocation": f"0000:{0x18 + d:02x}:00.0",
         "isDiscrete": 1, "totalMemory": 85_520_809_984, "smCount": 132, "cuDevice": d,
         "computeMajor": 9, "computeMinor": 0} for d in range(D)])

    def stream_id(d, st):
        return 7 + 100 * d + st * (1 if st == 0 else 6)

    w.rows("TARGET_INFO_CUDA_CONTEXT_INFO", [
        {"nullStreamId": stream_id(d, 0), "hwId": 0, "vmId": 1, "processId": pid,
         "deviceId": d, "contextId": d + 1, "parentContextId": 0, "isGreenContext": 0}
        for d in range(D)])
    w.rows("TARGET_INFO_CUDA_STREAM", [
        {"streamId": stream_id(d, st), "hwId": 0, "vmId": 1, "processId": pid,
         "contextId": d + 1, "priority": 0 if st < S - 1 else -1, "flag": 0 if st == 0 else 1}
        for d in range(D) for st in range(S)])
    log(f"  metadata written ({time.time() - t_begin:.1f} s)")

    # ---- CUDA API calls ---------------------------------------------------------------
    gpid = global_tid(pid, 0)
    for lo in range(0, api, BATCH):
        idx = corder[lo:lo + BATCH]
        n = idx.size
        nm = calls["name"][idx]
        w.insert("CUPTI_ACTIVITY_KIND_RUNTIME", {
            "start": calls["start"][idx], "end": calls["end"][idx],
            "eventClass": np.where(nm == A_CULAUNCH, 2, 1),
            "globalTid": gpid + calls["tid"][idx], "correlationId": corr[idx],
            "nameId": api_ids[nm], "returnValue": np.zeros(n, np.int64), "callchainId": None}, n)
    log(f"  {api} CUDA API calls written ({time.time() - t_begin:.1f} s)")

    # ---- GPU work, by table, in start order --------------------------------------------
    oorder = np.argsort(ops["start"], kind="stable")
    sid_table = np.array([[stream_id(d, st) for st in range(S)] for d in range(D)], np.int64)
    for kind, table, code in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL", 0),
                              ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", 1),
                              ("memset", "CUPTI_ACTIVITY_KIND_MEMSET", 2)):
        sel = oorder[ops["type"][oorder] == code]
        if not sel.size:
            continue
        for lo in range(0, sel.size, BATCH):
            idx = sel[lo:lo + BATCH]
            n = idx.size
            dev = ops["device"][idx]
            common = {"start": ops["start"][idx], "end": ops["end"][idx], "deviceId": dev,
                      "contextId": dev + 1, "greenContextId": None,
                      "streamId": sid_table[dev, ops["stream"][idx]],
                      "correlationId": corr[ops["call"][idx]], "globalPid": gpid,
                      "graphNodeId": None}
            if code == 0:
                nm = ops["name"][idx]
                g = k_grid[nm]
                common.update({
                    "demangledName": kdem[nm], "shortName": kshort[nm], "mangledName": kmang[nm],
                    "launchType": 0, "cacheConfig": 0, "registersPerThread": k_regs[nm],
                    "gridX": g, "gridY": np.where(g > 65535, 2, 1), "gridZ": 1,
                    "blockX": k_block[nm], "blockY": 1, "blockZ": 1,
                    "staticSharedMemory": k_ssm[nm], "dynamicSharedMemory": k_dsm[nm],
                    "localMemoryPerThread": k_lmem[nm], "localMemoryTotal": k_lmem[nm] * 8_650_752,
                    "gridId": np.arange(lo, lo + n, dtype=np.int64) + 1,
                    "sharedMemoryExecuted": np.maximum(k_ssm[nm] + k_dsm[nm], 0),
                    "sharedMemoryLimitConfig": 1})
            elif code == 1:
                ck = ops["copy"][idx]
                common.update({
                    "bytes": ops["bytes"][idx], "copyKind": ck, "deprecatedSrcId": None,
                    "srcKind": np.where(ck == 1, 1, 2), "dstKind": np.where(ck == 2, 1, 2),
                    "srcDeviceId": dev, "srcContextId": dev + 1, "dstDeviceId": dev,
                    "dstContextId": dev + 1, "migrationCause": None, "virtualAddress": None})
            else:
                common.update({"value": 0, "bytes": ops["bytes"][idx], "memKind": 2})
            w.insert(table, common, n)
        log(f"  {sel.size} {kind} written ({time.time() - t_begin:.1f} s)")
    del ops

    # ---- NVTX ---------------------------------------------------------------------------
    n_written_nvtx = 0
    defs = []
    dom_app, dom_nccl = 1, 2
    for dname, did in ((NVTX_APP_DOMAIN, dom_app), ("NCCL", dom_nccl)):
        defs.append({"start": t0 - 1000 + did, "eventType": 75, "globalTid": global_tid(pid, pid),
                     "domainId": did, "text": dname, "category": 0})
    w.rows("NVTX_EVENTS", defs)
    if nvtx:
        children = 3  # inner ranges per outer range
        for d in range(D):
            N = per(nvtx, d)
            if N <= 0:
                continue
            tmask = calls["tid"] == tids[d]
            lo_t, hi_t = int(calls["start"][tmask].min()), int(calls["end"][tmask].max())
            n_out = max(1, N // (children + 1))
            n_in = N - n_out
            span = (hi_t - lo_t) / n_out
            if span < 8 * (children + 1):
                raise SystemExit("too many NVTX ranges for the time span; add API calls")
            o_start = (lo_t + np.arange(n_out) * span + span * 0.02).astype(np.int64)
            o_end = (lo_t + (np.arange(n_out) + 1) * span - span * 0.02).astype(np.int64)
            # inner ranges: slots of each outer range (first n_in slots in time order)
            parent = np.repeat(np.arange(n_out), children)[:n_in]
            k = np.tile(np.arange(children), n_out)[:n_in]
            olen = (o_end - o_start)[parent] / children
            i_start = (o_start[parent] + k * olen + olen * 0.05).astype(np.int64)
            i_end = (o_start[parent] + (k + 1) * olen - olen * 0.05).astype(np.int64)
            starts = np.concatenate([o_start, i_start])
            ends = np.concatenate([o_end, i_end])
            text = np.concatenate([nv_outer[rng.integers(0, len(nv_outer), n_out)],
                                   nv_inner[rng.integers(0, len(nv_inner), n_in)]])
            dom = np.concatenate([np.zeros(n_out, np.int64),
                                  np.where(rng.random(n_in) < 0.3, dom_app, 0)])
            nccl_in = np.concatenate([np.zeros(n_out, bool), rng.random(n_in) < 0.1])
            dom[nccl_in] = dom_nccl
            text[nccl_in] = nv_nccl[rng.integers(0, len(nv_nccl), int(nccl_in.sum()))]
            order = np.argsort(starts, kind="stable")
            for lo in range(0, N, BATCH):
                idx = order[lo:lo + BATCH]
                n = idx.size
                w.insert("NVTX_EVENTS", {
                    "start": starts[idx], "end": ends[idx], "eventType": 59,
                    "globalTid": global_tid(pid, tids[d]), "textId": text[idx],
                    "domainId": dom[idx], "category": 0,
                    "color": None, "rangeId": None}, n)
            n_written_nvtx += N
        log(f"  {n_written_nvtx} NVTX ranges written ({time.time() - t_begin:.1f} s)")

    # ---- strings ------------------------------------------------------------------------
    w.insert("StringIds", {"id": np.array(list(s.ids.values()), np.int64),
                           "value": list(s.ids.keys())}, len(s.ids))
    w.close()
    size = path.stat().st_size
    facts = {"path": str(path), "kernels": kernels, "api": api, "memcpy": memcpy,
             "memset": memset, "nvtx": n_written_nvtx,
             "activities": kernels + api + memcpy + memset + n_written_nvtx,
             "devices": D, "streams": S, "kernel_names": nk, "bytes": size,
             "seconds": round(time.time() - t_begin, 1)}
    log(f"  done: {size / 1e9:.2f} GB in {facts['seconds']} s")
    return facts


# ---------------------------------------------------------------------- CPU samples -----
CE_DDL = ("CREATE TABLE COMPOSITE_EVENTS (id INTEGER NOT NULL PRIMARY KEY, start INTEGER NOT "
          "NULL, cpu INTEGER, threadState INTEGER, globalTid INTEGER, cpuCycles INTEGER NOT NULL)")
SC_COLUMNS = ["id", "symbol", "module", "kernelMode", "thumbCode", "unresolved",
              "specialEntry", "originalIP", "unwindMethod", "stackDepth"]
SC_DDL = ("CREATE TABLE SAMPLING_CALLCHAINS (id INTEGER NOT NULL, symbol INTEGER NOT NULL, "
          "module INTEGER NOT NULL, kernelMode INTEGER, thumbCode INTEGER, unresolved INTEGER, "
          "specialEntry INTEGER, originalIP INTEGER, unwindMethod INTEGER, stackDepth INTEGER "
          "NOT NULL, PRIMARY KEY (id, stackDepth))")
SAMPLE_BATCH = 100_000  # samples written at a time


def add_samples(path: Path, samples: int, frames: int = 40, every: int = 4, seed: int = 1,
                quiet: bool = False) -> dict:
    """Add `samples` CPU IP samples (COMPOSITE_EVENTS) with their call stacks
    (SAMPLING_CALLCHAINS) to an export, in the real tables' layout (primary keys included):
    spread over the CUDA calls' time span on the host threads of the export and on two
    threads without ThreadNames rows; one sample in `every` (the first of each group) with a
    stack of `frames` frames (nsys' DWARF pattern; 1: every sample), a quarter of those ending
    in a '[Broken backtraces]' marker, the others the leaf alone. Stacks follow 400 call
    paths of 3,000 functions in 60 modules (Zipf-like use); every 50th function is unresolved
    (its address as text), with kernel frames at negative addresses."""
    t_begin = time.time()
    rng = np.random.default_rng(seed)
    log = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    con = sqlite3.connect(path)
    gtids = [g for (g,) in con.execute(
        "SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY globalTid")]
    lo, hi = con.execute("SELECT min(start), max(\"end\") FROM CUPTI_ACTIVITY_KIND_RUNTIME"
                         ).fetchone()
    next_id = (con.execute("SELECT max(id) FROM StringIds").fetchone()[0] or 0) + 1
    pid_bits = gtids[0] & ~0xFFFFFF
    gtids += [pid_bits | ((gtids[0] & 0xFFFFFF) + 100 + k) for k in range(2)]  # no ThreadNames
    # names: modules, functions (unresolved ones named by their address), the marker
    modules = [f"/usr/lib/x86_64-linux-gnu/libmod{m}.so.{m % 7}" for m in range(58)] + [
        "[kernel.kallsyms]", "/usr/bin/python3.10"]
    n_func = 3_000
    func_module = rng.integers(0, len(modules), n_func)
    func_module[:100] = len(modules) - 2  # kernel frames
    ips = rng.integers(0x7F0000000000, 0x7FFFFFFFFFFF, n_func)
    ips[:100] = -rng.integers(0x10000000, 0x7FFFFFFF, 100)  # kernel addresses: negative
    names = [f"0x{ip & ((1 << 64) - 1):x}" if (k % 50 == 0 or k < 100) else f"function_{k}"
             for k, ip in enumerate(ips.tolist())]
    kernel = func_module == len(modules) - 2
    unresolved = np.array([n.startswith("0x") for n in names])
    strings = modules + names + ["[Broken backtraces]"]
    ids = np.arange(next_id, next_id + len(strings), dtype=np.int64)
    con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                    list(zip(ids.tolist(), strings)))
    module_id, func_id = ids[:len(modules)], ids[len(modules):len(modules) + n_func]
    marker_id = int(ids[-1])
    con.execute(CE_DDL)
    con.execute(SC_DDL)
    con.commit()
    con.close()
    paths = rng.choice(n_func, (400, frames))  # call paths, leaf first
    path_w = zipf_weights(400, 1.1, rng)
    w = Writer(path, fresh=False)  # the tables exist (with their primary keys)
    w.created |= {"COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS"}
    w.cols.update({"COMPOSITE_EVENTS": ["id", "start", "cpu", "threadState", "globalTid",
                                        "cpuCycles"], "SAMPLING_CALLCHAINS": SC_COLUMNS})
    times = np.sort(rng.integers(lo, hi, samples))
    n_frames = 0
    for a in range(0, samples, SAMPLE_BATCH):
        n = min(SAMPLE_BATCH, samples - a)
        sid = np.arange(a + 1, a + n + 1, dtype=np.int64)
        w.insert("COMPOSITE_EVENTS", {
            "id": sid, "start": times[a:a + n], "cpu": rng.integers(0, 64, n),
            "threadState": 1, "globalTid": np.asarray(gtids, np.int64)[
                rng.integers(0, len(gtids), n)], "cpuCycles": 1}, n)
        path_of = rng.choice(400, n, p=path_w)
        stacked = (sid - 1) % every == 0
        marker = stacked & (rng.random(n) < 0.25)
        count = np.where(stacked, frames, 1) + marker
        owner = np.repeat(np.arange(n), count)
        first = np.repeat(np.cumsum(count) - count, count)
        depth = np.arange(owner.size) - first
        is_marker = np.repeat(marker, count) & (depth == frames)
        fn = paths[path_of[owner], np.minimum(depth, frames - 1)]
        m = owner.size
        w.insert("SAMPLING_CALLCHAINS", {
            "id": sid[owner], "symbol": np.where(is_marker, marker_id, func_id[fn]),
            "module": np.where(is_marker, marker_id, module_id[func_module[fn]]),
            "kernelMode": pa.array(np.ones(m, np.int64), mask=~kernel[fn] | is_marker),
            "unresolved": pa.array(np.ones(m, np.int64), mask=~unresolved[fn] | is_marker),
            "originalIP": pa.array(np.where(is_marker, 0, ips[fn]), mask=is_marker),
            "unwindMethod": pa.array(np.full(m, 7, np.int64), mask=is_marker),
            "stackDepth": depth}, m)
        n_frames += m
    w.close()
    facts = {"samples": samples, "frames": n_frames, "frames_per_stack": frames,
             "every": every, "seconds": round(time.time() - t_begin, 1)}
    log(f"  {samples} samples, {n_frames} frames written ({facts['seconds']} s)")
    return facts


def sizes_for(total: int) -> dict[str, int]:
    out = {k: int(round(total * f)) for k, f in MIX.items()}
    out["api"] = max(out["api"], out["kernels"] + out["memcpy"] + out["memset"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", help="SQLite file to write (overwritten)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="total activities: "
                   + ", ".join(f"{k}" for k in PRESETS) + " (mix: "
                   + ", ".join(f"{k} {round(v * 100)}%%" for k, v in MIX.items()) + ")")
    p.add_argument("--activities", type=int, help="total activities with the preset mix")
    for k in ("kernels", "api", "memcpy", "memset", "nvtx"):
        p.add_argument(f"--{k}", type=int, help=f"number of {k} rows (overrides the preset)")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--streams", type=int, default=4, help="streams per device (the last "
                   "one carries the NCCL kernels)")
    p.add_argument("--kernel-names", type=int, default=300, help="distinct non-NCCL kernels")
    p.add_argument("--nccl-fraction", type=float, default=0.05)
    p.add_argument("--pid", type=int, default=4242)
    p.add_argument("--rank", type=int, help="MPI rank recorded in the environment")
    p.add_argument("--world", type=int, help="MPI world size recorded in the environment")
    p.add_argument("--host", default="bench-node")
    p.add_argument("--schema-version", default="3.16.3")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--samples", type=int, default=0, help="CPU samples with call stacks to "
                   "add (default none: the data sets are unchanged)")
    p.add_argument("--frames", type=int, default=40, help="frames of a sample's stack")
    p.add_argument("--backtrace-every", type=int, default=4, help="one sample in N has a "
                   "stack, the others the leaf only (nsys' DWARF default 4; 1: every sample)")
    p.add_argument("--add-to-existing", action="store_true", help="add the samples to the "
                   "export OUTPUT as it is (no other table is written)")
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)
    import json
    if a.add_to_existing:
        if not a.samples:
            p.error("--add-to-existing needs --samples")
        print(json.dumps(add_samples(Path(a.output), a.samples, a.frames, a.backtrace_every,
                                     a.seed, a.quiet)))
        return 0
    total = PRESETS[a.preset] if a.preset else a.activities
    sizes = sizes_for(total) if total else {"kernels": 0, "api": 0, "memcpy": 0, "memset": 0,
                                            "nvtx": 0}
    for k in sizes:
        if getattr(a, k) is not None:
            sizes[k] = getattr(a, k)
    if not any(sizes.values()):
        p.error("give --preset, --activities or explicit sizes")
    facts = generate(Path(a.output), devices=a.devices, streams=a.streams,
                     n_kernel_names=a.kernel_names, nccl_fraction=a.nccl_fraction, pid=a.pid,
                     rank=a.rank, world=a.world, host=a.host,
                     schema_version=a.schema_version, seed=a.seed, quiet=a.quiet, **sizes)
    if a.samples:
        facts["samples"] = add_samples(Path(a.output), a.samples, a.frames,
                                       a.backtrace_every, a.seed, a.quiet)
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
