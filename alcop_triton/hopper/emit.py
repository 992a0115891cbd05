"""Gluon source of one sm90 GEMM kernel, generated from a ``HopperConfig``, a dtype and a layout.

The source is written out level by level (``EMITTERS``, in order: constants, tile order, copies, wgmma,
epilogue, consumer, loader, entry) and reads as hand-written Gluon: the config's numbers are module
constants (``gl.constexpr``), each helper one concern. Nothing but validated values reaches the text: the
config's ints, bools and enum strings (``HopperConfig.validate``), and the dtype, layout and activation
checked against fixed tuples here.

The kernel: ``NAME(a_ptr, b_ptr, [bias,] c_ptr, a_desc, b_desc, c_desc, M, N, K)`` over TMA descriptors of the stored A
and B (a "t" operand is described as it is stored, (K, M) or (N, K), and handed to wgmma as a transposed
view of its shared-memory tile, which wgmma reads for 16-bit types) and of C, whose box is one epilogue
slice. The tensors come first, as every alcop kernel takes them (``runtime.prebind``: a prebound launch
rebuilds each descriptor from the address of the tensor at its index); the kernel reads A, B and C only
through their descriptors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import triton

from ..errors import ScheduleError
from ..version import __version__
from .config import HopperConfig
from .plan import HopperPlan, describe

DTYPES: dict[str, str] = {"float16": "f16", "bfloat16": "bf16"}
LAYOUTS: tuple[str, ...] = ("nn", "nt", "tn", "tt")
ACTIVATION_CODE: dict[str, str] = {
    "relu": "gl.maximum(part, 0.0)",
    "gelu": "0.5 * part * (1.0 + gl.erf(part * 0.7071067811865476))",  # exact (erf) GELU, torch's default
    "silu": "part / (1.0 + gl.exp(-part))",
    "sigmoid": "1.0 / (1.0 + gl.exp(-part))",
    "tanh": "2.0 / (1.0 + gl.exp(-2.0 * part)) - 1.0",  # saturates to +-1 where exp over- or underflows
}
"""The epilogue's activations, applied in float32 to the accumulator slice ``part`` (the implicit-GEMM
kernel's set, ``kernels.matmul.ACTIVATIONS``)."""
ACTIVATIONS: tuple[str | None, ...] = (None, *ACTIVATION_CODE)


@dataclass(frozen=True)
class KernelSource:
    name: str
    source: str
    plan: HopperPlan
    dtype: str
    layout: str
    bias: bool
    activation: str | None
    residual: bool = False


def kernel_name(config: HopperConfig, dtype: str, layout: str, bias: bool = False,
                activation: str | None = None, residual: bool = False) -> str:
    """Stable: the same (config, dtype, layout, epilogue) always names the same kernel (and cache file)."""
    _check(dtype, layout, activation)
    ep = ("_bias" if bias else "") + (f"_{activation}" if activation else "") + ("_res" if residual else "")
    return f"hopper_gemm_{layout}_{DTYPES[dtype]}{ep}_{config.tag()}"


def _check(dtype: str, layout: str, activation: str | None) -> None:
    if dtype not in DTYPES:
        raise ScheduleError(f"hopper emit: dtype={dtype!r}: must be one of {tuple(DTYPES)} (wgmma on 16-bit inputs, "
                            "fp32 accumulation)")
    if layout not in LAYOUTS:
        raise ScheduleError(f"hopper emit: layout={layout!r}: must be one of {LAYOUTS} (A then B, 'n' as in the "
                            "math, 't' transposed)")
    if activation not in ACTIVATIONS:
        raise ScheduleError(f"hopper emit: activation={activation!r}: must be one of {ACTIVATIONS}")


@dataclass(frozen=True)
class _Ctx:
    cfg: HopperConfig
    plan: HopperPlan
    dtype: str
    layout: str
    bias: bool
    activation: str | None
    name: str
    residual: bool = False

    @property
    def ep_args(self) -> str:
        """The epilogue's tensors, in the order every alcop GEMM kernel takes them: bias, then residual."""
        return ("bias, " if self.bias else "") + ("residual, " if self.residual else "")

    @property
    def bars(self) -> str:
        return "ready, empty, turn" if self.cfg.policy == "pingpong" else "ready, empty"


