"""Reduction chunks inside one padded run of the innermost reduction axis (``loop_ir.padded_run``).

A conv weight gradient reduces over (n, oh, ow); with the sizes compiled in and rows a little narrower
than the chunk, each chunk is one row's run (n, oh scalars, ow masked past the row) instead of every lane
dividing the flat index. Checked in Triton's CPU interpreter against torch in float32 from fp16 inputs,
outputs poisoned: rows of 14 and 15 in chunks of 16, 30 in chunks of 32, stride 2, split-K in one and
two levels; and where the padding would waste more, the flat form stays.
"""

from __future__ import annotations

import pytest
import torch

from alcop_triton.build import build
from alcop_triton.fastpath import launch_kernel
from alcop_triton.kernels.conv_grad import conv_weight_grad_te, weight_grad_static
from alcop_triton.loop_ir import padded_run, run_extent
from alcop_triton.records import KernelConfig
from alcop_triton.schedule import Schedule


def test_padded_run_takes_rows_that_fill_seven_eighths_of_their_chunks() -> None:
    assert padded_run(("N", "56", "56"), 64) == (56, 64)
    assert padded_run(("N", "28", "28"), 32) == (28, 32)
    assert padded_run(("N", "224", "224"), 64) == (224, 256)
    assert padded_run(("N", "28", "28"), 64) is None      # 28 of 64: the flat form
    assert padded_run(("N", "7", "7"), 16) is None
    assert padded_run(("N", "64", "64"), 64) is None      # a whole run: run_extent's form
    assert run_extent(("N", "64", "64"), 64) == 64
    assert padded_run(("N", "OH", "OW"), 64) is None      # sizes at run time
    assert padded_run(("56",), 64) is None                # one axis: nothing to make scalar


def _weight_grad(nb: int, h: int, w: int, c: int, co: int, stride: int, bk: int, split: int) -> tuple[str, float]:
    inputs, out_te = conv_weight_grad_te(2, "float16", (stride, stride), (1, 1), (1, 1), 1)
    cfg = KernelConfig(block_m=16, block_n=16, block_k=bk, group_m=8, num_warps=4, smem_stages=2, split_k=split)
    kern = build(Schedule.from_config(out_te, cfg, m_axes=("co",), n_axes=("kh", "kw", "c")), inputs + [out_te],
                 static=weight_grad_static(2, True))
    g = torch.Generator().manual_seed(h * 100 + w + split)
    x = torch.randn(nb, c, h, w, generator=g).half().to(memory_format=torch.channels_last)
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    dy = torch.randn(nb, co, oh, ow, generator=g).half().to(memory_format=torch.channels_last)
    wt = torch.empty(co, c, 3, 3, dtype=torch.float16).to(memory_format=torch.channels_last)
    out = torch.full((1, co, c, 3, 3), float("nan"), dtype=torch.float16)
    launch_kernel(kern, [dy, x, wt, out])
    want = torch.nn.grad.conv2d_weight(x.float(), (co, c, 3, 3), dy.float(), stride=stride, padding=1)
    assert not torch.isnan(out).any()
    return kern.source, float((out[0].float() - want).norm() / want.norm())


@pytest.mark.interpreter
@pytest.mark.parametrize("nb,h,w,stride,bk,split,padded", [
    (2, 6, 14, 1, 16, 1, True),     # 14 of 16
    (3, 5, 15, 1, 16, 3, True),     # 15 of 16, split in one level
    (2, 4, 30, 1, 32, 2, True),     # 30 of 32
    (2, 3, 30, 1, 16, 3, True),     # 30 of 32 in chunks of 16: two chunks per row
    (2, 9, 28, 2, 16, 10, True),    # stride 2: 14-wide output rows; split in two levels
    (2, 6, 10, 1, 16, 2, False),    # 10 of 16: the flat form
], ids=["14of16", "15of16_split3", "30of32", "30of32_two_chunks", "stride2_split10", "10of16_flat"])
def test_weight_gradient_in_padded_runs_matches_torch(nb: int, h: int, w: int, stride: int, bk: int, split: int,
                                                      padded: bool) -> None:
    src, err = _weight_grad(nb, h, w, 16, 16, stride, bk, split)
    assert err < 1e-2, err
    assert ("rewrite (padded run)" in src) == padded
    if padded:  # no lane divides the flat reduction index
        assert "offs_k" not in src
