"""The many-hosts path on CPU: a Dask LocalCluster of two worker processes (one thread each) standing in for
two GPU hosts, interpreter-sized trials; skipped where Dask is not installed."""

from __future__ import annotations

import os
import sys

import pytest

from alcop_triton.autotune.dask_pool import INSTALL_HINT, DaskPool, import_distributed
from alcop_triton.autotune.database import Database
from alcop_triton.autotune.workers import MeasureOptions, calibrate, tune_workloads
from alcop_triton.errors import TuningError
from alcop_triton.records import Workload

HERE = os.path.dirname(os.path.abspath(__file__))


def test_missing_dask_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # an import of it fails, as where it is not installed
    with pytest.raises(TuningError, match=r"alcop_triton\[distributed\]"):
        import_distributed()
    with pytest.raises(TuningError, match="dask-cuda"):
        DaskPool("tcp://127.0.0.1:1")
    assert "pip install" in INSTALL_HINT


def test_local_cluster_two_workers(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed "
                                                            "(pip install 'alcop_triton[distributed]')")
    import dask

    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the worker processes take this environment
    w = Workload("matmul", (32, 32, 32), "float16", "nn")
    opts = MeasureOptions(device="cpu", compile_threads=1, calibration="alcop_scripted_workers:calibration")
    db = Database(tmp_path / "t.sqlite")
    # A measurement worker starts processes of its own: Dask's worker processes must not be daemonic.
    with dask.config.set({"distributed.worker.daemon": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                     worker_dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        with DaskPool(client, device="cpu", min_workers=2) as pool:
            cal = calibrate(pool, opts)
            assert cal.group == pool.labels and len(pool.labels) == 2
            (_, res), = tune_workloads([w], pool, db, options=opts, calibration=cal, tuner="grid", n_trials=4,
                                       batch_size=4, top_k=4, seeding=False)
    assert len(res.trials) == 4 and all(t.result.ok and t.result.timer == "perf_counter" for t in res.trials)
    recs = db.records(w)
    # The batch was split over both workers; each record names the worker (its address) that measured it.
    assert {r.measured_on.uuid for r in recs} == {f"cpu-{a}" for a in pool.labels}
