"""Every environment setting alcop reads, typed, read when used (so tests can set them per case).

===========================  ============================================================================
variable                     read by
===========================  ============================================================================
``ALCOP_CACHE_DIR``          ``cache_dir``: where generated kernels live
``ALCOP_DB``                 ``db_location`` (a SQLite path or a ``postgresql://`` URL), ``db_path``:
                             the tuning database (default: a file in the user's data directory)
``ALCOP_DEBUG``              ``debug_level``
``ALCOP_STRICT``             ``strict``: raise instead of clamping or falling back (a key of every cache
                             whose content depends on it: the fast path's signatures, compiled kernels)
``ALCOP_AUTOTUNE``           ``autotune``: tune unseen shapes at call time
``ALCOP_NATIVE``             ``native``: the fast path's hit compiled from C
``ALCOP_DEPENDENT_LAUNCH``   ``dependent_launch``: programmatic dependent launch on sm90+
``ALCOP_FP32``               ``fp32_precision``: float32 products' input precision without TF32
``TRITON_INTERPRET``         ``interpret``: Triton's CPU interpreter
``DISABLE_MMA_V3``           ``mma_v3_disabled``: Triton's switch off wgmma (the MMA path the model assumes)
===========================  ============================================================================

Each boolean accepts 0/1, true/false, yes/no, on/off (any case) and refuses anything else with a
``ValueError`` naming the variable and its value.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Iterator


# The environment's own table (CPython's os._Environ: a dict lookup, no encoding or decoding) and a
# variable's key in it; elsewhere the public mapping. For knobs that every call reads (the fast path's
# signature holds them).
ENV_TABLE: Any = getattr(os.environ, "_data", None)
_ENCODE: Any = getattr(os.environ, "encodekey", None)
if not isinstance(ENV_TABLE, dict) or _ENCODE is None:
    ENV_TABLE, _ENCODE = os.environ, None


def env_key(name: str) -> Any:
    """``name`` as ``ENV_TABLE`` keys it (``ENV_TABLE.get(env_key(name))``: the raw value, or None)."""
    return name if _ENCODE is None else _ENCODE(name)


def _flag(name: str, default: str = "0") -> bool:
    v = os.environ.get(name, default).strip().lower()
    if v in ("", "0", "false", "no", "off"):
        return False
    if v in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"Unable to use {name}={v!r}: expected 0/1, true/false, yes/no or on/off")


def cache_dir() -> Path:
    """Where generated kernels live: ``ALCOP_CACHE_DIR``, else the user's cache directory."""
    env = os.environ.get("ALCOP_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
    except ImportError:  # a bare GPU image may lack it; follow the XDG default by hand
        return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "alcop_triton"
    return Path(platformdirs.user_cache_dir("alcop_triton"))


def data_dir() -> Path:
    """Where the tuning database lives by default: the user's data directory."""
    try:
        import platformdirs
    except ImportError:  # a bare GPU image may lack it; follow the XDG default by hand
        return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "alcop_triton"
    return Path(platformdirs.user_data_dir("alcop_triton", appauthor=False))


def db_location() -> str | None:
    """``ALCOP_DB`` as given: a SQLite file path or a ``postgresql://`` URL; None where unset (or empty)."""
    return os.environ.get("ALCOP_DB") or None


def db_path() -> Path | None:
    """``ALCOP_DB`` as a file path (``~`` expanded), None where unset (or empty)."""
    env = db_location()
    return Path(env).expanduser() if env else None


def debug_level() -> int:
    """``ALCOP_DEBUG``: 1 logs fallbacks and clamps, 3 also prints every generated kernel."""
    v = os.environ.get("ALCOP_DEBUG", "0")
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"Unable to use ALCOP_DEBUG={v!r}: expected an int") from None


def strict() -> bool:
    """``ALCOP_STRICT=1``: raise instead of clamping a pipeline depth or falling back to torch."""
    return _flag("ALCOP_STRICT")


def autotune() -> bool:
    """``ALCOP_AUTOTUNE=1``: tune unseen shapes at call time (otherwise: database, then the model)."""
    return _flag("ALCOP_AUTOTUNE")


def native() -> bool:
    """``ALCOP_NATIVE`` (default on): the fast path's hit (the call-site check, a stored call's allocation
    and launch) runs compiled from C where a C compiler is at hand (``fastpath.native``); 0 keeps it in
    Python. Read once per process."""
    return _flag("ALCOP_NATIVE", "1")