# --------------------------------------------------------------------------------------------- emitters
def _header(x: _Ctx) -> str:
    c = x.cfg
    a_store = "A stored (M, K), K contiguous" if x.layout[0] == "n" else "A stored (K, M), M contiguous: wgmma reads its tile transposed"
    b_store = "B stored (K, N), N contiguous" if x.layout[1] == "n" else "B stored (N, K), K contiguous: wgmma reads its tile transposed"
    ep = " + bias[n]" if x.bias else ""
    res = " + residual[m, n]" if x.residual else ""
    op = (f"C[m, n] = {x.activation + '(' if x.activation else ''}sum_k A[m, k] * B[k, n]{ep}"
          f"{')' if x.activation else ''}{res}")
    lines = [
        f"alcop_triton generated Hopper (sm90) GEMM kernel {x.name}",
        "",
        f"op:       {op}",
        f"layout:   {x.layout}: {a_store}; {b_store}; C stored (M, N)",
        f"dtype:    {x.dtype} in, float32 accumulate, {x.dtype} out",
        f"config:   {c.tag()}  ({', '.join(f'{k}={v}' for k, v in c.to_dict().items())})",
        *(f"{lv.title + ':':9} {lv.text()}" for lv in x.plan.levels),
        *(f"note:     {n}" for n in x.plan.notes),
        f"smem:     ring {c.ring_bytes} B + epilogue {c.epilogue_bytes} B + barriers {c.barrier_bytes} B "
        f"(+ compiler slack) <= {c.smem_bytes} B",
        f"launch:   num_warps={c.num_warps} (default partition), {c.total_warps} warps in all"
        + (f", maxnreg={c.maxnreg}" if c.maxnreg else "")
        + (", grid = SMs (persistent)" if c.persistent else ", grid = output tiles"),
        f"versions: alcop_triton {__version__}, triton {triton.__version__}",
    ]
    body = "\n".join(lines)
    return f'"""{body}\n"""\n\nfrom triton.experimental import gluon\nfrom triton.experimental.gluon import language as gl\n' \
           "from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, " \
           "warpgroup_mma,\n                                                              warpgroup_mma_wait)\n"


def _constants(x: _Ctx) -> str:
    c = x.cfg
    return f"""
BLOCK_M = gl.constexpr({c.block_m})
BLOCK_N = gl.constexpr({c.block_n})
BLOCK_K = gl.constexpr({c.block_k})
STAGES = gl.constexpr({c.stages})  # level 1: TMA ring depth
WGMMA_DEPTH = gl.constexpr({c.wgmma_depth})  # level 2: wgmma groups left in flight
GROUP_M = gl.constexpr({c.group_m})
CONSUMER_WARPS = gl.constexpr({c.consumer_warps})
SLICE_N = gl.constexpr({c.block_n // c.epilogue_subtile})  # level 3: epilogue column slice
"""


def _tile_order(x: _Ctx) -> str:
    return '''

@gluon.jit
def _tile_offsets(t, n_m, n_n):
    """Output tile t's first row and column: GROUP_M rows of tiles at a time, so programs running together
    share B's columns in L2."""
    width = GROUP_M * n_n
    first_m = (t // width) * GROUP_M
    rows = gl.minimum(n_m - first_m, GROUP_M)
    return (first_m + (t % width) % rows) * BLOCK_M, ((t % width) // rows) * BLOCK_N
'''


def _copies(x: _Ctx) -> str:
    a = "[off_m, k * BLOCK_K]" if x.layout[0] == "n" else "[k * BLOCK_K, off_m]"
    b = "[k * BLOCK_K, off_n]" if x.layout[1] == "n" else "[off_n, k * BLOCK_K]"
    return f'''

@gluon.jit
def _copy_chunk(a_desc, b_desc, a_ring, b_ring, ready, slot, off_m, off_n, k):
    """Level 1: TMA copies of reduction chunk k of tile (off_m, off_n) into ring slot ``slot``, completing
    ``ready[slot]``."""
    bar = ready.index(slot)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, {a}, bar, a_ring.index(slot))
    tma.async_copy_global_to_shared(b_desc, {b}, bar, b_ring.index(slot))
'''


