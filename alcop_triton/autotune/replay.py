"""Offline replay: run any tuner against recorded measurements instead of a GPU.

A dataset is any set of JSONL files in the record format of ARCHITECTURE.md (``benchmarks/data``,
an ``alcop-tune export --format jsonl``). For each (GPU, workload) the recorded configs form the
space, ``ReplayMeasurer`` answers with what was recorded, and ``compare_tuners`` draws ALCOP's
best-in-k-trials curves: the best throughput a tuner found within its first k trials, divided by
the best in the whole recording (the exhaustive best), averaged over seeds for tuners that use
randomness (grid and analytical are deterministic and run once).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ..errors import TuningError, UnsupportedError
from ..records import KernelConfig, Workload
from .database import GpuKey, TuningRecord, atomic_write_text, rank_configs, read_jsonl
from .measure import ErrorKind, MeasureResult, OnResult
from .space import ConfigSpace
from .tuner import TUNERS, make_tuner

DETERMINISTIC = frozenset({"grid", "analytical"})


@dataclass(frozen=True)
class Task:
    """One replayable tuning problem: a workload on a GPU (and MMA path) and all measured for it."""

    gpu: GpuKey
    workload: Workload
    records: tuple[TuningRecord, ...]
    mma: str = ""

    @property
    def key(self) -> str:
        return f"{self.gpu.name}{'/' + self.mma if self.mma else ''}/{self.workload.key()}"


def load_tasks(paths: Iterable[str | os.PathLike[str]]) -> list[Task]:
    """Group the valid records of JSONL files by (GPU, MMA path, workload); corrupt lines are skipped."""
    return group_tasks(r for p in paths for r in read_jsonl(p))


def group_tasks(records: Iterable[TuningRecord]) -> list[Task]:
    """Records grouped by (GPU, MMA path, workload), as tasks in a stable order."""
    groups: dict[tuple[GpuKey, str, Workload], list[TuningRecord]] = {}
    for r in records:
        groups.setdefault((r.gpu_key, r.mma, r.workload), []).append(r)
    return [Task(g, w, tuple(rs), mma) for (g, mma, w), rs in
            sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2].key()))]


class ReplayMeasurer:
    """Answers measurements from records: the median recorded time, or the recorded failure.

    A config that failed in any recorded run fails here too (as dispatch would never pick it);
    a config absent from the recording is ``invalid_config``.
    """

    def __init__(self, workload: Workload, records: Sequence[TuningRecord]) -> None:
        self.workload = workload
        ok = {rc.config: rc.time_ms for rc in rank_configs(records)}
        self._best_ms = min(ok.values(), default=None)
        self._results: dict[KernelConfig, MeasureResult] = {}
        for r in records:
            if r.config in ok:
                self._results[r.config] = MeasureResult(r.config, ok[r.config], None, "", "replay")
            elif r.config not in self._results:
                self._results[r.config] = MeasureResult(r.config, None, ErrorKind(r.error or "runtime"),
                                                        r.message, "replay")

    @property
    def configs(self) -> list[KernelConfig]:
        return list(self._results)

    def best_time_ms(self) -> float | None:
        return self._best_ms

    def measure(self, configs: Sequence[KernelConfig], on_result: OnResult | None = None) -> list[MeasureResult]:
        out = []
        for c in configs:
            r = self._results.get(c) or MeasureResult(c, None, ErrorKind.INVALID_CONFIG, "not in the recorded data",
                                                      "replay")
            out.append(r)
            if on_result is not None:
                on_result(r)
        return out


def _spec_for(task: Task) -> Any | None:
    """The model's spec of the task's GPU on the MMA path it was measured with (None: unknown GPU)."""
    from ..model import hardware

    try:
        return hardware.get_spec(task.gpu.name, mma=task.mma or None)
    except (UnsupportedError, ValueError):
        return None


@dataclass
class Comparison:
    """Best-in-k curves: ``curves[tuner][task_key][k-1]`` = fraction of the exhaustive best."""

    k_max: int
    seeds: int
    curves: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    space_sizes: dict[str, int] = field(default_factory=dict)

    def mean_curve(self, tuner: str) -> list[float]:
        per_task = list(self.curves[tuner].values())
        return [statistics.fmean(c[k] for c in per_task) for k in range(self.k_max)] if per_task else []

    def at(self, tuner: str, k: int, task: str | None = None) -> float:
        """Normalised best within ``k`` trials (mean over tasks unless one is named)."""
        curve = self.curves[tuner][task] if task is not None else self.mean_curve(tuner)
        return curve[min(k, self.k_max) - 1]

    def table(self, budgets: Sequence[int] = (10, 50), per_task: bool = False) -> str:
        """Text table of normalised best-in-k per tuner (and per task if asked)."""
        budgets = [k for k in budgets if k <= self.k_max] or [self.k_max]
        head = f"{'tuner':<16}" + "".join(f"{'k=' + str(k):>9}" for k in budgets)
        lines = [head, "-" * len(head)]
        for t in self.curves:
            lines.append(f"{t:<16}" + "".join(f"{self.at(t, k):>9.1%}" for k in budgets))
        if per_task:
            for task in sorted(self.space_sizes):
                lines += ["", f"{task} ({self.space_sizes[task]} configs)"]
                for t in self.curves:
                    if task in self.curves[t]:
                        lines.append(f"  {t:<14}" + "".join(f"{self.at(t, k, task):>9.1%}" for k in budgets))
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"k_max": self.k_max, "seeds": self.seeds, "curves": self.curves,
                           "space_sizes": self.space_sizes}, indent=1)

    def save(self, path: str | os.PathLike[str]) -> None:
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Comparison":
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return cls(int(d["k_max"]), int(d["seeds"]), d["curves"], d.get("space_sizes", {}))


def replay_task(task: Task, tuner: str, k_max: int, seed: int, batch_size: int = 8) -> list[float]:
    """One tuner on one task: the normalised best-in-k curve for k = 1..k_max."""
    measurer = ReplayMeasurer(task.workload, task.records)
    best = measurer.best_time_ms()
    if best is None:
        raise TuningError(f"{task.key}: no successful measurement recorded; cannot normalise")
    space = ConfigSpace.from_configs(task.workload, measurer.configs, _spec_for(task))
    result = make_tuner(tuner, space, seed=seed).tune(measurer, min(k_max, len(space)), batch_size=batch_size)
    exhaustive = task.workload.flops / (best * 1e-3)
    curve = [x / exhaustive for x in result.curve()]
    # A space smaller than k_max has been searched exhaustively once the tuner stops.
    return curve + [curve[-1]] * (k_max - len(curve))


def _task_curves(task: Task, tuners: Sequence[str], k_max: int, seeds: int, batch_size: int
                 ) -> dict[str, list[float]]:
    """Seed-averaged curve per tuner for one task (one unit of parallel work)."""
    return {t: [statistics.fmean(col) for col in zip(*(replay_task(task, t, k_max, seed, batch_size)
                                                       for seed in range(1 if t in DETERMINISTIC else seeds)))]
            for t in tuners}


def compare_tuners(tasks: Sequence[Task], tuners: Sequence[str] = TUNERS, *, k_max: int = 50, seeds: int = 5,
                   batch_size: int = 8, jobs: int = 1, progress: Callable[[str], None] | None = None) -> Comparison:
    """Best-in-k curves of every tuner on every task (see the module docstring).

    Tasks with no successful record, and analytical tuners on GPUs without a model spec, are
    skipped with a warning. ``jobs`` > 1 replays tasks in that many processes (same results:
    every run is seeded).
    """
    unknown = [t for t in tuners if t not in TUNERS]
    if unknown:
        raise TuningError(f"tuners {unknown} are unknown; expected some of {TUNERS}")
    comp = Comparison(k_max, seeds, {t: {} for t in tuners})
    work: list[tuple[Task, list[str]]] = []
    for task in tasks:
        if not any(r.ok for r in task.records):
            warnings.warn(f"{task.key}: every recorded config failed; task skipped", stacklevel=2)
            continue
        comp.space_sizes[task.key] = len({r.config for r in task.records})
        runnable = list(tuners)
        if _spec_for(task) is None:
            runnable = [t for t in tuners if not t.startswith("analytical")]
            if runnable != list(tuners):
                warnings.warn(f"{task.key}: no GPU spec for {task.gpu.name!r}; analytical tuners skipped",
                              stacklevel=2)
        work.append((task, runnable))

    def collect(task: Task, curves: dict[str, list[float]]) -> None:
        for t, curve in curves.items():
            comp.curves[t][task.key] = curve
        if progress is not None:
            progress(task.key)

    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_task_curves, task, ts, k_max, seeds, batch_size): task for task, ts in work}
            for fut in as_completed(futures):
                collect(futures[fut], fut.result())
    else:
        for task, ts in work:
            collect(task, _task_curves(task, ts, k_max, seeds, batch_size))
    # Completion order varies with jobs; keep tasks in input order so output is reproducible.
    comp.curves = {t: {k: c[k] for k in comp.space_sizes if k in c} for t, c in comp.curves.items()}
    return comp
