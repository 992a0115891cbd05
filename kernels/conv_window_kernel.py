"""The box kernel's device code (Gluon; the weight gradient's slice sum in Triton): ``conv_window.py`` and
``conv_window_grad.py`` hold what runs on the host.

Device code, not host Python: Gluon's constexpr annotations and layouts are not types mypy can follow, so
this module is left out of the type check (``setup.cfg``).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)


@gluon.jit
def _window_copy(x_desc, bar, dst, n0, od0, oh0, ow0, c0, rd, rh, rw, THREE: gl.constexpr, C: gl.constexpr,
                 PD: gl.constexpr, PH, PW, SH: gl.constexpr, SW: gl.constexpr):
    """TMA copy into ``dst`` of the input box that window tap (rd, rh, rw) reads for the output block at
    (n0, od0, oh0, ow0), channels c0.., arriving on ``bar``.

    A 2-d input comes as its phase view (N, H / SH, SH, W / SW, SW * C): input row oh * SH + rh - PH is
    row block oh + dh of phase ph (rh - PH = dh * SH + ph, 0 <= ph < SH), and likewise its column, whose
    phase selects a run of C channels; so a strided window is a box of the view too (SH = SW = 1: the
    input itself)."""
    if THREE:
        tma.async_copy_global_to_shared(x_desc, [n0, od0 + rd - PD, oh0 + rh - PH, ow0 + rw - PW, c0], bar, dst)
    else:
        ph = ((rh - PH) % SH + SH) % SH  # integer division truncates: the phase first, then an exact quotient
        pw = ((rw - PW) % SW + SW) % SW
        tma.async_copy_global_to_shared(x_desc, [n0, oh0 + (rh - PH - ph) // SH, ph, ow0 + (rw - PW - pw) // SW,
                                                 pw * C + c0], bar, dst)


@gluon.jit
def _ring_barriers(STAGES: gl.constexpr):
    """One mbarrier per ring stage, each completed by its stage's copies."""
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(bars.index(st), count=1)
    return bars


@gluon.jit
def _issue(x_desc, w_desc, a_ring, b_ring, bars, i, s, n0, od0, oh0, ow0, co0, THREE: gl.constexpr,
           C: gl.constexpr, KD: gl.constexpr, KH, KW, PD: gl.constexpr, PH, PW, SH: gl.constexpr, SW: gl.constexpr,
           TRANS_W: gl.constexpr, WSH: gl.constexpr, WSW: gl.constexpr, WRH, WRW):
    """Copy reduction chunk ``i`` (window tap, then channels) of the tile at (n0, od0, oh0, ow0, co0) into
    ring stage ``s``: the input's box at the tap and the weight's box of the tap's channels.

    ``TRANS_W``: the input gradient, a convolution of dY with the weight's channels swapped and its window
    flipped. The weight is read as it lies, (CO, [KD,] KH, KW, C): its [reduction channels, output channels]
    box at tap (WRH + WSH * (KH - 1 - rh), WRW + WSW * (KW - 1 - rw)) is the B operand (K by N, N
    contiguous); WSH, WRH > 1, 0: one input phase of a strided convolution's gradient, whose taps are every
    stride-th of the window from the phase's first (``conv_grad.tap_run``).

    KH, KW, PH, PW, WRH and WRW are constexprs from ``conv_window``'s callers (a call with constexpr
    arguments compiles for their values) and values of the program's phase in ``conv_window_phases``."""
    BK: gl.constexpr = x_desc.block_type.shape[-1]
    CH: gl.constexpr = (C + BK - 1) // BK  # a last partial chunk reads zeros past the channels (TMA fill)
    tap = i // CH
    c0 = (i - tap * CH) * BK
    rd = tap // (KH * KW)
    rhw = tap - rd * (KH * KW)
    rh = rhw // KW
    rw = rhw - rh * KW
    bar = bars.index(s)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes)
    a_box = a_ring.index(s)._reinterpret(x_desc.dtype, x_desc.block_type.shape, x_desc.layout)
    b_box = b_ring.index(s)._reinterpret(w_desc.dtype, w_desc.block_type.shape, w_desc.layout)
    _window_copy(x_desc, bar, a_box, n0, od0, oh0, ow0, c0, rd, rh, rw, THREE, C, PD, PH, PW, SH, SW)
    if TRANS_W:
        if THREE:
            tma.async_copy_global_to_shared(w_desc, [c0, KD - 1 - rd, KH - 1 - rh, KW - 1 - rw, co0], bar, b_box)
        else:
            tma.async_copy_global_to_shared(w_desc, [c0, WRH + WSH * (KH - 1 - rh), WRW + WSW * (KW - 1 - rw), co0],
                                            bar, b_box)
    elif THREE:
        tma.async_copy_global_to_shared(w_desc, [co0, rd, rh, rw, c0], bar, b_box)
    else:
        tma.async_copy_global_to_shared(w_desc, [co0, rh, rw, c0], bar, b_box)


