"""Seeds: every tuner measures dispatch's configs first, once each; --no-seed restores the tuner's own order."""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_autotune_session as session_test

from alcop_triton import cli
from alcop_triton.autotune import session as session_mod
from alcop_triton.autotune.cost_model import XGBoostCostModel
from alcop_triton.autotune.database import Database
from alcop_triton.autotune.dispatch import Dispatcher, transfer, transfer_ranking
from alcop_triton.autotune.optimizer import SimulatedAnnealingOptimizer
from alcop_triton.autotune.session import SEED_BATCHES, tune
from alcop_triton.autotune.space import ConfigSpace, shape_reason
from alcop_triton.autotune.tuner import TUNERS, TuneResult, make_tuner
from alcop_triton.records import KernelConfig, Workload

W, TARGET = session_test.W, session_test.TARGET
SPEC = TARGET.spec


@pytest.fixture(scope="module")
def space() -> ConfigSpace:
    return ConfigSpace.build(W, SPEC, top_k=300)


def _seeds(space: ConfigSpace) -> list[KernelConfig]:
    # From the slow end of the analytical ranking: no tuner would propose them first on its own.
    return space.ranked()[-5:][::-1]


@pytest.mark.parametrize("name", TUNERS)
def test_seeds_come_first_and_are_measured_once(name, space):
    seeds = _seeds(space)
    measurer = session_test.Scripted()
    t = make_tuner(name, space, seed=3, seed_configs=seeds + seeds[:2])  # repeats are dropped
    res = t.tune(measurer, 12, batch_size=4)
    assert [tr.config for tr in res.trials[:5]] == seeds
    assert len(res.trials) == 12 and len(set(measurer.seen)) == 12  # nothing measured twice
    assert res.seed_trials == 5


@pytest.mark.parametrize("name", TUNERS)
def test_without_seeds_the_order_is_the_tuners_own(name, space):
    plain = make_tuner(name, space, seed=3).tune(session_test.Scripted(), 12, batch_size=4)
    none = make_tuner(name, space, seed=3, seed_configs=()).tune(session_test.Scripted(), 12, batch_size=4)
    assert [t.config for t in plain.trials] == [t.config for t in none.trials]
    assert plain.seed_trials == 0 and not plain.best_is_seed


def test_seeds_outside_the_space_are_skipped(space):
    rejected = KernelConfig(64, 64, 64, smem_stages=8, split_k=8)  # split-K beyond filling the GPU
    assert shape_reason(W, rejected, SPEC) is not None and rejected not in space
    ok = _seeds(space)[:2]
    t = make_tuner("analytical+xgb", space, seed_configs=[rejected, *ok])
    assert t.skipped_seeds == [rejected] and t.seed_configs == ok
    res = t.tune(session_test.Scripted(), 6, batch_size=3)
    assert [tr.config for tr in res.trials[:2]] == ok and rejected not in {tr.config for tr in res.trials}


def test_failed_seed_is_recorded_and_never_best(space):
    failing = KernelConfig(16, 64, 64, smem_stages=3)  # Scripted fails every block_m == 16
    space = ConfigSpace.from_configs(W, [*space.configs, failing], SPEC)
    seen = []
    t = make_tuner("analytical+xgb", space, seed_configs=[failing])
    res = t.tune(session_test.Scripted(), 8, batch_size=4, on_trial=seen.append)
    assert seen[0].config == failing and not seen[0].result.ok and seen[0].throughput == 0
    assert res.best is not None and res.best.config != failing and not res.best_is_seed
    assert res.seed_trials == 1 and failing not in {c for c in t.propose(4)}  # never proposed again


def test_session_seeds_from_dispatch_and_no_seed(tmp_path):
    db = Database(tmp_path / "t.sqlite")
    space = ConfigSpace.build(W, SPEC)
    expected = [c for c in Dispatcher(db).seeds(W, SPEC) if c in space][: SEED_BATCHES * 4]
    assert expected, "the shipped H100 table should know neighbours of this shape"
    seeded = tune(W, TARGET, db, tuner="analytical+xgb", n_trials=12, batch_size=4, measurer=session_test.Scripted())
    assert [t.config for t in seeded.trials[: len(expected)]] == expected
    # The config an untuned call would run is the first one measured.
    assert seeded.trials[0].config == Dispatcher(Database(tmp_path / "empty.sqlite")).decide(W, SPEC).config
    plain = tune(W, TARGET, Database(tmp_path / "u.sqlite"), tuner="analytical+xgb", n_trials=12, batch_size=4,
                 measurer=session_test.Scripted(), seeding=False)
    alone = make_tuner("analytical+xgb", space).tune(session_test.Scripted(), 12, batch_size=4)
    assert [t.config for t in plain.trials] == [t.config for t in alone.trials]
    assert plain.seed_trials == 0


