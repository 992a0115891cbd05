"""Config spaces: static and model pruning, variants, top-k, neighbours, persistent configs' shape rules."""

from __future__ import annotations

import numpy as np
import pytest

from alcop_triton.autotune import dispatch
from alcop_triton.autotune import space as space_mod
from alcop_triton.autotune.space import VARIANTS, ConfigSpace, Knobs, shape_reason, variant_ok
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


def test_conv_space_offers_tma_windows_only_where_the_plan_can_copy_them():
    # stride 1, channels last, channels a multiple of BLOCK_K: TMA copies windows of the input
    conv = Workload("conv2d", (8, 56, 56, 64, 64, 3, 3, 1, 1), "float16", "nhwc")
    space = ConfigSpace.build(conv, SPEC, knobs=None)
    assert {c.async_copy for c in space} == {"pointer", "tma", "box"}
    assert all(c.block_k <= 64 for c in space if c.async_copy != "pointer")
    # the box kernel's tiles: one warpgroup per 64 rows, its ring the only pipelining knob
    box = [c for c in space if c.async_copy == "box"]
    assert all(c.block_m == 16 * c.num_warps and c.num_warps in (4, 8) and c.group_m == 8 for c in box)
    assert not any(c.reg_stages > 1 or c.split_k > 1 or c.persistent or c.wave_tail for c in box)
    # stride 2 or NCHW: the plan would copy with pointers anyway, so no TMA twin is measured; the box kernel
    # reads a stride-2 window from the input's phase view
    strided = Workload("conv2d", (8, 56, 56, 64, 64, 3, 3, 2, 1), "float16", "nhwc")
    assert {c.async_copy for c in ConfigSpace.build(strided, SPEC, knobs=None)} == {"pointer", "box"}
    nchw = Workload("conv2d", (8, 56, 56, 64, 64, 3, 3, 1, 1), "float16", "nchw")
    assert {c.async_copy for c in ConfigSpace.build(nchw, SPEC, knobs=None)} == {"pointer"}
    # the box kernel multiplies half precision only; GEMMs never take it
    for w in (Workload("conv2d", (8, 56, 56, 64, 64, 3, 3, 1, 1), "float32", "nhwc"), W):
        assert "box" not in {c.async_copy for c in ConfigSpace.build(w, SPEC, knobs=None)}
    # the model's own shortlist keeps pointer copies: it knows nothing of a box's waste
    assert {c.async_copy for c in dispatch.model_shortlist(conv, SPEC)} == {"pointer"}


# ----------------------------------------------------------------------------- persistent configs

def _pers(bm: int = 64, bn: int = 64, bk: int = 32, stages: int = 2) -> KernelConfig:
    return KernelConfig(bm, bn, bk, group_m=8, num_warps=4, smem_stages=stages, persistent=True)


@pytest.mark.parametrize("w, cfg, reason", [
    # 512x64 in 64x64 tiles: 8 tiles for 132 SMs
    (W, _pers(), "persistent with no more tiles than SMs"),
    # exactly one tile per SM: nothing to loop over, pruned; one more tile and it is kept
    (Workload("matmul", (64 * 132, 64, 256), "float16", "nt"), _pers(), "persistent with no more tiles than SMs"),
    (Workload("matmul", (64 * 133, 64, 256), "float16", "nt"), _pers(), None),
    # bmm: the batch multiplies the tiles (12 x 4 x 4 = 192 > 132); without it 16 would be too few
    (Workload("bmm", (12, 512, 512, 64), "float16", "nt"), _pers(128, 128), None),
    (Workload("matmul", (512, 512, 64), "float16", "nt"), _pers(128, 128), "persistent with no more tiles than SMs"),
], ids=["few_tiles", "tiles_eq_sms", "tiles_gt_sms", "bmm_batch_counts", "matmul_same_tiles"])
def test_persistent_needs_more_tiles_than_sms(w: Workload, cfg: KernelConfig, reason: str | None) -> None:
    assert shape_reason(w, cfg, SPEC) == reason
    assert shape_reason(w, cfg.replace(persistent=False), SPEC) is None  # the rule is the persistent one's
    assert shape_reason(w, cfg, None) is None  # no GPU spec: the SM count is unknown, nothing to prune on


