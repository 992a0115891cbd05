"""One tuning run end to end: space -> tuner -> isolated measurement -> database, as results come.

Shared by ``alcop-tune tune``, ``ALCOP_AUTOTUNE=1`` dispatch and scripts. Every measurement is
committed to the database the moment it arrives, so Ctrl-C or a crash keeps what was measured and
a failed run leaves the database as it was plus the completed records.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..records import KernelConfig, Workload
from .database import GpuKey, TuningRecord, best_of, gpu_key, versions
from .dispatch import Decision, Dispatcher
from .measure import INTERPRETER_GPU, ErrorKind, MeasureResult, Measurer, ProcessMeasurer
from .precompile import DEFAULT_COMPILER, CompilePool, PrecompilingMeasurer, default_workers
from .space import ConfigSpace
from .store import TuningStore
from .timing import Timings
from .tuner import EarlyStop, Trial, TuneResult, make_tuner

SEED_BATCHES = 2
"""Batches of dispatch's configs (``Dispatcher.seeds``) a run measures before its tuner's own proposals:
the config an untuned call would run and the best scored candidates of the nearest measured shapes.
Dispatch's list runs to about 30 configs, most of a 50-trial budget, and its tail (the model's shortlist
and neighbours' weaker configs) is what the learned model proposes better once it has fitted the head."""


@dataclass(frozen=True)
class Target:
    """Where measurements run and under which key they are stored.

    ``spec`` is what the models prune and rank with; ``key`` is the database's GPU key. In the
    interpreter the two differ: configs are chosen for ``spec`` but CPU timings are stored under
    the ``interpreter`` key so they never rank kernels for a real GPU.
    """

    device: str
    spec: Any
    key: GpuKey
    device_name: str
    mma: str


def resolve_target(device: str | None = None, gpu: str | None = None) -> Target:
    """The device to measure on (cuda if available, else the CPU interpreter) and its GPU spec.

    Args:
        device: "cuda", "cuda:N" or "cpu"; None picks cuda when torch sees one.
        gpu: GPU name for the models (default: the detected GPU; "H100" in the interpreter).
    """
    import torch

    from ..model import hardware

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        index = torch.device(device).index
        spec = hardware.get_spec(gpu) if gpu else hardware.detect(index)
        return Target(device, spec, gpu_key(spec), torch.cuda.get_device_name(index), spec.mma)
    spec = hardware.get_spec(gpu or "H100")
    return Target(device, spec, GpuKey(*INTERPRETER_GPU), "cpu (triton interpreter)", "")


def decide(dispatcher: Dispatcher, workload: Workload, target: Target) -> Decision:
    """The config to run ``workload`` with on ``target``, as ``alcop-tune bench`` measures it: what
    ``tune`` stored for this target, else dispatch's choice for the target's spec.

    On a GPU the two are one query (the records' key is the spec's). In the interpreter they differ:
    ``tune`` stores CPU timings under ``target.key`` ("interpreter"), which dispatch, asked about the
    spec, never reads (they must not rank kernels for a real GPU); here they are read first, so a bench
    on the machine that tuned runs the tuned config.
    """
    if target.key != gpu_key(target.spec) and dispatcher.db.exists():
        found = best_of(dispatcher.db.records(workload, target.key), workload, target.key)
        if found is not None:
            return Decision(found.config, "db", f"{found.time_ms:.4g} ms over {found.count} run(s) on {target.key.name}",
                            found.time_ms)
    return dispatcher.decide(workload, target.spec)


def _history(db: TuningStore, workload: Workload, target: Target, vers: dict[str, str]) -> list[MeasureResult]:
    """Earlier results of this workload on this GPU and MMA path under the current versions."""
    if not db.exists():
        return []
    out: dict[Any, MeasureResult] = {}
    for r in db.records(workload, target.key):
        if r.alcop == vers["alcop"] and r.triton == vers["triton"] and r.mma == target.mma:
            # A failure anywhere marks the config failed, as dispatch will treat it.
            if r.config not in out or not r.ok:
                out[r.config] = MeasureResult(r.config, r.time_ms, ErrorKind(r.error) if r.error else None,
                                              r.message, r.timer)
    return list(out.values())


