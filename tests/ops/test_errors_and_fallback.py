"""Bad input raises the exception type torch raises; unsupported input falls back (or raises in strict mode)."""

from __future__ import annotations

import logging
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, randn

from alcop_triton import fallback
from alcop_triton import ops
from alcop_triton.errors import UnsupportedError

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)

A, B = randn(3, 4), randn(4, 5, seed=1)
X, W = randn(2, 4, 8, 8), randn(6, 4, 3, 3, seed=1)

# (label, torch's function, ours, args, kwargs): each must raise, and ours the same exception type.
BAD: list[tuple[str, Callable[..., Any], Callable[..., Any], tuple, dict]] = [
    ("matmul shape", torch.matmul, ops.matmul, (A, randn(5, 6)), {}),
    ("matmul 0-d", torch.matmul, ops.matmul, (torch.tensor(1.0), A), {}),
    ("matmul dtype", torch.matmul, ops.matmul, (A, B.half()), {}),
    ("matmul dtype f64", torch.matmul, ops.matmul, (A, B.double()), {}),
    ("matmul not a tensor", torch.matmul, ops.matmul, (1, A), {}),
    ("matmul list", torch.matmul, ops.matmul, ([1.0], A), {}),
    ("matmul batch broadcast", torch.matmul, ops.matmul, (randn(2, 3, 4), randn(3, 4, 5)), {}),
    ("matmul out dtype", torch.matmul, ops.matmul, (A, B), {"out": torch.empty(3, 5, dtype=torch.float64)}),
    ("matmul out + grad", torch.matmul, ops.matmul, (A.clone().requires_grad_(), B), {"out": torch.empty(3, 5)}),
    ("mm 3-d", torch.mm, ops.mm, (randn(2, 3, 4), B), {}),
    ("mm 1-d", torch.mm, ops.mm, (randn(4), B), {}),
    ("mm shape", torch.mm, ops.mm, (A, randn(5, 6)), {}),
    ("mm dtype", torch.mm, ops.mm, (A, B.bfloat16()), {}),
    ("bmm 2-d", torch.bmm, ops.bmm, (A, A), {}),
    ("bmm batch", torch.bmm, ops.bmm, (randn(2, 3, 4), randn(3, 4, 5)), {}),
    ("bmm shape", torch.bmm, ops.bmm, (randn(2, 3, 4), randn(2, 5, 5)), {}),
    ("bmm dtype", torch.bmm, ops.bmm, (randn(2, 3, 4), randn(2, 4, 5).half()), {}),
    ("addmm input shape", torch.addmm, ops.addmm, (randn(4), A, B), {}),
    ("baddbmm input shape", torch.baddbmm, ops.baddbmm, (randn(2, 2, 3, 5), randn(2, 3, 4), randn(2, 4, 5)), {}),
    ("linear shape", F.linear, ops.linear, (A, randn(5, 3)), {}),
    ("linear bias shape", F.linear, ops.linear, (A, randn(5, 4), randn(4)), {}),
    ("linear 1-d weight with bias", F.linear, ops.linear, (A, randn(4), torch.tensor(1.0)), {}),
    ("linear 3-d weight", F.linear, ops.linear, (A, randn(2, 5, 4)), {}),
    ("linear 0-d input", F.linear, ops.linear, (torch.tensor(1.0), randn(5, 4)), {}),
    ("linear dtype", F.linear, ops.linear, (A, randn(5, 4).half()), {}),
    ("linear bias dtype", F.linear, ops.linear, (A, randn(5, 4), randn(5).half()), {}),
    ("linear weight type", F.linear, ops.linear, (A, "w"), {}),
    ("conv padding string", F.conv2d, ops.conv2d, (X, W), {"padding": "full"}),
    ("conv same + stride", F.conv2d, ops.conv2d, (X, W), {"padding": "same", "stride": 2}),
    ("conv groups mismatch", F.conv2d, ops.conv2d, (X, W), {"groups": 3}),
    ("conv groups 0", F.conv2d, ops.conv2d, (X, W), {"groups": 0}),
    ("conv groups channels", F.conv2d, ops.conv2d, (X, randn(6, 4, 3, 3)), {"groups": 2}),
    ("conv groups float", F.conv2d, ops.conv2d, (X, W), {"groups": 1.0}),
    ("conv input 2-d", F.conv2d, ops.conv2d, (randn(8, 8), W), {}),
    ("conv input 5-d", F.conv2d, ops.conv2d, (randn(1, 2, 4, 8, 8), W), {}),
    ("conv weight 3-d", F.conv2d, ops.conv2d, (X, randn(6, 4, 3)), {}),
    ("conv channels", F.conv2d, ops.conv2d, (X, randn(6, 3, 3, 3)), {}),
    ("conv negative padding", F.conv2d, ops.conv2d, (X, W), {"padding": -1}),
    ("conv stride 0", F.conv2d, ops.conv2d, (X, W), {"stride": 0}),
    ("conv dilation 0", F.conv2d, ops.conv2d, (X, W), {"dilation": 0}),
    ("conv stride length", F.conv2d, ops.conv2d, (X, W), {"stride": (1, 1, 1)}),
    ("conv stride float", F.conv2d, ops.conv2d, (X, W), {"stride": 1.5}),
    ("conv kernel > input", F.conv2d, ops.conv2d, (randn(1, 4, 2, 2), W), {}),
    ("conv dtype", F.conv2d, ops.conv2d, (X, W.half()), {}),
    ("conv bias shape", F.conv2d, ops.conv2d, (X, W, randn(5)), {}),
    ("conv bias dtype", F.conv2d, ops.conv2d, (X, W, randn(6).half()), {}),
    ("conv weight None", F.conv2d, ops.conv2d, (X, None), {}),
    ("conv1d input 4-d", F.conv1d, ops.conv1d, (X, randn(6, 4, 3)), {}),
    ("conv3d padding length", F.conv3d, ops.conv3d, (randn(1, 2, 4, 4, 4), randn(2, 2, 3, 3, 3)), {"padding": (1, 1)}),
]


