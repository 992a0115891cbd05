"""What entering and leaving patch mode around every forward pass costs ResNet-50, with patch mode's
wrappers put back when the block ends, and left in place until a routed call outside patch mode.

    python benchmarks/probes/patch_linger.py OUT_DIR [--passes 50]

The model and input of ``benchmarks/e2e.py`` (batch 64, fp16, channels_last, inference). Modes, taking
turns pass by pass:

* ``eager``: the model;
* ``block_per_pass``: each pass inside its own ``alcop_triton.patched()`` block, as a model served under
  patch mode runs (the wrappers stay in place between blocks);
* ``block_per_pass_put_back``: the same, the wrappers put in place as the block begins and torch's own
  functions back as it ends, inside the timed interval (what every block did before the wrappers
  outlived it);
* ``enabled_before``: ``enable()`` before the timer starts, ``disable()`` after it stops.

Timers: **events ms** = CUDA events around one pass, host synchronised first (``e2e.py``'s); **host ms** =
``perf_counter`` around the pass alone; medians over the passes. Also: µs of entering and leaving an
empty block, median of 2,000. Writes ``OUT_DIR/patch_linger.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--passes", type=int, default=50)
    args = ap.parse_args(argv)

    import torch

    import alcop_triton as at
    import e2e
    from alcop_triton import patch
    from probe_io import PASS_TIMER, publish, run_meta, table_head, timed_pass

    model, x, src = e2e.build("resnet50", "cuda", False)

    def eager() -> Any:
        return model(x)

    def block() -> Any:
        with at.patched():
            return model(x)

    def block_put_back() -> Any:
        with at.patched():
            y = model(x)
        patch._put_back()
        return y

    def linger() -> None:  # the wrappers in place, patch mode off: where an earlier block leaves them
        at.enable()
        at.disable()

    # (pass, before the timer, after it): each mode finds torch's attributes as it would in a run of its own
    modes: dict[str, tuple[Callable[[], Any], Callable[[], None] | None, Callable[[], None] | None]] = {
        "eager": (eager, patch._put_back, None), "block_per_pass": (block, linger, None),
        "block_per_pass_put_back": (block_put_back, patch._put_back, None),
        "enabled_before": (eager, at.enable, at.disable)}
    host: dict[str, list[float]] = {m: [] for m in modes}
    events: dict[str, list[float]] = {m: [] for m in modes}
    with torch.inference_mode():
        for _ in range(5):
            eager()
            block()
        for _ in range(args.passes):
            for name, (fn, before, after) in modes.items():
                if before is not None:
                    before()
                host_ms, events_ms = timed_pass(fn)
                if after is not None:
                    after()
                host[name].append(host_ms)
                events[name].append(events_ms)

    def empty_block() -> None:
        with at.patched():
            pass
    block_us = []
    for _ in range(2000):
        t0 = time.perf_counter_ns()
        empty_block()
        block_us.append((time.perf_counter_ns() - t0) / 1e3)

    meta = {**run_meta(PASS_TIMER), "model": src, "passes": args.passes, "empty_block_us": statistics.median(block_us)}
    eager_ms = statistics.median(events["eager"])
    rows = [{"mode": m, "events_ms": statistics.median(events[m]), "host_ms": statistics.median(host[m]),
             "eager_over_mode": eager_ms / statistics.median(events[m])} for m in modes]
    lines = table_head("Patch mode entered per ResNet-50 pass", meta,
                       f"{src}, batch 64, fp16, channels_last; {args.passes} passes per mode. Entering and leaving "
                       f"an empty block: {meta['empty_block_us']:.1f} µs (median of 2,000, wrappers in place).",
                       ["mode", "events ms", "host ms", "eager / mode"])
    lines += [f"| {r['mode']} | {r['events_ms']:.3f} | {r['host_ms']:.3f} | {r['eager_over_mode']:.3f}x |" for r in rows]
    return publish(args.out_dir, "patch_linger", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main())
