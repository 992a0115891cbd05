"""The pipelining ablation from measured grids: each pipelining variant at its best config, per shape.

    python benchmarks/report_pipeline.py benchmarks/data/h100_wgmma_dense_bmm.jsonl \
        benchmarks/data/h100_mmasync_dense_bmm.jsonl --out benchmarks/results/pipeline_variants

Variants (paper Fig. 10): none (1 stage), double buffering (2 shared stages, no register level),
shared-memory multi-stage only (any shared depth, no register level), full multi-level (any
shared depth, register prefetch allowed). Each is the minimum time over the grid's configs that
belong to it (its best tile config over the stated grid); speedups are geomeans over shapes.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
import sys
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from alcop_triton.records import geomean, open_jsonl  # noqa: E402

VARIANTS = ("none", "double_buffer", "smem_multistage", "full")


def variants_of(c: dict[str, Any]) -> list[str]:
    s, r = c["num_stages"], c["REG_STAGES"]
    out = []
    if s == 1 and r == 1:
        out.append("none")
    if s == 2 and r == 1:
        out.append("double_buffer")
    if r == 1:
        out.append("smem_multistage")
    out.append("full")
    return out


# Grid restrictions for the sensitivity table: the speedups depend on which tiles the grid offers,
# because the one-stage and double-buffered kernels gain more from some knobs (bigger BLOCK_K) than
# the deeply pipelined ones do.
# Each takes (workload, config) as stored in the records.
Keep = Callable[[dict[str, Any], dict[str, Any]], bool]
RESTRICTIONS: dict[str, Keep] = {
    "whole grid": lambda w, c: True,
    "no persistent programs": lambda w, c: not c.get("PERSISTENT", False),
    "cp.async only (no TMA)": lambda w, c: c["ASYNC_COPY"] == "pointer",
    "BLOCK_K <= 64": lambda w, c: c["BLOCK_K"] <= 64,
    "the paper's K tiles (BLOCK_K <= 64 on dense, any on bmm)":
        lambda w, c: c["BLOCK_K"] <= 64 or w["op"] == "bmm",
    "the 'full' grid's knobs (BLOCK_K <= 64, cp.async, not persistent)":
        lambda w, c: c["BLOCK_K"] <= 64 and c["ASYNC_COPY"] == "pointer" and not c.get("PERSISTENT", False),
}


def read_records(path: Path) -> list[dict[str, Any]]:
    with open_jsonl(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def variant_rows(recs: list[dict[str, Any]], keep: Keep) -> list[dict[str, Any]]:
    """Per shape: each variant's best time over the configs ``keep`` admits, the best full config,
    torch's time and the best time with register prefetch."""
    best: dict[str, dict[str, tuple[float, dict[str, Any]]]] = defaultdict(dict)
    torch_ms: dict[str, float] = {}
    reg_best: dict[str, float] = {}
    for r in recs:
        w = r["workload"]
        key = f"{w['op']} {'x'.join(map(str, w['shape']))}"
        if r["impl"] == "torch":
            torch_ms[key] = r["time_ms"]
            continue
        if r["time_ms"] is None or not keep(w, r["config"]):
            continue
        for v in variants_of(r["config"]):
            if v not in best[key] or r["time_ms"] < best[key][v][0]:
                best[key][v] = (r["time_ms"], r["config"])
        if r["config"]["REG_STAGES"] > 1:
            reg_best[key] = min(reg_best.get(key, math.inf), r["time_ms"])
    return [{"workload": key, **{f"{v}_ms": b[v][0] for v in VARIANTS}, "best_config": b["full"][1],
             "torch_ms": torch_ms.get(key), "best_with_register_prefetch_ms": reg_best.get(key)}
            for key, b in best.items() if all(v in b for v in VARIANTS)]


def speedup(rows: list[dict[str, Any]], slow: str, fast: str) -> float:
    return geomean([r[f"{slow}_ms"] / r[f"{fast}_ms"] for r in rows])


def grid_missing(path: Path, recs: list[dict[str, Any]]) -> dict[str, int] | None:
    """The run's grid (when the file is named like ``ablation_h100.sh`` names it,
    ``<gpu>_<mma>_<grid>``) under today's grid rules: how many (workload, config) pairs it holds and
    how many the file lacks, so a run cut short by its time budget shows."""
    import collect_grid
    from alcop_triton.model.hardware import get_spec
    from alcop_triton.records import KernelConfig, Workload
    grid = next((g for g in collect_grid.GRIDS if path.name.split(".")[0].endswith("_" + g)), None)
    if grid is None:
        return None
    spec = get_spec(recs[0]["gpu"])
    have = {(Workload.from_dict(r["workload"]), KernelConfig.from_dict(r["config"])) for r in recs if r["impl"] == "alcop"}
    wls = {Workload.from_dict(r["workload"]) for r in recs if r["impl"] == "torch"}
    want = {(w, c) for w in wls for c in collect_grid.grid_configs(grid) if collect_grid.useful(w, c, spec, grid)}
    return {"pairs": len(want), "missing": len(want - have)}


