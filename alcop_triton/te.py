"""Tensor expressions: the operator-definition language.

    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), "float16", "A")
    B = te.placeholder((K, N), "float16", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")

Extents are expressions over size variables (``te.var``), bound from the tensors' shapes at call
time, so one generated kernel serves every shape; only tile sizes are compile-time constants.
Nodes are frozen dataclasses with structural equality; ``<``, ``>``, ``<=``, ``>=`` build
comparisons and ``te.eq``/``te.ne`` build (in)equality, because ``==`` stays structural.
"""

from __future__ import annotations

import inspect
import keyword
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

from .errors import ScheduleError

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("int32", "int64")
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)
UNARY_FNS = ("exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "abs", "neg")
BINARY_OPS = ("+", "-", "*", "/", "//", "%", "max", "min")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")

ExprLike = Union["Expr", int, float]


def check_name(name: str, what: str) -> str:
    """A name as it will appear in generated kernels and cache paths, NFKC-normalised.

    Python folds identifiers with NFKC when it parses them (fullwidth ``ｊ`` is ``j``), so names
    are compared, and emitted, in that form: two names that Python would read as one must be
    caught here, not by a kernel that silently aliases two axes. Names the generator emits
    (``acc``, ``tl``, ``pid``, ``offs_m``, ...) are refused too.
    """
    if not isinstance(name, str):
        raise ScheduleError(f"{what} name {name!r}: expected a str, got {type(name).__name__}")
    norm = unicodedata.normalize("NFKC", name)
    if not norm.isidentifier() or keyword.iskeyword(norm):
        raise ScheduleError(f"{what} name {name!r}: must be a Python identifier (letters, digits, '_'; not "
                            "starting with a digit) and not a keyword"
                            + (f" (it reads as {norm!r} once NFKC-normalised)" if norm != name else ""))
    from .codegen import reserved_reason
    why = reserved_reason(norm)
    if why:
        seen = f" (read as {norm!r} once NFKC-normalised)" if norm != name else ""
        raise ScheduleError(f"{what} name {name!r}{seen} {why} in generated kernels; rename it")
    return norm


def _check_dtype(dtype: str, what: str) -> str:
    if dtype not in ALL_DTYPES:
        raise ScheduleError(f"{what}: dtype {dtype!r} is not supported; use one of {ALL_DTYPES}")
    return dtype


def promote(a: str, b: str) -> str:
    """Result dtype of a binary op, torch-like: floats win over ints; fp16 with bf16 gives fp32."""
    if a == b:
        return a
    fa, fb = a in FLOAT_DTYPES, b in FLOAT_DTYPES
    if fa and not fb:
        return a
    if fb and not fa:
        return b
    if fa and fb:
        order = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
        if order[a] == order[b]:
            return "float32"
        return a if order[a] > order[b] else b
    return "int64" if "int64" in (a, b) else "int32"


class Expr:
    """Base of every expression node; arithmetic operators build new nodes."""

    @property
    def dtype(self) -> str:
        raise NotImplementedError(type(self).__name__)

    def __add__(self, o: ExprLike) -> Expr: return binop("+", self, o)
    def __radd__(self, o: ExprLike) -> Expr: return binop("+", o, self)
    def __sub__(self, o: ExprLike) -> Expr: return binop("-", self, o)
    def __rsub__(self, o: ExprLike) -> Expr: return binop("-", o, self)
    def __mul__(self, o: ExprLike) -> Expr: return binop("*", self, o)
    def __rmul__(self, o: ExprLike) -> Expr: return binop("*", o, self)
    def __truediv__(self, o: ExprLike) -> Expr: return binop("/", self, o)
    def __rtruediv__(self, o: ExprLike) -> Expr: return binop("/", o, self)
    def __floordiv__(self, o: ExprLike) -> Expr: return binop("//", self, o)
    def __rfloordiv__(self, o: ExprLike) -> Expr: return binop("//", o, self)
    def __mod__(self, o: ExprLike) -> Expr: return binop("%", self, o)
    def __neg__(self) -> Expr: return Unary("neg", self)
    def __lt__(self, o: ExprLike) -> Expr: return Compare("<", self, as_expr(o))
    def __le__(self, o: ExprLike) -> Expr: return Compare("<=", self, as_expr(o))
    def __gt__(self, o: ExprLike) -> Expr: return Compare(">", self, as_expr(o))
    def __ge__(self, o: ExprLike) -> Expr: return Compare(">=", self, as_expr(o))

    def astype(self, dtype: str) -> Expr:
        return Cast(_check_dtype(dtype, "astype"), self)

    def children(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: int | float
    const_dtype: str | None = None  # None: weakly typed, adopts the other operand's dtype

    @property
    def dtype(self) -> str:
        if self.const_dtype:
            return self.const_dtype
        return "int32" if isinstance(self.value, int) else "float32"

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, eq=True)
class Var(Expr):
    """A runtime integer (a size such as M), bound from tensor shapes at call time."""
    name: str

    @property
    def dtype(self) -> str:
        return "int32"

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=True)
class IterVar(Expr):
    """A loop axis: 'spatial' (one per output dim) or 'reduce' (summed over)."""
    name: str
    extent: Expr
    kind: str = "spatial"

    @property
    def dtype(self) -> str:
        return "int32"

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=True)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        # A weakly typed constant adopts the other side's dtype, as a Python scalar does in torch.
        a, b = self.a, self.b
        weak_a = isinstance(a, Const) and a.const_dtype is None
        weak_b = isinstance(b, Const) and b.const_dtype is None
        if weak_a != weak_b:
            strong, weak = (b, a) if weak_a else (a, b)
            assert isinstance(weak, Const)
            if isinstance(weak.value, float) and strong.dtype not in FLOAT_DTYPES:
                return "float32"
            return strong.dtype if self.op != "/" or strong.dtype in FLOAT_DTYPES else "float32"
        if self.op == "/" and a.dtype in INT_DTYPES and b.dtype in INT_DTYPES:
            return "float32"
        return promote(self.a.dtype, self.b.dtype)

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def __repr__(self) -> str:
        if self.op in ("max", "min"):
            return f"{self.op}({self.a!r}, {self.b!r})"
        return f"({self.a!r} {self.op} {self.b!r})"


