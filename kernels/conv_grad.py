"""Convolution gradients: the input and weight gradients of ``alcop::conv``.

The input gradient of a strided convolution runs as one DSL kernel over all input phases
(``input_grad_in_phases``, ``conv_input_grad_te``) where that applies, else on the forward convolution
kernel, one convolution per input phase (``input_grad_by_conv``). The weight gradient is a DSL kernel
(``conv_weight_grad_te``) or an alcop GEMM over im2col rows (``weight_grad_by_gemm``). Both DSL kernels
are registered kinds of ``alcop::dsl_call`` key (``conv_input_grad_kernel``, ``conv_weight_grad_kernel``
give the key of one parameter set), the weight gradient's with torch's gradient as the reference for
inputs alcop cannot run.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Mapping, Sequence

import torch
import triton

from alcop_triton import te
from alcop_triton.dsl_kernels import DslKernel, kernel_key, register_resolver
from alcop_triton.loop_ir import padded_run
from alcop_triton.fallback import runtime_reason, torch_conv, vjp_fn
from alcop_triton.records import MAX_SPLIT_K, KernelConfig, dtype_name

from .conv import SPATIAL, memory_format_of

def conv_weight_grad_te(nd: int, dtype: str, stride: tuple[int, ...], pad: tuple[int, ...],
                        dilation: tuple[int, ...], groups: int) -> tuple[list[te.Tensor], te.Tensor]:
    """dW[g, co, c, *r] = sum_{n, *o} dY[n, g*COg + co, *o] * X[n, g*Cg + c, o*s - p + r*d] (W for its shape)."""
    sp = SPATIAL[nd]
    S, KS, O = ([te.var(f"{p}{x.upper()}") for x in sp] for p in ("", "K", "O"))
    N, C, CO = te.var("N"), te.var("C"), te.var("CO")
    cg, cog = te.binop("//", C, groups), te.binop("//", CO, groups)
    dy = te.placeholder((N, CO, *O), dtype, "dY")
    x = te.placeholder((N, C, *S), dtype, "X")
    w = te.placeholder((CO, cg, *KS), dtype, "Wt")
    rn = te.reduce_axis(N, "rn")
    ro = [te.reduce_axis(O[i], f"ro{s}") for i, s in enumerate(sp)]

    def body(g: te.Expr, co: te.Expr, c: te.Expr, *r: te.Expr) -> te.Expr:
        xi = [ro[d] * stride[d] - pad[d] + r[d] * dilation[d] for d in range(nd)]
        return te.sum(dy[(rn, g * cog + co, *ro)] * x[(rn, g * cg + c, *xi)], axis=[rn, *ro])

    out = te.compute((te.Const(groups), cog, cg, *KS), body, "dW", axis_names=["g", "co", "c"] + [f"k{s}" for s in sp])
    return [dy, x, w], out


def _weight_grad_torch(nd: int, stride: tuple[int, ...], pad: tuple[int, ...], dilation: tuple[int, ...],
                       groups: int, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Torch's weight gradient, for inputs alcop cannot run."""
    dy, x, w = tensors
    # pad_right only shapes dY; recover it from dY's extent so the forward reproduces dY's shape.
    pad_right = [(dy.shape[2 + i] - 1) * stride[i] + dilation[i] * (w.shape[2 + i] - 1) + 1 - x.shape[2 + i] - pad[i]
                 for i in range(nd)]
    crop = [max(0, -p) for p in pad_right]
    xs = x[(slice(None), slice(None)) + tuple(slice(0, x.shape[2 + i] - crop[i]) for i in range(nd))]
    pr = [max(0, p) for p in pad_right]
    fn = lambda ww: torch_conv(xs, ww, None, stride, pad, pr, dilation, groups, None)  # noqa: E731
    return vjp_fn(fn, w)(dy)[0].unflatten(0, (groups, w.shape[0] // groups))


def conv_input_grad_te(nd: int, dtype: str, stride: tuple[int, ...],
                       pad: tuple[int, ...]) -> tuple[list[te.Tensor], te.Tensor]:
    """dX of a strided convolution (no dilation, no groups), every input phase in one kernel:

        dX[n, c, s * q + ph] = sum_{j, co} dY[n, co, q + (ph + p) // s - j] * Wp[ph, j, co, c]

    per dim, where ``Wp[ph, j] = W[r0 + s * j]`` (r0 = (ph + p) % s) are the taps that reach phase ph, zero
    past the window (``phase_weights``). The phases are the kernel's batch axes (one program's phase is a
    scalar); dX's rows come out as (n, ph, c, q) and are stored where dX keeps s * q + ph (``out_order``
    of the resolver). X is passed for its shape only (the phases' extents Q = ceil(S / s))."""
    sp = SPATIAL[nd]
    S, O, J = ([te.var(f"{p}{x.upper()}") for x in sp] for p in ("", "O", "J"))
    N, C, CO = te.var("N"), te.var("C"), te.var("CO")
    dy = te.placeholder((N, CO, *O), dtype, "dY")
    wp = te.placeholder((*(te.Const(s) for s in stride), *J, CO, C), dtype, "Wp")
    x = te.placeholder((N, C, *S), dtype, "X")
    rj = [te.reduce_axis(J[i], f"rj{x}") for i, x in enumerate(sp)]
    rco = te.reduce_axis(CO, "rco")
    Q = [te.binop("//", S[i] + (stride[i] - 1), stride[i]) for i in range(nd)]

    def body(n: te.Expr, *rest: te.Expr) -> te.Expr:
        ph, c, q = rest[:nd], rest[nd], rest[nd + 1:]
        yi = [q[i] + te.binop("//", ph[i] + pad[i], stride[i]) - rj[i] for i in range(nd)]
        return te.sum(dy[(n, rco, *yi)] * wp[(*ph, *rj, rco, c)], axis=[*rj, rco])

    out = te.compute((N, *(te.Const(s) for s in stride), C, *Q), body, "dX",
                     axis_names=["n", *(f"p{x}" for x in sp), "c", *(f"q{x}" for x in sp)])
    return [dy, wp, x], out


def weight_grad_static(nd: int, spatial: bool = True) -> tuple[str, ...]:
    """Size variables the weight-gradient kernel compiles in: channels and window, as kernels/conv.py does
    for the forward, and (``spatial``) the input's and output's extents, so that splitting its reduction
    index into (n, *o) per chunk divides by constants (one variant per layer shape, as cuDNN has)."""
    sp = [x.upper() for x in SPATIAL[nd]]
    return ("C", "CO") + tuple(f"K{x}" for x in sp) + (tuple(sp) + tuple(f"O{x}" for x in sp) if spatial else ())


def _conv_grad_spec(key: str, p: dict[str, Any]) -> DslKernel:
    nd, dt = p["nd"], p["dtype"]
    s, pad = tuple(p["stride"]), tuple(p["pad"])
    sp = SPATIAL[nd]
    if p["grad"] == "input":
        # Rows (n, *q) and columns c of each phase; stored as dX's (n, *(q, ph), c): channels last.
        return DslKernel(
            key, functools.partial(conv_input_grad_te, nd, dt, s, pad),
            m_axes=("n",) + tuple(f"q{x}" for x in sp), n_axes=("c",),
            out_order=(0, *(x for i in range(nd) for x in (nd + 2 + i, 1 + i)), nd + 1),
            choose=input_grad_config, static=("C", "CO") + tuple(f"J{x.upper()}" for x in sp))
    if p["grad"] != "weight":
        raise RuntimeError(f"alcop::conv_grad: no kernel for gradient {p['grad']!r} (key {key!r})")
    groups, d = p["groups"], tuple(p["dilation"])
    return DslKernel(
        key, functools.partial(conv_weight_grad_te, nd, dt, s, pad, d, groups), choose=weight_grad_config,
        # Columns (kh, kw, c), the channel innermost: with channels a multiple of BLOCK_N each column
        # tile is one window tap (scalar kh, kw), and X's channels-last rows load as vectors.
        m_axes=("co",), n_axes=tuple(f"k{x}" for x in SPATIAL[nd]) + ("c",),
        reference=functools.partial(_weight_grad_torch, nd, s, pad, d, groups), static=weight_grad_static(nd))


register_resolver("alcop::conv_grad", _conv_grad_spec)


def weight_grad_chunk(row: int | None) -> int:
    """BLOCK_K of the weight-gradient kernel for output rows ``row`` wide: 64, or 32 where 64-wide chunks
    cannot run inside one (padded) row and 32-wide ones can (``loop_ir.run_extent``, ``padded_run``),
    so the reduction's (n, *o) are scalars per chunk instead of divisions per lane. On the H100
    (``docs/decisions.md#d20``) 28-wide rows ran 1.26x faster in runs of 32 than flat in
    chunks of 64 (128 channels), 1.28x (512); 56-wide ones 1.52x in runs of 64 (with split-K's sum in
    two levels)."""
    def runs(width: int) -> bool:
        return row is not None and (row % width == 0 or padded_run(("", str(row)), width) is not None)
    return 64 if runs(64) or not runs(32) else 32


def weight_grad_config(view: tuple[int, int, int, int], sms: int,
                       sizes: Mapping[str, int] | None = None) -> KernelConfig:
    """The weight-gradient kernel's config for its GEMM view (groups, CO/g, C/g * K, N * O), the GPU's SM
    count and the call's sizes (its output rows' width ``OW`` picks BLOCK_K: ``weight_grad_chunk``): few
    output tiles over a long reduction, so split-K until about eight programs per SM (at most
    MAX_SPLIT_K, at least 8 chunks per program; the split sums in two levels past 8, so deep splits
    cost little); 128-wide tiles and 8 warps from 512 output channels, 64 and 4 below. On five suite
    layers (``docs/decisions.md#d21``, H100) it picks the fastest of six configs on four
    and is within 2% on the fifth."""
    b, m, n, k = view
    wide = m >= 512
    bm, bn = (min(128 if wide else 64, max(16, triton.next_power_of_2(x))) for x in (m, n))
    bk = weight_grad_chunk((sizes or {}).get("OW"))
    tiles = b * -(-m // bm) * -(-n // bn)
    split = 1
    while split < MAX_SPLIT_K and tiles * split < 8 * sms and -(-k // bk) >= 16 * split:
        split *= 2
    return KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=8 if wide else 4, smem_stages=4,
                        split_k=split)


def conv_weight_grad_kernel(nd: int, dtype: torch.dtype, stride: Sequence[int], pad: Sequence[int],
                            dilation: Sequence[int], groups: int) -> str:
    """The ``alcop::dsl_call`` key of the conv weight-gradient kernel for these parameters."""
    return kernel_key("alcop::conv_grad", dict(grad="weight", nd=nd, dtype=dtype_name(dtype), stride=list(stride),
                                               pad=list(pad), dilation=list(dilation), groups=groups))


# ----------------------------------------------------------------------------- gradients through faster kernels

IM2COL_BYTES = 1 << 30
"""Largest im2col buffer ``weight_grad_by_gemm`` makes at once; a larger one is made and multiplied in
batch chunks (their products summed in float32, in chunk order: deterministic)."""

IM2COL_MAX_ROWS = 8192
"""Longest reduction (N * output positions) that ``weight_grad_by_gemm`` takes: beyond it the im2col
copy costs more than the GEMM saves over the DSL kernel, which reads X in place (H100, batch 64,
``docs/decisions.md#d22``: the GEMM route won at 3,136 rows, 93.8 against 139 µs, and lost
at 12,544 to 200,704 rows by 1.1-3x; at 3.2M rows the copy alone is 3.7 GB)."""


def _pad_right(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int], pad: Sequence[int],
               dilation: Sequence[int]) -> list[int]:
    """The right padding of the forward that made ``dy`` from ``x``: the rows it read past ``x``'s end
    (negative: rows of ``x`` that no output read)."""
    nd = x.dim() - 2
    return [(dy.shape[2 + i] - 1) * stride[i] + dilation[i] * (w.shape[2 + i] - 1) - pad[i] - (x.shape[2 + i] - 1)
            for i in range(nd)]


def tap_run(phase: int, stride: int, pad: int, dilation: int, ksize: int) -> tuple[int, int, int, int, int]:
    """Along one dim, the window taps r that reach input positions i = stride * q + phase: those with
    (phase + pad - r * dilation) divisible by stride, every (stride / g)-th tap from the first (g =
    gcd(stride, dilation)). Returns the first, the step, their count J (0: none), the offset t of the
    first tap's output row (o = q + t - j * dilation / g for the j-th) and that dilation d / g."""
    g = math.gcd(stride, dilation)
    step = stride // g
    first = next((r for r in range(min(ksize, step)) if (phase + pad - r * dilation) % stride == 0), None)
    if first is None:
        return 0, step, 0, 0, dilation // g
    return first, step, len(range(first, ksize, step)), (phase + pad - first * dilation) // stride, dilation // g


def _every(t: torch.Tensor, starts: Sequence[int], steps: Sequence[int], sizes: Sequence[int]) -> torch.Tensor:
    """The view of ``t``'s spatial dims (2, 3, ...) from ``starts`` by ``steps``, ``sizes`` long (as_strided:
    a fraction of indexing's host cost, which the backward pays per phase)."""
    st = t.stride()
    offset = t.storage_offset() + sum(a * st[2 + i] for i, a in enumerate(starts))
    return t.as_strided((*t.shape[:2], *sizes), (*st[:2], *(st[2 + i] * k for i, k in enumerate(steps))), offset)


PHASE_KERNEL_WASTE = 2.5
"""Most multiply-adds ``input_grad_in_phases`` may do per useful one: phases' taps padded to the most any
phase has (3x3 stride 2: 16 for 9) times positions past the input's end (7 rows in phases of 4: 8 / 7)."""


PHASE_KERNEL_MIN_CHANNELS = 64
"""Fewest input channels (the kernel's columns) for ``input_grad_in_phases``: below it most of a tile's
columns are empty (the 7x7 stem's 16), and a convolution per phase keeps that layer."""


def phase_taps(k: int, s: int) -> int:
    """The most window taps one input phase receives along a dim of window ``k``, stride ``s``."""
    return max(1, -(-k // s))


def phase_weights(w: torch.Tensor, stride: Sequence[int], pad: Sequence[int]) -> torch.Tensor:
    """``Wp`` of ``conv_input_grad_te``: (*S, *J, CO, C), the taps r0 + s * j of each phase (zero past the
    window), channels innermost."""
    nd = w.dim() - 2
    ks = w.shape[2:]
    taps = [phase_taps(ks[i], stride[i]) for i in range(nd)]
    wf = w.movedim(1, -1).movedim(0, -2)   # (*K, CO, C)
    # zero taps past the window: index r0 + s * j reaches s * J - 1
    grow = [x for i in reversed(range(nd)) for x in (0, stride[i] * taps[i] - ks[i])]
    wf = torch.nn.functional.pad(wf, [0, 0, 0, 0] + grow)
    return wf[_phase_index(tuple(stride), tuple(pad), tuple(taps), w.device)]


def input_grad_config(view: tuple[int, int, int, int], sms: int,
                      sizes: Mapping[str, int] | None = None) -> KernelConfig:
    """The phased input-gradient kernel's config for its GEMM view (phases, N * Q, C, J * CO): 128-row tiles,
    as wide as the input's channels up to 256 (8 warps from 128 columns, 3 stages at 256), half as wide
    while that leaves fewer programs than half the SMs. Its reduction is short (a few taps of the output
    channels), so wide tiles amortise the pipeline's start. On the H100 (``docs/decisions.md#d23``)
    it picks the fastest of four fixed configs on each of the six layers it was made from; the 7x7,
    512-channel layer (64 programs at 256 columns) ran 1.23x faster at 128."""
    b, m, n, _ = view
    bn = min(256, max(16, triton.next_power_of_2(n)))
    while bn > 128 and b * -(-m // 128) * -(-n // bn) < sms // 2:
        bn //= 2
    return KernelConfig(block_m=128, block_n=bn, block_k=64, group_m=8, num_warps=8 if bn >= 128 else 4,
                        smem_stages=3 if bn > 128 else 4)


@functools.lru_cache(maxsize=64)
def _phase_index(stride: tuple[int, ...], pad: tuple[int, ...], taps: tuple[int, ...],
                 device: torch.device) -> tuple[torch.Tensor, ...]:
    """Per dim, the window tap r0 + s * j of phase ph (r0 = (ph + p) % s), shaped to broadcast over (*S, *J)."""
    nd = len(stride)
    index = []
    for i in range(nd):
        ph = torch.arange(stride[i], device=device)
        at = (ph[:, None] + pad[i]) % stride[i] + stride[i] * torch.arange(taps[i], device=device)[None, :]
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = stride[i], taps[i]
        index.append(at.reshape(shape))
    return tuple(index)


def conv_input_grad_kernel(nd: int, dtype: torch.dtype, stride: Sequence[int], pad: Sequence[int]) -> str:
    """The ``alcop::dsl_call`` key of the phased input-gradient kernel (``conv_input_grad_te``)."""
    return kernel_key("alcop::conv_grad", dict(grad="input", nd=nd, dtype=dtype_name(dtype), stride=list(stride),
                                               pad=list(pad)))


def input_grad_in_phases(alcop: Any, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                         pad: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor | None:
    """dX of a strided convolution as one kernel over all input phases (``conv_input_grad_te``: one
    launch where ``input_grad_by_conv`` runs a convolution per phase and copies each into dX), or None
    where that does not apply: stride 1, dilation, groups, an input not stored channels last, fewer
    than ``PHASE_KERNEL_MIN_CHANNELS`` channels, more than ``PHASE_KERNEL_WASTE`` multiply-adds per
    useful one, or tensors alcop's kernels cannot run (``fallback.runtime_reason``: the kernel has no
    torch reference of its own; the per-phase convolutions fall back to torch's). The result is channels last; where the input's extent is not a multiple of the stride,
    a view of the first rows."""
    nd = x.dim() - 2
    if groups != 1 or any(d != 1 for d in dilation) or all(s == 1 for s in stride) or \
            memory_format_of(x) is torch.contiguous_format or x.shape[1] < PHASE_KERNEL_MIN_CHANNELS:
        return None
    ks, sizes = w.shape[2:], x.shape[2:]
    waste = math.prod(stride[i] * phase_taps(ks[i], stride[i]) / ks[i]
                      * -(-sizes[i] // stride[i]) * stride[i] / sizes[i] for i in range(nd))
    if waste > PHASE_KERNEL_WASTE or runtime_reason(x, w, dy) is not None:
        return None
    key = conv_input_grad_kernel(nd, x.dtype, stride, pad)
    out = alcop.dsl_call(key, [dy, phase_weights(w, stride, pad), x])   # (N, *S, C, *Q), stored (N, *(Q, S), C)
    order = [0, nd + 1] + [d for i in range(nd) for d in (nd + 2 + i, 1 + i)]
    dx = out.permute(order).reshape(x.shape[0], x.shape[1], *(out.shape[nd + 2 + i] * stride[i] for i in range(nd)))
    for i in range(nd):
        dx = dx.narrow(2 + i, 0, sizes[i])
    return dx


def input_grad_by_conv(alcop: Any, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                       pad: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor:
    """dX on the forward convolution kernel (``alcop.conv``, an op namespace such as ``torch.ops.alcop``),
    one convolution per input phase.

    The input positions i = s * q + phi of one phase phi (per dim) receive from the taps r with
    s | (phi + p - r * d), every (s / g)-th tap (g = gcd(s, d)), at dY rows q + t - j * d / g: a
    stride-1 convolution of dY with those taps flipped in space and with input and output channels
    swapped (per group), dilation d / g. A stride-1 convolution has one phase, whose result is dX;
    stride s has s^nd phases, each written into its strided slice of dX (the same multiply-adds as
    the forward, where one convolution over zero-interleaved dY would do s^nd times as many).
    Padding that would be negative (dY rows a phase never reads) is a slice of dY instead (a view)."""
    nd = x.dim() - 2
    co = w.shape[0]
    ks = w.shape[2:]
    # (CO, C/g, *K) -> (C, CO/g, *K): channels swapped per group, flipped in space; each phase's taps are
    # a strided view of it (reversed: the flipped window's taps ascend from K - 1 - last).
    wf = w.unflatten(0, (groups, co // groups)).transpose(1, 2).flatten(0, 1).flip(list(range(2, 2 + nd)))
    fmt = memory_format_of(x)
    parts: list[tuple[tuple[int, ...], torch.Tensor]] = []
    phases = list(itertools.product(*(range(s) for s in stride)))
    for phase in phases:
        dims = [tap_run(phase[i], stride[i], pad[i], dilation[i], ks[i]) for i in range(nd)]
        src, left, right = dy, [], []
        for i, (_, _, taps, t, dd) in enumerate(dims):
            count = -(-(x.shape[2 + i] - phase[i]) // stride[i])   # input positions of this phase
            lo = (taps - 1) * dd - t
            hi = count - src.shape[2 + i] - lo + (taps - 1) * dd
            start, stop = max(0, -lo), src.shape[2 + i] - max(0, -hi)
            if taps == 0 or count <= 0 or stop <= start:
                break   # no tap reaches these positions, or none of dY: their gradient is 0
            src = src.narrow(2 + i, start, stop - start)
            left.append(max(0, lo))
            right.append(max(0, hi))
        else:
            sub = _every(wf, [ks[i] - 1 - (f + (j - 1) * k) for i, (f, k, j, _, _) in enumerate(dims)],
                         [d[1] for d in dims], [d[2] for d in dims]).contiguous(memory_format=fmt)
            parts.append((phase, alcop.conv(src, sub, None, [1] * nd, left, right, [d[4] for d in dims], groups, None)))
    if len(phases) == 1 and parts:
        return parts[0][1]
    # every position is written when every phase had a convolution; zeros where one had none
    dx = (torch.empty_like if len(parts) == len(phases) else torch.zeros_like)(x, memory_format=fmt)
    for phase, part in parts:
        _every(dx, phase, stride, part.shape[2:]).copy_(part)
    return dx


def weight_grad_by_gemm(alcop: Any, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                        pad: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor | None:
    """dW = dY^T @ im2col(X) as one alcop GEMM (``alcop.mm``), or None for grouped convolutions and reductions longer
    than ``IM2COL_MAX_ROWS`` (then the DSL kernel of ``conv_weight_grad_te``). im2col(X) is a copy of X's
    windows, (N * O, K * C) rows in channels-last order, made by torch from a strided view of X padded
    once; dY in channels-last order is (N * O, CO). The result is (CO, C, *K), channels-last strided."""
    nd, n, c, co = x.dim() - 2, x.shape[0], x.shape[1], w.shape[0]
    if groups != 1 or n * math.prod(dy.shape[2:]) > IM2COL_MAX_ROWS:
        return None
    ks, os_ = list(w.shape[2:]), list(dy.shape[2:])
    right = [max(0, r) for r in _pad_right(x, w, dy, stride, pad, dilation)]
    # channels last, padded: (N, *S', C); rows no output reads stay (the strided view skips them)
    xp = torch.nn.functional.pad(x.movedim(1, -1), [0, 0] + [p for i in reversed(range(nd)) for p in (pad[i], right[i])])
    xp = xp.contiguous()
    sp = xp.stride()
    window = (*os_, *ks, c)   # per image
    strides = (sp[0], *(stride[i] * sp[1 + i] for i in range(nd)), *(dilation[i] * sp[1 + i] for i in range(nd)), 1)
    dym = dy.movedim(1, -1).reshape(n, -1, co)   # (N, O, CO): a view when dY is channels last
    per_image = math.prod(os_) * math.prod(ks) * c * x.element_size()
    chunk = max(1, min(n, IM2COL_BYTES // max(1, per_image)))
    acc: torch.Tensor | None = None
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        cols = xp.as_strided((rows, *window), strides, xp.storage_offset() + start * sp[0])
        cols = cols.reshape(-1, math.prod(ks) * c)
        part = alcop.mm(dym[start:start + rows].reshape(-1, co).t(), cols)   # (CO, K * C)
        if rows == n:
            acc = part
        else:
            acc = part.float() if acc is None else acc + part.float()
    assert acc is not None
    return acc.to(x.dtype).reshape(co, *ks, c).movedim(-1, 1)
