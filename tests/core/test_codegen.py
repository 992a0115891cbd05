"""Code generation: the header, stable kernel names, the content-addressed cache, name checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule, ScheduleError, te
from alcop_triton import codegen
from alcop_triton.errors import CodegenError
from alcop_triton.kernels import matmul as km
from alcop_triton.lower import lower

M, N, K = te.var("M"), te.var("N"), te.var("K")
CFG = KernelConfig(16, 16, 32, group_m=1, smem_stages=3, reg_stages=2, reg_split=2)


def _mm(a_name: str = "A", b_name: str = "B", k_name: str = "k", axes=("i", "j"), out_name: str = "C",
        dtype: str = "float32"):
    A = te.placeholder((M, K), dtype, a_name)
    B = te.placeholder((K, N), dtype, b_name)
    k = te.reduce_axis(K, k_name)
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), out_name, axis_names=list(axes))
    return A, B, C


def _header(src: str) -> str:
    return src.split('"""')[1]


def test_header_names_op_shapes_config_schedule_and_passes() -> None:
    inputs, out = km.matmul_te("float16", False, km.Epilogue(bias=True, activation="relu"))
    k = at.build(Schedule.from_config(out, CFG), inputs + [out])
    h = _header(k.source)
    assert h.startswith("alcop_triton generated kernel alcop_out\n")
    assert "op:        C[i, j] = sum((A[i, k] * B[k, j]), axis=[k])" in h
    assert "output:    Out(M, N) float16 = relu((C[i, j] + bias[j]))" in h
    assert "inputs:    A(M, K) float16, B(K, N) float16, bias(N) float16" in h
    assert "sizes:     runtime M, K, N; unit strides A: dim 1, B: dim 1, bias: dim 0, Out: dim 1" in h
    assert "axes:      batch (), rows (M) ('i',), columns (N) ('j',), reduction (K) ('k',)" in h
    assert f"config:    {CFG}  (BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=3, " \
           "REG_STAGES=2, REG_SPLIT=2, ASYNC_COPY=pointer)" in h
    assert "schedule:  CacheRead(A, shared, A_shared); CacheRead(A_shared, register, A_reg);" in h
    assert "Tile(16, 16, 32, 16); Pipeline(A_shared, 3); Pipeline(A_reg, 2);" in h
    assert ("passes:    lower; find_pipeline_candidates; plan_pipeline; SelectAsyncCopy(a=pointer, b=pointer); "
            "PrefetchRegisters(reg_stages=2, reg_split=2); InjectSharedPipeline(num_stages=3)") in h
    assert "pipeline:\n  buffer" in h and "  A_reg              register  2->2" in h
    assert "versions:  alcop_triton 0.1.0, triton " in h


def test_header_of_a_persistent_kernel() -> None:
    inputs, out = km.matmul_te("float16", False)
    k = at.build(Schedule.from_config(out, KernelConfig(16, 16, 32, smem_stages=3, persistent=True)), inputs + [out])
    note = ("note: persistent: programs loop over output tiles; the tile loop is flattened with the reduction "
            "loop, so the shared level's copies run ahead across tile boundaries (the next tile's first chunks load "
            "during this tile's epilogue)")
    assert note in k.explain()
    h = _header(k.source)
    assert "output:    C(M, N) float16 = C[i, j]" in h  # the Store is found inside the tile loop
    assert "config:    m16n16k32_g8_w4_s3_r1x1_persistent  (BLOCK_M=16, " in h
    assert "ASYNC_COPY=pointer, PERSISTENT=True)" in h
    assert "; AsyncCopyStep(pointer); Persistent()\n" in h
    assert "  " + note in h  # explain() is the header's pipeline section
    one = at.build(Schedule.from_config(out, KernelConfig(16, 16, 32, smem_stages=1, persistent=True)), inputs + [out])
    assert ("note: persistent: programs loop over output tiles; one shared stage, so nothing is copied ahead and the "
            "tile loop is not flattened") in one.explain()
    plain = at.build(Schedule.from_config(out, KernelConfig(16, 16, 32, smem_stages=3)), inputs + [out])
    assert "persistent" not in plain.source and "tile_id" not in plain.source


