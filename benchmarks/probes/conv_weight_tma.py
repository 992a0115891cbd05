"""Whether a convolution's weight tile can be a TMA box: three weight forms, 4 and 8 warps, one layer.

    python benchmarks/probes/conv_weight_tma.py OUT_DIR

A hand-written stride-1 3x3 conv (64 x 112 x 112, 128 -> 128 channels, fp16, channels-last) whose A
tile is a TMA box of the input (``conv_box.py``'s box, 128-row boxes 16 x 8 and 8 x 16), with
the weight tile copied by TMA three ways: from the (CO, KH*KW*C) matrix (form 0, 2-D), from the
(KH, KW, CO, C) tensor with a (1, 1, BN, BK) block reshaped to (BN, BK) (form 1: what a descriptor
over the weight's own dims gives), and from (KH*KW, CO, C) with a (1, BN, BK) block (form 2); each
transposed for the dot. Then alcop's generated kernel (A tiles by TMA windows, B tiles by pointers)
with the weight channels-last and NCHW. Normwise error against cuDNN's output
(2e-5 is fp16 rounding), time by ``triton.testing.do_bench_cudagraph``. Writes OUT_DIR/conv_weight_tma.{json,md}.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(out_dir: str) -> int:
    from probe_io import run_meta, write
    import torch
    import triton
    from triton.testing import do_bench_cudagraph
    from triton.tools.tensor_descriptor import TensorDescriptor

    from conv_box import kernels

    import alcop_triton as at

    box = kernels()["box"]
    nb, h, w, c, co = 64, 112, 112, 128, 128
    x = torch.randn(nb, c, h, w, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    wt = (torch.randn(co, c, 3, 3, device="cuda", dtype=torch.float16) / math.sqrt(9 * c)).to(
        memory_format=torch.channels_last)
    want = torch.nn.functional.conv2d(x, wt, padding=1).float()

    def err(y: Any) -> float:
        return ((y.float() - want).norm() / want.norm()).item()

    y = torch.empty(nb, co, h, w, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    x4, y4 = x.permute(0, 2, 3, 1), y.permute(0, 2, 3, 1)
    w2 = wt.permute(0, 2, 3, 1).reshape(co, 9 * c)
    w4 = wt.permute(2, 3, 0, 1)   # (KH, KW, CO, C), C unit stride
    w3 = w4.reshape(9, co, c)
    bm, bn, bk = 128, 128, 64
    rows: list[dict[str, Any]] = []
    for warps in (4, 8):
        for form, wd in ((0, TensorDescriptor.from_tensor(w2, [bn, bk])),
                         (1, TensorDescriptor(w4, list(w4.shape), list(w4.stride()), [1, 1, bn, bk])),
                         (2, TensorDescriptor(w3, list(w3.shape), list(w3.stride()), [1, bn, bk]))):
            for bw in (8, 16):
                bh = bm // bw
                grid = (nb * triton.cdiv(h, bh) * triton.cdiv(w, bw) * triton.cdiv(co, bn),)
                xd, yd = TensorDescriptor.from_tensor(x4, [1, bh, bw, bk]), TensorDescriptor.from_tensor(y4, [1, bh, bw, bn])

                def run(xd: Any = xd, wd: Any = wd, yd: Any = yd, bh: int = bh, bw: int = bw, grid: Any = grid,
                        form: int = form, warps: int = warps) -> None:
                    box[grid](xd, wd, yd, nb, h, w, h, w, co, c, 3, 9, 1, bh, bw, bn, bk, 3, 0, form, False,
                              num_warps=warps)

                y.fill_(float("nan"))
                run()
                rows.append({"kernel": f"hand-written, weight form {form}, box {bh}x{bw}", "warps": warps,
                             "error": err(y), "us": 1e3 * do_bench_cudagraph(run)})
    for warps in (4, 8):
        cfg = at.KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=warps, smem_stages=3,
                              async_copy="tma")
        for name, wl in (("channels-last weight", wt), ("NCHW weight", wt.contiguous())):
            def gen(wl: Any = wl, cfg: Any = cfg) -> Any:
                with at.use_config(cfg):
                    return at.conv2d(x, wl, padding=1)
            rows.append({"kernel": f"alcop generated, {name}", "warps": warps, "error": err(gen()),
                         "us": 1e3 * do_bench_cudagraph(gen)})
    meta = run_meta()
    lines = [f"# Conv weight tiles by TMA ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {meta['timer']}. 64 x 112 x 112, "
             "128 -> 128 channels, 3x3, fp16, tile 128 x 128 x 64, 3 stages.", "",
             "| kernel | warps | normwise error | µs |", "|---|---|---|---|"]
    lines += [f"| {r['kernel']} | {r['warps']} | {r['error']:.1e} | {r['us']:.1f} |" for r in rows]
    write(out_dir, "conv_weight_tma", meta, rows, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
