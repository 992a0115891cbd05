"""What entering and leaving patch mode around each forward pass costs a host-bound model (ResNet-50).

    python benchmarks/probes/patch_enter.py OUT_DIR [--passes 60] [--rounds 4]

The model and input of ``benchmarks/e2e.py`` (ResNet-50, batch 64, fp16, channels_last, inference). Modes,
taking turns pass by pass (e2e.py's order):

* ``eager``: the model;
* ``patched_per_pass``: each pass inside its own ``alcop_triton.patched()`` block (as e2e.py times it);
* ``reassign_per_pass``: eager, but around each pass the attributes patch mode replaces are set to torch's
  own functions and back (what installing and removing the wrappers does to torch's classes and modules,
  without any wrapper being called);
* ``reassign_modules_per_pass``: the same for the module attributes only (``torch``, ``torch.nn.functional``),
  ``torch.Tensor``'s left alone;
* ``empty_block_then_eager``: an empty ``patched()`` block entered and left, then an eager pass, timed together
  (what entering and leaving costs a pass with no call routed);
* ``enabled_before_pass``: ``enable()`` before the timer starts, ``disable()`` after it stops (the routed
  calls without the entering and leaving).

Then, in blocks of passes (``--rounds`` rounds of ``eager_block`` and ``patched_once_block``): eager passes, and
passes inside one ``enable()`` made before the block (the wrappers installed once, as for a model served
under patch mode).

Timers: **events ms** = CUDA events around one pass, host synchronised before it (e2e.py's); **host ms** =
``perf_counter`` around the pass alone. Medians over the passes. Writes ``OUT_DIR/patch_enter.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import PASS_TIMER, publish, run_meta, table_head, timed_pass  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--passes", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args(argv)

    import contextlib

    import torch

    import alcop_triton as at
    from alcop_triton import patch
    from e2e import build

    model, x, src = build("resnet50", "cuda", tiny=False)

    def reassigning(owners: Callable[[Any], bool]) -> Callable[[], contextlib.AbstractContextManager[None]]:
        routes = [(owner, name) for owner, name, _ in patch.ROUTES if owners(owner)]

        @contextlib.contextmanager
        def block() -> Iterator[None]:
            saved = [(owner, name, getattr(owner, name)) for owner, name in routes]
            for owner, name, fn in saved:
                setattr(owner, name, fn)
            try:
                yield
            finally:
                for owner, name, fn in saved:
                    setattr(owner, name, fn)
        return block

    @contextlib.contextmanager
    def after_empty_block() -> Iterator[None]:
        with at.patched():
            pass
        yield

    per_pass: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
        "eager": contextlib.nullcontext, "patched_per_pass": at.patched,
        "reassign_per_pass": reassigning(lambda owner: True),
        "reassign_modules_per_pass": reassigning(lambda owner: owner is not torch.Tensor),
        "empty_block_then_eager": after_empty_block, "enabled_before_pass": contextlib.nullcontext}
    # modes whose patch mode is switched outside the timed interval: (before, after)
    outside: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {"enabled_before_pass": (at.enable, at.disable)}
    modes = [*per_pass, "eager_block", "patched_once_block"]
    events: dict[str, list[float]] = {m: [] for m in modes}
    host: dict[str, list[float]] = {m: [] for m in modes}

    def timed(mode: str, ctx: Callable[[], contextlib.AbstractContextManager[None]]) -> None:
        before, after = outside.get(mode, (_nothing, _nothing))
        before()
        try:
            _timed(mode, ctx)
        finally:
            after()

    def _timed(mode: str, ctx: Callable[[], contextlib.AbstractContextManager[None]]) -> None:
        def run() -> None:
            with ctx():
                model(x)
        host_ms, events_ms = timed_pass(run)
        host[mode].append(host_ms)
        events[mode].append(events_ms)

    with torch.inference_mode():
        for mode, ctx in per_pass.items():  # warm-up: every mode's first calls (alcop's kernels built)
            for _ in range(3):
                timed(mode, ctx)
        for m in modes:
            events[m].clear()
            host[m].clear()
        for _ in range(a.passes):
            for mode, ctx in per_pass.items():
                timed(mode, ctx)
        block = max(1, a.passes // a.rounds)
        for _ in range(a.rounds):
            for _ in range(block):
                timed("eager_block", contextlib.nullcontext)
            at.enable()  # outside the timed passes: the wrappers go in once per block
            try:
                for _ in range(block):
                    timed("patched_once_block", contextlib.nullcontext)
            finally:
                at.disable()
    meta = run_meta(PASS_TIMER) | {"model": src, "passes": a.passes}
    rows = [{"mode": m, "events_ms": statistics.median(events[m]), "host_ms": statistics.median(host[m])}
            for m in modes]
    eager = rows[0]["events_ms"]
    lines = table_head("Entering patch mode per pass, ResNet-50", meta, f"{src}, batch 64, fp16, channels_last; "
                       f"{a.passes} passes per mode.", ["mode", "events ms", "host ms", "eager / mode"])
    lines += [f"| {r['mode']} | {r['events_ms']:.2f} | {r['host_ms']:.2f} | {eager / r['events_ms']:.3f}x |"
              for r in rows]
    return publish(a.out_dir, "patch_enter", meta, rows, lines)


def _nothing() -> None:
    pass


if __name__ == "__main__":
    sys.exit(main())
