"""The schedule language: cache_read, tile, pipeline, compute_inline, group, warps, async_copy, split_k.

A ``Schedule`` is the one mutable builder; every call validates at once (naming the step, the value
and the rule) and records a frozen step. ``canonical_steps()`` returns the steps in ALCOP's order
(cache_read and tile before pipeline, inlining after), with a note for each step that was moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, Union

from . import te
from .errors import ScheduleError
from .records import ASYNC_COPIES, GLUON_COPIES, TAIL_CONFIG, KernelConfig


@dataclass(frozen=True)
class Buffer:
    """A staged copy of a tensor in 'shared' memory or in 'register's, created by ``cache_read``."""
    name: str
    scope: str
    source: str  # tensor name (shared level) or buffer name (register level)
    tensor: str  # the tensor whose data the buffer holds


@dataclass(frozen=True)
class CacheRead:
    source: str
    scope: str
    buffer: str


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    sub_k: int
    m_axes: tuple[str, ...] | None = None
    n_axes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Pipeline:
    buffer: str
    stages: int


@dataclass(frozen=True)
class Inline:
    tensor: str


@dataclass(frozen=True)
class Group:
    group_m: int


@dataclass(frozen=True)
class Warps:
    num_warps: int


@dataclass(frozen=True)
class AsyncCopyStep:
    mechanism: str


@dataclass(frozen=True)
class Unroll:
    axis: str


@dataclass(frozen=True)
class Persistent:
    """Programs loop over output tiles (one program per resident slot, not per tile)."""


@dataclass(frozen=True)
class SplitK:
    """Split the reduction over ``factor`` programs per output tile (deterministic split-K)."""
    factor: int


@dataclass(frozen=True)
class WaveTail:
    """The rows past the last whole wave of tiles (one per SM) run as a second, overlapping launch of smaller
    tiles, or (``split``) of this schedule's tiles split along K (``records.tail_split_factor``)."""
    split: bool = False


Step = Union[CacheRead, Tile, Pipeline, Inline, Group, Warps, AsyncCopyStep, Unroll, Persistent, SplitK, WaveTail]
S = TypeVar("S", CacheRead, Tile, Pipeline, Inline, Group, Warps, AsyncCopyStep, Unroll, Persistent, SplitK,
            WaveTail)
# ALCOP's ordering (paper section 2.2): cache-read and tiling before pipelining, inlining after.
_PHASE = {CacheRead: 0, Tile: 1, Unroll: 1, Pipeline: 2, Inline: 3, Group: 4, Warps: 4, AsyncCopyStep: 4,
          Persistent: 4, SplitK: 4, WaveTail: 4}


