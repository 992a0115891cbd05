"""Patch mode: route torch's matrix products and convolutions through alcop, without touching torch.

    alcop_triton.enable()            # from here on, in this thread
    y = model(x)                     # nn.Linear / nn.Conv2d / x @ w ... run alcop kernels
    alcop_triton.disable()

    with alcop_triton.patched():     # or only inside a block
        y = model(x)

A ``TorchFunctionMode`` intercepts the calls (torch's attributes are never reassigned, so other
libraries holding references to ``torch.matmul`` see no change outside the mode). Routed:
``torch.matmul``/``Tensor.matmul`` (``@``), ``torch.mm``/``Tensor.mm``, ``torch.bmm``/``Tensor.bmm``,
``torch.addmm``/``Tensor.addmm``, ``torch.baddbmm``/``Tensor.baddbmm``, ``F.linear`` and
``F.conv1d``/``conv2d``/``conv3d`` (so ``nn.Linear`` and ``nn.ConvNd`` too; a ConvNd with a
non-zeros ``padding_mode`` pads with torch and convolves through alcop). Everything else passes
through untouched. Like every torch function mode, the mode is thread-local: ``enable()`` affects
the calling thread. ``torch.compile`` traces through it (the routed calls become ``torch.ops.alcop``
nodes).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import ops
from .fastpath import patched_call

ROUTES: dict[Callable[..., Any], Callable[..., Any]] = {
    torch.matmul: ops.matmul, torch.Tensor.matmul: ops.matmul,
    torch.mm: ops.mm, torch.Tensor.mm: ops.mm,
    torch.bmm: ops.bmm, torch.Tensor.bmm: ops.bmm,
    torch.addmm: ops.addmm, torch.Tensor.addmm: ops.addmm,
    torch.baddbmm: ops.baddbmm, torch.Tensor.baddbmm: ops.baddbmm,
    F.linear: ops.linear,
    F.conv1d: ops.conv1d, F.conv2d: ops.conv2d, F.conv3d: ops.conv3d,
}


class AlcopMode(TorchFunctionMode):
    """Sends the functions in ``ROUTES`` to their alcop drop-ins; everything else to torch.

    A routed call is the drop-in's call, through the same fast path (``fastpath.patched_call``),
    except that a workload which the measurements (tuning database, shipped table) say torch runs
    faster than alcop's config stays with torch; without both times, alcop runs it.
    """

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        # Inside this method the mode is not active, so the drop-ins' own torch calls are not re-routed.
        route = ROUTES.get(func)
        if route is None:
            return func(*args, **kwargs) if kwargs else func(*args)
        return patched_call(route, args, kwargs)


class _State(threading.local):
    mode: AlcopMode | None = None


_state = _State()  # per thread, as torch's mode stack is


def _top_mode() -> Any:
    n = torch._C._len_torch_function_stack()
    return torch._C._get_function_stack_at(n - 1) if n else None


def _inside_alcop_mode() -> bool:
    """Whether an ``AlcopMode`` is on this thread's torch function mode stack. A second one on top
    would route nothing more, but while it handles a call, the torch calls the drop-ins make would
    meet the first one and each pay a Python dispatch: so a nested block adds none."""
    return any(isinstance(torch._C._get_function_stack_at(i), AlcopMode)
               for i in range(torch._C._len_torch_function_stack()))


def enable() -> None:
    """Route torch's products and convolutions through alcop in this thread until ``disable()``."""
    if _state.mode is not None:
        return
    mode = AlcopMode()
    mode.__enter__()
    _state.mode = mode


def disable() -> None:
    """Undo ``enable()``; a no-op when not enabled.

    Raises RuntimeError when another torch function mode was entered after ``enable()`` and is
    still active: modes form a stack, so leave that one first.
    """
    if _state.mode is None:
        return
    if _top_mode() is not _state.mode:
        raise RuntimeError("alcop_triton.disable(): another TorchFunctionMode was entered after enable() and is still "
                           f"active ({type(_top_mode()).__name__}); exit it first, modes are a stack")
    _state.mode.__exit__(None, None, None)
    _state.mode = None


def is_enabled() -> bool:
    """Whether ``enable()`` is in effect in this thread."""
    return _state.mode is not None


@contextlib.contextmanager
def patched() -> Iterator[None]:
    """Route torch's products and convolutions through alcop inside the block (inside another such
    block, or after ``enable()``, it is that one's)."""
    if _inside_alcop_mode():
        yield
        return
    with AlcopMode():
        yield
