"""Fuzz cases shared by the CI fuzz tests (``test_fuzz.py``) and the long run (``scripts/fuzz.py``).

Two kinds of case, both drawn with hypothesis:

* ``op_cases()``: a drop-in op (matmul, mm, bmm, addmm, baddbmm, linear, conv1d/2d/3d) with
  tiny shapes (zero-size dims included), float32 or float16, each operand in a random layout
  (contiguous, transposed, strided, expanded, channels-last), conv parameters of every accepted
  kind (ints, tuples, numpy ints, 0-d tensors, 'same'/'valid', groups), alpha/beta including
  inf/nan/0/"2"/1e300, ``out=`` tensors (overlapping ones included), and now and then one
  deliberately invalid argument. ``run_op_case`` runs alcop and torch on equal inputs: results
  are judged against torch's float64 result, exceptions by type (alcop's must be an instance of
  torch's).
* ``kind_cases()``: an op case one of whose tensors is not plain strided memory (``KINDS``: torch's
  negative bit, freed storage, sparse, an efficient zero tensor, an intercepting subclass), judged by
  ``run_kind_case`` at a call site warmed with plain tensors.
* ``name_cases()``: a hostile string (code payloads, path separators, fullwidth letters that
  NFKC-fold onto generated names, keywords, random unicode) used as a size var, tensor, axis,
  reduce axis or kernel name. ``run_name_case`` builds and runs the kernel: the name is either
  refused with a ValueError or produces a correct kernel in a file inside the cache directory,
  and no payload ever runs.
"""

from __future__ import annotations

import builtins
import unicodedata
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

import alcop_triton as at
from alcop_triton import settings, ops, te

OPS = ("matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d", "conv3d")
DTYPES = {"float32": torch.float32, "float16": torch.float16}
TOLERANCE = {"float32": 1e-5, "float16": 1e-2}
"""Largest error allowed, relative to the largest magnitude of the float64 result (normwise)."""

TORCH: dict[str, Callable[..., Any]] = {"matmul": torch.matmul, "mm": torch.mm, "bmm": torch.bmm,
                                        "addmm": torch.addmm, "baddbmm": torch.baddbmm, "linear": F.linear,
                                        "conv1d": F.conv1d, "conv2d": F.conv2d, "conv3d": F.conv3d}

SCALARS: tuple[Any, ...] = (1, 1, 1, 0.5, -2, 0, 0.0, float("inf"), float("-inf"), float("nan"), True,
                            np.float64(1.5), np.int64(3), "tensor(2.)", "2", None, 1e300, 2j, 10 ** 400)
"""alpha/beta values: torch's Numbers (and 0-d tensors, spelled as text so a case stays printable)
and values torch refuses (TypeError for "2"/None, RuntimeError for 1e300 and 2j, OverflowError)."""

PAYLOAD = "x():\n    pass\nimport builtins; builtins.ALCOP_FUZZ_PAYLOAD_RAN = 1\ndef y"


# ----------------------------------------------------------------------------- tensors

@dataclass(frozen=True)
class TensorSpec:
    """A tensor to build at run time: its shape, layout, and the seed of its values."""
    shape: tuple[int, ...]
    layout: str
    seed: int
    dtype: str | None = None  # None: the case's dtype

    def build(self, dtype: torch.dtype) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed)
        dt = DTYPES[self.dtype] if self.dtype else dtype
        shape, lay = self.shape, self.layout
        if lay == "transposed" and len(shape) >= 2:
            return torch.randn(shape[:-2] + (shape[-1], shape[-2]), generator=g).to(dt).transpose(-1, -2)
        if lay == "strided" and shape:
            return torch.randn(shape[:-1] + (2 * shape[-1],), generator=g).to(dt)[..., ::2]
        if lay == "expanded":
            d = next((i for i, s in enumerate(shape) if s > 1), None)
            if d is not None:
                base = shape[:d] + (1,) + shape[d + 1:]
                return torch.randn(base, generator=g).to(dt).expand(shape)
        if lay == "channels_last" and len(shape) in (4, 5):
            fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
            return torch.randn(shape, generator=g).to(dt).contiguous(memory_format=fmt)
        if lay in KINDS:
            return KINDS[lay](torch.randn(shape, generator=g).to(dt))
        return torch.randn(shape, generator=g).to(dt)

    def __repr__(self) -> str:
        dt = f" {self.dtype}" if self.dtype else ""
        return f"T{list(self.shape)}{'' if self.layout == 'contiguous' else ' ' + self.layout}{dt}"


