"""DSL kernels run by key: ``alcop::dsl_call(key, inputs)`` and the ``alcop_triton.op`` ops.

A ``DslKernel`` is a tensor expression with its tiling roles and torch reference; it is
registered under a self-describing key (``kernel_key(kind, params)``), and a key of a registered
kind is resolved from the key alone (so a compiled graph loaded from torch's caches, which holds
only the key, finds its kernel). ``run_dsl`` binds sizes from the tensors, chooses a config on the
kernel's GEMM view, builds once per (key, config) and launches.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from . import choose_config, fallback, settings, te, tensor_kinds
from .build import CompiledKernel, build
from .errors import UnsupportedError
from .fastpath import launch_kernel
from .records import KernelConfig, Workload, dtype_name
from .schedule import Schedule

@dataclass(frozen=True)
class DslKernel:
    """A tensor expression run by ``alcop::dsl_call(key, inputs)``.

    Attributes:
        key: ``kernel_key(kind, params)``: a string, so it can be a constant in a traced graph,
            from which the kind's resolver rebuilds the kernel in any process.
        build: returns (placeholders in call order, output tensor). Placeholders that the body
            does not read still bind size variables: they pass a tensor only for its shape.
        m_axes, n_axes: output axes tiled as rows / columns (default: the last two).
        out_order: the output's physical dim order, outermost first (default: row-major).
        config: a fixed config (default: ``choose``'s, else the dispatcher's on the GEMM view as a matmul/bmm).
        choose: on a GPU, the config for a call from its GEMM view (batch, M, N, K), the GPU's SM
            count and the call's sizes (size variable -> value): a kernel's own rule where the
            dispatcher's records (GEMMs) say nothing about it.
        reference: the same computation in torch, used when alcop cannot run the inputs.
        static: size variables compiled in as constants (``build(static=...)``: one variant per
            value, index math by constants, so Triton can prove loads contiguous).
    """
    key: str
    build: Callable[[], tuple[list[te.Tensor], te.Tensor]]
    m_axes: tuple[str, ...] | None = None
    n_axes: tuple[str, ...] | None = None
    out_order: tuple[int, ...] | None = None
    config: KernelConfig | None = None
    choose: Callable[[tuple[int, int, int, int], int, Mapping[str, int]], KernelConfig] | None = None
    reference: Callable[[Sequence[torch.Tensor]], torch.Tensor] | None = None
    static: tuple[str, ...] = ()


_DSL: dict[str, DslKernel] = {}
_DSL_TE: dict[str, tuple[list[te.Tensor], te.Tensor]] = {}
_DSL_COMPILED: dict[tuple[str, KernelConfig, bool], CompiledKernel] = {}
"""Per (key, config, ``ALCOP_STRICT``): the compiled kernel."""
_RESOLVERS: dict[str, Callable[[str, dict[str, Any]], DslKernel]] = {}
DSL_LOCK = threading.RLock()  # guards the registry and builds (re-entrant: resolvers build other keys)


def kernel_key(kind: str, params: Mapping[str, Any]) -> str:
    """A self-describing key: ``kind|{json params}``. A compiled graph loaded from torch's caches
    holds only the key, so ``dsl_te`` must be able to rebuild the kernel from it alone."""
    return f"{kind}|{json.dumps(params, sort_keys=True, separators=(',', ':'))}"


def register_resolver(kind: str, resolve: Callable[[str, dict[str, Any]], DslKernel]) -> None:
    """``resolve(key, params)`` builds the DslKernel of any key of this kind."""
    _RESOLVERS[kind] = resolve


def dsl_kernel(key: str) -> DslKernel:
    """The kernel registered as ``key``, resolved from the key itself on first use."""
    spec = _DSL.get(key)
    if spec is not None:
        return spec
    kind, _, params = key.partition("|")
    resolve = _RESOLVERS.get(kind)
    if resolve is None or not params:
        raise RuntimeError(f"alcop::dsl_call: no DSL kernel can be built for key {key!r}: kind {kind!r} is not "
                           "registered in this process (define the alcop_triton.op it belongs to first)")
    with DSL_LOCK:
        if key not in _DSL:
            spec = resolve(key, json.loads(params))
            if spec.key != key:
                raise RuntimeError(f"alcop::dsl_call: resolver of {kind!r} built {spec.key!r} for {key!r}")
            _DSL[key] = spec
        return _DSL[key]


def dsl_te(key: str) -> tuple[DslKernel, list[te.Tensor], te.Tensor]:
    spec = dsl_kernel(key)
    with DSL_LOCK:
        if key not in _DSL_TE:
            _DSL_TE[key] = spec.build()
    inputs, out = _DSL_TE[key]
    return spec, inputs, out


def size_env(op: str, inputs: Sequence[te.Tensor], tensors: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Size variables from tensor shapes (SymInts when tracing), checking ranks, dtypes and agreement."""
    if len(tensors) != len(inputs):
        raise RuntimeError(f"{op}: expected {len(inputs)} tensors ({', '.join(t.name for t in inputs)}), "
                           f"got {len(tensors)}")
    env: dict[str, Any] = {}
    for ph, x in zip(inputs, tensors):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{op}: argument {ph.name!r} must be a Tensor, not {type(x).__name__}")
        if x.dim() != ph.ndim:
            raise RuntimeError(f"{op}: argument {ph.name!r} must be {ph.ndim}-D {tuple(ph.shape)}, "
                               f"got shape {tuple(x.shape)}")
        if dtype_name(x.dtype) != ph.dtype:
            raise RuntimeError(f"{op}: argument {ph.name!r} must have dtype {ph.dtype}, got {dtype_name(x.dtype)}")
        for d, (e, n) in enumerate(zip(ph.shape, x.shape)):
            if isinstance(e, te.Var):
                if e.name not in env:
                    env[e.name] = n
                elif env[e.name] != n:
                    raise RuntimeError(f"{op}: argument {ph.name!r} dim {d} is {n} but {e.name} = {env[e.name]} "
                                       "from an earlier argument; the shapes must agree")
    for ph, x in zip(inputs, tensors):
        for d, (e, n) in enumerate(zip(ph.shape, x.shape)):
            if not isinstance(e, te.Var) and te.evaluate(e, env) != n:
                raise RuntimeError(f"{op}: argument {ph.name!r} dim {d} is {n}, expected {e!r} = "
                                   f"{te.evaluate(e, env)}")
    return env


