"""benchmarks/suite.py on CPU with scripted timers: ratios, geomeans, instability, resume, budget,
the held-out set's contract. No GPU, no wall-clock assertions."""

from __future__ import annotations

import gzip
import json
import math
import re

import pytest

from . import ROOT, load_script


def _load():
    return load_script("suite.py", "suite")


su = _load()


class ScriptedTimers:
    """Times a call by running it once and returning the next scripted time of the implementation
    that ran (the fake implementations below log their name)."""

    names = {"eager": "scripted", "graph": "scripted"}

    def __init__(self, script: dict[tuple[str, str], list[float]], log: list[str]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.log = log
        self.calls: list[tuple[str, str]] = []

    def _time(self, timer: str, fn) -> float:
        fn()
        self.calls.append((timer, self.log[-1]))
        return self.script[(timer, self.log[-1])].pop(0)

    def eager(self, calls):
        return {impl: self._time("eager", fn) for impl, fn in calls.items()}

    def graph(self, fn):
        return self._time("graph", fn)


def _builder(log: list[str], wrong=frozenset(), absent=frozenset()):
    """Each implementation computes torch's product (or a wrong one for those in ``wrong``)."""
    import torch

    def build(impl: str, case):
        if impl in absent:
            return None

        def call(a, b):
            log.append(impl)
            out = torch.matmul(a.float(), b.float())
            return out + 1.0 if impl in wrong else out

        return call

    return build


@pytest.fixture
def case():
    return su.Case("tiny", "matmul", (8, 6, 4), "nt", "test")


def _measure(case, script, **kw):
    log: list[str] = []
    timers = ScriptedTimers(script, log)
    rows = su.measure_case(case, ["torch", "alcop", "triton_tutorial"], timers, "cpu", build=_builder(log, **kw))
    return rows, timers


def test_two_passes_interleaved_and_a_third_only_when_unstable(case):
    # The eager timer's third pass times every implementation again, in turns, once; the graph
    # timer's retimes the unstable one alone.
    script = {("eager", "torch"): [1.0, 1.05, 9.0], ("eager", "alcop"): [2.0, 2.5, 2.1],
              ("eager", "triton_tutorial"): [4.0, 4.0, 9.0],
              ("graph", "torch"): [0.5, 0.5], ("graph", "alcop"): [0.4, 0.6, 0.5],
              ("graph", "triton_tutorial"): [1.0, 1.0]}
    rows, timers = _measure(case, script)
    order = ["torch", "alcop", "triton_tutorial"]
    # pass 1 of every implementation before pass 2 of any
    assert [i for t, i in timers.calls if t == "eager"] == order * 3
    assert [i for t, i in timers.calls if t == "graph"] == order * 2 + ["alcop"]
    torch_r, alcop_r, tut_r = rows
    assert torch_r["eager"] == {"ms": 1.025, "passes": [1.0, 1.05], "unstable": False}
    assert alcop_r["eager"] == {"ms": 2.1, "passes": [2.0, 2.5, 2.1], "unstable": True}
    assert alcop_r["graph"] == {"ms": 0.5, "passes": [0.4, 0.6, 0.5], "unstable": True}
    assert all(r["correct"] for r in rows) and all(r["error"] is None for r in rows)
    assert all(not s for s in timers.script.values())   # every scripted time consumed, no more


def test_timed_passes_threshold():
    assert not su.timed_passes(1.0, 1.09, lambda: pytest.fail("no third pass"), threshold=0.1)["unstable"]
    r = su.timed_passes(1.0, 1.2, lambda: 5.0, threshold=0.1)
    assert r["unstable"] and r["passes"] == [1.0, 1.2, 5.0] and r["ms"] == 1.2


def test_wrong_answers_and_not_applicable_stay_out_of_ratios(case):
    script = {("eager", "torch"): [1.0, 1.0], ("eager", "alcop"): [0.5, 0.5],
              ("graph", "torch"): [1.0, 1.0], ("graph", "alcop"): [0.5, 0.5]}
    rows, _ = _measure(case, script, wrong={"alcop"}, absent={"triton_tutorial"})
    assert rows[1]["correct"] is False and rows[1]["max_rel_err"] > su.TOLERANCE
    assert rows[2]["error"] == "not applicable"
    s = su.summarize(rows)["tiny"]["timers"]["eager"]
    assert s["alcop"]["n"] == 0 and s["alcop"]["wrong"] == 1
    assert s["triton_tutorial"]["not_applicable"] == 1


def _row(set_, wid, impl, eager, graph=None, **extra):
    r = {"set": set_, "id": wid, "op": "matmul", "shape": [64, 64, 64], "layout": "nt", "impl": impl,
         "error": None, "correct": True}
    r["eager"] = {"ms": eager, "passes": [eager, eager], "unstable": False}
    r["graph"] = {"ms": graph or eager, "passes": [graph or eager] * 2, "unstable": False}
    r.update(extra)
    return r


def test_summary_ratios_geomean_minimum_per_timer():
    rows = [_row("s", "a", "torch", 1.0, 1.0), _row("s", "a", "alcop", 2.0, 0.5),
            _row("s", "b", "torch", 4.0, 1.0), _row("s", "b", "alcop", 1.0, 1.0),
            _row("s", "c", "torch", 1.0), _row("s", "c", "alcop", 1.0, error="RuntimeError: boom")]
    s = su.summarize(rows)["s"]
    e, g = s["timers"]["eager"]["alcop"], s["timers"]["graph"]["alcop"]
    assert e["ratios"] == {"a": 0.5, "b": 4.0} and math.isclose(e["geomean"], math.sqrt(2.0))
    assert (e["min"], e["min_at"], e["faster"], e["errors"]) == (0.5, "a", 1, 1)
    assert g["ratios"] == {"a": 2.0, "b": 1.0} and math.isclose(g["geomean"], math.sqrt(2.0))
    assert "inductor_compile_s" not in s
    md = su.markdown({"run_id": "r1", "device": "GPU", "torch": "t", "triton": "tr", "alcop": "a", "date": "d"},
                     rows, su.summarize(rows), {"eager": "EAGER TIMER", "graph": "GRAPH TIMER"})
    assert "EAGER TIMER" in md and "GRAPH TIMER" in md and "run r1" in md
    assert "| s | 3 | eager | alcop | **1.414x** | 0.500x (a) | 1 / 2 | 1 | 0 | 0 |" in md


def test_forward_backward_adds_each_layers_two_times_before_the_ratio():
    def conv(set_, impl, eager, graph):
        return _row(set_, "conv2d x" + (" backward" if set_.endswith("_bwd") else ""), impl, eager, graph,
                    op="conv2d", shape=[2, 8, 8, 4, 4, 3, 3, 1, 1])
    rows = [conv("c", "torch", 1.0, 1.0), conv("c", "alcop", 0.5, 1.0),
            conv("c_bwd", "torch", 3.0, 1.0), conv("c_bwd", "alcop", 5.5, 3.0),
            _row("c", "y", "torch", 1.0), _row("c", "y", "alcop", 1.0)]  # no backward twin: left out
    fb = su.forward_backward(rows)["c"]
    assert fb["eager"]["alcop"]["ratios"] == {"conv2d x": 4.0 / 6.0} and fb["eager"]["alcop"]["faster"] == 0
    assert fb["graph"]["alcop"]["ratios"] == {"conv2d x": 0.5}
    md = su.markdown({"run_id": "r", "device": "G", "torch": "t", "triton": "tr", "alcop": "a", "date": "d"},
                     rows, su.summarize(rows), {"eager": "E", "graph": "G"})
    assert "| c + c_bwd | eager | alcop | **0.667x** | 0.667x (conv2d x) | 0 / 1 |" in md
    rows[3]["correct"] = False  # a wrong gradient leaves the layer out
    assert su.forward_backward(rows) == {}


def test_resume_skips_measured_workloads_and_budget_stops(tmp_path):
    cases = [su.Case("s", "matmul", (n, 8, 8), "nt", "") for n in (8, 16, 32, 64)]
    seen = []
    clock = iter(range(0, 10_000, 10)).__next__   # every clock read advances 10 s

    def measure(case, impls):
        seen.append(case.id)
        return [_row(case.set, case.id, i, 1.0) for i in impls]

    p = su.run_cases(cases, tmp_path, lambda c: ["torch", "alcop"], measure, budget_s=60, clock=clock)
    # clock reads: start 0; case 1 checked at 10, runs 20-30 (slowest 10); case 2 checked at 40 (40 + 12 <= 60),
    # runs 50-60; case 3 checked at 70: 70 + 12 > 60, stop
    assert p == {"measured": 2, "left": 2, "stopped": "budget"} and seen == [cases[0].id, cases[1].id]
    p = su.run_cases(cases, tmp_path, lambda c: ["torch", "alcop"], measure, budget_s=1e9)
    assert p["measured"] == 2 and seen[2:] == [cases[2].id, cases[3].id]
    assert len(su.read_rows(tmp_path / "rows.jsonl")) == 8
    assert su.run_cases(cases, tmp_path, lambda c: ["torch"], measure, budget_s=1e9)["measured"] == 0


def test_resume_refuses_another_device_or_settings(tmp_path):
    meta = {"device": "GPU A", "torch": "2.11", "triton": "3.6.0", "alcop": "0.1.0"}
    run = su.start_or_resume(tmp_path, meta, {"reps": 100})
    again = su.start_or_resume(tmp_path, meta, {"reps": 100})
    assert again["run_id"] == run["run_id"] and again["calls"] == 2
    with pytest.raises(SystemExit, match="use another --out"):
        su.start_or_resume(tmp_path, {**meta, "device": "GPU B"}, {"reps": 100})
    with pytest.raises(SystemExit, match="use another --out"):
        su.start_or_resume(tmp_path, meta, {"reps": 10})


def test_resume_may_add_sets_but_not_drop_them(tmp_path):
    meta = {"device": "GPU A", "torch": "2.11", "triton": "3.6.0", "alcop": "0.1.0"}
    su.start_or_resume(tmp_path, meta, {"sets": ["alcop"], "inductor_sets": [], "reps": 100})
    wider = su.start_or_resume(tmp_path, meta, {"sets": ["alcop", "conv2d_bwd"], "inductor_sets": [], "reps": 100})
    assert wider["settings"]["sets"] == ["alcop", "conv2d_bwd"]
    assert wider["sets_added"] == [{"call": 2, "sets": ["conv2d_bwd"]}]
    with pytest.raises(SystemExit, match="use another --out"):
        su.start_or_resume(tmp_path, meta, {"sets": ["conv2d_bwd"], "inductor_sets": [], "reps": 100})
    with pytest.raises(SystemExit, match="use another --out"):
        su.start_or_resume(tmp_path, meta, {"sets": ["alcop", "conv2d_bwd"], "inductor_sets": [], "reps": 10})


def test_sets_load_with_reasons_and_flops():
    alcop = su.load_set("alcop")
    assert len(alcop) == 47 and {c.op for c in alcop} == {"matmul", "bmm"}
    conv = su.load_set("conv2d")
    assert len(conv) == 20 and conv[0].flops() > 0
    c = su.Case("x", "conv2d", (1, 8, 8, 4, 16, 3, 3, 1, 1), "nhwc", "")
    assert c.flops() == 2 * 1 * 8 * 8 * 16 * 4 * 9
    with pytest.raises(ValueError, match="unknown set 'nope'"):
        su.load_set("nope")


def _seen_workloads() -> set[tuple[str, tuple[int, ...]]]:
    pat = re.compile(r'"op": "(\w+)", "shape": \[([0-9, ]+)\]')
    seen = set()
    files = list((ROOT / "benchmarks" / "data").glob("*.jsonl*")) + [ROOT / "alcop_triton" / "data" / "default_h100.jsonl"]
    for p in files:
        with (gzip.open(p, "rt") if p.suffix == ".gz" else open(p)) as f:
            for line in f:
                m = pat.search(line)
                if m:
                    seen.add((m.group(1), tuple(int(x) for x in m.group(2).split(","))))
    return seen


def test_heldout_set_is_unseen_and_as_specified():
    held = su.load_set("heldout")
    assert len(held) >= 30 and all(c.reason for c in held)
    seen = _seen_workloads()
    assert seen and not {(c.op, c.shape) for c in held} & seen
    odd = [c for c in held if all(d % 8 and d >= 256 for d in c.shape)]
    assert len(odd) >= 5
    decode = {(c.shape[0], c.shape[1], c.shape[2]) for c in held if c.op == "matmul" and c.shape[0] in (1, 8, 16, 64)}
    assert {m for m, _, _ in decode} == {1, 8, 16, 64}
    assert all({n, k} <= {4096, 11008, 14336} for _, n, k in decode)
    assert {c.shape[3] for c in held if c.op == "bmm" and c.layout == "nt"} >= {64, 128}


def test_dry_run_end_to_end_on_the_interpreter(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(su, "load_set", lambda name: [su.Case("smoke", "matmul", (20, 12, 16), "nt", "tiny")])
    assert su.main(["--dry-run", "--out", str(tmp_path)]) == 0
    rows = su.read_rows(tmp_path / "rows.jsonl")
    assert {r["impl"] for r in rows} == {"torch", "alcop", "triton_tutorial"}
    assert all(r["correct"] for r in rows), rows
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"]["smoke"]["timers"]["eager"]["alcop"]["n"] == 1
    assert su.main(["--dry-run", "--out", str(tmp_path)]) == 0   # resumed: nothing left to measure
    assert len(su.read_rows(tmp_path / "rows.jsonl")) == 3


def test_fallback_is_detected_under_strict_and_env_restored(monkeypatch):
    import os

    from alcop_triton.errors import UnsupportedError

    monkeypatch.delenv("ALCOP_STRICT", raising=False)

    def falls_back():
        if os.environ.get("ALCOP_STRICT") == "1":
            raise UnsupportedError("alcop_triton.matmul: rows not aligned; ALCOP_STRICT=1 forbids falling back to torch")

    assert su.alcop_fallback(falls_back).startswith("alcop_triton.matmul: rows not aligned")
    assert su.alcop_fallback(lambda: None) is None
    assert "ALCOP_STRICT" not in os.environ


def test_rel_error():
    import torch

    ref = torch.tensor([[2.0, -4.0]])
    assert su.rel_error(torch.tensor([[2.0, -3.96]]).half(), ref) == pytest.approx(0.04 / 4, rel=0.05)   # fp16 rounding
    assert su.rel_error(torch.tensor([[float("nan"), 0.0]]), ref) == math.inf
    assert su.rel_error(torch.zeros(2, 1), ref) == math.inf


def test_inductor_compile_gives_every_workload_its_own_code_object():
    """Dynamo fails a fullgraph function after 8 recompiles of one code object; the suite compiles
    more workloads than that, each traced from a code object of its own (Dynamo alone, on CPU)."""
    import torch

    cases = [su.Case("t", "matmul", (8 + i, 6, 4), "nt", "") for i in range(10)] + [su.Case("t", "bmm", (2, 8, 6, 4), "nt", "")]
    codes = set()
    for c in cases:
        fn = su.inductor_compile(su.torch_fn(c), backend="eager")
        a, b = su.make_inputs(c, "cpu")
        torch.testing.assert_close(fn(a, b), su.torch_fn(c)(a, b))
        codes.add(fn.__wrapped__.__code__)
    assert len(codes) == len(cases)
    assert su.pretune_inductor(cases, "cpu", backend="eager") > 0


def test_pretune_chunk_takes_the_next_workloads_of_the_set():
    pending = [su.Case("a", "matmul", (n, 8, 8), "nt", "") for n in (8, 16, 32)] + [su.Case("b", "matmul", (8, 8, 8), "nt", "")]
    assert su.pretune_chunk(pending[0], pending, set(), 2) == pending[:2]
    assert su.pretune_chunk(pending[1], pending, {("a", pending[0].id)}, 8) == pending[1:3]
    assert su.pretune_chunk(pending[1], pending, {("a", c.id) for c in pending[:2]}, 8) == []   # already pretuned
    assert su.pretune_chunk(pending[3], pending, set(), 8) == []   # alone in its set
    assert su.pretune_chunk(pending[0], pending, set(), 1) == []


def test_impls_narrow_the_run_and_are_recorded(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(su, "load_set", lambda name: [su.Case("smoke", "matmul", (20, 12, 16), "nt", "tiny")])
    assert su.main(["--dry-run", "--out", str(tmp_path), "--impls", "alcop"]) == 0
    assert {r["impl"] for r in su.read_rows(tmp_path / "rows.jsonl")} == {"torch", "alcop"}   # torch always
    assert json.loads((tmp_path / "run.json").read_text())["settings"]["impls"] == ["torch", "alcop"]
    with pytest.raises(SystemExit):   # a resumed run keeps its implementations
        su.main(["--dry-run", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        su.main(["--dry-run", "--out", str(tmp_path / "other"), "--impls", "alcop,cutlass"])


def test_run_id_is_validated():
    with pytest.raises(SystemExit):
        su.main(["--dry-run", "--out", "unused", "--run-id", "../x"])


def test_inductor_compile_time_counts_the_pretuning_share():
    rows = [_row("s", "a", "torch", 1.0), _row("s", "a", "inductor", 1.0, first_call_s=2.0,
                                                inductor_pretune={"chunk": 4, "chunk_s": 20.0, "share_s": 5.0}),
            _row("s", "b", "torch", 1.0), _row("s", "b", "inductor", 1.0, first_call_s=3.0, inductor_pretune=None)]
    s = su.summarize(rows)["s"]
    assert s["inductor_compile_s"] == {"n": 2, "mean": 5.0, "max": 7.0, "total": 10.0}
    md = su.markdown({"run_id": "r1", "device": "GPU", "torch": "t", "triton": "tr", "alcop": "a", "date": "d"},
                     rows, su.summarize(rows), {"eager": "E", "graph": "G"})
    assert "total 10 s (5 s of it pretuning), mean 5.0 s, max 7.0 s over 2 workloads." in md


def test_conv_backward_case_matches_torch_in_the_interpreter():
    # the suite's conv2d_bwd set: alcop's input and weight gradient kernels against torch's
    # convolution_backward, on a tiny layer (N, H, W, C_in, C_out, kh, kw, stride, pad)
    case = su.Case("conv2d_bwd", "conv2d", (1, 5, 5, 8, 8, 3, 3, 1, 1), "nhwc", "test", backward=True)
    assert case.id.endswith(" backward") and case.flops() == 2 * su.Case(
        "conv2d", "conv2d", case.shape, "nhwc", "test").flops()
    inputs = su.make_inputs(case, "cpu")
    ref = su.reference(case, inputs)
    out = su.impl_fn("alcop", case)(*inputs)
    assert [tuple(o.shape) for o in out] == [(1, 8, 5, 5), (8, 8, 3, 3)] and su.rel_error(out, ref) <= su.TOLERANCE
    assert su.rel_error(out[:1], ref) == math.inf and su.impl_fn("triton_tutorial", case) is None
    assert [c.backward for c in su.load_set("conv2d_bwd")] == [True] * len(su.load_set("conv2d"))
    bwd3 = su.load_set("conv3d_bwd")
    assert [(c.op, c.shape, c.backward) for c in bwd3] == [(c.op, c.shape, True) for c in su.load_set("conv3d")]
    # a strided 3-D layer: the input gradient's phases in one kernel, the weight gradient's padded runs
    case3 = su.Case("conv3d_bwd", "conv3d", (1, 4, 6, 6, 64, 16, 3, 3, 3, 2, 1), "ndhwc", "test", backward=True)
    inputs3 = su.make_inputs(case3, "cpu")
    assert su.rel_error(su.impl_fn("alcop", case3)(*inputs3), su.reference(case3, inputs3)) <= su.TOLERANCE


def test_alcop_calls_counts_calls_not_mentions():
    code = ["buf0 = torch.ops.alcop.mm.default(a, b)\n"
            "# %mm : call_function[target=torch.ops.alcop.mm.default](args = (%x, %w))\n"
            "assert_size_stride(buf0, (64, 256), (256, 1), 'torch.ops.alcop.mm.default')\n"
            "# File: alcop_triton/patch.py:211 in routed\n",
            "buf3 = torch.ops.alcop.linear.default(buf2, w, b, x, 'gelu')\n"]
    assert su.alcop_calls(code) == 2
    assert su.alcop_calls(["# alcop_triton/patch.py\nbuf0 = extern_kernels.mm(a, b)\n"]) == 0
