"""The measurer on the real operator runners: interpreter on CPU always, CUDA timers on a GPU."""

from __future__ import annotations

import pytest

from alcop_triton.autotune.database import Database
from alcop_triton.autotune.measure import LocalMeasurer
from alcop_triton.autotune.session import resolve_target, tune
from alcop_triton.records import KernelConfig, Workload


def test_interpreter_measures_and_checks():
    import torch

    if torch.cuda.is_available():
        pytest.skip("covered by the GPU test")
    w = Workload("matmul", (64, 32, 64), "float16", "nt")
    res = LocalMeasurer(w, "cpu", compile_threads=1, cpu_reps=1).measure(
        [KernelConfig(block_m=32, block_n=32, block_k=32, smem_stages=2),
         KernelConfig(block_m=32, block_n=32, block_k=32, smem_stages=2, reg_stages=2, reg_split=2)])
    assert all(r.ok and r.timer == "perf_counter" for r in res), [r.message for r in res]


@pytest.mark.gpu
def test_gpu_tune_small_matmul(tmp_path):
    w = Workload("matmul", (512, 512, 1024), "float16", "nt")
    target = resolve_target("cuda")
    db = Database(tmp_path / "t.sqlite")
    res = tune(w, target, db, tuner="analytical", n_trials=8, batch_size=4, timeout_s=300)
    ok = [t for t in res.trials if t.result.ok]
    assert ok, [t.result.message for t in res.trials]
    # A 512x512x1024 fp16 GEMM runs in microseconds: timed under a CUDA graph.
    assert {t.result.timer for t in ok} <= {"cuda_graph", "do_bench"}
    assert db.best(w, target.key).config == res.best.config


@pytest.mark.gpu
def test_graph_time_follows_do_bench_cudagraph_and_stops_slow_configs_early():
    import torch
    import triton.testing

    from alcop_triton.autotune import measure

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)

    def call() -> None:
        torch.matmul(a, b)

    ref = triton.testing.do_bench_cudagraph(call, rep=20, return_mode="median")
    full = measure.graph_time(call)
    stopped = measure.graph_time(call, stop_above_ms=0.0)  # "slower than the best" from the first replay
    assert abs(full - ref) <= 0.1 * ref and abs(stopped - ref) <= 0.1 * ref


@pytest.mark.gpu
def test_graph_time_hands_kernels_above_the_threshold_to_the_eager_timer():
    import torch

    from alcop_triton.autotune import measure

    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)

    def call() -> None:
        torch.matmul(a, a)

    assert measure.graph_time(call, eager_from_ms=0.0) is None  # every estimate is >= 0
    t = measure.graph_time(call, eager_from_ms=1e9)
    assert t is not None and t > 0


@pytest.mark.gpu
def test_time_gpu_picks_the_timer_by_kernel_time():
    from alcop_triton.autotune import measure
    from alcop_triton.kernels.runner import make_runner

    class TorchRunner:  # torch.matmul on the workload's inputs (no bind: timed through ``run``)
        def __init__(self, w: Workload) -> None:
            self.workload, self._r = w, make_runner(w, KernelConfig(), "cuda")

        def inputs(self, seed: int):
            return self._r.inputs(seed)

        def run(self, x):
            return x[0] @ x[1]

    small = measure.time_gpu(TorchRunner(Workload("matmul", (256, 256, 256), "float16", "nn")), 0)
    large = measure.time_gpu(TorchRunner(Workload("matmul", (4096, 4096, 4096), "float16", "nn")), 0)
    assert small[1] == "cuda_graph" and small[0] < measure.SMALL_KERNEL_MS
    assert large[1] == "do_bench" and large[0] >= measure.SMALL_KERNEL_MS
