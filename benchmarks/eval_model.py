"""Offline evaluation of the performance models on stored measurements.

    python benchmarks/eval_model.py --out report [--data 'benchmarks/data/*.jsonl'] [--gpu H100]

Per workload (all measured configs of it form its schedule space):

* best-in-top-k (k = 1, 5, 10, 50): best measured time / best measured time among a model's k
  top-ranked configs (a failed run in the top k contributes nothing; 0 if all k failed), as in
  ALCOP Fig. 12, side by side for
  - random choice: the expected value of k configs drawn uniformly without replacement,
    computed exactly (``random_top_k``), not sampled; its pairwise accuracy is 0.5 by definition;
  - the bottleneck baseline and the analytical model alone;
  - XGBoost alone: trained only on the other workloads' measurements (leave one workload out;
    its features include the analytical model's terms, but no pseudo-label);
  - analytical + XGBoost, as the tuner starts a new workload: pretrained on analytical
    pseudo-labels (every workload, no measurement) and updated with the other workloads'
    measurements (leave one workload out);
* the same for the analytical model with constants fitted on the *other* workloads
  (``--folds`` groups of workloads, leave-one-group-out; honest: no workload is scored with
  constants fitted on its own measurements);
* pairwise ranking accuracy: over all pairs of the workload's successful runs whose measured
  times differ by more than the tolerance (relative to the faster one), the share the model orders
  as measured (higher score = faster). Headline tolerance 1% (pairs within 1% are measurement
  noise and skipped); also reported at 0% (every pair with distinct times) and 5%. Workloads are
  weighted equally in the means. Computed for
  - the analytical model (order of predicted times);
  - XGBoost, leave-one-workload-out: for each workload, a fresh model trained only on the
    measurements of the *other* workloads (the transfer setting: no measurement of the held-out
    workload, and no analytical pseudo-label either, is used to train it), scored on the held-out
    workload's runs;
  - XGBoost trained on analytical pseudo-labels only (``pretrain`` over a seeded sample of
    ``pretrain_configs`` configs on every workload): how much of the ranking the pretraining
    alone carries.

Only records of the spec's MMA path are evaluated (``--mma``; the GPU's default path otherwise).

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


def random_top_k(meas: Sequence[float | None], ks: Sequence[int] = KS) -> dict[int, float]:
    """Expected best-in-top-k of k configs drawn uniformly without replacement, exactly.

    With the n times sorted ascending (failures last, worth 0), the i-th fastest (1-based) is the
    fastest of the draw with probability C(n - i, k - 1) / C(n, k)."""
    t = sorted(x if x is not None else math.inf for x in meas)
    n, best = len(t), t[0]
    out: dict[int, float] = {}
    for k in ks:
        kk = min(k, n)
        if not math.isfinite(best):
            out[k] = 0.0
            continue
        ways = sum(math.comb(n - i, kk - 1) * (best / t[i - 1]) for i in range(1, n - kk + 2) if math.isfinite(t[i - 1]))
        out[k] = float(ways / math.comb(n, kk))
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
             pretrain_configs: int = 150, fit_records: int = 800, nthread: int = 2,
             xgb_rounds: int = 60, train_per_workload: int = 0,
             xgb_held_out: Sequence[str] | None = None) -> dict[str, Any]:
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
    result["random"] = {wl.key(): random_top_k([m.time_s for m in ms]) for wl, ms in groups.items()}

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
        from alcop_triton.model.xgb_model import XGBCostModel

        def held_out(wl: Workload, ms: list[Measurement], model: Any) -> tuple[dict[int, float], dict[str, float]]:
            """Best-in-top-k over all the workload's configs and pairwise accuracy over its successful ones."""
            scores = model.predict(wl, [m.config for m in ms])
            ok = [i for i, m in enumerate(ms) if m.ok]
            return (best_in_top_k(-scores, [m.time_s for m in ms]),
                    _pairwise_all(scores[ok], [ms[i].time_s for i in ok]))

        # Leave one workload out. Every fold starts from the same model (blank, or pretrained on
        # analytical pseudo-labels), whose feature cache (shared by copy(), keyed by workload and
        # config) featurizes each record once.
        rng = random.Random(0)
        train_sample = {w: rs if not train_per_workload or len(rs) <= train_per_workload
                        else rng.sample(rs, train_per_workload) for w, rs in groups.items()}
        configs = sorted({m.config for ms in groups.values() for m in ms})
        if len(configs) > pretrain_configs:
            configs = sorted(random.Random(0).sample(configs, pretrain_configs))
        blank = XGBCostModel(spec, nthread=nthread, n_estimators=xgb_rounds)
        pre = XGBCostModel(spec, nthread=nthread, n_estimators=xgb_rounds).pretrain(list(groups), configs)
        for name, start in (("xgb", blank), ("analytical_xgb", pre)):
            topk: dict[str, dict[int, float]] = {}
            acc: dict[str, dict[str, float]] = {}
            for wl, ms in groups.items():
                if xgb_held_out is not None and wl.key() not in xgb_held_out:
                    continue   # (tests) score only these workloads; every model still trains on all others
                others = [m for w, rs in groups.items() if w != wl for m in train_sample[w]]
                if len(others) >= 2:
                    topk[wl.key()], acc[wl.key()] = held_out(wl, ms, start.copy().update(others))
            result[name] = topk
            _store_pairwise(result, f"{name}_pairwise", acc)
        scored = {wl.key(): held_out(wl, ms, pre) for wl, ms in groups.items()}
        result["xgb_pretrained_only"] = {k: v[0] for k, v in scored.items()}
        _store_pairwise(result, "xgb_pretrained_only_pairwise", {k: v[1] for k, v in scored.items()})
    _store_pairwise(result, "analytical_pairwise", {wl.key(): _pairwise_analytical(wl, ms, spec)
                                                    for wl, ms in groups.items()})

    def mean(d: dict[str, float]) -> float:
        vals = [v for v in d.values() if not math.isnan(v)]
        return float(np.mean(vals)) if vals else float("nan")

    summary: dict[str, Any] = {}
    for name in TOPK_MODELS:
        if name in result:
            summary[name] = {f"top{k}": mean({w: v[k] for w, v in result[name].items()}) for k in KS}
    for name in ("xgb_pairwise", "analytical_xgb_pairwise", "xgb_pretrained_only_pairwise", "analytical_pairwise"):
        if name in result:
            summary[name] = mean(result[name])
            for tag in TOL_TAGS:
                summary[f"{name}_{tag}"] = mean(result[f"{name}_{tag}"])
    result["summary"] = summary
    result["per_workload"] = per
    result["pairwise_tolerances"] = {tag: tol for tag, tol in zip(TOL_TAGS, TOLS)}
    result["headline_tolerance"] = HEADLINE_TOL
    result["seconds"] = time.perf_counter() - t0
    return result


