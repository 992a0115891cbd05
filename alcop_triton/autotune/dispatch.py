"""``best_config(workload, gpu_spec)``: the config a kernel call uses, without tuning at call time.

Lookup order (the first that answers wins; the answer is cached in memory, so a repeated call is
a dict lookup):

1. the user's tuning database (``$ALCOP_DB``): fastest config measured for exactly this workload;
2. the shipped default tables (``alcop_triton/data/default_*.jsonl``, measured by the maintainers
   on real GPUs, same record format): same query;
3. with ``ALCOP_AUTOTUNE=1`` only: tune now with a small budget, store, use the winner;
4. the nearest tuned shape (log-space distance of the GEMM dims, same op/dtype/GPU) in either
   source: its fastest configs re-ranked by the analytical model for *this* shape;
5. the analytical model's top-1 over the whole (resource-pruned) space.

A configuration that failed on this GPU in any recorded run is never returned (``rank_configs``).
"""

from __future__ import annotations

import importlib.resources
import math
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from ..errors import DatabaseError
from ..records import KernelConfig, Workload
from .database import Database, GpuKey, TuningRecord, best_of, gpu_key, mma_of, nearest_of, read_jsonl

AUTOTUNE_TRIALS = 16
"""Budget of call-time tuning under ``ALCOP_AUTOTUNE=1``: small, since the caller is waiting."""


@dataclass(frozen=True)
class Decision:
    """A dispatched config and where it came from ("db", "default", "tuned", "nearest", "analytical")."""

    config: KernelConfig
    source: str
    detail: str = ""


def default_tables() -> list[TuningRecord]:
    """Records of every shipped ``alcop_triton/data/default_*.jsonl`` (none if absent)."""
    root = importlib.resources.files("alcop_triton").joinpath("data")
    out: list[TuningRecord] = []
    if not root.is_dir():
        return out
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.startswith("default_") and entry.name.endswith(".jsonl"):
            with importlib.resources.as_file(entry) as path:
                out += read_jsonl(path)
    return out


def rerank(workload: Workload, configs: list[KernelConfig], spec: Any) -> KernelConfig | None:
    """The analytically fastest of ``configs`` for ``workload``, among those the model deems valid."""
    from ..model import analytical

    best: tuple[float, int] | None = None
    for i, c in enumerate(configs):
        if not analytical.resources(workload, c, spec).valid:
            continue
        e = analytical.estimate(workload, c, spec)
        if e.valid and math.isfinite(e.time_s) and (best is None or (e.time_s, i) < best):
            best = (e.time_s, i)
    return configs[best[1]] if best is not None else None


class Dispatcher:
    """best_config with its caches; one per database (``dispatch.best_config`` uses a shared one).

    Args:
        db: the user's database; None = ``Database()`` (``$ALCOP_DB`` or the default path). A
            missing file is not created by lookups.
        use_defaults: consult the shipped default tables.
    """

    def __init__(self, db: Database | None = None, *, use_defaults: bool = True) -> None:
        self.db = db if db is not None else Database()
        self.use_defaults = use_defaults
        self._cache: dict[tuple[Workload, GpuKey, str], Decision] = {}
        self._defaults: list[TuningRecord] | None = None
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget cached decisions (e.g. after another process tuned)."""
        with self._lock:
            self._cache.clear()
            self._defaults = None

    def best_config(self, workload: Workload, gpu_spec: Any) -> KernelConfig:
        hit = self._cache.get((workload, gpu_key(gpu_spec), mma_of(gpu_spec)))
        if hit is not None:
            return hit.config
        return self.decide(workload, gpu_spec).config

    def decide(self, workload: Workload, gpu_spec: Any) -> Decision:
        """Like best_config, but says where the config came from (cached too)."""
        key = (workload, gpu_key(gpu_spec), mma_of(gpu_spec))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._decide(workload, gpu_spec)
            with self._lock:
                self._cache[key] = hit
        return hit

    def _db_records(self, **query: Any) -> list[TuningRecord]:
        if not self.db.path.exists():
            return []
        try:
            return self.db.records(**query)
        except DatabaseError as exc:
            # A broken user database must not break kernel calls: fall back to shipped data.
            warnings.warn(f"tuning database unusable, ignored: {exc}", stacklevel=4)
            return []

    def _default_records(self) -> list[TuningRecord]:
        if not self.use_defaults:
            return []
        if self._defaults is None:
            try:
                self._defaults = default_tables()
            except OSError as exc:  # an unreadable installed file; its bad lines are skipped by read_jsonl
                warnings.warn(f"shipped default tuning tables unreadable, ignored: {exc}", stacklevel=4)
                self._defaults = []
        return self._defaults

    def _decide(self, workload: Workload, spec: Any) -> Decision:
        # The spec (not just its GpuKey) is passed down so records of another MMA path are ignored.
        mine = self._db_records(workload=workload, gpu=spec)
        found = best_of(mine, workload, spec)
        if found is not None:
            return Decision(found.config, "db", f"{found.time_ms:.4g} ms over {found.count} run(s)")
        found = best_of(self._default_records(), workload, spec)
        if found is not None:
            return Decision(found.config, "default", f"{found.time_ms:.4g} ms")
        if os.environ.get("ALCOP_AUTOTUNE", "0").strip().lower() in ("1", "true", "yes", "on"):
            tuned = self._tune(workload, spec)
            if tuned is not None:
                return tuned
        pool = self._db_records(gpu=spec, op=workload.op, dtype=workload.dtype) + self._default_records()
        near = nearest_of(pool, workload, spec)
        if near is not None:
            config = rerank(workload, [rc.config for rc in near[1]], spec)
            if config is not None:
                return Decision(config, "nearest", f"re-ranked top configs of {near[0].key()}")
        from .space import ConfigSpace

        return Decision(ConfigSpace.build(workload, spec).ranked()[0], "analytical", "model top-1")

    def _tune(self, workload: Workload, spec: Any) -> Decision | None:
        from . import session

        target = session.resolve_target(None)
        if (target.key, target.mma) != (gpu_key(spec), mma_of(spec)):
            # Measuring on another device (or MMA path) than the one asked about would store wrong data.
            return None
        result = session.tune(workload, session.Target(target.device, spec, target.key, target.device_name,
                                                         target.mma), self.db, n_trials=AUTOTUNE_TRIALS)
        best = result.best
        return Decision(best.config, "tuned", f"{best.result.time_ms:.4g} ms") if best is not None else None


_shared: dict[str | None, Dispatcher] = {}


def dispatcher() -> Dispatcher:
    """The process-wide Dispatcher of the current ``$ALCOP_DB`` (one per value, created on first use)."""
    env = os.environ.get("ALCOP_DB")
    d = _shared.get(env)
    if d is None:
        d = _shared.setdefault(env, Dispatcher())
    return d


def best_config(workload: Workload, gpu_spec: Any = None) -> KernelConfig:
    """The config to run ``workload`` with on ``gpu_spec`` (None: the current CUDA device).

    Never tunes unless ``ALCOP_AUTOTUNE=1``; see the module docstring for the lookup order.
    """
    if gpu_spec is None:
        from ..model import hardware

        gpu_spec = hardware.detect()
    return dispatcher().best_config(workload, gpu_spec)