def test_dispatch_seeds_start_with_the_untuned_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("ALCOP_AUTOTUNE", "1")  # seeds never tune (a tuning run asks for them)
    d = Dispatcher(Database(tmp_path / "t.sqlite"))
    w = Workload("matmul", (1000, 1500, 700), "float16", "nt")
    seeds = d.seeds(w, SPEC)
    monkeypatch.delenv("ALCOP_AUTOTUNE")
    assert seeds[0] == Dispatcher(Database(tmp_path / "t.sqlite")).decide(w, SPEC).config
    assert len(seeds) == len(set(seeds)) > 1
    records = d._default_records()
    ranked, detail = transfer_ranking(w, records, SPEC)
    assert transfer(w, records, SPEC) == (ranked[0], detail)
    assert all(shape_reason(w, c, SPEC) is None for c in ranked)


def test_cli_passes_seeding(monkeypatch, tmp_path):
    calls = []

    def fake_tune(workload, target, db, **kw):
        calls.append(kw)
        return TuneResult(workload, kw["tuner"])

    monkeypatch.setattr(session_mod, "tune", fake_tune)
    base = ["tune", "matmul", "64x64x64", "--device", "cpu", "--db", str(tmp_path / "t.sqlite"), "--trials", "2"]
    assert cli.main(base) == 0 and calls[-1]["seeding"] is True
    assert cli.main(base + ["--no-seed"]) == 0 and calls[-1]["seeding"] is False


def test_tune_json_keeps_the_finished_workloads_of_a_stopped_run(monkeypatch, tmp_path):
    def fake_tune(workload, target, db, **kw):
        if workload.shape[0] == 32:
            raise KeyboardInterrupt   # stopped from outside during the second workload
        return TuneResult(workload, kw["tuner"])

    monkeypatch.setattr(session_mod, "tune", fake_tune)
    out = tmp_path / "tune.json"
    args = ["tune", "matmul", "64x64x64", "32x32x32", "--device", "cpu", "--db", str(tmp_path / "t.sqlite"),
            "--trials", "2", "--json", str(out)]
    assert cli.main(args) == cli.EXIT_INTERRUPTED
    run = json.loads(out.read_text())
    assert [e["workload"]["shape"] for e in run["workloads"]] == [[64, 64, 64]] and run["complete"] is False
    monkeypatch.setattr(session_mod, "tune", lambda workload, target, db, **kw: TuneResult(workload, kw["tuner"]))
    assert cli.main(args) == 0
    run = json.loads(out.read_text())
    assert len(run["workloads"]) == 2 and run["complete"] is True


def test_exhaustive_ranking_is_the_models_top(space):
    # Spaces up to FULL_SCORING_LIMIT are scored whole: the picks are exactly the model's best unvisited
    # configs (before, spaces above 2048 configs were annealed: the picks scored at most as high).
    model = XGBoostCostModel(space, pretrain=True)
    scores = model.predict(space.configs)
    exclude = set(space.ranked()[:5])
    picks = SimulatedAnnealingOptimizer(space).find_maximums(model.predict, 8, exclude, np.random.default_rng(0))
    reference = [c for _, i, c in sorted((-s, i, c) for i, (c, s) in enumerate(zip(space.configs, scores)))
                 if c not in exclude][:8]
    assert picks == reference
    annealed = SimulatedAnnealingOptimizer(space, exhaustive_limit=0).find_maximums(
        model.predict, 8, exclude, np.random.default_rng(0))
    ours, theirs = sorted(model.predict(picks), reverse=True), sorted(model.predict(annealed), reverse=True)
    assert all(a <= b for a, b in zip(theirs, ours))


def test_the_last_seed_batch_names_the_models_favourites_as_upcoming(space):
    # Compiled ahead while the last seeds are measured: the first proposals lean on the same prior.
    seeds = _seeds(space)[:4]
    t = make_tuner("analytical+xgb", space, seed_configs=seeds)
    assert t.next_batch(2) == seeds[:2] and t.upcoming[:2] == seeds[2:]
    assert t.next_batch(2) == seeds[2:]
    favourites = [c for c in space.ranked() if c not in seeds][:4]
    assert t.upcoming == favourites  # LOOKAHEAD_BATCHES batches of two


