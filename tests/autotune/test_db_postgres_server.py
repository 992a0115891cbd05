"""The PostgreSQL backend against a real server: writers in many processes, SIGKILLs mid-write, damaged
and hostile rows, foreign databases left untouched, copies between backends, the hot path off the network.

Needs ``ALCOP_TEST_PG_URL`` (a role that may create databases; ``scripts/pg_test_server.sh start DIR``
starts a throwaway server and prints one); skipped without it. Each test gets a database of its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from alcop_triton import cli
from alcop_triton.autotune import dispatch as dmod
from alcop_triton.autotune.database import Database, RecordSkipped, TuningRecord, versions
from alcop_triton.autotune.db_postgres import PostgresDatabase
from alcop_triton.autotune.dispatch import Dispatcher
from alcop_triton.autotune.measure import ErrorKind, MeasureResult
from alcop_triton.autotune.store import copy_records, open_database
from alcop_triton.errors import DatabaseError
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

psycopg = pytest.importorskip("psycopg", reason="psycopg 3 is not installed (pip install 'alcop_triton[postgres]')")

URL = os.environ.get("ALCOP_TEST_PG_URL", "")
CONNECT = psycopg.connect  # the real one, for the fixtures while a test replaces it
pytestmark = pytest.mark.skipif(not URL, reason="no PostgreSQL test server: set ALCOP_TEST_PG_URL "
                                                "(scripts/pg_test_server.sh start DIR prints one)")

SPEC = get_spec("H100")
W = Workload("matmul", (1024, 768, 3072), "float16", "nt")
WRITER = Path(__file__).with_name("pg_writer.py")
ROOT = Path(__file__).resolve().parents[2]


def _with_db(url: str, name: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, "/" + name, p.query, ""))


@pytest.fixture
def pg_url(tmp_path, monkeypatch):
    """A fresh, empty database on the test server; mirrors land under tmp_path."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    name = "alcop_t_" + secrets.token_hex(6)
    try:
        admin = CONNECT(URL, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL test server at ALCOP_TEST_PG_URL unreachable: {type(exc).__name__}")
    with admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield _with_db(URL, name)
    with CONNECT(URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def raw(url: str):
    return CONNECT(url, autocommit=True)


def rec(w=W, c=KernelConfig(block_m=128, block_n=128), ms=0.02, error=None, host="", message=""):
    r = TuningRecord.from_result(w, MeasureResult(c, ms, error, message), SPEC, device="NVIDIA H100", mma="wgmma")
    return dataclasses.replace(r, host=host) if host else r


def full(r: TuningRecord) -> dict:
    """Every field of a record, unknown keys included."""
    return {**{f.name: getattr(r, f.name) for f in dataclasses.fields(r)}, "extra": dict(r.extra)}


def snapshot(url: str) -> list:
    """Every user table of a database with its columns and rows: what 'untouched' compares."""
    with raw(url) as c:
        tables = c.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                           "WHERE c.relkind IN ('r', 'v', 'i', 'S') AND n.nspname NOT IN ('pg_catalog', "
                           "'information_schema') AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1, 2").fetchall()
        out: list = [tables]
        for s, t in tables:
            kind = c.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", (f'"{s}"."{t}"',)).fetchone()[0]
            if kind in ("r", "v"):
                out.append(c.execute(f'SELECT * FROM "{s}"."{t}" ORDER BY 1').fetchall())
                out.append(c.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                                     "attrelid = %s::regclass AND attnum > 0 ORDER BY attnum",
                                     (f'"{s}"."{t}"',)).fetchall())
    return out


# ------------------------------------------------------------------------------------------------

