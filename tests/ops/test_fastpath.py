"""The fast path: a repeated eager call is a cache hit that neither chooses a config nor binds, and
gives the same result; a flag change, a new database record or another signature misses.

No timing here: the counters of ``alcop_triton.fastpath.stats()`` and instrumented config choice
and binding say which path a call took.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, f64, randn
from hypothesis import given, settings
from hypothesis import strategies as st

import alcop_triton as at
from alcop_triton import settings as alcop_settings, choose_config, fastpath, te
from alcop_triton.ops import route
from alcop_triton.autotune.database import Database, TuningRecord
from alcop_triton.build import CompiledKernel
from alcop_triton.records import KernelConfig, Workload

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    fastpath.invalidate()
    fastpath.reset_stats()
    yield


NATIVE = fastpath.native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="no C compiler: the Python hit is the only one")
_NATIVE_SITE_HIT = NATIVE.site_hit if NATIVE is not None else None
SITE_CHECKS = [pytest.param(route._site_hit_py, id="python"),
               pytest.param(_NATIVE_SITE_HIT, id="native", marks=needs_native)]


@contextmanager
def site_check(check: Callable[..., Any]) -> Iterator[None]:
    """The fast path's call sites checked by ``check`` (``SITE_CHECKS``) in the block."""
    saved = route._site_hit, route._site_hit_built
    route._site_hit, route._site_hit_built = check, True
    try:
        yield
    finally:
        route._site_hit, route._site_hit_built = saved


def counts() -> tuple[int, int]:
    s = fastpath.stats()
    return s.hits, s.misses


