from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alcop_triton.errors import ScheduleError
from alcop_triton.model.analytical import (bottleneck_estimate, estimate, mma_path, pipeline_latency,
                                           resources)
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

MM = Workload("matmul", (4096, 4096, 4096))


def test_plm_both_branches():
    # Hidden: 1 <= (2*1 - 1) * 1 -> use-bound.
    assert pipeline_latency(1.0, 1.0, 10, 2, 1) == 10.0
    # Load-bound: 5 > (2*1 - 1) * 1 -> (5 + 1) * 10 / 2.
    assert pipeline_latency(5.0, 1.0, 10, 2, 1) == 30.0
    # Multiplexing hides it: 5 <= (2*3 - 1) * 1.
    assert pipeline_latency(5.0, 1.0, 10, 2, 3) == 10.0
    # Boundary is inclusive.
    assert pipeline_latency(3.0, 1.0, 4, 4, 1) == 4.0


def test_resources_hand_computed(h100):
    c = KernelConfig(block_m=128, block_n=256, block_k=64, num_warps=8, smem_stages=3)
    r = resources(MM, c, h100)
    assert r.smem_bytes == (128 * 64 + 64 * 256) * 2 * 3 == 147456
    # 128 fp32 accumulators + 24 address regs (24576 B of tiles / 16 B / 256 threads * 2) + 24 base.
    assert r.regs_per_thread == 176
    assert r.threads == 256 and r.blocks_per_sm == 1 and r.valid and r.mma_path == "wgmma"
    small_cfg = KernelConfig(block_m=64, block_n=64, block_k=32, num_warps=4, smem_stages=3)
    small = resources(MM, small_cfg, h100)
    assert small.smem_bytes == (64 * 32 + 32 * 64) * 2 * 3 == 24576
    # 64 regs x 32 lanes = 2048 per warp -> 32 warps per SM -> 8 blocks; smem would allow 9.
    assert small.regs_per_thread == 64 and small.blocks_per_sm == 8 and small.limited_by == "regs"
    # With registers to spare, shared memory limits: 233472 // (24576 + 1024 reserved per block) = 9.
    roomy = resources(MM, small_cfg, dataclasses.replace(h100, regs_per_sm=1 << 20))
    assert roomy.blocks_per_sm == 9 and roomy.limited_by == "smem"


def test_resources_stage_one_and_epilogue_scratch(h100):
    # num_stages=1 still stages through shared memory once; the epilogue's conversion scratch
    # (128*128*2 bytes) reuses the pipeline buffers and counts when larger.
    c = KernelConfig(block_m=128, block_n=128, block_k=32, num_warps=4, smem_stages=1)
    assert resources(MM, c, h100).smem_bytes == max((128 * 32 + 32 * 128) * 2, 128 * 128 * 2) == 32768
    c2 = KernelConfig(block_m=64, block_n=64, block_k=128, num_warps=4, smem_stages=1)
    assert resources(MM, c2, h100).smem_bytes == (64 * 128 + 128 * 64) * 2
    tma = c2.replace(async_copy="tma", smem_stages=2)
    assert resources(MM, tma, h100).smem_bytes == (64 * 128 + 128 * 64) * 2 * 2 + 16


def test_invalid_smem_and_regs(h100):
    big = KernelConfig(block_m=256, block_n=256, block_k=128, num_warps=8, smem_stages=3)
    r = resources(MM, big, h100)
    assert not r.valid and "shared memory" in r.reason and "393216" in r.reason and "232448" in r.reason
    e = estimate(MM, big, h100)
    assert not e.valid and e.time_s == math.inf and "shared memory" in e.reason
    spill = KernelConfig(block_m=256, block_n=256, block_k=32, num_warps=4, smem_stages=2)
    r = resources(MM, spill, h100)
    assert not r.valid and r.limited_by == "regs" and "registers" in r.reason and "255" in r.reason
    assert bottleneck_estimate(MM, spill, h100) == math.inf


def test_tile_larger_than_problem_is_valid(h100):
    wl = Workload("matmul", (16, 16, 16))
    e = estimate(wl, KernelConfig(block_m=128, block_n=128, block_k=64), h100)
    assert e.valid and 0 < e.time_s < 1e-3 and e.breakdown["total_blocks"] == 1


