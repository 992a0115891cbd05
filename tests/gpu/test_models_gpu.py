"""On a CUDA GPU: a transformer block and a ResNet basic block under ``alcop_triton.patch.enable()``
match eager torch forward and backward, compile with ``fullgraph=True``, and alcop ops capture
into CUDA graphs after a warm-up (and refuse to compile inside a capture)."""

from __future__ import annotations

import copy
from typing import Callable, Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from alcop_triton import ops, patch

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1

# Relative (norm-wise) tolerances for whole blocks, forward and parameter gradients: fp32 with
# TF32 off (torch's matmuls and cuDNN convolutions and ours: tests/conftest.py runs every test under
# settings.tf32(False)), bf16 where each product rounds its output.
TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every op must run a generated kernel: a fallback to torch fails the test."""
    from alcop_triton import fallback

    def fail(op: str, reason: str) -> None:
        raise AssertionError(f"alcop_triton.{op} fell back to torch: {reason}")
    monkeypatch.setattr(fallback, "use_torch", fail)


@pytest.fixture(autouse=True)
def float32_routed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These tests check alcop's kernels inside patched models, float32 ones too: patch mode leaves an
    unmeasured float32 workload to torch (``dispatch.TORCH_UNLESS_MEASURED``), so here it routes them."""
    from alcop_triton import generation
    from alcop_triton.autotune import dispatch
    monkeypatch.setattr(dispatch, "TORCH_UNLESS_MEASURED", frozenset())
    generation.bump()  # decisions made before are made again
    yield
    generation.bump()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


class TransformerBlock(nn.Module):
    """Pre-norm block: fused QKV projection, scores by matmul of strided head views, attention
    times values by bmm, output projection, GELU MLP."""

    def __init__(self, d: int = 256, heads: int = 4, hidden: int = 1024) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, dh).transpose(1, 2) for z in (q, k, v))  # strided (B, H, T, dh) views
        att = torch.softmax((q @ k.transpose(-2, -1)) * dh ** -0.5, dim=-1)
        y = torch.bmm(att.reshape(b * h, t, t), v.reshape(b * h, t, dh)).view(b, h, t, dh)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class BasicBlock(nn.Module):
    """ResNet basic block with a strided, projected shortcut: conv-bn-relu-conv-bn + shortcut, relu."""

    def __init__(self, cin: int = 64, cout: int = 128, stride: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


def _run(model: nn.Module, x: torch.Tensor, wrap: Callable[[nn.Module], Callable] = lambda m: m
         ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model = copy.deepcopy(model)  # BatchNorm's running stats: every run starts from the same state
    x = x.detach().clone().requires_grad_()
    y = wrap(model)(x)
    y.float().pow(2).mean().backward()
    return y.detach(), [x.grad] + [p.grad for p in model.parameters()]


CASES = {
    "transformer": (lambda: TransformerBlock(), lambda: torch.randn(4, 128, 256), None),
    "resnet_block": (lambda: BasicBlock(), lambda: torch.randn(8, 64, 28, 28), torch.channels_last),
}


def _model_and_input(case: str, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    make, data, fmt = CASES[case]
    torch.manual_seed(0)
    model, x = make().cuda().to(dtype), data().cuda().to(dtype)
    if fmt is not None:
        model, x = model.to(memory_format=fmt), x.contiguous(memory_format=fmt)
    return model.train(), x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_block_matches_eager(case: str, dtype: torch.dtype) -> None:
    model, x = _model_and_input(case, dtype)
    want, want_grads = _run(model, x)
    patch.enable()
    try:
        got, got_grads = _run(model, x)
    finally:
        patch.disable()
    assert rel(got, want) <= TOL[dtype], rel(got, want)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        assert rel(g, w) <= TOL[dtype], (i, rel(g, w))


@pytest.mark.parametrize("case", sorted(CASES))
def test_block_compiles_fullgraph(case: str) -> None:
    torch._dynamo.reset()
    model, x = _model_and_input(case, torch.bfloat16)
    want, want_grads = _run(model, x)
    patch.enable()
    try:
        got, got_grads = _run(model, x, lambda m: torch.compile(m, fullgraph=True))
    finally:
        patch.disable()
    assert rel(got, want) <= TOL[torch.bfloat16]
    for g, w in zip(got_grads, want_grads):
        assert rel(g, w) <= TOL[torch.bfloat16]


def test_every_op_on_gpu_fp16() -> None:
    h = dict(device="cuda", dtype=torch.float16)
    a, b = torch.randn(3, 70, 50, **h), torch.randn(50, 90, **h)
    x, w = torch.randn(2, 16, 20, 20, **h).contiguous(memory_format=torch.channels_last), torch.randn(32, 8, 3, 3, **h)
    checks = [
        (ops.matmul(a, b), a.float() @ b.float()),
        (ops.bmm(a, a.mT), a.float() @ a.float().mT),
        (ops.linear(a, b.t(), torch.randn(90, **h).zero_(), activation="gelu"), F.gelu(a.float() @ b.float())),
        (ops.conv2d(x, w, None, 2, 1, 1, 2), F.conv2d(x.float(), w.float(), None, 2, 1, 1, 2)),
        (ops.conv1d(x[:, :, 0], w[:, :, 0], padding="same", groups=2), F.conv1d(x[:, :, 0].float(), w[:, :, 0].float(),
                                                                               padding="same", groups=2)),
    ]
    for got, want in checks:
        assert rel(got, want) <= 1e-2


def test_cuda_graph_capture_after_warmup() -> None:
    lin = nn.Linear(256, 512).cuda()
    x = torch.randn(64, 256, device="cuda")
    conv = nn.Conv2d(16, 32, 3, padding=1).cuda().to(memory_format=torch.channels_last)
    img = torch.randn(4, 16, 14, 14, device="cuda").contiguous(memory_format=torch.channels_last)
    with patch.patched():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: configs chosen, kernels compiled
            for _ in range(2):
                lin(x), conv(img)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y, z = lin(x), conv(img)
    x.copy_(torch.randn_like(x))
    img.copy_(torch.randn_like(img))
    graph.replay()
    torch.cuda.synchronize()
    assert rel(y, F.linear(x, lin.weight, lin.bias)) <= 1e-4
    assert rel(z, F.conv2d(img, conv.weight, conv.bias, padding=1)) <= 1e-4


def test_capture_refuses_to_compile() -> None:
    a, b = torch.randn(37, 29, device="cuda"), torch.randn(29, 41, device="cuda")  # a shape never run before
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="CUDA graph is being captured.*warm-up"):
        with torch.cuda.graph(graph):
            ops.mm(a, b)
    torch.cuda.synchronize()
    assert rel(ops.mm(a, b), a @ b) <= 1e-4  # outside a capture the same call compiles and runs
