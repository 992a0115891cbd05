"""The copy behind ``matmul.aligned_operands``: GEMM operands into 16-byte aligned, K zero-padded buffers.

One launch copies one or both operands. Each operand is viewed as (batch, rows, K) with any strides and
lands in a buffer of (batch, rows, KP) with the strides the caller chose (K-contiguous, or rows-contiguous
where the source rows already are and stay aligned); columns K..KP are written as zeros, so the product
and its epilogue do not change. A tile is loaded coalesced along the source's unit-stride dim and stored
coalesced along the buffer's: Triton's layout pass turns the tile around in shared memory when those
differ, so a transposing copy costs one read and one write of the operand.

This is a plain Triton kernel rather than the DSL: the DSL expresses tiled reductions with pipelined
operand loads, and a copy has neither. It is launched like every kernel of the torch layer (prebound,
recorded by the fast path's first call), so a repeated call pays one launch for its copies where two
``F.pad`` calls cost four kernels and two dispatcher round trips each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

from alcop_triton.build import Launch
from alcop_triton.runtime import for_device

BLOCK_R = 64
BLOCK_K = 64
NUM_WARPS = 4


@triton.jit
def _pack_tile(src, dst, tile, R, K, KP, B1, s_b0, s_b1, s_r, s_k, d_b0, d_b1, d_r, d_k, tiles_r, tiles_k,
               BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    per_batch = tiles_r * tiles_k
    b = tile // per_batch
    b0 = (b // B1).to(tl.int64)
    b1 = (b % B1).to(tl.int64)
    t = tile % per_batch
    r = ((t // tiles_k) * BLOCK_R + tl.arange(0, BLOCK_R))[:, None].to(tl.int64)
    k = ((t % tiles_k) * BLOCK_K + tl.arange(0, BLOCK_K))[None, :].to(tl.int64)
    x = tl.load(src + b0 * s_b0 + b1 * s_b1 + r * s_r + k * s_k, mask=(r < R) & (k < K), other=0.0)
    tl.store(dst + b0 * d_b0 + b1 * d_b1 + r * d_r + k * d_k, x, mask=(r < R) & (k < KP))


@triton.jit
def pack_operands(src0, dst0, src1, dst1,
                  R0, K0, KP0, B1_0, s0_b0, s0_b1, s0_r, s0_k, d0_b0, d0_b1, d0_r, d0_k, tiles0_r, tiles0_k, tiles0,
                  R1, K1, KP1, B1_1, s1_b0, s1_b1, s1_r, s1_k, d1_b0, d1_b1, d1_r, d1_k, tiles1_r, tiles1_k,
                  TWO: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    # Programs [0, tiles0) copy the first operand, the rest the second (when TWO).
    pid = tl.program_id(0)
    if TWO:
        if pid < tiles0:
            _pack_tile(src0, dst0, pid, R0, K0, KP0, B1_0, s0_b0, s0_b1, s0_r, s0_k, d0_b0, d0_b1, d0_r, d0_k,
                       tiles0_r, tiles0_k, BLOCK_R, BLOCK_K)
        else:
            _pack_tile(src1, dst1, pid - tiles0, R1, K1, KP1, B1_1, s1_b0, s1_b1, s1_r, s1_k, d1_b0, d1_b1, d1_r,
                       d1_k, tiles1_r, tiles1_k, BLOCK_R, BLOCK_K)
    else:
        _pack_tile(src0, dst0, pid, R0, K0, KP0, B1_0, s0_b0, s0_b1, s0_r, s0_k, d0_b0, d0_b1, d0_r, d0_k,
                   tiles0_r, tiles0_k, BLOCK_R, BLOCK_K)


MAX_BATCH_DIMS = 2


def _geometry(src: Any, dst: Any, k_dim: int) -> tuple[tuple[int, ...], int]:
    """The kernel's arguments for one operand whose reduction dim is ``k_dim`` (-1: rows x K; -2: K x
    rows): R, K, KP, the inner batch size, source strides (b0, b1, r, k), buffer strides (b0, b1, r, k),
    row tiles, K tiles; and the operand's tile count. Up to two batch dims; a size-1 one has stride 0."""
    r_dim = -1 if k_dim == -2 else -2
    lead = tuple(src.shape[:-2])
    if len(lead) > MAX_BATCH_DIMS:
        raise ValueError(f"operand copy: {len(lead)} batch dims (shape {tuple(src.shape)}), at most {MAX_BATCH_DIMS}")
    sizes = (1,) * (MAX_BATCH_DIMS - len(lead)) + lead

    def strides(x: Any) -> tuple[int, ...]:
        own = tuple(x.stride(d) if x.shape[d] > 1 else 0 for d in range(x.dim() - 2))
        return (0,) * (MAX_BATCH_DIMS - len(own)) + own + (x.stride(r_dim), x.stride(k_dim))

    rows, k, kp = src.shape[r_dim], src.shape[k_dim], dst.shape[k_dim]
    tiles_r, tiles_k = triton.cdiv(rows, BLOCK_R), triton.cdiv(kp, BLOCK_K)
    return (rows, k, kp, sizes[1], *strides(src), *strides(dst), tiles_r, tiles_k), sizes[0] * sizes[1] * tiles_r * tiles_k


@dataclass(frozen=True)
class PackKernel:
    """One launch copying one or two operands: ``bind(src0, dst0, src1, dst1)``, each ``src`` into its
    buffer ``dst``; with one ``k_dims`` entry the second pair repeats the first (the kernel always takes
    four pointers) and is not copied again. ``k_dims`` says where each pair's reduction dim is: -1 for a
    GEMM's A (rows x K), -2 for its B (K x rows). What ``fastpath.launch_kernel`` needs of a kernel."""

    k_dims: tuple[int, ...]

    def label(self) -> str:
        return f"the operand copy of kernels.pack (reduction dims {self.k_dims})"

    def bind(self, *tensors: Any) -> tuple[Launch | None, None]:
        pairs = [(tensors[2 * i], tensors[2 * i + 1], kd) for i, kd in enumerate(self.k_dims)]
        if any(s.numel() == 0 for s, _, _ in pairs):
            return None, None
        geometry, tiles = zip(*(_geometry(src, dst, kd) for src, dst, kd in pairs))
        two = len(pairs) == 2
        grid = (sum(tiles),)
        args = (*tensors, *geometry[0], tiles[0], *geometry[-1])
        kwargs = {"TWO": two, "BLOCK_R": BLOCK_R, "BLOCK_K": BLOCK_K, "num_warps": NUM_WARPS}
        return Launch(pack_operands, for_device(pack_operands, tensors[0].device.type)[grid], grid, args,
                      kwargs, 4, tensors[0].device), None
