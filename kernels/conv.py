"""Convolution (1-D, 2-D, 3-D) as implicit GEMM in the DSL.

Rows (M) fuse the batch and output positions (n, od, oh, ow), columns (N) are the output channels of
one group, the reduction (K) fuses the input channels of the group and the kernel window; groups are
a batch axis (so depthwise is a batch of 1-channel GEMMs). Padding needs no special code: a load
whose index falls outside the input reads 0. The logical layout is torch's (N, C, *spatial);
channels_last is a matter of strides, and the reduction order puts the unit-stride channel innermost
for it, so its loads stay vectorised (and asynchronous).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from alcop_triton import settings, te
from alcop_triton.build import build
from alcop_triton.records import KernelConfig, Workload, dtype_name
from alcop_triton.schedule import Schedule

SPATIAL: dict[int, tuple[str, ...]] = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


@dataclass(frozen=True)
class ConvParams:
    nd: int
    stride: tuple[int, ...]
    pad_left: tuple[int, ...]
    pad_right: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    channels_last: bool
    bias: bool = False
    activation: str | None = None


def conv_te(dtype: str, p: ConvParams) -> tuple[list[te.Tensor], te.Tensor]:
    """out[n, g, co, *o] = act(sum_{rc, *r} X[n, g*Cg + rc, o*s - p + r*d] * W[g*COg + co, rc, *r] + bias)."""
    sp = SPATIAL[p.nd]
    N, C, CO = te.var("N"), te.var("C"), te.var("CO")
    S = [te.var(x.upper()) for x in sp]
    KS = [te.var(f"K{x.upper()}") for x in sp]
    G = p.groups
    cg, cog = te.binop("//", C, G), te.binop("//", CO, G)
    X = te.placeholder((N, C, *S), dtype, "X")
    W = te.placeholder((CO, cg, *KS), dtype, "Wt")
    O = [te.binop("+", te.binop("//", S[i] + (p.pad_left[i] + p.pad_right[i]) - (KS[i] - 1) * p.dilation[i] - 1,
                                p.stride[i]), 1) for i in range(p.nd)]
    rc = te.reduce_axis(cg, "rc")
    rs = [te.reduce_axis(KS[i], f"r{x}") for i, x in enumerate(sp)]
    # Channels innermost when they are the unit-stride dim (channels_last), else the window innermost.
    raxes = rs + [rc] if p.channels_last else [rc] + rs
    names = ["n", "g", "co"] + [f"o{x}" for x in sp]

    def body(n: te.Expr, g: te.Expr, co: te.Expr, *o: te.Expr) -> te.Expr:
        xi = [o[i] * p.stride[i] - p.pad_left[i] + rs[i] * p.dilation[i] for i in range(p.nd)]
        return te.sum(X[(n, g * cg + rc, *xi)] * W[(g * cog + co, rc, *rs)], axis=raxes)

    out_shape = (N, te.Const(G), cog, *O)
    red = te.compute(out_shape, body, "Y", axis_names=names)
    inputs = [X, W]
    if not p.bias and not p.activation:
        return inputs, red
    bias = te.placeholder((CO,), dtype, "bias") if p.bias else None
    if bias is not None:
        inputs.append(bias)

    def epilogue(n: te.Expr, g: te.Expr, co: te.Expr, *o: te.Expr) -> te.Expr:
        v: te.Expr = red[(n, g, co, *o)]
        if bias is not None:
            v = v + bias[g * cog + co]
        return getattr(te, p.activation)(v) if p.activation else v

    return inputs, te.compute(out_shape, epilogue, "Out", dtype=dtype, axis_names=names)


def compiled(dtype: str, p: ConvParams, cfg: KernelConfig) -> Any:
    """The kernel of one convolution form and config under the current ``ALCOP_STRICT``: the implicit-GEMM
    kernel built from ``conv_te``, or for ``async_copy="box"`` the box kernel (``conv_window.WindowConv``,
    which runs as the ``"tma"`` twin of this one where it cannot run itself). Either is called, or bound,
    with the input, the weight, the bias if any and optionally the output viewed as (N, groups, C_out,
    *spatial)."""
    return _compiled(dtype, p, cfg, settings.strict())


@lru_cache(maxsize=256)
def _compiled(dtype: str, p: ConvParams, cfg: KernelConfig, strict: bool) -> Any:
    if cfg.async_copy == "box":
        from .conv_window import WindowConv
        return WindowConv(dtype, p, cfg)
    inputs, out = conv_te(dtype, p)
    sp = SPATIAL[p.nd]
    s = Schedule.from_config(out, cfg, m_axes=("n",) + tuple(f"o{x}" for x in sp), n_axes=("co",))
    # Channels and window are compile-time constants (one variant per layer shape, as cuDNN has):
    # the im2col index math then divides by constants, so Triton proves the loads contiguous and
    # they stay 16-byte asynchronous copies (runtime extents would hide contiguity).
    return build(s, inputs + [out], static=("C",) + tuple(f"K{x.upper()}" for x in sp), strict=strict)


def output_size(x: Any, w: Any, stride: Sequence[int], pad_left: Sequence[int], pad_right: Sequence[int],
                dilation: Sequence[int]) -> list[int]:
    """The output's spatial extents (torch's formula; symbolic sizes stay symbolic)."""
    return [(x.shape[2 + i] + pad_left[i] + pad_right[i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
            for i in range(x.dim() - 2)]


def is_channels_last(x: Any) -> bool:
    """Channels are the unit-stride dim of a 2-D/3-D input (NHWC/NDHWC storage): the reduction puts them
    innermost and the output is stored the same way."""
    return bool(x.dim() > 3 and x.stride(1) == 1 and x.shape[1] > 1)  # bool(): a guard when shapes are symbolic


def memory_format_of(x: Any) -> Any:
    """torch's memory format that stores a tensor of ``x``'s rank the way ``x`` is stored."""
    import torch
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim()) if is_channels_last(x) else None
    return fmt or torch.contiguous_format


# torch's convolution backends whose output is channels-last when the input or the weight is
# (``_determine_backend_memory_format`` in ATen's Convolution.cpp); the others' is contiguous.
_CHANNELS_LAST_BACKENDS = frozenset({"Cudnn", "Miopen", "Mkldnn", "Slow2d", "SlowDilated2d", "Mps"})


def torch_output_format(x: Any, w: Any, stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                        groups: int) -> Any:
    """The memory format of torch's convolution output for ``x`` and ``w`` (batched), which the drop-ins
    follow: channels-last when either operand's strides suggest it (``suggest_memory_format``) and
    torch's backend for the call keeps that (cuDNN, oneDNN, the CPU's 2-D kernels), else contiguous (e.g.
    a channels-last-3d input on a CPU kernel without oneDNN, CUDA's depthwise kernels)."""
    import torch
    from torch._prims_common import suggest_memory_format
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
    if fmt is None or (suggest_memory_format(x) != fmt and suggest_memory_format(w) != fmt):
        return torch.contiguous_format
    nd = x.dim() - 2
    try:
        backend = torch._C._select_conv_backend(x, w, None, list(stride), list(padding), list(dilation), False,
                                                [0] * nd, groups)
    except (AttributeError, RuntimeError, TypeError):  # a torch without it (or another signature): cuDNN's rule
        return fmt
    return fmt if backend.name in _CHANNELS_LAST_BACKENDS else torch.contiguous_format


def empty_output(x: Any, shape: Sequence[int], memory_format: Any = None) -> Any:
    """An uninitialised (N, C_out, *spatial) output in ``memory_format`` (default: channels-last when the
    input ``x`` is)."""
    import torch
    return torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=memory_format or memory_format_of(x))