def test_round_trip_hosts_kept_and_ranked_as_sqlite(pg_url, tmp_path):
    db = PostgresDatabase(pg_url)
    a, b = KernelConfig(block_m=128, block_n=128), KernelConfig(block_m=64, block_n=64)
    # Two hosts tune the same workload at once: both measurements stay, ranked by the median as in SQLite.
    mine = [rec(c=a, ms=0.020, host="node-a"), rec(c=a, ms=0.022, host="node-b"), rec(c=b, ms=0.021, host="node-a"),
            rec(c=b, ms=0.019, host="node-b"), rec(c=b, ms=None, error=ErrorKind.WRONG_ANSWER, host="node-b")]
    assert db.add(mine) == 5 and len(db) == 5
    got = db.records()
    assert [full(r) for r in got] == [full(r) for r in mine]
    assert {r.host for r in got} == {"node-a", "node-b"}
    lite = Database(tmp_path / "same.sqlite")
    lite.add(mine)
    assert db.best(W, SPEC) == lite.best(W, SPEC) and db.best(W, SPEC).config == a  # b failed once: never chosen
    assert Dispatcher(db, use_defaults=False).decide(W, SPEC) == Dispatcher(lite, use_defaults=False).decide(W, SPEC)
    assert db.workloads() == [W]
    # A second process (a new object, a new mirror) sees the same.
    other = PostgresDatabase(pg_url, mirror=tmp_path / "other-mirror.sqlite")
    assert [full(r) for r in other.records(W, SPEC)] == [full(r) for r in mine]


def test_host_recorded_by_default(pg_url):
    import socket

    r = rec()
    assert r.host == socket.gethostname() and json.loads(r.to_json())["host"] == r.host
    db = PostgresDatabase(pg_url)
    db.add(r)
    assert db.records()[0].host == socket.gethostname()


def test_eight_concurrent_writer_processes_lose_nothing(pg_url, tmp_path):
    PostgresDatabase(pg_url).check_writable()
    procs = [subprocess.Popen([sys.executable, str(WRITER), pg_url, f"w{i}", "12", "5", str(tmp_path / f"ack{i}")],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-2000:]
    db = PostgresDatabase(pg_url)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordSkipped)
        messages = sorted(r.message for r in db.records())
    assert messages == sorted(f"w{i}-b{b}-{k}" for i in range(8) for b in range(12) for k in range(5))
    with raw(pg_url) as c:
        assert c.execute("SELECT COUNT(DISTINCT id) FROM measurements").fetchone()[0] == 8 * 12 * 5


def test_twenty_sigkills_mid_write_lose_no_acknowledged_record(pg_url, tmp_path):
    PostgresDatabase(pg_url).check_writable()
    rng = random.Random(47)
    acks: list[Path] = []
    kills = 0
    for rnd in range(5):
        procs = []
        for i in range(4):
            ack = tmp_path / f"ack-{rnd}-{i}"
            ack.touch()
            acks.append(ack)
            procs.append((subprocess.Popen([sys.executable, str(WRITER), pg_url, f"r{rnd}w{i}", "0", "20", str(ack)],
                                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), ack))
        for p, ack in procs:
            want = rng.randint(1, 4)
            while len(ack.read_text().split()) < want:  # let it write some batches, then kill it mid-stream
                if p.poll() is not None:
                    pytest.fail(f"writer died before being killed: {p.stderr.read().decode()[-2000:]}")
                threading.Event().wait(0.01)
            threading.Event().wait(rng.random() * 0.05)
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=60)
            assert p.returncode == -signal.SIGKILL
            kills += 1
    assert kills == 20
    db = PostgresDatabase(pg_url)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordSkipped)  # no half-written or damaged row
        records = db.records()
    assert len(db) == len(records)
    batches: dict[str, set[str]] = {}
    for r in records:
        tag, k = r.message.rsplit("-", 1)
        batches.setdefault(tag, set()).add(k)
    acked = {t for a in acks for t in a.read_text().split()}
    assert acked and acked <= set(batches)  # every acknowledged batch is there
    assert all(ks == {str(k) for k in range(20)} for ks in batches.values())  # and every batch whole or absent


