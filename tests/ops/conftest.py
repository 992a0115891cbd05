"""Helpers for the drop-in op tests: tolerances, float64 references, layouts, op recording.

CPU tensors run in Triton's interpreter, so sizes stay small (dims <= ~40).
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from alcop_triton import choose_config, fastpath
from alcop_triton.autotune import dispatch
from alcop_triton.autotune.database import Database, TuningRecord
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

# fp32 on CPU: the interpreter computes fp32 dots in full fp32. 16-bit: output rounding dominates.
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected| (a norm-wise relative error), in float64."""
    a, e = actual.detach().double(), expected.detach().double()
    return ((a - e).abs().max() / e.abs().max().clamp_min(1e-12)).item() if e.numel() else 0.0


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None) -> None:
    """``actual`` (any dtype) against a float64 reference, within the dtype's tolerance."""
    assert tuple(actual.shape) == tuple(expected.shape), (tuple(actual.shape), tuple(expected.shape))
    assert not actual.isnan().any(), "NaN in the result"
    tol = TOL[dtype or actual.dtype]
    err = rel_err(actual, expected)
    assert err <= tol, f"relative error {err:.3g} > {tol:g}"


def f64(*ts: torch.Tensor | None) -> list[Any]:
    return [t.detach().double() if isinstance(t, torch.Tensor) else t for t in ts]


def with_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values stored 'contiguous', 'transposed' (last two dims swapped in memory),
    'strided' (every other element of a larger buffer: no unit stride) or 'channels_last'."""
    if layout == "contiguous" or (layout == "transposed" and t.dim() < 2):
        return t.contiguous()
    if layout == "transposed":
        return t.mT.contiguous().mT
    if layout == "strided":
        big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        view = big[..., ::2]
        view.copy_(t)
        return view
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    raise ValueError(layout)


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


class OpRecorder(TorchDispatchMode):
    """Records the names of the ops dispatched below autograd (e.g. 'alcop.mm', 'aten.mm')."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func.overloadpacket).replace("aten::", "aten.").replace("alcop::", "alcop."))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def record_ops() -> Callable[[], OpRecorder]:
    return OpRecorder


@pytest.fixture(autouse=True)
def fallbacks(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[list[tuple[str, str]]]:
    """The (op, reason) of every fallback to torch during a test. A test that does not ask for
    this fixture fails if any happened: its ops must have run generated kernels."""
    from alcop_triton import fallback
    calls: list[tuple[str, str]] = []
    real = fallback.use_torch

    def record(op: str, reason: str) -> None:
        calls.append((op, reason))
        real(op, reason)

    monkeypatch.setattr(fallback, "use_torch", record)
    yield calls
    if "fallbacks" not in inspect.signature(request.function).parameters:
        assert not calls, f"ops fell back to torch: {calls}"


RECORDS_GPU = get_spec("H100")
"""The GPU whose records ``records`` writes, and whose records decide calls on CPU tensors within it."""


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Workload, bool], None]]:
    """``records(workload, alcop_faster, scale=1.0)`` measures ``workload`` in a fresh database: alcop's config
    at 0.01 ms and torch at 0.03 ms, or the other way round, both times ``scale``. No shipped table is read."""
    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "tuning.sqlite"))
    monkeypatch.setattr(dispatch, "default_tables", lambda: [])
    db = Database(tmp_path / "tuning.sqlite")

    def add(w: Workload, alcop_faster: bool, scale: float = 1.0) -> None:
        ms, torch_ms = (0.01 * scale, 0.03 * scale) if alcop_faster else (0.03 * scale, 0.01 * scale)
        db.add(dataclasses.replace(TuningRecord.from_result(w, MeasureResult(KernelConfig(), ms, None), RECORDS_GPU),
                                   torch_ms=torch_ms))
        fastpath.invalidate()  # as a database that gained a record does in a running process
    torch._dynamo.reset()
    with choose_config.interpreter_records(RECORDS_GPU):
        yield add
    torch._dynamo.reset()


def target_name(target: Any) -> str:
    """A graph node's target as a name: ``alcop.routed_mm`` for a deciding call (a function Dynamo's graph
    holds, ``ops.traced.define``), the op's own name for an op (``alcop.mm``, ``aten.mm.default``)."""
    if inspect.isfunction(target):
        return f"{target.__module__}.{target.__name__}"
    return str(target)
