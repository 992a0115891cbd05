"""``torch.ops.alcop.*``: alcop_triton's kernels as torch.library custom ops.

Each op has a fake (meta) implementation, so ``torch.compile`` traces it without running it, and
an autograd formula whose gradients are again alcop ops (DSL kernels), so the backward graph is
traced the same way:

=====================  ==========================================================================
op                     computes
=====================  ==========================================================================
``alcop::mm``          ``a @ b`` for 2-D operands (any strides)
``alcop::bmm``         ``a @ b`` for 3-D operands of equal batch (stride-0 batches broadcast)
``alcop::gemm``        ``act(alpha * a @ b + bias) + beta * residual``, 2-D or 3-D (fused epilogue)
``alcop::gemm_out``    the same, written into a given ``out`` (the drop-ins' ``out=``)
``alcop::linear``      ``act(input @ weight.T + bias) + residual`` for an N-d input (F.linear)
``alcop::conv``        N-d convolution as implicit GEMM, asymmetric padding, groups, bias, act
``alcop::dsl_call``    a registered DSL kernel by key (conv gradients, ``alcop_triton.op`` grads)
=====================  ==========================================================================

Gradients: dA = dZ @ B^T and dB = A^T @ dZ are ``alcop::mm``/``bmm``/``gemm`` calls on transposed *views*
(strides, no copies). A convolution's input and weight gradients are DSL kernels of their own
(``conv_input_grad_kernel``/``conv_weight_grad_kernel``). What torch computes in a backward: bias
gradients (a sum over rows), ``beta * grad`` for a residual, and the activation's derivative
(an elementwise product); with an activation other than relu the pre-activation is recomputed by
one more alcop kernel rather than kept from the forward.

Where alcop cannot run an input (a dtype other than float16/bfloat16/float32, a device that is
neither CUDA nor CPU, a non-strided layout, a GPU without a hardware preset, tensors beyond int32
offsets), the op computes with torch instead and logs the reason once; ``ALCOP_STRICT=1`` raises
``UnsupportedError`` instead. CPU tensors run in Triton's interpreter (slow; meant for tests).

CUDA graphs: kernels are compiled and configs chosen on first use. While a stream is being captured
a call whose config or kernel variant has not been used before raises ``RuntimeError`` (warm up
with the same shapes, strides and dtypes first); a warmed-up call takes the cached path.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import json
import logging
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F

from . import config as _env
from . import te
from .build import CompiledKernel, build
from .errors import UnsupportedError
from .records import KernelConfig, Workload
from .schedule import Schedule

if TYPE_CHECKING:
    # alcop_triton.kernels is the top-level kernels/ directory (setup.cfg package_dir; __init__.py extends
    # __path__ in a checkout), which mypy cannot follow: it checks that directory as the package `kernels`.
    from kernels import conv as kconv
    from kernels import matmul as kmatmul
else:
    from .kernels import conv as kconv
    from .kernels import matmul as kmatmul

log = logging.getLogger("alcop_triton")

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ACTIVATIONS = kmatmul.ACTIVATIONS
TORCH_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}
CUDA_GRID_Y = 65535  # CUDA's limit on the grid's second dimension, which carries the batch

# Small tiles on CPU: the interpreter's cost is per program and per op, and test shapes are small.
INTERPRETER_CONFIG = KernelConfig(block_m=32, block_n=32, block_k=32, group_m=1, num_warps=4, smem_stages=2)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ----------------------------------------------------------------------------- fallback to torch

_LOGGED: set[tuple[str, str]] = set()


def fallback(op: str, reason: str) -> None:
    """Announce that ``op`` computes with torch: logged once per (op, reason); raises in strict mode."""
    if _env.strict():
        raise UnsupportedError(f"alcop_triton.{op}: {reason}; ALCOP_STRICT=1 forbids falling back to torch")
    _log_once(op, reason)


# torch.compile cannot trace a logging call; a constant-result function runs (and logs) at trace time.
@torch.compiler.assume_constant_result
def _log_once(op: str, reason: str) -> bool:
    if (op, reason) not in _LOGGED:
        _LOGGED.add((op, reason))
        log.warning("alcop_triton.%s falls back to torch: %s", op, reason)
    return True


def static_reason(*tensors: torch.Tensor | None, dtypes: Sequence[torch.dtype] = SUPPORTED_DTYPES) -> str | None:
    """Why alcop cannot run these tensors, from what is known when tracing (dtype, device, layout)."""
    for t in tensors:
        if t is None:
            continue
        if t.layout != torch.strided:
            return f"layout {t.layout}: generated kernels address dense strided tensors"
        if t.dtype not in dtypes:
            return (f"dtype {dtype_name(t.dtype)}: kernels are generated for "
                    f"{', '.join(dtype_name(d) for d in dtypes)}")
        if t.device.type not in ("cuda", "cpu"):
            return f"device {t.device.type}: Triton kernels run on CUDA GPUs (and on CPU in Triton's interpreter)"
        if t.device.type == "cuda" and _env.interpret():
            return "a CUDA tensor while TRITON_INTERPRET=1: the interpreter runs kernels on CPU tensors only"
    return None


@functools.lru_cache(maxsize=None)
def _gpu_spec(index: int) -> Any:
    from .model import hardware
    return hardware.detect(index)


@functools.lru_cache(maxsize=None)
def _gpu_reason(index: int) -> str | None:
    try:
        _gpu_spec(index)
    except UnsupportedError as e:
        return f"no hardware preset for cuda:{index} ({e})"
    return None


def _span(t: torch.Tensor) -> int:
    """Elements between a tensor's first and last addressed element, plus one (0 when empty)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))


