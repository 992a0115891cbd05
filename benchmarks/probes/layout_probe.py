"""Generated GEMM kernels against a plain Triton TMA kernel, with B stored N x K (nt) and K x N (nn).

    python benchmarks/probes/layout_probe.py OUT_DIR

The suite's GEMMs below cuBLAS under CUDA graphs are mid-size and all ``nt`` (B stored N x K, as
``F.linear``'s weight). For a few of them and a few TMA tilings, this times alcop's kernel
(``use_config``) in both layouts, ``ws_probe.mm`` (a hand-written TMA kernel with in-kernel
descriptors, B stored K x N; same tiles, stages and warps, not persistent, no warp specialization),
the same kernel with B stored N x K (its tile transposed for the dot, as alcop's nt kernel does) and
cuBLAS in both layouts: whether the gap is the generated code, the layout, or the tiling.
Timer: ``triton.testing.do_bench_cudagraph`` (one call on one set of inputs). Every output is checked
against torch first. Writes ``OUT_DIR/layout_probe.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = ((2048, 2048, 2048), (1024, 2304, 768), (3136, 512, 2048), (12544, 256, 1024), (512, 3072, 1024))
TILES = ((128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (128, 128, 64, 4, 4), (128, 128, 64, 4, 8))
"""(BLOCK_M, BLOCK_N, BLOCK_K, stages, warps)."""


def _plain_nt() -> Any:
    """``ws_probe.mm``'s kernel with B stored N x K: its tile loaded [BN, BK] and transposed for the dot."""
    import triton
    import triton.language as tl

    @triton.jit
    def mm_nt(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr):
        a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        b_desc = tl.make_tensor_descriptor(B, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        npm = tl.cdiv(M, BM)
        npn = tl.cdiv(N, BN)
        t = tl.program_id(0)
        first = (t // (8 * npn)) * 8
        gsz = tl.minimum(npm - first, 8)
        pm = first + (t % (8 * npn)) % gsz
        pn = (t % (8 * npn)) // gsz
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in tl.range(0, tl.cdiv(K, BK), num_stages=S):
            a = a_desc.load([pm * BM, k0 * BK])
            b = b_desc.load([pn * BN, k0 * BK])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))
    return mm_nt


def main(out_dir: str) -> int:
    import torch
    import triton
    from probe_io import checked_time, fmt_us, run_meta, write
    from ws_probe import mm

    import alcop_triton as at
    from alcop_triton.records import KernelConfig

    mm_nt = _plain_nt()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))

    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b_nt = torch.randn(n, k, device="cuda", dtype=torch.float16).t()
        b_nn = b_nt.contiguous()
        want = (a.float() @ b_nn.float())
        row: dict[str, Any] = {"shape": [m, n, k], "torch_nt_us": checked_time(lambda: torch.matmul(a, b_nt), want),
                               "torch_nn_us": checked_time(lambda: torch.matmul(a, b_nn), want), "tiles": []}
        for bm, bn, bk, stages, warps in TILES:
            cfg = KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=warps, smem_stages=stages,
                               async_copy="tma")

            def alcop(b: Any) -> Callable[[], Any]:
                def run() -> Any:
                    with at.use_config(cfg):
                        return at.matmul(a, b)
                return run

            c = torch.empty(m, n, device="cuda", dtype=torch.float16)
            grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)

            def plain() -> Any:
                mm[grid](a, b_nn, c, m, n, k, bm, bn, bk, stages, False, False, False, num_warps=warps)
                return c

            def plain_nt() -> Any:
                mm_nt[grid](a, b_nt.t(), c, m, n, k, bm, bn, bk, stages, num_warps=warps)
                return c

            entry = {"tile": [bm, bn, bk, stages, warps], "alcop_nt_us": checked_time(alcop(b_nt), want),
                     "alcop_nn_us": checked_time(alcop(b_nn), want), "plain_nn_us": checked_time(plain, want),
                     "plain_nt_us": checked_time(plain_nt, want)}
            row["tiles"].append(entry)
            print(m, n, k, entry, flush=True)
        rows.append(row)
    meta = run_meta()
    lines = [f"# Generated kernels against a plain TMA kernel, nt and nn ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {meta['timer']}. µs, fp16.", "",
             "| M x N x K | cuBLAS nt / nn | tile (M, N, K, stages, warps) | alcop nt | alcop nn | plain TMA nt | plain TMA nn |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        for t in r["tiles"]:
            lines.append(f"| {'x'.join(map(str, r['shape']))} | {fmt_us(r['torch_nt_us'])} / {fmt_us(r['torch_nn_us'])} | "
                         f"{t['tile']} | {fmt_us(t['alcop_nt_us'])} | {fmt_us(t['alcop_nn_us'])} | {fmt_us(t['plain_nt_us'])} | "
                         f"{fmt_us(t['plain_nn_us'])} |")
    write(out_dir, "layout_probe", meta, rows, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
