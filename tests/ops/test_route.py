"""The routing (``ops/route.py``): its rules in order, the first of them for tensors that are not plain
dense ones, and the caches it relies on keyed by the settings they depend on and cleared by ``invalidate()``."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch
from conftest import assert_close, f64, randn

import alcop_triton as at
from alcop_triton import fastpath, generation, tensor_kinds
from alcop_triton.kernels import matmul as kmatmul
from alcop_triton.ops import conv, gemm, route
from alcop_triton.records import KernelConfig

pytestmark = pytest.mark.interpreter


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    fastpath.invalidate()
    fastpath.reset_stats()
    yield


def test_each_drop_in_names_its_routes() -> None:
    for routes in (gemm.MATMUL, gemm.MM, gemm.BMM, gemm.ADDMM, gemm.BADDBMM, gemm.LINEAR, conv.CONV):
        assert isinstance(routes, route.OpRoutes)
        assert routes.direct is not None and routes.registered is not None
        assert routes.torch is not None and routes.autograd is not None


def test_a_negated_view_is_never_served_by_a_stored_entry(fallbacks: list[tuple[str, str]]) -> None:
    a, b = randn(6, 5), randn(5, 4, seed=1)
    for _ in range(3):  # stored, then a call site candidate
        at.matmul(a, b)
    assert fastpath.stats().hits == 2
    neg = torch._neg_view(a.clone())  # same shape, strides, dtype and device; values read negated
    assert neg.is_neg() and tensor_kinds.reason(neg) is not None
    assert fastpath.signature("matmul", (neg, b), ()) is None
    a64, b64 = f64(a, b)
    assert_close(at.matmul(neg, b), -(a64 @ b64))
    assert [op for op, _ in fallbacks] == ["matmul"]
    assert_close(at.matmul(a, b), a64 @ b64)


def test_the_predicate_names_why() -> None:
    assert tensor_kinds.reason(randn(2, 2)) is None
    assert tensor_kinds.reason(torch.nn.Parameter(randn(2, 2))) is None
    assert tensor_kinds.reason(randn(2, 2).conj()) is None  # a real tensor has no conjugate bit
    assert "layout" in str(tensor_kinds.reason(randn(2, 2).to_sparse()))
    assert "meta" in str(tensor_kinds.reason(torch.empty(2, 2, device="meta")))
    assert "negative" in str(tensor_kinds.reason(torch._neg_view(randn(2, 2))))


def test_a_sparse_operand_goes_to_torch(fallbacks: list[tuple[str, str]]) -> None:
    a, b = randn(4, 3), randn(3, 2, seed=1)
    a64, b64 = f64(a, b)
    assert_close(at.mm(a.to_sparse(), b), a64 @ b64)
    assert fallbacks == [("mm", "layout torch.sparse_coo: generated kernels address dense strided tensors")]


def test_compiled_kernels_key_on_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = KernelConfig(32, 32, 32, group_m=1, num_warps=4, smem_stages=2)
    monkeypatch.setenv("ALCOP_STRICT", "0")
    lenient = kmatmul.compiled("float32", 0, kmatmul.Epilogue(), cfg)
    monkeypatch.setenv("ALCOP_STRICT", "1")
    strict = kmatmul.compiled("float32", 0, kmatmul.Epilogue(), cfg)
    assert lenient is not strict and (lenient.strict, strict.strict) == (False, True)
    assert kmatmul.compiled("float32", 0, kmatmul.Epilogue(), cfg) is strict


def test_autotune_setting_is_read_once_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    from alcop_triton import settings
    monkeypatch.setenv("ALCOP_AUTOTUNE", "sometimes")
    with pytest.raises(ValueError, match="ALCOP_AUTOTUNE='sometimes'"):
        settings.autotune()


def test_invalidate_clears_the_box_gradients_launches() -> None:
    from alcop_triton.kernels import conv_window_grad
    conv_window_grad._LAUNCHES[("stale",)] = None
    conv_window_grad._INPUT_LAUNCHES[("stale",)] = None
    before = generation.current()
    fastpath.invalidate()
    assert generation.current() == before + 1
    assert not conv_window_grad._LAUNCHES and not conv_window_grad._INPUT_LAUNCHES


def test_call_sites_are_cleared_by_invalidate() -> None:
    a, b = randn(6, 5), randn(5, 4, seed=1)
    for _ in range(3):
        at.matmul(a, b)
    assert route._sites
    fastpath.invalidate()
    assert not route._sites and not fastpath._entries
