"""Matmul and batched matmul in the DSL, with fused epilogues (bias, activation, residual, alpha/beta).

``compiled`` gives the kernel of one (dtype, batching, epilogue, config); the custom ops
(``alcop_triton.ops.gemm.run_gemm``) launch it on validated, broadcast operands. Transposed and
strided operands are handled by runtime strides (one variant per unit-stride layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from alcop_triton import fastpath, settings, te
from alcop_triton.build import CompiledKernel, Runs, build
from alcop_triton.records import KernelConfig, Workload
from alcop_triton.schedule import Schedule
from alcop_triton.records import dtype_name

from . import pack

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


def matmul_te(dtype: str, batched: int, ep: Epilogue = Epilogue(), out_dtype: str | None = None) -> tuple[list[te.Tensor], te.Tensor]:
    """C[(b...,) i, j] = epilogue(sum_k A[(b...,) i, k] * B[(b...,) k, j]); returns (inputs, output).

    ``batched``: how many batch dims (0, 1, or 2: e.g. (batch, heads) of attention's products on heads
    permuted ahead of the sequence, which cannot fold into one dim without a copy); a bool reads as 0/1.
    """
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    if batched not in (0, 1, 2):
        raise ValueError(f"batched={batched!r}: a GEMM kernel takes 0, 1 or 2 batch dims")
    bt = tuple(te.var(f"BATCH{d}" if batched == 2 else "BATCH") for d in range(int(batched)))
    A = te.placeholder(bt + (M, K), dtype, "A")
    B = te.placeholder(bt + (K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute(bt + (M, N), lambda *ax: te.sum(A[(*ax[:-1], k)] * B[(*ax[:-2], k, ax[-1])], axis=k), "C",
                   axis_names=_axis_names(int(batched)))
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
    out = te.compute(bt + (M, N), epilogue, "Out", dtype=out_dtype or dtype, axis_names=_axis_names(int(batched)))
    return inputs, out


def _axis_names(batched: int) -> tuple[str, ...]:
    return {0: (), 1: ("b",), 2: ("b0", "b1")}[batched] + ("i", "j")


def compiled(dtype: str, batched: int, ep: Epilogue, cfg: KernelConfig, out_dtype: str | None = None) -> Runs:
    """The kernel for one (dtype, batch dims, epilogue, config) under the current ``ALCOP_STRICT``
    (whether a pipeline depth the shape cannot have is clamped or refused); cached per process. A
    warp-specialized config (``async_copy="ws"``) of a single GEMM gets the generated sm90 kernel
    (``matmul_ws.WarpSpecializedGemm``, which runs its "tma" twin where it cannot run); of a batched one,
    or with another output dtype, the twin. Which lowering a workload gets is the records' choice
    (``docs/decisions.md#d42``)."""
    if cfg.async_copy == "ws":
        if batched or out_dtype not in (None, dtype):
            cfg = cfg.tma_twin()
        else:
            return _ws_compiled(dtype, ep, cfg)
    return _compiled(dtype, batched, ep, cfg, out_dtype, settings.strict())


@lru_cache(maxsize=512)
def _ws_compiled(dtype: str, ep: Epilogue, cfg: KernelConfig) -> Runs:
    # cached as the Triton kernels are: a call that misses the fast path does not validate the config again
    from .matmul_ws import WarpSpecializedGemm
    return WarpSpecializedGemm(dtype, ep, cfg)


@lru_cache(maxsize=512)
def _compiled(dtype: str, batched: int, ep: Epilogue, cfg: KernelConfig, out_dtype: str | None,
              strict: bool) -> CompiledKernel:
    inputs, out = matmul_te(dtype, batched, ep, out_dtype)
    s = Schedule.from_config(out, cfg)
    return build(s, inputs + [out], strict=strict)


PAD_MIN_MACS = 1 << 24
"""Below this many multiply-adds (batch x M x N x K) unaligned operands are used as they are: the copies'
launches would cost more than the scalar loads they avoid."""
PAD_MIN_K = 512
"""Below this reduction length unaligned operands are used as they are, however large the product: each
output tile runs only a few reduction steps, so the pipelining that aligned rows enable has little to
overlap, while the copies add two kernels and a trip of both operands through memory. Measured on the
H100 (docs/decisions.md#d27, CUDA graphs): without the copies 257x263x271 ran 1.19x cuBLAS
against 0.66x with them, a 384x197x64x197 bmm 0.99x against 0.42x, 4099x257x263 1.05x against 0.98x;
from K = 761 up the copies won every shape (777x1234x555 too: 1.60x against 0.12x)."""


def _copies_pay(macs: int, k: int) -> bool:
    """Whether copying unaligned operands to aligned buffers beats reading them as they are."""
    return macs >= PAD_MIN_MACS and k >= PAD_MIN_K


TURN_MIN_ROWS = 512
"""Fewest rows of the product (batch x M) for which a float32 B is copied to the orientation its kernel
reads fastest (``_turn_b``): the copy reads and writes B once, which only a product of many rows repays
(a decode step, a few rows against a large weight, would spend more on the copy than the kernel saves)."""
TURN_MIN_MACS = 1 << 30
"""Fewest multiply-adds for which ``_turn_b`` copies B: the copy is a second launch and a preparation on
every call, which cost an eager call after a synchronisation about 50 us more host time on the H100
(1024x768x768 IEEE, whose kernel the copy made 14 us faster: ``docs/decisions.md#d28``); from 512x3072x1024 (1.6e9)
up the kernel saved 85 us and more."""


def _turns(dtype: str, rows: int, n: int, k: int, b_layout: str | None) -> bool:
    """Whether a float32 B stored as ``b_layout`` ('n': K x N, N-contiguous; 't': N x K, K-contiguous; None:
    neither) is copied to its other orientation before a product of ``rows`` x ``n`` x ``k``.

    With TF32 the kernel's dot runs on Hopper's TF32 warpgroup MMA, which reads both operands K-major
    from shared memory: B stored K x N left Triton a kernel 3.8x slower than B stored N x K. Without
    TF32 (torch's default) the dot is IEEE fused multiply-adds, which read B fastest the other way:
    N-contiguous 1.8x faster than K-contiguous. Measured on the H100 (``docs/decisions.md#d29``,
    CUDA-graph timer): 2048^3 with TF32 ran 201 us with B stored K x N and 88 us copying it first (cuBLAS
    53); 512x3072x1024 with TF32 63 -> 49 us; 2048^3 IEEE 768 us with B stored N x K, 423 us stored K x N.
    Only for products of ``TURN_MIN_ROWS`` rows and ``TURN_MIN_MACS`` multiply-adds or more (and
    ``_copies_pay``'s sizes); an N-contiguous copy only where N is whole 16-byte vectors, so that its rows
    stay aligned.
    """
    macs = rows * n * k
    if dtype != "float32" or n < 2 or k < 2 or rows < TURN_MIN_ROWS or macs < TURN_MIN_MACS or not _copies_pay(macs, k):
        return False
    if settings.fp32_precision() != "ieee":  # tf32x3 runs the TF32 MMA three times
        return b_layout == "n"
    return b_layout == "t" and n % 4 == 0


def _turn_b(a: Any, b: Any) -> bool:
    """``_turns`` for the operands of a call."""
    if b.dtype is not torch.float32:  # every half-precision call asks: answered before any shape arithmetic
        return False
    layout = "n" if b.stride(-1) == 1 else "t" if b.stride(-2) == 1 else None
    return _turns(dtype_name(b.dtype), math.prod(a.shape[:-1]), b.shape[-1], a.shape[-1], layout)


def _vector_ready(x: Any) -> bool:
    """Whether 16-byte vector loads (cp.async, TMA) can read ``x``'s rows: a unit-stride last or second-last
    dim, a 16-byte aligned base and every other stride a multiple of 16 bytes."""
    e = x.element_size()
    unit = [d for d in (x.dim() - 1, x.dim() - 2) if x.stride(d) == 1 or x.shape[d] == 1]
    return bool(unit) and x.data_ptr() % 16 == 0 and all(
        x.stride(d) * e % 16 == 0 for d in range(x.dim()) if d != unit[0])


def aligned_operands(a: Any, b: Any) -> tuple[Any, Any]:
    """``(a, b)``, with an operand whose rows are not 16-byte aligned copied to an aligned buffer, and a
    float32 B copied to the orientation its kernel reads fastest (``_turns``: K-contiguous with TF32,
    N-contiguous without).

    Such rows (a row stride of 555 halves, a view at an odd offset) leave the kernel 2-byte loads:
    no cp.async, so no pipelining, and register spills on large tiles (measured 10-40x slower than
    cuBLAS on the H100). K is zero-padded to a multiple of 16 bytes, which changes neither the product
    nor the epilogue; when K grows, both operands are copied so they agree. A copied operand keeps its
    orientation where its unit-stride rows stay aligned (only K rows are added: a straight copy), else
    it becomes K-contiguous (``_buffer``). One launch of ``kernels.pack`` makes every copy; in the fast
    path a repeated call allocates the buffers (a recorded preparation) and replays that launch. The
    copies read and write each operand once, a small cost next to a GEMM of ``PAD_MIN_MACS`` or more
    with a reduction of ``PAD_MIN_K`` or more (``_copies_pay``).
    """
    turn = _turn_b(a, b)
    if _vector_ready(a) and _vector_ready(b) and not turn:
        return a, b
    k = a.shape[-1]
    if not _copies_pay(math.prod(a.shape[:-1]) * b.shape[-1] * k, k):
        return a, b
    pa, pb = fastpath.prepare(_turned_buffers if turn else _buffers, a, b, allocates=True)
    copied = [(src, dst) for src, dst in ((a, pa), (b, pb)) if dst is not src]
    kern = _PACK[(pa is not a, pb is not b)]
    # The kernel takes two (source, buffer) pairs; one copied operand is passed twice (PackKernel).
    fastpath.launch_kernel(kern, [t for pair in copied for t in pair] * (2 // len(copied)))
    return pa, pb


_PACK = {(True, True): pack.PackKernel((-1, -2)), (True, False): pack.PackKernel((-1,)),
         (False, True): pack.PackKernel((-2,))}


def _buffers(a: Any, b: Any, turn: bool = False) -> tuple[Any, Any]:
    """Where ``aligned_operands`` copies ``a`` and ``b`` (empty buffers; an operand that stays is itself);
    ``turn``: ``b`` is copied to its other orientation (``_turn_b``)."""
    k = a.shape[-1]
    vec = 16 // a.element_size()
    kp = -(-k // vec) * vec
    pad = kp != k
    return (_buffer(a, kp, -1, vec) if pad or not _vector_ready(a) else a,
            _buffer(b, kp, -2, vec, b.stride(-2) != 1 if turn else None) if pad or turn or not _vector_ready(b) else b)


def _turned_buffers(a: Any, b: Any) -> tuple[Any, Any]:
    """``_buffers`` with ``b`` turned (a preparation of its own: the fast path replays it by identity)."""
    return _buffers(a, b, turn=True)


def _buffer(x: Any, kp: int, k_dim: int, vec: int, k_major: bool | None = None) -> Any:
    """An empty buffer shaped like ``x`` with ``kp`` along its reduction dim ``k_dim`` (-1 for A, -2 for B).

    K-contiguous or rows-contiguous as ``k_major`` says; by default rows-contiguous (``x``'s own
    orientation) when ``x``'s rows have unit stride and a whole number of 16-byte vectors, else
    K-contiguous. Batch dims that ``x`` broadcasts (stride 0) stay broadcast: one copy serves them all.
    One allocation with its strides: this runs on every call of the shape.
    """
    r_dim = -1 if k_dim == -2 else -2
    rows = x.shape[r_dim]
    if k_major is None:
        k_major = not (x.stride(r_dim) == 1 and rows % vec == 0)
    r_stride, k_stride = (kp, 1) if k_major else (1, rows)
    inner = (rows, kp, r_stride, k_stride) if k_dim == -1 else (kp, rows, k_stride, r_stride)
    lead_strides: list[int] = []
    step = rows * kp
    for d in reversed(range(x.dim() - 2)):
        broadcast = x.stride(d) == 0 and x.shape[d] > 1
        lead_strides.insert(0, 0 if broadcast else step)
        step *= 1 if broadcast else x.shape[d]
    return torch.empty_strided((*x.shape[:-2], inner[0], inner[1]), (*lead_strides, inner[2], inner[3]),
                               dtype=x.dtype, device=x.device)


def aligned_workload(w: Workload) -> Workload:
    """The workload ``aligned_operands`` turns contiguous operands of ``w`` into: what dispatch and the
    shipped tables see for ``w``'s calls (with TF32 as it is set now, for float32)."""
    if w.op not in ("matmul", "linear", "bmm"):
        return w
    bsz, m, n, k = w.gemm_dims()
    vec = 16 // w.elem_bytes
    lay = w.layout if len(w.layout) == 2 else "nn"
    row = dict(zip("ab", w.operand_rows()))
    turn = _turns(w.dtype, bsz * m, n, k, lay[1])
    if (all(r % vec == 0 for r in row.values()) and not turn) or not _copies_pay(bsz * m * n * k, k):
        return w
    kp = -(-k // vec) * vec
    # A copied operand keeps its orientation where its unit-stride rows are whole vectors (``_buffer``).
    copied = {x: kp != k or row[x] % vec != 0 for x in row}
    la = lay[0] if not copied["a"] or (lay[0] == "t" and m % vec == 0) else "n"
    if turn:
        lb = "t" if lay[1] == "n" else "n"
    else:
        lb = lay[1] if not copied["b"] or (lay[1] == "n" and n % vec == 0) else "t"
    shape = (bsz, m, n, kp) if w.op == "bmm" else (m, n, kp)
    return Workload(w.op, shape, w.dtype, la + lb)


def workload_of(a: Any, b: Any) -> Workload:
    """The tuning key of a GEMM call: shape, dtype and operand storage ('n' row-major, 't' transposed)."""
    dtype = dtype_name(a.dtype)
    lay = ("t" if a.stride(-1) != 1 and a.shape[-1] > 1 else "n") + ("t" if b.stride(-1) != 1 and b.shape[-1] > 1 else "n")
    m, kdim = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if a.dim() >= 3:   # two batch dims key as one: the kernel runs their product as the grid's batch axis
        return Workload("bmm", (math.prod(a.shape[:-2]), m, n, kdim), dtype, lay)
    return Workload("matmul", (m, n, kdim), dtype, lay)