def _pow2(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def graph(out: te.Tensor) -> dict[str, te.Tensor]:
    """Every tensor reachable from ``out``, by name (names must be unique)."""
    seen: dict[str, te.Tensor] = {}

    def visit(t: te.Tensor) -> None:
        if t.name in seen:
            if seen[t.name] is not t:
                raise ScheduleError(f"two different tensors are named {t.name!r}; tensor names must be unique")
            return
        seen[t.name] = t
        if isinstance(t.op, te.ComputeOp):
            for ld in te.loads(t.op.body):
                visit(ld.tensor)
    visit(out)
    return seen


class Stage:
    """``s[tensor]``: TVM-style access to per-tensor steps."""

    def __init__(self, sched: Schedule, tensor: te.Tensor) -> None:
        self._s, self._t = sched, tensor

    def compute_inline(self) -> None:
        self._s.compute_inline(self._t)


@dataclass
class Schedule:
    out: te.Tensor
    steps: list[Step] = field(default_factory=list)
    buffers: dict[str, Buffer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tensors = graph(self.out)
        reductions = [t for t in self.tensors.values()
                      if isinstance(t.op, te.ComputeOp) and isinstance(t.op.body, te.Reduce)]
        self.reduction: te.Tensor | None = reductions[0] if len(reductions) == 1 else None
        if len(reductions) > 1:
            raise ScheduleError(f"schedule of {self.out.name!r}: {len(reductions)} reductions "
                                f"({', '.join(t.name for t in reductions)}); one kernel holds one reduction")

    def __getitem__(self, t: te.Tensor) -> Stage:
        self._tensor(t, "s[...]")
        return Stage(self, t)

    def _tensor(self, t: te.Tensor, step: str) -> te.Tensor:
        if not isinstance(t, te.Tensor) or self.tensors.get(t.name) is not t:
            raise ScheduleError(f"{step}: {getattr(t, 'name', t)!r} is not a tensor of this schedule's graph")
        return t

    # ------------------------------------------------------------------ steps
    def cache_read(self, src: te.Tensor | Buffer, scope: str) -> Buffer:
        """Stage ``src`` through a buffer in ``scope`` ('shared' for a tensor, 'register' for a shared buffer)."""
        if scope not in ("shared", "register"):
            raise ScheduleError(f"cache_read(scope={scope!r}): scope must be 'shared' or 'register'")
        if scope == "shared":
            if isinstance(src, Buffer):
                raise ScheduleError(f"cache_read({src.name}, 'shared'): a shared buffer is read from a tensor, "
                                    f"not from buffer {src.name!r}")
            t = self._tensor(src, "cache_read")
            if t is self.out or t is self.reduction:
                raise ScheduleError(f"cache_read({t.name}, 'shared'): {t.name!r} is produced by this kernel; "
                                    "only its inputs can be cached")
            name, tensor = f"{t.name}_shared", t.name
        else:
            if not isinstance(src, Buffer) or src.scope != "shared" or self.buffers.get(src.name) != src:
                raise ScheduleError(
                    f"cache_read({getattr(src, 'name', src)}, 'register'): a register buffer must be fed by a "
                    "shared buffer of this schedule (a direct global->register load is synchronous and cannot "
                    "be pipelined); call cache_read(tensor, 'shared') first")
            name, tensor = f"{src.tensor}_reg", src.tensor
        if name in self.buffers:
            raise ScheduleError(f"cache_read: {tensor!r} already has a {scope} buffer {name!r}")
        buf = Buffer(name, scope, src.name, tensor)
        self.buffers[name] = buf
        self.steps.append(CacheRead(src.name, scope, name))
        return buf

    def tile(self, block_m: int = 64, block_n: int = 64, block_k: int = 32, sub_k: int | None = None,
             m_axes: tuple[te.IterVar | str, ...] | None = None,
             n_axes: tuple[te.IterVar | str, ...] | None = None) -> None:
        """Tile the output rows (M), columns (N) and the reduction chunk (K, split into sub_k sub-tiles).

        By default the last output axis is N, the one before it M, and the rest are batch axes;
        ``m_axes``/``n_axes`` fuse several output axes into one tile dimension (e.g. conv's n, oh, ow).
        """
        for nm, v in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
            if not _pow2(v) or not 16 <= v <= 512:
                raise ScheduleError(f"tile({nm}={v!r}): must be a power of two in [16, 512] (tl.dot needs >= 16)")
        sub_k = block_k if sub_k is None else sub_k
        if not _pow2(sub_k) or sub_k < 16 or block_k % sub_k:
            raise ScheduleError(f"tile(sub_k={sub_k!r}): must be a power of two >= 16 dividing block_k={block_k}")
        if self.reduction is None:
            raise ScheduleError(f"tile: {self.out.name!r} has no reduction to tile; alcop kernels are reductions")
        names = [a.name for a in self.out.op.axes] if isinstance(self.out.op, te.ComputeOp) else []
        m = self._axes(m_axes, names, "m_axes")
        n = self._axes(n_axes, names, "n_axes")
        if m and n and set(m) & set(n):
            raise ScheduleError(f"tile: axes {sorted(set(m) & set(n))} are in both m_axes and n_axes")
        self.steps.append(Tile(block_m, block_n, block_k, sub_k, m, n))

    @staticmethod
    def _axes(axes, names: list[str], what: str) -> tuple[str, ...] | None:
        if axes is None:
            return None
        out = tuple(a.name if isinstance(a, te.IterVar) else a for a in axes)
        for a in out:
            if a not in names:
                raise ScheduleError(f"tile({what}={out}): {a!r} is not an output axis; output axes are {names}")
        return out

    def pipeline(self, buf: Buffer, stages: int) -> None:
        """Pipeline ``buf`` ``stages`` deep (1 = not pipelined, 2 = double buffering)."""
        if not isinstance(buf, Buffer) or self.buffers.get(buf.name) != buf:
            raise ScheduleError(f"pipeline({getattr(buf, 'name', buf)!r}): pipelining applies to a buffer made by "
                                "this schedule's cache_read (cache_read before pipeline)")
        top = 8 if buf.scope == "shared" else 4
        if not isinstance(stages, int) or isinstance(stages, bool) or not 1 <= stages <= top:
            raise ScheduleError(f"pipeline({buf.name}, stages={stages!r}): {buf.scope} stages must be an int in [1, {top}]")
        self.steps.append(Pipeline(buf.name, stages))

    def compute_inline(self, t: te.Tensor) -> None:
        """Fuse an elementwise stage into its consumer (after pipelining: at the use, paper Fig. 5 case 2)."""
        t = self._tensor(t, "compute_inline")
        if t.is_placeholder or t is self.out or t is self.reduction:
            raise ScheduleError(f"compute_inline({t.name}): only an intermediate elementwise compute can be inlined, "
                                f"{t.name!r} is {'an input' if t.is_placeholder else 'the output' if t is self.out else 'the reduction'}")
        self.steps.append(Inline(t.name))

    def group(self, group_m: int) -> None:
        """Order programs in groups of ``group_m`` rows of tiles so neighbours share L2."""
        if not isinstance(group_m, int) or not 1 <= group_m <= 64:
            raise ScheduleError(f"group(group_m={group_m!r}): must be an int in [1, 64]")
        self.steps.append(Group(group_m))

    def num_warps(self, n: int) -> None:
        if n not in (1, 2, 4, 8, 16):
            raise ScheduleError(f"num_warps({n!r}): must be one of 1, 2, 4, 8, 16")
        self.steps.append(Warps(n))

    def async_copy(self, mechanism: str) -> None:
        """'pointer' (cp.async) or 'tma' (tensor descriptors)."""
        steps = tuple(m for m in ASYNC_COPIES if m not in GLUON_COPIES)
        if mechanism in GLUON_COPIES:
            kernel = "convolution" if mechanism == "box" else "warp-specialized GEMM"
            raise ScheduleError(f"async_copy({mechanism!r}): the library {kernel} kernel's copy "
                                f"(kernels/conv_window.py, kernels/matmul_ws.py), not a schedule step; must be one "
                                f"of {steps}")
        if mechanism not in steps:
            raise ScheduleError(f"async_copy({mechanism!r}): must be one of {steps}")
        self.steps.append(AsyncCopyStep(mechanism))

    def persistent(self) -> None:
        """Launch one program per resident slot on the GPU, each looping over output tiles.

        With a pipelined shared level the tile loop is flattened with the reduction loop, so the
        copies of the next tile's first chunks are issued during this tile's epilogue: ALCOP's
        inner-pipeline fusion, one level up (output tiles instead of register sub-tiles).
        """
        self.steps.append(Persistent())

    def wave_tail(self, split: bool = False) -> None:
        """Run the rows of tiles past the last whole wave (one tile per SM) as a second launch.

        A grid whose tiles fill a few waves of the SMs and a little more leaves most SMs idle while its
        last wave runs. With this step the first launch covers the rows of tiles that fill whole waves
        and lets the next launch start as soon as its last programs are placed; the second launch
        (``records.TAIL_CONFIG``'s 64 x 64 tiles) computes the remaining rows on the SMs that the first
        launch's last wave leaves free, and completes only after the first. Kernels of one batch, one
        program per whole tile (not persistent, not split-K).

        ``split``: the second launch runs this schedule's own tiles instead, each reduced by as many
        programs as the SMs the tail's tiles leave idle allow (``records.tail_split_factor``; split-K's
        float32 workspace and ordered sum), so that the last wave's work spreads over every SM. Where no
        split of two or more fits, the tail is ``TAIL_CONFIG``'s.
        """
        self.steps.append(WaveTail(split))

    def tail_schedule(self, cfg: KernelConfig = TAIL_CONFIG) -> Schedule:
        """The schedule of the wave tail's launch: these steps with ``cfg``'s tile, depths, warps, copies and
        split-K factor (buffers, inlining, grouping and axes as here); the library's is ``TAIL_CONFIG``, others
        serve measurements of the choice (``docs/decisions.md#d17``)."""
        steps: list[Step] = []
        for st in self.steps:
            if isinstance(st, Tile):
                steps.append(Tile(cfg.block_m, cfg.block_n, cfg.block_k, cfg.sub_k, st.m_axes, st.n_axes))
            elif isinstance(st, Pipeline):
                shared = self.buffers[st.buffer].scope == "shared"
                steps.append(Pipeline(st.buffer, cfg.smem_stages if shared else cfg.reg_stages))
            elif isinstance(st, Warps):
                steps.append(Warps(cfg.num_warps))
            elif isinstance(st, AsyncCopyStep):
                steps.append(AsyncCopyStep(cfg.async_copy))
            elif not isinstance(st, (WaveTail, SplitK)):
                steps.append(st)
        if cfg.split_k > 1:
            steps.append(SplitK(cfg.split_k))
        return Schedule(self.out, steps, dict(self.buffers))

    def split_k(self, factor: int) -> None:
        """Split the reduction loop over ``factor`` programs per output tile (split-K).

        For few output tiles and a long K (decode, tall-skinny, small-N GEMMs) the GPU would idle:
        each program reduces one contiguous slice of the K chunks into a float32 partial tile; the
        last program of a tile to arrive (a per-tile arrival counter) adds the partials in split
        order (past 8 slices in two levels: groups of 8, then the groups), so the result does not
        depend on which program finished first, and applies the epilogue. ``factor`` 1 is the plain
        kernel.
        """
        from .records import MAX_SPLIT_K
        if not isinstance(factor, int) or isinstance(factor, bool) or not 1 <= factor <= MAX_SPLIT_K:
            raise ScheduleError(f"split_k({factor!r}): must be an int in [1, {MAX_SPLIT_K}]")
        self.steps.append(SplitK(factor))

    def unroll(self, axis: te.IterVar | str) -> None:
        """Unroll the reduction loop (which then cannot be pipelined: nothing to overlap)."""
        name = axis.name if isinstance(axis, te.IterVar) else axis
        red = self.reduction
        body = red.op.body if red is not None and isinstance(red.op, te.ComputeOp) else None
        if not isinstance(body, te.Reduce) or name not in [a.name for a in body.axes]:
            raise ScheduleError(f"unroll({name!r}): only a reduction axis of this kernel can be unrolled")
        self.steps.append(Unroll(name))

    # ------------------------------------------------------------------ views
    def canonical_steps(self) -> tuple[tuple[Step, ...], tuple[str, ...]]:
        """Steps in ALCOP's phase order, and a note for each one that the user gave out of order."""
        order = sorted(range(len(self.steps)), key=lambda i: (_PHASE[type(self.steps[i])], i))
        notes = []
        for pos, i in enumerate(order):
            if pos != i and any(_PHASE[type(self.steps[j])] > _PHASE[type(self.steps[i])] for j in range(i)):
                notes.append(f"reordered: {self.steps[i]} moved before later-phase steps "
                             "(cache_read/tile before pipeline, inline after; paper section 2.2)")
        return tuple(self.steps[i] for i in order), tuple(notes)

    def last(self, kind: type[S]) -> S | None:
        """The most recent step of a kind (a later tile/group/... overrides an earlier one)."""
        for st in reversed(self.steps):
            if isinstance(st, kind):
                return st
        return None

    def stages(self, scope: str) -> int:
        """The depth requested for buffers of a scope (the deepest one: they share one loop)."""
        depths = {st.buffer: st.stages for st in self.steps  # a re-pipelined buffer keeps its last depth, as in lower
                  if isinstance(st, Pipeline) and self.buffers[st.buffer].scope == scope}
        return max(depths.values()) if depths else 1

    def config(self) -> KernelConfig:
        """This schedule's parameters as a KernelConfig (the tuner's and the database's record)."""
        tile = self.last(Tile) or Tile(64, 64, 32, 32)
        group, warps, mech, split = self.last(Group), self.last(Warps), self.last(AsyncCopyStep), self.last(SplitK)
        tail = self.last(WaveTail)
        has_reg = any(b.scope == "register" for b in self.buffers.values())
        return KernelConfig(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k,
                            group_m=group.group_m if group else 1, num_warps=warps.num_warps if warps else 4,
                            smem_stages=self.stages("shared"), reg_stages=self.stages("register") if has_reg else 1,
                            reg_split=tile.block_k // tile.sub_k, async_copy=mech.mechanism if mech else "pointer",
                            persistent=self.last(Persistent) is not None, split_k=split.factor if split else 1,
                            wave_tail=tail is not None, tail_split=tail is not None and tail.split)

    @classmethod
    def from_config(cls, out: te.Tensor, cfg: KernelConfig, m_axes=None, n_axes=None) -> Schedule:
        """ALCOP's standard schedule: both operands staged shared -> register, tiled, pipelined per level."""
        s = cls(out)
        staged: list[tuple[Buffer, int]] = []
        for t in _reduction_inputs(s):
            shared = s.cache_read(t, "shared")
            staged.append((shared, cfg.smem_stages))
            if cfg.reg_stages > 1 or cfg.reg_split > 1:
                staged.append((s.cache_read(shared, "register"), cfg.reg_stages))
        s.tile(cfg.block_m, cfg.block_n, cfg.block_k, cfg.sub_k, m_axes=m_axes, n_axes=n_axes)
        for buf, depth in staged:
            s.pipeline(buf, depth)
        s.group(cfg.group_m)
        s.num_warps(cfg.num_warps)
        s.async_copy(cfg.async_copy)
        if cfg.persistent:
            s.persistent()
        if cfg.split_k > 1:
            s.split_k(cfg.split_k)
        if cfg.wave_tail:
            s.wave_tail(cfg.tail_split)
        return s


def _reduction_inputs(s: Schedule) -> list[te.Tensor]:
    """The placeholders read inside the reduction body, prologue computes looked through."""
    red = s.reduction
    # A reduction is a compute (Schedule's definition): the isinstance check narrows its op.
    if red is None or not isinstance(red.op, te.ComputeOp):
        raise ScheduleError(f"{s.out.name!r} has no reduction; nothing to tile or pipeline")
    out: list[te.Tensor] = []

    def visit(e: te.Expr) -> None:
        for ld in te.loads(e):
            t = ld.tensor
            if isinstance(t.op, te.ComputeOp):
                visit(t.op.body)
            elif t not in out:
                out.append(t)
    visit(red.op.body)
    return out
