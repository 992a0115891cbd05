"""float32 products on a CUDA GPU, with B copied to the orientation its dot reads fastest.

With TF32 the copy makes B K-contiguous, without it N-contiguous (``kernels.matmul._turns``); the copy is a
transposing ``kernels/pack.py`` launch, so it is checked on the GPU: first call and a stored repeat on new
values, against a float64 reference, outputs of the first call kept apart from the repeat's. Skipped
without CUDA.
"""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import config
from alcop_triton.kernels import matmul as km

pytestmark = pytest.mark.gpu


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_float32_products_on_a_turned_b_are_right(tf32: bool, layout: str) -> None:
    m, n, k = 601, 260, 523  # at least TURN_MIN_ROWS rows and a long enough reduction: the copy is made

    def operands() -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda") if layout == "nn" else torch.randn(n, k, device="cuda").t()
        return a, b
    with config.tf32(tf32):
        a, b = operands()
        assert km._turn_b(a, b) == ((layout == "nn") if tf32 else (layout == "nt"))
        first = at.matmul(a, b).clone()
        a2, b2 = operands()
        again = at.matmul(a2, b2)  # a stored repeat: the copy replayed on new values
    tol = 5e-3 if tf32 else 1e-5
    assert _rel(first, a.double() @ b.double()) <= tol
    assert _rel(again, a2.double() @ b2.double()) <= tol
