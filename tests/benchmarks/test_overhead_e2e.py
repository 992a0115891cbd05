"""benchmarks/overhead.py and benchmarks/e2e.py on CPU: the host timer's method with a fake clock,
the summaries and reports, the models' structure and the mode runner with a scripted timer."""

from __future__ import annotations

import math

from types import ModuleType, SimpleNamespace

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

    entered = []

    def timer(fn, reps, warmup, device):
        # which mode this is: the patched mode's call enters the stand-in block; each round's times as scripted
        before = len(entered)
        fn()
        mode = "patched" if len(entered) > before else "eager"
        calls.append((mode, reps, warmup))
        return {"eager": [10.0, 12.0], "patched": [5.0, 5.0]}[mode][:reps]

    import alcop_triton as at

    # patch mode replaced by a context that changes nothing, so the test needs no interpreter run
    monkeypatch.setattr(at, "patched", lambda: entered.append(1) or _NoPatch())
    res = e2e.run_model("bert", "cpu", ["eager", "patched"], reps=4, warmup=2, tiny=True, timer=timer, rounds=2)
    eager, patched = res["modes"]["eager"], res["modes"]["patched"]
    # each later turn begins with one untimed pass: a mode switch is not timed as a pass; the order changes
    # from round to round (``turn_order``), so no mode always follows the same one
    assert calls == [("eager", 2, 2), ("patched", 2, 2), ("patched", 2, 1), ("eager", 2, 1)]
    assert eager["ms"] == 11.0 and patched["ms"] == 5.0  # medians over every round's passes
    assert eager["speedup_vs_eager"] == 1.0 and eager["max_rel_err"] == 0.0 and eager["within_tolerance"]
    assert patched["speedup_vs_eager"] == 2.2 and patched["max_rel_err"] == 0.0
    assert (patched["ms_min"], patched["ms_max"], eager["ms_q1"], eager["ms_q3"]) == (5.0, 5.0, 10.0, 12.0)
    assert res["task"] == "infer" and res["dtype"] == "float16" and res["tolerance"] == 1e-2
    md = e2e.markdown({"device": "D", "torch": "t", "triton": "tr", "alcop": "a", "date": "d", "reps": 3, "warmup": 0,
                       "timer": "T"}, [res])
    assert "| bert | 2x16x64 | float16 | patched | 5.00 | 5.00 / 5.00 / 5.00 / 5.00 | **2.200x** |" in md
    assert "## training" not in md
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        e2e.build("vgg", "cpu", tiny=True)


def test_run_model_keeps_its_passes_and_the_interval_of_each_ratio_to_eager(monkeypatch):
    pytest.importorskip("triton")
    entered: list[int] = []
    turn = {"eager": 0, "patched": 0}

    def timer(fn, reps, warmup, device):
        before = len(entered)
        fn()
        mode = "patched" if len(entered) > before else "eager"
        turn[mode] += 1
        # the host drifts from round to round; patched is 0.8 of eager's time in each round but one
        t = 10.0 + turn[mode]
        return [t if mode == "eager" else (t * 0.8 if turn[mode] != 3 else t * 1.5)][:reps]

    import alcop_triton as at

    monkeypatch.setattr(at, "patched", lambda: entered.append(1) or _NoPatch())
    res = e2e.run_model("bert", "cpu", ["eager", "patched"], reps=8, warmup=0, tiny=True, timer=timer)
    eager, patched = res["modes"]["eager"], res["modes"]["patched"]
    assert eager["passes_ms"] == [11.0 + i for i in range(8)] and len(patched["passes_ms"]) == 8
    assert "vs_eager_interval" not in eager
    low, high = patched["vs_eager_interval"]  # 8 rounds: the 1st and 8th ratios, 1/1.5 and 1.25
    assert low == pytest.approx(1 / 1.5) and high == pytest.approx(1.25)
    md = e2e.markdown({"device": "D", "torch": "t", "triton": "tr", "alcop": "a", "date": "d", "reps": 8, "warmup": 0,
                       "timer": "T"}, [res])
    assert f"**{patched['speedup_vs_eager']:.3f}x** [0.667, 1.250] |" in md


