"""The pipelining ablation from measured grids: the best config of each kind of pipelining, per shape.

    python benchmarks/report_pipeline.py benchmarks/data/h100_wgmma_alcop_space.jsonl.gz \
        benchmarks/data/h100_mma_sync_alcop_space.jsonl.gz --out OUT/pipeline_variants

A kind says what its configs contain (``KINDS``): one shared stage and no register prefetch;
double buffering; shared-memory stages only (smem > 1, reg = 1); register prefetch only (smem = 1,
reg > 1); both levels (smem > 1, reg > 1), each of these without persistent programs; persistent
programs (any depths); and the best config of any kind. Each kind's time on a shape is the minimum
over the grid's configs of that kind, so the register level's effect shows on its own (register
only over one stage; both levels over shared stages only) rather than inside "the best of
everything". Speedups are geomeans over the shapes where both kinds were measured.

A torch (cuBLAS / cuDNN) time that differs by more than 2x from the median over the runs given
(at least three) for the same device and shape, or that is more than 5x our best time in its own run, is called suspect and
left out of that run's "vs torch" geomean (the report lists it and gives the geomean with it too): a
perturbed baseline must not move the ratio unseen.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
import sys
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from alcop_triton.records import geomean, open_jsonl  # noqa: E402

TIMER = ("per config: median of L2-flushed CUDA-event times of a pre-bound launch (host cost hidden), as "
         "benchmarks/collect_grid.py times; torch: the same timer, best of three")
KINDS: dict[str, str] = {
    "one_stage": "one shared stage, no register prefetch (smem = 1, reg = 1), not persistent",
    "double_buffer": "two shared stages, no register prefetch (smem = 2, reg = 1), not persistent",
    "smem_only": "shared-memory stages only (smem > 1, reg = 1), not persistent",
    "reg_only": "register prefetch only (smem = 1, reg > 1), not persistent",
    "smem_and_reg": "both levels (smem > 1, reg > 1), not persistent",
    "persistent": "persistent programs, any depths",
    "best": "any config of the grid",
}
# Kinds that split the grid into disjoint parts: which one holds a shape's best config.
DISJOINT = ("one_stage", "smem_only", "reg_only", "smem_and_reg", "persistent")
# (faster kind, slower kind): the speedups the report states.
COMPARISONS: tuple[tuple[str, str], ...] = (
    ("smem_only", "one_stage"), ("smem_only", "double_buffer"), ("reg_only", "one_stage"),
    ("smem_and_reg", "smem_only"), ("smem_and_reg", "one_stage"), ("persistent", "smem_only"),
    ("best", "one_stage"), ("best", "double_buffer"))


IMPLAUSIBLE = 5.0


def kinds_of(c: dict[str, Any]) -> list[str]:
    s, r, persistent = c["num_stages"], c["REG_STAGES"], c.get("PERSISTENT", False)
    out = ["best"]
    if persistent:
        return out + ["persistent"]
    if s == 1:
        out.append("one_stage" if r == 1 else "reg_only")
    else:
        out.append("smem_only" if r == 1 else "smem_and_reg")
        if s == 2 and r == 1:
            out.append("double_buffer")
    return out


# Grid restrictions for the sensitivity table: the speedups depend on which tiles the grid offers,
# because the one-stage and double-buffered kernels gain more from some knobs (bigger BLOCK_K) than
# the deeply pipelined ones do.
# Each takes (workload, config) as stored in the records.
Keep = Callable[[dict[str, Any], dict[str, Any]], bool]
RESTRICTIONS: dict[str, Keep] = {
    "whole grid": lambda w, c: True,
    "cp.async only (no TMA)": lambda w, c: c["ASYNC_COPY"] == "pointer",
    "BLOCK_K <= 64": lambda w, c: c["BLOCK_K"] <= 64,
    "the paper's K tiles (BLOCK_K <= 64 on dense, any on bmm)":
        lambda w, c: c["BLOCK_K"] <= 64 or w["op"] == "bmm",
}


def read_records(path: Path) -> list[dict[str, Any]]:
    with open_jsonl(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def shape_key(w: dict[str, Any]) -> str:
    return f"{w['op']} {'x'.join(map(str, w['shape']))}"


def kind_rows(recs: list[dict[str, Any]], keep: Keep) -> list[dict[str, Any]]:
    """Per shape: each kind's best time and config over the configs ``keep`` admits (a kind the
    grid lacks for the shape is absent), the kind holding the best config, and torch's time."""
    best: dict[str, dict[str, tuple[float, dict[str, Any]]]] = defaultdict(dict)
    torch_ms: dict[str, float] = {}
    for r in recs:
        w = r["workload"]
        key = shape_key(w)
        if r["impl"] == "torch":
            torch_ms[key] = r["time_ms"]
            continue
        if r["time_ms"] is None or not keep(w, r["config"]):
            continue
        for k in kinds_of(r["config"]):
            if k not in best[key] or r["time_ms"] < best[key][k][0]:
                best[key][k] = (r["time_ms"], r["config"])
    rows = []
    for key, b in best.items():
        winner = next(k for k in DISJOINT if k in b and b[k][0] == b["best"][0])
        rows.append({"workload": key, **{f"{k}_ms": b[k][0] for k in KINDS if k in b},
                     "configs": {k: b[k][1] for k in KINDS if k in b}, "best_kind": winner,
                     "torch_ms": torch_ms.get(key)})
    return rows


