"""``@alcop_triton.op("mylib::name")``: a torch custom op from a function written in the DSL.

The decorated function receives one ``te.placeholder`` per tensor argument (its rank and dtype
from the call, its sizes as ``te.var`` size variables, so one kernel serves every shape) and the
scalar arguments' values, and returns the output ``te.Tensor``. The result is a torch custom op
(``torch.ops.mylib.name``) with

* the kernel built per (ranks, dtypes, scalar values) and a config per shape from the dispatcher
  (database, shipped tables, ``ALCOP_AUTOTUNE=1`` tuning, the analytical model), keyed by the
  kernel's GEMM view (batch, M, N, K); or a fixed ``config=``;
* a fake implementation: the output shape from the expression's shape, evaluated on the inputs'
  (possibly symbolic) sizes, so ``torch.compile`` traces it;
* autograd where the expression allows it (see below); otherwise ``backward`` raises
  ``UnsupportedError`` saying why (``DslOp.autograd_reason`` says it ahead of time).

Example, a fused ``gelu(x @ w.T + b)``::

    @alcop_triton.op("mylib::linear_gelu", dims={"x": "M K", "w": "N K", "b": "N"})
    def linear_gelu(x: te.Tensor, w: te.Tensor, b: te.Tensor) -> te.Tensor:
        M, K = x.shape
        N = w.shape[0]
        k = te.reduce_axis(K, "k")
        y = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), "y")
        return te.compute((M, N), lambda i, j: te.gelu(y[i, j] + b[j]), "act")

    out = linear_gelu(x, w, b)          # == torch.ops.mylib.linear_gelu(x, w, b)
    out.sum().backward()                # dx, dw via generated kernels; db, gelu' in torch

``dims`` names each tensor's dims; a name shared between arguments must have one size (checked
at call and trace time); without it dims are ``<arg>_<i>``.

Derived autograd: for ``out = epilogue(R, other inputs)`` with ``R = sum f(A[...]) * g(B[...])``
where A and B are different inputs indexed by plain axes (no index arithmetic: a matmul/bmm/
einsum-like contraction, not a convolution) and f, g elementwise prologues:
``dA = f'(A) * sum_{axes not indexing A} dR * g(B)`` (and symmetrically dB) are generated
contraction kernels (``alcop::dsl_call``); ``dR`` and the gradients of the epilogue's other
inputs come from the epilogue evaluated in torch (``torch.func.vjp``), on R recomputed in float32
by one more generated kernel (it is not kept from the forward). ``f'`` is likewise evaluated in torch.
"""

from __future__ import annotations

import inspect
import json
import keyword
import typing
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from . import library as L
from . import te
from .errors import ScheduleError, UnsupportedError
from .lower import lower
from .records import KernelConfig
from .schedule import Schedule, graph

SCALAR_KINDS = {int: "int", float: "float", bool: "bool"}


@dataclass(frozen=True)
class _Param:
    name: str
    kind: str  # "Tensor", "int", "float" or "bool"
    default: Any = inspect.Parameter.empty


def _params(fn: Callable[..., Any]) -> list[_Param]:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable string annotations: fall back to their text
        hints = dict(getattr(fn, "__annotations__", {}))
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"alcop_triton.op: parameter {p.name!r} of {fn.__name__} is {p.kind.description}; "
                            "use plain positional parameters (tensors, then ints/floats/bools)")
        h = hints.get(p.name, te.Tensor)
        if h in SCALAR_KINDS or h in ("int", "float", "bool"):
            kind = SCALAR_KINDS.get(h, h)  # type: ignore[call-overload]
        elif h is te.Tensor or (isinstance(h, str) and h.split(".")[-1] == "Tensor"):
            kind = "Tensor"
            if p.default is not p.empty:
                raise TypeError(f"alcop_triton.op: tensor parameter {p.name!r} cannot have a default")
        else:
            raise TypeError(f"alcop_triton.op: parameter {p.name!r} is annotated {h!r}; expected te.Tensor "
                            "(an input tensor) or int/float/bool (a constant baked into the kernel)")
        out.append(_Param(p.name, kind, p.default))
    if not any(p.kind == "Tensor" for p in out):
        raise TypeError(f"alcop_triton.op: {fn.__name__} takes no tensor parameter")
    return out


