"""benchmarks/timing.py on CPU: the CUDA timers' call order, flushes and synchronisations with torch.cuda
stood in for, and the wall timer with a scripted clock."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from . import load_script

timing = load_script("timing.py", "timing")


class FakeCuda:
    """torch.cuda's synchronize and Event, recording what happens in order; event k reads time k."""

    def __init__(self, log: list[str]) -> None:
        self.log, self.t = log, 0

    def synchronize(self) -> None:
        self.log.append("sync")

    def Event(self, enable_timing: bool) -> Any:  # noqa: N802  (torch's name)
        cuda = self

        class _Event:
            def record(self) -> None:
                cuda.t += 1
                self.at = float(cuda.t)
                cuda.log.append("record")

            def synchronize(self) -> None:
                cuda.log.append("wait")

            def elapsed_time(self, end: Any) -> float:
                return end.at - self.at
        return _Event()


class Flush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def zero_(self) -> None:
        self.log.append("flush")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], FakeCuda]:
    log: list[str] = []
    cuda = FakeCuda(log)
    monkeypatch.setattr(torch.cuda, "synchronize", cuda.synchronize)
    monkeypatch.setattr(torch.cuda, "Event", cuda.Event)
    return log, cuda


def test_eager_turns_flushes_and_synchronises_before_each_call(fake: tuple[list[str], FakeCuda]) -> None:
    log, _ = fake
    calls = {name: (lambda name=name: log.append(name)) for name in ("a", "b", "c")}
    times = timing.event_times_ms(calls, reps=3, flush=Flush(log), warmup=1)
    assert log[:4] == ["a", "b", "c", "sync"]          # one warm-up call each, then the GPU drained
    timed = [x for x in log[4:] if x in calls]
    assert timed == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]   # the order turns by one each round
    # before every timed call: the flush, then the host synchronised, then the start event
    first = log[4:]
    assert first[:6] == ["flush", "sync", "record", "a", "record", "flush"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t == 1.0 for v in times.values() for t in v)   # end - start of each call's own events


def test_kernel_timer_hides_the_host_and_waits_for_each_call(fake: tuple[list[str], FakeCuda]) -> None:
    log, _ = fake
    med = timing.eager_ms({"k": lambda: log.append("k")}, reps=2, flush=Flush(log), host_included=False, warmup=3)
    assert log[:4] == ["k", "k", "k", "sync"]
    assert log[4:] == ["flush", "record", "k", "record", "wait"] * 2 + ["sync"]
    assert med == {"k": 1.0}


def test_wall_timer_medians_a_scripted_clock() -> None:
    ticks = iter([0.0, 0.002, 1.0, 1.010, 2.0, 2.004])
    assert timing.wall_times_ms(lambda: None, 3, clock=lambda: next(ticks)) == pytest.approx([2.0, 10.0, 4.0])


def test_each_timer_has_a_distinct_name() -> None:
    names = [timing.EAGER, timing.EAGER_KERNEL, timing.GRAPH, timing.DO_BENCH, timing.WALL, timing.PASS]
    assert len(set(names)) == len(names)
