"""Tuning on several GPUs: one measurement worker per GPU, fed from the tuner.

The seam is a pool of named workers with one method, ``submit(fn, *args, worker=label) -> Future``
(``WorkerPool``); the tuner never sees it. Two pools implement it:

* ``LocalGpuPool``: every GPU of this host (``alcop-tune tune --gpus all|N``). One process per GPU, each a
  ``concurrent.futures.ProcessPoolExecutor`` of one spawned process pinned to its GPU through
  ``CUDA_VISIBLE_DEVICES`` before CUDA is initialised. ``device="cpu"`` makes its workers measure in
  the Triton interpreter instead (N stand-in "GPUs": tests, and a dry run of a command line).
* ``dask_pool.DaskPool``: the workers of a Dask distributed scheduler (``--scheduler ADDRESS``), one per
  GPU as ``dask cuda worker`` starts them, on as many hosts as the cluster has.

A worker measures as a single-GPU run does: its own isolated measurement process (``ProcessMeasurer``,
restarted when a kernel kills it) and, on a GPU, its own compile processes (``CompilePool``), kept
from one job to the next while the workload stays the same.

Decisions stay one stream: ``PoolMeasurer`` is the ``Measurer`` a tuner is given. It splits each
batch the tuner proposes over its workers, waits for every slice, and hands the results to the tuner
in the order of the batch, so the tuner's trials, its model updates and its next proposals are the same
whatever the number of workers, given the same times. Many workloads (``tune_workloads``) run as
lanes: the workers are dealt out over ``min(workloads, workers)`` lanes, each lane tuning one workload
at a time with its workers, so with at least as many workloads as GPUs every workload is tuned by one
GPU, and one workload alone has every GPU.

Calibration (``calibrate``), before timings of several workers are mixed: each worker reports its
device (``devices.GpuIdentity``) and the median time of a fixed calibration kernel
(``devices.calibration_ms``), one worker after another so that they do not disturb each other. The
reference is the lower median of the workers' times (``statistics.median_low``: with an even count, the
faster of the two middle ones, so the reference is always one worker's own time). A worker is *off*
when its GPU's name differs from the reference worker's, or its time is not finite, or
``|time / reference - 1| > CALIBRATION_TOLERANCE`` (3 %). Off workers are reported (``Calibration.off``,
with the reason) and given no trials: every timing a run ranks against another comes from the workers
within tolerance (``Calibration.group``, never empty: the reference worker is in it). With one worker
nothing is mixed and nothing is calibrated.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import multiprocessing
import os
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Protocol, Sequence

from ..errors import TuningError
from ..records import KernelConfig, Workload
from .devices import GpuIdentity, identify
from .measure import (DEFAULT_FACTORY, STARTUP_TIMEOUT_S, MeasureResult, OnResult, child_setup, resolve_factory,
                      take_setup)

CALIBRATION_TOLERANCE = 0.03
"""Largest relative difference between a worker's calibration time and the reference (lower median)
for its timings to be ranked against the other workers'."""

DEFAULT_CALIBRATION = "alcop_triton.autotune.devices:calibration_ms"

POLL_S = 0.5
"""How often a wait for workers looks at the stop flag (Ctrl-C reaches the main thread only)."""


@dataclass(frozen=True)
class MeasureOptions:
    """How a worker measures (the arguments of a single-GPU run's measurement processes).

    Args:
        device: "cuda" (the worker's pinned GPU) or "cpu" (the Triton interpreter).
        timeout_s: a config that makes no progress for this long is recorded as ``timeout``.
        compile_threads: configs a measurement process builds at once.
        compile_workers: compile processes per worker on a GPU (``CompilePool``); 0: none; None: the host's
            cores shared out over its GPUs (``worker_compile_processes``).
        check: compare every config with the reference before timing it.
        factory: the runner factory ("module:function"; tests pass their own).
        calibration: the calibration function ("module:function", ``devices.calibration_ms``'s signature).
        measurer: "module:function" making the worker's measurer from (workload, options) instead of the
            isolated measurement process (tests script their times with it); "": the measurement process.
    """

    device: str = "cuda"
    timeout_s: float = 120.0
    compile_threads: int = 8
    compile_workers: int | None = None
    check: bool = True
    factory: str = DEFAULT_FACTORY
    calibration: str = DEFAULT_CALIBRATION
    measurer: str = ""

    def __post_init__(self) -> None:
        if self.device not in ("cuda", "cpu"):
            raise TuningError(f"MeasureOptions device={self.device!r}: expected 'cuda' or 'cpu' (a worker "
                              "measures on the GPU it is pinned to)")
        if not (self.timeout_s > 0 and self.compile_threads >= 1
                and (self.compile_workers is None or self.compile_workers >= 0)):
            raise TuningError(f"{self}: timeout_s must be > 0, compile_threads >= 1, compile_workers >= 0")


