"""benchmarks/transfer_replay.py on small synthetic tables: one GPU's records answer for another GPU's
workloads through the dispatcher, each answer scored with the target's own measurements; a top k the
target never measured is uncovered, never guessed."""

from __future__ import annotations

import dataclasses

import pytest

from alcop_triton.autotune.database import TuningRecord
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.model import analytical
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

from . import load_script

tr = load_script("transfer_replay.py", "bench_transfer_replay")
H100, H200 = get_spec("H100"), get_spec("H200")
CONFIGS = [KernelConfig(128, 128, 64, num_warps=8, smem_stages=s) for s in (3, 4)] + \
    [KernelConfig(128, 256, 64, num_warps=8, smem_stages=3, async_copy="tma")]
WINNER = CONFIGS[-1]
SHAPES = ((2048, 2048, 2048), (3072, 3072, 3072), (4096, 4096, 4096))
CASE = tr.Case("H100 -> H200", "h100", "H100", "h200", "H200", "synthetic", False)


def _table(spec, configs, torch_factor=None, winners=None):
    """Every config on every shape at the model's time, the shape's winner (``winners``: by workload key;
    WINNER by default) measured 3x faster than the model says."""
    out = []
    for shape in SHAPES:
        w = Workload("matmul", shape, "float16", "nt")
        winner = (winners or {}).get(w.key(), WINNER)
        for c in configs:
            ms = analytical.estimate(w, c, spec).time_s * 1e3 * (1 / 3 if c == winner else 1.0)
            r = TuningRecord.from_result(w, MeasureResult(c, ms), spec)
            if torch_factor is not None:
                r = dataclasses.replace(r, torch_ms=torch_factor * analytical.estimate(w, WINNER, spec).time_s * 1e3 / 3)
            out.append(r)
    return out


@pytest.mark.parametrize("hide", [False, True])
def test_the_source_winner_is_scored_with_the_targets_time(hide):
    res = tr.replay(CASE, _table(H100, CONFIGS), _table(H200, CONFIGS, torch_factor=1.5), hide, [1, 2], None)
    assert res["workloads"] == 3 and res["mode"] == ("unseen" if hide else "shipped")
    assert res["sources"] == {"transfer": 3}
    s = res["summary"]["dispatch@1"]
    assert s["covered"] == 3 and s["geomean"] == pytest.approx(1.0) and s["meets_criterion"]
    assert s["vs_torch_geomean"] == pytest.approx(1.5)
    assert all(r["dispatch_top"][0] == str(WINNER) for r in res["rows"])


def test_a_pick_the_target_never_measured_is_uncovered():
    # The target measured only the two slower configs: the transferred winner has no time there.
    res = tr.replay(CASE, _table(H100, CONFIGS), _table(H200, CONFIGS[:2]), False, [1, 2], None)
    s = res["summary"]["dispatch@1"]
    assert s["covered"] == 0 and s["uncovered"] == 3 and s["geomean"] is None and not s["meets_criterion"]
    assert all(r["of_best"]["dispatch"] == [None, None] for r in res["rows"])


def test_top_k_keeps_the_fastest_measured():
    # On the target the ranking's second config is the fastest: k = 1 misses it, k = 2 (both measured on
    # first use) finds it.
    first = tr.replay(CASE, _table(H100, CONFIGS), _table(H200, CONFIGS), False, [2], None)
    by_name = {str(c): c for c in CONFIGS}
    second = {r["workload"]: by_name[r["dispatch_top"][1]] for r in first["rows"]}
    res = tr.replay(CASE, _table(H100, CONFIGS), _table(H200, CONFIGS, winners=second), False, [1, 2], None)
    assert res["summary"]["dispatch@1"]["geomean"] < 0.9 and res["summary"]["dispatch@1"]["below_0.9"] == 3
    assert res["summary"]["dispatch@2"]["geomean"] == pytest.approx(1.0)
    assert res["summary"]["dispatch@2"]["common_n"] == 3


def test_copy_twins_follow_each_config():
    w = Workload("matmul", (4096, 4096, 4096), "float16", "nt")
    order = tr.with_copy_twins(w, [WINNER, CONFIGS[0]], H200)
    assert order[:2] == [WINNER, WINNER.replace(async_copy="pointer")]
    assert order[2] == CONFIGS[0] and CONFIGS[0].replace(async_copy="tma") in order
    assert len(order) == len(set(order))


@pytest.mark.parametrize("hide_other", [False, True])
def test_pools_rank_a_gpus_untuned_calls_from_each_set_of_records(hide_other):
    # The H200 measured another winner than the H100 on every shape: its own other shapes point there, the
    # H100's table to the H100's winner. Dispatch ranks over both, each config corrected by this GPU's own
    # measurements of it where it has them (D45), so it finds the H200's winner in both modes. Pooled (the
    # rule before D45), the H100's measurement of the very shape (shipped) outweighs the H200's other
    # shapes; at equal distance (unseen) this GPU's shapes come first.
    other = CONFIGS[0]
    h200 = _table(H200, CONFIGS, winners={Workload("matmul", s, "float16", "nt").key(): other for s in SHAPES})
    res = tr.pools({"H100": _table(H100, CONFIGS), "H200": h200}, "H200", hide_other)
    assert res["target"] == "H200" and res["workloads"] == 3 and res["common"] == 3
    assert res["mode"] == ("unseen" if hide_other else "shipped")
    s = res["summary"]
    assert s["this GPU only"]["geomean"] == pytest.approx(1.0)
    assert s["other GPU only"]["geomean"] < 0.9 and s["other GPU only"]["below_0.9"] == 3
    assert s["both (dispatch)"]["geomean"] == pytest.approx(1.0)
    pooled = s["both, pooled corrections"]["geomean"]
    assert pooled == pytest.approx(1.0 if hide_other else s["other GPU only"]["geomean"])
