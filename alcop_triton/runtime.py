"""Runtime: generated source -> file in the cache directory -> ``@triton.jit`` function.

``@triton.jit`` reads its source with ``inspect``, so kernels must live in real files. Files are
content-addressed (sha256 of the source) and written atomically (temp file + ``os.replace``), so
concurrent processes never see half a kernel. The cache runs only what it verified: the file is read back
and compared with the source, then that source is compiled here and run in a fresh module whose
``__file__`` is the file (``inspect`` is served the verified text through ``linecache``): no bytecode is
read or written, so a ``__pycache__`` planted beside a kernel is never run. Below the cache directory
nothing is followed through a link: ``kernels/``, ``kernels/<digest>`` and the kernel file are opened
relative to their parent's descriptor with ``O_NOFOLLOW``, and a link, a file where a directory belongs
or a directory where the file belongs is renamed aside (inside the cache) and the kernel written again.
Nothing outside ``kernels/`` is renamed: where the cache directory cannot be used (``ALCOP_CACHE_DIR``
names a file, a read-only directory) kernels are built in a temporary directory this process owns, with
one ``KernelCacheUnusable`` warning.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import hashlib
import linecache
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import settings as config

_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()


FILE_STEM_BYTES = 100
"""Longest kernel file name kept as is; a longer kernel name gets a file named ``kernel.py``
(the directory is content-addressed, so the name only serves readers of tracebacks)."""


class KernelCacheUnusable(UserWarning):
    """The kernel cache directory cannot be written; kernels are built in a temporary directory."""


_FALLBACK: list[Path] = []  # the temporary directory of this process, once made


def _move_aside_at(dir_fd: int, name: str) -> None:
    """Rename ``name`` in the directory ``dir_fd`` out of the way (the entry itself, never what a link
    points to; never deleted: it may be someone's data); losing a race is fine."""
    try:
        os.replace(name, f".{name}.broken-{os.getpid()}-{time.monotonic_ns()}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _subdir(parent_fd: int, name: str) -> int:
    """A descriptor of the directory ``name`` in ``parent_fd``, made if missing; a link or a file standing
    there is renamed aside and a directory made in its place."""
    for _ in range(4):
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        except FileNotFoundError:
            try:
                os.mkdir(name, dir_fd=parent_fd)
            except FileExistsError:
                pass
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            _move_aside_at(parent_fd, name)
    raise OSError(errno.EAGAIN, f"kernel cache directory {name!r} keeps changing under this process")


def _read_at(dir_fd: int, name: str) -> str | None:
    """The text of the regular file ``name`` in ``dir_fd``; None when it is missing, a link, not a
    regular file or not UTF-8."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _write_at(dir_fd: int, name: str, text: str) -> None:
    """Write ``name`` in ``dir_fd`` atomically: a new file beside it, then ``os.replace`` (which replaces a
    link itself, never its target); a directory standing there is renamed aside first."""
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            _move_aside_at(dir_fd, name)
    except FileNotFoundError:
        pass
    tmp = f".{name}.{os.getpid()}-{time.monotonic_ns()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # readers see the old file or the new one
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _store(root: Path, digest: str, file_name: str, source: str) -> Path:
    """``root/kernels/<digest>/<file_name>`` holding exactly ``source`` (written if it does not), every
    step below ``root`` taken without following a link. OSError where ``root`` cannot be used; ``root``
    itself, and anything above ``kernels/``, is never renamed."""
    root.mkdir(parents=True, exist_ok=True)
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    try:
        fds.append(_subdir(fds[-1], "kernels"))
        fds.append(_subdir(fds[-1], digest))
        if _read_at(fds[-1], file_name) != source:
            _write_at(fds[-1], file_name, source)
            if _read_at(fds[-1], file_name) != source:
                raise OSError(errno.EIO, f"kernel file {file_name!r} does not read back as written")
    finally:
        for fd in fds:
            os.close(fd)
    return root / "kernels" / digest / file_name


def _fallback_root(root: Path, exc: OSError) -> Path:
    """This process's temporary kernel directory (made once, removed at exit; one warning)."""
    if not _FALLBACK:
        tmp = Path(tempfile.mkdtemp(prefix="alcop_triton-kernels-"))
        atexit.register(shutil.rmtree, tmp, True)
        _FALLBACK.append(tmp)
        warnings.warn(f"kernel cache {root} is not usable ({exc}); this process builds its kernels in {tmp} "
                      "(set ALCOP_CACHE_DIR to a writable directory to keep them)", KernelCacheUnusable, stacklevel=4)
    return _FALLBACK[0]


def _run_verified(source: str, path: Path, mod_name: str) -> types.ModuleType:
    """Run ``source`` (the text just verified at ``path``) as the module ``mod_name``: compiled here, never
    from bytecode on disk; ``inspect`` reads it from ``linecache`` as given, not from the file again."""
    code = compile(source, str(path), "exec", dont_inherit=True)
    mod = types.ModuleType(mod_name)
    mod.__file__ = str(path)
    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    sys.modules[mod_name] = mod
    exec(code, mod.__dict__)
    return mod


def load_kernel(source: str, name: str) -> tuple[Any, Path]:
    """The jitted function ``name`` defined by ``source`` (cached per process and on disk)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    with _LOCK:
        if digest in _LOADED:
            return _LOADED[digest]
        stem = name if len(name.encode()) <= FILE_STEM_BYTES else "kernel"
        root = config.cache_dir()
        try:
            path = _store(_FALLBACK[0] if _FALLBACK else root, digest, f"{stem}.py", source)
        except OSError as exc:
            path = _store(_fallback_root(root, exc), digest, f"{stem}.py", source)
        if config.debug_level() >= 3:
            print(f"[alcop] kernel {name} at {path}:\n{source}", file=sys.stderr)
        mod = _run_verified(source, path, f"alcop_kernels_{digest}")
        _LOADED[digest] = (getattr(mod, name), path)
        return _LOADED[digest]


def for_device(fn: Any, device_type: str) -> Any:
    """The callable that runs ``fn`` on tensors of ``device_type``: the interpreter for CPU tensors."""
    from triton.runtime.interpreter import InterpretedFunction
    if device_type == "cpu":
        if not isinstance(fn, InterpretedFunction) and not config.interpret():
            # tl.cdiv and friends are compiled helpers unless the interpreter was on at triton's import.
            raise RuntimeError("CPU tensors run in Triton's interpreter, which must be enabled before triton is "
                               "imported: set TRITON_INTERPRET=1 (alcop_triton does so itself when it is imported "
                               "first on a machine without CUDA), or move the tensors to the GPU")
        return fn if isinstance(fn, InterpretedFunction) else _interpreted(fn)
    if isinstance(fn, InterpretedFunction):
        raise RuntimeError("TRITON_INTERPRET=1 is set, so Triton kernels run only on CPU tensors; "
                           "unset it to run on the GPU")
    return fn


_INTERP: dict[int, Any] = {}


def _interpreted(fn: Any) -> Any:
    from triton.runtime.interpreter import InterpretedFunction
    if id(fn) not in _INTERP:
        _INTERP[id(fn)] = InterpretedFunction(fn.fn)
    return _INTERP[id(fn)]


def tma_descriptor(x: Any, dims: Sequence[int], block: Sequence[int]) -> Any:
    """The host-side TMA descriptor over ``x``'s ``dims`` (in that order, the unit-stride one last) with
    copies of ``block``. A dim of one element gets a 16-byte stride whatever its own: its coordinate is
    always 0, and TMA wants every stride but the last a multiple of 16 bytes."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    legal = 16 // x.element_size()
    strides = [x.stride(d) if x.shape[d] > 1 or i == len(dims) - 1 else legal for i, d in enumerate(dims)]
    return TensorDescriptor(x, [int(x.shape[d]) for d in dims], strides, list(block))


LAUNCH_MEMO = 64
"""Argument tuples kept per prebound launch, keyed by the tensors' addresses (the signature fixes the
rest): repeated calls on the same buffers, as the caching allocator hands them out, reuse the tuple
and the TMA descriptors encoded in it."""


def resident_programs(compiled: Any, num_warps: int, device: Any) -> int:
    """Programs of ``compiled`` (a Triton CompiledKernel) that the GPU runs at once: SMs x occupancy,
    occupancy limited by threads, registers and shared memory (plus the 1 KB the driver reserves)."""
    import torch
    p = torch.cuda.get_device_properties(device)
    compiled._init_handles()  # loads the module: n_regs is known from here on
    threads = 32 * num_warps
    # Older torch builds lack some of these fields; the fallbacks are sm80/sm90's limits.
    per_sm = [int(getattr(p, "max_threads_per_multi_processor", 2048)) // threads]
    if compiled.n_regs:
        per_sm.append(int(getattr(p, "regs_per_multiprocessor", 65536)) // (compiled.n_regs * threads))
    smem = compiled.metadata.shared
    if smem:
        per_sm.append(int(getattr(p, "shared_memory_per_multiprocessor", 228 * 1024)) // (smem + 1024))
    return int(p.multi_processor_count) * max(1, min(per_sm))


_SCRATCH: dict[tuple[int, int], Any] = {}   # (device, stream) -> the int8 tensor its launches share
_RETIRED: list[Any] = []


def scratch_address(index: int, stream: int, nbytes: int) -> Any:
    """Global scratch of at least ``nbytes`` for a launch on ``stream`` of device ``index``.

    Kernels launched on one stream run one after another, so they can share one buffer; it grows to
    the largest request. A buffer is never freed, because a captured CUDA graph may hold its address
    (they are a few hundred bytes per program). During a capture a missing or small buffer is not
    kept, since memory allocated there belongs to the graph's pool: that launch gets a tensor of its
    own, freed when the launch returns, as Triton's launcher does.
    """
    import torch
    buf = _SCRATCH.get((index, stream))
    if buf is not None and buf.numel() >= nbytes:
        return buf.data_ptr()
    fresh = torch.empty(nbytes, dtype=torch.int8, device=torch.device("cuda", index))
    if torch.cuda.is_current_stream_capturing():
        return fresh
    if buf is not None:
        _RETIRED.append(buf)
    _SCRATCH[(index, stream)] = fresh
    return fresh.data_ptr()


def prebind(run: Any, jit: Any, device: Any, grid: tuple[int, ...], args: Sequence[Any], kwargs: Mapping[str, Any],
            n_tensors: int, descriptors: Sequence[tuple[int, tuple[int, ...], tuple[int, ...]]] = ()
            ) -> Callable[..., None]:
    """A launch of one kernel specialisation with everything but its tensors bound: ``launch(*tensors)``.

    ``args`` are the kernel's positional arguments: tensors first (``n_tensors`` of them), then one
    host-side TMA descriptor per entry of ``descriptors`` (``(tensor index, dims, block)``, rebuilt
    for each call's tensors), then sizes and strides; ``kwargs`` its constexprs and launch options.
    The caller guarantees that later tensors have the same dtypes, shapes, strides and 16-byte
    alignment, so Triton would pick the same specialisation: on CUDA the launch calls the compiled
    kernel's launcher directly (what ``JITFunction.run`` does after binding, specialising and looking
    up its cache, which is skipped); in the interpreter, which has no compiled launcher, ``run`` (the
    interpreted function at ``grid``) is called with the bound arguments.
    """
    tail = tuple(args[n_tensors + len(descriptors):])
    # Only addresses come from later calls, as for pointer arguments: a caller may pass the tensor that a
    # bound view was taken of (the fast path replays a first call whose kernel read views of its inputs:
    # a linear's transposed weight, a flattened activation), so a descriptor is rebuilt from the bound
    # view's shape and strides at the passed tensor's address.
    views = [(i, dims, block, tuple(args[i].shape), tuple(args[i].stride())) for i, dims, block in descriptors]

    def host_descriptors(tensors: Sequence[Any]) -> list[Any]:
        return [tma_descriptor(tensors[i].as_strided(shape, stride), dims, block)
                for i, dims, block, shape, stride in views]
    if device.type != "cuda":
        options = dict(kwargs)

        def interpreted(*tensors: Any) -> None:
            run(*tensors, *host_descriptors(tensors), *tail, **options)
        return interpreted
    import torch
    from triton import knobs
    from triton.runtime.driver import driver

    compiled = jit.warmup(*args, grid=grid, **kwargs)  # compiles, or finds, this specialisation
    missing = [p.name for p in jit.params[len(args):] if p.name not in kwargs]
    if missing:
        raise TypeError(f"prebind: kernel parameters {missing} are neither positional arguments nor constexprs")
    # The launcher takes every parameter positionally, constexprs included (it skips them).
    tail += tuple(kwargs[p.name] for p in jit.params[len(args):])
    launcher, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
    index = device.index if device.index is not None else torch.cuda.current_device()
    active: Any = driver.active  # the CUDA driver, whose stream getter the base class does not declare
    stream_of, current_device, hooks = active.get_current_stream, torch._C._cuda_getDevice, knobs.runtime
    c_launch: Any = _compiled_launch(launcher)
    # Triton's launcher object encodes host tensor descriptors at every launch (its ``launch`` is then
    # a Python wrapper around the compiled one) and allocates the profiler's scratch per launch;
    # otherwise the compiled C launcher is called itself, given one tuple of kernel arguments per set
    # of addresses (``LAUNCH_MEMO``): the addresses, the descriptors' encoded arguments, the bound
    # rest. An address (unlike a tensor) spares it a data_ptr() call and a cuPointerGetAttribute per
    # tensor: the signature fixed the device. A kernel that still wants global scratch gets one buffer
    # per stream, kept (``scratch_address``), where Triton's wrapper would allocate one at every launch.
    direct = c_launch is not None and not launcher.profile_scratch_size
    coop, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    nbytes = g0 * g1 * g2 * launcher.num_ctas * launcher.global_scratch_size if direct else 0
    memo, encode = _argument_memo(compiled, host_descriptors, tail)
    address = torch.Tensor.data_ptr

    def launch(*tensors: Any) -> None:
        if current_device() != index:  # the kernel was loaded into this device's context
            with torch.cuda.device(index):
                launch(*tensors)
            return
        stream = stream_of(index)
        # Triton keeps launch hooks in chains that are usually empty; an empty chain is passed as
        # None, which spares the launcher two Python calls (enter and exit) and the launch metadata
        # the enter hook would receive. A hook added later is seen at the next launch.
        enter: Any = hooks.launch_enter_hook
        leave: Any = hooks.launch_exit_hook
        if enter is not None and not getattr(enter, "calls", True):
            enter = None
        if leave is not None and not getattr(leave, "calls", True):
            leave = None
        meta = None if enter is None else compiled.launch_metadata(grid, stream, *tensors,
                                                                   *host_descriptors(tensors), *tail)
        if direct:
            # The memo's lookup inline: a helper's frame costs more than the lookup on a cold call.
            ptrs = tuple(map(address, tensors))
            arguments = memo.get(ptrs)
            if arguments is None:
                arguments = encode(tensors, ptrs)
            c_launch(g0, g1, g2, stream, function, coop, pdl, scratch_address(index, stream, nbytes) if nbytes else None,
                     None, metadata, meta, enter, leave, *arguments)
        else:
            if descriptors:  # Triton's wrapper encodes them before its launch makes a context current
                current_context(index)
            launcher(g0, g1, g2, stream, function, metadata, meta, enter, leave, *tensors, *host_descriptors(tensors),
                     *tail)
    if direct:  # what the direct branch reads, for the fast path's native run (fastpath_native.c, ``run``)
        launch.native_state = (current_device, index, stream_of, hooks, address, memo, encode,  # type: ignore[attr-defined]
                               scratch_address, nbytes, c_launch, g0, g1, g2, function, coop, pdl, metadata)
    return launch


def current_context(index: int | None) -> None:
    """Make device ``index``'s primary context current in this thread where none is. The driver encodes a
    TMA descriptor (cuTensorMapEncodeTiled) only under a current context, and Triton's launcher makes
    one current when it launches, after the descriptors were encoded: so a thread whose first kernel
    reads descriptors failed ("invalid device context"), as autograd's backward thread did when a
    layer's weight gradient was the first thing it ran."""
    import ctypes
    lib = _libcuda()
    if lib is None:  # no driver: nothing runs, and nothing to make current
        return
    ctx = ctypes.c_void_p()
    if lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and ctx.value:
        return
    import torch
    dev = ctypes.c_int()
    if lib.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device() if index is None else index) == 0 and \
            lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0:
        lib.cuCtxSetCurrent(ctx)


def stream_capturing(index: int) -> bool:
    """Whether device ``index``'s current stream is capturing a CUDA graph (torch's own check reads the
    current device's stream, which need not be the launch's)."""
    import torch
    with torch.cuda.device(index):
        return torch.cuda.is_current_stream_capturing()


CAPTURE_ACTIVE = 1
"""``CU_STREAM_CAPTURE_STATUS_ACTIVE``: the capture status of a stream that is being captured."""


def capture_id(stream: int) -> int | None:
    """The driver's id of the CUDA graph capture under way on ``stream`` (a handle), unique to that capture
    within the process: a launch called many times in one capture can tell that capture from a later one
    on the same stream (``torch.cuda.graph`` captures every graph on one stream of its own). None when the
    stream is not capturing, or when the driver cannot say (no driver, no such entry point, an error)."""
    import ctypes
    fn = _capture_info()
    if fn is None:
        return None
    status, ident = ctypes.c_int(), ctypes.c_uint64()
    if fn(stream, ctypes.byref(status), ctypes.byref(ident), None, None, None) != 0 or status.value != CAPTURE_ACTIVE:
        return None
    return int(ident.value)


@functools.lru_cache(maxsize=1)
def _capture_info() -> Any:
    """The driver's ``cuStreamGetCaptureInfo_v2`` (CUDA 11.3 on): stream, status out, id out, then graph,
    dependencies and their count, all optional (passed as NULL). None without a driver or the entry point."""
    import ctypes
    lib = _libcuda()
    fn = getattr(lib, "cuStreamGetCaptureInfo_v2", None) if lib is not None else None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64),
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


@functools.lru_cache(maxsize=1)
def _libcuda() -> Any:
    import ctypes
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def _compiled_launch(launcher: Any) -> Any:
    """The compiled C launch function of a Triton launcher: its ``launch``, or the one that its
    tensor-descriptor wrapper closes over; None if neither is one (another Triton version)."""
    fn = getattr(launcher, "launch", None)
    if isinstance(fn, types.BuiltinFunctionType):
        return fn
    inner = [c.cell_contents for c in getattr(fn, "__closure__", None) or ()
             if isinstance(c.cell_contents, types.BuiltinFunctionType)]
    return inner[0] if len(inner) == 1 else None


def _argument_memo(compiled: Any, host_descriptors: Callable[[Sequence[Any]], list[Any]], tail: tuple[Any, ...]
                  ) -> tuple[dict[tuple[int, ...], tuple[Any, ...]], Callable[[Sequence[Any], tuple[int, ...]], tuple[Any, ...]]]:
    """The compiled launcher's kernel arguments for a launch on ``tensors`` at addresses ``ptrs``: the
    addresses, each of ``host_descriptors(tensors)`` encoded (the tensor map, then shape and strides, as
    Triton's own wrapper passes them), then ``tail``. Returns the memo (addresses -> arguments) and
    ``encode(tensors, ptrs)``, which makes the arguments of addresses the memo lacks and keeps them."""
    from triton.backends.nvidia.driver import make_tensordesc_arg
    metas = getattr(compiled.metadata, "tensordesc_meta", None)
    memo: dict[tuple[int, ...], tuple[Any, ...]] = {}

    def encode(tensors: Sequence[Any], ptrs: tuple[int, ...]) -> tuple[Any, ...]:
        if len(memo) >= LAUNCH_MEMO:
            memo.clear()
        descs = host_descriptors(tensors)
        if descs:
            current_context(tensors[0].device.index)
        encoded: list[Any] = []
        for desc, meta in zip(descs, metas or [None] * len(descs)):
            encoded += make_tensordesc_arg(desc, meta)
        args = memo[ptrs] = (*ptrs, *encoded, *tail)
        return args
    return memo, encode
