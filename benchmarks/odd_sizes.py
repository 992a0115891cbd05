"""Odd and unaligned GEMM sizes against cuBLAS under CUDA graphs, with the config dispatch picks.

    python benchmarks/odd_sizes.py OUT_DIR [--shapes 1000x1000x1000,777x1234x555,...]

For each shape (fp16, B stored N x K): the drop-in's dispatched config (fresh database, shipped
table), the time of ``alcop_triton.ops.matmul`` as users call it (operand copies for unaligned rows
included) and of torch.matmul, both with ``triton.testing.do_bench_cudagraph`` (median), and the
relative error against float64. Writes OUT_DIR/odd_sizes.{json,md} with device, versions and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT = ("1000x1000x1000,777x1234x555,1023x1023x1023,999x2047x1531,4095x4095x4095,333x777x1111,"
           "1531x1531x1531,2049x2049x2049,257x4093x1021,3001x511x767")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--shapes", default=DEFAULT)
    ap.add_argument("--dtype", default="float16")
    a = ap.parse_args(argv)
    import os
    os.environ.setdefault("ALCOP_DB", str(Path(tempfile.mkdtemp()) / "fresh.sqlite"))
    import torch
    import triton
    import triton.testing

    import alcop_triton as at
    from alcop_triton.autotune.dispatch import Dispatcher
    from alcop_triton.kernels import matmul as km
    from alcop_triton.model.hardware import detect
    spec = detect()
    dt = getattr(torch, a.dtype)
    rows = []
    for s in a.shapes.split(","):
        m, n, k = map(int, s.split("x"))
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        x = (torch.randn(m, k, device="cuda", generator=g) * k ** -0.25).to(dt)
        w = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.25).to(dt).t()
        pa, pb = km.aligned_operands(x, w)
        dec = Dispatcher().decide(km.workload_of(pa, pb), spec)
        out = at.matmul(x, w)
        ref = x.double() @ w.double()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        ms = triton.testing.do_bench_cudagraph(lambda: at.matmul(x, w), rep=50, return_mode="median")
        ms_t = triton.testing.do_bench_cudagraph(lambda: torch.matmul(x, w), rep=50, return_mode="median")
        rows.append({"shape": [m, n, k], "dtype": a.dtype, "dispatched": km.workload_of(pa, pb).key(),
                     "config": str(dec.config), "source": dec.source, "alcop_ms": ms, "torch_ms": ms_t,
                     "ratio_vs_torch": ms_t / ms, "rel_err": err})
        print(f"{s}: {dec.config} ({dec.source}) alcop {ms:.4f} ms torch {ms_t:.4f} ms -> {ms_t / ms:.2f}x, "
              f"err {err:.1e}", flush=True)
    meta = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
            "alcop": at.__version__, "date": datetime.date.today().isoformat(),
            "timer": "triton.testing.do_bench_cudagraph median (alcop_triton.ops.matmul, torch.matmul)"}
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "odd_sizes.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Odd sizes: {meta['device']}", "", f"{meta['timer']}; triton {meta['triton']}, torch {meta['torch']}, "
             f"{meta['date']}", "", "| shape | dispatched as | config | source | alcop ms | torch ms | vs torch |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {'x'.join(map(str, r['shape']))} | {r['dispatched']} | {r['config']} | {r['source']} | "
              f"{r['alcop_ms']:.4f} | {r['torch_ms']:.4f} | {r['ratio_vs_torch']:.2f}x |" for r in rows]
    (out_dir / "odd_sizes.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