def analyse(recs: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    meta = {k: recs[0].get(k) for k in ("gpu", "device", "cc", "mma", "triton", "torch", "alcop", "date")}
    failures = sum(1 for r in recs if r["impl"] == "alcop" and r["time_ms"] is None)
    rows = variant_rows(recs, RESTRICTIONS["whole grid"])
    measured = sum(1 for r in recs if r["impl"] == "alcop")
    summary = {
        "shapes": len(rows), "records": measured, "grid": grid_missing(path, recs), "failed_records": failures,
        "full_over_none": speedup(rows, "none", "full"), "full_over_double_buffer": speedup(rows, "double_buffer", "full"),
        "full_over_smem_multistage": speedup(rows, "smem_multistage", "full"),
        "smem_multistage_over_none": speedup(rows, "none", "smem_multistage"),
        "register_prefetch_best_in": sum(1 for r in rows if r["best_config"]["REG_STAGES"] > 1),
        "register_prefetch_vs_without": geomean([r["smem_multistage_ms"] / r["best_with_register_prefetch_ms"]
                                                 for r in rows if r["best_with_register_prefetch_ms"]]),
        "persistent_best_in": sum(1 for r in rows if r["best_config"].get("PERSISTENT", False)),
        "full_vs_torch": geomean([r["torch_ms"] / r["full_ms"] for r in rows if r["torch_ms"]]),
        "deepest_shared_stage_count": max(r["best_config"]["num_stages"] for r in rows) if rows else None,
    }
    sensitivity = []
    for name, keep in RESTRICTIONS.items():
        sub = variant_rows(recs, keep)
        if sub:
            sensitivity.append({"grid": name, "shapes": len(sub), "full_over_none": speedup(sub, "none", "full"),
                                "full_over_double_buffer": speedup(sub, "double_buffer", "full"),
                                "full_vs_torch": geomean([r["torch_ms"] / r["full_ms"] for r in sub if r["torch_ms"]])})
    return {"meta": meta, "summary": summary, "sensitivity": sensitivity, "rows": rows}


def run_to_run(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Two runs on one MMA path, over the (workload, config) pairs both measured: the spread of the
    time ratio b / a, and the workloads whose torch time moved by more than 2x (a perturbed baseline)."""
    def times(recs: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
        return {(json.dumps(r["workload"], sort_keys=True), json.dumps(r["config"], sort_keys=True)): r["time_ms"]
                for r in recs if r["time_ms"]}
    ta, tb = times(a), times(b)
    common = sorted(k for k in ta.keys() & tb.keys() if k[1] != "null")
    ratios = sorted(tb[k] / ta[k] for k in common)
    n = len(ratios)
    torch_moved = [f"{json.loads(k[0])['op']} {'x'.join(map(str, json.loads(k[0])['shape']))} "
                   f"({ta[k]:.4f} -> {tb[k]:.4f} ms)"
                   for k in ta.keys() & tb.keys() if k[1] == "null" and not 0.5 < tb[k] / ta[k] < 2]
    return {"pairs": n, "median": ratios[n // 2] if n else None, "p10": ratios[n // 10] if n else None,
            "p90": ratios[9 * n // 10] if n else None, "over_2x": sum(not 0.5 < x < 2 for x in ratios) / n if n else None,
            "torch_moved": sorted(torch_moved)}


def markdown(results: list[tuple[str, dict[str, Any]]], records: dict[str, list[dict[str, Any]]]) -> str:
    out = ["# Pipelining variants (ALCOP ablation) on measured grids", "",
           "Produced by `benchmarks/report_pipeline.py` from the JSONL grids named below (each record: one "
           "config on one shape, checked against torch, median of L2-flushed CUDA-event timings).", "",
           "Variants: *none* = one shared stage, no register level; *double* = two shared stages; *smem-multi* = "
           "any shared depth; *full* = any shared depth with or without register prefetch. Each is its best "
           "config over the grid, so knobs other than pipelining (tiles, TMA, persistent programs) are "
           "available to every variant; a persistent program with one stage is not flattened (nothing is "
           "copied ahead), with two or more its tile loop joins the pipeline.", "",
           "Reading the register level: Triton's backend already streams k=16 slices of the MMA operands "
           "from shared memory into registers one slice ahead (its prefetch pass on the mma.sync path; "
           "wgmma reads shared memory directly), which is ALCOP's register level done below the Triton "
           "program. The explicit register level written in the kernel body loads sub-tiles from global "
           "memory as loop-carried values, which takes them out of Triton's cp.async pipeline; the data "
           "below measure what that costs, and the tuner's space can switch it off (reg_stages=1).", ""]
    out += ["## Summary", "",
            "The target: full pipelining >= 1.5x over one stage and >= 1.3x over double buffering "
            "(geomean over the ALCOP dense + bmm shapes, in one run, each variant at its best config over "
            "a stated grid). Grids are defined in `benchmarks/collect_grid.py`.", "",
            "| run | MMA path | measured / grid | full over one stage | full over double buffering | "
            "full vs torch |", "|---|---|---|---|---|---|"]
    for name, res in results:
        m, s, g = res["meta"], res["summary"], res["summary"].get("grid")
        done = "not named" if not g else f"{g['pairs'] - g['missing']} / {g['pairs']}"
        out.append(f"| {name} | {m['mma']} | {done} | {s['full_over_none']:.3f}x | "
                   f"{s['full_over_double_buffer']:.3f}x | {s['full_vs_torch']:.3f}x |")
    out.append("")
    pairs = [(x, y) for i, (x, rx) in enumerate(results) for y, ry in results[i + 1:]
             if rx["meta"]["mma"] == ry["meta"]["mma"] and rx["meta"]["device"] == ry["meta"]["device"]]
    if pairs:
        out += ["Run to run, same GPU model and MMA path (time ratio second / first over the pairs both runs "
                "measured). A variant's best is a minimum over many configs, so single-config outliers "
                "move the speedups far less than they move individual times.", "",
                "| runs | pairs | median | 10th-90th percentile | differ by more than 2x | torch moved by more than 2x |",
                "|---|---|---|---|---|---|"]
        for x, y in pairs:
            d = run_to_run(records[x], records[y])
            if d["pairs"]:
                out.append(f"| {x} vs {y} | {d['pairs']} | {d['median']:.3f} | {d['p10']:.3f}-{d['p90']:.3f} | "
                           f"{d['over_2x']:.1%} | {', '.join(d['torch_moved']) or 'none'} |")
        out.append("")
    for name, res in results:
        m, s = res["meta"], res["summary"]
        out += [f"## {name}", "",
                f"{m['device']} (cc {m['cc']}), MMA path **{m['mma']}**, Triton {m['triton']}, torch {m['torch']}, "
                f"alcop {m['alcop']}, measured {m['date']}.", "",
                "| geomean over shapes | speedup |", "|---|---|",
                f"| full multi-level over one stage | **{s['full_over_none']:.3f}x** |",
                f"| full multi-level over double buffering | **{s['full_over_double_buffer']:.3f}x** |",
                f"| full multi-level over shared-memory multi-stage only | {s['full_over_smem_multistage']:.3f}x |",
                f"| shared multi-stage over one stage | {s['smem_multistage_over_none']:.3f}x |",
                "| best config with register prefetch vs best without (register level alone) | "
                + (f"{s['register_prefetch_vs_without']:.3f}x |" if math.isfinite(s['register_prefetch_vs_without'])
                   else "not in this grid |"),
                f"| full multi-level vs torch (cuBLAS or cuDNN) | {s['full_vs_torch']:.3f}x |", "",
                f"Register prefetch is part of the overall best config on {s['register_prefetch_best_in']} of "
                f"{s['shapes']} shapes, persistent programs on {s.get('persistent_best_in', 0)}; the deepest winning "
                f"shared depth is {s['deepest_shared_stage_count']}. {s.get('records', '?')} configs measured"
                + (f"; the grid holds {s['grid']['pairs']}, " + (f"{s['grid']['missing']} of them missing (the run's time "
                   "budget cut it short: the grid's last tiles)" if s["grid"]["missing"] else "none missing")
                   if s.get("grid") else "") + f"; {s['failed_records']} failed.", "",
                "Sensitivity to the grid (each variant's best over the configs a restriction keeps):", "",
                "| grid | full over one stage | full over double buffering | full vs torch |", "|---|---|---|---|",
                *(f"| {g['grid']} | {g['full_over_none']:.3f}x | {g['full_over_double_buffer']:.3f}x | "
                  f"{g['full_vs_torch']:.3f}x |" for g in res.get("sensitivity", [])), "",
                "| workload | none ms | double ms | smem-multi ms | full ms | torch ms | best full config |",
                "|---|---|---|---|---|---|---|"]
        for r in res["rows"]:
            c = r["best_config"]
            cfg = (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']} "
                   f"r{c['REG_STAGES']}x{c['REG_SPLIT']} {c['ASYNC_COPY']}" + (" persistent" if c.get("PERSISTENT") else ""))
            out.append(f"| {r['workload']} | {r['none_ms']:.4f} | {r['double_buffer_ms']:.4f} | "
                       f"{r['smem_multistage_ms']:.4f} | {r['full_ms']:.4f} | "
                       f"{r['torch_ms']:.4f} | {cfg} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True, help="path prefix for .md and .json")
    a = ap.parse_args(argv)
    records = {Path(f).name.split(".")[0]: read_records(Path(f)) for f in a.files}
    results = [(name, analyse(recs, Path(f))) for (name, recs), f in zip(records.items(), a.files)]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({n: r for n, r in results}, indent=1))
    out.with_suffix(".md").write_text(markdown(results, records))
    for n, r in results:
        print(n, json.dumps(r["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
