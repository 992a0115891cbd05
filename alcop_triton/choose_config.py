"""Which config a kernel call runs with: ``use_config``'s, the interpreter's, or the dispatcher's.

The dispatcher's answer (``autotune.dispatch``: tuning database, shipped table, nearest tuned
shape, analytical model) is remembered per (workload, GPU) until the dispatch generation changes
(``generation.bump``: the database gained a record).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from dataclasses import replace
from typing import Any, Callable, Iterator

import torch

from . import generation
from .records import KernelConfig, Workload

# Small tiles on CPU: the interpreter's cost is per program and per op, and test shapes are small.
INTERPRETER_CONFIG = KernelConfig(block_m=32, block_n=32, block_k=32, group_m=1, num_warps=4, smem_stages=2)

forced: contextvars.ContextVar[KernelConfig | None] = contextvars.ContextVar("alcop_config", default=None)
"""``use_config``'s config while its block runs (the fast path steps aside then)."""

# (workload, device index, torch's workload) -> (config, torch preferred)
_CONFIGS: dict[tuple[Any, ...], tuple[KernelConfig, bool]] = {}
"""Decisions per (workload, device index, torch's workload[, "graph"]) in this dispatch generation."""
generation.on_bump(_CONFIGS.clear)


@contextlib.contextmanager
def use_config(cfg: KernelConfig) -> Iterator[None]:
    """Within the block, every alcop op runs with ``cfg`` instead of the dispatcher's choice."""
    if not isinstance(cfg, KernelConfig):
        raise TypeError(f"use_config(cfg={cfg!r}): expected a KernelConfig")
    from . import fastpath  # imports this module
    token = forced.set(cfg)
    try:
        with fastpath.forcing():
            yield
    finally:
        forced.reset(token)


def capture_error(what: str) -> RuntimeError:
    return RuntimeError(
        f"alcop_triton: {what} while a CUDA graph is being captured; compiling and tuning cannot be captured. "
        "Run the op once with the same shapes, strides and dtypes before capturing (a warm-up), "
        "then capture: warmed-up calls take the cached path.")


def device_index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=None)
def gpu_spec(index: int) -> Any:
    """The hardware preset of cuda:``index`` (raises UnsupportedError for a GPU without one)."""
    from .model import hardware
    return hardware.detect(index)


def choose_config(device: torch.device, workload: Callable[[], Workload | None],
                  torch_comparable: bool = True,
                  torch_workload: Callable[[], Workload | None] | None = None) -> KernelConfig:
    """The config for a call: ``use_config``'s, else the dispatcher's for this workload on this GPU.

    On CPU (the interpreter) there is no GPU to tune for: a small fixed config. Where the records
    do not show the chosen config saving enough against torch (``Decision.torch_preferred``), the fast path hears of it
    (``fastpath.note_torch_preferred``): patch mode leaves such calls to torch. Not where
    ``torch_comparable`` is False (the call's operands are not what the records timed torch on), unless the
    dtype stays with torch until measured (float32, ``TORCH_UNLESS_MEASURED``).
    ``torch_workload``: what torch runs for the same call where that is another workload (a pointwise
    convolution runs alcop's GEMM, torch's the convolution): its recorded torch time is the one
    compared where records hold one.
    """
    cfg = forced.get()
    if cfg is not None:
        return cfg
    if device.type != "cuda":
        w = workload()
        if _interpreter_gpu is not None and torch_comparable and w is not None \
                and decide(w, _interpreter_gpu, torch_workload() if torch_workload is not None else None)[1]:
            from .fastpath import note_torch_preferred
            note_torch_preferred()
        return fit_stages(INTERPRETER_CONFIG, w)
    w = workload()
    if w is None:  # an empty reduction: nothing to tune, any valid config computes the zeros
        return KernelConfig()
    index = device_index(device)
    tw = torch_workload() if torch_workload is not None else None
    known = _CONFIGS.get((w, index, tw))
    if known is None:
        with torch.cuda.device(index):
            if torch.cuda.is_current_stream_capturing():
                raise capture_error(f"choosing a config for {w.key()} (first call of this shape)")
        known = _decided(w, index, tw)
    if known[1] and (torch_comparable or _unmeasured_stays_with_torch(w)):
        from .fastpath import note_torch_preferred
        note_torch_preferred()
    return known[0]


def _decided(w: Workload, index: int, tw: Workload | None, graph: bool = False) -> tuple[KernelConfig, bool]:
    """``decide``'s answer for ``w`` on cuda:``index`` (``graph``: with the graphs' margin), remembered until
    the dispatch generation changes."""
    key = (w, index, tw) if not graph else (w, index, tw, "graph")
    known = _CONFIGS.get(key)
    if known is None:
        gen = generation.current()
        known = decide(w, gpu_spec(index), tw, graph=graph)
        if gen == generation.current():
            _CONFIGS[key] = known
    return known


def prefers_torch(device: torch.device, workload: Callable[[], Workload | None], torch_comparable: bool = True,
                  torch_workload: Callable[[], Workload | None] | None = None, graph: bool = False) -> bool:
    """Whether the records leave a call with this workload on ``device`` to torch: what ``choose_config``
    tells the fast path for the same arguments, or with ``graph`` what a graph ``torch.compile`` builds
    holds (alcop's gain weighed with ``GRAPH_MIN_GAIN``, not ``PATCH_MIN_GAIN``). Asked where a graph is
    built (``ops.traced``), so it never runs a kernel; it tunes only as ``choose_config`` would
    (``ALCOP_AUTOTUNE=1``). A GPU without a preset is torch's (``fallback.runtime_reason`` sends its calls
    there)."""
    from .errors import UnsupportedError
    w = workload()
    if w is None or not (torch_comparable or _unmeasured_stays_with_torch(w)):
        return False
    tw = torch_workload() if torch_workload is not None else None
    if device.type != "cuda":
        return _interpreter_gpu is not None and decide(w, _interpreter_gpu, tw, graph=graph)[1]
    try:
        return _decided(w, device_index(device), tw, graph)[1]
    except UnsupportedError:
        return True