class _NoPatch:
    """Stands in for patched(): a context that routes nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_e2e_calls_into_one_directory_merge_their_models(tmp_path, capsys):
    import json

    meta = {"device": "GPU", "torch": "t", "triton": "tr", "alcop": "a", "reps": 20, "warmup": 3}
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps({"meta": meta, "results": [{"model": "bert", "v": 1}, {"model": "gpt2", "v": 1}]}))
    got = e2e.merge(path, meta, [{"model": "gpt2", "v": 2}])
    assert got == [{"model": "bert", "v": 1}, {"model": "gpt2", "v": 2}]
    assert e2e.merge(path, {**meta, "reps": 30}, [{"model": "gpt2", "v": 2}]) == [{"model": "gpt2", "v": 2}]
    assert "2 results were run with other settings (reps 20 -> 30); not kept" in capsys.readouterr().err
    # nor are numbers of another timer kept beside this one's
    assert e2e.merge(path, {**meta, "timer": "T2"}, [{"model": "gpt2", "v": 2}]) == [{"model": "gpt2", "v": 2}]
    assert "(timer None -> 'T2')" in capsys.readouterr().err
    assert e2e.merge(tmp_path / "none.json", meta, [{"model": "x"}]) == [{"model": "x"}]
    # a (model, task) pair replaces only itself; a result without a task is an inference result
    train = {"model": "gpt2", "task": "train", "v": 3}
    got = e2e.merge(path, meta, [train])
    assert got == [{"model": "bert", "v": 1}, {"model": "gpt2", "v": 1}, train]
    path.write_text(json.dumps({"meta": meta, "results": got}))
    assert e2e.merge(path, meta, [{"model": "gpt2", "task": "infer", "v": 4}]) == [
        {"model": "bert", "v": 1}, train, {"model": "gpt2", "task": "infer", "v": 4}]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_over_a_cycle_of_rounds_each_mode_follows_every_other_equally_often(n):
    from collections import Counter
    modes = [f"m{i}" for i in range(n)]
    cycle = n if n % 2 == 0 else 2 * n
    rounds = [e2e.turn_order(modes, i) for i in range(cycle)]
    assert all(sorted(r) == modes for r in rounds)
    pairs = Counter((r[j - 1], r[j]) for r in rounds for j in range(1, n))
    assert set(pairs) == {(a, b) for a in modes for b in modes if a != b} and len(set(pairs.values())) == 1
    assert Counter(r[0] for r in rounds) == Counter({m: cycle // n for m in modes})   # each goes first as often
    assert e2e.turn_order(modes, cycle) == rounds[0] and e2e.turn_order([], 3) == []


def test_each_mode_keeps_its_own_call_when_the_modes_take_turns(monkeypatch):
    # built in one loop, timed after it: a mode's call must not see a later mode's model or patch block
    entered = []

    class Block:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False
    monkeypatch.setattr(torch, "compile", lambda model, **kw: (lambda x: ("compiled", kw, model(x))))
    alcop = SimpleNamespace(patched=Block)  # a package without alcop_triton.compile
    model = lambda x: x + 1  # noqa: E731
    run = lambda m: m(torch.ones(1))  # noqa: E731
    calls = {m: e2e._mode_call(m, model, run, alcop) for m in e2e.MODES}
    assert calls["eager"][0]().item() == 2 and not entered
    assert calls["compile"][0]()[:2] == ("compiled", {}) and not entered
    assert calls["compile_max"][0]()[:2] == ("compiled", {"mode": "max-autotune-no-cudagraphs"}) and not entered
    assert calls["patched"][0]().item() == 2 and entered == [True]
    assert calls["compile_alcop"][0]()[:2] == ("compiled", {}) and entered == [True, True]
    assert calls["compile_alcop"][1] == "torch.compile(model) called under patched()"
    assert calls["compile_max"][1] == "torch.compile(model, mode='max-autotune-no-cudagraphs')"


def test_compile_alcop_uses_the_packages_compile_where_it_has_one(monkeypatch):
    entered, compiled = [], []

    class Block:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False

    def alcop_compile(model, **kw):
        compiled.append(kw)
        return lambda x: ("alcop", model(x))
    monkeypatch.setattr(torch, "compile", lambda model, **kw: pytest.fail("torch.compile called"))
    fn, how = e2e._mode_call("compile_alcop", lambda x: x + 1, lambda m: m(1),
                             SimpleNamespace(patched=Block, compile=alcop_compile))
    assert fn() == ("alcop", 2) and how == "alcop_triton.compile(model)" and compiled == [{}] and not entered


def test_alcop_options_are_a_json_object_given_to_compile_alcop(capsys):
    assert e2e.alcop_kwargs(None) == {}
    assert e2e.alcop_kwargs('{"max_autotune_pointwise": true}') == {"options": {"max_autotune_pointwise": True}}
    for bad in ("{max_autotune_pointwise", "[1]", "true"):
        with pytest.raises(ValueError, match="--alcop-options"):
            e2e.alcop_kwargs(bad)
    assert e2e.main(["--out", "unused", "--dry-run", "--alcop-options", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


def test_compile_modes_build_before_patched_and_after_eager():
    assert e2e.build_order(["patched", "compile_alcop", "eager", "compile"]) == ["eager", "compile", "compile_alcop",
                                                                                "patched"]


def test_llama_block_has_llama_7b_sizes_and_is_causal():
    with torch.device("meta"):
        block = e2e.LlamaBlock()
    per_layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096   # q k v o, gate up down, two RMSNorm scales
    assert sum(p.numel() for p in block.parameters()) == 2 * per_layer
    layer = block.layers[0]
    assert (layer.attn.heads, layer.gate.out_features) == (32, 11008)
    assert all(m.bias is None for m in block.modules() if isinstance(m, torch.nn.Linear))
    torch.manual_seed(0)
    small = e2e.LlamaBlock(layers=1, d=16, heads=2, ffn=24, ctx=8)
    x = torch.randn(1, 6, 16)
    x2 = x.clone()
    x2[:, 4:] += 1.0
    assert torch.allclose(small(x)[:, :4], small(x2)[:, :4], atol=1e-6)
    assert not torch.allclose(small(x)[:, 4:], small(x2)[:, 4:])


def test_rms_norm_and_rotary_embedding():
    torch.manual_seed(0)
    x = torch.randn(3, 8, dtype=torch.float64)
    norm = e2e.RMSNorm(8, eps=0.0)
    want = x / x.pow(2).mean(-1, keepdim=True).sqrt()
    assert torch.allclose(norm(x), want)
    # the rotation turns each (i, i + d/2) pair by its angle: norms kept, position 0 unchanged
    block = e2e.LlamaBlock(layers=0, d=8, heads=1, ctx=4)
    q = torch.randn(1, 1, 4, 8)
    r = e2e.rotate(q, block.cos, block.sin)
    assert torch.allclose(r[..., 0, :], q[..., 0, :])
    pairs = lambda t: t[..., :4] ** 2 + t[..., 4:] ** 2  # noqa: E731
    assert torch.allclose(pairs(r), pairs(q), atol=1e-5) and not torch.allclose(r, q)


def test_errors_and_spread():
    ref = [torch.tensor([1.0, -2.0]), torch.tensor([4.0]), None]
    assert e2e.grad_rel_err(ref, ref) == 0.0
    # the worst parameter counts, each against its own scale
    assert e2e.grad_rel_err([torch.tensor([1.0, -1.9]), torch.tensor([5.0]), None], ref) == pytest.approx(0.25)
    assert e2e.grad_rel_err([ref[0], None, None], ref) == float("inf")
    assert e2e.rel_err(torch.zeros(2), torch.zeros(2)) == 0.0 and e2e.rel_err(torch.ones(2), torch.zeros(2)) == float("inf")
    assert e2e.spread([4.0, 1.0, 3.0, 2.0, 5.0]) == {"ms": 3.0, "ms_min": 1.0, "ms_q1": 2.0, "ms_q3": 4.0, "ms_max": 5.0}
    assert e2e.spread([7.0])["ms_q1"] == 7.0


def test_paired_interval_is_the_sign_tests_interval_of_the_round_ratios():
    # 20 rounds whose ratios are 1..20: the 95% interval of their median is the 6th and 15th ratio (binomial
    # (20, 1/2): P(X <= 5) = 0.021 within 0.025, P(X <= 6) = 0.058 not)
    assert e2e.paired_interval([float(i) for i in range(1, 21)], [1.0] * 20) == (10.5, 6.0, 15.0)
    # paired by round, not sorted per mode: a host that drifts moves both modes of a round alike
    ref = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
    assert e2e.paired_interval(ref, [t / 1.25 for t in ref]) == pytest.approx((1.25, 1.25, 1.25))
    assert e2e.paired_interval(ref, ref[::-1])[1] < 1.0 < e2e.paired_interval(ref, ref[::-1])[2]
    # several passes a round: each round's median is its time
    assert e2e.paired_interval([1.0, 3.0] * 6, [1.0, 1.0] * 6, per_round=2) == (2.0, 2.0, 2.0)
    # too few rounds for 95%: 2 * 0.5**5 > 0.05
    assert e2e.paired_interval([1.0] * 5, [1.0] * 5) is None and e2e.paired_interval([1.0] * 6, [2.0] * 6) == (0.5, 0.5, 0.5)


def test_pairs_and_modes_of_a_call():
    assert e2e.pairs(["bert", "gpt2"], ["infer", "train"]) == [("bert", "infer"), ("gpt2", "infer"), ("gpt2", "train")]
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        e2e.pairs(["vgg"], ["infer"])
    with pytest.raises(ValueError, match="unknown task 'tune'"):
        e2e.pairs(["bert"], ["tune"])
    every = list(e2e.MODES)
    assert e2e.task_modes("infer", every, False, False, False) == every
    assert e2e.task_modes("train", every, False, False, False) == ["eager", "patched", "compile", "compile_alcop"]
    assert e2e.task_modes("train", every, False, False, True) == every
    assert e2e.task_modes("infer", ["compile"], False, False, False) == ["eager", "compile"]  # eager: the reference
    assert e2e.task_modes("infer", every, True, False, False) == ["eager", "patched"]
    assert e2e.task_modes("infer", every, False, True, False) == ["eager", "patched"]  # dry run: no compile
    with pytest.raises(ValueError, match="unknown mode 'jit'"):
        e2e.task_modes("infer", ["jit"], False, False, False)
    with pytest.raises(ValueError, match="has no training step"):
        e2e.build_train("bert", "cpu", tiny=True)


def test_training_step_under_patch_mode_matches_eager_gradients():
    """The tiny Llama layer's bf16 training step, eager and under the real patch mode (the interpreter):
    output and every parameter's gradient compared with eager's, within bf16's tolerance."""
    pytest.importorskip("triton")
    res = e2e.run_model("llama", "cpu", ["eager", "patched"], reps=1, warmup=0, tiny=True, task="train")
    assert res["task"] == "train" and res["dtype"] == "bfloat16" and res["tolerance"] == 8e-2
    patched = res["modes"]["patched"]
    assert "error" not in patched, patched
    assert 0.0 <= patched["grad_max_rel_err"] <= 8e-2 and patched["within_tolerance"]
    assert res["modes"]["eager"]["grad_max_rel_err"] == 0.0


