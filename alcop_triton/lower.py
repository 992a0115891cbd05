"""Lowering: (tensor expression, schedule) -> loop-nest IR (``loop_ir.Kernel``), before pipelining.

The kernel class is a tiled contraction: the output's axes split into batch (B), rows (M) and
columns (N); the reduction axes fuse into K. The reduction body must be a product of two operand
factors (each an elementwise function of one input load: the prologue), which becomes ``tl.dot``;
whatever the output applies to the reduction result is the epilogue, fused into the store.
"""

from __future__ import annotations

from . import te
from .errors import ScheduleError, UnsupportedError
from .loop_ir import (BatchIndices, Copy, Dot, For, InitAcc, Kernel, KIndices, KRef, KSplit, Node, Operand,
                      ProgramIds, SplitReduce, Store, TileCount, TileIndices, padded_run)
from .schedule import Buffer, CacheRead, Pipeline, Schedule, Tile, Unroll


def _inline(e: te.Expr, keep: te.Tensor | None) -> te.Expr:
    """Replace loads of compute tensors (other than ``keep``) by their bodies, recursively."""
    def rec(x: te.Expr) -> te.Expr:
        if isinstance(x, te.Load):
            idx = tuple(rec(i) for i in x.indices)
            t = x.tensor
            if isinstance(t.op, te.ComputeOp) and t is not keep:
                if isinstance(t.op.body, te.Reduce):
                    raise UnsupportedError(f"tensor {t.name!r} is a reduction read inside another expression; "
                                           "one kernel holds one reduction")
                body = te.substitute(t.op.body, dict(zip(t.op.axes, idx)))
                body = rec(body)
                return body if body.dtype == t.dtype else te.Cast(t.dtype, body)
            return te.Load(t, idx)
        kids = x.children()
        if not kids:
            return x
        return te.substitute(x, {c: rec(c) for c in kids if rec(c) is not c})
    return rec(e)


def _factors(body: te.Expr) -> tuple[te.Expr, te.Expr]:
    e = body
    while isinstance(e, te.Cast):  # sum((a * b).astype(f32)): tl.dot accumulates in fp32 anyway
        e = e.a
    if not (isinstance(e, te.BinOp) and e.op == "*"):
        raise UnsupportedError(f"reduction body {body!r} is not a product of two operands; alcop lowers "
                               "contractions (sum over k of f(A[...]) * g(B[...])) to tl.dot")
    return e.a, e.b


def _placeholder_load(factor: te.Expr) -> te.Load:
    lds = te.loads(factor)
    tensors = {ld.tensor.name for ld in lds}
    if len(lds) != 1 or len(tensors) != 1:
        raise UnsupportedError(f"operand {factor!r} must read exactly one input once (it reads {sorted(tensors)})")
    return lds[0]


