"""The box kernel's tiles and box shapes on the suite's convolutions, against cuDNN and alcop as dispatched.

    python benchmarks/probes/conv_window_tiles.py OUT_DIR [--quick]

Per layer (the ALCOP conv2d suite's stride-1 and stride-2 3x3 layers, ResNet-50's strided 1x1 ones, the
conv3d suite; batch 64, fp16, channels-last): cuDNN (torch), alcop as dispatched, and the box kernel
(``kernels/conv_window.py``) under each of ``window_configs``' tiles with each of three box shapes: the
first two of ``boxes`` and the one-plane box (one image unless the box spans whole planes, rows of at least
8, the pick before boxes spanned images and depth freely), each checked against cuDNN (normwise error
<= 2e-3, two runs bit-identical) before it is timed with ``do_bench_cudagraph``. Writes
``OUT_DIR/conv_window_tiles.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = (("conv2d", (64, 56, 56, 64, 64, 3, 3, 1, 1)), ("conv2d", (64, 28, 28, 128, 128, 3, 3, 1, 1)),
          ("conv2d", (64, 14, 14, 256, 256, 3, 3, 1, 1)), ("conv2d", (64, 7, 7, 512, 512, 3, 3, 1, 1)),
          ("conv3d", (64, 14, 7, 7, 512, 512, 3, 3, 3, 1, 1)), ("conv3d", (64, 56, 28, 28, 128, 128, 3, 3, 3, 1, 1)),
          ("conv3d", (64, 28, 14, 14, 256, 256, 3, 3, 3, 1, 1)), ("conv2d", (64, 56, 56, 128, 256, 3, 3, 1, 1)),
          ("conv2d", (64, 56, 56, 256, 256, 3, 3, 1, 1)), ("conv2d", (64, 28, 28, 512, 512, 3, 3, 1, 1)),
          ("conv2d", (64, 14, 14, 512, 512, 3, 3, 1, 1)), ("conv2d", (64, 56, 56, 128, 128, 3, 3, 2, 1)),
          ("conv2d", (64, 14, 14, 256, 256, 3, 3, 2, 1)), ("conv2d", (64, 28, 28, 512, 1024, 1, 1, 2, 0)),
          ("conv3d", (64, 112, 56, 56, 64, 64, 3, 3, 3, 1, 1)))
"""(op, the suite's shape: N, [D,] H, W, C, C_out, window, stride, pad)."""


def shapes(found: tuple[tuple[int, int, int, int], ...], h: int) -> list[tuple[int, int, int, int]]:
    """The boxes to time: ``boxes``' first two and the first one-plane box (``one_plane``) not among them."""
    plane = next((b for b in found if one_plane(b, h)), None)
    return [*found[:2]] + ([plane] if plane and plane not in found[:2] else [])


def one_plane(box: tuple[int, int, int, int], h: int) -> bool:
    """The boxes ``boxes`` chose from before: one depth, rows of at least 8, several images only where the
    box spans their whole height."""
    bi, bd, bh, bw = box
    return bd == 1 and bw >= 8 and (bi == 1 or bh >= h)


def main(out_dir: str, quick: bool = False) -> int:
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench_cudagraph

    from probe_io import checked_time, run_meta

    import alcop_triton as at
    from alcop_triton.kernels import conv as kconv
    from alcop_triton.kernels.conv_window import WindowConv, boxes, window_configs
    torch.manual_seed(0)
    meta = run_meta()
    rows: list[dict[str, Any]] = []
    for op, shape in LAYERS[:3] if quick else LAYERS:
        nd = 3 if op == "conv3d" else 2
        n, *sp, c, co = shape[:nd + 3]
        k, stride, pad = shape[nd + 3], shape[-2], shape[-1]
        fmt = torch.channels_last_3d if nd == 3 else torch.channels_last
        x = torch.randn(n, c, *sp, device="cuda", dtype=torch.float16).contiguous(memory_format=fmt)
        w = (torch.randn(co, c, *(k,) * nd, device="cuda", dtype=torch.float16) / (c * k ** nd) ** 0.5
             ).contiguous(memory_format=fmt)
        f, drop_in = (F.conv3d, at.conv3d) if nd == 3 else (F.conv2d, at.conv2d)
        ref = f(x, w, stride=stride, padding=pad)
        want = ref.float()
        row: dict[str, Any] = {"op": op, "layer": list(shape),
                               "cudnn_us": checked_time(lambda: f(x, w, stride=stride, padding=pad), None),
                               "alcop_us": checked_time(lambda: drop_in(x, w, stride=stride, padding=pad), want),
                               "tiles": []}
        p = kconv.ConvParams(nd, (stride,) * nd, (pad,) * nd, (pad,) * nd, (1,) * nd, 1, True)
        workload = at.Workload(op, (*shape, 1, 1), "float16", "nhwc")
        od, oh, ow = ref.shape[2:] if nd == 3 else (1, *ref.shape[2:])
        for cfg, box in ((cfg, box) for cfg in window_configs(workload) for box in shapes(boxes(n, od, oh, ow,
                                                                                              cfg.block_m), oh)):
            out = kconv.empty_output(x, ref.shape)
            try:
                launch, _ = WindowConv("float16", p, cfg, box).bind(x, w, out.unflatten(1, (1, co)))
                launch()
                first = out.clone()
                launch()
                err = ((first.float() - want).norm() / want.norm()).item()
                same = bool(torch.equal(first, out))
                us: Any = (1e3 * do_bench_cudagraph(launch) if err <= 2e-3 and same
                           else f"wrong result (error {err:.2e}, runs agree: {same})")
            except Exception as exc:  # out of shared memory, a compile failure: the tile's result
                us = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
            row["tiles"].append({"config": str(cfg), "box": list(box), "us": us, "one_plane": one_plane(box, oh),
                                 "pick": box == boxes(n, od, oh, ow, cfg.block_m)[0]})
            print(op, shape, cfg, box, us, flush=True)
        rows.append(row)
        del x, w, ref, want
        torch.cuda.empty_cache()

        report(out_dir, meta, rows)  # after every layer: a run cut short keeps what it measured
    return 0


def report(out_dir: str, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """``OUT_DIR/conv_window_tiles.{json,md}``: per layer the best tile and the best one-plane one; per
    layer and config ``boxes``' pick against the config's best one-plane box."""
    from probe_io import fastest, fmt_us, table_head, write
    lines = table_head("The box kernel's tiles and box shapes on the suite's convolutions", meta,
                       "µs, fp16, channels-last, batch 64. Boxes are (BI, BD, BH, BW).",
                       ["layer", "cuDNN", "alcop", "best config", "its box", "best", "best one-plane box",
                        "cuDNN / alcop", "cuDNN / best", "cuDNN / one-plane"])
    for r in rows:
        best = fastest(r["tiles"])
        plane = fastest([t for t in r["tiles"] if t["one_plane"]])

        def ratio(v: Any, cudnn: Any = r["cudnn_us"]) -> str:
            return f"{cudnn / v:.3f}x" if isinstance(v, float) and isinstance(cudnn, float) else "-"
        lines.append(f"| {r['op']} {'x'.join(map(str, r['layer']))} | {fmt_us(r['cudnn_us'])} | "
                     f"{fmt_us(r['alcop_us'])} | {best['config'] if best else '-'} | {best['box'] if best else '-'} | "
                     f"{fmt_us(best['us']) if best else 'err'} | {fmt_us(plane['us']) if plane else 'err'} | "
                     f"{ratio(r['alcop_us'])} | {ratio(best['us']) if best else '-'} | "
                     f"{ratio(plane['us']) if plane else '-'} |")
    lines += ["", "``boxes``' pick against the one-plane box, config by config:", "",
              "| layer | config | pick | µs | one-plane box | µs | one-plane / pick |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        for t in (t for t in r["tiles"] if t["pick"]):
            one = fastest([u for u in r["tiles"] if u["config"] == t["config"] and u["one_plane"]])
            gain = (f"{one['us'] / t['us']:.3f}x" if one and isinstance(t["us"], float) and one is not t else "-")
            lines.append(f"| {r['op']} {'x'.join(map(str, r['layer']))} | {t['config']} | {t['box']} | "
                         f"{fmt_us(t['us'])} | {one['box'] if one else '-'} | {fmt_us(one['us']) if one else '-'} | "
                         f"{gain} |")
    failed = [(r["layer"], t["config"], t["box"], t["us"]) for r in rows for t in r["tiles"]
              if not isinstance(t["us"], float)]
    lines += ["", f"Tiles that failed: {len(failed)}"] + [f"- {la} {cf} {bx}: {e}" for la, cf, bx, e in failed]
    write(out_dir, "conv_window_tiles", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], quick="--quick" in sys.argv[2:]))
