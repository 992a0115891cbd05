"""InjectSharedPipeline: the shared-memory level becomes ``num_stages`` on the reduction loop.

Triton's software pipeliner then turns the chunk loads into multi-buffered async copies (cp.async,
or TMA for descriptor loads) issued ``num_stages - 1`` chunks ahead, with the commit/wait
synchronisation ALCOP inserts by hand (paper section 3).
"""

from __future__ import annotations

import dataclasses

from ..analysis.plan import PipelinePlan
from ..loop_ir import For, Kernel, Node, Transformer


class InjectSharedPipeline(Transformer):
    def __init__(self, plan: PipelinePlan) -> None:
        self.plan = plan

    def visit_For(self, node: For) -> Node:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if node.role != "chunk" or node.kind == "static_range":
            return node
        s = self.plan.smem_stages
        note = (f"pipeline: {s} shared-memory stages (async copies issued {s - 1} chunk(s) ahead)" if s > 1
                else "pipeline: 1 stage (no shared-memory pipelining)")
        return dataclasses.replace(node, kind="range", num_stages=s, note=note)

    def __call__(self, k: Kernel) -> Kernel:
        return k.replace(body=self.visit_body(k.body), num_stages=self.plan.smem_stages)
