"""Where a tuning run's wall time goes: one stopwatch per phase.

Phases (``PHASES``): ``start`` (process start to the command line's ``main``: interpreter start and
imports), ``space`` (enumerating and pruning the config space), ``model`` (analytical ranking,
XGBoost pretraining, fits and the optimizer's predictions), ``compile`` (waiting for the parallel
compile workers), ``measure`` (waiting for the measurement process: checks, timing, and whatever it
still compiles itself), ``other`` (the rest of the wall time: database writes, process setup).
``alcop-tune tune`` prints the split and writes it to ``--json``.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Iterator

PHASES: tuple[str, ...] = ("start", "space", "model", "compile", "measure", "other")


def process_start_time() -> float | None:
    """The ``time.time()`` at which this process started (Linux: from /proc), or None where unknown."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
            # Field 22 (starttime, clock ticks after boot) follows the parenthesised command name.
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


@dataclass
class Timings:
    """Seconds per phase; ``phase(name)`` adds the time spent inside its block to ``name``."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        if name not in self.seconds:
            raise KeyError(f"timing phase {name!r} is unknown; expected one of {PHASES}")
        self.seconds[name] += seconds

    def close(self, wall_s: float) -> dict[str, float]:
        """The split of ``wall_s`` seconds: the named phases, and ``other`` for what none of them covered."""
        named = sum(v for k, v in self.seconds.items() if k != "other")
        self.seconds["other"] = max(0.0, wall_s - named)
        return dict(self.seconds, total=wall_s)

    def merge(self, other: "Timings") -> None:
        for k, v in other.seconds.items():
            self.seconds[k] += v


def format_split(split: dict[str, float]) -> str:
    """One line: ``total 12.3 s = start 2.1 + space 0.8 + ...``."""
    parts = " + ".join(f"{k} {split.get(k, 0.0):.1f}" for k in PHASES)
    return f"time split: total {split.get('total', 0.0):.1f} s = {parts}"


__all__ = ["PHASES", "Timings", "format_split", "process_start_time"]
