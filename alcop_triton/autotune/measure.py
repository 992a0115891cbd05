"""Measure kernel configs of one workload: compile in parallel, check, time; failures classified.

The only interface to kernels is ``alcop_triton.kernels.runner.make_runner`` (ARCHITECTURE.md).

* ``LocalMeasurer`` does the work in this process: builds every config's runner (a thread pool
  compiles them at once: Triton's compiler and ptxas run outside the GIL), checks each config
  against ``runner.reference`` on fresh random inputs with the output poisoned, then times it.
* ``ProcessMeasurer`` runs a ``LocalMeasurer`` in a child process so a kernel that hangs or kills
  its process (illegal address, segfault in the compiler) cannot take the tuning session down:
  the config in flight is recorded as failed and a fresh child carries on with the rest.

Timing on GPU: kernels under ``SMALL_KERNEL_MS`` are timed under a CUDA graph (launch overhead
would dominate otherwise; ``graph_time``, Triton's ``do_bench_cudagraph`` with an early exit) over
rotating input copies larger than L2, so every call reads cold inputs (a graph replay does not
flush L2 itself); bigger kernels use ``do_bench``, which zeroes a 256 MB buffer before every call.
Which timer a kernel gets is decided by the graph timer's own first estimate (``graph_time``).
Both report the median. A config whose first ``GRAPH_MIN_REPLAYS`` graph replays are already
``SLOW_RATIO`` times slower than the fastest config this measurer timed stops there (see
``graph_time`` for why that is sound). In the Triton interpreter
(CPU tensors) times come from ``time.perf_counter`` and are marked ``timer="perf_counter"``:
they rank nothing on a GPU and are stored under the GPU key ``interpreter``.

This module imports neither torch nor triton at import time: a spawned child must be able to
set ``TRITON_INTERPRET`` before triton is first imported.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import math
import multiprocessing
import os
import statistics
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from ..errors import AlcopError, OutOfResources, PipelineError, ScheduleError, TuningError, UnsupportedError
from ..records import KernelConfig, Workload
from .devices import GpuIdentity


class ErrorKind(str, enum.Enum):
    """Why a config produced no time (values are what the database stores)."""

    INVALID_CONFIG = "invalid_config"
    OUT_OF_RESOURCES = "out_of_resources"
    COMPILE = "compile"
    RUNTIME = "runtime"
    WRONG_ANSWER = "wrong_answer"
    TIMEOUT = "timeout"


ERROR_KINDS: tuple[str, ...] = tuple(e.value for e in ErrorKind)

STARTUP_TIMEOUT_S = 180.0
"""How long a measurement child may take to import torch/triton and build its measurer."""

SMALL_KERNEL_MS = 0.1
"""Below this (``graph_time``'s first estimate) a kernel is timed under a CUDA graph."""

GRAPH_REP_MS = 20.0
"""Kernel time one CUDA-graph replay covers (the graph holds ``GRAPH_REP_MS / estimate`` launches)."""

GRAPH_REPLAYS = 10
"""Replays whose per-launch times give the median (``do_bench_cudagraph``'s count)."""

GRAPH_MIN_REPLAYS = 3
"""Replays every config gets before it may stop early."""

SLOW_RATIO = 1.2
"""A config whose median over its first replays exceeds the best graph time so far by this factor stops
(``graph_time`` says why that is sound). Was 1.5: a config 1.2-1.5x slower than the best now takes 3
replays instead of 10, 140 ms less of a tuning run's measuring."""

INTERPRETER_GPU = ("interpreter", "0.0")
"""GpuKey under which interpreter (CPU) measurements are stored, apart from every real GPU."""


@dataclass(frozen=True)
class MeasureResult:
    """Outcome of measuring one config: a time, or an error kind and message (never both)."""

    config: KernelConfig
    time_ms: float | None
    error: ErrorKind | None = None
    message: str = ""
    timer: str = ""  # "cuda_graph" | "do_bench" | "perf_counter" | "replay"
    # The device that measured it, where a pool of workers did (``workers.py``); None: this host's device.
    measured_on: GpuIdentity | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        d = {"config": self.config.to_dict(), "time_ms": self.time_ms,
             "error": self.error.value if self.error is not None else None,
             "message": self.message, "timer": self.timer}
        if self.measured_on is not None:
            d["measured_on"] = self.measured_on.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MeasureResult":
        on = d.get("measured_on")
        return cls(KernelConfig.from_dict(d["config"]), d["time_ms"],
                   ErrorKind(d["error"]) if d["error"] is not None else None, d["message"], d["timer"],
                   GpuIdentity.from_dict(on) if on is not None else None)


OnResult = Callable[[MeasureResult], None]


class Measurer(Protocol):
    """What tuners call: measure configs of the measurer's workload, results in the same order."""

    workload: Workload

    def measure(self, configs: Sequence[KernelConfig], on_result: OnResult | None = None) -> list[MeasureResult]:
        ...


_COMPILE_ERRORS = {"CompilationError", "CompileTimeAssertionFailure", "PTXASError", "MLIRCompilationError",
                   "CodegenError", "LoweringError"}


def classify(exc: BaseException, phase: str) -> ErrorKind:
    """ErrorKind of an exception raised while building ("build") or running ("run") a config.

    Triton's own exception classes are matched by name so this module need not import triton.
    """
    names = {c.__name__ for c in type(exc).__mro__}
    if isinstance(exc, OutOfResources) or "OutOfResources" in names or "out of resource" in str(exc).lower():
        return ErrorKind.OUT_OF_RESOURCES
    if isinstance(exc, (ScheduleError, PipelineError, UnsupportedError)):
        return ErrorKind.INVALID_CONFIG
    if names & _COMPILE_ERRORS:
        return ErrorKind.COMPILE
    if isinstance(exc, AlcopError) or phase == "build":
        return ErrorKind.COMPILE
    return ErrorKind.RUNTIME


def _message(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[-2000:]


def _poisoned_run(runner: Any, inputs: tuple[Any, ...]) -> Any:
    """Run after filling the memory the output will land in with NaN.

    The runner allocates its output; after a first run the caching allocator hands the same
    block back on the next one, so NaN-filling and freeing the first output poisons the second:
    a kernel that skips part of the output then fails the check instead of reusing stale values.
    """
    first = runner.run(inputs)
    first.fill_(math.nan)
    del first
    return runner.run(inputs)


def check_output(out: Any, ref: Any, rtol: float) -> str | None:
    """None if ``out`` matches ``ref`` normwise (max error <= rtol * max |ref|), else why not."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}"
    o, r = out.detach().double(), ref.detach().double()
    if not bool(torch.isfinite(o).all()):
        bad = int((~torch.isfinite(o)).sum())
        return f"{bad} of {o.numel()} output elements are NaN/inf (unwritten or overflowed)"
    scale = max(float(r.abs().max()), 1e-6)
    err = float((o - r).abs().max())
    if err > rtol * scale:
        return f"max abs error {err:.3g} > rtol {rtol:g} x max|ref| {scale:.3g}"
    return None


def _rotating_copies(runner: Any, seed: int, l2_bytes: int) -> list[tuple[Any, ...]]:
    """Enough fresh input sets that cycling through them evicts L2 between calls (cap 1 GiB)."""
    first = runner.inputs(seed)
    nbytes = sum(t.numel() * t.element_size() for t in first) or 1
    n = max(1, min(64, math.ceil(2 * l2_bytes / nbytes), (1 << 30) // nbytes))
    return [first] + [runner.inputs(seed + i) for i in range(1, n)]


_WORKLOAD_DATA: dict[tuple[str, Any], list[tuple[Any, ...]]] = {}
_WORKLOAD_DATA_LOCK = threading.Lock()  # build threads ask for warm-up inputs at once


def _per_workload(kind: str, runner: Any, make: Callable[[], list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """``make()``'s input sets for ``runner``'s workload, made once per process, workload and ``kind``.

    Only the latest workload's sets of each kind are kept, so device memory stays bounded. A runner
    without a ``workload`` gets fresh sets every time.
    """
    key = getattr(runner, "workload", None)
    if key is None:
        return make()
    with _WORKLOAD_DATA_LOCK:
        if (kind, key) not in _WORKLOAD_DATA:
            for k in [k for k in _WORKLOAD_DATA if k[0] == kind]:
                del _WORKLOAD_DATA[k]
            _WORKLOAD_DATA[(kind, key)] = make()
        return _WORKLOAD_DATA[(kind, key)]


def _timing_inputs(runner: Any, seed: int, l2_bytes: int) -> list[tuple[Any, ...]]:
    """The rotating input sets of ``runner``'s workload, made once per process and workload.

    Every config of a workload times on the same sets: their values do not change a kernel's
    time, and generating them (dozens of MB of random numbers) would otherwise cost more than the
    timing itself.
    """
    return _per_workload("timing", runner, lambda: _rotating_copies(runner, seed, l2_bytes))


def _gpu_timing_inputs(runner: Any, seed: int) -> list[tuple[Any, ...]]:
    """``_timing_inputs`` sized for the current CUDA device's L2."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return _timing_inputs(runner, seed, int(props.L2_cache_size))


def _warmup_inputs(runner: Any, seed: int) -> tuple[Any, ...]:
    """The inputs every config of ``runner``'s workload is warmed up on, made once per process and workload.

    The warm-up launch only JIT-compiles and loads the kernel: nothing reads its output, so the
    input values are irrelevant. They are a set of their own, never checked or timed, so a kernel
    that writes out of bounds while warming up can spoil neither another config's check nor the
    timing sets.
    """
    return _per_workload("warmup", runner, lambda: [runner.inputs(seed)])[0]


def _launcher(runner: Any, inputs: tuple[Any, ...]) -> Callable[[], Any]:
    """A zero-argument launch of the kernel on ``inputs``.

    Runners with ``bind`` (alcop's) do their argument checks once there; the closure then enqueues
    through the prebound launch that users' calls take (``Launch.prebind``): the timer sees the kernel,
    not Python, and graph capture sees no host work. ``graph_time``'s first estimate, back-to-back
    calls, would otherwise read Triton's own launch path (40-60 us of Python per launch on the H100's
    hosts) as kernel time: a wave tail's two launches crossed ``SMALL_KERNEL_MS`` that way and were
    timed eagerly, host time included.
    """
    bind = getattr(runner, "bind", None)
    if bind is not None:
        launch, _ = bind(inputs)
        if launch is not None:
            run, tensors = launch.prebind(), launch.args[:launch.n_tensors]
            return lambda: run(*tensors)
    return lambda: runner.run(inputs)


def graph_time(call: Callable[[], Any], stop_above_ms: float | None = None,
               eager_from_ms: float | None = None) -> float | None:
    """Median time (ms) per ``call`` under a CUDA graph: ``triton.testing.do_bench_cudagraph(call,
    rep=GRAPH_REP_MS, return_mode="median")``, which it follows step for step, with two exits.

    ``eager_from_ms``: when the first estimate (one warm-up call, then the mean of 5 back-to-back
    calls, which also sizes the graph) is at least this, nothing is captured and None is returned:
    the caller times the kernel eagerly instead.

    The graph holds ``GRAPH_REP_MS`` of launches; each replay gives one per-launch time, and the result
    is the median of ``GRAPH_REPLAYS`` of them. When the median of the first ``GRAPH_MIN_REPLAYS`` is
    above ``stop_above_ms`` (``SLOW_RATIO`` times the fastest config timed so far), the rest are
    skipped and that median is returned. Sound because one replay already averages hundreds of
    launches: replays of one config differ by about a percent, so a config 1.2x slower than the best
    after three replays stays slower than the best after ten, and the best config and everything near
    it still get every replay. Its time is as unbiased as the full median, only noisier by that percent,
    which moves it among the other slow configs (what the learned model ranks) by no more than that.
    Such a config's replays drop from 10 to 3 (of ``GRAPH_REP_MS`` each); its capture and the first
    estimate are unchanged.
    """
    import torch

    with torch.cuda.stream(torch.cuda.Stream()):
        call()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            call()
        end.record()
        torch.cuda.synchronize()
        estimate_ms = start.elapsed_time(end) / 5
        if eager_from_ms is not None and estimate_ms >= eager_from_ms:
            return None
        n_repeat = max(1, int(GRAPH_REP_MS / estimate_ms)) if estimate_ms > 0 else 1000
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n_repeat):
                call()
        torch.cuda.synchronize()
        times: list[float] = []
        for _ in range(GRAPH_REPLAYS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / n_repeat)
            if (stop_above_ms is not None and len(times) >= GRAPH_MIN_REPLAYS
                    and statistics.median(times) > stop_above_ms):
                break
        return statistics.median(times)


def time_gpu(runner: Any, seed: int, best_graph_ms: float | None = None) -> tuple[float, str]:
    """Median time (ms) of the kernel on a CUDA device, and which timer produced it.

    ``best_graph_ms``: the fastest graph time of the workload so far (``graph_time`` stops a config
    ``SLOW_RATIO`` times slower than it early).

    The choice between the graph timer and ``do_bench`` uses ``graph_time``'s own first estimate
    (5 back-to-back calls over the rotating copies, so on cold inputs) instead of a ``do_bench`` run
    of its own (some 25 ms of launches, L2 zeroed before each): both estimate one call on inputs not
    in L2, and once a kernel outlasts its host-side launch (some 10-20 us, far below the threshold)
    back-to-back calls time the kernel itself, so they agree and only a kernel within noise of
    ``SMALL_KERNEL_MS`` can change timer. The times each timer returns
    are unchanged: the graph path is the same capture and replays, and ``do_bench`` times the
    kernel as before (on the first timing set: it zeroes L2 before every call, so which inputs it
    reads makes no difference).
    """
    import torch
    import triton.testing

    launches = [_launcher(runner, x) for x in _gpu_timing_inputs(runner, seed)]
    for launch in launches:  # a prebound launch's first call encodes its arguments: not a cost of the kernel
        launch()
    state = {"i": 0}

    def call() -> None:
        state["i"] = (state["i"] + 1) % len(launches)
        launches[state["i"]]()

    try:
        t = graph_time(call, None if best_graph_ms is None else SLOW_RATIO * best_graph_ms, SMALL_KERNEL_MS)
        if t is not None:
            return t, "cuda_graph"
    except RuntimeError:
        # Some launches cannot be captured (an allocator hook that synchronises, say): time
        # them eagerly rather than fail a config that runs fine.
        torch.cuda.synchronize()
    return float(triton.testing.do_bench(launches[0], warmup=25, rep=100, return_mode="median")), "do_bench"


def time_cpu(runner: Any, seed: int, reps: int = 3) -> tuple[float, str]:
    """Median wall time (ms) of ``runner.run`` in the interpreter."""
    inputs = runner.inputs(seed)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        runner.run(inputs)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), "perf_counter"


