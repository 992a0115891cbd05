"""Config spaces: static and model pruning, variants, top-k, neighbours, persistent configs' shape rules."""

from __future__ import annotations

import math

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
    """The space as making each combination of ``knobs``' families a KernelConfig first gives it: the two
    rules counted in bulk (tile size, split-K on a full grid), then KernelConfig's checks, then the shape
    rules and the variant; in the order of ``knobs``' whole product."""
    import itertools
    import math
    from collections import Counter

    from alcop_triton.autotune.space import KNOB_NAMES, WS_CONFIG_RULES, Candidate, _families, _next_pow2

    batch, m, n, k = w.gemm_dims()
    kept, pruned = [], Counter()
    combos = [values for family in _families(knobs) for values in itertools.product(*family.values())]
    for values in combos:
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
            # refused for the warp-specialized kernel's rules alone: counted under the first that fails
            try:
                KernelConfig(**{**kw, "async_copy": "tma", "pingpong": False, "epilogue_subtile": 1})
                why = next(r for r, test in WS_CONFIG_RULES if test(Candidate(**kw)))
            except ScheduleError:
                why = "invalid knob combination"
            pruned[why] += 1
            continue
        why = shape_reason(w, c, spec) or (None if variant_ok(c, variant) else f"outside variant {variant!r}")
        if why is None:
            kept.append(c)
        else:
            pruned[why] += 1
    grid = {c: tuple(vals.index(getattr(c, name)) for name, vals in zip(KNOB_NAMES, knobs.values())) for c in kept}
    return sorted(kept, key=grid.__getitem__), dict(pruned)


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


# ----------------------------------------------------------------------------- the warp-specialized kernel

H200 = get_spec("H200")
BIG = Workload("matmul", (4096, 4096, 4096), "float16", "nt")
# Both families, with values KernelConfig refuses for a ws config (2 warps, reg_split 2, 64-row tiles
# for a cooperative pair, stages below the wgmma depth, ping-pong without persistence) beside valid ones.
MIXED_WS = Knobs(block_m=(64, 128, 256), block_n=(64, 128, 256), block_k=(64,), group_m=(8,), num_warps=(2, 4, 8),
                 smem_stages=(1, 2, 4), reg_stages=(1, 2), reg_split=(1, 2), async_copy=("pointer", "tma", "ws"),
                 persistent=(False, True), split_k=(1,), wave_tail=(False, True), pingpong=(False, True),
                 epilogue_subtile=(1, 2, 4))


@pytest.mark.parametrize("workload, spec", [(BIG, H200),
                                            (Workload("matmul", (512, 8192, 8192), "bfloat16", "nn"), SPEC),
                                            (Workload("matmul", (1024, 1000, 512), "float16", "nn"), H200),
                                            (Workload("bmm", (4, 1024, 1024, 1024), "float16", "nn"), H200),
                                            (BIG, get_spec("A100")), (BIG, None)],
                         ids=["big-h200", "mid-h100", "unaligned", "bmm", "a100", "no-gpu"])
def test_ws_space_equals_making_every_config_first(workload, spec):
    space = ConfigSpace.build(workload, spec, knobs=MIXED_WS, prune=False)
    kept, pruned = _config_first(workload, MIXED_WS, "full", spec)
    assert list(space.configs) == kept and space.pruned == pruned


def test_the_families_lose_no_config():
    # Every combination of the whole product (the warp-specialized knobs on every mechanism, ws tiles
    # outside the family) that makes a config passing the rules is in the space, in product order.
    import itertools

    from alcop_triton.autotune.space import KNOB_NAMES
    kept = []
    for values in itertools.product(*MIXED_WS.values()):
        try:
            c = KernelConfig(**dict(zip(KNOB_NAMES, values)))
        except ScheduleError:
            continue
        if shape_reason(BIG, c, H200) is None:
            kept.append(c)
    space = ConfigSpace.build(BIG, H200, knobs=MIXED_WS, prune=False)
    assert list(space.configs) == kept and any(c.async_copy == "ws" for c in kept)


