"""A convolution's weight and input gradients on TMA boxes (host side; the Gluon kernels are
``conv_window_wgrad`` and ``conv_window`` in ``conv_window_kernel.py``).

dW[co, tap, c] = sum over output positions of dY[pos, co] * X[pos + tap, c]: per window tap a GEMM whose
reduction runs over the output positions. A program owns one tap and one (BM output channels x BN input
channels) tile; its reduction chunks are boxes of output positions (``conv_window.boxes``, 64 positions,
the least padded), and both operands of a chunk are TMA boxes: dY's at the positions, the input's at the
positions shifted by the tap, zero-filled past the input (the padding), as the forward's box kernel reads
them (a strided 2-d convolution's input through its phase view, a strided 1x1 one's through its strided
view). The tiles are few and the reductions long (a 3x3, 64-channel layer at batch 64 on 56 x 56 outputs:
9 tiles of 200,704 positions), so the positions are split into slices, one per program, whose float32
partial sums one more launch adds in slice order into the gradient's dtype (``sum_slices``): deterministic,
and no program waits for another. With one slice the kernel stores the gradient itself.

The DSL kernel of ``conv_grad.conv_weight_grad_te`` splits a flat (n, *o) index per lane of every chunk
and masks the padding per element; here the index math is a few scalars per chunk and TMA does the rest.
Where this kernel cannot run (``why_not``) the backward takes that kernel or the GEMM over im2col rows.

The input gradient (``input_grad_by_boxes``) is the forward's box kernel with ``TRANS_W``: a convolution of
dY whose weight boxes are read as they lie, at the flipped tap; a strided convolution's runs every input
phase in one launch (``conv_window_phases``: each program finds its phase's taps), stored into dX's phase
view; that and the slices' sum in one launch took the suite's conv2d backward on the H200 from 0.706x cuDNN
to 0.921x eagerly (``docs/decisions.md#d51``). Measured on the H100 (``docs/decisions.md#d25``,
CUDA graphs, one suite run): the suite's conv2d backward at 0.827x cuDNN (0.576x before), conv3d's 0.867x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import triton
from torch._subclasses.fake_tensor import is_fake

from alcop_triton import generation
from alcop_triton.build import Launch, tma_aligned

from .conv import ConvParams, memory_format_of
from .conv_window import WINDOW_CC, WINDOW_DTYPES, boxes, gluon_descriptor, input_view, pointwise_strided
from .conv_window_kernel import conv_window as _conv_kernel
from .conv_window_kernel import conv_window_phases as _phases_kernel
from .conv_window_kernel import conv_window_wgrad as _wgrad_kernel
from .conv_window_kernel import sum_slices as _sum_kernel

WGRAD_KERNEL: Any = _wgrad_kernel  # Gluon and Triton JIT functions (their module is not type-checked)
SUM_KERNEL: Any = _sum_kernel
CONV_KERNEL: Any = _conv_kernel
PHASES_KERNEL: Any = _phases_kernel

POSITIONS = 64
"""Output positions per reduction chunk: one box of dY and one of the input per chunk (four k-steps of 16)."""

MIN_CHUNKS = 8
"""Fewest reduction chunks per program: below it the ring barely fills before the tile ends."""

SMEM_BYTES = 200 * 1024
"""Shared memory the ring may take (the H100 gives a program 227 KB)."""

SM_RATE = 5e12
"""Multiply-adds x 2 per second of one program on an H100 SM while others share the GPU's memory."""

GPU_RATE = 650e12
"""Multiply-adds x 2 per second of the whole GPU's main loops: the bound once every SM is busy."""

SUM_RATE = 3e12
"""Bytes per second of the slices' sum (float32 partials written by the kernel, read by the sum)."""


def why_not(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int], pad: Sequence[int],
            dilation: Sequence[int], groups: int) -> str | None:
    """Why the box kernel cannot compute this weight gradient, or None: fp16/bf16 on sm90, one group,
    dilation 1, 2-d or 3-d, a channels-last input whose channels are a multiple of 16 and output
    channels a multiple of 8 (TMA's 16-byte strides); stride 1, or a strided 2-d convolution whose strides
    divide the input's extents (the phase view), or a strided unpadded 1x1 one."""
    reason = _common_reason(x, w, dy, dilation, groups)
    if reason is not None:
        return reason
    if x.shape[1] % 16 or w.shape[0] % 8:
        return f"{x.shape[1]} input, {w.shape[0]} output channels: chunks of 16 input channels, 8 output channels"
    return _view_reason(x, w, dy, stride, pad)


