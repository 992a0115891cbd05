"""Persistent tuning database: every measurement, keyed by GPU, versions and workload.

Storage choice: **SQLite in WAL mode** (stdlib ``sqlite3``), one row per measurement.

* Several processes tune at once (one per GPU, or a CI matrix): SQLite serialises writers with its
  own file locks and a busy timeout, and WAL lets readers proceed while a writer commits, so no
  hand-rolled ``flock``/append protocol is needed and none can lose a line.
* Each measurement is committed on its own, as it arrives: Ctrl-C or a crash in the middle of a
  tuning run keeps everything measured so far and cannot leave a half-written record behind.
* ``best()`` and dispatch look a workload up through an index instead of re-reading all history.

The interchange format stays **JSON lines** (``benchmarks/data/*.jsonl``, the shipped default
table, ``alcop-tune export``): each row stores exactly that JSON object, so import/export is
lossless and a JSONL file can be grepped, diffed and merged. Exports are written to a temporary
file and ``os.replace``-d into place, so readers never see half a file.

Nothing read back is trusted: every record (from SQLite or JSONL) is re-validated on read, and a
record with bad JSON, an unknown schema, a workload or config that fails ``Workload`` /
``KernelConfig`` validation, a negative/NaN time, or index columns that disagree with its JSON is
skipped, so it never reaches code generation; each read warns once (``RecordSkipped``) with how many
records it skipped and where (row ids or line numbers). Reads raise nothing but ``DatabaseError``.

alcop's databases carry an SQLite application id (``APPLICATION_ID``). A file of alcop's whose pages
are damaged (corrupt pages, a lost table), or an empty directory at the path, is renamed aside
(``<name>.damaged-<time>-<pid>``, never deleted; ``DatabaseRecovered`` warns) and a fresh database
takes its place, so a damaged file cannot break kernel calls. Anything else at the path (another
application's SQLite file, whatever its user_version; a directory with files in it; a file that is not
SQLite) is refused with a DatabaseError and left byte for byte as it was. Opening, creating and setting
aside take an exclusive lock on ``<name>.lock`` beside the database, so processes that find one damaged
file at once recover it once, and none opens the new file with the old one's WAL.

WAL needs a local filesystem (shared memory); on network filesystems SQLite keeps its rollback
journal, which is slower but still correct.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import datetime as _dt
import fcntl
import importlib.metadata
import json
import math
import os
import re
import socket
import sqlite3
import stat
import statistics
import tempfile
import threading
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeVar

from .. import generation
from ..errors import DatabaseError, ScheduleError
from ..records import KernelConfig, Workload, check_record, open_jsonl
from .devices import GpuIdentity
from .measure import ERROR_KINDS, MeasureResult

SCHEMA = 1
"""Version of the record format (``"schema"`` key; absent means 1, the documented format)."""

_RECORD_KEYS = frozenset({"schema", "impl", "workload", "config", "time_ms", "error", "message", "timer", "gpu",
                          "device", "cc", "mma", "triton", "torch", "alcop", "date", "torch_ms", "host",
                          "measured_on"})


LAYOUTS = ("nn", "nt", "tn", "tt", "nhwc", "nchw")
"""Operand layouts a workload may name (GEMM: A then B, 'n' or 't'; convolution: channels order)."""

MAX_DIM = 2 ** 40
"""Largest workload dim a record may hold: far beyond any GPU tensor, far below float overflow."""

_STRING_FIELDS = ("gpu", "cc", "triton", "torch", "alcop", "date", "device", "mma", "message", "timer", "host")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

T = TypeVar("T")


class RecordSkipped(UserWarning):
    """Stored records failed validation and were ignored."""


class DatabaseRecovered(UserWarning):
    """A damaged database file was renamed aside and replaced by a fresh one."""


class GpuKey(NamedTuple):
    """What records are keyed by on the hardware side: short GPU name and compute capability."""

    name: str
    cc: str


def normalize_cc(cc: Any) -> str:
    """'9.0' for any of (9, 0), '9.0', 9.0, '90'-free inputs; records always store the string form."""
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        return f"{int(cc[0])}.{int(cc[1])}"
    if isinstance(cc, (int, float)) and not isinstance(cc, bool):
        return f"{float(cc):.1f}"
    if isinstance(cc, str) and cc:
        return cc
    raise DatabaseError(f"compute capability {cc!r}: expected 'major.minor', a (major, minor) tuple or a float")


def mma_of(gpu: Any) -> str:
    """The MMA path a GPUSpec describes ("wgmma", "mma_sync"), "" for a bare GpuKey or pair."""
    return "" if isinstance(gpu, tuple) else str(getattr(gpu, "mma", "") or "")


def gpu_key(gpu: Any) -> GpuKey:
    """GpuKey of a GPUSpec (anything with .name and .cc), a GpuKey or a (name, cc) pair."""
    if isinstance(gpu, GpuKey):
        return gpu
    if isinstance(gpu, tuple) and len(gpu) == 2:
        return GpuKey(str(gpu[0]), normalize_cc(gpu[1]))
    return GpuKey(str(gpu.name), normalize_cc(gpu.cc))


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def versions() -> dict[str, str]:
    """alcop/triton/torch versions of this process, read without importing torch or triton."""
    import alcop_triton

    alcop = getattr(alcop_triton, "__version__", None) or _dist_version("alcop_triton")
    return {"alcop": alcop, "triton": _dist_version("triton"), "torch": _dist_version("torch")}


@dataclass(frozen=True)
class TuningRecord:
    """One measurement of one config on one workload and GPU (the JSON line of ARCHITECTURE.md)."""

    workload: Workload
    config: KernelConfig
    time_ms: float | None
    error: str | None
    gpu: str
    cc: str
    triton: str
    torch: str
    alcop: str
    date: str
    device: str = ""
    mma: str = ""
    message: str = ""
    timer: str = ""
    torch_ms: float | None = None  # torch's time for the same workload in the same run (None: not measured)
    host: str = ""  # the machine measured on ("": a record from before hosts were recorded)
    measured_on: GpuIdentity | None = None  # the device (UUID, name, SM clock, driver), where it was recorded
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def gpu_key(self) -> GpuKey:
        return GpuKey(self.gpu, self.cc)

    @classmethod
    def from_result(cls, workload: Workload, result: MeasureResult, gpu: Any, *, device: str = "",
                    mma: str = "", vers: Mapping[str, str] | None = None) -> "TuningRecord":
        """Record a measurement made in this process (versions and date filled in here)."""
        g = gpu_key(gpu)
        v = dict(vers) if vers is not None else versions()
        return cls(workload=workload, config=result.config, time_ms=result.time_ms,
                   error=result.error.value if result.error is not None else None, gpu=g.name, cc=g.cc,
                   triton=v["triton"], torch=v["torch"], alcop=v["alcop"],
                   date=_dt.date.today().isoformat(), device=device, mma=mma,
                   message=result.message[:2000], timer=result.timer, host=_CONTROL.sub("", socket.gethostname()),
                   measured_on=result.measured_on)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"workload": self.workload.to_dict(), "config": self.config.to_dict(), "impl": "alcop",
                             "time_ms": self.time_ms, "error": self.error, "gpu": self.gpu,
                             "device": self.device, "cc": self.cc, "mma": self.mma, "triton": self.triton,
                             "torch": self.torch, "alcop": self.alcop, "date": self.date}
        if self.message:
            d["message"] = self.message
        if self.timer:
            d["timer"] = self.timer
        if self.torch_ms is not None:
            d["torch_ms"] = self.torch_ms
        if self.measured_on is not None:
            d["measured_on"] = self.measured_on.to_dict()
        if self.host:
            d["host"] = self.host
        # Keys a newer alcop_triton wrote travel on: export, import and copy lose nothing.
        d.update((k, v) for k, v in self.extra.items() if k not in d and _strict_json(v))
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> "TuningRecord":
        """Validate and parse one record; any problem raises DatabaseError (never half-parsed)."""
        if not isinstance(d, dict):
            raise DatabaseError(f"record is a {type(d).__name__}, expected a JSON object")
        schema = d.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise DatabaseError(f"record schema {schema!r} is unknown (this alcop_triton reads schema {SCHEMA})")
        workload = _workload(d.get("workload"))
        if not isinstance(d.get("config"), dict):
            raise DatabaseError(f"config={d.get('config')!r}: expected a JSON object of Triton-style keys")
        try:
            config = KernelConfig.from_dict(d["config"])
        except (TypeError, ValueError, ScheduleError) as exc:
            raise DatabaseError(f"invalid config: {exc}") from None
        try:
            check_record(workload, config)
        except ScheduleError as exc:
            raise DatabaseError(f"invalid record: {exc}") from None
        time_ms, error = d.get("time_ms"), d.get("error")
        if error is None:
            if not _positive_time(time_ms):
                raise DatabaseError(f"time_ms={time_ms!r}: a successful record needs a finite time > 0")
            time_ms = float(time_ms)  # type: ignore[arg-type]  # a number: _positive_time checked it
        else:
            if error not in ERROR_KINDS:
                raise DatabaseError(f"error={error!r}: must be null or one of {ERROR_KINDS}")
            if time_ms is not None:
                raise DatabaseError(f"error={error!r} with time_ms={time_ms!r}: a failed record has no time")
        strs: dict[str, str] = {}
        for k in _STRING_FIELDS:
            v = d.get(k, "")
            if not isinstance(v, str):
                raise DatabaseError(f"{k}={v!r}: expected a string")
            if k != "message" and _CONTROL.search(v):  # these are printed in tables and exported code
                raise DatabaseError(f"{k}={v!r}: control characters (newlines, ...) are not allowed")
            strs[k] = v
        for k in ("gpu", "cc"):
            if not strs[k]:
                raise DatabaseError(f"record has no {k!r}: cannot tell which GPU it was measured on")
        torch_ms = d.get("torch_ms")
        if torch_ms is not None and not _positive_time(torch_ms):
            raise DatabaseError(f"torch_ms={torch_ms!r}: expected null or a finite time > 0")
        measured_on = GpuIdentity.from_dict(d["measured_on"]) if d.get("measured_on") is not None else None
        extra = {k: v for k, v in d.items() if k not in _RECORD_KEYS}
        return cls(workload=workload, config=config, time_ms=time_ms, error=error, extra=extra,
                   torch_ms=float(torch_ms) if torch_ms is not None else None, measured_on=measured_on, **strs)


def _strict_json(v: Any) -> bool:
    """Whether ``v`` is writable as strict JSON (json.loads reads NaN and Infinity; to_json refuses them)."""
    try:
        json.dumps(v, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def _positive_time(t: Any) -> bool:
    """Whether ``t`` is a JSON number that is a finite time > 0 (an integer of 400 digits is not: it has no
    float, and ``math.isfinite`` would raise on it)."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return False
    try:
        return math.isfinite(float(t)) and t > 0
    except OverflowError:
        return False