def test_training_cases_are_amp_or_bf16_and_a_step_leaves_fresh_gradients():
    rn = e2e.build_train("resnet50", "cpu", tiny=True)
    assert rn.autocast is torch.bfloat16 and all(p.dtype is torch.float32 for p in rn.model.parameters())
    assert rn.model.training and rn.x.is_contiguous(memory_format=torch.channels_last)
    step = e2e.train_step(rn)
    out = step(rn.model)
    assert out.dtype is torch.bfloat16 and not out.requires_grad   # autocast's products
    first = [p.grad.clone() for p in rn.model.parameters()]
    step(rn.model)   # gradients set to None first: a second step does not accumulate
    # BatchNorm in training mode normalises by the batch: the same step gives the same gradients
    assert all(torch.allclose(p.grad, g) for p, g in zip(rn.model.parameters(), first))
    gpt = e2e.build_train("gpt2", "cpu", tiny=True)
    assert gpt.autocast is None and {p.dtype for p in gpt.model.parameters()} == {torch.bfloat16}
    assert gpt.target.shape == gpt.x.shape and int(gpt.target.max()) < 101


def test_dry_run_writes_one_report_over_calls(tmp_path):
    import json

    out = str(tmp_path)
    assert e2e.main(["--dry-run", "--out", out, "--models", "bert,llama", "--modes", "eager"]) == 0
    rep = json.loads((tmp_path / "e2e.json").read_text())
    assert [(r["model"], r["task"]) for r in rep["results"]] == [("bert", "infer"), ("llama", "infer"), ("llama", "train")]
    assert e2e.main(["--dry-run", "--out", out, "--models", "llama", "--task", "train", "--modes", "eager"]) == 0
    rep = json.loads((tmp_path / "e2e.json").read_text())
    assert [(r["model"], r["task"]) for r in rep["results"]] == [("bert", "infer"), ("llama", "infer"), ("llama", "train")]
    md = (tmp_path / "e2e.md").read_text()
    assert "## inference, one forward pass" in md and "## training, one step" in md and "| llama | 2x16x64 | bfloat16 |" in md
    assert e2e.main(["--dry-run", "--out", out, "--models", "bert", "--task", "train"]) == 2   # no such pair