def test_persistent_may_have_more_stages_than_k_chunks() -> None:
    # K = 64 is 2 chunks of 32; 4096 x 4096 in 64x64 tiles is 4096 tiles, 32 per SM: the flattened loop runs 64
    big = Workload("matmul", (4096, 4096, 64), "float16", "nt")
    for stages in (3, 4, 8):
        assert shape_reason(big, _pers(stages=stages), SPEC) is None
        assert shape_reason(big, _pers(stages=stages).replace(persistent=False), SPEC) == \
            "more smem stages than reduction steps"
    # 133 tiles (2 on some SM) of 1 chunk each: 2 chunks per program at most
    few = Workload("matmul", (64 * 133, 64, 32), "float16", "nt")
    assert shape_reason(few, _pers(stages=2), SPEC) is None
    assert shape_reason(few, _pers(stages=3), SPEC) == "more smem stages than reduction steps"
    # without a spec a persistent config keeps its stages (its programs' share of tiles is unknown)
    assert shape_reason(few, _pers(stages=8), None) is None
    assert shape_reason(few, _pers(stages=8).replace(persistent=False), None) == "more smem stages than reduction steps"
    # the other rules still apply to persistent configs
    assert shape_reason(big, _pers(bk=128), SPEC) == "tile larger than the problem"
    assert shape_reason(big, _pers().replace(reg_split=2), SPEC) == "reg_split without register prefetch"
    assert shape_reason(big, _pers().replace(async_copy="tma"), get_spec("A100")) == "tma needs sm90"


def test_spaces_keep_persistent_configs_given_to_them() -> None:
    big = Workload("matmul", (4096, 4096, 64), "float16", "nt")
    cs = [_pers(stages=4), _pers(stages=4).replace(persistent=False)]
    space = ConfigSpace.from_configs(big, cs)
    assert len(space) == 2 and _pers(stages=4) in space
    assert not any(c.persistent for c in ConfigSpace.build(W, SPEC, knobs=SMALL))  # not a tuning knob (yet)