def runtime_reason(*tensors: torch.Tensor | None, dtypes: Sequence[torch.dtype] = SUPPORTED_DTYPES) -> str | None:
    """``static_reason`` plus what only real tensors tell: offsets beyond int32, the GPU's preset."""
    r = static_reason(*tensors, dtypes=dtypes)
    if r is not None:
        return r
    real = [t for t in tensors if t is not None]
    for t in real:
        if _span(t) >= 2 ** 31:
            return f"a tensor of shape {tuple(t.shape)} spans 2**31 elements or more; kernels index with int32"
    dev = real[0].device
    if dev.type == "cuda":
        return _gpu_reason(_device_index(dev))
    return None


def _device_index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


# ----------------------------------------------------------------------------- configs, launches

_override: contextvars.ContextVar[KernelConfig | None] = contextvars.ContextVar("alcop_config", default=None)
_CONFIGS: dict[tuple[Workload, int], KernelConfig] = {}
_WARM: collections.OrderedDict[tuple[Any, ...], None] = collections.OrderedDict()
_WARM_MAX = 1 << 16
_WARM_LOCK = threading.Lock()


@contextlib.contextmanager
def use_config(cfg: KernelConfig) -> Iterator[None]:
    """Within the block, every alcop op runs with ``cfg`` instead of the dispatcher's choice."""
    if not isinstance(cfg, KernelConfig):
        raise TypeError(f"use_config(cfg={cfg!r}): expected a KernelConfig")
    token = _override.set(cfg)
    try:
        yield
    finally:
        _override.reset(token)


def _capture_error(what: str) -> RuntimeError:
    return RuntimeError(
        f"alcop_triton: {what} while a CUDA graph is being captured; compiling and tuning cannot be captured. "
        "Run the op once with the same shapes, strides and dtypes before capturing (a warm-up), "
        "then capture: warmed-up calls take the cached path.")


def choose_config(device: torch.device, workload: Callable[[], Workload | None]) -> KernelConfig:
    """The config for a call: ``use_config``'s, else the dispatcher's for this workload on this GPU.

    On CPU (the interpreter) there is no GPU to tune for: a small fixed config.
    """
    forced = _override.get()
    if forced is not None:
        return forced
    if device.type != "cuda":
        return fit_stages(INTERPRETER_CONFIG, workload())
    w = workload()
    if w is None:  # an empty reduction: nothing to tune, any valid config computes the zeros
        return KernelConfig()
    index = _device_index(device)
    cfg = _CONFIGS.get((w, index))
    if cfg is None:
        with torch.cuda.device(index):
            if torch.cuda.is_current_stream_capturing():
                raise _capture_error(f"choosing a config for {w.key()} (first call of this shape)")
        from .autotune.dispatch import best_config
        cfg = fit_stages(best_config(w, _gpu_spec(index)), w)
        _CONFIGS[(w, index)] = cfg
    return cfg


