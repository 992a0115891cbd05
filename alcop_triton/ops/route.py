"""Which way an op's call goes: one function, ``call``, read top to bottom.

Every op of the torch layer enters here, once per call: the drop-ins (``ops/gemm.py``, ``ops/conv.py``),
the implementations registered under ``torch.ops.alcop`` (below torch's dispatcher), the calls the
backward formulas make and ``@alcop_triton.op`` ops. Each passes its ``OpRoutes``: the ways it can run,
by name. ``call`` takes the first rule that applies:

1. traced by Dynamo                    -> with routing on (patch mode)     ``traced``:
                                          a deciding op that becomes alcop's op or torch's per workload
                                          (``ops.traced``); else ``registered``: the ``torch.ops.alcop`` op
2. inside another call's first run     -> ``direct``: that first run records the launches
3. under ``torch.autocast``, an op    -> ``call`` again on the arguments autocast would give torch's
   autocast runs in its dtype             function (``amp.cast``): the drop-ins compute in that dtype
4. a repeat at a known call site       -> the stored entry (the fast path: guards, allocation, launch)
5. no signature (not plain dense tensors, a dispatch mode, a functorch transform, torch.compile's
   non-strict tracing)                 -> ``registered`` (torch's dispatcher sees the call); within a
                                          torch.compile session with routing on, ``traced``
6. a stored signature                  -> the stored entry
7. tensors that require grad           -> ``autograd`` (an autograd Function over the same
                                          implementation), else ``registered``
8. inside ``use_config``               -> ``direct``, nothing stored
9. a first call                        -> ``direct``, recorded (``fastpath``): a repeat replays its launches,
                                          or in patch mode calls ``torch`` where the records prefer torch

``direct`` is the op's own front end: first, a tensor that is not a plain strided dense tensor goes to
torch before anything reads its shape or strides (``fallback.not_plain``, which asks
``tensor_kinds.reason``; freed storage raises), then torch's argument checks, the remaining fallbacks
(``fallback.static_reason``), the config (``choose_config``), the kernel and its launch
(``fastpath.launch_kernel``). Such tensors never reach rule 4's guards either: the call-site check
skips nested tensors before any guard reads their strides, and tells freed storage by its address
(``address_bits``); rule 5 gives them no signature (``tensor_kinds.plain``). The stored entries, their
signatures and the recording of a first call are ``fastpath``'s.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable

import torch

from .. import amp, generation
from ..fastpath import (_DIRECT, _PATCHED, _ROUTING, MAX_ENTRIES, Entry, GradEntry, TorchEntry, _Applying, _compiler,
                       _counters, _dispatch_modes, _dynamo_tracing, _entries, _entry, _ENV_TABLE, _grad_enabled,
                       _address, _in_mode, _key, _mode, _Recording, _STRICT_KEY, _transforms, native, unrouted)
from ..settings import fp32_precision
from . import traced as _traced
from .traced import state as routing

Tensor = torch.Tensor
_amp_on = amp.is_on


@dataclass(frozen=True, slots=True)
class OpRoutes:
    """The ways one op can run, each called as ``f(*tensors, *params)``.

    direct: alcop's implementation, called without torch's dispatcher (checks, fallback, config, kernels);
    registered: the same through torch's dispatcher (the ``torch.ops.alcop`` op; None: ``direct``);
    torch: the same computation by torch, where patch mode's records prefer torch (None: never);
    autograd: an autograd Function over ``direct`` for plain tensors that require grad (None: ``registered``);
    traced: what Dynamo traces with routing on: the same through the deciding ops of ``ops.traced``
    (None: ``registered``).
    """
    direct: Callable[..., Tensor]
    registered: Callable[..., Tensor] | None = None
    torch: Callable[..., Tensor] | None = None
    autograd: Callable[..., Tensor] | None = None
    traced: Callable[..., Tensor] | None = None


def call(op: Hashable, tensors: tuple[Tensor | None, ...], params: tuple[Any, ...], routes: OpRoutes) -> Tensor:
    """Run ``op`` on ``tensors`` and ``params`` by the first rule of the module docstring that applies."""
    # 1. traced: the deciding op (routing on) or the registered op becomes the graph's node (Dynamo does
    #    not trace _mode: it reads traced.ROUTED, set with this thread's flag, and guards the graph on it)
    if _dynamo_tracing():
        # not counted: Dynamo would trace the increment and guard the compiled frame on the counter's value,
        # so any later count (an eager call's) would recompile it, until its recompile limit left it eager
        if _traced.ROUTED and routes.traced is not None:  # guarded by Dynamo (traced.ROUTED)
            return routes.traced(*tensors, *params)
        return (routes.registered or routes.direct)(*tensors, *params)
    mode = _mode.get()
    # 2. inside another call's first run: that one records the launches
    if mode.recording is not None:
        return routes.direct(*tensors, *params)
    # 3. under torch.autocast, a function autocast runs in its dtype: the arguments it would get (amp.cast)
    if _amp_on() and op in amp.LOWER_PRECISION_OPS:
        cast = amp.cast(tensors)
        if cast is not None:
            return call(op, cast, params, routes)
    # 4. a repeat at a known call site (the part of the signature that is not per tensor, then guards);
    #    the dispatcher's conditions are checked here without the tracing check, made above
    key = site_key = None
    if not (_compiler._is_compiling_flag or _dispatch_modes() > 0 or _transforms()):
        site_key = (op, params, _ENV_TABLE.get(_STRICT_KEY), mode.patched, _grad_enabled())
        site = _sites.get(site_key)
        if site is not None and (mode is _DIRECT or mode is _ROUTING or mode is _PATCHED):
            stored = _site_hit(site, tensors)
            if stored is not None:
                _counters.hits += 1
                return stored(tensors)
    if mode.routes:  # patch mode's call, not served by its site: what runs now is the drop-in's own
        token = _mode.set(unrouted(mode))
        try:
            return call(op, tensors, params, routes)
        finally:
            _mode.reset(token)
    # 5. the signature; None for tensors that are not plain dense ones, a dispatch mode or a transform
    if site_key is not None:
        try:
            key = _key(op, tensors, params)
        except (TypeError, RuntimeError, AttributeError):  # not tensors, or tensors without strides: the checks say why
            key = None
    if mode.applying is not None:  # inside a first autograd-route call: it asks which calls its route keyed
        mode.applying.last_key = key
        mode.applying.keyed += 1
    if key is None:
        _counters.dispatched += 1
        if routing.on and routes.traced is not None and (_compiler._is_compiling_flag or routing.backend):
            # torch.compile's later stages (AOTAutograd running Dynamo's graph, torch's decompositions
            # calling torch.mm...) reach patch mode's wrappers too, and alcop_triton.compile's backend
            # puts the drop-ins in the graphs AOTAutograd traces: decided as Dynamo's calls are
            return routes.traced(*tensors, *params)
        return (routes.registered or routes.direct)(*tensors, *params)
    # 6. a stored signature
    hit = _entries.get(key)
    if hit is not None and not mode.forced:
        _counters.hits += 1
        if mode.applying is None and site_key is not None:
            _remember(site_key, tensors, hit.run)
        return hit.run(tensors)
    # 7. autograd
    if _grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        if routes.autograd is None:  # no autograd route of its own: the registered op's
            _counters.dispatched += 1
            return (routes.registered or routes.direct)(*tensors, *params)
        if mode.forced:
            _counters.bypassed += 1
            return routes.autograd(*tensors, *params)
        return _first_autograd_call(key, tensors, params, routes.autograd)
    # 8. use_config's block: its config, not the stored launches
    if mode.forced:
        _counters.bypassed += 1
        return routes.direct(*tensors, *params)
    # 9. a first call, recorded
    return _first_call(key, tensors, params, routes.direct, routes.torch if mode.patched else None)


def _store(key: tuple[Any, ...], entry: Entry | TorchEntry | GradEntry | None, gen: int) -> None:
    if entry is None:
        _counters.uncacheable += 1
    elif gen == generation.current():
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
            _sites.clear()
        _entries[key] = entry


def _first_call(key: tuple[Any, ...], tensors: tuple[Tensor | None, ...], params: tuple[Any, ...],
                direct: Callable[..., Tensor], torch_fn: Callable[..., Tensor] | None) -> Tensor:
    gen = generation.current()
    rec = _Recording()
    with _in_mode(replace(_mode.get(), recording=rec)):
        out = direct(*tensors, *params)
    _counters.misses += 1
    entry: Entry | TorchEntry | None = _entry(rec, tensors, out)
    if entry is not None and rec.torch_preferred and torch_fn is not None:
        entry = TorchEntry(torch_fn, params)
    _store(key, entry, gen)
    return out


def _first_autograd_call(key: tuple[Any, ...], tensors: tuple[Tensor | None, ...], params: tuple[Any, ...],
                     autograd: Callable[..., Tensor]) -> Tensor:
    """The autograd route's first call of a signature. It is stored when the route applied exactly one
    autograd Function, to the call's own tensors (same objects, same positions, then non-tensor
    arguments), and returned that Function's output itself: then a repeat is that one apply."""
    gen = generation.current()
    applying = _Applying()
    with _in_mode(replace(_mode.get(), applying=applying)):
        out = autograd(*tensors, *params)
    applied = applying.applied
    _counters.misses += 1
    entry = None
    distinct = len({id(t) for t in tensors if t is not None}) == sum(t is not None for t in tensors)
    if len(applied) == 1 and distinct:
        apply, replayer, inputs, result, inner_key = applied[0]
        n = len(tensors)
        constants = inputs[n:]
        if result is out and len(inputs) >= n and all(x is t for x, t in zip(inputs, tensors)) \
                and not any(isinstance(c, torch.Tensor) for c in constants):
            # The forward's call is known only when it was the route's one keyed call.
            inner = _entries.get(inner_key) if inner_key is not None and applying.keyed == 1 else None
            entry = GradEntry(apply, replayer, constants, inner if type(inner) is Entry else None)
    _store(key, entry, gen)
    return out


