"""Would a hand-scheduled Gluon GEMM with stream-K close the gap to cuBLAS on short-last-wave shapes?

    python benchmarks/probes/stream_gemm.py OUT_DIR [--shapes MxNxK ...]

The kernel (here, in Gluon: Hopper's TMA, mbarriers and warpgroup MMAs) runs one program per SM, warp
specialised: a producer warp issues every reduction step's TMA copies into a ring of shared-memory stages as
soon as the consumers release a stage, running ahead across tile boundaries; the kernel's warps issue the
MMAs (one in flight) and store each tile by TMA. Work is shared out three ways (``waves``):

* ``-1``: whole tiles round-robin over the programs (data-parallel, persistent);
* ``0``: the tiles past the last whole wave (all tiles where there are fewer than SMs) shared out by
  reduction chunks, an equal contiguous run of (tile, chunk) steps per program (stream-K), the other tiles
  whole;
* ``1``: as ``0`` plus one whole wave before them (CUTLASS's data-parallel + stream-K hybrid).

A tile split over programs w < w' < ...: each later program's run starts inside it, so it finishes its part
first, stores a float32 partial tile and raises a flag; program w, which holds the tile's first chunk, waits
for the flags and adds the partials in program order (deterministic). Each stream-K row is timed twice: with
that exchange, and without it (``exchange=off``: timing only, the result is wrong), which separates what
the schedule costs from what the exchange costs.

For each shape of ``benchmarks/tune_speed.py`` (fp16, B stored N x K), each tile config, each sharing;
torch.matmul (cuBLAS) on the same inputs. Correctness: every result with the exchange against torch
(normwise relative error <= 1e-2), output poisoned first, and the same bits on a second run. Timer:
``triton.testing.do_bench_cudagraph`` (median). Writes ``OUT_DIR/stream_gemm.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import GRAPH_TIMER, checked_time, fastest, fmt_us, publish, run_meta, table_head  # noqa: E402

import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,  # noqa: E402
                                                              warpgroup_mma, warpgroup_mma_wait)

SHAPES = ((1970, 2304, 768), (896, 2560, 2560), (2304, 1792, 2816), (2816, 768, 3072), (1536, 5632, 2048))
"""(M, N, K): the five unseen shapes of ``benchmarks/tune_speed.py``."""

CONFIGS = ((128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 5, 4))
"""(BLOCK_M, BLOCK_N, BLOCK_K, stages, warps): the largest MMA tiles a warpgroup pair holds, and a
one-warpgroup tile with a deeper ring."""

WAVES = (-1, 0, 1)


@gluon.jit
def _work(i, w, G, n_sk, sk_first, KT, sk_tiles):
    """(tile, chunk) of a program's ``i``-th reduction step: its run of the stream-K steps first (global
    steps sk_first.. of the first ``sk_tiles`` tiles, KT chunks each), then whole tiles w, w + G, ... of
    the rest."""
    if i < n_sk:
        g = sk_first + i
        tile = g // KT
        k = g - tile * KT
    else:
        j = i - n_sk
        t = j // KT
        tile = sk_tiles + w + t * G
        k = j - t * KT
    return tile, k


@gluon.jit
def _tile_origin(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    """Row and column tile of ``tile``: groups of GROUP_M row tiles, columns within a group, rows fastest
    (tiles that run side by side share B's columns and A's rows in L2)."""
    in_group = GROUP_M * tiles_n
    group = tile // in_group
    first_m = group * GROUP_M
    size_m = gl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % in_group) % size_m
    pid_n = (tile % in_group) // size_m
    return pid_m, pid_n


@gluon.jit
def _halves(acc, BM: gl.constexpr, BN: gl.constexpr):
    """The accumulator's left and right column halves (registers stay in place) and the offsets of a half's
    elements in a row-major float32 [BM, BN] tile: a whole tile's addresses would not fit in registers
    beside the accumulator."""
    lo, hi = acc.reshape([BM, 2, BN // 2]).permute((0, 2, 1)).split()
    offs = (gl.arange(0, BM, layout=gl.SliceLayout(1, lo.type.layout))[:, None] * BN +
            gl.arange(0, BN // 2, layout=gl.SliceLayout(0, lo.type.layout))[None, :])
    return lo, hi, offs


@gluon.jit
def _store_partial(acc, dst, BM: gl.constexpr, BN: gl.constexpr):
    lo, hi, offs = _halves(acc, BM, BN)
    gl.store(dst + offs, lo)
    gl.store(dst + BN // 2 + offs, hi)


@gluon.jit
def _add_partial(acc, src, BM: gl.constexpr, BN: gl.constexpr):
    """``acc`` plus the float32 [BM, BN] tile at ``src``."""
    lo, hi, offs = _halves(acc, BM, BN)
    lo = lo + gl.load(src + offs, cache_modifier=".cg")
    hi = hi + gl.load(src + BN // 2 + offs, cache_modifier=".cg")
    # The same registers in the same places: the conversion back to the MMA's layout moves nothing.
    return gl.convert_layout(gl.join(lo, hi).permute((0, 2, 1)).reshape([BM, BN]), acc.type.layout)


@gluon.jit
def _load_partition(a_desc, b_desc, a_ring, b_ring, ready, empty, tiles_m, tiles_n, KT, sk_tiles,
                    GROUP_M: gl.constexpr):
    """The producer warp: every step's copies, as soon as the consumers have released its ring stage."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_ring.shape[0]
    w = gl.program_id(0)
    G = gl.num_programs(0)
    sk_total = sk_tiles * KT
    sk_first = (w * sk_total) // G
    n_sk = ((w + 1) * sk_total) // G - sk_first
    n = n_sk + (tiles_m * tiles_n - sk_tiles - w + G - 1) // G * KT
    for j in range(n):
        tile, k = _work(j, w, G, n_sk, sk_first, KT, sk_tiles)
        pid_m, pid_n = _tile_origin(tile, tiles_m, tiles_n, GROUP_M)
        s = j % STAGES
        # A fresh barrier counts as released once: the first pass over the ring does not wait.
        mbarrier.wait(empty.index(s), ((j // STAGES) & 1) ^ 1)
        bar = ready.index(s)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(a_desc, [pid_m * BM, k * BK], bar, a_ring.index(s))
        tma.async_copy_global_to_shared(b_desc, [pid_n * BN, k * BK], bar, b_ring.index(s))


@gluon.jit
def _mma_partition(c_desc, ws, flags, a_ring, b_ring, c_smem, ready, empty, tiles_m, tiles_n, KT, sk_tiles,
                   GROUP_M: gl.constexpr, num_warps: gl.constexpr, EXCHANGE):
    """The consumer warpgroups: the MMAs, each stage released once its MMA has finished, then per tile
    the partials' exchange (``EXCHANGE == 2``; otherwise skipped, for timing only: the result is then
    wrong) and the TMA store of C."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_ring.shape[0]
    dtype: gl.constexpr = c_desc.dtype
    w = gl.program_id(0)
    G = gl.num_programs(0)
    sk_total = sk_tiles * KT
    sk_first = (w * sk_total) // G
    n_sk = ((w + 1) * sk_total) // G - sk_first
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    # Segments: the tiles this program's stream-K run touches (a part of each), then its whole tiles.
    n_seg = (tiles_m * tiles_n - sk_tiles - w + G - 1) // G
    if n_sk > 0:
        n_seg += (sk_first + n_sk - 1) // KT - sk_first // KT + 1
    i = 0
    for seg in range(n_seg):
        tile, k0 = _work(i, w, G, n_sk, sk_first, KT, sk_tiles)
        shared = i < n_sk
        steps = KT - k0
        if shared:
            steps = gl.minimum(steps, n_sk - i)
        # No branch inside the reduction loop: the accumulator stays in the MMA's registers throughout.
        acc = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_layout)
        for kk in range(steps):
            s = (i + kk) % STAGES
            mbarrier.wait(ready.index(s), ((i + kk) // STAGES) & 1)
            acc = warpgroup_mma(a_ring.index(s), b_ring.index(s).permute((1, 0)), acc, use_acc=kk > 0,
                                is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            # Step kk - 1's MMA has finished: its stage goes back to the producer.
            mbarrier.arrive(empty.index((i + kk + STAGES - 1) % STAGES), pred=kk > 0)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        i += steps
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES))
        if (k0 > 0) & (EXCHANGE == 2):
            # This run started inside the tile (only a run's first tile can): a partial for the program
            # that holds chunk 0.
            _store_partial(acc, ws + w * (BM * BN), BM, BN)
            gl.thread_barrier()
            gl.atomic_xchg(flags + w, 1, sem="release")
        else:
            if shared & (EXCHANGE == 2):
                # Programs after this one whose runs start inside the tile hold its later chunks.
                end = (tile + 1) * KT
                w2 = w + 1
                while (w2 < G) & ((w2 * sk_total) // G < end):
                    while gl.atomic_add(flags + w2, 0, sem="acquire") == 0:
                        pass
                    gl.thread_barrier()
                    acc = _add_partial(acc, ws + w2 * (BM * BN), BM, BN)
                    gl.atomic_xchg(flags + w2, 0, sem="relaxed")
                    w2 += 1
            pid_m, pid_n = _tile_origin(tile, tiles_m, tiles_n, GROUP_M)
            tma.store_wait(pendings=0)  # the previous tile's store has left c_smem
            c_smem.store(acc.to(dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(c_desc, [pid_m * BM, pid_n * BN], c_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def stream_gemm(ws, flags, a_desc, b_desc, c_desc, tiles_m, tiles_n, KT, sk_tiles, EXCHANGE,
                GROUP_M: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """C = A @ B^T (A: M x K, B: N x K, K-contiguous) over ``gl.num_programs(0)`` resident programs: the ring,
    its barriers and C's staging tile, then the consumer warps (this program's) and one producer warp."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    a_ring = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a_desc.layout)
    b_ring = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(ready.index(st), count=1)
        mbarrier.init(empty.index(st), count=1)
    gl.warp_specialize([
        (_mma_partition, (c_desc, ws, flags, a_ring, b_ring, c_smem, ready, empty, tiles_m, tiles_n, KT, sk_tiles,
                          GROUP_M, num_warps, EXCHANGE)),
        (_load_partition, (a_desc, b_desc, a_ring, b_ring, ready, empty, tiles_m, tiles_n, KT, sk_tiles, GROUP_M)),
    ], [1], [40])


def stream_split(tiles: int, kt: int, sms: int, waves: int) -> tuple[int, int]:
    """(programs, stream-K tiles) for ``tiles`` output tiles of ``kt`` reduction chunks on ``sms`` SMs: the
    tiles past the last whole wave, plus ``waves`` whole waves before them where there are that many, are
    shared out by chunks (``waves=-1``: none); at most one program per chunk shared."""
    if waves < 0 or tiles % sms == 0:
        return min(tiles, sms), 0
    sk = tiles % sms + min(waves, tiles // sms) * sms
    return min(sms, sk * kt), sk


_SCRATCH: dict[tuple[int, int], tuple[Any, Any]] = {}
"""Per tile shape: the partial tiles' float32 workspace and the programs' flags (zero, left zero by every
launch)."""


def run(a: Any, b: Any, c: Any, cfg: tuple[int, ...], waves: int, exchange: bool = True) -> Any:
    """C = A @ B^T (A: M x K, B: N x K, C: M x N, fp16, TMA-aligned) with tile config ``cfg``."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block_m, block_n, block_k, stages, warps = cfg
    m, k = a.shape
    n = b.shape[0]

    def desc(x: Any, block: list[int]) -> Any:
        return TensorDescriptor.from_tensor(x, block, gl.NVMMASharedLayout.get_default_for(block, gl.float16))

    tiles_m, tiles_n, kt = triton.cdiv(m, block_m), triton.cdiv(n, block_n), triton.cdiv(k, block_k)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    programs, sk_tiles = stream_split(tiles_m * tiles_n, kt, sms, waves)
    key = (block_m, block_n)
    if key not in _SCRATCH:
        _SCRATCH[key] = (torch.empty(sms * block_m * block_n, dtype=torch.float32, device=a.device),
                         torch.zeros(sms, dtype=torch.int32, device=a.device))
    ws, flags = _SCRATCH[key]
    # EXCHANGE is 2 or 3, not 1 or 0: Triton specialises an integer argument equal to 1, and both values
    # should run the same compiled kernel.
    stream_gemm[(programs, )](ws, flags, desc(a, [block_m, block_k]), desc(b, [block_n, block_k]),
                              desc(c, [block_m, block_n]), tiles_m, tiles_n, kt, sk_tiles, 2 if exchange else 3,
                              GROUP_M=8, STAGES=stages, num_warps=warps)
    return c



def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--shapes", nargs="*", default=None)
    args = ap.parse_args()
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    torch.manual_seed(0)
    rows: list[dict[str, Any]] = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        want = a.float() @ b.float().T
        torch_us = checked_time(lambda: torch.matmul(a, b.T), want)
        entries = []
        for cfg in CONFIGS:
            for waves in WAVES:
                c = torch.empty(m, n, device="cuda", dtype=torch.float16)

                def call(exchange: bool = True) -> Any:
                    return run(a, b, c, cfg, waves, exchange)
                c.fill_(float("nan"))  # poisoned before the checked run, outside the timed calls
                us = checked_time(call, want)
                if isinstance(us, float):
                    first = c.clone()
                    c.fill_(float("nan"))
                    if not torch.equal(call(), first):
                        us = "not bit-identical on a second run"
                name = "{}x{}x{} s{} w{}".format(*cfg)
                entries.append({"config": name, "waves": waves, "exchange": True, "us": us})
                if waves >= 0:
                    entries.append({"config": name, "waves": waves, "exchange": False,
                                    "us": checked_time(lambda: call(False), None)})
        best = fastest([e for e in entries if e["exchange"]])
        rows.append({"shape": [m, n, k], "torch_us": torch_us, "entries": entries, "best": best})
    meta = run_meta(GRAPH_TIMER)
    lines = table_head("A warp-specialised Gluon GEMM, whole tiles and stream-K, against cuBLAS", meta,
                       "fp16, B stored N x K. Times in µs; each column the best of the tile configs.",
                       ["M x N x K", "cuBLAS", "whole tiles", "stream-K (0)", "hybrid (1)",
                        "stream-K (0), no exchange", "hybrid (1), no exchange", "cuBLAS / best correct"])
    ratios = []
    for r in rows:
        def best_of(waves: int, exchange: bool) -> str:
            e = fastest([e for e in r["entries"] if e["waves"] == waves and e["exchange"] == exchange])
            return fmt_us(e["us"]) if e else "err"
        best, t = r["best"], r["torch_us"]
        ratio = t / best["us"] if best and isinstance(t, float) else None
        if ratio:
            ratios.append(ratio)
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {fmt_us(t)} | {best_of(-1, True)} | {best_of(0, True)} | "
                     f"{best_of(1, True)} | {best_of(0, False)} | {best_of(1, False)} | "
                     f"{f'{ratio:.3f}' if ratio else '-'} |")
    if ratios:
        lines += ["", f"Mean cuBLAS / best correct: {sum(ratios) / len(ratios):.3f}"]
    lines += ["", "Every entry (µs):", ""] + [
        f"- {'x'.join(map(str, r['shape']))} {e['config']} waves={e['waves']}"
        f"{'' if e['exchange'] else ' no exchange'}: {fmt_us(e['us']) if isinstance(e['us'], float) else e['us']}"
        for r in rows for e in r["entries"]]
    return publish(args.out_dir, "stream_gemm", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main())
