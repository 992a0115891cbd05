"""``alcop-tune bench``: tuned alcop kernels vs torch vs Triton tutorial 03's config list.

All three go through the same isolated measurer (same correctness check, same timers):

* ``torch``: the eager torch op (cuBLAS / cuDNN) on the runner's inputs, in their stored layout;
* ``tutorial``: alcop's kernel restricted to the 16 ``triton.Config``s of Triton's
  ``03-matrix-multiplication.py`` (no register pipelining), i.e. what that tutorial's
  ``@triton.autotune`` would pick for this shape; the best of them is reported;
* ``alcop``: the config ``session.decide`` picks: what ``tune`` stored for this device (the
  interpreter's records on a CPU machine), else dispatch's choice (tuning DB, shipped table,
  nearest shape, model).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
from typing import Any, Sequence

from ..records import KernelConfig, Workload
from .database import Database, atomic_write_text, versions
from .dispatch import Dispatcher
from .measure import DEFAULT_FACTORY, MeasureResult, ProcessMeasurer, resolve_factory
from .session import Target, decide


def _t(bm: int, bn: int, bk: int, stages: int, warps: int) -> KernelConfig:
    return KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=warps, smem_stages=stages)


TUTORIAL_03: tuple[KernelConfig, ...] = (
    # python/tutorials/03-matrix-multiplication.py, get_cuda_autotune_config(): fp16 configs ...
    _t(128, 256, 64, 3, 8), _t(64, 256, 32, 4, 4), _t(128, 128, 32, 4, 4), _t(128, 64, 32, 4, 4),
    _t(64, 128, 32, 4, 4), _t(128, 32, 32, 4, 4), _t(64, 32, 32, 5, 2), _t(32, 64, 32, 5, 2),
    # ... and the ones it lists as good for fp8 inputs (the tutorial autotunes over all 16).
    _t(128, 256, 128, 3, 8), _t(256, 128, 128, 3, 8), _t(256, 64, 128, 4, 4), _t(64, 256, 128, 4, 4),
    _t(128, 128, 128, 4, 4), _t(128, 64, 64, 4, 4), _t(64, 128, 64, 4, 4), _t(128, 32, 64, 4, 4),
)


class TorchRunner:
    """The eager torch op on the same inputs and reference as alcop's runner."""

    def __init__(self, inner: Any) -> None:
        self._inner, self.rtol, self.workload = inner, inner.rtol, inner.workload

    def inputs(self, seed: int) -> tuple[Any, ...]:
        return self._inner.inputs(seed)

    def reference(self, inputs: tuple[Any, ...]) -> Any:
        return self._inner.reference(inputs)

    def run(self, inputs: tuple[Any, ...]) -> Any:
        import torch
        import torch.nn.functional as F

        w = self.workload
        if w.op in ("matmul", "linear", "bmm"):
            # Operands arrive as (possibly transposed) views: torch passes the layout to cuBLAS.
            return torch.matmul(inputs[0], inputs[1])
        p = w.conv_params()
        conv = {"conv1d": F.conv1d, "conv2d": F.conv2d, "conv3d": F.conv3d}[w.op]
        return conv(inputs[0], inputs[1], None, p["stride"], p["pad"], p["dilation"], p["groups"])


def make_torch_runner(workload: Workload, config: KernelConfig, device: str) -> TorchRunner:
    """Runner factory (``measure`` factory signature) timing torch instead of alcop."""
    return TorchRunner(resolve_factory(DEFAULT_FACTORY)(workload, config, device))


def _best(results: Sequence[MeasureResult]) -> MeasureResult | None:
    timed = [(r.time_ms, r) for r in results if r.ok and r.time_ms is not None]
    return min(timed, key=lambda tr: tr[0])[1] if timed else None


def run(workloads: Sequence[Workload], target: Target, db: Database, *, tutorial: bool = True,
        timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """One row per workload: times (ms), configs, speedups of alcop over torch and the tutorial."""
    from tqdm import tqdm

    dispatcher = Dispatcher(db)
    rows: list[dict[str, Any]] = []
    for w in tqdm(workloads, desc="bench", unit="workload", dynamic_ncols=True):
        decision = decide(dispatcher, w, target)
        with ProcessMeasurer(w, target.device, timeout_s=timeout_s) as m:
            alcop = m.measure([decision.config])[0]
            tut = _best(m.measure(list(TUTORIAL_03))) if tutorial else None
        with ProcessMeasurer(w, target.device, timeout_s=timeout_s, compile_threads=1,
                             factory=f"{__name__}:make_torch_runner") as m:
            torch_r = m.measure([KernelConfig()])[0]
        # Times of the successful results, for the ratios (a result has a time exactly when it is ok).
        alcop_ms = alcop.time_ms if alcop.ok else None
        torch_ms = torch_r.time_ms if torch_r.ok else None
        tut_ms = tut.time_ms if tut else None  # _best returns only an ok result
        row: dict[str, Any] = {
            "workload": w.key(), "torch_ms": torch_r.time_ms, "torch_error": torch_r.message if not torch_r.ok else "",
            "tutorial_ms": tut_ms, "tutorial_config": str(tut.config) if tut else "",
            "alcop_ms": alcop.time_ms, "alcop_config": str(alcop.config), "alcop_source": decision.source,
            "alcop_error": alcop.message if not alcop.ok else "", "timer": alcop.timer,
            "alcop_tflops": w.flops / (alcop_ms * 1e-3) / 1e12 if alcop_ms is not None else None}
        row["speedup_vs_torch"] = torch_ms / alcop_ms if alcop_ms is not None and torch_ms is not None else None
        row["speedup_vs_tutorial"] = tut_ms / alcop_ms if alcop_ms is not None and tut_ms is not None else None
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    def ms(x: float | None) -> str:
        return f"{x:.4f}" if x else "-"  # failures carry their message in the *_error columns

    def sp(x: float | None) -> str:
        return f"{x:.2f}x" if x else "-"

    head = ["workload", "torch ms", "tutorial ms", "alcop ms", "TFLOP/s", "vs torch", "vs tutorial", "alcop config"]
    body = [[r["workload"], ms(r["torch_ms"]), ms(r["tutorial_ms"]), ms(r["alcop_ms"]),
             f"{r['alcop_tflops']:.1f}" if r["alcop_tflops"] else "-", sp(r["speedup_vs_torch"]),
             sp(r["speedup_vs_tutorial"]), f"{r['alcop_config']} ({r['alcop_source']})"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(x.ljust(wd) for x, wd in zip(line, widths)) for line in [head, ["-" * wd for wd in widths], *body]]
    return "\n".join(lines)


def write_csv(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["workload"])
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def write_json(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str], target: Target) -> None:
    meta = {"gpu": target.key.name, "cc": target.key.cc, "device": target.device_name,
            "date": _dt.date.today().isoformat(), **versions()}
    atomic_write_text(path, json.dumps({"meta": meta, "rows": list(rows)}, indent=1) + "\n")
