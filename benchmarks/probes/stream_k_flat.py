"""Stream-K with TMA copies in one flat pipelined loop, against one program per tile and cuBLAS.

    python benchmarks/probes/stream_k_flat.py OUT_DIR

``stream_k.py`` found stream-K slower than one program per tile, with a kernel whose loop over a
program's runs restarted a pointer-load pipeline at every run. This kernel has one loop over all of a
program's reduction chunks (the pipeliner sees one loop, and the next tile's copies are in flight during
a tile's epilogue), copies by TMA, waits for the previous kernel by ``gdc_wait`` (launched with
programmatic dependent launch, as alcop's kernels are), and shares the work as the Stream-K paper's
hybrid does: when the tiles leave the last wave short, ``tiles % P + P`` tiles are shared out evenly as
reduction chunks (stream-K), the rest run one tile per program per round (data-parallel). A tile shared
by programs has each one's partial written to a float32 workspace; the last to arrive (an atomic counter
per tile) adds them in program order and stores the tile, so the result does not depend on arrival order.

Per shape and tile config: ``dp`` (the same kernel, one program per tile), ``sk`` (the hybrid on one
program per SM); alcop's kernel as dispatched; torch.matmul. fp16, B stored N x K. Every result against
torch (normwise relative error <= 1e-2) and bit-identical over two runs. Timer: the suite's graph timer.
Writes ``OUT_DIR/stream_k_flat.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import GRAPH_TIMER, publish, run_meta, table_head  # noqa: E402
from stream_k import add_partials  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_wait  # noqa: E402

SHAPES = ((1970, 2304, 768), (896, 2560, 2560), (2304, 1792, 2816), (2816, 768, 3072), (1536, 5632, 2048),
          (1024, 2304, 768), (512, 3072, 1024), (3136, 512, 2048), (12544, 256, 1024))
"""(M, N, K): the five unseen shapes of tune_speed.py, then four suite shapes below 0.9x cuBLAS."""
CONFIGS = ((128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (64, 128, 64, 4, 4), (64, 256, 64, 4, 3))
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)."""


@triton.jit
def _run_of(g, S, P):
    """The program whose run of stream-K chunks holds chunk ``g`` (program p runs [p*S//P, (p+1)*S//P))."""
    return ((g + 1) * P + S - 1) // S - 1


@triton.jit
def gemm_skdp(a_desc, b_desc, c_desc, ws, locks, M, N, K, SK_TILES, DP_ROUNDS, SLOTS,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
              NUM_STAGES: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_wait()
    p = tl.program_id(0)
    P = tl.num_programs(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    ipt = tl.cdiv(K, BLOCK_K)
    S = SK_TILES * ipt
    sk_start = p * S // P
    sk_len = (p + 1) * S // P - sk_start
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for it in tl.range(0, sk_len + DP_ROUNDS * ipt, num_stages=NUM_STAGES):
        in_sk = it < sk_len
        g = sk_start + it
        d = it - sk_len
        tile = tl.where(in_sk, g // ipt, SK_TILES + p + (d // ipt) * P)
        kk = tl.where(in_sk, g % ipt, d % ipt)
        group = GROUP_M * num_pid_n
        first_m = (tile // group) * GROUP_M
        size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group) % size_m
        pid_n = (tile % group) // size_m
        ta = a_desc.load([pid_m * BLOCK_M, kk * BLOCK_K])
        tb = b_desc.load([pid_n * BLOCK_N, kk * BLOCK_K])
        acc = tl.dot(ta, tb.T, acc)
        if (kk == ipt - 1) | (it == sk_len - 1):
            t0 = tile * ipt
            whole = (not in_sk) | ((t0 >= sk_start) & (t0 + ipt <= sk_start + sk_len))
            if whole:
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))
            else:
                first = _run_of(t0, S, P)
                done, tot = add_partials(ws, locks, tile, p - first, _run_of(t0 + ipt - 1, S, P) - first + 1, acc,
                                         SLOTS, BLOCK_M, BLOCK_N)
                if done:
                    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], tot.to(tl.float16))
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


def sharing(tiles: int, programs: int, stream_k: bool) -> tuple[int, int, int]:
    """(grid, stream-K tiles, data-parallel rounds)."""
    if not stream_k:
        return tiles, 0, 1
    if tiles % programs == 0:
        return programs, 0, tiles // programs
    sk = tiles if tiles < programs else tiles % programs + programs
    return programs, sk, (tiles - sk) // programs


