"""enable() / disable() / patched(): torch's products and convolutions routed through alcop by
wrappers installed while some thread has patch mode on, torch's own functions back after it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import OpRecorder, assert_close, randn, target_name

from alcop_triton import choose_config, fastpath, patch
from alcop_triton.records import Workload

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)

ORIGINALS = (torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, F.linear, F.conv1d, F.conv2d, F.conv3d,
             torch.Tensor.matmul, torch.Tensor.__matmul__)


def _calls_under_patch(fn: object) -> list[str]:
    with OpRecorder() as rec, patch.patched():
        fn()  # type: ignore[operator]
    return rec.ops


@pytest.mark.parametrize("name,call,op", [
    ("torch.matmul", lambda: torch.matmul(randn(3, 4), randn(4, 2)), "alcop.mm"),
    ("@", lambda: randn(2, 3, 4) @ randn(2, 4, 2), "alcop.bmm"),
    ("Tensor.matmul", lambda: randn(3, 4).matmul(randn(4)), "alcop.mm"),
    ("torch.mm", lambda: torch.mm(randn(3, 4), randn(4, 2)), "alcop.mm"),
    ("Tensor.mm", lambda: randn(3, 4).mm(randn(4, 2)), "alcop.mm"),
    ("torch.bmm", lambda: torch.bmm(randn(2, 3, 4), randn(2, 4, 2)), "alcop.bmm"),
    ("Tensor.bmm", lambda: randn(2, 3, 4).bmm(randn(2, 4, 2)), "alcop.bmm"),
    ("torch.addmm", lambda: torch.addmm(randn(2), randn(3, 4), randn(4, 2), alpha=2), "alcop.gemm"),
    ("Tensor.addmm", lambda: randn(3, 2).addmm(randn(3, 4), randn(4, 2)), "alcop.gemm"),
    ("torch.baddbmm", lambda: torch.baddbmm(randn(2, 3, 2), randn(2, 3, 4), randn(2, 4, 2)), "alcop.gemm"),
    ("F.linear", lambda: F.linear(randn(3, 4), randn(2, 4), randn(2)), "alcop.linear"),
    ("nn.Linear", lambda: nn.Linear(4, 2)(randn(5, 4)), "alcop.linear"),
    # convolutions in inference (no_grad): with a backward to run, torch's unless their records say otherwise (TRAINING_ROUTED)
    ("nn.Conv1d", lambda: _no_grad(lambda: nn.Conv1d(2, 3, 3)(randn(1, 2, 7))), "alcop.conv"),
    ("nn.Conv2d reflect", lambda: _no_grad(lambda: nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect")(
        randn(1, 2, 5, 5))), "alcop.conv"),
    ("nn.Conv3d", lambda: _no_grad(lambda: nn.Conv3d(2, 2, 2)(randn(1, 2, 3, 3, 3))), "alcop.conv"),
])
def test_routes(name: str, call: object, op: str) -> None:
    ops_seen = _calls_under_patch(call)
    assert op in ops_seen, ops_seen
    assert not {"aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.convolution"} & set(ops_seen)


def _no_grad(fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return fn()


def test_a_convolution_whose_backward_will_run_stays_torchs() -> None:
    conv, fc = nn.Conv2d(2, 3, 3, padding=1), nn.Linear(3 * 5 * 5, 4)
    x = randn(2, 2, 5, 5, seed=3)
    seen = _calls_under_patch(lambda: fc(conv(x).flatten(1)).sum().backward())
    # the convolution (a Parameter weight) and its backward are cuDNN's; the linear layer is alcop's
    assert "aten.convolution" in seen and "alcop.conv" not in seen and "alcop.linear" in seen, seen
    grads = [p.grad.clone() for p in (*conv.parameters(), *fc.parameters())]
    for p in (*conv.parameters(), *fc.parameters()):
        p.grad = None
    fc(conv(x).flatten(1)).sum().backward()
    for g, p in zip(grads, (*conv.parameters(), *fc.parameters())):
        assert_close(g, p.grad.double())
    with torch.no_grad():  # no backward to run: alcop's
        assert "alcop.conv" in _calls_under_patch(lambda: conv(x))


@pytest.mark.parametrize("trains", ["input", "weight", "bias", None])
@pytest.mark.parametrize("spelling", ["positional", "no bias", "bias keyword", "all keywords"])
def test_the_grad_check_reads_every_spelling_of_a_convolution(trains: str | None, spelling: str) -> None:
    x, w, b = randn(1, 2, 5, 5, seed=4), randn(3, 2, 3, 3, seed=5), randn(3, seed=6)
    if spelling == "no bias":
        b = None
    if trains is not None and not (trains == "bias" and b is None):
        {"input": x, "weight": w, "bias": b}[trains].requires_grad_()
    call = {"positional": lambda: F.conv2d(x, w, b, 1, 1),
            "no bias": lambda: F.conv2d(x, w, None, 1, 1),
            "bias keyword": lambda: F.conv2d(x, w, bias=b, padding=1),
            "all keywords": lambda: F.conv2d(input=x, weight=w, bias=b, padding=1)}[spelling]
    seen = _calls_under_patch(call)
    will_train = any(t is not None and t.requires_grad for t in (x, w, b))
    assert ("aten.convolution" in seen) == will_train and ("alcop.conv" in seen) != will_train, seen


def test_results_match_eager_and_torch_is_untouched() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    x = randn(2, 3, 6, 6, seed=1)
    want = model.double()(x.double())
    model.float()
    patch.enable()
    try:
        assert patch.is_enabled()
        patch.enable()  # idempotent
        got = model(x)
    finally:
        patch.disable()
    assert not patch.is_enabled()
    patch.disable()  # a no-op when not enabled
    assert_close(got, want)
    torch.matmul(randn(2, 2), randn(2, 2))  # the first routed call outside patch mode puts torch's back
    assert (torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, F.linear, F.conv1d, F.conv2d, F.conv3d,
            torch.Tensor.matmul, torch.Tensor.__matmul__) == ORIGINALS
    assert "aten.mm" in _calls_outside(lambda: torch.mm(randn(3, 4), randn(4, 2)))


def _calls_outside(fn: object) -> list[str]:
    with OpRecorder() as rec:
        fn()  # type: ignore[operator]
    return rec.ops


def test_patched_backward_matches() -> None:
    model = nn.Linear(6, 3)
    x = randn(4, 6, seed=2).requires_grad_()
    with patch.patched():
        model(x).sum().backward()
    got = (x.grad.clone(), model.weight.grad.clone())
    x.grad = None
    model.zero_grad()
    model(x).sum().backward()
    assert_close(got[0], x.grad.double())
    assert_close(got[1], model.weight.grad.double())


def test_wrappers_stand_in_for_torchs_functions_until_one_is_called_outside_patch_mode() -> None:
    torch.mm(randn(2, 2), randn(2, 2))  # wrappers left by an earlier test go
    assert _routed_attributes() == ORIGINALS
    with patch.patched():
        now = _routed_attributes()
        assert all(getattr(f, "__alcop_route__", None) is not None for f in now), now
        assert torch._C._len_torch_function_stack() == 0  # no mode: other torch calls meet no alcop code
        assert torch.relu is torch._C._VariableFunctions.relu
    assert _routed_attributes() == now  # leaving the block rewrites nothing: entering again finds them
    with patch.patched():
        assert _routed_attributes() == now
    assert "aten.mm" in _calls_outside(lambda: torch.mm(randn(3, 4), randn(4, 2)))  # torch's, and the first
    assert _routed_attributes() == ORIGINALS  # such call put torch's own functions back


def test_a_lingering_wrapper_leaves_a_function_someone_else_put_in_place() -> None:
    with patch.patched():
        pass
    theirs = lambda *args, **kwargs: "theirs"  # noqa: E731
    torch.mm, mm = theirs, torch.mm
    try:
        assert mm(randn(2, 2), randn(2, 2)).shape == (2, 2)  # the lingering wrapper: torch's result
        assert torch.mm is theirs and torch.bmm is ORIGINALS[2]
    finally:
        torch.mm = ORIGINALS[1]


def test_a_function_replaced_while_the_wrappers_linger_is_the_one_patch_mode_wraps_next() -> None:
    conv = nn.Conv2d(2, 3, 3)
    x = randn(1, 2, 5, 5).requires_grad_()  # a convolution that will train: patch mode sends it to torch's function
    with patch.patched():
        pass
    seen: list[str] = []

    def theirs(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append("theirs")
        return ORIGINALS[7](*args, **kwargs)  # type: ignore[operator]
    F.conv2d = theirs
    try:
        with patch.patched():
            got = conv(x)  # the module's forward, made anew over torch's, calls the wrapper of theirs
        assert seen == ["theirs"]
        conv(x)  # outside patch mode: torch's forward back, theirs stays
        assert F.conv2d is theirs and nn.Conv2d.forward is CONV_FORWARDS[1] and seen == ["theirs"] * 2
    finally:
        F.conv2d = ORIGINALS[7]
    assert_close(got, F.conv2d(x.double(), conv.weight.double(), conv.bias.double()))


def test_a_lingering_convolution_forward_goes_back_when_called() -> None:
    conv = nn.Conv2d(2, 3, 3)
    with patch.patched():
        pass
    assert getattr(nn.Conv2d.forward, "__alcop_route__", None) is not None
    with torch.no_grad():
        got = conv(randn(1, 2, 5, 5))
    assert nn.Conv2d.forward is CONV_FORWARDS[1] and _routed_attributes() == ORIGINALS
    assert_close(got, F.conv2d(randn(1, 2, 5, 5).double(), conv.weight.double(), conv.bias.double()))


def _routed_attributes() -> tuple[object, ...]:
    return (torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, F.linear, F.conv1d, F.conv2d, F.conv3d,
            torch.Tensor.matmul, torch.Tensor.__matmul__)


CONV_FORWARDS = (nn.Conv1d.forward, nn.Conv2d.forward, nn.Conv3d.forward)


def test_convolution_modules_forward_through_patch_mode_only_while_it_is_on() -> None:
    with patch.patched():
        now = (nn.Conv1d.forward, nn.Conv2d.forward, nn.Conv3d.forward)
        assert all(getattr(f, "__alcop_route__", None) is not None for f in now), now
        assert nn.Conv2d.forward.__doc__ == CONV_FORWARDS[1].__doc__
    with torch.no_grad():
        nn.Conv1d(1, 1, 1)(randn(1, 1, 2))  # the first routed call outside patch mode puts torch's back
    assert (nn.Conv1d.forward, nn.Conv2d.forward, nn.Conv3d.forward) == CONV_FORWARDS


def test_a_subclass_with_its_own_conv_forward_keeps_it() -> None:
    calls: list[int] = []

    class Scaled(nn.Conv2d):
        def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
            calls.append(1)
            return super()._conv_forward(input, 2 * weight, bias)
    conv = Scaled(2, 3, 3, padding=1)
    x = randn(1, 2, 5, 5)
    with torch.no_grad():
        want = F.conv2d(x.double(), 2 * conv.weight.double(), conv.bias.double(), padding=1)
        with OpRecorder() as rec, patch.patched():
            got = conv(x)
    assert calls == [1] and "alcop.conv" in rec.ops
    assert_close(got, want)


def test_a_reference_taken_before_patch_mode_keeps_calling_torch() -> None:
    # the documented price of wrappers over a TorchFunctionMode
    mm = torch.mm
    with patch.patched():
        kept = _calls_outside(lambda: mm(randn(3, 4), randn(4, 2)))
        looked_up = _calls_outside(lambda: torch.mm(randn(3, 4), randn(4, 2)))
    assert "aten.mm" in kept and "alcop.mm" in looked_up


def test_enable_is_per_thread() -> None:
    seen: list[list[str]] = []
    patch.enable()
    try:
        t = threading.Thread(target=lambda: seen.append(_calls_outside(lambda: torch.mm(randn(3, 4), randn(4, 2)))))
        t.start()
        t.join()
        here = _calls_outside(lambda: torch.mm(randn(3, 4), randn(4, 2)))
    finally:
        patch.disable()
    assert "aten.mm" in seen[0] and "alcop.mm" in here


def test_nested_blocks_and_enable_combine() -> None:
    def routed() -> bool:
        return "alcop.mm" in _calls_outside(lambda: torch.mm(randn(3, 4), randn(4, 2)))
    with patch.patched():
        with patch.patched():
            assert routed()
        assert routed()  # the outer block still routes
        patch.enable()
    assert routed() and patch.is_enabled()  # enable() outlives the block it was called in
    with patch.patched():
        patch.disable()
        assert routed() and not patch.is_enabled()  # the open block keeps routing
    assert not routed() and _routed_attributes() == ORIGINALS


def test_a_call_site_left_to_torch_goes_straight_to_torch(torch_measured_faster: None) -> None:
    # Once a signature is stored as a call to torch, a repeat from the same site (weight, input shape)
    # skips the drop-in's front end: the fast path is not consulted, and torch's own op runs.
    from alcop_triton import fastpath, generation
    fastpath.invalidate()  # no call site or signature of an earlier test
    fastpath.reset_stats()
    conv = nn.Conv2d(3, 4, 3, padding=1)
    x = randn(1, 3, 5, 5)
    want = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
    with torch.no_grad(), patch.patched():
        conv(x)        # first call: alcop, while the decision is made
        conv(x)        # stored as a call to torch
        hits = fastpath.stats().hits
        ops_seen = _calls_outside(lambda: conv(x))
        assert fastpath.stats().hits == hits and fastpath.stats().to_torch == 2
        assert "aten.convolution" in ops_seen and "alcop.conv" not in ops_seen
        assert_close(conv(x), want)
        generation.bump()  # new records: the site is decided again, through the fast path
        conv(x)
        assert fastpath.stats().hits == hits


class _CountingMode:
    """The fast path's mode variable, counting the times it is set."""

    def __init__(self, var: Any) -> None:
        self.var, self.sets = var, 0

    def get(self) -> Any:
        return self.var.get()

    def set(self, value: Any) -> Any:
        self.sets += 1
        return self.var.set(value)

    def reset(self, token: Any) -> None:
        self.var.reset(token)


