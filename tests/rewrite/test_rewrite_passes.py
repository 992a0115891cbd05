"""Program transformation (paper section 3) at the loop-IR level: each pass on its own, the register
prefetch's prologue / index shift / inner-pipeline fusion / modulo wrap, the paper's four ablation
variants (1 stage; 2 stages on one level; multi-stage shared only; full multi-level), and persistent
kernels (the tile loop that carries the shared level's stages, flattened with the reduction loop)."""

from __future__ import annotations

import pytest

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule, codegen
from alcop_triton.analysis import PipelinePlan, find_pipeline_candidates, plan_pipeline
from alcop_triton.kernels import matmul as km
from alcop_triton.kernels import conv as kc
from alcop_triton.loop_ir import (BatchIndices, Copy, Descriptor, Dot, For, InitAcc, Kernel, KIndices, KRef, Node,
                                  ProgramIds, Rotate, Store, TileCount, TileIndices, Transformer, dump, find)
from alcop_triton.lower import lower
from alcop_triton.rewrite import InjectSharedPipeline, PrefetchRegisters, SelectAsyncCopy, apply_pipeline


def _lowered(cfg: KernelConfig, dtype: str = "float16", unit_stride=None, unroll: bool = False,
             batched: bool = False) -> tuple[Kernel, PipelinePlan]:
    inputs, out = km.matmul_te(dtype, batched)
    s = Schedule.from_config(out, cfg)
    if unroll:
        s.unroll("k")
    # an unrolled loop needs a compile-time trip count, so K is compiled in
    k = lower(s, tuple(inputs), unit_stride, static={"K": 96} if unroll else None)
    return k, plan_pipeline(k, find_pipeline_candidates(k), async_copy=cfg.async_copy)


def _chunk(body: tuple[Node, ...]) -> For:
    (loop, _), = find(body, lambda n: isinstance(n, For) and n.role == "chunk")
    return loop  # type: ignore[return-value]


def _before_chunk(body: tuple[Node, ...]) -> list[Node]:
    out: list[Node] = []
    for n in body:
        if isinstance(n, For):
            return out
        out.append(n)
    raise AssertionError("no chunk loop")


# ----------------------------------------------------------------------------- lowering (input IR)

def test_lowered_loop_nest_before_rewrites() -> None:
    k, _ = _lowered(KernelConfig(16, 16, 32, smem_stages=3, reg_stages=2, reg_split=2))
    loop = _chunk(k.body)
    assert loop.kind == "serial" and loop.num_stages is None and loop.extent == "tl.cdiv(K, BLOCK_K)"
    head = [n for n in loop.body if isinstance(n, Copy)]
    assert [(c.buffer, c.scope, c.realised_by_register, c.stages) for c in head] == [
        ("A_shared", "shared", True, 3), ("B_shared", "shared", True, 3)]
    (sub,) = [n for n in loop.body if isinstance(n, For)]
    assert sub.role == "sub" and sub.extent == "REG_SPLIT"
    regs = [n for n in sub.body if isinstance(n, Copy)]
    assert [(c.buffer, c.at) for c in regs] == [("A_reg", KRef("k0", 0, "ks")), ("B_reg", KRef("k0", 0, "ks"))]
    assert isinstance(sub.body[-1], Dot)


# ----------------------------------------------------------------------------- InjectSharedPipeline

@pytest.mark.parametrize("stages", [1, 2, 4])
def test_inject_shared_pipeline_sets_num_stages_on_the_chunk_loop(stages: int) -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=stages))
    assert plan.smem_stages == stages
    k2 = InjectSharedPipeline(plan)(k)
    loop = _chunk(k2.body)
    assert (loop.kind, loop.num_stages) == ("range", stages) and k2.num_stages == stages
    assert (f"{stages - 1} chunk(s) ahead" in loop.note) if stages > 1 else "no shared-memory pipelining" in loop.note
    assert _chunk(k.body).kind == "serial"  # passes return new trees; the input is untouched


def test_inject_shared_pipeline_leaves_an_unrolled_loop_alone() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3), unroll=True)
    assert plan.smem_stages == 1
    loop = _chunk(InjectSharedPipeline(plan)(k).body)
    assert loop.kind == "static_range" and loop.num_stages is None


