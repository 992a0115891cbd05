"""Argument checks shared by the op families: tensors, dtypes and devices, ``out=``, broadcasting, and
scalar arguments read as torch reads them (same accepted types, same exception types).

torch takes any ``__index__``-able value where it wants an int (numpy ints, one-element integer
tensors) and any real number where it wants a ``Number`` (numpy floats, 0-d tensors), and refuses
a scalar that the op's compute type cannot hold. Every message names the argument, its value and the rule.
"""

from __future__ import annotations

import math
import numbers
import operator
import warnings
from typing import Any, Sequence

import torch

from ..records import dtype_name
from ..kernels.matmul import ACTIVATIONS

Tensor = torch.Tensor

CUDA_GRID_Y = 65535
"""CUDA's limit on the grid's second dimension, which carries a GEMM's batch and a convolution's groups."""

_INT64 = (-(2 ** 63), 2 ** 63)
_FLOAT_MAX = {torch.float16: torch.finfo(torch.float32).max, torch.bfloat16: torch.finfo(torch.float32).max,
              torch.float32: torch.finfo(torch.float32).max}
"""Largest finite scalar per input dtype: 16-bit products compute in float32, as in torch."""


def index(v: Any) -> int | None:
    """``v`` as an int if torch would accept it as one (not a bool), else None."""
    if isinstance(v, bool) or (isinstance(v, torch.Tensor) and v.dtype == torch.bool):
        return None
    try:
        i = operator.index(v)
    except (TypeError, RuntimeError, ValueError):
        return None
    if not _INT64[0] <= i < _INT64[1]:
        raise ValueError(f"{v!r}: Overflow when unpacking long long (an int argument must fit in 64 bits)")
    return i


def _number_type(op: str, name: str, v: Any) -> None:
    if isinstance(v, torch.Tensor):
        if v.dim() != 0:
            raise TypeError(f"{op}(): argument '{name}' must be Number, not a {v.dim()}-D Tensor")
    elif not isinstance(v, numbers.Number):
        raise TypeError(f"{op}(): argument '{name}' must be Number, not {type(v).__name__}")


def parse_numbers(op: str, **named: Any) -> None:
    """torch's argument parser, before any shape check: every argument's type first (TypeError),
    then each int converted to a double (OverflowError beyond that range)."""
    for name, v in named.items():
        _number_type(op, name, v)
    for v in named.values():
        if isinstance(v, numbers.Integral):
            float(v)


def number(op: str, name: str, v: Any, dtype: torch.dtype) -> float:
    """A ``Number`` argument (alpha, beta) as a float; values the op's compute type cannot hold raise
    torch's RuntimeError (its OverflowError for an int beyond any float)."""
    _number_type(op, name, v)
    if isinstance(v, torch.Tensor):
        v = v.item()
    if isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real):
        if v.imag != 0:
            raise RuntimeError(f"{op}(): {name}={v!r}: value cannot be converted to type float without overflow "
                               "(a complex scalar with a real tensor)")
        v = v.real
    f = float(v)
    limit = _FLOAT_MAX.get(dtype)
    if limit is not None and math.isfinite(f) and abs(f) > limit:
        raise RuntimeError(f"{op}(): {name}={v!r}: value cannot be converted to type float without overflow "
                           f"(|{name}| must be <= {limit:.6g} or infinite)")
    return f


# ----------------------------------------------------------------------------- tensors

def need_tensor(op: str, name: str, x: Any) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(x).__name__}")


def shape_of(t: Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def check_same(op: str, names: Sequence[str], tensors: Sequence[Tensor | None]) -> None:
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


def broadcast(s1: tuple[int, ...], s2: tuple[int, ...]) -> tuple[int, ...] | None:
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


def broadcast_to(op: str, name: str, t: Tensor, to: tuple[int, ...]) -> Tensor:
    """``t`` expanded to ``to`` (a stride-0 view), or torch's RuntimeError naming the argument."""
    if broadcast(shape_of(t), to) != to:
        raise RuntimeError(f"{op}(): {name}.shape={shape_of(t)} does not broadcast to the output's shape {to}")
    # The tensor itself where it already has the shape: an expand would be one more autograd node.
    return t if shape_of(t) == to else t.expand(to)


# ----------------------------------------------------------------------------- out=

def check_out(op: str, out: Any, like: Tensor, inputs: Sequence[Tensor | None]) -> None:
    need_tensor(op, "out", out)
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


def resize_out(out: Tensor, to: tuple[int, ...]) -> None:
    """torch's ``out=`` contract: a wrongly shaped ``out`` is resized (with torch's warning unless empty)."""
    if shape_of(out) == to:
        return
    if out.numel() != 0:
        warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, which "
                      f"does not match the required output shape {list(to)}. This behavior is deprecated, and in "
                      "a future PyTorch release outputs will not be resized unless they have zero elements.",
                      UserWarning, stacklevel=4)
    out.resize_(to)


def shares_memory(a: Tensor, b: Tensor | None) -> bool:
    return b is not None and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
