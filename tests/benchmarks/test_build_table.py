"""benchmarks/build_table.py's CPU side: the workload list (keyed as the drop-ins key their calls),
candidate sets, record format, resuming, installing a table, and a torch timing reaching patch mode."""

from __future__ import annotations

import contextlib
import inspect
import json
from typing import Any

import pytest
import torch

import alcop_triton as at
from alcop_triton import choose_config, fastpath
from alcop_triton.ops import conv as conv_ops
from alcop_triton.autotune import dispatch as dmod
from alcop_triton.kernels.conv import gemm_workload
from alcop_triton.kernels.conv_window import window_configs
from alcop_triton.autotune.database import RecordSkipped, parse_line, read_jsonl
from alcop_triton.autotune.space import shape_reason
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

from . import ROOT, load_script

SUITE = ROOT / "tests" / "data" / "alcop_suite.json"
HELDOUT = ROOT / "benchmarks" / "workloads" / "heldout.json"
SPEC = get_spec("H100")
META = {"gpu": "H100", "device": "NVIDIA H100 80GB HBM3", "cc": "9.0", "mma": "wgmma", "triton": "3.6.0",
        "torch": "2.11.0", "alcop": "0.1.0", "date": "2026-11-22"}


def _load(name: str) -> Any:
    return load_script(f"{name}.py", f"bench_{name}")


@pytest.fixture(scope="module")
def bt():
    return _load("build_table")


@pytest.fixture(scope="module")
def e2e():
    return _load("e2e")


def test_workload_list_covers_the_sets_in_both_dtypes_without_duplicates(bt, tmp_path):
    plan, skipped = bt.workload_list(bt.SETS, ["float16", "bfloat16"], SUITE, tmp_path / "absent.json")
    called = [c for c, _ in plan]
    assert len(called) == len(set(called)) and not skipped
    assert {w.dtype for w in called} == {"float16", "bfloat16"} and \
        {w.layout for w in called} == {"nt", "nn", "tn", "nhwc"}
    keys = {w.key() for w in called}
    for must in ("matmul:1024x768x768:float16:nt", "bmm:32x2048x2048x128:bfloat16:nt",
                 "matmul:16x4096x14336:float16:nt", "matmul:2048x28672x8192:float16:nt",
                 "matmul:6304x3072x768:bfloat16:nt", "matmul:32x1000x2048:float16:nt",
                 # e2e.py: BERT-base 16 x 512 and GPT-2 8 x 1024 (attention: scores nt, P V nn), ResNet-50 batch 64
                 "matmul:8192x2304x768:float16:nt", "matmul:8192x768x3072:float16:nt", "bmm:192x512x512x64:float16:nt",
                 "bmm:192x512x64x512:float16:nn", "bmm:96x1024x1024x64:float16:nt", "bmm:96x1024x64x1024:float16:nn",
                 "matmul:8192x50257x768:float16:nt", "conv2d:64x224x224x3x64x7x7x2x3x1x1:float16:nhwc",
                 "conv2d:64x56x56x256x512x1x1x2x0x1x1:float16:nhwc", "matmul:64x1000x2048:float16:nt",
                 "conv2d:1x7x7x512x2048x1x1x1x0x1x1:bfloat16:nhwc", "conv2d:32x14x14x256x256x3x3x1x1x1x1:float16:nhwc",
                 # the ALCOP suite's conv layers, as the conv drop-in keys them (dilation, groups)
                 "conv2d:64x224x224x16x64x7x7x2x3x1x1:float16:nhwc",
                 "conv3d:64x112x56x56x64x64x3x3x3x1x1x1x1:float16:nhwc",
                 # benchmarks/suite.py's models set, layouts as listed there
                 "matmul:2048x15360x5120:float16:nt", "bmm:96x1024x64x1024:bfloat16:nn",
                 # training: a linear's input and weight gradients, a conv weight gradient's im2col GEMM
                 "matmul:8192x768x3072:float16:nn", "matmul:3072x768x8192:float16:tn",
                 "matmul:512x4608x3136:float16:tn"):
        assert must in keys, must
    odd = dict(plan)[Workload("matmul", (999, 999, 999), "float16", "nt")]
    assert odd == Workload("matmul", (999, 999, 1000), "float16", "nt")  # measured as the drop-ins run it
    # a channels-last 1x1 stride-1 convolution is measured as the GEMM the drop-in runs it as
    pointwise = dict(plan)[Workload("conv2d", (64, 56, 56, 64, 256, 1, 1, 1, 0, 1, 1), "float16", "nhwc")]
    assert pointwise == Workload("matmul", (200704, 256, 64), "float16", "nt")
    strided = Workload("conv2d", (64, 56, 56, 256, 512, 1, 1, 2, 0, 1, 1), "float16", "nhwc")
    assert dict(plan)[strided] == strided