def test_split_k_is_offered_for_few_tiles_and_long_k_only():
    knobs = Knobs(block_m=(16, 64), block_n=(64, 128), block_k=(64, 128), num_warps=(4,), smem_stages=(3,),
                  reg_stages=(1,), reg_split=(1,), group_m=(8,), async_copy=("pointer",), persistent=(False,))
    decode = ConfigSpace.build(Workload("matmul", (16, 4096, 4096), "float16", "nt"), SPEC, knobs=knobs)
    assert {c.split_k for c in decode} == {1, 2, 4, 8}
    for c in decode:
        tiles = -(-16 // c.block_m) * -(-4096 // c.block_n)
        assert c.split_k == 1 or (tiles < SPEC.num_sms and tiles * (c.split_k // 2) < SPEC.num_sms)
    big = ConfigSpace.build(Workload("matmul", (4096, 4096, 4096), "float16", "nt"), SPEC, knobs=knobs)
    assert {c.split_k for c in big} == {1}
    assert big.pruned["split-K with enough tiles to fill the GPU"] > 0
    short = Workload("matmul", (16, 256, 128), "float16", "nt")  # one or two chunks: nothing to split
    assert shape_reason(short, KernelConfig(16, 64, 64, split_k=2), SPEC) == "split-K slices shorter than two chunks"


def test_split_k_costs_partial_traffic_in_the_model():
    w = Workload("matmul", (128, 1024, 8192), "float16", "nt")
    one, four = KernelConfig(64, 64, 128, smem_stages=5), KernelConfig(64, 64, 128, smem_stages=5, split_k=4)
    e1, e4 = analytical.estimate(w, one, SPEC), analytical.estimate(w, four, SPEC)
    assert e1.breakdown["t_split_reduction"] == 0.0 < e4.breakdown["t_split_reduction"]
    assert e4.breakdown["total_blocks"] == 4 * e1.breakdown["total_blocks"]
    assert e4.breakdown["n_loop"] == 16 == e1.breakdown["n_loop"] / 4
    assert e4.time_s < e1.time_s  # 32 tiles on 132 SMs: four slices fill the GPU


# Knob values KernelConfig refuses on their own (block_m=24, num_warps=3) and in combination
# (reg_split=4 with block_k=16, split_k=2 with persistent), beside valid ones.
MIXED = Knobs(block_m=(16, 24, 64), block_n=(32, 64), block_k=(16, 64), group_m=(1, 8), num_warps=(3, 4),
              smem_stages=(1, 3), reg_stages=(1, 2), reg_split=(1, 4), async_copy=("pointer", "tma"),
              persistent=(False, True), split_k=(1, 2))


def _config_first(w: Workload, knobs: Knobs, variant: str, spec=SPEC) -> tuple[list[KernelConfig], dict[str, int]]:
    """The space as making each combination a KernelConfig first gives it: the two rules counted in bulk
    (tile size, split-K on a full grid), then KernelConfig's checks, then the shape rules and the variant."""
    import itertools
    import math
    from collections import Counter

    from alcop_triton.autotune.space import KNOB_NAMES, _next_pow2

    batch, m, n, k = w.gemm_dims()
    kept, pruned = [], Counter()
    for values in itertools.product(*knobs.values()):
        kw = dict(zip(KNOB_NAMES, values))
        tiles = batch * math.ceil(m / kw["block_m"]) * math.ceil(n / kw["block_n"])
        if any(kw[b] > max(16, _next_pow2(d)) for b, d in (("block_m", m), ("block_n", n), ("block_k", k))):
            pruned["tile larger than the problem"] += 1
            continue
        if spec is not None and kw["split_k"] > 1 and tiles >= spec.num_sms:
            pruned["split-K with enough tiles to fill the GPU"] += 1
            continue
        try:
            c = KernelConfig(**kw)
        except ScheduleError:
            pruned["invalid knob combination"] += 1
            continue
        why = shape_reason(w, c, spec) or (None if variant_ok(c, variant) else f"outside variant {variant!r}")
        if why is None:
            kept.append(c)
        else:
            pruned[why] += 1
    return kept, dict(pruned)


def test_rows_16_byte_loads_cannot_read_limit_the_loads_per_thread():
    # Unaligned rows used as they are: each element is a load of its own, so large tiles on few warps spill
    # (4099x257x263: 0.15x cuBLAS on 128x128x64 with 4 warps, 1.06x on 64x128x64 with 8).
    odd = Workload("matmul", (4099, 257, 263), "float16", "nt")
    even = Workload("matmul", (4096, 256, 264), "float16", "nt")
    spilling = KernelConfig(block_m=128, block_n=128, block_k=64, num_warps=4)
    assert shape_reason(odd, spilling, SPEC) == "more element loads per thread than registers hold"
    assert shape_reason(odd, KernelConfig(block_m=64, block_n=128, block_k=64, num_warps=8), SPEC) is None
    assert shape_reason(even, spilling, SPEC) is None  # rows of whole 16-byte vectors: vector loads
    for c in ConfigSpace.build(odd, SPEC).configs:
        assert c.block_k * (c.block_m + c.block_n) <= space_mod.SCALAR_LOADS_MAX * 32 * c.num_warps


@pytest.mark.parametrize("workload", [Workload("matmul", (96, 200, 512), "float16", "nt"),
                                      Workload("matmul", (4096, 4096, 64), "float16", "nt"),
                                      Workload("matmul", (4099, 257, 263), "float16", "nt"),
                                      Workload("conv2d", (8, 28, 28, 64, 64, 3, 3, 1, 1), "float16", "nhwc"),
                                      Workload("conv2d", (8, 28, 28, 48, 64, 3, 3, 2, 1), "float16", "nhwc")],
                         ids=["matmul-small", "matmul-short-k", "matmul-unaligned-rows", "conv-stride1", "conv-stride2"])
@pytest.mark.parametrize("variant", ["full", "smem_multistage", "none"])
@pytest.mark.parametrize("spec", [SPEC, None], ids=["h100", "no-gpu"])
def test_space_equals_making_every_config_first(workload, variant, spec):
    # ``build`` applies the rules to numpy columns of the whole product and makes only survivors
    # KernelConfigs: the configs, their order and every pruning count must be what making each config
    # first and asking ``shape_reason`` (the same rules on one config) gives.
    space = ConfigSpace.build(workload, spec, knobs=MIXED, variant=variant, prune=False)
    kept, pruned = _config_first(workload, MIXED, variant, spec)
    assert list(space.configs) == kept and space.pruned == pruned
    assert pruned["invalid knob combination"] > 0
