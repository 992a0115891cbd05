"""matmul / mm / bmm / addmm / baddbmm / linear drop-ins against torch (float64 references)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import DTYPES, assert_close, f64, randn, with_layout
from hypothesis import given, settings
from hypothesis import strategies as st

from alcop_triton import ops

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)

LAYOUTS = ("contiguous", "transposed", "strided")
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)


@st.composite
def matmul_operands(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, torch.dtype]:
    """Two operands torch.matmul accepts: ranks 1-4, broadcastable batches, any of three layouts."""
    m, k, n = (draw(st.integers(1, 40)) for _ in range(3))
    ra, rb = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = [draw(st.integers(1, 3)) for _ in range(max(ra, rb, 2) - 2)]

    def batch_of(rank: int) -> list[int]:
        own = batch[len(batch) - max(rank - 2, 0):] if rank > 2 else []
        return [1 if draw(st.booleans()) else s for s in own]  # some dims broadcast

    a_shape = [k] if ra == 1 else batch_of(ra) + [m, k]
    b_shape = [k] if rb == 1 else batch_of(rb) + [k, n]
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 1000))
    a = with_layout(randn(*a_shape, dtype=dtype, seed=seed), draw(st.sampled_from(LAYOUTS)))
    b = with_layout(randn(*b_shape, dtype=dtype, seed=seed + 1), draw(st.sampled_from(LAYOUTS)))
    return a, b, dtype


@SETTINGS
@given(matmul_operands())
def test_matmul_matches_torch(case: tuple[torch.Tensor, torch.Tensor, torch.dtype]) -> None:
    a, b, dtype = case
    got = ops.matmul(a, b)
    want = torch.matmul(*f64(a, b))
    assert got.dtype == dtype and got.shape == torch.matmul(a, b).shape
    assert_close(got, want, dtype)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((7,), (7,)),            # dot -> 0-d
    ((5, 7), (7,)),          # matrix-vector -> (5,)
    ((7,), (7, 3)),          # vector-matrix -> (3,)
    ((2, 3, 5, 7), (7,)),    # batched matrix-vector
    ((7,), (2, 7, 3)),       # vector times a batch
    ((5, 7), (4, 7, 3)),     # a matrix broadcast over b's batch
    ((4, 1, 5, 7), (3, 7, 2)),  # both broadcast
])
def test_matmul_promotion_and_squeeze(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a, b = randn(*a_shape, seed=1), randn(*b_shape, seed=2)
    got = ops.matmul(a, b)
    assert got.shape == torch.matmul(a, b).shape
    assert_close(got, torch.matmul(*f64(a, b)))


def test_matmul_batch_folds_into_rows_without_copies(record_ops: type) -> None:
    # (B, M, K) @ (K, N) is one 2-D GEMM over B*M rows, as torch does it.
    a, b = randn(3, 5, 7), randn(7, 4)
    with record_ops() as rec:
        ops.matmul(a, b)
    assert "alcop.mm" in rec.ops and "alcop.bmm" not in rec.ops and "aten.clone" not in rec.ops


@pytest.mark.parametrize("async_copy", ["pointer", "tma"])
def test_attention_products_read_permuted_heads_in_place(record_ops: type, async_copy: str) -> None:
    # Heads permuted ahead of the sequence cannot fold into one batch dim without a copy; the kernel
    # takes both batch strides instead (torch.matmul copies q, k and v here).
    import alcop_triton as at

    b, t, h, d = 2, 9, 3, 16
    qkv = randn(b, t, 3 * h * d, dtype=torch.float16)
    q, k, v = qkv.view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
    with at.use_config(at.KernelConfig(16, 16, 16, smem_stages=2, async_copy=async_copy)), record_ops() as rec:
        s = ops.matmul(q, k.transpose(-1, -2))
        y = ops.matmul(s, v)
    assert rec.ops.count("alcop.bmm") == 2 and not {"aten.clone", "aten.copy_", "aten._unsafe_view"} & set(rec.ops)
    assert s.shape == (b, h, t, t) and s.is_contiguous() and y.shape == (b, h, t, d) and y.is_contiguous()
    assert_close(s, f64(q)[0] @ f64(k)[0].transpose(-1, -2), torch.float16)
    assert_close(y, f64(s)[0] @ f64(v)[0], torch.float16)


def test_attention_product_in_place_differentiates() -> None:
    b, t, h, d = 2, 5, 2, 8
    qkv = randn(b, t, 3 * h * d).requires_grad_()
    q, k, _ = qkv.view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
    s = ops.matmul(q, k.transpose(-1, -2))
    g = randn(*s.shape, seed=3)
    (s * g).sum().backward()
    ref = qkv.detach().double().requires_grad_()
    rq, rk, _ = ref.view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
    ((rq @ rk.transpose(-1, -2)) * g.double()).sum().backward()
    assert_close(qkv.grad, ref.grad)


def test_bmm_op_checks_both_batch_dims() -> None:
    with pytest.raises(RuntimeError, match="batch sizes differ"):
        torch.ops.alcop.bmm(randn(2, 3, 4, 5), randn(2, 4, 5, 6))


def test_matmul_out_is_written_in_place() -> None:
    a, b = randn(2, 6, 9), randn(2, 9, 5, seed=3)
    out = torch.full((2, 6, 5), float("nan"))
    res = ops.matmul(a, b, out=out)
    assert res is out
    assert_close(out, torch.matmul(*f64(a, b)))
    # a transposed out (no (B, M, N) view of it exists): computed, then copied in
    out_t = torch.full((2, 5, 6), float("nan")).mT
    ops.matmul(a, b, out=out_t)
    assert_close(out_t, torch.matmul(*f64(a, b)))


def test_out_is_resized_like_torch() -> None:
    a, b = randn(3, 4), randn(4, 5)
    out = torch.full((2, 2), float("nan"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ops.mm(a, b, out=out)
    assert out.shape == (3, 5) and any("resized" in str(x.message) for x in w)
    assert_close(out, f64(a)[0] @ f64(b)[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_bmm_transposed_operands(dtype: torch.dtype) -> None:
    a, b = randn(9, 13, dtype=dtype), randn(11, 9, dtype=dtype, seed=1)
    assert_close(ops.mm(a.t(), b.t()), f64(a)[0].t() @ f64(b)[0].t(), dtype)
    x, y = randn(3, 9, 13, dtype=dtype), randn(3, 11, 9, dtype=dtype, seed=1)
    assert_close(ops.bmm(x.mT, y.mT), f64(x)[0].mT @ f64(y)[0].mT, dtype)
    out = torch.full((3, 13, 11), float("nan"), dtype=dtype)
    ops.bmm(x.mT, y.mT, out=out)
    assert_close(out, f64(x)[0].mT @ f64(y)[0].mT, dtype)


def test_bmm_with_broadcast_batch_views() -> None:
    # stride-0 batch dims (expand) run without materialising the broadcast
    a, b = randn(1, 6, 8).expand(4, 6, 8), randn(4, 8, 3, seed=2)
    assert_close(ops.bmm(a, b), torch.bmm(*f64(a, b)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.0)])
def test_addmm_baddbmm(dtype: torch.dtype, alpha: float, beta: float) -> None:
    m1, m2 = randn(7, 10, dtype=dtype), randn(10, 6, dtype=dtype, seed=1)
    inp = randn(6, dtype=dtype, seed=2)
    if beta == 0.0:
        inp = torch.full((6,), float("nan"), dtype=dtype)  # beta=0 ignores input, NaN included
    want = torch.addmm(*f64(inp, m1, m2), beta=beta, alpha=alpha)
    assert_close(ops.addmm(inp, m1, m2, beta=beta, alpha=alpha), want, dtype)
    b1, b2 = randn(2, 7, 10, dtype=dtype), randn(2, 10, 6, dtype=dtype, seed=1)
    binp = randn(7, 1, dtype=dtype, seed=3)
    out = torch.full((2, 7, 6), float("nan"), dtype=dtype)
    ops.baddbmm(binp, b1, b2, beta=beta, alpha=alpha, out=out)
    assert_close(out, torch.baddbmm(*f64(binp, b1, b2), beta=beta, alpha=alpha), dtype)


@st.composite
def linear_case(draw: st.DrawFn) -> dict:
    dtype = draw(st.sampled_from(DTYPES))
    lead = [draw(st.integers(1, 6)) for _ in range(draw(st.integers(0, 2)))]
    fin, fout = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    seed = draw(st.integers(0, 1000))
    x = with_layout(randn(*lead, fin, dtype=dtype, seed=seed), draw(st.sampled_from(LAYOUTS)))
    w = with_layout(randn(fout, fin, dtype=dtype, seed=seed + 1), draw(st.sampled_from(LAYOUTS)))
    bias_kind = draw(st.sampled_from(["none", "vector", "scalar"]))
    bias = {"none": None, "vector": randn(fout, dtype=dtype, seed=seed + 2),
            "scalar": randn(1, dtype=dtype, seed=seed + 2)}[bias_kind]
    act = draw(st.sampled_from([None, "relu", "gelu", "silu", "tanh", "sigmoid"]))
    res = randn(*lead, fout, dtype=dtype, seed=seed + 3) if draw(st.booleans()) else None
    return dict(x=x, w=w, bias=bias, act=act, res=res, dtype=dtype)


@SETTINGS
@given(linear_case())
def test_linear_fused_matches_torch(c: dict) -> None:
    x, w, bias, res = f64(c["x"], c["w"], c["bias"], c["res"])
    want = F.linear(x, w, bias)
    if c["act"]:
        want = {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh,
                "sigmoid": torch.sigmoid}[c["act"]](want)
    if res is not None:
        want = want + res
    got = ops.linear(c["x"], c["w"], c["bias"], activation=c["act"], residual=c["res"])
    assert got.dtype == c["dtype"]
    assert_close(got, want, c["dtype"])


def test_linear_matrix_vector_and_vector_input() -> None:
    x, w, b = randn(4, 9), randn(9, seed=1), randn(6, 9, seed=2)
    assert_close(ops.linear(x, w), F.linear(*f64(x, w)))  # 1-D weight: matrix-vector
    v, bias = randn(9, seed=3), randn(6, seed=4)
    assert_close(ops.linear(v, b, bias), F.linear(*f64(v, b, bias)))  # 1-D input
    full_bias = randn(4, 6, seed=5)  # a bias varying along rows is added after the product
    assert_close(ops.linear(x, b, full_bias), F.linear(*f64(x, b, full_bias)))


def test_empty_and_zero_k() -> None:
    assert ops.matmul(randn(0, 5), randn(5, 3)).shape == (0, 3)
    z = ops.matmul(randn(4, 0), randn(0, 3))  # an empty reduction gives zeros, as in torch
    assert z.shape == (4, 3) and bool((z == 0).all())
    assert_close(ops.addmm(randn(3), randn(4, 0), randn(0, 3), beta=2.0),
                 2.0 * f64(randn(3))[0].expand(4, 3))


def test_large_batch_is_split_across_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    # The batch is the grid's second dimension (CUDA caps it at 65535): run_gemm slices it.
    from alcop_triton.ops import gemm
    monkeypatch.setattr(gemm, "CUDA_GRID_Y", 2)
    a, b = randn(5, 2, 3), randn(5, 3, 2, seed=1)
    assert_close(ops.bmm(a, b), torch.bmm(*f64(a, b)))


@st.composite
def add_product_case(draw: st.DrawFn) -> dict:
    batched = draw(st.booleans())
    m, k, n = (draw(st.integers(1, 24)) for _ in range(3))
    lead = (draw(st.integers(1, 3)),) if batched else ()
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 1000))
    inp_shape = draw(st.sampled_from([lead + (m, n), (n,), (m, 1), (1,)]))
    return dict(batched=batched, dtype=dtype,
                inp=randn(*inp_shape, dtype=dtype, seed=seed),
                m1=with_layout(randn(*lead, m, k, dtype=dtype, seed=seed + 1), draw(st.sampled_from(LAYOUTS))),
                m2=with_layout(randn(*lead, k, n, dtype=dtype, seed=seed + 2), draw(st.sampled_from(LAYOUTS))),
                alpha=draw(st.sampled_from([1.0, 0.5, -2.0])), beta=draw(st.sampled_from([1.0, 0.0, 0.25])))


@SETTINGS
@given(add_product_case())
def test_addmm_baddbmm_fuzzed(c: dict) -> None:
    ours, theirs = (ops.baddbmm, torch.baddbmm) if c["batched"] else (ops.addmm, torch.addmm)
    got = ours(c["inp"], c["m1"], c["m2"], beta=c["beta"], alpha=c["alpha"])
    assert_close(got, theirs(*f64(c["inp"], c["m1"], c["m2"]), beta=c["beta"], alpha=c["alpha"]), c["dtype"])


@pytest.mark.parametrize("fake", [False, True])
def test_permuted_heads_are_read_in_place_also_while_tracing(fake: bool) -> None:
    # (batch, heads, seq, dim) views of (batch, seq, heads, dim) storage: their batch dims do not fold
    # without a copy. Under torch.compile the operands are fake tensors, on which a failing view raises
    # ValueError rather than RuntimeError: the decision must not depend on either.
    from torch._subclasses.fake_tensor import FakeTensorMode

    def operands() -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
        q = torch.empty(4, 128, 4, 64).permute(0, 2, 1, 3)
        k = torch.empty(4, 128, 4, 64).permute(0, 2, 3, 1)
        c = torch.empty(4, 4, 128, 64)
        return [(q, k, True), (c, c.mT, False), (q[:, :1], k[:, :1], False)]

    if fake:
        with FakeTensorMode():
            cases = operands()
    else:
        cases = operands()
    for a, b, in_place in cases:
        assert ops.gemm._two_batch_dims_in_place(a, b) == in_place


@pytest.mark.parametrize("sa,sb", [((2, 3, 64), (64, 7)), ((2, 3, 16), (16,)), ((4, 2, 3, 16), (16, 7)),
                                   ((2, 3, 16), (2, 16, 7)), ((3, 16), (16, 7))])
def test_matmul_out_layouts_as_torch(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    """torch.matmul folds a >= 3-D input's batch dims into rows when ``other`` is 1-D or 2-D and writes through
    ``out`` viewed that way: a transposed ``out`` is its RuntimeError there, and computes elsewhere."""
    a, b = torch.randn(*sa), torch.randn(*sb)
    ref = torch.matmul(a, b)

    def transposed_out() -> torch.Tensor:
        if ref.dim() < 2:
            return torch.full(ref.shape, float("nan"))
        return torch.full((*ref.shape[:-2], ref.shape[-1], ref.shape[-2]), float("nan")).transpose(-1, -2)

    try:
        torch.matmul(a, b, out=transposed_out())
        torch_raises = False
    except RuntimeError:
        torch_raises = True
    out = transposed_out()
    if torch_raises:
        with pytest.raises(RuntimeError):
            ops.matmul(a, b, out=out)
    else:
        assert ops.matmul(a, b, out=out) is out
        torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4)
