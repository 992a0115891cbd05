"""Matmul and batched matmul in the DSL, with fused epilogues (bias, activation, residual, alpha/beta).

``compiled`` gives the kernel of one (dtype, batching, epilogue, config); the custom ops
(``alcop_triton.custom_ops.run_gemm``) launch it on validated, broadcast operands. Transposed and
strided operands are handled by runtime strides (one variant per unit-stride layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import alcop_triton as at
from alcop_triton import te
from alcop_triton.records import dtype_name

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


def workload_of(a: Any, b: Any) -> at.Workload:
    """The tuning key of a GEMM call: shape, dtype and operand storage ('n' row-major, 't' transposed)."""
    dtype = dtype_name(a.dtype)
    lay = ("t" if a.stride(-1) != 1 and a.shape[-1] > 1 else "n") + ("t" if b.stride(-1) != 1 and b.shape[-1] > 1 else "n")
    m, kdim = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if a.dim() == 3:
        return at.Workload("bmm", (a.shape[0], m, n, kdim), dtype, lay)
    return at.Workload("matmul", (m, n, kdim), dtype, lay)
