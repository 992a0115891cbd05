"""Tensors that are not plain strided memory: torch's negative bit, freed storage, nested, sparse,
quantized, meta and zero tensors, intercepting subclasses. Each goes to torch (its result or its
exception type) on a first call and at a call site that already has a fast-path candidate, with the
call-site check in Python and compiled; conv outputs take torch's strides; a row-varying bias fuses
with an activation as torch computes it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from conftest import randn

import alcop_triton as at
from alcop_triton import fastpath
from alcop_triton.ops import route

pytestmark = [pytest.mark.interpreter, pytest.mark.filterwarnings("ignore::UserWarning")]

NATIVE = fastpath.native()
SITE_CHECKS = [pytest.param(route._site_hit_py, id="python"),
               pytest.param(NATIVE.site_hit if NATIVE is not None else None, id="native",
                            marks=pytest.mark.skipif(NATIVE is None, reason="no C compiler"))]


@pytest.fixture(params=SITE_CHECKS)
def site_check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    fastpath.invalidate()
    monkeypatch.setattr(route, "_site_hit", request.param)
    monkeypatch.setattr(route, "_site_hit_built", True)


def negbit(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a tensor that carries torch's negative bit (its memory holds ``-t``)."""
    y = torch.complex(torch.zeros_like(t), -t).conj().imag
    assert y.is_neg() and torch.equal(y, t)
    return y