def _common_reason(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, dilation: Sequence[int],
                   groups: int) -> str | None:
    nd = x.dim() - 2
    if x.device.type != "cuda" or torch.cuda.get_device_capability(x.device) < WINDOW_CC:
        return f"device {x.device}: the box kernel needs TMA and wgmma (sm90)"
    if str(x.dtype).removeprefix("torch.") not in WINDOW_DTYPES or not x.dtype == w.dtype == dy.dtype:
        return f"dtype {x.dtype}: the box kernel multiplies {' or '.join(WINDOW_DTYPES)} (wgmma)"
    if groups != 1 or nd not in (2, 3) or any(d != 1 for d in dilation):
        return f"groups={groups}, {nd}-d, dilation {tuple(dilation)}: boxes are one group's dilation-1 2-d or 3-d window"
    if memory_format_of(x) is torch.contiguous_format and x.shape[1] > 1:
        return "an input stored channels first: a box copies channels-last rows"
    return None


def _view_reason(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                 pad: Sequence[int]) -> str | None:
    if _view(x, w, dy, stride, pad) is None:
        return (f"stride {tuple(stride)} on a {'x'.join(map(str, x.shape[2:]))} input: neither a stride-1 window, a "
                "2-d phase view (the strides divide the extents) nor a strided unpadded 1x1 one's view")
    return None


def _params(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
            pad: Sequence[int]) -> ConvParams:
    nd = x.dim() - 2
    right = tuple((dy.shape[2 + i] - 1) * stride[i] + w.shape[2 + i] - 1 - pad[i] - (x.shape[2 + i] - 1)
                  for i in range(nd))
    return ConvParams(nd, tuple(stride), tuple(pad), right, (1,) * nd, 1, True)


def _view(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
          pad: Sequence[int]) -> tuple[torch.Tensor, tuple[int, int]] | None:
    p = _params(x, w, dy, stride, pad)
    if any(s != 1 for s in stride) and x.dim() == 5 and not pointwise_strided(p, w.shape[2:]):
        return None
    return input_view(p, x, w.shape[2:])