def test_the_learned_model_fits_without_waiting_for_its_preparation(space, monkeypatch):
    # The seeds' measurements are kept while the background thread still prepares; the next prediction
    # waits for it and applies them (a measured config then ranks as measured).
    import threading
    import time

    release = threading.Event()
    prepare = XGBoostCostModel._prepare

    def slow(self, *args):
        release.wait(30)
        prepare(self, *args)

    monkeypatch.setattr(XGBoostCostModel, "_prepare", slow)
    model = XGBoostCostModel(space, pretrain=True)
    fast, slow_config = space.ranked()[-1], space.ranked()[0]
    t0 = time.perf_counter()
    model.fit([fast, slow_config], [1e15, 1e12])  # returns with the preparation still held (30 s)
    assert time.perf_counter() - t0 < 10 and not release.is_set() and model.trained
    threading.Timer(0.2, release.set).start()
    scores = model.predict([fast, slow_config])
    assert scores[0] > scores[1]


# ----------------------------------------------------------------------------- the warp-specialized kernel

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_ws_configs_are_seeded_after_the_untuned_choice(tmp_path, dtype):
    from alcop_triton.autotune.dispatch import ws_seeds
    from alcop_triton.kernels.matmul_ws import ws_configs
    from alcop_triton.model.hardware import get_spec
    h200 = get_spec("H200")
    w = Workload("matmul", (3000, 5000, 4000), dtype, "nt")  # no table measured it
    seeds = Dispatcher(Database(tmp_path / "t.sqlite")).seeds(w, h200)
    ws = ws_seeds(w, h200)
    assert ws == ws_configs(dtype)  # enough tiles for ping-pong and persistence: as measured
    # right after the untuned call's config (and its wave-tail twins where the space holds them): inside the
    # seeds a run measures.
    # The untuned config may be one of them itself (dispatch takes a ws config where a nearby shape
    # measured one fastest); it then stays first and the others follow it.
    rest = [c for c in ws if c != seeds[0]]
    pos = [seeds.index(c) for c in rest]
    assert pos == sorted(pos) and 0 < pos[0] <= 3 and pos[-1] - pos[0] == len(rest) - 1
    assert pos[-1] < SEED_BATCHES * 8
    space = ConfigSpace.build(w, h200)
    assert all(c in space for c in ws)
    t = make_tuner("analytical+xgb", space, seed_configs=seeds)
    assert not set(ws) & set(t.skipped_seeds)


def test_ws_seeds_are_the_configs_the_kernel_runs_as():
    from alcop_triton.autotune.dispatch import ws_seeds
    from alcop_triton.model.hardware import get_spec
    h200 = get_spec("H200")
    # 256 tiles of 128 x 128 (< 2 x 132 SMs): ping-pong runs cooperative; 128 tiles of 128 x 256: no persistence
    mid = Workload("matmul", (512, 8192, 8192), "float16", "nt")
    seeds = ws_seeds(mid, h200)
    assert seeds and not any(c.pingpong for c in seeds)
    assert all(not c.persistent for c in seeds if c.block_m * c.block_n == 128 * 256)
    assert all(c in ConfigSpace.build(mid, h200) for c in seeds)
    for w, spec in ((mid, get_spec("A100")), (mid, h200.with_mma("mma_sync")),
                    (Workload("bmm", (4, 512, 512, 512), "float16", "nn"), h200),
                    (Workload("linear", (512, 8192, 8192), "float16", "nt"), h200),
                    (Workload("matmul", (512, 8192, 8192), "float32", "nt"), h200)):
        assert ws_seeds(w, spec) == []


def test_no_ws_seed_where_the_kernel_does_not_run(tmp_path):
    from alcop_triton.model.hardware import get_spec
    d = Dispatcher(Database(tmp_path / "t.sqlite"))
    for w, spec in ((Workload("matmul", (3000, 5000, 4000), "float32", "nt"), get_spec("H200")),
                    (Workload("bmm", (4, 1000, 1500, 700), "float16", "nt"), get_spec("H200")),
                    (Workload("matmul", (3000, 5000, 4000), "float16", "nt"), get_spec("A100"))):
        assert not any(c.async_copy == "ws" for c in d.seeds(w, spec))
