"""Drop-in replacements for torch's matrix products and convolutions, running alcop kernels.

``matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``linear``, ``conv1d``, ``conv2d`` and ``conv3d``
take torch's arguments and follow its semantics (broadcasting, 1-D promotion and squeezing,
``out=``, 'same'/'valid' padding, groups, unbatched inputs); invalid arguments raise the exception
type torch raises, with a message naming the argument, its value and the rule. Keyword-only
extensions fuse epilogues into the kernel: ``linear(..., activation=, residual=)`` and
``convNd(..., activation=)``.

A call without ``out=`` enters through ``fastpath.call``: a repeated signature (shapes, strides,
dtypes, device, alignment, flags) allocates the output and launches, skipping everything below.
Otherwise a drop-in checks its arguments (``_matmul`` and friends) and runs the GEMM or the
convolution through an op namespace ``alcop``: ``torch.ops.alcop`` (``custom_ops``) when autograd
or tracing must see the op, else ``custom_ops.EAGER``, the same implementations called directly.

Inputs alcop does not handle fall back to torch (logged once per reason; ``ALCOP_STRICT=1`` raises
``UnsupportedError``): dtypes other than float16/bfloat16/float32, devices other than CUDA and CPU,
non-strided layouts, CUDA tensors while ``TRITON_INTERPRET=1``. CPU tensors run in Triton's
interpreter, which is slow: it exists for testing.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from . import argcheck
from . import autograd  # also registers the custom ops' backward formulas
from . import custom_ops, fallback, tensor_kinds
from . import fastpath as fast
from .records import dtype_name

Tensor = torch.Tensor

__all__ = ["addmm", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d", "linear", "matmul", "mm"]


# ----------------------------------------------------------------------------- argument checks

def _need_tensor(op: str, name: str, x: Any) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(x).__name__}")


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _falls_back(op: str, *tensors: Tensor | None) -> bool:
    reason = fallback.static_reason(*tensors)
    if reason is None:
        return False
    fallback.use_torch(op, reason)
    return True


def _foreign(op: str, names: tuple[str, ...], *tensors: Any) -> bool:
    """Whether a tensor argument is one alcop leaves to torch whatever its shapes (``tensor_kinds.reason``:
    nested, sparse, quantized, meta, torch's negative or conjugate bit, a subclass with its own
    ``__torch_function__``...); asked before any shape is read (a nested tensor has none). Announced as
    ``_falls_back`` announces. Storage that does not cover its tensor raises (``tensor_kinds.check_storage``)."""
    reason = tensor_kinds.first_reason(*tensors)
    if reason is None:
        tensor_kinds.check_storage(op, names, tensors)
        return False
    fallback.use_torch(op, reason)
    return True


def _broadcast(s1: tuple[int, ...], s2: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast of two shapes (torch's rules), None when they do not broadcast.

    Plain Python, so that torch.compile folds it into guards instead of recording graph nodes.
    """
    n = max(len(s1), len(s2))
    s1, s2 = (1,) * (n - len(s1)) + s1, (1,) * (n - len(s2)) + s2
    out = []
    for a, b in zip(s1, s2):
        if a != b and a != 1 and b != 1:
            return None
        out.append(a if b == 1 else b)
    return tuple(out)


def _broadcast_to(op: str, name: str, t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``t`` expanded to ``shape`` (a stride-0 view), or torch's RuntimeError naming the argument."""
    if _broadcast(_shape(t), shape) != shape:
        raise RuntimeError(f"{op}(): {name}.shape={_shape(t)} does not broadcast to the output's shape {shape}")
    # The tensor itself where it already has the shape: an expand would be one more autograd node.
    return t if _shape(t) == shape else t.expand(shape)


def _check_out(op: str, out: Any, like: Tensor, inputs: Sequence[Tensor | None]) -> None:
    _need_tensor(op, "out", out)
    if out.dtype != like.dtype:
        raise RuntimeError(f"{op}(): expected out to have dtype {dtype_name(like.dtype)}, but got "
                           f"out.dtype={dtype_name(out.dtype)}")
    if out.device != like.device:
        raise RuntimeError(f"{op}(): expected out on {like.device}, the inputs' device, but out is on {out.device}")
    if any(st == 0 and n > 1 for st, n in zip(out.stride(), out.shape)):  # torch's MemOverlap::Yes
        raise RuntimeError(f"{op}(): unsupported operation: more than one element of the written-to tensor refers to "
                           f"a single memory location (out.stride()={out.stride()}). Please clone() the tensor before "
                           "performing the operation.")
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (*inputs, out)):
        raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad.")


