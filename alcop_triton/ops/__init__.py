"""The torch layer: drop-in replacements for torch's matrix products and convolutions, running alcop kernels.

``matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``linear`` (``gemm.py``) and ``conv1d``, ``conv2d``,
``conv3d`` (``conv.py``) take torch's arguments and follow its semantics; invalid arguments raise the
exception type torch raises, with a message naming the argument, its value and the rule. Keyword-only
extensions fuse epilogues into the kernel: ``linear(..., activation=, residual=)`` and
``convNd(..., activation=)``. Importing this package registers ``torch.ops.alcop.*``.

One module per op family holds its argument checks, its ``torch.library`` ops and fakes, its autograd
formulas and its kernel launch; ``route.py`` decides, per call, which way it runs (the fast path's
stored entry, autograd, the registered op, torch); ``checks.py`` holds the checks the families share.

Inputs alcop does not handle fall back to torch (logged once per reason; ``ALCOP_STRICT=1`` raises
``UnsupportedError``): anything that is not a plain strided dense tensor (``tensor_kinds``; freed
storage raises RuntimeError, as in torch), dtypes other than
float16/bfloat16/float32, devices other than CUDA and CPU, CUDA tensors while ``TRITON_INTERPRET=1``.
CPU tensors run in Triton's interpreter, which is slow: it exists for testing.
"""

from __future__ import annotations

from . import dsl_call  # noqa: F401  (registers torch.ops.alcop.dsl_call)
from .conv import conv1d, conv2d, conv3d
from .gemm import addmm, baddbmm, bmm, linear, matmul, mm

__all__ = ["addmm", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d", "linear", "matmul", "mm"]
