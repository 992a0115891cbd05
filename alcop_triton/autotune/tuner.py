"""Tuners under a trial budget (ALCOP Table 2), TVM style: tuner / cost model / optimizer apart.

=================  ===============  ==============  ===================  ==========================
tuner              cost model       prior           model updated        proposals
=================  ===============  ==============  ===================  ==========================
``grid``           none             no              no                   enumerate in space order
``random``         none             no              no                   uniform, without repeats
``xgb``            XGBoost          no              yes, per batch       simulated annealing
``analytical``     analytical       yes             no                   model ranking
``analytical+xgb`` XGBoost          analytical      yes, per batch       simulated annealing + eps
=================  ===============  ==============  ===================  ==========================

Failed trials are kept and scored 0 (TVM does the same) so the learned model learns where the
invalid regions are; they are never reported as best. Every tuner is deterministic given its seed.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import ScheduleError, TuningError
from ..records import KernelConfig, Workload
from .cost_model import CostModel, XGBoostCostModel
from .measure import MeasureResult, Measurer
from .optimizer import SimulatedAnnealingOptimizer, stochastic_round
from .space import ConfigSpace

TUNERS: tuple[str, ...] = ("grid", "random", "xgb", "analytical", "analytical+xgb")


@dataclass(frozen=True)
class Trial:
    """One measured config, in the order the tuner proposed it."""

    index: int
    result: MeasureResult
    throughput: float  # FLOP/s; 0 for a failed trial

    @property
    def config(self) -> KernelConfig:
        return self.result.config


def throughput(workload: Workload, result: MeasureResult) -> float:
    return workload.flops / (result.time_ms * 1e-3) if result.ok and result.time_ms else 0.0


@dataclass
class TuneResult:
    workload: Workload
    tuner: str
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.result.ok]
        return max(ok, key=lambda t: (t.throughput, -t.index)) if ok else None

    def curve(self) -> list[float]:
        """Best throughput found within the first k trials, for k = 1..len(trials)."""
        out, best = [], 0.0
        for t in self.trials:
            best = max(best, t.throughput)
            out.append(best)
        return out


class Tuner(ABC):
    """Proposes configs of a space in batches and learns from their measurements."""

    name = "tuner"

    def __init__(self, space: ConfigSpace, *, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.visited: set[KernelConfig] = set()
        self.trials: list[Trial] = []

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    @abstractmethod
    def next_batch(self, n: int) -> list[KernelConfig]:
        """Up to ``n`` unvisited configs to measure next."""

    def update(self, trials: Sequence[Trial]) -> None:
        """Learn from a measured batch (model-free tuners ignore it)."""

    def warm_start(self, history: Sequence[MeasureResult]) -> None:
        """Learn from earlier measurements (e.g. an interrupted run) without measuring them again."""
        known = [r for r in history if r.config in self.space and r.config not in self.visited]
        if not known:
            return
        self.visited.update(r.config for r in known)
        start = len(self.trials)
        self.trials += [Trial(start + i, r, throughput(self.space.workload, r)) for i, r in enumerate(known)]
        self.update(self.trials[start:])

    def tune(self, measurer: Measurer, n_trials: int, *, batch_size: int = 8,
             on_trial: Callable[[Trial], None] | None = None) -> TuneResult:
        """Measure up to ``n_trials`` new configs; ``on_trial`` sees each as it is measured.

        Ctrl-C stops early: the trials measured so far are returned with ``interrupted=True``
        (and were already passed to ``on_trial``, e.g. written to the database).
        """
        if n_trials < 1 or batch_size < 1:
            raise ScheduleError(f"n_trials={n_trials}, batch_size={batch_size}: both must be >= 1")
        res = TuneResult(self.space.workload, self.name)
        t0 = time.perf_counter()

        def record(r: MeasureResult) -> None:
            t = Trial(len(self.trials), r, throughput(self.space.workload, r))
            self.trials.append(t)
            res.trials.append(t)
            if on_trial is not None:
                on_trial(t)

        try:
            while len(res.trials) < n_trials and self.has_next():
                batch = self.next_batch(min(batch_size, n_trials - len(res.trials)))
                if not batch:
                    break
                self.visited.update(batch)
                start = len(self.trials)
                measurer.measure(batch, on_result=record)
                self.update(self.trials[start:])
        except KeyboardInterrupt:
            res.interrupted = True
        res.seconds = time.perf_counter() - t0
        return res


class FixedOrderTuner(Tuner):
    """Proposes configs in an order fixed up front; measurements change nothing."""

    def __init__(self, space: ConfigSpace, *, seed: int = 0) -> None:
        super().__init__(space, seed=seed)
        self._order = self.order()

    @abstractmethod
    def order(self) -> Sequence[KernelConfig]:
        """Every config of the space, in proposal order."""

    def next_batch(self, n: int) -> list[KernelConfig]:
        return [c for c in self._order if c not in self.visited][:n]


class GridTuner(FixedOrderTuner):
    """Enumerate the space in order (ALCOP's grid search)."""

    name = "grid"

    def order(self) -> Sequence[KernelConfig]:
        return self.space.configs


class RandomTuner(FixedOrderTuner):
    """Uniform random order, without repeats."""

    name = "random"

    def order(self) -> Sequence[KernelConfig]:
        return [self.space.configs[int(i)] for i in self.rng.permutation(len(self.space))]


class AnalyticalTuner(FixedOrderTuner):
    """Measure configs in the analytical model's order (ALCOP's "analytical only")."""

    name = "analytical"

    def order(self) -> Sequence[KernelConfig]:
        return self.space.ranked()


class ModelBasedTuner(Tuner):
    """Fit a cost model to every measurement, propose its maxima found by simulated annealing.

    Args:
        model: the cost model (refit after every batch).
        eps: fraction of each batch drawn at random (exploration, TVM's epsilon-greedy).
        random_start: whether the first batch is random (a model with no prior knows nothing).
    """

    def __init__(self, space: ConfigSpace, model: CostModel, *, seed: int = 0, eps: float = 0.05,
                 random_start: bool = False, optimizer: SimulatedAnnealingOptimizer | None = None) -> None:
        super().__init__(space, seed=seed)
        self.model, self.eps, self.random_start = model, eps, random_start
        self.optimizer = optimizer or SimulatedAnnealingOptimizer(space)

    def next_batch(self, n: int) -> list[KernelConfig]:
        free = [c for c in self.space.configs if c not in self.visited]
        if self.random_start and not self.model.trained:
            return [free[int(i)] for i in self.rng.choice(len(free), size=min(n, len(free)), replace=False)]
        # Explore only once something was measured: before that, the prior's best guesses are
        # worth more than random configs (and the 10-trial budget is what users feel).
        n_random = min(n, stochastic_round(self.eps * n, self.rng)) if self.trials else 0
        best_seen = [t.config for t in sorted(self.trials, key=lambda t: -t.throughput)[:16] if t.throughput > 0]
        picks = self.optimizer.find_maximums(self.model.predict, n - n_random, self.visited, self.rng, best_seen)
        # Exploration slots, and any the optimizer could not fill, get uniform random configs.
        chosen = set(picks)
        rest = [c for c in free if c not in chosen]
        k = min(len(rest), n - len(picks))
        if k > 0:
            picks += [rest[int(i)] for i in self.rng.choice(len(rest), size=k, replace=False)]
        return picks

    def update(self, trials: Sequence[Trial]) -> None:
        self.model.fit([t.config for t in self.trials], [t.throughput for t in self.trials])


class XGBTuner(ModelBasedTuner):
    """TVM's default: XGBoost learned from measurements only, random first batch, SA proposals."""

    name = "xgb"

    def __init__(self, space: ConfigSpace, *, seed: int = 0, eps: float = 0.05) -> None:
        super().__init__(space, XGBoostCostModel(space, pretrain=False, seed=seed), seed=seed, eps=eps,
                         random_start=True)


class AnalyticalXGBTuner(ModelBasedTuner):
    """ALCOP's method: XGBoost pretrained on the analytical model, refined with measurements."""

    name = "analytical+xgb"

    def __init__(self, space: ConfigSpace, *, seed: int = 0, eps: float = 0.05) -> None:
        super().__init__(space, XGBoostCostModel(space, pretrain=True, seed=seed), seed=seed, eps=eps)


_CLASSES: dict[str, type[Tuner]] = {"grid": GridTuner, "random": RandomTuner, "xgb": XGBTuner,
                                    "analytical": AnalyticalTuner, "analytical+xgb": AnalyticalXGBTuner}


def make_tuner(name: str, space: ConfigSpace, *, seed: int = 0) -> Tuner:
    """A tuner by name (one of TUNERS)."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise TuningError(f"tuner {name!r} is unknown; expected one of {TUNERS}") from None
    return cls(space, seed=seed)


__all__ = ["TUNERS", "Trial", "TuneResult", "Tuner", "FixedOrderTuner", "GridTuner", "RandomTuner", "AnalyticalTuner",
           "ModelBasedTuner", "XGBTuner", "AnalyticalXGBTuner", "make_tuner", "throughput"]
