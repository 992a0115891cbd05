"""Convolution gradients as DSL kernels: the input and weight gradients of ``alcop::conv``.

Both are registered kinds of ``alcop::dsl_call`` keys (``conv_input_grad_kernel`` /
``conv_weight_grad_kernel`` give the key of one parameter set), with torch's gradients as the
reference for inputs alcop cannot run.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from alcop_triton import te
from alcop_triton.dsl_kernels import DslKernel, kernel_key, register_resolver
from alcop_triton.fallback import torch_conv, vjp_fn
from alcop_triton.records import dtype_name

from .conv import SPATIAL, memory_format_of

@dataclass(frozen=True)
class _ConvGradTensors:
    """Placeholders both conv gradients read: dY, X and W in torch's logical layouts."""
    sp: list[str]
    S: list[te.Var]
    KS: list[te.Var]
    O: list[te.Var]
    N: te.Var
    cg: te.Expr
    cog: te.Expr
    dy: te.Tensor
    x: te.Tensor
    w: te.Tensor


def _conv_grad_tensors(nd: int, dtype: str, groups: int) -> _ConvGradTensors:
    sp = list(SPATIAL[nd])
    S, KS, O = ([te.var(f"{p}{x.upper()}") for x in sp] for p in ("", "K", "O"))
    N, C, CO = te.var("N"), te.var("C"), te.var("CO")
    cg, cog = te.binop("//", C, groups), te.binop("//", CO, groups)
    return _ConvGradTensors(sp, S, KS, O, N, cg, cog, te.placeholder((N, CO, *O), dtype, "dY"),
                            te.placeholder((N, C, *S), dtype, "X"), te.placeholder((CO, cg, *KS), dtype, "Wt"))


