"""Generated variants compiled by Triton for an H100 (sm90) on the CPU: each must come out as TMA copies
feeding wgmma within 227 KiB of shared memory. A handful of variants (seconds each), one subprocess."""

from __future__ import annotations

import pytest

from alcop_triton.hopper import HopperConfig
from alcop_triton.hopper.config import SMEM_LIMIT

LEVEL1 = HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=0, stages=4)
LEVEL12 = HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=1, stages=4)
LEVEL12_WS = HopperConfig(warp_specialize=True, persistent=False, wgmma_depth=2, stages=4)
PINGPONG = HopperConfig(consumers=2, policy="pingpong", stages=4, wgmma_depth=1, epilogue_subtile=2)
COOP = HopperConfig(block_n=256, consumers=2, policy="cooperative", stages=3, wgmma_depth=1, epilogue_subtile=2)

CASES = [  # (config, dtype, layout, bias, activation, residual)
    (LEVEL1, "float16", "nn", False, None, False),
    (LEVEL12, "bfloat16", "nt", False, None, False),
    (LEVEL12_WS, "float16", "tn", False, None, False),
    (PINGPONG, "bfloat16", "tt", False, None, False),
    (PINGPONG.replace(wgmma_depth=2, epilogue_subtile=4), "float16", "nt", True, "relu", False),
    (COOP, "bfloat16", "nn", True, None, False),
    (PINGPONG, "float16", "nt", True, "gelu", True),
    (COOP, "bfloat16", "tn", False, "silu", True),
    (LEVEL12, "float16", "nn", True, "tanh", False),
    (LEVEL12_WS, "bfloat16", "nt", False, "sigmoid", True),
]


def compile_all() -> list[dict]:
    from alcop_triton.hopper.sm90_check import compile_sm90
    return [compile_sm90(c, d, lay, bias=b, activation=act, residual=r) for c, d, lay, b, act, r in CASES]


@pytest.mark.sm90_compile
def test_generated_variants_compile_for_sm90(kit) -> None:
    found = kit.apart("tests.hopper.test_sm90_compile", "t.compile_all()")
    for (cfg, dtype, layout, *_), got in zip(CASES, found):
        assert got["wgmma"] and got["tma"], (cfg.tag(), dtype, layout, got)
        assert got["shared"] <= cfg.smem_bytes <= SMEM_LIMIT, (cfg.tag(), got["shared"], cfg.smem_bytes)
