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


class CountingRunner:
    """A correct CPU matmul that records which input sets it was asked for and which it ran on."""

    rtol = 1e-3

    def __init__(self, workload, config, log):
        self.workload, self.config, self.log = workload, config, log

    def inputs(self, seed):
        import torch

        g = torch.Generator().manual_seed(seed)
        _, m, n, k = self.workload.gemm_dims()
        x = (torch.randn(m, k, generator=g), torch.randn(k, n, generator=g))
        self.log["made"].append((seed, id(x)))
        return x

    def reference(self, inputs):
        self.log["checked"].append((self.config, id(inputs)))
        return inputs[0].double() @ inputs[1].double()

    def run(self, inputs):
        self.log["ran"].append(id(inputs))
        return inputs[0] @ inputs[1]


@pytest.fixture
def fake_gpu(monkeypatch):
    """A "cuda" device for ``LocalMeasurer`` without one: the CUDA calls the measurer makes outside the
    timers are stubbed, ``graph_time`` answers scripted estimates and ``do_bench`` is recorded."""
    import torch
    import triton.testing

    from alcop_triton.autotune import measure

    log = {"made": [], "checked": [], "ran": [], "graph": [], "do_bench": []}
    script = {"graph_ms": 0.02}  # what graph_time returns (None: "estimate above SMALL_KERNEL_MS")
    l2 = 4 * (64 * 32 + 32 * 64)  # the bytes of one float32 input set of W: 2 x L2 takes 2 rotating sets
    monkeypatch.setattr(measure, "_WORKLOAD_DATA", {})
    monkeypatch.setattr(measure, "resolve_factory", lambda spec: lambda w, c, d: CountingRunner(w, c, log))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"L2_cache_size": l2})())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: real_empty(*a, **k))

    def graph_time(call, stop_above_ms=None, eager_from_ms=None):
        for _ in range(3):
            call()
        log["graph"].append(eager_from_ms)
        return script["graph_ms"]

    def do_bench(fn, **kw):
        fn()
        log["do_bench"].append(kw)
        return 0.5

    monkeypatch.setattr(measure, "graph_time", graph_time)
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    return log, script


def test_inputs_are_made_once_per_workload_and_check_inputs_once_per_config(fake_gpu):
    log, _ = fake_gpu
    m = LocalMeasurer(W, "cuda", factory="counting", compile_threads=3, seed=100)
    m.prepare()
    # The warm-up set and the two rotating timing sets, before any config is built.
    assert [s for s, _ in log["made"]] == [100, 100, 101]
    warm_id = log["made"][0][1]
    configs = [KernelConfig(block_m=256, block_n=n) for n in (64, 128, 256)]
    for batch_seed in (200, 300):  # two batches, as a measurement child gets them
        log["made"].clear()
        m.seed = batch_seed
        res = m.measure(configs)
        assert all(r.ok and r.timer == "cuda_graph" for r in res), [r.message for r in res]
        # Only each config's check inputs (seed + i), drawn once, and checked on exactly those.
        assert sorted(s for s, _ in log["made"]) == [batch_seed, batch_seed + 1, batch_seed + 2]
        made = {i for _, i in log["made"]}
        assert {i for _, i in log["checked"][-3:]} == made and warm_id not in made
    assert log["ran"].count(warm_id) == 6  # every config of both batches warmed up on the one set


def test_timer_choice_uses_the_graph_timers_own_estimate(fake_gpu):
    from alcop_triton.autotune import measure

    log, script = fake_gpu
    m = LocalMeasurer(W, "cuda", factory="counting", compile_threads=1)
    res = m.measure([KernelConfig(block_m=256, block_n=64)])
    # Small kernel: graph_time alone, told where eager timing starts; no do_bench run before it.
    assert res[0].timer == "cuda_graph" and res[0].time_ms == 0.02
    assert log["graph"] == [measure.SMALL_KERNEL_MS] and log["do_bench"] == []
    script["graph_ms"] = None  # the estimate says: not a small kernel
    res = m.measure([KernelConfig(block_m=256, block_n=128)])
    assert res[0].timer == "do_bench" and res[0].time_ms == 0.5
    assert log["do_bench"] == [{"warmup": 25, "rep": 100, "return_mode": "median"}]


def test_closing_skips_the_childs_interpreter_shutdown(tmp_path, monkeypatch):
    # The fake factory's module registers an exit handler that writes this file: a child that ran
    # the interpreter's shutdown would leave it behind.
    marker = tmp_path / "shutdown-ran"
    monkeypatch.setenv("ALCOP_FAKE_RUNNER_EXIT_MARKER", str(marker))
    m = ProcessMeasurer(W, "cpu", factory=FACTORY, compile_threads=1, cpu_reps=1)
    assert m.measure([KernelConfig(block_m=256, block_n=64)])[0].ok
    proc = m._proc
    m.close()
    assert proc.exitcode == 0 and not marker.exists()


def test_prepare_leaves_the_inputs_to_the_first_batch_when_the_factory_refuses_the_default_config(fake_gpu, monkeypatch):
    from alcop_triton.autotune import measure

    log, _ = fake_gpu

    def factory(w, c, d):
        if c == KernelConfig():
            raise ScheduleError("default config refused")
        return CountingRunner(w, c, log)

    monkeypatch.setattr(measure, "resolve_factory", lambda spec: factory)
    m = LocalMeasurer(W, "cuda", factory="refusing", compile_threads=1, seed=100)
    m.prepare()
    assert log["made"] == []
    assert m.measure([KernelConfig(block_m=256, block_n=64)])[0].ok
    # The warm-up set, the config's check inputs (seed 100), then the two timing sets.
    assert [s for s, _ in log["made"]] == [100, 100, 100, 101]
