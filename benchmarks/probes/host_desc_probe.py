"""Probe: do host-side TMA descriptors (kernel parameters built by the launcher) beat device-side ones
(``tl.make_tensor_descriptor`` in the kernel, what alcop's codegen emitted before it passed launcher-built
ones), with the output stored by TMA whole or in two halves? Standalone persistent matmul kernels (not
alcop codegen), the same loop in both spellings, against torch and alcop's drop-in as dispatched.

    python benchmarks/probes/host_desc_probe.py --dir OUT_DIR       # on the GPU: OUT_DIR/host_desc_probe.jsonl
    python benchmarks/probes/host_desc_probe.py --report data.jsonl --out results/host_desc_probe.md
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # alcop_triton from this checkout

SHAPES = [(3136, 512, 512), (3136, 1536, 384), (512, 3072, 768), (12544, 256, 1024), (1024, 2304, 768),
          (1024, 768, 768), (12544, 512, 512), (4096, 4096, 4096)]
"""Suite GEMMs where alcop trails cuBLAS most under CUDA graphs, the worst held-out shape (3136x1536x384)
and one large square one (C = A @ B^T, B stored N x K)."""


@triton.jit
def _tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    group = tile_id // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (tile_id % size_m), (tile_id % (GROUP_M * num_pid_n)) // size_m


@triton.jit
def _body(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          STAGES: tl.constexpr, SPLIT_STORE: tl.constexpr):
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    for tile_id in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=True,
                            num_stages=STAGES):
        pid_m, pid_n = _tile(tile_id, num_pid_m, num_pid_n, 8)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([pid_m * BM, ki * BK]), b_desc.load([pid_n * BN, ki * BK]).T, acc)
        if SPLIT_STORE:
            c0, c1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
            c_desc.store([pid_m * BM, pid_n * BN], c0.to(tl.float16))
            c_desc.store([pid_m * BM, pid_n * BN + BN // 2], c1.to(tl.float16))
        else:
            c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))


@triton.jit
def mm_host(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            STAGES: tl.constexpr, SPLIT_STORE: tl.constexpr):
    _body(a_desc, b_desc, c_desc, M, N, K, BM, BN, BK, STAGES, SPLIT_STORE)


@triton.jit
def mm_device(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              STAGES: tl.constexpr, SPLIT_STORE: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(B, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1],
                                       block_shape=[BM, BN // 2 if SPLIT_STORE else BN])
    _body(a_desc, b_desc, c_desc, M, N, K, BM, BN, BK, STAGES, SPLIT_STORE)


def launch(host: bool, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bm: int, bn: int, bk: int, stages: int,
           warps: int, split: bool, programs: int) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    (m, k), n = a.shape, b.shape[0]
    grid = (min(programs, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)
    if host:
        mm_host[grid](TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk]),
                      TensorDescriptor.from_tensor(c, [bm, bn // 2 if split else bn]), m, n, k,
                      bm, bn, bk, stages, split, num_warps=warps)
    else:
        mm_device[grid](a, b, c, m, n, k, bm, bn, bk, stages, split, num_warps=warps)


def variants() -> list[tuple[int, int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, stages, warps)."""
    return [(bm, bn, 64, s, w) for (bm, bn, w), s in itertools.product(((128, 128, 4), (64, 256, 4), (128, 256, 8)), (3, 4))]


def _wall_ms(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def measure(out: str, shapes: list[tuple[int, int, int]]) -> None:
    import alcop_triton as at

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    meta = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter)",
            "torch": torch.__version__.split("+")[0], "triton": triton.__version__,
            "date": datetime.date.today().isoformat()}
    if dev == "cuda":
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        programs = torch.cuda.get_device_properties(0).multi_processor_count
        bench = lambda fn: triton.testing.do_bench_cudagraph(fn, rep=40)  # noqa: E731
    else:   # the interpreter: every spelling checked, wall-clock times (not a measurement)
        programs, bench = 2, _wall_ms
    with open(os.path.join(out, "host_desc_probe.jsonl"), "w") as f:
        for m, n, k in shapes:
            a = torch.randn(m, k, device=dev, dtype=torch.float16)
            b = torch.randn(n, k, device=dev, dtype=torch.float16)
            ref = a.float() @ b.float().T
            base = {"M": m, "N": n, "K": k, "torch_ms": bench(lambda: torch.matmul(a, b.T)),
                    "alcop_ms": bench(lambda: at.matmul(a, b.T))} | meta
            for (bm, bn, bk, s, w), host, split in itertools.product(variants(), (False, True), (False, True)):
                c = torch.full((m, n), float("nan"), device=dev, dtype=torch.float16)
                rec = base | {"BM": bm, "BN": bn, "BK": bk, "S": s, "W": w, "host": host, "split_store": split}
                try:
                    def fn() -> None:
                        launch(host, a, b, c, bm, bn, bk, s, w, split, programs)
                    fn()
                    rec["err"] = ((c.float() - ref).norm() / ref.norm()).item()
                    rec["ms"] = bench(fn) if rec["err"] < 1e-2 else None
                except Exception as e:  # compile failure / out of resources: recorded
                    rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                f.write(json.dumps(rec) + "\n")
                f.flush()
            print(m, n, k, "done", flush=True)


