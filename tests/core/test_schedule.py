"""The schedule language: per-step validation, ALCOP's ordering, config derivation, from_config, and the
persistent knob of ``KernelConfig`` (its record form, its schedule step)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule, ScheduleError, te
from alcop_triton.schedule import AsyncCopyStep, CacheRead, Group, Inline, Persistent, Pipeline, Tile, Unroll, Warps

M, N, K = te.var("M"), te.var("N"), te.var("K")


def _graph(dtype: str = "float16", prologue: bool = False, epilogue: bool = False):
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    A2 = te.compute((M, K), lambda i, k: A[i, k] * 2, "A2")
    k = te.reduce_axis(K, "k")
    src = A2 if prologue else A
    C = te.compute((M, N), lambda i, j: te.sum(src[i, k] * B[k, j], axis=k), "C")
    out = te.compute((M, N), lambda i, j: te.relu(C[i, j]), "Out") if epilogue else C
    return A, B, A2, k, C, out


# ----------------------------------------------------------------------------- per-step validation

def test_schedule_error_is_value_error() -> None:
    assert issubclass(ScheduleError, ValueError) and issubclass(ScheduleError, at.AlcopError)


@pytest.mark.parametrize("call, pattern", [
    (lambda s, A, B: s.cache_read(A, "global"), r"cache_read\(scope='global'\): scope must be 'shared' or 'register'"),
    (lambda s, A, B: s.tile(block_m=24), r"tile\(block_m=24\): must be a power of two in \[16, 512\]"),
    (lambda s, A, B: s.tile(block_n=8), r"tile\(block_n=8\): must be a power of two"),
    (lambda s, A, B: s.tile(block_k=1024), r"tile\(block_k=1024\): must be a power of two in \[16, 512\]"),
    (lambda s, A, B: s.tile(block_k=32, sub_k=8), r"tile\(sub_k=8\): must be a power of two >= 16 dividing block_k=32"),
    (lambda s, A, B: s.tile(block_k=32, sub_k=64), r"tile\(sub_k=64\)"),
    (lambda s, A, B: s.tile(m_axes=("q",)), r"tile\(m_axes=\('q',\)\): 'q' is not an output axis; output axes are \['i', 'j'\]"),
    (lambda s, A, B: s.tile(m_axes=("i", "j"), n_axes=("j",)), r"axes \['j'\] are in both m_axes and n_axes"),
    (lambda s, A, B: s.group(0), r"group\(group_m=0\): must be an int in \[1, 64\]"),
    (lambda s, A, B: s.group(65), r"group\(group_m=65\)"),
    (lambda s, A, B: s.num_warps(3), r"num_warps\(3\): must be one of 1, 2, 4, 8, 16"),
    (lambda s, A, B: s.async_copy("bulk"), r"async_copy\('bulk'\): must be one of \('pointer', 'tma'\)"),
    (lambda s, A, B: s.unroll("i"), r"unroll\('i'\): only a reduction axis of this kernel can be unrolled"),
    (lambda s, A, B: s.compute_inline(A), r"compute_inline\(A\): .* 'A' is an input"),
], ids=["cache_read-scope", "tile-m", "tile-n", "tile-k", "sub_k-small", "sub_k-big", "m_axes", "m_n_overlap",
        "group0", "group65", "warps", "async", "unroll", "inline-input"])
def test_step_validation_names_step_value_and_rule(call, pattern: str) -> None:
    A, B, _, _, _, out = _graph()
    s = Schedule(out)
    with pytest.raises(ScheduleError, match=pattern):
        call(s, A, B)
    assert s.steps == []  # a rejected step records nothing


def test_pipeline_depth_limits_per_scope() -> None:
    A, B, *_ , out = _graph()
    s = Schedule(out)
    sa = s.cache_read(A, "shared")
    ra = s.cache_read(sa, "register")
    for bad in (0, 9, True, 2.0):
        with pytest.raises(ScheduleError, match=r"pipeline\(A_shared, stages=.*\): shared stages must be an int in \[1, 8\]"):
            s.pipeline(sa, bad)
    with pytest.raises(ScheduleError, match=r"pipeline\(A_reg, stages=5\): register stages must be an int in \[1, 4\]"):
        s.pipeline(ra, 5)
    s.pipeline(sa, 8)
    s.pipeline(ra, 4)
    assert s.steps[-2:] == [Pipeline("A_shared", 8), Pipeline("A_reg", 4)]


def test_pipeline_needs_a_buffer_of_this_schedule() -> None:
    A, B, *_, out = _graph()
    s, other = Schedule(out), Schedule(out)
    foreign = other.cache_read(B, "shared")
    with pytest.raises(ScheduleError, match="cache_read before pipeline"):
        s.pipeline(A, 2)  # a tensor, not a buffer
    with pytest.raises(ScheduleError, match="made by this schedule's cache_read"):
        s.pipeline(foreign, 2)


def test_register_cache_read_needs_a_shared_buffer() -> None:
    A, B, *_, out = _graph()
    s = Schedule(out)
    with pytest.raises(ScheduleError, match=r"register buffer must be fed by a shared buffer.*global->register"):
        s.cache_read(A, "register")
    sa = s.cache_read(A, "shared")
    ra = s.cache_read(sa, "register")
    with pytest.raises(ScheduleError, match="fed by a shared buffer"):
        s.cache_read(ra, "register")  # a register buffer does not feed another level
    assert (sa.scope, sa.source, sa.tensor) == ("shared", "A", "A")
    assert (ra.name, ra.scope, ra.source, ra.tensor) == ("A_reg", "register", "A_shared", "A")


def test_cache_read_errors() -> None:
    A, B, A2, k, C, out = _graph(epilogue=True)
    s = Schedule(out)
    sa = s.cache_read(A, "shared")
    with pytest.raises(ScheduleError, match="already has a shared buffer 'A_shared'"):
        s.cache_read(A, "shared")
    with pytest.raises(ScheduleError, match="a shared buffer is read from a tensor"):
        s.cache_read(sa, "shared")
    with pytest.raises(ScheduleError, match="'C' is produced by this kernel"):
        s.cache_read(C, "shared")
    with pytest.raises(ScheduleError, match="'Out' is produced by this kernel"):
        s.cache_read(out, "shared")
    stranger = te.placeholder((M, K), "float16", "Z")
    with pytest.raises(ScheduleError, match="'Z' is not a tensor of this schedule's graph"):
        s.cache_read(stranger, "shared")


def test_compute_inline_rejects_output_and_reduction() -> None:
    A, B, A2, k, C, out = _graph(prologue=True, epilogue=True)
    s = Schedule(out)
    with pytest.raises(ScheduleError, match="'Out' is the output"):
        s.compute_inline(out)
    with pytest.raises(ScheduleError, match="'C' is the reduction"):
        s[C].compute_inline()
    s[A2].compute_inline()  # TVM-style access works for an intermediate elementwise compute
    assert s.steps == [Inline("A2")]


def test_schedule_graph_errors() -> None:
    A = te.placeholder((M, K), "float32", "A")
    A_again = te.placeholder((M, K), "float32", "A")
    k = te.reduce_axis(K, "k")
    with pytest.raises(ScheduleError, match="input tensor 'A' and input tensor 'A' are both named 'A'"):
        te.compute((M, M), lambda i, j: te.sum(A[i, k] * A_again[j, k], axis=k), "C")
    B = te.placeholder((K, N), "float32", "B")
    C1 = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C1")
    k2 = te.reduce_axis(N, "k2")
    C2 = te.compute((M, M), lambda i, j: te.sum(C1[i, k2] * C1[j, k2], axis=k2), "C2")
    with pytest.raises(ScheduleError, match="2 reductions"):
        Schedule(C2)
    ew = te.compute((M, K), lambda i, j: A[i, j] * 2, "E")
    with pytest.raises(ScheduleError, match="no reduction to tile"):
        Schedule(ew).tile(16, 16, 16)


# ----------------------------------------------------------------------------- ordering

def test_canonical_steps_moves_tile_before_pipeline_with_a_note() -> None:
    A, B, *_, out = _graph()
    s = Schedule(out)
    sa = s.cache_read(A, "shared")
    s.pipeline(sa, 3)
    s.tile(32, 32, 32)  # given after pipeline: ALCOP tiles first (rule 2 is checked on the tiled loops)
    steps, notes = s.canonical_steps()
    assert [type(x) for x in steps] == [CacheRead, Tile, Pipeline]
    assert len(notes) == 1 and "Tile(" in notes[0] and "reordered" in notes[0] and "section 2.2" in notes[0]
    assert [type(x) for x in s.steps] == [CacheRead, Pipeline, Tile]  # the record itself is untouched


def test_canonical_steps_moves_inline_after_pipeline_with_a_note() -> None:
    A, B, A2, *_, out = _graph(prologue=True)
    s = Schedule(out)
    buf = s.cache_read(A2, "shared")
    s.tile(16, 16, 16)
    s.compute_inline(A2)       # Fig. 5 case 1 order: would make the buffer computed, not copied
    s.pipeline(buf, 2)
    steps, notes = s.canonical_steps()
    assert [type(x) for x in steps] == [CacheRead, Tile, Pipeline, Inline]
    assert len(notes) == 1 and "Pipeline(buffer='A2_shared', stages=2)" in notes[0]


def test_canonical_steps_in_order_gives_no_notes() -> None:
    A, B, *_, out = _graph()
    s = Schedule.from_config(out, KernelConfig(16, 16, 32, reg_stages=2, reg_split=2))
    steps, notes = s.canonical_steps()
    assert notes == () and list(steps) == s.steps
    s.unroll("k")  # tile-phase step after later phases -> moved, with a note
    steps, notes = s.canonical_steps()
    assert isinstance(steps[5], Unroll) and len(notes) == 1


# ----------------------------------------------------------------------------- config derivation

def test_config_of_an_empty_schedule_is_the_default_tile_unpipelined() -> None:
    *_, out = _graph()
    cfg = Schedule(out).config()
    assert cfg == KernelConfig(64, 64, 32, group_m=1, num_warps=4, smem_stages=1, reg_stages=1, reg_split=1)


def test_config_derivation_from_manual_steps() -> None:
    A, B, *_, out = _graph()
    s = Schedule(out)
    sa, sb = s.cache_read(A, "shared"), s.cache_read(B, "shared")
    ra = s.cache_read(sa, "register")
    s.tile(32, 64, 64, sub_k=16)
    s.pipeline(sa, 3)
    s.pipeline(sb, 2)          # rule 3: the loop gets the deepest request
    s.pipeline(ra, 2)
    s.group(4)
    s.num_warps(8)
    s.async_copy("tma")
    assert s.config() == KernelConfig(32, 64, 64, group_m=4, num_warps=8, smem_stages=3, reg_stages=2, reg_split=4,
                                      async_copy="tma")
    s.tile(16, 16, 32)  # the last tile wins
    assert s.config().block_m == 16 and s.config().reg_split == 1


def test_config_repipelined_buffer_uses_its_last_depth() -> None:
    # lower() keeps the last pipeline() per buffer; config() (the tuner's record) must agree.
    A, B, *_, out = _graph()
    s = Schedule(out)
    sa, sb = s.cache_read(A, "shared"), s.cache_read(B, "shared")
    s.tile(16, 16, 16)
    s.pipeline(sa, 4)
    s.pipeline(sa, 2)
    s.pipeline(sb, 2)
    assert s.config().smem_stages == 2
    assert s.stages("shared") == 2 and s.stages("register") == 1


def test_register_depth_needs_a_register_buffer() -> None:
    A, B, *_, out = _graph()
    s = Schedule(out)
    s.cache_read(A, "shared")
    s.tile(16, 16, 32)
    assert s.config().reg_stages == 1


_CFG = st.builds(
    lambda bm, bn, bk, g, w, s, r, split, mech, pers: KernelConfig(bm, bn, bk, g, w, s, r, min(split, bk // 16), mech,
                                                                   pers),
    st.sampled_from([16, 32, 64, 128]), st.sampled_from([16, 32, 64, 128]), st.sampled_from([16, 32, 64, 128]),
    st.integers(1, 64), st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 8), st.integers(1, 4),
    st.sampled_from([1, 2, 4, 8]), st.sampled_from(["pointer", "tma"]), st.booleans())


@settings(max_examples=40, deadline=None)
@given(cfg=_CFG)
def test_from_config_round_trips(cfg: KernelConfig) -> None:
    *_, out = _graph(epilogue=True)
    s = Schedule.from_config(out, cfg)
    assert s.config() == cfg  # what the tuner records is what the schedule builds


def test_from_config_steps() -> None:
    A, B, *_, out = _graph(prologue=True, epilogue=True)
    cfg = KernelConfig(32, 16, 64, group_m=2, num_warps=2, smem_stages=4, reg_stages=3, reg_split=2)
    s = Schedule.from_config(out, cfg)
    # both operands staged shared -> register; the prologue compute A2 is looked through to input A
    assert s.steps[:4] == [CacheRead("A", "shared", "A_shared"), CacheRead("A_shared", "register", "A_reg"),
                           CacheRead("B", "shared", "B_shared"), CacheRead("B_shared", "register", "B_reg")]
    assert s.steps[4] == Tile(32, 16, 64, 32)
    assert s.steps[5:9] == [Pipeline("A_shared", 4), Pipeline("A_reg", 3), Pipeline("B_shared", 4), Pipeline("B_reg", 3)]
    assert s.steps[9:] == [Group(2), Warps(2), AsyncCopyStep("pointer")]
    plain = Schedule.from_config(out, dataclasses.replace(cfg, reg_stages=1, reg_split=1))
    assert not any(b.scope == "register" for b in plain.buffers.values())


def test_from_config_needs_a_reduction() -> None:
    A = te.placeholder((M, K), "float32", "A")
    ew = te.compute((M, K), lambda i, j: A[i, j] + 1.0, "E")
    with pytest.raises(ScheduleError, match="no reduction"):
        Schedule.from_config(ew, KernelConfig(16, 16, 16))


@pytest.mark.parametrize("field, value, pattern", [
    ("block_m", 48, r"KernelConfig.block_m=48: must be a power of two"),
    ("group_m", 0, r"KernelConfig.group_m=0"),
    ("smem_stages", 9, r"KernelConfig.smem_stages=9"),
    ("reg_stages", 5, r"KernelConfig.reg_stages=5"),
    ("reg_split", 3, r"KernelConfig.reg_split=3"),
    ("async_copy", "dma", r"KernelConfig.async_copy='dma'"),
    ("persistent", 1, r"KernelConfig.persistent=1: must be True or False"),
    ("persistent", "yes", r"KernelConfig.persistent='yes': must be True or False"),
    ("persistent", None, r"KernelConfig.persistent=None: must be True or False"),
])
def test_kernel_config_validation(field: str, value: object, pattern: str) -> None:
    with pytest.raises(ScheduleError, match=pattern):
        KernelConfig(16, 16, 32).replace(**{field: value})
    with pytest.raises(ScheduleError, match="sub-tiles of 8 < 16"):
        KernelConfig(16, 16, 32, reg_split=4)


# ----------------------------------------------------------------------------- the persistent knob

PERSISTENT = KernelConfig(32, 64, 64, group_m=4, num_warps=8, smem_stages=4, reg_stages=2, reg_split=2,
                          async_copy="tma", persistent=True)


def test_persistent_defaults_off_and_names_itself() -> None:
    assert KernelConfig().persistent is False
    assert str(PERSISTENT) == "m32n64k64_g4_w8_s4_r2x2_tma_persistent"
    assert str(PERSISTENT.replace(async_copy="pointer")).endswith("_s4_r2x2_persistent")
    assert not str(PERSISTENT.replace(persistent=False)).endswith("_persistent")
    assert PERSISTENT != PERSISTENT.replace(persistent=False)  # distinct configs (and dict keys)
    assert len({PERSISTENT, PERSISTENT.replace(persistent=False)}) == 2


def test_persistent_round_trips_through_dicts() -> None:
    d = PERSISTENT.to_dict()
    assert d["PERSISTENT"] is True and list(d)[-1] == "PERSISTENT"
    assert KernelConfig.from_dict(d) == PERSISTENT
    plain = PERSISTENT.replace(persistent=False)
    assert "PERSISTENT" not in plain.to_dict()  # records written before the knob existed read back equal
    assert KernelConfig.from_dict(plain.to_dict()) == plain
    old = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4, "num_warps": 8, "num_stages": 4,
           "REG_STAGES": 2, "REG_SPLIT": 2, "ASYNC_COPY": "tma"}
    assert KernelConfig.from_dict(old) == plain and KernelConfig.from_dict(old).persistent is False
    assert KernelConfig.from_dict({**old, "PERSISTENT": False}) == plain
    assert KernelConfig.from_dict({"persistent": True}).persistent is True  # field names are accepted too


@pytest.mark.parametrize("value", [1, 0, "true", None, 1.0])
def test_persistent_from_dict_needs_a_bool(value: object) -> None:
    with pytest.raises(ScheduleError, match=r"config PERSISTENT=.*: expected bool"):
        KernelConfig.from_dict({"BLOCK_M": 64, "PERSISTENT": value})


def test_persistent_step_and_config_derivation() -> None:
    A, B, *_, out = _graph(epilogue=True)
    s = Schedule.from_config(out, PERSISTENT)
    assert s.steps[-1] == Persistent() and s.config() == PERSISTENT
    plain = Schedule.from_config(out, PERSISTENT.replace(persistent=False))
    assert not any(isinstance(x, Persistent) for x in plain.steps) and plain.config() == PERSISTENT.replace(persistent=False)
    manual = Schedule(out)
    manual.tile(16, 16, 32)
    assert manual.config().persistent is False
    manual.persistent()
    assert manual.config().persistent is True and manual.steps[-1] == Persistent()
    early = Schedule(out)
    early.persistent()  # given before tiling: a launch-phase step; the tile is moved before it, with a note
    early.tile(16, 16, 32)
    steps, notes = early.canonical_steps()
    assert [type(x) for x in steps] == [Tile, Persistent] and len(notes) == 1 and "reordered: Tile(" in notes[0]
    assert early.config() == KernelConfig(16, 16, 32, group_m=1, smem_stages=1, persistent=True)

