"""SelectAsyncCopy: choose each operand's copy mechanism (cp.async pointers or TMA descriptors)."""

from __future__ import annotations

import dataclasses

from ..analysis.plan import PipelinePlan
from ..loop_ir import Copy, InitAcc, Kernel, MakeDescriptor, Node, Transformer


class SelectAsyncCopy(Transformer):
    """Mark the copies of TMA operands and build their descriptors once, before the reduction loop."""

    def __init__(self, plan: PipelinePlan) -> None:
        self.plan = plan

    def visit_Copy(self, node: Copy) -> Node:
        mech = self.plan.mechanism(node.role)
        return node if node.mechanism == mech else dataclasses.replace(node, mechanism=mech)

    def visit_InitAcc(self, node: InitAcc) -> tuple[Node, ...]:
        descs = tuple(MakeDescriptor(role) for role, m in self.plan.async_copy if m == "tma")
        return (node,) + descs

    def __call__(self, k: Kernel) -> Kernel:
        return k.replace(body=self.visit_body(k.body))