def _resize_out(out: Tensor, shape: tuple[int, ...]) -> None:
    """torch's ``out=`` contract: a wrongly shaped ``out`` is resized (with torch's warning unless empty)."""
    if _shape(out) == shape:
        return
    if out.numel() != 0:
        warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, which "
                      f"does not match the required output shape {list(shape)}. This behavior is deprecated, and in "
                      "a future PyTorch release outputs will not be resized unless they have zero elements.",
                      UserWarning, stacklevel=4)
    out.resize_(shape)


def _shares_memory(a: Tensor, b: Tensor | None) -> bool:
    return b is not None and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ----------------------------------------------------------------------------- GEMM family

def _gemm(alcop: Any, op: str, a: Tensor, b: Tensor, bias: Tensor | None, residual: Tensor | None,
          activation: str | None, alpha: float, beta: float, shape: tuple[int, ...], out: Tensor | None,
          inputs: Sequence[Tensor]) -> Tensor:
    """Run the 2-D/3-D GEMM ``a @ b`` (+ epilogue) through ``alcop`` (``torch.ops.alcop`` or, for eager
    calls that torch's dispatcher need not see, ``custom_ops.EAGER``) and give it ``shape``."""
    plain = bias is None and residual is None and activation is None and alpha == 1.0
    if out is None:
        if plain:
            y = alcop.mm(a, b) if a.dim() == 2 else alcop.bmm(a, b)
        else:
            y = alcop.gemm(a, b, bias, residual, activation, float(alpha), float(beta))
        # No view of a result already in shape: on the autograd route a view would be one more node,
        # and the kernel's own output is what the fast path stores a repeat of (fastpath.GradEntry).
        return y if y.shape == shape else y.view(shape)
    _check_out(op, out, a, inputs)
    _resize_out(out, shape)
    gemm_shape = _shape(a)[:-1] + (b.shape[-1],)
    try:
        view = out.view(gemm_shape)
    except RuntimeError:  # strides that cannot hold the GEMM's (batch, M, N) view: compute, then copy
        view = None
    if view is None or any(_shares_memory(out, t) for t in (a, b, bias, residual)):
        out.copy_(alcop.gemm(a, b, bias, residual, activation, float(alpha), float(beta)).view(shape))
    else:
        alcop.gemm_out(a, b, bias, residual, activation, float(alpha), float(beta), view)
    return out


def _routes(fn: Callable[..., Tensor], torch_fn: Callable[..., Tensor]) -> tuple[Callable[..., Tensor], ...]:
    """``fastpath.call``'s routes: ``fn(alcop, ...)`` bound to the eager route and to torch's dispatcher,
    the same computation in torch (where patch mode sends workloads the records leave to torch), and ``fn`` bound
    to the eager autograd route (``autograd.GRAD``)."""
    return (functools.partial(fn, custom_ops.EAGER), functools.partial(fn, torch.ops.alcop), torch_fn,
            functools.partial(fn, autograd.GRAD))


