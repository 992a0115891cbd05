"""Cost models as the tuners see them: ``fit`` on measured throughputs, ``predict`` a score.

Scores are "higher is better" (throughput-like), failed configs score 0. The learned model is
``alcop_triton.model.xgb_model.XGBCostModel`` (owned by the model package); this module only
adapts it to one workload's config space and to the fit/predict interface of the tuners.
"""

from __future__ import annotations

import importlib.util
import math
from concurrent.futures import Future
from typing import Protocol, Sequence

import numpy as np

from ..records import KernelConfig
from .measure import in_background
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


FULL_SCORING_LIMIT = 50_000
"""Spaces up to this size get every config's features computed once and are scored whole after each fit
(one batched prediction, ~0.1 s for the 36k configs of a large GEMM); larger ones are scored config by
config as the optimizer asks."""


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

    The features of the space (up to ``FULL_SCORING_LIMIT`` configs) and the pretraining are computed
    in a background thread that starts here: a tuning run measures its seeds meanwhile (the wait for
    the measurement process releases the interpreter), and the first prediction waits for it (``fit``
    only keeps the measurements, which the next prediction applies in one update).
    """

    def __init__(self, space: ConfigSpace, *, pretrain: bool, seed: int = 0, pretrain_size: int = 2048) -> None:
        # Imported here: xgboost is only needed by the learned tuners. Looked for in this thread (the
        # background one imports it) so that a missing package fails the run before anything is measured.
        from ..model.xgb_model import XGBCostModel, xgboost_module

        if importlib.util.find_spec("xgboost") is None:
            xgboost_module()  # raises the ImportError that says how to get it

        self.space = space
        # One thread: the model is small, and OpenMP threads spin badly when the CPU is shared
        # with compile workers (or other tuning processes).
        self._model = XGBCostModel(space.spec, seed=seed, nthread=1)
        self._trained = pretrain
        self._fitted = 0  # measurements already passed to the model
        self._x: np.ndarray | None = None  # features of every config (spaces up to FULL_SCORING_LIMIT)
        self._all: np.ndarray | None = None  # scores of every config, until the next fit
        # Scores are memoised until the next fit where the space is not scored whole: the optimizer
        # asks about the same configs often, and featurizing runs the analytical model for each.
        self._scores: dict[KernelConfig, float] = {}
        self._pending: tuple[list[KernelConfig], list[float]] | None = None  # measurements ``fit`` has not applied
        self._ready: Future[None] | None = in_background("alcop-cost-model", self._prepare, pretrain, seed,
                                                         pretrain_size)

    def _prepare(self, pretrain: bool, seed: int, pretrain_size: int) -> None:
        space, w = self.space, self.space.workload
        if space.spec is not None and len(space) <= FULL_SCORING_LIMIT:
            self._x = self._model.features(w, space.configs, space.details())[0]
        if not pretrain:
            return
        picks = list(range(len(space)))
        if len(space) > pretrain_size:
            ranked = space.ranked()
            top = [space.index(c) for c in ranked[: pretrain_size // 8]]
            chosen = set(top)
            rest = [i for i in picks if i not in chosen]
            pick = np.random.default_rng(seed).choice(len(rest), pretrain_size - len(top), replace=False)
            picks = top + [rest[int(i)] for i in sorted(pick)]
        configs = [space.configs[i] for i in picks]
        rows = None
        if self._x is not None:
            est = space.estimates()
            rows = {w: (self._x[picks], np.array([est[i] for i in picks]))}
        self._model.pretrain([w], configs, rows)

    def _wait(self) -> None:
        if self._ready is not None:
            ready, self._ready = self._ready, None
            ready.result()  # re-raises what the background thread raised

    def fit(self, configs: Sequence[KernelConfig], scores: Sequence[float]) -> None:
        # Kept until a prediction needs them: a tuning run's first batches are dispatch's seeds, which no
        # model proposes, so the background preparation goes on while they are measured, and their
        # measurements are boosted in one update rather than one per batch.
        if not self._trained and len(configs) < 2:
            return  # a ranking model needs two configs to rank
        self._pending = (list(configs), list(scores))
        self._trained = True

    def _apply_fit(self) -> None:
        from ..model.data import Measurement

        self._wait()
        if self._pending is None:
            return
        configs, scores = self._pending
        self._pending = None
        flops = self.space.workload.flops
        new = [Measurement(self.space.workload, c, flops / s if s > 0 else None, None if s > 0 else "failed")
               for c, s in zip(configs[self._fitted:], scores[self._fitted:])]
        if new:
            self._model.update(new)
            self._fitted = len(configs)
            self._scores.clear()
            self._all = None

    @property
    def trained(self) -> bool:
        return self._trained

    def predict(self, configs: Sequence[KernelConfig]) -> np.ndarray:
        if not self._trained:
            return np.zeros(len(configs))
        self._apply_fit()
        if self._x is not None and (configs is self.space.configs or all(c in self.space for c in configs)):
            if self._all is None:
                self._all = self._model.predict_features(self._x)
            if configs is self.space.configs:  # the optimizer scoring the whole space
                return self._all.copy()
            return self._all[[self.space.index(c) for c in configs]]
        missing = list(dict.fromkeys(c for c in configs if c not in self._scores))
        if missing:
            self._scores.update(zip(missing, map(float, self._model.predict(self.space.workload, missing))))
        return np.array([self._scores[c] for c in configs], dtype=float)
