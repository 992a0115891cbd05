"""Program transformation: the planned pipeline applied to the loop nest, one pass per line."""

from __future__ import annotations

from ..analysis.plan import PipelinePlan
from ..loop_ir import Kernel
from .async_copy import SelectAsyncCopy
from .pipeline_smem import InjectSharedPipeline
from .prefetch_reg import PrefetchRegisters


def apply_pipeline(k: Kernel, plan: PipelinePlan) -> Kernel:
    # choose cp.async or TMA per operand first: the prefetch prologue must copy the same way
    k = SelectAsyncCopy(plan)(k)
    # register level: split chunks into sub-tiles and prefetch them (prologue, shift, wrap, fusion)
    k = PrefetchRegisters(plan, k.constexprs["REG_SPLIT"])(k)
    # shared level last: it only annotates the chunk loop that the register pass rebuilt
    k = InjectSharedPipeline(plan)(k)
    copies = [f"{r}={m}" for r, m in plan.async_copy] + (["out=tma"] if k.descriptor("out") else [])
    passes = (f"SelectAsyncCopy({', '.join(copies) or 'no staged operands'})",
              f"PrefetchRegisters(reg_stages={plan.reg_stages}, reg_split={k.constexprs['REG_SPLIT']})",
              f"InjectSharedPipeline(num_stages={plan.smem_stages})")
    return k.replace(passes=k.passes + passes)


__all__ = ["InjectSharedPipeline", "PrefetchRegisters", "SelectAsyncCopy", "apply_pipeline"]