def test_a_mode_that_fails_while_timed_is_reported_and_the_others_still_timed(monkeypatch):
    def timer(fn, reps, warmup, device):
        fn()
        return [1.0] * reps

    class Failing:
        def __init__(self):
            self.calls = 0

        def __enter__(self):
            self.calls += 1
            if self.calls > 1:   # the first call (the build) works, the timed ones fail
                raise RuntimeError("recompiled")

        def __exit__(self, *exc):
            return False
    import alcop_triton as at

    failing = Failing()
    monkeypatch.setattr(at, "patched", lambda: failing)
    res = e2e.run_model("bert", "cpu", ["eager", "patched"], reps=2, warmup=0, tiny=True, timer=timer)
    assert res["modes"]["patched"]["error"] == "RuntimeError: recompiled" and "ms" not in res["modes"]["patched"]
    assert res["modes"]["eager"]["ms"] == 1.0


def test_profile_lists_each_modes_largest_work_per_pass():
    """``--profile``: after the timed passes, each mode's largest operators (CPU) per pass, summing to no more
    than its total, and a report section per profiled mode; the timed passes are untouched."""
    pytest.importorskip("triton")
    calls: list[str] = []

    def timer(fn, reps, warmup, device):
        calls.append("timed")
        return [1.0] * reps
    res = e2e.run_model("bert", "cpu", ["eager", "patched"], reps=2, warmup=0, tiny=True, timer=timer, profile=2)
    for mode in ("eager", "patched"):
        p = res["modes"][mode]["profile"]
        assert p["passes"] == 2 and p["what"] == "operators (CPU time)" and p["total_us"] > 0
        assert 0 < len(p["top"]) <= e2e.PROFILE_TOP
        us = [t["us"] for t in p["top"]]
        assert us == sorted(us, reverse=True) and sum(us) <= p["total_us"] * (1 + 1e-9)
        assert all(t["calls"] > 0 and t["name"] for t in p["top"])
        assert res["modes"][mode]["ms"] == 1.0   # the timer's passes, not the profiler's
    md = e2e.markdown({"device": "cpu", "torch": "t", "triton": "t", "alcop": "a", "date": "d", "reps": 2,
                       "warmup": 0, "timer": "fake"}, [res])
    assert "## Where a pass's time goes" in md and "**bert infer patched**" in md
    unprofiled = e2e.run_model("bert", "cpu", ["eager"], reps=1, warmup=0, tiny=True, timer=timer)
    assert "profile" not in unprofiled["modes"]["eager"]


