"""GPU correctness on the ALCOP benchmark suite's dense and bmm shapes (tests/data/alcop_suite.json).

fp16 inputs, fp32 accumulation, B stored N x K as in the suite (C = A @ B^T); float64 torch reference;
norm-wise relative error <= 1e-2. Skipped without CUDA (and under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule
from alcop_triton.kernels import matmul as km

pytestmark = pytest.mark.gpu

SUITE = json.loads((Path(__file__).resolve().parents[1] / "data" / "alcop_suite.json").read_text())
DENSE: list[tuple[int, int, int]] = [tuple(s) for s in SUITE["dense"]["shapes_MNK"]]
BMM: list[tuple[int, int, int, int]] = [tuple(s) for s in SUITE["bmm"]["shapes_BMNK"]]

# ALCOP's full schedule: multi-stage shared level + register prefetch (one compile serves every shape)
FULL = KernelConfig(128, 128, 32, group_m=8, num_warps=4, smem_stages=3, reg_stages=2, reg_split=2)
VARIANTS = {
    "s1": KernelConfig(128, 128, 32, group_m=8, num_warps=4, smem_stages=1),
    "s2": KernelConfig(128, 128, 32, group_m=8, num_warps=4, smem_stages=2),
    "s4": KernelConfig(128, 64, 64, group_m=8, num_warps=4, smem_stages=4),
    "full": FULL,
    "r3x4": KernelConfig(64, 64, 64, group_m=8, num_warps=4, smem_stages=3, reg_stages=3, reg_split=4),
    "tma": KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=3, async_copy="tma"),
}


def _kernel(cfg: KernelConfig, batched: bool) -> at.CompiledKernel:
    return _KERNELS.setdefault((cfg, batched), _build(cfg, batched))


def _build(cfg: KernelConfig, batched: bool) -> at.CompiledKernel:
    inputs, out = km.matmul_te("float16", batched)
    return at.build(Schedule.from_config(out, cfg), inputs + [out])


_KERNELS: dict[tuple[KernelConfig, bool], at.CompiledKernel] = {}


def _check(kern: at.CompiledKernel, m: int, n: int, k: int, batch: int | None, seed: int, kit) -> None:
    g = torch.Generator(device="cuda").manual_seed(seed)
    lead = (batch,) if batch else ()
    scale = k ** -0.25  # keeps fp16 partial sums far from overflow
    a = (torch.randn(lead + (m, k), device="cuda", generator=g) * scale).half()
    b_nk = (torch.randn(lead + (n, k), device="cuda", generator=g) * scale).half()
    b = b_nk.transpose(-1, -2)  # the suite's layout: B stored N x K
    out = kit.poisoned(lead + (m, n), "float16", device="cuda")
    kern(a, b, out)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    kit.assert_close(out, ref, "float16", f"{lead + (m, n, k)} {kern.config}")


@pytest.mark.parametrize("shape", DENSE, ids=lambda s: "x".join(map(str, s)))
def test_dense_suite(shape: tuple[int, int, int], kit) -> None:
    m, n, k = shape
    _check(_kernel(FULL, False), m, n, k, None, seed=sum(shape), kit=kit)


@pytest.mark.parametrize("shape", BMM, ids=lambda s: "x".join(map(str, s)))
def test_bmm_suite(shape: tuple[int, int, int, int], kit) -> None:
    b, m, n, k = shape
    _check(_kernel(FULL, True), m, n, k, b, seed=sum(shape), kit=kit)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_on_suite_shapes(variant: str, kit) -> None:
    cfg = VARIANTS[variant]
    _check(_kernel(cfg, False), 1024, 768, 3072, None, seed=1, kit=kit)
    _check(_kernel(cfg, True), 512, 64, 512, 12, seed=2, kit=kit)
    kern = _kernel(cfg, True)
    if variant == "tma":  # A is row-major and aligned: a real tensor descriptor on sm90
        assert "a_desc.load(" in kern.source
    assert f"num_stages={min(cfg.smem_stages, 512 // cfg.block_k)}" in kern.source


def test_odd_shapes_on_gpu(kit) -> None:
    # masks and partial tiles on hardware (the interpreter does not check out-of-bounds accesses)
    for i, (m, n, k) in enumerate([(1, 1, 1), (17, 33, 65), (1000, 999, 777)]):
        _check(_kernel(FULL, False), m, n, k, None, seed=10 + i, kit=kit)


def test_unrolled_reduction_on_gpu(kit) -> None:
    # tl.static_range needs a compile-time trip count: K is compiled in (a runtime K is refused)
    inputs, out = km.matmul_te("float16", False)
    s = Schedule.from_config(out, KernelConfig(64, 64, 32, smem_stages=3))
    s.unroll("k")
    _check(at.build(s, inputs + [out], static=("K",)), 256, 128, 320, None, seed=3, kit=kit)


@pytest.mark.parametrize("variant", ["s4", "tma"])
def test_bound_launch_compiles_without_running(variant: str, kit) -> None:
    # benchmark workers fill Triton's cache with Launch.compile() for the calls another process times
    kern = _build(VARIANTS[variant], False)
    a = torch.randn(300, 200, device="cuda").half()
    b = torch.randn(200, 100, device="cuda").half()
    out = kit.poisoned((300, 100), "float16", device="cuda")
    launch, bound = kern.bind(a, b, out)
    launch.compile()
    torch.cuda.synchronize()
    assert torch.isnan(bound.float()).all(), "compile() must not run the kernel"
    launch()
    torch.cuda.synchronize()
    kit.assert_close(bound, a.double() @ b.double(), "float16", f"{variant} after compile()")