def test_a_routed_repeat_sets_nothing_between_torchs_function_and_the_stored_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from alcop_triton import fastpath
    from alcop_triton.ops import route
    a, b = randn(3, 4), randn(4, 2)
    with torch.no_grad(), patch.patched():
        for _ in range(3):  # first call, a hit by signature, then the call site's candidate
            torch.mm(a, b)
        counting = _CountingMode(fastpath._mode)
        monkeypatch.setattr(fastpath, "_mode", counting)
        monkeypatch.setattr(route, "_mode", counting)
        monkeypatch.setattr(patch, "_fastpath_mode", counting)
        hits = fastpath.stats().hits
        got = torch.mm(a, b)
        assert fastpath.stats().hits == hits + 1 and counting.sets == 0
        torch.mm(a, b, out=torch.empty(3, 2))  # keywords: the wrapper leaves routing for the drop-in's run
        assert counting.sets == 1
    assert_close(got, a.double() @ b.double())


def test_a_drop_in_called_in_patch_mode_is_patch_modes_call(torch_measured_faster: None) -> None:
    from alcop_triton import fastpath, ops
    fastpath.invalidate()
    a, b = randn(5, 7), randn(7, 3)
    with torch.no_grad():
        ops.mm(a, b)
        with patch.patched():
            ops.mm(a, b)  # first call of patch mode's signature: alcop runs it while the decision is made
            sent = fastpath.stats().to_torch
            got = ops.mm(a, b)
            assert fastpath.stats().to_torch == sent + 1  # the records leave it to torch, as torch.mm's would be
        ops.mm(a, b)
        assert fastpath.stats().to_torch == sent + 1  # outside patch mode the drop-in is alcop's again
    assert_close(got, a.double() @ b.double())