def test_transformer_rebuilds_only_what_changed() -> None:
    k, _ = _lowered(KernelConfig(16, 16, 32, smem_stages=2))
    assert Transformer().visit_body(k.body) == k.body
    loop = _chunk(k.body)
    assert Transformer().visit(loop) is loop


# ----------------------------------------------------------------------------- SelectAsyncCopy

def test_select_async_copy_tma_declares_launcher_built_descriptors() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3, async_copy="tma"))
    assert plan.async_copy == (("a", "tma"), ("b", "tma"))
    k2 = SelectAsyncCopy(plan)(k)
    # A (M x K) and B (K x N) keep their dim order (K and N have unit stride); the output (M x N) too
    assert k2.descriptors == (Descriptor("a", "A", (0, 1), ("BLOCK_M", "BLOCK_K")),
                              Descriptor("b", "B", (0, 1), ("BLOCK_K", "BLOCK_N")),
                              Descriptor("out", "C", (0, 1), ("BLOCK_M", "BLOCK_N")))
    copies = [n for n, _ in find(k2.body, lambda n: isinstance(n, Copy))]
    assert copies and all(c.mechanism == "tma" for c in copies)
    assert len(k2.body) == len(k.body)  # nothing is built in the kernel


def test_select_async_copy_pointer_and_mixed() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3))
    k2 = SelectAsyncCopy(plan)(k)
    assert k2.descriptors == () and k2.body == k.body  # nothing to change: same tree
    # B with no unit-stride dim (e.g. a strided slice): only A can use a descriptor
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3, async_copy="tma"), unit_stride={"B": None})
    assert plan.async_copy == (("a", "tma"), ("b", "pointer"))
    k2 = SelectAsyncCopy(plan)(k)
    assert [d.role for d in k2.descriptors] == ["a", "out"]
    assert {(c.role, c.mechanism) for c, _ in find(k2.body, lambda n: isinstance(n, Copy))} == {("a", "tma"), ("b", "pointer")}
    # an output with no unit-stride dim is stored by pointers
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3, async_copy="tma"), unit_stride={"C": None})
    assert [d.role for d in SelectAsyncCopy(plan)(k).descriptors] == ["a", "b"]


def test_tma_descriptors_list_the_unit_stride_dim_last() -> None:
    # B stored N x K (K contiguous) and a column-major output: the tiles are transposed in registers
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3, async_copy="tma"), unit_stride={"B": 0, "C": 0})
    k2 = SelectAsyncCopy(plan)(k)
    assert k2.descriptor("b") == Descriptor("b", "B", (1, 0), ("BLOCK_N", "BLOCK_K"))
    assert k2.descriptor("out") == Descriptor("out", "C", (1, 0), ("BLOCK_N", "BLOCK_M"))
    src = codegen.generate(apply_pipeline(k, plan), "h")
    assert "tl.trans(b_desc.load([pid_n * BLOCK_N, k0 * BLOCK_K]))" in src
    assert "out_desc.store([pid_n * BLOCK_N, pid_m * BLOCK_M], tl.trans(out.to(C.dtype.element_ty)))" in src


def test_tma_register_level_descriptor_uses_sub_tiles() -> None:
    # with a register level the descriptor's K block is one sub-tile (what each register copy loads)
    inputs, out = km.matmul_te("float16", False)
    kern = at.build(Schedule.from_config(out, KernelConfig(16, 16, 32, reg_stages=2, reg_split=2, async_copy="tma")),
                    inputs + [out])
    src = kern.source
    assert kern._shown().descriptors[:2] == (Descriptor("a", "A", (0, 1), ("BLOCK_M", "SUB_K")),
                                             Descriptor("b", "B", (0, 1), ("SUB_K", "BLOCK_N")))
    assert "tile_a_p0 = a_desc.load([pid_m * BLOCK_M, 0])" in src
    assert "tile_a_p0 = a_desc.load([pid_m * BLOCK_M, (k0 + 1) * BLOCK_K])" in src  # fused across the chunk edge


# ----------------------------------------------------------------------------- PrefetchRegisters

