"""The host side without a GPU: refusals with torch's exception types, stored layouts, TMA-ready copies,
launch arguments and grids."""

from __future__ import annotations

import pytest
import torch

from alcop_triton.hopper import HopperConfig
from alcop_triton.hopper.emit import emit
from alcop_triton.hopper.launch import _operand, grid, launch_args, matmul, stored_layout


@pytest.mark.parametrize("a, b, exc, word", [
    (torch.zeros(4, 4, dtype=torch.float16), [[1.0]], TypeError, "must be tensors"),
    (torch.zeros(4, dtype=torch.float16), torch.zeros(4, 4, dtype=torch.float16), ValueError, "2-d"),
    (torch.zeros(4, 5, dtype=torch.float16), torch.zeros(4, 4, dtype=torch.float16), RuntimeError, "a.shape[1]"),
    (torch.zeros(4, 4), torch.zeros(4, 4), TypeError, "torch.float32"),
    (torch.zeros(4, 4, dtype=torch.float16), torch.zeros(4, 4, dtype=torch.bfloat16), TypeError, "both"),
    (torch.zeros(4, 4, dtype=torch.float16), torch.zeros(4, 4, dtype=torch.float16), RuntimeError, "CUDA"),
])
def test_refusals(a, b, exc, word) -> None:
    with pytest.raises(exc) as err:
        matmul(a, b)
    assert word in str(err.value)


def test_stored_layouts_and_padded_copies() -> None:
    x = torch.randn(6, 10).half()
    assert stored_layout(x) == "n" and stored_layout(x.t()) == "t"
    assert stored_layout(x[:, ::2]) is None
    ok, lay = _operand(torch.randn(16, 8).half().t())
    assert lay == "t"
    odd = torch.randn(5, 7).half()  # rows of 14 bytes: TMA needs 16-byte strides
    got, lay = _operand(odd)
    assert lay == "n" and got.stride() == (8, 1) and torch.equal(got, odd)
    got, lay = _operand(odd.t())
    assert lay == "n" and torch.equal(got, odd.t())


def test_launch_arguments_describe_the_stored_operands() -> None:
    cfg = HopperConfig(consumers=2, policy="pingpong", epilogue_subtile=2)
    ks = emit(cfg, "float16", "tn", bias=True)
    a = torch.zeros(48, 40, dtype=torch.float16).t()  # (40, 48) math, stored (48, 40): "t"
    b = torch.zeros(48, 24, dtype=torch.float16)
    c, bias = torch.zeros(40, 24, dtype=torch.float16), torch.zeros(24, dtype=torch.float16)
    args, opts = launch_args(ks, a, b, c, bias)
    assert args[:4] == (a, b, bias, c)  # the tensors first, as runtime.prebind binds them
    a_d, b_d, c_d = args[4:7]
    assert list(a_d.shape) == [48, 40] and list(a_d.block_shape) == [64, 128]
    assert list(b_d.block_shape) == [64, 128] and list(c_d.block_shape) == [128, 64]
    assert args[7:] == (40, 24, 48) and opts == {"num_warps": 4, "maxnreg": 168}
    assert grid(cfg, 8192, 8192, 132) == (132, ) and grid(cfg.replace(policy="cooperative", persistent=False),
                                                          1000, 1000, 132) == (64, )
