"""Shared fixtures: an isolated cache dir and a SYNTHETIC measurement set (never real data).

The synthetic "measurements" are the analytical model itself run with different efficiency
constants plus seeded log-normal noise: enough to test that fitting, ranking and the evaluation
script work end to end, not to claim anything about real GPUs.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from alcop_triton.model.analytical import estimate
from alcop_triton.model.data import Measurement
from alcop_triton.model.hardware import GPUSpec, get_spec
from alcop_triton.records import KernelConfig, Workload


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """No test reads or writes the user's calibration cache."""
    monkeypatch.setenv("ALCOP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def h100() -> GPUSpec:
    return get_spec("H100", use_calibration=False)


SYNTH_WORKLOADS = [Workload("matmul", s) for s in
                   [(4096, 4096, 4096), (1024, 64, 2048), (2048, 512, 8192), (1024, 3072, 768),
                    (256, 256, 8192), (8192, 8192, 1024)]]
SYNTH_CONFIGS = [KernelConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, smem_stages=s)
                 for bm, bn, bk, w, s in itertools.product([32, 64, 128, 256], [32, 64, 128, 256], [32, 64],
                                                           [4, 8], [1, 2, 3, 4])]


def synthetic_truth(spec: GPUSpec) -> GPUSpec:
    """The 'hardware' that produces the synthetic timings: other constants than the preset."""
    return spec.replace(compute_eff=0.85, latency_scale=2.5, iter_overhead_cycles=90.0, launch_s=3e-6)


def make_synthetic(spec: GPUSpec, workloads=SYNTH_WORKLOADS, configs=SYNTH_CONFIGS, seed: int = 0,
                   noise: float = 0.03, per_workload: int | None = 60) -> list[Measurement]:
    """Seeded synthetic measurements; configs the model calls invalid are recorded as failures."""
    rng = random.Random(seed)
    truth = synthetic_truth(spec)
    out = []
    for wl in workloads:
        cfgs = configs if per_workload is None else rng.sample(configs, per_workload)
        for c in cfgs:
            t = estimate(wl, c, truth).time_s
            if math.isfinite(t):
                out.append(Measurement(wl, c, t * math.exp(rng.gauss(0.0, noise)), None, "H100"))
            else:
                out.append(Measurement(wl, c, None, "out_of_resources", "H100"))
    return out