def _simulate(k: Kernel, chunks: int, split: int) -> list[int]:
    """Run the rewritten loop nest symbolically: which linear sub-tile each dot consumes.

    Copies bind a buffer name to (role, linear sub-tile); Rotate is a simultaneous rename; the chunk
    loop runs ``chunks`` times. A correct register pipeline consumes 0, 1, ..., chunks*split-1 in order,
    with A and B from the same sub-tile.
    """
    env: dict[str, tuple[str, int]] = {}
    used: list[int] = []

    def run(nodes: tuple[Node, ...], c: int) -> None:
        for n in nodes:
            if isinstance(n, Copy) and not n.realised_by_register:
                assert isinstance(n.at.sub, int), "sub-tile loops must be unrolled by the register pass"
                env[n.target] = (n.role, ((c if n.at.loop else 0) + n.at.tile) * split + n.at.sub)
            elif isinstance(n, Rotate):
                vals = [env[s] for s in n.sources]
                env.update(zip(n.targets, vals))
            elif isinstance(n, Dot):
                (ra, ta), (rb, tb) = env[n.a], env[n.b]
                assert (ra, rb) == ("a", "b") and ta == tb, f"dot mixes sub-tiles {ta} and {tb}"
                used.append(ta)
            elif isinstance(n, For):
                assert n.role == "chunk", f"unexpected loop {n.var} left after the register pass"
                for i in range(chunks):
                    run(n.body, i)
    run(k.body, 0)
    return used


@pytest.mark.parametrize("split", [1, 2, 4, 8])
@pytest.mark.parametrize("reg", [1, 2, 3, 4])
def test_register_prefetch_consumes_every_sub_tile_in_order(reg: int, split: int) -> None:
    inputs, out = km.matmul_te("float16", False)
    s = Schedule(out)
    bufs = []
    for t in inputs:
        sh = s.cache_read(t, "shared")
        bufs += [(sh, 3), (s.cache_read(sh, "register"), reg)]
    s.tile(16, 16, 16 * split, sub_k=16)
    for b, d in bufs:
        s.pipeline(b, d)
    k = lower(s, tuple(inputs))
    plan = plan_pipeline(k, find_pipeline_candidates(k))
    k2 = PrefetchRegisters(plan, split)(k)
    for chunks in (1, 3):
        assert _simulate(k2, chunks, split) == list(range(chunks * split))


