"""emit(): the generated Gluon source: header per level, stable names, the layout's coordinates and views."""

from __future__ import annotations

import ast

import pytest

from alcop_triton.errors import ScheduleError
from alcop_triton.hopper import HopperConfig, plan
from alcop_triton.hopper.emit import EMITTERS, LAYOUTS, emit, kernel_name

PP = HopperConfig(consumers=2, policy="pingpong", stages=4, wgmma_depth=2, epilogue_subtile=2)
INLINE = HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=0, stages=3)


def test_header_names_op_layout_dtype_config_and_each_level() -> None:
    ks = emit(plan(8192, 8192, 8192, PP), "bfloat16", "tn", bias=True, activation="relu")
    doc = ast.get_docstring(ast.parse(ks.source)) or ""
    assert doc.startswith(f"alcop_triton generated Hopper (sm90) GEMM kernel {ks.name}")
    for line in ("op:       C[m, n] = relu(sum_k A[m, k] * B[k, n] + bias[n])", "layout:   tn: A stored (K, M)",
                 "dtype:    bfloat16 in, float32 accumulate, bfloat16 out", f"config:   {PP.tag()}",
                 "level 1:  global -> shared, TMA ring, depth 4", "level 2:  shared -> tensor core",
                 "depth 2: 2 group(s) left in flight", "level 3:  across tiles, depth 2", "maxnreg=168"):
        assert line in doc, line


def test_clamps_reach_the_header_as_notes() -> None:
    ks = emit(plan(4096, 4096, 128, PP), "float16", "nn")
    assert "note:     level 1: 4 stages requested" in ks.source


def test_names_are_stable_and_say_what_differs() -> None:
    a = emit(PP, "float16", "nt")
    assert a.name == kernel_name(PP, "float16", "nt") == "hopper_gemm_nt_f16_m128n128k64_s4d2_c2pp_ws_pers_e2_g8"
    assert emit(PP, "float16", "nt").source == a.source
    names = {emit(PP, d, lay, bias=b).name for d in ("float16", "bfloat16") for lay in LAYOUTS for b in (False, True)}
    assert len(names) == 16


@pytest.mark.parametrize("layout, a_coord, b_coord, a_view, b_view", [
    ("nn", "[off_m, k * BLOCK_K]", "[k * BLOCK_K, off_n]", "a_ring.index(slot),", "b_ring.index(slot),"),
    ("nt", "[off_m, k * BLOCK_K]", "[off_n, k * BLOCK_K]", "a_ring.index(slot),", "b_ring.index(slot).permute((1, 0))"),
    ("tn", "[k * BLOCK_K, off_m]", "[k * BLOCK_K, off_n]", "a_ring.index(slot).permute((1, 0))", "b_ring.index(slot),"),
    ("tt", "[k * BLOCK_K, off_m]", "[off_n, k * BLOCK_K]", "a_ring.index(slot).permute((1, 0))",
     "b_ring.index(slot).permute((1, 0))")])
def test_each_layout_copies_stored_boxes_and_hands_wgmma_the_transposed_view(layout, a_coord, b_coord, a_view,
                                                                            b_view) -> None:
    src = emit(INLINE, "float16", layout).source
    assert f"async_copy_global_to_shared(a_desc, {a_coord}" in src
    assert f"async_copy_global_to_shared(b_desc, {b_coord}" in src
    assert f"warpgroup_mma({a_view}" in src and b_view in src


def test_level_structure_follows_the_config() -> None:
    inline = emit(INLINE, "float16", "nn").source
    assert "warp_specialize" not in inline.split('"""', 2)[2] and "_loader" not in inline
    assert "for i in gl.static_range(STAGES - WGMMA_DEPTH):" in inline
    ws = emit(PP, "float16", "nn").source
    assert "gl.warp_specialize([" in ws and "], [4, 1], [240, 24])" in ws
    assert "mbarrier.wait(turn.index(FIRST)" in ws and "mbarrier.arrive(turn.index(1 - FIRST)" in ws
    assert "mbarrier.arrive(empty.index((c - WGMMA_DEPTH) % STAGES)" in ws
    assert ws.count("tma.async_copy_shared_to_global") == 2  # two epilogue slices
    coop = emit(HopperConfig(consumers=2, policy="cooperative"), "float16", "nn").source
    assert "turn.index" not in coop.split('"""', 2)[2] and "], [1], [24])" in coop and "CONSUMER_WARPS = gl.constexpr(8)" in coop


def test_every_variant_is_valid_python_with_one_kernel() -> None:
    for cfg in (PP, INLINE, HopperConfig(consumers=2, epilogue_subtile=4, wgmma_depth=0)):
        tree = ast.parse(emit(cfg, "float16", "tt", bias=True).source)
        defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert defs[-1].startswith("hopper_gemm_tt_f16_bias_") and len(set(defs)) == len(defs)
    assert [n for n, _ in EMITTERS][0] == "header"


@pytest.mark.parametrize("kw, word", [({"dtype": "float32"}, "dtype='float32'"), ({"layout": "nx"}, "layout='nx'"),
                                      ({"activation": "gelu_tanh"}, "activation='gelu_tanh'"), ({"bias": 1}, "bias=1"),
                                      ({"residual": "yes"}, "residual='yes'")])
def test_only_checked_values_reach_the_source(kw, word) -> None:
    args = {"dtype": "float16", "layout": "nn"} | {k: v for k, v in kw.items() if k in ("dtype", "layout")}
    extra = {k: v for k, v in kw.items() if k not in ("dtype", "layout")}
    with pytest.raises(ScheduleError, match=word.replace("(", "\\(")):
        emit(PP, args["dtype"], args["layout"], **extra)


def test_the_epilogue_names_each_part_in_header_name_and_docstring() -> None:
    ks = emit(PP, "bfloat16", "nt", bias=True, activation="silu", residual=True)
    assert ks.name.startswith("hopper_gemm_nt_bf16_bias_silu_res_") and ks.residual
    assert "op:       C[m, n] = silu(sum_k A[m, k] * B[k, n] + bias[n]) + residual[m, n]" in ks.source
    assert "bias added; silu; residual added" in ks.source
    assert "def hopper_gemm_nt_bf16_bias_silu_res_" in ks.source and "(a_ptr, b_ptr, bias, residual, c_ptr," in ks.source