@gluon.jit
def _conv_tile(t, x_desc, w_desc, y_desc, b_ptr, CO, n_db, n_hb, n_wb, n_cb, HAS_BIAS: gl.constexpr,
               THREE: gl.constexpr, C: gl.constexpr, KD: gl.constexpr, KH, KW, PD: gl.constexpr, PH, PW,
               SH: gl.constexpr, SW: gl.constexpr, BI: gl.constexpr, BD: gl.constexpr, BH: gl.constexpr,
               BW: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, TRANS_W: gl.constexpr, WSH: gl.constexpr,
               WSW: gl.constexpr, WRH, WRW, PHASED: gl.constexpr, PHO, PWO, num_warps: gl.constexpr):
    """Output tile ``t`` of a convolution on boxes (``_issue``'s arguments). ``PHASED``: the output is dX's
    phase view (N, H/s, s, W/s, s*C) and the tile goes to phase (PHO, PWO), a strided input gradient's."""
    BK: gl.constexpr = x_desc.block_type.shape[-1]
    dtype: gl.constexpr = x_desc.dtype
    BM: gl.constexpr = BI * BD * BH * BW
    KT = KD * KH * KW * ((C + BK - 1) // BK)   # a constexpr where the window is; 0 for a phase no tap reaches
    # Output channel blocks fastest: programs that run side by side read the same input window from L2.
    cb = t % n_cb
    t = t // n_cb
    wb = t % n_wb
    t = t // n_wb
    hb = t % n_hb
    t = t // n_hb
    od0 = (t % n_db) * BD
    n0 = (t // n_db) * BI
    oh0 = hb * BH
    ow0 = wb * BW
    co0 = cb * BN

    a_ring = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], gl.NVMMASharedLayout.get_default_for([BM, BK], dtype))
    if TRANS_W:  # the weight's box as it lies: K by N
        b_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, BN],
                                           gl.NVMMASharedLayout.get_default_for([BK, BN], dtype))
    else:
        b_ring = gl.allocate_shared_memory(dtype, [STAGES, BN, BK],
                                           gl.NVMMASharedLayout.get_default_for([BN, BK], dtype))
    bars = _ring_barriers(STAGES)
    # One warpgroup per 64 rows (wgmma's M), the whole BLOCK_N per instruction.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_layout)

    for i in gl.static_range(STAGES - 1):
        if i < KT:  # a ring deeper than the reduction copies what there is
            _issue(x_desc, w_desc, a_ring, b_ring, bars, i, i, n0, od0, oh0, ow0, co0, THREE, C, KD, KH, KW, PD, PH,
                   PW, SH, SW, TRANS_W, WSH, WSW, WRH, WRW)
    for k in range(KT):
        stage = k % STAGES
        mbarrier.wait(bars.index(stage), (k // STAGES) & 1)
        if TRANS_W:
            acc = warpgroup_mma(a_ring.index(stage), b_ring.index(stage), acc, is_async=True)
        else:
            acc = warpgroup_mma(a_ring.index(stage), b_ring.index(stage).permute((1, 0)), acc, is_async=True)
        # One MMA in flight: chunk k - 1's has finished, so its stage takes chunk k + STAGES - 1.
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        nxt = k + STAGES - 1
        if nxt < KT:
            _issue(x_desc, w_desc, a_ring, b_ring, bars, nxt, nxt % STAGES, n0, od0, oh0, ow0, co0, THREE, C, KD, KH,
                   KW, PD, PH, PW, SH, SW, TRANS_W, WSH, WSW, WRH, WRW)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))

    if HAS_BIAS:
        cols = co0 + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
        acc = acc + gl.load(b_ptr + cols, mask=cols < CO, other=0.0).to(gl.float32)[None, :]
    # The ring is dead here, so the output tile may share its memory.
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], gl.NVMMASharedLayout.get_default_for([BM, BN], dtype))
    c_smem.store(acc.to(dtype))
    fence_async_shared()
    y_box = c_smem._reinterpret(dtype, y_desc.block_type.shape, y_desc.layout)
    if THREE:
        tma.async_copy_shared_to_global(y_desc, [n0, od0, oh0, ow0, co0], y_box)
    elif PHASED:  # one phase of a strided input gradient: the output is dX's phase view (N, H/s, s, W/s, s*C)
        tma.async_copy_shared_to_global(y_desc, [n0, oh0, PHO, ow0, PWO * CO + co0], y_box)
    else:
        tma.async_copy_shared_to_global(y_desc, [n0, oh0, ow0, co0], y_box)
    tma.store_wait(pendings=0)


