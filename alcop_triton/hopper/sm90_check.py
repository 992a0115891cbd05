"""Compile a generated kernel for sm90 without a GPU: Triton's compiler and the ptxas it ships run on CPU.

``compile_sm90`` returns what a GPU-less check can say of a variant: whether its PTX issues wgmma and TMA
copies, and the shared memory Triton allocated. Run it in a process that has not run Triton's interpreter
(the interpreter, once it has run kernels, patches ``triton.language``).
"""

from __future__ import annotations

from typing import Any

from .config import HopperConfig
from .emit import emit
from .launch import kernel, launch_args


def compile_sm90(config: HopperConfig, dtype: str, layout: str, m: int = 1000, n: int = 776, k: int = 520, *,
                 bias: bool = False, activation: str | None = None, residual: bool = False) -> dict[str, Any]:
    """{name, wgmma, tma, shared, maxnreg}: the kernel of (config, dtype, layout) compiled for an H100."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    ks = emit(config, dtype, layout, bias=bias, activation=activation, residual=residual)
    fn = kernel(ks)
    dt = getattr(torch, dtype)
    a = torch.zeros(m, k, dtype=dt) if layout[0] == "n" else torch.zeros(k, m, dtype=dt).t()
    b = torch.zeros(k, n, dtype=dt) if layout[1] == "n" else torch.zeros(n, k, dtype=dt).t()
    c = torch.zeros(m, n, dtype=dt)
    args, options = launch_args(ks, a, b, c, torch.zeros(n, dtype=dt) if bias else None,
                                torch.zeros(m, n, dtype=dt) if residual else None)
    short = {torch.float16: "fp16", torch.bfloat16: "bf16"}
    sig: dict[str, str] = {}
    for name, value in zip(fn.arg_names, args):  # what JITFunction.run would specialise on
        if isinstance(value, torch.Tensor):
            sig[name] = "*" + short[value.dtype]
        elif hasattr(value, "block_shape"):
            sig[name] = f"tensordesc<{short[value.base.dtype]}[{', '.join(map(str, value.block_shape))}],{value.layout!r}>"
        else:
            sig[name] = "i32"
    compiled = triton.compile(GluonASTSource(fn, sig, {}), target=GPUTarget("cuda", 90, 32), options=options)
    ptx = compiled.asm["ptx"]
    return {"name": ks.name, "wgmma": "wgmma.mma_async" in ptx, "tma": "cp.async.bulk.tensor" in ptx,
            "shared": int(compiled.metadata.shared), "maxnreg": config.maxnreg}
