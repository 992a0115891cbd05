"""Measure the current GPU and store a calibrated ``GPUSpec``: ``alcop-tune calibrate``.

Microbenchmarks (torch and small Triton kernels):

* DRAM bandwidth: a device-to-device copy, read + written bytes over time;
* L2 bandwidth: a Triton kernel re-reading a buffer a quarter of L2's size (``.cg`` skips L1);
* tensor-core throughput: torch matmul (cuBLAS) for fp16 and TF32 on the default path; on Hopper
  the mma.sync rate is the wgmma rate scaled by Triton's own ratio, a Triton matmul compiled in a
  subprocess with ``DISABLE_MMA_V3=1`` against the same kernel with wgmma;
* latencies: a single-thread pointer chase through a random cycle, small (L2 hits) and large
  (DRAM); the difference of two chain lengths cancels launch overhead. Stores are posted, so the
  write latency (epilogue drain) is taken equal to the DRAM read latency.

The spec is written atomically to ``calibration_path(name)`` under ``$ALCOP_CACHE_DIR`` (default:
platformdirs' user cache dir) and preferred by ``get_spec`` and ``detect`` from then on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Callable

from ..errors import UnsupportedError
from ..settings import tf32
from .hardware import GPUSpec, _key, _PRESETS, save_calibrated, spec_from_properties


def _time_ms(fn: Callable[[], Any], reps: int) -> float:
    """Mean milliseconds of ``reps`` back-to-back calls after one warm-up, timed by CUDA events."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def measure_dram_bw(nbytes: int) -> float:
    """Bytes/s of a device-to-device copy, counting bytes read and written."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").fill_(1.0)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src), 10)
    return 2 * src.numel() * 4 / (ms * 1e-3)


def _kernels() -> dict[str, Any]:
    """The Triton microbenchmark kernels (defined lazily: importing this module needs no GPU)."""
    import triton
    import triton.language as tl

    @triton.jit
    def l2_read(x, out, n_chunks, reps, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        acc = tl.zeros([BLOCK], tl.float32)
        for r in range(reps):
            for j in range(pid, n_chunks, nprog):
                # The chunk depends on r so the compiler cannot hoist the loads out of the rep loop.
                chunk = (j + r) % n_chunks
                acc += tl.load(x + chunk * BLOCK + tl.arange(0, BLOCK), cache_modifier=".cg")
        tl.store(out + pid * BLOCK + tl.arange(0, BLOCK), acc)

    @triton.jit
    def chase(nxt, out, steps):
        i = tl.load(nxt)
        for _ in range(steps):
            i = tl.load(nxt + i, cache_modifier=".cg")
        tl.store(out, i)

    @triton.jit
    def matmul(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        grid_m, grid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
        width = GROUP_M * grid_n
        first_m = (pid // width) * GROUP_M
        size_m = min(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % size_m)
        pid_n = (pid % width) // size_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        pa = a + rm[:, None] * K + rk[None, :]
        pb = b + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, K, BLOCK_K):
            acc += tl.dot(tl.load(pa), tl.load(pb))
            pa += BLOCK_K
            pb += BLOCK_K * N
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty))

    return {"l2_read": l2_read, "chase": chase, "matmul": matmul}


def measure_l2_bw(l2_bytes: int, num_sms: int) -> float:
    """Bytes/s re-reading an L2-resident buffer from every SM."""
    import torch

    k = _kernels()["l2_read"]
    block = 8192   # 32 floats per thread at 8 warps: 8 independent 16-byte loads in flight each
    n_chunks = max(1, l2_bytes // (block * 4))
    x = torch.ones(n_chunks * block, dtype=torch.float32, device="cuda")
    grid = num_sms * 4
    out = torch.empty(grid * block, dtype=torch.float32, device="cuda")
    reps = 32
    ms = _time_ms(lambda: k[(grid,)](x, out, n_chunks, reps, BLOCK=block, num_warps=8), 5)
    return reps * x.numel() * 4 / (ms * 1e-3)


def measure_latency(nbytes: int) -> float:
    """Seconds per dependent load chasing a random cycle over ``nbytes``."""
    import torch

    k = _kernels()["chase"]
    n = max(2, nbytes // 8)
    perm = torch.randperm(n, device="cuda")
    nxt = torch.empty(n, dtype=torch.int64, device="cuda")
    nxt[perm] = torch.roll(perm, -1)
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    short, long = 2000, 10000
    t_short = _time_ms(lambda: k[(1,)](nxt, out, short, num_warps=1), 3)
    t_long = _time_ms(lambda: k[(1,)](nxt, out, long, num_warps=1), 3)
    return (t_long - t_short) * 1e-3 / (long - short)


def measure_torch_matmul(dtype_name: str, n: int) -> float:
    """FLOP/s of torch.matmul (cuBLAS) on n^3 random inputs; float32 runs as TF32."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    with tf32(True):
        ms = _time_ms(lambda: torch.matmul(a, b), 10)
    return 2 * n ** 3 / (ms * 1e-3)