# The launch's tensors come first (what ``runtime.prebind`` rebinds per call), then their descriptors.
@gluon.jit
def conv_window(x, w, y, x_desc, w_desc, y_desc, CO, n_db, n_hb, n_wb, n_cb, THREE: gl.constexpr, C: gl.constexpr,
                KD: gl.constexpr, KH: gl.constexpr, KW: gl.constexpr, PD: gl.constexpr, PH: gl.constexpr,
                PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr, BI: gl.constexpr, BD: gl.constexpr,
                BH: gl.constexpr, BW: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, TRANS_W: gl.constexpr,
                WSH: gl.constexpr, WSW: gl.constexpr, WRH: gl.constexpr, WRW: gl.constexpr, PHO: gl.constexpr,
                PWO: gl.constexpr, num_warps: gl.constexpr):
    _conv_tile(gl.program_id(0), x_desc, w_desc, y_desc, x, CO, n_db, n_hb, n_wb, n_cb, False, THREE, C, KD, KH, KW,
               PD, PH, PW, SH, SW, BI, BD, BH, BW, BN, STAGES, TRANS_W, WSH, WSW, WRH, WRW, PHO >= 0, PHO, PWO,
               num_warps)


@gluon.jit
def conv_window_bias(x, w, b, y, x_desc, w_desc, y_desc, CO, n_db, n_hb, n_wb, n_cb, THREE: gl.constexpr,
                     C: gl.constexpr, KD: gl.constexpr, KH: gl.constexpr, KW: gl.constexpr, PD: gl.constexpr,
                     PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr, BI: gl.constexpr,
                     BD: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
                     TRANS_W: gl.constexpr, WSH: gl.constexpr, WSW: gl.constexpr, WRH: gl.constexpr,
                     WRW: gl.constexpr, PHO: gl.constexpr, PWO: gl.constexpr, num_warps: gl.constexpr):
    _conv_tile(gl.program_id(0), x_desc, w_desc, y_desc, b, CO, n_db, n_hb, n_wb, n_cb, True, THREE, C, KD, KH, KW,
               PD, PH, PW, SH, SW, BI, BD, BH, BW, BN, STAGES, TRANS_W, WSH, WSW, WRH, WRW, PHO >= 0, PHO, PWO,
               num_warps)


@gluon.jit
def _phase_taps(phase, S: gl.constexpr, P: gl.constexpr, K: gl.constexpr):
    """Along one dim of a stride-S, padding-P, K-tap window (dilation 1), the taps that reach input phase
    ``phase``: (the first, their count J, J - 1 - t: the flipped window's left padding over dY, t the first
    tap's output row), as ``conv_grad.tap_run`` counts them (a CPU test runs this function's Python body
    against it)."""
    first = (phase + P) % S
    count = (K - first + S - 1) // S   # 0 where the first tap is past the window (K - first > -S)
    return first, count, count - 1 - (phase + P - first) // S


