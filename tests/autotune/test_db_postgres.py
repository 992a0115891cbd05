"""The PostgreSQL backend without a server: choosing it, its failure behaviour, and the password kept out
of everything it shows. (Against a real server: test_db_postgres_server.py.)"""

from __future__ import annotations

import socket
import sys
import warnings

import pytest

from alcop_triton import cli
from alcop_triton.autotune import dispatch as dmod
from alcop_triton.autotune.database import Database, TuningRecord, default_db_path
from alcop_triton.autotune.db_postgres import PostgresDatabase, ServerUnreachable, default_mirror_path, redact_url
from alcop_triton.autotune.dispatch import Dispatcher
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.autotune.session import Target, tune
from alcop_triton.autotune.store import TuningStore, open_database
from alcop_triton.errors import DatabaseError
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

pytest.importorskip("psycopg", reason="psycopg 3 is not installed (pip install 'alcop_triton[postgres]')")

SPEC = get_spec("H100")
W = Workload("matmul", (1024, 768, 3072), "float16", "nt")
SECRET = "S3cret-Pw-4711"


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def down_url(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return f"postgresql://tuner:{SECRET}@127.0.0.1:{closed_port()}/alcop?connect_timeout=5"


def rec(c=KernelConfig(block_m=128, block_n=128), ms=0.02):
    return TuningRecord.from_result(W, MeasureResult(c, ms, None), SPEC, mma="wgmma")


def test_open_database_picks_the_backend_by_location(tmp_path, monkeypatch, down_url):
    assert isinstance(open_database(tmp_path / "t.sqlite"), Database)
    pg = open_database(down_url)
    assert isinstance(pg, PostgresDatabase) and isinstance(pg, TuningStore)
    monkeypatch.setenv("ALCOP_DB", down_url.replace("postgresql://", "postgres://"))
    assert isinstance(open_database(), PostgresDatabase)
    with pytest.raises(DatabaseError, match="PostgreSQL server, not a file"):
        default_db_path()  # so no file named 'postgres:/...' is ever created
    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "env.sqlite"))
    assert open_database().location == str(tmp_path / "env.sqlite")
    assert not list(tmp_path.glob("postgres*"))


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:pw-x@db.example:5433/tune", "postgresql://u@db.example:5433/tune"),
    ("postgresql://u:p%40ss%3Aw@db/tune?sslmode=require", "postgresql://u@db/tune?sslmode=require"),
    ("postgres://u@db/tune?password=pw-y&application_name=a", "postgres://u@db/tune?password=***&application_name=a"),
    ("postgresql:///tune?host=/run/postgresql", "postgresql:///tune?host=/run/postgresql"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown
    db = PostgresDatabase(url)
    assert db.location == shown and repr(db) == f"PostgresDatabase({shown!r})"
    assert default_mirror_path(url) == default_mirror_path(url.replace("pw-", "other-"))  # one mirror per database


def test_missing_psycopg_says_what_to_install(monkeypatch, down_url):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(DatabaseError, match=r"needs psycopg 3: pip install 'alcop_triton\[postgres\]'"):
        PostgresDatabase(down_url).records()


def test_server_down_dispatch_answers_from_mirror_with_one_warning(down_url, tmp_path, monkeypatch):
    monkeypatch.setattr(dmod, "default_tables", lambda: [])
    fast = KernelConfig(block_m=64, block_n=64)
    db = PostgresDatabase(down_url, refresh_s=0.0)
    Database(db.mirror.path).add([rec(), rec(fast, 0.01)])  # the copy an earlier process left
    other = Workload("matmul", (2048, 2048, 2048), "float16", "nt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = Dispatcher(db, use_defaults=False)
        assert d.decide(W, SPEC).source == "db" and d.best_config(W, SPEC) == fast
        db.wait_refresh(60)
        assert d.decide(other, SPEC).source in ("nearest", "analytical")  # another refresh fails: no new warning
        db.wait_refresh(60)
    down = [w for w in caught if issubclass(w.category, ServerUnreachable)]
    assert len(down) == 1, [str(w.message) for w in caught]
    assert "local copy" in str(down[0].message) and "shipped tables" in str(down[0].message)
    assert SECRET not in "".join(str(w.message) for w in caught)


def test_server_down_fails_tuning_before_any_measurement(down_url):
    measured: list[KernelConfig] = []

    class Measurer:
        workload = W

        def measure(self, configs, on_result=None):
            measured.extend(configs)
            return []

    target = Target("cuda", SPEC, ("H100", "9.0"), "NVIDIA H100", "wgmma")
    with pytest.raises(DatabaseError, match="cannot connect to the tuning database server") as info:
        tune(W, target, PostgresDatabase(down_url), tuner="grid", n_trials=4, measurer=Measurer())  # type: ignore
    assert measured == [] and SECRET not in str(info.value)


def test_cli_errors_never_show_the_password(down_url, tmp_path, capsys):
    src = Database(tmp_path / "src.sqlite")
    src.add(rec())
    assert cli.main(["copy", str(src.path), down_url]) == 2
    assert cli.main(["show", "--db", down_url]) == 2
    assert cli.main(["import", "--db", down_url, str(tmp_path / "none.jsonl")]) != 0
    out = capsys.readouterr()
    assert "cannot connect" in out.err and "tuner@127.0.0.1" in out.err
    assert SECRET not in out.out + out.err
