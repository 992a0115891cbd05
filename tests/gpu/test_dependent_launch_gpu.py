"""On a CUDA GPU of sm90 or later: kernels launched with programmatic dependent launch still see what the
kernel before them wrote. Each launch may start while its predecessor runs, and only its ``gdc_wait()``
keeps it from reading an operand before that operand is written. The operand is written right before each
launch by a kernel that lets its dependents start at once (``gdc_launch_dependents()`` first) and writes
late, so a launch that did not wait would read the previous operand (without the wait those tests fail);
eagerly and in a CUDA graph, and in a chain of alcop's own products."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

import alcop_triton as at
from alcop_triton import KernelConfig, fastpath
from alcop_triton.kernels import matmul as km

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1

STEPS = 24


@pytest.fixture(autouse=True)
def hopper() -> Iterator[None]:
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs sm90 or later")
    fastpath.invalidate()
    yield


@triton.jit
def _late_copy(src, dst, n, zero, DELAY: tl.constexpr, BLOCK: tl.constexpr):
    """dst = src, written after DELAY dependent steps of arithmetic that add ``zero`` times something (a
    runtime 0.0, so nothing folds); the kernel after it may start at once."""
    gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n).to(tl.float32)
    y = x
    for _ in range(DELAY):
        y = y + zero * tl.sin(y)
    tl.store(dst + offs, y.to(dst.dtype.element_ty), mask=offs < n)


def _write_late(src: torch.Tensor, dst: torch.Tensor) -> None:
    n = src.numel()
    _late_copy[(triton.cdiv(n, 1024),)](src, dst, n, 0.0, DELAY=4000, BLOCK=1024)


def _sources(steps: int, *shape: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(0)
    return torch.randn(steps, *shape, generator=g).half().cuda()


def test_the_kernel_is_generated_to_wait_and_launched_dependent() -> None:
    inputs, out = km.matmul_te("float16", False)
    k = at.build(at.Schedule.from_config(out, KernelConfig(64, 64, 32, smem_stages=3)), inputs + [out])
    launch, _ = k.bind(torch.ones(64, 64, dtype=torch.float16, device="cuda"),
                       torch.ones(64, 64, dtype=torch.float16, device="cuda"))
    assert launch.kwargs.get("launch_pdl") is True
    body = k.source.split("def alcop_c(")[1].splitlines()[1:]
    assert [ln.strip() for ln in body if ln.strip() and not ln.strip().startswith("#")][0] == "gdc_wait()"


@pytest.mark.parametrize("split_k", [1, 4])
def test_each_product_reads_the_operand_written_just_before_it(split_k: int) -> None:
    """An operand overwritten right before every launch by a kernel that lets it start at once and writes
    late (read-after-write), eagerly and replayed from a CUDA graph; split-K's counters and workspace are
    reused launch after launch."""
    src, b = _sources(STEPS, 256, 512), _sources(1, 512, 192)[0]
    a = torch.empty_like(src[0])
    cfg = KernelConfig(64, 64, 64, smem_stages=3, split_k=split_k)
    want = [(s.float() @ b.float()).half() for s in src]
    with at.use_config(cfg):
        outs = []
        for s in src:
            _write_late(s, a)
            outs.append(at.matmul(a, b))
        torch.cuda.synchronize()
        for got, w in zip(outs, want):
            torch.testing.assert_close(got, w, rtol=1e-2, atol=1e-2)
        graph_outs = [torch.empty(256, 192, dtype=torch.float16, device="cuda") for _ in src]
        _write_late(src[0], a)
        at.matmul(a, b)  # warm-up outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i, s in enumerate(src):
                _write_late(s, a)
                graph_outs[i].copy_(at.matmul(a, b))
        for o in graph_outs:
            o.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
    for got, w in zip(graph_outs, want):
        torch.testing.assert_close(got, w, rtol=1e-2, atol=1e-2)


def test_a_chain_of_products_reads_each_previous_result() -> None:
    """alcop's kernels back to back, each reading the result of the one before (both launched dependent)."""
    x, ws = _sources(1, 128, 128)[0], _sources(8, 128, 128) / 8
    want = x.float()
    got = x
    for w in ws:
        want = (want.half().float() @ w.float())
        got = at.matmul(got, w)
    torch.cuda.synchronize()
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
