from __future__ import annotations

import importlib.util
import json
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


def test_eval_script_on_synthetic(h100, tmp_path):
    pytest.importorskip("xgboost")
    ev = _load_eval()
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "synthetic.jsonl", "w") as f:   # SYNTHETIC data, written only inside this test
        for m in make_synthetic(h100, per_workload=40):
            f.write(json.dumps(m.to_json()) + "\n")
    out = tmp_path / "report" / "eval"
    assert ev.main(["--data", str(data / "*.jsonl"), "--out", str(out), "--folds", "2"]) == 0
    r = json.loads(Path(f"{out}.json").read_text())
    s = r["summary"]
    assert r["n_workloads"] == 6
    assert set(s) >= {"analytical", "bottleneck", "analytical_fitted", "xgb_pairwise", "analytical_pairwise"}
    assert s["analytical"]["top10"] >= s["bottleneck"]["top10"] - 1e-9 and s["analytical"]["top10"] > 0.8
    assert 0.5 < s["xgb_pairwise"] <= 1.0
    md = Path(f"{out}.md").read_text()
    assert "Best-in-top-k" in md and "leave-one-workload-out" in md
    assert ev.main(["--data", str(tmp_path / "none*.jsonl"), "--out", str(out)]) == 2


STORED = sorted((ROOT / "benchmarks" / "data").glob("h100_wgmma_*.jsonl"))


@pytest.mark.skipif(not STORED, reason="no stored H100 measurements in benchmarks/data")
def test_eval_on_stored_h100_data():
    """The issue-5 acceptance targets on the REAL stored H100 (wgmma) measurements, small settings:
    analytical best-in-top-k, and XGBoost leave-one-workload-out pairwise accuracy (models trained
    only on the other workloads' measurements) on a seeded subset of held-out workloads."""
    pytest.importorskip("xgboost")
    import random

    from alcop_triton.model.data import group_by_workload, load_jsonl
    from alcop_triton.model.hardware import get_spec

    ev = _load_eval()
    spec = get_spec("H100", use_calibration=False)
    ms = [m for m in load_jsonl(STORED) if m.mma in (None, spec.mma)]
    keys = sorted(wl.key() for wl in group_by_workload(ms))
    held = random.Random(0).sample(keys, 10)
    r = ev.evaluate(ms, spec, folds=0, xgb_rounds=40, train_per_workload=200, xgb_held_out=held)
    s = r["summary"]
    assert r["n_workloads"] >= 50
    assert s["analytical"]["top1"] >= 0.8 and s["analytical"]["top10"] >= 0.9
    for k in ("top1", "top5", "top10"):
        assert s["analytical"][k] > s["bottleneck"][k]
    assert set(r["xgb_pairwise"]) == set(held)
    assert s["xgb_pairwise"] >= 0.9, r["xgb_pairwise"]
    assert s["xgb_pairwise_tol5pct"] >= s["xgb_pairwise"] - 0.01