def test_mma_path_selection(h100):
    assert mma_path(KernelConfig(block_m=64, num_warps=4), h100) == "wgmma"
    assert mma_path(KernelConfig(block_m=32, num_warps=4), h100) == "mma_sync"
    assert mma_path(KernelConfig(block_m=64, num_warps=2), h100) == "mma_sync"
    assert mma_path(KernelConfig(block_m=64, num_warps=4), h100.with_mma("mma_sync")) == "mma_sync"
    assert mma_path(KernelConfig(block_m=128, num_warps=8), get_spec("A100")) == "mma_sync"


def test_breakdown_terms(h100):
    e = estimate(MM, KernelConfig(block_m=128, block_n=128, block_k=64, num_warps=4, smem_stages=4), h100)
    for term in ("t_threadblk", "n_batches", "t_main_loop", "t_smem_load", "t_smem_use", "t_reg_load", "t_compute",
                 "t_llc", "t_dram", "t_epilogue", "t_init", "util", "blocks_per_sm", "waves", "floor_compute"):
        assert term in e.breakdown and e.breakdown[term] >= 0
    b = e.breakdown
    assert b["t_threadblk"] == pytest.approx(b["t_init"] + b["t_main_loop"] + b["t_epilogue"])
    assert b["t_smem_load"] == max(b["t_llc"], b["t_dram"])
    assert b["n_batches"] == math.ceil(b["total_blocks"] / (132 * b["blocks_per_sm"]))


def test_more_stages_never_slower_when_load_bound(h100):
    wl = Workload("matmul", (1024, 64, 8192))
    for bm, bn, bk, w in [(64, 32, 128, 4), (32, 32, 64, 4), (64, 64, 64, 4), (128, 64, 32, 8)]:
        prev = None
        for s in range(1, 9):
            c = KernelConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, smem_stages=s)
            e = estimate(wl, c, h100)
            if not e.valid:
                break
            if prev is not None and prev.breakdown["blocks_per_sm"] == e.breakdown["blocks_per_sm"]:
                assert e.breakdown["t_main_loop"] <= prev.breakdown["t_main_loop"] * (1 + 1e-12)
            prev = e
    # ... and deeper pipelines do help a load-bound loop.
    one = estimate(wl, KernelConfig(block_m=64, block_n=32, block_k=128, num_warps=4, smem_stages=1), h100)
    four = estimate(wl, KernelConfig(block_m=64, block_n=32, block_k=128, num_warps=4, smem_stages=4), h100)
    assert one.breakdown["smem_load_bound"] == 1.0 and four.time_s < one.time_s


def test_bigger_problem_takes_longer(h100):
    for c in [KernelConfig(), KernelConfig(block_m=128, block_n=256, block_k=64, num_warps=8, smem_stages=4),
              KernelConfig(block_m=32, block_n=64, block_k=32, num_warps=4, smem_stages=2)]:
        for shape, bigger in [((1024, 1024, 1024), (2048, 1024, 1024)), ((1024, 1024, 1024), (1024, 2048, 1024)),
                              ((1024, 1024, 1024), (1024, 1024, 4096)), ((512, 512, 512), (8192, 8192, 8192))]:
            assert estimate(Workload("matmul", bigger), c, h100).time_s > estimate(Workload("matmul", shape), c, h100).time_s
        assert (estimate(Workload("bmm", (8, 512, 512, 512)), c, h100).time_s
                > estimate(Workload("bmm", (2, 512, 512, 512)), c, h100).time_s)


def test_every_knob_matters(h100):
    base = KernelConfig(block_m=64, block_n=64, block_k=64, num_warps=4, smem_stages=3)
    t0 = estimate(MM, base, h100).time_s
    tma = base.replace(async_copy="tma")
    assert estimate(MM, tma, h100).breakdown["t_issue"] < estimate(MM, base, h100).breakdown["t_issue"]
    assert resources(MM, tma, h100).regs_per_thread < resources(MM, base, h100).regs_per_thread
    wide = KernelConfig(block_m=64, block_n=256, block_k=32, num_warps=4, smem_stages=3)  # issue-bound with pointers
    assert estimate(MM, wide.replace(async_copy="tma"), h100).time_s < estimate(MM, wide, h100).time_s
    # Grouped ordering shrinks a batch's working set: 132 blocks of 128x256 on 8192^3 touch
    # 5 row tiles x 32 column tiles in row-major order but 8 x 17 with GROUP_M=8.
    big, tile = Workload("matmul", (8192, 8192, 8192)), KernelConfig(block_m=128, block_n=256, block_k=64, num_warps=8,
                                                                     smem_stages=4)
    g1, g8 = estimate(big, tile.replace(group_m=1), h100), estimate(big, tile, h100)
    assert g1.breakdown["dram_bytes_per_loop"] == (5 * 128 + 32 * 256) * 64 * 2
    assert g8.breakdown["dram_bytes_per_loop"] == (8 * 128 + 17 * 256) * 64 * 2
    sync = h100.with_mma("mma_sync")
    ts = estimate(MM, base, sync).time_s
    assert estimate(MM, base.replace(reg_stages=2, reg_split=2), sync).time_s != ts
    assert estimate(MM, base, sync).time_s > t0  # mma.sync is the slower path