def test_plan_puts_the_valuable_workloads_first(bt, tmp_path):
    plan, _ = bt.workload_list(bt.SETS, ["float16", "bfloat16"], SUITE, HELDOUT)
    called = [c for c, _ in plan]
    dtypes = [w.dtype for w in called]
    assert dtypes == sorted(dtypes, key=lambda d: d != "float16")  # every fp16 workload before any bf16 one
    first, _ = bt.workload_list(["suite", "e2e", "conv2d", "conv3d"], ["float16"], SUITE, HELDOUT)
    assert called[:len(first)] == [c for c, _ in first]
    rn64 = {Workload(op, s, "float16", lay) for op, s, lay in bt.resnet50_layers(64)}
    assert rn64 <= set(called[:len(first)])  # ResNet-50 at batch 64 is part of the e2e set
    for name in bt.SETS:
        assert f"``{name}``" in bt.__doc__  # every --sets value is documented


def test_heldout_shapes_are_left_out_in_every_dtype(bt, tmp_path):
    held = tmp_path / "heldout.json"
    held.write_text(json.dumps({"shapes": [{"op": "matmul", "shape": [1024, 768, 768], "why": "x"},
                                           {"op": "bmm", "shape": [32, 2048, 2048, 128], "dtype": "bfloat16"}]}))
    plan, skipped = bt.workload_list(["suite", "llama"], ["float16", "bfloat16"], SUITE, held)
    assert {w.key() for w in skipped} == {f"{op}:{s}:{d}:nt" for op, s in (("matmul", "1024x768x768"),
                                                                            ("bmm", "32x2048x2048x128"))
                                          for d in ("float16", "bfloat16")}
    assert not {w for _, w in plan} & set(skipped)
    plan, _ = bt.workload_list(bt.SETS, ["float16"], SUITE, HELDOUT)
    held_keys = bt._heldout_keys(HELDOUT)
    assert held_keys and not {(w.op, w.gemm_dims()) for c, m in plan for w in (c, m)} & held_keys
    with pytest.raises(ValueError, match="--sets"):
        bt.workload_list(["nope"], ["float16"], SUITE, held)


def test_ops_narrow_the_sets_to_one_kernel_family(bt):
    """After a conv kernel change, ``--ops conv2d,conv3d`` re-measures the convolutions of every named
    set (the e2e set's ResNet-50 layers included) and nothing else; an unknown op is refused."""
    every, _ = bt.workload_list(["e2e", "conv2d", "conv3d"], ["float16"], SUITE, HELDOUT)
    convs, _ = bt.workload_list(["e2e", "conv2d", "conv3d"], ["float16"], SUITE, HELDOUT, ["conv2d", "conv3d"])
    assert convs == [p for p in every if p[0].op in ("conv2d", "conv3d")]
    assert {c.op for c, _ in convs} == {"conv2d", "conv3d"} and len(convs) < len(every)
    with pytest.raises(ValueError, match="--ops"):
        bt.workload_list(["e2e"], ["float16"], SUITE, HELDOUT, ["conv9d"])