@dataclass(frozen=True)
class MeasureJob:
    """Configs of one workload for one worker to measure."""

    workload: Workload
    configs: tuple[KernelConfig, ...]
    seed: int
    options: MeasureOptions


@dataclass(frozen=True)
class WorkerReport:
    """What a worker says about itself: its device, the calibration time, and the GPU spec it detects."""

    worker: str
    identity: GpuIdentity
    calibration_ms: float
    spec: Any = None  # hardware.GPUSpec on a GPU (sizes as the driver reports them); None in the interpreter


@dataclass(frozen=True)
class Calibration:
    """The workers of a pool, and which of them a run ranks together (the module docstring's rule)."""

    reports: tuple[WorkerReport, ...]
    off: dict[str, str] = field(default_factory=dict)  # worker -> why its timings are kept apart

    @property
    def group(self) -> list[str]:
        """Workers whose timings are ranked together, in the pool's order."""
        return [r.worker for r in self.reports if r.worker not in self.off]

    @property
    def reference(self) -> WorkerReport:
        return next(r for r in self.reports if r.worker in self.group)

    def describe(self) -> list[str]:
        """One line per worker: its device and calibration time, and why it is left out if it is."""
        out = []
        for r in self.reports:
            clock = f", SM {r.identity.sm_clock_mhz} MHz" if r.identity.sm_clock_mhz else ""
            driver = f", driver {r.identity.driver}" if r.identity.driver else ""
            cal = f"; calibration {r.calibration_ms:.4f} ms" if math.isfinite(r.calibration_ms) else ""
            why = f"; LEFT OUT: {self.off[r.worker]}" if r.worker in self.off else ""
            out.append(f"{r.worker}: {r.identity.name} {r.identity.uuid}{clock}{driver}{cal}{why}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"tolerance": CALIBRATION_TOLERANCE,
                "workers": [{"worker": r.worker, "measured_on": r.identity.to_dict(),
                             "calibration_ms": r.calibration_ms if math.isfinite(r.calibration_ms) else None,
                             "off": self.off.get(r.worker)} for r in self.reports]}


def off_workers(reports: Sequence[WorkerReport], tolerance: float = CALIBRATION_TOLERANCE) -> dict[str, str]:
    """Workers whose timings are not ranked against the others', with the reason (the module docstring)."""
    if len(reports) < 2:
        return {}
    finite = [r for r in reports if math.isfinite(r.calibration_ms) and r.calibration_ms > 0]
    if not finite:
        raise TuningError("no worker timed the calibration kernel: " + "; ".join(
            f"{r.worker}: {r.calibration_ms!r}" for r in reports))
    ref_ms = statistics.median_low([r.calibration_ms for r in finite])
    ref = next(r for r in finite if r.calibration_ms == ref_ms)
    off: dict[str, str] = {}
    for r in reports:
        if r.identity.name != ref.identity.name:
            off[r.worker] = f"a {r.identity.name}, the reference worker {ref.worker} is a {ref.identity.name}"
        elif r not in finite:
            off[r.worker] = f"calibration time {r.calibration_ms!r} ms is not a time"
        elif abs(r.calibration_ms / ref_ms - 1) > tolerance:
            off[r.worker] = (f"calibration {r.calibration_ms:.4f} ms is {r.calibration_ms / ref_ms - 1:+.1%} off the "
                             f"median {ref_ms:.4f} ms ({ref.worker}); tolerance {tolerance:.0%}")
    return off


# ----------------------------------------------------------------------------------------------
# Worker side: what runs in a worker process (a local GPU worker or a Dask worker).

_WORKER_LABEL = ""  # set by ``LocalGpuPool``'s initializer; a Dask worker passes its address
_CACHED: dict[str, Any] = {}  # "key": (workload, options), "measurer", "closers": the workload's processes


