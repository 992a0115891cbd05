"""Transfer across GPUs, replayed offline: one GPU's table answers for another GPU that has none.

    python benchmarks/transfer_replay.py --out benchmarks/results/transfer_replay [--k 1 2 3 4] [--no-xgb]

A new script beside ``transfer_eval.py`` rather than a mode of it: that one replays ``dispatch.transfer``
inside one GPU's grid; this one drives the ``Dispatcher`` itself with one GPU's records as its only
shipped table, asks it on another GPU's model spec (``model.hardware`` presets), and scores each answer
with the other GPU's own measurements.

Cases (``CASES``): the H100 table's records answer for the H200 table's workloads, the H200 table's for
the H100 table's (the workloads both hold), and the H200 table's for the H100 grid's ALCOP-suite shapes
(10 of its 47 are in the H200 table; 144-768 configs measured per shape, so its best is near the space's
best, and its timer is the grid's own). Two modes:

* ``shipped``: the source keeps its records of the workload (what dispatch does today on a GPU without
  a table, for a workload the other GPU's table holds);
* ``unseen``: the source's records of the workload are hidden too (a shape no table holds).

Rankers: ``dispatch`` (``Dispatcher``'s transfer ranking, its first the config an untuned call runs:
checked against ``Dispatcher.decide``); ``dispatch+copy`` (the same, each config followed by its twins
of the other copy mechanisms the shape allows: which of pointer and TMA copies wins a tile differs
between the H100 and the H200, as the tables show); ``xgb`` (the XGBoost cost model fitted on the
source GPU's measurements, featurized on the GPU each was measured on, re-ranking dispatch's
candidates for the target; in ``unseen`` mode fitted once per fold of ``XGB_FOLDS`` with the fold's
workloads hidden, stricter than dispatch's one workload).

"First use with k measurements": the target measures the ranker's top k and keeps the fastest. Score of
a workload: the target's best measured time of it / the kept config's time (1.0 = the best config the
target measured). A workload whose top k holds a config the target never measured is uncovered: counted,
not guessed. Also torch's recorded time / the kept config's time, where recorded.
Writes ``OUT/transfer_replay.json`` and ``OUT/transfer_replay.md``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import json
import sys
import tempfile
import warnings
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from alcop_triton.autotune.database import Database, TuningRecord, rank_configs, read_jsonl  # noqa: E402
from alcop_triton.autotune.dispatch import Dispatcher  # noqa: E402
from alcop_triton.model.hardware import GPUSpec, get_spec  # noqa: E402
from alcop_triton.records import KernelConfig, Workload, geomean  # noqa: E402

H100_TABLE = "alcop_triton/data/default_h100.jsonl"
H200_TABLE = "alcop_triton/data/default_h200.jsonl"
H100_GRID = "benchmarks/results/headline/ablation/h100_wgmma_alcop_space.jsonl.gz"
GRID_TIMER = ("the grid's own (CUDA events around a pre-bound launch after an L2 flush; "
              "see benchmarks/results/transfer_eval/README.md)")
XGB_FOLDS = 10
CRITERION = (0.97, 0.9)
"""Issue 46's bar: geomean >= 0.97 of tuning on the target, none below 0.9."""


@dataclass(frozen=True)
class Case:
    name: str
    source: str            # the table whose records dispatch holds (repository-relative path)
    source_gpu: str
    target: str            # the measurements that score the answers
    target_gpu: str
    reference: str         # what "best" is on the target
    common_only: bool      # score only the workloads the source also holds


CASES: tuple[Case, ...] = (
    Case("H100 table -> H200", H100_TABLE, "H100", H200_TABLE, "H200",
         "best of the H200 table's candidates (up to 8 model-ranked + variants)", False),
    Case("H200 table -> H100", H200_TABLE, "H200", H100_TABLE, "H100",
         "best of the H100 table's candidates", True),
    Case("H200 table -> H100 grid (ALCOP suite)", H200_TABLE, "H200", H100_GRID, "H100",
         "best of the H100 grid (144-768 configs per shape)", False),
)


