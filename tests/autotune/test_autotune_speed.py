"""Tuning speed machinery: early stop, the parallel compile pool ahead of measurement, the time split."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import test_autotune_session as session_test

from alcop_triton.autotune.database import Database
from alcop_triton.autotune.measure import ErrorKind, MeasureResult
from alcop_triton.autotune.precompile import CompilePool, PrecompilingMeasurer
from alcop_triton.autotune.session import tune
from alcop_triton.autotune.space import ConfigSpace
from alcop_triton.autotune.timing import PHASES, Timings
from alcop_triton.autotune.tuner import EarlyStop, Trial
from alcop_triton.errors import ScheduleError
from alcop_triton.records import KernelConfig

HERE = os.path.dirname(os.path.abspath(__file__))
W, TARGET = session_test.W, session_test.TARGET
COMPILER = "alcop_fake_compiler:compile_config"


class Scripted(session_test.Scripted):
    """The session tests' scripted measurer (times grow with block_k and stages; block_m == 16 fails its
    check). ``compiled``: a directory in which every config must have been compiled before it is
    measured (but those the fake compiler fails)."""

    def __init__(self, compiled: Path | None = None):
        super().__init__()
        self.compiled = compiled

    def measure(self, configs, on_result=None):
        for c in configs:
            if self.compiled is not None and c.block_n != 16 and c.block_k != 128:
                assert (self.compiled / str(c)).exists(), f"{c} measured before it was compiled"
        return super().measure(configs, on_result)


class Calibrated:
    """Times the analytical model predicts, 30% slower: the model is right about the order."""

    workload = W

    def __init__(self):
        self.space = ConfigSpace.build(W, TARGET.spec)
        self.est = dict(zip(self.space.configs, self.space.estimates()))

    def measure(self, configs, on_result=None):
        out = [MeasureResult(c, self.est[c] * 1.3e3, None, "", "cuda_graph") for c in configs]
        for r in out:
            on_result(r)
        return out


def _trials(times):
    c = KernelConfig()
    return [Trial(i, MeasureResult(c, t, None if t else ErrorKind.COMPILE), 1.0 / t if t else 0.0)
            for i, t in enumerate(times)]


def test_stalled_rule():
    rule = EarlyStop(patience=4, min_gain=0.01, min_trials=6)
    assert not rule.stalled(_trials([1.0] * 5))                       # fewer than min_trials
    assert rule.stalled(_trials([2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]))  # best found 5 trials ago
    assert not rule.stalled(_trials([2.0, 1.0, 1.0, 1.0, 0.9, 1.0]))   # 10% better within the last 4
    assert rule.stalled(_trials([1.0, 1.0, 1.0, 1.0, 0.995, 1.0, 1.0]))  # 0.5% is within min_gain
    assert not rule.stalled(_trials([None] * 8))                      # nothing valid yet: go on
    with pytest.raises(ScheduleError):
        EarlyStop(patience=0)


@pytest.mark.parametrize("tuner", ["analytical", "analytical+xgb"])
def test_early_stop_ends_before_budget(tmp_path, tuner):
    # Two databases: a run is seeded with what dispatch knows, the other run's records included.
    db, db_stop = Database(tmp_path / "t.sqlite"), Database(tmp_path / "stop.sqlite")
    measurer = Calibrated()
    full = tune(W, TARGET, db, tuner=tuner, n_trials=40, batch_size=4, measurer=measurer, seed=1, resume=False)
    stop = tune(W, TARGET, db_stop, tuner=tuner, n_trials=40, batch_size=4, measurer=measurer, seed=1, resume=False,
                early_stop=EarlyStop(patience=8, min_trials=8))
    assert not full.early_stopped and len(full.trials) == 40
    assert stop.early_stopped and 8 < len(stop.trials) < 40
    # Up to the stop, the same proposals as without the rule, and nothing after it was faster by more than
    # what the rule counts as progress (``min_gain``).
    assert [t.config for t in stop.trials] == [t.config for t in full.trials][: len(stop.trials)]
    assert full.best.result.time_ms <= stop.best.result.time_ms <= full.best.result.time_ms * (1 + EarlyStop().min_gain)
    assert len(db) == 40 and len(db_stop) == len(stop.trials)


def test_no_early_stop_while_proposals_may_be_faster(tmp_path):
    # Times the analytical model cannot explain (they grow with block_k): the most favourable error
    # seen keeps some proposal ahead of the best, so the rule never fires although progress stalls. (Not
    # seeded: dispatch's configs have small block_k, the fastest here, and would end the run early.)
    res = tune(W, TARGET, Database(tmp_path / "t.sqlite"), tuner="grid", n_trials=30, batch_size=5,
               measurer=Scripted(), early_stop=EarlyStop(patience=4, min_trials=4), seeding=False)
    assert not res.early_stopped and len(res.trials) == 30


def test_time_split_covers_the_call(tmp_path):
    res = tune(W, TARGET, Database(tmp_path / "t.sqlite"), tuner="analytical+xgb", n_trials=8, batch_size=4,
               measurer=Scripted(), top_k=100)
    split = res.timings
    assert set(split) == set(PHASES) | {"total"}
    assert all(v >= 0 for v in split.values())
    assert split["space"] > 0 and split["model"] > 0 and split["measure"] > 0 and split["compile"] == 0
    assert sum(split[p] for p in PHASES) == pytest.approx(split["total"])
    t = Timings()
    with pytest.raises(KeyError):
        t.add("lunch", 1.0)


@pytest.fixture
def compiled_dir(tmp_path, monkeypatch):
    # Spawned workers inherit sys.path and the environment: they import the fake compiler and find the directory.
    monkeypatch.syspath_prepend(HERE)
    d = tmp_path / "compiled"
    d.mkdir()
    monkeypatch.setenv("ALCOP_TEST_COMPILED", str(d))
    return d


def test_pool_compiles_before_measuring_and_survives_a_crash(compiled_dir):
    ok = [KernelConfig(64, 64, 32, smem_stages=s) for s in (2, 3, 4)]
    raising = KernelConfig(64, 16, 32)
    crashing = KernelConfig(64, 64, 128)
    with CompilePool(W, "cuda", workers=2, compiler=COMPILER, timeout_s=60) as pool:
        pool.wait(ok + [raising])
        assert all((compiled_dir / str(c)).exists() for c in ok)
        assert pool.compiled == 3 and "ptxas error" in pool.errors[raising]
        pool.wait([crashing])                      # the worker dies: recorded, the pool restarts
        assert "died" in pool.errors[crashing]
        later = KernelConfig(128, 64, 32)
        measurer = PrecompilingMeasurer(Scripted(compiled_dir), pool, lambda: [KernelConfig(128, 128, 32)])
        results = measurer.measure([later], lambda r: None)
        assert [r.config for r in results] == [later] and (compiled_dir / str(later)).exists()
        assert measurer.compile_s > 0 and measurer.measure_s >= 0
        pool.wait([KernelConfig(128, 128, 32)])    # the lookahead was queued
        assert (compiled_dir / str(KernelConfig(128, 128, 32))).exists()


def test_a_batch_is_measured_as_its_compiles_end(compiled_dir, monkeypatch):
    # A slow compile holds back only its own config: the others are measured while it compiles.
    monkeypatch.setenv("ALCOP_TEST_SLOW_S", "3")
    slow = KernelConfig(64, 64, 32, smem_stages=7)
    fast = [KernelConfig(64, 64, 32, smem_stages=s) for s in (2, 3)]
    calls: list[tuple[list[KernelConfig], bool]] = []

    class Recording(Scripted):
        def measure(self, configs, on_result=None):
            calls.append((list(configs), (compiled_dir / str(slow)).exists()))
            return super().measure(configs, on_result)

    with CompilePool(W, "cuda", workers=3, compiler=COMPILER, timeout_s=60) as pool:
        pool.wait([KernelConfig(128, 64, 32)])  # the workers are up
        results = PrecompilingMeasurer(Recording(compiled_dir), pool).measure([slow, *fast], lambda r: None)
    assert sorted(map(str, (r.config for r in results))) == sorted(map(str, [slow, *fast]))
    first, slow_compiled = calls[0]
    assert slow not in first and not slow_compiled and calls[-1][0] == [slow]


def test_session_compiles_ahead(compiled_dir, tmp_path):
    db = Database(tmp_path / "t.sqlite")
    m = Scripted(compiled_dir)
    res = tune(W, TARGET, db, tuner="analytical+xgb", n_trials=12, batch_size=4, measurer=m, top_k=150,
               compile_workers=2, compiler=COMPILER)
    assert len(res.trials) == 12 and res.timings["compile"] > 0
    # Every measured config was compiled first (Scripted checks it); the lookahead compiled more.
    assert len(list(compiled_dir.iterdir())) >= len([c for c in m.seen if c.block_n != 16 and c.block_k != 128])
    assert len(db) == 12 and sum(r.error is not None for r in db.records()) == sum(c.block_m == 16 for c in m.seen)


@pytest.mark.interpreter  # binds CPU tensors
@pytest.mark.parametrize("config", [KernelConfig(128, 128, 64, 8, 8, 4), KernelConfig(64, 256, 64, 8, 8, 3, async_copy="tma"),
                                    KernelConfig(128, 64, 64, 8, 4, 1, reg_stages=2, reg_split=2)])
def test_kernel_source_does_not_depend_on_the_shape(config):
    # Compile reuse across shapes rests on it: Triton's cache key is the source plus the specialisation.
    import torch

    from alcop_triton.kernels import matmul as mm

    kernel = mm.compiled("float16", False, mm.Epilogue(), config)
    sources = set()
    for m, n, k in [(2304, 1792, 2816), (1970, 2304, 768), (896, 2560, 2560)]:
        kernel.bind(torch.empty(m, k, dtype=torch.float16), torch.empty(n, k, dtype=torch.float16).t())
        sources.add(kernel.last.source)
    assert len(sources) == 1


def test_helpers_start_with_the_environment_of_the_moment_they_are_made(monkeypatch):
    # On a GPU the helpers are forked from a server that started earlier (helper_context): each takes its
    # parent's environment and sys.path as they are when it is made, as a spawned child would.
    import multiprocessing

    from alcop_triton.autotune.measure import helper_context

    if "forkserver" in multiprocessing.get_all_start_methods():
        assert helper_context("cuda").get_start_method() == "forkserver"
    assert helper_context("cpu").get_start_method() == "spawn"
    for mark in ("first", "second"):
        monkeypatch.setenv("ALCOP_TEST_MARK", mark)
        with CompilePool(W, "cuda", workers=1, compiler=COMPILER, timeout_s=60) as pool:
            assert pool._pool is not None
            worker_env = pool._pool.submit(os.getenv, "ALCOP_TEST_MARK")
            assert worker_env.result(timeout=60) == mark
