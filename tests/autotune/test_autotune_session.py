"""A tuning run end to end with a scripted measurer: records stored as they come, resume."""

from __future__ import annotations

from alcop_triton.autotune.database import Database, GpuKey
from alcop_triton.autotune.measure import ErrorKind, MeasureResult
from alcop_triton.autotune.session import Target, tune
from alcop_triton.autotune.space import ConfigSpace
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import Workload

W = Workload("matmul", (512, 512, 1024), "float16", "nt")
TARGET = Target("cuda", get_spec("H100"), GpuKey("H100", "9.0"), "NVIDIA H100 80GB HBM3", "wgmma")


class Scripted:
    """Times grow with block_k; every config with block_m == 16 fails its check."""

    workload = W

    def __init__(self):
        self.seen = []

    def measure(self, configs, on_result=None):
        out = []
        for c in configs:
            self.seen.append(c)
            r = (MeasureResult(c, None, ErrorKind.WRONG_ANSWER, "mismatch") if c.block_m == 16
                 else MeasureResult(c, 0.01 * c.block_k / 16 + 0.001 * c.smem_stages, None, "", "cuda_graph"))
            on_result(r)
            out.append(r)
        return out


def test_records_stored_and_resume(tmp_path):
    db = Database(tmp_path / "t.sqlite")
    m1 = Scripted()
    first = tune(W, TARGET, db, tuner="grid", n_trials=12, batch_size=5, measurer=m1)
    assert len(first.trials) == 12 and len(db) == 12
    recs = db.records(W, TARGET.key)
    assert {r.device for r in recs} == {"NVIDIA H100 80GB HBM3"} and {r.mma for r in recs} == {"wgmma"}
    assert sum(r.error == "wrong_answer" for r in recs) == sum(c.block_m == 16 for c in m1.seen)
    m2 = Scripted()
    second = tune(W, TARGET, db, tuner="grid", n_trials=12, batch_size=5, measurer=m2)
    assert len(second.trials) == 12 and not set(m1.seen) & set(m2.seen)  # nothing measured twice
    assert len(db) == 24
    fresh = Scripted()
    tune(W, TARGET, db, tuner="grid", n_trials=3, measurer=fresh, resume=False, seeding=False)
    assert fresh.seen == list(ConfigSpace.build(W, TARGET.spec).configs[:3])  # grid order from the start


def test_learned_tuner_end_to_end(tmp_path):
    db = Database(tmp_path / "t.sqlite")
    res = tune(W, TARGET, db, tuner="analytical+xgb", n_trials=16, batch_size=8, measurer=Scripted(), seed=1,
               top_k=300)
    assert len(res.trials) == 16 and res.best.result.ok
    assert db.best(W, TARGET.key).time_ms == res.best.result.time_ms  # (configs may tie on time)
