"""``alcop_triton.compile``: ``torch.compile`` whose graphs hold alcop's ops where the records show them faster.

    model = alcop_triton.compile(model, mode="max-autotune")   # any torch.compile argument
    y = model(x)

The result is ``torch.compile``'s own, with a backend of alcop's in front of the one asked for
(``RoutedBackend``): Dynamo hands it each graph it captures, it puts a routed call in place of each of
torch's products and convolutions (patch mode's routes, ``patch.ROUTES``), and the backend asked for
(Inductor by default) compiles the graph with routing on, so each routed call becomes alcop's op or
torch's, per workload, from the records (``ops.traced``; ``docs/compile.md``). Routing is a compile-time
matter: a compiled call runs exactly torch.compile's code, with its guards and nothing of alcop's around it
(no patch-mode block per call, no guard on alcop's state), and code Dynamo leaves eager (a graph break's)
runs torch's functions, as under ``torch.compile``. Compiling under ``patched()`` instead traces patch
mode's wrappers: the same graphs, with patch mode's eager code around them.

Inductor's own kernels are compiled as ``torch.compile`` compiles them: tuning them is the caller's choice
(``options={"max_autotune_pointwise": True}`` gave the Llama-sized block's attention softmax max-autotune's
time at plain compile's compile time, but BERT-base lost as much elsewhere: ``docs/decisions.md#d49``).
"""

from __future__ import annotations

import importlib
import operator
from typing import Any, Callable, TypeVar

import torch
import torch.fx

from . import ops
from .ops import traced, traced_epilogues
from .ops import conv as _conv
from .ops.gemm import ROUTED
from .patch import ROUTES

Model = TypeVar("Model", bound=Callable[..., Any])


def _torchs(owner: Any, name: str) -> Any:
    """``owner.name`` as torch defines it (patch mode's wrapper, where one is in place, names it)."""
    fn = getattr(owner, name)
    return fn.__wrapped__ if hasattr(fn, "__alcop_route__") else fn


ROUTED_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    operator.matmul: ops.matmul,
    **{_torchs(owner, name): drop_in for owner, name, drop_in in ROUTES
       if owner is not torch.Tensor and drop_in is not ops.linear}}
"""Call targets of Dynamo's graphs -> the drop-in put in their place: patch mode's routes (``patch.ROUTES``)
as Dynamo records them (``F.convNd`` is ``torch.convNd``; ``nn.ConvNd`` and ``nn.Linear`` are inlined to
these; ``@`` is ``operator.matmul``). ``F.linear`` is ``LINEAR``'s."""
ROUTED_METHODS: dict[str, Callable[..., Any]] = {name: drop_in for owner, name, drop_in in ROUTES
                                                 if owner is torch.Tensor}
"""``Tensor`` methods of the same (``call_method`` nodes: ``x.matmul(w)``)."""
_ROUTED_OPS = {"mm": ROUTED.mm, "bmm": ROUTED.bmm, "gemm": ROUTED.gemm, "linear": ROUTED.linear,
               "conv": _conv.ROUTED.conv}
ROUTED_OPS: dict[Any, Callable[..., Any]] = {
    op: decide for name, decide in _ROUTED_OPS.items()
    for op in (getattr(torch.ops.alcop, name), getattr(torch.ops.alcop, name).default)}
"""alcop's registered ops (a drop-in called in the compiled code: Dynamo records its op) -> the deciding call of
the same schema: as in patch mode, a drop-in's workload that the records leave to torch runs torch's."""
LINEAR = torch._C._nn.linear
"""``F.linear`` as Dynamo's graphs hold it: put in place by the deciding call itself (``ROUTED.linear``), whose
node the epilogue pass folds activations and residual adds into (``ops.traced_epilogues``)."""


def compile(model: Model, **torch_compile_kwargs: Any) -> Model:
    """``torch.compile(model, **torch_compile_kwargs)`` whose graphs route torch's products and
    convolutions through alcop where the records show alcop faster. Every argument is torch.compile's and
    means what it means there; ``backend`` (default ``"inductor"``) is the one that compiles the routed
    graphs, with ``mode`` and ``options`` passed to it as torch.compile passes them. An ``nn.Module`` gives
    torch.compile's module (parameters, ``state_dict`` and all), a function a function."""
    backend = torch_compile_kwargs.pop("backend", "inductor")
    if backend == "inductor":
        # Inductor takes references to torch.mm & co. when it is imported (its extern kernels): imported
        # here, it takes torch's functions even where patch mode's wrappers are in place later, when the
        # first call compiles (they outlive an eager patched() block).
        importlib.import_module("torch._inductor.select_algorithm")
    routed = RoutedBackend(backend, torch_compile_kwargs.get("dynamic"))
    return torch.compile(model, backend=routed, **torch_compile_kwargs)  # type: ignore[return-value]


