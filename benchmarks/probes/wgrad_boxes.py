"""The weight gradient on TMA boxes against cuDNN's and alcop's earlier route, on the suite's convolutions.

    python benchmarks/probes/wgrad_boxes.py OUT_DIR [--quick]

Per layer (the ALCOP conv2d suite's 20 layers and its conv3d layers; batch 64, fp16, channels-last):
cuDNN's weight gradient (``aten.convolution_backward``, weight only), alcop's route before the box kernel
(the GEMM over im2col rows or the DSL kernel, as ``autograd.conv_grads`` picks them), and the box kernel
(``kernels/conv_window_grad.py``) under ``tile``'s pick and its neighbours (half and twice the slices,
the other tile widths, 256 input channels a tile), each checked against the weight gradient of float64 copies (normwise error
<= 1e-2; the box kernel's two runs bit-identical) before it is timed with ``do_bench_cudagraph`` (the
whole call: launch, the slices' sum and the cast). Writes ``OUT_DIR/wgrad_boxes.{json,md}`` after every
layer.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = (
    (64, (224, 224), 16, 64, 7, 2, 3), (64, (56, 56), 64, 64, 3, 1, 1), (64, (28, 28), 128, 128, 3, 2, 1),
    (64, (28, 28), 128, 128, 3, 1, 1), (64, (14, 14), 256, 256, 3, 2, 1), (64, (14, 14), 256, 256, 3, 1, 1),
    (64, (7, 7), 512, 512, 3, 2, 1), (64, (7, 7), 512, 512, 3, 1, 1), (64, (56, 56), 64, 128, 3, 2, 1),
    (64, (28, 28), 128, 512, 3, 2, 1), (64, (14, 14), 256, 512, 3, 2, 1), (64, (224, 224), 16, 64, 3, 1, 1),
    (64, (224, 224), 64, 64, 3, 1, 1), (64, (112, 112), 64, 128, 3, 1, 1), (64, (112, 112), 128, 128, 3, 1, 1),
    (64, (56, 56), 128, 256, 3, 1, 1), (64, (56, 56), 256, 256, 3, 1, 1), (64, (28, 28), 256, 512, 3, 1, 1),
    (64, (28, 28), 512, 512, 3, 1, 1), (64, (14, 14), 512, 512, 3, 1, 1),
    (64, (14, 7, 7), 512, 512, 3, 1, 1), (64, (56, 28, 28), 128, 128, 3, 1, 1),
    (64, (28, 14, 14), 256, 256, 3, 1, 1), (64, (112, 56, 56), 64, 64, 3, 1, 1))
"""The suite's input extents: (N, spatial, C, C_out, window, stride, pad) (its conv2d layers' input
extents are their output extents times the stride)."""


def main(out_dir: str, quick: bool = False) -> int:
    import torch

    from probe_io import checked_time, run_meta

    from alcop_triton.ops.conv import BACKWARD
    from alcop_triton.build import Launch
    from alcop_triton.kernels.conv_window import gluon_descriptor
    from alcop_triton.kernels import conv_grad
    from alcop_triton.kernels import conv_window_grad as g
    torch.manual_seed(0)
    meta = run_meta()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[dict[str, Any]] = []
    for n, sp, c, co, k, stride, pad in LAYERS[:4] if quick else LAYERS:
        nd = len(sp)
        sp = tuple(s * stride if nd == 2 else s for s in sp)
        fmt = torch.channels_last_3d if nd == 3 else torch.channels_last
        x = torch.randn(n, c, *sp, device="cuda", dtype=torch.float16).contiguous(memory_format=fmt)
        w = (torch.randn(co, c, *(k,) * nd, device="cuda", dtype=torch.float16) / (c * k ** nd) ** 0.5
             ).contiguous(memory_format=fmt)
        st, pd, dl = [stride] * nd, [pad] * nd, [1] * nd
        out = [(s + 2 * pad - k) // stride + 1 for s in sp]
        dy = torch.randn(n, co, *out, device="cuda", dtype=torch.float16).contiguous(memory_format=fmt)

        def cudnn(xx: Any = x, ww: Any = w, yy: Any = dy) -> Any:
            return torch.ops.aten.convolution_backward(yy, xx, ww, None, st, pd, dl, False, [0] * nd, 1,
                                                       [False, True, False])[1]
        want = cudnn(x.double(), w.double(), dy.double()).float()
        row: dict[str, Any] = {"layer": [n, *sp, c, co, k, stride, pad], "cudnn_us": checked_time(cudnn, want)}
        before = conv_grad.weight_grad_by_gemm(BACKWARD, x, w, dy, st, pd, dl, 1)
        route = "im2col GEMM" if before is not None else "DSL kernel"

        def earlier() -> Any:
            got = conv_grad.weight_grad_by_gemm(BACKWARD, x, w, dy, st, pd, dl, 1)
            if got is None:
                key = conv_grad.conv_weight_grad_kernel(nd, x.dtype, st, pd, dl, 1)
                got = BACKWARD.dsl_call(key, [dy, x, w]).flatten(0, 1)
            return got
        row |= {"earlier_route": route, "earlier_us": checked_time(earlier, want), "tiles": []}
        reason = g.why_not(x, w, dy, st, pd, dl, 1)
        if reason is None:
            _, _, tail, _, _, _ = g.plan(x, w, dy, st, pd, sms)
            chunks, taps = tail[1], k ** nd
            pick = g.tile(co, c, taps, chunks, sms)
            bm, bn, stages, split = pick
            choices = [pick] + [(bm, bn, stages, s) for s in (split // 2, split * 2) if 1 <= s <= chunks]
            choices += [(m, b, max(2, min(4, g.SMEM_BYTES // (g.POSITIONS * (m + b) * 2))), s)
                        for m, b in ((bm, 64), (bm, 128), (bm, 256), (64, bn), (128, bn)) if c % b == 0 and (m, b) != (bm, bn)
                        for s in ((split, split // 2) if b == 256 else (split, )) if s >= 1]
            for choice in dict.fromkeys(choices):
                def run(choice: Any = choice) -> Any:
                    tensors, grid, tl, kwargs, descs, slices = g.plan(x, w, dy, st, pd, sms, choice)
                    d = [gluon_descriptor(tensors[i], dims, block) for i, dims, block in descs]
                    Launch(g.WGRAD_KERNEL, g.WGRAD_KERNEL[grid], grid, (*tensors, *d, *tl), kwargs, 3, x.device,
                           descs)()
                    ws = tensors[2]
                    return (ws[0] if slices == 1 else ws.sum(0)).to(x.dtype).reshape(co, *w.shape[2:], c).movedim(-1, 1)
                try:
                    first, second = run(), run()
                    same = bool(torch.equal(first, second))
                    us: Any = checked_time(run, want) if same else "runs differ"
                except Exception as exc:  # out of resources, a compile failure: the tile's result
                    us = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
                row["tiles"].append({"choice": list(choice), "pick": choice == pick, "us": us})
                print(row["layer"], choice, us, flush=True)
            row["library_us"] = checked_time(lambda: g.weight_grad_by_boxes(x, w, dy, st, pd, dl, 1), want)
        else:
            row["box_reason"] = reason
        rows.append(row)
        print(row["layer"], row["cudnn_us"], row["earlier_us"], flush=True)
        del x, w, dy, want
        torch.cuda.empty_cache()
        report(out_dir, meta, rows)
    return 0


def report(out_dir: str, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """``OUT_DIR/wgrad_boxes.{json,md}``: per layer cuDNN, the earlier route, ``tile``'s pick through the
    library call, and the best tile."""
    from probe_io import fastest, fmt_us, table_head, write
    lines = table_head("The weight gradient on TMA boxes", meta,
                       "µs, fp16, channels-last, batch 64; the weight gradient alone. Tile = (BM, BN, stages, "
                       "slices).", ["layer (N, spatial, C, C_out, k, stride, pad)", "cuDNN", "earlier route", "µs",
                                    "box (library call)", "best tile", "µs", "cuDNN / earlier",
                                    "cuDNN / box", "cuDNN / best"])
    for r in rows:
        best = fastest(r.get("tiles", []))

        def ratio(v: Any, cudnn: Any = r["cudnn_us"]) -> str:
            return f"{cudnn / v:.3f}x" if isinstance(v, float) and isinstance(cudnn, float) else "-"
        lib = r.get("library_us", r.get("box_reason", "-"))
        lines.append(f"| {'x'.join(map(str, r['layer']))} | {fmt_us(r['cudnn_us'])} | {r['earlier_route']} | "
                     f"{fmt_us(r['earlier_us'])} | {fmt_us(lib) if isinstance(lib, float) else lib} | "
                     f"{best['choice'] if best else '-'} | {fmt_us(best['us']) if best else '-'} | "
                     f"{ratio(r['earlier_us'])} | {ratio(lib)} | {ratio(best['us']) if best else '-'} |")
    failed = [(r["layer"], t["choice"], t["us"]) for r in rows for t in r.get("tiles", [])
              if not isinstance(t["us"], float)]
    lines += ["", f"Tiles that failed: {len(failed)}"] + [f"- {la} {ch}: {e}" for la, ch, e in failed]
    write(out_dir, "wgrad_boxes", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], quick="--quick" in sys.argv[2:]))
