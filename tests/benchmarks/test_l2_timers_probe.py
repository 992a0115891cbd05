"""benchmarks/probes/l2_timers.py's inputs: configs from exported tuning records (the timing itself needs a
GPU)."""

from __future__ import annotations

import gzip
import json

from . import load_script

l2 = load_script("probes/l2_timers.py", "l2_timers")


def _record(shape: list[int], block_n: int, ms: float | None, **kw: object) -> str:
    return json.dumps({"workload": {"op": "matmul", "shape": shape, "dtype": "float16", "layout": "nt"},
                       "config": {"BLOCK_M": 128, "BLOCK_N": block_n}, "impl": "alcop", "time_ms": ms} | kw)


def test_record_configs_fastest_first_across_files(tmp_path) -> None:
    a = tmp_path / "a.jsonl.gz"
    with gzip.open(a, "wt") as f:
        f.write("\n".join([_record([64, 96, 32], 64, 0.030), _record([64, 96, 32], 128, 0.020),
                           _record([64, 96, 32], 256, None, error="compile"),  # failed: no time, left out
                           _record([64, 96, 48], 32, 0.001)]) + "\n")  # another shape
    b = tmp_path / "b.jsonl"
    b.write_text("\n".join([_record([64, 96, 32], 64, 0.010),  # the same config measured again, faster
                            _record([64, 96, 32], 32, 0.040, impl="torch")]) + "\n")
    got = l2.record_configs([a, b], (64, 96, 32), top=5)
    assert [(ms, c["BLOCK_N"]) for ms, c in got] == [(0.010, 64), (0.020, 128)]
    assert len(l2.record_configs([a, b], (64, 96, 32), top=1)) == 1

