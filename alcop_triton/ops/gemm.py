"""The GEMM family: ``matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm`` and ``linear``, from torch's arguments
to alcop's kernel, in the order a call meets them:

1. the drop-ins and their front ends (``_matmul``...): torch's argument checks and semantics (broadcasting,
   1-D promotion and squeezing, ``out=``), then the GEMM through an op namespace (``_gemm``);
2. the registered ops ``torch.ops.alcop.{mm,bmm,gemm,gemm_out,linear}``: their checks, fakes and
   implementations (``_mm_kernel``...);
3. ``run_gemm``: fallback to torch, operand alignment, the config, the kernel and its launch;
4. the autograd formulas (dA = dZ @ B^T, dB = A^T @ dZ on transposed views, no copies);
5. what a call traced with routing on becomes: the deciding ops ``torch.ops.alcop.routed_*`` (``ops.traced``);
6. the op namespaces and the routes ``route.call`` takes (``DIRECT``, ``AUTOGRAD``, ``ROUTED``, ``MATMUL``...).

Invalid arguments raise the exception type torch raises, with a message naming the argument, its value
and the rule; inputs alcop does not run go to torch (``fallback``).
"""

from __future__ import annotations

import math
import types
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from .. import fallback, fastpath
from .. import choose_config
from ..fallback import TORCH_ACTIVATIONS, vjp_fn
from ..kernels import matmul as kmatmul
from ..records import Workload, dtype_name
from . import checks, route, traced
from .checks import (CUDA_GRID_Y, broadcast, broadcast_to, check_activation, check_out, check_same, need_tensor,
                     resize_out, shape_of, shares_memory)
from .route import OpRoutes

Tensor = torch.Tensor


# ----------------------------------------------------------------------------- 1. drop-ins and front ends

def _gemm(alcop: Any, op: str, a: Tensor, b: Tensor, bias: Tensor | None, residual: Tensor | None,
          activation: str | None, alpha: float, beta: float, shape: tuple[int, ...], out: Tensor | None,
          inputs: Sequence[Tensor]) -> Tensor:
    """Run the 2-D/3-D GEMM ``a @ b`` (+ epilogue) through ``alcop``, an op namespace (``DIRECT``, ``torch.ops.alcop``
    or ``AUTOGRAD``: the route ``route.call`` chose), and give it ``shape``."""
    plain = bias is None and residual is None and activation is None and alpha == 1.0
    if out is None:
        if plain:
            y = alcop.mm(a, b) if a.dim() == 2 else alcop.bmm(a, b)
        else:
            y = alcop.gemm(a, b, bias, residual, activation, float(alpha), float(beta))
        # No view of a result already in shape: on the autograd route a view would be one more node,
        # and the kernel's own output is what the fast path stores a repeat of (fastpath.GradEntry).
        return y if y.shape == shape else y.view(shape)
    check_out(op, out, a, inputs)
    resize_out(out, shape)
    gemm_shape = shape_of(a)[:-1] + (b.shape[-1],)
    try:
        view = out.view(gemm_shape)
    except RuntimeError:  # strides that cannot hold the GEMM's (batch, M, N) view: compute, then copy
        view = None
    if view is None or any(shares_memory(out, t) for t in (a, b, bias, residual)):
        out.copy_(alcop.gemm(a, b, bias, residual, activation, float(alpha), float(beta)).view(shape))
    else:
        alcop.gemm_out(a, b, bias, residual, activation, float(alpha), float(beta), view)
    return out