Event = Callable[..., None]

DEFAULT_FACTORY = "alcop_triton.kernels.runner:make_runner"


def resolve_factory(spec: str) -> Callable[..., Any]:
    """Import a "module:function" runner factory."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


class LocalMeasurer:
    """Measure configs in this process (see the module docstring).

    Args:
        workload: what to run.
        device: "cuda" (or "cuda:N") or "cpu" (the Triton interpreter must then be enabled).
        seed: base seed of the check/timing inputs; config i of a batch uses ``seed + i``.
        check: compare with ``runner.reference`` before timing (a failure never gets a time).
        compile_threads: runners built and warmed up at once before timing starts.
        cpu_reps: timing repetitions in the interpreter.
        factory: "module:function" with make_runner's signature; other kernels (a baseline, a
            test double) are measured through the same checks and timers.
    """

    def __init__(self, workload: Workload, device: str = "cuda", *, seed: int = 0, check: bool = True,
                 compile_threads: int = 8, cpu_reps: int = 3, factory: str = DEFAULT_FACTORY) -> None:
        self.workload, self.device, self.seed, self.check = workload, device, seed, check
        self.compile_threads, self.cpu_reps = max(1, compile_threads), cpu_reps
        # Resolved here, not per config: a broken install fails once, loudly, instead of being
        # recorded as a compile error of every config.
        self._make_runner = resolve_factory(factory)
        self.best_graph_ms: float | None = None  # fastest CUDA-graph time of this workload so far

    def prepare(self) -> None:
        """Create the device context and the workload's warm-up and timing inputs now (a measurement
        child does this while its parent builds the space and model) instead of during the first batch.

        The inputs do not depend on the config (a runner's ``inputs`` is the workload's), so any
        config's runner makes them; a factory that refuses the default config leaves them to the first
        batch. Nothing is launched or timed.
        """
        if not self.device.startswith("cuda"):
            return
        import torch

        torch.empty(1, device=self.device)
        try:
            runner = self._make_runner(self.workload, KernelConfig(), self.device)
        except Exception:  # noqa: BLE001 - the first batch makes the inputs instead
            return
        _warmup_inputs(runner, self.seed)
        _gpu_timing_inputs(runner, self.seed)

    def _build(self, config: KernelConfig, seed: int) -> tuple[Any, tuple[Any, ...] | None, MeasureResult | None]:
        """The config's runner, warmed up, and its check inputs; or the failure that prevented them."""
        try:
            runner = self._make_runner(self.workload, config, self.device)
        except Exception as exc:  # noqa: BLE001 - every failure is a data point, scored 0
            return None, None, MeasureResult(config, None, classify(exc, "build"), _message(exc))
        if not self.device.startswith("cpu"):
            try:
                # The first launch JIT-compiles: doing it here puts compilation in the parallel
                # phase. Triton's compile errors are recognised by type; anything else is runtime.
                runner.run(_warmup_inputs(runner, self.seed))
            except Exception as exc:  # noqa: BLE001
                return None, None, MeasureResult(config, None, classify(exc, "run"), _message(exc))
        try:
            # The check's fresh random inputs (seed ``seed``, untouched by any kernel until the check)
            # are drawn here, in the parallel phase: generating them (random numbers on the host, then
            # a copy) costs as much as timing a small kernel, and the values are the same wherever
            # they are drawn.
            inputs = runner.inputs(seed) if self.check else None
        except Exception as exc:  # noqa: BLE001
            return None, None, MeasureResult(config, None, classify(exc, "run"), _message(exc))
        return runner, inputs, None

    def _measure_one(self, runner: Any, config: KernelConfig, seed: int, inputs: tuple[Any, ...] | None) -> MeasureResult:
        try:
            if inputs is not None:
                ref = runner.reference(inputs)
                out = _poisoned_run(runner, inputs)
                if self.device.startswith("cuda"):
                    import torch

                    torch.cuda.synchronize()
                why = check_output(out, ref, float(runner.rtol))
                if why is not None:
                    return MeasureResult(config, None, ErrorKind.WRONG_ANSWER, why)
            if self.device.startswith("cpu"):
                t, timer = time_cpu(runner, seed, self.cpu_reps)
            else:
                t, timer = time_gpu(runner, seed, self.best_graph_ms)
        except Exception as exc:  # noqa: BLE001 - every failure is a data point, scored 0
            return MeasureResult(config, None, classify(exc, "run"), _message(exc))
        if not math.isfinite(t) or t <= 0:
            return MeasureResult(config, None, ErrorKind.RUNTIME, f"timer returned {t!r} ms")
        if timer == "cuda_graph" and (self.best_graph_ms is None or t < self.best_graph_ms):
            self.best_graph_ms = t
        return MeasureResult(config, t, None, "", timer)

    def measure(self, configs: Sequence[KernelConfig], on_result: OnResult | None = None,
                event: Event | None = None) -> list[MeasureResult]:
        """Measure ``configs``; ``on_result`` sees each result as it is made.

        ``event`` is told ``("begin", i, phase)`` before each serial step so a supervising
        process knows which config was in flight if this one dies.
        """
        emit = event or (lambda *a: None)
        results: list[MeasureResult | None] = [None] * len(configs)
        runners: dict[int, tuple[Any, tuple[Any, ...] | None]] = {}

        def done(i: int, r: MeasureResult) -> None:
            results[i] = r
            if on_result is not None:
                on_result(r)

        def build(i: int) -> tuple[int, Any, tuple[Any, ...] | None, MeasureResult | None]:
            return (i, *self._build(configs[i], self.seed + i))

        if self.compile_threads > 1 and len(configs) > 1:
            built = []
            with ThreadPoolExecutor(self.compile_threads) as pool:
                for fut in as_completed([pool.submit(build, i) for i in range(len(configs))]):
                    built.append(fut.result())
                    emit("built", built[-1][0])  # liveness for a supervisor's timeout
            built.sort(key=lambda b: b[0])
        else:
            built = []
            for i in range(len(configs)):
                emit("begin", i, "build")
                built.append(build(i))
        for i, runner, inputs, failure in built:
            if failure is not None:
                done(i, failure)
            else:
                runners[i] = (runner, inputs)
        for i in sorted(runners):
            emit("begin", i, "run")
            runner, inputs = runners.pop(i)
            done(i, self._measure_one(runner, configs[i], self.seed + i, inputs))
        return [r for r in results if r is not None]


