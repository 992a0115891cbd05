"""alcop_triton: automatic multi-stage, multi-level load-compute pipelining (ALCOP) on Triton."""

from __future__ import annotations

__version__ = "0.1.0"

# The operator library lives in the top-level kernels/ directory and installs as alcop_triton.kernels
# (setup.cfg package_dir); in a source checkout, resolve it from there the same way.
import os as _os  # noqa: E402

_src_kernels = _os.path.join(_os.path.dirname(_os.path.dirname(__file__)), "kernels")
if _os.path.isfile(_os.path.join(_src_kernels, "__init__.py")) and not _os.path.isdir(
        _os.path.join(_os.path.dirname(__file__), "kernels")):
    __path__.append(_os.path.dirname(_src_kernels))  # noqa: F821 - the package's own __path__

from . import te  # noqa: E402
from .build import CompiledKernel, build  # noqa: E402
from .errors import (AlcopError, OutOfResources, PipelineError, ScheduleError, TuningError,  # noqa: E402
                     UnsupportedError)
from .records import KernelConfig, Workload  # noqa: E402
from .schedule import Schedule  # noqa: E402

__all__ = ["AlcopError", "CompiledKernel", "KernelConfig", "OutOfResources", "PipelineError", "Schedule",
           "ScheduleError", "TuningError", "UnsupportedError", "Workload", "build", "te"]
