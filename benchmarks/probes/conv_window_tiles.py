"""The box kernel's tiles on the suite's convolutions, against cuDNN and alcop as dispatched.

    python benchmarks/probes/conv_window_tiles.py OUT_DIR [--quick]

Per layer (the ALCOP conv2d suite's stride-1 and stride-2 3x3 layers, ResNet-50's strided 1x1 ones, the
conv3d suite; batch 64, fp16, channels-last): cuDNN (torch), alcop as dispatched, and the box kernel
(``kernels/conv_window.py``) under each of ``window_configs``' tiles and their neighbours in ring depth,
each checked against cuDNN (normwise error <= 2e-3, two runs bit-identical) before it is timed with
``do_bench_cudagraph``. Writes ``OUT_DIR/conv_window_tiles.{json,md}``.
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
          ("conv2d", (64, 224, 224, 64, 64, 3, 3, 1, 1)), ("conv2d", (64, 56, 56, 256, 256, 3, 3, 1, 1)),
          ("conv2d", (64, 28, 28, 512, 512, 3, 3, 1, 1)), ("conv2d", (64, 56, 56, 128, 128, 3, 3, 2, 1)),
          ("conv2d", (64, 14, 14, 256, 256, 3, 3, 2, 1)), ("conv2d", (64, 28, 28, 512, 1024, 1, 1, 2, 0)),
          ("conv3d", (64, 14, 7, 7, 512, 512, 3, 3, 3, 1, 1)), ("conv3d", (64, 56, 28, 28, 128, 128, 3, 3, 3, 1, 1)))
"""(op, the suite's shape: N, [D,] H, W, C, C_out, window, stride, pad)."""


def main(out_dir: str, quick: bool = False) -> int:
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench_cudagraph

    from probe_io import checked_time, fastest, fmt_us, publish, run_meta, table_head

    import alcop_triton as at
    from alcop_triton.kernels import conv as kconv
    from alcop_triton.kernels.conv_window import window_configs
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
        configs = window_configs(workload)
        configs += [cfg.replace(smem_stages=s) for cfg in configs for s in (cfg.smem_stages - 1, cfg.smem_stages + 1)
                    if s >= 2 and cfg.replace(smem_stages=s) not in configs]
        for cfg in configs:
            out = kconv.empty_output(x, ref.shape)
            try:
                launch, _ = kconv.compiled("float16", p, cfg).bind(x, w, out.unflatten(1, (1, co)))
                launch()
                first = out.clone()
                launch()
                err = ((first.float() - want).norm() / want.norm()).item()
                same = bool(torch.equal(first, out))
                us: Any = (1e3 * do_bench_cudagraph(launch) if err <= 2e-3 and same
                           else f"wrong result (error {err:.2e}, runs agree: {same})")
            except Exception as exc:  # out of shared memory, a compile failure: the tile's result
                us = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
            row["tiles"].append({"config": str(cfg), "us": us})
            print(op, shape, cfg, us, flush=True)
        rows.append(row)
        del x, w, ref, want
        torch.cuda.empty_cache()

    lines = table_head("The box kernel's tiles on the suite's convolutions", meta,
                       "µs, fp16, channels-last, batch 64.",
                       ["layer", "cuDNN", "alcop", "best box config", "box", "cuDNN / alcop", "cuDNN / box"])
    for r in rows:
        best = fastest(r["tiles"])

        def ratio(v: Any, cudnn: Any = r["cudnn_us"]) -> str:
            return f"{cudnn / v:.3f}x" if isinstance(v, float) and isinstance(cudnn, float) else "-"
        lines.append(f"| {r['op']} {'x'.join(map(str, r['layer']))} | {fmt_us(r['cudnn_us'])} | "
                     f"{fmt_us(r['alcop_us'])} | {best['config'] if best else '-'} | "
                     f"{fmt_us(best['us']) if best else 'err'} | {ratio(r['alcop_us'])} | "
                     f"{ratio(best['us']) if best else '-'} |")
    failed = [(r["layer"], t["config"], t["us"]) for r in rows for t in r["tiles"] if not isinstance(t["us"], float)]
    lines += ["", f"Configs that failed: {len(failed)}"] + [f"- {la} {cf}: {e}" for la, cf, e in failed]
    return publish(out_dir, "conv_window_tiles", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], quick="--quick" in sys.argv[2:]))
