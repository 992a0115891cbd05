"""Alignment known at launch: sizes and strides that are multiples of 16 bytes but not of 16 elements.

Triton specialises integer arguments only on divisibility by 16. Without the kernel stating the
rest, a K or a row stride of 1000 halves made every masked load a 2-byte load (no cp.async, no
pipelining, register spills): 1000^3 ran 40x slower than cuBLAS on the H100.
"""

from __future__ import annotations

import pytest
import torch

from alcop_triton import KernelConfig, codegen
from alcop_triton.build import _multiple_of
from alcop_triton.errors import CodegenError

CFG = KernelConfig(16, 16, 32, group_m=2, smem_stages=2)


def test_hints_cover_multiples_of_the_vector_only() -> None:
    scalars = [("M", 24), ("N", 32), ("K", 70), ("stride_A_0", 72), ("stride_B_0", 0)]
    # 16 already specialised by Triton; 70 is not a multiple of 8; a broadcast (0) stride needs nothing
    assert _multiple_of(scalars, 8) == (("M", 8), ("stride_A_0", 8))
    assert _multiple_of([("K", 36)], 4) == (("K", 4),)
    assert _multiple_of([("K", 36)], 1) == ()


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype,m,n,k,hinted", [
    ("float16", 24, 40, 72, {"M", "N", "K", "stride_A_0", "stride_B_0", "stride_C_0"}),
    ("float16", 23, 40, 70, {"N", "stride_B_0", "stride_C_0"}),
    ("float32", 20, 12, 36, {"M", "N", "K", "stride_A_0", "stride_B_0", "stride_C_0"}),
])
def test_hinted_kernels_are_correct_and_state_the_hints(dtype: str, m: int, n: int, k: int, hinted: set[str],
                                                         kit) -> None:
    kern = kit.matmul(dtype, CFG)
    g = torch.Generator().manual_seed(m * 1000 + k)
    a, b = kit.rand((m, k), dtype, g), kit.rand((k, n), dtype, g)
    out = kit.poisoned((m, n), dtype)
    kern(a, b, out)
    kit.assert_close(out, a.double() @ b.double(), dtype, f"{m}x{n}x{k} {dtype}")
    vec = 8 if dtype == "float16" else 4
    stated = {line.split(" = ")[0].strip() for line in kern.source.splitlines() if f"// {vec} * {vec}" in line}
    assert stated == hinted


def test_codegen_rejects_hints_on_unknown_names_or_non_powers_of_two(kit) -> None:
    kern = kit.matmul("float16", CFG)
    k = kern._kernel()
    for bad in ({"Q": 8}, {"K": 6}, {"K": 1}):
        with pytest.raises(CodegenError, match="multiple_of hint"):
            codegen.generate(k.replace(multiple_of=bad), "header")