def test_damaged_and_hostile_rows_skipped_nothing_executed(pg_url):
    db = PostgresDatabase(pg_url)
    good = rec()
    db.add(good)
    v = versions()
    evil = "H100'); DROP TABLE measurements; --"
    d = good.to_dict()

    def row(record: str, gpu="H100", shape="1024x768x3072", time_ms=0.02):
        return (gpu, "9.0", "matmul", shape, "float16", "nt", v["alcop"], v["triton"], v["torch"], time_ms, None,
                record)

    bad = [
        row("{not json"),
        row(json.dumps({**d, "time_ms": "0.01"})),  # wrong type
        row(json.dumps({**d, "config": ["BLOCK_M", 128]})),
        row(json.dumps({**d, "config": {**d["config"], "BLOCK_M": "128); DROP TABLE measurements; --"}})),
        row(json.dumps({**d, "workload": {**d["workload"], "shape": [10 ** 30, 768, 3072]}}),
            shape=f"{10 ** 30}x768x3072"),
        row('{"time_ms": ' + "9" * 20000 + "}"),  # an integer of 20000 digits
        row(json.dumps({**d, "gpu": "A100"})),  # index columns disagree with the JSON
        row(json.dumps({**d, "gpu": "H100\nimport os"})),  # control characters
        row(json.dumps([1, 2, 3])),
        row("null", time_ms=float("nan")),
    ]
    inert = [row(json.dumps({**d, "gpu": evil}), gpu=evil),  # valid record; the string is data, never SQL
             row(json.dumps({**d, "message": "x" * 5_000_000}))]  # huge but valid
    with raw(pg_url) as c:
        c.cursor().executemany("INSERT INTO measurements (gpu, cc, op, shape, dtype, layout, alcop, triton, torch, "
                               "time_ms, error, record) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", bad + inert)
    with pytest.warns(RecordSkipped, match=f"{len(bad)} tuning record"):
        got = db.records()
    assert len(got) == 3 and got[0] == good
    assert got[1].gpu == evil and len(got[2].message) == 5_000_000
    assert len(db) == 1 + len(bad) + len(inert)  # nothing dropped, nothing executed
    assert Dispatcher(db, use_defaults=False).decide(W, SPEC).config == good.config
    # The mirror holds the rows as the server does; kernel calls reading it validate them again.
    again = PostgresDatabase(pg_url, mirror=db.mirror.path.with_name("again.sqlite"))
    again.sync()
    with pytest.warns(RecordSkipped, match=f"{len(bad)} tuning record"):
        assert [r.gpu for r in again.cached_records()] == ["H100", evil, "H100"]


def test_foreign_database_refused_and_untouched(pg_url):
    with raw(pg_url) as c:
        c.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")
        c.execute("INSERT INTO users VALUES (1, 'ada'), (2, 'grace')")
    before = snapshot(pg_url)
    db = PostgresDatabase(pg_url)
    with pytest.raises(DatabaseError, match=r"did not create \(public.users\).*nothing was changed"):
        db.add(rec())
    for call in (db.records, db.check_writable, lambda: len(db)):
        with pytest.raises(DatabaseError, match="refusing"):
            call()
    assert snapshot(pg_url) == before


@pytest.mark.parametrize("setup", [
    # A table named like ours, another shape, no marker.
    ["CREATE TABLE measurements (id serial PRIMARY KEY, payload jsonb)", "INSERT INTO measurements (payload) "
     "VALUES ('{\"a\": 1}')"],
    # A marker of another application.
    ["CREATE TABLE alcop_meta (key text PRIMARY KEY, value text NOT NULL)",
     "INSERT INTO alcop_meta VALUES ('application', 'someone-else'), ('schema', '1')"],
    # alcop's marker, but measurements of another shape.
    ["CREATE TABLE alcop_meta (key text PRIMARY KEY, value text NOT NULL)",
     "INSERT INTO alcop_meta VALUES ('application', 'alcop_triton'), ('schema', '1')",
     "CREATE TABLE measurements (id bigint PRIMARY KEY, record jsonb)"],
    # A newer alcop's database.
    ["CREATE TABLE alcop_meta (key text PRIMARY KEY, value text NOT NULL)",
     "INSERT INTO alcop_meta VALUES ('application', 'alcop_triton'), ('schema', '99')"],
], ids=["same-name-table", "other-marker", "other-columns", "newer-schema"])
def test_lookalike_tables_refused_untouched(pg_url, setup):
    with raw(pg_url) as c:
        for stmt in setup:
            c.execute(stmt)
    before = snapshot(pg_url)
    db = PostgresDatabase(pg_url)
    with pytest.raises(DatabaseError, match="refusing|newer"):
        db.add(rec())
    with pytest.raises(DatabaseError):
        db.records()
    assert snapshot(pg_url) == before


