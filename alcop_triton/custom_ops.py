"""``torch.ops.alcop.*``: alcop_triton's kernels as torch.library custom ops.

Each op has a fake (meta) implementation, so ``torch.compile`` traces it without running it, and
an autograd formula (``autograd.py``) whose gradients are again alcop ops, so the backward graph
is traced the same way:

=====================  ==========================================================================
op                     computes
=====================  ==========================================================================
``alcop::mm``          ``a @ b`` for 2-D operands (any strides)
``alcop::bmm``         ``a @ b`` for 3-D operands of equal batch (stride-0 batches broadcast)
``alcop::gemm``        ``act(alpha * a @ b + bias) + beta * residual``, 2-D or 3-D (fused epilogue)
``alcop::gemm_out``    the same, written into a given ``out`` (the drop-ins' ``out=``)
``alcop::linear``      ``act(input @ weight.T + bias) + residual`` for an N-d input (F.linear)
``alcop::conv``        N-d convolution as implicit GEMM, asymmetric padding, groups, bias, act
``alcop::dsl_call``    a registered DSL kernel by key (conv gradients, ``alcop_triton.op`` grads)
=====================  ==========================================================================

An implementation checks its operands, sends inputs alcop cannot run to torch (``fallback``),
chooses a config (``config_choice``), takes the compiled kernel of ``kernels/`` and launches it
(``fastpath.launch_kernel``). The registered implementations go through ``fastpath.call``, so a repeated
signature is a cache hit below autograd and in compiled graphs too; ``EAGER`` holds the same
implementations for drop-in calls that torch's dispatcher need not see. CPU tensors run in
Triton's interpreter (slow; meant for tests).

CUDA graphs: kernels are compiled and configs chosen on first use. While a stream is being captured
a call whose config or kernel variant has not been used before raises ``RuntimeError`` (warm up
with the same shapes, strides and dtypes first); a warmed-up call takes the cached path.
"""

from __future__ import annotations

import math
import types
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from . import config_choice, fallback
from . import fastpath as fast
from .dsl_kernels import bind, dsl_output, dsl_te, run_dsl
from .fastpath import launch_kernel
from .records import Workload, dtype_name

if TYPE_CHECKING:
    # alcop_triton.kernels is the top-level kernels/ directory (setup.cfg package_dir; __init__.py extends
    # __path__ in a checkout), which mypy cannot follow: it checks that directory as the package `kernels`.
    from kernels import conv as kconv
    from kernels import matmul as kmatmul
else:
    from .kernels import conv as kconv
    from .kernels import matmul as kmatmul

ACTIVATIONS = kmatmul.ACTIVATIONS
CUDA_GRID_Y = 65535  # CUDA's limit on the grid's second dimension, which carries the batch


# ----------------------------------------------------------------------------- shared checks

def check_same(op: str, names: Sequence[str], tensors: Sequence[torch.Tensor | None]) -> None:
    """Every given tensor has the first one's dtype and device (RuntimeError, as torch raises)."""
    pairs = [(n, t) for n, t in zip(names, tensors) if t is not None]
    n0, t0 = pairs[0]
    for n, t in pairs[1:]:
        if t.dtype != t0.dtype:
            raise RuntimeError(f"{op}(): expected {n0} and {n} to have the same dtype, but got "
                               f"{n0}.dtype={dtype_name(t0.dtype)} and {n}.dtype={dtype_name(t.dtype)}")
    for n, t in pairs[1:]:
        if t.device != t0.device:
            raise RuntimeError(f"{op}(): Expected all tensors to be on the same device, but found at least two "
                               f"devices: {n0} is on {t0.device} and {n} on {t.device}")


def check_activation(op: str, activation: str | None) -> None:
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"{op}(activation={activation!r}): must be one of {ACTIVATIONS} or None")