def _pin_worker(gpu: str, device: str, setup: Any, label: str, host_gpus: int) -> None:
    """``LocalGpuPool``'s initializer: the parent's environment, then this worker's GPU (or the interpreter)."""
    global _WORKER_LABEL
    take_setup(setup)
    os.environ["ALCOP_HOST_GPUS"] = str(host_gpus)
    if device == "cuda":
        # Before anything initialises CUDA in this process: device 0 is now the worker's GPU, for this
        # process and for the measurement and compile processes it makes.
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    _WORKER_LABEL = label


def _may_have_children(where: str) -> None:
    if multiprocessing.current_process().daemon:
        raise TuningError(f"{where}: this worker process is daemonic and may not start the measurement and "
                          "compile processes a worker needs; start Dask workers with "
                          "DASK_DISTRIBUTED__WORKER__DAEMON=False (dask config distributed.worker.daemon: false)")


def _identity(options: MeasureOptions, label: str) -> GpuIdentity:
    if "identity" not in _CACHED:
        _CACHED["identity"] = identify(options.device, label or _WORKER_LABEL)
    identity: GpuIdentity = _CACHED["identity"]
    return identity


def describe_worker(options: MeasureOptions, label: str = "", calibrate: bool = True) -> WorkerReport:
    """In a worker: its identity, the calibration kernel's time (NaN when not asked for), its GPU spec."""
    _may_have_children(f"worker {label or _WORKER_LABEL}")  # refused before the first trial, not at it
    spec = None
    if options.device == "cuda":
        from ..model import hardware

        spec = hardware.detect()
    ms = float(resolve_factory(options.calibration)(options.device)) if calibrate else math.nan
    return WorkerReport(label or _WORKER_LABEL, _identity(options, label), ms, spec)


