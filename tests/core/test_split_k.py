"""Split-K: programs per output tile each reduce one slice of K; the last to arrive adds the partials.

Checked in Triton's CPU interpreter against torch in float64, with NaN-poisoned outputs: slice counts
that do not divide the chunks (and an empty last slice), register prefetch, TMA, fused epilogues, bmm,
and the arrival counters back at zero after every launch (what graph replays and later calls rely on).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule, ScheduleError, codegen, te
from alcop_triton.kernels import matmul as km


def _cfg(split: int, **kw: object) -> KernelConfig:
    return KernelConfig(**{"block_m": 16, "block_n": 16, "block_k": 16, "group_m": 2, "smem_stages": 2,
                           "split_k": split, **kw})  # type: ignore[arg-type]


def _launch_twice(kern: object, *tensors: torch.Tensor) -> None:
    """Bind ``kern`` on ``tensors`` and launch it twice, as a stored call's repeats do: its arrival counters
    (its own, bound with it) are back at zero after each launch, so the repeat's sums are right too."""
    launch, _ = kern.bind(*tensors)  # type: ignore[attr-defined]
    counters = [t for t in launch.args if isinstance(t, torch.Tensor) and t.dtype == torch.int32]
    assert len(counters) == 1
    for _ in range(2):
        launch()
        assert int(counters[0].abs().sum()) == 0


