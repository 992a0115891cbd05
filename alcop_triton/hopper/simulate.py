"""Run a generated sm90 kernel's own source on the CPU against a model of the Hopper primitives it uses.

The GPU is the only place the kernels can run for real, and a wrong barrier phase there is a hang, not an
error. This module executes the *emitted Gluon text* (not a re-statement of it) with ``gl``, ``mbarrier``,
``tma``, ``warpgroup_mma`` and ``warp_specialize`` replaced by a model of their sm90 semantics:

* an mbarrier has an arrival count, a transaction-byte count and a phase; ``mbarrier.expect`` is an arrive
  that also expects bytes; a phase completes when both counts reach zero; ``wait(bar, p)`` returns once the
  phase of parity ``p`` has completed, i.e. while the current phase's parity differs from ``p`` (so a
  wait two phases behind, or one ahead, passes or blocks exactly as on the hardware);
* a TMA load is asynchronous: it lands (zero-filled outside the tensor, full box bytes counted) at a
  moment the scheduler picks, and then completes its bytes on the barrier; a TMA store reads its shared
  buffer at a moment of the scheduler's choosing until ``tma.store_wait`` of its issuing partition;
* a wgmma group reads its shared operands at any moment until ``warpgroup_mma_wait`` retires it: a copy
  into a slot that an unretired group reads, or a group issued on a slot whose copy has not landed, is a
  race; an accumulator used before its groups retired is an error;
* partitions (``warp_specialize``) run as threads that a seeded random scheduler interleaves at every
  primitive; nothing runnable and nothing in flight while a partition still waits is a deadlock.

Operands are small integers in float64, so the result must equal ``A @ B`` (+ bias, relu, residual)
exactly (the smooth activations to float64 rounding, computed as the emitted formula is); C starts
as NaN, so a tile never written shows. ``ProtocolError`` names what went wrong and where each partition was.
"""

from __future__ import annotations

import ast
import math
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .config import HopperConfig
from .emit import KernelSource, emit
from .plan import HopperPlan, describe, plan as plan_for

ELEM = 2  # bytes of an fp16/bf16 element: what a TMA box's transaction count is made of


class ProtocolError(AssertionError):
    """The modelled kernel deadlocked, raced on shared memory, or produced a wrong C."""


class _Abort(BaseException):
    """Unwinds a partition thread when the simulation stops early."""


# ------------------------------------------------------------------------------------------ scheduler
class _Partition:
    def __init__(self, name: str) -> None:
        self.name = name
        self.go = threading.Event()
        self.cond: Callable[[], bool] | None = None
        self.waiting_on = ""
        self.done = False
        self.error: BaseException | None = None
        self.wgmma: list[_Future] = []  # outstanding wgmma groups, oldest first
        self.stores: list[Callable[[], None]] = []  # outstanding TMA stores (bulk groups), oldest first


