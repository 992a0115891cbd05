"""Does a short last wave cost less as a second launch that overlaps the first? A hand-written kernel, timed.

    python benchmarks/probes/wave_tail.py OUT_DIR

Two GEMMs of ``benchmarks/tune_speed.py``'s unseen shapes stay near 0.8x cuBLAS after tuning: their tiles
fill two or three waves of the H100's SMs and a few more (``results/pdl_h100/tune_speed``). Split-K of the
last wave in one launch (``results/partial_wave_h100``) and the last rows as a second launch that starts
after the first (``results/row_split_h100``) were both slower. Here the second launch starts *during* the
first, by programmatic dependent launch: every program of the first launch waits for the kernel before it
(``gdc_wait``) and then lets the next launch start (``gdc_launch_dependents``); the second launch's
programs then take the SMs that the first launch's last wave leaves idle. They need no wait before their
loads (the first launch's programs have all waited for the inputs' producer before the second can start)
and they wait at their end, after their stores, so that the second launch completes only after the first
(the kernel after it waits for the second alone).

One kernel (TMA copies of A and of B stored N x K, grouped order, ``gdc_wait`` first as alcop launches its
kernels on Hopper), three ways, each at a few tiles:

* ``one``: one launch over all rows;
* ``serial``: the first rows (a whole number of waves, counted from the kernel's occupancy) as one launch,
  the rest as a second launch with smaller tiles that waits for the first (``row_split.py``'s arrangement);
* ``overlap``: the same two launches, the second started during the first as above.

Beside them alcop's matmul as dispatched and ``torch.matmul`` (cuBLAS) on the same inputs; then alcop's own
generated kernels at each ``MAIN`` config, as one launch and as the library's wave tail
(``KernelConfig.wave_tail``: whole waves of one tile per SM, then ``TAIL_CONFIG``). Every variant's
result is checked against a float32 product (normwise relative error <= 1e-2) after the output is filled
with NaN, twice, and must be bitwise equal across the two runs. Timer: ``triton.testing.do_bench_cudagraph``
(median; the two launches under one graph). Writes ``OUT_DIR/wave_tail.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv_box import _grouped  # noqa: E402  (the tile of program_id(0) in GROUP_M = 8 order)
from probe_io import GRAPH_TIMER, publish, run_meta, table_head  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

SHAPES = ((1970, 2304, 768), (896, 2560, 2560), (1024, 2304, 768), (2304, 1792, 2816))
"""(M, N, K): the two unseen tuning shapes near 0.8x cuBLAS, a suite shape at 0.89x, and the unseen shape
at 0.96x."""
MAIN = ((128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (64, 128, 64, 4, 3), (128, 128, 64, 4, 4), (64, 256, 64, 4, 3))
TAIL = ((64, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4))
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of the first launch and of the last rows' launch."""
SMEM_PER_SM = 228 * 1024
REGS_PER_SM = 65536


