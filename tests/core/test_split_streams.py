"""Split-K buffers per stream (``build.per_stream``, ``Launch.prebind``): one call site's prebound launch run
on several streams gives each stream a workspace and arrival counters of its own (docs/decisions.md#d43).

The streams, the capture check and the capture id are stand-ins, so the rules run on the CPU: the original
stream keeps the bound buffers, another stream gets new ones once and reuses them, a capture gets buffers
that no eager call ever uses (shared by its own calls, held as long as the launch), and past the limit the
oldest stream's launch is dropped, never the original's. One case runs a real split-K kernel in the
interpreter through the rule; the same launch on real concurrent streams runs in tests/gpu/test_split_k_gpu.py.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import weakref
from typing import Any, Callable

import pytest
import torch

from alcop_triton import KernelConfig, Schedule, build
from alcop_triton.build import CompiledKernel, Launch, per_stream
from alcop_triton.kernels import matmul as km
from alcop_triton.records import TAIL_CONFIG

build_mod = importlib.import_module("alcop_triton.build")  # the module (alcop_triton.build is the function)


class _Probe:
    """The current stream, whether it is capturing and its capture id, set by the test."""

    def __init__(self, stream: int = 1) -> None:
        self.current = stream
        self.capture_id_now: int | None = None
        self.capturing_now = False
        self.capturing_asked = 0

    def stream(self) -> int:
        return self.current

    def capturing(self) -> bool:
        self.capturing_asked += 1
        return self.capturing_now

    def capture(self, stream: int) -> int | None:
        return self.capture_id_now if self.capturing_now else None


class _Run:
    """A prebound launch with buffers of its own (two tensors, as ``_split_buffers`` makes): records its calls."""

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, 0
        self.buffers = [torch.empty(4), torch.zeros(2, dtype=torch.int32)]

    def __call__(self, *tensors: Any) -> None:
        self.calls += 1


def _dispatcher(probe: _Probe, limit: int = 16) -> tuple[Callable[..., None], _Run, list[_Run]]:
    first, made = _Run("first"), list[_Run]()

    def rebound() -> _Run:
        made.append(_Run(f"rebound{len(made)}"))
        return made[-1]
    return per_stream(first, rebound, probe.stream, probe.capturing, probe.capture, limit), first, made


def test_one_stream_reuses_the_bound_buffers_and_another_gets_its_own_once() -> None:
    probe = _Probe(stream=1)
    run, first, made = _dispatcher(probe)
    for _ in range(3):
        run()
    assert first.calls == 3 and made == []  # the stream current at prebind runs the bound launch
    probe.current = 2
    for _ in range(3):
        run()
    assert len(made) == 1 and made[0].calls == 3 and first.calls == 3
    assert {id(t) for t in made[0].buffers}.isdisjoint(id(t) for t in first.buffers)
    probe.current = 1
    run()
    probe.current = 2
    run()
    assert first.calls == 4 and made[0].calls == 4 and len(made) == 1
    assert probe.capturing_asked == 1  # asked on the one miss, never on a hit


def test_a_capture_gets_buffers_no_eager_call_uses() -> None:
    probe = _Probe(stream=1)
    run, first, made = _dispatcher(probe)
    probe.current, probe.capturing_now, probe.capture_id_now = 3, True, 70
    for _ in range(4):
        run()
    assert len(made) == 1 and made[0].calls == 4  # the capture's calls share its buffers
    probe.capturing_now = False  # the capture ended: an eager call there must not get the graph's buffers
    run()
    assert len(made) == 2 and made[1].calls == 1 and made[0].calls == 4
    run()
    assert len(made) == 2 and made[1].calls == 2  # that one is the stream's from now on
    # a later capture on another stream (torch.cuda.graph captures on a stream of its own) gets new buffers
    probe.current, probe.capturing_now, probe.capture_id_now = 4, True, 71
    run()
    probe.capture_id_now = 72
    run()
    assert len(made) == 4 and [r.calls for r in made[2:]] == [1, 1]


def test_a_capture_on_a_stream_with_eager_calls_replays_that_streams_buffers() -> None:
    # the capture check is not on a hit's path: what docs/limitations.md says remains shared
    probe = _Probe(stream=1)
    run, first, made = _dispatcher(probe)
    probe.current = 2
    run()
    probe.capturing_now, probe.capture_id_now = True, 5
    run()
    assert len(made) == 1 and made[0].calls == 2


def test_a_capture_without_an_id_gives_each_call_buffers_of_its_own() -> None:
    probe = _Probe(stream=1)
    run, first, made = _dispatcher(probe)
    probe.current, probe.capturing_now, probe.capture_id_now = 3, True, None
    run()
    run()
    assert len(made) == 2 and [r.calls for r in made] == [1, 1]


def test_capture_buffers_are_held_as_long_as_the_launch() -> None:
    probe = _Probe(stream=1)
    run, first, made = _dispatcher(probe)
    probe.current, probe.capturing_now = 3, True
    for cid in (1, 2, 3):
        probe.capture_id_now = cid
        run()
    refs = [weakref.ref(t) for r in made for t in r.buffers]
    made.clear()
    gc.collect()
    assert all(r() is not None for r in refs)  # a graph replays them: the pool must not reuse the memory
    del run
    gc.collect()
    assert all(r() is None for r in refs)


def test_past_the_limit_the_oldest_stream_but_never_the_original_loses_its_launch() -> None:
    probe = _Probe(stream=1)
    run, first, made = _dispatcher(probe, limit=3)
    for s in (2, 3):
        probe.current = s
        run()
    assert len(made) == 2
    probe.current = 4  # a fourth stream: stream 2's launch goes, the original stream's stays
    run()
    assert len(made) == 3
    probe.current = 1
    run()
    assert first.calls == 1 and len(made) == 3
    for s, calls in ((3, 2), (4, 2)):
        probe.current = s
        run()
        assert made[s - 2].calls == calls and len(made) == 3
    probe.current = 2  # made again; this drops stream 3's (now the oldest besides the original)
    run()
    assert len(made) == 4 and made[0].calls == 1
    probe.current = 1
    run()
    assert first.calls == 2 and len(made) == 4


def test_limit_below_two_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"per_stream: limit=1: must be at least 2"):
        per_stream(_Run("first"), lambda: _Run("x"), lambda: 1, lambda: False, lambda s: None, limit=1)


def _counting(factory: Callable[[], list[Any]], made: list[list[Any]]) -> Callable[[], list[Any]]:
    def make() -> list[Any]:
        made.append(factory())
        return made[-1]
    return make


@pytest.mark.interpreter
def test_a_split_launch_on_two_streams_runs_with_two_sets_of_buffers(kit) -> None:
    kern = kit.matmul("float32", KernelConfig(16, 16, 16, group_m=2, smem_stages=2, split_k=3))
    g = torch.Generator().manual_seed(5)
    a, b = kit.rand((20, 100), "float32", g), kit.rand((100, 24), "float32", g)
    ref = a.double() @ b.double()
    out = kit.poisoned((20, 24), "float32")
    launch, _ = kern.bind(a, b, out)
    at = launch.n_tensors + len(launch.descriptors)
    ws, counters = launch.args[at:at + 2]
    assert launch.split_buffers is not None
    assert ws.dtype == torch.float32 and counters.dtype == torch.int32 and int(counters.abs().sum()) == 0
    made: list[list[Any]] = []
    launch = dataclasses.replace(launch, split_buffers=_counting(launch.split_buffers, made))
    probe = _Probe(stream=1)
    run = launch.per_stream(launch.prebind(), probe.stream, probe.capturing, probe.capture)

    ws.fill_(float("nan"))
    run(a, b, out)  # the original stream: the bound buffers
    kit.assert_close(out, ref, "float32", "original stream")
    assert made == [] and not torch.isnan(ws).all()

    ws.fill_(float("nan"))
    out.fill_(float("nan"))
    probe.current = 2
    run(a, b, out)  # another stream: buffers of its own, the bound ones untouched
    kit.assert_close(out, ref, "float32", "second stream")
    assert len(made) == 1 and torch.isnan(ws).all()
    ws2, counters2 = made[0]
    assert ws2.data_ptr() != ws.data_ptr() and counters2.data_ptr() != counters.data_ptr()
    assert ws2.shape == ws.shape and counters2.shape == counters.shape and int(counters2.abs().sum()) == 0
    assert not torch.isnan(ws2).all()
    out.fill_(float("nan"))
    run(a, b, out)
    kit.assert_close(out, ref, "float32", "second stream again")
    assert len(made) == 1 and torch.isnan(ws).all()


def test_bind_gives_split_launches_and_their_wave_tails_a_buffer_factory(kit) -> None:
    g = torch.Generator().manual_seed(1)
    a, b = kit.rand((20, 40), "float32", g), kit.rand((40, 24), "float32", g)
    plain, _ = kit.matmul("float32", KernelConfig(16, 16, 16, group_m=2, smem_stages=2)).bind(a, b)
    assert plain.split_buffers is None
    # a wave tail whose tail is split (benchmarks/probes/wave_tail_configs.py's): the tail launch has one
    inputs, c = km.matmul_te("float32", False)
    cfg = KernelConfig(64, 64, 32, group_m=2, smem_stages=2, async_copy="tma", wave_tail=True)
    kern = build(Schedule.from_config(c, cfg), inputs + [c])
    kern._tails[1] = CompiledKernel(kern.schedule.tail_schedule(TAIL_CONFIG.replace(block_k=32, smem_stages=2, split_k=2)),
                                inputs + [c])
    a, b = kit.rand((300, 64), "float32", g), kit.rand((64, 64), "float32", g)
    head, _ = kern.bind(a, b)
    assert head.then is not None and head.split_buffers is None and head.then.split_buffers is not None
    tail = head.then
    at = tail.n_tensors + len(tail.descriptors)
    fresh = tail.split_buffers()
    assert [(t.dtype, t.shape) for t in fresh] == [(t.dtype, t.shape) for t in tail.args[at:at + 2]]
    assert fresh[0].data_ptr() != tail.args[at].data_ptr() and int(fresh[1].abs().sum()) == 0


def test_prebind_on_cuda_wraps_each_split_launch_of_a_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    # runtime.prebind and CUDA's probes stood in for: each launch of a ``then`` chain that has split-K
    # buffers picks its stream's own; one without runs as prebound
    probe = _Probe(stream=1)
    bound: list[tuple[str, tuple[Any, ...]]] = []

    def fake_prebind(run: Any, jit: Any, device: Any, grid: Any, args: tuple[Any, ...], *rest: Any) -> Any:
        def launch(*tensors: Any) -> None:
            bound.append((run, args))
        return launch
    monkeypatch.setattr(build_mod, "prebind", fake_prebind)
    monkeypatch.setattr(build_mod, "_cuda_probes", lambda device: (probe.stream, probe.capturing, probe.capture))
    made: dict[str, int] = {"head": 0, "tail": 0}

    def buffers(name: str) -> Callable[[], list[Any]]:
        def make() -> list[Any]:
            made[name] += 1
            return [f"{name}-ws{made[name]}", f"{name}-locks{made[name]}"]
        return make
    dev = torch.device("cuda", 0)
    tail = Launch(None, "tail", (1,), ("x", "y", "tail-ws0", "tail-locks0", 7), {}, 2, dev,
                  split_buffers=buffers("tail"))
    mid = Launch(None, "mid", (1,), ("x", "y", 7), {}, 2, dev, then=tail)
    head = Launch(None, "head", (1,), ("x", "y", "head-ws0", "head-locks0", 7), {}, 2, dev, then=mid,
                  split_buffers=buffers("head"))
    run = head.prebind()
    bound.clear()
    run("p", "q")
    assert [args for _, args in bound] == [("x", "y", "head-ws0", "head-locks0", 7), ("x", "y", 7),
                                           ("x", "y", "tail-ws0", "tail-locks0", 7)]
    probe.current = 2
    bound.clear()
    run("p", "q")
    run("p", "q")
    assert made == {"head": 1, "tail": 1}
    assert [args for _, args in bound[:3]] == [("x", "y", "head-ws1", "head-locks1", 7), ("x", "y", 7),
                                               ("x", "y", "tail-ws1", "tail-locks1", 7)]
    assert bound[3:] == bound[:3]
    # the wrapper has no native_state: the fast path's C run (which skips the stream check) is not taken
    assert not hasattr(run, "native_state")
    assert not hasattr(Launch(None, "h", (1,), ("x", "s", "w", "l"), {}, 1, dev,
                              split_buffers=buffers("head")).prebind(), "native_state")
