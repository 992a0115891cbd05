"""Epilogues folded into routed linears (ops/traced_epilogues.py): in Dynamo's graph, an activation and a
residual add after a routed linear become its ``activation`` and ``residual`` arguments exactly where that
computes the same thing; alcop's op then runs them in its epilogue, torch's computes them as before.
Outputs and gradients are compared with float64 torch (Triton's interpreter on CPU tensors)."""

from __future__ import annotations

import pickle
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import assert_close, randn
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import alcop_triton as at
from alcop_triton.ops import traced_epilogues
from alcop_triton.ops.gemm import ROUTED
from alcop_triton.records import Workload

pytestmark = pytest.mark.interpreter

D, H = 16, 24


class Folded:
    """A backend that folds Dynamo's graph, keeps each routed linear's (residual given, activation) and the
    forward code AOTAutograd hands the compiler, and runs that code."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, Any]] = []
        self.forward: list[str] = []

        def keep(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
            self.forward.append(gm.code)
            return make_boxed_func(gm.forward)
        self._aot = aot_autograd(fw_compiler=keep, bw_compiler=lambda gm, _: make_boxed_func(gm.forward))

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        traced_epilogues.fold(gm.graph)
        self.calls += [(n.args[3] is not None, n.args[4]) for n in gm.graph.nodes
                       if n.op == "call_function" and n.target is ROUTED.linear]
        return self._aot(gm, example_inputs)


class Block(nn.Module):
    """A transformer MLP block: x + down(act(up(x)))."""

    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down, self.act = nn.Linear(D, H), nn.Linear(H, D), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(x)))


def _run(model: nn.Module, x: torch.Tensor) -> tuple[Folded, torch.Tensor]:
    backend = Folded()
    return backend, at.compile(model, backend=backend, fullgraph=True)(x)


@pytest.mark.parametrize("act, name", [(nn.GELU(), "gelu"), (nn.ReLU(), "relu"), (F.silu, "silu"),
                                       (torch.tanh, "tanh"), (torch.sigmoid, "sigmoid"),
                                       (lambda t: t.relu(), "relu")],
                         ids=["gelu", "relu", "silu", "tanh", "sigmoid", "relu_method"])
@pytest.mark.parametrize("alcop_faster", [True, False], ids=["alcop", "torch"])
def test_activation_and_residual_fold_into_the_routed_linears(act: Any, name: str, alcop_faster: bool,
                                                             records: Callable[[Workload, bool], None]) -> None:
    for m, n, k in ((6, H, D), (6, D, H)):
        records(Workload("matmul", (m, n, k), "float32", "nt"), alcop_faster)
    model, x = Block(act), randn(2, 3, D)
    backend, got = _run(model, x)
    assert backend.calls == [(False, name), (True, None)]
    code = backend.forward[-1]
    assert ("torch.ops.alcop.linear" in code) == alcop_faster, code
    if alcop_faster:  # the epilogue runs in alcop's kernel: no separate activation or add in the graph
        assert f"aten.{name}" not in code and "aten.add" not in code, code
    with torch.no_grad():
        want = model.double()(x.double())
    assert_close(got, want)


def test_gradients_through_a_folded_block(records: Callable[[Workload, bool], None]) -> None:
    for m, n, k in ((6, H, D), (6, D, H)):
        records(Workload("matmul", (m, n, k), "float32", "nt"), True)
    model, ref = Block(nn.GELU()), Block(nn.GELU()).double()
    x = randn(2, 3, D)
    backend, got = _run(model, x)
    assert backend.calls == [(False, "gelu"), (True, None)]
    got.square().sum().backward()
    ref(x.double()).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad is not None and q.grad is not None
        assert_close(p.grad, q.grad)


class Unfoldable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c, self.d = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        tanh_gelu = F.gelu(self.b(x), approximate="tanh")   # not alcop's gelu
        broadcast = self.c(x) + x[:1]                         # a residual that broadcasts
        inplace = F.relu(self.d(x), inplace=True)             # in place
        return y + y.relu() + tanh_gelu + broadcast + inplace  # y has three users


def test_what_would_change_the_computation_is_not_folded(records: Callable[[Workload, bool], None]) -> None:
    records(Workload("matmul", (4, D, D), "float32", "nt"), True)
    model, x = Unfoldable(), randn(4, D)
    backend, got = _run(model, x)
    assert backend.calls == [(False, None)] * 4
    with torch.no_grad():
        assert_close(got, model.double()(x.double()))


def test_a_residual_of_another_dtype_is_not_folded() -> None:
    # under autocast an fp32 residual added to a low-precision product promotes: not an epilogue add
    lin = nn.Linear(D, D)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.double() + lin(x)
    backend, got = _run(fn, randn(4, D))  # type: ignore[arg-type]
    assert backend.calls == [(False, None)] and got.dtype == torch.float64


def test_install_chains_a_pass_already_set_and_is_idempotent() -> None:
    from torch._inductor import config
    seen: list[torch.fx.Graph] = []
    with config.patch(pre_grad_custom_pass=seen.append):
        traced_epilogues.install()
        traced_epilogues.install()
        hook = config.pre_grad_custom_pass
    assert hook is not None and getattr(hook, "_alcop_fold", False)
    graph = torch.fx.Graph()
    graph.output(graph.placeholder("x"))
    hook(graph)
    assert seen == [graph]  # the user's pass still runs, once


def test_the_installed_pass_names_its_version_so_inductor_can_cache_on_it() -> None:
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass
    with config.patch(pre_grad_custom_pass=None):
        traced_epilogues.install()
        alone = config.pre_grad_custom_pass
    assert isinstance(alone, CustomGraphPass)
    assert alone.uuid() is not None and alone.uuid() == traced_epilogues._chained(None).uuid()
    # Inductor pickles its settings into the cache key: the pass must pickle (by its class's name)
    again = pickle.loads(pickle.dumps(alone))
    assert type(again) is type(alone) and again.uuid() == alone.uuid()

    class Theirs(CustomGraphPass):
        def __init__(self, tag: str | None) -> None:
            self.tag = tag

        def __call__(self, graph: torch.fx.Graph) -> None:
            pass

        def uuid(self) -> str | None:
            return self.tag
    # an earlier pass with a version: both versions in the key (another version, another key)
    assert traced_epilogues._chained(Theirs("a")).uuid() != traced_epilogues._chained(Theirs("b")).uuid()
    # an earlier pass without one (a plain function, or a uuid of None): nothing the cache could key on
    assert traced_epilogues._chained(lambda g: None).uuid() is None
    assert traced_epilogues._chained([Theirs("a"), Theirs(None)]).uuid() is None
