"""Features of the learned cost model: the warp-specialized kernel's come last and leave the others' alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alcop_triton.model import features
from alcop_triton.model.features import FEATURE_NAMES, FEATURE_VERSION, featurize
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

H200 = get_spec("H200")
MM = Workload("matmul", (4096, 4096, 4096), "float16", "nt")
WS_NAMES = ["ws", "ws_wgmma_depth", "ws_consumers", "ws_pingpong", "log2_ws_epilogue_subtile"]
PP = KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=4, reg_stages=2, async_copy="ws",
                  persistent=True, pingpong=True, epilogue_subtile=2)


def _ws_part(x: np.ndarray) -> list[float]:
    return [float(x[FEATURE_NAMES.index(n)]) for n in WS_NAMES]


def test_ws_features_are_appended_and_versioned():
    assert FEATURE_NAMES[-len(WS_NAMES):] == WS_NAMES and FEATURE_VERSION == 4
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)


@pytest.mark.parametrize("config", [KernelConfig(), KernelConfig(128, 128, 64, num_warps=8, async_copy="tma",
                                                                 persistent=True)])
def test_other_configs_have_zero_ws_features(config):
    assert _ws_part(featurize(MM, config, H200)) == [0.0] * len(WS_NAMES)


def test_ws_configs_are_told_apart_as_the_kernel_runs_them():
    pp = featurize(MM, PP, H200)
    assert _ws_part(pp) == [1.0, 1.0, 2.0, 1.0, 1.0]
    coop = featurize(MM, PP.replace(pingpong=False, epilogue_subtile=4, reg_stages=1), H200)
    assert _ws_part(coop) == [1.0, 0.0, 2.0, 0.0, 2.0]
    one = featurize(MM, PP.replace(num_warps=4, pingpong=False, persistent=False), H200)
    assert _ws_part(one)[:3] == [1.0, 1.0, 1.0]
    assert np.isfinite(pp[FEATURE_NAMES.index("pred_efficiency")]) and pp[FEATURE_NAMES.index("valid")] == 1.0
    # 256 tiles < 2 x 132 SMs: the kernel runs ping-pong as cooperative, and the features say so
    mid = Workload("matmul", (512, 8192, 8192), "float16", "nt")
    assert _ws_part(featurize(mid, PP, H200))[3] == 0.0


def test_a_ws_config_that_runs_as_its_twin_has_the_twins_features():
    bmm = Workload("bmm", (4, 1024, 1024, 1024), "float16", "nn")
    x, twin = featurize(bmm, PP, H200), featurize(bmm, PP.tma_twin(), H200)
    np.testing.assert_array_equal(x[:-len(WS_NAMES)][~np.isnan(x[:-len(WS_NAMES)])],
                                  twin[:-len(WS_NAMES)][~np.isnan(twin[:-len(WS_NAMES)])])
    assert _ws_part(x) == [0.0] * len(WS_NAMES)
    assert not math.isnan(features.featurize(bmm, PP, get_spec("A100"))[FEATURE_NAMES.index("valid")])
