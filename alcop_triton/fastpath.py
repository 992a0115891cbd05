"""The fast path: a repeated eager call costs a signature check, an output allocation and a launch.

Two caches, both keyed by everything that decides what a call runs:

Stored signatures (``ops.route.call`` decides when a call takes one; every op of the torch layer goes
through it). The call's *signature* is one tuple: the op and its non-tensor parameters, each tensor's
shape, strides, dtype, device, 16-byte alignment and whether it requires grad (in grad mode), the
``ALCOP_STRICT`` setting, whether patch mode is on in the calling thread and, for float32 inputs, their
precision (``settings.fp32_precision``: torch's TF32 switch and ``ALCOP_FP32``); tensors that are not
plain dense ones over live storage (``tensor_kinds.plain``) have none. The first call of a signature runs the op's
direct route (argument checks, fallback policy, config choice, binding, compilation) while this module
records the launches it makes (``launch_kernel``, ``prepare``); if they account for the whole result
(each kernel tensor is a view of an input or of the output, nothing was computed by torch) the route
stores an ``Entry``: the output's shape, strides, dtype and device, and the prebound launches with the
argument order. Later calls with that signature allocate the output and launch: no config lookup,
binding or Triton specialisation, and the environment's knobs read as raw dict lookups
(``settings.ENV_TABLE``). A first call on the autograd route (autograd Functions made by
``grad_function`` over the same implementations) that applied one Function to the call's own tensors and
returned its output is stored as that apply (``GradEntry``), so a repeat skips the front end's checks.
In patch mode, a signature whose workload the records leave to torch is stored as a call to torch
(``TorchEntry``).

``launch_kernel(kernel, tensors)`` (every kernel launch of the torch layer). A compiled kernel on tensors
of one (dtype, shape, strides, alignment) signature is bound once into a ``runtime.prebind``
launch. The same table is the CUDA-graph warm set: while a stream is captured, a signature seen
before replays its prebound launch; an unseen one would compile, which a capture cannot hold.

Both caches are forgotten at each dispatch generation (``generation.bump``: the tuning database
gained a record, ``invalidate()``); ``stats()`` counts hits and misses. A signature hit once is
also found without computing it: its call site checks the tensors with torch's C++ tensor guard
(``ops.route``'s call sites). Where a C compiler is at hand, that check and a stored entry's allocation and
launch run compiled (``native()``, ``fastpath_native.c``); the Python functions here are their reference.
"""

from __future__ import annotations

import functools
import logging
import operator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Protocol, Sequence

import torch

from . import generation, settings
from .build import Launch
from .choose_config import capture_error
from .tensor_kinds import PLAIN_TYPES, plain

Tensor = torch.Tensor

MAX_ENTRIES = 1 << 16
"""Signatures remembered per cache; a full cache starts over (a model has far fewer)."""



@dataclass(frozen=True)
class Stats:
    """Counters of the call cache since the last ``reset_stats()``.

    hits: calls served by a stored entry; misses: first calls of a signature (they ran the full
    path); uncacheable: misses whose launches did not account for the result (a fallback to
    torch, a copied operand), so nothing was stored; dispatched: calls that needed torch's
    dispatcher (not the calls Dynamo traces); bypassed: calls inside a ``use_config`` block; to_torch: calls
    that patch mode's wrappers sent to torch, at a signature or call site stored as torch's (faster on that workload);
    entries: signatures stored now; generation: ``generation.current()``.
    """
    hits: int
    misses: int
    uncacheable: int
    dispatched: int
    bypassed: int
    to_torch: int
    entries: int
    generation: int


class _Counters:
    def __init__(self) -> None:
        # Instance attributes from the start: ``+=`` on a class default would add one to the
        # instance's dict, which torch.compile guards on (a traced call counts ``dispatched``).
        self.hits = self.misses = self.uncacheable = self.dispatched = self.bypassed = self.to_torch = 0


_counters = _Counters()


