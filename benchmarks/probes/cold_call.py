"""Where an eager call's time goes when it finds the CPU's caches cold: each layer of the call path timed
the way the suite's eager timer times a call.

    python benchmarks/probes/cold_call.py OUT_DIR

Every call is preceded by an L2 flush (a write of twice the L2) and a synchronisation, as in
``suite.CudaTimers.eager``; then one call is timed twice: ``host`` = ``time.perf_counter_ns`` around the
call, ``events`` = CUDA events recorded before and after it (the eager timer: host cost included). The
rows take turns call by call (``ROUNDS`` rounds), median of each. Rows: a suite GEMM (1024x768x768,
B stored N x K, fp16) through torch, the drop-in, its stored entry, its prebound launch; on float32
operands; with ``requires_grad``; under ``patched()``; and a small channels-last conv2d through cuDNN, the drop-in,
patch mode sending it to torch (a stored to-torch site) and a plain Python wrapper around cuDNN's call
(what any wrapper costs). Writes ``OUT_DIR/cold_call.{json,md}``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUNDS = 300
TIMER = ("host = time.perf_counter_ns around one call, events = CUDA events before and after it (host cost "
         f"included); each call after an L2 flush and a synchronisation, rows in turns, median of {ROUNDS}")


def main(out_dir: str) -> int:
    import torch
    import torch.nn.functional as F

    import alcop_triton as at
    from alcop_triton import fastpath as fp
    from alcop_triton import ops, patch
    from host_breakdown import stored_matmul
    from probe_io import cold_calls, conv_operands, run_meta, write

    dev = torch.device("cuda")
    h = torch.float16
    a = torch.randn(1024, 768, device=dev, dtype=h)
    bt = torch.randn(768, 768, device=dev, dtype=h).t()
    a_g = a.clone().requires_grad_()
    a32, bt32 = a.float(), bt.float()  # float32: the signature also holds torch's TF32 switch
    img, filt = conv_operands()
    # torch's own functions, taken before patch mode replaces them: the direct rows call these
    matmul_torch, conv_torch = torch.matmul, F.conv2d

    entry, launch, args = stored_matmul(a, bt)

    def plain_wrapper(*xs: Any) -> Any:
        return conv_torch(*xs)

    rows: dict[str, Callable[[], Any]] = {
        "torch.matmul": lambda: matmul_torch(a, bt),
        "at.matmul": lambda: at.matmul(a, bt),
        "stored entry": lambda: entry.run((a, bt)),
        "prebound launch": lambda: launch(*args),
        "torch.matmul, float32": lambda: matmul_torch(a32, bt32),
        "at.matmul, float32": lambda: at.matmul(a32, bt32),
        "torch.matmul, requires_grad": lambda: matmul_torch(a_g, bt),
        "at.matmul, requires_grad": lambda: at.matmul(a_g, bt),
        "F.conv2d (cuDNN)": lambda: conv_torch(img, filt, None, 1, 1),
        "plain wrapper of F.conv2d": lambda: plain_wrapper(img, filt, None, 1, 1),
        "at.conv2d": lambda: at.conv2d(img, filt, None, 1, 1),
    }
    patched_rows: dict[str, Callable[[], Any]] = {
        "patched torch.matmul": lambda: torch.matmul(a, bt),
        "patched torch.matmul, requires_grad": lambda: torch.matmul(a_g, bt),
        "patched F.conv2d, site sent to torch": lambda: F.conv2d(img, filt, None, 1, 1),
    }
    with at.patched():
        # Patch mode's decision for this convolution is stored as torch's, as the records would store it
        # for a layer where cuDNN wins: the row times the to-torch check itself.
        patch._to_torch[ops.conv2d][id(filt)] = (img.shape, img.dtype, False)
        result = cold_calls({**rows, **patched_rows}, ROUNDS)
        counters = fp.stats()
    meta = run_meta(TIMER) | {"fastpath": dataclasses.asdict(counters)}
    lines = [f"# Cold eager calls ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {TIMER}.", "",
             "| row | host µs | events µs |", "|---|---|---|"]
    lines += [f"| {r['row']} | {r['host_us']:.1f} | {r['events_us']:.1f} |" for r in result]
    lines += ["", f"Fast-path counters at the end: {counters}"]
    write(out_dir, "cold_call", meta, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