def dependent_launch() -> bool:
    """``ALCOP_DEPENDENT_LAUNCH`` (default on): on sm90 and later, kernels are launched with programmatic
    dependent launch and wait for the previous kernel on the stream before their first memory access;
    ``0`` launches them one after another as on older GPUs (for a profiler or driver that mishandles the
    launch attribute). Read when a kernel variant is built, so set it before the first call."""
    return _flag("ALCOP_DEPENDENT_LAUNCH", "1")


def mma_v3_disabled() -> bool:
    """``DISABLE_MMA_V3=1``: Triton compiles sm90 dots with mma.sync instead of wgmma."""
    return _flag("DISABLE_MMA_V3")


def interpret() -> bool:
    """``TRITON_INTERPRET=1``: Triton runs kernels in its CPU interpreter."""
    return _flag("TRITON_INTERPRET")


def allow_tf32() -> bool:
    """Whether float32 products may round their inputs to TF32: torch's cuBLAS switch, read the way every
    supported torch spells it (``fp32_precision`` since torch 2.9, where reading the legacy ``allow_tf32``
    raises once the new API has been used; ``allow_tf32`` before).

    Every float32 call reads it (its fast-path signature holds it), so it calls torch's C getters, bound
    on the first read: ``torch.backends.cuda.matmul.fp32_precision`` reaches the same getter through a
    module ``__getattr__`` that costs a float32 call about 2 µs, and 8 µs when the CPU's caches are cold.
    """
    global _tf32_read
    if _tf32_read is None:
        _tf32_read = _tf32_reader()
    return _tf32_read()


_tf32_read: Callable[[], bool] | None = None

FP32_PRECISIONS = ("ieee", "tf32x3")
"""What ``ALCOP_FP32`` may ask of a float32 product that torch's TF32 switch keeps off TF32."""
_FP32_KEY = env_key("ALCOP_FP32")


def fp32_precision() -> str:
    """The input precision of alcop's float32 products (``tl.dot``'s ``input_precision``).

    "tf32" where torch's TF32 switch allows it (``allow_tf32``); otherwise ``ALCOP_FP32``: "ieee" (the
    default, as torch: fused multiply-adds) or "tf32x3", each operand split into a TF32 part and a TF32
    remainder and three tensor-core products added (the remainders' product dropped). Not IEEE arithmetic,
    but on the H100 it measured 2-5x closer to a float64 product than IEEE and than cuBLAS's float32 GEMM,
    gave torch's infinities and NaNs for an infinite operand element, and ran at 0.76-1.49x cuBLAS where
    IEEE runs at 0.20-0.89x (``docs/decisions.md#d12``).
    """
    if allow_tf32():
        return "tf32"
    raw = ENV_TABLE.get(_FP32_KEY)
    if raw is None:
        return "ieee"
    v = (os.fsdecode(raw) if isinstance(raw, bytes) else raw).strip().lower() or "ieee"
    if v not in FP32_PRECISIONS:
        raise ValueError(f"Unable to use ALCOP_FP32={v!r}: expected one of {FP32_PRECISIONS}")
    return v


def _tf32_reader() -> Callable[[], bool]:
    import torch

    get = getattr(torch._C, "_get_fp32_precision_getter", None)
    if get is None:  # torch < 2.9: the legacy flag
        legacy: Callable[[], bool] = torch._C._get_cublas_allow_tf32
        return legacy

    def read() -> bool:
        precision = get("cuda", "matmul")
        # "none" inherits the backend-wide setting (torch.backends.fp32_precision)
        return precision == "tf32" or (precision == "none" and get("generic", "all") == "tf32")
    return read


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Within the block, float32 matmuls and convolutions (alcop's kernels, cuBLAS and cuDNN) use TF32
    (``enabled``) or IEEE fp32; the previous settings after."""
    import torch

    matmul = torch.backends.cuda.matmul
    if getattr(matmul, "fp32_precision", None) is None:  # torch < 2.9: the legacy flags
        switches: list[tuple[object, str]] = [(matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32")]
        value: bool | str = enabled
    else:
        # cudnn.conv is set on torch's module-replacing class, which its type stubs do not declare.
        switches = [(matmul, "fp32_precision"), (getattr(torch.backends.cudnn, "conv"), "fp32_precision")]
        value = "tf32" if enabled else "ieee"
    old = [getattr(obj, name) for obj, name in switches]
    for obj, name in switches:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for (obj, name), v in zip(switches, old):
            setattr(obj, name, v)
