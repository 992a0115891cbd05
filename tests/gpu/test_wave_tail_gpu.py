"""On a CUDA GPU of sm90 or later: a wave-tail config's two launches (``KernelConfig.wave_tail``).

The tail launch starts during the head and has no wait before its loads; it relies on every head program
having waited for the kernel before both. It waits for the head at its end, so that the next kernel sees
the head's rows too. Checked against torch, bit for bit across runs, with an operand written late right
before each product by a kernel that lets its dependents start at once (as in
``test_dependent_launch_gpu.py``), eagerly and in a CUDA graph, and in a chain of products where each
reads the previous result.
"""

from __future__ import annotations

import pytest
import torch

import alcop_triton as at
from alcop_triton import KernelConfig
from alcop_triton.kernels import matmul as km

# hopper: the autouse fixture that skips before sm90 (no programmatic dependent launch) and clears the fast path
from test_dependent_launch_gpu import _sources, _write_late, hopper  # noqa: F401

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1

CFG = KernelConfig(128, 128, 64, group_m=8, num_warps=4, smem_stages=4, async_copy="tma", wave_tail=True)


@pytest.mark.parametrize("m,n,k,split", [(1970, 2304, 768, False), (896, 2560, 2560, False), (1999, 1144, 760, False),
                                         (1970, 2304, 768, True), (2056, 1280, 5120, True), (2051, 1277, 5111, True)])
def test_matches_torch_and_is_deterministic(m: int, n: int, k: int, split: bool, kit) -> None:
    # split: the tail runs the head's 128 x 128 tiles split along K (three slices on 132 SMs)
    g = torch.Generator(device="cpu").manual_seed(m + n + k)
    a, bt = kit.rand((m, k), "float16", g, "cuda"), kit.rand((n, k), "float16", g, "cuda")
    kern = km.compiled("float16", 0, km.Epilogue(), CFG.replace(tail_split=split))
    out = kit.poisoned((m, n), "float16", "cuda")
    launch, _ = kern.bind(a, bt.t(), out)
    assert launch.then is not None, "these shapes leave a short last wave: the tail launch should run"
    assert (len(launch.then.grid) == 3 and launch.then.grid[2] > 1) == split, launch.then.grid
    launch()
    kit.assert_close(out, a.double() @ bt.double().t(), "float16", f"{m}x{n}x{k}")
    first = out.clone()
    for _ in range(3):
        out.fill_(float("nan"))
        launch()
        assert torch.equal(out, first)


def test_reads_an_operand_written_just_before_it_eagerly_and_in_a_graph() -> None:
    steps = 8
    src, bt = _sources(steps, 1970, 768), _sources(1, 2304, 768)[0]
    a = torch.empty_like(src[0])
    want = [(s.float() @ bt.float().t()).half() for s in src]
    with at.use_config(CFG):
        for s, w in zip(src, want):
            _write_late(s, a)
            torch.testing.assert_close(at.matmul(a, bt.t()), w, rtol=1e-2, atol=1e-2)
        graph, outs = torch.cuda.CUDAGraph(), []
        with torch.cuda.graph(graph):
            for s in src:
                _write_late(s, a)
                outs.append(at.matmul(a, bt.t()))
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
    for o, w in zip(outs, want):
        torch.testing.assert_close(o, w, rtol=1e-2, atol=1e-2)


def test_the_next_product_sees_the_heads_rows() -> None:
    """c = a @ b by a wave tail, then d = c @ e at once: d's first rows come from the head's tiles, which the
    tail launch (the one d's kernel waits for) must not complete before."""
    g = torch.Generator(device="cpu").manual_seed(1)
    a = (torch.randn(1970, 768, generator=g) / 28).half().cuda()
    bt = (torch.randn(2304, 768, generator=g) / 28).half().cuda()
    et = (torch.randn(256, 2304, generator=g) / 48).half().cuda()
    with at.use_config(CFG):
        for _ in range(4):
            c = at.matmul(a, bt.t())
            d = at.matmul(c, et.t())  # one launch (32 tiles), started during the tail; it waits for the tail
            torch.testing.assert_close(d.float(), (a.float() @ bt.float().t()).half().float() @ et.float().t(),
                                       rtol=2e-2, atol=2e-2)
