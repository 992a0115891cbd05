"""On a CUDA GPU: convolution gradients (the forward conv kernel for a stride-1 input gradient, a GEMM over
im2col rows for the weight gradient, DSL kernels otherwise) against torch's in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from alcop_triton.ops.conv import conv_grads

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1


@pytest.mark.parametrize("stride,pad,dilation,groups", [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (1, 1, 1, 4)])
@pytest.mark.parametrize("layout", [torch.channels_last, torch.contiguous_format])
def test_conv2d_gradients_match_torch(stride: int, pad: int, dilation: int, groups: int,
                                      layout: torch.memory_format) -> None:
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(6, 32, 19, 21, device="cuda", generator=g).half().contiguous(memory_format=layout)
    w = (torch.randn(48, 32 // groups, 3, 3, device="cuda", generator=g) * 0.2).half().contiguous(memory_format=layout)
    y = F.conv2d(x, w, stride=stride, padding=pad, dilation=dilation, groups=groups)
    dy = torch.randn_like(y)
    dx, dw = conv_grads(x, w, dy, (stride,) * 2, (pad,) * 2, (dilation,) * 2, groups)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    F.conv2d(x64, w64, stride=stride, padding=pad, dilation=dilation, groups=groups).backward(dy.double())
    for got, want in ((dx, x64.grad), (dw, w64.grad)):
        assert got is not None and got.shape == want.shape and got.dtype == torch.float16
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-2


@pytest.mark.parametrize("n,size,c,stride", [(6, (19, 21), 64, 2), (16, (56, 56), 64, 1), (2, (9, 28, 28), 64, 2)],
                         ids=["strided_odd", "long_reduction", "conv3d_strided"])
def test_phased_input_gradient_and_split_weight_gradient_match_torch(n: int, size: tuple[int, ...], c: int,
                                                                     stride: int) -> None:
    # channels-last, 64 channels: a strided input gradient in one kernel over the phases; 56-wide rows
    # in padded runs of 64, the 50,176-row reduction split past 8 ways (summed in two levels)
    nd = len(size)
    fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
    conv = F.conv2d if nd == 2 else F.conv3d
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(n, c, *size, device="cuda", generator=g).half().contiguous(memory_format=fmt)
    w = (torch.randn(64, c, *(3,) * nd, device="cuda", generator=g) * 0.05).half().contiguous(memory_format=fmt)
    y = conv(x, w, stride=stride, padding=1)
    dy = torch.randn_like(y)
    dx, dw = conv_grads(x, w, dy, (stride,) * nd, (1,) * nd, (1,) * nd, 1)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    conv(x64, w64, stride=stride, padding=1).backward(dy.double())
    for got, want in ((dx, x64.grad), (dw, w64.grad)):
        assert got is not None and got.shape == want.shape
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-2


@pytest.mark.parametrize("layer", ["stem", "downsample"])
def test_patch_mode_trains_the_layers_its_gradient_records_send_to_alcop(layer: str) -> None:
    # ResNet-50's 7x7 stem and a strided 1x1 downsample at batch 64, channels last, under bf16 autocast:
    # on an H200 the shipped table sends the stem to alcop when it trains (its forward and weight gradient
    # save 0.29 ms), the downsample to torch (its weight gradient's 8 µs are less than TRAINING_MIN_GAIN_MS;
    # docs/decisions.md#d53). Elsewhere the route may differ; the gradients must match float64 either way.
    import torch.nn as nn

    import alcop_triton as at
    torch.manual_seed(0)
    if layer == "stem":
        conv, x = nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.randn(64, 3, 224, 224)
    else:
        conv, x = nn.Conv2d(256, 512, 1, 2, bias=False), torch.randn(64, 256, 56, 56)
    conv = conv.cuda().to(memory_format=torch.channels_last)
    x = x.cuda().contiguous(memory_format=torch.channels_last).requires_grad_(layer != "stem")
    with torch.autocast("cuda", dtype=torch.bfloat16), at.patched():
        y = conv(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    x64, w64 = x.detach().double().requires_grad_(x.requires_grad), conv.weight.detach().double().requires_grad_()
    y64 = F.conv2d(x64, w64, None, conv.stride, conv.padding)
    y64.backward(dy.double())
    assert ((y.double() - y64).norm() / y64.norm()).item() < 2e-2
    pairs = [(conv.weight.grad, w64.grad)] + ([(x.grad, x64.grad)] if x.requires_grad else [])
    for got, want in pairs:
        assert got is not None and ((got.double() - want).norm() / want.norm()).item() < 2e-2
    if "H200" in torch.cuda.get_device_name():  # alcop's Function, or torch's convolution
        want = "AlcopConvBackward" if layer == "stem" else "ConvolutionBackward0"
        assert type(y.grad_fn).__name__ == want, y.grad_fn
