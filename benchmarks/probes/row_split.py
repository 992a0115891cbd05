"""A GEMM whose tiles leave a short last wave, run as two launches: whole waves, then the last rows split-K.

    python benchmarks/probes/row_split.py OUT_DIR

With 1970x2304x768 in 128x128 tiles, 288 tiles make three waves on 132 SMs, the last one 18% full; the
tuned kernel runs at about 0.8x cuBLAS (``results/pdl_h100/tune_speed``), and stream-K in Triton did not
help (``results/stream_k_h100``). Here the product is cut by rows: the first ``M1`` rows (whole row
tiles) run as one launch of alcop's kernel, the remaining rows as a second launch of alcop's split-K
kernel, whose few tiles are shared out over the SMs by the reduction (both launched as the library
launches them, with programmatic dependent launch, so the second's programs start during the first's
tail). Each split is checked against torch. Per shape: cuBLAS, alcop as dispatched, and the best split
per main config, with its rows, remainder config and split factor. Timer: the suite's graph timer.
Writes ``OUT_DIR/row_split.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import GRAPH_TIMER, publish, run_meta, table_head  # noqa: E402

SHAPES = ((1970, 2304, 768), (896, 2560, 2560), (1024, 2304, 768), (3136, 512, 2048))
"""(M, N, K), B stored N x K: the two tuned shapes that stay near 0.8x cuBLAS, two suite shapes below 0.9x."""
MAIN = ((64, 128, 64, 4, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3))
REST = ((128, 128, 64, 8, 4), (64, 128, 64, 4, 4))
SPLITS = (1, 2, 3, 4, 6, 8)
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), TMA copies; the remainder's split-K factors."""


def main(out_dir: str) -> int:
    import torch
    from triton.testing import do_bench_cudagraph

    import alcop_triton as at
    from alcop_triton.choose_config import choose_config
    from kernels import matmul as mm

    dev = torch.device("cuda")

    def cfg(c: tuple[int, ...], split: int = 1) -> at.KernelConfig:
        return at.KernelConfig(c[0], c[1], c[2], group_m=8, num_warps=c[3], smem_stages=c[4], async_copy="tma",
                               split_k=split)

    def bound(config: at.KernelConfig, a: Any, b: Any, c: Any) -> Any:
        launch, _ = mm.compiled("float16", 0, mm.Epilogue(), config).bind(a, b, c)
        return launch

    rows: list[dict[str, Any]] = []
    for m, n, k in SHAPES:
        g = torch.Generator(device="cpu").manual_seed(0)
        a = (torch.randn(m, k, generator=g) / k ** 0.25).half().to(dev)
        bt = (torch.randn(n, k, generator=g) / k ** 0.25).half().to(dev)
        b = bt.T
        want = a.float() @ b.float()
        c = torch.empty(m, n, device=dev, dtype=torch.float16)
        row: dict[str, Any] = {"shape": [m, n, k], "torch_us": 1e3 * do_bench_cudagraph(lambda: a @ b)}
        dispatched = choose_config(dev, lambda: at.Workload("matmul", (m, n, k), "float16", "nt"))
        one = bound(dispatched, a, b, c)
        row["alcop"], row["alcop_us"] = str(dispatched), 1e3 * do_bench_cudagraph(one)
        best: dict[str, Any] = {}
        for mc in MAIN:
            row_tiles = -(-m // mc[0])
            for r in (1, 2, 3):
                m1 = (row_tiles - r) * mc[0]
                if m1 <= 0:
                    continue
                first = bound(cfg(mc), a[:m1], b, c[:m1])
                for rc in REST:
                    for s in SPLITS:
                        key = f"main {mc} rows {m1} + rest {rc} split {s}"
                        try:
                            second = bound(cfg(rc, s), a[m1:], b, c[m1:])

                            def both(first: Any = first, second: Any = second) -> None:
                                first()
                                second()
                            c.fill_(float("nan"))
                            both()
                            err = ((c.float() - want).norm() / want.norm()).item()
                            if not err <= 1e-2:
                                row[key] = f"wrong ({err:.1e})"
                                continue
                            row[key] = us = 1e3 * do_bench_cudagraph(both)
                            if us < best.get(str(mc), (float("inf"),))[0]:
                                best[str(mc)] = (us, key)
                        except Exception as exc:  # out of resources, a config the kernel refuses: the result
                            row[key] = f"{type(exc).__name__}: {str(exc)[:80]}"
        row["best"] = best
        rows.append(row)
        print({kk: v for kk, v in row.items() if kk in ("shape", "torch_us", "alcop_us", "best")}, flush=True)
    meta = run_meta(GRAPH_TIMER)
    lines = table_head("Whole waves, then the last rows split-K: two launches", meta,
                       "fp16, B stored N x K; µs; the best split per main config (rows of the first launch, "
                       "the remainder's config and split factor).",
                       ["shape", "cuBLAS", "alcop (dispatched)", "cuBLAS / alcop", "main config", "best split µs",
                        "cuBLAS / split", "split"])
    for r in rows:
        t = r["torch_us"]
        for mc, (us, key) in r["best"].items():
            lines.append(f"| {'x'.join(map(str, r['shape']))} | {t:.1f} | {r['alcop_us']:.1f} | {t / r['alcop_us']:.3f}x | "
                         f"{mc} | {us:.1f} | {t / us:.3f}x | {key} |")
    return publish(out_dir, "row_split", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