def _mma(x: _Ctx) -> str:
    a = "a_ring.index(slot)" + (".permute((1, 0))" if x.layout[0] == "t" else "")
    b = "b_ring.index(slot)" + (".permute((1, 0))" if x.layout[1] == "t" else "")
    return f'''

@gluon.jit
def _issue_mma(a_ring, b_ring, slot, acc):
    """Level 2: one asynchronous wgmma group on ring slot ``slot``{' (transposed views: the "t" operands)' if 't' in x.layout else ''}."""
    return warpgroup_mma({a}, {b}, acc, is_async=True)
'''


def _epilogue(x: _Ctx) -> str:
    s = x.cfg.epilogue_subtile
    half = "reshape(BLOCK_M, 2, {w}).permute(0, 2, 1).split()"
    split = {1: ["    parts = (acc, )"],
             2: ["    parts = acc." + half.format(w="BLOCK_N // 2")],
             4: ["    parts = acc." + half.format(w="BLOCK_N // 2"),
                 "    parts = parts[0]." + half.format(w="BLOCK_N // 4") + " + parts[1]." + half.format(w="BLOCK_N // 4")]}[s]
    body = []
    for i in range(s):
        v = f"parts[{i}]"
        body.append(f"    part = {v}")
        if x.bias or x.residual:
            body.append("    cols = off_n + " + f"{i} * SLICE_N + gl.arange(0, SLICE_N, layout=gl.SliceLayout(0, part.type.layout))")
        if x.bias:
            body.append("    part = part + gl.load(bias + cols, mask=cols < N, other=0.0).to(gl.float32)[None, :]")
        if x.activation:
            body.append(f"    part = {ACTIVATION_CODE[x.activation]}")
        if x.residual:  # a row-major (M, N) residual, read by pointers in the accumulator's layout
            body += ["    in_c = (rows < M)[:, None] & (cols < N)[None, :]",
                     "    part = part + gl.load(residual + rows[:, None] * N + cols[None, :], mask=in_c, other=0.0)"
                     ".to(gl.float32)"]
        body += ["    tma.store_wait(pendings=0)  # the buffer's previous store has left shared memory",
                 "    c_smem.store(part.to(c_desc.dtype))",
                 "    fence_async_shared()",
                 f"    tma.async_copy_shared_to_global(c_desc, [off_m, off_n + {i} * SLICE_N], c_smem)"]
    if x.residual:
        body.insert(0, "    rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, parts[0].type.layout))")
    how = "the whole tile" if s == 1 else f"{s} column slices of SLICE_N (split in registers, one TMA store each)"
    what = ("; bias added" if x.bias else "") + (f"; {x.activation}" if x.activation else "") + (
        "; residual added" if x.residual else "")
    return f'''

@gluon.jit
def _epilogue(acc, c_desc, c_smem, {x.ep_args}off_m, off_n, M, N):
    """Level 3: the tile to C by TMA through shared memory, {how}{what}."""
''' + "\n".join(split + body) + "\n"


def _turn_wait(x: _Ctx) -> str:
    if x.cfg.policy != "pingpong":
        return ""
    return """        # ping-pong order: this consumer's main loop starts once the other's previous one has issued its
        # last wgmma (its i-th wait: consumer 0 passes its first at once, consumer 1 waits for consumer 0's).
        # Besides sharing the tensor core in turns, this keeps ready-barrier phases from aliasing: every
        # earlier fill of a slot has been waited for before this consumer waits on the slot's next one.
        mbarrier.wait(turn.index(FIRST), (((t - pid) // (2 * nprog)) & 1) ^ (1 - FIRST))
"""