def _check_gemm(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                residual: torch.Tensor | None, activation: str | None, ndims: tuple[int, ...]) -> tuple[int, ...]:
    """Checks of a GEMM op's operands; returns the output shape."""
    for n, t in (("a", a), ("b", b)):
        if t.dim() not in ndims:
            raise RuntimeError(f"{op}(): {n} must be a {' or '.join(f'{d}-D' for d in ndims)} tensor, "
                               f"got {n}.shape={tuple(t.shape)}")
    if a.dim() != b.dim():
        raise RuntimeError(f"{op}(): a and b must have the same number of dims, got a.shape={tuple(a.shape)} "
                           f"and b.shape={tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"{op}(): a.shape={tuple(a.shape)} and b.shape={tuple(b.shape)} cannot be multiplied: "
                           f"a's last dim ({a.shape[-1]}) must equal b's second to last ({b.shape[-2]})")
    if a.dim() >= 3 and a.shape[:-2] != b.shape[:-2]:
        raise RuntimeError(f"{op}(): batch sizes differ: a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)}; "
                           "broadcast (expand) them first, as alcop_triton.matmul does")
    shape = tuple(a.shape[:-1]) + (b.shape[-1],)
    _check_epilogue(op, shape, ("a", "b"), (a, b), bias, residual, activation,
                    f"({shape[-1]},) (one per output column)")
    return shape


def _check_epilogue(op: str, shape: tuple[int, ...], names: tuple[str, str], operands: tuple[torch.Tensor, ...],
                    bias: torch.Tensor | None, residual: torch.Tensor | None, activation: str | None,
                    bias_rule: str) -> None:
    """The fused epilogue's arguments against the output ``shape``; shared by every GEMM-like op."""
    if bias is not None and tuple(bias.shape) != (shape[-1],):
        raise RuntimeError(f"{op}(): bias.shape={tuple(bias.shape)}, expected {bias_rule}")
    if residual is not None and tuple(residual.shape) != shape:
        raise RuntimeError(f"{op}(): residual.shape={tuple(residual.shape)}, expected the output's shape {shape}")
    check_same(op, names + ("bias", "residual"), operands + (bias, residual))
    check_activation(op, activation)


# ----------------------------------------------------------------------------- GEMM

def run_gemm(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
             activation: str | None, alpha: float, beta: float, out: torch.Tensor | None,
             torch_workload: Callable[[], Workload | None] | None = None) -> torch.Tensor:
    """``act(alpha * a @ b + bias) + beta * residual`` through the DSL matmul kernel (or torch).
    ``torch_workload``: what torch would run instead where that is not this GEMM (``choose_config``)."""
    shape = tuple(a.shape[:-1]) + (b.shape[-1],)
    if out is None:
        out = a.new_empty(shape)
    if out.numel() == 0:
        return out
    reason = fallback.runtime_reason(a, b, bias, residual, out)
    if reason is not None:
        fallback.use_torch(op, reason)
        out.copy_(fallback.torch_gemm(a, b, bias, residual, activation, alpha, beta))
        return out
    a, b = kmatmul.aligned_operands(a, b)  # rows 16-byte loads cannot read are copied (K zero-padded)
    k = a.shape[-1]
    # Two batch dims come from a matmul reading permuted operands in place (ops._two_batch_dims_in_place).
    # The records time torch's bmm on contiguous operands, but torch.matmul copies these first: the
    # records' torch time is no measure of what torch would cost here, so it sends nothing to torch.
    cfg = config_choice.choose_config(a.device, lambda: kmatmul.workload_of(a, b) if k > 0 else None,
                                      torch_comparable=a.dim() < 4, torch_workload=torch_workload)
    ep = kmatmul.Epilogue(bias is not None, activation, residual is not None, float(alpha), float(beta))
    kern = kmatmul.compiled(dtype_name(a.dtype), a.dim() - 2, ep, cfg)
    if a.dim() == 2:
        launch_kernel(kern, [t for t in (a, b, bias, residual, out) if t is not None])
        return out
    # The batch (all batch dims) is the grid's second dimension: split it beyond CUDA's limit of 65535.
    step = max(1, CUDA_GRID_Y // math.prod(a.shape[1:-2]))
    for s in range(0, a.shape[0], step):
        sl = slice(s, s + step)
        launch_kernel(kern, [t[sl] if t is not bias else t for t in (a, b, bias, residual, out) if t is not None])
    return out


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_gemm("alcop::mm", a, b, None, None, None, (2,))
    return run_gemm("mm", a, b, None, None, None, 1.0, 1.0, None)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_gemm("alcop::bmm", a, b, None, None, None, (3, 4))
    return run_gemm("bmm", a, b, None, None, None, 1.0, 1.0, None)


def _gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
          activation: str | None = None, alpha: float = 1.0, beta: float = 1.0) -> torch.Tensor:
    _check_gemm("alcop::gemm", a, b, bias, residual, activation, (2, 3))
    return run_gemm("gemm", a, b, bias, residual, activation, alpha, beta, None)


