"""@alcop_triton.op: DSL functions as torch custom ops (config, fake, derived autograd)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DTYPES, assert_close, randn

from alcop_triton import te
from alcop_triton.dsl_op import op
from alcop_triton.errors import UnsupportedError
from alcop_triton.choose_config import use_config
from alcop_triton.records import KernelConfig

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)


@op("alcop_test::linear_gelu", dims={"x": "M K", "w": "N K", "b": "N"})
def linear_gelu(x: te.Tensor, w: te.Tensor, b: te.Tensor) -> te.Tensor:
    """The documented example: gelu(x @ w.T + b), fused into one kernel."""
    M, K = x.shape
    N = w.shape[0]
    k = te.reduce_axis(K, "k")
    y = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), "y")
    return te.compute((M, N), lambda i, j: te.gelu(y[i, j] + b[j]), "act")


@op("alcop_test::scaled_relu_bmm")
def scaled_relu_bmm(a: te.Tensor, b: te.Tensor, scale: float = 0.5) -> te.Tensor:
    """relu(a) @ (b * scale): elementwise prologues on both operands, a baked scalar, plain output."""
    B, M, K = a.shape
    N = b.shape[2]
    k = te.reduce_axis(K, "k")
    return te.compute((B, M, N), lambda z, i, j: te.sum(te.relu(a[z, i, k]) * (b[z, k, j] * scale), axis=k), "c")


@op("alcop_test::gated")
def gated(x: te.Tensor, w: te.Tensor, gate: te.Tensor, res: te.Tensor) -> te.Tensor:
    """sigmoid(gate[i]) * (x @ w) + res: an epilogue reading other inputs at their own indices."""
    M, K = x.shape
    N = w.shape[1]
    k = te.reduce_axis(K, "k")
    y = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), "y")
    return te.compute((M, N), lambda i, j: te.sigmoid(gate[i]) * y[i, j] + res[i, j], "o")


@op("alcop_test::conv1d_valid", dims={"x": "C L", "w": "F C KW"}, m_axes=("o",), n_axes=("f",))
def conv1d_valid(x: te.Tensor, w: te.Tensor) -> te.Tensor:
    """A convolution written by hand: the index o + r has arithmetic, so no autograd is derived."""
    C, L = x.shape
    Fo, _, KW = w.shape
    c, r = te.reduce_axis(C, "c"), te.reduce_axis(KW, "r")
    return te.compute((Fo, L - KW + 1), lambda f, o: te.sum(x[c, o + r] * w[f, c, r], axis=[c, r]), "y")


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_gelu_forward_backward(dtype: torch.dtype, record_ops: type) -> None:
    x, w, b = randn(5, 12, dtype=dtype), randn(7, 12, dtype=dtype, seed=1), randn(7, dtype=dtype, seed=2)
    leaves = [t.requires_grad_() for t in (x, w, b)]
    with record_ops() as rec:
        y = linear_gelu(*leaves)
        grads = torch.autograd.grad(y, leaves, randn(5, 7, dtype=dtype, seed=3))
    assert "alcop_test.linear_gelu" in rec.ops and rec.ops.count("alcop.dsl_call") == 3  # R, dx, dw
    ref = [t.detach().double().requires_grad_() for t in (x, w, b)]
    y64 = F.gelu(F.linear(*ref))
    want = torch.autograd.grad(y64, ref, randn(5, 7, dtype=dtype, seed=3).double())
    assert y.dtype == dtype
    assert_close(y, y64, dtype)
    for g, r in zip(grads, want):
        assert g.dtype == dtype
        assert_close(g, r, dtype)
    assert torch.equal(torch.ops.alcop_test.linear_gelu(x, w, b), y)
    assert linear_gelu.autograd_reason(x, w, b) is None


def test_prologues_scalar_and_batched_gradients() -> None:
    a, b = randn(2, 6, 9).requires_grad_(), randn(2, 9, 4, seed=1).requires_grad_()
    y = scaled_relu_bmm(a, b, 0.25)
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    y64 = torch.relu(a64) @ (b64 * 0.25)
    assert_close(y, y64)
    g = randn(2, 6, 4, seed=2)
    for got, want in zip(torch.autograd.grad(y, (a, b), g), torch.autograd.grad(y64, (a64, b64), g.double())):
        assert_close(got, want)
    assert_close(scaled_relu_bmm(a, b), torch.relu(a64) @ (b64 * 0.5))  # the schema default


def test_epilogue_inputs_get_gradients() -> None:
    x, w, gate, res = (randn(*s, seed=i).requires_grad_() for i, s in enumerate([(6, 8), (8, 5), (6,), (6, 5)]))
    y = gated(x, w, gate, res)
    ref = [t.detach().double().requires_grad_() for t in (x, w, gate, res)]
    y64 = torch.sigmoid(ref[2])[:, None] * (ref[0] @ ref[1]) + ref[3]
    assert_close(y, y64)
    for got, want in zip(torch.autograd.grad(y.sum(), (x, w, gate, res)), torch.autograd.grad(y64.sum(), ref)):
        assert_close(got, want)


@pytest.mark.parametrize("with_scalar", [False, True])
def test_eager_calls_with_grad_apply_a_function_and_repeat_it(with_scalar: bool) -> None:
    # Not the registered op's autograd wrapper: the fast path stores the applied Function for the
    # signature, and a repeat (other values) replays it with the right gradients.
    from alcop_triton import fastpath
    fastpath.invalidate()
    fastpath.reset_stats()
    for seed in (0, 10):
        a, b = randn(2, 6, 9, seed=seed).requires_grad_(), randn(2, 9, 4, seed=seed + 1).requires_grad_()
        y = scaled_relu_bmm(a, b, 0.25) if with_scalar else scaled_relu_bmm(a, b)
        scale = 0.25 if with_scalar else 0.5
        a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
        y64 = torch.relu(a64) @ (b64 * scale)
        assert type(y.grad_fn).__name__ == "alcop_test_scaled_relu_bmmBackward"
        g = randn(2, 6, 4, seed=seed + 2)
        for got, want in zip(torch.autograd.grad(y, (a, b), g), torch.autograd.grad(y64, (a64, b64), g.double())):
            assert_close(got, want)
    stats = fastpath.stats()
    assert stats.dispatched == 0 and stats.hits >= 1
    assert any(isinstance(e, fastpath.GradEntry) for e in fastpath._entries.values())


def test_no_autograd_is_said_clearly() -> None:
    x, w = randn(3, 10), randn(4, 3, 3, seed=1)
    y = conv1d_valid(x, w)
    assert_close(y, F.conv1d(x.double()[None], w.double())[0])
    reason = conv1d_valid.autograd_reason(x, w)
    assert reason is not None and "index arithmetic" in reason
    xr = x.clone().requires_grad_()
    with pytest.raises(UnsupportedError, match="no autograd for this expression.*index arithmetic"):
        conv1d_valid(xr, w).sum().backward()


def test_shapes_checked_by_dim_names() -> None:
    with pytest.raises(RuntimeError, match=r"argument 'w' dim 1 is 11 but K = 12"):
        linear_gelu(randn(5, 12), randn(7, 11), randn(7))
    with pytest.raises(RuntimeError, match=r"dims\['x'\] names 2 dims"):
        linear_gelu(randn(2, 5, 12), randn(7, 12), randn(7))


def test_fake_and_opcheck_and_compile() -> None:
    x, w, b = randn(5, 12).requires_grad_(), randn(7, 12, seed=1).requires_grad_(), randn(7, seed=2).requires_grad_()
    torch.library.opcheck(linear_gelu.custom_op, (x, w, b))
    torch.library.opcheck(scaled_relu_bmm.custom_op, (randn(2, 3, 4).requires_grad_(), randn(2, 4, 5).requires_grad_(),
                                                      0.5))
    torch._dynamo.reset()
    f = torch.compile(lambda x, w, b: linear_gelu(x, w, b).sum(), fullgraph=True, backend="aot_eager")
    y = f(x, w, b)
    y.backward()
    assert_close(y, F.gelu(F.linear(x.double(), w.double(), b.double())).sum())


def test_fixed_and_forced_configs() -> None:
    @op("alcop_test::fixed_config", config=KernelConfig(16, 16, 16, group_m=2, smem_stages=1))
    def small_tiles(a: te.Tensor, b: te.Tensor) -> te.Tensor:
        M, K = a.shape
        k = te.reduce_axis(K, "k")
        return te.compute((M, b.shape[1]), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), "c")

    a, b = randn(37, 33), randn(33, 35, seed=1)  # several tiles and reduction chunks
    assert_close(small_tiles(a, b), a.double() @ b.double())
    with use_config(KernelConfig(16, 32, 16, group_m=1, smem_stages=3)):
        bias = randn(35, seed=2)
        assert_close(linear_gelu(a, b.t(), bias), F.gelu(a.double() @ b.double() + bias.double()))
