"""The project's sample export (examples/sample.sqlite) and other small known traces.

`python -m nsys2prv.testing.samples OUT.sqlite` writes the sample: one process with a main
thread and a worker thread driving two GPUs whose streams have equal ids, an NCCL kernel,
copies in both directions, a memset, stream synchronisation, NVTX ranges in two domains with
a category, overlapping start/end ranges, marks and OS runtime calls. Everything is
deterministic, so tests can assert exact values.
"""

from __future__ import annotations

import sys

from .synth import (ApiCall, Kernel, Memcpy, Memset, Nvtx, Osrt, Spec, Sync, write_export)

PID = 4242
MAIN = 4242
WORKER = 4250
US = 1_000


def sample_spec(iterations: int = 4) -> Spec:
    spec = Spec(host="sample-node", env={"OMPI_COMM_WORLD_RANK": "0",
                                         "OMPI_COMM_WORLD_SIZE": "1",
                                         "SECRET_TOKEN": "do-not-leak-me"})
    spec.processes = [(PID, "sample_app")]
    spec.threads = [(PID, MAIN, "sample_app"), (PID, WORKER, "io-worker")]
    spec.gpus = [(0, "NVIDIA A100-SXM4-40GB"), (1, "NVIDIA A100-SXM4-40GB")]
    corr = 1
    t = 1_000 * US
    spec.api.append(ApiCall(t, t + 800 * US, PID, MAIN, "cudaMalloc_v3020", corr))
    corr += 1
    t += 1_000 * US
    for it in range(iterations):
        it_start = t
        spec.nvtx.append(Nvtx(t, None, PID, MAIN, "pushpop", f"iteration {it}", None))
        for dev in (0, 1):
            # host-to-device copy, kernel, NCCL all-reduce, device-to-host copy, on stream 7
            spec.api.append(ApiCall(t, t + 30 * US, PID, MAIN, "cudaMemcpyAsync_v3020", corr))
            spec.memcpy.append(Memcpy(t + 20 * US, t + 120 * US, PID, dev, 7, corr,
                                      bytes=4 << 20, copy_kind=1, src_kind=1, dst_kind=2))
            corr += 1
            t += 40 * US
            spec.nvtx.append(Nvtx(t, t + 60 * US, PID, MAIN, "pushpop", "forward", "model",
                                  category=1))
            spec.api.append(ApiCall(t + 5 * US, t + 15 * US, PID, MAIN, "cudaLaunchKernel_v7000",
                                    corr))
            spec.kernels.append(Kernel(t + 120 * US, t + 420 * US, PID, dev, 7, "gemm_kernel",
                                       corr, full_name="void gemm_kernel<float, 128>(float*, "
                                       "const float*, int)", grid=(64, 2, 1),
                                       block=(256, 1, 1), registers=64, static_smem=4096,
                                       dynamic_smem=8192, local_mem_thread=16,
                                       local_mem_total=65536))
            corr += 1
            spec.api.append(ApiCall(t + 20 * US, t + 28 * US, PID, MAIN, "cudaLaunchKernel_v7000",
                                    corr))
            spec.kernels.append(Kernel(t + 300 * US, t + 500 * US, PID, dev, 13,
                                       "ncclDevKernel_AllReduce_Sum_f32_RING_LL", corr,
                                       grid=(2, 1, 1), block=(640, 1, 1)))
            corr += 1
            t += 60 * US
            spec.api.append(ApiCall(t, t + 20 * US, PID, MAIN, "cudaMemsetAsync_v3020", corr))
            spec.memset.append(Memset(t + 500 * US, t + 510 * US, PID, dev, 7, corr,
                                      bytes=1 << 20, value=0))
            corr += 1
            t += 30 * US
            spec.api.append(ApiCall(t, t + 10 * US, PID, MAIN, "cudaMemcpyAsync_v3020", corr))
            spec.memcpy.append(Memcpy(t + 520 * US, t + 600 * US, PID, dev, 7, corr,
                                      bytes=2 << 20, copy_kind=2, src_kind=2, dst_kind=1))
            corr += 1
            t += 20 * US
        sync_start = t
        spec.api.append(ApiCall(sync_start, t + 700 * US, PID, MAIN,
                                "cudaStreamSynchronize_v3020", corr))
        spec.sync.append(Sync(sync_start + 2 * US, t + 695 * US, PID, 1, 7, corr, sync_type=3))
        corr += 1
        t += 750 * US
        # close the iteration range
        spec.nvtx[[i for i, n in enumerate(spec.nvtx) if n.text == f"iteration {it}"][0]].end = t
        spec.nvtx.append(Nvtx(t - 10 * US, None, PID, MAIN, "mark", f"checkpoint {it}", None))
        # worker thread: overlapping start/end ranges and OS runtime calls
        spec.nvtx.append(Nvtx(it_start + 50 * US, it_start + 900 * US, PID, WORKER, "startend",
                              "prefetch", "io"))
        spec.nvtx.append(Nvtx(it_start + 400 * US, it_start + 1200 * US, PID, WORKER, "startend",
                              "write-back", "io"))
        spec.osrt.append(Osrt(it_start + 100 * US, it_start + 300 * US, PID, WORKER,
                              "pthread_cond_wait", 0))
        spec.osrt.append(Osrt(it_start + 450 * US, it_start + 460 * US, PID, WORKER, "write",
                              4096))
        t += 100 * US
    spec.categories[(PID, "model", 1)] = "compute"
    spec.thread_nvtx_names[(PID, WORKER)] = "io worker"
    spec.api.append(ApiCall(t, t + 300 * US, PID, MAIN, "cudaFree_v3020", corr))
    return spec


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print("usage: python -m nsys2prv.testing.samples OUT.sqlite [LAYOUT]", file=sys.stderr)
        return 2
    write_export(argv[0], sample_spec(), argv[1] if len(argv) > 1 else "3.17.1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
