"""The fast-path fuzz harness (``scripts/fuzz_fastpath.py``) on CPU: a short run writes its summary, a case
whose process dies is counted as a crash, and a wrong result or an unwritten ``out=`` is counted as wrong.

The long run is on a GPU (the native hit's direct launch, streams, CUDA graphs); its command and results are
in ``benchmarks/results/fuzz_fastpath``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch

import alcop_triton
from alcop_triton.ops import route

pytestmark = pytest.mark.interpreter

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_fastpath.py"
_spec = importlib.util.spec_from_file_location("fuzz_fastpath", _SCRIPT)
assert _spec is not None and _spec.loader is not None
ff: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ff)

SUMMARY_KEYS = {"date", "device", "torch", "triton", "cases", "calls", "ok", "wrong", "crashes", "exception_mismatches",
                "raised_where_torch_computed", "hits", "site_hits", "native_runs", "cases_per_mutation", "failures"}


def test_specs_replay_and_leave_cuda_mutations_to_cuda() -> None:
    assert ff.make_spec(45, 17, "cpu") == ff.make_spec(45, 17, "cpu")
    cpu = [ff.make_spec(45, i, "cpu") for i in range(400)]
    assert not {mu for s in cpu for mu in s["mutations"]} & set(ff.CUDA_ONLY)
    cuda = [ff.make_spec(45, i, "cuda") for i in range(2000)]
    assert {mu for s in cuda for mu in s["mutations"]} == set(ff.MUTATIONS)
    assert {s["op"] for s in cuda} == set(ff.OPS) and {s["dtype"] for s in cuda} == set(ff.TOLERANCE)


def test_short_cpu_run_writes_its_summary(tmp_path: Path) -> None:
    ff.main(["--device", "cpu", "--cases", "20", "--chunk", "10", "--jobs", "2", "--out", str(tmp_path)])
    s = json.loads((tmp_path / "fuzz_fastpath.json").read_text())
    lines = [json.loads(t) for t in (tmp_path / "cases.jsonl").read_text().splitlines()]
    assert "info" in lines[0] and [c["index"] for c in lines[1:]] == list(range(20))  # both chunks, merged
    assert not (tmp_path / "chunks").exists()
    assert SUMMARY_KEYS <= set(s) and (tmp_path / "fuzz_fastpath.md").read_text().startswith("# Fast-path fuzz: 20")
    assert s["cases"] == 20 and s["torch"] and s["triton"]
    assert s["ok"] + s["wrong"] + s["crashes"] + s["exception_mismatches"] + s["raised_where_torch_computed"] == 20
    assert s["hits"] > 0 and s["site_hits"] > 0  # the call sites' candidates were taken
    # Every case matches torch: freed storage and the negative bit included (judged as "torch's result or
    # torch's exception type"); torch itself never runs on freed storage (some of its CPU ops crash there).
    assert s["ok"] == 20 and not s["failures"], s["failures"]


def test_a_child_that_dies_is_a_crash_and_the_chunk_goes_on(tmp_path: Path) -> None:
    ff.main(["--device", "cpu", "--cases", "4", "--first", "40", "--out", str(tmp_path), "--abort-at", "41"])
    s = json.loads((tmp_path / "fuzz_fastpath.json").read_text())
    assert s["cases"] == 4 and s["crashes"] >= 1
    crash = next(f for f in s["failures"] if f["index"] == 41)
    assert crash["kind"] == "crash" and "signal" in crash["problems"][0]["detail"]


def _first(pred: Any) -> dict[str, Any]:
    return next(s for s in (ff.make_spec(45, i, "cpu") for i in range(2000)) if pred(s))


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> Any:
    # the runner installs a counting site check: restored after the test
    monkeypatch.setattr(route, "_site_hit", route._site_hit)
    monkeypatch.setattr(route, "_site_hit_built", route._site_hit_built)
    return ff.CaseRunner("cpu")


def test_a_wrong_result_is_counted_as_wrong(runner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _first(lambda s: s["op"] == "mm" and s["mutations"] == ["fresh"] and not s["out"])
    assert runner.run(spec)["kind"] == "ok"
    real = alcop_triton.mm
    monkeypatch.setattr(alcop_triton, "mm", lambda a, b, **kw: real(a, b, **kw) * 1.1)
    line = runner.run(spec)
    assert line["kind"] == "wrong" and "error" in line["problems"][0]["detail"]


def test_an_unwritten_out_is_counted_as_wrong(runner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _first(lambda s: s["op"] == "mm" and s["out"] and s["mutations"] == ["fresh"])
    assert runner.run(spec)["kind"] == "ok"
    monkeypatch.setattr(alcop_triton, "mm", lambda a, b, out=None: out)
    line = runner.run(spec)
    assert line["kind"] == "wrong" and "NaN" in line["problems"][0]["detail"]


def test_a_vendor_library_failure_of_torchs_is_judged_against_float64(runner: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _first(lambda s: s["op"] == "mm" and s["mutations"] == ["fresh"] and not s["out"])
    real = runner.reference

    def failing(spec: Any, ts: Any, out: Any = None) -> Any:  # torch's own call fails, its float64 one does not
        if any(t is not None and t.dtype != torch.float64 for t in ts):
            raise RuntimeError("CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasLtMatmulAlgoGetHeuristic`")
        return real(spec, ts, out)

    monkeypatch.setattr(runner, "reference", failing)
    line = runner.run(spec)
    assert line["kind"] == "ok" and line["torch_library_failed"] > 0
    wrong = alcop_triton.mm
    monkeypatch.setattr(alcop_triton, "mm", lambda a, b, **kw: wrong(a, b, **kw) * 1.1)
    assert runner.run(spec)["kind"] == "wrong"
