"""Capture the matmul/bmm/linear/conv workloads of a torch model by running it once.

The model runs under a ``TorchFunctionMode`` that records the shapes of every GEMM-like call and
lets it proceed. Running on the ``meta`` device costs no memory or compute (a 7B-parameter model
"runs" in well under a second); models whose code needs real values can run on CPU instead.

A model factory is ``module:callable`` returning ``(model, example_inputs)`` where
``example_inputs`` is a tensor or a tuple of positional arguments.
"""

from __future__ import annotations

import importlib
import math
import warnings
from typing import Any, Callable

from ..errors import ScheduleError
from ..records import DTYPES, Workload


def load_factory(spec: str) -> Callable[[], Any]:
    """Import ``module:callable`` (the module may be a dotted path or a file-less name on sys.path)."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ScheduleError(f"--model {spec!r}: expected 'module:callable', e.g. 'mypkg.models:make_bert'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ScheduleError(f"--model {spec!r}: {attr} is not callable")
    return obj


def _pair(v: Any, n: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v),) * n


def _conv(args: tuple[Any, ...], kwargs: dict[str, Any], nd: int) -> Workload | None:
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    p = dict(zip(names, args))
    p.update(kwargs)
    x, w = p["input"], p["weight"]
    stride, pad, dil = (_pair(p.get(k, d), nd) for k, d in (("stride", 1), ("padding", 0), ("dilation", 1)))
    groups = int(p.get("groups", 1))
    if isinstance(p.get("padding"), str) or len({*stride}) > 1 or len({*pad}) > 1 or len({*dil}) > 1:
        warnings.warn(f"conv{nd}d with stride={p.get('stride')}, padding={p.get('padding')}, "
                      f"dilation={p.get('dilation')}: only symmetric int parameters map to a Workload; skipped",
                      stacklevel=3)
        return None
    if x.dim() != nd + 2:
        return None  # unbatched input: rare, and not a shape the kernels take
    n, ci, *spatial = x.shape
    co, _, *kernel = w.shape
    layout = "nhwc" if nd == 2 and x.is_contiguous(memory_format=_channels_last()) else "nchw"
    tail = (stride[0], pad[0]) + ((dil[0], groups) if dil[0] != 1 or groups != 1 else ())
    if nd == 1:
        shape = (n, spatial[0], 1, ci, co, kernel[0], 1) + tail
    elif nd == 2:
        shape = (n, spatial[0], spatial[1], ci, co, kernel[0], kernel[1]) + tail
    else:
        shape = (n, *spatial, ci, co, *kernel) + tail
    return Workload(f"conv{nd}d", shape, _dtype(x), layout)


def _channels_last() -> Any:
    import torch

    return torch.channels_last


def _dtype(t: Any) -> str:
    name = str(t.dtype).removeprefix("torch.")
    return name if name in DTYPES else "float32"


def _matmul(a: Any, b: Any) -> Workload | None:
    if a.dim() < 2 or b.dim() < 2:
        return None  # vector products are not GEMMs worth a kernel
    m, k = a.shape[-2:]
    n = b.shape[-1]
    # A transposed view (stride 1 along the row index) is a 't' operand: B^T of nn.Linear, K^T in attention.
    layout = "".join("t" if x.stride(-2) == 1 and x.stride(-1) != 1 else "n" for x in (a, b))
    batch = math.prod(a.shape[:-2]) if a.dim() > 2 else math.prod(b.shape[:-2]) if b.dim() > 2 else 1
    if batch == 1:
        return Workload("matmul", (m, n, k), _dtype(a), layout)
    if a.dim() > 2 and b.dim() == 2:
        # (..., M, K) @ (K, N) flattens to one GEMM, as torch itself does.
        return Workload("matmul", (batch * m, n, k), _dtype(a), layout)
    return Workload("bmm", (batch, m, n, k), _dtype(a), layout)


def workload_of(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Workload | None:
    """The Workload of one torch call, or None if it is not a GEMM-like op we tune."""
    import torch
    import torch.nn.functional as F

    if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm,
                torch.bmm, torch.Tensor.bmm):
        return _matmul(args[0], args[1])
    if func in (torch.addmm, torch.baddbmm):
        return _matmul(args[1], args[2])
    if func is F.linear:
        x, w = args[0], args[1] if len(args) > 1 else kwargs["weight"]
        m = math.prod(x.shape[:-1])
        return Workload("linear", (m, w.shape[0], w.shape[1]), _dtype(x), "nt")
    for nd, f in ((1, F.conv1d), (2, F.conv2d), (3, F.conv3d)):
        if func is f:
            return _conv(args, kwargs, nd)
    return None


def capture(model: Any, inputs: Any, *, device: str = "meta", dtype: str | None = None) -> list[Workload]:
    """Distinct GEMM-like workloads of one forward pass, in first-seen order.

    Args:
        model: a torch.nn.Module (or any callable).
        inputs: a tensor or a tuple of positional arguments.
        device: "meta" (no compute) or "cpu".
        dtype: record workloads with this dtype instead of the model's (e.g. tune fp16 kernels for a
            model built in fp32).
    """
    import torch
    from torch.overrides import TorchFunctionMode

    seen: dict[Workload, None] = {}

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            w = workload_of(func, args, kwargs)
            if w is not None:
                if dtype is not None:
                    w = Workload(w.op, w.shape, dtype, w.layout)
                seen.setdefault(w, None)
            return func(*args, **kwargs)

    def move(x: Any) -> Any:
        return x.to(device) if isinstance(x, torch.Tensor) else x

    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    with torch.no_grad(), Recorder():
        model(*(move(a) for a in args))
    return list(seen)


def capture_factory(spec: str, *, device: str = "meta", dtype: str | None = None) -> list[Workload]:
    """``capture`` of the ``(model, inputs)`` a ``module:callable`` factory returns."""
    made = load_factory(spec)()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise ScheduleError(f"--model {spec!r}: the factory must return (model, example_inputs), "
                            f"got {type(made).__name__}")
    return capture(made[0], made[1], device=device, dtype=dtype)