def by_workload(records: Sequence[TuningRecord]) -> dict[Workload, list[TuningRecord]]:
    out: dict[Workload, list[TuningRecord]] = {}
    for r in records:
        out.setdefault(r.workload, []).append(r)
    return out


def fold_of(w: Workload) -> int:
    return zlib.crc32(w.key().encode()) % XGB_FOLDS


class XGBRanker:
    """The XGBoost cost model fitted on the source GPU's measurements (each featurized on its own GPU's
    spec), scoring candidates featurized on the target's; one model per hidden fold in ``unseen`` mode."""

    def __init__(self, source: Sequence[TuningRecord], source_spec: GPUSpec, target_spec: GPUSpec) -> None:
        self.source, self.source_spec, self.target_spec = source, source_spec, target_spec
        self._models: dict[int | None, Any] = {}

    def _model(self, hide_fold: int | None) -> Any:
        from alcop_triton.model.data import Measurement
        from alcop_triton.model.xgb_model import XGBCostModel

        if hide_fold not in self._models:
            ms = [Measurement(r.workload, r.config, r.time_ms * 1e-3 if r.ok and r.time_ms else None, r.error,
                              r.gpu, r.mma) for r in self.source
                  if hide_fold is None or fold_of(r.workload) != hide_fold]
            self._models[hide_fold] = XGBCostModel(self.source_spec).update(ms)
        return self._models[hide_fold]

    def rank(self, w: Workload, pool: Sequence[KernelConfig], hide: bool) -> list[KernelConfig]:
        import numpy as np

        from alcop_triton.model.features import featurize

        model = self._model(fold_of(w) if hide else None)
        scores = model.predict_features(np.stack([featurize(w, c, self.target_spec) for c in pool]))
        return [pool[i] for i in sorted(range(len(pool)), key=lambda i: (-scores[i], i))]


def with_copy_twins(w: Workload, order: Sequence[KernelConfig], spec: GPUSpec) -> list[KernelConfig]:
    """``order`` with each config followed by its twins of the other copy mechanisms the shape allows."""
    from alcop_triton.autotune.space import Knobs, shape_reason

    out: list[KernelConfig] = []
    for c in order:
        # the warp-specialized kernel's knobs are its own: a "ws" config has no twin of another mechanism here
        mechs = [m for m in Knobs().async_copy if m not in (c.async_copy, "ws")] if c.async_copy != "ws" else []
        for twin in [c] + [c.replace(async_copy=m) for m in mechs]:
            if twin not in out and (twin == c or shape_reason(w, twin, spec) is None):
                out.append(twin)
    return out


def replay(case: Case, source: list[TuningRecord], target: list[TuningRecord], hide: bool, ks: Sequence[int],
           xgb: XGBRanker | None) -> dict[str, Any]:
    """Every target workload answered by dispatch on the target's spec from ``source`` alone."""
    spec = get_spec(case.target_gpu)
    src, tgt = by_workload(source), by_workload(target)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        empty = Database(Path(tmp) / "none.sqlite")   # the target GPU's user database: nothing in it
        for w, rs in tgt.items():
            if case.common_only and w not in src:
                continue
            times = {rc.config: rc.time_ms for rc in rank_configs(rs)}
            if not times:
                continue
            pool = [r for r in source if not (hide and r.workload == w)]
            d = Dispatcher(empty, defaults=pool)
            decision = d.decide(w, spec)
            near = d._nearest(w, spec)
            ranked = near[1] if near is not None else [decision.config]
            if ranked[0] != decision.config:
                raise RuntimeError(f"{w.key()}: the untuned call runs {decision.config}, the ranking starts "
                                   f"with {ranked[0]}")
            rankings = {"dispatch": ranked, "dispatch+copy": with_copy_twins(w, ranked, spec)}
            if xgb is not None:
                rankings["xgb"] = xgb.rank(w, ranked, hide)
            torch_ms = next((r.torch_ms for r in rs if r.torch_ms), None)
            best = min(times.values())
            row: dict[str, Any] = {"workload": w.key(), "source": decision.source, "best_ms": best,
                                   "torch_ms": torch_ms, "candidates": len(ranked),
                                   "dispatch_top": [str(c) for c in ranked[:max(ks)]], "of_best": {}}
            for name, order in rankings.items():
                # Per k: the target's best / the fastest of the ranking's top k (None: one of them unmeasured).
                got = [times.get(c) for c in order[:max(ks)]]
                row["of_best"][name] = [None if any(t is None for t in got[:k])
                                        else round(best / min(t for t in got[:k] if t is not None), 5) for k in ks]
            rows.append(row)
    rankers = list(rows[0]["of_best"]) if rows else []
    summary = {f"{n}@{k}": summarize(rows, n, i, len(ks)) for n in rankers for i, k in enumerate(ks)}
    return {"case": case.name, "mode": "unseen" if hide else "shipped", "workloads": len(rows),
            "sources": dict(Counter(r["source"] for r in rows)), "summary": summary, "rows": rows}