def matmul(input: Tensor, other: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``torch.matmul``: 1-D operands promoted and squeezed, batch dims broadcast, any strides.

    A batched ``input`` times a matrix folds the batch into the rows (one 2-D GEMM); otherwise the
    batch dims broadcast (stride-0 views where they can) and run as one batched GEMM.
    """
    if out is None:
        return fast.call("matmul", (input, other), (), *_MATMUL)
    return _matmul(torch.ops.alcop, input, other, out)


def _matmul(alcop: Any, input: Tensor, other: Tensor, out: Tensor | None = None) -> Tensor:
    op = "matmul"
    _need_tensor(op, "input", input)
    _need_tensor(op, "other", other)
    if _foreign(op, ("input", "other"), input, other):
        return torch.matmul(input, other, out=out)
    if input.dim() == 0 or other.dim() == 0:
        raise RuntimeError(f"matmul(): both arguments need to be at least 1-D, but input is {input.dim()}-D and "
                           f"other is {other.dim()}-D")
    custom_ops.check_same(op, ("input", "other"), (input, other))
    a = input.unsqueeze(0) if input.dim() == 1 else input
    b = other.unsqueeze(-1) if other.dim() == 1 else other
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"matmul(): input.shape={_shape(input)} and other.shape={_shape(other)} cannot be "
                           f"multiplied: input's last dim ({a.shape[-1]}) must equal other's "
                           f"{'only' if other.dim() == 1 else 'second to last'} dim ({b.shape[-2]})")
    batch = _broadcast(_shape(a)[:-2], _shape(b)[:-2])
    if batch is None:
        raise RuntimeError(f"matmul(): the batch dims of input.shape={_shape(input)} and other.shape="
                           f"{_shape(other)} do not broadcast ({_shape(a)[:-2]} vs {_shape(b)[:-2]})")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    shape = batch + ((m,) if input.dim() > 1 else ()) + ((n,) if other.dim() > 1 else ())
    if _falls_back(op, input, other):
        return torch.matmul(input, other, out=out)
    if b.dim() == 2:
        a2, b2 = (a if a.dim() == 2 else a.reshape(math.prod(_shape(a)[:-1]), k)), b
    elif _two_batch_dims_in_place(a, b):
        a2, b2 = a, b
    else:
        a2, b2 = fast.prepare(_fold_batch, a, b)
    return _gemm(alcop, op, a2, b2, None, None, None, 1.0, 1.0, shape, out, (input, other))


def _two_batch_dims_in_place(a: Tensor, b: Tensor) -> bool:
    """Whether the kernel should read 4-D operands with the same two batch dims as they are: when
    folding the batch dims into one would copy an operand (attention's heads permuted ahead of the
    sequence: (batch, heads, seq, dim) views of (batch, seq, heads, dim) storage). The kernel takes
    both batch strides, so nothing is copied; torch.matmul copies such operands before its bmm."""
    if a.dim() != 4 or b.dim() != 4 or a.shape[:2] != b.shape[:2]:
        return False
    if a.shape[0] * a.shape[1] > custom_ops.CUDA_GRID_Y:
        return False
    return not (_batch_dims_merge(a) and _batch_dims_merge(b))


def _batch_dims_merge(t: Tensor) -> bool:
    """Whether ``t``'s first two dims view as one (``view``'s rule, read from the strides: trying the view
    raises RuntimeError on tensors and ValueError on the fake tensors ``torch.compile`` traces with)."""
    return t.shape[0] == 1 or t.shape[1] == 1 or t.stride(0) == t.stride(1) * t.shape[1]


def _fold_batch(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``a`` (..., m, k) and ``b`` (..., k, n) broadcast over their batch dims and folded into one:
    (nb, m, k) and (nb, k, n). Views where the strides allow; otherwise torch copies (e.g. heads
    permuted ahead of the sequence), and the fast path repeats that copy on later calls."""
    batch = _broadcast(_shape(a)[:-2], _shape(b)[:-2])
    assert batch is not None  # checked by the caller
    nb = math.prod(batch)
    return (a.expand(*batch, *a.shape[-2:]).reshape(nb, *a.shape[-2:]),
            b.expand(*batch, *b.shape[-2:]).reshape(nb, *b.shape[-2:]))


_MATMUL = _routes(_matmul, torch.matmul)


def _check_matrices(op: str, names: tuple[str, str], a: Any, b: Any, ndim: int) -> None:
    for name, t in zip(names, (a, b)):
        _need_tensor(op, name, t)
    for name, t in zip(names, (a, b)):
        if t.dim() != ndim:
            raise RuntimeError(f"{op}(): {name} must be a {ndim}-D tensor "
                               f"({'matrix' if ndim == 2 else 'batch of matrices'}), got {name}.shape={_shape(t)}")
    custom_ops.check_same(op, names, (a, b))
    if ndim == 3 and a.shape[0] != b.shape[0]:
        raise RuntimeError(f"{op}(): {names[0]}.shape={_shape(a)} and {names[1]}.shape={_shape(b)} have different "
                           f"batch sizes ({a.shape[0]} vs {b.shape[0]}); {op} does not broadcast (matmul does)")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"{op}(): {names[0]}.shape={_shape(a)} and {names[1]}.shape={_shape(b)} cannot be "
                           f"multiplied: {names[0]}'s last dim ({a.shape[-1]}) must equal {names[1]}'s second to "
                           f"last ({b.shape[-2]})")