def tile(co: int, c: int, taps: int, chunks: int, sms: int) -> tuple[int, int, int, int]:
    """(BM output channels, BN input channels, ring stages, slices) for a weight gradient of ``co`` x ``c``
    channels, ``taps`` window taps and ``chunks`` position boxes: 128 x 256 tiles (narrower where the
    channels are fewer; BN divides ``c``), as many stages as ``SMEM_BYTES`` holds up to 4, and the slices
    that minimise a small model's time: the main loop over whole waves of resident programs (or the
    GPU's rate, once every SM is busy) plus the time to add the slices' partial sums. Its rates were
    fitted to the slicings measured on the suite's layers (``docs/decisions.md#d26``)."""
    bm = 128 if co >= 128 else 64
    bn = next(b for b in ((256, 128, 64, 32, 16) if bm == 128 else (128, 64, 32, 16)) if c % b == 0)
    stage_bytes = POSITIONS * (bm + bn) * 2
    stages = max(2, min(4, SMEM_BYTES // stage_bytes))
    resident = max(1, (227 * 1024) // (stages * stage_bytes + 1024))   # programs per SM
    tiles = taps * -(-co // bm) * (c // bn)
    flops = 2 * chunks * POSITIONS * taps * co * c

    def seconds(split: int) -> float:
        programs = tiles * split
        waves = -(-programs // (sms * resident))
        main = max(waves * flops / programs / (SM_RATE / resident), flops / GPU_RATE)
        return main + (split > 1) * split * co * taps * c * 8 / SUM_RATE
    splits = [2 ** e for e in range(10) if chunks >= 2 ** e * MIN_CHUNKS] or [1]
    return bm, bn, stages, min(splits, key=seconds)


def plan(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int], pad: Sequence[int], sms: int,
         choice: tuple[int, int, int, int] | None = None
         ) -> tuple[tuple[torch.Tensor, ...], tuple[int], tuple[Any, ...], dict[str, Any], Any, int]:
    """The launch on these tensors (``why_not`` None): (tensors: the input's view, dY channels last, the
    float32 workspace), grid, the positional arguments after the tensors' descriptors, constexprs,
    descriptors as ``(tensor index, dims, block)``, and the number of slices. The workspace holds each
    slice's float32 partial sums, or with one slice the gradient itself in the input's dtype. ``choice``
    overrides ``tile``'s (BM, BN, stages, slices), for probes."""
    view = _view(x, w, dy, stride, pad)
    assert view is not None
    xv, strides = view
    three = x.dim() == 5
    n, c, co = x.shape[0], x.shape[1], w.shape[0]
    kd, kh, kw = w.shape[2:] if three else (1, *w.shape[2:])
    od, oh, ow = dy.shape[2:] if three else (1, *dy.shape[2:])
    bi, bd, bh, bw = boxes(n, od, oh, ow, POSITIONS)[0]
    n_db, n_hb, n_wb = -(-od // bd), -(-oh // bh), -(-ow // bw)
    chunks = -(-n // bi) * n_db * n_hb * n_wb
    taps = kd * kh * kw
    bm, bn, stages, split = choice or tile(co, c, taps, chunks, sms)
    if c % bn or bm not in (64, 128) or not 1 <= split <= chunks:
        raise ValueError(f"weight gradient tile (BM, BN, stages, slices) = {(bm, bn, stages, split)}: BN must divide "
                         f"{c} input channels, BM be 64 or 128, the slices at most the {chunks} position blocks")
    per_split = -(-chunks // split)
    split = -(-chunks // per_split)  # no slice empty
    if split * co * taps * c >= 2 ** 31:
        split = 1  # the workspace's offsets are 32-bit
        per_split = chunks
    dyc = dy.contiguous(memory_format=memory_format_of(x))
    # One slice's sums are the gradient itself, stored in the input's dtype: no sum, no cast after it.
    ws = torch.empty((split, co, taps, c), device=x.device, dtype=torch.float32 if split > 1 else x.dtype)
    rank = x.dim()
    # Channels last (unit stride) in every descriptor; a 2-d input's phase view is read in its own order.
    ydims = (0, *range(2, rank), 1)
    xbox = (bi, bd, bh, bw, bn) if three else (bi, bh, 1, bw, bn)
    ybox = (bi, bd, bh, bw, bm) if three else (bi, bh, bw, bm)
    descriptors = ((0, ydims if three else tuple(range(5)), xbox), (1, ydims, ybox))
    pads = tuple(pad) if three else (0, *pad)
    kwargs = {"THREE": three, "C": c, "KD": kd, "KH": kh, "KW": kw, "PD": pads[0], "PH": pads[1], "PW": pads[2],
              "SH": strides[0], "SW": strides[1], "BI": bi, "BD": bd, "BH": bh, "BW": bw, "STAGES": stages,
              "num_warps": bm // 16}
    grid = (split * taps * -(-co // bm) * (c // bn), )
    return (xv, dyc, ws), grid, (co, chunks, per_split, n_db, n_hb, n_wb, -(-co // bm)), kwargs, descriptors, split


@dataclass(frozen=True)
class WeightGradLaunch:
    """A convolution's weight gradient on the box kernel, bound once (``_weight_grad_launch``): later calls
    pass tensors of the same shapes and strides and allocate only the buffers."""
    launch: Callable[..., None]
    """The box kernel's prebound launch on (the input, dY channels last, the workspace)."""
    workspace: tuple[int, ...]
    """(slices, C_out, taps, C): float32 partial sums per slice; with one slice, the gradient itself."""
    finish: Callable[..., None] | None
    """With several slices: ``sum_slices``'s prebound launch on (the workspace, the gradient), which adds the
    slices in order into the gradient's dtype; None with one."""
    whole: bool
    """Whether the input is first padded to whole phases of the stride (``_whole_phases``)."""
    size: tuple[int, ...]
    """The gradient's shape, the weight's: (C_out, C, *window)."""
    strides: tuple[int, ...]
    """Its channels-last strides over the (C_out, *window, C) rows the kernels store."""


_LAUNCHES: dict[tuple[Any, ...], WeightGradLaunch | None] = {}
"""Per convolution (the tensors' shapes, strides, dtypes and device, its stride, padding, dilation and groups):
its ``WeightGradLaunch``, or None where the kernel cannot run. A training loop's backward binds each layer's
kernels once; later calls check only the addresses' alignment. Bounded (``MAX_LAUNCHES``) and forgotten at each
dispatch generation (``fastpath.invalidate()``)."""

MAX_LAUNCHES = 1 << 12
"""Convolutions whose prebound launches each table keeps; a full table starts over (a model has far fewer)."""

SUM_BLOCK, SUM_WARPS = 256, 2
"""Gradient elements and warps per program of ``sum_slices``: a large layer's gradient is small (64 x 128
channels x 9 taps: 73,728 elements) and its slices many, so small programs, several on each SM, keep more
loads in flight than a few large ones (on that layer on the H200, one slice at a time in programs of 1,024
elements took 57 µs; eight at a time in these, 28)."""


def weight_grad_by_boxes(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                         pad: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor | None:
    """dW of a convolution on the box kernel, (CO, C, *K) with channels-last strides, or None where it
    cannot run (``why_not``; also tensors TMA cannot address: ``build.tma_aligned``)."""
    if not _launchable(x, w, dy):
        return None
    key = (x.shape, x.stride(), dy.shape, dy.stride(), w.shape, x.dtype, w.dtype, dy.dtype, x.device, tuple(stride),
           tuple(pad), tuple(dilation), groups)
    if key not in _LAUNCHES:
        _remember(_LAUNCHES, key, _weight_grad_launch(x, w, dy, stride, pad, dilation, groups))
    bound = _LAUNCHES.get(key)
    if bound is None:
        return None
    xw = _whole_phases(x, stride) if bound.whole else x
    # x is channels last here (``why_not`` passed for the key's strides): its memory format without asking
    dyc = dy.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    if xw.data_ptr() % 16 or dyc.data_ptr() % 16:   # the key fixed the strides (``_weight_grad_launch`` checked them)
        return None
    # Each call's buffers are its own (the caching allocator hands out the same ones on the same stream):
    # nothing is shared between calls on two streams, or with a graph that captured one.
    if bound.finish is None:
        dw = torch.empty(bound.workspace, device=x.device, dtype=x.dtype)
        bound.launch(xw, dyc, dw)   # the input's view starts at its address: the launch rebinds the view there
    else:
        ws = torch.empty(bound.workspace, device=x.device, dtype=torch.float32)
        dw = torch.empty(bound.workspace[1:], device=x.device, dtype=x.dtype)
        bound.launch(xw, dyc, ws)
        bound.finish(ws, dw)   # the slices added in order: deterministic
    return dw.as_strided(bound.size, bound.strides)


_REAL = (torch.Tensor, torch.nn.Parameter)
"""Classes whose instances hold data: a tensor of exactly one of them is not fake, so only a subclass's
instance is asked (``is_fake`` costs about ten times the class check, six times per backward)."""


def _launchable(*tensors: torch.Tensor) -> bool:
    """CUDA tensors with data: not the fake ones that tracing (torch.compile, opcheck) runs a backward on,
    whose shapes may be symbolic; those take the routes that are custom ops."""
    return all(t.device.type == "cuda" and (type(t) in _REAL or not is_fake(t)) for t in tensors)


def _weight_grad_launch(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int], pad: Sequence[int],
                        dilation: Sequence[int], groups: int) -> WeightGradLaunch | None:
    """The weight gradient bound for such tensors; None where it cannot run (``why_not``, or strides TMA
    cannot address)."""
    whole = False
    if why_not(x, w, dy, stride, pad, dilation, groups) is not None:
        # a strided 2-d window over extents the stride does not divide: its phase view of the padded input
        if x.dim() != 4 or all(s == 1 for s in stride) or _common_reason(x, w, dy, dilation, groups) is not None:
            return None
        x, whole = _whole_phases(x, stride), True
        if why_not(x, w, dy, stride, pad, dilation, groups) is not None:
            return None
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    tensors, grid, tail, kwargs, descriptors, split = plan(x, w, dy, stride, pad, sms)
    if not _strides_aligned(tensors[:2]):
        return None
    ws = tensors[2]
    finish = None
    if split > 1:
        dw = torch.empty(ws.shape[1:], device=x.device, dtype=x.dtype)
        n = dw.numel()
        finish = _prebound(SUM_KERNEL, (-(-n // SUM_BLOCK), ), (ws, dw), (n, split),
                           {"BLOCK": SUM_BLOCK, "num_warps": SUM_WARPS}, ())
    # the (C_out, *window, C) rows the kernels store are the weight's shape in channels-last strides
    strides = torch.empty(w.shape, device="meta", memory_format=memory_format_of(x)).stride()
    return WeightGradLaunch(_prebound(WGRAD_KERNEL, grid, tensors, tail, kwargs, descriptors), tuple(ws.shape),
                            finish, whole, tuple(w.shape), strides)


def _strides_aligned(tensors: Sequence[torch.Tensor]) -> bool:
    """TMA's rules on the tensors' strides only (``build.tma_aligned`` at offset 0): each call checks its
    own addresses."""
    return tma_aligned([t.as_strided(t.shape, t.stride(), 0) for t in tensors])


def _prebound(kernel: Any, grid: tuple[int], tensors: Sequence[torch.Tensor], tail: Sequence[Any],
              kwargs: dict[str, Any], descriptors: Any) -> Callable[..., None]:
    """``kernel``'s launch on ``tensors`` at ``grid``, prebound (``Launch.prebind``): later calls pass tensors
    of the same shapes and strides. The first descriptors carry the shared-memory layouts that the Gluon
    signature specialises on (``conv_window.gluon_descriptor``)."""
    descs = [gluon_descriptor(tensors[i], dims, block) for i, dims, block in descriptors]
    device = tensors[0].device
    with torch.cuda.device(device):
        run = kernel[grid]
    return Launch(kernel, run, grid, (*tensors, *descs, *tail), kwargs, len(tensors), device, descriptors).prebind()


def _whole_shape(x: torch.Tensor, stride: Sequence[int]) -> tuple[int, ...]:
    """``x``'s shape with its extents rounded up to whole phases of the stride."""
    return (*x.shape[:2], *(-(-x.shape[2 + i] // s) * s for i, s in enumerate(stride)))


def _whole_phases(x: torch.Tensor, stride: Sequence[int]) -> torch.Tensor:
    """A channels-last copy of a 2-d input zero-padded at the end to whole phases of the stride: positions
    past the input, which a convolution reads as zeros (its padding), so the weight gradient is the same."""
    whole = _whole_shape(x, stride)
    # One op (torch's constant pad keeps a channels-last input's format) where the copy into a buffer and the
    # zeroing of its two margins were four, each with its view: a backward's host time on small layers.
    out = torch.nn.functional.pad(x, (0, whole[3] - x.shape[3], 0, whole[2] - x.shape[2]))
    return out if out.is_contiguous(memory_format=torch.channels_last) else \
        out.contiguous(memory_format=torch.channels_last)


# ----------------------------------------------------------------------------- the input gradient

def input_why_not(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                  dilation: Sequence[int], groups: int) -> str | None:
    """Why ``input_grad_by_boxes`` cannot compute this input gradient, or None: as ``why_not``'s device,
    dtype, group, dilation and layout rules; both channel counts multiples of 16 (the output channels
    are the reduction, the input channels the tile's columns); a strided convolution only in 2-d, with
    strides that divide the input's extents (dX's phase view)."""
    reason = _common_reason(x, w, dy, dilation, groups)
    if reason is not None:
        return reason
    if x.shape[1] % 16 or w.shape[0] % 8:
        return (f"{x.shape[1]} input, {w.shape[0]} output channels: blocks of 16 input channels, output channels a "
                "multiple of 8 (TMA's 16-byte strides)")
    if any(s != 1 for s in stride) and x.dim() == 5:
        return f"stride {tuple(stride)} in 3-d: the phases run for 2-d inputs"
    return None


Plan = tuple[Any, tuple[int], tuple[torch.Tensor, ...], tuple[int, ...], dict[str, Any], Any]
"""A launch: (kernel, grid, tensors, the integer arguments after their descriptors, constexprs, descriptors as
``(tensor index, dims, block)``), the arguments of ``_prebound``."""


def input_plan(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int], pad: Sequence[int],
               dx: torch.Tensor, sms: int) -> Plan:
    """The input gradient's launch into ``dx`` (channels last, ``_grad_buffer``'s shape; ``input_why_not``
    None): a convolution of dY with the weight's window flipped, read from the weight as it lies
    (``TRANS_W``). A strided convolution's runs every input phase in one launch (``conv_window_phases``:
    per phase the taps that reach it, stored into the phase's rows of dX; zeros where none does); stride 1
    on ``conv_window`` with the window as constexprs. The tensors are dY's view, the weight and dX's view."""
    three = x.dim() == 5
    nd = x.dim() - 2
    n, c, co = x.shape[0], x.shape[1], w.shape[0]
    rows = n * math.prod(-(-dx.shape[2 + i] // stride[i]) for i in range(nd))   # one phase's output positions
    bm, bn = input_tile(rows, c, sms)
    bk = next((b for b in (64, 32) if co % b == 0), 16)   # chunks of the output channels: the reduction
    stages = 3 if bn == 256 else 4
    fmt = memory_format_of(x)
    dyc = dy.contiguous(memory_format=fmt)
    wc = w.contiguous(memory_format=fmt)
    p = ConvParams(nd, (1,) * nd, (0,) * nd, (0,) * nd, (1,) * nd, 1, True)
    view = input_view(p, dyc, (1,) * nd)
    assert view is not None
    dyv = view[0]
    wdims = (0, *range(2, x.dim()), 1)
    strided = any(st != 1 for st in stride)
    extents = [dx.shape[2 + i] // stride[i] for i in range(nd)]   # one phase's (all phases' extents are equal)
    od, oh, ow = extents if three else (1, *extents)
    bi, bd, bh, bw = boxes(n, od, oh, ow, bm)[0]
    n_db, n_hb, n_wb, n_cb = -(-od // bd), -(-oh // bh), -(-ow // bw), -(-c // bn)
    per_phase = -(-n // bi) * n_db * n_hb * n_wb * n_cb
    xbox = (bi, bd, bh, bw, bk) if three else (bi, bh, 1, bw, bk)
    wbox = (bk, *[1] * nd, bn)
    if strided:   # dX's phase view: rows s * q + ph of each dim (``dx`` rounded up to whole phases)
        dh, dw_ = dx.shape[2], dx.shape[3]
        out = dx.permute(0, 2, 3, 1).view(n, dh // stride[0], stride[0], dw_ // stride[1], stride[1] * c)
        descriptors: Any = ((0, tuple(range(5)), xbox), (1, wdims, wbox), (2, tuple(range(5)), (bi, bh, 1, bw, bn)))
        kwargs = {"C": co, "KH": w.shape[2], "KW": w.shape[3], "PH": pad[0], "PW": pad[1], "BI": bi, "BH": bh,
                  "BW": bw, "BN": bn, "STAGES": stages, "WSH": stride[0], "WSW": stride[1], "num_warps": bm // 16}
        return (PHASES_KERNEL, (per_phase * stride[0] * stride[1], ), (dyv, wc, out),
                (c, n_db, n_hb, n_wb, n_cb, per_phase), kwargs, descriptors)
    # stride 1: the whole window flipped, its left padding k - 1 - pad
    kd, kh, kw = w.shape[2:] if three else (1, *w.shape[2:])
    lefts = [w.shape[2 + i] - 1 - pad[i] for i in range(nd)]
    pd_, ph_, pw_ = lefts if three else (0, *lefts)
    ybox = (bi, bd, bh, bw, bn) if three else (bi, bh, bw, bn)
    descriptors = ((0, wdims if three else tuple(range(5)), xbox), (1, wdims, wbox), (2, wdims, ybox))
    kwargs = {"THREE": three, "C": co, "KD": kd, "KH": kh, "KW": kw, "PD": pd_, "PH": ph_, "PW": pw_, "SH": 1,
              "SW": 1, "BI": bi, "BD": bd, "BH": bh, "BW": bw, "BN": bn, "STAGES": stages, "TRANS_W": True,
              "WSH": 1, "WSW": 1, "WRH": 0, "WRW": 0, "PHO": -1, "PWO": 0, "num_warps": bm // 16}
    return (CONV_KERNEL, (per_phase, ), (dyv, wc, dx), (c, n_db, n_hb, n_wb, n_cb), kwargs, descriptors)


INPUT_TILES = ((128, 256), (128, 128), (64, 256), (64, 128), (64, 64), (64, 32), (64, 16))
"""The input gradient's (BM positions, BN input channels) tiles, the largest first."""

FILL = 0.7
"""Fewest programs per SM that ``input_tile`` takes a tile for: a phase of a strided layer has few output
positions, and 128 x 256 tiles left most SMs idle (14 x 14 inputs at batch 64: 25 programs a phase)."""


def input_tile(rows: int, c: int, sms: int) -> tuple[int, int]:
    """The largest of ``INPUT_TILES`` (BN dividing ``c``) that gives one launch ``FILL`` programs per SM over
    ``rows`` output positions and ``c`` channels, else the one that gives the most."""
    tiles = [(bm, bn) for bm, bn in INPUT_TILES if c % bn == 0]
    programs = [-(-rows // bm) * (c // bn) for bm, bn in tiles]
    return next((t for t, p in zip(tiles, programs) if p >= FILL * sms), tiles[programs.index(max(programs))])


@dataclass(frozen=True)
class InputGradLaunch:
    """A convolution's input gradient on the box kernel, bound once (``input_plan``)."""
    launch: Callable[..., None]
    """The prebound launch on (dY channels last, the weight channels last, dX's buffer)."""
    memory_format: Any
    """dX's memory format (channels last)."""
    buffer: tuple[int, ...]
    """dX's buffer shape (``_grad_buffer``'s: rounded up to whole phases of the stride)."""
    extents: tuple[int, ...] | None
    """The input's extents where the buffer is larger: dX is a view of its first rows."""


_INPUT_LAUNCHES: dict[tuple[Any, ...], InputGradLaunch | None] = {}
"""As ``_LAUNCHES``, for the input gradient."""


def _remember(table: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(table) >= MAX_LAUNCHES:
        table.clear()
    table[key] = value


def _forget() -> None:
    _LAUNCHES.clear()
    _INPUT_LAUNCHES.clear()


generation.on_bump(_forget)


def input_grad_by_boxes(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: Sequence[int],
                        pad: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor | None:
    """dX of a convolution on the box kernel, channels last, or None where it cannot run
    (``input_why_not``; also tensors TMA cannot address). No weight is copied: each tap's box is read
    from the weight as it lies, at the flipped tap; a strided convolution's phases are stored into dX's
    rows of each phase directly."""
    if not _launchable(x, w, dy):
        return None
    key = (x.shape, x.stride(), dy.shape, dy.stride(), w.shape, w.stride(), x.dtype, w.dtype, dy.dtype, x.device,
           tuple(stride), tuple(pad), tuple(dilation), groups)
    if key not in _INPUT_LAUNCHES:
        bound = None
        if input_why_not(x, w, dy, stride, dilation, groups) is None:
            dx = _grad_buffer(x, stride)
            sms = torch.cuda.get_device_properties(x.device).multi_processor_count
            plan = input_plan(x, w, dy, stride, pad, dx, sms)
            if _strides_aligned(plan[2]):
                bound = InputGradLaunch(_prebound(*plan), memory_format_of(x), tuple(dx.shape),
                                        tuple(x.shape[2:]) if dx.shape != x.shape else None)
        _remember(_INPUT_LAUNCHES, key, bound)
    entry = _INPUT_LAUNCHES.get(key)
    if entry is None:
        return None
    fmt = entry.memory_format
    dyc = dy.contiguous(memory_format=fmt)
    wc = w.contiguous(memory_format=fmt)
    if dyc.data_ptr() % 16 or wc.data_ptr() % 16:   # the key fixed the strides (checked when bound)
        return None
    dx = torch.empty(entry.buffer, device=x.device, dtype=x.dtype, memory_format=fmt)   # ``_grad_buffer``'s
    entry.launch(dyc, wc, dx)   # the views of dY and dX start at their addresses: the launch rebinds them
    if entry.extents is not None:   # rows past the input (whole phases' padding): a view of the first ones
        dx = dx[(slice(None), slice(None), *(slice(0, e) for e in entry.extents))]
    return dx


def _grad_buffer(x: torch.Tensor, stride: Sequence[int]) -> torch.Tensor:
    """dX's buffer: ``x``'s shape, channels last, its extents rounded up to whole phases of the stride."""
    return torch.empty(_whole_shape(x, stride), device=x.device, dtype=x.dtype, memory_format=memory_format_of(x))
