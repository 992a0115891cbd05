from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from alcop_triton.model.data import group_by_workload
from alcop_triton.model.features import FEATURE_NAMES, featurize
from alcop_triton.model.xgb_model import XGBCostModel, pairwise_accuracy
from alcop_triton.records import KernelConfig, Workload

from .conftest import SYNTH_CONFIGS, make_synthetic

pytest.importorskip("xgboost")


def test_features_shape_and_invalid(h100):
    wl = Workload("conv2d", (8, 28, 28, 64, 64, 3, 3, 1, 1))
    x = featurize(wl, KernelConfig(), h100)
    assert x.shape == (len(FEATURE_NAMES),) and x[FEATURE_NAMES.index("op_conv2d")] == 1.0
    assert 0 < x[FEATURE_NAMES.index("pred_efficiency")] <= 1
    bad = featurize(wl, KernelConfig(block_m=256, block_n=256, block_k=128, smem_stages=4), h100)
    assert bad[FEATURE_NAMES.index("valid")] == 0.0 and np.isnan(bad[FEATURE_NAMES.index("pred_efficiency")])


def _model(h100, ms):
    groups = group_by_workload(ms)
    return XGBCostModel(h100, n_estimators=20, update_rounds=20).pretrain(list(groups), SYNTH_CONFIGS[:80]), groups


def test_rank_quality_leave_one_out(h100):
    ms = make_synthetic(h100, noise=0.02)
    base, groups = _model(h100, ms)
    held = list(groups)[0]
    model = base.copy().update([m for wl, rs in groups.items() if wl != held for m in rs])
    ok = [m for m in groups[held] if m.ok]
    acc = pairwise_accuracy(model.predict(held, [m.config for m in ok]), [m.time_s for m in ok])
    assert acc > 0.85
    # copy() is independent: the base model's trees are untouched by the update.
    assert base._booster.num_boosted_rounds() == 20 and model._booster.num_boosted_rounds() == 40


@pytest.mark.parametrize("objective", ["reg:squarederror", "rank:pairwise"])
def test_measurements_override_pseudo_labels(h100, objective):
    wl = Workload("matmul", (2048, 2048, 2048))
    a, b = KernelConfig(block_m=128, block_n=128, block_k=64, num_warps=4), KernelConfig(block_m=32, block_n=32, block_k=32)
    model = XGBCostModel(h100, n_estimators=5, update_rounds=60, objective=objective).pretrain([wl], [a, b, KernelConfig()])
    assert model.predict(wl, [a, b])[0] > model.predict(wl, [a, b])[1]
    from alcop_triton.model.data import Measurement
    # Measured: the analytically worse config is much faster; the model must follow the measurement.
    model.update([Measurement(wl, a, 1e-3), Measurement(wl, b, 1e-5), Measurement(wl, KernelConfig(), None, "compile")])
    s = model.predict(wl, [a, b])
    assert s[1] > s[0]


def test_save_load_roundtrip_json(h100, tmp_path):
    ms = make_synthetic(h100, per_workload=30)
    model, groups = _model(h100, ms)
    path = model.save(tmp_path / "cost")
    assert path.name == "cost.json" and (tmp_path / "cost.meta.json").is_file()
    json.loads(path.read_text())                      # XGBoost's JSON format, not a binary/pickle
    meta = json.loads((tmp_path / "cost.meta.json").read_text())
    assert meta["feature_names"] == FEATURE_NAMES
    loaded = XGBCostModel.load(path)
    wl = list(groups)[1]
    cfgs = SYNTH_CONFIGS[:40]
    np.testing.assert_allclose(loaded.predict(wl, cfgs), model.predict(wl, cfgs), rtol=1e-6)
    loaded.update(ms[:30])                             # continues boosting after load
    meta["feature_names"] = FEATURE_NAMES[:-1]
    (tmp_path / "cost.meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="retrain"):
        XGBCostModel.load(path)


def test_errors(h100, monkeypatch):
    with pytest.raises(RuntimeError, match="pretrain"):
        XGBCostModel(h100).predict(Workload("matmul", (64, 64, 64)), [KernelConfig()])
    with pytest.raises(ValueError, match="objective"):
        XGBCostModel(h100, objective="binary:logistic")
    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(ImportError, match="pip install xgboost"):
        XGBCostModel(h100).pretrain([Workload("matmul", (64, 64, 64))], [KernelConfig(), KernelConfig(block_k=64)])


def test_ndcg_objective(h100):
    ms = make_synthetic(h100, per_workload=20)
    groups = group_by_workload(ms)
    model = XGBCostModel(h100, objective="rank:ndcg", n_estimators=5).pretrain(list(groups), SYNTH_CONFIGS[:30])
    assert model.predict(list(groups)[0], SYNTH_CONFIGS[:5]).shape == (5,)


def test_percentile_labels():
    from alcop_triton.model.xgb_model import _percentile
    # Share of the others each config beats: ties share a label, failures (None/inf) are 0.
    np.testing.assert_allclose(_percentile([1.0, 2.0, None, 2.0]), [1.0, 1 / 3, 0.0, 1 / 3])
    np.testing.assert_allclose(_percentile([3.0, float("inf")]), [1.0, 0.0])


def test_transfer_without_pretraining(h100):
    """update() on an untrained model trains from scratch on measurements of other workloads
    (the leave-one-workload-out setting of benchmarks/eval_model.py)."""
    ms = make_synthetic(h100, noise=0.02)
    groups = group_by_workload(ms)
    held = list(groups)[0]
    model = XGBCostModel(h100, n_estimators=30).update([m for wl, rs in groups.items() if wl != held for m in rs])
    assert model._booster.num_boosted_rounds() == 30
    ok = [m for m in groups[held] if m.ok]
    assert pairwise_accuracy(model.predict(held, [m.config for m in ok]), [m.time_s for m in ok]) > 0.8


def test_pairwise_accuracy():
    assert pairwise_accuracy([3, 2, 1], [1.0, 2.0, 3.0]) == 1.0
    assert pairwise_accuracy([1, 2, 3], [1.0, 2.0, 3.0]) == 0.0
    assert np.isnan(pairwise_accuracy([1, 2], [1.0, 1.005]))   # within 1%: skipped
