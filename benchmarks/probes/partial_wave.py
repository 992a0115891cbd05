"""Split-K of a partial last wave: GEMMs whose tiles make two full waves and a few more, against cuBLAS.

    python benchmarks/probes/partial_wave.py OUT_DIR

For each shape (fp16, B stored N x K, as ``torch.matmul`` on a transposed weight), each tile config is run
unsplit and with split-K 2, 4 and 8: where the grid has at least two full waves on the GPU's SMs the split
configs run the full waves' tiles whole and split only the last wave's (``records.split_tail``). Every
result is checked against torch first (normwise relative error <= 1e-2), then timed with
``triton.testing.do_bench_cudagraph`` (one call on one set of inputs); cuBLAS is ``torch.matmul``, same
timer. Writes OUT_DIR/partial_wave.json and OUT_DIR/partial_wave.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_io  # noqa: E402

SHAPES = [(1970, 2304, 768), (896, 2560, 2560), (2304, 1792, 2816), (1536, 4352, 1024)]
"""The two unseen tuning shapes that stay near 0.79x (288 and 280 tiles of their best configs on 132 SMs),
a third tuning shape, and one more with a small last wave (12 x 34 = 408 tiles of 128 x 128: three full waves
and 12 tiles; beyond the space's two-wave limit, shown for what the limit leaves out)."""

TILES = [dict(block_m=128, block_n=128, block_k=64, num_warps=4, smem_stages=3, async_copy="tma"),
         dict(block_m=128, block_n=128, block_k=64, num_warps=8, smem_stages=4, async_copy="tma"),
         dict(block_m=64, block_n=128, block_k=64, num_warps=4, smem_stages=3, async_copy="tma"),
         dict(block_m=64, block_n=128, block_k=64, num_warps=4, smem_stages=4, async_copy="pointer")]
SPLITS = (1, 2, 4, 8)


def main() -> None:
    import torch

    import alcop_triton as at
    from alcop_triton import KernelConfig, Schedule
    from alcop_triton.kernels import matmul as km
    from alcop_triton.records import split_tail

    out_dir = sys.argv[1]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    inputs, out = km.matmul_te("float16", False)
    rows: list[dict[str, Any]] = []
    lines = []
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", generator=g).half()
        b = torch.randn(n, k, device="cuda", generator=g).half().t()
        want = (a.float() @ b.float())
        cublas = probe_io.checked_time(lambda: torch.matmul(a, b), want)
        for tile in TILES:
            tiles = -(-m // tile["block_m"]) * -(-n // tile["block_n"])
            for split in SPLITS:
                cfg = KernelConfig(**tile, split_k=split)  # type: ignore[arg-type]
                kern = at.build(Schedule.from_config(out, cfg), inputs + [out])
                us = probe_io.checked_time(lambda: kern(a, b), want)
                rows.append({"shape": [m, n, k], "config": str(cfg), "tiles": tiles,
                             "split_tiles": split_tail(tiles, 1, sms) if split > 1 else 0, "us": us,
                             "cublas_us": cublas})
    meta = probe_io.run_meta() | {"sms": sms}
    lines = [f"# Split-K of a partial last wave ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}, {sms} SMs. Timer: {meta['timer']} "
             "(alcop and cuBLAS alike). Script: `benchmarks/probes/partial_wave.py`.", "",
             "| shape (M x N x K) | config | tiles | split tiles | µs | cuBLAS µs | cuBLAS / alcop |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        us, cb = r["us"], r["cublas_us"]
        ratio = f"{cb / us:.3f}x" if isinstance(us, float) and isinstance(cb, float) else "-"
        shown = f"{us:.1f}" if isinstance(us, float) else us
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['config']} | {r['tiles']} | {r['split_tiles']} | {shown} | "
                     f"{cb if isinstance(cb, str) else f'{cb:.1f}'} | {ratio} |")
    probe_io.write(out_dir, "partial_wave", meta, rows, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
