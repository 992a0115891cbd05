"""Ablation of ALCOP's three pipeline levels on Hopper: the generated Gluon sm90 GEMM kernels against cuBLAS
(torch.matmul) and alcop's Triton lowering (alcop_triton.matmul), under CUDA graphs.

    python benchmarks/hopper_gemm.py --out DIR [--shapes MxNxK[:LAYOUT],...] [--dtypes float16,bfloat16]
                                     [--level-sets 1,1+2,1+2+3] [--dry-run]

Shapes default to the GEMMs of benchmarks/workloads/models.json with M >= 512 (their layouts) in each
dtype, plus 8192^3 bf16 ("nn"). Per level set a few configs (``LEVEL_SETS``), each planned for the shape
(``alcop_triton.hopper.plan``: clamps and their reasons are recorded); every kernel is checked against
float64 first (a wrong one is reported and not timed), then timed with ``triton.testing.do_bench_cudagraph``
(median). Writes DIR/hopper_gemm.{json,md} naming device, versions, date, timer and command.

``--dry-run`` (no GPU): generate every planned kernel and compile it for sm90 on the CPU (wgmma, TMA,
shared memory), nothing timed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from alcop_triton.hopper import HopperConfig, plan  # noqa: E402

LEVEL_SETS: dict[str, list[HopperConfig]] = {
    # level 1 alone: the TMA ring, each wgmma waited for at once, one consumer, a program per tile
    "1": [HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=0, stages=4),
          HopperConfig(block_m=64, block_n=256, warp_specialize=False, persistent=False, wgmma_depth=0, stages=4)],
    # + level 2: wgmma groups left in flight (1, and 2 where the ring allows), copies in line or by a loader warp
    "1+2": [HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=1, stages=4),
            HopperConfig(warp_specialize=True, persistent=False, wgmma_depth=1, stages=4),
            HopperConfig(warp_specialize=True, persistent=False, wgmma_depth=2, stages=4)],
    # + level 3: persistent, two consumers in ping-pong (or cooperative on a wider tile), subtiled epilogue
    "1+2+3": [HopperConfig(consumers=2, policy="pingpong", stages=4, wgmma_depth=1, epilogue_subtile=2),
              HopperConfig(consumers=2, policy="pingpong", stages=4, wgmma_depth=2, epilogue_subtile=2),
              HopperConfig(block_n=256, consumers=2, policy="cooperative", stages=3, wgmma_depth=1,
                           epilogue_subtile=2)],
}
BIG = "8192x8192x8192:nn"


def default_shapes() -> list[str]:
    data = json.loads((ROOT / "benchmarks" / "workloads" / "models.json").read_text())
    return [f"{'x'.join(map(str, w['shape']))}:{w['layout']}" for w in data["workloads"]
            if w["op"] == "matmul" and w["shape"][0] >= 512]


def parse_shape(text: str) -> tuple[int, int, int, str]:
    dims, _, layout = text.partition(":")
    m, n, k = (int(v) for v in dims.split("x"))
    layout = layout or "nt"
    if layout not in ("nn", "nt", "tn", "tt") or min(m, n, k) < 1:
        raise SystemExit(f"--shapes: {text!r}: MxNxK with positive sizes, optionally :nn/:nt/:tn/:tt")
    return m, n, k, layout


def cases(shapes: list[str], dtypes: list[str], big: bool) -> list[tuple[int, int, int, str, str]]:
    out = [(*parse_shape(s), d) for s in shapes for d in dtypes]
    if big and "bfloat16" in dtypes:
        out.append((*parse_shape(BIG), "bfloat16"))
    return out


def operands(m: int, n: int, k: int, layout: str, dtype: str) -> tuple[Any, Any]:
    import torch
    g = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    dt = getattr(torch, dtype)
    scale = k ** -0.25
    a = (torch.randn(k, m, device="cuda", generator=g) * scale).to(dt).t() if layout[0] == "t" else \
        (torch.randn(m, k, device="cuda", generator=g) * scale).to(dt)
    b = (torch.randn(n, k, device="cuda", generator=g) * scale).to(dt).t() if layout[1] == "t" else \
        (torch.randn(k, n, device="cuda", generator=g) * scale).to(dt)
    return a, b


def run_dry(todo: list[tuple[int, int, int, str, str]], sets: list[str]) -> list[dict[str, Any]]:
    from alcop_triton.hopper.sm90_check import compile_sm90
    rows, seen = [], {}
    for m, n, k, layout, dtype in todo:
        for level in sets:
            for req in LEVEL_SETS[level]:
                p = plan(m, n, k, req)
                key = (p.config, dtype, layout)
                if key not in seen:
                    seen[key] = compile_sm90(p.config, dtype, layout)
                got = seen[key]
                rows.append({"shape": [m, n, k], "layout": layout, "dtype": dtype, "levels": level,
                             "requested": req.tag(), "config": p.config.tag(), "notes": list(p.notes),
                             "kernel": got["name"], "wgmma": got["wgmma"], "tma": got["tma"], "shared": got["shared"]})
                print(f"{m}x{n}x{k}:{layout} {dtype} [{level}] {got['name']}: wgmma={got['wgmma']} tma={got['tma']} "
                      f"shared={got['shared']}", flush=True)
    return rows


def run_gpu(todo: list[tuple[int, int, int, str, str]], sets: list[str]) -> list[dict[str, Any]]:
    import torch
    import triton

    import alcop_triton as at
    from alcop_triton.hopper.launch import matmul as hopper_matmul
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []

    def bench(fn: Any) -> float:
        return float(triton.testing.do_bench_cudagraph(fn, rep=100))

    for m, n, k, layout, dtype in todo:
        a, b = operands(m, n, k, layout, dtype)
        ref = a.double() @ b.double()

        def err(out: Any) -> float:
            return float(((out.double() - ref).norm() / ref.norm()).item())
        flops = 2.0 * m * n * k
        torch_ms = bench(lambda: torch.matmul(a, b))
        alcop_err = err(at.matmul(a, b))
        alcop_ms = bench(lambda: at.matmul(a, b))
        base = {"shape": [m, n, k], "layout": layout, "dtype": dtype, "torch_ms": torch_ms, "alcop_triton_ms": alcop_ms,
                "alcop_triton_rel_err": alcop_err, "alcop_triton_vs_torch": torch_ms / alcop_ms}
        for level in sets:
            for req in LEVEL_SETS[level]:
                p = plan(m, n, k, req, sms=sms)
                row = dict(base, levels=level, requested=req.tag(), config=p.config.tag(), notes=list(p.notes))
                try:
                    out = torch.full((m, n), float("nan"), dtype=a.dtype, device="cuda")
                    hopper_matmul(a, b, config=p.config, out=out)
                    torch.cuda.synchronize()
                    row["rel_err"] = e = err(out)
                    if not e <= 1e-2:  # NaN included
                        row["error"] = f"relative error {e:.3g} > 1e-2: not timed"
                    else:
                        ms = bench(lambda: hopper_matmul(a, b, config=p.config, out=out))
                        row.update(ms=ms, tflops=flops / ms / 1e9, vs_torch=torch_ms / ms)
                except Exception as exc:  # a config that fails to compile or launch is recorded, not chosen
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                rows.append(row)
                print(f"{m}x{n}x{k}:{layout} {dtype} [{level}] {p.config.tag()}: "
                      + (f"{row['ms']:.4f} ms, {row['vs_torch']:.3f}x torch" if "ms" in row else row["error"])
                      + f" (torch {torch_ms:.4f} ms, alcop triton {torch_ms / alcop_ms:.3f}x)", flush=True)
    return rows


def summary(rows: list[dict[str, Any]], sets: list[str]) -> list[dict[str, Any]]:
    """Per (dtype, level set): geomean and min over shapes of the best config's ratio to torch, and the
    gain of each level set over the one before it."""
    out = []
    for dtype in sorted({r["dtype"] for r in rows}):
        prev: dict[tuple[Any, ...], float] | None = None
        for level in sets:
            best: dict[tuple[Any, ...], float] = {}
            for r in rows:
                if r["dtype"] == dtype and r["levels"] == level and "vs_torch" in r:
                    key = (tuple(r["shape"]), r["layout"])
                    best[key] = max(best.get(key, 0.0), r["vs_torch"])
            if not best:
                continue
            geo = math.exp(sum(map(math.log, best.values())) / len(best))
            gain = None
            if prev:
                common = [s for s in best if s in prev]
                if common:
                    gain = math.exp(sum(math.log(best[s] / prev[s]) for s in common) / len(common))
            out.append({"dtype": dtype, "levels": level, "shapes": len(best), "geomean_vs_torch": geo,
                        "min_vs_torch": min(best.values()), "gain_over_previous_set": gain})
            prev = best
    return out


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for hopper_gemm.json and hopper_gemm.md")
    ap.add_argument("--shapes", default=None, help="MxNxK[:LAYOUT],... (default: models.json GEMMs with M >= 512)")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--level-sets", default=",".join(LEVEL_SETS))
    ap.add_argument("--no-big", action="store_true", help=f"leave out {BIG} bf16")
    ap.add_argument("--dry-run", action="store_true", help="generate and compile for sm90 on the CPU only")
    a = ap.parse_args(argv)
    sets = a.level_sets.split(",")
    bad = [s for s in sets if s not in LEVEL_SETS]
    dtypes = a.dtypes.split(",")
    if bad or any(d not in ("float16", "bfloat16") for d in dtypes):
        raise SystemExit(f"--level-sets from {list(LEVEL_SETS)}, --dtypes from float16,bfloat16; got {sets}, {dtypes}")
    shapes = a.shapes.split(",") if a.shapes else default_shapes()
    todo = cases(shapes, dtypes, not a.no_big and a.shapes is None)
    import torch
    import triton

    from alcop_triton.version import __version__
    rows = run_dry(todo, sets) if a.dry_run else run_gpu(todo, sets)
    meta = {"device": "none (dry run: compiled for sm90 on the CPU)" if a.dry_run else torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__, "alcop_triton": __version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "timer": "none (dry run)" if a.dry_run else
            "kernel under a CUDA graph, triton.testing.do_bench_cudagraph (median), every implementation",
            "command": "python benchmarks/hopper_gemm.py " + " ".join(map(shlex.quote, argv if argv is not None
                                                                             else sys.argv[1:]))}
    summ = [] if a.dry_run else summary(rows, sets)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hopper_gemm.json").write_text(json.dumps({"meta": meta, "summary": summ, "rows": rows}, indent=1) + "\n")
    lines = [f"# Hopper GEMM ablation: {meta['device']}", "",
             f"{meta['timer']}; torch {meta['torch']}, triton {meta['triton']}, alcop_triton {meta['alcop_triton']}, "
             f"{meta['date']}.", "", f"Command: `{meta['command']}`", ""]
    if summ:
        lines += ["| dtype | levels | shapes | geomean vs torch (best config) | min | gain over previous set |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {s['dtype']} | {s['levels']} | {s['shapes']} | {s['geomean_vs_torch']:.3f}x | "
                  f"{s['min_vs_torch']:.3f}x | {_ratio(s['gain_over_previous_set'])} |" for s in summ]
        lines += ["", "| shape | layout | dtype | levels | config | ms | TF/s | vs torch | alcop triton vs torch | note |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {'x'.join(map(str, r['shape']))} | {r['layout']} | {r['dtype']} | {r['levels']} | {r['config']} | "
                  + (f"{r['ms']:.4f} | {r['tflops']:.0f} | {r['vs_torch']:.3f}x" if "ms" in r else "| | ")
                  + f" | {r['alcop_triton_vs_torch']:.3f}x | {r.get('error', '; '.join(r['notes']))} |" for r in rows]
    else:
        lines += ["| shape | layout | dtype | levels | kernel | wgmma | TMA | shared B |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {'x'.join(map(str, r['shape']))} | {r['layout']} | {r['dtype']} | {r['levels']} | {r['kernel']} | "
                  f"{r['wgmma']} | {r['tma']} | {r['shared']} |" for r in rows]
    (out / "hopper_gemm.md").write_text("\n".join(lines) + "\n")
    failed = [r for r in rows if "error" in r or (a.dry_run and not (r["wgmma"] and r["tma"]))]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
