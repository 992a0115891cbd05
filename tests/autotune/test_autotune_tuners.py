"""Tuners on synthetic recorded data (offline replay): determinism, budgets, failures, curves."""

from __future__ import annotations

import pytest

from alcop_triton.autotune.replay import ReplayMeasurer, Task, compare_tuners, load_tasks, replay_task
from alcop_triton.autotune.space import ConfigSpace
from alcop_triton.autotune.tuner import TUNERS, make_tuner
from alcop_triton.errors import TuningError
from alcop_triton.model.hardware import get_spec

from alcop_triton.autotune.database import GpuKey

SPEC = get_spec("H100")
H100 = GpuKey("H100", "9.0")


def _space(records):
    w = records[0].workload
    return ConfigSpace.from_configs(w, {r.config for r in records}, SPEC), ReplayMeasurer(w, records)


@pytest.mark.parametrize("name", TUNERS)
def test_deterministic_with_seed_and_budget(name, synth_records):
    records = list(synth_records.values())[0]
    runs = []
    for _ in range(2):
        space, m = _space(records)
        res = make_tuner(name, space, seed=3).tune(m, 20, batch_size=8)
        runs.append([t.config for t in res.trials])
    assert runs[0] == runs[1]
    assert len(runs[0]) == 20 and len(set(runs[0])) == 20  # budget respected, no config measured twice


@pytest.mark.parametrize("name", TUNERS)
def test_failures_scored_zero_never_best(name, synth_records):
    records = list(synth_records.values())[1]
    failed = [r for r in records if not r.ok]
    records = failed[:3] + [r for r in records if r.ok][:37]  # small, so the search is exhaustive
    space, m = _space(records)
    res = make_tuner(name, space, seed=0).tune(m, len(space), batch_size=16)
    failed = [t for t in res.trials if not t.result.ok]
    assert failed and all(t.throughput == 0.0 for t in failed)  # kept and scored 0, not dropped
    assert res.best.result.ok
    assert res.best.result.time_ms == m.best_time_ms()  # exhaustive: every config tried
    assert res.curve() == sorted(res.curve())


def test_grid_random_analytical_orders(synth_records):
    records = list(synth_records.values())[0]
    space, m = _space(records)
    grid = make_tuner("grid", space).tune(m, 10)
    assert [t.config for t in grid.trials] == list(space.configs[:10])
    ana = make_tuner("analytical", space).tune(m, 10)
    assert [t.config for t in ana.trials] == space.ranked()[:10]
    r1 = [t.config for t in make_tuner("random", space, seed=1).tune(m, 10).trials]
    r2 = [t.config for t in make_tuner("random", space, seed=2).tune(m, 10).trials]
    assert r1 != r2


def test_unknown_tuner(synth_records):
    space, _ = _space(list(synth_records.values())[0])
    with pytest.raises(TuningError, match="unknown"):
        make_tuner("bayes", space)


def test_replay_unknown_config_is_invalid(synth_records):
    from alcop_triton.autotune.measure import ErrorKind
    from alcop_triton.records import KernelConfig

    records = list(synth_records.values())[0]
    m = ReplayMeasurer(records[0].workload, records)
    missing = next(c for c in (KernelConfig(block_m=16, block_n=16, block_k=16, num_warps=1),) if c not in m.configs)
    assert m.measure([missing])[0].error is ErrorKind.INVALID_CONFIG


def test_compare_tuners_curves(synth_dir, synth_records):
    tasks = load_tasks([*synth_dir.glob("*.jsonl")])
    assert {t.workload for t in tasks} == set(synth_records) and {t.gpu for t in tasks} == {H100}
    comp = compare_tuners(tasks, k_max=16, seeds=2)
    for t in TUNERS:
        for task_key, curve in comp.curves[t].items():
            assert len(curve) == 16 and curve == sorted(curve) and 0 < curve[-1] <= 1.0
    # The learned model pretrained on the analytical model should beat blind search early on.
    assert comp.at("analytical+xgb", 8) >= comp.at("random", 8)
    assert comp.at("analytical+xgb", 16) >= comp.at("grid", 16)
    table = comp.table((8, 16), per_task=True)
    assert "analytical+xgb" in table and tasks[0].workload.key() in table


def test_replay_task_needs_a_success(synth_records):
    from dataclasses import replace

    w, records = next(iter(synth_records.items()))
    bad = tuple(replace(r, time_ms=None, error="compile") for r in records[:5])
    with pytest.raises(TuningError, match="no successful"):
        replay_task(Task(H100, w, bad), "grid", 5, 0)


def test_parallel_replay_matches_serial(synth_dir):
    tasks = load_tasks([*synth_dir.glob("*.jsonl")])
    serial = compare_tuners(tasks, ("grid", "random", "analytical"), k_max=12, seeds=2)
    parallel = compare_tuners(tasks, ("grid", "random", "analytical"), k_max=12, seeds=2, jobs=2)
    assert parallel.curves == serial.curves and list(parallel.curves["random"]) == [t.key for t in tasks]


