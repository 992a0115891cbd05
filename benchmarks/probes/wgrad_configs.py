"""The conv weight gradient's DSL kernel over chunk widths and split factors, against cuDNN.

    python benchmarks/probes/wgrad_configs.py OUT_DIR [--tag NAME]

For 3x3, pad-1, stride-1 layers of the suite (channels-last fp16, batch 64): cuDNN's weight gradient
(``aten.convolution_backward``, weight only), alcop's as its backward runs it (``autograd.conv_grads``),
and the weight-gradient DSL kernel (``kernels.conv_grad.conv_weight_grad_te``, sizes compiled in) at
64 x 64 tiles with 4 warps (128 x 128 with 8 from 512 output channels), BLOCK_K 32 and 64 (and 16 for
rows under 32 wide), each at three split factors around "about four programs per SM". Every result is
checked against cuDNN's first. Timer: ``triton.testing.do_bench_cudagraph`` (one call, one set of
inputs). The configs are made here, not by the package's rule, so one script times two versions of
the package alike (run it from each tree). Writes ``OUT_DIR/wgrad_configs.{json,md}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = ((64, 56, 56, 64, 64), (64, 28, 28, 128, 128), (64, 14, 14, 256, 256), (64, 28, 28, 512, 512),
          (64, 224, 224, 64, 64), (64, 7, 7, 512, 512))
"""(N, H, W, C, CO) of 3x3, pad-1, stride-1 layers from the suite."""


def splits(tiles: int, chunks: int, sms: int) -> list[int]:
    """The split of "about four programs per SM" (at least 8 chunks per program), and its half and double."""
    split = 1
    while split < 64 and tiles * split < 4 * sms and chunks >= 16 * split:
        split *= 2
    return sorted({max(1, split // 2), split, min(64, split * 2)})


def main(out_dir: str, tag: str) -> int:
    from probe_io import checked_time, fastest, fmt_us, publish, run_meta, table_head
    import torch

    from alcop_triton.ops.conv import conv_grads
    from alcop_triton.build import build
    from alcop_triton.fastpath import launch_kernel
    from alcop_triton.kernels.conv_grad import conv_weight_grad_te, weight_grad_static
    from alcop_triton.records import KernelConfig
    from alcop_triton.schedule import Schedule

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cl = torch.channels_last
    inputs, out_te = conv_weight_grad_te(2, "float16", (1, 1), (1, 1), (1, 1), 1)
    rows = []
    for nb, h, w, c, co in LAYERS:
        torch.manual_seed(0)
        x = torch.randn(nb, c, h, w, device="cuda", dtype=torch.float16).to(memory_format=cl)
        wt = (torch.randn(co, c, 3, 3, device="cuda", dtype=torch.float16) / (3 * c ** 0.5)).to(memory_format=cl)
        dy = torch.randn(nb, co, h, w, device="cuda", dtype=torch.float16).to(memory_format=cl)

        def cudnn() -> Any:
            return torch.ops.aten.convolution_backward(dy, x, wt, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                       [False, True, False])[1]
        want = cudnn().float()
        row: dict[str, Any] = {"layer": f"{nb}x{h}x{w}, {c} -> {co}", "cudnn_us": checked_time(cudnn, want),
                               "alcop_us": checked_time(lambda: conv_grads(x, wt, dy, (1, 1), (1, 1), (1, 1), 1,
                                                                           False, True)[1], want), "dsl": []}
        wide = co >= 512
        bm = bn = 128 if wide else 64
        for bk in (16, 32, 64) if w < 32 else (32, 64):
            tiles = -(-co // bm) * -(-9 * c // bn)
            for split in splits(tiles, -(-nb * h * w // bk), sms):
                cfg = KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=8 if wide else 4,
                                   smem_stages=4, split_k=split)
                kern = build(Schedule.from_config(out_te, cfg, m_axes=("co",), n_axes=("kh", "kw", "c")),
                             inputs + [out_te], static=weight_grad_static(2, True))
                out = torch.empty(1, co, c, 3, 3, device="cuda", dtype=torch.float16)

                def dsl(kern: Any = kern, out: Any = out) -> Any:
                    launch_kernel(kern, [dy, x, wt, out])
                    return out[0]
                row["dsl"].append({"config": str(cfg), "us": checked_time(dsl, want)})
        rows.append(row)
        print(json.dumps(row), flush=True)

    meta = run_meta() | {"tag": tag}
    lines = table_head(f"Conv2d weight gradient's DSL kernel by config ({tag})", meta,
                       "µs, fp16, channels-last, 3x3, pad 1, stride 1.",
                       ["layer", "cuDNN", "alcop (as backward runs it)", "DSL best (config)"])
    for r in rows:
        best = fastest(r["dsl"])
        lines.append(f"| {r['layer']} | {fmt_us(r['cudnn_us'])} | {fmt_us(r['alcop_us'])} | "
                     f"{fmt_us(best['us']) if best else 'err'} ({best['config'] if best else '-'}) |")
    lines += ["", "Every config (µs):", ""]
    for r in rows:
        lines.append(f"- {r['layer']}: " + ", ".join(f"{d['config']} {fmt_us(d['us'])}" for d in r["dsl"]))
    return publish(out_dir, "wgrad_configs", meta, rows, lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    raise SystemExit(main(args[0], args[args.index("--tag") + 1] if "--tag" in args else "this tree"))