def _workload(w: Any) -> Workload:
    """A record's workload, every field checked for its exact JSON type: a shape of 512.9 or "512"
    is refused, not read as 512 or (5, 1, 2)."""
    if not isinstance(w, dict):
        raise DatabaseError(f"workload={w!r}: expected a JSON object")
    shape, layout = w.get("shape"), w.get("layout", "nn")
    if not isinstance(shape, list) or not all(type(s) is int and 0 <= s <= MAX_DIM for s in shape):
        raise DatabaseError(f"workload shape={shape!r}: expected a list of integers in [0, 2**40]")
    for k in ("op", "dtype"):
        if not isinstance(w.get(k, "float16"), str):
            raise DatabaseError(f"workload {k}={w.get(k)!r}: expected a string")
    if layout not in LAYOUTS:
        raise DatabaseError(f"workload layout={layout!r}: expected one of {LAYOUTS}")
    unknown = set(w) - {"op", "shape", "dtype", "layout"}
    if unknown:
        raise DatabaseError(f"workload keys {sorted(unknown)} are unknown")
    try:
        return Workload.from_dict(w)
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise DatabaseError(f"invalid workload: {exc}") from None


SKIPPED_SHOWN = 5
"""Skipped records a warning describes one by one; the rest are counted."""


def warn_skipped(source: str, skipped: Sequence[tuple[Any, Any]], stacklevel: int = 3) -> None:
    """One warning for every record a read skipped: how many, and where (row id or line number)."""
    if not skipped:
        return
    shown = "; ".join(f"{where}: {reason}" for where, reason in skipped[:SKIPPED_SHOWN])
    more = f"; and {len(skipped) - SKIPPED_SHOWN} more" if len(skipped) > SKIPPED_SHOWN else ""
    warnings.warn(f"{source}: {len(skipped)} tuning record(s) skipped: {shown}{more}", RecordSkipped,
                  stacklevel=stacklevel)


