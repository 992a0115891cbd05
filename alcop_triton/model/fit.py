"""Fit the analytical model's efficiency constants to measurements.

The hardware rates of a ``GPUSpec`` come from datasheets or ``calibrate``; what they cannot give is
how Triton-generated code uses them (attainable fraction of tensor-core peak, per-iteration
overhead, how much loaded latency exceeds unloaded latency, ...). ``fit_constants`` searches those
few constants by coordinate descent over multiplicative grids, minimising the squared log error
of predicted vs measured time, mostly after removing each workload's mean (ranking within a
workload is what tuning needs) plus a smaller uncentred part (so absolute times stay sensible).

As a script, the fit data and the fit are reproducible from the repository::

    python -m alcop_triton.model.fit derive --out benchmarks/data/h100_wgmma_fit.jsonl.gz
    python -m alcop_triton.model.fit fit benchmarks/data/h100_wgmma_fit.jsonl.gz --out OUT

``derive`` draws the fit set from the committed H100 wgmma measurements (``FIT_SOURCES``): plain Triton kernels (no
register prefetch, not persistent) of ``FIT_SHAPES`` matmul shapes, a seeded sample of at most
``FIT_RECORDS`` successful records. (The ~7000 timings the preset constants were first fitted to
were not kept; this set is drawn to match their description: fp16 matmuls on an H100, 15 shapes,
all tiles and stages.) ``fit`` fits the constants to a file and writes them beside the presets
with the loss of each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .analytical import estimate
from ..records import open_jsonl
from .data import Measurement, load_jsonl
from .hardware import GPUSpec, get_spec

# The constants searched, with the range each may take (why: outside these the constant stops
# meaning what its name says, e.g. an efficiency above 1).
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_eff": (0.3, 1.0),
    "latency_scale": (0.5, 8.0),
    "iter_overhead_cycles": (0.0, 600.0),
    "ptr_issue_cycles": (0.0, 64.0),
    "single_issuer_util": (0.4, 1.0),
    "launch_s": (0.0, 20e-6),
    "l2_bw": (1e12, 40e12),
}
_STEPS = ((0.5, 0.7, 0.85, 1.0, 1.2, 1.4, 2.0), (0.8, 0.9, 1.0, 1.1, 1.25), (0.93, 1.0, 1.07))
_CENTRED_WEIGHT = 0.8


def fit_loss(ms: Sequence[Measurement], spec: GPUSpec) -> float:
    """Squared log error of the model on successful measurements (lower is better).

    A measured config that the model calls invalid costs a fixed penalty, so the search cannot
    improve the loss by declaring configs impossible.
    """
    groups: dict[object, list[float]] = {}
    penalty = 0.0
    for m in ms:
        measured = m.time_s if m.ok else None
        if measured is None:
            continue
        t = estimate(m.workload, m.config, spec).time_s
        if not math.isfinite(t):
            penalty += 1.0
            continue
        groups.setdefault(m.workload, []).append(math.log(t / measured))
    n = sum(len(g) for g in groups.values())
    if n == 0:
        return math.inf
    centred = sum(float(((np.array(g) - np.mean(g)) ** 2).sum()) for g in groups.values())
    raw = sum(float((np.array(g) ** 2).sum()) for g in groups.values())
    return (_CENTRED_WEIGHT * centred + (1 - _CENTRED_WEIGHT) * raw + penalty) / (n + penalty)


def fit_constants(records: Sequence[Measurement], spec: GPUSpec, *, max_records: int = 1500,
                  seed: int = 0, params: Sequence[str] | None = None) -> GPUSpec:
    """A copy of ``spec`` with the efficiency constants fitted to ``records``.

    Uses at most ``max_records`` successful measurements (a seeded sample, to bound the run time:
    each loss evaluation runs the model on every record). ``params`` limits which constants of
    ``FIT_BOUNDS`` move. Deterministic for a given seed.
    """
    ok = [m for m in records if m.ok]
    if not ok:
        raise ValueError("fit_constants: no successful measurements to fit")
    if len(ok) > max_records:
        ok = random.Random(seed).sample(ok, max_records)
    names = list(params) if params is not None else list(FIT_BOUNDS)
    unknown = set(names) - set(FIT_BOUNDS)
    if unknown:
        raise ValueError(f"fit_constants: cannot fit {sorted(unknown)}; fittable: {sorted(FIT_BOUNDS)}")
    best, best_loss = spec, fit_loss(ok, spec)
    for steps in _STEPS:
        for name in names:
            lo, hi = FIT_BOUNDS[name]
            cur = getattr(best, name)
            base = cur if cur > 0 else (hi - lo) / 10   # a zero constant can still grow
            for f in steps:
                v = min(hi, max(lo, base * f))
                if v == cur:
                    continue
                cand = best.replace(**{name: v})
                loss = fit_loss(ok, cand)
                if loss < best_loss - 1e-12:
                    best, best_loss = cand, loss
    return best.replace(source=f"{spec.source}+fitted({len(ok)} records)")


FIT_SOURCES = ("benchmarks/data/h100_wgmma_dense_bmm.jsonl", "benchmarks/data/h100_wgmma_ablation.jsonl.gz",
               "benchmarks/data/h100_wgmma_alcop_space.jsonl.gz")
FIT_SHAPES = 15
FIT_RECORDS = 7000


def derive_fit_set(sources: Sequence[str | Path], *, shapes: int = FIT_SHAPES, records: int = FIT_RECORDS,
                   seed: int = 0) -> list[dict[str, Any]]:
    """The fit set as JSON records (see the module docstring): plain Triton configs of a seeded
    choice of ``shapes`` matmul shapes, a seeded sample of at most ``records`` successful runs
    (a config timed in several runs may enter once per run)."""
    recs = []
    for source in sources:
        with open_jsonl(source) as f:
            recs += [json.loads(line) for line in f if line.strip()]
    plain = [r for r in recs if r.get("config") and r["workload"]["op"] == "matmul" and r.get("time_ms")
             and r["config"]["REG_STAGES"] == 1 and not r["config"].get("PERSISTENT", False)]
    keys = sorted({tuple(r["workload"]["shape"]) for r in plain})
    rng = random.Random(seed)
    chosen = set(rng.sample(keys, min(shapes, len(keys))))
    pool = [r for r in plain if tuple(r["workload"]["shape"]) in chosen]
    return sorted(rng.sample(pool, min(records, len(pool))),
                  key=lambda r: (r["workload"]["shape"], json.dumps(r["config"], sort_keys=True)))


def fit_report(ms: Sequence[Measurement], spec: GPUSpec, *, max_records: int) -> dict[str, Any]:
    """The fitted constants beside ``spec``'s, with the loss of each on ``ms``."""
    fitted = fit_constants(ms, spec, max_records=max_records)
    return {"gpu": spec.name, "records": sum(m.ok for m in ms), "workloads": len({m.workload for m in ms}),
            "max_records": max_records, "loss_preset": fit_loss(ms, spec), "loss_fitted": fit_loss(ms, fitted),
            "constants": {k: {"preset": getattr(spec, k), "fitted": getattr(fitted, k)} for k in FIT_BOUNDS}}


