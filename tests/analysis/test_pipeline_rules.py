"""ALCOP's pipelinability rules (paper section 2.1), the ordering case (Fig. 5), the planner's clamps,
TMA feasibility, and what ``explain()`` tells the user. Positive and negative case for each rule."""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import KernelConfig, OutOfResources, PipelineError, Schedule, ScheduleError, te
from alcop_triton.analysis import Candidate, explain, find_pipeline_candidates, plan_pipeline, smem_per_stage
from alcop_triton.kernels import conv as kc
from alcop_triton.lower import lower

M, N, K = te.var("M"), te.var("N"), te.var("K")
SMALL = KernelConfig(16, 16, 16, group_m=1, smem_stages=3)


def _mm(dtype: str = "float16", a_shape=None, a_index=None):
    A = te.placeholder(a_shape or (M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    idx = a_index or (lambda i: (i, k))
    C = te.compute((M, N), lambda i, j: te.sum(A[idx(i)] * B[k, j], axis=k), "C")
    return A, B, C


def _cands(s: Schedule, inputs, unit_stride=None, static=None) -> dict[str, Candidate]:
    return {c.buffer: c for c in find_pipeline_candidates(lower(s, tuple(inputs), unit_stride, static=static))}


def _rows(text: str) -> dict[str, list[str]]:
    """explain()'s buffer rows by buffer name (continuation lines and notes skipped)."""
    return {ln.split()[0]: ln.split() for ln in text.splitlines()[1:] if ln and not ln.startswith((" ", "note:"))}


def _conv(dtype: str, channels_last: bool):
    p = kc.ConvParams(2, (1, 1), (1, 1), (1, 1), (1, 1), 1, channels_last)
    inputs, out = kc.conv_te(dtype, p)
    s = Schedule.from_config(out, SMALL, m_axes=("n", "oh", "ow"), n_axes=("co",))
    return s, inputs


# ----------------------------------------------------------------------------- rule 1: async copy

def test_rule1_positive_direct_vectorised_load() -> None:
    A, B, C = _mm()
    c = _cands(Schedule.from_config(C, SMALL), (A, B))
    assert c["A_shared"].pipelinable and c["B_shared"].pipelinable
    assert c["A_shared"].reasons[0].startswith("rule 1 (async copy): direct load of input A, 16 contiguous bytes")
    assert "A is contiguous along k (K" in c["A_shared"].reasons[0]
    assert "B is contiguous along j (N" in c["B_shared"].reasons[0]


def test_rule1_negative_fp16_without_unit_stride_dim() -> None:
    A, B, C = _mm("float16")
    c = _cands(Schedule.from_config(C, SMALL), (A, B), unit_stride={"A": None})
    a = c["A_shared"]
    assert not a.pipelinable and c["B_shared"].pipelinable
    assert a.reasons[0].startswith("rule 1 (async copy): A has no unit-stride dim")
    assert "2-byte" in a.reasons[0] and "cp.async needs >= 4 bytes per thread" in a.reasons[0]
    plan = plan_pipeline(lower(Schedule.from_config(C, SMALL), (A, B), {"A": None}), tuple(c.values()))
    assert plan.smem_stages == 3  # B alone still pipelines the loop
    assert any(n.startswith("A_shared: requested 3 stages but it cannot be pipelined") for n in plan.notes)


def test_rule1_fp32_without_unit_stride_still_moves_4_bytes() -> None:
    # the rule is about bytes per thread: a single fp32 element is a legal 4-byte cp.async
    A, B, C = _mm("float32")
    c = _cands(Schedule.from_config(C, SMALL), (A, B), unit_stride={"A": None})
    assert c["A_shared"].pipelinable and "4 contiguous bytes" in c["A_shared"].reasons[0]


@pytest.mark.interpreter
def test_rule1_negative_at_runtime_for_a_strided_fp16_operand(kit) -> None:
    # A[:, ::2] has no stride-1 dim: the variant specialised for it stages A synchronously, and is still right
    A, B, C = _mm("float16")
    k = at.build(Schedule.from_config(C, SMALL), [A, B, C])
    g = torch.Generator().manual_seed(0)
    a = kit.rand((20, 2 * 24), "float16", g)[:, ::2]
    b = kit.rand((24, 18), "float16", g)
    out = kit.poisoned((20, 18), "float16")
    k(a, b, out)
    kit.assert_close(out, a.double() @ b.double(), "float16", "strided fp16 A")
    rows = _rows(k.explain())
    assert rows["A_shared"][:5] == ["A_shared", "shared", "3->1", "k0", "no"]
    assert rows["B_shared"][:5] == ["B_shared", "shared", "3->2", "k0", "yes"]  # K=24: 2 chunks, clamped
    assert "A has no unit-stride dim" in k.explain()


def test_rule1_negative_nchw_conv_input_indexed_by_a_mixed_expression() -> None:
    s, inputs = _conv("float16", channels_last=False)
    c = _cands(s, inputs)
    x = c["X_shared"]
    assert not x.pipelinable
    assert "X's unit-stride dim 3 is indexed by ((ow - 1) + rw), not by one tile axis" in x.reasons[0]
    assert "2-byte loads" in x.reasons[0] and "Make X contiguous along a tile axis" in x.reasons[0]


def _conv_cands(channels_last: bool, static: dict[str, int] | None) -> dict[str, Candidate]:
    s, inputs = _conv("float16", channels_last)
    unit = {"X": 1} if channels_last else None
    return {c.buffer: c for c in find_pipeline_candidates(lower(s, tuple(inputs), unit, static=static))}


def test_rule1_channels_last_fp16_conv_input_is_pipelinable_with_static_channels() -> None:
    # NHWC: X's unit-stride channel dim is indexed by g * (C // G) + rc (an offset plus the innermost
    # reduce axis); with C and the window compiled in, Triton can prove runs of C contiguous elements
    x = _conv_cands(True, {"C": 64, "KH": 3, "KW": 3})["X_shared"]
    assert x.pipelinable and "X is contiguous along rc (K, 16 elements per run)" in x.reasons[0]
    narrow = _conv_cands(True, {"C": 4, "KH": 3, "KW": 3})["X_shared"]  # runs of 4 fp16 = 8 bytes: still async
    assert narrow.pipelinable and "4 elements per run" in narrow.reasons[0]


def test_rule1_channels_last_conv_with_runtime_channels_is_not_pipelinable() -> None:
    x = _conv_cands(True, None)["X_shared"]
    assert not x.pipelinable
    assert "its extent C is a runtime size" in x.reasons[0] and "build with static=('C',)" in x.reasons[0]


def test_rule1_contiguous_axis_must_be_innermost_of_the_fused_dim() -> None:
    # NHWC reduction order is (rh, rw, rc); an NCHW-stored weight is unit-stride along rw, not rc
    wt = _conv_cands(True, {"C": 64, "KH": 3, "KW": 3})["Wt_shared"]
    assert not wt.pipelinable
    assert "contiguous along axis rw, which is not the innermost of the fused K axes ('rh', 'rw', 'rc')" in wt.reasons[0]


def test_rule1_ordering_inlined_prologue_buffer_is_rewired_to_the_raw_input() -> None:
    # Fig. 5: cache_read(A2 = A * 2) then inline A2. Case 2 (pipeline before inline): stage raw A,
    # apply * 2 at the use, so the buffer is still filled by an async copy.
    A = te.placeholder((M, K), "float16", "A")
    B = te.placeholder((K, N), "float16", "B")
    A2 = te.compute((M, K), lambda i, k: A[i, k] * 2, "A2")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A2[i, k] * B[k, j], axis=k), "C")
    s = Schedule(C)
    a2s, bs = s.cache_read(A2, "shared"), s.cache_read(B, "shared")
    s.tile(16, 16, 16)
    s.compute_inline(A2)         # given before pipeline: canonical order moves it after (note)
    s.pipeline(a2s, 3)
    s.pipeline(bs, 3)
    kern = lower(s, (A, B))
    cand = {c.buffer: c for c in find_pipeline_candidates(kern)}["A2_shared"]
    assert cand.pipelinable and cand.tensor == "A"  # the buffer keeps its name, stages raw A
    assert any("ordering: A2 is an elementwise prologue" in r and "stages raw A" in r and "Fig. 5 case 2" in r
               for r in cand.reasons)
    assert kern.operand("a").prologue_from == "A2"
    built = at.build(s, [A, B, C])
    assert "A2_shared" in built.explain() and "Fig. 5 case 2" in built.explain()
    dot = next(ln for ln in built.source.splitlines() if "tl.dot(" in ln)
    assert "tl.dot((tile_a * 2)" in dot and "tl.load" not in dot  # f fused at the use, on the staged tile
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(20, 30, generator=g).half(), torch.randn(30, 18, generator=g).half()
    out = torch.full((20, 18), float("nan"), dtype=torch.float16)
    built(a, b, out)
    ref = 2 * a.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