class Intercepting(torch.Tensor):
    """A subclass with a ``__torch_function__`` of its own (it lets torch compute)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return super().__torch_function__(func, types, args, kwargs or {})


def _negative_bit(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a tensor with torch's negative bit (its memory holds ``-t``)."""
    return torch.complex(torch.zeros_like(t.float()), -t.float()).conj().imag.to(t.dtype) \
        if t.dtype != torch.float32 else torch.complex(torch.zeros_like(t), -t).conj().imag


def _freed(t: torch.Tensor) -> torch.Tensor:
    t.untyped_storage().resize_(0)
    return t


KINDS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "negative_bit": _negative_bit,
    "freed": _freed,
    "sparse": lambda t: t.to_sparse(),
    "zero": lambda t: torch._efficientzerotensor(t.shape, dtype=t.dtype),
    "subclass": lambda t: t.as_subclass(Intercepting),
}
"""Tensors that are not plain strided memory (``kind_cases``): torch's negative bit (float16's is
resolved by the cast, so float16 gets none), freed storage, a sparse tensor, an efficient zero tensor,
an intercepting subclass."""


@dataclass(frozen=True)
class OutSpec:
    """An ``out=`` argument: a fresh tensor of the result's shape in a layout ('overlap': stride 0)."""
    layout: str

    def build(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if self.layout == "overlap" and shape and shape[0] > 1:
            return torch.empty((1,) + shape[1:], dtype=dtype).expand(shape)
        if self.layout == "wrong_dtype":
            return torch.empty(shape, dtype=torch.float64)
        if self.layout == "wrong_shape":
            return torch.empty((3,), dtype=dtype)
        if self.layout == "transposed" and len(shape) >= 2:
            return torch.empty(shape[:-2] + (shape[-1], shape[-2]), dtype=dtype).transpose(-1, -2)
        return torch.empty(shape, dtype=dtype)

    def __repr__(self) -> str:
        return f"out({self.layout})"


def _value(v: Any) -> Any:
    """A scalar argument as passed (0-d tensors are built fresh for each call)."""
    if isinstance(v, str) and v.startswith("tensor("):
        return torch.tensor(float(v[7:-1]))
    if isinstance(v, str) and v.startswith("np.int64("):
        return np.int64(int(v[9:-1]))
    if isinstance(v, str) and v.startswith("tensor_int("):
        return torch.tensor(int(v[11:-1]))
    if isinstance(v, tuple):
        return tuple(_value(x) for x in v)
    return v


@dataclass(frozen=True)
class OpCase:
    op: str
    dtype: str
    args: tuple[Any, ...]            # TensorSpec or None (an absent bias)
    kwargs: tuple[tuple[str, Any], ...]

    def materialise(self) -> tuple[list[Any], dict[str, Any]]:
        dt = DTYPES[self.dtype]
        args = [a.build(dt) if isinstance(a, TensorSpec) else a for a in self.args]
        kwargs = {k: _value(v) for k, v in self.kwargs if not isinstance(v, OutSpec)}
        return args, kwargs

    @property
    def out(self) -> OutSpec | None:
        return next((v for k, v in self.kwargs if isinstance(v, OutSpec)), None)

    def __repr__(self) -> str:
        kw = ", ".join(f"{k}={v!r}" for k, v in self.kwargs)
        return f"{self.op}[{self.dtype}]({', '.join(map(repr, self.args))}{', ' + kw if kw else ''})"


# ----------------------------------------------------------------------------- strategies

LAYOUTS = ("contiguous", "contiguous", "transposed", "strided", "expanded")


@st.composite
def _tensor(draw: Any, shape: tuple[int, ...], layouts: tuple[str, ...] = LAYOUTS) -> TensorSpec:
    return TensorSpec(tuple(shape), draw(st.sampled_from(layouts)), draw(st.integers(0, 2 ** 31 - 1)))


def _dim(draw: Any, lo: int = 1, hi: int = 9) -> int:
    """A small size, zero now and then (empty products and reductions)."""
    return draw(st.one_of(st.integers(lo, hi), st.just(0))) if draw(st.integers(0, 19)) == 0 else \
        draw(st.integers(lo, hi))


@st.composite
def _gemm_case(draw: Any, op: str, dtype: str) -> OpCase:
    m, n, k, b = _dim(draw), _dim(draw), _dim(draw, 1, 40), draw(st.integers(1, 3))
    kw: list[tuple[str, Any]] = []
    if op == "matmul":
        ra, rb = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        ba = (draw(st.sampled_from((b, 1))),) if ra == 3 else ()
        bb = (draw(st.sampled_from((b, 1))),) if rb == 3 else ()
        sa = ba + ((m, k) if ra > 1 else (k,))
        sb = bb + ((k, n) if rb > 1 else (k,))
        args: tuple[Any, ...] = (draw(_tensor(sa)), draw(_tensor(sb)))
    elif op in ("mm", "addmm"):
        args = (draw(_tensor((m, k))), draw(_tensor((k, n))))
    elif op in ("bmm", "baddbmm"):
        args = (draw(_tensor((b, m, k))), draw(_tensor((b, k, n))))
    else:  # linear
        lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        w = (k,) if draw(st.integers(0, 9)) == 0 else (n, k)
        bias = draw(st.sampled_from((None, (n,), (1, n)))) if len(w) == 2 else None
        args = (draw(_tensor(lead + (m, k))), draw(_tensor(w)), draw(_tensor(bias)) if bias else None)
    if op in ("addmm", "baddbmm"):
        full = ((b,) if op == "baddbmm" else ()) + (m, n)
        inp = draw(st.sampled_from((full, (n,), (1, n), (m, 1), ())))
        args = (draw(_tensor(inp)),) + args
        kw += [("beta", draw(st.sampled_from(SCALARS))), ("alpha", draw(st.sampled_from(SCALARS)))]
    if op != "linear" and draw(st.integers(0, 5)) == 0:
        kw.append(("out", OutSpec(draw(st.sampled_from(("fresh", "transposed", "overlap", "wrong_dtype",
                                                        "wrong_shape"))))))
    return OpCase(op, dtype, args, tuple(kw))


_INT_KINDS = ("int", "int", "tuple", "np.int64", "tensor_int")


def _int_param(draw: Any, values: list[int], kinds: tuple[str, ...] = _INT_KINDS) -> Any:
    kind = draw(st.sampled_from(kinds))
    if kind == "tuple":
        return tuple(values)
    v = values[0]
    return v if kind == "int" else f"{kind}({v})"


@st.composite
def _conv_case(draw: Any, op: str, dtype: str) -> OpCase:
    nd = int(op[4])
    hi = {1: 9, 2: 6, 3: 4}[nd]
    g = draw(st.integers(1, 3))
    cin, cout = g * draw(st.integers(1, 3)), g * draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3 if nd < 3 else 2)) for _ in range(nd)]
    sp = [draw(st.integers(1, hi)) for _ in range(nd)]
    n = _dim(draw, 1, 2)
    batched = draw(st.integers(0, 5)) > 0
    x_shape = ((n,) if batched else ()) + (cin,) + tuple(sp)
    lay = LAYOUTS + (("channels_last",) * 2 if batched and nd > 1 else ())
    x = draw(_tensor(x_shape, lay))
    w = draw(_tensor((cout, cin // g) + tuple(ks)))
    bias = draw(_tensor((cout,))) if draw(st.booleans()) else None
    stride = [draw(st.integers(1, 2))] * nd
    dil = [draw(st.integers(1, 2))] * nd
    kw: list[tuple[str, Any]] = [("stride", _int_param(draw, stride)), ("dilation", _int_param(draw, dil))]
    pad_kind = draw(st.sampled_from(("int", "int", "same", "valid")))
    if pad_kind == "int":
        kw.append(("padding", _int_param(draw, [draw(st.integers(0, 2))] * nd)))
    else:
        kw.append(("padding", pad_kind))
    kw.append(("groups", _int_param(draw, [g], tuple(k for k in _INT_KINDS if k != "tuple"))))
    return OpCase(op, dtype, (x, w, bias), tuple(kw))


_BAD_PARAMS = (("stride", 0), ("stride", 1.5), ("stride", True), ("stride", (1, 2, 3, 4)), ("padding", -1),
               ("padding", "full"), ("dilation", 0), ("groups", 0), ("groups", 2.0), ("groups", (1,)), ("groups", 7))


def _mutate(draw: Any, case: OpCase) -> OpCase:
    """One deliberately invalid argument: exception types are compared with torch's."""
    what = draw(st.sampled_from(("k", "dtype", "rank", "param")))
    args = list(case.args)
    i = draw(st.integers(0, sum(isinstance(a, TensorSpec) for a in args) - 1))
    idx = [j for j, a in enumerate(args) if isinstance(a, TensorSpec)][i]
    a = args[idx]
    if what == "k" and a.shape:
        args[idx] = TensorSpec(a.shape[:-1] + (a.shape[-1] + 1,), a.layout, a.seed, a.dtype)
    elif what == "dtype":
        args[idx] = TensorSpec(a.shape, a.layout, a.seed, "float16" if case.dtype == "float32" else "float32")
    elif what == "rank":
        args[idx] = TensorSpec((2,) + a.shape, a.layout, a.seed, a.dtype)
    elif case.op.startswith("conv"):
        name, v = draw(st.sampled_from(_BAD_PARAMS))
        return OpCase(case.op, case.dtype, case.args, tuple((k, v if k == name else x) for k, x in case.kwargs))
    return OpCase(case.op, case.dtype, tuple(args), case.kwargs)


@st.composite
def op_cases(draw: Any, ops_: tuple[str, ...] = OPS) -> OpCase:
    op = draw(st.sampled_from(ops_))
    dtype = draw(st.sampled_from(tuple(DTYPES)))
    case = draw(_conv_case(op, dtype) if op.startswith("conv") else _gemm_case(op, dtype))
    return _mutate(draw, case) if draw(st.integers(0, 7)) == 0 else case


@st.composite
def kind_cases(draw: Any, ops_: tuple[str, ...] = OPS) -> OpCase:
    """An ``op_cases`` case without ``out=``, one of whose tensors is of one of ``KINDS``."""
    case = draw(op_cases(ops_))
    slots = [i for i, a in enumerate(case.args) if isinstance(a, TensorSpec)]
    i = draw(st.sampled_from(slots))
    a = case.args[i]
    args = list(case.args)
    args[i] = TensorSpec(a.shape, draw(st.sampled_from(tuple(KINDS))), a.seed, a.dtype)
    return OpCase(case.op, case.dtype, tuple(args), tuple((k, v) for k, v in case.kwargs if k != "out"))


def run_kind_case(case: OpCase) -> Outcome:
    """``run_op_case`` of ``case`` at a warm call site: the same call with plain tensors first, twice
    (a stored signature, then a call-site candidate), then ``case`` itself, twice (a first call, a repeat)."""
    plain = OpCase(case.op, case.dtype, tuple(TensorSpec(a.shape, "contiguous", a.seed, a.dtype)
                                              if isinstance(a, TensorSpec) and a.layout in KINDS else a
                                              for a in case.args), case.kwargs)
    run_op_case(plain), run_op_case(plain)
    if any(isinstance(a, TensorSpec) and a.layout == "freed" and 0 not in a.shape for a in case.args):
        # Not run through torch: torch reads freed memory in some ops (addmm's input on the CPU crashes
        # the process). alcop must raise torch's RuntimeError, at the first call and the repeat.
        for _ in range(2):
            ya, ea, _ = _call(getattr(ops, case.op), case, None)
            if not isinstance(ea, RuntimeError):
                return Outcome("wrong", repr(case), f"freed storage: alcop gave {type(ea).__name__ if ea else ya!r}")
        return Outcome("raised_alike", repr(case), "RuntimeError")
    first = run_op_case(case)
    return first if first.kind not in ("ok", "raised_alike", "documented") else run_op_case(case)


# ----------------------------------------------------------------------------- judging

@dataclass
class Outcome:
    """How one case went: 'ok', 'raised_alike', 'wrong', 'crash', 'type_mismatch' or 'documented'."""
    kind: str
    case: str
    detail: str = ""
    reason: str = ""  # a documented difference's reason


def _reference(case: OpCase, args: list[Any], kwargs: dict[str, Any]) -> torch.Tensor:
    """torch's result in float64 (addmm/baddbmm: beta * input + alpha * product, each term skipped
    when its factor is 0, as torch specifies, and scaled after the sum)."""
    d = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    if case.op in ("addmm", "baddbmm"):
        alpha, beta = (float(v.item() if isinstance(v, torch.Tensor) else v)
                       for v in (kwargs.get("alpha", 1), kwargs.get("beta", 1)))
        prod = torch.matmul(d[1], d[2])
        y = prod * alpha if alpha != 0 else torch.zeros_like(prod)
        return y + d[0] * beta if beta != 0 else y
    return TORCH[case.op](*d, **kwargs)


def _compare(case: OpCase, y: Any, ref: torch.Tensor, want_dtype: torch.dtype) -> str:
    """'' when ``y`` matches the float64 reference; else what differs."""
    if not isinstance(y, torch.Tensor):
        return f"returned {type(y).__name__}"
    if tuple(y.shape) != tuple(ref.shape):
        return f"shape {tuple(y.shape)}, expected {tuple(ref.shape)}"
    if y.dtype != want_dtype:
        return f"dtype {y.dtype}, expected {want_dtype}"
    yd = y.double()
    if y.dtype == torch.float16:  # the reference rounded to the output dtype, for overflow and inf
        ref = ref.to(torch.float16).double()
    nan_y, nan_r = yd.isnan(), ref.isnan()
    if not torch.equal(nan_y, nan_r):
        return f"NaN at {int((nan_y != nan_r).sum())} position(s) where the reference differs"
    inf_y, inf_r = yd.isinf(), ref.isinf()
    if not torch.equal(yd[inf_y | inf_r], ref[inf_y | inf_r]):
        return "infinities differ from the reference"
    fin = ~(nan_r | inf_r)
    if fin.any():
        scale = max(1.0, float(ref[fin].abs().max()))
        err = float((yd[fin] - ref[fin]).abs().max()) / scale
        if not err <= TOLERANCE[case.dtype]:
            return f"error {err:.3g} (relative to max |ref| {scale:.3g}) > {TOLERANCE[case.dtype]}"
    return ""


def _call(fn: Callable[..., Any], case: OpCase, shape: tuple[int, ...] | None) -> tuple[Any, BaseException | None,
                                                                                      torch.Tensor | None]:
    args, kwargs = case.materialise()
    out = None
    if case.out is not None and shape is not None:
        out = kwargs["out"] = case.out.build(shape, DTYPES[case.dtype])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = fn(*args, **kwargs)
        return y, None, out
    except Exception as exc:  # noqa: BLE001 - the point is to compare exceptions
        return None, exc, out


def run_op_case(case: OpCase) -> Outcome:
    """Run ``case`` through alcop and torch and judge it (never raises)."""
    text = repr(case)
    try:
        plain = OpCase(case.op, case.dtype, case.args, tuple((k, v) for k, v in case.kwargs if k != "out"))
        y0, e0, _ = _call(TORCH[case.op], plain, None)
        shape = tuple(y0.shape) if y0 is not None else (1,)
        yt, et, _ = _call(TORCH[case.op], case, shape)
        ya, ea, out_a = _call(getattr(ops, case.op), case, shape)
    except BaseException as exc:  # noqa: BLE001 - e.g. a RecursionError inside the harness itself
        return Outcome("crash", text, f"harness: {type(exc).__name__}: {exc}")
    if et is not None:
        if ea is None:
            return _documented(case, Outcome("type_mismatch", text, f"torch raised {type(et).__name__}: "
                                             f"{str(et)[:200]}; alcop returned"))
        if isinstance(ea, type(et)):
            return Outcome("raised_alike", text, type(et).__name__)
        return _documented(case, Outcome("type_mismatch", text, f"alcop {type(ea).__name__}: {str(ea)[:200]} | "
                                         f"torch {type(et).__name__}: {str(et)[:200]}"))
    if ea is not None:
        return _documented(case, Outcome("crash", text, f"alcop {type(ea).__name__}: {str(ea)[:300]}"))
    if out_a is not None and ya is not out_a:
        return Outcome("wrong", text, "out= given but another tensor returned")
    args, kwargs = case.materialise()
    bad = _compare(case, ya, _reference(case, args, kwargs), yt.dtype)
    return _documented(case, Outcome("wrong", text, bad)) if bad else Outcome("ok", text)


# Differences from torch that are deliberate; each names its reason and has a test in test_fuzz.py.
OVERLAP_REASON = ("torch's bmm, batched and matrix-vector matmul write an out= whose elements share memory without "
                  "complaint, so the result depends on the order of writes; alcop refuses such an out= for every "
                  "product with the RuntimeError torch's mm/addmm/2-D matmul raise")


def _overlap_out(case: OpCase, o: Outcome) -> bool:
    return case.out is not None and case.out.layout == "overlap" and case.op in ("bmm", "matmul") \
        and o.kind == "crash" and "single memory location" in o.detail


EMPTY_DTYPE_REASON = ("torch's convolutions skip the dtype check when the input holds no elements (a batch of 0) "
                      "and return an empty result; alcop checks the dtypes first, for every input")


def _empty_mixed_dtypes(case: OpCase, o: Outcome) -> bool:
    x = case.args[0]
    return case.op.startswith("conv") and o.kind == "crash" and "same dtype" in o.detail \
        and isinstance(x, TensorSpec) and 0 in x.shape


DOCUMENTED: tuple[tuple[Callable[[OpCase, Outcome], bool], str], ...] = (
    (_overlap_out, OVERLAP_REASON), (_empty_mixed_dtypes, EMPTY_DTYPE_REASON))


def _documented(case: OpCase, o: Outcome) -> Outcome:
    for pred, reason in DOCUMENTED:
        if pred(case, o):
            return Outcome("documented", o.case, o.detail, reason)
    return o


# ----------------------------------------------------------------------------- hostile names

HOSTILE_NAMES = (PAYLOAD, "a/b", "../../x", "x.y", "", " ", "1x", "class", "None", "acc", "ａcc", "ｔl", "ｐid",
                 "ｊ", "ｉ", "ｋ", "Ａ", "ｍask_m", "offs_q", "stride_A_0", "tile_a", "__import__", "__class__",
                 "float", "ﬁ", "ℌ", "x\u200b", "é", "e\u0301", "k_0", "k_p1", "M", "N", "K", "i", "j", "k",
                 "A", "B", "C", "x" * 300, "BLOCK_M", "tl", "triton", "num_tiles", "a\x00b", "r\nimport os")
ROLES = ("var", "placeholder", "axis", "reduce_axis", "compute", "kernel")


@dataclass(frozen=True)
class NameCase:
    role: str
    name: str

    def __repr__(self) -> str:
        return f"name[{self.role}]({self.name!r})"


@st.composite
def name_cases(draw: Any) -> NameCase:
    text = draw(st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(min_size=1, max_size=8),
                          st.text(alphabet=st.characters(categories=("Lu", "Ll", "Lo", "Nd", "Pc")), min_size=1,
                                  max_size=4)))
    return NameCase(draw(st.sampled_from(ROLES)), text)


def _matmul_with(role: str, name: str) -> tuple[Any, list[te.Tensor], str | None]:
    pick = lambda r, default: name if role == r else default  # noqa: E731
    M, N = te.var("M"), te.var("N")
    K = te.var(pick("var", "K"))
    A = te.placeholder((M, K), "float32", pick("placeholder", "A"))
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, pick("reduce_axis", "k"))
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), pick("compute", "C"),
                   axis_names=[pick("axis", "i"), "j"])
    s = at.Schedule.from_config(C, at.KernelConfig(block_m=16, block_n=16, block_k=16, smem_stages=1))
    return s, [A, B, C], pick("kernel", None)


