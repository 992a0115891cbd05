"""docs/results.md is what benchmarks/report_results.py makes of the committed results, number for number;
the headline figure is drawn from the suite's report; every benchmarks/ path the docs cite exists."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from . import ROOT, load_script

rr = load_script("report_results.py", "report_results")
hl = load_script("headline.py", "headline")
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "results.md"
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?x?")


def test_results_page_is_regenerated_identically() -> None:
    """Every number the page quotes, and every word, comes from the results files as they are now."""
    assert PAGE.read_text() == rr.render(RESULTS), \
        "docs/results.md is out of date: run python benchmarks/report_results.py"
    assert rr.main(["--check"]) == 0


def test_every_harness_has_committed_results() -> None:
    missing = [h.report for h in rr.HARNESSES if not (RESULTS / h.report).is_file()]
    assert not missing
    # and each results folder says how it was made
    for folder in {h.report.split("/")[0] for h in rr.HARNESSES}:
        assert (RESULTS / folder / "README.md").is_file(), folder


def test_page_follows_the_results(tmp_path: Path) -> None:
    """A changed measurement changes the quoted number; a missing report names its command."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    suite = results / "headline" / "suite" / "report.json"
    r = json.loads(suite.read_text())
    e = r["summary"]["alcop"]["timers"]["eager"]["alcop"]
    old = f"{e['geomean']:.3f}x"
    e["geomean"] = 0.5
    suite.write_text(json.dumps(r))
    page = rr.render(results)
    assert "| alcop | 47 | eager | 0.500x" in page and f"| alcop | 47 | eager | {old}" not in page
    (results / "odd_sizes" / "odd_sizes.json").unlink()
    page = rr.render(results)
    odd = page.split("## Odd and unaligned sizes")[1].split("## ")[0]
    assert "Not measured yet" in odd and "python benchmarks/odd_sizes.py" in odd
    assert rr.main(["--results", str(results), "--check"]) == 1


def test_page_numbers_are_in_the_results_files() -> None:
    """Spot check independent of the renderer: the suite's geomeans and the device as the JSON holds them."""
    r = json.loads((RESULTS / "headline" / "suite" / "report.json").read_text())
    page = PAGE.read_text()
    assert r["run"]["device"] in page and r["run"]["run_id"] in page
    for set_, s in r["summary"].items():
        for timer, impls in s["timers"].items():
            if impls.get("alcop", {}).get("n"):
                assert f"| {set_} | {s['workloads']} | {timer} | {impls['alcop']['geomean']:.3f}x" in page


def test_headline_figure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "suite").mkdir()
    shutil.copy(RESULTS / "headline" / "suite" / "report.json", tmp_path / "suite" / "report.json")
    path = hl.write_figure(tmp_path)
    assert path == tmp_path / "headline.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = json.loads((tmp_path / "suite" / "report.json").read_text())
    cap = hl.caption(r)
    assert r["run"]["device"] in cap and r["timers"]["eager"] in cap and r["timers"]["graph"] in cap
    series = hl.figure_data(r)
    assert [(s, t) for s, t, _ in series] == [(s, t) for s in r["summary"] for t in ("eager", "graph")]
    assert all([v for _, v in pts] == sorted(v for _, v in pts) for _, _, pts in series)
    assert (RESULTS / "headline" / "headline.png").is_file()


def test_figure_without_matplotlib_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit, match=r"alcop_triton\[plots\]"):
        hl._pyplot()


# Paths under benchmarks/ as README.md and docs/*.md cite them: in backticks or as link targets. A path
# written COMMIT:PATH names a file of a past commit (git show COMMIT:PATH) and is checked against git.
CITED = re.compile(r"(?:`|\()((?:[0-9a-f]{7,40}:)?(?:\.\./)?benchmarks/[\w./*-]+)")


def _cited(text: str) -> list[str]:
    return sorted({m.rstrip(".,") for m in CITED.findall(text)})


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_cited_benchmark_paths_exist(doc: Path) -> None:
    import subprocess

    missing = []
    for ref in _cited(doc.read_text()):
        if ":" in ref:
            rev, path = ref.split(":", 1)
            ok = subprocess.run(["git", "cat-file", "-e", f"{rev}:{path.rstrip('/')}"], cwd=ROOT,
                                capture_output=True).returncode == 0
        else:
            path = ref.removeprefix("../")
            ok = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
        if not ok:
            missing.append(ref)
    assert not missing, f"{doc.name} cites {len(missing)} paths that do not exist, e.g. {missing[:5]}"


