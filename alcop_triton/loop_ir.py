"""Loop-nest IR: what a kernel does, before it is printed as Triton.

Immutable nodes with tuple children. ``lower`` builds it from a schedule, ``analysis`` reads it,
``rewrite`` passes return new trees (``Transformer`` rebuilds only what changed) and ``codegen``
prints it. Addresses stay symbolic (``KRef``: which reduction chunk and sub-tile a copy reads), so
pipelining rewrites shift indices without string surgery.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from . import te


@dataclass(frozen=True)
class KRef:
    """The reduction offset of a tile: ``(loop + tile) * BLOCK_K + sub * SUB_K``.

    ``loop`` is the chunk loop's variable (None in a prologue, i.e. chunk 0); ``sub`` is a sub-tile
    number, or the name of the sub-tile loop's variable before that loop is unrolled.
    """
    loop: str | None
    tile: int = 0
    sub: int | str = 0

    def shifted(self, steps: int, split: int) -> KRef:
        """The sub-tile ``steps`` further along the linearised (chunk, sub-tile) sequence."""
        assert isinstance(self.sub, int)
        t = self.tile * split + self.sub + steps
        return KRef(self.loop, t // split, t % split)


@dataclass(frozen=True)
class Operand:
    """One input of the contraction (``a``: M x K tile, ``b``: K x N tile)."""
    role: str                    # "a" or "b"
    tensor: te.Tensor            # the placeholder read
    load: te.Load                # its index expressions over the kernel's axes
    expr: te.Expr                # the factor: prologue ops around ``load``, fused at the use
    dims: tuple[str, ...]        # per tensor dim: the tile dim it follows ('m', 'n', 'k', 'b' or '' if mixed)
    contiguous: int | None       # tensor dim specialised to unit stride, if any
    prologue_from: str | None = None  # the inlined compute tensor the prologue came from


@dataclass(frozen=True)
class Node:
    def children(self) -> tuple[Node, ...]:
        return ()


N = TypeVar("N", bound=Node)  # generic_visit returns a node of its argument's class


@dataclass(frozen=True)
class ProgramIds(Node):
    """pid_m / pid_n (grouped when GROUP_M > 1) and pid_b for the batch axes.

    ``tile_var``: None maps the program id (one program per tile); a persistent kernel maps the
    tile loop's variable instead, the counts having been computed once by ``TileCount``.
    """
    batched: bool
    tile_var: str | None = None


@dataclass(frozen=True)
class TileCount(Node):
    """num_pid_m / num_pid_n and num_tiles, before a persistent kernel's tile loop."""
    batch_total: str


@dataclass(frozen=True)
class TileIndices(Node):
    """offs_<dim> for a tile dim and the output axes fused into it (decomposed by div/mod).

    ``box``: per axis, the tile's extent along it when the tile is a box of the axes rather than a
    run of the fused index: "1" (one entry, a scalar per program) or ``BLOCK_M`` (the innermost axis:
    a run of one output row). A convolution's A tiles are then TMA boxes of its input
    (``SelectAsyncCopy``, ``analysis.box_blocks``).
    """
    dim: str                                  # 'm' or 'n'
    axes: tuple[tuple[str, str], ...]         # (axis name, extent parameter), outermost first
    total: str                                # extent of the fused dim
    box: tuple[str, ...] = ()


@dataclass(frozen=True)
class BatchIndices(Node):
    axes: tuple[tuple[str, str], ...]
    total: str


@dataclass(frozen=True)
class InitAcc(Node):
    name: str = "acc"


@dataclass(frozen=True)
class KIndices(Node):
    """Reduction indices of one tile: offs_k<suffix> and the reduce axes decomposed from it."""
    at: KRef
    extent: str       # 'BLOCK_K' or 'SUB_K'
    suffix: str = ""


@dataclass(frozen=True)
class Copy(Node):
    """Stage a tile of an operand into a buffer.

    ``scope``: 'shared' (global -> shared: an async copy that Triton's pipeliner stages), 'register'
    (shared -> registers: the explicit level) or 'global' (a plain load, no buffer). A shared copy whose
    operand also has a register buffer is realised by the register copies' loads (Triton fuses the
    two levels into one ``tl.load``); it prints as a comment.
    """
    buffer: str
    scope: str
    role: str
    target: str
    at: KRef
    extent: str
    suffix: str = ""
    mechanism: str = "pointer"
    realised_by_register: bool = False
    stages: int = 1          # depth the schedule asked for (pipeline step); analysis decides what it gets
    note: str = ""


@dataclass(frozen=True)
class Dot(Node):
    a: str
    b: str
    acc: str = "acc"
    note: str = ""


