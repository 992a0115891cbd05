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

import functools
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUNDS = 400
TIMER = ("host µs: time.perf_counter_ns around one call, each after an L2 flush and a synchronisation, rows in "
         f"turns, median of {ROUNDS} (probe_io.cold_calls)")


def main(out_dir: str) -> int:
    import torch
    import torch.nn.functional as F

    import alcop_triton as at
    from alcop_triton import fastpath, ops, patch
    from probe_io import cold_calls, conv_operands, run_meta, write

    img, filt = conv_operands()
    conv = F.conv2d
    sites = {id(filt): (img.shape, img.dtype, False)}
    tracing, compiler, counters, tensor = fastpath._dynamo_tracing, fastpath._compiler, fastpath._counters, torch.Tensor

    def wrapper(checks: int) -> Callable[..., Any]:
        """A wrapper of F.conv2d with patch mode's first ``checks`` checks of a site stored as torch's (all
        of them pass): 1 the tracing checks, 2 the site lookup, 3 the input's dtype and shape, 4 the counter."""
        def call(*args: Any) -> Any:
            if checks >= 1 and (tracing() or compiler._is_compiling_flag):
                return None
            if checks >= 2:
                seen = sites.get(id(args[1]))
                if seen is None:
                    return None
                if checks >= 3:
                    a = args[0]
                    if not (type(a) is tensor and seen[1] is a.dtype and seen[0] == a.shape):
                        return None
                    if checks >= 4:
                        counters.to_torch += 1
            return conv(*args)
        return call

    names = ("plain wrapper", "+ tracing checks", "+ site lookup", "+ dtype and shape compared", "+ counter")
    with torch.no_grad(), at.patched():
        patch._to_torch[ops.conv2d][id(filt)] = (img.shape, img.dtype, False)
        calls: dict[str, Callable[[], Any]] = {"F.conv2d": lambda: conv(img, filt, None, 1, 1)}
        calls |= {name: functools.partial(wrapper(i), img, filt, None, 1, 1) for i, name in enumerate(names)}
        calls["patch mode's wrapper"] = lambda: F.conv2d(img, filt, None, 1, 1)  # the wrapper inside the block
        result = cold_calls(calls, ROUNDS)
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