@pytest.mark.parametrize("reg, split", [(2, 2), (3, 4), (4, 2), (2, 1), (3, 2)])
def test_register_prefetch_prologue_shift_and_fusion(reg: int, split: int) -> None:
    k, plan = _lowered(KernelConfig(16, 16, 16 * split, smem_stages=3, reg_stages=reg, reg_split=split))
    k2 = PrefetchRegisters(plan, split)(k)
    dist = reg - 1
    # prologue: the first R-1 sub-tiles, loaded before the chunk loop (KRef.loop None = chunk 0)
    pre = _before_chunk(k2.body)
    pro = [n for n in pre if isinstance(n, Copy)]
    assert len([n for n in pre if isinstance(n, KIndices)]) == dist
    assert [(c.role, c.at) for c in pro] == [(r, KRef(None, t // split, t % split)) for t in range(dist) for r in "ab"]
    assert all("prefetch prologue" in c.note for c in pro)
    # index shift: at step ks the loop loads linear sub-tile ks + R - 1 (of chunk k0 + its overflow)
    loop = _chunk(k2.body)
    loads = [n for n in loop.body if isinstance(n, Copy) and n.scope == "register"]
    want = [KRef("k0", (ks + dist) // split, (ks + dist) % split) for ks in range(split)]
    assert [c.at for c in loads if c.role == "a"] == want and [c.at for c in loads if c.role == "b"] == want
    # inner-pipeline fusion: loads that overflow the chunk reach into k0 + 1.. instead of draining
    fused = [c for c in loads if c.at.tile > 0]
    assert len(fused) == 2 * min(split, dist)  # steps ks >= split - (R-1) overflow
    assert all("inner-pipeline fusion" in c.note for c in fused)
    assert all("inner-pipeline fusion" not in c.note for c in loads if c.at.tile == 0)
    # every load precedes its dot by R-1 steps; there is no sub-tile loop left
    assert not [n for n in loop.body if isinstance(n, For)]
    assert len([n for n in loop.body if isinstance(n, Dot)]) == split


def test_register_prefetch_rotation_only_when_slots_shift() -> None:
    # (R=2, S=2): two slots swap roles twice per chunk and end where they started -> no rename
    k, plan = _lowered(KernelConfig(16, 16, 32, reg_stages=2, reg_split=2))
    assert not find(PrefetchRegisters(plan, 2)(k).body, lambda n: isinstance(n, Rotate))
    # (R=2, S=1): one step per chunk, the next chunk's tile sits in the other slot -> rename
    k, plan = _lowered(KernelConfig(16, 16, 16, reg_stages=2, reg_split=1))
    (rot, loops), = find(PrefetchRegisters(plan, 1)(k).body, lambda n: isinstance(n, Rotate))
    assert rot == Rotate(("tile_a_p0", "tile_b_p0"), ("tile_a_p1", "tile_b_p1"))
    assert loops[-1].role == "chunk" and loops[-1].body[-1] is rot  # at the end of the iteration
    # (R=3, S=2): three slots rotate through two steps
    k, plan = _lowered(KernelConfig(16, 16, 32, reg_stages=3, reg_split=2))
    (rot, _), = find(PrefetchRegisters(plan, 2)(k).body, lambda n: isinstance(n, Rotate))
    assert rot.targets == ("tile_a_p0", "tile_a_p1", "tile_b_p0", "tile_b_p1")
    assert rot.sources == ("tile_a_p2", "tile_a_p0", "tile_b_p2", "tile_b_p0")


def test_register_level_without_prefetch_unrolls_sub_tiles() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 64, reg_stages=1, reg_split=4))
    k2 = PrefetchRegisters(plan, 4)(k)
    assert _before_chunk(k2.body) == _before_chunk(k.body)  # no prologue
    loop = _chunk(k2.body)
    regs = [n for n in loop.body if isinstance(n, Copy) and n.scope == "register"]
    assert [(c.target, c.at) for c in regs if c.role == "a"] == [(f"tile_a_{i}", KRef("k0", 0, i)) for i in range(4)]
    dots = [n for n in loop.body if isinstance(n, Dot)]
    assert [(d.a, d.b) for d in dots] == [(f"tile_a_{i}", f"tile_b_{i}") for i in range(4)]


def test_register_pass_is_a_no_op_without_a_register_level() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3))
    assert PrefetchRegisters(plan, 1)(k).body == k.body


# ----------------------------------------------------------------------------- the four ablation variants

ABLATION = {
    # paper section 5 ablation: no pipelining / double buffering on one level / multi-stage shared /
    # multi-stage, multi-level
    "1stage": KernelConfig(16, 16, 32, smem_stages=1),
    "2stage_one_level": KernelConfig(16, 16, 32, smem_stages=2),
    "smem_multistage": KernelConfig(16, 16, 32, smem_stages=4),
    "multi_level": KernelConfig(16, 16, 32, smem_stages=4, reg_stages=2, reg_split=2),
}


@pytest.mark.parametrize("variant", list(ABLATION))
def test_ablation_variant_structure(variant: str) -> None:
    cfg = ABLATION[variant]
    k, plan = _lowered(cfg)
    k2 = apply_pipeline(k, plan)
    loop = _chunk(k2.body)
    text = dump(k2.body)
    regs = find(k2.body, lambda n: isinstance(n, Copy) and n.scope == "register")
    assert loop.kind == "range" and loop.num_stages == cfg.smem_stages and k2.num_stages == cfg.smem_stages
    assert f"for k0 in range(tl.cdiv(K, BLOCK_K)) num_stages={cfg.smem_stages}:" in text
    assert k2.passes == ("SelectAsyncCopy(a=pointer, b=pointer)",
                         f"PrefetchRegisters(reg_stages={cfg.reg_stages}, reg_split={cfg.reg_split})",
                         f"InjectSharedPipeline(num_stages={cfg.smem_stages})")
    if variant == "multi_level":
        # holistic pipeline: register prologue before the shared-level loop, prefetch fused across chunks
        assert text.splitlines()[4:7] == ["offs_k_p0 = 0*BLOCK_K + 0*SUB_K",
                                          "tile_a_p0 <- copy[register,pointer] A_reg @ 0*BLOCK_K + 0*SUB_K",
                                          "tile_b_p0 <- copy[register,pointer] B_reg @ 0*BLOCK_K + 0*SUB_K"]
        assert "  tile_a_p0 <- copy[register,pointer] A_reg @ (k0 + 1)*BLOCK_K + 0*SUB_K" in text
        assert "(realised by register copies)" in text and len(regs) == 6
    else:
        assert not regs and "(realised by register copies)" not in text
        assert text.count("copy[shared,pointer]") == 2 and text.count("acc += dot(tile_a, tile_b)") == 1
    inputs, out = km.matmul_te("float16", False)
    src = at.build(Schedule.from_config(out, cfg), inputs + [out]).source
    assert f"for k0 in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages={cfg.smem_stages}):" in src
    assert ("tile_a_p0 = tl.load(" in src) == (variant == "multi_level")


# ----------------------------------------------------------------------------- persistent kernels

def _tiles(body: tuple[Node, ...]) -> For:
    (loop, _), = find(body, lambda n: isinstance(n, For) and n.role == "tiles")
    return loop  # type: ignore[return-value]


def test_lowered_persistent_nest_before_rewrites() -> None:
    k, _ = _lowered(KernelConfig(16, 16, 32, smem_stages=3, persistent=True))
    assert len(k.body) == 2 and k.body[0] == TileCount("1")
    tiles = k.body[1]
    assert isinstance(tiles, For) and tiles.role == "tiles"
    assert (tiles.var, tiles.start, tiles.extent, tiles.step) == ("tile_id", "tl.program_id(0)", "num_tiles",
                                                                  "tl.num_programs(0)")
    assert (tiles.kind, tiles.num_stages, tiles.flatten) == ("serial", None, False)  # the rewrite decides
    assert tiles.body[0] == ProgramIds(False, "tile_id")
    assert [type(n) for n in tiles.body] == [ProgramIds, TileIndices, TileIndices, InitAcc, For, Store]
    (_, loops), = find(k.body, lambda n: isinstance(n, For) and n.role == "chunk")
    assert loops == (tiles,)  # the reduction loop runs inside the tile loop
    # batched: the batch index comes from the tile id too, and the tile count includes the batch
    kb, _ = _lowered(KernelConfig(16, 16, 32, smem_stages=3, persistent=True), batched=True)
    assert kb.body[0] == TileCount("BATCH") and _tiles(kb.body).body[0] == ProgramIds(True, "tile_id")
    assert isinstance(_tiles(kb.body).body[1], BatchIndices)
    # not persistent: one program per tile, no tile loop
    kp, _ = _lowered(KernelConfig(16, 16, 32, smem_stages=3))
    assert kp.body[0] == ProgramIds(False) and not find(kp.body, lambda n: isinstance(n, (TileCount,))) \
        and not find(kp.body, lambda n: isinstance(n, For) and n.role == "tiles")


@pytest.mark.parametrize("batched", [False, True], ids=["matmul", "bmm"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_persistent_tile_loop_carries_the_stages_flattened(stages: int, batched: bool) -> None:
    cfg = KernelConfig(16, 16, 32, smem_stages=stages, persistent=True)
    k, plan = _lowered(cfg, batched=batched)
    k2 = apply_pipeline(k, plan)
    tiles, chunk = _tiles(k2.body), _chunk(k2.body)
    assert (tiles.kind, tiles.num_stages, tiles.flatten) == ("range", stages, True)
    assert (chunk.kind, chunk.num_stages, chunk.flatten) == ("range", None, False)
    assert k2.num_stages == stages and k2.passes[-1] == f"InjectSharedPipeline(num_stages={stages})"
    assert f"{stages - 1} chunk(s) ahead across tile boundaries" in tiles.note
    assert "flattened into the tile loop" in chunk.note
    text = dump(k2.body)
    assert f"for tile_id in range(tl.program_id(0), num_tiles, tl.num_programs(0)) num_stages={stages} flatten:" in text
    assert "\n  for k0 in range(tl.cdiv(K, BLOCK_K)):\n" in text  # nested, with no stages of its own
    inputs, out = km.matmul_te("float16", batched)
    src = at.build(Schedule.from_config(out, cfg), inputs + [out]).source
    assert (f"    for tile_id in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), num_stages={stages}, "
            "flatten=True):") in src
    assert "\n        for k0 in tl.range(0, tl.cdiv(K, BLOCK_K)):\n" in src
    assert "pid = tl.program_id(0)" not in src  # the tile id, not the program id, picks the tile


def test_persistent_single_stage_is_not_flattened() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=1, persistent=True))
    k2 = apply_pipeline(k, plan)
    tiles, chunk = _tiles(k2.body), _chunk(k2.body)
    assert (tiles.kind, tiles.num_stages, tiles.flatten) == ("range", None, False)
    assert (chunk.kind, chunk.num_stages) == ("range", 1) and k2.num_stages == 1
    assert tiles.note == "persistent: each program loops over output tiles"
    assert "for tile_id in range(tl.program_id(0), num_tiles, tl.num_programs(0)):" in dump(k2.body)
    # a deeper request clamped to one stage by the trip count is not flattened either
    k, _ = _lowered(KernelConfig(16, 16, 32, smem_stages=3, persistent=True))
    clamped = plan_pipeline(k, find_pipeline_candidates(k), trip_count=1)
    assert clamped.smem_stages == 1
    tiles = _tiles(apply_pipeline(k, clamped).body)
    assert (tiles.num_stages, tiles.flatten) == (None, False)
    inputs, out = km.matmul_te("float16", False)
    src = at.build(Schedule.from_config(out, KernelConfig(16, 16, 32, smem_stages=1, persistent=True)),
                   inputs + [out]).source
    assert "for tile_id in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):" in src
    assert "for k0 in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=1):" in src


def test_persistent_unrolled_reduction_is_not_flattened() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3, persistent=True), unroll=True)
    k2 = apply_pipeline(k, plan)
    tiles, chunk = _tiles(k2.body), _chunk(k2.body)
    assert chunk.kind == "static_range" and (tiles.kind, tiles.num_stages, tiles.flatten) == ("range", None, False)