class _Recording:
    """What one first call did: its launches, whether torch computed any of the result, and whether
    the records say torch is faster on a workload it ran."""

    def __init__(self) -> None:
        self.preps: list[tuple[Callable[..., tuple[Tensor, ...]], tuple[Tensor, ...], tuple[Tensor, ...], bool]] = []
        self.launches: list[tuple[Callable[..., None], tuple[Tensor, ...]]] = []
        self.torch_computed = False
        self.torch_preferred = False


Replayer = Callable[[Callable[..., Tensor]], Callable[..., Tensor]]
"""Given a stored no-grad call, the apply of an autograd Function whose forward is that call (``grad_function``)."""


class _Applying:
    """A first call on the autograd route (``ops.route._first_autograd_call``): the autograd Functions it applied
    (``note_applied``: apply, replayer, inputs, output, and the signature of the call its forward made,
    i.e. the last one keyed), the last signature keyed and how many calls were keyed meanwhile."""

    __slots__ = ("applied", "last_key", "keyed")

    def __init__(self) -> None:
        self.applied: list[tuple[Callable[..., Tensor], Replayer, tuple[Any, ...], Tensor,
                                 tuple[Any, ...] | None]] = []
        self.last_key: tuple[Any, ...] | None = None
        self.keyed = 0


@dataclass(frozen=True)
class _Mode:
    """What the calls of one thread (one context) are part of: another call's first run, which records
    the launches; a first call on the autograd route; patch mode (``patched``: the calls' signatures are
    patch mode's own, which may send a workload to torch; ``routes``: torch's routed functions called
    here go to the drop-ins, as they do at the top level of patch mode, not inside a drop-in's own run);
    a ``use_config`` block (``forcing``: its config, not the stored launches). ``_DIRECT``, ``_PATCHED``
    and ``_ROUTING`` are the modes with none of recording, applying or forcing: only their calls may
    take a call site's candidate."""
    recording: _Recording | None = None
    applying: _Applying | None = None
    patched: bool = False
    routes: bool = False
    forced: bool = False


_DIRECT = _Mode()
_PATCHED = _Mode(patched=True)
_ROUTING = _Mode(patched=True, routes=True)
# A context variable, not a threading.local: every call reads it, and a variable's get() is a lookup
# in its own cache, where a thread-local's attribute goes through the thread's dict (microseconds on
# a call that finds the CPU's caches cold, as an eager call after a synchronisation does). Each
# thread has its own context, so it is per thread as well.
_mode: ContextVar[_Mode] = ContextVar("alcop_fastpath_mode", default=_DIRECT)


@contextmanager
def _in_mode(mode: _Mode) -> Iterator[None]:
    token = _mode.set(mode)
    try:
        yield
    finally:
        _mode.reset(token)


def forcing() -> Any:
    """The block of ``choose_config.use_config``: calls in it bypass the cache (it holds the dispatcher's
    configs' launches), so that they run the forced config."""
    return _in_mode(replace(_mode.get(), forced=True))


def _traced_mode() -> _Mode:
    """This thread's mode, for code that Dynamo may trace (an op's front end on the dispatched route):
    while it traces, no first call is recording or applying, and Dynamo does not trace ``_mode``."""
    return _DIRECT if _dynamo_tracing() else _mode.get()


def set_routing(on: bool) -> None:
    """Patch mode turned on (``on``) or off in this thread: from here on its calls are patch mode's
    (``_Mode.patched``) and torch's routed functions go to the drop-ins (``routes``), or neither."""
    mode = _mode.get()
    if on:
        _mode.set(_ROUTING if mode is _DIRECT else replace(mode, patched=True, routes=True))
    else:
        _mode.set(_DIRECT if mode is _ROUTING else replace(mode, patched=False, routes=False))


def patch_mode_on() -> bool:
    """Whether this thread's calls are patch mode's now (an autograd Function's forward records it: its
    backward runs in autograd's thread, where patch mode is not on)."""
    return _mode.get().patched


