"""How long a turn of each mode should be when ``e2e.py`` alternates eager and patch mode on ResNet-50.

    python benchmarks/probes/e2e_turns.py OUT_DIR

The model and input of ``benchmarks/e2e.py`` (batch 64, fp16, channels_last, inference). In one process,
eager and patched passes (each in its own ``alcop_triton.patched()`` block) alternate in turns of
``timed`` passes, each turn after ``untimed`` passes of its mode: (0, 1) pass by pass, (1, 2), (1, 6)
and (0, 20); the four structures run twice, in that order. A drift of the host's speed during one
mode's turn reads as that mode's speed; the structures' spread shows how much. Timers: **events ms** =
CUDA events around one pass, host synchronised first (``e2e.py``'s); **host ms** = ``perf_counter``
around the pass; medians. Also Python's garbage collections per pass. Writes ``OUT_DIR/e2e_turns.{json,md}``.
"""

from __future__ import annotations

import gc
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TIMER = "events ms: CUDA events around one pass, host synchronised first; host ms: perf_counter around the pass; medians"
STRUCTURES = ((0, 1, 40), (1, 2, 20), (1, 6, 8), (0, 20, 3))  # (untimed, timed, turns) per mode


def main(out_dir: str) -> int:
    import torch

    import alcop_triton as at
    import e2e
    from probe_io import publish, run_meta, table_head, timed_pass

    model, x, src = e2e.build("resnet50", "cuda", False)

    def patched() -> Any:
        with at.patched():
            return model(x)
    modes: dict[str, Callable[[], Any]] = {"eager": lambda: model(x), "patched": patched}

    def timed(fn: Callable[[], Any]) -> tuple[float, float, int]:
        collected = sum(s["collections"] for s in gc.get_stats())
        host_ms, events_ms = timed_pass(fn)
        return host_ms, events_ms, sum(s["collections"] for s in gc.get_stats()) - collected

    rows = []
    with torch.inference_mode():
        for _ in range(5):
            for fn in modes.values():
                fn()
        for run in (1, 2):
            for untimed, n, turns in STRUCTURES:
                got: dict[str, list[tuple[float, float, int]]] = {m: [] for m in modes}
                for _ in range(turns):
                    for name, fn in modes.items():
                        for _ in range(untimed):
                            fn()
                        got[name] += [timed(fn) for _ in range(n)]
                row: dict[str, Any] = {"run": run, "untimed": untimed, "timed": n, "turns": turns}
                for name, ts in got.items():
                    row[f"{name}_host_ms"] = statistics.median(t[0] for t in ts)
                    row[f"{name}_events_ms"] = statistics.median(t[1] for t in ts)
                    row[f"{name}_gc_per_pass"] = sum(t[2] for t in ts) / len(ts)
                row["eager_over_patched"] = row["eager_events_ms"] / row["patched_events_ms"]
                rows.append(row)
                print(row, flush=True)
    meta = {**run_meta(TIMER), "model": src}
    lines = table_head("Turn length when eager and patch mode alternate on ResNet-50", meta,
                       f"{src}, batch 64, fp16, channels_last; one process, the rows in order.",
                       ["run", "untimed + timed passes per turn", "turns", "eager events ms", "patched events ms",
                        "eager host ms", "patched host ms", "GC per pass (eager, patched)", "eager / patched"])
    lines += [f"| {r['run']} | {r['untimed']} + {r['timed']} | {r['turns']} | {r['eager_events_ms']:.3f} | "
              f"{r['patched_events_ms']:.3f} | {r['eager_host_ms']:.3f} | {r['patched_host_ms']:.3f} | "
              f"{r['eager_gc_per_pass']:.2f}, {r['patched_gc_per_pass']:.2f} | {r['eager_over_patched']:.3f}x |"
              for r in rows]
    return publish(out_dir, "e2e_turns", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
