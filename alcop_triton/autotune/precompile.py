"""Compile a workload's candidate configs ahead of measurement, in worker processes.

Compiling a config (alcop's lowering and code generation, then Triton's frontend, LLVM and ptxas)
takes 1-3 s of CPU, much of it under the GIL, so the measurement process's compile threads run
nearly one at a time. A ``CompilePool`` spreads the compiles of a batch over worker processes (one
per spare core) before the batch is measured: each worker binds the config's kernel to
uninitialised device tensors of the workload's own shapes and strides, so Triton specialises it
exactly as for the measured call, and compiles it without launching it (``Launch.compile``). The
measurement process then finds every kernel in Triton's on-disk cache. The cache is keyed by the
kernel source (the same for every shape: sizes are runtime arguments) and the specialisation
(which sizes and strides divide by 16), so a config compiled for one shape also serves the next
shape with the same divisibility.

Failures here are not recorded: the measurement process meets the same config again, in its
isolated child, and records what goes wrong there. A worker that dies (a compiler crash) breaks
the pool; it is restarted for the next batch.

This module imports neither torch nor triton at import time (``measure.py`` says why).
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, Callable, Iterable, Sequence

from ..records import KernelConfig, Workload
from .measure import child_setup, helper_context, resolve_factory, started, starting, take_setup

DEFAULT_COMPILER = "alcop_triton.autotune.precompile:compile_config"

_INPUTS: dict[tuple[Workload, str], tuple[Any, ...]] = {}  # per worker: the workload's uninitialised inputs


def compile_config(workload: Workload, config: KernelConfig, device: str) -> None:
    """Compile ``config``'s kernel for ``workload``'s inputs on ``device`` without running it."""
    import torch

    from .measure import DEFAULT_FACTORY

    runner = resolve_factory(DEFAULT_FACTORY)(workload, config, "meta")
    key = (workload, device)
    if key not in _INPUTS:
        _INPUTS[key] = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
                             for t in runner.inputs(0))
    launch, _ = runner.bind(_INPUTS[key])
    if launch is not None:
        launch.compile()


def default_workers() -> int:
    """Spare cores: all but two (this process and the measurement process)."""
    return max(1, (os.cpu_count() or 1) - 2)


def _warm(compiler: str, device: str) -> None:
    """Import what compiling needs (torch, triton, the kernels) and open the device once per worker,
    while the tuning process builds its space and model."""
    from .measure import DEFAULT_FACTORY

    resolve_factory(compiler)
    resolve_factory(DEFAULT_FACTORY)
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        torch.empty(1, device=device)


def _compile(compiler: str, workload: dict[str, Any], config: dict[str, Any], device: str) -> str | None:
    """Run ``compiler`` on one (workload, config); the error text if it raised."""
    try:
        resolve_factory(compiler)(Workload.from_dict(workload), KernelConfig.from_dict(config), device)
    except Exception as exc:  # noqa: BLE001 - the measurement process records it
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


class CompilePool:
    """Worker processes compiling one workload's configs (see the module docstring).

    Args:
        workload, device: what the configs are compiled for.
        workers: processes (``default_workers()``: every spare core).
        compiler: "module:function" with ``compile_config``'s signature (tests pass their own).
        timeout_s: longest wait for a batch; what is not compiled by then is left to the measurer.
    """

    def __init__(self, workload: Workload, device: str, *, workers: int | None = None,
                 compiler: str = DEFAULT_COMPILER, timeout_s: float = 120.0) -> None:
        self.workload, self.device, self.compiler, self.timeout_s = workload, device, compiler, timeout_s
        self.workers = max(1, workers if workers is not None else default_workers())
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[KernelConfig, Future[str | None]] = {}
        self.errors: dict[KernelConfig, str] = {}
        self._ended: set[KernelConfig] = set()  # configs whose compile ended (counted in compiled or errors)
        self._starting: Future[None] | None = None  # ``start``'s workers, being made (``measure.starting``)
        self.compiled = 0

    def __enter__(self) -> "CompilePool":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> "CompilePool":
        """Start the workers now (``measure.starting``): their start overlaps the caller's space build and
        model training; the first use waits for it."""
        if self._pool is None and self._starting is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=helper_context(self.device),
                                             initializer=take_setup, initargs=(child_setup(),))
            pool = self._pool

            def warm_every_worker() -> None:  # each submit makes a worker (on demand) until there are enough
                for _ in range(self.workers):
                    pool.submit(_warm, self.compiler, self.device)
            self._starting = starting(self.device, warm_every_worker)
        return self

    def _started(self) -> None:
        starting, self._starting = self._starting, None
        started(starting)

    def submit(self, configs: Iterable[KernelConfig]) -> None:
        """Queue compiles of the configs not queued yet (returns at once once the workers are started)."""
        self.start()
        self._started()
        assert self._pool is not None
        wd = self.workload.to_dict()
        for c in configs:
            if c not in self._futures:
                try:
                    self._futures[c] = self._pool.submit(_compile, self.compiler, wd, c.to_dict(), self.device)
                except RuntimeError:  # a broken pool refuses work: restart it
                    self._restart()
                    self._futures[c] = self._pool.submit(_compile, self.compiler, wd, c.to_dict(), self.device)

    def wait(self, configs: Sequence[KernelConfig], *, first: bool = False) -> list[KernelConfig]:
        """Compile ``configs`` (queuing those not queued) and return those whose compile ended: all of
        them, or with ``first`` as soon as one has. After ``timeout_s`` without that, every config is
        returned: what is not compiled by then is left to the measurer."""
        self.submit(configs)
        futures = {self._futures[c]: c for c in configs}
        done, _ = wait_futures(futures, timeout=self.timeout_s, return_when=FIRST_COMPLETED if first else ALL_COMPLETED)
        if not done:
            return list(configs)
        broken = False
        for f in done:
            c = futures[f]
            if c in self._ended:
                continue
            self._ended.add(c)
            try:
                err = f.result()
            except Exception as exc:  # noqa: BLE001 - BrokenProcessPool: a worker died
                err, broken = f"compile worker died: {type(exc).__name__}", True
            if err is None:
                self.compiled += 1
            else:
                self.errors[c] = err
        if broken:
            self._restart()
        return [c for c in configs if c in self._ended] if first else list(configs)

    def _restart(self) -> None:
        """A fresh pool; configs whose compile was lost with the old one may be queued again."""
        self._stop()
        self._futures = {c: f for c, f in self._futures.items() if f.done() and f.exception() is None}
        self.start()

    def _stop(self) -> None:
        with contextlib.suppress(Exception):  # a start that failed leaves only the pool to shut down
            self._started()
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # A hung compile must not hold the tuning run: stop waiting for the workers and end them.
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            if p.is_alive():
                p.kill()
        for p in processes:
            p.join(timeout=5)

    def close(self) -> None:
        self._stop()


Lookahead = Callable[[], Sequence[KernelConfig]]


class PrecompilingMeasurer:
    """A measurer whose configs are compiled by a ``CompilePool`` first.

    A batch is measured as its compiles end: each wait returns the configs compiled so far, which are
    measured while the workers compile the rest. After the first of a batch is ready, the configs
    ``lookahead()`` names (what the tuner would propose next) are queued, so the workers compile the
    next batch's likely members while this one is measured. ``compile_s`` and ``measure_s`` add up
    the time spent waiting on each.
    """

    def __init__(self, inner: Any, pool: CompilePool, lookahead: Lookahead | None = None) -> None:
        self.inner, self.pool, self.lookahead = inner, pool, lookahead
        self.workload: Workload = inner.workload
        self.compile_s = 0.0
        self.measure_s = 0.0

    def measure(self, configs: Sequence[KernelConfig], on_result: Any = None) -> list[Any]:
        results: list[Any] = []
        left = list(dict.fromkeys(configs))
        ahead = self.lookahead
        while left:
            t0 = time.perf_counter()
            ready = set(self.pool.wait(left, first=True))
            t1 = time.perf_counter()
            self.compile_s += t1 - t0
            if ahead is not None:
                self.pool.submit(ahead())
                ahead = None
            try:
                results += self.inner.measure([c for c in left if c in ready], on_result)
            finally:
                self.measure_s += time.perf_counter() - t1
            left = [c for c in left if c not in ready]
        return results


__all__ = ["CompilePool", "DEFAULT_COMPILER", "PrecompilingMeasurer", "compile_config", "default_workers"]