# ----------------------------------------------------------------------------- call sites
#
# Computing a signature reads six properties of every tensor through Python (about 1 µs per tensor,
# and more on a call that finds the CPU's caches cold: the eager call after a synchronisation).
# Torch has the same check in C++: ``TensorGuards`` (Dynamo's tensor guard) compares a tensor's type,
# dispatch keys, dtype, device, requires_grad, sizes and strides with those it was built from, for
# all of a call's tensors in one call (about 0.3 µs for two). So a signature that was hit once gets a
# *candidate* at its call site, i.e. under the part of the signature that is not per tensor (op,
# parameters, ALCOP_STRICT, patch mode, grad mode): its guards, which arguments were None, the 16-byte
# alignment of each tensor (guards do not read addresses; None: all aligned and live: ``address_bits``)
# and the float32 precision
# where a tensor is float32. A later call checks its site's candidates in order and takes the first that matches: what a
# candidate checks is what its signature holds (its tensors' types exactly, where the signature also
# takes an nn.Parameter as a tensor), so a match is a hit on that signature. A call no candidate
# matches computes its signature. Torch builds without the C++ guard (import or constructor changed)
# use signatures alone.

_TensorGuards: Any
try:
    from torch._C._dynamo import guards as _dynamo_guards
    _TensorGuards = _dynamo_guards.TensorGuards