def measure_triton_matmul(n: int) -> float:
    """FLOP/s of a plain Triton fp16 matmul (128x256x64, 8 warps, 3 stages) on n^3."""
    import torch

    k = _kernels()["matmul"]
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    grid = ((n // 128) * (n // 256),)
    ms = _time_ms(lambda: k[grid](a, b, c, n, n, n, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8,
                                  num_warps=8, num_stages=3), 10)
    return 2 * n ** 3 / (ms * 1e-3)


def _triton_matmul_in_subprocess(n: int, disable_mma_v3: bool) -> float:
    """Run ``measure_triton_matmul`` in a fresh process: Triton reads DISABLE_MMA_V3 at compile time
    and caches kernels, so the two paths cannot share one process."""
    env = dict(os.environ, DISABLE_MMA_V3="1" if disable_mma_v3 else "0")
    cmd = [sys.executable, "-m", "alcop_triton.model.calibrate", "--triton-matmul-probe", str(n)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def calibrate(quick: bool = False) -> tuple[GPUSpec, dict[str, Any]]:
    """Measure the current GPU; return the calibrated spec and the raw measurements."""
    import torch

    if not torch.cuda.is_available():
        raise UnsupportedError("calibrate: measures the GPU this process runs on, and torch sees no CUDA device here")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    key = _key(props.name)
    spec = spec_from_properties(props, _PRESETS.get(key))
    cc = (props.major, props.minor)
    n_mm = 4096 if quick else 8192
    m: dict[str, Any] = {"device": props.name, "cc": f"{cc[0]}.{cc[1]}", "torch": torch.__version__}
    m["dram_bw"] = measure_dram_bw(256 << 20 if quick else 1 << 30)
    m["l2_bw"] = measure_l2_bw(props.L2_cache_size // 4, props.multi_processor_count)  # a quarter: stays resident
    m["lat_l2_read"] = measure_latency(min(props.L2_cache_size // 8, 4 << 20))
    m["lat_dram_read"] = measure_latency(256 << 20 if quick else 1 << 30)
    m["tc_fp16_torch"] = max(measure_torch_matmul("float16", n_mm), measure_torch_matmul("bfloat16", n_mm))
    m["tc_tf32_torch"] = measure_torch_matmul("float32", n_mm)
    rates: dict[str, float]
    if cc >= (9, 0):
        m["triton_wgmma"] = _triton_matmul_in_subprocess(4096, disable_mma_v3=False)
        m["triton_mma_sync"] = _triton_matmul_in_subprocess(4096, disable_mma_v3=True)
        ratio = m["triton_mma_sync"] / m["triton_wgmma"]
        rates = {"tc_fp16_wgmma": m["tc_fp16_torch"], "tc_tf32_wgmma": m["tc_tf32_torch"],
                 "tc_fp16_mma": m["tc_fp16_torch"] * ratio, "tc_tf32_mma": m["tc_tf32_torch"] * ratio}
    else:
        rates = {"tc_fp16_wgmma": 0.0, "tc_tf32_wgmma": 0.0,
                 "tc_fp16_mma": m["tc_fp16_torch"], "tc_tf32_mma": m["tc_tf32_torch"]}
    lat_dram = m["lat_dram_read"]
    if lat_dram < 1.5 * m["lat_l2_read"] and spec.lat_dram_read > 0:
        # On an H100 the chase read ~150 ns at every size from 4 MB to 2 GB, i.e. it did not see
        # DRAM; keep the preset's value rather than store a latency that is known to be wrong.
        m["lat_dram_read_kept_preset"] = True
        lat_dram = spec.lat_dram_read
    spec = spec.replace(dram_bw=m["dram_bw"], l2_bw=m["l2_bw"], lat_l2_read=m["lat_l2_read"],
                        lat_dram_read=lat_dram, lat_dram_write=lat_dram,
                        source=f"calibrated on {props.name}", **rates)
    return spec, m


def run(quick: bool = False, dry_run: bool = False) -> int:
    """``alcop-tune calibrate``: measure, print the measurements as JSON and (unless ``dry_run``) store the spec."""
    spec, measurements = calibrate(quick=quick)
    print(json.dumps(measurements, indent=2))
    if not dry_run:
        print(f"wrote {save_calibrated(spec, measurements)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The module's own entry: the Triton matmul probe ``calibrate`` runs in a fresh process (see
    ``_triton_matmul_in_subprocess``); otherwise the same as ``alcop-tune calibrate``."""
    ap = argparse.ArgumentParser(prog="python -m alcop_triton.model.calibrate",
                                 description=f"{__doc__.splitlines()[0]} (same as `alcop-tune calibrate`)")
    ap.add_argument("--quick", action="store_true", help="smaller buffers and matrices (a few seconds)")
    ap.add_argument("--dry-run", action="store_true", help="measure and print, but do not write the cache file")
    ap.add_argument("--triton-matmul-probe", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.triton_matmul_probe:
        print(measure_triton_matmul(args.triton_matmul_probe))
        return 0
    return run(quick=args.quick, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
