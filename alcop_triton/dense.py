"""Which tensors alcop's kernels may address: plain strided dense tensors.

A kernel reads a tensor through its address, shape and strides alone. Anything whose values are not
what those say (a sparse, nested or quantized layout, a lazily negated or conjugated view, a meta tensor
with no data) goes to torch before any guard, signature or kernel reads its strides.
``not_dense_reason`` is the one predicate: the cold route asks it first (``fallback.static_reason``), and
the fast path never stores or hits a signature of such tensors (``fastpath._key`` returns None for them,
and a call site's guards compare the dispatch keys, which carry these bits).
"""

from __future__ import annotations

import torch

PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
"""The tensor types alcop takes as plain (a parameter is a tensor)."""


_tracing = torch.compiler.is_compiling


def not_dense_reason(t: torch.Tensor) -> str | None:
    """Why ``t`` is not a plain strided dense tensor alcop's kernels can address, None when it is one.

    Tensor subclasses (fake and functional tensors among them) are not judged here: they have no
    signature (``fastpath._key``), so they reach the registered op, whose dispatch sees them. While
    torch.compile traces, the negation and conjugation bits are the graph's to resolve (Dynamo cannot
    trace reading them)."""
    if t.layout != torch.strided:
        return f"layout {t.layout}: generated kernels address dense strided tensors"
    if not _tracing() and (t.is_neg() or t.is_conj()):
        return "a lazily negated or conjugated view: kernels read the stored values"
    if t.device.type == "meta":
        return "device meta: a meta tensor has no data to compute on"
    return None