def fit_stages(cfg: KernelConfig, w: Workload | None) -> KernelConfig:
    """``cfg`` with no more pipeline stages than ``w``'s reduction has chunks (sub-tiles).

    The library's own choice must not ask for depths the shape cannot have: strict mode
    (``ALCOP_STRICT=1``) judges what the user asked for, and would refuse the clamp otherwise.
    Persistent kernels pipeline across tiles too, so their depth is left to the planner.
    """
    if w is None or cfg.persistent:
        return cfg
    chunks = max(1, -(-w.gemm_dims()[3] // cfg.block_k))
    return cfg.replace(smem_stages=min(cfg.smem_stages, chunks),
                       reg_stages=min(cfg.reg_stages, chunks * cfg.reg_split))


def launch(kern: CompiledKernel, args: Sequence[torch.Tensor]) -> None:
    """Run a kernel on ``args`` (inputs then output), on the tensors' device.

    On CUDA each launch's signature (kernel, dtypes, shapes, strides, 16-byte alignment, tf32) is
    remembered: the same signature maps to the same alcop variant and Triton specialisation, so a
    capture may replay it; an unseen one would compile, which a capture cannot hold.
    """
    dev = args[0].device
    if dev.type != "cuda":
        kern(*args)
        return
    sig = (kern, _env.allow_tf32(),
           tuple((t.dtype, tuple(t.shape), t.stride(), t.data_ptr() % 16 == 0) for t in args))
    with torch.cuda.device(dev):
        if torch.cuda.is_current_stream_capturing():
            if sig not in _WARM:
                raise _capture_error(f"kernel {kern.out.name!r} ({kern.config}) would compile a variant for "
                                     f"shapes {[tuple(t.shape) for t in args]}")
            kern(*args)
            return
        kern(*args)
    with _WARM_LOCK:
        _WARM[sig] = None
        _WARM.move_to_end(sig)
        if len(_WARM) > _WARM_MAX:
            _WARM.popitem(last=False)


# ----------------------------------------------------------------------------- shared checks

def check_same(op: str, names: Sequence[str], tensors: Sequence[torch.Tensor | None]) -> None:
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


def _check_gemm(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                residual: torch.Tensor | None, activation: str | None, ndims: tuple[int, ...]) -> tuple[int, ...]:
    """Checks of a GEMM op's operands; returns the output shape."""
    for n, t in (("a", a), ("b", b)):
        if t.dim() not in ndims:
            raise RuntimeError(f"{op}(): {n} must be a {' or '.join(f'{d}-D' for d in ndims)} tensor, "
                               f"got {n}.shape={tuple(t.shape)}")
    if a.dim() != b.dim():
        raise RuntimeError(f"{op}(): a and b must have the same number of dims, got a.shape={tuple(a.shape)} "
                           f"and b.shape={tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"{op}(): a.shape={tuple(a.shape)} and b.shape={tuple(b.shape)} cannot be multiplied: "
                           f"a's last dim ({a.shape[-1]}) must equal b's second to last ({b.shape[-2]})")
    if a.dim() == 3 and a.shape[0] != b.shape[0]:
        raise RuntimeError(f"{op}(): batch sizes differ: a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)}; "
                           "broadcast (expand) them first, as alcop_triton.matmul does")
    shape = tuple(a.shape[:-1]) + (b.shape[-1],)
    _check_epilogue(op, shape, ("a", "b"), (a, b), bias, residual, activation,
                    f"({shape[-1]},) (one per output column)")
    return shape


def _check_epilogue(op: str, shape: tuple[int, ...], names: tuple[str, str], operands: tuple[torch.Tensor, ...],
                    bias: torch.Tensor | None, residual: torch.Tensor | None, activation: str | None,
                    bias_rule: str) -> None:
    """The fused epilogue's arguments against the output ``shape``; shared by every GEMM-like op."""
    if bias is not None and tuple(bias.shape) != (shape[-1],):
        raise RuntimeError(f"{op}(): bias.shape={tuple(bias.shape)}, expected {bias_rule}")
    if residual is not None and tuple(residual.shape) != shape:
        raise RuntimeError(f"{op}(): residual.shape={tuple(residual.shape)}, expected the output's shape {shape}")
    check_same(op, names + ("bias", "residual"), operands + (bias, residual))
    check_activation(op, activation)


# ----------------------------------------------------------------------------- GEMM

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


def run_gemm(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
             activation: str | None, alpha: float, beta: float, out: torch.Tensor | None) -> torch.Tensor:
    """``act(alpha * a @ b + bias) + beta * residual`` through the DSL matmul kernel (or torch)."""
    shape = tuple(a.shape[:-1]) + (b.shape[-1],)
    if out is None:
        out = a.new_empty(shape)
    if out.numel() == 0:
        return out
    reason = runtime_reason(a, b, bias, residual, out)
    if reason is not None:
        fallback(op, reason)
        out.copy_(torch_gemm(a, b, bias, residual, activation, alpha, beta))
        return out
    k = a.shape[-1]
    cfg = choose_config(a.device, lambda: kmatmul.workload_of(a, b) if k > 0 else None)
    ep = kmatmul.Epilogue(bias is not None, activation, residual is not None, float(alpha), float(beta))
    kern = kmatmul.compiled(dtype_name(a.dtype), a.dim() == 3, ep, cfg)
    if a.dim() == 2:
        launch(kern, [t for t in (a, b, bias, residual, out) if t is not None])
        return out
    # The batch is the grid's second dimension: split batches beyond CUDA's limit of 65535.
    for s in range(0, a.shape[0], CUDA_GRID_Y):
        sl = slice(s, s + CUDA_GRID_Y)
        launch(kern, [t[sl] if t is not bias else t for t in (a, b, bias, residual, out) if t is not None])
    return out


@torch.library.custom_op("alcop::mm", mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
def mm_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_gemm("alcop::mm", a, b, None, None, None, (2,))
    return run_gemm("mm", a, b, None, None, None, 1.0, 1.0, None)


@torch.library.custom_op("alcop::bmm", mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
def bmm_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_gemm("alcop::bmm", a, b, None, None, None, (3,))
    return run_gemm("bmm", a, b, None, None, None, 1.0, 1.0, None)


@torch.library.custom_op("alcop::gemm", mutates_args=(), schema=(
    "(Tensor a, Tensor b, Tensor? bias=None, Tensor? residual=None, str? activation=None, "
    "float alpha=1.0, float beta=1.0) -> Tensor"))
def gemm_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
            activation: str | None = None, alpha: float = 1.0, beta: float = 1.0) -> torch.Tensor:
    _check_gemm("alcop::gemm", a, b, bias, residual, activation, (2, 3))
    return run_gemm("gemm", a, b, bias, residual, activation, alpha, beta, None)


@torch.library.custom_op("alcop::gemm_out", mutates_args=("out",), schema=(
    "(Tensor a, Tensor b, Tensor? bias, Tensor? residual, str? activation, float alpha, float beta, "
    "Tensor(a!) out) -> ()"))
def gemm_out_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                activation: str | None, alpha: float, beta: float, out: torch.Tensor) -> None:
    _check_gemm_out(a, b, bias, residual, activation, out)
    run_gemm("gemm_out", a, b, bias, residual, activation, alpha, beta, out)


def _check_gemm_out(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                    activation: str | None, out: torch.Tensor) -> None:
    shape = _check_gemm("alcop::gemm_out", a, b, bias, residual, activation, (2, 3))
    if tuple(out.shape) != shape:
        raise RuntimeError(f"alcop::gemm_out(): out.shape={tuple(out.shape)}, expected {shape}")
    check_same("alcop::gemm_out", ("a", "out"), (a, out))


@mm_op.register_fake
def _mm_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty(_check_gemm("alcop::mm", a, b, None, None, None, (2,)))


@bmm_op.register_fake
def _bmm_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty(_check_gemm("alcop::bmm", a, b, None, None, None, (3,)))


@gemm_op.register_fake
def _gemm_fake(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
               residual: torch.Tensor | None = None, activation: str | None = None, alpha: float = 1.0,
               beta: float = 1.0) -> torch.Tensor:
    return a.new_empty(_check_gemm("alcop::gemm", a, b, bias, residual, activation, (2, 3)))


@gemm_out_op.register_fake
def _gemm_out_fake(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                   activation: str | None, alpha: float, beta: float, out: torch.Tensor) -> None:
    _check_gemm_out(a, b, bias, residual, activation, out)


def vjp_fn(fn: Callable[..., Any], *primals: torch.Tensor) -> Callable[..., Any]:
    """The vector-Jacobian product function of ``torch.func.vjp(fn, *primals)`` (its output is not needed).

    torch annotates vjp's result as one type for both ``(output, vjp_fn)`` and has_aux's
    ``(output, vjp_fn, aux)``; the vjp function is item 1 of either.
    """
    return torch.func.vjp(fn, *primals)[1]


def activation_grad(activation: str | None, grad: torch.Tensor, out: torch.Tensor | None,
                    pre_activation: Callable[[], torch.Tensor]) -> torch.Tensor:
    """dL/dz for ``out = act(z)``: relu from the saved output, else act'(z) with z recomputed."""
    if activation is None:
        return grad
    if activation == "relu" and out is not None:
        return torch.where(out > 0, grad, torch.zeros_like(grad))
    return vjp_fn(TORCH_ACTIVATIONS[activation], pre_activation())(grad)[0]


def _keeps_output(activation: str | None, residual: torch.Tensor | None) -> bool:
    # relu's derivative is readable from its output (out > 0 iff z > 0) unless a residual was added.
    return activation == "relu" and residual is None


def _mm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _mm_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    a, b = ctx.saved_tensors
    op = torch.ops.alcop.mm if a.dim() == 2 else torch.ops.alcop.bmm
    da = op(grad, b.mT) if ctx.needs_input_grad[0] else None  # dA = dC @ B^T: B^T is a strided view
    db = op(a.mT, grad) if ctx.needs_input_grad[1] else None  # dB = A^T @ dC
    return da, db


def _gemm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    a, b, bias, residual, activation, alpha, beta = inputs
    ctx.activation, ctx.alpha, ctx.beta, ctx.has_residual = activation, alpha, beta, residual is not None
    ctx.save_for_backward(a, b, bias, output if _keeps_output(activation, residual) else None)


def _gemm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    a, b, bias, out = ctx.saved_tensors
    need = ctx.needs_input_grad
    dz = activation_grad(ctx.activation, grad, out,
                         lambda: torch.ops.alcop.gemm(a, b, bias, None, None, ctx.alpha, 1.0))
    da = torch.ops.alcop.gemm(dz, b.mT, None, None, None, ctx.alpha, 1.0) if need[0] else None
    db = torch.ops.alcop.gemm(a.mT, dz, None, None, None, ctx.alpha, 1.0) if need[1] else None
    dbias = dz.sum(dim=tuple(range(dz.dim() - 1))) if need[2] else None
    dres = (grad * ctx.beta if ctx.beta != 1.0 else grad) if ctx.has_residual and need[3] else None
    return da, db, dbias, dres, None, None, None


mm_op.register_autograd(_mm_backward, setup_context=_mm_setup)
bmm_op.register_autograd(_mm_backward, setup_context=_mm_setup)
gemm_op.register_autograd(_gemm_backward, setup_context=_gemm_setup)


# ----------------------------------------------------------------------------- linear

def _check_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                  activation: str | None) -> tuple[int, ...]:
    op = "alcop::linear"
    if x.dim() < 1:
        raise RuntimeError(f"{op}(): input must have at least 1 dim, got a 0-d tensor")
    if w.dim() != 2:
        raise RuntimeError(f"{op}(): weight must be 2-D (out_features, in_features), got weight.shape={tuple(w.shape)}")
    if x.shape[-1] != w.shape[1]:
        raise RuntimeError(f"{op}(): input.shape={tuple(x.shape)} and weight.shape={tuple(w.shape)}: input's last "
                           f"dim ({x.shape[-1]}) must equal in_features = weight.shape[1] ({w.shape[1]})")
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    _check_epilogue(op, shape, ("input", "weight"), (x, w), bias, residual, activation,
                    f"({w.shape[0]},) = (out_features,)")
    return shape


@torch.library.custom_op("alcop::linear", mutates_args=(), schema=(
    "(Tensor input, Tensor weight, Tensor? bias=None, Tensor? residual=None, str? activation=None) -> Tensor"))
def linear_op(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
              residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    shape = _check_linear(x, w, bias, residual, activation)
    rows = math.prod(shape[:-1])  # explicit: reshape(-1, 0) is ambiguous for empty features
    x2 = x.reshape(rows, w.shape[1])
    r2 = residual.reshape(rows, w.shape[0]) if residual is not None else None
    return run_gemm("linear", x2, w.t(), bias, r2, activation, 1.0, 1.0, None).view(shape)


@linear_op.register_fake
def _linear_fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                 residual: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    return x.new_empty(_check_linear(x, w, bias, residual, activation))


def _linear_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, bias, residual, activation = inputs
    ctx.activation, ctx.has_residual = activation, residual is not None
    ctx.save_for_backward(x, w, bias, output if _keeps_output(activation, residual) else None)


def _linear_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, w, bias, out = ctx.saved_tensors
    need = ctx.needs_input_grad
    dz = activation_grad(ctx.activation, grad, out, lambda: torch.ops.alcop.linear(x, w, bias, None, None))
    rows = math.prod(x.shape[:-1])
    dz2 = dz.reshape(rows, w.shape[0])
    dx = torch.ops.alcop.mm(dz2, w).view(x.shape) if need[0] else None
    dw = torch.ops.alcop.mm(dz2.t(), x.reshape(rows, w.shape[1])) if need[1] else None
    dbias = dz2.sum(0) if need[2] else None
    dres = grad if ctx.has_residual and need[3] else None
    return dx, dw, dbias, dres, None


linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)


# ----------------------------------------------------------------------------- convolution

def conv_output_size(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], pad_left: Sequence[int],
                     pad_right: Sequence[int], dilation: Sequence[int]) -> list[int]:
    return [(x.shape[2 + i] + pad_left[i] + pad_right[i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
            for i in range(x.dim() - 2)]


def is_channels_last(x: torch.Tensor) -> bool:
    """kernels/conv.py's rule: channels are the unit-stride dim (NHWC/NDHWC storage)."""
    return bool(x.dim() > 3 and x.stride(1) == 1 and x.shape[1] > 1)  # bool(): a guard when shapes are symbolic


def _empty_like_layout(like: torch.Tensor, shape: Sequence[int], channels_last: bool) -> torch.Tensor:
    """An (N, C, *spatial) tensor stored channels-last when ``channels_last`` (as the input is)."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(len(shape)) if channels_last else None
    return torch.empty(shape, dtype=like.dtype, device=like.device, memory_format=fmt or torch.contiguous_format)


def _check_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
                activation: str | None) -> list[int]:
    op = "alcop::conv"
    nd = x.dim() - 2
    if nd not in (1, 2, 3):
        raise RuntimeError(f"{op}(): input must be (N, C, *spatial) with 1 to 3 spatial dims, got input.shape="
                           f"{tuple(x.shape)}")
    if w.dim() != x.dim():
        raise RuntimeError(f"{op}(): weight must be (C_out, C_in / groups, *kernel) with {nd} kernel dims, got "
                           f"weight.shape={tuple(w.shape)}")
    for name, v, low in (("stride", stride, 1), ("pad_left", pad_left, 0), ("pad_right", pad_right, 0),
                         ("dilation", dilation, 1)):
        if len(v) != nd or any(int(s) < low for s in v):
            raise RuntimeError(f"{op}(): {name}={list(v)}: expected {nd} values >= {low}")
    if groups < 1 or w.shape[0] % groups or x.shape[1] != w.shape[1] * groups:
        raise RuntimeError(f"{op}(): groups={groups} with weight.shape={tuple(w.shape)} and input.shape="
                           f"{tuple(x.shape)}: groups must divide C_out and input channels must be "
                           "weight.shape[1] * groups")
    if bias is not None and tuple(bias.shape) != (w.shape[0],):
        raise RuntimeError(f"{op}(): bias.shape={tuple(bias.shape)}, expected ({w.shape[0]},) = (C_out,)")
    check_same(op, ("input", "weight", "bias"), (x, w, bias))
    check_activation(op, activation)
    out = conv_output_size(x, w, stride, pad_left, pad_right, dilation)
    if any(o <= 0 for o in out):
        raise RuntimeError(f"{op}(): input.shape={tuple(x.shape)} padded by {list(pad_left)}/{list(pad_right)} is "
                           f"smaller than the dilated kernel {tuple(w.shape[2:])} (dilation {list(dilation)})")
    return [x.shape[0], w.shape[0], *out]


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


def _conv_workload(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], pad_left: Sequence[int],
                   pad_right: Sequence[int], dilation: Sequence[int], groups: int) -> Workload | None:
    # The dispatcher's key has one pad per conv; an asymmetric one ('same', even kernels) rounds up.
    pad = tuple((lo + hi + 1) // 2 for lo, hi in zip(pad_left, pad_right))
    try:
        return kconv.workload_of(x, w, tuple(stride), pad, tuple(dilation), groups)
    except ValueError:  # the symmetric stand-in has an empty GEMM view: no record can match it
        return None


@torch.library.custom_op("alcop::conv", mutates_args=(), schema=(
    "(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] pad_left, int[] pad_right, int[] dilation, "
    "int groups, str? activation=None) -> Tensor"))
def conv_op(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
            pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
            activation: str | None = None) -> torch.Tensor:
    shape = _check_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation)
    out = _empty_like_layout(x, shape, is_channels_last(x))
    if out.numel() == 0:
        return out
    reason = runtime_reason(x, w, bias, out)
    if reason is None and groups > CUDA_GRID_Y:
        reason = f"groups={groups}: the groups are the grid's second dimension, limited to {CUDA_GRID_Y} by CUDA"
    if reason is not None:
        fallback("conv", reason)
        out.copy_(torch_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation))
        return out
    cfg = choose_config(x.device, lambda: _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups)
                        if w[0].numel() > 0 else None)
    p = kconv.ConvParams(x.dim() - 2, tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation), groups,
                         is_channels_last(x), bias is not None, activation)
    kern = kconv.compiled(dtype_name(x.dtype), p, cfg)
    co = w.shape[0]
    launch(kern, [t for t in (x, w, bias) if t is not None] + [out.unflatten(1, (groups, co // groups))])
    return out


@conv_op.register_fake
def _conv_fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
               pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
               activation: str | None = None) -> torch.Tensor:
    shape = _check_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation)
    return _empty_like_layout(x, shape, is_channels_last(x))


def _conv_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, bias, stride, pad_left, pad_right, dilation, groups, activation = inputs
    ctx.params = (tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation), groups)
    ctx.activation = activation
    ctx.save_for_backward(x, w, bias, output if activation == "relu" else None)


def _conv_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, w, bias, out = ctx.saved_tensors
    stride, pad_left, pad_right, dilation, groups = ctx.params
    need = ctx.needs_input_grad
    dz = activation_grad(ctx.activation, grad, out, lambda: torch.ops.alcop.conv(
        x, w, bias, stride, pad_left, pad_right, dilation, groups, None))
    dx = dw = None
    if need[0]:
        key = conv_input_grad_kernel(x.dim() - 2, x.dtype, stride, pad_left, dilation, groups, is_channels_last(x))
        dx = torch.ops.alcop.dsl_call(key, [dz, x, w]).flatten(1, 2)
    if need[1]:
        key = conv_weight_grad_kernel(x.dim() - 2, x.dtype, stride, pad_left, dilation, groups)
        dw = torch.ops.alcop.dsl_call(key, [dz, x, w]).flatten(0, 1)
    dbias = dz.sum(dim=[0] + list(range(2, dz.dim()))) if need[2] else None
    return dx, dw, dbias, None, None, None, None, None, None


conv_op.register_autograd(_conv_backward, setup_context=_conv_setup)


# ----------------------------------------------------------------------------- registered DSL kernels

@dataclass(frozen=True)
class DslKernel:
    """A tensor expression run by ``alcop::dsl_call(key, inputs)``.

    Attributes:
        key: ``kernel_key(kind, params)``: a string, so it can be a constant in a traced graph,
            from which the kind's resolver rebuilds the kernel in any process.
        build: returns (placeholders in call order, output tensor). Placeholders that the body
            does not read still bind size variables: they pass a tensor only for its shape.
        m_axes, n_axes: output axes tiled as rows / columns (default: the last two).
        out_order: the output's physical dim order, outermost first (default: row-major).
        config: a fixed config (default: the dispatcher's, on the GEMM view as a matmul/bmm).
        reference: the same computation in torch, used when alcop cannot run the inputs.
        static: size variables compiled in as constants (``build(static=...)``: one variant per
            value, index math by constants, so Triton can prove loads contiguous).
    """
    key: str
    build: Callable[[], tuple[list[te.Tensor], te.Tensor]]
    m_axes: tuple[str, ...] | None = None
    n_axes: tuple[str, ...] | None = None
    out_order: tuple[int, ...] | None = None
    config: KernelConfig | None = None
    reference: Callable[[Sequence[torch.Tensor]], torch.Tensor] | None = None
    static: tuple[str, ...] = ()


_DSL: dict[str, DslKernel] = {}
_DSL_TE: dict[str, tuple[list[te.Tensor], te.Tensor]] = {}
_DSL_COMPILED: dict[tuple[str, KernelConfig], CompiledKernel] = {}
_RESOLVERS: dict[str, Callable[[str, dict[str, Any]], DslKernel]] = {}
DSL_LOCK = threading.RLock()  # guards the registry and builds (re-entrant: resolvers build other keys)


def kernel_key(kind: str, params: Mapping[str, Any]) -> str:
    """A self-describing key: ``kind|{json params}``. A compiled graph loaded from torch's caches
    holds only the key, so ``dsl_te`` must be able to rebuild the kernel from it alone."""
    return f"{kind}|{json.dumps(params, sort_keys=True, separators=(',', ':'))}"


def register_resolver(kind: str, resolve: Callable[[str, dict[str, Any]], DslKernel]) -> None:
    """``resolve(key, params)`` builds the DslKernel of any key of this kind."""
    _RESOLVERS[kind] = resolve


def dsl_kernel(key: str) -> DslKernel:
    """The kernel registered as ``key``, resolved from the key itself on first use."""
    spec = _DSL.get(key)
    if spec is not None:
        return spec
    kind, _, params = key.partition("|")
    resolve = _RESOLVERS.get(kind)
    if resolve is None or not params:
        raise RuntimeError(f"alcop::dsl_call: no DSL kernel can be built for key {key!r}: kind {kind!r} is not "
                           "registered in this process (define the alcop_triton.op it belongs to first)")
    with DSL_LOCK:
        if key not in _DSL:
            spec = resolve(key, json.loads(params))
            if spec.key != key:
                raise RuntimeError(f"alcop::dsl_call: resolver of {kind!r} built {spec.key!r} for {key!r}")
            _DSL[key] = spec
        return _DSL[key]


def dsl_te(key: str) -> tuple[DslKernel, list[te.Tensor], te.Tensor]:
    spec = dsl_kernel(key)
    with DSL_LOCK:
        if key not in _DSL_TE:
            _DSL_TE[key] = spec.build()
    inputs, out = _DSL_TE[key]
    return spec, inputs, out


def bind(op: str, inputs: Sequence[te.Tensor], tensors: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Size variables from tensor shapes (SymInts when tracing), checking ranks, dtypes and agreement."""
    if len(tensors) != len(inputs):
        raise RuntimeError(f"{op}: expected {len(inputs)} tensors ({', '.join(t.name for t in inputs)}), "
                           f"got {len(tensors)}")
    env: dict[str, Any] = {}
    for ph, x in zip(inputs, tensors):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{op}: argument {ph.name!r} must be a Tensor, not {type(x).__name__}")
        if x.dim() != ph.ndim:
            raise RuntimeError(f"{op}: argument {ph.name!r} must be {ph.ndim}-D {tuple(ph.shape)}, "
                               f"got shape {tuple(x.shape)}")
        if dtype_name(x.dtype) != ph.dtype:
            raise RuntimeError(f"{op}: argument {ph.name!r} must have dtype {ph.dtype}, got {dtype_name(x.dtype)}")
        for d, (e, n) in enumerate(zip(ph.shape, x.shape)):
            if isinstance(e, te.Var):
                if e.name not in env:
                    env[e.name] = n
                elif env[e.name] != n:
                    raise RuntimeError(f"{op}: argument {ph.name!r} dim {d} is {n} but {e.name} = {env[e.name]} "
                                       "from an earlier argument; the shapes must agree")
    for ph, x in zip(inputs, tensors):
        for d, (e, n) in enumerate(zip(ph.shape, x.shape)):
            if not isinstance(e, te.Var) and te.evaluate(e, env) != n:
                raise RuntimeError(f"{op}: argument {ph.name!r} dim {d} is {n}, expected {e!r} = "
                                   f"{te.evaluate(e, env)}")
    return env


def _size(e: te.Expr, env: dict[str, Any]) -> int:
    """A size expression's value: an int (a SymInt while tracing). Shapes are integer expressions
    (``te`` checks their dtype), so they never evaluate to a float."""
    v = te.evaluate(e, env)
    assert not isinstance(v, float), f"size {e!r} evaluated to the float {v!r}"
    return v


def dsl_output(spec: DslKernel, out: te.Tensor, env: dict[str, Any], like: torch.Tensor) -> torch.Tensor:
    shape = [_size(d, env) for d in out.shape]
    dtype = getattr(torch, out.dtype)
    if spec.out_order is None:
        return torch.empty(shape, dtype=dtype, device=like.device)
    phys = torch.empty([shape[i] for i in spec.out_order], dtype=dtype, device=like.device)
    return phys.permute([spec.out_order.index(d) for d in range(len(shape))])


@functools.lru_cache(maxsize=1024)
def _reduction_of(out: te.Tensor) -> tuple[te.ComputeOp, te.Reduce]:
    """The output's compute and its reduction's te.sum."""
    red = Schedule(out).reduction
    # A reduction is a compute whose body is a te.Reduce (Schedule's definition): the last two checks narrow.
    if red is None or not isinstance(out.op, te.ComputeOp) or not isinstance(red.op, te.ComputeOp) \
            or not isinstance(red.op.body, te.Reduce):
        raise UnsupportedError(f"{out.name!r} has no te.sum: alcop kernels are contractions")
    return out.op, red.op.body


def gemm_view(out: te.Tensor, m_axes: tuple[str, ...] | None, n_axes: tuple[str, ...] | None,
              env: dict[str, Any]) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a DSL kernel's tiled contraction, lower()'s default axis roles."""
    out_op, rsum = _reduction_of(out)
    axes = {a.name: a.extent for a in out_op.axes}
    names = list(axes)
    n = n_axes if n_axes is not None else tuple(names[-1:]) if len(names) >= 2 else ()
    m = m_axes if m_axes is not None else tuple(x for x in names[-2:-1] if x not in n) if len(names) >= 2 \
        else tuple(names)
    size = lambda axs: math.prod(int(te.evaluate(axes[a], env)) for a in axs)  # noqa: E731
    b = size([a for a in names if a not in m and a not in n])
    k = math.prod(int(te.evaluate(a.extent, env)) for a in rsum.axes)
    return b, size(m), size(n), k


def _dsl_workload(out: te.Tensor, spec: DslKernel, env: dict[str, Any], inputs: Sequence[te.Tensor]) -> Workload | None:
    b, m, n, k = gemm_view(out, spec.m_axes, spec.n_axes, env)
    if min(b, m, n, k) <= 0:
        return None
    dtype = next((t.dtype for t in inputs if t.dtype in ("float16", "bfloat16")), "float32")
    return Workload("bmm", (b, m, n, k), dtype) if b > 1 else Workload("matmul", (m, n, k), dtype)


def run_dsl(key: str, tensors: Sequence[torch.Tensor], op: str = "dsl_call") -> torch.Tensor:
    """Run the registered DSL kernel ``key`` on real tensors (the impl of ``alcop::dsl_call``)."""
    spec, inputs, out_te = dsl_te(key)
    env = bind(f"{op}[{key}]", inputs, tensors)
    out = dsl_output(spec, out_te, env, tensors[0])
    if out.numel() == 0:
        return out
    allowed = SUPPORTED_DTYPES + (torch.int32, torch.int64, torch.bool)
    reason = runtime_reason(*tensors, out, dtypes=SUPPORTED_DTYPES if spec.reference else allowed)
    if reason is not None:
        if spec.reference is None:
            raise UnsupportedError(f"{op} ({key}): {reason}; this kernel has no torch equivalent to fall back to")
        fallback(op, reason)
        out.copy_(spec.reference(tensors))
        return out
    cfg = spec.config or choose_config(out.device, lambda: _dsl_workload(out_te, spec, env, inputs))
    with DSL_LOCK:
        kern = _DSL_COMPILED.get((key, cfg))
        if kern is None:
            sched = Schedule.from_config(out_te, cfg, m_axes=spec.m_axes, n_axes=spec.n_axes)
            kern = _DSL_COMPILED[(key, cfg)] = build(sched, list(inputs) + [out_te], static=spec.static)
    launch(kern, list(tensors) + [out])
    return out


@torch.library.custom_op("alcop::dsl_call", mutates_args=(), schema="(str kernel, Tensor[] inputs) -> Tensor")
def dsl_call_op(kernel: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    return run_dsl(kernel, inputs)


@dsl_call_op.register_fake
def _dsl_call_fake(kernel: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    spec, phs, out = dsl_te(kernel)
    return dsl_output(spec, out, bind(f"dsl_call[{kernel}]", phs, inputs), inputs[0])


# ----------------------------------------------------------------------------- convolution gradients

SPATIAL = kconv.SPATIAL


@dataclass(frozen=True)
class _ConvGradTensors:
    """Placeholders both conv gradients read: dY, X and W in torch's logical layouts."""
    sp: list[str]
    S: list[te.Var]
    KS: list[te.Var]
    O: list[te.Var]
    N: te.Var
    cg: te.Expr
    cog: te.Expr
    dy: te.Tensor
    x: te.Tensor
    w: te.Tensor


def _conv_grad_tensors(nd: int, dtype: str, groups: int) -> _ConvGradTensors:
    sp = list(SPATIAL[nd])
    S, KS, O = ([te.var(f"{p}{x.upper()}") for x in sp] for p in ("", "K", "O"))
    N, C, CO = te.var("N"), te.var("C"), te.var("CO")
    cg, cog = te.binop("//", C, groups), te.binop("//", CO, groups)
    return _ConvGradTensors(sp, S, KS, O, N, cg, cog, te.placeholder((N, CO, *O), dtype, "dY"),
                            te.placeholder((N, C, *S), dtype, "X"), te.placeholder((CO, cg, *KS), dtype, "Wt"))


def conv_input_grad_te(nd: int, dtype: str, stride: tuple[int, ...], pad: tuple[int, ...],
                       dilation: tuple[int, ...], groups: int,
                       channels_last: bool) -> tuple[list[te.Tensor], te.Tensor]:
    """dX[n, g, c, *i] = sum_{co, *r} dY[n, g*COg + co, (i + p - r*d) / s] * W[g*COg + co, c, *r].

    Only output positions o with o*s = i + p - r*d contribute. The index of dY is written so that
    it falls outside dY whenever s does not divide (i + p - r*d): quotient + remainder * BIG, with
    BIG = O + K*d larger than any quotient's distance from [0, O) (floor or truncating division
    alike); an outside index reads 0, so no branch is needed. X is passed for its shape only
    (before W, whose shape C // groups refers to it: CompiledKernel binds sizes in argument order).
    """
    t = _conv_grad_tensors(nd, dtype, groups)
    sp, S, KS, O, N, cg, cog, dy, x, w = t.sp, t.S, t.KS, t.O, t.N, t.cg, t.cog, t.dy, t.x, t.w
    rco = te.reduce_axis(cog, "rco")
    rs = [te.reduce_axis(KS[i], f"r{s}") for i, s in enumerate(sp)]
    raxes = rs + [rco] if channels_last else [rco] + rs  # the unit-stride channel innermost when NHWC

    def body(n: te.Expr, g: te.Expr, c: te.Expr, *i: te.Expr) -> te.Expr:
        oi: list[te.Expr] = []
        for d in range(nd):
            t = i[d] + pad[d] - rs[d] * dilation[d]
            oi.append(t if stride[d] == 1 else t // stride[d] + (t % stride[d]) * (O[d] + KS[d] * dilation[d]))
        return te.sum(dy[(n, g * cog + rco, *oi)] * w[(g * cog + rco, c, *rs)], axis=raxes)

    out = te.compute((N, te.Const(groups), cg, *S), body, "dX", axis_names=["n", "g", "c"] + [f"i{s}" for s in sp])
    return [dy, x, w], out


def conv_weight_grad_te(nd: int, dtype: str, stride: tuple[int, ...], pad: tuple[int, ...],
                        dilation: tuple[int, ...], groups: int) -> tuple[list[te.Tensor], te.Tensor]:
    """dW[g, co, c, *r] = sum_{n, *o} dY[n, g*COg + co, *o] * X[n, g*Cg + c, o*s - p + r*d] (W for its shape)."""
    t = _conv_grad_tensors(nd, dtype, groups)
    sp, KS, O, N, cg, cog, dy, x, w = t.sp, t.KS, t.O, t.N, t.cg, t.cog, t.dy, t.x, t.w
    rn = te.reduce_axis(N, "rn")
    ro = [te.reduce_axis(O[i], f"ro{s}") for i, s in enumerate(sp)]

    def body(g: te.Expr, co: te.Expr, c: te.Expr, *r: te.Expr) -> te.Expr:
        xi = [ro[d] * stride[d] - pad[d] + r[d] * dilation[d] for d in range(nd)]
        return te.sum(dy[(rn, g * cog + co, *ro)] * x[(rn, g * cg + c, *xi)], axis=[rn, *ro])

    out = te.compute((te.Const(groups), cog, cg, *KS), body, "dW", axis_names=["g", "co", "c"] + [f"k{s}" for s in sp])
    return [dy, x, w], out


def _conv_grads_torch(which: int, nd: int, stride: tuple[int, ...], pad: tuple[int, ...],
                      dilation: tuple[int, ...], groups: int, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Torch's input (which=0) or weight (which=1) gradient, for inputs alcop cannot run."""
    dy, x, w = tensors
    # pad_right only shapes dY; recover it from dY's extent so the forward reproduces dY's shape.
    pad_right = [(dy.shape[2 + i] - 1) * stride[i] + dilation[i] * (w.shape[2 + i] - 1) + 1 - x.shape[2 + i] - pad[i]
                 for i in range(nd)]
    crop = [max(0, -p) for p in pad_right]
    xs = x[(slice(None), slice(None)) + tuple(slice(0, x.shape[2 + i] - crop[i]) for i in range(nd))]
    pr = [max(0, p) for p in pad_right]
    fn = lambda xx, ww: torch_conv(xx, ww, None, stride, pad, pr, dilation, groups, None)  # noqa: E731
    dx, dw = vjp_fn(fn, xs, w)(dy)
    if which == 1:
        return dw.unflatten(0, (groups, w.shape[0] // groups))
    full = torch.zeros_like(x)
    full[(slice(None), slice(None)) + tuple(slice(0, x.shape[2 + i] - crop[i]) for i in range(nd))] = dx
    return full.unflatten(1, (groups, x.shape[1] // groups))


def _conv_grad_spec(key: str, p: dict[str, Any]) -> DslKernel:
    nd, dt, groups = p["nd"], p["dtype"], p["groups"]
    s, pad, d = tuple(p["stride"]), tuple(p["pad"]), tuple(p["dilation"])
    # Channels and window as constants, as kernels/conv.py does for the forward.
    static = ("C", "CO") + tuple(f"K{x.upper()}" for x in SPATIAL[nd])
    if p["grad"] == "input":
        cl = p["channels_last"]
        return DslKernel(
            key, functools.partial(conv_input_grad_te, nd, dt, s, pad, d, groups, cl),
            m_axes=("n",) + tuple(f"i{x}" for x in SPATIAL[nd]), n_axes=("c",),
            out_order=(0, *range(3, 3 + nd), 1, 2) if cl and nd > 1 else None,
            reference=functools.partial(_conv_grads_torch, 0, nd, s, pad, d, groups), static=static)
    return DslKernel(
        key, functools.partial(conv_weight_grad_te, nd, dt, s, pad, d, groups),
        m_axes=("co",), n_axes=("c",) + tuple(f"k{x}" for x in SPATIAL[nd]),
        reference=functools.partial(_conv_grads_torch, 1, nd, s, pad, d, groups), static=static)


register_resolver("alcop::conv_grad", _conv_grad_spec)


def conv_input_grad_kernel(nd: int, dtype: torch.dtype, stride: Sequence[int], pad: Sequence[int],
                           dilation: Sequence[int], groups: int, channels_last: bool) -> str:
    """The ``alcop::dsl_call`` key of the conv input-gradient kernel for these parameters."""
    return kernel_key("alcop::conv_grad", dict(grad="input", nd=nd, dtype=dtype_name(dtype), stride=list(stride),
                                               pad=list(pad), dilation=list(dilation), groups=groups,
                                               channels_last=channels_last))


def conv_weight_grad_kernel(nd: int, dtype: torch.dtype, stride: Sequence[int], pad: Sequence[int],
                            dilation: Sequence[int], groups: int) -> str:
    """The ``alcop::dsl_call`` key of the conv weight-gradient kernel for these parameters."""
    return kernel_key("alcop::conv_grad", dict(grad="weight", nd=nd, dtype=dtype_name(dtype), stride=list(stride),
                                               pad=list(pad), dilation=list(dilation), groups=groups))
