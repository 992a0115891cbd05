"""Backward formulas of the ``torch.ops.alcop`` custom ops, registered with ``register_autograd``.

Gradients: dA = dZ @ B^T and dB = A^T @ dZ are ``alcop::mm``/``bmm``/``gemm`` calls on transposed *views*
(strides, no copies). A convolution's input gradient runs on the forward convolution kernel (one
convolution of dZ per input phase) or, strided, in one kernel over the phases; its weight gradient as
an alcop GEMM over im2col rows that torch copies out of X (short reductions, no groups), as a DSL
kernel of its own (``kernels/conv_grad.py``), or on sm90 on TMA boxes of dY and X
(``kernels/conv_window_grad.py``). What torch computes in a backward: bias gradients (a sum over rows),
``beta * grad`` for a residual, and the activation's derivative (an elementwise product); with an
activation other than relu the pre-activation is recomputed by one more alcop kernel rather than kept
from the forward.

The same formulas also make ``GRAD``: ``torch.autograd.Function``s (``fastpath.grad_function``) over the
cached implementations, for eager calls that need autograd but no tracing. Their per-call cost is a fraction of torch.library's
autograd wrapper; ``torch.compile``, functorch transforms and dispatch modes keep the registered ops.
"""

from __future__ import annotations

import math
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from . import custom_ops
from . import fastpath as fast
from .fallback import TORCH_ACTIVATIONS, vjp_fn

if TYPE_CHECKING:
    # alcop_triton.kernels is the top-level kernels/ directory (setup.cfg package_dir; __init__.py extends
    # __path__ in a checkout), which mypy cannot follow: it checks that directory as the package `kernels`.
    from kernels import conv_grad as conv_grad
    from kernels import conv_window_grad
else:
    from .kernels import conv_grad as conv_grad


def activation_grad(activation: str | None, grad: torch.Tensor, out: torch.Tensor | None,
                    pre_activation: Callable[[], torch.Tensor]) -> torch.Tensor:
    """dL/dz for ``out = act(z)``: relu from the saved output, else act'(z) with z recomputed."""
    if activation is None:
        return grad
    if activation == "relu" and out is not None:
        return torch.where(out > 0, grad, torch.zeros_like(grad))
    return vjp_fn(TORCH_ACTIVATIONS[activation], pre_activation())(grad)[0]


def _keeps_output(activation: str | None, residual: torch.Tensor | None) -> bool:
    # relu's derivative is readable from its output (out > 0 iff z > 0) unless a residual was added.
    return activation == "relu" and residual is None


def _mm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _mm_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    a, b = ctx.saved_tensors
    op = CACHED.mm if a.dim() == 2 else CACHED.bmm
    da = op(grad, b.mT) if ctx.needs_input_grad[0] else None  # dA = dC @ B^T: B^T is a strided view
    db = op(a.mT, grad) if ctx.needs_input_grad[1] else None  # dB = A^T @ dC
    return da, db


def _gemm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    a, b, bias, residual, activation, alpha, beta = inputs
    ctx.activation, ctx.alpha, ctx.beta, ctx.has_residual = activation, alpha, beta, residual is not None
    ctx.save_for_backward(a, b, bias, output if _keeps_output(activation, residual) else None)


def _gemm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    a, b, bias, out = ctx.saved_tensors
    need = ctx.needs_input_grad
    dz = activation_grad(ctx.activation, grad, out,
                         lambda: CACHED.gemm(a, b, bias, None, None, ctx.alpha, 1.0))
    da = CACHED.gemm(dz, b.mT, None, None, None, ctx.alpha, 1.0) if need[0] else None
    db = CACHED.gemm(a.mT, dz, None, None, None, ctx.alpha, 1.0) if need[1] else None
    dbias = dz.sum(dim=tuple(range(dz.dim() - 1))) if need[2] else None
    dres = (grad * ctx.beta if ctx.beta != 1.0 else grad) if ctx.has_residual and need[3] else None
    return da, db, dbias, dres, None, None, None


