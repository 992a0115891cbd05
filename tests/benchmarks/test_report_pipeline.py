"""benchmarks/report_pipeline.py on the stored H100 grids: the variant reading, the grid-completeness
check and the run-to-run comparison (what issue 3's report states comes from these functions)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"


def _load():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("report_pipeline", ROOT / "benchmarks" / "report_pipeline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rec(op: str, shape: tuple[int, ...], bk: int, stages: int, ms: float | None, impl: str = "alcop") -> dict:
    cfg = None if impl == "torch" else {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": 4,
                                        "num_stages": stages, "REG_STAGES": 1, "REG_SPLIT": 1, "ASYNC_COPY": "pointer"}
    return {"workload": {"op": op, "shape": list(shape), "dtype": "float16", "layout": "nt"}, "config": cfg,
            "impl": impl, "time_ms": ms, "error": None if ms else "compile"}


def test_variants_take_each_best_and_skip_failures():
    rp = _load()
    recs = [_rec("matmul", (64, 64, 512), 0, 0, 1.0, "torch"),
            _rec("matmul", (64, 64, 512), 64, 1, 4.0), _rec("matmul", (64, 64, 512), 128, 1, 3.0),
            _rec("matmul", (64, 64, 512), 64, 2, 2.5), _rec("matmul", (64, 64, 512), 64, 4, 2.0),
            _rec("matmul", (64, 64, 512), 32, 8, None)]   # a failed config never counts
    (row,) = rp.variant_rows(recs, rp.RESTRICTIONS["whole grid"])
    assert (row["none_ms"], row["double_buffer_ms"], row["full_ms"]) == (3.0, 2.5, 2.0)
    (row,) = rp.variant_rows(recs, rp.RESTRICTIONS["BLOCK_K <= 64"])
    assert row["none_ms"] == 4.0   # the BLOCK_K=128 one-stage config is outside this grid


def test_paper_k_tiles_restriction_is_per_op():
    keep = _load().RESTRICTIONS["the paper's K tiles (BLOCK_K <= 64 on dense, any on bmm)"]
    assert keep({"op": "bmm"}, {"BLOCK_K": 128}) and not keep({"op": "matmul"}, {"BLOCK_K": 128})
    assert keep({"op": "matmul"}, {"BLOCK_K": 64})


def test_stored_runs_completeness_and_acceptance():
    rp = _load()
    for name, missing in (("h100_wgmma_alcop_space", 0), ("h100_mma_sync_alcop_space", 0), ("h100_wgmma_first_alcop_space", 0)):
        path = DATA / f"{name}.jsonl.gz"
        recs = rp.read_records(path)
        res = rp.analyse(recs, path)
        assert res["summary"]["grid"]["missing"] == missing
        assert res["summary"]["failed_records"] == 0 and res["summary"]["shapes"] == 47
    # issue 3's reading of the complete wgmma run on the paper's K tiles (full over one stage / double)
    path = DATA / "h100_wgmma_alcop_space.jsonl.gz"
    s = rp.analyse(rp.read_records(path), path)["summary"]
    assert s["full_over_none"] >= 1.5 and s["full_over_double_buffer"] >= 1.3


def test_run_to_run_flags_a_moved_baseline():
    rp = _load()
    a = [_rec("matmul", (64, 64, 512), 0, 0, 1.0, "torch"), _rec("matmul", (64, 64, 512), 64, 2, 2.0)]
    b = [_rec("matmul", (64, 64, 512), 0, 0, 3.0, "torch"), _rec("matmul", (64, 64, 512), 64, 2, 2.2)]
    d = rp.run_to_run(a, b)
    assert d["pairs"] == 1 and abs(d["median"] - 1.1) < 1e-9 and d["over_2x"] == 0
    assert d["torch_moved"] == ["matmul 64x64x512 (1.0000 -> 3.0000 ms)"]
    assert json.dumps(d)   # plain data for the JSON report
