"""``torch.ops.alcop.dsl_call(kernel, inputs)``: a registered DSL kernel run by key (a convolution's
gradient kernels, the gradients of ``@alcop_triton.op`` ops), with its fake and its (refusing) backward."""

from __future__ import annotations

from typing import Any

import torch

from ..dsl_kernels import dsl_output, dsl_te, run_dsl, size_env
from .route import OpRoutes, call


def _registered(kernel: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    return call(("alcop::dsl_call", kernel), tuple(inputs), (), OpRoutes(lambda *ts: run_dsl(kernel, ts)))


dsl_call_op = torch.library.custom_op("alcop::dsl_call", _registered, mutates_args=(),
                                      schema="(str kernel, Tensor[] inputs) -> Tensor")


@dsl_call_op.register_fake
def _fake(kernel: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    spec, phs, out = dsl_te(kernel)
    return dsl_output(spec, out, size_env(f"dsl_call[{kernel}]", phs, inputs), inputs[0])


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.kernel = inputs[0]


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    # The kernels called by key compute gradients (a convolution's, an @alcop_triton.op's): reaching this
    # formula means a second derivative was asked for.
    raise NotImplementedError(
        f"alcop_triton: kernel {ctx.kernel!r} computes a gradient; differentiating it again (double backward, "
        "e.g. a gradient penalty through a convolution) is not supported. Compute that part with torch's own "
        "ops (outside alcop_triton.patched()).")


dsl_call_op.register_autograd(_backward, setup_context=_setup)


def BACKWARD(kernel: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    """``alcop::dsl_call`` as the backward formulas call it (``route.backward_op``); the op has no autograd
    route of its own: where autograd must see it, the registered op's (whose backward refuses)."""
    registered = lambda *ts: torch.ops.alcop.dsl_call(kernel, list(ts))  # noqa: E731
    return call(("alcop::dsl_call", kernel), tuple(inputs), (),
                OpRoutes(lambda *ts: run_dsl(kernel, ts), registered, None, registered))
