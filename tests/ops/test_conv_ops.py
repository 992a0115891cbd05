"""conv1d / conv2d / conv3d drop-ins against torch: stride, padding, dilation, groups, layouts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DTYPES, assert_close, f64, randn, with_layout
from hypothesis import given, settings
from hypothesis import strategies as st

from alcop_triton import ops

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)

CONV = {1: (ops.conv1d, F.conv1d), 2: (ops.conv2d, F.conv2d), 3: (ops.conv3d, F.conv3d)}


def _run(nd: int, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, dtype: torch.dtype,
         activation: str | None = None, **kw: object) -> torch.Tensor:
    ours, theirs = CONV[nd]
    got = ours(x, w, b, activation=activation, **kw)
    want = theirs(*f64(x, w, b), **kw)
    if activation:
        want = {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu}[activation](want)
    assert got.dtype == dtype
    assert_close(got, want, dtype)
    return got


# (nd, N, C, CO, spatial, kernel, stride, padding, dilation, groups)
COMBOS = [
    (2, 2, 4, 6, 9, 3, 1, 1, 1, 1),
    (2, 1, 4, 8, 10, 3, 2, 1, 1, 1),          # strided
    (2, 2, 6, 6, 9, 3, 1, 2, 2, 1),           # dilated
    (2, 1, 6, 9, 8, 3, 1, 1, 1, 3),           # grouped
    (2, 2, 8, 8, 7, 3, 1, 1, 1, 8),           # depthwise
    (2, 1, 4, 4, 11, 5, 3, 2, 1, 2),          # stride 3, groups 2
    (2, 1, 3, 5, 8, 1, 2, 0, 1, 1),           # 1x1, strided
    (2, 2, 4, 6, 7, 4, 1, "same", 1, 1),      # even kernel: asymmetric 'same'
    (2, 1, 4, 6, 9, 3, 1, "same", 2, 2),
    (2, 1, 4, 6, 9, 3, 2, "valid", 1, 1),
    (1, 2, 3, 5, 17, 4, 2, 1, 1, 1),
    (1, 2, 4, 4, 13, 3, 1, "same", 3, 4),     # conv1d depthwise, dilated 'same'
    (3, 1, 2, 4, 6, 3, 1, 1, 1, 1),
    (3, 1, 4, 4, 7, 2, 2, 0, 1, 2),
]


@pytest.mark.parametrize("nd,n,c,co,s,k,stride,padding,dilation,groups", COMBOS)
def test_conv_combos(nd: int, n: int, c: int, co: int, s: int, k: int, stride: int, padding: object,
                     dilation: int, groups: int) -> None:
    x = randn(n, c, *[s] * nd, seed=1)
    w = randn(co, c // groups, *[k] * nd, seed=2)
    b = randn(co, seed=3)
    _run(nd, x, w, b, torch.float32, stride=stride, padding=padding, dilation=dilation, groups=groups)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_conv2d_layouts_and_dtypes(dtype: torch.dtype, layout: str) -> None:
    x = with_layout(randn(2, 8, 9, 9, dtype=dtype, seed=4), layout)
    w = randn(6, 4, 3, 3, dtype=dtype, seed=5)
    b = randn(6, dtype=dtype, seed=6)
    y = _run(2, x, w, b, dtype, activation="relu", stride=2, padding=1, groups=2)
    # channels_last in, channels_last out (as torch), so the next layer stays NHWC
    assert y.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")


def test_conv3d_channels_last_and_unbatched() -> None:
    x = with_layout(randn(1, 4, 5, 6, 5, seed=7), "channels_last")
    _run(3, x, randn(4, 4, 3, 3, 3, seed=8), None, torch.float32, activation="silu", padding=1)
    _run(2, randn(3, 7, 7, seed=9), randn(5, 3, 3, 3, seed=10), randn(5, seed=11), torch.float32)  # (C, H, W)
    _run(1, randn(3, 12, seed=12), randn(2, 3, 5, seed=13), None, torch.float32, padding="same")   # (C, L)


def test_conv_strided_input_view() -> None:
    # any strides: a slice of a larger tensor (no unit-stride dim along W) runs as is
    x = randn(2, 4, 10, 20, seed=14)[:, :, :, ::2]
    _run(2, x, randn(3, 4, 3, 3, seed=15), None, torch.float32, padding=1)


def _refused(what: str) -> object:
    def build(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the {what} kernel was built")
    return build


@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pointwise_channels_last_conv_runs_as_a_gemm(nd: int, dtype: torch.dtype,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # a 1x1 stride-1 channels-last convolution is (N*H*W, C) @ (C, C_out) on the same memory: the GEMM
    # kernel computes it (the implicit-GEMM kernel is not built), bias and activation fused as for linear
    from alcop_triton.kernels import conv as kc
    from alcop_triton.kernels import matmul as km
    fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
    x = with_layout(randn(2, 12, *[5] * nd, dtype=dtype, seed=30), "channels_last")
    w = randn(10, 12, *[1] * nd, dtype=dtype, seed=31)
    if not (F.conv2d if nd == 2 else F.conv3d)(x, w).is_contiguous(memory_format=fmt):
        pytest.skip("torch's output is contiguous here (its CPU kernel for float16 3-D): alcop's follows, "
                    "so no GEMM views it")
    built: list[str] = []
    monkeypatch.setattr(kc, "compiled", _refused("implicit-GEMM conv"))
    real = km.compiled

    def gemm(*a: object, **k: object) -> object:
        built.append("gemm")
        return real(*a, **k)  # type: ignore[arg-type]
    monkeypatch.setattr(km, "compiled", gemm)
    y = _run(nd, x, w, randn(10, dtype=dtype, seed=32), dtype, activation="relu")
    assert built == ["gemm"] and y.is_contiguous(memory_format=fmt)


@pytest.mark.parametrize("layout,kw", [("contiguous", {}), ("channels_last", {"stride": 2}),
                                       ("channels_last", {"padding": 1}), ("channels_last", {"groups": 2})],
                         ids=["nchw", "strided", "padded", "grouped"])
def test_other_pointwise_convs_keep_the_conv_kernel(layout: str, kw: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from alcop_triton.kernels import matmul as km
    monkeypatch.setattr(km, "compiled", _refused("GEMM"))
    x = with_layout(randn(2, 8, 6, 6, seed=33), layout)
    _run(2, x, randn(6, 8 // kw.get("groups", 1), 1, 1, seed=34), None, torch.float32, **kw)


def test_pointwise_conv_workloads_key_as_the_gemm_they_run() -> None:
    from alcop_triton import Workload
    from alcop_triton.kernels import conv as kc
    from alcop_triton.kernels import matmul as km
    x = torch.randn(2, 12, 5, 7).to(memory_format=torch.channels_last)
    w = torch.randn(10, 12, 1, 1)
    a, b, c = kc.pointwise_gemm(x, w, torch.empty(2, 10, 5, 7).to(memory_format=torch.channels_last), (1, 1),
                                (0, 0), (0, 0), 1)
    conv = kc.workload_of(x, w, (1, 1), (0, 0), (1, 1), 1)
    assert kc.gemm_workload(conv) == km.workload_of(a, b) == Workload("matmul", (70, 10, 12), "float32", "nt")
    assert kc.gemm_workload(kc.workload_of(x, torch.randn(10, 12, 3, 3), (1, 1), (1, 1), (1, 1), 1)).op == "conv2d"


@st.composite
def conv_case(draw: st.DrawFn) -> dict:
    nd = draw(st.sampled_from([1, 2, 2, 3]))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, co = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    dilation = draw(st.integers(1, 2))
    stride = draw(st.integers(1, 3))
    same = stride == 1 and draw(st.booleans())
    padding: object = "same" if same else draw(st.integers(0, 2))
    span = dilation * (k - 1) + 1
    smallest = max(span - (0 if same else 2 * int(padding)), 1)  # type: ignore[call-overload]
    s = draw(st.integers(smallest, {1: 24, 2: 9, 3: 5}[nd]))
    n = draw(st.integers(1, 2))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 1000))
    layout = draw(st.sampled_from(["contiguous", "channels_last"])) if nd > 1 else "contiguous"
    return dict(nd=nd, x=with_layout(randn(n, c, *[s] * nd, dtype=dtype, seed=seed), layout),
                w=randn(co, c // groups, *[k] * nd, dtype=dtype, seed=seed + 1),
                b=randn(co, dtype=dtype, seed=seed + 2) if draw(st.booleans()) else None,
                dtype=dtype, kw=dict(stride=stride, padding=padding, dilation=dilation, groups=groups))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(conv_case())
def test_conv_fuzzed(c: dict) -> None:
    _run(c["nd"], c["x"], c["w"], c["b"], c["dtype"], **c["kw"])


# (nd, N, C, CO, spatial (H, W or D, H, W), kernel, padding, dilation, groups, bias+relu)
TMA_WINDOWS = [
    (2, 2, 16, 16, (9, 11), 3, 1, 1, 1, False),   # odd sizes: boxes cross the right and bottom edges
    (2, 1, 32, 24, (7, 13), 3, 2, 2, 1, True),    # dilated window, padding 2, bias + relu epilogue
    (2, 2, 32, 32, (6, 5), 3, 1, 1, 2, False),    # groups: a group's channels are one run of the box
    (2, 1, 16, 16, (5, 6), 4, "same", 1, 1, False),  # even window: asymmetric 'same' padding
    # a batch of 2: torch's CPU kernel for one small 3-D sample is not oneDNN's, and its output (which
    # alcop's follows) is contiguous, not channels-last
    (3, 2, 16, 16, (3, 5, 6), 3, 1, 1, 1, False),
]


@pytest.mark.parametrize("nd,n,c,co,spatial,k,padding,dilation,groups,epilogue", TMA_WINDOWS)
def test_tma_window_convs_match_torch(nd: int, n: int, c: int, co: int, spatial: tuple[int, ...], k: int,
                                      padding: object, dilation: int, groups: int, epilogue: bool) -> None:
    import alcop_triton as at
    from alcop_triton.kernels import conv as kc
    # TMA boxes of the input (the M tile a box of output positions, the padding TMA's zero fill), read in
    # channel chunks of 16; the interpreter runs the descriptor copies, negative coordinates included
    cfg = at.KernelConfig(block_m=16, block_n=16, block_k=16, group_m=1, smem_stages=2, async_copy="tma")
    x = with_layout(randn(n, c, *spatial, seed=40), "channels_last")
    w = with_layout(randn(co, c // groups, *[k] * nd, seed=41), "channels_last")
    b = randn(co, seed=42) if epilogue else None
    with at.use_config(cfg):
        _run(nd, x, w, b, torch.float32, "relu" if epilogue else None, padding=padding, dilation=dilation,
             groups=groups)
    p = kc.ConvParams(nd, (1,) * nd, *_pads(nd, k, padding, dilation), (dilation,) * nd, groups, True,
                      epilogue, "relu" if epilogue else None)
    src = kc.compiled("float32", p, cfg).source
    assert "a_desc.load" in src and "b_desc" not in src and "box of n," in src  # weights by pointers


def _pads(nd: int, k: int, padding: object, dilation: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pad_left, pad_right) as the drop-ins resolve ``padding``."""
    if padding == "same":
        total = dilation * (k - 1)
        return (total // 2,) * nd, (total - total // 2,) * nd
    assert isinstance(padding, int)
    return (padding,) * nd, (padding,) * nd


def test_tma_on_a_strided_conv_copies_with_pointers_and_says_why() -> None:
    import alcop_triton as at
    from alcop_triton.kernels import conv as kc
    cfg = at.KernelConfig(block_m=16, block_n=16, block_k=16, group_m=1, smem_stages=2, async_copy="tma")
    x = with_layout(randn(1, 16, 9, 9, seed=43), "channels_last")
    w = with_layout(randn(16, 16, 3, 3, seed=44), "channels_last")
    with at.use_config(cfg):
        _run(2, x, w, None, torch.float32, stride=2, padding=1)
    p = kc.ConvParams(2, (2, 2), (1, 1), (1, 1), (1, 1), 1, True)
    text = kc.compiled("float32", p, cfg).explain()
    assert "a box needs 'ow' once, with step 1 (a stride-1 window)" in text
