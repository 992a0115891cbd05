"""benchmarks/readme_measured.py on small synthetic reports: the section names timers and reports,
says which GPU reports are missing, and replaces only the text between the markers."""

from __future__ import annotations

import json

import pytest

from . import load_script


def _load():
    return load_script("readme_measured.py", "readme_measured")


rm = _load()


def _suite_report() -> dict:
    ratio = {"n": 2, "geomean": 0.9, "min": 0.5, "min_at": "w", "faster": 1, "errors": 0, "wrong": 0, "unstable": 0,
             "not_applicable": 0, "ratios": {}}
    return {"run": {"run_id": "r7", "device": "GPU X", "torch": "2.11", "triton": "3.6.0", "alcop": "0.1.0",
                    "date": "2026-01-01"},
            "timers": {"eager": "EAGER TIMER TEXT", "graph": "GRAPH TIMER TEXT"}, "progress": {"left": 0},
            "summary": {"heldout": {"workloads": 2, "timers": {"eager": {"alcop": ratio}, "graph": {"alcop": ratio}}}}}


def test_section_from_reports(tmp_path):
    res = tmp_path / "results"
    (res / "suite_h100").mkdir(parents=True)
    (res / "suite_h100" / "report.json").write_text(json.dumps(_suite_report()))
    evals = {"summary": {"random": {"top1": 0.5, "top10": 0.8}, "analytical": {"top1": 0.9, "top10": 0.97},
                         "analytical_pairwise": 0.75},
             "n_workloads": 3, "data": ["grid.jsonl.gz"]}
    (res / "model_eval.json").write_text(json.dumps(evals))
    text = rm.section(res)
    assert "GPU X" in text and "run `r7`" in text and "EAGER TIMER TEXT" in text and "GRAPH TIMER TEXT" in text
    assert "| heldout | 2 | eager | 0.900x (min 0.500x, 2 workloads) | - | - |" in text
    assert "not committed yet; `python benchmarks/overhead.py" in text
    assert "| grid.jsonl.gz (3 workloads) | random choice | 0.500 | 0.800 | 0.500 |" in text
    assert "| grid.jsonl.gz (3 workloads) | analytical alone | 0.900 | 0.970 | 0.750 |" in text


def test_rewrite_only_between_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\n## Measured\n\n{rm.BEGIN}\nold numbers\n{rm.END}\n\nkept\n")
    res = tmp_path / "results"
    res.mkdir()
    assert rm.main(["--readme", str(readme), "--results", str(res), "--check"]) == 1
    assert rm.main(["--readme", str(readme), "--results", str(res)]) == 0
    text = readme.read_text()
    assert "old numbers" not in text and text.startswith("# t\n\n## Measured\n\n") and text.endswith(f"{rm.END}\n\nkept\n")
    assert rm.main(["--readme", str(readme), "--results", str(res), "--check"]) == 0
    with pytest.raises(ValueError, match="one <!-- measured:begin -->"):
        rm.rewrite("no markers", "x")


def test_committed_readme_is_up_to_date():
    """README's section is what the script writes from the committed reports (nothing typed by hand)."""
    assert rm.main(["--check"]) == 0


def _headline_dir(tmp_path):
    gpu = tmp_path / "results" / rm.HEADLINE_DIR
    (gpu / "suite").mkdir(parents=True)
    (gpu / "suite" / "report.json").write_text(json.dumps(_suite_report()))
    (gpu / "headline.json").write_text(json.dumps({"run_id": "r7", "device": "GPU X", "torch": "2.11", "triton": "3.6.0",
                                                   "alcop": "0.1.0", "date": "2026-01-01", "calls": 3}))
    (gpu / "e2e").mkdir()
    meta = {"device": "GPU X", "torch": "2.11", "triton": "3.6.0", "alcop": "0.1.0", "date": "2026-01-01",
            "timer": "E2E TIMER"}
    (gpu / "e2e" / "e2e.json").write_text(json.dumps({"meta": meta, "results": [
        {"model": "bert", "input": [2, 16], "modes": {"eager": {"ms": 1.5, "speedup_vs_eager": 1.0, "max_rel_err": 0.0}}}]}))
    return gpu


