"""On a CUDA GPU of sm90 or later: the box kernel (``kernels/conv_window.py``, ``async_copy="box"``).

Each A tile is one TMA box of the input window per tap, padding by TMA's zero fill; the output tile a TMA
box clipped at the output's edges. Checked against torch in float64 on odd sizes (outputs not a multiple
of the box, channels not a multiple of the tile), with bias, 1x1 to 5x5 windows, 'same' padding of an even
window (more padding after than before), conv2d and conv3d, fp16 and bf16; outputs poisoned first, and
equal bit for bit across runs; through the drop-ins eagerly and in a CUDA graph; a misaligned input runs
the "tma" twin; a strided 1x1 convolution on its strided view, strided windows on the input's phase view
(where the stride does not divide the input, the "tma" twin); box shapes over several images and planes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import alcop_triton as at
from alcop_triton import KernelConfig
from alcop_triton.kernels import conv as kconv
from alcop_triton.kernels.conv_window import WindowConv, boxes
from alcop_triton.kernels.conv_window_kernel import conv_window

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1


@pytest.fixture(autouse=True)
def hopper() -> None:
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the box kernel needs TMA and wgmma (sm90)")


def _box(bm: int, bn: int, bk: int, stages: int) -> KernelConfig:
    return KernelConfig(bm, bn, bk, group_m=8, num_warps=bm // 16, smem_stages=stages, async_copy="box")


CASES = [  # (N, C, spatial, C_out, window, padding, dtype, bias, config)
    ((3, 64, (13, 29), 96, (3, 3), 1, "float16", False, _box(128, 128, 64, 4))),
    ((2, 32, (7, 7), 64, (3, 3), 1, "bfloat16", True, _box(64, 64, 32, 3))),
    ((4, 64, (14, 14), 256, (1, 1), 0, "float16", False, _box(128, 256, 64, 3))),
    ((1, 128, (9, 11), 40, (5, 5), 2, "float16", True, _box(64, 64, 64, 2))),
    ((2, 32, (10, 12), 32, (4, 4), "same", "float16", True, _box(128, 64, 32, 4))),
    ((2, 32, (5, 6, 7), 48, (3, 3, 3), 1, "float16", True, _box(128, 64, 32, 3))),
    ((1, 64, (4, 9, 9), 64, (3, 1, 3), (1, 0, 1), "bfloat16", False, _box(64, 64, 64, 4))),
]


def _operands(case: tuple, kit) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    n, c, sp, co, ks, _, dtype, bias, _ = case
    g = torch.Generator(device="cpu").manual_seed(n * 1000 + c + co + len(sp))
    fmt = torch.channels_last_3d if len(sp) == 3 else torch.channels_last
    x = kit.rand((n, c, *sp), dtype, g, "cuda").contiguous(memory_format=fmt)
    w = (kit.rand((co, c, *ks), dtype, g, "cuda") / (c * len(ks)) ** 0.5).contiguous(memory_format=fmt)
    b = kit.rand((co,), dtype, g, "cuda") if bias else None
    return x, w, b


def _reference(case: tuple, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    f = F.conv3d if x.dim() == 5 else F.conv2d
    return f(x.double(), w.double(), None if b is None else b.double(), padding=case[5])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{'x'.join(map(str, c[2]))}-{c[3]}-{c[6]}")
def test_matches_torch_and_is_deterministic(case: tuple, kit) -> None:
    x, w, b = _operands(case, kit)
    ref = _reference(case, x, w, b)
    nd = x.dim() - 2
    pad = case[5]
    if pad == "same":
        total = [k - 1 for k in case[4]]
        left, right = tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    else:
        left = right = pad if isinstance(pad, tuple) else (pad,) * nd
    p = kconv.ConvParams(nd, (1,) * nd, left, right, (1,) * nd, 1, True, b is not None)
    kern = kconv.compiled(case[6], p, case[8])
    assert isinstance(kern, WindowConv)
    out = kconv.empty_output(x, ref.shape)
    out.fill_(float("nan"))
    args = [t for t in (x, w, b) if t is not None] + [out.unflatten(1, (1, ref.shape[1]))]
    launch, _ = kern.bind(*args)
    assert launch.jit is kern.fn, "an aligned sm90 call runs the box kernel itself"
    launch()
    kit.assert_close(out, ref, case[6], f"box kernel {case[8]}")
    first = out.clone()
    run = launch.prebind()  # the fast path's launch, descriptors rebuilt per call
    for _ in range(3):
        out.fill_(float("nan"))
        run(*args)
        assert torch.equal(out, first)


def test_drop_in_eagerly_and_in_a_cuda_graph(kit) -> None:
    case = CASES[0]
    x, w, _ = _operands(case, kit)
    ref = _reference(case, x, w, None)
    with at.use_config(case[8]):
        kit.assert_close(at.conv2d(x, w, padding=1), ref, "float16", "drop-in")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = at.conv2d(x, w, padding=1)
        got.fill_(float("nan"))
        x.mul_(2)
        graph.replay()
    kit.assert_close(got, 2 * ref, "float16", "drop-in replayed in a graph")


def test_a_misaligned_input_runs_the_tma_twin(kit) -> None:
    case = CASES[1]
    x, w, b = _operands(case, kit)
    shifted = torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")[1:].as_strided(x.shape, x.stride())
    shifted.copy_(x)
    p = kconv.ConvParams(2, (1, 1), (1, 1), (1, 1), (1, 1), 1, True, True)
    kern = kconv.compiled("bfloat16", p, case[8])
    out = kconv.empty_output(x, (2, 64, 7, 7))
    launch, _ = kern.bind(shifted, w, b, out.unflatten(1, (1, 64)))
    assert launch.jit is not kern.fn
    launch()
    kit.assert_close(out, _reference(case, x, w, b), "bfloat16", "tma twin")


def test_a_strided_pointwise_convolution_reads_its_strided_view(kit) -> None:
    g = torch.Generator(device="cpu").manual_seed(5)
    x = kit.rand((3, 64, 15, 13), "float16", g, "cuda").contiguous(memory_format=torch.channels_last)
    w = (kit.rand((96, 64, 1, 1), "float16", g, "cuda") / 8).contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(x.double(), w.double(), stride=2)
    p = kconv.ConvParams(2, (2, 2), (0, 0), (0, 0), (1, 1), 1, True)
    kern = kconv.compiled("float16", p, _box(128, 128, 64, 3))
    out = kconv.empty_output(x, ref.shape)
    out.fill_(float("nan"))
    launch, _ = kern.bind(x, w, out.unflatten(1, (1, 96)))
    assert launch.jit is kern.fn
    launch.prebind()(x, w, out.unflatten(1, (1, 96)))  # rebinds the strided view at the passed input
    kit.assert_close(out, ref, "float16", "1x1 stride 2")


@pytest.mark.parametrize("size,window,stride,pad", [((28, 28), 3, 2, 1), ((14, 18), 3, 2, 1), ((12, 12), 5, 3, 2),
                                                    ((13, 15), 3, 2, 1)])
def test_a_strided_window_reads_the_phase_view(size: tuple[int, int], window: int, stride: int, pad: int, kit) -> None:
    # (13, 15): the stride divides neither extent, so the call runs the "tma" twin
    g = torch.Generator(device="cpu").manual_seed(sum(size))
    x = kit.rand((3, 64, *size), "float16", g, "cuda").contiguous(memory_format=torch.channels_last)
    w = (kit.rand((128, 64, window, window), "float16", g, "cuda") / 24).contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(x.double(), w.double(), stride=stride, padding=pad)
    p = kconv.ConvParams(2, (stride,) * 2, (pad,) * 2, (pad,) * 2, (1, 1), 1, True)
    kern = kconv.compiled("float16", p, _box(128, 128, 64, 4))
    out = kconv.empty_output(x, ref.shape)
    out.fill_(float("nan"))
    launch, _ = kern.bind(x, w, out.unflatten(1, (1, 128)))
    assert (launch.jit is kern.fn) == (size[0] % stride == 0 and size[1] % stride == 0)
    launch.prebind()(x, w, out.unflatten(1, (1, 128)))
    kit.assert_close(out, ref, "float16", f"{size} window {window} stride {stride}")



@pytest.mark.parametrize("spatial,stride,block_m", [((9, 13), 1, 128), ((3, 7, 6), 1, 128), ((10, 14), 2, 64)])
def test_every_box_shape_computes_the_convolution(spatial: tuple[int, ...], stride: int, block_m: int, kit) -> None:
    # Boxes over several images and planes, rows of 1 or 2 positions, and the one-plane strips: the tile's
    # rows are the box's positions in every shape, and TMA clips each at the output's edges.
    nd = len(spatial)
    g = torch.Generator(device="cpu").manual_seed(sum(spatial) + block_m)
    fmt = torch.channels_last_3d if nd == 3 else torch.channels_last
    x = kit.rand((3, 32, *spatial), "float16", g, "cuda").contiguous(memory_format=fmt)
    w = (kit.rand((48, 32, *(3,) * nd), "float16", g, "cuda") / 17).contiguous(memory_format=fmt)
    f = F.conv3d if nd == 3 else F.conv2d
    ref = f(x.double(), w.double(), stride=stride, padding=1)
    p = kconv.ConvParams(nd, (stride,) * nd, (1,) * nd, (1,) * nd, (1,) * nd, 1, True)
    cfg = _box(block_m, 64, 32, 3)
    od, oh, ow = ref.shape[2:] if nd == 3 else (1, *ref.shape[2:])
    found = boxes(3, od, oh, ow, block_m)
    for box in [*found[:4]] + [b for b in found if b[3] <= 2][:2] + [b for b in found if b[0] == 1][-2:]:
        out = kconv.empty_output(x, ref.shape)
        out.fill_(float("nan"))
        launch, _ = WindowConv("float16", p, cfg, box).bind(x, w, out.unflatten(1, (1, 48)))
        assert launch.jit is conv_window
        launch()
        kit.assert_close(out, ref, "float16", f"box {box}")
