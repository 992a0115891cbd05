"""A stride-1 convolution written in Gluon: TMA window boxes, an explicit mbarrier ring and async wgmma.

    python benchmarks/probes/conv_gluon.py OUT_DIR [--quick]

Triton's own pipeliner raced on a multi-row TMA box reshaped for the dot (``tma_reshape.py``), which
left alcop's convolutions with pointer copies or one-row boxes. Gluon (``triton.experimental.gluon``,
part of Triton 3.6) lets the kernel own its shared-memory ring, barriers and MMA waits, so the box can be
the whole tile: the output tile is a BH x BW rectangle of one output plane, and for window tap
(rd, rh, rw) its A operand is one TMA copy of the 5-D box [1, 1, BH, BW, BK] of the channels-last input
at (n, od + rd - P, oh0 + rh - P, ow0 + rw - P, c0). TMA fills coordinates outside the input with zeros,
which is exactly the convolution's zero padding. The ring's stage is allocated as the [BM, BK] tile the
wgmma reads and reinterpreted as the box for the copy (the 128-byte swizzle depends only on the shared
memory address, so both views agree). The weight's tile is a 2-D box of the (CO, KD*KH*KW*C) matrix
(channels-last storage), transposed for the MMA as a view. The output tile is stored by one TMA copy of
a [1, 1, BH, BW, BN] box (rows outside the output are clipped). conv2d is the case D = KD = 1.

Per layer: cuDNN (torch), alcop as dispatched, and the Gluon kernel over a few tiles; every result is
checked against cuDNN's before it is timed. Timer: ``do_bench_cudagraph``.
Writes ``OUT_DIR/conv_gluon.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

LAYERS2D = ((64, 56, 56, 64, 64), (64, 28, 28, 128, 128), (64, 14, 14, 256, 256), (64, 7, 7, 512, 512),
            (64, 224, 224, 64, 64), (64, 112, 112, 64, 128), (64, 112, 112, 128, 128), (64, 56, 56, 128, 256),
            (64, 56, 56, 256, 256), (64, 28, 28, 256, 512), (64, 28, 28, 512, 512), (64, 14, 14, 512, 512))
"""(N, H, W, C, CO): the stride-1 3x3 layers of the ALCOP conv2d suite (batch 64, pad 1)."""
LAYERS3D = ((64, 14, 7, 7, 512, 512), (64, 112, 56, 56, 64, 64), (64, 56, 28, 28, 128, 128),
            (64, 28, 14, 14, 256, 256))
"""(N, D, H, W, C, CO): the ALCOP conv3d suite (3x3x3, stride 1, pad 1)."""


@gluon.jit
def _issue(x_desc, w_desc, a_ring, b_ring, bars, i, s, n0, od, oh0, ow0, co0,
           C: gl.constexpr, KH: gl.constexpr, KW: gl.constexpr, P: gl.constexpr, PD: gl.constexpr,
           BH: gl.constexpr, BW: gl.constexpr, BK: gl.constexpr):
    """Copy a tile's reduction chunk ``i`` (window tap, then channels) into ring stage ``s``."""
    CH: gl.constexpr = C // BK
    tap = i // CH
    c0 = (i - tap * CH) * BK
    rd = tap // (KH * KW)
    rhw = tap - rd * (KH * KW)
    rh = rhw // KW
    rw = rhw - rh * KW
    bar = bars.index(s)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes)
    box = a_ring.index(s)._reinterpret(x_desc.dtype, x_desc.block_type.shape, x_desc.layout)
    tma.async_copy_global_to_shared(x_desc, [n0, od + rd - PD, oh0 + rh - P, ow0 + rw - P, c0], bar, box)
    tma.async_copy_global_to_shared(w_desc, [co0, tap * C + c0], bar, b_ring.index(s))