# ----------------------------------------------------------------------------- rule 2: sequential loop

def test_rule2_positive_chunk_and_sub_tile_loops() -> None:
    A, B, C = _mm()
    c = _cands(Schedule.from_config(C, KernelConfig(16, 16, 32, smem_stages=3, reg_stages=2, reg_split=2)), (A, B))
    assert c["A_shared"].loop == "k0" and c["A_reg"].loop == "ks"
    assert c["A_reg"].feeds_from == "A_shared" and c["A_reg"].pipelinable
    assert "rule 2 (sequential loop): loads in loop ks" in c["A_reg"].reasons[-1]


def test_rule2_negative_unrolled_reduction_is_not_pipelined(kit) -> None:
    A, B, C = _mm("float32")
    s = Schedule.from_config(C, SMALL)
    s.unroll("k")
    # tl.static_range needs a compile-time trip count: K is compiled in as a constant
    c = _cands(s, (A, B), static={"K": 48})
    for name in ("A_shared", "B_shared"):
        assert not c[name].pipelinable and c[name].loop is None
        assert "rule 2 (sequential loop): no sequential loop encloses the copy (loops: k0: static_range)" in c[name].reasons[-1]
        assert "Remove the unroll step" in c[name].reasons[-1]
    k = at.build(s, [A, B, C], static=("K",))
    a, b = torch.randn(17, 48), torch.randn(48, 20)
    kit.assert_close(k(a, b), a.double() @ b.double(), "float32", "unrolled, K compiled in")
    assert "tl.static_range(0, " in k.source and "num_stages" not in k.source.split('"""')[-1]
    assert "3->1" in k.explain() and "requested 3 stages but it cannot be pipelined" in k.explain()


