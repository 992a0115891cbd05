from __future__ import annotations

import math

import pytest

from alcop_triton.errors import UnsupportedError
from alcop_triton.model import predict_times


def test_matmul_dicts():
    cfgs = [{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_SIZE_M": 8, "num_warps": 8, "num_stages": 4},
            {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
            {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_warps": 8, "num_stages": 5},
            {}]
    t = predict_times("matmul", (4096, 4096, 4096), "float16", cfgs, "H100")
    assert isinstance(t, list) and len(t) == 4 and all(isinstance(x, float) for x in t)
    assert 0 < t[0] < t[1] < math.inf and t[2] == math.inf and math.isfinite(t[3])


def test_other_ops_and_gpus():
    assert math.isfinite(predict_times("bmm", (12, 512, 512, 64), "bfloat16", [{}], "NVIDIA H100 80GB HBM3")[0])
    assert math.isfinite(predict_times("conv2d", (64, 56, 56, 64, 64, 3, 3, 1, 1), "float16", [{}], "a100")[0])
    sync = predict_times("matmul", (4096, 4096, 4096), "float16", [{"num_warps": 8, "BLOCK_M": 128}], "H100")
    assert predict_times("matmul", (4096, 4096, 4096), "float32", [{"num_warps": 8, "BLOCK_M": 128}], "h200")[0] > 0
    assert sync[0] > 0 and predict_times("matmul", (64, 64, 64), "float16", [], "H100") == []


@pytest.mark.parametrize("bad, match", [({"BLOCKM": 64}, "unknown"), ({"BLOCK_M": 48}, "power of two"),
                                        ({"num_warps": "4"}, "expected int"), ("BLOCK_M=64", "dict")])
def test_malformed_configs_raise(bad, match):
    with pytest.raises(ValueError, match=match) as e:
        predict_times("matmul", (64, 64, 64), "float16", [{}, bad], "H100")
    assert "configs[1]" in str(e.value)


def test_bad_workload_and_gpu():
    with pytest.raises(ValueError, match="bad workload"):
        predict_times("matmul", (64, 64), "float16", [{}], "H100")
    with pytest.raises(UnsupportedError, match="no preset"):
        predict_times("matmul", (64, 64, 64), "float16", [{}], "RTX 9090")