def conv(x: Any, w: Any, bias: Any, stride: tuple[int, ...], pad_left: tuple[int, ...], pad_right: tuple[int, ...],
         dilation: tuple[int, ...], groups: int, *, activation: str | None = None,
         config: KernelConfig | None = None) -> Any:
    """N-d convolution of validated arguments with one config, launched directly (no fast path, no
    fallback): the kernel-level entry of tests and benchmarks. The drop-ins run ``alcop::conv``."""
    p = ConvParams(x.dim() - 2, tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation), groups,
                   is_channels_last(x), bias is not None, activation)
    co = w.shape[0]
    out = empty_output(x, (x.shape[0], co, *output_size(x, w, stride, pad_left, pad_right, dilation)))
    if out.numel() == 0:
        return out
    if config is None:
        config = default_config(x, w, stride, pad_left, dilation, groups)
    args = [x, w] + ([bias] if bias is not None else [])
    compiled(dtype_name(x.dtype), p, config)(*args, out.unflatten(1, (groups, co // groups)))
    return out


def pointwise_gemm(x: Any, w: Any, out: Any, stride: Sequence[int], pad_left: Sequence[int],
                   pad_right: Sequence[int], groups: int) -> tuple[Any, Any, Any] | None:
    """``(a, b, c)`` when the convolution is the GEMM ``c = a @ b`` over the same memory, else None.

    A 1x1 (1x1x1), stride-1, unpadded, ungrouped convolution of a channels-last input reads each input
    position's channels once: (N*H*W, C_in) @ (C_in, C_out) into the (N*H*W, C_out) rows of the
    channels-last output, views all three (``b`` is the weight's transpose, stored C_out x C_in). The
    GEMM kernels copy by TMA where the implicit-GEMM kernel cannot (its rows fuse n, h and w): on the
    nine 1x1 layers of ResNet-50 at batch 64 that the shipped H100 table holds both ways, the best GEMM
    took 0.71-1.01x the best conv kernel's time, 0.85x geomean (``autotune.measure.time_gpu``, separate
    runs; e.g. 14.8 against 20.0 µs for 7x7, 512 -> 2048 channels).
    """
    if (groups != 1 or any(k != 1 for k in w.shape[2:]) or any(s != 1 for s in stride) or any(pad_left)
            or any(pad_right) or not is_channels_last(x)):
        return None
    perm = (0, *range(2, x.dim()), 1)
    xa, ca = x.permute(perm), out.permute(perm)
    if not (xa.is_contiguous() and ca.is_contiguous()):
        return None
    ci, co = x.shape[1], w.shape[0]
    rows = xa.numel() // ci
    return xa.view(rows, ci), w.reshape(co, ci).t(), ca.view(rows, co)


def gemm_workload(w: Workload) -> Workload:
    """The GEMM workload a channels-last pointwise convolution runs as (``pointwise_gemm``), keyed as
    ``kernels.matmul.workload_of`` keys its call; any other workload as it is."""
    if w.op not in ("conv2d", "conv3d") or w.layout != "nhwc":
        return w
    p = w.conv_params()
    if (p["groups"], p["kd"], p["kh"], p["kw"], p["stride"], p["pad"]) != (1, 1, 1, 1, 1, 0):
        return w
    # the weight's transpose is 't' unless it is one column (kernels.matmul.workload_of's rule)
    return Workload("matmul", (p["n"] * p["d"] * p["h"] * p["w"], p["co"], p["ci"]), w.dtype,
                       "nt" if p["co"] > 1 else "nn")


def workload_of(x: Any, w: Any, stride: tuple[int, ...], pad: tuple[int, ...], dilation: tuple[int, ...],
                groups: int) -> Workload:
    """The tuning key: the ALCOP suite's (N, H, W, CI, CO, KH, KW, stride, pad, dilation, groups) form."""
    nd = x.dim() - 2
    dtype = dtype_name(x.dtype)
    lay = "nhwc" if x.stride(1) == 1 and x.shape[1] > 1 else "nchw"
    n, ci, *sp = x.shape
    co, _, *ks = w.shape
    if nd == 3:
        shape = (n, *sp, ci, co, *ks, stride[0], pad[0], dilation[0], groups)
        return Workload("conv3d", shape, dtype, lay)
    h, wd = (1, sp[0]) if nd == 1 else sp
    kh, kw = (1, ks[0]) if nd == 1 else ks
    return Workload("conv1d" if nd == 1 else "conv2d", (n, h, wd, ci, co, kh, kw, stride[0], pad[0], dilation[0], groups),
                       dtype, lay)


def default_config(x: Any, w: Any, stride: tuple[int, ...], pad: tuple[int, ...], dilation: tuple[int, ...],
                   groups: int) -> KernelConfig:
    """The config the drop-in ops would use for this call (``choose_config.choose_config``'s policy)."""
    from alcop_triton.choose_config import choose_config
    return choose_config(x.device, lambda: workload_of(x, w, stride, pad, dilation, groups))