def freed(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.untyped_storage().resize_(0)
    return t


# op, its torch twin, argument builder (float32, small)
CASES: dict[str, tuple[Callable[..., Any], Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "matmul": (at.matmul, torch.matmul, lambda: (randn(5, 7), randn(7, 3, seed=1))),
    "mm": (at.mm, torch.mm, lambda: (randn(5, 7), randn(7, 3, seed=1))),
    "bmm": (at.bmm, torch.bmm, lambda: (randn(2, 5, 7), randn(2, 7, 3, seed=1))),
    "addmm": (at.addmm, torch.addmm, lambda: (randn(5, 3, seed=2), randn(5, 7), randn(7, 3, seed=1))),
    "baddbmm": (at.baddbmm, torch.baddbmm, lambda: (randn(2, 5, 3, seed=2), randn(2, 5, 7), randn(2, 7, 3, seed=1))),
    "linear": (at.linear, F.linear, lambda: (randn(5, 7), randn(3, 7, seed=1), randn(3, seed=2))),
    "conv1d": (at.conv1d, F.conv1d, lambda: (randn(1, 2, 6), randn(3, 2, 2, seed=1), randn(3, seed=2))),
    "conv2d": (at.conv2d, F.conv2d, lambda: (randn(1, 2, 5, 4), randn(3, 2, 2, 2, seed=1), randn(3, seed=2))),
    "conv3d": (at.conv3d, F.conv3d, lambda: (randn(1, 2, 3, 3, 3), randn(3, 2, 2, 2, 2, seed=1), randn(3, seed=2))),
}


def _with(args: tuple[torch.Tensor, ...], i: int, f: Callable[[torch.Tensor], torch.Tensor]) -> tuple[Any, ...]:
    return tuple(f(a) if j == i else a for j, a in enumerate(args))


@pytest.mark.parametrize("warm", [False, True], ids=["first_call", "warm_site"])
@pytest.mark.parametrize("op", list(CASES))
def test_negative_bit_is_read_as_its_values(op: str, warm: bool, site_check: None, fallbacks: list) -> None:
    fn, torch_fn, make = CASES[op]
    args = make()
    if warm:  # a stored signature and a call-site candidate for the plain tensors
        fn(*args)
        fn(*args)
    for i in range(len(args)):
        flagged = _with(args, i, negbit)
        want = torch_fn(*args)
        for _ in range(2):  # a first call of the flagged signature, then its repeat
            got = fn(*flagged)
            assert torch.allclose(got, want, atol=1e-5), (op, i)


@pytest.mark.parametrize("warm", [False, True], ids=["first_call", "warm_site"])
@pytest.mark.parametrize("op", list(CASES))
def test_freed_storage_raises_torchs_error(op: str, warm: bool, site_check: None, fallbacks: list) -> None:
    fn, torch_fn, make = CASES[op]
    args = make()
    if warm:
        fn(*args)
        fn(*args)
    for i in range(len(args)):
        dead = _with(args, i, freed)
        # torch raises for some of these and reads the missing memory for others (addmm's input on the
        # CPU crashes the process): alcop raises torch's exception type for all of them.
        for _ in range(2):
            with pytest.raises(RuntimeError, match="no memory to read"):
                fn(*dead)


def test_freed_view_at_an_offset_raises_on_a_first_call(site_check: None, fallbacks: list) -> None:
    base = randn(64, 7)
    a = base[40:45]
    b = randn(7, 3, seed=1)
    base.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="argument 'input' has no memory to read"):
        at.matmul(a, b)


@pytest.mark.parametrize("offset_rows", [1, 4097, 70000], ids=["4B", "64KiB", "1MiB"])
def test_freed_view_at_any_offset_misses_a_warm_site(offset_rows: int, site_check: None, fallbacks: list) -> None:
    # A view into freed storage points at its offset in bytes: past LIVE_ADDRESS for a large one, so
    # the site check computes the storage's start (route.address_bits), natively and in Python.
    b = randn(4, 3, seed=1)
    live = randn(offset_rows + 5, 4)
    for _ in range(3):  # a stored signature and a call-site candidate for a live view at this offset
        at.matmul(live[offset_rows:], b)
    base = randn(offset_rows + 5, 4, seed=2)
    view = base[offset_rows:]
    assert view.data_ptr() % 16 == live[offset_rows:].data_ptr() % 16
    base.untyped_storage().resize_(0)
    assert view.data_ptr() == offset_rows * 16
    for _ in range(2):
        with pytest.raises(RuntimeError, match="no memory to read"):
            at.matmul(view, b)


def test_address_bits_tells_freed_storage_by_its_start() -> None:
    t = randn(70000, 4)
    view = t[65536:]
    assert route.address_bits(view) == view.data_ptr() & 15
    t.untyped_storage().resize_(0)
    assert view.data_ptr() >= route.LIVE_ADDRESS  # the address alone would pass for a live one
    assert route.address_bits(view) == 16 and route.address_bits(t) == 16
    assert route.address_bits(torch.empty(0)) == 16


_NESTED_SCRIPT = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    import torch, torch.nn.functional as F
    import alcop_triton as at
    from alcop_triton.ops import route
    if sys.argv[1] == "python":
        route._site_hit, route._site_hit_built = route._site_hit_py, True
    w, b = torch.randn(3, 8), torch.randn(3)
    x = torch.randn(5, 8)
    for _ in range(3):  # a stored signature and a call-site candidate
        at.linear(x, w, b)
    nt = torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)])
    got, want = at.linear(nt, w, b), F.linear(nt, w, b)
    assert all(torch.allclose(g, e) for g, e in zip(got.unbind(), want.unbind()))
    with at.patched():
        got = F.linear(nt, w, b)
    assert all(torch.allclose(g, e) for g, e in zip(got.unbind(), want.unbind()))
    for _ in range(3):
        at.matmul(x, w.t())
    try:
        at.matmul(nt, w.t())
    except RuntimeError:
        pass  # torch's own error: "Expected both to be nested"
    else:
        raise AssertionError("torch raises for this matmul")
    print("ok")
