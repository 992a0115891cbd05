"""benchmarks/probes/stream_gemm.py without a GPU: how it shares the work out, and that its Gluon kernel
compiles for an H100 (sm90) at every tile config it times."""

from __future__ import annotations

from typing import Any

import pytest

from . import load_script

sg = load_script("probes/stream_gemm.py", "stream_gemm_probe")


@pytest.mark.parametrize("tiles, kt, waves, want", [
    (126, 44, -1, (126, 0)),   # fewer tiles than SMs, whole tiles: one program per tile
    (144, 12, -1, (132, 0)),   # whole tiles round-robin over one program per SM
    (144, 12, 0, (132, 12)),   # the 12 tiles past the whole wave shared by chunks
    (144, 12, 1, (132, 144)),  # ... and the wave before them
    (70, 40, 1, (132, 70)),    # no whole wave: every tile shared
    (264, 32, 1, (132, 0)),    # whole waves only: nothing to share
    (3, 2, 0, (6, 3)),         # at most one program per shared chunk
])
def test_the_work_is_shared_out_as_documented(tiles: int, kt: int, waves: int, want: tuple[int, int]) -> None:
    assert sg.stream_split(tiles, kt, 132, waves) == want


def compile_case(cfg: tuple[int, ...]) -> tuple[bool, bool, int]:
    """The kernel at ``cfg`` compiled for sm90 on a 1000 x 600 x 300 product (partial edge tiles)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from tests.conftest import Kit
    block_m, block_n, block_k, stages, warps = cfg

    def desc(x: Any, block: list[int]) -> Any:
        return TensorDescriptor.from_tensor(x, block, gl.NVMMASharedLayout.get_default_for(block, gl.float16))
    a, b, c = (torch.empty(r, k, dtype=torch.float16) for r, k in ((1000, 304), (600, 304), (1000, 600)))
    ws, flags = torch.empty(132 * block_m * block_n), torch.zeros(132, dtype=torch.int32)
    args = (ws, flags, desc(a, [block_m, block_k]), desc(b, [block_n, block_k]), desc(c, [block_m, block_n]),
            8, 3, 5, 24, 2)
    return Kit.compile_sm90(sg.stream_gemm, args, {"GROUP_M": 8, "STAGES": stages, "num_warps": warps})


def test_the_kernel_compiles_for_sm90(kit) -> None:
    # TMA copies feeding wgmma, within the 227 KB of shared memory, at every config the probe times.
    found = kit.apart("tests.benchmarks.test_stream_gemm_probe", "[t.compile_case(c) for c in t.sg.CONFIGS]")
    for cfg, (wgmma, tma, shared) in zip(sg.CONFIGS, found):
        assert wgmma and tma and shared <= 232448, (cfg, wgmma, tma, shared)
