"""Stride-1 3x3 convolutions by TMA copies: two hand-written forms against alcop's conv kernel and cuDNN.

    python benchmarks/probes/conv_tma.py OUT_DIR [--quick] [--generated-only]

alcop's conv kernel gathers each im2col tile with pointer loads (cp.async, one mask per row and tap);
the suite's large stride-1 3x3 layers run at 0.63-0.76x cuDNN under CUDA graphs. Two ways to copy
the same tiles by TMA (``conv_box.py``'s kernels), for a channels-last input and a 'same' convolution
(output extent = input's):

* **shift**: X viewed as the (N*H*W, C) matrix. For window tap (rh, rw) the input row of output row
  m is m + (rh - P) * W + (rw - P), one shift for the whole tile: a 2-D box at a shifted row. Rows
  whose tap falls outside the image (across a row's or an image's edge) are zeroed in registers.
* **box**: X as the 4-D (N, H, W, C) tensor and the output tile as a BH x BW rectangle of one
  image: for a tap the A tile is the box at (n, oh0 + rh - P, ow0 + rw - P, c0); TMA fills the
  parts outside the tensor (padding) with zeros, so no mask at all. Tiles past W or H are waste.

The weight is (CO, KH*KW*C) row-major for channels-last storage (``nt``: its tile transposed for the
dot) or copied once to (KH*KW*C, CO) (``nn``). Descriptors are built on the host. Beside them, alcop's
generated kernel with the same tile by pointers and by TMA (``async_copy="tma"``: the box form,
``analysis.window_blocks``); ``--generated-only`` times only those.
Timer: ``triton.testing.do_bench_cudagraph`` (one call, one set of inputs). Outputs checked against
cuDNN first. Writes ``OUT_DIR/conv_tma.{json,md}``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = ((64, 224, 224, 64, 64), (64, 112, 112, 128, 128), (64, 56, 56, 64, 64), (64, 56, 56, 256, 256),
          (64, 28, 28, 512, 512), (64, 14, 14, 512, 512), (64, 7, 7, 512, 512))
"""(N, H, W, C, CO) of 3x3, stride-1, pad-1 layers from the suite."""

TILES = ((128, 128, 64, 4, 8), (128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (64, 128, 64, 4, 4), (128, 128, 64, 3, 8),
         (128, 64, 64, 4, 4))
"""(BLOCK_M, BLOCK_N, BLOCK_K, stages, warps); BLOCK_N is capped at CO."""


def main(out_dir: str, quick: bool = False, generated_only: bool = False) -> int:
    from probe_io import checked_time, fmt_us, run_meta, write
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    from conv_box import kernels

    import alcop_triton as at

    ks = kernels()

    rows = []
    for nb, h, w, c, co in LAYERS[:2] if quick else LAYERS:
        x = torch.randn(nb, c, h, w, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        wt = (torch.randn(co, c, 3, 3, device="cuda", dtype=torch.float16) / math.sqrt(9 * c)).to(
            memory_format=torch.channels_last)
        want = torch.nn.functional.conv2d(x, wt, padding=1).float()
        x2 = x.permute(0, 2, 3, 1).reshape(nb * h * w, c)
        x4 = x.permute(0, 2, 3, 1)
        w_nt = wt.permute(0, 2, 3, 1).reshape(co, 9 * c)
        w_nn = w_nt.t().contiguous()
        y = torch.empty(nb, co, h, w, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        y2, y4 = y.permute(0, 2, 3, 1).reshape(nb * h * w, co), y.permute(0, 2, 3, 1)
        row: dict[str, Any] = {"layer": [nb, h, w, c, co],
                               "cudnn_us": checked_time(lambda: torch.nn.functional.conv2d(x, wt, padding=1), want),
                               "alcop_us": checked_time(lambda: at.conv2d(x, wt, padding=1), want), "tiles": []}
        for bm, bn, bk, stages, warps in TILES:
            bn = min(bn, co)
            grid_m = triton.cdiv(nb * h * w, bm)
            entry: dict[str, Any] = {"tile": [bm, bn, bk, stages, warps]}
            for mech in ("pointer", "tma"):
                cfg = at.KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=warps,
                                      smem_stages=stages, async_copy=mech)

                def generated(cfg: at.KernelConfig = cfg) -> Any:
                    with at.use_config(cfg):
                        return at.conv2d(x, wt, padding=1)

                entry[f"alcop_{mech}_us"] = checked_time(generated, want)
                # five runs bitwise equal: a pipelined copy that races shows here before it shows in the error
                runs = [generated().clone() for _ in range(5)]
                entry[f"alcop_{mech}_runs_differ"] = any(not torch.equal(r, runs[0]) for r in runs[1:])
            for nn in () if generated_only else (False, True):
                wd = (TensorDescriptor.from_tensor(w_nn, [bk, bn]) if nn else TensorDescriptor.from_tensor(w_nt, [bn, bk]))
                xd = TensorDescriptor.from_tensor(x2, [bm, bk])
                yd = TensorDescriptor.from_tensor(y2, [bm, bn])

                def shift(xd: Any = xd, wd: Any = wd, yd: Any = yd, nn: bool = nn) -> Any:
                    ks["shift"][(grid_m * triton.cdiv(co, bn),)](xd, wd, yd, nb, h, w, co, c, 3, 9, 1, bm, bn, bk,
                                                                 stages, 3 if nn else 0, num_warps=warps)
                    return y

                entry[f"shift_{'nn' if nn else 'nt'}_us"] = checked_time(shift, want)
                for bw in (8, 16):
                    bh = bm // bw
                    xd4 = TensorDescriptor.from_tensor(x4, [1, bh, bw, bk])
                    yd4 = TensorDescriptor.from_tensor(y4, [1, bh, bw, bn])
                    grid = (nb * triton.cdiv(h, bh) * triton.cdiv(w, bw) * triton.cdiv(co, bn),)

                    def box(xd4: Any = xd4, wd: Any = wd, yd4: Any = yd4, nn: bool = nn, bh: int = bh,
                            bw: int = bw, grid: tuple[int] = grid) -> Any:
                        ks["box"][grid](xd4, wd, yd4, nb, h, w, h, w, co, c, 3, 9, 1, bh, bw, bn, bk, stages, 0,
                                        3 if nn else 0, False, num_warps=warps)
                        return y

                    entry[f"box{bh}x{bw}_{'nn' if nn else 'nt'}_us"] = checked_time(box, want)
            row["tiles"].append(entry)
            print(row["layer"], row["cudnn_us"], row["alcop_us"], entry, flush=True)
        rows.append(row)
    meta = run_meta()


    lines = [f"# Stride-1 3x3 convolutions by TMA copies ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {meta['timer']}. µs, fp16, "
             "channels-last, batch 64, pad 1.", "",
             "| layer (N, H, W, C, CO) | cuDNN | alcop | tile (M, N, K, stages, warps) | form | µs | cuDNN / form |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        for t in r["tiles"]:
            for form, v in t.items():
                if form == "tile" or form.endswith("_runs_differ"):
                    continue
                ratio = f"{r['cudnn_us'] / v:.3f}x" if isinstance(v, float) and isinstance(r["cudnn_us"], float) else "-"
                lines.append(f"| {r['layer']} | {fmt_us(r['cudnn_us'])} | {fmt_us(r['alcop_us'])} | {t['tile']} | "
                             f"{form.removesuffix('_us')} | {fmt_us(v)} | {ratio} |")
    write(out_dir, "conv_tma", meta, rows, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], "--quick" in sys.argv[2:], "--generated-only" in sys.argv[2:]))
