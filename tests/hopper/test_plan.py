"""plan(): each level's depth for a workload, clamped where it cannot pay or run, with the reason."""

from __future__ import annotations

import pytest

from alcop_triton.errors import ScheduleError
from alcop_triton.hopper import HopperConfig, explain, plan

PP = HopperConfig(consumers=2, policy="pingpong", stages=4, wgmma_depth=2, epilogue_subtile=2)


def test_a_large_gemm_keeps_every_level() -> None:
    p = plan(8192, 8192, 8192, PP)
    assert p.config == PP and p.notes == ()
    assert [lv.depth for lv in p.levels] == [4, 2, 2]
    text = explain(p)
    assert "loader warp" in text and "retired" in text and "ping-pong" in text


def test_short_reduction_clamps_the_ring_then_the_wgmma_depth() -> None:
    p = plan(4096, 4096, 128, PP)  # two chunks of 64
    assert (p.config.stages, p.config.wgmma_depth) == (2, 1)
    assert any("level 1" in n and "2 chunk(s)" in n for n in p.notes)
    assert any("level 2" in n and "stages - 1" in n for n in p.notes)
    one = plan(4096, 4096, 64, PP)
    assert (one.config.stages, one.config.wgmma_depth) == (1, 0)


def test_few_tiles_drop_persistence_and_pingpong() -> None:
    p = plan(1024, 1024, 4096, PP, sms=132)  # 64 tiles of 128 x 128
    assert not p.config.persistent and p.config.policy == "cooperative" and p.config.consumers == 2
    assert any("persistence buys nothing" in n for n in p.notes)
    assert any("ping-pong" in n and "cooperative" in n for n in p.notes)
    mid = plan(2048, 2048 + 128, 4096, PP, sms=132)  # 16 x 17 = 272 tiles >= 2 x 132: ping-pong stays
    assert mid.config.policy == "pingpong"


def test_depth_equal_to_stages_minus_one_is_flagged() -> None:
    p = plan(8192, 8192, 8192, HopperConfig(stages=2, wgmma_depth=1))
    assert any("no slot to copy ahead" in n for n in p.notes)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_sizes_are_checked(bad) -> None:
    with pytest.raises(ScheduleError, match="m="):
        plan(bad, 8, 8)