""")


@pytest.mark.parametrize("check", ["python", "native"])
def test_nested_tensor_at_a_warm_call_site_goes_to_torch(check: str) -> None:
    # In a child process: the failure this guards against is the process aborting (SIGABRT).
    r = subprocess.run([sys.executable, "-c", _NESTED_SCRIPT, check], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-2000:])


class Intercepting(torch.Tensor):
    """A subclass that sees every torch call on it (and lets torch compute)."""
    seen: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.seen.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_other_kinds_get_torchs_result_or_exception_type(site_check: None, fallbacks: list) -> None:
    a, w, b = randn(5, 8), randn(3, 8, seed=1), randn(3, seed=2)
    at.linear(a, w, b), at.linear(a, w, b)  # warm site
    kinds: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "coo": lambda t: t.to_sparse(),
        "csr": lambda t: t.to_sparse_csr() if t.dim() == 2 else t.to_sparse(),
        "mkldnn": lambda t: t.to_mkldnn(),
        "quantized": lambda t: torch.quantize_per_tensor(t, 0.1, 0, torch.quint8),
        "meta": lambda t: t.to("meta"),
        "zero": lambda t: torch._efficientzerotensor(t.shape),
    }
    for name, make in kinds.items():
        for i in range(2):
            args = _with((a, w, b), i, make)
            try:
                want: Any = F.linear(*args)
            except Exception as e:  # noqa: BLE001
                with pytest.raises(type(e)):
                    at.linear(*args)
                continue
            got = at.linear(*args)
            assert got.device == want.device, name
            if name != "meta":  # torch's result with a meta operand holds no values to compare
                assert torch.allclose(got.to_dense() if got.layout != torch.strided else got, want.to_dense()
                                      if want.layout != torch.strided else want, atol=1e-5), name


def test_quantized_input_raises_torchs_not_implemented(site_check: None, fallbacks: list) -> None:
    q = torch.quantize_per_tensor(randn(1, 2, 5, 5), 0.1, 0, torch.quint8)
    with pytest.raises(NotImplementedError):
        at.conv2d(q, randn(3, 2, 3, 3))
    with pytest.raises(NotImplementedError):
        at.matmul(torch.quantize_per_tensor(randn(4, 8), 0.1, 0, torch.quint8), randn(8, 3))


def test_meta_mixed_with_cpu_computes_as_torch(fallbacks: list) -> None:
    a, m = randn(4, 8), torch.empty(8, 3, device="meta")
    for fn, tf in ((at.matmul, torch.matmul), (at.mm, torch.mm)):
        got, want = fn(a, m), tf(a, m)
        assert got.device == want.device and got.shape == want.shape
    got = at.linear(torch.empty(4, 8, device="meta"), randn(3, 8))
    assert got.device.type == "meta" and got.shape == (4, 3)


def test_a_subclass_with_its_own_torch_function_sees_the_call(site_check: None, fallbacks: list) -> None:
    a, b = randn(5, 7), randn(7, 3, seed=1)
    at.matmul(a, b), at.matmul(a, b)
    Intercepting.seen.clear()
    y = at.matmul(a.as_subclass(Intercepting), b)
    assert type(y) is Intercepting and Intercepting.seen and torch.allclose(y.as_subclass(torch.Tensor), a @ b)


def test_dsl_op_reads_negative_bit_as_values() -> None:
    @at.op("test_flags::matmul")
    def product(x: at.te.Tensor, w: at.te.Tensor) -> at.te.Tensor:
        k = at.te.reduce_axis(x.shape[1], "k")
        return at.te.compute((x.shape[0], w.shape[1]), lambda i, j: at.te.sum(x[i, k] * w[k, j], axis=k), "y")
    x, w = randn(4, 5), randn(5, 3, seed=1)
    want = x @ w
    for _ in range(2):
        assert torch.allclose(product(negbit(x), w), want, atol=1e-5)
        assert torch.allclose(product(x, negbit(w)), want, atol=1e-5)
    with pytest.raises(RuntimeError, match="storage"):
        product(freed(x), w)


# ----------------------------------------------------------------------------- conv output strides

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", ["conv3d_cl3d_input", "conv2d_cl_weight", "conv2d_cl_input", "conv3d_cl3d_weight",
                                  "conv2d_depthwise_cl_weight", "conv1d"])
def test_conv_output_strides_are_torchs(case: str, dtype: torch.dtype) -> None:
    cl = {4: torch.channels_last, 5: torch.channels_last_3d}
    nd = int(case[4])
    groups = 3 if "depthwise" in case else 1
    x = randn(2, 3, *([5] * nd)).to(dtype)
    w = randn(3 if groups > 1 else 4, 3 // groups, *([2] * nd), seed=1).to(dtype)
    if "input" in case:
        x = x.contiguous(memory_format=cl[nd + 2])
    if "weight" in case:
        w = w.contiguous(memory_format=cl[nd + 2])
    fn, tf = {1: (at.conv1d, F.conv1d), 2: (at.conv2d, F.conv2d), 3: (at.conv3d, F.conv3d)}[nd]
    want = tf(x, w, groups=groups)
    for _ in range(2):  # first call, then the stored entry's output
        got = fn(x, w, groups=groups)
        assert got.stride() == want.stride(), (got.stride(), want.stride())
        assert torch.allclose(got.float(), want.float(), atol=1e-2 if dtype == torch.float16 else 1e-5)


# ----------------------------------------------------------------------------- linear's bias with activation

@pytest.mark.parametrize("bias_shape", [(5, 3), (5, 1), (1, 5, 3), (6, 3)])
def test_row_varying_bias_with_activation_is_torchs(bias_shape: tuple[int, ...]) -> None:
    a, w, bias = randn(5, 7), randn(3, 7, seed=1), randn(*bias_shape, seed=2)
    try:
        want = F.gelu(F.linear(a, w, bias))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            at.linear(a, w, bias, activation="gelu")
        return
    got = at.linear(a, w, bias, activation="gelu")  # no fallback to torch (the fallbacks fixture)
    assert torch.allclose(got, want, atol=1e-5)


def test_a_refused_call_that_torch_computes_goes_to_torch(fallbacks: list) -> None:
    from alcop_triton import fallback
    want = torch.ones(2)
    refusal = RuntimeError("linear(): expected input and bias to have the same dtype")
    assert fallback.torch_decides("linear", refusal, lambda: want) is want
    assert any("torch's function computes this call" in reason for _, reason in fallbacks)


def test_a_refused_call_that_torch_refuses_raises_alcops_message() -> None:
    # torch's CPU linear refuses a bias of another dtype; alcop's message names both arguments
    x, w, b = randn(2, 3, 4), randn(5, 4, seed=1), randn(5, seed=2).to(torch.bfloat16)
    with pytest.raises(RuntimeError):
        F.linear(x, w, b)
    with pytest.raises(RuntimeError, match=r"input.dtype=float32 and bias.dtype=bfloat16"):
        at.linear(x, w, b)
    with pytest.raises(RuntimeError, match=r"input.shape=\(18,\) does not broadcast"):
        at.addmm(randn(18), randn(7, 16), randn(16, 16, seed=1), beta=0)


@pytest.mark.parametrize("op", ["addmm", "baddbmm"])
def test_beta_zero_input_that_requires_grad_gets_torchs_zero_gradient(op: str, fallbacks: list) -> None:
    fn, torch_fn, make = CASES[op]
    args = make()
    inp = args[0].clone().requires_grad_()
    got, want = fn(inp, *args[1:], beta=0), torch_fn(inp, *args[1:], beta=0)
    assert got.requires_grad and want.requires_grad
    assert torch.allclose(got, want, atol=1e-5)
    (g,) = torch.autograd.grad(got.sum(), inp)
    assert torch.equal(g, torch.zeros_like(inp))


AUTOCAST_OPS = ["matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d", "conv3d"]


@pytest.mark.parametrize("warm", [False, True], ids=["first_call", "warm_site"])
@pytest.mark.parametrize("op", AUTOCAST_OPS)
def test_drop_ins_under_autocast_compute_in_its_dtype(op: str, warm: bool, site_check: None) -> None:
    # torch.autocast casts these functions' floating arguments to its dtype; the drop-ins do the same
    # (amp.cast), on a first call and at a call site warmed outside autocast
    fn, torch_fn, make = CASES[op]
    args = make()
    if warm:
        fn(*args)
        fn(*args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch_fn(*args)
        for _ in range(2):
            got = fn(*args)
            assert got.dtype == want.dtype == torch.bfloat16
            assert torch.allclose(got.float(), want.float(), atol=5e-2, rtol=5e-2), op
    assert fn(*args).dtype == torch.float32  # outside the block: the arguments' own dtype again
