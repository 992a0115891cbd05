"""SelectAsyncCopy: choose each operand's copy mechanism (cp.async pointers or TMA descriptors)."""

from __future__ import annotations

import dataclasses

from ..analysis.plan import PipelinePlan
from ..loop_ir import Copy, For, InitAcc, Kernel, MakeDescriptor, Node, Transformer


class SelectAsyncCopy(Transformer):
    """Mark the copies of TMA operands and build their descriptors once, before the reduction loop
    (before the tile loop of a persistent kernel, unless a batch index moves the base per tile)."""

    def __init__(self, plan: PipelinePlan) -> None:
        self.plan = plan
        self.at_acc: tuple[Node, ...] = ()

    def visit_Copy(self, node: Copy) -> Node:
        mech = self.plan.mechanism(node.role)
        return node if node.mechanism == mech else dataclasses.replace(node, mechanism=mech)

    def visit_InitAcc(self, node: InitAcc) -> tuple[Node, ...]:
        return (node,) + self.at_acc

    def __call__(self, k: Kernel) -> Kernel:
        descs = tuple(MakeDescriptor(role) for role, m in self.plan.async_copy if m == "tma")
        hoist = not k.axes["b"] and any(isinstance(n, For) and n.role == "tiles" for n in k.body)
        self.at_acc = () if hoist else descs
        body = self.visit_body(k.body)
        if hoist:
            at = next(i for i, n in enumerate(body) if isinstance(n, For) and n.role == "tiles")
            body = body[:at] + descs + body[at:]
        return k.replace(body=body)
