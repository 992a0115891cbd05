"""Operands whose rows 16-byte loads cannot read are copied to aligned, K-padded buffers (``kernels.pack``).

The copy must not change the product or the epilogue, and ``aligned_workload`` (what dispatch and the
shipped tables key on) must name exactly what ``aligned_operands`` produces.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import alcop_triton as at
from alcop_triton import settings
from alcop_triton.kernels import matmul as km


def _operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype, batch: int | None = None):
    g = torch.Generator().manual_seed(m + 7 * n + 13 * k)
    bt = (batch,) if batch else ()
    a = torch.randn(bt + ((m, k) if layout[0] == "n" else (k, m)), generator=g).to(dtype)
    b = torch.randn(bt + ((k, n) if layout[1] == "n" else (n, k)), generator=g).to(dtype)
    return (a if layout[0] == "n" else a.transpose(-1, -2)), (b if layout[1] == "n" else b.transpose(-1, -2))


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("m,n,k", [(24, 40, 45), (23, 41, 48), (24, 40, 48), (777, 1234, 555)])
def test_aligned_workload_names_what_aligned_operands_makes(layout: str, m: int, n: int, k: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if not km._copies_pay(m * n * k, k):
        monkeypatch.setattr(km, "PAD_MIN_MACS", 1)
        monkeypatch.setattr(km, "PAD_MIN_K", 1)
    a, b = _operands(m, n, k, layout, torch.float16)
    pa, pb = km.aligned_operands(a, b)
    assert km.workload_of(pa, pb) == km.aligned_workload(km.workload_of(a, b))
    assert km._vector_ready(pa) and km._vector_ready(pb)
    if not (km._vector_ready(a) and km._vector_ready(b)) and k % 8:  # e.g. 'tn' with M, N aligned reads fine
        assert pa.shape[-1] == pb.shape[-2] == 8 * -(-k // 8)
        assert torch.all(pa[..., k:] == 0) and torch.all(pb[..., k:, :] == 0)
    assert torch.equal(pa[..., :k], a) and torch.equal(pb[..., :k, :], b)


def test_aligned_operands_leave_aligned_and_small_problems_alone() -> None:
    a, b = _operands(24, 40, 48, "nt", torch.float16)
    assert km.aligned_operands(a, b) == (a, b)
    a, b = _operands(24, 40, 45, "nt", torch.float16)  # unaligned but tiny: the copies would cost more
    pa, pb = km.aligned_operands(a, b)
    assert pa is a and pb is b
    w = at.Workload("matmul", (24, 40, 45), "float16", "nt")
    assert km.aligned_workload(w) == w
    big = at.Workload("bmm", (4, 1000, 333, 555), "bfloat16", "tn")
    # A's unit-stride rows (1000 halves) stay aligned: it keeps its orientation; B's (333) become K-contiguous
    assert km.aligned_workload(big) == at.Workload("bmm", (4, 1000, 333, 560), "bfloat16", "tt")
    # a large product with a short reduction: few steps per tile to pipeline, the copies would cost more
    short = at.Workload("bmm", (384, 197, 64, 197), "float16", "nn")
    assert 384 * 197 * 64 * 197 >= km.PAD_MIN_MACS   # large enough: only K decides
    assert km.aligned_workload(short) == short
    a, b = _operands(197, 64, 197, "nn", torch.float16, 384)
    pa, pb = km.aligned_operands(a, b)
    assert pa is a and pb is b


@pytest.mark.interpreter
@pytest.mark.parametrize("layout,m,n", [("nn", 19, 24), ("nn", 19, 21), ("tt", 24, 21), ("tt", 19, 21), ("tn", 19, 16)])
def test_copies_keep_aligned_rows_in_place_and_pad_k_with_zeros(layout: str, m: int, n: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(km, "PAD_MIN_MACS", 1)
    monkeypatch.setattr(km, "PAD_MIN_K", 1)
    launches: list[object] = []
    launch = km.fastpath.launch_kernel
    monkeypatch.setattr(km.fastpath, "launch_kernel", lambda kern, args: (launches.append(kern), launch(kern, args)))
    a, b = _operands(m, n, 45, layout, torch.float16, 3)
    pa, pb = km.aligned_operands(a, b)
    assert len(launches) == 1  # both copies, one kernel
    assert pa.shape == (3, m, 48) and pb.shape == (3, 48, n)
    # A stays M-contiguous only when it was ('t') and M is whole vectors; B likewise N-contiguous ('n')
    assert (pa.stride(-2) == 1) == (layout[0] == "t" and m % 8 == 0)
    assert (pb.stride(-1) == 1) == (layout[1] == "n" and n % 8 == 0)
    assert torch.equal(pa[..., :45], a) and torch.equal(pb[..., :45, :], b)
    assert not pa[..., 45:].any() and not pb[..., 45:, :].any()


@pytest.mark.interpreter
def test_a_broadcast_operand_is_copied_once_and_stays_broadcast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(km, "PAD_MIN_MACS", 1)
    monkeypatch.setattr(km, "PAD_MIN_K", 1)
    a, b = _operands(19, 21, 45, "nt", torch.float16, 4)
    b = b[0].expand(4, 45, 21)  # one B for every batch entry
    pa, pb = km.aligned_operands(a, b)
    assert pb.stride(0) == 0 and torch.equal(pb[..., :45, :], b) and not pb[..., 45:, :].any()
    assert torch.equal(pa[..., :45], a)


@pytest.mark.interpreter
@pytest.mark.parametrize("layout,batched", list(itertools.product(["nn", "nt", "tn"], [False, True])))
def test_gemm_through_padded_operands_matches_torch(layout: str, batched: bool, monkeypatch: pytest.MonkeyPatch,
                                                   kit) -> None:
    monkeypatch.setattr(km, "PAD_MIN_MACS", 1)
    monkeypatch.setattr(km, "PAD_MIN_K", 1)
    m, n, k = 19, 21, 45
    a, b = _operands(m, n, k, layout, torch.float16, 2 if batched else None)
    g = torch.Generator().manual_seed(5)
    bias = torch.randn(n, generator=g).half()
    res = torch.randn(a.shape[:-1] + (n,), generator=g).half()
    cfg = at.KernelConfig(16, 16, 16, group_m=2, smem_stages=2, split_k=2)
    with at.use_config(cfg):
        out = torch.ops.alcop.gemm(a, b, bias, res, "relu", 0.5, 1.0)
    ref = torch.relu(0.5 * (a.double() @ b.double()) + bias.double()) + res.double()
    kit.assert_close(out, ref, "float16", f"{layout} batched={batched}")


@pytest.mark.interpreter
@pytest.mark.parametrize("precision", ["ieee", "tf32", "tf32x3"])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("m,n,k", [(24, 40, 48), (23, 41, 45), (24, 42, 48)])
def test_a_float32_b_is_turned_to_the_orientation_its_kernel_reads_fastest(
        precision: str, layout: str, m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # TF32's warpgroup MMA (tf32x3 runs it three times) reads B K-contiguous, IEEE multiply-adds
    # N-contiguous (where N keeps the rows aligned); the copy must not change B, and aligned_workload
    # must name what the copy makes.
    for name in ("PAD_MIN_MACS", "PAD_MIN_K", "TURN_MIN_ROWS", "TURN_MIN_MACS"):
        monkeypatch.setattr(km, name, 1)
    if precision == "tf32x3":
        monkeypatch.setenv("ALCOP_FP32", "tf32x3")
    a, b = _operands(m, n, k, layout, torch.float32)
    with settings.tf32(precision == "tf32"):
        assert settings.fp32_precision() == precision
        pa, pb = km.aligned_operands(a, b)
        assert km.workload_of(pa, pb) == km.aligned_workload(km.workload_of(a, b))
    if precision != "ieee":
        assert pb.stride(-2) == 1
    elif n % 4 == 0:
        assert pb.stride(-1) == 1
    assert km._vector_ready(pa) and km._vector_ready(pb)
    assert torch.equal(pa[..., :k], a) and torch.equal(pb[..., :k, :], b)


@pytest.mark.interpreter
@pytest.mark.parametrize("tf32", [False, True])
def test_float32_products_on_a_turned_b_are_right_and_repeat_from_the_fast_path(
        tf32: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from alcop_triton import fastpath
    for name in ("PAD_MIN_MACS", "PAD_MIN_K", "TURN_MIN_ROWS", "TURN_MIN_MACS"):
        monkeypatch.setattr(km, name, 1)
    fastpath.invalidate()
    with settings.tf32(tf32):
        for seed in range(2):  # the second call replays the stored copy and product on new values
            a, b = _operands(29 + seed, 36, 40, "nt" if not tf32 else "nn", torch.float32)
            a, b = a[:29], b  # the same signature on both calls
            want = a.double() @ b.double()
            got = at.matmul(a, b)
            tol = 2e-2 if tf32 else 1e-5
            assert torch.allclose(got.double(), want, rtol=tol, atol=tol * want.abs().max().item())
    assert fastpath.stats().hits >= 1