ChildSetup = tuple[dict[str, str], list[str]]


def helper_context(device: str) -> Any:
    """The multiprocessing context of a tuning run's helper processes (the measurement child, the compile
    workers). On a GPU: children forked from one server process that imported torch, triton and the
    kernels' runner once (``forkserver``, those preloaded). A spawned child imports them itself: about
    5 s on the H100's host, 7 s when a tuning run's 15 helpers import at once
    (``docs/decisions.md#d03``), and the first compile waited for it. The interpreter
    (a CPU device) spawns: its children must set ``TRITON_INTERPRET`` before triton is imported, which
    the server has done without it. Either way a child starts by taking ``child_setup()`` of the moment
    it was made (``take_setup``): a forkserver's child would otherwise have the environment and
    ``sys.path`` of the server's own start."""
    if device.startswith("cpu") or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # The kernels' runner last: with triton imported first, alcop_triton's import makes no CUDA call (a
    # forked child of a process that did could not use the device). No effect once the server runs.
    ctx.set_forkserver_preload(["torch", "triton", DEFAULT_FACTORY.partition(":")[0]])
    return ctx


def starting(device: str, start: Callable[[], None]) -> "Future[None] | None":
    """Run ``start`` (which makes helper processes): at once where ``helper_context`` spawns, and in a
    background thread where it forks from a server: the first child made waits until the server has
    imported what it preloads (some 5 s), which the caller spends building its space meanwhile. The
    returned future is what the caller waits on before it uses the helpers (None: started already)."""
    if helper_context(device).get_start_method() != "forkserver":
        start()
        return None
    return in_background("alcop-helpers", start)