except (ImportError, AttributeError):  # pragma: no cover - torch builds without Dynamo's C++ guards
    _TensorGuards = None

SITE_CANDIDATES = 8
"""Candidates per call site, the most recent (a model calls a site with a few shapes; a call whose
candidate was dropped goes by its signature, which gives it one again)."""

_Candidate = tuple[int, "Callable[[tuple[Tensor | None, ...]], tuple[Tensor, ...]] | None",
                   "Callable[[tuple[Tensor | None, ...]], bool] | None", Callable[..., bool],
                   "tuple[int, ...] | None", "str | None", Callable[..., Tensor]]
"""A call site's candidate: the number of arguments; where some are None, ``present`` (the tensors among
them) and ``vacant`` (whether the same ones are None in a call), else None for both; its guards' check;
the tensors' ``address_bits`` (None: all aligned and live); the float32 precision (None: no float32 tensor);
the stored entry."""
_sites: dict[tuple[Any, ...], list[_Candidate]] = {}


LIVE_ADDRESS = 1 << 16
"""No live allocation lies below this address (Linux's ``mmap_min_addr``; CUDA's addresses are far above):
a tensor whose storage starts there is one whose storage was freed (``untyped_storage().resize_(0)``:
its data pointer is 0 plus its offset), or an empty one."""