# The models scored by best-in-top-k, in the order the report shows them, with their labels.
TOPK_MODELS: dict[str, str] = {
    "random": "random choice (expected value, exact)",
    "bottleneck": "bottleneck baseline",
    "analytical": "analytical model alone (preset constants)",
    "analytical_fitted": "analytical, constants fitted on the other workloads",
    "xgb_pretrained_only": "XGBoost on analytical pseudo-labels only",
    "xgb": "XGBoost alone (other workloads' measurements)",
    "analytical_xgb": "analytical + XGBoost (pretrained, then the other workloads' measurements)",
}
PAIRWISE_OF = {"analytical": "analytical_pairwise", "xgb_pretrained_only": "xgb_pretrained_only_pairwise",
               "xgb": "xgb_pairwise", "analytical_xgb": "analytical_xgb_pairwise"}

# Pairwise accuracy tolerances: the headline (1%) is stored as "<metric>", the others as
# "<metric>_<tag>" (per workload and in the summary).
HEADLINE_TOL = 0.01
TOLS = (0.0, 0.05)
TOL_TAGS = ("all_pairs", "tol5pct")


def _pairwise_all(scores: Sequence[float], times: Sequence[float]) -> dict[str, float]:
    from alcop_triton.model.xgb_model import pairwise_accuracy

    out = {"headline": pairwise_accuracy(scores, times, HEADLINE_TOL)}
    out.update({tag: pairwise_accuracy(scores, times, tol) for tag, tol in zip(TOL_TAGS, TOLS)})
    return out


def _store_pairwise(result: dict[str, Any], name: str, acc: dict[str, dict[str, float]]) -> None:
    result[name] = {k: v["headline"] for k, v in acc.items()}
    for tag in TOL_TAGS:
        result[f"{name}_{tag}"] = {k: v[tag] for k, v in acc.items()}


