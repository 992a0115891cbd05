"""Auto-tuning: config spaces, measurement, tuners, the tuning database and call-time dispatch.

Layout (TVM autotvm style, one concern per file):
    space.py       ConfigSpace: knobs per op, static + model pruning, ablation variants
    measure.py     MeasureResult/ErrorKind; LocalMeasurer, ProcessMeasurer (isolated, timeouts)
    precompile.py  CompilePool: a batch's kernels compiled in worker processes before it is measured
    cost_model.py  CostModel protocol; analytical and XGBoost adapters
    optimizer.py   simulated annealing over a cost model
    tuner.py       grid, random, xgb, analytical, analytical+xgb
    database.py    SQLite (WAL) store of every measurement, JSONL interchange
    db_postgres.py the same store on a PostgreSQL server a team shares, read through a local mirror
    store.py       TuningStore (what either backend offers), open_database(location), copy_records
    dispatch.py    best_config(workload, gpu_spec): DB -> shipped table -> nearest -> analytical
    replay.py      tuners against recorded measurements; best-in-k comparisons
    session.py     one tuning run end to end (used by the CLI and ALCOP_AUTOTUNE=1)
    workers.py     several GPUs: a worker per GPU (LocalGpuPool), batches and workloads spread over them
    dask_pool.py   the workers of a Dask scheduler on many hosts (the ``distributed`` extra)
    devices.py     the device a measurement names (GpuIdentity) and the workers' calibration kernel
    timing.py      the run's time split: start, space, model, compile, measure, other
    capture.py     GEMM/conv workloads of a torch model; bench.py, report.py: CLI helpers
"""

from __future__ import annotations

from .database import Database, GpuKey, RecordSkipped, TuningRecord, default_db_path, read_jsonl
from .dispatch import Decision, Dispatcher, best_config
from .measure import ErrorKind, LocalMeasurer, MeasureResult, ProcessMeasurer
from .replay import Comparison, ReplayMeasurer, compare_tuners, load_tasks
from .space import VARIANTS, ConfigSpace, Knobs
from .store import TuningStore, copy_records, open_database
from .tuner import TUNERS, TuneResult, make_tuner

__all__ = ["Database", "GpuKey", "RecordSkipped", "TuningRecord", "default_db_path", "read_jsonl", "Decision",
           "Dispatcher", "best_config", "ErrorKind", "LocalMeasurer", "MeasureResult", "ProcessMeasurer",
           "Comparison", "ReplayMeasurer", "compare_tuners", "load_tasks", "VARIANTS", "ConfigSpace", "Knobs",
           "TUNERS", "TuneResult", "make_tuner", "TuningStore", "copy_records", "open_database"]
