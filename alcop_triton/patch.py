"""Patch mode: route torch's matrix products and convolutions through alcop.

    alcop_triton.enable()            # from here on, in this thread (or asyncio task)
    y = model(x)                     # nn.Linear / nn.Conv2d / x @ w ... run alcop kernels
    alcop_triton.disable()

    with alcop_triton.patched():     # or only inside a block
        y = model(x)

Routed: ``torch.matmul``/``Tensor.matmul``/``@``, ``torch.mm``/``Tensor.mm``, ``torch.bmm``/``Tensor.bmm``,
``torch.addmm``/``Tensor.addmm``, ``torch.baddbmm``/``Tensor.baddbmm``, ``F.linear`` and
``F.conv1d``/``conv2d``/``conv3d`` (also spelled ``torch.conv1d``...; so ``nn.Linear`` and ``nn.ConvNd``
too; a ConvNd with a non-zeros ``padding_mode`` pads with torch and convolves through alcop). A
convolution whose backward will run is decided by its gradients' records too (``TRAINING_ROUTED``).

How: while patch mode is on in some context (a thread, an asyncio task), those attributes of ``torch``,
``torch.nn.functional`` and ``torch.Tensor`` are thin wrappers; in a context with patch mode on they call
the drop-in, in every other torch's own function. They also call torch's own function for what the
drop-in does not take: an argument with a ``__torch_function__`` of its own (a tensor subclass that
intercepts), ``tensor @ obj`` for an ``obj`` that is no tensor (NotImplemented, so ``obj.__rmatmul__``
runs), more positional arguments than the drop-in has (the deprecated ``addmm(beta, input, alpha, mat1,
mat2)``). The ``forward`` of ``nn.Conv1d``/``2d``/``3d`` is replaced as well
(``CONV_MODULES``): torch's calls ``_conv_forward``, which calls ``F.convNd``; patch mode's makes the
functional call itself, one Python call fewer, and a call site left to torch calls torch's function (or
cuDNN's op, where that is torch's call) with no Python call of alcop's at all (``_conv_module_forward``).
The originals are put back by the first call of one of them after the last context left patch mode (a
block entered around every forward pass would otherwise rewrite torch's classes twice per pass: see
``_set``); a thread or task that ends with patch mode on leaves it. Which context is in patch mode is the
fast path's mode, a context variable (``fastpath.set_routing``),
which the drop-ins read on every call anyway: so a routed call costs the wrapper's checks and nothing
more, and a drop-in called directly in that thread is patch mode's call as well (where the records
leave its workload to torch, torch runs it).
Every other torch call meets no alcop code at all: a ``TorchFunctionMode`` would put a Python dispatch
(~2 µs) on each of them, which made host-bound models (ResNet-50: a thousand batch norms, relus and
adds per pass) slower under patch mode than without. The price of wrappers: code that took its own
reference to a routed function before patch mode began (``from torch import matmul``) keeps calling
torch's (one taken while the wrappers outlive a block is a wrapper, and follows patch mode).
``torch.compile`` traces through the wrappers of functions (``torch.matmul``, ``F.linear``,
``F.conv2d``...: each becomes alcop's op or torch's, decided per workload from the records as the graph
is built, ``ops.traced``; ``docs/compile.md``); Tensor methods and the ``@`` operator it
traces as torch's own ops, whatever the class attribute says. A trace follows patch mode as the
tracing thread last set it (Dynamo reads no context variable: ``_state``). Entering patch mode the first time
imports ``torch._dynamo`` (see ``_install``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from contextvars import ContextVar
from typing import Any, Callable, NamedTuple, cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import _guards

from . import generation, ops, tensor_kinds
from .ops import conv as conv_ops
from .ops import traced, traced_epilogues
from .fastpath import _ROUTING, _compiler, _dispatch_modes, _dynamo_tracing, _transforms, set_routing, unrouted
from .fastpath import _counters as _fastpath_counters
from .fastpath import _mode as _fastpath_mode

ROUTES: tuple[tuple[Any, str, Callable[..., Any]], ...] = (
    (torch, "matmul", ops.matmul), (torch.Tensor, "matmul", ops.matmul), (torch.Tensor, "__matmul__", ops.matmul),
    (torch, "mm", ops.mm), (torch.Tensor, "mm", ops.mm),
    (torch, "bmm", ops.bmm), (torch.Tensor, "bmm", ops.bmm),
    (torch, "addmm", ops.addmm), (torch.Tensor, "addmm", ops.addmm),
    (torch, "baddbmm", ops.baddbmm), (torch.Tensor, "baddbmm", ops.baddbmm),
    (F, "linear", ops.linear),
    (F, "conv1d", ops.conv1d), (F, "conv2d", ops.conv2d), (F, "conv3d", ops.conv3d),
    (torch, "conv1d", ops.conv1d), (torch, "conv2d", ops.conv2d), (torch, "conv3d", ops.conv3d),
)
"""(owner, attribute, drop-in): what patch mode replaces while it is on."""

CONV_MODULES: tuple[tuple[type[nn.Module], str], ...] = (
    (nn.Conv1d, "conv1d"), (nn.Conv2d, "conv2d"), (nn.Conv3d, "conv3d"))
"""Convolution modules whose ``forward`` patch mode replaces while it is on, each with the function of
``torch.nn.functional`` that its own forward calls (a route of ``ROUTES``)."""

TRAINING_ROUTED: dict[Callable[..., Any], int] = {ops.conv1d: 1, ops.conv2d: 2, ops.conv3d: 3}
"""Drop-ins (with their spatial rank) whose calls that will train (grad mode on and a tensor argument
requiring grad) patch mode decides by their gradients' records as well (``ops.conv.training_to_torch``):
torch's unless the records show alcop faster, measured against torch, in the forward and the gradients it
needs (``records.CONV_GRAD_OPS``) by ``TRAINING_MIN_GAIN_MS`` together (``docs/decisions.md#d53``).
Unmeasured, a convolution that trains stays
torch's: alcop's gradients were slower than cuDNN's on 13 of the ALCOP suite's 20 conv2d layers on the H200
(0.921x geomean eagerly, ``docs/decisions.md#d51``). One sent to alcop computes each part where its
records say (``ops.conv._conv_backward``). The drop-ins themselves, called directly, differentiate
through alcop's kernels."""


class _Activation:
    """Alive while some context has patch mode on through it: the ``_Patch`` that turned patch mode on in a
    context holds it, and so does every copy of that context (an asyncio task started meanwhile); when the
    last of them turned patch mode off, or ended (a thread that exited, a finished task), it is freed and
    ``_live`` drops. (``__del__`` rather than ``weakref.finalize``: a third of the cost of entering patch
    mode, which a block around every forward pass does.)"""
    __slots__ = ()

    def __del__(self) -> None:
        try:
            _release()
        except Exception:  # interpreter shutdown: the module's globals may already be gone
            pass


class _Patch(NamedTuple):
    """Patch mode in one context: ``enable()`` in effect, ``patched()`` blocks open, and while either
    holds, the activation that keeps the wrappers installed. (A named tuple: made on every entry and
    exit of a block, where a frozen dataclass's construction costs twice as much.)"""
    enabled: bool = False
    blocks: int = 0
    activation: _Activation | None = None


# Per context, not per thread: an asyncio task's ``patched()`` block routes that task's calls while
# another task's block is open, as the fast path's mode (a context variable too) routes them.
_patch: ContextVar[_Patch] = ContextVar("alcop_patch", default=_Patch())


_state = traced.state  # patch mode as this thread last set it: what a torch.compile trace follows (see _wrapper)
_lock = threading.RLock()  # reentrant: an activation's finaliser may run in a collection inside the lock
_live = 0  # activations alive: the wrappers are installed while it is above zero, and after it drops
# to zero until a wrapper is called (``_put_back``). What ``_install`` put in place, empty when
# torch's own functions are: (owner, attribute, torch's function, its wrapper)
_in_place: tuple[tuple[Any, str, Any, Any], ...] = ()
# (owner id, attribute) -> (torch's function, its wrapper): the wrapper made once, the original put back
_wrappers: dict[tuple[int, str], tuple[Any, Callable[..., Any]]] = {}
# module class id -> (its forward, the functional wrapper it calls, its wrapper): made anew when either changed
_module_wrappers: dict[int, tuple[Any, Callable[..., Any], Callable[..., Any]]] = {}


_grad_enabled = torch.is_grad_enabled
_has_torch_function = torch._C._has_torch_function
_function_modes = torch._C._len_torch_function_stack


_to_torch: dict[Callable[..., Any], dict[int, tuple[torch.Size, torch.dtype, bool]]] = {}
"""Per route, the call sites whose signature patch mode stored as a call to torch (its records do not
show alcop faster): the identity of the call's second argument (a module's weight) -> the first one's
shape and dtype at the last such call, and whether that call was one cuDNN convolution
(``_runs_as_cudnn``). A repeat goes to torch's function at once, without the drop-in's
front end and signature (which cost a host-bound model such as ResNet-50, most convolutions left to
cuDNN, more than its kernels saved). The key is weaker than the signature, which is safe only because
torch computes any call right: a stale entry can cost speed, never a wrong result. Forgotten when
records change."""


# cuDNN's convolution op and the switches torch passes it (None where this torch lacks them: see _runs_as_cudnn)
_cudnn_conv: Callable[..., Any] | None = getattr(torch, "cudnn_convolution", None)
_select_conv_backend: Callable[..., Any] | None = getattr(torch._C, "_select_conv_backend", None)
_CUDNN = getattr(getattr(torch._C, "_ConvBackend", None), "Cudnn", None)
_cudnn_benchmark = torch._C._get_cudnn_benchmark
_cudnn_deterministic = torch._C._get_cudnn_deterministic
_fp32_precision = getattr(torch._C, "_get_fp32_precision_getter", None)
_autocast = torch._C._is_any_autocast_enabled


def _cudnn_tf32() -> bool:
    """The TF32 switch torch's convolution passes cuDNN: the convolution's own (``torch.backends.cudnn.conv.
    fp32_precision``, resolved as torch resolves it), or on a torch before that switch its one flag."""
    if _fp32_precision is None:
        return bool(torch._C._get_cudnn_allow_tf32())
    return bool(_fp32_precision("cuda", "conv") == "tf32")


def _runs_as_cudnn(args: tuple[Any, ...], out: Any) -> bool:
    """Whether ``F.convNd(*args)``, a call patch mode left to torch that returned ``out``, is one cuDNN
    convolution that ``torch.cudnn_convolution`` makes alone: positional arguments as ``nn.ConvNd`` passes
    them, no bias, torch's own choice of backend cuDNN, and cuDNN's op, called with torch's switches,
    returning the same tensor (values and strides). A convolution module at such a site calls that op
    directly (``_conv_module_forward``): torch's front end (argument parsing, the backend choice,
    parameter checks) costs a host-bound network more than the op itself."""
    if _cudnn_conv is None or _select_conv_backend is None or _CUDNN is None or len(args) != 7:
        return False
    input, weight, bias, stride, padding, dilation, groups = args
    if bias is not None or type(padding) is str or type(out) is not torch.Tensor:
        return False
    if input.is_cuda and torch.cuda.is_current_stream_capturing():  # comparing results would synchronise
        return False
    try:
        backend = _select_conv_backend(input, weight, None, list(stride), list(padding), list(dilation), False,
                                       [0] * (input.dim() - 2), groups)
        if backend != _CUDNN:
            return False
        direct = _cudnn_conv(input, weight, padding, stride, dilation, groups, _cudnn_benchmark(),
                             _cudnn_deterministic(), _cudnn_tf32())
    except (RuntimeError, TypeError):  # ints where torch's sequences go, an op whose signature changed
        return False
    return bool(direct.stride() == out.stride() and torch.equal(direct, out))


_trained: dict[Callable[..., Any], dict[int, tuple[torch.Size, torch.dtype, bool]]] = {}
"""Per convolution route (``TRAINING_ROUTED``), the call sites of calls that will train: the identity of the
weight -> the input's shape and dtype at the last such call, and whether patch mode left it to torch
(``ops.conv.training_to_torch``, decided once per site: it reads three workloads' records). Apart from
``_to_torch``: a training call's answer weighs its gradients, an inference call's does not. Forgotten when
records change."""


def _forget_sites() -> None:
    for sites in (*_to_torch.values(), *_trained.values()):
        sites.clear()


generation.on_bump(_forget_sites)


def _wrapper(original: Callable[..., Any], route: Callable[..., Any], operator: bool = False) -> Callable[..., Any]:
    # ``operator``: ``original`` is ``Tensor.__matmul__``, which returns NotImplemented for an operand that
    # is no tensor, so that Python calls the operand's ``__rmatmul__``: such a call goes to it.
    # Every routed call runs this, in a model's forward pass among other ops that leave the CPU's
    # caches cold: each lookup below costs there, so the to-torch check reads one dict of this route
    # and two tensor properties, no tuple is built and no helper called; and it comes first, before
    # this thread's state is read: a site left to torch goes to torch's function whoever calls it (a
    # thread without patch mode, a drop-in's own torch call, a convolution that will train all would too).
    sites = _to_torch.setdefault(route, {})
    trained = _trained.setdefault(route, {})
    conv_route = route in TRAINING_ROUTED  # the convolutions
    nd = TRAINING_ROUTED.get(route, 0)
    tensor = torch.Tensor
    # More positional arguments than the drop-in takes: a form of torch's own (the deprecated
    # ``addmm(beta, input, alpha, mat1, mat2)``), which torch's function parses.
    arity = sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in inspect.signature(route).parameters.values())

    @functools.wraps(original)
    def routed(*args: Any, **kwargs: Any) -> Any:
        # Traced (what ``torch.compiler.is_compiling()`` says, one call fewer: see fastpath): the
        # drop-in's registered op becomes the graph's node. Checked before the fast path's mode or a
        # site is read: Dynamo does not trace a context variable, and the graph holds alcop's op
        # whatever eager calls at the same site decided.
        if _dynamo_tracing():  # a module attribute Dynamo guards the graph on (traced.ROUTED)
            return route(*args, **kwargs) if traced.ROUTED else original(*args, **kwargs)
        if _compiler._is_compiling_flag:  # AOTAutograd's trace: the thread's flag (by_torch turns it off)
            return route(*args, **kwargs) if traced.routing_on() else original(*args, **kwargs)
        if not _live:  # the wrappers outlived patch mode's last block: torch's functions go back
            _put_back()  # (not while torch.compile builds a graph: see _put_back)
            return original(*args, **kwargs)
        # A convolution that will train (grad mode on and a tensor argument requiring grad) is decided by
        # its own sites (``_trained``): its gradients' records count too.
        trains = False
        if conv_route and _grad_enabled():
            try:  # input, weight and bias, passed positionally as nn.ConvNd does: three attribute reads
                trains = args[0].requires_grad or args[1].requires_grad or (
                    args[2] is not None and args[2].requires_grad)
            except (AttributeError, IndexError):  # passed by keyword, no bias, or not a tensor
                trains = any(isinstance(a, tensor) and a.requires_grad for a in (*args[:3], *kwargs.values()))
        if sites and not trains and not kwargs and len(args) > 1:
            seen = sites.get(id(args[1]))
            if seen is not None:
                a = args[0]
                if type(a) is tensor and seen[1] is a.dtype and seen[0] == a.shape:
                    _fastpath_counters.to_torch += 1
                    return original(*args)
        if trains:
            a = args[0] if args else None
            seen = trained.get(id(args[1])) if len(args) > 1 and not kwargs else None
            if seen is not None and type(a) is tensor and seen[1] is a.dtype and seen[0] == a.shape:
                to_torch = seen[2]
            else:
                to_torch = conv_ops.training_to_torch(nd, args, kwargs)
                if len(args) > 1 and not kwargs and type(a) is tensor:
                    trained[id(args[1])] = (a.shape, a.dtype, to_torch)
            if to_torch:
                _fastpath_counters.to_torch += 1
                return original(*args, **kwargs)
        if len(args) > arity or (operator and not isinstance(args[1], tensor)):
            return original(*args, **kwargs)
        # Not a plain tensor while torch.compile builds a graph: a trace of torch's own code (Inductor
        # traces its pattern replacements, such as float32 addmm unfused as ``x1 @ x2 + inp``, through these
        # functions). The user's calls were decided where Dynamo traced them (above); these are torch's.
        if args and type(args[0]) is not tensor and _compile_context() is not None:
            return original(*args, **kwargs)
        # An argument with a __torch_function__ of its own (a tensor subclass's) asked to see the call:
        # torch's function gives it that. (One C check; a torch function mode, such as ``torch.device``'s
        # block, also makes it true, and patch mode routes under those.)
        if (_has_torch_function(args) or (kwargs and _has_torch_function(tuple(kwargs.values())))) \
                and _intercepted(args, kwargs):
            return original(*args, **kwargs)
        mode = _fastpath_mode.get()
        if not mode.routes:  # patch mode is off in this thread (another's installed the wrappers), or this
            return original(*args, **kwargs)  # is a drop-in's own torch call (a fallback, a bias add)
        sent = _fastpath_counters.to_torch
        if mode is _ROUTING and not kwargs:
            # The drop-in's call: its signatures are this thread's mode's, patch mode's, and where none of
            # its stored call sites serves it, the fast path leaves routing for the rest (``fastpath.
            # unrouted``). Nothing is set here: a context variable's set and reset would cost every call.
            out = route(*args)
        else:  # keywords (``out=``...) may take the drop-in's paths around the fast path: leave routing here
            token = _fastpath_mode.set(unrouted(mode))
            try:
                out = route(*args, **kwargs)
            finally:
                _fastpath_mode.reset(token)
        if _fastpath_counters.to_torch != sent and not trains and not kwargs and len(args) > 1:
            a = args[0]
            if type(a) is torch.Tensor:
                sites[id(args[1])] = (a.shape, a.dtype, conv_route and _runs_as_cudnn(args, out))
        return out
    setattr(routed, "__alcop_route__", route)  # marks it as patch mode's
    return routed


def _intercepted(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an argument has a ``__torch_function__`` of its own (a tensor subclass's or another
    object's), with torch function modes aside."""
    if not _function_modes():
        return True
    for a in (*args, *kwargs.values()):
        cls = type(a)
        if cls is not torch.Tensor and cls is not torch.nn.Parameter and hasattr(cls, "__torch_function__") \
                and (not isinstance(a, torch.Tensor) or tensor_kinds.own_torch_function(cls)):
            return True
    return False


def _conv_module_forward(cls: type[nn.Module], original: Callable[..., Any], torch_fn: Callable[..., Any],
                         functional: Callable[..., Any]) -> Callable[..., Any]:
    """``cls.forward`` in patch mode, over torch's (``original``): the call ``F.convNd``'s wrapper
    (``functional``) would get, made here; at a call site stored as torch's, torch's function
    (``torch_fn``) called from here."""
    # A host-bound network spends its time between calls: ResNet-50's convolutions, left to cuDNN by
    # the records, each cost a Python call of patch mode's on top of torch's two (forward, then
    # _conv_forward) and torch's front end. This forward takes the place of torch's two, makes the
    # site check inline (a helper would be a call again) and, where the site's call was one cuDNN
    # convolution (``_runs_as_cudnn``) and nothing else must see it (autograd, a dispatch mode, a
    # functorch transform, autocast), calls cuDNN's op as torch's front end would.
    route = getattr(functional, "__alcop_route__")
    sites, trained = _to_torch.setdefault(route, {}), _trained.setdefault(route, {})
    own_conv_forward, tensor = getattr(cls, "_conv_forward"), torch.Tensor
    class_attributes = hasattr(cls, "weight") or hasattr(cls, "bias")  # none on torch's classes
    cudnn_conv = cast(Callable[..., Any], _cudnn_conv)  # called only at sites _runs_as_cudnn found it at

    def forward(self: Any, input: Any) -> Any:
        if not _live:  # as in the functional wrapper
            _put_back()
            return original(self, input)
        if type(self)._conv_forward is not own_conv_forward or self.padding_mode != "zeros":
            return original(self, input)  # a subclass's own _conv_forward, or padding by torch first
        params = self._parameters
        if type(self) is cls and not class_attributes and "weight" in params and "bias" in params:
            # What ``self.weight`` and ``self.bias`` resolve to on torch's own class (no property or class
            # attribute of those names; nn.Module keeps a parameter out of the instance dict), read without
            # nn.Module.__getattr__, a Python call each: the two cost more than the site check below.
            weight, bias = params["weight"], params["bias"]
        else:  # a subclass (a parametrization's), or a weight that is no longer a parameter (a norm's hook)
            weight, bias = self.weight, self.bias
        # The functional wrapper's check of a site stored as torch's, in the order it makes it (tracing first);
        # a call that will train by the training sites (``_trained``: whether that site went to torch)
        if not (_dynamo_tracing() or _compiler._is_compiling_flag) and type(input) is tensor:
            if _grad_enabled() and (input.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
                seen = trained.get(id(weight)) if trained else None
                if seen is not None and seen[2] and seen[1] is input.dtype and seen[0] == input.shape:
                    _fastpath_counters.to_torch += 1
                    return torch_fn(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)
            elif sites:
                seen = sites.get(id(weight))
                if seen is not None and seen[1] is input.dtype and seen[0] == input.shape:
                    _fastpath_counters.to_torch += 1
                    if (seen[2] and bias is None and not _grad_enabled() and not _dispatch_modes()
                            and not _transforms() and not _autocast()):
                        try:
                            return cudnn_conv(input, weight, self.padding, self.stride, self.dilation, self.groups,
                                              _cudnn_benchmark(), _cudnn_deterministic(), _cudnn_tf32())
                        except RuntimeError:  # a failure torch's own call reports in its words
                            pass
                    return torch_fn(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)
        return functional(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)
    forward.__doc__ = original.__doc__
    setattr(forward, "__alcop_route__", route)
    return forward


def _install() -> None:
    """Put the wrappers in place of torch's functions, where they are not still there."""
    global _in_place
    if _in_place:  # a block entered again (per forward pass, say): one identity check per attribute
        for owner, name, _, wrapper in _in_place:
            if getattr(owner, name) is not wrapper:
                break
        else:
            return
    # Dynamo, on import, maps torch's functions by identity to its in-graph rules. Imported while the
    # wrappers stand in for them, it would take the wrappers for torch's functions and put them in
    # compiled graphs as opaque calls instead of tracing through them. Imported first, once (about a
    # second, the first time patch mode is entered), it maps torch's own.
    import torch._dynamo  # noqa: F401
    traced.allow_in_graph()
    traced_epilogues.install()  # Inductor folds activations and residual adds into routed linears
    placed: list[tuple[Any, str, Any, Any]] = []
    for owner, name, route in ROUTES:
        key, current = (id(owner), name), getattr(owner, name)
        made = _wrappers.get(key)
        original = made[0] if made is not None and current is made[1] else current  # ours still in place
        if made is None or made[0] is not original:  # made anew if someone else replaced torch's
            made = _wrappers[key] = (original, _wrapper(original, route, name == "__matmul__"))
        if current is not made[1]:
            setattr(owner, name, made[1])
        placed.append((owner, name, *made))
    for cls, name in CONV_MODULES:
        torch_fn, functional = _wrappers[(id(F), name)]
        made_forward = _module_wrappers.get(id(cls))
        current = cls.forward
        original = made_forward[0] if made_forward is not None and current is made_forward[2] else current
        if made_forward is None or made_forward[0] is not original or made_forward[1] is not functional:
            made_forward = _module_wrappers[id(cls)] = (original, functional,
                                                        _conv_module_forward(cls, original, torch_fn, functional))
        if current is not made_forward[2]:
            cls.forward = made_forward[2]
        placed.append((cls, "forward", made_forward[0], made_forward[2]))
    _in_place = tuple(placed)


def _put_back() -> None:
    """Torch's own functions back in place of the wrappers, if no thread is in patch mode (each that
    someone else replaced since stays theirs) and no graph is being compiled.

    A compile that traced a lingering wrapper guards on it (``torch.matmul.__closure__[3]``, the function
    it calls: Dynamo's guard on the original); AOTAutograd and Inductor then run torch's functions for
    real, and putting torch's back then would break that guard's evaluation (an InternalTorchDynamoError
    on torch 2.11, seen on the H200). Such a call leaves them in place: a later eager call puts them back."""
    global _in_place
    if _compile_context() is not None:
        return
    with _lock:
        if _live:
            return
        for owner, name, original, wrapper in _in_place:
            if getattr(owner, name) is wrapper:
                setattr(owner, name, original)
        _in_place = ()


def _compile_context() -> Any:
    """The compile in progress in this thread (Dynamo's ``CompileContext``, which spans the backend's
    compile and the guards' construction), or None."""
    return _guards.CompileContext.try_get()


def _activate() -> _Activation:
    """A new activation (``_live`` counts it until it is freed); the wrappers installed for the first."""
    global _live
    with _lock:
        _live += 1
        if _live == 1:
            _install()
    return _Activation()


def _release() -> None:
    global _live
    with _lock:
        _live -= 1


def _set(enabled: bool, blocks: int) -> None:
    """Set this context's state; install the wrappers for the first activation.

    Leaving patch mode does not put torch's functions back: the first call of one of them after the
    last activation was freed does (``_put_back``). Setting a class attribute (``torch.Tensor.matmul``,
    ``nn.Conv2d.forward``) invalidates what CPython cached about the class and its subclasses, which,
    done on entering and leaving a block around every forward pass, cost a host-bound ResNet-50 pass
    about 1% more (0.970x eager against 0.981x with the wrappers left in place, ``docs/decisions.md#d16``);
    a block entered again finds the wrappers still in place."""
    state = _patch.get()
    now = enabled or blocks > 0
    activation = state.activation if now else None
    if now and activation is None:
        activation = _activate()
    _patch.set(_Patch(enabled, max(blocks, 0), activation))
    if (state.activation is not None) != now:
        traced.set_on(now)
        set_routing(now)


def enable() -> None:
    """Route torch's products and convolutions through alcop in this context until ``disable()``: in this
    thread, or in this asyncio task and the tasks it starts from here on (each runs in a copy of its
    context). A thread or task that ends with patch mode on leaves it (its context is gone); the
    wrappers are put back by the next call of a routed function after the last such context."""
    state = _patch.get()
    _set(True, state.blocks)


def disable() -> None:
    """Undo ``enable()`` (a ``patched()`` block still open keeps its routing); a no-op when not enabled."""
    state = _patch.get()
    _set(False, state.blocks)


def is_enabled() -> bool:
    """Whether ``enable()`` is in effect in this context (thread or asyncio task)."""
    return _patch.get().enabled


class patched(contextlib.ContextDecorator):
    """Route torch's products and convolutions through alcop inside the block, in this context (thread or
    asyncio task; nested blocks and ``enable()`` combine: routing lasts until the last of them ends).
    Usable as a decorator too. A class rather than a generator: a block is often entered around every
    forward pass, and a generator's context manager costs about a microsecond more per block."""
    __slots__ = ()

    def __enter__(self) -> None:
        state = _patch.get()
        _set(state.enabled, state.blocks + 1)

    def __exit__(self, *exc: object) -> None:
        state = _patch.get()
        _set(state.enabled, state.blocks - 1)