class _Sim:
    def __init__(self, seed: int, max_steps: int) -> None:
        self.rng = random.Random(seed)
        self.max_steps = max_steps
        self.partitions: list[_Partition] = []
        self.events: list[tuple[str, Callable[[], None]]] = []  # TMA loads and stores in flight
        self.back = threading.Event()
        self.local = threading.local()
        self.abort = False
        self.pid = 0
        self.nprog = 1
        self.reading: dict[tuple[int, int], int] = {}  # shared slot -> unretired wgmma groups reading it
        self.loading: set[tuple[int, int]] = set()  # shared slots a TMA load is writing
        self.storing: dict[int, int] = {}  # shared buffer id -> TMA stores reading it

    # --- called from partition threads
    def me(self) -> _Partition:
        part: _Partition = self.local.part
        return part

    def point(self, cond: Callable[[], bool] | None = None, what: str = "") -> None:
        """A scheduling point: hand control back; resume when chosen (and ``cond`` holds)."""
        a = self.me()
        a.cond, a.waiting_on = cond, what
        self.back.set()
        a.go.wait()
        a.go.clear()
        if self.abort:
            raise _Abort()

    def spawn(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> _Partition:
        a = _Partition(name)

        def body() -> None:
            self.local.part = a
            a.go.wait()
            a.go.clear()
            try:
                if not self.abort:
                    fn(*args)
            except _Abort:
                pass
            except BaseException as exc:  # reported by the scheduler
                a.error = exc
            a.done = True
            self.back.set()

        self.partitions.append(a)
        threading.Thread(target=body, daemon=True, name=name).start()
        return a

    # --- the scheduler, in the caller's thread
    def run(self) -> None:
        steps = 0
        while True:
            for a in self.partitions:
                if a.error is not None:
                    self.stop()
                    if isinstance(a.error, ProtocolError):
                        raise ProtocolError(f"{a.name}: {a.error}") from a.error
                    raise a.error
            live = [a for a in self.partitions if not a.done]
            if not live and not self.events:
                return
            runnable = [a for a in live if a.cond is None or a.cond()]
            n = len(runnable) + len(self.events)
            if n == 0:
                state = "; ".join(f"{a.name} waits on {a.waiting_on or '?'}" for a in live)
                self.stop()
                raise ProtocolError(f"deadlock (program {self.pid}): {state}")
            steps += 1
            if steps > self.max_steps:
                self.stop()
                raise ProtocolError(f"no end after {self.max_steps} steps (program {self.pid})")
            i = self.rng.randrange(n)
            if i < len(runnable):
                a = runnable[i]
                a.cond = None
                self.back.clear()
                a.go.set()
                self.back.wait()
            else:
                _, event = self.events.pop(i - len(runnable))
                try:
                    event()
                except BaseException:
                    self.stop()
                    raise

    def stop(self) -> None:
        self.abort = True
        for a in self.partitions:
            if not a.done:
                self.back.clear()
                a.go.set()
                self.back.wait(1.0)


_SIM: list[_Sim] = []


def _sim() -> _Sim:
    return _SIM[-1]


# ------------------------------------------------------------------------------------------ tensors
class _Layout:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _Type:
    layout = _Layout()


class _T:
    """A register tensor: a numpy array with the few Gluon tensor methods the epilogue uses."""

    type = _Type()

    def __init__(self, data: Any) -> None:
        self.data = np.asarray(data)

    def reshape(self, *shape: int) -> "_T":
        return _T(self.data.reshape(shape))

    def permute(self, *dims: int) -> "_T":
        return _T(self.data.transpose(dims))

    def split(self) -> tuple["_T", "_T"]:
        if self.data.shape[-1] != 2:
            raise ProtocolError(f"split() of a tensor whose last dimension is {self.data.shape[-1]}, not 2")
        return _T(self.data[..., 0]), _T(self.data[..., 1])

    def to(self, dtype: Any) -> "_T":
        return self

    def __getitem__(self, idx: Any) -> "_T":
        return _T(self.data[idx])

    def __add__(self, other: Any) -> "_T":
        return _T(self.data + _val(other))

    __radd__ = __add__

    def __lt__(self, other: Any) -> "_T":
        return _T(self.data < _val(other))

    def __and__(self, other: Any) -> "_T":
        return _T(self.data & _val(other))

    def __mul__(self, other: Any) -> "_T":
        return _T(self.data * _val(other))

    __rmul__ = __mul__

    def __sub__(self, other: Any) -> "_T":
        return _T(self.data - _val(other))

    def __rsub__(self, other: Any) -> "_T":
        return _T(_val(other) - self.data)

    def __truediv__(self, other: Any) -> "_T":
        return _T(self.data / _val(other))

    def __rtruediv__(self, other: Any) -> "_T":
        return _T(_val(other) / self.data)

    def __neg__(self) -> "_T":
        return _T(-self.data)


def _val(x: Any) -> Any:
    if isinstance(x, _Future):
        raise ProtocolError("an accumulator used while wgmma groups writing it are still in flight")
    return x.data if isinstance(x, _T) else x


class _Ptr:
    def __init__(self, array: Any, offsets: Any = 0) -> None:
        self.array, self.offsets = array, offsets

    def __add__(self, other: Any) -> "_Ptr":
        return _Ptr(self.array, self.offsets + _val(other))


class _BlockType:
    def __init__(self, shape: list[int]) -> None:
        self.shape = list(shape)
        self.nbytes = int(np.prod(shape)) * ELEM


class _Desc:
    """A TMA descriptor over a stored 2-d matrix, copying boxes of ``block``."""

    def __init__(self, array: Any, block: list[int]) -> None:
        self.array, self.block_type, self.dtype, self.layout = array, _BlockType(block), "f16", _Layout()

    def box(self, coord: list[int]) -> Any:
        (r, c), (br, bc) = coord, self.block_type.shape
        out = np.zeros((br, bc))
        part = self.array[max(r, 0):r + br, max(c, 0):c + bc]
        out[:part.shape[0], :part.shape[1]] = part  # outside the tensor: zeros, as TMA fills
        return out

    def put(self, coord: list[int], data: Any) -> None:
        (r, c), (R, C) = coord, self.array.shape
        rows, cols = max(0, min(data.shape[0], R - r)), max(0, min(data.shape[1], C - c))
        self.array[r:r + rows, c:c + cols] = data[:rows, :cols]  # outside the tensor: not written


# ------------------------------------------------------------------------------------------ shared memory
_IDS = iter(range(1 << 30))


class _Barrier:
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.pending = 0
        self.tx = 0
        self.phase = 0
        self.live = False

    def arrive(self, n: int) -> None:
        if not self.live:
            raise ProtocolError(f"arrive on {self.name} before mbarrier.init")
        self.pending -= n
        if self.pending < 0:
            raise ProtocolError(f"{self.name}: more arrivals than its count {self.count} in one phase")
        self.settle()

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        if self.tx < 0:
            raise ProtocolError(f"{self.name}: {-self.tx} TMA bytes landed beyond what mbarrier.expect announced")
        self.settle()

    def settle(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def __repr__(self) -> str:
        return f"{self.name}(phase {self.phase}, {self.pending} arrivals and {self.tx} B pending)"


class _Barriers:
    def __init__(self, n: int) -> None:
        k = next(_IDS)
        self.bars = [_Barrier(f"mbarrier#{k}[{i}]") for i in range(n)]

    def index(self, i: int) -> _Barrier:
        return self.bars[i]


class _Slot:
    """One shared-memory tile: ``buf.index(i)``, optionally viewed transposed."""

    def __init__(self, buf: "_Shared", i: int, transposed: bool = False) -> None:
        self.buf, self.i, self.transposed = buf, i, transposed

    @property
    def key(self) -> tuple[int, int]:
        return (self.buf.id, self.i)

    def permute(self, dims: tuple[int, int]) -> "_Slot":
        return _Slot(self.buf, self.i, not self.transposed if tuple(dims) == (1, 0) else self.transposed)

    def read(self) -> Any:
        d = self.buf.data[self.i]
        return d.T if self.transposed else d

    def store(self, value: Any) -> None:
        s = _sim()
        if s.storing.get(self.buf.id):
            raise ProtocolError("registers stored into an epilogue buffer a TMA store is still reading "
                                "(tma.store_wait missing)")
        v = _val(value)
        if v.shape != self.buf.data[self.i].shape:
            raise ProtocolError(f"store of a {v.shape} tile into a {self.buf.data[self.i].shape} buffer")
        self.buf.data[self.i] = v
        self.buf.version[self.i] += 1
        s.point(what="smem store")


class _Shared:
    def __init__(self, shape: list[int]) -> None:
        self.id = next(_IDS)
        self.data = np.full(shape, np.nan)
        self.version = [0] * shape[0]

    def index(self, i: int) -> _Slot:
        return _Slot(self, i)


_ERF = np.vectorize(math.erf, otypes=[np.float64])


# ------------------------------------------------------------------------------------------ the model of gl & co.
class _Gluon:
    @staticmethod
    def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn


class _GL:
    float32, float16, bfloat16, int64 = "f32", "f16", "bf16", "i64"
    NVMMADistributedLayout = SliceLayout = _Layout

    @staticmethod
    def constexpr(v: Any) -> Any:
        return v

    static_range = range

    @staticmethod
    def program_id(axis: int) -> int:
        return _sim().pid

    @staticmethod
    def num_programs(axis: int) -> int:
        return _sim().nprog

    @staticmethod
    def cdiv(a: int, b: int) -> int:
        return -(-a // b)

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        return _T(np.minimum(_val(a), _val(b))) if isinstance(a, _T) or isinstance(b, _T) else min(a, b)

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return _T(np.maximum(_val(a), _val(b))) if isinstance(a, _T) or isinstance(b, _T) else max(a, b)

    @staticmethod
    def exp(x: Any) -> _T:
        with np.errstate(over="ignore"):  # exp overflows to inf as on the GPU; the formulas saturate
            return _T(np.exp(_val(x)))

    @staticmethod
    def erf(x: Any) -> _T:
        return _T(_ERF(_val(x)))

    @staticmethod
    def zeros(shape: tuple[int, ...], dtype: Any = None, layout: Any = None) -> _T:
        return _T(np.zeros(shape))

    @staticmethod
    def arange(lo: int, hi: int, layout: Any = None) -> _T:
        return _T(np.arange(lo, hi))

    @staticmethod
    def load(ptr: _Ptr, mask: Any = None, other: float = 0.0) -> _T:
        offs = np.asarray(ptr.offsets)
        ok = np.ones(offs.shape, bool) if mask is None else _val(mask)
        vals = ptr.array[np.where(ok, offs, 0)]
        return _T(np.where(ok, vals, other))

    @staticmethod
    def allocate_shared_memory(dtype: Any, shape: list[int], layout: Any) -> Any:
        if dtype == _GL.int64:
            if list(shape[1:]) != [1]:
                raise ProtocolError(f"mbarrier array of shape {shape}: expected [n, 1]")
            return _Barriers(shape[0])
        return _Shared(list(shape))

    @staticmethod
    def warp_specialize(functions_and_args: list[tuple[Callable[..., Any], tuple[Any, ...]]],
                        worker_num_warps: list[int], worker_num_regs: list[int]) -> None:
        # Triton 3.6: warp_specialize(functions_and_args, worker_num_warps, worker_num_regs), the first
        # entry the default partition (the launch's num_warps), one warps and one regs entry per worker
        if not (len(worker_num_warps) == len(worker_num_regs) == len(functions_and_args) - 1):
            raise ProtocolError(f"warp_specialize with {len(functions_and_args)} partitions, worker warps "
                                f"{worker_num_warps}, worker regs {worker_num_regs}: one of each per worker")
        s = _sim()
        workers = [s.spawn(f"{fn.__name__}{args[-2:]}", fn, tuple(args))
                   for fn, args in functions_and_args[1:]]
        fn, args = functions_and_args[0]
        fn(*args)
        s.point(lambda: all(w.done for w in workers), "the worker partitions' end")


class _MBarrier:
    @staticmethod
    def MBarrierLayout() -> _Layout:
        return _Layout()

    @staticmethod
    def init(bar: _Barrier, count: int) -> None:
        if bar.live:
            raise ProtocolError(f"{bar.name} initialised twice")
        bar.count = bar.pending = count
        bar.live = True

    @staticmethod
    def invalidate(bar: _Barrier) -> None:
        bar.live = False

    @staticmethod
    def expect(bar: _Barrier, nbytes: int, pred: bool = True) -> None:
        if pred:
            bar.tx += nbytes  # arrive.expect_tx: bytes announced, then one arrival
            bar.arrive(1)
        _sim().point(what="expect")

    @staticmethod
    def arrive(bar: _Barrier, count: int = 1, pred: bool = True) -> None:
        if pred:
            bar.arrive(count)
        _sim().point(what="arrive")

    @staticmethod
    def wait(bar: _Barrier, phase: int, pred: bool = True, deps: Any = None) -> None:
        if not bar.live:
            raise ProtocolError(f"wait on {bar.name} before mbarrier.init")
        if phase not in (0, 1):
            raise ProtocolError(f"wait on {bar.name} with parity {phase!r}")
        _sim().point(lambda: (bar.phase & 1) != phase, f"{bar!r} for parity {phase}")


class _TMA:
    @staticmethod
    def async_copy_global_to_shared(desc: _Desc, coord: list[int], bar: _Barrier, dst: _Slot,
                                    pred: bool = True) -> None:
        s = _sim()
        if s.reading.get(dst.key):
            raise ProtocolError(f"TMA load into shared slot {dst.i} while an unretired wgmma group reads it")
        if dst.key in s.loading:
            raise ProtocolError(f"TMA load into shared slot {dst.i} while another load into it is in flight")
        s.loading.add(dst.key)
        coord = [int(c) for c in coord]

        def land() -> None:
            box = desc.box(coord)
            if box.shape != dst.buf.data[dst.i].shape:
                raise ProtocolError(f"TMA box {box.shape} into a slot of {dst.buf.data[dst.i].shape}")
            dst.buf.data[dst.i] = box
            dst.buf.version[dst.i] += 1
            s.loading.discard(dst.key)
            bar.complete_tx(desc.block_type.nbytes)

        s.events.append(("tma load", land))
        s.point(what="tma load issue")

    @staticmethod
    def async_copy_shared_to_global(desc: _Desc, coord: list[int], src: _Slot) -> None:
        s, a = _sim(), _sim().me()
        coord = [int(c) for c in coord]
        s.storing[src.buf.id] = s.storing.get(src.buf.id, 0) + 1
        done = [False]

        def land() -> None:
            if not done[0]:
                done[0] = True
                desc.put(coord, src.read())
                s.storing[src.buf.id] -= 1

        a.stores.append(land)
        s.events.append(("tma store", land))
        s.point(what="tma store issue")

    @staticmethod
    def store_wait(pendings: int) -> None:
        a = _sim().me()
        while len(a.stores) > pendings:
            a.stores.pop(0)()
        _sim().point(what="store_wait")


class _Future:
    """An accumulator with wgmma groups in flight."""

    def __init__(self, a: _Slot, b: _Slot, prev: Any) -> None:
        self.a, self.b, self.prev = a, b, prev
        self.versions = (a.buf.version[a.i], b.buf.version[b.i])
        self.value: _T | None = None

    def __getattr__(self, name: str) -> Any:  # a tensor method (reshape, to, ...) on an unretired accumulator
        raise ProtocolError(f"an accumulator used ({name}) while wgmma groups writing it are still in flight")


def _warpgroup_mma(a: _Slot, b: _Slot, acc: Any, is_async: bool = False, use_acc: bool = True) -> Any:
    s, me = _sim(), _sim().me()
    for op in (a, b):
        if op.key in s.loading:
            raise ProtocolError(f"wgmma issued on shared slot {op.i} while its TMA load is still in flight")
    f = _Future(a, b, acc)
    for op in (a, b):
        s.reading[op.key] = s.reading.get(op.key, 0) + 1
    me.wgmma.append(f)
    if not is_async:
        _warpgroup_mma_wait(0, (f, ))
    s.point(what="wgmma issue")
    return f


def _retire(f: _Future) -> None:
    s = _sim()
    if (f.a.buf.version[f.a.i], f.b.buf.version[f.b.i]) != f.versions:
        raise ProtocolError(f"shared slot {f.a.i} overwritten while a wgmma group reading it was in flight")
    prev = f.prev
    if isinstance(prev, _Future):
        if prev.value is None:
            raise ProtocolError("wgmma groups retired out of order")
        prev = prev.value
    a, b = f.a.read(), f.b.read()
    if a.shape[1] != b.shape[0]:
        raise ProtocolError(f"wgmma operands {a.shape} @ {b.shape}")
    f.value = _T(_val(prev) + a @ b)
    for op in (f.a, f.b):
        s.reading[op.key] -= 1


def _warpgroup_mma_wait(num_outstanding: int = 0, deps: tuple[Any, ...] = ()) -> Any:
    me = _sim().me()
    while len(me.wgmma) > num_outstanding:
        _retire(me.wgmma.pop(0))
    _sim().point(what="wgmma wait")
    out = [d.value if isinstance(d, _Future) and d.value is not None else d for d in deps]
    return out[0] if len(out) == 1 else tuple(out)


def _fence_async_shared() -> None:
    pass


# ------------------------------------------------------------------------------------------ driver
@dataclass(frozen=True)
class SimResult:
    name: str
    programs: int
    tiles: int


def _namespace() -> dict[str, Any]:
    return {"gluon": _Gluon, "gl": _GL, "mbarrier": _MBarrier, "tma": _TMA, "warpgroup_mma": _warpgroup_mma,
            "warpgroup_mma_wait": _warpgroup_mma_wait, "fence_async_shared": _fence_async_shared}


def load_model(source: str, name: str) -> Callable[..., Any]:
    """The kernel function of a generated source, its Gluon imports bound to this module's model."""
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    ns = _namespace()
    exec(compile(tree, f"<{name}>", "exec"), ns)
    fn: Callable[..., Any] = ns[name]
    return fn


def run_kernel(ks: KernelSource, m: int, n: int, k: int, *, programs: int, seed: int = 0,
               max_steps: int = 2_000_000, source: str | None = None) -> None:
    """Run ``ks`` (or ``source``, a variant of its text) over ``programs`` programs on random small-integer
    operands and check C exactly; raises ``ProtocolError``."""
    cfg = ks.plan.config
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (m, k)).astype(np.float64)
    b = rng.integers(-2, 3, (k, n)).astype(np.float64)
    bias = rng.integers(-2, 3, n).astype(np.float64)
    residual = rng.integers(-2, 3, (m, n)).astype(np.float64)
    c = np.full((m, n), np.nan)
    a_st = a if ks.layout[0] == "n" else np.ascontiguousarray(a.T)
    b_st = b if ks.layout[1] == "n" else np.ascontiguousarray(b.T)
    a_box = [cfg.block_m, cfg.block_k] if ks.layout[0] == "n" else [cfg.block_k, cfg.block_m]
    b_box = [cfg.block_k, cfg.block_n] if ks.layout[1] == "n" else [cfg.block_n, cfg.block_k]
    c_box = [cfg.block_m, cfg.block_n // cfg.epilogue_subtile]
    fn = load_model(source if source is not None else ks.source, ks.name)
    # the kernel's tensors (read only through the descriptors but bias), then the descriptors and sizes
    tensors = (None, None, *((_Ptr(bias),) if ks.bias else ()), *((_Ptr(residual.ravel()),) if ks.residual else ()),
               None)
    args = (*tensors, _Desc(a_st, a_box), _Desc(b_st, b_box), _Desc(c, c_box), m, n, k)
    for pid in range(programs):
        s = _Sim(seed * 1000003 + pid, max_steps)
        s.pid, s.nprog = pid, programs
        _SIM.append(s)
        try:
            s.spawn("kernel", fn, args)
            s.run()
            left = [a_.name for a_ in s.partitions if a_.wgmma or a_.stores]
            if left:
                raise ProtocolError(f"program {pid}: {left} ended with wgmma groups or TMA stores in flight")
            if any(s.loading) or any(s.storing.values()):
                raise ProtocolError(f"program {pid}: TMA copies still in flight at the kernel's end")
        finally:
            _SIM.pop()
    ref = a @ b + (bias[None, :] if ks.bias else 0.0)
    if ks.activation is not None:
        with np.errstate(over="ignore"):
            ref = _ACTIVATIONS[ks.activation](ref)
    if ks.residual:
        ref = ref + residual
    if np.isnan(c).any():
        rows, cols = np.nonzero(np.isnan(c))
        raise ProtocolError(f"{ks.name}: {rows.size} element(s) of C never written, e.g. ({rows[0]}, {cols[0]})")
    exact = ks.activation in (None, "relu")
    if not (np.array_equal(c, ref) if exact else np.allclose(c, ref, rtol=1e-12, atol=1e-12)):
        rows, cols = np.nonzero(c != ref if exact else ~np.isclose(c, ref, rtol=1e-12, atol=1e-12))
        raise ProtocolError(f"{ks.name}: {rows.size} element(s) of C wrong, e.g. ({rows[0]}, {cols[0]}): "
                            f"{c[rows[0], cols[0]]} != {ref[rows[0], cols[0]]}")


_ACTIVATIONS: dict[str, Callable[[Any], Any]] = {
    # torch's definitions in float64, independent of the emitted formulas
    "relu": lambda z: np.maximum(z, 0.0),
    "gelu": lambda z: 0.5 * z * (1.0 + _ERF(z / math.sqrt(2.0))),
    "silu": lambda z: z / (1.0 + np.exp(-z)),
    "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
    "tanh": np.tanh,
}


def simulate(config: HopperConfig | HopperPlan, dtype: str, layout: str, m: int, n: int, k: int, *,
             programs: int | None = None, sms: int = 132, bias: bool = False, activation: str | None = None,
             residual: bool = False, seed: int = 0, planned: bool = True) -> SimResult:
    """Generate the kernel of ``config`` (planned for (m, n, k) on ``sms`` SMs unless ``planned=False`` or a
    plan is given) and run it over the launch's grid (or ``programs`` programs); raises ``ProtocolError``."""
    if isinstance(config, HopperPlan):
        p = config
    else:
        p = plan_for(m, n, k, config, sms=sms) if planned else describe(config)
    cfg = p.config
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    if programs is None:
        programs = max(1, min(tiles, sms)) if cfg.persistent else tiles
    ks = emit(p, dtype, layout, bias=bias, activation=activation, residual=residual)
    run_kernel(ks, m, n, k, programs=programs, seed=seed)
    return SimResult(ks.name, programs, tiles)
