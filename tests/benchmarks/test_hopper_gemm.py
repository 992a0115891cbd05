"""benchmarks/hopper_gemm.py's --dry-run on the CPU: every planned kernel of a level set generated and
compiled for sm90, the report written with its provenance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.sm90_compile
def test_dry_run_compiles_the_planned_kernels(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "hopper_gemm.py"), "--out", str(tmp_path), "--dry-run",
           "--shapes", "4096x4096x1000:tn", "--dtypes", "bfloat16", "--level-sets", "1+2+3"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "hopper_gemm.json").read_text())
    assert report["meta"]["command"].endswith("--level-sets 1+2+3") and report["meta"]["triton"]
    rows = report["rows"]
    assert len(rows) == 3 and all(r["wgmma"] and r["tma"] and 0 < r["shared"] <= 232448 for r in rows)
    assert rows[0]["kernel"].startswith("hopper_gemm_tn_bf16_") and "_c2pp_ws_pers_" in rows[0]["config"]
    assert "| 4096x4096x1000 | tn | bfloat16 | 1+2+3 |" in (tmp_path / "hopper_gemm.md").read_text()
