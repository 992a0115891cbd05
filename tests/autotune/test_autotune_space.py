"""Config spaces: static and model pruning, variants, top-k, neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from alcop_triton.autotune.space import VARIANTS, ConfigSpace, Knobs, variant_ok
from alcop_triton.errors import ScheduleError, TuningError
from alcop_triton.model import analytical
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

SPEC = get_spec("H100")
W = Workload("matmul", (512, 64, 2048), "float16", "nt")
SMALL = Knobs(block_m=(32, 64, 128), block_n=(32, 64), block_k=(32, 64), num_warps=(4,), smem_stages=(1, 2, 3, 4),
              reg_stages=(1, 2), reg_split=(1, 2), group_m=(8,), async_copy=("pointer",))


def test_every_config_fits_the_gpu():
    space = ConfigSpace.build(W, SPEC, knobs=SMALL)
    assert len(space) > 10
    assert all(analytical.resources(W, c, SPEC).valid for c in space)
    # Shape rule: N = 64, so no tile wider than 64.
    assert all(c.block_n <= 64 for c in space)
    assert all(not (c.reg_split > 1 and c.reg_stages == 1) for c in space)
    assert str(len(space)) in space.summary()


def test_resource_pruning_keeps_at_least_one():
    tiny = SPEC.replace(smem_per_block=1024, smem_per_sm=2048)
    space = ConfigSpace.build(W, tiny, knobs=SMALL)
    assert len(space) == 1
    assert any(k.startswith("model:") for k in space.pruned)


def test_tma_needs_sm90():
    a100 = get_spec("A100")
    space = ConfigSpace.build(W, a100, knobs=Knobs(block_m=(64,), block_n=(64,), block_k=(32,), num_warps=(4,),
                                                   smem_stages=(2,), reg_stages=(1,), reg_split=(1,), group_m=(8,)))
    assert {c.async_copy for c in space} == {"pointer"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants(variant):
    space = ConfigSpace.build(W, SPEC, knobs=SMALL, variant=variant)
    assert all(variant_ok(c, variant) for c in space)
    stages = {(c.smem_stages, c.reg_stages) for c in space}
    if variant == "none":
        assert stages == {(1, 1)}
    elif variant == "double_buffer":
        assert stages == {(2, 1)}
    elif variant == "smem_multistage":
        assert {s for s, _ in stages} == {1, 2, 3, 4} and {r for _, r in stages} == {1}
    else:
        assert {r for _, r in stages} == {1, 2}


def test_unknown_variant():
    with pytest.raises(ScheduleError, match="variant"):
        ConfigSpace.build(W, SPEC, knobs=SMALL, variant="triple")


def test_top_k_is_analytical_order():
    space = ConfigSpace.build(W, SPEC, knobs=SMALL)
    top = space.top_k(5)
    assert len(top) == 5 and set(top.configs) == set(space.ranked()[:5])
    assert len(space.top_k(0.5)) == round(len(space) * 0.5)
    assert top.pruned["analytical top_k"] == len(space) - 5
    est = space.estimates()
    assert sorted(est)[:5] == sorted(est[space.index(c)] for c in top)
    with pytest.raises(ScheduleError):
        space.top_k(0)


def test_mutate_stays_inside():
    space = ConfigSpace.build(W, SPEC, knobs=SMALL)
    rng = np.random.default_rng(0)
    c = space.configs[0]
    moved = 0
    for _ in range(200):
        n = space.mutate(c, rng)
        assert n in space
        diff = sum(getattr(n, k) != getattr(c, k) for k in ("block_m", "block_n", "block_k", "num_warps",
                                                            "smem_stages", "reg_stages", "reg_split"))
        assert diff <= 1
        moved += n != c
        c = n
    assert moved > 50


def test_from_configs_and_empty():
    cs = [KernelConfig(block_m=64), KernelConfig(block_m=32), KernelConfig(block_m=64)]
    space = ConfigSpace.from_configs(W, cs)
    assert space.configs == (KernelConfig(block_m=32), KernelConfig(block_m=64))
    with pytest.raises(TuningError, match="no GPU spec"):
        space.estimates()
    with pytest.raises(TuningError):
        ConfigSpace.from_configs(W, [])


def test_conv_space_uses_pointer_loads():
    conv = Workload("conv2d", (8, 56, 56, 64, 64, 3, 3, 1, 1), "float16", "nhwc")
    space = ConfigSpace.build(conv, SPEC, knobs=None, top_k=20)
    assert len(space) == 20 and {c.async_copy for c in space} == {"pointer"}
