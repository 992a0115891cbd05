"""Hand-written stride-1 convolutions with TMA copies: the kernels the conv probes compare.

``kernels()`` returns two ``triton.jit`` kernels over channels-last fp16 tensors, one program per
output tile in GROUP_M = 8 order:

* ``shift``: X viewed as the (N*H*W, C) matrix; for window tap (rh, rw) the A tile is the 2-D box at
  row m0 + (rh - P) * W + (rw - P), rows whose tap falls outside the image zeroed in registers.
* ``box``: the output tile a BH x BW rectangle of one image, its A tile the box of X at the tap,
  reshaped into the tile's rows. ``A_FORM``: 0 the 4-D (N, H, W, C) descriptor at (n, oh0 + rh - P,
  ow0 + rw - P, c0); 1 a 3-D (N*H, W, C) one (rows past an image's edge read the next image: for
  timing and determinism only); 2 a 4-D one over X padded by P (coordinates never negative).
  ``B_FORM`` (the weight's tile, transposed for the dot where stored N x K): 0 the 2-D (CO, KH*KW*C)
  matrix; 1 the 4-D (KH, KW, CO, C) tensor, a (1, 1, BN, BK) block; 2 the 3-D (KH*KW, CO, C) one, a
  (1, BN, BK) block; 3 the 2-D (KH*KW*C, CO) copy (K x N). ``VIA_REGS`` zeroes the rows outside the
  output in registers before the dot (so the dot reads A from registers).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def _grouped(npm, npn):
    t = tl.program_id(0)
    first = (t // (8 * npn)) * 8
    gsz = tl.minimum(npm - first, 8)
    return first + (t % (8 * npn)) % gsz, (t % (8 * npn)) // gsz


@triton.jit
def _tap(k, CH: tl.constexpr, KW: tl.constexpr, BK: tl.constexpr):
    """Chunk k of the reduction: its window tap, first channel, and the tap's (rh, rw)."""
    tap = k // CH
    rh = tap // KW
    return tap, (k - tap * CH) * BK, rh, tap - rh * KW


@triton.jit
def _weight(w_desc, tap, rh, rw, c0, pn, C: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            B_FORM: tl.constexpr):
    """The BK x BN weight tile of tap (rh, rw), channels c0.."""
    if B_FORM == 0:
        b = tl.trans(w_desc.load([pn * BN, tap * C + c0]))
    elif B_FORM == 1:
        b = tl.trans(w_desc.load([rh, rw, pn * BN, c0]).reshape(BN, BK))
    elif B_FORM == 2:
        b = tl.trans(w_desc.load([tap, pn * BN, c0]).reshape(BN, BK))
    else:
        b = w_desc.load([tap * C + c0, pn * BN])
    return b


@triton.jit
def shift(x_desc, w_desc, y_desc, N, H, W, CO, C: tl.constexpr, KW: tl.constexpr, TAPS: tl.constexpr,
          P: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr,
          B_FORM: tl.constexpr):
    pm, pn = _grouped(tl.cdiv(N * H * W, BM), tl.cdiv(CO, BN))
    offs = pm * BM + tl.arange(0, BM)
    ow = offs % W
    oh = (offs // W) % H
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    CH: tl.constexpr = C // BK
    for k in tl.range(0, TAPS * CH, num_stages=S):
        tap, c0, rh, rw = _tap(k, CH, KW, BK)
        a = x_desc.load([pm * BM + (rh - P) * W + (rw - P), c0])
        ih = oh + (rh - P)
        iw = ow + (rw - P)
        a = tl.where(((ih >= 0) & (ih < H) & (iw >= 0) & (iw < W))[:, None], a, 0.0)
        acc = tl.dot(a, _weight(w_desc, tap, rh, rw, c0, pn, C, BN, BK, B_FORM), acc)
    y_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


@triton.jit
def box(x_desc, w_desc, y_desc, N, H, W, OH, OW, CO, C: tl.constexpr, KW: tl.constexpr, TAPS: tl.constexpr,
        P: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
        S: tl.constexpr, A_FORM: tl.constexpr, B_FORM: tl.constexpr, VIA_REGS: tl.constexpr):
    th = tl.cdiv(OH, BH)
    tw = tl.cdiv(OW, BW)
    pm, pn = _grouped(N * th * tw, tl.cdiv(CO, BN))
    n = pm // (th * tw)
    r = pm - n * (th * tw)
    oh0 = (r // tw) * BH
    ow0 = (r - (r // tw) * tw) * BW
    rows = tl.arange(0, BH * BW)
    inside = (oh0 + rows // BW < OH) & (ow0 + rows % BW < OW)
    acc = tl.zeros((BH * BW, BN), dtype=tl.float32)
    CH: tl.constexpr = C // BK
    for k in tl.range(0, TAPS * CH, num_stages=S):
        tap, c0, rh, rw = _tap(k, CH, KW, BK)
        if A_FORM == 0:
            a = x_desc.load([n, oh0 + rh - P, ow0 + rw - P, c0]).reshape(BH * BW, BK)
        elif A_FORM == 1:
            a = x_desc.load([n * H + oh0 + rh - P, ow0 + rw - P, c0]).reshape(BH * BW, BK)
        else:
            a = x_desc.load([n, oh0 + rh, ow0 + rw, c0]).reshape(BH * BW, BK)
        if VIA_REGS:
            a = tl.where(inside[:, None], a, 0.0)
        acc = tl.dot(a, _weight(w_desc, tap, rh, rw, c0, pn, C, BN, BK, B_FORM), acc)
    y_desc.store([n, oh0, ow0, pn * BN], acc.to(tl.float16).reshape(1, BH, BW, BN))


def kernels() -> dict[str, Any]:
    """The probes' kernels by name."""
    return {"shift": shift, "box": box}
