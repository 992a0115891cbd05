"""On a CUDA GPU: the fast path's prebound launches (Triton's compiled launcher called directly) give the
results of the first call, on the caller's stream, on another device, inside a CUDA graph after a warm-up,
and with Triton's launch hooks set."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import alcop_triton as at
from alcop_triton import fastpath
from alcop_triton.ops import route

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    fastpath.invalidate()
    fastpath.reset_stats()
    yield


def _rand(*shape: int, dtype: torch.dtype = torch.float16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).cuda()


CALLS: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], Callable[[], tuple[Any, ...]]]] = {
    "matmul": (at.matmul, torch.matmul, lambda: (_rand(96, 80), _rand(80, 72, seed=1))),
    "bmm_transposed": (at.bmm, torch.bmm, lambda: (_rand(3, 64, 48), _rand(3, 40, 48, seed=1).mT)),
    "linear_gelu": (lambda x, w, b: at.linear(x, w, b, activation="gelu"),
                    lambda x, w, b: F.gelu(F.linear(x, w, b)), lambda: (_rand(4, 33, 64), _rand(48, 64, seed=1),
                                                                        _rand(48, seed=2))),
    # rows 16-byte loads cannot read, K >= 512: copied to K-padded buffers by one kernels.pack launch
    "matmul_unaligned_nn": (at.matmul, torch.matmul, lambda: (_rand(129, 555), _rand(555, 301, seed=1))),
    "bmm_unaligned_tn": (at.bmm, torch.bmm, lambda: (_rand(2, 555, 136).mT, _rand(2, 555, 200, seed=1))),
    "conv2d_channels_last": (lambda x, w: at.conv2d(x, w, padding=1), lambda x, w: F.conv2d(x, w, padding=1),
                             lambda: (_rand(2, 16, 14, 14).to(memory_format=torch.channels_last),
                                      _rand(32, 16, 3, 3, seed=1))),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_hits_match_the_first_call_and_torch(name: str) -> None:
    ours, theirs, make = CALLS[name]
    args = make()
    first = ours(*args)
    for _ in range(3):
        again = ours(*args)
        assert torch.equal(again, first)
    assert fastpath.stats().hits == 3
    ref = theirs(*[a.float() for a in args]).to(first.dtype)
    assert ((first.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2


@pytest.mark.parametrize("name", sorted(CALLS))
def test_repeats_are_found_at_the_call_site_on_this_torch(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch's C++ tensor guard builds on this torch (its constructor is not a public API): after a hit
    # by signature, a repeat on other tensors of that signature computes no signature.
    ours, theirs, make = CALLS[name]
    args = make()
    for _ in range(2):
        first = ours(*args)
    keyed: list[Any] = []
    key = route._key
    monkeypatch.setattr(route, "_key", lambda *a: keyed.append(a[0]) or key(*a))
    other = [t.clone() for t in args]  # same values, strides and alignment: another tensor of the signature
    assert torch.equal(ours(*other), first) and keyed == []


def test_hit_launches_on_the_current_stream() -> None:
    a, b = _rand(256, 256), _rand(256, 256, seed=1)
    at.matmul(a, b)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = at.matmul(a, b)  # a hit: must be ordered on `side`, not the default stream
    side.synchronize()
    assert fastpath.stats().hits == 1 and torch.equal(y, at.matmul(a, b))


def test_hit_inside_a_cuda_graph_after_warm_up() -> None:
    a, b = _rand(128, 64), _rand(64, 96, seed=1)
    expected = at.matmul(a, b)  # the warm-up: stores the signature
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = at.matmul(a, b)
    a.copy_(_rand(128, 64, seed=5))
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.equal(y, expected) and torch.equal(y, at.matmul(a, b))


def test_copied_operands_inside_a_cuda_graph_after_warm_up() -> None:
    a, b = _rand(129, 555), _rand(301, 555, seed=1).t()
    expected = at.matmul(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = at.matmul(a, b)  # the buffers come from the graph's pool; the copy and the GEMM replay with it
    a.copy_(_rand(129, 555, seed=5))
    graph.replay()
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert not torch.equal(y, expected) and ((y.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_hits_of_a_tma_kernel_encode_each_buffers_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    # host-side tensor descriptors: a hit reuses the tensor maps of buffers it has seen and encodes new ones
    from alcop_triton import choose_config
    from alcop_triton.records import KernelConfig
    cfg = KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=3, async_copy="tma", persistent=True)
    monkeypatch.setattr(choose_config, "choose_config",
                        lambda device, workload, torch_comparable=True, torch_workload=None: cfg)
    a, b = _rand(512, 256), _rand(256, 384, seed=1)
    first = at.matmul(a, b)
    ys = [at.matmul(a, b) for _ in range(3)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ys.append(at.matmul(a, b))
    side.synchronize()
    a2 = _rand(512, 256, seed=2)   # a new buffer: its own descriptor
    y2 = at.matmul(a2, b)
    assert fastpath.stats().hits == 5
    assert all(torch.equal(y, first) for y in ys)
    for x, y in ((a, first), (a2, y2)):
        ref = x.double() @ b.double()
        assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_launch_hooks_see_hits() -> None:
    from triton import knobs
    seen: list[str] = []
    a, b = _rand(64, 64), _rand(64, 64, seed=1)
    at.matmul(a, b)
    old = knobs.runtime.launch_enter_hook
    knobs.runtime.launch_enter_hook = lambda meta: seen.append(str(meta.get()["name"]))
    try:
        at.matmul(a, b)
    finally:
        knobs.runtime.launch_enter_hook = old
    assert fastpath.stats().hits == 1 and len(seen) == 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_hit_on_another_device_than_the_current_one() -> None:
    a, b = _rand(64, 64).to("cuda:1"), _rand(64, 64, seed=1).to("cuda:1")
    first = at.matmul(a, b)
    with torch.cuda.device(0):
        again = at.matmul(a, b)
    assert fastpath.stats().hits == 1 and torch.equal(again, first)


def test_grad_calls_repeat_their_autograd_function() -> None:
    x, w = _rand(64, 48).requires_grad_(), _rand(32, 48, seed=1).requires_grad_()
    for _ in range(2):
        y = at.linear(x, w)
    assert fastpath.stats().hits >= 1 and type(y.grad_fn).__name__ == "AlcopLinearBackward"
    y.float().square().sum().backward()
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    F.linear(xr, wr).square().sum().backward()
    for got, ref in ((x.grad, xr.grad), (w.grad, wr.grad)):
        assert ((got.float() - ref).norm() / ref.norm()).item() < 2e-2


def test_patch_mode_hands_a_convolution_left_to_cudnn_to_cudnns_op(torch_measured_faster: None) -> None:
    # A ResNet-like layer (fp16, channels-last, no bias) whose records prefer cuDNN: after the site is
    # stored, the module calls torch.cudnn_convolution itself, with torch's result to the bit.
    import sys

    from alcop_triton import patch
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).cuda().half().to(memory_format=torch.channels_last)
    x = _rand(8, 64, 28, 28).to(memory_format=torch.channels_last)
    builtins: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            builtins.append(getattr(arg, "__name__", ""))
    with torch.inference_mode():
        want = conv(x)
        with at.patched():
            conv(x)
            conv(x)
            assert patch._to_torch[patch.ops.conv2d][id(conv.weight)][2] is True
            sys.setprofile(profile)
            try:
                got = conv(x)
            finally:
                sys.setprofile(None)
    assert "cudnn_convolution" in builtins and "conv2d" not in builtins, builtins
    assert got.stride() == want.stride() and torch.equal(got, want)


def test_a_site_left_to_cudnn_first_stored_inside_a_cuda_graph_capture(torch_measured_faster: None) -> None:
    # The check against torch's result would synchronise: inside a capture the site keeps torch's call.
    from alcop_triton import patch
    conv = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False).cuda().half().to(memory_format=torch.channels_last)
    x = _rand(4, 32, 16, 16).to(memory_format=torch.channels_last)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), at.patched():
        conv(x)  # the signature's first call (alcop's, while deciding), before the capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            y = conv(x)  # stored as torch's here
        assert patch._to_torch[patch.ops.conv2d][id(conv.weight)][2] is False
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, conv(x))