def _schema(params: Sequence[_Param]) -> str:
    parts = []
    for p in params:
        d = "" if p.default is inspect.Parameter.empty else f"={p.default!r}"
        parts.append(f"{p.kind} {p.name}{d}")
    return f"({', '.join(parts)}) -> Tensor"


# ----------------------------------------------------------------------------- expressions

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


class _TorchEval:
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
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "abs": torch.abs, "neg": torch.neg, **L.TORCH_ACTIVATIONS}
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


def _grid(names: Sequence[str], shape: Sequence[Any], device: torch.device) -> dict[str, torch.Tensor]:
    n = len(shape)
    return {nm: torch.arange(shape[d], device=device).view([-1 if j == d else 1 for j in range(n)])
            for d, nm in enumerate(names)}


def _full(v: Any, shape: Sequence[Any], device: torch.device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return torch.broadcast_to(v.float(), tuple(shape))
    return torch.full(tuple(shape), float(v), device=device)


# ----------------------------------------------------------------------------- gradient plan

class _NoGrad(Exception):
    """Why an expression's gradient is not derived (becomes DslOp's autograd reason)."""


@dataclass(frozen=True)
class _Operand:
    pos: int  # index among the op's tensor arguments
    other: int  # the other factor's tensor argument
    key: str  # DSL kernel computing sum(dR * g(other)) over the axes not indexing this operand
    prologue: te.Expr | None  # f in f(A[...]) when not just a load (or a cast of one)
    axes: tuple[str, ...]  # the axis names indexing this operand, per dim
    dr_dtype: torch.dtype  # dR is cast to this for the kernel (the other factor's dtype)


@dataclass(frozen=True)
class _GradPlan:
    reduction: te.Tensor
    recompute: str | None  # key of the float32 R kernel; None when the output is R itself
    epilogue: te.Expr | None
    out_axes: tuple[str, ...]
    operands: tuple[_Operand, ...]
    epilogue_inputs: tuple[int, ...]  # tensor arguments (float) the epilogue reads
    kernels: Mapping[str, L.DslKernel]  # the recompute and gradient kernels, by dsl_call key


def _unique(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _derive(op: str, sig: Mapping[str, Any], inputs: list[te.Tensor], out: te.Tensor, spec: L.DslKernel) -> _GradPlan:
    red = Schedule(out).reduction
    # A reduction (and so the output reading it) is always a compute; the isinstance checks narrow the ops.
    if red is None or not isinstance(red.op, te.ComputeOp) or not isinstance(out.op, te.ComputeOp) \
            or not isinstance(red.op.body, te.Reduce) or red.op.body.op != "sum":
        raise _NoGrad("the output has no te.sum reduction")
    red_axes, out_op = red.op.axes, out.op
    rbody: te.Reduce = red.op.body
    e = _inline(rbody.body, keep=None)
    while isinstance(e, te.Cast):
        e = e.a
    if not (isinstance(e, te.BinOp) and e.op == "*"):
        raise _NoGrad(f"the reduction body {rbody.body!r} is not a product of two factors")
    pos = {t.name: i for i, t in enumerate(inputs)}
    all_axes = tuple(red_axes) + tuple(rbody.axes)
    factors: list[tuple[te.Expr, te.Load, list[te.IterVar]]] = []
    for f in (e.a, e.b):
        lds = te.loads(f)
        if len(lds) != 1 or not lds[0].tensor.is_placeholder:
            raise _NoGrad(f"factor {f!r} must read exactly one input once")
        ld = lds[0]
        ld_axes = [i for i in ld.indices if isinstance(i, te.IterVar) and i in all_axes]
        if len(ld_axes) != len(ld.indices) or len(set(ld_axes)) != len(ld_axes):
            raise _NoGrad(f"{ld!r} is not indexed by distinct plain axes; gradients through index arithmetic "
                          "(convolutions, shifts, gathers) are not derived")
        used = {n for n in te.free_vars(f) if any(a.name == n for a in all_axes)}
        if used - {i.name for i in ld_axes}:
            raise _NoGrad(f"the prologue {f!r} depends on axes other than those indexing {ld.tensor.name}")
        factors.append((f, ld, ld_axes))
    if factors[0][1].tensor is factors[1][1].tensor:
        raise _NoGrad(f"both factors read {factors[0][1].tensor.name!r}; a product of an input with itself is "
                      "not derived")
    taken = {t for t in graph(out)} | {v for t in inputs for d in t.shape for v in te.free_vars(d)}
    operands = []
    kernels: dict[str, L.DslKernel] = {}
    for me, other in ((0, 1), (1, 0)):
        f_me, ld_me, a_axes = factors[me]
        f_other, ld_other, _ = factors[other]
        rest = [a for a in all_axes if a not in a_axes]
        if not rest:
            raise _NoGrad(f"the gradient of {ld_me.tensor.name!r} is elementwise (every axis indexes it), not a "
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

        key = L.kernel_key(op, {"role": "grad", "operand": pos[t_me.name], **sig})
        try:  # a default-config lowering tells whether alcop can tile this contraction
            ins, gout = build()
            lower(Schedule.from_config(gout, KernelConfig()), tuple(ins))
        except (UnsupportedError, ScheduleError) as err:
            raise _NoGrad(f"the gradient of {t_me.name!r} is not a contraction alcop can tile: {err}") from None
        kernels[key] = L.DslKernel(key, build)
        trivial = isinstance(_strip_casts(f_me), te.Load)
        operands.append(_Operand(pos[t_me.name], pos[t_other.name], key, None if trivial else f_me,
                                 tuple(a.name for a in a_axes), getattr(torch, dr_dtype)))
    if out is red:
        return _GradPlan(red, None, None, tuple(a.name for a in red_axes), tuple(operands), (), kernels)
    epi = _inline(out_op.body, keep=red)
    readers = sorted({pos[ld.tensor.name] for ld in te.loads(epi)
                      if ld.tensor is not red and ld.tensor.dtype in te.FLOAT_DTYPES})
    r32 = te.Tensor(red.name, red.shape, "float32", red.op)
    names = {a.name: b.name for a, b in zip(out_op.axes, red_axes)}
    rkey = L.kernel_key(op, {"role": "recompute", **sig})
    kernels[rkey] = L.DslKernel(rkey, lambda: (list(inputs), r32),
                                m_axes=tuple(names[a] for a in spec.m_axes) if spec.m_axes else None,
                                n_axes=tuple(names[a] for a in spec.n_axes) if spec.n_axes else None)
    return _GradPlan(red, rkey, epi, tuple(a.name for a in out_op.axes), tuple(operands),
                     tuple(readers), kernels)


def _strip_casts(e: te.Expr) -> te.Expr:
    while isinstance(e, te.Cast):
        e = e.a
    return e


# ----------------------------------------------------------------------------- the op

class DslOp:
    """A torch custom op defined by a DSL function; call it like the function, with torch tensors.

    Attributes:
        name: "namespace::name".
        custom_op: the ``torch.library`` custom op (``torch.ops.<namespace>.<name>`` is the same op).
    """

    def __init__(self, name: str, fn: Callable[..., te.Tensor], dims: Mapping[str, str | Sequence[str]] | None,
                 config: KernelConfig | None, m_axes: Sequence[str] | None, n_axes: Sequence[str] | None) -> None:
        self.name, self.fn, self.config = name, fn, config
        self.params = _params(fn)
        self.dims = {k: (v.split() if isinstance(v, str) else list(v)) for k, v in (dims or {}).items()}
        unknown = set(self.dims) - {p.name for p in self.params if p.kind == "Tensor"}
        if unknown:
            raise TypeError(f"alcop_triton.op({name!r}): dims names {sorted(unknown)}, which are not tensor parameters")
        self.m_axes = tuple(m_axes) if m_axes is not None else None
        self.n_axes = tuple(n_axes) if n_axes is not None else None
        self._plans: dict[str, _GradPlan | str] = {}
        L.register_resolver(name, self._resolve)
        self.custom_op = torch.library.custom_op(name, self._impl, mutates_args=(), schema=_schema(self.params))
        self.custom_op.register_fake(self._fake)
        self.custom_op.register_autograd(self._backward, setup_context=self._setup)
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.custom_op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"DslOp({self.name!r}, {_schema(self.params)})"

    # -------------------------------------------------------------- tracing the expression
    def _split(self, args: Sequence[Any]) -> tuple[list[torch.Tensor], list[Any]]:
        tensors = [a for a, p in zip(args, self.params) if p.kind == "Tensor"]
        # Scalars are baked into the kernel: int()/float() also specialise a symbolic one when tracing.
        cast = {"int": int, "float": float, "bool": bool}
        scalars = [cast[p.kind](a) for a, p in zip(args, self.params) if p.kind != "Tensor"]
        return tensors, scalars

    @staticmethod
    def _signature(tensors: Sequence[torch.Tensor], scalars: Sequence[Any]) -> dict[str, Any]:
        """What the expression is built for: the tensors' dtypes and ranks, the scalars' values."""
        return {"dtypes": [L.dtype_name(t.dtype) for t in tensors], "ranks": [t.dim() for t in tensors],
                "scalars": list(scalars)}

    def _full_args(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """Positional arguments for every parameter (torch may pass defaults as keywords or not at all)."""
        out = list(args)
        for p in self.params[len(args):]:
            out.append(kwargs[p.name] if p.name in kwargs else p.default)
        return out

    def _key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any], list[torch.Tensor]]:
        """The forward kernel's key for these arguments; returns (key, signature, tensors)."""
        tensors, scalars = self._split(self._full_args(args, kwargs))
        for t, p in zip(tensors, [p for p in self.params if p.kind == "Tensor"]):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{self.name}: argument {p.name!r} must be a Tensor, not {type(t).__name__}")
        sig = self._signature(tensors, scalars)
        return L.kernel_key(self.name, {"role": "fwd", **sig}), sig, tensors

    def _resolve(self, key: str, params: dict[str, Any]) -> L.DslKernel:
        """The kernel of a key of this op: the forward, or a recompute/gradient kernel of its plan."""
        sig = {k: params[k] for k in ("dtypes", "ranks", "scalars")}
        if params["role"] == "fwd":
            return L.DslKernel(key, lambda: self._build(sig["ranks"], sig["dtypes"], sig["scalars"]),
                               m_axes=self.m_axes, n_axes=self.n_axes, config=self.config)
        plan = self._plan(sig)
        if isinstance(plan, str):
            raise UnsupportedError(f"{self.name}: no autograd for this expression: {plan}")
        return plan.kernels[key]

    def _build(self, ranks: list[int], dtypes: list[str], scalars: list[Any]) -> tuple[list[te.Tensor], te.Tensor]:
        phs: list[te.Tensor] = []
        for p, rank, dtype in zip([p for p in self.params if p.kind == "Tensor"], ranks, dtypes):
            names = self.dims.get(p.name, [f"{p.name}_{d}" for d in range(rank)])
            if len(names) != rank:
                raise RuntimeError(f"{self.name}: dims[{p.name!r}] names {len(names)} dims ({' '.join(names)}) but "
                                   f"argument {p.name!r} is {rank}-D")
            phs.append(te.placeholder([te.var(n) for n in names], dtype, p.name))
        it_t, it_s = iter(phs), iter(scalars)
        out = self.fn(*[next(it_t) if p.kind == "Tensor" else next(it_s) for p in self.params])
        if not isinstance(out, te.Tensor):
            raise TypeError(f"{self.name}: {self.fn.__name__} must return the output te.Tensor, got "
                            f"{type(out).__name__}")
        return phs, out

    # -------------------------------------------------------------- torch.library hooks
    def _impl(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        key, _, tensors = self._key(args, kwargs)
        return L.run_dsl(key, tensors, op=self.name)

    def _fake(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        key, _, tensors = self._key(args, kwargs)
        spec, phs, out = L.dsl_te(key)
        return L.dsl_output(spec, out, L.bind(self.name, phs, tensors), tensors[0])

    def _setup(self, ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        key, sig, tensors = self._key(inputs, {})
        ctx.key, ctx.sig = key, sig
        ctx.save_for_backward(*tensors)

    def _plan(self, sig: dict[str, Any]) -> _GradPlan | str:
        """The gradient plan for a signature (derived once), or why there is none."""
        skey = json.dumps(sig, sort_keys=True)
        with L.DSL_LOCK:
            if skey not in self._plans:
                spec, phs, out = L.dsl_te(L.kernel_key(self.name, {"role": "fwd", **sig}))
                try:
                    self._plans[skey] = _derive(self.name, sig, phs, out, spec)
                except _NoGrad as e:
                    self._plans[skey] = str(e)
            return self._plans[skey]

    def autograd_reason(self, *args: Any, **kwargs: Any) -> str | None:
        """None when this op's backward is derived for these arguments, else why it is not."""
        plan = self._plan(self._key(args, kwargs)[1])
        return plan if isinstance(plan, str) else None

    def _backward(self, ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        plan = self._plan(ctx.sig)
        if isinstance(plan, str):
            raise UnsupportedError(f"{self.name}: no autograd for this expression: {plan}")
        tensors = list(ctx.saved_tensors)
        tparams = [i for i, p in enumerate(self.params) if p.kind == "Tensor"]
        need = [ctx.needs_input_grad[i] for i in tparams]
        grads: list[torch.Tensor | None] = [None] * len(tensors)
        _, phs, out = L.dsl_te(ctx.key)
        env = L.bind(self.name, phs, tensors)

        def add(i: int, g: torch.Tensor) -> None:
            prev = grads[i]
            grads[i] = g if prev is None else prev + g

        if plan.epilogue is None:
            d_red = grad
        else:
            epi = plan.epilogue
            red32 = torch.ops.alcop.dsl_call(plan.recompute, tensors)
            grid = _grid(plan.out_axes, grad.shape, grad.device)
            readers = list(plan.epilogue_inputs)
            others = {phs[i].name: tensors[i] for i in range(len(tensors)) if i not in readers}

            def epilogue(r: torch.Tensor, *xs: torch.Tensor) -> torch.Tensor:
                ts = {**others, plan.reduction.name: r, **{phs[i].name: x for i, x in zip(readers, xs)}}
                return _full(_TorchEval(env, grid, ts)(epi), grad.shape, grad.device)

            vjp = L.vjp_fn(epilogue, red32, *[tensors[i].float() for i in readers])
            d_red, *d_readers = vjp(grad.float())
            for i, g in zip(readers, d_readers):
                if need[i]:
                    add(i, g)
        for o in plan.operands:
            if not need[o.pos]:
                continue
            g = torch.ops.alcop.dsl_call(o.key, [tensors[o.pos], tensors[o.other], d_red.to(o.dr_dtype)])
            if o.prologue is not None:
                x = tensors[o.pos]
                pgrid = _grid(o.axes, x.shape, x.device)
                name, prologue = phs[o.pos].name, o.prologue
                vjp = L.vjp_fn(lambda a: _full(_TorchEval(env, pgrid, {name: a})(prologue), a.shape, a.device),
                               x.float())
                g = vjp(g)[0]
            add(o.pos, g)
        out_grads = [g.to(t.dtype) if g is not None else None for g, t in zip(grads, tensors)]
        it = iter(out_grads)
        return tuple(next(it) if p.kind == "Tensor" else None for p in self.params)


def op(name: str, *, dims: Mapping[str, str | Sequence[str]] | None = None, config: KernelConfig | None = None,
       m_axes: Sequence[str] | None = None,
       n_axes: Sequence[str] | None = None) -> Callable[[Callable[..., te.Tensor]], DslOp]:
    """Decorator: a DSL function becomes the torch custom op ``name`` ("namespace::op_name").

    Args:
        name: the op's qualified name; ``torch.ops.<namespace>.<op_name>`` calls it too.
        dims: per tensor parameter, its dim names (a list or a space-separated string); a name
            shared between parameters must have one size.
        config: a fixed KernelConfig (default: the dispatcher's per shape, or ``use_config``'s).
        m_axes, n_axes: output axes tiled as rows / columns (default: the last two output axes).
    """
    qualified = _op_name(name)

    def wrap(fn: Callable[..., te.Tensor]) -> DslOp:
        return DslOp(qualified, fn, dims, config, m_axes, n_axes)
    return wrap


def _op_name(name: Any) -> str:
    """"namespace::op_name", each part an ASCII identifier once NFKC-normalised (torch's rule for op
    names, checked here so that a bad name gets a clear ValueError instead of a schema-parser error)."""
    norm = unicodedata.normalize("NFKC", name) if isinstance(name, str) else None
    parts = norm.split("::") if norm is not None else []
    if len(parts) != 2 or not all(p.isascii() and p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        raise ValueError(f"alcop_triton.op(name={name!r}): expected 'namespace::op_name', both parts ASCII Python "
                         "identifiers (after NFKC normalisation) and not keywords")
    return str(norm)
