"""End-to-end correctness in Triton's CPU interpreter against torch in float64.

Every run uses fresh random inputs and an output poisoned with NaN (passed explicitly), so an element
the kernel forgets to write fails. Tolerances are norm-wise relative errors: fp32 1e-5 (IEEE dots),
fp16/bf16 1e-2 (one rounding of the output plus 16-bit inputs).
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule, settings as alcop_settings, te
from alcop_triton.kernels import conv as kc
from alcop_triton.kernels import matmul as km

pytestmark = pytest.mark.interpreter  # every test here launches kernels on CPU tensors

DTYPES = ("float32", "float16", "bfloat16")
VARIANTS: dict[str, KernelConfig] = {
    "s1": KernelConfig(16, 16, 32, group_m=1, smem_stages=1),
    "s2": KernelConfig(16, 16, 32, group_m=2, smem_stages=2),
    "s4": KernelConfig(16, 16, 32, group_m=1, smem_stages=4),
    "full_s3_r2x2": KernelConfig(16, 16, 32, group_m=2, smem_stages=3, reg_stages=2, reg_split=2),
    "r3x4": KernelConfig(16, 16, 64, group_m=1, smem_stages=3, reg_stages=3, reg_split=4),
    "tma": KernelConfig(16, 16, 32, group_m=1, smem_stages=3, async_copy="tma"),
}
# odd shapes: all-ones, nothing a multiple of a tile, K not a multiple of the chunk (40 = 32 + 8)
SHAPES = [(1, 1, 1), (17, 33, 65), (33, 17, 40)]


def _operands(kit, m: int, n: int, k: int, dtype: str, layout: str, g: torch.Generator):
    """A (M x K) and B (K x N) stored as ``layout`` says: 'nn' row-major, 'tn'/'nt' transposed storage,
    'sliced' non-contiguous views (strided rows, column windows)."""
    if layout == "sliced":
        a = kit.rand((m, 2 * k), dtype, g)[:, 1::2]         # no unit-stride dim at all
        b = kit.rand((k + 3, n + 5), dtype, g)[2:2 + k, 3:3 + n]  # unit stride, padded rows
        return a, b
    a = kit.rand((k, m), dtype, g).t() if layout[0] == "t" else kit.rand((m, k), dtype, g)
    b = kit.rand((n, k), dtype, g).t() if layout[1] == "t" else kit.rand((k, n), dtype, g)
    return a, b


def _run_mm(kit, kern, m, n, k, dtype, layout, seed, batch: int | None = None) -> None:
    g = torch.Generator().manual_seed(seed)
    if batch is None:
        a, b = _operands(kit, m, n, k, dtype, layout, g)
        out = kit.poisoned((m, n), dtype)
    else:
        pairs = [_operands(kit, m, n, k, dtype, layout, g) for _ in range(batch)]
        a = torch.stack([p[0] for p in pairs]).transpose(1, 2).contiguous().transpose(1, 2) if layout[0] == "t" \
            else torch.stack([p[0] for p in pairs])
        b = torch.stack([p[1] for p in pairs])
        out = kit.poisoned((batch, m, n), dtype)
    got = kern(a, b, out)
    assert got is out  # the given output is filled in place and returned
    kit.assert_close(out, a.double() @ b.double(), dtype, f"{m}x{n}x{k} {layout} {dtype} seed={seed}")


# ----------------------------------------------------------------------------- matmul: variant x dtype

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matmul_variant_dtype(variant: str, dtype: str, kit) -> None:
    kern = kit.matmul(dtype, VARIANTS[variant])
    for m, n, k in SHAPES:
        _run_mm(kit, kern, m, n, k, dtype, "nn", kit.seed(variant, dtype, m, n, k))
    for layout in ("tn", "nt", "sliced"):
        _run_mm(kit, kern, 19, 21, 45, dtype, layout, kit.seed(variant, dtype, layout))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matmul_larger_odd_shape(variant: str, dtype: str, kit) -> None:
    kern = kit.matmul(dtype, VARIANTS[variant])
    _run_mm(kit, kern, 100, 80, 72, dtype, "nn", kit.seed(variant, dtype, "big"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_tma_path_is_exercised_on_aligned_shapes(dtype: str, kit) -> None:
    kern = kit.matmul(dtype, VARIANTS["tma"])
    _run_mm(kit, kern, 32, 48, 72, dtype, "nn", kit.seed("tma-aligned", dtype))  # 16-byte aligned rows
    assert "a_desc.load(" in kern.source and "b_desc.load(" in kern.source
    _run_mm(kit, kern, 32, 48, 72, dtype, "nt", kit.seed("tma-nt", dtype))     # B stored N x K
    # the descriptor is built over B's storage order (unit-stride dim last) and transposed in registers
    assert "a_desc.load(" in kern.source and "tl.trans(b_desc.load(" in kern.source


def test_one_kernel_serves_every_shape(kit) -> None:
    kern = kit.matmul("float32", VARIANTS["full_s3_r2x2"])
    for i, (m, n, k) in enumerate([(5, 7, 3), (40, 16, 64), (16, 40, 33)]):
        _run_mm(kit, kern, m, n, k, "float32", "nn", kit.seed("shapes", i))


def test_tf32_switch_selects_its_own_variant(kit) -> None:
    """Flipping the TF32 switch between calls compiles a variant for the new setting, never reuses the other one."""
    kern = kit.matmul("float32", VARIANTS["s2"])
    seen = {}
    for flag in (False, True, False):
        with alcop_settings.tf32(flag):
            _run_mm(kit, kern, 17, 19, 40, "float32", "nn", kit.seed("tf32", flag))
        seen.setdefault(flag, kern.last)
        assert kern.last is seen[flag]  # the same setting again: the variant compiled for it
    assert seen[False] is not seen[True]
    assert 'input_precision="ieee"' in seen[False].source and "tf32" not in seen[False].source
    assert 'input_precision="tf32"' in seen[True].source


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(0, 70), seed=st.integers(0, 2 ** 20))
def test_matmul_random_shapes(m: int, n: int, k: int, seed: int, kit) -> None:
    kern = kit.matmul("float32", KernelConfig(16, 16, 16, group_m=3, smem_stages=2, reg_stages=4, reg_split=1))
    g = torch.Generator().manual_seed(seed)
    a, b = kit.rand((m, k), "float32", g), kit.rand((k, n), "float32", g)
    out = kit.poisoned((m, n), "float32")
    kern(a, b, out)
    if k == 0:
        assert torch.equal(out, torch.zeros(m, n))  # an empty reduction is 0, not untouched NaN
    else:
        kit.assert_close(out, a.double() @ b.double(), "float32", f"{m}x{n}x{k}")


def test_empty_output_returns_without_launching(kit) -> None:
    kern = kit.matmul("float32", VARIANTS["s2"])
    out = kern(torch.randn(0, 5), torch.randn(5, 3))
    assert out.shape == (0, 3)


def test_output_is_allocated_when_not_given(kit) -> None:
    kern = kit.matmul("bfloat16", VARIANTS["full_s3_r2x2"])
    g = torch.Generator().manual_seed(kit.seed("alloc"))
    a, b = kit.rand((18, 40), "bfloat16", g), kit.rand((40, 20), "bfloat16", g)
    out = kern(a, b)
    assert out.dtype == torch.bfloat16 and out.shape == (18, 20) and out.is_contiguous()
    kit.assert_close(out, a.double() @ b.double(), "bfloat16", "allocated")


@pytest.mark.parametrize("which", ["transposed", "sliced"])
def test_non_contiguous_output(which: str, kit) -> None:
    kern = kit.matmul("float32", VARIANTS["full_s3_r2x2"])
    g = torch.Generator().manual_seed(kit.seed("outnc", which))
    a, b = kit.rand((19, 23), "float32", g), kit.rand((23, 21), "float32", g)
    out = kit.poisoned((21, 19), "float32").t() if which == "transposed" else \
        kit.poisoned((19, 30), "float32")[:, 4:25]
    kern(a, b, out)
    kit.assert_close(out, a.double() @ b.double(), "float32", which)


def test_sliced_output_leaves_neighbours_untouched(kit) -> None:
    kern = kit.matmul("float32", VARIANTS["s2"])
    full = kit.poisoned((19, 30), "float32")
    a, b = torch.randn(19, 23), torch.randn(23, 21)
    kern(a, b, full[:, 4:25])
    assert torch.isnan(full[:, :4]).all() and torch.isnan(full[:, 25:]).all()


def test_unrolled_reduction_is_correct(kit) -> None:
    inputs, out = km.matmul_te("float32", False)
    s = Schedule.from_config(out, VARIANTS["full_s3_r2x2"])
    s.unroll("k")
    kern = at.build(s, inputs + [out], static=("K",))  # static_range needs a compile-time trip count
    _run_mm(kit, kern, 17, 19, 70, "float32", "nn", kit.seed("unroll"))


# ----------------------------------------------------------------------------- bmm

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["s2", "full_s3_r2x2", "tma"])
def test_bmm(variant: str, dtype: str, kit) -> None:
    kern = kit.matmul(dtype, VARIANTS[variant], batched=True)
    _run_mm(kit, kern, 17, 20, 40, dtype, "nn", kit.seed("bmm", variant, dtype), batch=3)
    _run_mm(kit, kern, 16, 32, 64, dtype, "nt", kit.seed("bmm-nt", variant, dtype), batch=2)


# ----------------------------------------------------------------------------- epilogues and prologues

@pytest.mark.parametrize("ep", [
    km.Epilogue(bias=True, activation="relu"),
    km.Epilogue(activation="gelu", residual=True, alpha=0.5, beta=2.0),
    km.Epilogue(activation="tanh"),
    km.Epilogue(activation="silu", bias=True),
    km.Epilogue(activation="sigmoid", alpha=-1.5),
], ids=["bias_relu", "gelu_residual_alpha_beta", "tanh", "bias_silu", "sigmoid_alpha"])
def test_matmul_epilogues(ep: km.Epilogue, kit) -> None:
    kern = kit.matmul("float32", VARIANTS["full_s3_r2x2"], ep=ep)
    g = torch.Generator().manual_seed(kit.seed("ep", ep))
    a, b = kit.rand((17, 40), "float32", g), kit.rand((40, 19), "float32", g)
    bias, res = kit.rand((19,), "float32", g), kit.rand((17, 19), "float32", g)
    ref = ep.alpha * (a.double() @ b.double())
    if ep.bias:
        ref = ref + bias.double()
    if ep.activation:
        ref = {"relu": torch.relu, "gelu": F.gelu, "tanh": torch.tanh, "silu": F.silu,
               "sigmoid": torch.sigmoid}[ep.activation](ref)
    if ep.residual:
        ref = ref + ep.beta * res.double()
    args = [a, b] + ([bias] if ep.bias else []) + ([res] if ep.residual else [])
    out = kit.poisoned((17, 19), "float32")
    kern(*args, out)
    kit.assert_close(out, ref, "float32", repr(ep))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_prologue_is_fused_at_the_use(dtype: str, kit) -> None:
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    Ap = te.compute((M, K), lambda i, k: te.relu(A[i, k]) * 0.5, "Ap")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(Ap[i, k] * B[k, j], axis=k), "C")
    kern = at.build(Schedule.from_config(C, VARIANTS["full_s3_r2x2"]), [A, B, C])
    g = torch.Generator().manual_seed(kit.seed("prologue", dtype))
    a, b = kit.rand((20, 50), dtype, g), kit.rand((50, 24), dtype, g)
    out = kit.poisoned((20, 24), dtype)
    kern(a, b, out)
    kit.assert_close(out, (torch.relu(a.double()) * 0.5) @ b.double(), dtype, "prologue")


@pytest.mark.parametrize("variant", ["tma", "full_s3_r2x2"])
def test_nt_contraction_in_the_dsl_with_fp32_output(variant: str, kit) -> None:
    # the ALCOP suite's form C = A @ B^T written as sum(A[i, k] * B[j, k]); a TMA copy of B's (N, K)
    # tile is transposed in registers (tl.trans); fp16 inputs, fp32 output
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), "float16", "A")
    B = te.placeholder((N, K), "float16", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), "C", dtype="float32")
    kern = at.build(Schedule.from_config(C, VARIANTS[variant]), [A, B, C])
    g = torch.Generator().manual_seed(kit.seed("nt-dsl", variant))
    a, b = kit.rand((32, 64), "float16", g), kit.rand((48, 64), "float16", g)
    out = kit.poisoned((32, 48), "float32")
    kern(a, b, out)
    kit.assert_close(out, a.double() @ b.double().t(), "float32", "nt dsl")
    assert ("tl.trans(b_desc.load(" in kern.source) == (variant == "tma")


def test_mixed_operand_dtypes_dot_in_fp32(kit) -> None:
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), "float16", "A")
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    assert C.dtype == "float32"
    kern = at.build(Schedule.from_config(C, VARIANTS["s2"]), [A, B, C])
    g = torch.Generator().manual_seed(kit.seed("mixed"))
    a, b = kit.rand((17, 33), "float16", g), kit.rand((33, 18), "float32", g)
    out = kit.poisoned((17, 18), "float32")
    kern(a, b, out)
    kit.assert_close(out, a.double() @ b.double(), "float32", "mixed")


# ----------------------------------------------------------------------------- convolution

CONV_CASES = {
    # name: (x shape, w shape, stride, pad, dilation, groups, channels_last, bias, activation)
    "nhwc_bias_relu": ((2, 8, 7, 9), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, True, "relu"),
    "nchw": ((2, 6, 7, 6), (5, 6, 3, 3), (1, 1), (1, 1), (1, 1), 1, False, False, None),
    "strided_dilated_grouped": ((2, 6, 11, 10), (12, 3, 3, 2), (2, 1), (1, 0), (1, 2), 2, False, True, None),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d(case: str, dtype: str, kit) -> None:
    xs, ws, stride, pad, dil, groups, cl, has_bias, act = CONV_CASES[case]
    g = torch.Generator().manual_seed(kit.seed("conv", case, dtype))
    x, w = kit.rand(xs, dtype, g), kit.rand(ws, dtype, g)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    bias = kit.rand((ws[0],), dtype, g) if has_bias else None
    ref = F.conv2d(x.double(), w.double(), bias.double() if bias is not None else None, stride, pad, dil, groups)
    if act:
        ref = getattr(F, act)(ref)
    cfg = KernelConfig(16, 16, 16, group_m=1, smem_stages=2)
    y = kc.conv(x, w, bias, stride, pad, pad, dil, groups, activation=act, config=cfg)
    kit.assert_close(y, ref, dtype, case)
    if cl:
        assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("nd", [1, 3])
def test_conv1d_conv3d_multilevel(nd: int, kit) -> None:
    g = torch.Generator().manual_seed(kit.seed("convnd", nd))
    xs, ws = ((2, 8, 13), (6, 8, 3)) if nd == 1 else ((1, 4, 5, 6, 5), (6, 4, 2, 3, 2))
    x, w = kit.rand(xs, "float32", g), kit.rand(ws, "float32", g)
    one = (1,) * nd
    y = kc.conv(x, w, None, (2,) * nd, one, one, one, 1, config=VARIANTS["full_s3_r2x2"])
    ref = getattr(F, f"conv{nd}d")(x.double(), w.double(), None, 2, 1)
    kit.assert_close(y, ref, "float32", f"conv{nd}d")


# ----------------------------------------------------------------------------- the README example

README_EXAMPLE = textwrap.dedent('''\
    import torch, alcop_triton as at
    from alcop_triton import te
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A, B = te.placeholder((M, K), "float32", "A"), te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    Y = te.compute((M, N), lambda i, j: te.relu(C[i, j]), "Y")          # fused epilogue
    s = at.Schedule.from_config(Y, at.KernelConfig(16, 16, 32, smem_stages=3, reg_stages=2, reg_split=2))
    kernel = at.build(s, [A, B, Y])
    a, b = torch.randn(40, 70), torch.randn(70, 24)
    y = kernel(a, b)
    print(kernel.source)
''')


def test_readme_example_matmul_relu_in_under_15_lines(capsys: pytest.CaptureFixture[str], kit) -> None:
    assert len(README_EXAMPLE.strip().splitlines()) < 15
    ns: dict = {}
    exec(compile(README_EXAMPLE, "README.md", "exec"), ns)  # noqa: S102 - the documented user code, verbatim
    printed = capsys.readouterr().out
    kit.assert_close(ns["y"], torch.relu(ns["a"].double() @ ns["b"].double()), "float32", "README")
    assert "\ndef alcop_y(A, B, Y, M, K, N," in printed
    assert "out = tl.maximum(acc, 0.0)" in printed  # the ReLU is fused into the store
    assert "num_stages=3" in printed and "tile_a_p0" in printed
