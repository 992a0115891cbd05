"""On a CUDA GPU of sm90 or later: the warp-specialized GEMM (``kernels/matmul_ws.py``, ``async_copy="ws"``).

Checked against float64 on odd sizes in all four layouts and both dtypes, with bias, every activation and
a residual, outputs poisoned; through ``fastpath.launch_kernel``'s prebound launch on a second set of buffers (each call's
descriptors rebuilt at its tensors' addresses); through the drop-ins eagerly and replayed in a CUDA graph;
a misaligned operand and an epilogue the kernel does not apply run the "tma" twin.
"""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import KernelConfig, fastpath
from alcop_triton.kernels import matmul as km
from alcop_triton.kernels.matmul_ws import WarpSpecializedGemm, ws_configs

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1


@pytest.fixture(autouse=True)
def hopper() -> None:
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the warp-specialized kernel needs TMA, wgmma and warp specialization (sm90)")


def _operands(m: int, n: int, k: int, layout: str, dtype: str, kit) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(kit.seed(m, n, k, layout, dtype))
    a = kit.rand((m, k), dtype, g, "cuda") if layout[0] == "n" else kit.rand((k, m), dtype, g, "cuda").t()
    b = kit.rand((k, n), dtype, g, "cuda") if layout[1] == "n" else kit.rand((n, k), dtype, g, "cuda").t()
    return a, b / k ** 0.5


def _name(launch) -> str:
    return getattr(launch.jit, "fn", launch.jit).__name__


@pytest.mark.parametrize("config", ws_configs("float16"), ids=str)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matches_float64(config: KernelConfig, layout: str, dtype: str, kit) -> None:
    m, n, k = 1000, 776, 520
    a, b = _operands(m, n, k, layout, dtype, kit)
    kern = km.compiled(dtype, 0, km.Epilogue(), config)
    assert isinstance(kern, WarpSpecializedGemm)
    out = kit.poisoned((m, n), dtype, "cuda")
    launch, _ = kern.bind(a, b, out)
    assert _name(launch).startswith("hopper_gemm_")  # the generated kernel, not the twin
    launch()
    kit.assert_close(out, a.double() @ b.double(), dtype, f"{config} {layout}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bias_relu_and_the_prebound_launch_on_other_buffers(dtype: str, kit) -> None:
    m, n, k = 777, 520, 264
    cfg = ws_configs(dtype)[0]
    kern = km.compiled(dtype, 0, km.Epilogue(bias=True, activation="relu"), cfg)
    for trial in range(2):  # the second call replays the prebound launch with new addresses
        a, b = _operands(m + 0, n, k, "nt", dtype, kit)
        a, b = a * (trial + 1), b
        bias = kit.rand((n,), dtype, torch.Generator().manual_seed(trial), "cuda")
        out = kit.poisoned((m, n), dtype, "cuda")
        fastpath.launch_kernel(kern, [a, b, bias, out])
        ref = torch.relu(a.double() @ b.double() + bias.double())
        kit.assert_close(out, ref, dtype, f"bias+relu call {trial}")


@pytest.mark.parametrize("activation", ["gelu", "silu", "tanh", "sigmoid", None])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_activation_with_bias_and_residual(activation: str | None, dtype: str, kit) -> None:
    m, n, k = 515, 392, 200
    a, b = _operands(m, n, k, "nt", dtype, kit)
    g = torch.Generator().manual_seed(kit.seed(m, activation))
    bias, res = kit.rand((n,), dtype, g, "cuda"), kit.rand((m, n), dtype, g, "cuda")
    for cfg in (ws_configs(dtype)[1], ws_configs(dtype)[3]):  # ping-pong, cooperative with 4 epilogue slices
        kern = km.compiled(dtype, 0, km.Epilogue(bias=True, activation=activation, residual=True), cfg)
        out = kit.poisoned((m, n), dtype, "cuda")
        launch, _ = kern.bind(a, b, bias, res, out)
        assert _name(launch).startswith("hopper_gemm_")
        launch()
        z = a.double() @ b.double() + bias.double()
        ref = (getattr(torch.nn.functional, activation)(z) if activation else z) + res.double()
        kit.assert_close(out, ref, dtype, f"{cfg} {activation} + residual")


def test_drop_ins_eagerly_and_in_a_cuda_graph(kit) -> None:
    a, b = _operands(1024, 768, 512, "nt", "float16", kit)
    x, w = a, b.t()  # linear: weight (out_features, in_features) as stored
    ref = a.double() @ b.double()
    with at.use_config(ws_configs("float16")[2]):
        kit.assert_close(at.matmul(a, b), ref, "float16", "matmul")
        kit.assert_close(at.linear(x, w), ref, "float16", "linear")
        kit.assert_close(at.linear(x, w, activation="gelu"), torch.nn.functional.gelu(ref), "float16", "linear+gelu")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = at.matmul(a, b)
        got.fill_(float("nan"))
        a.mul_(2)
        graph.replay()
    kit.assert_close(got, 2 * ref, "float16", "replayed in a graph")


def test_a_misaligned_operand_and_a_scaled_residual_run_the_tma_twin(kit) -> None:
    a, b = _operands(300, 200, 136, "nn", "float16", kit)
    shifted = torch.empty(a.numel() + 1, dtype=a.dtype, device="cuda")[1:].view(a.shape)
    shifted.copy_(a)
    kern = km.compiled("float16", 0, km.Epilogue(), ws_configs("float16")[0])
    launch, out = kern.bind(shifted, b)
    assert not kern.runs_here((shifted, b, out)) and not _name(launch).startswith("hopper_gemm_")
    launch()
    kit.assert_close(out, a.double() @ b.double(), "float16", "misaligned: tma twin")
    res = torch.randn(300, 200, device="cuda", dtype=torch.float16)
    kern2 = km.compiled("float16", 0, km.Epilogue(residual=True, beta=0.5), ws_configs("float16")[0])
    launch, out = kern2.bind(a, b, res)
    assert not _name(launch).startswith("hopper_gemm_")
    launch()
    kit.assert_close(out, a.double() @ b.double() + 0.5 * res.double(), "float16", "scaled residual: tma twin")