def _gemm_out(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
              activation: str | None, alpha: float, beta: float, out: torch.Tensor) -> None:
    _check_gemm_out(a, b, bias, residual, activation, out)
    run_gemm("gemm_out", a, b, bias, residual, activation, alpha, beta, out)


# The registered implementations go through the fast path too: below autograd (grad mode is off
# there) and in compiled graphs, a repeated signature is a cache hit.
def cached_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return fast.call("alcop::mm", (a, b), (), _mm)


def cached_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return fast.call("alcop::bmm", (a, b), (), _bmm)


def cached_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                residual: torch.Tensor | None = None, activation: str | None = None, alpha: float = 1.0,
                beta: float = 1.0) -> torch.Tensor:
    return fast.call("alcop::gemm", (a, b, bias, residual), (activation, alpha, beta), _gemm)


mm_op = torch.library.custom_op(
    "alcop::mm", cached_mm,
    mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
bmm_op = torch.library.custom_op(
    "alcop::bmm", cached_bmm,
    mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
gemm_op = torch.library.custom_op(
    "alcop::gemm", cached_gemm,
    mutates_args=(), schema=("(Tensor a, Tensor b, Tensor? bias=None, Tensor? residual=None, str? activation=None, "
                             "float alpha=1.0, float beta=1.0) -> Tensor"))
gemm_out_op = torch.library.custom_op(
    "alcop::gemm_out", _gemm_out, mutates_args=("out",),
    schema=("(Tensor a, Tensor b, Tensor? bias, Tensor? residual, str? activation, float alpha, float beta, "
            "Tensor(a!) out) -> ()"))


def _check_gemm_out(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                    activation: str | None, out: torch.Tensor) -> None:
    shape = _check_gemm("alcop::gemm_out", a, b, bias, residual, activation, (2, 3))
    if tuple(out.shape) != shape:
        raise RuntimeError(f"alcop::gemm_out(): out.shape={tuple(out.shape)}, expected {shape}")
    check_same("alcop::gemm_out", ("a", "out"), (a, out))


@mm_op.register_fake
def _mm_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty(_check_gemm("alcop::mm", a, b, None, None, None, (2,)))


@bmm_op.register_fake
def _bmm_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty(_check_gemm("alcop::bmm", a, b, None, None, None, (3, 4)))


@gemm_op.register_fake
def _gemm_fake(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
               residual: torch.Tensor | None = None, activation: str | None = None, alpha: float = 1.0,
               beta: float = 1.0) -> torch.Tensor:
    return a.new_empty(_check_gemm("alcop::gemm", a, b, bias, residual, activation, (2, 3)))


@gemm_out_op.register_fake
def _gemm_out_fake(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                   activation: str | None, alpha: float, beta: float, out: torch.Tensor) -> None:
    _check_gemm_out(a, b, bias, residual, activation, out)


# ----------------------------------------------------------------------------- linear

def _check_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                  activation: str | None) -> tuple[int, ...]:
    op = "alcop::linear"
    if x.dim() < 1:
        raise RuntimeError(f"{op}(): input must have at least 1 dim, got a 0-d tensor")
    if w.dim() != 2:
        raise RuntimeError(f"{op}(): weight must be 2-D (out_features, in_features), got weight.shape={tuple(w.shape)}")
    if x.shape[-1] != w.shape[1]:
        raise RuntimeError(f"{op}(): input.shape={tuple(x.shape)} and weight.shape={tuple(w.shape)}: input's last "
                           f"dim ({x.shape[-1]}) must equal in_features = weight.shape[1] ({w.shape[1]})")
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    _check_epilogue(op, shape, ("input", "weight"), (x, w), bias, residual, activation,
                    f"({w.shape[0]},) = (out_features,)")
    return shape


def _linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
            residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    shape = _check_linear(x, w, bias, residual, activation)
    rows = math.prod(shape[:-1])  # explicit: reshape(-1, 0) is ambiguous for empty features
    x2 = x.reshape(rows, w.shape[1])
    r2 = residual.reshape(rows, w.shape[0]) if residual is not None else None
    return run_gemm("linear", x2, w.t(), bias, r2, activation, 1.0, 1.0, None).view(shape)


def cached_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                  residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    return fast.call("alcop::linear", (x, w, bias, residual), (activation,), _linear)


linear_op = torch.library.custom_op(
    "alcop::linear", cached_linear,
    mutates_args=(), schema=("(Tensor input, Tensor weight, Tensor? bias=None, Tensor? residual=None, "
                             "str? activation=None) -> Tensor"))


@linear_op.register_fake
def _linear_fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                 residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    return x.new_empty(_check_linear(x, w, bias, residual, activation))


# ----------------------------------------------------------------------------- convolution

def _check_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
                activation: str | None) -> list[int]:
    op = "alcop::conv"
    nd = x.dim() - 2
    if nd not in (1, 2, 3):
        raise RuntimeError(f"{op}(): input must be (N, C, *spatial) with 1 to 3 spatial dims, got input.shape="
                           f"{tuple(x.shape)}")
    if w.dim() != x.dim():
        raise RuntimeError(f"{op}(): weight must be (C_out, C_in / groups, *kernel) with {nd} kernel dims, got "
                           f"weight.shape={tuple(w.shape)}")
    for name, v, low in (("stride", stride, 1), ("pad_left", pad_left, 0), ("pad_right", pad_right, 0),
                         ("dilation", dilation, 1)):
        if len(v) != nd or any(int(s) < low for s in v):
            raise RuntimeError(f"{op}(): {name}={list(v)}: expected {nd} values >= {low}")
    if groups < 1 or w.shape[0] % groups or x.shape[1] != w.shape[1] * groups:
        raise RuntimeError(f"{op}(): groups={groups} with weight.shape={tuple(w.shape)} and input.shape="
                           f"{tuple(x.shape)}: groups must divide C_out and input channels must be "
                           "weight.shape[1] * groups")
    if bias is not None and tuple(bias.shape) != (w.shape[0],):
        raise RuntimeError(f"{op}(): bias.shape={tuple(bias.shape)}, expected ({w.shape[0]},) = (C_out,)")
    check_same(op, ("input", "weight", "bias"), (x, w, bias))
    check_activation(op, activation)
    out = kconv.output_size(x, w, stride, pad_left, pad_right, dilation)
    if any(o <= 0 for o in out):
        raise RuntimeError(f"{op}(): input.shape={tuple(x.shape)} padded by {list(pad_left)}/{list(pad_right)} is "
                           f"smaller than the dilated kernel {tuple(w.shape[2:])} (dilation {list(dilation)})")
    return [x.shape[0], w.shape[0], *out]


