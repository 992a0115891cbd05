"""float32 GEMMs with and without TF32: alcop as dispatched, alcop's best over a small grid, and torch.

    python benchmarks/probes/fp32_probe.py OUT_DIR [--dispatched-only]

torch's default for float32 products is IEEE fp32 (TF32 off), so a float32 drop-in call runs a kernel
whose ``tl.dot`` has ``input_precision="ieee"``: fused multiply-adds, no tensor cores. For each shape and
precision: torch (cuBLAS), alcop as dispatched (fresh database: the analytical model's top-1), and the
best of a grid of configs run through ``use_config`` (every result checked against torch). Timer:
``probe_io.GRAPH_TIMER``. ``--dispatched-only``: torch and alcop as dispatched (and, for "nn", on the
copy), no grid. Writes ``OUT_DIR/fp32_probe.{json,md}``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = ((1024, 768, 768, "nt"), (2048, 2048, 2048, "nn"), (2048, 2048, 2048, "nt"), (512, 3072, 1024, "nt"),
          (512, 3072, 1024, "nn"), (4096, 1024, 4096, "nt"), (64, 4096, 4096, "nt"))
TILES = ((32, 32), (32, 64), (64, 32), (64, 64), (64, 128), (128, 64), (128, 128))
BLOCK_K = (16, 32)
WARPS = (4, 8)
STAGES = (2, 3)


def table(meta: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The report's lines for ``rows`` ("-": not measured in this run)."""
    from probe_io import GRAPH_TIMER, fmt_us

    def us(v: Any) -> str:
        return "-" if v in (None, "-") else fmt_us(v)
    lines = [f"# float32 GEMMs, IEEE and TF32 ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {GRAPH_TIMER}. "
             "Grid: tiles " + ", ".join(f"{x}x{y}" for x, y in TILES) + f", BLOCK_K {BLOCK_K}, warps {WARPS}, "
             f"stages {STAGES} (BLOCK_K 32 with TF32).", "",
             "| shape | TF32 | torch µs | alcop dispatched µs | alcop grid best µs | grid best config | B copied to N x K µs |",
             "|---|---|---|---|---|---|---|"]
    return lines + [f"| {r['shape']} | {r['tf32']} | {us(r['torch_us'])} | {us(r['dispatched_us'])} | "
                    f"{us(r['grid_best_us'])} | {r['grid_best']} | {us(r.get('packed_us'))} |" for r in rows]


def main(out_dir: str, grid: bool = True) -> int:
    import torch

    import alcop_triton as at
    from alcop_triton import settings
    from alcop_triton.records import KernelConfig
    from probe_io import GRAPH_TIMER, checked_time, run_meta, write

    rows: list[dict[str, Any]] = []
    for (m, n, k, layout), tf32 in itertools.product(SHAPES, (False, True)):
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(n, k, device="cuda").t() if layout == "nt" else torch.randn(k, n, device="cuda")
        with settings.tf32(tf32):
            want = torch.matmul(a, b)
            row: dict[str, Any] = {"shape": f"{m}x{n}x{k} {layout}", "tf32": tf32,
                                   "torch_us": checked_time(lambda: torch.matmul(a, b), None),
                                   "dispatched_us": checked_time(lambda: at.matmul(a, b), want)}
            best: tuple[float, str] | None = None
            if layout == "nn":  # B copied to N x K first (the copy timed with the product)
                row["packed_us"] = checked_time(lambda: at.matmul(a, b.t().contiguous().t()), want)
            for (bm, bn), bk, w, s in itertools.product(TILES, BLOCK_K, WARPS, STAGES) if grid else ():
                if tf32 and bk < 32:  # TF32 tiles: at least 32 fp32 elements (one 128-byte row) per chunk
                    continue
                cfg = KernelConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, smem_stages=s)
                with at.use_config(cfg):
                    t = checked_time(lambda: at.matmul(a, b), want)
                if isinstance(t, float) and (best is None or t < best[0]):
                    best = (t, f"{bm}x{bn}x{bk} w{w} s{s}")
            row["grid_best_us"], row["grid_best"] = (best[0], best[1]) if best else ("-", "-")
        rows.append(row)
        print(row, flush=True)
    meta = run_meta(GRAPH_TIMER)
    lines = table(meta, rows)
    write(out_dir, "fp32_probe", meta, rows, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], grid="--dispatched-only" not in sys.argv[2:]))