def matmul(input: Tensor, other: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``torch.matmul``: 1-D operands promoted and squeezed, batch dims broadcast, any strides.

    A batched ``input`` times a matrix folds the batch into the rows (one 2-D GEMM); otherwise the
    batch dims broadcast (stride-0 views where they can) and run as one batched GEMM.
    """
    if out is None:
        return route.call("matmul", (input, other), (), MATMUL)
    return _matmul(torch.ops.alcop, input, other, out)


def _matmul(alcop: Any, input: Tensor, other: Tensor, out: Tensor | None = None) -> Tensor:
    op = "matmul"
    need_tensor(op, "input", input)
    need_tensor(op, "other", other)
    if fallback.not_plain(op, ("input", "other"), input, other):
        return torch.matmul(input, other, out=out)
    if input.dim() == 0 or other.dim() == 0:
        raise RuntimeError(f"matmul(): both arguments need to be at least 1-D, but input is {input.dim()}-D and "
                           f"other is {other.dim()}-D")
    check_same(op, ("input", "other"), (input, other))
    a = input.unsqueeze(0) if input.dim() == 1 else input
    b = other.unsqueeze(-1) if other.dim() == 1 else other
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"matmul(): input.shape={shape_of(input)} and other.shape={shape_of(other)} cannot be "
                           f"multiplied: input's last dim ({a.shape[-1]}) must equal other's "
                           f"{'only' if other.dim() == 1 else 'second to last'} dim ({b.shape[-2]})")
    batch = broadcast(shape_of(a)[:-2], shape_of(b)[:-2])
    if batch is None:
        raise RuntimeError(f"matmul(): the batch dims of input.shape={shape_of(input)} and other.shape="
                           f"{shape_of(other)} do not broadcast ({shape_of(a)[:-2]} vs {shape_of(b)[:-2]})")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    shape = batch + ((m,) if input.dim() > 1 else ()) + ((n,) if other.dim() > 1 else ())
    if fallback.falls_back(op, input, other) or (out is not None and _torch_refuses_folded_out(input, other, out)):
        return torch.matmul(input, other, out=out)
    if b.dim() == 2:
        a2, b2 = (a if a.dim() == 2 else a.reshape(math.prod(shape_of(a)[:-1]), k)), b
    elif _two_batch_dims_in_place(a, b):
        a2, b2 = a, b
    else:
        a2, b2 = fastpath.prepare(_fold_batch, a, b)
    return _gemm(alcop, op, a2, b2, None, None, None, 1.0, 1.0, shape, out, (input, other))


def _torch_refuses_folded_out(input: Tensor, other: Tensor, out: Tensor) -> bool:
    """Whether torch.matmul raises for this ``out=``: where it folds the batch dims of a >= 3-D input into
    the rows of one product (``other`` 1-D or 2-D), it writes through ``out`` viewed the same way, and an
    ``out`` that cannot be so viewed (a transposed one) is a RuntimeError there. torch then gives the error."""
    if input.dim() < 3 or other.dim() > 2:
        return False
    if tuple(out.shape) != tuple(input.shape[:-1]) + tuple(other.shape[-1:] if other.dim() == 2 else ()):
        return False  # torch resizes such an out first; the drop-in does as torch does
    try:
        out.view(-1, other.shape[-1]) if other.dim() == 2 else out.view(-1)
    except RuntimeError:
        return True
    return False


def _two_batch_dims_in_place(a: Tensor, b: Tensor) -> bool:
    """Whether the kernel should read 4-D operands with the same two batch dims as they are: when
    folding the batch dims into one would copy an operand (attention's heads permuted ahead of the
    sequence: (batch, heads, seq, dim) views of (batch, seq, heads, dim) storage). The kernel takes
    both batch strides, so nothing is copied; torch.matmul copies such operands before its bmm."""
    if a.dim() != 4 or b.dim() != 4 or a.shape[:2] != b.shape[:2]:
        return False
    if a.shape[0] * a.shape[1] > CUDA_GRID_Y:
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
    batch = broadcast(shape_of(a)[:-2], shape_of(b)[:-2])
    assert batch is not None  # checked by the caller
    nb = math.prod(batch)
    return (a.expand(*batch, *a.shape[-2:]).reshape(nb, *a.shape[-2:]),
            b.expand(*batch, *b.shape[-2:]).reshape(nb, *b.shape[-2:]))


def _check_matrices(op: str, names: tuple[str, str], a: Any, b: Any, ndim: int) -> None:
    for name, t in zip(names, (a, b)):
        need_tensor(op, name, t)
    for name, t in zip(names, (a, b)):
        if t.dim() != ndim:
            raise RuntimeError(f"{op}(): {name} must be a {ndim}-D tensor "
                               f"({'matrix' if ndim == 2 else 'batch of matrices'}), got {name}.shape={shape_of(t)}")
    check_same(op, names, (a, b))
    if ndim == 3 and a.shape[0] != b.shape[0]:
        raise RuntimeError(f"{op}(): {names[0]}.shape={shape_of(a)} and {names[1]}.shape={shape_of(b)} have different "
                           f"batch sizes ({a.shape[0]} vs {b.shape[0]}); {op} does not broadcast (matmul does)")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"{op}(): {names[0]}.shape={shape_of(a)} and {names[1]}.shape={shape_of(b)} cannot be "
                           f"multiplied: {names[0]}'s last dim ({a.shape[-1]}) must equal {names[1]}'s second to "
                           f"last ({b.shape[-2]})")


def mm(input: Tensor, mat2: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``torch.mm``: (n, m) @ (m, p), any strides (a transposed operand is a strided view)."""
    if out is None:
        return route.call("mm", (input, mat2), (), MM)
    return _mm(torch.ops.alcop, input, mat2, out)


def _mm(alcop: Any, input: Tensor, mat2: Tensor, out: Tensor | None = None) -> Tensor:
    if fallback.not_plain("mm", ("input", "mat2"), input, mat2):
        return torch.mm(input, mat2, out=out)
    _check_matrices("mm", ("input", "mat2"), input, mat2, 2)
    if fallback.falls_back("mm", input, mat2):
        return torch.mm(input, mat2, out=out)
    shape = (input.shape[0], mat2.shape[1])
    return _gemm(alcop, "mm", input, mat2, None, None, None, 1.0, 1.0, shape, out, (input, mat2))


def bmm(input: Tensor, mat2: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``torch.bmm``: (b, n, m) @ (b, m, p) with equal batch sizes (torch's bmm does not broadcast)."""
    if out is None:
        return route.call("bmm", (input, mat2), (), BMM)
    return _bmm(torch.ops.alcop, input, mat2, out)


def _bmm(alcop: Any, input: Tensor, mat2: Tensor, out: Tensor | None = None) -> Tensor:
    if fallback.not_plain("bmm", ("input", "mat2"), input, mat2):
        return torch.bmm(input, mat2, out=out)
    _check_matrices("bmm", ("input", "mat2"), input, mat2, 3)
    if fallback.falls_back("bmm", input, mat2):
        return torch.bmm(input, mat2, out=out)
    shape = (input.shape[0], input.shape[1], mat2.shape[2])
    return _gemm(alcop, "bmm", input, mat2, None, None, None, 1.0, 1.0, shape, out, (input, mat2))


def _add_product(alcop: Any, op: str, input: Tensor, m1: Tensor, m2: Tensor, beta: float, alpha: float,
                 out: Tensor | None, ndim: int, torch_fn: Callable[..., Tensor]) -> Tensor:
    names = ("mat1", "mat2") if ndim == 2 else ("batch1", "batch2")
    checks.parse_numbers(op, beta=beta, alpha=alpha)
    need_tensor(op, "input", input)
    if fallback.not_plain(op, ("input",) + names, input, m1, m2):
        return torch_fn(input, m1, m2, beta=beta, alpha=alpha, out=out)
    _check_matrices(op, names, m1, m2, ndim)
    shape = shape_of(m1)[:-1] + (m2.shape[-1],)
    try:
        check_same(op, ("input", names[0]), (input, m1))
        residual = broadcast_to(op, "input", input, shape)
    except RuntimeError as refusal:  # torch's CUDA addmm with beta=0 reads no input: torch decides
        return fallback.torch_decides(op, refusal, lambda: torch_fn(input, m1, m2, beta=beta, alpha=alpha, out=out))
    if fallback.falls_back(op, input, m1, m2):
        return torch_fn(input, m1, m2, beta=beta, alpha=alpha, out=out)
    empty = math.prod(shape) == 0  # torch returns an empty result without reading the scalars' values
    if not empty:
        beta, alpha = checks.number(op, "beta", beta, m1.dtype), checks.number(op, "alpha", alpha, m1.dtype)
    if beta == 0 and input.requires_grad and torch.is_grad_enabled():
        # torch's result then requires grad and input's gradient is zeros; alcop's kernel never reads input
        fallback.use_torch(op, "beta=0 with an input that requires grad (torch gives it a zero gradient)")
        return torch_fn(input, m1, m2, beta=beta, alpha=alpha, out=out)
    if empty or alpha == 0:  # torch ignores the product when alpha is 0 (NaN or inf in it does not propagate)
        y = residual * beta if not empty and beta != 0 else m1.new_zeros(shape)
        if out is None:
            return y
        check_out(op, out, m1, (input, m1, m2))
        resize_out(out, shape)
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
_SCALARS = (int, float, bool)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1,
          out: Tensor | None = None) -> Tensor:
    """``torch.addmm``: ``beta * input + alpha * (mat1 @ mat2)``, fused into the GEMM's store."""
    if out is None and type(beta) in _SCALARS and type(alpha) in _SCALARS:
        return route.call("addmm", (input, mat1, mat2), (beta, alpha), ADDMM)
    return _add_product(torch.ops.alcop, "addmm", input, mat1, mat2, beta, alpha, out, 2, torch.addmm)


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1,
            out: Tensor | None = None) -> Tensor:
    """``torch.baddbmm``: ``beta * input + alpha * (batch1 @ batch2)`` (e.g. scaled attention scores)."""
    if out is None and type(beta) in _SCALARS and type(alpha) in _SCALARS:
        return route.call("baddbmm", (input, batch1, batch2), (beta, alpha), BADDBMM)
    return _add_product(torch.ops.alcop, "baddbmm", input, batch1, batch2, beta, alpha, out, 3, torch.baddbmm)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None, *, activation: str | None = None,
           residual: Tensor | None = None) -> Tensor:
    """``F.linear`` (``input @ weight.T + bias``), optionally ``activation(...) + residual``, fused.

    ``activation`` is one of relu, gelu (exact, as ``F.gelu``), silu, tanh, sigmoid; ``residual``
    broadcasts to the output. A 1-D weight gives a matrix-vector product, as in torch.
    """
    if activation is None or type(activation) is str:
        return route.call("linear", (input, weight, bias, residual), (activation,), LINEAR)
    return _linear(torch.ops.alcop, input, weight, bias, residual, activation)


