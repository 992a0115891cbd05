"""The convolution family: ``conv1d``, ``conv2d`` and ``conv3d``, from torch's arguments to alcop's kernel,
in the order a call meets them:

1. the drop-ins and their front end (``_conv``): torch's argument checks and semantics ('same'/'valid'
   padding, groups, unbatched inputs), then the convolution through an op namespace;
2. the registered op ``torch.ops.alcop.conv``: its checks, fake and implementation (``_conv_kernel``:
   fallback to torch, a pointwise convolution as a GEMM, else the implicit-GEMM kernel and its launch);
3. the autograd formulas (``conv_grads``: each gradient on the fastest kernel that computes it);
4. what a call traced with routing on becomes: the deciding op ``torch.ops.alcop.routed_conv`` (``ops.traced``);
5. the op namespaces and the routes ``route.call`` takes.
"""

from __future__ import annotations

import types
from dataclasses import replace
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from .. import fallback, fastpath, generation, tensor_kinds
from .. import choose_config
from ..fallback import TORCH_ACTIVATIONS
from ..kernels import conv as kconv
from ..kernels import conv_grad
from ..kernels import matmul as kmatmul
from ..records import GRADIENTS, Workload, dtype_name
from . import checks, dsl_call, gemm, route, traced
from .checks import CUDA_GRID_Y, check_activation, check_same, need_tensor, shape_of
from .gemm import activation_grad, run_gemm
from .route import OpRoutes

Tensor = torch.Tensor


# ----------------------------------------------------------------------------- 1. drop-ins and front end

def _ints(op: str, name: str, v: Any, nd: int, low: int) -> tuple[int, ...]:
    """An int or a sequence of 1 or nd ints, each >= low (torch's rules and exception types)."""
    # numpy ints and one-element integer tensors count, as in torch; a sequence is never an index
    # (asking operator.index first would raise inside torch.compile's tracing on torch 2.11)
    items = tuple(map(checks.index, v)) if isinstance(v, (tuple, list)) else (checks.index(v),)
    if items is None or any(x is None for x in items):
        raise TypeError(f"{op}(): argument '{name}' must be an int or a tuple of {nd} ints, got {v!r}")
    vals = tuple(x for x in items if x is not None)
    if len(vals) == 1:
        vals = vals * nd
    if len(vals) != nd:
        raise RuntimeError(f"{op}(): expected {name} to be a single integer value or a list of {nd} values to match "
                           f"the convolution dimensions, but got {name}={list(vals)}")
    if any(x < low for x in vals):
        kind = "negative" if low == 0 else "non-positive"
        raise RuntimeError(f"{op}(): {kind} {name} is not supported: {name}={list(vals)} (each must be >= {low})")
    return vals


def _conv_call(nd: int, input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
               dilation: Any, groups: Any, activation: str | None) -> Tensor:
    params = (nd, _hashable(stride), _hashable(padding), _hashable(dilation), _hashable(groups), _hashable(activation))
    for p in params:  # a loop, not a generator (see _hashable)
        if p is _UNHASHABLE:  # a parameter the signature cannot hold: the checks judge it
            return _conv(torch.ops.alcop, input, weight, bias, nd, stride, padding, dilation, groups, activation)
    return route.call("conv", (input, weight, bias), params, CONV)


_UNHASHABLE = object()


def _hashable(v: Any) -> Any:
    """``v`` as a plain signature component (a list becomes a tuple), ``_UNHASHABLE`` for anything
    but ints, strings, None and sequences of ints (e.g. tensors: their value is not their hash)."""
    # Loops, not generators: every convolution call runs this, and a generator costs about a
    # microsecond on a call that finds the CPU's caches cold.
    kind = type(v)
    if v is None or kind is int or kind is str:
        return v
    if kind is not tuple and kind is not list:
        return _UNHASHABLE
    for x in v:
        if type(x) is not int:
            return _UNHASHABLE
    return v if kind is tuple else tuple(v)