def test_concurrent_first_users_create_the_tables_once(pg_url, tmp_path):
    errors: list[BaseException] = []

    def first_use(i: int) -> None:
        try:
            PostgresDatabase(pg_url, mirror=tmp_path / f"m{i}.sqlite").add(rec(host=f"h{i}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(r.host for r in PostgresDatabase(pg_url).records()) == [f"h{i}" for i in range(6)]


def test_copy_sqlite_postgres_sqlite_every_field(pg_url, tmp_path, capsys):
    src = Database(tmp_path / "src.sqlite")
    c2 = KernelConfig(block_m=64, block_n=128, split_k=2)
    originals = [rec(host="node-a", message="first"), rec(c=c2, ms=None, error=ErrorKind.COMPILE, message="ptxas"),
                 dataclasses.replace(rec(host="node-b"), torch_ms=0.031, timer="do_bench", date="2024-01-02")]
    newer = {**originals[0].to_dict(), "a_key_of_a_newer_release": {"nested": [1, 2.5, "x"]}}
    originals.append(TuningRecord.from_dict(newer))
    originals.append(originals[0])  # an exact duplicate stays a duplicate
    src.add(originals)
    assert cli.main(["copy", str(src.path), pg_url]) == 0
    assert cli.main(["copy", pg_url, str(tmp_path / "back.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "5 record(s) copied" in out
    back = Database(tmp_path / "back.sqlite").records()
    assert [full(r) for r in back] == [full(r) for r in src.records()] == [full(r) for r in originals]
    assert back[3].extra == {"a_key_of_a_newer_release": {"nested": [1, 2.5, "x"]}}
    # Copying again adds nothing; a file holding part of the records gets the rest.
    assert copy_records(src, open_database(pg_url)) == (0, 5)
    assert len(open_database(pg_url)) == 5
    part = Database(tmp_path / "part.sqlite")
    part.add(originals[:2])
    assert copy_records(open_database(pg_url), part) == (3, 2)
    assert [full(r) for r in part.records()] == [full(r) for r in originals]


def test_dispatch_hot_path_makes_no_network_call(pg_url, tmp_path, monkeypatch):
    monkeypatch.setattr(dmod, "default_tables", lambda: [])
    writer = PostgresDatabase(pg_url, mirror=tmp_path / "writer-mirror.sqlite")
    fast = KernelConfig(block_m=64, block_n=64)
    writer.add([rec(), rec(c=fast, ms=0.01)])
    db = PostgresDatabase(pg_url, mirror=tmp_path / "mirror.sqlite")
    db.sync()  # the mirror a previous process left behind
    db._drop()
    calls: list[str] = []
    release = threading.Event()

    def no_network(*a, **k):
        calls.append(threading.current_thread().name)
        release.wait(60)  # a server that hangs: whoever waits on it hangs too
        raise psycopg.OperationalError("network used")

    monkeypatch.setattr(psycopg, "connect", no_network)
    d = Dispatcher(db, use_defaults=False)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        decision = d.decide(W, SPEC)
        assert (decision.source, decision.config) == ("db", fast)
        assert d.best_config(W, SPEC) == fast
        assert threading.main_thread().name not in calls  # only the background refresh may connect
        release.set()
        db.wait_refresh(60)
    assert calls in ([], ["alcop-tuning-db-refresh"])


def test_password_never_shown(pg_url, tmp_path, capsys, caplog, recwarn):
    password = urlsplit(URL).password
    assert password
    db = PostgresDatabase(pg_url)
    db.add(rec())
    assert password not in repr(db) + db.location + str(db.mirror.path)
    wrong = pg_url.replace(f":{password}@", ":Wr0ng-Pa55word-q7@")
    with pytest.raises(DatabaseError) as info:
        PostgresDatabase(wrong).records()
    assert "Wr0ng-Pa55word-q7" not in str(info.value) and "password authentication failed" in str(info.value)
    assert cli.main(["show", "--all", "--db", pg_url]) == 0
    assert cli.main(["show", "--db", wrong]) == 2
    assert cli.main(["copy", pg_url, str(tmp_path / "c.sqlite")]) == 0
    text = capsys.readouterr()
    shown = text.out + text.err + caplog.text + "".join(str(w.message) for w in recwarn)
    shown += "".join(r.to_json() for r in Database(tmp_path / "c.sqlite").records())
    with raw(pg_url) as c:
        shown += "".join(str(row) for row in c.execute("SELECT * FROM measurements").fetchall())
        shown += "".join(str(row) for row in c.execute("SELECT * FROM alcop_meta").fetchall())
    assert "password authentication failed" in shown  # the failure was reported...
    assert password not in shown and "Wr0ng-Pa55word-q7" not in shown  # ...without either password


def test_other_hosts_records_reach_dispatch_through_the_refresh(pg_url, tmp_path, monkeypatch):
    monkeypatch.setattr(dmod, "default_tables", lambda: [])
    monkeypatch.setattr(dmod, "_shared", {})
    monkeypatch.setenv("ALCOP_DB", pg_url)
    d = dmod.dispatcher()  # the process-wide one kernel calls use
    reader = d.db
    assert isinstance(reader, PostgresDatabase)
    reader.refresh_s = 0.0
    writer = PostgresDatabase(pg_url, mirror=tmp_path / "writer.sqlite")  # another host
    writer.add(rec(host="node-a"))
    d.decide(W, SPEC)  # the mirror is empty yet: this starts its first refresh
    reader.wait_refresh(60)  # ...which brings node-a's record and makes dispatch decide again
    assert d.decide(W, SPEC).config == rec().config
    faster = KernelConfig(block_m=64, block_n=64)
    writer.add(rec(c=faster, ms=0.005, host="node-b"))
    reader.cached_records()  # a lookup starts the next refresh
    reader.wait_refresh(60)
    assert d.decide(W, SPEC).config == faster


def test_role_without_insert_stops_tuning_before_measuring(pg_url):
    from alcop_triton.autotune.session import Target, tune

    db = PostgresDatabase(pg_url)
    db.add(rec())
    with raw(pg_url) as c:
        c.execute("REVOKE INSERT ON measurements FROM CURRENT_USER")
    measured: list = []

    class Measurer:
        workload = W

        def measure(self, configs, on_result=None):
            measured.extend(configs)
            return []

    with pytest.raises(DatabaseError, match="may not insert"):
        tune(W, Target("cuda", SPEC, ("H100", "9.0"), "NVIDIA H100", "wgmma"), PostgresDatabase(pg_url),
             tuner="grid", n_trials=4, measurer=Measurer())
    assert measured == [] and len(db.records()) == 1  # still readable


def test_dropped_connection_reconnects_and_stores_once(pg_url):
    db = PostgresDatabase(pg_url)
    db.add(rec(host="before"))
    with raw(pg_url) as c:  # the server ends the backend's session (a restart, a failover, an idle timeout)
        ended = c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                          "'alcop_triton' AND pid <> pg_backend_pid()").fetchall()
    assert ended and all(r[0] for r in ended)
    db.add(rec(host="after"))  # failed before committing on the dead connection: retried once on a new one
    assert [r.host for r in db.records()] == ["before", "after"]
