"""The weight gradient on TMA boxes, host side (``kernels/conv_window_grad.py``): its rules, its tiles and
its launch plan, and its kernel compiled for sm90 without a GPU. The kernel's values are checked on an
sm90 GPU (``tests/gpu/test_conv_window_grad_gpu.py``); elsewhere the backward takes the other routes,
which ``tests/ops/test_autograd.py`` checks in Triton's interpreter.
"""

from __future__ import annotations

import pytest
import torch

from alcop_triton.kernels import conv_window_grad as g

SMS = 132


def _tensors(nd: int, n: int, c: int, co: int, sp: tuple[int, ...], k: int, stride: int, pad: int,
             dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
    x = torch.zeros(n, c, *sp, dtype=dtype).contiguous(memory_format=fmt)
    w = torch.zeros(co, c, *(k,) * nd, dtype=dtype).contiguous(memory_format=fmt)
    out = [(s + 2 * pad - k) // stride + 1 for s in sp]
    return x, w, torch.zeros(n, co, *out, dtype=dtype).contiguous(memory_format=fmt)


def test_on_the_cpu_the_backward_takes_another_route() -> None:
    x, w, dy = _tensors(2, 2, 32, 16, (9, 9), 3, 1, 1)
    assert "sm90" in g.why_not(x, w, dy, [1, 1], [1, 1], [1, 1], 1)
    assert g.weight_grad_by_boxes(x, w, dy, [1, 1], [1, 1], [1, 1], 1) is None


@pytest.mark.parametrize("co,c,taps,chunks", [(64, 64, 9, 3136), (512, 512, 9, 49), (24, 48, 25, 3),
                                              (256, 256, 27, 5488)])
def test_tiles_fill_the_gpu_without_starving_a_slice(co: int, c: int, taps: int, chunks: int) -> None:
    bm, bn, stages, split = g.tile(co, c, taps, chunks, SMS)
    assert bm in (64, 128) and c % bn == 0 and 2 <= stages <= 4
    assert stages * g.POSITIONS * (bm + bn) * 2 <= g.SMEM_BYTES
    assert split & (split - 1) == 0 and (split == 1 or chunks // split >= g.MIN_CHUNKS)


def test_small_layers_take_few_slices_and_large_ones_many() -> None:
    # Adding the slices costs their partials' bytes; more programs fill the last wave: a 14 x 14, 256-channel
    # layer's 36 tiles ran fastest in 8 slices on the H100, a 28 x 28, 512-channel layer's 144 tiles in 8.
    assert g.tile(256, 256, 9, 196, SMS)[3] <= 8
    assert g.tile(512, 512, 9, 784, SMS)[3] >= 4
    assert g.tile(512, 512, 9, 49, SMS)[3] == 1


def test_the_plan_of_a_strided_layer_reads_the_phase_view() -> None:
    x, w, dy = _tensors(2, 64, 256, 512, (28, 28), 3, 2, 1)
    tensors, grid, tail, kwargs, descriptors, split = g.plan(x, w, dy, [2, 2], [1, 1], SMS)
    xv, dyc, ws = tensors
    assert xv.shape == (64, 14, 2, 14, 512) and xv.data_ptr() == x.data_ptr()
    assert (kwargs["SH"], kwargs["SW"]) == (2, 2) and kwargs["BI"] * kwargs["BH"] * kwargs["BW"] == g.POSITIONS
    assert ws.shape == (split, 512, 9, 256) and ws.dtype == (torch.float32 if split > 1 else x.dtype)
    co, chunks, per_split = tail[:3]
    assert co == 512 and chunks == 14 * 14 * 64 // g.POSITIONS and -(-chunks // per_split) == split
    bm, bn = descriptors[1][2][-1], descriptors[0][2][-1]
    assert grid == (split * 9 * (512 // bm) * (256 // bn), )


def test_one_slice_stores_the_gradient_itself_several_their_float32_sums() -> None:
    for sp, split in (((56, 56), 32), ((7, 7), 1)):
        x, w, dy = _tensors(2, 64, 256, 256, sp, 3, 1, 1, torch.bfloat16)
        ws = g.plan(x, w, dy, [1, 1], [1, 1], SMS, (128, 256, 2, split))[0][2]
        assert ws.shape[0] == split and ws.dtype == (torch.float32 if split > 1 else torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_slices_are_added_in_order_into_the_gradients_dtype(dtype: torch.dtype) -> None:
    # Triton's interpreter runs ``sum_slices``: the float32 sum slice after slice, the same bits as adding
    # them one by one, then one rounding into the gradient's dtype (no element past the end is written).
    g_ = torch.Generator().manual_seed(7)
    ws = torch.randn(13, 24, 9, 19, generator=g_) * torch.logspace(-3, 3, 19)   # two rounds of eight loads
    out = torch.full((24 * 9 * 19 + 3, ), float("nan"), dtype=dtype)
    n = ws[0].numel()
    g.SUM_KERNEL[(-(-n // g.SUM_BLOCK), )](ws, out, n, 13, BLOCK=g.SUM_BLOCK)
    acc = ws[0].clone()
    for s in range(1, 13):
        acc += ws[s]
    assert out[n:].isnan().all()
    if dtype == torch.float16:
        assert torch.equal(out[:n], acc.flatten().to(dtype))
    else:   # the interpreter's bfloat16 conversion truncates where the GPU's rounds to nearest: one unit apart
        ulp = 2.0 ** (torch.frexp(acc.flatten())[1] - 8).float()
        assert ((out[:n].float() - acc.flatten()).abs() <= ulp).all()


def test_the_plan_of_a_conv3d_spans_planes() -> None:
    x, w, dy = _tensors(3, 2, 32, 16, (4, 8, 8), 3, 1, 1)
    _, _, tail, kwargs, descriptors, _ = g.plan(x, w, dy, [1, 1, 1], [1, 1, 1], SMS)
    assert (kwargs["BI"], kwargs["BD"], kwargs["BH"], kwargs["BW"]) == (1, 1, 8, 8)
    assert descriptors[0][2] == (1, 1, 8, 8, 32) and descriptors[1][2] == (1, 1, 8, 8, 64)
    with pytest.raises(ValueError, match="BN must divide"):
        g.plan(x, w, dy, [1, 1, 1], [1, 1, 1], SMS, (64, 64, 2, 1))


def test_rules_name_what_the_kernel_cannot_run() -> None:
    x, w, dy = _tensors(3, 2, 32, 16, (5, 6, 7), 3, 2, 1)
    assert "stride" in g._view_reason(x, w, dy, [2, 2, 2], [1, 1, 1])
    x, w, dy = _tensors(2, 2, 32, 16, (9, 9), 3, 2, 1)
    assert "stride" in g._view_reason(x, w, dy, [2, 2], [1, 1])   # 9 rows: no phase view
    x, w, dy = _tensors(2, 2, 32, 16, (10, 10), 3, 2, 1)
    assert g._view_reason(x, w, dy, [2, 2], [1, 1]) is None


COMPILE_CASES = [  # (nd, N, C, C_out, spatial, window, stride, pad, dtype)
    (2, 64, 64, 64, (56, 56), 3, 1, 1, "float16"),
    (2, 8, 256, 512, (28, 28), 3, 2, 1, "bfloat16"),
    (3, 8, 64, 128, (6, 7, 9), 3, 1, 1, "float16"),
    (2, 4, 256, 512, (14, 14), 1, 2, 0, "float16"),
    (2, 2, 48, 8, (9, 11), 5, 1, 2, "float16"),
]


def compile_case(nd: int, n: int, c: int, co: int, sp: tuple[int, ...], k: int, stride: int, pad: int,
                 dtype: str) -> tuple[bool, bool, int]:
    from alcop_triton.kernels.conv_window import gluon_descriptor
    from tests.conftest import Kit
    x, w, dy = _tensors(nd, n, c, co, tuple(sp), k, stride, pad, getattr(torch, dtype))
    tensors, _, tail, kwargs, descriptors, _ = g.plan(x, w, dy, [stride] * nd, [pad] * nd, SMS)
    descs = [gluon_descriptor(tensors[i], dims, block) for i, dims, block in descriptors]
    return Kit.compile_sm90(g.WGRAD_KERNEL, (*tensors, *descs, *tail), kwargs)


def test_the_kernel_compiles_for_sm90(kit) -> None:
    # TMA copies feeding wgmma (dY's box read transposed), within the 227 KB of shared memory.
    found = kit.apart("tests.ops.test_conv_window_grad", "[t.compile_case(*c) for c in t.COMPILE_CASES]")
    for case, (wgmma, tma, shared) in zip(COMPILE_CASES, found):
        assert wgmma and tma and shared <= 232448, (case, wgmma, tma, shared)


def test_on_the_cpu_the_input_gradient_takes_another_route() -> None:
    x, w, dy = _tensors(2, 2, 32, 16, (9, 9), 3, 1, 1)
    assert "sm90" in g.input_why_not(x, w, dy, [1, 1], [1, 1], 1)
    assert g.input_grad_by_boxes(x, w, dy, [1, 1], [1, 1], [1, 1], 1) is None


def test_a_strided_input_gradient_runs_every_phase_in_one_launch() -> None:
    x, w, dy = _tensors(2, 2, 32, 16, (10, 12), 3, 2, 1)
    dx = torch.empty_like(x)
    kernel, grid, tensors, tail, kwargs, descriptors = g.input_plan(x, w, dy, [2, 2], [1, 1], dx, SMS)
    assert kernel is g.PHASES_KERNEL and grid == (4 * tail[-1], )   # four phases of equal programs
    assert (kwargs["KH"], kwargs["KW"], kwargs["PH"], kwargs["WSH"], kwargs["C"]) == (3, 3, 1, 2, 16)
    assert tensors[2].shape == (2, 5, 2, 6, 64) and tensors[2].data_ptr() == dx.data_ptr()   # dX's phase view
    assert descriptors[2] == (2, (0, 1, 2, 3, 4), (kwargs["BI"], kwargs["BH"], 1, kwargs["BW"], kwargs["BN"]))


@pytest.mark.parametrize("stride,pad,ksize", [(s, p, k) for s in (2, 3, 4) for k in (1, 2, 3, 5, 7) for p in range(k)])
def test_each_phase_finds_the_taps_that_reach_it(stride: int, pad: int, ksize: int) -> None:
    # The arithmetic the phases' kernel does per program (its device function's Python body, run on ints),
    # against the count of the other input-gradient routes: 3x3 stride 2 pad 1 gives phase 0 tap 1, phase 1
    # taps 0 and 2 (flipped: 2 then 0); a strided 1x1 convolution's odd phases none (their rows of dX are zeros).
    from alcop_triton.kernels.conv_grad import tap_run
    from alcop_triton.kernels.conv_window_kernel import _phase_taps
    phase_taps = _phase_taps.fn
    for phase in range(stride):
        first, count, left = phase_taps(phase, stride, pad, ksize)
        r = tap_run(phase, stride, pad, 1, ksize)
        assert count == r[2] and (count == 0 or (first, left) == (r[0], r[2] - 1 - r[3])), (phase, r)
    assert [phase_taps(p, 2, 1, 3)[:2] for p in (0, 1)] == [(1, 1), (0, 2)]
    assert phase_taps(1, 2, 0, 1)[1] == 0


def test_input_tiles_fill_the_gpu() -> None:
    assert g.input_tile(64 * 56 * 56, 256, SMS) == (128, 256)        # large: the widest tile
    assert g.input_tile(64 * 7 * 7, 256, SMS) == (64, 128)           # a 14 x 14 input's phase
    assert g.input_tile(64 * 4 * 4, 512, SMS) == (64, 64)            # a 7 x 7 input's phase
    assert g.input_tile(16, 48, SMS) == (64, 16)                     # tiny: the most programs


def test_stride_one_flips_the_whole_window() -> None:
    x, w, dy = _tensors(3, 2, 32, 48, (4, 6, 5), 3, 1, 1)
    kernel, _, _, _, kwargs, descriptors = g.input_plan(x, w, dy, [1, 1, 1], [1, 1, 1], torch.empty_like(x), SMS)
    assert kernel is g.CONV_KERNEL and kwargs["PHO"] == -1 and (kwargs["KD"], kwargs["PD"], kwargs["C"]) == (3, 1, 48)
    assert descriptors[1] == (1, (0, 2, 3, 4, 1), (16, 1, 1, 1, kwargs["BN"]))   # the weight's (CO, window, C) box


INPUT_COMPILE_CASES = [  # (nd, N, C, C_out, spatial, window, stride, pad, dtype)
    (2, 4, 512, 512, (7, 7), 3, 1, 1, "float16"),
    (2, 4, 64, 128, (28, 28), 3, 2, 1, "bfloat16"),   # every phase in one launch
    (2, 4, 64, 128, (14, 14), 1, 2, 0, "float16"),    # phases no tap reaches: zeros
    (3, 2, 64, 32, (6, 7, 9), 3, 1, 1, "float16"),
]


def input_compile_case(nd: int, n: int, c: int, co: int, sp: tuple[int, ...], k: int, stride: int, pad: int,
                       dtype: str) -> list[tuple[bool, bool, int]]:
    from tests.conftest import Kit
    x, w, dy = _tensors(nd, n, c, co, tuple(sp), k, stride, pad, getattr(torch, dtype))
    from alcop_triton.kernels.conv_window import gluon_descriptor
    kernel, _, tensors, tail, kwargs, descriptors = g.input_plan(x, w, dy, [stride] * nd, [pad] * nd,
                                                                 torch.empty_like(x), SMS)
    return [Kit.compile_sm90(kernel, (*tensors, *[gluon_descriptor(tensors[i], dims, block)
                                                  for i, dims, block in descriptors], *tail), kwargs)]


def test_the_input_gradient_compiles_for_sm90(kit) -> None:
    found = kit.apart("tests.ops.test_conv_window_grad",
                      "[t.input_compile_case(*c) for c in t.INPUT_COMPILE_CASES]")
    for case, phases in zip(INPUT_COMPILE_CASES, found):
        assert phases and all(wgmma and tma and shared <= 232448 for wgmma, tma, shared in phases), (case, phases)


@pytest.mark.parametrize("hw,stride", [((7, 7), (2, 2)), ((7, 8), (2, 2)), ((9, 6), (3, 2)), ((8, 8), (2, 2))])
def test_whole_phases_pads_zeros_past_the_input_and_keeps_channels_last(hw: tuple[int, int],
                                                                        stride: tuple[int, int]) -> None:
    x = torch.randn(2, 16, *hw).contiguous(memory_format=torch.channels_last)
    out = g._whole_phases(x, stride)
    assert tuple(out.shape) == (2, 16, *(-(-e // s) * s for e, s in zip(hw, stride)))
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out[:, :, :hw[0], :hw[1]], x)
    assert out[:, :, hw[0]:].abs().sum() == 0 and out[:, :, :, hw[1]:].abs().sum() == 0


def test_only_tensors_with_data_are_launchable() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = torch.zeros(2, 2)
    assert not g._launchable(x)   # on the CPU
    with FakeTensorMode():
        fake = torch.empty(2, 2, device="cuda")
    assert fake.device.type == "cuda" and not g._launchable(fake)