def _size(e: te.Expr, env: dict[str, Any]) -> int:
    """A size expression's value: an int (a SymInt while tracing). Shapes are integer expressions
    (``te`` checks their dtype), so they never evaluate to a float."""
    v = te.evaluate(e, env)
    assert not isinstance(v, float), f"size {e!r} evaluated to the float {v!r}"
    return v


def dsl_output(spec: DslKernel, out: te.Tensor, env: dict[str, Any], like: torch.Tensor) -> torch.Tensor:
    shape = [_size(d, env) for d in out.shape]
    dtype = getattr(torch, out.dtype)
    if spec.out_order is None:
        return torch.empty(shape, dtype=dtype, device=like.device)
    phys = torch.empty([shape[i] for i in spec.out_order], dtype=dtype, device=like.device)
    return phys.permute([spec.out_order.index(d) for d in range(len(shape))])


@functools.lru_cache(maxsize=1024)
def _reduction_of(out: te.Tensor) -> tuple[te.ComputeOp, te.Reduce]:
    """The output's compute and its reduction's te.sum."""
    red = Schedule(out).reduction
    # A reduction is a compute whose body is a te.Reduce (Schedule's definition): the last two checks narrow.
    if red is None or not isinstance(out.op, te.ComputeOp) or not isinstance(red.op, te.ComputeOp) \
            or not isinstance(red.op.body, te.Reduce):
        raise UnsupportedError(f"{out.name!r} has no te.sum: alcop kernels are contractions")
    return out.op, red.op.body


