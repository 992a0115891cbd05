"""The conv weight gradient's GEMM over im2col rows in either operand layout, against cuBLAS.

    python benchmarks/probes/im2col_layout.py OUT_DIR

``kernels.conv_grad.weight_grad_by_gemm`` multiplies dY^T (a transposed view: layout "t") by the im2col
rows (row-major: "n"), a "tn" product, for which the shipped table holds no records (its GEMMs are the
forward's "nt"). For the suite's layers whose reduction is short enough for that route (batch 64, 7x7
outputs), this times the product as the drop-in runs it ("tn", dispatched), the same operands copied to
"nt" (dY^T contiguous, im2col rows transposed) with and without the copies, and cuBLAS (``torch.mm``)
on the "tn" operands. Every result is checked against cuBLAS's first. Timer:
``triton.testing.do_bench_cudagraph`` (one call, one set of inputs). Writes ``OUT_DIR/im2col_layout.{json,md}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = ((512, 4608, 3136), (512, 2304, 3136), (512, 4608, 1024))
"""(CO, K * C, N * O) of the weight gradients of the suite's 7x7x512 (stride 1), 14x14x256 -> 512 (stride 2)
and 7x7x512 (stride 2) layers at batch 64."""


def main(out_dir: str) -> int:
    from probe_io import checked_time, fmt_us, publish, run_meta, table_head
    import torch

    import alcop_triton as at

    rows = []
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        dy = torch.randn(k, m, device="cuda", dtype=torch.float16)        # (N * O, CO): dY channels last
        cols = torch.randn(k, n, device="cuda", dtype=torch.float16)      # im2col rows
        want = torch.mm(dy.t(), cols).float()
        dyt, colst = dy.t().contiguous(), cols.t().contiguous()
        row = {"shape": f"{m}x{n}x{k}",
               "cublas_tn_us": checked_time(lambda: torch.mm(dy.t(), cols), want),
               "alcop_tn_us": checked_time(lambda: at.mm(dy.t(), cols), want),
               "alcop_nt_us": checked_time(lambda: at.mm(dyt, colst.t()), want),
               "alcop_nt_with_copies_us": checked_time(lambda: at.mm(dy.t().contiguous(), cols.t().contiguous().t()),
                                                       want)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = run_meta()
    lines = table_head("Weight gradient's im2col GEMM by operand layout", meta, "µs, fp16, (M, N, K) = (CO, K * C, N * O).",
                       ["shape", "cuBLAS tn", "alcop tn (as dispatched)", "alcop nt", "alcop nt with the copies"])
    for r in rows:
        lines.append(f"| {r['shape']} | {fmt_us(r['cublas_tn_us'])} | {fmt_us(r['alcop_tn_us'])} | "
                     f"{fmt_us(r['alcop_nt_us'])} | {fmt_us(r['alcop_nt_with_copies_us'])} |")
    return publish(out_dir, "im2col_layout", meta, rows, lines)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