@gluon.jit
def conv_kernel(x_desc, w_desc, y_desc, OD, n_hb, n_wb, n_cb,
                C: gl.constexpr, KD: gl.constexpr, KH: gl.constexpr, KW: gl.constexpr, P: gl.constexpr,
                PD: gl.constexpr, BI: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BN: gl.constexpr,
                BK: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = BI * BH * BW
    KT: gl.constexpr = KD * KH * KW * (C // BK)
    # Output channel blocks fastest: programs next to each other read the same input window from L2.
    pid = gl.program_id(0)
    cb = pid % n_cb
    t = pid // n_cb
    wb = t % n_wb
    t = t // n_wb
    hb = t % n_hb
    t = t // n_hb
    od = t % OD
    n0 = (t // OD) * BI
    oh0 = hb * BH
    ow0 = wb * BW
    co0 = cb * BN

    tile_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.float16)
    a_ring = gl.allocate_shared_memory(gl.float16, [STAGES, BM, BK], tile_layout)
    b_ring = gl.allocate_shared_memory(gl.float16, [STAGES, BN, BK], w_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(bars.index(st), count=1)

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_layout)

    for i in gl.static_range(STAGES - 1):
        _issue(x_desc, w_desc, a_ring, b_ring, bars, i, i % STAGES, n0, od, oh0, ow0, co0, C, KH, KW, P, PD, BH, BW,
               BK)
    for k in range(KT):
        stage = k % STAGES
        mbarrier.wait(bars.index(stage), (k // STAGES) & 1)
        acc = warpgroup_mma(a_ring.index(stage), b_ring.index(stage).permute((1, 0)), acc, is_async=True)
        # One MMA in flight: chunk k-1's is done, so its stage takes chunk k + STAGES - 1.
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        nxt = k + STAGES - 1
        if nxt < KT:
            _issue(x_desc, w_desc, a_ring, b_ring, bars, nxt, nxt % STAGES, n0, od, oh0, ow0, co0, C, KH, KW, P, PD,
                   BH, BW, BK)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))

    out_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BN], gl.float16)
    c_smem = gl.allocate_shared_memory(gl.float16, [BM, BN], out_layout)
    c_smem.store(acc.to(gl.float16))
    fence_async_shared()
    tma.async_copy_shared_to_global(y_desc, [n0, od, oh0, ow0, co0],
                                    c_smem._reinterpret(gl.float16, y_desc.block_type.shape, y_desc.layout))
    tma.store_wait(pendings=0)


