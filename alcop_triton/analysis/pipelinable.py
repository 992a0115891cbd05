"""Which staged buffers can be pipelined, and why not: ALCOP's three rules mapped onto Triton.

1. Produced by an asynchronous copy: a direct global load (pointer or tensor descriptor) of an input,
   with at least 4 contiguous bytes per thread (cp.async moves 4, 8 or 16 bytes; Triton leaves
   narrower loads synchronous), not a value computed before staging (prologue ops are fused at the use).
   A register buffer is produced by the shared buffer it reads (a multi-level chain).
2. Inside a sequential load-and-use loop: the pipelined loop is the innermost enclosing loop that is
   sequential (a runtime loop, not unrolled by ``static_range`` nor mapped to program ids) and whose
   variable does not index the buffer (it selects which tile is loaded, not where in the buffer).
3. Sync scope: buffers Triton synchronizes together (one loop's async-copy groups) share a stage
   count; the resolution is in ``plan.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..loop_ir import Copy, For, Kernel, Operand, find, run_extent


@dataclass(frozen=True)
class Candidate:
    """One staged buffer and the verdict of rules 1 and 2 on it."""
    buffer: str
    tensor: str
    scope: str                 # 'shared' or 'register'
    role: str                  # operand 'a' or 'b'
    requested: int             # stages asked for by the schedule
    loop: str | None           # the load-and-use loop it would be pipelined on
    feeds_from: str | None     # register level: the shared buffer it reads
    pipelinable: bool
    reasons: tuple[str, ...]   # why (not), in the words shown by explain()
    tma_ok: bool = False
    tma_reason: str = ""


def contiguous_bytes(k: Kernel, o: Operand) -> tuple[int, str]:
    """Bytes one thread can move contiguously for operand ``o``'s tile, and how that was decided.

    The unit-stride dim must be indexed by one tile axis plus an offset free of tile axes (e.g. a
    group's channel base). When that axis is fused with others into one tile dim (a conv's window
    and channels), it must be the innermost and its extent a compile-time constant: Triton proves
    contiguity through div/mod by constants only.
    """
    from .. import te
    elem = _ELEM[o.tensor.dtype]
    d = o.contiguous
    if d is None:
        return elem, f"{o.tensor.name} has no unit-stride dim, so each thread loads single {elem}-byte elements"
    idx = o.load.indices[d]
    kinds = {a: dim for dim, axs in k.axes.items() if dim != "b" for a in axs}
    ax = _unit_axis(idx, kinds)
    if ax is None:
        return elem, (f"{o.tensor.name}'s unit-stride dim {d} is indexed by {idx!r}, not by one tile axis plus an "
                      f"offset, so consecutive threads' addresses are not contiguous ({elem}-byte loads)")
    along = kinds[ax.name]
    extent = {"m": "BLOCK_M", "n": "BLOCK_N", "k": "SUB_K"}[along]
    tile = k.constexprs[extent]
    run = tile
    if len(k.axes[along]) > 1:
        if k.axes[along][-1] != ax.name:
            return elem, (f"{o.tensor.name} is contiguous along axis {ax.name}, which is not the innermost of the "
                          f"fused {along.upper()} axes {k.axes[along]} ({elem}-byte loads); reorder the reduction axes")
        ext = k.extents[ax.name]
        if not te.free_vars(ext) <= set(k.static):
            return elem, (f"{o.tensor.name} is contiguous along {ax.name}, but its extent {ext!r} is a runtime size: "
                          f"div/mod by it hides contiguity from Triton ({elem}-byte loads); build with "
                          f"static={tuple(sorted(te.free_vars(ext)))}")
        run = math.gcd(tile, int(te.evaluate(ext, k.static)))
    return min(16, run * elem), f"{o.tensor.name} is contiguous along {ax.name} ({along.upper()}, {run} elements per run)"


def _unit_axis(idx: Any, kinds: dict[str, str]) -> Any:
    """The tile axis ``v`` of an index ``v`` or ``offset + v`` (offset free of tile axes), else None."""
    from .. import te
    if isinstance(idx, te.IterVar) and idx.name in kinds:
        return idx
    if isinstance(idx, te.BinOp) and idx.op == "+":
        for v, rest in ((idx.a, idx.b), (idx.b, idx.a)):
            if isinstance(v, te.IterVar) and v.name in kinds and not te.free_vars(rest) & set(kinds):
                return v
    return None


_ELEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}


def tma_feasible(k: Kernel, o: Operand) -> tuple[bool, str]:
    """Whether a tensor descriptor can copy this operand's tiles (TMA's layout rules): a plain 2-D
    tile (plus batch dims), or a window of the tensor (``window_blocks``)."""
    ok, why = plain_tile(k, o)
    if ok:
        return ok, why
    blocks, why_not = window_blocks(k, o)
    if blocks is None:
        return False, f"{why}; nor is it a window of {o.tensor.name}: {why_not}"
    return True, ("tensor descriptor over a window of the input (TMA on sm90, zero-filled outside it: the "
                  "padding; pointer copies elsewhere): each copy a box of output positions")


def plain_tile(k: Kernel, o: Operand) -> tuple[bool, str]:
    """Whether the operand's tiles are a plain 2-D tile of its tensor (plus batch dims), and why (not)."""
    from .. import te
    want = ("m", "k") if o.role == "a" else ("k", "n")
    dims = [i for i, d in enumerate(o.dims) if d != "b"]
    kinds = tuple(o.dims[i] for i in dims)
    if len(dims) != 2 or sorted(kinds) != sorted(want):
        return False, (f"{o.tensor.name}'s index {list(o.load.indices)} is not one {want[0].upper()} and one "
                       f"{want[1].upper()} dim (plus batch dims); a tensor descriptor needs a plain 2-D tile")
    if not all(isinstance(o.load.indices[i], te.IterVar) for i in dims):
        return False, f"{o.tensor.name} is indexed by expressions {list(o.load.indices)}, not plain axes"
    for i in dims:
        ax = o.load.indices[i]
        assert isinstance(ax, te.IterVar)  # checked just above
        if len(k.axes[o.dims[i]]) != 1:
            return False, f"{o.dims[i].upper()} fuses axes {k.axes[o.dims[i]]}; a descriptor tile follows one axis"
        if o.dims[i] == "k" and ax.extent != o.tensor.shape[i]:
            return False, (f"reduction axis {ax!r} covers {ax.extent!r} of {o.tensor.name}'s dim {o.tensor.shape[i]!r}; "
                           "TMA would read past the reduction instead of zero-filling")
    if o.contiguous not in dims:
        return False, f"{o.tensor.name} has no unit-stride tile dim (TMA needs one contiguous dim)"
    # The descriptor lists the unit-stride dim last (TMA's rule); a transposed operand is loaded in
    # storage order and transposed in registers.
    return True, "tensor descriptor (TMA on sm90; pointer copies elsewhere)"


