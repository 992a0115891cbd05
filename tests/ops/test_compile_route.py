"""torch.compile with alcop's routing (ops/traced.py, alcop_triton.compile): the graph AOTAutograd hands
the compiler holds alcop's op for a workload exactly where the tuning records show alcop faster, torch's
op where they show torch faster; outputs and gradients match float64 torch; no graph breaks.

Records are written to a temporary database (``ALCOP_DB``) for the H100, and
``choose_config.interpreter_records`` makes CPU tensors routed by that GPU's records, as CUDA tensors of
an H100 are (the interpreter has no GPU of its own)."""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import OpRecorder, assert_close, randn
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import alcop_triton as at
from alcop_triton import choose_config, fastpath, patch
from alcop_triton.autotune import dispatch
from alcop_triton.autotune.database import Database, TuningRecord
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.kernels import conv as kconv
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

pytestmark = pytest.mark.interpreter  # CPU tensors: Triton's interpreter (TRITON_INTERPRET=1)

SPEC = get_spec("H100")
ALCOP_OPS = ("alcop.linear", "alcop.mm", "alcop.bmm", "alcop.gemm", "alcop.conv")
TORCH_PRODUCTS = ("aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.convolution")


class Graphs:
    """An ``aot_autograd`` backend that keeps the forward and backward graphs' code it is given."""

    def __init__(self) -> None:
        self.forward: list[str] = []
        self.backward: list[str] = []
        self.backend = aot_autograd(fw_compiler=self._keep(self.forward), bw_compiler=self._keep(self.backward))

    @staticmethod
    def _keep(into: list[str]) -> Callable[..., Any]:
        def compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
            into.append(gm.code)
            return make_boxed_func(gm.forward)
        return compiler


def _alcop_ops(code: str) -> set[str]:
    return {op for op in ALCOP_OPS if f"torch.ops.{op}." in code}


def _torch_products(code: str) -> set[str]:
    return {op for op in TORCH_PRODUCTS if f"torch.ops.{op}." in code}


def _gemm(m: int, n: int, k: int, layout: str) -> Workload:
    return Workload("matmul", (m, n, k), "float32", layout)


CASES: dict[str, tuple[Callable[..., torch.Tensor], Callable[[], tuple[torch.Tensor, ...]], list[Workload], str]] = {
    # name: (function, its arguments, the workloads its products run as, the alcop op it becomes)
    "linear_bias_relu": (lambda x, w, b: torch.relu(F.linear(x, w, b)),
                         lambda: (randn(2, 4, 16), randn(12, 16, seed=1), randn(12, seed=2)),
                         [_gemm(8, 12, 16, "nt")], "alcop.linear"),
    "mm": (lambda a, b: torch.mm(a, b), lambda: (randn(8, 16), randn(16, 12, seed=1)),
           [_gemm(8, 12, 16, "nn")], "alcop.mm"),
    "matmul_transposed": (lambda a, b: torch.matmul(a, b.t()), lambda: (randn(8, 16), randn(12, 16, seed=1)),
                          [_gemm(8, 12, 16, "nt")], "alcop.mm"),
    "bmm": (lambda a, b: torch.bmm(a, b), lambda: (randn(2, 8, 16), randn(2, 16, 12, seed=1)),
            [Workload("bmm", (2, 8, 12, 16), "float32", "nn")], "alcop.bmm"),
    # attention's heads read permuted, (batch, seq, heads, dim) -> (batch, heads, seq, dim): weighed against
    # torch's records as any product (in a graph Inductor writes the operands contiguous for torch's bmm)
    "attention_heads": (lambda q, k: torch.matmul(q.transpose(1, 2), k.transpose(1, 2).transpose(-2, -1)),
                        lambda: (randn(2, 8, 3, 16), randn(2, 8, 3, 16, seed=1)),
                        [Workload("bmm", (6, 8, 8, 16), "float32", "nt")], "alcop.bmm"),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
              lambda: (randn(8, 12, seed=2), randn(8, 16), randn(16, 12, seed=1)),
              [_gemm(8, 12, 16, "nn")], "alcop.gemm"),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5),
                lambda: (randn(2, 8, 12, seed=2), randn(2, 8, 16), randn(2, 16, 12, seed=1)),
                [Workload("bmm", (2, 8, 12, 16), "float32", "nn")], "alcop.gemm"),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1),
               lambda: (randn(1, 3, 6, 6), randn(4, 3, 3, 3, seed=1), randn(4, seed=2)),
               [kconv.workload_of(randn(1, 3, 6, 6), randn(4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1)], "alcop.conv"),
}


