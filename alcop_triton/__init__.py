"""alcop_triton: automatic multi-stage, multi-level load-compute pipelining (ALCOP) on Triton."""

from __future__ import annotations

from .version import __version__

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402

# Without CUDA, kernels run in Triton's CPU interpreter, which is chosen when triton is imported:
# turn it on if triton has not been imported yet (an explicit TRITON_INTERPRET setting wins).
if "triton" not in _sys.modules and "TRITON_INTERPRET" not in _os.environ:
    import torch as _torch
    if not _torch.cuda.is_available():
        _os.environ["TRITON_INTERPRET"] = "1"

from . import te  # noqa: E402
from .build import CompiledKernel, build  # noqa: E402
from .errors import (AlcopError, OutOfResources, PipelineError, ScheduleError, TuningError,  # noqa: E402
                     UnsupportedError)
from .records import KernelConfig, Workload  # noqa: E402
from .schedule import Schedule  # noqa: E402
from .ops import addmm, baddbmm, bmm, conv1d, conv2d, conv3d, linear, matmul, mm  # noqa: E402  (registers torch.ops.alcop.*)
from .patch import disable, enable, is_enabled, patched  # noqa: E402
from .compiling import compile  # noqa: E402
from .dsl_op import DslOp, op  # noqa: E402
from .choose_config import use_config  # noqa: E402
from .model import predict_times  # noqa: E402
from .autotune.dispatch import best_config  # noqa: E402

__all__ = ["AlcopError", "CompiledKernel", "DslOp", "KernelConfig", "OutOfResources", "PipelineError", "Schedule",
           "ScheduleError", "TuningError", "UnsupportedError", "Workload", "addmm", "baddbmm", "bmm", "build", "compile", "conv1d",
           "conv2d", "conv3d", "best_config", "disable", "enable", "is_enabled", "linear", "matmul", "mm", "op", "patched",
           "predict_times", "te", "use_config"]