def _main_loop(x: _Ctx, indent: str, released: bool, inline: bool, turn: bool = False) -> str:
    """The k loop of one tile; ``released``: hand slots back on ``empty`` (a loader partition waits on it);
    ``inline``: issue chunk k + STAGES - WGMMA_DEPTH's copies here (no loader)."""
    d = x.cfg.wgmma_depth
    lines = ["for k in range(kt):",
             "    c = g + k",
             "    slot = c % STAGES",
             "    mbarrier.wait(ready.index(slot), (c // STAGES) & 1)",
             "    acc = _issue_mma(a_ring, b_ring, slot, acc)",
             f"    # level 2: at most {d} wgmma group(s) left in flight; chunk k - {d}'s has retired",
             "    acc = warpgroup_mma_wait(num_outstanding=WGMMA_DEPTH, deps=(acc, ))"]
    if released:
        if d == 0:
            lines.append("    mbarrier.arrive(empty.index(slot), count=1)")
        else:
            lines += ["    if k >= WGMMA_DEPTH:  # its slot goes back to the loader",
                      "        mbarrier.arrive(empty.index((c - WGMMA_DEPTH) % STAGES), count=1)"]
    if turn:
        lines.append("mbarrier.arrive(turn.index(1 - FIRST), count=1)  # the other consumer's turn")
    if inline:
        lines += ["    nxt = k + STAGES - WGMMA_DEPTH  # into the slot of chunk k - WGMMA_DEPTH, retired",
                  "    if nxt < kt:",
                  "        _copy_chunk(a_desc, b_desc, a_ring, b_ring, ready, (g + nxt) % STAGES, off_m, off_n, nxt)"]
    lines.append("acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))")
    if released and d > 0:
        lines += ["for k in range(gl.maximum(kt - WGMMA_DEPTH, 0), kt):  # the last chunks' slots",
                  "    mbarrier.arrive(empty.index((g + k) % STAGES), count=1)"]
    return "\n".join(indent + ln for ln in lines) + "\n"


_SIZES = '''    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    n_m = gl.cdiv(M, BLOCK_M)
    n_n = gl.cdiv(N, BLOCK_N)
    n_tiles = n_m * n_n
    kt = gl.cdiv(K, BLOCK_K)
'''

_ACC = '''    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CONSUMER_WARPS, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
'''


def _partition(x: _Ctx, name: str, doc: str) -> str:
    """The head of a ``warp_specialize`` partition: every partition takes the same arguments (Gluon passes
    one tuple to all), then the sizes each computes for itself."""
    indent = " " * (len("def ") + len(name) + 1)
    return f'''

@gluon.jit
def {name}(a_desc, b_desc, c_desc, {x.ep_args}a_ring, b_ring, {x.bars}, c_bufs, M, N, K,
{indent}FIRST: gl.constexpr, STRIDE: gl.constexpr):
    """{doc}"""
{_SIZES}'''


def _consumer(x: _Ctx) -> str:
    if not x.cfg.warp_specialize:
        return ""
    return _partition(x, "_consumer", """A consumer partition: of this program's tiles (pid, pid + nprog, ...) it takes every STRIDE-th from
    the FIRST-th, in the loader's order, so its chunks sit at ring positions g = (tile's turn) * kt + k.""") + f'''{_ACC}    c_smem = c_bufs.index(FIRST)
    for t in range(pid + FIRST * nprog, n_tiles, STRIDE * nprog):
        g = ((t - pid) // nprog) * kt
        off_m, off_n = _tile_offsets(t, n_m, n_n)
        acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
{_turn_wait(x)}{_main_loop(x, "        ", released=True, inline=False, turn=x.cfg.policy == "pingpong")}        _epilogue(acc, c_desc, c_smem, {x.ep_args}off_m, off_n, M, N)
    tma.store_wait(pendings=0)
'''


def _loader(x: _Ctx) -> str:
    if not x.cfg.warp_specialize:
        return ""
    return _partition(x, "_loader", """Level 1's producer, one warp: every chunk of this program's tiles in order, each into the next ring
    slot once its consumer has released it (``empty``; a fresh barrier passes the first round's wait).""") + f'''    g = 0
    for t in range(pid, n_tiles, nprog):
        off_m, off_n = _tile_offsets(t, n_m, n_n)
        for k in range(kt):
            slot = g % STAGES
            mbarrier.wait(empty.index(slot), ((g // STAGES) & 1) ^ 1)
            _copy_chunk(a_desc, b_desc, a_ring, b_ring, ready, slot, off_m, off_n, k)
            g += 1
'''


