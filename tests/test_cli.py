"""alcop-tune command line on a tiny synthetic dataset (no GPU, no kernels)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from alcop_triton import cli
from alcop_triton.autotune.database import Database, GpuKey, TuningRecord
from alcop_triton.autotune.measure import ErrorKind, MeasureResult
from alcop_triton.records import KernelConfig, Workload

H100 = GpuKey("H100", "9.0")
W1 = Workload("matmul", (1024, 768, 3072), "float16", "nt")
W2 = Workload("bmm", (12, 512, 512, 64), "float16", "nt")


def _records():
    out = []
    for w, scale in ((W1, 1.0), (W2, 0.3)):
        for i, bm in enumerate((32, 64, 128, 256)):
            for warps in (4, 8):
                c = KernelConfig(block_m=bm, block_n=64, num_warps=warps, smem_stages=2 + i % 3)
                out.append(TuningRecord.from_result(w, MeasureResult(c, scale * (0.05 - 0.008 * i + 0.001 * warps)), H100))
        out.append(TuningRecord.from_result(w, MeasureResult(KernelConfig(block_m=16), None, ErrorKind.COMPILE, "ptxas"),
                                            H100))
    return out


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data" / "h100.jsonl"
    path.parent.mkdir()
    path.write_text("".join(r.to_json() + "\n" for r in _records()))
    return path


@pytest.fixture
def db(tmp_path, data, monkeypatch):
    monkeypatch.delenv("ALCOP_DB", raising=False)
    path = tmp_path / "t.sqlite"
    assert cli.main(["--db", str(path), "import", str(data)]) == 0
    return path


def test_import_and_show(db, capsys):
    capsys.readouterr()
    assert cli.main(["--db", str(db), "show"]) == 0
    out = capsys.readouterr().out
    assert W1.key() in out and W2.key() in out and "m256n64k32_g8_w4" in out and "9/1" in out
    assert cli.main(["--db", str(db), "show", "--op", "bmm", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert W1.key() not in out and out.count("m256n64") + out.count("m128n64") == 3
    assert cli.main(["--db", str(db), "show", "--all"]) == 0
    assert "compile" in capsys.readouterr().out


def test_export_triton_is_python(db, tmp_path):
    out = tmp_path / "configs.py"
    assert cli.main(["--db", str(db), "export", "--format", "triton", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.count("triton.Config(") == 2 and "'H100' (cc '9.0') 'matmul:1024x768x3072:float16:nt'" in text
    # The export is a valid Python module that only needs triton.Config.
    ns: dict = {}
    fake_triton = type(sys)("triton")
    fake_triton.Config = lambda kwargs, num_warps, num_stages: (kwargs, num_warps, num_stages)
    exec(compile(text.replace("import triton", ""), str(out), "exec"), {"triton": fake_triton}, ns)
    kwargs, warps, stages = ns["configs"][0]
    assert KernelConfig.from_dict({**kwargs, "num_warps": warps, "num_stages": stages}).block_m == 256


def test_export_json_and_jsonl_round_trip(db, tmp_path, capsys):
    capsys.readouterr()
    assert cli.main(["--db", str(db), "export", "--format", "json", "--top", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == 2 and all(len(e["configs"]) == 2 for e in doc)
    assert doc[0]["configs"][0]["time_ms"] <= doc[0]["configs"][1]["time_ms"]
    best_only = tmp_path / "best.jsonl"
    assert cli.main(["--db", str(db), "export", "--format", "jsonl", "-o", str(best_only)]) == 0
    lines = best_only.read_text().splitlines()
    assert len(lines) == 2
    # An exported file imports into a fresh database and gives the same best configs.
    fresh = tmp_path / "fresh.sqlite"
    assert cli.main(["--db", str(fresh), "import", str(best_only)]) == 0
    assert Database(fresh).best(W1, H100).config == Database(db).best(W1, H100).config
    full = tmp_path / "all.jsonl"
    assert cli.main(["--db", str(db), "export", "--format", "jsonl", "--all", "-o", str(full)]) == 0
    assert len(full.read_text().splitlines()) == len(_records())


def test_show_without_database(tmp_path, capsys):
    assert cli.main(["--db", str(tmp_path / "none.sqlite"), "show"]) == 2
    assert "no tuning database" in capsys.readouterr().err


def test_compare_tuners_and_report(data, tmp_path, capsys):
    curves = tmp_path / "curves.json"
    argv = ["compare-tuners", str(data.parent), "--k-max", "9", "--seeds", "2", "--budgets", "2,8",
            "--per-task", "--json", str(curves)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    for t in ("grid", "random", "xgb", "analytical", "analytical+xgb"):
        assert t in out
    assert "k=2" in out and W2.key() in out
    saved = json.loads(curves.read_text())
    assert saved["k_max"] == 9 and len(saved["curves"]["grid"]) == 2
    # Every curve reaches the exhaustive best: all 9 configs of each task searched.
    assert all(math.isclose(c[-1], 1.0) for t in saved["curves"].values() for c in t.values())
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": [{"workload": W1.key(), "speedup_vs_torch": 1.2,
                                           "speedup_vs_tutorial": 1.1}]}))
    out_dir = tmp_path / "report"
    assert cli.main(["report", "--curves", str(curves), "--bench", str(bench), "--out", str(out_dir)]) == 0
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["speedups.png", "tuning_curves.png", "tuning_curves.txt", "tuning_curves_per_workload.png"]
    assert all((out_dir / n).read_bytes()[:4] == b"\x89PNG" for n in names if n.endswith(".png"))


def test_tune_requires_workloads(capsys):
    assert cli.main(["tune"]) == 2
    assert "nothing to do" in capsys.readouterr().err
    assert cli.main(["tune", "softmax", "10x10x10"]) == 2


def test_suite_file(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"dense": {"shapes_MNK": [[1024, 768, 768]]}, "bmm": {"shapes_BMNK": [[12, 512, 512, 64]]},
                                 "conv2d": {"shapes": [[8, 56, 56, 64, 64, 3, 3, 1, 1]]}}))
    ws = cli.suite_workloads(suite, "float16")
    assert [w.op for w in ws] == ["matmul", "bmm", "conv2d"] and ws[0].layout == "nt" and ws[2].layout == "nhwc"
    assert [w.op for w in cli.suite_workloads(suite, "float16", ["bmm"])] == ["bmm"]


def test_parse_shape():
    assert cli.parse_shape("1024x768x3072") == (1024, 768, 3072)
    with pytest.raises(Exception, match="expected ints"):
        cli.parse_shape("10xA")


def test_python_m_entry_point():
    res = subprocess.run([sys.executable, "-m", "alcop_triton", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "compare-tuners" in res.stdout


def test_db_option_after_command(db, capsys):
    capsys.readouterr()
    assert cli.main(["show", "--db", str(db)]) == 0
    assert W1.key() in capsys.readouterr().out
