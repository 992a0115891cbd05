"""benchmarks/report_pipeline.py on small synthetic grids: the kinds, each kind's best, speedups over
the shapes both kinds cover, suspect torch baselines, the run-to-run comparison and the report files."""

from __future__ import annotations

import json
import math

from . import load_script


def _load():
    return load_script("report_pipeline.py", "report_pipeline")


def _rec(op: str, shape: tuple[int, ...], bk: int, stages: int, ms: float | None, impl: str = "alcop",
         reg: int = 1, persistent: bool = False, device: str = "GPU") -> dict:
    cfg = None if impl == "torch" else {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": 4,
                                        "num_stages": stages, "REG_STAGES": reg, "REG_SPLIT": 2 if reg > 1 else 1,
                                        "ASYNC_COPY": "pointer", **({"PERSISTENT": True} if persistent else {})}
    return {"workload": {"op": op, "shape": list(shape), "dtype": "float16", "layout": "nt"}, "config": cfg,
            "impl": impl, "time_ms": ms, "error": None if ms else "compile", "device": device}


S = (64, 64, 512)


def test_kinds_say_what_they_contain():
    rp = _load()
    c = lambda s, r, p=False: _rec("matmul", S, 64, s, 1.0, reg=r, persistent=p)["config"]   # noqa: E731
    assert rp.kinds_of(c(1, 1)) == ["best", "one_stage"]
    assert rp.kinds_of(c(2, 1)) == ["best", "smem_only", "double_buffer"]
    assert rp.kinds_of(c(4, 1)) == ["best", "smem_only"]
    assert rp.kinds_of(c(1, 2)) == ["best", "reg_only"]
    assert rp.kinds_of(c(3, 2)) == ["best", "smem_and_reg"]
    assert rp.kinds_of(c(3, 2, True)) == ["best", "persistent"]


def test_each_kind_takes_its_own_best_and_skips_failures():
    rp = _load()
    recs = [_rec("matmul", S, 0, 0, 1.0, "torch"),
            _rec("matmul", S, 64, 1, 4.0), _rec("matmul", S, 128, 1, 3.0),
            _rec("matmul", S, 64, 2, 2.5), _rec("matmul", S, 64, 4, 2.0),
            _rec("matmul", S, 64, 1, 3.5, reg=2), _rec("matmul", S, 64, 4, 2.2, reg=2),
            _rec("matmul", S, 64, 3, 1.8, persistent=True),
            _rec("matmul", S, 32, 8, None)]   # a failed config never counts
    (row,) = rp.kind_rows(recs, rp.RESTRICTIONS["whole grid"])
    assert (row["one_stage_ms"], row["double_buffer_ms"], row["smem_only_ms"]) == (3.0, 2.5, 2.0)
    assert (row["reg_only_ms"], row["smem_and_reg_ms"], row["persistent_ms"], row["best_ms"]) == (3.5, 2.2, 1.8, 1.8)
    assert row["best_kind"] == "persistent" and row["torch_ms"] == 1.0
    sp = rp.speedup([row], "smem_and_reg", "smem_only")
    assert sp["shapes"] == 1 and abs(sp["geomean"] - 2.0 / 2.2) < 1e-12
    (row,) = rp.kind_rows(recs, rp.RESTRICTIONS["BLOCK_K <= 64"])
    assert row["one_stage_ms"] == 4.0   # the BLOCK_K=128 one-stage config is outside this grid


def test_a_kind_the_grid_lacks_is_absent_not_zero():
    rp = _load()
    recs = [_rec("matmul", S, 64, 1, 2.0), _rec("matmul", S, 64, 3, 1.0),
            _rec("matmul", (128, 64, 512), 64, 1, 4.0), _rec("matmul", (128, 64, 512), 64, 1, 8.0, reg=2)]
    rows = rp.kind_rows(recs, rp.RESTRICTIONS["whole grid"])
    assert "reg_only_ms" not in rows[0] and rows[1]["reg_only_ms"] == 8.0
    sp = rp.speedup(rows, "reg_only", "one_stage")
    assert sp["shapes"] == 1 and sp["geomean"] == 0.5
    assert rp.speedup(rows, "smem_and_reg", "one_stage")["shapes"] == 0


