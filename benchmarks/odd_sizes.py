"""Odd and unaligned GEMM sizes against cuBLAS under CUDA graphs, with the config dispatch picks.

    python benchmarks/odd_sizes.py OUT_DIR [--shapes 1000x1000x1000,777x1234x555,384x197x64x197:nn,...]

A shape is MxNxK (matmul) or BxMxNxK (bmm), optionally ``:LAYOUT``: ``nt`` (default: B stored N x K,
as a linear layer's weight) or ``nn`` (B stored K x N). For each (fp16): the drop-in's dispatched
config (fresh database, shipped table), the time of ``alcop_triton.ops.matmul`` as users call it
(operand copies for unaligned rows included), the time of the kernel on the operands as given (no
copies: rows that 16-byte loads cannot read are read element by element, with the config dispatch
picks for that layout) and of torch.matmul, all with ``triton.testing.do_bench_cudagraph``
(median), and the relative error against float64; the drop-in and torch.matmul also as eager calls
(``suite.CudaTimers.eager``: CUDA events after an L2 flush, host cost included, so the copies' launches
count). Writes OUT_DIR/odd_sizes.{json,md} with device, versions and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEFAULT = ("1000x1000x1000,777x1234x555,1023x1023x1023,999x2047x1531,4095x4095x4095,333x777x1111,"
           "1531x1531x1531,2049x2049x2049,257x4093x1021,3001x511x767,257x263x271,333x4095x555:nn,1531x769x2053:nn,"
           "6143x383x761,384x197x64x197:nn,128x2048x128x2048:nn,999x301x4099,4099x257x263")


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

    import alcop_triton as at
    from alcop_triton.autotune.dispatch import Dispatcher
    from alcop_triton.kernels import matmul as km
    from alcop_triton.model.hardware import detect
    import timing
    from suite import CudaTimers
    spec = detect()
    timers = CudaTimers(reps=100)
    dt = getattr(torch, a.dtype)
    rows = []
    def bench(fn: Any) -> float:
        return timing.graph_ms(fn, rep_ms=50)

    def error(out: Any, ref: Any) -> float:
        return float(((out.double() - ref).norm() / ref.norm()).item())

    for s in a.shapes.split(","):
        dims_text, _, layout = s.partition(":")
        *batch, m, n, k = map(int, dims_text.split("x"))
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        x = (torch.randn(*batch, m, k, device="cuda", generator=g) * k ** -0.25).to(dt)
        w = (torch.randn(*batch, n, k, device="cuda", generator=g) * k ** -0.25).to(dt).mT
        if layout == "nn":
            w = w.contiguous()
        pa, pb = km.aligned_operands(x, w)
        dec = Dispatcher().decide(km.workload_of(pa, pb), spec)
        ref = x.double() @ w.double()
        err = error(at.matmul(x, w), ref)
        ms, ms_t = bench(lambda: at.matmul(x, w)), bench(lambda: torch.matmul(x, w))
        eager, eager_t = timers.eager({"alcop": lambda: at.matmul(x, w), "torch": lambda: torch.matmul(x, w)}).values()
        # The same product without the copies: the kernel on the operands as they are.
        raw = km.workload_of(x, w)
        raw_cfg = Dispatcher().decide(raw, spec).config
        kern = km.compiled(a.dtype, bool(batch), km.Epilogue(), raw_cfg)
        out = x.new_empty(*batch, m, n)
        err_raw = error(kern(x, w, out), ref)
        ms_raw = bench(lambda: kern(x, w, out))
        rows.append({"shape": [*batch, m, n, k], "layout": layout or "nt", "dtype": a.dtype,
                     "dispatched": km.workload_of(pa, pb).key(), "config": str(dec.config), "source": dec.source,
                     "alcop_ms": ms, "torch_ms": ms_t, "ratio_vs_torch": ms_t / ms, "rel_err": err,
                     "alcop_eager_ms": eager, "torch_eager_ms": eager_t, "eager_vs_torch": eager_t / eager,
                     "copied": pa is not x or pb is not w, "uncopied_config": str(raw_cfg), "uncopied_ms": ms_raw,
                     "uncopied_vs_torch": ms_t / ms_raw, "uncopied_rel_err": err_raw})
        print(f"{s}: {dec.config} ({dec.source}) alcop {ms:.4f} ms, uncopied {ms_raw:.4f} ms ({raw_cfg}), torch "
              f"{ms_t:.4f} ms -> {ms_t / ms:.2f}x / {ms_t / ms_raw:.2f}x, eager {eager_t / eager:.2f}x, "
              f"err {err:.1e} / {err_raw:.1e}", flush=True)
    meta = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
            "alcop": at.__version__, "date": datetime.date.today().isoformat(),
            "timer": f"{timing.GRAPH} (alcop_triton.ops.matmul, the kernel alone, torch.matmul)",
            "eager_timer": timers.names["eager"]}
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "odd_sizes.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Odd sizes: {meta['device']}", "", f"{meta['timer']}; triton {meta['triton']}, torch {meta['torch']}, "
             f"{meta['date']}", "", f"Eager columns: {meta['eager_timer']}.", "",
             "| shape | layout | dispatched as | config | source | alcop ms | torch ms | vs torch "
             "| operands copied | without copies: config | ms | vs torch | eager alcop ms | eager torch ms | eager vs torch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {'x'.join(map(str, r['shape']))} | {r['layout']} | {r['dispatched']} | {r['config']} | {r['source']} | "
              f"{r['alcop_ms']:.4f} | {r['torch_ms']:.4f} | {r['ratio_vs_torch']:.2f}x | {'yes' if r['copied'] else 'no'} | "
              f"{r['uncopied_config']} | {r['uncopied_ms']:.4f} | {r['uncopied_vs_torch']:.2f}x | {r['alcop_eager_ms']:.4f} | "
              f"{r['torch_eager_ms']:.4f} | {r['eager_vs_torch']:.2f}x |" for r in rows]
    (out_dir / "odd_sizes.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
