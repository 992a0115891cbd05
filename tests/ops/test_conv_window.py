"""The box kernel's config, its rules and its CPU route (``kernels/conv_window.py``, ``async_copy="box"``).

The kernel itself (Gluon: TMA, mbarriers, wgmma) runs on sm90 only (``tests/gpu/test_conv_window_gpu.py``);
elsewhere a box config runs as its ``"tma"`` twin of the implicit-GEMM kernel, checked here in Triton's
interpreter on odd sizes.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import alcop_triton as at
from alcop_triton import KernelConfig, Workload
from alcop_triton.autotune.space import shape_reason
from alcop_triton.errors import ScheduleError
from alcop_triton.kernels import conv as kconv
from alcop_triton.kernels.conv_window import WindowConv, boxes, config_reason, why_not, window_configs
from alcop_triton.model.hardware import get_spec

BOX = KernelConfig(64, 64, 16, group_m=8, num_warps=4, smem_stages=3, async_copy="box")
SPEC = get_spec("H100")


def _params(nd: int = 2, **kw) -> kconv.ConvParams:
    base = dict(nd=nd, stride=(1,) * nd, pad_left=(1,) * nd, pad_right=(1,) * nd, dilation=(1,) * nd, groups=1,
                channels_last=True)
    return kconv.ConvParams(**(base | kw))


def test_config_names_and_round_trips() -> None:
    assert str(BOX).endswith("_box") and BOX.to_dict()["ASYNC_COPY"] == "box"
    assert KernelConfig.from_dict(BOX.to_dict()) == BOX


def test_a_schedule_does_not_copy_by_box() -> None:
    a = at.te.placeholder((at.te.var("M"), at.te.var("K")), "float16", "A")
    b = at.te.placeholder((at.te.var("K"), at.te.var("N")), "float16", "B")
    k = at.te.reduce_axis(a.shape[1], "k")
    c = at.te.compute((a.shape[0], b.shape[1]), lambda i, j: at.te.sum(a[i, k] * b[k, j], axis=k), "C")
    with pytest.raises(ScheduleError, match="kernels/conv_window.py"):
        at.Schedule(c).async_copy("box")


@pytest.mark.parametrize("nd,spatial,bias", [(2, (9, 11), True), (3, (3, 5, 6), False)])
def test_on_cpu_a_box_config_runs_its_tma_twin(nd: int, spatial: tuple[int, ...], bias: bool, kit) -> None:
    g = torch.Generator().manual_seed(nd)
    fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
    x = kit.rand((2, 32, *spatial), "float16", g).contiguous(memory_format=fmt)
    w = (kit.rand((24, 32, *(3,) * nd), "float16", g) / 17).contiguous(memory_format=fmt)
    b = kit.rand((24,), "float16", g) if bias else None
    kern = kconv.compiled("float16", _params(nd, bias=bias), BOX)
    assert isinstance(kern, WindowConv)
    out = kconv.empty_output(x, (2, 24, *spatial))
    out.fill_(float("nan"))
    launch, _ = kern.bind(*[t for t in (x, w, b) if t is not None], out.unflatten(1, (1, 24)))
    assert launch.jit is not kern.fn
    launch()
    f = F.conv2d if nd == 2 else F.conv3d
    kit.assert_close(out, f(x.double(), w.double(), None if b is None else b.double(), padding=1), "float16")


@pytest.mark.parametrize("change,match", [
    (dict(dilation=(1, 2)), "dilation"), (dict(groups=2), "groups"),
    (dict(channels_last=False), "channels-last"), (dict(activation="relu"), "bias only")])
def test_why_not_names_the_convolutions_it_cannot_run(change: dict, match: str) -> None:
    assert why_not(_params(), "float16", 64, 64, BOX, (3, 3)) is None
    assert match in why_not(_params(**change), "float16", 64, 64, BOX, (3, 3))


def test_a_strided_pointwise_convolution_runs_on_its_strided_view() -> None:
    strided = _params(stride=(2, 2), pad_left=(0, 0), pad_right=(0, 0))
    assert why_not(strided, "float16", 64, 64, BOX, (1, 1)) is None
    assert why_not(_params(stride=(2, 2)), "float16", 64, 64, BOX, (3, 3)) is None  # the phase view
    assert "stride" in why_not(_params(3, stride=(2, 2, 2)), "float16", 64, 64, BOX, (3, 3, 3))
    down = Workload("conv2d", (8, 28, 28, 256, 512, 1, 1, 2, 0), "float16", "nhwc")
    assert all(shape_reason(down, c, SPEC) is None for c in window_configs(down))


@pytest.mark.parametrize("dtype,channels,config,match", [
    ("float32", 64, BOX, "wgmma"), ("float16", 40, BOX.replace(block_k=32), "whole channels"),
    ("float16", 64, BOX.replace(block_m=128), "warpgroup"), ("float16", 64, BOX.replace(smem_stages=1), "ring"),
    ("float16", 64, BOX.replace(reg_stages=2), "ring")])
def test_why_not_names_the_configs_it_cannot_run(dtype: str, channels: int, config: KernelConfig, match: str) -> None:
    assert match in why_not(_params(), dtype, channels, 64, config, (3, 3))


def test_space_rules_agree_with_why_not() -> None:
    conv = Workload("conv2d", (8, 28, 28, 64, 128, 3, 3, 1, 1), "float16", "nhwc")
    for c in window_configs(conv):
        assert shape_reason(conv, c, SPEC) is None and config_reason(conv, c) is None
    # a strided 3x3 conv2d on its phase view where the stride divides H and W; not a conv3d's
    for shape, runs in (((8, 28, 28, 64, 128, 3, 3, 2, 1), True), ((8, 27, 28, 64, 128, 3, 3, 2, 1), False)):
        strided = Workload("conv2d", shape, "float16", "nhwc")
        assert all((shape_reason(strided, c, SPEC) is None) == runs for c in window_configs(strided))
    conv3d = Workload("conv3d", (2, 8, 8, 8, 64, 64, 3, 3, 3, 2, 1), "float16", "nhwc")
    assert all(shape_reason(conv3d, c, SPEC) and config_reason(conv3d, c) for c in window_configs(conv3d))
    assert shape_reason(conv, BOX, get_spec("A100")) is not None  # TMA: sm90
    for ci in (3, 40):  # no whole chunk of 16 or more channels: ResNet's stem, odd channel counts
        assert window_configs(Workload("conv2d", (8, 28, 28, ci, 64, 3, 3, 1, 1), "float16", "nhwc")) == []
    assert {c.block_k for c in window_configs(Workload("conv2d", (8, 28, 28, 96, 64, 3, 3, 1, 1), "float16",
                                                       "nhwc"))} == {32}
    gemm = Workload("matmul", (512, 512, 512), "float16", "nn")
    assert window_configs(gemm) == [] and shape_reason(gemm, BOX, SPEC) is not None


@pytest.mark.parametrize("n,d,h,w,block_m", [(64, 1, 56, 56, 128), (64, 1, 7, 7, 128), (3, 1, 13, 29, 64),
                                             (1, 1, 1, 200, 64), (64, 28, 14, 14, 128), (2, 5, 6, 7, 64)])
def test_boxes_cover_the_tile_least_padded_first(n: int, d: int, h: int, w: int, block_m: int) -> None:
    found = boxes(n, d, h, w, block_m)
    assert found and all(math.prod(b) == block_m and all(s & (s - 1) == 0 and s <= 256 for s in b) for b in found)

    def rows(box: tuple[int, int, int, int]) -> int:
        return math.prod(-(-e // s) * s for e, s in zip((n, d, h, w), box))
    assert rows(found[0]) == min(rows(b) for b in found)
    assert [b[3] for b in found if rows(b) == rows(found[0])][0] == max(b[3] for b in found if rows(b) == rows(found[0]))


def test_boxes_span_images_and_depth_to_leave_no_padding() -> None:
    # 56 x 56 planes: a one-plane box of 128 positions pads 12.5% (2 x 64 or 16 x 8); two images' 8 x 8 corners
    # none. A conv3d's 14 x 14 planes: boxes over 8 images, 4 planes deep, 2 x 2.
    assert boxes(64, 1, 56, 56, 128)[0] == (2, 1, 8, 8)
    assert boxes(64, 112, 56, 56, 128)[0] == (1, 2, 8, 8)
    assert boxes(64, 28, 14, 14, 128)[0] == (8, 4, 2, 2)


def test_a_box_that_is_not_the_tile_is_refused() -> None:
    x = torch.zeros(2, 64, 8, 8, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = torch.zeros(64, 64, 3, 3, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    y = torch.zeros(2, 1, 64, 8, 8, dtype=torch.float16)
    for box in ((1, 1, 8, 4), (1, 2, 4, 8)):  # 32 positions for a 64-row tile; a depth in 2-d
        with pytest.raises(ScheduleError, match="output positions"):
            WindowConv("float16", _params(), BOX, box).plan((x, w, y))


def test_a_one_element_dims_stride_does_not_change_the_kernel(kit) -> None:
    # A 1x1 weight made channels-last on the GPU has stride 1 in its window dims, on the CPU C: both launch
    # with the same scalars (Triton specialises integer arguments on their divisibility by 16, and a stride
    # of 1 there cost the address math its divisibility: slower loads), and compute the same.
    g = torch.Generator().manual_seed(11)
    x = kit.rand((2, 32, 6, 6), "float16", g).contiguous(memory_format=torch.channels_last)
    w = kit.rand((48, 32, 1, 1), "float16", g).contiguous(memory_format=torch.channels_last)
    p = kconv.ConvParams(2, (2, 2), (0, 0), (0, 0), (1, 1), 1, True)
    kern = kconv.compiled("float16", p, KernelConfig(32, 32, 32, group_m=8, num_warps=4, smem_stages=2))
    runs = []
    for window_strides in ((32, 32), (1, 1)):
        weight = w.as_strided(w.shape, (32, 1, *window_strides))
        out = kconv.empty_output(x, (2, 48, 3, 3))
        launch, _ = kern.bind(x, weight, out.unflatten(1, (1, 48)))
        launch()
        runs.append((launch.args[launch.n_tensors:], out))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
    kit.assert_close(runs[0][1], F.conv2d(x.double(), w.double(), stride=2), "float16")


COMPILE_CASES = [  # (nd, spatial, window, stride, pad, dtype, bias, config, box or None for ``boxes``' pick)
    (2, (13, 29), 3, 1, 1, "float16", True, KernelConfig(128, 256, 64, group_m=8, num_warps=8, smem_stages=3,
                                                         async_copy="box"), None),
    (2, (14, 18), 3, 2, 1, "bfloat16", False, BOX.replace(block_k=32), None),
    (2, (15, 13), 1, 2, 0, "float16", False, BOX.replace(block_k=64, smem_stages=2), None),
    (3, (5, 6, 7), 3, 1, 1, "float16", True, KernelConfig(128, 64, 32, group_m=8, num_warps=8, smem_stages=4,
                                                          async_copy="box"), None),
    (3, (5, 6, 7), 3, 1, 1, "bfloat16", False, BOX, (2, 4, 2, 4))]


def compile_case(nd: int, spatial: tuple[int, ...], window: int, stride: int, pad: int, dtype: str, bias: bool,
                 config: KernelConfig, box: tuple[int, int, int, int] | None) -> tuple[bool, bool, int]:
    """The launch the host side plans for such tensors, compiled by Triton for an H100 (sm90) without a GPU:
    (its PTX has wgmma, its PTX has TMA copies, its shared memory in bytes)."""
    from tests.conftest import Kit
    dt = getattr(torch, dtype)
    fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
    x = torch.zeros(2, 64, *spatial, dtype=dt).contiguous(memory_format=fmt)
    w = torch.zeros(256, 64, *(window,) * nd, dtype=dt).contiguous(memory_format=fmt)
    out = [(s + 2 * pad - window) // stride + 1 for s in spatial]
    y = torch.zeros(2, 256, *out, dtype=dt).contiguous(memory_format=fmt).unflatten(1, (1, 256))
    p = kconv.ConvParams(nd, (stride,) * nd, (pad,) * nd, (pad,) * nd, (1,) * nd, 1, True, bias)
    kern = WindowConv(dtype, p, config, box)
    planned = kern.plan([t for t in (x, w, torch.zeros(256, dtype=dt) if bias else None, y) if t is not None])
    assert planned is not None
    _, args, kwargs, _ = planned
    return Kit.compile_sm90(kern.fn, args, kwargs)


def test_the_box_kernel_compiles_for_sm90(kit) -> None:
    # No GPU here: the kernels these launches would run, compiled for an H100, must come out as TMA copies
    # feeding wgmma, within the 227 KB of shared memory a program may have.
    found = kit.apart("tests.ops.test_conv_window", "[t.compile_case(*c) for c in t.COMPILE_CASES]")
    for case, (wgmma, tma, shared) in zip(COMPILE_CASES, found):
        assert wgmma and tma and shared <= 232448, (case, wgmma, tma, shared)