def test_header_shows_reordering_notes() -> None:
    A, B, C = _mm()
    s = Schedule(C)
    sa, sb = s.cache_read(A, "shared"), s.cache_read(B, "shared")
    s.pipeline(sa, 2)
    s.pipeline(sb, 2)
    s.tile(16, 16, 16)
    h = _header(at.build(s, [A, B, C]).source)
    assert "schedule:  CacheRead(A, shared, A_shared); CacheRead(B, shared, B_shared); Tile(16, 16, 16, 16); " in h
    assert "           reordered: Tile(" in h


def test_generated_source_comments_mark_rewrite_sites() -> None:
    inputs, out = km.matmul_te("float16", False)
    src = at.build(Schedule.from_config(out, CFG), inputs + [out]).source
    assert "# pipeline: 3 shared-memory stages (async copies issued 2 chunk(s) ahead)" in src
    assert "prefetch prologue: sub-tile 0 of chunk 0" in src
    assert "(inner-pipeline fusion)" in src
    assert "async-copied (cp.async) by the pipeliner; its register sub-tiles load it below" in src


def test_kernel_names_are_stable_and_overridable() -> None:
    A, B, C = _mm(out_name="Gemm")
    k1 = at.build(Schedule.from_config(C, CFG), [A, B, C])
    k2 = at.build(Schedule.from_config(C, CFG), [A, B, C])
    assert "\ndef alcop_gemm(A, B, Gemm, M, K, N, stride_A_0, stride_B_0, stride_Gemm_0, BLOCK_M: tl.constexpr" in k1.source
    assert k1.source == k2.source  # deterministic: same schedule, same text
    named = at.build(Schedule.from_config(C, CFG), [A, B, C], name="my_gemm")
    assert "\ndef my_gemm(" in named.source and "generated kernel my_gemm" in named.source


@pytest.mark.interpreter
def test_kernel_files_are_content_addressed_in_the_cache_dir() -> None:
    A, B, C = _mm()
    k1 = at.build(Schedule.from_config(C, CFG), [A, B, C])
    a, b = torch.randn(17, 40), torch.randn(40, 9)
    k1(a, b)
    k2 = at.build(Schedule.from_config(C, CFG), [A, B, C])
    k2(a, b)
    p1, p2 = Path(k1.last.path), Path(k2.last.path)
    assert p1 == p2 and p1.name == "alcop_c.py" and p1.read_text() == k1.source
    assert str(p1).startswith(os.environ["ALCOP_CACHE_DIR"])  # tests never write the user's cache


@pytest.mark.parametrize("kw, bad", [
    (dict(a_name="acc"), "acc"),
    (dict(b_name="tl"), "tl"),
    (dict(out_name="pid"), "pid"),
    (dict(k_name="k0"), "k0"),
    (dict(axes=("offs_x", "j")), "offs_x"),
    (dict(axes=("tile_i", "j")), "tile_i"),
    (dict(axes=("i", "BLOCK_K")), "BLOCK_K"),
    (dict(axes=("k_p0", "j")), "k_p0"),   # sub-tile index names generated from the reduce axis k
    (dict(axes=("i", "k_1")), "k_1"),
    (dict(axes=("tile_id", "j")), "tile_id"),  # persistent kernels' tile loop
    (dict(axes=("i", "num_tiles")), "num_tiles"),
    (dict(out_name="num_pid_mn"), "num_pid_mn"),
])
def test_reserved_name_clash_raises_schedule_error(kw: dict, bad: str) -> None:
    with pytest.raises(ScheduleError, match=rf"name '{bad}'.*(is reserved|prefixes the generator uses)"):
        A, B, C = _mm(**kw)
        at.build(Schedule.from_config(C, CFG), [A, B, C])


