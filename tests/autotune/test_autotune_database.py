"""Tuning database: round trip, validation on read, concurrency, atomic export, queries."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sqlite3

import pytest

from alcop_triton.autotune import database as dbmod
from alcop_triton.autotune.database import (Database, RecordSkipped, TuningRecord, atomic_write_text, default_db_path,
                                            read_jsonl, versions)
from alcop_triton.autotune.measure import ErrorKind, MeasureResult
from alcop_triton.errors import DatabaseError
from alcop_triton.records import KernelConfig, Workload

H100 = ("H100", (9, 0))
W = Workload("matmul", (1024, 768, 3072), "float16", "nt")


def rec(config: KernelConfig, ms: float | None, w: Workload = W, gpu=H100, error: ErrorKind | None = None):
    return TuningRecord.from_result(w, MeasureResult(config, ms, error, "x" if error else ""), gpu)


def test_round_trip_and_best(tmp_path):
    db = Database(tmp_path / "t.sqlite")
    a, b, bad = KernelConfig(block_m=128), KernelConfig(block_m=64), KernelConfig(block_m=32)
    db.add([rec(a, 0.02), rec(b, 0.03), rec(a, 0.025), rec(bad, 0.001),
            rec(bad, None, error=ErrorKind.WRONG_ANSWER)])
    assert len(db) == 5  # every measurement kept, not only the best
    best = db.best(W, H100)
    # bad is fastest but failed once: never chosen. a's median of two runs is reported.
    assert best.config == a and best.count == 2 and math.isclose(best.time_ms, 0.0225)
    assert db.best(W, ("A100", (8, 0))) is None
    assert db.best(Workload("matmul", (1024, 768, 3072), "float16", "nn"), H100) is None
    assert [r.to_dict() for r in db.records(W, H100)][0] == rec(a, 0.02).to_dict()


def test_prefers_current_versions(tmp_path, monkeypatch):
    db = Database(tmp_path / "t.sqlite")
    old = dict(versions(), triton="3.0.0")
    old_rec = TuningRecord.from_result(W, MeasureResult(KernelConfig(block_m=32), 0.001), H100, vers=old)
    db.add([old_rec, rec(KernelConfig(block_m=64), 0.01)])
    assert db.best(W, H100).config.block_m == 64
    db2 = Database(tmp_path / "old.sqlite")
    db2.add(old_rec)
    assert db2.best(W, H100).config.block_m == 32  # old data beats no data


def test_persistent_configs_round_trip_and_stay_distinct(tmp_path):
    pers, plain = KernelConfig(block_m=128, persistent=True), KernelConfig(block_m=128)
    r = rec(pers, 0.01)
    assert r.to_dict()["config"]["PERSISTENT"] is True and "PERSISTENT" not in rec(plain, 0.02).to_dict()["config"]
    assert dbmod.parse_line(r.to_json()).config == pers
    db = Database(tmp_path / "t.sqlite")
    db.add([r, rec(plain, 0.02), rec(plain, 0.03)])
    assert db.best(W, H100).config == pers and db.best(W, H100).count == 1  # not merged with the plain config
    assert {x.config for x in db.records(W, H100)} == {pers, plain}


@pytest.mark.parametrize("mutate, why", [
    (lambda d: "{not json", "bad JSON"),
    (lambda d: json.dumps({**d, "config": {**d["config"], "BLOCK_M": 48}}), "power of two"),
    (lambda d: json.dumps({**d, "config": {**d["config"], "EVIL": 1}}), "unknown"),
    (lambda d: json.dumps({**d, "config": {**d["config"], "PERSISTENT": 1}}), "expected bool"),
    (lambda d: json.dumps({**d, "time_ms": -1.0}), "time"),
    (lambda d: json.dumps({**d, "time_ms": float("nan")}), "time"),
    (lambda d: json.dumps({**d, "time_ms": None}), "time"),
    (lambda d: json.dumps({**d, "schema": 99}), "schema"),
    (lambda d: json.dumps({**d, "error": "exploded", "time_ms": None}), "error"),
    (lambda d: json.dumps({**d, "gpu": ""}), "gpu"),
    (lambda d: json.dumps({**d, "workload": {**d["workload"], "op": "softmax"}}), "op"),
    (lambda d: json.dumps([d]), "JSON object"),
])
def test_corrupt_jsonl_lines_are_skipped(tmp_path, mutate, why):
    good = rec(KernelConfig(), 0.01).to_dict()
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(good) + "\n" + mutate(good) + "\n\n" + json.dumps(good) + "\n")
    with pytest.warns(RecordSkipped, match=why):
        records = read_jsonl(path)
    assert len(records) == 2


def test_tampered_sqlite_rows_are_skipped(tmp_path):
    db = Database(tmp_path / "t.sqlite")
    db.add([rec(KernelConfig(block_m=128), 0.05), rec(KernelConfig(block_m=64), 0.04),
            rec(KernelConfig(block_m=32), 0.03)])
    conn = sqlite3.connect(db.path)
    # A faster but invalid config injected into the JSON, and a row moved to another key by hand.
    conn.execute("UPDATE measurements SET record = replace(record, '\"BLOCK_M\": 32', '\"BLOCK_M\": 24') WHERE id = 3")
    conn.execute("UPDATE measurements SET shape = '1x1x1' WHERE id = 2")
    conn.commit()
    conn.close()
    with pytest.warns(RecordSkipped) as caught:
        best = db.best(W, H100)
    assert best.config.block_m == 128
    # the moved row no longer matches the query, the tampered one is skipped
    assert len(caught) == 1 and "1 tuning record(s) skipped: id=3:" in str(caught[0].message)
    with pytest.warns(RecordSkipped) as caught:
        assert len(db.records()) == 1
    assert len(caught) == 1  # one warning per read: how many, and which rows
    msg = str(caught[0].message)
    assert "2 tuning record(s) skipped" in msg and "id=2: index columns" in msg and "disagree" in msg


def test_newer_schema_refused(tmp_path):
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    with pytest.raises(DatabaseError, match="newer"):
        len(Database(path))


def test_not_a_database(tmp_path):
    path = tmp_path / "t.sqlite"
    path.write_text("hello, this is not sqlite" * 100)
    with pytest.raises(DatabaseError, match="not a usable"):
        len(Database(path))


def _writer(path: str, worker: int, n: int) -> None:
    db = Database(path)
    for i in range(n):
        db.add(rec(KernelConfig(block_m=16 << (i % 5), group_m=worker + 1), 0.01 + i * 1e-4))


def test_eight_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    n = 25
    ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, n)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    records = Database(path).records()
    assert len(records) == 8 * n
    per_worker = {w + 1: sum(r.config.group_m == w + 1 for r in records) for w in range(8)}
    assert set(per_worker.values()) == {n}


def test_failed_run_leaves_database_intact(tmp_path):
    from alcop_triton.autotune.database import GpuKey
    from alcop_triton.autotune.session import Target, tune
    from alcop_triton.model.hardware import get_spec

    class DiesOnThirdBatch:
        workload = W
        batches = 0

        def measure(self, configs, on_result=None):
            self.batches += 1
            if self.batches == 3:
                raise RuntimeError("GPU fell off the bus")
            out = [MeasureResult(c, 0.01 * (i + 1)) for i, c in enumerate(configs)]
            for r in out:
                on_result(r)
            return out

    db = Database(tmp_path / "t.sqlite")
    db.add(rec(KernelConfig(), 0.5))
    target = Target("cpu", get_spec("H100"), GpuKey("H100", "9.0"), "fake", "wgmma")
    with pytest.raises(RuntimeError, match="bus"):
        tune(W, target, db, tuner="grid", n_trials=20, batch_size=4, measurer=DiesOnThirdBatch())
    records = Database(db.path).records()
    assert len(records) == 1 + 2 * 4  # what was measured before the failure, and nothing half-written
    assert all(r.device == "fake" and r.gpu == "H100" for r in records[1:])


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "out.jsonl"
    atomic_write_text(path, "old\n")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(dbmod.os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temp file left behind


def test_import_jsonl(tmp_path):
    path = tmp_path / "d.jsonl"
    far = Workload("matmul", (64, 64, 8192), "float16", "nt")
    near = Workload("matmul", (1024, 1024, 1024), "float16", "nt")
    lines = [rec(KernelConfig(block_m=16), 0.1, far), rec(KernelConfig(block_m=128), 0.2, near),
             rec(KernelConfig(block_m=64), 0.1, near), rec(KernelConfig(block_m=64), 0.1, near, ("A100", (8, 0)))]
    path.write_text("".join(r.to_json() + "\n" for r in lines))
    db = Database(tmp_path / "t.sqlite")
    assert db.import_jsonl(path) == 4
    assert len(db.records(gpu=H100)) == 3 and set(db.workloads(H100)) == {far, near}


def test_default_path_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "x.sqlite"))
    assert default_db_path() == tmp_path / "x.sqlite"
    assert Database().path == tmp_path / "x.sqlite"
    monkeypatch.delenv("ALCOP_DB")
    assert default_db_path().name == "tuning.sqlite"


def test_library_baseline_lines_are_not_tuning_records(tmp_path, recwarn):
    torch_line = {"workload": W.to_dict(), "config": None, "impl": "torch", "time_ms": 0.01, "error": None,
                  "gpu": "H100", "cc": "9.0"}
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(torch_line) + "\n" + rec(KernelConfig(), 0.02).to_json() + "\n")
    records = read_jsonl(path)
    assert len(records) == 1 and records[0].to_dict()["impl"] == "alcop"
    assert not [w for w in recwarn if issubclass(w.category, RecordSkipped)]  # valid lines, silently passed over


def test_mma_paths_do_not_mix(tmp_path):
    from alcop_triton.autotune.database import select
    from alcop_triton.model.hardware import get_spec

    spec = get_spec("H100")  # wgmma
    wg = TuningRecord.from_result(W, MeasureResult(KernelConfig(block_m=128), 0.02), spec, mma="wgmma")
    ms = TuningRecord.from_result(W, MeasureResult(KernelConfig(block_m=64), 0.01), spec, mma="mma_sync")
    db = Database(tmp_path / "t.sqlite")
    db.add([wg, ms])
    assert db.best(W, spec).config.block_m == 128
    assert db.best(W, spec.with_mma("mma_sync")).config.block_m == 64
    assert len(db.records(W, H100)) == 2 and select([wg, ms], W, spec) == [wg]  # a bare key selects both


def test_torch_baseline_time_joins_the_records_and_round_trips(tmp_path):
    torch_line = {"workload": W.to_dict(), "config": None, "impl": "torch", "time_ms": 0.015, "error": None,
                  "gpu": "H100", "cc": "9.0"}
    other = Workload("matmul", (64, 64, 64), "float16", "nt")
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(torch_line) + "\n" + rec(KernelConfig(), 0.02).to_json() + "\n"
                    + rec(KernelConfig(), 0.01, w=other).to_json() + "\n")
    mine, unmeasured = read_jsonl(path)
    assert mine.torch_ms == 0.015 and unmeasured.torch_ms is None  # no baseline for that workload: unknown
    db = Database(tmp_path / "t.sqlite")
    db.add([mine, unmeasured])
    assert [r.torch_ms for r in db.records()] == [0.015, None]
    assert "torch_ms" not in unmeasured.to_dict()  # older readers see the documented format unchanged


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "fast", True])
def test_bad_torch_time_is_skipped(tmp_path, bad):
    d = rec(KernelConfig(), 0.02).to_dict() | {"torch_ms": bad}
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(d) + "\n")
    with pytest.warns(RecordSkipped, match="torch_ms"):
        assert read_jsonl(path) == []