def speedup(rows: list[dict[str, Any]], fast: str, slow: str) -> dict[str, Any]:
    """Geomean of slow / fast over the shapes where both kinds were measured, with that count."""
    xs = [r[f"{slow}_ms"] / r[f"{fast}_ms"] for r in rows if f"{slow}_ms" in r and f"{fast}_ms" in r]
    return {"geomean": geomean(xs), "shapes": len(xs), "min": min(xs, default=math.nan), "max": max(xs, default=math.nan)}


def suspect_torch(runs: dict[str, list[dict[str, Any]]], factor: float = 2.0) -> dict[str, list[str]]:
    """Per run: shapes whose torch time is more than ``factor`` away from the median over all runs
    on the same device (needs at least three runs of that shape, so one outlier cannot set the median)."""
    times: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for name, recs in runs.items():
        for r in recs:
            if r["impl"] == "torch" and r["time_ms"]:
                times[(r.get("device", ""), shape_key(r["workload"]))][name] = r["time_ms"]
    out: dict[str, list[str]] = {name: [] for name in runs}
    for (_, key), per in times.items():
        if len(per) < 3:
            continue
        med = statistics.median(per.values())
        for name, t in per.items():
            if not 1 / factor <= t / med <= factor:
                out[name].append(f"{key} ({t:.4f} ms against a median of {med:.4f} ms over {len(per)} runs)")
    return out


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