def _conv(alcop: Any, input: Tensor, weight: Tensor, bias: Tensor | None, nd: int, stride: Any, padding: Any,
          dilation: Any, groups: Any, activation: str | None) -> Tensor:
    op = f"conv{nd}d"
    need_tensor(op, "input", input)
    need_tensor(op, "weight", weight)
    if bias is not None:
        need_tensor(op, "bias", bias)
    check_activation(op, activation)
    if fallback.not_plain(op, ("input", "weight", "bias"), input, weight, bias):
        return _torch_conv(input, weight, bias, nd, stride, padding, dilation, groups, activation)
    # Arguments of the wrong type fail before any shape check, as in torch's argument parser.
    strides = _ints(op, "stride", stride, nd, 1)
    dilations = _ints(op, "dilation", dilation, nd, 1)
    g = checks.index(groups)
    if g is None:
        raise TypeError(f"{op}(): argument 'groups' must be int, not {type(groups).__name__}")
    groups = g
    if groups < 1:
        raise RuntimeError(f"{op}(): non-positive groups is not supported: groups={groups}")
    pads = None if isinstance(padding, str) else _ints(op, "padding", padding, nd, 0)
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {op}, but got input of "
                           f"size: {list(input.shape)}")
    if weight.dim() != nd + 2:
        raise RuntimeError(f"{op}(): weight must be {nd + 2}-D (out_channels, in_channels / groups, *kernel), got "
                           f"weight.shape={shape_of(weight)}")
    batched = input.dim() == nd + 2
    x = input if batched else input.unsqueeze(0)
    if weight.shape[0] == 0:
        raise RuntimeError(f"{op}(): Given groups={groups}, expected weight to be at least 1 at dimension 0, but got "
                           f"weight of size {list(weight.shape)} instead")
    if weight.shape[0] % groups:
        raise RuntimeError(f"{op}(): groups={groups} must divide out_channels = weight.shape[0] = {weight.shape[0]}")
    if x.shape[1] != weight.shape[1] * groups:
        raise RuntimeError(f"{op}(): Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {weight.shape[1] * groups} channels "
                           f"(weight.shape[1] * groups), but got {x.shape[1]} channels instead")
    if bias is not None and shape_of(bias) != (weight.shape[0],):
        raise RuntimeError(f"{op}(): bias.shape={shape_of(bias)}, expected ({weight.shape[0]},): one per out channel")
    check_same(op, ("input", "weight", "bias"), (input, weight, bias))
    ks = shape_of(weight)[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pad_left = pad_right = (0,) * nd
        elif padding == "same":
            if any(s != 1 for s in strides):
                raise RuntimeError(f"{op}(): padding='same' is not supported for strided convolutions "
                                   f"(stride={list(strides)})")
            total = [dilations[i] * (ks[i] - 1) for i in range(nd)]
            pad_left = tuple(t // 2 for t in total)  # torch puts the odd element of padding on the right
            pad_right = tuple(t - t // 2 for t in total)
        else:
            raise RuntimeError(f"{op}(): Invalid padding string: {padding!r}; expected 'same', 'valid' or ints")
    else:
        assert pads is not None
        pad_left = pad_right = pads
    for i in range(nd):
        if x.shape[2 + i] + pad_left[i] + pad_right[i] < dilations[i] * (ks[i] - 1) + 1:
            raise RuntimeError(f"{op}(): Calculated padded input size per channel: "
                               f"{[x.shape[2 + j] + pad_left[j] + pad_right[j] for j in range(nd)]}. Kernel size: "
                               f"{list(ks)} (dilation {list(dilations)}). Kernel size can't be greater than actual "
                               "input size")
    if fallback.falls_back(op, input, weight, bias):
        return _torch_conv(input, weight, bias, nd, stride, padding, dilation, groups, activation)
    y = alcop.conv(x, weight, bias, strides, pad_left, pad_right, dilations, groups, activation)
    return y if batched else y.squeeze(0)


# torch's own functions, taken before patch mode can wrap them: a workload patch mode leaves to torch
# then calls them directly, not through its wrapper a second time.
_F_CONV = (F.conv1d, F.conv2d, F.conv3d)


def _torch_conv(input: Tensor, weight: Tensor, bias: Tensor | None, nd: int, stride: Any, padding: Any, dilation: Any,
                groups: Any, activation: str | None) -> Tensor:
    y = _F_CONV[nd - 1](input, weight, bias, stride, padding, dilation, groups)
    return TORCH_ACTIVATIONS[activation](y) if activation else y



def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, activation: str | None = None) -> Tensor:
    """``F.conv1d`` as implicit GEMM; ``activation`` fuses into the store."""
    return _conv_call(1, input, weight, bias, stride, padding, dilation, groups, activation)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, activation: str | None = None) -> Tensor:
    """``F.conv2d`` as implicit GEMM (NCHW or channels_last, groups incl. depthwise); ``activation`` fuses."""
    return _conv_call(2, input, weight, bias, stride, padding, dilation, groups, activation)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, activation: str | None = None) -> Tensor:
    """``F.conv3d`` as implicit GEMM; ``activation`` fuses into the store."""
    return _conv_call(3, input, weight, bias, stride, padding, dilation, groups, activation)