def test_conv_keys_are_the_conv_drop_ins_keys(bt):
    """Each planned convolution, called as the drop-in is called (channels-last input and weight), gets
    exactly the planned key from the drop-in's own keying function."""
    plan, _ = bt.workload_list(bt.SETS, ["float16", "bfloat16"], SUITE, HELDOUT)
    convs = [c for c, m in plan if c.op in ("conv2d", "conv3d")]
    assert len({c.op for c in convs}) == 2 and any(c.shape[5:7] == (1, 1) for c in convs)  # 1x1 ones too
    # a gradient is keyed by its forward's fields (a planned forward workload: ResNet-50's), both gradients
    # planned, each measured as it is called
    grads = [c for c, m in plan if c.gradient is not None]
    forwards = {Workload(g.forward_op, g.shape, g.dtype, g.layout) for g in grads}
    assert grads and forwards <= set(convs)
    assert {f.grad(which) for f in forwards for which in ("input", "weight")} == set(grads)
    assert all(dict(plan)[g] == g for g in grads)
    for c in convs:
        p = c.conv_params()
        nd = int(c.op[4])
        sp = (p["d"], p["h"], p["w"])[3 - nd:]
        ks = (p["kd"], p["kh"], p["kw"])[3 - nd:]
        fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
        dt = getattr(torch, c.dtype)
        x = torch.empty((p["n"], p["ci"], *sp), dtype=dt, device="meta", memory_format=fmt)
        w = torch.empty((p["co"], p["ci"], *ks), dtype=dt, device="meta", memory_format=fmt)
        pad = (p["pad"],) * nd
        assert conv_ops._conv_workload(x, w, (p["stride"],) * nd, pad, pad, (1,) * nd, 1) == c
        assert dict(plan)[c] == gemm_workload(c)  # as called; a 1x1 stride-1 one as its GEMM


def _captured(model_call) -> set[Workload]:
    """Workloads the config choice is asked about while ``model_call()`` runs under patch mode."""
    seen: list[Workload] = []
    real = choose_config.choose_config

    def recording(device, workload, torch_comparable=True, torch_workload=None):
        w = workload()
        if w is not None:
            seen.append(w)
        return real(device, workload, torch_comparable, torch_workload)

    fastpath.invalidate()  # no signature stored by an earlier test may skip the config choice
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(choose_config, "choose_config", recording)
        with torch.inference_mode(), at.patched():
            model_call()
    return set(seen)


@pytest.mark.interpreter
def test_e2e_models_under_patch_mode_dispatch_the_planned_keys(bt, e2e):
    """The e2e set's generators, at the sizes of e2e.py's tiny models, give exactly the workloads those
    models ask dispatch about under patch mode (layouts included)."""
    expect = {"bert": bt.transformer_layers(2, 16, 64, 2, 128),
              "gpt2": bt.transformer_layers(2, 16, 64, 2, 256, vocab=101),
              "resnet50": bt.resnet50_layers(2, size=32, base=8, blocks=(1, 1, 1, 1), classes=10)}
    for name, shapes in expect.items():
        model, x, _ = e2e.build(name, "cpu", tiny=True)
        # a pointwise convolution asks about the GEMM it runs as
        assert _captured(lambda: model(x)) == {gemm_workload(Workload(op, s, "float16", lay))
                                               for op, s, lay in shapes}, name


