"""Where an implicit-GEMM convolution loses to cuDNN: the same product as an explicit GEMM, same config.

    python benchmarks/probes/conv_vs_gemm.py OUT_DIR

For each stride-1 3x3 convolution of the ALCOP conv2d suite (batch 64, channels_last, fp16), the product it
is (M = N*P*Q output pixels, N = output channels, K = 9 * input channels) four ways, kernel time under CUDA
graphs on the same inputs:

* ``cudnn``: ``F.conv2d`` (torch's default cuDNN settings);
* ``alcop_conv``: ``alcop_triton.conv2d`` as dispatched, and the config dispatch chose (``conv_cfg``);
* ``alcop_gemm_same_cfg``: ``alcop_triton.matmul`` of the im2col matrix (M x K, copied out once, not timed)
  and the weight as an N x K matrix, under ``use_config`` with the convolution's config: the same tiles,
  warps and stages with plain row-major operands, i.e. the convolution without its window arithmetic,
  padding masks and halo re-reads;
* ``alcop_gemm``: the same GEMM as dispatched (its own config);
* ``cublas``: ``torch.matmul`` on the same im2col GEMM;
* ``alcop_conv_gemm_cfg``: the convolution under ``use_config`` with the config dispatch chose for the GEMM
  (``gemm_cfg``), and ``alcop_conv <config>`` with each of ``TRIAL_CONFIGS`` (one-warpgroup tiles).

``alcop conv / same-config GEMM`` (times) is what the convolution's addressing costs with everything else fixed; ``cublas``
against ``cudnn`` shows what the vendor's GEMM gets on the same product. Each alcop result is checked
against cuDNN's (normwise relative error <= 1e-2). Writes ``OUT_DIR/conv_vs_gemm.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import GRAPH_TIMER, checked_time, fmt_us, publish, run_meta, table_head  # noqa: E402

LAYERS = ((56, 64, 64), (28, 128, 128), (14, 256, 256), (7, 512, 512), (56, 256, 256), (28, 512, 512))
"""(H = W, C in, C out): six of the suite's stride-1 3x3 layers (padding 1, batch 64), the four of
ResNet's stages and two with more channels."""
BATCH = 64
TRIAL_CONFIGS = ((128, 128, 64, 4, 4, "pointer", False), (128, 128, 64, 4, 4, "tma", False),
                 (64, 256, 64, 4, 4, "pointer", False), (64, 256, 64, 4, 4, "tma", False),
                 (128, 64, 64, 4, 4, "pointer", False),
                 (128, 256, 64, 8, 4, "pointer", True), (128, 256, 32, 8, 6, "pointer", False),
                 (128, 256, 64, 8, 4, "tma", False), (256, 128, 64, 8, 3, "pointer", False),
                 (128, 128, 64, 8, 5, "pointer", True))
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, stages, copy, persistent): one-warpgroup tiles (dispatch's GEMM
picks for B stored N x K avoid two-warpgroup tiles, ``results/layout_probe_h100``, and a convolution's
weight is such a B), then two-warpgroup tiles persistent, with more stages, by TMA, and taller."""


def main(out_dir: str) -> int:
    import torch
    import torch.nn.functional as F

    import alcop_triton as at
    from alcop_triton.choose_config import choose_config
    from kernels import conv as kconv
    from kernels import matmul as kmatmul

    rows: list[dict[str, Any]] = []
    for hw, cin, cout in LAYERS:
        g = torch.Generator(device="cuda").manual_seed(hw * cin + cout)
        x = torch.randn(BATCH, cin, hw, hw, device="cuda", dtype=torch.float16, generator=g)
        x = x.to(memory_format=torch.channels_last)
        w = (torch.randn(cout, cin, 3, 3, device="cuda", dtype=torch.float16, generator=g) / (9 * cin) ** 0.5)
        w = w.to(memory_format=torch.channels_last)
        want = F.conv2d(x, w, None, 1, 1)
        # im2col: rows = output pixels (n, p, q), columns = (r, s, c), as a channels-last window reads them
        cols = F.unfold(x.float(), 3, padding=1)  # N x (C*9) x (P*Q), columns ordered (c, r, s)
        cols = cols.view(BATCH, cin, 9, hw * hw).permute(0, 3, 2, 1).reshape(BATCH * hw * hw, 9 * cin)
        a = cols.to(torch.float16).contiguous()
        b = w.permute(0, 2, 3, 1).reshape(cout, 9 * cin).contiguous().t()  # K x N view of an N x K matrix
        want_gemm = want.permute(0, 2, 3, 1).reshape(-1, cout)
        cfg = kconv.default_config(x, w, (1, 1), (1, 1), (1, 1), 1)
        row: dict[str, Any] = {"layer": [BATCH, hw, hw, cin, cout], "gemm": [a.shape[0], cout, a.shape[1]],
                               "conv_cfg": str(cfg)}
        row["cudnn"] = checked_time(lambda: F.conv2d(x, w, None, 1, 1), None)
        row["alcop_conv"] = checked_time(lambda: at.conv2d(x, w, None, 1, 1), want.float())

        def same_cfg() -> Any:
            with at.use_config(cfg):
                return at.matmul(a, b)
        row["alcop_gemm_same_cfg"] = checked_time(same_cfg, want_gemm.float())
        row["alcop_gemm"] = checked_time(lambda: at.matmul(a, b), want_gemm.float())
        row["cublas"] = checked_time(lambda: torch.matmul(a, b), None)
        gemm_cfg = choose_config(a.device, lambda: kmatmul.workload_of(a, b))
        row["gemm_cfg"] = str(gemm_cfg)

        def conv_with(c: at.KernelConfig) -> Any:
            with at.use_config(c):
                return at.conv2d(x, w, None, 1, 1)
        row["alcop_conv_gemm_cfg"] = checked_time(lambda: conv_with(gemm_cfg), want.float())
        for bm, bn, bk, warps, stages, copy, persistent in TRIAL_CONFIGS:
            c = at.KernelConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, smem_stages=stages,
                                async_copy=copy, persistent=persistent)
            row[f"alcop_conv {c}"] = checked_time(
                lambda c=c: conv_with(c), want.float())
        rows.append(row)
        print(row, flush=True)
    meta = run_meta(GRAPH_TIMER)

    def ratio(r: dict[str, Any], x: str, y: str) -> str:
        """Time of ``x`` over time of ``y``."""
        return f"{r[x] / r[y]:.3f}x" if isinstance(r[x], float) and isinstance(r[y], float) else "-"
    lines = table_head("A convolution against its own product as a GEMM", meta,
                       f"Stride-1 3x3 layers, batch {BATCH}, channels_last, fp16; µs; ratios are times (above 1x: "
                       "the first is slower).",
                       ["layer (N,H,W,Cin,Cout)", "GEMM MxNxK", "cuDNN", "alcop conv", "alcop GEMM, conv's config",
                        "alcop GEMM", "cuBLAS", "alcop conv / same-config GEMM", "cuDNN / cuBLAS", "alcop conv / cuDNN", "conv config"])
    for r in rows:
        lines.append(f"| {'x'.join(map(str, r['layer']))} | {'x'.join(map(str, r['gemm']))} | {fmt_us(r['cudnn'])} | "
                     f"{fmt_us(r['alcop_conv'])} | {fmt_us(r['alcop_gemm_same_cfg'])} | {fmt_us(r['alcop_gemm'])} | "
                     f"{fmt_us(r['cublas'])} | {ratio(r, 'alcop_conv', 'alcop_gemm_same_cfg')} | "
                     f"{ratio(r, 'cudnn', 'cublas')} | {ratio(r, 'alcop_conv', 'cudnn')} | {r['conv_cfg']} |")
    trials = [k for k in rows[0] if k.startswith("alcop_conv ") or k == "alcop_conv_gemm_cfg"]
    lines += ["", "The convolution with other configs (µs; the GEMM's dispatched config in its own column):", "",
              "| layer | GEMM's config | " + " | ".join(trials) + " | best / cuDNN |", "|---|---|" + "---|" * (len(trials) + 1)]
    for r in rows:
        best = min(v for v in [r["alcop_conv"]] + [r[k] for k in trials] if isinstance(v, float))
        lines.append(f"| {'x'.join(map(str, r['layer']))} | {r['gemm_cfg']} | "
                     + " | ".join(fmt_us(r[k]) for k in trials) + f" | {best / r['cudnn']:.3f}x |")
    return publish(out_dir, "conv_vs_gemm", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
