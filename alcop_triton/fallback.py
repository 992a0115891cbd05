"""Where alcop steps aside: which inputs it cannot run, the announcement, and torch's equivalents.

Inputs alcop cannot run (a tensor that is not plain strided dense memory (``tensor_kinds``: a sparse,
nested, quantized or meta tensor, torch's negative or conjugate bit, freed storage, a subclass with its own
``__torch_function__``), a dtype other than float16/bfloat16/float32, a device that is neither CUDA nor
CPU, a GPU without a hardware preset, tensors beyond int32 offsets) are
computed by torch; ``use_torch`` logs the reason once, or raises ``UnsupportedError`` under
``ALCOP_STRICT=1``. ``torch_gemm`` and ``torch_conv`` are the custom ops' semantics in torch.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from . import settings, tensor_kinds
from .choose_config import device_index, gpu_spec
from .errors import UnsupportedError
from .fastpath import note_torch_computed, span
from .records import dtype_name

log = logging.getLogger("alcop_triton")

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TORCH_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}

_LOGGED: set[tuple[str, str]] = set()


def use_torch(op: str, reason: str) -> None:
    """Announce that ``op`` computes with torch: logged once per (op, reason); raises in strict mode."""
    if settings.strict():
        raise UnsupportedError(f"alcop_triton.{op}: {reason}; ALCOP_STRICT=1 forbids falling back to torch")
    note_torch_computed()
    _log_once(op, reason)

def _log_once(op: str, reason: str) -> bool:
    if (op, reason) not in _LOGGED:
        _LOGGED.add((op, reason))
        log.warning("alcop_triton.%s falls back to torch: %s", op, reason)
    return True


# torch.compile cannot trace a logging call; a constant-result function runs (and logs) at trace time.
# This is what ``torch.compiler.assume_constant_result`` sets; calling it would import torch._dynamo
# with alcop_triton (about half of the import's time), which most processes never use.
_log_once._dynamo_marked_constant = True  # type: ignore[attr-defined]


def static_reason(*tensors: torch.Tensor | None, dtypes: Sequence[torch.dtype] = SUPPORTED_DTYPES) -> str | None:
    """Why alcop cannot run these tensors, from what is known when tracing: first whether each is a plain
    strided dense tensor (``tensor_kinds.reason``, asked before anything reads a stride), then dtype
    and device."""
    for t in tensors:
        if t is None:
            continue
        kind = tensor_kinds.reason(t)
        if kind is not None:
            return kind
        if t.dtype not in dtypes:
            return (f"dtype {dtype_name(t.dtype)}: kernels are generated for "
                    f"{', '.join(dtype_name(d) for d in dtypes)}")
        if t.device.type not in ("cuda", "cpu"):
            return f"device {t.device.type}: Triton kernels run on CUDA GPUs (and on CPU in Triton's interpreter)"
        if t.device.type == "cuda" and settings.interpret():
            return "a CUDA tensor while TRITON_INTERPRET=1: the interpreter runs kernels on CPU tensors only"
    return None


def not_plain(op: str, names: Sequence[str], *tensors: Any) -> bool:
    """Whether a tensor argument of ``op`` is not a plain strided dense tensor (``tensor_kinds.reason``:
    nested, sparse, quantized, meta, torch's negative or conjugate bit, a subclass with its own
    ``__torch_function__``...): then announced (``use_torch``), and the caller has torch compute the call.
    The front ends ask it first, before any shape is read (a nested tensor has none). Storage that does
    not cover its tensor raises RuntimeError naming the argument (``tensor_kinds.check_storage``)."""
    reason = tensor_kinds.first_reason(*tensors)
    if reason is None:
        tensor_kinds.check_storage(op, names, tensors)
        return False
    use_torch(op, reason)
    return True


def torch_decides(op: str, refusal: RuntimeError, torch_call: Callable[[], Any]) -> Any:
    """A call alcop's argument checks refuse (``refusal``) where torch's function may still compute:
    torch's CUDA ops accept some calls its CPU ops refuse (a linear over a 3-D input adds a bias of
    another dtype after the product; addmm with beta=0 on CUDA never broadcasts its input). torch's
    function decides: its result (announced as a fallback), or, where it raises too, alcop's error,
    which names the argument, the value and the rule. Only argument checks come here: nothing has
    been launched."""
    try:
        y = torch_call()
    except Exception:  # noqa: BLE001 - torch refuses too: alcop's message, torch's exception type
        raise refusal from None
    use_torch(op, f"{refusal} (torch's function computes this call on {_device_of(y)})")
    return y


def _device_of(y: Any) -> str:
    return str(y.device.type) if isinstance(y, torch.Tensor) else "this device"


def falls_back(op: str, *tensors: Any) -> bool:
    """Whether ``static_reason`` leaves ``op`` on these tensors to torch: then announced (``use_torch``),
    and the caller has torch compute the call."""
    reason = static_reason(*tensors)
    if reason is None:
        return False
    use_torch(op, reason)
    return True


@functools.lru_cache(maxsize=None)
def _gpu_reason(index: int) -> str | None:
    try:
        gpu_spec(index)
    except UnsupportedError as e:
        return f"no hardware preset for cuda:{index} ({e})"
    return None


def runtime_reason(*tensors: torch.Tensor | None, dtypes: Sequence[torch.dtype] = SUPPORTED_DTYPES) -> str | None:
    """``static_reason`` plus what only real tensors tell: offsets beyond int32, the GPU's preset; raises
    RuntimeError for a tensor whose storage does not cover it."""
    r = static_reason(*tensors, dtypes=dtypes)
    if r is not None:
        return r
    real = [t for t in tensors if t is not None]
    # Freed storage is an error, not a fallback (``tensor_kinds.check_storage``)
    tensor_kinds.check_storage("alcop", [f"tensor {i}" for i in range(len(real))], real)
    for t in real:
        if span(t) >= 2 ** 31:
            return f"a tensor of shape {tuple(t.shape)} spans 2**31 elements or more; kernels index with int32"
    dev = real[0].device
    if dev.type == "cuda":
        return _gpu_reason(device_index(dev))
    return None


def torch_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
               activation: str | None, alpha: float, beta: float) -> torch.Tensor:
    """The fused GEMM's semantics in torch: the fallback path."""
    y = torch.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if bias is not None:
        y = y + bias
    if activation is not None:
        y = TORCH_ACTIVATIONS[activation](y)
    if residual is not None:
        y = y + (residual * beta if beta != 1.0 else residual)
    return y


def torch_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
               pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
               activation: str | None) -> torch.Tensor:
    """The conv op's semantics in torch (asymmetric padding through F.pad): the fallback path."""
    nd = x.dim() - 2
    if list(pad_left) == list(pad_right):
        pad: Sequence[int] = pad_left
    else:
        x = F.pad(x, [p for i in reversed(range(nd)) for p in (pad_left[i], pad_right[i])])
        pad = [0] * nd
    y = (F.conv1d, F.conv2d, F.conv3d)[nd - 1](x, w, bias, list(stride), list(pad), list(dilation), groups)
    return TORCH_ACTIVATIONS[activation](y) if activation else y


def vjp_fn(fn: Callable[..., Any], *primals: torch.Tensor) -> Callable[..., Any]:
    """The vector-Jacobian product function of ``torch.func.vjp(fn, *primals)`` (its output is not needed).

    torch annotates vjp's result as one type for both ``(output, vjp_fn)`` and has_aux's
    ``(output, vjp_fn, aux)``; the vjp function is item 1 of either.
    """
    return torch.func.vjp(fn, *primals)[1]
