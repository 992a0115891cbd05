"""Offline evaluation of the performance models on stored measurements.

    python benchmarks/eval_model.py --out report [--data 'benchmarks/data/*.jsonl'] [--gpu H100]

Per workload (all measured configs of it form its schedule space):

* best-in-top-k (k = 1, 5, 10, 50) of the analytical model and of the bottleneck baseline:
  best measured time / best measured time among the model's k top-ranked configs (a failed run
  in the top k contributes nothing; 0 if all k failed), as in ALCOP Fig. 12;
* the same for the analytical model with constants fitted on the *other* workloads
  (``--folds`` groups of workloads, leave-one-group-out; honest: no workload is scored with
  constants fitted on its own measurements);
* XGBoost pairwise ranking accuracy, leaving one workload out: pretrained on analytical labels of
  every workload (no measurement needed), updated with the other workloads' measurements (a seeded
  sample of at most 100 per workload, for run time), scored
  on pairs of the held-out workload's successful runs; pairs within 1% of each other are skipped.

Writes ``<out>.md`` and ``<out>.json``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from alcop_triton.model.analytical import bottleneck_estimate, estimate  # noqa: E402
from alcop_triton.model.data import Measurement, group_by_workload, load_jsonl  # noqa: E402
from alcop_triton.model.fit import fit_constants  # noqa: E402
from alcop_triton.model.hardware import GPUSpec, get_spec  # noqa: E402
from alcop_triton.records import Workload  # noqa: E402

KS = (1, 5, 10, 50)


def best_in_top_k(pred: Sequence[float], meas: Sequence[float | None], ks: Sequence[int] = KS) -> dict[int, float]:
    """best measured / best measured among the k lowest predictions (ties keep input order)."""
    t = np.array([x if x is not None else math.inf for x in meas], dtype=np.float64)
    best = t.min()
    order = np.argsort(np.asarray(pred, dtype=np.float64), kind="stable")
    out = {}
    for k in ks:
        top = t[order[:k]].min()
        out[k] = float(best / top) if math.isfinite(top) else 0.0
    return out


def _topk_for(groups: dict[Workload, list[Measurement]],
              predict: Callable[[Workload, Measurement], float]) -> dict[str, dict[int, float]]:
    return {wl.key(): best_in_top_k([predict(wl, m) for m in ms], [m.time_s for m in ms]) for wl, ms in groups.items()}


def _folds(keys: list[str], n_folds: int) -> list[list[str]]:
    order = sorted(keys)
    random.Random(0).shuffle(order)
    n = max(1, min(n_folds, len(order)))
    return [order[i::n] for i in range(n)]


def evaluate(measurements: list[Measurement], spec: GPUSpec, *, folds: int = 5, xgb: bool = True,
             pretrain_configs: int = 150, fit_records: int = 1500, nthread: int = 2,
             xgb_rounds: int = 30, train_per_workload: int = 100) -> dict[str, Any]:
    """All metrics as a JSON-able dict (see the module docstring)."""
    groups = {wl: ms for wl, ms in group_by_workload(measurements).items() if any(m.ok for m in ms)}
    if not groups:
        raise ValueError("no workload has a successful measurement")
    t0 = time.perf_counter()
    result: dict[str, Any] = {"gpu": spec.name, "spec_source": spec.source, "n_workloads": len(groups),
                              "n_records": sum(len(v) for v in groups.values()), "ks": list(KS)}
    per: dict[str, dict[str, Any]] = {wl.key(): {"n_configs": len(ms), "n_ok": sum(m.ok for m in ms)}
                                      for wl, ms in groups.items()}
    result["analytical"] = _topk_for(groups, lambda wl, m: estimate(wl, m.config, spec).time_s)
    result["bottleneck"] = _topk_for(groups, lambda wl, m: bottleneck_estimate(wl, m.config, spec))

    # Constants fitted on the other folds' workloads only.
    by_key = {wl.key(): wl for wl in groups}
    fitted: dict[str, dict[int, float]] = {}
    fitted_specs: list[dict[str, float]] = []
    if folds >= 2 and len(groups) >= 2:
        for held in _folds(list(by_key), folds):
            train = [m for k, wl in by_key.items() if k not in held for m in groups[wl]]
            fs = fit_constants(train, spec, max_records=fit_records)
            fitted_specs.append({k: getattr(fs, k) for k in ("compute_eff", "latency_scale", "iter_overhead_cycles",
                                                             "ptr_issue_cycles", "single_issuer_util", "launch_s", "l2_bw")})
            fitted.update(_topk_for({by_key[k]: groups[by_key[k]] for k in held},
                                    lambda wl, m, fs=fs: estimate(wl, m.config, fs).time_s))
        result["analytical_fitted"] = fitted
        result["fitted_constants"] = fitted_specs

    if xgb:
        from alcop_triton.model.xgb_model import XGBCostModel, pairwise_accuracy

        configs = sorted({m.config for ms in groups.values() for m in ms})
        if len(configs) > pretrain_configs:
            configs = sorted(random.Random(0).sample(configs, pretrain_configs))
        # Modest boosting keeps a CI run near a minute (every held-out workload refits).
        base = XGBCostModel(spec, nthread=nthread, n_estimators=2 * xgb_rounds,
                            update_rounds=xgb_rounds).pretrain(list(groups), configs)
        # A seeded sample of each workload's measurements for training: the ranking objective's
        # cost grows with group size, and 100 configs per workload carry the signal.
        rng = random.Random(0)
        train_sample = {w: rs if len(rs) <= train_per_workload else rng.sample(rs, train_per_workload)
                        for w, rs in groups.items()}
        acc: dict[str, float] = {}
        acc_pre: dict[str, float] = {}
        for wl, ms in groups.items():
            ok = [m for m in ms if m.ok]
            times = [m.time_s for m in ok]
            others = [m for w, rs in groups.items() if w != wl for m in train_sample[w]]
            model = base.copy().update(others) if others else base
            acc[wl.key()] = pairwise_accuracy(model.predict(wl, [m.config for m in ok]), times)
            acc_pre[wl.key()] = pairwise_accuracy(base.predict(wl, [m.config for m in ok]), times)
        result["xgb_pairwise"] = acc
        result["xgb_pretrained_only_pairwise"] = acc_pre
    result["analytical_pairwise"] = {
        wl.key(): _pairwise_analytical(wl, ms, spec) for wl, ms in groups.items()}

    def mean(d: dict[str, float]) -> float:
        vals = [v for v in d.values() if not math.isnan(v)]
        return float(np.mean(vals)) if vals else float("nan")

    summary: dict[str, Any] = {}
    for name in ("analytical", "bottleneck", "analytical_fitted"):
        if name in result:
            summary[name] = {f"top{k}": mean({w: v[k] for w, v in result[name].items()}) for k in KS}
    for name in ("xgb_pairwise", "xgb_pretrained_only_pairwise", "analytical_pairwise"):
        if name in result:
            summary[name] = mean(result[name])
    result["summary"] = summary
    result["per_workload"] = per
    result["seconds"] = time.perf_counter() - t0
    return result


def _pairwise_analytical(wl: Workload, ms: list[Measurement], spec: GPUSpec) -> float:
    from alcop_triton.model.xgb_model import pairwise_accuracy

    ok = [m for m in ms if m.ok]
    return pairwise_accuracy([-estimate(wl, m.config, spec).time_s for m in ok], [m.time_s for m in ok])


def to_markdown(r: dict[str, Any]) -> str:
    """The report as a markdown document."""
    s = r["summary"]
    lines = [f"# Performance model evaluation ({r['gpu']})", "",
             f"{r['n_workloads']} workloads, {r['n_records']} records; spec: {r['spec_source']}; "
             f"{r['seconds']:.1f} s.", "",
             "## Best-in-top-k (mean over workloads, 1.0 = exhaustive-search best)", "",
             "| model | " + " | ".join(f"top-{k}" for k in KS) + " |", "|---|" + "---|" * len(KS)]
    for name in ("analytical", "analytical_fitted", "bottleneck"):
        if name in s:
            lines.append(f"| {name} | " + " | ".join(f"{s[name][f'top{k}']:.3f}" for k in KS) + " |")
    lines += ["", "## Pairwise ranking accuracy (pairs within 1% skipped)", ""]
    for name, label in (("analytical_pairwise", "analytical model"),
                        ("xgb_pretrained_only_pairwise", "XGBoost, analytical pretraining only"),
                        ("xgb_pairwise", "XGBoost, leave-one-workload-out")):
        if name in s:
            lines.append(f"- {label}: {s[name]:.3f}")
    lines += ["", "## Per workload", "",
              "| workload | configs | ok | anal top-1 | anal top-10 | bottleneck top-10 | xgb pairwise |",
              "|---|---|---|---|---|---|---|"]
    for key, p in r["per_workload"].items():
        xg = r.get("xgb_pairwise", {}).get(key, float("nan"))
        lines.append(f"| {key} | {p['n_configs']} | {p['n_ok']} | {r['analytical'][key]['1']:.3f} | "
                     f"{r['analytical'][key]['10']:.3f} | {r['bottleneck'][key]['10']:.3f} | {xg:.3f} |")
    return "\n".join(lines) + "\n"


def _jsonable(r: dict[str, Any]) -> dict[str, Any]:
    """JSON keys must be strings: top-k dicts are keyed by k."""
    return json.loads(json.dumps(r, default=float, allow_nan=True), object_pairs_hook=dict)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["benchmarks/data/*.jsonl"], help="jsonl files or globs")
    ap.add_argument("--out", required=True, help="output path prefix: writes <out>.md and <out>.json")
    ap.add_argument("--gpu", default="H100", help="spec to evaluate with; records of other GPUs are skipped")
    ap.add_argument("--mma", choices=["wgmma", "mma_sync"], default=None,
                    help="MMA path the data was measured with (default: the GPU's); other records are skipped")
    ap.add_argument("--folds", type=int, default=5, help="workload folds for fitted constants (< 2: skip)")
    ap.add_argument("--no-xgb", action="store_true", help="skip the XGBoost evaluation")
    ap.add_argument("--nthread", type=int, default=2)
    ap.add_argument("--xgb-rounds", type=int, default=30, help="boosting rounds per leave-one-out update")
    args = ap.parse_args(argv)
    paths = sorted({p for pattern in args.data for p in glob.glob(pattern)})
    if not paths:
        print(f"eval_model: no data files match {args.data}", file=sys.stderr)
        return 2
    spec = get_spec(args.gpu, mma=args.mma, use_calibration=False)  # presets: no dependence on a local cache
    ms = [m for m in load_jsonl(paths)
          if (m.gpu is None or get_spec(m.gpu, use_calibration=False).name == spec.name)
          and (m.mma is None or m.mma == spec.mma)]
    r = _jsonable(evaluate(ms, spec, folds=args.folds, xgb=not args.no_xgb, nthread=args.nthread,
                             xgb_rounds=args.xgb_rounds))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(r, indent=2, sort_keys=True))
    Path(f"{out}.md").write_text(to_markdown(r))
    print(to_markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
