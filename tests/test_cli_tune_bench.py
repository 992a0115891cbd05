"""``alcop-tune bench`` runs the config ``alcop-tune tune`` stored on the same machine.

On a machine without CUDA both measure in the Triton interpreter and ``tune`` stores CPU timings under the
``interpreter`` key (they must never rank kernels for a GPU); ``bench`` used to ask dispatch about the
GPU spec the models use there (H100), so it ran the shipped H100 table's config instead of the tuned one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alcop_triton.autotune.database import Database, GpuKey, best_of
from alcop_triton.autotune.measure import INTERPRETER_GPU
from alcop_triton.records import KernelConfig, Workload


def _alcop_tune(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-m", "alcop_triton", "--db", str(tmp_path / "t.sqlite"), *args],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    return res


@pytest.mark.slow
def test_bench_runs_the_config_tune_stored(tmp_path: Path) -> None:
    w = Workload("matmul", (32, 48, 64), "float16", "nn")
    tuned = _alcop_tune(["tune", "matmul", "32x48x64", "--trials", "3", "--batch", "3", "--no-seed", "--tuner", "random",
                         "--seed", "3", "--json", str(tmp_path / "tune.json")], tmp_path)
    assert "trial" in tuned.stderr  # tune's progress bar
    key = GpuKey(*INTERPRETER_GPU)
    best = best_of(Database(tmp_path / "t.sqlite").records(w, key), w, key)
    assert best is not None
    run = json.loads((tmp_path / "tune.json").read_text())
    assert KernelConfig.from_dict(run["workloads"][0]["best"]["config"]) == best.config

    benched = _alcop_tune(["bench", "matmul", "32x48x64", "--no-tutorial", "--json", str(tmp_path / "bench.json")],
                          tmp_path)
    assert "bench" in benched.stderr  # bench's progress bar
    row, = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert row["workload"] == w.key() and row["alcop_error"] == ""
    assert row["alcop_source"] == "db" and row["alcop_config"] == str(best.config)