def box_blocks(m_axes: tuple[str, ...]) -> tuple[str, ...]:
    """The M tile as a box of its axes: ``BLOCK_M`` positions along the innermost (a run of one output
    row), one entry of each outer one. Boxes spanning rows (BH x BW, reshaped into the tile's rows)
    read the same data, but on the H100 (Triton 3.6) pipelined copies of them raced: outputs differed
    between runs of one kernel, normwise errors up to 1e-2 (``docs/decisions.md#d18``);
    a block that differs from the tile by unit dims only, as here and in batched GEMMs, was exact."""
    return ("1",) * (len(m_axes) - 1) + ("BLOCK_M",)


def window_blocks(k: Kernel, o: Operand) -> tuple[tuple[str, ...] | None, str]:
    """Per dim of A operand ``o``'s tensor, the extent one TMA copy of its tile takes along it, or None
    and why not. A dim is indexed by one vector axis of the tile (an M axis or the innermost reduction
    axis) plus an offset of scalars, taking that axis' block, or by scalars alone, taking one entry
    ("1"). Scalars are batch axes, reduction axes outer to a chunk that lies inside one run of the
    innermost (``loop_ir.run_extent``: a conv's window tap) and M axes outer to a box. So a
    convolution's input, read at (n, o * 1 + r - p, c), is a box at (n, o0 + r - p, c0) whose parts
    outside the tensor TMA fills with zeros (the padding). Needs stride 1 along each output axis, the
    channels innermost and static (``build(static=...)``)."""
    from .. import te
    if o.role != "a":
        # A weight tile at a window tap is a (co, c) box of a 4-D tensor, reshaped and transposed for the
        # dot: on the H100 (Triton 3.6) such tiles came out wrong even with 4 warps (normwise error 1.3e-3
        # to 3.7e-3, against 1.7e-5 from the 2-D weight matrix; docs/decisions.md#d19).
        return None, "only A tiles (a convolution's input) are copied as windows; B tiles by pointers"
    tile = "m"
    taxes, kaxes = k.axes[tile], k.axes["k"]
    if k.constexprs.get("REG_SPLIT", 1) > 1 or find(k.body, lambda x: isinstance(x, Copy) and x.scope == "register"):
        return None, "register sub-tiles are copied with pointers"
    if find(k.body, lambda x: isinstance(x, For) and x.role == "tiles"):
        return None, "a persistent kernel's tiles are runs of the fused M index, not boxes"
    run = run_extent(tuple(k.axis_size[a] for a in kaxes), k.constexprs.get("BLOCK_K"))
    if len(kaxes) > 1 and run is None:
        return None, (f"K fuses axes {kaxes} whose chunks do not lie inside one run of {kaxes[-1]!r} (its extent must be "
                      "a compile-time multiple of BLOCK_K)")
    box = dict(zip(taxes, box_blocks(taxes) if len(taxes) > 1 else ("BLOCK_M",)))
    vector = {a: b for a, b in box.items() if b != "1"} | {kaxes[-1]: "BLOCK_K"}
    scalar = {a for a, b in box.items() if b == "1"} | set(kaxes[:-1]) | set(k.axes["b"])
    blocks: list[str] = []
    seen: set[str] = set()
    for d, idx in enumerate(o.load.indices):
        used = te.free_vars(idx) & (set(vector) | scalar | set(k.axes["m"]) | set(k.axes["n"]))
        if used - set(vector) - scalar:
            return None, f"dim {d} is indexed by {idx!r}, which uses axes {sorted(used - set(vector) - scalar)} of the other tile dim"
        vec = sorted(used & set(vector))
        if len(vec) > 1:
            return None, f"dim {d} is indexed by {idx!r}, which mixes tile axes {vec}"
        if not vec:
            blocks.append("1")
            continue
        ax = vec[0]
        if ax in seen or not _unit_step(idx, ax):
            return None, f"dim {d} is indexed by {idx!r}: a box needs {ax!r} once, with step 1 (a stride-1 window)"
        if ax == kaxes[-1] and len(kaxes) == 1 and next(a for a in te.walk(idx) if isinstance(a, te.IterVar)
                                                          and a.name == ax).extent != o.tensor.shape[d]:
            return None, f"the reduction covers part of dim {d}; TMA would read past it instead of zero-filling"
        seen.add(ax)
        blocks.append(vector[ax])
    if seen != set(vector):
        return None, f"axes {sorted(set(vector) - seen)} index no dim of {o.tensor.name}"
    if o.contiguous is None or blocks[o.contiguous] == "1":
        return None, f"{o.tensor.name}'s unit-stride dim is not a tile dim (TMA needs the last dim contiguous)"
    return tuple(blocks), ""