POOLS = ("this GPU only", "both (dispatch)", "both, pooled corrections", "other GPU only")
"""Which records rank an untuned call's config in ``pools``: this GPU's other workloads, those and the
other GPU's table (what ``Dispatcher._nearest`` ranks over), or the other GPU's table alone."""


def pools(tables: dict[str, list[TuningRecord]], target_gpu: str, hide_other: bool) -> dict[str, Any]:
    """A GPU with both tables, each of its table's workloads answered with its own records of it hidden:
    ranked over each of ``POOLS`` (``hide_other``: the other GPU's records of it hidden too, a shape no
    table holds), scored with the target's own measurements (of best, k = 1), compared over the workloads
    all four pools' picks were measured on."""
    from alcop_triton.autotune import dispatch
    from alcop_triton.autotune.dispatch import transfer_ranking

    spec = get_spec(target_gpu)
    own_all = tables[target_gpu]
    other_all = [r for gpu, rs in tables.items() if gpu != target_gpu for r in rs]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        empty = Database(Path(tmp) / "none.sqlite")
        for w, rs in by_workload(own_all).items():
            times = {rc.config: rc.time_ms for rc in rank_configs(rs)}
            if not times:
                continue
            own = [r for r in own_all if r.workload != w]
            other = [r for r in other_all if not (hide_other and r.workload == w)]
            near = Dispatcher(empty, defaults=own + other)._nearest(w, spec)
            picks = {"both (dispatch)": near[1][0] if near else None}
            # dispatch before D45: every GPU's measurements of a config pooled into its correction
            rule, dispatch.OWN_GPU_FIRST = dispatch.OWN_GPU_FIRST, False
            try:
                pooled = Dispatcher(empty, defaults=own + other)._nearest(w, spec)
            finally:
                dispatch.OWN_GPU_FIRST = rule
            picks["both, pooled corrections"] = pooled[1][0] if pooled else None
            for name, pool in (("this GPU only", own), ("other GPU only", other)):
                ranked = transfer_ranking(w, pool, spec)
                picks[name] = ranked[0][0] if ranked else None
            best = min(times.values())
            rows.append({"workload": w.key(), **{n: (round(best / times[c], 5) if c in times else None)
                                                 for n, c in picks.items()}})
    common = [r for r in rows if all(r[n] is not None for n in POOLS)]
    summary = {n: {"geomean": geomean([r[n] for r in common]) if common else None,
                   "min": min((r[n] for r in common), default=None),
                   "below_0.9": sum(r[n] < CRITERION[1] for r in common)} for n in POOLS}
    return {"target": target_gpu, "mode": "unseen" if hide_other else "shipped", "workloads": len(rows),
            "common": len(common), "summary": summary, "rows": rows}