@dataclass(frozen=True)
class Rotate(Node):
    """Rename register buffers at the end of an iteration (the modulo wrap of the register pipeline)."""
    targets: tuple[str, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class For(Node):
    """A loop. kind: 'serial' (sequential, not yet decided), 'range' (runtime, may be pipelined),
    'static_range' (unrolled at compile time)."""
    var: str
    extent: str
    body: tuple[Node, ...]
    kind: str = "serial"
    num_stages: int | None = None
    role: str = ""          # 'chunk' (reduction chunks), 'sub' (register sub-tiles), 'tiles' (persistent)
    note: str = ""
    start: str = "0"
    step: str = "1"
    flatten: bool = False   # fuse with the loops nested in it, so one pipeline spans them all

    def children(self) -> tuple[Node, ...]:
        return self.body


@dataclass(frozen=True)
class KSplit(Node):
    """Split-K: this program's slice of the reduction chunks (``k_base``, ``k_chunks``), from program_id(2)."""
    total: str        # extent of the fused reduction dim


@dataclass(frozen=True)
class SplitReduce(Node):
    """Split-K: the partial tile goes to a float32 workspace; the last program of the tile to arrive adds
    the partials in split order (deterministic) and runs ``body`` (the epilogue store) on the sum."""
    body: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.body


@dataclass(frozen=True)
class Store(Node):
    """Epilogue (elementwise ops on acc, extra loads such as a bias) fused into the output store."""
    expr: te.Expr


@dataclass(frozen=True)
class Descriptor:
    """A TMA tensor descriptor the launcher builds (a kernel parameter, ``<role>_desc``).

    ``dims``: the tensor's dims in descriptor order, batch dims first and the unit-stride dim last
    (TMA's rule); ``block``: the copy's extent along each, a constexpr's name or "1" (one batch entry
    per copy). Made on the host, once per call, because a descriptor made in the kernel costs every
    program a tensor-map write and a fence before its first copy.
    """
    role: str        # 'a', 'b' (operand loads) or 'out' (the epilogue's store)
    tensor: str
    dims: tuple[int, ...]
    block: tuple[str, ...]

    @property
    def param(self) -> str:
        return f"{self.role}_desc"

    @property
    def reshaped(self) -> bool:
        """Whether the copy's block is not the 2-D tile itself: dims copied one entry at a time (batch
        dims, a conv's window taps) or a tile dim spread over several (a box of output positions)."""
        return len(self.block) != 2


def run_extent(extents: tuple[str, ...], width: int | None) -> int | None:
    """The innermost of fused axes' extent (``extents``, outermost first, as parameter names or
    literals) when every ``width``-wide block of them lies inside one run of it.

    That holds when the extent is a compile-time multiple of the block width (a conv's channels when
    they are a multiple of BLOCK_K): then each block has one value of every outer axis (the conv
    window's rh, rw), which stay scalars, and the block is wholly inside or outside the fused extent.
    """
    inner = extents[-1] if extents else ""
    if len(extents) < 2 or not inner.isdigit() or not width or int(inner) % width:
        return None
    return int(inner)


PADDED_RUN_USE = 7 / 8
"""Least share of a padded run's positions that are real for ``padded_run`` to take it: 56 of 64 (a
56-wide output row in 64-wide chunks) is in, 28 of 64 is not."""


def padded_run(extents: tuple[str, ...], width: int | None) -> tuple[int, int] | None:
    """(extent, padded extent) of the innermost of fused reduction axes whose ``width``-wide chunks
    run inside one run of it padded to a multiple of ``width``, or None.

    Where ``run_extent`` does not hold because the innermost extent is a compile-time size that is
    not a multiple of the chunk (a conv weight gradient's reduction over (n, oh, ow) with 56-wide
    rows), the reduction can count chunks over the padded extent: each chunk then has one value of
    every outer axis (scalars, as in ``run_extent``) and a vector of the innermost, masked past its
    extent, instead of every lane splitting the flat index into all axes by division (the weight
    gradient's main loop spent 30-42% of its time there on four of five layers;
    ``docs/decisions.md#d13``).
    Taken while at least ``PADDED_RUN_USE`` of the padded positions are real."""
    inner = extents[-1] if extents else ""
    if len(extents) < 2 or not inner.isdigit() or not width or int(inner) % width == 0:
        return None
    padded = -(-int(inner) // width) * width
    return (int(inner), padded) if int(inner) >= PADDED_RUN_USE * padded else None


@dataclass(frozen=True)
class Kernel:
    name: str
    body: tuple[Node, ...]
    operands: tuple[Operand, ...]
    out: te.Tensor
    inputs: tuple[te.Tensor, ...]
    reduction: te.Tensor
    axes: dict[str, tuple[str, ...]]          # 'b', 'm', 'n', 'k' -> axis names (outer to inner)
    extents: dict[str, te.Expr]               # axis name -> extent expression
    sizes: tuple[tuple[str, te.Expr], ...]    # size parameters (signature order) and their host expressions
    axis_size: dict[str, str]                 # axis -> extent parameter (or literal)
    totals: dict[str, str]                    # 'b', 'm', 'n', 'k' -> extent of the fused dim
    unit_stride: dict[str, int | None]        # tensor -> dim specialised to stride 1
    constexprs: dict[str, int]
    num_warps: int
    num_stages: int
    dot_dtype: str
    fp32_precision: str                       # float32 dots' input_precision (settings.fp32_precision)
    passes: tuple[str, ...] = ()
    interpreter: bool = False                 # generated for Triton's CPU interpreter
    static: dict[str, int] = field(default_factory=dict)  # size vars compiled in as constants
    # Runtime sizes/strides known (at bind time) to be multiples of 16 bytes' worth of elements but not of
    # 16: Triton only specialises on 16, so unless the kernel states it (``x // d * d``) a K of 1000 or a row stride of 1000
    # halves makes every masked load scalar (2-byte loads, no cp.async, register spills).
    multiple_of: dict[str, int] = field(default_factory=dict)
    descriptors: tuple[Descriptor, ...] = ()  # host-side TMA descriptors, kernel parameters after the output
    # Launched with programmatic dependent launch (Hopper): programs may start while the previous kernel on
    # the stream finishes, so the kernel waits for it (``gdc_wait``) before its first memory access.
    dependent_launch: bool = False
    # A wave-tail config's launches (``KernelConfig.wave_tail``): "head", the rows of tiles that fill whole
    # waves, which lets the next launch start once it has waited; "tail", the rows after them, started
    # during the head and waiting for it at its end. Both cover the row tiles [tile_lo, tile_hi) given at
    # launch. "" = one launch over every tile.
    wave_role: str = ""

    def replace(self, **kw: Any) -> Kernel:
        return dataclasses.replace(self, **kw)

    def operand(self, role: str) -> Operand:
        return next(o for o in self.operands if o.role == role)

    def descriptor(self, role: str) -> Descriptor | None:
        return next((d for d in self.descriptors if d.role == role), None)


class Visitor:
    """Dispatches ``visit_<Class>``; the default visits children."""

    def visit(self, node: Node) -> Any:
        return getattr(self, f"visit_{type(node).__name__}", self.generic_visit)(node)

    def generic_visit(self, node: Node) -> Any:
        for c in node.children():
            self.visit(c)
        return None


class Transformer:
    """Returns a rewritten tree: ``visit_<Class>`` may return a node, a tuple of nodes (splice) or None."""

    def visit(self, node: Node) -> Node | tuple[Node, ...] | None:
        return getattr(self, f"visit_{type(node).__name__}", self.generic_visit)(node)

    def generic_visit(self, node: N) -> N:
        if isinstance(node, For):
            body = self.visit_body(node.body)
            return node if body == node.body else dataclasses.replace(node, body=body)
        return node

    def visit_body(self, body: tuple[Node, ...]) -> tuple[Node, ...]:
        out: list[Node] = []
        for n in body:
            r = self.visit(n)
            if r is None:
                continue
            out.extend(r if isinstance(r, tuple) else (r,))
        return tuple(out)


def find(body: tuple[Node, ...], pred: Callable[[Node], bool]) -> list[tuple[Node, tuple[For, ...]]]:
    """Nodes matching ``pred`` with the loops that enclose them (outermost first)."""
    hits: list[tuple[Node, tuple[For, ...]]] = []

    def rec(nodes: tuple[Node, ...], loops: tuple[For, ...]) -> None:
        for n in nodes:
            if pred(n):
                hits.append((n, loops))
            if isinstance(n, For):
                rec(n.body, loops + (n,))
            elif n.children():
                rec(n.children(), loops)
    rec(body, ())
    return hits


def dump(body: tuple[Node, ...], indent: int = 0) -> str:
    """A compact text form of the loop nest, for tests and ``explain``."""
    lines: list[str] = []
    for n in body:
        pad = "  " * indent
        if isinstance(n, For):
            st = f" num_stages={n.num_stages}" if n.num_stages else ""
            st += " flatten" if n.flatten else ""
            bounds = n.extent if (n.start, n.step) == ("0", "1") else f"{n.start}, {n.extent}, {n.step}"
            lines.append(f"{pad}for {n.var} in {n.kind}({bounds}){st}:")
            lines.append(dump(n.body, indent + 1))
        elif isinstance(n, Copy):
            real = " (realised by register copies)" if n.realised_by_register else ""
            lines.append(f"{pad}{n.target} <- copy[{n.scope},{n.mechanism}] {n.buffer} @ {_kref(n.at)}{real}")
        elif isinstance(n, Dot):
            lines.append(f"{pad}{n.acc} += dot({n.a}, {n.b})")
        elif isinstance(n, Rotate):
            lines.append(f"{pad}{', '.join(n.targets)} = {', '.join(n.sources)}")
        elif isinstance(n, KIndices):
            lines.append(f"{pad}offs_k{n.suffix} = {_kref(n.at)}")
        elif isinstance(n, SplitReduce):
            lines.append(f"{pad}SplitReduce (last program of the tile):")
            lines.append(dump(n.body, indent + 1))
        else:
            lines.append(f"{pad}{type(n).__name__}")
    return "\n".join(x for x in lines if x)


def _kref(k: KRef) -> str:
    chunk = k.loop or "0"
    if k.tile:
        chunk = f"({chunk} + {k.tile})" if k.loop else str(k.tile)
    return f"{chunk}*BLOCK_K + {k.sub}*SUB_K"
