"""What a tuning database offers, whichever backend holds it, and opening one by its location.

Two backends hold the same records under the same schema and guarantees:

* ``database.Database``: a SQLite file (the default; ``$ALCOP_DB`` = a path).
* ``db_postgres.PostgresDatabase``: a PostgreSQL server a team shares (``$ALCOP_DB`` =
  ``postgresql://user@host/dbname``), read by kernel calls through a local mirror.

``open_database`` picks one by the location's form; ``copy_records`` moves records between any two
(``alcop-tune copy``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Iterable, Protocol, runtime_checkable

from ..records import Workload
from .. import settings
from .database import Database, RankedConfig, TuningRecord, default_db_path
from .db_postgres import PostgresDatabase, is_postgres_url


@runtime_checkable
class TuningStore(Protocol):
    """A tuning database: what tuning, dispatch and ``alcop-tune`` use of one."""

    @property
    def location(self) -> str:
        """Where the records live, printable (never with credentials)."""
        ...

    def exists(self) -> bool:
        """Whether there is a database to read; answers without the network."""
        ...

    def add(self, records: TuningRecord | Iterable[TuningRecord]) -> int:
        """Store measurements in one transaction; returns how many."""
        ...

    def records(self, workload: Workload | None = None, gpu: Any = None, *, op: str | None = None,
                dtype: str | None = None) -> list[TuningRecord]:
        """Every valid record matching the filters, oldest first, as stored now."""
        ...

    def cached_records(self, workload: Workload | None = None, gpu: Any = None, *, op: str | None = None,
                       dtype: str | None = None) -> list[TuningRecord]:
        """``records()`` for a kernel call: never waits on the network (may lag behind a server)."""
        ...

    def check_writable(self) -> None:
        """Raise DatabaseError now if records could not be stored (before a tuning run measures)."""
        ...

    def best(self, workload: Workload, gpu: Any) -> RankedConfig | None: ...

    def workloads(self, gpu: Any = None) -> list[Workload]: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...


def open_database(location: str | os.PathLike[str] | None = None) -> TuningStore:
    """The tuning database at ``location``: a ``postgresql://`` (or ``postgres://``) URL opens the
    PostgreSQL backend, anything else is a SQLite file path. None: ``$ALCOP_DB``, else the SQLite file
    in the user data dir. Opening connects to nothing; the first read or write does."""
    if location is None:
        location = settings.db_location()
    if isinstance(location, str) and is_postgres_url(location):
        return PostgresDatabase(location)
    return Database(location if location is not None else default_db_path())


def _identity(r: TuningRecord) -> str:
    """A record's full content (every field, unknown keys included) as canonical JSON."""
    return json.dumps(r.to_dict(), sort_keys=True, allow_nan=False)


def copy_records(src: TuningStore, dst: TuningStore) -> tuple[int, int]:
    """Add every valid record of ``src`` to ``dst`` in one transaction, but those ``dst`` holds already
    (same content, field for field, counted: two equal records in ``src`` need two in ``dst``), so copying
    twice adds nothing. Returns (copied, already there). Records are copied as they are: host, GPU,
    versions, dates and unknown keys of newer releases."""
    have = Counter(_identity(r) for r in dst.records()) if dst.exists() else Counter()
    todo: list[TuningRecord] = []
    skipped = 0
    for r in src.records():
        key = _identity(r)
        if have[key] > 0:
            have[key] -= 1
            skipped += 1
        else:
            todo.append(r)
    return (dst.add(todo) if todo else 0), skipped
