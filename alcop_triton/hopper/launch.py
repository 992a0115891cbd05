"""Host side of the generated sm90 GEMM kernels: source -> kernel cache, TMA descriptors, grid, launch.

``matmul(a, b)`` multiplies fp16/bf16 CUDA matrices on an sm90+ GPU. The kernel source goes through the
package's verified loader (``runtime.load_kernel``: written to the kernel cache, read back, run from the
verified text), since ``@gluon.jit`` reads source from a real file. Each operand is described as it is
stored, so all four layouts run without a copy when TMA's rules hold (16-byte aligned base, every stride
but the unit one a multiple of 16 bytes); otherwise the operand is copied once into a row-padded buffer
whose view has the same shape (TMA reads only the view's extents, so the padding is never read).
"""

from __future__ import annotations

import functools
from typing import Any

from ..runtime import load_kernel
from .config import HopperConfig
from .emit import KernelSource, emit
from .plan import HopperPlan, plan

TORCH_DTYPES = ("float16", "bfloat16")


def stored_layout(x: Any) -> str | None:
    """'n' for a row-major (unit stride last) matrix, 't' for a column-major one, None for neither."""
    if x.stride(1) == 1 and (x.shape[0] == 1 or x.stride(0) >= max(1, x.shape[1])):
        return "n"
    if x.stride(0) == 1 and (x.shape[1] == 1 or x.stride(1) >= max(1, x.shape[0])):
        return "t"
    return None


def _tma_ready(x: Any) -> bool:
    """TMA's rules on a 2-d view: 16-byte aligned base, the non-unit stride a multiple of 16 bytes."""
    e = x.element_size()
    outer = x.stride(0) if x.stride(1) == 1 else x.stride(1)
    return x.data_ptr() % 16 == 0 and (outer * e) % 16 == 0