def test_batched_tma_descriptors_take_the_batch_index_as_a_coordinate() -> None:
    # one entry of the batch dim per copy: the tile is reshaped to 2-D after the load, before the store
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3, async_copy="tma", persistent=True), batched=True)
    k2 = apply_pipeline(k, plan)
    assert [d.block for d in k2.descriptors] == [("1", "BLOCK_M", "BLOCK_K"), ("1", "BLOCK_K", "BLOCK_N"),
                                                 ("1", "BLOCK_M", "BLOCK_N")]
    assert all(d.reshaped for d in k2.descriptors)
    src = codegen.generate(k2, "h")
    assert "a_desc.load([b, pid_m * BLOCK_M, k0 * BLOCK_K]).reshape(BLOCK_M, BLOCK_K)" in src
    assert "out_desc.store([b, pid_m * BLOCK_M, pid_n * BLOCK_N], out.to(C.dtype.element_ty).reshape(1, BLOCK_M, BLOCK_N))" in src
    assert "def alcop_c(A, B, C, a_desc, b_desc, out_desc, " in src


def test_persistent_register_prologue_restarts_in_every_tile() -> None:
    k, plan = _lowered(KernelConfig(16, 16, 32, smem_stages=3, reg_stages=2, reg_split=2, persistent=True))
    k2 = apply_pipeline(k, plan)
    tiles = _tiles(k2.body)
    pro = find(k2.body, lambda n: isinstance(n, Copy) and n.at.loop is None)
    assert len(pro) == 2 and all(loops == (tiles,) for _, loops in pro)  # per tile, before the chunk loop
    fused = find(k2.body, lambda n: isinstance(n, Copy) and n.scope == "register" and n.at.tile > 0)
    assert len(fused) == 2 and all([lp.role for lp in loops] == ["tiles", "chunk"] for _, loops in fused)
    assert (tiles.num_stages, tiles.flatten, _chunk(k2.body).num_stages) == (3, True, None)


def test_persistent_kernel_with_a_batch_axis_of_extent_one() -> None:
    # the conv kernel's group axis is a batch axis; with groups=1 its extent is the constant 1, and the
    # tile loop still splits tile_id by num_pid_mn (regression: it was used but never defined)
    p = kc.ConvParams(2, (1, 1), (1, 1), (1, 1), (1, 1), 1, True)
    inputs, out = kc.conv_te("float32", p)
    s = Schedule.from_config(out, KernelConfig(16, 16, 16, smem_stages=3, persistent=True),
                             m_axes=("n", "oh", "ow"), n_axes=("co",))
    k = lower(s, tuple(inputs))
    assert k.axes["b"] == ("g",) and k.body[0] == TileCount("1")
    assert _tiles(k.body).body[0] == ProgramIds(True, "tile_id")
    src = at.build(s, inputs + [out]).source
    assert "    num_pid_mn = num_pid_m * num_pid_n\n    num_tiles = num_pid_mn\n" in src
    assert "pid_b = tile_id // num_pid_mn" in src