def lower(s: Schedule, inputs: tuple[te.Tensor, ...], unit_stride: dict[str, int | None] | None = None,
          fp32_precision: str = "tf32", static: dict[str, int] | None = None,
          multiple_of: dict[str, int] | None = None) -> Kernel:
    """Build the loop nest for ``s``; ``inputs`` fixes the kernel's argument order.

    ``static`` size variables are compile-time constants of this kernel (e.g. a convolution's
    channels and window): index math by constants lets Triton prove contiguity and vectorise.
    ``multiple_of`` names runtime sizes and strides (``stride_<tensor>_<dim>``) known to be multiples
    of a value; the kernel states it (``x // d * d``) so masked loads still vectorise.
    """
    static = dict(static or {})
    out, red = s.out, s.reduction
    # A reduction is a compute whose body is a te.Reduce (Schedule's definition): the isinstance checks narrow.
    if red is None or not isinstance(red.op, te.ComputeOp) or not isinstance(red.op.body, te.Reduce):
        raise UnsupportedError(f"{out.name!r} has no te.sum: alcop kernels are reductions with a load-and-use loop")
    if not isinstance(out.op, te.ComputeOp):
        raise ScheduleError(f"{out.name!r} is a placeholder, not a computed tensor")
    steps, _ = s.canonical_steps()
    for t in inputs:
        if not t.is_placeholder:
            raise ScheduleError(f"build: argument {t.name!r} is computed; pass only inputs (placeholders) before the output")
    reads = {t.name for t in s.tensors.values() if t.is_placeholder}
    missing = reads - {t.name for t in inputs}
    if missing:
        raise ScheduleError(f"build: the kernel reads {sorted(missing)} but they are not in the argument list")

    # Epilogue: the output's body in terms of the reduction value, every other compute inlined.
    out_axes = out.op.axes
    epilogue = _inline(out.op.body, keep=red) if out is not red else te.Load(red, out_axes)
    for ld in te.loads(epilogue):
        if ld.tensor is red and ld.indices != out_axes:
            raise UnsupportedError(f"epilogue reads {red.name}{list(ld.indices)}; it must read {red.name} at the "
                                   f"output's own index {list(out_axes)}")
    if tuple(red.shape) != tuple(out.shape) and out is not red:
        raise UnsupportedError(f"reduction {red.name!r} and output {out.name!r} have different shapes")

    # Reduction body on the output's axes, prologue computes inlined (fused at the use).
    rbody = red.op.body
    product = te.substitute(rbody.body, dict(zip(red.op.axes, out_axes)))
    f1, f2 = _factors(product)
    prologue_of = {}
    factors = []
    for f in (f1, f2):
        raw = [ld.tensor for ld in te.loads(f) if not ld.tensor.is_placeholder]
        inl = _inline(f, keep=None)
        factors.append(inl)
        prologue_of[id(inl)] = raw[0].name if raw else None

    # Axis roles.
    tile: Tile = s.last(Tile) or Tile(64, 64, 32, 32)
    names = [a.name for a in out_axes]
    n_axes = tile.n_axes if tile.n_axes is not None else tuple(names[-1:]) if len(names) >= 2 else ()
    m_axes = tile.m_axes if tile.m_axes is not None else tuple(n for n in names[-2:-1] if n not in n_axes) \
        if len(names) >= 2 else tuple(names)
    b_axes = tuple(n for n in names if n not in m_axes and n not in n_axes)
    k_axes = tuple(a.name for a in rbody.axes)
    if not m_axes:
        raise ScheduleError(f"tile: no output axis is mapped to M (axes {names}); give m_axes")
    kind = {**{a: "b" for a in b_axes}, **{a: "m" for a in m_axes}, **{a: "n" for a in n_axes},
            **{a: "k" for a in k_axes}}
    extents = {a.name: a.extent for a in out_axes} | {a.name: a.extent for a in rbody.axes}

    def dim_kind(e: te.Expr) -> str:
        used = {kind[v] for v in te.free_vars(e) if v in kind}
        return used.pop() if len(used) == 1 else ("" if used else "c")

    operands: list[Operand] = []
    for f in factors:
        ld = _placeholder_load(f)
        used = {kind[v] for i in ld.indices for v in te.free_vars(i) if v in kind}
        if "m" in used and "n" in used:
            raise UnsupportedError(f"operand {f!r} uses both row axes {m_axes} and column axes {n_axes}; "
                                   "a contraction operand follows rows or columns, not both")
        role = "b" if "n" in used or ("m" not in used and any(o.role == "a" for o in operands)) else "a"
        if any(o.role == role for o in operands):
            role = "b" if role == "a" else "a"
        unit = (unit_stride or {}).get(ld.tensor.name, ld.tensor.ndim - 1)
        operands.append(Operand(role, ld.tensor, ld, f, tuple(dim_kind(i) for i in ld.indices), unit,
                                prologue_from=prologue_of[id(f)]))
    operands.sort(key=lambda o: o.role)

    cfg = s.config()
    unrolled = s.last(Unroll) is not None
    bufs: dict[tuple[str, str], Buffer] = {}
    for st in steps:
        if isinstance(st, CacheRead):
            b = s.buffers[st.buffer]
            bufs[(b.tensor, b.scope)] = b
    depth = {st.buffer: st.stages for st in steps if isinstance(st, Pipeline)}

    # The reduction loop nest: chunks of BLOCK_K, each split into REG_SPLIT register sub-tiles.
    staged = {o.role: (bufs.get((o.tensor.name, "shared")) or _rewired(s, bufs, o),
                       bufs.get((o.tensor.name, "register"))) for o in operands}
    has_reg = any(r is not None for _, r in staged.values())
    if not has_reg and cfg.reg_split > 1:
        raise ScheduleError(f"tile(sub_k={cfg.sub_k}) splits the chunk for the register level, but no buffer is "
                            "cached into 'register'; cache_read a shared buffer into 'register' or drop sub_k")
    chunk, sub = KRef("k0", 0, 0), KRef("k0", 0, "ks")
    chunk_body: list = [] if has_reg else [KIndices(chunk, "BLOCK_K")]
    sub_body: list = [KIndices(sub, "SUB_K")]
    for o in operands:
        shared, reg = staged[o.role]
        here, at, ext = (sub_body, sub, "SUB_K") if has_reg else (chunk_body, chunk, "BLOCK_K")
        if shared is None:
            here.append(Copy(o.tensor.name, "global", o.role, f"tile_{o.role}", at, ext,
                             note="not staged: no cache_read, a plain load"))
        elif reg is None:
            here.append(Copy(shared.name, "shared", o.role, f"tile_{o.role}", at, ext, stages=depth.get(shared.name, 1)))
        else:
            chunk_body.append(Copy(shared.name, "shared", o.role, o.role, chunk, "BLOCK_K", realised_by_register=True,
                                   stages=depth.get(shared.name, 1)))
            sub_body.append(Copy(reg.name, "register", o.role, o.role, sub, "SUB_K", stages=depth.get(reg.name, 1)))
    if has_reg:
        chunk_body.append(For("ks", "REG_SPLIT", tuple(sub_body) + (Dot("a", "b"),), "serial", role="sub"))
    else:
        chunk_body.append(Dot("tile_a", "tile_b"))
    kloop = For("k0", "", tuple(chunk_body), "static_range" if unrolled else "serial",
                role="chunk", note="unrolled by schedule (unroll step)" if unrolled else "")

    # Size parameters: every size var the tensors use, then host-evaluated extents that are not plain vars.
    sizes: dict[str, te.Expr] = {}
    for t in list(inputs) + [out]:
        for d in t.shape:
            for v in sorted(te.free_vars(d)):
                if v not in static:
                    sizes.setdefault(v, te.Var(v))

    def size_name(expr: te.Expr, fallback: str) -> str:
        if isinstance(expr, te.Const):
            return str(expr.value)
        if te.free_vars(expr) <= set(static):
            return str(int(te.evaluate(expr, static)))
        if isinstance(expr, te.Var):
            sizes.setdefault(expr.name, expr)
            return expr.name
        sizes.setdefault(fallback, expr)
        return fallback

    axis_size = {a: size_name(e, f"{a}_size") for a, e in extents.items()}
    totals: dict[str, str] = {}
    for dim, axs in (("b", b_axes), ("m", m_axes), ("n", n_axes), ("k", k_axes)):
        if len(axs) == 1:
            totals[dim] = axis_size[axs[0]]
        elif not axs:
            totals[dim] = "1"
        else:
            prod: te.Expr = extents[axs[0]]
            for ax in axs[1:]:
                prod = te.binop("*", prod, extents[ax])
            totals[dim] = size_name(prod, f"size_{dim}")
    # Chunks inside one padded run of the innermost reduction axis (loop_ir.padded_run) count over the
    # padded extent: the loop's trip count and its last chunk's mask.
    run = padded_run(tuple(axis_size[a] for a in k_axes), cfg.block_k)
    if run is not None:
        size, padded = run
        totals["k"] = (str(int(totals["k"]) // size * padded) if totals["k"].isdigit()
                       else f"({totals['k']} // {size} * {padded})")
    if unrolled and not totals["k"].isdigit():
        raise ScheduleError(f"unroll: the reduction extent {totals['k']} is a runtime size; tl.static_range needs a "
                            "compile-time trip count. Give the reduce_axis a constant extent (or build with "
                            "static=(...) for its size variables), or drop the unroll step")
    # static_range needs a constexpr trip count: tl.cdiv returns a tensor, integer arithmetic on constexprs does not
    if unrolled and cfg.split_k > 1:
        raise ScheduleError(f"unroll with split_k({cfg.split_k}): a program's slice of the reduction is a runtime "
                            "count, which tl.static_range cannot unroll; drop one of the two steps")
    trips = f"({totals['k']} + BLOCK_K - 1) // BLOCK_K" if unrolled else f"tl.cdiv({totals['k']}, BLOCK_K)"
    # Split-K: the chunk loop runs this program's slice (k_chunks chunks from k_base), and the store waits
    # for the tile's other slices.
    split = cfg.split_k > 1
    kloop = kloop.__class__(**{**kloop.__dict__, "extent": "k_chunks" if split else trips})
    store: Node = SplitReduce((Store(epilogue),)) if split else Store(epilogue)

    tile_body: tuple[Node, ...] = ((BatchIndices(tuple((a, axis_size[a]) for a in b_axes), totals["b"]),)
                                   if b_axes else ()) + (
        TileIndices("m", tuple((a, axis_size[a]) for a in m_axes), totals["m"]),
        TileIndices("n", tuple((a, axis_size[a]) for a in n_axes), totals["n"]),
        InitAcc(), *((KSplit(totals["k"]),) if split else ()), kloop, store)
    if cfg.persistent:
        # Each program strides over all output tiles (batch included); the rewrite decides flattening.
        body: tuple[Node, ...] = (TileCount(totals["b"]), For(
            "tile_id", "num_tiles", (ProgramIds(bool(b_axes), "tile_id"),) + tile_body, "serial", role="tiles",
            start="tl.program_id(0)", step="tl.num_programs(0)"))
    else:
        body = (ProgramIds(bool(b_axes)),) + tile_body

    dtypes = {o.expr.dtype for o in operands}
    dot_dtype = dtypes.pop() if len(dtypes) == 1 else "float32"
    if dot_dtype not in ("float16", "bfloat16", "float32"):
        raise UnsupportedError(f"tl.dot operands of dtype {dot_dtype}: supported are float16, bfloat16, float32")
    us = dict(unit_stride or {})
    for t in list(inputs) + [out]:
        us.setdefault(t.name, t.ndim - 1)
    return Kernel(
        name=f"alcop_{out.name.lower()}", body=body, operands=tuple(operands), out=out, inputs=tuple(inputs),
        reduction=red, axes={"b": b_axes, "m": m_axes, "n": n_axes, "k": k_axes}, extents=extents,
        sizes=tuple(sizes.items()), axis_size=axis_size, totals=totals, unit_stride=us, static=static,
        multiple_of=dict(multiple_of or {}),
        constexprs={"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "SUB_K": cfg.sub_k,
                    "REG_SPLIT": cfg.reg_split, "GROUP_M": cfg.group_m} | ({"SPLIT_K": cfg.split_k} if split else {}),
        num_warps=cfg.num_warps, num_stages=1, dot_dtype=dot_dtype, fp32_precision=fp32_precision)


def _rewired(s: Schedule, bufs: dict[tuple[str, str], Buffer], o: Operand) -> Buffer | None:
    """Paper Fig. 5 case 2: a buffer cached from an inlined prologue compute reads the raw input.

    ``cache_read(A_scaled, 'shared')`` + inlining ``A_scaled`` would make the buffer the result of a
    compute (not an async copy, so not pipelinable). Instead the raw input is staged and the prologue
    is applied where the buffer is used; the buffer keeps its name, and ``explain`` reports the move.
    """
    if o.prologue_from is None:
        return None
    b = bufs.get((o.prologue_from, "shared"))
    if b is None:
        return None
    bufs[(o.tensor.name, "shared")] = b
    reg = bufs.get((o.prologue_from, "register"))
    if reg is not None:
        bufs[(o.tensor.name, "register")] = reg
    return b