def test_conv_index_overhead(h100):
    conv = Workload("conv2d", (64, 56, 56, 64, 64, 3, 3, 1, 1))
    _, m, n, k = conv.gemm_dims()
    gemm = Workload("matmul", (m, n, k))
    c = KernelConfig(block_m=128, block_n=64, block_k=64, num_warps=4, smem_stages=3)
    ec, eg = estimate(conv, c, h100), estimate(gemm, c, h100)
    assert ec.breakdown["t_issue"] > eg.breakdown["t_issue"]
    assert ec.breakdown["dram_bytes_per_loop"] < eg.breakdown["dram_bytes_per_loop"]  # L2 absorbs im2col repeats


def test_bottleneck_estimate(h100):
    c = KernelConfig(block_m=128, block_n=128, block_k=64, num_warps=4)
    t = bottleneck_estimate(MM, c, h100)
    assert t >= MM.flops / h100.tc_fp16_wgmma and t >= MM.min_bytes / h100.dram_bw
    assert t < estimate(MM, c, h100).time_s


_pow2 = st.sampled_from([16, 32, 64, 128, 256, 512])
_shapes = {
    "matmul": st.tuples(*[st.integers(1, 20000)] * 3),
    "linear": st.tuples(*[st.integers(1, 20000)] * 3),
    "bmm": st.tuples(st.integers(1, 64), *[st.integers(1, 4096)] * 3),
    "conv2d": st.tuples(st.integers(1, 64), st.integers(7, 64), st.integers(7, 64), st.integers(1, 512),
                        st.integers(1, 512), st.sampled_from([1, 3, 5]), st.sampled_from([1, 3, 5]),
                        st.integers(1, 2), st.integers(0, 2)),
    "conv1d": st.tuples(st.integers(1, 16), st.integers(8, 512), st.just(1), st.integers(1, 256), st.integers(1, 256),
                        st.sampled_from([1, 3]), st.just(1), st.just(1), st.integers(0, 1)),
    "conv3d": st.tuples(st.integers(1, 4), st.integers(4, 16), st.integers(4, 16), st.integers(4, 16),
                        st.integers(1, 64), st.integers(1, 64), st.sampled_from([1, 3]), st.sampled_from([1, 3]),
                        st.sampled_from([1, 3]), st.just(1), st.just(1)),
}


