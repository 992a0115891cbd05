"""HopperConfig: every rule refuses with the argument, the value and the rule; derived sizes."""

from __future__ import annotations

import pytest

from alcop_triton.errors import ScheduleError
from alcop_triton.hopper.config import SMEM_LIMIT, HopperConfig


@pytest.mark.parametrize("changes, words", [
    ({"block_m": 96}, ["block_m=96", "power of two"]),
    ({"block_m": 32}, ["block_m=32", "[64, 256]"]),
    ({"block_n": 512}, ["block_n=512"]),
    ({"block_k": 8}, ["block_k=8"]),
    ({"stages": 0}, ["stages=0", "[1, 8]"]),
    ({"stages": True}, ["stages=True"]),
    ({"stages": 2, "wgmma_depth": 2}, ["wgmma_depth=2", "stages=2", "retired"]),
    ({"consumers": 3}, ["consumers=3"]),
    ({"policy": "split"}, ["policy='split'"]),
    ({"persistent": 1}, ["persistent=1", "True or False"]),
    ({"epilogue_subtile": 3}, ["epilogue_subtile=3"]),
    ({"block_n": 32, "epilogue_subtile": 4}, ["epilogue_subtile=4", "block_n=32", "16 columns"]),
    ({"group_m": 0}, ["group_m=0"]),
    ({"policy": "pingpong"}, ["pingpong", "consumers=1"]),
    ({"policy": "pingpong", "consumers": 2, "persistent": False}, ["persistent=False", "several"]),
    ({"policy": "pingpong", "consumers": 2, "warp_specialize": False}, ["warp_specialize=False"]),
    ({"consumers": 2, "block_m": 64}, ["block_m=64", "multiple of 128"]),
    ({"block_m": 256, "block_n": 128}, ["accumulator registers", "256"]),
    ({"block_n": 256, "consumers": 2, "stages": 4}, ["shared memory", str(SMEM_LIMIT)]),
])
def test_each_rule_names_argument_value_and_rule(changes, words) -> None:
    with pytest.raises(ScheduleError) as err:
        HopperConfig(**changes)
    assert isinstance(err.value, ValueError)  # torch's type for a bad argument
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_replace_is_validated_and_from_dict_refuses_unknown_keys() -> None:
    with pytest.raises(ScheduleError, match="wgmma_depth=4"):
        HopperConfig().replace(wgmma_depth=4)
    with pytest.raises(ScheduleError, match="unknown keys \\['stages_'\\]"):
        HopperConfig.from_dict({"stages_": 3})
    c = HopperConfig(consumers=2, policy="pingpong", epilogue_subtile=2)
    assert HopperConfig.from_dict(c.to_dict()) == c


def test_derived_sizes() -> None:
    pp = HopperConfig(consumers=2, policy="pingpong", stages=4, epilogue_subtile=2)
    assert pp.ring_bytes == 4 * (128 + 128) * 64 * 2
    assert pp.epilogue_bytes == 2 * 128 * 64 * 2  # one slice buffer per consumer
    assert (pp.consumer_warps, pp.consumer_partitions, pp.total_warps) == (4, 2, 12)
    assert pp.maxnreg is not None and pp.maxnreg * pp.total_warps * 32 <= 65536
    co = HopperConfig(block_n=256, consumers=2, policy="cooperative", stages=3, epilogue_subtile=2)
    assert (co.consumer_warps, co.consumer_partitions, co.acc_regs) == (8, 1, 128)
    inline = HopperConfig(warp_specialize=False, persistent=False)
    assert inline.maxnreg is None and inline.total_warps == 4
    assert pp.tag() == "m128n128k64_s4d1_c2pp_ws_pers_e2_g8"
