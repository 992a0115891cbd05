"""Epilogues folded into routed linears in the graphs ``torch.compile`` builds with routing on.

Dynamo's graph of ``act(linear(x)) + r`` holds the deciding call ``alcop.routed_linear`` (``ops.traced``)
followed by the activation and the add. Where that call becomes alcop's op, the activation and the residual
add can run in the kernel's epilogue (``alcop.linear``'s ``activation`` and ``residual``), saving Inductor's
separate pass over the product's output: one read and one write of it. ``fold`` rewrites the graph so
the deciding call receives them. Where the call becomes torch's op, it computes exactly what the graph held
before (``_torch_linear``: the product, then the activation, then the add), so folding never costs.

Folded only where the result is the same computation:
- the activation is one alcop's epilogue has (``fallback.TORCH_ACTIVATIONS``) with torch's default form
  (``gelu`` exact, not ``approximate="tanh"``; not in place), and the linear's output has no other user;
- the residual is a tensor of the output's shape, dtype and device (no broadcast, no type promotion: under
  autocast, an fp32 residual added to an fp16 product stays an add), added with ``+`` or ``torch.add``
  without ``alpha``; the product (or its activation) has no other user.

``install`` hooks ``fold`` into Inductor's pre-grad passes (``torch._inductor.config.pre_grad_custom_pass``,
chained after a pass already set there): the graphs it sees are Dynamo's, and a graph without a routed
linear (anything not traced with routing on) is left as it is.
"""

from __future__ import annotations

import hashlib
import operator
from pathlib import Path
from typing import Any, Callable

import torch
import torch.fx
import torch.nn.functional as F

from ..fallback import TORCH_ACTIVATIONS

_ACTIVATION_FUNCTIONS: dict[Any, str] = {
    torch._C._nn.gelu: "gelu", F.gelu: "gelu", F.relu: "relu", torch.relu: "relu", F.silu: "silu",
    torch.tanh: "tanh", torch.sigmoid: "sigmoid"}
"""Call targets Dynamo's graphs hold for the activations alcop's epilogue has (``nn.ReLU``... inlined)."""
_ACTIVATION_METHODS = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid"}
"""``Tensor`` methods of the same (``call_method`` nodes)."""
_ADDS = (operator.add, torch.add)

assert set(_ACTIVATION_FUNCTIONS.values()) <= set(TORCH_ACTIVATIONS)


def _value(node: Any) -> torch.Tensor | None:
    """The example value Dynamo recorded for ``node`` (a fake tensor), if it is a tensor."""
    v = node.meta.get("example_value", node.meta.get("val")) if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _activation(node: torch.fx.Node) -> str | None:
    """The alcop activation ``node`` computes on its first argument, or None."""
    if node.op == "call_function" and node.target in _ACTIVATION_FUNCTIONS:
        name = _ACTIVATION_FUNCTIONS[node.target]
        extra = dict(node.kwargs)
        if len(node.args) != 1 or extra.pop("inplace", False) or extra.pop("approximate", "none") != "none" \
                or extra:
            return None
        return name
    if node.op == "call_method" and node.target in _ACTIVATION_METHODS and len(node.args) == 1 and not node.kwargs:
        return _ACTIVATION_METHODS[str(node.target)]
    return None


def _residual(node: torch.fx.Node, out: torch.fx.Node) -> torch.fx.Node | None:
    """The other operand of ``node`` if it adds a same-shaped, same-dtype tensor to ``out``, else None."""
    if node.op != "call_function" or node.target not in _ADDS or node.kwargs or len(node.args) != 2:
        return None
    a, b = node.args
    other = b if a is out else a if b is out else None
    if other is None or other is out or not isinstance(other, torch.fx.Node):
        return None
    y, r = _value(out), _value(other)
    if y is None or r is None or r.shape != y.shape or r.dtype != y.dtype or r.device != y.device:
        return None
    return other