def report(path: Path) -> str:
    """Per shape: torch, alcop as dispatched, the best device-side and host-side spelling."""
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    shapes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in recs))
    rows, gains, vs_torch = [], [], []
    for shp in shapes:
        rs = [r for r in recs if (r["M"], r["N"], r["K"]) == shp and r.get("ms")]
        best = {h: min((r for r in rs if r["host"] == h), key=lambda r: r["ms"]) for h in (False, True)}
        t, al = rs[0]["torch_ms"], rs[0]["alcop_ms"]
        dv, hs = best[False]["ms"], best[True]["ms"]
        gains.append(dv / hs)
        vs_torch.append((t / al, t / hs))
        h = best[True]
        rows.append(f"| {'x'.join(map(str, shp))} | {t * 1e3:.1f} | {al * 1e3:.1f} ({t / al:.2f}x) | {dv * 1e3:.1f} | "
                    f"{hs * 1e3:.1f} ({t / hs:.2f}x) | {dv / hs:.3f}x | {h['BM']}x{h['BN']}x{h['BK']} s{h['S']} "
                    f"w{h['W']}{' split store' if h['split_store'] else ''} |")
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    failed = sum(1 for r in recs if "error" in r)
    return "\n".join([
        "# Host-side TMA descriptors probe", "",
        f"Produced by `benchmarks/probes/host_desc_probe.py --report` from `{path.name}`: {recs[0]['device']}, "
        f"torch {recs[0]['torch']}, Triton {recs[0]['triton']}, measured {recs[0]['date']}. One persistent TMA "
        "matmul loop (fp16, C = A @ B^T, tiles 128x128 / 64x256 (4 warps) / 128x256 (8 warps), BLOCK_K 64, 3|4 "
        "stages, flattened tile loop), its descriptors made in the kernel (device) or "
        "passed by the launcher (host), the output stored by TMA whole or in two halves. Each checked against "
        f"torch, timed with CUDA graphs (`triton.testing.do_bench_cudagraph`); {len(recs)} configs, {failed} "
        "failed (out of shared memory). alcop = the drop-in as dispatched (shipped table) in the same run.", "",
        "| M x N x K | torch µs | alcop µs (vs torch) | best device-side µs | best host-side µs (vs torch) | "
        "host vs device | best host-side config |", "|---|---|---|---|---|---|---|",
        *rows, "",
        f"Geomean: host-side over device-side descriptors {geo(gains):.3f}x; vs torch, alcop as dispatched "
        f"{geo([a for a, _ in vs_torch]):.3f}x, best host-side spelling {geo([h for _, h in vs_torch]):.3f}x.", ""])


def _shape(text: str) -> tuple[int, int, int]:
    m, n, k = map(int, text.split("x"))
    return m, n, k


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", type=Path, help="summarise a measured JSONL file instead of measuring")
    ap.add_argument("--out", type=Path, help="markdown output of --report")
    ap.add_argument("--dir", default=".", help="where measuring writes host_desc_probe.jsonl")
    ap.add_argument("--shapes", help="MxNxK,... (default: SHAPES)")
    a = ap.parse_args(argv)
    if a.report is not None:
        md = report(a.report)
        print(md)
        if a.out:
            a.out.write_text(md)
    else:
        measure(a.dir, [_shape(s) for s in a.shapes.split(",")] if a.shapes else SHAPES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