def summarize(rows: list[dict[str, Any]], ranker: str, i: int, n_k: int) -> dict[str, Any]:
    """Scores of one ranker at its ``i``-th k: over the workloads it covers, and over those every k covers
    (the same workloads for each k, so the k's compare). vs torch: torch's time / the kept config's."""
    scores = [r["of_best"][ranker][i] for r in rows if r["of_best"][ranker][i]]
    common = [r["of_best"][ranker][i] for r in rows if all(r["of_best"][ranker][j] for j in range(n_k))]
    vs_torch = [r["torch_ms"] * r["of_best"][ranker][i] / r["best_ms"] for r in rows
                if r["of_best"][ranker][i] and r["torch_ms"]]
    return {"covered": len(scores), "uncovered": len(rows) - len(scores),
            "geomean": geomean(scores) if scores else None, "min": min(scores, default=None),
            "at_least_0.97": sum(s >= CRITERION[0] for s in scores), "below_0.9": sum(s < CRITERION[1] for s in scores),
            "vs_torch_geomean": geomean(vs_torch) if vs_torch else None,
            "common_n": len(common), "common_geomean": geomean(common) if common else None,
            "common_min": min(common, default=None),
            "meets_criterion": bool(scores) and geomean(scores) >= CRITERION[0] and min(scores) >= CRITERION[1]}


def describe(path: str, records: list[TuningRecord]) -> dict[str, Any]:
    return {"path": path, "records": len(records), "workloads": len({r.workload for r in records}),
            "devices": sorted({r.device for r in records}), "dates": sorted({r.date for r in records}),
            "timers": sorted({r.timer or "(none recorded)" for r in records}),
            "versions": sorted({f"alcop {r.alcop}, Triton {r.triton}, torch {r.torch}" for r in records})}


