"""``build``: schedule -> callable kernel; the whole lowering in one function, one line per pass."""

from __future__ import annotations

import functools
import logging
import math
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from . import codegen, settings, te
from .version import __version__
from .analysis import PipelinePlan, explain, find_pipeline_candidates, plan_pipeline
from .errors import ScheduleError
from .loop_ir import Descriptor, Store, TileIndices, find
from .lower import lower
from .records import KernelConfig, dtype_name, tail_split_factor, wave_tail_rows
from .rewrite import apply_pipeline
from .runtime import (capture_id, current_context, for_device, load_kernel, prebind, resident_programs,
                      stream_capturing, tma_descriptor)
from .schedule import Schedule

log = logging.getLogger("alcop_triton")

DEPENDENT_LAUNCH_CC = (9, 0)
"""Programmatic dependent launch (``griddepcontrol``) exists from Hopper on. Over the ALCOP dense + bmm suite
on an H100 it took the dispatched kernels from 0.982x to 1.011x cuBLAS (geomean of cuBLAS's time over
theirs, CUDA graphs; ``docs/decisions.md#d09``): each launch overlaps the tail of the kernel before it."""

INTERPRETER_PROGRAMS = 2
"""Programs of a persistent kernel in the interpreter, which runs them one after another: two still
make each program loop over several tiles, as on a GPU."""


