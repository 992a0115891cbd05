"""Persistent kernels end to end: a loop over output tiles per program, flattened with the reduction loop.

The interpreter launches min(tiles, 2) programs, so every case with more than two output tiles makes
each program loop over several tiles (an odd tile count gives the programs different trip counts).
Inputs are fresh per case, outputs are poisoned with NaN, references are float64 torch; tolerances as
in test_e2e_interpreter.py (fp32 1e-5, fp16 1e-2). The occupancy arithmetic that sizes the grid on a
GPU is checked here with a fake device; tests/gpu/test_persistent_gpu.py runs the kernels on one.
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule, runtime
from alcop_triton.kernels import conv as kc
from alcop_triton.kernels import matmul as km

build_mod = importlib.import_module("alcop_triton.build")  # the module (alcop_triton.build is the function)

interpreter = pytest.mark.interpreter  # the tests that launch kernels on CPU tensors

PERSISTENT: dict[str, KernelConfig] = {
    "pointer_s1": KernelConfig(16, 16, 32, group_m=1, smem_stages=1, persistent=True),
    "pointer_s3": KernelConfig(16, 16, 32, group_m=2, smem_stages=3, persistent=True),
    "tma_s1": KernelConfig(16, 16, 32, group_m=1, smem_stages=1, async_copy="tma", persistent=True),
    "tma_s3": KernelConfig(16, 16, 32, group_m=2, smem_stages=3, async_copy="tma", persistent=True),
}
REG = KernelConfig(16, 16, 32, group_m=2, smem_stages=3, reg_stages=2, reg_split=2, persistent=True)
# (M, N, K): one tile (one program); 2 x 3 = 6 tiles, K = 65 (3 chunks, the last partial); 3 x 3 = 9 tiles
# (programs run 5 and 4 of them); 16-byte aligned rows for a real TMA descriptor (2 x 3 tiles, 2 chunks)
ODD = [(1, 1, 1), (17, 33, 65), (33, 47, 45)]
ALIGNED = (32, 48, 64)


def _run(kit, kern: at.CompiledKernel, m: int, n: int, k: int, dtype: str, seed: int, batch: int | None = None,
         b_transposed: bool = False) -> None:
    g = torch.Generator().manual_seed(seed)
    lead = (batch,) if batch else ()
    a = kit.rand(lead + (m, k), dtype, g)
    b = kit.rand(lead + (n, k), dtype, g).transpose(-1, -2) if b_transposed else kit.rand(lead + (k, n), dtype, g)
    out = kit.poisoned(lead + (m, n), dtype)
    assert kern(a, b, out) is out
    kit.assert_close(out, a.double() @ b.double(), dtype, f"{lead + (m, n, k)} {kern.config} {dtype} seed={seed}")


# ----------------------------------------------------------------------------- matmul and bmm

@interpreter
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("variant", list(PERSISTENT))
def test_persistent_matmul(variant: str, dtype: str, kit) -> None:
    cfg = PERSISTENT[variant]
    kern = kit.matmul(dtype, cfg)
    for m, n, k in ODD:
        _run(kit, kern, m, n, k, dtype, kit.seed(variant, dtype, m, n, k))
    _run(kit, kern, *ALIGNED, dtype, kit.seed(variant, dtype, "aligned"))
    src = kern.source  # the variant of the last call: aligned rows, 2 chunks x 3 tiles per program
    assert "for tile_id in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)" in src
    assert ("num_stages=3, flatten=True):" in src) == (cfg.smem_stages == 3)
    assert ("a_desc.load(" in src and "b_desc.load(" in src) == (cfg.async_copy == "tma")
    if cfg.async_copy == "tma":  # descriptors are kernel parameters the launcher builds; the output stores by TMA
        assert "make_tensor_descriptor" not in src and "a_desc, b_desc, out_desc," in src
        assert "out_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out.to(C.dtype.element_ty))" in src


@interpreter
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("variant", list(PERSISTENT))
def test_persistent_bmm(variant: str, dtype: str, kit) -> None:
    cfg = PERSISTENT[variant]
    kern = kit.matmul(dtype, cfg, batched=True)
    _run(kit, kern, 17, 20, 40, dtype, kit.seed("bmm", variant, dtype), batch=3)   # 3 x 2 x 2 = 12 tiles
    _run(kit, kern, 16, 32, 64, dtype, kit.seed("bmm-nt", variant, dtype), batch=2, b_transposed=True)
    src = kern.source
    assert "pid_b = tile_id // num_pid_mn" in src and "num_tiles = num_pid_mn * BATCH" in src
    if cfg.async_copy == "tma":  # 3-d descriptors: the batch index is a coordinate, one entry per copy
        assert "tl.trans(b_desc.load([b, pid_n * BLOCK_N, k0 * BLOCK_K]).reshape(BLOCK_N, BLOCK_K))" in src
        assert "out_desc.store([b, pid_m * BLOCK_M, pid_n * BLOCK_N], out.to(C.dtype.element_ty).reshape(1, BLOCK_M, BLOCK_N))" in src


@interpreter
def test_grid_is_min_of_tiles_and_two_interpreter_programs(grids: list[tuple[int, ...]], kit) -> None:
    cfg = PERSISTENT["pointer_s3"]
    for m, n, k in ODD:
        _run(kit, kit.matmul("float32", cfg), m, n, k, "float32", kit.seed("grid", m, n, k))
    _run(kit, kit.matmul("float32", cfg, batched=True), 17, 20, 40, "float32", kit.seed("grid-bmm"), batch=3)
    _run(kit, kit.matmul("float32", cfg.replace(persistent=False)), 33, 47, 45, "float32", kit.seed("grid-np"))
    assert grids == [(1,), (2,), (2,), (2,), (9, 1)]  # persistent: 1-d over all tiles; otherwise one per tile


@interpreter
@pytest.mark.parametrize("batched", [False, True], ids=["matmul", "bmm"])
def test_register_prefetch_stays_correct(batched: bool, kit) -> None:
    kern = kit.matmul("float32", REG, batched=batched)
    batch = 2 if batched else None
    for m, n, k in [(17, 33, 65), (33, 47, 45)]:
        _run(kit, kern, m, n, k, "float32", kit.seed("reg", batched, m, n, k), batch=batch)
    src = kern.source
    assert "flatten=True" in src and "(inner-pipeline fusion)" in src
    # the register prologue restarts with each tile: it sits inside the tile loop, before the chunk loop
    tiles, prologue, chunks = (src.index(s) for s in ("for tile_id in", "prefetch prologue", "for k0 in"))
    assert tiles < prologue < chunks
    tma = kit.matmul("float16", REG.replace(async_copy="tma"), batched=batched)
    _run(kit, tma, 32, 48, 64, "float16", kit.seed("reg-tma", batched), batch=batch)
    lead = "b, " if batched else ""
    assert f"tile_a_p0 = a_desc.load([{lead}pid_m * BLOCK_M, 0])" in tma.source


@interpreter
def test_register_prefetch_deeper_than_a_tile(kit) -> None:
    # one sub-tile per tile, prefetched 2 ahead: the planner does not clamp (the flattened loop is long),
    # so the prefetch reads past K in every tile; masks make those loads zeros
    kern = kit.matmul("float32", KernelConfig(16, 16, 16, group_m=1, smem_stages=2, reg_stages=3, persistent=True))
    _run(kit, kern, 47, 33, 16, "float32", kit.seed("reg-deep"))
    _run(kit, kern, 47, 33, 9, "float32", kit.seed("reg-deep-9"))


# ----------------------------------------------------------------------------- fused epilogues

@interpreter
@pytest.mark.parametrize("dtype, batched, ep, cfg", [
    ("float32", False, km.Epilogue(bias=True, activation="relu"), PERSISTENT["pointer_s3"]),
    ("float16", False, km.Epilogue(activation="gelu", residual=True, alpha=0.5, beta=2.0), PERSISTENT["tma_s3"]),
    ("float32", True, km.Epilogue(bias=True, activation="silu"), PERSISTENT["pointer_s1"]),
    ("float16", True, km.Epilogue(bias=True, activation="tanh", residual=True), REG),
], ids=["f32_bias_relu_s3", "f16_gelu_residual_tma", "f32_bmm_bias_silu_s1", "f16_bmm_bias_tanh_residual_r2x2"])
def test_persistent_fused_epilogue(dtype: str, batched: bool, ep: km.Epilogue, cfg: KernelConfig, kit) -> None:
    kern = km.compiled(dtype, batched, ep, cfg)
    g = torch.Generator().manual_seed(kit.seed("ep", dtype, batched, ep))
    lead = (3,) if batched else ()
    m, n, k = (33, 47, 45) if not batched else (17, 20, 40)
    if cfg.async_copy == "tma":
        m, n, k = 32, 48, 64  # aligned rows: the descriptor path
    a, b = kit.rand(lead + (m, k), dtype, g), kit.rand(lead + (k, n), dtype, g)
    bias, res = kit.rand((n,), dtype, g), kit.rand(lead + (m, n), dtype, g)
    ref = ep.alpha * (a.double() @ b.double())
    if ep.bias:
        ref = ref + bias.double()
    if ep.activation:
        ref = {"relu": torch.relu, "gelu": F.gelu, "tanh": torch.tanh, "silu": F.silu}[ep.activation](ref)
    if ep.residual:
        ref = ref + ep.beta * res.double()
    out = kit.poisoned(lead + (m, n), dtype)
    kern(*([a, b] + ([bias] if ep.bias else []) + ([res] if ep.residual else [])), out)
    kit.assert_close(out, ref, dtype, f"{ep} {cfg}")
    assert "for tile_id in tl.range(" in kern.source
    assert ("a_desc.load(" in kern.source) == (cfg.async_copy == "tma")


# ----------------------------------------------------------------------------- other kernels and edges

@interpreter
@pytest.mark.parametrize("groups", [1, 2])
def test_persistent_conv2d(groups: int, kit) -> None:
    # the conv kernel has a batch axis (the group) even with groups=1, where its extent is the constant 1:
    # the tile loop must still split tile_id into (group, tile) (regression: num_pid_mn was undefined)
    g = torch.Generator().manual_seed(kit.seed("conv", groups))
    x = kit.rand((2, 8, 7, 9), "float32", g).to(memory_format=torch.channels_last)
    w, bias = kit.rand((16, 8 // groups, 3, 3), "float32", g), kit.rand((16,), "float32", g)
    cfg = KernelConfig(16, 16, 16, group_m=2, smem_stages=3, persistent=True)
    y = kc.conv(x, w, bias, (1, 1), (1, 1), (1, 1), (1, 1), groups, activation="relu", config=cfg)
    ref = F.relu(F.conv2d(x.double(), w.double(), bias.double(), 1, 1, 1, groups))
    kit.assert_close(y, ref, "float32", f"conv groups={groups}")


@interpreter
def test_trip_count_clamp_counts_every_chunk_of_a_program(kit) -> None:
    kern = kit.matmul("float32", KernelConfig(16, 16, 16, group_m=1, smem_stages=4, persistent=True))
    # 1 tile x 2 chunks: the flattened loop runs 2 chunks per program
    _run(kit, kern, 16, 16, 20, "float32", kit.seed("clamp", 1))
    assert "shared level: 4 stages clamped to 2: the flattened tile and reduction loop runs 2 chunk(s) per program" \
        in kern.explain()
    assert "num_stages=2, flatten=True" in kern.source
    # 3 tiles over 2 programs x 2 chunks: 4 chunks per program, no clamp
    _run(kit, kern, 48, 16, 20, "float32", kit.seed("clamp", 3))
    assert "clamped" not in kern.explain() and "num_stages=4, flatten=True" in kern.source
    # 1 tile x 1 chunk: one stage, nothing to copy ahead, the tile loop is not flattened
    _run(kit, kern, 9, 16, 10, "float32", kit.seed("clamp", 0))
    assert "4 stages clamped to 1" in kern.explain() and "the tile loop is not flattened" in kern.explain()
    assert "flatten=True" not in kern.source and "for tile_id in tl.range(tl.program_id(0), num_tiles, " \
        "tl.num_programs(0)):" in kern.source


@interpreter
def test_persistent_edges(kit) -> None:
    kern = kit.matmul("float32", PERSISTENT["pointer_s3"])
    out = kit.poisoned((33, 20), "float32")
    kern(torch.randn(33, 0), torch.randn(0, 20), out)
    assert torch.equal(out, torch.zeros(33, 20))  # an empty reduction: every tile still stores its zeros
    assert kern(torch.randn(0, 5), torch.randn(5, 3)).shape == (0, 3)  # nothing to launch
    g = torch.Generator().manual_seed(kit.seed("alloc"))
    a, b = kit.rand((40, 24), "float32", g), kit.rand((24, 36), "float32", g)
    kit.assert_close(kern(a, b), a.double() @ b.double(), "float32", "allocated output")
    full = kit.poisoned((19, 30), "float32")  # a sliced output: its neighbours stay untouched
    kern(a[:19], b[:, :21], full[:, 4:25])
    kit.assert_close(full[:, 4:25], a[:19].double() @ b[:, :21].double(), "float32", "sliced output")
    assert torch.isnan(full[:, :4]).all() and torch.isnan(full[:, 25:]).all()


@interpreter
def test_persistent_unrolled_reduction(kit) -> None:
    inputs, out = km.matmul_te("float32", False)
    s = Schedule.from_config(out, PERSISTENT["pointer_s3"])
    s.unroll("k")
    kern = at.build(s, inputs + [out], static=("K",))
    _run(kit, kern, 33, 20, 70, "float32", kit.seed("unroll"))
    assert "for k0 in tl.static_range(" in kern.source and "flatten=True" not in kern.source


# ----------------------------------------------------------------------------- the grid on a GPU

def _fake_gpu(monkeypatch: pytest.MonkeyPatch, **props: int) -> None:
    base = dict(multi_processor_count=132, max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536,
                shared_memory_per_multiprocessor=233472)  # an H100 SXM
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(**{**base, **props}))


def _compiled(n_regs: int, shared: int) -> Any:
    return SimpleNamespace(_init_handles=lambda: None, n_regs=n_regs, metadata=SimpleNamespace(shared=shared))


@pytest.mark.parametrize("warps, n_regs, shared, per_sm", [
    (4, 0, 0, 16),            # threads only: 2048 / 128
    (4, 128, 0, 4),           # registers: 65536 / (128 x 128)
    (4, 32, 49152, 4),        # shared memory: 233472 // (49152 + 1 KB reserved)
    (8, 168, 98304, 1),       # big tiles: 65536 // (168 x 256) = 1
    (8, 255, 300000, 1),      # nothing fits by the arithmetic: still one program per SM
])
def test_resident_programs_from_threads_registers_and_shared_memory(
        monkeypatch: pytest.MonkeyPatch, warps: int, n_regs: int, shared: int, per_sm: int) -> None:
    _fake_gpu(monkeypatch)
    assert runtime.resident_programs(_compiled(n_regs, shared), warps, "cuda:0") == 132 * per_sm


def test_interpreter_stands_for_two_programs() -> None:
    cpu = torch.device("cpu")
    assert build_mod._sm_count(cpu) == 2
    inputs, out = km.matmul_te("float32", False)
    kern = at.build(Schedule.from_config(out, PERSISTENT["pointer_s3"]), inputs + [out])
    assert kern._resident(kern._shown(), cpu, [], {}) == 2
