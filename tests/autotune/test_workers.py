"""Tuning over a pool of measurement workers: the calibration rule, one decision stream whatever the number
of workers, lanes of workloads, a lost worker, and interpreter workers standing in for GPUs."""

from __future__ import annotations

import concurrent.futures
import math
import os
import threading
from concurrent.futures.process import BrokenProcessPool

import pytest

from alcop_triton.autotune import workers
from alcop_triton.autotune.database import Database
from alcop_triton.autotune.devices import CPU_NAME, GpuIdentity
from alcop_triton.autotune.workers import (Calibration, LocalGpuPool, MeasureOptions, PoolMeasurer, WorkerReport,
                                           calibrate, lanes, off_workers, parse_gpus, tune_workloads)
from alcop_triton.errors import TuningError
from alcop_triton.records import KernelConfig, Workload

HERE = os.path.dirname(os.path.abspath(__file__))
W = Workload("matmul", (512, 512, 1024), "float16", "nt")
SCRIPTED = MeasureOptions(device="cpu", measurer="alcop_scripted_workers:measurer",
                          calibration="alcop_scripted_workers:calibration")


@pytest.fixture(autouse=True)
def _doubles_importable(monkeypatch, tmp_path):
    # Spawned workers take this process's sys.path and environment when the pool is made.
    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setenv("ALCOP_TEST_MEASURED", str(tmp_path / "measured.txt"))


def _report(worker: str, ms: float, name: str = "NVIDIA H200") -> WorkerReport:
    return WorkerReport(worker, GpuIdentity(f"GPU-{worker}", name, 1980, "550.54.15"), ms)


def _measured(tmp_path) -> list[tuple[str, str]]:
    path = tmp_path / "measured.txt"
    return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()] if path.exists() else []


# ---------------------------------------------------------------------------------------------- the rule

def test_off_workers_lower_median_and_tolerance():
    reports = [_report("g0", 1.0), _report("g1", 1.029), _report("g2", 0.99), _report("g3", 1.05)]
    # Times sorted: 0.99, 1.0, 1.029, 1.05: the lower median is g0's 1.0; 1.029 is within 3 %, 1.05 is not.
    off = off_workers(reports)
    assert list(off) == ["g3"] and "+5.0%" in off["g3"] and "g0" in off["g3"]
    # Two workers: the lower median is the faster; the slower is off beyond 3 %.
    assert list(off_workers([_report("g0", 1.0), _report("g1", 1.031)])) == ["g1"]
    assert off_workers([_report("g0", 1.0), _report("g1", 1.029)]) == {}
    # Three: a worker 3.1 % faster than the median is off too.
    assert list(off_workers([_report("g0", 1.0), _report("g1", 0.969), _report("g2", 1.01)])) == ["g1"]


def test_off_workers_two_far_apart_keeps_the_faster():
    # With two workers the reference is the faster one's own time: the group is never empty.
    off = off_workers([_report("g0", 1.2), _report("g1", 1.0)])
    assert list(off) == ["g0"]
    cal = Calibration((_report("g0", 1.2), _report("g1", 1.0)), off)
    assert cal.group == ["g1"] and cal.reference.worker == "g1"
    assert any("LEFT OUT" in line for line in cal.describe())


def test_off_workers_other_gpu_model_and_bad_times():
    reports = [_report("g0", 1.0), _report("g1", 1.0, "NVIDIA H100 80GB HBM3"), _report("g2", math.nan),
               _report("g3", 1.0)]
    off = off_workers(reports)
    assert set(off) == {"g1", "g2"} and "H100" in off["g1"] and "not a time" in off["g2"]
    assert off_workers([_report("g0", 7.0)]) == {}  # one worker: nothing is mixed
    with pytest.raises(TuningError, match="no worker timed"):
        off_workers([_report("g0", math.nan), _report("g1", math.inf)])


def test_lanes_and_gpus_argument():
    assert lanes(["a", "b", "c", "d"], 1) == [["a", "b", "c", "d"]]
    assert lanes(["a", "b", "c", "d"], 2) == [["a", "c"], ["b", "d"]]
    assert lanes(["a", "b", "c"], 10) == [["a"], ["b"], ["c"]]
    assert parse_gpus("all") is None and parse_gpus("ALL") is None and parse_gpus("3") == 3
    for bad in ("0", "-1", "two", "1.5", ""):
        with pytest.raises(TuningError, match="--gpus"):
            parse_gpus(bad)
    with pytest.raises(TuningError, match="number of workers"):
        LocalGpuPool(None, device="cpu")
    with pytest.raises(TuningError, match="device"):
        MeasureOptions(device="cuda:1")


# ---------------------------------------------------------------------------------------------- a pool

def _tune(tmp_path, n_workers: int, name: str, **kw):
    db = Database(tmp_path / f"{name}.sqlite")
    with LocalGpuPool(n_workers, device="cpu") as pool:
        cal = calibrate(pool, SCRIPTED)
        results = tune_workloads([W], pool, db, options=SCRIPTED, calibration=cal, **kw)
    return cal, results[0][1], db


