"""Runtime: generated source -> file in the cache directory -> imported ``@triton.jit`` function.

``@triton.jit`` reads its source with ``inspect``, so kernels must live in real files. Files are
content-addressed (sha256 of the source) and written atomically (temp file + ``os.replace``), so
concurrent processes never see half a kernel. A cache entry that cannot be read back as exactly
the source (bytes that are not UTF-8, a directory where the file belongs, a file where a directory
belongs) is a miss: what is in the way is renamed aside and the kernel is written again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from . import config

_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()


FILE_STEM_BYTES = 100
"""Longest kernel file name kept as is; a longer kernel name gets a file named ``kernel.py``
(the directory is content-addressed, so the name only serves readers of tracebacks)."""


def _move_aside(p: Path) -> None:
    """Rename ``p`` out of the way (never delete: it may be someone's data); losing a race is fine."""
    try:
        os.replace(p, p.with_name(f".{p.name}.broken-{os.getpid()}-{time.monotonic_ns()}"))
    except FileNotFoundError:
        pass


def _make_dirs(d: Path) -> None:
    """``mkdir -p d``, renaming aside any file that stands where one of its directories belongs."""
    for parent in reversed([d, *d.parents]):
        if parent.exists() and not parent.is_dir():
            _move_aside(parent)
    d.mkdir(parents=True, exist_ok=True)


def _read(path: Path) -> str | None:
    """The text of a cache entry; None when it is missing or unreadable as UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def write_atomic(path: Path, text: str) -> None:
    _make_dirs(path.parent)
    if path.is_dir():
        _move_aside(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the whole new one
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_kernel(source: str, name: str) -> tuple[Any, Path]:
    """The jitted function ``name`` defined by ``source`` (cached per process and on disk)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    with _LOCK:
        if digest in _LOADED:
            return _LOADED[digest]
        stem = name if len(name.encode()) <= FILE_STEM_BYTES else "kernel"
        path = config.cache_dir() / "kernels" / digest / f"{stem}.py"
        if _read(path) != source:
            write_atomic(path, source)
        if config.debug_level() >= 3:
            print(f"[alcop] kernel {name} at {path}:\n{source}", file=sys.stderr)
        mod_name = f"alcop_kernels_{digest}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        spec.loader.exec_module(mod)
        _LOADED[digest] = (getattr(mod, name), path)
        return _LOADED[digest]


def launcher(fn: Any, device_type: str) -> Any:
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


def ensure_allocator() -> None:
    """Device-side tensor descriptors (TMA) need global scratch memory from an allocator.

    Triton keeps the allocator in a ContextVar, so every thread (the tuner compiles and launches
    from worker threads) starts without one: check at each CUDA launch, which costs a lookup.
    """
    from triton.runtime import _allocation
    if _allocation._allocator.get() is not _allocation._NULL_ALLOCATOR:
        return
    import torch
    import triton

    def alloc(size: int, alignment: int, stream: Any) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device="cuda")
    triton.set_allocator(alloc)


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