def test_unroll_with_a_runtime_reduction_extent_is_refused() -> None:
    A, B, C = _mm("float32")
    s = Schedule.from_config(C, SMALL)
    s.unroll("k")
    with pytest.raises(ScheduleError, match="compile-time trip count"):
        lower(s, (A, B))


# ----------------------------------------------------------------------------- rule 3: sync scope

def _two_depths(shared=(2, 4), reg=None):
    A, B, C = _mm()
    s = Schedule(C)
    sa, sb = s.cache_read(A, "shared"), s.cache_read(B, "shared")
    regs = (s.cache_read(sa, "register"), s.cache_read(sb, "register")) if reg else None
    s.tile(16, 16, 32, sub_k=16 if reg else None)
    s.pipeline(sa, shared[0])
    s.pipeline(sb, shared[1])
    if reg:
        s.pipeline(regs[0], reg[0])
        s.pipeline(regs[1], reg[1])
    return s, [A, B, C]


def test_rule3_different_shared_depths_deepest_wins_with_a_note() -> None:
    s, args = _two_depths((2, 4))
    k = at.build(s, args)
    assert "rule 3 (sync scope): A_shared=2, B_shared=4 share loop k0's synchronization; all use 4 stages " \
           "(deepest wins)" in k.explain()
    assert "2->4" in k.explain() and "num_stages=4" in k.source


def test_rule3_register_level_also_shares_one_depth() -> None:
    s, args = _two_depths((3, 3), reg=(2, 3))
    k = at.build(s, args)
    assert "rule 3 (sync scope): A_reg=2, B_reg=3" in k.explain()
    assert "PrefetchRegisters(reg_stages=3, reg_split=2)" in k.source


