"""What a routed call becomes in a graph ``torch.compile`` builds: alcop's op where the records show it
faster, else torch's own, decided per workload while the graph is built.

Dynamo runs Python symbolically: it cannot ask the tuning records (a database, caches, dataclasses) from
the code it traces, and the shapes it sees there are its own variables. So a routed call traced with
routing on (``state.on``: patch mode, ``alcop_triton.compile``) puts a *deciding op* in Dynamo's graph,
``torch.ops.alcop.routed_{mm,bmm,gemm,linear,conv}``. Each is ``CompositeImplicitAutograd``: it has no
kernel of its own, and wherever torch runs it — Dynamo's fake-tensor propagation, AOTAutograd's trace
that Inductor and every ``aot_autograd`` backend compile — its Python body runs on fake tensors with
their concrete sizes, strides, dtypes and device, asks ``choose_config.prefers_torch`` (the question
eager patch mode's first call of the same workload asks) and calls alcop's op (``torch.ops.alcop.mm``...)
or torch's function in its place. The graph that is compiled holds that op, never the deciding one.

Sizes that are symbolic (``dynamic=True``, or shapes Dynamo marked dynamic after a recompile) name no
workload: such calls get torch's op. Nothing is tuned while deciding unless ``ALCOP_AUTOTUNE=1`` asks
for it (the dispatcher's rule), and then outside the tracing modes, on real tensors.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .. import choose_config
from ..records import Workload

Tensor = torch.Tensor


class _Routing(threading.local):
    """Whether this thread traces with routing on: what patch mode last set here (Dynamo reads no context
    variable, so a trace follows this thread's flag rather than the fast path's mode)."""
    on = False


state = _Routing()

LIBRARY = torch.library.Library("alcop", "FRAGMENT")
"""The deciding ops' definitions (their namespace is alcop's ops')."""


def concrete(*tensors: Tensor | None) -> bool:
    """Whether every size and stride of ``tensors`` is a plain int (no symbolic size of a dynamic trace)."""
    for t in tensors:
        if t is None:
            continue
        for v in (*t.shape, *t.stride()):
            if not isinstance(v, int):
                return False
    return True


def to_torch(device: torch.device, workload: Callable[[], Workload | None], torch_comparable: bool = True,
             torch_workload: Callable[[], Workload | None] | None = None) -> bool:
    """``choose_config.prefers_torch``, asked outside the tracing modes (fake tensors, functionalization,
    the proxy): whatever it reads or, under ``ALCOP_AUTOTUNE=1``, measures is real. The workloads are
    computed first, from the traced tensors' metadata."""
    w = workload()
    tw = torch_workload() if torch_workload is not None else None
    with _disable_current_modes():
        return choose_config.prefers_torch(device, lambda: w, torch_comparable,
                                           (lambda: tw) if torch_workload is not None else None)


def by_torch(fn: Callable[..., Tensor], *args: Any) -> Tensor:
    """``fn(*args)``, torch's computation of a call decided for torch, with routing off: torch's own
    decompositions (``aten.matmul``'s calls ``torch.bmm``...) reach patch mode's wrappers while a graph
    is built, which must give them torch's functions, not decide them again."""
    on, state.on = state.on, False
    try:
        return fn(*args)
    finally:
        state.on = on


def define(name: str, schema: str, decide: Callable[..., Tensor]) -> Any:
    """Define ``alcop::<name>`` with ``schema``, implemented by ``decide`` for every backend (it decomposes)."""
    LIBRARY.define(f"{name}{schema}")
    LIBRARY.impl(name, decide, "CompositeImplicitAutograd")
    return getattr(torch.ops.alcop, name)