def test_pool_makes_the_same_decisions_as_one_worker(tmp_path, monkeypatch):
    kw = dict(tuner="analytical+xgb", n_trials=24, batch_size=8, seed=3, top_k=200)
    _, one, db1 = _tune(tmp_path, 1, "one", **kw)
    by_one = {c for _, c in _measured(tmp_path)}
    (tmp_path / "measured.txt").unlink()
    cal, three, db3 = _tune(tmp_path, 3, "three", **kw)
    assert cal.group == ["cpu0", "cpu1", "cpu2"]
    # One decision stream: the same configs in the same order, the same best.
    assert [t.config for t in three.trials] == [t.config for t in one.trials]
    assert [t.result.time_ms for t in three.trials] == [t.result.time_ms for t in one.trials]
    assert three.best.config == one.best.config and three.best.result.ok
    # ... measured by all three workers, each record naming the worker that measured it.
    measured = _measured(tmp_path)
    assert {w for w, _ in measured} == {"cpu0", "cpu1", "cpu2"} and {c for _, c in measured} == by_one
    by_worker = {c: w for w, c in measured}
    recs = db3.records(W)
    assert len(recs) == 24 and all(r.measured_on.uuid == f"cpu-{by_worker[str(r.config)]}" for r in recs)
    assert {r.device for r in recs} == {CPU_NAME}
    assert {r.measured_on.uuid for r in db1.records(W)} == {"cpu-cpu0"}


def test_worker_off_calibration_measures_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ALCOP_TEST_CALIBRATION", "cpu0=1.0,cpu1=1.06,cpu2=1.01")
    cal, res, db = _tune(tmp_path, 3, "off", tuner="grid", n_trials=12, batch_size=6, seeding=False)
    # Sorted 1.0, 1.01, 1.06: the reference is cpu2's 1.01; cpu1 is 5 % slower.
    assert list(cal.off) == ["cpu1"] and "+5.0%" in cal.off["cpu1"] and "cpu2" in cal.off["cpu1"]
    assert cal.to_dict()["workers"][1]["off"] == cal.off["cpu1"]
    measured = _measured(tmp_path)
    assert len(measured) == 12 and {w for w, _ in measured} == {"cpu0", "cpu2"}
    assert "cpu-cpu1" not in {r.measured_on.uuid for r in db.records(W)}


def test_workloads_spread_over_lanes(tmp_path):
    other = Workload("matmul", (256, 512, 1024), "float16", "nt")
    db = Database(tmp_path / "t.sqlite")
    done = []
    with LocalGpuPool(2, device="cpu") as pool:
        results = tune_workloads([W, other], pool, db, options=SCRIPTED, on_done=lambda w, r: done.append(w),
                                 tuner="grid", n_trials=6, batch_size=3, seeding=False)
    assert [w for w, _ in results] == [W, other] and sorted(done, key=str) == sorted([W, other], key=str)
    # Two lanes of one worker each: every workload measured wholly on one worker.
    for w in (W, other):
        assert len({r.measured_on.uuid for r in db.records(w)}) == 1
    assert {r.measured_on.uuid for r in db.records()} == {"cpu-cpu0", "cpu-cpu1"}


# ---------------------------------------------------------------------------------------------- a lost worker

class _ThreadPool:
    """The pool seam in this process: worker "bad" fails every call (a worker lost mid-run)."""

    device = "cpu"

    def __init__(self, labels):
        self.labels = labels
        self._ex = concurrent.futures.ThreadPoolExecutor(1)

    def submit(self, fn, *args, worker):
        if worker == "bad":
            f = concurrent.futures.Future()
            f.set_exception(BrokenProcessPool("worker died"))
            return f
        return self._ex.submit(fn, *args)

    def close(self):
        self._ex.shutdown()


def test_lost_worker_slice_measured_again_elsewhere_then_the_run_ends(tmp_path):
    configs = [KernelConfig(block_m=64, block_n=64, block_k=k) for k in (16, 32, 64)] + [KernelConfig(block_m=16)]
    pool = _ThreadPool(["good", "bad"])
    try:
        seen = []
        out = PoolMeasurer(pool, ["good", "bad"], W, SCRIPTED).measure(configs, seen.append)
        assert [r.config for r in out] == configs and seen == out  # the batch's order
        assert [r.ok for r in out] == [True, True, True, False]  # block_m=16 fails its check, as scripted
        # A worker lost twice ends the run: its configs are not recorded as failed (no fault of theirs).
        seen = []
        with pytest.raises(TuningError, match="worker died.*again on"):
            PoolMeasurer(pool, ["bad", "bad"], W, SCRIPTED).measure(configs, seen.append)
        assert seen == []
    finally:
        pool.close()
        workers.close_worker()


def test_stop_flag_interrupts_the_run(tmp_path):
    stop = threading.Event()
    stop.set()
    db = Database(tmp_path / "t.sqlite")
    with LocalGpuPool(1, device="cpu") as pool:
        results = tune_workloads([W], pool, db, options=SCRIPTED, stop=stop, tuner="grid", n_trials=4)
    assert results == [] and len(db) == 0


# ---------------------------------------------------------------------------------------------- the interpreter

def test_interpreter_workers_measure_real_kernels(tmp_path):
    """Two interpreter workers standing in for GPUs run the real measurement path (kernels checked against
    torch, timed): the same configs as one worker, each record naming its worker, none failed."""
    w = Workload("matmul", (32, 32, 32), "float16", "nn")
    opts = MeasureOptions(device="cpu", compile_threads=1, calibration="alcop_scripted_workers:calibration")
    runs = {}
    for n in (1, 2):
        db = Database(tmp_path / f"{n}.sqlite")
        with LocalGpuPool(n, device="cpu") as pool:
            (_, res), = tune_workloads([w], pool, db, options=opts, tuner="grid", n_trials=4, batch_size=4,
                                       top_k=4, seeding=False)
        runs[n] = (res, db.records(w))
    (one, recs1), (two, recs2) = runs[1], runs[2]
    assert [t.config for t in two.trials] == [t.config for t in one.trials]
    assert all(t.result.ok and t.result.timer == "perf_counter" for t in one.trials + two.trials)
    assert {r.measured_on.uuid for r in recs2} == {"cpu-cpu0", "cpu-cpu1"}
    assert {r.measured_on.uuid for r in recs1} == {"cpu-cpu0"} and {r.gpu for r in recs2} == {"interpreter"}