@triton.jit
def gemm(a_desc, b_desc, c_desc, row0, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
         S: tl.constexpr, WAIT_FIRST: tl.constexpr, TRIGGER: tl.constexpr, WAIT_LAST: tl.constexpr):
    """C[row0:M] = A[row0:M] @ B^T, one program per BM x BN tile, GROUP_M = 8 order."""
    if WAIT_FIRST:
        gdc_wait()
    if TRIGGER:
        gdc_launch_dependents()
    pm, pn = _grouped(tl.cdiv(M - row0, BM), tl.cdiv(N, BN))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=S):
        a = a_desc.load([row0 + pm * BM, k * BK])
        b = b_desc.load([pn * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([row0 + pm * BM, pn * BN], acc.to(tl.float16))
    if WAIT_LAST:
        gdc_wait()


def main(out_dir: str) -> int:
    import torch
    from triton.testing import do_bench_cudagraph
    from triton.tools.tensor_descriptor import TensorDescriptor

    import alcop_triton as at

    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count

    def launcher(a: Any, bt: Any, c: Any, cfg: tuple[int, ...], row0: int, m: int, flags: tuple[bool, bool, bool],
                 pdl: bool) -> Callable[[], Any]:
        bm, bn, bk, warps, stages = cfg
        ad, bd = TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(bt, [bn, bk])
        cd = TensorDescriptor.from_tensor(c, [bm, bn])
        grid = (triton.cdiv(m - row0, bm) * triton.cdiv(c.shape[1], bn),)
        n, k = c.shape[1], a.shape[1]

        def run() -> Any:
            return gemm[grid](ad, bd, cd, row0, m, n, k, bm, bn, bk, stages, *flags, num_warps=warps,
                              num_stages=stages, launch_pdl=pdl)
        return run

    def slots(kernel: Any, warps: int) -> int:
        """Programs resident per SM, from the compiled kernel's shared memory and registers."""
        by_smem = SMEM_PER_SM // max(kernel.metadata.shared + 1024, 1)
        by_regs = REGS_PER_SM // max(kernel.n_regs * 32 * warps, 1)
        return max(1, min(by_smem, by_regs, 32 // warps))

    rows: list[dict[str, Any]] = []
    for m, n, k in SHAPES:
        g = torch.Generator(device="cpu").manual_seed(0)
        a = (torch.randn(m, k, generator=g) / k ** 0.25).half().to(dev)
        bt = (torch.randn(n, k, generator=g) / k ** 0.25).half().to(dev)
        want = a.float() @ bt.float().T
        c = torch.empty(m, n, device=dev, dtype=torch.float16)
        row: dict[str, Any] = {"shape": [m, n, k], "torch_us": 1e3 * do_bench_cudagraph(lambda: a @ bt.T)}
        at.matmul(a, bt.T)
        row["alcop_us"] = 1e3 * do_bench_cudagraph(lambda: at.matmul(a, bt.T))
        variants: list[dict[str, Any]] = []

        def measure(name: str, calls: list[Callable[[], Any]], **info: Any) -> None:
            def both() -> None:
                for f in calls:
                    f()
            entry: dict[str, Any] = {"variant": name, **info}
            try:
                outs = []
                for _ in range(2):
                    c.fill_(float("nan"))
                    both()
                    torch.cuda.synchronize()
                    outs.append(c.clone())
                err = ((outs[0].float() - want).norm() / want.norm()).item()
                if not err <= 1e-2 or not torch.equal(outs[0], outs[1]):
                    entry["us"] = f"wrong (error {err:.1e}, runs equal {torch.equal(outs[0], outs[1])})"
                else:
                    entry["us"] = 1e3 * do_bench_cudagraph(both)
            except Exception as exc:  # out of resources: a result
                entry["us"] = f"{type(exc).__name__}: {str(exc)[:80]}"
            variants.append(entry)

        for mc in MAIN:
            one = launcher(a, bt, c, mc, 0, m, (True, False, False), True)
            measure("one", [one], main=mc)
            try:
                kern = one()
            except Exception:
                continue
            per_sm = slots(kern, mc[3])
            wave = per_sm * sms
            col_tiles = triton.cdiv(n, mc[1])
            row_tiles = triton.cdiv(m, mc[0])
            cuts = set()
            for waves in range(1, 5):   # the most row tiles whose tiles fill whole waves, and one row tile less
                r = min(row_tiles - 1, waves * wave // col_tiles)
                for rr in (r, r - 1):
                    if 0 < rr < row_tiles:
                        cuts.add(rr * mc[0])
            for m1 in sorted(cuts):
                for tc in TAIL:
                    first_serial = launcher(a, bt, c, mc, 0, m1, (True, False, False), True)
                    second_serial = launcher(a, bt, c, tc, m1, m, (True, False, False), True)
                    measure("serial", [first_serial, second_serial], main=mc, rows=m1, tail=tc, slots=per_sm)
                    first = launcher(a, bt, c, mc, 0, m1, (True, True, False), True)
                    second = launcher(a, bt, c, tc, m1, m, (False, False, True), True)
                    measure("overlap", [first, second], main=mc, rows=m1, tail=tc, slots=per_sm)
        from alcop_triton.kernels import matmul as km
        for mc in MAIN:
            for tail in (False, True):
                cfg = at.KernelConfig(mc[0], mc[1], mc[2], group_m=8, num_warps=mc[3], smem_stages=mc[4],
                                      async_copy="tma", wave_tail=tail)
                try:
                    launch, _ = km.compiled("float16", 0, km.Epilogue(), cfg).bind(a, bt.T, c)
                except Exception as exc:  # a config the kernel refuses: the result
                    variants.append({"variant": "alcop tail" if tail else "alcop one", "main": mc,
                                     "us": f"{type(exc).__name__}: {str(exc)[:80]}"})
                    continue
                measure("alcop tail" if tail else "alcop one", [launch], main=mc, split=launch.then is not None)
        row["variants"] = variants
        best: dict[str, Any] = {}
        for v in variants:
            if isinstance(v["us"], float) and v["us"] < best.get(v["variant"], {"us": float("inf")})["us"]:
                best[v["variant"]] = v
        row["best"] = best
        rows.append(row)
        print({"shape": row["shape"], "torch_us": row["torch_us"], "alcop_us": row["alcop_us"],
               "best": {kk: (round(v["us"], 2), v.get("main"), v.get("rows"), v.get("tail")) for kk, v in best.items()}},
              flush=True)
    meta = run_meta(GRAPH_TIMER)
    lines = table_head("A short last wave as an overlapping second launch", meta,
                       "fp16, B stored N x K; µs. Best of each arrangement over the tiles tried: first launch's "
                       "config, its rows, the tail's config.",
                       ["shape", "cuBLAS", "alcop (dispatched)", "arrangement", "µs", "cuBLAS / it", "config"])
    for r in rows:
        t = r["torch_us"]
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {t:.1f} | {r['alcop_us']:.1f} | alcop | {r['alcop_us']:.1f} "
                     f"| {t / r['alcop_us']:.3f}x | as dispatched |")
        for name in ("one", "serial", "overlap", "alcop one", "alcop tail"):
            v = r["best"].get(name)
            if v:
                cfg = f"main {v['main']}" + (f" rows {v['rows']} + tail {v['tail']}" if "rows" in v else "")
                lines.append(f"| | | | {name} | {v['us']:.1f} | {t / v['us']:.3f}x | {cfg} |")
    lines += ["", "alcop's generated kernels per config, one launch against the wave tail (µs; '-' where the "
              "tiles fill whole waves or less than one, and the tail config runs as one launch):", "",
              "| shape | config | one launch | wave tail | one / tail |", "|---|---|---|---|---|"]
    for r in rows:
        by = {(v["variant"], tuple(v["main"])): v for v in r["variants"] if v["variant"].startswith("alcop")}
        for mc in MAIN:
            one, tail = by.get(("alcop one", mc)), by.get(("alcop tail", mc))
            if one is None or tail is None:
                continue
            split = tail.get("split") and isinstance(tail["us"], float)
            ratio = f"{one['us'] / tail['us']:.3f}x" if split and isinstance(one["us"], float) else "-"
            lines.append(f"| {'x'.join(map(str, r['shape']))} | {mc} | {_fmt(one['us'])} | "
                         f"{_fmt(tail['us']) if tail.get('split') else '-'} | {ratio} |")
    return publish(out_dir, "wave_tail", meta, rows, lines)


def _fmt(us: Any) -> str:
    return f"{us:.1f}" if isinstance(us, float) else str(us)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