def test_simulated_annealing_finds_the_top_of_a_large_space():
    from alcop_triton.autotune.cost_model import AnalyticalCostModel
    from alcop_triton.autotune.optimizer import SimulatedAnnealingOptimizer
    from alcop_triton.records import Workload
    import numpy as np

    space = ConfigSpace.build(Workload("matmul", (2048, 2048, 2048), "float16", "nt"), SPEC)
    model = AnalyticalCostModel(space)
    opt = SimulatedAnnealingOptimizer(space, exhaustive_limit=0)
    seen = set()

    def predict(cs):
        seen.update(cs)
        return model.predict(cs)

    best = model.predict(space.ranked()[:1])[0]
    exclude = set(space.ranked()[:3])
    picks = opt.find_maximums(predict, 8, exclude, np.random.default_rng(0))
    assert len(picks) == 8 and not exclude & set(picks)
    assert model.predict(picks).max() >= 0.9 * best  # near the top of ~30k configs
    assert len(seen) < len(space) / 2  # without scoring the whole space
    again = opt.find_maximums(model.predict, 8, exclude, np.random.default_rng(0))
    assert again == picks  # seeded


def test_replay_tasks_split_by_mma_path(tmp_path, synth_records):
    from dataclasses import replace

    records = list(synth_records.values())[0][:20]
    path = tmp_path / "two_paths.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in records) +
                    "".join(replace(r, mma="mma_sync").to_json() + "\n" for r in records))
    tasks = load_tasks([path])
    assert [t.mma for t in tasks] == ["mma_sync", "wgmma"] and all(len(t.records) == 20 for t in tasks)
    assert tasks[0].key == f"H100/mma_sync/{records[0].workload.key()}"


def test_neighbours_move_one_knob_to_an_adjacent_value():
    from alcop_triton.autotune.space import KNOB_NAMES
    from alcop_triton.records import Workload
    space = ConfigSpace.build(Workload("matmul", (1970, 2304, 768), "float16", "nt"), SPEC)
    values = space.knob_values()
    c = space.ranked()[0]
    near = space.neighbours(c)
    assert near and len(set(near)) == len(near) and c not in near
    for n in near:
        assert n in space
        moved = [k for k in KNOB_NAMES if getattr(n, k) != getattr(c, k)]
        assert len(moved) == 1, (c, n)
        k = moved[0]
        assert abs(values[k].index(getattr(n, k)) - values[k].index(getattr(c, k))) == 1
    # Every in-space config one pipeline stage away is among them (found in the space: a "ws" config one
    # stage deeper may be no config at all, out of shared memory).
    others = [k for k in KNOB_NAMES if k != "smem_stages"]
    stage_away = [x for x in space if abs(x.smem_stages - c.smem_stages) == 1
                  and all(getattr(x, k) == getattr(c, k) for k in others)]
    assert all(x in near for x in stage_away)


class _StagesMatter:
    """'Measures' a config as its analytical time, a deeper pipeline 10% faster per stage: a learnable
    error that puts the fastest configs where the model's prior does not."""

    def __init__(self, space):
        self.workload, self.space, self.est = space.workload, space, space.estimates()

    def measure(self, configs, on_result=None):
        from alcop_triton.autotune.measure import MeasureResult
        out = [MeasureResult(c, 1e3 * self.est[self.space.index(c)] * 0.9 ** c.smem_stages, timer="replay")
               for c in configs]
        for r in out:
            if on_result is not None:
                on_result(r)
        return out


def test_model_tuners_look_around_the_fastest_measured_configs(monkeypatch):
    from alcop_triton.autotune import tuner as tu
    from alcop_triton.records import Workload
    space = ConfigSpace.build(Workload("matmul", (1970, 2304, 768), "float16", "nt"), SPEC).top_k(300)
    m = _StagesMatter(space)

    def after(trials: int, slots: int) -> tuple:
        monkeypatch.setattr(tu, "LOCAL_SLOTS", slots)
        t = make_tuner("analytical+xgb", space, seed=0)
        t.tune(m, trials, batch_size=8)
        return t, t.next_batch(8)
    t, batch = after(tu.LOCAL_AFTER, 2)
    fastest = [tr.config for tr in sorted(t.trials, key=lambda tr: -tr.throughput)[:tu.LOCAL_FROM]]
    near = {n for c in fastest for n in space.neighbours(c)} - {tr.config for tr in t.trials}
    assert len(near) >= 2 and len(set(batch) & near) >= 2
    assert len(set(after(tu.LOCAL_AFTER, 0)[1]) & near) < len(set(batch) & near)  # the slots made the difference
    # Before LOCAL_AFTER trials the batch is the model's alone: the same with the slots closed.
    assert after(8, 2)[1] == after(8, 0)[1]