def _markdown(r: dict[str, Any], data: str) -> str:
    lines = [f"# Analytical model constants fitted to measurements ({r['gpu']})", "",
             f"Produced by `python -m alcop_triton.model.fit fit {data}`: {r['records']} successful timings of "
             f"{r['workloads']} workloads (a seeded sample of at most {r['max_records']} enters each loss). Loss: "
             "squared log error of predicted against measured time, mostly centred per workload (ranking), "
             "on all the file's records.", "",
             f"Loss with the preset constants {r['loss_preset']:.4f}, with the fitted ones {r['loss_fitted']:.4f}.", "",
             "| constant | preset | fitted | allowed range |", "|---|---|---|---|"]
    for k, v in r["constants"].items():
        lo, hi = FIT_BOUNDS[k]
        lines.append(f"| {k} | {v['preset']:.4g} | {v['fitted']:.4g} | {lo:.4g}-{hi:.4g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m alcop_triton.model.fit", description="the analytical constants' fit")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("derive", help="draw the fit set from committed measurements")
    d.add_argument("--source", nargs="+", default=list(FIT_SOURCES))
    d.add_argument("--out", required=True, help="a .jsonl or .jsonl.gz file")
    d.add_argument("--shapes", type=int, default=FIT_SHAPES)
    d.add_argument("--records", type=int, default=FIT_RECORDS)
    f = sub.add_parser("fit", help="fit the constants to measurement files; writes <out>.md and <out>.json")
    f.add_argument("data", nargs="+")
    f.add_argument("--out", required=True)
    f.add_argument("--gpu", default="H100")
    f.add_argument("--max-records", type=int, default=1500)
    a = ap.parse_args(argv)
    if a.cmd == "derive":
        recs = derive_fit_set(a.source, shapes=a.shapes, records=a.records)
        text = "".join(json.dumps(r) + "\n" for r in recs)
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.name.endswith(".gz"):
            with gzip.GzipFile(out, "wb", mtime=0) as g:   # mtime 0: the same data gives the same bytes
                g.write(text.encode())
        else:
            out.write_text(text)
        print(f"{len(recs)} records of {len({tuple(r['workload']['shape']) for r in recs})} shapes -> {out}")
        return 0
    spec = get_spec(a.gpu, use_calibration=False)
    ms = [m for m in load_jsonl(a.data) if m.mma in (None, spec.mma)]
    if not ms:
        print(f"fit: no records of the {spec.mma} path in {a.data}", file=sys.stderr)
        return 2
    r = fit_report(ms, spec, max_records=a.max_records)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(r, indent=1))
    Path(f"{out}.md").write_text(_markdown(r, " ".join(a.data)))
    print(_markdown(r, " ".join(a.data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
