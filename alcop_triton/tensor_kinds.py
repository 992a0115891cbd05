"""Which tensors alcop's kernels may read: plain strided dense tensors over live storage.

A kernel reads a tensor through its address, its strides and its dtype, nothing else. Whatever else a
tensor carries changes what those bytes mean, or there are no such bytes:

- a layout other than strided (sparse, mkldnn), a nested tensor (its sizes and strides are per
  component), a quantized tensor (its bytes are scaled integers), a meta tensor (no memory at all), an
  ``_efficientzerotensor`` (no memory: its values are zero);
- torch's lazy flags: the negative bit (``z.conj().imag``) and the conjugate bit mean the values are
  the negation (conjugate) of the bytes until torch resolves them;
- storage that does not cover the tensor: ``untyped_storage().resize_(0)`` (what FSDP does to a
  sharded parameter) leaves the sizes, strides and offset, and no bytes behind them;
- a ``torch.Tensor`` subclass with a ``__torch_function__`` of its own: it asked to see every torch call
  on it (subclasses that only ``__torch_dispatch__``, such as fake or functional tensors, are torch's
  dispatcher's business and stay alcop's: their calls go through ``torch.ops.alcop``).

``reason`` names what makes a tensor one of these (torch computes such calls, or raises its own
error): the front ends ask it first, before any shape or stride is read (``fallback.not_plain``), and
so does every later check of the cold route (``fallback.static_reason``). ``check_storage`` raises for
storage that does not cover its tensor (torch would read it in some ops); ``plain`` is the whole test
for a real tensor, storage included: the fast path stores and replays only calls whose tensors pass it
(``fastpath._key`` returns None for the others; a call site's guards compare the dispatch keys, which
carry the flags, and its check reads ``is_nested`` before any guard and the addresses, which freed
storage gives away: ``ops.route.address_bits``). Tensor subclasses without a ``__torch_function__`` of
their own (fake and functional tensors while torch.compile traces) have no signature either: they
reach the registered op, whose dispatch sees them.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
"""The tensor types alcop takes as plain (a parameter is a tensor)."""
_dynamo_tracing = torch.compiler.is_dynamo_compiling
_STRIDED = torch.strided
_DISABLED = torch._C._disabled_torch_function_impl
_TENSOR_TORCH_FUNCTION = torch.Tensor.__torch_function__.__func__  # type: ignore[attr-defined]


def own_torch_function(cls: type) -> bool:
    """Whether a tensor class has a ``__torch_function__`` of its own (neither torch.Tensor's default,
    which only rewraps results, nor the disabled one of parameters, fake and functional tensors)."""
    tf: Any = getattr(cls, "__torch_function__", None)
    return tf is not None and tf is not _DISABLED and getattr(tf, "__func__", None) is not _TENSOR_TORCH_FUNCTION


def reason(t: torch.Tensor) -> str | None:
    """Why alcop must not read ``t``'s memory, from what tracing knows too (no storage check), or None.

    None while Dynamo traces: it cannot trace the flag reads (they return no tensor), and the traced
    graph's ``torch.ops.alcop`` node runs an implementation that asks again on the real tensors."""
    if _dynamo_tracing():
        return None
    cls = type(t)
    if cls is not torch.Tensor and cls is not torch.nn.Parameter and own_torch_function(cls):
        return f"a {cls.__name__} tensor: its own __torch_function__ sees torch's calls"
    if t.layout is not _STRIDED:
        return f"layout {t.layout}: generated kernels address dense strided tensors"
    if t.is_nested:
        return "a nested tensor: generated kernels address one strided tensor"
    if t.is_quantized:
        return f"a quantized tensor ({t.dtype}): generated kernels read unscaled values"
    if t.is_meta:
        return "device meta: a meta tensor has no memory to read"
    if t.is_neg() or t.is_conj():
        return "a tensor with torch's negative or conjugate bit: its memory holds the values before the flag"
    if t._is_zerotensor():
        return "an efficient zero tensor: no memory to read"
    return None


def storage_reason(t: torch.Tensor) -> str | None:
    """Why a real strided tensor's storage cannot be read (it does not cover the tensor's elements), or None."""
    if t.numel() == 0:
        return None
    extent = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))
    needed = (t.storage_offset() + extent) * t.element_size()
    have = t.untyped_storage().nbytes()
    if have < needed:
        return (f"storage of {have} bytes where the tensor of shape {tuple(t.shape)} needs {needed} "
                "(freed or shrunk, e.g. by untyped_storage().resize_(0))")
    return None


def check_storage(op: str, names: Sequence[str], tensors: Sequence[Any]) -> None:
    """RuntimeError (torch's type) naming the first real tensor argument whose storage does not cover it.
    Raised rather than left to torch: torch raises for some ops (``matmul``) but reads the missing
    memory for others (``addmm``'s input, elementwise ops on the CPU crash the process)."""
    if _dynamo_tracing():
        return
    for name, t in zip(names, tensors):
        if type(t) in PLAIN_TYPES and t.layout is _STRIDED and not t.is_nested:
            r = storage_reason(t)
            if r is not None:
                raise RuntimeError(f"{op}(): argument '{name}' has no memory to read: {r}")


def plain(t: torch.Tensor) -> bool:
    """Whether ``t`` is a real, plain strided dense tensor over live storage: exactly a ``torch.Tensor``
    or ``nn.Parameter``, none of ``reason``'s kinds, its storage covering its elements."""
    return type(t) in PLAIN_TYPES and reason(t) is None and storage_reason(t) is None


def first_reason(*tensors: torch.Tensor | None) -> str | None:
    """``reason`` of the first tensor that has one (Nones and non-tensors are skipped: the argument checks judge them)."""
    for t in tensors:
        if isinstance(t, torch.Tensor):
            r = reason(t)
            if r is not None:
                return r
    return None


def resolved(t: torch.Tensor) -> torch.Tensor:
    """``t`` with torch's lazy flags applied (negative and conjugate bits, an efficient zero tensor made
    real): for kernels that have no torch equivalent to leave such a tensor to."""
    if t.is_neg() or t.is_conj():
        t = t.resolve_conj().resolve_neg()
    if t._is_zerotensor():
        t = torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    return t
