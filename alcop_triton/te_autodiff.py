"""Gradients of DSL contractions, derived from the tensor expression: a compiler pass of ``@alcop_triton.op``.

For ``out = epilogue(R, other inputs)`` with ``R = sum f(A[...]) * g(B[...])`` where A and B are
different inputs indexed by plain axes and f, g elementwise prologues, ``derive`` plans
``dA = f'(A) * sum_{axes not indexing A} dR * g(B)`` (and symmetrically dB) as generated
contraction kernels, plus a float32 recompute of R; ``TorchEval`` evaluates the epilogue and the
prologues with torch over index grids, for the derivatives torch computes (``torch.func.vjp``).
An expression outside these rules raises ``NoGrad`` saying why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from . import te
from .dsl_kernels import DslKernel, kernel_key
from .errors import ScheduleError, UnsupportedError
from .fallback import TORCH_ACTIVATIONS
from .lower import lower
from .records import KernelConfig
from .schedule import Schedule, graph


def _inline(e: te.Expr, keep: te.Tensor | None) -> te.Expr:
    """Loads of intermediate computes (not ``keep``) replaced by their bodies, recursively."""
    if isinstance(e, te.Load):
        idx = tuple(_inline(i, keep) for i in e.indices)
        t = e.tensor
        if isinstance(t.op, te.ComputeOp) and t is not keep and not isinstance(t.op.body, te.Reduce):
            body = _inline(te.substitute(t.op.body, dict(zip(t.op.axes, idx))), keep)
            return body if body.dtype == t.dtype else te.Cast(t.dtype, body)
        return te.Load(t, idx)
    kids = e.children()
    if not kids:
        return e
    return te.substitute(e, {c: _inline(c, keep) for c in kids})


class TorchEval:
    """Evaluates a tensor expression with torch ops over index grids (float math in float32).

    Used for the parts of a backward that torch computes (epilogue and prologue derivatives, via
    ``torch.func.vjp``); an index outside a tensor reads 0, as in the kernels.
    """

    def __init__(self, env: Mapping[str, Any], grid: Mapping[str, torch.Tensor], tensors: Mapping[str, torch.Tensor]):
        self.env, self.grid, self.tensors = env, grid, tensors

    def __call__(self, e: te.Expr) -> Any:
        if isinstance(e, te.Const):
            return e.value
        if isinstance(e, te.Var):
            return self.env[e.name]
        if isinstance(e, te.IterVar):
            return self.grid[e.name]
        if isinstance(e, te.Load):
            return self._load(e)
        if isinstance(e, te.Cast):
            v = self(e.a)
            if not isinstance(v, torch.Tensor):
                return float(v) if e.to in te.FLOAT_DTYPES else int(v)
            if e.to in te.FLOAT_DTYPES:
                return v.float()
            return v != 0 if e.to == "bool" else v.to(torch.int64)
        if isinstance(e, te.Unary):
            v = self._tensor(self(e.a)).float()
            return _UNARY[e.fn](v)
        if isinstance(e, te.BinOp):
            return _binop(e.op, self(e.a), self(e.b))
        if isinstance(e, te.Compare):
            return _COMPARE[e.op](self(e.a), self(e.b))
        if isinstance(e, te.Where):
            return torch.where(self._tensor(self(e.cond)), self._tensor(self(e.a)), self._tensor(self(e.b)))
        raise UnsupportedError(f"cannot evaluate {type(e).__name__} {e!r} in torch")

    def _tensor(self, v: Any) -> torch.Tensor:
        if isinstance(v, torch.Tensor):
            return v
        dev = next(iter(self.tensors.values())).device
        return torch.tensor(v, device=dev, dtype=torch.float32 if isinstance(v, float) else None)

    def _load(self, ld: te.Load) -> torch.Tensor:
        x = self.tensors[ld.tensor.name]
        idx = torch.broadcast_tensors(*[self._tensor(self(i)).to(torch.int64) for i in ld.indices])
        mask = torch.ones(idx[0].shape, dtype=torch.bool, device=x.device)
        clamped = []
        for d, i in enumerate(idx):
            mask = mask & (i >= 0) & (i < x.shape[d])
            clamped.append(i.clamp(0, x.shape[d] - 1))
        v = x[tuple(clamped)]
        return torch.where(mask, v, torch.zeros_like(v))


_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "abs": torch.abs, "neg": torch.neg, **TORCH_ACTIVATIONS}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def _binop(op: str, a: Any, b: Any) -> Any:
    if op in ("max", "min"):
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            return max(a, b) if op == "max" else min(a, b)
        a, b = (a, b) if isinstance(a, torch.Tensor) else (b, a)
        b = b if isinstance(b, torch.Tensor) else torch.full((), b, dtype=a.dtype, device=a.device)
        return torch.maximum(a, b) if op == "max" else torch.minimum(a, b)
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
            "//": lambda: a // b, "%": lambda: a % b}[op]()


def index_grid(names: Sequence[str], shape: Sequence[Any], device: torch.device) -> dict[str, torch.Tensor]:
    n = len(shape)
    return {nm: torch.arange(shape[d], device=device).view([-1 if j == d else 1 for j in range(n)])
            for d, nm in enumerate(names)}


def broadcast_full(v: Any, shape: Sequence[Any], device: torch.device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return torch.broadcast_to(v.float(), tuple(shape))
    return torch.full(tuple(shape), float(v), device=device)


# ----------------------------------------------------------------------------- gradient plan

class NoGrad(Exception):
    """Why an expression's gradient is not derived (becomes DslOp's autograd reason)."""


@dataclass(frozen=True)
class GradOperand:
    pos: int  # index among the op's tensor arguments
    other: int  # the other factor's tensor argument
    key: str  # DSL kernel computing sum(dR * g(other)) over the axes not indexing this operand
    prologue: te.Expr | None  # f in f(A[...]) when not just a load (or a cast of one)
    axes: tuple[str, ...]  # the axis names indexing this operand, per dim
    dr_dtype: torch.dtype  # dR is cast to this for the kernel (the other factor's dtype)


@dataclass(frozen=True)
class GradPlan:
    reduction: te.Tensor
    recompute: str | None  # key of the float32 R kernel; None when the output is R itself
    epilogue: te.Expr | None
    out_axes: tuple[str, ...]
    operands: tuple[GradOperand, ...]
    epilogue_inputs: tuple[int, ...]  # tensor arguments (float) the epilogue reads
    kernels: Mapping[str, DslKernel]  # the recompute and gradient kernels, by dsl_call key


def _unique(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def derive(op: str, sig: Mapping[str, Any], inputs: list[te.Tensor], out: te.Tensor, spec: DslKernel) -> GradPlan:
    red = Schedule(out).reduction
    # A reduction (and so the output reading it) is always a compute; the isinstance checks narrow the ops.
    if red is None or not isinstance(red.op, te.ComputeOp) or not isinstance(out.op, te.ComputeOp) \
            or not isinstance(red.op.body, te.Reduce) or red.op.body.op != "sum":
        raise NoGrad("the output has no te.sum reduction")
    red_axes, out_op = red.op.axes, out.op
    rbody: te.Reduce = red.op.body
    e = _inline(rbody.body, keep=None)
    while isinstance(e, te.Cast):
        e = e.a
    if not (isinstance(e, te.BinOp) and e.op == "*"):
        raise NoGrad(f"the reduction body {rbody.body!r} is not a product of two factors")
    pos = {t.name: i for i, t in enumerate(inputs)}
    all_axes = tuple(red_axes) + tuple(rbody.axes)
    factors: list[tuple[te.Expr, te.Load, list[te.IterVar]]] = []
    for f in (e.a, e.b):
        lds = te.loads(f)
        if len(lds) != 1 or not lds[0].tensor.is_placeholder:
            raise NoGrad(f"factor {f!r} must read exactly one input once")
        ld = lds[0]
        ld_axes = [i for i in ld.indices if isinstance(i, te.IterVar) and i in all_axes]
        if len(ld_axes) != len(ld.indices) or len(set(ld_axes)) != len(ld_axes):
            raise NoGrad(f"{ld!r} is not indexed by distinct plain axes; gradients through index arithmetic "
                          "(convolutions, shifts, gathers) are not derived")
        used = {n for n in te.free_vars(f) if any(a.name == n for a in all_axes)}
        if used - {i.name for i in ld_axes}:
            raise NoGrad(f"the prologue {f!r} depends on axes other than those indexing {ld.tensor.name}")
        factors.append((f, ld, ld_axes))
    if factors[0][1].tensor is factors[1][1].tensor:
        raise NoGrad(f"both factors read {factors[0][1].tensor.name!r}; a product of an input with itself is "
                      "not derived")
    taken = {t for t in graph(out)} | {v for t in inputs for d in t.shape for v in te.free_vars(d)}
    operands = []
    kernels: dict[str, DslKernel] = {}
    for me, other in ((0, 1), (1, 0)):
        f_me, ld_me, a_axes = factors[me]
        f_other, ld_other, _ = factors[other]
        rest = [a for a in all_axes if a not in a_axes]
        if not rest:
            raise NoGrad(f"the gradient of {ld_me.tensor.name!r} is elementwise (every axis indexes it), not a "
                          "contraction alcop generates")
        dr_dtype = f_other.dtype if f_other.dtype in ("float16", "bfloat16") else "float32"
        dr = te.placeholder(red.shape, dr_dtype, _unique(f"grad_{red.name}", taken))
        raxes = [te.reduce_axis(a.extent, a.name) for a in rest]

        def body(*ax: te.Expr, a_axes: list[te.IterVar] = a_axes, rest: list[te.IterVar] = rest,
                 raxes: list[te.IterVar] = raxes, dr: te.Tensor = dr, f_other: te.Expr = f_other) -> te.Expr:
            mapping: dict[te.Expr, te.Expr] = {**dict(zip(a_axes, ax)), **dict(zip(rest, raxes))}
            g = te.substitute(te.Load(dr, tuple(red_axes)), mapping)
            return te.sum(g * te.substitute(f_other, mapping), axis=raxes)

        t_me, t_other = ld_me.tensor, ld_other.tensor
        gname = _unique(f"grad_{t_me.name}", taken)

        def build(t_me: te.Tensor = t_me, t_other: te.Tensor = t_other, dr: te.Tensor = dr, body: Any = body,
                  gname: str = gname, names: list[str] = [a.name for a in a_axes]) -> tuple[list[te.Tensor], te.Tensor]:
            return [t_me, t_other, dr], te.compute(t_me.shape, body, gname, dtype="float32", axis_names=names)

        key = kernel_key(op, {"role": "grad", "operand": pos[t_me.name], **sig})
        try:  # a default-config lowering tells whether alcop can tile this contraction
            ins, gout = build()
            lower(Schedule.from_config(gout, KernelConfig()), tuple(ins))
        except (UnsupportedError, ScheduleError) as err:
            raise NoGrad(f"the gradient of {t_me.name!r} is not a contraction alcop can tile: {err}") from None
        kernels[key] = DslKernel(key, build)
        trivial = isinstance(_strip_casts(f_me), te.Load)
        operands.append(GradOperand(pos[t_me.name], pos[t_other.name], key, None if trivial else f_me,
                                 tuple(a.name for a in a_axes), getattr(torch, dr_dtype)))
    if out is red:
        return GradPlan(red, None, None, tuple(a.name for a in red_axes), tuple(operands), (), kernels)
    epi = _inline(out_op.body, keep=red)
    readers = sorted({pos[ld.tensor.name] for ld in te.loads(epi)
                      if ld.tensor is not red and ld.tensor.dtype in te.FLOAT_DTYPES})
    r32 = te.Tensor(red.name, red.shape, "float32", red.op)
    names = {a.name: b.name for a, b in zip(out_op.axes, red_axes)}
    rkey = kernel_key(op, {"role": "recompute", **sig})
    kernels[rkey] = DslKernel(rkey, lambda: (list(inputs), r32),
                                m_axes=tuple(names[a] for a in spec.m_axes) if spec.m_axes else None,
                                n_axes=tuple(names[a] for a in spec.n_axes) if spec.n_axes else None)
    return GradPlan(red, rkey, epi, tuple(a.name for a in out_op.axes), tuple(operands),
                     tuple(readers), kernels)


def _strip_casts(e: te.Expr) -> te.Expr:
    while isinstance(e, te.Cast):
        e = e.a
    return e