def test_a_drop_ins_own_torch_call_in_patch_mode_reaches_torch(fallbacks: list[tuple[str, str]]) -> None:
    # float64 falls back to torch's function, which is patch mode's wrapper here: it must not come back
    a, b = randn(4, 3).double(), randn(3, 2).double()
    with patch.patched():
        assert "alcop.mm" not in _calls_outside(lambda: torch.mm(a, b))
        got = torch.mm(a, b)
    assert torch.equal(got, a @ b) and fallbacks and all(op == "mm" for op, _ in fallbacks)


def test_a_convolution_module_at_a_site_left_to_torch_runs_no_python_of_alcops_but_its_forward(
        torch_measured_faster: None) -> None:
    # The host cost patch mode adds to a host-bound network's convolutions left to cuDNN: the module's
    # forward calls torch's function itself, no functional wrapper, drop-in or fast path in between.
    from alcop_triton import fastpath
    fastpath.invalidate()
    conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
    x = randn(2, 3, 6, 6)
    called: list[str] = []

    def profile(frame: object, event: str, arg: object) -> None:
        code = frame.f_code  # type: ignore[attr-defined]
        if event == "call" and "alcop_triton" in code.co_filename:
            called.append(code.co_name)
    with torch.no_grad(), patch.patched():
        conv(x)
        conv(x)  # stored as a call to torch by the drop-in
        sys.setprofile(profile)
        try:
            got = conv(x)
        finally:
            sys.setprofile(None)
        other = conv(randn(1, 3, 6, 6))  # another input shape: decided again, by the drop-in
    assert called == ["forward"], called
    assert_close(got, F.conv2d(x.double(), conv.weight.double(), padding=1))
    assert other.shape == (1, 4, 6, 6)