def test_duplicate_names_raise_schedule_error() -> None:
    with pytest.raises(ScheduleError, match=r"both named 'M'"):
        _mm(axes=("M", "j"))  # an axis named like the size var M


@pytest.mark.interpreter
@pytest.mark.parametrize("cfg", [KernelConfig(16, 16, 16, smem_stages=2), CFG], ids=["one_level", "multi_level"])
def test_user_names_a_and_b_do_not_clash_with_tiles(cfg: KernelConfig, kit) -> None:
    # regression: operand tiles used to be plain `a`/`b`; an axis named b (bmm's batch axis) was
    # overwritten by the B tile inside the loop (garbage addresses)
    A, B, C = _mm(a_name="a", axes=("b", "j"), dtype="float32")
    k = at.build(Schedule.from_config(C, cfg), [A, B, C])
    g = torch.Generator().manual_seed(0)
    x, y = kit.rand((20, 40), "float32", g), kit.rand((40, 12), "float32", g)
    out = kit.poisoned((20, 12), "float32")
    k(x, y, out)
    kit.assert_close(out, x.double() @ y.double(), "float32", "names a/b")


def test_codegen_refuses_an_undecided_loop() -> None:
    A, B, C = _mm()
    kern = lower(Schedule.from_config(C, CFG), (A, B))  # no rewrite passes: the chunk loop is still 'serial'
    with pytest.raises(CodegenError, match="still 'serial'"):
        codegen.generate(kern, "h")
    assert issubclass(CodegenError, RuntimeError)


def test_signature_specialises_unit_strides_away() -> None:
    A, B, C = _mm()
    kern = lower(Schedule.from_config(C, CFG), (A, B), unit_stride={"A": 0, "B": None})
    assert codegen.signature(kern) == ["A", "B", "C", "M", "K", "N", "stride_A_1", "stride_B_0", "stride_B_1",
                                       "stride_C_0"]


@pytest.mark.parametrize("gpu, knob, dependent", [("H100", None, True), ("H100", "0", False), ("A100", None, False)])
def test_hopper_kernels_wait_for_the_previous_kernel_before_any_memory_access(
        gpu: str, knob: str | None, dependent: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA variant for a GPU with programmatic dependent launch calls ``gdc_wait()`` as its first statement
    (a program may start while the kernel before it still runs) and is launched with ``launch_pdl``; the CPU
    variant of the same build, a GPU without it and ``ALCOP_DEPENDENT_LAUNCH=0`` have neither."""
    if knob is None:
        monkeypatch.delenv("ALCOP_DEPENDENT_LAUNCH", raising=False)
    else:
        monkeypatch.setenv("ALCOP_DEPENDENT_LAUNCH", knob)
    inputs, out = km.matmul_te("float16", False)
    k = at.build(Schedule.from_config(out, KernelConfig(64, 64, 32, smem_stages=3)), inputs + [out], gpu=gpu)
    key = k._default_key()
    cuda, cpu = k._variant(key, "cuda"), k._variant(key, "cpu")
    assert cuda.dependent_launch is dependent and not cpu.dependent_launch
    assert ("launch_pdl" in cuda.options()) is dependent and "launch_pdl" not in cpu.options()
    assert cuda.options()["num_warps"] == 4 and cuda.options()["num_stages"] == cuda.num_stages
    body = cuda.source.split("def alcop_c(")[1].splitlines()[1:]
    code = [ln.strip() for ln in body if ln.strip() and not ln.strip().startswith("#")]
    assert (code[0] == "gdc_wait()") is dependent
    assert ("from triton.language.extra.cuda import gdc_wait" in cuda.source) is dependent
    assert ("DependentLaunch" in _header(cuda.source)) is dependent
    assert "gdc_wait" not in cpu.source