def mm(input: Tensor, mat2: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``torch.mm``: (n, m) @ (m, p), any strides (a transposed operand is a strided view)."""
    if out is None:
        return fast.call("mm", (input, mat2), (), *_MM)
    return _mm(torch.ops.alcop, input, mat2, out)


def _mm(alcop: Any, input: Tensor, mat2: Tensor, out: Tensor | None = None) -> Tensor:
    if _foreign("mm", ("input", "mat2"), input, mat2):
        return torch.mm(input, mat2, out=out)
    _check_matrices("mm", ("input", "mat2"), input, mat2, 2)
    if _falls_back("mm", input, mat2):
        return torch.mm(input, mat2, out=out)
    shape = (input.shape[0], mat2.shape[1])
    return _gemm(alcop, "mm", input, mat2, None, None, None, 1.0, 1.0, shape, out, (input, mat2))


def bmm(input: Tensor, mat2: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``torch.bmm``: (b, n, m) @ (b, m, p) with equal batch sizes (torch's bmm does not broadcast)."""
    if out is None:
        return fast.call("bmm", (input, mat2), (), *_BMM)
    return _bmm(torch.ops.alcop, input, mat2, out)


def _bmm(alcop: Any, input: Tensor, mat2: Tensor, out: Tensor | None = None) -> Tensor:
    if _foreign("bmm", ("input", "mat2"), input, mat2):
        return torch.bmm(input, mat2, out=out)
    _check_matrices("bmm", ("input", "mat2"), input, mat2, 3)
    if _falls_back("bmm", input, mat2):
        return torch.bmm(input, mat2, out=out)
    shape = (input.shape[0], input.shape[1], mat2.shape[2])
    return _gemm(alcop, "bmm", input, mat2, None, None, None, 1.0, 1.0, shape, out, (input, mat2))


_MM, _BMM = _routes(_mm, torch.mm), _routes(_bmm, torch.bmm)


def _add_product(alcop: Any, op: str, input: Tensor, m1: Tensor, m2: Tensor, beta: float, alpha: float,
                 out: Tensor | None, ndim: int, torch_fn: Callable[..., Tensor]) -> Tensor:
    names = ("mat1", "mat2") if ndim == 2 else ("batch1", "batch2")
    argcheck.parse_numbers(op, beta=beta, alpha=alpha)
    _need_tensor(op, "input", input)
    if _foreign(op, ("input",) + names, input, m1, m2):
        return torch_fn(input, m1, m2, beta=beta, alpha=alpha, out=out)
    _check_matrices(op, names, m1, m2, ndim)
    custom_ops.check_same(op, ("input", names[0]), (input, m1))
    shape = _shape(m1)[:-1] + (m2.shape[-1],)
    residual = _broadcast_to(op, "input", input, shape)
    if _falls_back(op, input, m1, m2):
        return torch_fn(input, m1, m2, beta=beta, alpha=alpha, out=out)
    empty = math.prod(shape) == 0  # torch returns an empty result without reading the scalars' values
    if not empty:
        beta, alpha = argcheck.number(op, "beta", beta, m1.dtype), argcheck.number(op, "alpha", alpha, m1.dtype)
    if empty or alpha == 0:  # torch ignores the product when alpha is 0 (NaN or inf in it does not propagate)
        y = residual * beta if not empty and beta != 0 else m1.new_zeros(shape)
        if out is None:
            return y
        _check_out(op, out, m1, (input, m1, m2))
        _resize_out(out, shape)
        return out.copy_(y)
    # beta == 0 ignores input entirely (NaN in it does not propagate), as torch specifies.
    return _gemm(alcop, op, m1, m2, None, residual if beta != 0 else None, None, alpha, beta, shape, out,
                 (input, m1, m2))


def _addmm(alcop: Any, input: Tensor, mat1: Tensor, mat2: Tensor, beta: float, alpha: float) -> Tensor:
    return _add_product(alcop, "addmm", input, mat1, mat2, beta, alpha, None, 2, torch.addmm)


def _baddbmm(alcop: Any, input: Tensor, batch1: Tensor, batch2: Tensor, beta: float, alpha: float) -> Tensor:
    return _add_product(alcop, "baddbmm", input, batch1, batch2, beta, alpha, None, 3, torch.baddbmm)


# torch's own functions, taken before patch mode can wrap them (as ``_F_LINEAR`` below)
_TORCH_ADDMM, _TORCH_BADDBMM = torch.addmm, torch.baddbmm
_ADDMM = _routes(_addmm, lambda input, m1, m2, beta, alpha: _TORCH_ADDMM(input, m1, m2, beta=beta, alpha=alpha))
_BADDBMM = _routes(_baddbmm, lambda input, b1, b2, beta, alpha: _TORCH_BADDBMM(input, b1, b2, beta=beta, alpha=alpha))
_SCALARS = (int, float, bool)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1,
          out: Tensor | None = None) -> Tensor:
    """``torch.addmm``: ``beta * input + alpha * (mat1 @ mat2)``, fused into the GEMM's store."""
    if out is None and type(beta) in _SCALARS and type(alpha) in _SCALARS:
        return fast.call("addmm", (input, mat1, mat2), (beta, alpha), *_ADDMM)
    return _add_product(torch.ops.alcop, "addmm", input, mat1, mat2, beta, alpha, out, 2, torch.addmm)


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1,
            out: Tensor | None = None) -> Tensor:
    """``torch.baddbmm``: ``beta * input + alpha * (batch1 @ batch2)`` (e.g. scaled attention scores)."""
    if out is None and type(beta) in _SCALARS and type(alpha) in _SCALARS:
        return fast.call("baddbmm", (input, batch1, batch2), (beta, alpha), *_BADDBMM)
    return _add_product(torch.ops.alcop, "baddbmm", input, batch1, batch2, beta, alpha, out, 3, torch.baddbmm)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None, *, activation: str | None = None,
           residual: Tensor | None = None) -> Tensor:
    """``F.linear`` (``input @ weight.T + bias``), optionally ``activation(...) + residual``, fused.

    ``activation`` is one of relu, gelu (exact, as ``F.gelu``), silu, tanh, sigmoid; ``residual``
    broadcasts to the output. A 1-D weight gives a matrix-vector product, as in torch.
    """
    if activation is None or type(activation) is str:
        return fast.call("linear", (input, weight, bias, residual), (activation,), *_LINEAR)
    return _linear(torch.ops.alcop, input, weight, bias, residual, activation)