def test_e2e_set_uses_the_sizes_e2e_runs(bt, e2e):
    src = inspect.getsource(e2e._network)  # where build and build_train take their sizes from
    b, g = bt.E2E_BERT, bt.E2E_GPT2
    assert f"({b['batch']}, {b['seq']}, {b['d']})" in src and f"({g['batch']}, {g['seq']})" in src
    assert f"({bt.E2E_RESNET_BATCH}, 3, 224, 224)" in src
    with torch.device("meta"):
        bert, gpt2, rn = e2e.BertEncoder(), e2e.GPT2(), e2e.ResNet50()
    for m, dims in ((bert.layers[0], b), (gpt2.blocks[0], g)):
        assert (m.attn.qkv.in_features, m.attn.heads, m.fc1.out_features) == (dims["d"], dims["heads"], dims["ffn"])
    assert (gpt2.wte.num_embeddings, gpt2.wpe.num_embeddings) == (g["vocab"], g["seq"])
    convs = {(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0], c.padding[0])
             for c in rn.modules() if isinstance(c, torch.nn.Conv2d)}
    planned = {(s[3], s[4], s[5], s[7], s[8]) for op, s, _ in bt.resnet50_layers(64) if op == "conv2d"}
    assert planned == convs and ("matmul", (64, rn.fc.out_features, rn.fc.in_features), "nt") in bt.resnet50_layers(64)
    ll = bt.E2E_LLAMA
    assert f"({ll['batch']}, {ll['seq']}, {ll['d']})" in src
    with torch.device("meta"):
        llama = e2e.LlamaBlock()
    layer = llama.layers[0]
    assert (layer.attn.q.in_features, layer.attn.heads, layer.gate.out_features) == (ll["d"], ll["heads"], ll["ffn"])
    e2e_set = set(bt.WORKLOAD_SETS["e2e"])
    assert set(bt.transformer_layers(**b) + bt.transformer_layers(**g) + bt.resnet50_layers(64)
               + bt.llama_layers(**ll)) == e2e_set


@pytest.mark.parametrize("shape,splits", [((16, 4096, 14336), True), ((4096, 4096, 4096), False)])
def test_candidates_are_model_ranked_and_include_split_k_for_decode(bt, shape, splits):
    w = Workload("matmul", shape, "float16", "nt")
    cands = bt.candidates(w, SPEC, 6, [])
    assert len(cands) == len(set(cands)) and 6 <= len(cands) <= 3 * (6 + 4)
    assert all(shape_reason(w, c, SPEC) is None for c in cands)
    assert (len({c.split_k for c in cands}) > 1) == splits
    # every tile is measured with both copy mechanisms; where the tiles leave a short last wave (4096^3:
    # 1024 tiles of 128 x 128 over 132 SMs), each TMA config that can also as a wave tail
    plain = [c for c in cands if not c.wave_tail and c.async_copy != "ws"]
    assert {c.replace(async_copy="tma") for c in plain} == {c for c in plain if c.async_copy == "tma"}
    assert {c.replace(async_copy="pointer") for c in plain} == {c for c in plain if c.async_copy == "pointer"}
    tails = {c for c in cands if c.wave_tail}
    assert {c.replace(wave_tail=False, tail_split=False) for c in tails} <= set(plain)
    assert bool(tails) == (not splits)
    # the warp-specialized kernel's configs where the space holds them: 4096^3, not a 16-row decode product
    assert any(c.async_copy == "ws" for c in cands) == (not splits)


@pytest.mark.parametrize("layout", ["nt", "nn"])
def test_nt_candidates_measure_each_8_warp_tile_with_4_warps_too(bt, layout):
    w = Workload("matmul", (2048, 2048, 2048), "float16", layout)
    cands = bt.candidates(w, SPEC, 8, [])
    # Triton's two-warpgroup tiles (the warp-specialized kernel's 8 warps are two consumer warpgroups of its own)
    eight = [c for c in cands if c.num_warps == 8 and c.block_m * c.block_n <= 128 * 128 and c.async_copy != "ws"]
    assert eight, "the model's shortlist has no 8-warp tile to pair"
    paired = [c for c in eight if c.replace(num_warps=4) in cands]
    # B stored K x N: both warp counts run alike, and the model's ranking alone decides (here it pairs none)
    assert paired == (eight if layout == "nt" else [])


