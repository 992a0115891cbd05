from __future__ import annotations

import pytest

from alcop_triton.model.fit import FIT_BOUNDS, fit_constants, fit_loss

from .conftest import make_synthetic, synthetic_truth


def test_fit_moves_towards_truth(h100):
    ms = make_synthetic(h100, noise=0.01)
    fitted = fit_constants(ms, h100, max_records=300, params=["compute_eff", "iter_overhead_cycles", "latency_scale"])
    assert fit_loss(ms, fitted) < 0.5 * fit_loss(ms, h100)
    truth = synthetic_truth(h100)
    assert abs(fitted.compute_eff - truth.compute_eff) < abs(h100.compute_eff - truth.compute_eff)
    assert "fitted" in fitted.source
    for name, (lo, hi) in FIT_BOUNDS.items():
        assert lo <= getattr(fitted, name) <= hi


def test_fit_deterministic_and_validates(h100):
    ms = make_synthetic(h100, per_workload=20)
    kw = dict(max_records=100, params=["compute_eff"])
    assert fit_constants(ms, h100, **kw) == fit_constants(ms, h100, **kw)
    with pytest.raises(ValueError, match="cannot fit"):
        fit_constants(ms, h100, params=["num_sms"])
    with pytest.raises(ValueError, match="no successful"):
        fit_constants([m for m in ms if not m.ok], h100)


def test_fit_script_derives_a_plain_matmul_set_and_reports(h100, tmp_path):
    """The fit script on SYNTHETIC records: derive keeps plain matmul configs of the chosen shapes
    (no register prefetch, no persistent programs, no failures), fit writes presets beside fits."""
    import gzip
    import json

    from alcop_triton.model import fit as fit_mod

    ms = make_synthetic(h100, per_workload=30)
    src = tmp_path / "grid.jsonl"
    lines = [json.dumps({**m.to_json(), "impl": "alcop"}) for m in ms]
    reg = {**ms[0].to_json(), "impl": "alcop"}
    reg["config"] = {**reg["config"], "REG_STAGES": 2, "REG_SPLIT": 2}
    lines += [json.dumps(reg), json.dumps({**ms[0].to_json(), "config": None, "impl": "torch"})]
    src.write_text("\n".join(lines) + "\n")
    recs = fit_mod.derive_fit_set([src], shapes=4, records=50)
    assert len(recs) == 50 and len({tuple(r["workload"]["shape"]) for r in recs}) <= 4
    assert all(r["time_ms"] and r["config"]["REG_STAGES"] == 1 for r in recs)
    assert recs == fit_mod.derive_fit_set([src], shapes=4, records=50)   # seeded
    out = tmp_path / "fit.jsonl.gz"
    assert fit_mod.main(["derive", "--source", str(src), "--out", str(out), "--shapes", "4", "--records", "50"]) == 0
    with gzip.open(out, "rt") as f:
        assert [json.loads(x) for x in f] == recs
    assert fit_mod.main(["fit", str(out), "--out", str(tmp_path / "rep"), "--max-records", "50"]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["records"] == 50 and rep["loss_fitted"] <= rep["loss_preset"]
    assert set(rep["constants"]) == set(FIT_BOUNDS)
    assert "| compute_eff |" in (tmp_path / "rep.md").read_text()