def _linear(alcop: Any, input: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor | None,
            activation: str | None) -> Tensor:
    op = "linear"
    _need_tensor(op, "input", input)
    _need_tensor(op, "weight", weight)
    for name, t in (("bias", bias), ("residual", residual)):
        if t is not None:
            _need_tensor(op, name, t)
    custom_ops.check_activation(op, activation)
    if _foreign(op, ("input", "weight", "bias", "residual"), input, weight, bias, residual):
        return _torch_linear(input, weight, bias, residual, activation)
    if input.dim() == 0 or weight.dim() == 0:
        raise RuntimeError(f"linear(): both arguments to linear need to be at least 1-D, but input is "
                           f"{input.dim()}-D and weight is {weight.dim()}-D")
    if weight.dim() > 2:
        raise RuntimeError(f"linear(): weight must be 2-D (out_features, in_features) or 1-D (in_features,), got "
                           f"weight.shape={_shape(weight)}")
    custom_ops.check_same(op, ("input", "weight", "bias", "residual"), (input, weight, bias, residual))
    custom_ops.check_activation(op, activation)
    if weight.dim() == 1:
        if bias is not None:
            raise RuntimeError(f"linear(): a 1-D weight {_shape(weight)} gives a matrix-vector product, which takes "
                               f"no bias (got bias.shape={_shape(bias)}); torch requires a 2-D weight with a bias")
        res = residual.unsqueeze(-1) if residual is not None else None
        return linear(input, weight.unsqueeze(0), activation=activation, residual=res).squeeze(-1)
    if input.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"linear(): input.shape={_shape(input)} and weight.shape={_shape(weight)}: input's last "
                           f"dim ({input.shape[-1]}) must equal in_features = weight.shape[1] ({weight.shape[1]})")
    shape = _shape(input)[:-1] + (weight.shape[0],)
    if bias is not None and bias.dim() > 1 and all(s == 1 for s in bias.shape[:-1]):
        bias = bias.reshape(bias.shape[-1:])  # (1, ..., out_features) is a per-column bias
    if bias is not None and bias.dim() > 1:
        bias_full = _broadcast_to(op, "bias", bias, shape)
        if activation is not None:
            # It goes before the activation, where the kernel's epilogue takes one bias per column: the
            # product is alcop's, the bias, the activation and the residual torch's (as F.linear then
            # the activation would compute them).
            y = fallback.TORCH_ACTIVATIONS[activation](alcop.linear(input, weight, None, None, None) + bias_full)
            return y if residual is None else y + _broadcast_to(op, "residual", residual, shape)
        # A bias that varies along rows is an addend after the product: it joins the residual.
        residual = bias_full if residual is None else bias_full + _broadcast_to(op, "residual", residual, shape)
        bias = None
    elif bias is not None:
        bias = _broadcast_to(op, "bias", bias, (weight.shape[0],))
    if residual is not None:
        residual = _broadcast_to(op, "residual", residual, shape)
    if _falls_back(op, input, weight, bias, residual):
        return _torch_linear(input, weight, bias, residual, activation)
    return alcop.linear(input, weight, bias, residual, activation)


