"""Measurement: failure classification, isolation of hanging/crashing kernels, output checks."""

from __future__ import annotations

import os

import pytest

from alcop_triton.autotune.measure import ErrorKind, LocalMeasurer, ProcessMeasurer, check_output, classify
from alcop_triton.errors import OutOfResources, ScheduleError
from alcop_triton.records import KernelConfig, Workload

HERE = os.path.dirname(os.path.abspath(__file__))
FACTORY = "alcop_fake_runner:make_runner"
W = Workload("matmul", (64, 64, 32), "float32", "nn")


@pytest.fixture(autouse=True)
def _fake_runner_importable(monkeypatch):
    # Spawned children inherit sys.path, so they can import the fake factory too.
    monkeypatch.syspath_prepend(HERE)


def test_classify():
    assert classify(OutOfResources("shared memory", 2, 1), "build") is ErrorKind.OUT_OF_RESOURCES
    assert classify(ScheduleError("x"), "build") is ErrorKind.INVALID_CONFIG
    assert classify(type("CompilationError", (Exception,), {})("x"), "run") is ErrorKind.COMPILE
    assert classify(RuntimeError("x"), "build") is ErrorKind.COMPILE
    assert classify(RuntimeError("x"), "run") is ErrorKind.RUNTIME


def test_check_output_catches_nan_and_error():
    import torch

    ref = torch.ones(4, 4, dtype=torch.float64)
    assert check_output(ref.float(), ref, 1e-3) is None
    poisoned = ref.clone()
    poisoned[1, 2] = float("nan")
    assert "NaN" in check_output(poisoned, ref, 1e-3)
    assert "max abs error" in check_output(ref * 1.1, ref, 1e-3)
    assert "shape" in check_output(ref[:2], ref, 1e-3)


def test_local_measurer_classifies_without_dying():
    m = LocalMeasurer(W, "cpu", factory=FACTORY, compile_threads=2, cpu_reps=1)
    good = KernelConfig(block_m=256, block_n=64)
    configs = [good, KernelConfig(block_n=16), KernelConfig(block_n=32), KernelConfig(block_m=16),
               KernelConfig(block_m=128)]
    seen = []
    res = m.measure(configs, on_result=seen.append)
    assert [r.config for r in res] == configs and len(seen) == len(configs)
    assert res[0].ok and res[0].time_ms > 0 and res[0].timer == "perf_counter"
    assert [r.error for r in res[1:]] == [ErrorKind.INVALID_CONFIG, ErrorKind.OUT_OF_RESOURCES,
                                          ErrorKind.RUNTIME, ErrorKind.WRONG_ANSWER]
    assert all(r.time_ms is None and r.message for r in res[1:])


def test_process_measurer_survives_hang_and_crashes():
    good = KernelConfig(block_m=256, block_n=64)
    hang = KernelConfig(block_m=32)
    run_crash = KernelConfig(block_m=64, block_n=128)
    build_crash = KernelConfig(block_k=128)
    configs = [good, hang, run_crash, build_crash, KernelConfig(block_m=256, block_n=256)]
    with ProcessMeasurer(W, "cpu", factory=FACTORY, compile_threads=2, cpu_reps=1, timeout_s=3) as m:
        res = m.measure(configs)
    by = {r.config: r for r in res}
    assert [r.config for r in res] == configs
    assert by[good].ok and by[configs[-1]].ok
    assert by[hang].error is ErrorKind.TIMEOUT
    assert by[run_crash].error is ErrorKind.RUNTIME and "died" in by[run_crash].message
    assert by[build_crash].error is ErrorKind.COMPILE


def test_graph_timer_gets_the_fastest_graph_time_so_far(monkeypatch):
    # The device timer is replaced (no GPU here): it answers scripted times and records the bound it
    # was given, which ``graph_time`` uses to stop configs SLOW_RATIO times slower than it early.
    from alcop_triton.autotune import measure

    times = {64: (0.05, "cuda_graph"), 256: (0.02, "cuda_graph"), 128: (0.5, "do_bench")}  # by block_n
    bounds = []

    def fake_time_gpu(runner, seed, best_graph_ms=None):
        bounds.append(best_graph_ms)
        return times[runner.config.block_n]

    monkeypatch.setattr(measure, "time_gpu", fake_time_gpu)
    m = LocalMeasurer(W, "gpu-under-test", factory=FACTORY, compile_threads=1)
    res = m.measure([KernelConfig(256, n, 32) for n in (64, 256, 128)])
    assert [r.ok for r in res] == [True, True, True] and bounds == [None, 0.05, 0.02]
    # A do_bench time (another timer) never becomes the bound; a failed config changes nothing.
    res = m.measure([KernelConfig(128, 64, 32), KernelConfig(256, 64, 32, smem_stages=3)])
    assert res[0].error is ErrorKind.WRONG_ANSWER and bounds[-1] == 0.02 and m.best_graph_ms == 0.02
