"""Calling and building with bad arguments raises the documented exception types, before any launch.

User errors subclass what torch raises for the same mistake: TypeError (wrong type, dtype, argument
count), ValueError (shapes; ScheduleError is one), RuntimeError (devices); UnsupportedError is a
NotImplementedError. None of these tests launches a kernel.
"""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule, ScheduleError, te
from alcop_triton.kernels import matmul as km

S2 = KernelConfig(16, 16, 32, group_m=2, smem_stages=2)


@pytest.fixture(scope="module")
def mm32():
    inputs, out = km.matmul_te("float32", False)
    return at.build(Schedule.from_config(out, S2), inputs + [out])


@pytest.mark.parametrize("args, exc, pattern", [
    (lambda: (torch.randn(4, 5, 2), torch.randn(5, 3)), ValueError, r"argument 'A': expected a 2-d tensor"),
    (lambda: (torch.randn(4, 5), torch.randn(5, 3, dtype=torch.float64)), TypeError,
     "argument 'B': expected dtype float32, got float64"),
    (lambda: (torch.randn(4, 5), torch.randn(6, 3)), ValueError,
     r"argument 'B': dim 0 is 6 but K = 5 from an earlier argument"),
    (lambda: (torch.randn(4, 5), torch.randn(5, 3, device="meta")), RuntimeError,
     "Expected all tensors to be on the same device"),
    (lambda: (torch.randn(4, 5), [[1.0] * 3] * 5), TypeError, "argument 'B': expected a torch.Tensor, got list"),
    (lambda: (torch.randn(4, 5),), TypeError, r"takes 2 inputs \(A, B\) and optionally the output; got 1"),
    (lambda: (torch.randn(4, 5), torch.randn(5, 3), torch.empty(4, 4)), ValueError,
     r"argument 'C': dim 1 is 4 but N = 3"),
    (lambda: (torch.randn(4, 5), torch.randn(5, 3), torch.empty(4, 3, dtype=torch.float16)), TypeError,
     "argument 'C': expected dtype float32, got float16"),
    (lambda: (torch.randn(4, 5), torch.randn(5, 3), torch.empty(4, 3, device="meta")), RuntimeError,
     r"same device.*argument 'C'"),
], ids=["ndim", "dtype", "shapes", "device", "not_tensor", "count", "out_shape", "out_dtype", "out_device"])
def test_bad_input_raises_documented_types(mm32, args, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        mm32(*args())


def test_bad_build_arguments() -> None:
    inputs, out = km.matmul_te("float32", False, km.Epilogue(bias=True))
    s = Schedule.from_config(out, S2)
    with pytest.raises(ScheduleError, match="the last argument must be the output 'Out'"):
        at.build(s, inputs)
    with pytest.raises(ScheduleError, match=r"reads \['bias'\] but they are not in the argument list"):
        at.build(s, inputs[:2] + [out])
    C = s.reduction
    with pytest.raises(ScheduleError, match="argument 'C' is computed"):
        at.build(s, inputs + [C, out])
    with pytest.raises(ScheduleError, match=r"tile\(sub_k=16\) splits the chunk .* no buffer is cached into 'register'"):
        plain = Schedule(out)
        plain.tile(16, 16, 32, sub_k=16)
        at.build(plain, inputs + [out])


def test_unsupported_bodies_raise_unsupported_error() -> None:
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), "float32", "A")
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    add = te.compute((M, N), lambda i, j: te.sum(A[i, k] + B[k, j], axis=k), "C")
    with pytest.raises(at.UnsupportedError, match="not a product of two operands"):
        at.build(Schedule.from_config(add, S2), [A, B, add])
    both = te.compute((M, N), lambda i, j: te.sum((A[i, k] * A[j, k]) * B[k, j], axis=k), "D")
    with pytest.raises(at.UnsupportedError):
        at.build(Schedule.from_config(both, S2), [A, B, both])
    Ai = te.placeholder((M, K), "int32", "Ai")
    Bi = te.placeholder((K, N), "int32", "Bi")
    ints = te.compute((M, N), lambda i, j: te.sum(Ai[i, k] * Bi[k, j], axis=k), "E")
    with pytest.raises(at.UnsupportedError, match="tl.dot operands of dtype int32"):
        at.build(Schedule.from_config(ints, S2), [Ai, Bi, ints])


def test_batch_grid_limit(kit) -> None:
    kern = kit.matmul("float32", S2, batched=True)
    with pytest.raises(ValueError, match="65536 batch programs exceed CUDA's grid limit of 65535"):
        kern(torch.randn(65536, 1, 1), torch.randn(65536, 1, 1))