def _ws_rows():
    import itertools

    from alcop_triton.autotune.space import KNOB_NAMES
    values = dict(block_m=(64, 128, 256), block_n=(16, 64, 128, 256), block_k=(64, 128), group_m=(8,),
                  num_warps=(2, 4, 8), smem_stages=(1, 2, 4, 8), reg_stages=(1, 2, 4), reg_split=(1, 2),
                  async_copy=("ws", "tma"), persistent=(False, True), split_k=(1,), wave_tail=(False,), tail_split=(False,),
                  pingpong=(False, True), epilogue_subtile=(1, 2, 4))
    return [dict(zip(KNOB_NAMES, v)) for v in itertools.product(*(values[k] for k in KNOB_NAMES))]


def test_ws_config_rules_are_kernelconfigs_own():
    # A combination passes every WS_CONFIG_RULES test (and the reg_split/block_k rule, which is not the ws
    # kernel's) exactly when it makes a KernelConfig; the shared-memory and register arithmetic is
    # HopperConfig's; and numpy columns of the same rows give the same verdicts.
    from alcop_triton.autotune.space import KNOB_NAMES, WS_CONFIG_RULES, Candidate, ws_acc_regs, ws_smem_bytes
    rows = _ws_rows()
    fired = []
    for kw in rows:
        cand = Candidate(**kw)
        hit = [why for why, test in WS_CONFIG_RULES if test(cand)]
        fired.append(bool(hit))
        try:
            c = KernelConfig(**kw)
        except ScheduleError:
            assert hit or kw["block_k"] // kw["reg_split"] < 16, kw
            continue
        assert not hit, (c, hit)
        if c.async_copy == "ws":
            h = c.hopper()
            assert (ws_smem_bytes(cand), ws_acc_regs(cand)) == (h.smem_bytes, h.acc_regs)
    assert 0 < sum(fired) < len(rows)
    columns = Candidate(*(np.asarray([kw[k] for kw in rows]) for k in KNOB_NAMES))
    any_hit = np.zeros(len(rows), dtype=bool)
    for _, test in WS_CONFIG_RULES:
        any_hit |= test(columns)
    assert any_hit.tolist() == fired


def test_ws_configs_are_in_the_space_of_the_gemms_they_fit():
    from alcop_triton.kernels.matmul_ws import ws_configs
    for dtype, layout in (("float16", "nt"), ("bfloat16", "nn")):
        w = Workload("matmul", (4096, 4096, 4096), dtype, layout)
        for spec in (H200, SPEC):
            space = ConfigSpace.build(w, spec)
            assert all(c in space for c in ws_configs(dtype))
            ws = [c for c in space if c.async_copy == "ws"]
            # every ws config is one the kernel runs as it is (no clamp of hopper.plan), on tiles of the family
            assert all(c.block_m in (128, 256) and c.block_n in (128, 256) and c.block_k == 64 for c in ws)
            assert all(analytical.ws_plan(w, c, spec) == c.hopper() for c in ws)
            assert {c.pingpong for c in ws} == {False, True} and {c.epilogue_subtile for c in ws} == {1, 2, 4}


@pytest.mark.parametrize("workload, spec, reason", [
    (Workload("linear", (4096, 4096, 4096), "float16", "nt"), H200, "single half-precision GEMM"),
    (Workload("bmm", (8, 1024, 1024, 1024), "float16", "nn"), H200, "single half-precision GEMM"),
    (Workload("matmul", (4096, 4096, 4096), "float32", "nt"), H200, "single half-precision GEMM"),
    (BIG, H200.with_mma("mma_sync"), "single half-precision GEMM"),
    (BIG, get_spec("A100"), "tma needs sm90"),
    (Workload("matmul", (4096, 4100, 4096), "float16", "nn"), H200, "TMA cannot describe"),
], ids=["linear", "bmm", "float32", "mma_sync", "a100", "unaligned-output"])
def test_ws_only_where_its_kernel_runs(workload, spec, reason):
    cfg = KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=4, reg_stages=2, async_copy="ws",
                       persistent=True, pingpong=True, epilogue_subtile=2)
    assert reason in shape_reason(workload, cfg, spec)
    assert not any(c.async_copy == "ws" for c in ConfigSpace.build(workload, spec, knobs=MIXED_WS, prune=False))