# ----------------------------------------------------------------------------- 2. registered op

def _check_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
                activation: str | None) -> list[int]:
    op = "alcop::conv"
    nd = x.dim() - 2
    if nd not in (1, 2, 3):
        raise RuntimeError(f"{op}(): input must be (N, C, *spatial) with 1 to 3 spatial dims, got input.shape="
                           f"{tuple(x.shape)}")
    if w.dim() != x.dim():
        raise RuntimeError(f"{op}(): weight must be (C_out, C_in / groups, *kernel) with {nd} kernel dims, got "
                           f"weight.shape={tuple(w.shape)}")
    for name, v, low in (("stride", stride, 1), ("pad_left", pad_left, 0), ("pad_right", pad_right, 0),
                         ("dilation", dilation, 1)):
        if len(v) != nd or any(int(s) < low for s in v):
            raise RuntimeError(f"{op}(): {name}={list(v)}: expected {nd} values >= {low}")
    if groups < 1 or w.shape[0] % groups or x.shape[1] != w.shape[1] * groups:
        raise RuntimeError(f"{op}(): groups={groups} with weight.shape={tuple(w.shape)} and input.shape="
                           f"{tuple(x.shape)}: groups must divide C_out and input channels must be "
                           "weight.shape[1] * groups")
    if bias is not None and tuple(bias.shape) != (w.shape[0],):
        raise RuntimeError(f"{op}(): bias.shape={tuple(bias.shape)}, expected ({w.shape[0]},) = (C_out,)")
    check_same(op, ("input", "weight", "bias"), (x, w, bias))
    check_activation(op, activation)
    out = kconv.output_size(x, w, stride, pad_left, pad_right, dilation)
    if any(o <= 0 for o in out):
        raise RuntimeError(f"{op}(): input.shape={tuple(x.shape)} padded by {list(pad_left)}/{list(pad_right)} is "
                           f"smaller than the dilated kernel {tuple(w.shape[2:])} (dilation {list(dilation)})")
    return [x.shape[0], w.shape[0], *out]


def _conv_workload(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], pad_left: Sequence[int],
                   pad_right: Sequence[int], dilation: Sequence[int], groups: int) -> Workload | None:
    # The dispatcher's key has one pad per conv; an asymmetric one ('same', even kernels) rounds up.
    pad = tuple((lo + hi + 1) // 2 for lo, hi in zip(pad_left, pad_right))
    try:
        return kconv.workload_of(x, w, tuple(stride), pad, tuple(dilation), groups)
    except ValueError:  # the symmetric stand-in has an empty GEMM view: no record can match it
        return None


def _conv_kernel(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
            pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
            activation: str | None = None) -> torch.Tensor:
    shape = _check_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation)
    out = kconv.empty_output(x, shape, kconv.torch_output_format(x, w, stride, pad_left, dilation, groups))
    if out.numel() == 0:
        return out
    reason = fallback.runtime_reason(x, w, bias, out)
    if reason is None and groups > CUDA_GRID_Y:
        reason = f"groups={groups}: the groups are the grid's second dimension, limited to {CUDA_GRID_Y} by CUDA"
    if reason is not None:
        fallback.use_torch("conv", reason)
        out.copy_(fallback.torch_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation))
        return out
    as_gemm = kconv.pointwise_gemm(x, w, out, stride, pad_left, pad_right, groups)
    if as_gemm is not None:
        # Its config is the GEMM's; patch mode weighs the GEMM's recorded time against cuDNN's on the
        # convolution where records hold that, else against cuBLAS's on the GEMM: cuBLAS is no stand-in
        # for cuDNN (ResNet-50's 14x14 1024 -> 512 layer at batch 64, shipped H100 table: alcop's GEMM
        # 24.6 µs, cuBLAS's 62.0, cuDNN's convolution 25.6).
        run_gemm("conv", as_gemm[0], as_gemm[1], bias, None, activation, 1.0, 1.0, as_gemm[2],
                 lambda: _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups))
        return out
    cfg = choose_config.choose_config(
        x.device, lambda: _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups) if w[0].numel() > 0 else None)
    p = kconv.ConvParams(x.dim() - 2, tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation), groups,
                         kconv.is_channels_last(x), bias is not None, activation)
    kern = kconv.compiled(dtype_name(x.dtype), p, cfg)
    co = w.shape[0]
    fastpath.launch_kernel(kern, [t for t in (x, w, bias) if t is not None] + [out.unflatten(1, (groups, co // groups))])
    return out


def _registered_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
                activation: str | None = None) -> torch.Tensor:
    return route.call("alcop::conv", (x, w, bias), (tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation),
                                                    groups, activation), _CONV_KERNEL)


conv_op = torch.library.custom_op(
    "alcop::conv", _registered_conv,
    mutates_args=(), schema=("(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] pad_left, "
                             "int[] pad_right, int[] dilation, int groups, str? activation=None) -> Tensor"))


@conv_op.register_fake
def _conv_fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
               pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
               activation: str | None = None) -> torch.Tensor:
    shape = _check_conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation)
    return kconv.empty_output(x, shape, kconv.torch_output_format(x, w, stride, pad_left, dilation, groups))


