"""Persistent kernels on a CUDA GPU: as many programs as fit at once, each looping over output tiles,
the tile loop flattened with the reduction loop when the shared level has more than one stage.

fp16 inputs, B stored N x K as in the ALCOP suite (tests/data/alcop_suite.json); float64 torch reference,
norm-wise relative error <= 1e-2, outputs poisoned with NaN. Pointer and TMA copies, 1 and 4 stages, on
odd shapes (masks, partial tiles, a single tile) and suite shapes. Skipped without CUDA (and under
TRITON_INTERPRET=1).
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

PERSISTENT = {
    "pointer_s1": KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=1, persistent=True),
    "pointer_s4": KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=4, persistent=True),
    "tma_s1": KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=1, async_copy="tma", persistent=True),
    "tma_s4": KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=4, async_copy="tma", persistent=True),
}
ODD = [(1, 1, 1), (17, 33, 65), (1000, 999, 777), (4099, 259, 136)]
SUITE_DENSE = [DENSE[0], DENSE[3], (2048, 2048, 2048), (3136, 512, 256)]  # 48 .. 256 tiles of 128 x 128
SUITE_BMM = [BMM[0], BMM[1]]

_KERNELS: dict[tuple[KernelConfig, bool], at.CompiledKernel] = {}


def _kernel(cfg: KernelConfig, batched: bool) -> at.CompiledKernel:
    if (cfg, batched) not in _KERNELS:
        inputs, out = km.matmul_te("float16", batched)
        _KERNELS[(cfg, batched)] = at.build(Schedule.from_config(out, cfg), inputs + [out])
    return _KERNELS[(cfg, batched)]


def _check(kern: at.CompiledKernel, m: int, n: int, k: int, batch: int | None, seed: int, kit) -> None:
    g = torch.Generator(device="cuda").manual_seed(seed)
    lead = (batch,) if batch else ()
    scale = k ** -0.25  # keeps fp16 partial sums far from overflow
    a = (torch.randn(lead + (m, k), device="cuda", generator=g) * scale).half()
    b = (torch.randn(lead + (n, k), device="cuda", generator=g) * scale).half().transpose(-1, -2)
    out = kit.poisoned(lead + (m, n), "float16", device="cuda")
    kern(a, b, out)
    torch.cuda.synchronize()
    kit.assert_close(out, a.double() @ b.double(), "float16", f"{lead + (m, n, k)} {kern.config}")


@pytest.mark.parametrize("variant", list(PERSISTENT))
def test_persistent_odd_shapes(variant: str, kit) -> None:
    kern = _kernel(PERSISTENT[variant], False)
    for i, (m, n, k) in enumerate(ODD):
        _check(kern, m, n, k, None, seed=20 + i, kit=kit)


@pytest.mark.parametrize("variant", list(PERSISTENT))
def test_persistent_suite_shapes(variant: str, kit) -> None:
    cfg = PERSISTENT[variant]
    for i, (m, n, k) in enumerate(SUITE_DENSE):
        _check(_kernel(cfg, False), m, n, k, None, seed=40 + i, kit=kit)
    for i, (b, m, n, k) in enumerate(SUITE_BMM):
        _check(_kernel(cfg, True), m, n, k, b, seed=60 + i, kit=kit)
    src = _kernel(cfg, False).source
    assert "for tile_id in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)" in src
    assert ("flatten=True" in src) == (cfg.smem_stages > 1)
    if cfg.async_copy == "tma":  # aligned, B transposed in registers: real descriptors on sm90
        assert "a_desc.load(" in src and "tl.trans(b_desc.load(" in src


def test_grid_is_capped_by_resident_programs(grids: list[tuple[int, ...]], kit) -> None:
    # more tiles than the GPU holds at once: the grid is the resident count and programs loop
    cfg = PERSISTENT["pointer_s4"]
    kern = _kernel(cfg, False)
    _check(kern, 4096, 4096, 256, None, seed=80, kit=kit)  # 1024 tiles of 128 x 128
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    (grid,) = grids
    resident = kern._slots[(kern.last.path, torch.cuda.current_device())]  # from the compiled kernel's occupancy
    assert len(grid) == 1 and sms <= resident and grid[0] == min(1024, resident)
    _check(kern, 17, 33, 65, None, seed=81, kit=kit)  # a single tile: a single program
    assert grids[-1] == (1,)


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("stages", [1, 3])
def test_persistent_conv2d_on_gpu(groups: int, stages: int, kit) -> None:
    # ResNet-like layer, channels_last: channels and window compiled in, the group as a batch axis
    import torch.nn.functional as F

    from alcop_triton.kernels import conv as kc
    g = torch.Generator(device="cuda").manual_seed(90 + groups + stages)
    x = torch.randn((8, 64, 28, 27), device="cuda", generator=g).half().to(memory_format=torch.channels_last)
    w = (torch.randn((128, 64 // groups, 3, 3), device="cuda", generator=g) / 24).half()
    w = w.to(memory_format=torch.channels_last)
    bias = torch.randn((128,), device="cuda", generator=g).half()
    cfg = KernelConfig(64, 64, 32, group_m=8, num_warps=4, smem_stages=stages, persistent=True)
    y = kc.conv(x, w, bias, (1, 1), (1, 1), (1, 1), (1, 1), groups, activation="relu", config=cfg)
    ref = F.relu(F.conv2d(x.double(), w.double(), bias.double(), 1, 1, 1, groups))
    kit.assert_close(y, ref, "float16", f"persistent conv groups={groups} stages={stages}")
