"""One benchmark run: alcop as dispatched against cuBLAS/cuDNN, Triton's tutorial matmul and Inductor.

    python benchmarks/suite.py --out OUT [--sets alcop,heldout,models,conv2d] [--inductor-sets alcop,heldout] [--inductor-pretune N]
                               [--budget-s 480] [--quick] [--dry-run]

For every workload of the named sets it times each implementation both ways users see it, with the
timers of ``benchmarks/timing.py``:

* ``eager``: one call at a time, timed with CUDA events after an L2 flush. The host is
  synchronised after the flush, so the start event fires at once and the elapsed time includes
  the host work of the call (argument checks, dispatch, launch) as well as the kernel. Median of
  ``--reps`` calls of each implementation, the implementations taking turns call by call: the
  host's latency after a synchronisation drifts by tens of µs over a run, and a block of calls of
  one implementation would be timed in another host state than its baseline's.
* ``graph``: the same call captured in a CUDA graph (``triton.testing.do_bench_cudagraph``,
  median): the kernel alone, launch cost hidden. No L2 flush (the graph replays back to back).

Implementations: ``torch`` (cuBLAS / cuDNN), ``alcop`` (the drop-ins ``alcop_triton.matmul``, ``bmm``,
``conv2d``, ``conv3d`` with a fresh tuning database, so configs come from the shipped table, the
nearest tuned shape or the model; on the ``conv2d_bwd`` and ``conv3d_bwd`` sets, the input and weight
gradient kernels a backward pass through alcop's convolution runs, against cuDNN's
``convolution_backward`` as torch),
``triton_tutorial`` (``benchmarks/tutorial_matmul.py``: Triton's
tutorial kernel with its autotune configs; GEMMs only), ``inductor`` (``torch.compile`` in
``max-autotune-no-cudagraphs`` mode with Triton GEMM templates only, default search space; sets
named in ``--inductor-sets``; compile time recorded; how the compiles are scheduled (Inductor's
defaults; optionally a pretuning graph per ``--inductor-pretune`` workloads) is described at
``inductor_setup`` and recorded in each row; after one compile exceeds ``--inductor-cap-s`` the rest
of that set runs without it).

Every output is checked against a float32 torch reference on the same fp16 inputs (max abs error
over max abs reference ≤ 1e-2); a failed check keeps the time but marks the row. Each thing is timed
in two passes; one that moves by more than 10% between them is timed a third time, and all passes
are recorded (the reported time is their median, the row marked unstable).

Resumable: each workload's rows are appended to ``OUT/rows.jsonl`` as soon as they are measured, and a
re-run with the same ``OUT`` skips the workloads already there (same device and versions, else it
refuses). ``--budget-s`` stops before the next workload once the elapsed time plus the slowest
workload so far would pass it. ``OUT/report.md`` and ``OUT/report.json`` are rewritten at the end of
every call from all rows. ``--dry-run`` runs the same code on CPU (Triton's interpreter, wall-clock
timers, the tiny ``smoke`` set) to test the pipeline, not to measure.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import itertools
import json
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # alcop_triton from this checkout when run as a script
import timing  # noqa: E402  (benchmarks/timing.py, beside this script)
WORKLOADS = Path(__file__).resolve().parent / "workloads"
ALCOP_SUITE = ROOT / "tests" / "data" / "alcop_suite.json"

IMPLS = ("torch", "alcop", "triton_tutorial", "inductor")
TIMERS = ("eager", "graph")
TIMER_TEXT = {"eager": timing.EAGER, "graph": timing.GRAPH, "wall": timing.WALL}
UNSTABLE = 0.10
TOLERANCE = 1e-2
SETS = ("alcop", "heldout", "models", "decode", "conv2d", "conv2d_bwd", "conv3d", "conv3d_bwd", "resnet50",
        "resnet50_bwd", "smoke")


@dataclass(frozen=True)
class Case:
    """One workload of a set: op, shape ([M, N, K], [B, M, N, K] or the conv tuple), layout, reason.
    ``backward``: a convolution's input and weight gradients from an output gradient, not its forward."""

    set: str
    op: str
    shape: tuple[int, ...]
    layout: str
    reason: str
    dtype: str = "float16"
    backward: bool = False

    @property
    def id(self) -> str:
        return f"{self.op} {'x'.join(map(str, self.shape))} {self.layout}" + (" backward" if self.backward else "")

    @property
    def gemm(self) -> bool:
        return self.op in ("matmul", "bmm")

    def flops(self) -> float:
        if self.op == "matmul":
            m, n, k = self.shape
            return 2.0 * m * n * k
        if self.op == "bmm":
            b, m, n, k = self.shape
            return 2.0 * b * m * n * k
        nd = 2 if self.op == "conv2d" else 3
        n_, *sp, ci, co = self.shape[:nd + 3]
        win, stride, pad = self.shape[nd + 3:2 * nd + 3], self.shape[-2], self.shape[-1]
        out = [(s + 2 * pad - w) // stride + 1 for s, w in zip(sp, win)]
        # the backward computes two products of the forward's size (input and weight gradients)
        return (4.0 if self.backward else 2.0) * n_ * math.prod(out) * co * ci * math.prod(win)


def load_set(name: str) -> list[Case]:
    """The workloads of a named set: the ALCOP suite's (``tests/data/alcop_suite.json``) or a JSON
    file in ``benchmarks/workloads/`` (each workload with its reason)."""
    if name in ("alcop", "conv2d", "conv2d_bwd", "conv3d", "conv3d_bwd"):
        suite = json.loads(ALCOP_SUITE.read_text())
        src = "ALCOP artifact's single-operator suite"
        if name == "alcop":
            return ([Case(name, "matmul", tuple(s), "nt", f"{src}, dense") for s in suite["dense"]["shapes_MNK"]]
                    + [Case(name, "bmm", tuple(s), "nt", f"{src}, bmm") for s in suite["bmm"]["shapes_BMNK"]])
        op = name.removesuffix("_bwd")
        layout = "nhwc" if op == "conv2d" else "ndhwc"
        return [Case(name, op, tuple(s), layout, f"{src}, {op}", backward=name.endswith("_bwd"))
                for s in suite[op]["shapes"]]
    # NAME_bwd: the gradients of NAME's convolutions (a file's set)
    backward = name.endswith("_bwd")
    path = WORKLOADS / f"{name.removesuffix('_bwd')}.json"
    if not path.is_file():
        raise ValueError(f"--sets: unknown set {name!r}; known: {', '.join(SETS)}")
    doc = json.loads(path.read_text())
    return [Case(name, w["op"], tuple(w["shape"]), w["layout"], w["reason"], doc.get("dtype", "float16"), backward)
            for w in doc["workloads"] if not backward or w["op"] in ("conv2d", "conv3d")]


# --- inputs, implementations, checks -------------------------------------------------------------

def make_inputs(case: Case, device: str, seed: int = 0) -> tuple[Any, ...]:
    """fp16 inputs in the case's layout: (a, b) as the product's operands (b a transposed view for
    ``nt``), or (x, w, stride, pad) for a convolution in channels-last memory, plus the output
    gradient for a backward case."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)

    def rand(*shape: int) -> Any:
        return (torch.randn(*shape, generator=g) / math.sqrt(shape[-1])).to(device=device, dtype=torch.float16)

    if case.op == "matmul":
        m, n, k = case.shape
        return (rand(m, k), rand(n, k).t() if case.layout == "nt" else rand(k, n))
    if case.op == "bmm":
        z, m, n, k = case.shape
        return (rand(z, m, k), rand(z, n, k).transpose(1, 2) if case.layout == "nt" else rand(z, k, n))
    nd = 2 if case.op == "conv2d" else 3
    n_, *sp, ci, co = case.shape[:nd + 3]
    win, stride, pad = case.shape[nd + 3:2 * nd + 3], case.shape[-2], case.shape[-1]
    fmt = torch.channels_last if nd == 2 else torch.channels_last_3d
    x = rand(n_, ci, *sp).contiguous(memory_format=fmt)
    w = (rand(co, ci, *win) / math.sqrt(math.prod(win))).contiguous(memory_format=fmt)
    if not case.backward:
        return x, w, stride, pad
    out = [(s + 2 * pad - k) // stride + 1 for s, k in zip(sp, win)]
    return x, w, stride, pad, rand(n_, co, *out).contiguous(memory_format=fmt)


def torch_fn(case: Case) -> Callable[..., Any]:
    import torch
    import torch.nn.functional as F

    if case.op == "matmul":
        return torch.matmul
    if case.op == "bmm":
        return torch.bmm
    nd = 2 if case.op == "conv2d" else 3
    if case.backward:  # cuDNN's input and weight gradients, the op torch's autograd runs for a convolution
        return lambda x, w, stride, pad, dy: tuple(torch.ops.aten.convolution_backward(
            dy, x, w, None, [stride] * nd, [pad] * nd, [1] * nd, False, [0] * nd, 1, [True, True, False])[:2])
    conv = F.conv2d if case.op == "conv2d" else F.conv3d
    return lambda x, w, stride, pad: conv(x, w, None, stride, pad)


def impl_fn(impl: str, case: Case) -> Callable[..., Any] | None:
    """The call an implementation makes on the case's inputs, or None where it does not apply."""
    if impl == "torch":
        return torch_fn(case)
    if impl == "alcop":
        import alcop_triton as at

        if case.gemm:
            return at.matmul if case.op == "matmul" else at.bmm
        if case.backward:  # the gradient kernels a backward pass through alcop's convolution runs
            from alcop_triton.ops.conv import conv_grads

            nd = 2 if case.op == "conv2d" else 3
            return lambda x, w, stride, pad, dy: conv_grads(x, w, dy, (stride,) * nd, (pad,) * nd, (1,) * nd, 1)
        conv = at.conv2d if case.op == "conv2d" else at.conv3d
        return lambda x, w, stride, pad: conv(x, w, None, stride, pad)
    if impl == "triton_tutorial":
        if not case.gemm:
            return None
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import tutorial_matmul

        return tutorial_matmul.matmul
    if impl == "inductor":
        return inductor_compile(torch_fn(case))
    raise ValueError(f"unknown implementation {impl!r}; known: {', '.join(IMPLS)}")


# --- Inductor ------------------------------------------------------------------------------------
#
# The search is Inductor's own: max-autotune over its Triton GEMM templates with its default search
# space and no ATen (cuBLAS) choice, no CUDA graphs of its own (the graph timer captures it like
# everything else). What inductor_setup changes is only how the compile work is scheduled:
#
# * Inductor's own compile scheduling is left as it is. Starting its worker-process pool up front
#   and never shutting it down (``warm_pool=True``, measured on the H100:
#   docs/decisions.md#d33) made compiles slower, not faster: 11 s to start the pool, then 24.5 s and 7.0 s for
#   the first two probe shapes against 10.0 s and 2.1 s with the defaults.
# * Dynamo keeps compiled code on the Python code object and, with fullgraph=True, fails after 8
#   recompiles of one code object: every workload gets a code object of its own.
# * Optionally (``--inductor-pretune N``, off by default: not measured faster) one graph holding the next N workloads' products is
#   compiled first. Inductor submits the template compiles of all its GEMMs before benchmarking
#   any, so they fill every worker; the timings land in Inductor's autotune cache (keyed by op,
#   input sizes, strides and dtype and the choice's source), so each workload's own compile then
#   finds every choice's timing there instead of compiling and benchmarking again. The workload's
#   share of that graph's compile time is recorded beside its own first call.
#
# Inductor's caches go to a directory of this run (not the user's), so compile times are a cold
# start and no result of another run is reused.

INDUCTOR_MODE = "max-autotune-no-cudagraphs"
_INDUCTOR: dict[str, Any] = {}
_COMPILED = itertools.count(1)


def inductor_setup(cache_dir: str | None = None, warm_pool: bool = False) -> dict[str, Any]:
    """Configure Inductor once per process; the settings in force, to record with the run."""
    if _INDUCTOR:
        return _INDUCTOR
    if cache_dir is not None:   # read by Inductor (and passed to Triton) at compile time
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    import torch._inductor.config as ic

    ic.max_autotune_gemm_backends = "TRITON"
    ic.max_autotune_conv_backends = "TRITON"
    pool_s = None
    if warm_pool:
        if hasattr(ic, "quiesce_async_compile_pool"):
            ic.quiesce_async_compile_pool = False
        from torch._inductor.async_compile import AsyncCompile

        t0 = time.perf_counter()
        AsyncCompile.warm_pool()
        if hasattr(AsyncCompile, "wait_pool_ready"):
            AsyncCompile.wait_pool_ready()
        pool_s = round(time.perf_counter() - t0, 2)
    _INDUCTOR.update({
        "mode": INDUCTOR_MODE, "gemm_backends": ic.max_autotune_gemm_backends,
        "search_space": getattr(ic, "max_autotune_gemm_search_space", "DEFAULT"),
        "compile_threads": ic.compile_threads, "autotune_in_subproc": ic.autotune_in_subproc,
        "autotune_local_cache": ic.autotune_local_cache,
        "quiesce_async_compile_pool": getattr(ic, "quiesce_async_compile_pool", None),
        "pool_warmed_s": pool_s, "code_object_per_workload": True, "cache_dir": "fresh per run" if cache_dir else "default"})
    return _INDUCTOR


def inductor_compile(fn: Callable[..., Any], backend: str = "inductor") -> Callable[..., Any]:
    """``fn`` under torch.compile (Inductor max-autotune), traced from a code object of its own.
    ``backend="eager"`` traces with Dynamo alone (tests on CPU)."""
    import torch

    if backend == "inductor":
        inductor_setup(warm_pool=False)   # no-op when the run set it up already
    n = next(_COMPILED)

    def product(*args: Any) -> Any:   # a Python function for Dynamo to trace (not a builtin)
        return fn(*args)

    name = f"inductor_product_{n}"
    code = product.__code__.replace(co_name=name)   # a new code object: Dynamo's cache and recompile count are per code object
    fresh = types.FunctionType(code, product.__globals__, name, product.__defaults__, product.__closure__)
    if backend == "inductor":
        return torch.compile(fresh, mode=INDUCTOR_MODE, dynamic=False, fullgraph=True)
    return torch.compile(fresh, backend=backend, dynamic=False, fullgraph=True)


def pretune_inductor(cases: Sequence[Case], device: str, backend: str = "inductor") -> float:
    """Compile (and so autotune) one graph holding the GEMMs of ``cases`` on their inputs; seconds."""
    ops = [torch_fn(c) for c in cases]
    inputs = [x for c in cases for x in make_inputs(c, device)]

    def products(*flat: Any) -> list[Any]:
        out = []
        for i, op in enumerate(ops):
            out.append(op(flat[2 * i], flat[2 * i + 1]))
        return out

    t0 = time.perf_counter()
    inductor_compile(products, backend)(*inputs)
    return time.perf_counter() - t0


def pretune_chunk(case: Case, pending: Sequence[Case], pretuned: Iterable[tuple[str, str]], n: int) -> list[Case]:
    """The workloads a pretuning graph compiled before ``case`` holds: the first ``n`` of its set's
    ``pending`` ones not pretuned yet, if ``case`` is among them; none where it would be alone."""
    done = set(pretuned)
    chunk = [c for c in pending if c.set == case.set and (c.set, c.id) not in done][:n]
    return chunk if case in chunk and len(chunk) > 1 else []


def precompile_count() -> int:
    """How many GEMMs Inductor has precompiled template choices for in this process (a GEMM whose
    choices' timings are all in the autotune cache is not counted)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["select_algorithm_precompile"])


def reference(case: Case, inputs: tuple[Any, ...]) -> Any:
    """The float32 torch result on the same fp16 inputs (TF32 off)."""
    import alcop_triton.settings as cfg

    with cfg.tf32(False):
        if case.gemm:
            return torch_fn(case)(inputs[0].float(), inputs[1].float())
        x, w, stride, pad, *dy = inputs
        return torch_fn(case)(x.float(), w.float(), stride, pad, *(d.float() for d in dy))


def alcop_fallback(call: Callable[[], Any]) -> str | None:
    """Why alcop computed this call with torch, or None: the call is repeated once with
    ``ALCOP_STRICT=1``, under which a fallback raises instead of happening."""
    from alcop_triton.errors import UnsupportedError

    old = os.environ.get("ALCOP_STRICT")
    os.environ["ALCOP_STRICT"] = "1"
    try:
        call()
    except UnsupportedError as exc:
        if "falling back" in str(exc):
            return str(exc).splitlines()[0][:300]
    finally:
        if old is None:
            os.environ.pop("ALCOP_STRICT")
        else:
            os.environ["ALCOP_STRICT"] = old
    return None


def rel_error(out: Any, ref: Any) -> float:
    """max |out - ref| / max |ref| (float32), inf on a shape mismatch or a non-finite output; of
    several outputs (a backward's gradients), the largest."""
    if isinstance(ref, tuple):
        if not isinstance(out, tuple) or len(out) != len(ref):
            return math.inf
        return max(rel_error(o, r) for o, r in zip(out, ref))
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    diff = (out.float() - ref).abs().max().item()
    if not math.isfinite(diff):
        return math.inf
    scale = ref.abs().max().item()
    return diff / scale if scale > 0 else diff


# --- timers --------------------------------------------------------------------------------------

class Timers(Protocol):
    """Both timers, in ms. ``eager`` times the implementations' zero-argument calls together, taking
    turns call by call (one time per name); ``graph`` times one call."""

    names: dict[str, str]   # timer -> how it times (for the report)

    def eager(self, calls: Mapping[str, Callable[[], Any]]) -> dict[str, float]: ...

    def graph(self, fn: Callable[[], Any]) -> float: ...


class CudaTimers:
    """``timing.EAGER`` and ``timing.GRAPH``."""

    def __init__(self, reps: int = 100, graph_rep_ms: int = 100) -> None:
        self.reps, self.graph_rep_ms = reps, graph_rep_ms
        self._flush = timing.l2_flush_buffer()
        self.names = {"eager": TIMER_TEXT["eager"], "graph": TIMER_TEXT["graph"]}

    def eager(self, calls: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
        if not calls:
            return {}
        return timing.eager_ms(calls, self.reps, flush=self._flush)

    def graph(self, fn: Callable[[], Any]) -> float:
        return timing.graph_ms(fn, self.graph_rep_ms)


class WallTimers:
    """CPU (dry run): both timers are the median wall time of a few calls in the interpreter."""

    def __init__(self, reps: int = 2) -> None:
        self.reps = reps
        self.names = {"eager": TIMER_TEXT["wall"], "graph": TIMER_TEXT["wall"]}

    def _time(self, fn: Callable[[], Any]) -> float:
        return timing.wall_ms(fn, self.reps)

    graph = _time

    def eager(self, calls: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
        return {name: self._time(fn) for name, fn in calls.items()}


def timed_passes(first: float, second: float, again: Callable[[], float],
                 threshold: float = UNSTABLE) -> dict[str, Any]:
    """Two passes; a third (``again()``) when they differ by more than ``threshold`` relative to the
    faster. The time reported is the median of the passes."""
    passes = [first, second]
    unstable = max(passes) / min(passes) - 1 > threshold
    if unstable:
        passes.append(again())
    return {"ms": statistics.median(passes), "passes": passes, "unstable": unstable}


def measure_case(case: Case, impls: Sequence[str], timers: Timers, device: str,
                 build: Callable[[str, Case], Callable[..., Any] | None] = impl_fn,
                 threshold: float = UNSTABLE) -> list[dict[str, Any]]:
    """One row per implementation: correctness, both timers over two passes, errors as text.

    The passes interleave the implementations (pass 1 of all, then pass 2 of all; the eager timer's
    calls also take turns within a pass), so a baseline that drifts while one implementation runs
    shows as instability rather than as a ratio. An eager third pass times every implementation
    again, in turns, once for all the unstable ones."""
    inputs = make_inputs(case, device)
    ref = reference(case, inputs)
    rows: dict[str, dict[str, Any]] = {}
    calls: dict[str, Callable[[], Any]] = {}
    for impl in impls:
        row: dict[str, Any] = {"set": case.set, "id": case.id, "op": case.op, "shape": list(case.shape),
                               "layout": case.layout, "dtype": case.dtype, "impl": impl, "error": None}
        rows[impl] = row
        t0 = time.perf_counter()
        try:
            fn = build(impl, case)
            if fn is None:
                row["error"] = "not applicable"
                continue
            call = (lambda fn=fn: fn(*inputs))
            out = call()   # first call: compiles (and autotunes, for the tutorial and Inductor)
            row["first_call_s"] = time.perf_counter() - t0
            row["max_rel_err"] = rel_error(out, ref)
            row["correct"] = row["max_rel_err"] <= TOLERANCE
            if impl == "alcop":
                row["fallback"] = alcop_fallback(call)
            calls[impl] = call
        except Exception as exc:   # a peer that cannot run this shape is a result, not a crash
            row["error"] = error_text(exc)
    for timer in TIMERS:
        first = _pass(timers, timer, calls, rows)
        second = _pass(timers, timer, {i: c for i, c in calls.items() if not math.isnan(first[i])}, rows)
        third: dict[str, float] = {}

        def again(impl: str, timer: str = timer, third: dict[str, float] = third) -> float:
            if timer != "eager":
                return _pass(timers, timer, {impl: calls[impl]}, rows)[impl]
            if not third:
                third.update(_pass(timers, timer, calls, rows))
            return third[impl]

        for impl, t in second.items():
            if not math.isnan(t):
                rows[impl][timer] = timed_passes(first[impl], t, functools.partial(again, impl), threshold)
    return [rows[i] for i in impls]


def _pass(timers: Timers, timer: str, calls: Mapping[str, Callable[[], Any]],
          rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """One pass of ``timer`` over ``calls``; NaN (and the error in the row) for a call it could not time."""
    if timer == "eager":
        try:
            return timers.eager(calls)
        except Exception as exc:   # recorded on every row of the pass
            return {impl: _failed(rows[impl], timer, exc) for impl in calls}
    out = {}
    for impl, call in calls.items():
        try:
            out[impl] = timers.graph(call)
        except Exception as exc:   # e.g. a call that cannot be captured in a CUDA graph
            out[impl] = _failed(rows[impl], timer, exc)
    return out


def _failed(row: dict[str, Any], timer: str, exc: Exception) -> float:
    row[f"{timer}_error"] = error_text(exc)
    return math.nan


_ALCOP_CALL = re.compile(r"=\s*torch\.ops\.alcop\.\w+\.default\(")


def alcop_calls(code: Sequence[str]) -> int:
    """How many calls of alcop's ops the code Inductor wrote holds (``torch._inductor.utils.run_and_get_code``'s
    sources). Only the calls count: the graph's comments and size asserts name the ops too, and Inductor's
    comments name the source files it traced, patch mode's among them."""
    return sum(len(_ALCOP_CALL.findall(c)) for c in code)


def error_text(exc: BaseException) -> str:
    """An exception as a result's error text: its type and first line, at most 300 characters."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


# --- the run: metadata, resume, budget -----------------------------------------------------------

def run_meta(device: str) -> dict[str, Any]:
    import torch
    import triton

    import alcop_triton

    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()})"
    return {"device": name, "torch": torch.__version__, "triton": triton.__version__, "alcop": alcop_triton.__version__,
            "cuda": torch.version.cuda if device == "cuda" else None, "python": platform.python_version()}


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def done_keys(rows: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(r["set"], r["id"]) for r in rows}


SET_KEYS = ("sets", "inductor_sets")   # what a resumed run may widen


def start_or_resume(out: Path, meta: dict[str, Any], args: dict[str, Any], run_id: str | None = None) -> dict[str, Any]:
    """``OUT/run.json``: the run's id (``run_id``, else a new one), date, device, versions and
    settings. A resumed run must be on the same device and versions and with the same timer
    settings, else its rows would not compare; it may take on more sets (the rows already taken
    keep their timers), and ``sets_added`` says which sets joined at which call."""
    path = out / "run.json"
    if path.exists():
        run = json.loads(path.read_text())
        fixed = {k: meta[k] for k in ("device", "torch", "triton", "alcop")}
        old, timers = run["settings"], {k: v for k, v in args.items() if k not in SET_KEYS}
        if ({k: run[k] for k in fixed} != fixed or {k: v for k, v in old.items() if k not in SET_KEYS} != timers
                or any(not set(old.get(k, ())) <= set(args.get(k, ())) for k in SET_KEYS)):
            raise SystemExit(f"suite: {out} holds run {run['run_id']} on {run['device']} (torch {run['torch']}, "
                             f"Triton {run['triton']}, settings {run['settings']}); this call is "
                             f"{fixed} with {args}: use another --out")
        run["calls"] = run.get("calls", 1) + 1
        added = {k: sorted(set(args.get(k, ())) - set(old.get(k, ()))) for k in SET_KEYS
                 if set(args.get(k, ())) - set(old.get(k, ()))}
        if added:
            run.setdefault("sets_added", []).append({"call": run["calls"], **added})
            run["settings"] = args
    else:
        now = _dt.datetime.now(_dt.timezone.utc)
        run = {"run_id": run_id or now.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6],
               "date": now.date().isoformat(), **meta, "settings": args, "calls": 1}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=1))
    return run


def run_cases(cases: Sequence[Case], out: Path, impls_for: Callable[[Case], list[str]],
              measure: Callable[[Case, list[str]], list[dict[str, Any]]], budget_s: float,
              clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Measure every case not yet in ``OUT/rows.jsonl``, appending its rows at once; stop before a
    case that would likely run past ``budget_s`` (the slowest case so far is the estimate)."""
    rows_path = out / "rows.jsonl"
    have = done_keys(read_rows(rows_path))
    t0, slowest, measured = clock(), 0.0, 0
    todo = [c for c in cases if (c.set, c.id) not in have]
    for i, case in enumerate(todo):
        if clock() - t0 + slowest * 1.2 > budget_s:
            return {"measured": measured, "left": len(todo) - i, "stopped": "budget"}
        c0 = clock()
        rows = measure(case, impls_for(case))
        with open(rows_path, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())
        slowest = max(slowest, clock() - c0)
        measured += 1
    return {"measured": measured, "left": 0, "stopped": None}


# --- the report ----------------------------------------------------------------------------------

def geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def usable(row: dict[str, Any] | None, timer: str) -> bool:
    return bool(row) and not row.get("error") and row.get("correct", False) and timer in row  # type: ignore[union-attr]


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per set and timer, for each implementation: speedup over torch (torch ms / its ms) per
    workload, geomean and minimum over the workloads where both ran and were correct; counts of
    failures, wrong answers and unstable timings. Comparisons stay within one timer."""
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["set"], r["id"]), {})[r["impl"]] = r
    sets: dict[str, Any] = {}
    for (set_, wid), impls in by.items():
        s = sets.setdefault(set_, {"workloads": 0, "timers": {}})
        s["workloads"] += 1
        for timer in TIMERS:
            t = s["timers"].setdefault(timer, {})
            base = impls.get("torch")
            for impl, r in impls.items():
                if impl == "torch":
                    continue
                e = t.setdefault(impl, {"ratios": {}, "errors": 0, "wrong": 0, "unstable": 0, "not_applicable": 0})
                if r.get("error") == "not applicable":
                    e["not_applicable"] += 1
                    continue
                e["errors"] += bool(r.get("error") or f"{timer}_error" in r)
                e["wrong"] += not r.get("error") and not r.get("correct", False)
                e["unstable"] += bool(r.get(timer, {}).get("unstable"))
                if usable(r, timer) and usable(base, timer):
                    e["ratios"][wid] = base[timer]["ms"] / r[timer]["ms"]  # type: ignore[index]
    for (set_, _), impls in by.items():
        if impls.get("inductor", {}).get("first_call_s") is not None:  # None: a row kept without it
            sets[set_].setdefault("inductor_compile_s", []).append(sum(inductor_compile_s(impls["inductor"])))
    for s in sets.values():
        if "inductor_compile_s" in s:
            c = s["inductor_compile_s"]
            s["inductor_compile_s"] = {"n": len(c), "mean": statistics.mean(c), "max": max(c), "total": sum(c)}
        for t in s["timers"].values():
            for e in t.values():
                e.update(ratio_stats(e["ratios"]))
    return sets


def ratio_stats(ratios: dict[str, float]) -> dict[str, Any]:
    """Speedups over torch per workload as a summary: count, geomean, minimum and where, how many above 1."""
    v = list(ratios.values())
    return {"n": len(v), "geomean": geomean(v), "min": min(v) if v else math.nan,
            "min_at": min(ratios, key=ratios.__getitem__) if v else None, "faster": sum(x > 1 for x in v)}


def forward_backward(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """For each set run with its ``_bwd`` twin: per timer and implementation, a layer's forward plus its
    gradients against torch's, (torch forward + backward ms) / (its forward + backward ms), geomean and
    minimum over the workloads where all four rows are usable (what a training step's convolutions cost)."""
    by: dict[tuple[str, tuple[Any, ...]], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["set"], tuple(r["shape"])), {})[r["impl"]] = r
    out: dict[str, Any] = {}
    for (set_, shape), fwd in by.items():
        bwd = by.get((set_ + "_bwd", shape))
        if set_.endswith("_bwd") or bwd is None or "torch" not in fwd or "torch" not in bwd:
            continue
        for timer in TIMERS:
            for impl in fwd:
                if impl == "torch" or impl not in bwd:
                    continue
                quad = (fwd["torch"], bwd["torch"], fwd[impl], bwd[impl])
                if all(usable(q, timer) for q in quad):
                    e = out.setdefault(set_, {}).setdefault(timer, {}).setdefault(impl, {"ratios": {}})
                    e["ratios"][fwd[impl]["id"]] = ((quad[0][timer]["ms"] + quad[1][timer]["ms"])
                                                    / (quad[2][timer]["ms"] + quad[3][timer]["ms"]))
    for timers in out.values():
        for impls in timers.values():
            for e in impls.values():
                e.update(ratio_stats(e["ratios"]))
    return out


def _ms(r: dict[str, Any] | None, timer: str) -> str:
    if not r:
        return "-"
    if r.get("error"):
        return "n/a" if r["error"] == "not applicable" else "error"
    if timer not in r:
        return "error"
    t = r[timer]
    txt = f"{t['ms']:.4f}" + ("*" if t["unstable"] else "") + (" (torch fallback)" if r.get("fallback") else "")
    return txt if r.get("correct") else txt + " (wrong)"


def markdown(run: dict[str, Any], rows: Sequence[dict[str, Any]], summary: dict[str, Any],
             timer_text: dict[str, str], progress: dict[str, Any] | None = None) -> str:
    out = [f"# alcop_triton benchmark suite, run {run['run_id']}", "",
           f"Produced by `benchmarks/suite.py` in {run.get('calls', 1)} call(s) of one run. Device: **{run['device']}**; "
           f"torch {run['torch']}, Triton {run['triton']}, alcop_triton {run['alcop']}"
           + (f", CUDA {run['cuda']}" if run.get("cuda") else "") + f"; date {run['date']}; run id `{run['run_id']}`.", "",
           "Timers (every number below names its timer; ratios compare numbers of one timer in this run only):", ""]
    out += [f"- **{t}**: {timer_text[t]}" for t in TIMERS]
    out += ["", "Implementations: **torch** (cuBLAS / cuDNN), **alcop** (drop-in as dispatched, fresh tuning "
            "database), **triton_tutorial** (Triton's tutorial matmul, its 16 autotune configs), **inductor** "
            "(`torch.compile` max-autotune, Triton GEMM templates only). Ratio = torch ms / implementation ms "
            "(> 1: faster than torch). Correctness: max abs error / max abs of a float32 reference ≤ 1e-2; "
            "only correct rows enter ratios. '(torch fallback)': alcop computed the call with torch (the reason is under Errors and fallbacks; the ratio still counts it, as users get it). `*`: unstable (the two passes differed by more than 10%; a third "
            "was taken, the median shown).", ""]
    if progress and progress.get("left"):
        out += [f"**Incomplete**: {progress['left']} workload(s) not yet measured; re-run the same command.", ""]
    rebuilt = sorted({r["id"] for r in rows if r.get("reconstructed")})
    if rebuilt:  # rows whose file was lost and rebuilt from this run's own report of the call that measured them
        out += [f"**Rows rebuilt from a report**: {len(rebuilt)} workload(s) ({', '.join(rebuilt[:3])}, ...): "
                f"{next(r['reconstructed'] for r in rows if r.get('reconstructed'))}.", ""]
    out += ["## Summary", "", "| set | workloads | timer | implementation | geomean vs torch | min (workload) | "
            "faster than torch | errors | wrong | unstable |", "|---|---|---|---|---|---|---|---|---|---|"]
    for set_, s in summary.items():
        for timer in TIMERS:
            for impl in IMPLS[1:]:
                e = s["timers"].get(timer, {}).get(impl)
                if not e or (e["n"] == 0 and e["not_applicable"] == s["workloads"]):
                    continue
                mn = f"{e['min']:.3f}x ({e['min_at']})" if e["n"] else "-"
                gm = f"**{e['geomean']:.3f}x**" if e["n"] else "-"
                out.append(f"| {set_} | {s['workloads']} | {timer} | {impl} | {gm} | {mn} | "
                           f"{e['faster']} / {e['n']} | {e['errors']} | {e['wrong']} | {e['unstable']} |")
    both = forward_backward(rows)
    if both:
        out += ["", "## Forward + backward", "", "A layer's forward and its gradients together: (torch's forward + "
                "backward ms) / (the implementation's), over the workloads measured both ways.", "",
                "| set | timer | implementation | geomean vs torch | min (workload) | faster than torch |",
                "|---|---|---|---|---|---|"]
        for set_, timers in both.items():
            for timer in TIMERS:
                for impl, e in timers.get(timer, {}).items():
                    out.append(f"| {set_} + {set_}_bwd | {timer} | {impl} | **{e['geomean']:.3f}x** | "
                               f"{e['min']:.3f}x ({e['min_at']}) | {e['faster']} / {e['n']} |")
    by: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for r in rows:
        by.setdefault(r["set"], {}).setdefault(r["id"], {})[r["impl"]] = r
    for set_, wls in by.items():
        out += ["", f"## {set_}", ""]
        for timer in TIMERS:
            out += [f"Timer **{timer}** (ms):", "", "| workload | TFLOP/s (best) | " + " | ".join(IMPLS) + " | "
                    + " | ".join(f"{i} vs torch" for i in IMPLS[1:]) + " |", "|---|---|" + "---|" * (2 * len(IMPLS) - 1)]
            for wid, impls in wls.items():
                cells = [_ms(impls.get(i), timer) for i in IMPLS]
                base = impls.get("torch")
                ratios = [f"{base[timer]['ms'] / impls[i][timer]['ms']:.3f}x"  # type: ignore[index]
                          if usable(impls.get(i), timer) and usable(base, timer) else "-" for i in IMPLS[1:]]
                times = [impls[i][timer]["ms"] for i in IMPLS if usable(impls.get(i), timer)]
                any_row = next(iter(impls.values()))
                fl = Case(set_, any_row["op"], tuple(any_row["shape"]), any_row["layout"], "").flops()
                tf = f"{fl / min(times) / 1e9:.0f}" if times else "-"
                out.append(f"| {wid} | {tf} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
            out.append("")
        errs = [(wid, i, r.get("error") or r.get("eager_error") or r.get("graph_error") or f"fallback: {r['fallback']}")
                for wid, impls in wls.items() for i, r in impls.items()
                if (r.get("error") and r["error"] != "not applicable") or "eager_error" in r or "graph_error" in r
                or r.get("fallback")]
        if errs:
            out += ["Errors and fallbacks:", ""] + [f"- {wid}, {i}: {e}" for wid, i, e in errs] + [""]
        comp = [inductor_compile_s(impls["inductor"]) for impls in wls.values()
                if impls.get("inductor", {}).get("first_call_s") is not None]
        if comp:
            pre = sum(c[1] for c in comp)
            out += [f"Inductor compile + autotune time per workload (its first call"
                    + (", plus its share of the pretuning graph's compile" if pre else "")
                    + f"): total {sum(c[0] + c[1] for c in comp):.0f} s"
                    + (f" ({pre:.0f} s of it pretuning)" if pre else "")
                    + f", mean {statistics.mean(c[0] + c[1] for c in comp):.1f} s, "
                    f"max {max(c[0] + c[1] for c in comp):.1f} s over {len(comp)} workloads"
                    + (f" ({len(wls) - len(comp)} rows kept without it)" if len(comp) < len(wls) else "") + ".", ""]
    return "\n".join(out) + "\n"


def inductor_compile_s(row: dict[str, Any]) -> tuple[float, float]:
    """An Inductor row's compile seconds: its first call, and its share of a pretuning graph's compile."""
    return row["first_call_s"], (row.get("inductor_pretune") or {}).get("share_s", 0.0)


def write_report(out: Path, run: dict[str, Any], timer_text: dict[str, str],
                 progress: dict[str, Any] | None = None) -> dict[str, Any]:
    rows = read_rows(out / "rows.jsonl")
    summary = summarize(rows)
    report = {"run": run, "timers": timer_text, "progress": progress, "summary": summary,
              "forward_backward": forward_backward(rows)}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=float))
    (out / "report.md").write_text(markdown(run, rows, summary, timer_text, progress))
    return report


# --- command line --------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="run directory (rows.jsonl, run.json, report.md/json)")
    ap.add_argument("--sets", default="alcop,heldout,models,conv2d", help=f"comma list of {', '.join(SETS)}")
    ap.add_argument("--inductor-sets", default="alcop,heldout",
                    help="sets that also time Inductor max-autotune (compile time is large); '' for none")
    ap.add_argument("--inductor-cap-s", type=float, default=120.0,
                    help="after one Inductor compile takes longer than this, skip Inductor for the rest of its set")
    ap.add_argument("--inductor-pretune", type=int, default=1,
                    help="compile one graph with the next N Inductor GEMM workloads first, filling the autotune "
                         "cache their own compiles then read; 1 for none")
    ap.add_argument("--impls", default=",".join(IMPLS),
                    help="comma list of implementations to time (torch always); fewer for a quick comparison")
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop cleanly before this many seconds")
    ap.add_argument("--reps", type=int, default=100, help="eager calls per pass")
    ap.add_argument("--quick", action="store_true", help="smoke test: 3 workloads per set, 20 reps, no Inductor")
    ap.add_argument("--dry-run", action="store_true", help="CPU: interpreter, wall-clock timers, the smoke set")
    ap.add_argument("--run-id", default=None, help="id of a new run (a larger run's, e.g. benchmarks/headline.py's)")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from rows.jsonl")
    a = ap.parse_args(argv)
    impls = ["torch"] + [i for i in IMPLS[1:] if i in a.impls.split(",")]
    if unknown := set(a.impls.split(",")) - set(IMPLS):
        ap.error(f"--impls: {', '.join(sorted(unknown))} unknown; known: {', '.join(IMPLS)}")
    if a.run_id is not None and not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", a.run_id):
        ap.error(f"--run-id: {a.run_id!r} is not 1 to 64 letters, digits, '-' or '_'")

    # A fresh tuning database: configs come from the shipped table, the nearest shape or the model,
    # as for a new user. Set before alcop_triton reads it; call-time tuning stays off.
    os.environ["ALCOP_DB"] = os.path.join(tempfile.mkdtemp(prefix="alcop_suite_"), "tuning.sqlite")
    os.environ.pop("ALCOP_AUTOTUNE", None)
    import torch

    if a.report_only:  # the stored run as it is: no device needed, no call counted
        run = json.loads((Path(a.out) / "run.json").read_text())
        names = {t: TIMER_TEXT["wall" if run["settings"]["dry_run"] else t] for t in ("eager", "graph")}
        write_report(Path(a.out), run, names)
        return 0
    device = "cpu" if a.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("suite: no CUDA device (use --dry-run to test the pipeline on CPU)", file=sys.stderr)
        return 2
    sets = ["smoke"] if a.dry_run else [s for s in a.sets.split(",") if s]
    cases = [c for s in sets for c in (load_set(s)[:3] if a.quick else load_set(s))]
    ind_sets = set() if (a.quick or a.dry_run) else {s for s in a.inductor_sets.split(",") if s}
    reps = 20 if a.quick else a.reps
    settings = {"sets": sets, "inductor_sets": sorted(ind_sets), "reps": reps, "quick": a.quick, "dry_run": a.dry_run}
    if len(impls) < len(IMPLS):   # recorded only when narrowed, so runs taken before the option still resume
        settings["impls"] = impls
    if ind_sets:
        settings["inductor_pretune"] = max(1, a.inductor_pretune)
    out = Path(a.out)
    run = start_or_resume(out, run_meta(device), settings, a.run_id)
    done = done_keys(read_rows(out / "rows.jsonl"))
    # GEMM workloads still to run through Inductor, in order: the pretuning chunks are taken from here.
    pending_ind = [c for c in cases if c.set in ind_sets and c.gemm and (c.set, c.id) not in done]
    if pending_ind:
        inductor_setup(os.path.join(tempfile.gettempdir(), f"alcop_suite_inductor_{run['run_id']}"))
    timers: Timers = WallTimers() if a.dry_run else CudaTimers(reps=reps)
    torch.manual_seed(0)
    # Sets where an Inductor compile already took longer than the cap (in this call or an earlier one).
    slow_inductor = {r["set"] for r in read_rows(out / "rows.jsonl")
                     if r["impl"] == "inductor" and (r.get("first_call_s") or 0) > a.inductor_cap_s}

    def impls_for(case: Case) -> list[str]:
        use_ind = case.set in ind_sets and case.set not in slow_inductor
        return [i for i in impls if i != "inductor" or use_ind]

    pretuned: dict[tuple[str, str], dict[str, Any]] = {}   # workload -> its chunk's size and share of the chunk's seconds

    def pretune(case: Case) -> None:
        chunk = pretune_chunk(case, pending_ind, pretuned, settings["inductor_pretune"])
        if not chunk:
            return
        try:
            secs = pretune_inductor(chunk, device)
            record: dict[str, Any] = {"chunk": len(chunk), "chunk_s": secs, "share_s": secs / len(chunk)}
        except Exception as exc:   # the workloads' own compiles then autotune as usual
            record = {"chunk": len(chunk), "error": error_text(exc)}
            print(f"[{case.set}] Inductor pretuning failed: {record['error']}", flush=True)
        for c in chunk:
            pretuned[(c.set, c.id)] = record

    def measure(case: Case, impls: list[str]) -> list[dict[str, Any]]:
        if "inductor" in impls and case.gemm and settings.get("inductor_pretune", 1) > 1:
            pretune(case)
        compiled = precompile_count() if "inductor" in impls else 0
        rows = measure_case(case, impls, timers, device)
        for r in rows:
            if r["impl"] != "inductor":
                continue
            r["inductor_settings"] = dict(_INDUCTOR)
            r["inductor_pretune"] = pretuned.get((case.set, case.id))
            # 0: every GEMM choice's timing came from the autotune cache (the pretuning graph's)
            r["inductor_gemms_precompiled"] = precompile_count() - compiled
            if r.get("first_call_s", 0) > a.inductor_cap_s:
                slow_inductor.add(case.set)
        print(f"[{case.set}] {case.id}: " + ", ".join(
            f"{r['impl']} {r['eager']['ms']:.4f}/{r['graph']['ms']:.4f}" if "eager" in r and "graph" in r
            else f"{r['impl']} {r.get('error') or 'timer error'}" for r in rows), flush=True)
        return rows

    progress = run_cases(cases, out, impls_for, measure, a.budget_s)
    if slow_inductor:
        progress["inductor_skipped_after_cap"] = sorted(slow_inductor)
    write_report(out, run, timers.names, progress)
    print(f"suite: {progress['measured']} workloads measured this call, {progress['left']} left; "
          f"report in {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
