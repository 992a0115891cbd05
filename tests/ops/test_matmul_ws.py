"""The warp-specialized GEMM's config, its rules and its CPU route (``kernels/matmul_ws.py``, ``async_copy="ws"``).

The kernel itself (Gluon: a loader warp, TMA, mbarriers, wgmma) runs on sm90 only
(``tests/gpu/test_matmul_ws_gpu.py``); elsewhere a "ws" config runs as its ``"tma"`` twin of the
implicit-GEMM kernel, checked here in Triton's interpreter on odd sizes.
"""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import KernelConfig, Workload
from alcop_triton.errors import ScheduleError
from alcop_triton.kernels import matmul as km
from alcop_triton.kernels.matmul_ws import WarpSpecializedGemm, ws_configs
from alcop_triton.records import check_record

WS = KernelConfig(64, 64, 32, group_m=8, num_warps=4, smem_stages=3, reg_stages=2, async_copy="ws", persistent=True)
PP = KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=4, reg_stages=2, async_copy="ws",
                  persistent=True, pingpong=True, epilogue_subtile=2)


def test_names_round_trips_and_the_hopper_record() -> None:
    assert str(PP).endswith("_ws_persistent_pingpong_e2")
    d = PP.to_dict()
    assert d["ASYNC_COPY"] == "ws" and d["PINGPONG"] is True and d["EPILOGUE_SUBTILE"] == 2
    assert KernelConfig.from_dict(d) == PP
    # records written before the knobs existed read back equal: the new keys appear only when set
    assert "PINGPONG" not in WS.to_dict() and "EPILOGUE_SUBTILE" not in KernelConfig().to_dict()
    h = PP.hopper()
    assert (h.stages, h.wgmma_depth, h.consumers, h.policy, h.warp_specialize, h.persistent, h.epilogue_subtile) == \
        (4, 1, 2, "pingpong", True, True, 2)
    assert WS.hopper().consumers == 1 and WS.hopper().wgmma_depth == 1
    assert PP.tma_twin() == KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=4, async_copy="tma",
                                         persistent=True)


@pytest.mark.parametrize("changes, words", [
    (dict(num_warps=2), "num_warps=2"),
    (dict(reg_split=2, block_k=64), "reg_split=2"),
    (dict(persistent=False, split_k=2), "split_k=2"),
    (dict(block_m=256, block_n=256, num_warps=8), "accumulator registers"),
    (dict(smem_stages=8, block_m=256, block_n=256, num_warps=8), "HopperConfig"),
    (dict(pingpong=True, num_warps=4), "ping-pong"),
    (dict(pingpong=True, num_warps=8, persistent=False), "persistent"),
    (dict(epilogue_subtile=3), "epilogue_subtile=3"),
])
def test_each_rule_names_the_field_value_and_rule(changes: dict, words: str) -> None:
    with pytest.raises(ScheduleError, match=words):
        WS.replace(**changes)


def test_the_hopper_knobs_belong_to_ws_configs_only() -> None:
    with pytest.raises(ScheduleError, match="async_copy='ws'"):
        KernelConfig(async_copy="tma", pingpong=True)
    with pytest.raises(ScheduleError, match="epilogue_subtile=2"):
        KernelConfig(epilogue_subtile=2)
    with pytest.raises(ScheduleError, match="only a 'ws' config"):
        KernelConfig().hopper()
    with pytest.raises(ScheduleError, match="config key 'PINGPONG'|expected bool"):
        KernelConfig.from_dict({**PP.to_dict(), "PINGPONG": 1})


def test_records_keep_ws_to_half_precision_gemms() -> None:
    check_record(Workload("matmul", (512, 512, 512), "bfloat16", "nt"), PP)
    for w in (Workload("matmul", (512, 512, 512), "float32", "nn"), Workload("bmm", (4, 64, 64, 64), "float16", "nn")):
        with pytest.raises(ScheduleError, match="warp-specialized"):
            check_record(w, PP)