def _linear_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, bias, residual, activation = inputs
    ctx.activation, ctx.has_residual = activation, residual is not None
    ctx.save_for_backward(x, w, bias, output if _keeps_output(activation, residual) else None)


def _linear_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, w, bias, out = ctx.saved_tensors
    need = ctx.needs_input_grad
    dz = activation_grad(ctx.activation, grad, out, lambda: CACHED.linear(x, w, bias, None, None))
    rows = math.prod(x.shape[:-1])
    dz2 = dz.reshape(rows, w.shape[0])
    dx = CACHED.mm(dz2, w).view(x.shape) if need[0] else None
    dw = CACHED.mm(dz2.t(), x.reshape(rows, w.shape[1])) if need[1] else None
    dbias = dz2.sum(0) if need[2] else None
    dres = grad if ctx.has_residual and need[3] else None
    return dx, dw, dbias, dres, None


def _conv_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, bias, stride, pad_left, pad_right, dilation, groups, activation = inputs
    ctx.params = (tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation), groups)
    ctx.activation = activation
    ctx.save_for_backward(x, w, bias, output if activation == "relu" else None)


def conv_grads(x: torch.Tensor, w: torch.Tensor, dz: torch.Tensor, stride: tuple[int, ...],
               pad_left: tuple[int, ...], dilation: tuple[int, ...], groups: int, input_grad: bool = True,
               weight_grad: bool = True,
               differentiable: bool = False) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A convolution's input and weight gradients from the output gradient ``dz`` (what a backward pass
    through ``alcop::conv`` runs; None where not asked), each on the fastest kernel that computes it
    (``kernels/conv_grad.py``, ``kernels/conv_window_grad.py``). On sm90, fp16/bf16 and channels last, both
    run on TMA boxes: the input gradient on the box kernel with the weight read as it lies at flipped taps
    (a strided convolution's phase by phase), the weight gradient on boxes of dY and the input. Elsewhere
    a strided convolution's input gradient runs in one kernel over its input phases where that applies,
    else on the forward convolution kernel; the weight gradient as a GEMM over im2col rows where the
    reduction is short and there are no groups, else on its DSL kernel. ``differentiable`` (a backward
    under create_graph): both gradients through calls that differentiate again or say they cannot (the box
    and phase kernels' results carry no derivative)."""
    if not TYPE_CHECKING:  # Gluon device code: loaded at the first gradient, not with the package
        from .kernels import conv_window_grad
    dx = dw = None
    if input_grad:
        if not differentiable:  # neither the box kernel nor the phases' kernel has a derivative of its own
            dx = conv_window_grad.input_grad_by_boxes(x, w, dz, stride, pad_left, dilation, groups)
            if dx is None:
                dx = conv_grad.input_grad_in_phases(CACHED, x, w, dz, stride, pad_left, dilation, groups)
        if dx is None:
            dx = conv_grad.input_grad_by_conv(CACHED, x, w, dz, stride, pad_left, dilation, groups)
    if weight_grad:
        # the box kernel's result has no derivative: under create_graph the routes that have one
        dw = None if differentiable else \
            conv_window_grad.weight_grad_by_boxes(x, w, dz, stride, pad_left, dilation, groups)
        if dw is None:
            dw = conv_grad.weight_grad_by_gemm(CACHED, x, w, dz, stride, pad_left, dilation, groups)
        if dw is None:
            key = conv_grad.conv_weight_grad_kernel(x.dim() - 2, x.dtype, stride, pad_left, dilation, groups)
            dw = CACHED.dsl_call(key, [dz, x, w]).flatten(0, 1)
    return dx, dw


def _conv_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, w, bias, out = ctx.saved_tensors
    stride, pad_left, pad_right, dilation, groups = ctx.params
    need = ctx.needs_input_grad
    dz = activation_grad(ctx.activation, grad, out, lambda: CACHED.conv(
        x, w, bias, stride, pad_left, pad_right, dilation, groups, None))
    # grad mode is on in a backward exactly when it runs under create_graph (a double backward to come)
    dx, dw = conv_grads(x, w, dz, stride, pad_left, dilation, groups, need[0], need[1], torch.is_grad_enabled())
    dbias = dz.sum(dim=[0] + list(range(2, dz.dim()))) if need[2] else None
    return dx, dw, dbias, None, None, None, None, None, None


def _dsl_call_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.kernel = inputs[0]


def _dsl_call_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    # The kernels called by key compute gradients (a convolution's, an @alcop_triton.op's): reaching this
    # formula means a second derivative was asked for.
    raise NotImplementedError(
        f"alcop_triton: kernel {ctx.kernel!r} computes a gradient; differentiating it again (double backward, "
        "e.g. a gradient penalty through a convolution) is not supported. Compute that part with torch's own "
        "ops (outside alcop_triton.patched()).")


custom_ops.mm_op.register_autograd(_mm_backward, setup_context=_mm_setup)
custom_ops.bmm_op.register_autograd(_mm_backward, setup_context=_mm_setup)
custom_ops.gemm_op.register_autograd(_gemm_backward, setup_context=_gemm_setup)
custom_ops.linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)
custom_ops.conv_op.register_autograd(_conv_backward, setup_context=_conv_setup)
custom_ops.dsl_call_op.register_autograd(_dsl_call_backward, setup_context=_dsl_call_setup)


GRAD = types.SimpleNamespace(
    mm=fast.grad_function("AlcopMm", custom_ops.cached_mm, _mm_setup, _mm_backward, 2),
    bmm=fast.grad_function("AlcopBmm", custom_ops.cached_bmm, _mm_setup, _mm_backward, 2),
    gemm=fast.grad_function("AlcopGemm", custom_ops.cached_gemm, _gemm_setup, _gemm_backward, 4),
    gemm_out=custom_ops.EAGER.gemm_out,  # out= with autograd is refused before it gets here
    linear=fast.grad_function("AlcopLinear", custom_ops.cached_linear, _linear_setup, _linear_backward, 4),
    conv=fast.grad_function("AlcopConv", custom_ops.cached_conv, _conv_setup, _conv_backward, 3),
    dsl_call=torch.ops.alcop.dsl_call)
"""``torch.ops.alcop``'s names for eager calls with autograd: the same implementations and formulas,
without torch.library's per-call autograd wrapper (``fastpath.call``'s ``grad`` route)."""


def _cached(name: str, n_tensors: int) -> Callable[..., torch.Tensor]:
    """``torch.ops.alcop.<name>`` as the backward formulas call it: through the signature cache
    (``fastpath.call``), so a repeated backward's kernels allocate and launch without torch's
    dispatcher (a stride-2 convolution's backward makes about ten such calls), the registered op where
    the dispatcher must see the call (tracing, dispatch modes), ``GRAD``'s route where a double
    backward records the graph. The first ``n_tensors`` arguments are tensors, the rest parameters."""
    eager, registered = getattr(custom_ops.EAGER, name), getattr(torch.ops.alcop, name)

    def call(*args: Any) -> torch.Tensor:
        params = tuple(tuple(p) if isinstance(p, list) else p for p in args[n_tensors:])
        return fast.call(("backward", name), args[:n_tensors], params, eager, registered, None, getattr(GRAD, name))
    return call


def _cached_dsl_call(kernel: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    """``alcop::dsl_call`` as the backward formulas call it (see ``_cached``); its own op has no autograd route."""
    registered = lambda *ts: torch.ops.alcop.dsl_call(kernel, list(ts))  # noqa: E731
    return fast.call(("alcop::dsl_call", kernel), tuple(inputs), (), lambda *ts: custom_ops.EAGER.dsl_call(kernel, ts),
                     registered, None, registered)


CACHED = types.SimpleNamespace(mm=_cached("mm", 2), bmm=_cached("bmm", 2), gemm=_cached("gemm", 4),
                               linear=_cached("linear", 4), conv=_cached("conv", 3), dsl_call=_cached_dsl_call)
"""The ops the backward formulas call, through the signature cache (``_cached``)."""
