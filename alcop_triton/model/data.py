"""Measurement records as the models consume them, read from ``benchmarks/data/*.jsonl``.

The line format is the one in docs/ARCHITECTURE.md; only the workload, the config, the time and
the error are used here, the provenance fields (gpu, versions, date) stay in the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..records import KernelConfig, Workload, open_jsonl


@dataclass(frozen=True)
class Measurement:
    """One measured (workload, config): ``time_s`` is None when the run failed (``error`` says why)."""

    workload: Workload
    config: KernelConfig
    time_s: float | None
    error: str | None = None
    gpu: str | None = None
    mma: str | None = None   # the process-wide MMA path ("wgmma", or "mma_sync" under DISABLE_MMA_V3)

    @property
    def ok(self) -> bool:
        return self.time_s is not None and self.time_s > 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Measurement":
        t = d.get("time_ms")
        return cls(Workload.from_dict(d["workload"]), KernelConfig.from_dict(d["config"]),
                   None if t is None else float(t) * 1e-3, d.get("error"), d.get("gpu"), d.get("mma"))

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload.to_dict(), "config": self.config.to_dict(),
                "time_ms": None if self.time_s is None else self.time_s * 1e3, "error": self.error,
                "gpu": self.gpu, "mma": self.mma}


def load_jsonl(paths: Iterable[str | Path]) -> list[Measurement]:
    """Read measurement files (gzip-compressed when named .gz); a malformed line raises ValueError naming the file and line.

    Lines without a config (library baselines such as ``"impl": "torch"``) are skipped.
    """
    out: list[Measurement] = []
    for path in paths:
        with open_jsonl(path) as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    if d.get("config") is None:
                        continue  # a reference-library timing (e.g. "impl": "torch"): no config to model
                    out.append(Measurement.from_json(d))
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{i}: bad measurement record: {e}") from e
    return out


def group_by_workload(ms: Iterable[Measurement]) -> dict[Workload, list[Measurement]]:
    """Measurements per workload, in first-seen order."""
    out: dict[Workload, list[Measurement]] = {}
    for m in ms:
        out.setdefault(m.workload, []).append(m)
    return out
