"""A strided convolution's input gradient as one kernel over every input phase (``conv_grad.input_grad_in_phases``).

Checked in Triton's CPU interpreter against torch's gradient in float32 from fp16 inputs (even and odd
extents, a 7x7 stem, stride 3, 3-D) and through autograd (a double backward takes the per-phase
convolutions, which differentiate again); where it does not apply (stride 1, groups,
dilation, channels-first input, a 1x1 window that most phases never see, few channels) the
phase-by-phase path runs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from alcop_triton import ops
from alcop_triton.ops.conv import BACKWARD as CACHED
from alcop_triton.kernels import conv_grad as cg

FMT = {2: torch.channels_last, 3: torch.channels_last_3d}


def _operands(nd: int, n: int, c: int, co: int, size: tuple[int, ...], k: int, s: int, p: int,
              seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, *size, generator=g).half().to(memory_format=FMT[nd])
    w = (torch.randn(co, c, *([k] * nd), generator=g) / k).half().to(memory_format=FMT[nd])
    conv = F.conv2d if nd == 2 else F.conv3d
    dy = torch.randn(conv(x.float(), w.float(), stride=s, padding=p).shape, generator=g).half()
    dy = dy.to(memory_format=FMT[nd])
    grad = torch.nn.grad.conv2d_input if nd == 2 else torch.nn.grad.conv3d_input
    return x, w, dy, grad(x.shape, w.float(), dy.float(), stride=s, padding=p)


def test_phase_weights_are_the_taps_each_phase_receives() -> None:
    w = torch.arange(3.0).reshape(1, 1, 1, 3).expand(1, 1, 3, 3).contiguous()   # tap index along the last dim
    wp = cg.phase_weights(w, (2, 2), (1, 1))
    assert wp.shape == (2, 2, 2, 2, 1, 1)
    # pad 1, stride 2: phase 0 receives tap 1 (and nothing more), phase 1 taps 0 and 2
    assert wp[0, 0, 0, 0].item() == 1 and wp[0, 0, 0, 1].item() == 0
    assert [wp[0, 1, 0, j].item() for j in range(2)] == [0, 2]


@pytest.mark.interpreter
@pytest.mark.parametrize("nd,size,k,s,p", [
    (2, (8, 8), 3, 2, 1), (2, (7, 9), 3, 2, 1), (2, (9, 10), 7, 2, 3), (2, (9, 9), 3, 3, 1), (3, (4, 6, 6), 3, 2, 1),
], ids=["3x3s2", "3x3s2_odd", "7x7s2", "3x3s3", "3d"])
def test_input_grad_in_phases_matches_torch(nd: int, size: tuple[int, ...], k: int, s: int, p: int) -> None:
    x, w, dy, want = _operands(nd, 2, 64, 32, size, k, s, p, seed=sum(size) + k)
    dx = cg.input_grad_in_phases(CACHED, x, w, dy, [s] * nd, [p] * nd, [1] * nd, 1)
    assert dx is not None and dx.shape == x.shape
    assert float((dx.float() - want).norm() / want.norm()) < 1e-2
    # channels last; a view of the first rows where an extent is not a multiple of the stride
    assert dx.is_contiguous(memory_format=FMT[nd]) or any(e % s for e in size)


@pytest.mark.parametrize("case", ["stride1", "groups", "dilation", "channels_first", "1x1_stride2", "few_channels",
                                  "float64"])
def test_input_grad_in_phases_declines(case: str) -> None:
    s, k, groups, dil = (1 if case == "stride1" else 2), (1 if case == "1x1_stride2" else 3), \
        (2 if case == "groups" else 1), (2 if case == "dilation" else 1)
    c = 16 if case == "few_channels" else 64
    dt = torch.float64 if case == "float64" else torch.float16   # no kernel: the per-phase path falls back
    x = torch.randn(1, c, 8, 8, dtype=dt)
    x = x if case == "channels_first" else x.to(memory_format=torch.channels_last)
    w = torch.randn(16, c // groups, k, k, dtype=dt)
    dy = torch.randn(1, 16, 4, 4, dtype=dt)
    assert cg.input_grad_in_phases(CACHED, x, w, dy, [s, s], [1, 1], [dil, dil], groups) is None


@pytest.mark.interpreter
def test_strided_conv_backward_through_autograd() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 64, 10, 10, generator=g).half().to(memory_format=torch.channels_last).requires_grad_()
    w = (torch.randn(32, 64, 3, 3, generator=g) / 8).half().to(memory_format=torch.channels_last).requires_grad_()
    dy = torch.randn(2, 32, 5, 5, generator=g).half()
    ops.conv2d(x, w, stride=2, padding=1).backward(dy)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    F.conv2d(x64, w64, stride=2, padding=1).backward(dy.double())
    assert x.grad is not None and w.grad is not None and x64.grad is not None and w64.grad is not None
    for got, want in ((x.grad, x64.grad), (w.grad, w64.grad)):
        assert float((got.double() - want).norm() / want.norm()) < 1e-2


@pytest.mark.parametrize("rows,channels,want", [
    (64 * 7 * 7, 64, (128, 64, 4, 4)), (64 * 7 * 7, 128, (128, 128, 8, 4)), (64 * 7 * 7, 512, (128, 256, 8, 3)),
    (64 * 4 * 4, 512, (128, 128, 8, 4)),   # 4 phases x 8 x 2 tiles at 256 columns: under half of 132 SMs
])
def test_input_grad_config_tiles_as_wide_as_the_channels(rows: int, channels: int,
                                                         want: tuple[int, int, int, int]) -> None:
    cfg = cg.input_grad_config((4, rows, channels, 4 * 256), 132)
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.smem_stages) == want


@pytest.mark.interpreter
def test_double_backward_of_a_strided_conv_takes_the_differentiable_path() -> None:
    g = torch.Generator().manual_seed(9)
    x = torch.randn(1, 64, 6, 6, generator=g).to(memory_format=torch.channels_last).requires_grad_()
    w = (torch.randn(16, 64, 3, 3, generator=g) / 8).to(memory_format=torch.channels_last).requires_grad_()
    (gx,) = torch.autograd.grad(ops.conv2d(x, w, padding=1, stride=2).square().sum(), x, create_graph=True)
    (gw,) = torch.autograd.grad(gx.sum(), w)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (gx64,) = torch.autograd.grad(F.conv2d(x64, w64, padding=1, stride=2).square().sum(), x64, create_graph=True)
    (gw64,) = torch.autograd.grad(gx64.sum(), w64)
    for got, want in ((gx, gx64), (gw, gw64)):
        assert float((got.double() - want).norm() / want.norm()) < 1e-4


@pytest.mark.interpreter
@pytest.mark.parametrize("differentiable", [False, True])
def test_conv_grads_takes_the_phases_kernel_unless_asked_to_differentiate(differentiable: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from alcop_triton.ops.conv import conv_grads
    calls: list[str] = []
    for name in ("input_grad_in_phases", "input_grad_by_conv"):
        real = getattr(cg, name)
        monkeypatch.setattr(cg, name, lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
    x, w, dy, want = _operands(2, 1, 64, 16, (6, 6), 3, 2, 1, seed=4)
    dx, _ = conv_grads(x, w, dy, (2, 2), (1, 1), (1, 1), 1, True, False, differentiable)   # grad mode on here
    assert dx is not None and float((dx.float() - want).norm() / want.norm()) < 1e-2
    assert calls == (["input_grad_by_conv"] if differentiable else ["input_grad_in_phases"])