def run_name_case(case: NameCase) -> Outcome:
    """The name is refused with a ValueError, or builds a correct kernel inside the cache dir."""
    text = repr(case)
    try:
        try:
            s, args, kname = _matmul_with(case.role, case.name)
            kern = at.build(s, args, name=kname)
        except ValueError as exc:
            if getattr(builtins, "ALCOP_FUZZ_PAYLOAD_RAN", None):
                return Outcome("crash", text, "payload ran")
            return Outcome("raised_alike", text, f"{type(exc).__name__}: {str(exc)[:120]}")
        if getattr(builtins, "ALCOP_FUZZ_PAYLOAD_RAN", None):
            return Outcome("crash", text, "payload ran")
        norm = unicodedata.normalize("NFKC", case.name)
        if not norm.isidentifier():
            return Outcome("wrong", text, "a name that is not an identifier was accepted")
        path = Path(kern._shown().path).resolve()
        if settings.cache_dir().resolve() not in path.parents or not path.stem.isidentifier():
            return Outcome("wrong", text, f"kernel file outside the cache dir or oddly named: {path}")
        # square: a size var renamed onto M or N is that var (legal), and the call must still bind
        a, b = torch.randn(5, 5, dtype=torch.float32), torch.randn(5, 5, dtype=torch.float32)
        y = kern(a, b)
        err = float((y.double() - a.double() @ b.double()).abs().max())
        if not err <= 1e-5 * max(1.0, float((a.double() @ b.double()).abs().max())):
            return Outcome("wrong", text, f"kernel with this name computes wrongly (error {err:.3g})")
        return Outcome("ok", text)
    except Exception as exc:  # noqa: BLE001
        return Outcome("crash", text, f"{type(exc).__name__}: {str(exc)[:300]}")