@pytest.fixture
def no_slow_path(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it after the first call: from then on, choosing a config or binding a kernel raises."""
    def arm() -> None:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the slow path ran: a config was chosen or a kernel bound")
        monkeypatch.setattr(choose_config, "choose_config", refuse)
        monkeypatch.setattr(CompiledKernel, "bind", refuse)
    return arm


def test_repeated_call_hits_without_config_choice_or_binding(no_slow_path: Callable[[], None]) -> None:
    a, b = randn(17, 33), randn(33, 9, seed=1)
    first = at.matmul(a, b)
    assert counts() == (0, 1) and fastpath.stats().entries == 1
    no_slow_path()
    for i in range(3):
        again = at.matmul(a, b)
        assert counts() == (i + 1, 1)
        assert torch.equal(again, first) and again.data_ptr() != first.data_ptr()  # a fresh output each call
    c = randn(17, 33, seed=2)  # other values, same signature: a hit that reads the new tensor
    assert_close(at.matmul(c, b), f64(c)[0] @ f64(b)[0])
    assert counts() == (4, 1)


@pytest.mark.parametrize("call", [
    pytest.param(lambda a, b, v: at.bmm(a.unflatten(0, (1, -1)), b.unflatten(0, (1, -1))), id="bmm"),
    pytest.param(lambda a, b, v: at.linear(a, b.t(), v, activation="gelu"), id="linear_bias_gelu"),
    pytest.param(lambda a, b, v: at.addmm(v, a, b, beta=0.5, alpha=2.0), id="addmm"),
    pytest.param(lambda a, b, v: at.matmul(a.unflatten(0, (3, -1)), b), id="matmul_batched_folds"),
    pytest.param(lambda a, b, v: torch.ops.alcop.gemm(a, b, v, None, "relu", 1.0, 1.0), id="custom_op_below"),
])
def test_gemm_family_hits(call: Callable[..., torch.Tensor], no_slow_path: Callable[[], None]) -> None:
    a, b, v = randn(12, 10), randn(10, 7, seed=1), randn(7, seed=2)
    first = call(a, b, v)
    hits, misses = counts()
    no_slow_path()
    assert torch.equal(call(a, b, v), first)
    assert counts() == (hits + 1, misses)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_hits(nd: int, no_slow_path: Callable[[], None]) -> None:
    x, w, b = randn(2, 4, *(5,) * nd), randn(6, 2, *(3,) * nd, seed=1), randn(6, seed=2)
    conv = (at.conv1d, at.conv2d, at.conv3d)[nd - 1]
    first = conv(x, w, b, stride=[1] * nd, padding=1, groups=2, activation="relu")  # a list: hashed as a tuple
    no_slow_path()
    assert torch.equal(conv(x, w, b, stride=[1] * nd, padding=1, groups=2, activation="relu"), first)
    assert counts() == (1, 1)
    ref = F.relu((F.conv1d, F.conv2d, F.conv3d)[nd - 1](*f64(x, w, b), padding=1, groups=2))
    assert_close(first, ref)


@at.op("alcop_test::fast_scaled_mm")
def scaled_mm(a: te.Tensor, b: te.Tensor, scale: float = 2.0) -> te.Tensor:
    M, K = a.shape
    N = b.shape[1]
    k = te.reduce_axis(K, "k")
    return te.compute((M, N), lambda i, j: te.sum(a[i, k] * (b[k, j] * scale), axis=k), "c")


def test_dsl_op_hits_and_keys_scalars(no_slow_path: Callable[[], None]) -> None:
    a, b = randn(9, 8), randn(8, 5, seed=1)
    first = scaled_mm(a, b, 2.0)
    no_slow_path()
    assert torch.equal(scaled_mm(a, b, 2.0), first)
    assert counts() == (1, 1)
    with pytest.raises(AssertionError, match="slow path"):  # another scalar is another kernel: a miss
        scaled_mm(a, b, 3.0)


def test_flag_changes_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = randn(8, 8), randn(8, 8, seed=1)
    at.matmul(a, b)
    at.matmul(a, b)
    assert counts() == (1, 1)
    with alcop_settings.tf32(True):  # float32 inputs: the TF32 switch is part of the signature
        at.matmul(a, b)
    assert counts() == (1, 2)
    monkeypatch.setenv("ALCOP_STRICT", "1")
    at.matmul(a, b)
    assert counts() == (1, 3)
    monkeypatch.delenv("ALCOP_STRICT")
    at.matmul(a, b)  # back to the first signature: still stored
    assert counts() == (2, 3)


@pytest.mark.interpreter
def test_alcop_fp32_selects_the_float32_dot_and_is_part_of_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    # ALCOP_FP32=tf32x3 runs float32 products as three TF32 products (near float32 accuracy); it is a
    # compile-time choice, so a call under it is another signature and another kernel variant.
    import sys
    build_module = sys.modules["alcop_triton.build"]  # (alcop_triton.build is the function)
    sources: list[str] = []
    load = build_module.load_kernel
    monkeypatch.setattr(build_module, "load_kernel", lambda src, name: (sources.append(src), load(src, name))[1])
    a, b = randn(19, 40), randn(40, 13, seed=1)
    want = a.double() @ b.double()
    at.matmul(a, b)
    assert counts() == (0, 1) and alcop_settings.fp32_precision() == "ieee"
    monkeypatch.setenv("ALCOP_FP32", "tf32x3")
    assert alcop_settings.fp32_precision() == "tf32x3"
    got = at.matmul(a, b)
    assert counts() == (0, 2)
    assert ((got.double() - want).norm() / want.norm()).item() <= 1e-5
    dots = [ln.strip() for src in sources for ln in src.splitlines() if "tl.dot(" in ln]
    assert any('input_precision="ieee"' in d for d in dots) and any('input_precision="tf32x3"' in d for d in dots)
    with alcop_settings.tf32(True):  # torch's TF32 switch wins over ALCOP_FP32
        assert alcop_settings.fp32_precision() == "tf32"
    monkeypatch.setenv("ALCOP_FP32", "fp64")
    with pytest.raises(ValueError, match="ALCOP_FP32='fp64'.*ieee.*tf32x3"):
        at.matmul(a, b)


def test_tf32_switch_is_read_in_every_spelling_torch_accepts() -> None:
    # The fast path reads torch's C getters directly; they must say what torch's own attributes say,
    # including a matmul setting of "none", which inherits the backend-wide one.
    matmul = torch.backends.cuda.matmul
    if getattr(matmul, "fp32_precision", None) is None:
        pytest.skip("torch < 2.9: the legacy allow_tf32 flag is read as is")
    before = matmul.fp32_precision, torch.backends.fp32_precision
    try:
        for own, backend in (("tf32", "ieee"), ("ieee", "tf32"), ("none", "tf32"), ("none", "ieee")):
            matmul.fp32_precision, torch.backends.fp32_precision = own, backend
            inherited = torch.backends.fp32_precision if matmul.fp32_precision == "none" else matmul.fp32_precision
            assert alcop_settings.allow_tf32() is (inherited == "tf32"), (own, backend)
    finally:
        torch.backends.fp32_precision, matmul.fp32_precision = before[1], before[0]


def test_tf32_is_not_part_of_a_half_precision_signature() -> None:
    a, b = randn(8, 8, dtype=torch.float16), randn(8, 8, dtype=torch.float16, seed=1)
    at.matmul(a, b)
    with alcop_settings.tf32(True):
        at.matmul(a, b)
    assert counts() == (1, 1)


def test_new_database_record_invalidates(tmp_path: Any) -> None:
    a, b = randn(8, 8), randn(8, 8, seed=1)
    at.matmul(a, b)
    gen = fastpath.stats().generation
    rec = TuningRecord(Workload("matmul", (8, 8, 8), "float32", "nn"), KernelConfig(), 0.01, None, "H100", "9.0",
                       "3.6.0", "2.11.0", "0.1.0", "2026-01-01")
    Database(tmp_path / "db.sqlite").add(rec)
    assert fastpath.stats().generation == gen + 1 and fastpath.stats().entries == 0
    at.matmul(a, b)
    assert counts() == (0, 2)


def test_other_strides_dtypes_and_alignment_miss() -> None:
    a, b = randn(8, 16), randn(16, 8, seed=1)
    at.matmul(a, b)
    at.matmul(a, b.t().contiguous().t())  # the same values stored transposed
    at.matmul(a.half(), b.half())
    buf = randn(8 * 16 + 1)
    shifted = buf[1:].view(8, 16)  # 4 bytes past a 16-byte boundary
    assert shifted.data_ptr() % 16 != a.data_ptr() % 16
    assert_close(at.matmul(shifted, b), f64(shifted)[0] @ f64(b)[0])
    assert counts() == (0, 4) and fastpath.stats().entries == 4


def test_a_signature_hit_twice_is_found_at_its_call_site_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a signature's first hit, its call site checks the tensors with torch's C++ guard instead of
    # computing the signature; a call the candidate does not match (another bias pattern, an
    # nn.Parameter, a tensor requiring grad, another alignment) still goes by its signature.
    x, w, bias = randn(6, 7), randn(5, 7, seed=1), randn(5, seed=2)
    for _ in range(2):
        at.linear(x, w, bias)
    assert counts() == (1, 1)
    keyed: list[Any] = []
    key = route._key
    monkeypatch.setattr(route, "_key", lambda *a: keyed.append(a[0]) or key(*a))
    x2 = randn(6, 7, seed=3)
    assert_close(at.linear(x2, w, bias), F.linear(*f64(x2, w, bias)))
    assert counts() == (2, 1) and keyed == []
    assert_close(at.linear(x2, w), F.linear(*f64(x2, w)))  # no bias: not the candidate's call
    assert keyed == ["linear"] and counts() == (2, 2)
    at.linear(x2, torch.nn.Parameter(w, requires_grad=False), bias)  # a Parameter: the signature's hit, not the guard's
    assert keyed == ["linear"] * 2 and counts() == (3, 2)
    keyed.clear()
    at.linear(x2, w, bias.clone().requires_grad_())  # grad mode: the autograd route, by signature
    assert keyed[0] == "linear"
    keyed.clear()
    buf = randn(6 * 7 + 1)
    shifted = buf[1:].view(6, 7)  # 4 bytes past a 16-byte boundary
    assert_close(at.linear(shifted, w, bias), F.linear(*f64(shifted, w, bias)))
    assert keyed == ["linear"]
    for _ in range(2):  # hit by signature (a candidate of its own, with its alignment), then at the site
        assert_close(at.linear(shifted, w, bias), F.linear(*f64(shifted, w, bias)))
    assert keyed == ["linear"] * 2
    fastpath.invalidate()  # a new dispatch generation forgets the call sites with the signatures
    at.linear(x2, w, bias)
    assert keyed == ["linear"] * 3


@pytest.mark.parametrize("check", SITE_CHECKS)
def test_a_call_site_candidate_is_checked_without_a_signature(check: Callable[..., Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Half-precision tensors, all 16-byte aligned, and a linear with a bias and without one (the Nones): a
    # repeat matches its candidate without computing a signature; another alignment or None pattern
    # goes by its signature.
    monkeypatch.setattr(route, "_site_hit", check)
    monkeypatch.setattr(route, "_site_hit_built", True)
    h = torch.float16
    x, w, bias = randn(6, 5, dtype=h), randn(4, 5, dtype=h, seed=1), randn(4, dtype=h, seed=2)
    for _ in range(2):
        at.linear(x, w, bias)
        at.linear(x, w)
    site, = [site for key, site in route._sites.items() if key[0] == "linear"]
    assert len(site) == 2
    key = route._key
    keyed: list[Any] = []
    monkeypatch.setattr(route, "_key", lambda *args: keyed.append(args[0]) or key(*args))
    x2 = randn(6, 5, dtype=torch.float16, seed=3)
    assert_close(at.linear(x2, w, bias), F.linear(*f64(x2, w, bias)))
    assert_close(at.linear(x2, w), F.linear(*f64(x2, w)))
    assert keyed == [] and counts() == (4, 2)
    shifted = randn(6 * 5 + 8, dtype=torch.float16, seed=4)[8:].view(6, 5)  # 16 bytes past a boundary: aligned
    at.linear(shifted, w, bias)
    assert keyed == []
    shifted = randn(6 * 5 + 1, dtype=torch.float16, seed=4)[1:].view(6, 5)  # 2 bytes past: not the candidate's
    assert_close(at.linear(shifted, w, bias), F.linear(*f64(shifted, w, bias)))
    assert keyed == ["linear"]


def test_a_call_site_keeps_its_newest_candidates() -> None:
    b = randn(5, 4, dtype=torch.float16, seed=1)
    shapes = range(1, route.SITE_CANDIDATES + 3)
    for m in shapes:  # each shape: a miss, then a hit by signature that gives the site a candidate
        for _ in range(2):
            at.matmul(randn(m, 5, dtype=torch.float16, seed=m), b)
    site, = [site for key, site in route._sites.items() if key[0] == "matmul"]
    assert len(site) == route.SITE_CANDIDATES
    check = site[-1][3]
    assert check(randn(shapes[-1], 5, dtype=torch.float16), b) and not check(randn(shapes[0], 5, dtype=torch.float16), b)


@pytest.mark.parametrize("check", SITE_CHECKS)
@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([3, 5]), st.sampled_from([torch.float32, torch.float16]),
                          st.booleans(), st.sampled_from([0, 1]), st.booleans(), st.booleans(), st.booleans(),
                          st.booleans()), min_size=1, max_size=4))
def test_a_call_site_candidate_is_found_only_for_its_own_signature(
        check: Callable[..., Any], calls: list[tuple[int, torch.dtype, bool, int, bool, bool, bool, bool]]) -> None:
    # Soundness of the C++-guarded lookup: whatever mix of shapes, dtypes, strides, alignment, optional
    # bias, grad and tensor types came before, a candidate found at the call site is the entry the
    # call's signature holds; and the results stay right.
    # Each candidate's entry is remembered wrapped: a call it serves asserts that its signature holds that
    # entry. Candidates of an earlier example would not be wrapped for this one's list: each starts afresh.
    fastpath.invalidate()
    real, found = route._remember, []

    def remember(site_key: Any, tensors: Any, entry: Callable[..., torch.Tensor]) -> None:
        def checked(tensors: tuple[torch.Tensor | None, ...]) -> torch.Tensor:
            assert getattr(fastpath._entries.get(fastpath._key("linear", tensors, (None,))), "run", None) is entry
            found.append(entry)
            return entry(tensors)
        real(site_key, tensors, checked)

    route._remember = remember
    try:
        for m, dtype, transposed, offset, with_bias, needs_grad, parameter, no_grad in calls:
            x = randn(m * 7 + offset, dtype=dtype, seed=m)[offset:].view(m, 7)  # offset 1: misaligned
            w = randn(4, 7, dtype=dtype, seed=1)
            w = w.t().contiguous().t() if transposed else w
            w = torch.nn.Parameter(w, requires_grad=False) if parameter else w
            bias = randn(4, dtype=dtype, seed=2) if with_bias else None
            x.requires_grad_(needs_grad)
            with torch.set_grad_enabled(not no_grad), site_check(check):
                for _ in range(3):  # a miss, a hit by signature (a candidate), a hit at the site
                    assert_close(at.linear(x, w, bias), F.linear(*f64(x, w, bias)))
    finally:
        route._remember = real
    assert found  # the guarded lookup was taken


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([(3, 7), (5, 7), (3, 5)]), st.sampled_from([torch.float16, torch.float32]),
                          st.sampled_from([0, 1, 8]), st.booleans(), st.booleans()), min_size=2, max_size=12),
       st.booleans())
def test_the_compiled_site_check_agrees_with_the_python_one(
        calls: list[tuple[tuple[int, int], torch.dtype, int, bool, bool]], tf32: bool) -> None:
    # The first calls give a site candidates (shapes, dtypes, alignments, a None argument, a Parameter);
    # every call then asks both checks, under a float32 precision that may differ from the candidates'.
    assert _NATIVE_SITE_HIT is not None

    def arguments(shape: tuple[int, int], dtype: torch.dtype, offset: int, none: bool,
                  parameter: bool) -> tuple[Any, ...]:
        x = randn(shape[0] * shape[1] + offset, dtype=dtype)[offset:].view(shape)  # offset 1: misaligned
        w = randn(4, shape[1], dtype=dtype, seed=1)
        return (x, torch.nn.Parameter(w, requires_grad=False) if parameter else w, None if none else x[0])

    key = ("site check test",)
    for i, call in enumerate(calls[:len(calls) // 2]):
        route._remember(key, arguments(*call), lambda ts, i=i: i)
    site = route._sites.pop(key)
    with alcop_settings.tf32(tf32):
        for call in calls:
            tensors = arguments(*call)
            assert _NATIVE_SITE_HIT(site, tensors) is route._site_hit_py(site, tensors)


@needs_native
def test_the_compiled_site_check_rejects_what_it_cannot_read() -> None:
    assert _NATIVE_SITE_HIT is not None
    with pytest.raises(TypeError, match="site_hit"):
        _NATIVE_SITE_HIT((), ())
    with pytest.raises(TypeError, match="7-tuple"):
        _NATIVE_SITE_HIT([(1, None)], (randn(2),))

    def failing(*tensors: Any) -> bool:
        raise ValueError("a guard that fails")
    with pytest.raises(ValueError, match="a guard that fails"):  # the exception passes through
        _NATIVE_SITE_HIT([(1, None, None, failing, None, None, None)], (randn(2),))


class _Chain:
    """A Triton launch hook chain (``knobs.runtime.launch_enter_hook``): called where it has hooks."""
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls


@needs_native
def test_the_native_run_launches_as_the_direct_launch_does() -> None:
    # runtime.prebind's direct launch, as the native run makes it, with stand-ins for CUDA's callables:
    # c_launch(g0, g1, g2, stream, function, coop, pdl, scratch, None, metadata, None, None, None, *arguments).
    assert NATIVE is not None
    a, b = randn(2, 5, dtype=torch.float16), randn(5, 3, dtype=torch.float16, seed=1)
    out = torch.empty_strided((2, 3), (1, 2), dtype=torch.float16)  # what the stored entry allocates
    made, launched, encoded, scratch = [], [], [], []
    memo: dict[tuple[int, ...], tuple[Any, ...]] = {}
    hooks = types.SimpleNamespace(launch_enter_hook=_Chain([]), launch_exit_hook=None)
    device = [0]

    def new(shape: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
        made.append((shape, stride))
        return out

    def encode(tensors: tuple[torch.Tensor, ...], ptrs: tuple[int, ...]) -> tuple[Any, ...]:
        assert tensors == (a, b, out)
        encoded.append(ptrs)
        memo[ptrs] = (*ptrs, "map", 7)
        return memo[ptrs]

    def state(nbytes: int) -> tuple[Any, ...]:
        return (new, (2, 3), (1, 2), lambda *ts: launched.append(("python", ts)), lambda: device[0], 0,
                lambda index: 99 + index, hooks, torch.Tensor.data_ptr, memo, encode,
                lambda index, stream, n: scratch.append((index, stream, n)) or 4096, nbytes,
                lambda *args: launched.append(("c", args)), 4, 1, 1, "function", False, True, "metadata")

    ptrs = (a.data_ptr(), b.data_ptr(), out.data_ptr())
    direct = ("c", (4, 1, 1, 99, "function", False, True, None, None, "metadata", None, None, None, *ptrs, "map", 7))
    assert NATIVE.run(state(0), (a, b)) is out and made == [((2, 3), (1, 2))]
    assert launched == [direct] and encoded == [ptrs]
    NATIVE.run(state(0), (a, b))  # the same addresses: the memo's arguments
    assert launched == [direct] * 2 and encoded == [ptrs]
    NATIVE.run(state(256), (a, b))  # global scratch: runtime.scratch_address's buffer
    assert scratch == [(0, 99, 256)] and launched[-1][1][7] == 4096
    del launched[:]
    device[0] = 1  # another current device: the Python launch switches to the kernel's
    NATIVE.run(state(0), (a, b))
    device[0] = 0
    hooks.launch_enter_hook = _Chain([print])  # a launch hook: the Python launch calls it
    NATIVE.run(state(0), (a, b))
    hooks.launch_enter_hook, hooks.launch_exit_hook = None, print  # a hook that is not a chain
    NATIVE.run(state(0), (a, b))
    assert launched == [("python", (a, b, out))] * 3

    def failing(*args: Any) -> None:
        raise RuntimeError("a launch that fails")
    hooks.launch_exit_hook = None
    broken = state(0)[:13] + (failing,) + state(0)[14:]
    with pytest.raises(RuntimeError, match="a launch that fails"):
        NATIVE.run(broken, (a, b))
    with pytest.raises(TypeError, match="21-tuple"):
        NATIVE.run(state(0)[:5], (a, b))


def test_alcop_native_0_keeps_the_hit_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCOP_NATIVE", "0")
    monkeypatch.setattr(fastpath, "_NATIVE", None)  # not built yet in this process
    assert fastpath.native() is None
    launched: list[Any] = []

    def launch(*tensors: torch.Tensor) -> None:
        launched.append(tensors)
    launch.native_state = ()  # type: ignore[attr-defined]  # a direct launch's: the Python run serves all the same
    a = randn(2, 3)
    run = fastpath._plain_run(a.new_empty_strided, (3, 2), (1, 3), launch)
    out = run((a,))
    assert (out.shape, out.stride()) == ((3, 2), (1, 3)) and launched == [(a, out)]


def test_calls_requiring_grad_store_their_autograd_function(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = randn(6, 5).requires_grad_(), randn(5, 4, seed=1)
    y = at.matmul(a, b)
    assert y.requires_grad and fastpath.stats().misses >= 1
    key = fastpath.signature("matmul", (a, b), ())
    assert isinstance(fastpath._entries[key], fastpath.GradEntry)
    assert isinstance(fastpath._entries[key].inner, fastpath.Entry)  # the forward's own call, stored too
    before = fastpath.stats().hits
    keyed = []
    key = route._key
    monkeypatch.setattr(route, "_key", lambda *a: keyed.append(a[0]) or key(*a))
    a2 = randn(6, 5, seed=2).requires_grad_()  # same signature, other values: the stored apply
    y2 = at.matmul(a2, b)
    # two hits (the call, its Function's forward), one signature: the forward's entry was known
    assert fastpath.stats().hits == before + 2 and keyed == ["matmul"]
    assert type(y2.grad_fn).__name__ == "AlcopMmBackward"
    (y2 * y2).sum().backward()
    assert_close(a2.grad, 2 * (f64(a2)[0] @ f64(b)[0]) @ f64(b)[0].T)
    with torch.no_grad():  # no autograd needed: the eager route's entry, even though a requires grad
        at.matmul(a, b)
        assert isinstance(fastpath._entries[fastpath.signature("matmul", (a, b), ())], fastpath.Entry)


@pytest.mark.parametrize("op", ["linear", "bmm", "conv2d"])
def test_a_stored_grad_call_replays_with_the_right_tensors_and_gradients(op: str,
                                                                          no_slow_path: Callable[[], None]) -> None:
    # A repeat applies a Function made for its signature over the stored forward entry: each op keys a different
    # number of tensors (bmm: a, b; linear: x, w, bias, residual; conv: x, w, bias), which the replay
    # must pass on.
    def call(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, lib: Any = at) -> torch.Tensor:
        if op == "linear":
            return lib.linear(x, w, b) if lib is F else at.linear(x, w, b, activation="relu")
        if op == "bmm":
            return lib.bmm(x, w.mT)
        return lib.conv2d(x, w, b, padding=1) if lib is F else at.conv2d(x, w, b, padding=1)

    def inputs(seed: int) -> list[torch.Tensor]:
        if op == "conv2d":
            return [randn(2, 3, 5, 5, seed=seed), randn(4, 3, 3, 3, seed=seed + 1), randn(4, seed=seed + 2)]
        if op == "bmm":
            return [randn(3, 6, 7, seed=seed), randn(3, 5, 7, seed=seed + 1)]
        return [randn(6, 7, seed=seed), randn(5, 7, seed=seed + 1), randn(5, seed=seed + 2)]

    def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        y = call(x, w, b, torch if op == "bmm" else F)
        return torch.relu(y) if op == "linear" else y

    for seed in (1, 10):
        ours = [t.requires_grad_() for t in inputs(seed)]
        theirs = [t.detach().double().requires_grad_() for t in inputs(seed)]
        y, want = call(*ours), reference(*theirs)
        assert_close(y, want.detach())
        g = randn(*y.shape, seed=99)
        (y * g).sum().backward()
        (want * g.double()).sum().backward()
        for t, r in zip(ours, theirs):
            assert_close(t.grad, r.grad)
        if seed == 1:
            no_slow_path()
            before = fastpath.stats().hits
    assert fastpath.stats().hits >= before + 2  # the call and its forward's entry, replayed
    stored = [e for e in fastpath._entries.values() if isinstance(e, fastpath.GradEntry)]
    assert len(stored) == 1 and isinstance(stored[0].inner, fastpath.Entry)


def test_autograd_route_through_a_rewrite_of_the_inputs_is_not_stored() -> None:
    # 3-D @ 2-D folds the batch into rows with a reshape: an autograd node of its own, so the route's
    # Function is not applied to the call's tensors and a repeat runs the whole route again.
    x, w = randn(2, 3, 5).requires_grad_(), randn(5, 4, seed=1)
    for _ in range(2):
        y = at.matmul(x, w)
    assert fastpath.signature("matmul", (x, w), ()) not in fastpath._entries
    y.sum().backward()
    assert_close(x.grad, (torch.ones(2, 3, 4, dtype=torch.float64) @ f64(w)[0].T))


def test_calls_needing_the_dispatcher_do_not_take_the_cache() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    a, b = randn(6, 5), randn(5, 4, seed=1)
    with Seen() as mode:
        y = at.matmul(a, b)
    assert fastpath.stats().dispatched >= 1 and any("alcop" in op for op in mode.ops), mode.ops
    assert_close(y, f64(a)[0] @ f64(b)[0])


def test_each_stored_grad_signature_replays_a_function_of_its_own(no_slow_path: Callable[[], None]) -> None:
    # linear's route applies its Function to (x, w, bias) and then its other arguments (no residual: None,
    # the activation): a repeat passes them on to the signature's own Function, whose backward indexes
    # needs_input_grad as the route's does. Two shapes, two signatures: two Functions, one name.
    def step(m: int, seed: int) -> tuple[torch.Tensor, type]:
        x, w = randn(m, 5, seed=seed).requires_grad_(), randn(6, 5, seed=seed + 1)
        b = randn(6, seed=seed + 2).requires_grad_()
        y = at.linear(x, w, b, activation="gelu")
        y.square().sum().backward()
        ref = [t.detach().double().requires_grad_(t.requires_grad) for t in (x, w, b)]
        z = F.gelu(F.linear(*ref))
        z.square().sum().backward()
        assert_close(y, z.detach())
        assert_close(x.grad, ref[0].grad)
        assert_close(b.grad, ref[2].grad)
        assert w.grad is None
        return y, type(y.grad_fn)

    for m in (7, 9):
        step(m, 1)  # the first call of each signature stores it
    no_slow_path()
    before = fastpath.stats().hits
    kinds: dict[int, set[type]] = {7: set(), 9: set()}
    for seed in (10, 20):  # repeats on other values: each signature's stored Function
        for m in (7, 9):
            y, kind = step(m, seed)
            assert kind.__name__ == "AlcopLinearBackward"
            kinds[m].add(kind)
    assert fastpath.stats().hits >= before + 8  # each repeat: the call and its forward's entry
    stored = [e for e in fastpath._entries.values() if isinstance(e, fastpath.GradEntry)]
    assert len(stored) == 2 and all(isinstance(e.inner, fastpath.Entry) for e in stored)
    assert all(len(k) == 1 for k in kinds.values()) and kinds[7] != kinds[9]


@pytest.mark.parametrize("ours, theirs", [
    pytest.param(lambda x, w, b: at.matmul(x, w.t()), lambda x, w, b: x @ w.t(), id="matmul"),
    pytest.param(lambda x, w, b: at.linear(x, w, b, activation="gelu"), lambda x, w, b: F.gelu(F.linear(x, w, b)),
                 id="linear_gelu"),
    pytest.param(lambda x, w, b: at.addmm(b, x, w.t(), beta=0.5, alpha=2.0),
                 lambda x, w, b: torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0), id="addmm"),
])
def test_eager_autograd_takes_an_autograd_function_not_the_registered_op(
        ours: Callable[..., torch.Tensor], theirs: Callable[..., torch.Tensor]) -> None:
    x, w, b = randn(7, 5).requires_grad_(), randn(6, 5, seed=1).requires_grad_(), randn(6, seed=2).requires_grad_()
    y = ours(x, w, b)
    # an autograd.Function's node (AlcopMm, AlcopGemm, ...), not torch.library's wrapper of alcop::*
    nodes, frontier = [], [y.grad_fn]
    while frontier:
        node = frontier.pop()
        nodes.append(type(node).__name__)
        frontier += [n for n, _ in node.next_functions if n is not None]
    assert any(n.startswith("Alcop") for n in nodes), nodes
    y.square().sum().backward()
    ref = [t.detach().double().requires_grad_() for t in (x, w, b)]
    z = theirs(*ref)
    z.square().sum().backward()
    assert_close(y, z.detach())
    for t, r in zip((x, w, b), ref):
        if r.grad is not None:
            assert_close(t.grad, r.grad)


def test_use_config_bypasses_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = randn(8, 8), randn(8, 8, seed=1)
    at.matmul(a, b)
    cfg = KernelConfig(block_m=16, block_n=16, block_k=16, group_m=1, smem_stages=1)
    seen: list[KernelConfig] = []
    real = CompiledKernel.bind
    monkeypatch.setattr(CompiledKernel, "bind", lambda self, *ts: seen.append(self.config) or real(self, *ts))
    with at.use_config(cfg):
        assert_close(at.matmul(a, b), f64(a)[0] @ f64(b)[0])
    s = fastpath.stats()
    assert (s.hits, s.bypassed, s.dispatched) == (0, 1, 0) and seen == [cfg]


def test_fallback_is_not_stored(fallbacks: list) -> None:
    a, b = randn(5, 4, dtype=torch.float64), randn(4, 3, dtype=torch.float64, seed=1)
    at.matmul(a, b)
    at.matmul(a, b)
    s = fastpath.stats()
    assert (s.hits, s.misses, s.uncacheable, s.entries) == (0, 2, 2, 0) and len(fallbacks) == 2


def test_aliased_inputs_are_not_confused() -> None:
    a, b = randn(7, 7), randn(7, 7, seed=1)
    at.matmul(a, a)  # both kernel operands start at a: not stored, since which input is which is unknowable
    assert fastpath.stats().uncacheable == 1
    assert_close(at.matmul(a, b), f64(a)[0] @ f64(b)[0])
    assert_close(at.matmul(b, a), f64(b)[0] @ f64(a)[0])  # a stored (a, b) entry must not serve (b, a) wrongly
    assert_close(at.matmul(a, a), f64(a)[0] @ f64(a)[0])


def test_copied_operands_are_not_stored() -> None:
    a = randn(2, 6, 5).transpose(0, 1)  # a batched input whose rows cannot be folded without a copy
    b = randn(5, 3, seed=1)
    for _ in range(2):
        assert_close(at.matmul(a, b), f64(a)[0] @ f64(b)[0])
    s = fastpath.stats()
    assert s.hits == 0 and s.uncacheable == 2


def test_operands_copied_to_aligned_buffers_are_copied_again_on_a_hit(monkeypatch: pytest.MonkeyPatch,
                                                                     no_slow_path: Callable[[], None]) -> None:
    from alcop_triton.kernels import matmul as km
    monkeypatch.setattr(km, "PAD_MIN_MACS", 1)  # pad even this small product (rows of 45 halves: 90 bytes)
    monkeypatch.setattr(km, "PAD_MIN_K", 1)
    a, b = randn(19, 45, dtype=torch.float16), randn(21, 45, dtype=torch.float16, seed=1).t()
    assert_close(at.matmul(a, b), f64(a)[0] @ f64(b)[0])
    assert counts() == (0, 1) and fastpath.stats().entries == 1
    no_slow_path()
    # A hit allocates the buffers (of the first call's geometry: the preparation's Python does not run
    # again) and replays the recorded copy and GEMM launches: nothing is launched anew.
    monkeypatch.setattr(fastpath, "launch_kernel", lambda *a: pytest.fail("a hit went through launch_kernel"))
    monkeypatch.setattr(km, "_buffer", lambda *a: pytest.fail("a hit ran the preparation"))
    (entry,) = fastpath._entries.values()
    assert isinstance(entry, fastpath.Entry) and len(entry.preps) == 1 and len(entry.launches) == 2
    for seed in (2, 3):  # new values through the stored copies, not the first call's buffers
        c = randn(19, 45, dtype=torch.float16, seed=seed)
        assert_close(at.matmul(c, b), f64(c)[0] @ f64(b)[0])
    assert counts() == (2, 1)


def test_patch_mode_takes_the_same_fast_path() -> None:
    a, b = randn(8, 6), randn(6, 5, seed=1)
    with at.patched():
        first = torch.matmul(a, b)
        again = a @ b
    assert torch.equal(first, again) and counts() == (1, 1)


def test_patch_mode_leaves_workloads_torch_runs_faster_to_torch(torch_measured_faster: None) -> None:
    a, b = randn(8, 6), randn(6, 5, seed=1)
    expected = a @ b
    with at.patched():
        first = torch.matmul(a, b)  # the first call runs alcop while it learns the decision
        assert fastpath.stats().to_torch == 0
        assert torch.equal(torch.matmul(a, b), expected)
    assert fastpath.stats().to_torch == 1
    assert_close(first, f64(a)[0] @ f64(b)[0])
    at.matmul(a, b)
    at.matmul(a, b)  # a direct call asks for alcop: it runs alcop, from its own signature
    assert fastpath.stats().to_torch == 1 and counts() == (2, 2)


def test_a_repeated_backward_launches_its_gradient_kernels_from_the_cache(no_slow_path: Callable[[], None]) -> None:
    # a stride-2 convolution's backward: four phase convolutions for dX, the weight gradient's GEMM, the
    # forward's own call; the second step runs every alcop call from a stored entry
    def step(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = randn(1, 4, 6, 6, seed=seed).to(memory_format=torch.channels_last).requires_grad_()
        w = randn(5, 4, 3, 3, seed=seed + 1).requires_grad_()
        gx, gw = torch.autograd.grad(at.conv2d(x, w, stride=2, padding=1).square().sum(), (x, w))
        x64, w64 = f64(x.detach(), w.detach())
        want = torch.autograd.grad(F.conv2d(x64.requires_grad_(), w64.requires_grad_(), stride=2, padding=1)
                                   .square().sum(), (x64, w64))
        assert_close(gx, want[0])
        assert_close(gw, want[1])
        return gx, gw

    step(10)
    hits, misses = counts()
    assert misses >= 6 and fastpath.stats().dispatched == 0
    no_slow_path()
    step(20)
    assert counts() == (hits + misses, misses) and fastpath.stats().dispatched == 0
