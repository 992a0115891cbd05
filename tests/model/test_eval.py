from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import pytest

from .conftest import make_synthetic

ROOT = Path(__file__).resolve().parents[2]


def _load_eval():
    spec = importlib.util.spec_from_file_location("eval_model", ROOT / "benchmarks" / "eval_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_best_in_top_k():
    ev = _load_eval()
    r = ev.best_in_top_k([1.0, 2.0, 3.0, 4.0], [2e-3, None, 1e-3, 4e-3], ks=(1, 2, 3))
    assert r == {1: 0.5, 2: 0.5, 3: 1.0}
    assert ev.best_in_top_k([1.0, 2.0], [None, 1.0], ks=(1,)) == {1: 0.0}


def test_random_top_k_is_the_exact_expectation():
    """Against brute force over every k-subset, failures (None) included."""
    ev = _load_eval()
    times = [3e-3, 1e-3, None, 2e-3, 1e-3, 5e-3]
    for k in (1, 2, 3, 6, 10):
        kk = min(k, len(times))
        subsets = list(itertools.combinations(range(len(times)), kk))
        brute = sum(1e-3 / min(times[i] if times[i] is not None else math.inf for i in sub) for sub in subsets) / len(subsets)
        assert math.isclose(ev.random_top_k(times, ks=(k,))[k], brute, rel_tol=1e-12), k
    assert ev.random_top_k([None, None], ks=(1,)) == {1: 0.0}


def test_eval_side_by_side_on_synthetic(h100, tmp_path):
    pytest.importorskip("xgboost")
    ev = _load_eval()
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "synthetic.jsonl", "w") as f:   # SYNTHETIC data, written only inside this test
        for m in make_synthetic(h100, per_workload=40):
            f.write(json.dumps(m.to_json()) + "\n")
    out = tmp_path / "report" / "eval"
    assert ev.main(["--data", str(data / "*.jsonl"), "--out", str(out), "--folds", "2", "--xgb-rounds", "20"]) == 0
    r = json.loads(Path(f"{out}.json").read_text())
    s = r["summary"]
    assert r["n_workloads"] == 6 and r["data"] == ["synthetic.jsonl"]
    assert set(s) >= {"random", "analytical", "bottleneck", "analytical_fitted", "xgb", "analytical_xgb",
                      "xgb_pretrained_only", "xgb_pairwise", "analytical_xgb_pairwise", "analytical_pairwise"}
    # every workload scored by every model, held out (the synthetic truth is the analytical model with
    # other constants, so the analytical ranking must beat chance here)
    for name in ("xgb", "analytical_xgb", "xgb_pretrained_only", "random"):
        assert set(r[name]) == set(r["analytical"]), name
    assert s["analytical"]["top10"] > s["random"]["top10"] and s["analytical_pairwise"] > 0.5
    assert all(0 < s[name][f"top{k}"] <= 1.0 for name in ev.TOPK_MODELS for k in ev.KS)
    assert s["random"]["top50"] >= s["random"]["top10"] >= s["random"]["top1"]
    md = Path(f"{out}.md").read_text()
    assert "random choice (expected value, exact)" in md and "analytical + XGBoost" in md
    assert ev.main(["--data", str(tmp_path / "none*.jsonl"), "--out", str(out)]) == 2
