"""Backward of the drop-ins: gradients from generated kernels against torch's, in float64.

dA = dC @ B^T and dB = A^T @ dC run as alcop GEMMs on transposed views; a conv's input gradient runs
on the forward conv kernel, its weight gradient as a GEMM over im2col rows or a DSL kernel. Torch computes only bias sums, residual scaling and the
activation's derivative.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from conftest import DTYPES, assert_close, randn, with_layout

from alcop_triton import ops

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)


def _grads(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor | None], cot_seed: int = 99,
           dtype: torch.dtype | None = None) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    leaves = [t.detach().to(dtype or t.dtype).requires_grad_() if t is not None else None for t in inputs]
    y = fn(*leaves)
    g = randn(*y.shape, dtype=y.dtype, seed=cot_seed)
    diff = [t for t in leaves if t is not None]
    gs = iter(torch.autograd.grad(y, diff, g))
    return y, [next(gs) if t is not None else None for t in leaves]


def check_backward(ours: Callable[..., torch.Tensor], theirs: Callable[..., torch.Tensor],
                   inputs: list[torch.Tensor | None], record_ops: type | None = None,
                   expect: tuple[str, ...] = ()) -> None:
    dtype = next(t for t in inputs if t is not None).dtype
    if record_ops is not None:
        with record_ops() as rec:
            y, got = _grads(ours, inputs)
        for name in expect:
            assert name in rec.ops, (name, sorted(set(rec.ops)))
        assert not {"aten.mm", "aten.bmm", "aten.convolution", "aten.convolution_backward"} & set(rec.ops)
    else:
        y, got = _grads(ours, inputs)
    y64, want = _grads(theirs, inputs, dtype=torch.float64)
    assert_close(y, y64, dtype)
    for g, w in zip(got, want):
        if g is not None:
            assert g.dtype == dtype
            assert_close(g, w, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape,b_shape", [((6, 9), (9, 5)), ((3, 6, 9), (9, 5)), ((2, 1, 6, 9), (3, 9, 5)),
                                             ((9,), (2, 9, 4)), ((6, 9), (9,))])
def test_matmul_backward(dtype: torch.dtype, a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                         record_ops: type) -> None:
    a, b = randn(*a_shape, dtype=dtype, seed=1), randn(*b_shape, dtype=dtype, seed=2)
    check_backward(ops.matmul, torch.matmul, [a, b], record_ops)


def test_mm_bmm_backward_through_transposed_views(record_ops: type) -> None:
    a, b = with_layout(randn(7, 11, seed=3), "transposed"), with_layout(randn(11, 4, seed=4), "strided")
    check_backward(ops.mm, torch.mm, [a, b], record_ops, ("alcop.mm",))
    x, y = randn(3, 7, 11, seed=5), with_layout(randn(3, 11, 4, seed=6), "transposed")
    check_backward(ops.bmm, torch.bmm, [x, y], record_ops, ("alcop.bmm",))


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu", "tanh", "sigmoid"])
def test_linear_backward_fused(activation: str | None, record_ops: type) -> None:
    x, w, b, r = randn(2, 5, 12, seed=7), randn(9, 12, seed=8), randn(9, seed=9), randn(2, 5, 9, seed=10)
    act = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh,
           "sigmoid": torch.sigmoid}[activation]
    check_backward(lambda x, w, b, r: ops.linear(x, w, b, activation=activation, residual=r),
                   lambda x, w, b, r: act(F.linear(x, w, b)) + r, [x, w, b, r], record_ops,
                   ("alcop.linear", "alcop.mm"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_backward_16bit(dtype: torch.dtype) -> None:
    x, w, b = randn(6, 16, dtype=dtype, seed=11), randn(10, 16, dtype=dtype, seed=12), randn(10, dtype=dtype, seed=13)
    check_backward(lambda x, w, b: ops.linear(x, w, b, activation="gelu"), lambda x, w, b: F.gelu(F.linear(x, w, b)),
                   [x, w, b])


def test_addmm_baddbmm_backward(record_ops: type) -> None:
    inp, m1, m2 = randn(5, seed=14), randn(4, 8, seed=15), randn(8, 5, seed=16)
    check_backward(lambda i, a, b: ops.addmm(i, a, b, beta=0.5, alpha=2.0),
                   lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0), [inp, m1, m2], record_ops,
                   ("alcop.gemm",))
    bi, b1, b2 = randn(3, 4, 1, seed=17), randn(3, 4, 8, seed=18), randn(3, 8, 5, seed=19)
    check_backward(lambda i, a, b: ops.baddbmm(i, a, b, alpha=0.25), lambda i, a, b: torch.baddbmm(i, a, b, alpha=0.25),
                   [bi, b1, b2])


# (nd, N, C, CO, spatial, kernel, stride, padding, dilation, groups, layout, activation)
CONV_GRADS = [
    (2, 2, 4, 6, 7, 3, 1, 1, 1, 1, "contiguous", None),
    (2, 2, 4, 6, 8, 3, 2, 1, 1, 2, "channels_last", "relu"),
    (2, 1, 4, 4, 9, 3, 3, 2, 2, 4, "contiguous", "gelu"),     # depthwise, stride 3, dilation 2
    (2, 1, 3, 4, 7, 4, 1, "same", 1, 1, "contiguous", None),  # asymmetric padding
    (2, 1, 4, 6, 9, 3, 2, 0, 1, 1, "contiguous", "silu"),     # trailing input rows unused by the output
    (1, 2, 3, 5, 11, 4, 2, 1, 1, 1, "contiguous", None),
    (3, 1, 2, 4, 5, 2, 2, 0, 1, 2, "channels_last", "tanh"),
    (2, 2, 4, 6, 7, 1, 2, 0, 1, 1, "channels_last", None),     # 1x1 stride 2: phases no tap reaches
    (1, 1, 2, 3, 13, 3, 4, 3, 2, 1, "contiguous", None),       # stride 4 > window, dilation 2
    (2, 1, 2, 4, 15, 5, 2, 1, 3, 1, "channels_last", None),    # gcd(stride, dilation) = 1: taps 2 apart
]


@pytest.mark.parametrize("nd,n,c,co,s,k,stride,padding,dilation,groups,layout,activation", CONV_GRADS)
def test_conv_backward(nd: int, n: int, c: int, co: int, s: int, k: int, stride: int, padding: object,
                       dilation: int, groups: int, layout: str, activation: str | None, record_ops: type) -> None:
    ours = (ops.conv1d, ops.conv2d, ops.conv3d)[nd - 1]
    theirs = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    act = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh}[activation]
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x = with_layout(randn(n, c, *[s] * nd, seed=20), layout)
    w, b = randn(co, c // groups, *[k] * nd, seed=21), randn(co, seed=22)
    # dX on the forward conv kernel (a convolution per input phase), dW as a GEMM without groups, else
    # the weight gradient's DSL kernel
    expect = ("alcop.conv",) + (("alcop.mm",) if groups == 1 else ("alcop.dsl_call",))
    check_backward(lambda x, w, b: ours(x, w, b, activation=activation, **kw),
                   lambda x, w, b: act(theirs(x, w, b, **kw)), [x, w, b], record_ops, expect)


def test_conv_gradients_in_im2col_chunks_and_with_padding_wider_than_the_window(monkeypatch: pytest.MonkeyPatch,
                                                                              record_ops: type) -> None:
    from alcop_triton.kernels import conv_grad
    # im2col rows of one image at a time (the chunk products summed in float32), and padding wider than the
    # window (dY rows that dX's convolution would pad negatively: sliced off), channels last
    monkeypatch.setattr(conv_grad, "IM2COL_BYTES", 1)
    x = with_layout(randn(3, 4, 6, 6, seed=30), "channels_last")
    w = randn(5, 4, 3, 3, seed=31)
    check_backward(lambda x, w: ops.conv2d(x, w, padding=3), lambda x, w: F.conv2d(x, w, padding=3), [x, w],
                   record_ops, ("alcop.conv", "alcop.mm"))


def test_conv_weight_gradient_over_a_long_reduction_reads_x_in_place(monkeypatch: pytest.MonkeyPatch,
                                                                   record_ops: type) -> None:
    from alcop_triton.kernels import conv_grad
    # past IM2COL_MAX_ROWS the weight gradient is the DSL kernel (no im2col copy), groups or not
    monkeypatch.setattr(conv_grad, "IM2COL_MAX_ROWS", 10)
    x = with_layout(randn(2, 4, 6, 6, seed=32), "channels_last")
    w = randn(5, 4, 3, 3, seed=33)
    with record_ops() as rec:
        _grads(lambda x, w: ops.conv2d(x, w, padding=1), [x, w])
    assert "alcop.dsl_call" in rec.ops and "alcop.mm" not in rec.ops, sorted(set(rec.ops))
    check_backward(lambda x, w: ops.conv2d(x, w, padding=1), lambda x, w: F.conv2d(x, w, padding=1), [x, w])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_backward_16bit(dtype: torch.dtype) -> None:
    x, w = randn(2, 4, 8, 8, dtype=dtype, seed=23), randn(6, 4, 3, 3, dtype=dtype, seed=24)
    check_backward(lambda x, w: ops.conv2d(x, w, padding=1, stride=2), lambda x, w: F.conv2d(x, w, padding=1, stride=2),
                   [x, w])


def test_double_backward_of_mm() -> None:
    # the GEMM's gradients are alcop ops with autograd themselves
    a = randn(4, 6, seed=25).requires_grad_()
    b = randn(6, 3, seed=26).requires_grad_()
    (ga,) = torch.autograd.grad(ops.mm(a, b).pow(2).sum(), a, create_graph=True)
    (gb,) = torch.autograd.grad(ga.sum(), b)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    (ga64,) = torch.autograd.grad((a64 @ b64).pow(2).sum(), a64, create_graph=True)
    (gb64,) = torch.autograd.grad(ga64.sum(), b64)
    assert_close(gb, gb64)


@pytest.mark.parametrize("stride", [1, 2])
def test_double_backward_of_conv_through_alcop_ops(stride: int) -> None:
    # no groups: both gradients are alcop conv/GEMM calls (stride 2: one per input phase, written into
    # slices of dX), differentiable themselves
    x, w = randn(1, 2, 5, 5).requires_grad_(), randn(2, 2, 3, 3, seed=1).requires_grad_()
    (gx,) = torch.autograd.grad(ops.conv2d(x, w, padding=1, stride=stride).square().sum(), x, create_graph=True)
    (gw,) = torch.autograd.grad(gx.sum(), w)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (gx64,) = torch.autograd.grad(F.conv2d(x64, w64, padding=1, stride=stride).square().sum(), x64, create_graph=True)
    assert_close(gx, gx64)
    assert_close(gw, torch.autograd.grad(gx64.sum(), w64)[0])


def test_double_backward_of_a_grouped_conv_is_a_clear_error() -> None:
    # groups: the weight gradient is a DSL kernel, which has no derivative of its own
    x, w = randn(1, 4, 5, 5).requires_grad_(), randn(4, 2, 3, 3, seed=1).requires_grad_()
    (gw,) = torch.autograd.grad(ops.conv2d(x, w, padding=1, groups=2).square().sum(), w, create_graph=True)
    assert_close(gw, torch.autograd.grad(F.conv2d(x.double(), w.double(), padding=1, groups=2).square().sum(), w)[0])
    with pytest.raises(NotImplementedError, match="double backward"):
        gw.sum().backward()