def _conv_workload(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], pad_left: Sequence[int],
                   pad_right: Sequence[int], dilation: Sequence[int], groups: int) -> Workload | None:
    # The dispatcher's key has one pad per conv; an asymmetric one ('same', even kernels) rounds up.
    pad = tuple((lo + hi + 1) // 2 for lo, hi in zip(pad_left, pad_right))
    try:
        return kconv.workload_of(x, w, tuple(stride), pad, tuple(dilation), groups)
    except ValueError:  # the symmetric stand-in has an empty GEMM view: no record can match it
        return None


def _conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
            pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
            activation: str | None = None) -> torch.Tensor:
    shape = _check_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation)
    out = kconv.empty_output(x, shape, kconv.torch_output_format(x, w, stride, pad_left, dilation, groups))
    if out.numel() == 0:
        return out
    reason = fallback.runtime_reason(x, w, bias, out)
    if reason is None and groups > CUDA_GRID_Y:
        reason = f"groups={groups}: the groups are the grid's second dimension, limited to {CUDA_GRID_Y} by CUDA"
    if reason is not None:
        fallback.use_torch("conv", reason)
        out.copy_(fallback.torch_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation))
        return out
    gemm = kconv.pointwise_gemm(x, w, out, stride, pad_left, pad_right, groups)
    if gemm is not None:
        # Its config is the GEMM's; patch mode weighs the GEMM's recorded time against cuDNN's on the
        # convolution where records hold that, else against cuBLAS's on the GEMM: cuBLAS is no stand-in
        # for cuDNN (ResNet-50's 14x14 1024 -> 512 layer at batch 64, shipped H100 table: alcop's GEMM
        # 24.6 µs, cuBLAS's 62.0, cuDNN's convolution 25.6).
        run_gemm("conv", *gemm[:2], bias, None, activation, 1.0, 1.0, gemm[2],
                 lambda: _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups))
        return out
    cfg = config_choice.choose_config(
        x.device, lambda: _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups) if w[0].numel() > 0 else None)
    p = kconv.ConvParams(x.dim() - 2, tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation), groups,
                         kconv.is_channels_last(x), bias is not None, activation)
    kern = kconv.compiled(dtype_name(x.dtype), p, cfg)
    co = w.shape[0]
    launch_kernel(kern, [t for t in (x, w, bias) if t is not None] + [out.unflatten(1, (groups, co // groups))])
    return out


def cached_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
                activation: str | None = None) -> torch.Tensor:
    return fast.call("alcop::conv", (x, w, bias), (tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation),
                                                   groups, activation), _conv)


conv_op = torch.library.custom_op(
    "alcop::conv", cached_conv,
    mutates_args=(), schema=("(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] pad_left, "
                             "int[] pad_right, int[] dilation, int groups, str? activation=None) -> Tensor"))


@conv_op.register_fake
def _conv_fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
               pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
               activation: str | None = None) -> torch.Tensor:
    shape = _check_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation)
    return kconv.empty_output(x, shape, kconv.torch_output_format(x, w, stride, pad_left, dilation, groups))


# ----------------------------------------------------------------------------- DSL kernels by key

dsl_call_op = torch.library.custom_op(
    "alcop::dsl_call", lambda kernel, inputs: fast.call(
        ("alcop::dsl_call", kernel), tuple(inputs), (), lambda *ts: run_dsl(kernel, ts)),
    mutates_args=(), schema="(str kernel, Tensor[] inputs) -> Tensor")


@dsl_call_op.register_fake
def _dsl_call_fake(kernel: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    spec, phs, out = dsl_te(kernel)
    return dsl_output(spec, out, bind(f"dsl_call[{kernel}]", phs, inputs), inputs[0])


EAGER = types.SimpleNamespace(mm=_mm, bmm=_bmm, gemm=_gemm, gemm_out=_gemm_out, linear=_linear, conv=_conv,
                              dsl_call=lambda kernel, inputs: run_dsl(kernel, inputs))
"""The custom ops' implementations under ``torch.ops.alcop``'s names, called without torch's dispatcher:
the route of eager calls that need neither autograd nor tracing (``fastpath.call``)."""
