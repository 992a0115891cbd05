"""Wave tail: the rows of tiles past the last whole wave (one tile per SM) run as a second launch of 64 x 64 tiles,
or (``tail_split``) of the config's own tiles split along K over the SMs the tail leaves idle.

Checked in Triton's CPU interpreter, where a wave is ``build.INTERPRETER_PROGRAMS`` programs (so small
shapes split), against torch in float64 with NaN-poisoned outputs: odd sizes, B stored N x K, fused
epilogues with a residual read by rows, the prebound launch, and the cases that stay one launch.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from alcop_triton import KernelConfig, Schedule, ScheduleError, build
from alcop_triton.build import INTERPRETER_PROGRAMS, CompiledKernel
from alcop_triton.kernels import matmul as km
from alcop_triton.model.analytical import estimate
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import MAX_SPLIT_K, TAIL_CONFIG, Workload, tail_split_factor
from alcop_triton.schedule import Inline, WaveTail


def _cfg(**kw: object) -> KernelConfig:
    return KernelConfig(**{"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 2, "smem_stages": 2,
                           "async_copy": "tma", "wave_tail": True, **kw})  # type: ignore[arg-type]


def _tiles(m: int, n: int, cfg: KernelConfig) -> int:
    return -(-m // cfg.block_m) * -(-n // cfg.block_n)


@pytest.mark.interpreter
@pytest.mark.parametrize("m,n,k,block_m", [(300, 64, 96, 64), (333, 40, 72, 128), (259, 130, 50, 64)],
                         ids=["5_row_tiles", "block_m_128_odd", "odd_5x3_tiles"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_split_matches_torch(m: int, n: int, k: int, block_m: int, dtype: str, kit) -> None:
    cfg = _cfg(block_m=block_m)
    kern = kit.matmul(dtype, cfg)
    g = torch.Generator().manual_seed(m * n + k)
    a, bt = kit.rand((m, k), dtype, g), kit.rand((n, k), dtype, g)
    out = kit.poisoned((m, n), dtype)
    launch, _ = kern.bind(a, bt.t(), out)
    tiles = _tiles(m, n, cfg)
    assert tiles % INTERPRETER_PROGRAMS and tiles > INTERPRETER_PROGRAMS
    # the head covers the rows of tiles within whole waves, the tail the rest in 64-row tiles
    tiles_n = -(-n // cfg.block_n)
    rows = tiles // INTERPRETER_PROGRAMS * INTERPRETER_PROGRAMS // tiles_n
    assert launch.then is not None and launch.grid == (rows * tiles_n, 1)
    assert launch.args[-2:] == (0, rows)
    lo = rows * block_m // TAIL_CONFIG.block_m
    assert launch.then.args[-2:] == (lo, -(-m // TAIL_CONFIG.block_m))
    launch()
    kit.assert_close(out, a.double() @ bt.double().t(), dtype, f"{m}x{n}x{k}")
    out.fill_(float("nan"))
    launch.prebind()(a, bt.t(), out)
    kit.assert_close(out, a.double() @ bt.double().t(), dtype, f"{m}x{n}x{k} prebound")
    head = next(v for (_, _, _, role), v in kern._variants.items() if role == "head").source
    assert "num_pid_m = tile_hi - tile_lo" in head and "pid_m = tile_lo + first_pid_m" in head
    assert "WaveTail(head)" in head


@pytest.mark.interpreter
@pytest.mark.parametrize("split", [2, 3])
def test_a_tail_schedule_with_split_k(split: int, kit) -> None:
    # another tail than the library's (what benchmarks/probes/wave_tail_configs.py measures): its programs
    # each reduce one slice of K, the last to arrive adds the slices in order
    inputs, c = km.matmul_te("float32", False)
    kern = build(Schedule.from_config(c, _cfg()), inputs + [c])  # not the kit's cached kernel: its tail is replaced
    tail = TAIL_CONFIG.replace(block_k=32, smem_stages=2, split_k=split)
    kern._tails[1] = CompiledKernel(kern.schedule.tail_schedule(tail), inputs + [c])
    g = torch.Generator().manual_seed(split)
    m, n, k = 300, 64, 200
    a, b = kit.rand((m, k), "float32", g), kit.rand((k, n), "float32", g)
    out = kit.poisoned((m, n), "float32")
    launch, _ = kern.bind(a, b, out)
    assert launch.then is not None and launch.then.grid == (1, 1, split)  # one 64-row tile left, split
    launch()
    kit.assert_close(out, a.double() @ b.double(), "float32", f"tail split {split}")
    assert "SplitK" in kern._tails[1].source


@pytest.mark.interpreter
def test_epilogue_with_a_residual_read_by_rows(kit) -> None:
    ep = km.Epilogue(bias=True, activation="gelu", residual=True, alpha=0.5, beta=2.0)
    kern = kit.matmul("float32", _cfg(), ep=ep)
    g = torch.Generator().manual_seed(5)
    m, n, k = 261, 60, 40
    a, b = kit.rand((m, k), "float32", g), kit.rand((k, n), "float32", g)
    bias, res = kit.rand((n,), "float32", g), kit.rand((m, n), "float32", g)
    out = kit.poisoned((m, n), "float32")
    launch, _ = kern.bind(a, b, bias, res, out)
    assert launch.then is not None
    launch()
    ref = F.gelu(ep.alpha * (a.double() @ b.double()) + bias.double()) + ep.beta * res.double()
    kit.assert_close(out, ref, "float32", "bias, gelu, residual")


@pytest.mark.interpreter
@pytest.mark.parametrize("m,n", [(128, 64), (64, 64), (256, 128), (40, 64)],
                         ids=["one_whole_wave", "less_than_a_wave", "two_whole_waves", "one_partial_tile"])
def test_whole_waves_or_less_stay_one_launch(m: int, n: int, kit) -> None:
    kern = kit.matmul("float16", _cfg())
    g = torch.Generator().manual_seed(m + n)
    a, b = kit.rand((m, 48), "float16", g), kit.rand((48, n), "float16", g)
    out = kit.poisoned((m, n), "float16")
    launch, _ = kern.bind(a, b, out)
    assert launch.then is None and "tile_lo" not in kern.source
    launch()
    kit.assert_close(out, a.double() @ b.double(), "float16", f"{m}x{n}")


@pytest.mark.interpreter
def test_a_batch_stays_one_launch(kit) -> None:
    kern = kit.matmul("float16", _cfg(), batched=True)
    g = torch.Generator().manual_seed(9)
    a, b = kit.rand((2, 300, 32), "float16", g), kit.rand((2, 32, 64), "float16", g)
    out = kit.poisoned((2, 300, 64), "float16")
    launch, _ = kern.bind(a, b, out)
    assert launch.then is None
    launch()
    kit.assert_close(out, a.double() @ b.double(), "float16", "bmm")


@pytest.mark.parametrize("kw,rule", [({"persistent": True}, "persistent=True"), ({"split_k": 2}, "split_k=2"),
                                     ({"block_m": 32}, "block_m=32")])
def test_config_refuses_what_a_tail_cannot_split(kw: dict[str, object], rule: str) -> None:
    with pytest.raises(ScheduleError, match=rule):
        _cfg(**kw)
    with pytest.raises(ScheduleError, match="wave_tail='yes'"):
        _cfg(wave_tail="yes")


def test_config_round_trip_and_name() -> None:
    cfg = _cfg()
    assert str(cfg).endswith("_tma_tail") and cfg.to_dict()["WAVE_TAIL"] is True
    assert KernelConfig.from_dict(cfg.to_dict()) == cfg
    plain = cfg.replace(wave_tail=False)
    assert "WAVE_TAIL" not in plain.to_dict() and KernelConfig.from_dict(plain.to_dict()) == plain


def test_schedule_step_and_tail_schedule() -> None:
    inputs, out = km.matmul_te("float16", False, km.Epilogue(activation="gelu"))
    s = Schedule.from_config(out, _cfg())
    assert s.last(WaveTail) is not None and s.config() == _cfg()
    inlined = [st for st in s.steps if isinstance(st, Inline)]
    tail = s.tail_schedule()
    assert tail.config() == TAIL_CONFIG.replace(group_m=2)  # grouping, buffers and inlining as the head's
    assert [st for st in tail.steps if isinstance(st, Inline)] == inlined


def test_model_estimates_the_tail_only_where_it_splits() -> None:
    spec = get_spec("H100")
    cfg = KernelConfig(128, 256, 64, num_warps=8, smem_stages=3, async_copy="tma")
    # 16 x 9 tiles of 128 x 256 over 132 SMs: one wave and 12 tiles more
    short = Workload("matmul", (1970, 2304, 768), "float16", "nt")
    tail = estimate(short, cfg.replace(wave_tail=True), spec)
    assert tail.valid and tail.breakdown["t_wave_tail"] > 0
    assert tail.time_s < estimate(short, cfg, spec).time_s
    # 7 x 10 tiles: less than one wave, launched as one kernel
    few = Workload("matmul", (896, 2560, 2560), "float16", "nt")
    assert estimate(few, cfg.replace(wave_tail=True), spec).time_s == estimate(few, cfg, spec).time_s


# ----------------------------------------------------------------------------- the tail split along K

@pytest.mark.parametrize("tail_tiles,chunks,sms,stages,want", [
    (36, 48, 132, 4, 3),     # 6304x768x3072 in 128 x 128 tiles on an H200: 3 slices of 16 chunks
    (38, 80, 132, 4, 3),     # 2056x1280x5120: 132 // 38
    (1, 1000, 132, 2, MAX_SPLIT_K),  # one tile left, a long reduction: capped
    (36, 6, 132, 4, 1),      # 6 chunks: a slice would be shorter than the pipeline
    (70, 48, 132, 4, 1),     # more tiles left than half the SMs: no split of two fits
    (0, 48, 132, 4, 1)])
def test_tail_split_factor(tail_tiles: int, chunks: int, sms: int, stages: int, want: int) -> None:
    assert tail_split_factor(tail_tiles, chunks, sms, stages) == want


def test_tail_split_config_rules_and_round_trip() -> None:
    with pytest.raises(ScheduleError, match="tail_split=True with wave_tail=False"):
        _cfg(wave_tail=False, tail_split=True)
    with pytest.raises(ScheduleError, match="tail_split=1"):
        _cfg(tail_split=1)
    cfg = _cfg(tail_split=True)
    assert str(cfg).endswith("_tma_tailsplit") and cfg.to_dict()["TAIL_SPLIT"] is True
    assert KernelConfig.from_dict(cfg.to_dict()) == cfg and "TAIL_SPLIT" not in _cfg().to_dict()
    inputs, out = km.matmul_te("float16", False)
    s = Schedule.from_config(out, cfg)
    assert s.last(WaveTail) == WaveTail(split=True) and s.config() == cfg


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("m,n,k,split", [(300, 64, 200, 2), (270, 40, 130, 2), (300, 64, 40, 1)],
                         ids=["one_tile_left", "odd_sizes", "too_short_to_split"])
def test_tail_split_matches_torch(m: int, n: int, k: int, split: int, dtype: str, kit) -> None:
    # two "SMs" in the interpreter: 5 row tiles make 4 in whole waves and one left, split in two where its
    # reduction holds two slices of the pipeline's depth (else the library's 64 x 64 tail)
    cfg = _cfg(tail_split=True)
    kern = kit.matmul(dtype, cfg)
    g = torch.Generator().manual_seed(m + n + k)
    a, bt = kit.rand((m, k), dtype, g), kit.rand((n, k), dtype, g)
    out = kit.poisoned((m, n), dtype)
    launch, _ = kern.bind(a, bt.t(), out)
    tiles_n = -(-n // cfg.block_n)
    rows = _tiles(m, n, cfg) // INTERPRETER_PROGRAMS * INTERPRETER_PROGRAMS // tiles_n
    assert launch.then is not None and launch.grid == (rows * tiles_n, 1)
    if split > 1:  # the head's tile, its rows from the head's last on, each tile reduced by `split` programs
        assert launch.then.grid == ((-(-m // cfg.block_m) - rows) * tiles_n, 1, split)
        assert launch.then.args[-2:] == (rows, -(-m // cfg.block_m))
        tail = kern._tails[split]
        assert tail.config == cfg.replace(wave_tail=False, tail_split=False, split_k=split)
        tail_source = next(v for (_, _, _, role), v in tail._variants.items() if role == "tail").source
        assert "SplitK" in tail_source and "WaveTail(tail)" in tail_source
    else:
        assert launch.then.args[-2:] == (rows * cfg.block_m // TAIL_CONFIG.block_m, -(-m // TAIL_CONFIG.block_m))
    launch()
    kit.assert_close(out, a.double() @ bt.double().t(), dtype, f"{m}x{n}x{k} tail split {split}")
    out.fill_(float("nan"))
    launch.prebind()(a, bt.t(), out)
    kit.assert_close(out, a.double() @ bt.double().t(), dtype, f"{m}x{n}x{k} tail split {split}, prebound")
    assert "WaveTail(split)" in kern.source


def test_the_model_and_the_space_follow_the_kernels_tail() -> None:
    from alcop_triton.autotune.space import shape_reason
    spec = get_spec("H200")
    cfg = KernelConfig(128, 128, 64, num_warps=4, smem_stages=4, async_copy="tma", wave_tail=True)
    split = cfg.replace(tail_split=True)
    # 50 x 6 tiles over 132 SMs: two whole waves, 36 tiles left, split 3 ways over 16 chunks each
    short = Workload("matmul", (6304, 768, 3072), "float16", "nt")
    assert shape_reason(short, split, spec) is None
    assert estimate(short, split, spec).time_s < estimate(short, cfg, spec).time_s
    # a reduction of 6 chunks: no split of two slices of 4 stages; the space drops the twin, the model
    # estimates it as the plain wave tail
    short_k = Workload("matmul", (3136, 1536, 384), "float16", "nt")
    assert shape_reason(short_k, split, spec) == "tail split where no split of two fits"
    assert estimate(short_k, split, spec).time_s == estimate(short_k, cfg, spec).time_s