def test_rule3_strict_mode_raises() -> None:
    s, args = _two_depths((2, 4))
    with pytest.raises(PipelineError, match="rule 3 .* strict mode: give them the same depth"):
        at.build(s, args, strict=True)
    same, args2 = _two_depths((3, 3))
    at.build(same, args2, strict=True)  # equal depths are fine in strict mode


def test_rule3_strict_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCOP_STRICT", "1")
    s, args = _two_depths((2, 4))
    with pytest.raises(PipelineError):
        at.build(s, args)


# ----------------------------------------------------------------------------- clamps

def test_trip_count_clamp_in_the_planner() -> None:
    A, B, C = _mm()
    kern = lower(Schedule.from_config(C, KernelConfig(16, 16, 32, smem_stages=4, reg_stages=4, reg_split=2)), (A, B))
    cands = find_pipeline_candidates(kern)
    plan = plan_pipeline(kern, cands, trip_count=1)
    assert (plan.smem_stages, plan.reg_stages) == (1, 2)
    assert "shared level: 4 stages clamped to 1: the reduction loop runs 1 chunk(s) of BLOCK_K=32" in plan.notes
    assert "register level: 4 stages clamped to 2: there are 2 sub-tile(s) to prefetch" in plan.notes
    assert plan_pipeline(kern, cands, trip_count=10).notes == ()
    with pytest.raises(PipelineError, match=r"clamped to 1: .*\(strict mode\)"):
        plan_pipeline(kern, cands, trip_count=1, strict=True)


def test_trip_count_clamp_of_a_persistent_kernel_names_the_flattened_loop() -> None:
    A, B, C = _mm()
    kern = lower(Schedule.from_config(C, KernelConfig(16, 16, 32, smem_stages=4, persistent=True)), (A, B))
    cands = find_pipeline_candidates(kern)
    flat = ("persistent: programs loop over output tiles; the tile loop is flattened with the reduction loop, so the "
            "shared level's copies run ahead across tile boundaries (the next tile's first chunks load during this "
            "tile's epilogue)")
    plan = plan_pipeline(kern, cands, trip_count=2)  # the build passes chunks per tile x tiles per program
    assert plan.smem_stages == 2
    assert plan.notes == ("shared level: 4 stages clamped to 2: the flattened tile and reduction loop runs 2 chunk(s) "
                          "per program", flat)
    assert plan_pipeline(kern, cands, trip_count=8).notes == (flat,)
    assert plan_pipeline(kern, cands).notes == (flat,)  # trip count unknown (before a call): no clamp
    one = plan_pipeline(kern, cands, trip_count=1)
    assert one.smem_stages == 1 and one.notes[-1] == ("persistent: programs loop over output tiles; one shared stage, "
                                                      "so nothing is copied ahead and the tile loop is not flattened")
    with pytest.raises(PipelineError, match=r"flattened tile and reduction loop runs 1 chunk\(s\) per program.*strict"):
        plan_pipeline(kern, cands, trip_count=1, strict=True)
    # the shared-memory clamp applies as usual, and decides the note
    big = lower(Schedule.from_config(C, KernelConfig(256, 256, 128, smem_stages=4, persistent=True)), (A, B))
    plan = plan_pipeline(big, find_pipeline_candidates(big), smem_limit=232448)
    assert plan.smem_stages == 1 and "the tile loop is not flattened" in plan.notes[-1]


def test_flattened_persistent_loop_leaves_room_for_the_epilogue_tile() -> None:
    # Measured on the H100: 64x64x128 at 7 stages needs 7 x 32768 + 8192 B when flattened (the
    # pipeline buffers stay live through the epilogue), 237568 > 232448: it must clamp, not crash.
    A, B, C = _mm()
    cfg = KernelConfig(64, 64, 128, smem_stages=7, persistent=True)
    kern = lower(Schedule.from_config(C, cfg), (A, B))
    plan = plan_pipeline(kern, find_pipeline_candidates(kern), smem_limit=232448)
    assert plan.smem_stages == 6
    assert plan.notes[0] == ("shared level: 7 stages clamped to 6: 7 x 32768 B per stage exceeds the GPU's 232448 B "
                             "of shared memory per block less the epilogue's 8192 B (flattened persistent loop)")
    flat = lower(Schedule.from_config(C, cfg.replace(persistent=False)), (A, B))
    assert plan_pipeline(flat, find_pipeline_candidates(flat), smem_limit=232448).smem_stages == 7