def test_gpu_reports_from_a_headline_run(tmp_path):
    gpu = _headline_dir(tmp_path)
    text = rm.section(tmp_path / "results", gpu)
    assert "one run of `python benchmarks/headline.py" in text and "run `r7`, GPU X" in text and "resumed over 3 calls" in text
    assert f"{gpu.as_posix()}/suite/report.md" in text and "| heldout | 2 | eager | 0.900x" in text
    assert "GPU X, torch 2.11, Triton 3.6.0, alcop_triton 0.1.0, 2026-01-01, run `r7`. Timer: E2E TIMER." in text
    assert "| bert | 2x16 | eager | 1.50 | 1.000x | 0.0e+00 |" in text
    assert "Inductor compile + autotune time per workload" not in text
    report = _suite_report()
    report["summary"]["heldout"]["inductor_compile_s"] = {"n": 2, "mean": 4.25, "max": 6.0, "total": 8.5}
    (gpu / "suite" / "report.json").write_text(json.dumps(report))
    assert "heldout 4.2 s mean, 6.0 s max over 2 workloads." in rm.section(tmp_path / "results", gpu)
    assert f"`{gpu.as_posix()}/overhead/overhead.md`: missing; `python benchmarks/headline.py" in text
    with pytest.raises(ValueError, match="--gpu-results: .* holds no headline.json"):
        rm.section(tmp_path / "results", tmp_path)
    # the command cited is the one that ran: e2e without compile modes means --no-compile
    assert " --no-compile`: run `r7`" in text
    e2e = json.loads((gpu / "e2e" / "e2e.json").read_text())
    e2e["results"][0]["modes"]["compile"] = {"ms": 1.0, "speedup_vs_eager": 1.5, "max_rel_err": 0.0}
    (gpu / "e2e" / "e2e.json").write_text(json.dumps(e2e))
    assert "--no-compile" not in rm.section(tmp_path / "results", gpu)


def test_committed_headline_run_is_the_default_source(tmp_path):
    _headline_dir(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(f"{rm.BEGIN}\n{rm.END}\n")
    assert rm.main(["--readme", str(readme), "--results", str(tmp_path / "results")]) == 0
    assert "run `r7`" in readme.read_text() and "one run of `python benchmarks/headline.py" in readme.read_text()


def test_ablation_and_model_from_the_headline_run_replace_the_earlier_reports(tmp_path):
    gpu = _headline_dir(tmp_path)
    results = rm.ROOT / "benchmarks" / "results"
    before = rm.section(results, gpu)
    assert "conv_variants.md" in before and "model_eval_ablation.md" in before  # earlier runs' reports
    (gpu / "ablation").mkdir()
    (gpu / "ablation" / "pipeline_variants.json").write_text((results / "pipeline_variants.json").read_text())
    (gpu / "model").mkdir()
    (gpu / "model" / "model_eval.json").write_text((results / "model_eval.json").read_text())
    text = rm.section(results, gpu)
    assert f"`{gpu.as_posix()}/ablation/pipeline_variants.md`" in text and f"`{gpu.as_posix()}/model/model_eval.md`" in text
    assert "conv_variants.md" not in text and "model_eval_ablation.md" not in text
    assert "pipelining-ablation and model reports below are one run of" in text


def test_later_suite_runs_follow_the_headline_reports_as_runs_of_their_own(tmp_path):
    res = tmp_path / "results"
    (res / "dispatch_h100").mkdir(parents=True)
    (res / "dispatch_h100" / "report.json").write_text(json.dumps(_suite_report()))
    text = rm.section(res)
    later = text[text.index("### Since the headline run"):]
    assert "| `" in later and "dispatch_h100/report.md` | `r7` | GPU X | heldout | 2 | graph | 0.900x (min 0.500x) |" in later
    assert "| heldout | 2 | eager | 0.900x (min 0.500x) |" in later
    (res / "dispatch_h100" / "report.json").unlink()
    assert "Since the headline run" not in rm.section(res)   # no later report, no section