def parse_line(line: str) -> TuningRecord | None:
    """One JSONL line to a validated record; None for a library baseline line; DatabaseError if bad.

    Measurement files also time reference libraries (``"impl": "torch"``, no config) next to
    alcop's kernels; those are valid lines but not tuning records.
    """
    try:
        d = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatabaseError(f"bad JSON ({exc.msg} at column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits, nesting beyond the stack
        raise DatabaseError(f"bad JSON ({type(exc).__name__}: {str(exc)[:100]})") from None
    if isinstance(d, dict) and d.get("impl", "alcop") != "alcop":
        if not isinstance(d["impl"], str):
            raise DatabaseError(f"impl={d['impl']!r}: expected a string")
        return None
    return TuningRecord.from_dict(d)


def scan_jsonl(path: str | os.PathLike[str]) -> tuple[list[TuningRecord], list[tuple[str, str]]]:
    """Valid tuning records of a JSONL file (gzip-compressed when it ends in .gz), in order, and the
    rejected lines as ("line N", reason). A file cut short (a truncated .gz) keeps every line read
    before the cut. A torch baseline line (``"impl": "torch"``) is no record, but its time becomes the
    ``torch_ms`` of that workload's records on that GPU which have none. Raises OSError if the file
    cannot be opened."""
    out: list[TuningRecord] = []
    rejected: list[tuple[str, str]] = []
    torch_ms: dict[tuple[Workload, str, str], float] = {}
    lineno = 0
    with open_jsonl(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = parse_line(line)
                except DatabaseError as exc:
                    rejected.append((f"line {lineno}", str(exc)))
                    continue
                if r is not None:
                    out.append(r)
                else:
                    baseline = _torch_baseline(line)
                    if baseline is not None:
                        torch_ms[baseline[0]] = baseline[1]
        except (EOFError, OSError, zlib.error) as exc:  # gzip: truncated or corrupt stream
            rejected.append((f"after line {lineno}", f"file unreadable from here on ({type(exc).__name__}: {exc})"))
    if torch_ms:
        out = [r if r.torch_ms is not None or (r.workload, r.gpu, r.cc) not in torch_ms
               else dataclasses.replace(r, torch_ms=torch_ms[(r.workload, r.gpu, r.cc)]) for r in out]
    return out, rejected


def read_jsonl(path: str | os.PathLike[str]) -> list[TuningRecord]:
    """``scan_jsonl``'s records; the rejected lines are reported in one RecordSkipped warning."""
    out, rejected = scan_jsonl(path)
    warn_skipped(str(path), rejected)
    return out


def _torch_baseline(line: str) -> tuple[tuple[Workload, str, str], float] | None:
    """(workload, gpu, cc) and time of a valid torch baseline line, else None."""
    d = json.loads(line)
    t = d.get("time_ms")
    if d.get("impl") != "torch" or d.get("error") is not None or not _positive_time(t):
        return None
    try:
        return (Workload.from_dict(d["workload"]), str(d["gpu"]), normalize_cc(d["cc"])), float(t)
    except (KeyError, TypeError, ValueError, ArithmeticError, ScheduleError, DatabaseError):
        return None


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------------------------
# Queries over lists of records (shared by the database, the shipped default table and replay).

@dataclass(frozen=True)
class RankedConfig:
    config: KernelConfig
    time_ms: float  # median over this config's successful measurements
    count: int


def current_version_group(records: Sequence[TuningRecord]) -> list[TuningRecord]:
    """Records of this process's alcop+triton versions if there are any, else all of them.

    A version upgrade changes codegen and Triton's compiler, so fresh measurements win; but old
    ones are still far better than no data, so they are used when nothing newer exists.
    """
    v = versions()
    cur = [r for r in records if r.alcop == v["alcop"] and r.triton == v["triton"]]
    return cur or list(records)


def rank_configs(records: Iterable[TuningRecord]) -> list[RankedConfig]:
    """Configs of one workload, fastest median first; a config that ever failed is excluded."""
    times: dict[KernelConfig, list[float]] = {}
    failed: set[KernelConfig] = set()
    for r in records:
        if not r.ok:
            # A wrong answer or crash on this GPU disqualifies the config even if another run
            # timed it: a fast wrong kernel must never be dispatched.
            failed.add(r.config)
        elif r.time_ms is not None:
            times.setdefault(r.config, []).append(r.time_ms)
    ranked = [RankedConfig(c, statistics.median(ts), len(ts)) for c, ts in times.items() if c not in failed]
    ranked.sort(key=lambda rc: (rc.time_ms, rc.config))
    return ranked


def select(records: Iterable[TuningRecord], workload: Workload | None = None, gpu: Any = None) -> list[TuningRecord]:
    """Records of ``workload`` on ``gpu``. A GPUSpec also selects its MMA path: Hopper under
    ``DISABLE_MMA_V3=1`` runs other kernels than with wgmma, so their timings do not mix."""
    g = gpu_key(gpu) if gpu is not None else None
    mma = mma_of(gpu)
    return [r for r in records if (workload is None or r.workload == workload)
            and (g is None or (r.gpu_key == g and (not mma or not r.mma or r.mma == mma)))]


def best_of(records: Sequence[TuningRecord], workload: Workload, gpu: Any) -> RankedConfig | None:
    ranked = rank_configs(current_version_group(select(records, workload, gpu)))
    return ranked[0] if ranked else None


# ----------------------------------------------------------------------------------------------

def default_db_path() -> Path:
    """``$ALCOP_DB`` if set, else ``<user data dir>/alcop_triton/tuning.sqlite``. A PostgreSQL URL there is no
    path: ``store.open_database`` opens either kind."""
    from .. import settings

    env = settings.db_location()
    if env:
        if env.startswith(("postgresql://", "postgres://")):
            raise DatabaseError("ALCOP_DB names a PostgreSQL server, not a file: open it with "
                                "alcop_triton.autotune.store.open_database()")
        return Path(env).expanduser()
    return settings.data_dir() / "tuning.sqlite"


_DDL = """
CREATE TABLE IF NOT EXISTS measurements (
    id      INTEGER PRIMARY KEY,
    gpu     TEXT NOT NULL,
    cc      TEXT NOT NULL,
    op      TEXT NOT NULL,
    shape   TEXT NOT NULL,
    dtype   TEXT NOT NULL,
    layout  TEXT NOT NULL,
    alcop   TEXT NOT NULL,
    triton  TEXT NOT NULL,
    torch   TEXT NOT NULL,
    time_ms REAL,
    error   TEXT,
    record  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS measurements_by_key ON measurements (gpu, cc, op, dtype, shape, layout);
"""


APPLICATION_ID = int.from_bytes(b"ALCP", "big")
"""``PRAGMA application_id`` of alcop's tuning databases (bytes 68-71 of the SQLite header): what tells a
damaged file of alcop's, which is set aside, from another application's SQLite file, which is refused and
left as it is."""

_OBJECTS = ("measurements", "measurements_by_key")
_COLUMNS = ("id", "gpu", "cc", "op", "shape", "dtype", "layout", "alcop", "triton", "torch", "time_ms", "error",
            "record")


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock_path`` (created beside the database, never removed) while the body
    runs: opening, creating and setting aside a database are serialised across processes. Where the lock
    file can be neither created nor opened (a read-only directory, where nothing can be created or moved
    either) the body runs unlocked."""
    fd = -1
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            fd = os.open(lock_path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            break
        except OSError:
            continue
    try:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock


def measurement_rows(records: TuningRecord | Iterable[TuningRecord]) -> list[tuple[Any, ...]]:
    """Records as rows of the ``measurements`` table, in its column order (SQLite and PostgreSQL alike):
    the indexed columns, then the whole record as JSON."""
    recs = [records] if isinstance(records, TuningRecord) else list(records)
    return [(r.gpu, r.cc, r.workload.op, "x".join(map(str, r.workload.shape)), r.workload.dtype,
             r.workload.layout, r.alcop, r.triton, r.torch, r.time_ms, r.error, r.to_json()) for r in recs]


class RecordQueries(abc.ABC):
    """What every tuning store derives from its ``records()``: the best config of a workload and the
    workloads it holds (SQLite's ``Database`` and ``db_postgres.PostgresDatabase`` share these)."""

    @abc.abstractmethod
    def records(self, workload: Workload | None = None, gpu: Any = None, *, op: str | None = None,
                dtype: str | None = None) -> list[TuningRecord]:
        """Every valid record, optionally of one workload, GPU, op or dtype."""

    def best(self, workload: Workload, gpu: Any) -> RankedConfig | None:
        """Fastest config measured for exactly this workload on this GPU (failed configs never)."""
        return best_of(self.records(workload, gpu), workload, gpu)

    def workloads(self, gpu: Any = None) -> list[Workload]:
        seen: dict[Workload, None] = {}
        for r in self.records(gpu=gpu):
            seen.setdefault(r.workload, None)
        return list(seen)


class Database(RecordQueries):
    """SQLite tuning database (see the module docstring); safe to share between processes.

    Args:
        path: database file; ``None`` = ``default_db_path()`` (``$ALCOP_DB`` or the user data dir).
        timeout_s: how long a writer waits for another process's lock before failing.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout_s: float = 60.0) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._file: tuple[int, int] | None = None  # (device, inode) of the file opened; set aside only if still there

    def __repr__(self) -> str:
        return f"Database({str(self.path)!r})"

    # -- what every tuning store offers (store.TuningStore) besides add/records/best ----------------

    @property
    def location(self) -> str:
        """Where the records live, printable."""
        return str(self.path)

    def exists(self) -> bool:
        """Whether the database is there to read (a lookup never creates it)."""
        return self.path.exists()

    def cached_records(self, workload: Workload | None = None, gpu: Any = None, *, op: str | None = None,
                       dtype: str | None = None) -> list[TuningRecord]:
        """``records()`` for a kernel call (the file is local: no network to wait on); none if absent."""
        return self.records(workload=workload, gpu=gpu, op=op, dtype=dtype) if self.path.exists() else []

    def check_writable(self) -> None:
        """Open (creating if needed) the database now: a tuning run fails here, before measuring."""
        self._with_conn(lambda conn: None)

    def _lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def _current_file(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _drop_conn(self) -> None:
        """Forget the connection (closed if this process opened it). SQLite neither checkpoints into nor
        deletes the WAL of a file that was renamed while open, so a connection to a file another process
        set aside is closed without touching the database that took its place."""
        if self._conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None

    # A connection is not shared across fork(); reopen in a child process. A connection whose file another
    # process set aside (the path names another file now) is reopened on the path.
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            if self._current_file() == self._file:
                return self._conn
            self._drop_conn()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseError(f"{self.path}: cannot open the tuning database: {exc}") from exc
        with _exclusive(self._lock_path()):
            self._clear_path()
            try:
                conn = sqlite3.connect(self.path, timeout=self.timeout_s, check_same_thread=False,
                                       isolation_level=None)
                self._file = self._current_file()
            except (OSError, sqlite3.DatabaseError) as exc:
                raise DatabaseError(f"{self.path}: cannot open the tuning database: {exc}") from exc
            try:
                self._adopt(conn)
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise DatabaseError(f"{self.path}: not a usable SQLite tuning database: {exc}") from exc
            except BaseException:
                conn.close()
                raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _clear_path(self) -> None:
        """Refuse what stands at the path and is not an SQLite file (DatabaseError, the thing left as it is);
        an empty directory holds nothing and is set aside."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise DatabaseError(f"{self.path}: cannot open the tuning database: {exc}") from None
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(self.path) as entries:
                    empty = next(entries, None) is None
            except OSError:
                empty = False
            if not empty:
                raise DatabaseError(f"{self.path}: is a directory with files in it, not alcop_triton's tuning "
                                    "database; it is left as it is: point ALCOP_DB or --db at another path")
            self._move_aside("it is an empty directory")
        elif not stat.S_ISREG(st.st_mode):
            raise DatabaseError(f"{self.path}: is not a regular file, not alcop_triton's tuning database; it is "
                                "left as it is: point ALCOP_DB or --db at another path")

    def _adopt(self, conn: sqlite3.Connection) -> None:
        """Check that ``conn``'s file is alcop's tuning database (its application id), or alcop's from before
        the id (exactly alcop's table and index at schema 1), or empty; only then make it one (WAL mode,
        the table, the id). Anything else is another application's file: DatabaseError, and nothing of
        it was written (the checks only read)."""
        conn.execute("PRAGMA busy_timeout = %d" % int(self.timeout_s * 1000))
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app != APPLICATION_ID:
            names = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))
            columns = [r[1] for r in conn.execute("PRAGMA table_info(measurements)")]
            legacy = app == 0 and version == SCHEMA and names == sorted(_OBJECTS) and columns == list(_COLUMNS)
            if not legacy and (app, version, names) != (0, 0, []):
                raise DatabaseError(
                    f"{self.path}: is not alcop_triton's tuning database (an SQLite file with application_id "
                    f"{app}, user_version {version}, objects {names[:8]}); it is left as it is: point ALCOP_DB "
                    "or --db at another path")
        elif version > SCHEMA:
            raise DatabaseError(f"{self.path}: database schema {version} is newer than this alcop_triton "
                                f"(reads {SCHEMA}); upgrade alcop_triton or point ALCOP_DB elsewhere")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        if app != APPLICATION_ID or version < SCHEMA:
            with conn:
                # executescript() would commit mid-way; run the DDL statement by statement inside one
                # IMMEDIATE transaction.
                conn.execute("BEGIN IMMEDIATE")
                for stmt in filter(str.strip, _DDL.split(";")):
                    conn.execute(stmt)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA}")
            # Into the main file now: its header then names it alcop's even where the WAL is lost.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _damaged_ours(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the file at the path is alcop's tuning database, damaged (its header
        carries alcop's application id; its pages or table are broken). Not busy, not someone else's."""
        try:
            with open(self.path, "rb") as f:
                header = f.read(100)
        except OSError:
            return False
        if header[:16] != b"SQLite format 3\x00" or int.from_bytes(header[68:72], "big") != APPLICATION_ID:
            return False  # not alcop's: never moved; refused with DatabaseError
        msg = str(exc).lower()
        return any(m in msg for m in ("malformed", "not a database", "no such table", "no such column", "corrupt"))

    def _move_aside(self, why: str) -> None:
        """Rename the file at the path (with its WAL and shared-memory files) aside, under the lock file."""
        aside = self.path.with_name(f"{self.path.name}.damaged-{_dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}-"
                                    f"{os.urandom(3).hex()}")
        for sfx in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{self.path}{sfx}", f"{aside}{sfx}")
        warnings.warn(f"tuning database {self.path} is damaged ({why}); moved it to {aside} and started a new one",
                      DatabaseRecovered, stacklevel=5)

    def _set_aside(self, exc: BaseException) -> bool:
        """After ``exc``: set the file aside if it is alcop's and damaged; whether to retry on the path.

        Under the lock file, so that of several processes that find one damaged file, one moves it and
        the others reopen the path only after the move (SQLite would read a new file with the old one's
        WAL as malformed). Another process may have moved it already: then only reconnect."""
        self._drop_conn()
        with _exclusive(self._lock_path()):
            now = self._current_file()
            if now is None or now != self._file:
                return True
            if not self._damaged_ours(exc):
                return False
            self._move_aside(str(exc))
            return True

    def _with_conn(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` under the lock. A damaged file is set aside and ``fn`` retried on a fresh
        database, as it is where another process set the file aside meanwhile; any other SQLite or
        file-system failure becomes a DatabaseError."""
        with self._lock:
            for attempt in range(3):
                try:
                    return fn(self._connect())
                except (sqlite3.DatabaseError, DatabaseError, OSError) as exc:
                    cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
                    if attempt < 2 and cause is not None and self._set_aside(cause):
                        continue
                    if isinstance(exc, DatabaseError):
                        raise
                    raise DatabaseError(f"{self.path}: tuning database unusable: {exc}") from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

    def add(self, records: TuningRecord | Iterable[TuningRecord]) -> int:
        """Append measurements (one transaction); returns how many were written."""
        rows = measurement_rows(records)
        if not rows:
            return 0

        def insert(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("INSERT INTO measurements (gpu, cc, op, shape, dtype, layout, alcop, triton, "
                                 "torch, time_ms, error, record) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        self._with_conn(insert)
        generation.bump()  # configs chosen and launches prebound from the old records may be stale now
        return len(rows)

    def import_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Add every valid record of a JSONL file (rejected lines are reported in one warning)."""
        return self.add(read_jsonl(path))

    # -- reading ---------------------------------------------------------------------------------

    def _rows(self, where: str, args: Sequence[Any]) -> Iterator[tuple[int, tuple[Any, ...], str]]:
        rows = self._with_conn(lambda conn: conn.execute(
            "SELECT id, gpu, cc, op, shape, dtype, layout, alcop, triton, torch, record FROM measurements"
            + (f" WHERE {where}" if where else "") + " ORDER BY id", args).fetchall())
        for row in rows:
            yield row[0], tuple(row[1:10]), row[10]

    def records(self, workload: Workload | None = None, gpu: Any = None, *, op: str | None = None,
                dtype: str | None = None) -> list[TuningRecord]:
        """Valid records matching every given filter, oldest first (tampered rows warn and are skipped)."""
        conds, args = [], []
        if gpu is not None:
            g = gpu_key(gpu)
            conds += ["gpu = ?", "cc = ?"]
            args += [g.name, g.cc]
        if workload is not None:
            conds += ["op = ?", "shape = ?", "dtype = ?", "layout = ?"]
            args += [workload.op, "x".join(map(str, workload.shape)), workload.dtype, workload.layout]
        if op is not None:
            conds.append("op = ?")
            args.append(op)
        if dtype is not None:
            conds.append("dtype = ?")
            args.append(dtype)
        out = []
        skipped: list[tuple[str, Any]] = []
        for rowid, cols, text in self._rows(" AND ".join(conds), args):
            try:
                if not isinstance(text, str):
                    raise DatabaseError(f"record column holds a {type(text).__name__}, not JSON text")
                r = parse_line(text)
                if r is None:
                    raise DatabaseError("a library baseline line is not a tuning record")
            except DatabaseError as exc:
                skipped.append((f"id={rowid}", exc))
                continue
            want = (r.gpu, r.cc, r.workload.op, "x".join(map(str, r.workload.shape)), r.workload.dtype,
                    r.workload.layout, r.alcop, r.triton, r.torch)
            if cols != want:
                # The indexed columns drive lookups; if they disagree with the JSON the row was edited
                # by hand, and neither side can be trusted.
                skipped.append((f"id={rowid}", f"index columns {cols} disagree with the record {want}"))
                continue
            out.append(r)
        warn_skipped(str(self.path), skipped)
        return select(out, gpu=gpu) if gpu is not None else out

    def __len__(self) -> int:
        return int(self._with_conn(lambda conn: conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]))