@dataclass(frozen=True, eq=True)
class Unary(Expr):
    fn: str
    a: Expr

    @property
    def dtype(self) -> str:
        if self.fn in ("neg", "abs", "relu"):
            return self.a.dtype
        return self.a.dtype if self.a.dtype in FLOAT_DTYPES else "float32"

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)

    def __repr__(self) -> str:
        return f"{self.fn}({self.a!r})"


@dataclass(frozen=True, eq=True)
class Cast(Expr):
    to: str
    a: Expr

    @property
    def dtype(self) -> str:
        return self.to

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)

    def __repr__(self) -> str:
        return f"{self.a!r}.astype({self.to})"


@dataclass(frozen=True, eq=True)
class Compare(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        return "bool"

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def __repr__(self) -> str:
        return f"({self.a!r} {self.op} {self.b!r})"


@dataclass(frozen=True, eq=True)
class Where(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        return BinOp("+", self.a, self.b).dtype

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.a, self.b)

    def __repr__(self) -> str:
        return f"where({self.cond!r}, {self.a!r}, {self.b!r})"


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """``tensor[indices]``. An index outside the tensor reads 0 (how padding is expressed)."""
    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def children(self) -> tuple[Expr, ...]:
        return self.indices

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


@dataclass(frozen=True, eq=True)
class Reduce(Expr):
    op: str
    body: Expr
    axes: tuple[IterVar, ...]

    @property
    def dtype(self) -> str:
        return self.body.dtype

    def children(self) -> tuple[Expr, ...]:
        return (self.body,)

    def __repr__(self) -> str:
        return f"{self.op}({self.body!r}, axis=[{', '.join(a.name for a in self.axes)}])"


@dataclass(frozen=True, eq=False)
class PlaceholderOp:
    pass


@dataclass(frozen=True, eq=False)
class ComputeOp:
    axes: tuple[IterVar, ...]
    body: Expr


@dataclass(frozen=True, eq=False)
class Tensor:
    """A named tensor: an input (placeholder) or the result of ``compute``. Identity-compared."""
    name: str
    shape: tuple[Expr, ...]
    dtype: str
    op: PlaceholderOp | ComputeOp = field(repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    def __getitem__(self, idx: ExprLike | Sequence[ExprLike]) -> Load:
        indices = tuple(as_expr(i) for i in (idx if isinstance(idx, tuple) else (idx,)))
        if len(indices) != self.ndim:
            raise ScheduleError(f"{self.name}[...]: {len(indices)} indices for a {self.ndim}-d tensor")
        for i in indices:
            if i.dtype not in INT_DTYPES:
                raise ScheduleError(f"{self.name}[...]: index {i!r} has dtype {i.dtype}, expected an integer expression")
        return Load(self, indices)

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


# ----------------------------------------------------------------------------- builders

def as_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise ScheduleError(f"bool constant {x!r} is not an expression; use a comparison")
    if isinstance(x, (int, float)):
        return Const(x)
    raise ScheduleError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")


def binop(op: str, a: ExprLike, b: ExprLike) -> Expr:
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, Const) and isinstance(b, Const) and a.const_dtype is None and b.const_dtype is None:
        return Const(_fold(op, a.value, b.value))
    # Identities keep generated index math readable (o * 1 - 0 is just o); only exact ones, on ints.
    if isinstance(b, Const) and b.const_dtype is None and a.dtype in INT_DTYPES and isinstance(b.value, int):
        if (op in ("*", "//") and b.value == 1) or (op in ("+", "-") and b.value == 0):
            return a
    if isinstance(a, Const) and a.const_dtype is None and b.dtype in INT_DTYPES and isinstance(a.value, int):
        if (op == "*" and a.value == 1) or (op == "+" and a.value == 0):
            return b
    return BinOp(op, a, b)


def _fold(op: str, x: int | float, y: int | float) -> int | float:
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x / y,
            "//": lambda: x // y, "%": lambda: x % y, "max": lambda: max(x, y), "min": lambda: min(x, y)}[op]()


def var(name: str) -> Var:
    """A runtime size variable (M, N, K, batch, ...)."""
    return Var(check_name(name, "var"))


def _shape(shape: Sequence[ExprLike], what: str) -> tuple[Expr, ...]:
    out = tuple(as_expr(s) for s in shape)
    for s in out:
        if s.dtype not in INT_DTYPES or (isinstance(s, Const) and s.value < 0):
            raise ScheduleError(f"{what}: shape entry {s!r} must be a non-negative integer expression")
        check_int_constants(s, f"{what}: shape entry {s!r}", "int32")
    return out


INT_RANGES: dict[str, tuple[int, int]] = {"int32": (-2 ** 31, 2 ** 31), "int64": (-2 ** 63, 2 ** 63)}
"""Half-open value ranges of the integer dtypes a constant may take in a kernel."""


def check_int_constants(e: Expr, where: str, int_dtype: str | None = None) -> None:
    """Refuse an integer constant of ``e`` that the kernel could not hold (ScheduleError naming ``where``,
    the value and the rule), at build rather than at the first call: a constant in index or size
    arithmetic (an index, or an operand of int32 sizes and axes) is int32 there, and Triton takes any
    other integer literal as int64. ``int_dtype``: the integer dtype ``e`` is computed in, if any."""
    if isinstance(e, Const):
        if isinstance(e.value, int):
            dt = e.const_dtype if e.const_dtype in INT_RANGES else int_dtype or "int64"
            lo, hi = INT_RANGES[dt]
            if not lo <= e.value < hi:
                rule = (f"a constant of dtype {dt}" if e.const_dtype == dt
                        else "index and size arithmetic is int32" if dt == "int32"
                        else "an integer literal is int64 in Triton (write a float, e.g. 2.0 ** 63, if it is one)")
                raise ScheduleError(f"{where}: integer constant {e.value} is outside {dt}'s range [{lo}, {hi}): {rule}")
        return
    int_dtype_of: Callable[[Expr], str | None] = lambda x: x.dtype if x.dtype in INT_RANGES else None  # noqa: E731
    inner: list[str | None]
    if isinstance(e, Load):
        inner = ["int32" for _ in e.indices]
    elif isinstance(e, Compare):
        inner = [int_dtype_of(BinOp("+", e.a, e.b))] * 2
    elif isinstance(e, Where):
        inner = [None, int_dtype_of(e), int_dtype_of(e)]
    elif isinstance(e, (BinOp, Unary)):
        inner = [int_dtype_of(e) for _ in e.children()]
    else:
        inner = [None for _ in e.children()]
    for child, child_dtype in zip(e.children(), inner):
        check_int_constants(child, where, child_dtype)


def placeholder(shape: Sequence[ExprLike], dtype: str = "float32", name: str = "X") -> Tensor:
    """An input tensor of the given shape (ints or ``te.var`` sizes) and dtype."""
    name = check_name(name, "placeholder")
    return Tensor(name, _shape(shape, f"placeholder {name!r}"), _check_dtype(dtype, f"placeholder {name!r}"), PlaceholderOp())


def reduce_axis(extent: ExprLike, name: str = "k") -> IterVar:
    """A reduction axis over ``range(extent)``."""
    return IterVar(check_name(name, "reduce_axis"), _shape((extent,), f"reduce_axis {name!r}")[0], "reduce")


def sum(expr: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:  # noqa: A001 - te.sum, as in TVM
    """Sum ``expr`` over reduction axes. 16-bit float products accumulate in float32."""
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    for a in axes:
        if not isinstance(a, IterVar) or a.kind != "reduce":
            raise ScheduleError(f"sum(axis=...): {a!r} is not a reduce_axis")
    return Reduce("sum", as_expr(expr), axes)


def compute(shape: Sequence[ExprLike], fcompute: Callable[..., ExprLike], name: str = "T",
            dtype: str | None = None, axis_names: Sequence[str] | None = None) -> Tensor:
    """A tensor whose element at the output axes is ``fcompute(*axes)``.

    Axes take the names of ``fcompute``'s parameters (or ``axis_names``), so generated code reads
    like the definition.
    """
    shp = _shape(shape, f"compute {name!r}")
    params = list(axis_names) if axis_names is not None else list(inspect.signature(fcompute).parameters)
    name = check_name(name, "compute")
    params = [check_name(p, f"compute {name!r}: axis") for p in params]
    if len(params) != len(shp):
        raise ScheduleError(f"compute {name!r}: fcompute takes {len(params)} axes but the shape has {len(shp)} dims")
    axes = tuple(IterVar(p, e, "spatial") for p, e in zip(params, shp))
    body = as_expr(fcompute(*axes))
    if isinstance(body, Reduce) is False and _contains_reduce(body):
        raise ScheduleError(f"compute {name!r}: te.sum must be the outermost node of the body")
    _check_body_names(name, axes, body)
    check_int_constants(body, f"compute {name!r}: {body!r}")
    if dtype is not None:
        _check_dtype(dtype, f"compute {name!r}")
        if isinstance(body, Reduce):
            out_dtype = dtype
        else:
            body = body if body.dtype == dtype else Cast(dtype, body)
            out_dtype = dtype
    else:
        out_dtype = body.dtype
    return Tensor(name, shp, out_dtype, ComputeOp(axes, body))


def _check_body_names(name: str, axes: tuple[IterVar, ...], body: Expr) -> None:
    """Every name the kernel of ``name`` declares (output, axes, reduce axes, input tensors, size
    vars) belongs to one object: two that Python reads as one would alias loop indices or pointers."""
    owners: dict[str, tuple[object, str]] = {}

    def claim(nm: str, obj: object, what: str) -> None:
        prev, prev_what = owners.setdefault(nm, (obj, what))
        if prev is not obj and prev != obj:
            raise ScheduleError(f"compute {name!r}: {what} and {prev_what} are both named {nm!r}; names must be "
                                "unique (compared after NFKC normalisation, as Python compares identifiers)")

    claim(name, object(), "the output tensor")
    sizes = [*(a.extent for a in axes)]
    for i, a in enumerate(axes):  # by position: two axes of one extent are equal as expressions
        claim(a.name, i, f"axis {i} ({a.name!r})")
    for n in walk(body):
        if isinstance(n, Reduce):
            if len(set(n.axes)) != len(n.axes):
                raise ScheduleError(f"compute {name!r}: sum(axis=...) names a reduce axis twice: {list(n.axes)}")
            for r in n.axes:
                claim(r.name, r, f"reduce axis {r.name!r}")
                sizes.append(r.extent)
        elif isinstance(n, Load):
            claim(n.tensor.name, n.tensor, f"input tensor {n.tensor.name!r}")
            sizes += n.tensor.shape
    for v in (x for e in sizes for x in walk(e) if isinstance(x, Var)):
        claim(v.name, v, f"size var {v.name!r}")


def _contains_reduce(e: Expr) -> bool:
    return isinstance(e, Reduce) or any(_contains_reduce(c) for c in e.children())


def _unary(fn: str) -> Callable[[ExprLike], Expr]:
    def build(x: ExprLike) -> Expr:
        return Unary(fn, as_expr(x))
    build.__name__ = fn
    build.__doc__ = f"Elementwise {fn}."
    return build


exp, log, sqrt, tanh = _unary("exp"), _unary("log"), _unary("sqrt"), _unary("tanh")
sigmoid, relu, gelu, silu, abs = _unary("sigmoid"), _unary("relu"), _unary("gelu"), _unary("silu"), _unary("abs")  # noqa: A001


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binop("max", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binop("min", a, b)


def eq(a: ExprLike, b: ExprLike) -> Expr:
    return Compare("==", as_expr(a), as_expr(b))


def ne(a: ExprLike, b: ExprLike) -> Expr:
    return Compare("!=", as_expr(a), as_expr(b))


def where(cond: Expr, a: ExprLike, b: ExprLike) -> Expr:
    if cond.dtype != "bool":
        raise ScheduleError(f"where: condition {cond!r} has dtype {cond.dtype}, expected a comparison")
    return Where(cond, as_expr(a), as_expr(b))


def const(value: int | float, dtype: str) -> Const:
    return Const(value, _check_dtype(dtype, "const"))


# ----------------------------------------------------------------------------- traversal helpers

def walk(e: Expr):
    """Pre-order traversal of an expression tree."""
    yield e
    for c in e.children():
        yield from walk(c)


def loads(e: Expr) -> list[Load]:
    return [n for n in walk(e) if isinstance(n, Load)]


def free_vars(e: Expr) -> set[str]:
    """Names of size vars and iter vars (and their extents' vars) an expression uses."""
    out: set[str] = set()
    for n in walk(e):
        if isinstance(n, (Var, IterVar)):
            out.add(n.name)
    return out


def evaluate(e: Expr, env: dict[str, int]) -> int | float:
    """Evaluate an integer size expression with bound variables (host side)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, (Var, IterVar)):
        if e.name not in env:
            raise ScheduleError(f"size variable {e.name!r} is unbound")
        return env[e.name]
    if isinstance(e, BinOp):
        return _fold(e.op, evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Unary) and e.fn == "neg":
        return -evaluate(e.a, env)
    raise ScheduleError(f"cannot evaluate {e!r} on the host")


def substitute(e: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """Replace sub-expressions (structurally matched) throughout ``e``."""
    if e in mapping:
        return mapping[e]
    if isinstance(e, BinOp):
        return BinOp(e.op, substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, Unary):
        return Unary(e.fn, substitute(e.a, mapping))
    if isinstance(e, Cast):
        return Cast(e.to, substitute(e.a, mapping))
    if isinstance(e, Compare):
        return Compare(e.op, substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, Where):
        return Where(substitute(e.cond, mapping), substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, Load):
        return Load(e.tensor, tuple(substitute(i, mapping) for i in e.indices))
    if isinstance(e, Reduce):
        return Reduce(e.op, substitute(e.body, mapping), e.axes)
    return e


def create_schedule(out: Tensor):
    """Start a schedule for the kernel that produces ``out`` (see ``alcop_triton.schedule``)."""
    from .schedule import Schedule
    return Schedule(out)
