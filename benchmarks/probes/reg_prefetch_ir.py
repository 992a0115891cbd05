"""What the register level becomes in Triton's IR on Hopper: TTGIR and PTX of one alcop matmul kernel
with and without explicit register prefetch, on both MMA paths, compiled for sm_90 without a GPU.

    python benchmarks/probes/reg_prefetch_ir.py --out benchmarks/results/reg_prefetch_ir

The kernel source comes from ``alcop_triton.build(...).source`` (fp16 C = A B^T, 128x128x64 tiles,
4 warps, 3 shared stages); the variant with the register level adds ``reg_stages=2, reg_split=2``.
Each is compiled with ``triton.compile`` for ``GPUTarget("cuda", 90, 128)`` as a launch on aligned
4096-sized operands would specialise it (pointers and integer arguments divisible by 16), once on
the wgmma path and once with ``DISABLE_MMA_V3=1`` (mma.sync). The report counts, per variant, the
TTGIR operations that say where operands travel (async global-to-shared copies, shared-memory
loads into registers, plain global loads, the MMA op) and the PTX instructions (cp.async,
ldmatrix, ld.shared, ld.global, wgmma, mma.sync). Writes ``OUT/reg_prefetch_ir.md``,
``OUT/reg_prefetch_ir.json``, each variant's source and its TTGIR. CPU only: ptxas ships with Triton.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import triton  # imported before alcop_triton, so the package leaves Triton's interpreter off
from triton.backends.compiler import GPUTarget

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import alcop_triton as at  # noqa: E402
from alcop_triton import te  # noqa: E402
from alcop_triton.runtime import load_kernel  # noqa: E402

TTGIR_OPS = {
    "async copy global->shared": r"ttg\.async_copy_global_to_local",
    "TMA copy": r"ttng\.async_tma_copy_global_to_local",
    "shared->register load": r"ttg\.local_load",
    "register->shared store": r"ttg\.local_alloc %|ttg\.local_store",
    "global load (tt.load)": r"= tt\.load",
    "wgmma (warp_group_dot)": r"ttng\.warp_group_dot ",
    "mma.sync (tt.dot)": r"= tt\.dot ",
}
PTX_OPS = {
    "cp.async": r"cp\.async\.(?:ca|cg)",
    "cp.async.bulk (TMA)": r"cp\.async\.bulk",
    "ldmatrix": r"ldmatrix",
    "ld.shared": r"ld\.shared",
    "st.shared": r"st\.shared",
    "ld.global": r"ld\.global",
    "wgmma.mma_async": r"wgmma\.mma_async",
    "mma.sync": r"mma\.sync",
}
SIZE = 4096


def kernel_source(config: at.KernelConfig) -> tuple[str, str]:
    """(source, function name) of the fp16 C = A B^T kernel for ``config``, targeting the H100."""
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), "float16", "A")
    B = te.placeholder((N, K), "float16", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), "C")
    kern = at.build(at.Schedule.from_config(C, config), [A, B, C], gpu="H100")
    name = re.search(r"^def (\w+)\(", kern.source, re.M)
    assert name, "generated source has no kernel function"
    return kern.source, name.group(1)


def compile_sm90(source: str, name: str, config: at.KernelConfig, mma: str) -> dict[str, str]:
    """TTGIR and PTX of the kernel as a launch on aligned operands specialises it."""
    fn, _ = load_kernel(source, name)
    constexpr = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                 "SUB_K": config.block_k // config.reg_split, "REG_SPLIT": config.reg_split, "GROUP_M": config.group_m}
    sig: dict[str, str] = {}
    consts: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, p in enumerate(fn.params):
        if p.is_constexpr:
            sig[p.name], consts[p.name] = "constexpr", constexpr[p.name]
        else:
            sig[p.name] = "*fp16" if p.name in ("A", "B", "C") else "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]   # 16-byte aligned pointers, sizes and strides % 16 == 0
    old = os.environ.get("DISABLE_MMA_V3")
    if mma == "mma_sync":
        os.environ["DISABLE_MMA_V3"] = "1"
    else:
        os.environ.pop("DISABLE_MMA_V3", None)
    try:
        ck = triton.compile(triton.compiler.ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 128),
                            options={"num_warps": config.num_warps})
    finally:
        if old is None:
            os.environ.pop("DISABLE_MMA_V3", None)
        else:
            os.environ["DISABLE_MMA_V3"] = old
    return {"ttgir": ck.asm["ttgir"], "ptx": ck.asm["ptx"]}


def strip_paths(ttgir: str) -> str:
    """Debug locations name files on the machine that compiled: keep the file name only."""
    return re.sub(r'loc\("[^"]*/([^"/]+)"', r'loc("\1"', ttgir)


def count(ir: dict[str, str]) -> dict[str, dict[str, int]]:
    return {"ttgir": {k: len(re.findall(p, ir["ttgir"])) for k, p in TTGIR_OPS.items()},
            "ptx": {k: len(re.findall(p, ir["ptx"])) for k, p in PTX_OPS.items()}}


VARIANTS = {
    "shared stages only (smem=3, reg=1)": at.KernelConfig(128, 128, 64, num_warps=4, smem_stages=3),
    "shared + register (smem=3, reg=2, split=2)": at.KernelConfig(128, 128, 64, num_warps=4, smem_stages=3,
                                                                  reg_stages=2, reg_split=2),
}


def markdown(res: dict[str, Any]) -> str:
    out = ["# The register level in Triton's IR on Hopper (sm_90)", "",
           f"Produced by `benchmarks/probes/reg_prefetch_ir.py` with Triton {res['triton']} on CPU (no GPU: "
           "`triton.compile` for `GPUTarget('cuda', 90, 128)`), alcop_triton " + res["alcop"] + ". Kernel: fp16 "
           "C = A B^T, 128x128x64 tiles, 4 warps, specialised as a launch on aligned operands would be. Counts "
           "are static (instructions in the code, not executions).", ""]
    for mma in ("wgmma", "mma_sync"):
        out += [f"## {mma} path", "", "| | " + " | ".join(VARIANTS) + " |", "|---|" + "---|" * len(VARIANTS)]
        for level, ops in (("ttgir", TTGIR_OPS), ("ptx", PTX_OPS)):
            for op in ops:
                out.append(f"| {level}: {op} | " + " | ".join(str(res["counts"][mma][v][level][op]) for v in VARIANTS) + " |")
        out.append("")
    out += ["## What it shows", ""] + reading(res["counts"])
    return "\n".join(out) + "\n"


def reading(counts: dict[str, Any]) -> list[str]:
    """Statements the counts support, each checked against them (a statement they do not support is
    left out, so the text cannot drift from the IR)."""
    base, reg = list(VARIANTS)
    lines = []
    for mma in ("wgmma", "mma_sync"):
        b, r = counts[mma][base], counts[mma][reg]
        if b["ttgir"]["global load (tt.load)"] == 0 and r["ttgir"]["global load (tt.load)"] > 0:
            lines.append(f"- {mma}: without the register level every operand load is an async copy into shared "
                         f"memory ({b['ttgir']['async copy global->shared']} in TTGIR, {b['ptx']['cp.async']} cp.async "
                         f"in PTX). With it, the sub-tile carried across iterations as a register value stays a "
                         f"synchronous global load ({r['ttgir']['global load (tt.load)']} tt.load, "
                         f"{r['ptx']['ld.global']} ld.global; cp.async drops to {r['ptx']['cp.async']}): Triton's "
                         "pipeliner makes multi-stage async copies of loads consumed in the same iteration and "
                         "leaves a load whose value is carried to the next iteration (scf.yield) as it is, so that "
                         "half of the operand traffic leaves the shared-memory pipeline and is hidden one "
                         "iteration deep instead of num_stages - 1 chunks.")
        if r["ttgir"]["register->shared store"] > b["ttgir"]["register->shared store"]:
            lines.append(f"- {mma}: the prefetched register tiles are written back to shared memory before the MMA "
                         f"({r['ttgir']['register->shared store']} local_alloc in TTGIR, st.shared "
                         f"{b['ptx']['st.shared']} -> {r['ptx']['st.shared']} in PTX)"
                         + (": wgmma takes its operands from shared memory, so registers are a detour"
                            if mma == "wgmma" else f", then read again with ldmatrix ({b['ptx']['ldmatrix']} -> "
                            f"{r['ptx']['ldmatrix']}): Triton already stages mma.sync operands from shared memory "
                            "into registers one k-slice ahead, which is the register level done below the program")
                         + ".")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"triton": triton.__version__, "alcop": at.__version__, "counts": {}}
    for mma in ("wgmma", "mma_sync"):
        res["counts"][mma] = {}
        for label, cfg in VARIANTS.items():
            src, name = kernel_source(cfg)
            ir = compile_sm90(src, name, cfg, mma)
            res["counts"][mma][label] = count(ir)
            stem = f"{mma}_reg{cfg.reg_stages}"
            (out / f"{stem}.py").write_text(src)
            (out / f"{stem}.ttgir").write_text(strip_paths(ir["ttgir"]))   # the PTX is only counted (it is large)
    (out / "reg_prefetch_ir.json").write_text(json.dumps(res, indent=1))
    (out / "reg_prefetch_ir.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