def _linear(alcop: Any, input: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor | None,
            activation: str | None) -> Tensor:
    op = "linear"
    need_tensor(op, "input", input)
    need_tensor(op, "weight", weight)
    for name, t in (("bias", bias), ("residual", residual)):
        if t is not None:
            need_tensor(op, name, t)
    check_activation(op, activation)
    if fallback.not_plain(op, ("input", "weight", "bias", "residual"), input, weight, bias, residual):
        return _torch_linear(input, weight, bias, residual, activation)
    if input.dim() == 0 or weight.dim() == 0:
        raise RuntimeError(f"linear(): both arguments to linear need to be at least 1-D, but input is "
                           f"{input.dim()}-D and weight is {weight.dim()}-D")
    if weight.dim() > 2:
        raise RuntimeError(f"linear(): weight must be 2-D (out_features, in_features) or 1-D (in_features,), got "
                           f"weight.shape={shape_of(weight)}")
    try:
        check_same(op, ("input", "weight", "bias", "residual"), (input, weight, bias, residual))
    except RuntimeError as refusal:  # torch's CUDA linear adds a bias of another dtype: torch decides
        return fallback.torch_decides(op, refusal, lambda: _torch_linear(input, weight, bias, residual, activation))
    if weight.dim() == 1:
        if bias is not None:
            raise RuntimeError(f"linear(): a 1-D weight {shape_of(weight)} gives a matrix-vector product, which takes "
                               f"no bias (got bias.shape={shape_of(bias)}); torch requires a 2-D weight with a bias")
        res = residual.unsqueeze(-1) if residual is not None else None
        return linear(input, weight.unsqueeze(0), activation=activation, residual=res).squeeze(-1)
    if input.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"linear(): input.shape={shape_of(input)} and weight.shape={shape_of(weight)}: input's last "
                           f"dim ({input.shape[-1]}) must equal in_features = weight.shape[1] ({weight.shape[1]})")
    shape = shape_of(input)[:-1] + (weight.shape[0],)
    if bias is not None and bias.dim() > 1 and all(s == 1 for s in bias.shape[:-1]):
        bias = bias.reshape(bias.shape[-1:])  # (1, ..., out_features) is a per-column bias
    if bias is not None and bias.dim() > 1:
        bias_full = broadcast_to(op, "bias", bias, shape)
        if activation is not None:
            # It goes before the activation, where the kernel's epilogue takes one bias per column: the
            # product is alcop's, the bias, the activation and the residual torch's (as F.linear then
            # the activation would compute them).
            y = TORCH_ACTIVATIONS[activation](alcop.linear(input, weight, None, None, None) + bias_full)
            return y if residual is None else y + broadcast_to(op, "residual", residual, shape)
        # A bias that varies along rows is an addend after the product: it joins the residual.
        residual = bias_full if residual is None else bias_full + broadcast_to(op, "residual", residual, shape)
        bias = None
    elif bias is not None:
        bias = broadcast_to(op, "bias", bias, (weight.shape[0],))
    if residual is not None:
        residual = broadcast_to(op, "residual", residual, shape)
    if fallback.falls_back(op, input, weight, bias, residual):
        return _torch_linear(input, weight, bias, residual, activation)
    return alcop.linear(input, weight, bias, residual, activation)


