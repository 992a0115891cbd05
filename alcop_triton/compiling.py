"""``alcop_triton.compile``: ``torch.compile`` with alcop's routing on while it traces.

    model = alcop_triton.compile(model, mode="max-autotune")   # any torch.compile argument
    y = model(x)

Each call of the result runs inside a ``patch.patched()`` block, so the graphs torch.compile builds
(on the first call, and on every recompile) hold alcop's op for each product and convolution whose
records show alcop faster, and torch's op for the rest (``ops.traced``; ``docs/compile.md``). What runs
outside the graphs (a graph break's eager code) is patch mode's, as under ``patched()``.

Inductor's own kernels are compiled as ``torch.compile`` compiles them: tuning them is the caller's choice
(``options={"max_autotune_pointwise": True}`` gave the Llama-sized block's attention softmax max-autotune's
time at plain compile's compile time, but BERT-base lost as much elsewhere: ``docs/decisions.md#d49``).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, TypeVar

import torch

from .patch import patched

Model = TypeVar("Model", bound=Callable[..., Any])


def compile(model: Model, **torch_compile_kwargs: Any) -> Model:
    """``torch.compile(model, **torch_compile_kwargs)`` whose every call traces and runs with alcop's
    routing on. An ``nn.Module`` gives torch.compile's module (parameters, ``state_dict`` and all), its
    ``forward`` routed; a function gives a function. Entering the routing costs each call a few
    microseconds of host time, off the compiled graph's own."""
    if torch_compile_kwargs.get("backend", "inductor") == "inductor":
        # Inductor takes references to torch.mm & co. when it is imported (its extern kernels): imported
        # here, before a call enters patch mode, it takes torch's functions rather than patch mode's wrappers.
        importlib.import_module("torch._inductor.select_algorithm")
    compiled = torch.compile(model, **torch_compile_kwargs)
    if isinstance(compiled, torch.nn.Module):
        # torch.compile's module calls ``self.forward``, which it set to the compiled callable
        compiled.forward = _routed(compiled.forward)
        return compiled  # type: ignore[return-value]
    return _routed(compiled)  # type: ignore[return-value]


def _routed(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def routed(*args: Any, **kwargs: Any) -> Any:
        with patched():
            return fn(*args, **kwargs)
    return routed


def op_calls(fn: Callable[[], Any]) -> int:
    """How many calls of alcop's ops (``torch.ops.alcop``) one call of ``fn`` makes, counted from
    torch.profiler's record of each op call: whether a compiled model runs the graph with alcop's ops (a
    graph's code can hold them while its calls run another graph: ``docs/compile.md``, status)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("alcop::"))
