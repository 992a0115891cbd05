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
