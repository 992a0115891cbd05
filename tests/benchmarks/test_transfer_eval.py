"""benchmarks/transfer_eval.py on a small synthetic grid: each workload hidden in turn, the pick scored
with the hidden workload's own measurement, torch's time read from the grid's impl=torch lines."""

from __future__ import annotations

import json

from alcop_triton.autotune.database import TuningRecord
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.model import analytical
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

from . import load_script

te = load_script("transfer_eval.py", "bench_transfer_eval")
SPEC = get_spec("H100")
CONFIGS = [KernelConfig(128, 128, 64, num_warps=8, smem_stages=s) for s in (3, 4)] + \
    [KernelConfig(128, 256, 64, num_warps=8, smem_stages=3, async_copy="tma")]
WINNER = CONFIGS[-1]


def _grid(path):
    lines = []
    for shape in ((2048, 2048, 2048), (3072, 3072, 3072), (4096, 4096, 4096)):
        w = Workload("matmul", shape, "float16", "nt")
        for c in CONFIGS:   # the model's estimate, the winner measured 2x faster than it on every shape
            ms = analytical.estimate(w, c, SPEC).time_s * 1e3 * (0.5 if c == WINNER else 1.0)
            lines.append(TuningRecord.from_result(w, MeasureResult(c, ms), SPEC).to_json())
        torch_ms = 1.5 * analytical.estimate(w, WINNER, SPEC).time_s * 1e3 * 0.5   # 1.5x the winner's time
        lines.append(json.dumps({"workload": w.to_dict(), "config": None, "impl": "torch", "time_ms": torch_ms,
                                 "error": None, "gpu": "H100", "cc": "9.0", "triton": "3.6.0", "torch": "2.11.0",
                                 "alcop": "0.1.0", "date": "2026-11-23"}))
    path.write_text("\n".join(lines) + "\n")


def test_each_hidden_workload_gets_the_winner_of_its_neighbours(tmp_path):
    grid = tmp_path / "grid.jsonl"
    _grid(grid)
    assert te.main([str(grid), "--out", str(tmp_path / "eval"), "--keep", "0", "2"]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    every, top2 = report["results"]
    assert every["workloads"] == 3 and every["unmeasured_picks"] == 0
    assert every["of_best_geomean"] == 1.0 and all(r["config"] == str(WINNER) for r in every["rows"])
    assert all(abs(r["vs_torch"] - 1.5) < 1e-9 for r in every["rows"])
    assert top2["keep"] == 2 and top2["of_best_geomean"] == 1.0
    assert "left one shape out" in (tmp_path / "eval.md").read_text()
