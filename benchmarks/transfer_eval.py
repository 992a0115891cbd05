"""Offline check of how untuned shapes get their config: leave one shape out of a measured grid.

    python benchmarks/transfer_eval.py benchmarks/results/headline/ablation/h100_wgmma_alcop_space.jsonl.gz \
        --out benchmarks/results/transfer_eval/transfer_eval [--keep 18]

For each workload of the grid, every record of it is hidden and ``dispatch.transfer`` picks a config
from the other workloads' records, as it would for a shape the tables never measured. The pick is
scored with the hidden workload's own measurement of that config: best measured time / its time
(1.0 = the best config of the grid), and torch's time / its time. ``--keep N`` keeps only each
neighbour's N fastest configs, as in a shipped table (tuning stores its best trials, not a grid). A
pick the grid never measured on the hidden workload is counted and left out of the geomeans.
Writes ``<out>.md`` and ``<out>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from alcop_triton.autotune.database import TuningRecord, current_version_group, rank_configs, read_jsonl  # noqa: E402
from alcop_triton.autotune.dispatch import transfer  # noqa: E402
from alcop_triton.model.hardware import get_spec  # noqa: E402
from alcop_triton.records import Workload, geomean  # noqa: E402


def evaluate(records: list[TuningRecord], spec: Any, keep: int | None) -> dict[str, Any]:
    by_wl: dict[Workload, list[TuningRecord]] = {}
    for r in records:
        by_wl.setdefault(r.workload, []).append(r)
    kept = {w: rank_configs(current_version_group(rs))[:keep] if keep else rs for w, rs in by_wl.items()}
    kept_records = {w: [r for r in rs if not keep or any(r.config == k.config for k in kept[w])] for w, rs in by_wl.items()}
    rows = []
    for w, rs in by_wl.items():
        times = {r.config: r.time_ms for r in rs if r.ok and r.time_ms}
        if not times:
            continue
        others = [r for x, xs in kept_records.items() if x != w for r in xs]
        picked = transfer(w, others, spec)
        if picked is None:
            continue
        config, detail = picked
        t, best = times.get(config), min(times.values())
        torch_ms = next((r.torch_ms for r in rs if r.torch_ms), None)   # the grid's impl=torch line
        rows.append({"workload": w.key(), "config": str(config), "detail": detail, "ms": t, "best_ms": best,
                     "of_best": best / t if t else None, "vs_torch": torch_ms / t if t and torch_ms else None})
    scored = [r for r in rows if r["of_best"]]
    return {"keep": keep, "workloads": len(rows), "unmeasured_picks": len(rows) - len(scored),
            "of_best_geomean": geomean([r["of_best"] for r in scored]) if scored else None,
            "of_best_min": min((r["of_best"] for r in scored), default=None),
            "vs_torch_geomean": geomean([r["vs_torch"] for r in scored if r["vs_torch"]]) if scored else None,
            "rows": rows}


def markdown(src: str, gpu: str, results: list[dict[str, Any]]) -> str:
    out = ["# Configs for untuned shapes, left one shape out", "",
           f"Produced by `benchmarks/transfer_eval.py` from `{src}` (GPU {gpu}); no device is used: every time is "
           "the grid's own measurement (its timer is the grid's). Score of a pick: the hidden workload's best "
           "measured time / the pick's measured time.", "",
           "| neighbours keep | workloads | pick / best (geomean) | min | pick vs torch (geomean) | picks not in the grid |",
           "|---|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {r['keep'] or 'every measured config'} | {r['workloads']} | {r['of_best_geomean']:.3f} | "
                   f"{r['of_best_min']:.3f} | {r['vs_torch_geomean']:.3f}x | {r['unmeasured_picks']} |")
    worst = sorted((x for x in results[0]["rows"] if x["of_best"]), key=lambda x: x["of_best"])[:8]
    out += ["", f"Weakest picks ({results[0]['keep'] or 'every measured config'} kept):", "",
            "| workload | pick | pick / best |", "|---|---|---|"]
    out += [f"| {x['workload']} | {x['config']} | {x['of_best']:.3f} |" for x in worst]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grid", help="a measured grid (jsonl, optionally .gz), torch's times as impl=torch lines")
    ap.add_argument("--out", required=True, help="output path prefix: writes <out>.md and <out>.json")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--keep", type=int, nargs="*", default=[0, 18],
                    help="neighbour configs kept per workload (0: all measured)")
    a = ap.parse_args(argv)
    path = Path(a.grid)
    spec = get_spec(a.gpu)
    records = read_jsonl(path)
    results = [evaluate(records, spec, k or None) for k in a.keep]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"grid": str(path), "gpu": a.gpu, "results": results}, indent=1))
    out.with_suffix(".md").write_text(markdown(str(path), a.gpu, results))
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
