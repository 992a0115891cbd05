"""The generated sm90 kernels on the GPU: float64 references, odd sizes, all four layouts, both dtypes,
outputs poisoned (NaN-filled ``out``).

Each test runs its case in a process of its own, killed after ``TIMEOUT_S``: a kernel whose barriers
deadlock spins forever on the GPU, and must fail its test rather than stall the suite (and the device).
"""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

from alcop_triton.hopper import HopperConfig

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180
"""Per test: a fresh process (torch, CUDA context), a few kernel compiles and four shapes fit well within."""

CONFIGS = {
    "level1": HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=0, stages=4),
    "level12": HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=1, stages=4),
    "level12_ws": HopperConfig(warp_specialize=True, persistent=True, wgmma_depth=2, stages=4),
    "pingpong": HopperConfig(consumers=2, policy="pingpong", stages=4, wgmma_depth=1, epilogue_subtile=2),
    "cooperative": HopperConfig(block_n=256, consumers=2, policy="cooperative", stages=3, wgmma_depth=1,
                                epilogue_subtile=2),
}
SHAPES = [(1000, 776, 520), (77, 130, 1000), (4133, 4099, 37), (3000, 5000, 2056)]  # not multiples of any tile


def _operand(rows: int, cols: int, stored_t: bool, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn((cols, rows) if stored_t else (rows, cols), generator=gen, device="cuda").to(dtype)
    return x.t() if stored_t else x


def _check(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert not torch.isnan(out).any(), f"{what}: NaN (an element never written)"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= 1e-2, f"{what}: relative error {err:.3g}"


def _apart(call: str) -> None:
    """``call``, a function of this module with its arguments, run in a new process killed after TIMEOUT_S."""
    code = f"import torch; import tests.hopper.test_matmul_gpu as t; t.{call}"
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{call}: no result within {TIMEOUT_S} s, killed (a kernel that hangs?); output so far: "
                    f"{(exc.stderr or b'')[-2000:]!r}")
    assert done.returncode == 0, f"{call}: exit code {done.returncode}\n{done.stderr[-4000:]}"


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_matches_float64(name: str, dtype: torch.dtype, layout: str) -> None:
    _apart(f"check_matches_float64({name!r}, {dtype}, {layout!r})")


def check_matches_float64(name: str, dtype: torch.dtype, layout: str) -> None:
    from alcop_triton.hopper.launch import matmul
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{name}/{dtype}/{layout}".encode()))
    for m, n, k in SHAPES:
        a = _operand(m, k, layout[0] == "t", dtype, gen)
        b = _operand(k, n, layout[1] == "t", dtype, gen)
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        assert matmul(a, b, config=CONFIGS[name], out=out) is out
        assert out.dtype == dtype and out.shape == (m, n)
        _check(out, a.double() @ b.double(), f"{name} {dtype} {layout} {m}x{n}x{k}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_bias_relu_and_unaligned_rows(dtype: torch.dtype) -> None:
    _apart(f"check_bias_relu_and_unaligned_rows({dtype})")


def check_bias_relu_and_unaligned_rows(dtype: torch.dtype) -> None:
    from alcop_triton.hopper.launch import matmul
    gen = torch.Generator(device="cuda").manual_seed(7)
    m, n, k = 999, 1001, 515  # rows of odd length: copied into TMA-ready buffers, C copied out
    a = torch.randn(m, k, generator=gen, device="cuda").to(dtype)
    b = torch.randn(k, n, generator=gen, device="cuda").to(dtype)
    bias = torch.randn(n, generator=gen, device="cuda").to(dtype)
    out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    matmul(a, b, config=CONFIGS["pingpong"], bias=bias, activation="relu", out=out)
    _check(out, torch.relu(a.double() @ b.double() + bias.double()), f"bias relu {dtype}")
