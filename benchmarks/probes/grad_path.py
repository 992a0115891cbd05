"""Host time of an eager product with ``requires_grad``, layer by layer, under two timers.

    python benchmarks/probes/grad_path.py OUT_DIR

A 64x64 fp16 matmul whose first operand requires grad. Rows: torch.matmul; the drop-in (a hit on its
stored ``GradEntry``); that entry's ``run``; the op's replay Function applied with torch.mm as its inner
call (autograd's Python Function without alcop's launch); the inner stored ``Entry`` alone (no autograd).
Timers: ``loop`` = ``host_breakdown.per_call_us`` (min over loops of 2,000 calls); ``alone`` =
``overhead.host_times_us`` (each call timed by itself, median, the GPU synchronised every 64 calls), the
timer of ``benchmarks/overhead.py``. Writes ``OUT_DIR/grad_path.{json,md}``.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(out_dir: str) -> int:
    import torch

    import alcop_triton as at
    from alcop_triton import fastpath as fp
    from host_breakdown import per_call_us
    from overhead import host_times_us
    from probe_io import publish, run_meta, table_head

    a = torch.randn(64, 64, dtype=torch.float16, device="cuda").requires_grad_()
    b = torch.randn(64, 64, dtype=torch.float16, device="cuda")
    at.matmul(a, b)
    grad_entry = fp._entries[fp.signature("matmul", (a, b), ())]
    assert isinstance(grad_entry, fp.GradEntry) and grad_entry.inner is not None, grad_entry
    inner, replay, mm = grad_entry.inner, grad_entry.replay, torch.mm
    a_plain = a.detach()

    def torch_inner(ts: tuple[Any, ...]) -> Any:
        return mm(*ts)
    rows: dict[str, Callable[[], Any]] = {
        "torch.matmul": lambda: torch.matmul(a, b),
        "alcop_triton.matmul": lambda: at.matmul(a, b),
        "GradEntry.run": lambda: grad_entry.run((a, b)),
        "replay Function, torch.mm inside": lambda: replay(a, b, torch_inner),
        "inner Entry alone (no autograd)": lambda: inner.run((a_plain, b)),
    }
    sync = torch.cuda.synchronize
    result = [{"row": k, "loop_us": per_call_us(f, sync),
               "alone_us": statistics.median(host_times_us(f, 3000, 200, sync))} for k, f in rows.items()]
    meta = run_meta("loop: min over 7 loops of 2,000 calls (perf_counter_ns), GPU synchronised between loops; "
                    "alone: overhead.py's (each call timed by itself, median of 3,000, GPU synchronised every 64)")
    lines = table_head("Host time of a product with requires_grad", meta, "64x64 fp16, A requires grad.",
                       ["row", "loop µs", "alone µs"])
    lines += [f"| {r['row']} | {r['loop_us']:.2f} | {r['alone_us']:.2f} |" for r in result]
    return publish(out_dir, "grad_path", meta, result, lines)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
