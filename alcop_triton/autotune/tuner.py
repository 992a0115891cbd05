"""Tuners under a trial budget (ALCOP Table 2), TVM style: tuner / cost model / optimizer apart.

=================  ===============  ==============  ===================  ==========================
tuner              cost model       prior           model updated        proposals
=================  ===============  ==============  ===================  ==========================
``grid``           none             no              no                   enumerate in space order
``random``         none             no              no                   uniform, without repeats
``xgb``            XGBoost          no              yes, per batch       model's top (*)
``analytical``     analytical       yes             no                   model ranking
``analytical+xgb`` XGBoost          analytical      yes, per batch       model's top (*) + eps
=================  ===============  ==============  ===================  ==========================

(*) the whole space scored in one prediction up to ``optimizer``'s ``exhaustive_limit`` (50k configs:
every GEMM space so far), simulated annealing beyond.

Local slots (``LOCAL_SLOTS``): once 16 trials are measured, half of each batch of the model-based tuners
goes to the model's best unmeasured neighbours of the fastest measured configs (one knob moved to an
adjacent value), the other half to the model's maxima.

Failed trials are kept and scored 0 (TVM does the same) so the learned model learns where the
invalid regions are; they are never reported as best. Every tuner is deterministic given its seed.

Seeds (``seed_configs``): configs every tuner proposes first, in the order given, before its own
proposals: ``session.tune`` passes what dispatch knows about the workload (``Dispatcher.seeds``:
the config an untuned call would run, then the best configs of the nearest measured shapes), so a
tuned result is never slower than the untuned call (up to timing noise). Seeds outside the space
(rejected by the shape rules, the resource model or a ``top_k``) are skipped; a seed is measured
once, like any trial, and a learned model fits its measurement with the rest.

Early stop (``EarlyStop``, on by default in ``alcop-tune tune``): after a batch, a run ends before
its budget when both hold:

1. stalled: the best time has not improved by more than ``min_gain`` over the last ``patience``
   trials (and at least ``min_trials`` were measured, seeds included: a good seed found first makes
   the rule fire as soon as ``min_trials`` allows, which is what seeding is for);
2. unlikely to beat: no config of the batch the tuner would propose next is predicted faster than
   the best measured time, where a config's prediction is its analytical time scaled by the most
   favourable ratio of measured to analytical time among this run's valid trials (the model's
   error as it was seen on this workload, at its most optimistic).

The learned models' scores are ranks, not times, and measured and unmeasured configs are labelled
on different scales, so the second test uses the analytical model's times, which it calibrates
with the measurements. A space without a GPU spec (no analytical model) never stops early.
"""

from __future__ import annotations

import math
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
from .timing import Timings

TUNERS: tuple[str, ...] = ("grid", "random", "xgb", "analytical", "analytical+xgb")

LOCAL_SLOTS = 4
"""Slots of each of a model-based tuner's batches, from ``LOCAL_AFTER`` trials on, for the unvisited neighbours
of the fastest measured configs (``ConfigSpace.neighbours``: one knob moved to an adjacent value), ranked by
the model. A learned model fits a few dozen measurements of a space of hundreds, and a knob it is unsure of
near the best (a pipeline one stage deeper, a reduction chunk twice as long) is often what the last percent
needs. Replayed on the four recorded H100 grids (``alcop-tune compare-tuners``, 5 seeds, analytical+xgb),
best within 50 trials over the grids' best: 98.5/99.8/98.4/98.5% without these slots, 99.1/99.9/99.1/99.0%
with four of eight (ablation, dense + bmm, mma.sync ablation, ALCOP space); 10 trials unchanged, and from 20
trials on never lower than with two or three slots (``docs/decisions.md#d07``)."""
LOCAL_FROM = 2
"""How many of the fastest measured configs the local slots look around."""
LOCAL_AFTER = 16
"""Trials measured (seeds included) before the local slots open: the first batches are the prior's best
guesses, which is what a budget of ten trials needs."""

LOOKAHEAD_BATCHES = 2
"""Batches of likely next proposals a tuner names as ``upcoming`` (compiled ahead while a batch is measured):
two batches of eight keep a 16-core host's compile workers busy, and a refit model's next batch often
differs from the one it was guessed from."""


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