def test_alcop_calls_a_pass_runs_are_counted_and_a_mode_that_timed_another_graph_is_flagged():
    pytest.importorskip("triton")
    from alcop_triton.compiling import op_calls
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    assert op_calls(lambda: torch.ops.alcop.mm(torch.ops.alcop.mm(a, b), b)) == 2
    assert op_calls(lambda: a @ b) == 0
    meta = {"device": "cpu", "torch": "t", "triton": "t", "alcop": "a", "date": "d", "reps": 2, "warmup": 0,
            "timer": "fake"}

    def res(run: int) -> dict:
        return {"model": "llama", "task": "infer", "input": [2, 8], "dtype": "float16", "source": "here",
                "modes": {"compile_alcop": {"alcop_calls_in_code": 4, "alcop_calls_run": run}}}
    md = e2e.markdown(meta, [res(0)])
    assert "llama infer compile_alcop: 4 (a timed pass ran 0)" in md
    assert "**Timed another graph than the one compiled first**" in md and "llama infer compile_alcop." in md
    assert "Timed another graph" not in e2e.markdown(meta, [res(4)])
    assert "no alcop op in its code" not in md
    plain = res(0)
    plain["modes"]["compile_alcop"]["alcop_calls_in_code"] = 0
    assert "compile_alcop with no alcop op in its code (plain compile's graph" in e2e.markdown(meta, [plain])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nudged_moves_the_asked_share_of_elements_by_one_unit_of_the_compute_dtype(dtype):
    x = torch.randn(2, 3, 50, 40).contiguous(memory_format=torch.channels_last)  # float32, computed in ``dtype``
    y = e2e.nudged(x, dtype, fraction=1e-3, seed=1)
    assert y.shape == x.shape and y.stride() == x.stride() and y.dtype == x.dtype
    moved = (y != x).nonzero()
    assert len(moved) == int(x.numel() * 1e-3)
    a, b = x.to(dtype)[tuple(moved.t())].double(), y[tuple(moved.t())].double()
    unit = torch.exp2(torch.floor(torch.log2(a.abs())) - round(-math.log2(torch.finfo(dtype).eps)))
    assert torch.equal((b - a).abs(), unit)  # exactly one unit from the value the computation saw
    assert torch.equal(e2e.nudged(x, dtype, 1e-3, 1), y) and int(e2e.nudged(torch.ones(3), dtype).ne(1).sum()) == 1


