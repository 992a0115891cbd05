"""Where a conv2d backward's time goes: input and weight gradients apart, alcop's paths against cuDNN's.

    python benchmarks/probes/conv_bwd.py OUT_DIR [--quick]

For a few of the suite's layers (channels-last fp16, batch 64) this times cuDNN's input gradient and
weight gradient separately (``aten.convolution_backward`` with one output mask each), alcop's as its
backward runs them (``autograd.conv_grads``: the input gradient on the forward kernel, one convolution
per input phase; the weight gradient as a GEMM over im2col rows or its DSL kernel), the weight
gradient's DSL kernel as dispatched, and that kernel (``conv_weight_grad_te``: no im2col copy) at a
few tiles and split-K factors with its sizes compiled in (``weight_grad_static``), the split rule's
config (``weight_grad_config``) also with the spatial sizes at run time. Timer: ``triton.testing.do_bench_cudagraph`` (one call, one set of inputs); every result is
checked against cuDNN's first. Writes ``OUT_DIR/conv_bwd.{json,md}``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = ((64, 56, 56, 64, 64, 1), (64, 28, 28, 128, 128, 2), (64, 14, 14, 256, 256, 1), (64, 224, 224, 64, 64, 1),
          (64, 28, 28, 512, 512, 1), (64, 7, 7, 512, 512, 1))
"""(N, H, W, C, CO, stride) of 3x3, pad-1 layers from the suite."""

WGRAD_TILES = ((64, 64, 64, 4, 4, 1), (64, 64, 64, 4, 4, 4), (64, 64, 64, 4, 4, 16), (128, 64, 64, 4, 4, 8),
               (128, 128, 64, 4, 8, 4), (128, 128, 64, 4, 8, 16), (64, 128, 64, 4, 4, 8), (64, 128, 64, 4, 4, 16),
               (64, 256, 64, 3, 8, 8), (64, 256, 64, 3, 8, 16), (128, 256, 64, 3, 8, 4), (64, 128, 64, 4, 4, 4))
"""(BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, split_k) of the weight gradient's DSL kernel."""


def main(out_dir: str, quick: bool = False) -> int:
    from probe_io import checked_time, fastest, fmt_us, run_meta, write
    import torch

    import alcop_triton as at
    from alcop_triton.ops.conv import conv_grads
    from alcop_triton.build import build
    from alcop_triton.fastpath import launch_kernel
    from alcop_triton.kernels.conv_grad import (conv_weight_grad_kernel, conv_weight_grad_te, weight_grad_config,
                                                weight_grad_static)
    from alcop_triton.records import KernelConfig
    from alcop_triton.schedule import Schedule

    rows = []
    for nb, h, w, c, co, s in LAYERS[:2] if quick else LAYERS:
        x = torch.randn(nb, c, h, w, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        wt = (torch.randn(co, c, 3, 3, device="cuda", dtype=torch.float16) / math.sqrt(9 * c)).to(
            memory_format=torch.channels_last)
        oh, ow = (h - 1) // s + 1, (w - 1) // s + 1
        dy = (torch.randn(nb, co, oh, ow, device="cuda", dtype=torch.float16) / math.sqrt(nb * oh * ow)).to(
            memory_format=torch.channels_last)
        st, pd = (s, s), (1, 1)

        def cudnn(mask: list[bool]) -> Callable[[], Any]:
            def run() -> Any:
                dx, dw, _ = torch.ops.aten.convolution_backward(dy, x, wt, None, list(st), list(pd), [1, 1], False,
                                                               [0, 0], 1, mask + [False])
                return dx if mask[0] else dw
            return run

        want_dx, want_dw = cudnn([True, False])().float(), cudnn([False, True])().float()
        row: dict[str, Any] = {
            "layer": [nb, h, w, c, co, s],
            "cudnn_dx_us": checked_time(cudnn([True, False]), want_dx),
            "cudnn_dw_us": checked_time(cudnn([False, True]), want_dw),
            "alcop_dx_us": checked_time(lambda: conv_grads(x, wt, dy, st, pd, (1, 1), 1, True, False)[0], want_dx),
            "alcop_dw_us": checked_time(lambda: conv_grads(x, wt, dy, st, pd, (1, 1), 1, False, True)[1], want_dw),
            "dsl_dw_dispatched_us": checked_time(lambda: torch.ops.alcop.dsl_call(
                conv_weight_grad_kernel(2, x.dtype, st, pd, (1, 1), 1), [dy, x, wt])[0], want_dw),
            "forward_cudnn_us": checked_time(lambda: torch.nn.functional.conv2d(x, wt, stride=s, padding=1), None),
            "forward_alcop_us": checked_time(lambda: at.conv2d(x, wt, stride=s, padding=1), None),
            "wgrad_dsl": []}
        inputs, out_te = conv_weight_grad_te(2, "float16", st, pd, (1, 1), 1)
        rule = weight_grad_config((1, co, 9 * c, nb * oh * ow), torch.cuda.get_device_properties(0).multi_processor_count)
        tiles = [(KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=warps, smem_stages=stages,
                               split_k=split), True) for bm, bn, bk, stages, warps, split in WGRAD_TILES]
        for cfg, spatial in tiles + [(rule, True), (rule, False)]:
            out = torch.empty(1, co, c, 3, 3, device="cuda", dtype=torch.float16)
            sched = Schedule.from_config(out_te, cfg, m_axes=("co",), n_axes=("kh", "kw", "c"))
            kern = build(sched, inputs + [out_te], static=weight_grad_static(2, spatial))

            def dsl(kern: Any = kern, out: Any = out) -> Any:
                launch_kernel(kern, [dy, x, wt, out])
                return out[0]

            name = str(cfg) + ("" if spatial else ", spatial sizes at run time")
            row["wgrad_dsl"].append({"config": name, "us": checked_time(dsl, want_dw)})
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = run_meta()


    lines = [f"# Conv2d backward by parts ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {meta['timer']}. µs, fp16, "
             "channels-last, 3x3, pad 1.", "",
             "| layer (N, H, W, C, CO, stride) | fwd cuDNN / alcop | dX cuDNN / alcop | dW cuDNN / alcop (im2col GEMM) | "
             "dW DSL dispatched | dW DSL best (config) |", "|---|---|---|---|---|---|"]
    for r in rows:
        best = fastest(r["wgrad_dsl"])
        lines.append(f"| {r['layer']} | {fmt_us(r['forward_cudnn_us'])} / {fmt_us(r['forward_alcop_us'])} | "
                     f"{fmt_us(r['cudnn_dx_us'])} / {fmt_us(r['alcop_dx_us'])} | {fmt_us(r['cudnn_dw_us'])} / {fmt_us(r['alcop_dw_us'])} | "
                     f"{fmt_us(r['dsl_dw_dispatched_us'])} | "
                     f"{fmt_us(best['us']) if best else 'err'} ({best['config'] if best else '-'}) |")
    lines += ["", "Weight gradient's DSL kernel, every config (µs):", ""]
    for r in rows:
        lines.append(f"- {r['layer']}: " + ", ".join(f"{d['config']} {fmt_us(d['us'])}" for d in r["wgrad_dsl"]))
    write(out_dir, "conv_bwd", meta, rows, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], "--quick" in sys.argv[2:]))
