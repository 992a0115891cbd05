"""A convolution whose A tiles are TMA boxes of the input window: the ``"box"`` copy mechanism (host side;
the Gluon kernel is ``conv_window_kernel.py``).

The implicit-GEMM kernel of ``conv.py`` fuses (n, oh, ow) into its M tile, so a tile's rows span several
output rows, and Triton's pipeliner cannot copy such a window as one TMA box (a multi-row box reshaped for
the dot raced in Triton 3.6: ``docs/decisions.md#d18``). This kernel is written in Gluon, where
the kernel owns its shared-memory ring, its barriers and its MMA waits, so the box can be the whole tile:

* the output tile is a BI x BD x BH x BW block of output positions (BI images' BD x BH x BW blocks; BD = 1
  in 2-d) by BLOCK_N output channels, BLOCK_M = BI * BD * BH * BW rows;
* for window tap (rd, rh, rw) and channels c0.., its A operand is one TMA copy of the input box at
  (n0, od0 + rd - pad, oh0 + rh - pad, ow0 + rw - pad, c0): TMA fills coordinates outside the input with
  zeros, which is the convolution's zero padding, so no index math or mask runs per element;
* each ring stage is allocated as the [BLOCK_M, BLOCK_K] tile the wgmma reads and reinterpreted as the
  box for the copy (the 128-byte swizzle depends only on the shared-memory address, so both views agree),
  likewise the weight's [BLOCK_N, 1, .., BLOCK_K] box of the (CO, [KD,] KH, KW, C) channels-last weight;
* ``smem_stages`` ring stages, one wgmma in flight: chunk k's MMA is issued, chunk k - 1's is waited for,
  and its stage takes the copies of chunk k + stages - 1;
* the epilogue adds the bias and stores the tile by one TMA copy of its output box (rows past the output
  are clipped by TMA, so a box wider than the output loses only the padded rows' work).

Channels-last fp16/bf16 convolutions with stride 1, dilation 1, one group, channels a multiple of
BLOCK_K, on sm90; strided 2-d ones whose strides divide the input's extents, on the input's phase view
(N, H / SH, SH, W / SW, SW * C), where each tap's rows are a box again; and strided unpadded 1x1 ones, as
the stride-1 convolution of the input's strided view. ``boxes`` picks the box shape of a tile (the least
padded). Elsewhere, CPU tensors in Triton's interpreter included, a ``"box"`` config runs as its ``"tma"``
twin of the implicit-GEMM kernel (the same arithmetic), so a table's record stays usable on any device.

Measured on the H100 (``docs/decisions.md#d24``, kernel time under CUDA graphs, one
suite run, dispatch from the shipped table): the ALCOP conv2d suite at 1.042x cuDNN's speed (geomean; 0.866x
before), ResNet-50's convolutions at 0.954x, the conv3d suite at 0.816x (0.680x before).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import triton
from triton.experimental.gluon import language as gl

from alcop_triton.build import Launch, Runs, tma_aligned
from alcop_triton.records import KernelConfig, ScheduleError, Workload

from .conv_window_kernel import conv_window, conv_window_bias

WINDOW_CC = (9, 0)
"""Compute capability from which the box kernel runs (TMA and wgmma: Hopper)."""

WINDOW_DTYPES = ("float16", "bfloat16")

FORWARD = {"TRANS_W": False, "WSH": 1, "WSW": 1, "WRH": 0, "WRW": 0, "PHO": -1, "PWO": 0}
"""The kernel's constexprs of a forward convolution: the weight's (CO, window, C) boxes as they are, the
output a tensor of its own (``conv_window_grad.input_grad_by_boxes`` sets them for input gradients)."""


@functools.lru_cache(maxsize=256)
def boxes(n: int, d: int, h: int, w: int, block_m: int) -> tuple[tuple[int, int, int, int], ...]:
    """(BI, BD, BH, BW) boxes of ``block_m`` output positions over (images, depth, height, width), sides
    powers of two up to TMA's 256 (BD no deeper than the output: 1 in 2-d); the least padded first (rows
    computed past the output over rows of the output), ties to the widest, then the tallest, then the
    deepest box.

    Padding is the only cost a box's shape changes: every tap copies ``block_m`` rows of channels whatever
    the shape, so a box of 2 images' 8 x 8 corners (56 x 56 planes, none padded) beats one 2 x 64 strip
    (12.5% of its rows past the plane)."""
    sides = [2 ** e for e in range(9)]
    cands = []
    for bw in sides:
        for bh in sides:
            for bd in (s for s in sides if s <= triton.next_power_of_2(d)):
                bi = block_m // (bw * bh * bd)
                if bi not in sides or bi * bd * bh * bw != block_m:
                    continue
                rows = math.prod(-(-e // b) * b for e, b in ((n, bi), (d, bd), (h, bh), (w, bw)))
                cands.append((rows / (n * d * h * w), -bw, -bh, -bd, (bi, bd, bh, bw)))
    return tuple(c[-1] for c in sorted(cands))


def pointwise_strided(p: Any, window: Sequence[int]) -> bool:
    """A strided, unpadded 1x1 (1x1x1) convolution: the stride-1 convolution of the input's strided view
    (``x[..., ::s, ::s]``, which a TMA descriptor describes by its strides), as ResNet's downsampling
    shortcuts are."""
    return all(k == 1 for k in window) and not any(p.pad_left) and not any(p.pad_right)


def why_not(p: Any, dtype: str, channels: int, out_channels: int, config: KernelConfig,
            window: Sequence[int]) -> str | None:
    """Why ``config`` cannot run as the box kernel on a convolution of ``p`` (``conv.ConvParams``) with a
    ``window`` (its kernel's spatial extents), or None. Device and alignment are checked at the call (the
    call then runs the ``"tma"`` twin)."""
    if any(d != 1 for d in p.dilation) and any(k > 1 for k in window):
        return f"dilation {p.dilation}: a box is the window of a dilation-1 convolution"
    if any(s != 1 for s in p.stride) and not pointwise_strided(p, window) and p.nd != 2:
        return (f"stride {p.stride} with a {'x'.join(map(str, window))} window: a box is the window of a stride-1 "
                "convolution, of a strided 2-d one's phase view, or of a strided unpadded 1x1 one's strided view")
    if p.groups != 1 or p.nd == 1 or not p.channels_last:
        return (f"groups={p.groups}, {p.nd}-d, channels_last={p.channels_last}: boxes copy one group of a 2-d or "
                "3-d channels-last input")
    if p.activation is not None:
        return f"activation {p.activation!r}: the box kernel's epilogue adds a bias only"
    if dtype not in WINDOW_DTYPES:
        return f"dtype {dtype}: the box kernel multiplies {' or '.join(WINDOW_DTYPES)} (wgmma)"
    if channels % config.block_k or config.block_k * 2 < 32:
        return f"{channels} input channels, block_k={config.block_k}: chunks of 16 or more whole channels"
    if config.num_warps not in (4, 8) or config.block_m != 16 * config.num_warps:
        return (f"block_m={config.block_m}, num_warps={config.num_warps}: one warpgroup per 64 rows "
                "(block_m = 16 x num_warps, 4 or 8 warps)")
    if config.block_n > 256:
        return f"block_n={config.block_n}: one wgmma spans at most 256 output channels"
    if config.block_n > max(64, triton.next_power_of_2(out_channels)):
        return f"block_n={config.block_n} for {out_channels} output channels: a wider tile only computes padding"
    if config.smem_stages < 2 or config.reg_stages != 1 or config.persistent or config.split_k > 1 or config.wave_tail:
        return "the box kernel pipelines its shared-memory ring only: smem_stages >= 2, none of the other knobs"
    return None


def input_view(p: Any, x: Any, window: Sequence[int]) -> tuple[Any, tuple[int, int]] | None:
    """The input of a convolution of ``p`` (``conv.ConvParams``) with a ``window`` as the box kernels'
    descriptors read it, and the strides left to the kernel, or None where no view serves (the caller
    runs another kernel): a 3-d input as it is (its strided 1x1 convolution on ``x[..., ::s, ::s, ::s]``);
    a 2-d one as its phase view (N, H / SH, SH, W / SW, SW * C) of the channels-last memory, where the
    strides divide the extents, else a strided 1x1 convolution's (N, OH, 1, OW, C) view of
    ``x[..., ::s, ::s]``."""
    stride = tuple(p.stride)
    strided = any(st != 1 for st in stride)
    pointwise = strided and pointwise_strided(p, window)
    if p.nd == 3:
        every = (slice(None), slice(None), *(slice(None, None, st) for st in stride))
        return (x[every] if pointwise else x), (1, 1)
    n, c, h, wd = x.shape
    nhwc = x.permute(0, 2, 3, 1)
    if h % stride[0] == 0 and wd % stride[1] == 0 and nhwc.is_contiguous():
        return nhwc.view(n, h // stride[0], stride[0], wd // stride[1], stride[1] * c), stride
    if pointwise:
        return nhwc[:, ::stride[0], ::stride[1]].unsqueeze(2), (1, 1)
    return None


class WindowConv(Runs):
    """The box kernel of one (dtype, ``conv.ConvParams``, config): ``bind``, ``label`` and calls as
    ``build.CompiledKernel``'s, over the conv kernel's tensors (input, weight, bias if any, then the output
    viewed as (N, groups, C_out, *spatial))."""

    def __init__(self, dtype: str, p: Any, config: KernelConfig,
                 box: tuple[int, int, int, int] | None = None) -> None:
        # ``box`` (BI, BD, BH, BW) overrides ``boxes``' pick: for probes that compare box shapes.
        self.dtype, self.p, self.config, self.box = dtype, p, config, box
        self.fn: Any = conv_window_bias if p.bias else conv_window

    def label(self) -> str:
        return f"conv window kernel ({self.config})"

    def _twin(self) -> Any:
        from . import conv
        return conv.compiled(self.dtype, self.p, self.config.replace(async_copy="tma"))

    def runs_here(self, tensors: Sequence[Any]) -> bool:
        """Whether the box kernel runs on these tensors: CUDA sm90+, and TMA's rules (``build.tma_aligned``)
        on the input, weight and output (the bias is read by pointers)."""
        import torch
        dev = tensors[0].device
        if dev.type != "cuda" or torch.cuda.get_device_capability(dev) < WINDOW_CC:
            return False
        return tma_aligned([t for t in tensors if t.dim() > 1])

    def bind(self, *tensors: Any) -> tuple[Any, Any]:
        """(launch, out) as ``CompiledKernel.bind``: checks and the launch's arguments once, ``launch()`` only
        enqueues the kernel (or its "tma" twin's launch, where the box kernel cannot run on these tensors)."""
        import torch

        from .conv import empty_output, output_size
        n_in = 3 if self.p.bias else 2
        x, w = tensors[0], tensors[1]
        if len(tensors) == n_in:
            shape = (x.shape[0], w.shape[0], *output_size(x, w, self.p.stride, self.p.pad_left, self.p.pad_right,
                                                          self.p.dilation))
            tensors = (*tensors, empty_output(x, shape).unflatten(1, (1, w.shape[0])))
        plan = self.plan(tensors) if self.runs_here(tensors) else None
        if plan is None:
            return self._twin().bind(*tensors)
        grid, args, kwargs, descriptors = plan
        with torch.cuda.device(x.device):
            run = self.fn[grid]
        return Launch(self.fn, run, grid, args, kwargs, len(tensors), x.device, descriptors), tensors[-1]

    def plan(self, tensors: Sequence[Any]) -> tuple[tuple[int], tuple[Any, ...], dict[str, Any], Any] | None:
        """The launch on ``tensors`` (input, weight, bias if any, output as (N, 1, C_out, *spatial)), on any
        device: grid, positional arguments (the input as the view the kernel reads, then the descriptors and
        sizes), constexprs, and the descriptors as ``(tensor index, dims, block)``; None where no view of
        the input serves. ScheduleError where the config cannot run here."""
        x, w, y = tensors[0], tensors[1], tensors[-1]
        three = self.p.nd == 3
        n, c, co = x.shape[0], x.shape[1], w.shape[0]
        kd, kh, kw = w.shape[2:] if three else (1, *w.shape[2:])
        reason = why_not(self.p, self.dtype, c, co, self.config, w.shape[2:])
        if reason is not None:
            raise ScheduleError(f"{self.label()}: {reason}")
        view = input_view(self.p, x, w.shape[2:])
        if view is None:
            return None
        # The view starts at the input's address: a later call's input rebinds it (runtime.prebind).
        x, strides = view
        tensors = (x, *tensors[1:])
        od, oh, ow = y.shape[3:] if three else (1, *y.shape[3:])
        cfg = self.config
        bi, bd, bh, bw = self.box or boxes(n, od, oh, ow, cfg.block_m)[0]
        if bi * bd * bh * bw != cfg.block_m or (bd != 1 and not three):
            raise ScheduleError(f"{self.label()}: box {(bi, bd, bh, bw)} is not {cfg.block_m} output positions "
                                f"of a {self.p.nd}-d output")
        rank = w.dim()
        # Descriptor dims: channels last (unit stride), then the rest in order; the output skips its group dim;
        # a 2-d input's phase view is read in its own order.
        wdims = (0, *range(2, rank), 1)
        ydims = (0, *range(3, rank + 1), 2)
        lead = [bi] + ([bd] if three else [])
        xbox = (bi, bd, bh, bw, cfg.block_k) if three else (bi, bh, 1, bw, cfg.block_k)
        descriptors = ((0, wdims if three else tuple(range(5)), xbox),
                       (1, wdims, (cfg.block_n, *[1] * (rank - 2), cfg.block_k)),
                       (len(tensors) - 1, ydims, (*lead, bh, bw, cfg.block_n)))
        grid = (-(-n // bi) * -(-od // bd) * -(-oh // bh) * -(-ow // bw) * -(-co // cfg.block_n), )
        pads = tuple(self.p.pad_left) if three else (0, *self.p.pad_left)
        kwargs = {"THREE": three, "C": c, "KD": kd, "KH": kh, "KW": kw, "PD": pads[0], "PH": pads[1],
                  "PW": pads[2], "SH": strides[0], "SW": strides[1], "BI": bi, "BD": bd, "BH": bh, "BW": bw,
                  "BN": cfg.block_n, "STAGES": cfg.smem_stages, **FORWARD, "num_warps": cfg.num_warps}
        descs = [gluon_descriptor(tensors[i], dims, block) for i, dims, block in descriptors]
        args = (*tensors, *descs, co, -(-od // bd), -(-oh // bh), -(-ow // bw), -(-co // cfg.block_n))
        return grid, args, kwargs, descriptors


def gluon_descriptor(x: Any, dims: Sequence[int], block: Sequence[int]) -> Any:
    """``runtime.tma_descriptor`` with the shared-memory layout a Gluon kernel's signature carries (the
    largest swizzle its block allows); the compiled launcher reads only its address, shape and strides, so
    later calls may pass ``runtime.tma_descriptor``'s own."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from alcop_triton.runtime import tma_descriptor
    import torch
    d = tma_descriptor(x, dims, block)
    dt = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[x.dtype]
    return TensorDescriptor(d.base, d.shape, d.strides, d.block_shape,
                            gl.NVMMASharedLayout.get_default_for(list(block), dt))


def window_configs(workload: Workload) -> list[KernelConfig]:
    """The box kernel's configs worth measuring on a convolution (empty where it cannot run): 128-row tiles
    over two warpgroups and 64-row ones over one; 256 (or all) and 128 output channels; chunks of 64
    channels; as many ring stages as shared memory holds (the measured best on the H100's suite layers)."""
    if workload.op not in ("conv2d", "conv3d") or workload.layout not in ("nhwc", "ndhwc"):
        return []
    q = workload.conv_params()
    co, ci = q["co"], q["ci"]
    bk = next((b for b in (64, 32, 16) if ci % b == 0), None)  # whole chunks of channels
    if bk is None:
        return []
    chunks = q["kd"] * q["kh"] * q["kw"] * -(-ci // bk)
    out = []
    for bm, warps in ((128, 8), (64, 4)):
        for bn in sorted({min(256, max(64, triton.next_power_of_2(co))), min(128, max(64, triton.next_power_of_2(co)))},
                         reverse=True):
            stages = max(2, min(3 if bn == 256 else 4, chunks))
            out.append(KernelConfig(bm, bn, bk, group_m=8, num_warps=warps, smem_stages=stages, async_copy="box"))
    return out


def config_reason(workload: Workload, config: KernelConfig) -> str | None:
    """``why_not`` for a tuning workload (the suite's form: one stride, pad and dilation for every dim)."""
    from .conv import ConvParams
    if workload.op not in ("conv2d", "conv3d"):
        return f"op {workload.op!r}: the box kernel is a convolution's"
    q = workload.conv_params()
    nd = 3 if workload.op == "conv3d" else 2
    p = ConvParams(nd, (q["stride"],) * nd, (q["pad"],) * nd, (q["pad"],) * nd, (q["dilation"],) * nd, q["groups"],
                   workload.layout in ("nhwc", "ndhwc"))
    window = (q["kd"], q["kh"], q["kw"]) if nd == 3 else (q["kh"], q["kw"])
    return why_not(p, workload.dtype, q["ci"] // q["groups"], q["co"], config, window)