def test_a_training_step_with_a_floating_input_gets_a_floor_that_widens_its_tolerance():
    # ResNet-50's bf16 step is chaotic: eager's own errors under a one-unit nudge of its input are the floor,
    # and a mode whose errors stay within FLOOR_FACTOR of it is within tolerance though above the dtype's
    res = e2e.run_model("llama", "cpu", ["eager"], 1, 0, True, task="train")
    floor = res["floor"]
    assert floor["max_rel_err"] > 0 and floor["grad_max_rel_err"] > 0  # the nudge reached the output and grads
    assert "floor" not in e2e.run_model("gpt2", "cpu", ["eager"], 1, 0, True, task="train")  # token ids: none
    res["floor"] = {"max_rel_err": 0.07, "grad_max_rel_err": 1.7}
    res["modes"]["patched"] = dict(res["modes"]["eager"], max_rel_err=0.065, grad_max_rel_err=1.77)
    res["modes"]["wrong"] = dict(res["modes"]["eager"], max_rel_err=0.065, grad_max_rel_err=3.5)
    for mode, r in res["modes"].items():
        r["within_tolerance"] = r["max_rel_err"] <= max(0.08, e2e.FLOOR_FACTOR * 0.07) and \
            r["grad_max_rel_err"] <= max(0.08, e2e.FLOOR_FACTOR * 1.7)
    assert res["modes"]["patched"]["within_tolerance"] and not res["modes"]["wrong"]["within_tolerance"]
    md = e2e.markdown({"device": "cpu", "torch": "x", "triton": "x", "alcop": "x", "date": "d", "reps": 1,
                       "warmup": 0, "timer": "t", "gpu": "cpu"}, [res])
    assert "(0.08; floor 7.00e-02)" in md and "(floor 1.70e+00)" in md
