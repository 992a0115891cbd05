"""How much faster than the shipped table's configs 50-trial tuning gets, measured in one run on one GPU.

    alcop-tune tune matmul 4096x64x4096 3136x512x512 ... --layout nt --trials 50 --db DB
    alcop-tune tune bmm 12x1024x64x1024 ... --layout nt --trials 50 --db DB
    alcop-tune export --db DB --format jsonl --all -o OUT/tuned.jsonl
    python benchmarks/table_headroom.py OUT/tuned.jsonl --out OUT [--table alcop_triton/data/default_h100.jsonl]

The tuner measures the shipped table's configs of a workload before its own (they are among its seeds:
what dispatch picks, then the transfer candidates), so the export holds both, timed in one run by one
timer (the tuner's ``autotune.measure.time_gpu``). Per workload the report gives the shipped table's
best time as shipped (another run), the shipped configs' best and the tuned best in this run, and
headroom = shipped configs' best / tuned best, both from this run (1.0: tuning found nothing faster).
torch's time comes from the shipped table (the run that measured it) and is context, not a ratio of
this run. Writes OUT/table_headroom.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # alcop_triton from this checkout when run as a script

from alcop_triton.records import geomean, open_jsonl  # noqa: E402

DEFAULT_TABLE = ROOT / "alcop_triton" / "data" / "default_h100.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    with open_jsonl(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _key(d: dict[str, Any]) -> str:
    w = d["workload"]
    return f"{w['op']} {'x'.join(map(str, w['shape']))} {w['dtype']} {w.get('layout') or ''}".strip()


def _config(d: dict[str, Any]) -> str:
    return json.dumps(d["config"], sort_keys=True)


def _timed(d: dict[str, Any]) -> bool:
    t = d.get("time_ms")
    return d.get("error") is None and isinstance(t, (int, float)) and math.isfinite(t) and t > 0


def headroom(tuned: list[dict[str, Any]], table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per workload of ``tuned`` that the table also holds (see the module docstring)."""
    shipped: dict[str, list[dict[str, Any]]] = {}
    torch_ms: dict[str, float] = {}
    for d in table:
        if not _timed(d):
            continue
        if d.get("impl") == "torch":
            torch_ms[_key(d)] = float(d["time_ms"])
        else:
            shipped.setdefault(_key(d), []).append(d)
    runs: dict[str, list[dict[str, Any]]] = {}
    for d in tuned:
        runs.setdefault(_key(d), []).append(d)
    rows = []
    for key, recs in runs.items():
        if key not in shipped:
            continue
        configs = {_config(d) for d in shipped[key]}
        ok = [d for d in recs if _timed(d)]
        seeds = [d for d in ok if _config(d) in configs]
        if not seeds:   # the tuner did not re-measure a shipped config: no same-run comparison
            continue
        best_seed = min(seeds, key=lambda d: d["time_ms"])
        best = min(ok, key=lambda d: d["time_ms"])
        rows.append({"workload": key, "trials": len(recs), "failed": len(recs) - len(ok),
                     "shipped_ms": min(d["time_ms"] for d in shipped[key]),
                     "shipped_configs_ms": best_seed["time_ms"], "tuned_ms": best["time_ms"],
                     "headroom": best_seed["time_ms"] / best["time_ms"],
                     "tuned_config": best["config"], "torch_ms_shipped": torch_ms.get(key),
                     "device": best.get("device"), "date": best.get("date"), "timer": best.get("timer")})
    return rows


def markdown(rows: list[dict[str, Any]], source: str) -> str:
    meta = rows[0] if rows else {}
    out = ["# Headroom of the shipped table over 50-trial tuning", "",
           f"Produced by `benchmarks/table_headroom.py` from `{source}` (`alcop-tune tune ... --trials 50`, "
           f"exported with `alcop-tune export --all`): {meta.get('device')}, {meta.get('date')}, timer "
           f"`{meta.get('timer')}` (the tuner's: CUDA graphs over rotating input copies).", "",
           "shipped = the table's best time as shipped (its own run); shipped configs / tuned = the best of the "
           "table's configs and the best of all trials, both in this run; headroom = their ratio. torch = the "
           "table's torch time (its run; context only).", "",
           "| workload | trials (failed) | shipped | shipped configs | tuned | headroom | torch (table) |",
           "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: -r["headroom"]):
        t = f"{r['torch_ms_shipped'] * 1e3:.1f} µs" if r["torch_ms_shipped"] else "-"
        out.append(f"| {r['workload']} | {r['trials']} ({r['failed']}) | {r['shipped_ms'] * 1e3:.1f} µs | "
                   f"{r['shipped_configs_ms'] * 1e3:.1f} µs | {r['tuned_ms'] * 1e3:.1f} µs | {r['headroom']:.3f}x | {t} |")
    if rows:
        hs = [r["headroom"] for r in rows]
        out += ["", f"Headroom over {len(rows)} workloads: geomean {geomean(hs):.3f}x, max {max(hs):.3f}x."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tuned", type=Path, help="alcop-tune export --format jsonl --all (.jsonl or .jsonl.gz)")
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE, help="the shipped table to compare with")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    rows = headroom(_lines(a.tuned), _lines(a.table))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "table_headroom.json").write_text(json.dumps({"source": a.tuned.name, "rows": rows}, indent=1) + "\n")
    (a.out / "table_headroom.md").write_text(markdown(rows, a.tuned.name))
    print(markdown(rows, a.tuned.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
