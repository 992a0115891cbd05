"""torch.ops.alcop.*: opcheck (schema, fake tensors, autograd registration, AOT dispatch with
dynamic shapes) on every op, and torch.compile(fullgraph=True) of small models without breaks."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import assert_close, randn, target_name
from torch._dynamo.backends.debugging import aot_eager

import alcop_triton as at
from alcop_triton import dsl_kernels, fastpath, ops, patch
from alcop_triton.kernels import conv_grad

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)


def _rg(*shape: int, seed: int = 0) -> torch.Tensor:
    return randn(*shape, seed=seed).requires_grad_()


OPCHECK_CASES = {
    "mm": (torch.ops.alcop.mm.default, lambda: (_rg(3, 5), _rg(5, 4, seed=1))),
    "mm_transposed": (torch.ops.alcop.mm.default, lambda: (_rg(5, 3).t(), _rg(4, 5, seed=1).t())),
    "bmm": (torch.ops.alcop.bmm.default, lambda: (_rg(2, 3, 5), _rg(2, 5, 4, seed=1))),
    "gemm": (torch.ops.alcop.gemm.default,
             lambda: (_rg(3, 5), _rg(5, 4, seed=1), _rg(4, seed=2), _rg(3, 4, seed=3), "gelu", 0.5, 2.0)),
    "gemm_batched_relu": (torch.ops.alcop.gemm.default,
                          lambda: (_rg(2, 3, 5), _rg(2, 5, 4, seed=1), None, None, "relu", 1.0, 1.0)),
    "gemm_out": (torch.ops.alcop.gemm_out.default,
                 lambda: (randn(3, 5), randn(5, 4, seed=1), None, randn(3, 4, seed=2), "silu", 1.0, 0.5,
                          torch.empty(3, 4))),
    "linear": (torch.ops.alcop.linear.default, lambda: (_rg(2, 3, 5), _rg(4, 5, seed=1), _rg(4, seed=2), None, "tanh")),
    "conv": (torch.ops.alcop.conv.default,
             lambda: (_rg(2, 4, 6, 6), _rg(6, 2, 3, 3, seed=1), _rg(6, seed=2), [2, 1], [1, 0], [1, 1], [1, 2], 2,
                      "sigmoid")),
    "conv_channels_last": (torch.ops.alcop.conv.default,
                           lambda: (randn(1, 4, 5, 5).to(memory_format=torch.channels_last).requires_grad_(),
                                    _rg(4, 4, 3, 3, seed=1), None, [1, 1], [1, 1], [1, 1], [1, 1], 1, "relu")),
    "conv1d": (torch.ops.alcop.conv.default,
               lambda: (_rg(2, 3, 9), _rg(4, 3, 3, seed=1), None, [2], [1], [1], [1], 1, None)),
    "dsl_call_conv_weight_grad": (torch.ops.alcop.dsl_call.default, lambda: (
        conv_grad.conv_weight_grad_kernel(2, torch.float32, (1, 1), (1, 1), (1, 1), 2),
        [randn(2, 4, 6, 6), randn(2, 4, 6, 6, seed=1), randn(4, 2, 3, 3, seed=2)])),
}


@pytest.mark.parametrize("case", sorted(OPCHECK_CASES))
def test_opcheck(case: str) -> None:
    op, args = OPCHECK_CASES[case]
    torch.library.opcheck(op, args())  # raises on any failing check


def test_dsl_keys_resolve_without_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    # A compiled graph loaded from torch's caches calls dsl_call with keys this process never
    # registered: the key alone rebuilds the kernel.
    key = conv_grad.conv_weight_grad_kernel(1, torch.float32, (2,), (1,), (1,), 1)
    monkeypatch.setattr(dsl_kernels, "_DSL", {})
    monkeypatch.setattr(dsl_kernels, "_DSL_TE", {})
    fastpath.invalidate()  # no signature stored by an earlier call may serve it
    dy, x, w = randn(2, 3, 5), randn(2, 4, 9, seed=1), randn(3, 4, 3, seed=2)
    got = torch.ops.alcop.dsl_call(key, [dy, x, w]).flatten(0, 1)
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    (want,) = torch.autograd.grad(F.conv1d(x64, w64, stride=2, padding=1), w64, dy.double())
    assert_close(got, want)
    with pytest.raises(RuntimeError, match="kind 'nobody::knows' is not registered"):
        torch.ops.alcop.dsl_call('nobody::knows|{"a":1}', [dy])


@pytest.mark.parametrize("stride", [1, 2])
def test_weight_grad_kernel_with_one_window_tap_per_column_tile(stride: int) -> None:
    # 32 channels in column tiles of 16: each tile is one (kh, kw) tap, whose indices the kernel holds
    # as scalars (codegen's one-run blocks); channels-last X, as a model's activations are.
    key = conv_grad.conv_weight_grad_kernel(2, torch.float32, (stride, stride), (1, 1), (1, 1), 1)
    x = randn(2, 32, 7, 6, seed=1).to(memory_format=torch.channels_last)
    w = randn(8, 32, 3, 3, seed=2).to(memory_format=torch.channels_last)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    y = F.conv2d(x64, w64, stride=stride, padding=1)
    dy = randn(*y.shape, seed=3).to(memory_format=torch.channels_last)
    with at.use_config(at.KernelConfig(16, 16, 16, group_m=1, smem_stages=2)):
        got = torch.ops.alcop.dsl_call(key, [dy, x, w]).flatten(0, 1)
    (want,) = torch.autograd.grad(y, w64, dy.double())
    assert_close(got, want)


@pytest.mark.parametrize("view,sms,want", [
    ((1, 64, 576, 200704), 132, (64, 64, 4, 64)),    # 9 tiles over 3,136 chunks: the largest split
    ((1, 256, 2304, 12544), 132, (64, 64, 4, 8)),    # 144 tiles: split until about 8 programs per SM
    ((1, 512, 4608, 50176), 132, (128, 128, 8, 8)),  # 512 channels: wide tiles, 8 warps
    ((1, 512, 4608, 50176), 16, (128, 128, 8, 1)),   # a small GPU is full without a split
    ((1, 64, 576, 960), 132, (64, 64, 4, 1)),        # 15 chunks: halves would be under 8 each
    ((32, 1, 9, 100352), 132, (16, 16, 4, 64)),      # depthwise: one-channel GEMMs, tiles of the least width
])
def test_weight_grad_config_splits_few_tiles_over_long_reductions(view: tuple[int, int, int, int], sms: int,
                                                                  want: tuple[int, int, int, int]) -> None:
    cfg = conv_grad.weight_grad_config(view, sms)
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.split_k) == want
    chunks = -(-view[3] // cfg.block_k)
    assert chunks // cfg.split_k >= 8


@pytest.mark.parametrize("row,want", [(56, 64), (224, 64), (64, 64), (28, 32), (30, 32), (14, 64), (None, 64)])
def test_weight_grad_chunk_runs_inside_output_rows(row: int | None, want: int) -> None:
    # 56 and 224: padded runs of 64; 28 and 30: of 32 (28 of 64 would waste half); 14 fits neither: flat
    assert conv_grad.weight_grad_chunk(row) == want
    sizes = {} if row is None else {"OW": row}
    assert conv_grad.weight_grad_config((1, 128, 1152, 64 * 28 * 28), 132, sizes).block_k == want


def test_dsl_kernel_rule_applies_on_a_gpu_unless_a_config_is_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from alcop_triton import dsl_kernels
    key = conv_grad.conv_weight_grad_kernel(2, torch.float16, (1, 1), (1, 1), (1, 1), 1)
    spec, inputs, out = dsl_kernels.dsl_te(key)
    env = {"N": 64, "C": 64, "CO": 64, "H": 56, "W": 56, "OH": 56, "OW": 56, "KH": 3, "KW": 3}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: SimpleNamespace(multi_processor_count=132))
    got = dsl_kernels._own_choice(spec, out, env, torch.device("cuda", 0))
    assert got == conv_grad.weight_grad_config((1, 64, 576, 64 * 56 * 56), 132, env)
    narrow = dsl_kernels._own_choice(spec, out, env | {"H": 28, "W": 28, "OH": 28, "OW": 28}, torch.device("cuda", 0))
    assert narrow is not None and narrow.block_k == 32   # the call's sizes reach the rule
    assert dsl_kernels._own_choice(spec, out, env, torch.device("cpu")) is None   # the interpreter's tiles
    with at.use_config(at.KernelConfig()):
        assert dsl_kernels._own_choice(spec, out, env, torch.device("cuda", 0)) is None


class SmallNet(nn.Module):
    """Conv (channels_last) + relu, linear + gelu, batched matmul and bmm: every alcop op."""

    def __init__(self, drop_in: bool) -> None:
        super().__init__()
        self.drop_in = drop_in
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 5 * 5, 8)
        self.proj = nn.Parameter(randn(8, 8, seed=7) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.drop_in:
            y = ops.conv2d(x, self.conv.weight, self.conv.bias, padding=1, activation="relu")
            y = ops.linear(y.flatten(1), self.fc.weight, self.fc.bias, activation="gelu")
            z = ops.matmul(y.unsqueeze(1), self.proj)
            return ops.bmm(z, self.proj.expand(x.shape[0], 8, 8)).squeeze(1)
        y = F.relu(self.conv(x))
        y = F.gelu(self.fc(y.flatten(1)))
        z = y.unsqueeze(1) @ self.proj
        return torch.bmm(z, self.proj.expand(x.shape[0], 8, 8)).squeeze(1)


def _train_step(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    y = model(x)
    y.pow(2).sum().backward()
    return y, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("mode", ["drop_in", "patched"])
def test_compile_fullgraph_small_model(mode: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = SmallNet(drop_in=mode == "drop_in")
    ref = SmallNet(drop_in=False)
    ref.load_state_dict(net.state_dict())
    x = randn(2, 3, 5, 5, seed=3).to(memory_format=torch.channels_last)
    want, want_grads = _train_step(ref, x)
    graphs: list[torch.fx.GraphModule] = []

    def aot_eager_recorded(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)  # the Dynamo graph; fullgraph=True makes it the only one
        return aot_eager(gm, example_inputs)

    compiled = torch.compile(net, fullgraph=True, backend=aot_eager_recorded)
    if mode == "patched":
        with patch.patched():
            got, got_grads = _train_step(compiled, x)
    else:
        got, got_grads = _train_step(compiled, x)
    assert_close(got, want.double())
    for g, w in zip(got_grads, want_grads):
        assert_close(g, w.double())
    assert len(graphs) == 1
    targets = {target_name(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    # Under compile, patch mode's wrappers route the functions (F.conv2d, F.linear, torch.bmm) through
    # the deciding ops (ops.traced); the ``@`` operator and Tensor methods are traced by Dynamo as
    # torch's own ops. Drop-ins called outside patch mode are alcop's, as in eager.
    routed = ({"alcop.routed_conv", "alcop.routed_linear", "alcop.routed_bmm"} if mode == "patched"
              else {"alcop.conv", "alcop.linear", "alcop.bmm", "alcop.mm"})
    assert routed <= targets, targets


def test_compile_dynamic_shapes() -> None:
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: ops.matmul(a, b).relu(), fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (5, 9, 12):
        a, b = randn(2, m, 7, seed=m), randn(7, m + 1, seed=m + 1)
        assert_close(f(a, b), torch.matmul(a.double(), b.double()).relu())