@pytest.mark.interpreter
@pytest.mark.parametrize("split,k", [(2, 64), (3, 100), (4, 40), (4, 113), (9, 200), (16, 300), (24, 400)],
                         ids=["2x64", "3x100", "4x40_empty_slice", "4x113", "9x200_two_levels_short_group",
                              "16x300_empty_groups", "24x400_three_groups"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_split_matmul_matches_torch(split: int, k: int, dtype: str, kit) -> None:
    kern = kit.matmul(dtype, _cfg(split))
    g = torch.Generator().manual_seed(split * 1000 + k)
    a, b = kit.rand((33, k), dtype, g), kit.rand((k, 20), dtype, g)
    out = kit.poisoned((33, 20), dtype)
    _launch_twice(kern, a, b, out)
    kit.assert_close(out, a.double() @ b.double(), dtype, f"split {split} K {k}")
    assert "SPLIT_K: tl.constexpr" in kern.source and "k_chunks" in kern.source
    # past SPLIT_GROUP slices the partials are summed in two levels (groups, then the group sums)
    assert ("split-K in two levels" in kern.source) == (split > codegen.SPLIT_GROUP)


def test_split_lock_counts() -> None:
    assert [codegen.split_groups(s) for s in (1, 8, 9, 16, 64)] == [1, 1, 2, 2, 8]
    assert codegen.split_locks_needed(8, 5) == 5 and codegen.split_locks_needed(64, 5) == 5 * 9


@pytest.mark.interpreter
@pytest.mark.parametrize("cfg", [_cfg(3, block_k=32, smem_stages=3, reg_stages=2, reg_split=2),
                                 _cfg(2, block_k=32, smem_stages=3, async_copy="tma")], ids=["reg_prefetch", "tma"])
def test_split_with_register_prefetch_and_tma(cfg: KernelConfig, kit) -> None:
    kern = kit.matmul("float16", cfg)
    g = torch.Generator().manual_seed(7)
    for m, n, k in ((32, 48, 200), (17, 24, 72)):
        a, b = kit.rand((m, k), "float16", g), kit.rand((n, k), "float16", g).t()  # B stored N x K
        out = kit.poisoned((m, n), "float16")
        _launch_twice(kern, a, b, out)
        kit.assert_close(out, a.double() @ b.double(), "float16", f"{cfg} {m}x{n}x{k}")


@pytest.mark.interpreter
@pytest.mark.parametrize("ep", [km.Epilogue(bias=True, activation="gelu"),
                                km.Epilogue(activation="silu", residual=True, alpha=0.5, beta=2.0)],
                         ids=["bias_gelu", "silu_residual_alpha_beta"])
@pytest.mark.parametrize("batched", [False, True], ids=["matmul", "bmm"])
@pytest.mark.parametrize("split", [3, 12], ids=["one_level", "two_levels"])
def test_split_epilogues_and_bmm(ep: km.Epilogue, batched: bool, split: int, kit) -> None:
    kern = kit.matmul("float32", _cfg(split), batched=batched, ep=ep)
    g = torch.Generator().manual_seed(11)
    bt = (2,) if batched else ()
    m, n, k = 19, 21, 90
    a, b = kit.rand(bt + (m, k), "float32", g), kit.rand(bt + (k, n), "float32", g)
    bias, res = kit.rand((n,), "float32", g), kit.rand(bt + (m, n), "float32", g)
    ref = ep.alpha * (a.double() @ b.double())
    if ep.bias:
        ref = ref + bias.double()
    ref = {"gelu": F.gelu, "silu": F.silu}[ep.activation or ""](ref)
    if ep.residual:
        ref = ref + ep.beta * res.double()
    out = kit.poisoned(bt + (m, n), "float32")
    _launch_twice(kern, *([a, b] + ([bias] if ep.bias else []) + ([res] if ep.residual else [])), out)
    kit.assert_close(out, ref, "float32", f"{ep} batched={batched}")


@pytest.mark.interpreter
@pytest.mark.parametrize("split", [4, 12])
def test_split_results_are_reproducible(split: int, kit) -> None:
    kern = kit.matmul("float32", _cfg(split))
    g = torch.Generator().manual_seed(3)
    a, b = kit.rand((16, 300), "float32", g), kit.rand((300, 16), "float32", g)
    first = kern(a, b)
    assert all(torch.equal(kern(a, b), first) for _ in range(2))


def test_split_config_round_trips_and_older_records_read_back() -> None:
    cfg = _cfg(3)
    d = cfg.to_dict()
    assert d["SPLIT_K"] == 3 and KernelConfig.from_dict(d) == cfg
    assert "SPLIT_K" not in _cfg(1).to_dict()
    old = {k: v for k, v in d.items() if k != "SPLIT_K"}
    assert KernelConfig.from_dict(old).split_k == 1
    assert str(cfg).endswith("_split3")
    inputs, out = km.matmul_te("float16", False)
    assert Schedule.from_config(out, cfg).config() == cfg


@pytest.mark.parametrize("kw,pattern", [
    ({"split_k": 0}, r"split_k=0: must be an int in \[1, 64\]"),
    ({"split_k": 65}, r"split_k=65"),
    ({"split_k": True}, r"split_k=True"),
    ({"split_k": 2, "persistent": True}, "split-K programs are one per"),
])
def test_split_config_validation(kw: dict, pattern: str) -> None:
    with pytest.raises(ScheduleError, match=pattern):
        KernelConfig(**kw)


def test_split_schedule_step_validation_and_unroll_conflict() -> None:
    inputs, out = km.matmul_te("float16", False)
    s = Schedule.from_config(out, KernelConfig(16, 16, 16))
    with pytest.raises(ScheduleError, match=r"split_k\(1.5\)"):
        s.split_k(1.5)  # type: ignore[arg-type]
    s.split_k(2)
    assert s.config().split_k == 2
    A2 = te.placeholder((te.var("M"), 64), "float16", "A")
    B2 = te.placeholder((64, te.var("N")), "float16", "B")
    k = te.reduce_axis(64, "k")
    C = te.compute((A2.shape[0], B2.shape[1]), lambda i, j: te.sum(A2[i, k] * B2[k, j], axis=k), "C")
    s2 = Schedule.from_config(C, KernelConfig(16, 16, 16, split_k=2))
    s2.unroll("k")
    with pytest.raises(ScheduleError, match="unroll with split_k"):
        at.build(s2, [A2, B2, C])


@pytest.mark.interpreter
def test_split_conv2d_as_implicit_gemm() -> None:
    from alcop_triton.kernels.runner import make_runner
    w = at.Workload("conv2d", (1, 8, 8, 16, 16, 3, 3, 1, 1), "float32", "nhwc")  # K = 144: 9 chunks of 16
    r = make_runner(w, _cfg(3), "cpu")
    x = r.inputs(0)
    out, ref = r.run(x), r.reference(x)
    assert ((out.double() - ref.double()).norm() / ref.double().norm()).item() <= 1e-5
    launch, _ = r.bind(x)
    counters = [t for t in launch.args if isinstance(t, torch.Tensor) and t.dtype == torch.int32]
    launch()
    assert len(counters) == 1 and int(counters[0].abs().sum()) == 0


@pytest.mark.interpreter
def test_each_bound_launch_has_counters_and_workspace_of_its_own(kit) -> None:
    # Launches that share arrival counters mix their arrivals when they run at the same time (one per
    # stream): a tile's sum is then taken before its last partial, or never. Each bound launch owns both.
    kern = kit.matmul("float16", _cfg(2))
    g = torch.Generator().manual_seed(3)
    a, b = kit.rand((20, 64), "float16", g), kit.rand((64, 18), "float16", g)
    buffers = []
    for _ in range(2):
        launch, _ = kern.bind(a, b)
        buffers.append({t.data_ptr() for t in launch.args[3:] if isinstance(t, torch.Tensor)})
    assert len(buffers[0]) == 2 and not buffers[0] & buffers[1]
