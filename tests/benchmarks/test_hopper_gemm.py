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
sys.path.insert(0, str(ROOT / "benchmarks"))

from hopper_gemm import LEVEL_SETS  # noqa: E402


@pytest.mark.sm90_compile
def test_dry_run_compiles_the_planned_kernels(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "hopper_gemm.py"), "--out", str(tmp_path), "--dry-run",
           "--shapes", "4096x4096x1000:tn", "--dtypes", "bfloat16", "--level-sets", "1+2+3"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "hopper_gemm.json").read_text())
    assert report["meta"]["command"].endswith("--level-sets 1+2+3") and report["meta"]["triton"]
    rows = report["rows"]
    assert len(rows) == len(LEVEL_SETS["1+2+3"]) and all(r["wgmma"] and r["tma"] and 0 < r["shared"] <= 232448
                                                       for r in rows)
    assert rows[0]["kernel"].startswith("hopper_gemm_tn_bf16_") and "_c2pp_ws_pers_" in rows[0]["config"]
    assert "| 4096x4096x1000 | tn | bfloat16 | 1+2+3 |" in (tmp_path / "hopper_gemm.md").read_text()


# A stand-in worker for run_group: answers each case as the real one does, except that the case with
# m == 2 never ends (a deadlocked kernel) and the case with m == 3 kills its process (a crash).
FAKE_WORKER = r"""
import json, os, sys, time
spec = json.loads(sys.stdin.read())
print("compiling...", flush=True)
for m, n, k, layout in spec["cases"]:
    if m == 2:
        time.sleep(600)
    if m == 3:
        sys.stderr.write("an illegal memory access was encountered\n")
        os._exit(7)
    print("@@hopper_gemm_row " + json.dumps({"case": [m, n, k, layout], "ms": float(m)}), flush=True)
"""


def test_run_group_records_a_hang_and_a_crash_and_carries_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from . import load_script
    hg = load_script("hopper_gemm.py", "hopper_gemm_script")
    # A fresh child's first answer may wait this long: generous, since a loaded test machine can take
    # seconds to start Python (5 s once timed out the case after the hang); only the hang waits 3 s.
    monkeypatch.setattr(hg, "STARTUP_S", 60.0)
    spec = {"kind": "config", "cases": [[1, 8, 8, "nn"], [2, 8, 8, "nn"], [4, 8, 8, "nt"], [3, 8, 8, "nn"],
                                         [5, 8, 8, "tt"]]}
    got = hg.run_group(spec, timeout=3.0, cmd=[sys.executable, "-c", FAKE_WORKER])
    assert [r["case"] for r in got] == spec["cases"]
    assert [r.get("ms") for r in got] == [1.0, None, 4.0, None, 5.0]
    assert got[1]["error"].startswith("timed out: no result within 3 s") and "ms" not in got[1]
    assert got[3]["error"].startswith("crashed: its process exited with code 7: an illegal memory access")


def test_run_group_refuses_a_record_for_another_case(monkeypatch: pytest.MonkeyPatch) -> None:
    from . import load_script
    hg = load_script("hopper_gemm.py", "hopper_gemm_script")
    liar = "import sys; sys.stdin.read(); print('@@hopper_gemm_row {\"case\": [9, 9, 9, \"nn\"], \"ms\": 1.0}')"
    got = hg.run_group({"kind": "config", "cases": [[1, 8, 8, "nn"]]}, timeout=30.0, cmd=[sys.executable, "-c", liar])
    assert len(got) == 1 and got[0]["error"].startswith("malformed worker record") and "ms" not in got[0]


def test_gpu_rows_join_baselines_and_leave_failed_cases_untimed(monkeypatch: pytest.MonkeyPatch) -> None:
    # run_all's assembly of the children's records, without a GPU: each group answered as a worker would
    from . import load_script
    hg = load_script("hopper_gemm.py", "hopper_gemm_script")

    def answer(spec: dict, timeout: float) -> list[dict]:
        out = []
        for case in spec["cases"]:
            if spec["kind"] == "baseline":
                out.append({"case": case, "torch_ms": 2.0, "alcop_triton_ms": 2.5, "alcop_triton_rel_err": 0.0,
                            "alcop_triton_vs_torch": 0.8})
            elif spec["config"]["wgmma_depth"] == 0:
                out.append({"case": case, "error": "timed out: no result within 60 s"})
            else:
                out.append({"case": case, "config": "planned", "notes": [], "rel_err": 0.0, "ms": 1.0, "tflops": 9.0})
        return out
    monkeypatch.setattr(hg, "run_group", answer)
    rows = hg.run_all([(1024, 1024, 1024, "nt", "bfloat16")], ["1", "1+2"], 60.0, dry=False)
    assert len(rows) == len(hg.LEVEL_SETS["1"]) + len(hg.LEVEL_SETS["1+2"])
    assert all("vs_torch" not in r and r["error"].startswith("timed out") for r in rows if r["levels"] == "1")
    assert all(r["vs_torch"] == 2.0 and r["torch_ms"] == 2.0 for r in rows if r["levels"] == "1+2")
    summ = hg.summary(rows, ["1", "1+2"])
    assert [s["levels"] for s in summ] == ["dispatched", "1+2"]
    assert summ[0]["geomean_vs_torch"] == 0.8 and summ[1]["geomean_vs_torch"] == 2.0
    # --level-sets none: one row per shape, the baselines alone, summarised as dispatched
    only = hg.run_all([(1024, 1024, 1024, "nt", "bfloat16"), (512, 2048, 1024, "nt", "bfloat16")], [], 60.0, dry=False)
    assert [r["levels"] for r in only] == ["none", "none"] and all("ms" not in r for r in only)
    assert [(s["levels"], s["shapes"], s["min_vs_torch"]) for s in hg.summary(only, [])] == [("dispatched", 2, 0.8)]