@dataclass(frozen=True)
class EarlyStop:
    """When a run may end before its trial budget (the module docstring states the rule).

    Args:
        patience: trials without an improvement of more than ``min_gain`` before stopping is considered.
        min_gain: relative improvement of the best time that counts as progress (0.01: 1 %).
        min_trials: trials this run measures at least, seeds included (a run seeded with 16 configs
            measures at least ``min_trials - 16`` of its tuner's own).

    The defaults come from replaying ``analytical+xgb`` with a budget of 50 on the recorded H100 grids
    (``benchmarks/early_stop_replay.py``; the decision and its numbers: ``docs/decisions.md#d08``):
    38 instead of 50 trials on average, for a best time 0.2 % slower on average (4.6 % on the worst
    workload); a patience of 16 from trial 16 on saved more trials but lost up to 7 % on a workload.
    """

    patience: int = 16
    min_gain: float = 0.01
    min_trials: int = 32

    def __post_init__(self) -> None:
        if self.patience < 1 or self.min_trials < 1 or not 0 <= self.min_gain < 1:
            raise ScheduleError(f"{self}: patience and min_trials must be >= 1, min_gain in [0, 1)")

    def stalled(self, trials: Sequence[Trial]) -> bool:
        """Whether the best throughput of ``trials`` (in order) gained at most ``min_gain`` in the last ``patience``."""
        if len(trials) < max(self.min_trials, self.patience + 1):
            return False
        before = max((t.throughput for t in trials[: -self.patience]), default=0.0)
        after = max(t.throughput for t in trials)
        return before > 0 and after <= before * (1 + self.min_gain)


@dataclass
class TuneResult:
    workload: Workload
    tuner: str
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False
    early_stopped: bool = False  # ended before its budget by ``EarlyStop``
    seed_trials: int = 0  # trials that measured a seed config (``Tuner.seed_configs``)
    best_is_seed: bool = False  # the best trial measured a seed: the tuner's own proposals found nothing faster
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase (``timing.PHASES``)

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

    def __init__(self, space: ConfigSpace, *, seed: int = 0, seed_configs: Sequence[KernelConfig] = ()) -> None:
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.visited: set[KernelConfig] = set()
        self.trials: list[Trial] = []
        # Configs the next batch will probably hold, named by ``next_batch``: compiled ahead while
        # the current batch is measured.
        self.upcoming: list[KernelConfig] = []
        given = list(dict.fromkeys(seed_configs))
        self.seed_configs = [c for c in given if c in space]
        self.skipped_seeds = [c for c in given if c not in space]  # outside the space: never proposed

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, n: int) -> list[KernelConfig]:
        """Up to ``n`` unvisited configs to measure next: pending seeds first, then the tuner's own
        ``propose`` (which sets ``upcoming``; seeds still pending lead it). A batch of the last seeds
        names the analytical model's best unvisited configs as upcoming (where the space has a GPU
        spec): the tuner's first proposals, made after these are measured, lean on the same prior."""
        pending = [c for c in self.seed_configs if c not in self.visited]
        batch = pending[:n]
        # Marked at once so that ``propose`` does not pick them too (``tune`` marks the whole batch as well).
        self.visited.update(batch)
        if len(batch) < n:
            batch += self.propose(n - len(batch))
        elif len(pending) <= n and self.space.spec is not None:
            self.upcoming = [c for c in self.space.ranked()[: LOOKAHEAD_BATCHES * n + len(self.visited)]
                             if c not in self.visited]
        else:
            self.upcoming = []
        self.upcoming = (pending[n:] + self.upcoming)[: LOOKAHEAD_BATCHES * n]
        return batch

    @abstractmethod
    def propose(self, n: int) -> list[KernelConfig]:
        """Up to ``n`` unvisited configs chosen by the tuner (and sets ``upcoming``)."""

    def best_is_ahead(self, proposals: Sequence[KernelConfig]) -> bool:
        """Whether no config of ``proposals`` is predicted faster than the best measured one (rule 2 of
        the module docstring); False without an analytical model or a valid measurement."""
        if self.space.spec is None:
            return False
        est = self.space.estimates()
        ratios = [t.result.time_ms * 1e-3 / est[self.space.index(t.config)] for t in self.trials
                  if t.result.ok and t.result.time_ms and t.config in self.space
                  and math.isfinite(est[self.space.index(t.config)])]
        if not ratios:
            return False
        best_s = min(t.result.time_ms for t in self.trials if t.result.ok and t.result.time_ms) * 1e-3
        optimistic = min(ratios)
        return all(est[self.space.index(c)] * optimistic >= best_s for c in proposals)

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
             on_trial: Callable[[Trial], None] | None = None, early_stop: EarlyStop | None = None,
             timings: Timings | None = None) -> TuneResult:
        """Measure up to ``n_trials`` new configs; ``on_trial`` sees each as it is measured.

        Ctrl-C stops early: the trials measured so far are returned with ``interrupted=True``
        (and were already passed to ``on_trial``, e.g. written to the database). ``early_stop``
        may end the run before ``n_trials`` (``early_stopped=True``); ``timings`` gets the time of
        proposals and model updates as ``model`` and of the measurer as ``measure``.
        """
        if n_trials < 1 or batch_size < 1:
            raise ScheduleError(f"n_trials={n_trials}, batch_size={batch_size}: both must be >= 1")
        res = TuneResult(self.space.workload, self.name)
        clock = timings if timings is not None else Timings()
        t0 = time.perf_counter()

        def record(r: MeasureResult) -> None:
            t = Trial(len(self.trials), r, throughput(self.space.workload, r))
            self.trials.append(t)
            res.trials.append(t)
            if on_trial is not None:
                on_trial(t)

        try:
            proposed: list[KernelConfig] | None = None
            while len(res.trials) < n_trials and self.has_next():
                with clock.phase("model"):
                    batch = proposed if proposed is not None else self.next_batch(
                        min(batch_size, n_trials - len(res.trials)))
                    proposed = None
                if not batch:
                    break
                self.visited.update(batch)
                start = len(self.trials)
                with clock.phase("measure"):
                    measurer.measure(batch, on_result=record)
                with clock.phase("model"):
                    self.update(self.trials[start:])
                    if early_stop is not None and len(res.trials) < n_trials and self.has_next() \
                            and early_stop.stalled(res.trials):
                        # The next batch, proposed by the updated model (and measured next if the run goes on).
                        proposed = self.next_batch(min(batch_size, n_trials - len(res.trials)))
                        if self.best_is_ahead(proposed):
                            res.early_stopped = True
                            break
        except KeyboardInterrupt:
            res.interrupted = True
        seeds = set(self.seed_configs)
        res.seed_trials = sum(t.config in seeds for t in res.trials)
        res.best_is_seed = res.best is not None and res.best.config in seeds
        res.seconds = time.perf_counter() - t0
        return res