# torch's own functions, taken before patch mode can wrap them: a workload patch mode leaves to torch
# then calls them directly, not through its wrapper a second time.
_F_LINEAR, _F_CONV = F.linear, (F.conv1d, F.conv2d, F.conv3d)


def _torch_linear(input: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor | None,
                  activation: str | None) -> Tensor:
    y = _F_LINEAR(input, weight, bias)
    y = fallback.TORCH_ACTIVATIONS[activation](y) if activation else y
    return y + residual if residual is not None else y


_LINEAR = _routes(_linear, _torch_linear)


# ----------------------------------------------------------------------------- convolutions

def _ints(op: str, name: str, v: Any, nd: int, low: int) -> tuple[int, ...]:
    """An int or a sequence of 1 or nd ints, each >= low (torch's rules and exception types)."""
    # numpy ints and one-element integer tensors count, as in torch; a sequence is never an index
    # (asking operator.index first would raise inside torch.compile's tracing on torch 2.11)
    items = tuple(map(argcheck.index, v)) if isinstance(v, (tuple, list)) else (argcheck.index(v),)
    if items is None or any(x is None for x in items):
        raise TypeError(f"{op}(): argument '{name}' must be an int or a tuple of {nd} ints, got {v!r}")
    vals = tuple(x for x in items if x is not None)
    if len(vals) == 1:
        vals = vals * nd
    if len(vals) != nd:
        raise RuntimeError(f"{op}(): expected {name} to be a single integer value or a list of {nd} values to match "
                           f"the convolution dimensions, but got {name}={list(vals)}")
    if any(x < low for x in vals):
        kind = "negative" if low == 0 else "non-positive"
        raise RuntimeError(f"{op}(): {kind} {name} is not supported: {name}={list(vals)} (each must be >= {low})")
    return vals


def _conv_call(nd: int, input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
               dilation: Any, groups: Any, activation: str | None) -> Tensor:
    params = (nd, _hashable(stride), _hashable(padding), _hashable(dilation), _hashable(groups), _hashable(activation))
    for p in params:  # a loop, not a generator (see _hashable)
        if p is _UNHASHABLE:  # a parameter the signature cannot hold: the checks judge it
            return _conv(torch.ops.alcop, input, weight, bias, nd, stride, padding, dilation, groups, activation)
    return fast.call("conv", (input, weight, bias), params, *_CONV)


_UNHASHABLE = object()


def _hashable(v: Any) -> Any:
    """``v`` as a plain signature component (a list becomes a tuple), ``_UNHASHABLE`` for anything
    but ints, strings, None and sequences of ints (e.g. tensors: their value is not their hash)."""
    # Loops, not generators: every convolution call runs this, and a generator costs about a
    # microsecond on a call that finds the CPU's caches cold.
    kind = type(v)
    if v is None or kind is int or kind is str:
        return v
    if kind is not tuple and kind is not list:
        return _UNHASHABLE
    for x in v:
        if type(x) is not int:
            return _UNHASHABLE
    return v if kind is tuple else tuple(v)