def test_a_schedule_does_not_copy_by_ws() -> None:
    _, c = km.matmul_te("float16", 0)
    with pytest.raises(ScheduleError, match="warp-specialized GEMM kernel's copy"):
        at.Schedule(c).async_copy("ws")


def test_compiled_picks_the_kernel_for_single_gemms_and_the_twin_otherwise() -> None:
    assert isinstance(km.compiled("float16", 0, km.Epilogue(bias=True, activation="relu"), PP), WarpSpecializedGemm)
    assert km.compiled("float16", 0, km.Epilogue(), PP) == km.compiled("float16", 0, km.Epilogue(), PP)
    batched = km.compiled("float16", 1, km.Epilogue(), PP)
    assert not isinstance(batched, WarpSpecializedGemm) and batched.config == PP.tma_twin()
    assert not km.compiled("float16", 0, km.Epilogue(), PP, out_dtype="float32").config.async_copy == "ws"
    for ep in (km.Epilogue(bias=True, activation="gelu", residual=True), km.Epilogue(activation="tanh")):
        assert WarpSpecializedGemm("float16", ep, PP).applies()
    for ep in (km.Epilogue(alpha=2.0), km.Epilogue(residual=True, beta=0.5)):  # addmm's scales: the twin's
        assert not WarpSpecializedGemm("float16", ep, PP).applies()
    with pytest.raises(ScheduleError, match="not 'ws'"):
        WarpSpecializedGemm("float16", km.Epilogue(), PP.tma_twin())


def test_the_generated_variant_and_its_plan_are_readable_without_a_gpu() -> None:
    kern = km.compiled("bfloat16", 0, km.Epilogue(bias=True, activation="gelu"), PP)
    ks = kern.variant(4096, 4096, 4096, "nt")
    assert ks.name.startswith("hopper_gemm_nt_bf16_bias_gelu_") and "level 1:" in ks.source
    text = kern.explain(512, 1024, 4096)  # 32 tiles on 132 SMs: level 3's ping-pong and persistence clamp
    assert text.splitlines()[0].startswith("level 1: global -> shared") and "note:" in text


def test_table_candidates_are_valid_and_distinct() -> None:
    got = ws_configs("bfloat16")
    assert len(set(got)) == len(got) == 5 and all(c.async_copy == "ws" for c in got)
    assert {c.pingpong for c in got} == {True, False} and ws_configs("float32") == []


@pytest.mark.parametrize("shape, layout, ep", [
    ((70, 33, 50), "nn", km.Epilogue(bias=True, activation="relu")),
    ((65, 47, 40), "tn", km.Epilogue()),
    ((31, 80, 24), "nt", km.Epilogue(activation="gelu", residual=True)),
])
def test_the_twin_computes_the_gemm_off_hopper(shape: tuple[int, int, int], layout: str, ep: km.Epilogue,
                                                kit) -> None:
    m, n, k = shape
    g = torch.Generator().manual_seed(kit.seed(m, n, k))
    a = kit.rand((m, k), "float16", g) if layout[0] == "n" else kit.rand((k, m), "float16", g).t()
    b = kit.rand((k, n), "float16", g) if layout[1] == "n" else kit.rand((n, k), "float16", g).t()
    extra = ([kit.rand((n,), "float16", g)] if ep.bias else []) + ([kit.rand((m, n), "float16", g)] if ep.residual else [])
    kern = km.compiled("float16", 0, ep, WS)
    assert not kern.runs_here((a, b, torch.empty(m, n, dtype=torch.float16)))  # CPU: the twin
    out = kit.poisoned((m, n), "float16")
    kern(a, b, *extra, out)
    ref = a.double() @ b.double()
    if ep.bias:
        ref = ref + extra[0].double()
    if ep.activation:
        ref = getattr(torch.nn.functional, ep.activation)(ref)
    if ep.residual:
        ref = ref + extra[-1].double()
    kit.assert_close(out, ref, "float16", f"ws twin {layout}")
    with at.use_config(WS):
        kit.assert_close(at.matmul(a, b), a.double() @ b.double(), "float16", "drop-in with a ws config")
