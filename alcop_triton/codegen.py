"""Code generation: loop-nest IR -> readable Triton source.

One emitter per node type (``EMITTERS``); an unknown node names itself. Names follow the math
(the user's axis names, ``acc``, ``tile_a``, ``offs_m``), comments mark every rewrite site, and the
header says what the kernel computes, for which config, through which passes.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from typing import Callable, Iterator

from . import te
from .errors import CodegenError, ScheduleError, UnsupportedError
from .loop_ir import (BatchIndices, Copy, Dot, For, InitAcc, Kernel, KIndices, KRef, KSplit, Node, find,
                      ProgramIds, Rotate, SplitReduce, Store, TileCount, TileIndices, padded_run, run_extent)

TL_DTYPE = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32", "float64": "tl.float64",
            "int32": "tl.int32", "int64": "tl.int64", "bool": "tl.int1"}
RESERVED = {"pid", "pid_m", "pid_n", "pid_b", "num_pid_m", "num_pid_n", "num_pid_in_group", "group_id", "first_pid_m",
            "group_size_m", "tile_id", "num_tiles", "num_pid_mn", "acc", "k0", "ks", "tl", "triton", "out", "mask_m",
            "mask_n", "mask_out", "offs_m", "offs_n", "a_desc", "b_desc", "out_desc", "BLOCK_M", "BLOCK_N", "BLOCK_K", "SUB_K",
            "REG_SPLIT", "GROUP_M", "SPLIT_K", "pid_s", "k_base", "k_chunks", "k_chunks_all", "k_chunks_per_split",
            "tile_lin", "ws_tile", "ws_stride", "arrived", "split_ws", "split_locks", "split_s", "split_g",
            "split_g_first", "split_g_n", "n_tiles", "float", "gdc_wait", "gdc_launch_dependents", "tile_lo",
            "tile_hi"}
TANH_SERIES: tuple[float, ...] = (-1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075,
                                  -929569 / 638512875, 6404582 / 10854718875)
"""Coefficients of x**3, x**5, ... x**17 in tanh's Taylor series (tl has no tanh that also runs in the
interpreter)."""
TANH_SERIES_BELOW = 0.55
"""|x| below which tanh is its series: the next term is under 1e-7 of the sum there, while above it
1 - exp(-2|x|) keeps most of its bits."""
LAUNCH_OPTIONS = frozenset({
    "grid", "warmup", "num_warps", "num_ctas", "num_stages", "warp_size", "maxnreg", "ptx_version", "ptx_options",
    "ir_override", "enable_fp_fusion", "enable_reflect_ftz", "launch_cooperative_grid", "launch_pdl",
    "supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes", "default_dot_input_precision",
    "allowed_dot_input_precisions", "max_num_imprecise_acc_default", "extern_libs", "debug", "backend_name",
    "sanitize_overflow", "arch", "instrumentation_mode", "waves_per_eu", "matrix_instr_nonkdim", "kpack",
    "allow_flush_denorm", "schedule_hint"})
"""Keywords a Triton launch takes besides the kernel's parameters (``JITFunction.run``'s ``grid`` and
``warmup``, the CUDA and HIP backends' options): a kernel parameter of one of these names builds, then
every call fails with "got multiple values", so no tensor or size may be named so."""
SPLIT_ARGS: tuple[str, ...] = ("split_ws", "split_locks")
"""Extra pointer parameters of a split-K kernel, after the output and any descriptors: float32 partial tiles,
arrival counters (``split_locks_needed``)."""
SPLIT_GROUP = 8
"""Split-K slices whose partials one program adds: beyond it the sum runs in two levels (``_split_reduce``)."""


def split_groups(split_k: int) -> int:
    """Groups of ``SPLIT_GROUP`` slices whose sums the last program adds; 1: one level."""
    return -(-split_k // SPLIT_GROUP) if split_k > SPLIT_GROUP else 1


def split_locks_needed(split_k: int, tiles: int) -> int:
    """Arrival counters a split-K launch of ``tiles`` output tiles uses: one per tile, and one per group
    of slices of each tile where the sum runs in two levels."""
    groups = split_groups(split_k)
    return tiles * (1 + groups) if groups > 1 else tiles
RESERVED_PREFIXES = ("tile_", "offs_", "mask_", "stride_", "k_start", "k_tap")


def reserved_reason(name: str) -> str:
    """Why ``name`` (NFKC-normalised) would clash with a name the generator emits; "" if it does not."""
    if name in RESERVED or name.startswith("__"):
        return "is reserved: the generator emits it"
    if name in LAUNCH_OPTIONS:
        return "is a Triton launch option (a keyword of every kernel launch, as num_warps is)"
    if name.startswith(RESERVED_PREFIXES):
        return f"starts with one of {RESERVED_PREFIXES}, prefixes the generator uses"
    return ""


def literal(v: int | float) -> str:
    """Source text of a numeric constant; inf and nan have no literal, so they are spelled as calls."""
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({str(v)!r})"  # 'inf', '-inf', 'nan'
    return repr(v)


class CodeWriter:
    """Indented source buffer (in the manner of Inductor's IndentedBuffer)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def line(self, text: str = "") -> None:
        self.lines.append(("    " * self.level + text) if text else "")

    @contextmanager
    def indent(self) -> Iterator[None]:
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class Ctx:
    """What an emitter needs besides the node: the kernel and the writer."""

    def __init__(self, k: Kernel, w: CodeWriter) -> None:
        self.k, self.w = k, w
        self.bound = 0  # names bound by _bind so far
        self.kind = {a: d for d, axs in k.axes.items() for a in axs}
        # Axis and mask names (a reduction's with its tile suffix) that are scalars per chunk or per
        # program, not vectors: see _in_one_run.
        self.chunk_scalars: set[str] = set()
        # Tile starts of axes that a TMA window copy offsets by axis (a box's M axes, a run's innermost
        # reduction axis): axis -> the scalar holding it.
        self.axis_starts: dict[str, str] = {}

    # -- expressions ---------------------------------------------------------------------------
    def index(self, e: te.Expr, tile: tuple[str, str], ksfx: str) -> str:
        """An index expression over axes, broadcast into a 2-D tile whose dims follow ``tile``."""
        def rec(x: te.Expr) -> str:
            if isinstance(x, te.IterVar):
                d = self.kind[x.name]
                name = x.name + (ksfx if d == "k" else "")
                if d == "b" or name in self.chunk_scalars:
                    return name
                if d == tile[0]:
                    return f"{name}[:, None]"
                if d == tile[1]:
                    return f"{name}[None, :]"
                raise CodegenError(f"axis {x.name!r} ({d}) used in a {tile} tile")
            return self.scalar(x, rec)
        return rec(e)

    def scalar(self, x: te.Expr, rec: Callable[[te.Expr], str]) -> str:
        if self.k.static and x.dtype in te.INT_DTYPES and not isinstance(x, te.Const) \
                and te.free_vars(x) <= set(self.k.static):
            return str(int(te.evaluate(x, self.k.static)))  # fold compile-time sizes: "16", not "(32 // 2)"
        if isinstance(x, te.Const):
            return literal(x.value)
        if isinstance(x, te.Var):
            return str(self.k.static[x.name]) if x.name in self.k.static else x.name
        if isinstance(x, te.BinOp):
            a, b = rec(x.a), rec(x.b)
            if x.op in ("max", "min"):
                return f"tl.{'maximum' if x.op == 'max' else 'minimum'}({a}, {b})"
            return f"({a} {x.op} {b})"
        if isinstance(x, te.Compare):
            return f"({rec(x.a)} {x.op} {rec(x.b)})"
        if isinstance(x, te.Where):
            return f"tl.where({rec(x.cond)}, {rec(x.a)}, {rec(x.b)})"
        if isinstance(x, te.Cast):
            return f"{rec(x.a)}.to({TL_DTYPE[self.compute_dtype(x.to)]})"
        if isinstance(x, te.Unary) and x.fn == "tanh":
            return self._tanh(x, rec(x.a))
        if isinstance(x, te.Unary):
            return _unary(x, rec(x.a), self.compute_dtype(x.dtype))
        raise UnsupportedError(f"codegen: expression node {type(x).__name__} ({x!r}) has no Triton lowering")

    def _tanh(self, x: te.Unary, a: str) -> str:
        """tanh accurate to a few float32 ulps relative at every magnitude. Its argument is bound to a name
        first (a line before the one being built): the formula reads it several times. Near 0 the odd
        Taylor series (``TANH_SERIES``; |x| < ``TANH_SERIES_BELOW``, where its truncation is below 1e-7
        relative), else (1 - e) / (1 + e) with e = exp(-2|x|), which cancels little there and never
        overflows. 2 sigmoid(2x) - 1 lost all relative accuracy near 0 (1e-3 at x = 1e-5)."""
        f32 = x.a.dtype != "float32"
        v = self._bind("x", f"{a}.to(tl.float32)" if f32 else a)
        s = self._bind("s", f"tl.minimum(tl.maximum({v}, {-TANH_SERIES_BELOW!r}), {TANH_SERIES_BELOW!r})")
        s2 = self._bind("s2", f"{s} * {s}")
        poly = repr(TANH_SERIES[-1])
        for coef in reversed(TANH_SERIES[:-1]):
            poly = f"({coef!r} + {s2} * {poly})"
        e = f"tl.exp(-2.0 * tl.abs({v}))"
        far = f"((1.0 - {e}) / (1.0 + {e}))"
        body = (f"tl.where(tl.abs({v}) < {TANH_SERIES_BELOW!r}, {s} + {s} * {s2} * {poly}, "
                f"tl.where({v} < 0.0, -{far}, {far}))")
        result = self.compute_dtype(x.dtype)
        return f"{body}.to({TL_DTYPE[result]})" if f32 and result != "float32" else body

    def _bind(self, what: str, expr: str) -> str:
        """``expr`` assigned to a fresh generated name (``tile_`` prefix: reserved) on a line of its own."""
        self.bound += 1
        name = f"tile_tanh{self.bound}_{what}"
        self.w.line(f"{name} = {expr}")
        return name

    def size(self, e: te.Expr) -> str:
        def rec(x: te.Expr) -> str:
            return self.scalar(x, rec)
        return rec(e)

    def compute_dtype(self, dtype: str) -> str:
        """The dtype values of ``dtype`` are computed in: bf16 is widened to fp32 in the interpreter."""
        return "float32" if self.k.interpreter and dtype == "bfloat16" else dtype

    def widen(self, v: str, dtype: str) -> str:
        # NOTE: Triton 3.6's interpreter has no working bf16 arithmetic (garbage sums, missing
        # get_bf16); widening to fp32 is exact, and the store rounds once. CPU only.
        return f"{v}.to(tl.float32)" if self.compute_dtype(dtype) != dtype else v

    def in_range(self, idx: te.Expr, dim: te.Expr) -> bool:
        """Whether ``0 <= idx < dim`` holds for every axis value, from compile-time sizes alone.

        Dropping such checks matters beyond the arithmetic: a mask that varies along the
        contiguous dim (a conv's channel check) stops Triton from vectorising the load.
        """
        env = self.k.static
        if not te.free_vars(dim) <= set(env):
            return False

        def bounds(x: te.Expr) -> tuple[int, int] | None:
            if isinstance(x, te.Const) and isinstance(x.value, int):
                return x.value, x.value
            if isinstance(x, te.Var):
                return (env[x.name], env[x.name]) if x.name in env else None
            if isinstance(x, te.IterVar):
                ext = self.k.extents.get(x.name)
                if ext is None or not te.free_vars(ext) <= set(env):
                    return None
                return 0, int(te.evaluate(ext, env)) - 1
            if isinstance(x, te.BinOp) and x.op in ("+", "-", "*", "//"):
                a, b = bounds(x.a), bounds(x.b)
                if a is None or b is None:
                    return None
                if x.op == "//":
                    return (a[0] // b[0], a[1] // b[0]) if b[0] == b[1] > 0 and a[0] >= 0 else None
                if x.op == "+":
                    return a[0] + b[0], a[1] + b[1]
                if x.op == "-":
                    return a[0] - b[1], a[1] - b[0]
                prods = [p * q for p in a for q in b]
                return min(prods), max(prods)
            return None
        b = bounds(idx)
        return b is not None and b[0] >= 0 and b[1] < int(te.evaluate(dim, env))

    def value(self, e: te.Expr, tile: tuple[str, str], ksfx: str, replace: dict[str, str]) -> str:
        """A value expression; loads of tensors in ``replace`` become those names (acc, tile_a, ...)."""
        def rec(x: te.Expr) -> str:
            if isinstance(x, te.Load):
                if x.tensor.name in replace:
                    return self.widen(replace[x.tensor.name], x.tensor.dtype)
                ptr, mask = self.address(x, tile, ksfx)
                return self.widen(f"tl.load({ptr}, mask={mask}, other=0.0)", x.tensor.dtype)
            if isinstance(x, (te.IterVar,)):
                return self.index(x, tile, ksfx)
            return self.scalar(x, rec)
        return rec(e)

    def tile_dims(self, idx: te.Expr, tile: tuple[str, str], ksfx: str) -> tuple[int, ...]:
        """Which dims of the 2-D tile ``idx`` varies along (none: a scalar per program or per chunk)."""
        dims = set()
        for v in te.free_vars(idx):
            d = self.kind.get(v)
            if d in tile and v + (ksfx if d == "k" else "") not in self.chunk_scalars:
                dims.add(tile.index(d))
        return tuple(sorted(dims))

    def address(self, ld: te.Load, tile: tuple[str, str], ksfx: str) -> tuple[str, str]:
        """Pointer expression and mask of a 2-D tile of ``ld``; out-of-range indices read 0.

        Terms are summed (and masks and-ed) scalars first, then one tile dim, then the other: Python
        evaluates left to right, so a per-row term joined before a per-column one costs one op per row
        rather than one per element. Except on B tiles narrower than 128 columns, which keep the
        tensor's dim order: on the H100's conv layers that order was 6-12% faster with 64-wide B
        tiles, and the joined-first order 9-11% faster with 256-wide ones (same configs, one run).
        """
        t = ld.tensor
        unit = self.k.unit_stride.get(t.name)
        terms: list[tuple[tuple[int, ...], str]] = []
        masks: list[tuple[tuple[int, ...], str]] = []
        dims_seen: set[str] = set()
        for d, idx in enumerate(ld.indices):
            txt = self.index(idx, tile, ksfx)
            where = self.tile_dims(idx, tile, ksfx)
            terms.append((where, txt if d == unit else f"{txt} * stride_{t.name}_{d}"))
            kinds = {self.kind[v] for v in te.free_vars(idx) if v in self.kind}
            dims_seen |= kinds
            plain = isinstance(idx, te.IterVar) and idx.extent == t.shape[d]
            if not plain and not self.in_range(idx, t.shape[d]):
                dim = self.size(t.shape[d])
                masks.append((where, f"({txt} >= 0) & ({txt} < {dim})"))
        for pos, kind in enumerate(tile):
            if kind not in dims_seen:
                continue
            name = f"mask_{kind}{ksfx if kind == 'k' else ''}"
            masks.append(((), name) if name in self.chunk_scalars
                         else ((pos,), name + ("[:, None]" if pos == 0 else "[None, :]")))

        dim_order = tile == ("k", "n") and self.k.constexprs.get("BLOCK_N", 0) < 128

        def order(x: tuple[tuple[int, ...], str]) -> tuple[int, tuple[int, ...]]:
            if dim_order:  # stable sort: the tile's masks first, the rest as built
                return (0, ()) if x[1].startswith("mask_") else (1, ())
            return len(x[0]), x[0]
        ptr = " + ".join([t.name] + [txt for _, txt in sorted(terms, key=order)])
        mask = " & ".join(txt for _, txt in sorted(masks, key=order))
        return ptr, mask or "None"


def _unary(x: te.Unary, a: str, result_dtype: str) -> str:
    f32 = x.a.dtype != "float32" and x.fn not in ("neg", "abs", "relu")
    v = f"{a}.to(tl.float32)" if f32 else a
    body = {"exp": f"tl.exp({v})", "log": f"tl.log({v})", "sqrt": f"tl.sqrt({v})", "abs": f"tl.abs({v})",
            "neg": f"(-{v})", "relu": f"tl.maximum({v}, 0.0)", "sigmoid": f"tl.sigmoid({v})",
            "gelu": f"(0.5 * {v} * (1.0 + tl.erf({v} * 0.7071067811865476)))",
            "silu": f"({v} * tl.sigmoid({v}))"}[x.fn]
    return f"{body}.to({TL_DTYPE[result_dtype]})" if f32 and result_dtype != "float32" else body


# ------------------------------------------------------------------------------------ emitters
EMITTERS: dict[type, Callable[[Node, Ctx], None]] = {}


def emitter(cls: type) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def reg(fn: Callable[..., None]) -> Callable[..., None]:
        EMITTERS[cls] = fn
        return fn
    return reg


def emit(n: Node, c: Ctx) -> None:
    fn = EMITTERS.get(type(n))
    if fn is None:
        raise UnsupportedError(f"codegen: no emitter for loop-IR node {type(n).__name__}")
    fn(n, c)


def _m_box(k: Kernel) -> tuple[tuple[str, str, str], ...]:
    """(axis, extent parameter, box extent) per M axis when the M tile is a box of them, else ()."""
    ti = next((n for n, _ in find(k.body, lambda x: isinstance(x, TileIndices) and x.dim == "m")), None)
    assert ti is None or isinstance(ti, TileIndices)
    return tuple((a, e, b) for (a, e), b in zip(ti.axes, ti.box)) if ti is not None and ti.box else ()


def _tile_counts(c: Ctx) -> None:
    t = c.k.totals
    box = _m_box(c.k)
    if box:
        counts = [f"tl.cdiv({e}, {b})" if b != "1" else e for _, e, b in box]
        c.w.line(f"num_pid_m = {' * '.join(counts)}  # boxes of output positions")
    elif c.k.wave_role:
        c.w.line(f"num_pid_m = tile_hi - tile_lo  # this launch's rows of tiles (wave tail: {c.k.wave_role})")
    else:
        c.w.line(f"num_pid_m = tl.cdiv({t['m']}, BLOCK_M)")
    c.w.line(f"num_pid_n = tl.cdiv({t['n']}, BLOCK_N)")
    c.w.line("num_pid_in_group = GROUP_M * num_pid_n")


def _grouped(c: Ctx) -> None:
    """pid_m, pid_n of the linear tile ``pid``: GROUP_M rows of tiles run together (L2 reuse of B)."""
    first = "tile_lo + first_pid_m" if c.k.wave_role else "first_pid_m"
    for line in ("group_id = pid // num_pid_in_group", "first_pid_m = group_id * GROUP_M",
                 "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
                 f"pid_m = {first} + (pid % num_pid_in_group) % group_size_m",
                 "pid_n = (pid % num_pid_in_group) // group_size_m"):
        c.w.line(line)


@emitter(ProgramIds)
def _pids(n: ProgramIds, c: Ctx) -> None:
    w = c.w
    if n.tile_var is None:
        w.line("# program ids; GROUP_M rows of tiles run together so their B columns stay in L2")
        w.line("pid = tl.program_id(0)")
        _tile_counts(c)
        _grouped(c)
        if n.batched:
            w.line("pid_b = tl.program_id(1)")
        return
    w.line(f"# output tile {n.tile_var} -> {'pid_b, ' if n.batched else ''}pid_m, pid_n (grouped by GROUP_M rows for L2)")
    if n.batched:
        w.line(f"pid_b = {n.tile_var} // num_pid_mn")
        w.line(f"pid = {n.tile_var} % num_pid_mn")
    else:
        w.line(f"pid = {n.tile_var}")
    _grouped(c)


@emitter(TileCount)
def _tile_count(n: TileCount, c: Ctx) -> None:
    c.w.line("# persistent: tl.num_programs(0) programs (as many as fit on the GPU at once) share the output tiles")
    _tile_counts(c)
    if c.k.axes["b"]:  # ProgramIds splits tile_id by num_pid_mn whenever there are batch axes, even of extent 1
        c.w.line("num_pid_mn = num_pid_m * num_pid_n")
        c.w.line(f"num_tiles = num_pid_mn * {n.batch_total}" if n.batch_total != "1" else "num_tiles = num_pid_mn")
    else:
        c.w.line("num_tiles = num_pid_m * num_pid_n")


def _decompose(c: Ctx, flat: str, axes: tuple[tuple[str, str], ...], sfx: str = "") -> None:
    """Split a fused index into its axes, innermost fastest (div/mod by the inner extents)."""
    if len(axes) == 1:
        c.w.line(f"{axes[0][0]}{sfx} = {flat}")
        return
    inner = ""
    for i, (name, ext) in enumerate(reversed(axes)):
        base = f"({flat} // ({inner}))" if inner else flat
        c.w.line(f"{name}{sfx} = {base} % {ext}" if i < len(axes) - 1 else f"{name}{sfx} = {base}")
        inner = f"{inner} * {ext}" if inner else ext


@emitter(BatchIndices)
def _batch(n: BatchIndices, c: Ctx) -> None:
    c.w.line(f"# batch axes {', '.join(a for a, _ in n.axes)}")
    _decompose(c, "pid_b", n.axes)


@emitter(TileIndices)
def _tile(n: TileIndices, c: Ctx) -> None:
    blk = "BLOCK_M" if n.dim == "m" else "BLOCK_N"
    c.w.line(f"# output {'rows' if n.dim == 'm' else 'columns'}: {', '.join(a for a, _ in n.axes) or '(none)'}")
    if n.box:
        _box_tile(n, c)
        return
    inner = _run_extent(c.k, n.axes, blk)
    if inner is not None:  # e.g. a conv weight gradient's (kh, kw, c) columns
        _in_one_run(c, "tile", f"pid_{n.dim} * {blk}", f"tile_start_{n.dim}", f"tile_tap_{n.dim}", f"mask_{n.dim}",
                    n.axes, inner, blk, n.total, "")
        return
    c.w.line(f"offs_{n.dim} = pid_{n.dim} * {blk} + tl.arange(0, {blk})")
    c.w.line(f"mask_{n.dim} = offs_{n.dim} < {n.total}")
    if n.axes:
        _decompose(c, f"offs_{n.dim}", n.axes)


def _box_tile(n: TileIndices, c: Ctx) -> None:
    """The M tile as a box (``TileIndices.box``): pid_m counts boxes, innermost axis fastest; an axis of
    one entry per box is a scalar per program, the innermost a vector over the box's BLOCK_M rows."""
    c.w.line("# rewrite (SelectAsyncCopy): the tile is a " + " x ".join(b for b in n.box) + " box of "
             + ", ".join(a for a, _ in n.axes) + ", so each of its A tiles is one TMA copy of a window of the input")
    inner = ""
    vectors = [a for (a, _), b in zip(n.axes, n.box) if b != "1"]
    for i, ((a, ext), b) in enumerate(reversed(list(zip(n.axes, n.box)))):
        count = f"tl.cdiv({ext}, {b})" if b != "1" else ext
        base = f"(pid_m // ({inner}))" if inner else "pid_m"
        t = f"{base} % {count}" if i < len(n.axes) - 1 else base
        if b == "1":
            c.w.line(f"{a} = {t}")
            c.chunk_scalars.add(a)
        else:
            c.w.line(f"tile_{a}_start = ({t}) * {b}")
            c.axis_starts[a] = f"tile_{a}_start"
        inner = f"{inner} * {count}" if inner else count
    for a in vectors:
        c.w.line(f"{a} = tile_{a}_start + tl.arange(0, BLOCK_M)")
    extent = dict(n.axes)
    c.w.line("mask_m = " + " & ".join(f"({a} < {extent[a]})" for a in vectors))


@emitter(InitAcc)
def _acc(n: InitAcc, c: Ctx) -> None:
    c.w.line(f"{n.name} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")


def _kstart(at: KRef, c: Ctx) -> str:
    parts = ["k_base"] if "SPLIT_K" in c.k.constexprs else []
    if at.loop:
        parts.append(f"({at.loop} + {at.tile}) * BLOCK_K" if at.tile else f"{at.loop} * BLOCK_K")
    elif at.tile:
        parts.append(f"{at.tile} * BLOCK_K" if at.tile > 1 else "BLOCK_K")
    if isinstance(at.sub, str):
        parts.append(f"{at.sub} * SUB_K")
    elif at.sub:
        parts.append(f"{at.sub} * SUB_K" if at.sub > 1 else "SUB_K")
    return " + ".join(parts) or "0"


def _run_extent(k: Kernel, axes: tuple[tuple[str, str], ...], width: str) -> int | None:
    return run_extent(tuple(e for _, e in axes), k.constexprs.get(width))


def _in_one_run(c: Ctx, what: str, start: str, start_name: str, tap: str, mask: str, axes: tuple[tuple[str, str], ...],
                inner: int, width: str, total: str, sfx: str, size: int | None = None) -> None:
    """Indices of a block inside one run of its innermost axis (``_run_extent``): that axis a vector,
    the outer ones and the mask scalars of the block's start. ``size``: the run's real extent where
    ``inner`` pads it (``loop_ir.padded_run``): the mask is then a vector, the run masked past ``size``."""
    run = axes[-1][0]
    outer = ", ".join(a for a, _ in axes[:-1])
    if size is None:
        c.w.line(f"# {what} inside one run of {run} ({inner} is a multiple of {width}): "
                 f"{outer} and the mask are scalars per {what}")
    else:
        c.w.line(f"# rewrite (padded run): {what} inside one run of {run} padded from {size} to {inner}: "
                 f"{outer} are scalars per {what}, {run} past {size} is masked")
    c.w.line(f"{start_name} = {start}")
    if size is None:
        c.w.line(f"{mask} = {start_name} < {total}")
    c.w.line(f"{tap} = {start_name} // {inner}")
    if inner > c.k.constexprs[width]:
        # NOTE: not start % inner: Triton's alignment analysis gives a scalar remainder no divisibility,
        # and the loads would lose their 16-byte vectors; a difference keeps the start's.
        c.w.line(f"{start_name}_{run} = {start_name} - {tap} * {inner}")
        c.w.line(f"{run}{sfx} = {start_name}_{run} + tl.arange(0, {width})")
        c.axis_starts[run] = f"{start_name}_{run}"
    else:
        c.w.line(f"{run}{sfx} = tl.arange(0, {width})")
        c.axis_starts[run] = "0"
    if size is not None:
        c.w.line(f"{mask} = ({run}{sfx} < {size}) & ({start_name} < {total})")
    _decompose(c, tap, axes[:-1], sfx)
    c.chunk_scalars |= {a + sfx for a, _ in axes[:-1]} | ({mask} if size is None else set())


@emitter(KIndices)
def _kidx(n: KIndices, c: Ctx) -> None:
    k, sfx = c.k, n.suffix
    axes = tuple((a, k.axis_size[a]) for a in k.axes["k"])
    inner = _run_extent(k, axes, n.extent)
    padded = padded_run(tuple(e for _, e in axes), k.constexprs.get("BLOCK_K"))
    if padded is not None:
        size, extent = padded
        _in_one_run(c, "chunk", _kstart(n.at, c), f"k_start{sfx}", f"k_tap{sfx}", f"mask_k{sfx}", axes, extent,
                    n.extent, k.totals["k"], sfx, size)
        return
    if inner is None:
        c.w.line(f"offs_k{sfx} = {_kstart(n.at, c)} + tl.arange(0, {n.extent})")
        c.w.line(f"mask_k{sfx} = offs_k{sfx} < {k.totals['k']}")
        _decompose(c, f"offs_k{sfx}", axes, sfx)
        return
    _in_one_run(c, "chunk", _kstart(n.at, c), f"k_start{sfx}", f"k_tap{sfx}", f"mask_k{sfx}", axes, inner, n.extent,
                k.totals["k"], sfx)


_BLOCK_KIND = {"BLOCK_M": "m", "BLOCK_N": "n", "BLOCK_K": "k", "SUB_K": "k"}


def _desc_copy(c: Ctx, role: str, start: dict[str, str], tile: tuple[str, str], value: str = "", sfx: str = "") -> str:
    """A TMA copy through the launcher-built descriptor ``<role>_desc`` (``Descriptor``): a load of the
    2-D tile in ``tile``'s dim order, or (``value`` given) the statement storing that tile.

    The descriptor lists dims of one entry first (batch dims, a conv's window taps: the copy's block
    carries 1s the tile drops or gains) and the unit-stride dim last, so a tile whose unit-stride dim
    comes first (a transposed operand) is transposed in registers. A dim's coordinate is its index
    with each tile axis at the tile's start (``start``: by tile dim, or by axis for a box's axes and
    a run's innermost reduction axis).
    """
    d = c.k.descriptor(role)
    assert d is not None, role
    if role == "out":
        op = c.k.out.op
        assert isinstance(op, te.ComputeOp)
        idx: list[te.Expr] = list(op.axes)
    else:
        idx = list(c.k.operand(role).load.indices)
    axes = {a.name: a for e in idx for a in te.walk(e) if isinstance(a, te.IterVar) and a.name in c.kind}
    at: dict[te.Expr, te.Expr] = {ax: te.Var(start.get(name, start.get(c.kind[name], name))) for name, ax in axes.items()
                                  if name not in c.chunk_scalars and name + sfx not in c.chunk_scalars}
    coords = [c.index(idx[i] if b == "1" else te.substitute(idx[i], at), ("m", "n"), sfx)
              for i, b in zip(d.dims, d.block)]
    kinds = [_BLOCK_KIND[b] for b in d.block if b != "1"]
    order = tuple(x for j, x in enumerate(kinds) if j == 0 or kinds[j - 1] != x)
    if value:
        v = value if order == tile else f"tl.trans({value})"
        if d.reshaped:
            v = f"{v}.reshape({', '.join(d.block)})"
        return f"{d.param}.store([{', '.join(coords)}], {v})"
    load = f"{d.param}.load([{', '.join(coords)}])"
    if d.reshaped:
        shape = {"m": "BLOCK_M", "n": "BLOCK_N", "k": next(b for b in d.block if _BLOCK_KIND.get(b) == "k")}
        load = f"{load}.reshape({', '.join(shape[x] for x in order)})"
    return load if order == tile else f"tl.trans({load})"


@emitter(Copy)
def _copy(n: Copy, c: Ctx) -> None:
    o = c.k.operand(n.role)
    tile = ("m", "k") if n.role == "a" else ("k", "n")
    where = {"shared": "shared memory", "register": "registers", "global": "registers (plain load)"}[n.scope]
    size = f"{'BLOCK_M' if n.role == 'a' else n.extent} x {n.extent if n.role == 'a' else 'BLOCK_N'}"
    if n.realised_by_register:
        c.w.line(f"# {n.buffer}: {size} chunk of {o.tensor.name} in shared memory, async-copied "
                 f"({'TMA' if n.mechanism == 'tma' else 'cp.async'}) by the pipeliner; its register sub-tiles load it below")
        return
    note = f"; {n.note}" if n.note else ""
    if n.mechanism == "tma":
        c.w.line(f"# {n.buffer} -> {n.target}: {size} tile of {o.tensor.name} into {where}{note}; by TMA through "
                 f"{n.role}_desc, which the launcher builds")
        start = {"m": "pid_m * BLOCK_M", "n": "pid_n * BLOCK_N", "k": _kstart(n.at, c)} | c.axis_starts
        c.w.line(f"{n.target} = {_desc_copy(c, n.role, start, tile, sfx=n.suffix)}")
        return
    c.w.line(f"# {n.buffer} -> {n.target}: {size} tile of {o.tensor.name} into {where}{note}")
    ptr, mask = c.address(o.load, tile, n.suffix)
    c.w.line(f"{n.target} = tl.load({ptr}, mask={mask}, other=0.0)")


@emitter(Dot)
def _dot(n: Dot, c: Ctx) -> None:
    k = c.k
    args = []
    interp_bf16 = k.interpreter and k.dot_dtype == "bfloat16"
    for role, name in (("a", n.a), ("b", n.b)):
        o = k.operand(role)
        tile = ("m", "k") if role == "a" else ("k", "n")
        v = c.value(o.expr, tile, "", {o.tensor.name: name})  # bf16 arrives widened in the interpreter
        if o.expr.dtype != k.dot_dtype or o.expr != o.load:  # Triton may widen a prologue: tl.maximum(x16, 0.0) is fp32
            v = f"{v}.to({TL_DTYPE[c.compute_dtype(k.dot_dtype)]})"
        args.append(v)
    prec = ""
    if interp_bf16:
        c.w.line("# NOTE: Triton 3.6's interpreter miscomputes bf16 tl.dot; upcasting is exact (CPU only)")
    if k.dot_dtype == "float32" or interp_bf16:
        prec = f', input_precision="{"ieee" if interp_bf16 else k.fp32_precision}"'
    if n.note:
        c.w.line(f"# {n.note}")
    c.w.line(f"{n.acc} = tl.dot({args[0]}, {args[1]}, {n.acc}{prec})")


@emitter(Rotate)
def _rotate(n: Rotate, c: Ctx) -> None:
    c.w.line("# modulo wrap: rename the register buffers so the next chunk finds its sub-tiles in order")
    c.w.line(f"{', '.join(n.targets)} = {', '.join(n.sources)}")


@emitter(For)
def _for(n: For, c: Ctx) -> None:
    if n.note:
        c.w.line(f"# {n.note}")
    if n.kind == "range":
        step = f", {n.step}" if n.step != "1" else ""
        stages = f", num_stages={n.num_stages}" if n.num_stages is not None else ""
        flat = ", flatten=True" if n.flatten else ""
        c.w.line(f"for {n.var} in tl.range({n.start}, {n.extent}{step}{stages}{flat}):")
    elif n.kind == "static_range":
        c.w.line(f"for {n.var} in tl.static_range(0, {n.extent}):")
    else:
        raise CodegenError(f"loop {n.var!r} is still 'serial': a rewrite pass must decide range or static_range")
    with c.w.indent():
        for s in n.body:
            emit(s, c)


@emitter(KSplit)
def _ksplit(n: KSplit, c: Ctx) -> None:
    w = c.w
    w.line("# split-K: program_id(2) reduces one contiguous slice of the reduction chunks (the last slice may be")
    w.line("# short or empty); the tile's partial sums meet after the loop")
    w.line("pid_s = tl.program_id(2)")
    w.line(f"k_chunks_all = tl.cdiv({n.total}, BLOCK_K)")
    w.line("k_chunks_per_split = tl.cdiv(k_chunks_all, SPLIT_K)")
    w.line("k_base = pid_s * k_chunks_per_split * BLOCK_K")
    w.line("k_chunks = tl.minimum(k_chunks_per_split, k_chunks_all - pid_s * k_chunks_per_split)")


@emitter(SplitReduce)
def _split_reduce(n: SplitReduce, c: Ctx) -> None:
    w = c.w
    w.line("# split-K: the partial tile goes to the float32 workspace (slice-major); the last program of this tile")
    w.line("# to arrive adds the partials in a fixed order, so the sum does not depend on arrival order")
    w.line("tile_lin = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)")
    w.line("ws_tile = split_ws + tile_lin * (BLOCK_M * BLOCK_N) + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + "
           "tl.arange(0, BLOCK_N)[None, :]")
    w.line("ws_stride = tl.num_programs(0) * tl.num_programs(1) * (BLOCK_M * BLOCK_N)")
    w.line("tl.store(ws_tile + pid_s * ws_stride, acc)")
    w.line("# every thread's partial is written before the arrival is counted (release); the last arrival")
    w.line("# acquires them, reading through L2 (.cg) where the other programs' partials are")
    w.line("tl.debug_barrier()")
    groups = split_groups(c.k.constexprs["SPLIT_K"])
    if groups == 1:
        _last_adds(c, n, "SPLIT_K", "1")
        return
    # One program adding 64 partials makes 63 round trips through L2 after the main loop, which every
    # other program of the tile has left: on a conv weight gradient's 9 tiles x 64 slices that tail
    # took 40% of the kernel (docs/decisions.md#d11). In two levels it is 7 + 7.
    w.line(f"# rewrite (split-K in two levels): the last of each group of {SPLIT_GROUP} slices to arrive adds the "
           "group's partials in")
    w.line(f"# slice order into the group's first slot; the last group to finish adds the {groups} group sums "
           "in group order")
    w.line("n_tiles = tl.num_programs(0) * tl.num_programs(1)")
    w.line(f"split_g = pid_s // {SPLIT_GROUP}")
    w.line(f"split_g_first = split_g * {SPLIT_GROUP}")
    w.line(f"split_g_n = tl.minimum({SPLIT_GROUP}, SPLIT_K - split_g_first)")
    w.line(f'arrived = tl.atomic_add(split_locks + n_tiles + tile_lin * {groups} + split_g, 1, sem="acq_rel")')
    w.line("if arrived == split_g_n - 1:")
    with w.indent():
        w.line('acc = tl.load(ws_tile + split_g_first * ws_stride, cache_modifier=".cg")')
        w.line(f"for split_s in tl.static_range(1, {SPLIT_GROUP}):")
        with w.indent():
            w.line("if split_s < split_g_n:")
            with w.indent():
                w.line('acc += tl.load(ws_tile + (split_g_first + split_s) * ws_stride, cache_modifier=".cg")')
        w.line(f"tl.store(split_locks + n_tiles + tile_lin * {groups} + split_g, 0)")
        w.line("tl.store(ws_tile + split_g_first * ws_stride, acc)")
        w.line("tl.debug_barrier()")
        _last_adds(c, n, str(groups), str(SPLIT_GROUP))


def _last_adds(c: Ctx, n: SplitReduce, count: str, step: str) -> None:
    """The tile's last arrival of ``count``: it adds the sums at slots 0, step, 2 * step... in that order,
    resets the tile's counter and runs the epilogue."""
    w = c.w
    slot = "split_s * ws_stride" if step == "1" else f"split_s * {step} * ws_stride"
    w.line('arrived = tl.atomic_add(split_locks + tile_lin, 1, sem="acq_rel")')
    w.line(f"if arrived == {count} - 1:")
    with w.indent():
        w.line('acc = tl.load(ws_tile, cache_modifier=".cg")')
        w.line(f"for split_s in tl.static_range(1, {count}):")
        with w.indent():
            w.line(f'acc += tl.load(ws_tile + {slot}, cache_modifier=".cg")')
        w.line("tl.store(split_locks + tile_lin, 0)  # counters start at zero again for the next launch")
        for s in n.body:
            emit(s, c)


@emitter(Store)
def _store(n: Store, c: Ctx) -> None:
    k = c.k
    out = k.out
    val = c.value(n.expr, ("m", "n"), "", {k.reduction.name: "acc"})
    c.w.line(f"# epilogue, fused into the store: {out.name} = {n.expr!r}".replace(f"{k.reduction.name}[", "acc["))
    c.w.line(f"out = {val}")
    if not isinstance(out.op, te.ComputeOp):
        raise CodegenError(f"output {out.name!r} is a placeholder: it has no index to store at")
    if k.descriptor("out") is not None:
        c.w.line("# stored by TMA (its descriptor clips the tile at the tensor's edges: no mask)")
        start = {"m": "pid_m * BLOCK_M", "n": "pid_n * BLOCK_N"}
        c.w.line(_desc_copy(c, "out", start, ("m", "n"), f"out.to({out.name}.dtype.element_ty)"))
        return
    ptr, mask = c.address(te.Load(out, out.op.axes), ("m", "n"), "")
    c.w.line(f"tl.store({ptr}, out.to({out.name}.dtype.element_ty), mask={mask})")


# ------------------------------------------------------------------------------------ kernel
def signature(k: Kernel) -> list[str]:
    """Kernel parameters: tensors, TMA descriptors, sizes, strides (unit strides are specialised away),
    constexprs."""
    params = [t.name for t in k.inputs] + [k.out.name] + [d.param for d in k.descriptors]
    params += list(SPLIT_ARGS if "SPLIT_K" in k.constexprs else ())
    params += [n for n, _ in k.sizes]
    for t in list(k.inputs) + [k.out]:
        params += [f"stride_{t.name}_{d}" for d in range(t.ndim) if d != k.unit_stride.get(t.name)]
    return params + (["tile_lo", "tile_hi"] if k.wave_role else [])


def check_names(k: Kernel) -> None:
    names = [t.name for t in k.inputs] + [k.out.name] + [n for n, _ in k.sizes] + [a for axs in k.axes.values() for a in axs]
    ksub = re.compile("|".join(rf"{re.escape(a)}_p?\d+" for a in k.axes["k"]) or "(?!)")  # k_0, k_p1: sub-tile indices
    for nm in names:
        if reserved_reason(nm) or ksub.fullmatch(nm):
            raise ScheduleError(f"name {nm!r} is reserved in generated kernels; rename the tensor, var or axis")
    dup = {x for x in names if names.count(x) > 1}
    if dup:
        raise ScheduleError(f"names {sorted(dup)} are used for more than one tensor/var/axis; make them unique")


def generate(k: Kernel, header: str) -> str:
    """The module text: header docstring, imports, and the @triton.jit kernel."""
    check_names(k)
    w = CodeWriter()
    # A backslash in the header would start an escape inside the docstring: double it first.
    w.line('"""' + header.strip().replace("\\", "\\\\").replace('"""', "'''"))
    w.line('"""')
    w.line("import triton")
    w.line("import triton.language as tl")
    if k.dependent_launch:
        w.line("from triton.language.extra.cuda import gdc_wait" + (", gdc_launch_dependents" if k.wave_role == "head" else ""))
    w.line()
    w.line()
    w.line("@triton.jit")
    consts = ", ".join(f"{c}: tl.constexpr" for c in k.constexprs)
    w.line(f"def {k.name}({', '.join(signature(k))}, {consts}):")
    c = Ctx(k, w)
    with w.indent():
        if k.dependent_launch and k.wave_role == "tail":
            w.line("# wave tail: this launch starts once every program of the head launch has waited for the kernel")
            w.line("# before both, so its inputs are ready: no wait here (it waits for the head at its end)")
        elif k.dependent_launch:
            w.line("# programmatic dependent launch: this program may start while the kernel before it on the stream")
            w.line("# still runs; it waits here for that kernel to finish, before its first memory access")
            w.line("gdc_wait()")
        if k.dependent_launch and k.wave_role == "head":
            w.line("# wave tail: the tail launch may start now; its programs take the SMs this launch's last wave frees")
            w.line("gdc_launch_dependents()")
        if k.multiple_of:
            w.line("# alignment known at launch (Triton itself only specialises multiples of 16), stated as x // d * d")
            w.line("# (tl.multiple_of does not reach scalar arguments): masked loads and strided rows then use")
            w.line("# 16-byte vectors and cp.async instead of 2-byte loads")
            params = set(signature(k))
            for name, d in k.multiple_of.items():
                if name not in params or not isinstance(d, int) or d < 2 or d & (d - 1):
                    raise CodegenError(f"multiple_of hint {name}={d!r}: must name a runtime size or stride parameter "
                                       f"of {k.name} and be a power of two >= 2")
                w.line(f"{name} = {name} // {d} * {d}")
        for n in k.body:
            emit(n, c)
        if k.dependent_launch and k.wave_role == "tail":
            w.line("# wave tail: complete only after the head launch, so that the kernel after this one, which")
            w.line("# waits for this launch alone, also finds the head's tiles written. One program waits (the")
            w.line("# last placed): the others leave at once, freeing their SM for the tail's other tiles")
            w.line("if tl.program_id(0) == tl.num_programs(0) - 1:")
            with w.indent():
                w.line("gdc_wait()")
    src = w.text()
    try:
        compile(src, f"<{k.name}>", "exec")
    except SyntaxError as e:  # pragma: no cover - a bug in an emitter
        lines = src.splitlines()
        raise CodegenError(f"generated source does not parse at line {e.lineno}: {lines[(e.lineno or 1) - 1]!r}; "
                           "please report") from e
    return src