_interpreter_gpu: Any = None
"""The GPU (a ``model.hardware`` spec) whose records decide, for CPU tensors, whether patch mode leaves
a call to torch (``interpreter_records``); None: never (the interpreter has no GPU of its own)."""


@contextlib.contextmanager
def interpreter_records(spec: Any) -> Iterator[None]:
    """Within the block, calls on CPU tensors (Triton's interpreter) go to torch where ``spec``'s records
    prefer torch, as calls on that GPU would: how tests check patch mode's and ``torch.compile``'s
    routing against records on a machine without a GPU. Configs stay the interpreter's. Not
    thread-local: one block at a time."""
    global _interpreter_gpu
    previous, _interpreter_gpu = _interpreter_gpu, spec
    generation.bump()  # remembered decisions of CPU calls were made without these records
    try:
        yield
    finally:
        _interpreter_gpu = previous
        generation.bump()


def recorded_times(device: torch.device, w: Workload,
                   torch_workload: Workload | None = None) -> tuple[float | None, float | None]:
    """(alcop's, torch's) recorded ms for ``w`` on ``device``, what ``prefers_torch`` weighed (None: not
    recorded, or no GPU whose records decide): for saying why a call went where it went."""
    from .errors import UnsupportedError
    try:
        spec = gpu_spec(device_index(device)) if device.type == "cuda" else _interpreter_gpu
    except UnsupportedError:
        return None, None
    if spec is None:
        return None, None
    decision = _decision(w, spec, torch_workload)
    return decision.alcop_ms, decision.torch_ms


def measured_gain(device: torch.device, w: Workload, torch_workload: Workload | None = None) -> float:
    """The ms alcop saves on ``w`` on ``device`` by the records (``recorded_times``), where they hold alcop's time
    and torch's and alcop's saves what patch mode asks (``PATCH_MIN_GAIN``); 0.0 anywhere else. What patch
    mode weighs to send a convolution that trains to alcop (``ops.conv.training_to_torch``): a measured gain
    only."""
    from .autotune.dispatch import PATCH_MIN_GAIN, Decision
    alcop_ms, torch_ms = recorded_times(device, w, torch_workload)
    if alcop_ms is None or torch_ms is None:
        return 0.0
    if Decision(KernelConfig(), "", alcop_ms=alcop_ms, torch_ms=torch_ms).torch_preferred_by(PATCH_MIN_GAIN):
        return 0.0
    return torch_ms - alcop_ms


def _unmeasured_stays_with_torch(w: Workload) -> bool:
    """Whether ``w``'s dtype stays with torch until measured (``TORCH_UNLESS_MEASURED``): so also where the
    records' torch time is no measure of the call (``torch_comparable`` False), since it is not their torch
    time that sends it to torch."""
    from .autotune.dispatch import TORCH_UNLESS_MEASURED
    return w.dtype in TORCH_UNLESS_MEASURED


def decide(w: Workload, spec: Any, torch_workload: Workload | None = None,
           dispatch: Any = None, graph: bool = False) -> tuple[KernelConfig, bool]:
    """``w``'s config on ``spec`` and whether patch mode leaves the call to torch
    (``Decision.torch_preferred``), torch's time read off ``torch_workload``'s records where they hold
    one (``choose_config``). ``dispatch``: the ``Dispatcher`` asked (None: the shared one). ``graph``:
    whether a compiled graph leaves it to torch (``GRAPH_MIN_GAIN``)."""
    from .autotune.dispatch import GRAPH_MIN_GAIN
    decision = _decision(w, spec, torch_workload, dispatch)
    preferred = decision.torch_preferred_by(GRAPH_MIN_GAIN) if graph else decision.torch_preferred
    return fit_stages(decision.config, w), preferred


def _decision(w: Workload, spec: Any, torch_workload: Workload | None = None, dispatch: Any = None) -> Any:
    """The dispatcher's ``Decision`` for ``w`` on ``spec``, with torch's time read off ``torch_workload``'s
    records where they hold one. ``dispatch``: the ``Dispatcher`` asked (None: the shared one)."""
    if dispatch is None:
        from .autotune.dispatch import dispatcher
        dispatch = dispatcher()
    decision = dispatch.decide(w, spec)
    if torch_workload is not None:
        torch_ms = dispatch.torch_ms(torch_workload, spec)
        if torch_ms is not None:
            decision = replace(decision, torch_ms=torch_ms)
    return decision


def fit_stages(cfg: KernelConfig, w: Workload | None) -> KernelConfig:
    """``cfg`` with no more pipeline stages than one program's slice of ``w``'s reduction has chunks
    (sub-tiles).

    The library's own choice must not ask for depths the shape cannot have: strict mode
    (``ALCOP_STRICT=1``) judges what the user asked for, and would refuse the clamp otherwise.
    Persistent kernels pipeline across tiles too, so their depth is left to the planner.
    """
    if w is None or cfg.persistent:
        return cfg
    chunks = max(1, -(-w.gemm_dims()[3] // (cfg.block_k * cfg.split_k)))
    return cfg.replace(smem_stages=min(cfg.smem_stages, chunks),
                       reg_stages=min(cfg.reg_stages, chunks * cfg.reg_split))