@st.composite
def _case(draw):
    op = draw(st.sampled_from(sorted(_shapes)))
    try:
        wl = Workload(op, draw(_shapes[op]), draw(st.sampled_from(["float16", "bfloat16", "float32"])))
    except ValueError:
        wl = Workload("matmul", (64, 64, 64))
    bk = draw(_pow2)
    split = draw(st.sampled_from([s for s in (1, 2, 4, 8) if bk // s >= 16]))
    cfg = KernelConfig(block_m=draw(_pow2), block_n=draw(_pow2), block_k=bk, group_m=draw(st.integers(1, 64)),
                       num_warps=draw(st.sampled_from([1, 2, 4, 8, 16])), smem_stages=draw(st.integers(1, 8)),
                       reg_stages=draw(st.integers(1, 4)), reg_split=split,
                       async_copy=draw(st.sampled_from(["pointer", "tma"])))
    spec = draw(st.sampled_from([get_spec("H100"), get_spec("H100", mma="mma_sync"), get_spec("A100"), get_spec("H200")]))
    return wl, cfg, spec


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_fuzz_never_crashes(case):
    wl, cfg, spec = case
    e = estimate(wl, cfg, spec)
    if e.valid:
        assert 0 < e.time_s < math.inf and not e.reason
        assert all(math.isfinite(v) for v in e.breakdown.values())
    else:
        assert e.time_s == math.inf and e.reason
    b = bottleneck_estimate(wl, cfg, spec)
    assert (b < math.inf) == e.valid


def test_config_validation_is_records_job():
    with pytest.raises(ScheduleError):
        KernelConfig(block_k=16, reg_split=2)


# ----------------------------------------------------------------------------- the warp-specialized kernel

def _ws(bm=128, bn=128, warps=8, stages=4, depth=1, persistent=True, pingpong=True, sub=2) -> KernelConfig:
    return KernelConfig(bm, bn, 64, group_m=8, num_warps=warps, smem_stages=stages, reg_stages=depth + 1,
                        async_copy="ws", persistent=persistent, pingpong=pingpong, epilogue_subtile=sub)


def test_ws_resources_are_the_kernels_program():
    from alcop_triton.kernels.matmul_ws import ws_configs
    h200 = get_spec("H200")
    for c in [*ws_configs("float16"), _ws(warps=4, pingpong=False, persistent=False)]:
        r, h = resources(MM, c, h200), c.hopper()
        assert (r.smem_bytes, r.regs_per_thread, r.threads) == (h.smem_bytes, h.maxnreg, 32 * h.total_warps)
        assert r.valid and r.mma_path == "wgmma" and r.blocks_per_sm >= 1


@pytest.mark.parametrize("workload, spec", [
    (Workload("bmm", (4, 1024, 1024, 1024)), "H200"), (Workload("matmul", (4096, 4096, 4096), "float32"), "H200"),
    (MM, "A100"), (MM, "H100-mma_sync")])
def test_ws_configs_are_estimated_as_their_twin_where_the_kernel_does_not_run(workload, spec):
    s = get_spec(spec.split("-")[0])
    s = s.with_mma("mma_sync") if spec.endswith("mma_sync") else s
    e, twin = estimate(workload, _ws(), s), estimate(workload, _ws().tma_twin(), s)
    assert e.time_s == twin.time_s and e.breakdown["ws"] == 0.0
    assert resources(workload, _ws(), s) == resources(workload, _ws().tma_twin(), s)


def test_ws_estimate_follows_what_the_kernel_does():
    h200 = get_spec("H200")
    pp, coop = estimate(MM, _ws(), h200), estimate(MM, _ws(pingpong=False), h200)
    assert pp.valid and coop.valid and pp.breakdown["ws"] == 1.0
    # the loader warp issues the copies: nothing on the consumers' side
    assert pp.breakdown["t_issue"] == coop.breakdown["t_issue"] == 0.0
    # ping-pong: two tiles per SM at once, and each later round's epilogue behind the other's main loop
    assert (pp.breakdown["tiles_per_sm"], coop.breakdown["tiles_per_sm"]) == (2.0, 1.0)
    rounds = pp.breakdown["n_batches"] - 1
    assert pp.breakdown["t_hidden_by_persistence"] >= rounds * (pp.breakdown["t_init"] + h200.lat_dram_write)
    # one consumer waiting for each wgmma (depth 0) exposes its latency; one group in flight hides it
    one = dict(warps=4, pingpong=False, persistent=False)
    d0, d1 = estimate(MM, _ws(depth=0, **one), h200), estimate(MM, _ws(depth=1, **one), h200)
    assert d0.breakdown["t_reg_loop"] > d1.breakdown["t_reg_loop"] == d1.breakdown["t_compute"]
    # and a wgmma group in flight holds a ring slot: depth 2 of 4 stages leaves one chunk ahead
    assert estimate(MM, _ws(depth=2, **one), h200).time_s > d1.time_s


def test_ws_estimate_is_that_of_the_planned_kernel():
    # K = 128 is two chunks of 64: hopper.plan cuts the ring to two stages; 256 tiles < 2 x 132 SMs:
    # ping-pong runs cooperative
    h200 = get_spec("H200")
    w = Workload("matmul", (2048, 2048, 128))
    assert estimate(w, _ws(stages=4), h200).time_s == estimate(w, _ws(stages=2, pingpong=False), h200).time_s


def test_every_ws_config_of_a_space_has_a_finite_estimate():
    from alcop_triton.autotune.space import ConfigSpace
    h200 = get_spec("H200")
    for w in (MM, Workload("matmul", (512, 8192, 8192), "bfloat16", "nn"), Workload("matmul", (256, 384, 2048))):
        ws = [c for c in ConfigSpace.build(w, h200, prune=False) if c.async_copy == "ws"]
        assert ws
        for c in ws:
            e = estimate(w, c, h200)
            assert e.valid and math.isfinite(e.time_s) and e.time_s > 0, (w, c, e.reason)
            assert math.isfinite(bottleneck_estimate(w, c, h200))
