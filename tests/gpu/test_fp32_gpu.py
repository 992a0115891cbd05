"""float32 products on a CUDA GPU, with B copied to the orientation its dot reads fastest.

With TF32 (and ``ALCOP_FP32=tf32x3``) the copy makes B K-contiguous, with IEEE products N-contiguous
(``kernels.matmul._turns``); the copy is a transposing ``kernels/pack.py`` launch, so it is checked on the
GPU: first call and a stored repeat on new values, against a float64 reference, outputs of the first call
kept apart from the repeat's. Skipped without CUDA.
"""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import settings
from alcop_triton.kernels import matmul as km

pytestmark = pytest.mark.gpu


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("precision", ["ieee", "tf32", "tf32x3"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_float32_products_on_a_turned_b_are_right(precision: str, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m, n, k = 601, 260, 523  # at least TURN_MIN_ROWS rows and a long enough reduction: the copy is made
    monkeypatch.setattr(km, "TURN_MIN_MACS", 1)  # (a smaller product than the copy pays for, to keep the test quick)
    if precision == "tf32x3":
        monkeypatch.setenv("ALCOP_FP32", "tf32x3")

    def operands() -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda") if layout == "nn" else torch.randn(n, k, device="cuda").t()
        return a, b
    with settings.tf32(precision == "tf32"):
        assert settings.fp32_precision() == precision
        a, b = operands()
        assert km._turn_b(a, b) == (layout == ("nt" if precision == "ieee" else "nn"))
        first = at.matmul(a, b).clone()
        a2, b2 = operands()
        again = at.matmul(a2, b2)  # a stored repeat: the copy replayed on new values
    tol = 5e-3 if precision == "tf32" else 1e-5
    assert _rel(first, a.double() @ b.double()) <= tol
    assert _rel(again, a2.double() @ b2.double()) <= tol
