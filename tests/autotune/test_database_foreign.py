"""What stands at the database path and is not alcop's tuning database is refused and left byte for byte as it
was (another application's SQLite file, whatever its user_version; a directory with files in it); alcop's own
files, damaged, are set aside; several processes that find one damaged file at once recover it one at a time."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sqlite3
import warnings
from pathlib import Path

import pytest

from alcop_triton import cli
from alcop_triton.autotune.database import APPLICATION_ID, Database, DatabaseRecovered, TuningRecord
from alcop_triton.autotune.dispatch import Dispatcher
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.errors import DatabaseError
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

W = Workload("matmul", (1024, 768, 3072), "float16", "nt")
H100 = ("H100", (9, 0))


def rec(i: int = 0) -> TuningRecord:
    return TuningRecord.from_result(W, MeasureResult(KernelConfig(block_m=16 << (i % 4)), 0.01 + i * 1e-3), H100)


def _digest(p: Path) -> str:
    """Every file under ``p`` (or ``p`` itself) with its bytes: what must not change."""
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    return hashlib.sha256(b"".join(str(q).encode() + q.read_bytes() for q in files)).hexdigest()


def _other_app(path: Path, user_version: int = 0, application_id: int = 0, journal: str = "delete") -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO notes (body) VALUES (?)", [(f"note {i}",) for i in range(50)])
    conn.execute(f"PRAGMA user_version = {user_version}")
    conn.execute(f"PRAGMA application_id = {application_id}")
    conn.commit()
    conn.close()


def _empty_app(path: Path) -> None:
    """Another application's database that has a user_version and no tables yet."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def _named_measurements(path: Path) -> None:
    """Another application's table that happens to be called ``measurements``."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, celsius REAL)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def _full_directory(path: Path) -> None:
    (path / "inside").mkdir(parents=True)
    (path / "inside" / "data.txt").write_text("someone's files\n")


FOREIGN = {"sqlite_user_version_0": lambda p: _other_app(p, 0), "sqlite_user_version_1": lambda p: _other_app(p, 1),
           "sqlite_user_version_7": lambda p: _other_app(p, 7), "sqlite_wal": lambda p: _other_app(p, 1, journal="wal"),
           "sqlite_other_application_id": lambda p: _other_app(p, 1, application_id=0x12345678),
           "sqlite_empty_user_version_1": _empty_app, "sqlite_table_named_measurements": _named_measurements,
           "directory_with_files": _full_directory}


@pytest.mark.parametrize("what", FOREIGN)
def test_a_foreign_file_is_refused_and_left_as_it_was(tmp_path: Path, what: str, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "t.sqlite"
    FOREIGN[what](path)
    before = _digest(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatabaseRecovered)
        with pytest.raises(DatabaseError, match="not alcop_triton's tuning database") as caught:
            Database(path).records()
        assert str(path) in str(caught.value) and "left as it is" in str(caught.value)
        with pytest.raises(DatabaseError, match="not alcop_triton's tuning database"):
            Database(path).add(rec())
        assert cli.main(["--db", str(path), "show"]) == 2
        assert "Traceback" not in capsys.readouterr().err
        with pytest.warns(UserWarning, match="tuning database unusable"):
            assert Dispatcher(Database(path), use_defaults=False).decide(W, get_spec("H100")).source == "analytical"
    assert _digest(path) == before
    assert not [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    if path.is_file():
        conn = sqlite3.connect(path)
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'measurements_by_key'").fetchall() == []
        conn.close()


def test_a_database_of_alcop_from_before_the_application_id_is_adopted(tmp_path: Path) -> None:
    """A file made by an earlier alcop_triton (no application id): exactly alcop's table at schema 1."""
    from alcop_triton.autotune.database import _DDL
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(_DDL)
    r = rec(3)
    conn.execute("INSERT INTO measurements (gpu, cc, op, shape, dtype, layout, alcop, triton, torch, time_ms, error, "
                 "record) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                 (r.gpu, r.cc, "matmul", "1024x768x3072", "float16", "nt", r.alcop, r.triton, r.torch, r.time_ms, None,
                  r.to_json()))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    db = Database(path)
    assert db.records() == [r]
    db.add(rec(4))
    db.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_an_empty_file_becomes_the_database(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    path.write_bytes(b"")
    Database(path).add(rec())
    assert len(Database(path)) == 1


def _damage(path: Path) -> None:
    b = bytearray(path.read_bytes())
    for off in range(4096, len(b), 4096):
        b[off + 100:off + 600] = bytes(range(256)) + bytes(range(244))
    path.write_bytes(bytes(b))


def _worker(path: str, who: int, start: "multiprocessing.synchronize.Barrier", out: "multiprocessing.Queue[str]") -> None:
    try:
        warnings.simplefilter("ignore")
        start.wait()
        db = Database(path, timeout_s=30)
        db.records()
        for i in range(3):
            db.add(TuningRecord.from_result(W, MeasureResult(KernelConfig(block_m=16 << (i % 4)), 1.0 + who + i / 10),
                                            H100))
        n = len(db.records())
        out.put(f"ok {who} {n}")
    except BaseException as exc:  # reported to the test, which fails on it
        out.put(f"error {who} {type(exc).__name__}: {exc}")


ROUNDS, PROCESSES = 6, 6


def test_processes_opening_one_damaged_database_recover_it_one_at_a_time(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for rnd in range(ROUNDS):
        path = tmp_path / f"r{rnd}" / "t.sqlite"
        path.parent.mkdir()
        db = Database(path)
        db.add([rec(i) for i in range(300)])
        db.close()
        _damage(path)
        start, out = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(str(path), who, start, out)) for who in range(PROCESSES)]
        for p in procs:
            p.start()
        results = sorted(out.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * PROCESSES
        assert all(r.startswith("ok ") for r in results), (rnd, results)
        # every acknowledged write is in the one database at the path, which is healthy
        times = sorted(r.time_ms for r in Database(path).records())
        assert times == sorted(1.0 + who + i / 10 for who in range(PROCESSES) for i in range(3)), rnd
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
        aside = [p for p in path.parent.iterdir() if ".damaged-" in p.name and not p.name.endswith(("-wal", "-shm"))]
        assert len(aside) == 1, (rnd, aside)
