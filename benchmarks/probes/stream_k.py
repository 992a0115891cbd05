"""Would stream-K lift the GEMMs whose tiles leave the last wave short? A hand-written Triton kernel, timed.

    python benchmarks/probes/stream_k.py OUT_DIR

The shapes where alcop's tuned kernels stay furthest from cuBLAS (``benchmarks/tune_speed.py``'s five
unseen shapes: 1970x2304x768 and 896x2560x2560 near 0.79x) and suite shapes with few waves, fp16, B
stored N x K (``nt``, as ``nn.Linear`` keeps its weight).

One kernel, two ways of sharing the work (so the comparison is of the sharing, not of two kernels):

* ``dp``: one program per output tile (grid = tiles), every program the whole reduction;
* ``sk``: stream-K, one program per SM; the tiles' reduction chunks are laid end to end and each program
  takes an equal run of them (a run may end inside a tile and the next program go on with it). A tile
  whose chunks one program ran is stored by it; a tile shared by programs has each one's partial sum
  written to a float32 workspace, and the last program to arrive (an atomic counter per tile) adds the
  partials in program order and stores the tile, so the result does not depend on arrival order.

Each variant at a few tile configs; torch.matmul (cuBLAS) on the same inputs. Correctness: each result
against torch in float32 (normwise relative error <= 1e-2), twice run, the same bits both times (stream-K's
sum is deterministic). Timer: ``triton.testing.do_bench_cudagraph`` (median). Writes
``OUT_DIR/stream_k.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import GRAPH_TIMER, publish, run_meta, table_head  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

SHAPES = ((1970, 2304, 768), (896, 2560, 2560), (2304, 1792, 2816), (2816, 768, 3072), (1536, 5632, 2048),
          (1024, 2304, 768), (512, 3072, 1024), (3136, 512, 1024), (512, 2304, 768))
"""(M, N, K): the five unseen shapes of tune_speed.py, then four suite shapes below 0.9x cuBLAS."""

CONFIGS = ((128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (64, 128, 64, 4, 5))
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)."""


