"""What each check of patch mode's wrapper costs a cold call that it sends to torch.

    python benchmarks/probes/wrapper_cost.py OUT_DIR

A call site stored as torch's (a convolution whose records leave it to cuDNN, as most of ResNet-50's
are) runs patch mode's wrapper and then torch's F.conv2d. Rows: F.conv2d itself, a plain Python wrapper
around it, then wrappers that add the wrapper's checks one at a time (the tracing checks, the site lookup
by the weight's identity, the input's dtype and shape compared, the counter), and patch mode's own
wrapper. Each call is timed as ``cold_call.py`` times them (after an L2 flush and a synchronisation,
``perf_counter_ns`` around the call, rows in turns, median of ``ROUNDS``). Writes
``OUT_DIR/wrapper_cost.{json,md}``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUNDS = 400
TIMER = ("host µs: time.perf_counter_ns around one call, each after an L2 flush and a synchronisation, rows in "
         f"turns, median of {ROUNDS}")


def main(out_dir: str) -> int:
    import torch
    import torch.nn.functional as F

    import alcop_triton as at
    from alcop_triton import fastpath, ops, patch
    from probe_io import run_meta, write

    dev = torch.device("cuda")
    img = torch.randn(8, 64, 28, 28, device=dev, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    filt = torch.randn(64, 64, 3, 3, device=dev, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    conv = F.conv2d
    sites = {id(filt): (img.shape, img.dtype)}
    tracing, compiler, counters, tensor = fastpath._dynamo_tracing, fastpath._compiler, fastpath._counters, torch.Tensor

    def plain(*args: Any) -> Any:
        return conv(*args)

    def traced(*args: Any) -> Any:
        if tracing() or compiler._is_compiling_flag:
            return None
        return conv(*args)

    def looked_up(*args: Any) -> Any:
        if tracing() or compiler._is_compiling_flag:
            return None
        seen = sites.get(id(args[1]))
        return conv(*args) if seen is not None else None

    def compared(*args: Any) -> Any:
        if tracing() or compiler._is_compiling_flag:
            return None
        seen = sites.get(id(args[1]))
        if seen is not None:
            a = args[0]
            if type(a) is tensor and seen[1] is a.dtype and seen[0] == a.shape:
                return conv(*args)
        return None

    def counted(*args: Any) -> Any:
        if tracing() or compiler._is_compiling_flag:
            return None
        seen = sites.get(id(args[1]))
        if seen is not None:
            a = args[0]
            if type(a) is tensor and seen[1] is a.dtype and seen[0] == a.shape:
                counters.to_torch += 1
                return conv(*args)
        return None

    rows: dict[str, Callable[..., Any]] = {"F.conv2d": conv, "plain wrapper": plain, "+ tracing checks": traced,
                                          "+ site lookup": looked_up, "+ dtype and shape compared": compared,
                                          "+ counter": counted}
    flush = torch.empty(2 * torch.cuda.get_device_properties(dev).L2_cache_size // 4 + 1, dtype=torch.int32,
                        device=dev)
    times: dict[str, list[float]] = {k: [] for k in (*rows, "patch mode's wrapper")}
    with torch.no_grad(), at.patched():
        patch._to_torch[ops.conv2d][id(filt)] = (img.shape, img.dtype)
        every = {**rows, "patch mode's wrapper": F.conv2d}  # F.conv2d is the wrapper inside the block
        for fn in every.values():
            fn(img, filt, None, 1, 1)
        torch.cuda.synchronize()
        order = list(every.items())
        for r in range(ROUNDS):
            for name, fn in order[r % len(order):] + order[:r % len(order)]:
                flush.zero_()
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                fn(img, filt, None, 1, 1)
                times[name].append((time.perf_counter_ns() - t0) / 1e3)
        torch.cuda.synchronize()
    result = [{"row": k, "host_us": statistics.median(v)} for k, v in times.items()]
    meta = run_meta(TIMER)
    lines = [f"# Patch mode's wrapper, check by check, on a cold call sent to torch ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {TIMER}. "
             "Conv: 8x64x28x28 fp16 channels-last, 64 3x3 filters, padding 1 (cuDNN).", "",
             "| row | host µs |", "|---|---|"] + [f"| {r['row']} | {r['host_us']:.1f} |" for r in result]
    write(out_dir, "wrapper_cost", meta, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