# torch's own function, taken before patch mode can wrap it: a workload patch mode leaves to torch
# then calls it directly, not through its wrapper a second time.
_F_LINEAR = F.linear


def _torch_linear(input: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor | None,
                  activation: str | None) -> Tensor:
    y = _F_LINEAR(input, weight, bias)
    y = TORCH_ACTIVATIONS[activation](y) if activation else y
    return y + residual if residual is not None else y


# ----------------------------------------------------------------------------- 2. registered ops

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


def _mm_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_gemm("alcop::mm", a, b, None, None, None, (2,))
    return run_gemm("mm", a, b, None, None, None, 1.0, 1.0, None)


def _bmm_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_gemm("alcop::bmm", a, b, None, None, None, (3, 4))
    return run_gemm("bmm", a, b, None, None, None, 1.0, 1.0, None)


def _gemm_kernel(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
          activation: str | None = None, alpha: float = 1.0, beta: float = 1.0) -> torch.Tensor:
    _check_gemm("alcop::gemm", a, b, bias, residual, activation, (2, 3))
    return run_gemm("gemm", a, b, bias, residual, activation, alpha, beta, None)


def _gemm_out_kernel(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
              activation: str | None, alpha: float, beta: float, out: torch.Tensor) -> None:
    _check_gemm_out(a, b, bias, residual, activation, out)
    run_gemm("gemm_out", a, b, bias, residual, activation, alpha, beta, out)