@dataclass(frozen=True)
class Variant:
    """One specialisation of a kernel: unit-stride dims, planned depths, copy mechanism, device."""
    source: str
    path: str
    fn: Any
    plan: PipelinePlan
    kernel_name: str
    num_warps: int
    num_stages: int
    sizes: tuple[tuple[str, Any], ...]
    descriptors: tuple[Descriptor, ...]
    m_box: tuple[tuple[str, str], ...] = ()  # (M axis, box extent) when the M tile is a box (TileIndices.box)
    dependent_launch: bool = False           # Kernel.dependent_launch: launched with launch_pdl

    def options(self) -> dict[str, Any]:
        """Triton's launch options for this variant."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages} | (
            {"launch_pdl": True} if self.dependent_launch else {})


@dataclass(frozen=True)
class Launch:
    """One bound kernel call: ``launch()`` only enqueues it (what timing loops and CUDA graphs see);
    ``launch.compile()`` (CUDA only) compiles it for exactly these arguments without running it, so
    benchmark workers can fill Triton's cache for another process's calls."""
    jit: Any
    run: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    n_tensors: int  # args[:n_tensors] are the tensors (inputs, then the output)
    device: Any
    # args[n_tensors:n_tensors + len(descriptors)] are the TMA descriptors, given as (tensor index, dims,
    # block): ``runtime.tma_descriptor(args[index], dims, block)``
    descriptors: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] = ()
    then: Launch | None = None  # a wave tail's second launch, on the same tensors, enqueued right after this one
    # Split-K: makes a workspace and zeroed arrival counters like this launch's own, which follow the
    # descriptors (args[n_tensors + len(descriptors):][:2], ``_split_buffers``); None without split-K.
    # ``prebind`` gives each further stream a pair of its own from it (``per_stream``).
    split_buffers: Callable[[], list[Any]] | None = None

    def __call__(self) -> None:
        if self.descriptors and self.device.type == "cuda":
            current_context(self.device.index)  # Triton encodes the descriptors before its launch sets one
        self.run(*self.args, **self.kwargs)
        if self.then is not None:
            self.then()

    def compile(self) -> None:
        self.jit.warmup(*self.args, **self.kwargs, grid=self.grid)
        if self.then is not None:
            self.then.compile()

    def prebind(self) -> Callable[..., None]:
        """This launch for any tensors of the same dtypes, shapes, strides and alignment: ``f(*tensors)``
        runs the same specialisation without binding anything again (``runtime.prebind``).

        A split-K launch on CUDA runs with buffers per stream (``per_stream``): a call site replays its
        prebound launch on whatever stream is current, and the same call site on two streams at once
        would otherwise mix its arrivals in one set of counters (docs/decisions.md#d43). Each launch of
        a ``then`` chain does so for its own buffers."""
        first = self._prebind_one()
        if self.then is None:
            return first
        second = self.then.prebind()

        def both(*tensors: Any) -> None:
            first(*tensors)
            second(*tensors)
        return both

    def _prebind_one(self) -> Callable[..., None]:
        """``prebind`` of this launch alone (not its ``then``)."""
        run = prebind(self.run, self.jit, self.device, self.grid, self.args, self.kwargs, self.n_tensors,
                      self.descriptors)
        if self.split_buffers is None or self.device.type != "cuda":
            return run  # the interpreter runs one launch at a time: there are no concurrent streams
        return self.per_stream(run, *_cuda_probes(self.device))

    def per_stream(self, first: Callable[..., None], stream: Callable[[], int], capturing: Callable[[], bool],
                   capture: Callable[[int], int | None], limit: int | None = None) -> Callable[..., None]:
        """``first`` (this split-K launch prebound) with buffers per stream: ``per_stream`` with this launch
        rebound to new buffers (``split_buffers``) as each further stream's launch. The probes of the
        current stream and its capture are arguments so that tests can stand in for CUDA's."""
        if self.split_buffers is None:
            raise ValueError("Launch.per_stream: split_buffers=None: only a split-K launch has buffers to give "
                             "each stream")
        return per_stream(first, self._rebound, stream, capturing, capture,
                          STREAM_LAUNCHES if limit is None else limit)

    def _rebound(self) -> Callable[..., None]:
        """This launch alone, prebound with a workspace and zeroed counters of its own, made now: on the
        stream current on its device, so that the caching allocator ties them to that stream (and in a
        capture, to the graph's pool, the counters' zeroing to the graph)."""
        assert self.split_buffers is not None
        at = self.n_tensors + len(self.descriptors)
        args = self.args[:at] + tuple(self.split_buffers()) + self.args[at + 2:]
        return replace(self, args=args, then=None, split_buffers=None)._prebind_one()


def _cuda_probes(device: Any) -> tuple[Callable[[], int], Callable[[], bool], Callable[[int], int | None]]:
    """``per_stream``'s probes on CUDA ``device``: its current stream's handle (the getter runtime.prebind's
    launch runs on), whether that stream is capturing a graph, and a stream's capture id."""
    import torch
    from triton.runtime.driver import driver
    index = device.index if device.index is not None else torch.cuda.current_device()
    active: Any = driver.active  # the CUDA driver, whose stream getter the base class does not declare
    return functools.partial(active.get_current_stream, index), functools.partial(stream_capturing, index), capture_id


STREAM_LAUNCHES = 16
"""Streams whose split-K buffers one prebound launch keeps (``per_stream``); past them the oldest stream's
are dropped (never the original's). A few streams is the common case; the tuner's timer takes a new
``torch.cuda.Stream()`` per config, from torch's pool of 32 per priority."""


def per_stream(first: Callable[..., None], rebound: Callable[[], Callable[..., None]], stream: Callable[[], int],
               capturing: Callable[[], bool], capture: Callable[[int], int | None],
               limit: int = STREAM_LAUNCHES) -> Callable[..., None]:
    """A prebound split-K launch that runs with split-K buffers of each stream's own.

    A call site replays one prebound launch on whatever stream is current; its workspace and arrival
    counters are bound with it, so the call site on two streams at once would mix the arrivals of both in
    one set of counters, and a tile's sum would be taken early or never (docs/decisions.md#d43). Here
    each stream gets a launch of its own: ``first`` (the launch with its original buffers) on the stream
    current now, ``rebound()`` (the launch with new buffers, made on the calling stream) on the first call
    from another stream, kept for that stream's later calls. ``stream()`` is the current stream's handle.

    Whether a graph is being captured (``capturing()``) is asked only when a stream has no launch yet, so
    a repeat costs one stream query and a dict lookup. A capture's buffers are allocated inside it: the
    counters' zeroing becomes a memset node of the graph, so each replay starts from zeros. They are never
    used outside the capture (their contents there are whatever the graph left, not zeros), but the
    launch holds them as long as it lives, since the graph holds their addresses and its private pool
    must not hand that memory to another allocation. Calls within one capture share its buffers (one
    capture per stream, told apart by ``capture(stream)``, the driver's capture id; None when unknown,
    and then each call gets buffers of its own): the timer captures hundreds of calls of one launch.
    A capture on a stream that already has a launch (eager calls ran there first) replays that
    stream's launch and buffers, as before: the check is not on a hit's path.

    At most ``limit`` streams keep a launch; past that, the stream that got one earliest loses it (its
    buffers, allocated on it, are freed stream-ordered), except the original stream, whose buffers
    belong to the bound launch itself.

    The result carries no ``native_state``: ``fastpath._plain_run`` then calls it from Python instead of
    taking its C path (``fastpath_native.c``), which would launch ``first`` on any stream without this
    stream check.
    """
    if limit < 2:
        raise ValueError(f"per_stream: limit={limit}: must be at least 2 (the original stream and one more)")
    home = stream()
    launches: dict[int, Callable[..., None]] = {home: first}
    captured: dict[int, tuple[int, Callable[..., None]]] = {}  # stream -> (capture id, its launch)
    held: list[Callable[..., None]] = []  # every launch made in a capture: a graph may replay its buffers
    # Misses change the dicts, and a call site runs on several threads (autograd's backward has its own):
    # one miss at a time, off the hit's path.
    lock = threading.Lock()

    def miss(s: int) -> Callable[..., None]:
        with lock:
            run = launches.get(s)  # another thread's miss on the same stream may have made it
            return run if run is not None else _miss(s)

    def _miss(s: int) -> Callable[..., None]:
        if capturing():
            cid = capture(s)
            last = captured.get(s)
            if last is not None and cid is not None and last[0] == cid:
                return last[1]
            run = rebound()
            held.append(run)
            if cid is not None:
                captured[s] = (cid, run)
            return run
        run = rebound()
        if len(launches) >= limit:
            del launches[next(k for k in launches if k != home)]  # dicts keep insertion order: the oldest
        launches[s] = run
        return run

    def launch(*tensors: Any) -> None:
        s = stream()
        run = launches.get(s)
        if run is None:
            run = miss(s)
        run(*tensors)
    return launch


@dataclass(frozen=True)
class _Key:
    unit_stride: tuple[tuple[str, int | None], ...]
    trip_count: int | None
    tma_ok: bool
    fp32_precision: str
    static: tuple[tuple[str, int], ...] = ()
    multiple_of: tuple[tuple[str, int], ...] = ()


class Runs:
    """A kernel that ``bind``s its tensors to a launch (``Launch``; None for an empty output) and its output:
    calling it binds and launches."""

    def bind(self, *tensors: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def __call__(self, *tensors: Any) -> Any:
        launch, out = self.bind(*tensors)
        if launch is not None:
            launch()
        return out


class CompiledKernel(Runs):
    """A built kernel: call it with torch tensors (inputs, then optionally the output).

    One generated kernel serves every shape (sizes are runtime arguments); variants are specialised
    lazily per unit-stride layout, per clamped pipeline depth and per copy mechanism.
    """

    def __init__(self, schedule: Schedule, args: Sequence[te.Tensor], *, gpu: Any = None, strict: bool | None = None,
                 name: str | None = None, static: Sequence[str] = ()) -> None:
        if not args or args[-1] is not schedule.out:
            raise ScheduleError(f"build(args=...): the last argument must be the output {schedule.out.name!r}")
        self.schedule = schedule
        self.inputs = tuple(args[:-1])
        self.out = schedule.out
        self.config: KernelConfig = schedule.config()
        # The name becomes the kernel's def line and its cache file's name: an identifier, nothing else.
        self.name = te.check_name(name, "build(name=...): kernel") if name is not None else None
        self.strict = settings.strict() if strict is None else strict
        self._gpu = gpu
        known = {v for t in self.inputs for d in t.shape for v in te.free_vars(d)}
        for v in static:
            if v not in known:
                raise ScheduleError(f"build(static={tuple(static)}): {v!r} is not a size variable of the inputs "
                                    f"({sorted(known)})")
        self.static = tuple(static)
        self._variants: dict[tuple[_Key, str, bool, str], Variant] = {}
        self._slots: dict[tuple[str, int | None], int] = {}  # persistent kernels: resident programs per device
        # a wave-tail config's second kernels, built at their first split launch: per K split of its tiles
        # (1: TAIL_CONFIG's tiles, the library's tail)
        self._tails: dict[int, CompiledKernel] = {}
        self.last: Variant | None = None
        # Lower once with the default layout now, so schedule errors surface at build time.
        # Static sizes are bound at call time, so such kernels are specialised on their first call.
        self._default = None if self.static else self._variant(self._default_key(), "cpu")

    # ------------------------------------------------------------------ compile
    def _spec(self, device_type: str) -> Any:
        from .model.hardware import detect, get_spec
        if self._gpu is not None:
            return get_spec(self._gpu)
        return detect() if device_type == "cuda" else None

    def _default_key(self) -> _Key:
        us = tuple((t.name, t.ndim - 1 if t.ndim else None) for t in list(self.inputs) + [self.out])
        return _Key(us, None, True, settings.fp32_precision())

    def _variant(self, key: _Key, device_type: str, role: str = "") -> Variant:
        wanted = device_type == "cuda" and settings.dependent_launch()
        cached = self._variants.get((key, device_type, wanted, role))
        if cached is not None:
            return cached
        spec = self._spec(device_type)
        # lower: tensor expression + schedule -> loop nest (operands, epilogue, chunk/sub-tile loops)
        k = lower(self.schedule, self.inputs, dict(key.unit_stride), key.fp32_precision, dict(key.static),
                  dict(key.multiple_of))
        k = k.replace(name=self.name or k.name, interpreter=device_type == "cpu")
        # analysis: which staged buffers can be pipelined (ALCOP's rules 1 and 2), with reasons
        cands = find_pipeline_candidates(k)
        # plan: depths per level (rule 3, trip-count and shared-memory clamps) and copy mechanism
        plan = plan_pipeline(k, cands, async_copy=self.config.async_copy if key.tma_ok else "pointer",
                             trip_count=key.trip_count, smem_limit=spec.smem_per_block if spec else None,
                             strict=self.strict)
        if self.config.async_copy == "tma" and not key.tma_ok:
            plan = PipelinePlan(plan.smem_stages, plan.reg_stages, plan.async_copy, plan.candidates,
                                plan.notes + ("TMA requested but a tensor's address or strides are not 16-byte "
                                              "aligned; copied with pointers",))
        # rewrite: async-copy mechanism, register prefetch, shared-memory num_stages
        k = apply_pipeline(k, plan)
        # launch: on Hopper, programs start during the previous kernel's tail and wait for it before memory
        if wanted and spec is not None and spec.cc >= DEPENDENT_LAUNCH_CC:
            k = k.replace(dependent_launch=True, passes=k.passes + ("DependentLaunch(gdc_wait first)",))
        # launch: a wave tail's head or tail covers a range of row tiles given at launch
        if role:
            k = k.replace(wave_role=role, passes=k.passes + (f"WaveTail({role})",))
        # codegen: loop nest -> Triton source, checked by compile()
        src = codegen.generate(k, self._header(k, plan, spec))
        fn, path = load_kernel(src, k.name)
        for n in plan.notes:
            if settings.debug_level() >= 1:
                log.warning("alcop %s: %s", k.name, n)
        ti = next((n for n, _ in find(k.body, lambda x: isinstance(x, TileIndices) and x.dim == "m")), None)
        box = tuple(zip(k.axes["m"], ti.box)) if isinstance(ti, TileIndices) and ti.box else ()
        v = Variant(src, str(path), fn, plan, k.name, k.num_warps, k.num_stages, k.sizes, k.descriptors, box,
                    k.dependent_launch)
        self._variants[(key, device_type, wanted, role)] = v
        return v

    def _header(self, k: Any, plan: PipelinePlan, spec: Any) -> str:
        import triton
        red = k.reduction
        shapes = ", ".join(f"{t.name}({', '.join(map(repr, t.shape))}) {t.dtype}" for t in k.inputs)
        unit = ", ".join(f"{t}: dim {d}" if d is not None else f"{t}: none" for t, d in k.unit_stride.items())
        steps, notes = self.schedule.canonical_steps()
        lines = [
            f"alcop_triton generated kernel {k.name}",
            "",
            f"op:        {red.name}[{', '.join(a.name for a in red.op.axes)}] = {red.op.body!r}",
            f"output:    {k.out.name}({', '.join(map(repr, k.out.shape))}) {k.out.dtype} = {_epilogue(k)!r}",
            f"inputs:    {shapes}",
            f"sizes:     runtime {', '.join(n for n, _ in k.sizes)}; unit strides {unit}",
            f"axes:      batch {k.axes['b']}, rows (M) {k.axes['m']}, columns (N) {k.axes['n']}, reduction (K) {k.axes['k']}",
            f"config:    {self.config}  ({', '.join(f'{a}={b}' for a, b in self.config.to_dict().items())})",
            f"target:    {spec.name if spec else 'any (no GPU given: no shared-memory clamp)'}",
            "schedule:  " + "; ".join(_step_text(s) for s in steps),
            *(f"           {n}" for n in notes),
            "passes:    lower; find_pipeline_candidates; plan_pipeline; " + "; ".join(k.passes),
            "pipeline:",
            *("  " + ln for ln in explain(plan).splitlines()),
            f"versions:  alcop_triton {__version__}, triton {triton.__version__}",
        ]
        return "\n".join(lines)

    # ------------------------------------------------------------------ call
    @property
    def source(self) -> str:
        """Triton source of the most recently launched variant (the default layout before any call)."""
        return self._shown().source

    def explain(self) -> str:
        """Each staged buffer: level, stages, loop, and why it is or is not pipelined."""
        return explain(self._shown().plan)

    def _shown(self) -> Variant:
        v = self.last or self._default
        if v is None:
            raise RuntimeError(f"{self.out.name} kernel: sizes {self.static} are compiled in when it is first called; "
                               "call it once before reading its source or plan")
        return v

    def label(self) -> str:
        """How errors name this kernel."""
        return f"kernel {self.out.name!r} ({self.config})"

    def bind(self, *tensors: Any) -> tuple[Any, Any]:
        """Check and specialise once; returns (launch, out) where ``launch()`` only enqueues the kernel.

        The tuner and benchmarks time ``launch`` so argument checking stays out of the measurement;
        it is also what a CUDA graph captures (no compilation can happen inside it).
        """
        return self._bind(tensors)

    def _bind(self, tensors: Sequence[Any], role: str = "", tile_lo: int = 0) -> tuple[Any, Any]:
        """``bind``; ``role`` "tail" binds this kernel as a wave tail's second launch, over the row tiles
        from ``tile_lo`` on (``tensors`` then include the output)."""
        import torch
        n_in = len(self.inputs)
        if len(tensors) not in (n_in, n_in + 1):
            raise TypeError(f"{self.out.name} kernel takes {n_in} inputs "
                            f"({', '.join(t.name for t in self.inputs)}) and optionally the output; got {len(tensors)} tensors")
        env: dict[str, int] = {}
        for t, x in zip(self.inputs, tensors):
            _read_sizes(t, x, env)
        for t, x in zip(self.inputs, tensors):
            _check_derived(t, x, env)
        env.update({n: int(te.evaluate(e, env)) for n, e in self._kernel().sizes})
        out_shape = tuple(int(te.evaluate(d, env)) for d in self.out.shape)
        dev = tensors[0].device
        for t, x in zip(self.inputs, tensors):
            if x.device != dev:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found {dev} and {x.device} "
                                   f"(argument {t.name!r})")
        if len(tensors) == n_in:
            out = torch.empty(out_shape, dtype=getattr(torch, self.out.dtype), device=dev)
        else:
            out = tensors[-1]
            _read_sizes(self.out, out, dict(env))
            _check_derived(self.out, out, env)
            if tuple(out.shape) != out_shape:
                raise ValueError(f"argument {self.out.name!r}: shape {tuple(out.shape)}, expected {out_shape}")
            if out.device != dev:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found {dev} and {out.device} "
                                   f"(argument {self.out.name!r})")
        if out.numel() == 0:
            return None, out
        all_t = list(self.inputs) + [self.out]
        all_x = list(tensors[:n_in]) + [out]
        unit = tuple((t.name, _unit_dim(x)) for t, x in zip(all_t, all_x))
        bk = self.config.block_k
        k_total = math.prod(env[a] if a in env else int(te.evaluate(self._extent(a), env)) for a in self._k_axes())
        c = self._constexprs()
        tot = self._totals(env)
        tiles = -(-tot["m"] // c["BLOCK_M"]) * -(-tot["n"] // c["BLOCK_N"])
        split = self.config.split_k
        trips = -(-(-(-k_total // bk)) // split)  # chunks of one program's slice of the reduction
        if self.config.persistent:  # the flattened loop runs every chunk of each of a program's tiles
            trips *= -(-tiles * tot["b"] // min(tiles * tot["b"], _sm_count(dev)))
        # Only a trip count below the requested depth changes the plan (it clamps): one variant serves
        # every longer reduction, so new shapes do not re-run lowering and codegen.
        trips = min(trips, max(self.config.smem_stages, self.config.reg_stages))
        scalars: list[tuple[str, int]] = [(n, env[n]) for n, _ in self._kernel().sizes]
        for t, x in zip(all_t, all_x):
            u = dict(unit)[t.name]
            # A dim of one element is only ever indexed at 0, so its stride is whatever torch left there (a 1x1
            # weight made channels-last on the GPU has stride 1 there, on the CPU C): passed as a multiple of 16,
            # the address math keeps its divisibility and the loads stay vectorised (a 1x1 stride-2 conv ran
            # several times slower with a weight whose unit dims had stride 1: docs/decisions.md#d10).
            scalars += [(f"stride_{t.name}_{d}", x.stride(d) if x.shape[d] != 1 else SIZE1_STRIDE)
                        for d in range(t.ndim) if d != u]
        key = _Key(unit, trips, tma_aligned(all_x), settings.fp32_precision(), tuple((n, env[n]) for n in self.static),
                   _multiple_of(scalars, 16 // min(x.element_size() for x in all_x)))
        v = self._variant(key, dev.type)
        self.last = v
        if v.m_box:  # the M tile is a box of output positions: count boxes, not runs of BLOCK_M rows
            tiles = math.prod(-(-int(te.evaluate(self._extent(a), env)) // (1 if b == "1" else c[b]))
                              for a, b in v.m_box) * -(-tot["n"] // c["BLOCK_N"])
        names = [t.name for t in all_t]
        descs = tuple((names.index(d.tensor), d.dims, tuple(1 if b == "1" else c[b] for b in d.block))
                      for d in v.descriptors)
        args: list[Any] = list(all_x) + [tma_descriptor(all_x[i], dims, block) for i, dims, block in descs]
        # The launch keeps how its split-K buffers were made, so that a prebound launch can make more (one
        # pair per stream: Launch.prebind).
        buffers = functools.partial(_split_buffers, split, tiles * tot["b"], c, dev) if split > 1 else None
        args += buffers() if buffers is not None else []
        args += [value for _, value in scalars]
        if role == "tail":
            tiles_m = -(-tot["m"] // c["BLOCK_M"])
            v = self._variant(key, dev.type, role)
            rows = ((tiles_m - tile_lo) * -(-tot["n"] // c["BLOCK_N"]), 1) + ((split,) if split > 1 else ())
            return Launch(v.fn, for_device(v.fn, dev.type)[rows], rows, tuple(args + [tile_lo, tiles_m]),
                          c | v.options(), len(all_x), dev, descs, split_buffers=buffers), out
        if self.config.wave_tail and tot["b"] == 1 and not v.m_box:
            head = self._head(key, dev, args, c, tot, all_x, descs, buffers, -(-k_total // bk))
            if head is not None:
                return head, out
        if self.config.persistent:
            grid: tuple[int, ...] = (min(tiles * tot["b"], self._resident(v, dev, args, c)),)
        else:
            grid = (tiles, tot["b"]) + ((split,) if split > 1 else ())
            if grid[1] > 65535:
                raise ValueError(f"{self.out.name}: {grid[1]} batch programs exceed CUDA's grid limit of 65535")
        return Launch(v.fn, for_device(v.fn, dev.type)[grid], grid, tuple(args), c | v.options(),
                      len(all_x), dev, descs, split_buffers=buffers), out

    def _head(self, key: _Key, dev: Any, args: list[Any], c: dict[str, int], tot: dict[str, int],
              tensors: list[Any], descs: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...],
              buffers: Callable[[], list[Any]] | None, k_chunks: int) -> Launch | None:
        """A wave-tail config's launches: the rows of tiles within the most whole waves of one tile per SM,
        then the rest by the tail's kernel (``Schedule.wave_tail``): ``TAIL_CONFIG``'s, or with
        ``tail_split`` this config's tile split along K (``records.tail_split_factor`` of the tail's tiles,
        ``k_chunks`` chunks and the SMs). None where the tiles fill whole waves exactly or less than one (one
        launch then: nothing is left idle, or there is no wave to overlap; ``records.wave_tail_rows``). The
        head reads ``args`` as bound, split-K buffers included, and ``buffers`` makes more of them
        (``Launch.split_buffers``); the tail binds buffers of its own."""
        tiles_m, tiles_n = -(-tot["m"] // c["BLOCK_M"]), -(-tot["n"] // c["BLOCK_N"])
        sms = _sm_count(dev)
        rows = wave_tail_rows(tiles_m, tiles_n, sms)
        if rows == 0:
            return None
        split = tail_split_factor((tiles_m - rows) * tiles_n, k_chunks, sms, self.config.smem_stages) \
            if self.config.tail_split else 1
        tail_kernel = self._tail_kernel(split)
        tail, _ = tail_kernel._bind(tensors, "tail", rows * c["BLOCK_M"] // tail_kernel.config.block_m)
        v = self._variant(key, dev.type, "head")
        grid = (rows * tiles_n, 1)
        return Launch(v.fn, for_device(v.fn, dev.type)[grid], grid, tuple(args + [0, rows]), c | v.options(),
                      len(tensors), dev, descs, then=tail, split_buffers=buffers)

    def _tail_kernel(self, split: int) -> "CompiledKernel":
        """The wave tail's kernel: ``TAIL_CONFIG``'s (``split`` 1), or this config's tile reduced by ``split``
        programs per tile; one kernel per factor, built at its first use."""
        kern = self._tails.get(split)
        if kern is None:
            cfg = None if split == 1 else self.config.replace(wave_tail=False, tail_split=False, split_k=split)
            schedule = self.schedule.tail_schedule() if cfg is None else self.schedule.tail_schedule(cfg)
            kern = self._tails[split] = CompiledKernel(schedule, list(self.inputs) + [self.out], gpu=self._gpu,
                                                       strict=self.strict, name=self.name, static=self.static)
        return kern

    def _resident(self, v: Variant, dev: Any, args: list[Any], c: dict[str, int]) -> int:
        """Programs of a persistent kernel: as many as the GPU holds at once, from the compiled kernel's
        registers and shared memory (compiling it here, once, instead of at its first launch)."""
        if dev.type != "cuda":
            return INTERPRETER_PROGRAMS
        key = (v.path, dev.index)
        if key not in self._slots:
            compiled = v.fn.warmup(*args, **c, **v.options(), grid=(1,))
            self._slots[key] = resident_programs(compiled, v.num_warps, dev)
        return self._slots[key]

    # sizes/extents of the lowered kernel (the same for every variant)
    def _kernel(self) -> Any:
        if not hasattr(self, "_lowered"):
            # Sizes, extents and tiles only: static sizes get a stand-in value (variants use the real ones).
            self._lowered = lower(self.schedule, self.inputs, static={v: 1 for v in self.static})
        return self._lowered

    def _k_axes(self) -> tuple[str, ...]:
        return self._kernel().axes["k"]

    def _extent(self, axis: str) -> te.Expr:
        return self._kernel().extents[axis]

    def _constexprs(self) -> dict[str, int]:
        return self._kernel().constexprs

    def _totals(self, env: dict[str, int]) -> dict[str, int]:
        k = self._kernel()
        return {d: math.prod(int(te.evaluate(k.extents[a], env)) for a in k.axes[d]) for d in ("b", "m", "n")}


def _epilogue(k: Any) -> te.Expr:
    """The output's expression in terms of the reduction (the Store node, in a tile loop or not)."""
    store = find(k.body, lambda n: isinstance(n, Store))[0][0]
    assert isinstance(store, Store)
    return store.expr


def _step_text(s: Any) -> str:
    name = type(s).__name__
    # a flag reads as its name where set (WaveTail(split)), and not at all where not (WaveTail())
    fields = ", ".join(k if v is True else f"{v}" for k, v in s.__dict__.items() if v is not None and v is not False)
    return f"{name}({fields})"


def _sm_count(dev: Any) -> int:
    """Streaming multiprocessors of a CUDA device; the interpreter's persistent programs elsewhere."""
    if dev.type != "cuda":
        return INTERPRETER_PROGRAMS
    import torch
    return int(torch.cuda.get_device_properties(dev).multi_processor_count)


def _unit_dim(x: Any) -> int | None:
    """The dim to specialise to stride 1: the innermost with stride 1 and more than one element."""
    dims = [d for d in range(x.dim()) if x.stride(d) == 1 and x.shape[d] > 1]
    return dims[-1] if dims else None


def _split_buffers(split: int, tiles: int, c: dict[str, int], dev: Any) -> list[Any]:
    """Split-K's float32 workspace (one partial tile per slice and tile) and its arrival counters
    (``codegen.split_locks_needed``, zeros), both the launch's own: made where the launch is bound and kept
    with it, so its repeats reuse them (the kernel's last program of each tile or group resets its
    counter, so replays on one stream, graph replays included, start from zeros). Its prebound launch
    makes a pair per further stream it runs on (``per_stream``), calling this again (``Launch.split_buffers``).

    Never shared between launches: counters shared by two launches that run at the same time (one per
    stream, as the tuner's timer ran them: its first calls on the current stream, its graphs on a stream
    of their own) mix their arrivals, and a tile's sum is taken early or never (docs/decisions.md#d43)."""
    import torch
    elems = split * tiles * c["BLOCK_M"] * c["BLOCK_N"]
    if elems >= 2 ** 31:
        raise ValueError(f"split_k={split}: a workspace of {elems} float32 elements exceeds 32-bit indexing; "
                         "use a smaller split (split-K is meant for few output tiles)")
    locks = torch.zeros(codegen.split_locks_needed(split, tiles), dtype=torch.int32, device=dev)
    return [torch.empty(elems, dtype=torch.float32, device=dev), locks]


SIZE1_STRIDE = 16
"""The stride passed for a dim of one element (any value would index it right; a multiple of 16 keeps
Triton's divisibility specialisation of the address math)."""


def _multiple_of(scalars: list[tuple[str, int]], vec: int) -> tuple[tuple[str, int], ...]:
    """Sizes and strides that are multiples of ``vec`` (16 bytes of the narrowest dtype) but not of 16.

    Triton specialises integer arguments divisible by 16 on its own; the rest are stated in the kernel.
    One bucket per value (aligned or not), so a new shape adds at most one variant per pattern.
    """
    return tuple((n, vec) for n, x in scalars if vec > 1 and x % 16 and x % vec == 0)


def tma_aligned(xs: list[Any]) -> bool:
    """TMA's rules: 16-byte aligned base addresses and 16-byte multiple strides (except the unit one),
    no broadcast (stride 0) dims and no empty ones (an empty reduction). A dim of one element has no
    stride to speak of (its coordinate is always 0), so ``runtime.tma_descriptor`` gives it a legal one."""
    for x in xs:
        e = x.element_size()
        if x.numel() == 0 or x.data_ptr() % 16 or any(x.stride(d) * e % 16 or x.stride(d) == 0 for d in range(x.dim())
                                    if x.stride(d) != 1 and x.shape[d] > 1):
            return False
    return True


def _read_sizes(t: te.Tensor, x: Any, env: dict[str, int]) -> None:
    """Check a tensor against its placeholder and bind the size variables of its shape."""
    import torch
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"argument {t.name!r}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() != t.ndim:
        raise ValueError(f"argument {t.name!r}: expected a {t.ndim}-d tensor {tuple(t.shape)}, got shape {tuple(x.shape)}")
    if dtype_name(x.dtype) != t.dtype:
        raise TypeError(f"argument {t.name!r}: expected dtype {t.dtype}, got {dtype_name(x.dtype)}")
    for d, (e, n) in enumerate(zip(t.shape, x.shape)):
        if isinstance(e, te.Var):
            if env.setdefault(e.name, int(n)) != int(n):
                raise ValueError(f"argument {t.name!r}: dim {d} is {n} but {e.name} = {env[e.name]} from an earlier "
                                 "argument; the shapes do not agree")


def _check_derived(t: te.Tensor, x: Any, env: dict[str, int]) -> None:
    """Dims given by expressions (``C // G``), checked once every plain size variable is bound."""
    for d, (e, n) in enumerate(zip(t.shape, x.shape)):
        if not isinstance(e, te.Var) and int(te.evaluate(e, env)) != int(n):
            raise ValueError(f"argument {t.name!r}: dim {d} is {n}, expected {e!r} = {te.evaluate(e, env)}")


def build(schedule: Schedule, args: Sequence[te.Tensor], *, gpu: Any = None, strict: bool | None = None,
          name: str | None = None, static: Sequence[str] = ()) -> CompiledKernel:
    """Compile ``schedule`` into a callable kernel; ``args`` are the inputs then the output, as in TVM.

    Args:
        schedule: from ``te.create_schedule(out)`` (or ``Schedule.from_config``).
        args: the placeholder tensors in call order, then the output tensor.
        gpu: target GPU name for shared-memory clamping ("H100"); default: the current CUDA device.
        strict: raise instead of clamping pipeline depths (default ``ALCOP_STRICT``).
        name: kernel function name (default ``alcop_<output>``).
        static: size variables compiled in as constants, one variant per value (e.g. a conv's
            channels and window, so its im2col index math is by constants and loads vectorise).
    """
    return CompiledKernel(schedule, args, gpu=gpu, strict=strict, name=name, static=static)
