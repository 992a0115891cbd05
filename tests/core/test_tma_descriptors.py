"""TMA copies through launcher-built descriptors, run in the interpreter: outputs stored by TMA in
either storage order, batched epilogues, and the pointer fallback when a tensor breaks TMA's rules.

(The descriptors' encoding for the compiled launcher is tested in test_prebind.py; on a GPU the same
kernels run in tests/gpu.)"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from alcop_triton import KernelConfig
from alcop_triton.kernels import matmul as km

build_mod = importlib.import_module("alcop_triton.build")
interpreter = pytest.mark.interpreter

TMA = KernelConfig(16, 16, 32, group_m=2, smem_stages=2, async_copy="tma")


@interpreter
@pytest.mark.parametrize("column_major", [False, True], ids=["row_major_out", "column_major_out"])
def test_output_stored_by_tma_in_its_storage_order(column_major: bool, kit) -> None:
    m, n, k = 40, 24, 48   # partial tiles in M and N: the store clips them
    g = torch.Generator().manual_seed(kit.seed("tma-store", column_major))
    a, b = kit.rand((m, k), "float16", g), kit.rand((k, n), "float16", g)
    out = kit.poisoned((n, m), "float16").t() if column_major else kit.poisoned((m, n), "float16")
    kern = kit.matmul("float16", TMA)
    assert kern(a, b, out) is out
    kit.assert_close(out, a.double() @ b.double(), "float16", f"column_major={column_major}")
    store = "tl.trans(out.to(C.dtype.element_ty))" if column_major else "out.to(C.dtype.element_ty))"
    assert "out_desc.store([" in kern.source and store in kern.source


@interpreter
def test_batched_epilogue_stored_by_tma(kit) -> None:
    ep = km.Epilogue(bias=True, activation="gelu", residual=True)
    kern = kit.matmul("float32", TMA, batched=True, ep=ep)
    g = torch.Generator().manual_seed(kit.seed("tma-bmm-epilogue"))
    a, b = kit.rand((3, 33, 64), "float32", g), kit.rand((3, 64, 20), "float32", g)
    bias, res = kit.rand((20,), "float32", g), kit.rand((3, 33, 20), "float32", g)
    out = kit.poisoned((3, 33, 20), "float32")
    kern(a, b, bias, res, out)
    ref = F.gelu(a.double() @ b.double() + bias.double()) + res.double()
    kit.assert_close(out, ref, "float32", "bmm + bias + gelu + residual")
    assert "out_desc.store([b, pid_m * BLOCK_M, pid_n * BLOCK_N]" in kern.source


@interpreter
def test_an_unaligned_output_falls_back_to_pointers(kit) -> None:
    # an output one element past a 16-byte boundary: no descriptor may cover it, so nothing is TMA
    g = torch.Generator().manual_seed(kit.seed("tma-unaligned"))
    a, b = kit.rand((32, 32), "float16", g), kit.rand((32, 16), "float16", g)
    out = kit.poisoned((32 * 16 + 1,), "float16")[1:].view(32, 16)
    kern = kit.matmul("float16", TMA)
    kern(a, b, out)
    kit.assert_close(out, a.double() @ b.double(), "float16", "unaligned output")
    assert "_desc" not in kern.source.split('"""')[-1]
    assert "copied with pointers" in kern.explain()


def test_tma_rules_reject_broadcast_dims_and_ignore_one_element_dims() -> None:
    x = torch.zeros(4, 16, dtype=torch.float16)
    assert build_mod.tma_aligned([x])
    assert not build_mod.tma_aligned([x[:1].expand(4, 16)])                   # stride 0 over 4 rows
    assert build_mod.tma_aligned([x[:1].as_strided((1, 16), (3, 1))])        # one row: its stride is moot
    assert not build_mod.tma_aligned([torch.zeros(4, 12, dtype=torch.float16)[:, :8]])  # 24-byte rows
    assert not build_mod.tma_aligned([torch.zeros(32, 0, dtype=torch.float16)])        # nothing to describe


@interpreter
def test_an_empty_reduction_gives_zeros_by_pointers(kit) -> None:
    a, b = torch.zeros(32, 0, dtype=torch.float16), torch.zeros(0, 16, dtype=torch.float16)
    out = kit.matmul("float16", TMA)(a, b)
    assert out.shape == (32, 16) and torch.equal(out, torch.zeros(32, 16, dtype=torch.float16))


@interpreter
def test_a_prebound_launch_keeps_the_bound_views_geometry(kit) -> None:
    # bound on B's transposed view (K x N, unit stride along K), replayed on the N x K tensor itself, as
    # the fast path replays a first call whose kernel read views of its inputs: the same product
    g = torch.Generator().manual_seed(kit.seed("tma-prebound-view"))
    a, b = kit.rand((32, 64), "float16", g), kit.rand((48, 64), "float16", g)
    kern = kit.matmul("float16", TMA)
    launch, _ = kern.bind(a, b.t(), kit.poisoned((32, 48), "float16"))
    run = launch.prebind()
    a2, b2, out = kit.rand((32, 64), "float16", g), kit.rand((48, 64), "float16", g), kit.poisoned((32, 48), "float16")
    run(a2, b2, out)
    kit.assert_close(out, a2.double() @ b2.double().t(), "float16", "replayed on the viewed tensor")