def gemm_view(out: te.Tensor, m_axes: tuple[str, ...] | None, n_axes: tuple[str, ...] | None,
              env: dict[str, Any]) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a DSL kernel's tiled contraction, lower()'s default axis roles."""
    out_op, rsum = _reduction_of(out)
    axes = {a.name: a.extent for a in out_op.axes}
    names = list(axes)
    n = n_axes if n_axes is not None else tuple(names[-1:]) if len(names) >= 2 else ()
    m = m_axes if m_axes is not None else tuple(x for x in names[-2:-1] if x not in n) if len(names) >= 2 \
        else tuple(names)
    size = lambda axs: math.prod(int(te.evaluate(axes[a], env)) for a in axs)  # noqa: E731
    b = size([a for a in names if a not in m and a not in n])
    k = math.prod(int(te.evaluate(a.extent, env)) for a in rsum.axes)
    return b, size(m), size(n), k


def _dsl_workload(out: te.Tensor, spec: DslKernel, env: dict[str, Any], inputs: Sequence[te.Tensor]) -> Workload | None:
    b, m, n, k = gemm_view(out, spec.m_axes, spec.n_axes, env)
    if min(b, m, n, k) <= 0:
        return None
    dtype = next((t.dtype for t in inputs if t.dtype in ("float16", "bfloat16")), "float32")
    return Workload("bmm", (b, m, n, k), dtype) if b > 1 else Workload("matmul", (m, n, k), dtype)


def _own_choice(spec: DslKernel, out: te.Tensor, env: dict[str, Any], device: torch.device) -> KernelConfig | None:
    """``spec.choose``'s config on a GPU, unless ``use_config`` forces one (the interpreter keeps its small tiles)."""
    if spec.choose is None or device.type != "cuda" or choose_config.forced.get() is not None:
        return None
    view = gemm_view(out, spec.m_axes, spec.n_axes, env)
    if min(view) <= 0:
        return None
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    sizes = {name: v for name, v in env.items() if isinstance(v, int)}
    return choose_config.fit_stages(spec.choose(view, sms, sizes), Workload("matmul", view[1:], "float16"))


def run_dsl(key: str, tensors: Sequence[torch.Tensor], op: str = "dsl_call") -> torch.Tensor:
    """Run the registered DSL kernel ``key`` on real tensors (the impl of ``alcop::dsl_call``)."""
    spec, inputs, out_te = dsl_te(key)
    # A DSL kernel has no torch function to leave torch's lazy flags to: they are applied here (a copy).
    # Any other tensor that is not plain strided memory (nested, sparse, freed storage...) is refused.
    tensors = [tensor_kinds.resolved(t) if isinstance(t, torch.Tensor) else t for t in tensors]
    for ph, t in zip(inputs, tensors):
        if type(t) in (torch.Tensor, torch.nn.Parameter):
            kind = tensor_kinds.reason(t) or tensor_kinds.storage_reason(t)
            if kind is not None:
                raise RuntimeError(f"{op} ({key}): argument {ph.name!r}: {kind}; a DSL kernel reads plain "
                                   "strided tensors")
    env = size_env(f"{op}[{key}]", inputs, tensors)
    out = dsl_output(spec, out_te, env, tensors[0])
    if out.numel() == 0:
        return out
    allowed = fallback.SUPPORTED_DTYPES + (torch.int32, torch.int64, torch.bool)
    reason = fallback.runtime_reason(*tensors, out, dtypes=fallback.SUPPORTED_DTYPES if spec.reference else allowed)
    if reason is not None:
        if spec.reference is None:
            raise UnsupportedError(f"{op} ({key}): {reason}; this kernel has no torch equivalent to fall back to")
        fallback.use_torch(op, reason)
        out.copy_(spec.reference(tensors))
        return out
    cfg = spec.config or _own_choice(spec, out_te, env, out.device) \
        or choose_config.choose_config(out.device, lambda: _dsl_workload(out_te, spec, env, inputs))
    with DSL_LOCK:
        strict = settings.strict()
        kern = _DSL_COMPILED.get((key, cfg, strict))
        if kern is None:
            sched = Schedule.from_config(out_te, cfg, m_axes=spec.m_axes, n_axes=spec.n_axes)
            kern = _DSL_COMPILED[(key, cfg, strict)] = build(sched, list(inputs) + [out_te], static=spec.static,
                                                             strict=strict)
    launch_kernel(kern, list(tensors) + [out])
    return out