def in_background(name: str, fn: Callable[..., Any], *args: Any) -> "Future[Any]":
    """``fn(*args)`` in a thread of its own (named ``name``), which ends with it; the future has its result."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    future = pool.submit(fn, *args)
    pool.shutdown(wait=False)
    return future


def started(future: "Future[None] | None") -> None:
    """Wait for a ``starting`` future (re-raising what its start raised)."""
    if future is not None:
        future.result()


def child_setup() -> ChildSetup:
    """This process's environment and ``sys.path``, for a helper process to take (``take_setup``)."""
    return dict(os.environ), list(sys.path)


def take_setup(setup: ChildSetup) -> None:
    """In a helper process: the environment and ``sys.path`` its parent had when it made it."""
    env, path = setup
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = path


def _worker_main(conn: Any, workload: dict[str, Any], device: str, opts: dict[str, Any], setup: ChildSetup) -> None:
    """Child process: measure batches sent by a ProcessMeasurer until told to stop."""
    take_setup(setup)
    local = LocalMeasurer(Workload.from_dict(workload), device, **opts)
    local.prepare()
    conn.send(("ready",))  # imports done: from here on the parent's per-step timeout applies
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            # The parent wants nothing more (every result it waited for was sent synchronously), so
            # skip the interpreter's shutdown (finalising torch and triton, freeing every cached
            # block one by one), which the parent's ``close`` would otherwise wait for. The operating
            # system frees the process's memory and device context either way.
            sys.stdout.flush()
            sys.stderr.flush()
            conn.close()
            os._exit(0)
        _, config_dicts, seed = msg
        local.seed = seed

        def on_result(r: MeasureResult) -> None:
            conn.send(("result", r.to_dict()))
            # After a device-side fault the CUDA context is unusable: quit, and the parent starts a
            # clean child for the remaining configs.
            if r.error is ErrorKind.RUNTIME and device.startswith("cuda") and "CUDA error" in r.message:
                conn.close()
                os._exit(3)

        local.measure([KernelConfig.from_dict(c) for c in config_dicts], on_result, lambda *m: conn.send(m))
        conn.send(("batch_done",))


