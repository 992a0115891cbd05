"""Matmul and batched matmul in the DSL, with fused epilogues (bias, activation, residual, alpha/beta).

``gemm`` is the raw entry the drop-in ops call: operands are already validated and broadcast;
transposed and strided operands are handled by runtime strides (one kernel per unit-stride layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import alcop_triton as at
from alcop_triton import te

ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "silu", "tanh", "sigmoid")


@dataclass(frozen=True)
class Epilogue:
    """What the store applies to ``alpha * (A @ B)``: ``act(alpha*acc + bias) + beta*residual``."""
    bias: bool = False
    activation: str | None = None
    residual: bool = False
    alpha: float = 1.0
    beta: float = 1.0

    def __post_init__(self) -> None:
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}: must be one of {ACTIVATIONS} or None")


def matmul_te(dtype: str, batched: bool, ep: Epilogue = Epilogue(), out_dtype: str | None = None) -> tuple[list[te.Tensor], te.Tensor]:
    """C[(b,) i, j] = epilogue(sum_k A[(b,) i, k] * B[(b,) k, j]); returns (inputs, output)."""
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    bt = (te.var("BATCH"),) if batched else ()
    A = te.placeholder(bt + (M, K), dtype, "A")
    B = te.placeholder(bt + (K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    if batched:
        C = te.compute(bt + (M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), "C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    inputs = [A, B]
    bias = te.placeholder((N,), dtype, "bias") if ep.bias else None
    res = te.placeholder(bt + (M, N), dtype, "residual") if ep.residual else None
    inputs += [t for t in (bias, res) if t is not None]

    def epilogue(*ax: te.IterVar) -> te.Expr:
        v: te.Expr = C[ax]
        if ep.alpha != 1.0:
            v = v * ep.alpha
        if bias is not None:
            v = v + bias[ax[-1]]
        if ep.activation:
            v = getattr(te, ep.activation)(v)
        if res is not None:
            v = v + (res[ax] * ep.beta if ep.beta != 1.0 else res[ax])
        return v

    trivial = ep == Epilogue()
    if trivial and out_dtype in (None, dtype):
        return inputs, C
    names = ("b", "i", "j") if batched else ("i", "j")
    out = te.compute(bt + (M, N), epilogue, "Out", dtype=out_dtype or dtype, axis_names=names)
    return inputs, out


@lru_cache(maxsize=512)
def compiled(dtype: str, batched: bool, ep: Epilogue, cfg: at.KernelConfig, out_dtype: str | None = None) -> at.CompiledKernel:
    """The kernel for one (dtype, batching, epilogue, config); cached per process."""
    inputs, out = matmul_te(dtype, batched, ep, out_dtype)
    s = at.Schedule.from_config(out, cfg)
    return at.build(s, inputs + [out])


def gemm(a: Any, b: Any, *, bias: Any = None, residual: Any = None, activation: str | None = None,
         alpha: float = 1.0, beta: float = 1.0, config: at.KernelConfig | None = None, out: Any = None) -> Any:
    """``act(alpha * a @ b + bias) + beta * residual`` for 2-D (M,K)@(K,N) or 3-D (B,M,K)@(B,K,N).

    Operands must share dtype and device (the drop-in ops check and broadcast before calling).
    ``config`` defaults to the dispatcher's choice for this shape on this device.
    """
    batched = a.dim() == 3
    dtype = str(a.dtype).replace("torch.", "")
    ep = Epilogue(bias is not None, activation, residual is not None, float(alpha), float(beta))
    if config is None:
        config = default_config(a, b)
    kern = compiled(dtype, batched, ep, config)
    args = [a, b] + [t for t in (bias, residual) if t is not None]
    return kern(*args, out) if out is not None else kern(*args)


def workload_of(a: Any, b: Any) -> at.Workload:
    """The tuning key of a GEMM call: shape, dtype and operand storage ('n' row-major, 't' transposed)."""
    dtype = str(a.dtype).replace("torch.", "")
    lay = ("t" if a.stride(-1) != 1 and a.shape[-1] > 1 else "n") + ("t" if b.stride(-1) != 1 and b.shape[-1] > 1 else "n")
    m, kdim = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if a.dim() == 3:
        return at.Workload("bmm", (a.shape[0], m, n, kdim), dtype, lay)
    return at.Workload("matmul", (m, n, kdim), dtype, lay)


def default_config(a: Any, b: Any) -> at.KernelConfig:
    """The config the drop-in ops would use for this call (``config_choice.choose_config``'s policy)."""
    from alcop_triton.config_choice import choose_config
    return choose_config(a.device, lambda: workload_of(a, b))
