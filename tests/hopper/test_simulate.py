"""The generated kernels' own source run on the CPU against a model of sm90's mbarriers, TMA and wgmma
(``alcop_triton.hopper.simulate``): no deadlock, no shared-memory race, C exact, across K iterations and
persistent tiles (odd tile counts per program, a ping-pong consumer with no tile), for the GPU tests'
variants; and each protocol mistake the model exists for, planted in the source, caught."""

from __future__ import annotations

import pytest

from alcop_triton.hopper import HopperConfig, plan
from alcop_triton.hopper.emit import emit
from alcop_triton.hopper.simulate import ProtocolError, run_kernel, simulate
from tests.hopper.test_matmul_gpu import CONFIGS

# (m, n, k, programs): 9 tiles of 128 x 128 over 2 programs (5 and 4: an odd count), kt = 4 chunks, a K tail;
# 2 tiles over 2 programs (ping-pong's second consumer gets none), kt = 1 < stages and < wgmma_depth + 1
SHAPES = [(300, 260, 200, 2), (130, 70, 37, 2), (520, 390, 330, 3)]


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_gpu_test_variants_run_clean_in_the_model(name: str, layout: str) -> None:
    m, n, k, programs = SHAPES[0]
    got = simulate(CONFIGS[name], "float16", layout, m, n, k, programs=programs, planned=False, seed=1)
    assert got.programs == programs and got.tiles == (9 if CONFIGS[name].block_n == 128 else 6)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("shape", SHAPES[1:])
@pytest.mark.parametrize("seed", [0, 7])
def test_tile_counts_and_short_reductions(name: str, shape: tuple[int, int, int, int], seed: int) -> None:
    m, n, k, programs = shape
    simulate(CONFIGS[name], "bfloat16", "nt", m, n, k, programs=programs, planned=False, seed=seed)


def test_planned_configs_and_the_epilogue_options() -> None:
    pp4 = HopperConfig(consumers=2, policy="pingpong", stages=3, wgmma_depth=2, epilogue_subtile=4)
    assert plan(520, 390, 330, pp4, sms=2).config.policy == "pingpong"
    simulate(pp4, "float16", "tn", 520, 390, 330, sms=2, bias=True, activation="relu")
    simulate(HopperConfig(consumers=2, policy="cooperative", block_m=256, block_n=64, stages=2, wgmma_depth=1,
                          epilogue_subtile=2, warp_specialize=False), "bfloat16", "tt", 600, 200, 100, sms=3,
             bias=True)
    simulate(HopperConfig(stages=1, wgmma_depth=0, persistent=True, warp_specialize=True), "float16", "nn",
             300, 300, 64, sms=2)


@pytest.mark.parametrize("activation", ["gelu", "silu", "sigmoid", "tanh", None])
def test_every_activation_and_a_residual_in_slices_of_odd_tiles(activation: str | None) -> None:
    # the residual read by pointers at (row, col) of each slice; rows and columns past C masked
    pp = HopperConfig(consumers=2, policy="pingpong", stages=3, wgmma_depth=1, epilogue_subtile=2)
    simulate(pp, "float16", "nt", 200, 150, 96, sms=2, bias=activation is not None, activation=activation,
             residual=True)
    simulate(HopperConfig(block_n=64, epilogue_subtile=4, warp_specialize=False), "bfloat16", "tn", 70, 90, 64,
             sms=1, activation=activation, residual=True)


# Each a mistake in the protocol, planted in the generated text, that the model must catch.
PLANTED = [
    ("pingpong", "((g // STAGES) & 1) ^ 1)", "((g // STAGES) & 1))", "deadlock"),  # loader: fresh empty blocks
    ("pingpong", "a_desc.block_type.nbytes + b_desc.block_type.nbytes", "a_desc.block_type.nbytes", ""),
    ("level12_ws", "mbarrier.arrive(empty.index((c - WGMMA_DEPTH) % STAGES)", "mbarrier.arrive(empty.index(c % STAGES)",
     ""),  # a slot released while its wgmma is in flight
    ("pingpong", "        mbarrier.wait(turn.index(FIRST)", "        0 and mbarrier.wait(turn.index(FIRST)", ""),
    ("pingpong", "(((t - pid) // (2 * nprog)) & 1) ^ (1 - FIRST)", "(((t - pid) // (2 * nprog)) & 1) ^ FIRST",
     "deadlock"),
    ("pingpong", "    tma.store_wait(pendings=0)  # the buffer", "    0  # the buffer", "tma.store_wait missing"),
    ("level12_ws", "        g = ((t - pid) // nprog) * kt\n", "        g = 0\n", ""),  # ring restarted per tile
    ("level12", "nxt = k + STAGES - WGMMA_DEPTH ", "nxt = k + STAGES - WGMMA_DEPTH + 1 ", "unretired wgmma"),
    ("cooperative", "for k in range(gl.maximum(kt - WGMMA_DEPTH, 0), kt):",
     "for k in range(gl.maximum(kt - WGMMA_DEPTH, 0), kt - 1):", "deadlock"),  # a last slot never released
    ("level12", "acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))",
     "acc = warpgroup_mma_wait(num_outstanding=WGMMA_DEPTH, deps=(acc, ))", "in flight"),
]


@pytest.mark.parametrize("name, old, new, says", PLANTED, ids=[f"{p[0]}-{i}" for i, p in enumerate(PLANTED)])
def test_planted_protocol_mistakes_are_caught(name: str, old: str, new: str, says: str) -> None:
    ks = emit(CONFIGS[name], "float16", "nt")
    assert old in ks.source
    with pytest.raises(ProtocolError, match=says or None):
        run_kernel(ks, 520, 390, 330, programs=3, seed=3, source=ks.source.replace(old, new), max_steps=200_000)


def test_a_residual_read_at_the_wrong_place_is_caught() -> None:
    ks = emit(CONFIGS["pingpong"], "float16", "nt", residual=True)
    old = "rows[:, None] * N + cols[None, :]"
    assert old in ks.source
    with pytest.raises(ProtocolError, match="wrong"):
        run_kernel(ks, 200, 150, 96, programs=2, seed=1, source=ks.source.replace(old, "rows[:, None] * N"))