def test_conv_candidates_come_from_the_conv_space(bt):
    w = Workload("conv2d", (1, 7, 7, 2048, 512, 1, 1, 1, 0, 1, 1), "float16", "nhwc")
    cands = bt.candidates(w, SPEC, 6, [])
    assert cands and all(shape_reason(w, c, SPEC) is None for c in cands)
    assert not any(c.persistent for c in cands)
    # stride 1, channels last: each config also with TMA windows and as the box kernel where its tile
    # allows (the model ranks pointer copies only), and the box kernel's own tiles
    assert {c.async_copy for c in cands} == {"pointer", "tma", "box"}
    assert all(c in cands for c in window_configs(w) if shape_reason(w, c, SPEC) is None)
    assert all(c.replace(async_copy="pointer") in cands for c in cands if c not in window_configs(w))
    assert len({c.split_k for c in cands}) > 1  # 49 rows: split-K fills the GPU


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
    conv = Workload("conv2d", (64, 56, 56, 64, 64, 1, 1, 1, 0, 1, 1), "float16", "nhwc")
    plan = [(called, w), (w, w), (conv, conv)]
    assert bt.pending(plan, done) == [(called, w), (conv, conv)]  # torch on the user's shape is still missing
    assert bt.pending(plan, done, new_candidates=True) == plan  # complete ones too: for candidates the file lacks
    with pytest.warns(RecordSkipped, match="line 4"):  # the cut line
        recs = read_jsonl(path)
    assert [r.torch_ms for r in recs] == [0.06, 0.06]  # the torch line is the records' torch_ms
    summary = bt.summarize(path, META)
    assert summary["rows"] == [{"workload": w.key(), "alcop_ms": 0.05, "torch_ms": 0.06, "speedup": pytest.approx(1.2)}]
    bt.write_summary(tmp_path, summary)
    assert "| matmul:999x999x1000:float16:nt | 0.0500 | 0.0600 | 1.20x |" in (tmp_path / "build_table.md").read_text()