def unrouted(mode: _Mode) -> _Mode:
    """``mode`` (one that ``routes``) inside a drop-in's own run: its signatures stay patch mode's, its
    torch calls (a fallback, a bias add) go to torch's functions instead of coming back to it."""
    return _PATCHED if mode is _ROUTING else replace(mode, routes=False)


Pick = Callable[[tuple[Any, ...]], Any]


class Entry:
    """A stored signature: allocate the output like the first call's, run its operand preparations
    (each appends its results to the arguments), then its launches. ``run(tensors)`` does that; for
    the common entry (no preparation, one launch on the inputs and the output in their order) it is
    a closure of its own that builds no argument tuple to pick from."""

    __slots__ = ("shape", "stride", "like", "preps", "launches", "run")

    def __init__(self, out: Tensor, preps: tuple[tuple[Callable[..., tuple[Tensor, ...]], Pick], ...],
                 launches: tuple[tuple[Callable[..., None], Pick], ...], n_tensors: int) -> None:
        self.shape, self.stride = tuple(out.shape), out.stride()
        # An empty tensor of the output's dtype and device: ``like.new_empty_strided`` parses two
        # arguments where ``torch.empty_strided`` parses four.
        self.like = out.new_empty(0)
        self.preps, self.launches = preps, launches
        self.run: Callable[[tuple[Tensor | None, ...]], Tensor] = self.__call__
        in_order = tuple(range(n_tensors + 1))  # the inputs, then the output
        if not preps and len(launches) == 1 and launches[0][1](in_order) == in_order:
            self.run = _plain_run(self.like.new_empty_strided, self.shape, self.stride, launches[0][0])

    def __call__(self, tensors: tuple[Tensor | None, ...]) -> Tensor:
        out = self.like.new_empty_strided(self.shape, self.stride)
        args: tuple[Any, ...] = (*tensors, out)
        for prep, pick in self.preps:
            args += prep(*pick(args))
        for run, pick in self.launches:
            run(*pick(args))
        return out


def _plain_run(new: Callable[..., Tensor], shape: tuple[int, ...], stride: tuple[int, ...],
               launch: Callable[..., None]) -> Callable[[tuple[Tensor | None, ...]], Tensor]:
    # A launch that runtime.prebind made direct (a compiled kernel's C launcher) carries what its direct
    # launch reads (``native_state``): the native run allocates and launches with the same calls.
    # A split-K launch on CUDA has none (``build.per_stream`` wraps it to pick the current stream's
    # buffers, a check the native run would skip), so it takes the Python run below.
    state: tuple[Any, ...] | None = getattr(launch, "native_state", None)
    module = native() if state is not None else None
    if module is not None and state is not None:
        return functools.partial(module.run, (new, shape, stride, launch, *state))

    def run(tensors: tuple[Tensor | None, ...]) -> Tensor:
        out = new(shape, stride)
        launch(*tensors, out)
        return out
    return run


class TorchEntry:
    """A stored patch-mode signature whose workload the records leave to torch: the call goes to torch."""

    __slots__ = ("torch_fn", "params", "run")

    def __init__(self, torch_fn: Callable[..., Tensor], params: tuple[Any, ...]) -> None:
        self.torch_fn, self.params = torch_fn, params
        self.run: Callable[[tuple[Tensor | None, ...]], Tensor] = self.__call__

    def __call__(self, tensors: tuple[Tensor | None, ...]) -> Tensor:
        _counters.to_torch += 1
        return self.torch_fn(*tensors, *self.params)