# Tensors first, then their descriptors, as ``conv_window``'s.
@gluon.jit
def conv_window_phases(x, w, y, x_desc, w_desc, y_desc, CO, n_db, n_hb, n_wb, n_cb, per_phase, C: gl.constexpr,
                       KH: gl.constexpr, KW: gl.constexpr, PH: gl.constexpr, PW: gl.constexpr, BI: gl.constexpr,
                       BH: gl.constexpr, BW: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
                       WSH: gl.constexpr, WSW: gl.constexpr, num_warps: gl.constexpr):
    """A strided 2-d convolution's input gradient, every input phase in one launch: ``per_phase`` programs
    per phase (the phases' extents are equal: dX is rounded up to whole phases), phase (a, b) the
    convolution of dY (``x``) with the weight's taps that reach it, flipped and read as they lie, stored into
    dX's phase view (``y``); a phase no tap reaches gets zeros. KH, KW: the window; PH, PW: the forward's
    padding; WSH, WSW: its stride."""
    t = gl.program_id(0)
    q = t // per_phase
    pa = q // WSW
    pb = q - pa * WSW
    wrh, kh, lh = _phase_taps(pa, WSH, PH, KH)
    wrw, kw, lw = _phase_taps(pb, WSW, PW, KW)
    _conv_tile(t - q * per_phase, x_desc, w_desc, y_desc, x, CO, n_db, n_hb, n_wb, n_cb, False, False, C, 1, kh, kw,
               0, lh, lw, 1, 1, BI, 1, BH, BW, BN, STAGES, True, WSH, WSW, wrh, wrw, True, pa, pb, num_warps)


@gluon.jit
def _issue_wgrad(x_desc, dy_desc, a_ring, b_ring, bars, p, s, co0, c0, rd, rh, rw, n_db, n_hb, n_wb,
                 THREE: gl.constexpr, C: gl.constexpr, PD: gl.constexpr, PH: gl.constexpr, PW: gl.constexpr,
                 SH: gl.constexpr, SW: gl.constexpr, BI: gl.constexpr, BD: gl.constexpr, BH: gl.constexpr,
                 BW: gl.constexpr):
    """Copy position block ``p`` (width fastest) of the weight gradient's reduction into ring stage ``s``:
    dY's box of output positions and channels co0.., and the input box the tap reads for them."""
    wb = p % n_wb
    p = p // n_wb
    hb = p % n_hb
    p = p // n_hb
    n0 = (p // n_db) * BI
    od0 = (p % n_db) * BD
    oh0 = hb * BH
    ow0 = wb * BW
    bar = bars.index(s)
    mbarrier.expect(bar, x_desc.block_type.nbytes + dy_desc.block_type.nbytes)
    a_box = a_ring.index(s)._reinterpret(dy_desc.dtype, dy_desc.block_type.shape, dy_desc.layout)
    b_box = b_ring.index(s)._reinterpret(x_desc.dtype, x_desc.block_type.shape, x_desc.layout)
    if THREE:
        tma.async_copy_global_to_shared(dy_desc, [n0, od0, oh0, ow0, co0], bar, a_box)
    else:
        tma.async_copy_global_to_shared(dy_desc, [n0, oh0, ow0, co0], bar, a_box)
    _window_copy(x_desc, bar, b_box, n0, od0, oh0, ow0, c0, rd, rh, rw, THREE, C, PD, PH, PW, SH, SW)


# As the forward's: tensors first (what ``runtime.prebind`` rebinds per call), then their descriptors.
@gluon.jit
def conv_window_wgrad(x, dy, ws, x_desc, dy_desc, CO, n_pos, per_split, n_db, n_hb, n_wb, n_cob,
                      THREE: gl.constexpr, C: gl.constexpr, KD: gl.constexpr, KH: gl.constexpr, KW: gl.constexpr,
                      PD: gl.constexpr, PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr,
                      BI: gl.constexpr, BD: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, STAGES: gl.constexpr,
                      num_warps: gl.constexpr):
    """The weight gradient dW[co, tap, c] = sum over output positions of dY[pos, co] * X[pos + tap, c], as
    float32 partial sums ``ws[split, co, tap, c]`` of one slice of the positions per program (``sum_slices``
    adds them in order; one slice stores the gradient itself, in the input's dtype). A program's operands
    are boxes of the same BI x BD x BH x BW output positions: dY's [positions, BM channels] box is the
    wgmma's A (read transposed from shared memory), the input's box at the program's tap, [positions, BN
    channels], its B; TMA's zero fill past the input is the padding, and past dY's edges it adds zeros."""
    BM: gl.constexpr = dy_desc.block_type.shape[-1]
    BN: gl.constexpr = x_desc.block_type.shape[-1]
    BK: gl.constexpr = BI * BD * BH * BW
    TAPS: gl.constexpr = KD * KH * KW
    dtype: gl.constexpr = x_desc.dtype
    # Input channel blocks fastest, then output channel blocks: programs side by side read the same dY and
    # input boxes from L2.
    t = gl.program_id(0)
    cb = t % (C // BN)
    t = t // (C // BN)
    cob = t % n_cob
    t = t // n_cob
    tap = t % TAPS
    split = t // TAPS
    rd = tap // (KH * KW)
    rh = (tap - rd * (KH * KW)) // KW
    rw = tap - rd * (KH * KW) - rh * KW
    co0 = cob * BM
    c0 = cb * BN
    first = split * per_split
    count = gl.minimum(per_split, n_pos - first)

    a_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, BM], gl.NVMMASharedLayout.get_default_for([BK, BM], dtype))
    b_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, BN], gl.NVMMASharedLayout.get_default_for([BK, BN], dtype))
    bars = _ring_barriers(STAGES)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_layout)

    for i in gl.static_range(STAGES - 1):
        if i < count:
            _issue_wgrad(x_desc, dy_desc, a_ring, b_ring, bars, first + i, i, co0, c0, rd, rh, rw, n_db, n_hb, n_wb,
                         THREE, C, PD, PH, PW, SH, SW, BI, BD, BH, BW)
    for k in range(count):
        stage = k % STAGES
        mbarrier.wait(bars.index(stage), (k // STAGES) & 1)
        acc = warpgroup_mma(a_ring.index(stage).permute((1, 0)), b_ring.index(stage), acc, is_async=True)
        # One MMA in flight: block k - 1's has finished, so its stage takes block k + STAGES - 1.
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        nxt = k + STAGES - 1
        if nxt < count:
            _issue_wgrad(x_desc, dy_desc, a_ring, b_ring, bars, first + nxt, nxt % STAGES, co0, c0, rd, rh, rw, n_db,
                         n_hb, n_wb, THREE, C, PD, PH, PW, SH, SW, BI, BD, BH, BW)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))

    rows = co0 + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout))
    cols = c0 + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    offs = ((split * CO + rows[:, None]) * TAPS + tap) * C + cols[None, :]
    # float32 partial sums, or with one slice the gradient in the input's dtype (``plan``'s workspace)
    gl.store(ws + offs, acc.to(ws.dtype.element_ty), mask=(rows < CO)[:, None])


