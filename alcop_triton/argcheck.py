"""Scalar arguments of the drop-in ops, read as torch reads them (same accepted types, same errors).

torch takes any ``__index__``-able value where it wants an int (numpy ints, one-element integer
tensors) and any real number where it wants a ``Number`` (numpy floats, 0-d tensors), and refuses
a scalar that the op's compute type cannot hold.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import torch

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