# ----------------------------------------------------------------------------- 3. autograd formulas

def _conv_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, bias, stride, pad_left, pad_right, dilation, groups, activation = inputs
    ctx.params = (tuple(stride), tuple(pad_left), tuple(pad_right), tuple(dilation), groups)
    ctx.activation = activation
    ctx.save_for_backward(x, w, bias, output if activation == "relu" else None)
    ctx.patched = fastpath.patch_mode_on()


def training_to_torch(nd: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether patch mode leaves a call of ``F.conv{nd}d(*args, **kwargs)`` that will train to torch: yes
    unless the records show alcop faster, measured against torch, in its parts, the forward (weighed as
    ``_routed_conv`` weighs it) and the gradients it needs (``records.CONV_GRAD_OPS``), by
    ``TRAINING_MIN_GAIN_MS`` together. A convolution sent to alcop then runs each part where its own records
    say (``_conv_backward``). Torch's as well for any call these keys cannot hold (an unbatched input, a
    padding string, arguments that are not plain), which torch's front end then judges."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    if len(args) > len(names) or any(k not in names for k in kwargs):
        return True
    given = dict(zip(names, args)) | kwargs
    x, w = given.get("input"), given.get("weight")
    groups = given.get("groups", 1)
    padding = given.get("padding", 0)
    if type(x) is not Tensor or not isinstance(w, Tensor) or x.dim() != nd + 2 or type(groups) is not int \
            or isinstance(padding, str) or tensor_kinds.first_reason(x, w) is not None:
        return True
    try:
        stride, pad = _ints("", "stride", given.get("stride", 1), nd, 1), _ints("", "padding", padding, nd, 0)
        dilation = _ints("", "dilation", given.get("dilation", 1), nd, 1)
        fw = _conv_workload(x, w, stride, pad, pad, dilation, groups)
    except (RuntimeError, TypeError, ValueError):  # torch's call says what is wrong with them
        return True
    if fw is None:
        return True
    device = x.device.type
    if torch.is_autocast_enabled(device) and x.is_floating_point():  # computed in autocast's dtype (amp.cast)
        fw = replace(fw, dtype=dtype_name(torch.get_autocast_dtype(device)))
    gw = kconv.gemm_workload(fw)  # a channels-last pointwise one runs as its GEMM, weighed against the convolution
    gain = choose_config.measured_gain(x.device, kmatmul.aligned_workload(gw), fw) if gw is not fw else \
        choose_config.measured_gain(x.device, fw)
    # only the gradients autograd will ask for (a network's first layer computes no input gradient)
    gain += sum(choose_config.measured_gain(x.device, fw.grad(which))
                for which, t in zip(GRADIENTS, (x, w)) if t.requires_grad)
    from ..autotune.dispatch import TRAINING_MIN_GAIN_MS
    return gain < TRAINING_MIN_GAIN_MS