@triton.jit
def _slice(ws, s, slices, numel, offs, mask):
    """Slice ``s``'s partial sums at ``offs``; 0.0 past the last slice (adding it leaves a sum as it is)."""
    return tl.load(ws + s * numel + offs, mask=mask & (s < slices), other=0.0)


@triton.jit
def sum_slices(ws, out, numel, slices, BLOCK: tl.constexpr):
    """``out[i] = ws[0, i] + ws[1, i] + ... + ws[slices - 1, i]`` in float32, added in slice order (the same
    bits at every run), stored in ``out``'s dtype: the weight gradient from its slices' partial sums, in one
    launch where a sum and a cast were two. Eight slices' loads go out before their adds: a large layer
    has a hundred slices or more over few elements, and loading one at a time waits out the memory's
    latency a hundred times."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.load(ws + offs, mask=mask, other=0.0)
    for s in range(1, slices, 8):
        p0 = _slice(ws, s, slices, numel, offs, mask)
        p1 = _slice(ws, s + 1, slices, numel, offs, mask)
        p2 = _slice(ws, s + 2, slices, numel, offs, mask)
        p3 = _slice(ws, s + 3, slices, numel, offs, mask)
        p4 = _slice(ws, s + 4, slices, numel, offs, mask)
        p5 = _slice(ws, s + 5, slices, numel, offs, mask)
        p6 = _slice(ws, s + 6, slices, numel, offs, mask)
        p7 = _slice(ws, s + 7, slices, numel, offs, mask)
        acc = acc + p0 + p1 + p2 + p3 + p4 + p5 + p6 + p7   # left to right: slice order
    tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)