def analyse(recs: list[dict[str, Any]], path: Path, suspect: list[str] | None = None) -> dict[str, Any]:
    meta = {k: recs[0].get(k) for k in ("gpu", "device", "cc", "mma", "triton", "torch", "alcop", "date")}
    meta["timer"] = TIMER
    rows = kind_rows(recs, RESTRICTIONS["whole grid"])
    suspect = list(suspect or [])
    # Within one run: a library time more than IMPLAUSIBLE x our best is far outside what cuBLAS/cuDNN
    # do on these shapes elsewhere; it is listed and left out of the geomean, which is also given with it.
    across = {s.split(" (")[0] for s in suspect}
    suspect += [f"{r['workload']} ({r['torch_ms']:.4f} ms, {r['torch_ms'] / r['best_ms']:.1f}x our best in this run)"
                for r in rows if r["torch_ms"] and r["torch_ms"] / r["best_ms"] > IMPLAUSIBLE
                and r["workload"] not in across]
    bad = {s.split(" (")[0] for s in suspect}
    vs_torch = [r["torch_ms"] / r["best_ms"] for r in rows if r["torch_ms"] and r["workload"] not in bad]
    vs_torch_all = [r["torch_ms"] / r["best_ms"] for r in rows if r["torch_ms"]]
    summary = {
        "shapes": len(rows), "records": sum(1 for r in recs if r["impl"] == "alcop"), "grid": grid_missing(path, recs),
        "failed_records": sum(1 for r in recs if r["impl"] == "alcop" and r["time_ms"] is None),
        "speedups": {f"{f}_over_{s}": speedup(rows, f, s) for f, s in COMPARISONS},
        "best_kind_counts": {k: sum(r["best_kind"] == k for r in rows) for k in DISJOINT},
        "best_vs_torch": geomean(vs_torch), "best_vs_torch_shapes": len(vs_torch), "suspect_torch": suspect,
        "best_vs_torch_all_shapes": geomean(vs_torch_all),
        "deepest_shared_stage_count": max(r["configs"]["best"]["num_stages"] for r in rows) if rows else None,
    }
    sensitivity = []
    for name, keep in RESTRICTIONS.items():
        sub = kind_rows(recs, keep)
        if sub:
            sensitivity.append({"grid": name, "shapes": len(sub),
                                **{f"{f}_over_{s}": speedup(sub, f, s)["geomean"] for f, s in COMPARISONS}})
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


def _x(v: float) -> str:
    return f"{v:.3f}x" if math.isfinite(v) else "-"


def _cfg(c: dict[str, Any]) -> str:
    return (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']} "
            f"r{c['REG_STAGES']}x{c['REG_SPLIT']} {c['ASYNC_COPY']}" + (" persistent" if c.get("PERSISTENT") else ""))


ROW_KINDS = ("one_stage", "double_buffer", "smem_only", "reg_only", "smem_and_reg", "persistent", "best")


