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