def conv_input_grad_te(nd: int, dtype: str, stride: tuple[int, ...], pad: tuple[int, ...],
                       dilation: tuple[int, ...], groups: int,
                       channels_last: bool) -> tuple[list[te.Tensor], te.Tensor]:
    """dX[n, g, c, *i] = sum_{co, *r} dY[n, g*COg + co, (i + p - r*d) / s] * W[g*COg + co, c, *r].

    Only output positions o with o*s = i + p - r*d contribute. The index of dY is written so that
    it falls outside dY whenever s does not divide (i + p - r*d): quotient + remainder * BIG, with
    BIG = O + K*d larger than any quotient's distance from [0, O) (floor or truncating division
    alike); an outside index reads 0, so no branch is needed. X is passed for its shape only
    (before W, whose shape C // groups refers to it: CompiledKernel binds sizes in argument order).
    """
    t = _conv_grad_tensors(nd, dtype, groups)
    sp, S, KS, O, N, cg, cog, dy, x, w = t.sp, t.S, t.KS, t.O, t.N, t.cg, t.cog, t.dy, t.x, t.w
    rco = te.reduce_axis(cog, "rco")
    rs = [te.reduce_axis(KS[i], f"r{s}") for i, s in enumerate(sp)]
    raxes = rs + [rco] if channels_last else [rco] + rs  # the unit-stride channel innermost when NHWC

    def body(n: te.Expr, g: te.Expr, c: te.Expr, *i: te.Expr) -> te.Expr:
        oi: list[te.Expr] = []
        for d in range(nd):
            t = i[d] + pad[d] - rs[d] * dilation[d]
            oi.append(t if stride[d] == 1 else t // stride[d] + (t % stride[d]) * (O[d] + KS[d] * dilation[d]))
        return te.sum(dy[(n, g * cog + rco, *oi)] * w[(g * cog + rco, c, *rs)], axis=raxes)

    out = te.compute((N, te.Const(groups), cg, *S), body, "dX", axis_names=["n", "g", "c"] + [f"i{s}" for s in sp])
    return [dy, x, w], out


def conv_weight_grad_te(nd: int, dtype: str, stride: tuple[int, ...], pad: tuple[int, ...],
                        dilation: tuple[int, ...], groups: int) -> tuple[list[te.Tensor], te.Tensor]:
    """dW[g, co, c, *r] = sum_{n, *o} dY[n, g*COg + co, *o] * X[n, g*Cg + c, o*s - p + r*d] (W for its shape)."""
    t = _conv_grad_tensors(nd, dtype, groups)
    sp, KS, O, N, cg, cog, dy, x, w = t.sp, t.KS, t.O, t.N, t.cg, t.cog, t.dy, t.x, t.w
    rn = te.reduce_axis(N, "rn")
    ro = [te.reduce_axis(O[i], f"ro{s}") for i, s in enumerate(sp)]

    def body(g: te.Expr, co: te.Expr, c: te.Expr, *r: te.Expr) -> te.Expr:
        xi = [ro[d] * stride[d] - pad[d] + r[d] * dilation[d] for d in range(nd)]
        return te.sum(dy[(rn, g * cog + co, *ro)] * x[(rn, g * cg + c, *xi)], axis=[rn, *ro])

    out = te.compute((te.Const(groups), cog, cg, *KS), body, "dW", axis_names=["g", "co", "c"] + [f"k{s}" for s in sp])
    return [dy, x, w], out


def _conv_grads_torch(which: int, nd: int, stride: tuple[int, ...], pad: tuple[int, ...],
                      dilation: tuple[int, ...], groups: int, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Torch's input (which=0) or weight (which=1) gradient, for inputs alcop cannot run."""
    dy, x, w = tensors
    # pad_right only shapes dY; recover it from dY's extent so the forward reproduces dY's shape.
    pad_right = [(dy.shape[2 + i] - 1) * stride[i] + dilation[i] * (w.shape[2 + i] - 1) + 1 - x.shape[2 + i] - pad[i]
                 for i in range(nd)]
    crop = [max(0, -p) for p in pad_right]
    xs = x[(slice(None), slice(None)) + tuple(slice(0, x.shape[2 + i] - crop[i]) for i in range(nd))]
    pr = [max(0, p) for p in pad_right]
    fn = lambda xx, ww: torch_conv(xx, ww, None, stride, pad, pr, dilation, groups, None)  # noqa: E731
    dx, dw = vjp_fn(fn, xs, w)(dy)
    if which == 1:
        return dw.unflatten(0, (groups, w.shape[0] // groups))
    full = torch.zeros_like(x)
    full[(slice(None), slice(None)) + tuple(slice(0, x.shape[2 + i] - crop[i]) for i in range(nd))] = dx
    return full.unflatten(1, (groups, x.shape[1] // groups))


def _conv_grad_spec(key: str, p: dict[str, Any]) -> DslKernel:
    nd, dt, groups = p["nd"], p["dtype"], p["groups"]
    s, pad, d = tuple(p["stride"]), tuple(p["pad"]), tuple(p["dilation"])
    # Channels and window as constants, as kernels/conv.py does for the forward.
    static = ("C", "CO") + tuple(f"K{x.upper()}" for x in SPATIAL[nd])
    if p["grad"] == "input":
        cl = p["channels_last"]
        return DslKernel(
            key, functools.partial(conv_input_grad_te, nd, dt, s, pad, d, groups, cl),
            m_axes=("n",) + tuple(f"i{x}" for x in SPATIAL[nd]), n_axes=("c",),
            out_order=(0, *range(3, 3 + nd), 1, 2) if cl and nd > 1 else None,
            reference=functools.partial(_conv_grads_torch, 0, nd, s, pad, d, groups), static=static)
    return DslKernel(
        key, functools.partial(conv_weight_grad_te, nd, dt, s, pad, d, groups),
        # Columns (kh, kw, c), the channel innermost: with channels a multiple of BLOCK_N each column
        # tile is one window tap (scalar kh, kw), and X's channels-last rows load as vectors.
        m_axes=("co",), n_axes=tuple(f"k{x}" for x in SPATIAL[nd]) + ("c",),
        reference=functools.partial(_conv_grads_torch, 1, nd, s, pad, d, groups), static=static)


register_resolver("alcop::conv_grad", _conv_grad_spec)


def conv_input_grad_kernel(nd: int, dtype: torch.dtype, stride: Sequence[int], pad: Sequence[int],
                           dilation: Sequence[int], groups: int, channels_last: bool) -> str:
    """The ``alcop::dsl_call`` key of the conv input-gradient kernel for these parameters."""
    return kernel_key("alcop::conv_grad", dict(grad="input", nd=nd, dtype=dtype_name(dtype), stride=list(stride),
                                               pad=list(pad), dilation=list(dilation), groups=groups,
                                               channels_last=channels_last))


def conv_weight_grad_kernel(nd: int, dtype: torch.dtype, stride: Sequence[int], pad: Sequence[int],
                            dilation: Sequence[int], groups: int) -> str:
    """The ``alcop::dsl_call`` key of the conv weight-gradient kernel for these parameters."""
    return kernel_key("alcop::conv_grad", dict(grad="weight", nd=nd, dtype=dtype_name(dtype), stride=list(stride),
                                               pad=list(pad), dilation=list(dilation), groups=groups))


# ----------------------------------------------------------------------------- gradients through faster kernels

IM2COL_BYTES = 1 << 30
"""Largest im2col buffer ``weight_grad_by_gemm`` makes at once; a larger one is made and multiplied in
batch chunks (their products summed in float32, in chunk order: deterministic)."""


def _pad_right(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int], pad: Sequence[int],
               dilation: Sequence[int]) -> list[int]:
    """The right padding of the forward that made ``dy`` from ``x``: the rows it read past ``x``'s end
    (negative: rows of ``x`` that no output read)."""
    nd = x.dim() - 2
    return [(dy.shape[2 + i] - 1) * stride[i] + dilation[i] * (w.shape[2 + i] - 1) - pad[i] - (x.shape[2 + i] - 1)
            for i in range(nd)]


def input_grad_by_conv(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                       pad: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor | None:
    """dX as the forward convolution kernel computes it, or None where it cannot: a stride-1 convolution's
    input gradient is dY convolved with W flipped in space and with input and output channels swapped
    (per group), padded by ``dilation * (K - 1)`` minus the forward's padding on each side. Needs stride
    1 and no padding wider than the dilated window (else the DSL kernel of ``conv_input_grad_te``)."""
    nd = x.dim() - 2
    ks = w.shape[2:]
    right = _pad_right(x, w, dy, stride, pad, dilation)
    left_t = [dilation[i] * (ks[i] - 1) - pad[i] for i in range(nd)]
    right_t = [dilation[i] * (ks[i] - 1) - right[i] for i in range(nd)]
    if any(s != 1 for s in stride) or min(left_t + right_t) < 0:
        return None
    co = w.shape[0]
    # (CO, C/g, *K) -> (C, CO/g, *K), flipped in space; one copy of the (small) weight, in x's layout.
    wt = w.unflatten(0, (groups, co // groups)).transpose(1, 2).flatten(0, 1).flip(list(range(2, 2 + nd)))
    wt = wt.contiguous(memory_format=memory_format_of(x))
    return torch.ops.alcop.conv(dy, wt, None, [1] * nd, left_t, right_t, list(dilation), groups, None)


def weight_grad_by_gemm(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                        pad: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor | None:
    """dW = dY^T @ im2col(X) as one alcop GEMM (its long reduction is what split-K is for), or None for
    grouped convolutions (then the DSL kernel of ``conv_weight_grad_te``). im2col(X) is a copy of X's
    windows, (N * O, K * C) rows in channels-last order, made by torch from a strided view of X padded
    once; dY in channels-last order is (N * O, CO). The result is (CO, C, *K), channels-last strided."""
    if groups != 1:
        return None
    nd, n, c, co = x.dim() - 2, x.shape[0], x.shape[1], w.shape[0]
    ks, os_ = list(w.shape[2:]), list(dy.shape[2:])
    right = [max(0, r) for r in _pad_right(x, w, dy, stride, pad, dilation)]
    # channels last, padded: (N, *S', C); rows no output reads stay (the strided view skips them)
    xp = torch.nn.functional.pad(x.movedim(1, -1), [0, 0] + [p for i in reversed(range(nd)) for p in (pad[i], right[i])])
    xp = xp.contiguous()
    sp = xp.stride()
    window = (*os_, *ks, c)   # per image
    strides = (sp[0], *(stride[i] * sp[1 + i] for i in range(nd)), *(dilation[i] * sp[1 + i] for i in range(nd)), 1)
    dym = dy.movedim(1, -1).reshape(n, -1, co)   # (N, O, CO): a view when dY is channels last
    per_image = math.prod(os_) * math.prod(ks) * c * x.element_size()
    chunk = max(1, min(n, IM2COL_BYTES // max(1, per_image)))
    acc: torch.Tensor | None = None
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        cols = xp.as_strided((rows, *window), strides, xp.storage_offset() + start * sp[0])
        cols = cols.reshape(-1, math.prod(ks) * c)
        part = torch.ops.alcop.mm(dym[start:start + rows].reshape(-1, co).t(), cols)   # (CO, K * C)
        if rows == n:
            acc = part
        else:
            acc = part.float() if acc is None else acc + part.float()
    assert acc is not None
    return acc.to(x.dtype).reshape(co, *ks, c).movedim(-1, 1)