@pytest.mark.interpreter
def test_trip_count_clamp_at_call_time(kit) -> None:
    A, B, C = _mm("float32")
    cfg = KernelConfig(16, 16, 16, group_m=1, smem_stages=4)
    k = at.build(Schedule.from_config(C, cfg), [A, B, C])
    assert "clamped" not in k.explain()  # the trip count is unknown until a call
    g = torch.Generator().manual_seed(2)
    a, b = kit.rand((17, 20), "float32", g), kit.rand((20, 9), "float32", g)  # K=20: 2 chunks of 16
    out = kit.poisoned((17, 9), "float32")
    k(a, b, out)
    kit.assert_close(out, a.double() @ b.double(), "float32", "clamped")
    assert "note: shared level: 4 stages clamped to 2: the reduction loop runs 2 chunk(s) of BLOCK_K=16" in k.explain()
    assert "num_stages=2" in k.source
    strict = at.build(Schedule.from_config(C, cfg), [A, B, C], strict=True)
    with pytest.raises(PipelineError, match="strict mode"):
        strict(a, b)


def test_smem_clamp_for_h100() -> None:
    A, B, C = _mm("float16")
    s = Schedule.from_config(C, KernelConfig(256, 256, 128, smem_stages=4))
    k = at.build(s, [A, B, C], gpu="H100")
    per = (256 * 128 + 128 * 256) * 2
    assert smem_per_stage(lower(s, (A, B))) == per
    assert f"shared level: 4 stages clamped to 1: 4 x {per} B per stage exceeds the GPU's 232448 B" in k.explain()
    assert "target:    H100" in k.source
    with pytest.raises(PipelineError, match="232448 B .*strict mode"):
        at.build(s, [A, B, C], gpu="H100", strict=True)
    fits = at.build(Schedule.from_config(C, KernelConfig(64, 64, 32, smem_stages=4)), [A, B, C], gpu="H100")
    assert "clamped" not in fits.explain() and "4->4" in fits.explain()


def test_a_single_stage_that_does_not_fit_is_out_of_resources() -> None:
    A, B, C = _mm("float32")
    s = Schedule.from_config(C, KernelConfig(512, 512, 128, smem_stages=2))
    with pytest.raises(OutOfResources) as e:
        at.build(s, [A, B, C], gpu="H100")
    assert isinstance(e.value, RuntimeError)
    assert (e.value.name, e.value.required, e.value.limit) == ("shared memory", 524288, 232448)
    assert "reduce BLOCK_M/BLOCK_N/BLOCK_K" in str(e.value)


# ----------------------------------------------------------------------------- TMA feasibility

def test_tma_feasible_for_a_plain_matmul() -> None:
    A, B, C = _mm()
    c = _cands(Schedule.from_config(C, SMALL), (A, B))
    assert c["A_shared"].tma_ok and c["B_shared"].tma_ok
    # a transposed B (stored N x K) is copied in storage order and transposed in registers
    assert _cands(Schedule.from_config(C, SMALL), (A, B), unit_stride={"B": 0})["B_shared"].tma_ok
    assert c["A_shared"].tma_reason.startswith("tensor descriptor")


@pytest.mark.parametrize("case, pattern", [
    ("strided", "B has no unit-stride tile dim (TMA needs one contiguous dim)"),
    ("expr_index", "A is indexed by expressions"),
    ("k_extent", "TMA would read past the reduction instead of zero-filling"),
])
def test_tma_infeasible_reasons(case: str, pattern: str) -> None:
    if case == "strided":
        A, B, C = _mm()
        c = _cands(Schedule.from_config(C, SMALL), (A, B), unit_stride={"B": None})
        bad = c["B_shared"]
    elif case == "expr_index":
        A, B, C = _mm(a_shape=(M * 2, K), a_index=lambda i: (i * 2, te.IterVar("k", K, "reduce")))
        bad = _cands(Schedule.from_config(C, SMALL), (A, B))["A_shared"]
    else:
        A, B, C = _mm(a_shape=(M, K + 4))  # A is wider than the reduction
        bad = _cands(Schedule.from_config(C, SMALL), (A, B))["A_shared"]
    assert not bad.tma_ok and pattern in bad.tma_reason


