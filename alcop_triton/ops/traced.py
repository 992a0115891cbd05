"""What a routed call becomes in a graph ``torch.compile`` builds: alcop's op where the records show it
faster, else torch's own, decided per workload while the graph is built.

Dynamo runs Python symbolically: it cannot ask the tuning records (a database, caches, dataclasses) from
the code it traces, and the shapes it sees there are its own variables. So a routed call traced with
routing on (``state.on``: patch mode) puts a call of a *deciding op* in Dynamo's graph,
``torch.ops.alcop.routed_{mm,bmm,gemm,linear,conv}`` (behind a plain function: ``define``);
``alcop_triton.compile``'s backend puts the same calls in the graphs Dynamo traced without routing
(``compiling.route_graph``).
Each is ``CompositeImplicitAutograd``: it has no
kernel of its own, and wherever torch runs it — Dynamo's fake-tensor propagation, AOTAutograd's trace
that Inductor and every ``aot_autograd`` backend compile — its Python body runs on fake tensors with
their concrete sizes, strides, dtypes and device, asks ``choose_config.prefers_torch`` (the question
eager patch mode's first call of the same workload asks, with a larger margin: ``to_torch``) and calls
alcop's op (``torch.ops.alcop.mm``...) or torch's function in its place. The graph that is compiled holds
that op, never the deciding one.

Sizes that are symbolic (``dynamic=True``, or shapes Dynamo marked dynamic after a recompile) name no
workload: such calls get torch's op. Nothing is tuned while deciding unless ``ALCOP_AUTOTUNE=1`` asks
for it (the dispatcher's rule), and then outside the tracing modes, on real tensors.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .. import amp, choose_config, fastpath
from ..records import Workload

Tensor = torch.Tensor


class _Routing(threading.local):
    """Whether this thread traces with routing on: what patch mode last set here (Dynamo reads no context
    variable, so a trace follows this thread's flag rather than the fast path's mode). ``backend``: this
    thread is inside ``alcop_triton.compile``'s backend, whose graphs AOTAutograd traces: a routed call
    there is a graph's call whatever torch's compile flag says (torch 2.11 does not set it while
    AOTAutograd traces; a drop-in traced there took its registered op undecided, seen on the H200)."""
    on = False
    backend = False


state = _Routing()


def routing_on() -> bool:
    """``state.on``, this thread's flag: what patch mode's wrappers follow where AOTAutograd traces a graph
    (``by_torch`` turns it off there, so torch's decompositions get torch's functions). Code Dynamo traces
    reads ``ROUTED`` instead: torch 2.11's Dynamo reads a thread-local attribute's class default (False)."""
    return state.on


ROUTED = False
"""``state.on`` as Dynamo reads it: the code Dynamo traces (patch mode's wrappers, ``route.call``) reads this
module attribute, and Dynamo guards the graph on its value. So a graph traced with routing on runs only
while routing is on, and one traced with it off only while it is off: a compiled model called inside
and outside ``patched()`` (or two ``torch.compile``s of one model, one called in the block) share Dynamo's
cache of its code, and without the guard each ran the other's graph (``docs/compile.md``). A
process-wide value, set with the thread's flag (``set_on``): where threads trace under different routing at
the same time, a trace follows the thread that last entered or left patch mode."""


def set_on(on: bool) -> None:
    """Routing on or off in this thread (``state.on``) and for Dynamo's traces and guards (``ROUTED``)."""
    global ROUTED
    state.on = ROUTED = on


LIBRARY = torch.library.Library("alcop", "FRAGMENT")
"""The deciding ops' definitions (their namespace is alcop's ops')."""


def concrete(*tensors: Tensor | None) -> bool:
    """Whether every size and stride of ``tensors`` is a plain int (no symbolic size of a dynamic trace)."""
    for t in tensors:
        if t is None:
            continue
        for v in (*t.shape, *t.stride()):
            if not isinstance(v, int):
                return False
    return True


def to_torch(device: torch.device, workload: Callable[[], Workload | None], torch_comparable: bool = True,
             torch_workload: Callable[[], Workload | None] | None = None) -> bool:
    """Whether a graph gets torch's op for this workload: a product whose rows are not whole 16-byte vectors
    (``vector_rows``), else ``choose_config.prefers_torch`` with the graphs' margin (``GRAPH_MIN_GAIN``),
    asked outside the tracing modes (fake tensors, functionalization, the proxy): whatever it reads or,
    under ``ALCOP_AUTOTUNE=1``, measures is real. The workloads are computed first, from the traced
    tensors' metadata."""
    w = workload()
    if w is not None and not vector_rows(w):
        _say(w, "torch's op: rows that are not whole 16-byte vectors (docs/decisions.md#d48)")
        return True
    tw = torch_workload() if torch_workload is not None else None
    with _disable_current_modes():
        torch_op = choose_config.prefers_torch(device, lambda: w, torch_comparable,
                                               (lambda: tw) if torch_workload is not None else None, graph=True)
        if w is not None and log.isEnabledFor(logging.INFO):
            alcop_ms, torch_ms = choose_config.recorded_times(device, w, tw)
            times = (f"recorded alcop {alcop_ms:.4f} ms, torch {torch_ms:.4f} ms"
                     if alcop_ms is not None and torch_ms is not None else "times not both recorded")
            from ..autotune.dispatch import GRAPH_MIN_GAIN
            _say(w, f"{'torch' if torch_op else 'alcop'}'s op: {times}; a graph asks "
                    f"{GRAPH_MIN_GAIN[0]:.0%} and {GRAPH_MIN_GAIN[1] * 1000:g} µs")
    return torch_op


log = logging.getLogger("alcop_triton.compile")
"""Each product a graph decides, and why (INFO): ``logging.getLogger("alcop_triton.compile").setLevel("INFO")``."""


def _say(w: Workload, what: str) -> None:
    log.info("graph: %s -> %s", w.key(), what)


def vector_rows(w: Workload) -> bool:
    """Whether every row of a product's operands and output, as stored, is whole 16-byte vectors (other
    workloads are not products: true). Where one is not, the records' torch time is eager torch's on
    unaligned rows, which is not what a compiled graph runs: GPT-2's LM head (8192 x 50257 x 768, fp16)
    recorded cuBLAS at 7.47 ms and alcop at 1.45 ms, yet inside the compiled model cuBLAS ran it at 0.93 ms
    and alcop's op at 1.29 ms (``docs/decisions.md#d48``). Such products stay torch's in graphs."""
    if w.op not in ("matmul", "linear", "bmm"):
        return True
    vec = 16 // w.elem_bytes
    return all(r % vec == 0 for r in (*w.operand_rows(), w.gemm_dims()[2]))


def by_torch(fn: Callable[..., Tensor], *args: Any) -> Tensor:
    """``fn(*args)``, torch's computation of a call decided for torch, with routing off: torch's own
    decompositions (``aten.matmul``'s calls ``torch.bmm``...) reach patch mode's wrappers while a graph
    is built, which must give them torch's functions, not decide them again. Both flags go off: the
    trace's (``state``) and the thread's patch-mode routing (``fastpath``'s mode), which the wrappers
    read where torch 2.11 does not mark AOTAutograd's trace as compiling."""
    on, state.on = state.on, False
    mode = fastpath._mode.get()
    token = fastpath._mode.set(fastpath.unrouted(mode)) if mode.routes else None
    try:
        return fn(*args)
    finally:
        if token is not None:
            fastpath._mode.reset(token)
        state.on = on


_IN_GRAPH: list[Callable[..., Tensor]] = []
"""Each deciding op's call as Dynamo's graph holds it (``define``); ``allow_in_graph`` lets Dynamo put them there."""


def define(name: str, schema: str, decide: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Define ``alcop::<name>`` with ``schema``, implemented by ``decide`` for every backend (it decomposes),
    and give the function that calls it: what a traced call becomes in Dynamo's graph.

    Dynamo's graph holds that Python function, not the op: AOTAutograd's cache keys a compiled graph on
    Dynamo's graph, which does not hold the records a decision reads, so a graph holding the op was
    served from the cache with another process's decisions (seen: a float32 MLP that the records leave
    to torch compiled with alcop's op cached by an earlier run whose records chose alcop). A plain
    function in the graph makes AOTAutograd bypass its cache; Inductor's own cache keys the graph after
    the decisions, which holds the op each decision chose."""
    LIBRARY.define(f"{name}{schema}")
    LIBRARY.impl(name, decide, "CompositeImplicitAutograd")
    op = getattr(torch.ops.alcop, name)

    def call(*args: Any) -> Tensor:
        if amp.is_on():  # inside torch.autocast: the arguments autocast gives torch's function (amp.cast)
            args = amp.cast(args) or args
        return op(*args)

    call.__name__ = call.__qualname__ = name
    call.__module__ = "alcop"  # graphs print it as alcop.<name>, beside alcop's ops
    _IN_GRAPH.append(call)
    return call


def allow_in_graph() -> None:
    """Let Dynamo put the deciding calls into its graphs rather than trace them (once, on entering patch
    mode, which imports Dynamo anyway: routing is on only within it)."""
    import torch._dynamo
    for call in _IN_GRAPH:
        torch._dynamo.allow_in_graph(call)