def _entry(x: _Ctx) -> str:
    c = x.cfg
    alloc = f'''    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [{c.consumer_partitions}] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
'''
    head = f'''

@gluon.jit
def {x.name}(a_ptr, b_ptr, {x.ep_args}c_ptr, a_desc, b_desc, c_desc, M, N, K):
'''
    if c.warp_specialize:
        args = f"a_desc, b_desc, c_desc, {x.ep_args}a_ring, b_ring, {x.bars}, c_bufs, M, N, K"
        parts = [f"(_consumer, ({args}, 0, {c.consumer_partitions}))"]
        warps, regs = [], []
        if c.policy == "pingpong":
            parts.append(f"(_consumer, ({args}, 1, 2))")
            warps.append(str(c.consumer_warps))
            regs.append(str(c.CONSUMER_REGS))
        parts.append(f"(_loader, ({args}, 0, 1))")
        warps.append("1")
        regs.append(str(c.LOADER_REGS))
        turn = ("    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())\n"
                "    mbarrier.init(turn.index(0), count=1)\n    mbarrier.init(turn.index(1), count=1)\n"
                if c.policy == "pingpong" else "")
        return head + alloc + f'''    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
{turn}    gl.warp_specialize([
        {(',' + chr(10) + '        ').join(parts)},
    ], [{", ".join(warps)}], [{", ".join(regs)}])
'''
    return head + alloc + f'''    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
{_SIZES}{_ACC}    c_smem = c_bufs.index(0)
    for t in range(pid, n_tiles, nprog):
        g = ((t - pid) // nprog) * kt  # ring position of this tile's first chunk
        off_m, off_n = _tile_offsets(t, n_m, n_n)
        # level 1, in line: the first STAGES - WGMMA_DEPTH chunks ahead (every slot is free: the last tile's
        # wgmma groups have all retired)
        for i in gl.static_range(STAGES - WGMMA_DEPTH):
            if i < kt:
                _copy_chunk(a_desc, b_desc, a_ring, b_ring, ready, (g + i) % STAGES, off_m, off_n, i)
        acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
{_main_loop(x, "        ", released=False, inline=True)}        _epilogue(acc, c_desc, c_smem, {x.ep_args}off_m, off_n, M, N)
    tma.store_wait(pendings=0)
'''


EMITTERS: tuple[tuple[str, Callable[[_Ctx], str]], ...] = (
    ("header", _header), ("constants", _constants), ("tile order", _tile_order), ("copies", _copies),
    ("wgmma", _mma), ("epilogue", _epilogue), ("consumer", _consumer), ("loader", _loader), ("entry", _entry))
"""The source's parts in order, each one concern (the emitter registry's shape in ``codegen.py``)."""


def emit(config: HopperConfig | HopperPlan, dtype: str, layout: str, *, bias: bool = False,
         activation: str | None = None, residual: bool = False) -> KernelSource:
    """The Gluon source of one kernel. ``config``: a plan (its levels' reasons go to the header) or a bare
    config (described as given)."""
    plan = config if isinstance(config, HopperPlan) else describe(config)
    plan.config.validate()  # a record built around __post_init__ (dataclasses.replace keeps it) is checked again
    _check(dtype, layout, activation)
    for flag, v in (("bias", bias), ("residual", residual)):
        if not isinstance(v, bool):
            raise ScheduleError(f"hopper emit: {flag}={v!r}: must be True or False")
    name = kernel_name(plan.config, dtype, layout, bias, activation, residual)
    x = _Ctx(plan.config, plan, dtype, layout, bias, activation, name, residual)
    source = "".join(fn(x) for _, fn in EMITTERS)
    return KernelSource(name, source, plan, dtype, layout, bias, activation, residual)