# The registered implementations go through the routing too: below autograd (grad mode is off there)
# and in compiled graphs, a repeated signature is a cache hit.
def _registered_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return route.call("alcop::mm", (a, b), (), _MM_KERNEL)


def _registered_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return route.call("alcop::bmm", (a, b), (), _BMM_KERNEL)


def _registered_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                residual: torch.Tensor | None = None, activation: str | None = None, alpha: float = 1.0,
                beta: float = 1.0) -> torch.Tensor:
    return route.call("alcop::gemm", (a, b, bias, residual), (activation, alpha, beta), _GEMM_KERNEL)


mm_op = torch.library.custom_op(
    "alcop::mm", _registered_mm,
    mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
bmm_op = torch.library.custom_op(
    "alcop::bmm", _registered_bmm,
    mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
gemm_op = torch.library.custom_op(
    "alcop::gemm", _registered_gemm,
    mutates_args=(), schema=("(Tensor a, Tensor b, Tensor? bias=None, Tensor? residual=None, str? activation=None, "
                             "float alpha=1.0, float beta=1.0) -> Tensor"))
gemm_out_op = torch.library.custom_op(
    "alcop::gemm_out", _gemm_out_kernel, mutates_args=("out",),
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


def _linear_kernel(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
            residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    shape = _check_linear(x, w, bias, residual, activation)
    rows = math.prod(shape[:-1])  # explicit: reshape(-1, 0) is ambiguous for empty features
    x2 = x.reshape(rows, w.shape[1])
    r2 = residual.reshape(rows, w.shape[0]) if residual is not None else None
    return run_gemm("linear", x2, w.t(), bias, r2, activation, 1.0, 1.0, None).view(shape)


def _registered_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                  residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    return route.call("alcop::linear", (x, w, bias, residual), (activation,), _LINEAR_KERNEL)


linear_op = torch.library.custom_op(
    "alcop::linear", _registered_linear,
    mutates_args=(), schema=("(Tensor input, Tensor weight, Tensor? bias=None, Tensor? residual=None, "
                             "str? activation=None) -> Tensor"))


@linear_op.register_fake
def _linear_fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                 residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    return x.new_empty(_check_linear(x, w, bias, residual, activation))


# ----------------------------------------------------------------------------- 3. the kernel

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
    cfg = choose_config.choose_config(a.device, lambda: kmatmul.workload_of(a, b) if k > 0 else None,
                                      torch_comparable=a.dim() < 4, torch_workload=torch_workload)
    ep = kmatmul.Epilogue(bias is not None, activation, residual is not None, float(alpha), float(beta))
    kern = kmatmul.compiled(dtype_name(a.dtype), a.dim() - 2, ep, cfg)
    if a.dim() == 2:
        fastpath.launch_kernel(kern, [t for t in (a, b, bias, residual, out) if t is not None])
        return out
    # The batch (all batch dims) is the grid's second dimension: split it beyond CUDA's limit of 65535.
    step = max(1, CUDA_GRID_Y // math.prod(a.shape[1:-2]))
    for s in range(0, a.shape[0], step):
        sl = slice(s, s + step)
        fastpath.launch_kernel(kern, [t[sl] if t is not bias else t for t in (a, b, bias, residual, out) if t is not None])
    return out


# ----------------------------------------------------------------------------- 4. autograd formulas

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
    ctx.patched = fastpath.patch_mode_on()


def _backward_ops(ctx: Any) -> Any:
    """The namespace a backward formula calls: patch mode's where its forward ran in patch mode."""
    return BACKWARD_PATCHED if getattr(ctx, "patched", False) else BACKWARD


def _mm_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    a, b = ctx.saved_tensors
    ops = _backward_ops(ctx)
    op = ops.mm if a.dim() == 2 else ops.bmm
    da = op(grad, b.mT) if ctx.needs_input_grad[0] else None  # dA = dC @ B^T: B^T is a strided view
    db = op(a.mT, grad) if ctx.needs_input_grad[1] else None  # dB = A^T @ dC
    return da, db


def _gemm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    a, b, bias, residual, activation, alpha, beta = inputs
    ctx.activation, ctx.alpha, ctx.beta, ctx.has_residual = activation, alpha, beta, residual is not None
    ctx.save_for_backward(a, b, bias, output if _keeps_output(activation, residual) else None)
    ctx.patched = fastpath.patch_mode_on()


def _gemm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    a, b, bias, out = ctx.saved_tensors
    need = ctx.needs_input_grad
    ops = _backward_ops(ctx)
    dz = activation_grad(ctx.activation, grad, out,
                         lambda: ops.gemm(a, b, bias, None, None, ctx.alpha, 1.0))
    da = ops.gemm(dz, b.mT, None, None, None, ctx.alpha, 1.0) if need[0] else None
    db = ops.gemm(a.mT, dz, None, None, None, ctx.alpha, 1.0) if need[1] else None
    dbias = dz.sum(dim=tuple(range(dz.dim() - 1))) if need[2] else None
    dres = (grad * ctx.beta if ctx.beta != 1.0 else grad) if ctx.has_residual and need[3] else None
    return da, db, dbias, dres, None, None, None


def _linear_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, bias, residual, activation = inputs
    ctx.activation, ctx.has_residual = activation, residual is not None
    ctx.save_for_backward(x, w, bias, output if _keeps_output(activation, residual) else None)
    ctx.patched = fastpath.patch_mode_on()


def _linear_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, w, bias, out = ctx.saved_tensors
    need = ctx.needs_input_grad
    ops = _backward_ops(ctx)
    dz = activation_grad(ctx.activation, grad, out, lambda: ops.linear(x, w, bias, None, None))
    rows = math.prod(x.shape[:-1])
    dz2 = dz.reshape(rows, w.shape[0])
    dx = ops.mm(dz2, w).view(x.shape) if need[0] else None
    dw = ops.mm(dz2.t(), x.reshape(rows, w.shape[1])) if need[1] else None
    dbias = dz2.sum(0) if need[2] else None
    dres = grad if ctx.has_residual and need[3] else None
    return dx, dw, dbias, dres, None


mm_op.register_autograd(_mm_backward, setup_context=_mm_setup)
bmm_op.register_autograd(_mm_backward, setup_context=_mm_setup)
gemm_op.register_autograd(_gemm_backward, setup_context=_gemm_setup)
linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)


# ----------------------------------------------------------------------------- 5. traced with routing on

def _gemm_to_torch(a: torch.Tensor, b: torch.Tensor, *epilogue: torch.Tensor | None) -> bool:
    """Whether a traced GEMM ``a @ b`` gets torch's op: symbolic sizes, or records that prefer torch for
    the workload ``run_gemm`` would key (operands as ``aligned_operands`` leaves contiguous ones).

    Two batch dims (attention's heads, read permuted) are weighed against torch's recorded time too, unlike
    eagerly (``run_gemm``): eager ``torch.matmul`` copies such operands in passes of their own first, but in
    a compiled graph Inductor writes them contiguous in the kernels that produce them, so torch's cost is
    the product the records timed. (Kept from the eager rule, e2e.py's Llama block sent its attention
    products to alcop inside torch.compile, where the H200 table measured torch's 4% faster.)"""
    if not traced.concrete(a, b, *epilogue):
        return True
    empty = a.shape[-1] == 0 or math.prod(a.shape[:-1]) == 0 or b.shape[-1] == 0
    return traced.to_torch(a.device, lambda: None if empty else kmatmul.aligned_workload(kmatmul.workload_of(a, b)))


def _linear_workload(x: torch.Tensor, w: torch.Tensor) -> Workload | None:
    """``workload_of`` for ``_linear_kernel``'s product ``x.reshape(rows, K) @ w.t()``, from metadata alone."""
    rows, n, k = math.prod(x.shape[:-1]), w.shape[0], w.shape[1]
    if rows * n * k == 0:
        return None
    lay = ("t" if x.stride(-1) != 1 and k > 1 else "n") + ("t" if w.stride(0) != 1 and n > 1 else "n")
    return kmatmul.aligned_workload(Workload("matmul", (rows, n, k), dtype_name(x.dtype), lay))


def _routed_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return traced.by_torch(_TORCH_MM, a, b) if _gemm_to_torch(a, b) else torch.ops.alcop.mm(a, b)


def _routed_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return traced.by_torch(_TORCH_MATMUL, a, b) if _gemm_to_torch(a, b) else torch.ops.alcop.bmm(a, b)


def _routed_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                 residual: torch.Tensor | None = None, activation: str | None = None, alpha: float = 1.0,
                 beta: float = 1.0) -> torch.Tensor:
    if _gemm_to_torch(a, b, bias, residual):
        return traced.by_torch(fallback.torch_gemm, a, b, bias, residual, activation, alpha, beta)
    return torch.ops.alcop.gemm(a, b, bias, residual, activation, alpha, beta)


def _routed_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                   residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    if not traced.concrete(x, w, bias, residual) or traced.to_torch(x.device, lambda: _linear_workload(x, w)):
        return traced.by_torch(_torch_linear, x, w, bias, residual, activation)
    return torch.ops.alcop.linear(x, w, bias, residual, activation)


_GEMM_SCHEMA = ("(Tensor a, Tensor b, Tensor? bias=None, Tensor? residual=None, str? activation=None, "
                "float alpha=1.0, float beta=1.0) -> Tensor")
ROUTED = types.SimpleNamespace(
    mm=traced.define("routed_mm", "(Tensor a, Tensor b) -> Tensor", _routed_mm),
    bmm=traced.define("routed_bmm", "(Tensor a, Tensor b) -> Tensor", _routed_bmm),
    gemm=traced.define("routed_gemm", _GEMM_SCHEMA, _routed_gemm),
    gemm_out=torch.ops.alcop.gemm_out,  # out= never takes the traced route (the front end calls the op)
    linear=traced.define("routed_linear", "(Tensor input, Tensor weight, Tensor? bias=None, Tensor? residual=None, "
                         "str? activation=None) -> Tensor", _routed_linear))
"""``torch.ops.alcop``'s names for calls Dynamo traces with routing on: ops that decide, as the graph is
built, whether alcop's op or torch's takes their place (``ops.traced``)."""


# ----------------------------------------------------------------------------- 6. op namespaces and routes

DIRECT = types.SimpleNamespace(mm=_mm_kernel, bmm=_bmm_kernel, gemm=_gemm_kernel, gemm_out=_gemm_out_kernel,
                               linear=_linear_kernel)
"""The registered ops' implementations under ``torch.ops.alcop``'s names, called without torch's dispatcher:
the front ends' namespace for calls that need neither autograd nor tracing."""

AUTOGRAD = types.SimpleNamespace(
    mm=fastpath.grad_function("AlcopMm", _registered_mm, _mm_setup, _mm_backward, 2),
    bmm=fastpath.grad_function("AlcopBmm", _registered_bmm, _mm_setup, _mm_backward, 2),
    gemm=fastpath.grad_function("AlcopGemm", _registered_gemm, _gemm_setup, _gemm_backward, 4),
    gemm_out=_gemm_out_kernel,  # out= with autograd is refused before it gets here
    linear=fastpath.grad_function("AlcopLinear", _registered_linear, _linear_setup, _linear_backward, 4))
"""``torch.ops.alcop``'s names for eager calls with autograd: the same implementations and formulas as
autograd Functions (``fastpath.grad_function``), without torch.library's per-call autograd wrapper."""


# torch's own functions, taken before patch mode can wrap them: a workload patch mode leaves to torch
# then calls them directly, not through its wrapper a second time.
_TORCH_MATMUL, _TORCH_MM, _TORCH_BMM = torch.matmul, torch.mm, torch.bmm

# The registered ops' own implementations: below the dispatcher, so no other route but torch's. An autograd
# Function's forward (the autograd route's, training in patch mode) calls them: where the records leave the
# forward's workload to torch, patch mode's repeats compute it with torch there (``route._first_call``), while
# the Function's backward still sends each gradient product where its own records say.
_MM_KERNEL, _BMM_KERNEL = OpRoutes(_mm_kernel, torch=_TORCH_MM), OpRoutes(_bmm_kernel, torch=_TORCH_MATMUL)
_GEMM_KERNEL = OpRoutes(_gemm_kernel, torch=fallback.torch_gemm)
_LINEAR_KERNEL = OpRoutes(_linear_kernel, torch=_torch_linear)

BACKWARD = types.SimpleNamespace(**{
    name: route.backward_op(name, n, OpRoutes(getattr(DIRECT, name), getattr(torch.ops.alcop, name), None,
                                              getattr(AUTOGRAD, name)))
    for name, n in (("mm", 2), ("bmm", 2), ("gemm", 4), ("linear", 4))})
"""The ops the backward formulas call (``route.backward_op``)."""

BACKWARD_PATCHED = types.SimpleNamespace(**{
    name: route.backward_op(name, n, OpRoutes(getattr(DIRECT, name), getattr(torch.ops.alcop, name), torch_fn,
                                              getattr(AUTOGRAD, name)), patched=True)
    for name, n, torch_fn in (("mm", 2, _TORCH_MM), ("bmm", 2, _TORCH_MATMUL),  # alcop's bmm takes 4-D too
                              ("gemm", 4, fallback.torch_gemm), ("linear", 4, _torch_linear))})
"""The same for the backward of a forward made in patch mode: each product goes to torch where the
records prefer torch, as patch mode's forward products do (``route.backward_op``'s ``patched``)."""

MATMUL = route.front_end(_matmul, DIRECT, AUTOGRAD, _TORCH_MATMUL, ROUTED)
MM = route.front_end(_mm, DIRECT, AUTOGRAD, _TORCH_MM, ROUTED)
BMM = route.front_end(_bmm, DIRECT, AUTOGRAD, _TORCH_BMM, ROUTED)
ADDMM = route.front_end(_addmm, DIRECT, AUTOGRAD,
                        lambda input, m1, m2, beta, alpha: _TORCH_ADDMM(input, m1, m2, beta=beta, alpha=alpha),
                        ROUTED)
BADDBMM = route.front_end(_baddbmm, DIRECT, AUTOGRAD,
                          lambda input, b1, b2, beta, alpha: _TORCH_BADDBMM(input, b1, b2, beta=beta, alpha=alpha),
                          ROUTED)
LINEAR = route.front_end(_linear, DIRECT, AUTOGRAD, _torch_linear, ROUTED)