@gluon.jit
def _tile_of(t, OD, n_hb, n_wb, n_cb, BI: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BN: gl.constexpr):
    """Tile ``t``'s first image, output plane, row, column and channel; channel blocks fastest, so tiles
    running side by side read the same input window from L2."""
    cb = t % n_cb
    t = t // n_cb
    wb = t % n_wb
    t = t // n_wb
    hb = t % n_hb
    t = t // n_hb
    return (t // OD) * BI, t % OD, hb * BH, wb * BW, cb * BN


@gluon.jit
def _issue_flat(x_desc, w_desc, a_ring, b_ring, bars, j, pid, P, OD, n_hb, n_wb, n_cb,
                C: gl.constexpr, KH: gl.constexpr, KW: gl.constexpr, P_: gl.constexpr, PD: gl.constexpr,
                BI: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                STAGES: gl.constexpr, KT: gl.constexpr):
    """Copy the program's ``j``-th chunk of its run (chunk ``j % KT`` of its ``j // KT``-th tile)."""
    n0, od, oh0, ow0, co0 = _tile_of(pid + (j // KT) * P, OD, n_hb, n_wb, n_cb, BI, BH, BW, BN)
    _issue(x_desc, w_desc, a_ring, b_ring, bars, j % KT, j % STAGES, n0, od, oh0, ow0, co0, C, KH, KW, P_, PD, BH,
           BW, BK)


@gluon.jit
def conv_persistent(x_desc, w_desc, y_desc, OD, n_hb, n_wb, n_cb, n_tiles,
                    C: gl.constexpr, KD: gl.constexpr, KH: gl.constexpr, KW: gl.constexpr, P: gl.constexpr,
                    PD: gl.constexpr, BI: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BN: gl.constexpr,
                    BK: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """``conv_kernel`` with one program per SM running tiles pid, pid + P, ...: its chunks form one sequence,
    so the next tile's first copies are in flight while a tile ends, and its output is stored by a TMA copy
    that runs on while the next tile computes."""
    BM: gl.constexpr = BI * BH * BW
    KT: gl.constexpr = KD * KH * KW * (C // BK)
    pid = gl.program_id(0)
    NP = gl.num_programs(0)
    total = (n_tiles - pid + NP - 1) // NP * KT

    tile_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.float16)
    a_ring = gl.allocate_shared_memory(gl.float16, [STAGES, BM, BK], tile_layout)
    b_ring = gl.allocate_shared_memory(gl.float16, [STAGES, BN, BK], w_desc.layout)
    out_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BN], gl.float16)
    c_smem = gl.allocate_shared_memory(gl.float16, [BM, BN], out_layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(bars.index(st), count=1)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_layout)

    for j in gl.static_range(STAGES - 1):
        if j < total:
            _issue_flat(x_desc, w_desc, a_ring, b_ring, bars, j, pid, NP, OD, n_hb, n_wb, n_cb, C, KH, KW, P, PD,
                        BI, BH, BW, BN, BK, STAGES, KT)
    for i in range(total):
        k = i % KT
        stage = i % STAGES
        mbarrier.wait(bars.index(stage), (i // STAGES) & 1)
        acc = warpgroup_mma(a_ring.index(stage), b_ring.index(stage).permute((1, 0)), acc, use_acc=k != 0,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        nxt = i + STAGES - 1
        if nxt < total:
            _issue_flat(x_desc, w_desc, a_ring, b_ring, bars, nxt, pid, NP, OD, n_hb, n_wb, n_cb, C, KH, KW, P, PD,
                        BI, BH, BW, BN, BK, STAGES, KT)
        if k == KT - 1:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            n0, od, oh0, ow0, co0 = _tile_of(pid + (i // KT) * NP, OD, n_hb, n_wb, n_cb, BI, BH, BW, BN)
            tma.store_wait(pendings=0)  # the last tile's store has read c_smem (its issuing thread waits)
            gl.thread_barrier()
            c_smem.store(acc.to(gl.float16))
            fence_async_shared()
            tma.async_copy_shared_to_global(y_desc, [n0, od, oh0, ow0, co0],
                                            c_smem._reinterpret(gl.float16, y_desc.block_type.shape, y_desc.layout))
    tma.store_wait(pendings=0)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))


def conv(x: Any, w: Any, tile: tuple[int, ...], pad: int = 1) -> Any:
    """Stride-1 convolution of a channels-last fp16 ``x`` (N, C, [D,] H, W) with ``w`` (CO, C, [KD,] KH, KW)
    by ``conv_kernel``; ``tile`` = (BI, BH, BW, BN, BK, STAGES, num_warps, persistent), BI images a tile."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    bi, bh, bw, bn, bk, stages, warps, persistent = tile
    three = x.dim() == 5
    x5 = x.permute(0, 2, 3, 4, 1) if three else x.permute(0, 2, 3, 1).unsqueeze(1)
    w5 = w.permute(0, 2, 3, 4, 1) if three else w.permute(0, 2, 3, 1).unsqueeze(1)
    nb, d, h, wd, c = x5.shape
    co, kd, kh, kw, _ = w5.shape
    pd = pad if three else 0
    od, oh, ow = d + 2 * pd - kd + 1, h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    fmt = torch.channels_last_3d if three else torch.channels_last
    y = torch.empty((nb, co, od, oh, ow) if three else (nb, co, oh, ow), dtype=x.dtype, device=x.device,
                    memory_format=fmt)
    y5 = y.permute(0, 2, 3, 4, 1) if three else y.permute(0, 2, 3, 1).unsqueeze(1)
    wmat = w5.reshape(co, kd * kh * kw * c)
    xbox, ybox = [bi, 1, bh, bw, bk], [bi, 1, bh, bw, bn]
    x_desc = TensorDescriptor(x5, list(x5.shape), list(x5.stride()), xbox,
                              gl.NVMMASharedLayout.get_default_for(xbox, gl.float16))
    w_desc = TensorDescriptor(wmat, list(wmat.shape), list(wmat.stride()), [bn, bk],
                              gl.NVMMASharedLayout.get_default_for([bn, bk], gl.float16))
    y_desc = TensorDescriptor(y5, list(y5.shape), list(y5.stride()), ybox,
                              gl.NVMMASharedLayout.get_default_for(ybox, gl.float16))
    n_hb, n_wb, n_cb = triton.cdiv(oh, bh), triton.cdiv(ow, bw), triton.cdiv(co, bn)
    n_tiles = triton.cdiv(nb, bi) * od * n_hb * n_wb * n_cb
    if persistent:
        grid = (min(n_tiles, torch.cuda.get_device_properties(x.device).multi_processor_count), )
        conv_persistent[grid](x_desc, w_desc, y_desc, od, n_hb, n_wb, n_cb, n_tiles, c, kd, kh, kw, pad, pd, bi, bh,
                              bw, bn, bk, stages, num_warps=warps)
    else:
        conv_kernel[(n_tiles, )](x_desc, w_desc, y_desc, od, n_hb, n_wb, n_cb, c, kd, kh, kw, pad, pd, bi, bh, bw,
                                 bn, bk, stages, num_warps=warps)
    return y


def boxes(nb: int, h: int, w: int, bm: int) -> list[tuple[int, int, int]]:
    """(BI, BH, BW) boxes of ``bm`` output rows, power-of-two sides (at least 8 wide), the least padded
    first: a box covers BI images' BH x BW rectangles, and rows past the output are computed and dropped."""
    cands = []
    for bw in (8, 16, 32, 64):
        for bh in (1, 2, 4, 8, 16, 32, 64, 128):
            bi = bm // (bw * bh)
            if bi < 1 or bi * bh * bw != bm or (bi > 1 and bh < h) or bw > 2 * triton.next_power_of_2(w):
                continue
            rows = triton.cdiv(nb, bi) * bi * triton.cdiv(h, bh) * bh * triton.cdiv(w, bw) * bw
            cands.append((rows / (nb * h * w), -bw, (bi, bh, bw)))
    cands.sort()
    return [c[2] for c in cands if c[0] <= cands[0][0] * 1.02][:2]


def tiles_for(nb: int, h: int, w: int, c: int, co: int) -> list[tuple[int, ...]]:
    """(BI, BH, BW, BN, BK, STAGES, warps, persistent) to try: 128-row tiles over two warpgroups and 64-row ones
    over one, each with its least padded box; up to 256 output channels; one program per tile (as many stages
    as shared memory allows) or one per SM (a stage less: the output tile has its own buffer)."""
    bk = min(64, c)
    bn = min(co, 256)
    out = []
    for bm, warps in ((128, 8), (64, 4)):
        bi, bh, bw = boxes(nb, h, w, bm)[0]
        out += [(bi, bh, bw, bn, bk, 3 if bn == 256 else 4, warps, False)]
        out += [(bi, bh, bw, bn, bk, st, warps, True) for st in ((3, 2) if bn == 256 else (4, 3))]
        if bm == 128 and co >= 256:
            out += [(bi, bh, bw, 128, bk, 4, warps, True)]
    return out


def checked(fn: Any, want: Any) -> dict[str, Any]:
    """A tile's result: normwise error against cuDNN's (must be <= 2e-3, fp16 rounding being ~5e-4), whether
    two runs agree bit for bit (a race would show), and µs under ``do_bench_cudagraph``; or the failure."""
    import torch
    from triton.testing import do_bench_cudagraph
    try:
        first = fn()
        second = fn()
        err = ((first.float() - want).norm() / want.norm()).item()
        same = bool(torch.equal(first, second))
        if err > 2e-3 or not same:
            return {"us": f"wrong result (error {err:.2e}, runs agree: {same})", "err": err, "same": same}
        return {"us": 1e3 * do_bench_cudagraph(fn), "err": err, "same": same}
    except Exception as exc:  # compile failure, out of resources: a result
        return {"us": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]}


def main(out_dir: str, quick: bool = False) -> int:
    import torch
    import torch.nn.functional as F

    from probe_io import checked_time, fastest, fmt_us, publish, run_meta, table_head, write

    import alcop_triton as at
    torch.manual_seed(0)
    meta = run_meta()
    rows: list[dict[str, Any]] = []
    layers: list[tuple[int, ...]] = [*(LAYERS2D[:2] if quick else LAYERS2D), *(LAYERS3D[:1] if quick else LAYERS3D)]
    for layer in layers:
        three = len(layer) == 6
        nb, *sp, c, co = layer
        fmt = torch.channels_last_3d if three else torch.channels_last
        x = torch.randn(nb, c, *sp, device="cuda", dtype=torch.float16).contiguous(memory_format=fmt)
        wt = (torch.randn(co, c, *([3] * len(sp)), device="cuda", dtype=torch.float16) / (c * 9) ** 0.5
              ).contiguous(memory_format=fmt)
        ref = (F.conv3d if three else F.conv2d)(x, wt, padding=1)
        row: dict[str, Any] = {"layer": list(layer), "op": "conv3d" if three else "conv2d",
                               "cudnn_us": checked_time(lambda: (F.conv3d if three else F.conv2d)(x, wt, padding=1),
                                                        None),
                               "alcop_us": checked_time(lambda: (at.conv3d if three else at.conv2d)(x, wt, padding=1),
                                                        ref.float()),
                               "tiles": []}
        for tile in tiles_for(nb, sp[-2], sp[-1], c, co):
            res = checked(lambda: conv(x, wt, tile), ref.float())
            row["tiles"].append({"tile": list(tile)} | res)
            print(layer, tile, res, flush=True)
        rows.append(row)
        write(out_dir, "conv_gluon", meta, rows, [])  # partial results survive a time limit
        print(row["layer"], row["cudnn_us"], row["alcop_us"], flush=True)
        del x, wt, ref
        torch.cuda.empty_cache()

    lines = table_head("Stride-1 convolutions in Gluon: TMA window boxes and async wgmma", meta,
                       "µs, fp16, channels-last, pad 1; tile = (BI, BH, BW, BN, BK, stages, warps, persistent).",
                       ["layer", "cuDNN", "alcop", "best Gluon tile", "Gluon", "cuDNN / alcop", "cuDNN / Gluon"])
    for r in rows:
        best = fastest(r["tiles"])
        ratio = (lambda v: f"{r['cudnn_us'] / v:.3f}x" if isinstance(v, float) and isinstance(r["cudnn_us"], float)
                 else "-")
        lines.append(f"| {r['op']} {r['layer']} | {fmt_us(r['cudnn_us'])} | {fmt_us(r['alcop_us'])} | "
                     f"{best['tile'] if best else '-'} | {fmt_us(best['us']) if best else 'err'} | "
                     f"{ratio(r['alcop_us'])} | {ratio(best['us']) if best else '-'} |")
    errs = [(r["layer"], t["tile"], t["us"]) for r in rows for t in r["tiles"] if not isinstance(t["us"], float)]
    lines += ["", f"Tiles that failed: {len(errs)}"] + [f"- {la} {ti}: {e}" for la, ti, e in errs]
    return publish(out_dir, "conv_gluon", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], quick="--quick" in sys.argv[2:]))
