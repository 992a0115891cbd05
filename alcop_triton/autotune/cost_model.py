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
    @property
    def trained(self) -> bool:
        """Whether predictions carry information yet (an unpretrained model before any fit: no)."""

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

    trained = True

    def fit(self, configs: Sequence[KernelConfig], scores: Sequence[float]) -> None:
        """The analytical model has no parameters to fit."""

    def predict(self, configs: Sequence[KernelConfig]) -> np.ndarray:
        return np.array([self._score.get(c, 0.0) for c in configs], dtype=float)




class XGBoostCostModel:
    """``model.xgb_model.XGBCostModel`` (a ranking model) on one workload's space.

    Args:
        space: the configs to score (its ``spec`` is the GPU the model describes).
        pretrain: first fit the model to the analytical model's ranking (ALCOP's "Analytical +
            XGB"); without it the model knows nothing until two configs are measured.
        seed: XGBoost's seed, so tuning is reproducible.
        pretrain_size: configs the pretraining ranks: the analytical top ``pretrain_size // 8``
            (where the ranking matters) plus a seeded uniform sample of the rest (the shape of
            the whole space); pretraining on all of a 30k-config space would take minutes.
    """

    def __init__(self, space: ConfigSpace, *, pretrain: bool, seed: int = 0, pretrain_size: int = 2048) -> None:
        # Imported here: xgboost is only needed by the learned tuners.
        from ..model.xgb_model import XGBCostModel

        self.space = space
        # One thread: the model is small, and OpenMP threads spin badly when the CPU is shared
        # with compile workers (or other tuning processes).
        self._model = XGBCostModel(space.spec, seed=seed, nthread=1)
        self._trained = pretrain
        self._fitted = 0  # measurements already passed to the model
        # Scores are memoised until the next fit: the optimizer asks about the same configs often,
        # and every model call featurizes (runs the analytical model) for each config it is given.
        self._scores: dict[KernelConfig, float] = {}
        if pretrain:
            configs = list(space.configs)
            if len(configs) > pretrain_size:
                top = space.ranked()[: pretrain_size // 8]
                chosen = set(top)
                rest = [c for c in configs if c not in chosen]
                pick = np.random.default_rng(seed).choice(len(rest), pretrain_size - len(top), replace=False)
                configs = top + [rest[int(i)] for i in sorted(pick)]
            self._model.pretrain([space.workload], configs)

    def fit(self, configs: Sequence[KernelConfig], scores: Sequence[float]) -> None:
        from ..model.data import Measurement

        if not self._trained and len(configs) < 2:
            return  # a ranking model needs two configs to rank
        flops = self.space.workload.flops
        new = [Measurement(self.space.workload, c, flops / s if s > 0 else None, None if s > 0 else "failed")
               for c, s in zip(configs[self._fitted:], scores[self._fitted:])]
        if new:
            self._model.update(new)
            self._fitted = len(configs)
            self._trained = True
            self._scores.clear()

    @property
    def trained(self) -> bool:
        return self._trained

    def predict(self, configs: Sequence[KernelConfig]) -> np.ndarray:
        if not self._trained:
            return np.zeros(len(configs))
        missing = list(dict.fromkeys(c for c in configs if c not in self._scores))
        if missing:
            self._scores.update(zip(missing, map(float, self._model.predict(self.space.workload, missing))))
        return np.array([self._scores[c] for c in configs], dtype=float)