def worker_compile_processes() -> int:
    """Compile processes for one GPU's worker: the host's cores shared out over its GPUs, less this worker and
    its measurement process. The GPUs of the host are ``$ALCOP_HOST_GPUS`` (``LocalGpuPool`` sets it), else
    the entries of ``CUDA_VISIBLE_DEVICES`` (``dask cuda worker`` lists every GPU of the host, its own first)."""
    env = os.environ.get("ALCOP_HOST_GPUS", "")
    gpus = int(env) if env.isdigit() and int(env) > 0 else \
        max(1, len([g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]))
    return max(1, (os.cpu_count() or 1) // gpus - 2)


def _measurer(workload: Workload, options: MeasureOptions) -> Any:
    """This worker's measurer of ``workload``: kept while jobs of the same workload come, replaced (its
    processes stopped) when another workload's job arrives."""
    from .measure import ProcessMeasurer
    from .precompile import CompilePool, PrecompilingMeasurer

    key = (workload, options)
    if _CACHED.get("key") != key:
        close_worker()
        stack = contextlib.ExitStack()
        if options.measurer:
            _CACHED.update(key=key, measurer=resolve_factory(options.measurer)(workload, options), closers=stack)
            return _CACHED["measurer"]
        device = "cuda" if options.device == "cuda" else "cpu"
        inner: Any = stack.enter_context(ProcessMeasurer(workload, device, check=options.check,
                                                         compile_threads=options.compile_threads,
                                                         timeout_s=options.timeout_s, factory=options.factory))
        inner.start()
        processes = worker_compile_processes() if options.compile_workers is None else options.compile_workers
        if processes > 0 and device == "cuda":
            pool = stack.enter_context(CompilePool(workload, device, workers=processes,
                                                   timeout_s=options.timeout_s))
            inner = PrecompilingMeasurer(inner, pool)
        _CACHED.update(key=key, measurer=inner, closers=stack)
    return _CACHED["measurer"]


def measure_job(job: MeasureJob, label: str = "") -> list[MeasureResult]:
    """In a worker: measure the job's configs (results in the job's order), each naming this worker's device."""
    _may_have_children(f"worker {label or _WORKER_LABEL}")
    identity = _identity(job.options, label)
    measurer = _measurer(job.workload, job.options)
    inner = getattr(measurer, "inner", measurer)
    inner.seed = job.seed  # fresh check inputs per job, as a single-GPU run draws them per batch
    results = measurer.measure(list(job.configs))
    by_config = {r.config: r for r in results}
    return [replace(by_config[c], measured_on=identity) for c in job.configs]


def close_worker() -> None:
    """In a worker: stop the measurement and compile processes of the cached workload."""
    stack = _CACHED.pop("closers", None)
    _CACHED.pop("key", None)
    _CACHED.pop("measurer", None)
    if stack is not None:
        stack.close()


# ----------------------------------------------------------------------------------------------
# Driver side.

class WorkerPool(Protocol):
    """Named workers, each running one submitted call at a time (``LocalGpuPool``, ``DaskPool``)."""

    labels: list[str]
    device: str

    def submit(self, fn: Callable[..., Any], *args: Any, worker: str) -> "concurrent.futures.Future[Any]":
        ...

    def close(self) -> None:
        ...


def parse_gpus(text: str | int) -> int | None:
    """``--gpus``: "all" (None) or a count >= 1."""
    if isinstance(text, int) and not isinstance(text, bool):
        count = text
    elif isinstance(text, str) and text.strip().lower() == "all":
        return None
    else:
        try:
            count = int(str(text))
        except ValueError:
            raise TuningError(f"--gpus {text!r}: expected 'all' or a number of GPUs >= 1") from None
    if count < 1:
        raise TuningError(f"--gpus {text!r}: expected 'all' or a number of GPUs >= 1")
    return count


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries (indices or UUIDs)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [g.strip() for g in env.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


class LocalGpuPool:
    """One worker process per GPU of this host (the module docstring).

    Args:
        gpus: a count (the first N visible GPUs), None (all of them), or the ``CUDA_VISIBLE_DEVICES``
            entries to use. With ``device="cpu"``: a count of interpreter workers.
        device: "cuda", or "cpu" for interpreter workers standing in for GPUs.
    """

    def __init__(self, gpus: int | None | Sequence[str] = None, device: str = "cuda") -> None:
        if device not in ("cuda", "cpu"):
            raise TuningError(f"LocalGpuPool device={device!r}: expected 'cuda' or 'cpu'")
        self.device = device
        if device == "cpu":
            if not isinstance(gpus, int):
                raise TuningError(f"--gpus {gpus!r}: in the interpreter give a number of workers (there is no "
                                  "GPU to count)")
            ids = [str(i) for i in range(gpus)]
        elif gpus is None or isinstance(gpus, int):
            visible = visible_gpus()
            if not visible:
                raise TuningError("--gpus: no CUDA GPU is visible to this process")
            if gpus is not None and gpus > len(visible):
                raise TuningError(f"--gpus {gpus}: only {len(visible)} GPU(s) visible "
                                  f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
            ids = visible if gpus is None else visible[:gpus]
        else:
            ids = [str(g) for g in gpus]
        if not ids:
            raise TuningError("LocalGpuPool: no workers")
        prefix = "gpu" if device == "cuda" else "cpu"
        self.labels = [f"{prefix}{g}" for g in ids]
        ctx = multiprocessing.get_context("spawn")  # nothing of this process's CUDA state may be inherited
        setup = child_setup()
        self._executors = {label: concurrent.futures.ProcessPoolExecutor(
            1, mp_context=ctx, initializer=_pin_worker, initargs=(g, device, setup, label, len(ids)))
            for label, g in zip(self.labels, ids)}

    def __enter__(self) -> "LocalGpuPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, fn: Callable[..., Any], *args: Any, worker: str) -> "concurrent.futures.Future[Any]":
        if worker not in self._executors:
            raise TuningError(f"worker {worker!r} is not one of this pool's {self.labels}")
        return self._executors[worker].submit(fn, *args)

    def close(self) -> None:
        """Stop every worker: its measurement processes first, then the worker itself."""
        closing = []
        for ex in self._executors.values():
            with contextlib.suppress(Exception):  # a broken worker has nothing left to close
                closing.append(ex.submit(close_worker))
        concurrent.futures.wait(closing, timeout=30)
        for ex in self._executors.values():
            ex.shutdown(wait=True, cancel_futures=True)


def calibrate(pool: WorkerPool, options: MeasureOptions) -> Calibration:
    """Every worker's report, one worker after another, and the workers left out (the module docstring)."""
    several = len(pool.labels) > 1
    # Every worker started first: a worker importing torch would slow another's calibration down.
    concurrent.futures.wait([pool.submit(_identity, options, label, worker=label) for label in pool.labels])
    reports = []
    for label in pool.labels:
        reports.append(pool.submit(describe_worker, options, label, several, worker=label).result())
    return Calibration(tuple(reports), off_workers(reports) if several else {})


def _wait(futures: Sequence["concurrent.futures.Future[Any]"], stop: threading.Event | None,
          deadline_s: float = math.inf) -> None:
    """Wait for ``futures``, at most ``deadline_s``; a set ``stop`` (Ctrl-C in the main thread) raises
    KeyboardInterrupt here."""
    pending = set(futures)
    end = time.monotonic() + deadline_s
    while pending and time.monotonic() < end:
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt
        _, pending = concurrent.futures.wait(pending, timeout=min(POLL_S, max(0.0, end - time.monotonic())))


class PoolMeasurer:
    """The ``Measurer`` a tuner is given: each batch split over ``workers`` of ``pool`` (the module docstring).

    A kernel that crashes or hangs is the measurement process's business (a worker records it as a failed
    config, like a single-GPU run). A worker that fails itself (its process died, a Dask worker was lost) or
    does not answer within ``job_deadline_s`` has its slice measured again on the next worker; failing again,
    the run ends with a TuningError: no config is recorded as failed for what was no fault of its own, and
    the database keeps every result delivered so far.
    """

    def __init__(self, pool: WorkerPool, workers: Sequence[str], workload: Workload, options: MeasureOptions, *,
                 seed: int = 0, stop: threading.Event | None = None) -> None:
        if not workers:
            raise TuningError(f"{workload.key()}: no worker to measure on")
        self.pool, self.workers, self.workload, self.options = pool, list(workers), workload, options
        self.seed, self.stop = seed, stop
        self._batches = 0

    def job_deadline_s(self, n_configs: int) -> float:
        """Longest wait for a job: a fresh measurement process's start, then every config's build and run
        steps at the measurement timeout each (the measurement process gives up on a step sooner)."""
        return STARTUP_TIMEOUT_S + 2 * n_configs * self.options.timeout_s

    def _run(self, configs: Sequence[KernelConfig], worker: str, part: int) -> "concurrent.futures.Future[Any]":
        job = MeasureJob(self.workload, tuple(configs), self.seed + 7919 * self._batches + 104729 * part, self.options)
        return self.pool.submit(measure_job, job, worker, worker=worker)

    def _results(self, futures: Sequence["concurrent.futures.Future[Any]"],
                 sizes: Sequence[int]) -> list[tuple[list[MeasureResult] | None, str]]:
        """Each future's results, or None and why it has none, after at most the largest deadline."""
        _wait(futures, self.stop, max(self.job_deadline_s(n) for n in sizes))
        out: list[tuple[list[MeasureResult] | None, str]] = []
        for fut in futures:
            if not fut.done():
                fut.cancel()
                out.append((None, "no answer within the job's deadline"))
            elif fut.exception() is not None:
                exc = fut.exception()
                out.append((None, f"{type(exc).__name__}: {exc}"))
            else:
                out.append((fut.result(), ""))
        return out

    def measure(self, configs: Sequence[KernelConfig], on_result: OnResult | None = None) -> list[MeasureResult]:
        todo = list(dict.fromkeys(configs))
        if not todo:
            return []
        self._batches += 1
        n = min(len(self.workers), len(todo))
        slices = [todo[i::n] for i in range(n)]
        got = self._results([self._run(s, self.workers[i], i) for i, s in enumerate(slices)], [len(s) for s in slices])
        lost = [i for i, (r, _) in enumerate(got) if r is None]
        if lost:  # each lost slice once more, on the next worker
            again = self._results([self._run(slices[i], self.workers[(i + 1) % len(self.workers)], i) for i in lost],
                                  [len(slices[i]) for i in lost])
            for i, retry in zip(lost, again):
                got[i] = retry if retry[0] is not None else (None, f"{got[i][1]}; again on "
                                                                   f"{self.workers[(i + 1) % len(self.workers)]}: "
                                                                   f"{retry[1]}")
        results = {r.config: r for rs, _ in got if rs is not None for r in rs}
        out = [results[c] for c in todo if c in results]
        if on_result is not None:
            for r in out:  # in the batch's order, whatever the order the workers finished in
                on_result(r)
        failed = [(self.workers[i], why) for i, (rs, why) in enumerate(got) if rs is None]
        if failed:
            raise TuningError(f"{self.workload.key()}: measurement worker(s) failed: "
                              + "; ".join(f"{w}: {why}" for w, why in failed)
                              + "; every result measured before is in the database")
        return out


def lanes(workers: Sequence[str], n_workloads: int) -> list[list[str]]:
    """The workers dealt out over ``min(n_workloads, len(workers))`` lanes (worker i to lane i mod lanes)."""
    k = max(1, min(n_workloads, len(workers)))
    return [list(workers[i::k]) for i in range(k)]


def pool_target(calibration: Calibration, device: str, gpu: str | None = None) -> Any:
    """The ``session.Target`` of a pool's run: the reference worker's GPU (``gpu`` names the models' GPU
    instead), or the interpreter's key for interpreter workers."""
    from ..model import hardware
    from .database import gpu_key
    from .session import Target, resolve_target

    if device == "cpu":
        return resolve_target("cpu", gpu)
    ref = calibration.reference
    spec = hardware.get_spec(gpu) if gpu else ref.spec
    if spec is None:
        raise TuningError(f"worker {ref.worker} reported no GPU spec; pass --gpu NAME")
    return Target("cuda", spec, gpu_key(spec), ref.identity.name, spec.mma)


Done = Callable[[Workload, Any], None]


def tune_workloads(workloads: Sequence[Workload], pool: WorkerPool, db: Any, *, options: MeasureOptions,
                   calibration: Calibration | None = None, gpu: str | None = None, on_done: Done | None = None,
                   on_trial: Callable[[Workload, Any], None] | None = None, stop: threading.Event | None = None,
                   **tune_kwargs: Any) -> list[tuple[Workload, Any]]:
    """Tune ``workloads`` on ``pool``: lanes of workers (``lanes``), each tuning one workload at a time with
    ``session.tune`` through a ``PoolMeasurer``; ``tune_kwargs`` go to ``session.tune`` (tuner, n_trials,
    batch_size, seed, early_stop, ...). ``on_done`` sees each workload's ``TuneResult`` as it finishes.
    Returns (workload, result) in the order given; a run stopped by Ctrl-C returns what finished, the
    workload in flight with ``interrupted=True``."""
    from .session import tune

    cal = calibration if calibration is not None else calibrate(pool, options)
    target = pool_target(cal, options.device, gpu)
    stop = stop if stop is not None else threading.Event()
    queue: Iterator[tuple[int, Workload]] = iter(list(enumerate(workloads)))
    take, report = threading.Lock(), threading.Lock()
    results: dict[int, tuple[Workload, Any]] = {}

    def lane(workers: list[str]) -> None:
        while not stop.is_set():
            with take:
                item = next(queue, None)
            if item is None:
                return
            i, w = item
            measurer = PoolMeasurer(pool, workers, w, options, seed=tune_kwargs.get("seed", 0), stop=stop)

            def trial(t: Any, w: Workload = w) -> None:
                if on_trial is not None:
                    with report:
                        on_trial(w, t)
            res = tune(w, target, db, measurer=measurer, compile_workers=0, on_trial=trial, **tune_kwargs)
            with report:
                results[i] = (w, res)
                if on_done is not None:
                    on_done(w, res)
            if res.interrupted:
                stop.set()
                return

    groups = lanes(cal.group, len(workloads))
    with concurrent.futures.ThreadPoolExecutor(len(groups), thread_name_prefix="alcop-lane") as ex:
        futures = [ex.submit(lane, g) for g in groups]
        try:
            pending = set(futures)
            while pending:
                _, pending = concurrent.futures.wait(pending, timeout=POLL_S)
        except KeyboardInterrupt:
            stop.set()
            concurrent.futures.wait(futures)
        for f in futures:
            f.result()  # a lane's own failure (not a trial's: those are records) ends the run loudly
    return [results[i] for i in sorted(results)]


__all__ = ["CALIBRATION_TOLERANCE", "Calibration", "LocalGpuPool", "MeasureJob", "MeasureOptions", "PoolMeasurer",
           "WorkerPool", "WorkerReport", "calibrate", "close_worker", "describe_worker", "lanes", "measure_job",
           "off_workers", "parse_gpus", "pool_target", "tune_workloads", "visible_gpus"]