def test_e2e_section_reads_both_forms_of_the_report() -> None:
    """The first form (fp16 inference, no task) and the current one (tasks, spread, compile ratios, gradients)."""
    meta = {"device": "GPU", "torch": "t", "triton": "tr", "alcop": "a", "date": "d", "timer": "T"}
    first = {"model": "bert", "input": [2, 4], "modes": {"eager": {"ms": 2.0, "speedup_vs_eager": 1.0,
                                                                   "max_rel_err": 0.0}}}
    train = {"model": "llama", "task": "train", "input": [2, 8], "dtype": "bfloat16", "autocast": None, "modes": {
        "eager": {"ms": 4.0, "ms_min": 3.5, "ms_max": 4.5, "speedup_vs_eager": 1.0, "speedup_vs_compile": 0.5,
                  "first_call_s": 0.1, "max_rel_err": 0.0, "grad_max_rel_err": 0.0},
        "compile_alcop": {"ms": 1.6, "ms_min": 1.5, "ms_max": 1.7, "speedup_vs_eager": 2.5, "speedup_vs_compile": 1.25,
                          "first_call_s": 30.0, "max_rel_err": 0.01, "grad_max_rel_err": 0.03},
        "patched": {"error": "RuntimeError: x"}}}
    lines = rr.e2e_section({"meta": meta, "results": [first, train]})
    assert "| bert | infer | 2x4 | float16 | eager | 2.00 | - | 1.000x | - | - | - | 0.0e+00 | - |" in lines
    assert ("| llama | train | 2x8 | bfloat16 | compile_alcop | 1.60 | 1.50 - 1.70 | 2.500x | 1.250x | - | 30.0 | "
            "1.0e-02 | 3.0e-02 |") in lines
    assert "| llama | train | 2x8 | bfloat16 | patched | error | | | | | | | |" in lines
    # a run that kept its passes: the ratio to eager with its interval (e2e.paired_interval)
    train["modes"]["compile_alcop"]["vs_eager_interval"] = [2.25, 2.75]
    assert any("| compile_alcop | 1.60 | 1.50 - 1.70 | 2.500x [2.250, 2.750] | 1.250x |" in line
               for line in rr.e2e_section({"meta": meta, "results": [train]}))


def test_e2e_section_says_which_compile_alcop_rows_were_not_checked_against_the_graph_they_timed() -> None:
    meta = {"device": "GPU", "torch": "t", "triton": "tr", "alcop": "a", "date": "d", "timer": "T"}

    def res(model: str, **extra: int) -> dict:
        return {"model": model, "task": "infer", "input": [2], "modes": {"compile_alcop": {
            "ms": 1.0, "max_rel_err": 0.0, "alcop_calls_in_code": 4, **extra}}}
    lines = rr.e2e_section({"meta": meta, "results": [res("old"), res("new", alcop_calls_run=4)]})
    text = "\n".join(lines)
    assert "old infer compile_alcop: 4;" in text and "new infer compile_alcop: 4 (a timed pass ran 4)." in text
    assert any(line.startswith("compile_alcop rows not checked") and line.endswith(": old infer.") for line in lines)
    assert not any("not checked" in line for line in rr.e2e_section({"meta": meta, "results": [res("new", alcop_calls_run=4)]}))


def test_readme_quotes_the_convolutions_forward_and_backward(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    report = results / "conv_h200" / "report.json"
    r = json.loads(report.read_text())
    fb = r["forward_backward"]["conv2d"]
    line = next(ln for ln in rr.readme_block(results).splitlines() if ln.startswith("Convolutions forward + backward"))
    assert f"eager {fb['eager']['alcop']['geomean']:.3f}x" in line and r["run"]["device"] in line
    fb["eager"]["alcop"]["geomean"] = 0.5
    report.write_text(json.dumps(r))
    assert "eager 0.500x" in rr.readme_block(results)
    report.unlink()
    assert "Convolutions forward + backward" not in rr.readme_block(results)