def _pairwise_analytical(wl: Workload, ms: list[Measurement], spec: GPUSpec) -> dict[str, float]:
    ok = [m for m in ms if m.ok]
    return _pairwise_all([-estimate(wl, m.config, spec).time_s for m in ok], [m.time_s for m in ok])


def to_markdown(r: dict[str, Any]) -> str:
    """The report as a markdown document."""
    s = r["summary"]
    lines = [f"# Performance model evaluation ({r['gpu']})", "",
             f"{r['n_workloads']} workloads, {r['n_records']} records; spec: {r['spec_source']}; "
             f"{r['seconds']:.1f} s. Produced by `benchmarks/eval_model.py`" + (f" from {', '.join(r['data'])}"
                                                                                if r.get("data") else "") + "."
             + (" Settings: " + ", ".join(f"{k} {v}" for k, v in r["settings"].items()) + "." if r.get("settings") else ""),
             "",
             "## Models side by side (mean over workloads)", "",
             "Best-in-top-k: the best measured time over the best measured time among the model's k top-ranked "
             "configs (1.0 = the exhaustive-search best). Pairwise: share of a workload's pairs of successful "
             "configs ordered as measured (pairs within 1% skipped as noise). Held out by workload: no model "
             "is scored on a workload whose measurements it was trained or fitted on; random choice is the "
             "exact expected value.", "",
             "| model | " + " | ".join(f"top-{k}" for k in KS) + " | pairwise (1%) |", "|---|" + "---|" * (len(KS) + 1)]
    for name, label in TOPK_MODELS.items():
        if name in s:
            pw = s.get(PAIRWISE_OF.get(name, ""), 0.5 if name == "random" else None)
            lines.append(f"| {label} | " + " | ".join(f"{s[name][f'top{k}']:.3f}" for k in KS)
                         + (f" | {pw:.3f} |" if pw is not None else " | - |"))
    lines += ["", "## Pairwise ranking accuracy at other tolerances (mean over workloads)", "",
              "| model | 1% (headline) | all pairs | 5% |", "|---|---|---|---|"]
    for name, key in PAIRWISE_OF.items():
        if key in s:
            lines.append(f"| {TOPK_MODELS[name]} | {s[key]:.3f} | {s[f'{key}_all_pairs']:.3f} | {s[f'{key}_tol5pct']:.3f} |")
    lines += ["", "## Per workload", "",
              "| workload | configs | ok | random top-10 | anal top-1 | anal top-10 | xgb top-10 | anal+xgb top-10 | "
              "anal pairwise | xgb pairwise | anal+xgb pairwise |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    nan = float("nan")
    for key, p in r["per_workload"].items():
        def top(name: str, k: str) -> str:
            v = r.get(name, {}).get(key, {}).get(k, nan)
            return f"{v:.3f}"
        lines.append(f"| {key} | {p['n_configs']} | {p['n_ok']} | {top('random', '10')} | {top('analytical', '1')} | "
                     f"{top('analytical', '10')} | {top('xgb', '10')} | {top('analytical_xgb', '10')} | "
                     f"{r['analytical_pairwise'][key]:.3f} | {r.get('xgb_pairwise', {}).get(key, nan):.3f} | "
                     f"{r.get('analytical_xgb_pairwise', {}).get(key, nan):.3f} |")
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
    ap.add_argument("--fit-records", type=int, default=800,
                    help="seeded sample of training records per constants fit (run time grows with it)")
    ap.add_argument("--no-xgb", action="store_true", help="skip the XGBoost evaluation")
    ap.add_argument("--nthread", type=int, default=2)
    ap.add_argument("--xgb-rounds", type=int, default=60, help="boosting rounds of each leave-one-out model")
    ap.add_argument("--train-per-workload", type=int, default=0,
                    help="train each leave-one-out model on a seeded sample of at most this many records "
                         "per workload (0: all; smaller is faster)")
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
                             xgb_rounds=args.xgb_rounds, train_per_workload=args.train_per_workload,
                             fit_records=args.fit_records))
    r["data"] = [Path(p).name for p in paths]
    r["settings"] = {"folds": args.folds, "fit_records": args.fit_records, "xgb": not args.no_xgb,
                     "xgb_rounds": args.xgb_rounds, "train_per_workload": args.train_per_workload, "mma": spec.mma}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(r, indent=2, sort_keys=True))
    Path(f"{out}.md").write_text(to_markdown(r))
    print(to_markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