def tune(workload: Workload, target: Target, db: TuningStore, *, tuner: str = "analytical+xgb", n_trials: int = 50,
         batch_size: int = 8, seed: int = 0, variant: str = "full", top_k: int | float | None = None,
         timeout_s: float = 120.0, measurer: Measurer | None = None,
         on_trial: Callable[[Trial], None] | None = None, resume: bool = True,
         early_stop: EarlyStop | None = None, compile_workers: int | None = None,
         compiler: str = DEFAULT_COMPILER, seeding: bool = True) -> TuneResult:
    """Tune one workload and store every measurement in ``db`` as it arrives.

    Args:
        workload: what to tune.
        target: from ``resolve_target``.
        db: where records go (checked writable before anything is measured: DatabaseError otherwise).
        tuner: one of ``TUNERS``.
        n_trials: measurement budget.
        batch_size: configs proposed, compiled in parallel and measured per round.
        seed: makes proposals and check inputs reproducible.
        variant, top_k: space restrictions (``ConfigSpace.build``).
        timeout_s: a config that makes no progress for this long is recorded as ``timeout``.
        measurer: measure with this instead of an isolated child process (tests, replay).
        on_trial: called after each trial is stored (progress bars).
        resume: start from this GPU's earlier measurements of the workload (same alcop/triton
            versions): they are not measured again and ``n_trials`` new configs are tried.
        early_stop: end before ``n_trials`` by this rule (``tuner.EarlyStop``); None: never.
        compile_workers: processes compiling each batch (and the likely next one) before it is
            measured (``precompile.CompilePool``); None: every spare core on a GPU, none in the
            interpreter (nothing to compile) or with a given ``measurer``; 0: off.
        compiler: the pool's compile function, "module:function" (tests).
        seeding: measure what dispatch knows first (``Dispatcher.seeds`` over ``db`` and the shipped
            tables, up to ``SEED_BATCHES`` batches of the configs in the space), then the tuner's own
            proposals; False: the tuner alone (``alcop-tune tune --no-seed``).

    The result's ``timings`` split the call's wall time into ``space``, ``model``, ``compile``,
    ``measure`` and ``other`` (``timing.PHASES``; ``start`` is the caller's to add).
    """
    t_start = time.perf_counter()
    # An unreachable server or unwritable file fails the run here, before anything is measured.
    db.check_writable()
    timings = Timings()
    if compile_workers is None:
        compile_workers = default_workers() if measurer is None and target.device.startswith("cuda") else 0
    with contextlib.ExitStack() as stack:
        # Spawned first: the children import torch and triton while the space and models are built.
        pool = stack.enter_context(CompilePool(workload, target.device, workers=compile_workers, compiler=compiler,
                                               timeout_s=timeout_s)) if compile_workers > 0 else None
        if measurer is None:
            measurer = stack.enter_context(ProcessMeasurer(workload, target.device, seed=seed,
                                                           compile_threads=batch_size, timeout_s=timeout_s).start())
        with timings.phase("space"):
            space = ConfigSpace.build(workload, target.spec, variant=variant, top_k=top_k)
        seeds: list[KernelConfig] = []
        if seeding:
            with timings.phase("model"):
                seeds = [c for c in Dispatcher(db).seeds(workload, target.spec) if c in space][
                    : SEED_BATCHES * batch_size]
        if pool is not None:
            # The first batches: every seed, then (for the analytical tuners, where the seeds do not fill a
            # batch) the model's favourites. The workers compile them while the learned model is pretrained.
            with timings.phase("model"):
                first = list(seeds)
                if tuner in ("analytical", "analytical+xgb") and len(first) < batch_size:
                    # Ranked only when the seeds leave room: ranking runs the analytical model over the
                    # whole space, which the learned model's background thread does meanwhile otherwise.
                    first += [c for c in space.ranked()[:batch_size] if c not in first][: batch_size - len(first)]
                pool.submit(first)
        with timings.phase("model"):
            t = make_tuner(tuner, space, seed=seed, seed_configs=seeds)
        vers = versions()
        if resume:
            history = _history(db, workload, target, vers)
            with timings.phase("model"):
                t.warm_start(history)

        def store(trial: Trial) -> None:
            # A pool's worker names the device that measured the trial (``workers.py``).
            on = trial.result.measured_on
            db.add(TuningRecord.from_result(workload, trial.result, target.key,
                                            device=on.name if on is not None else target.device_name,
                                            mma=target.mma, vers=vers))
            if on_trial is not None:
                on_trial(trial)

        ahead = PrecompilingMeasurer(measurer, pool, lambda: t.upcoming) if pool is not None else None
        result = t.tune(ahead or measurer, n_trials, batch_size=batch_size, on_trial=store, early_stop=early_stop,
                        timings=timings)
        if ahead is not None:
            # The tuner timed the wrapper as a whole: its wait for the pool is compile time.
            timings.add("measure", -ahead.compile_s)
            timings.add("compile", ahead.compile_s)
    result.timings = timings.close(time.perf_counter() - t_start)
    return result