class ProcessMeasurer:
    """A LocalMeasurer in a child process (``helper_context``), restarted whenever a kernel kills or hangs it.

    Args:
        workload, device, seed, check, compile_threads, cpu_reps, factory: as for LocalMeasurer.
        timeout_s: longest wait for one step (a compile batch, one check+timing) before the
            child is killed and the config in flight recorded as ``timeout``.
    """

    def __init__(self, workload: Workload, device: str = "cuda", *, seed: int = 0, check: bool = True,
                 compile_threads: int = 8, cpu_reps: int = 3, timeout_s: float = 120.0,
                 factory: str = DEFAULT_FACTORY) -> None:
        self.workload, self.device, self.seed = workload, device, seed
        self.timeout_s = timeout_s
        self._opts: dict[str, Any] = {"check": check, "compile_threads": compile_threads, "cpu_reps": cpu_reps,
                                      "factory": factory}
        self._proc: Any = None
        self._conn: Any = None
        self._ready = False
        self._batches = 0
        self._starting: Future[None] | None = None  # ``start``'s child, being made (``starting``)

    def __enter__(self) -> "ProcessMeasurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> "ProcessMeasurer":
        """Start the child now without waiting for it (``starting``): its start overlaps the caller's own
        setup (building the space, training the cost model); the first ``measure`` waits for it."""
        if self._proc is None and self._starting is None:
            self._starting = starting(self.device, lambda: self._launch(int(self._opts["compile_threads"])))
        return self

    def _started(self) -> None:
        starting, self._starting = self._starting, None
        started(starting)

    def _start(self, compile_threads: int) -> None:
        self._launch(compile_threads)
        self._await_ready()

    def _launch(self, compile_threads: int) -> None:
        ctx = helper_context(self.device)
        parent, child = ctx.Pipe()
        opts = dict(self._opts, compile_threads=compile_threads)
        saved = os.environ.get("TRITON_INTERPRET")
        if self.device.startswith("cpu"):
            # The spawned child takes os.environ (child_setup); triton reads this at import time.
            os.environ["TRITON_INTERPRET"] = "1"
        try:
            proc = ctx.Process(target=_worker_main, args=(child, self.workload.to_dict(), self.device, opts,
                                                          child_setup()),
                               daemon=True, name=f"alcop-measure-{self.workload.key()}")
            proc.start()
        finally:
            if saved is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved
        child.close()
        self._proc, self._conn = proc, parent
        self._ready = False

    def _await_ready(self) -> None:
        proc, parent = self._proc, self._conn
        # Importing torch and triton in a fresh process can take longer than one measurement step on a
        # loaded machine; it is not a kernel hanging, so it gets its own, generous limit.
        if not parent.poll(max(STARTUP_TIMEOUT_S, self.timeout_s)):
            self._kill()
            raise TuningError(f"measurement worker for {self.workload.key()} did not start within "
                              f"{max(STARTUP_TIMEOUT_S, self.timeout_s):g} s")
        try:
            msg = parent.recv()
        except (EOFError, OSError):
            code = proc.exitcode
            self._kill()
            raise TuningError(f"measurement worker for {self.workload.key()} died while starting "
                              f"(exit code {code}); see its traceback above") from None
        assert msg == ("ready",), msg
        self._ready = True

    def close(self) -> None:
        """Stop the child (politely, then by force)."""
        with contextlib.suppress(Exception):  # a start that failed leaves nothing to stop
            self._started()
        if self._proc is None:
            return
        try:
            self._conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()
        self._proc = self._conn = None

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
            self._proc = self._conn = None

    def measure(self, configs: Sequence[KernelConfig], on_result: OnResult | None = None) -> list[MeasureResult]:
        self._started()
        results: dict[KernelConfig, MeasureResult] = {}
        todo = list(dict.fromkeys(configs))
        threads = int(self._opts["compile_threads"])

        def record(r: MeasureResult) -> None:
            results[r.config] = r
            if on_result is not None:
                on_result(r)

        while todo:
            if self._proc is None:
                self._start(threads)
            elif not self._ready:
                self._await_ready()
            # A distinct seed per batch: every check draws fresh random inputs.
            self._batches += 1
            self._conn.send(("batch", [c.to_dict() for c in todo], self.seed + 7919 * self._batches))
            in_flight: tuple[int, str] | None = None  # (index into todo, phase) of the serial step running
            progress = False
            failure: tuple[ErrorKind, str] | None = None
            while failure is None:
                try:
                    msg = self._conn.recv() if self._conn.poll(self.timeout_s) else None
                except (EOFError, OSError):
                    self._proc.join(timeout=5)
                    failure = (ErrorKind.RUNTIME, f"measurement worker died (exit code {self._proc.exitcode})")
                    break
                except KeyboardInterrupt:
                    self._kill()
                    raise
                if msg is None:
                    failure = (ErrorKind.TIMEOUT, f"no progress within {self.timeout_s:g} s; worker killed")
                elif msg[0] == "result":
                    record(MeasureResult.from_dict(msg[1]))
                    in_flight, progress = None, True
                elif msg[0] == "begin":
                    in_flight = (msg[1], msg[2])
                elif msg[0] == "batch_done":
                    break
            if failure is not None:
                self._kill()
                kind, text = failure
                if in_flight is not None and todo[in_flight[0]] not in results:
                    if kind is ErrorKind.RUNTIME and in_flight[1] == "build":
                        kind = ErrorKind.COMPILE
                    record(MeasureResult(todo[in_flight[0]], None, kind, text))
                elif not progress:
                    if threads == 1:
                        raise TuningError(f"measurement worker for {self.workload.key()} failed before "
                                          f"measuring any config ({text}); see its traceback above")
                    # The parallel compile phase died and which config did it is unknown: rebuild
                    # one at a time so the next failure names its config.
                    threads = 1
            todo = [c for c in todo if c not in results]
        return [results[c] for c in dict.fromkeys(configs)]