@pytest.mark.parametrize("alcop_faster", [True, False], ids=["alcop_faster", "torch_faster"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_graph_holds_alcops_op_exactly_where_the_records_show_it_faster(
        case: str, alcop_faster: bool, records: Callable[[Workload, bool], None]) -> None:
    fn, make_args, workloads, op = CASES[case]
    for w in workloads:
        records(w, alcop_faster)
    args = make_args()
    graphs = Graphs()
    with torch.no_grad():
        got = at.compile(fn, backend=graphs.backend, fullgraph=True)(*args)
    code = graphs.forward[-1]
    if alcop_faster:
        assert _alcop_ops(code) == {op}, code
        assert not _torch_products(code), code
    else:
        assert not _alcop_ops(code), code
        assert _torch_products(code), code
    assert_close(got, fn(*(a.double() for a in args)))


SPELLINGS: dict[str, tuple[Callable[..., torch.Tensor], str]] = {
    # each spelling of a routed product in Dynamo's graph (a function, an operator, a method, a drop-in):
    # name -> (function of (x, w) with x (8, 16) and w (16, 12), the alcop op it becomes); each is x @ w
    # in torch's terms (x @ w plus x[:, :12] for addmm), computed in float64 by torch for reference
    "operator": (lambda x, w: x @ w, "alcop.mm"),
    "method_matmul": (lambda x, w: x.matmul(w), "alcop.mm"),
    "method_mm": (lambda x, w: x.mm(w), "alcop.mm"),
    "method_addmm": (lambda x, w: x[:, :12].addmm(x, w, alpha=2.0), "alcop.gemm"),
    "linear_keyword_bias": (lambda x, w: F.linear(x, weight=w.t(), bias=None), "alcop.linear"),
    "drop_in": (lambda x, w: at.mm(x, w), "alcop.mm"),
}


@pytest.mark.parametrize("alcop_faster", [True, False], ids=["alcop_faster", "torch_faster"])
@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_of_a_product_is_routed(spelling: str, alcop_faster: bool,
                                                records: Callable[[Workload, bool], None]) -> None:
    fn, op = SPELLINGS[spelling]
    records(_gemm(8, 12, 16, "nn"), alcop_faster)
    x, w = randn(8, 16), randn(16, 12, seed=1)
    graphs = Graphs()
    with torch.no_grad():
        got = at.compile(fn, backend=graphs.backend, fullgraph=True)(x, w)
    code = graphs.forward[-1]
    assert _alcop_ops(code) == ({op} if alcop_faster else set()), code
    assert bool(_torch_products(code)) is not alcop_faster, code
    want = x.double() @ w.double()
    assert_close(got, x[:, :12].double() + 2 * want if spelling == "method_addmm" else want)


def test_where_the_records_leave_every_product_to_torch_the_graph_is_plain_compiles(
        records: Callable[[Workload, bool], None]) -> None:
    # An attention block and an MLP, float32 and unmeasured (torch's): alcop_triton.compile hands the backend
    # exactly the graph torch.compile does (so its kernels, and Inductor's fusions, are plain compile's)
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 16)
            self.up, self.down, self.norm = nn.Linear(16, 32), nn.Linear(32, 16), nn.LayerNorm(16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(self.norm(x)).view(2, 4, 3, 2, 8).permute(2, 0, 3, 1, 4)
            x = x + self.out((torch.softmax(q @ k.transpose(-1, -2), -1) @ v).transpose(1, 2).reshape(2, 4, 16))
            return x + self.down(F.gelu(self.up(self.norm(x))))
    model, x = Block().eval(), randn(2, 4, 16)
    plain, ours = Graphs(), Graphs()
    with torch.no_grad():
        torch.compile(model, backend=plain.backend, fullgraph=True)(x)
        torch._dynamo.reset()
        at.compile(model, backend=ours.backend, fullgraph=True)(x)
    assert _torch_products(plain.forward[-1]) == {"aten.addmm", "aten.bmm"}
    assert ours.forward[-1] == plain.forward[-1]


def test_a_form_the_drop_in_does_not_take_stays_torchs(records: Callable[[Workload, bool], None]) -> None:
    # the deprecated addmm(beta, input, alpha, mat1, mat2): more positional arguments than the drop-in has
    # (patch mode's wrappers give such calls torch's function too)
    records(_gemm(8, 8, 8, "nn"), True)
    c, a, b = randn(8, 8, seed=2), randn(8, 8), randn(8, 8, seed=1)
    graphs = Graphs()
    with torch.no_grad(), pytest.warns(UserWarning, match="deprecated"):
        got = at.compile(lambda c, a, b: torch.addmm(0.5, c, 2.0, a, b), backend=graphs.backend)(c, a, b)
    assert not _alcop_ops(graphs.forward[-1]) and _torch_products(graphs.forward[-1]), graphs.forward[-1]
    assert_close(got, 0.5 * c.double() + 2.0 * a.double() @ b.double())


@pytest.mark.parametrize("alcop_faster", [True, False], ids=["alcop_faster", "torch_faster"])
def test_a_drop_in_put_in_the_graph_is_decided_where_torch_sets_no_compile_flag(
        alcop_faster: bool, records: Callable[[Workload, bool], None], monkeypatch: pytest.MonkeyPatch) -> None:
    # torch 2.11 does not set torch.compiler's flag while AOTAutograd traces: the drop-in the backend put in
    # place of ``@`` took its registered op there, alcop's whatever the records said (seen on the H200)
    from alcop_triton.ops import route
    monkeypatch.setattr(route, "_compiler", type("Torch211Compiler", (), {"_is_compiling_flag": False}))
    records(_gemm(8, 12, 16, "nn"), alcop_faster)
    x, w = randn(8, 16), randn(16, 12, seed=1)
    graphs = Graphs()
    with torch.no_grad():
        got = at.compile(lambda x, w: x @ w, backend=graphs.backend, fullgraph=True)(x, w)
    assert _alcop_ops(graphs.forward[-1]) == ({"alcop.mm"} if alcop_faster else set()), graphs.forward[-1]
    assert_close(got, x.double() @ w.double())


def test_patch_mode_and_the_explicit_option_build_the_same_graph(records: Callable[[Workload, bool], None]) -> None:
    fn, make_args, workloads, _ = CASES["linear_bias_relu"]
    records(workloads[0], True)
    args = make_args()
    explicit, patched = Graphs(), Graphs()
    with torch.no_grad():
        at.compile(fn, backend=explicit.backend)(*args)
        torch._dynamo.reset()
        with at.patched():
            torch.compile(fn, backend=patched.backend)(*args)
    assert explicit.forward == patched.forward
    assert _alcop_ops(explicit.forward[0]) == {"alcop.linear"}


def test_workloads_decided_one_by_one_in_one_graph(records: Callable[[Workload, bool], None]) -> None:
    # Two products of different shapes: the records make the first alcop's, the second torch's.
    records(_gemm(8, 12, 16, "nt"), True)
    records(_gemm(8, 5, 12, "nt"), False)
    x, w1, w2 = randn(8, 16), randn(12, 16, seed=1), randn(5, 12, seed=2)
    graphs = Graphs()
    fn = lambda x, w1, w2: F.linear(torch.relu(F.linear(x, w1)), w2)  # noqa: E731
    with torch.no_grad():
        got = at.compile(fn, backend=graphs.backend, fullgraph=True)(x, w1, w2)
    code = graphs.forward[-1]
    assert code.count("torch.ops.alcop.linear.") == 1 and "torch.ops.aten.mm." in code, code
    assert_close(got, fn(x.double(), w1.double(), w2.double()))


def test_without_routing_a_drop_in_is_alcops_as_in_eager(records: Callable[[Workload, bool], None]) -> None:
    # Outside patch mode and alcop_triton.compile a drop-in runs alcop's kernel whatever the records say,
    # eagerly and compiled alike; the records only steer routed calls.
    records(_gemm(8, 12, 16, "nn"), False)
    graphs = Graphs()
    a, b = randn(8, 16), randn(16, 12, seed=1)
    with torch.no_grad():
        torch.compile(lambda a, b: at.mm(a, b), backend=graphs.backend)(a, b)
        assert _alcop_ops(graphs.forward[-1]) == {"alcop.mm"}
        torch._dynamo.reset()
        at.compile(lambda a, b: at.mm(a, b), backend=graphs.backend)(a, b)  # a drop-in in patch mode: routed
        assert not _alcop_ops(graphs.forward[-1]), graphs.forward[-1]


def test_symbolic_sizes_get_torchs_op(records: Callable[[Workload, bool], None]) -> None:
    for m in (8, 9, 10):
        records(_gemm(m, 12, 16, "nt"), True)
    graphs = Graphs()
    f = at.compile(lambda x, w: F.linear(x, w), backend=graphs.backend, dynamic=True)
    w = randn(12, 16, seed=1)
    with torch.no_grad():
        for m in (8, 9, 10):
            x = randn(m, 16, seed=m)
            assert_close(f(x, w), F.linear(x.double(), w.double()))
    assert graphs.forward and all(not _alcop_ops(code) for code in graphs.forward), graphs.forward


def test_nothing_is_tuned_while_a_graph_is_built(records: Callable[[Workload, bool], None],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # An unmeasured float16 workload: the dispatcher answers from its model, and tunes only when
    # ALCOP_AUTOTUNE=1 asks it to.
    def tune(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("tuned while tracing")
    monkeypatch.setattr(dispatch.Dispatcher, "_tune", tune)
    monkeypatch.delenv("ALCOP_AUTOTUNE", raising=False)
    graphs = Graphs()
    # 16 output columns: whole 16-byte rows, which a graph needs to take alcop's op (``traced.vector_rows``)
    x, w = randn(8, 16, dtype=torch.float16), randn(16, 16, seed=1, dtype=torch.float16)
    with torch.no_grad():
        at.compile(lambda x, w: F.linear(x, w), backend=graphs.backend)(x, w)
    assert _alcop_ops(graphs.forward[-1]) == {"alcop.linear"}  # no records: the model's config, alcop's op


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


class Attention(nn.Module):
    """One head-split self-attention block: projections, scores, softmax, weighted sum."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.heads = heads
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        y = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(b, s, d)
        return self.out(y)


def _mlp_workloads() -> list[Workload]:
    # rows 8, as x (2, 4, 16); the weight-gradient and data-gradient products are not routed here
    return [_gemm(8, 32, 16, "nt"), _gemm(8, 16, 32, "nt")]


def _attention_workloads() -> list[Workload]:
    return [_gemm(8, 48, 16, "nt"), _gemm(8, 16, 16, "nt")]


@pytest.mark.parametrize("make, workloads", [(Mlp, _mlp_workloads), (Attention, _attention_workloads)],
                         ids=["mlp", "attention"])
def test_a_model_compiles_without_graph_breaks_and_trains(
        make: Callable[[], nn.Module], workloads: Callable[[], list[Workload]],
        records: Callable[[Workload, bool], None]) -> None:
    for w in workloads():
        records(w, True)
    model, ref = make(), make().double()
    ref.load_state_dict(model.state_dict())
    x = randn(2, 4, 16, seed=3)
    with at.patched():
        explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch._dynamo.reset()
    graphs = Graphs()
    compiled = at.compile(model, backend=graphs.backend)
    assert isinstance(compiled, nn.Module)
    assert [n for n, _ in compiled.named_parameters()] == [f"_orig_mod.{n}" for n, _ in model.named_parameters()]
    y = compiled(x)
    y.pow(2).sum().backward()
    want = ref(x.double())
    want.pow(2).sum().backward()
    assert_close(y, want)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        assert_close(p.grad, q.grad)
    assert len(graphs.forward) == 1
    assert "torch.ops.alcop.linear." in graphs.forward[0], graphs.forward[0]
    assert graphs.backward  # the gradients came through the compiled backward
    # eager patch mode agrees with the compiled graph
    with torch.no_grad(), at.patched():
        assert_close(compiled(x), model(x).double())


def test_routing_holds_only_while_the_compiled_callable_runs() -> None:
    f = at.compile(lambda a, b: a @ b, backend="eager")
    assert not patch.is_enabled() and not patch._state.on
    f(randn(2, 3), randn(3, 2))
    assert not patch._state.on


def test_a_compiled_call_enters_no_patch_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # Routing is decided while a graph is compiled; a compiled call is torch.compile's alone (no patch-mode
    # block around it, no guard on alcop's state: the host time a call costs is torch.compile's).
    f = at.compile(lambda a, b: a @ b, backend="eager")
    a, b = randn(2, 3), randn(3, 2)
    f(a, b)

    def refuse(*args: Any) -> None:
        raise AssertionError("a compiled call entered patch mode")
    monkeypatch.setattr(patch, "_set", refuse)
    assert_close(f(a, b), a.double() @ b.double())


def test_the_backend_names_what_compiles_the_routed_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    # Inductor's extern kernels reference torch.mm & co. from its import: imported by compile(), they are
    # torch's functions whatever patch mode has in place when the first call compiles
    import sys

    from alcop_triton.compiling import RoutedBackend
    module = at.compile(nn.Linear(2, 2))
    assert isinstance(module, nn.Module)
    extern = sys.modules["torch._inductor.select_algorithm"].extern_kernels
    assert getattr(extern, "mm", torch.mm) is not patch._wrappers.get((id(torch), "mm"), (None, None))[1]
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: seen.append(kw) or model)
    at.compile(nn.Linear(2, 2), mode="max-autotune", dynamic=False)
    (kw,) = seen
    assert isinstance(kw["backend"], RoutedBackend) and kw["backend"].backend == "inductor"
    assert kw["mode"] == "max-autotune" and kw["backend"].dynamic is False


def test_a_compiled_call_is_not_recompiled_when_the_call_counters_move(records: Callable[[Workload, bool], None]
                                                                        ) -> None:
    # Dynamo traced route.call's counter increment and guarded the frame on the counter's value: each eager
    # call in between (another count) recompiled it, until the recompile limit left the model eager.
    from torch._dynamo.testing import CompileCounter
    records(_gemm(8, 12, 16, "nt"), True)
    counter = CompileCounter()
    f = at.compile(lambda x, w: F.linear(x, w), backend=counter)
    x, w = randn(8, 16), randn(12, 16, seed=1)
    with torch.no_grad():
        f(x, w)
        for _ in range(3):
            fastpath._counters.dispatched += 1  # as any call through torch's dispatcher counts
            at.linear(x, w)  # an eager call of alcop's: its counters move
            assert_close(f(x, w), F.linear(x.double(), w.double()))
    assert counter.frame_count == 1


def test_a_model_compiled_beside_a_plain_compile_runs_its_own_graph_on_every_call(
        records: Callable[[Workload, bool], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As benchmarks/e2e.py runs the modes: plain torch.compile and alcop_triton.compile of one model, eager
    # patched calls between them. Each call of alcop's compiled model must run the graph with alcop's ops
    # (a guard that failed on every call once sent them to plain compile's cached graph, or to recompiles).
    from alcop_triton.compiling import op_calls
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    class Ffn(nn.Module):  # a SwiGLU block: gate and up to alcop by the records, down to torch
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.gate, self.up, self.down = nn.Linear(16, 24, bias=False), nn.Linear(16, 24, bias=False), \
                nn.Linear(24, 16, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(F.silu(self.gate(x)) * self.up(x))
    records(_gemm(8, 24, 16, "nt"), True)
    records(_gemm(8, 16, 24, "nt"), False)
    model, x = Ffn().eval(), randn(8, 16)
    want = model.double()(x.double())
    model.float()

    def alcop_calls(fn: Callable[[torch.Tensor], torch.Tensor]) -> int:
        return op_calls(lambda: assert_close(fn(x), want))
    with torch.inference_mode():
        plain, ours = torch.compile(model), at.compile(model)
        plain(x)
        ours(x)
        # Patch mode's wrappers outlive an eager block (patch._set): each compiled model, whose guards hold
        # torch's F.linear, compiles once more for the wrappers (no alcop op: traced with routing off)...
        with at.patched():
            model(x)
        plain(x)
        ours(x)
        for _ in range(3):  # ...and from then on runs its own graph, with or without the wrappers
            with at.patched():
                model(x)
            assert alcop_calls(plain) == 0
            assert alcop_calls(ours) == 2   # gate (its SiLU in the epilogue) and up


def test_torch_compiles_arguments_pass_through_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # Inductor's own tuning (max_autotune_pointwise, coordinate_descent_tuning) stays the caller's choice:
    # measured on by default, it helped one model and cost another as much (docs/decisions.md#d49).
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: seen.append(kw) or model)
    fn = lambda x: x  # noqa: E731
    at.compile(fn)
    at.compile(fn, mode="max-autotune")
    at.compile(fn, options={"max_autotune_pointwise": True}, backend="aot_eager", fullgraph=True)
    assert [{k: v for k, v in kw.items() if k != "backend"} for kw in seen] == [
        {}, {"mode": "max-autotune"}, {"options": {"max_autotune_pointwise": True}, "fullgraph": True}]
    assert [kw["backend"].backend for kw in seen] == ["inductor", "inductor", "aot_eager"]


def test_mode_and_options_reach_the_backend_as_torch_compile_passes_them() -> None:
    # torch.compile checks them (both at once is its RuntimeError) and hands them to a caller's backend
    with pytest.raises(RuntimeError, match="Either mode or options"):
        at.compile(lambda x: x, mode="max-autotune", options={"max_autotune_pointwise": True})
    got: list[tuple[Any, Any]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor], mode: Any = None,
                options: Any = None) -> Any:
        got.append((mode, options))
        return gm.forward
    at.compile(lambda x: x + 1, backend=backend, mode="reduce-overhead")(randn(2))
    torch._dynamo.reset()
    at.compile(lambda x: x + 1, backend=backend, options={"a": 1})(randn(2))
    assert got == [("reduce-overhead", None), (None, {"a": 1})]


def test_a_compiled_graph_follows_the_records_not_a_cached_graph(records: Callable[[Workload, bool], None],
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # AOTAutograd's cache keys a graph on Dynamo's graph, which does not hold the records: a graph of
    # deciding ops was served with the decisions of an earlier compile. Two compiles with Inductor (and
    # its on-disk caches, fresh here), records reversed in between: each graph follows its records.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    from torch._inductor.utils import run_and_get_code

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w)

    x, w = randn(8, 16), randn(12, 16, seed=1)
    workload = _gemm(8, 12, 16, "nt")
    codes = []
    for alcop_faster in (True, False):
        records(workload, alcop_faster)  # the newer record of each run is the one dispatch reads
        torch._dynamo.reset()
        with torch.no_grad():
            got, code = run_and_get_code(at.compile(f), x, w)
        codes.append("\n".join(code))
        assert_close(got, f(x.double(), w.double()))
    assert "torch.ops.alcop.linear" in codes[0] and "torch.ops.alcop" not in codes[1], codes[1][-2000:]


def test_a_graph_compiled_under_autocast_routes_the_autocast_dtype(records: Callable[[Workload, bool], None]) -> None:
    # torch's autocast casts a linear's arguments inside the graph too; the deciding call does the same
    # before it decides, so the records asked are the bf16 workload's and the result is bf16, as torch's
    records(Workload("matmul", (8, 16, 16), "bfloat16", "nt"), True)   # whole 16-byte rows (``vector_rows``)
    x, w = randn(8, 16), randn(16, 16, seed=1)
    graphs = Graphs()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = F.linear(x, w)
        got = at.compile(lambda a, b: F.linear(a, b), backend=graphs.backend, fullgraph=True)(x, w)
    assert got.dtype == want.dtype == torch.bfloat16
    code = graphs.forward[-1]
    assert _alcop_ops(code) == {"alcop.linear"} and "dtype = torch.bfloat16" in code, code
    assert float((got.double() - F.linear(x.double(), w.double())).abs().max()) < 0.1


def test_torchs_own_traces_during_a_compile_keep_torchs_products() -> None:
    # Inductor traces its pattern replacements through torch's Python functions while it compiles (float32
    # addmm unfused as ``x1 @ x2 + inp`` on CUDA): under patch mode those calls must stay torch's, since the
    # user's calls were decided where Dynamo traced them. Outside a compile, a trace keeps patch mode's route.
    from torch._guards import CompileContext, CompileId, compile_context
    from torch.fx.experimental.proxy_tensor import make_fx

    a, b = randn(8, 16), randn(16, 4)
    with at.patched():
        with compile_context(CompileContext(CompileId(frame_id=0, frame_compile_id=0))):
            inside = make_fx(lambda x, y: x @ y + 1, tracing_mode="fake")(a, b).code
        outside = make_fx(lambda x, y: x @ y, tracing_mode="fake")(a, b).code
    assert "aten.mm" in inside and "alcop" not in inside, inside
    assert "alcop.mm" in outside, outside


@pytest.mark.parametrize("alcop_faster", [True, False], ids=["alcop_faster", "torch_faster"])
def test_attention_heads_in_half_precision_follow_the_records_in_a_graph(
        alcop_faster: bool, records: Callable[[Workload, bool], None]) -> None:
    # fp16 products with two batch dims read permuted: eagerly torch.matmul would copy the operands first,
    # so patch mode's eager calls keep them alcop's whatever torch's recorded time; in a graph Inductor
    # writes them contiguous for torch's bmm, so the records decide as for any product
    records(Workload("bmm", (6, 8, 8, 16), "float16", "nt"), alcop_faster)
    q, k = randn(2, 8, 3, 16).half(), randn(2, 8, 3, 16, seed=1).half()
    fn = lambda q, k: torch.matmul(q.transpose(1, 2), k.transpose(1, 2).transpose(-2, -1))  # noqa: E731
    graphs = Graphs()
    with torch.no_grad():
        got = at.compile(fn, backend=graphs.backend, fullgraph=True)(q, k)
    code = graphs.forward[-1]
    assert (_alcop_ops(code) == {"alcop.bmm"}) == alcop_faster, code
    assert bool(_torch_products(code)) != alcop_faster, code
    assert_close(got, fn(q.double(), k.double()))
    with torch.no_grad(), OpRecorder() as rec, at.patched():  # eagerly: alcop's either way (torch copies first)
        fn(q, k)
    assert "alcop.bmm" in rec.ops and "aten.bmm" not in rec.ops, rec.ops


def _measured(w: Workload, alcop_ms: float, torch_ms: float) -> None:
    """``w`` measured in the ``records`` fixture's database with these times."""
    import os
    db = Database(Path(os.environ["ALCOP_DB"]))
    db.add(dataclasses.replace(TuningRecord.from_result(w, MeasureResult(KernelConfig(), alcop_ms, None), SPEC),
                               torch_ms=torch_ms))
    fastpath.invalidate()


def test_a_gain_patch_mode_takes_but_a_graph_does_not_leaves_the_graph_torchs(
        records: Callable[[Workload, bool], None], caplog: pytest.LogCaptureFixture) -> None:
    # 10% and 10 µs: above PATCH_MIN_GAIN, below GRAPH_MIN_GAIN (torch's record overstated what graphs ran)
    w = _gemm(8, 12, 16, "nt")
    _measured(w, 0.09, 0.10)
    cpu = torch.device("cpu")
    assert not choose_config.prefers_torch(cpu, lambda: w)
    assert choose_config.prefers_torch(cpu, lambda: w, graph=True)
    fn, make_args, _, _ = CASES["linear_bias_relu"]
    args = make_args()
    graphs = Graphs()
    with torch.no_grad():
        got = at.compile(fn, backend=graphs.backend, fullgraph=True)(*args)
        with OpRecorder() as rec, at.patched():   # eagerly the same records send it to alcop
            fn(*args)
    assert not _alcop_ops(graphs.forward[-1]) and _torch_products(graphs.forward[-1]), graphs.forward[-1]
    assert "alcop.linear" in rec.ops, rec.ops
    assert_close(got, fn(*(a.double() for a in args)))
    # a gain above the graphs' margin: alcop's op; the log says why, with the times weighed
    _measured(w, 0.05, 0.10)
    torch._dynamo.reset()
    graphs = Graphs()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="alcop_triton.compile"):
        at.compile(fn, backend=graphs.backend, fullgraph=True)(*args)
    assert _alcop_ops(graphs.forward[-1]) == {"alcop.linear"}, graphs.forward[-1]
    said = [r.getMessage() for r in caplog.records if r.name == "alcop_triton.compile"]
    alcop_ms, torch_ms = choose_config.recorded_times(torch.device("cpu"), w)   # both records of the config count
    assert alcop_ms is not None and torch_ms == 0.1 and alcop_ms <= 0.085
    assert f"graph: {w.key()} -> alcop's op: recorded alcop {alcop_ms:.4f} ms, torch 0.1000 ms; a graph asks 15% " \
        "and 5 µs" in said, said


def test_a_product_whose_output_rows_are_not_whole_vectors_stays_torchs_in_a_graph(
        records: Callable[[Workload, bool], None], caplog: pytest.LogCaptureFixture) -> None:
    # 13 float32 columns: 52-byte output rows (GPT-2's LM head: 50,257 fp16 columns)
    records(_gemm(8, 13, 16, "nt"), True)
    x, w = randn(8, 16), randn(13, 16, seed=1)
    graphs = Graphs()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="alcop_triton.compile"):
        got = at.compile(F.linear, backend=graphs.backend, fullgraph=True)(x, w)
    with torch.no_grad(), OpRecorder() as rec, at.patched():   # eagerly the records send it to alcop
        F.linear(x, w)
    assert any("matmul:8x13x16:float32:nt -> torch's op: rows that are not whole 16-byte vectors" in r.getMessage()
               for r in caplog.records), caplog.records
    assert not _alcop_ops(graphs.forward[-1]) and _torch_products(graphs.forward[-1]), graphs.forward[-1]
    assert "alcop.linear" in rec.ops, rec.ops
    assert_close(got, F.linear(x.double(), w.double()))


@pytest.mark.parametrize("w,whole", [
    (Workload("matmul", (8192, 50257, 768), "float16", "nt"), False),   # GPT-2's LM head: output rows
    (Workload("matmul", (8192, 3072, 768), "float16", "nt"), True),
    (Workload("matmul", (8192, 3072, 770), "float16", "nn"), False),    # A's rows
    (Workload("bmm", (192, 512, 512, 64), "float16", "nt"), True),
    (Workload("matmul", (8, 12, 16), "float32", "nt"), True),
])
def test_vector_rows(w: Workload, whole: bool) -> None:
    from alcop_triton.ops import traced
    assert traced.vector_rows(w) is whole
