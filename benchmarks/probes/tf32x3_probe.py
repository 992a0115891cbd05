"""float32 products without TF32: Triton's IEEE dot against its ``tf32x3`` dot, speed and error.

    python benchmarks/probes/tf32x3_probe.py OUT_DIR

``input_precision="tf32x3"`` splits each float32 operand into a TF32 part and a TF32 remainder and adds
three TF32 tensor-core products (the remainders' product dropped): near float32 accuracy at tensor-core
speed. alcop runs it under ``ALCOP_FP32=tf32x3`` (``settings.fp32_precision``); this probe runs each
precision in a child process of its own and reports, per shape: torch (cuBLAS, TF32 off), alcop with
"ieee" and with "tf32x3" (``probe_io.GRAPH_TIMER``), each result's error against a float64 product
(normwise relative / largest element error over the largest reference element), and, with one infinite
element in A, how many output elements differ from torch's in being inf or NaN.
Writes ``OUT_DIR/tf32x3_probe.{json,md}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = ((1024, 768, 768, "nt"), (2048, 2048, 2048, "nn"), (512, 3072, 1024, "nt"), (4096, 1024, 4096, "nt"),
          (64, 4096, 4096, "nt"), (1000, 1000, 1000, "nn"))


def child(precision: str) -> list[dict[str, Any]]:
    """Times and errors of alcop's float32 products with ``precision`` (and torch's), in this process."""
    import torch

    import alcop_triton as at
    from alcop_triton import settings
    from probe_io import checked_time

    rows = []
    with settings.tf32(False):
        for m, n, k, layout in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
            a = torch.randn(m, k, device="cuda", generator=g)
            b = (torch.randn(n, k, device="cuda", generator=g).t() if layout == "nt"
                 else torch.randn(k, n, device="cuda", generator=g))
            ref = a.double() @ b.double()
            row: dict[str, Any] = {"shape": f"{m}x{n}x{k} {layout}", "precision": precision}
            for impl, fn in (("torch", lambda: torch.matmul(a, b)), ("alcop", lambda: at.matmul(a, b))):
                if impl == "torch" and precision != "ieee":
                    continue
                out = fn()
                err = out.double() - ref
                row[f"{impl}_rel"] = (err.norm() / ref.norm()).item()
                row[f"{impl}_max"] = (err.abs().max() / ref.abs().max()).item()
                row[f"{impl}_us"] = checked_time(fn, None)
            a[0, 0] = float("inf")  # IEEE: row 0 of the product is +-inf (NaN where a B element is 0)
            row["alcop_inf_mismatch"] = int(((at.matmul(a, b).isinf() != torch.matmul(a, b).isinf())
                                             | (at.matmul(a, b).isnan() != torch.matmul(a, b).isnan())).sum())
            rows.append(row)
    return rows


def main(out_dir: str) -> int:
    from probe_io import GRAPH_TIMER, fmt_us, run_meta, write

    runs: dict[str, list[dict[str, Any]]] = {}
    for precision in ("ieee", "tf32x3"):
        env = {**os.environ, "ALCOP_FP32": precision}
        got = subprocess.run([sys.executable, __file__, "--child", precision], check=True, capture_output=True,
                             text=True, env=env).stdout
        runs[precision] = json.loads(got.strip().splitlines()[-1])
    rows = [ieee | {k.replace("alcop", "x3"): v for k, v in x3.items() if k.startswith("alcop")}
            for ieee, x3 in zip(runs["ieee"], runs["tf32x3"])]
    meta = run_meta(GRAPH_TIMER)
    lines = [f"# float32 without TF32: IEEE dot against tf32x3 ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {GRAPH_TIMER}. Errors against "
             "a float64 product: normwise relative / largest element error over the largest reference element.", "",
             "| shape | torch µs | alcop IEEE µs | alcop tf32x3 µs | torch err | IEEE err | tf32x3 err | inf/NaN "
             "elements unlike torch's, IEEE / tf32x3 |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['shape']} | {fmt_us(r['torch_us'])} | {fmt_us(r['alcop_us'])} | {fmt_us(r['x3_us'])} | "
              f"{r['torch_rel']:.1e} / {r['torch_max']:.1e} | {r['alcop_rel']:.1e} / {r['alcop_max']:.1e} | "
              f"{r['x3_rel']:.1e} / {r['x3_max']:.1e} | {r['alcop_inf_mismatch']} / {r['x3_inf_mismatch']} |"
              for r in rows]
    write(out_dir, "tf32x3_probe", meta, rows, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        raise SystemExit(0)
    raise SystemExit(main(sys.argv[1]))