def _padded(x: Any) -> Any:
    """A row-major copy of ``x`` whose rows start 16-byte aligned (same shape; padding never read)."""
    import torch
    rows, cols = x.shape
    step = 16 // x.element_size()
    buf = torch.empty(rows, -(-cols // step) * step, dtype=x.dtype, device=x.device)
    view = buf[:, :cols]
    view.copy_(x)
    return view


def _operand(x: Any) -> tuple[Any, str]:
    """(the math operand as the kernel reads it, its stored layout): itself where TMA can describe its
    storage, else a row-major padded copy."""
    lay = stored_layout(x)
    if lay is None or not _tma_ready(x):
        x, lay = _padded(x), "n"
    return x, lay


def gl_descriptor(x: Any, block: list[int]) -> Any:
    """A Gluon TMA descriptor over the 2-d stored matrix ``x`` (unit stride last) with copies of ``block``
    and the NVMMA shared layout the kernel's ring allocates (the largest swizzle the block allows)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    dt = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[x.dtype]
    return TensorDescriptor(x, list(x.shape), list(x.stride()), block,
                            gl.NVMMASharedLayout.get_default_for(block, dt))


def descriptor_dims(layout: str, cfg: HopperConfig, epilogue_tensors: int) -> tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]:
    """The kernel's TMA descriptors as ``(tensor index, dims, block)`` over its tensors (A, B as the math
    operands, then ``epilogue_tensors`` of bias and residual, then C), ``runtime.tma_descriptor``'s terms: a "t" operand is described as it is stored
    (dims (1, 0): its unit-stride dim last), C in column slices of ``epilogue_subtile``."""
    a_dims, a_box = ((0, 1), (cfg.block_m, cfg.block_k)) if layout[0] == "n" else ((1, 0), (cfg.block_k, cfg.block_m))
    b_dims, b_box = ((0, 1), (cfg.block_k, cfg.block_n)) if layout[1] == "n" else ((1, 0), (cfg.block_n, cfg.block_k))
    c_box = (cfg.block_m, cfg.block_n // cfg.epilogue_subtile)
    return ((0, a_dims, a_box), (1, b_dims, b_box), (2 + epilogue_tensors, (0, 1), c_box))


def launch_args(ks: KernelSource, a: Any, b: Any, c: Any, bias: Any = None, residual: Any = None
                ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The kernel's positional arguments and launch options for ``c = a @ b`` (+ epilogue): the tensors
    (A, B, [bias,] [residual,] C), then Gluon descriptors of A and B as stored ("t": the transposed
    storage) and of C with the config's boxes, then the sizes."""
    cfg = ks.plan.config
    m, k = a.shape
    n = b.shape[1]
    ep = (*((bias,) if ks.bias else ()), *((residual,) if ks.residual else ()))
    tensors = (a, b, *ep, c)
    descs = tuple(gl_descriptor(tensors[i].permute(*dims), list(block))
                  for i, dims, block in descriptor_dims(ks.layout, cfg, len(ep)))
    args = (*tensors, *descs, m, n, k)
    options: dict[str, Any] = {"num_warps": cfg.num_warps}
    if cfg.maxnreg:
        options["maxnreg"] = cfg.maxnreg
    return args, options


def grid(cfg: HopperConfig, m: int, n: int, sms: int) -> tuple[int]:
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    return (max(1, min(tiles, sms)) if cfg.persistent else tiles, )


@functools.lru_cache(maxsize=256)
def source(p: HopperPlan, dtype: str, layout: str, bias: bool, activation: str | None,
           residual: bool = False) -> KernelSource:
    return emit(p, dtype, layout, bias=bias, activation=activation, residual=residual)


def kernel(ks: KernelSource) -> Any:
    """The ``@gluon.jit`` function of ``ks`` (written to the kernel cache and loaded from the verified text)."""
    fn, _ = load_kernel(ks.source, ks.name)
    return fn


def matmul(a: Any, b: Any, *, config: HopperConfig | None = None, bias: Any = None,
           activation: str | None = None, residual: Any = None, out: Any = None) -> Any:
    """``act(a @ b + bias) + residual`` (each part optional; ``activation`` one of ``emit.ACTIVATIONS``) for
    2-d fp16/bf16 CUDA tensors on an sm90+ GPU,
    by the generated kernel of ``plan(m, n, k, config)``; the output has the inputs' dtype (written into
    ``out``, a contiguous (m, n) tensor of that dtype and device, where given)."""
    import torch
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"hopper matmul: a and b must be tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"hopper matmul: a and b must be 2-d, got a.dim()={a.dim()}, b.dim()={b.dim()}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"hopper matmul: a ({a.shape[0]}x{a.shape[1]}) and b ({b.shape[0]}x{b.shape[1]}) "
                           "cannot be multiplied: a.shape[1] must equal b.shape[0]")
    if a.dtype != b.dtype or str(a.dtype).removeprefix("torch.") not in TORCH_DTYPES:
        raise TypeError(f"hopper matmul: dtypes a={a.dtype}, b={b.dtype}: both must be torch.float16 or both "
                        "torch.bfloat16 (wgmma on 16-bit inputs)")
    if a.device.type != "cuda" or b.device != a.device:
        raise RuntimeError(f"hopper matmul: devices a={a.device}, b={b.device}: both must be on the same CUDA device")
    if torch.cuda.get_device_capability(a.device) < (9, 0):
        raise RuntimeError(f"hopper matmul: {torch.cuda.get_device_name(a.device)} is sm"
                           f"{''.join(map(str, torch.cuda.get_device_capability(a.device)))}: the kernel needs "
                           "TMA and wgmma (sm90+)")
    m, k = a.shape
    n = b.shape[1]
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.shape != (n,) or bias.dtype != a.dtype or bias.device != a.device:
            raise ValueError(f"hopper matmul: bias must be a ({n},) {a.dtype} tensor on {a.device}, got "
                             f"{getattr(bias, 'shape', type(bias).__name__)}")
        bias = bias.contiguous()
    if residual is not None:
        if (not isinstance(residual, torch.Tensor) or tuple(residual.shape) != (m, n) or residual.dtype != a.dtype
                or residual.device != a.device):
            raise ValueError(f"hopper matmul: residual must be a ({m}, {n}) {a.dtype} tensor on {a.device}, got "
                             f"{getattr(residual, 'shape', type(residual).__name__)}")
        residual = residual.contiguous()
    if out is None:
        out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    elif (not isinstance(out, torch.Tensor) or tuple(out.shape) != (m, n) or out.dtype != a.dtype
          or out.device != a.device or not out.is_contiguous()):
        raise ValueError(f"hopper matmul: out must be a contiguous ({m}, {n}) {a.dtype} tensor on {a.device}, got "
                         f"{getattr(out, 'shape', type(out).__name__)}")
    if m == 0 or n == 0:
        return out
    if k == 0:
        from ..fallback import TORCH_ACTIVATIONS
        z = torch.zeros(m, n, dtype=torch.float32, device=a.device) + (0 if bias is None else bias.float())
        z = TORCH_ACTIVATIONS[activation](z) if activation else z
        out.copy_(z if residual is None else z + residual.float())
        return out
    a_k, la = _operand(a)
    b_k, lb = _operand(b)
    c = out if _tma_ready(out) else _padded(out)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    p = plan(m, n, k, config, sms=sms)
    ks = source(p, str(a.dtype).removeprefix("torch."), la + lb, bias is not None, activation, residual is not None)
    args, options = launch_args(ks, a_k, b_k, c, bias, residual)
    with torch.cuda.device(a.device):
        kernel(ks)[grid(p.config, m, n, sms)](*args, **options)
    if c is not out:
        out.copy_(c)
    return out