@pytest.mark.parametrize("label,theirs,ours,args,kwargs", BAD, ids=[b[0] for b in BAD])
def test_error_types_match_torch(label: str, theirs: Callable[..., Any], ours: Callable[..., Any], args: tuple,
                                 kwargs: dict) -> None:
    with pytest.raises(Exception) as torch_err:
        theirs(*args, **kwargs)
    with pytest.raises(Exception) as our_err:
        ours(*args, **kwargs)
    assert type(our_err.value) is type(torch_err.value), (our_err.value, torch_err.value)


def test_error_messages_name_argument_value_and_rule() -> None:
    with pytest.raises(RuntimeError, match=r"groups=3.*weight of size \[6, 4, 3, 3\].*12 channels"):
        ops.conv2d(X, W, groups=3)
    with pytest.raises(RuntimeError, match=r"input.shape=\(3, 4\) and other.shape=\(5, 6\).*last dim \(4\)"):
        ops.matmul(A, randn(5, 6))
    with pytest.raises(RuntimeError, match=r"Invalid padding string: 'full'"):
        ops.conv2d(X, W, padding="full")
    with pytest.raises(ValueError, match=r"activation='swish'"):
        ops.linear(A, randn(5, 4), activation="swish")


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.complex64])
def test_unsupported_dtype_falls_back_logged_once(dtype: torch.dtype, fallbacks: list,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    a, b = (randn(3, 4, seed=2) * 3).to(dtype), (randn(4, 5, seed=3) * 3).to(dtype)
    fallback._LOGGED.discard(("matmul", f"dtype {fallback.dtype_name(dtype)}: kernels are generated for float16, "
                                        "bfloat16, float32"))
    with caplog.at_level(logging.WARNING, logger="alcop_triton"):
        for _ in range(3):
            got = ops.matmul(a, b)
    assert torch.equal(got, torch.matmul(a, b))
    assert fallbacks and all(op == "matmul" and fallback.dtype_name(dtype) in r for op, r in fallbacks)
    logged = [r for r in caplog.records if "falls back to torch" in r.getMessage()]
    assert len(logged) == 1 and fallback.dtype_name(dtype) in logged[0].getMessage()


def test_fallbacks_for_every_drop_in(fallbacks: list) -> None:
    a, b = randn(3, 4).double(), randn(4, 5, seed=1).double()
    x, w = randn(1, 2, 5, 5).double(), randn(3, 2, 3, 3, seed=1).double()
    assert torch.allclose(ops.mm(a, b), a @ b)
    assert torch.allclose(ops.bmm(a[None], b[None]), (a @ b)[None])
    assert torch.allclose(ops.addmm(b[0], a, b, beta=2.0), torch.addmm(b[0], a, b, beta=2.0))
    assert torch.allclose(ops.linear(a, b.t(), activation="gelu"), F.gelu(a @ b))
    assert torch.allclose(ops.conv2d(x, w, padding="same", activation="relu"), F.conv2d(x, w, padding="same").relu())
    meta = ops.conv2d(x.float().to("meta"), w.float().to("meta"))  # a device neither CUDA nor CPU
    assert meta.device.type == "meta" and meta.shape == (1, 3, 3, 3)
    assert {op for op, _ in fallbacks} == {"mm", "bmm", "addmm", "linear", "conv2d"}
    assert any("device meta" in r for _, r in fallbacks)


def test_strict_mode_raises(monkeypatch: pytest.MonkeyPatch, fallbacks: list) -> None:
    monkeypatch.setenv("ALCOP_STRICT", "1")
    with pytest.raises(UnsupportedError, match=r"matmul.*dtype float64.*ALCOP_STRICT=1"):
        ops.matmul(randn(3, 4).double(), randn(4, 5).double())
    with pytest.raises(NotImplementedError):  # UnsupportedError is a NotImplementedError
        ops.conv1d(randn(1, 2, 5).double(), randn(3, 2, 3).double())


def test_custom_op_direct_call_falls_back_inside(fallbacks: list) -> None:
    # torch.ops.alcop.* called directly with an unsupported dtype compute with torch too,
    # forward and backward (the input gradient is a conv per input phase; the weight gradient is an mm)
    x = randn(1, 2, 6, 6).double().requires_grad_()
    w = randn(3, 2, 3, 3, seed=1).double().requires_grad_()
    y = torch.ops.alcop.conv(x, w, None, [2, 2], [1, 0], [1, 0], [1, 1], 1, "gelu")
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    ref = F.gelu(F.conv2d(F.pad(x2, [0, 0, 1, 1]), w2, stride=2))  # H padded (1, 1), W (0, 0)
    rx, rw = torch.autograd.grad(ref.sum(), (x2, w2))
    assert torch.allclose(y, ref) and torch.allclose(gx, rx) and torch.allclose(gw, rw)
    assert {op for op, _ in fallbacks} == {"conv", "mm"}


def test_bad_out_and_requires_grad() -> None:
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        ops.mm(A.clone().requires_grad_(), B, out=torch.empty(3, 5))
    with torch.no_grad():  # allowed without grad mode, as in torch
        out = torch.full((3, 5), float("nan"))
        ops.mm(A.clone().requires_grad_(), B, out=out)
    assert_close(out, A.double() @ B.double())


def test_a_fallback_traces_into_a_full_graph(fallbacks: list) -> None:
    # The fallback's log call is marked constant for torch.compile by hand (importing torch._dynamo
    # to mark it would double alcop_triton's import time): a full graph must still trace it.
    a, b = randn(3, 4).double(), randn(4, 5, seed=1).double()
    f = torch.compile(lambda a, b: ops.matmul(a, b), fullgraph=True, backend="eager")
    assert torch.equal(f(a, b), torch.matmul(a, b))


def test_importing_alcop_triton_leaves_torch_dynamo_unimported() -> None:
    import subprocess
    import sys

    code = "import sys, alcop_triton, alcop_triton.cli; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