@dataclass
class Tally:
    """Counts of outcomes and the details of everything that is not ok."""
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.counts[o.kind] = self.counts.get(o.kind, 0) + 1
        if o.kind not in ("ok", "raised_alike"):
            self.problems.append(o)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.problems if o.kind != "documented"]



# ----------------------------------------------------------------------------- tuning records

RECORD_SHAPES: dict[str, tuple[int, ...]] = {
    "matmul": (64, 48, 32), "linear": (64, 48, 32), "bmm": (2, 64, 48, 32),
    "conv1d": (2, 1, 20, 8, 16, 1, 3, 1, 1, 1, 1), "conv2d": (2, 12, 12, 8, 16, 3, 3, 1, 1, 1, 1),
    "conv3d": (2, 6, 6, 6, 8, 16, 3, 3, 3, 1, 1, 1, 1)}
"""A valid workload shape of each op (convolutions with dilation and groups given)."""

CONV_FIELDS = ("n", "h", "w", "ci", "co", "kh", "kw", "stride", "pad", "dilation", "groups")
CONV3D_FIELDS = ("n", "d", "h", "w", "ci", "co", "kd", "kh", "kw", "stride", "pad", "dilation", "groups")
GEMM_FIELDS = {"matmul": ("m", "n", "k"), "linear": ("m", "n", "k"), "bmm": ("b", "m", "n", "k")}

