"""Model optimizer: simulated annealing over a config space, maximising a cost model's score.

As in TVM's ``sa_model_optimizer``: parallel walkers start from random points (plus the best
configs measured so far), each step moves every walker to a neighbour (one knob changed,
``ConfigSpace.mutate``), accepts with probability ``exp((new - old) / T)`` under linear cooling,
and a top-k heap keeps the best unvisited configs seen by any walker. Scores are normalised by
the best initial score so the temperature is independent of the model's units.
"""

from __future__ import annotations

import heapq
import math
from typing import Callable, Iterable, Sequence

import numpy as np

from ..records import KernelConfig
from .space import ConfigSpace

Predict = Callable[[Sequence[KernelConfig]], np.ndarray]


class SimulatedAnnealingOptimizer:
    """Find configs with the highest predicted score.

    Args:
        space: where the walkers move.
        n_iter: annealing steps.
        temp: (start, end) temperature of the linear schedule, on normalised scores.
        parallel_size: number of walkers (one model call scores all of them per step).
        early_stop: stop when the top-k heap has not changed for this many steps.
        exhaustive_limit: spaces up to this size are scored in one model call instead: with a
            batched model that is both exact and faster than ``n_iter`` annealing steps (the learned
            model scores a whole space of ``cost_model.FULL_SCORING_LIMIT`` configs in one
            prediction; annealing featurized most of a 36k-config space anyway, config by config).
    """

    def __init__(self, space: ConfigSpace, *, n_iter: int = 150, temp: tuple[float, float] = (1.0, 0.0),
                 parallel_size: int = 128, early_stop: int = 30, exhaustive_limit: int = 50_000) -> None:
        self.space, self.n_iter, self.temp = space, n_iter, temp
        self.parallel_size, self.early_stop, self.exhaustive_limit = parallel_size, early_stop, exhaustive_limit
        self.knob_values = space.knob_values()  # what moves step along (``ConfigSpace.mutate``)

    def find_maximums(self, predict: Predict, num: int, exclude: set[KernelConfig], rng: np.random.Generator,
                      seeds: Iterable[KernelConfig] = ()) -> list[KernelConfig]:
        """Up to ``num`` configs not in ``exclude``, best predicted first."""
        configs = self.space.configs
        free = len(configs) - sum(c in self.space for c in exclude)
        num = min(num, free)
        if num <= 0:
            return []
        if len(configs) <= self.exhaustive_limit:
            scores = np.asarray(predict(configs), dtype=float)
            out: list[KernelConfig] = []
            for i in np.argsort(-scores, kind="stable"):  # best first, ties in space order
                if configs[i] not in exclude:
                    out.append(configs[i])
                    if len(out) == num:
                        break
            return out
        start = [c for c in seeds if c in self.space][: self.parallel_size // 2]
        picks = rng.choice(len(configs), size=self.parallel_size - len(start), replace=len(configs) < self.parallel_size)
        points = start + [configs[int(i)] for i in picks]
        scores = np.asarray(predict(points), dtype=float)
        scale = max(float(np.max(np.abs(scores))), 1e-12)
        heap: list[tuple[float, int, KernelConfig]] = []  # min-heap of (score, tiebreak, config)
        in_heap: set[KernelConfig] = set()

        def offer(c: KernelConfig, s: float) -> bool:
            if c in exclude or c in in_heap:
                return False
            item = (s, -self.space.index(c), c)
            if len(heap) < num:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                in_heap.discard(heapq.heapreplace(heap, item)[2])
            else:
                return False
            in_heap.add(c)
            return True

        for c, s in zip(points, scores):
            offer(c, float(s))
        t0, t1 = self.temp
        quiet = 0
        for step in range(self.n_iter):
            t = t0 + (t1 - t0) * step / max(1, self.n_iter - 1)
            moved = [self.space.mutate(c, rng, self.knob_values) for c in points]
            new_scores = np.asarray(predict(moved), dtype=float)
            changed = False
            for c, s in zip(moved, new_scores):
                changed |= offer(c, float(s))
            delta = (new_scores - scores) / scale
            with np.errstate(over="ignore"):
                accept = rng.random(len(points)) < np.exp(np.minimum(delta / (t + 1e-5), 0.0))
            points = [m if a else p for m, p, a in zip(moved, points, accept)]
            scores = np.where(accept, new_scores, scores)
            quiet = 0 if changed else quiet + 1
            if quiet >= self.early_stop:
                break
        best = sorted(heap, reverse=True)
        out = [c for _, _, c in best]
        if len(out) < num:
            # Walkers stayed in a small region: top up with the best-scored unvisited remainder.
            rest = [c for c in configs if c not in exclude and c not in in_heap]
            if rest:
                s = predict(rest)
                out += [rest[i] for i in sorted(range(len(rest)), key=lambda i: (-s[i], i))[: num - len(out)]]
        return out


def stochastic_round(x: float, rng: np.random.Generator) -> int:
    """floor(x) plus one with probability frac(x): an unbiased integer count (for epsilon-greedy)."""
    f = math.floor(x)
    return f + int(rng.random() < x - f)