def test_ws_configs_that_run_as_another_are_pruned():
    pp = KernelConfig(128, 128, 64, group_m=8, num_warps=8, smem_stages=4, reg_stages=2, async_copy="ws",
                      persistent=True, pingpong=True, epilogue_subtile=2)
    # 256 tiles < 2 x 132 SMs: ping-pong runs cooperative (hopper.plan), which the space holds itself
    mid = Workload("matmul", (512, 8192, 8192), "float16", "nt")
    assert shape_reason(mid, pp, H200) == "ws ping-pong with fewer than two tiles per SM (it runs cooperative)"
    assert shape_reason(mid, pp.replace(pingpong=False), H200) is None
    # 128 tiles <= 132 SMs: persistence buys nothing
    assert shape_reason(mid, pp.replace(pingpong=False, block_n=256), H200) == "persistent with no more tiles than SMs"
    # K = 128 is two chunks: the ring is cut to two stages, persistent or not (unlike a Triton persistent config)
    short = Workload("matmul", (8192, 8192, 128), "float16", "nt")
    assert shape_reason(short, pp, H200) == "more smem stages than reduction steps"
    assert shape_reason(short, pp.replace(smem_stages=2), H200) is None
    assert shape_reason(short, pp.tma_twin(), H200) is None
    # wgmma depth is not Triton's register prefetch: persistent ws configs keep reg_stages 2
    assert shape_reason(BIG, pp, H200) is None
    assert shape_reason(BIG, pp.tma_twin().replace(reg_stages=2), H200) == "register prefetch in a persistent tile loop"


@pytest.mark.parametrize("workload, spec", [(BIG, H200), (Workload("matmul", (16, 4096, 4096), "float16", "nt"), H200),
                                            (Workload("bmm", (8, 1024, 1024, 1024), "float16", "nn"), H200),
                                            (BIG, get_spec("A100"))], ids=["big", "decode", "bmm", "a100"])
def test_ws_adds_its_family_without_multiplying_the_space(workload, spec):
    without = ConfigSpace.build(workload, spec, knobs=Knobs(async_copy=("pointer", "tma", "box")))
    space = ConfigSpace.build(workload, spec)
    assert [c for c in space if c.async_copy != "ws"] == list(without.configs)
    assert sum(c.async_copy == "ws" for c in space) <= 640  # 4,608 ws combinations enumerated, not 2M x 6
    # the model's shortlists for untuned calls never hold ws configs (they come from measurements)
    from alcop_triton.autotune.space import DISPATCH_KNOBS, SMALL_PROBLEM_KNOBS
    assert "ws" not in DISPATCH_KNOBS.async_copy and "ws" not in SMALL_PROBLEM_KNOBS.async_copy
    assert not any(c.async_copy == "ws" for c in dispatch.model_shortlist(workload, spec))


def test_ws_spaces_rank_and_move_inside():
    space = ConfigSpace.build(BIG, H200)
    ws = [c for c in space if c.async_copy == "ws"]
    assert all(math.isfinite(space.estimates()[space.index(c)]) for c in ws)
    rng = np.random.default_rng(1)
    c = ws[0]
    for _ in range(100):
        c = space.mutate(c, rng)
        assert c in space
    assert all(n in space for n in space.neighbours(ws[0]))
    assert any(n.pingpong != ws[0].pingpong or n.epilogue_subtile != ws[0].epilogue_subtile
               for n in space.neighbours(ws[0]))