class GradEntry:
    """A stored signature whose tensors require grad: the one autograd Function its first call applied,
    on the call's tensors and that call's other arguments. The front end's checks and rewrites are
    skipped (they depend only on the signature). The Function's forward makes one no-grad call, whose
    signature follows from this one. Where the first call stored an ``Entry`` for it (``inner``), a
    repeat applies a Function made for this signature instead (``replayer(inner.run)``, see
    ``grad_function``): its forward runs ``inner`` itself, with none of the forward's own call, cache
    lookup or bookkeeping. Otherwise the Function is applied as the first call did and its forward's
    call takes the cache. ``run(tensors)`` is the repeat."""

    __slots__ = ("inner", "run")

    def __init__(self, apply: Callable[..., Tensor], replayer: Replayer, constants: tuple[Any, ...],
                 inner: Entry | None) -> None:
        self.inner = inner
        self.run = _grad_run(apply if inner is None else replayer(inner.run), constants, inner is not None)


def _grad_run(apply: Callable[..., Tensor], constants: tuple[Any, ...],
              replays: bool) -> Callable[[tuple[Tensor | None, ...]], Tensor]:
    if not replays:
        return lambda tensors: apply(*tensors, *constants)

    def run(tensors: tuple[Tensor | None, ...]) -> Tensor:
        _counters.hits += 1  # the forward's call: a hit, taken without its lookup
        return apply(*tensors, *constants)
    return run


_entries: dict[tuple[Any, ...], Entry | TorchEntry | GradEntry] = {}
_prebound: dict[tuple[Any, ...], Callable[..., None]] = {}


def _forget() -> None:
    _entries.clear()
    _prebound.clear()


generation.on_bump(_forget)

# ALCOP_STRICT's raw value, read on every call (settings.ENV_TABLE: a dict lookup, no decoding)
_ENV_TABLE, _STRICT_KEY = settings.ENV_TABLE, settings.env_key("ALCOP_STRICT")


# Bound once: each is read on every call. ``is_dynamo_compiling`` is what Dynamo folds to True while it
# traces (as it does ``torch.compiler.is_compiling``, which calls one more function to read the flag
# that torch.export's non-strict tracing sets); the flag is read here directly.
_dynamo_tracing = torch.compiler.is_dynamo_compiling
_compiler = torch.compiler
_dispatch_modes = torch._C._len_torch_dispatch_stack
_transforms = torch._C._are_functorch_transforms_active
_grad_enabled = torch.is_grad_enabled


def _needs_dispatcher() -> bool:
    """Whether torch must see this call as an op: traced, or a dispatch mode / functorch transform."""
    return (_dynamo_tracing() or _compiler._is_compiling_flag or _dispatch_modes() > 0
            or _transforms())