def markdown(results: list[tuple[str, dict[str, Any]]], records: dict[str, list[dict[str, Any]]]) -> str:
    out = ["# Pipelining ablation on measured grids: the best config of each kind", "",
           "Produced by `benchmarks/report_pipeline.py` from the JSONL grids named below (each record: one "
           f"config on one shape, checked against torch). Timer: {TIMER}; every comparison is within one run.", "", "Kinds (each is its best config over the grid on a shape; tiles, "
           "TMA and the other knobs are open to every kind):", ""]
    out += [f"- **{k}**: {v}" for k, v in KINDS.items()]
    out += ["", "*A over B* = geomean over shapes of B's best time / A's best time (> 1: A is faster), over the "
            "shapes where the grid has both kinds. The register level on its own: *reg_only over one_stage* and "
            "*smem_and_reg over smem_only*.", "",
            "Reading the register level: Triton's backend already streams k=16 slices of the MMA operands "
            "from shared memory into registers one slice ahead (its prefetch pass on the mma.sync path; "
            "wgmma reads its operands from shared memory), which is ALCOP's register level done below the "
            "Triton program. The explicit register level written in the kernel body loads sub-tiles from "
            "global memory as loop-carried values, which takes them out of Triton's cp.async pipeline; the "
            "data below measure what that costs.", ""]
    out += ["## Summary", "", "| run | MMA path | measured / grid | smem_only over one_stage | "
            "reg_only over one_stage | smem_and_reg over smem_only | best over one_stage | "
            "best over double_buffer | shapes whose best is one_stage / smem_only / reg_only / smem_and_reg / "
            "persistent | best vs torch |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, res in results:
        m, s, g = res["meta"], res["summary"], res["summary"].get("grid")
        sp = s["speedups"]
        done = "not named" if not g else f"{g['pairs'] - g['missing']} / {g['pairs']}"
        counts = " / ".join(str(s["best_kind_counts"][k]) for k in DISJOINT)
        out.append(f"| {name} | {m['mma']} | {done} | {_x(sp['smem_only_over_one_stage']['geomean'])} | "
                   f"{_x(sp['reg_only_over_one_stage']['geomean'])} | {_x(sp['smem_and_reg_over_smem_only']['geomean'])} | "
                   f"{_x(sp['best_over_one_stage']['geomean'])} | {_x(sp['best_over_double_buffer']['geomean'])} | "
                   f"{counts} | {_x(s['best_vs_torch'])} ({s['best_vs_torch_shapes']} shapes) |")
    out.append("")
    pairs = [(x, y) for i, (x, rx) in enumerate(results) for y, ry in results[i + 1:]
             if rx["meta"]["mma"] == ry["meta"]["mma"] and rx["meta"]["device"] == ry["meta"]["device"]]
    if pairs:
        out += ["Run to run, same GPU model and MMA path (time ratio second / first over the pairs both runs "
                "measured). A kind's best is a minimum over many configs, so single-config outliers "
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
                "| speedup (geomean over shapes) | value | shapes | min | max |", "|---|---|---|---|---|"]
        for key, v in s["speedups"].items():
            out.append(f"| {key.replace('_over_', ' over ')} | **{_x(v['geomean'])}** | {v['shapes']} | "
                       f"{_x(v['min'])} | {_x(v['max'])} |")
        out += [f"| best vs torch (cuBLAS or cuDNN, same run) | {_x(s['best_vs_torch'])} | "
                f"{s['best_vs_torch_shapes']} | | |",
                f"| best vs torch, suspect torch times included | {_x(s['best_vs_torch_all_shapes'])} | "
                f"{s['shapes']} | | |", "",
                "The best config's kind: " + ", ".join(f"{k} on {s['best_kind_counts'][k]}" for k in DISJOINT)
                + f" of {s['shapes']} shapes; the deepest winning shared depth is {s['deepest_shared_stage_count']}. "
                f"{s['records']} configs measured"
                + (f"; the grid holds {s['grid']['pairs']}, " + (f"{s['grid']['missing']} of them missing (the run's time "
                   "budget cut it short: the grid's last tiles)" if s["grid"]["missing"] else "none missing")
                   if s.get("grid") else "") + f"; {s['failed_records']} failed.", ""]
        if s["suspect_torch"]:
            out += ["Suspect torch baselines (left out of *best vs torch*): " + "; ".join(s["suspect_torch"]) + ".", ""]
        out += ["Sensitivity to the grid (each kind's best over the configs a restriction keeps):", "",
                "| grid | shapes | " + " | ".join(f"{f} over {sl}" for f, sl in COMPARISONS) + " |",
                "|---|---|" + "---|" * len(COMPARISONS),
                *(f"| {g['grid']} | {g['shapes']} | " + " | ".join(_x(g[f"{f}_over_{sl}"]) for f, sl in COMPARISONS)
                  + " |" for g in res.get("sensitivity", [])), "",
                "| workload | " + " | ".join(f"{k} ms" for k in ROW_KINDS) + " | torch ms | best kind | best config |",
                "|---|" + "---|" * (len(ROW_KINDS) + 3)]
        for r in res["rows"]:
            cells = [f"{r[f'{k}_ms']:.4f}" if f"{k}_ms" in r else "-" for k in ROW_KINDS]
            torch_ms = f"{r['torch_ms']:.4f}" if r["torch_ms"] else "-"
            out.append(f"| {r['workload']} | " + " | ".join(cells) + f" | {torch_ms} | {r['best_kind']} | "
                       f"{_cfg(r['configs']['best'])} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True, help="path prefix for .md and .json")
    a = ap.parse_args(argv)
    records = {Path(f).name.split(".")[0]: read_records(Path(f)) for f in a.files}
    suspect = suspect_torch(records)
    results = [(name, analyse(recs, Path(f), suspect[name])) for (name, recs), f in zip(records.items(), a.files)]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({n: r for n, r in results}, indent=1))
    out.with_suffix(".md").write_text(markdown(results, records))
    for n, r in results:
        print(n, json.dumps(r["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