@triton.jit
def _owner(u, base, extra):
    """The program whose run of chunks holds chunk ``u`` (the first ``extra`` programs run one more)."""
    thr = extra * (base + 1)
    return tl.where(u < thr, u // (base + 1), extra + (u - thr) // base)


@triton.jit
def add_partials(ws, locks, tile, slot, count, acc, SLOTS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A program's partial sum ``acc`` of a tile shared by ``count`` programs, written to its ``slot`` of
    the float32 workspace (``SLOTS`` slots per tile); ``(last, total)``: whether this program arrived last
    (an atomic counter per tile), and then the tile's sum, added in slot order (so it does not depend on
    the order of arrival) and its counter reset for the next launch."""
    slots = ws + tile * (SLOTS * BLOCK_M * BLOCK_N)
    cell = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(slots + slot * (BLOCK_M * BLOCK_N) + cell, acc)
    tl.debug_barrier()
    arrived = tl.atomic_add(locks + tile, 1, sem="acq_rel")
    last = arrived == count - 1
    total = acc
    if last:
        total = tl.load(slots + cell, cache_modifier=".cg")
        for s in range(1, count):
            total += tl.load(slots + s * (BLOCK_M * BLOCK_N) + cell, cache_modifier=".cg")
        tl.store(locks + tile, 0)
    return last, total


@triton.jit
def gemm_sk(a, b, c, ws, locks, M, N, K, sam, sak, sbk, sbn, scm, scn, SLOTS,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            NUM_STAGES: tl.constexpr):
    p = tl.program_id(0)
    programs = tl.num_programs(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    chunks = tl.cdiv(K, BLOCK_K)
    work = num_pid_m * num_pid_n * chunks
    base = work // programs
    extra = work % programs
    u = p * base + tl.minimum(p, extra)
    u_end = u + base + (p < extra).to(tl.int32)
    while u < u_end:
        tile = u // chunks
        j0 = u - tile * chunks
        j1 = tl.minimum(chunks, j0 + (u_end - u))
        group = GROUP_M * num_pid_n
        first_m = (tile // group) * GROUP_M
        size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group) % size_m
        pid_n = (tile % group) // size_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in tl.range(j0, j1, num_stages=NUM_STAGES):
            k = j * BLOCK_K + rk
            ta = tl.load(a + rm[:, None] * sam + k[None, :] * sak, mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
            tb = tl.load(b + k[:, None] * sbk + rn[None, :] * sbn, mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(ta, tb, acc)
        cm = rm[:, None] < M
        cn = rn[None, :] < N
        if (j0 == 0) & (j1 == chunks):
            tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty), mask=cm & cn)
        else:
            first = _owner(tile * chunks, base, extra)
            last = _owner(tile * chunks + chunks - 1, base, extra)
            # SLOTS: the most programs a tile can have
            done, acc = add_partials(ws, locks, tile, p - first, last - first + 1, acc, SLOTS, BLOCK_M, BLOCK_N)
            if done:
                tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty), mask=cm & cn)
        u += j1 - j0


def run(m: int, n: int, k: int, cfg: tuple[int, ...], programs: int, a: Any, b: Any) -> tuple[Any, Any]:
    """C = A @ B on ``programs`` programs (the kernel and its launch); the launch as a closure for timing."""
    import torch
    bm, bn, bk, warps, stages = cfg
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    chunks = triton.cdiv(k, bk)
    # A run of base (or base + 1) chunks starts at most once per base chunks of a tile, plus the first.
    slots = triton.cdiv(chunks, tiles * chunks // programs) + 1
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    ws = torch.empty(tiles * slots * bm * bn, device=a.device, dtype=torch.float32)
    locks = torch.zeros(tiles, device=a.device, dtype=torch.int32)

    def launch() -> Any:
        gemm_sk[(programs,)](a, b, c, ws, locks, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                             c.stride(0), c.stride(1), slots, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                             NUM_STAGES=stages, num_warps=warps)
        return c
    return launch, c


def main(out_dir: str) -> int:
    import torch
    from triton.testing import do_bench_cudagraph

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[dict[str, Any]] = []
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g)
        b = w.t()  # B stored N x K
        want = a.float() @ b.float()
        row: dict[str, Any] = {"shape": [m, n, k], "torch_us": 1e3 * do_bench_cudagraph(lambda: torch.matmul(a, b))}
        for cfg in CONFIGS:
            bm, bn, bk = cfg[:3]
            tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
            chunks = triton.cdiv(k, bk)
            if tiles * chunks < sms:  # fewer chunks than programs
                continue
            for name, programs in (("dp", tiles), ("sk", sms)):
                key = f"{name} {bm}x{bn}x{bk} w{cfg[3]} s{cfg[4]}"
                try:
                    launch, c = run(m, n, k, cfg, programs, a, b)
                    c.fill_(float("nan"))
                    first = launch().clone()
                    second = launch().clone()
                    err = ((first.float() - want).norm() / want.norm()).item()
                    same = bool(torch.equal(first, second))
                    if err > 1e-2 or not same:
                        row[key] = f"wrong (err {err:.1e}, repeatable {same})"
                        continue
                    row[key] = 1e3 * do_bench_cudagraph(launch)
                except Exception as exc:  # out of resources, compile error: the result
                    row[key] = f"error: {type(exc).__name__}"
        rows.append(row)
        print(row, flush=True)
    meta = run_meta(GRAPH_TIMER) | {"sms": sms}
    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in ("shape", "torch_us")]
    lines = table_head("Stream-K against one program per tile, same kernel", meta,
                       "fp16, B stored N x K; µs; best dp / best sk against torch.matmul.",
                       ["shape", "torch µs", "best dp µs", "best sk µs", "torch / dp", "torch / sk"])
    for r in rows:
        dp = min((v for kk, v in r.items() if kk.startswith("dp ") and isinstance(v, float)), default=None)
        sk = min((v for kk, v in r.items() if kk.startswith("sk ") and isinstance(v, float)), default=None)
        fmt = lambda v: f"{v:.1f}" if v else "-"  # noqa: E731
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['torch_us']:.1f} | {fmt(dp)} | {fmt(sk)} | "
                     f"{r['torch_us'] / dp if dp else 0:.3f}x | {r['torch_us'] / sk if sk else 0:.3f}x |")
    lines += ["", "Every variant, µs:", "", "| shape | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for r in rows:
        lines.append(f"| {'x'.join(map(str, r['shape']))} | " + " | ".join(
            f"{r[kk]:.1f}" if isinstance(r.get(kk), float) else str(r.get(kk, "-")) for kk in keys) + " |")
    return publish(out_dir, "stream_k", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