def make(m: int, n: int, k: int, cfg: tuple[int, ...], programs: int, stream_k: bool, a: Any, b: Any,
         pdl: bool) -> Any:
    """C = A @ B^T (B stored N x K): the launch as a closure returning C."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk, warps, stages = cfg
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    grid, sk, rounds = sharing(tiles, programs, stream_k)
    ipt = triton.cdiv(k, bk)
    per = max(1, sk * ipt // grid) if sk else 1
    slots = triton.cdiv(ipt, per) + 1
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    ws = torch.empty(max(1, sk * slots * bm * bn), device=a.device, dtype=torch.float32)
    locks = torch.zeros(max(1, tiles), device=a.device, dtype=torch.int32)
    ad = TensorDescriptor.from_tensor(a, [bm, bk])
    bd = TensorDescriptor.from_tensor(b, [bn, bk])
    cd = TensorDescriptor.from_tensor(c, [bm, bn])
    opts = {"launch_pdl": True} if pdl else {}

    def launch() -> Any:
        gemm_skdp[(grid,)](ad, bd, cd, ws, locks, m, n, k, sk, rounds, slots, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                           GROUP_M=8, NUM_STAGES=stages, PDL=pdl, num_warps=warps, **opts)
        return c
    return launch


def main(out_dir: str) -> int:
    import torch
    from triton.testing import do_bench_cudagraph

    import alcop_triton as at
    from alcop_triton.choose_config import choose_config
    from kernels.runner import make_runner

    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[dict[str, Any]] = []
    for m, n, k in SHAPES:
        g = torch.Generator(device="cpu").manual_seed(0)
        a = (torch.randn(m, k, generator=g) / k ** 0.25).half().to(dev)
        b = (torch.randn(n, k, generator=g) / k ** 0.25).half().to(dev)
        want = (a.float() @ b.float().T)
        row: dict[str, Any] = {"shape": [m, n, k], "torch_us": 1e3 * do_bench_cudagraph(lambda: a @ b.T)}
        wl = at.Workload("matmul", (m, n, k), "float16", "nt")
        cfg = choose_config(dev, lambda: wl)
        runner = make_runner(wl, cfg, "cuda")
        launch, _ = runner.bind((a, b.T))
        row["alcop"] = str(cfg)
        row["alcop_us"] = 1e3 * do_bench_cudagraph(launch)
        for c in CONFIGS:
            for name, sk in (("dp", False), ("sk", True)):
                key = f"{name} {c[0]}x{c[1]}x{c[2]} w{c[3]} s{c[4]}"
                try:
                    fn = make(m, n, k, c, sms, sk, a, b, pdl=True)
                    first = fn().clone()
                    second = fn().clone()
                    err = ((first.float() - want).norm() / want.norm()).item()
                    if err > 1e-2 or not torch.equal(first, second):
                        row[key] = f"wrong ({err:.1e}, repeat equal: {torch.equal(first, second)})"
                        continue
                    row[key] = 1e3 * do_bench_cudagraph(fn)
                except Exception as exc:  # out of resources: the result
                    row[key] = f"{type(exc).__name__}"
        rows.append(row)
        print(row, flush=True)
    meta = run_meta(GRAPH_TIMER)
    lines = table_head("Stream-K hybrid in one flat TMA loop, against one program per tile", meta,
                       "fp16, B stored N x K; µs; best of five tile configs each way.",
                       ["shape", "cuBLAS", "alcop (dispatched)", "best dp", "best sk", "cuBLAS / alcop",
                        "cuBLAS / dp", "cuBLAS / sk", "best sk config"])
    for r in rows:
        dp = {kk: v for kk, v in r.items() if kk.startswith("dp ") and isinstance(v, float)}
        sk = {kk: v for kk, v in r.items() if kk.startswith("sk ") and isinstance(v, float)}
        bd, bs = min(dp.values(), default=float("nan")), min(sk.values(), default=float("nan"))
        t = r["torch_us"]
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {t:.1f} | {r['alcop_us']:.1f} | {bd:.1f} | {bs:.1f} | "
                     f"{t / r['alcop_us']:.3f}x | {t / bd:.3f}x | {t / bs:.3f}x | {min(sk, key=sk.get, default='-')} |")
    return publish(out_dir, "stream_k_flat", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