def test_tma_infeasible_for_fused_reduction_axes() -> None:
    A = te.placeholder((M, K), "float32", "A")
    B = te.placeholder((K, 3, N), "float32", "B")
    k1, k2 = te.reduce_axis(K, "k1"), te.reduce_axis(3, "k2")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k1] * B[k1, k2, j], axis=[k1, k2]), "C")
    c = _cands(Schedule.from_config(C, SMALL), (A, B))
    assert "K fuses axes ('k1', 'k2')" in c["A_shared"].tma_reason


def test_tma_requested_on_conv_falls_back_to_pointers_with_notes() -> None:
    p = kc.ConvParams(2, (1, 1), (1, 1), (1, 1), (1, 1), 1, False)
    inputs, out = kc.conv_te("float32", p)
    s = Schedule.from_config(out, SMALL.replace(async_copy="tma"), m_axes=("n", "oh", "ow"), n_axes=("co",))
    text = at.build(s, inputs + [out]).explain()
    assert "X_shared: TMA requested but X's index" in text and "is not one M and one K dim" in text
    assert "copied with pointers (cp.async)" in text and " via tma" not in text


@pytest.mark.interpreter
def test_tma_misaligned_call_falls_back_at_runtime(kit) -> None:
    A, B, C = _mm("float32")
    k = at.build(Schedule.from_config(C, SMALL.replace(async_copy="tma")), [A, B, C])
    assert k.explain().count(" via tma") == 2
    g = torch.Generator().manual_seed(3)
    a, b = kit.rand((17, 33), "float32", g), kit.rand((33, 19), "float32", g)  # 132-byte rows: not 16-aligned
    out = kit.poisoned((17, 19), "float32")
    k(a, b, out)
    kit.assert_close(out, a.double() @ b.double(), "float32", "tma fallback")
    assert "not 16-byte aligned; copied with pointers" in k.explain() and "make_tensor_descriptor" not in k.source


# ----------------------------------------------------------------------------- explain()

def test_explain_lists_each_buffer_level_stages_loop_and_why() -> None:
    A, B, C = _mm()
    s = Schedule.from_config(C, KernelConfig(16, 16, 32, smem_stages=3, reg_stages=2, reg_split=2))
    k = at.build(s, [A, B, C])
    assert k.explain().splitlines()[0].split() == ["buffer", "level", "stages", "loop", "pipelined", "why"]
    rows = _rows(k.explain())
    assert rows["A_shared"][:5] == ["A_shared", "shared", "3->3", "k0", "yes"]
    assert rows["B_shared"][:5] == ["B_shared", "shared", "3->3", "k0", "yes"]
    assert rows["A_reg"][:5] == ["A_reg", "register", "2->2", "ks", "yes"]
    assert rows["B_reg"][:5] == ["B_reg", "register", "2->2", "ks", "yes"]
    text = k.explain()
    assert text.count("rule 1 (async copy)") == 4 and text.count("rule 2 (sequential loop)") == 4
    assert "via pointer" in text and "fed by shared buffer A_shared" in text
    kern = lower(s, (A, B))
    assert explain(plan_pipeline(kern, find_pipeline_candidates(kern))) == text  # build reports the analysis as is


def test_explain_without_staged_buffers() -> None:
    A, B, C = _mm()
    s = Schedule(C)
    s.tile(16, 16, 16)
    k = at.build(s, [A, B, C])
    assert "no staged buffers: no cache_read" in k.explain()
    assert k.source.count("into registers (plain load); not staged: no cache_read") == 2
    assert "num_stages=1" in k.source


def test_plan_mechanism_defaults_to_pointer() -> None:
    A, B, C = _mm()
    kern = lower(Schedule.from_config(C, SMALL), (A, B))
    plan = plan_pipeline(kern, find_pipeline_candidates(kern), async_copy="tma")
    assert plan.async_copy == (("a", "tma"), ("b", "tma"))
    assert plan.mechanism("a") == "tma" and plan.mechanism("zz") == "pointer"
