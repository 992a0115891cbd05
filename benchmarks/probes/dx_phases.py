"""A strided convolution's input gradient: one kernel over all input phases against one convolution per phase.

    python benchmarks/probes/dx_phases.py OUT_DIR

For the suite's strided conv2d layers (channels-last fp16, batch 64): cuDNN's input gradient
(``aten.convolution_backward``, input only), ``kernels.conv_grad.input_grad_by_conv`` (a convolution per
input phase on the forward kernel, each copied into dX) and ``input_grad_in_phases`` (one DSL kernel,
``conv_input_grad_te``) with its config as dispatched and at a few fixed ones (``use_config``; two of them
persistent, programs looping over tiles). Every result is checked against cuDNN's first. Timer:
``triton.testing.do_bench_cudagraph`` (one call, one set of inputs). Writes ``OUT_DIR/dx_phases.{json,md}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = ((64, 28, 28, 128, 128, 3, 2, 1), (64, 14, 14, 256, 256, 3, 2, 1), (64, 7, 7, 512, 512, 3, 2, 1),
          (64, 56, 56, 64, 128, 3, 2, 1), (64, 28, 28, 128, 512, 3, 2, 1), (64, 14, 14, 256, 512, 3, 2, 1),
          (64, 224, 224, 16, 64, 7, 2, 3))
"""(N, H, W, C, CO, window, stride, pad) of the suite's strided conv2d layers."""

CONFIGS = ((64, 64, 64, 4, 4, False), (128, 64, 64, 4, 4, False), (128, 128, 64, 8, 4, False),
           (128, 256, 64, 8, 3, False), (128, 64, 64, 4, 4, True), (128, 128, 64, 8, 4, True))
"""(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, persistent) tried besides the dispatched config."""


def main(out_dir: str) -> int:
    from probe_io import checked_time, fastest, fmt_us, publish, run_meta, table_head
    import torch

    import alcop_triton as at
    from alcop_triton.ops.conv import BACKWARD as CACHED
    from alcop_triton.kernels.conv_grad import input_grad_by_conv, input_grad_in_phases

    cl = torch.channels_last
    rows = []
    for nb, h, w, c, co, k, s, p in LAYERS:
        torch.manual_seed(0)
        x = torch.randn(nb, c, h, w, device="cuda", dtype=torch.float16).to(memory_format=cl)
        wt = (torch.randn(co, c, k, k, device="cuda", dtype=torch.float16) / (k * c ** 0.5)).to(memory_format=cl)
        oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        dy = torch.randn(nb, co, oh, ow, device="cuda", dtype=torch.float16).to(memory_format=cl)

        def cudnn() -> Any:
            return torch.ops.aten.convolution_backward(dy, x, wt, None, [s, s], [p, p], [1, 1], False, [0, 0], 1,
                                                       [True, False, False])[0]
        want = cudnn().float()
        args = (x, wt, dy, (s, s), (p, p), (1, 1), 1)
        # None: input_grad_in_phases declines the layer (its docstring says when)
        taken = input_grad_in_phases(CACHED, *args) is not None
        row: dict[str, Any] = {
            "layer": f"{nb}x{h}x{w}, {c} -> {co}, {k}x{k} stride {s}", "cudnn_us": checked_time(cudnn, want),
            "by_conv_us": checked_time(lambda: input_grad_by_conv(CACHED, *args), want),
            "in_phases_us": checked_time(lambda: input_grad_in_phases(CACHED, *args), want) if taken else "declined",
            "configs": []}
        for bm, bn, bk, warps, stages, persistent in CONFIGS if taken else ():
            cfg = at.KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=warps, smem_stages=stages,
                                  persistent=persistent)

            def forced(cfg: Any = cfg) -> Any:
                with at.use_config(cfg):
                    return input_grad_in_phases(CACHED, *args)
            row["configs"].append({"config": str(cfg), "us": checked_time(forced, want)})
        rows.append(row)
        print(json.dumps(row), flush=True)

    meta = run_meta()
    lines = table_head("Strided conv2d input gradient: one kernel over the phases", meta,
                       "µs, fp16, channels-last, batch 64.",
                       ["layer", "cuDNN", "a convolution per phase", "one kernel (dispatched)",
                        "one kernel, best fixed config"])
    for r in rows:
        best = fastest(r["configs"])
        phases = r["in_phases_us"] if r["in_phases_us"] == "declined" else fmt_us(r["in_phases_us"])
        lines.append(f"| {r['layer']} | {fmt_us(r['cudnn_us'])} | {fmt_us(r['by_conv_us'])} | {phases} | "
                     f"{fmt_us(best['us']) if best else '-'} ({best['config'] if best else '-'}) |")
    return publish(out_dir, "dx_phases", meta, rows, lines)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