def _unit_step(idx: Any, ax: str) -> bool:
    """Whether ``idx`` is ``ax + offset``: one step of ``ax`` moves the index by one (integer affine
    indices, checked at two points with every other variable fixed)."""
    from .. import te
    names = te.free_vars(idx)
    base = {n: 3 for n in names}
    try:
        at = [int(te.evaluate(idx, base | {ax: v})) for v in (1, 2, 7)]
    except ZeroDivisionError:  # a size the index divides by is 0 at the probe point: not affine in ax
        return False
    return at[1] - at[0] == 1 and at[2] - at[1] == 5


def find_pipeline_candidates(k: Kernel) -> tuple[Candidate, ...]:
    """Every staged buffer of ``k`` with its verdict on rules 1 and 2 (rule 3 is for the planner)."""
    out: list[Candidate] = []
    shared_of: dict[str, Candidate] = {}
    for node, loops in find(k.body, lambda n: isinstance(n, Copy) and n.scope in ("shared", "register")):
        assert isinstance(node, Copy)
        o = k.operand(node.role)
        reasons: list[str] = []
        ok = True
        # Rule 1: produced by an asynchronous copy.
        if node.scope == "shared":
            nbytes, why = contiguous_bytes(k, o)
            if nbytes < 4:
                ok = False
                reasons.append(f"rule 1 (async copy): {why}; cp.async needs >= 4 bytes per thread. "
                               f"Make {o.tensor.name} contiguous along a tile axis (or use fp32)")
            else:
                reasons.append(f"rule 1 (async copy): direct load of input {o.tensor.name}, {nbytes} contiguous "
                               f"bytes per thread ({why})")
            if o.prologue_from is not None:
                reasons.append(f"ordering: {o.prologue_from} is an elementwise prologue; it is fused at the use and "
                               f"the buffer stages raw {o.tensor.name}, so the copy stays asynchronous "
                               "(paper Fig. 5 case 2)")
            feeds = None
        else:
            src = shared_of.get(node.role)
            feeds = src.buffer if src else None
            reasons.append(f"rule 1 (async copy): a register buffer fed by shared buffer {feeds} "
                           "(multi-level chain; the register level is explicit prefetch code)")
        # Rule 2: inside a sequential load-and-use loop.
        loop = _load_use_loop(loops)
        if loop is None:
            ok = False
            kinds = ", ".join(f"{lp.var}: {lp.kind}" for lp in loops) or "none"
            reasons.append(f"rule 2 (sequential loop): no sequential loop encloses the copy (loops: {kinds}); "
                           "an unrolled or parallel loop has no next iteration to overlap. Remove the unroll step")
        else:
            tiles = next((lp for lp in loops if lp.role == "tiles"), None)
            reasons.append(f"rule 2 (sequential loop): loads in loop {loop.var} and is used in the same iteration"
                           + (f"; {loop.var} runs inside the persistent tile loop {tiles.var}, flattened with it "
                              "when the shared level has 2 or more stages" if tiles is not None else ""))
        tma_ok, tma_reason = tma_feasible(k, o)
        cand = Candidate(node.buffer, o.tensor.name, node.scope, node.role, node.stages, loop.var if loop else None,
                         feeds, ok, tuple(reasons), tma_ok, tma_reason)
        if node.scope == "shared":
            shared_of[node.role] = cand
        out.append(cand)
    return tuple(out)


def _load_use_loop(loops: tuple[For, ...]) -> For | None:
    """Innermost enclosing sequential loop (buffers here are indexed by tile offsets, never by loop vars)."""
    for lp in reversed(loops):
        if lp.kind in ("serial", "range"):
            return lp
        if lp.kind == "static_range":
            return None
    return None
