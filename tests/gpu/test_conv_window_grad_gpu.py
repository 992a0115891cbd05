"""On a CUDA GPU of sm90 or later: the weight and input gradients on TMA boxes (``kernels/conv_window_grad.py``).

Against torch's weight gradient in float64 on odd sizes (outputs not a multiple of the position box,
channels not a multiple of the tile), 1x1 to 5x5 windows, stride 1, a strided 3x3 window on the input's
phase view and a strided 1x1 one on its strided view, conv2d and conv3d, fp16 and bf16; the slices'
partial sums added in order, so repeated runs agree bit for bit; through ``loss.backward()`` of the
drop-in, eagerly and in a CUDA graph. The input gradient: stride 1 (2-d and 3-d), strided windows phase by
phase into dX's phase view, a strided 1x1 convolution (phases no tap reaches are zeros), against float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import alcop_triton as at
from alcop_triton.kernels import conv_window_grad as g

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1


@pytest.fixture(autouse=True)
def hopper() -> None:
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the box kernel needs TMA and wgmma (sm90)")


CASES = [  # (N, C, spatial, C_out, window, stride, pad, dtype)
    (3, 32, (13, 29), 24, 3, 1, 1, "float16"),
    (2, 64, (7, 9), 32, 3, 2, 1, "float16"),   # 7 x 9: the weight gradient reads the input padded to whole phases
    (2, 64, (14, 18), 40, 3, 2, 1, "bfloat16"),
    (3, 64, (15, 13), 136, 1, 2, 0, "float16"),
    (2, 32, (5, 6, 7), 16, 3, 1, 1, "float16"),
    (1, 48, (9, 11), 8, 5, 1, 2, "bfloat16"),
    (4, 256, (7, 7), 512, 3, 1, 1, "float16"),
]


def _operands(case: tuple, kit) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, c, sp, co, k, stride, pad, dtype = case
    g_ = torch.Generator(device="cpu").manual_seed(n * 1000 + c + co + len(sp))
    fmt = torch.channels_last_3d if len(sp) == 3 else torch.channels_last
    x = kit.rand((n, c, *sp), dtype, g_, "cuda").contiguous(memory_format=fmt)
    w = (kit.rand((co, c, *(k,) * len(sp)), dtype, g_, "cuda") / 8).contiguous(memory_format=fmt)
    out = [(s + 2 * pad - k) // stride + 1 for s in sp]
    dy = kit.rand((n, co, *out), dtype, g_, "cuda").contiguous(memory_format=fmt)
    return x, w, dy


def _reference(case: tuple, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    nd = x.dim() - 2
    return torch.ops.aten.convolution_backward(dy.double(), x.double(), w.double(), None, [case[5]] * nd,
                                               [case[6]] * nd, [1] * nd, False, [0] * nd, 1, [False, True, False])[1]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{'x'.join(map(str, c[2]))}-{c[3]}-k{c[4]}s{c[5]}")
def test_matches_torch_and_is_deterministic(case: tuple, kit) -> None:
    x, w, dy = _operands(case, kit)
    nd = x.dim() - 2
    args = ([case[5]] * nd, [case[6]] * nd, [1] * nd, 1)
    dw = g.weight_grad_by_boxes(x, w, dy, *args)
    assert dw is not None and dw.shape == w.shape and dw.dtype == w.dtype
    kit.assert_close(dw, _reference(case, x, w, dy), case[7], "box weight gradient")
    for _ in range(2):
        assert torch.equal(g.weight_grad_by_boxes(x, w, dy, *args), dw)


def test_every_slicing_adds_up_to_the_same_gradient(kit) -> None:
    case = CASES[0]
    x, w, dy = _operands(case, kit)
    ref = _reference(case, x, w, dy)
    for choice in ((64, 32, 2, 1), (64, 16, 4, 3), (128, 32, 3, 7)):
        tensors, grid, tail, kwargs, descs, slices = g.plan(x, w, dy, [1, 1], [1, 1], 132, choice)
        from alcop_triton.build import Launch
        from alcop_triton.kernels.conv_window import gluon_descriptor
        d = [gluon_descriptor(tensors[i], dims, block) for i, dims, block in descs]
        tensors[2].fill_(float("nan"))
        Launch(g.WGRAD_KERNEL, g.WGRAD_KERNEL[grid], grid, (*tensors, *d, *tail), kwargs, 3, x.device, descs)()
        dw = tensors[2].sum(0).reshape(w.shape[0], 3, 3, w.shape[1]).movedim(-1, 1)
        kit.assert_close(dw.to(w.dtype), ref, "float16", f"tile {choice}, {slices} slices")


def _input_reference(case: tuple, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    nd = x.dim() - 2
    return torch.ops.aten.convolution_backward(dy.double(), x.double(), w.double(), None, [case[5]] * nd,
                                               [case[6]] * nd, [1] * nd, False, [0] * nd, 1, [True, False, False])[0]


INPUT_CASES = CASES + [(2, 64, (12, 12), 32, 5, 3, 2, "float16"), (3, 32, (16, 14), 48, 1, 2, 0, "bfloat16"),
                       (2, 32, (7, 9), 16, 3, 2, 1, "float16")]   # 7 x 9 rows: dX rounded up to whole phases


@pytest.mark.parametrize("case", INPUT_CASES,
                         ids=lambda c: f"{c[0]}x{c[1]}x{'x'.join(map(str, c[2]))}-{c[3]}-k{c[4]}s{c[5]}")
def test_the_input_gradient_matches_torch(case: tuple, kit) -> None:
    x, w, dy = _operands(case, kit)
    nd = x.dim() - 2
    args = ([case[5]] * nd, [case[6]] * nd, [1] * nd, 1)
    assert g.input_why_not(x, w, dy, args[0], args[2], 1) is None, case
    dx = g.input_grad_by_boxes(x, w, dy, *args)
    assert dx is not None and dx.shape == x.shape and dx.dtype == x.dtype
    assert dx.stride(1) == 1   # channels last (a view of the first rows where dX was rounded up to whole phases)
    kit.assert_close(dx, _input_reference(case, x, w, dy), case[7], "box input gradient")
    assert torch.equal(g.input_grad_by_boxes(x, w, dy, *args), dx)


def test_the_drop_in_backward_runs_it(kit) -> None:
    case = CASES[2]
    x, w, dy = _operands(case, kit)
    ref = _reference(case, x, w, dy)
    wp, xp = w.clone().requires_grad_(True), x.clone().requires_grad_(True)
    at.conv2d(xp, wp, stride=2, padding=1).backward(dy)
    kit.assert_close(wp.grad, ref, "bfloat16", "w.grad")
    kit.assert_close(xp.grad, _input_reference(case, x, w, dy), "bfloat16", "x.grad")
    # captured in a CUDA graph and replayed on new values
    wg = w.clone().requires_grad_(True)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out = at.conv2d(x, wg, stride=2, padding=1)
        (gw,) = torch.autograd.grad(out, wg, dy)
    gw.fill_(float("nan"))
    dy.mul_(2)
    graph.replay()
    kit.assert_close(gw, 2 * ref, "bfloat16", "w.grad replayed in a graph")


def test_where_it_cannot_run_the_reason_names_it(kit) -> None:
    x, w, dy = _operands(CASES[0], kit)
    one = ([1, 1], [1, 1], [1, 1])
    assert "dtype" in g.why_not(x.float(), w.float(), dy.float(), *one, 1)
    assert "groups" in g.why_not(x, w[:, :16], dy, *one, 2)
    assert "channels first" in g.why_not(x.contiguous(), w, dy, *one, 1)
    assert "channels" in g.why_not(x[:, :24], w[:, :24], dy, *one, 1)
    assert "device" in g.why_not(x.cpu(), w.cpu(), dy.cpu(), *one, 1)
    assert g.weight_grad_by_boxes(x.float(), w.float(), dy.float(), *one, 1) is None
    x3, w3, dy3 = _operands((2, 32, (5, 6, 7), 16, 3, 2, 1, "float16"), kit)
    assert "3-d" in g.input_why_not(x3, w3, dy3, [2, 2, 2], [1, 1, 1], 1)
    assert g.input_grad_by_boxes(x3, w3, dy3, [2, 2, 2], [1, 1, 1], [1, 1, 1], 1) is None


def test_a_fresh_thread_can_run_it_first(kit) -> None:
    # A thread that has launched nothing has no current CUDA context; the descriptors' encoding needs one
    # (autograd's backward thread, when a weight gradient is the first thing it runs).
    import threading
    case = (2, 32, (11, 10), 16, 3, 1, 1, "float16")
    x, w, dy = _operands(case, kit)
    found: list = []
    worker = threading.Thread(target=lambda: found.append(g.weight_grad_by_boxes(x, w, dy, [1, 1], [1, 1], [1, 1], 1)))
    worker.start()
    worker.join()
    assert found and found[0] is not None
    kit.assert_close(found[0], _reference(case, x, w, dy), "float16", "from a fresh thread")


def test_a_double_backward_takes_the_differentiable_routes(kit) -> None:
    # Under create_graph the box kernels' results would carry no derivative: both gradients then run
    # through alcop calls that differentiate again, so a gradient of a gradient is right (not silently 0).
    x, w, _ = _operands((2, 32, (9, 10), 32, 3, 1, 1, "float16"), kit)
    x, w = x.requires_grad_(), w.requires_grad_()
    (gx,) = torch.autograd.grad(at.conv2d(x, w, padding=1).square().sum(), x, create_graph=True)
    (gw,) = torch.autograd.grad(gx.float().square().sum(), w)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (gx64,) = torch.autograd.grad(F.conv2d(x64, w64, padding=1).square().sum(), x64, create_graph=True)
    kit.assert_close(gx, gx64, "float16", "first derivative")
    kit.assert_close(gw, torch.autograd.grad(gx64.square().sum(), w64)[0], "float16", "second derivative")