def _f(v: Any, fmt: str = ".3f") -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def markdown(report: dict[str, Any]) -> str:
    out = ["# Transfer across GPUs, replayed", "",
           f"Generated by `{report['command']}` on {report['date']}; no GPU: every time is a recorded "
           "measurement. Dispatch holds one GPU's table as its only shipped data, answers on the other GPU's "
           "model spec, and the other GPU's own measurements score the answer: **of best** = the target's best "
           "measured time of the workload / the time of the config kept. With k > 1 the target measures the "
           "ranker's top k on first use and keeps the fastest. A top k holding a config the target never "
           "measured is **uncovered** (counted, not scored); **common** = the workloads that every k covers, so "
           "the k's compare on one set. Rankers: **dispatch** = the transfer ranking (k = 1: what an untuned call "
           "runs); **dispatch+copy** = the same, each config followed by its other copy mechanisms (pointer, TMA); "
           "**xgb** = the XGBoost cost model fitted on the source GPU's records, re-ranking dispatch's candidates.", "",
           "The reference is the best of the configs measured on the target (the tables: up to 8 model-ranked "
           "candidates and their variants; the grid: 144-768 configs), not 50 trials of tuning. Issue 46's bar: "
           "geomean >= 0.97 of 50-trial tuning, none < 0.9.", "", "Data:", ""]
    for d in report["data"].values():
        out.append(f"- `{d['path']}`: {d['records']} records, {d['workloads']} workloads; {', '.join(d['devices'])}; "
                   f"{', '.join(d['dates'])}; timer {', '.join(d['timers'])}; {'; '.join(d['versions'])}")
    out += ["", f"Grid timer: {GRID_TIMER}. Tables' timer: the tuner's `autotune.measure.time_gpu` (CUDA graphs "
            "over rotating input copies, `do_bench` for kernels above its threshold), as each record names.", ""]
    for res in report["results"]:
        out += [f"## {res['case']}, {res['mode']} ({res['workloads']} workloads)", "",
                "| ranker | k | covered | of best (geomean) | min | >= 0.97 | < 0.9 | vs torch (geomean) | "
                "common n | common geomean | common min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for key, s in res["summary"].items():
            name, k = key.split("@")
            out.append(f"| {name} | {k} | {s['covered']}/{s['covered'] + s['uncovered']} | {_f(s['geomean'])} | "
                       f"{_f(s['min'])} | {s['at_least_0.97']} | {s['below_0.9']} | {_f(s['vs_torch_geomean'])}x | "
                       f"{s['common_n']} | {_f(s['common_geomean'])} | {_f(s['common_min'])} |")
        worst = sorted((r for r in res["rows"] if r["of_best"]["dispatch"][0]), key=lambda r: r["of_best"]["dispatch"][0])
        out += ["", f"Weakest untuned picks (dispatch, k = {report['k'][0]}): " + "; ".join(
            f"{r['workload']} {r['of_best']['dispatch'][0]:.3f}" for r in worst[:5]), ""]
    if report.get("pools"):
        out += ["## A GPU with both tables: which records rank its untuned calls", "",
                "Each workload of the target's table answered with the target's records of it hidden, the config "
                "ranked over the target's other records, over those and the other GPU's table (dispatch), or over "
                "the other GPU's table alone; *pooled corrections*: dispatch as it was before D45 (a config's "
                "correction pooled over every GPU's measurements of it, not this GPU's first); of best at k = 1 "
                "over the workloads all four picks were measured on. "
                "shipped: the other GPU's table holds the workload; unseen: its records of it hidden too.", "",
                "| target | mode | common | " + " | ".join(POOLS) + " |", "|---|---|---|" + "---|" * len(POOLS)]
        for p in report["pools"]:
            cells = [f"{_f(p['summary'][n]['geomean'])} (min {_f(p['summary'][n]['min'])}, "
                     f"{p['summary'][n]['below_0.9']} < 0.9)" for n in POOLS]
            out.append(f"| {p['target']} | {p['mode']} | {p['common']}/{p['workloads']} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4], help="configs measured on first use")
    ap.add_argument("--no-xgb", action="store_true", help="dispatch's ranking only (no XGBoost fits)")
    a = ap.parse_args(argv)
    if any(k < 1 for k in a.k):
        raise SystemExit(f"--k {a.k}: every k must be >= 1")
    ks = sorted(set(a.k))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a skipped record would change what the replay means
        data = {p: read_jsonl(ROOT / p) for p in (H100_TABLE, H200_TABLE, H100_GRID)}
    results = []
    for case in CASES:
        source, target = data[case.source], data[case.target]
        shared = {r.workload for r in source} & {r.workload for r in target}
        xgb = None if a.no_xgb else XGBRanker(source, get_spec(case.source_gpu), get_spec(case.target_gpu))
        for hide in ((False, True) if shared else (True,)):
            res = replay(case, source, target, hide, ks, xgb)
            results.append(res)
            s = res["summary"][f"dispatch@{ks[0]}"]
            print(f"[transfer_replay] {case.name}, {res['mode']}: {res['workloads']} workloads, dispatch k={ks[0]} "
                  f"geomean {_f(s['geomean'])} min {_f(s['min'])}", flush=True)
    tables = {"H100": data[H100_TABLE], "H200": data[H200_TABLE]}
    pooled = [pools(tables, gpu, hide) for gpu in ("H200", "H100") for hide in (False, True)]
    for p in pooled:
        print(f"[transfer_replay] {p['target']} with both tables, {p['mode']}: " + ", ".join(
            f"{n} {_f(p['summary'][n]['geomean'])}" for n in POOLS), flush=True)
    report = {"command": "python benchmarks/transfer_replay.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": datetime.date.today().isoformat(), "criterion": {"geomean": CRITERION[0], "min": CRITERION[1]},
              "data": {p: describe(p, rs) for p, rs in data.items()}, "grid_timer": GRID_TIMER, "k": ks,
              "xgb_folds": XGB_FOLDS, "results": results, "pools": pooled}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "transfer_replay.json").write_text(json.dumps(report, indent=1) + "\n")
    (a.out / "transfer_replay.md").write_text(markdown(report))
    print(f"wrote {a.out / 'transfer_replay.json'} and {a.out / 'transfer_replay.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
