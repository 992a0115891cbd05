"""The fused float32 tanh keeps its relative accuracy at every magnitude (it was 2 sigmoid(2x) - 1, which
lost it all near 0: 1.4e-3 at x = 1e-5, 7.3e-2 at 1e-6), judged against float64."""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import ops, te

pytestmark = pytest.mark.interpreter

ULPS = 4 * 2.0 ** -24
"""A few float32 ulps, relative: torch's own tanh is within one."""


def _tanh_kernel() -> at.Kernel:
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A, B = te.placeholder((M, K), "float32", "A"), te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    D = te.compute((M, N), lambda i, j: te.tanh(C[i, j]), "D")
    return at.build(at.Schedule.from_config(D, at.KernelConfig(block_m=16, block_n=16, block_k=16, smem_stages=1)),
                    [A, B, D])


def _values() -> torch.Tensor:
    mag = torch.logspace(-38, 2, 400, dtype=torch.float64)
    edges = torch.tensor([0.0, 0.5499, 0.55, 0.5501, 1.0, 9.0, 20.0, 1e30], dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    rand = torch.randn(300, generator=g, dtype=torch.float64) * 10 ** torch.randint(-9, 2, (300,), generator=g)
    return torch.cat([mag, -mag, edges, -edges, rand]).float()


def test_fused_tanh_is_accurate_relative_to_float64_at_every_magnitude() -> None:
    x = _values()
    a = torch.zeros(x.numel(), 16)
    a[:, 0] = x  # the product is x exactly: the epilogue alone is judged
    b = torch.zeros(16, 3)
    b[0] = 1.0
    y = _tanh_kernel()(a, b).double()
    ref = torch.tanh(x.double())[:, None].expand_as(y)
    rel = (y - ref).abs() / ref.abs().clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(rel.max(dim=1).values.argmax())
    assert rel.max() <= ULPS, f"relative error {rel.max().item():.3g} at x={x[worst].item()!r}"
    assert torch.equal(torch.sign(y), torch.sign(ref))  # odd, and exactly 0 at 0


def test_fused_tanh_at_infinities_and_nan() -> None:
    a = torch.zeros(3, 16)
    a[:, 0] = torch.tensor([float("inf"), float("-inf"), float("nan")])
    b = torch.zeros(16, 1)
    b[0] = 1.0
    y = _tanh_kernel()(a, b)[:, 0]
    assert y[0] == 1.0 and y[1] == -1.0 and torch.isnan(y[2])


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 1.0])
def test_linear_with_fused_tanh_matches_float64(scale: float) -> None:
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(9, 20, generator=g), torch.randn(7, 20, generator=g) * scale
    y = ops.linear(x, w, activation="tanh").double()
    ref = torch.tanh(x.double() @ w.double().T)
    # the product's own float32 rounding is relative to the terms' magnitude, not to the (smaller) sum
    bound = 1e-6 * (x.double().abs() @ w.double().abs().T) + ULPS * ref.abs()
    assert ((y - ref).abs() <= bound).all(), ((y - ref).abs() / ref.abs()).max().item()