def _gradients_to_torch(ctx: Any, x: torch.Tensor, w: torch.Tensor, need: Sequence[bool]) -> tuple[bool, bool]:
    """Which of the input and weight gradients (of those asked) a backward leaves to torch: in patch mode's
    backward those whose records do not show alcop's faster (unmeasured included, as the forward's
    ``training_to_torch``); none elsewhere, or where torch's op cannot take the padding (asymmetric)."""
    stride, pad_left, pad_right, dilation, groups = ctx.params
    if not getattr(ctx, "patched", False) or pad_left != pad_right:
        return False, False
    # Every backward of a convolution trained through alcop asks: remembered per signature (building the
    # workloads and asking the records costs the host about 45 µs a backward), until the records change.
    key = (x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), ctx.params, bool(need[0]), bool(need[1]))
    known = _GRADIENT_ROUTES.get(key)
    if known is not None:
        return known
    fw = _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups)
    if fw is None:
        return False, False
    grads = (fw.grad("input"), fw.grad("weight"))
    gen = generation.current()
    known = (bool(need[0]) and choose_config.prefers_torch(x.device, lambda: grads[0]),
             bool(need[1]) and choose_config.prefers_torch(x.device, lambda: grads[1]))
    if gen == generation.current():  # not decided against records that changed meanwhile
        if len(_GRADIENT_ROUTES) >= MAX_GRADIENT_ROUTES:
            _GRADIENT_ROUTES.clear()
        _GRADIENT_ROUTES[key] = known
    return known


MAX_GRADIENT_ROUTES = 4096
"""Signatures whose gradient routes ``_gradients_to_torch`` remembers (a model has a few dozen)."""
_GRADIENT_ROUTES: dict[tuple[Any, ...], tuple[bool, bool]] = {}
generation.on_bump(_GRADIENT_ROUTES.clear)


