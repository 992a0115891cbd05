"""Kernels that would build and then fail at every call are refused at build, naming the name or constant,
its value and the rule: names equal to Triton's launch options, integer constants outside int64, index and
size constants outside int32."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

import alcop_triton as at
from alcop_triton import codegen, te
from alcop_triton.errors import ScheduleError

CFG = at.KernelConfig(block_m=16, block_n=16, block_k=16, smem_stages=1)


def _mm(c: object = 0, offset: object = 0, names: tuple[str, str] = ("A", "B")) -> list[te.Tensor]:
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A, B = te.placeholder((M, K), "float32", names[0]), te.placeholder((K, N), "float32", names[1])
    bias = te.placeholder((N + 8,), "float32", "bias")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    D = te.compute((M, N), lambda i, j: C[i, j] + bias[j + offset] + c, "D")
    return [A, B, bias, D]


@pytest.mark.parametrize("name", ["num_warps", "num_stages", "num_ctas", "maxnreg", "grid", "warmup", "debug",
                                  "enable_fp_fusion", "launch_pdl"])
@pytest.mark.parametrize("role", ["placeholder", "var", "compute", "axis", "reduce_axis"])
def test_a_launch_option_name_is_refused_at_build(name: str, role: str) -> None:
    make = {"placeholder": lambda: te.placeholder((4,), "float32", name), "var": lambda: te.var(name),
            "compute": lambda: te.compute((4,), lambda i: i * 1.0, name),
            "axis": lambda: te.compute((4,), lambda i: i * 1.0, "T", axis_names=[name]),
            "reduce_axis": lambda: te.reduce_axis(4, name)}[role]
    with pytest.raises(ScheduleError, match=rf"{name!r}.*Triton launch option"):
        make()


def test_the_launch_options_cover_tritons() -> None:
    """A Triton upgrade that adds a launch option fails here, not at a user's call."""
    from triton.backends.nvidia.compiler import CUDAOptions
    from triton.runtime.jit import JITFunction
    run = [p.name for p in inspect.signature(JITFunction.run).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert {f.name for f in dataclasses.fields(CUDAOptions)} | set(run) <= codegen.LAUNCH_OPTIONS


@pytest.mark.parametrize("value", [2 ** 63, -2 ** 63 - 1, 10 ** 30])
def test_an_integer_constant_outside_int64_is_refused_at_build(value: int) -> None:
    with pytest.raises(ScheduleError, match=rf"compute 'D'.*integer constant {value} is outside int64's range.*int64"):
        _mm(c=value)


@pytest.mark.parametrize("offset", [2 ** 31, -2 ** 31 - 1, 2 ** 40])
def test_an_index_offset_outside_int32_is_refused_at_build(offset: int) -> None:
    with pytest.raises(ScheduleError, match=rf"compute 'D'.*bias\[.*integer constant {offset} is outside int32's "
                                            r"range.*index and size arithmetic is int32"):
        _mm(offset=offset)


def test_size_constants_and_typed_constants_are_range_checked() -> None:
    with pytest.raises(ScheduleError, match=r"placeholder 'X': shape entry .*2147483648.*int32"):
        te.placeholder((te.var("M") + 2 ** 31,), "float32", "X")
    with pytest.raises(ScheduleError, match=r"integer constant 4294967296 is outside int32's range.*dtype int32"):
        te.compute((4,), lambda i: i + te.const(2 ** 32, "int32"), "T")


@pytest.mark.interpreter
def test_constants_in_range_still_build_and_run() -> None:
    args = _mm(c=2 ** 62, offset=3)
    kern = at.build(at.Schedule.from_config(args[-1], CFG), args)
    a, b, bias = torch.randn(5, 7), torch.randn(7, 4), torch.randn(12)
    torch.testing.assert_close(kern(a, b, bias), a @ b + bias[3:7] + 2.0 ** 62)
