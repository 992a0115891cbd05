"""What a measurement worker reports about its device: who it is (``GpuIdentity``) and how fast it runs a
fixed calibration kernel (``calibration_ms``).

A tuning run spread over several GPUs (``workers.py``) names in every record the GPU that measured it, and
compares the workers' calibration times before it ranks their timings against each other.

The identity is a frozen, validated record: it is read back from databases and shipped tables, and
its strings are printed in tables, so each field is checked for type, length and control characters.

This module imports neither torch nor triton at import time (``measure.py`` says why).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import DatabaseError

MAX_FIELD = 200
"""Longest string field of an identity (a UUID is 40 characters, a driver string under 100)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

CPU_NAME = "cpu (triton interpreter)"
"""The ``name`` of a worker that measures in the Triton interpreter."""

CALIBRATION_GEMM = 4096
"""Size of the GPU calibration kernel: a 4096^3 float16 product (``torch.matmul``), some 0.1-0.3 ms on
Hopper: long enough for the eager timer to be stable to a fraction of a percent, short enough that the
calibration of a worker takes about a second. It reads its operands from L2-cold memory as a trial does."""

CALIBRATION_CPU = 192
"""Size of the CPU calibration kernel: a float32 192^3 product, the interpreter's stand-in (its trials
run Python and numpy on the CPU, so the CPU's speed is what makes them comparable)."""

CALIBRATION_REPS = 15
"""Repetitions whose median a CPU calibration reports."""


@dataclass(frozen=True)
class GpuIdentity:
    """The device one measurement was made on.

    Attributes:
        uuid: the device's UUID as the driver reports it ("GPU-..."); a CPU worker's label ("cpu-0").
        name: the device name ("NVIDIA H200"; ``CPU_NAME`` in the interpreter).
        sm_clock_mhz: the SM clock the driver reports as the device's maximum, MHz; 0 when unknown (CPU).
        driver: the driver version ("550.54.15"); "" when unknown (CPU).
    """

    uuid: str
    name: str
    sm_clock_mhz: int = 0
    driver: str = ""

    def __post_init__(self) -> None:
        for key in ("uuid", "name", "driver"):
            value = getattr(self, key)
            if not isinstance(value, str):
                raise DatabaseError(f"measured_on.{key}={value!r}: expected a string")
            if len(value) > MAX_FIELD or _CONTROL.search(value):
                raise DatabaseError(f"measured_on.{key}={value[:60]!r}: at most {MAX_FIELD} characters, "
                                    "no control characters")
        for key in ("uuid", "name"):
            if not getattr(self, key):
                raise DatabaseError(f"measured_on.{key} is empty: a measurement names the device it ran on")
        if type(self.sm_clock_mhz) is not int or not 0 <= self.sm_clock_mhz <= 100_000:
            raise DatabaseError(f"measured_on.sm_clock_mhz={self.sm_clock_mhz!r}: expected an integer in "
                                "[0, 100000] (0: unknown)")

    def to_dict(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "name": self.name, "sm_clock_mhz": self.sm_clock_mhz, "driver": self.driver}

    @classmethod
    def from_dict(cls, d: Any) -> "GpuIdentity":
        """Validate a stored identity (exact keys and JSON types); any problem raises DatabaseError."""
        if not isinstance(d, Mapping):
            raise DatabaseError(f"measured_on={d!r}: expected a JSON object")
        unknown = set(d) - {"uuid", "name", "sm_clock_mhz", "driver"}
        if unknown:
            raise DatabaseError(f"measured_on keys {sorted(unknown)} are unknown")
        if "uuid" not in d or "name" not in d:
            raise DatabaseError(f"measured_on={dict(d)!r}: needs 'uuid' and 'name'")
        return cls(d["uuid"], d["name"], d.get("sm_clock_mhz", 0), d.get("driver", ""))


def driver_version() -> str:
    """The NVIDIA driver's version ("550.54.15") from the kernel module; "" where it is not readable."""
    try:
        with open("/proc/driver/nvidia/version", encoding="ascii", errors="replace") as f:
            first = f.readline()
    except OSError:
        return ""
    found = re.search(r"\b(\d+\.\d+(?:\.\d+)*)\b", first.split("Kernel Module", 1)[-1])
    return found.group(1) if found else ""


def identify(device: str, label: str = "") -> GpuIdentity:
    """The identity of ``device`` ("cuda", "cuda:N" or "cpu") as seen by this process.

    ``label`` names a CPU worker ("cpu-<label>" is its uuid): interpreter workers have no device of
    their own to tell apart.
    """
    if not device.startswith("cuda"):
        return GpuIdentity(f"cpu-{label or os.getpid()}", CPU_NAME)
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid and not uuid.startswith("GPU-"):
        uuid = f"GPU-{uuid}"  # torch prints the bare UUID; nvidia-smi and CUDA_VISIBLE_DEVICES use this form
    clock_khz = int(getattr(props, "clock_rate", 0) or 0)
    return GpuIdentity(uuid or f"{props.name}@{device}", str(props.name), clock_khz // 1000, driver_version())


def calibration_ms(device: str) -> float:
    """Median time (ms) of the fixed calibration kernel on ``device`` (``CALIBRATION_GEMM``, or on a CPU
    ``CALIBRATION_CPU``), timed as trials are timed (``measure.time_gpu``) on a GPU."""
    import torch

    if device.startswith("cuda"):
        from .measure import time_gpu

        return time_gpu(_CalibrationRunner(device), 0)[0]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(CALIBRATION_CPU, CALIBRATION_CPU, generator=g)
    b = torch.randn(CALIBRATION_CPU, CALIBRATION_CPU, generator=g)
    threads = torch.get_num_threads()
    # One thread: the product then times the core, not how many cores other processes leave free.
    torch.set_num_threads(1)
    try:
        for _ in range(3):
            torch.mm(a, b)
        times = []
        for _ in range(CALIBRATION_REPS):
            t0 = time.perf_counter()
            torch.mm(a, b)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times)


class _CalibrationRunner:
    """The calibration product with the runner interface ``measure.time_gpu`` times."""

    def __init__(self, device: str) -> None:
        self.device = device

    def inputs(self, seed: int) -> tuple[Any, ...]:
        import torch

        g = torch.Generator(device=self.device).manual_seed(seed)
        n = CALIBRATION_GEMM
        return (torch.randn(n, n, generator=g, device=self.device, dtype=torch.float16),
                torch.randn(n, n, generator=g, device=self.device, dtype=torch.float16))

    def run(self, inputs: tuple[Any, ...]) -> Any:
        import torch

        return torch.matmul(*inputs)


__all__ = ["CPU_NAME", "GpuIdentity", "calibration_ms", "driver_version", "identify"]