def signature(op: Hashable, tensors: Sequence[Tensor | None], params: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The call's cache key, or None when the call must go through torch's dispatcher."""
    return None if _needs_dispatcher() else _key(op, tensors, params)


def _key(op: Hashable, tensors: Sequence[Tensor | None], params: tuple[Any, ...]) -> tuple[Any, ...] | None:
    grad = _grad_enabled()
    key: list[Any] = [op, params, _ENV_TABLE.get(_STRICT_KEY), _mode.get().patched]
    fp32 = False
    for t in tensors:
        if t is None:
            key.append(None)
            continue
        # Not a plain strided dense tensor over live storage (``tensor_kinds.plain``: torch's flags,
        # nested, sparse, freed storage...): no signature, so never a hit or a stored entry; the cold
        # route sends it to torch (or raises, for freed storage).
        if type(t) not in PLAIN_TYPES or not plain(t):
            return None
        dtype = t.dtype
        fp32 = fp32 or dtype is torch.float32
        key += (t.shape, t.stride(), dtype, t.device, t.data_ptr() & 15, grad and t.requires_grad)
    if fp32:
        key.append(settings.fp32_precision())
    return tuple(key)



# ----------------------------------------------------------------------------- the hit in C

_address = torch.Tensor.data_ptr
_NATIVE: Any = None  # fastpath_native.c's module once built; False where it cannot be


def native() -> Any | None:
    """The hit's C functions (``fastpath_native.c``: the call-site check and a stored call's allocation
    and launch), or None where they cannot be built (no C compiler, a Triton without its build helper)
    or ``ALCOP_NATIVE=0``; then the Python references serve (``_site_hit_py``, ``_plain_run``'s closure).

    A call that finds the CPU's caches cold (an eager call after a synchronisation) pays for every
    frame and bytecode of the hit; the C functions make the same calls without them. The source is
    compiled with Triton's own C build (the compiler and cache that its kernel launchers use), once
    per machine, when the first stored entry or call site needs it."""
    global _NATIVE
    if _NATIVE is None:
        _NATIVE = False
        if settings.native():
            try:
                from triton.runtime.build import compile_module_from_src
                source = (Path(__file__).parent / "fastpath_native.c").read_text()
                _NATIVE = compile_module_from_src(source, "alcop_fastpath_native")
            except Exception as exc:  # no compiler or Python headers, or another Triton: Python serves
                logging.getLogger("alcop_triton").info("the fast path's hit runs in Python: %s: %s",
                                                       type(exc).__name__, exc)
            else:
                _NATIVE.configure(_address, lambda: settings.fp32_precision(),  # read as the Python check does
                                  torch.Tensor.storage_offset, torch.Tensor.element_size)
    return _NATIVE or None

def note_applied(apply: Callable[..., Tensor], replayer: Replayer, inputs: tuple[Any, ...], out: Tensor) -> None:
    """An autograd Function's forward ran (``apply(*inputs)`` gave ``out``; ``replayer`` makes its
    op's Function over a stored call, see ``GradEntry``): a first call on the autograd route stores it
    (``ops.route._first_autograd_call``)."""
    applying = _traced_mode().applying
    if applying is not None:  # the forward's own call was the last one keyed
        applying.applied.append((apply, replayer, inputs, out, applying.last_key))


def grad_function(name: str, impl: Callable[..., Tensor], setup_context: Callable[..., None],
                  backward: Callable[..., tuple[Any, ...]], tensors: int) -> Callable[..., Tensor]:
    """``apply`` of an autograd.Function that runs ``impl`` and differentiates it with a custom op's
    formula (its ``setup_context(ctx, inputs, output)`` and ``backward(ctx, grad)``): an op's ``grad``
    route (``ops.route.OpRoutes.autograd``). ``impl``'s first ``tensors`` arguments are the tensors its fast-path call is
    keyed on.

    The context is set up inside ``forward``: a Function with a ``setup_context`` of its own binds its
    arguments through ``inspect.signature`` on every call, which costs more than the rest of the call.
    A stored signature applies autograd's own apply, below ``Function.apply``'s Python wrapper, whose
    work is moot there: a stored signature has no functorch transform active (else the call had no
    signature) and its tensors have storage (the signature read their addresses), so none is a dead
    functorch wrapper to unwrap; and these Functions have no setup_context to bind for.
    """
    def function(forward: Callable[..., Tensor]) -> type:
        # One name for every Function made here: ``grad_fn`` reads the same whichever computed the output.
        return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                        "backward": staticmethod(backward)})

    def forward(ctx: Any, *inputs: Any) -> Tensor:
        out = impl(*inputs)
        setup_context(ctx, inputs, out)
        note_applied(stored, replayer, inputs, out)  # a first call stores this apply for its signature
        return out

    def replayer(inner: Callable[..., Tensor]) -> Callable[..., Tensor]:
        # A stored signature's repeat (GradEntry) applies a Function of its own, whose forward is the
        # stored call ``inner`` that ``impl`` makes: no argument more to pass, slice or differentiate.
        def replay(ctx: Any, *inputs: Any) -> Tensor:
            out: Tensor = inner(inputs[:tensors])
            setup_context(ctx, inputs, out)
            return out
        return super(torch.autograd.Function, function(replay)).apply  # type: ignore[misc]

    fn = function(forward)
    stored: Callable[..., Tensor] = super(torch.autograd.Function, fn).apply  # type: ignore[misc]
    return fn.apply  # type: ignore[attr-defined]


def span(t: Tensor) -> int:
    """Elements between a tensor's first and last addressed element, plus one (0 when empty)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))


def _entry(rec: _Recording, tensors: tuple[Tensor | None, ...], out: Any) -> Entry | None:
    """The entry replaying ``rec`` on other tensors, or None when its launches do not account for
    ``out``: each kernel tensor must start where an input starts (a view of it: a kernel reads a
    tensor only through its address and the strides bound into the launch) or where the output
    starts, within the output's extent."""
    if rec.torch_computed or type(out) is not torch.Tensor or out.storage_offset() != 0:
        return None
    if out.numel() == 0:
        return Entry(out, (), (), len(tensors)) if not rec.launches else None
    starts: dict[int, int] = {}
    ambiguous: set[int] = set()
    for i, t in enumerate(tensors):
        if t is not None and t.numel() > 0:
            p = t.data_ptr()
            if p in starts:  # two inputs at one address: which one a kernel read is unknowable
                ambiguous.add(p)
            starts[p] = i
    out_ptr, out_span, n = out.data_ptr(), span(out), len(tensors)
    # The geometry of each argument a replay passes on (inputs, output, then preparations' results):
    # the signature fixes it, so a later call's argument has it too.
    geometry: list[tuple[tuple[int, ...], tuple[int, ...]] | None] = [
        None if t is None else (tuple(t.shape), t.stride()) for t in (*tensors, out)]
    preps = []
    made = n + 1  # a preparation's results follow the inputs and the output in the arguments
    for prep, inputs, results, allocates in rec.preps:
        # A preparation reads its inputs' shapes and strides, not only their addresses: replay it on
        # views of the call's tensors with the first call's geometry (the tensor itself where it has it).
        views = []
        for a in inputs:
            p = a.data_ptr()
            if p not in starts or p in ambiguous or a.numel() == 0:
                return None
            views.append((starts[p], tuple(a.shape), a.stride()))
        preps.append((_allocator(inputs, results) if allocates else prep, _viewer(views, geometry)))
        for r in results:
            if r.numel() > 0:
                starts[r.data_ptr()] = made
            made += 1
            geometry.append((tuple(r.shape), r.stride()))
    launches = []
    writes_out = False
    for run, args in rec.launches:
        picks = []
        for a in args:
            p = a.data_ptr()
            if p == out_ptr and a.numel() > 0 and span(a) <= out_span:
                picks.append(n)
                writes_out = True
            elif p in starts and p not in ambiguous and a.numel() > 0:
                picks.append(starts[p])
            else:
                return None
        launches.append((run, _picker(picks)))
    return Entry(out, tuple(preps), tuple(launches), n) if writes_out else None


def _viewer(views: list[tuple[int, tuple[int, ...], tuple[int, ...]]],
            geometry: list[tuple[tuple[int, ...], tuple[int, ...]] | None]) -> Pick:
    if all(geometry[i] == (shape, stride) for i, shape, stride in views):
        return _picker([i for i, _, _ in views])  # the arguments themselves: no view to make
    return lambda args: tuple(args[i].as_strided(shape, stride) for i, shape, stride in views)


def prepare(prep: Callable[..., tuple[Tensor, ...]], *tensors: Tensor, allocates: bool = False) -> tuple[Tensor, ...]:
    """``prep(*tensors)``: operands made ready for a kernel (e.g. copied to aligned buffers). A first
    call records it, so that its stored entry repeats it: the preparation must depend only on what the
    signature holds (shapes, strides, dtypes, devices, alignment) and on the tensors' values.

    ``allocates``: each result of ``prep`` is one of ``tensors`` or a new tensor that a later launch fills
    (``kernels.matmul.aligned_operands``' buffers). A stored entry then allocates tensors of the first
    call's geometry itself (``_allocator``) instead of running ``prep``'s Python again on every call."""
    results = prep(*tensors)
    rec = _traced_mode().recording
    if rec is not None and any(r is not t for r, t in zip(results, tensors)):
        rec.preps.append((prep, tensors, results, allocates))
    return results


def _allocator(inputs: tuple[Tensor, ...], results: tuple[Tensor, ...]) -> Callable[..., tuple[Tensor, ...]]:
    """The replay of an allocating preparation (``prepare``): given the call's ``inputs``, its results as
    the first call made them: an input where the first call's result was that input, else a new tensor
    of the first result's shape, strides, dtype and device."""
    # per result: the input it was (its index, no allocator) or an allocator of its geometry
    plan: list[tuple[int, Callable[..., Tensor] | None, tuple[int, ...], tuple[int, ...]]] = []
    for r in results:
        same = next((j for j, x in enumerate(inputs) if r is x), None)
        if same is None:
            plan.append((0, r.new_empty(0).new_empty_strided, tuple(r.shape), r.stride()))
        else:
            plan.append((same, None, (), ()))

    def allocate(*xs: Tensor) -> tuple[Tensor, ...]:
        made = []
        for j, new, shape, stride in plan:  # a loop, as elsewhere on the hit path
            made.append(xs[j] if new is None else new(shape, stride))
        return tuple(made)
    return allocate


def _picker(picks: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    if len(picks) == 1:
        i = picks[0]
        return lambda args: (args[i],)
    return operator.itemgetter(*picks)


def note_torch_preferred() -> None:
    """The records prefer torch for the current call's workload (``Decision.torch_preferred``)."""
    rec = _traced_mode().recording
    if rec is not None:
        rec.torch_preferred = True


def note_torch_computed() -> None:
    """The current call computes (part of) its result with torch: its signature is not stored."""
    rec = _traced_mode().recording
    if rec is not None:
        rec.torch_computed = True


# ----------------------------------------------------------------------------- prebound launches

class Bindable(Protocol):
    """What ``launch_kernel`` runs: a ``CompiledKernel``, or a kernel of the library's own (``kernels.pack``)."""

    def bind(self, *tensors: Any) -> tuple[Launch | None, Any]: ...

    def label(self) -> str: ...


def launch_kernel(kern: Bindable, args: Sequence[Tensor]) -> None:
    """Run a kernel on ``args`` (inputs then output), on the tensors' device, through its prebound
    launch for this (dtype, shape, strides, alignment) signature; binds and compiles on first use.
    ``kern`` must be hashable and equal only to kernels that launch alike."""
    dev = args[0].device
    sig = (kern, dev, settings.fp32_precision(), tuple((t.dtype, t.shape, t.stride(), t.data_ptr() & 15) for t in args))
    run = _prebound.get(sig)
    if run is None:
        gen = generation.current()
        if dev.type == "cuda":
            with torch.cuda.device(dev):
                if torch.cuda.is_current_stream_capturing():
                    raise capture_error(f"{kern.label()} would compile a variant for "
                                        f"shapes {[tuple(t.shape) for t in args]}")
                bound, _ = kern.bind(*args)
                run = bound.prebind() if bound is not None else _no_launch
        else:
            bound, _ = kern.bind(*args)
            run = bound.prebind() if bound is not None else _no_launch
        if gen == generation.current():
            if len(_prebound) >= MAX_ENTRIES:
                _prebound.clear()
            _prebound[sig] = run
    run(*args)
    rec = _traced_mode().recording
    if rec is not None:
        rec.launches.append((run, tuple(args)))


def _no_launch(*tensors: Tensor) -> None:
    """The launch of an empty output: nothing to compute."""


# ----------------------------------------------------------------------------- inspection

def stats() -> Stats:
    """The call cache's counters (see ``Stats``)."""
    c = _counters
    return Stats(c.hits, c.misses, c.uncacheable, c.dispatched, c.bypassed, c.to_torch, len(_entries),
                 generation.current())


def reset_stats() -> None:
    for name in ("hits", "misses", "uncacheable", "dispatched", "bypassed", "to_torch"):
        setattr(_counters, name, 0)


def invalidate() -> None:
    """Forget every stored signature and remembered config (a new dispatch generation)."""
    generation.bump()