def conv_grads(x: torch.Tensor, w: torch.Tensor, dz: torch.Tensor, stride: tuple[int, ...],
               pad_left: tuple[int, ...], dilation: tuple[int, ...], groups: int, input_grad: bool = True,
               weight_grad: bool = True,
               differentiable: bool = False) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A convolution's input and weight gradients from the output gradient ``dz`` (what a backward pass
    through ``alcop::conv`` runs; None where not asked), each on the fastest kernel that computes it
    (``kernels/conv_grad.py``, ``kernels/conv_window_grad.py``). On sm90, fp16/bf16 and channels last, both
    run on TMA boxes: the input gradient on the box kernel with the weight read as it lies at flipped taps
    (a strided convolution's phases in one launch), the weight gradient on boxes of dY and the input. Elsewhere
    a strided convolution's input gradient runs in one kernel over its input phases where that applies,
    else on the forward convolution kernel; the weight gradient as a GEMM over im2col rows where the
    reduction is short and there are no groups, else on its DSL kernel. ``differentiable`` (a backward
    under create_graph): both gradients through calls that differentiate again or say they cannot (the box
    and phase kernels' results carry no derivative)."""
    from ..kernels import conv_window_grad  # Gluon device code: loaded at the first gradient, not with the package
    dx = dw = None
    if input_grad:
        if not differentiable:  # neither the box kernel nor the phases' kernel has a derivative of its own
            dx = conv_window_grad.input_grad_by_boxes(x, w, dz, stride, pad_left, dilation, groups)
            if dx is None:
                dx = conv_grad.input_grad_in_phases(BACKWARD, x, w, dz, stride, pad_left, dilation, groups)
        if dx is None:
            dx = conv_grad.input_grad_by_conv(BACKWARD, x, w, dz, stride, pad_left, dilation, groups)
    if weight_grad:
        # the box kernel's result has no derivative: under create_graph the routes that have one
        dw = None if differentiable else \
            conv_window_grad.weight_grad_by_boxes(x, w, dz, stride, pad_left, dilation, groups)
        if dw is None:
            dw = conv_grad.weight_grad_by_gemm(BACKWARD, x, w, dz, stride, pad_left, dilation, groups)
        if dw is None:
            key = conv_grad.conv_weight_grad_kernel(x.dim() - 2, x.dtype, stride, pad_left, dilation, groups)
            dw = BACKWARD.dsl_call(key, [dz, x, w]).flatten(0, 1)
    return dx, dw


def torch_conv_grads(x: torch.Tensor, w: torch.Tensor, dz: torch.Tensor, stride: Sequence[int],
                     padding: Sequence[int], dilation: Sequence[int], groups: int, input_grad: bool = True,
                     weight_grad: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The input and weight gradients torch's autograd computes for a convolution (``aten.convolution_backward``:
    cuDNN's on a GPU) with symmetric ``padding``; None where not asked. What patch mode's backward runs for a
    gradient the records leave to torch, and what the tables time torch's by."""
    nd = x.dim() - 2
    dx, dw, _ = torch.ops.aten.convolution_backward(dz, x, w, None, list(stride), list(padding), list(dilation),
                                                    False, [0] * nd, groups, [input_grad, weight_grad, False])
    return (dx if input_grad else None), (dw if weight_grad else None)


def _conv_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, w, bias, out = ctx.saved_tensors
    stride, pad_left, pad_right, dilation, groups = ctx.params
    need = ctx.needs_input_grad
    dz = activation_grad(ctx.activation, grad, out, lambda: BACKWARD.conv(
        x, w, bias, stride, pad_left, pad_right, dilation, groups, None))
    # grad mode is on in a backward exactly when it runs under create_graph (a double backward to come)
    differentiable = torch.is_grad_enabled()
    torch_dx, torch_dw = (False, False) if differentiable else _gradients_to_torch(ctx, x, w, need[:2])
    dx, dw = conv_grads(x, w, dz, stride, pad_left, dilation, groups, need[0] and not torch_dx,
                        need[1] and not torch_dw, differentiable)
    if torch_dx or torch_dw:  # those the records leave to torch, in one call of torch's backward
        tdx, tdw = torch_conv_grads(x, w, dz, stride, pad_left, dilation, groups, torch_dx, torch_dw)
        dx, dw = (tdx if torch_dx else dx), (tdw if torch_dw else dw)
    dbias = dz.sum(dim=[0] + list(range(2, dz.dim()))) if need[2] else None
    return dx, dw, dbias, None, None, None, None, None, None


conv_op.register_autograd(_conv_backward, setup_context=_conv_setup)


# ----------------------------------------------------------------------------- 4. traced with routing on

def _routed_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                 pad_left: Sequence[int], pad_right: Sequence[int], dilation: Sequence[int], groups: int,
                 activation: str | None = None) -> torch.Tensor:
    """``alcop::conv`` where the records show it faster for the workload ``_conv_kernel`` would decide on
    (a channels-last pointwise convolution: its GEMM's, weighed against torch's convolution), else torch's
    convolution; torch's for symbolic sizes."""
    def workload() -> Workload | None:
        cw = _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups) if w.shape[1:].numel() > 0 else None
        gw = kconv.gemm_workload(cw) if cw is not None else None
        return kmatmul.aligned_workload(gw) if gw is not None and gw is not cw else cw

    def torch_workload() -> Workload | None:
        cw = _conv_workload(x, w, stride, pad_left, pad_right, dilation, groups)
        return cw if cw is not None and kconv.gemm_workload(cw) is not cw else None

    if not traced.concrete(x, w, bias) or traced.to_torch(x.device, workload, True, torch_workload):
        return traced.by_torch(fallback.torch_conv, x, w, bias, stride, pad_left, pad_right, dilation, groups,
                               activation)
    return torch.ops.alcop.conv(x, w, bias, stride, pad_left, pad_right, dilation, groups, activation)


ROUTED = types.SimpleNamespace(conv=traced.define(
    "routed_conv", "(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] pad_left, int[] pad_right, "
    "int[] dilation, int groups, str? activation=None) -> Tensor", _routed_conv))
"""``torch.ops.alcop.conv`` for calls Dynamo traces with routing on (see ``gemm.ROUTED``)."""


# ----------------------------------------------------------------------------- 5. op namespaces and routes

DIRECT = types.SimpleNamespace(conv=_conv_kernel)
"""``torch.ops.alcop.conv``'s implementation, called without torch's dispatcher (see ``gemm.DIRECT``)."""

AUTOGRAD = types.SimpleNamespace(
    conv=fastpath.grad_function("AlcopConv", _registered_conv, _conv_setup, _conv_backward, 3))
"""``torch.ops.alcop.conv`` for eager calls with autograd (see ``gemm.AUTOGRAD``)."""

# the registered op's own implementation: below the dispatcher; torch's where patch mode's records leave the
# workload to torch (see gemm's _MM_KERNEL)
_CONV_KERNEL = OpRoutes(_conv_kernel, torch=fallback.torch_conv)

BACKWARD = types.SimpleNamespace(
    conv=route.backward_op("conv", 3, OpRoutes(_conv_kernel, torch.ops.alcop.conv, None, AUTOGRAD.conv)),
    mm=gemm.BACKWARD.mm, dsl_call=dsl_call.BACKWARD)
"""The ops a convolution's backward formulas call (``route.backward_op``)."""

CONV = route.front_end(_conv, DIRECT, AUTOGRAD, _torch_conv, ROUTED)