class FixedOrderTuner(Tuner):
    """Proposes configs in an order fixed up front; measurements change nothing."""

    def __init__(self, space: ConfigSpace, *, seed: int = 0, seed_configs: Sequence[KernelConfig] = ()) -> None:
        super().__init__(space, seed=seed, seed_configs=seed_configs)
        self._order = self.order()

    @abstractmethod
    def order(self) -> Sequence[KernelConfig]:
        """Every config of the space, in proposal order."""

    def propose(self, n: int) -> list[KernelConfig]:
        ahead = [c for c in self._order if c not in self.visited][: (1 + LOOKAHEAD_BATCHES) * n]
        self.upcoming = ahead[n:]
        return ahead[:n]


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
    """Fit a cost model to every measurement, propose its maxima (``optimizer.SimulatedAnnealingOptimizer``:
    the whole space scored at once where it is small enough, simulated annealing beyond).

    Args:
        model: the cost model (refit after every batch).
        eps: fraction of each batch drawn at random (exploration, TVM's epsilon-greedy).
        random_start: whether the first batch is random (a model with no prior knows nothing).
    """

    def __init__(self, space: ConfigSpace, model: CostModel, *, seed: int = 0, eps: float = 0.05,
                 random_start: bool = False, optimizer: SimulatedAnnealingOptimizer | None = None,
                 seed_configs: Sequence[KernelConfig] = ()) -> None:
        super().__init__(space, seed=seed, seed_configs=seed_configs)
        self.model, self.eps, self.random_start = model, eps, random_start
        self.optimizer = optimizer or SimulatedAnnealingOptimizer(space)

    def propose(self, n: int) -> list[KernelConfig]:
        if self.random_start and not self.model.trained:
            free = [c for c in self.space.configs if c not in self.visited]
            return [free[int(i)] for i in self.rng.choice(len(free), size=min(n, len(free)), replace=False)]
        # Explore only once something was measured: before that, the prior's best guesses are
        # worth more than random configs (and the 10-trial budget is what users feel).
        n_random = min(n, stochastic_round(self.eps * n, self.rng)) if self.trials else 0
        best_seen = [t.config for t in sorted(self.trials, key=lambda t: -t.throughput)[:16] if t.throughput > 0]
        local = self._local(min(LOCAL_SLOTS, n - n_random), best_seen[:LOCAL_FROM]) \
            if len(self.trials) >= LOCAL_AFTER else []
        n_model = n - n_random - len(local)
        # More maxima than needed: the rest are the likely members of the next batches.
        ranked = self.optimizer.find_maximums(self.model.predict, (1 + LOOKAHEAD_BATCHES) * n_model,
                                              self.visited | set(local), self.rng, best_seen)
        picks, self.upcoming = local + ranked[:n_model], ranked[n_model:]
        # Exploration slots, and any the optimizer could not fill, get uniform random configs.
        if len(picks) < n:  # (the unvisited remainder is listed only then: a pass over the whole space)
            chosen = set(picks)
            rest = [c for c in self.space.configs if c not in self.visited and c not in chosen]
            k = min(len(rest), n - len(picks))
            if k > 0:
                picks += [rest[int(i)] for i in self.rng.choice(len(rest), size=k, replace=False)]
        return picks

    def _local(self, n: int, incumbents: Sequence[KernelConfig]) -> list[KernelConfig]:
        """Up to ``n`` unvisited neighbours of the ``incumbents`` (the fastest measured configs, one knob
        moved to an adjacent value), the model's best first."""
        if n <= 0 or not incumbents:
            return []
        values = self.optimizer.knob_values
        near = list(dict.fromkeys(c for inc in incumbents for c in self.space.neighbours(inc, values)
                                  if c not in self.visited))
        if not near:
            return []
        scores = np.asarray(self.model.predict(near), dtype=float)
        return [near[int(i)] for i in np.argsort(-scores, kind="stable")[:n]]

    def update(self, trials: Sequence[Trial]) -> None:
        self.model.fit([t.config for t in self.trials], [t.throughput for t in self.trials])


