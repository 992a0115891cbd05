"""Tensor expressions: builders, dtype promotion, validation errors, structural equality, host evaluation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alcop_triton import ScheduleError, te

M, N, K = te.var("M"), te.var("N"), te.var("K")


def _matmul(dtype: str = "float16") -> tuple[te.Tensor, te.Tensor, te.IterVar, te.Tensor]:
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return A, B, k, C


# ----------------------------------------------------------------------------- builders

def test_compute_builds_named_axes_and_reduce_body() -> None:
    A, B, k, C = _matmul()
    assert C.shape == (M, N) and C.ndim == 2 and not C.is_placeholder and A.is_placeholder
    assert [a.name for a in C.op.axes] == ["i", "j"]  # taken from the lambda's parameter names
    assert all(a.kind == "spatial" for a in C.op.axes) and k.kind == "reduce"
    body = C.op.body
    assert isinstance(body, te.Reduce) and body.op == "sum" and body.axes == (k,)
    assert repr(body) == "sum((A[i, k] * B[k, j]), axis=[k])"
    assert [ld.tensor.name for ld in te.loads(body)] == ["A", "B"]
    assert te.free_vars(body) == {"i", "j", "k"}


def test_axis_names_override_lambda_parameters() -> None:
    A = te.placeholder((M, N), "float32", "A")
    T = te.compute((M, N), lambda *ax: A[ax] * 2, "T", axis_names=["row", "col"])
    assert [a.name for a in T.op.axes] == ["row", "col"]
    assert repr(T.op.body) == "(A[row, col] * 2)"


def test_shapes_accept_ints_and_size_expressions() -> None:
    X = te.placeholder((4, M * 2 + 1), "float32", "X")
    assert X.shape[0] == te.Const(4)
    assert te.evaluate(X.shape[1], {"M": 5}) == 11


def test_integer_identities_are_folded_but_float_ones_are_not() -> None:
    # o * 1 - 0 is just o in index math; a float "* 1" may be a deliberate cast point, keep it.
    assert te.binop("*", M, 1) is M and te.binop("+", 0, M) is M and te.binop("-", M, 0) is M
    assert te.binop("//", M, 1) is M
    assert te.binop("+", 2, 3) == te.Const(5)
    A = te.placeholder((M,), "float16", "A")
    assert isinstance(A[0] * 1, te.BinOp)
    assert isinstance(te.binop("-", 0, M), te.BinOp)  # 0 - M is not M


def test_elementwise_helpers_build_the_expected_nodes() -> None:
    A = te.placeholder((M,), "float32", "A")
    x = A[0]
    assert te.relu(x) == te.Unary("relu", x) and te.exp(x).fn == "exp"
    assert te.maximum(x, 0.0) == te.BinOp("max", x, te.Const(0.0))
    assert te.eq(x, 1.0).op == "==" and te.ne(x, 1.0).op == "!="
    assert (x < 1.0).op == "<" and (x >= 1.0).op == ">="
    w = te.where(x > 0.0, x, 0.0)
    assert isinstance(w, te.Where) and w.dtype == "float32"
    assert x.astype("float16").dtype == "float16"


# ----------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("a, b, want", [
    ("float16", "float16", "float16"),
    ("float16", "bfloat16", "float32"),      # no common 16-bit type, as in torch
    ("bfloat16", "float32", "float32"),
    ("float32", "float64", "float64"),
    ("int32", "float16", "float16"),          # floats win over ints
    ("int32", "int64", "int64"),
    ("bool", "int32", "int32"),
    ("bool", "float16", "float16"),
])
def test_promote_table(a: str, b: str, want: str) -> None:
    assert te.promote(a, b) == want and te.promote(b, a) == want


def test_weak_scalars_adopt_the_tensor_dtype() -> None:
    A = te.placeholder((M,), "float16", "A")
    assert (A[0] * 2).dtype == "float16"
    assert (A[0] * 2.5).dtype == "float16"
    assert (2.5 + A[0]).dtype == "float16"
    assert (M * 2).dtype == "int32"
    assert (M * 2.5).dtype == "float32"       # a float scalar with an int makes a float
    assert (M / 2).dtype == "float32"          # true division of ints is float, as in torch
    assert (M // 2).dtype == "int32"
    assert (te.const(2, "float64") * A[0]).dtype == "float64"  # a typed constant is strong


def test_unary_and_reduce_dtypes() -> None:
    A = te.placeholder((M,), "bfloat16", "A")
    assert te.relu(A[0]).dtype == "bfloat16" and te.exp(A[0]).dtype == "bfloat16"
    assert te.exp(M).dtype == "float32" and te.abs(M).dtype == "int32"
    _, _, _, C = _matmul("float16")
    assert C.dtype == "float16"
    _, _, _, C32 = _matmul("float32")
    assert C32.dtype == "float32"


def test_compute_dtype_argument_casts_elementwise_bodies() -> None:
    A = te.placeholder((M,), "float16", "A")
    T = te.compute((M,), lambda i: A[i] * 2, "T", dtype="float32")
    assert T.dtype == "float32" and isinstance(T.op.body, te.Cast) and T.op.body.to == "float32"
    same = te.compute((M,), lambda i: A[i] * 2, "S", dtype="float16")
    assert not isinstance(same.op.body, te.Cast)  # no redundant cast


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("build", [
    lambda: te.placeholder((M,), "float8", "A"),
    lambda: te.placeholder((M,), "half", "A"),
    lambda: te.const(1, "complex64"),
    lambda: te.placeholder((M,), "float32", "A")[0].astype("fp16"),
], ids=["float8", "half", "const", "astype"])
def test_bad_dtype_is_rejected(build) -> None:
    with pytest.raises(ScheduleError, match="dtype .* is not supported"):
        build()


def test_wrong_index_count_names_tensor_and_counts() -> None:
    A = te.placeholder((M, K), "float32", "A")
    i = te.IterVar("i", M)
    with pytest.raises(ScheduleError, match=r"A\[\.\.\.\]: 1 indices for a 2-d tensor"):
        A[i]
    with pytest.raises(ScheduleError, match="3 indices"):
        A[i, i, i]


def test_float_index_is_rejected() -> None:
    A = te.placeholder((M, K), "float32", "A")
    i = te.IterVar("i", M)
    with pytest.raises(ScheduleError, match="dtype float32, expected an integer"):
        A[i, 1.5]
    with pytest.raises(ScheduleError, match="expected an integer"):
        A[i, A[i, 0]]  # a loaded float value cannot index
    with pytest.raises(ScheduleError, match="bool constant"):
        A[i, True]


@pytest.mark.parametrize("build, what", [
    (lambda: te.var("2M"), "var"),
    (lambda: te.var("M N"), "var"),
    (lambda: te.placeholder((M,), "float32", "A-1"), "placeholder"),
    (lambda: te.compute((M,), lambda i: i * 2, "T", axis_names=["x y"]), "axis"),
], ids=["var-digit", "var-space", "placeholder", "axis"])
def test_non_identifier_names_are_rejected(build, what: str) -> None:
    with pytest.raises(ScheduleError, match="identifier"):
        build()


@pytest.mark.parametrize("build", [
    lambda: te.placeholder((M,), "float32", "for"),
    lambda: te.var("lambda"),
    lambda: te.reduce_axis(K, "None"),
    lambda: te.compute((M,), lambda i: i * 2, "class"),
], ids=["placeholder", "var", "reduce_axis", "compute"])
def test_keyword_names_are_rejected_early(build) -> None:
    # regression: 'for' passed str.isidentifier() and only failed in codegen as a CodegenError
    with pytest.raises(ScheduleError, match="not a keyword"):
        build()


def test_reduce_axis_name_is_validated() -> None:
    with pytest.raises(ScheduleError, match="identifier"):
        te.reduce_axis(K, "1k")


def test_shape_errors() -> None:
    with pytest.raises(ScheduleError, match="non-negative integer"):
        te.placeholder((M, -1), "float32", "A")
    with pytest.raises(ScheduleError, match="non-negative integer"):
        te.placeholder((M, 2.5), "float32", "A")
    with pytest.raises(ScheduleError, match="cannot use str"):
        te.placeholder((M, "K"), "float32", "A")


def test_compute_errors() -> None:
    A, B, k, _ = _matmul()
    with pytest.raises(ScheduleError, match="fcompute takes 1 axes but the shape has 2 dims"):
        te.compute((M, N), lambda i: A[i, 0], "T")
    with pytest.raises(ScheduleError, match="te.sum must be the outermost"):
        te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k) + 1, "T")
    with pytest.raises(ScheduleError, match="is not a reduce_axis"):
        te.compute((M, N), lambda i, j: te.sum(A[i, j], axis=i), "T")
    with pytest.raises(ScheduleError, match="where: condition"):
        te.where(A[0, 0], 1.0, 0.0)


def test_schedule_error_is_a_value_error() -> None:
    # except clauses written for torch (ValueError) keep working.
    with pytest.raises(ValueError):
        te.var("")


# ----------------------------------------------------------------------------- equality

def test_structural_equality_and_hashing() -> None:
    assert te.var("M") == te.var("M") and te.var("M") != te.var("N")
    assert hash(te.var("M") * 2) == hash(te.var("M") * 2)
    A = te.placeholder((M, K), "float32", "A")
    i, k = te.IterVar("i", M), te.IterVar("k", K, "reduce")
    assert A[i, k] == A[i, k] and A[i, k] != A[k, i]
    assert te.IterVar("k", K, "reduce") != te.IterVar("k", K, "spatial")  # the kind is part of identity
    assert {A[i, k]: 1}[A[i, k]] == 1


def test_tensors_compare_by_identity() -> None:
    # Two placeholders with equal fields are still different inputs.
    A1 = te.placeholder((M,), "float32", "A")
    A2 = te.placeholder((M,), "float32", "A")
    assert A1 == A1 and A1 != A2 and len({A1, A2}) == 2
    i = te.IterVar("i", M)
    assert A1[i] != A2[i]


# ----------------------------------------------------------------------------- evaluate / substitute

def test_evaluate_size_expressions() -> None:
    e = (M + 2 * K - 3) // 2
    assert te.evaluate(e, {"M": 10, "K": 4}) == (10 + 8 - 3) // 2
    assert te.evaluate(-M + 1, {"M": 3}) == -2
    assert te.evaluate(te.maximum(M, K), {"M": 3, "K": 7}) == 7
    with pytest.raises(ScheduleError, match="size variable 'K' is unbound"):
        te.evaluate(M * K, {"M": 2})
    A = te.placeholder((M,), "float32", "A")
    with pytest.raises(ScheduleError, match="cannot evaluate"):
        te.evaluate(A[0], {"M": 2})


@settings(max_examples=60, deadline=None)
@given(m=st.integers(0, 1000), k=st.integers(1, 1000), c=st.integers(-50, 50))
def test_evaluate_matches_python(m: int, k: int, c: int) -> None:
    e = (M * c + K) % k + te.minimum(M, K) - (M // k)
    assert te.evaluate(e, {"M": m, "K": k}) == (m * c + k) % k + min(m, k) - (m // k)


def test_substitute_replaces_structurally_everywhere() -> None:
    A = te.placeholder((M, K), "float32", "A")
    i, k = te.IterVar("i", M), te.IterVar("k", K, "reduce")
    o = te.IterVar("o", M)
    e = te.where(A[i, k] > 0.0, te.relu(A[i, k]).astype("float16"), A[i, 0])
    out = te.substitute(e, {i: o * 2})
    assert te.free_vars(out) == {"o", "k"}
    assert repr(out) == "where((A[(o * 2), k] > 0.0), relu(A[(o * 2), k]).astype(float16), A[(o * 2), 0])"
    # a whole sub-expression can be the key, and untouched parts stay equal
    assert te.substitute(e, {A[i, k]: te.Const(1.0)}) != e
    assert te.substitute(e, {}) == e


def test_create_schedule_returns_a_schedule_of_the_output() -> None:
    *_, C = _matmul()
    s = te.create_schedule(C)
    assert s.out is C and s.reduction is C and set(s.tensors) == {"A", "B", "C"}
