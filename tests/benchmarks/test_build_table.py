"""benchmarks/build_table.py's CPU side: the workload list, candidate sets, record format and resuming."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from alcop_triton.autotune.database import parse_line
from alcop_triton.autotune.space import shape_reason
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "data" / "alcop_suite.json"
SPEC = get_spec("H100")
META = {"gpu": "H100", "device": "NVIDIA H100 80GB HBM3", "cc": "9.0", "mma": "wgmma", "triton": "3.6.0",
        "torch": "2.11.0", "alcop": "0.1.0", "date": "2026-11-22"}


@pytest.fixture(scope="module")
def bt():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("build_table", ROOT / "benchmarks" / "build_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_workload_list_covers_the_sets_in_both_dtypes_without_duplicates(bt, tmp_path):
    plan, skipped = bt.workload_list(bt.SETS, ["float16", "bfloat16"], SUITE, tmp_path / "absent.json")
    called = [c for c, _ in plan]
    assert len(called) == len(set(called)) and not skipped
    assert {w.dtype for w in called} == {"float16", "bfloat16"} and {w.layout for w in called} == {"nt"}
    keys = {w.key() for w in called}
    for must in ("matmul:1024x768x768:float16:nt", "bmm:32x2048x2048x128:bfloat16:nt",
                 "matmul:16x4096x14336:float16:nt", "matmul:2048x28672x8192:float16:nt",
                 "matmul:6304x3072x768:bfloat16:nt", "matmul:32x1000x2048:float16:nt"):
        assert must in keys
    odd = dict(plan)[Workload("matmul", (999, 999, 999), "float16", "nt")]
    assert odd == Workload("matmul", (999, 999, 1000), "float16", "nt")  # measured as the drop-ins run it


def test_heldout_shapes_are_left_out_in_every_dtype(bt, tmp_path):
    held = tmp_path / "heldout.json"
    held.write_text(json.dumps({"shapes": [{"op": "matmul", "shape": [1024, 768, 768], "why": "x"},
                                           {"op": "bmm", "shape": [32, 2048, 2048, 128], "dtype": "bfloat16"}]}))
    plan, skipped = bt.workload_list(["suite", "llama"], ["float16", "bfloat16"], SUITE, held)
    assert {w.key() for w in skipped} == {f"{op}:{s}:{d}:nt" for op, s in (("matmul", "1024x768x768"),
                                                                            ("bmm", "32x2048x2048x128"))
                                          for d in ("float16", "bfloat16")}
    assert not {w for _, w in plan} & set(skipped)
    with pytest.raises(ValueError, match="--sets"):
        bt.workload_list(["nope"], ["float16"], SUITE, held)


@pytest.mark.parametrize("shape,splits", [((16, 4096, 14336), True), ((4096, 4096, 4096), False)])
def test_candidates_are_model_ranked_and_include_split_k_for_decode(bt, shape, splits):
    w = Workload("matmul", shape, "float16", "nt")
    cands = bt.candidates(w, SPEC, 6, [])
    assert len(cands) == len(set(cands)) and 6 <= len(cands) <= 6 + 4
    assert all(shape_reason(w, c, SPEC) is None for c in cands)
    assert (len({c.split_k for c in cands}) > 1) == splits


def test_records_are_table_lines_and_runs_resume(bt, tmp_path):
    called = Workload("matmul", (999, 999, 999), "float16", "nt")
    w = Workload("matmul", (999, 999, 1000), "float16", "nt")
    c = KernelConfig(64, 128, 64, smem_stages=4, split_k=2)
    ok = bt.record(w, c, 0.05, None, META, "cuda_graph", called_as=called)
    bad = bt.record(w, KernelConfig(16, 16, 16), None, "wrong_answer", META, message="relative error 1")
    torch_line = bt.record(w, None, 0.06, None, META, "cuda_graph")
    rec = parse_line(json.dumps(ok))
    assert rec is not None and rec.config == c and rec.time_ms == 0.05 and rec.timer == "cuda_graph"
    assert ok["called_as"] == called.to_dict() and "called_as" not in torch_line
    assert parse_line(json.dumps(bad)).error == "wrong_answer"
    assert parse_line(json.dumps(torch_line)) is None  # a library baseline, not a tuning record
    path = tmp_path / "default_h100.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (ok, bad, torch_line)) + '\n{"workload": {"op": "mat')
    done = bt.done_keys(path)
    assert bt._pair_key(w, c) in done and bt._pair_key(w, None) in done
    plan = [(called, w), (w, w)]
    assert bt.pending(plan, done) == [(called, w)]  # torch on the user's shape is still missing
    summary = bt.summarize(path, META)
    assert summary["rows"] == [{"workload": w.key(), "alcop_ms": 0.05, "torch_ms": 0.06, "speedup": pytest.approx(1.2)}]
    bt.write_summary(tmp_path, summary)
    assert "| matmul:999x999x1000:float16:nt | 0.0500 | 0.0600 | 1.20x |" in (tmp_path / "build_table.md").read_text()
