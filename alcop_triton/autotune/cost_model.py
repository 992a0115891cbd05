"""Cost models as the tuners see them: ``fit`` on measured throughputs, ``predict`` a score.

Scores are "higher is better" (throughput-like), failed configs score 0. The learned model is
``alcop_triton.model.xgb_model.XGBCostModel`` (owned by the model package); this module only
adapts it to one workload's config space and to the fit/predict interface of the tuners.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence

import numpy as np

from ..records import KernelConfig
from .space import ConfigSpace


class CostModel(Protocol):
    def fit(self, configs: Sequence[KernelConfig], scores: Sequence[float]) -> None:
        """(Re)fit on every measurement so far; ``scores`` are FLOP/s, 0 for failures."""

    def predict(self, configs: Sequence[KernelConfig]) -> np.ndarray:
        """Predicted scores, higher = faster."""


class AnalyticalCostModel:
    """The analytical model's predicted throughput (FLOP/s); measurements do not change it."""

    def __init__(self, space: ConfigSpace) -> None:
        self.space = space
        flops = space.workload.flops
        self._score = {c: (flops / t if math.isfinite(t) else 0.0) for c, t in zip(space.configs, space.estimates())}

    def fit(self, configs: Sequence[KernelConfig], scores: Sequence[float]) -> None:
        """The analytical model has no parameters to fit."""

    def predict(self, configs: Sequence[KernelConfig]) -> np.ndarray:
        return np.array([self._score.get(c, 0.0) for c in configs], dtype=float)


class XGBoostCostModel:
    """Placeholder until model.xgb_model lands."""