BASE_CHECKED_BELOW = 1 << 44
"""A data pointer below this address has its storage's start computed (``data_ptr - storage_offset *
element_size``) to tell a freed tensor: a view into freed storage points at its offset in bytes, which
is below any storage's size (no storage reaches 16 TiB). Above it, the pointer is a live allocation's
and the check reads nothing more: that is where allocations lie (CUDA's and mmap's addresses on x86-64
Linux sit near 2**47); a live tensor below it costs two more reads, never a wrong answer (``docs/decisions.md#d37``)."""


def address_bits(t: Tensor) -> int:
    """What a call site's candidate records of a tensor's address: the data pointer's low four bits
    (16-byte alignment), or 16 where its storage starts below ``LIVE_ADDRESS`` (freed, or empty). A freed
    tensor then matches only a candidate made from such a tensor (an empty one: its shape, which the
    guard checks, leaves nothing to read)."""
    address = _address(t)
    if address < BASE_CHECKED_BELOW and address - t.storage_offset() * t.element_size() < LIVE_ADDRESS:
        return 16
    return address & 15


def _site_hit_py(site: list[_Candidate], tensors: tuple[Tensor | None, ...]) -> Callable[..., Tensor] | None:
    """The entry of the first of ``site``'s candidates that ``tensors`` match (a hit on its signature), or None."""
    try:  # before any guard reads it: torch's guard aborts the process on a nested tensor's strides
        for t in tensors:
            if t is not None and t.is_nested:
                return None
    except AttributeError:  # not a tensor: no candidate matches it, the call's checks say why
        return None
    for n, present, vacant, check, align, precision, entry in site:
        if len(tensors) != n:
            continue
        if present is None:
            given: Any = tensors
        elif vacant(tensors):  # type: ignore[misc]
            given = present(tensors)
        else:
            continue
        if not check(*given) or (precision is not None and precision != fp32_precision()):
            continue
        # The addresses' low bits: all zero (16-byte aligned) for almost every call. A loop: reduce()
        # over map() costs more on a cold call.
        if align is None:
            bits = 0
            for t in given:
                address = _address(t)
                if address < BASE_CHECKED_BELOW:  # rarely: address_bits's test of the storage's start
                    bits |= address_bits(t)
                else:
                    bits |= address & 15
            if not bits:
                return entry
        elif tuple(address_bits(t) for t in given) == align:
            return entry
    return None


SiteHit = Callable[[list[_Candidate], tuple[Tensor | None, ...]], "Callable[..., Tensor] | None"]
"""A call-site check: the entry of the first of a site's candidates that a call's tensors match, or None."""

_site_hit: SiteHit = _site_hit_py
"""The call-site check ``call`` makes: the native one once a site has a candidate (if it can be built), else ``_site_hit_py``."""
_site_hit_built = False


