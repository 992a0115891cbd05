"""Synthetic recorded measurements for replay tests: analytical times distorted in a learnable way."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from alcop_triton.autotune.database import GpuKey, TuningRecord
from alcop_triton.autotune.measure import ErrorKind, MeasureResult
from alcop_triton.autotune.space import ConfigSpace
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import Workload

H100 = GpuKey("H100", "9.0")
WORKLOADS = (Workload("matmul", (1024, 768, 3072), "float16", "nt"), Workload("bmm", (12, 512, 512, 64), "float16", "nt"))


def synthetic_records(w: Workload, n: int = 240, seed: int = 0) -> list[TuningRecord]:
    """``n`` configs of the real space with 'measured' times: the analytical estimate times a
    systematic error the model does not know (register stages cost more, group_m=1 loses L2 reuse)
    and per-config noise; about 5% fail to compile or give wrong answers."""
    spec = get_spec("H100")
    space = ConfigSpace.build(w, spec)
    rng = np.random.default_rng(seed + zlib.crc32(w.key().encode()))
    picks = rng.choice(len(space), size=min(n, len(space)), replace=False)
    est = space.estimates()
    out = []
    for i in sorted(int(p) for p in picks):
        c = space.configs[i]
        noise = math.exp(0.15 * rng.standard_normal())
        bias = (1.25 if c.reg_stages == 3 else 1.0) * (1.15 if c.group_m == 1 else 1.0)
        u = rng.random()
        if u < 0.03:
            r = MeasureResult(c, None, ErrorKind.COMPILE, "ptxas died")
        elif u < 0.05:
            r = MeasureResult(c, None, ErrorKind.WRONG_ANSWER, "max abs error 3.2")
        else:
            r = MeasureResult(c, est[i] * 1e3 * noise * bias, None, "", "do_bench")
        out.append(TuningRecord.from_result(w, r, H100, device="NVIDIA H100 80GB HBM3", mma="wgmma"))
    return out


@pytest.fixture(scope="session")
def synth_records() -> dict[Workload, list[TuningRecord]]:
    return {w: synthetic_records(w) for w in WORKLOADS}


@pytest.fixture
def synth_dir(tmp_path, synth_records):
    """A benchmarks/data-like directory: one JSONL file per workload."""
    d = tmp_path / "data"
    d.mkdir()
    for i, (w, recs) in enumerate(synth_records.items()):
        (d / f"h100_{i}.jsonl").write_text("".join(r.to_json() + "\n" for r in recs))
    return d