def _lines(*recs: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


def test_install_merges_measurements_only(bt, tmp_path):
    out, data = tmp_path / "out", tmp_path / "data"
    out.mkdir()
    data.mkdir()
    w1 = Workload("matmul", (512, 512, 512), "float16", "nt")
    w2 = Workload("conv2d", (64, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1), "float16", "nhwc")
    w3 = Workload("matmul", (256, 256, 256), "float16", "nt")
    held = Workload("matmul", (257, 263, 271), "float16", "nt")  # in heldout.json
    c = KernelConfig(64, 64, 32)
    old_kept = bt.record(w3, c, 0.01, None, META, "cuda_graph")
    old_replaced = bt.record(w1, c, 0.5, None, META, "cuda_graph")
    old_untimed = {k: v for k, v in bt.record(w3, KernelConfig(32, 32, 32), 0.02, None, META).items()}
    (data / "default_h100.jsonl").write_text(_lines(old_kept, old_replaced, old_untimed))
    new = [bt.record(w1, c, 0.02, None, META, "cuda_graph"), bt.record(w1, None, 0.01, None, META, "cuda_graph"),
           bt.record(w2, c, None, "compile", META, message="x"), bt.record(w2, c.replace(block_m=128), 0.3, None, META,
                                                                          "do_bench"),
           bt.record(w2, None, 0.2, None, META, "do_bench")]
    refused = [bt.record(held, c, 0.1, None, META, "cuda_graph"),
               bt.record(w1, c, 0.1, None, {k: v for k, v in META.items() if k != "device"}, "cuda_graph"),
               bt.record(w1, c.replace(block_k=64), 0.1, None, META)]
    (out / "default_h100.jsonl").write_text(_lines(*new, *refused) + '{"workload": {"op": "ma')
    report = bt.install(out, data, HELDOUT)["default_h100.jsonl"]
    assert (report["installed"], report["kept"], report["replaced"]) == (5, 1, 1)
    assert len(report["refused"]) == 4 and len(report["dropped"]) == 1
    text = (data / "default_h100.jsonl").read_text()
    assert text == _lines(old_kept, *new)
    recs = read_jsonl(data / "default_h100.jsonl")
    assert {(r.workload, r.torch_ms) for r in recs} == {(w3, None), (w1, 0.01), (w2, 0.2)}
    assert all(bt.line_problem(line, bt._heldout_keys(HELDOUT)) is None for line in text.splitlines())
    assert bt.install(out, data, HELDOUT)["default_h100.jsonl"]["lines"] == 6  # installing again changes nothing
    assert (data / "default_h100.jsonl").read_text() == text
    assert bt.main([str(out), "--install", "--data-dir", str(data)]) == 0


def test_shipped_table_is_measurements_once_installed(bt):
    shipped = ROOT / "alcop_triton" / "data" / "default_h100.jsonl"
    lines = shipped.read_text().splitlines()
    if not any(json.loads(line).get("impl") == "torch" for line in lines):
        pytest.skip("the shipped table predates build_table.py --install (no torch timings yet)")
    held = bt._heldout_keys(HELDOUT)
    assert [line for line in lines if bt.line_problem(line, held) is not None] == []


class _FakeCuda:
    """The device a CUDA tensor reports: the config choice consults the dispatcher for it."""

    type = "cuda"
    index = 0


@pytest.mark.interpreter
def test_a_torch_timing_in_the_table_sends_patch_mode_to_torch(bt, tmp_path, monkeypatch):
    """build_table lines -> installed table -> torch_ms -> Decision.torch_preferred -> patch mode calls torch.

    The config choice runs its CUDA branch (dispatcher, decision) for these CPU tensors; the kernel
    then runs in the interpreter with the table's config."""
    slow = Workload("matmul", (16, 24, 32), "float32", "nn")   # torch measured faster: left to torch
    fast = Workload("matmul", (16, 40, 32), "float32", "nn")   # alcop measured faster: alcop runs
    cfg = KernelConfig(16, 16, 16, group_m=1, num_warps=4, smem_stages=2)
    out, data = tmp_path / "out", tmp_path / "data"
    out.mkdir()
    data.mkdir()
    (out / "default_h100.jsonl").write_text(_lines(
        bt.record(slow, cfg, 0.02, None, META, "cuda_graph"), bt.record(slow, None, 0.01, None, META, "cuda_graph"),
        bt.record(fast, cfg, 0.01, None, META, "cuda_graph"), bt.record(fast, None, 0.02, None, META, "cuda_graph")))
    bt.install(out, data, HELDOUT)
    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "absent.sqlite"))
    monkeypatch.setattr(dmod, "default_tables", lambda: read_jsonl(data / "default_h100.jsonl"))
    monkeypatch.setattr(choose_config, "gpu_spec", lambda index: SPEC)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    real = choose_config.choose_config
    monkeypatch.setattr(choose_config, "choose_config", lambda device, workload, torch_comparable=True, torch_workload=None:
                        real(_FakeCuda(), workload, torch_comparable, torch_workload))
    fastpath.invalidate()
    assert dmod.dispatcher().decide(slow, SPEC).torch_preferred
    assert not dmod.dispatcher().decide(fast, SPEC).torch_preferred
    g = torch.Generator().manual_seed(0)
    a, b_slow, b_fast = (torch.randn(s, generator=g) for s in ((16, 32), (32, 24), (32, 40)))
    want_slow, want_fast = a.double() @ b_slow.double(), a.double() @ b_fast.double()
    fastpath.reset_stats()
    with at.patched():
        for _ in range(3):
            torch.testing.assert_close(torch.matmul(a, b_slow).double(), want_slow, rtol=1e-5, atol=1e-5)
        assert fastpath.stats().to_torch == 2  # the first call ran alcop and learnt the decision
        for _ in range(3):
            torch.testing.assert_close(torch.matmul(a, b_fast).double(), want_fast, rtol=1e-5, atol=1e-5)
    # hits: the second slow call (the third goes to torch from its call site, with no lookup) and two fast repeats
    assert fastpath.stats().to_torch == 2 and fastpath.stats().hits == 3
    fastpath.invalidate()