class RoutedBackend:
    """A Dynamo backend: each graph with its routed calls in place (``route_graph``), compiled by ``backend``
    (a name or a callable, as torch.compile takes it) with routing on in this thread (``traced.state``),
    which the routed calls read while AOTAutograd traces them on fake tensors: each becomes alcop's op or
    torch's there. ``mode`` and ``options`` come from torch.compile's wrapper, which passes them to a
    backend of the caller's (and checks them first)."""

    def __init__(self, backend: str | Callable[..., Any], dynamic: bool | None) -> None:
        self.backend, self.dynamic = backend, dynamic
        self._inner: tuple[tuple[str | None, dict[str, Any] | None], Callable[..., Any]] | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str | None = None,
                 options: dict[str, Any] | None = None) -> Callable[..., Any]:
        inner = self.inner(mode, options)
        route_graph(gm)
        if self.backend == "inductor":
            traced_epilogues.install()  # Inductor's pre-grad passes fold epilogues into the routed linears
        state = traced.state
        on, within = state.on, state.backend
        state.on = state.backend = True
        try:
            return inner(gm, example_inputs)
        finally:
            state.on, state.backend = on, within

    def inner(self, mode: str | None, options: dict[str, Any] | None) -> Callable[..., Any]:
        """The backend that compiles the routed graphs, made as torch.compile makes it (torch's own wrappers:
        Inductor's reads the mode's settings), once: torch.compile's wrapper passes the same mode and options
        with every graph."""
        if self._inner is None or self._inner[0] != (mode, options):
            made = (torch._TorchCompileInductorWrapper(mode, options, self.dynamic) if self.backend == "inductor"
                    else torch._TorchCompileWrapper(self.backend, mode, options, self.dynamic))
            self._inner = ((mode, options), made)
        return self._inner[1]

    def reset(self) -> None:
        """What ``torch._dynamo.reset()`` asks of a backend: the inner backends' reset."""
        if self._inner is not None:
            getattr(self._inner[1], "reset", lambda: None)()


def route_graph(gm: torch.fx.GraphModule) -> int:
    """Put the routed calls in place of torch's products and convolutions in Dynamo's graph ``gm``; returns how
    many. A call the drop-in does not take as torch's function does (more positional arguments: the deprecated
    ``addmm(beta, input, alpha, mat1, mat2)``; ``@`` of an operand that is no tensor) stays torch's."""
    n = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is LINEAR:
            args = _linear_args(node)
            if args is not None:
                node.target, node.args, node.kwargs = ROUTED.linear, args, {}
                n += 1
            continue
        if node.op == "call_function" and node.target in ROUTED_OPS:
            if not node.kwargs:
                node.target = ROUTED_OPS[node.target]
                n += 1
            continue
        if node.op == "call_function":
            drop_in = ROUTED_FUNCTIONS.get(node.target)
        elif node.op == "call_method" and isinstance(node.target, str):
            drop_in = ROUTED_METHODS.get(node.target)
        else:
            continue
        if drop_in is None or not all(_is_tensor(a) for a in node.args[:2]) or len(node.args) > _arity(drop_in):
            continue
        node.op, node.target = "call_function", drop_in
        n += 1
    if n:
        gm.graph.lint()
        gm.recompile()
    return n


def _linear_args(node: torch.fx.Node) -> tuple[Any, ...] | None:
    """The deciding call's arguments for ``node``, a call of ``F.linear``: its (input, weight, bias), no residual
    and no activation (what the epilogue pass may fill in); None if it has other arguments."""
    args, kwargs = list(node.args), dict(node.kwargs)
    names = ("input", "weight", "bias")
    for name in names[len(args):]:
        if name in kwargs:
            args.append(kwargs.pop(name))
        elif name == "bias":
            args.append(None)
    if kwargs or len(args) != 3 or not (_is_tensor(args[0]) and _is_tensor(args[1])):
        return None
    return (*args, None, None)


def _is_tensor(arg: Any) -> bool:
    value = arg.meta.get("example_value", arg.meta.get("val")) if isinstance(arg, torch.fx.Node) else None
    return isinstance(value, torch.Tensor)


def _arity(fn: Callable[..., Any]) -> int:
    """How many positional arguments a drop-in takes."""
    return int(fn.__code__.co_argcount)


def op_calls(fn: Callable[[], Any]) -> int:
    """How many calls of alcop's ops (``torch.ops.alcop``) one call of ``fn`` makes, counted from
    torch.profiler's record of each op call: whether a compiled model runs the graph with alcop's ops (a
    graph's code can hold them while its calls run another graph: ``docs/compile.md``, status)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("alcop::"))
