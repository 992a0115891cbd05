"""Parity with torch for scalars and integer arguments: alpha/beta (inf, nan, 0, wrong types,
overflow), conv parameters as numpy ints or 0-d tensors, overlapping ``out=``, zero out-channels,
and strict mode judging the user's config rather than the library's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import alcop_triton as at
from alcop_triton import ops
from alcop_triton.errors import PipelineError

pytestmark = pytest.mark.interpreter


def _ref(i: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """beta * i + alpha * (a @ b) in float64, each term skipped when its factor is 0 (torch's rule)."""
    p = torch.matmul(a.double(), b.double())
    y = p * alpha if alpha != 0 else torch.zeros_like(p)
    return (y + i.double() * beta if beta != 0 else y).float()


@pytest.mark.parametrize("op", ["addmm", "baddbmm"])
@pytest.mark.parametrize("alpha, beta", [(float("inf"), 1.0), (float("-inf"), 0.5), (float("nan"), 1.0),
                                         (1.0, float("inf")), (2.0, float("nan")), (0.0, 2.0), (0.0, 0.0)])
def test_addmm_baddbmm_special_scalars(op: str, alpha: float, beta: float) -> None:
    g = torch.Generator().manual_seed(0)
    lead = (2,) if op == "baddbmm" else ()
    i, a, b = (torch.randn(lead + s, generator=g) for s in ((3, 5), (3, 7), (7, 5)))
    if alpha == 0:
        a[0, ...] = float("nan")  # ignored with the product, as torch ignores it
    y = getattr(ops, op)(i, a, b, alpha=alpha, beta=beta)
    torch.testing.assert_close(y, _ref(i, a, b, alpha, beta), equal_nan=True)
    if alpha == 0 and op == "addmm":
        torch.testing.assert_close(y, torch.addmm(i, a, b, alpha=alpha, beta=beta))
    # NOTE: torch's CPU baddbmm lets NaN through a 0 alpha (its CUDA path, through cuBLAS, does not);
    # alcop follows BLAS and torch's addmm: alpha == 0 ignores the product on every device.


@pytest.mark.parametrize("kw", [dict(alpha="2"), dict(beta="2"), dict(alpha=None), dict(alpha=torch.ones(1)),
                                dict(alpha=1e300), dict(beta=-1e300), dict(alpha=2j), dict(alpha=10 ** 400)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bad_scalars_raise_torchs_exception(kw: dict, dtype: torch.dtype) -> None:
    i, a, b = torch.ones(2, 3, dtype=dtype), torch.ones(2, 4, dtype=dtype), torch.ones(4, 3, dtype=dtype)
    with pytest.raises(Exception) as theirs:
        torch.addmm(i, a, b, **kw)
    with pytest.raises(theirs.type):
        ops.addmm(i, a, b, **kw)


@pytest.mark.parametrize("kw", [dict(alpha=np.float64(1.5)), dict(beta=torch.tensor(2.0)), dict(alpha=True),
                                dict(alpha=np.int64(3)), dict(alpha=1e10, beta=0)])
def test_scalars_torch_accepts(kw: dict) -> None:
    i, a, b = torch.randn(2, 3, dtype=torch.float16), torch.randn(2, 4, dtype=torch.float16), \
        torch.randn(4, 3, dtype=torch.float16)
    y = ops.addmm(i, a, b, **kw)
    alpha, beta = (float(kw.get(n, 1)) for n in ("alpha", "beta"))
    torch.testing.assert_close(y.float(), _ref(i, a, b, alpha, beta).half().float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("arg", ["stride", "padding", "dilation", "groups"])
@pytest.mark.parametrize("kind", [np.int64, lambda v: torch.tensor(v)])
def test_conv_int_arguments_as_numpy_ints_and_0d_tensors(nd: int, arg: str, kind: object) -> None:
    g = torch.Generator().manual_seed(nd)
    x = torch.randn((1, 4) + (5,) * nd, generator=g)
    w = torch.randn((4, 2 if arg == "groups" else 4) + (2,) * nd, generator=g)
    v = kind(2)  # type: ignore[operator]
    fn = getattr(ops, f"conv{nd}d")
    ref = getattr(F, f"conv{nd}d")(x, w, **{arg: 2})
    torch.testing.assert_close(fn(x, w, **{arg: v}), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [np.float64(2.0), torch.tensor(2.0), True, (1.5,)])
def test_conv_non_integer_arguments_are_type_errors(bad: object) -> None:
    x, w = torch.randn(1, 2, 6), torch.randn(2, 2, 3)
    with pytest.raises(TypeError):
        F.conv1d(x, w, stride=bad)
    with pytest.raises(TypeError):
        ops.conv1d(x, w, stride=bad)


@pytest.mark.parametrize("op, args, shape", [("matmul", ((3, 4), (4, 5)), (3, 5)), ("mm", ((3, 4), (4, 5)), (3, 5)),
                                             ("addmm", ((5,), (3, 4), (4, 5)), (3, 5))])
def test_overlapping_out_is_refused_like_torch(op: str, args: tuple, shape: tuple) -> None:
    ts = [torch.randn(s) for s in args]
    for fn in (getattr(torch, op), getattr(ops, op)):
        out = torch.zeros((1,) + shape[1:]).expand(shape)
        with pytest.raises(RuntimeError, match="single memory location"):
            fn(*ts, out=out)
        assert (out == 0).all()


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_with_zero_out_channels_raises_like_torch(nd: int) -> None:
    x, w = torch.randn((1, 2) + (4,) * nd), torch.randn((0, 2) + (2,) * nd)
    with pytest.raises(RuntimeError, match="expected weight to be at least 1 at dimension 0"):
        getattr(F, f"conv{nd}d")(x, w)
    with pytest.raises(RuntimeError, match="expected weight to be at least 1 at dimension 0"):
        getattr(ops, f"conv{nd}d")(x, w)


def test_strict_mode_does_not_judge_the_librarys_own_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCOP_STRICT", "1")
    a, b = torch.randn(5, 16), torch.randn(16, 7)  # one reduction chunk: the default 2 stages cannot be had
    torch.testing.assert_close(ops.matmul(a, b), a @ b)
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)  # K = 18
    torch.testing.assert_close(ops.conv2d(x, w), F.conv2d(x, w), rtol=1e-5, atol=1e-5)
    # What the user asks for is still judged.
    with at.use_config(at.KernelConfig(block_m=16, block_n=16, block_k=16, smem_stages=3)):
        with pytest.raises(PipelineError, match="clamped"):
            ops.matmul(a, b)