def _conv(alcop: Any, input: Tensor, weight: Tensor, bias: Tensor | None, nd: int, stride: Any, padding: Any,
          dilation: Any, groups: Any, activation: str | None) -> Tensor:
    op = f"conv{nd}d"
    _need_tensor(op, "input", input)
    _need_tensor(op, "weight", weight)
    if bias is not None:
        _need_tensor(op, "bias", bias)
    custom_ops.check_activation(op, activation)
    if _foreign(op, ("input", "weight", "bias"), input, weight, bias):
        return _torch_conv(input, weight, bias, nd, stride, padding, dilation, groups, activation)
    # Arguments of the wrong type fail before any shape check, as in torch's argument parser.
    strides = _ints(op, "stride", stride, nd, 1)
    dilations = _ints(op, "dilation", dilation, nd, 1)
    g = argcheck.index(groups)
    if g is None:
        raise TypeError(f"{op}(): argument 'groups' must be int, not {type(groups).__name__}")
    groups = g
    if groups < 1:
        raise RuntimeError(f"{op}(): non-positive groups is not supported: groups={groups}")
    pads = None if isinstance(padding, str) else _ints(op, "padding", padding, nd, 0)
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {op}, but got input of "
                           f"size: {list(input.shape)}")
    if weight.dim() != nd + 2:
        raise RuntimeError(f"{op}(): weight must be {nd + 2}-D (out_channels, in_channels / groups, *kernel), got "
                           f"weight.shape={_shape(weight)}")
    batched = input.dim() == nd + 2
    x = input if batched else input.unsqueeze(0)
    if weight.shape[0] == 0:
        raise RuntimeError(f"{op}(): Given groups={groups}, expected weight to be at least 1 at dimension 0, but got "
                           f"weight of size {list(weight.shape)} instead")
    if weight.shape[0] % groups:
        raise RuntimeError(f"{op}(): groups={groups} must divide out_channels = weight.shape[0] = {weight.shape[0]}")
    if x.shape[1] != weight.shape[1] * groups:
        raise RuntimeError(f"{op}(): Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {weight.shape[1] * groups} channels "
                           f"(weight.shape[1] * groups), but got {x.shape[1]} channels instead")
    if bias is not None and _shape(bias) != (weight.shape[0],):
        raise RuntimeError(f"{op}(): bias.shape={_shape(bias)}, expected ({weight.shape[0]},): one per out channel")
    custom_ops.check_same(op, ("input", "weight", "bias"), (input, weight, bias))
    ks = _shape(weight)[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pad_left = pad_right = (0,) * nd
        elif padding == "same":
            if any(s != 1 for s in strides):
                raise RuntimeError(f"{op}(): padding='same' is not supported for strided convolutions "
                                   f"(stride={list(strides)})")
            total = [dilations[i] * (ks[i] - 1) for i in range(nd)]
            pad_left = tuple(t // 2 for t in total)  # torch puts the odd element of padding on the right
            pad_right = tuple(t - t // 2 for t in total)
        else:
            raise RuntimeError(f"{op}(): Invalid padding string: {padding!r}; expected 'same', 'valid' or ints")
    else:
        assert pads is not None
        pad_left = pad_right = pads
    for i in range(nd):
        if x.shape[2 + i] + pad_left[i] + pad_right[i] < dilations[i] * (ks[i] - 1) + 1:
            raise RuntimeError(f"{op}(): Calculated padded input size per channel: "
                               f"{[x.shape[2 + j] + pad_left[j] + pad_right[j] for j in range(nd)]}. Kernel size: "
                               f"{list(ks)} (dilation {list(dilations)}). Kernel size can't be greater than actual "
                               "input size")
    custom_ops.check_activation(op, activation)
    if _falls_back(op, input, weight, bias):
        return _torch_conv(input, weight, bias, nd, stride, padding, dilation, groups, activation)
    y = alcop.conv(x, weight, bias, strides, pad_left, pad_right, dilations, groups, activation)
    return y if batched else y.squeeze(0)


def _torch_conv(input: Tensor, weight: Tensor, bias: Tensor | None, nd: int, stride: Any, padding: Any, dilation: Any,
                groups: Any, activation: str | None) -> Tensor:
    y = _F_CONV[nd - 1](input, weight, bias, stride, padding, dilation, groups)
    return fallback.TORCH_ACTIVATIONS[activation](y) if activation else y


_CONV = _routes(_conv, _torch_conv)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, activation: str | None = None) -> Tensor:
    """``F.conv1d`` as implicit GEMM; ``activation`` fuses into the store."""
    return _conv_call(1, input, weight, bias, stride, padding, dilation, groups, activation)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, activation: str | None = None) -> Tensor:
    """``F.conv2d`` as implicit GEMM (NCHW or channels_last, groups incl. depthwise); ``activation`` fuses."""
    return _conv_call(2, input, weight, bias, stride, padding, dilation, groups, activation)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, activation: str | None = None) -> Tensor:
    """``F.conv3d`` as implicit GEMM; ``activation`` fuses into the store."""
    return _conv_call(3, input, weight, bias, stride, padding, dilation, groups, activation)
