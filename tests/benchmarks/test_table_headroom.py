"""benchmarks/table_headroom.py: the same-run comparison of the shipped configs with tuning's best."""

from __future__ import annotations

import gzip
import json

import pytest

from . import load_script

th = load_script("table_headroom.py", "table_headroom")


def _rec(shape, cfg, ms, impl="alcop", error=None):
    return {"workload": {"op": "matmul", "shape": shape, "dtype": "float16", "layout": "nt"},
            "config": {"BLOCK_M": cfg}, "impl": impl, "time_ms": ms, "error": error,
            "device": "GPU", "date": "2026-01-01", "timer": "cuda_graph"}


def test_headroom_compares_shipped_configs_and_tuned_best_from_the_same_run(tmp_path):
    table = [_rec([64, 64, 64], 64, 0.010), _rec([64, 64, 64], 128, 0.012), _rec([64, 64, 64], 0, 0.008, "torch"),
             _rec([32, 32, 32], 64, 0.005)]
    tuned = [_rec([64, 64, 64], 64, 0.011),    # a shipped config, this run: slower than as shipped
             _rec([64, 64, 64], 128, 0.013),
             _rec([64, 64, 64], 32, 0.0088),   # the tuner's: 1.25x faster than the shipped configs here
             _rec([64, 64, 64], 16, 0.001, error="wrong answer"),   # failed: counted, never the best
             _rec([32, 32, 32], 32, 0.004)]    # no shipped config re-measured: no same-run row
    path = tmp_path / "tuned.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in tuned)
    (tmp_path / "table.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table))
    assert th.main([str(path), "--table", str(tmp_path / "table.jsonl"), "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "table_headroom.json").read_text())["rows"]
    assert len(rows) == 1
    r = rows[0]
    assert r["workload"] == "matmul 64x64x64 float16 nt" and r["trials"] == 4 and r["failed"] == 1
    assert r["shipped_ms"] == 0.010 and r["shipped_configs_ms"] == 0.011 and r["tuned_ms"] == 0.0088
    assert r["headroom"] == pytest.approx(1.25) and r["tuned_config"] == {"BLOCK_M": 32}
    assert r["torch_ms_shipped"] == 0.008
    md = (tmp_path / "out" / "table_headroom.md").read_text()
    assert "| matmul 64x64x64 float16 nt | 4 (1) | 10.0 µs | 11.0 µs | 8.8 µs | 1.250x | 8.0 µs |" in md
