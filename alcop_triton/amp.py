"""What torch's autocast (AMP) does to the arguments of the functions alcop stands in for.

Inside ``torch.autocast``, torch casts the floating tensor arguments of matmul, mm, bmm, addmm, baddbmm,
linear and the convolutions (its "lower precision" ops, on CUDA and on CPU) to autocast's dtype before
computing, so the result has that dtype. The drop-ins (and patch mode, which calls them) do the same
(``ops.route.call``), and so do the calls torch.compile's graphs decide (``ops.traced.define``): an AMP training step then runs alcop's kernels in bf16 or fp16, as one written in
that dtype would. float64 tensors stay as they are, as under torch's autocast; ``out=`` calls are not cast.
"""

from __future__ import annotations

from typing import Any, Hashable

import torch

LOWER_PRECISION_OPS: frozenset[Hashable] = frozenset({"matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "conv"})
"""The drop-ins' ``ops.route.call`` names whose torch functions autocast runs in its dtype."""

is_on = torch._C._is_any_autocast_enabled
"""Whether autocast is on for any device in this thread (one C call: the check every drop-in call makes)."""


def cast(tensors: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``tensors`` as autocast would hand them to torch's function (None where absent), or None where that
    changes nothing: autocast off for their device, or every floating tensor already in its dtype."""
    device = next((t.device.type for t in tensors if isinstance(t, torch.Tensor)), None)
    if device is None or not torch.is_autocast_enabled(device):
        return None
    dtype = torch.get_autocast_dtype(device)
    if not any(_casts(t, dtype) for t in tensors):
        return None
    return tuple(t.to(dtype) if _casts(t, dtype) else t for t in tensors)


def _casts(t: Any, dtype: torch.dtype) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype is not dtype \
        and t.dtype is not torch.float64