class XGBTuner(ModelBasedTuner):
    """TVM's default: XGBoost learned from measurements only, random first batch, SA proposals."""

    name = "xgb"

    def __init__(self, space: ConfigSpace, *, seed: int = 0, eps: float = 0.05,
                 seed_configs: Sequence[KernelConfig] = ()) -> None:
        super().__init__(space, XGBoostCostModel(space, pretrain=False, seed=seed), seed=seed, eps=eps,
                         random_start=True, seed_configs=seed_configs)


class AnalyticalXGBTuner(ModelBasedTuner):
    """ALCOP's method: XGBoost pretrained on the analytical model, refined with measurements."""

    name = "analytical+xgb"

    def __init__(self, space: ConfigSpace, *, seed: int = 0, eps: float = 0.05,
                 seed_configs: Sequence[KernelConfig] = ()) -> None:
        super().__init__(space, XGBoostCostModel(space, pretrain=True, seed=seed), seed=seed, eps=eps,
                         seed_configs=seed_configs)


_CLASSES: dict[str, type[Tuner]] = {"grid": GridTuner, "random": RandomTuner, "xgb": XGBTuner,
                                    "analytical": AnalyticalTuner, "analytical+xgb": AnalyticalXGBTuner}


def make_tuner(name: str, space: ConfigSpace, *, seed: int = 0, seed_configs: Sequence[KernelConfig] = ()) -> Tuner:
    """A tuner by name (one of TUNERS), proposing ``seed_configs`` first (the module docstring)."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise TuningError(f"tuner {name!r} is unknown; expected one of {TUNERS}") from None
    return cls(space, seed=seed, seed_configs=seed_configs)


__all__ = ["TUNERS", "EarlyStop", "Trial", "TuneResult", "Tuner", "FixedOrderTuner", "GridTuner", "RandomTuner", "AnalyticalTuner",
           "ModelBasedTuner", "XGBTuner", "AnalyticalXGBTuner", "make_tuner", "throughput"]