def test_runs_stop_before_what_would_pass_the_budget(bt):
    """A chunk's preparation and each workload take the fake clock's seconds; the run stops before a
    chunk or workload that would end past the budget, judged by the slowest so far."""
    now = [0.0]
    cost = {"prepare": 10.0, **{i: 5.0 for i in range(10)}, 3: 30.0}
    log: list[Any] = []

    def prepare(part):
        now[0] += cost["prepare"]
        log.append(("prepare", part))
        return part

    def measure(item):
        now[0] += cost[item]
        log.append(item)

    n = bt.run_chunks(list(range(10)), 4, 100.0, 0.0, prepare, measure, clock=lambda: now[0])
    # 0-3 end at 55 s (3 took 30 s); the next chunk (10 s + 30 s) would end at 95 s: started; 4 ends at 70,
    # 5 at 75, then 75 + 30 > 100: stopped before 6.
    assert n == 6 and log == [("prepare", [0, 1, 2, 3]), 0, 1, 2, 3, ("prepare", [4, 5, 6, 7]), 4, 5]
    assert bt.run_chunks([], 4, 100.0, 0.0, prepare, measure, clock=lambda: now[0]) == 0


@pytest.mark.parametrize("w", [Workload("conv2d", (2, 9, 9, 8, 16, 3, 3, 2, 1, 1, 1), "bfloat16", "nhwc"),
                               Workload("conv3d", (1, 4, 5, 5, 8, 16, 3, 3, 3, 1, 1, 1, 1), "float16", "nhwc"),
                               Workload("bmm", (3, 20, 24, 16), "float16", "nn")])
def test_torch_call_and_reference_compute_the_runners_workload(bt, w):
    from alcop_triton.kernels.runner import make_runner
    r = make_runner(w, KernelConfig(), "cpu")
    x = r.inputs(0)
    ref = bt.reference(w, x)
    assert ref.dtype == torch.float32 and ref.shape == r.reference(x).shape
    torch.testing.assert_close(ref, r.reference(x).float(), rtol=1e-2, atol=1e-2)  # the runner's, before rounding
    got = bt.torch_call(w)(*x)
    assert got.dtype == x[0].dtype and ((got.float() - ref).norm() / ref.norm()).item() <= 1e-2


def test_candidates_never_pair_a_warp_specialized_config_with_4_warps(bt):
    # The H200 table's records make dispatch's transfer pick a ws ping-pong config (two consumer warpgroups,
    # 8 warps) for this nt GEMM. Its warps are warpgroup roles: a 4-warp twin is no config (one consumer
    # cannot ping-pong) and once stopped a table run.
    spec = get_spec("H200")
    w = Workload("matmul", (8192, 2304, 768), "float16", "nt")
    cands = bt.candidates(w, spec, 8, dmod.default_tables())
    ws = [c for c in cands if c.async_copy == "ws"]
    assert ws and all(c.num_warps == 8 for c in ws if c.pingpong)
    assert all(shape_reason(w, c, spec) is None for c in cands)


