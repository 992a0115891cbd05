"""benchmarks/overhead.py and benchmarks/e2e.py on CPU: the host timer's method with a fake clock,
the summaries and reports, the models' structure and the mode runner with a scripted timer."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from alcop_triton import patch

from . import load_script


def _load(name: str) -> ModuleType:
    return load_script(f"{name}.py", f"bench_{name}")


oh = _load("overhead")
e2e = _load("e2e")


def test_host_timer_times_each_call_and_syncs_outside_the_intervals():
    events: list[str] = []
    now = [0]

    def clock() -> int:
        now[0] += 1000   # every clock read advances 1 µs
        events.append("clock")
        return now[0]

    def call() -> None:
        events.append("call")

    us = oh.host_times_us(call, calls=10, warmup=2, sync=lambda: events.append("sync"), clock=clock, sync_every=4)
    assert us == [1.0] * 10
    # warm-up, a sync, then clock-call-clock per call, a sync before calls 4 and 8 (never inside a
    # timed interval), a final sync
    assert events[:3] == ["call", "call", "sync"]
    timed = events[3:-1]
    assert timed.count("call") == 10 and timed.count("sync") == 2
    for i, e in enumerate(timed):
        if e == "call":
            assert timed[i - 1] == "clock" and timed[i + 1] == "clock"
    assert events[-1] == "sync"


def test_implementations_are_interleaved_and_patch_mode_is_entered_around_the_timed_calls(monkeypatch):
    order: list[tuple[str, bool]] = []

    def impl(name: str):
        return lambda: order.append((name, patch._state.on))  # patch mode on in this thread

    monkeypatch.setattr(oh, "cases", lambda device, grad: {"matmul": {
        "torch": impl("torch"), "alcop": impl("alcop"), "alcop_patched": impl("patched"), "triton": None}})

    def timer(fn, calls, warmup, sync):
        fn()
        return [1.0] * calls

    monkeypatch.setattr(oh, "patched_route", lambda fn: "alcop")  # asked once per grad setting, untimed
    rows = oh.measure("cpu", calls=6, warmup=1, rounds=3, timer=timer)
    # per grad setting, three rounds of (torch, alcop, patched); only the patched calls see patch mode on
    assert order == [("torch", False), ("alcop", False), ("patched", True)] * 6
    got = {(r["impl"], r["requires_grad"]): r for r in rows}
    assert got[("alcop", False)]["calls"] == 6 and got[("triton", True)]["error"] == "not applicable"
    assert got[("alcop_patched", True)]["route"] == "alcop" and "route" not in got[("alcop", True)]


def test_patched_route_tells_where_patch_mode_sends_a_call():
    pytest.importorskip("triton")
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    a, b = a.half(), b.half()
    assert oh.patched_route(lambda: torch.matmul(a, b)) == "alcop"
    from alcop_triton import ops, patch
    sites = patch._to_torch.setdefault(ops.matmul, {})
    sites[id(b)] = (a.shape, a.dtype, False)  # a call site the records left to torch (counted as sent to torch)
    try:
        assert oh.patched_route(lambda: torch.matmul(a, b)) == "torch"
    finally:
        del sites[id(b)]
    x = torch.randn(1, 2, 5, 5, generator=g).half()
    w = torch.randn(3, 2, 3, 3, generator=g).half().requires_grad_()
    assert oh.patched_route(lambda: F.conv2d(x, w, None, 1, 1)) == "torch"  # it will train


def test_overhead_stats_and_summary():
    s = oh.stats([float(x) for x in range(1, 101)])
    assert (s["median_us"], s["p10_us"], s["p90_us"], s["calls"]) == (50.5, 11.0, 91.0, 100)
    def row(op, impl, grad, us):
        return {"op": op, "impl": impl, "requires_grad": grad, **oh.stats([us] * 10)}

    rows = [row("matmul", "torch", False, 20.0), row("matmul", "alcop", False, 30.0),
            row("matmul", "alcop_patched", False, 31.5), row("matmul", "triton", False, 25.0),
            row("linear_gelu", "alcop", False, 20.0), row("linear_gelu", "alcop_unfused", False, 26.0),
            row("linear_gelu", "alcop_patched", False, 27.0), row("conv2d", "torch", True, 40.0),
            {"op": "conv2d", "impl": "alcop", "requires_grad": True, "error": "RuntimeError: x"},
            row("conv2d", "alcop_patched", True, 41.5) | {"route": "torch"}]
    mm, lin, conv = oh.summarize(rows)
    assert mm["alcop_over_torch"] == 1.5 and mm["patched_minus_direct_us"] == 1.5 and mm["triton_us"] == 25.0
    assert lin["patched_minus_direct_us"] == 1.0   # against the unfused spelling patch mode runs
    assert conv["alcop_over_torch"] is None and conv["alcop_us"] is None
    assert conv["patched_route"] == "torch" and conv["patched_minus_direct_us"] == 1.5  # against torch's call
    meta = {"device": "GPU", "torch": "t", "triton": "tr", "alcop": "a", "date": "d", "calls": 3000, "warmup": 200,
            "patched_block_us": oh.stats([2.5] * 10)}
    md = oh.markdown(meta, rows, [mm, lin, conv])
    assert "perf_counter_ns" in md and "| matmul | False | 25.0 | 20.0 | 30.0 | 31.5 | **1.50x** | 1.5 |" in md
    assert "conv2d alcop (requires_grad=True): RuntimeError: x" in md and "costs 2.5 µs, once per block" in md
    assert "| conv2d | True | - | 40.0 | - | 41.5 | - | 1.5 (torch) |" in md


def test_models_have_the_stated_sizes():
    bert = e2e.BertEncoder()
    assert sum(p.numel() for p in bert.parameters()) == 12 * (4 * 768 * 768 + 2 * 768 * 3072 + 4 * 768 + 3072 + 768 + 4 * 768)
    gpt2 = e2e.GPT2()
    n = sum(p.numel() for p in gpt2.parameters())
    assert 124_000_000 < n < 125_000_000   # GPT-2 small: 124M parameters (LM head tied)
    rn = e2e.ResNet50()
    assert 25_500_000 < sum(p.numel() for p in rn.parameters()) < 25_600_000   # torchvision's 25,557,032
    y = e2e.ResNet50(base=8, blocks=(1, 1, 1, 1), classes=10)(torch.randn(2, 3, 32, 32))
    assert y.shape == (2, 10)


def test_causal_attention_ignores_the_future():
    torch.manual_seed(0)
    att = e2e.SelfAttention(16, 2, causal=True)
    x = torch.randn(1, 5, 16)
    x2 = x.clone()
    x2[:, 3:] += 1.0
    assert torch.allclose(att(x)[:, :3], att(x2)[:, :3], atol=1e-6)


def test_run_model_modes_errors_and_speedups(monkeypatch):
    pytest.importorskip("triton")
    calls = []

    def timer(fn, reps, warmup, device):
        # the modes take turns: eager, patched, eager, ...; each round's pass times as scripted
        mode = ("eager", "patched")[len(calls) % 2]
        calls.append((mode, reps, warmup))
        return {"eager": [10.0, 12.0], "patched": [5.0, 5.0]}[mode][:reps]

    import alcop_triton as at

    # patch mode replaced by a context that changes nothing, so the test needs no interpreter run
    monkeypatch.setattr(at, "patched", lambda: _NoPatch())
    res = e2e.run_model("bert", "cpu", ["eager", "patched"], reps=4, warmup=2, tiny=True, timer=timer, rounds=2)
    eager, patched = res["modes"]["eager"], res["modes"]["patched"]
    # each later turn begins with one untimed pass: a mode switch is not timed as a pass
    assert calls == [("eager", 2, 2), ("patched", 2, 2), ("eager", 2, 1), ("patched", 2, 1)]
    assert eager["ms"] == 11.0 and patched["ms"] == 5.0  # medians over every round's passes
    assert eager["speedup_vs_eager"] == 1.0 and eager["max_rel_err"] == 0.0 and eager["within_tolerance"]
    assert patched["speedup_vs_eager"] == 2.2 and patched["max_rel_err"] == 0.0
    md = e2e.markdown({"device": "D", "torch": "t", "triton": "tr", "alcop": "a", "date": "d", "reps": 3, "warmup": 0,
                       "timer": "T"}, [res])
    assert "| bert | 2x16x64 | patched | 5.00 | **2.20x** |" in md
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        e2e.build("vgg", "cpu", tiny=True)


class _NoPatch:
    """Stands in for patched(): a context that routes nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_e2e_calls_into_one_directory_merge_their_models(tmp_path):
    import json

    meta = {"device": "GPU", "torch": "t", "triton": "tr", "alcop": "a", "reps": 20, "warmup": 3}
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps({"meta": meta, "results": [{"model": "bert", "v": 1}, {"model": "gpt2", "v": 1}]}))
    got = e2e.merge(path, meta, [{"model": "gpt2", "v": 2}])
    assert got == [{"model": "bert", "v": 1}, {"model": "gpt2", "v": 2}]
    assert e2e.merge(path, {**meta, "device": "other"}, [{"model": "gpt2", "v": 2}]) == [{"model": "gpt2", "v": 2}]
    assert e2e.merge(tmp_path / "none.json", meta, [{"model": "x"}]) == [{"model": "x"}]


def test_each_mode_keeps_its_own_call_when_the_modes_take_turns(monkeypatch):
    # built in one loop, timed after it: a mode's call must not see a later mode's model or patch block
    entered = []

    class Block:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False
    monkeypatch.setattr(torch, "compile", lambda model: (lambda x: ("compiled", model(x))))
    model = lambda x: x + 1  # noqa: E731
    calls = {m: e2e._mode_call(m, model, torch.ones(1), Block) for m in e2e.MODES}
    assert calls["eager"]().item() == 2 and not entered
    assert calls["compile"]()[0] == "compiled" and not entered
    assert calls["patched"]().item() == 2 and entered == [True]
    assert calls["compile_alcop"]()[0] == "compiled" and entered == [True, True]