_BAD_INTS: tuple[Any, ...] = (-1, 2 ** 40 + 1, 2 ** 63, 10 ** 400, 1.5, True, "8", None)
_BAD_CONFIG: dict[str, tuple[Any, ...]] = {
    "BLOCK_M": (0, 8, 48, 1024), "BLOCK_N": (0, 8, 48, 1024), "BLOCK_K": (0, 8, 48, 1024), "GROUP_M": (0, 65),
    "num_warps": (0, 3, 32), "num_stages": (0, 9), "REG_STAGES": (0, 5), "REG_SPLIT": (0, 3, 16),
    "ASYNC_COPY": ("", "dma", 1), "PERSISTENT": (1, "yes"), "SPLIT_K": (0, 65, True), "WAVE_TAIL": (1, "no"), "TAIL_SPLIT": (1, "no")}
_BAD_TOP: dict[str, tuple[Any, ...]] = {
    "time_ms": (0, -1.0, None, "1", True, 10 ** 400), "error": ("segfault", 1), "gpu": ("", 3, "H100\n#"),
    "cc": ("", None), "schema": (2, "1"), "torch_ms": (0, -1.0, "1", 10 ** 400), "triton": (3,)}


@dataclass(frozen=True)
class RecordCase:
    """One tuning record (a JSON object) with one field out of range: ``where`` names the field."""
    op: str
    where: str
    record: dict[str, Any] = field(compare=False)

    def line(self) -> str:
        import json
        return json.dumps(self.record)