def _fold_one(graph: torch.fx.Graph, call: torch.fx.Node, order: dict[torch.fx.Node, int]) -> bool:
    """Fold what follows one routed linear ``call`` into it; whether anything was folded. ``order``: each
    node's position in the graph (a residual must exist when the call runs)."""
    args = list(call.args) + [None] * (5 - len(call.args))
    x, w, bias, residual, activation = args[:5]
    if residual is not None or activation is not None or call.kwargs:
        return False
    tail, folded = call, False
    users = list(tail.users)
    if len(users) == 1 and (act := _activation(users[0])) is not None and _value(users[0]) is not None \
            and _value(users[0]).dtype == _value(call).dtype:  # type: ignore[union-attr]
        activation, tail, folded = act, users[0], True
    users = list(tail.users)
    if len(users) == 1 and (res := _residual(users[0], tail)) is not None and order[res] < order[call]:
        residual, tail, folded = res, users[0], True
    if not folded:
        return False
    call.args = (x, w, bias, residual, activation)
    if tail is not call:
        call.meta.update({k: v for k, v in tail.meta.items() if k in ("example_value", "val", "tensor_meta")})
        tail.replace_all_uses_with(call)
        for node in reversed(list(_chain(call, tail))):
            graph.erase_node(node)
    return True


def _chain(call: torch.fx.Node, tail: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes after ``call`` up to ``tail``, each the single user of the one before."""
    out, node = [], call
    while node is not tail:
        node = next(iter(node.users))
        out.append(node)
    return out


def fold(graph: torch.fx.Graph) -> int:
    """Fold activations and residual adds into the routed linears of ``graph``; returns how many calls
    changed (0: the graph is untouched)."""
    from .gemm import ROUTED
    nodes = list(graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}  # folding erases nodes after a call, never before one
    n = sum(_fold_one(graph, node, order) for node in nodes
            if node.op == "call_function" and node.target is ROUTED.linear)
    if n:
        graph.lint()
        if isinstance(graph.owning_module, torch.fx.GraphModule):
            graph.owning_module.recompile()
    return n


_SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
"""What ``fold`` does is this module's code: its hash names the pass's version."""


class _AlcopFold:
    """``fold``, then the passes the setting held before (None, a pass, or a list of passes on newer torch).

    Its ``uuid`` (Inductor's ``CustomGraphPass`` interface, which ``_chained`` makes it an instance of) is this
    module's source hash and the earlier passes' uuids: a pass with one runs after Inductor's cache lookup
    and the cache keys on it. Without one, newer torch warns on every compile and runs the pass before the
    lookup. None where an earlier pass has no uuid of its own: what that pass does cannot be keyed, so the
    cache must not be trusted with it."""

    _alcop_fold = True

    def __init__(self, previous: Any) -> None:
        self.after: list[Callable[[torch.fx.Graph], Any]] = (
            [] if previous is None else list(previous) if isinstance(previous, (list, tuple)) else [previous])

    def __call__(self, graph: torch.fx.Graph) -> None:
        fold(graph)
        for p in self.after:
            p(graph)

    def uuid(self) -> Any:
        theirs = [getattr(p, "uuid", lambda: None)() for p in self.after]
        if any(u is None for u in theirs):
            return None
        return (_SOURCE_HASH, *theirs)


AlcopFold: type | None = None
"""``_pass_class``'s class once made: a module attribute, so that pickle finds the class by name (Inductor
pickles its settings, this pass among them, into its cache key; a class pickle cannot look up is a failed key
and a compile without the cache)."""


def _pass_class() -> type:
    """``_AlcopFold`` as a subclass of Inductor's ``CustomGraphPass`` (where torch has one), made at the first
    ``install``: importing Inductor's module at alcop_triton's import would import torch._dynamo with it."""
    global AlcopFold
    if AlcopFold is None:
        try:
            from torch._inductor.custom_graph_pass import CustomGraphPass
        except ImportError:  # pragma: no cover - older torch: a plain callable
            return _AlcopFold
        # made by CustomGraphPass's metaclass, whose module would otherwise be the class's (abc)
        AlcopFold = type("AlcopFold", (_AlcopFold, CustomGraphPass), {"__module__": __name__, "__qualname__": "AlcopFold"})
    return AlcopFold


def _chained(previous: Any) -> Callable[[torch.fx.Graph], None]:
    """``fold``, then ``previous``: what the setting held (None, a pass, or a list of passes on newer torch)."""
    made: Callable[[torch.fx.Graph], None] = _pass_class()(previous)
    return made


def install() -> None:
    """Hook ``fold`` into Inductor's pre-grad passes (once; after a pass already there)."""
    from torch._inductor import config
    try:
        current = config.pre_grad_custom_pass
    except AttributeError:  # a torch without the setting: graphs compile unfolded
        return
    if not getattr(current, "_alcop_fold", False):
        config.pre_grad_custom_pass = _chained(current)
