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

Derived autograd (``te_autodiff``): for ``out = epilogue(R, other inputs)`` with ``R = sum f(A[...]) * g(B[...])``
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

from . import fastpath, te
from .dsl_kernels import DSL_LOCK, DslKernel, dsl_output, size_env, dsl_te, kernel_key, register_resolver, run_dsl
from .errors import UnsupportedError
from .fallback import vjp_fn
from .ops import route
from .ops.route import OpRoutes
from .records import KernelConfig, dtype_name
from .te_autodiff import GradPlan, NoGrad, TorchEval, broadcast_full, derive, index_grid

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
            kind = SCALAR_KINDS.get(h, h)
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
        self._plans: dict[str, GradPlan | str] = {}
        self._tensors_only = all(p.kind == "Tensor" for p in self.params)
        register_resolver(name, self._resolve)
        self.custom_op = torch.library.custom_op(name, self._impl, mutates_args=(), schema=_schema(self.params))
        self.custom_op.register_fake(self._fake)
        self.custom_op.register_autograd(self._backward, setup_context=self._setup)
        # Eager calls that need autograd (and no tracing) apply this Function instead of the registered
        # op's autograd wrapper: the same implementation and formula, a fraction of the per-call cost.
        # Its forward calls ``_impl`` (the op's implementation), whose fast-path call it stores.
        self._grad = fastpath.grad_function(name.replace("::", "_"), self._impl, self._setup, self._backward,
                                       sum(p.kind == "Tensor" for p in self.params))
        # The routes of a call (``route.call``): the drop-in's, and the registered op's implementation's,
        # which is below torch's dispatcher and autograd.
        self._routes = OpRoutes(self._run, self.custom_op, None, self._grad)
        self._impl_routes = OpRoutes(self._run)
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs or len(args) != len(self.params):
            full = self._arguments(args, kwargs)
            if full is None:  # arguments that do not bind: the registered op says what is wrong
                return self.custom_op(*args, **kwargs)
            args = full
        return self._fast(args, self._routes)

    def _arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Every parameter's argument in order (keywords and defaults filled in), or None when the
        arguments do not bind to the parameters."""
        rest = self.params[len(args):]
        if len(args) > len(self.params) or set(kwargs) - {p.name for p in rest}:
            return None
        if any(p.name not in kwargs and p.default is inspect.Parameter.empty for p in rest):
            return None
        return tuple(self._full_args(args, kwargs))

    def _fast(self, args: tuple[Any, ...], routes: OpRoutes) -> torch.Tensor:
        """The call through ``route.call``, keyed by the tensors and the scalar arguments' values."""
        if self._tensors_only:
            return route.call(self.name, args, (), routes)
        tensors = tuple(a for a, p in zip(args, self.params) if p.kind == "Tensor")
        scalars = tuple(a for a, p in zip(args, self.params) if p.kind != "Tensor")
        registered = routes.registered or routes.direct
        if any(type(v) not in SCALAR_KINDS for v in scalars):  # e.g. a SymInt or a 0-d tensor: not a key
            return registered(*args)
        autograd = routes.autograd
        # the scalars are in the key; the routes take the whole argument list
        return route.call((self.name, scalars), tensors, (), OpRoutes(
            lambda *_: self._run(*args), lambda *_: registered(*args), None,
            None if autograd is None else lambda *_: autograd(*args)))

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
        return {"dtypes": [dtype_name(t.dtype) for t in tensors], "ranks": [t.dim() for t in tensors],
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
        return kernel_key(self.name, {"role": "fwd", **sig}), sig, tensors

    def _resolve(self, key: str, params: dict[str, Any]) -> DslKernel:
        """The kernel of a key of this op: the forward, or a recompute/gradient kernel of its plan."""
        sig = {k: params[k] for k in ("dtypes", "ranks", "scalars")}
        if params["role"] == "fwd":
            return DslKernel(key, lambda: self._build(sig["ranks"], sig["dtypes"], sig["scalars"]),
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
        if kwargs or len(args) != len(self.params):
            return self._run(*args, **kwargs)
        return self._fast(args, self._impl_routes)

    def _run(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        key, _, tensors = self._key(args, kwargs)
        return run_dsl(key, tensors, op=self.name)

    def _fake(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        key, _, tensors = self._key(args, kwargs)
        spec, phs, out = dsl_te(key)
        return dsl_output(spec, out, size_env(self.name, phs, tensors), tensors[0])

    def _setup(self, ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        key, sig, tensors = self._key(inputs, {})
        ctx.key, ctx.sig = key, sig
        ctx.save_for_backward(*tensors)

    def _plan(self, sig: dict[str, Any]) -> GradPlan | str:
        """The gradient plan for a signature (derived once), or why there is none."""
        skey = json.dumps(sig, sort_keys=True)
        with DSL_LOCK:
            if skey not in self._plans:
                spec, phs, out = dsl_te(kernel_key(self.name, {"role": "fwd", **sig}))
                try:
                    self._plans[skey] = derive(self.name, sig, phs, out, spec)
                except NoGrad as e:
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
        _, phs, out = dsl_te(ctx.key)
        env = size_env(self.name, phs, tensors)

        def add(i: int, g: torch.Tensor) -> None:
            prev = grads[i]
            grads[i] = g if prev is None else prev + g

        if plan.epilogue is None:
            d_red = grad
        else:
            epi = plan.epilogue
            red32 = torch.ops.alcop.dsl_call(plan.recompute, tensors)
            grid = index_grid(plan.out_axes, grad.shape, grad.device)
            readers = list(plan.epilogue_inputs)
            others = {phs[i].name: tensors[i] for i in range(len(tensors)) if i not in readers}

            def epilogue(r: torch.Tensor, *xs: torch.Tensor) -> torch.Tensor:
                ts = {**others, plan.reduction.name: r, **{phs[i].name: x for i, x in zip(readers, xs)}}
                return broadcast_full(TorchEval(env, grid, ts)(epi), grad.shape, grad.device)

            vjp = vjp_fn(epilogue, red32, *[tensors[i].float() for i in readers])
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
                pgrid = index_grid(o.axes, x.shape, x.device)
                name, prologue = phs[o.pos].name, o.prologue
                vjp = vjp_fn(lambda a: broadcast_full(TorchEval(env, pgrid, {name: a})(prologue), a.shape, a.device),
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