def _remember(site_key: tuple[Any, ...], tensors: tuple[Tensor | None, ...], entry: Callable[..., Tensor]) -> None:
    """Give the call site a candidate for a signature ``tensors`` just hit (``entry`` is its entry)."""
    global _TensorGuards, _site_hit, _site_hit_built
    if _TensorGuards is None:
        return
    if not _site_hit_built:  # the first candidate: build the compiled check now, not at import
        _site_hit_built = True
        module = native()
        _site_hit = module.site_hit if module is not None else _site_hit_py
    site = _sites.setdefault(site_key, [])
    if len(site) >= SITE_CANDIDATES:  # the oldest goes: a site whose shapes change keeps finding the new ones
        del site[0]
    present = [t for t in tensors if t is not None]
    try:
        guards = _TensorGuards(*present, dynamic_dims_sizes=[list(t.shape) for t in present],
                               dynamic_dims_strides=[list(t.stride()) for t in present])
    except Exception:  # a private constructor that changed in this torch: signatures alone from now on
        _TensorGuards = None
        return
    fp32 = any(t.dtype is torch.float32 for t in present)
    align = tuple(address_bits(t) for t in present)
    pickers = (None, None) if len(present) == len(tensors) else _pickers(tensors)
    site.append((len(tensors), *pickers, guards.check, None if not any(align) else align,
                 fp32_precision() if fp32 else None, entry))


def _pickers(tensors: tuple[Tensor | None, ...]) -> tuple[Callable[[tuple[Tensor | None, ...]], tuple[Tensor, ...]],
                                                        Callable[[tuple[Tensor | None, ...]], bool]]:
    """A candidate's ``present`` and ``vacant`` for a call whose arguments include Nones (a bias)."""
    kept = [i for i, t in enumerate(tensors) if t is not None]
    gaps = [i for i, t in enumerate(tensors) if t is None]
    present: Any = operator.itemgetter(*kept) if len(kept) > 1 else (lambda args: (args[kept[0]],))

    def vacant(args: tuple[Tensor | None, ...]) -> bool:
        for i in gaps:  # a loop: all() over a generator costs more on a cold call
            if args[i] is not None:
                return False
        return True
    return present, vacant


generation.on_bump(_sites.clear)


# ----------------------------------------------------------------------------- route tables

def front_end(fn: Callable[..., Tensor], direct: Any, autograd: Any,
              torch_fn: Callable[..., Tensor] | None, traced: Any = None) -> OpRoutes:
    """The routes of a drop-in whose front end ``fn(alcop, ...)`` checks torch's arguments and runs the
    op through the namespace ``alcop``: ``direct`` (the op family's implementations without the
    dispatcher), ``torch.ops.alcop`` (with it), ``autograd`` (its autograd Functions) or ``traced`` (its
    deciding ops, ``ops.traced``)."""
    return OpRoutes(direct=functools.partial(fn, direct), registered=functools.partial(fn, torch.ops.alcop),
                    torch=torch_fn, autograd=functools.partial(fn, autograd),
                    traced=functools.partial(fn, traced) if traced is not None else None)


def backward_op(name: str, n_tensors: int, routes: OpRoutes, patched: bool = False) -> Callable[..., Tensor]:
    """``torch.ops.alcop.<name>`` as the backward formulas call it: through ``call``, so a repeated
    backward's kernels allocate and launch without torch's dispatcher (a stride-2 convolution's backward
    makes about ten such calls); the registered op where the dispatcher must see the call (tracing,
    dispatch modes), the autograd route where a double backward records the graph. The first
    ``n_tensors`` arguments are tensors, the rest parameters (lists become tuples: a signature holds them).

    ``patched``: the backward of a forward made in patch mode. Autograd runs it in a thread of its own
    (on a GPU), where patch mode is not on: its calls are made patch mode's here, so each backward
    product goes to torch where the records prefer torch (``routes.torch``), as a forward product does."""
    op = ("backward", name)

    def run(*args: Any) -> Tensor:
        params = tuple(tuple(p) if isinstance(p, list) else p for p in args[n_tensors:])
        return call(op, args[:n_tensors], params, routes)

    if not patched:
        return run

    def run_patched(*args: Any) -> Tensor:
        mode = _mode.get()
        if mode.patched:
            return run(*args)
        token = _mode.set(_PATCHED if mode is _DIRECT else replace(mode, patched=True, routes=False))
        try:
            return run(*args)
        finally:
            _mode.reset(token)
    return run_patched