def test_paper_k_tiles_restriction_is_per_op():
    keep = _load().RESTRICTIONS["the paper's K tiles (BLOCK_K <= 64 on dense, any on bmm)"]
    assert keep({"op": "bmm"}, {"BLOCK_K": 128}) and not keep({"op": "matmul"}, {"BLOCK_K": 128})
    assert keep({"op": "matmul"}, {"BLOCK_K": 64})


def test_suspect_torch_baseline_is_named_and_left_out(tmp_path):
    rp = _load()
    runs = {name: [_rec("matmul", S, 0, 0, t, "torch"), _rec("matmul", S, 64, 3, 1.0),
                   _rec("matmul", (128, 64, 512), 0, 0, 1.0, "torch"), _rec("matmul", (128, 64, 512), 64, 3, 2.0)]
            for name, t in (("a", 12.0), ("b", 1.0), ("c", 1.1))}
    sus = rp.suspect_torch(runs)
    assert sus["b"] == [] and sus["c"] == [] and sus["a"][0].startswith("matmul 64x64x512 (12.0000 ms")
    path = tmp_path / "a.jsonl"
    s = rp.analyse(runs["a"], path, sus["a"])["summary"]
    assert s["best_vs_torch_shapes"] == 1 and s["best_vs_torch"] == 0.5 and s["grid"] is None
    md = rp.markdown([("a", rp.analyse(runs["a"], path, sus["a"])), ("b", rp.analyse(runs["b"], path, sus["b"]))],
                     {"a": runs["a"], "b": runs["b"]})
    assert "Suspect torch baselines" in md and "smem_and_reg over smem_only" in md
    # one run alone: a library time over 5x our best is listed once, left out, and given with it too
    alone = [_rec("matmul", S, 0, 0, 6.0, "torch"), _rec("matmul", S, 64, 3, 1.0),
             _rec("matmul", (128, 64, 512), 0, 0, 1.0, "torch"), _rec("matmul", (128, 64, 512), 64, 3, 2.0)]
    s = rp.analyse(alone, path, [])["summary"]
    assert s["suspect_torch"] == ["matmul 64x64x512 (6.0000 ms, 6.0x our best in this run)"]
    assert s["best_vs_torch"] == 0.5 and abs(s["best_vs_torch_all_shapes"] - math.sqrt(3.0)) < 1e-12


def test_main_writes_both_reports(tmp_path):
    rp = _load()
    data = tmp_path / "gpu_wgmma_x.jsonl"
    recs = [_rec("matmul", S, 0, 0, 1.0, "torch"), _rec("matmul", S, 64, 1, 2.0), _rec("matmul", S, 64, 3, 1.0),
            _rec("matmul", S, 64, 3, 1.5, reg=2)]
    for r in recs:
        r.update(mma="wgmma", cc="9.0", triton="3.6.0", torch="2.11", alcop="0.1.0", date="d", gpu="H100")
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert rp.main([str(data), "--out", str(tmp_path / "out" / "pv")]) == 0
    res = json.loads((tmp_path / "out" / "pv.json").read_text())["gpu_wgmma_x"]
    assert res["summary"]["speedups"]["smem_only_over_one_stage"]["geomean"] == 2.0
    assert res["summary"]["best_kind_counts"]["smem_only"] == 1
    assert "best config of each kind" in (tmp_path / "out" / "pv.md").read_text()


def test_run_to_run_flags_a_moved_baseline():
    rp = _load()
    a = [_rec("matmul", (64, 64, 512), 0, 0, 1.0, "torch"), _rec("matmul", (64, 64, 512), 64, 2, 2.0)]
    b = [_rec("matmul", (64, 64, 512), 0, 0, 3.0, "torch"), _rec("matmul", (64, 64, 512), 64, 2, 2.2)]
    d = rp.run_to_run(a, b)
    assert d["pairs"] == 1 and abs(d["median"] - 1.1) < 1e-9 and d["over_2x"] == 0
    assert d["torch_moved"] == ["matmul 64x64x512 (1.0000 -> 3.0000 ms)"]
    assert json.dumps(d)   # plain data for the JSON report
