"""A damaged tuning database, hostile records and broken import files: reads raise nothing but
DatabaseError, damaged files are renamed aside (never deleted), dispatch goes on, valid lines are
kept, and no string from a record reaches exported code unescaped."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from alcop_triton import cli
from alcop_triton.autotune.database import Database, DatabaseRecovered, RecordSkipped, TuningRecord, read_jsonl
from alcop_triton.autotune.dispatch import Dispatcher
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.errors import DatabaseError
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

W = Workload("matmul", (1024, 768, 3072), "float16", "nt")
H100 = ("H100", (9, 0))


def rec(i: int = 0, w: Workload = W, gpu: tuple = H100) -> TuningRecord:
    return TuningRecord.from_result(w, MeasureResult(KernelConfig(block_m=16 << (i % 4)), 0.01 + i * 1e-3), gpu)


def _filled(path: Path, n: int = 300) -> Path:
    db = Database(path)
    db.add([rec(i) for i in range(n)])
    db.close()
    return path


def _corrupt_pages(p: Path) -> None:
    b = bytearray(p.read_bytes())
    for off in range(4096, len(b), 4096):
        b[off + 100:off + 600] = bytes(range(256)) + bytes(range(244))
    p.write_bytes(bytes(b))


def _zero_last_page(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[-4096:] = bytes(4096)
    p.write_bytes(bytes(b))


def _drop_table(p: Path) -> None:
    conn = sqlite3.connect(p)
    conn.execute("DROP TABLE measurements")
    conn.commit()
    conn.close()


def _directory(p: Path) -> None:
    p.unlink()
    p.mkdir()  # an empty one: nothing of anyone's is in it (one with files in it is refused, below)


DAMAGE = {"corrupt_pages": _corrupt_pages, "zeroed_last_page": _zero_last_page, "dropped_table": _drop_table,
          "directory": _directory}


@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_file_is_set_aside_and_dispatch_goes_on(tmp_path: Path, how: str) -> None:
    path = _filled(tmp_path / "t.sqlite")
    DAMAGE[how](path)
    db = Database(path)
    with pytest.warns(DatabaseRecovered, match="moved it to"):
        assert db.records() == []
    aside = [p for p in tmp_path.iterdir() if ".damaged-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1  # renamed, never deleted
    assert aside[0].is_dir() if how == "directory" else aside[0].stat().st_size > 0
    db.add(rec(1))  # the fresh database works
    assert len(Database(path).records()) == 1
    DAMAGE[how](_filled(tmp_path / "u.sqlite"))
    with pytest.warns(DatabaseRecovered):
        d = Dispatcher(Database(tmp_path / "u.sqlite"), use_defaults=False).decide(W, get_spec("H100"))
    assert d.source == "analytical"


@pytest.mark.parametrize("how", DAMAGE)
def test_show_on_a_damaged_database_prints_no_traceback(tmp_path: Path, how: str, capsys: pytest.CaptureFixture) -> None:
    path = _filled(tmp_path / "t.sqlite", 20)
    DAMAGE[how](path)
    with pytest.warns(DatabaseRecovered):
        assert cli.main(["--db", str(path), "show"]) == 0
    out = capsys.readouterr()
    assert "no records match" in out.out and "Traceback" not in out.err


def test_a_file_that_is_not_sqlite_is_refused_not_moved(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "t.sqlite"
    path.write_text("someone's notes, not a database\n" * 200)
    with pytest.raises(DatabaseError, match="not a usable"):
        Database(path).records()
    assert cli.main(["--db", str(path), "show"]) == 2
    assert "error:" in capsys.readouterr().err and path.read_text().startswith("someone's notes")
    with pytest.warns(UserWarning, match="tuning database unusable"):
        assert Dispatcher(Database(path), use_defaults=False).decide(W, get_spec("H100")).source == "analytical"


def _bad_rows() -> list[str]:
    good = rec().to_dict()
    deep = "[" * 100000 + "]" * 100000
    return [json.dumps({**good, "config": "x"}), json.dumps({**good, "config": [1, 2]}),
            json.dumps({**good, "config": None}),
            json.dumps({**good, "workload": {**good["workload"], "shape": [float("inf"), 512, 512]}}),
            json.dumps(good).replace('"shape": [1024', '"shape": [' + "9" * 5000),
            json.dumps({**good, "workload": {**good["workload"], "shape": [512.9, 512, 512]}}),
            json.dumps({**good, "workload": {**good["workload"], "shape": "512"}}),
            json.dumps({**good, "workload": {**good["workload"], "shape": [True, 512, 512]}}),
            json.dumps({**good, "workload": deep}), deep,
            json.dumps({**good, "workload": {**good["workload"], "layout": "nt\n    __import__('os')"}}),
            json.dumps({**good, "gpu": "H100\n    __import__('os').system('touch F'),\n    #"}),
            json.dumps({**good, "cc": "9.0\n    __import__('os').system('touch F'),\n    #"})]


def test_damaged_rows_are_skipped_with_one_warning(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.sqlite")
    db.add([rec(0), rec(1)])
    bad = _bad_rows()
    conn = sqlite3.connect(db.path)
    conn.executemany("INSERT INTO measurements (gpu, cc, op, shape, dtype, layout, alcop, triton, torch, record) "
                     "VALUES ('H100', '9.0', 'matmul', '1024x768x3072', 'float16', 'nt', 'a', 't', 't', ?)",
                     [(b,) for b in bad] + [(sqlite3.Binary(b"\xff\xfe"),)])
    conn.commit()
    conn.close()
    with pytest.warns(RecordSkipped) as caught:
        records = db.records(W, H100)
    assert len(records) == 2
    assert len(caught) == 1 and f"{len(bad) + 1} tuning record(s) skipped: id=3:" in str(caught[0].message)
    with pytest.warns(RecordSkipped):
        assert db.best(W, H100) is not None
    with pytest.warns(RecordSkipped):
        assert Dispatcher(db, use_defaults=False).decide(W, get_spec("H100")).source == "db"


def test_import_keeps_valid_lines_and_reports_rejected_ones(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = _bad_rows()
    good = [rec(i).to_json() for i in range(3)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([good[0], *bad, good[1], "", good[2]]) + "\n")
    db = tmp_path / "t.sqlite"
    assert cli.main(["--db", str(db), "import", str(path)]) == 1
    out = capsys.readouterr()
    assert "3 record(s) imported" in out.out and f"{len(bad)} line(s) rejected" in out.out
    for lineno in range(2, 2 + len(bad)):
        assert f"line {lineno}: rejected:" in out.err
    assert "Traceback" not in out.err and len(Database(db)) == 3
    shapes = {r.workload.shape for r in Database(db).records()}
    assert shapes == {W.shape}  # 512.9 and "512" were refused, not stored as 512 or (5, 1, 2)


def test_truncated_gzip_import_keeps_the_lines_before_the_cut(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lines = "".join(rec(i).to_json() + "\n" for i in range(400)).encode()
    blob = gzip.compress(lines)
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(blob[: len(blob) * 2 // 3])
    with pytest.warns(RecordSkipped, match="unreadable from here on"):
        assert 0 < len(read_jsonl(path)) < 400
    db = tmp_path / "t.sqlite"
    assert cli.main(["--db", str(db), "import", str(path)]) == 1
    assert "unreadable from here on" in capsys.readouterr().err and 0 < len(Database(db)) < 400


def test_export_writes_database_strings_with_repr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Strings that are legal in a record (no newline) but are Python when pasted verbatim."""
    monkeypatch.chdir(tmp_path)
    payload = "H100'), __import__('os').system('touch F'), ('"
    db = Database(tmp_path / "t.sqlite")
    db.add([rec(0, gpu=(payload, (9, 0))), rec(1, gpu=("H100 # \\", (9, 0)))])
    out = tmp_path / "configs.py"
    assert cli.main(["--db", str(db.path), "export", "--format", "triton", "-o", str(out)]) == 0
    text = out.read_text()
    fake_triton = type(sys)("triton")
    fake_triton.Config = lambda kwargs, num_warps, num_stages: kwargs  # type: ignore[attr-defined]
    ns: dict = {}
    exec(compile(text.replace("import triton", ""), str(out), "exec"), {"triton": fake_triton}, ns)
    assert len(ns["configs"]) == 2 and not (tmp_path / "F").exists()
    assert repr(payload) in text


def test_records_with_code_in_strings_are_refused_at_import(tmp_path: Path) -> None:
    good = rec().to_dict()
    hostile = "H100\n    __import__('os').system('touch F'),\n    #"
    rows = [{**good, "gpu": hostile}, {**good, "cc": hostile}, {**good, "workload": {**good["workload"], "layout": hostile}}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(RecordSkipped, match="3 tuning record"):
        assert read_jsonl(path) == []


def test_a_busy_database_is_not_moved(tmp_path: Path) -> None:
    """Only damage moves a file: a lock held by another writer is a DatabaseError, the file stays."""
    path = _filled(tmp_path / "t.sqlite", 5)
    other = sqlite3.connect(path)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(DatabaseError, match="locked"):
            Database(path, timeout_s=0.1).add(rec(9))
    finally:
        other.rollback()
        other.close()
    assert not [p for p in os.listdir(tmp_path) if ".damaged-" in p] and len(Database(path)) == 5
