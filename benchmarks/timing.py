"""The benchmark harnesses' timers, in one place; every result names the timer that produced it.

* ``eager``: one call at a time, CUDA events around it after an L2 flush (a buffer twice the L2 size
  zeroed before each call, so every call starts cold). With ``host_included`` the host is synchronised
  after the flush, so the start event fires at once and the elapsed time holds the call's host work
  (argument checks, dispatch, launch) as well as its kernels: what a user calling eagerly waits for.
  Without it the flush kernel is still running when the call is launched, which hides the host work:
  the kernel's own time on cold inputs. Several implementations take turns call by call (the host's
  latency after a synchronisation drifts by tens of µs over a run; a block of calls of one
  implementation would carry the drift into the ratios).
* ``graph``: the call captured in a CUDA graph and replayed, ``triton.testing.do_bench_cudagraph``
  (median): the kernels alone, launch cost hidden, L2 warm (the graph replays back to back).
* ``do_bench``: ``triton.testing.do_bench`` (median; it zeroes a buffer before every call): for a launch
  a graph cannot capture.
* ``wall``: ``time.perf_counter`` around a call, for the Triton interpreter's dry runs on a CPU, where
  nothing is measured that a GPU user would see.

``overhead.py``'s host time per call is not a CUDA timer (``time.perf_counter_ns`` around asynchronous
launches) and stays with that harness; the tuner's own timer is ``alcop_triton.autotune.measure.time_gpu``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping

EAGER = "eager call, CUDA events after an L2 flush, host cost included, implementations in turns call by call (median)"
EAGER_KERNEL = "CUDA events around one launch after an L2 flush, host cost hidden behind the flush (median)"
GRAPH = "kernel under a CUDA graph, triton.testing.do_bench_cudagraph (median)"
DO_BENCH = "triton.testing.do_bench (median, L2 flushed before each call; the launch could not be graph-captured)"
WALL = "wall clock, CPU interpreter (dry run: not a measurement)"
PASS = "CUDA events around one call, host synchronised before each (host cost included), no L2 flush"


def l2_flush_buffer() -> Any:
    """A CUDA buffer twice the current device's L2: zeroing it evicts whatever a call left in L2."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return torch.empty(2 * int(props.L2_cache_size) // 4 + 1, dtype=torch.int32, device="cuda")


def event_times_ms(calls: Mapping[str, Callable[[], Any]], reps: int, *, flush: Any = None,
                   host_included: bool = True, warmup: int = 1) -> dict[str, list[float]]:
    """ms of each of ``reps`` calls of every implementation in ``calls``, timed by CUDA events.

    ``warmup`` untimed calls of each first. Per round every implementation is called once, the order
    turning by one each round (no implementation always follows the same one). ``flush`` (from
    ``l2_flush_buffer``) is zeroed before each call; ``host_included`` synchronises the host before the
    start event is recorded (see the module docstring)."""
    import torch

    for fn in calls.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    order = list(calls.items())
    pairs: dict[str, list[Any]] = {name: [] for name in calls}
    for rep in range(reps):
        turn = rep % len(order) if order else 0
        for name, fn in order[turn:] + order[:turn]:
            if flush is not None:
                flush.zero_()
            if host_included:
                torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            if not host_included:
                end.synchronize()   # one call in flight at a time: the launch queue never fills
            pairs[name].append((start, end))
    torch.cuda.synchronize()
    return {name: [s.elapsed_time(e) for s, e in ps] for name, ps in pairs.items()}


def eager_ms(calls: Mapping[str, Callable[[], Any]], reps: int, *, flush: Any, host_included: bool = True,
             warmup: int = 1) -> dict[str, float]:
    """Median of ``event_times_ms`` per implementation: the ``EAGER`` timer (``EAGER_KERNEL`` without
    ``host_included``)."""
    times = event_times_ms(calls, reps, flush=flush, host_included=host_included, warmup=warmup)
    return {name: statistics.median(ts) for name, ts in times.items()}


def graph_ms(fn: Callable[[], Any], rep_ms: int = 100) -> float:
    """The ``GRAPH`` timer: median ms of ``fn`` replayed in a CUDA graph."""
    import triton.testing

    return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))


def do_bench_ms(fn: Callable[[], Any], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """The ``DO_BENCH`` timer: median ms of ``triton.testing.do_bench``."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def wall_times_ms(fn: Callable[[], Any], reps: int, clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """ms of each of ``reps`` calls by the host's clock (the ``WALL`` timer)."""
    out = []
    for _ in range(reps):
        t0 = clock()
        fn()
        out.append((clock() - t0) * 1e3)
    return out


def wall_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median of ``wall_times_ms``."""
    return statistics.median(wall_times_ms(fn, reps))
