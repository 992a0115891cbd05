"""Tiles whose width is not a power of two (128 + 16 columns): do they fill the SMs where 128 x 128 cannot?

    python benchmarks/probes/ext_tile.py OUT_DIR

cuBLAS runs 896x2560x2560 (fp16, B stored N x K) with tiles 144 wide (the report lists its kernels' names,
which give the tile), so that 7 x 18 = 126 tiles make one wave on the H100's 132 SMs, where alcop's 128 x 128
tiles make 140 (a wave and 8 tiles). Triton's blocks are powers of two, so a tile BLOCK_N + EXT_N columns wide is two accumulators here:
each reduction step loads the A tile once and the B tile as two TMA boxes (BLOCK_N and EXT_N rows of B) and
runs two dots, BLOCK_M x BLOCK_N and BLOCK_M x EXT_N; EXT_N = 0 is the plain kernel, the same code without
the second dot (so the comparison is of the tile, not of two kernels).

For each shape (``SHAPES``) and config (``CONFIGS``) the kernel is checked against torch in float32
(normwise relative error <= 1e-2, output filled with NaN first) and timed; torch.matmul (cuBLAS) on the same
inputs. Timer: ``triton.testing.do_bench_cudagraph`` (median). Writes ``OUT_DIR/ext_tile.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import GRAPH_TIMER, fastest, fmt_us, publish, run_meta, table_head  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

SHAPES = ((896, 2560, 2560), (1970, 2304, 768), (2304, 1792, 2816), (2816, 768, 3072), (1536, 5632, 2048),
          (1024, 2304, 768))
"""(M, N, K): tune_speed.py's five unseen shapes, and a suite shape with a short last wave."""

CONFIGS = ((128, 128, 0, 64, 4, 4), (128, 128, 0, 64, 4, 5), (128, 128, 16, 64, 4, 4), (128, 128, 16, 64, 4, 5),
           (128, 128, 16, 64, 4, 6), (128, 128, 32, 64, 4, 4), (128, 256, 0, 64, 8, 3), (128, 256, 32, 64, 8, 3),
           (128, 128, 16, 64, 8, 4))
"""(BLOCK_M, BLOCK_N, EXT_N, BLOCK_K, num_warps, num_stages): a tile is BLOCK_M x (BLOCK_N + EXT_N)."""


@triton.jit
def ext_gemm(a_desc, b_desc, bx_desc, c_ptr, M, N, K, stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             EXT_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, STAGES: tl.constexpr):
    """C = A @ B^T with tiles BLOCK_M x (BLOCK_N + EXT_N); A, B and the EXT_N rows of B by TMA descriptors."""
    pid = tl.program_id(0)
    width = BLOCK_N + EXT_N
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, width)
    group = GROUP_M * num_pid_n
    first_m = pid // group * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows
    pid_n = (pid % group) // rows
    off_m = pid_m * BLOCK_M
    off_n = pid_n * width
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_x = tl.zeros((BLOCK_M, EXT_N if EXT_N > 0 else 16), dtype=tl.float32)
    for kk in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=STAGES):
        a = a_desc.load([off_m, kk * BLOCK_K])
        acc = tl.dot(a, b_desc.load([off_n, kk * BLOCK_K]).T, acc)
        if EXT_N > 0:
            acc_x = tl.dot(a, bx_desc.load([off_n + BLOCK_N, kk * BLOCK_K]).T, acc_x)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    if EXT_N > 0:
        offs_x = off_n + BLOCK_N + tl.arange(0, EXT_N)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_x[None, :], acc_x.to(c_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_x[None, :] < N))


def launcher(a: Any, b: Any, c: Any, cfg: tuple[int, ...]) -> Any:
    """A zero-argument launch of ``ext_gemm`` for ``cfg`` on A (M x K), B (N x K) into C (M x N)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bx, bk, warps, stages = cfg
    (m, k), n = a.shape, b.shape[0]
    a_d = TensorDescriptor.from_tensor(a, [bm, bk])
    b_d = TensorDescriptor.from_tensor(b, [bn, bk])
    bx_d = TensorDescriptor.from_tensor(b, [bx, bk]) if bx else b_d
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn + bx),)
    return lambda: ext_gemm[grid](a_d, b_d, bx_d, c, m, n, k, c.stride(0), BLOCK_M=bm, BLOCK_N=bn, EXT_N=bx,
                                  BLOCK_K=bk, GROUP_M=8, STAGES=stages, num_warps=warps, num_stages=stages)


def tiles(shape: tuple[int, int, int], cfg: tuple[int, ...]) -> int:
    """Output tiles of ``cfg`` on ``shape``."""
    m, n, _ = shape
    return -(-m // cfg[0]) * -(-n // (cfg[1] + cfg[2]))


def kernel_names(fn: Any) -> list[str]:
    """The CUDA kernels ``fn`` launches, by torch's profiler (cuBLAS names its tile and cluster shape)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


def main(out_dir: str) -> int:
    import torch
    from triton.testing import do_bench_cudagraph

    from probe_io import checked_time

    rows: list[dict[str, Any]] = []
    for m, n, k in SHAPES:
        g = torch.Generator(device="cpu").manual_seed(m + n + k)
        a = (torch.randn(m, k, generator=g) / k ** 0.25).half().cuda()
        b = (torch.randn(n, k, generator=g) / k ** 0.25).half().cuda()
        want = a.float() @ b.float().T
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        runs = []
        for cfg in CONFIGS:
            launch = launcher(a, b, c, cfg)
            c.fill_(float("nan"))

            def run() -> Any:
                launch()
                return c
            runs.append({"config": list(cfg), "tiles": tiles((m, n, k), cfg), "us": checked_time(run, want)})
        row = {"shape": [m, n, k], "torch_us": 1e3 * do_bench_cudagraph(lambda: a @ b.T),
               "torch_kernels": kernel_names(lambda: a @ b.T), "runs": runs}
        rows.append(row)
        print({"shape": row["shape"], "torch_us": round(row["torch_us"], 1), "torch_kernels": row["torch_kernels"],
               "us": [fmt_us(r["us"]) for r in runs]}, flush=True)
    meta = run_meta(GRAPH_TIMER) | {"configs": "(BLOCK_M, BLOCK_N, EXT_N, BLOCK_K, warps, stages)"}
    lines = table_head("Tiles BLOCK_N + EXT_N wide", meta,
                       "fp16, B stored N x K; µs; columns (BLOCK_M, BLOCK_N, EXT_N, BLOCK_K, warps, stages) and the "
                       "tiles each makes; the best alcop column against cuBLAS.",
                       ["shape", "cuBLAS", "cuBLAS kernel"] + [str(c) for c in CONFIGS] + ["best / cuBLAS"])
    for r in rows:
        best = fastest(r["runs"])
        ratio = f"{r['torch_us'] / best['us']:.3f}x" if best else "-"
        cells = [f"{fmt_us(x['us'])} ({x['tiles']})" for x in r["runs"]]
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['torch_us']:.1f} | {', '.join(r['torch_kernels'])} | "
                     + " | ".join(cells) + f" | {ratio} |")
    return publish(out_dir, "ext_tile", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