def test_torch_is_timed_before_and_after_the_candidates_and_the_faster_kept(bt, monkeypatch):
    # a torch timing caught on a slow moment would favour alcop's best of many candidates in the records
    import alcop_triton.autotune.measure as measure
    import alcop_triton.kernels.runner as runner_mod
    w = Workload("matmul", (64, 32, 16), "float16", "nt")
    order: list[str] = []
    torch_times = iter([0.30, 0.20])   # before the candidates, after them

    class Runner:
        def __init__(self, wl, config, device):
            self.config = config

        def inputs(self, seed):
            return (torch.ones(2),)

        def bind(self, x):
            out = torch.zeros(2)
            return (lambda: out.fill_(1.0)), out   # the kernel's launch writes the right answer

    class TorchRunner:
        def __init__(self, tw):
            self.workload = tw

    def time_gpu(r, seed):
        if isinstance(getattr(r, "_r", r), TorchRunner):
            order.append("torch")
            return next(torch_times), "do_bench"
        order.append("alcop")
        return 0.25, "do_bench"
    monkeypatch.setattr(measure, "time_gpu", time_gpu)
    monkeypatch.setattr(runner_mod, "make_runner", Runner)
    monkeypatch.setattr(bt, "_TorchRunner", TorchRunner)
    monkeypatch.setattr(bt, "reference", lambda wl, x: torch.zeros(2) + 1)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    lines: list[dict] = []
    meta = {"gpu": "H200", "device": "NVIDIA H200", "cc": "9.0", "mma": "wgmma", "triton": "t", "torch": "t",
            "alcop": "a", "date": "d"}
    bt.measure_workload(w, w, [KernelConfig(64, 32, 16), KernelConfig(32, 32, 16)], set(), meta, lines.append)
    assert order == ["torch", "alcop", "alcop", "torch"]
    assert [(d["impl"], d["time_ms"]) for d in lines] == [("alcop", 0.25), ("alcop", 0.25), ("torch", 0.20)]
    # every candidate already recorded (torch's line removed to time it again): two timings back to back
    order.clear()
    torch_times = iter([0.4, 0.5])
    done = {bt._pair_key(w, c) for c in (KernelConfig(64, 32, 16), KernelConfig(32, 32, 16))}
    bt.measure_workload(w, w, [KernelConfig(64, 32, 16), KernelConfig(32, 32, 16)], done, meta, lines.append)
    assert order == ["torch", "torch"] and lines[-1]["time_ms"] == 0.4


def test_a_gradient_is_checked_then_timed_both_ways_and_torchs_line_comes_last(bt, monkeypatch):
    # measure_gradient on CPU (the interpreter), with a timer that counts: alcop's gradient checked against
    # float32, then one alcop record with GRADIENT_CONFIG and torch's line last, the faster of two timings;
    # a resumed run measures nothing twice; a wrong gradient is recorded as such and never timed.
    from alcop_triton.records import GRADIENT_CONFIG
    fw = Workload("conv2d", (2, 6, 6, 16, 16, 3, 3, 2, 1, 1, 1), "float16", "nhwc")
    times = iter([0.5, 0.2, 0.4])  # torch before, alcop, torch after

    def timer(runner, seed):
        assert seed == 0 and runner.workload.gradient == "weight"
        return next(times), "fake"
    lines: list[dict] = []
    meta = {"gpu": "H200", "cc": "9.0", "device": "NVIDIA H200", "mma": "wgmma", "triton": "3.6.0", "torch": "2.11.0",
            "alcop": "0.1.0", "date": "2026-11-29"}
    bt.measure_gradient(fw.grad("weight"), set(), meta, lines.append, "cpu", timer)
    assert [(d["impl"], d["time_ms"], d["error"]) for d in lines] == [("alcop", 0.2, None), ("torch", 0.4, None)]
    assert [bt.line_problem(json.dumps(d), set()) for d in lines] == [None, None]  # both may be shipped
    assert lines[0]["config"] == GRADIENT_CONFIG.to_dict() and lines[0]["timer"] == "fake"
    assert Workload.from_dict(lines[0]["workload"]) == fw.grad("weight")
    done = {bt._pair_key(fw.grad("weight"), GRADIENT_CONFIG), bt._pair_key(fw.grad("weight"), None)}
    bt.measure_gradient(fw.grad("weight"), done, meta, lines.append, "cpu", lambda *a: pytest.fail("timed again"))
    assert len(lines) == 2
    real = bt._GradientRunner.run
    monkeypatch.setattr(bt._GradientRunner, "run", lambda self, x, impl=None, dtype=None:
                        real(self, x, impl, dtype) * (1 if (impl or self.impl) == "torch" else 1.5))
    wrong: list[dict] = []
    bt.measure_gradient(fw.grad("input"), set(), meta, wrong.append, "cpu", lambda *a: (0.3, "fake"))
    assert [(d["impl"], d["error"]) for d in wrong] == [("alcop", "wrong_answer"), ("torch", None)]