def test_a_patched_function_traced_by_torch_compile_becomes_alcops_op(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under Dynamo the wrapper takes its traced branch: the drop-in's deciding op becomes the node,
    # whatever eager calls at the same site decided (here: a site eager calls sent to torch); it decides
    # from the records as the graph is built (tests/ops/test_compile_route.py).
    a, b = randn(5, 6), randn(6, 3, seed=1)
    monkeypatch.setitem(patch._to_torch.setdefault(patch.ops.matmul, {}), id(b), (a.shape, a.dtype, False))
    targets: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        targets.extend(target_name(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    fn = torch.compile(lambda x, y: torch.matmul(x, y) * 2, backend=backend, fullgraph=True)
    with patch.patched():
        out = fn(a, b)
    assert "alcop.routed_mm" in targets
    assert_close(out, (a.double() @ b.double()) * 2)


def test_a_convolution_module_left_to_cudnn_calls_cudnns_op_where_torchs_front_end_would(
        torch_measured_faster: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # cuDNN stands in for torch's backend choice here (CPU): the site's call is checked against torch's
    # own result once, then the module calls the op itself, unless something must see torch's call.
    calls: list[tuple[object, ...]] = []
    failing: list[bool] = []

    def cudnn(input: torch.Tensor, weight: torch.Tensor, padding: object, stride: object, dilation: object,
              groups: int, benchmark: bool, deterministic: bool, tf32: bool) -> torch.Tensor:
        calls.append((padding, stride, dilation, groups))
        if failing:
            raise RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED")
        return torch._C._VariableFunctions.conv2d(input, weight, None, stride, padding, dilation, groups)
    monkeypatch.setattr(patch, "_select_conv_backend", lambda *args: patch._CUDNN)
    monkeypatch.setattr(patch, "_cudnn_conv", cudnn)
    monkeypatch.setattr(patch, "_module_wrappers", {})  # forwards made with this op
    from alcop_triton import fastpath
    fastpath.invalidate()
    conv, biased = nn.Conv2d(3, 4, 3, padding=1, stride=2, bias=False), nn.Conv2d(3, 4, 3, padding=1)
    x = randn(2, 3, 7, 7)
    with torch.no_grad(), patch.patched():
        for _ in range(2):  # alcop while deciding, then stored as torch's: checked against cuDNN's op once
            conv(x)
            biased(x)
        assert patch._to_torch[patch.ops.conv2d][id(conv.weight)][2] is True
        assert patch._to_torch[patch.ops.conv2d][id(biased.weight)][2] is False
        assert calls == [((1, 1), (2, 2), (1, 1), 1)]
        got = conv(x)
        biased(x)
        assert len(calls) == 2
        failing.append(True)  # cuDNN's op raising: torch's own call runs (and, failing, says so in its words)
        assert_close(conv(x), got.double())
        assert len(calls) == 3
        failing.clear()
        with torch.autocast("cpu"):
            conv(x)
    assert len(calls) == 3  # autocast must see torch's call
    conv.weight.requires_grad_()
    with patch.patched():
        conv(x).sum().backward()  # autograd too
    assert len(calls) == 3 and conv.weight.grad is not None
    assert_close(got, F.conv2d(x.double(), conv.weight.double(), stride=2, padding=1))


@pytest.mark.parametrize("how", ["parametrized", "plain attribute"])
def test_a_convolution_module_whose_weight_is_not_its_parameter_uses_the_weight_it_resolves_to(how: str) -> None:
    import torch.nn.utils.parametrize as parametrize

    conv = nn.Conv2d(2, 3, 3, padding=1)
    x = randn(1, 2, 5, 5)
    if how == "parametrized":  # weight: a property of a subclass, computed from the parameter

        class Doubled(nn.Module):
            def forward(self, w: torch.Tensor) -> torch.Tensor:
                return 2 * w
        parametrize.register_parametrization(conv, "weight", Doubled())
    else:  # weight: an instance attribute, as a norm's forward hook leaves it
        weight = conv.weight.detach() * 3
        del conv.weight
        conv.weight = weight
    want = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
    with torch.no_grad(), patch.patched():
        for _ in range(2):  # the second call: the call site as the first one left it
            assert_close(conv(x), want)


def test_a_convolution_module_traced_by_torch_compile_becomes_alcops_op(monkeypatch: pytest.MonkeyPatch) -> None:
    # The replaced forward takes the functional wrapper's traced branch too, stored sites or not.
    conv = nn.Conv2d(2, 3, 3, padding=1)
    x = randn(1, 2, 5, 5)
    monkeypatch.setitem(patch._to_torch.setdefault(patch.ops.conv2d, {}), id(conv.weight), (x.shape, x.dtype, False))
    targets: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        targets.extend(target_name(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    fn = torch.compile(conv, backend=backend, fullgraph=True)
    with torch.no_grad():
        want = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
        with patch.patched():
            out = fn(x)
    assert "alcop.routed_conv" in targets, targets
    assert_close(out, want)


def test_torch_compile_first_used_inside_patch_mode_still_traces_the_wrappers() -> None:
    # Dynamo maps torch's functions by identity when it is imported; imported while the wrappers are
    # installed, it took them for torch's functions and compiled them as opaque calls. A process of its
    # own: this one imported Dynamo long ago.
    script = """
import torch
import alcop_triton as at
targets = []
def backend(gm, example_inputs):
    targets.extend((f"{n.target.__module__}.{n.target.__name__}" if callable(n.target) and hasattr(n.target, '__code__') else str(n.target)) for n in gm.graph.nodes if n.op == "call_function")
    return gm
with at.patched():
    import torch._dynamo
    fn = torch.compile(lambda x, y: torch.matmul(x, y) * 2, backend=backend, fullgraph=True)
    fn(torch.randn(5, 6), torch.randn(6, 3))
print(targets)
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "alcop.routed_mm" in out.stdout.splitlines()[-1]


def test_wrappers_outliving_a_block_stay_while_a_graph_is_compiled() -> None:
    # A compile that traced a lingering wrapper guards on it; AOTAutograd and Inductor then call torch's
    # functions for real: putting torch's back in that window broke the guard (torch 2.11).
    from torch import _guards

    import alcop_triton as at
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with at.patched():
        torch.matmul(a, b)
    wrapper = torch.matmul
    assert wrapper is not torch._C._VariableFunctions.matmul  # outlives the block (docs/decisions.md#d16)
    with _guards.compile_context(_guards.CompileContext(None)):
        torch.matmul(a, b)
        assert torch.matmul is wrapper
    torch.matmul(a, b)
    assert torch.matmul is torch._C._VariableFunctions.matmul
    assert patch._compile_context() is None


# Each looks torch's function up when called: one taken before patch mode began stays torch's.
AUTOCAST_CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]], str]] = {
    "linear": (lambda *a: F.linear(*a), lambda: (randn(4, 8), randn(6, 8, seed=1), randn(6, seed=2)), "alcop.linear"),
    "matmul": (lambda *a: torch.matmul(*a), lambda: (randn(4, 8), randn(8, 6, seed=1).bfloat16()), "alcop.mm"),
    "operator": (lambda a, b: a @ b, lambda: (randn(4, 8), randn(8, 6, seed=1)), "alcop.mm"),
    "bmm": (lambda *a: torch.bmm(*a), lambda: (randn(2, 4, 8), randn(2, 8, 6, seed=1)), "alcop.bmm"),
    "addmm": (lambda *a: torch.addmm(*a), lambda: (randn(4, 6, seed=2), randn(4, 8), randn(8, 6, seed=1)), "alcop.gemm"),
    "conv2d": (lambda *a: F.conv2d(*a), lambda: (randn(1, 2, 5, 5), randn(3, 2, 3, 3, seed=1), randn(3, seed=2)), "alcop.conv"),
}


@pytest.mark.parametrize("case", sorted(AUTOCAST_CASES))
def test_autocast_routes_a_call_as_its_autocast_dtype(case: str) -> None:
    # torch's autocast casts the floating arguments of these functions to its dtype (AMP training): patch
    # mode routes the call as one written in that dtype (it used to compute float32, or refuse mixed dtypes)
    fn, make, op = AUTOCAST_CASES[case]
    args = make()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = fn(*args)
        with OpRecorder() as rec, patch.patched():
            got = fn(*args)
    assert got.dtype == want.dtype == torch.bfloat16
    assert op in rec.ops and not {"aten.mm", "aten.bmm", "aten.addmm", "aten.convolution"} & set(rec.ops), rec.ops
    ref = fn(*(a.double() for a in args))
    assert float((got.double() - ref).abs().max()) <= 4e-2 * max(1.0, float(ref.abs().max()))


def test_an_amp_training_step_under_patch_mode_matches_torchs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x = randn(6, 8)
    grads = []
    for patched in (False, True):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16), (patch.patched() if patched else _nothing()):
            y = model(x)
            assert y.dtype == torch.bfloat16
            loss = y.float().square().mean()
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for torch_grad, alcop_grad in zip(*grads):
        assert alcop_grad.dtype == torch.float32  # the parameters' own dtype, as under torch's autocast
        assert float((alcop_grad - torch_grad).abs().max()) <= 5e-2 * max(1.0, float(torch_grad.abs().max()))


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


@pytest.mark.parametrize("backward_faster", ["torch", "alcop"])
@pytest.mark.parametrize("forward_faster", ["alcop", "torch"])
def test_patch_modes_training_products_go_where_the_records_say(
        forward_faster: str, backward_faster: str, records: Callable[[Workload, bool], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A call with tensors that require grad takes the autograd route: an autograd Function whose forward
    # calls the registered op and whose backward makes the gradient products. Autograd runs the backward
    # outside patch mode's thread state: the Function records patch mode, and each product, forward or
    # gradient, is decided by its own records as a no-grad call's is (docs/decisions.md#d44).
    decided: list[Workload] = []
    real = choose_config.decide

    def spy(w: Workload, *args: Any, **kwargs: Any) -> Any:
        decided.append(w)
        return real(w, *args, **kwargs)

    x, w, b = randn(8, 16), randn(12, 16, seed=1), randn(12, seed=2)
    forward = Workload("matmul", (8, 12, 16), "float32", "nt")
    records(forward, forward_faster == "alcop")
    monkeypatch.setattr(choose_config, "decide", spy)

    def step() -> tuple[torch.Tensor, ...]:
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        with patch.patched():
            y = F.linear(xs, ws, bs)
        y.square().sum().backward()
        return y.detach(), xs.grad, ws.grad, bs.grad

    step()
    backward = sorted({d for d in decided if d != forward}, key=str)
    assert len(backward) == 2, decided  # the input's and the weight's gradient products
    for bw in backward:
        records(bw, backward_faster == "alcop")
    step()                     # first calls of the signatures under these records
    sent = fastpath.stats().to_torch
    y, gx, gw, gb = step()     # repeats: each product the records leave to torch goes there
    assert fastpath.stats().to_torch - sent == (forward_faster == "torch") + 2 * (backward_faster == "torch")
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    yd = F.linear(xd, wd, bd)
    yd.square().sum().backward()
    assert_close(y, yd.detach())
    for g, want in ((gx, xd.grad), (gw, wd.grad), (gb, bd.grad)):
        assert_close(g, want)


@pytest.mark.parametrize("faster", [
    {},                                                     # nothing measured faster: all torch's
    {"weight": "alcop", "input": "torch", "forward": "torch"},  # alcop's weight gradient alone
    {"weight": "torch", "input": "alcop", "forward": "alcop"},
    {"weight": "alcop", "input": "alcop", "forward": "alcop"},
])
@pytest.mark.parametrize("module", [False, True])
def test_a_convolution_that_trains_goes_where_its_gradients_records_say(
        faster: dict[str, str], module: bool, records: Callable[[Workload, bool], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Patch mode sends a convolution that will train to alcop only where the records show alcop faster in
    # its forward or in a gradient (records.CONV_GRAD_OPS); there each part runs where its own records say:
    # the forward by the forward's, each gradient by its own, torch's in one aten.convolution_backward.
    from alcop_triton.ops import conv as conv_ops
    x, w = randn(2, 4, 6, 6), randn(8, 4, 3, 3, seed=1)
    fw = conv_ops._conv_workload(x, w, (1, 1), (1, 1), (1, 1), (1, 1), 1)
    assert fw is not None and fw.op == "conv2d"
    for part, who in faster.items():  # gains of 0.2 ms: past TRAINING_MIN_GAIN_MS on their own
        records(fw if part == "forward" else fw.grad(part), who == "alcop", 10.0)
    computed: list[tuple[str, bool, bool]] = []
    for name in ("conv_grads", "torch_conv_grads"):
        real = getattr(conv_ops, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            computed.append((_name, bool(args[7]), bool(args[8])))
            return _real(*args)
        monkeypatch.setattr(conv_ops, name, spy)
    conv = nn.Conv2d(4, 8, 3, padding=1, bias=False)
    with torch.no_grad():
        conv.weight.copy_(w)

    def step() -> tuple[torch.Tensor, ...]:
        xs = x.clone().requires_grad_()
        conv.weight.grad = None
        with OpRecorder() as rec, patch.patched():
            y = conv(xs) if module else F.conv2d(xs, conv.weight, None, 1, 1)
        y.square().sum().backward()
        return y.detach(), xs.grad, conv.weight.grad, tuple(rec.ops)

    for _ in range(3):  # the first call decides the site, the repeats take the stored answer
        computed.clear()
        y, gx, gw, ops_seen = step()
        to_alcop = "alcop" in faster.values()
        assert ("alcop.conv" in ops_seen) == to_alcop, ops_seen
        if not to_alcop:
            assert computed == [] and "aten.convolution" in ops_seen
        else:  # alcop's Function: each gradient where its records say
            alcop_parts = [g for g in ("input", "weight") if faster.get(g) == "alcop"]
            mine = [c for c in computed if c[0] == "conv_grads"]
            assert mine == [("conv_grads", "input" in alcop_parts, "weight" in alcop_parts)], computed
            theirs = [c for c in computed if c[0] == "torch_conv_grads"]
            assert theirs == ([] if len(alcop_parts) == 2 else
                              [("torch_conv_grads", "input" not in alcop_parts, "weight" not in alcop_parts)])
        xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
        yd = F.conv2d(xd, wd, None, 1, 1)
        yd.square().sum().backward()
        assert_close(y, yd.detach())
        assert_close(gx, xd.grad)
        assert_close(gw, wd.grad)


def test_a_training_convolution_weighs_only_the_gradients_it_needs_in_autocasts_dtype(
        records: Callable[[Workload, bool], None]) -> None:
    # A network's first layer computes no input gradient: that gradient's records do not send it to alcop.
    # Under autocast the records read are those of autocast's dtype, the dtype the call computes in.
    from alcop_triton.ops import conv as conv_ops
    conv = nn.Conv2d(4, 8, 3, padding=1, bias=False)
    x = randn(2, 4, 6, 6)  # float32, no grad: an image
    fw = conv_ops._conv_workload(x.bfloat16(), conv.weight, (1, 1), (1, 1), (1, 1), (1, 1), 1)
    assert fw is not None and fw.dtype == "bfloat16"

    def ran_alcop() -> bool:
        with torch.autocast("cpu", dtype=torch.bfloat16), OpRecorder() as rec, patch.patched():
            y = conv(x)
        y.float().square().sum().backward()
        assert conv.weight.grad is not None
        return "alcop.conv" in rec.ops

    records(fw.grad("input"), True, 10.0)
    records(Workload(fw.op, fw.shape, "float32", fw.layout).grad("weight"), True, 10.0)  # another dtype's: not read
    assert not ran_alcop()
    records(fw.grad("weight"), True)  # 0.02 ms saved: less than a Function's host cost (TRAINING_MIN_GAIN_MS)
    assert not ran_alcop()
    records(fw, True, 2.0)  # and 0.04 ms more in the forward: together past it
    assert ran_alcop()


def test_a_backwards_gradient_routes_are_remembered_until_the_records_change(
        records: Callable[[Workload, bool], None]) -> None:
    import types

    from alcop_triton.ops import conv as conv_ops
    x, w = randn(2, 4, 6, 6), randn(8, 4, 3, 3, seed=1)
    fw = conv_ops._conv_workload(x, w, (1, 1), (1, 1), (1, 1), (1, 1), 1)
    assert fw is not None
    ctx = types.SimpleNamespace(params=((1, 1), (1, 1), (1, 1), (1, 1), 1), patched=True)
    records(fw.grad("weight"), True)
    assert conv_ops._gradients_to_torch(ctx, x, w, (True, True)) == (True, False)  # input's unmeasured: torch's
    assert conv_ops._gradients_to_torch(ctx, x, w, (True, True)) == (True, False)  # remembered
    records(fw.grad("weight"), False)  # the records change: decided again
    records(fw.grad("input"), True)
    assert conv_ops._gradients_to_torch(ctx, x, w, (True, True)) == (False, True)
    assert conv_ops._gradients_to_torch(ctx, x, w, (False, True)) == (False, True)
    ctx.patched = False  # a backward outside patch mode: alcop's, whatever the records
    assert conv_ops._gradients_to_torch(ctx, x, w, (True, True)) == (False, False)
