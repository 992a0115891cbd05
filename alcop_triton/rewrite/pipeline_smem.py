"""InjectSharedPipeline: the shared-memory level becomes ``num_stages`` on the reduction loop.

Triton's software pipeliner then turns the chunk loads into multi-buffered async copies (cp.async,
or TMA for descriptor loads) issued ``num_stages - 1`` chunks ahead, with the commit/wait
synchronisation ALCOP inserts by hand (paper section 3).

In a persistent kernel the reduction loop sits in a loop over output tiles. Pipelined on its own
it would drain at every tile's end; instead the tile loop carries the depth with ``flatten=True``:
Triton fuses the two loops into one and pipelines across the boundary, so the next tile's first
chunks are copied during this tile's epilogue (inner-pipeline fusion, paper Fig. 7, one level up).
"""

from __future__ import annotations

import dataclasses

from ..analysis.plan import PipelinePlan
from ..loop_ir import For, Kernel, Node, Transformer


class InjectSharedPipeline(Transformer):
    def __init__(self, plan: PipelinePlan) -> None:
        self.plan = plan

    def visit_For(self, node: For) -> Node:
        node = self.generic_visit(node)
        s = self.plan.smem_stages
        if node.role == "tiles":
            chunk = next((c for c in node.body if isinstance(c, For) and c.role == "chunk"), None)
            if chunk is None or chunk.kind != "range" or s == 1:
                return dataclasses.replace(node, kind="range", note="persistent: each program loops over output tiles")
            inner = dataclasses.replace(chunk, num_stages=None,
                                        note="reduction loop: flattened into the tile loop, which carries its stages")
            return dataclasses.replace(
                node, kind="range", num_stages=s, flatten=True, body=tuple(inner if c is chunk else c for c in node.body),
                note=f"persistent tile loop, flattened with the reduction loop: {s} shared-memory stages whose async "
                     f"copies run {s - 1} chunk(s) ahead across tile boundaries (the next tile loads during this "
                     "tile's epilogue)")
        if node.role != "chunk" or node.kind == "static_range":
            return node
        note = (f"pipeline: {s} shared-memory stages (async copies issued {s - 1} chunk(s) ahead)" if s > 1
                else "pipeline: 1 stage (no shared-memory pipelining)")
        return dataclasses.replace(node, kind="range", num_stages=s, note=note)

    def __call__(self, k: Kernel) -> Kernel:
        return k.replace(body=self.visit_body(k.body), num_stages=self.plan.smem_stages)