def valid_record(op: str, **config: Any) -> dict[str, Any]:
    """A record of ``op`` that validation accepts."""
    layout = "nhwc" if op.startswith("conv") else "nt"
    return {"workload": {"op": op, "shape": list(RECORD_SHAPES[op]), "dtype": "float16", "layout": layout},
            "config": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3,
                       "REG_STAGES": 1, "REG_SPLIT": 1, "ASYNC_COPY": "pointer", **config},
            "impl": "alcop", "time_ms": 0.5, "error": None, "gpu": "H100", "device": "", "cc": "9.0", "mma": "",
            "triton": "3", "torch": "2", "alcop": "0", "date": "2025-01-01"}


def bad_records(op: str) -> list[RecordCase]:
    """Every field of a record of ``op`` out of range, one at a time: each shape entry (zero where the op
    needs it positive, stride/dilation/groups 0 included), the workload's other keys, every config key,
    the config/op pairs no kernel runs (a GEMM copying with the convolution's "box"), and the record's own
    keys."""
    import copy
    base = valid_record(op)
    out: list[RecordCase] = []

    def case(where: str, edit: Callable[[dict[str, Any]], None]) -> None:
        r = copy.deepcopy(base)
        edit(r)
        out.append(RecordCase(op, where, r))

    names = CONV3D_FIELDS if op == "conv3d" else CONV_FIELDS if op.startswith("conv") else GEMM_FIELDS[op]
    for i, name in enumerate(names):
        bad = _BAD_INTS + (() if name == "pad" else (0,))
        for v in bad:
            case(f"shape.{name}={v!r}"[:60], lambda r, i=i, v=v: r["workload"]["shape"].__setitem__(i, v))
    if op.startswith("conv"):
        ci = names.index("ci")
        case("groups=3 not dividing ci=8", lambda r: (r["workload"]["shape"].__setitem__(-1, 3),
                                                      r["workload"]["shape"].__setitem__(ci + 1, 15)))
        case("kernel wider than the padded input", lambda r: r["workload"]["shape"].__setitem__(names.index("kw"), 99))
    case("shape too short", lambda r: r["workload"]["shape"].pop())
    case("shape too long", lambda r: r["workload"]["shape"].extend([1, 1, 1]))
    case("shape not a list", lambda r: r["workload"].__setitem__("shape", "64x48x32"))
    for key, values in (("op", ("conv4d", 1, None)), ("dtype", ("float64", "int8", 16)),
                        ("layout", ("nt" if op.startswith("conv") else "nhwc", "NT", "", "ndhwc")),
                        ("extra", (1,))):
        for v in values:
            case(f"workload.{key}={v!r}", lambda r, k=key, v=v: r["workload"].__setitem__(k, v))
    for key, values in _BAD_CONFIG.items():
        for v in values:
            case(f"config.{key}={v!r}", lambda r, k=key, v=v: r["config"].__setitem__(k, v))
    case("config.UNKNOWN=1", lambda r: r["config"].__setitem__("UNKNOWN", 1))
    case("config.reg_split beyond block_k", lambda r: r["config"].update(BLOCK_K=32, REG_SPLIT=4))
    case("config.split_k with persistent", lambda r: r["config"].update(SPLIT_K=2, PERSISTENT=True))
    case("config.wave_tail with block_m 32", lambda r: r["config"].update(BLOCK_M=32, WAVE_TAIL=True))
    case("config.tail_split without wave_tail", lambda r: r["config"].update(TAIL_SPLIT=True))
    if not op.startswith("conv"):
        case("config.ASYNC_COPY='box' on a GEMM", lambda r: r["config"].__setitem__("ASYNC_COPY", "box"))
    for key, values in _BAD_TOP.items():
        for v in values:
            case(f"{key}={v!r}"[:60], lambda r, k=key, v=v: r.__setitem__(k, v))
    case("error with a time", lambda r: r.__setitem__("error", "compile"))
    return out
