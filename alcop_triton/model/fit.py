"""Fit the analytical model's efficiency constants to measurements.

The hardware rates of a ``GPUSpec`` come from datasheets or ``calibrate``; what they cannot give is
how Triton-generated code uses them (attainable fraction of tensor-core peak, per-iteration
overhead, how much loaded latency exceeds unloaded latency, ...). ``fit_constants`` searches those
few constants by coordinate descent over multiplicative grids, minimising the squared log error
of predicted vs measured time, mostly after removing each workload's mean (ranking within a
workload is what tuning needs) plus a smaller uncentred part (so absolute times stay sensible).
"""

from __future__ import annotations

import math
import random
from typing import Sequence

import numpy as np

from .analytical import estimate
from .data import Measurement
from .hardware import GPUSpec

# The constants searched, with the range each may take (why: outside these the constant stops
# meaning what its name says, e.g. an efficiency above 1).
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_eff": (0.3, 1.0),
    "latency_scale": (0.5, 8.0),
    "iter_overhead_cycles": (0.0, 600.0),
    "ptr_issue_cycles": (0.0, 64.0),
    "single_issuer_util": (0.4, 1.0),
    "launch_s": (0.0, 20e-6),
    "l2_bw": (1e12, 40e12),
}
_STEPS = ((0.5, 0.7, 0.85, 1.0, 1.2, 1.4, 2.0), (0.8, 0.9, 1.0, 1.1, 1.25), (0.93, 1.0, 1.07))
_CENTRED_WEIGHT = 0.8


def fit_loss(ms: Sequence[Measurement], spec: GPUSpec) -> float:
    """Squared log error of the model on successful measurements (lower is better).

    A measured config that the model calls invalid costs a fixed penalty, so the search cannot
    improve the loss by declaring configs impossible.
    """
    groups: dict[object, list[float]] = {}
    penalty = 0.0
    for m in ms:
        measured = m.time_s if m.ok else None
        if measured is None:
            continue
        t = estimate(m.workload, m.config, spec).time_s
        if not math.isfinite(t):
            penalty += 1.0
            continue
        groups.setdefault(m.workload, []).append(math.log(t / measured))
    n = sum(len(g) for g in groups.values())
    if n == 0:
        return math.inf
    centred = sum(float(((np.array(g) - np.mean(g)) ** 2).sum()) for g in groups.values())
    raw = sum(float((np.array(g) ** 2).sum()) for g in groups.values())
    return (_CENTRED_WEIGHT * centred + (1 - _CENTRED_WEIGHT) * raw + penalty) / (n + penalty)


def fit_constants(records: Sequence[Measurement], spec: GPUSpec, *, max_records: int = 1500,
                  seed: int = 0, params: Sequence[str] | None = None) -> GPUSpec:
    """A copy of ``spec`` with the efficiency constants fitted to ``records``.

    Uses at most ``max_records`` successful measurements (a seeded sample, to bound the run time:
    each loss evaluation runs the model on every record). ``params`` limits which constants of
    ``FIT_BOUNDS`` move. Deterministic for a given seed.
    """
    ok = [m for m in records if m.ok]
    if not ok:
        raise ValueError("fit_constants: no successful measurements to fit")
    if len(ok) > max_records:
        ok = random.Random(seed).sample(ok, max_records)
    names = list(params) if params is not None else list(FIT_BOUNDS)
    unknown = set(names) - set(FIT_BOUNDS)
    if unknown:
        raise ValueError(f"fit_constants: cannot fit {sorted(unknown)}; fittable: {sorted(FIT_BOUNDS)}")
    best, best_loss = spec, fit_loss(ok, spec)
    for steps in _STEPS:
        for name in names:
            lo, hi = FIT_BOUNDS[name]
            cur = getattr(best, name)
            base = cur if cur > 0 else (hi - lo) / 10   # a zero constant can still grow
            for f in steps:
                v = min(hi, max(lo, base * f))
                if v == cur:
                    continue
                cand = best.replace(**{name: v})
                loss = fit_loss(ok, cand)
                if loss < best_loss - 1e-12:
                    best, best_loss = cand, loss
    return best.replace(source=f"{spec.source}+fitted({len(ok)} records)")
